//! Translatable writes through `mezzanine proxy` in `primary` and
//! `schemaless`: run through the facade into Schemaless, with the values,
//! command tags, RETURNING rows and errors PostgreSQL would have given,
//! checked against the same statements run on PostgreSQL directly.

use schemaless::{CellStore, Column, ReadFrom, RowKey, StoredCell};
use tripstore::{Mode, TripStore};

use crate::harness::{config_file, LegacyDb};
use crate::proxy::{psql, sqlstate, ProxyProcess};
use crate::proxy_modes::{raw_answer, raw_prepared};

/// A whole trip row, every NOT NULL column given; `{k}` is its UUID.
pub(crate) const INSERT_TRIP: &str =
    "INSERT INTO trips (uuid, driver_uuid, rider_uuid, city_id, status, \
     fare, currency, distance_km, requested_at, version) VALUES ('{k}', \
     '6f1c1a0e-0000-4000-8000-000000000001', '6f1c1a0e-0000-4000-8000-000000000002', 7, \
     'requested', 12.5, 'EUR', 0.1, '2026-12-03 10:00:00.123456+02', 1)";

pub(crate) fn trip(k: uuid::Uuid) -> String {
    INSERT_TRIP.replace("{k}", &k.to_string())
}

pub(crate) async fn latest(
    store: &impl CellStore,
    k: uuid::Uuid,
    column: &str,
) -> Option<StoredCell> {
    store
        .get_cell_latest(
            &RowKey::from(k),
            &Column::new(column).unwrap(),
            ReadFrom::Master,
        )
        .await
        .unwrap()
}

/// The ref key of row `k`'s latest BASE cell.
pub(crate) async fn version(store: &impl CellStore, k: uuid::Uuid) -> i64 {
    latest(store, k, "BASE")
        .await
        .expect("a BASE cell")
        .cell
        .key
        .ref_key
        .get()
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

    // The same INSERT again: a unique violation, as PostgreSQL says it;
    // ON CONFLICT DO NOTHING: nothing, and the tag says so.
    // Its fields too (psql's verbose error: the constraint in the
    // message and its own field, the detail's key, the table and schema),
    // which ORMs read to tell which key a write broke.
    let verbose = |u: uuid::Uuid| format!("\\set VERBOSITY verbose\n{};\n", trip(u));
    let (_, _, err) = psql(&url, &verbose(k));
    assert!(err.contains("23505"), "{err}");
    let (_, _, direct_err) = psql(&direct, &verbose(d));
    assert!(
        direct_err.contains("23505"),
        "PostgreSQL says the same: {direct_err}"
    );
    assert_eq!(
        error_fields(&err),
        error_fields(&direct_err.replace(&d.to_string(), &k.to_string()))
    );
    assert!(err.contains("CONSTRAINT NAME:  trips_uuid_key"), "{err}");
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
    assert_eq!(version(&facade, k).await, 3);
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
    assert_eq!(version(&facade, k).await, 3);
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

    // Byte for byte, in the extended protocol: a prepared UPDATE ...
    // RETURNING (its statement and portal described, a text then a
    // binary key, binary then mixed results), and one without RETURNING
    // (NoData, and the tag alone), through the proxy and on the twin.
    let port = crate::harness::cluster().spec().postgres_port;
    let own_addr = std::net::SocketAddr::from(([127, 0, 0, 1], port));
    let mut through = crate::proxy::raw_session(proxy.addr, &db);
    let mut own = crate::proxy::raw_session(own_addr, &db);
    let settings = "SET TimeZone = 'America/St_Johns'; SET extra_float_digits = 0";
    assert_eq!(
        raw_answer(&mut through, settings),
        raw_answer(&mut own, settings)
    );
    let returning = "UPDATE trips SET status = status || '+', version = version + 1 \
                     WHERE uuid = $1 RETURNING version, fare, status AS s, requested_at, \
                     completed_at, distance_km";
    let key = |u: uuid::Uuid, binary: bool| {
        if binary {
            (u.as_bytes().to_vec(), 1)
        } else {
            (u.to_string().into_bytes(), 0)
        }
    };
    for (parse, binary, results) in [
        (Some(returning), false, &[1][..]),
        (None, true, &[0, 1, 0, 1, 0, 1][..]),
    ] {
        let (kp, kf) = key(k, binary);
        let (dp, df) = key(d, binary);
        let a = raw_prepared(&mut through, parse, (&kp, kf), results);
        let b = raw_prepared(&mut own, parse, (&dp, df), results);
        assert!(b.iter().any(|(kind, _)| *kind == b'D'), "{b:?}");
        assert_eq!(a, b, "{results:?}");
    }
    let mut through = crate::proxy::raw_session(proxy.addr, &db);
    let mut own = crate::proxy::raw_session(own_addr, &db);
    let plain = "UPDATE trips SET version = version + 1 WHERE uuid = $1";
    let (kp, kf) = key(k, false);
    let (dp, df) = key(d, false);
    let a = raw_prepared(&mut through, Some(plain), (&kp, kf), &[]);
    let b = raw_prepared(&mut own, Some(plain), (&dp, df), &[]);
    assert!(b.iter().any(|(kind, _)| *kind == b'n'), "NoData: {b:?}");
    assert_eq!(a, b);
    assert_eq!(version(&facade, k).await, 7);

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
    // Of a parent that is not there, the subquery is NULL: PostgreSQL's
    // NOT NULL of the key column, its fields as the twin's.
    let verbose = |u: uuid::Uuid| format!("\\set VERBOSITY verbose\n{};\n", note(u));
    let (_, _, err) = psql(&url, &verbose(uuid::Uuid::new_v4()));
    let (_, _, direct_err) = psql(&direct, &verbose(uuid::Uuid::new_v4()));
    assert!(err.contains("23502"), "{err}");
    // PostgreSQL's detail shows the failing row; the proxy's has none.
    let no_row = |e: &str| -> Vec<String> {
        error_fields(e)
            .into_iter()
            .filter(|l| !l.starts_with("DETAIL:  Failing row"))
            .collect()
    };
    assert_eq!(no_row(&err), no_row(&direct_err), "{err}");
    // Again: the child row's key taken, with PostgreSQL's fields (its
    // parent's id differs from the twin's, its columns do not).
    let (_, _, err) = psql(&url, &format!("\\set VERBOSITY verbose\n{};\n", note(k)));
    let (_, _, direct_err) = psql(&direct, &format!("\\set VERBOSITY verbose\n{};\n", note(d)));
    let digits = |e: &str| -> Vec<String> {
        error_fields(e)
            .into_iter()
            .map(|l| l.replace(|c: char| c.is_ascii_digit(), "#"))
            .collect()
    };
    assert_eq!(digits(&err), digits(&direct_err), "{err}");
    assert!(err.contains("DETAIL:  Key (trip_id, seq)=("), "{err}");
    // A child row selected from its parent's row, when there is none: no
    // row, as PostgreSQL's SELECT finds none (before: a foreign key error).
    let selected = |u: uuid::Uuid| {
        format!(
            "\\set ON_ERROR_STOP 1\nINSERT INTO trip_notes (trip_id, seq, author, body, created_at) \
             SELECT id, 2, 'ops', 'x', '2026-12-03 12:00:00Z' FROM trips WHERE uuid = '{u}';\n"
        )
    };
    for url in [&url, &direct] {
        let (ok, out, err) = psql(url, &selected(uuid::Uuid::new_v4()));
        assert!(ok && out.trim() == "INSERT 0 0", "{out}{err}");
    }

    // An upsert of an existing row: the DO UPDATE branch, EXCLUDED being
    // the proposed row.
    let upsert = format!(
        "{} ON CONFLICT (uuid) DO UPDATE SET status = EXCLUDED.status || '!', \
         version = trips.version + 1",
        INSERT_TRIP
            .replace("'{k}'", "$1")
            .replace("'requested'", "$2")
    );
    let done = sqlx::query(sqlx::AssertSqlSafe(upsert.as_str()))
        .bind(k)
        .bind("rated")
        .execute(&pool)
        .await
        .unwrap();
    assert_eq!(done.rows_affected(), 1);
    // As in PostgreSQL, the proposed row must hold even when it exists.
    let partial = sqlx::query(
        "INSERT INTO trips (uuid, version, status) VALUES ($1, 1, $2) ON CONFLICT (uuid) \
         DO UPDATE SET status = EXCLUDED.status, version = trips.version + 1",
    )
    .bind(k)
    .bind("never")
    .execute(&pool)
    .await
    .unwrap_err();
    assert_eq!(sqlstate(&partial).as_deref(), Some("23502"), "{partial}");
    let cell = latest(&facade, k, "BASE").await.unwrap();
    assert_eq!(cell.cell.key.ref_key.get(), 8);
    assert_eq!(cell.cell.body.fields()["status"], "rated!");
    assert_eq!(cell.cell.body.fields()["fare"], "50", "the rest kept");
    pool.close().await;
    // In primary, the reverse mirror brings the writes to PostgreSQL.
    let pg = &db.pool;
    let mirrored = || async {
        sqlx::query_as::<_, (i64, String)>("SELECT version, status FROM trips WHERE uuid = $1")
            .bind(k)
            .fetch_optional(pg)
            .await
            .unwrap()
    };
    let mut waited = 0;
    while mirrored().await != Some((8, "rated!".to_string())) {
        waited += 1;
        assert!(
            waited < 300,
            "the reverse mirror never applied the writes: {:?}",
            mirrored().await
        );
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }

    // Values are evaluated as the app's role, in a transaction rolled
    // back: a function the app may not call fails as it would in
    // PostgreSQL, and a setting a value changes does not stay on the
    // facade's connections.
    let app = format!("app_{}", db.name);
    sqlx::raw_sql(sqlx::AssertSqlSafe(format!(
        "CREATE ROLE {app} LOGIN; GRANT SELECT, INSERT, UPDATE ON trips TO {app}"
    )))
    .execute(&db.pool)
    .await
    .unwrap();
    let as_app = |url: &str| url.replacen("postgres@", &format!("{app}@"), 1);
    let reads_a_file = format!(
        "UPDATE trips SET status = pg_read_file('PG_VERSION'), version = version + 1 \
         WHERE uuid = '{k}';\n"
    );
    let (_, _, err) = psql(&as_app(&url), &reads_a_file);
    assert!(err.contains("42501"), "{err}");
    let (_, _, err) = psql(&as_app(&direct), &reads_a_file);
    assert!(err.contains("42501"), "PostgreSQL says the same: {err}");
    let (ok, out, err) = psql(
        &url,
        &format!(
            "\\set ON_ERROR_STOP 1\nUPDATE trips SET status = \
             set_config('statement_timeout', '1', false), version = version + 1 \
             WHERE uuid = '{k}';\n"
        ),
    );
    assert!(ok && out.trim() == "UPDATE 1", "{out}{err}");
    assert_eq!(
        latest(&facade, k, "BASE").await.unwrap().cell.body.fields()["status"],
        "1ms"
    );
    for _ in 0..10 {
        let (ok, out, err) = psql(
            &url,
            &format!(
                "\\set ON_ERROR_STOP 1\nUPDATE trips SET status = 'rated', \
                 version = version + 1 WHERE uuid = '{k}' AND pg_sleep(0.01) IS NOT NULL;\n"
            ),
        );
        assert!(ok && out.trim() == "UPDATE 1", "{out}{err}");
    }

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
    // Written: 2 trips, the one DO NOTHING left, 19 UPDATEs (2 of no
    // row), the child row, the child row of no parent (none), the upsert;
    // failed: the duplicate, the value, the NULL, the missing parent, the
    // child row again, the partial upsert, the file read.
    assert_eq!(status["writes"]["written"], 25, "{status}");
    assert_eq!(status["writes"]["failed"], 7, "{status}");
    assert_eq!(status["write_cells"], 21, "{status}");
    facade.close().await;
}

/// A database in `primary` with a proxy: the facade (to read Schemaless)
/// and the proxy's config file.
pub(crate) async fn primary() -> (LegacyDb, TripStore, tempfile::NamedTempFile) {
    primary_with("").await
}

/// The trips database with its Schemaless schema, the facade forced to
/// `shadow`, a proxy over them that follows, and a trip inserted through
/// it (so in PostgreSQL): its key.
pub(crate) async fn shadow_with_a_trip() -> (LegacyDb, TripStore, ProxyProcess, uuid::Uuid) {
    let db = LegacyDb::trips().await;
    db.apply_schemaless().await;
    let facade = TripStore::connect(&db.config).await.unwrap();
    crate::worker::forced(&facade, Mode::Shadow).await;
    let file = config_file(&format!("{}\n[proxy]\n", db.config_text));
    let proxy = ProxyProcess::start(file.path(), "127.0.0.1:0");
    proxy_in(&proxy, "shadow");
    let k = uuid::Uuid::new_v4();
    let (ok, out, err) = psql(
        &proxy.url(&db),
        &format!("\\set ON_ERROR_STOP 1\n{};\n", trip(k)),
    );
    assert!(ok, "{out}{err}");
    (db, facade, proxy, k)
}

