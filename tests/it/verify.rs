//! The verifier against real servers: every read sampled under live writes
//! finds nothing (A/A); divergence planted in either database is found by
//! sampled replay and by the full diff, with its row key and column,
//! repaired and verified clean; the served read never changes, also with
//! the other store down; the dashboard in a real headless browser.

use std::collections::BTreeSet;
use std::io::{BufRead, BufReader, Read, Write};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use devcluster::{DevCluster, Spec};
use legacy::trips::TripCells;
use rand::Rng;
use schemaless::mysql::index::{self, Maintainer};
use schemaless::mysql::sql::push_hex;
use schemaless::{Body, Cell, CellStore, Column, IndexQuery, MySqlStore, ReadFrom, RowKey};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;
use tripstore::{Mode, ModeRequest, TripStore};
use uuid::Uuid;

use crate::harness::{config_file, mezzanine, private_trips, LegacyDb, TEST_GATES};
use crate::mirror::walk_to;

/// Every read sampled, a short triage.
const SAMPLE_ALL: &str = "[verify]\nsample_rate = 1.0\nmax_samples_per_sec = 100000\nqueue = 100000\ntriage_delay_ms = 50\ntriage_wait_ms = 3000\n";

/// The database's config with `gates` instead of the test gates, and every
/// read sampled.
fn verify_config(db: &LegacyDb, gates: &str) -> (config::Config, String) {
    let text = format!(
        "{}\n{SAMPLE_ALL}",
        db.config_text.replace(TEST_GATES, gates)
    );
    let config = config::Config::parse(&text, "verify-test.toml").expect("the test config");
    (config, text)
}

/// `trips` seeded trips, backfilled, a facade in `mirror` with every read
/// sampled (and `verify` lines added to `[verify]`).
pub(crate) async fn mirrored(
    trips: u64,
    seed: u64,
    verify: &str,
) -> (LegacyDb, config::Config, String, TripStore) {
    let db = LegacyDb::trips().await;
    legacy::trips::seed(&db.pool, "public", "uuid", trips, seed, |_| {})
        .await
        .unwrap();
    db.apply_schemaless().await;
    let (_, text) = verify_config(&db, TEST_GATES);
    let text = format!("{text}{verify}\n");
    let config = config::Config::parse(&text, "verify-test.toml").expect("the test config");
    let facade = TripStore::connect(&config).await.unwrap();
    walk_to(&facade, &config, Mode::Mirror).await;
    // The plan must postdate every facade's switch to mirror.
    tokio::time::sleep(Duration::from_millis(300)).await;
    crate::backfill::backfill_now(facade.legacy(), facade.schemaless(), &config).await;
    (db, config, text, facade)
}

fn step(target: Mode) -> ModeRequest {
    ModeRequest {
        target,
        force: false,
        by: "verify test".into(),
        reason: None,
    }
}

fn base() -> Column {
    Column::new("BASE").unwrap()
}

fn notes() -> Column {
    Column::new("NOTES").unwrap()
}

/// Creates the driver index on an empty Schemaless and keeps it
/// maintained until `cancel`.
async fn maintain_index(
    store: &MySqlStore,
    config: &config::Config,
    cancel: CancellationToken,
) -> JoinHandle<()> {
    let v = index::create_version(store, "trips_by_driver")
        .await
        .unwrap();
    index::switch(store, "trips_by_driver", v).await.unwrap();
    let trigger = Maintainer::trigger(store, "trips_by_driver", v, &config.triggers).unwrap();
    tokio::spawn(async move {
        trigger.run(cancel).await.unwrap();
    })
}

async fn row_keys(pool: &sqlx::PgPool, sql: &str) -> Vec<RowKey> {
    let uuids: Vec<Uuid> = sqlx::query_scalar(sqlx::AssertSqlSafe(sql.to_string()))
        .fetch_all(pool)
        .await
        .unwrap();
    uuids
        .into_iter()
        .map(|u| RowKey::parse(&u.to_string()).unwrap())
        .collect()
}

/// Writers creating and completing trips and readers reading every kind
/// (latest cell, row, index by driver) through the facade, for `time`.
/// Returns the reads made.
async fn load(facade: &Arc<TripStore>, rows: Vec<RowKey>, time: Duration, seed: u64) -> u64 {
    let rows = Arc::new(Mutex::new(rows));
    let stop = Arc::new(AtomicBool::new(false));
    let reads = Arc::new(AtomicU64::new(0));
    let mut tasks = Vec::new();
    for w in 0..2 {
        let (facade, rows, stop) = (facade.clone(), rows.clone(), stop.clone());
        tasks.push(tokio::spawn(async move {
            let mut source = TripCells::new(seed * 10 + w);
            while !stop.load(Ordering::Relaxed) {
                let trip = source.new_trip();
                let done = source.complete(&trip[0]);
                facade.put_cells(trip.clone()).await.expect("a write");
                rows.lock().unwrap().push(trip[0].key.row_key);
                tokio::time::sleep(Duration::from_millis(5)).await;
                facade.put_cell(done).await.expect("a write");
            }
        }));
    }
    for _ in 0..2 {
        let (facade, rows, stop, reads) =
            (facade.clone(), rows.clone(), stop.clone(), reads.clone());
        tasks.push(tokio::spawn(async move {
            while !stop.load(Ordering::Relaxed) {
                let row = {
                    let rows = rows.lock().unwrap();
                    rows[rand::rng().random_range(0..rows.len())]
                };
                let latest = facade
                    .get_cell_latest(&row, &base(), ReadFrom::Master)
                    .await
                    .expect("a read");
                facade
                    .get_cells_for_row(&row, ReadFrom::Master)
                    .await
                    .expect("a read");
                reads.fetch_add(2, Ordering::Relaxed);
                if let Some(cell) = latest {
                    let driver = cell.cell.body.fields()["driver_uuid"].clone();
                    facade
                        .query_index(
                            &IndexQuery {
                                index: "trips_by_driver".into(),
                                shard_value: driver,
                                filters: Vec::new(),
                                order_by: Some("requested_at".into()),
                                descending: true,
                                limit: 10,
                            },
                            ReadFrom::Master,
                        )
                        .await
                        .expect("an index read");
                    reads.fetch_add(1, Ordering::Relaxed);
                }
            }
        }));
    }
    tokio::time::sleep(time).await;
    stop.store(true, Ordering::Relaxed);
    for t in tasks {
        t.await.unwrap();
    }
    reads.load(Ordering::Relaxed)
}

