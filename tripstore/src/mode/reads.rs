//! The read share: in `shadow`, which rows' reads go to Schemaless, by
//! row key and column, and changing it.

use std::collections::BTreeMap;

use schemaless::RowKey;
use serde::Serialize;
use sqlx::PgPool;

use super::*;
use crate::error::Error;

/// The share of reads served by Schemaless in `shadow`, in basis points
/// (1/100 of a percent): one for all columns and any set per column.
///
/// Which store answers a read is decided by its row key alone
/// ([`ReadShare::bucket`]), so that one row is always answered by the same
/// store at a given share, and a row served by Schemaless at some share
/// stays on Schemaless at every higher one.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct ReadShare {
    /// The share of every column without one of its own.
    pub default_bp: u16,
    /// Shares set for single columns.
    pub columns: BTreeMap<String, u16>,
}

impl Default for ReadShare {
    /// Everything to Schemaless: `shadow` as it was before shares.
    fn default() -> ReadShare {
        ReadShare {
            default_bp: ReadShare::ALL,
            columns: BTreeMap::new(),
        }
    }
}

impl ReadShare {
    /// 100%, in basis points.
    pub const ALL: u16 = 10_000;

    /// The share of `column` (the default for reads of several columns).
    pub fn share(&self, column: Option<&str>) -> u16 {
        column
            .and_then(|c| self.columns.get(c).copied())
            .unwrap_or(self.default_bp)
    }

    /// Whether a read of `row_key` (in `column`, if the read names one)
    /// is served by Schemaless at this share.
    pub fn serves_schemaless(&self, row_key: &RowKey, column: Option<&str>) -> bool {
        ReadShare::bucket(row_key) < self.share(column)
    }

    /// Whether every share is 100%.
    pub fn is_full(&self) -> bool {
        self.default_bp == ReadShare::ALL && self.columns.values().all(|&bp| bp == ReadShare::ALL)
    }

    /// The row's place among 10,000 buckets. A hash of the key rather
    /// than its bytes: shards are chosen from the key too, and a share
    /// must spread over all shards, not fill some of them first.
    pub fn bucket(row_key: &RowKey) -> u16 {
        // FNV-1a over the 16 bytes, then a 64-bit finalizer (splitmix's):
        // stable across versions and platforms, which a share must be.
        let mut h: u64 = 0xcbf2_9ce4_8422_2325;
        for &b in row_key.as_bytes() {
            h ^= u64::from(b);
            h = h.wrapping_mul(0x0000_0100_0000_01b3);
        }
        h ^= h >> 30;
        h = h.wrapping_mul(0xbf58_476d_1ce4_e5b9);
        h ^= h >> 27;
        h = h.wrapping_mul(0x94d0_49bb_1331_11eb);
        h ^= h >> 31;
        (h % u64::from(ReadShare::ALL)) as u16
    }

    /// `"12.5%"`.
    pub fn percent(bp: u16) -> String {
        let text = format!("{:.2}", f64::from(bp) / 100.0);
        let text = text.trim_end_matches('0').trim_end_matches('.');
        format!("{text}%")
    }

    /// Parses a percentage from 0 to 100 with at most two decimals
    /// (`"1"`, `"0.5"`, `"100"`, an optional `%`), into basis points.
    pub fn parse_percent(text: &str) -> Result<u16, Error> {
        let bad = || Error::BadShare(text.to_string());
        let number = text.trim().trim_end_matches('%');
        let (whole, fraction) = match number.split_once('.') {
            Some((whole, fraction)) => (whole, Some(fraction)),
            None => (number, None),
        };
        let digits = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
        let fraction_ok = fraction.is_none_or(|f| digits(f) && f.len() <= 2);
        if !digits(whole) || !fraction_ok {
            return Err(bad());
        }
        let whole: u32 = whole.parse().map_err(|_| bad())?;
        let fraction: u32 = format!("{:0<2}", fraction.unwrap_or(""))
            .parse()
            .map_err(|_| bad())?;
        let bp = whole.checked_mul(100).and_then(|w| w.checked_add(fraction));
        match bp {
            Some(bp) if bp <= u32::from(ReadShare::ALL) => Ok(bp as u16),
            _ => Err(bad()),
        }
    }

