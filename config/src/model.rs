//! The configuration types. The `///` doc of each field is the reference
//! documentation of its key (docs/config.md follows it).

use serde::Deserialize;

use crate::layout::{Index, Layout, Legacy};
use crate::shards::ShardRange;

/// A whole configuration file.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Config {
    /// `[instance]`: which Schemaless data set this is.
    pub instance: Instance,
    /// `[[cluster]]`: the MariaDB clusters, each holding a range of shards.
    /// Together their ranges cover `0..shard_count` exactly once.
    #[serde(rename = "cluster")]
    pub clusters: Vec<Cluster>,
    /// `[limits]`: what the cell API accepts.
    #[serde(default)]
    pub limits: Limits,
    /// `[storage]`: how the store talks to its storage nodes.
    #[serde(default)]
    pub storage: Storage,
    /// `[legacy]`: the PostgreSQL database the data comes from. Needed by
    /// the legacy model, the facade and the migration commands.
    pub legacy: Option<Legacy>,
    /// `[layout]`: how the legacy tables map to Schemaless columns.
    pub layout: Option<Layout>,
    /// `[[index]]`: secondary indexes over fields of a layout column.
    #[serde(rename = "index", default)]
    pub indexes: Vec<Index>,
    /// `[triggers]`: how trigger runners follow the change log.
    #[serde(default)]
    pub triggers: Triggers,
    /// `[mirror]`: the outbox relay and the reverse mirror.
    #[serde(default)]
    pub mirror: Mirror,
    /// `[gates]`: what `mode set` checks before a step forward.
    #[serde(default)]
    pub gates: Gates,
    /// `[backfill]`: the copy of the history into Schemaless.
    #[serde(default)]
    pub backfill: Backfill,
    /// `[verify]`: sampled read replay and the full diff.
    #[serde(default)]
    pub verify: Verify,
    /// `[capture]`: changes made to the legacy tables by writers other
    /// than the facade (plain SQL), recorded by PostgreSQL itself.
    #[serde(default)]
    pub capture: Capture,
    /// `[worker]`: the HTTP workers serving the cell API.
    #[serde(default)]
    pub worker: crate::worker::Worker,
    /// `[guard]`: when the guard steps the cutover back.
    #[serde(default)]
    pub guard: crate::guard::Guard,
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

fn default_tombstone_column() -> String {
    "DELETED".to_string()
}

fn default_capture_lock_timeout_ms() -> u64 {
    500
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

/// `[verify]`: how reads are sampled, replayed and compared. The sample
/// rate and the cap are only the starting values: `mezzanine verify
/// sample` changes them for every running facade.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Verify {
    /// `verify.sample_rate`: the share of facade reads (in `mirror`,
    /// `shadow` and `primary`) replayed on the other store. 0.0–1.0.
    /// Default 0.01.
    #[serde(default = "default_sample_rate")]
    pub sample_rate: f64,
    /// `verify.max_samples_per_sec`: at most this many samples per second
    /// per facade, whatever the rate. 1–1000000. Default 500.
    #[serde(default = "default_max_samples_per_sec")]
    pub max_samples_per_sec: u64,
    /// `verify.queue`: samples waiting for replay per facade; a sample
    /// that finds the queue full is dropped and counted. 1–1000000.
    /// Default 1024.
    #[serde(default = "default_verify_queue")]
    pub queue: usize,
    /// `verify.replayers`: replays run at once per facade. 1–64. Default 2.
    #[serde(default = "default_replayers")]
    pub replayers: usize,
    /// `verify.triage_delay_ms`: a difference is read again after this
    /// long (and once the outbox and the reverse mirror have caught up
    /// with its rows) before it is recorded. 0–600000. Default 200.
    #[serde(default = "default_triage_delay_ms")]
    pub triage_delay_ms: u64,
    /// `verify.triage_wait_ms`: how long triage waits at most for
    /// in-flight writes of the rows to land. 0–3600000. Default 5000.
    #[serde(default = "default_triage_wait_ms")]
    pub triage_wait_ms: u64,
    /// `verify.ignore`: what comparisons skip: `"COLUMN"` (a whole
    /// column) or `"COLUMN.field"` (one field of its bodies).
    #[serde(default)]
    pub ignore: Vec<String>,
    /// `verify.tolerance`: `"COLUMN.field" = number`: numbers of that
    /// field that differ by at most this much are equal.
    #[serde(default)]
    pub tolerance: std::collections::BTreeMap<String, f64>,
    /// `verify.chunk_size`: parent ids per chunk of `verify full`.
    /// 1–1000000. Default 1000.
    #[serde(default = "default_verify_chunk_size")]
    pub chunk_size: u64,
    /// `verify.workers`: chunks `verify full` compares at once. 1–256.
    /// Default 4.
    #[serde(default = "default_verify_workers")]
    pub workers: usize,
    /// `verify.stale_after_ms`: a chunk of `verify full` whose worker has
    /// not written a heartbeat for this long (it died) is compared again
    /// by another. 100–3600000. Default 20000.
    #[serde(default = "default_verify_stale_after_ms")]
    pub stale_after_ms: u64,
    /// `verify.strict`: `verify full` also has PostgreSQL read every value
    /// Schemaless holds, cast to its column's type, and compares that with
    /// the column itself, so that a bug in the conversion shows instead of
    /// agreeing with itself. `verify full --strict` turns it on for a run.
    /// Default false.
    #[serde(default)]
    pub strict: bool,
}