/// The report over every sample, once the counts stop moving (the replays
/// and the once-a-second flush have caught up).
async fn settled_report(pool: &sqlx::PgPool) -> verifier::report::Report {
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut last = None;
    loop {
        tokio::time::sleep(Duration::from_millis(1500)).await;
        let report = verifier::report::read(pool, None, None).await.unwrap();
        let now = (
            report.totals.samples,
            report.totals.unsettled,
            report.totals.transient,
        );
        if last == Some(now) || Instant::now() > deadline {
            return report;
        }
        last = Some(now);
    }
}

async fn open_mismatches(pool: &sqlx::PgPool, source: &str) -> BTreeSet<(String, String)> {
    sqlx::query_as(
        "SELECT row_key::text, column_name FROM mezzanine.verify_mismatches
         WHERE resolved_at IS NULL AND source = $1",
    )
    .bind(source)
    .fetch_all(pool)
    .await
    .unwrap()
    .into_iter()
    .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_a_every_read_sampled_under_live_writes_records_no_mismatch() {
    let db = LegacyDb::trips().await;
    legacy::trips::seed(&db.pool, "public", "uuid", 300, 7, |_| {})
        .await
        .unwrap();
    db.apply_schemaless().await;
    let (config, _) = verify_config(
        &db,
        "[gates]\nmin_samples = 200\nmax_mismatch_upper_bound = 0.05\n",
    );
    let facade = Arc::new(TripStore::connect(&config).await.unwrap());
    let cancel = CancellationToken::new();
    let maintainer = maintain_index(facade.schemaless(), &config, cancel.clone()).await;
    walk_to(&facade, &config, Mode::Mirror).await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    crate::backfill::backfill_now(facade.legacy(), facade.schemaless(), &config).await;
    let seeded = row_keys(&db.pool, "SELECT uuid FROM trips").await;

    // mirror: reads served by PostgreSQL, replayed on Schemaless, while
    // the relay moves the writes over.
    let reads = load(&facade, seeded.clone(), Duration::from_secs(4), 1).await;
    let report = settled_report(&db.pool).await;
    assert!(
        report.totals.samples >= 300 && reads >= 300,
        "{reads} reads, {:?}",
        report.totals
    );
    assert_eq!(report.totals.mismatches, 0, "{:?}", report.totals);
    assert_eq!(report.open_mismatches, 0);
    let columns: BTreeSet<&str> = report.by_column.iter().map(|c| c.column.as_str()).collect();
    assert!(
        columns.contains("BASE") && columns.contains("NOTES"),
        "{columns:?}"
    );
    let mirror_samples = report.totals.samples;

    // shadow: reads served by Schemaless, replayed on PostgreSQL. Its gate
    // counted the samples above.
    facade.set_mode(&step(Mode::Shadow)).await.unwrap();
    let all = row_keys(&db.pool, "SELECT uuid FROM trips").await;
    load(&facade, all, Duration::from_secs(3), 2).await;
    let report = settled_report(&db.pool).await;
    assert!(
        report.totals.samples > mirror_samples + 200,
        "{:?}",
        report.totals
    );
    assert_eq!(report.totals.mismatches, 0, "{:?}", report.totals);
    let recorded: i64 = sqlx::query_scalar("SELECT count(*) FROM mezzanine.verify_mismatches")
        .fetch_one(&db.pool)
        .await
        .unwrap();
    assert_eq!(recorded, 0);
    cancel.cancel();
    maintainer.await.unwrap();
    facade.close().await;
}

/// The latest cell of (row, column) in Schemaless.
async fn schemaless_latest(store: &MySqlStore, row: &RowKey, column: &Column) -> Cell {
    store
        .get_cell_latest(row, column, ReadFrom::Master)
        .await
        .unwrap()
        .expect("a stored cell")
        .cell
}

/// Runs SQL on the master of the shard holding `row`.
async fn on_master(store: &MySqlStore, row: &RowKey, sql: impl Fn(&str) -> String) {
    let topology = store.topology();
    let shard = schemaless::routing::shard_of(row, topology.shard_count);
    let database = topology.database(shard);
    topology
        .cluster(shard)
        .unwrap()
        .master()
        .execute(sql(&database))
        .await
        .unwrap();
}

fn hex(bytes: &[u8]) -> String {
    let mut s = String::new();
    push_hex(&mut s, bytes);
    s
}

fn run(mut command: Command) -> (bool, String, String) {
    let out = command.output().unwrap();
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn planted_divergence_is_found_by_samples_and_the_full_diff_then_repaired() {
    let (db, config, text, facade) = mirrored(200, 11, "").await;
    let file = config_file(&text);
    let schemaless = facade.schemaless().clone();

    let noted = row_keys(
        &db.pool,
        "SELECT t.uuid FROM trips t WHERE (SELECT count(*) FROM trip_notes n WHERE n.trip_id = t.id) >= 2 ORDER BY t.id LIMIT 3",
    )
    .await;
    let plain = row_keys(
        &db.pool,
        "SELECT t.uuid FROM trips t WHERE NOT EXISTS (SELECT 1 FROM trip_notes n WHERE n.trip_id = t.id) ORDER BY t.id LIMIT 2",
    )
    .await;
    assert!(noted.len() == 3 && plain.len() == 2, "the seed has notes");
    let (a, b) = (plain[0], plain[1]);
    let (c, d, e) = (noted[0], noted[1], noted[2]);

    // A: a field of Schemaless's latest BASE cell changed in MariaDB.
    let cell = schemaless_latest(&schemaless, &a, &base()).await;
    let mut fields = cell.body.fields().clone();
    fields.insert("status".into(), "tampered".into());
    let encoded = schemaless::codec::encode(
        &Body::from(fields),
        schemaless::codec::inflated_cap(config.limits.max_body_bytes),
    )
    .unwrap();
    on_master(&schemaless, &a, |db| {
        format!(
            "UPDATE `{db}`.`entity` SET body = {} WHERE row_key = {} AND column_name = 'BASE' AND ref_key = {}",
            hex(&encoded),
            hex(a.as_bytes()),
            cell.key.ref_key.get()
        )
    })
    .await;
    // B: a field of the legacy trips row changed in PostgreSQL.
    sqlx::query("UPDATE trips SET city_id = city_id + 1000 WHERE uuid = $1")
        .bind(b.uuid())
        .execute(&db.pool)
        .await
        .unwrap();
    // C: Schemaless's latest NOTES cell deleted (a missing cell).
    let c_note = schemaless_latest(&schemaless, &c, &notes()).await;
    on_master(&schemaless, &c, |db| {
        format!(
            "DELETE FROM `{db}`.`entity` WHERE row_key = {} AND column_name = 'NOTES' AND ref_key = {}",
            hex(c.as_bytes()),
            c_note.key.ref_key.get()
        )
    })
    .await;
    // D: an extra NOTES cell only Schemaless has.
    let d_note = schemaless_latest(&schemaless, &d, &notes()).await;
    let mut extra = d_note.clone();
    extra.key.ref_key = schemaless::RefKey::new(d_note.key.ref_key.get() + 1).unwrap();
    schemaless.put_cell(extra).await.unwrap();
    // E: the latest child row deleted from PostgreSQL (a missing child).
    sqlx::query(
        "DELETE FROM trip_notes WHERE (trip_id, seq) = (
             SELECT n.trip_id, max(n.seq) FROM trip_notes n JOIN trips t ON t.id = n.trip_id
             WHERE t.uuid = $1 GROUP BY n.trip_id)",
    )
    .bind(e.uuid())
    .execute(&db.pool)
    .await
    .unwrap();
    let expected: BTreeSet<(String, String)> = [
        (a, "BASE"),
        (b, "BASE"),
        (c, "NOTES"),
        (d, "NOTES"),
        (e, "NOTES"),
    ]
    .into_iter()
    .map(|(r, col)| (r.to_string(), col.to_string()))
    .collect();

    // The full diff finds exactly these, and exits 1.
    let (ok, out, err) = run(mezzanine(
        file.path(),
        &["verify", "full", "--json", "--plain"],
    ));
    assert!(!ok, "the full diff must fail on divergence: {out}{err}");
    let figures: serde_json::Value = serde_json::from_str(out.lines().last().unwrap()).unwrap();
    assert_eq!(figures["mismatches"], 5, "{out}");
    assert_eq!(figures["parents"], 200, "{out}");
    assert!(!figures["sample_row_keys"].as_array().unwrap().is_empty());
    assert_eq!(open_mismatches(&db.pool, "full").await, expected);
    let mismatch = verifier::store::mismatches(&db.pool, true, Some(&a), 10)
        .await
        .unwrap();
    assert_eq!(mismatch[0].schemaless["body"]["status"], "tampered");
    assert_ne!(mismatch[0].legacy["body"]["status"], "tampered");

    // An open mismatch closes the gate.
    let refused = facade.set_mode(&step(Mode::Shadow)).await.unwrap_err();
    assert!(
        refused.to_string().contains("5 mismatches are open"),
        "{refused}"
    );

    // Sampled replay finds the same on its own.
    sqlx::query("DELETE FROM mezzanine.verify_mismatches")
        .execute(&db.pool)
        .await
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        for row in [a, b] {
            facade
                .get_cell_latest(&row, &base(), ReadFrom::Master)
                .await
                .unwrap();
        }
        for row in [c, d, e] {
            facade
                .get_cells_for_row(&row, ReadFrom::Master)
                .await
                .unwrap();
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
        let found = open_mismatches(&db.pool, "sample").await;
        if found == expected {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "sampling found {found:?}, not {expected:?}"
        );
    }

    // Bad input changes nothing.
    let (ok, _, err) = run(mezzanine(file.path(), &["verify", "repair", "not-a-uuid"]));
    assert!(!ok && err.contains("not-a-uuid"), "{err}");
    let out = mezzanine(file.path(), &["verify", "sample", "--rate", "1.5"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("between 0.0 and 1.0"));
    assert_eq!(verifier::store::settings(&db.pool).await.unwrap(), None);

    // Repair rewrites Schemaless from the legacy tables (mode mirror).
    let (ok, out, err) = run(mezzanine(file.path(), &["verify", "repair", "--all"]));
    assert!(ok, "{out}{err}");
    assert_eq!(out.matches("rewritten, verified equal").count(), 3, "{out}");
    // The child rows PostgreSQL does not have are deleted with tombstones
    // (see `repair_deletes_what_the_truth_no_longer_has_with_tombstones`).
    for row in [d, e] {
        assert!(
            out.contains(&format!(
                "{row} NOTES: deleted (gone from the source of truth), verified equal"
            )),
            "{out}"
        );
    }
    assert!(open_mismatches(&db.pool, "sample").await.is_empty());
    let legacy_a = facade
        .legacy()
        .get_cell_latest(&a, &base(), ReadFrom::Master)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        schemaless_latest(&schemaless, &a, &base()).await.body,
        legacy_a.cell.body
    );
    let city = |cell: &Cell| cell.body.fields()["city_id"].as_i64().unwrap();
    let legacy_b = facade
        .legacy()
        .get_cell_latest(&b, &base(), ReadFrom::Master)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        city(&schemaless_latest(&schemaless, &b, &base()).await),
        city(&legacy_b.cell)
    );
    let (ok, out, err) = run(mezzanine(
        file.path(),
        &[
            "verify",
            "full",
            "--restart",
            "--strict",
            "--json",
            "--plain",
        ],
    ));
    assert!(ok, "clean after the repair: {out}{err}");
    assert!(out.contains("\"mismatches\":0"), "{out}");
    // Strict too: PostgreSQL reads every value Schemaless holds as the
    // column holds it.
    let figures: serde_json::Value = serde_json::from_str(out.lines().last().unwrap()).unwrap();
    assert_eq!(
        figures["strict_chunks"].as_u64().unwrap() + figures["sweeps"].as_u64().unwrap(),
        figures["chunks"].as_u64().unwrap(),
        "every chunk of legacy ids strict, and one sweep per shard: {out}"
    );
    assert_eq!(figures["sweeps"], config.instance.shard_count, "{out}");

    // From primary on, Schemaless is the truth: a legacy change is undone.
    walk_to(&facade, &config, Mode::Primary).await;
    sqlx::query("UPDATE trips SET status = 'legacy-only' WHERE uuid = $1")
        .bind(a.uuid())
        .execute(&db.pool)
        .await
        .unwrap();
    let (ok, out, err) = run(mezzanine(
        file.path(),
        &["verify", "repair", &a.to_string()],
    ));
    assert!(ok, "{out}{err}");
    assert!(out.contains("the source of truth is schemaless"), "{out}");
    assert!(
        out.contains(&format!("{a} BASE: rewritten, verified equal")),
        "{out}"
    );
    let status: String = sqlx::query_scalar("SELECT status FROM trips WHERE uuid = $1")
        .bind(a.uuid())
        .fetch_one(&db.pool)
        .await
        .unwrap();
    assert_eq!(
        serde_json::Value::String(status),
        schemaless_latest(&schemaless, &a, &base())
            .await
            .body
            .fields()["status"]
    );
    facade.close().await;
}

