//! MariaDB replication between a master and its minions: wiring a minion
//! to its master by GTID, reading its lag, waiting for it to catch up.

use std::time::Duration;

use sqlx::Connection;

use crate::node::Node;
use crate::Error;

/// Replication state of one minion.
#[derive(Clone, Debug, Default)]
pub struct MinionStatus {
    /// Whether the I/O thread (fetching the master's binlog) runs.
    pub io_running: bool,
    /// Whether the SQL thread (applying it) runs.
    pub sql_running: bool,
    /// MariaDB's own estimate, when both threads run.
    pub seconds_behind: Option<u64>,
    /// The master's `gtid_binlog_pos`, if the master answered.
    pub master_gtid: Option<String>,
    /// The minion's `gtid_slave_pos`.
    pub minion_gtid: String,
    /// The last replication error, if any.
    pub last_error: Option<String>,
}

impl MinionStatus {
    /// Whether the minion has applied everything the master has written.
    pub fn caught_up(&self) -> bool {
        self.master_gtid
            .as_deref()
            .is_some_and(|m| mariadb::gtid_covers(&self.minion_gtid, m))
    }
}

fn sql_error(node: &Node, source: sqlx::Error) -> Error {
    Error::Sql {
        node: node.spec.name.clone(),
        source,
    }
}

/// Points the minion at its master by GTID and starts replication, unless
/// it already replicates. `current_pos` counts the node's own binlog too:
/// a fresh minion starts from nothing, and a former master that comes back
/// as a minion asks for what it lacks — or, if it wrote transactions its
/// successor never received, replication stops with an error instead of
/// silently diverging.
pub(crate) async fn ensure_replicating(minion: &Node, master_port: u16) -> Result<(), Error> {
    let mut conn = minion.mysql().await.map_err(|e| sql_error(minion, e))?;
    let status = replica_status(&mut conn)
        .await
        .map_err(|e| sql_error(minion, e))?;
    if status.is_none() {
        let change = format!(
            "CHANGE MASTER TO MASTER_HOST='127.0.0.1', MASTER_PORT={master_port}, \
             MASTER_USER='root', MASTER_PASSWORD='', MASTER_USE_GTID=current_pos, \
             MASTER_CONNECT_RETRY=1"
        );
        sqlx::raw_sql(sqlx::AssertSqlSafe(change))
            .execute(&mut conn)
            .await
            .map_err(|e| sql_error(minion, e))?;
    }
    // START SLAVE is a no-op warning when already running.
    sqlx::raw_sql("START SLAVE")
        .execute(&mut conn)
        .await
        .map_err(|e| sql_error(minion, e))?;
    conn.close().await.map_err(|e| sql_error(minion, e))?;
    Ok(())
}

async fn replica_status(
    conn: &mut sqlx::MySqlConnection,
) -> Result<Option<mariadb::ReplicaStatus>, sqlx::Error> {
    let rows = sqlx::raw_sql(mariadb::SHOW_REPLICA_STATUS)
        .fetch_all(conn)
        .await?;
    Ok(mariadb::ReplicaStatus::from_rows(&rows))
}

async fn master_gtid(master_port: u16) -> Option<String> {
    let url = format!("mysql://root@127.0.0.1:{master_port}");
    let mut conn = sqlx::MySqlConnection::connect(&url).await.ok()?;
    let row = sqlx::raw_sql("SELECT @@GLOBAL.gtid_binlog_pos")
        .fetch_one(&mut conn)
        .await
        .ok()?;
    let _ = conn.close().await;
    mariadb::text(&row, 0)
}

/// The minion's replication state, and its master's position.
pub(crate) async fn status(minion: &Node, master_port: u16) -> Result<MinionStatus, Error> {
    let mut conn = minion.mysql().await.map_err(|e| sql_error(minion, e))?;
    let replica = replica_status(&mut conn)
        .await
        .map_err(|e| sql_error(minion, e))?;
    let _ = conn.close().await;
    let mut status = MinionStatus {
        minion_gtid: minion_gtid(minion).await?,
        master_gtid: master_gtid(master_port).await,
        ..MinionStatus::default()
    };
    if let Some(replica) = replica {
        status.io_running = replica.io_running;
        status.sql_running = replica.sql_running;
        status.seconds_behind = replica.seconds_behind;
        status.last_error = replica.last_error;
    }
    Ok(status)
}

/// Waits until the minion has applied the master's position as of now.
///
/// `stall` bounds how long the minion may go without applying anything,
/// not the whole wait: a minion that is busy applying a long backlog (a
/// machine shared with other heavy writers) keeps its caller waiting as
/// long as it moves, and one that has stopped fails after `stall`. The
/// whole wait is still capped at ten stalls, so a minion that crawls
/// cannot hold its caller for ever.
pub(crate) async fn wait_caught_up(
    minion: &Node,
    master_port: u16,
    stall: Duration,
) -> Result<(), Error> {
    let target = master_gtid(master_port).await.ok_or_else(|| {
        Error::Server(format!(
            "cannot read the position of {}'s master on port {master_port}",
            minion.spec.name
        ))
    })?;
    if target.is_empty() {
        return Ok(());
    }
    let slice = stall
        .min(Duration::from_secs(5))
        .max(Duration::from_millis(100));
    let began = std::time::Instant::now();
    let mut last_moved = began;
    let mut applied = minion_gtid(minion).await?;
    let mut conn = minion.mysql().await.map_err(|e| sql_error(minion, e))?;
    loop {
        let waited: i64 = sqlx::query_scalar("SELECT MASTER_GTID_WAIT(?, ?)")
            .bind(&target)
            .bind(slice.as_secs_f64())
            .fetch_one(&mut conn)
            .await
            .map_err(|e| sql_error(minion, e))?;
        if waited == 0 {
            let _ = conn.close().await;
            return Ok(());
        }
        let position = minion_gtid(minion).await?;
        if position != applied {
            applied = position;
            last_moved = std::time::Instant::now();
        }
        if last_moved.elapsed() >= stall || began.elapsed() >= stall * 10 {
            let _ = conn.close().await;
            let state = status(minion, master_port).await.ok();
            return Err(Error::Server(format!(
                "{} did not reach its master's position {target} (no progress for {:?}, {:?} in all; replication: {state:?})",
                minion.spec.name,
                last_moved.elapsed(),
                began.elapsed()
            )));
        }
    }
}

/// The minion's applied position (`gtid_slave_pos`).
async fn minion_gtid(minion: &Node) -> Result<String, Error> {
    let mut conn = minion.mysql().await.map_err(|e| sql_error(minion, e))?;
    let row = sqlx::raw_sql("SELECT @@GLOBAL.gtid_slave_pos")
        .fetch_one(&mut conn)
        .await
        .map_err(|e| sql_error(minion, e))?;
    let _ = conn.close().await;
    Ok(mariadb::text(&row, 0).unwrap_or_default())
}
