//! The backfill against real servers: 100k trips copied and compared, runs
//! killed (-9) at random points and resumed to the same contents as an
//! uninterrupted run, mirrored writes racing the copy, two processes on
//! one plan, a stale chunk reclaimed, a chunk with unconvertible data
//! failed while the rest goes on, the gate of `mode set shadow`, and the
//! pause while a minion lags (on a private cluster whose minion is
//! delayed).

use std::process::Stdio;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use backfill::{Backfill, Options};
use legacy::LegacyStore;
use rand::Rng;
use schemaless::{CellStore, MySqlStore, ReadFrom};
use tokio_util::sync::CancellationToken;
use tripstore::{Mode, ModeRequest, TripStore};

use crate::harness::{config_file, mezzanine, private_trips, LegacyDb};
use crate::mirror::{all_schemaless_cells, assert_stores_equal};

fn options(workers: usize) -> Options {
    Options {
        workers,
        max_rows_per_sec: 0,
        max_replication_lag: Duration::from_secs(30),
        stale_after: Duration::from_secs(10),
    }
}

/// Plans (afresh) and runs the whole backfill in this process.
pub(crate) async fn backfill_now(
    legacy: &LegacyStore,
    schemaless: &MySqlStore,
    config: &config::Config,
) {
    backfill::plan::create(legacy, 500, true, "test")
        .await
        .expect("plan");
    let runner = Backfill::new(legacy.clone(), schemaless.clone(), config, options(2));
    assert!(runner
        .run(CancellationToken::new())
        .await
        .expect("backfill"));
}

/// Seeded trips, with their Schemaless schema applied.
async fn seeded(trips: u64, seed: u64) -> LegacyDb {
    let db = LegacyDb::trips().await;
    legacy::trips::seed(&db.pool, "public", "uuid", trips, seed, |_| {})
        .await
        .unwrap();
    db.apply_schemaless().await;
    db
}

/// A checksum of every cell's address and body in Schemaless (not its
/// change-log position or time, which differ between runs).
async fn checksum(store: &MySqlStore) -> (usize, u64) {
    let mut cells: Vec<String> = all_schemaless_cells(store)
        .await
        .into_iter()
        .map(|s| format!("{} {}", s.cell.key, s.cell.body))
        .collect();
    cells.sort();
    let mut hash = 0xcbf2_9ce4_8422_2325u64;
    for text in &cells {
        for b in text.bytes().chain([b'\n']) {
            hash = (hash ^ u64::from(b)).wrapping_mul(0x100_0000_01b3);
        }
    }
    (cells.len(), hash)
}

