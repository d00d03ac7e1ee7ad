//! The mode: which store the facade reads from and writes to.
//!
//! The mode lives in one row of `mezzanine.mode` in the legacy database, so
//! every app instance agrees on it. A change is one transaction that checks
//! the step, updates the row, appends to `mezzanine.mode_history` and
//! notifies channel `mezzanine_mode`; facades listen on it and also poll.
//!
//! The modes form a ladder, walked one step at a time:
//! `legacy -> mirror -> shadow -> primary -> schemaless`. A step back is
//! always allowed (it is the way out of trouble). A step forward must pass
//! the gate of the mode it enters (a [`Gate`]: the outbox drained, the
//! Schemaless schema applied), and a jump of several steps is refused;
//! `--force` overrides both, and is recorded with what it overrode. A
//! gate may also prepare the step (entering `primary` starts the reverse
//! mirror's offsets at the change-log heads); that runs forced or not.
//!
//! A gate answers with every condition it checked ([`Check`]), passed or
//! not, so that `mode set --dry-run` and `status` can show all of them;
//! a step is refused by the first that did not pass.
//!
//! In `shadow`, a share of reads ([`ReadShare`]) goes to Schemaless and
//! the rest to PostgreSQL, by row key. The share is kept in the same row
//! as the mode and changed by [`set_reads`]; every change of either is a
//! line of `mezzanine.mode_history`, with who, when, why, whether it was
//! forced, and the gate's checks at that moment.

use std::collections::BTreeMap;
use std::fmt;
use std::str::FromStr;

use async_trait::async_trait;
use schemaless::RowKey;
use serde::{Deserialize, Serialize};
use sqlx::{PgPool, Row};

use crate::error::Error;

/// The channel mode changes are announced on.
pub const CHANNEL: &str = "mezzanine_mode";

/// One rung of the migration ladder.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Mode {
    /// Reads and writes go to PostgreSQL only.
    Legacy,
    /// Writes go to PostgreSQL and an outbox relayed to Schemaless; reads
    /// from PostgreSQL, sampled reads replayed on Schemaless.
    Mirror,
    /// Writes as in `mirror`; reads from Schemaless, replayed on PostgreSQL.
    Shadow,
    /// Writes go to Schemaless, reverse-mirrored to PostgreSQL; reads from
    /// Schemaless.
    Primary,
    /// Reads and writes go to Schemaless only.
    Schemaless,
}

impl Mode {
    /// Every mode, in ladder order.
    pub const ALL: [Mode; 5] = [
        Mode::Legacy,
        Mode::Mirror,
        Mode::Shadow,
        Mode::Primary,
        Mode::Schemaless,
    ];

    /// The mode's name, as stored and typed.
    pub fn as_str(&self) -> &'static str {
        match self {
            Mode::Legacy => "legacy",
            Mode::Mirror => "mirror",
            Mode::Shadow => "shadow",
            Mode::Primary => "primary",
            Mode::Schemaless => "schemaless",
        }
    }

    fn rank(&self) -> usize {
        Mode::ALL
            .iter()
            .position(|m| m == self)
            .expect("every mode is on the ladder")
    }

    /// The next mode forward, if any.
    pub fn next(&self) -> Option<Mode> {
        Mode::ALL.get(self.rank() + 1).copied()
    }

    /// The mode one step back, if any.
    pub fn previous(&self) -> Option<Mode> {
        self.rank().checked_sub(1).map(|r| Mode::ALL[r])
    }

    /// Where the facade sends reads in this mode: `true` for Schemaless.
    pub fn reads_schemaless(&self) -> bool {
        *self >= Mode::Shadow
    }

    /// Whether outbox entries may still need relaying (every mode after
    /// `legacy`: a facade that has not yet seen a step forward may still
    /// write to the outbox).
    pub fn relays(&self) -> bool {
        *self > Mode::Legacy
    }

    /// Whether reads are sampled and replayed on the other store
    /// (`mirror`, `shadow`, `primary`: both stores are kept in step).
    pub fn samples(&self) -> bool {
        matches!(self, Mode::Mirror | Mode::Shadow | Mode::Primary)
    }

    /// Which store holds the truth: the legacy tables until `primary`
    /// (writes reach them first), Schemaless from then on. Repairs
    /// rewrite the other one.
    pub fn source_of_truth(&self) -> verifier::Side {
        if *self >= Mode::Primary {
            verifier::Side::Schemaless
        } else {
            verifier::Side::Legacy
        }
    }

    /// Whether the reverse mirror runs: in `primary`, and in `shadow` so
    /// that after a step back from `primary` the cells written there still
    /// reach the legacy tables before anyone reads them there.
    pub fn reverse_mirrors(&self) -> bool {
        matches!(self, Mode::Shadow | Mode::Primary)
    }
}

