//! Creating an instance's shard databases, online and idempotently.
//!
//! Each master gets one database per shard of its range, holding the
//! entity table; replication carries them to the minions. The metadata
//! database also holds the master's buffer of other clusters' writes and
//! the recorded promotions. A small
//! `<instance>_meta` database on each master records the shard count the
//! instance was created with: routing depends on it for ever, so applying a
//! config with a different count is refused before anything is created.
//! Only missing objects are created, so `apply` can be rerun at any time,
//! with writes going on. DDL runs without the store's request timeout:
//! creating thousands of databases on a busy server may legitimately take
//! longer than any one cell call should.

use std::time::{Duration, Instant};

use futures::{StreamExt, TryStreamExt};
use sqlx::AssertSqlSafe;

use super::sql;
use super::topology::{ClusterNodes, Node, Topology};
use crate::error::{Error, Result};

/// How many DDL statements run at once on one master.
const DDL_PARALLELISM: usize = 8;

/// What `apply` found and did on one cluster.
#[derive(Clone, Debug, Default)]
pub struct ClusterReport {
    /// The cluster's name.
    pub cluster: String,
    /// The master it was applied on.
    pub master: String,
    /// Shard databases created or completed now.
    pub created: u32,
    /// Shard databases that already had every shard table.
    pub existing: u32,
}

/// What `apply` did, cluster by cluster.
#[derive(Clone, Debug, Default)]
pub struct ApplyReport {
    /// One entry per cluster, in config order.
    pub clusters: Vec<ClusterReport>,
    /// Wall time of the whole apply.
    pub elapsed: Duration,
}

impl ApplyReport {
    /// Shards created now, over all clusters.
    pub fn created(&self) -> u32 {
        self.clusters.iter().map(|c| c.created).sum()
    }

    /// Shards that already existed, over all clusters.
    pub fn existing(&self) -> u32 {
        self.clusters.iter().map(|c| c.existing).sum()
    }
}

/// The metadata database of an instance.
pub fn meta_database(instance: &str) -> String {
    format!("{instance}_meta")
}

/// Creates whatever is missing of the instance's schema on every master.
pub async fn apply(topology: &Topology) -> Result<ApplyReport> {
    let started = Instant::now();
    // Check every master before creating anything anywhere.
    for cluster in &topology.clusters {
        check_meta(topology, cluster).await?;
    }
    // Shards are completed where they are now, after any shard move.
    super::topology::placement::refresh(topology).await;
    let mut report = ApplyReport::default();
    for (i, cluster) in topology.clusters.iter().enumerate() {
        report
            .clusters
            .push(apply_cluster(topology, cluster, &topology.shards_of(i)).await?);
    }
    report.elapsed = started.elapsed();
    Ok(report)
}

/// Checks that the schema exists and matches the config: every master has
/// the instance's metadata with the same shard count and every shard's
/// entity table. Returns the shards that are missing, if any.
pub async fn verify(topology: &Topology) -> Result<Vec<u32>> {
    let mut missing = Vec::new();
    super::topology::placement::refresh(topology).await;
    for (i, cluster) in topology.clusters.iter().enumerate() {
        let shards = topology.shards_of(i);
        if !check_meta(topology, cluster).await? {
            missing.extend(shards);
            continue;
        }
        let existing = existing_shards(topology, &cluster.master()).await?;
        missing.extend(shards.into_iter().filter(|s| !existing.contains(s)));
    }
    Ok(missing)
}

/// Whether the master has the instance's metadata; an error if it records
/// a different shard count.
async fn check_meta(topology: &Topology, cluster: &ClusterNodes) -> Result<bool> {
    let node = &cluster.master();
    let meta = meta_database(&topology.instance);
    let exists: Option<String> = sqlx::query_scalar(
        "SELECT table_name FROM information_schema.tables WHERE table_schema = ? AND table_name = 'instance'",
    )
    .bind(&meta)
    .fetch_optional(&node.pool)
    .await
    .map_err(|e| node.error(e))?;
    if exists.is_none() {
        return Ok(false);
    }
    let recorded: Option<(u32,)> = sqlx::query_as(AssertSqlSafe(format!(
        "SELECT shard_count FROM `{meta}`.`instance` WHERE name = ?"
    )))
    .bind(&topology.instance)
    .fetch_optional(&node.pool)
    .await
    .map_err(|e| node.error(e))?;
    match recorded {
        Some((count,)) if count != topology.shard_count => Err(Error::Schema(format!(
            "instance {:?} on {} was created with {count} shards but the config says {}: \
             the shard count is fixed for the life of an instance",
            topology.instance, node.label, topology.shard_count
        ))),
        Some(_) => Ok(true),
        None => Ok(false),
    }
}

/// The shards of this instance that have every shard table on `node`.
async fn existing_shards(
    topology: &Topology,
    node: &Node,
) -> Result<std::collections::HashSet<u32>> {
    let prefix = format!("{}_", topology.instance);
    let tables = sql::SHARD_TABLES
        .iter()
        .map(|t| format!("'{t}'"))
        .collect::<Vec<_>>()
        .join(", ");
    let schemas: Vec<String> = sqlx::query_scalar(AssertSqlSafe(format!(
        "SELECT table_schema FROM information_schema.tables
         WHERE table_name IN ({tables}) AND table_schema LIKE CONCAT(?, '%')
         GROUP BY table_schema HAVING COUNT(*) = {}",
        sql::SHARD_TABLES.len()
    )))
    .bind(prefix.replace('_', "\\_"))
    .fetch_all(&node.pool)
    .await
    .map_err(|e| node.error(e))?;
    Ok(schemas
        .iter()
        .filter_map(|s| shard_of_database(&topology.instance, s))
        .collect())
}

