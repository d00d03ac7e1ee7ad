//! Where each shard lives: clusters, their storage nodes, one connection
//! pool per node.
//!
//! Pools belong to nodes, never to shards: with 4096 shards on a handful of
//! servers, a pool per shard would hold thousands of idle connections.
//! Every query names its shard's database instead (`trips_0042.entity`).
//!
//! Every node has a [circuit breaker](super::breaker), consulted when a
//! connection is taken and fed by every statement's outcome. Which member
//! of a cluster is its master can change while the store runs: `mezzanine
//! cluster promote` records a promotion, and every store picks it up (see
//! [`super::failover`]). The members themselves are fixed by config.
//!
//! Which cluster holds a shard starts as config says and can change while
//! the store runs too: a shard move records the shard's new cluster (its
//! *placement*), and every store picks it up (see [`placement`]). The
//! shard map is one atomic per shard, so a lookup on the hot path is one
//! load.
//!
//! One storage node, its pool, breaker and statements, is [`node`]'s
//! room; this file holds the clusters, their roles and readers, and the
//! shard map.

use std::str::FromStr;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, RwLock};
use std::time::Duration;

use sqlx::mysql::{MySqlArguments, MySqlConnectOptions, MySqlPool, MySqlPoolOptions, MySqlRow};
use sqlx::{AssertSqlSafe, MySql};

use super::breaker::{Admission, Breaker};
use super::conn::{NodeConnection, Spares};
use crate::api::ReadFrom;
use crate::error::{Error, Result};
pub mod node;
pub mod placement;

pub use config::urls::redact;
pub use node::{packet_budget, Node, SemiSync};

/// One master and its minions.
#[derive(Clone, Debug)]
pub struct ClusterNodes {
    /// The cluster's name from config.
    pub name: String,
    /// Every node of the cluster in config order: the configured master,
    /// then the minions. Which of them is the master now is in `roles`.
    pub members: Vec<Arc<Node>>,
    roles: Arc<RwLock<Roles>>,
    /// The shards config gives it (none for a cluster added to split
    /// another). Which it holds now (after shard moves) is
    /// [`Topology::shards_of`].
    pub configured: Option<config::ShardRange>,
}

/// Which member is the master, since which promotion.
#[derive(Clone, Copy, Debug)]
struct Roles {
    master: usize,
    /// 0 for the configured master; each promotion records a higher one.
    epoch: u64,
}

impl ClusterNodes {
    fn roles(&self) -> Roles {
        *self.roles.read().unwrap_or_else(|p| p.into_inner())
    }

    /// Where writes and master reads go.
    pub fn master(&self) -> Arc<Node> {
        self.members[self.roles().master].clone()
    }

    /// The replicas, for minion reads and failover.
    pub fn minions(&self) -> Vec<Arc<Node>> {
        let master = self.roles().master;
        self.members
            .iter()
            .enumerate()
            .filter(|&(i, _)| i != master)
            .map(|(_, n)| n.clone())
            .collect()
    }

    /// The promotion the current master came from (0: as configured).
    pub fn epoch(&self) -> u64 {
        self.roles().epoch
    }

    /// The member with this label, by position.
    pub fn member(&self, label: &str) -> Option<usize> {
        self.members.iter().position(|n| n.label == label)
    }

    /// Makes `members[master]` the master, if `epoch` is newer than the
    /// promotion in force. Returns whether anything changed.
    pub(crate) fn promote(&self, master: usize, epoch: u64) -> bool {
        let mut roles = self.roles.write().unwrap_or_else(|p| p.into_inner());
        if epoch <= roles.epoch || master >= self.members.len() {
            return false;
        }
        let changed = roles.master != master;
        *roles = Roles { master, epoch };
        changed
    }

    /// Where a read of this cluster goes, in the order to try: for a
    /// master read the master, then the minions (answers that may be
    /// stale); for a minion read the minions, then the master. Minions
    /// come in random order to spread load. Nodes whose breaker is open
    /// are left out.
    pub fn readers(&self, from: ReadFrom) -> Vec<Reader> {
        let master = self.master();
        let mut minions = self.minions();
        shuffle(&mut minions);
        let mut order = Vec::with_capacity(self.members.len());
        match from {
            ReadFrom::Master => {
                order.push(Reader {
                    node: master,
                    stale: false,
                });
                order.extend(minions.into_iter().map(|node| Reader { node, stale: true }));
            }
            ReadFrom::Minion => {
                order.extend(
                    minions
                        .into_iter()
                        .map(|node| Reader { node, stale: false }),
                );
                order.push(Reader {
                    node: master,
                    stale: false,
                });
            }
        }
        order.retain(|r| r.node.breaker.admit() == Admission::Allowed);
        order
    }
}

