//! Capture: writes that bypass the facade, made by other processes with
//! plain SQL (psql), reach Schemaless; deletions become tombstones; a
//! facade write is delivered once; updates without a new version are
//! bumped or parked; install and uninstall run under live writers; bad
//! layouts, names that need quoting and missing privileges are clear
//! errors that change nothing; a second layout of other names works.

use std::collections::{BTreeMap, BTreeSet};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use config::ColumnKind;
use legacy::trips::TripCells;
use legacy::LegacyStore;
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use schemaless::tombstone::{self, Tombstoned};
use schemaless::{Body, Cell, CellKey, CellStore, Column, MySqlStore, ReadFrom, RowKey};
use tripstore::{Mode, TripStore};
use uuid::Uuid;

use crate::harness::{cluster, config_file, mezzanine, LegacyDb, TEST_CAPTURE};
use crate::mirror::{all_schemaless_cells, backfill_in_mirror, run_ok, walk_to};

/// The database's config with capture required (and `capture` keys),
/// plus `extra` TOML tables.
fn captured(db: &LegacyDb, capture: &str, extra: &str) -> (config::Config, String) {
    let text = format!(
        "{}\n{extra}\n",
        db.config_text.replace(
            TEST_CAPTURE,
            &format!("[capture]\nrequired = true\n{capture}\n")
        )
    );
    let config = config::Config::parse(&text, "capture-test.toml").expect("the test config");
    (config, text)
}

/// `mezzanine serve` on a free port: its `/metrics`, and the dashboard's
/// page as headless Chromium renders it.
async fn dashboard(file: &tempfile::NamedTempFile) -> (String, String) {
    let (mut serve, url, addr) = crate::verify::serve(file.path());
    let metrics = crate::verify::http_get(&addr, "/metrics");
    let profile = tempfile::tempdir().unwrap();
    let dom = crate::verify::headless(
        profile.path(),
        &["--virtual-time-budget=8000", "--dump-dom"],
        &url,
    );
    serve.kill().unwrap();
    serve.wait().unwrap();
    (metrics, String::from_utf8_lossy(&dom.stdout).into_owned())
}

/// `psql` (another process and another driver than Mezzanine's) running
/// `sql` against the test database.
fn psql(db: &LegacyDb, sql: &str) -> Command {
    let binaries = devcluster::Binaries::find().expect("the PostgreSQL binaries");
    let mut command = Command::new(binaries.psql);
    command
        .args(["-X", "-q", "-v", "ON_ERROR_STOP=1", "-d"])
        .arg(cluster().postgres_url(&db.name))
        .args(["-c", sql]);
    command
}

/// Runs a psql script file in the background.
fn psql_script(db: &LegacyDb, script: &std::path::Path) -> Child {
    let binaries = devcluster::Binaries::find().expect("the PostgreSQL binaries");
    Command::new(binaries.psql)
        .args(["-X", "-q", "-v", "ON_ERROR_STOP=1", "-d"])
        .arg(cluster().postgres_url(&db.name))
        .arg("-f")
        .arg(script)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("psql starts")
}

/// Every cell Schemaless shows for the legacy tables' rows, read through
/// the tombstones, compared with what the legacy tables hold now: a row
/// column's latest cell is the legacy row, a child column's cells are the
/// legacy child rows, and every legacy cell is stored exactly once. Rows
/// deleted from PostgreSQL show nothing in Schemaless. Returns the number
/// of legacy cells.
async fn assert_visible_equal(
    legacy: &LegacyStore,
    schemaless: &MySqlStore,
    tombstones: &Column,
) -> usize {
    let (low, high) = legacy.id_range().await.unwrap().unwrap_or((0, -1));
    let chunk = legacy.scan(low..high + 1).await.unwrap();
    assert!(chunk.unreadable.is_empty(), "{:?}", chunk.unreadable);
    let stored = all_schemaless_cells(schemaless).await;
    let mut copies: BTreeMap<CellKey, usize> = BTreeMap::new();
    for s in &stored {
        *copies.entry(s.cell.key.clone()).or_default() += 1;
    }
    let visible = tombstone::visible(stored, tombstones).unwrap();
    type View = BTreeMap<(RowKey, String), BTreeMap<i64, Body>>;
    let kind = |column: &str| legacy.layout().column(column).map(|(_, c)| c.kind());
    let mut theirs: View = BTreeMap::new();
    for s in visible {
        let cell = s.cell;
        let Some(kind) = kind(cell.key.column.as_str()) else {
            continue;
        };
        let slot = theirs
            .entry((cell.key.row_key, cell.key.column.to_string()))
            .or_default();
        slot.insert(cell.key.ref_key.get(), cell.body);
        if kind == ColumnKind::Row {
            // Only the latest version of a row column is the row.
            let latest = *slot.keys().next_back().unwrap();
            slot.retain(|r, _| *r == latest);
        }
    }
    let mut ours: View = BTreeMap::new();
    for cell in &chunk.cells {
        assert_eq!(
            copies.get(&cell.key),
            Some(&1),
            "{} must be stored exactly once",
            cell.key
        );
        ours.entry((cell.key.row_key, cell.key.column.to_string()))
            .or_default()
            .insert(cell.key.ref_key.get(), cell.body.clone());
    }
    let keys: BTreeSet<_> = ours.keys().chain(theirs.keys()).cloned().collect();
    let mut differ = Vec::new();
    for key in keys {
        if ours.get(&key) != theirs.get(&key) {
            differ.push(format!(
                "{} {}: legacy {:?} schemaless {:?}",
                key.0,
                key.1,
                ours.get(&key).map(|m| m.keys().collect::<Vec<_>>()),
                theirs.get(&key).map(|m| m.keys().collect::<Vec<_>>())
            ));
        }
    }
    assert!(
        differ.is_empty(),
        "{} (row, column)s differ, e.g. {:?}",
        differ.len(),
        &differ[..differ.len().min(5)]
    );
    chunk.cells.len()
}

async fn relay_drain(
    config: &config::Config,
    legacy: &LegacyStore,
    schemaless: &MySqlStore,
) -> mirror::relay::Moved {
    mirror::Relay::new(legacy, Arc::new(schemaless.clone()), config)
        .unwrap()
        .drain()
        .await
        .unwrap()
}

async fn capture_queue(pool: &sqlx::PgPool) -> mirror::capture::Queue {
    mirror::capture::status::queue(pool).await.unwrap()
}

