//! Promotions: making a caught-up minion the master of its cluster, and
//! telling every store about it.
//!
//! `mezzanine cluster promote CLUSTER NODE` runs [`promote`]. It refuses
//! while the cluster's master still answers (MariaDB's `read_only` does not
//! stop a privileged writer, so a live master cannot be fenced from here:
//! two masters taking writes would split the cluster), and refuses a
//! minion that has received less than another one (promoting it would
//! lose what only the other has, and the other could not replicate from
//! it). The minion first applies everything it has received, then stops
//! replicating and takes writes; the other minions that answer are
//! re-pointed to it by GTID.
//!
//! The new roles are recorded in the `topology` table of the instance's
//! metadata database (`<instance>_meta`) on the new master and on every
//! other cluster's master, under an epoch one higher than any recorded.
//! Every store re-reads those tables every `storage.topology_refresh_ms`
//! ([`refresh`], from its maintenance task) and applies the highest epoch
//! of each cluster, so every worker moves to the new master without a
//! restart. Until it has, its writes to the dead master fail over to the
//! buffers (hinted handoff) like any other write during the outage, and
//! the reconciler replays them once the new master is known.

use std::time::Duration;

use sqlx::Row;

use super::schema::meta_database;
use super::topology::{redact, ClusterNodes, Node, Topology};
use crate::error::{Error, Result};

/// `CREATE TABLE` of the recorded promotions.
pub fn create_topology_table(meta: &str) -> String {
    format!(
        "CREATE TABLE IF NOT EXISTS `{meta}`.`topology` (
            cluster VARCHAR(64) CHARACTER SET ascii COLLATE ascii_bin NOT NULL PRIMARY KEY,
            master VARCHAR(512) NOT NULL,
            epoch BIGINT UNSIGNED NOT NULL,
            promoted_at BIGINT NOT NULL
        ) ENGINE=InnoDB"
    )
}

/// One recorded promotion.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Promotion {
    /// The cluster's name.
    pub cluster: String,
    /// The new master's label (its URL without password).
    pub master: String,
    /// Higher than every earlier promotion of the cluster.
    pub epoch: u64,
}

/// The promotions recorded on `node` (none if it has no table yet).
async fn recorded(node: &Node, meta: &str) -> Result<Vec<Promotion>> {
    let rows = match node
        .fetch_all(format!(
            "SELECT cluster, master, epoch FROM `{meta}`.`topology`"
        ))
        .await
    {
        Ok(rows) => rows,
        Err(e) if e.is_missing_table() => return Ok(Vec::new()),
        Err(e) => return Err(e),
    };
    rows.iter()
        .map(|row| {
            Ok(Promotion {
                cluster: row.try_get(0).map_err(|e| node.error(e))?,
                master: row.try_get(1).map_err(|e| node.error(e))?,
                epoch: row.try_get(2).map_err(|e| node.error(e))?,
            })
        })
        .collect()
}

/// The nodes promotions are read from: every master that answers, and
/// every member of a cluster whose master does not (a single cluster's
/// promotion is recorded only on its own new master).
pub(crate) fn sources(topology: &Topology) -> Vec<std::sync::Arc<Node>> {
    let mut nodes = Vec::new();
    for cluster in &topology.clusters {
        let master = cluster.master();
        if master.breaker.admit() == super::breaker::Admission::Allowed {
            nodes.push(master);
        } else {
            nodes.extend(
                cluster
                    .minions()
                    .into_iter()
                    .filter(|n| n.breaker.admit() == super::breaker::Admission::Allowed),
            );
        }
    }
    nodes
}

/// Reads the recorded promotions and applies the newest of each cluster.
/// Nodes that do not answer are skipped. Returns the clusters whose
/// master changed.
pub async fn refresh(topology: &Topology) -> Vec<String> {
    let meta = meta_database(&topology.instance);
    let reads = sources(topology)
        .into_iter()
        .map(|node| {
            let meta = meta.clone();
            async move { recorded(&node, &meta).await }
        })
        .collect::<Vec<_>>();
    let mut newest: std::collections::HashMap<String, Promotion> = Default::default();
    for result in futures::future::join_all(reads).await {
        let Ok(promotions) = result else { continue };
        for p in promotions {
            match newest.get(&p.cluster) {
                Some(known) if known.epoch >= p.epoch => {}
                _ => {
                    newest.insert(p.cluster.clone(), p);
                }
            }
        }
    }
    let mut changed = Vec::new();
    for cluster in &topology.clusters {
        let Some(p) = newest.get(&cluster.name) else {
            continue;
        };
        let Some(member) = cluster.member(&p.master) else {
            tracing::warn!(
                cluster = %cluster.name,
                master = %p.master,
                "a recorded promotion names a node this config does not list for the cluster; ignored"
            );
            continue;
        };
        if cluster.promote(member, p.epoch) {
            tracing::warn!(cluster = %cluster.name, master = %p.master, epoch = p.epoch, "new master");
            metrics::counter!("mezzanine_schemaless_promotions_seen_total", "cluster" => cluster.name.clone())
                .increment(1);
            changed.push(cluster.name.clone());
        }
    }
    changed
}