/// [`primary`], the proxy's config ending with `extra`.
async fn primary_with(extra: &str) -> (LegacyDb, TripStore, tempfile::NamedTempFile) {
    let db = LegacyDb::trips().await;
    db.apply_schemaless().await;
    let facade = TripStore::connect(&db.config).await.unwrap();
    crate::worker::forced(&facade, Mode::Primary).await;
    let file = config_file(&format!("{}\n[proxy]\n{extra}", db.config_text));
    (db, facade, file)
}

/// [`primary`] with no reverse mirror in the facade or the proxy: rows
/// written through the facade stay out of PostgreSQL, so a test can tell
/// a statement forwarded there from one run through the facade.
pub(crate) async fn primary_without_reverse() -> (LegacyDb, TripStore, tempfile::NamedTempFile) {
    let db = LegacyDb::trips().await;
    db.apply_schemaless().await;
    let text = format!("{}\n[mirror]\nreverse_in_app = false\n", db.config_text);
    let config = config::Config::parse(&text, "no-reverse.toml").unwrap();
    let facade = TripStore::connect(&config).await.unwrap();
    crate::worker::forced(&facade, Mode::Primary).await;
    // Nothing applies the facade's writes to PostgreSQL: a statement
    // forwarded after one does not wait for them.
    let file = config_file(&format!("{text}\n[proxy]\nread_your_writes_ms = 0\n"));
    (db, facade, file)
}

/// In `primary` a write through the facade reaches PostgreSQL only when
/// the reverse mirror applies it (here every second). A statement the
/// proxy forwards there after it, in the same session (a `count(*)`,
/// which the cell API cannot answer, or a transaction block), waits for
/// that, so the app reads what it wrote: the row inserted, updated,
/// deleted. Without a reverse mirror to wait for, the wait ends at
/// `proxy.read_your_writes_ms` and says so.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn in_primary_a_statement_forwarded_after_a_write_sees_it() {
    let db = LegacyDb::trips().await;
    db.apply_schemaless().await;
    let text = format!("{}\n[mirror]\nreverse_poll_ms = 1000\n", db.config_text);
    let config = config::Config::parse(&text, "slow-reverse.toml").unwrap();
    let facade = TripStore::connect(&config).await.unwrap();
    crate::worker::forced(&facade, Mode::Primary).await;
    let file = config_file(&format!("{text}\n[proxy]\n"));
    let proxy = ProxyProcess::start(file.path(), "127.0.0.1:0");
    proxy_in(&proxy, "primary");
    let (k, again) = (uuid::Uuid::new_v4(), uuid::Uuid::new_v4());
    let count = |cond: &str| format!("SELECT count(*) FROM trips WHERE uuid = '{k}'{cond};\n");
    let script = format!(
        "\\set ON_ERROR_STOP 1\n{};\n{}\
         UPDATE trips SET status = 'moved', version = version + 1 WHERE uuid = '{k}';\n\
         BEGIN;\n{}COMMIT;\n\
         DELETE FROM trips WHERE uuid = '{k}';\n{}{};\nSELECT * FROM trips WHERE uuid = '{again}';\n",
        trip(k),
        count(""),
        count(" AND status = 'moved'"),
        count(""),
        trip(again),
    );
    let (ok, out, err) = psql(&proxy.url(&db), &script);
    assert!(ok, "{out}{err}");
    let counts: Vec<&str> = out
        .lines()
        .map(str::trim)
        .filter(|l| l.parse::<u64>().is_ok())
        .collect();
    assert_eq!(counts, ["1", "1", "0"], "{out}");
    // A translatable read the proxy does not serve (a `*` stands for
    // columns the layout may not map) is forwarded after the wait too.
    assert!(out.trim_end().ends_with("(1 row)"), "{out}");
    assert_eq!(
        proxy.status()["read_your_writes"],
        serde_json::json!({"applied": 4}),
        "{}",
        proxy.status()
    );
    drop(proxy);
    facade.close().await;

    // No reverse mirror: the statement goes on after the wait, and is
    // counted as not waited out.
    let (db, _facade, _) = primary_without_reverse().await;
    let text = format!(
        "{}\n[mirror]\nreverse_in_app = false\n[proxy]\nread_your_writes_ms = 300\n",
        db.config_text
    );
    let file = config_file(&text);
    let proxy = ProxyProcess::start(file.path(), "127.0.0.1:0");
    proxy_in(&proxy, "primary");
    let k = uuid::Uuid::new_v4();
    let started = std::time::Instant::now();
    let (ok, out, err) = psql(
        &proxy.url(&db),
        &format!("\\set ON_ERROR_STOP 1\n{};\n{}", trip(k), count_of(k)),
    );
    assert!(ok && out.contains("     0"), "{out}{err}");
    assert!(started.elapsed() >= std::time::Duration::from_millis(300));
    assert_eq!(
        proxy.status()["read_your_writes"],
        serde_json::json!({"timed_out": 1})
    );
    drop(proxy);

    // A write PostgreSQL refuses to apply (a trigger the facade does not
    // run) is parked by the reverse mirror and never comes: the statement
    // after it stops waiting then, not at the end of a long wait.
    let (db, facade, _) = primary().await;
    sqlx::raw_sql(
        "CREATE FUNCTION no_poison() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN \
         IF NEW.status = 'poison' THEN RAISE EXCEPTION 'no poison here'; END IF; \
         RETURN NEW; END $$; \
         CREATE TRIGGER no_poison BEFORE INSERT ON trips FOR EACH ROW EXECUTE FUNCTION no_poison()",
    )
    .execute(&db.pool)
    .await
    .unwrap();
    let file = config_file(&format!(
        "{}\n[proxy]\nread_your_writes_ms = 60000\n",
        db.config_text
    ));
    let proxy = ProxyProcess::start(file.path(), "127.0.0.1:0");
    proxy_in(&proxy, "primary");
    let k = uuid::Uuid::new_v4();
    let poison = trip(k).replace("'requested'", "'poison'");
    let (ok, out, err) = psql(
        &proxy.url(&db),
        &format!("\\set ON_ERROR_STOP 1\n{poison};\n{}", count_of(k)),
    );
    assert!(ok && out.contains("     0"), "{out}{err}");
    assert_eq!(
        proxy.status()["read_your_writes"],
        serde_json::json!({"parked": 1}),
        "{}",
        proxy.status()
    );
    assert!(latest(&facade, k, "BASE").await.is_some(), "in Schemaless");
    facade.close().await;
}

fn count_of(k: uuid::Uuid) -> String {
    format!("SELECT count(*) FROM trips WHERE uuid = '{k}';\n")
}