impl Serialize for Mode {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(self.as_str())
    }
}

impl fmt::Display for Mode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for Mode {
    type Err = Error;

    fn from_str(text: &str) -> Result<Mode, Error> {
        Mode::ALL
            .into_iter()
            .find(|m| m.as_str() == text)
            .ok_or_else(|| Error::UnknownMode(text.to_string()))
    }
}

/// The current mode and who set it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ModeState {
    /// The mode.
    pub mode: Mode,
    /// When it was set (canonical UTC text).
    pub changed_at: String,
    /// Who set it (`user@host` of the command, or the caller's label).
    pub changed_by: String,
    /// Whether `--force` overrode a refusal to set it.
    pub forced: bool,
    /// The reason given with the change.
    pub reason: Option<String>,
    /// The share of reads Schemaless serves in `shadow`.
    pub reads: ReadShare,
}

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
    fn columns_json(&self) -> String {
        serde_json::to_string(&self.columns).expect("a map of numbers serializes")
    }

    fn from_row(default_bp: i32, columns: &str) -> Result<ReadShare, Error> {
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

/// One condition of a step, as `mode set --dry-run` and `status` show
/// it: what was checked, and the figure that passed or why it waits.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Check {
    /// A stable name (`ladder`, `backfill`, `outbox`, ...).
    pub name: String,
    /// Whether it holds now.
    pub pass: bool,
    /// What holds, or why the step must wait and what to do.
    pub why: String,
}

impl Check {
    /// A condition that holds.
    pub fn pass(name: &str, why: impl Into<String>) -> Check {
        Check {
            name: name.into(),
            pass: true,
            why: why.into(),
        }
    }

    /// A condition the step must wait for.
    pub fn wait(name: &str, why: impl Into<String>) -> Check {
        Check {
            name: name.into(),
            pass: false,
            why: why.into(),
        }
    }

    /// `pass` with `why` when `refusal` is `None`, else a wait for it.
    pub fn unless(name: &str, refusal: Option<String>, why: impl Into<String>) -> Check {
        match refusal {
            Some(reason) => Check::wait(name, reason),
            None => Check::pass(name, why),
        }
    }
}

/// A request to change the mode.
#[derive(Clone, Debug)]
pub struct ModeRequest {
    /// The mode wanted.
    pub target: Mode,
    /// Override a refused step (never an unavailable mode).
    pub force: bool,
    /// Who asks, for the history.
    pub by: String,
    /// Why, for the history.
    pub reason: Option<String>,
}

/// What a change did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ModeChange {
    /// The mode before.
    pub from: Mode,
    /// The mode now.
    pub to: Mode,
    /// The refusal `--force` overrode, if any.
    pub overridden: Option<String>,
}

/// One line of `mezzanine.mode_history`: a change of the mode or of the
/// read share.
#[derive(Clone, Debug, Serialize)]
pub struct HistoryEntry {
    /// When.
    pub at: String,
    /// `mode` or `reads`.
    pub kind: String,
    /// From which mode.
    pub from: String,
    /// To which mode (the same for a change of the read share).
    pub to: String,
    /// The read share after the change, where recorded.
    pub reads: Option<ReadShare>,
    /// Who (`user@host`, or `guard@host` for the guard).
    pub by: String,
    /// Whether a refusal was overridden.
    pub forced: bool,
    /// The refusal `--force` overrode, if any.
    pub overridden: Option<String>,
    /// The reason given.
    pub reason: Option<String>,
    /// The gate's checks of the step at that moment, with their figures
    /// (empty for a step back or a change of the read share).
    pub checks: Vec<Check>,
}

/// What a step forward must wait for, beyond the ladder's one-step rule,
/// and what must happen before facades see a new mode.
#[async_trait]
pub trait Gate: Send + Sync {
    /// Every condition of entering `to` from `from`, passed or not, in the
    /// order they are told. Asked only for steps forward.
    async fn checks(&self, from: Mode, to: Mode) -> Result<Vec<Check>, Error>;

    /// Why entering `to` from `from` must wait, if it must: the first
    /// check that did not pass.
    async fn refusal(&self, from: Mode, to: Mode) -> Result<Option<String>, Error> {
        let checks = self.checks(from, to).await?;
        Ok(checks.into_iter().find(|c| !c.pass).map(|c| c.why))
    }

    /// Runs before the mode row changes, forced or not; an error stops the
    /// change.
    async fn prepare(&self, from: Mode, to: Mode) -> Result<(), Error>;
}

