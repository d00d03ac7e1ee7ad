//! The gates of the migration's steps forward, checked by `mode set`.
//!
//! | entering | must hold first | prepared |
//! |---|---|---|
//! | `mirror` | the Schemaless schema exists on every shard (else the outbox could never drain); with `capture.required`, capture installed (and current) on every table of the layout | the mirror's tables |
//! | `shadow` | the backfill complete, with no failed chunk and a plan made after the mode entered `mirror`; the outbox drained: its oldest entry younger than `gates.max_outbox_lag_ms`, and nothing parked (reads are about to come from Schemaless); the same of the capture queue | |
//! | `primary` | every read of `shadow` served by Schemaless (the read share at 100%, for every column); `storage.durability = "two_hosts"` (Schemaless is about to become where writes land first: an acknowledged write must be on two hosts); at most `gates.max_direct_writes` writes to layout tables by statements Mezzanine did not send since the current mode began ([`crate::direct_writes`]); the outbox and the capture queue drained (the legacy tables are about to stop being written first) | the reverse offsets, at the change-log heads |
//! | `schemaless` | at most `gates.max_direct_writes` writes to layout tables by statements Mezzanine did not send since `primary` began, and the capture queue drained with nothing parked: PostgreSQL is read by no one from here on, so a write made there would be stranded | |
//!
//! Entering `shadow` or `primary` also needs the verifier's word, over
//! the samples since the later of the current mode's start and the
//! backfill's last chunk ([`verification_window`]): at least
//! `gates.min_samples` samples, the 95% upper bound of their mismatch rate
//! at most `gates.max_mismatch_upper_bound`, no open mismatch (from
//! samples or the full diff), and, when `gates.min_coverage` is set, that
//! share of parent rows verified since their last write in every column.
//!
//! Capture's checks: with `capture.required`, every step forward from
//! `legacy` needs the capture triggers on every table of the layout, as
//! `capture install` would put them now (a plain SQL writer's change would
//! otherwise never reach Schemaless). With `capture.enabled`, entering
//! `shadow` or `primary` also needs the capture queue drained as the
//! outbox is, and no captured change parked (Schemaless would lack what
//! PostgreSQL has).
//!
//! "Drained" cannot mean empty on a live system: while facades write in
//! `mirror`, the outbox always holds the last few milliseconds of writes.
//! What matters is that the relay keeps up, so that what is left is in
//! flight, not a backlog; entries still there after the step are relayed
//! all the same (the relay runs in every mode after `legacy`).
//!
//! The backfill plan must have been made (or extended) after the mode
//! entered `mirror`, plus one mode poll interval: a parent row created
//! before every facade mirrored, and after the plan was made, would be in
//! neither the mirror nor any chunk.
//! `--force` overrides a refusal and is recorded; the preparation runs
//! either way. The step back from `shadow` to `mirror` is prepared too:
//! the reverse mirror applies what `primary` wrote and the legacy tables
//! lack, since in `mirror` reads come from them and it stops. Every
//! step's preparation also snapshots pg_stat_statements, where the next
//! direct-writes count starts.

use async_trait::async_trait;
use schemaless::mysql::schema;
use schemaless::MySqlStore;
use sqlx::PgPool;

use crate::error::Error;
use crate::mode::{Check, Gate, Mode};

/// The gates over the legacy database and the Schemaless store.
pub struct MigrationGate {
    pool: PgPool,
    /// The layout, for the coverage check.
    legacy: Option<legacy::LegacyStore>,
    schemaless: MySqlStore,
    settings: config::Gates,
    /// `[capture]`: whether capture is checked.
    capture: config::Capture,
    /// How long a facade may take to see a mode change.
    mode_poll_ms: u64,
    /// `storage.durability`.
    durability: config::Durability,
    /// The layout as the SQL reader sees it, for the direct-writes count.
    model: Option<query::Model>,
    /// `[mirror]`, for the reverse mirror's catch-up on the step back to
    /// `mirror`.
    config: config::Config,
}