/// One node a read may go to.
#[derive(Clone, Debug)]
pub struct Reader {
    /// The node.
    pub node: Arc<Node>,
    /// Whether its answer may be older than the master's: a minion
    /// answering a master read.
    pub stale: bool,
}

fn shuffle<T>(items: &mut [T]) {
    for i in (1..items.len()).rev() {
        items.swap(i, rand::random_range(0..=i));
    }
}

/// The whole instance: names, shard count and the cluster of each shard.
#[derive(Clone, Debug)]
pub struct Topology {
    /// The instance name, prefix of every shard database.
    pub instance: String,
    /// Fixed for the life of the instance.
    pub shard_count: u32,
    /// The clusters, in config order.
    pub clusters: Vec<ClusterNodes>,
    /// For each shard, its index in `clusters` now, and the epoch of the
    /// placement that put it there (0: as configured). Shared by clones.
    cluster_of_shard: Arc<[AtomicUsize]>,
    placement_epoch: Arc<[AtomicU64]>,
    /// Held while a placement is applied, so that the epoch and the
    /// cluster of a shard change together.
    placing: Arc<std::sync::Mutex<()>>,
    /// Whether point reads use prepared statements (see
    /// [`Topology::prepared_reads`]).
    prepared_reads: bool,
}

/// Point reads come in two statement shapes per shard; with at most this
/// many shards on a node every connection can keep all of them prepared.
const MAX_PREPARED_SHARDS_PER_NODE: u32 = 512;

impl Topology {
    /// Builds the topology and its (lazy) pools from validated config.
    pub fn from_config(config: &config::Config) -> Result<Topology> {
        if tokio::runtime::Handle::try_current().is_err() {
            return Err(Error::NoRuntime);
        }
        let mut clusters = Vec::new();
        let most_shards = config
            .clusters
            .iter()
            .map(|c| c.shards.map_or(0, |r| r.len()))
            .max()
            .unwrap_or(0);
        let prepared_reads = most_shards <= MAX_PREPARED_SHARDS_PER_NODE;
        let statement_cache = if prepared_reads {
            2 * most_shards as usize + 16
        } else {
            16
        };
        let mut cluster_of_shard = vec![usize::MAX; config.instance.shard_count as usize];
        for (i, c) in config.clusters.iter().enumerate() {
            for shard in c.shards.iter().flat_map(|r| r.iter()) {
                // A config built in code skips validation: refuse a range
                // past the shard count rather than index out of bounds.
                let slot = cluster_of_shard.get_mut(shard as usize).ok_or_else(|| {
                    Error::Schema(format!(
                        "cluster {:?} holds shard {shard}, past the last shard {}",
                        c.name,
                        config.instance.shard_count.saturating_sub(1)
                    ))
                })?;
                *slot = i;
            }
            clusters.push(ClusterNodes {
                name: c.name.clone(),
                members: std::iter::once(&c.master)
                    .chain(&c.minions)
                    .map(|url| {
                        Node::connect_lazy(url, &config.storage, statement_cache).map(Arc::new)
                    })
                    .collect::<Result<_>>()?,
                roles: Arc::new(RwLock::new(Roles {
                    master: 0,
                    epoch: 0,
                })),
                configured: c.shards,
            });
        }
        // Config validation guarantees full coverage; check the invariant
        // rather than route a shard to a wrong cluster.
        if let Some(shard) = cluster_of_shard.iter().position(|&c| c == usize::MAX) {
            return Err(Error::Schema(format!(
                "shard {shard} belongs to no cluster"
            )));
        }
        Ok(Topology {
            instance: config.instance.name.clone(),
            shard_count: config.instance.shard_count,
            clusters,
            placement_epoch: cluster_of_shard.iter().map(|_| AtomicU64::new(0)).collect(),
            cluster_of_shard: cluster_of_shard.into_iter().map(AtomicUsize::new).collect(),
            placing: Arc::default(),
            prepared_reads,
        })
    }

