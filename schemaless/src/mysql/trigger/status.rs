//! What `mezzanine trigger status` shows: every shard's offset, head,
//! lag, owner and dead letters, and the names of every trigger.

use sqlx::Row;

use super::{check_name, literal};
use crate::error::{Error, Result};
use crate::mysql::sql::NOW_MICROS;
use crate::mysql::store::MySqlStore;

/// One shard of a trigger, as `mezzanine trigger status` shows it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ShardStatus {
    /// The shard.
    pub shard: u32,
    /// The last added_id handled (0: none yet).
    pub offset: u64,
    /// The shard's newest added_id.
    pub head: u64,
    /// Cells of the log not handled yet (all columns).
    pub lag: u64,
    /// The runner holding the shard, if its lease is live.
    pub owner: Option<String>,
    /// Parked cells.
    pub parked: u64,
    /// Parked cells flagged for retry.
    pub retrying: u64,
}

/// Every shard's state of trigger `name`, read from the masters.
pub async fn status(store: &MySqlStore, name: &str) -> Result<Vec<ShardStatus>> {
    check_name(name)?;
    let topology = store.topology();
    let name = literal(name);
    let mut out = Vec::with_capacity(topology.shard_count as usize);
    for shard in 0..topology.shard_count {
        let db = topology.database(shard);
        let rows = topology
            .cluster(shard)?
            .master()
            .fetch_all(format!(
                "SELECT
                   CAST(COALESCE((SELECT added_id FROM `{db}`.`trigger_offsets` WHERE name = {name}), 0) AS UNSIGNED),
                   CAST(COALESCE((SELECT MAX(added_id) FROM `{db}`.`entity`), 0) AS UNSIGNED),
                   (SELECT owner FROM `{db}`.`trigger_leases` WHERE name = {name} AND expires_at > {NOW_MICROS}),
                   CAST((SELECT COUNT(*) FROM `{db}`.`trigger_dead_letters` WHERE name = {name}) AS UNSIGNED),
                   CAST((SELECT COUNT(*) FROM `{db}`.`trigger_dead_letters` WHERE name = {name} AND retry = 1) AS UNSIGNED)"
            ))
            .await?;
        let row = rows
            .first()
            .ok_or_else(|| Error::Schema(format!("no status row for shard {shard}")))?;
        let get_u64 = |i: usize| -> Result<u64> {
            row.try_get::<u64, _>(i).map_err(|e| {
                topology
                    .cluster(shard)
                    .map_or_else(|e| e, |c| c.master().error(e))
            })
        };
        let offset = get_u64(0)?;
        let head = get_u64(1)?;
        out.push(ShardStatus {
            shard,
            offset,
            head,
            lag: head.saturating_sub(offset),
            owner: row.try_get::<Option<String>, _>(2).ok().flatten(),
            parked: get_u64(3)?,
            retrying: get_u64(4)?,
        });
    }
    Ok(out)
}

/// The names of every trigger that ever saved a position, over all shards
/// (one statement per cluster, read from its master), sorted.
pub async fn names(store: &MySqlStore) -> Result<Vec<String>> {
    let topology = store.topology();
    let mut names = std::collections::BTreeSet::new();
    for (i, cluster) in topology.clusters.iter().enumerate() {
        let parts: Vec<String> = topology
            .shards_of(i)
            .into_iter()
            .map(|shard| {
                format!(
                    "SELECT name FROM `{}`.`trigger_offsets`",
                    topology.database(shard)
                )
            })
            .collect();
        if parts.is_empty() {
            continue;
        }
        for row in cluster.master().fetch_all(parts.join(" UNION ")).await? {
            let name: String = row.try_get(0).map_err(|e| cluster.master().error(e))?;
            names.insert(name);
        }
    }
    Ok(names.into_iter().collect())
}

/// Change-log cells of every shard that trigger `name` has not handled
/// yet (0: caught up).
pub async fn lag(store: &MySqlStore, name: &str) -> Result<u64> {
    Ok(status(store, name).await?.iter().map(|s| s.lag).sum())
}
