//! `[mirror]` and `[capture]`: the outbox's relay, the reverse mirror, and
//! how plain SQL writes are captured.

use serde::Deserialize;

use super::*;

/// `[mirror]`: how writes reach the other store in modes `mirror`,
/// `shadow` (the outbox relay) and `primary` (the reverse mirror).
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Mirror {
    /// `mirror.relay_in_app`: whether every facade runs an outbox relay as
    /// a background task (several relays share the work). Turn it off to
    /// relay only with `mezzanine mirror relay`. Default true.
    #[serde(default = "yes")]
    pub relay_in_app: bool,
    /// `mirror.relay_batch`: outbox entries a relay moves per transaction.
    /// 1–10000. Default 500.
    #[serde(default = "default_relay_batch")]
    pub relay_batch: usize,
    /// `mirror.relay_poll_ms`: how often an idle relay looks at the outbox
    /// (writes of its own process wake it at once). 1–600000. Default 100.
    #[serde(default = "default_mirror_poll_ms")]
    pub relay_poll_ms: u64,
    /// `mirror.relay_linger_ms`: how long a relay waits for more entries
    /// before a batch that would not be full, trading that much relay
    /// latency for fewer, larger transactions under load. 0–10000.
    /// Default 10.
    #[serde(default = "default_relay_linger_ms")]
    pub relay_linger_ms: u64,
    /// `mirror.retry_backoff_ms`: the wait after a failed delivery, doubled
    /// after each further failure up to `max_backoff_ms`. 1–600000.
    /// Default 100.
    #[serde(default = "default_mirror_backoff_ms")]
    pub retry_backoff_ms: u64,
    /// `mirror.max_backoff_ms`: the longest wait between failed deliveries.
    /// 1–3600000, at least `retry_backoff_ms`. Default 5000.
    #[serde(default = "default_mirror_max_backoff_ms")]
    pub max_backoff_ms: u64,
    /// `mirror.reverse_in_app`: whether every facade runs the reverse
    /// mirror as a background task in modes `shadow` and `primary`.
    /// Default true.
    #[serde(default = "yes")]
    pub reverse_in_app: bool,
    /// `mirror.reverse_batch`: change-log cells of one shard applied to
    /// PostgreSQL per transaction. 1–10000. Default 500.
    #[serde(default = "default_relay_batch")]
    pub reverse_batch: usize,
    /// `mirror.reverse_poll_ms`: how often the reverse mirror looks for new
    /// cells on an idle shard (writes of its own process wake it at once).
    /// 1–600000. Default 200.
    #[serde(default = "default_poll_ms")]
    pub reverse_poll_ms: u64,
}

impl Default for Mirror {
    fn default() -> Self {
        Mirror {
            relay_in_app: true,
            relay_batch: default_relay_batch(),
            relay_poll_ms: default_mirror_poll_ms(),
            relay_linger_ms: default_relay_linger_ms(),
            retry_backoff_ms: default_mirror_backoff_ms(),
            max_backoff_ms: default_mirror_max_backoff_ms(),
            reverse_in_app: true,
            reverse_batch: default_relay_batch(),
            reverse_poll_ms: default_poll_ms(),
        }
    }
}

/// `[capture]`: database-side capture of writes that bypass the facade.
/// `mezzanine capture install` adds triggers to every table of the layout;
/// each change they record is delivered to Schemaless by the relay, at the
/// row's newest version.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Capture {
    /// `capture.method`: how PostgreSQL records the changes. `triggers`
    /// (the default): row triggers write a queue row in the writer's
    /// transaction; works on any server, costs every write a little.
    /// `logical`: a logical replication slot (`pgoutput`) decoded by the
    /// relay; costs the writes nothing, but needs `wal_level = logical`,
    /// the `REPLICATION` attribute for the roles relays run as, and
    /// retains WAL while no relay reads the slot.
    #[serde(default)]
    pub method: CaptureMethod,
    /// `capture.enabled`: whether relays deliver captured changes and
    /// `capture install` may run. With it off the capture queue is left
    /// alone (and grows, if capture is installed). Default true.
    #[serde(default = "yes")]
    pub enabled: bool,
    /// `capture.bump_version`: `capture install` also adds a `BEFORE
    /// UPDATE` trigger to the parent table that raises a row column's ref
    /// key (its version) by one when an update changes a mapped field of
    /// the column and the writer did not raise it. Without it such an
    /// update would be a second body at the same ref key: the relay parks
    /// it, with both bodies. Default false.
    #[serde(default)]
    pub bump_version: bool,
    /// `capture.required`: whether the gates demand capture. Entering
    /// `mirror` then needs it installed, and current, on every table of
    /// the layout; entering `shadow` or `primary` also needs its queue's
    /// oldest entry younger than `gates.max_outbox_lag_ms` and nothing
    /// parked. Default true.
    #[serde(default = "yes")]
    pub required: bool,
    /// `capture.tombstone_column`: the Schemaless column a deleted legacy
    /// row is recorded in (cells are immutable, so a delete is a tombstone
    /// cell that hides what it names). Facade reads, sampled replays and
    /// the full diff treat hidden cells as absent. Must not be a layout
    /// column. Default `DELETED`.
    #[serde(default = "default_tombstone_column")]
    pub tombstone_column: String,
    /// `capture.lock_timeout_ms`: `capture install` and `uninstall` change
    /// triggers under a table lock; a lock not granted within this is
    /// given up and tried again after a pause, so that the app's writes
    /// never queue long behind the DDL. 10–60000. Default 500 (below
    /// PostgreSQL's `deadlock_timeout`, so the DDL gives way first).
    #[serde(default = "default_capture_lock_timeout_ms")]
    pub lock_timeout_ms: u64,
}

/// How PostgreSQL records the changes capture delivers.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum CaptureMethod {
    /// Row triggers on every layout table, writing a queue row in the
    /// writer's transaction.
    #[default]
    Triggers,
    /// A logical replication slot and a publication of the layout's
    /// tables, decoded by the relay.
    Logical,
}

impl CaptureMethod {
    /// `triggers` or `logical`.
    pub fn as_str(&self) -> &'static str {
        match self {
            CaptureMethod::Triggers => "triggers",
            CaptureMethod::Logical => "logical",
        }
    }
}

impl Default for Capture {
    fn default() -> Self {
        Capture {
            method: CaptureMethod::default(),
            enabled: true,
            bump_version: false,
            required: true,
            tombstone_column: default_tombstone_column(),
            lock_timeout_ms: default_capture_lock_timeout_ms(),
        }
    }
}

fn default_tombstone_column() -> String {
    "DELETED".to_string()
}

fn default_capture_lock_timeout_ms() -> u64 {
    500
}

fn default_relay_batch() -> usize {
    500
}

fn default_mirror_poll_ms() -> u64 {
    100
}

fn default_relay_linger_ms() -> u64 {
    10
}

fn default_mirror_backoff_ms() -> u64 {
    100
}

fn default_mirror_max_backoff_ms() -> u64 {
    5000
}