/// Deletes a trip and its child rows from PostgreSQL.
async fn delete_trip(pool: &sqlx::PgPool, row: &RowKey) {
    for table in ["trip_notes", "billing_attempts", "fare_adjustments"] {
        sqlx::query(sqlx::AssertSqlSafe(format!(
            "DELETE FROM {table} WHERE trip_id = (SELECT id FROM trips WHERE uuid = $1)"
        )))
        .bind(row.uuid())
        .execute(pool)
        .await
        .unwrap();
    }
    sqlx::query("DELETE FROM trips WHERE uuid = $1")
        .bind(row.uuid())
        .execute(pool)
        .await
        .unwrap();
}

/// The tombstone cells of `row` that Schemaless stores, and its stored
/// cells of `column`, hidden or not.
async fn stored_of(store: &MySqlStore, row: &RowKey, column: &Column) -> (Vec<Cell>, Vec<Cell>) {
    let stored = store
        .get_rows_all(std::slice::from_ref(row), ReadFrom::Master)
        .await
        .unwrap();
    let of = |name: &str| -> Vec<Cell> {
        stored
            .iter()
            .filter(|s| s.cell.key.column.as_str() == name)
            .map(|s| s.cell.clone())
            .collect()
    };
    (of("DELETED"), of(column.as_str()))
}

