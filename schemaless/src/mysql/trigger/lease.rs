//! Leases: which runner owns each shard of a trigger, until when (by the
//! master's clock), taken and renewed for a whole cluster in two round
//! trips, released on the way out.

use std::collections::HashMap;

use sqlx::Row;

use super::{literal, Trigger};
use crate::error::Result;
use crate::mysql::sql::NOW_MICROS;

impl Trigger {
    /// Takes or renews the leases of every shard of one cluster in two
    /// round trips; which shards this runner holds. The claims are one
    /// batch of statements; the answer is one `SELECT` of its own (a batch
    /// ending in a `SELECT` leaves a read view open on the connection in
    /// MariaDB, which holds back purge).
    pub(super) async fn claim_cluster(&self, cluster: usize) -> Result<Vec<(u32, bool)>> {
        let s = &self.shared;
        let topology = s.store.topology();
        let nodes = &topology.clusters[cluster];
        // Where the shards are now: a shard moved here is claimed here, one
        // moved away is no longer claimed on its old cluster.
        let shards = topology.shards_of(cluster);
        if shards.is_empty() {
            return Ok(Vec::new());
        }
        let name = literal(&s.name);
        let owner = literal(&s.owner);
        let ttl = s.options.lease_ms * 1000;
        let claims: Vec<String> = shards
            .iter()
            .map(|&shard| {
                format!(
                    "INSERT INTO `{db}`.`trigger_leases` (name, owner, expires_at)
                     VALUES ({name}, {owner}, {NOW_MICROS} + {ttl})
                     ON DUPLICATE KEY UPDATE
                       owner = IF(expires_at < {NOW_MICROS} OR owner = VALUES(owner), VALUES(owner), owner),
                       expires_at = IF(owner = VALUES(owner), VALUES(expires_at), expires_at)",
                    db = topology.database(shard)
                )
            })
            .collect();
        nodes.master().execute(claims.join(";")).await?;
        let owners: Vec<String> = shards
            .iter()
            .map(|&shard| {
                format!(
                    "SELECT {shard}, owner FROM `{}`.`trigger_leases` WHERE name = {name}",
                    topology.database(shard)
                )
            })
            .collect();
        let rows = nodes.master().fetch_all(owners.join(" UNION ALL ")).await?;
        let mut held: HashMap<u32, bool> = shards.iter().map(|&shard| (shard, false)).collect();
        for row in rows {
            let shard: i64 = row.try_get(0).map_err(|e| nodes.master().error(e))?;
            let holder: String = row.try_get(1).map_err(|e| nodes.master().error(e))?;
            held.insert(shard as u32, holder == s.owner);
        }
        Ok(held.into_iter().collect())
    }

    pub(super) async fn release(&self, shard: u32) -> Result<()> {
        let s = &self.shared;
        s.master(shard)?
            .execute(format!(
                "DELETE FROM `{}`.`trigger_leases` WHERE name = {} AND owner = {}",
                s.database(shard),
                literal(&s.name),
                literal(&s.owner)
            ))
            .await
    }
}