fn default_verify_stale_after_ms() -> u64 {
    20_000
}

fn default_sample_rate() -> f64 {
    0.01
}

fn default_max_samples_per_sec() -> u64 {
    500
}

fn default_verify_queue() -> usize {
    1024
}

fn default_replayers() -> usize {
    2
}

fn default_triage_delay_ms() -> u64 {
    200
}

fn default_triage_wait_ms() -> u64 {
    5000
}

fn default_verify_chunk_size() -> u64 {
    1000
}

fn default_verify_workers() -> usize {
    4
}

impl Default for Verify {
    fn default() -> Self {
        Verify {
            sample_rate: default_sample_rate(),
            max_samples_per_sec: default_max_samples_per_sec(),
            queue: default_verify_queue(),
            replayers: default_replayers(),
            triage_delay_ms: default_triage_delay_ms(),
            triage_wait_ms: default_triage_wait_ms(),
            ignore: Vec::new(),
            tolerance: Default::default(),
            chunk_size: default_verify_chunk_size(),
            workers: default_verify_workers(),
            stale_after_ms: default_verify_stale_after_ms(),
            strict: false,
        }
    }
}

/// `[backfill]`: how the history is copied. Every key is also a flag of
/// `mezzanine backfill plan|run`, which overrides it.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Backfill {
    /// `backfill.chunk_size`: parent ids per chunk (a chunk is read in one
    /// snapshot and written in a few batches; memory per worker follows
    /// it). 1–1000000. Default 1000.
    #[serde(default = "default_chunk_size")]
    pub chunk_size: u64,
    /// `backfill.workers`: chunks copied at once by one process. 1–256.
    /// Default 4.
    #[serde(default = "default_backfill_workers")]
    pub workers: usize,
    /// `backfill.max_rows_per_sec`: legacy rows copied per second by one
    /// process, at most; 0 for no limit. Default 0.
    #[serde(default)]
    pub max_rows_per_sec: u64,
    /// `backfill.max_replication_lag_ms`: workers pause while any minion is
    /// further behind its master than this. 0 turns the check off.
    /// 0–3600000. Default 5000.
    #[serde(default = "default_max_replication_lag_ms")]
    pub max_replication_lag_ms: u64,
    /// `backfill.stale_after_ms`: a running chunk whose owner has not
    /// written a heartbeat for this long is claimed again by another
    /// worker. 100–3600000. Default 30000.
    #[serde(default = "default_stale_after_ms")]
    pub stale_after_ms: u64,
}

fn default_chunk_size() -> u64 {
    1000
}