/// The shard number of `database` if it is one of `instance`'s shard
/// databases (`<instance>_` and four or more digits). `trips_big_0001`
/// belongs to instance `trips_big`, not to `trips`.
fn shard_of_database(instance: &str, database: &str) -> Option<u32> {
    let suffix = database.strip_prefix(instance)?.strip_prefix('_')?;
    if suffix.len() >= 4 && suffix.bytes().all(|b| b.is_ascii_digit()) {
        suffix.parse().ok()
    } else {
        None
    }
}

async fn apply_cluster(
    topology: &Topology,
    cluster: &ClusterNodes,
    shards: &[u32],
) -> Result<ClusterReport> {
    let node = &cluster.master();
    let meta = meta_database(&topology.instance);
    for statement in [
        format!("CREATE DATABASE IF NOT EXISTS `{meta}`"),
        format!(
            "CREATE TABLE IF NOT EXISTS `{meta}`.`instance` (
                name VARCHAR(64) NOT NULL PRIMARY KEY,
                shard_count INT UNSIGNED NOT NULL,
                created_at BIGINT NOT NULL
            ) ENGINE=InnoDB"
        ),
        super::index::create_versions_table(&meta),
        super::buffer::create_buffer_table(&meta),
        super::lost::create_conflicts_table(&meta),
        super::damaged::create_damaged_table(&meta),
        super::failover::create_topology_table(&meta),
        super::topology::placement::create_placement_table(&meta),
    ] {
        execute(node, statement).await?;
    }
    sqlx::query(AssertSqlSafe(format!(
        "INSERT IGNORE INTO `{meta}`.`instance` (name, shard_count, created_at) VALUES (?, ?, ?)"
    )))
    .bind(&topology.instance)
    .bind(topology.shard_count)
    .bind(crate::cell::now_micros())
    .execute(&node.pool)
    .await
    .map_err(|e| node.error(e))?;

    let existing = existing_shards(topology, node).await?;
    let missing: Vec<u32> = shards
        .iter()
        .copied()
        .filter(|s| !existing.contains(s))
        .collect();
    // Collected first: a stream over a borrowing closure makes the future
    // not `Send` (a compiler limitation with higher-ranked lifetimes).
    let creates: Vec<_> = missing
        .iter()
        .map(|&shard| create_shard(node, topology.database(shard)))
        .collect();
    futures::stream::iter(creates)
        .buffer_unordered(DDL_PARALLELISM)
        .try_collect::<Vec<()>>()
        .await?;
    Ok(ClusterReport {
        cluster: cluster.name.clone(),
        master: node.label.clone(),
        created: missing.len() as u32,
        existing: (shards.len() - missing.len()) as u32,
    })
}

/// Creates a shard database and its tables on `node`, those missing.
pub async fn create_shard(node: &Node, database: String) -> Result<()> {
    execute(node, format!("CREATE DATABASE IF NOT EXISTS `{database}`")).await?;
    execute(node, sql::create_entity_table(&database)).await?;
    for statement in sql::create_trigger_tables(&database) {
        execute(node, statement).await?;
    }
    Ok(())
}

/// Runs one DDL statement on a master, within three times
/// `storage.request_timeout_ms` (a statement of the schema's takes
/// milliseconds on a server that answers). A master whose minions all stopped
/// acknowledging (semi-synchronous replication, with the long timeout
/// the durability rules want) would hold the commit for ever, and
/// `schema apply` with it, saying nothing.
async fn execute(node: &Node, statement: String) -> Result<()> {
    let within = node.request_timeout * 3;
    let run = sqlx::raw_sql(AssertSqlSafe(statement.clone())).execute(&node.pool);
    match tokio::time::timeout(within, run).await {
        Ok(done) => done.map(|_| ()).map_err(|e| node.error(e)),
        Err(_) => {
            let first_line = statement.lines().next().unwrap_or_default();
            Err(Error::Schema(format!(
                "{} did not finish `{first_line}` within {within:?}. A master waits for a \
                 minion to acknowledge each commit: if none does (see `mezzanine cluster \
                 status`: replication stopped, minions down), it waits for ever. The \
                 statement may still commit; `schema apply` is idempotent, run it again \
                 once replication runs",
                node.label
            )))
        }
    }
}

/// Drops every database of the instance from every master (tests and
/// benchmarks only: this destroys data).
pub async fn drop_instance(topology: &Topology) -> Result<()> {
    for cluster in &topology.clusters {
        let node = &cluster.master();
        let prefix = format!("{}\\_", topology.instance);
        let databases: Vec<String> = sqlx::query_scalar(
            "SELECT schema_name FROM information_schema.schemata WHERE schema_name LIKE CONCAT(?, '%')",
        )
        .bind(prefix)
        .fetch_all(&node.pool)
        .await
        .map_err(|e| node.error(e))?;
        let meta = meta_database(&topology.instance);
        for database in databases
            .into_iter()
            .filter(|d| *d == meta || shard_of_database(&topology.instance, d).is_some())
        {
            execute(node, format!("DROP DATABASE IF EXISTS `{database}`")).await?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_an_instances_own_databases_are_its_shards() {
        assert_eq!(shard_of_database("trips", "trips_0042"), Some(42));
        assert_eq!(shard_of_database("trips", "trips_4095"), Some(4095));
        assert_eq!(shard_of_database("trips", "trips_big_0001"), None);
        assert_eq!(shard_of_database("trips", "trips_meta"), None);
        assert_eq!(shard_of_database("trips", "tripsx_0001"), None);
        assert_eq!(shard_of_database("trips", "trips_042"), None);
    }
}
