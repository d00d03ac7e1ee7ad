//! One shard's entity rows read inside one InnoDB consistent snapshot, a
//! page at a time: what a backup writes to its file and a shard copy
//! inserts on its target.

use sqlx::{AssertSqlSafe, Row};

use super::format::Record;
use super::{record_of_row, BackupError};
use crate::mysql::conn::NodeConnection;
use crate::mysql::sql;
use std::sync::Arc;

use crate::api::ReadFrom;
use crate::mysql::topology::{ClusterNodes, Node};

/// Stored bytes of body per page past its first cell (a page of large
/// cells is cut short, as every change-log read is).
pub const PAGE_BYTES: usize = 16 << 20;

/// The nodes a snapshot of one of `cluster`'s shards is taken from, in
/// the order to try: its minions that answer, in random order, then its
/// master (always, even with an open breaker: it fails fast then).
pub fn sources(cluster: &ClusterNodes) -> Vec<Arc<Node>> {
    let mut nodes: Vec<Arc<Node>> = cluster
        .readers(ReadFrom::Minion)
        .into_iter()
        .map(|r| r.node)
        .collect();
    if nodes.is_empty() {
        nodes.push(cluster.master());
    }
    nodes
}

/// A snapshot open on one connection of `node`.
pub struct Snapshot<'a> {
    node: &'a Node,
    conn: NodeConnection,
    database: String,
    shard: u32,
    page_cells: usize,
    after: u64,
}

impl<'a> Snapshot<'a> {
    /// Opens the snapshot, after `node` has applied `wait_for` (a master's
    /// GTID position; see [`super::dump`]).
    pub async fn open(
        node: &'a Node,
        database: String,
        shard: u32,
        wait_for: Option<&str>,
        page_cells: usize,
    ) -> Result<Snapshot<'a>, BackupError> {
        let mut conn = node.acquire().await?;
        if let Some(position) = wait_for {
            // Within the request timeout (the statement's own limit is half
            // of it, so a lagging minion answers -1 rather than timing out).
            let wait = sqlx::query("SELECT MASTER_GTID_WAIT(?, ?)")
                .bind(position.to_string())
                .bind(node.request_timeout.as_secs_f64() / 2.0);
            let reached: Option<i64> = node
                .run(&mut conn, |c| Box::pin(wait.fetch_one(c)))
                .await?
                .try_get(0)
                .map_err(|e| node.error(e))?;
            if reached != Some(0) {
                return Err(BackupError::Store(crate::Error::Timeout {
                    node: node.label.clone(),
                    after: node.request_timeout / 2,
                }));
            }
        }
        conn.begin_transaction();
        node.run(&mut conn, |c| {
            Box::pin(async move {
                sqlx::raw_sql(
                    "SET TRANSACTION ISOLATION LEVEL REPEATABLE READ; \
                     START TRANSACTION WITH CONSISTENT SNAPSHOT, READ ONLY",
                )
                .execute(c)
                .await
                .map(|_| ())
            })
        })
        .await?;
        Ok(Snapshot {
            node,
            conn,
            database,
            shard,
            page_cells,
            after: 0,
        })
    }

    /// The next page in added_id order; empty at the end.
    pub async fn next_page(&mut self) -> Result<Vec<Record>, BackupError> {
        let text = sql::select_changes(&self.database, self.after, self.page_cells, PAGE_BYTES);
        let rows = self
            .node
            .run(&mut self.conn, |c| {
                Box::pin(sqlx::raw_sql(AssertSqlSafe(text)).fetch_all(c))
            })
            .await?;
        let records = rows
            .iter()
            .map(|row| record_of_row(row, self.node, self.shard))
            .collect::<Result<Vec<_>, _>>()?;
        if let Some(last) = records.last() {
            self.after = last.added_id;
        }
        Ok(records)
    }

    /// Ends the snapshot's transaction.
    pub async fn close(mut self) -> Result<(), BackupError> {
        self.node
            .run(&mut self.conn, |c| {
                Box::pin(async move { sqlx::raw_sql("COMMIT").execute(c).await.map(|_| ()) })
            })
            .await?;
        self.conn.end_transaction();
        Ok(())
    }
}
