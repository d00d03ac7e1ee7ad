//! Translatable writes through `mezzanine proxy` in `primary` and
//! `schemaless`: run through the facade into Schemaless, with the values,
//! command tags, RETURNING rows and errors PostgreSQL would have given,
//! checked against the same statements run on PostgreSQL directly.

use schemaless::{CellStore, Column, ReadFrom, RowKey, StoredCell};
use tripstore::{Mode, TripStore};

use crate::harness::{config_file, LegacyDb};
use crate::proxy::{psql, sqlstate, ProxyProcess};

/// A whole trip row, every NOT NULL column given; `{k}` is its UUID.
const INSERT_TRIP: &str = "INSERT INTO trips (uuid, driver_uuid, rider_uuid, city_id, status, \
     fare, currency, distance_km, requested_at, version) VALUES ('{k}', \
     '6f1c1a0e-0000-4000-8000-000000000001', '6f1c1a0e-0000-4000-8000-000000000002', 7, \
     'requested', 12.5, 'EUR', 0.1, '2026-12-03 10:00:00.123456+02', 1)";

fn trip(k: uuid::Uuid) -> String {
    INSERT_TRIP.replace("{k}", &k.to_string())
}

async fn latest(store: &impl CellStore, k: uuid::Uuid, column: &str) -> Option<StoredCell> {
    store
        .get_cell_latest(
            &RowKey::from(k),
            &Column::new(column).unwrap(),
            ReadFrom::Master,
        )
        .await
        .unwrap()
}