/// Waits, up to 20 s, until `done` holds; then fails naming `what`.
async fn wait_for<F: std::future::Future<Output = bool>>(what: &str, mut done: impl FnMut() -> F) {
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    while !done().await {
        assert!(
            std::time::Instant::now() < deadline,
            "timed out waiting for {what}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// The transactions a psql writer runs: updates with a new version, child
/// rows inserted, moved to a new ref key and deleted on every child table,
/// whole trips deleted, new trips inserted, and an update that changes no
/// mapped field. Trip ids `mine` are this writer's alone, so writers never
/// wait on each other; child ref keys come from a sequence, never reused.
fn writer_script(mine: &[i64], transactions: usize, seed: u64) -> String {
    let mut rng = SmallRng::seed_from_u64(seed);
    let mut alive: Vec<i64> = mine.to_vec();
    let mut sql = String::new();
    for i in 0..transactions {
        if alive.is_empty() {
            break;
        }
        let id = alive[rng.random_range(0..alive.len())];
        let child = ["trip_notes", "billing_attempts", "fare_adjustments"][rng.random_range(0..3)];
        let step = rng.random_range(0..100);
        sql.push_str(&match step {
            0..=29 => format!(
                "UPDATE trips SET status = 'status {i}', fare = coalesce(fare, 0) + 1.25, version = version + 1 WHERE id = {id};\n"
            ),
            30..=44 => format!(
                "INSERT INTO trip_notes (trip_id, seq, author, body, created_at)
                 VALUES ({id}, nextval('child_seq'), 'psql', E'note {i}: ünïcödé\\ttab', now());\n"
            ),
            45..=54 => format!(
                "INSERT INTO billing_attempts (trip_id, seq, amount, currency, succeeded, processor_response, attempted_at)
                 VALUES ({id}, nextval('child_seq'), 12.50, 'EUR', {}, '{{\"code\": {i}, \"ok\": true}}', now());\n",
                i % 2 == 0
            ),
            55..=64 => format!(
                "UPDATE {child} SET seq = nextval('child_seq')
                 WHERE (trip_id, seq) = (SELECT trip_id, seq FROM {child} WHERE trip_id = {id} ORDER BY seq LIMIT 1);\n"
            ),
            65..=79 => format!(
                "DELETE FROM {child}
                 WHERE (trip_id, seq) = (SELECT trip_id, seq FROM {child} WHERE trip_id = {id} ORDER BY seq DESC LIMIT 1);\n"
            ),
            80..=84 => {
                alive.retain(|a| *a != id);
                format!(
                    "BEGIN;
                     DELETE FROM trip_notes WHERE trip_id = {id};
                     DELETE FROM billing_attempts WHERE trip_id = {id};
                     DELETE FROM fare_adjustments WHERE trip_id = {id};
                     DELETE FROM trips WHERE id = {id};
                     COMMIT;\n"
                )
            }
            85..=94 => format!(
                "WITH t AS (INSERT INTO trips (driver_uuid, rider_uuid, city_id, status, fare, currency, distance_km, requested_at)
                     VALUES (gen_random_uuid(), gen_random_uuid(), {}, 'requested', 9.50, 'EUR', 3.25, now()) RETURNING id)
                 INSERT INTO fare_adjustments (trip_id, seq, amount, reason, codes, created_at)
                 SELECT id, nextval('child_seq'), -1.00, 'psql', ARRAY['a', NULL, 'c'], now() FROM t;\n",
                rng.random_range(1..50)
            ),
            _ => format!("UPDATE trips SET city_id = city_id WHERE id = {id};\n"),
        });
        // Paced, so that the writers are still writing while the backfill
        // and the relay run.
        sql.push_str("SELECT pg_sleep(0.004);\n");
    }
    sql
}

/// The headline: plain SQL writers in other processes change every layout
/// table (insert, update, delete) while the facade writes in `mirror`, the
/// backfill copies the history and the relay runs as a process that is
/// killed with -9 and restarted. Afterwards the full diff finds nothing,
/// every legacy cell is in Schemaless exactly once, deleted rows read as
/// absent through the facade, and no facade write was captured (the
/// outbox carried it: delivered once).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn plain_sql_writers_reach_schemaless_through_a_killed_relay_and_a_backfill() {
    plain_sql_writers(config::CaptureMethod::Triggers).await;
}

/// The same with `capture.method = "logical"`: the changes come from a
/// logical replication slot, and the relay is killed between reading and
/// advancing it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn plain_sql_writers_reach_schemaless_by_logical_decoding_too() {
    plain_sql_writers(config::CaptureMethod::Logical).await;
}

/// Changes captured and not delivered yet: queued, or held by the slot.
async fn backlog(
    db: &LegacyDb,
    layout: &legacy::Layout,
    logical: bool,
) -> Vec<(Option<i64>, Option<Uuid>)> {
    if logical {
        mirror::capture::slot::pending(&db.pool, layout, 1_000_000)
            .await
            .unwrap()
            .into_iter()
            .map(|c| (c.parent_id, c.row_key))
            .collect()
    } else {
        sqlx::query_as("SELECT parent_id, row_key FROM mezzanine.capture_queue")
            .fetch_all(&db.pool)
            .await
            .unwrap()
    }
}