impl MigrationGate {
    /// Gates reading `pool` (the legacy database) and `schemaless`, with
    /// the config's `[gates]` thresholds.
    pub fn new(pool: PgPool, schemaless: MySqlStore, config: &config::Config) -> MigrationGate {
        MigrationGate {
            pool,
            legacy: None,
            schemaless,
            settings: config.gates.clone(),
            capture: config.capture.clone(),
            mode_poll_ms: config.legacy.as_ref().map_or(1000, |l| l.mode_poll_ms),
            durability: config.storage.durability,
            model: query::Model::from_config(config),
            config: config.clone(),
        }
    }

    /// Lets the gate check coverage (`gates.min_coverage`) and capture's
    /// triggers (`capture.required`), which need the layout.
    pub fn with_legacy(mut self, legacy: legacy::LegacyStore) -> MigrationGate {
        self.legacy = Some(legacy);
        self
    }

    /// The verifier's word: no open mismatch, enough samples, their
    /// mismatch rate's upper bound, and coverage when it is asked for.
    async fn verified(&self) -> Result<Vec<Check>, Error> {
        backfill::plan::ensure_tables(&self.pool)
            .await
            .map_err(|e| Error::Gate(e.to_string()))?;
        verifier::store::ensure(&self.pool).await?;
        // Buffered writes lost to a conflict are open mismatches too.
        verifier::store::take_buffer_conflicts(&self.pool, &self.schemaless).await?;
        let since = verification_window(&self.pool).await?;
        let report = verifier::report::read(&self.pool, None, since).await?;
        let settings = &self.settings;
        let mut checks = Vec::new();
        checks.push(Check::unless(
            "mismatches",
            (report.open_mismatches > 0).then(|| {
                format!(
                    "{} mismatches are open ({}): see `mezzanine verify report`, then `mezzanine verify repair --all` (or fix the cause)",
                    report.open_mismatches,
                    report
                        .open_by_column
                        .iter()
                        .map(|(c, n)| format!("{c}: {n}"))
                        .collect::<Vec<_>>()
                        .join(", ")
                )
            }),
            "no mismatch is open",
        ));
        let samples = report.totals.samples;
        checks.push(Check::unless(
            "samples",
            (samples < settings.min_samples).then(|| {
                format!(
                    "only {samples} reads were verified in this mode since the backfill finished; gates.min_samples = {}: keep sampling (`mezzanine verify sample --rate R`) or run `mezzanine verify full`",
                    settings.min_samples
                )
            }),
            format!(
                "{samples} reads verified in this mode since the backfill finished (gates.min_samples = {})",
                settings.min_samples
            ),
        ));
        // gates.min_samples = 0 waives the sample checks until there are
        // samples; what is sampled is still bounded.
        let sampled = samples > 0 || settings.min_samples > 0;
        checks.push(Check::unless(
            "mismatch_rate",
            (sampled && report.upper_bound > settings.max_mismatch_upper_bound).then(|| {
                format!(
                    "{} mismatches in {samples} samples: the 95% upper bound of the mismatch rate is {:.6}, above gates.max_mismatch_upper_bound = {}",
                    report.totals.mismatches, report.upper_bound, settings.max_mismatch_upper_bound
                )
            }),
            format!(
                "{} mismatches in {samples} samples, 95% upper bound {:.6} (gates.max_mismatch_upper_bound = {})",
                report.totals.mismatches, report.upper_bound, settings.max_mismatch_upper_bound
            ),
        ));
        if settings.min_coverage > 0.0 {
            checks.push(self.covered().await?);
        }
        Ok(checks)
    }