/// The gate that lets everything through: for control-table tests and
/// tools without the stores.
pub struct Open;

#[async_trait]
impl Gate for Open {
    async fn checks(&self, _: Mode, _: Mode) -> Result<Vec<Check>, Error> {
        Ok(Vec::new())
    }

    async fn prepare(&self, _: Mode, _: Mode) -> Result<(), Error> {
        Ok(())
    }
}

/// Why a step from `from` to `to` breaks the ladder's rule (one step at a
/// time), if it does. The gates of the stores are a [`Gate`].
pub fn refusal(from: Mode, to: Mode) -> Option<String> {
    if to == from {
        return None;
    }
    if to < from {
        return match from.previous() {
            Some(back) if back == to => None,
            Some(back) => Some(format!(
                "the mode moves back one step at a time: the step back from {from} is {back}"
            )),
            None => unreachable!("nothing is below legacy"),
        };
    }
    match from.next() {
        Some(next) if next == to => None,
        Some(next) => Some(format!(
            "the mode moves forward one step at a time: the next step from {from} is {next}"
        )),
        None => unreachable!("nothing is above schemaless"),
    }
}

fn timestamp_sql(column: &str) -> String {
    format!("to_char({column} AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS.US\"Z\"')")
}

/// Creates the control tables if they are missing, starting in `legacy`
/// with every read of `shadow` on Schemaless, and adds the columns of
/// later versions to tables an earlier one made. Serialized by an
/// advisory lock, so facades starting together do not race on `CREATE
/// TABLE`.
pub async fn ensure_control(pool: &PgPool) -> Result<(), Error> {
    let everything = legacy::connection::present(
        pool,
        &["mezzanine.mode", "mezzanine.mode_history"],
        &[
            ("mezzanine.mode", "reads_bp"),
            ("mezzanine.mode", "reads_columns"),
            ("mezzanine.mode_history", "kind"),
            ("mezzanine.mode_history", "forced"),
            ("mezzanine.mode_history", "reads_bp"),
            ("mezzanine.mode_history", "reads_columns"),
            ("mezzanine.mode_history", "checks"),
        ],
    );
    // The row is inserted with the tables: they exist only with it.
    if everything.await {
        return Ok(());
    }
    let context = "creating the mode control table";
    let mut tx = pool
        .begin()
        .await
        .map_err(|e| Error::postgres(context, e))?;
    sqlx::raw_sql(
        "/* mezzanine */ SELECT pg_advisory_xact_lock(7415262541);
         CREATE SCHEMA IF NOT EXISTS mezzanine;
         CREATE TABLE IF NOT EXISTS mezzanine.mode (
             id boolean PRIMARY KEY DEFAULT true CHECK (id),
             mode text NOT NULL CHECK (mode IN ('legacy', 'mirror', 'shadow', 'primary', 'schemaless')),
             changed_at timestamptz NOT NULL DEFAULT now(),
             changed_by text NOT NULL,
             forced boolean NOT NULL DEFAULT false,
             reason text);
         ALTER TABLE mezzanine.mode
             ADD COLUMN IF NOT EXISTS reads_bp integer NOT NULL DEFAULT 10000
                 CHECK (reads_bp BETWEEN 0 AND 10000),
             ADD COLUMN IF NOT EXISTS reads_columns jsonb NOT NULL DEFAULT '{}';
         INSERT INTO mezzanine.mode (mode, changed_by, reason)
             VALUES ('legacy', 'mezzanine', 'initial mode') ON CONFLICT DO NOTHING;
         CREATE TABLE IF NOT EXISTS mezzanine.mode_history (
             id bigserial PRIMARY KEY,
             at timestamptz NOT NULL DEFAULT now(),
             from_mode text NOT NULL,
             to_mode text NOT NULL,
             changed_by text NOT NULL,
             overridden text,
             reason text);
         ALTER TABLE mezzanine.mode_history
             ADD COLUMN IF NOT EXISTS kind text NOT NULL DEFAULT 'mode',
             ADD COLUMN IF NOT EXISTS forced boolean NOT NULL DEFAULT false,
             ADD COLUMN IF NOT EXISTS reads_bp integer,
             ADD COLUMN IF NOT EXISTS reads_columns jsonb,
             ADD COLUMN IF NOT EXISTS checks jsonb NOT NULL DEFAULT '[]';",
    )
    .execute(&mut *tx)
    .await
    .map_err(|e| Error::postgres(context, e))?;
    tx.commit().await.map_err(|e| Error::postgres(context, e))
}