/// An app written before the UUID column (or the version) existed leaves
/// them out, or writes `DEFAULT`: PostgreSQL fills in their defaults, and
/// so does a write through the facade. The UUID column's default
/// (`gen_random_uuid()`, as `legacy add-uuid` sets it) is the row key,
/// the one RETURNING answers and the reverse mirror writes; the version's
/// (`DEFAULT 1`) the ref key. A child's sequence number with no default
/// is refused as PostgreSQL refuses it (`23502`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn columns_left_out_or_default_get_postgresqls_defaults_the_row_key_too() {
    let (db, facade, file) = primary().await;
    let proxy = ProxyProcess::start(file.path(), "127.0.0.1:0");
    let url = proxy.url(&db);
    let direct = crate::harness::cluster().postgres_url(&db.name);
    let insert =
        "\\set ON_ERROR_STOP 1\nINSERT INTO trips (driver_uuid, rider_uuid, city_id, status, \
                  currency, requested_at) VALUES ('6f1c1a0e-0000-4000-8000-000000000001', \
                  '6f1c1a0e-0000-4000-8000-000000000002', 7, 'requested', 'EUR', \
                  '2026-12-03 10:00:00+00') RETURNING uuid, version, status;\n";
    let (ok, out, err) = psql(&url, insert);
    assert!(ok && out.contains("(1 row)"), "{out}{err}");
    let row = out.lines().nth(2).expect("a RETURNING row");
    let fields: Vec<&str> = row.split('|').map(str::trim).collect();
    let k: uuid::Uuid = fields[0].parse().expect("RETURNING gives the row key");
    assert_eq!(fields[1..], ["1", "requested"], "{out}");
    let cell = latest(&facade, k, "BASE").await.expect("written under it");
    assert_eq!(cell.cell.key.ref_key.get(), 1);
    assert_eq!(cell.cell.body.fields()["city_id"], 7);
    // The reverse mirror writes PostgreSQL's row under the same UUID.
    crate::proxy::wait_for(|| {
        let (_, out, _) = psql(
            &direct,
            &format!("SELECT version, status FROM trips WHERE uuid = '{k}';\n"),
        );
        out.contains("(1 row)").then_some(())
    });
    // `DEFAULT` written out is the same as left out; given, the key is
    // the app's.
    let given = uuid::Uuid::new_v4();
    let (ok, out, err) = psql(
        &url,
        &trip(given)
            .replace(", 1)", ", DEFAULT)")
            .replace("12.5", "DEFAULT"),
    );
    assert!(ok && out.trim() == "INSERT 0 1", "{out}{err}");
    let cell = latest(&facade, given, "BASE").await.expect("written");
    assert_eq!(cell.cell.key.ref_key.get(), 1);
    assert_eq!(cell.cell.body.fields()["fare"], serde_json::Value::Null);
    // A child's ref key with no default: PostgreSQL's error, both ways,
    // nothing written.
    let note = format!(
        "\\set ON_ERROR_STOP 1\nINSERT INTO trip_notes (trip_id, author, body, created_at) \
         VALUES ((SELECT id FROM trips WHERE uuid = '{k}'), 'a', 'b', now());\n"
    );
    for url in [&url, &direct] {
        let (ok, _, err) = psql(url, &note);
        assert!(!ok && err.contains("23502"), "{url}: {err}");
    }
    assert!(latest(&facade, k, "NOTES").await.is_none());
    // A parent that is null: PostgreSQL's error on the child's key.
    let orphan = "\\set ON_ERROR_STOP 1\nINSERT INTO trip_notes (trip_id, seq, author, body, \
                  created_at) VALUES ((SELECT id FROM trips WHERE uuid = NULL), 1, 'a', 'b', now());\n";
    for url in [&url, &direct] {
        let (ok, _, err) = psql(url, orphan);
        assert!(
            !ok && err.contains(
                "23502: null value in column \"trip_id\" of relation \"trip_notes\" violates not-null constraint"
            ),
            "{url}: {err}"
        );
    }

    // Only the key given: the row of defaults. A NOT NULL column without
    // one fails as PostgreSQL fails; with defaults (read by a proxy
    // started after they were set), the row is written whole, and a row
    // of nothing but `DEFAULT` gets a UUID of its own.
    let bare = |k: uuid::Uuid| {
        format!("\\set ON_ERROR_STOP 1\nINSERT INTO trips (uuid) VALUES ('{k}');\n")
    };
    let lacking = uuid::Uuid::new_v4();
    for url in [&url, &direct] {
        let (ok, _, err) = psql(url, &bare(lacking));
        assert!(!ok && err.contains("23502"), "{url}: {err}");
    }
    assert!(latest(&facade, lacking, "BASE").await.is_none());
    drop(proxy);
    sqlx::raw_sql(
        "ALTER TABLE trips ALTER driver_uuid SET DEFAULT '6f1c1a0e-0000-4000-8000-000000000009', \
         ALTER rider_uuid SET DEFAULT '6f1c1a0e-0000-4000-8000-000000000009', \
         ALTER city_id SET DEFAULT 0, ALTER status SET DEFAULT 'new', \
         ALTER currency SET DEFAULT 'EUR', ALTER requested_at SET DEFAULT now()",
    )
    .execute(&db.pool)
    .await
    .unwrap();
    let proxy = ProxyProcess::start(file.path(), "127.0.0.1:0");
    let url = proxy.url(&db);
    let bare_key = uuid::Uuid::new_v4();
    let (ok, out, err) = psql(&url, &bare(bare_key));
    assert!(ok && out.trim() == "INSERT 0 1", "{out}{err}");
    let cell = latest(&facade, bare_key, "BASE")
        .await
        .expect("a row of defaults");
    assert_eq!(cell.cell.key.ref_key.get(), 1);
    assert_eq!(cell.cell.body.fields()["status"], "new");
    assert_eq!(cell.cell.body.fields()["city_id"], 0);
    let (ok, out, err) = psql(
        &url,
        "\\set ON_ERROR_STOP 1\nINSERT INTO trips (version) VALUES (DEFAULT) RETURNING uuid;\n",
    );
    assert!(ok && out.contains("(1 row)"), "{out}{err}");
    let own: uuid::Uuid = out.lines().nth(2).unwrap().trim().parse().unwrap();
    let cell = latest(&facade, own, "BASE")
        .await
        .expect("written under its default");
    assert_eq!(cell.cell.body.fields()["currency"], "EUR");
    let (ok, out, err) = psql(
        &url,
        "\\set ON_ERROR_STOP 1\nINSERT INTO trips DEFAULT VALUES RETURNING uuid, status;\n",
    );
    assert!(ok && out.contains("(1 row)"), "{out}{err}");
    let own: uuid::Uuid = out
        .lines()
        .nth(2)
        .unwrap()
        .split('|')
        .next()
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    let cell = latest(&facade, own, "BASE")
        .await
        .expect("DEFAULT VALUES written");
    assert_eq!(cell.cell.body.fields()["status"], "new");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_long_insert_is_put_in_batches_the_store_takes() {
    let (db, facade, file) = primary_with("[limits]\nmax_batch_cells = 3\n").await;
    let proxy = ProxyProcess::start(file.path(), "127.0.0.1:0");
    let keys: Vec<uuid::Uuid> = (0..7).map(|_| uuid::Uuid::new_v4()).collect();
    let rows: Vec<String> = keys
        .iter()
        .map(|k| {
            let one = trip(*k);
            one[one.find(" VALUES ").unwrap() + 8..].to_string()
        })
        .collect();
    let head = &INSERT_TRIP[..INSERT_TRIP.find(" VALUES ").unwrap()];
    let (ok, out, err) = psql(
        &proxy.url(&db),
        &format!(
            "\\set ON_ERROR_STOP 1\n{head} VALUES {};\n",
            rows.join(", ")
        ),
    );
    assert!(ok && out.trim() == "INSERT 0 7", "{out}{err}");
    for k in &keys {
        assert_eq!(version(&facade, *k).await, 1);
    }
    assert_eq!(proxy.status()["write_cells"], 7);
    // Rows in error: the first failing row's error, as PostgreSQL gives
    // it, and nothing written.
    let fresh: Vec<uuid::Uuid> = (0..3).map(|_| uuid::Uuid::new_v4()).collect();
    let rows: Vec<String> = fresh
        .iter()
        .map(|k| {
            let one = trip(*k);
            one[one.find(" VALUES ").unwrap() + 8..].to_string()
        })
        .collect();
    let bad = format!(
        "{head} VALUES {}, {}, {};\n",
        rows[0],
        rows[1].replace(", 7, ", ", 'seven', "),
        rows[2].replace("'requested'", "NULL")
    );
    for url in [
        proxy.url(&db),
        crate::harness::cluster().postgres_url(&db.name),
    ] {
        let (_, _, err) = psql(&url, &bad);
        assert!(
            err.contains("22P02") && !err.contains("23502"),
            "{url}: {err}"
        );
    }
    assert!(latest(&facade, fresh[0], "BASE").await.is_none());
    facade.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_key_twice_in_an_insert_fails_or_is_skipped_as_postgresql_does() {
    let (db, facade, file) = primary().await;
    let proxy = ProxyProcess::start(file.path(), "127.0.0.1:0");
    let direct = crate::harness::cluster().postgres_url(&db.name);
    let head = &INSERT_TRIP[..INSERT_TRIP.find(" VALUES ").unwrap()];
    let row = |k: uuid::Uuid, status: &str| {
        let one = trip(k).replace("'requested'", &format!("'{status}'"));
        one[one.find(" VALUES ").unwrap() + 8..].to_string()
    };
    // Three rows, the third repeating the first's key: each row alone
    // finds no such row in the stores, but PostgreSQL checks it against
    // the statement's earlier rows too.
    let statement = |k: [uuid::Uuid; 2], tail: &str| {
        format!(
            "\\set ON_ERROR_STOP 1\n{head} VALUES {}, {}, {} {tail};\n",
            row(k[0], "requested"),
            row(k[1], "requested"),
            row(k[0], "accepted")
        )
    };
    let outcome = |url: &str, sql: &str| {
        let (ok, out, err) = psql(url, sql);
        // psql -v VERBOSITY=verbose: `ERROR:  23505: duplicate key ...`.
        let code = err
            .split_once("ERROR:  ")
            .map(|(_, rest)| rest.chars().take(5).collect::<String>());
        (ok, out.trim().to_string(), code)
    };
    let legacy = db.store().await;
    let twins = || [uuid::Uuid::new_v4(), uuid::Uuid::new_v4()];
    for (tail, expected) in [
        ("", (false, String::new(), Some("23505".to_string()))),
        (
            "ON CONFLICT (uuid) DO UPDATE SET status = excluded.status, version = trips.version + 1",
            (false, String::new(), Some("21000".to_string())),
        ),
        ("ON CONFLICT DO NOTHING", (true, "INSERT 0 2".to_string(), None)),
    ] {
        let (k, d) = (twins(), twins());
        let proxied = outcome(&proxy.url(&db), &statement(k, tail));
        assert_eq!(outcome(&direct, &statement(d, tail)), expected, "{tail}");
        assert_eq!(proxied, expected, "{tail}");
        // What PostgreSQL wrote, and nothing else: both rows, the first
        // one's values, or neither.
        for (proxied, direct) in k.iter().zip(&d) {
            let written = latest(&facade, *proxied, "BASE").await;
            let twin = latest(&legacy, *direct, "BASE").await;
            assert_eq!(written.is_some(), expected.0, "{tail}");
            assert_eq!(
                written.map(|c| c.cell.body),
                twin.map(|c| c.cell.body),
                "{tail}"
            );
        }
    }
    // An UPDATE naming one row twice updates it once.
    let (k, d) = (uuid::Uuid::new_v4(), uuid::Uuid::new_v4());
    for (url, key) in [(proxy.url(&db), k), (direct.clone(), d)] {
        let sql = format!(
            "\\set ON_ERROR_STOP 1\n{};\n\
             UPDATE trips SET status = 'accepted', version = version + 1 \
             WHERE uuid IN ('{key}', '{key}');\n",
            trip(key)
        );
        assert_eq!(
            outcome(&url, &sql),
            (true, "INSERT 0 1\nUPDATE 1".to_string(), None)
        );
    }
    assert_eq!(version(&facade, k).await, 2);
    facade.close().await;
}

/// RETURNING expressions over the written row's columns are evaluated
/// as PostgreSQL evaluates them over the row it wrote: the same output,
/// names, types and all, as the same statements run directly; UPDATE's
/// over the new version.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn returning_expressions_answer_as_postgresql_does() {
    let (db, facade, file) = primary().await;
    let proxy = ProxyProcess::start(file.path(), "127.0.0.1:0");
    let direct = crate::harness::cluster().postgres_url(&db.name);
    let returning = " RETURNING fare * 2 AS twice, upper(status), uuid IS NOT NULL, \
                     requested_at AT TIME ZONE 'UTC' AS at, version + 0.5";
    let mut outputs = Vec::new();
    for url in [proxy.url(&db), direct] {
        let k = uuid::Uuid::new_v4();
        let script = format!(
            "\\set ON_ERROR_STOP 1\n{}{returning};\n\
             UPDATE trips SET fare = fare + 1, version = version + 1 WHERE uuid = '{k}'{returning};\n",
            trip(k)
        );
        let (ok, out, err) = psql(&url, &script);
        assert!(ok, "{url}: {out}{err}");
        outputs.push(out);
    }
    assert_eq!(outputs[0], outputs[1]);
    assert!(
        outputs[0].contains("REQUESTED") && outputs[0].contains("27.00"),
        "{}",
        outputs[0]
    );
    assert_eq!(proxy.status()["writes"]["written"], 2);
    facade.close().await;
}

/// An UPDATE that sets the version to the row's own (with other values)
/// or below it cannot be a new cell past the latest: the first could
/// never be written (a retry fails the same way), the second would be
/// written and hidden, the UPDATE counted and its values lost. Both are
/// refused (`0A000`, saying why), nothing written; the same values at
/// the same version are the cell itself again (`UPDATE 1`, as PostgreSQL
/// answers an UPDATE that changes nothing).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_update_to_the_rows_own_version_or_an_older_one_is_refused_not_lost() {
    let (db, facade, file) = primary().await;
    let proxy = ProxyProcess::start(file.path(), "127.0.0.1:0");
    let url = proxy.url(&db);
    let k = uuid::Uuid::new_v4();
    let run = |sql: String| psql(&url, &format!("\\set ON_ERROR_STOP 1\n{sql};\n"));
    let (ok, out, err) = run(trip(k));
    assert!(ok, "{out}{err}");
    let set = |version: i64, status: &str| {
        format!("UPDATE trips SET version = {version}, status = '{status}' WHERE uuid = '{k}'")
    };
    let (ok, out, err) = run(set(3, "three"));
    assert!(ok && out.trim() == "UPDATE 1", "{out}{err}");
    for (version, says) in [
        (3, "which is the row's latest"),
        (2, "below the row's latest"),
    ] {
        let (ok, _, err) = run(set(version, "other"));
        assert!(
            !ok && err.contains("0A000") && err.contains(says) && err.contains("version + 1"),
            "{version}: {err}"
        );
    }
    let (ok, out, err) = run(set(3, "three"));
    assert!(ok && out.trim() == "UPDATE 1", "{out}{err}");
    assert_eq!(version(&facade, k).await, 3);
    let latest = latest(&facade, k, "BASE").await.unwrap();
    assert_eq!(latest.cell.body.fields()["status"], "three");
    let older = schemaless::CellKey {
        row_key: RowKey::from(k),
        column: Column::new("BASE").unwrap(),
        ref_key: schemaless::RefKey::new(2).unwrap(),
    };
    assert!(facade
        .get_cell(&older, ReadFrom::Master)
        .await
        .unwrap()
        .is_none());
    facade.close().await;
}

