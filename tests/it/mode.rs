//! The facade's mode: kept in PostgreSQL, seen by every facade, changed
//! one step at a time.

use std::time::Duration;

use schemaless::mysql::index;
use schemaless::IndexQuery;
use schemaless::{Body, Cell, CellStore, Column, ReadFrom, RefKey, RowKey, WriteOutcome};
use serde_json::json;
use tokio_util::sync::CancellationToken;
use tripstore::{Mode, ModeRequest, TripStore};

use crate::harness::LegacyDb;

fn request(target: Mode, force: bool) -> ModeRequest {
    ModeRequest {
        target,
        force,
        by: "mode test".into(),
        reason: Some("testing".into()),
    }
}

/// Waits until `store` routes by `mode` (it learns by notification or poll).
async fn sees(store: &TripStore, mode: Mode) {
    let mut changes = store.mode_changes();
    tokio::time::timeout(Duration::from_secs(10), changes.wait_for(|m| *m == mode))
        .await
        .unwrap_or_else(|_| {
            panic!(
                "the second facade never saw mode {mode}; it has {}",
                store.mode()
            )
        })
        .unwrap();
}

fn base(row: RowKey, ref_key: i64, status: &str) -> Cell {
    Cell::new(
        row,
        Column::new("BASE").unwrap(),
        RefKey::new(ref_key).unwrap(),
        Body::from_value(json!({
            "driver_uuid": "00000000-0000-4000-8000-000000000001",
            "rider_uuid": "00000000-0000-4000-8000-000000000002",
            "city_id": 3,
            "status": status,
            "currency": "EUR",
            "requested_at": "2015-03-08T07:30:00.000000Z",
        }))
        .unwrap(),
    )
}