    /// One line: `"50% (NOTES: 100%)"`.
    pub fn describe(&self) -> String {
        let mut text = ReadShare::percent(self.default_bp);
        if !self.columns.is_empty() {
            let each: Vec<String> = self
                .columns
                .iter()
                .map(|(c, bp)| format!("{c}: {}", ReadShare::percent(*bp)))
                .collect();
            text.push_str(&format!(" ({})", each.join(", ")));
        }
        text
    }

    /// The per-column shares as stored: a JSON object of basis points.
    pub(super) fn columns_json(&self) -> String {
        serde_json::to_string(&self.columns).expect("a map of numbers serializes")
    }

    pub(super) fn from_row(default_bp: i32, columns: &str) -> Result<ReadShare, Error> {
        let columns: serde_json::Value = serde_json::from_str(columns).unwrap_or_default();
        let corrupt = || {
            Error::Corrupt(format!(
                "mezzanine.mode holds a read share out of 0-10000 basis points: {default_bp} {columns}"
            ))
        };
        let bp = |v: i64| u16::try_from(v).ok().filter(|&bp| bp <= ReadShare::ALL);
        let default_bp = bp(i64::from(default_bp)).ok_or_else(corrupt)?;
        let mut shares = BTreeMap::new();
        for (column, value) in columns.as_object().ok_or_else(corrupt)? {
            let share = value.as_i64().and_then(bp).ok_or_else(corrupt)?;
            shares.insert(column.clone(), share);
        }
        Ok(ReadShare {
            default_bp,
            columns: shares,
        })
    }
}

/// A change of the read share.
#[derive(Clone, Debug)]
pub struct ReadsRequest {
    /// The share, in basis points.
    pub bp: u16,
    /// The column it is for, or `None` for the default (which also drops
    /// every column's own share: "all reads at P%").
    pub column: Option<String>,
    /// Who asks, for the history.
    pub by: String,
    /// Why, for the history.
    pub reason: Option<String>,
}

/// Sets the share of `shadow`'s reads Schemaless serves, recorded and
/// announced as a mode change is. Allowed in every mode, so that a team
/// can choose the share before entering `shadow`; it only routes reads in
/// `shadow` (before it PostgreSQL serves every read, after it
/// Schemaless). Not gated: a share is how a step is taken a little at a
/// time, and lowering it is how the guard steps back. Returns the share
/// before and after.
pub async fn set_reads(
    pool: &PgPool,
    request: &ReadsRequest,
) -> Result<(ReadShare, ReadShare), Error> {
    if request.bp > ReadShare::ALL {
        return Err(Error::BadShare(ReadShare::percent(request.bp)));
    }
    let context = "changing the read share";
    let mut tx = pool
        .begin()
        .await
        .map_err(|e| Error::postgres(context, e))?;
    let (current, bp, columns): (String, i32, String) = sqlx::query_as(
        "/* mezzanine */ SELECT mode, reads_bp, reads_columns::text FROM mezzanine.mode FOR UPDATE",
    )
    .fetch_one(&mut *tx)
    .await
    .map_err(|e| Error::postgres(context, e))?;
    let mode: Mode = current.parse()?;
    let before = ReadShare::from_row(bp, &columns)?;
    let mut after = before.clone();
    match &request.column {
        Some(column) => {
            after.columns.insert(column.clone(), request.bp);
        }
        None => {
            after.default_bp = request.bp;
            after.columns.clear();
        }
    }
    if after == before {
        return Ok((before, after));
    }
    sqlx::query(
        "/* mezzanine */ UPDATE mezzanine.mode SET reads_bp = $1, reads_columns = $2::jsonb",
    )
    .bind(i32::from(after.default_bp))
    .bind(after.columns_json())
    .execute(&mut *tx)
    .await
    .map_err(|e| Error::postgres(context, e))?;
    let entry = NewEntry {
        kind: "reads",
        from: mode,
        to: mode,
        reads: i32::from(after.default_bp),
        reads_columns: after.columns_json(),
        by: &request.by,
        overridden: None,
        reason: request.reason.as_deref(),
        checks: &[],
    };
    entry.record(&mut tx).await?;
    tx.commit().await.map_err(|e| Error::postgres(context, e))?;
    tracing::info!(
        "reads in shadow: {} -> {} by {}",
        before.describe(),
        after.describe(),
        request.by
    );
    Ok((before, after))
}