/// What the source of truth no longer has is deleted from the other side
/// as the stores record a deletion: legacy as the truth, a tombstone
/// written to Schemaless (its cells stay, hidden: it is append-only, and
/// triggers see the deletion); Schemaless as the truth, its tombstone
/// applied to the legacy tables. A row PostgreSQL has that a tombstone
/// retired in Schemaless is refused, and nothing is written.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn repair_deletes_what_the_truth_no_longer_has_with_tombstones() {
    let (db, config, text, facade) = mirrored(60, 23, "").await;
    let file = config_file(&text);
    let schemaless = facade.schemaless().clone();
    let noted = row_keys(
        &db.pool,
        "SELECT t.uuid FROM trips t WHERE (SELECT count(*) FROM trip_notes n WHERE n.trip_id = t.id) >= 2 ORDER BY t.id LIMIT 4",
    )
    .await;
    assert_eq!(noted.len(), 4, "the seed has notes");
    let (gone, child, retired, later) = (noted[0], noted[1], noted[2], noted[3]);

    // A trip and its notes deleted in PostgreSQL, and a trip's first note
    // (capture is not installed: the deletes reach Schemaless only by the
    // repair).
    delete_trip(&db.pool, &gone).await;
    let first_note: i64 = sqlx::query_scalar(
        "DELETE FROM trip_notes WHERE (trip_id, seq) = (
             SELECT n.trip_id, min(n.seq) FROM trip_notes n JOIN trips t ON t.id = n.trip_id
             WHERE t.uuid = $1 GROUP BY n.trip_id) RETURNING seq::int8",
    )
    .bind(child.uuid())
    .fetch_one(&db.pool)
    .await
    .unwrap();
    // A trip deleted in Schemaless but still in PostgreSQL.
    schemaless
        .put_cell(schemaless::tombstone::row_tombstone(
            retired,
            &Column::new("DELETED").unwrap(),
        ))
        .await
        .unwrap();

    // The verifier's tables as an installation from before the sweeps
    // has them: the first run adds what it needs.
    verifier::store::ensure(&db.pool).await.unwrap();
    sqlx::query("ALTER TABLE mezzanine.verify_chunks DROP COLUMN shard, DROP COLUMN swept")
        .execute(&db.pool)
        .await
        .unwrap();
    let (ok, out, err) = run(mezzanine(
        file.path(),
        &["verify", "full", "--json", "--plain"],
    ));
    assert!(!ok && out.contains("\"sweeps\""), "{out}{err}");
    let (_, base_before) = stored_of(&schemaless, &gone, &base()).await;
    let (_, retired_before) = stored_of(&schemaless, &retired, &base()).await;
    // The row only Schemaless has is found by the shards' sweep, and
    // recorded with nothing on the legacy side.
    let figures: serde_json::Value = serde_json::from_str(out.lines().last().unwrap()).unwrap();
    assert_eq!(figures["sweeps"], config.instance.shard_count, "{out}");
    assert!(
        figures["swept_rows"].as_u64().unwrap() >= 60,
        "every row key read: {out}"
    );
    let open = open_mismatches(&db.pool, "full").await;
    for column in ["BASE", "NOTES"] {
        assert!(
            open.contains(&(gone.to_string(), column.to_string())),
            "{open:?}"
        );
    }
    assert!(open.contains(&(retired.to_string(), "BASE".to_string())));
    assert!(open.contains(&(child.to_string(), "NOTES".to_string())));
    let (ok, out, all_err) = run(mezzanine(file.path(), &["verify", "repair", "--all"]));
    assert!(!ok, "the retired row's repair fails: {out}{all_err}");
    // The first of the row's columns repaired writes the row's tombstone;
    // the others then agree.
    assert!(
        out.lines().any(|l| l.starts_with(&gone.to_string())
            && l.ends_with(": deleted (gone from the source of truth), verified equal")),
        "{out}"
    );
    assert!(
        out.contains(&format!(
            "{child} NOTES: deleted (gone from the source of truth), verified equal"
        )),
        "{out}"
    );
    assert!(
        all_err.contains(&format!(
            "{retired}: PostgreSQL, the source of truth in this mode, has"
        )) && all_err.contains("retired"),
        "{all_err}"
    );

    // The gone trip: one row tombstone, its cells still stored, hidden.
    let (tombstones, base_after) = stored_of(&schemaless, &gone, &base()).await;
    assert_eq!(tombstones.len(), 1, "{tombstones:?}");
    assert_eq!(tombstones[0].body.fields()["row"], true);
    assert_eq!(base_after, base_before, "history stays");
    assert!(facade
        .get_cell_latest(&gone, &base(), ReadFrom::Master)
        .await
        .unwrap()
        .is_none());
    // The note: its own tombstone, the note's cell kept, the rest as PostgreSQL.
    let (tombstones, notes_after) = stored_of(&schemaless, &child, &notes()).await;
    assert_eq!(tombstones.len(), 1, "{tombstones:?}");
    assert_eq!(tombstones[0].body.fields()["column"], "NOTES");
    assert_eq!(tombstones[0].body.fields()["ref_key"], first_note);
    assert!(notes_after
        .iter()
        .any(|c| c.key.ref_key.get() == first_note));
    let all = schemaless
        .get_rows_all(&[child], ReadFrom::Master)
        .await
        .unwrap();
    let visible: Vec<i64> = schemaless::tombstone::visible(all, &Column::new("DELETED").unwrap())
        .unwrap()
        .into_iter()
        .filter(|s| s.cell.key.column == notes())
        .map(|s| s.cell.key.ref_key.get())
        .collect();
    let in_legacy: Vec<i64> = sqlx::query_scalar(
        "SELECT n.seq::int8 FROM trip_notes n JOIN trips t ON t.id = n.trip_id WHERE t.uuid = $1 ORDER BY n.seq",
    )
    .bind(child.uuid())
    .fetch_all(&db.pool)
    .await
    .unwrap();
    assert_eq!(visible, in_legacy);
    // The retired row: refused, nothing written.
    let (tombstones, retired_after) = stored_of(&schemaless, &retired, &base()).await;
    assert_eq!(tombstones.len(), 1);
    assert_eq!(
        retired_after, retired_before,
        "the refused repair wrote nothing"
    );

    // Its fix: delete it from PostgreSQL too; then the sides agree.
    delete_trip(&db.pool, &retired).await;
    let (ok, out, err) = run(mezzanine(file.path(), &["verify", "repair", "--all"]));
    assert!(
        ok && out.contains(&format!("{retired} BASE: already equal")),
        "{out}{err}"
    );
    let (ok, out, err) = run(mezzanine(
        file.path(),
        &["verify", "full", "--restart", "--json", "--plain"],
    ));
    assert!(ok && out.contains("\"mismatches\":0"), "{out}{err}");

    // From primary on, a row Schemaless deleted is deleted from the legacy
    // tables with its child rows. The facade (and its reverse mirror) is
    // closed first, so only the repair can apply the tombstone.
    walk_to(&facade, &config, Mode::Primary).await;
    facade.close().await;
    let schemaless = MySqlStore::connect(&config).unwrap();
    schemaless
        .put_cell(schemaless::tombstone::row_tombstone(
            later,
            &Column::new("DELETED").unwrap(),
        ))
        .await
        .unwrap();
    let (ok, out, err) = run(mezzanine(
        file.path(),
        &["verify", "repair", &later.to_string()],
    ));
    assert!(ok, "{out}{err}");
    assert!(
        out.contains(&format!(
            "{later} BASE: deleted (gone from the source of truth), verified equal"
        )),
        "{out}"
    );
    let left: i64 = sqlx::query_scalar(
        "SELECT (SELECT count(*) FROM trips WHERE uuid = $1) + (SELECT count(*) FROM trip_notes n JOIN trips t ON t.id = n.trip_id WHERE t.uuid = $1)
              + (SELECT count(*) FROM billing_attempts b JOIN trips t ON t.id = b.trip_id WHERE t.uuid = $1)",
    )
    .bind(later.uuid())
    .fetch_one(&db.pool)
    .await
    .unwrap();
    assert_eq!(left, 0, "the row and its notes are deleted from PostgreSQL");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_full_diff_resumes_the_same_run_and_finishes_it() {
    let (db, config, text, facade) = mirrored(300, 13, "stale_after_ms = 500").await;
    let file = config_file(&text);
    facade.close().await;

    let mut first = mezzanine(
        file.path(),
        &[
            "verify",
            "full",
            "--workers",
            "1",
            "--chunk-size",
            "5",
            "--plain",
        ],
    )
    .stdout(Stdio::null())
    .stderr(Stdio::null())
    .spawn()
    .unwrap();
    let done = || async {
        sqlx::query_scalar::<_, i64>(
            "SELECT count(*) FROM mezzanine.verify_chunks WHERE state = 'done'",
        )
        .fetch_one(&db.pool)
        .await
        .unwrap_or(0)
    };
    let deadline = Instant::now() + Duration::from_secs(60);
    while done().await < 3 {
        assert!(Instant::now() < deadline, "the first run compared nothing");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    first.kill().unwrap(); // SIGKILL, mid-chunk or between chunks
    first.wait().unwrap();
    let before = done().await;
    let chunks: i64 = sqlx::query_scalar("SELECT count(*) FROM mezzanine.verify_chunks")
        .fetch_one(&db.pool)
        .await
        .unwrap();
    assert!(
        before < chunks,
        "killed before the end: {before} of {chunks}"
    );

    // The second run continues the same run, takes over the chunk the
    // killed one held once its claim is stale, and finishes it.
    let (ok, out, err) = run(mezzanine(
        file.path(),
        &["verify", "full", "--json", "--plain"],
    ));
    assert!(ok, "{out}{err}");
    assert!(
        err.contains(&format!("{before} of {chunks} chunks done before")),
        "{err}"
    );
    let figures: serde_json::Value = serde_json::from_str(out.lines().last().unwrap()).unwrap();
    assert_eq!(figures["run"], 1, "{out}");
    assert_eq!(figures["done"], chunks, "{out}");
    assert_eq!(figures["parents"], 300, "{out}");
    assert_eq!(figures["mismatches"], 0, "{out}");
    let (ok, out, _) = run(mezzanine(file.path(), &["verify", "report"]));
    let sweeps = config.instance.shard_count;
    assert_eq!(chunks, 60 + i64::from(sweeps), "a sweep per shard");
    assert!(
        ok && out.contains(&format!(
            "full diff run 1: {chunks} of {chunks} chunks ({sweeps} shard sweeps), 300 parents, "
        )) && out.contains(" Schemaless row keys swept, 0 mismatches, finished"),
        "{out}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_served_read_is_never_changed_by_sampling_even_with_the_other_store_down() {
    let cluster = DevCluster::private(Spec::free_ports(&["a"], 1).unwrap())
        .await
        .unwrap();
    let (config, pool) = private_trips(
        &cluster,
        "vdown",
        &format!("[storage]\nconnect_timeout_ms = 1000\nrequest_timeout_ms = 2000\n{SAMPLE_ALL}"),
    )
    .await;
    let facade = TripStore::connect(&config).await.unwrap();
    walk_to(&facade, &config, Mode::Mirror).await;
    let mut source = TripCells::new(5);
    let mut rows = Vec::new();
    for _ in 0..40 {
        let trip = source.new_trip();
        rows.push(trip[0].key.row_key);
        facade.put_cells(trip).await.unwrap();
    }
    let legacy = facade.legacy().clone();
    let compare = |rows: Vec<RowKey>| {
        let (facade, legacy) = (&facade, &legacy);
        async move {
            for row in rows {
                assert_eq!(
                    facade
                        .get_cell_latest(&row, &base(), ReadFrom::Master)
                        .await
                        .unwrap(),
                    legacy
                        .get_cell_latest(&row, &base(), ReadFrom::Master)
                        .await
                        .unwrap()
                );
                assert_eq!(
                    facade
                        .get_cells_for_row(&row, ReadFrom::Master)
                        .await
                        .unwrap(),
                    legacy
                        .get_cells_for_row(&row, ReadFrom::Master)
                        .await
                        .unwrap()
                );
                let missing = RowKey::random();
                assert_eq!(
                    facade
                        .get_cell_latest(&missing, &notes(), ReadFrom::Master)
                        .await
                        .unwrap(),
                    None
                );
            }
            // A bad read fails as the serving store fails it.
            let nope = Column::new("NOPE").unwrap();
            let served = facade
                .get_cell_latest(&RowKey::random(), &nope, ReadFrom::Master)
                .await
                .unwrap_err();
            let direct = legacy
                .get_cell_latest(&RowKey::random(), &nope, ReadFrom::Master)
                .await
                .unwrap_err();
            assert_eq!(served.to_string(), direct.to_string());
        }
    };
    compare(rows.clone()).await;
    cluster.kill("a-master").unwrap();
    let started = Instant::now();
    compare(rows.clone()).await;
    // The replays on the dead master fail in the background, never in
    // the reads: 40 rows read three ways finish long before a replay
    // could time out 120 times.
    assert!(started.elapsed() < Duration::from_secs(20));
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let report = verifier::report::read(&pool, None, None).await.unwrap();
        if report.totals.replay_errors > 0 {
            assert_eq!(report.totals.mismatches, 0, "{:?}", report.totals);
            break;
        }
        assert!(
            Instant::now() < deadline,
            "no replay error counted: {:?}",
            report.totals
        );
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    facade.close().await;
}

/// The Chromium of the machine (Debian's package; `.ci/run` installs it).
fn chromium() -> String {
    for candidate in ["/usr/bin/chromium", "/usr/bin/chromium-browser"] {
        if std::path::Path::new(candidate).exists() {
            return candidate.into();
        }
    }
    panic!("the dashboard test needs Debian's chromium (apt-get install -y chromium; .ci/run installs it)");
}

pub(crate) fn headless(
    profile: &std::path::Path,
    extra: &[&str],
    url: &str,
) -> std::process::Output {
    Command::new(chromium())
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-quic",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--disable-dev-shm-usage",
        ])
        .arg(format!("--user-data-dir={}", profile.display()))
        .args(extra)
        .arg(url)
        .stderr(Stdio::null())
        .output()
        .expect("running chromium")
}

