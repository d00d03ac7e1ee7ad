//! The proxy following the mode with reads the translator answers: in
//! `mirror` they are sampled, replayed on Schemaless and recorded by the
//! verifier, while the app gets PostgreSQL's answer.

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::harness::config_file;
use crate::proxy::{psql, ProxyProcess};

/// Open mismatches the sampled replay recorded: (row key, column).
async fn sampled_mismatches(pool: &sqlx::PgPool) -> BTreeSet<(String, String)> {
    sqlx::query_as(
        "SELECT row_key::text, column_name FROM mezzanine.verify_mismatches
         WHERE resolved_at IS NULL AND source = 'sample'",
    )
    .fetch_all(pool)
    .await
    .unwrap()
    .into_iter()
    .collect()
}

fn count(v: &Value, path: &[&str]) -> u64 {
    path.iter().fold(v, |v, k| &v[k]).as_u64().unwrap_or(0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mirror_samples_the_translatable_reads_apps_send_and_answers_from_postgresql() {
    // Every read sampled (the verifier tests' [verify]), backfilled, in
    // mirror.
    let (db, _, text, facade) = crate::verify::mirrored(40, 17, "").await;
    let rows: Vec<(uuid::Uuid, String)> = sqlx::query_as(
        "SELECT t.uuid, t.driver_uuid::text FROM trips t
         WHERE EXISTS (SELECT 1 FROM trip_notes n WHERE n.trip_id = t.id)
         ORDER BY t.id LIMIT 2",
    )
    .fetch_all(&db.pool)
    .await
    .unwrap();
    let ((clean, driver), (planted, _)) = (rows[0].clone(), rows[1].clone());
    // Divergence only PostgreSQL has (no capture here): the app must
    // still read it, and the sample must find it.
    sqlx::query("UPDATE trips SET city_id = city_id + 1000 WHERE uuid = $1")
        .bind(planted)
        .execute(&db.pool)
        .await
        .unwrap();
    let planted_city: i32 = sqlx::query_scalar("SELECT city_id FROM trips WHERE uuid = $1")
        .bind(planted)
        .fetch_one(&db.pool)
        .await
        .unwrap();

    let file = config_file(&format!("{text}\n[proxy]\n"));
    let proxy = ProxyProcess::start(file.path(), "127.0.0.1:0");

    // Simple protocol (psql): a row read with a child column, and a
    // read the translator does not answer (never sampled).
    let script = format!(
        "\\set ON_ERROR_STOP 1\n\
         SELECT t.status, n.body FROM trips t JOIN trip_notes n ON n.trip_id = t.id WHERE t.uuid = '{clean}' ORDER BY n.seq;\n\
         SELECT count(*) FROM trips;\n"
    );
    let (ok, through, err) = psql(&proxy.url(&db), &script);
    assert!(ok, "{err}");
    let direct = psql(&crate::harness::cluster().postgres_url(&db.name), &script).1;
    assert_eq!(through, direct, "the app gets PostgreSQL's answer");

    // Extended protocol (sqlx: prepared, the UUID bound in binary), the
    // planted row, twice on one prepared statement; and an index read
    // with a text parameter.
    let pool = sqlx::postgres::PgPoolOptions::new()
        .max_connections(1)
        .connect(&proxy.url(&db))
        .await
        .unwrap();
    for _ in 0..2 {
        let city: i32 = sqlx::query_scalar("SELECT city_id FROM trips WHERE uuid = $1")
            .bind(planted)
            .fetch_one(&pool)
            .await
            .unwrap();
        assert_eq!(city, planted_city, "PostgreSQL answers the app");
    }
    let listed: Vec<uuid::Uuid> = sqlx::query_scalar(
        "SELECT uuid FROM trips WHERE driver_uuid = $1::uuid ORDER BY requested_at DESC LIMIT 5",
    )
    .bind(&driver)
    .fetch_all(&pool)
    .await
    .unwrap();
    assert!(listed.contains(&clean));
    pool.close().await;

    // The verifier records the planted row, and only it.
    let deadline = Instant::now() + Duration::from_secs(30);
    let expected: BTreeSet<(String, String)> = [(planted.to_string(), "BASE".to_string())].into();
    loop {
        let found = sampled_mismatches(&db.pool).await;
        if found == expected {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "sampled mismatches {found:?}, expected {expected:?}; status {}",
            proxy.status()
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let status = proxy.status();
    let sampling = &status["sampling"];
    // psql's row read, sqlx's two binds and its index read; count(*) is
    // not translatable.
    assert_eq!(count(sampling, &["statements", "drawn"]), 4, "{status}");
    assert_eq!(count(sampling, &["statements", "offered"]), 4, "{status}");
    // BASE and the row (for NOTES) of the clean trip, BASE twice, the
    // index query.
    assert_eq!(count(sampling, &["cell_reads"]), 5, "{status}");
    assert!(count(sampling, &["verifier", "matches"]) >= 2, "{status}");
    assert!(
        count(sampling, &["verifier", "mismatches"]) >= 1,
        "{status}"
    );
    facade.close().await;
}
