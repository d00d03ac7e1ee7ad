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

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn tombstones_put_through_the_facade_delete_from_postgresql_in_every_mode() {
    let db = LegacyDb::trips().await;
    db.apply_schemaless().await;
    let (config, _) = with_mirror(&db, "relay_in_app = false\nreverse_in_app = false");
    let deleted = Column::new(&config.capture.tombstone_column).unwrap();
    let notes = Column::new("NOTES").unwrap();
    let facade = TripStore::connect(&config).await.unwrap();

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
