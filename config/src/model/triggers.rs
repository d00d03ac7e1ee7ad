//! `[triggers]`: how trigger runners read, retry, park and lease.

use serde::Deserialize;

use super::*;

/// Which node a trigger reads the change log from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum TriggerRead {
    /// The master: the lowest lag, at the master's expense.
    Master,
    /// A minion (the default): load off the master, replication lag on
    /// top.
    Minion,
}

/// What a trigger does with a cell whose handler keeps failing.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum OnFailure {
    /// Park it in `trigger_dead_letters` and move on (the default).
    Park,
    /// Stop the shard there; the others go on.
    StopShard,
}

/// `[triggers]`
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Triggers {
    /// `triggers.batch`: change-log cells read per round. 1–10000.
    /// Default 100.
    #[serde(default = "default_trigger_batch")]
    pub batch: usize,
    /// `triggers.read_from`: `minion` (default) or `master`.
    #[serde(default = "default_trigger_read")]
    pub read_from: TriggerRead,
    /// `triggers.max_tries`: handler calls per cell before it is parked
    /// (or its shard stopped). 1–1000. Default 5.
    #[serde(default = "default_max_tries")]
    pub max_tries: u32,
    /// `triggers.retry_backoff_ms`: wait after the first failure, doubled
    /// after each further one (at most 30 s). 0–600000. Default 100.
    #[serde(default = "default_retry_backoff_ms")]
    pub retry_backoff_ms: u64,
    /// `triggers.on_failure`: `park` (default) or `stop_shard`.
    #[serde(default = "default_on_failure")]
    pub on_failure: OnFailure,
    /// `triggers.max_parked`: past this many parked cells (over the shards
    /// a runner owns) the trigger stops and says why. 0–10000000. Default
    /// 1000.
    #[serde(default = "default_max_parked")]
    pub max_parked: u64,
    /// `triggers.lease_ms`: how long a runner owns a shard without renewing;
    /// the shards of a runner that died are taken over after this.
    /// 100–3600000. Default 10000.
    #[serde(default = "default_lease_ms")]
    pub lease_ms: u64,
    /// `triggers.poll_ms`: how often an idle shard looks for new cells
    /// (writes made by the same process wake it at once). 1–600000.
    /// Default 200.
    #[serde(default = "default_poll_ms")]
    pub poll_ms: u64,
    /// `triggers.watch_ms`: how often a runner asks each cluster's master
    /// for the newest added_id of every shard it owns (one query per
    /// cluster) and wakes the shards that have cells it has not handled:
    /// how writes of other processes reach it without every shard polling.
    /// 0 turns it off (shards then rely on `poll_ms`). 0–60000. Default 5.
    #[serde(default = "default_watch_ms")]
    pub watch_ms: u64,
}

impl Default for Triggers {
    fn default() -> Self {
        Triggers {
            batch: default_trigger_batch(),
            read_from: default_trigger_read(),
            max_tries: default_max_tries(),
            retry_backoff_ms: default_retry_backoff_ms(),
            on_failure: default_on_failure(),
            max_parked: default_max_parked(),
            lease_ms: default_lease_ms(),
            poll_ms: default_poll_ms(),
            watch_ms: default_watch_ms(),
        }
    }
}

fn default_trigger_batch() -> usize {
    100
}

fn default_trigger_read() -> TriggerRead {
    TriggerRead::Minion
}

fn default_max_tries() -> u32 {
    5
}

fn default_retry_backoff_ms() -> u64 {
    100
}

fn default_on_failure() -> OnFailure {
    OnFailure::Park
}

fn default_max_parked() -> u64 {
    1000
}

fn default_lease_ms() -> u64 {
    10_000
}

fn default_watch_ms() -> u64 {
    5
}
