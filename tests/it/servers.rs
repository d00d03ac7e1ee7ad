//! The dev cluster's node control, on private clusters (these tests stop
//! and kill servers).

use std::time::Duration;

use devcluster::{DevCluster, NodeState, Spec};
use sqlx::{Connection, MySqlConnection};

async fn connect(cluster: &DevCluster, node: &str) -> Result<MySqlConnection, sqlx::Error> {
    MySqlConnection::connect(&cluster.mysql_url(node).unwrap()).await
}

async fn count(cluster: &DevCluster, node: &str) -> i64 {
    let mut conn = connect(cluster, node).await.unwrap();
    sqlx::query_scalar("SELECT COUNT(*) FROM probe.t")
        .fetch_one(&mut conn)
        .await
        .unwrap()
}

async fn insert(cluster: &DevCluster, rows: usize) {
    let mut conn = connect(cluster, "a-master").await.unwrap();
    for _ in 0..rows {
        sqlx::query("INSERT INTO probe.t () VALUES ()")
            .execute(&mut conn)
            .await
            .unwrap();
    }
}

/// A private cluster of one master and one minion, with an empty table
/// `probe.t` on the master, and a connection to the master.
async fn probe_cluster() -> (DevCluster, MySqlConnection) {
    let cluster = DevCluster::private(Spec::free_ports(&["a"], 1).unwrap())
        .await
        .unwrap();
    let mut conn = connect(&cluster, "a-master").await.unwrap();
    sqlx::raw_sql(
        "CREATE DATABASE probe; CREATE TABLE probe.t (id INT AUTO_INCREMENT PRIMARY KEY)",
    )
    .execute(&mut conn)
    .await
    .unwrap();
    (cluster, conn)
}

#[tokio::test]
async fn nodes_survive_kill_restart_and_pause() {
    let (cluster, conn) = probe_cluster().await;
    drop(conn);
    insert(&cluster, 10).await;
    cluster
        .wait_caught_up("a-minion1", Duration::from_secs(20))
        .await
        .unwrap();
    assert_eq!(count(&cluster, "a-minion1").await, 10);

    // kill -9 the master: it is gone at once, and its committed rows
    // survive the restart; the minion reconnects by itself.
    let pid = cluster.node("a-master").unwrap().pid().unwrap();
    cluster.kill("a-master").unwrap();
    assert_eq!(
        cluster.node("a-master").unwrap().state(),
        NodeState::Stopped
    );
    assert!(connect(&cluster, "a-master").await.is_err());
    cluster.start("a-master").await.unwrap();
    assert_ne!(cluster.node("a-master").unwrap().pid().unwrap(), pid);
    assert_eq!(count(&cluster, "a-master").await, 10);
    insert(&cluster, 5).await;
    cluster
        .wait_caught_up("a-minion1", Duration::from_secs(30))
        .await
        .unwrap();
    assert_eq!(count(&cluster, "a-minion1").await, 15);

    // A paused node answers nothing until resumed.
    cluster.pause("a-minion1").unwrap();
    assert_eq!(
        cluster.node("a-minion1").unwrap().state(),
        NodeState::Paused
    );
    let frozen =
        tokio::time::timeout(Duration::from_millis(1500), count(&cluster, "a-minion1")).await;
    assert!(frozen.is_err(), "a paused node must not answer");
    cluster.resume("a-minion1").unwrap();
    assert_eq!(
        cluster.node("a-minion1").unwrap().state(),
        NodeState::Running
    );
    assert_eq!(count(&cluster, "a-minion1").await, 15);

    // Semi-synchronous replication holds every commit until a minion has
    // it: with the only minion down, a write would wait (that is its
    // point). Turned off here to see a minion catch up on writes it
    // missed.
    let mut conn = connect(&cluster, "a-master").await.unwrap();
    sqlx::query("SET GLOBAL rpl_semi_sync_master_enabled = 0")
        .execute(&mut conn)
        .await
        .unwrap();
    drop(conn);
    // A clean stop and start of a minion: it catches up on what it missed.
    cluster.stop("a-minion1").await.unwrap();
    assert_eq!(
        cluster.node("a-minion1").unwrap().state(),
        NodeState::Stopped
    );
    insert(&cluster, 7).await;
    cluster.start("a-minion1").await.unwrap();
    cluster
        .wait_caught_up("a-minion1", Duration::from_secs(30))
        .await
        .unwrap();
    assert_eq!(count(&cluster, "a-minion1").await, 22);
    let status = cluster.minion_status("a-minion1").await.unwrap();
    assert!(
        status.io_running && status.sql_running && status.caught_up(),
        "{status:?}"
    );

    // PostgreSQL too.
    let pg = cluster.node("postgres").unwrap();
    pg.ping().await.unwrap();
    cluster.kill("postgres").unwrap();
    assert!(pg.ping().await.is_err());
    cluster.start("postgres").await.unwrap();
    pg.ping().await.unwrap();
}