    /// `gates.min_coverage`: that share of parent rows verified since
    /// their last write, in every column.
    async fn covered(&self) -> Result<Check, Error> {
        let min = self.settings.min_coverage;
        let Some(legacy) = &self.legacy else {
            return Ok(Check::wait(
                "coverage",
                "gates.min_coverage is set but the gate has no layout to check it with",
            ));
        };
        let mut lowest: Option<(String, f64)> = None;
        for c in verifier::report::coverage(&self.pool, legacy).await? {
            if c.share() < min {
                return Ok(Check::wait(
                    "coverage",
                    format!(
                        "column {}: {} of {} rows ({:.2}%) verified since their last write; gates.min_coverage = {min}: run `mezzanine verify full`",
                        c.column,
                        c.verified,
                        c.rows,
                        c.share() * 100.0,
                    ),
                ));
            }
            if lowest.as_ref().is_none_or(|(_, share)| c.share() < *share) {
                lowest = Some((c.column.to_string(), c.share()));
            }
        }
        Ok(Check::pass(
            "coverage",
            match lowest {
                Some((column, share)) => format!(
                    "every column at least {:.2}% verified since its last write (lowest: {column}; gates.min_coverage = {min})",
                    share * 100.0
                ),
                None => format!("no column to cover (gates.min_coverage = {min})"),
            },
        ))
    }

    /// Entering `primary`: every read of `shadow` already on Schemaless,
    /// so that the step changes where writes land and nothing else.
    async fn all_reads(&self) -> Result<Check, Error> {
        let reads = crate::mode::read(&self.pool).await?.reads;
        Ok(Check::unless(
            "reads",
            (!reads.is_full()).then(|| {
                format!(
                    "Schemaless serves {} of reads in shadow; primary needs 100% first: `mezzanine mode reads 100` (and for each column set on its own)",
                    reads.describe()
                )
            }),
            "Schemaless serves 100% of reads",
        ))
    }

    async fn backfilled(&self) -> Result<Option<String>, Error> {
        let since: Option<f64> = sqlx::query_scalar(
            "/* mezzanine */ SELECT extract(epoch FROM max(at))::float8 FROM mezzanine.mode_history WHERE to_mode = 'mirror' AND kind = 'mode'",
        )
        .fetch_one(&self.pool)
        .await
        .map_err(|e| Error::postgres("reading the mode history", e))?;
        let since = since.map(|s| s + self.mode_poll_ms as f64 / 1000.0);
        backfill::status::refusal(&self.pool, since)
            .await
            .map_err(|e| Error::Gate(e.to_string()))
    }

    async fn outbox_drained(&self) -> Result<Check, Error> {
        let (depth, oldest, parked) = mirror::status::outbox(&self.pool).await?;
        let max = self.settings.max_outbox_lag_ms;
        let age_ms = oldest.unwrap_or(0.0) * 1000.0;
        if depth > 0 && age_ms >= max as f64 {
            return Ok(Check::wait("outbox", format!(
                "the outbox still holds {depth} entries, the oldest {:.1}s old (gates.max_outbox_lag_ms = {max}): wait for the relay to drain it (`mezzanine mirror status`)",
                age_ms / 1000.0
            )));
        }
        if parked > 0 {
            return Ok(Check::wait("outbox", format!(
                "{parked} outbox entries are parked, so Schemaless lacks cells the legacy tables have: see `mezzanine mirror status`, fix the cause, then `mezzanine mirror retry`"
            )));
        }
        Ok(Check::pass(
            "outbox",
            format!(
                "{depth} entries, the oldest {:.0} ms old (gates.max_outbox_lag_ms = {max}), none parked",
                age_ms
            ),
        ))
    }

    /// With `capture.required`: the triggers are on every table of the
    /// layout, as `capture install` would put them now.
    async fn captured(&self) -> Result<Option<String>, Error> {
        if !(self.capture.enabled && self.capture.required) {
            return Ok(None);
        }
        let Some(legacy) = &self.legacy else {
            return Ok(Some(
                "capture.required is set but the gate has no layout to check capture with".into(),
            ));
        };
        let coverage =
            mirror::capture::install::coverage(&self.pool, legacy.layout(), &self.capture).await?;
        let missing: Vec<String> = coverage
            .iter()
            .filter(|c| !c.installed())
            .map(|c| format!("{} ({}: {})", c.table, c.state, c.problems.join(", ")))
            .collect();
        if missing.is_empty() {
            return Ok(None);
        }
        Ok(Some(format!(
            "capture is not installed as the layout needs on {}: plain SQL writes there would never reach Schemaless; run `mezzanine capture install` (or set capture.required = false)",
            missing.join("; ")
        )))
    }

