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

use std::str::FromStr;
use std::sync::{Arc, RwLock};
use std::time::Duration;

use sqlx::mysql::{MySqlArguments, MySqlConnectOptions, MySqlPool, MySqlPoolOptions, MySqlRow};
use sqlx::{AssertSqlSafe, MySql};

use super::breaker::{Admission, Breaker};
use super::conn::{NodeConnection, Spares};
use crate::api::ReadFrom;
use crate::error::{Error, Result};
pub use config::urls::redact;

/// How long a pooled connection may sit idle before it is pinged on its
/// way out of the pool.
const PING_IDLE_AFTER: Duration = Duration::from_secs(1);

/// One MySQL/MariaDB server and its connection pool.
#[derive(Clone, Debug)]
pub struct Node {
    /// The node's URL without its password, for errors and status output.
    pub label: String,
    /// Connections to it; created lazily, so a node that is down does not
    /// stop the others from serving.
    pub pool: MySqlPool,
    /// How long one statement may take before the call fails with
    /// [`Error::Timeout`]: a frozen server must not hang its callers.
    pub request_timeout: Duration,
    /// Its circuit breaker.
    pub breaker: Arc<Breaker>,
    /// The server's `@@max_allowed_packet`, read on every new connection
    /// (0 until the first).
    max_packet: Arc<std::sync::atomic::AtomicUsize>,
    /// Its semi-synchronous replication settings, read on every new
    /// connection (`None` until the first).
    semi_sync: Arc<std::sync::Mutex<Option<SemiSync>>>,
    /// Connections whose last call finished, kept for the next caller
    /// (see [`super::conn`]), at most `max_connections_per_node`.
    spares: Arc<Spares>,
    keep_spares: usize,
}

/// A master's semi-synchronous replication, as its variables say.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SemiSync {
    /// `@@rpl_semi_sync_master_enabled` (false where the variable does not
    /// exist: MySQL without the plugin).
    pub enabled: bool,
    /// `@@rpl_semi_sync_master_timeout`, in milliseconds: after it a commit
    /// no minion acknowledged goes ahead asynchronously.
    pub timeout_ms: u64,
    /// `@@rpl_semi_sync_master_wait_point`.
    pub wait_point: String,
}

impl SemiSync {
    /// The query of the settings, in [`SemiSync::of`]'s order.
    const SQL: &'static str = "SELECT CAST(@@rpl_semi_sync_master_enabled AS SIGNED), \
                               CAST(@@rpl_semi_sync_master_timeout AS UNSIGNED), \
                               CAST(@@rpl_semi_sync_master_wait_point AS CHAR)";

    /// No semi-synchronous replication (or none that can be read).
    pub fn off() -> SemiSync {
        SemiSync {
            enabled: false,
            timeout_ms: 0,
            wait_point: String::new(),
        }
    }

    /// The settings from a row of [`SemiSync::SQL`].
    fn of(row: &MySqlRow) -> SemiSync {
        use sqlx::Row;
        SemiSync {
            enabled: row.try_get::<i64, _>(0).is_ok_and(|e| e != 0),
            timeout_ms: row.try_get::<u64, _>(1).unwrap_or(0),
            wait_point: row.try_get::<String, _>(2).unwrap_or_default(),
        }
    }

    /// Why a commit on this master may be acknowledged while only it holds
    /// the write, for calls that give up after `request_timeout`; `None`
    /// when it cannot.
    pub fn gap(&self, request_timeout: Duration) -> Option<String> {
        if !self.enabled {
            return Some(
                "rpl_semi_sync_master_enabled is off (turn it on, with rpl_semi_sync_slave_enabled on its minions, \
                 or turn buffered writes on: storage.buffer_secondaries >= 1)"
                    .into(),
            );
        }
        if u128::from(self.timeout_ms) <= request_timeout.as_millis() {
            return Some(format!(
                "rpl_semi_sync_master_timeout ({} ms) is not longer than storage.request_timeout_ms ({} ms): \
                 a commit no minion acknowledged would go ahead asynchronously before the call gives up",
                self.timeout_ms,
                request_timeout.as_millis()
            ));
        }
        None
    }
}

/// The statement size assumed before a node's `@@max_allowed_packet` is
/// known: MySQL's smallest default (4 MiB).
const ASSUMED_MAX_PACKET: usize = 4 << 20;

/// The largest text sent in one packet: half the server's
/// `max_allowed_packet`, leaving room for the protocol and for rows
/// larger than the average.
pub fn packet_budget(max_allowed_packet: usize) -> usize {
    (max_allowed_packet / 2).max(64 * 1024)
}

