//! A corpus of read shapes through the proxy in `shadow` at the full read
//! share, each answered from Schemaless where the translator takes it and
//! forwarded where it does not, against the same statement run on
//! PostgreSQL directly: psql's output must be the same, byte for byte
//! (as sets where the statement leaves the order open). Served or
//! forwarded, an app never sees a difference.

use std::time::{Duration, Instant};

use crate::harness::config_file;
use crate::proxy::{psql, ProxyProcess};

/// psql's output, its rows sorted when the statement sets no order.
fn comparable(out: &str, ordered: bool) -> String {
    if ordered {
        return out.to_string();
    }
    let mut lines: Vec<&str> = out.lines().collect();
    // Header, rule, rows, the count line: sort the rows only.
    if lines.len() > 3 {
        let end = lines.len() - 2;
        lines[2..end].sort_unstable();
    }
    lines.join("\n")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_read_shape_answers_as_postgresql_does_served_or_forwarded() {
    let (db, config, text, facade) = crate::verify::mirrored(40, 77, "").await;
    crate::mirror::walk_to(&facade, &config, tripstore::Mode::Shadow).await;
    let file = config_file(&format!("{text}\n[proxy]\n"));
    for step in [
        &["index", "create", "trips_by_driver"][..],
        &["index", "backfill", "trips_by_driver"],
        &["index", "switch", "trips_by_driver"],
    ] {
        let out = crate::harness::mezzanine(file.path(), step)
            .output()
            .unwrap();
        assert!(out.status.success(), "{step:?}: {out:?}");
    }
    // The backfilled index agrees with every trip's cell.
    let out = crate::harness::mezzanine(file.path(), &["index", "verify", "trips_by_driver"])
        .output()
        .unwrap();
    let said = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success()
            && said.contains(
                ": 40 rows checked, 40 entries as they should be, 0 problems, 0 rows behind"
            ),
        "{out:?}"
    );
    // Keys to read: trips with notes and without, and a busy driver.
    let with_notes: Vec<(String,)> = sqlx::query_as(
        "SELECT t.uuid::text FROM trips t
         WHERE EXISTS (SELECT 1 FROM trip_notes n WHERE n.trip_id = t.id)
         ORDER BY t.id LIMIT 2",
    )
    .fetch_all(&db.pool)
    .await
    .unwrap();
    let (k1, k2) = (with_notes[0].0.clone(), with_notes[1].0.clone());
    let bare: String = sqlx::query_scalar(
        "SELECT t.uuid::text FROM trips t
         WHERE NOT EXISTS (SELECT 1 FROM trip_notes n WHERE n.trip_id = t.id)
         ORDER BY t.id LIMIT 1",
    )
    .fetch_one(&db.pool)
    .await
    .unwrap();
    let driver: String = sqlx::query_scalar(
        "SELECT driver_uuid::text FROM trips GROUP BY driver_uuid
         ORDER BY count(*) DESC, driver_uuid LIMIT 1",
    )
    .fetch_one(&db.pool)
    .await
    .unwrap();
    let missing = uuid::Uuid::new_v4().to_string();
    // The driver's second trip's time as a wall clock in a zone 14 hours
    // off UTC: a zoneless bound means it only in a session of that zone.
    let kiritimati: String = sqlx::query_scalar(
        "SELECT to_char(requested_at AT TIME ZONE 'Pacific/Kiritimati', 'YYYY-MM-DD HH24:MI:SS.US')
         FROM trips WHERE driver_uuid::text = $1 ORDER BY requested_at OFFSET 1 LIMIT 1",
    )
    .bind(&driver)
    .fetch_one(&db.pool)
    .await
    .unwrap();

    let proxy = ProxyProcess::start(file.path(), "127.0.0.1:0");
    let through = proxy.url(&db);
    let direct = crate::harness::cluster().postgres_url(&db.name);
    // The proxy's facade sees shadow at its next mode poll.
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        let before = proxy.status()["served"]["schemaless"].as_u64().unwrap_or(0);
        let probe = format!("SELECT status FROM trips WHERE uuid = '{k1}';\n");
        assert!(psql(&through, &probe).0);
        if proxy.status()["served"]["schemaless"].as_u64().unwrap_or(0) > before {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "nothing served: {}",
            proxy.status()
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }

    // (statement, whether it sets the order of every row it returns)
    let corpus: Vec<(String, bool)> = vec![
        (format!("SELECT uuid, status, fare, currency, city_id FROM trips WHERE uuid = '{k1}'"), true),
        (format!("SELECT * FROM trips WHERE uuid = '{k1}'"), true),
        (format!("SELECT t.* FROM trips t WHERE t.uuid = '{k1}'"), true),
        (format!("SELECT uuid, fare FROM trips WHERE uuid IN ('{k1}', '{k2}', '{missing}')"), false),
        (format!("SELECT uuid, fare FROM trips WHERE uuid IN ('{k1}', '{k1}')"), true),
        (format!("SELECT uuid, fare FROM trips WHERE uuid IN ('{k1}', '{k2}') ORDER BY fare DESC, uuid"), true),
        (format!("SELECT uuid, status FROM trips WHERE uuid = ANY('{{{k1},{k2}}}'::uuid[]) ORDER BY uuid"), true),
        (format!("SELECT status AS s, fare AS \"Fare\", t.currency FROM trips AS t WHERE t.uuid = '{k1}'"), true),
        (format!("SELECT \"status\", \"fare\" FROM \"trips\" WHERE \"uuid\" = '{k1}'"), true),
        (format!("SELECT STATUS, Fare FROM TRIPS WHERE UUID = '{k1}'"), true),
        (format!("SELECT status FROM public.trips WHERE uuid = '{k1}'"), true),
        (format!("SELECT status, status FROM trips WHERE uuid = '{k1}'"), true),
        (format!("SELECT status FROM trips WHERE uuid = '{k1}' LIMIT 0"), true),
        (format!("SELECT status FROM trips WHERE uuid = '{missing}'"), true),
        (format!("SELECT status FROM trips WHERE uuid = upper('{k1}')::uuid"), true),
        (format!("SELECT status FROM trips WHERE '{k1}' = uuid"), true),
        (format!("SELECT status FROM trips WHERE uuid = '{k1}' AND status = 'completed'"), true),
        (format!("SELECT status FROM trips WHERE uuid = '{k1}' AND status <> 'completed'"), true),
        (format!("SELECT fare FROM trips WHERE uuid = '{k1}' AND fare > 10"), true),
        (format!("SELECT fare FROM trips WHERE uuid = '{k1}' AND completed_at IS NULL"), true),
        (format!("SELECT fare FROM trips WHERE uuid = '{k1}' AND completed_at IS NOT NULL"), true),
        (format!("SELECT status FROM trips WHERE uuid = '{k1}' OR uuid = '{k2}'"), false),
        ("SELECT status FROM trips WHERE uuid = NULL".to_string(), true),
        (format!("SELECT requested_at, completed_at, distance_km FROM trips WHERE uuid = '{k1}'"), true),
        (format!("SET TimeZone = 'Asia/Kolkata';\nSELECT requested_at, completed_at FROM trips WHERE uuid = '{k1}'"), true),
        (format!("SET DateStyle = 'SQL, DMY';\nSELECT requested_at FROM trips WHERE uuid = '{k1}'"), true),
        (format!("SET extra_float_digits = 0;\nSELECT distance_km FROM trips WHERE uuid = '{k1}'"), true),
        (format!("SELECT fare::text FROM trips WHERE uuid = '{k1}'"), true),
        // A cast column is another value: a date, not the timestamp; an
        // upper-case text that no uuid's text equals.
        (format!("SELECT requested_at::date, (requested_at)::time FROM trips WHERE uuid = '{k1}'"), true),
        (format!("SELECT status FROM trips WHERE uuid::text = upper('{k1}')"), true),
        (format!("SELECT n.body FROM trip_notes n JOIN trips t ON t.id = n.trip_id WHERE t.uuid = '{k1}' ORDER BY n.created_at::date DESC, n.seq"), true),
        (format!("SELECT t.uuid, n.author, n.body FROM trips t JOIN trip_notes n ON n.trip_id = t.id WHERE t.uuid = '{k1}' ORDER BY n.seq"), true),
        (format!("SELECT t.uuid, n.body FROM trips t JOIN trip_notes n ON n.trip_id = t.id WHERE t.uuid = '{k1}'"), false),
        (format!("SELECT t.uuid, n.body FROM trips t LEFT JOIN trip_notes n ON n.trip_id = t.id WHERE t.uuid = '{bare}'"), true),
        (format!("SELECT t.uuid, n.body FROM trips t LEFT JOIN trip_notes n ON t.id = n.trip_id WHERE t.uuid IN ('{k1}', '{bare}') ORDER BY t.uuid, n.seq"), true),
        (format!("SELECT n.body FROM trip_notes n JOIN trips t ON t.id = n.trip_id WHERE t.uuid = '{k1}' ORDER BY n.seq DESC LIMIT 1"), true),
        // ORDER BY a position, or an output column's name (one an input
        // column's name too: the output's wins, as in PostgreSQL).
        (format!("SELECT n.seq, n.body FROM trip_notes n JOIN trips t ON t.id = n.trip_id WHERE t.uuid = '{k1}' ORDER BY 1 DESC"), true),
        (format!("SELECT n.body AS seq, n.seq AS body FROM trip_notes n JOIN trips t ON t.id = n.trip_id WHERE t.uuid = '{k1}' ORDER BY seq"), true),
        (format!("SELECT uuid, requested_at AS at FROM trips WHERE driver_uuid = '{driver}' ORDER BY at DESC LIMIT 3"), true),
        (format!("SELECT uuid, requested_at FROM trips WHERE driver_uuid = '{driver}' ORDER BY 2 LIMIT 2"), true),
        (format!("SELECT uuid, requested_at FROM trips WHERE driver_uuid = '{driver}' ORDER BY requested_at DESC LIMIT 5"), true),
        (format!("SELECT uuid, requested_at FROM trips WHERE driver_uuid = '{driver}' ORDER BY requested_at, uuid"), true),
        (format!("SELECT uuid, status FROM trips WHERE driver_uuid = '{driver}'"), false),
        (format!("SELECT uuid, city_id FROM trips WHERE driver_uuid = '{driver}' AND city_id > 2"), false),
        (format!("SELECT uuid FROM trips WHERE driver_uuid = '{driver}' AND city_id = '3'"), false),
        (format!("SELECT uuid FROM trips WHERE driver_uuid = '{driver}' AND status IN ('completed', 'requested')"), false),
        (format!("SELECT uuid FROM trips WHERE driver_uuid = '{driver}' AND status = ANY('{{completed,cancelled}}')"), false),
        (format!("SELECT uuid, requested_at FROM trips WHERE driver_uuid = '{driver}' AND requested_at BETWEEN '2015-01-01' AND '2030-01-01' ORDER BY requested_at DESC, uuid DESC LIMIT 3"), true),
        (format!("SELECT uuid, fare FROM trips WHERE driver_uuid = '{driver}' AND requested_at >= '2015-03-01 00:00:00+00' ORDER BY requested_at LIMIT 2"), true),
        (format!("SELECT uuid FROM trips WHERE driver_uuid = '{driver}' AND requested_at < now() ORDER BY requested_at DESC LIMIT 1"), true),
        (format!("SELECT uuid FROM trips WHERE driver_uuid = '{driver}' ORDER BY requested_at DESC LIMIT 0"), true),
        (format!("SELECT uuid, n.body FROM trips t JOIN trip_notes n ON n.trip_id = t.id WHERE t.driver_uuid = '{driver}'"), false),
        (format!("SELECT count(*) FROM trips WHERE driver_uuid = '{driver}'"), true),
        // Conditions besides the row key: PostgreSQL evaluates them over
        // the rows read from Schemaless, in the app's session, or raises
        // the statement's own error when it refuses one.
        (format!("SELECT status FROM trips WHERE uuid = '{k1}' AND status LIKE 'c%'"), true),
        (format!("SELECT status FROM trips WHERE uuid = '{k1}' AND (status = 'x' OR fare > 0) AND NOT completed_at IS NULL"), true),
        (format!("SELECT uuid, fare FROM trips WHERE uuid IN ('{k1}', '{k2}', '{bare}') AND fare BETWEEN 1 AND 1000 ORDER BY fare DESC NULLS LAST, uuid LIMIT 2"), true),
        (format!("SELECT uuid FROM trips WHERE uuid IN ('{k1}', '{k2}') AND uuid <> '{k2}'"), true),
        (format!("SELECT n.seq, n.body FROM trips t JOIN trip_notes n ON n.trip_id = t.id AND n.seq > 1 WHERE t.uuid = '{k1}' AND n.author <> '' ORDER BY n.seq"), true),
        (format!("SELECT t.uuid, n.seq FROM trips t LEFT JOIN trip_notes n ON n.trip_id = t.id AND n.seq > 1000 WHERE t.uuid = '{k1}'"), true),
        (format!("SELECT t.uuid, n.seq FROM trips t LEFT JOIN trip_notes n ON n.trip_id = t.id WHERE t.uuid = '{bare}' AND n.seq IS NULL"), true),
        (format!("SET TimeZone = 'Pacific/Kiritimati';\nSELECT uuid FROM trips WHERE uuid = '{k1}' AND requested_at >= '{kiritimati}'"), true),
        (format!("SELECT fare FROM trips WHERE uuid = '{k1}' AND fare = 'abc'"), true),
        (format!("SELECT fare FROM trips WHERE uuid = '{missing}' AND city_id = '1.5'"), true),
        (format!("SELECT fare FROM trips WHERE uuid = '{k1}' AND status::int = 1"), true),
        // The session's settings give a value its meaning: the bound is
        // evaluated in the app's zone, not the facade's.
        (format!("SET TimeZone = 'Pacific/Kiritimati';\nSELECT uuid, requested_at FROM trips WHERE driver_uuid = '{driver}' AND requested_at >= '{kiritimati}' ORDER BY requested_at LIMIT 1"), true),
        (format!("SET TimeZone = 'Pacific/Kiritimati';\nSELECT uuid FROM trips WHERE driver_uuid = '{driver}' AND requested_at < '{kiritimati}' ORDER BY requested_at DESC LIMIT 1"), true),
    ];
    let mut failures = Vec::new();
    let mut served_count = 0;
    for (sql, ordered) in &corpus {
        let script = format!("\\set ON_ERROR_STOP 1\n{sql};\n");
        let before = proxy.status()["served"]["schemaless"].as_u64().unwrap_or(0);
        let (ok_p, out_p, err_p) = psql(&through, &script);
        let served = proxy.status()["served"]["schemaless"].as_u64().unwrap_or(0) > before;
        served_count += usize::from(served);
        let (ok_d, out_d, err_d) = psql(&direct, &script);
        if (ok_p, comparable(&out_p, *ordered), &err_p)
            != (ok_d, comparable(&out_d, *ordered), &err_d)
        {
            failures.push(format!(
                "{sql}\n  served: {served}\n  proxy ({ok_p}): {out_p}{err_p}\n  direct ({ok_d}): {out_d}{err_d}"
            ));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
    // Most of the corpus is answered by Schemaless: the comparison is of
    // the served path, not of PostgreSQL with itself.
    assert!(
        served_count >= corpus.len() / 2,
        "only {served_count} of {} served",
        corpus.len()
    );

    // An index orders and compares its strings byte by byte, as this
    // database's `C` collation does: a read ordered or bounded by status
    // is served. Collated otherwise (ICU's, whose order is not the bytes':
    // `'B' < 'a'` in bytes), the same reads are forwarded, since a LIMIT
    // after an ORDER BY would take other rows; ordered by time, still
    // served. (A new proxy: the catalog is read once per process.)
    let by_status = [
        (format!("SELECT uuid, status FROM trips WHERE driver_uuid = '{driver}' ORDER BY status, uuid LIMIT 3"), true),
        (format!("SELECT uuid FROM trips WHERE driver_uuid = '{driver}' AND status > 'c'"), false),
    ];
    let by_time = format!(
        "SELECT uuid FROM trips WHERE driver_uuid = '{driver}' ORDER BY requested_at LIMIT 2"
    );
    let served_through = |proxy: &ProxyProcess, sql: &str, ordered: bool| {
        let url = proxy.url(&db);
        let before = proxy.status()["served"]["schemaless"].as_u64().unwrap_or(0);
        let script = format!("\\set ON_ERROR_STOP 1\n{sql};\n");
        let (ok, out, err) = psql(&url, &script);
        let (_, twin, _) = psql(&direct, &script);
        assert!(
            ok && comparable(&out, ordered) == comparable(&twin, ordered),
            "{sql}\n{out}{err}\n{twin}"
        );
        proxy.status()["served"]["schemaless"].as_u64().unwrap_or(0) > before
    };
    for (sql, ordered) in &by_status {
        assert!(
            served_through(&proxy, sql, *ordered),
            "C collation, served: {sql}"
        );
    }
    drop(proxy);
    sqlx::query("ALTER TABLE trips ALTER COLUMN status TYPE text COLLATE \"und-x-icu\"")
        .execute(&db.pool)
        .await
        .unwrap();
    let proxy = ProxyProcess::start(file.path(), "127.0.0.1:0");
    assert!(served_through(&proxy, &by_time, true), "{by_time}");
    for (sql, ordered) in &by_status {
        assert!(
            !served_through(&proxy, sql, *ordered),
            "ICU collation, forwarded: {sql}"
        );
    }
}