    /// Writes to layout tables by statements Mezzanine did not send, since
    /// the current mode began, at most `gates.max_direct_writes`: the
    /// check of the step to `to`, or none without a layout to read them
    /// by.
    async fn direct_writes(&self, to: Mode) -> Option<Check> {
        let model = self.model.as_ref()?;
        // A gate is asked of the step forward from the mode before `to`.
        let now = to.previous().unwrap_or(to);
        let refused = match crate::direct_writes::since_snapshot(&self.pool, model, now).await {
            Ok(writes) => {
                crate::direct_writes::refusal(&writes, self.settings.max_direct_writes, to)
            }
            Err(why) => Some(why),
        };
        Some(Check::unless(
            "direct_writes",
            refused,
            format!(
                "at most gates.max_direct_writes = {} writes to layout tables by other statements since this mode began",
                self.settings.max_direct_writes
            ),
        ))
    }

    /// With `capture.enabled`: the capture queue keeps up as the outbox
    /// must, and nothing captured is parked.
    async fn capture_drained(&self) -> Result<Check, Error> {
        let reason = self.capture_lag().await?;
        Ok(Check::unless(
            "capture",
            reason,
            if self.capture.enabled {
                "the capture queue keeps up, nothing parked"
            } else {
                "capture is not enabled"
            },
        ))
    }

    async fn capture_lag(&self) -> Result<Option<String>, Error> {
        if let Some(reason) = self.captured().await? {
            return Ok(Some(reason));
        }
        if !self.capture.enabled {
            return Ok(None);
        }
        let queue = mirror::capture::status::queue(&self.pool).await?;
        let max = self.settings.max_outbox_lag_ms;
        // Something waits (in the queue, or in the logical slot) and has
        // for longer than the outbox may.
        if let Some(age_ms) = queue.oldest_secs.map(|s| s * 1000.0) {
            if age_ms >= max as f64 {
                let slot = queue
                    .slot
                    .as_ref()
                    .map(|s| format!(" and the slot {} {} bytes", s.name, s.retained_bytes))
                    .unwrap_or_default();
                return Ok(Some(format!(
                    "the capture queue still holds {} changes{slot}, the oldest {:.1}s old (gates.max_outbox_lag_ms = {max}): wait for the relay to deliver them (`mezzanine capture status`)",
                    queue.depth,
                    age_ms / 1000.0
                )));
            }
        }
        if queue.parked > 0 {
            let kinds: Vec<String> = queue
                .parked_by_kind
                .iter()
                .map(|(k, n)| format!("{k}: {n}"))
                .collect();
            return Ok(Some(format!(
                "{} captured changes are parked ({}), so Schemaless lacks what PostgreSQL has: see `mezzanine capture status`, fix the cause, then `mezzanine capture retry`",
                queue.parked,
                kinds.join(", ")
            )));
        }
        Ok(None)
    }
}