impl Node {
    fn connect_lazy(url: &str, storage: &config::Storage, statement_cache: usize) -> Result<Node> {
        let label = redact(url);
        let max_packet = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let seen_packet = max_packet.clone();
        let semi_sync: Arc<std::sync::Mutex<Option<SemiSync>>> = Arc::default();
        let seen_semi_sync = semi_sync.clone();
        let options = MySqlConnectOptions::from_str(url)
            .map_err(|source| Error::Storage {
                node: label.clone(),
                source,
            })?
            .statement_cache_capacity(statement_cache.max(1));
        let pool = MySqlPoolOptions::new()
            .max_connections(storage.max_connections_per_node)
            .acquire_timeout(Duration::from_millis(storage.connect_timeout_ms))
            // sqlx pings every idle connection before handing it out: a
            // round trip for each statement of the hot paths, a third of a
            // point read's cost. A connection back from work within the
            // last second is as alive as the ping would say; one idle for
            // longer is pinged, and a dead one replaced, as before.
            .test_before_acquire(false)
            .before_acquire(|conn, meta| {
                Box::pin(async move {
                    if meta.idle_for >= PING_IDLE_AFTER {
                        sqlx::Connection::ping(conn).await?;
                    }
                    Ok(true)
                })
            })
            .after_connect(move |conn, _| {
                let seen_packet = seen_packet.clone();
                let seen_semi_sync = seen_semi_sync.clone();
                Box::pin(async move {
                    // Whether an acknowledged write is on a second host.
                    let settings = sqlx::query(SemiSync::SQL)
                        .fetch_one(&mut *conn)
                        .await
                        .map_or_else(|_| SemiSync::off(), |row| SemiSync::of(&row));
                    *seen_semi_sync.lock().unwrap_or_else(|p| p.into_inner()) = Some(settings);
                    // Statements are cut to fit the server's packet limit.
                    if let Ok(limit) = sqlx::query_scalar::<_, u64>("SELECT @@max_allowed_packet")
                        .fetch_one(&mut *conn)
                        .await
                    {
                        seen_packet.store(limit as usize, std::sync::atomic::Ordering::Relaxed);
                    }
                    // MariaDB copies the text of every row-changing
                    // statement into the binlog as an annotation, by
                    // default. Our inserts carry their bodies as hex, so
                    // that would write every body three times over (twice
                    // as text) on the master and again on every minion:
                    // it cost a third of the write throughput. The row
                    // events themselves are unaffected. MySQL has no such
                    // variable, and a server that refuses it keeps its
                    // default; neither is an error.
                    let _ = sqlx::raw_sql("SET SESSION binlog_annotate_row_events = OFF")
                        .execute(&mut *conn)
                        .await;
                    Ok(())
                })
            })
            .connect_lazy_with(options);
        Ok(Node {
            breaker: Arc::new(Breaker::new(
                &label,
                storage.breaker_failures,
                Duration::from_millis(storage.breaker_open_ms),
            )),
            label,
            pool,
            request_timeout: Duration::from_millis(storage.request_timeout_ms),
            max_packet,
            semi_sync,
            spares: Arc::default(),
            keep_spares: storage.max_connections_per_node as usize,
        })
    }

    /// Reads its semi-synchronous replication settings now (a promotion
    /// changes them on a node whose pooled connections read them before).
    pub async fn refresh_semi_sync(&self) -> Result<SemiSync> {
        let settings = match self.fetch_all(SemiSync::SQL.into()).await {
            Ok(rows) => rows.first().map_or_else(SemiSync::off, SemiSync::of),
            // The variables do not exist (MySQL without the plugin).
            Err(e @ Error::Storage { .. }) if !e.is_unavailable() => SemiSync::off(),
            Err(e) => return Err(e),
        };
        *self.semi_sync.lock().unwrap_or_else(|p| p.into_inner()) = Some(settings.clone());
        Ok(settings)
    }