    /// Whether point reads (`get_cell`, `get_cell_latest`) go as prepared
    /// statements. Prepared, a read skips parsing — a few percent of a
    /// loopback round trip — but every shard's database name makes its own
    /// statement, so that pays only while each connection can keep every
    /// shard's statements cached. With more shards per node than that,
    /// most reads would miss the cache and pay a prepare round trip, so
    /// they go as text instead (one round trip, always).
    pub fn prepared_reads(&self) -> bool {
        self.prepared_reads
    }

    /// The cluster holding `shard`.
    pub fn cluster(&self, shard: u32) -> Result<&ClusterNodes> {
        self.cluster_index(shard).map(|i| &self.clusters[i])
    }

    /// The index in `clusters` of the cluster holding `shard`.
    pub fn cluster_index(&self, shard: u32) -> Result<usize> {
        self.cluster_of_shard
            .get(shard as usize)
            .map(|i| i.load(Ordering::Relaxed))
            .ok_or(Error::NoSuchShard {
                shard,
                shard_count: self.shard_count,
            })
    }

    /// The shards `clusters[cluster]` holds now, in order.
    pub fn shards_of(&self, cluster: usize) -> Vec<u32> {
        self.cluster_of_shard
            .iter()
            .enumerate()
            .filter(|(_, c)| c.load(Ordering::Relaxed) == cluster)
            .map(|(shard, _)| shard as u32)
            .collect()
    }

    /// The epoch of the placement in force for `shard` (0: as configured).
    pub fn placement_epoch(&self, shard: u32) -> u64 {
        self.placement_epoch
            .get(shard as usize)
            .map_or(0, |e| e.load(Ordering::Relaxed))
    }

    /// Puts `shard` on `clusters[cluster]` if `epoch` is newer than the
    /// placement in force. Returns whether the shard's cluster changed.
    pub(crate) fn place(&self, shard: u32, cluster: usize, epoch: u64) -> bool {
        let (Some(slot), Some(known)) = (
            self.cluster_of_shard.get(shard as usize),
            self.placement_epoch.get(shard as usize),
        ) else {
            return false;
        };
        if cluster >= self.clusters.len() {
            return false;
        }
        let _placing = self.placing.lock().unwrap_or_else(|p| p.into_inner());
        if known.load(Ordering::Acquire) >= epoch {
            return false;
        }
        known.store(epoch, Ordering::Release);
        slot.swap(cluster, Ordering::AcqRel) != cluster
    }

    /// The clusters' names, comma separated: for messages naming a
    /// cluster this config lacks.
    pub fn cluster_names(&self) -> String {
        self.clusters
            .iter()
            .map(|c| c.name.as_str())
            .collect::<Vec<_>>()
            .join(", ")
    }

    /// The index in `clusters` of the cluster named `name`.
    pub fn cluster_named(&self, name: &str) -> Option<usize> {
        self.clusters.iter().position(|c| c.name == name)
    }

    /// The node a read of `shard` goes to: the first of
    /// [`ClusterNodes::readers`]. Minion reads pick a minion at random to
    /// spread load; a cluster without minions answers from its master.
    /// With every node's breaker open, the master (whose call then fails
    /// fast).
    pub fn reader(&self, shard: u32, from: ReadFrom) -> Result<Arc<Node>> {
        let cluster = self.cluster(shard)?;
        Ok(cluster
            .readers(from)
            .into_iter()
            .next()
            .map_or_else(|| cluster.master(), |r| r.node))
    }

    /// The database holding `shard`: `<instance>_<shard:04>`.
    pub fn database(&self, shard: u32) -> String {
        database_name(&self.instance, shard)
    }

    /// Closes every pool.
    pub async fn close(&self) {
        for c in &self.clusters {
            for node in &c.members {
                node.close().await;
            }
        }
    }
}

/// `<instance>_<shard:04>`.
pub fn database_name(instance: &str, shard: u32) -> String {
    format!("{instance}_{shard:04}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn outside_a_runtime_is_an_error_not_a_panic() {
        let config = config::Config::parse(
            "[instance]\nname = \"t\"\nshard_count = 2\n[[cluster]]\nname = \"a\"\nmaster = \"mysql://root@127.0.0.1:1\"\nshards = \"0-1\"\n",
            "t.toml",
        )
        .unwrap();
        assert!(matches!(
            Topology::from_config(&config),
            Err(Error::NoRuntime)
        ));
    }

    #[test]
    fn database_names_are_zero_padded() {
        assert_eq!(database_name("trips", 42), "trips_0042");
        assert_eq!(database_name("trips", 4095), "trips_4095");
    }
}