/// The current mode.
pub async fn read(pool: &PgPool) -> Result<ModeState, Error> {
    let sql = format!(
        "/* mezzanine */ SELECT mode, {}, changed_by, forced, reason, reads_bp, reads_columns::text FROM mezzanine.mode",
        timestamp_sql("changed_at")
    );
    let row = sqlx::query(sqlx::AssertSqlSafe(sql))
        .fetch_one(pool)
        .await
        .map_err(|e| Error::postgres("reading the mode", e))?;
    let get = |e| Error::postgres("reading the mode", e);
    Ok(ModeState {
        mode: row.try_get::<String, _>(0).map_err(get)?.parse()?,
        changed_at: row.try_get(1).map_err(get)?,
        changed_by: row.try_get(2).map_err(get)?,
        forced: row.try_get(3).map_err(get)?,
        reason: row.try_get(4).map_err(get)?,
        reads: ReadShare::from_row(row.try_get(5).map_err(get)?, row.try_get(6).map_err(get)?)?,
    })
}

/// What a change of the mode would do, found without changing anything.
#[derive(Clone, Debug, Serialize)]
pub struct Plan {
    /// The mode now.
    pub from: Mode,
    /// The mode asked for.
    pub to: Mode,
    /// Every condition, passed or not: the ladder's, then the gate's
    /// (asked only for a step forward the ladder allows).
    pub checks: Vec<Check>,
}

impl Plan {
    /// The first condition that did not pass.
    pub fn refusal(&self) -> Option<&Check> {
        self.checks.iter().find(|c| !c.pass)
    }

    /// Whether the step would be taken without `--force`.
    pub fn passes(&self) -> bool {
        self.refusal().is_none()
    }
}

/// Every condition of moving from `from` to `to`.
pub async fn evaluate(from: Mode, to: Mode, gate: &dyn Gate) -> Result<Plan, Error> {
    let mut checks = Vec::new();
    if from != to {
        let direction = if to > from { "forward" } else { "back" };
        checks.push(Check::unless(
            "ladder",
            refusal(from, to),
            format!("{from} -> {to} is one step {direction}"),
        ));
        if to > from && checks[0].pass {
            checks.extend(gate.checks(from, to).await?);
        }
    }
    Ok(Plan { from, to, checks })
}

/// `mode set --dry-run`: what [`set`] would find now, changing nothing.
pub async fn dry_run(pool: &PgPool, to: Mode, gate: &dyn Gate) -> Result<Plan, Error> {
    let from = read(pool).await?.mode;
    evaluate(from, to, gate).await
}

/// Changes the mode if the step is allowed by the ladder and `gate` (or
/// forced), in one transaction that also records the history (with the
/// gate's checks) and notifies every facade.
pub async fn set(
    pool: &PgPool,
    request: &ModeRequest,
    gate: &dyn Gate,
) -> Result<ModeChange, Error> {
    let to = request.target;
    let context = "changing the mode";
    let mut tx = pool
        .begin()
        .await
        .map_err(|e| Error::postgres(context, e))?;
    let (current,): (String,) =
        sqlx::query_as("/* mezzanine */ SELECT mode FROM mezzanine.mode FOR UPDATE")
            .fetch_one(&mut *tx)
            .await
            .map_err(|e| Error::postgres(context, e))?;
    let from: Mode = current.parse()?;
    if from == to {
        return Ok(ModeChange {
            from,
            to,
            overridden: None,
        });
    }
    let plan = evaluate(from, to, gate).await?;
    let overridden = plan.refusal().map(|c| c.why.clone());
    if let Some(reason) = &overridden {
        if !request.force {
            return Err(Error::Refused {
                from,
                to,
                reason: reason.clone(),
            });
        }
        tracing::warn!(
            "mode {from} -> {to} forced by {} over: {reason}",
            request.by
        );
    }
    gate.prepare(from, to).await?;
    let reads: (i32, String) = sqlx::query_as(
        "/* mezzanine */ UPDATE mezzanine.mode SET mode = $1, changed_at = now(), changed_by = $2, forced = $3, reason = $4
         RETURNING reads_bp, reads_columns::text",
    )
    .bind(to.as_str())
    .bind(&request.by)
    .bind(overridden.is_some())
    .bind(&request.reason)
    .fetch_one(&mut *tx)
    .await
    .map_err(|e| Error::postgres(context, e))?;
    let entry = NewEntry {
        kind: "mode",
        from,
        to,
        reads: reads.0,
        reads_columns: reads.1,
        by: &request.by,
        overridden: overridden.as_deref(),
        reason: request.reason.as_deref(),
        checks: &plan.checks,
    };
    entry.record(&mut tx).await?;
    tx.commit().await.map_err(|e| Error::postgres(context, e))?;
    tracing::info!("mode {from} -> {to} by {}", request.by);
    Ok(ModeChange {
        from,
        to,
        overridden,
    })
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

/// A history line about to be written, in the transaction of its change.
struct NewEntry<'a> {
    kind: &'static str,
    from: Mode,
    to: Mode,
    reads: i32,
    reads_columns: String,
    by: &'a str,
    overridden: Option<&'a str>,
    reason: Option<&'a str>,
    checks: &'a [Check],
}