    /// Its semi-synchronous replication as read on its newest connection;
    /// `None` before the first.
    pub fn semi_sync(&self) -> Option<SemiSync> {
        self.semi_sync
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// How many bytes of SQL text one packet to this node may carry
    /// ([`packet_budget`] of its `max_allowed_packet`).
    pub fn packet_budget(&self) -> usize {
        match self.max_packet.load(std::sync::atomic::Ordering::Relaxed) {
            0 => packet_budget(ASSUMED_MAX_PACKET),
            known => packet_budget(known),
        }
    }

    /// Wraps a driver error with this node's name.
    pub fn error(&self, source: sqlx::Error) -> Error {
        Error::Storage {
            node: self.label.clone(),
            source,
        }
    }

    /// A connection from the pool (waiting at most
    /// `storage.connect_timeout_ms`), unless the node's breaker is open.
    pub async fn acquire(&self) -> Result<NodeConnection> {
        if let Admission::Refused { reason } = self.breaker.admit() {
            return Err(Error::Unavailable {
                node: self.label.clone(),
                reason,
            });
        }
        self.acquire_unguarded().await
    }

    /// A connection whatever the breaker says: for its probes.
    async fn acquire_unguarded(&self) -> Result<NodeConnection> {
        let waiting = match self.spares.take_or_wait() {
            Ok(conn) => {
                return Ok(NodeConnection::new(
                    conn,
                    self.spares.clone(),
                    self.keep_spares,
                ))
            }
            Err(waiting) => waiting,
        };
        let result = self.pool.acquire().await.map_err(|e| self.error(e));
        drop(waiting);
        match result {
            Ok(conn) => Ok(NodeConnection::new(
                conn,
                self.spares.clone(),
                self.keep_spares,
            )),
            Err(e) => {
                self.judge(&e);
                Err(e)
            }
        }
    }

    /// How many connections rest on its stack of settled ones (see
    /// [`super::conn`]); the pool's own idle ones are `pool.num_idle()`.
    pub fn spare_connections(&self) -> usize {
        self.spares.len()
    }

    /// Hands the connections it kept back to its pool and closes the pool.
    pub async fn close(&self) {
        self.spares.close();
        self.pool.close().await;
    }

    /// Feeds a failure of the node (not an error answer) to its breaker.
    fn judge(&self, e: &Error) {
        if e.is_unavailable() {
            self.breaker.failure(&e.to_string());
        }
    }

    /// Sends `SELECT 1` past the breaker and reports the outcome to it: the
    /// probe of a half-open breaker, and the check of `cluster status`.
    pub async fn probe(&self) -> Result<Duration> {
        let started = std::time::Instant::now();
        let mut conn = self.acquire_unguarded().await?;
        self.run(&mut conn, |c| {
            Box::pin(async move { sqlx::raw_sql("SELECT 1").execute(c).await.map(|_| ()) })
        })
        .await?;
        Ok(started.elapsed())
    }

    /// Runs one call on `conn` within the request timeout. After a timeout
    /// the connection is closed rather than reused: the statement may still
    /// be running on it (and the server rolls back what it had not
    /// committed). A call that completed, with rows or an error answer,
    /// settles the connection for reuse without a ping.
    pub async fn run<T>(
        &self,
        conn: &mut NodeConnection,
        call: impl for<'c> FnOnce(
            &'c mut sqlx::MySqlConnection,
        )
            -> futures::future::BoxFuture<'c, std::result::Result<T, sqlx::Error>>,
    ) -> Result<T> {
        let outcome = tokio::time::timeout(self.request_timeout, call(conn)).await;
        let result = match outcome {
            Ok(result) => result.map_err(|e| self.error(e)),
            Err(_) => {
                conn.close_on_drop();
                Err(Error::Timeout {
                    node: self.label.clone(),
                    after: self.request_timeout,
                })
            }
        };
        match &result {
            Ok(_) => {
                self.breaker.success();
                conn.settle();
            }
            Err(e) if e.is_unavailable() => {
                // A connection that failed mid-call is not reused.
                conn.close_on_drop();
                self.judge(e);
            }
            // An error answer: the node is up, and the answer was read.
            Err(_) => {
                self.breaker.success();
                conn.settle();
            }
        }
        result
    }

    /// Runs text SQL (one or more statements) and returns its rows.
    pub async fn fetch_all(&self, sql: String) -> Result<Vec<MySqlRow>> {
        let mut conn = self.acquire().await?;
        self.run(&mut conn, |c| {
            Box::pin(sqlx::raw_sql(AssertSqlSafe(sql)).fetch_all(c))
        })
        .await
    }

    /// Runs text SQL (one or more statements) for its effect.
    pub async fn execute(&self, sql: String) -> Result<()> {
        let mut conn = self.acquire().await?;
        self.run(&mut conn, |c| {
            Box::pin(async move {
                sqlx::raw_sql(AssertSqlSafe(sql)).execute(c).await?;
                Ok(())
            })
        })
        .await
    }

    /// Runs a prepared statement for its effect.
    pub async fn execute_prepared(
        &self,
        query: sqlx::query::Query<'static, MySql, MySqlArguments>,
    ) -> Result<()> {
        let mut conn = self.acquire().await?;
        self.run(&mut conn, |c| {
            Box::pin(async move {
                query.execute(c).await?;
                Ok(())
            })
        })
        .await
    }

    /// Runs a prepared statement returning at most one row.
    pub async fn fetch_optional(
        &self,
        query: sqlx::query::Query<'static, MySql, MySqlArguments>,
    ) -> Result<Option<MySqlRow>> {
        let mut conn = self.acquire().await?;
        self.run(&mut conn, |c| Box::pin(query.fetch_optional(c)))
            .await
    }
}

/// One master and its minions.
#[derive(Clone, Debug)]
pub struct ClusterNodes {
    /// The cluster's name from config.
    pub name: String,
    /// Every node of the cluster in config order: the configured master,
    /// then the minions. Which of them is the master now is in `roles`.
    pub members: Vec<Arc<Node>>,
    roles: Arc<RwLock<Roles>>,
    /// The shards it holds.
    pub shards: config::ShardRange,
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
    /// For each shard, its index in `clusters`.
    cluster_of_shard: Vec<usize>,
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
            .map(|c| c.shards.len())
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
            for shard in c.shards.iter() {
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
                shards: c.shards,
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
            cluster_of_shard,
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
        self.cluster_of_shard
            .get(shard as usize)
            .map(|&i| &self.clusters[i])
            .ok_or(Error::NoSuchShard {
                shard,
                shard_count: self.shard_count,
            })
    }

    /// The index in `clusters` of the cluster holding `shard`.
    pub fn cluster_index(&self, shard: u32) -> Result<usize> {
        self.cluster_of_shard
            .get(shard as usize)
            .copied()
            .ok_or(Error::NoSuchShard {
                shard,
                shard_count: self.shard_count,
            })
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
