//! Deletes through the facade: a tombstone put in any mode deletes what it
//! names from the legacy tables too (directly before `primary`, through
//! the reverse mirror in it), so both stores read the same; a tombstone
//! the legacy tables cannot follow is refused before any store takes it.

use schemaless::tombstone::{cell_tombstone, row_tombstone};
use schemaless::{Body, Cell, CellStore, Column, ReadFrom, RefKey, RowKey, WriteOutcome};
use serde_json::json;
use tripstore::{Mode, TripStore};

use crate::harness::LegacyDb;
use crate::mirror::{walk_to, with_mirror};

/// A trip's BASE cell at version 1.
fn trip(row: RowKey) -> Cell {
    Cell::new(
        row,
        Column::new("BASE").unwrap(),
        RefKey::new(1).unwrap(),
        Body::from_value(json!({
            "driver_uuid": "6f1c1a0e-8a3b-4a55-9d1e-3c2b1a0f9e8d",
            "rider_uuid": "7f1c1a0e-8a3b-4a55-9d1e-3c2b1a0f9e8d",
            "city_id": 3,
            "status": "requested",
            "fare": null,
            "currency": "USD",
            "distance_km": null,
            "requested_at": "2015-03-08T07:30:00.000000Z",
            "completed_at": null,
        }))
        .unwrap(),
    )
}

/// A note of `row` at `seq`.
fn note(row: RowKey, seq: i64) -> Cell {
    Cell::new(
        row,
        Column::new("NOTES").unwrap(),
        RefKey::new(seq).unwrap(),
        Body::from_value(
            json!({"author": "ops", "text": format!("note {seq}"), "at": "2015-03-08T07:31:00Z"}),
        )
        .unwrap(),
    )
}

/// A trip with three notes, put through the facade.
async fn put_trip(facade: &TripStore) -> RowKey {
    let row = RowKey::random();
    let mut cells = vec![trip(row)];
    cells.extend((1..=3).map(|seq| note(row, seq)));
    for result in facade.put_cells(cells).await.unwrap() {
        assert_eq!(result.unwrap(), WriteOutcome::Written);
    }
    row
}

/// What PostgreSQL holds of `row`: whether its trip row is there, and the
/// seqs of its notes.
async fn in_postgresql(db: &LegacyDb, row: RowKey) -> (bool, Vec<i64>) {
    let trip: i64 = sqlx::query_scalar("SELECT count(*) FROM trips WHERE uuid = $1")
        .bind(row.uuid())
        .fetch_one(&db.pool)
        .await
        .unwrap();
    let notes: Vec<i64> = sqlx::query_scalar(
        "SELECT n.seq FROM trip_notes n JOIN trips t ON t.id = n.trip_id WHERE t.uuid = $1 ORDER BY n.seq",
    )
    .bind(row.uuid())
    .fetch_all(&db.pool)
    .await
    .unwrap();
    (trip == 1, notes)
}

/// `row` reads the same from PostgreSQL and from Schemaless as the facade
/// reads it (through its tombstones): the latest cell of every column.
async fn reads_alike(facade: &TripStore, row: RowKey) -> Vec<Cell> {
    let legacy: Vec<Cell> = facade
        .legacy()
        .get_cells_for_row(&row, ReadFrom::Master)
        .await
        .unwrap()
        .into_iter()
        .map(|s| s.cell)
        .collect();
    let schemaless: Vec<Cell> = facade
        .schemaless_reads()
        .get_cells_for_row(&row, ReadFrom::Master)
        .await
        .unwrap()
        .into_iter()
        .map(|s| s.cell)
        .collect();
    assert_eq!(
        legacy, schemaless,
        "{row} reads otherwise from the two stores"
    );
    legacy
}

