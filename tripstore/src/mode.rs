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
//!
//! Its rooms: `gate` (checks, gates, plans), `reads` (the read share),
//! `history` (the history table); this file holds the ladder, the mode
//! row and the step itself.

use std::fmt;
use std::str::FromStr;

use serde::Serialize;
use sqlx::{PgPool, Row};

use crate::error::Error;

mod gate;
mod history;
mod reads;

pub use gate::{dry_run, evaluate, Check, Gate, Open, Plan};
use history::NewEntry;
pub use history::{history, HistoryEntry};
pub use reads::{set_reads, ReadShare, ReadsRequest};

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
