//! The verifier's questions to the mirror ([`verifier::Triage`]): are
//! writes of these rows still in flight between the stores, and is the
//! backfill finished?
//!
//! In flight means: an outbox entry or a captured change of the row waits
//! for the relay (`mirror`, `shadow`), or its shard's change log has cells, written
//! before the question, that the reverse mirror has not applied yet
//! (`primary`; only once reverse offsets exist). For an index read, also
//! until the index's maintainer has passed the change-log heads as of the
//! question: Schemaless's indexes are eventually consistent.

use std::time::{Duration, Instant};

use async_trait::async_trait;
use schemaless::mysql::{index, trigger};
use schemaless::{CellStore, MySqlStore, RowKey};
use sqlx::PgPool;
use uuid::Uuid;

/// Triage over the legacy database and Schemaless.
pub struct MirrorTriage {
    pool: PgPool,
    legacy: legacy::LegacyStore,
    schemaless: MySqlStore,
}

impl MirrorTriage {
    /// Triage reading the legacy database (through `legacy`, whose layout
    /// finds captured changes of a row) and `schemaless`.
    pub fn new(legacy: legacy::LegacyStore, schemaless: MySqlStore) -> MirrorTriage {
        MirrorTriage {
            pool: legacy.pool().clone(),
            legacy,
            schemaless,
        }
    }

    /// Whether the outbox or capture (its queue, its slot) holds changes
    /// of `rows`.
    async fn outbox_holds(&self, rows: &[Uuid]) -> Result<bool, String> {
        let outbox = mirror::outbox::holds(&self.pool, rows)
            .await
            .map_err(|e| e.to_string())?;
        if outbox {
            return Ok(true);
        }
        mirror::capture::status::holds(&self.pool, self.legacy.layout(), rows)
            .await
            .map_err(|e| e.to_string())
    }

    /// The trigger maintaining the active version of index `name`.
    async fn index_trigger(&self, name: &str) -> Option<String> {
        let versions = index::versions(&self.schemaless, name).await.ok()?;
        let (version, _) = versions
            .into_iter()
            .rfind(|(_, state)| *state == index::VersionState::Active)?;
        Some(index::trigger_name(name, version))
    }

    /// The reverse offsets of these shards, if the reverse mirror has any.
    async fn reverse_offsets(&self, shards: &[i32]) -> Result<Vec<(i32, i64)>, sqlx::Error> {
        mirror::reverse::offsets(&self.pool, shards).await
    }
}

#[async_trait]
impl verifier::Triage for MirrorTriage {
    async fn settle(&self, rows: &[RowKey], index: Option<&str>, wait: Duration) -> bool {
        let deadline = Instant::now() + wait;
        let uuids: Vec<Uuid> = rows.iter().map(|r| r.uuid()).collect();
        let shard_count = self.schemaless.shard_count();
        let mut shards: Vec<i32> = rows
            .iter()
            .map(|r| schemaless::routing::shard_of(r, shard_count) as i32)
            .collect();
        shards.sort_unstable();
        shards.dedup();
        // The heads as of now: what the reverse mirror must have passed.
        let heads = match self.reverse_offsets(&shards).await {
            Ok(offsets) if !offsets.is_empty() => self.schemaless.log_heads().await.ok(),
            _ => None,
        };
        // The index's maintainer must pass the heads as of now.
        let index_trigger = match index {
            Some(name) => self.index_trigger(name).await,
            None => None,
        };
        let index_heads = match &index_trigger {
            Some(trigger) => trigger::status(&self.schemaless, trigger)
                .await
                .ok()
                .map(|shards| shards.iter().map(|s| s.head).collect::<Vec<u64>>()),
            None => None,
        };
        loop {
            let index_behind = match (&index_trigger, &index_heads) {
                (Some(trigger), Some(heads)) => trigger::status(&self.schemaless, trigger)
                    .await
                    .map(|shards| shards.iter().zip(heads).any(|(s, head)| s.offset < *head))
                    .unwrap_or(true),
                _ => false,
            };
            let outbox = self.outbox_holds(&uuids).await;
            let reverse_behind = match &heads {
                None => Ok(false),
                Some(heads) => self
                    .reverse_offsets(&shards)
                    .await
                    .map(|offsets| {
                        offsets.iter().any(|(shard, offset)| {
                            heads
                                .get(*shard as usize)
                                .is_some_and(|head| (*offset as u64) < *head)
                        })
                    })
                    .map_err(|e| e.to_string()),
            };
            match (outbox, reverse_behind) {
                (Ok(false), Ok(false)) if !index_behind => return true,
                (Err(e), _) | (_, Err(e)) => {
                    tracing::debug!("verify triage: {e}");
                }
                _ => {}
            }
            if Instant::now() >= deadline {
                return false;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    async fn backfill_pending(&self) -> bool {
        match backfill::status::read(&self.pool).await {
            Ok(status) => !status.complete(),
            Err(_) => true,
        }
    }
}

/// The full diff over the legacy model and Schemaless, with the `[verify]`
/// rules, its differences triaged against the mirror.
pub fn full_diff(
    legacy: &legacy::LegacyStore,
    schemaless: &MySqlStore,
    config: &config::Config,
) -> verifier::full::FullDiff {
    verifier::full::FullDiff {
        legacy: legacy.clone(),
        schemaless: schemaless.clone(),
        rules: verifier::Rules::from_config(&config.verify),
        tombstones: schemaless::Column::new(&config.capture.tombstone_column).ok(),
        pool: legacy.pool().clone(),
        triage: std::sync::Arc::new(MirrorTriage::new(legacy.clone(), schemaless.clone())),
        config: config.verify.clone(),
        sweep_page: verifier::full::SWEEP_PAGE,
    }
}
