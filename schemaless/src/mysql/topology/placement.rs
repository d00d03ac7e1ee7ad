//! Placements: which cluster holds a shard, once a shard move has changed
//! it from what config says.
//!
//! A placement is recorded in the `placement` table of the instance's
//! metadata database on every master, under an epoch one higher than any
//! recorded for the shard, as promotions are ([`crate::mysql::failover`]).
//! Every store re-reads them every `storage.topology_refresh_ms` (from its
//! maintenance task, with the promotions) and applies the highest epoch of
//! each shard; `schema apply` reads them first, so it completes shards
//! where they are now. Config keeps the ranges an instance was created
//! with; the placements say what moved since.

use std::collections::HashMap;

use sqlx::Row;

use super::{Node, Topology};
use crate::error::{Error, Result};
use crate::mysql::schema::meta_database;

/// `CREATE TABLE` of the recorded placements.
pub fn create_placement_table(meta: &str) -> String {
    format!(
        "CREATE TABLE IF NOT EXISTS `{meta}`.`placement` (
            shard INT UNSIGNED NOT NULL PRIMARY KEY,
            cluster VARCHAR(64) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
            epoch BIGINT UNSIGNED NOT NULL,
            placed_at BIGINT NOT NULL
        ) ENGINE=InnoDB"
    )
}

/// One recorded placement.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Placement {
    /// The shard.
    pub shard: u32,
    /// The cluster holding it, by name.
    pub cluster: String,
    /// Higher than every earlier placement of the shard.
    pub epoch: u64,
}

/// The placements recorded on `node` (none if it has no table yet).
async fn recorded_on(node: &Node, meta: &str) -> Result<Vec<Placement>> {
    let rows = match node
        .fetch_all(format!(
            "SELECT shard, cluster, epoch FROM `{meta}`.`placement`"
        ))
        .await
    {
        Ok(rows) => rows,
        Err(e) if e.is_missing_table() => return Ok(Vec::new()),
        Err(e) => return Err(e),
    };
    rows.iter()
        .map(|row| {
            Ok(Placement {
                shard: row.try_get(0).map_err(|e| node.error(e))?,
                cluster: row.try_get(1).map_err(|e| node.error(e))?,
                epoch: row.try_get(2).map_err(|e| node.error(e))?,
            })
        })
        .collect()
}

/// The newest placement of each shard over every master that answers.
pub async fn recorded(topology: &Topology) -> HashMap<u32, Placement> {
    let meta = meta_database(&topology.instance);
    let reads = crate::mysql::failover::sources(topology)
        .into_iter()
        .map(|node| {
            let meta = meta.clone();
            async move { recorded_on(&node, &meta).await }
        })
        .collect::<Vec<_>>();
    let mut newest: HashMap<u32, Placement> = HashMap::new();
    for result in futures::future::join_all(reads).await {
        let Ok(placements) = result else { continue };
        for p in placements {
            if newest
                .get(&p.shard)
                .is_none_or(|known| known.epoch < p.epoch)
            {
                newest.insert(p.shard, p);
            }
        }
    }
    newest
}

/// Reads the recorded placements and applies the newest of each shard.
/// Masters that do not answer are skipped. Returns the shards whose
/// cluster changed.
pub async fn refresh(topology: &Topology) -> Vec<u32> {
    let mut changed = Vec::new();
    for p in recorded(topology).await.into_values() {
        let Some(cluster) = topology.cluster_named(&p.cluster) else {
            tracing::warn!(
                shard = p.shard,
                cluster = %p.cluster,
                "a recorded placement names a cluster this config does not have; ignored"
            );
            continue;
        };
        if topology.place(p.shard, cluster, p.epoch) {
            tracing::info!(shard = p.shard, cluster = %p.cluster, epoch = p.epoch, "shard placed on another cluster");
            metrics::counter!("mezzanine_schemaless_placements_seen_total").increment(1);
            changed.push(p.shard);
        }
    }
    changed.sort_unstable();
    changed
}

/// Records that `cluster` holds `shard` from now on, on every master,
/// under a new epoch, and applies it to `topology`. Every master must
/// answer: a placement only some masters know could be read back older
/// from the others once those are the ones answering.
pub async fn record(topology: &Topology, shard: u32, cluster: &str) -> Result<Placement> {
    if shard >= topology.shard_count {
        return Err(Error::NoSuchShard {
            shard,
            shard_count: topology.shard_count,
        });
    }
    let index = topology.cluster_named(cluster).ok_or_else(|| {
        Error::invalid(
            "cluster",
            format!(
                "no cluster named {cluster:?} in the config (clusters: {})",
                topology.cluster_names()
            ),
        )
    })?;
    let meta = meta_database(&topology.instance);
    let mut epoch = topology.placement_epoch(shard);
    for c in &topology.clusters {
        let master = c.master();
        master.execute(create_placement_table(&meta)).await?;
        if let Some(p) = recorded_on(&master, &meta)
            .await?
            .into_iter()
            .find(|p| p.shard == shard)
        {
            epoch = epoch.max(p.epoch);
        }
    }
    let placement = Placement {
        shard,
        cluster: cluster.to_string(),
        epoch: epoch + 1,
    };
    for c in &topology.clusters {
        let query = sqlx::query(sqlx::AssertSqlSafe(format!(
            "INSERT INTO `{meta}`.`placement` (shard, cluster, epoch, placed_at) VALUES (?, ?, ?, ?)
             ON DUPLICATE KEY UPDATE
               cluster = IF(VALUES(epoch) > epoch, VALUES(cluster), cluster),
               placed_at = IF(VALUES(epoch) > epoch, VALUES(placed_at), placed_at),
               epoch = GREATEST(epoch, VALUES(epoch))"
        )))
        .bind(shard)
        .bind(placement.cluster.clone())
        .bind(placement.epoch)
        .bind(crate::cell::now_micros());
        c.master().execute_prepared(query).await?;
    }
    topology.place(shard, index, placement.epoch);
    Ok(placement)
}