#[tokio::test]
async fn a_mode_change_reaches_every_facade_and_routes_their_calls() {
    let db = LegacyDb::trips().await;
    db.apply_schemaless().await;
    // Polling every ten minutes: within this test, only LISTEN/NOTIFY can
    // tell the other facade.
    let config = config::Config::parse(
        &db.config_text
            .replace("mode_poll_ms = 200", "mode_poll_ms = 600000"),
        "notify-only.toml",
    )
    .unwrap();
    let a = TripStore::connect(&config).await.unwrap();
    let b = TripStore::connect(&config).await.unwrap();
    assert_eq!((a.mode(), b.mode()), (Mode::Legacy, Mode::Legacy));

    // In legacy mode a write lands in PostgreSQL only.
    let trip = RowKey::random();
    assert_eq!(
        b.put_cell(base(trip, 1, "requested")).await.unwrap(),
        WriteOutcome::Written
    );
    assert_eq!(
        db.count(&format!("SELECT count(*) FROM trips WHERE uuid = '{trip}'"))
            .await,
        1
    );
    let base_column = Column::new("BASE").unwrap();
    assert!(a
        .schemaless()
        .get_cell_latest(&trip, &base_column, ReadFrom::Master)
        .await
        .unwrap()
        .is_none());

    // A jump of four steps is refused with its reason, and changes nothing.
    let err = a
        .set_mode(&request(Mode::Schemaless, false))
        .await
        .unwrap_err();
    assert!(
        err.to_string()
            .contains("refused: the mode moves forward one step at a time: the next step from legacy is mirror"),
        "{err}"
    );
    assert_eq!(a.mode_state().await.unwrap().mode, Mode::Legacy);
    // Forced, it happens, is recorded as forced, and the other facade
    // follows.
    let change = a.set_mode(&request(Mode::Schemaless, true)).await.unwrap();
    assert_eq!((change.from, change.to), (Mode::Legacy, Mode::Schemaless));
    assert!(change.overridden.unwrap().contains("one step at a time"));
    let state = b.mode_state().await.unwrap();
    assert!(state.forced && state.changed_by == "mode test", "{state:?}");
    sees(&b, Mode::Schemaless).await;

    // Now b's writes and reads go to Schemaless.
    let other = RowKey::random();
    assert_eq!(
        b.put_cell(base(other, 1, "completed")).await.unwrap(),
        WriteOutcome::Written
    );
    assert!(a
        .schemaless()
        .get_cell_latest(&other, &base_column, ReadFrom::Master)
        .await
        .unwrap()
        .is_some());
    assert_eq!(
        db.count(&format!(
            "SELECT count(*) FROM trips WHERE uuid = '{other}'"
        ))
        .await,
        0
    );
    assert!(b
        .get_cell_latest(&trip, &base_column, ReadFrom::Master)
        .await
        .unwrap()
        .is_none());

    // Index queries go where reads go: now to the Schemaless index.
    let store = a.schemaless();
    let v = index::create_version(store, "trips_by_driver")
        .await
        .unwrap();
    index::switch(store, "trips_by_driver", v).await.unwrap();
    let maintainer =
        index::Maintainer::trigger(store, "trips_by_driver", v, &config.triggers).unwrap();
    let stop = CancellationToken::new();
    let maintaining = {
        let stop = stop.clone();
        tokio::spawn(async move { maintainer.run(stop).await })
    };
    let by_driver = IndexQuery {
        index: "trips_by_driver".into(),
        shard_value: json!("00000000-0000-4000-8000-000000000001"),
        filters: vec![],
        order_by: None,
        descending: false,
        limit: 10,
    };
    let mut rows = Vec::new();
    for _ in 0..500 {
        rows = b
            .query_index(&by_driver, ReadFrom::Master)
            .await
            .unwrap()
            .into_iter()
            .map(|e| e.row_key)
            .collect::<Vec<_>>();
        if !rows.is_empty() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(
        rows,
        vec![other],
        "the Schemaless index, not the legacy table"
    );
    stop.cancel();
    maintaining.await.unwrap().unwrap();

    // Back three steps is refused without --force (the step back is
    // primary), then forced.
    let err = b.set_mode(&request(Mode::Legacy, false)).await.unwrap_err();
    assert!(
        err.to_string()
            .contains("the step back from schemaless is primary"),
        "{err}"
    );
    b.set_mode(&request(Mode::Legacy, true)).await.unwrap();
    sees(&a, Mode::Legacy).await;
    let legacy_rows: Vec<RowKey> = a
        .query_index(&by_driver, ReadFrom::Master)
        .await
        .unwrap()
        .into_iter()
        .map(|e| e.row_key)
        .collect();
    assert_eq!(legacy_rows, vec![trip], "the legacy table by SQL");
    assert!(a
        .get_cell_latest(&trip, &base_column, ReadFrom::Master)
        .await
        .unwrap()
        .is_some());
    let history = tripstore::mode::history(&db.pool, 10).await.unwrap();
    assert_eq!(history.len(), 2);
    assert_eq!(
        (history[0].from.as_str(), history[0].to.as_str()),
        ("schemaless", "legacy")
    );
    a.close().await;
    b.close().await;
}

#[tokio::test]
async fn a_facade_that_misses_the_notification_finds_the_mode_by_polling() {
    let db = LegacyDb::trips().await;
    db.apply_schemaless().await;
    let a = TripStore::connect(&db.config).await.unwrap();
    // Written behind the facades' backs, without NOTIFY: only the poll
    // (every 200 ms in the test config) can see it.
    sqlx::query("UPDATE mezzanine.mode SET mode = 'schemaless', changed_by = 'sql'")
        .execute(&db.pool)
        .await
        .unwrap();
    sees(&a, Mode::Schemaless).await;
    // Shadow, set by hand: reads now come from Schemaless.
    let trip = RowKey::random();
    a.schemaless()
        .put_cell(base(trip, 4, "completed"))
        .await
        .unwrap();
    sqlx::query("UPDATE mezzanine.mode SET mode = 'shadow'")
        .execute(&db.pool)
        .await
        .unwrap();
    sees(&a, Mode::Shadow).await;
    let found = a
        .get_cell_latest(&trip, &Column::new("BASE").unwrap(), ReadFrom::Master)
        .await
        .unwrap()
        .expect("read from Schemaless");
    assert_eq!(found.cell.key.ref_key.get(), 4);
    a.close().await;
}

/// `primary` makes Schemaless where writes land first: the gate refuses it
/// while an acknowledged write may be on one host only.
#[tokio::test]
async fn the_primary_gate_refuses_one_host_durability() {
    use tripstore::mode::Gate;
    let db = LegacyDb::trips().await;
    mirror::schema::ensure(&db.pool).await.unwrap();
    tripstore::mode::ensure_control(&db.pool).await.unwrap();
    backfill::plan::ensure_tables(&db.pool).await.unwrap();
    verifier::store::ensure(&db.pool).await.unwrap();
    let mut config = db.config.clone();
    config.storage.durability = config::Durability::OneHost;
    let schemaless = schemaless::MySqlStore::connect(&config).unwrap();
    let gate = tripstore::gates::MigrationGate::new(db.pool.clone(), schemaless.clone(), &config);
    let checks = gate.checks(Mode::Shadow, Mode::Primary).await.unwrap();
    let durability = checks.iter().find(|c| c.name == "durability").unwrap();
    assert!(
        !durability.pass && durability.why.contains("storage.durability = \"one_host\""),
        "{durability:?}"
    );
    // With two hosts, whatever else it checks, not that.
    let two = tripstore::gates::MigrationGate::new(db.pool.clone(), schemaless, &db.config);
    let checks = two.checks(Mode::Shadow, Mode::Primary).await.unwrap();
    let durability = checks.iter().find(|c| c.name == "durability").unwrap();
    assert!(durability.pass, "{durability:?}");
}

/// A facade that has not seen the move to `mirror` yet (no notification,
/// a poll ten minutes away) still writes as `mirror` does: its write reads
/// the mode in its own transaction, so the change reaches the outbox.
/// And `mode set` waits for a legacy-mode write in flight.
#[tokio::test]
async fn a_write_routed_by_a_stale_legacy_mode_goes_to_the_outbox() {
    let db = LegacyDb::trips().await;
    db.apply_schemaless().await;
    let text = db
        .config_text
        .replace("mode_poll_ms = 200", "mode_poll_ms = 600000");
    let config = config::Config::parse(&text, "stale.toml").unwrap();
    let facade = TripStore::connect(&config).await.unwrap();
    assert_eq!(facade.mode(), Mode::Legacy);
    mirror::schema::ensure(&db.pool).await.unwrap();
    sqlx::query("UPDATE mezzanine.mode SET mode = 'mirror', changed_by = 'sql'")
        .execute(&db.pool)
        .await
        .unwrap();
    assert_eq!(facade.mode(), Mode::Legacy, "the facade has not seen it");
    let trip = RowKey::random();
    facade.put_cell(base(trip, 1, "requested")).await.unwrap();
    let queued: i64 =
        sqlx::query_scalar("SELECT count(*) FROM mezzanine.outbox WHERE row_key = $1")
            .bind(trip.uuid())
            .fetch_one(&db.pool)
            .await
            .unwrap();
    assert_eq!(queued, 1, "the write missed the outbox");
    assert_eq!(facade.mode(), Mode::Mirror, "the facade learned the mode");

    // A legacy-mode write in flight holds the mode row: a change waits.
    sqlx::query("UPDATE mezzanine.mode SET mode = 'legacy'")
        .execute(&db.pool)
        .await
        .unwrap();
    let mut writer = db.pool.begin().await.unwrap();
    sqlx::query("SELECT mode FROM mezzanine.mode FOR SHARE")
        .execute(&mut *writer)
        .await
        .unwrap();
    let pool = db.pool.clone();
    let change = tokio::spawn(async move {
        sqlx::query("UPDATE mezzanine.mode SET mode = 'mirror'")
            .execute(&pool)
            .await
            .unwrap();
    });
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(
        !change.is_finished(),
        "the change did not wait for the write"
    );
    writer.commit().await.unwrap();
    change.await.unwrap();
    facade.close().await;
}