/// How a promotion went.
#[derive(Clone, Debug)]
pub struct PromoteReport {
    /// The cluster.
    pub cluster: String,
    /// The node that was the master.
    pub old_master: String,
    /// The node that is now.
    pub new_master: String,
    /// Its GTID position when it took over.
    pub position: String,
    /// The other minions, re-pointed to it.
    pub repointed: Vec<String>,
    /// Minions that did not answer and must be re-pointed when back.
    pub unreachable: Vec<String>,
    /// The epoch recorded.
    pub epoch: u64,
    /// Masters the promotion was recorded on.
    pub recorded_on: Vec<String>,
    /// The buffered writes replayed to it before it was recorded.
    pub replayed: super::replay::Replayed,
}

/// Points `node` at `source`, on a connection of its own that never logs
/// its statements: `CHANGE MASTER TO` carries the password, and sqlx logs
/// statement text at debug level.
async fn repoint(node: &Node, source: &Source) -> Result<()> {
    use sqlx::{ConnectOptions, Connection};
    let options = (*node.pool.connect_options())
        .clone()
        .disable_statement_logging();
    let call = async {
        let mut conn = options.connect().await?;
        let done = sqlx::raw_sql(sqlx::AssertSqlSafe(format!(
            "STOP SLAVE; {}; START SLAVE",
            source.change_master()
        )))
        .execute(&mut conn)
        .await;
        let _ = conn.close().await;
        done.map(|_| ())
    };
    match tokio::time::timeout(node.request_timeout, call).await {
        Ok(result) => result.map_err(|e| node.error(e)),
        Err(_) => Err(Error::Timeout {
            node: node.label.clone(),
            after: node.request_timeout,
        }),
    }
}

/// Where a node's server is, for `CHANGE MASTER TO`.
struct Source {
    host: String,
    port: u16,
    user: String,
    password: String,
}

impl Source {
    fn of(url: &str) -> Result<Source> {
        let parsed = url::Url::parse(url)
            .map_err(|e| Error::Schema(format!("{}: not a URL: {e}", redact(url))))?;
        // Percent-decoded as the driver decodes the same URL: a `+` is a
        // plus sign, not a space (form encoding would make it one).
        let (user, password) = config::urls::credentials(&parsed);
        Ok(Source {
            host: parsed.host_str().unwrap_or("127.0.0.1").to_string(),
            port: parsed.port().unwrap_or(3306),
            user,
            password,
        })
    }

    fn change_master(&self) -> String {
        let quote = |s: &str| s.replace('\\', "\\\\").replace('\'', "\\'");
        format!(
            "CHANGE MASTER TO MASTER_HOST='{}', MASTER_PORT={}, MASTER_USER='{}', \
             MASTER_PASSWORD='{}', MASTER_USE_GTID=slave_pos, MASTER_CONNECT_RETRY=1",
            quote(&self.host),
            self.port,
            quote(&self.user),
            quote(&self.password)
        )
    }
}

/// What a minion has received from its master (`Gtid_IO_Pos`), or None
/// if it does not replicate.
async fn received(node: &Node) -> Result<Option<String>> {
    let rows = node.fetch_all(mariadb::SHOW_REPLICA_STATUS.into()).await?;
    Ok(mariadb::ReplicaStatus::from_rows(&rows).map(|status| status.received))
}

async fn scalar_text(node: &Node, sql: &str) -> Result<String> {
    let rows = node.fetch_all(sql.to_string()).await?;
    Ok(rows
        .first()
        .and_then(|r| r.try_get::<Option<String>, _>(0).ok().flatten())
        .unwrap_or_default())
}

