//! Write availability on private clusters with real kills: a master
//! killed under load loses no acknowledged write, with buffered writes (a
//! promotion and the reconciler) and with semi-synchronous replication
//! alone while a minion lags; a master without semi-sync is refused
//! writes under `durability = "two_hosts"`; a frozen master's breaker opens and
//! reads fail over, a minion down changes nothing for writes, and a
//! reconciler killed mid-replay duplicates nothing.

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use devcluster::{DevCluster, Spec};
use schemaless::mysql::breaker::BreakerState;
use schemaless::mysql::{buffer, failover, schema};
use schemaless::{Cell, CellStore, MySqlStore, ReadFrom, RowKey, WriteOutcome};
use serde_json::json;
use sqlx::Connection;

use crate::harness::{config_file, mezzanine};

const SHARDS: u32 = 12;

/// A private cluster, a config for it with `storage` settings, the schema
/// applied, and a store.
async fn setup(
    clusters: &[&str],
    minions: usize,
    storage: &str,
) -> (
    DevCluster,
    config::Config,
    tempfile::NamedTempFile,
    MySqlStore,
) {
    let cluster = DevCluster::private(Spec::free_ports(clusters, minions).unwrap())
        .await
        .unwrap();
    let text = format!(
        "{}\n[storage]\n{storage}\n",
        cluster.config_toml("avail", SHARDS)
    );
    let config = config::Config::parse(&text, "availability.toml").unwrap();
    let topology = schemaless::mysql::Topology::from_config(&config).unwrap();
    schema::apply(&topology).await.unwrap();
    topology.close().await;
    // The minions have the shard databases before any test reads them (a
    // minion still applying the schema has no table to answer from).
    cluster
        .wait_all_caught_up(Duration::from_secs(30))
        .await
        .unwrap();
    let file = config_file(&text);
    let store = MySqlStore::connect(&config).unwrap();
    (cluster, config, file, store)
}

/// A row key whose shard is on cluster `index` (of `count` evenly split).
fn row_on(index: u32, count: u32, n: &mut u128) -> RowKey {
    loop {
        *n += 1;
        let key = RowKey::from(uuid::Uuid::from_u128(
            0x5eed_0000_0000_4000_8000_0000_0000_0000 | *n,
        ));
        let shard = schemaless::routing::shard_of(&key, SHARDS);
        if shard * count / SHARDS == index {
            return key;
        }
    }
}

fn trip(n: usize) -> Cell {
    let key = RowKey::from(uuid::Uuid::from_u128(
        0xa11a_0000_0000_4000_8000_0000_0000_0000 | n as u128,
    ));
    Cell::new(
        key,
        schemaless::Column::new("BASE").unwrap(),
        schemaless::RefKey::new(1).unwrap(),
        schemaless::Body::parse(&json!({"trip": n, "fare": n * 7 % 1000}).to_string()).unwrap(),
    )
}