async fn plain_sql_writers(method: config::CaptureMethod) {
    let logical = method == config::CaptureMethod::Logical;
    let db = LegacyDb::trips().await;
    legacy::trips::seed(&db.pool, "public", "uuid", 1500, 31, |_| {})
        .await
        .unwrap();
    sqlx::raw_sql("CREATE SEQUENCE child_seq START 1000000")
        .execute(&db.pool)
        .await
        .unwrap();
    db.apply_schemaless().await;
    let (config, text) = captured(
        &db,
        &format!("method = \"{}\"", method.as_str()),
        "[mirror]\nrelay_in_app = false\nreverse_in_app = false\nrelay_batch = 50\n",
    );
    let file = config_file(&text);
    let facade = Arc::new(TripStore::connect(&config).await.unwrap());

    // Without capture the gate of mirror holds: plain SQL writes would be
    // lost.
    let refused = step_refused(&facade, Mode::Mirror).await;
    assert!(refused.contains("capture install"), "{refused}");
    let out = run_ok(mezzanine(file.path(), &["capture", "install"]));
    assert!(
        out.contains("public.trips") && out.contains("public.trip_notes"),
        "{out}"
    );
    walk_to(&facade, &config, Mode::Mirror).await;

    // Phase one, no relay running: psql writers and facade writers.
    let seeded: Vec<i64> = sqlx::query_scalar("SELECT id FROM trips ORDER BY id")
        .fetch_all(&db.pool)
        .await
        .unwrap();
    let layout = facade.legacy().layout().clone();
    let writers = 3;
    let scripts: Vec<tempfile::NamedTempFile> = (0..writers)
        .map(|w| {
            let mine: Vec<i64> = seeded
                .iter()
                .copied()
                .filter(|id| id % writers as i64 == w as i64)
                .collect();
            let file = tempfile::NamedTempFile::new().unwrap();
            std::fs::write(file.path(), writer_script(&mine, 600, 100 + w as u64)).unwrap();
            file
        })
        .collect();
    let facade_rows = Arc::new(std::sync::Mutex::new(Vec::<Uuid>::new()));
    let stop = Arc::new(AtomicBool::new(false));
    let facade_writes = Arc::new(AtomicU64::new(0));
    let facade_writers: Vec<_> = (0..3u64)
        .map(|w| {
            let (facade, rows, stop, writes) = (
                facade.clone(),
                facade_rows.clone(),
                stop.clone(),
                facade_writes.clone(),
            );
            tokio::spawn(async move {
                let mut source = TripCells::new(900 + w);
                while !stop.load(Ordering::Relaxed) {
                    let trip = source.new_trip();
                    rows.lock().unwrap().push(trip[0].key.row_key.uuid());
                    let done = source.complete(&trip[0]);
                    facade.put_cells(trip).await.unwrap();
                    facade.put_cell(done).await.unwrap();
                    writes.fetch_add(2, Ordering::Relaxed);
                }
            })
        })
        .collect();
    let mut psqls: Vec<Child> = scripts.iter().map(|s| psql_script(&db, s.path())).collect();
    // Both kinds of writer are under way, with a backlog for the relay to
    // be killed in.
    wait_for("facade writes and a captured backlog", || async {
        facade_writes.load(Ordering::Relaxed) >= 100
            && backlog(&db, &layout, logical).await.len() >= 300
    })
    .await;

    // Each write went one way: the facade's through the outbox only, the
    // plain SQL ones through capture only.
    let facade_uuids: Vec<Uuid> = facade_rows.lock().unwrap().clone();
    assert!(!facade_uuids.is_empty());
    let facade_ids: Vec<i64> = sqlx::query_scalar("SELECT id FROM trips WHERE uuid = ANY($1)")
        .bind(&facade_uuids)
        .fetch_all(&db.pool)
        .await
        .unwrap();
    let captured_facade: Vec<_> = backlog(&db, &layout, logical)
        .await
        .into_iter()
        .filter(|(parent, row)| {
            parent.is_some_and(|p| facade_ids.contains(&p))
                || row.is_some_and(|r| facade_uuids.contains(&r))
        })
        .collect();
    assert!(
        captured_facade.is_empty(),
        "facade writes were captured too: {captured_facade:?}"
    );
    // The outbox first, then the facade's rows: every entry's trip was
    // written through the facade before the list was taken.
    let in_outbox: Vec<Uuid> = sqlx::query_scalar("SELECT DISTINCT row_key FROM mezzanine.outbox")
        .fetch_all(&db.pool)
        .await
        .unwrap();
    let facade_uuids: BTreeSet<Uuid> = facade_rows.lock().unwrap().iter().copied().collect();
    let foreign: Vec<&Uuid> = in_outbox
        .iter()
        .filter(|u| !facade_uuids.contains(u))
        .collect();
    assert!(
        foreign.is_empty(),
        "plain SQL writes in the outbox: {foreign:?}"
    );
    // Phase two: the relay as a process, killed with -9 while it drains
    // the backlog; the backfill in this process.
    let before = backlog(&db, &layout, logical).await.len();
    assert!(before > 0, "psql's writes are captured");
    let mut relay = mezzanine(file.path(), &["mirror", "relay"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    // Reading the slot's backlog takes the relay's lock: look seldom.
    let poll = Duration::from_millis(if logical { 50 } else { 5 });
    while backlog(&db, &layout, logical).await.len() + 60 > before {
        assert!(
            std::time::Instant::now() < deadline,
            "the relay does not drain"
        );
        tokio::time::sleep(poll).await;
    }
    relay.kill().unwrap(); // SIGKILL, in the middle of the backlog
    relay.wait().unwrap();
    let at_kill = backlog(&db, &layout, logical).await.len();
    assert!(
        at_kill > 0,
        "killed before the backlog of {before} was drained"
    );
    let mut relay = mezzanine(file.path(), &["mirror", "relay"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let backfill = {
        let (legacy, schemaless, config) = (
            facade.legacy().clone(),
            facade.schemaless().clone(),
            config.clone(),
        );
        tokio::spawn(async move {
            crate::backfill::backfill_now(&legacy, &schemaless, &config).await;
        })
    };
    for psql in &mut psqls {
        let status = psql.wait().unwrap();
        let mut err = String::new();
        std::io::Read::read_to_string(psql.stderr.as_mut().unwrap(), &mut err).unwrap();
        assert!(
            status.success() && err.is_empty(),
            "a psql writer failed: {err}"
        );
    }
    stop.store(true, Ordering::Relaxed);
    for w in facade_writers {
        w.await.unwrap();
    }
    backfill.await.unwrap();
    relay.kill().unwrap();
    relay.wait().unwrap();
    let out = run_ok(mezzanine(file.path(), &["mirror", "relay", "--once"]));
    assert!(out.contains("captured changes"), "{out}");
    let queue = capture_queue(&db.pool).await;
    assert_eq!((queue.depth, queue.parked), (0, 0), "{queue:?}");
    assert!(backlog(&db, &layout, logical).await.is_empty());
    eprintln!(
        "{}: {before} changes before the relay, {at_kill} at its kill; facade cells: {}",
        method.as_str(),
        facade_writes.load(Ordering::Relaxed)
    );

    // The stores agree, through the tombstones, and the full diff says so.
    let tombstones = Column::new("DELETED").unwrap();
    let cells = assert_visible_equal(facade.legacy(), facade.schemaless(), &tombstones).await;
    assert!(cells > 3000, "{cells}");
    let deleted: i64 = db
        .count("SELECT 1500 - count(*) FROM trips WHERE id <= 1500")
        .await;
    assert!(deleted > 0, "some trips were deleted");
    let out = run_ok(mezzanine(
        file.path(),
        &["verify", "full", "--plain", "--restart", "--strict"],
    ));
    assert!(
        out.contains(" Schemaless row keys swept, 0 mismatches"),
        "{out}"
    );
    assert!(out.contains(" strict, "), "{out}");

    // Trips and notes Schemaless holds, deleted with plain SQL, then
    // forward to shadow: reads come from Schemaless, through the
    // tombstones, and answer as PostgreSQL does.
    let doomed: Vec<(i64, Uuid)> =
        sqlx::query_as("SELECT id, uuid FROM trips WHERE id <= 1500 ORDER BY id LIMIT 4")
            .fetch_all(&db.pool)
            .await
            .unwrap();
    let noted: Vec<(i64, Uuid)> = sqlx::query_as(
        "SELECT t.id, t.uuid FROM trips t WHERE t.id > 100 AND t.id <= 1500
           AND (SELECT count(*) FROM trip_notes n WHERE n.trip_id = t.id) >= 2 ORDER BY t.id LIMIT 4",
    )
    .fetch_all(&db.pool)
    .await
    .unwrap();
    assert_eq!(noted.len(), 4);
    let mut sql = String::new();
    for (id, _) in &doomed {
        sql.push_str(&format!(
            "BEGIN; DELETE FROM trip_notes WHERE trip_id = {id}; DELETE FROM billing_attempts WHERE trip_id = {id};
             DELETE FROM fare_adjustments WHERE trip_id = {id}; DELETE FROM trips WHERE id = {id}; COMMIT;\n"
        ));
    }
    for (id, _) in &noted {
        sql.push_str(&format!(
            "DELETE FROM trip_notes WHERE (trip_id, seq) = (SELECT trip_id, max(seq) FROM trip_notes WHERE trip_id = {id} GROUP BY trip_id);\n"
        ));
    }
    run_ok(psql(&db, &sql));
    run_ok(mezzanine(file.path(), &["mirror", "relay", "--once"]));
    walk_to(&facade, &config, Mode::Shadow).await;
    let notes = Column::new("NOTES").unwrap();
    for (id, uuid) in &doomed {
        let row = RowKey::from(*uuid);
        assert!(
            !facade
                .schemaless()
                .get_cells_for_row(&row, ReadFrom::Master)
                .await
                .unwrap()
                .is_empty(),
            "trip {id} is still stored"
        );
        assert!(
            facade
                .get_cells_for_row(&row, ReadFrom::Master)
                .await
                .unwrap()
                .is_empty(),
            "deleted trip {id} reads as absent"
        );
    }
    for (id, uuid) in &noted {
        let row = RowKey::from(*uuid);
        let stored = facade
            .schemaless()
            .get_cell_latest(&row, &notes, ReadFrom::Master)
            .await
            .unwrap()
            .unwrap();
        let read = facade
            .get_cell_latest(&row, &notes, ReadFrom::Master)
            .await
            .unwrap()
            .unwrap();
        assert!(read.cell.key.ref_key < stored.cell.key.ref_key, "trip {id}");
        let legacy = facade
            .legacy()
            .get_cell_latest(&row, &notes, ReadFrom::Master)
            .await
            .unwrap()
            .unwrap();
        assert_eq!(read.cell, legacy.cell, "trip {id}: the newest note left");
        let cells = |stored: Vec<schemaless::StoredCell>| -> Vec<Cell> {
            stored.into_iter().map(|s| s.cell).collect()
        };
        assert_eq!(
            cells(
                facade
                    .get_column_cells(&[row], &notes, ReadFrom::Master)
                    .await
                    .unwrap()
            ),
            cells(
                facade
                    .legacy()
                    .get_column_cells(&[row], &notes, ReadFrom::Master)
                    .await
                    .unwrap()
            ),
            "trip {id}: every note left"
        );
    }
    let legacy_rows: Vec<Uuid> = sqlx::query_scalar("SELECT uuid FROM trips")
        .fetch_all(&db.pool)
        .await
        .unwrap();
    for uuid in legacy_rows.iter().take(60) {
        let row = RowKey::from(*uuid);
        let from_facade: Vec<Cell> = facade
            .get_cells_for_row(&row, ReadFrom::Master)
            .await
            .unwrap()
            .into_iter()
            .map(|s| s.cell)
            .collect();
        let from_legacy: Vec<Cell> = facade
            .legacy()
            .get_cells_for_row(&row, ReadFrom::Master)
            .await
            .unwrap()
            .into_iter()
            .map(|s| s.cell)
            .collect();
        assert_eq!(from_facade, from_legacy, "trip {row}");
    }
    facade.close().await;
    // A slot left behind would hold the shared server's WAL.
    run_ok(mezzanine(file.path(), &["capture", "uninstall"]));
}

/// Why the facade refuses the step to `target`.
async fn step_refused(facade: &TripStore, target: Mode) -> String {
    facade
        .set_mode(&tripstore::ModeRequest {
            target,
            force: false,
            by: "capture test".into(),
            reason: None,
        })
        .await
        .unwrap_err()
        .to_string()
}

/// Relays not run in the app: the test drains them.
const DRAINED_BY_THE_TEST: &str = "[mirror]\nrelay_in_app = false\nreverse_in_app = false\n";

/// Sixty seeded trips, capture installed (relays not in the app: the
/// test drains them), the facade in `mirror` and backfilled.
async fn mirrored_trips() -> (LegacyDb, config::Config, tempfile::NamedTempFile, TripStore) {
    let db = LegacyDb::trips().await;
    legacy::trips::seed(&db.pool, "public", "uuid", 60, 7, |_| {})
        .await
        .unwrap();
    db.apply_schemaless().await;
    let (config, text) = captured(&db, "", DRAINED_BY_THE_TEST);
    let file = config_file(&text);
    run_ok(mezzanine(file.path(), &["capture", "install"]));
    let facade = TripStore::connect(&config).await.unwrap();
    walk_to(&facade, &config, Mode::Mirror).await;
    backfill_in_mirror(&facade, &config).await;
    (db, config, file, facade)
}

/// The version rule. With `bump_version` off, an update that changes a
/// trip and keeps its version, and a child row edited in place, are
/// parked with both bodies: visible in `capture status`, holding the gate
/// of `shadow`, delivered by `capture retry` once fixed. With it on, the
/// trigger raises the version and the new one is mirrored.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_update_without_a_new_version_is_parked_or_bumped() {
    let (db, config, file, facade) = mirrored_trips().await;
    let (legacy, schemaless) = (facade.legacy(), facade.schemaless());

    // Off: a second body at one version is parked, never overwritten.
    let note: (i64, i64, String) =
        sqlx::query_as("SELECT trip_id, seq, body FROM trip_notes ORDER BY trip_id, seq LIMIT 1")
            .fetch_one(&db.pool)
            .await
            .unwrap();
    run_ok(psql(
        &db,
        &format!(
            "UPDATE trips SET status = 'disputed' WHERE id = 42;
             UPDATE trip_notes SET body = 'edited in place' WHERE trip_id = {} AND seq = {};",
            note.0, note.1
        ),
    ));
    let moved = relay_drain(&config, legacy, schemaless).await;
    assert_eq!(moved.captured.parked, 2, "{moved:?}");
    let out = run_ok(mezzanine(file.path(), &["capture", "status", "--json"]));
    let status: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(status["queue"]["parked"], 2, "{status}");
    assert_eq!(
        status["queue"]["parked_by_kind"]["no_new_version"], 1,
        "{status}"
    );
    assert_eq!(
        status["queue"]["parked_by_kind"]["edited_in_place"], 1,
        "{status}"
    );
    let parked = status["recent_parked"].as_array().unwrap();
    let base = parked
        .iter()
        .find(|p| p["kind"] == "no_new_version")
        .unwrap();
    assert!(
        base["legacy_body"].as_str().unwrap().contains("disputed"),
        "{base}"
    );
    assert!(
        !base["schemaless_body"]
            .as_str()
            .unwrap()
            .contains("disputed"),
        "{base}"
    );
    let out = run_ok(mezzanine(file.path(), &["capture", "status"]));
    assert!(
        out.contains("no_new_version: 1") && out.contains("edited in place"),
        "{out}"
    );
    // Schemaless still has the first body; the gate of shadow holds.
    let trip: Uuid = sqlx::query_scalar("SELECT uuid FROM trips WHERE id = 42")
        .fetch_one(&db.pool)
        .await
        .unwrap();
    let stored = schemaless
        .get_cell_latest(
            &RowKey::from(trip),
            &Column::new("BASE").unwrap(),
            ReadFrom::Master,
        )
        .await
        .unwrap()
        .unwrap();
    assert_ne!(stored.cell.body.fields()["status"], "disputed");
    let refused = step_refused(&facade, Mode::Shadow).await;
    assert!(
        refused.contains("parked") && refused.contains("no_new_version"),
        "{refused}"
    );
    // ... and so do /metrics and the dashboard.
    let (metrics, dom) = dashboard(&file).await;
    for expected in [
        "mezzanine_capture_parked{kind=\"no_new_version\"} 1",
        "mezzanine_capture_parked{kind=\"edited_in_place\"} 1",
        "mezzanine_capture_tables{state=\"installed\"} 4",
        "mezzanine_capture_queue_depth 0",
    ] {
        assert!(metrics.contains(expected), "{expected} not in {metrics}");
    }
    for expected in [
        "4 of 4 tables captured",
        "2 parked (edited_in_place: 1, no_new_version: 1)",
        "class=\"parked\"",
        "disputed",
        "gate: parked captured changes",
    ] {
        assert!(
            dom.contains(expected),
            "{expected:?} not on the page: {dom}"
        );
    }

    // Fixed in PostgreSQL (a new version; the note as it was), retried:
    // delivered, nothing parked.
    run_ok(psql(
        &db,
        &format!(
            "UPDATE trips SET version = version + 1 WHERE id = 42;
             UPDATE trip_notes SET body = '{}' WHERE trip_id = {} AND seq = {};",
            note.2.replace('\'', "''"),
            note.0,
            note.1
        ),
    ));
    let out = run_ok(mezzanine(file.path(), &["capture", "retry"]));
    assert!(out.starts_with("2 parked changes"), "{out}");
    relay_drain(&config, legacy, schemaless).await;
    assert_eq!(capture_queue(&db.pool).await.parked, 0);
    let stored = schemaless
        .get_cell_latest(
            &RowKey::from(trip),
            &Column::new("BASE").unwrap(),
            ReadFrom::Master,
        )
        .await
        .unwrap()
        .unwrap();
    assert_eq!(stored.cell.body.fields()["status"], "disputed");
    let version: i64 = db.count("SELECT version FROM trips WHERE id = 42").await;
    assert_eq!(stored.cell.key.ref_key.get(), version);

    // A change waiting longer than gates.max_outbox_lag_ms holds the gate
    // too: the relay does not keep up.
    run_ok(psql(
        &db,
        "UPDATE trips SET status = 'late', version = version + 1 WHERE id = 50;",
    ));
    wait_for("the change to wait past the lag limit", || async {
        capture_queue(&db.pool)
            .await
            .oldest_secs
            .is_some_and(|age| age > 0.25)
    })
    .await;
    let (lagging, _) = captured(&db, "", DRAINED_BY_THE_TEST);
    let mut lagging = lagging;
    lagging.gates.max_outbox_lag_ms = 200;
    let gate = tripstore::gates::MigrationGate::new(db.pool.clone(), schemaless.clone(), &lagging)
        .with_legacy(legacy.clone());
    let refusal = tripstore::mode::Gate::refusal(&gate, Mode::Mirror, Mode::Shadow)
        .await
        .unwrap()
        .expect("the gate holds");
    assert!(
        refusal.contains("capture queue still holds 1 changes"),
        "{refusal}"
    );
    relay_drain(&config, legacy, schemaless).await;
    assert_eq!(
        tripstore::mode::Gate::refusal(&gate, Mode::Mirror, Mode::Shadow)
            .await
            .unwrap(),
        None
    );

    // On: the trigger raises the version of an update that keeps it, and
    // leaves alone one that raises it itself.
    let (config, text) = captured(&db, "bump_version = true", DRAINED_BY_THE_TEST);
    let file = config_file(&text);
    let out = run_ok(mezzanine(file.path(), &["capture", "install"]));
    assert!(out.contains("version bump"), "{out}");
    let before: Vec<i64> =
        sqlx::query_scalar("SELECT version FROM trips WHERE id IN (43, 44, 45) ORDER BY id")
            .fetch_all(&db.pool)
            .await
            .unwrap();
    run_ok(psql(
        &db,
        "UPDATE trips SET status = 'bumped' WHERE id = 43;
         UPDATE trips SET status = 'raised', version = version + 5 WHERE id = 44;
         UPDATE trips SET currency = currency WHERE id = 45;",
    ));
    let versions: Vec<i64> =
        sqlx::query_scalar("SELECT version FROM trips WHERE id IN (43, 44, 45) ORDER BY id")
            .fetch_all(&db.pool)
            .await
            .unwrap();
    assert_eq!(versions, [before[0] + 1, before[1] + 5, before[2]]);
    let moved = relay_drain(&config, legacy, schemaless).await;
    assert_eq!(
        (moved.captured.parked, moved.captured.cells),
        (0, 2),
        "{moved:?}"
    );
    assert_visible_equal(legacy, schemaless, &Column::new("DELETED").unwrap()).await;
    let out = run_ok(mezzanine(file.path(), &["capture", "status"]));
    assert!(
        out.contains("bump_version on") && !out.contains("missing"),
        "{out}"
    );
    facade.close().await;
}

/// Install and uninstall take their locks while writers hold theirs: with
/// a short, retried lock timeout no write fails, every trip inserted after
/// install is captured, and what was captured before uninstall is still
/// delivered.
/// Rows deleted with plain SQL, their tombstones delivered, then inserted
/// again exactly as they were (a restore from a backup, an undone
/// delete): the same row keys, versions and bodies Schemaless stored
/// before the deletion. Delivered, they would come back `AlreadyPresent`
/// and stay hidden for good while PostgreSQL has them; they are parked
/// with the reason, and the cutover holds.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rows_inserted_again_unchanged_after_their_delete_are_parked_not_hidden() {
    let (db, config, _file, facade) = mirrored_trips().await;
    let (legacy, schemaless) = (facade.legacy(), facade.schemaless());

    // Trip 42 with all its children, and one note of another trip.
    let (trip, other): (Uuid, i64) = sqlx::query_as(
        "SELECT (SELECT uuid FROM trips WHERE id = 42), \
                (SELECT min(trip_id) FROM trip_notes WHERE trip_id <> 42)",
    )
    .fetch_one(&db.pool)
    .await
    .unwrap();
    run_ok(psql(
        &db,
        &format!(
            "CREATE TABLE saved_trip AS SELECT * FROM trips WHERE id = 42;
             CREATE TABLE saved_notes AS SELECT * FROM trip_notes WHERE trip_id IN (42, {other});
             CREATE TABLE saved_billing AS SELECT * FROM billing_attempts WHERE trip_id = 42;
             CREATE TABLE saved_adjustments AS SELECT * FROM fare_adjustments WHERE trip_id = 42;
             DELETE FROM trip_notes WHERE trip_id IN (42, {other});
             DELETE FROM billing_attempts WHERE trip_id = 42;
             DELETE FROM fare_adjustments WHERE trip_id = 42;
             DELETE FROM trips WHERE id = 42;"
        ),
    ));
    let moved = relay_drain(&config, legacy, schemaless).await;
    assert!(moved.captured.tombstones >= 2, "{moved:?}");
    assert_eq!(moved.captured.parked, 0, "{moved:?}");

    run_ok(psql(
        &db,
        "INSERT INTO trips OVERRIDING SYSTEM VALUE SELECT * FROM saved_trip;
         INSERT INTO trip_notes SELECT * FROM saved_notes;
         INSERT INTO billing_attempts SELECT * FROM saved_billing;
         INSERT INTO fare_adjustments SELECT * FROM saved_adjustments;",
    ));
    let moved = relay_drain(&config, legacy, schemaless).await;
    assert!(moved.captured.parked >= 2, "{moved:?}");
    assert_eq!(moved.captured.already_present, 0, "{moved:?}");
    let reasons: Vec<(String, String)> =
        sqlx::query_as("SELECT kind, reason FROM mezzanine.capture_parked ORDER BY reason")
            .fetch_all(&db.pool)
            .await
            .unwrap();
    assert!(
        reasons.iter().all(|(kind, _)| kind == "refused"),
        "{reasons:?}"
    );
    assert!(
        reasons
            .iter()
            .any(|(_, r)| r.contains(&trip.to_string()) && r.contains("retires the key")),
        "{reasons:?}"
    );
    assert!(
        reasons
            .iter()
            .any(|(_, r)| r.contains("NOTES") && r.contains("not reused")),
        "{reasons:?}"
    );
    // Still deleted in Schemaless, and the step to shadow holds on it.
    hidden_and_holding_shadow(&facade, &config, RowKey::from(trip)).await;
    facade.close().await;
}

/// `row`'s trip reads as deleted through Schemaless's tombstones, and
/// the step to `shadow` is refused on what is parked.
async fn hidden_and_holding_shadow(facade: &TripStore, config: &config::Config, row: RowKey) {
    let visible = Tombstoned::new(facade.schemaless().clone(), config).unwrap();
    let base = Column::new("BASE").unwrap();
    assert_eq!(
        visible
            .get_cell_latest(&row, &base, ReadFrom::Master)
            .await
            .unwrap(),
        None
    );
    let refused = step_refused(facade, Mode::Shadow).await;
    assert!(refused.contains("parked"), "{refused}");
}

/// A trip deleted by plain SQL, its tombstone delivered by capture, then
/// written again through the facade exactly as it was: Schemaless would
/// take the cell as already there and keep hiding it while PostgreSQL
/// holds the row. The deletion's place in the outbox order says the
/// write came after it: the entry is parked.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_facade_write_of_a_row_deleted_by_plain_sql_is_parked_not_hidden() {
    let (db, config, _file, facade) = mirrored_trips().await;
    let (legacy, schemaless) = (facade.legacy(), facade.schemaless());
    let trip: Uuid = sqlx::query_scalar("SELECT uuid FROM trips WHERE id = 43")
        .fetch_one(&db.pool)
        .await
        .unwrap();
    let row = RowKey::from(trip);
    let base = Column::new("BASE").unwrap();
    let before = schemaless
        .get_cell_latest(&row, &base, ReadFrom::Master)
        .await
        .unwrap()
        .expect("the backfill copied the trip")
        .cell;
    run_ok(psql(
        &db,
        "DELETE FROM trip_notes WHERE trip_id = 43;
         DELETE FROM billing_attempts WHERE trip_id = 43;
         DELETE FROM fare_adjustments WHERE trip_id = 43;
         DELETE FROM trips WHERE id = 43;",
    ));
    let moved = relay_drain(&config, legacy, schemaless).await;
    assert!(moved.captured.tombstones >= 1, "{moved:?}");
    assert_eq!(moved.captured.parked, 0, "{moved:?}");

    assert_eq!(
        facade.put_cell(before.clone()).await.unwrap(),
        schemaless::WriteOutcome::Written
    );
    let moved = relay_drain(&config, legacy, schemaless).await;
    assert_eq!((moved.delivered, moved.parked), (0, 1), "{moved:?}");
    let reason: String = sqlx::query_scalar("SELECT error FROM mezzanine.outbox_parked")
        .fetch_one(&db.pool)
        .await
        .unwrap();
    assert!(
        reason.contains(&trip.to_string()) && reason.contains("after its deletion"),
        "{reason}"
    );
    hidden_and_holding_shadow(&facade, &config, row).await;
    facade.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn install_and_uninstall_under_live_writers_fail_no_write_and_miss_none() {
    let db = LegacyDb::trips().await;
    legacy::trips::seed(&db.pool, "public", "uuid", 20, 3, |_| {})
        .await
        .unwrap();
    db.apply_schemaless().await;
    let (config, _) = captured(&db, "lock_timeout_ms = 20", "");
    let legacy = db.store().await;
    let schemaless = MySqlStore::connect(&config).unwrap();
    mirror::schema::ensure(&db.pool).await.unwrap();

    let stop = Arc::new(AtomicBool::new(false));
    let failed = Arc::new(AtomicU64::new(0));
    let written = Arc::new(AtomicU64::new(0));
    let writers: Vec<_> = (0..4)
        .map(|_| {
            let (pool, stop, failed, written) =
                (db.pool.clone(), stop.clone(), failed.clone(), written.clone());
            tokio::spawn(async move {
                while !stop.load(Ordering::Relaxed) {
                    // Each transaction holds its table lock a little while.
                    let result = sqlx::raw_sql(
                        "BEGIN;
                         INSERT INTO trips (driver_uuid, rider_uuid, city_id, status, currency, requested_at)
                         VALUES (gen_random_uuid(), gen_random_uuid(), 3, 'requested', 'EUR', now());
                         SELECT pg_sleep(0.01);
                         COMMIT;",
                    )
                    .execute(&pool)
                    .await;
                    match result {
                        Ok(_) => written.fetch_add(1, Ordering::Relaxed),
                        Err(e) => {
                            eprintln!("a write failed: {e}");
                            failed.fetch_add(1, Ordering::Relaxed)
                        }
                    };
                }
            })
        })
        .collect();
    let wrote = |n: u64| {
        let written = written.clone();
        async move {
            let from = written.load(Ordering::Relaxed);
            wait_for("the writers to write", || async {
                written.load(Ordering::Relaxed) >= from + n
            })
            .await;
        }
    };
    wrote(20).await;
    let installed = mirror::capture::install::install(&db.pool, legacy.layout(), &config.capture)
        .await
        .unwrap();
    assert_eq!(installed.tables.len(), 4);
    let after_install: i64 = db.count("SELECT max(id) FROM trips").await;
    wrote(40).await;
    let before_uninstall: i64 = db.count("SELECT max(id) FROM trips").await;
    let removed = mirror::capture::install::uninstall(&db.pool, Duration::from_millis(20))
        .await
        .unwrap();
    assert_eq!((removed.triggers, removed.functions), (8, 8));
    let after_uninstall: i64 = db.count("SELECT max(id) FROM trips").await;
    wrote(20).await;
    stop.store(true, Ordering::Relaxed);
    for w in writers {
        w.await.unwrap();
    }
    assert_eq!(failed.load(Ordering::Relaxed), 0, "no write may fail");
    assert!(before_uninstall > after_install, "writers kept writing");

    // Nothing captured is lost when capture goes away: the queue drains.
    let moved = relay_drain(&config, &legacy, &schemaless).await;
    assert_eq!(capture_queue(&db.pool).await.depth, 0);
    let base = Column::new("BASE").unwrap();
    let captured_ids: Vec<(i64, Uuid)> =
        sqlx::query_as("SELECT id, uuid FROM trips WHERE id > $1 ORDER BY id")
            .bind(after_install)
            .fetch_all(&db.pool)
            .await
            .unwrap();
    let mut delivered = 0;
    for (id, uuid) in &captured_ids {
        let found = schemaless
            .get_cell_latest(&RowKey::from(*uuid), &base, ReadFrom::Master)
            .await
            .unwrap();
        if *id <= before_uninstall {
            assert!(
                found.is_some(),
                "trip {id}, inserted after install, was missed"
            );
            delivered += 1;
        } else if *id > after_uninstall {
            assert!(
                found.is_none(),
                "trip {id}, inserted after uninstall, was captured"
            );
        }
    }
    assert!(delivered > 10, "{delivered} trips captured, {moved:?}");
    let status = mirror::capture::status::read(&db.pool, Some(legacy.layout()), &config.capture)
        .await
        .unwrap();
    assert!(
        status.tables.iter().all(|t| t.state == "missing"),
        "{status:?}"
    );
    // Uninstall again changes nothing.
    let again = mirror::capture::install::uninstall(&db.pool, Duration::from_millis(20))
        .await
        .unwrap();
    assert_eq!(again.triggers, 0);
    schemaless.close().await;
}

/// A second layout with other names, none of them trips': tables and
/// columns that need quoting (upper case, a reserved word), a child table
/// with a surrogate primary key and a unique (parent, ref key), an
/// `integer` ref key, `ON DELETE CASCADE`, and tombstones in a column of
/// its own choosing. A `numeric` ref key is refused by name.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_layout_of_other_names_is_captured_by_the_same_rules() {
    second_layout(config::CaptureMethod::Triggers).await;
}

/// The same by logical decoding: the tables' replica identities are set
/// to their key indexes (and restored by uninstall), and a transaction
/// that says its writes reach Schemaless another way is skipped.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_layout_is_captured_by_logical_decoding_too() {
    second_layout(config::CaptureMethod::Logical).await;
}

