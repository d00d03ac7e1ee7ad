//! Buffered writes and their reconciler.
//!
//! With `storage.buffer_secondaries = N` (N ≥ 1), a write goes first to the
//! `buffer` table of N masters of *other* clusters, chosen at random among
//! those whose breaker is closed, then to its own master; it is
//! acknowledged only when both hold it. A master that dies after
//! acknowledging a write it had not yet replicated loses nothing: the
//! buffers still hold it. With the write's own master down (its breaker
//! open, or the write failing for want of it), the write is acknowledged
//! from the buffers alone as [`crate::WriteOutcome::Buffered`]: durable on
//! N other hosts, readable once its master is back or a minion has been
//! promoted (hinted handoff).
//!
//! The **reconciler** ([`reconcile_once`], run by `mezzanine buffer
//! reconcile` and, with `storage.reconcile_in_app`, by every store) walks
//! every master's buffer table and, for each buffered cell:
//!
//! - the cell's master has it with the same body, and so does every minion
//!   of that cluster that answers (at least one), or the cluster has no
//!   minions: the buffered copy is deleted — the write survives the
//!   master's death now;
//! - the master does not have it and the cell is older than
//!   `storage.buffer_replay_after_ms`: it is written to the master (the
//!   primary write never landed, or the master was replaced); deleted on a
//!   later pass, once replicated;
//! - the master has a *different* body at that address: the write lost to
//!   an earlier one. It was acknowledged (`Buffered`), so it is recorded in
//!   `<instance>_meta.buffer_conflicts` with both bodies (see
//!   [`super::lost`]) before its buffered copy is deleted, and counted in
//!   `mezzanine_schemaless_buffer_conflicts_total`;
//! - the master does not answer: it waits.
//!
//! Every step is idempotent — a replayed cell that landed meanwhile comes
//! back `AlreadyPresent`, a deletion by id of a deleted row deletes
//! nothing — so reconcilers may be killed at any point and several may
//! run; `GET_LOCK` makes them take turns per buffer table so they do not
//! do the same work twice.
//!
//! The buffer is one table per master, in the instance's metadata database
//! (`<instance>_meta.buffer`), not one per shard as DESIGN.md first had
//! it: the table holds cells of *other* clusters' shards, so none of this
//! master's shard databases is its natural home, and one table per master
//! lets the reconciler read a master's whole backlog with one query
//! instead of one per shard.
//!
//! The reconciler is [`reconcile`]'s room; this file holds the write
//! side: buffering a batch and forgetting what landed.

use std::collections::{BTreeMap, HashMap};
use std::time::Duration;

use sqlx::mysql::MySqlRow;
use sqlx::{AssertSqlSafe, Row};

use super::breaker::Admission;
use super::schema::meta_database;
use super::sql;
use super::store::{decode_row, MySqlStore, Pending};
use super::topology::{ClusterNodes, Node};
use crate::api::WriteOutcome;
use crate::cell::{now_micros, Body, CellKey};
use crate::error::{Error, Result};

pub mod reconcile;

pub(super) use reconcile::page;
pub use reconcile::{backlog, reconcile_once, run, Pass};

/// Buffered cells one reconciler step reads at a time.
pub(super) const PAGE: usize = 500;

/// `CREATE TABLE` of a master's buffer.
pub fn create_buffer_table(meta: &str) -> String {
    format!(
        "CREATE TABLE IF NOT EXISTS `{meta}`.`buffer` (
            buffer_id BIGINT UNSIGNED NOT NULL AUTO_INCREMENT PRIMARY KEY,
            row_key BINARY(16) NOT NULL,
            column_name VARCHAR(64) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
            ref_key BIGINT NOT NULL,
            body MEDIUMBLOB NOT NULL,
            buffered_at BIGINT NOT NULL,
            shard INT UNSIGNED NOT NULL
        ) ENGINE=InnoDB"
    )
}

fn insert_rows<'a>(
    meta: &str,
    rows: impl IntoIterator<Item = (u32, &'a Pending)>,
    at: i64,
    budget: usize,
) -> Vec<String> {
    let head = format!(
        "INSERT INTO `{meta}`.`buffer` (row_key, column_name, ref_key, body, buffered_at, shard) VALUES "
    );
    sql::split_values(&head, rows, budget, |sql, (shard, p)| {
        sql.push('(');
        sql::push_hex(sql, p.cell.key.row_key.as_bytes());
        sql.push(',');
        sql::push_column(sql, &p.cell.key.column);
        sql.push_str(&format!(",{},", p.cell.key.ref_key.get()));
        sql::push_hex(sql, &p.encoded);
        sql.push_str(&format!(",{at},{shard})"));
    })
}

