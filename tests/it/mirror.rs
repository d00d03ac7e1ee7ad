//! The mirror, both ways, against real servers: a writer killed right
//! after its commits, a Schemaless master stopped under load, two relays
//! and duplicate deliveries, conflicts parked, the gates of `mode set`,
//! and the reverse mirror killed and resumed, with a late older cell.
//! Every test ends by comparing the two stores through the cell API.

use std::collections::{BTreeMap, BTreeSet};
use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use config::ColumnKind;
use devcluster::{DevCluster, Spec};
use legacy::trips::TripCells;
use legacy::LegacyStore;
use mirror::Relay;
use schemaless::{Body, Cell, CellKey, CellStore, MySqlStore, ReadFrom, RowKey, WriteOutcome};
use serde_json::json;
use tripstore::{Mode, ModeRequest, TripStore};

use crate::harness::{config_file, mezzanine, private_trips, LegacyDb};

pub(crate) fn request(target: Mode) -> ModeRequest {
    ModeRequest {
        target,
        force: false,
        by: "mirror test".into(),
        reason: None,
    }
}

/// The database's config with a `[mirror]` table.
pub(crate) fn with_mirror(db: &LegacyDb, mirror: &str) -> (config::Config, String) {
    let text = format!("{}\n[mirror]\n{mirror}\n", db.config_text);
    let config = config::Config::parse(&text, "mirror-test.toml").expect("the test config");
    (config, text)
}

pub(crate) fn run_ok(mut command: Command) -> String {
    let out = command.output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    stdout
}

/// Steps the mode forward to `target`; before `shadow`, backfills the
/// history (its gate).
pub(crate) async fn walk_to(store: &TripStore, config: &config::Config, target: Mode) {
    while store.mode() < target {
        let next = store.mode().next().unwrap();
        if next == Mode::Shadow {
            backfill_in_mirror(store, config).await;
        }
        store
            .set_mode(&request(next))
            .await
            .unwrap_or_else(|e| panic!("stepping to {next}: {e}"));
    }
}

/// The backfill, once `store` is in mirror. Its plan must postdate every
/// facade's switch to mirror, which each sees at its next mode poll: not a
/// condition this process can observe for the others, so a pause longer
/// than the poll.
pub(crate) async fn backfill_in_mirror(store: &TripStore, config: &config::Config) {
    tokio::time::sleep(Duration::from_millis(300)).await;
    crate::backfill::backfill_now(store.legacy(), store.schemaless(), config).await;
}

/// Every cell of every shard's change log.
pub(crate) async fn all_schemaless_cells(store: &MySqlStore) -> Vec<schemaless::StoredCell> {
    let mut out = Vec::new();
    for shard in 0..store.shard_count() {
        let mut after = 0;
        loop {
            let page = store
                .get_cells_for_shard(shard, after, 1000, ReadFrom::Master)
                .await
                .unwrap();
            if page.cells.is_empty() {
                break;
            }
            after = page.next;
            out.extend(page.cells);
        }
    }
    out
}

