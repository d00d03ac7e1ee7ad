//! The gates of the migration's steps forward, checked by `mode set`.
//!
//! | entering | must hold first | prepared |
//! |---|---|---|
//! | `mirror` | the Schemaless schema exists on every shard (else the outbox could never drain) | the mirror's tables |
//! | `shadow` | the backfill complete, with no failed chunk and a plan made after the mode entered `mirror`; the outbox drained: its oldest entry younger than `gates.max_outbox_lag_ms`, and nothing parked (reads are about to come from Schemaless) | |
//! | `primary` | the same (the legacy tables are about to stop being written first) | the reverse offsets, at the change-log heads |
//!
//! "Drained" cannot mean empty on a live system: while facades write in
//! `mirror`, the outbox always holds the last few milliseconds of writes.
//! What matters is that the relay keeps up, so that what is left is in
//! flight, not a backlog; entries still there after the step are relayed
//! all the same (the relay runs in every mode after `legacy`).
//! | `schemaless` | nothing more | |
//!
//! The verifier (mismatch rate and coverage) adds its gate here when it
//! lands.
//!
//! The backfill plan must have been made (or extended) after the mode
//! entered `mirror`, plus one mode poll interval: a parent row created
//! before every facade mirrored, and after the plan was made, would be in
//! neither the mirror nor any chunk.
//! `--force` overrides a refusal and is recorded; the preparation runs
//! either way.

use async_trait::async_trait;
use schemaless::mysql::schema;
use schemaless::MySqlStore;
use sqlx::PgPool;

use crate::error::Error;
use crate::mode::{Gate, Mode};

/// The gates over the legacy database and the Schemaless store.
pub struct MigrationGate {
    pool: PgPool,
    schemaless: MySqlStore,
    settings: config::Gates,
    /// How long a facade may take to see a mode change.
    mode_poll_ms: u64,
}

impl MigrationGate {
    /// Gates reading `pool` (the legacy database) and `schemaless`, with
    /// the config's `[gates]` thresholds.
    pub fn new(pool: PgPool, schemaless: MySqlStore, config: &config::Config) -> MigrationGate {
        MigrationGate {
            pool,
            schemaless,
            settings: config.gates.clone(),
            mode_poll_ms: config.legacy.as_ref().map_or(1000, |l| l.mode_poll_ms),
        }
    }

    async fn backfilled(&self) -> Result<Option<String>, Error> {
        let since: Option<f64> = sqlx::query_scalar(
            "SELECT extract(epoch FROM max(at))::float8 FROM mezzanine.mode_history WHERE to_mode = 'mirror'",
        )
        .fetch_one(&self.pool)
        .await
        .map_err(|e| Error::postgres("reading the mode history", e))?;
        let since = since.map(|s| s + self.mode_poll_ms as f64 / 1000.0);
        backfill::status::refusal(&self.pool, since)
            .await
            .map_err(|e| Error::Gate(e.to_string()))
    }

    async fn outbox_drained(&self) -> Result<Option<String>, Error> {
        let (depth, oldest, parked) = mirror::status::outbox(&self.pool).await?;
        let max = self.settings.max_outbox_lag_ms;
        let age_ms = oldest.unwrap_or(0.0) * 1000.0;
        if depth > 0 && age_ms >= max as f64 {
            return Ok(Some(format!(
                "the outbox still holds {depth} entries, the oldest {:.1}s old (gates.max_outbox_lag_ms = {max}): wait for the relay to drain it (`mezzanine mirror status`)",
                age_ms / 1000.0
            )));
        }
        if parked > 0 {
            return Ok(Some(format!(
                "{parked} outbox entries are parked, so Schemaless lacks cells the legacy tables have: see `mezzanine mirror status`, fix the cause, then `mezzanine mirror retry`"
            )));
        }
        Ok(None)
    }
}

#[async_trait]
impl Gate for MigrationGate {
    async fn refusal(&self, _from: Mode, to: Mode) -> Result<Option<String>, Error> {
        match to {
            Mode::Legacy | Mode::Schemaless => Ok(None),
            Mode::Mirror => match schema::verify(self.schemaless.topology()).await {
                Ok(missing) if missing.is_empty() => Ok(None),
                Ok(missing) => Ok(Some(format!(
                    "the Schemaless schema is missing on {} of {} shards: run `mezzanine schema apply` first, or the outbox can never drain",
                    missing.len(),
                    self.schemaless.topology().shard_count
                ))),
                Err(e) => Ok(Some(format!(
                    "Schemaless cannot be checked ({e}); the outbox would only grow"
                ))),
            },
            Mode::Shadow => match self.backfilled().await? {
                Some(reason) => Ok(Some(reason)),
                None => self.outbox_drained().await,
            },
            Mode::Primary => self.outbox_drained().await,
        }
    }

    async fn prepare(&self, _from: Mode, to: Mode) -> Result<(), Error> {
        if to != Mode::Legacy {
            mirror::schema::ensure(&self.pool).await?;
        }
        if to == Mode::Primary {
            let started = mirror::reverse::start_offsets(&self.pool, &self.schemaless).await?;
            if started > 0 {
                tracing::info!(
                    "reverse mirror offsets set at the change-log heads of {started} shards"
                );
            }
        }
        Ok(())
    }
}
