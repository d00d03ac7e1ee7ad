//! The configuration types. The `///` doc of each field is the reference
//! documentation of its key (docs/config.md follows it).
//!
//! One file per section or pair of sections: `storage`, `mirror` (with
//! `[capture]`), `verify` (with `[gates]`), `backfill`, `triggers`;
//! `[guard]` and `[worker]` live in their crate-level modules. This file
//! holds the whole file's type and the instance, clusters and limits.

use serde::Deserialize;

use crate::layout::{Index, Layout, Legacy};
use crate::shards::ShardRange;

mod backfill;
mod mirror;
mod storage;
mod triggers;
mod verify;

pub use backfill::Backfill;
pub use mirror::{Capture, CaptureMethod, Mirror};
pub use storage::{Durability, Storage, ONE_HOST_WARNING};
pub use triggers::{OnFailure, TriggerRead, Triggers};
pub use verify::{Gates, Verify};

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
    /// `[proxy]`: the PostgreSQL wire-protocol proxy.
    #[serde(default)]
    pub proxy: crate::proxy::Proxy,
    /// `[guard]`: when the guard steps the cutover back.
    #[serde(default)]
    pub guard: crate::guard::Guard,
}

fn default_poll_ms() -> u64 {
    200
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
    /// `cluster.shards`: the shards this cluster is created with,
    /// `"FIRST-LAST"` (inclusive) or a single number. Left out, the
    /// cluster starts with none: a cluster added to split another
    /// (`mezzanine cluster add`), which gets shards by `shard move`.
    #[serde(default)]
    pub shards: Option<ShardRange>,
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

fn yes() -> bool {
    true
}