/// With `capture.bump_version`, an UPDATE that changes a row column's
/// fields and leaves its version (as an ORM writes it: the refusal above
/// without it) is the next version, as capture's trigger makes it in
/// PostgreSQL before `primary`; one that changes nothing keeps the
/// version and writes no cell, still `UPDATE 1`; one that raises the
/// version itself is left alone; an upsert's DO UPDATE likewise. The
/// reverse mirror gives PostgreSQL the versions the app was answered.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_bump_version_an_update_leaving_the_version_is_the_next_version() {
    let db = LegacyDb::trips().await;
    db.apply_schemaless().await;
    let text = db.config_text.replace(
        crate::harness::TEST_CAPTURE,
        "[capture]\nrequired = false\nbump_version = true\n",
    );
    assert_ne!(text, db.config_text);
    let config = config::Config::parse(&text, "bump.toml").unwrap();
    let facade = TripStore::connect(&config).await.unwrap();
    crate::worker::forced(&facade, Mode::Primary).await;
    let file = config_file(&format!("{text}\n[proxy]\n"));
    let proxy = ProxyProcess::start(file.path(), "127.0.0.1:0");
    let url = proxy.url(&db);
    let (k, j) = (uuid::Uuid::new_v4(), uuid::Uuid::new_v4());
    let run = |sql: String| psql(&url, &format!("\\set ON_ERROR_STOP 1\n{sql};\n"));
    for key in [k, j] {
        let (ok, out, err) = run(trip(key));
        assert!(ok, "{out}{err}");
    }
    // Whether row `key` has a BASE cell at `ref_key`.
    let has = async |key, ref_key| {
        let at = schemaless::CellKey {
            row_key: RowKey::from(key),
            column: Column::new("BASE").unwrap(),
            ref_key: schemaless::RefKey::new(ref_key).unwrap(),
        };
        facade
            .get_cell(&at, ReadFrom::Master)
            .await
            .unwrap()
            .is_some()
    };

    // An ORM's update: the fields alone. Its RETURNING shows the version
    // raised, as the trigger's BEFORE UPDATE would.
    let (ok, out, err) = run(format!(
        "UPDATE trips SET status = 'accepted', fare = 13 WHERE uuid = '{k}' \
         RETURNING version, status"
    ));
    assert!(
        ok && out.contains("2 | accepted") && out.contains("UPDATE 1"),
        "{out}{err}"
    );
    assert_eq!(version(&facade, k).await, 2);
    let body = latest(&facade, k, "BASE").await.unwrap().cell.body;
    assert_eq!(
        (&body.fields()["status"], &body.fields()["fare"]),
        (&serde_json::json!("accepted"), &serde_json::json!("13"))
    );
    // The same values again: no new version, no cell, as PostgreSQL's
    // trigger leaves an unchanged row; still `UPDATE 1`.
    let (ok, out, err) = run(format!(
        "UPDATE trips SET status = 'accepted' WHERE uuid = '{k}' RETURNING version"
    ));
    assert!(
        ok && out.contains("       2\n") && out.contains("UPDATE 1"),
        "{out}{err}"
    );
    assert_eq!(version(&facade, k).await, 2);
    assert!(has(k, 2).await && !has(k, 3).await);
    // One that raises the version itself is left alone.
    let (ok, out, err) = run(format!(
        "UPDATE trips SET status = 'completed', version = version + 5 WHERE uuid = '{k}'"
    ));
    assert!(ok && out.trim() == "UPDATE 1", "{out}{err}");
    assert_eq!(version(&facade, k).await, 7);
    // Several rows at once, each from its own latest version.
    let (ok, out, err) = run(format!(
        "UPDATE trips SET status = 'cancelled' WHERE uuid IN ('{k}', '{j}')"
    ));
    assert!(ok && out.trim() == "UPDATE 2", "{out}{err}");
    assert_eq!(
        (version(&facade, k).await, version(&facade, j).await),
        (8, 2)
    );
    // An upsert's DO UPDATE of fields alone likewise, from the latest;
    // the same values again keep the version.
    let upsert = |status: &str| {
        format!(
            "{} ON CONFLICT (uuid) DO UPDATE SET status = EXCLUDED.status RETURNING version",
            trip(j).replace("'requested'", &format!("'{status}'"))
        )
    };
    for (status, want) in [("rerouted", 3), ("rerouted", 3)] {
        let (ok, out, err) = run(upsert(status));
        assert!(
            ok && out.contains(&format!("       {want}\n")),
            "{out}{err}"
        );
        assert_eq!(version(&facade, j).await, want);
    }
    // PostgreSQL gets the versions the app was answered.
    facade.reverse().catch_up().await.unwrap();
    let versions: Vec<(i64, String)> = sqlx::query_as(
        "SELECT version::int8, status FROM trips WHERE uuid = ANY($1) ORDER BY version",
    )
    .bind(vec![j, k])
    .fetch_all(&db.pool)
    .await
    .unwrap();
    assert_eq!(
        versions,
        [(3, "rerouted".to_string()), (8, "cancelled".to_string())]
    );
    facade.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_updates_of_one_row_lose_no_acknowledged_version() {
    let (db, facade, file) = primary().await;
    let proxy = ProxyProcess::start(file.path(), "127.0.0.1:0");
    let k = uuid::Uuid::new_v4();
    let (ok, out, err) = psql(
        &proxy.url(&db),
        &format!("\\set ON_ERROR_STOP 1\n{};\n", trip(k)),
    );
    assert!(ok, "{out}{err}");
    // Four writers bump the same row's version, each with its own
    // statuses; one that loses the race for a version gets 40001, as
    // under PostgreSQL's repeatable read, and retries.
    let mut writers = Vec::new();
    for w in 0..4 {
        let url = proxy.url(&db);
        writers.push(tokio::spawn(async move {
            let mut conn = <sqlx::PgConnection as sqlx::Connection>::connect(&url)
                .await
                .unwrap();
            let (mut acked, mut retried) = (Vec::new(), 0);
            for n in 0..15 {
                let status = format!("w{w}-{n}");
                loop {
                    let done = sqlx::query(
                        "UPDATE trips SET status = $1, version = version + 1 WHERE uuid = $2",
                    )
                    .bind(&status)
                    .bind(k)
                    .execute(&mut conn)
                    .await;
                    match done {
                        Ok(done) => {
                            assert_eq!(done.rows_affected(), 1);
                            acked.push(status);
                            break;
                        }
                        Err(e) if sqlstate(&e).as_deref() == Some("40001") => retried += 1,
                        Err(e) => panic!("{e}"),
                    }
                }
            }
            (acked, retried)
        }));
    }
    let mut acked = std::collections::BTreeSet::new();
    let mut retried = 0;
    for w in writers {
        let (a, r) = w.await.unwrap();
        acked.extend(a);
        retried += r;
    }
    assert_eq!(acked.len(), 60);
    // Every acknowledged UPDATE is one version of its own: none
    // overwrote another's.
    let last = version(&facade, k).await;
    assert_eq!(last, 61, "{retried} retries");
    let mut stored = std::collections::BTreeSet::new();
    for version in 2..=last {
        let key = schemaless::CellKey {
            row_key: RowKey::from(k),
            column: Column::new("BASE").unwrap(),
            ref_key: schemaless::RefKey::new(version).unwrap(),
        };
        let cell = facade.get_cell(&key, ReadFrom::Master).await.unwrap();
        let status = cell.unwrap().cell.body.fields()["status"].clone();
        stored.insert(status.as_str().unwrap().to_string());
    }
    assert_eq!(stored, acked);
    assert_eq!(proxy.status()["writes"]["failed"], retried);
    facade.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_proxy_killed_under_facade_writes_loses_no_acknowledged_write() {
    let (db, facade, file) = primary().await;
    let proxy = ProxyProcess::start(file.path(), "127.0.0.1:0");
    let addr = proxy.addr;
    let url = proxy.url(&db);
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let acked = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let insert = INSERT_TRIP.replace("'{k}'", "$1");
    let mut writers = Vec::new();
    for _ in 0..3 {
        let (url, stop, acked, insert) = (url.clone(), stop.clone(), acked.clone(), insert.clone());
        writers.push(tokio::spawn(async move {
            let mut failures = 0;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                // A new connection when the last one broke: the app's
                // reconnect.
                let Ok(mut conn) = <sqlx::PgConnection as sqlx::Connection>::connect(&url).await
                else {
                    failures += 1;
                    tokio::time::sleep(std::time::Duration::from_millis(20)).await;
                    continue;
                };
                while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                    let k = uuid::Uuid::new_v4();
                    match sqlx::query(sqlx::AssertSqlSafe(insert.as_str()))
                        .bind(k)
                        .execute(&mut conn)
                        .await
                    {
                        Ok(_) => acked.lock().unwrap().push(k),
                        Err(_) => {
                            failures += 1;
                            break;
                        }
                    }
                }
            }
            failures
        }));
    }
    let acked_at_least = |n: usize| {
        let acked = acked.clone();
        async move {
            for _ in 0..1500 {
                if acked.lock().unwrap().len() >= n {
                    return;
                }
                tokio::time::sleep(std::time::Duration::from_millis(20)).await;
            }
            panic!("fewer than {n} writes acknowledged");
        }
    };
    acked_at_least(100).await;
    let mut proxy = proxy;
    proxy.child.kill().unwrap();
    proxy.child.wait().unwrap();
    let before = acked.lock().unwrap().len();
    // Started again on the same port, as a supervisor would.
    let _again = ProxyProcess::start(file.path(), &addr.to_string());
    acked_at_least(before + 100).await;
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let mut failures = 0;
    for w in writers {
        failures += w.await.unwrap();
    }
    assert!(failures >= 1, "the kill broke some connection");
    let acked = acked.lock().unwrap().clone();
    let mut lost = Vec::new();
    for k in &acked {
        if latest(&facade, *k, "BASE").await.is_none() {
            lost.push(*k);
        }
    }
    assert!(
        lost.is_empty(),
        "{} of {} acknowledged writes lost: {lost:?}",
        lost.len(),
        acked.len()
    );
    facade.close().await;
}