fn default_backfill_workers() -> usize {
    4
}

fn default_max_replication_lag_ms() -> u64 {
    5000
}

fn default_stale_after_ms() -> u64 {
    30_000
}

impl Default for Backfill {
    fn default() -> Self {
        Backfill {
            chunk_size: default_chunk_size(),
            workers: default_backfill_workers(),
            max_rows_per_sec: 0,
            max_replication_lag_ms: default_max_replication_lag_ms(),
            stale_after_ms: default_stale_after_ms(),
        }
    }
}

/// `[gates]`: the thresholds of the steps forward.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Gates {
    /// `gates.max_outbox_lag_ms`: entering `shadow` or `primary` waits
    /// until the oldest outbox entry is younger than this: the relay keeps
    /// up, and what is left is seconds of live writes in flight. 0 demands
    /// an empty outbox (possible only without writes). 0–3600000. Default
    /// 2000.
    #[serde(default = "default_max_outbox_lag_ms")]
    pub max_outbox_lag_ms: u64,
    /// `gates.max_mismatch_upper_bound`: entering `shadow` or `primary`
    /// needs the 95% upper confidence bound of the mismatch rate, over the
    /// samples since the current mode began (and since the backfill
    /// finished), at most this. 0.0–1.0. Default 0.0001.
    #[serde(default = "default_max_mismatch_upper_bound")]
    pub max_mismatch_upper_bound: f64,
    /// `gates.min_samples`: ... and at least this many samples in that
    /// window (the full diff's comparisons count as samples). 0 waives
    /// both sample checks while nothing was sampled. Default 10000.
    #[serde(default = "default_min_samples")]
    pub min_samples: u64,
    /// `gates.min_coverage`: ... and at least this share of parent rows
    /// verified (sampled or fully diffed) since their last write, in every
    /// column. 0.0–1.0. Default 0.0 (not checked).
    #[serde(default)]
    pub min_coverage: f64,
    /// `gates.max_direct_writes`: entering `primary` needs at most this
    /// many writes to layout tables, since the current mode began, by
    /// statements Mezzanine did not send (counted from
    /// `pg_stat_statements`; Mezzanine's own start with `/* mezzanine */`).
    /// In `primary` such a write would land where Schemaless no longer
    /// reads from. Default 0.
    #[serde(default)]
    pub max_direct_writes: u64,
}

fn default_max_mismatch_upper_bound() -> f64 {
    0.0001
}

fn default_min_samples() -> u64 {
    10_000
}

fn default_max_outbox_lag_ms() -> u64 {
    2000
}

impl Default for Gates {
    fn default() -> Self {
        Gates {
            max_outbox_lag_ms: default_max_outbox_lag_ms(),
            max_mismatch_upper_bound: default_max_mismatch_upper_bound(),
            min_samples: default_min_samples(),
            min_coverage: 0.0,
            max_direct_writes: 0,
        }
    }
}

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

fn default_poll_ms() -> u64 {
    200
}

fn default_watch_ms() -> u64 {
    5
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

/// `[instance]`
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Instance {
    /// `instance.name`: names the data set; every shard database is called
    /// `<name>_<shard:04>`. 1–32 characters of `[a-z0-9_]`, starting with a
    /// letter.
    pub name: String,
    /// `instance.shard_count`: the number of shards, fixed for the life of
    /// the instance (routing depends on it). 1–10000; 4096 in production.
    pub shard_count: u32,
}

/// `[[cluster]]`: one master and its minions, holding a range of shards.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Cluster {
    /// `cluster.name`: unique among clusters; 1–32 characters of
    /// `[a-z0-9_-]`.
    pub name: String,
    /// `cluster.master`: URL of the master, `mysql://USER[:PASS]@HOST:PORT`.
    /// All writes and default reads go here.
    pub master: String,
    /// `cluster.minions`: URLs of the replicas of the master (GTID
    /// replication), used for `ReadFrom::Minion` reads. May be empty.
    #[serde(default)]
    pub minions: Vec<String>,
    /// `cluster.shards`: the shards this cluster holds, `"FIRST-LAST"`
    /// (inclusive) or a single number.
    pub shards: ShardRange,
}