#[async_trait]
impl Gate for MigrationGate {
    async fn checks(&self, _from: Mode, to: Mode) -> Result<Vec<Check>, Error> {
        let mut checks = Vec::new();
        match to {
            Mode::Legacy => {}
            Mode::Schemaless => {
                // From here on PostgreSQL is read by no one: a write made
                // there in `primary` (a service writing the legacy tables,
                // a write inside a transaction block through the proxy)
                // would be stranded, and so would a captured change not
                // yet delivered.
                checks.extend(self.direct_writes(to).await);
                checks.push(self.capture_drained().await?);
            }
            Mode::Mirror => {
                let shards = self.schemaless.topology().shard_count;
                checks.push(match schema::verify(self.schemaless.topology()).await {
                    Ok(missing) if missing.is_empty() => {
                        Check::pass("schema", format!("the Schemaless schema is on all {shards} shards"))
                    }
                    Ok(missing) => Check::wait("schema", format!(
                        "the Schemaless schema is missing on {} of {shards} shards: run `mezzanine schema apply` first, or the outbox can never drain",
                        missing.len(),
                    )),
                    Err(e) => Check::wait("schema", format!(
                        "Schemaless cannot be checked ({e}); the outbox would only grow"
                    )),
                });
                let required = self.capture.enabled && self.capture.required;
                checks.push(Check::unless(
                    "capture",
                    self.captured().await?,
                    if required {
                        "capture is installed on every table of the layout"
                    } else {
                        "capture is not required (capture.required)"
                    },
                ));
            }
            Mode::Shadow => {
                checks.push(Check::unless(
                    "backfill",
                    self.backfilled().await?,
                    "the backfill is complete, planned after the mode entered mirror",
                ));
                checks.push(self.outbox_drained().await?);
                checks.push(self.capture_drained().await?);
                checks.extend(self.verified().await?);
            }
            Mode::Primary => {
                checks.push(Check::unless(
                    "durability",
                    (self.durability == config::Durability::OneHost).then(|| {
                        "storage.durability = \"one_host\": in primary, writes land in Schemaless first, and one that only its master held would be lost with it; use \"two_hosts\" (semi-synchronous replication or buffered writes)".to_string()
                    }),
                    "storage.durability = \"two_hosts\": an acknowledged write is on two hosts",
                ));
                checks.push(self.all_reads().await?);
                checks.extend(self.direct_writes(to).await);
                checks.push(self.outbox_drained().await?);
                checks.push(self.capture_drained().await?);
                checks.extend(self.verified().await?);
            }
        }
        Ok(checks)
    }

    async fn prepare(&self, from: Mode, to: Mode) -> Result<(), Error> {
        if to != Mode::Legacy {
            mirror::schema::ensure(&self.pool).await?;
            // Where the next direct-writes count starts.
            crate::direct_writes::snapshot(&self.pool).await?;
        }
        if from == Mode::Shadow && to == Mode::Mirror {
            self.reverse_caught_up().await?;
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

impl MigrationGate {
    /// The step back from `shadow` to `mirror`: writes acknowledged in
    /// `primary` may still be only in Schemaless, waiting for the reverse
    /// mirror, which stops in `mirror`, where reads come from the legacy
    /// tables. So the reverse mirror is caught up first (one pass over
    /// every shard's change log, as `mirror reverse --once`), before the
    /// mode changes. Needs the layout (the gate is given it with
    /// [`MigrationGate::with_legacy`]).
    async fn reverse_caught_up(&self) -> Result<(), Error> {
        let Some(legacy) = &self.legacy else {
            return Err(Error::Gate(
                "the step back to mirror first applies what the reverse mirror has not, which needs the layout: give the gate the legacy store".into(),
            ));
        };
        let reverse =
            mirror::ReverseMirror::new(legacy.clone(), self.schemaless.clone(), &self.config);
        if !reverse.started().await? {
            return Ok(());
        }
        let applied = reverse.catch_up().await?;
        if applied.total() > 0 {
            tracing::info!(
                "before the step back to mirror, the reverse mirror applied {} change-log cells ({} parked)",
                applied.applied,
                applied.parked
            );
        }
        Ok(())
    }
}

/// Where the samples the gates count start (seconds since the epoch): the
/// later of the current mode's start and the backfill's last finished
/// chunk. Samples before the backfill finished find rows not copied yet;
/// samples of an earlier mode compared other reads.
///
/// Reads the mode and backfill tables, which must exist (`mode::ensure_control`,
/// `backfill::plan::ensure_tables`): the dashboard asks every few seconds.
pub async fn verification_window(pool: &PgPool) -> Result<Option<f64>, Error> {
    let mode_since: Option<f64> = sqlx::query_scalar(
        "/* mezzanine */ SELECT extract(epoch FROM max(h.at))::float8 FROM mezzanine.mode_history h
         WHERE h.to_mode = (SELECT mode FROM mezzanine.mode) AND h.kind = 'mode'",
    )
    .fetch_one(pool)
    .await
    .map_err(|e| Error::postgres("reading the verification window", e))?;
    let backfilled = backfill::status::last_done_at(pool).await?;
    // GREATEST in SQL ignores NULLs; so does this.
    Ok(mode_since.into_iter().chain(backfilled).reduce(f64::max))
}