/// A client of the write workload: program, script (clients/proxy) and
/// the script's first argument, if it takes one.
type WriteClient = (&'static str, &'static str, Option<&'static str>);

/// `client`'s script run with `url`, `key` and the statements: its
/// output.
fn client(
    (program, script, lead): WriteClient,
    url: &str,
    key: uuid::Uuid,
    statements: &[String],
) -> String {
    let key = key.to_string();
    let mut args: Vec<&str> = lead.into_iter().collect();
    args.extend([url, key.as_str()]);
    args.extend(statements.iter().map(String::as_str));
    crate::proxy_modes::run_client(program, script, &args)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn psycopg_asyncpg_node_pg_and_jdbc_get_what_postgresql_gives_them_for_writes_in_primary_and_schemaless(
) {
    let (db, facade, file) = primary().await;
    let proxy = ProxyProcess::start(file.path(), "127.0.0.1:0");
    let direct = crate::harness::cluster().postgres_url(&db.name);
    let insert = INSERT_TRIP.replace("'{k}'", "$1");
    let statements = [
        // The id is drawn (and reserved): `id - id` is 0 both ways, an
        // int8 as PostgreSQL describes it.
        format!("{insert} RETURNING id - id AS drawn, uuid"),
        "UPDATE trips SET status = 'accepted', fare = fare * 2, version = version + 1 \
         WHERE uuid = $1 RETURNING version, fare, status, requested_at, completed_at, \
         distance_km, driver_uuid"
            .to_string(),
        insert.clone(),
        "UPDATE trips SET status = 'x', version = version + 1 WHERE uuid = $1 \
         AND status = 'requested'"
            .to_string(),
        "INSERT INTO trip_notes (trip_id, seq, author, body, created_at) VALUES \
         ((SELECT id FROM trips WHERE uuid = $1), 1, 'ops', 'a note', '2026-12-03 12:00:00Z')"
            .to_string(),
        format!(
            "{insert} ON CONFLICT (uuid) DO UPDATE SET status = EXCLUDED.status || '!', \
             version = trips.version + 1 RETURNING version, status, fare"
        ),
        format!("{insert} ON CONFLICT DO NOTHING"),
        "UPDATE trips SET version = version + 1 WHERE uuid = $1".to_string(),
        // In text (even): the key reads as KEY in both outputs.
        "UPDATE trips SET completed_at = requested_at + interval '25 minutes', \
         version = version + 1 WHERE uuid = $1 RETURNING completed_at, uuid"
            .to_string(),
    ];
    let clients: [WriteClient; 4] = [
        ("python3", "writes.py", None),
        ("python3", "writes_asyncpg.py", None),
        ("node", "writes.js", None),
        ("java", "Jdbc.java", Some("writes")),
    ];
    for (c, mode) in clients
        .iter()
        .map(|c| (*c, Mode::Primary))
        .chain(clients.iter().map(|c| (*c, Mode::Schemaless)))
    {
        let script = c.1;
        if mode == Mode::Schemaless && script == "writes.py" {
            crate::worker::forced(&facade, Mode::Schemaless).await;
            // The proxy follows: reads Schemaless cannot answer are refused.
            crate::proxy::wait_for(|| {
                let r = psql(&proxy.url(&db), "SELECT count(*) FROM trips;\n");
                r.2.contains("0A000").then_some(())
            });
        }
        let (k, d) = (uuid::Uuid::new_v4(), uuid::Uuid::new_v4());
        let through = client(c, &proxy.url(&db), k, &statements);
        let twin = client(c, &direct, d, &statements);
        assert_eq!(through, twin, "{script}");
        assert_eq!(
            through.matches("error 23505").count(),
            1,
            "{script}: {through}"
        );
        assert!(through.contains("KEY"), "{script}: {through}");
        // And Schemaless holds what the app was told.
        let cell = latest(&facade, k, "BASE").await.expect("written");
        assert_eq!(cell.cell.key.ref_key.get(), 5, "{script}");
        assert_eq!(cell.cell.body.fields()["status"], "requested!");
        assert!(latest(&facade, k, "NOTES").await.is_some());
    }
    // One 23505 per client and mode.
    assert_eq!(proxy.status()["writes"]["failed"], 2 * clients.len());
    // A write the proxy refuses, prepared by each client: PostgreSQL
    // prepares it as sent, so asyncpg, which checks its arguments against
    // the statement's parameters before it binds, gets the refusal too.
    let delete =
        ["DELETE FROM trips WHERE uuid = $1 AND city_id IN (SELECT 7) RETURNING id".to_string()];
    for c in clients {
        let out = client(c, &proxy.url(&db), uuid::Uuid::new_v4(), &delete);
        assert!(out.trim().ends_with("0: error 0A000"), "{}: {out}", c.1);
    }
    // JDBC's executeBatch pipelines its rows with one Sync, in one
    // implicit transaction: run as one by the facade, the counts
    // PostgreSQL gives; with a row that exists, the error PostgreSQL
    // gives and nothing written. A PreparedStatement's batch binds one
    // statement; a Statement's sends each row's SQL with its own Parse.
    let fresh = || [uuid::Uuid::new_v4(), uuid::Uuid::new_v4()];
    for how in ["batch", "statements"] {
        let batch = |url: &str, keys: &[uuid::Uuid]| {
            let keys: Vec<String> = keys.iter().map(uuid::Uuid::to_string).collect();
            let mut args = vec![how, url, insert.as_str()];
            args.extend(keys.iter().map(String::as_str));
            crate::proxy_modes::run_client("java", "Jdbc.java", &args)
        };
        let (rows, twins) = (fresh(), fresh());
        let direct_out = batch(&direct, &twins);
        assert_eq!(direct_out.trim(), "counts [1, 1]", "{how}");
        assert_eq!(batch(&proxy.url(&db), &rows), direct_out, "{how}");
        for k in rows {
            assert!(latest(&facade, k, "BASE").await.is_some(), "{how}");
        }
        let [a, b] = fresh();
        let direct_out = batch(&direct, &[b, twins[0]]);
        assert_eq!(direct_out.trim(), "error 23505", "{how}");
        assert_eq!(batch(&proxy.url(&db), &[a, rows[0]]), direct_out, "{how}");
        assert!(latest(&facade, a, "BASE").await.is_none(), "{how}");
    }
    // The same with psycopg's and asyncpg's executemany, and statements
    // executed one by one in a psycopg pipeline block.
    for driver in ["psycopg", "asyncpg", "pipeline"] {
        let batch = |url: &str, keys: &[uuid::Uuid]| {
            let keys: Vec<String> = keys.iter().map(uuid::Uuid::to_string).collect();
            let mut args = vec![driver, url, insert.as_str()];
            args.extend(keys.iter().map(String::as_str));
            crate::proxy_modes::run_client("python3", "batch.py", &args)
        };
        let (rows, twins) = (fresh(), fresh());
        let direct_out = batch(&direct, &twins);
        assert_eq!(direct_out.trim(), "ok", "{driver}");
        assert_eq!(batch(&proxy.url(&db), &rows), direct_out, "{driver}");
        for k in rows {
            assert!(latest(&facade, k, "BASE").await.is_some(), "{driver}");
        }
        let [a, b] = fresh();
        let direct_out = batch(&direct, &[b, twins[0]]);
        assert_eq!(direct_out.trim(), "error 23505", "{driver}");
        assert_eq!(
            batch(&proxy.url(&db), &[a, rows[0]]),
            direct_out,
            "{driver}"
        );
        assert!(latest(&facade, a, "BASE").await.is_none(), "{driver}");
    }
    facade.close().await;
}

/// A statement, its parameters' types, and their values in binary (the
/// first, the row key, filled in per row).
type BinaryWrite<'a> = (&'a str, Vec<u32>, Vec<Vec<u8>>);

/// `Parse` of `sql` with parameter types `types`, `Bind` of `params` all
/// in binary, `Execute`, `Sync` on a raw connection: every message of
/// the answer.
fn raw_binary_write(
    stream: &mut std::net::TcpStream,
    sql: &str,
    types: &[u32],
    params: &[Vec<u8>],
) -> Vec<(u8, Vec<u8>)> {
    use crate::proxy_modes::{cstr, message};
    let mut parse = [cstr(""), cstr(sql)].concat();
    parse.extend_from_slice(&(types.len() as i16).to_be_bytes());
    for t in types {
        parse.extend_from_slice(&t.to_be_bytes());
    }
    let mut bind = [cstr(""), cstr("")].concat();
    bind.extend_from_slice(&1i16.to_be_bytes());
    bind.extend_from_slice(&1i16.to_be_bytes());
    bind.extend_from_slice(&(params.len() as i16).to_be_bytes());
    for p in params {
        bind.extend_from_slice(&(p.len() as i32).to_be_bytes());
        bind.extend_from_slice(p);
    }
    bind.extend_from_slice(&0i16.to_be_bytes());
    let mut out = message(b'P', &parse);
    out.extend(message(b'B', &bind));
    crate::proxy_modes::execute_and_sync(stream, out)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_write_whose_parse_fails_runs_nowhere() {
    // The key declared `varchar` (as JDBC's setString declares it):
    // PostgreSQL refuses the Parse (42804), and skips the Bind and the
    // Execute sent with it. The facade must not run them either.
    let (db, facade, file) = primary().await;
    let proxy = ProxyProcess::start(file.path(), "127.0.0.1:0");
    let mut through = crate::proxy::raw_session(proxy.addr, &db);
    let insert = INSERT_TRIP.replace("'{k}'", "$1");
    let k = uuid::Uuid::new_v4();
    let answer = raw_binary_write(
        &mut through,
        &insert,
        &[1043],
        &[k.to_string().into_bytes()],
    );
    let kinds: Vec<u8> = answer.iter().map(|(kind, _)| *kind).collect();
    assert_eq!(kinds, b"EZ", "{answer:?}");
    assert!(
        String::from_utf8_lossy(&answer[0].1).contains("C42804"),
        "{answer:?}"
    );
    assert!(latest(&facade, k, "BASE").await.is_none(), "written");
    let in_postgres = format!("SELECT count(*) FROM trips WHERE uuid = '{k}'");
    assert_eq!(db.count(&in_postgres).await, 0);
    // The session goes on: the same write with the key as a uuid runs
    // through the facade.
    let answer = raw_binary_write(&mut through, &insert, &[2950], &[k.as_bytes().to_vec()]);
    let kinds: Vec<u8> = answer.iter().map(|(kind, _)| *kind).collect();
    assert_eq!(kinds, b"12CZ", "{answer:?}");
    assert!(latest(&facade, k, "BASE").await.is_some());
    facade.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn binary_parameters_are_read_as_postgresql_reads_them() {
    let (db, facade, file) = primary().await;
    let legacy = db.store().await;
    let proxy = ProxyProcess::start(file.path(), "127.0.0.1:0");
    let direct = crate::harness::cluster().postgres_url(&db.name);
    let (k, d) = (uuid::Uuid::new_v4(), uuid::Uuid::new_v4());
    for (url, u) in [(proxy.url(&db), k), (direct, d)] {
        let (ok, out, err) = psql(&url, &format!("\\set ON_ERROR_STOP 1\n{};\n", trip(u)));
        assert!(ok, "{out}{err}");
    }
    // PostgreSQL's own binary forms of the values, as drivers send them.
    let binary = |sql: &str| {
        let sql = sql.to_string();
        let pool = db.pool.clone();
        async move {
            sqlx::query_scalar::<_, Vec<u8>>(sqlx::AssertSqlSafe(sql))
                .fetch_one(&pool)
                .await
                .unwrap()
        }
    };
    let writes: [BinaryWrite; 3] = [
        (
            "UPDATE trips SET fare = $2, requested_at = $3, completed_at = $4, distance_km = $5, \
             city_id = $6, version = version + 1 WHERE uuid = $1",
            vec![2950, 1700, 1184, 1184, 701, 23],
            vec![
                Vec::new(),
                binary("SELECT numeric_send(-1234.5)").await,
                binary("SELECT timestamptz_send('2026-12-03 10:00:00.5+05:30')").await,
                binary("SELECT timestamptz_send('2026-12-03 23:59:59.999999-11')").await,
                binary("SELECT float8send(1e-7)").await,
                binary("SELECT int4send(-3)").await,
            ],
        ),
        (
            "INSERT INTO fare_adjustments (trip_id, seq, amount, reason, codes, created_at) \
             VALUES ((SELECT id FROM trips WHERE uuid = $1), 1, $2, $3, $4, $5)",
            vec![2950, 1700, 25, 1009, 1114],
            vec![
                Vec::new(),
                binary("SELECT numeric_send(0.0000001)").await,
                binary("SELECT textsend('late \"pickup\"')").await,
                binary("SELECT array_send(ARRAY['a', 'b\"c', NULL, '']::text[])").await,
                binary("SELECT timestamp_send('1999-12-31 23:59:59.999999')").await,
            ],
        ),
        (
            "INSERT INTO billing_attempts (trip_id, seq, amount, currency, succeeded, \
             processor_response, attempted_at) VALUES ((SELECT id FROM trips WHERE uuid = $1), \
             1, $2, 'EUR', $3, $4, $5)",
            vec![2950, 1700, 16, 3802, 1184],
            vec![
                Vec::new(),
                binary("SELECT numeric_send(99999999.99)").await,
                binary("SELECT boolsend(true)").await,
                binary(r#"SELECT jsonb_send('{"codes": [1, 2.50, 1e3], "ok": null}')"#).await,
                binary("SELECT timestamptz_send('1970-01-01 00:00:00+00')").await,
            ],
        ),
    ];
    let mut through = crate::proxy::raw_session(proxy.addr, &db);
    let port = crate::harness::cluster().spec().postgres_port;
    let mut own =
        crate::proxy::raw_session(std::net::SocketAddr::from(([127, 0, 0, 1], port)), &db);
    for (sql, types, params) in &writes {
        let with = |u: uuid::Uuid| {
            let mut p = params.clone();
            p[0] = u.as_bytes().to_vec();
            p
        };
        let a = raw_binary_write(&mut through, sql, types, &with(k));
        let b = raw_binary_write(&mut own, sql, types, &with(d));
        assert!(b.iter().all(|(kind, _)| *kind != b'E'), "{sql}: {b:?}");
        assert_eq!(a, b, "{sql}");
    }
    for column in ["BASE", "FARE_ADJUSTMENTS", "BILLING"] {
        let written = latest(&facade, k, column).await.expect("written");
        let expected = latest(&legacy, d, column).await.expect("the direct row");
        assert_eq!(written.cell.body, expected.cell.body, "{column}");
        assert_eq!(
            written.cell.key.ref_key, expected.cell.key.ref_key,
            "{column}"
        );
    }
    // A value the layout cannot hold in a cell is refused, naming it.
    let a = raw_binary_write(
        &mut through,
        writes[0].0,
        &writes[0].1,
        &[
            k.as_bytes().to_vec(),
            writes[0].2[1].clone(),
            writes[0].2[2].clone(),
            binary("SELECT timestamptz_send('infinity')").await,
            writes[0].2[4].clone(),
            writes[0].2[5].clone(),
        ],
    );
    let error = a.iter().find(|(kind, _)| *kind == b'E').expect("an error");
    let error = String::from_utf8_lossy(&error.1);
    assert!(
        error.contains("0A000") && error.contains("completed_at"),
        "{error}"
    );
    assert_eq!(proxy.status()["writes"]["written"], 4);
    facade.close().await;
}

/// Waits until the proxy reports `mode`.
pub(crate) fn proxy_in(proxy: &ProxyProcess, mode: &str) {
    crate::proxy::wait_for(|| (proxy.status()["mode"] == mode).then_some(()));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_statement_prepared_before_a_mode_change_is_judged_in_the_new_mode() {
    let (db, facade, proxy, k) = shadow_with_a_trip().await;
    // One connection, its statements prepared once (sqlx caches them by
    // their text): in shadow, all go to PostgreSQL.
    let mut conn = <sqlx::PgConnection as sqlx::Connection>::connect(&proxy.url(&db))
        .await
        .unwrap();
    let bump = "UPDATE trips SET status = $1, version = version + 1 WHERE uuid = $2";
    let by_city = "UPDATE trips SET status = $1 WHERE city_id = $2";
    let done = sqlx::query(bump)
        .bind("in shadow")
        .bind(k)
        .execute(&mut conn)
        .await
        .unwrap();
    assert_eq!(done.rows_affected(), 1);
    let done = sqlx::query(by_city)
        .bind("in shadow")
        .bind(7)
        .execute(&mut conn)
        .await
        .unwrap();
    assert_eq!(done.rows_affected(), 1);
    assert!(latest(&facade, k, "BASE").await.is_none(), "PostgreSQL's");

    // In primary, the same prepared statements: the translatable one runs
    // through the facade, the other is refused.
    crate::worker::forced(&facade, Mode::Primary).await;
    proxy_in(&proxy, "primary");
    let s = uuid::Uuid::new_v4();
    let (ok, out, err) = psql(
        &proxy.url(&db),
        &format!("\\set ON_ERROR_STOP 1\n{};\n", trip(s)),
    );
    assert!(ok, "{out}{err}");
    let done = sqlx::query(bump)
        .bind("in primary")
        .bind(s)
        .execute(&mut conn)
        .await
        .unwrap();
    assert_eq!(done.rows_affected(), 1);
    let cell = latest(&facade, s, "BASE").await.unwrap();
    assert_eq!(cell.cell.key.ref_key.get(), 2);
    assert_eq!(cell.cell.body.fields()["status"], "in primary");
    let refused = sqlx::query(by_city)
        .bind("in primary")
        .bind(7)
        .execute(&mut conn)
        .await
        .unwrap_err();
    assert_eq!(sqlstate(&refused).as_deref(), Some("0A000"), "{refused}");
    assert!(
        refused.to_string().contains("non-key predicate"),
        "{refused}"
    );
    // Prepared inside a transaction block (forwarded, as everything
    // there is), then bound outside one: judged as it is bound.
    let by_rider = "UPDATE trips SET status = $1 WHERE rider_uuid = $2";
    let rider = uuid::Uuid::parse_str("6f1c1a0e-0000-4000-8000-000000000002").unwrap();
    let mut tx = sqlx::Connection::begin(&mut conn).await.unwrap();
    let done = sqlx::query(by_rider)
        .bind("in a block")
        .bind(rider)
        .execute(&mut *tx)
        .await
        .unwrap();
    assert!(done.rows_affected() >= 1);
    tx.rollback().await.unwrap();
    let refused = sqlx::query(by_rider)
        .bind("outside")
        .bind(rider)
        .execute(&mut conn)
        .await
        .unwrap_err();
    assert_eq!(sqlstate(&refused).as_deref(), Some("0A000"), "{refused}");
    // Prepared and refused in primary, then bound in shadow, where writes
    // go to PostgreSQL: PostgreSQL holds the statement as the app sent it,
    // so it runs there.
    let d = uuid::Uuid::new_v4();
    sqlx::query(sqlx::AssertSqlSafe(trip(d)))
        .execute(&db.pool)
        .await
        .unwrap();
    let delete = "DELETE FROM trips WHERE uuid = $1 AND city_id IN (SELECT 7) RETURNING id";
    let refused = sqlx::query(delete)
        .bind(d)
        .execute(&mut conn)
        .await
        .unwrap_err();
    assert_eq!(sqlstate(&refused).as_deref(), Some("0A000"), "{refused}");
    let in_postgres = format!("SELECT count(*) FROM trips WHERE uuid = '{d}'");
    assert_eq!(db.count(&in_postgres).await, 1, "refused, not run");
    crate::worker::forced(&facade, Mode::Shadow).await;
    proxy_in(&proxy, "shadow");
    let done = sqlx::query(delete)
        .bind(d)
        .execute(&mut conn)
        .await
        .unwrap();
    assert_eq!(done.rows_affected(), 1);
    assert_eq!(db.count(&in_postgres).await, 0);
    // The session goes on.
    let n: i64 = sqlx::query_scalar("SELECT count(*) FROM trips WHERE city_id = $1")
        .bind(7)
        .fetch_one(&mut conn)
        .await
        .unwrap();
    assert!(n >= 1);
    facade.close().await;
}

/// A session with `standard_conforming_strings` off reads `\` in a string
/// literal as an escape, which the translator does not: its writes on
/// layout tables are refused in `primary` (not run through the facade
/// with another value), saying why, until it is on again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_without_standard_strings_is_not_written_through_the_facade() {
    let (db, facade, file) = primary().await;
    let proxy = ProxyProcess::start(file.path(), "127.0.0.1:0");
    let (off, on) = (uuid::Uuid::new_v4(), uuid::Uuid::new_v4());
    let script = format!(
        "SET standard_conforming_strings = off;\n{};\nSET standard_conforming_strings = on;\n\\set ON_ERROR_STOP 1\n{};\n",
        trip(off).replace("'EUR'", "'E\\\\U'"),
        trip(on)
    );
    let (ok, out, err) = psql(&proxy.url(&db), &script);
    assert!(ok && out.trim().ends_with("INSERT 0 1"), "{out}{err}");
    assert!(
        err.contains("0A000") && err.contains("standard_conforming_strings off"),
        "{err}"
    );
    assert!(latest(&facade, off, "BASE").await.is_none(), "refused");
    assert!(latest(&facade, on, "BASE").await.is_some(), "written");
    facade.close().await;
}

/// An INSERT that lists no columns gives the table's first columns, in
/// the catalog's order (not the config's, nor the CREATE's once a column
/// was dropped and added again), as many as each row has values: the
/// proxy writes the same cell PostgreSQL's row reads as. A value for the
/// integer id, which no cell holds, is reserved for the row, which the
/// reverse mirror inserts under it.
#[tokio::test(flavor = "multi_thread")]
async fn an_insert_listing_no_columns_writes_each_value_to_the_column_at_its_place() {
    let (db, facade, file) = primary().await;
    // Order now: id, uuid, driver_uuid, rider_uuid, city_id, status, fare,
    // currency, distance_km, requested_at, version, promo, completed_at.
    sqlx::raw_sql(
        "ALTER TABLE trips DROP COLUMN completed_at; ALTER TABLE trips ADD COLUMN promo text; \
         ALTER TABLE trips ADD COLUMN completed_at timestamptz",
    )
    .execute(&db.pool)
    .await
    .unwrap();
    let proxy = ProxyProcess::start(file.path(), "127.0.0.1:0");
    let url = proxy.url(&db);
    let direct = crate::harness::cluster().postgres_url(&db.name);
    let legacy = db.store().await;
    let whole = |k: uuid::Uuid| {
        format!(
            "\\set ON_ERROR_STOP 1\nINSERT INTO trips VALUES (DEFAULT, '{k}', \
             '6f1c1a0e-0000-4000-8000-000000000001', '6f1c1a0e-0000-4000-8000-000000000002', 7, \
             'completed', 12.5, 'EUR', 0.1, '2026-12-03 10:00:00+02', 3, DEFAULT, \
             '2026-12-03 11:30:00+02') RETURNING status, fare, version, completed_at;\n"
        )
    };
    let (k, d) = (uuid::Uuid::new_v4(), uuid::Uuid::new_v4());
    let (ok, through, err) = psql(&url, &whole(k));
    assert!(ok && through.contains("(1 row)"), "{through}{err}");
    let (ok, straight, err) = psql(&direct, &whole(d));
    assert!(ok, "{straight}{err}");
    assert_eq!(through, straight, "RETURNING answers as PostgreSQL does");
    let written = latest(&facade, k, "BASE").await.expect("written");
    let expected = latest(&legacy, d, "BASE").await.expect("the direct row");
    assert_eq!(written.cell.key.ref_key.get(), 3);
    assert_eq!(written.cell.body, expected.cell.body);
    assert_ne!(
        written.cell.body.fields()["completed_at"],
        serde_json::Value::Null,
        "the last value is completed_at's, where the table has it"
    );
    // Fewer values: the first columns, the rest their defaults; two rows.
    let (a, b) = (uuid::Uuid::new_v4(), uuid::Uuid::new_v4());
    let short = format!(
        "\\set ON_ERROR_STOP 1\nINSERT INTO public.trips VALUES (DEFAULT, '{a}', \
         '6f1c1a0e-0000-4000-8000-000000000001', '6f1c1a0e-0000-4000-8000-000000000002', 7, \
         'requested', NULL, 'USD', NULL, '2026-12-03 10:00:00+00'), (DEFAULT, '{b}', \
         '6f1c1a0e-0000-4000-8000-000000000001', '6f1c1a0e-0000-4000-8000-000000000002', 8, \
         'requested', 3, 'USD', NULL, '2026-12-03 10:00:00+00');\n"
    );
    let (ok, out, err) = psql(&url, &short);
    assert!(ok && out.trim() == "INSERT 0 2", "{out}{err}");
    for (key, city) in [(a, 7), (b, 8)] {
        let cell = latest(&facade, key, "BASE").await.expect("written");
        assert_eq!(cell.cell.key.ref_key.get(), 1, "version's default");
        assert_eq!(cell.cell.body.fields()["city_id"], city);
        assert_eq!(cell.cell.body.fields()["currency"], "USD");
        assert_eq!(
            cell.cell.body.fields()["completed_at"],
            serde_json::Value::Null
        );
    }
    // The reverse mirror writes PostgreSQL's rows: each value where the
    // app put it.
    crate::proxy::wait_for(|| {
        let (_, out, _) = psql(
            &direct,
            &format!(
                "SELECT status, version, completed_at IS NOT NULL FROM trips WHERE uuid = '{k}';\n"
            ),
        );
        out.contains("completed |       3 | t").then_some(())
    });

    // A value for the integer id, named or at its place (as an app that
    // draws its ids first writes it): the row's id, reserved for it, the
    // reverse mirror's row under it; an id a row has is PostgreSQL's
    // unique violation, both ways, and nothing is written.
    let (named, placed, again) = (
        uuid::Uuid::new_v4(),
        uuid::Uuid::new_v4(),
        uuid::Uuid::new_v4(),
    );
    let given = |k: uuid::Uuid, id: i64| {
        trip(k)
            .replace("(uuid,", "(id, uuid,")
            .replace("VALUES (", &format!("VALUES ({id}, "))
    };
    let (ok, out, err) = psql(
        &url,
        &format!("\\set ON_ERROR_STOP 1\n{};\n", given(named, 424242)),
    );
    assert!(ok && out.trim() == "INSERT 0 1", "{out}{err}");
    let at_place = whole(placed).replace("VALUES (DEFAULT,", "VALUES (424243,");
    let (ok, out, err) = psql(&url, &at_place);
    assert!(ok && out.contains("(1 row)"), "{out}{err}");
    for (key, id) in [(named, 424242), (placed, 424243)] {
        crate::proxy::wait_for(|| {
            let (_, out, _) = psql(
                &direct,
                &format!("SELECT id FROM trips WHERE uuid = '{key}';\n"),
            );
            out.contains(&format!(" {id}\n")).then_some(())
        });
    }
    for url in [&url, &direct] {
        let (ok, _, err) = psql(
            url,
            &format!("\\set ON_ERROR_STOP 1\n{};\n", given(again, 424242)),
        );
        assert!(!ok && err.contains("duplicate key value"), "{url}: {err}");
    }
    assert!(latest(&facade, again, "BASE").await.is_none());
    // More values than the table has columns: refused, as PostgreSQL
    // refuses it.
    // More values than the table has columns, or VALUES rows of
    // different lengths: PostgreSQL's own error (42601, not the proxy's
    // 0A000), the same both ways, nothing written.
    let over = format!(
        "\\set VERBOSITY verbose\n{}",
        whole(again).replace("+02')", "+02', 'one too many')")
    );
    let ragged = format!(
        "\\set VERBOSITY verbose\n\\set ON_ERROR_STOP 1\nINSERT INTO trips (uuid, status) VALUES ('{again}', 'a'), \
         ('{again}');\n"
    );
    for (sql, says) in [
        (
            &over,
            "42601: INSERT has more expressions than target columns",
        ),
        (&ragged, "42601: VALUES lists must all be the same length"),
    ] {
        for url in [&url, &direct] {
            let (ok, _, err) = psql(url, sql);
            assert!(!ok && err.contains(says), "{url}: {err}");
        }
    }
    assert!(latest(&facade, again, "BASE").await.is_none());
    facade.close().await;
}

/// An app that names rows by the parent's integer id (`WHERE id = $1`,
/// `IN`, `= ANY`, a child's rows by `trip_id = $1`) has its UPDATEs and
/// DELETEs run through the facade in `primary`: PostgreSQL maps the id
/// to the row's UUID, which an id is for life. An id no row has (or no
/// longer has) writes nothing, and the tag says so, as PostgreSQL's
/// would.
#[tokio::test(flavor = "multi_thread")]
async fn writes_naming_rows_by_the_integer_id_run_through_the_facade() {
    let (db, facade, file) = primary().await;
    let proxy = ProxyProcess::start(file.path(), "127.0.0.1:0");
    proxy_in(&proxy, "primary");
    let url = proxy.url(&db);
    let direct = crate::harness::cluster().postgres_url(&db.name);
    let (k, other) = (uuid::Uuid::new_v4(), uuid::Uuid::new_v4());
    for key in [k, other] {
        let (ok, out, err) = psql(&url, &format!("\\set ON_ERROR_STOP 1\n{};\n", trip(key)));
        assert!(ok && out.trim() == "INSERT 0 1", "{out}{err}");
    }
    let note = format!(
        "\\set ON_ERROR_STOP 1\nINSERT INTO trip_notes (trip_id, seq, author, body, created_at) \
         VALUES ((SELECT id FROM trips WHERE uuid = '{k}'), 1, 'a', 'b', now());\n"
    );
    let (ok, out, err) = psql(&url, &note);
    assert!(ok && out.trim() == "INSERT 0 1", "{out}{err}");
    // The id is PostgreSQL's once the reverse mirror has applied the row.
    let id_of = |key: uuid::Uuid| {
        crate::proxy::wait_for(|| {
            let (_, out, _) = psql(
                &direct,
                &format!("\\pset tuples_only on\nSELECT id FROM trips WHERE uuid = '{key}';\n"),
            );
            out.trim().parse::<i64>().ok()
        })
    };
    let (id, other_id) = (id_of(k), id_of(other));

    let (ok, out, err) = psql(
        &url,
        &format!(
            "\\set ON_ERROR_STOP 1\nUPDATE trips SET status = 'by id', version = version + 1 \
             WHERE id = {id} RETURNING uuid, status, version;\n"
        ),
    );
    assert!(
        ok && out.contains(&format!("{k} | by id  |       2")),
        "{out}{err}"
    );
    let cell = latest(&facade, k, "BASE").await.unwrap();
    assert_eq!(cell.cell.key.ref_key.get(), 2);
    assert_eq!(cell.cell.body.fields()["status"], "by id");
    // Prepared, as drivers send it; and ids in a list and an array.
    let pool = sqlx::postgres::PgPoolOptions::new()
        .max_connections(1)
        .connect(&url)
        .await
        .unwrap();
    let done =
        sqlx::query("UPDATE trips SET fare = $1::numeric, version = version + 1 WHERE id = $2")
            .bind("7.50")
            .bind(id)
            .execute(&pool)
            .await
            .unwrap();
    assert_eq!(done.rows_affected(), 1);
    let (ok, out, err) = psql(
        &url,
        &format!(
            "\\set ON_ERROR_STOP 1\nUPDATE trips SET status = 'listed', version = version + 1 \
             WHERE id IN ({id}, {other_id}, 987654321);\n"
        ),
    );
    assert!(ok && out.trim() == "UPDATE 2", "{out}{err}");
    for key in [k, other] {
        let cell = latest(&facade, key, "BASE").await.unwrap();
        assert_eq!(cell.cell.body.fields()["status"], "listed");
    }
    assert_eq!(
        latest(&facade, k, "BASE")
            .await
            .unwrap()
            .cell
            .key
            .ref_key
            .get(),
        4
    );
    // No such id: nothing written, both ways.
    let none = "\\set ON_ERROR_STOP 1\nUPDATE trips SET status = 'ghost', version = version + 1 \
                WHERE id = 987654321;\n";
    for url in [&url, &direct] {
        let (ok, out, err) = psql(url, none);
        assert!(ok && out.trim() == "UPDATE 0", "{out}{err}");
    }
    // A child row inserted under its parent's integer id, as an ORM
    // writes it; under an id no parent has, PostgreSQL's error both ways.
    let child = |parent: i64, seq: i64| {
        format!(
            "\\set ON_ERROR_STOP 1\nINSERT INTO trip_notes (trip_id, seq, author, body, \
             created_at) VALUES ({parent}, {seq}, 'orm', 'by id', now());\n"
        )
    };
    let (ok, out, err) = psql(&url, &child(id, 2));
    assert!(ok && out.trim() == "INSERT 0 1", "{out}{err}");
    let notes = facade
        .get_column_cells(
            &[RowKey::from(k)],
            &Column::new("NOTES").unwrap(),
            ReadFrom::Master,
        )
        .await
        .unwrap();
    assert!(
        notes
            .iter()
            .any(|c| c.cell.key.ref_key.get() == 2 && c.cell.body.fields()["text"] == "by id"),
        "{notes:?}"
    );
    let missing = format!("\\set VERBOSITY verbose\n{}", child(987654321, 1));
    let (ok, _, err) = psql(&url, &missing);
    let (_, _, direct_err) = psql(&direct, &missing);
    assert!(!ok && err.contains("23503"), "{err}");
    // The message, the detail `Key (trip_id)=(987654321) is not present
    // in table "trips".`, the schema, table and constraint: the twin's.
    assert_eq!(error_fields(&err), error_fields(&direct_err), "{err}");
    // A child's rows by their parent's integer id.
    let (ok, out, err) = psql(
        &url,
        &format!("\\set ON_ERROR_STOP 1\nDELETE FROM trip_notes WHERE trip_id = {id};\n"),
    );
    assert!(ok && out.trim() == "DELETE 2", "{out}{err}");
    assert!(facade
        .get_column_cells(
            &[RowKey::from(k)],
            &Column::new("DELETED").unwrap(),
            ReadFrom::Master
        )
        .await
        .unwrap()
        .iter()
        .any(|c| c.cell.body.fields()["column"] == "NOTES"));
    // The parent by an array of ids: its tombstone.
    let (ok, out, err) = psql(
        &url,
        &format!(
            "\\set ON_ERROR_STOP 1\nDELETE FROM trips WHERE id = ANY(ARRAY[{other_id}]) \
             RETURNING uuid;\n"
        ),
    );
    assert!(ok && out.contains(&other.to_string()), "{out}{err}");
    assert!(latest(&facade, other, "BASE").await.is_none(), "deleted");
    // Deleted: its id names no row to write, as in PostgreSQL once the
    // reverse mirror has deleted it there too.
    let again = format!(
        "\\set ON_ERROR_STOP 1\nUPDATE trips SET status = 'late', version = version + 1 \
         WHERE id = {other_id};\n"
    );
    let (ok, out, err) = psql(&url, &again);
    assert!(ok && out.trim() == "UPDATE 0", "{out}{err}");
    pool.close().await;
    facade.close().await;
}

/// `INSERT ... RETURNING id`, which every ORM sends, in `primary`: the
/// id is drawn from the column's identity, as PostgreSQL would draw it,
/// reserved for the row (`mezzanine.row_ids`), and answered; the app can
/// write by it at once, before the reverse mirror has put the row in
/// PostgreSQL, and the reverse mirror puts it there under that id (an
/// identity `ALWAYS` here, which takes a value only when overridden).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_insert_returning_the_integer_id_is_answered_with_the_id_the_row_gets() {
    let (db, facade, file) = primary_without_reverse().await;
    sqlx::raw_sql("ALTER TABLE trips ALTER COLUMN id SET GENERATED ALWAYS")
        .execute(&db.pool)
        .await
        .unwrap();
    let proxy = ProxyProcess::start(file.path(), "127.0.0.1:0");
    proxy_in(&proxy, "primary");
    let url = proxy.url(&db);
    let direct = crate::harness::cluster().postgres_url(&db.name);
    let (a, b) = (uuid::Uuid::new_v4(), uuid::Uuid::new_v4());
    let two = format!(
        "\\set ON_ERROR_STOP 1\n\\pset tuples_only on\n\\pset format unaligned\n{}, {} \
         RETURNING id, uuid;\n",
        trip(a),
        &trip(b)[trip(b).find("VALUES").unwrap() + "VALUES ".len()..]
    );
    let (ok, out, err) = psql(&url, &two);
    assert!(ok, "{out}{err}");
    let ids: Vec<(i64, String)> = out
        .lines()
        .filter_map(|l| l.split_once('|'))
        .map(|(id, key)| (id.parse().unwrap(), key.to_string()))
        .collect();
    assert_eq!(
        ids.iter().map(|(_, k)| k.clone()).collect::<Vec<_>>(),
        [a.to_string(), b.to_string()],
        "{out}"
    );
    let (id_a, id_b) = (ids[0].0, ids[1].0);
    assert!(id_a > 0 && id_b > id_a, "drawn in the rows' order: {out}");
    // Prepared, as a driver sends it: an int8, as PostgreSQL types it.
    let pool = sqlx::postgres::PgPoolOptions::new()
        .max_connections(1)
        .connect(&url)
        .await
        .unwrap();
    let c = uuid::Uuid::new_v4();
    let id_c: i64 = sqlx::query_scalar(sqlx::AssertSqlSafe(format!(
        "{} RETURNING id",
        trip(c).replace(&format!("'{c}'"), "$1")
    )))
    .bind(c)
    .fetch_one(&pool)
    .await
    .unwrap();
    assert!(id_c > id_b);
    // The row description is PostgreSQL's own (the table's OID, the id's
    // column number and type), byte for byte; so is `RETURNING *`'s
    // (pgjdbc's RETURN_GENERATED_KEYS), every column in the table's
    // order, its row the id and the cells' values.
    let port = crate::harness::cluster().spec().postgres_port;
    let own_addr = std::net::SocketAddr::from(([127, 0, 0, 1], port));
    let returned = |stream: &mut std::net::TcpStream, returning: &str| {
        let k = uuid::Uuid::new_v4();
        let answer = raw_answer(stream, &format!("{} RETURNING {returning}", trip(k)));
        let description = answer
            .iter()
            .find(|(kind, _)| *kind == b'T')
            .cloned()
            .unwrap_or_else(|| panic!("no row description for {k}: {answer:?}"));
        // The row's values (text), the key written as KEY.
        let body = answer
            .iter()
            .find(|(kind, _)| *kind == b'D')
            .map(|(_, body)| body.clone())
            .unwrap_or_default();
        let mut row = Vec::new();
        let mut at = 2;
        while at + 4 <= body.len() {
            let len = i32::from_be_bytes(body[at..at + 4].try_into().unwrap());
            at += 4;
            let len = usize::try_from(len).unwrap_or(0);
            row.push(String::from_utf8_lossy(&body[at..at + len]).replace(&k.to_string(), "KEY"));
            at += len;
        }
        (description, row)
    };
    for returning in ["id, uuid", "*"] {
        let (through, row) = returned(&mut crate::proxy::raw_session(proxy.addr, &db), returning);
        let (own, own_row) = returned(&mut crate::proxy::raw_session(own_addr, &db), returning);
        assert_eq!(through, own, "RETURNING {returning}");
        // The same values but the id (the first: each its own).
        assert!(
            row.len() >= 2 && row[1..] == own_row[1..],
            "{row:?} {own_row:?}"
        );
        assert!(row[0].parse::<i64>().unwrap() > 0 && row.contains(&"KEY".to_string()));
    }
    assert_eq!(
        returned(&mut crate::proxy::raw_session(proxy.addr, &db), "*")
            .1
            .len(),
        12
    );
    let reserved = |pool: sqlx::PgPool, key: uuid::Uuid| async move {
        sqlx::query_scalar::<_, i64>("SELECT id FROM mezzanine.row_ids WHERE row_key = $1")
            .bind(key)
            .fetch_optional(&pool)
            .await
            .unwrap()
    };
    assert_eq!(reserved(db.pool.clone(), a).await, Some(id_a));

    // An id given: on an identity ALWAYS, PostgreSQL's refusal, both
    // ways; one reserved for another row (with the identity BY DEFAULT
    // for a moment, through a proxy that reads it so), a unique
    // violation; nothing written.
    let e = uuid::Uuid::new_v4();
    let given = |id: i64| {
        format!(
            "\\set ON_ERROR_STOP 1\n{};\n",
            trip(e)
                .replace("(uuid,", "(id, uuid,")
                .replace("VALUES (", &format!("VALUES ({id}, "))
        )
    };
    for url in [&url, &direct] {
        let (ok, _, err) = psql(url, &given(id_a));
        assert!(!ok && err.contains("GENERATED ALWAYS"), "{url}: {err}");
    }
    sqlx::raw_sql("ALTER TABLE trips ALTER COLUMN id SET GENERATED BY DEFAULT")
        .execute(&db.pool)
        .await
        .unwrap();
    let by_default = ProxyProcess::start(file.path(), "127.0.0.1:0");
    proxy_in(&by_default, "primary");
    let (ok, _, err) = psql(&by_default.url(&db), &given(id_a));
    assert!(!ok && err.contains("duplicate key value"), "{err}");
    assert!(latest(&facade, e, "BASE").await.is_none());
    // The app's own `nextval`, which the read-only evaluation of values
    // could not draw: drawn, then reserved.
    let f = uuid::Uuid::new_v4();
    let (ok, out, err) = psql(
        &by_default.url(&db),
        &format!(
            "\\set ON_ERROR_STOP 1\n\\pset tuples_only on\n{} RETURNING id;\n",
            trip(f)
                .replace("(uuid,", "(id, uuid,")
                .replace("VALUES (", "VALUES (nextval('trips_id_seq'), ")
        ),
    );
    assert!(ok, "{out}{err}");
    let id_f: i64 = out
        .lines()
        .next()
        .unwrap_or_default()
        .trim()
        .parse()
        .unwrap();
    assert!(id_f > id_c, "{out}");
    assert_eq!(reserved(db.pool.clone(), f).await, Some(id_f));
    drop(by_default);
    sqlx::raw_sql("ALTER TABLE trips ALTER COLUMN id SET GENERATED ALWAYS")
        .execute(&db.pool)
        .await
        .unwrap();

    // No reverse mirror has run: the rows are not in PostgreSQL, yet the
    // app writes by the ids it was answered, a child row too.
    let (ok, out, err) = psql(
        &url,
        &format!(
            "\\set ON_ERROR_STOP 1\nUPDATE trips SET status = 'by its new id', \
             version = version + 1 WHERE id = {id_a};\n\
             INSERT INTO trip_notes (trip_id, seq, author, body, created_at) \
             VALUES ({id_a}, 1, 'orm', 'under a new id', now());\n\
             UPDATE trips SET version = version + 1 WHERE id = ANY(ARRAY[{id_b}, {id_c}]);\n"
        ),
    );
    assert!(ok, "{out}{err}");
    assert_eq!(
        out.lines().collect::<Vec<_>>(),
        ["UPDATE 1", "INSERT 0 1", "UPDATE 2"]
    );
    let cell = latest(&facade, a, "BASE").await.unwrap();
    assert_eq!(cell.cell.body.fields()["status"], "by its new id");
    let mine = format!("uuid IN ('{a}', '{b}', '{c}')");
    let (_, out, _) = psql(
        &direct,
        &format!("SELECT count(*) FROM trips WHERE {mine};\n"),
    );
    assert!(out.contains(" 0\n"), "not applied yet: {out}");

    // The reverse mirror puts each row in PostgreSQL under its id, and
    // ends the reservations; the sequence goes on past them.
    facade.reverse().catch_up().await.unwrap();
    let (ok, out, err) = psql(
        &direct,
        &format!(
            "\\set QUIET 1\n\\pset tuples_only on\n\\pset format unaligned\nSELECT id, uuid, status, version \
             FROM trips WHERE {mine} ORDER BY id;\nSELECT trip_id, body FROM trip_notes;\n\
             SELECT count(*) FROM mezzanine.row_ids;\n"
        ),
    );
    assert!(ok, "{err}");
    assert_eq!(
        out.lines().collect::<Vec<_>>(),
        [
            format!("{id_a}|{a}|by its new id|2"),
            format!("{id_b}|{b}|requested|2"),
            format!("{id_c}|{c}|requested|2"),
            format!("{id_a}|under a new id"),
            "0".to_string(),
        ],
        "{out}"
    );
    let (_, out, _) = psql(
        &direct,
        &format!("\\pset tuples_only on\nSELECT id FROM trips WHERE uuid = '{f}';\n"),
    );
    assert_eq!(out.trim(), id_f.to_string());
    let d = uuid::Uuid::new_v4();
    let (ok, out, err) = psql(
        &direct,
        &format!("\\pset tuples_only on\n{} RETURNING id;\n", trip(d)),
    );
    assert!(ok, "{err}");
    let id_d: i64 = out.lines().next().unwrap().trim().parse().unwrap();
    assert!(id_d > id_f, "{out}");
    // Now in PostgreSQL, an id names its row there.
    let (ok, out, err) = psql(
        &url,
        &format!("UPDATE trips SET version = version + 1 WHERE id = {id_b};\n"),
    );
    assert!(ok && out.trim() == "UPDATE 1", "{out}{err}");
    pool.close().await;
    facade.close().await;
}

/// Several writes in one simple `Query` (psql's `\;`, a driver's
/// multi-statement string) in `primary`: run through the facade as one,
/// as PostgreSQL runs them in one implicit transaction, each statement
/// answered in turn, byte for byte as PostgreSQL answers the same Query;
/// one that fails is raised after the ones before it are answered, and
/// nothing of the Query is written, as PostgreSQL rolls it back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_query_of_several_writes_runs_through_the_facade_as_one() {
    let (db, facade, file) = primary().await;
    let proxy = ProxyProcess::start(file.path(), "127.0.0.1:0");
    proxy_in(&proxy, "primary");
    let port = crate::harness::cluster().spec().postgres_port;
    let own_addr = std::net::SocketAddr::from(([127, 0, 0, 1], port));
    let mut through = crate::proxy::raw_session(proxy.addr, &db);
    let mut own = crate::proxy::raw_session(own_addr, &db);
    let three = |key: uuid::Uuid| {
        format!(
            "{}; UPDATE trips SET status = 'rated', version = version + 1 WHERE uuid = '{key}' \
             RETURNING status, version, fare; INSERT INTO trip_notes (trip_id, seq, author, \
             body, created_at) VALUES ((SELECT id FROM trips WHERE uuid = '{key}'), 1, 'ops', \
             'in one Query', '2026-12-03 12:00:00Z')",
            trip(key)
        )
    };
    let (k, d) = (uuid::Uuid::new_v4(), uuid::Uuid::new_v4());
    let answer = raw_answer(&mut through, &three(k));
    assert_eq!(answer, raw_answer(&mut own, &three(d)));
    let tags: Vec<String> = answer
        .iter()
        .filter(|(kind, _)| *kind == b'C')
        .map(|(_, body)| {
            String::from_utf8_lossy(body)
                .trim_end_matches('\0')
                .to_string()
        })
        .collect();
    assert_eq!(tags, ["INSERT 0 1", "UPDATE 1", "INSERT 0 1"]);
    let base = latest(&facade, k, "BASE").await.expect("written");
    assert_eq!(base.cell.key.ref_key.get(), 2);
    assert_eq!(base.cell.body.fields()["status"], "rated");
    let notes = facade
        .get_column_cells(
            &[RowKey::from(k)],
            &Column::new("NOTES").unwrap(),
            ReadFrom::Master,
        )
        .await
        .unwrap();
    assert_eq!(notes.len(), 1, "{notes:?}");

    // The second statement fails (the same row again): the first is
    // answered, then PostgreSQL's error, and nothing is written either way.
    let twice = |key: uuid::Uuid| format!("{}; {}", trip(key), trip(key));
    let (k, d) = (uuid::Uuid::new_v4(), uuid::Uuid::new_v4());
    let kinds = |answer: &[(u8, Vec<u8>)]| -> Vec<u8> { answer.iter().map(|(k, _)| *k).collect() };
    let a = raw_answer(&mut through, &twice(k));
    let b = raw_answer(&mut own, &twice(d));
    assert_eq!(kinds(&a), kinds(&b), "{a:?}");
    assert_eq!(kinds(&b), b"CEZ");
    assert_eq!(a[0], b[0], "the first statement's tag");
    for answer in [&a, &b] {
        assert!(
            String::from_utf8_lossy(&answer[1].1).contains("C23505"),
            "{answer:?}"
        );
    }
    assert!(
        latest(&facade, k, "BASE").await.is_none(),
        "nothing written"
    );
    let (_, out, _) = psql(
        &crate::harness::cluster().postgres_url(&db.name),
        &format!("SELECT count(*) FROM trips WHERE uuid = '{d}';\n"),
    );
    assert!(out.contains(" 0\n"), "{out}");
    // A write with a statement that is not one is still refused whole.
    let mixed = raw_answer(
        &mut through,
        &format!("{}; SELECT 1", trip(uuid::Uuid::new_v4())),
    );
    assert!(
        String::from_utf8_lossy(&mixed[0].1).contains("send it alone"),
        "{mixed:?}"
    );
    facade.close().await;
}

/// JDBC's generated keys (`RETURN_GENERATED_KEYS`, which pgjdbc sends as
/// `RETURNING *`, as Spring's `KeyHolder` asks) in `primary`: every
/// column, typed and valued as PostgreSQL gives them, the id drawn for the
/// row; the same output as the same statements straight to PostgreSQL.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn jdbc_generated_keys_are_answered_as_postgresql_answers_them() {
    let (db, facade, file) = primary().await;
    let proxy = ProxyProcess::start(file.path(), "127.0.0.1:0");
    proxy_in(&proxy, "primary");
    let direct = crate::harness::cluster().postgres_url(&db.name);
    let insert = INSERT_TRIP.replace("'{k}'", "$1");
    let keys = |n: usize| {
        (0..n)
            .map(|_| uuid::Uuid::new_v4().to_string())
            .collect::<Vec<_>>()
    };
    let run = |url: &str, keys: &[String]| {
        let mut args = vec!["keys", url, insert.as_str()];
        args.extend(keys.iter().map(String::as_str));
        // A key inserted twice: PostgreSQL's unique violation, both ways.
        args.push(keys[0].as_str());
        crate::proxy_modes::run_client("java", "Jdbc.java", &args)
    };
    let (mine, theirs) = (keys(2), keys(2));
    let through = run(&proxy.url(&db), &mine);
    let straight = run(&direct, &theirs);
    assert_eq!(through, straight);
    assert!(
        through.contains("count 1 keys [[ID (Long), KEY (UUID)") && through.contains("error 23505"),
        "{through}"
    );
    for key in &mine {
        let key = uuid::Uuid::parse_str(key).unwrap();
        assert!(
            latest(&facade, key, "BASE").await.is_some(),
            "{key} written"
        );
    }
    facade.close().await;
}

/// Rows inserted through the proxy one after the other in `primary` are
/// numbered in that order, as PostgreSQL numbers them: each id is drawn
/// when the row is inserted and reserved for it. The reverse mirror, which
/// drew them otherwise, applies shard by shard: rows of a later shard
/// inserted first came out with the higher ids, and `ORDER BY id` no
/// longer said which came first.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rows_inserted_one_after_another_are_numbered_in_that_order() {
    let (db, facade, file) = primary_without_reverse().await;
    let proxy = ProxyProcess::start(file.path(), "127.0.0.1:0");
    proxy_in(&proxy, "primary");
    let url = proxy.url(&db);
    // Four rows of four shards, inserted from the highest shard down: the
    // reverse mirror applies the lowest first.
    let shards = facade.shard_count();
    let mut keys: Vec<uuid::Uuid> = Vec::new();
    while keys.len() < 4 {
        let k = uuid::Uuid::new_v4();
        let shard = |k: &uuid::Uuid| schemaless::routing::shard_of(&RowKey::from(*k), shards);
        if keys.iter().all(|other| shard(other) != shard(&k)) {
            keys.push(k);
        }
    }
    keys.sort_by_key(|k| {
        std::cmp::Reverse(schemaless::routing::shard_of(&RowKey::from(*k), shards))
    });
    for (i, k) in keys.iter().enumerate() {
        // Two of them through a prepared statement, as drivers send it.
        let (ok, out, err) = if i % 2 == 0 {
            psql(&url, &format!("\\set ON_ERROR_STOP 1\n{};\n", trip(*k)))
        } else {
            let pool = sqlx::postgres::PgPoolOptions::new()
                .max_connections(1)
                .connect(&url)
                .await
                .unwrap();
            let done = sqlx::query(sqlx::AssertSqlSafe(INSERT_TRIP.replace("'{k}'", "$1")))
                .bind(*k)
                .execute(&pool)
                .await
                .unwrap();
            pool.close().await;
            (
                true,
                format!("INSERT 0 {}", done.rows_affected()),
                String::new(),
            )
        };
        assert!(ok && out.trim() == "INSERT 0 1", "{out}{err}");
    }
    facade.reverse().catch_up().await.unwrap();
    let listed: Vec<String> = keys.iter().map(|k| format!("'{k}'")).collect();
    let (ok, out, err) = psql(
        &crate::harness::cluster().postgres_url(&db.name),
        &format!(
            "\\pset tuples_only on\nSELECT uuid FROM trips WHERE uuid IN ({}) ORDER BY id;\n\
             SELECT count(*) FROM mezzanine.row_ids;\n",
            listed.join(", ")
        ),
    );
    assert!(ok, "{err}");
    let mut lines: Vec<&str> = out
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .collect();
    assert_eq!(lines.pop(), Some("0"), "every reservation taken: {out}");
    let expected: Vec<String> = keys.iter().map(ToString::to_string).collect();
    assert_eq!(lines, expected, "numbered in the order inserted");
    facade.close().await;
}

/// The lines of psql's verbose error that PostgreSQL's fields make: the
/// message, detail, schema, table and constraint (not the location, which
/// is in the proxy's raising statement).
pub(crate) fn error_fields(err: &str) -> Vec<String> {
    err.lines()
        // `psql:<stdin>:2: ERROR:  23505: ...`
        .map(|l| l.find("ERROR:").map_or(l, |at| &l[at..]))
        .filter(|l| {
            [
                "ERROR:",
                "DETAIL:",
                "SCHEMA NAME:",
                "TABLE NAME:",
                "CONSTRAINT NAME:",
            ]
            .iter()
            .any(|p| l.starts_with(p))
        })
        .map(String::from)
        .collect()
}
