//! `[storage]`: how the store talks to its MariaDB nodes, and how durable
//! an acknowledged write is.

use serde::Deserialize;

use super::*;

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