/// A legacy write whose transaction marks itself as carried elsewhere
/// (as the reverse mirror's do).
struct CarriedElsewhere;

#[async_trait::async_trait]
impl legacy::TransactionHook for CarriedElsewhere {
    fn skip_capture(&self) -> bool {
        true
    }

    async fn before_commit(
        &self,
        _: &mut sqlx::PgConnection,
        _: &[Cell],
        _: &[schemaless::CellResult],
    ) -> schemaless::Result<()> {
        Ok(())
    }
}

async fn second_layout(method: config::CaptureMethod) {
    let logical = method == config::CaptureMethod::Logical;
    let setup = r#"
CREATE SCHEMA "Ops";
CREATE TABLE "Ops"."Shipment" (
    "ShipmentId" bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    "Key" uuid NOT NULL UNIQUE DEFAULT gen_random_uuid(),
    "Rev" integer NOT NULL DEFAULT 1,
    state text NOT NULL,
    weight numeric(8,3),
    touched_at timestamptz
);
CREATE TABLE "Ops"."order" (
    event_id bigserial PRIMARY KEY,
    shipment bigint NOT NULL REFERENCES "Ops"."Shipment" ON DELETE CASCADE,
    n integer NOT NULL,
    kind text NOT NULL,
    at timestamp,
    UNIQUE (shipment, n)
);
"#;
    let layout = r#"
[layout]
schema = "Ops"
table = "Shipment"
id = "ShipmentId"
uuid = "Key"

[[layout.column]]
name = "HEAD"
kind = "row"
ref_key = "Rev"
fields = { state = "state", weight_kg = "weight" }

[[layout.column]]
name = "EVENTS"
kind = "child"
table = "order"
parent = "shipment"
ref_key = "n"
fields = ["kind", "at"]
"#;
    let db = LegacyDb::new(setup, layout).await;
    db.apply_schemaless().await;
    let (config, text) = captured(
        &db,
        &format!(
            "tombstone_column = \"GONE\"\nmethod = \"{}\"",
            method.as_str()
        ),
        "",
    );
    let file = config_file(&text);
    let identities = || async {
        sqlx::query_scalar::<_, String>(
            r#"SELECT relreplident::text FROM pg_class WHERE oid IN ('"Ops"."Shipment"'::regclass, '"Ops"."order"'::regclass) ORDER BY relname"#,
        )
        .fetch_all(&db.pool)
        .await
        .unwrap()
    };
    assert_eq!(identities().await, ["d", "d"]);
    let out = run_ok(mezzanine(file.path(), &["capture", "install"]));
    assert!(
        out.contains("Ops.Shipment") && out.contains("Ops.order"),
        "{out}"
    );
    // Logical decoding needs the row key and the (parent, ref key) of a
    // deleted row: the tables' identities become their unique indexes.
    let expected = if logical { ["i", "i"] } else { ["d", "d"] };
    assert_eq!(identities().await, expected);
    let legacy = db.store().await;
    let schemaless = MySqlStore::connect(&config).unwrap();

    run_ok(psql(
        &db,
        r#"
INSERT INTO "Ops"."Shipment" (state, weight) SELECT 'new', g * 1.5 FROM generate_series(1, 30) g;
INSERT INTO "Ops"."order" (shipment, n, kind, at)
    SELECT s."ShipmentId", k, 'scan ' || k, '2026-01-02 03:04:05'::timestamp + k * interval '1 hour'
    FROM "Ops"."Shipment" s, generate_series(1, 3) k;
UPDATE "Ops"."Shipment" SET state = 'moving', "Rev" = "Rev" + 1 WHERE "ShipmentId" % 3 = 0;
UPDATE "Ops"."Shipment" SET touched_at = now();
UPDATE "Ops"."order" SET n = n + 10 WHERE n = 1 AND shipment % 2 = 0;
DELETE FROM "Ops"."order" WHERE n = 3 AND shipment % 5 = 0;
"#,
    ));
    let deleted: Vec<Uuid> =
        sqlx::query_scalar(r#"SELECT "Key" FROM "Ops"."Shipment" WHERE "ShipmentId" IN (7, 8)"#)
            .fetch_all(&db.pool)
            .await
            .unwrap();
    run_ok(psql(
        &db,
        r#"DELETE FROM "Ops"."Shipment" WHERE "ShipmentId" IN (7, 8);"#,
    ));
    // A write whose transaction says it reaches Schemaless another way is
    // not captured.
    let skipped = Cell::new(
        RowKey::from(Uuid::from_u128(7)),
        Column::new("HEAD").unwrap(),
        schemaless::RefKey::new(1).unwrap(),
        Body::from_value(serde_json::json!({"state": "carried", "weight_kg": "1"})).unwrap(),
    );
    legacy
        .put_cells_with(vec![skipped], &CarriedElsewhere)
        .await
        .unwrap();
    // 30 inserted, 90 events, 10 updated, 15 events moved (a write and a
    // delete each), 6 deleted, 2 shipments deleted with their 6 events.
    // The touched_at update changes no mapped field: the triggers record
    // nothing; the slot cannot tell (no old values), its 30 rows come
    // back AlreadyPresent.
    let recorded = 30 + 90 + 10 + 30 + 6 + 2 + 6;
    if logical {
        let pending = mirror::capture::slot::pending(&db.pool, legacy.layout(), 100_000)
            .await
            .unwrap();
        assert_eq!(pending.len(), recorded + 30);
        assert!(pending
            .iter()
            .all(|c| c.row_key != Some(Uuid::from_u128(7))));
    } else {
        let queue = capture_queue(&db.pool).await;
        assert_eq!(queue.depth, recorded as u64, "{queue:?}");
    }
    let moved = relay_drain(&config, &legacy, &schemaless).await;
    assert_eq!(moved.captured.parked, 0, "{moved:?}");
    // 14 moved events (the 15th belonged to shipment 8), 6 deleted ones
    // and 2 shipments: the events cascaded from a deleted shipment need
    // no tombstone of their own, its row tombstone hides them.
    assert_eq!(moved.captured.tombstones, 14 + 6 + 2, "{moved:?}");
    let gone = Column::new("GONE").unwrap();
    // The carried shipment reaches Schemaless another way (here, by
    // hand), not by capture.
    let carried = legacy
        .canonical_cell(&Cell::new(
            RowKey::from(Uuid::from_u128(7)),
            Column::new("HEAD").unwrap(),
            schemaless::RefKey::new(1).unwrap(),
            Body::from_value(serde_json::json!({"state": "carried", "weight_kg": "1"})).unwrap(),
        ))
        .unwrap();
    assert_eq!(
        schemaless.put_cell(carried).await.unwrap(),
        schemaless::WriteOutcome::Written,
        "capture did not deliver it"
    );
    let cells = assert_visible_equal(&legacy, &schemaless, &gone).await;
    assert_eq!(cells, 28 + 28 * 3 - 6 + 1);
    let reads = Tombstoned::new(schemaless.clone(), &config).unwrap();
    for uuid in deleted {
        let row = RowKey::from(uuid);
        assert!(!schemaless
            .get_cells_for_row(&row, ReadFrom::Master)
            .await
            .unwrap()
            .is_empty());
        assert!(reads
            .get_cells_for_row(&row, ReadFrom::Master)
            .await
            .unwrap()
            .is_empty());
    }

    let out = run_ok(mezzanine(file.path(), &["capture", "uninstall"]));
    assert!(out.contains("removed"), "{out}");
    assert_eq!(identities().await, ["d", "d"], "uninstall restores them");

    // A numeric ref key is refused, naming the table and the column.
    let numeric = LegacyDb::new(
        "CREATE TABLE parcels (id bigint PRIMARY KEY, uuid uuid NOT NULL UNIQUE, version numeric NOT NULL, state text);",
        "[layout]\ntable = \"parcels\"\nid = \"id\"\nuuid = \"uuid\"\n\n[[layout.column]]\nname = \"HEAD\"\nkind = \"row\"\nref_key = \"version\"\nfields = [\"state\"]\n",
    )
    .await;
    let file = config_file(&numeric.config_text);
    let out = mezzanine(file.path(), &["capture", "install"])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(
        err.contains("public.parcels.version is numeric") && err.contains("must be an integer"),
        "{err}"
    );
    assert_eq!(
        numeric
            .count("SELECT count(*) FROM pg_trigger WHERE tgname LIKE 'mezzanine%'")
            .await,
        0
    );
    schemaless.close().await;
}

/// Bad input changes nothing: a role that may not put triggers on the
/// tables gets an error naming the table, a layout naming a column the
/// table lacks is refused naming both, and neither leaves a trigger
/// behind. Installed by the tables' owner, capture then records the
/// writes of an app role that has no rights on schema `mezzanine` at all.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn missing_privileges_and_bad_layouts_are_refused_and_change_nothing() {
    let db = LegacyDb::trips().await;
    legacy::trips::seed(&db.pool, "public", "uuid", 10, 5, |_| {})
        .await
        .unwrap();
    let role = format!("{}_app", db.name);
    sqlx::raw_sql(sqlx::AssertSqlSafe(format!(
        "CREATE ROLE {role} LOGIN;
         GRANT USAGE ON SCHEMA public TO {role};
         GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA public TO {role};
         GRANT USAGE ON ALL SEQUENCES IN SCHEMA public TO {role};"
    )))
    .execute(&db.pool)
    .await
    .unwrap();
    let (_, text) = captured(&db, "", "");
    let ours = || async {
        db.count("SELECT count(*) FROM pg_trigger WHERE tgname LIKE 'mezzanine%'")
            .await
    };

    // The app's role may write the tables but not put triggers on them.
    let as_app = config_file(&text.replace("postgres://postgres@", &format!("postgres://{role}@")));
    let out = mezzanine(as_app.path(), &["capture", "install"])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(
        err.contains(&format!(
            "role {role} may not create triggers on public.trips"
        )) && err.contains("nothing was installed"),
        "{err}"
    );
    assert_eq!(ours().await, 0);

    // Logical decoding asks more: the REPLICATION attribute for a slot.
    let as_app_logical = config_file(
        &text
            .replace("postgres://postgres@", &format!("postgres://{role}@"))
            .replace("[capture]\n", "[capture]\nmethod = \"logical\"\n"),
    );
    let out = mezzanine(as_app_logical.path(), &["capture", "install"])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(
        err.contains(&format!("role {role} has no REPLICATION attribute"))
            && err.contains("nothing was installed"),
        "{err}"
    );
    assert_eq!(ours().await, 0);
    assert_eq!(
        db.count("SELECT count(*) FROM pg_publication").await
            + db.count(
                "SELECT count(*) FROM pg_replication_slots WHERE database = current_database()"
            )
            .await,
        0
    );

    // A layout naming a column the table lacks.
    let bad = config_file(&text.replace("ref_key = \"seq\"", "ref_key = \"sequence_no\""));
    let out = mezzanine(bad.path(), &["capture", "install"])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(
        err.contains("public.trip_notes has no column \"sequence_no\""),
        "{err}"
    );
    assert_eq!(ours().await, 0);

    // The owner installs it (twice: idempotent); the app role's writes are
    // captured, though it has no rights on the mezzanine tables (every
    // role may only read mezzanine.row_ids).
    let owner = config_file(&text);
    run_ok(mezzanine(owner.path(), &["capture", "install"]));
    run_ok(mezzanine(owner.path(), &["capture", "install"]));
    assert_eq!(ours().await, 8);
    let url = cluster()
        .postgres_url(&db.name)
        .replace("postgres://postgres@", &format!("postgres://{role}@"));
    let app = sqlx::PgPool::connect(&url).await.unwrap();
    let denied = sqlx::query("SELECT count(*) FROM mezzanine.capture_queue")
        .fetch_one(&app)
        .await
        .unwrap_err();
    assert!(denied.to_string().contains("permission denied"), "{denied}");
    sqlx::raw_sql(
        "UPDATE trips SET status = 'by app', version = version + 1 WHERE id = 3;
         DELETE FROM trip_notes WHERE trip_id = 3;
         INSERT INTO trip_notes (trip_id, seq, author, body, created_at) VALUES (3, 99, 'app', 'hi', now());",
    )
    .execute(&app)
    .await
    .unwrap();
    app.close().await;
    assert!(capture_queue(&db.pool).await.depth >= 2);
    let out = run_ok(mezzanine(owner.path(), &["capture", "uninstall"]));
    assert!(out.contains("8 triggers, 8 functions"), "{out}");
    assert_eq!(ours().await, 0);
    let out = run_ok(mezzanine(owner.path(), &["capture", "uninstall"]));
    assert!(out.contains("nothing to remove"), "{out}");
    sqlx::raw_sql(sqlx::AssertSqlSafe(format!(
        "DROP OWNED BY {role}; DROP ROLE {role};"
    )))
    .execute(&db.pool)
    .await
    .unwrap();
}