/// Makes `node` (a member's label or URL) the master of `cluster`.
///
/// `force` promotes even a minion that has received less than another
/// one (what only the other has is then lost, unless the buffers hold
/// it). `wait` bounds how long the minion may take to apply what it has
/// received.
pub async fn promote(
    config: &config::Config,
    store: &super::MySqlStore,
    cluster_name: &str,
    node: &str,
    force: bool,
    wait: Duration,
) -> Result<PromoteReport> {
    let topology = store.topology();
    let cluster_index = topology
        .clusters
        .iter()
        .position(|c| c.name == cluster_name)
        .ok_or_else(|| {
            Error::Schema(format!(
                "no cluster named {cluster_name:?}; the config has {}",
                topology
                    .clusters
                    .iter()
                    .map(|c| format!("{:?}", c.name))
                    .collect::<Vec<_>>()
                    .join(", ")
            ))
        })?;
    let cluster = &topology.clusters[cluster_index];
    let urls: Vec<&String> = config
        .clusters
        .iter()
        .find(|c| c.name == cluster_name)
        .map(|c| std::iter::once(&c.master).chain(&c.minions).collect())
        .unwrap_or_default();
    let label = redact(node);
    let index = cluster.member(&label).ok_or_else(|| {
        Error::Schema(format!(
            "{label} is not a node of cluster {cluster_name:?}; its nodes are {}",
            cluster
                .members
                .iter()
                .map(|n| n.label.clone())
                .collect::<Vec<_>>()
                .join(", ")
        ))
    })?;
    let old = cluster.master();
    let candidate = cluster.members[index].clone();
    if candidate.label == old.label {
        return Err(Error::Schema(format!(
            "{} is already the master of {cluster_name:?}",
            candidate.label
        )));
    }
    if old.probe().await.is_ok() {
        return Err(Error::Schema(format!(
            "the master of {cluster_name:?}, {}, still answers: promoting a minion while it takes writes \
             would leave the cluster with two masters. Stop it first (a promotion is for a master that died)",
            old.label
        )));
    }
    let io_pos = received(&candidate).await?.ok_or_else(|| {
        Error::Schema(format!(
            "{} does not replicate from {}: it is not a minion",
            candidate.label, old.label
        ))
    })?;
    // Apply everything received before taking writes (its applier may
    // have been stopped: what it received is acknowledged all the same).
    if !io_pos.is_empty() {
        candidate.execute("START SLAVE SQL_THREAD".into()).await?;
        let waited: Option<i64> = candidate
            .fetch_all(format!(
                "SELECT MASTER_GTID_WAIT('{}', {})",
                io_pos.replace('\'', ""),
                wait.as_secs_f64()
            ))
            .await?
            .first()
            .and_then(|r| r.try_get(0).ok());
        if waited != Some(0) {
            return Err(Error::Schema(format!(
                "{} did not apply what it received ({io_pos}) within {wait:?}; nothing was changed",
                candidate.label
            )));
        }
    }
    let position = scalar_text(&candidate, "SELECT @@GLOBAL.gtid_slave_pos").await?;
    let others: Vec<_> = cluster
        .members
        .iter()
        .filter(|n| n.label != candidate.label && n.label != old.label)
        .cloned()
        .collect();
    let mut reachable = Vec::new();
    let mut unreachable = Vec::new();
    for other in &others {
        match received(other).await {
            Ok(pos) => {
                let pos = pos.unwrap_or_default();
                if !force && !mariadb::gtid_covers(&position, &pos) {
                    return Err(Error::Schema(format!(
                        "{} has received more ({pos}) than {} has ({position}): promote {} instead, \
                         or pass --force to lose what only it has. Nothing was changed",
                        other.label, candidate.label, other.label
                    )));
                }
                reachable.push(other.clone());
            }
            Err(_) => unreachable.push(other.label.clone()),
        }
    }
    let url_of = |label: &str| {
        urls.iter()
            .find(|u| redact(u) == label)
            .map(|u| u.as_str())
            .ok_or_else(|| Error::Schema(format!("no URL in the config for {label}")))
    };
    let source = Source::of(url_of(&candidate.label)?)?;
    // With durability by semi-synchronous replication, the new master
    // waits for its minions' acknowledgements as the old one did (a minion
    // must not: applying, it would wait for minions of its own).
    let semi_sync = config.storage.durability == config::Durability::TwoHosts
        && config.storage.buffer_secondaries == 0;
    candidate
        .execute(format!(
            "STOP SLAVE; RESET SLAVE ALL; SET GLOBAL read_only = 0{}",
            if semi_sync {
                "; SET GLOBAL rpl_semi_sync_master_enabled = 1"
            } else {
                ""
            }
        ))
        .await?;
    let mut repointed = Vec::new();
    for other in reachable {
        match repoint(&other, &source).await {
            Ok(()) => repointed.push(other.label.clone()),
            Err(e) => {
                tracing::warn!(node = %other.label, "could not re-point: {e}");
                unreachable.push(other.label.clone());
            }
        }
    }
    // Buffered writes first: this store alone sends the cluster's writes
    // to the new master until the promotion is recorded, so what the
    // buffers acknowledged lands before any other store's new write, and
    // the first acknowledged write of an address wins.
    let epoch = next_epoch(topology, cluster, &candidate).await;
    cluster.promote(index, epoch);
    let replayed = super::replay::replay_cluster(store, cluster_index).await?;
    for unread in &replayed.unread {
        tracing::warn!(
            "promotion: a buffer could not be read; the reconciler replays it later: {unread}"
        );
    }
    let recorded_on = record(topology, cluster, &candidate, epoch).await?;
    Ok(PromoteReport {
        cluster: cluster_name.to_string(),
        old_master: old.label.clone(),
        new_master: candidate.label.clone(),
        position,
        repointed,
        unreachable,
        epoch,
        recorded_on,
        replayed,
    })
}