/// The two stores hold the same trips: every legacy cell is in Schemaless
/// with the same body; every child cell in Schemaless is in the legacy
/// tables; the latest row cell in Schemaless is the legacy row; and
/// `get_cells_for_row` answers the same on both for a sample of rows.
/// Returns how many trips were compared.
pub(crate) async fn assert_stores_equal(legacy: &LegacyStore, schemaless: &MySqlStore) -> usize {
    let Some((low, high)) = legacy.id_range().await.unwrap() else {
        assert!(all_schemaless_cells(schemaless).await.is_empty());
        return 0;
    };
    let chunk = legacy.scan(low..high + 1).await.unwrap();
    assert!(chunk.unreadable.is_empty(), "{:?}", chunk.unreadable);
    let legacy_cells: BTreeMap<CellKey, Body> =
        chunk.cells.into_iter().map(|c| (c.key, c.body)).collect();
    let stored = all_schemaless_cells(schemaless).await;
    let kind = |cell: &Cell| {
        legacy
            .layout()
            .column(cell.key.column.as_str())
            .unwrap_or_else(|| panic!("{} is not a layout column", cell.key))
            .1
            .kind()
    };
    let mut latest: BTreeMap<(RowKey, String), &Cell> = BTreeMap::new();
    let mut schemaless_rows = BTreeSet::new();
    for s in &stored {
        let cell = &s.cell;
        schemaless_rows.insert(cell.key.row_key);
        match kind(cell) {
            ColumnKind::Child => assert_eq!(
                legacy_cells.get(&cell.key),
                Some(&cell.body),
                "{} in Schemaless, not in PostgreSQL",
                cell.key
            ),
            ColumnKind::Row => {
                let slot = latest
                    .entry((cell.key.row_key, cell.key.column.as_str().to_string()))
                    .or_insert(cell);
                if cell.key.ref_key > slot.key.ref_key {
                    *slot = cell;
                }
            }
        }
    }
    let by_key: BTreeMap<&CellKey, &Body> =
        stored.iter().map(|s| (&s.cell.key, &s.cell.body)).collect();
    let mut legacy_rows = BTreeSet::new();
    for (key, body) in &legacy_cells {
        legacy_rows.insert(key.row_key);
        assert_eq!(
            by_key.get(key).copied(),
            Some(body),
            "{key} in PostgreSQL, not in Schemaless"
        );
    }
    for ((row, column), cell) in &latest {
        let key = cell.key.clone();
        assert_eq!(
            legacy_cells.get(&key),
            Some(&cell.body),
            "the latest {column} of {row} in Schemaless ({key}) is not the legacy row"
        );
    }
    assert_eq!(legacy_rows, schemaless_rows, "the same trips on both sides");
    for row in legacy_rows.iter().take(40) {
        let a: Vec<Cell> = legacy
            .get_cells_for_row(row, ReadFrom::Master)
            .await
            .unwrap()
            .into_iter()
            .map(|s| s.cell)
            .collect();
        let b: Vec<Cell> = schemaless
            .get_cells_for_row(row, ReadFrom::Master)
            .await
            .unwrap()
            .into_iter()
            .map(|s| s.cell)
            .collect();
        assert_eq!(a, b, "get_cells_for_row({row})");
    }
    legacy_rows.len()
}

/// Cells the legacy tables hold, counting every version of a trip's BASE
/// (one per version number: each was written once) and every note.
async fn committed_cells(db: &LegacyDb) -> i64 {
    db.count("SELECT (SELECT coalesce(sum(version), 0) FROM trips)::int8 + (SELECT count(*) FROM trip_notes)")
        .await
}