pub(crate) fn http_get(addr: &str, path: &str) -> String {
    let mut stream = std::net::TcpStream::connect(addr).unwrap();
    write!(stream, "GET {path} HTTP/1.1\r\nHost: {addr}\r\n\r\n").unwrap();
    let mut response = String::new();
    stream.read_to_string(&mut response).unwrap();
    response
}

/// `mezzanine serve` on a free port, refreshing every 500 ms: the process,
/// the dashboard's URL and its `host:port`.
pub(crate) fn serve(config: &std::path::Path) -> (std::process::Child, String, String) {
    let mut serve = mezzanine(
        config,
        &["serve", "--listen", "127.0.0.1:0", "--refresh-ms", "500"],
    )
    .stdout(Stdio::piped())
    .stderr(Stdio::null())
    .spawn()
    .unwrap();
    let mut first = String::new();
    BufReader::new(serve.stdout.take().unwrap())
        .read_line(&mut first)
        .unwrap();
    let url = first
        .split_whitespace()
        .find(|w| w.starts_with("http://"))
        .unwrap_or_else(|| panic!("no address in {first:?}"))
        .to_string();
    let addr = url
        .trim_start_matches("http://")
        .trim_end_matches('/')
        .to_string();
    (serve, url, addr)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_dashboard_shows_live_figures_in_a_headless_browser() {
    let (db, _, text, facade) = mirrored(60, 3, "").await;
    let file = config_file(&text);
    let rows = row_keys(&db.pool, "SELECT uuid FROM trips ORDER BY id").await;
    for row in &rows {
        facade
            .get_cells_for_row(row, ReadFrom::Master)
            .await
            .unwrap();
    }
    // The gates' window (and the dashboard's) counts whole seconds after
    // the backfill: the full diff below must fall in a later one.
    let since = tripstore::gates::verification_window(&db.pool)
        .await
        .unwrap()
        .expect("the backfill finished");
    let deadline = Instant::now() + Duration::from_secs(10);
    while !sqlx::query_scalar::<_, bool>("SELECT date_trunc('second', now()) > to_timestamp($1)")
        .bind(since)
        .fetch_one(&db.pool)
        .await
        .unwrap()
    {
        assert!(Instant::now() < deadline, "the clock stood still");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let planted = rows[7];
    sqlx::query("UPDATE trips SET city_id = 4242 WHERE uuid = $1")
        .bind(planted.uuid())
        .execute(&db.pool)
        .await
        .unwrap();
    let (ok, out, _) = run(mezzanine(file.path(), &["verify", "full", "--plain"]));
    assert!(!ok && out.contains("1 mismatches"), "{out}");
    facade.close().await;

    let (mut serve, url, addr) = serve(file.path());

    let status: serde_json::Value = serde_json::from_str(
        http_get(&addr, "/api/status")
            .split("\r\n\r\n")
            .last()
            .unwrap(),
    )
    .unwrap();
    let inventory = &status["inventory"];
    assert_eq!(inventory["available"], true, "{inventory}");
    assert!(
        inventory["statements"].as_u64().unwrap() >= 1,
        "{inventory}"
    );
    assert!(
        inventory["top_untranslated"]
            .as_array()
            .unwrap()
            .iter()
            .any(|u| u["sql"]
                .as_str()
                .unwrap()
                .starts_with("UPDATE trips SET city_id")),
        "{inventory}"
    );

    let metrics = http_get(&addr, "/metrics");
    for expected in [
        "mezzanine_verify_open_mismatches 1",
        "mezzanine_mode{mode=\"mirror\"} 1",
        "mezzanine_backfill_chunks{state=\"done\"} 1",
        "mezzanine_verify_samples{column=\"BASE\"}",
        "mezzanine_verify_replay_seconds_mean",
    ] {
        assert!(metrics.contains(expected), "{expected} not in {metrics}");
    }

    let profile = tempfile::tempdir().unwrap();
    let dom = headless(
        profile.path(),
        &["--virtual-time-budget=8000", "--dump-dom"],
        &url,
    );
    let dom = String::from_utf8_lossy(&dom.stdout);
    for expected in [
        "<span id=\"mode\">mirror</span>",
        "data-loaded=",
        &planted.to_string(),
        "class=\"mismatch\"",
        "city_id",
        "4242",
        "of 1 chunks",
        // Coverage leaves out the row with the open mismatch.
        "98.3% of 60",
        // The inventory lists the planted UPDATE, which the cell API
        // cannot answer, with its reason.
        "statements touch layout tables",
        "class=\"untranslated\"",
        "UPDATE trips SET city_id",
        "without a new ref key",
    ] {
        assert!(
            dom.contains(expected),
            "{expected:?} not on the page: {dom}"
        );
    }
    // The samples figure is the live count, not the placeholder.
    assert!(
        !dom.contains("<div class=\"big\" id=\"samples\">–</div>"),
        "{dom}"
    );

    let shot = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join("dashboard.png");
    let _ = std::fs::remove_file(&shot);
    headless(
        profile.path(),
        &[
            "--virtual-time-budget=8000",
            "--window-size=1280,1400",
            &format!("--screenshot={}", shot.display()),
        ],
        &url,
    );
    let png = std::fs::read(&shot).expect("a screenshot");
    assert!(
        png.starts_with(b"\x89PNG") && png.len() > 10_000,
        "{} bytes",
        png.len()
    );
    serve.kill().unwrap();
    serve.wait().unwrap();
}

/// The replays run on a thread of their own, with stores of their own: on
/// an app whose (single-threaded) runtime is stuck in a blocking call right
/// after its reads, the samples those reads took are still replayed,
/// compared and counted. Replays sharing the app's runtime would wait for
/// it, and nothing would be counted until it was free again.
#[tokio::test(flavor = "current_thread")]
async fn samples_are_replayed_while_the_serving_runtime_is_blocked() {
    let (db, config, _, facade) = mirrored(30, 11, "").await;
    let rows = row_keys(&db.pool, "SELECT uuid FROM trips").await;
    for row in &rows {
        facade
            .get_cell_latest(row, &base(), ReadFrom::Master)
            .await
            .unwrap()
            .expect("a seeded trip has a BASE cell");
    }
    let wanted = rows.len() as u64;
    let url = config.legacy.as_ref().unwrap().url.clone();
    // This thread (and so the facade's runtime) now blocks until another
    // thread, with a runtime and a connection of its own, sees the counts.
    let counted = std::thread::spawn(move || {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        runtime.block_on(async move {
            let pool = sqlx::PgPool::connect(&url).await.unwrap();
            let deadline = Instant::now() + Duration::from_secs(30);
            loop {
                let totals = verifier::report::read(&pool, None, None)
                    .await
                    .unwrap()
                    .totals;
                if totals.matches >= wanted || Instant::now() > deadline {
                    pool.close().await;
                    return totals;
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        })
    })
    .join()
    .unwrap();
    assert!(
        counted.replays >= wanted && counted.matches >= wanted,
        "{wanted} reads sampled, counted while the app's runtime was blocked: {counted:?}"
    );
    assert_eq!(counted.mismatches, 0, "{counted:?}");
    facade.close().await;
}

/// A mismatch seen by reads that began before its repair is not reopened
/// when it is recorded after the repair (a replay in flight during `verify
/// repair`); one seen by reads that began after the repair is.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_mismatch_seen_before_its_repair_does_not_reopen_it() {
    let db = LegacyDb::trips().await;
    verifier::store::ensure(&db.pool).await.unwrap();
    let row = RowKey::from(Uuid::new_v4());
    let difference = verifier::compare::Difference {
        row_key: row,
        column: base(),
        legacy: serde_json::json!({"status": "completed"}),
        schemaless: serde_json::json!({"status": "tampered"}),
    };
    let record = |observed: Instant| {
        let pool = db.pool.clone();
        let difference = difference.clone();
        async move {
            verifier::store::record(
                &pool,
                verifier::store::Source::Sample,
                "latest",
                &[difference],
                observed,
            )
            .await
            .unwrap()
        }
    };
    let open = || open_mismatches(&db.pool, "sample");
    let expected: BTreeSet<(String, String)> = [(row.to_string(), "BASE".to_string())]
        .into_iter()
        .collect();

    let before_repair = Instant::now();
    record(before_repair).await;
    assert_eq!(open().await, expected);
    // The rule compares instants: these pauses keep the observation, the
    // repair and the later observation apart by more than the clocks'
    // granularity. Nothing is awaited here.
    tokio::time::sleep(Duration::from_millis(20)).await;
    verifier::store::resolve(&db.pool, &row, &base(), "repaired")
        .await
        .unwrap();
    assert!(open().await.is_empty());

    // The replay that read before the repair records late: still resolved.
    record(before_repair).await;
    assert!(
        open().await.is_empty(),
        "a difference read before the repair reopened it"
    );
    // And when its recording waits (a busy pool, a busy core) well past
    // the repair: the stamp is taken from the database's clock after the
    // wait, never before it.
    let url = &db.config.legacy.as_ref().unwrap().url;
    let narrow = sqlx::postgres::PgPoolOptions::new()
        .max_connections(1)
        .connect(url)
        .await
        .unwrap();
    let held = narrow.acquire().await.unwrap();
    let late = tokio::spawn({
        let narrow = narrow.clone();
        let difference = difference.clone();
        async move {
            verifier::store::record(
                &narrow,
                verifier::store::Source::Sample,
                "latest",
                &[difference],
                before_repair,
            )
            .await
        }
    });
    tokio::time::sleep(Duration::from_millis(300)).await;
    drop(held);
    late.await.unwrap().unwrap();
    assert!(
        open().await.is_empty(),
        "a difference read before the repair, recorded after a wait, reopened it"
    );
    let kept = verifier::store::mismatches(&db.pool, false, Some(&row), 10)
        .await
        .unwrap();
    assert_eq!(kept.len(), 1);
    assert_eq!(kept[0].occurrences, 1, "{kept:?}");

    // Reads that began after the repair and still differ: open again. The
    // stamp errs early by at most the clock read's way back (see
    // `store::record`), so the pause exceeds any such delay on a busy
    // machine by far.
    tokio::time::sleep(Duration::from_millis(250)).await;
    record(Instant::now()).await;
    assert_eq!(open().await, expected);
    let kept = verifier::store::mismatches(&db.pool, true, Some(&row), 10)
        .await
        .unwrap();
    assert_eq!(kept[0].occurrences, 2, "{kept:?}");
}

/// A sweep keeps its place in its chunk: a worker that takes over the
/// chunk of one killed mid-sweep goes on after the last row key swept
/// (reading only the rest, finding what is there) instead of reading the
/// shard again from its first key, and the chunk's counts add both
/// workers' rows and mismatches.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sweep_taken_over_goes_on_from_its_place() {
    let (db, config, _, facade) = mirrored(40, 31, "stale_after_ms = 200").await;
    let schemaless = facade.schemaless().clone();
    let shards = config.instance.shard_count;
    verifier::store::ensure(&db.pool).await.unwrap();
    let mut full = tripstore::triage::full_diff(facade.legacy(), &schemaless, &config);
    full.config.triage_delay_ms = 0;
    full.config.triage_wait_ms = 0;
    let id = verifier::full::plan(&db.pool, facade.legacy(), shards, 100, true)
        .await
        .unwrap();
    // A row only Schemaless has, in `shard`, its key after `after`.
    let body = schemaless_latest(
        &schemaless,
        &row_keys(&db.pool, "SELECT uuid FROM trips ORDER BY id LIMIT 1").await[0],
        &base(),
    )
    .await
    .body;
    let plant = |shard: u32, after: Option<RowKey>| {
        let (schemaless, body) = (schemaless.clone(), body.clone());
        async move {
            let key = loop {
                let mut bytes = *Uuid::new_v4().as_bytes();
                bytes[0] = 0xff;
                let key = RowKey::from(Uuid::from_bytes(bytes));
                if schemaless::routing::shard_of(&key, shards) == shard
                    && after.is_none_or(|a| key > a)
                {
                    break key;
                }
            };
            let cell = Cell::new(key, base(), schemaless::RefKey::new(1).unwrap(), body);
            schemaless.put_cells(vec![cell]).await.unwrap();
            key
        }
    };
    let shard = 3;
    let start = verifier::full::SWEEP_BASE + i64::from(shard);
    let first = plant(shard, None).await;

    // The first worker sweeps the shard (one page) and dies after it: its
    // chunk is left running, its place kept.
    sqlx::query("UPDATE mezzanine.verify_chunks SET state = 'running', claimed_at = now() WHERE run = $1 AND start_id = $2")
        .bind(id)
        .bind(start)
        .execute(&db.pool)
        .await
        .unwrap();
    let swept = full
        .sweep(shard, None, (id, start), verifier::full::Place::default())
        .await
        .unwrap();
    assert_eq!(swept.mismatches, 1, "{:#?}", swept.checked.mismatches);
    let keys = schemaless
        .shard_row_keys(shard, None, 100_000, ReadFrom::Master)
        .await
        .unwrap();
    assert_eq!(swept.rows, keys.len() as u64);
    let kept: (Option<Uuid>, i64, i64) = sqlx::query_as(
        "SELECT sweep_after, swept, mismatches FROM mezzanine.verify_chunks WHERE run = $1 AND start_id = $2",
    )
    .bind(id)
    .bind(start)
    .fetch_one(&db.pool)
    .await
    .unwrap();
    let last = *keys.last().unwrap();
    assert_eq!(kept, (Some(last.uuid()), keys.len() as i64, 1));

    // Two more rows only Schemaless has arrive after its place; the
    // worker that takes the stale chunk over reads just those, two a page.
    let later = [
        plant(shard, Some(last)).await,
        plant(shard, Some(last)).await,
    ];
    // Its claim gone stale, as a dead worker's does.
    sqlx::query("UPDATE mezzanine.verify_chunks SET claimed_at = now() - interval '1 hour' WHERE run = $1 AND start_id = $2")
        .bind(id)
        .bind(start)
        .execute(&db.pool)
        .await
        .unwrap();
    full.sweep_page = 2;
    let progress = verifier::full::Progress::default();
    let status = full
        .run(id, 1, &progress, &CancellationToken::new())
        .await
        .unwrap();
    assert!(status.finished(), "{status:?}");
    let mut total = 0;
    for s in 0..shards {
        total += schemaless
            .shard_row_keys(s, None, 100_000, ReadFrom::Master)
            .await
            .unwrap()
            .len() as u64;
    }
    assert_eq!(
        progress.swept.load(Ordering::Relaxed),
        total - keys.len() as u64,
        "every shard swept once, the taken-over one from its place"
    );
    let done: (Option<Uuid>, i64, i64, String) = sqlx::query_as(
        "SELECT sweep_after, swept, mismatches, state FROM mezzanine.verify_chunks WHERE run = $1 AND start_id = $2",
    )
    .bind(id)
    .bind(start)
    .fetch_one(&db.pool)
    .await
    .unwrap();
    let newest = later.iter().max().unwrap().uuid();
    assert_eq!(
        done,
        (Some(newest), keys.len() as i64 + 2, 3, "done".to_string())
    );
    let open = open_mismatches(&db.pool, "full").await;
    for key in [first, later[0], later[1]] {
        assert!(
            open.contains(&(key.to_string(), "BASE".to_string())),
            "{key}: {open:?}"
        );
    }
    facade.close().await;
}