async fn chunk_states(db: &LegacyDb) -> (i64, i64, i64) {
    let row: (i64, i64, i64) = sqlx::query_as(
        "SELECT count(*), count(*) FILTER (WHERE state = 'done'), coalesce(max(attempts), 0)::int8
         FROM mezzanine.backfill_chunks",
    )
    .fetch_one(&db.pool)
    .await
    .unwrap();
    row
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hundred_thousand_trips_are_copied_exactly() {
    let db = seeded(100_000, 21).await;
    let legacy = db.store().await;
    let schemaless = MySqlStore::connect(&db.config).unwrap();
    let plan = backfill::plan::create(&legacy, 2000, false, "test")
        .await
        .unwrap();
    assert_eq!((plan.low_id, plan.high_id, plan.chunks), (1, 100_001, 50));
    // Planning again is refused, naming the way out.
    let err = backfill::plan::create(&legacy, 2000, false, "test")
        .await
        .unwrap_err();
    assert!(err.to_string().contains("--replace"), "{err}");

    let runner = Backfill::new(legacy.clone(), schemaless.clone(), &db.config, options(4));
    assert!(runner.run(CancellationToken::new()).await.unwrap());
    let progress = runner.progress();
    let status = backfill::status::read(&db.pool).await.unwrap();
    assert!(status.complete(), "{status:?}");
    assert_eq!(status.parents_done, 100_000);
    assert_eq!(backfill::Progress::get(&progress.cells), status.cells_done);
    assert_eq!(
        status.cells_written, status.cells_done,
        "every cell was new"
    );
    assert_eq!(assert_stores_equal(&legacy, &schemaless).await, 100_000);
    assert_eq!(
        all_schemaless_cells(&schemaless).await.len() as u64,
        status.cells_done
    );
    schemaless.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn runs_killed_at_random_points_end_like_an_uninterrupted_run() {
    // Two databases with the same seeded data: one copied without
    // interruption, one by runs killed with -9 and resumed.
    let calm = seeded(12_000, 8).await;
    let killed = seeded(12_000, 8).await;
    let calm_store = MySqlStore::connect(&calm.config).unwrap();
    backfill_now(&calm.store().await, &calm_store, &calm.config).await;

    let legacy = killed.store().await;
    backfill::plan::create(&legacy, 100, false, "test")
        .await
        .unwrap();
    let file = config_file(&killed.config_text);
    let mut rng = rand::rng();
    // Paced at 5000 rows/s (after a first second's burst), the 34,000
    // rows take about 6 s; each run is killed somewhere in its first 0.9 s,
    // so together they copy at most about 26,000.
    let run_args = [
        "backfill",
        "run",
        "--workers",
        "3",
        "--stale-after-ms",
        "300",
        "--plain",
        "--max-rows-per-sec",
        "5000",
    ];
    for _ in 0..3 {
        let mut child = mezzanine(file.path(), &run_args)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        tokio::time::sleep(Duration::from_millis(rng.random_range(300..900))).await;
        child.kill().unwrap();
        child.wait().unwrap();
    }
    let (total, done, _) = chunk_states(&killed).await;
    assert!(
        done < total,
        "the killed runs finished the plan: {done} of {total}"
    );
    // Resumed to the end: stale chunks of the killed runs are claimed
    // again once silent for 300 ms.
    let out = mezzanine(file.path(), &run_args[..7]).output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let status = backfill::status::read(&killed.pool).await.unwrap();
    assert!(status.complete() && status.failed == 0, "{status:?}");
    let killed_store = MySqlStore::connect(&killed.config).unwrap();
    let (calm_cells, calm_sum) = checksum(&calm_store).await;
    assert_eq!(checksum(&killed_store).await, (calm_cells, calm_sum));
    assert!(calm_cells > 12_000);
    assert_stores_equal(&legacy, &killed_store).await;
    let status = String::from_utf8_lossy(
        &mezzanine(file.path(), &["backfill", "status"])
            .output()
            .unwrap()
            .stdout,
    )
    .into_owned();
    assert!(
        status.contains("120 done, 0 running, 0 pending, 0 failed (complete)"),
        "{status}"
    );
    calm_store.close().await;
    killed_store.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mirrored_writes_racing_the_backfill_end_equal_to_the_legacy_tables() {
    let db = seeded(5000, 13).await;
    // Facades may take up to three seconds to see a mode change: a plan
    // made sooner after mirror began is refused by the shadow gate.
    let config = &config::Config::parse(
        &db.config_text
            .replace("mode_poll_ms = 200", "mode_poll_ms = 3000"),
        "slow-poll.toml",
    )
    .unwrap();
    let facade = Arc::new(TripStore::connect(config).await.unwrap());
    let request = |target| ModeRequest {
        target,
        force: false,
        by: "backfill test".into(),
        reason: None,
    };
    facade.set_mode(&request(Mode::Mirror)).await.unwrap();
    // A plan made before every facade could have seen mirror is refused
    // by the gate: rows created in between would be in no chunk.
    let legacy = facade.legacy().clone();
    backfill::plan::create(&legacy, 250, false, "test")
        .await
        .unwrap();
    let runner = Backfill::new(
        legacy.clone(),
        facade.schemaless().clone(),
        config,
        options(3),
    );
    assert!(runner.run(CancellationToken::new()).await.unwrap());
    let err = facade.set_mode(&request(Mode::Shadow)).await.unwrap_err();
    assert!(
        err.to_string().contains("backfill plan --extend")
            && err.to_string().contains("legacy.mode_poll_ms"),
        "{err}"
    );

    // Writers update seeded trips and add new ones while it runs again,
    // planned once every facade surely mirrors.
    tokio::time::sleep(Duration::from_secs(3)).await;
    backfill::plan::create(&legacy, 250, true, "test")
        .await
        .unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let updated = Arc::new(AtomicU64::new(0));
    let writers: Vec<_> = (0..3u64)
        .map(|w| {
            let (facade, stop, updated) = (facade.clone(), stop.clone(), updated.clone());
            tokio::spawn(async move {
                let mut source = legacy::trips::TripCells::new(500 + w);
                let base = schemaless::Column::new("BASE").unwrap();
                let mut id = 1 + w as i64;
                while !stop.load(Ordering::Relaxed) {
                    let uuid: uuid::Uuid =
                        sqlx::query_scalar("SELECT uuid FROM trips WHERE id = $1")
                            .bind(id)
                            .fetch_one(facade.legacy().pool())
                            .await
                            .unwrap();
                    let row = schemaless::RowKey::from(uuid);
                    let latest = facade
                        .get_cell_latest(&row, &base, ReadFrom::Master)
                        .await
                        .unwrap()
                        .unwrap();
                    let mut next = source.complete(&latest.cell);
                    let mut fields = next.body.fields().clone();
                    fields.insert("status".into(), serde_json::json!("disputed"));
                    next.body = schemaless::Body::from(fields);
                    facade.put_cell(next).await.unwrap();
                    facade.put_cells(source.new_trip()).await.unwrap();
                    updated.fetch_add(1, Ordering::Relaxed);
                    id += 37;
                    if id > 5000 {
                        id -= 4999;
                    }
                }
            })
        })
        .collect();
    let runner = Backfill::new(
        legacy.clone(),
        facade.schemaless().clone(),
        config,
        options(3),
    );
    assert!(runner.run(CancellationToken::new()).await.unwrap());
    stop.store(true, Ordering::Relaxed);
    for w in writers {
        w.await.unwrap();
    }
    assert!(
        updated.load(Ordering::Relaxed) > 20,
        "the writers barely ran"
    );
    // Rows created since the plan are mirrored; extending covers them too.
    let (_, added) = backfill::plan::extend(&legacy).await.unwrap();
    assert!(added > 0);
    let runner = Backfill::new(
        legacy.clone(),
        facade.schemaless().clone(),
        config,
        options(3),
    );
    assert!(runner.run(CancellationToken::new()).await.unwrap());
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    while mirror::status::outbox(&db.pool).await.unwrap().0 > 0 {
        assert!(
            std::time::Instant::now() < deadline,
            "the outbox never drained"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let status = backfill::status::read(&db.pool).await.unwrap();
    assert_eq!(status.failed, 0, "no conflicts: {:?}", status.failures);
    let trips = db.count("SELECT count(*) FROM trips").await as usize;
    assert_eq!(
        assert_stores_equal(&legacy, facade.schemaless()).await,
        trips
    );
    // Now the gate lets shadow in.
    facade.set_mode(&request(Mode::Shadow)).await.unwrap();
    facade.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_processes_share_one_plan_and_do_each_chunk_once() {
    let db = seeded(6000, 17).await;
    let legacy = db.store().await;
    backfill::plan::create(&legacy, 100, false, "test")
        .await
        .unwrap();
    let file = config_file(&db.config_text);
    let spawn = || {
        mezzanine(
            file.path(),
            &["backfill", "run", "--workers", "2", "--plain"],
        )
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
    };
    let (a, b) = (spawn(), spawn());
    let (a, b) = (a.wait_with_output().unwrap(), b.wait_with_output().unwrap());
    for out in [&a, &b] {
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    // Both did some of the work, and no chunk was claimed twice.
    let done_by = |out: &std::process::Output| -> u64 {
        let text = String::from_utf8_lossy(&out.stdout);
        let at = text.find("this process: ").expect("a summary line") + "this process: ".len();
        text[at..].split(' ').next().unwrap().parse().unwrap()
    };
    assert_eq!(done_by(&a) + done_by(&b), 60);
    assert!(
        done_by(&a) > 0 && done_by(&b) > 0,
        "one process did everything"
    );
    assert_eq!(chunk_states(&db).await, (60, 60, 1));
    let schemaless = MySqlStore::connect(&db.config).unwrap();
    assert_eq!(assert_stores_equal(&legacy, &schemaless).await, 6000);
    schemaless.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stale_chunks_are_reclaimed_and_bad_rows_fail_only_their_chunk() {
    let db = seeded(1000, 19).await;
    let legacy = db.store().await;
    backfill::plan::create(&legacy, 100, false, "test")
        .await
        .unwrap();
    // A chunk some worker claimed an hour ago and never finished.
    sqlx::query(
        "UPDATE mezzanine.backfill_chunks SET state = 'running', owner = 'backfill:gone:1:0000',
         heartbeat_at = now() - interval '1 hour', attempts = 1 WHERE start_id = 201",
    )
    .execute(&db.pool)
    .await
    .unwrap();
    // A value the layout cannot turn into a cell.
    sqlx::query("UPDATE trips SET requested_at = 'infinity' WHERE id = 555")
        .execute(&db.pool)
        .await
        .unwrap();
    // A note larger than Schemaless takes (limits.max_body_bytes).
    let (oversized_key, note_count): (uuid::Uuid, i64) = sqlx::query_as(
        "UPDATE trip_notes SET body = repeat('x', 1100000)
         WHERE (trip_id, seq) = (SELECT trip_id, seq FROM trip_notes WHERE trip_id BETWEEN 701 AND 800 ORDER BY trip_id, seq LIMIT 1)
         RETURNING (SELECT uuid FROM trips WHERE id = trip_id), (SELECT count(*) FROM trip_notes)",
    )
    .fetch_one(&db.pool)
    .await
    .unwrap();
    assert!(note_count > 0);
    let schemaless = MySqlStore::connect(&db.config).unwrap();
    let runner = Backfill::new(legacy.clone(), schemaless.clone(), &db.config, options(2));
    // A chunk that went back to pending on every try would never end.
    let finished = tokio::time::timeout(
        Duration::from_secs(120),
        runner.run(CancellationToken::new()),
    )
    .await
    .expect("the run ends: no chunk loops");
    assert!(finished.unwrap());
    assert_eq!(
        backfill::Progress::get(&runner.progress().chunks_reclaimed),
        1
    );
    // Each bad chunk failed once: no chunk was tried again and again.
    assert_eq!(backfill::Progress::get(&runner.progress().failures), 0);
    let status = backfill::status::read(&db.pool).await.unwrap();
    assert_eq!((status.done, status.failed), (8, 2), "{status:?}");
    let failure = &status.failures[0];
    assert_eq!((failure.start_id, failure.end_id), (501, 601));
    let error = failure.error.as_deref().unwrap();
    assert!(
        error.contains("1 rows cannot be converted") && error.contains("id 555"),
        "{error}"
    );
    let failure = &status.failures[1];
    assert_eq!((failure.start_id, failure.end_id), (701, 801));
    let error = failure.error.as_deref().unwrap();
    assert!(
        error.contains("1 cells are over limits.max_body_bytes")
            && error.contains(&format!("row {oversized_key} column NOTES")),
        "{error}"
    );
    // The rest of that chunk was copied.
    let other_trip: uuid::Uuid = sqlx::query_scalar("SELECT uuid FROM trips WHERE id = 790")
        .fetch_one(&db.pool)
        .await
        .unwrap();
    assert!(!schemaless
        .get_cells_for_row(&schemaless::RowKey::from(other_trip), ReadFrom::Master)
        .await
        .unwrap()
        .is_empty());
    sqlx::query("UPDATE trip_notes SET body = 'short again' WHERE length(body) > 1000000")
        .execute(&db.pool)
        .await
        .unwrap();
    let reclaimed: i32 = sqlx::query_scalar(
        "SELECT attempts FROM mezzanine.backfill_chunks WHERE start_id = 201 AND state = 'done'",
    )
    .fetch_one(&db.pool)
    .await
    .unwrap();
    assert_eq!(reclaimed, 2);
    // The failed chunk holds the gate; fixed and retried, it completes.
    let err = backfill::status::refusal(&db.pool, None)
        .await
        .unwrap()
        .unwrap();
    assert!(
        err.contains("2 chunks of backfill plan main failed"),
        "{err}"
    );
    sqlx::query("UPDATE trips SET requested_at = '2015-01-01T00:00:00Z' WHERE id = 555")
        .execute(&db.pool)
        .await
        .unwrap();
    assert_eq!(backfill::plan::retry_failed(&db.pool).await.unwrap(), 2);
    let runner = Backfill::new(legacy.clone(), schemaless.clone(), &db.config, options(2));
    assert!(runner.run(CancellationToken::new()).await.unwrap());
    assert_eq!(
        backfill::status::refusal(&db.pool, None).await.unwrap(),
        None
    );
    assert_eq!(assert_stores_equal(&legacy, &schemaless).await, 1000);

    // Paused, a run waits; resumed, it goes on.
    backfill::plan::create(&legacy, 100, true, "test")
        .await
        .unwrap();
    backfill::plan::set_paused(&db.pool, true).await.unwrap();
    let runner = Arc::new(Backfill::new(
        legacy.clone(),
        schemaless.clone(),
        &db.config,
        options(2),
    ));
    let task = {
        let runner = runner.clone();
        tokio::spawn(async move { runner.run(CancellationToken::new()).await })
    };
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while !runner.progress().paused.load(Ordering::Relaxed) {
        assert!(
            std::time::Instant::now() < deadline,
            "the run never saw the pause"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(
        chunk_states(&db).await.1,
        0,
        "nothing is copied while paused"
    );
    backfill::plan::set_paused(&db.pool, false).await.unwrap();
    assert!(task.await.unwrap().unwrap());
    assert_eq!(chunk_states(&db).await.1, 10);
    schemaless.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn workers_pause_while_a_minion_lags_and_resume_when_it_catches_up() {
    use devcluster::{DevCluster, Spec};
    use sqlx::Connection;

    let cluster = DevCluster::private(Spec::free_ports(&["a"], 1).unwrap())
        .await
        .unwrap();
    let (config, pool) = private_trips(&cluster, "lagging", "").await;
    legacy::trips::seed(&pool, "public", "uuid", 3000, 23, |_| {})
        .await
        .unwrap();

    // The minion applies every event five seconds late.
    let mut minion = sqlx::MySqlConnection::connect(&cluster.mysql_url("a-minion1").unwrap())
        .await
        .unwrap();
    let delay = |seconds: u32| {
        format!("STOP SLAVE; CHANGE MASTER TO MASTER_DELAY = {seconds}; START SLAVE")
    };
    sqlx::raw_sql(sqlx::AssertSqlSafe(delay(5)))
        .execute(&mut minion)
        .await
        .unwrap();

    let legacy = LegacyStore::connect(&config).await.unwrap();
    let schemaless = MySqlStore::connect(&config).unwrap();
    backfill::plan::create(&legacy, 100, false, "test")
        .await
        .unwrap();
    let runner = Arc::new(Backfill::new(
        legacy.clone(),
        schemaless.clone(),
        &config,
        // Paced to take about four seconds, so the lag (reported in
        // whole seconds) passes the limit while it runs.
        Options {
            workers: 2,
            max_rows_per_sec: 2000,
            max_replication_lag: Duration::from_millis(1000),
            stale_after: Duration::from_secs(30),
        },
    ));
    let task = {
        let runner = runner.clone();
        tokio::spawn(async move { runner.run(CancellationToken::new()).await })
    };
    let progress = runner.progress();
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    while backfill::Progress::get(&progress.lag_pauses) == 0 {
        assert!(
            std::time::Instant::now() < deadline,
            "the workers never paused for the lagging minion"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // While paused, no chunk is claimed.
    let claimed = |db: &sqlx::PgPool| {
        let db = db.clone();
        async move {
            sqlx::query_scalar::<_, i64>(
                "SELECT count(*) FROM mezzanine.backfill_chunks WHERE state <> 'pending'",
            )
            .fetch_one(&db)
            .await
            .unwrap()
        }
    };
    if progress.lagging.load(Ordering::Relaxed) {
        let before = claimed(&pool).await;
        tokio::time::sleep(Duration::from_millis(500)).await;
        if progress.lagging.load(Ordering::Relaxed) {
            // A worker past its check when the pause began may claim one.
            let after = claimed(&pool).await;
            assert!(
                after <= before + 2,
                "chunks claimed while lagging: {before} -> {after}"
            );
        }
    }
    sqlx::raw_sql(sqlx::AssertSqlSafe(delay(0)))
        .execute(&mut minion)
        .await
        .unwrap();
    assert!(task.await.unwrap().unwrap());
    assert!(!progress.lagging.load(Ordering::Relaxed));
    assert_eq!(assert_stores_equal(&legacy, &schemaless).await, 3000);
    schemaless.close().await;
    pool.close().await;
}