impl NewEntry<'_> {
    /// Appends the line and notifies every facade (delivered when the
    /// transaction commits, never before).
    async fn record(&self, tx: &mut sqlx::PgConnection) -> Result<(), Error> {
        let context = "recording the mode history";
        let checks = serde_json::to_string(self.checks).expect("checks serialize");
        sqlx::query(
            "/* mezzanine */ INSERT INTO mezzanine.mode_history
                 (kind, from_mode, to_mode, changed_by, forced, overridden, reason, reads_bp, reads_columns, checks)
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9::jsonb, $10::jsonb)",
        )
        .bind(self.kind)
        .bind(self.from.as_str())
        .bind(self.to.as_str())
        .bind(self.by)
        .bind(self.overridden.is_some())
        .bind(self.overridden)
        .bind(self.reason)
        .bind(self.reads)
        .bind(&self.reads_columns)
        .bind(checks)
        .execute(&mut *tx)
        .await
        .map_err(|e| Error::postgres(context, e))?;
        sqlx::query("/* mezzanine */ SELECT pg_notify($1, $2)")
            .bind(CHANNEL)
            .bind(self.to.as_str())
            .execute(&mut *tx)
            .await
            .map_err(|e| Error::postgres(context, e))?;
        Ok(())
    }
}

/// The latest `limit` changes of the mode and the read share, newest
/// first.
pub async fn history(pool: &PgPool, limit: i64) -> Result<Vec<HistoryEntry>, Error> {
    let context = "reading the mode history";
    let sql = format!(
        "/* mezzanine */ SELECT {}, kind, from_mode, to_mode, reads_bp, reads_columns::text, changed_by, forced, overridden, reason, checks::text
         FROM mezzanine.mode_history ORDER BY id DESC LIMIT $1",
        timestamp_sql("at")
    );
    let rows = sqlx::query(sqlx::AssertSqlSafe(sql))
        .bind(limit)
        .fetch_all(pool)
        .await
        .map_err(|e| Error::postgres(context, e))?;
    rows.iter()
        .map(|row| {
            let get = |e| Error::postgres(context, e);
            let bp: Option<i32> = row.try_get(4).map_err(get)?;
            let columns: Option<String> = row.try_get(5).map_err(get)?;
            let reads = match bp {
                Some(bp) => Some(ReadShare::from_row(bp, columns.as_deref().unwrap_or("{}"))?),
                None => None,
            };
            let checks: String = row.try_get(10).map_err(get)?;
            Ok(HistoryEntry {
                at: row.try_get(0).map_err(get)?,
                kind: row.try_get(1).map_err(get)?,
                from: row.try_get(2).map_err(get)?,
                to: row.try_get(3).map_err(get)?,
                reads,
                by: row.try_get(6).map_err(get)?,
                forced: row.try_get(7).map_err(get)?,
                overridden: row.try_get(8).map_err(get)?,
                reason: row.try_get(9).map_err(get)?,
                checks: checks_from_json(checks)?,
            })
        })
        .collect()
}

/// The checks recorded with a change (lines of an older version
/// recorded none: `[]`).
fn checks_from_json(value: String) -> Result<Vec<Check>, Error> {
    serde_json::from_str(&value).map_err(|e| {
        Error::Corrupt(format!(
            "mezzanine.mode_history holds checks that do not read ({e}): {value}"
        ))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_step_at_a_time() {
        assert_eq!(refusal(Mode::Legacy, Mode::Mirror), None);
        assert_eq!(refusal(Mode::Schemaless, Mode::Primary), None);
        assert_eq!(refusal(Mode::Shadow, Mode::Shadow), None);
        let jump = refusal(Mode::Legacy, Mode::Schemaless).unwrap();
        assert!(jump.contains("next step from legacy is mirror"), "{jump}");
        let back = refusal(Mode::Schemaless, Mode::Legacy).unwrap();
        assert!(
            back.contains("step back from schemaless is primary"),
            "{back}"
        );
        for mode in Mode::ALL {
            assert_eq!(mode.as_str().parse::<Mode>().unwrap(), mode);
        }
        assert!("mirrored".parse::<Mode>().is_err());
    }
}
