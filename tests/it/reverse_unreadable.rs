//! A legacy row the reverse mirror cannot read as a cell (a value the
//! layout's conversion refuses, written to PostgreSQL directly, such as
//! an infinite timestamp) does not stop its shard: the cell of that row
//! is parked with the reason, and the shard's later cells are applied.
//! Before, every pass failed on that row and was tried again, for ever:
//! nothing the facade wrote to any row of the shard reached PostgreSQL
//! any more, and each proxy session waiting to read its own writes there
//! waited out `proxy.read_your_writes_ms`. The cells applied on their
//! own then are applied as the shard's transaction applies them: a row
//! takes the integer id the proxy reserved for it.

use legacy::trips::TripCells;
use schemaless::{CellStore, ReadFrom, RefKey};
use tripstore::{Mode, TripStore};

use crate::harness::LegacyDb;
use crate::mirror::with_mirror;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_legacy_row_it_cannot_read_parks_its_cell_and_the_shard_goes_on() {
    let db = LegacyDb::trips().await;
    db.apply_schemaless().await;
    let (config, _) = with_mirror(&db, "relay_in_app = false\nreverse_in_app = false");
    let facade = TripStore::connect(&config).await.unwrap();
    crate::worker::forced(&facade, Mode::Primary).await;
    let shards = config.instance.shard_count;

    // A trip, applied to PostgreSQL; then made unreadable there at its
    // next version, as an app's direct write could.
    let mut source = TripCells::new(23);
    let trip = source.new_trip();
    let key = trip[0].key.row_key;
    facade.put_cells(trip.clone()).await.unwrap();
    facade.reverse().catch_up().await.unwrap();
    sqlx::query("UPDATE trips SET requested_at = 'infinity', version = 2 WHERE uuid = $1")
        .bind(key.uuid())
        .execute(&db.pool)
        .await
        .unwrap();

    // Its next version through the facade, and a trip of the same shard
    // after it.
    let next = source.complete(&trip[0]);
    assert_eq!(next.key.ref_key, RefKey::new(2).unwrap());
    facade.put_cell(next.clone()).await.unwrap();
    let shard = schemaless::routing::shard_of(&key, shards);
    let neighbour = loop {
        let candidate = source.new_trip();
        if schemaless::routing::shard_of(&candidate[0].key.row_key, shards) == shard {
            break candidate;
        }
    };
    facade.put_cells(neighbour.clone()).await.unwrap();
    // Its integer id reserved, as the proxy reserves the id it answered
    // an INSERT's `RETURNING id` with.
    let neighbour_key = neighbour[0].key.row_key.uuid();
    sqlx::query(
        "INSERT INTO mezzanine.row_ids (parent, row_key, id) VALUES ('trips'::regclass, $1, 4242)",
    )
    .bind(neighbour_key)
    .execute(&db.pool)
    .await
    .unwrap();

    let applied = facade.reverse().catch_up().await.unwrap();
    assert_eq!(applied.parked, 1, "{applied:?}");
    let (parked_row, error): (uuid::Uuid, String) =
        sqlx::query_as("SELECT row_key, error FROM mezzanine.reverse_parked")
            .fetch_one(&db.pool)
            .await
            .unwrap();
    assert_eq!(parked_row, key.uuid());
    assert!(
        error.contains("cannot read") && error.contains("requested_at"),
        "{error}"
    );
    // The shard went on: the neighbour is in PostgreSQL.
    let there = facade
        .legacy()
        .get_cell_latest(
            &neighbour[0].key.row_key,
            &neighbour[0].key.column,
            ReadFrom::Master,
        )
        .await
        .unwrap();
    assert_eq!(there.map(|s| s.cell), Some(neighbour[0].clone()));
    // Applied on its own, it still took the id reserved for it (before:
    // the sequence's next, another id than the app was answered).
    let id: i64 = sqlx::query_scalar("SELECT id FROM trips WHERE uuid = $1")
        .bind(neighbour_key)
        .fetch_one(&db.pool)
        .await
        .unwrap();
    assert_eq!(id, 4242);
    // And the row PostgreSQL holds is left as it is, for the operator.
    let requested: String =
        sqlx::query_scalar("SELECT requested_at::text FROM trips WHERE uuid = $1")
            .bind(key.uuid())
            .fetch_one(&db.pool)
            .await
            .unwrap();
    assert_eq!(requested, "infinity");

    // Once the row is mended in PostgreSQL, the parked cell is applied
    // on retry.
    sqlx::query("UPDATE trips SET requested_at = now(), version = 1 WHERE uuid = $1")
        .bind(key.uuid())
        .execute(&db.pool)
        .await
        .unwrap();
    let retried = mirror::reverse::retry_parked(facade.legacy())
        .await
        .unwrap();
    assert_eq!(retried, (1, 0), "{retried:?}");
    let mended = facade
        .legacy()
        .get_cell_latest(&key, &next.key.column, ReadFrom::Master)
        .await
        .unwrap()
        .map(|s| s.cell);
    assert_eq!(mended, Some(next));
    facade.close().await;
}