async fn outbox_depth(pool: &sqlx::PgPool) -> u64 {
    mirror::status::outbox(pool).await.unwrap().0
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_writer_killed_right_after_its_commits_loses_nothing() {
    let db = LegacyDb::trips().await;
    db.apply_schemaless().await;
    let (config, text) = with_mirror(&db, "relay_in_app = false\nreverse_in_app = false");
    let facade = TripStore::connect(&config).await.unwrap();
    walk_to(&facade, &config, Mode::Mirror).await;
    let file = config_file(&text);

    // The writer relays nothing itself, so every commit it makes is one
    // the relay has not run for when it dies.
    let mut writer = mezzanine(
        file.path(),
        &[
            "mirror",
            "load",
            "--trips",
            "1000000",
            "--writers",
            "4",
            "--no-relay",
        ],
    )
    .stdout(Stdio::piped())
    .stderr(Stdio::null())
    .spawn()
    .unwrap();
    let mut lines = BufReader::new(writer.stdout.take().unwrap()).lines();
    let mut acked = 0u64;
    while acked < 600 {
        let line = lines.next().expect("the writer stopped early").unwrap();
        if let Some(n) = line.strip_prefix("acked ") {
            acked = n.parse().unwrap();
        }
    }
    writer.kill().unwrap(); // SIGKILL
    writer.wait().unwrap();

    let schemaless = facade.schemaless();
    assert!(
        all_schemaless_cells(schemaless).await.is_empty(),
        "nothing was relayed before the kill"
    );
    let trips = db.count("SELECT count(*) FROM trips").await as u64;
    assert!(
        trips >= acked,
        "{trips} trips in PostgreSQL, {acked} acknowledged"
    );
    // One outbox entry per committed cell: the legacy write and its entry
    // committed together or not at all, even for the writes the kill cut.
    let depth = outbox_depth(&db.pool).await;
    assert_eq!(depth as i64, committed_cells(&db).await);

    let out = run_ok(mezzanine(file.path(), &["mirror", "relay", "--once"]));
    assert!(
        out.contains(&format!(
            "relayed {depth} outbox entries (0 already in Schemaless), parked 0"
        )),
        "{out}"
    );
    assert_eq!(outbox_depth(&db.pool).await, 0);
    assert_eq!(all_schemaless_cells(schemaless).await.len() as u64, depth);
    // Relaying again finds nothing: nothing is delivered twice.
    let out = run_ok(mezzanine(file.path(), &["mirror", "relay", "--once"]));
    assert!(out.contains("relayed 0 outbox entries"), "{out}");
    let compared = assert_stores_equal(facade.legacy(), schemaless).await;
    assert_eq!(compared as u64, trips);
    facade.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_relays_share_the_outbox_and_duplicates_change_nothing() {
    let db = LegacyDb::trips().await;
    db.apply_schemaless().await;
    let (config, _) = with_mirror(
        &db,
        "relay_in_app = false\nreverse_in_app = false\nrelay_batch = 7",
    );
    let facade = TripStore::connect(&config).await.unwrap();
    walk_to(&facade, &config, Mode::Mirror).await;
    let mut source = TripCells::new(7);
    let mut written = Vec::new();
    for _ in 0..150 {
        let trip = source.new_trip();
        let done = source.complete(&trip[0]);
        facade.put_cells(trip.clone()).await.unwrap();
        facade.put_cell(done.clone()).await.unwrap();
        written.extend(trip);
        written.push(done);
    }
    // Every cell written again: the latest ones are already present in
    // PostgreSQL and go to the outbox a second time; a BASE v1 is
    // superseded by v2 and goes nowhere. Some cells are in Schemaless
    // already, too.
    let mut again = 0;
    for batch in written.chunks(50) {
        let results = facade.put_cells(batch.to_vec()).await.unwrap();
        for (cell, result) in batch.iter().zip(results) {
            if cell.key.column.as_str() == "BASE" && cell.key.ref_key.get() == 1 {
                assert_eq!(result, Ok(WriteOutcome::Superseded));
            } else {
                assert_eq!(result, Ok(WriteOutcome::AlreadyPresent));
                again += 1;
            }
        }
    }
    let schemaless = facade.schemaless();
    schemaless.put_cells(written[..60].to_vec()).await.unwrap();
    let depth = outbox_depth(&db.pool).await;
    assert_eq!(depth, (written.len() + again) as u64);

    // Two relays drain it together.
    let one = Relay::new(facade.legacy(), Arc::new(schemaless.clone()), &config).unwrap();
    let two = Relay::new(facade.legacy(), Arc::new(schemaless.clone()), &config).unwrap();
    let (a, b) = tokio::join!(one.drain(), two.drain());
    let (a, b) = (a.unwrap(), b.unwrap());
    assert_eq!(a.delivered + b.delivered, depth, "{a:?} {b:?}");
    assert_eq!(a.parked + b.parked, 0, "identical cells are no conflict");
    assert_eq!(
        a.already_present + b.already_present,
        depth - written.len() as u64 + 60,
        "each cell was written to Schemaless once: {a:?} {b:?}"
    );
    assert_eq!(outbox_depth(&db.pool).await, 0);
    assert_eq!(all_schemaless_cells(schemaless).await.len(), written.len());
    assert_eq!(assert_stores_equal(facade.legacy(), schemaless).await, 150);
    tokio::time::sleep(Duration::from_millis(300)).await;
    crate::backfill::backfill_now(facade.legacy(), schemaless, &config).await;

    // A cell Schemaless holds with another body: the entry is parked with
    // both bodies, and the next step forward waits for a person.
    let mut forged = source.new_trip().remove(0);
    schemaless.put_cell(forged.clone()).await.unwrap();
    let mut fields = forged.body.fields().clone();
    fields.insert("city_id".into(), json!(49));
    forged.body = Body::from(fields);
    assert_eq!(
        facade.put_cell(forged.clone()).await.unwrap(),
        WriteOutcome::Written
    );
    let moved = one.drain().await.unwrap();
    assert_eq!((moved.delivered, moved.parked), (0, 1));
    let error: String = sqlx::query_scalar("SELECT error FROM mezzanine.outbox_parked")
        .fetch_one(&db.pool)
        .await
        .unwrap();
    assert!(
        error.starts_with(&format!("conflict: Schemaless holds {}", forged.key))
            && error.contains("\"city_id\":49"),
        "{error}"
    );
    let err = facade.set_mode(&request(Mode::Shadow)).await.unwrap_err();
    assert!(
        err.to_string().contains("1 outbox entries are parked"),
        "{err}"
    );
    facade.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gates_wait_for_the_schema_and_the_outbox_and_status_shows_why() {
    let db = LegacyDb::trips().await;
    let text = format!(
        "{}\n[mirror]\nrelay_in_app = false\nreverse_in_app = false\n",
        db.config_text.replace(
            crate::harness::TEST_GATES,
            &format!("{}max_outbox_lag_ms = 300\n", crate::harness::TEST_GATES)
        )
    );
    let config = config::Config::parse(&text, "mirror-test.toml").expect("the test config");
    let facade = TripStore::connect(&config).await.unwrap();
    let err = facade.set_mode(&request(Mode::Mirror)).await.unwrap_err();
    assert!(
        err.to_string()
            .contains("the Schemaless schema is missing on 8 of 8 shards"),
        "{err}"
    );
    assert_eq!(facade.mode(), Mode::Legacy);
    db.apply_schemaless().await;
    walk_to(&facade, &config, Mode::Mirror).await;

    let mut source = TripCells::new(11);
    let err = facade.set_mode(&request(Mode::Shadow)).await.unwrap_err();
    assert!(
        err.to_string().contains("there is no backfill plan"),
        "{err}"
    );
    tokio::time::sleep(Duration::from_millis(300)).await;
    crate::backfill::backfill_now(facade.legacy(), facade.schemaless(), &config).await;
    let trip = source.new_trip();
    facade.put_cells(trip.clone()).await.unwrap();
    let depth = trip.len();
    // Not relayed for longer than the gate allows: a backlog.
    tokio::time::sleep(Duration::from_millis(400)).await;
    let err = facade.set_mode(&request(Mode::Shadow)).await.unwrap_err();
    assert!(
        err.to_string().contains(&format!(
            "the outbox still holds {depth} entries, the oldest 0."
        )) && err.to_string().contains("gates.max_outbox_lag_ms = 300"),
        "{err}"
    );
    let file = config_file(&text);
    let shown = run_ok(mezzanine(file.path(), &["mirror", "status"]));
    assert!(shown.contains("mode: mirror"), "{shown}");
    assert!(
        shown.contains(&format!("outbox: {depth} entries, the oldest")),
        "{shown}"
    );
    let json: serde_json::Value = serde_json::from_str(
        run_ok(mezzanine(file.path(), &["mirror", "status", "--json"])).trim(),
    )
    .unwrap();
    assert_eq!(json["outbox_depth"], json!(depth));
    assert_eq!(json["mode"], json!("mirror"));
    let text = run_ok(mezzanine(
        file.path(),
        &["mirror", "status", "--prometheus"],
    ));
    assert!(
        text.contains(&format!("mezzanine_outbox_depth {depth}"))
            && text.contains("mezzanine_mode{mode=\"mirror\"} 1"),
        "{text}"
    );

    facade.relay().drain().await.unwrap();
    // Writes in flight, younger than the gate's lag, do not hold it: on a
    // live system the outbox is never empty.
    facade.put_cells(source.new_trip()).await.unwrap();
    facade.set_mode(&request(Mode::Shadow)).await.unwrap();
    // In shadow, reads come from Schemaless, and a writer reads its own
    // write at once, relay or not.
    let trip = source.new_trip();
    facade.put_cells(trip.clone()).await.unwrap();
    let read = facade
        .get_cell_latest(&trip[0].key.row_key, &trip[0].key.column, ReadFrom::Master)
        .await
        .unwrap()
        .expect("read your write in shadow");
    assert_eq!(read.cell, trip[0]);
    facade.relay().drain().await.unwrap();
    walk_to(&facade, &config, Mode::Primary).await;
    // Entering primary set every shard's reverse offset at its head.
    let heads = facade.schemaless().log_heads().await.unwrap();
    let offsets: Vec<(i32, i64)> =
        sqlx::query_as("SELECT shard, added_id FROM mezzanine.reverse_offsets ORDER BY shard")
            .fetch_all(&db.pool)
            .await
            .unwrap();
    assert_eq!(
        offsets,
        heads
            .iter()
            .enumerate()
            .map(|(s, &h)| (s as i32, h as i64))
            .collect::<Vec<_>>()
    );
    assert!(heads.iter().sum::<u64>() >= depth as u64);
    let status = facade.mirror_status().await.unwrap();
    assert_eq!(status.reverse_lag(), 0);
    assert_eq!(
        assert_stores_equal(facade.legacy(), facade.schemaless()).await,
        3
    );
    facade.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_reverse_mirror_resumes_after_a_kill_and_ignores_late_older_cells() {
    let db = LegacyDb::trips().await;
    db.apply_schemaless().await;
    let (config, text) = with_mirror(
        &db,
        "relay_in_app = false\nreverse_in_app = false\nreverse_batch = 3\nreverse_poll_ms = 20",
    );
    let facade = TripStore::connect(&config).await.unwrap();
    walk_to(&facade, &config, Mode::Primary).await;
    let mut source = TripCells::new(5);
    let mut written = 0;
    for _ in 0..300 {
        let trip = source.new_trip();
        let done = source.complete(&trip[0]);
        written += trip.len() + 1;
        facade.put_cells(trip).await.unwrap();
        facade.put_cell(done).await.unwrap();
    }
    assert_eq!(db.count("SELECT count(*) FROM trips").await, 0);

    // The reverse mirror as a process, killed once it has applied some.
    let file = config_file(&text);
    let mut reverse = mezzanine(file.path(), &["mirror", "reverse"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let applied = db
            .count("SELECT coalesce(sum(applied), 0)::int8 FROM mezzanine.reverse_offsets")
            .await;
        if applied >= 60 {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the reverse mirror applied {applied}"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    reverse.kill().unwrap();
    reverse.wait().unwrap();
    // A COMMIT the process sent just before it died still lands once its
    // backend runs it: wait for the offsets to settle, then read them and
    // their `applied` counts in one snapshot (they commit together).
    let positions = || async {
        sqlx::query_as::<_, (i32, i64, i64)>(
            "SELECT shard, added_id, applied FROM mezzanine.reverse_offsets ORDER BY shard",
        )
        .fetch_all(&db.pool)
        .await
        .unwrap()
    };
    let mut settled = positions().await;
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        assert!(Instant::now() < deadline, "the offsets never settled");
        tokio::time::sleep(Duration::from_millis(300)).await;
        let now = positions().await;
        if now == settled {
            break;
        }
        settled = now;
    }
    let applied_before = settled.iter().map(|&(_, _, a)| a as usize).sum::<usize>();
    assert!(
        applied_before < written,
        "killed midway: {applied_before} of {written}"
    );

    // What the offsets cover is in PostgreSQL: they commit together.
    let offsets: BTreeMap<u32, i64> = settled.iter().map(|&(s, a, _)| (s as u32, a)).collect();
    let legacy = facade.legacy();
    let schemaless = facade.schemaless();
    let mut covered = 0;
    for stored in all_schemaless_cells(schemaless).await {
        let shard = schemaless::routing::shard_of(&stored.cell.key.row_key, 8);
        if (stored.added_id as i64) <= offsets[&shard] {
            covered += 1;
            let there = legacy
                .get_cell_latest(
                    &stored.cell.key.row_key,
                    &stored.cell.key.column,
                    ReadFrom::Master,
                )
                .await
                .unwrap()
                .unwrap_or_else(|| {
                    panic!("{} is below its offset, not in PostgreSQL", stored.cell.key)
                });
            assert!(there.cell.key.ref_key >= stored.cell.key.ref_key);
        }
    }
    assert_eq!(covered, applied_before);

    // Restarted, it applies exactly the rest: nothing twice.
    let out = run_ok(mezzanine(file.path(), &["mirror", "reverse", "--once"]));
    assert!(
        out.contains(&format!(
            "applied {} change-log cells to the legacy tables (0 changed nothing)",
            written - applied_before
        )),
        "{out}"
    );
    assert_eq!(assert_stores_equal(legacy, schemaless).await, 300);

    // A late, older version of a row changes nothing in PostgreSQL.
    let trip = source.new_trip();
    facade.put_cells(trip.clone()).await.unwrap();
    let mut newer = source.complete(&trip[0]);
    newer.key.ref_key = schemaless::RefKey::new(5).unwrap();
    facade.put_cell(newer.clone()).await.unwrap();
    facade.reverse().catch_up().await.unwrap();
    let mut older = newer.clone();
    older.key.ref_key = schemaless::RefKey::new(4).unwrap();
    let mut fields = older.body.fields().clone();
    fields.insert("status".into(), json!("disputed"));
    older.body = Body::from(fields);
    assert_eq!(facade.put_cell(older).await.unwrap(), WriteOutcome::Written);
    let late = facade.reverse().catch_up().await.unwrap();
    assert_eq!((late.applied, late.already_there), (1, 1), "{late:?}");
    let (status, version): (String, i64) =
        sqlx::query_as("SELECT status, version FROM trips WHERE uuid = $1")
            .bind(trip[0].key.row_key.uuid())
            .fetch_one(&db.pool)
            .await
            .unwrap();
    assert_eq!((status.as_str(), version), ("completed", 5));

    // A cell the legacy model refuses cannot even be written in primary.
    let orphan = Cell::new(
        RowKey::random(),
        schemaless::Column::new("NOTES").unwrap(),
        schemaless::RefKey::new(1).unwrap(),
        Body::from_value(
            json!({"author": "x", "text": "y", "at": "2020-01-01T00:00:00Z", "mood": 1}),
        )
        .unwrap(),
    );
    let err = facade.put_cell(orphan).await.unwrap_err();
    assert!(err.to_string().contains("no field \"mood\""), "{err}");

    // A facade that runs the reverse mirror itself.
    let (in_app, _) = with_mirror(&db, "relay_in_app = false\nreverse_poll_ms = 20");
    let app = TripStore::connect(&in_app).await.unwrap();
    let trip = source.new_trip();
    app.put_cells(trip.clone()).await.unwrap();
    let uuid = trip[0].key.row_key.uuid();
    let deadline = Instant::now() + Duration::from_secs(30);
    while db
        .count(&format!("SELECT count(*) FROM trips WHERE uuid = '{uuid}'"))
        .await
        == 0
    {
        assert!(
            Instant::now() < deadline,
            "the in-app reverse mirror never applied {uuid}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    app.close().await;
    facade.reverse().catch_up().await.unwrap();
    assert_eq!(assert_stores_equal(legacy, schemaless).await, 302);

    // A conflict (the legacy tables hold another body at the address) is
    // parked with both bodies, never counted as applied, and stays parked
    // when retried.
    let note = |text: &str| {
        Cell::new(
            trip[0].key.row_key,
            schemaless::Column::new("NOTES").unwrap(),
            schemaless::RefKey::new(99).unwrap(),
            Body::from_value(json!({"author": "ops", "text": text, "at": "2020-01-01T00:00:00Z"}))
                .unwrap(),
        )
    };
    legacy.put_cell(note("legacy side")).await.unwrap();
    schemaless.put_cell(note("schemaless side")).await.unwrap();
    let conflicted = facade.reverse().catch_up().await.unwrap();
    assert_eq!(
        (conflicted.applied, conflicted.parked, conflicted.conflicts),
        (0, 1, 1),
        "{conflicted:?}"
    );
    let (body, legacy_body, error): (String, String, String) = sqlx::query_as(
        "SELECT body, legacy_body, error FROM mezzanine.reverse_parked WHERE ref_key = 99",
    )
    .fetch_one(&db.pool)
    .await
    .unwrap();
    assert!(body.contains("schemaless side"), "{body}");
    assert!(legacy_body.contains("legacy side"), "{legacy_body}");
    assert!(error.starts_with("conflict"), "{error}");
    let kept = legacy
        .get_cell(&note("x").key, ReadFrom::Master)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(kept.cell.body.fields()["text"], json!("legacy side"));
    assert_eq!(
        mirror::reverse::retry_parked(legacy).await.unwrap(),
        (0, 1),
        "a conflict retried is still a conflict"
    );
    facade.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_stopped_schemaless_master_only_grows_the_outbox() {
    let cluster = DevCluster::private(Spec::free_ports(&["a"], 1).unwrap())
        .await
        .unwrap();
    let (config, pool) = private_trips(
        &cluster,
        "down",
        "[storage]\nconnect_timeout_ms = 1000\n[mirror]\nretry_backoff_ms = 20\nmax_backoff_ms = 200",
    )
    .await;
    let facade = Arc::new(TripStore::connect(&config).await.unwrap());
    walk_to(&facade, &config, Mode::Mirror).await;
    let stop = Arc::new(AtomicBool::new(false));
    let acked = Arc::new(AtomicU64::new(0));
    let writers: Vec<_> = (0..3)
        .map(|w| {
            let (facade, stop, acked) = (facade.clone(), stop.clone(), acked.clone());
            tokio::spawn(async move {
                let mut source = TripCells::new(100 + w);
                while !stop.load(Ordering::Relaxed) {
                    let trip = source.new_trip();
                    let done = source.complete(&trip[0]);
                    facade
                        .put_cells(trip)
                        .await
                        .expect("legacy writes keep working");
                    facade
                        .put_cell(done)
                        .await
                        .expect("legacy writes keep working");
                    acked.fetch_add(1, Ordering::Relaxed);
                }
            })
        })
        .collect();
    // Writing, and relayed, before the master goes.
    let deadline = Instant::now() + Duration::from_secs(30);
    while acked.load(Ordering::Relaxed) < 20
        || mirror::WorkerStats::get(&facade.relay_stats().cells) == 0
    {
        assert!(Instant::now() < deadline, "no trip was written and relayed");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }

    cluster.kill("a-master").unwrap();
    let acked_at_kill = acked.load(Ordering::Relaxed);
    let mut deepest = 0;
    let down_since = Instant::now();
    let stats = facade.relay_stats();
    // Down for three seconds at least, and until the relay has seen it
    // fail (a connection attempt gives up after connect_timeout_ms).
    while down_since.elapsed() < Duration::from_secs(3)
        || mirror::WorkerStats::get(&stats.failures) == 0
    {
        assert!(
            down_since.elapsed() < Duration::from_secs(60),
            "the relay never failed"
        );
        deepest = deepest.max(outbox_depth(&pool).await);
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let acked_while_down = acked.load(Ordering::Relaxed) - acked_at_kill;
    assert!(
        acked_while_down >= 30,
        "only {acked_while_down} trips while Schemaless was down"
    );
    assert!(
        deepest >= 2 * acked_while_down,
        "the outbox held at most {deepest} entries"
    );
    assert!(stats.last_error().is_some());
    let status = facade.mirror_status().await.unwrap();
    assert!(status.outbox_oldest_secs.unwrap() > 1.0, "{status:?}");

    cluster.start("a-master").await.unwrap();
    // The relay recovers while the writers still write.
    let relayed = mirror::WorkerStats::get(&stats.cells);
    let deadline = Instant::now() + Duration::from_secs(60);
    while mirror::WorkerStats::get(&stats.cells) == relayed {
        assert!(Instant::now() < deadline, "the relay never recovered");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    stop.store(true, Ordering::Relaxed);
    for w in writers {
        w.await.unwrap();
    }
    let deadline = Instant::now() + Duration::from_secs(60);
    while outbox_depth(&pool).await > 0 {
        assert!(Instant::now() < deadline, "the outbox never drained");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let trips = assert_stores_equal(facade.legacy(), facade.schemaless()).await;
    assert_eq!(trips as u64, acked.load(Ordering::Relaxed));
    facade.close().await;
    pool.close().await;
}