/// Where a write's buffered copies went: the masters that took them and
/// the `buffered_at` they share.
pub(super) struct Held {
    nodes: Vec<std::sync::Arc<Node>>,
    at: i64,
}

/// Writes one cluster's groups into the buffers of
/// `storage.buffer_secondaries` masters of other clusters. Fails unless
/// that many took them.
pub(super) async fn write(
    store: &MySqlStore,
    cluster: usize,
    groups: &[(u32, Vec<Pending>)],
) -> Result<Held> {
    let topology = store.topology();
    let wanted = store.buffer_secondaries();
    let mut candidates: Vec<_> = topology
        .clusters
        .iter()
        .enumerate()
        .filter(|&(i, _)| i != cluster)
        .map(|(_, c)| c.master())
        .collect();
    // Healthy masters first, in random order.
    for i in (1..candidates.len()).rev() {
        candidates.swap(i, rand::random_range(0..=i));
    }
    candidates.sort_by_key(|n| n.breaker.admit() != Admission::Allowed);
    let meta = meta_database(&topology.instance);
    let at = now_micros();
    let mut took = Vec::new();
    let mut failures = Vec::new();
    for node in candidates {
        if took.len() == wanted {
            break;
        }
        match write_to(&node, &meta, groups, at).await {
            Ok(()) => took.push(node),
            Err(e) => failures.push(e.to_string()),
        }
    }
    let held = took.len();
    let cells: usize = groups.iter().map(|(_, items)| items.len()).sum();
    if held < wanted {
        return Err(Error::Unavailable {
            node: format!(
                "the buffers for cluster {:?}",
                topology.clusters[cluster].name
            ),
            reason: format!(
                "{held} of the {wanted} secondary masters took the write: {}",
                failures.join("; ")
            ),
        });
    }
    metrics::counter!("mezzanine_schemaless_buffered_cells_total")
        .increment((cells * wanted) as u64);
    Ok(Held { nodes: took, at })
}

/// Deletes the buffered copies of `keys` written as `held`: their master
/// answered the write a conflict, so the writer was told it did not land,
/// and the reconciler must not later take the copy for an acknowledged
/// write that lost. Best effort: a copy left behind is recorded as lost by
/// the reconciler, which errs on the side of showing it.
pub(super) async fn forget(store: &MySqlStore, held: &Held, keys: &[&CellKey]) {
    if keys.is_empty() {
        return;
    }
    let meta = meta_database(&store.topology().instance);
    let mut sql = format!(
        "DELETE FROM `{meta}`.`buffer` WHERE buffered_at = {} AND (row_key, column_name, ref_key) IN (",
        held.at
    );
    for (i, key) in keys.iter().enumerate() {
        if i > 0 {
            sql.push(',');
        }
        sql.push('(');
        sql::push_hex(&mut sql, key.row_key.as_bytes());
        sql.push(',');
        sql::push_column(&mut sql, &key.column);
        sql.push_str(&format!(",{})", key.ref_key.get()));
    }
    sql.push(')');
    for node in &held.nodes {
        if let Err(e) = node.execute(sql.clone()).await {
            tracing::warn!(node = %node.label, "a conflicting write's buffered copy stays (the reconciler will record it as lost): {e}");
        }
    }
}

async fn write_to(node: &Node, meta: &str, groups: &[(u32, Vec<Pending>)], at: i64) -> Result<()> {
    type Rows<'a> = Vec<(u32, &'a Pending)>;
    let (large, small): (Rows, Rows) = groups
        .iter()
        .flat_map(|(shard, items)| items.iter().map(move |p| (*shard, p)))
        .partition(|(_, p)| sql::needs_bind(&p.encoded));
    if !small.is_empty() {
        for statement in insert_rows(meta, small, at, node.packet_budget()) {
            node.execute(statement).await?;
        }
    }
    for (shard, p) in large {
        let query = sqlx::query(AssertSqlSafe(format!(
            "INSERT INTO `{meta}`.`buffer` (row_key, column_name, ref_key, body, buffered_at, shard) VALUES (?, ?, ?, ?, ?, ?)"
        )))
        .bind(p.cell.key.row_key.as_bytes().to_vec())
        .bind(p.cell.key.column.as_str().to_string())
        .bind(p.cell.key.ref_key.get())
        .bind(p.encoded.clone())
        .bind(at)
        .bind(shard);
        node.execute_prepared(query).await?;
    }
    Ok(())
}