/// Writes `total` cells from 8 writers, kills a-master once `kill_after`
/// are acknowledged, promotes a minion through the command line, lets
/// the reconciler drain, and returns (acknowledged, lost, handed off).
/// `lagging`: a-minion2's applier is stopped first (it still receives,
/// and acknowledges, what it does not apply).
async fn kill_under_load(buffered: bool, lagging: bool) -> (usize, usize, usize) {
    let storage = format!(
        "buffer_secondaries = {}\nrequest_timeout_ms = 2000\nconnect_timeout_ms = 1000\n\
         breaker_failures = 3\nbreaker_open_ms = 300\ntopology_refresh_ms = 200\n\
         buffer_replay_after_ms = 500\nreconcile_in_app = false\n",
        u32::from(buffered)
    );
    let (cluster, config, file, store) = setup(&["a", "b", "c"], 2, &storage).await;
    if lagging {
        let mut minion = sqlx::MySqlConnection::connect(&cluster.mysql_url("a-minion2").unwrap())
            .await
            .unwrap();
        sqlx::query("STOP SLAVE SQL_THREAD")
            .execute(&mut minion)
            .await
            .unwrap();
    }
    const TOTAL: usize = 12_000;
    const KILL_AFTER: usize = 3_000;
    let next = Arc::new(AtomicUsize::new(0));
    let acked: Arc<Mutex<Vec<(Cell, WriteOutcome)>>> = Arc::default();
    let failed = Arc::new(AtomicUsize::new(0));
    let writers: Vec<_> = (0..8)
        .map(|_| {
            let (store, next, acked, failed) =
                (store.clone(), next.clone(), acked.clone(), failed.clone());
            tokio::spawn(async move {
                loop {
                    let n = next.fetch_add(1, Ordering::Relaxed);
                    if n >= TOTAL {
                        return;
                    }
                    let cell = trip(n);
                    match store.put_cell(cell.clone()).await {
                        Ok(outcome) => acked.lock().unwrap().push((cell, outcome)),
                        Err(_) => {
                            failed.fetch_add(1, Ordering::Relaxed);
                        }
                    }
                }
            })
        })
        .collect();
    while acked.lock().unwrap().len() < KILL_AFTER {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    cluster.kill("a-master").unwrap();
    let killed_at = acked.lock().unwrap().len();
    for w in writers {
        w.await.unwrap();
    }
    let acked = std::mem::take(&mut *acked.lock().unwrap());
    let handed_off = acked
        .iter()
        .filter(|(_, o)| *o == WriteOutcome::Buffered)
        .count();
    assert!(
        acked.len() + failed.load(Ordering::Relaxed) == TOTAL && killed_at >= KILL_AFTER,
        "every write was answered"
    );

    // As a runbook would: promote a-minion1, unless the promotion names
    // the minion that received more (semi-sync waits for one minion's
    // acknowledgement, not each's); then that one.
    let promote = |node: &str| {
        mezzanine(file.path(), &["cluster", "promote", "a", node])
            .arg("--cluster-dir")
            .arg(cluster.root())
            .output()
            .unwrap()
    };
    let mut promoted = "a-minion1";
    let mut out = promote(promoted);
    let other = cluster.mysql_url("a-minion2").unwrap();
    if !out.status.success()
        && String::from_utf8_lossy(&out.stderr).contains(&format!("promote {other} instead"))
    {
        promoted = "a-minion2";
        out = promote(promoted);
    }
    assert!(
        out.status.success(),
        "promote: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(String::from_utf8_lossy(&out.stdout).contains("is the master now"));
    // The running store learns of the promotion by itself.
    let deadline = Instant::now() + Duration::from_secs(10);
    let new_master = cluster.mysql_url(promoted).unwrap();
    while store.topology().clusters[0].master().label != new_master {
        assert!(
            Instant::now() < deadline,
            "the store never saw the promotion"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // Writes to cluster a work again, on the new master.
    assert_eq!(
        store.put_cell(trip(TOTAL + 1)).await.unwrap(),
        WriteOutcome::Written
    );
    if buffered {
        let deadline = Instant::now() + Duration::from_secs(120);
        loop {
            let pass = buffer::reconcile_once(&store).await.unwrap();
            let empty = buffer::backlog(&store)
                .await
                .into_iter()
                .all(|(_, b)| matches!(b, Ok((0, _))));
            if pass.pending == 0 && empty {
                break;
            }
            assert!(Instant::now() < deadline, "buffers never drained: {pass:?}");
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }
    // A fresh store (another worker) sees the same.
    let reader = MySqlStore::connect(&config).unwrap();
    failover::refresh(reader.topology()).await;
    let mut lost = 0;
    for (cell, _) in &acked {
        let answer = reader
            .get_cell_answer(&cell.key, ReadFrom::Master)
            .await
            .unwrap();
        assert!(!answer.stale, "the new master answers");
        match answer.value {
            Some(stored) => assert_eq!(stored.cell.body, cell.body, "{}", cell.key),
            None => lost += 1,
        }
    }
    (acked.len(), lost, handed_off)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_master_killed_under_load_loses_no_acknowledged_write_with_buffering() {
    let (acked, lost, handed_off) = kill_under_load(true, false).await;
    println!(
        "buffered writes on: {acked} acknowledged ({handed_off} as Buffered), {lost} lost after the promotion"
    );
    assert!(
        handed_off > 0,
        "writes to the dead master were handed off to the buffers"
    );
    assert_eq!(lost, 0, "no acknowledged write may be lost");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_master_killed_under_load_with_a_lagging_minion_loses_no_acknowledged_write() {
    // No buffering: semi-synchronous replication (the dev cluster's, and
    // `storage.durability = "two_hosts"`) is what keeps every acknowledged
    // write on a second host, even with one minion's applier stopped.
    let (acked, lost, handed_off) = kill_under_load(false, true).await;
    println!(
        "semi-sync, one minion lagging: {acked} acknowledged, {lost} lost after the promotion"
    );
    assert_eq!(handed_off, 0, "nothing is Buffered with buffering off");
    assert_eq!(lost, 0, "no acknowledged write may be lost");
}

/// With `storage.durability = "two_hosts"` and no buffering, a master
/// without semi-synchronous replication is refused writes, naming why;
/// `"one_host"` writes to it (and says so).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_master_without_semi_sync_is_refused_writes_unless_one_host_is_chosen() {
    let (cluster, config, _file, store) = setup(&["a"], 1, "").await;
    let mut master = sqlx::MySqlConnection::connect(&cluster.mysql_url("a-master").unwrap())
        .await
        .unwrap();
    assert_eq!(
        store.put_cell(trip(1)).await.unwrap(),
        WriteOutcome::Written,
        "the dev cluster runs semi-sync"
    );
    sqlx::query("SET GLOBAL rpl_semi_sync_master_enabled = 0")
        .execute(&mut master)
        .await
        .unwrap();
    // A new store reads the settings on its first connection.
    let refused = MySqlStore::connect(&config).unwrap();
    let err = refused.put_cell(trip(2)).await.unwrap_err();
    assert!(
        matches!(err, schemaless::Error::NotDurable { .. })
            && err
                .to_string()
                .contains("rpl_semi_sync_master_enabled is off"),
        "{err}"
    );
    assert!(refused
        .get_cell(&trip(2).key, ReadFrom::Master)
        .await
        .unwrap()
        .is_none());
    // A timeout shorter than a request could fall back to asynchronous.
    sqlx::query(
        "SET GLOBAL rpl_semi_sync_master_enabled = 1, GLOBAL rpl_semi_sync_master_timeout = 500",
    )
    .execute(&mut master)
    .await
    .unwrap();
    let short = MySqlStore::connect(&config).unwrap();
    let err = short.put_cell(trip(2)).await.unwrap_err();
    assert!(
        err.to_string()
            .contains("rpl_semi_sync_master_timeout (500 ms)"),
        "{err}"
    );
    sqlx::query("SET GLOBAL rpl_semi_sync_master_enabled = 0")
        .execute(&mut master)
        .await
        .unwrap();
    let mut one_host = config.clone();
    one_host.storage.durability = config::Durability::OneHost;
    let store = MySqlStore::connect(&one_host).unwrap();
    assert_eq!(
        store.put_cell(trip(2)).await.unwrap(),
        WriteOutcome::Written
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_frozen_master_opens_its_breaker_reads_fail_over_and_it_closes_again() {
    let (cluster, _config, _file, store) = setup(
        &["a"],
        2,
        "request_timeout_ms = 400\nconnect_timeout_ms = 400\nbreaker_failures = 2\nbreaker_open_ms = 300\n",
    )
    .await;
    let cells: Vec<Cell> = (0..20).map(trip).collect();
    store.put_cells(cells.clone()).await.unwrap();
    cluster
        .wait_all_caught_up(Duration::from_secs(30))
        .await
        .unwrap();
    let master = store.topology().clusters[0].master();

    cluster.pause("a-master").unwrap();
    // Requests time out until the breaker opens; then they fail at once.
    let started = Instant::now();
    let first = store.put_cell(trip(100)).await.unwrap_err();
    assert!(first.is_unavailable(), "{first}");
    assert!(
        started.elapsed() >= Duration::from_millis(300),
        "the first write waited for its timeout"
    );
    let _ = store.put_cell(trip(101)).await;
    assert_eq!(master.breaker.state(), BreakerState::Open);
    let started = Instant::now();
    let refused = store.put_cell(trip(102)).await.unwrap_err();
    assert!(
        matches!(refused, schemaless::Error::Unavailable { .. }),
        "{refused}"
    );
    assert!(started.elapsed() < Duration::from_millis(300), "fails fast");
    // Master reads are answered by a minion, flagged stale.
    for cell in &cells {
        let answer = store
            .get_cell_answer(&cell.key, ReadFrom::Master)
            .await
            .unwrap();
        assert!(answer.stale, "a minion answered");
        assert_eq!(answer.value.unwrap().cell.body, cell.body);
    }
    let row = store
        .get_cells_for_row_answer(&cells[0].key.row_key, ReadFrom::Master)
        .await
        .unwrap();
    assert!(row.stale);
    assert_eq!(row.value.len(), 1);

    cluster.resume("a-master").unwrap();
    let deadline = Instant::now() + Duration::from_secs(15);
    while master.breaker.state() != BreakerState::Closed {
        assert!(
            Instant::now() < deadline,
            "the breaker never closed: {:?}",
            master.breaker.last_error()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(
        store.put_cell(trip(103)).await.unwrap(),
        WriteOutcome::Written
    );
    let answer = store
        .get_cell_answer(&trip(103).key, ReadFrom::Master)
        .await
        .unwrap();
    assert!(!answer.stale);
    assert!(answer.value.is_some());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_minion_down_changes_nothing_for_writes_and_master_reads() {
    let (cluster, _config, _file, store) = setup(
        &["a"],
        2,
        "request_timeout_ms = 1000\nconnect_timeout_ms = 500\nbreaker_failures = 2\nbreaker_open_ms = 300\n",
    )
    .await;
    cluster.kill("a-minion1").unwrap();
    let minion = store.topology().clusters[0].members[1].clone();
    for n in 0..200 {
        let cell = trip(n);
        assert_eq!(
            store.put_cell(cell.clone()).await.unwrap(),
            WriteOutcome::Written
        );
        let answer = store
            .get_cell_answer(&cell.key, ReadFrom::Master)
            .await
            .unwrap();
        assert!(!answer.stale);
        assert_eq!(answer.value.unwrap().cell.body, cell.body);
        // Minion reads skip the dead minion (the other one, or the master,
        // answers).
        store
            .get_cell_answer(&cell.key, ReadFrom::Minion)
            .await
            .unwrap();
    }
    // Open, or half-open with a probe out: either way not asked.
    assert_ne!(
        minion.breaker.state(),
        BreakerState::Closed,
        "minion reads found the dead minion and opened its breaker"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_reconciler_killed_mid_replay_and_restarted_drains_and_duplicates_nothing() {
    let (cluster, _config, file, store) = setup(
        &["a", "b"],
        1,
        "buffer_secondaries = 1\nrequest_timeout_ms = 2000\nconnect_timeout_ms = 500\n\
         breaker_failures = 2\nbreaker_open_ms = 300\nbuffer_replay_after_ms = 0\nreconcile_in_app = false\n",
    )
    .await;
    cluster.stop("a-master").await.unwrap();
    // Hinted handoff: cells of cluster a are answered Buffered.
    let mut n = 0u128;
    let mut cells = Vec::new();
    for batch in 0..100 {
        let batch: Vec<Cell> = (0..50)
            .map(|i| {
                Cell::new(
                    row_on(0, 2, &mut n),
                    schemaless::Column::new("BASE").unwrap(),
                    schemaless::RefKey::new(1).unwrap(),
                    schemaless::Body::parse(&json!({"batch": batch, "i": i}).to_string()).unwrap(),
                )
            })
            .collect();
        let outcomes = store.put_cells(batch.clone()).await.unwrap();
        for o in outcomes {
            assert_eq!(o.unwrap(), WriteOutcome::Buffered);
        }
        cells.extend(batch);
    }
    // Not readable while the master is down (a minion has nothing).
    let answer = store
        .get_cell_answer(&cells[0].key, ReadFrom::Master)
        .await
        .unwrap();
    assert!(answer.stale && answer.value.is_none());

    cluster.start("a-master").await.unwrap();
    // A reconciler process killed mid-replay…
    let mut first = mezzanine(file.path(), &["buffer", "reconcile", "--every-ms", "10"])
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let backlog = |store: MySqlStore| async move {
        buffer::backlog(&store)
            .await
            .into_iter()
            .map(|(_, b)| b.map(|(count, _)| count).unwrap_or(u64::MAX))
            .sum::<u64>()
    };
    let deadline = Instant::now() + Duration::from_secs(60);
    let master_count = |store: MySqlStore| async move {
        let mut total = 0i64;
        for shard in 0..SHARDS / 2 {
            let rows = store.topology().clusters[0]
                .master()
                .fetch_all(format!("SELECT COUNT(*) FROM `avail_{shard:04}`.`entity`"))
                .await
                .unwrap_or_default();
            total += rows.first().map_or(0, |r| sqlx::Row::get::<i64, _>(r, 0));
        }
        total
    };
    // …once part of the buffer has reached the master.
    loop {
        let landed = master_count(store.clone()).await;
        if landed > 0 {
            break;
        }
        assert!(Instant::now() < deadline, "the reconciler never replayed");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    first.kill().unwrap();
    first.wait().unwrap();
    let left = backlog(store.clone()).await;
    assert!(left > 0, "killed before the buffer drained");
    let out = mezzanine(
        file.path(),
        &[
            "buffer",
            "reconcile",
            "--until-empty",
            "--timeout-secs",
            "120",
        ],
    )
    .output()
    .unwrap();
    assert!(
        out.status.success(),
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(backlog(store.clone()).await, 0);
    // Every cell once, with its body; nothing else.
    assert_eq!(master_count(store.clone()).await, cells.len() as i64);
    let mut bodies = HashMap::new();
    for cell in &cells {
        let stored = store
            .get_cell(&cell.key, ReadFrom::Master)
            .await
            .unwrap()
            .unwrap();
        assert_eq!(stored.cell.body, cell.body);
        bodies.insert(cell.key.clone(), ());
    }
    assert_eq!(bodies.len(), cells.len());
}

/// While a master is down, two writes to one address are both answered
/// `Buffered` (nothing can compare them yet). A promotion replays the
/// buffers to the new master before it is recorded, so the first
/// acknowledged write holds the address before any store's new write; the
/// reconciler records the second as lost (both bodies), `buffer status`
/// lists it and exits 1 until the verifier takes it as an open mismatch.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn after_a_promotion_the_first_buffered_write_wins_and_the_lost_one_is_recorded() {
    let (cluster, config, file, store) = setup(
        &["a", "b", "c"],
        1,
        "buffer_secondaries = 1\nrequest_timeout_ms = 2000\nconnect_timeout_ms = 500\n\
         breaker_failures = 2\nbreaker_open_ms = 300\nbuffer_replay_after_ms = 3600000\nreconcile_in_app = false\n",
    )
    .await;
    cluster.stop("a-master").await.unwrap();
    let mut n = 0u128;
    let (contested, other) = (row_on(0, 3, &mut n), row_on(0, 3, &mut n));
    let cell = |row: RowKey, body: serde_json::Value| {
        Cell::new(
            row,
            schemaless::Column::new("BASE").unwrap(),
            schemaless::RefKey::new(1).unwrap(),
            schemaless::Body::parse(&body.to_string()).unwrap(),
        )
    };
    let first = cell(contested, json!({"status": "first"}));
    let second = cell(contested, json!({"status": "second"}));
    let unrelated = cell(other, json!({"status": "alone"}));
    // One after the other: each is buffered later than the one before.
    for c in [&first, &second, &unrelated] {
        assert_eq!(
            store.put_cell(c.clone()).await.unwrap(),
            WriteOutcome::Buffered
        );
    }

    let out = mezzanine(file.path(), &["cluster", "promote", "a", "a-minion1"])
        .arg("--cluster-dir")
        .arg(cluster.root())
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout).to_string();
    assert!(
        out.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        stdout.contains(
            "before it took new writes: 2 (0 lost to a body it already held, 1 later writes"
        ),
        "{stdout}"
    );

    // Another worker, as soon as it knows the new master: the first
    // acknowledged write holds the address, and a new write there is the
    // conflict (not the buffered one).
    let reader = MySqlStore::connect(&config).unwrap();
    failover::refresh(reader.topology()).await;
    for c in [&first, &unrelated] {
        let stored = reader
            .get_cell(&c.key, ReadFrom::Master)
            .await
            .unwrap()
            .unwrap_or_else(|| panic!("{} not replayed", c.key));
        assert_eq!(stored.cell.body, c.body);
    }
    let late = reader
        .put_cell(cell(contested, json!({"status": "after the promotion"})))
        .await;
    assert!(
        matches!(late, Err(schemaless::Error::Conflict { .. })),
        "{late:?}"
    );

    // The reconciler records the lost write, with both bodies.
    let deadline = Instant::now() + Duration::from_secs(60);
    let lost = loop {
        buffer::reconcile_once(&reader).await.unwrap();
        let (lost, _) = schemaless::mysql::lost::read(&reader, false).await;
        if !lost.is_empty() {
            break lost;
        }
        assert!(
            Instant::now() < deadline,
            "the lost write was never recorded"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert_eq!(lost.len(), 1, "{lost:?}");
    assert_eq!(lost[0].key, second.key);
    assert!(lost[0].buffered_body.contains("second"), "{lost:?}");
    assert!(
        lost[0]
            .stored_body
            .as_deref()
            .unwrap_or("")
            .contains("first"),
        "{lost:?}"
    );
    // Nothing is left for another pass to drop.
    for _ in 0..3 {
        buffer::reconcile_once(&reader).await.unwrap();
    }
    assert_eq!(
        schemaless::mysql::lost::read(&reader, false).await.0.len(),
        1
    );

    let status = |file: &std::path::Path| {
        let out = mezzanine(file, &["buffer", "status"]).output().unwrap();
        (
            out.status.success(),
            String::from_utf8_lossy(&out.stdout).to_string(),
        )
    };
    let (ok, text) = status(file.path());
    assert!(!ok, "{text}");
    assert!(
        text.contains(&contested.to_string()) && text.contains("1 not yet taken"),
        "{text}"
    );

    // The verifier takes it as an open mismatch, once.
    let mut pg = sqlx::PgConnection::connect(&cluster.postgres_url("postgres"))
        .await
        .unwrap();
    sqlx::query("DROP SCHEMA IF EXISTS mezzanine CASCADE")
        .execute(&mut pg)
        .await
        .unwrap();
    let pool = sqlx::PgPool::connect(&cluster.postgres_url("postgres"))
        .await
        .unwrap();
    verifier::store::ensure(&pool).await.unwrap();
    assert_eq!(
        verifier::store::take_buffer_conflicts(&pool, &reader)
            .await
            .unwrap(),
        1
    );
    assert_eq!(
        verifier::store::take_buffer_conflicts(&pool, &reader)
            .await
            .unwrap(),
        0
    );
    let open = verifier::store::mismatches(&pool, true, Some(&contested), 10)
        .await
        .unwrap();
    assert_eq!(open.len(), 1, "{open:?}");
    assert_eq!(
        (open[0].source.as_str(), open[0].read_kind.as_str()),
        ("buffer", "buffered_write")
    );
    assert_eq!(
        open[0].legacy["lost_buffered_write"]["body"]["status"],
        "second"
    );
    assert_eq!(open[0].schemaless["body"]["status"], "first");
    let (ok, text) = status(file.path());
    assert!(ok, "{text}");
    assert!(text.contains("1 recorded, 0 not yet taken"), "{text}");
}

/// With no minion acknowledging its commits (semi-synchronous, with the
/// long master timeout durability wants), a master holds each DDL
/// statement for ever: `schema apply` fails within its bound instead,
/// saying why, and run again once the minion is back it finishes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn schema_apply_without_an_acknowledging_minion_fails_in_bounded_time() {
    let cluster = DevCluster::private(Spec::free_ports(&["a"], 1).unwrap())
        .await
        .unwrap();
    cluster.stop("a-minion1").await.unwrap();
    let text = format!(
        "{}\n[storage]\nrequest_timeout_ms = 1000\n",
        cluster.config_toml("unacked", SHARDS)
    );
    let config = config::Config::parse(&text, "unacked.toml").unwrap();
    let topology = schemaless::mysql::Topology::from_config(&config).unwrap();
    let started = std::time::Instant::now();
    let err = schema::apply(&topology).await.unwrap_err().to_string();
    assert!(
        err.contains("did not finish") && err.contains("acknowledge"),
        "{err}"
    );
    assert!(started.elapsed() < Duration::from_secs(60), "{err}");

    cluster.start("a-minion1").await.unwrap();
    let report = schema::apply(&topology).await.unwrap();
    assert_eq!(report.clusters.len(), 1);
    assert_eq!(schema::verify(&topology).await.unwrap(), Vec::<u32>::new());
    topology.close().await;
}