/// `[limits]`: checked at the cell API boundary, before anything is written.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Limits {
    /// `limits.max_body_bytes`: the largest cell body accepted, measured as
    /// its compact JSON text. 2 bytes (`{}`) to 8 MiB. Default 1 MiB.
    #[serde(default = "default_max_body_bytes")]
    pub max_body_bytes: usize,
    /// `limits.max_batch_cells`: the most cells one `put_cells` call takes.
    /// 1–100000. Default 1000.
    #[serde(default = "default_max_batch_cells")]
    pub max_batch_cells: usize,
    /// `limits.max_batch_bytes`: the most bytes of body (compact JSON) one
    /// `put_cells` call takes, so that a batch of large cells cannot take
    /// gigabytes of memory at once; the relay and the backfill cut their
    /// batches to it, and a page of the change log stops once this many
    /// bytes of stored body are read past its first cell. At least
    /// `max_body_bytes`, at most 1 GiB. Default 64 MiB.
    #[serde(default = "default_max_batch_bytes")]
    pub max_batch_bytes: usize,
}

fn default_max_batch_bytes() -> usize {
    64 * 1024 * 1024
}

fn default_max_body_bytes() -> usize {
    1024 * 1024
}

fn default_max_batch_cells() -> usize {
    1000
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_body_bytes: default_max_body_bytes(),
            max_batch_cells: default_max_batch_cells(),
            max_batch_bytes: default_max_batch_bytes(),
        }
    }
}

/// `[storage]`: connections and parallelism towards the storage nodes.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Storage {
    /// `storage.max_connections_per_node`: size of the one connection pool
    /// kept per storage node (never per shard). 1–1000. Default 16.
    #[serde(default = "default_max_connections_per_node")]
    pub max_connections_per_node: u32,
    /// `storage.connect_timeout_ms`: how long to wait for a connection from
    /// a node's pool before the request fails. 1–3600000. Default 5000.
    #[serde(default = "default_connect_timeout_ms")]
    pub connect_timeout_ms: u64,
    /// `storage.request_timeout_ms`: how long one statement may take before
    /// the call fails with a (retryable) timeout, so that a frozen server
    /// cannot hang its callers. 1–3600000. Default 10000.
    #[serde(default = "default_request_timeout_ms")]
    pub request_timeout_ms: u64,
    /// `storage.write_parallelism`: when a `put_cells` call meets cells
    /// that already exist, how many of one master's shard groups are
    /// compared and written at the same time. 1–256. Default 8.
    #[serde(default = "default_write_parallelism")]
    pub write_parallelism: usize,
    /// `storage.write_lanes`: how many write transactions one master runs
    /// at a time for the `put_cells` calls of this process. Calls that
    /// arrive while every lane is busy are combined into the next
    /// transaction (one multi-row `INSERT` per shard for all of them, one
    /// commit): fewer, larger statements cost the master and its minions
    /// far less per cell. More lanes let one master use more cores for a
    /// single process's writes. 1–64. Default 2.
    #[serde(default = "default_write_lanes")]
    pub write_lanes: usize,
    /// `storage.breaker_failures`: consecutive failures or timeouts of one
    /// storage node after which its circuit breaker opens: requests to it
    /// fail at once (master reads fail over to a minion, writes go to the
    /// buffers) instead of each waiting out a timeout. 1–1000. Default 3.
    #[serde(default = "default_breaker_failures")]
    pub breaker_failures: u32,
    /// `storage.breaker_open_ms`: how long an open breaker waits before it
    /// is half-open and one probe (`SELECT 1`) is sent; the probe closes it
    /// or opens it again. 10–600000. Default 1000.
    #[serde(default = "default_breaker_open_ms")]
    pub breaker_open_ms: u64,
    /// `storage.buffer_secondaries`: buffered writes. Every write first goes
    /// to the buffer table of this many masters of *other* clusters, chosen
    /// at random, then to its own master, and is acknowledged only when
    /// both hold it; with its master down it is acknowledged `Buffered`
    /// from the buffers alone (hinted handoff). 0 turns buffering off. At
    /// most the number of clusters minus one. Default 0.
    #[serde(default)]
    pub buffer_secondaries: u32,
    /// `storage.buffer_replay_after_ms`: how old a buffered cell must be
    /// before the reconciler writes it to its master itself (younger ones
    /// are usually still on their way there). 0–3600000. Default 2000.
    #[serde(default = "default_buffer_replay_after_ms")]
    pub buffer_replay_after_ms: u64,
    /// `storage.topology_refresh_ms`: how often every store re-reads the
    /// promotions recorded by `mezzanine cluster promote` and probes its
    /// open breakers. 50–600000. Default 1000.
    #[serde(default = "default_topology_refresh_ms")]
    pub topology_refresh_ms: u64,
    /// `storage.reconcile_in_app`: whether every store with buffered writes
    /// on also runs the buffer reconciler in the background (reconcilers
    /// take turns per buffer table). Turn it off to reconcile only with
    /// `mezzanine buffer reconcile`. Default true.
    #[serde(default = "yes")]
    pub reconcile_in_app: bool,
    /// `storage.durability`: on how many hosts a write must be before it is
    /// acknowledged. `"two_hosts"` (the default): the master's semi-
    /// synchronous replication (`rpl_semi_sync_master_enabled`, with a
    /// `rpl_semi_sync_master_timeout` longer than `request_timeout_ms`, so
    /// it cannot fall back to asynchronous before the call gives up) or
    /// buffered writes (`buffer_secondaries` >= 1) must hold it on a second
    /// host; a master offering neither is refused writes. `"one_host"`: the
    /// master's commit is enough, and a promotion after it dies can lose
    /// what no minion had received; chosen only explicitly, warned of
    /// everywhere, and the `primary` gate refuses it.
    #[serde(default)]
    pub durability: Durability,
}