/// psql's output with `from`'s UUID written as `to`'s.
fn as_if(out: &str, from: uuid::Uuid, to: uuid::Uuid) -> String {
    out.replace(&from.to_string(), &to.to_string())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn primary_and_schemaless_run_translatable_writes_through_the_facade() {
    let db = LegacyDb::trips().await;
    db.apply_schemaless().await;
    let facade = TripStore::connect(&db.config).await.unwrap();
    let legacy = db.store().await;
    crate::worker::forced(&facade, Mode::Primary).await;
    let file = config_file(&format!("{}\n[proxy]\n", db.config_text));
    let proxy = ProxyProcess::start(file.path(), "127.0.0.1:0");
    let url = proxy.url(&db);
    let direct = crate::harness::cluster().postgres_url(&db.name);
    // `k` goes through the proxy; `d`, its twin, straight to PostgreSQL,
    // whose row the legacy store reads as cells: the values to match.
    let (k, d) = (uuid::Uuid::new_v4(), uuid::Uuid::new_v4());

    // INSERT: psql's tag, and a BASE cell equal to what the layout reads
    // from PostgreSQL's row of the same statement (fare 12.5 cast to
    // numeric(10,2), a timestamp in another zone, completed_at left out).
    let (ok, out, err) = psql(&url, &format!("\\set ON_ERROR_STOP 1\n{};\n", trip(k)));
    assert!(ok, "{out}{err}");
    assert_eq!(out.trim(), "INSERT 0 1");
    let (ok, out, err) = psql(&direct, &format!("\\set ON_ERROR_STOP 1\n{};\n", trip(d)));
    assert!(ok && out.trim() == "INSERT 0 1", "{out}{err}");
    let written = latest(&facade, k, "BASE")
        .await
        .expect("written to Schemaless");
    let expected = latest(&legacy, d, "BASE").await.expect("the direct row");
    assert_eq!(written.cell.key.ref_key.get(), 1);
    assert_eq!(written.cell.body, expected.cell.body);
    assert_eq!(written.cell.body.fields()["fare"], "12.5");
    assert_eq!(
        written.cell.body.fields()["requested_at"],
        "2026-12-03T08:00:00.123456Z"
    );
    assert_eq!(
        db.count(&format!("SELECT count(*) FROM trips WHERE uuid = '{k}'"))
            .await,
        0,
        "not written to PostgreSQL by the proxy"
    );

    // The same INSERT again: a unique violation, as PostgreSQL says it;
    // ON CONFLICT DO NOTHING: nothing, and the tag says so.
    let (_, _, err) = psql(&url, &format!("{};\n", trip(k)));
    assert!(err.contains("23505"), "{err}");
    let (_, _, err) = psql(&direct, &format!("{};\n", trip(d)));
    assert!(err.contains("23505"), "PostgreSQL says the same: {err}");
    let (ok, out, err) = psql(
        &url,
        &format!(
            "\\set ON_ERROR_STOP 1\n{} ON CONFLICT DO NOTHING;\n",
            trip(k)
        ),
    );
    assert!(ok && out.trim() == "INSERT 0 0", "{out}{err}");

    // UPDATE by key, prepared (sqlx): the tag's row count, expressions of
    // the latest cell, and each version on top of the last.
    let pool = sqlx::postgres::PgPoolOptions::new()
        .max_connections(1)
        .connect(&url)
        .await
        .unwrap();
    let update = "UPDATE trips SET status = $1, fare = fare * 2, version = version + 1 \
                  WHERE uuid = $2";
    for (n, status) in ["accepted", "driving"].iter().enumerate() {
        let done = sqlx::query(update)
            .bind(status)
            .bind(k)
            .execute(&pool)
            .await
            .unwrap();
        assert_eq!(done.rows_affected(), 1);
        let cell = latest(&facade, k, "BASE").await.unwrap();
        assert_eq!(cell.cell.key.ref_key.get(), 2 + n as i64);
        assert_eq!(cell.cell.body.fields()["status"], *status);
    }
    assert_eq!(
        latest(&facade, k, "BASE").await.unwrap().cell.body.fields()["fare"],
        "50"
    );
    // A condition that fails on the latest cell, and a row that is not
    // there: nothing written, 0 rows.
    for (sql, key) in [
        (
            "UPDATE trips SET status = $1, version = version + 1 WHERE uuid = $2 \
             AND status = 'requested'",
            k,
        ),
        (
            "UPDATE trips SET status = $1, version = version + 1 WHERE uuid = $2",
            uuid::Uuid::new_v4(),
        ),
    ] {
        let done = sqlx::query(sql)
            .bind("never")
            .bind(key)
            .execute(&pool)
            .await
            .unwrap();
        assert_eq!(done.rows_affected(), 0, "{sql}");
    }
    assert_eq!(
        latest(&facade, k, "BASE")
            .await
            .unwrap()
            .cell
            .key
            .ref_key
            .get(),
        3
    );
    // A value PostgreSQL cannot evaluate: its own error, nothing written.
    let (_, _, err) = psql(
        &url,
        &format!("UPDATE trips SET city_id = 'seven', version = version + 1 WHERE uuid = '{k}';\n"),
    );
    assert!(err.contains("22P02"), "{err}");
    // NOT NULL, as the table declares it.
    let null = sqlx::query("UPDATE trips SET status = NULL, version = version + 1 WHERE uuid = $1")
        .bind(k)
        .execute(&pool)
        .await
        .unwrap_err();
    assert_eq!(sqlstate(&null).as_deref(), Some("23502"), "{null}");
    assert_eq!(
        latest(&facade, k, "BASE")
            .await
            .unwrap()
            .cell
            .key
            .ref_key
            .get(),
        3
    );
    // The session goes on after the errors.
    let n: i32 = sqlx::query_scalar("SELECT 40 + $1")
        .bind(2_i32)
        .fetch_one(&pool)
        .await
        .unwrap();
    assert_eq!(n, 42);

    // RETURNING, through psql, next to the same statements on
    // PostgreSQL's twin row brought to the same state: the same text.
    let (ok, out, err) = psql(
        &direct,
        &format!(
            "\\set ON_ERROR_STOP 1\nUPDATE trips SET status = 'driving', fare = 50, version = 3 \
             WHERE uuid = '{d}';\n"
        ),
    );
    assert!(ok, "{out}{err}");
    let returning = |u: uuid::Uuid| {
        format!(
            "\\set ON_ERROR_STOP 1\nSET TimeZone = 'Asia/Kolkata';\n\
             UPDATE trips SET status = 'done', completed_at = '2026-12-03 11:00:00Z', \
             version = version + 1 WHERE uuid = '{u}' \
             RETURNING uuid, version, fare, trips.status AS s, completed_at, distance_km;\n"
        )
    };
    let (ok, through, err) = psql(&url, &returning(k));
    assert!(ok, "{through}{err}");
    let (ok, twin, err) = psql(&direct, &returning(d));
    assert!(ok, "{twin}{err}");
    assert_eq!(as_if(&through, k, d), twin);
    assert!(twin.contains("UPDATE 1"), "{twin}");

    // A child row, its parent named by UUID; a missing parent is a
    // foreign key violation.
    let note = |u: uuid::Uuid| {
        format!(
            "INSERT INTO trip_notes (trip_id, seq, author, body, created_at) VALUES \
             ((SELECT id FROM trips WHERE uuid = '{u}'), 1, 'ops', 'it''s here', \
             '2026-12-03 12:00:00Z')"
        )
    };
    let (ok, out, err) = psql(&url, &format!("\\set ON_ERROR_STOP 1\n{};\n", note(k)));
    assert!(ok && out.trim() == "INSERT 0 1", "{out}{err}");
    let (ok, _, err) = psql(&direct, &format!("\\set ON_ERROR_STOP 1\n{};\n", note(d)));
    assert!(ok, "{err}");
    assert_eq!(
        latest(&facade, k, "NOTES").await.unwrap().cell.body,
        latest(&legacy, d, "NOTES").await.unwrap().cell.body
    );
    let (_, _, err) = psql(&url, &format!("{};\n", note(uuid::Uuid::new_v4())));
    assert!(err.contains("23503"), "{err}");

    // An upsert of an existing row: the DO UPDATE branch, EXCLUDED being
    // the proposed row.
    let done = sqlx::query(
        "INSERT INTO trips (uuid, version, status) VALUES ($1, 1, $2) ON CONFLICT (uuid) \
         DO UPDATE SET status = EXCLUDED.status || '!', version = trips.version + 1",
    )
    .bind(k)
    .bind("rated")
    .execute(&pool)
    .await
    .unwrap();
    assert_eq!(done.rows_affected(), 1);
    let cell = latest(&facade, k, "BASE").await.unwrap();
    assert_eq!(cell.cell.key.ref_key.get(), 5);
    assert_eq!(cell.cell.body.fields()["status"], "rated!");
    assert_eq!(cell.cell.body.fields()["fare"], "50", "the rest kept");
    pool.close().await;

    // A write with other statements in one Query is refused whole.
    let (_, out, err) = psql(
        &url,
        &format!("SELECT 1 \\; UPDATE trips SET status = 'x', version = version + 1 WHERE uuid = '{k}';\n"),
    );
    assert!(
        err.contains("0A000") && err.contains("send it alone"),
        "{out}{err}"
    );
    // In a transaction block, statements are forwarded as they are.
    let (ok, out, err) = psql(
        &url,
        "\\set ON_ERROR_STOP 1\nBEGIN;\nINSERT INTO trip_notes (trip_id, seq, author, body, created_at) \
         SELECT id, 9, 'tx', 'in a block', now() FROM trips WHERE uuid = '00000000-0000-4000-8000-000000000000';\nROLLBACK;\n",
    );
    assert!(ok && out.contains("INSERT 0 0"), "{out}{err}");

    // In schemaless, writes run through the facade as well.
    crate::worker::forced(&facade, Mode::Schemaless).await;
    // The proxy's facade follows the mode by NOTIFY or its poll: then
    // reads Schemaless cannot answer are refused.
    crate::proxy::wait_for(|| {
        let r = psql(&url, "SELECT count(*) FROM trips;\n");
        r.2.contains("0A000").then_some(())
    });
    let s = uuid::Uuid::new_v4();
    let (ok, out, err) = psql(&url, &format!("\\set ON_ERROR_STOP 1\n{};\n", trip(s)));
    assert!(ok && out.trim() == "INSERT 0 1", "{out}{err}");
    assert_eq!(
        latest(&facade, s, "BASE").await.unwrap().cell.body,
        written.cell.body
    );

    let status = proxy.status();
    // Written: 2 trips, the one DO NOTHING left, 5 UPDATEs (2 of no
    // row), the child row, the upsert; failed: the duplicate, the value,
    // the NULL, the missing parent.
    assert_eq!(status["writes"]["written"], 10, "{status}");
    assert_eq!(status["writes"]["failed"], 4, "{status}");
    assert_eq!(status["write_cells"], 7, "{status}");
    facade.close().await;
}