/// Stops a kept cluster even when the test fails.
struct DownOnDrop(std::path::PathBuf);

impl Drop for DownOnDrop {
    fn drop(&mut self) {
        if let Ok(cluster) = DevCluster::open(&self.0) {
            for node in cluster.nodes() {
                node.kill();
            }
        }
    }
}

/// A port a client connection holds (it may be one of the ephemeral
/// range, as the fixed ports of `cluster up` are) is waited for until
/// released, and the server starts then; a port another process listens
/// on is refused at once, naming it.
#[tokio::test]
async fn a_port_a_client_holds_is_waited_for_and_one_listened_on_refused() {
    use std::net::{TcpListener, TcpStream};
    let server = TcpListener::bind("127.0.0.1:0").unwrap();
    let client = TcpStream::connect(server.local_addr().unwrap()).unwrap();
    let (accepted, _) = server.accept().unwrap();
    let held = client.local_addr().unwrap().port();
    // Released after two seconds, the server's side closed first so the
    // client's port does not linger in TIME-WAIT.
    let release = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_secs(2));
        drop(accepted);
        std::thread::sleep(Duration::from_millis(100));
        drop(client);
    });
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("cluster");
    let _guard = DownOnDrop(root.clone());
    let spec = Spec {
        postgres_port: held,
        clusters: vec![],
    };
    let started = std::time::Instant::now();
    let cluster = DevCluster::up(&root, spec).await.unwrap();
    assert!(started.elapsed() >= Duration::from_secs(2));
    release.join().unwrap();
    cluster.node("postgres").unwrap().ping().await.unwrap();
    cluster.down().await.unwrap();

    let taken = TcpListener::bind("127.0.0.1:0").unwrap();
    let spec = Spec {
        postgres_port: taken.local_addr().unwrap().port(),
        clusters: vec![],
    };
    let other = dir.path().join("other");
    let _guard = DownOnDrop(other.clone());
    let err = match DevCluster::up(&other, spec).await {
        Ok(_) => panic!("started on a port another process listens on"),
        Err(e) => e.to_string(),
    };
    assert!(err.contains("another process listens on"), "{err}");
}

#[tokio::test]
async fn up_is_idempotent_and_down_stops_everything() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("cluster");
    let _guard = DownOnDrop(root.clone());
    let spec = Spec::free_ports(&["a"], 1).unwrap();
    let first = DevCluster::up(&root, spec.clone()).await.unwrap();
    let pids: Vec<_> = first.nodes().iter().map(|n| n.pid()).collect();
    assert!(pids.iter().all(Option::is_some));
    drop(first); // servers keep running after the value is gone

    let again = DevCluster::up(&root, spec.clone()).await.unwrap();
    let pids_again: Vec<_> = again.nodes().iter().map(|n| n.pid()).collect();
    assert_eq!(pids, pids_again, "up reuses running servers");

    let other = Spec::free_ports(&["a", "b"], 1).unwrap();
    assert!(
        DevCluster::up(&root, other).await.is_err(),
        "a different layout is refused"
    );

    let opened = DevCluster::open(&root).unwrap();
    opened.down().await.unwrap();
    assert!(opened
        .nodes()
        .iter()
        .all(|n| n.state() == NodeState::Stopped));

    let restarted = DevCluster::up(&root, spec).await.unwrap();
    assert!(restarted
        .nodes()
        .iter()
        .all(|n| n.state() == NodeState::Running));
    restarted.down().await.unwrap();
}