/// The trips database with its Schemaless schema, a config whose facades
/// run neither relay nor reverse mirror (the tests drive them), its
/// tombstone column, and a facade.
async fn facade_driven() -> (LegacyDb, config::Config, Column, TripStore) {
    let db = LegacyDb::trips().await;
    db.apply_schemaless().await;
    let (config, _) = with_mirror(&db, "relay_in_app = false\nreverse_in_app = false");
    let deleted = Column::new(&config.capture.tombstone_column).unwrap();
    let facade = TripStore::connect(&config).await.unwrap();
    (db, config, deleted, facade)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn tombstones_put_through_the_facade_delete_from_postgresql_in_every_mode() {
    let (db, config, deleted, facade) = facade_driven().await;
    let notes = Column::new("NOTES").unwrap();

    // `legacy`: the row goes with its child rows (the foreign keys have no
    // ON DELETE CASCADE), and a second delivery deletes nothing.
    let row = put_trip(&facade).await;
    let tombstone = row_tombstone(row, &deleted);
    assert_eq!(
        facade.put_cell(tombstone.clone()).await.unwrap(),
        WriteOutcome::Written
    );
    assert_eq!(in_postgresql(&db, row).await, (false, vec![]));
    assert_eq!(
        facade.put_cell(tombstone).await.unwrap(),
        WriteOutcome::AlreadyPresent
    );

    // `mirror`: deleted in PostgreSQL and carried by the outbox.
    walk_to(&facade, &config, Mode::Mirror).await;
    let (gone, kept) = (put_trip(&facade).await, put_trip(&facade).await);
    facade
        .put_cells(vec![
            row_tombstone(gone, &deleted),
            cell_tombstone(kept, &deleted, &notes, 2),
        ])
        .await
        .unwrap();
    assert_eq!(in_postgresql(&db, gone).await, (false, vec![]));
    assert_eq!(in_postgresql(&db, kept).await, (true, vec![1, 3]));
    facade.relay().drain().await.unwrap();
    assert!(reads_alike(&facade, gone).await.is_empty());
    let cells = reads_alike(&facade, kept).await;
    assert_eq!(cells.len(), 2, "{cells:?}");
    let tombstones = facade
        .schemaless()
        .get_column_cells(&[gone, kept], &deleted, ReadFrom::Master)
        .await
        .unwrap();
    assert_eq!(tombstones.len(), 2, "the relay delivered both tombstones");

    // `primary`: the reverse mirror deletes, once.
    walk_to(&facade, &config, Mode::Primary).await;
    let (gone, kept) = (put_trip(&facade).await, put_trip(&facade).await);
    facade.reverse().catch_up().await.unwrap();
    assert_eq!(in_postgresql(&db, gone).await, (true, vec![1, 2, 3]));
    facade
        .put_cells(vec![
            row_tombstone(gone, &deleted),
            cell_tombstone(kept, &deleted, &notes, 3),
        ])
        .await
        .unwrap();
    let applied = facade.reverse().catch_up().await.unwrap();
    assert_eq!(
        (applied.applied, applied.skipped, applied.parked),
        (2, 0, 0),
        "{applied:?}"
    );
    assert_eq!(in_postgresql(&db, gone).await, (false, vec![]));
    assert_eq!(in_postgresql(&db, kept).await, (true, vec![1, 2]));
    assert!(reads_alike(&facade, gone).await.is_empty());
    assert_eq!(reads_alike(&facade, kept).await.len(), 2);
    assert_eq!(
        facade
            .put_cell(row_tombstone(gone, &deleted))
            .await
            .unwrap(),
        WriteOutcome::AlreadyPresent
    );
    assert_eq!(facade.reverse().catch_up().await.unwrap().applied, 0);

    // Reads of the tombstone column are not replayed: the legacy tables
    // keep no tombstones (they answer none), so a replay there would find
    // a false mismatch. (A facade sampling every read; only the BASE read
    // is replayed and compared.)
    let (sampling_config, _) = with_mirror(
        &db,
        "relay_in_app = false\nreverse_in_app = false\n\n[verify]\nsample_rate = 1.0\nmax_samples_per_sec = 100000",
    );
    let sampling = TripStore::connect(&sampling_config).await.unwrap();
    assert_eq!(sampling.mode(), Mode::Primary);
    let seen = sampling
        .get_cell(&row_tombstone(gone, &deleted).key, ReadFrom::Master)
        .await
        .unwrap();
    assert!(seen.is_some(), "Schemaless holds the tombstone");
    assert!(sampling
        .get_cell_latest(&kept, &Column::new("BASE").unwrap(), ReadFrom::Master)
        .await
        .unwrap()
        .is_some());
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    while sampling.sampler().totals().samples == 0 {
        assert!(std::time::Instant::now() < deadline, "no sample compared");
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    tokio::time::sleep(std::time::Duration::from_millis(500)).await;
    let totals = sampling.sampler().totals();
    assert_eq!(
        (
            totals.replays,
            totals.samples,
            totals.mismatches,
            totals.replay_errors
        ),
        (1, 1, 0, 0),
        "{totals:?}"
    );
    sampling.close().await;

    // Refused before any store takes them: one version of a row column
    // (PostgreSQL keeps only the current one), a ref key that is not the
    // deletion's own, a body with more than a tombstone's fields.
    let base = Column::new("BASE").unwrap();
    let mut wrong_ref_key = row_tombstone(kept, &deleted);
    wrong_ref_key.key.ref_key = RefKey::new(7).unwrap();
    let mut extra = row_tombstone(kept, &deleted);
    extra.body = Body::from_value(json!({"row": true, "why": "gdpr"})).unwrap();
    for (bad, says) in [
        (cell_tombstone(kept, &deleted, &base, 1), "is a row column"),
        (wrong_ref_key, "derived from what it deletes"),
        (extra, "and nothing else"),
    ] {
        let err = facade.put_cell(bad.clone()).await.unwrap_err();
        assert!(err.to_string().contains(says), "{err}");
        assert_eq!(
            facade
                .schemaless()
                .get_cell(&bad.key, ReadFrom::Master)
                .await
                .unwrap(),
            None,
            "{} was refused, yet written",
            bad.key
        );
    }
    assert_eq!(in_postgresql(&db, kept).await, (true, vec![1, 2]));

    // A row another table still refers to: Schemaless took the delete, the
    // reverse mirror parks it with PostgreSQL's reason, the row stays.
    sqlx::raw_sql(
        "CREATE TABLE trip_ratings (trip_id bigint NOT NULL REFERENCES trips (id), stars int);
         INSERT INTO trip_ratings SELECT id, 5 FROM trips",
    )
    .execute(&db.pool)
    .await
    .unwrap();
    facade
        .put_cell(row_tombstone(kept, &deleted))
        .await
        .unwrap();
    let applied = facade.reverse().catch_up().await.unwrap();
    assert_eq!((applied.applied, applied.parked), (0, 1), "{applied:?}");
    let error: String = sqlx::query_scalar("SELECT error FROM mezzanine.reverse_parked")
        .fetch_one(&db.pool)
        .await
        .unwrap();
    assert!(error.contains("trip_ratings"), "{error}");
    assert_eq!(in_postgresql(&db, kept).await, (true, vec![1, 2]));
    facade.close().await;
}

/// `cell` again at `ref_key`, completed: a new version of the trip.
fn completed(cell: &Cell, ref_key: i64) -> Cell {
    let mut fields = cell.body.fields().clone();
    fields.insert("status".into(), json!("completed"));
    Cell::new(
        cell.key.row_key,
        cell.key.column.clone(),
        RefKey::new(ref_key).unwrap(),
        Body::from(fields),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn in_primary_a_write_a_tombstone_would_hide_is_refused_and_writes_nothing() {
    let (db, config, deleted, facade) = facade_driven().await;
    let notes = Column::new("NOTES").unwrap();
    walk_to(&facade, &config, Mode::Primary).await;
    let (gone, kept) = (put_trip(&facade).await, put_trip(&facade).await);
    facade
        .put_cells(vec![
            row_tombstone(gone, &deleted),
            cell_tombstone(kept, &deleted, &notes, 2),
        ])
        .await
        .unwrap();
    facade.reverse().catch_up().await.unwrap();
    assert_eq!(in_postgresql(&db, gone).await, (false, vec![]));

    // A new version of the deleted trip would be acknowledged and never
    // read again (its tombstone hides every cell of the row): refused,
    // nothing written to either store.
    let again = completed(&trip(gone), 2);
    let err = facade.put_cell(again.clone()).await.unwrap_err();
    assert!(
        matches!(&err, schemaless::Error::InvalidInput { field, message, .. }
            if field == "cells[0].row_key" && message.contains("retires the key")),
        "{err}"
    );
    // A note at the deleted note's address, in a batch with a good one.
    let reused = Cell::new(
        kept,
        notes.clone(),
        RefKey::new(2).unwrap(),
        Body::from_value(json!({"author": "ops", "text": "again", "at": "2015-03-08T07:32:00Z"}))
            .unwrap(),
    );
    let err = facade
        .put_cells(vec![note(kept, 4), reused.clone()])
        .await
        .unwrap_err();
    assert!(
        matches!(&err, schemaless::Error::InvalidInput { field, message, .. }
            if field == "cells[1].ref_key" && message.contains("not reused")),
        "{err}"
    );
    for key in [&again.key, &note(kept, 4).key] {
        assert_eq!(
            facade
                .schemaless()
                .get_cell(key, ReadFrom::Master)
                .await
                .unwrap(),
            None,
            "{key} was refused, yet written"
        );
    }
    let stored = facade
        .schemaless()
        .get_cell(&reused.key, ReadFrom::Master)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        stored.cell.body.fields().get("text"),
        Some(&json!("note 2")),
        "the deleted note stays as it was"
    );
    let applied = facade.reverse().catch_up().await.unwrap();
    assert_eq!((applied.applied, applied.parked), (0, 0), "{applied:?}");
    assert_eq!(in_postgresql(&db, gone).await, (false, vec![]));
    assert_eq!(in_postgresql(&db, kept).await, (true, vec![1, 3]));

    // Written again as it was before the deletion (a retry of a write
    // whose answer was lost): AlreadyPresent, as before. Other addresses
    // of the row with a deleted note are open.
    assert_eq!(
        facade.put_cell(trip(gone)).await.unwrap(),
        WriteOutcome::AlreadyPresent
    );
    assert_eq!(
        facade.put_cell(note(kept, 4)).await.unwrap(),
        WriteOutcome::Written
    );
    facade.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn in_mirror_a_row_written_again_after_its_delete_is_parked_not_hidden() {
    let (db, config, deleted, facade) = facade_driven().await;
    walk_to(&facade, &config, Mode::Mirror).await;
    let row = put_trip(&facade).await;
    facade.put_cell(row_tombstone(row, &deleted)).await.unwrap();
    facade.relay().drain().await.unwrap();

    // PostgreSQL knows nothing of the deletion any more: the trip is
    // written there again. Schemaless would hide it for good; the relay
    // parks it instead, which holds the next step of the cutover.
    let again = completed(&trip(row), 2);
    assert_eq!(
        facade.put_cell(again.clone()).await.unwrap(),
        WriteOutcome::Written
    );
    assert_eq!(in_postgresql(&db, row).await, (true, vec![]));
    let moved = facade.relay().drain().await.unwrap();
    assert_eq!((moved.delivered, moved.parked), (0, 1), "{moved:?}");
    let error: String = sqlx::query_scalar("SELECT error FROM mezzanine.outbox_parked")
        .fetch_one(&db.pool)
        .await
        .unwrap();
    assert!(error.contains("retires the key"), "{error}");
    assert_eq!(
        facade
            .schemaless()
            .get_cell(&again.key, ReadFrom::Master)
            .await
            .unwrap(),
        None
    );
    crate::mirror::backfill_in_mirror(&facade, &config).await;
    let err = facade
        .set_mode(&crate::mirror::request(Mode::Shadow))
        .await
        .unwrap_err();
    assert!(err.to_string().contains("parked"), "{err}");
    facade.close().await;
}

/// The parked outbox entries' keys and reasons, oldest first.
async fn parked_entries(db: &LegacyDb) -> Vec<(String, i64, String)> {
    sqlx::query_as("SELECT column_name, ref_key, error FROM mezzanine.outbox_parked ORDER BY id")
        .fetch_all(&db.pool)
        .await
        .unwrap()
}

/// The relay's counts that tell a delivery from a cell kept back:
/// (delivered, already present, parked, retired).
fn counts(moved: &mirror::relay::Moved) -> (u64, u64, u64, u64) {
    (
        moved.delivered,
        moved.already_present,
        moved.parked,
        moved.retired,
    )
}

/// The same cell written before a deletion and again after it: in
/// Schemaless both are the one stored cell, hidden by the tombstone. The
/// first, delivered again (a relay that died before its commit), is
/// already there; the second would be taken as already there too and
/// stay hidden while PostgreSQL holds the row again. The outbox order
/// tells them apart: the rewrite is parked, a whole row's and a child
/// address's alike, which holds the step to `shadow`; deleted again and
/// retried, it is dropped and the step goes.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn in_mirror_the_same_cell_written_again_after_its_delete_is_parked_not_taken_as_delivered_again(
) {
    let (db, config, deleted, facade) = facade_driven().await;
    let notes = Column::new("NOTES").unwrap();
    walk_to(&facade, &config, Mode::Mirror).await;
    let (gone, kept) = (put_trip(&facade).await, put_trip(&facade).await);
    // The first write's entry, to be delivered again later.
    let (first, body): (i64, String) = sqlx::query_as(
        "SELECT id, body FROM mezzanine.outbox WHERE row_key = $1 AND column_name = 'BASE'",
    )
    .bind(gone.uuid())
    .fetch_one(&db.pool)
    .await
    .unwrap();
    facade.relay().drain().await.unwrap();
    facade
        .put_cells(vec![
            row_tombstone(gone, &deleted),
            cell_tombstone(kept, &deleted, &notes, 2),
        ])
        .await
        .unwrap();
    let moved = facade.relay().drain().await.unwrap();
    assert_eq!(counts(&moved), (2, 0, 0, 0), "{moved:?}");

    // Delivered again after the deletion landed: written before it, so
    // already there, and hidden as it should be.
    sqlx::query(
        "INSERT INTO mezzanine.outbox (id, row_key, column_name, ref_key, body) VALUES ($1, $2, 'BASE', 1, $3)",
    )
    .bind(first)
    .bind(gone.uuid())
    .bind(&body)
    .execute(&db.pool)
    .await
    .unwrap();
    let moved = facade.relay().drain().await.unwrap();
    assert_eq!(counts(&moved), (1, 1, 0, 0), "{moved:?}");

    // Written again through the facade as they were: PostgreSQL holds
    // them again, and the relay parks both instead of taking them as
    // already there.
    for cell in [trip(gone), note(kept, 2)] {
        assert_eq!(facade.put_cell(cell).await.unwrap(), WriteOutcome::Written);
    }
    assert_eq!(in_postgresql(&db, gone).await, (true, vec![]));
    assert_eq!(in_postgresql(&db, kept).await, (true, vec![1, 2, 3]));
    let moved = facade.relay().drain().await.unwrap();
    assert_eq!(counts(&moved), (0, 0, 2, 0), "{moved:?}");
    let parked = parked_entries(&db).await;
    assert_eq!(
        parked
            .iter()
            .map(|(c, r, _)| (c.as_str(), *r))
            .collect::<Vec<_>>(),
        [("BASE", 1), ("NOTES", 2)]
    );
    for (_, _, reason) in &parked {
        assert!(
            reason.contains("after its deletion") && reason.contains("retires the key"),
            "{reason}"
        );
    }
    let visible = facade.schemaless_reads();
    assert_eq!(
        visible
            .get_cell(&trip(gone).key, ReadFrom::Master)
            .await
            .unwrap(),
        None
    );
    assert_eq!(
        visible
            .get_cell(&note(kept, 2).key, ReadFrom::Master)
            .await
            .unwrap(),
        None
    );
    crate::mirror::backfill_in_mirror(&facade, &config).await;
    let err = facade
        .set_mode(&crate::mirror::request(Mode::Shadow))
        .await
        .unwrap_err();
    assert!(err.to_string().contains("parked"), "{err}");

    // Meant to stay deleted: deleted again, then retried. PostgreSQL no
    // longer holds them, the stores agree, and nothing holds the step.
    facade
        .put_cells(vec![
            row_tombstone(gone, &deleted),
            cell_tombstone(kept, &deleted, &notes, 2),
        ])
        .await
        .unwrap();
    facade.relay().drain().await.unwrap();
    assert_eq!(
        mirror::status::retry_parked_outbox(&db.pool).await.unwrap(),
        2
    );
    let moved = facade.relay().drain().await.unwrap();
    assert_eq!(counts(&moved), (0, 0, 0, 2), "{moved:?}");
    let stats = facade.relay().stats();
    assert_eq!(mirror::WorkerStats::get(&stats.retired), 2);
    assert!(parked_entries(&db).await.is_empty());
    assert_eq!(reads_alike(&facade, gone).await, vec![]);
    // The trip and its latest note, alike.
    assert_eq!(reads_alike(&facade, kept).await.len(), 2);
    facade
        .set_mode(&crate::mirror::request(Mode::Shadow))
        .await
        .unwrap();
    facade.close().await;
}

/// A deletion applied by the reverse mirror in `primary` retires the key
/// for the outbox too: after the step back to `shadow`, the deleted trip
/// written again as it was is parked, not taken as delivered.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_row_deleted_in_primary_and_written_again_after_the_step_back_is_parked() {
    let (db, config, deleted, facade) = facade_driven().await;
    walk_to(&facade, &config, Mode::Primary).await;
    let row = put_trip(&facade).await;
    facade.put_cell(row_tombstone(row, &deleted)).await.unwrap();
    facade.reverse().catch_up().await.unwrap();
    assert_eq!(in_postgresql(&db, row).await, (false, vec![]));

    facade
        .set_mode(&crate::mirror::request(Mode::Shadow))
        .await
        .unwrap();
    assert_eq!(
        facade.put_cell(trip(row)).await.unwrap(),
        WriteOutcome::Written
    );
    assert_eq!(in_postgresql(&db, row).await, (true, vec![]));
    let moved = facade.relay().drain().await.unwrap();
    assert_eq!(counts(&moved), (0, 0, 1, 0), "{moved:?}");
    let parked = parked_entries(&db).await;
    assert_eq!(parked.len(), 1, "{parked:?}");
    assert!(parked[0].2.contains("after its deletion"), "{parked:?}");
    facade.close().await;
}

/// A note of trip `k` at `seq`, as an app inserts it.
fn insert_note(k: uuid::Uuid, seq: i64) -> String {
    format!(
        "INSERT INTO trip_notes (trip_id, seq, author, body, created_at) VALUES \
         ((SELECT id FROM trips WHERE uuid = '{k}'), {seq}, 'ops', 'note', '2026-12-03 10:00:00Z');\n"
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_delete_by_row_key_through_the_proxy_is_a_tombstone_answered_as_postgresql_answers() {
    use crate::proxy::{psql, sqlstate, ProxyProcess};
    use crate::proxy_writes::{latest, trip};

    let (db, facade, file) = crate::proxy_writes::primary().await;
    let proxy = ProxyProcess::start(file.path(), "127.0.0.1:0");
    let url = proxy.url(&db);
    let direct = crate::harness::cluster().postgres_url(&db.name);
    // `k` through the proxy (into Schemaless, then PostgreSQL by the
    // reverse mirror), with two notes; `d`, its twin, straight into
    // PostgreSQL.
    let (k, d) = (uuid::Uuid::new_v4(), uuid::Uuid::new_v4());
    let script = format!(
        "\\set ON_ERROR_STOP 1\n{};\n{}{}",
        trip(k),
        insert_note(k, 1),
        insert_note(k, 2)
    );
    let (ok, out, err) = psql(&url, &script);
    assert!(ok, "{out}{err}");
    let (ok, out, err) = psql(
        &direct,
        &format!("\\set ON_ERROR_STOP 1\n{};\n{}", trip(d), insert_note(d, 1)),
    );
    assert!(ok, "{out}{err}");
    facade.reverse().catch_up().await.unwrap();
    assert_eq!(
        in_postgresql(&db, RowKey::from(k)).await,
        (true, vec![1, 2])
    );

    // A child row, by its parent's UUID and its ref key: its tombstone,
    // answered as PostgreSQL answers the same DELETE of the twin's note.
    let delete_note = |u: uuid::Uuid| {
        format!(
            "\\set ON_ERROR_STOP 1\nDELETE FROM trip_notes n WHERE n.trip_id = \
             (SELECT id FROM trips WHERE uuid = '{u}') AND n.seq = 1 \
             RETURNING n.seq, n.author, n.body, n.created_at;\n"
        )
    };
    let (ok, through, err) = psql(&url, &delete_note(k));
    assert!(ok, "{through}{err}");
    let (ok, twin, err) = psql(&direct, &delete_note(d));
    assert!(ok, "{twin}{err}");
    assert_eq!(through, twin);
    assert!(twin.contains("DELETE 1"), "{twin}");
    let (ok, again, err) = psql(&url, &delete_note(k));
    assert!(ok && again.contains("DELETE 0"), "{again}{err}");
    let notes: Vec<i64> = facade
        .get_column_cells(
            &[RowKey::from(k)],
            &Column::new("NOTES").unwrap(),
            ReadFrom::Master,
        )
        .await
        .unwrap()
        .iter()
        .map(|s| s.cell.key.ref_key.get())
        .collect();
    assert_eq!(notes, [2], "the facade reads the note deleted");
    facade.reverse().catch_up().await.unwrap();
    assert_eq!(in_postgresql(&db, RowKey::from(k)).await, (true, vec![2]));

    // A condition that does not hold on the latest cell, and a row that is
    // not there: 0 rows, nothing written.
    let pool = sqlx::postgres::PgPoolOptions::new()
        .max_connections(1)
        .connect(&url)
        .await
        .unwrap();
    for (sql, key) in [
        ("DELETE FROM trips WHERE uuid = $1 AND status = 'done'", k),
        ("DELETE FROM trips WHERE uuid = $1", uuid::Uuid::new_v4()),
    ] {
        let done = sqlx::query(sql).bind(key).execute(&pool).await.unwrap();
        assert_eq!(done.rows_affected(), 0, "{sql}");
    }
    assert!(latest(&facade, k, "BASE").await.is_some());

    // A row its notes still refer to (trip_notes' foreign key does not
    // cascade): PostgreSQL's own refusal, the same through the proxy as
    // on the twin, and nothing written; the notes first, then the row.
    // Before, the proxy deleted the row with its notes.
    let (ok, out, err) = psql(&direct, &insert_note(d, 2));
    assert!(ok, "{out}{err}");
    // PostgreSQL's fields too: the detail naming the parent's id (the
    // twins' ids differ), the child table, its schema, the constraint.
    let refused = |url: &str, u: uuid::Uuid| {
        let (ok, _, err) = psql(
            url,
            &format!(
                "\\set ON_ERROR_STOP 1\n\\set VERBOSITY verbose\nDELETE FROM trips WHERE uuid = '{u}';\n"
            ),
        );
        assert!(!ok, "{u}: deleted");
        crate::proxy_writes::error_fields(&err)
            .join("\n")
            .replace(|c: char| c.is_ascii_digit(), "#")
    };
    assert_eq!(refused(&url, k), refused(&direct, d));
    assert!(
        refused(&url, k).contains("violates foreign key constraint \"trip_notes_trip_id_fkey\"")
            && refused(&url, k)
                .contains("DETAIL:  Key (id)=(#) is still referenced from table \"trip_notes\"."),
        "{}",
        refused(&url, k)
    );
    assert!(latest(&facade, k, "BASE").await.is_some());
    assert!(latest(&facade, k, "NOTES").await.is_some());
    for (url, u) in [(&url, k), (&direct, d)] {
        let (ok, out, err) = psql(
            url,
            &format!(
                "\\set ON_ERROR_STOP 1\nDELETE FROM trip_notes WHERE trip_id = \
                 (SELECT id FROM trips WHERE uuid = '{u}');\n"
            ),
        );
        assert!(ok && out.contains("DELETE 1"), "{out}{err}");
    }

    // RETURNING shows the row as it was, in the session's zone, as
    // PostgreSQL's own DELETE of the twin shows it; the tag too.
    let delete = |u: uuid::Uuid| {
        format!(
            "\\set ON_ERROR_STOP 1\nSET TimeZone = 'Asia/Kolkata';\n\
             DELETE FROM trips t WHERE t.uuid = '{u}' AND t.status = 'requested' \
             RETURNING t.uuid, fare, t.status AS s, requested_at, completed_at, 1 AS one;\n"
        )
    };
    let (ok, through, err) = psql(&url, &delete(k));
    assert!(ok, "{through}{err}");
    let (ok, twin, err) = psql(&direct, &delete(d));
    assert!(ok, "{twin}{err}");
    assert_eq!(through.replace(&k.to_string(), &d.to_string()), twin);
    assert!(twin.contains("DELETE 1"), "{twin}");

    // Gone for every later statement: read, updated, deleted again.
    assert!(latest(&facade, k, "BASE").await.is_none());
    assert!(latest(&facade, k, "NOTES").await.is_none());
    let done = sqlx::query("DELETE FROM trips WHERE uuid = $1")
        .bind(k)
        .execute(&pool)
        .await
        .unwrap();
    assert_eq!(done.rows_affected(), 0);
    let done = sqlx::query("UPDATE trips SET status = 'x', version = version + 1 WHERE uuid = $1")
        .bind(k)
        .execute(&pool)
        .await
        .unwrap();
    assert_eq!(done.rows_affected(), 0);
    let served: Vec<String> = sqlx::query_scalar("SELECT status FROM trips WHERE uuid = $1")
        .bind(k)
        .fetch_all(&pool)
        .await
        .unwrap();
    assert!(
        served.is_empty(),
        "a read served from Schemaless: {served:?}"
    );

    // Its key is retired: an INSERT of it again (at a version no cell of
    // it has, so the store would take it) fails as a taken key does, and
    // nothing is written; DO NOTHING skips it.
    let raw_cells = || async {
        facade
            .schemaless()
            .get_column_cells(
                &[RowKey::from(k)],
                &Column::new("BASE").unwrap(),
                ReadFrom::Master,
            )
            .await
            .unwrap()
            .len()
    };
    let before = raw_cells().await;
    let again = trip(k).replace("+02', 1)", "+02', 2)");
    assert_ne!(again, trip(k));
    let (_, _, err) = psql(
        &url,
        &format!(
            "{again};
"
        ),
    );
    assert!(err.contains("23505") && err.contains("retired"), "{err}");
    let (ok, out, err) = psql(
        &url,
        &format!(
            "{again} ON CONFLICT DO NOTHING;
"
        ),
    );
    assert!(ok && out.trim() == "INSERT 0 0", "{out}{err}");
    assert_eq!(raw_cells().await, before, "nothing written under the key");

    // The reverse mirror deletes the row and its notes from PostgreSQL.
    facade.reverse().catch_up().await.unwrap();
    assert_eq!(in_postgresql(&db, RowKey::from(k)).await, (false, vec![]));

    // What the cell API cannot express is still refused, nothing run.
    let e = uuid::Uuid::new_v4();
    let (ok, out, err) = psql(&url, &format!("\\set ON_ERROR_STOP 1\n{};\n", trip(e)));
    assert!(ok, "{out}{err}");
    for sql in [
        "DELETE FROM trips WHERE uuid = $1 RETURNING (SELECT max(id) FROM trips)",
        "DELETE FROM trip_notes WHERE trip_id = (SELECT id FROM trips WHERE uuid = $1) \
         RETURNING (SELECT count(*) FROM trips)",
    ] {
        let refused = sqlx::query(sql).bind(e).execute(&pool).await.unwrap_err();
        assert_eq!(
            sqlstate(&refused).as_deref(),
            Some("0A000"),
            "{sql}: {refused}"
        );
    }
    assert!(latest(&facade, e, "BASE").await.is_some());
    facade.close().await;
}

/// A pipelined batch of binds of statements prepared first (`named`),
/// with one Sync, as JDBC's `executeBatch` sends it: each statement's
/// command tag, then the error's SQLSTATE if one failed.
fn tags_of_batch(
    stream: &mut std::net::TcpStream,
    named: &[(&str, &str)],
    binds: &[(&str, uuid::Uuid)],
) -> Vec<String> {
    use crate::proxy_batches::{bind_uuid, parse_uuid, raw_flight};
    use crate::proxy_modes::{cstr, message};
    let prepare: Vec<u8> = named
        .iter()
        .flat_map(|(name, sql)| {
            let close = message(b'C', &[b"S".to_vec(), cstr(name)].concat());
            [close, parse_uuid(name, sql)].concat()
        })
        .collect();
    assert_eq!(raw_flight(stream, prepare).1, "", "prepared");
    let mut flight: Vec<u8> = binds.iter().flat_map(|(n, k)| bind_uuid(n, *k)).collect();
    flight.extend(message(b'S', &[]));
    std::io::Write::write_all(stream, &flight).unwrap();
    crate::proxy::messages_until_ready(stream)
        .into_iter()
        .filter_map(|(kind, body)| {
            let text = String::from_utf8_lossy(&body).into_owned();
            match kind {
                b'C' => Some(text.trim_end_matches('\0').to_string()),
                b'E' => text
                    .split('\0')
                    .find_map(|f| f.strip_prefix('C').map(str::to_string)),
                _ => None,
            }
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn in_a_pipelined_batch_statements_after_a_delete_find_the_row_gone() {
    use crate::proxy::{psql, ProxyProcess};
    use crate::proxy_writes::{latest, trip, INSERT_TRIP};

    let (db, facade, file) = crate::proxy_writes::primary().await;
    let proxy = ProxyProcess::start(file.path(), "127.0.0.1:0");
    let (a, b) = (uuid::Uuid::new_v4(), uuid::Uuid::new_v4());
    let (ok, out, err) = psql(
        &proxy.url(&db),
        &format!("\\set ON_ERROR_STOP 1\n{};\n", trip(a)),
    );
    assert!(ok, "{out}{err}");
    let insert = INSERT_TRIP.replace("'{k}'", "$1");
    let named = [
        ("del", "DELETE FROM trips WHERE uuid = $1"),
        (
            "upd",
            "UPDATE trips SET status = 'x', version = version + 1 WHERE uuid = $1",
        ),
        ("ins", insert.as_str()),
    ];
    let mut stream = crate::proxy::raw_session(proxy.addr, &db);
    // PostgreSQL's answers: the UPDATE and the second DELETE find the row
    // the first deleted gone.
    assert_eq!(
        tags_of_batch(&mut stream, &named, &[("del", a), ("upd", a), ("del", a)]),
        ["DELETE 1", "UPDATE 0", "DELETE 0"]
    );
    assert!(latest(&facade, a, "BASE").await.is_none());
    // A row inserted and deleted in one batch is deleted; its key cannot
    // be inserted again (retired), which fails the whole batch: nothing
    // of it is written.
    assert_eq!(
        tags_of_batch(&mut stream, &named, &[("ins", b), ("del", b), ("ins", b)]),
        ["INSERT 0 1", "DELETE 1", "23505"]
    );
    let raw = facade
        .schemaless()
        .get_cells_for_row(&RowKey::from(b), ReadFrom::Master)
        .await
        .unwrap();
    assert!(raw.is_empty(), "the failed batch wrote {raw:?}");
    facade.close().await;
}

/// A DELETE of a parent row through the proxy follows the child table's
/// foreign key, as PostgreSQL does: `ON DELETE CASCADE` deletes the
/// child rows with the row (one tombstone hides them, the reverse mirror
/// deletes them); `SET NULL` would keep them without a parent, which no
/// cell can hold: refused, nothing written. (`NO ACTION`: PostgreSQL's
/// `23503`, above.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_parent_delete_follows_the_child_tables_foreign_key() {
    use crate::proxy::{psql, ProxyProcess};
    use crate::proxy_writes::{latest, trip};

    let (db, facade, file) = crate::proxy_writes::primary().await;
    let proxy = ProxyProcess::start(file.path(), "127.0.0.1:0");
    let url = proxy.url(&db);
    let on_delete = |action: &str| {
        format!(
            "ALTER TABLE trip_notes DROP CONSTRAINT trip_notes_trip_id_fkey, ADD CONSTRAINT \
             trip_notes_trip_id_fkey FOREIGN KEY (trip_id) REFERENCES trips (id) ON DELETE {action}"
        )
    };
    let with_a_note = || {
        let k = uuid::Uuid::new_v4();
        let (ok, out, err) = psql(
            &url,
            &format!("\\set ON_ERROR_STOP 1\n{};\n{}", trip(k), insert_note(k, 1)),
        );
        assert!(ok, "{out}{err}");
        k
    };
    let delete = |k: uuid::Uuid| {
        psql(
            &url,
            &format!("\\set ON_ERROR_STOP 1\n\\set VERBOSITY verbose\nDELETE FROM trips WHERE uuid = '{k}';\n"),
        )
    };

    sqlx::query(sqlx::AssertSqlSafe(on_delete("SET NULL")))
        .execute(&db.pool)
        .await
        .unwrap();
    let k = with_a_note();
    let (ok, _, err) = delete(k);
    assert!(
        !ok && err.contains("0A000") && err.contains("cannot outlive it"),
        "{err}"
    );
    assert!(latest(&facade, k, "BASE").await.is_some());
    assert!(latest(&facade, k, "NOTES").await.is_some());

    sqlx::query(sqlx::AssertSqlSafe(on_delete("CASCADE")))
        .execute(&db.pool)
        .await
        .unwrap();
    let (ok, out, err) = delete(k);
    assert!(ok && out.contains("DELETE 1"), "{out}{err}");
    assert!(latest(&facade, k, "BASE").await.is_none());
    assert!(latest(&facade, k, "NOTES").await.is_none());
    facade.reverse().catch_up().await.unwrap();
    assert_eq!(in_postgresql(&db, RowKey::from(k)).await, (false, vec![]));
    facade.close().await;
}