/// One higher than any epoch of `cluster` recorded on `candidate` and on
/// the masters that answer (or this store's own).
async fn next_epoch(topology: &Topology, cluster: &ClusterNodes, candidate: &Node) -> u64 {
    let meta = meta_database(&topology.instance);
    let mut epoch = cluster.epoch();
    let masters: Vec<_> = topology.clusters.iter().map(|c| c.master()).collect();
    for node in std::iter::once(candidate).chain(masters.iter().map(|m| m.as_ref())) {
        if let Ok(promotions) = recorded(node, &meta).await {
            epoch = promotions
                .iter()
                .filter(|p| p.cluster == cluster.name)
                .map(|p| p.epoch)
                .fold(epoch, u64::max);
        }
    }
    epoch + 1
}

/// Records `master` as the master of `cluster` under `epoch` on the new
/// master and on every other master that answers.
async fn record(
    topology: &Topology,
    cluster: &ClusterNodes,
    master: &std::sync::Arc<Node>,
    epoch: u64,
) -> Result<Vec<String>> {
    let meta = meta_database(&topology.instance);
    let mut targets = vec![master.clone()];
    targets.extend(
        topology
            .clusters
            .iter()
            .filter(|c| c.name != cluster.name)
            .map(|c| c.master()),
    );
    let upsert = format!(
        "{}; INSERT INTO `{meta}`.`topology` (cluster, master, epoch, promoted_at) VALUES ('{}', '{}', {epoch}, {}) \
         ON DUPLICATE KEY UPDATE master = IF(VALUES(epoch) > epoch, VALUES(master), master), \
         promoted_at = IF(VALUES(epoch) > epoch, VALUES(promoted_at), promoted_at), \
         epoch = GREATEST(epoch, VALUES(epoch))",
        create_topology_table(&meta),
        cluster.name.replace('\'', ""),
        master.label.replace('\\', "\\\\").replace('\'', "\\'"),
        crate::cell::now_micros()
    );
    let mut recorded_on = Vec::new();
    for (i, node) in targets.iter().enumerate() {
        match node.execute(upsert.clone()).await {
            Ok(()) => recorded_on.push(node.label.clone()),
            // The new master must hold it; the others are best effort.
            Err(e) if i == 0 => return Err(e),
            Err(e) => tracing::warn!(node = %node.label, "promotion not recorded there: {e}"),
        }
    }
    Ok(recorded_on)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn replication_sources_come_from_the_url_with_quotes_escaped() {
        let s = Source::of("mysql://repl:it%27s@127.0.0.1:33062").unwrap();
        assert_eq!((s.host.as_str(), s.port), ("127.0.0.1", 33062));
        assert_eq!(s.password, "it's");
        assert!(s.change_master().contains("MASTER_PASSWORD='it\\'s'"));
        assert!(s.change_master().contains("MASTER_USE_GTID=slave_pos"));
        // Percent-decoded as the driver does: `+` is a plus, not a space.
        let s = Source::of("mysql://re+pl:a+b%2B@127.0.0.1:33062").unwrap();
        assert_eq!((s.user.as_str(), s.password.as_str()), ("re+pl", "a+b+"));
    }
}