#[tokio::test]
async fn a_frozen_master_times_out_instead_of_hanging_and_a_retry_is_safe() {
    use schemaless::mysql::{schema, Topology};
    use schemaless::{CellStore, ReadFrom, WriteOutcome};

    let cluster = DevCluster::private(Spec::free_ports(&["a"], 1).unwrap())
        .await
        .unwrap();
    let text = format!(
        "{}\n[storage]\nrequest_timeout_ms = 700\nconnect_timeout_ms = 700\n",
        cluster.config_toml("frozen", 4)
    );
    let config = config::Config::parse(&text, "frozen.toml").unwrap();
    schema::apply(&Topology::from_config(&config).unwrap())
        .await
        .unwrap();
    let store = schemaless::MySqlStore::connect(&config).unwrap();
    let before = crate::harness::cell(1, "BASE", 1, serde_json::json!({"v": 1}));
    store.put_cell(before.clone()).await.unwrap();
    cluster
        .wait_caught_up("a-minion1", Duration::from_secs(20))
        .await
        .unwrap();

    cluster.pause("a-master").unwrap();
    let during = crate::harness::cell(2, "BASE", 1, serde_json::json!({"v": 2}));
    let write = store.put_cell(during.clone()).await.unwrap_err();
    assert!(write.is_retryable(), "{write}");
    assert!(write.is_unavailable(), "{write}");
    // A master read waits out the timeout, then a minion answers it and
    // says it may be stale.
    let read = store
        .get_cell_answer(&before.key, ReadFrom::Master)
        .await
        .unwrap();
    assert!(read.stale);
    assert_eq!(read.value.unwrap().cell, before);
    // Minion reads do not depend on the frozen master.
    let stale = store
        .get_cell(&before.key, ReadFrom::Minion)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(stale.cell, before);

    cluster.resume("a-master").unwrap();
    // The timed-out write may or may not have landed; the retry tells.
    // The failures may have opened the master's breaker: a client retries
    // a retryable error until it half-opens and the master answers.
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    let retried = loop {
        match store.put_cell(during.clone()).await {
            Ok(outcome) => break outcome,
            Err(e) if e.is_retryable() && std::time::Instant::now() < deadline => {
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            Err(e) => panic!("the retry after the master resumed: {e}"),
        }
    };
    assert!(matches!(
        retried,
        WriteOutcome::Written | WriteOutcome::AlreadyPresent
    ));
    let got = store
        .get_cell(&during.key, ReadFrom::Master)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(got.cell, during);
    store.close().await;
}

#[tokio::test]
async fn binary_logs_are_purged_once_every_minion_has_them() {
    let (cluster, mut conn) = probe_cluster().await;
    for _ in 0..3 {
        insert(&cluster, 5).await;
        sqlx::raw_sql("FLUSH BINARY LOGS")
            .execute(&mut conn)
            .await
            .unwrap();
    }
    assert!(binary_logs(&mut conn).await >= 4);
    cluster
        .purge_binary_logs(Duration::from_secs(30))
        .await
        .unwrap();
    // The log being written is kept, and at most the one before it, which
    // MariaDB keeps until its transactions are checkpointed in InnoDB.
    assert!(
        binary_logs(&mut conn).await <= 2,
        "the older logs are deleted"
    );
    // Replication goes on from where it was.
    insert(&cluster, 5).await;
    cluster
        .wait_caught_up("a-minion1", Duration::from_secs(30))
        .await
        .unwrap();
    assert_eq!(count(&cluster, "a-minion1").await, 20);
    // A minion that is down keeps every log: nothing is purged.
    cluster.stop("a-minion1").await.unwrap();
    sqlx::raw_sql("FLUSH BINARY LOGS")
        .execute(&mut conn)
        .await
        .unwrap();
    let kept = binary_logs(&mut conn).await;
    assert!(cluster
        .purge_binary_logs(Duration::from_secs(2))
        .await
        .is_err());
    assert_eq!(binary_logs(&mut conn).await, kept);
    drop(conn);
    cluster.down().await.unwrap();
    cluster.purge().unwrap();
}

/// How many binary logs the server keeps.
async fn binary_logs(conn: &mut MySqlConnection) -> usize {
    sqlx::query("SHOW BINARY LOGS")
        .fetch_all(conn)
        .await
        .unwrap()
        .len()
}