/// `storage.durability`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Durability {
    /// Acknowledged only when a second host holds the write.
    #[default]
    TwoHosts,
    /// Acknowledged when the master has committed it.
    OneHost,
}

impl Durability {
    /// The key's value as written in the config.
    pub fn as_str(self) -> &'static str {
        match self {
            Durability::TwoHosts => "two_hosts",
            Durability::OneHost => "one_host",
        }
    }
}

/// The warning every command shows while `storage.durability = "one_host"`.
pub const ONE_HOST_WARNING: &str = "storage.durability = \"one_host\": a write is acknowledged once its master has it, and a promotion after that master dies can lose it; the primary gate refuses this setting";

fn default_breaker_failures() -> u32 {
    3
}

fn default_breaker_open_ms() -> u64 {
    1000
}

fn default_buffer_replay_after_ms() -> u64 {
    2000
}

fn default_topology_refresh_ms() -> u64 {
    1000
}

fn default_max_connections_per_node() -> u32 {
    16
}

fn default_connect_timeout_ms() -> u64 {
    5000
}

fn default_request_timeout_ms() -> u64 {
    10_000
}

fn default_write_parallelism() -> usize {
    8
}

fn default_write_lanes() -> usize {
    2
}

impl Default for Storage {
    fn default() -> Self {
        Storage {
            max_connections_per_node: default_max_connections_per_node(),
            connect_timeout_ms: default_connect_timeout_ms(),
            request_timeout_ms: default_request_timeout_ms(),
            write_parallelism: default_write_parallelism(),
            write_lanes: default_write_lanes(),
            breaker_failures: default_breaker_failures(),
            breaker_open_ms: default_breaker_open_ms(),
            buffer_secondaries: 0,
            buffer_replay_after_ms: default_buffer_replay_after_ms(),
            topology_refresh_ms: default_topology_refresh_ms(),
            reconcile_in_app: true,
            durability: Durability::default(),
        }
    }
}

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

fn yes() -> bool {
    true
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
