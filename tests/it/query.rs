//! `mezzanine query audit|translate`: the app's SQL, from files and live
//! from pg_stat_statements, classified against the layout.

use std::process::{Command, Output};

use schemaless::CellStore as _;
use serde_json::Value;

use crate::harness::{cluster, config_file, example_layout, mezzanine, LegacyDb};
use crate::mirror::run_ok;

#[path = "../../query/tests/data/trips_corpus.rs"]
mod trips_corpus;

fn psql(db: &LegacyDb, sql: &str) {
    let binaries = devcluster::Binaries::find().expect("the PostgreSQL binaries");
    let out = Command::new(binaries.psql)
        .args(["-X", "-q", "-v", "ON_ERROR_STOP=1", "-d"])
        .arg(cluster().postgres_url(&db.name))
        .args(["-c", sql])
        .output()
        .expect("psql runs");
    assert!(
        out.status.success(),
        "{sql}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

fn json_lines(out: &Output) -> Vec<Value> {
    assert!(
        out.status.success(),
        "exit {:?}: {}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{l}: {e}")))
        .collect()
}

/// The line of the statement whose text contains `piece`.
fn line<'a>(lines: &'a [Value], piece: &str) -> &'a Value {
    let found: Vec<&Value> = lines
        .iter()
        .filter(|l| l["sql"].as_str().is_some_and(|s| s.contains(piece)))
        .collect();
    assert_eq!(found.len(), 1, "one statement with {piece:?} in {lines:#?}");
    found[0]
}

#[tokio::test]
async fn the_audit_classifies_what_sqlx_and_psql_ran_from_pg_stat_statements() {
    // `legacy init` makes the tables and the extension on an empty database.
    let db = LegacyDb::new("", &example_layout()).await;
    let config = config_file(&db.config_text);
    run_ok(mezzanine(config.path(), &["legacy", "init", "--with-uuid"]));
    let trip = uuid::Uuid::new_v4();
    let driver = uuid::Uuid::new_v4();
    sqlx::query(
        "INSERT INTO trips (uuid, driver_uuid, rider_uuid, city_id, status, currency, requested_at, version) \
         VALUES ($1, $2, $2, 7, 'requested', 'EUR', now(), 1)",
    )
    .bind(trip)
    .bind(driver)
    .execute(&db.pool)
    .await
    .unwrap();
    for _ in 0..3 {
        let _: (String,) = sqlx::query_as("SELECT status FROM trips WHERE uuid = $1")
            .bind(trip)
            .fetch_one(&db.pool)
            .await
            .unwrap();
    }
    let _: Vec<(uuid::Uuid,)> = sqlx::query_as(
        "SELECT uuid FROM trips WHERE driver_uuid = $1 ORDER BY requested_at DESC LIMIT 20",
    )
    .bind(driver)
    .fetch_all(&db.pool)
    .await
    .unwrap();
    let _: (i64,) = sqlx::query_as("SELECT count(*) FROM trips WHERE driver_uuid = $1")
        .bind(driver)
        .fetch_one(&db.pool)
        .await
        .unwrap();
    // Mezzanine's own statements carry its mark and are left out.
    let _: Vec<(String,)> =
        sqlx::query_as("/* mezzanine */ SELECT status FROM trips WHERE id = $1")
            .bind(1_i64)
            .fetch_all(&db.pool)
            .await
            .unwrap();
    psql(&db, "SELECT fare, currency FROM trips WHERE id = 1");
    psql(
        &db,
        &format!("UPDATE trips SET status = 'completed' WHERE uuid = '{trip}'"),
    );
    psql(&db, "DELETE FROM trip_notes WHERE trip_id = 1");

    let all = json_lines(
        &mezzanine(
            config.path(),
            &["query", "audit", "--from-pg-stat-statements", "--json"],
        )
        .output()
        .unwrap(),
    );
    let (summary, lines) = all.split_last().expect("a summary line");
    let by_uuid = line(lines, "SELECT status FROM trips WHERE uuid = $1");
    assert_eq!(by_uuid["class"], "row");
    assert_eq!(by_uuid["calls_count"], 3);
    assert!(by_uuid["total_ms"].as_f64().unwrap() >= 0.0);
    assert_eq!(by_uuid["calls"][0], "get_cell_latest(row = $1, BASE)");
    let by_driver = line(lines, "ORDER BY requested_at DESC");
    assert_eq!(by_driver["class"], "index");
    assert!(by_driver["calls"][0]
        .as_str()
        .unwrap()
        .starts_with("query_index(trips_by_driver, driver_uuid = $1"));
    assert_eq!(line(lines, "count(*)")["class"], "none");
    // psql's literals arrive as pg_stat_statements' $n.
    let by_id = line(lines, "SELECT fare, currency FROM trips WHERE id = $1");
    assert_eq!(by_id["class"], "none");
    assert!(by_id["reason"].as_str().unwrap().contains("integer id"));
    let update = line(lines, "UPDATE trips SET status");
    assert_eq!(update["class"], "none");
    assert!(update["reason"]
        .as_str()
        .unwrap()
        .contains("without a new ref key"));
    // A child's rows by their parent's integer id: PostgreSQL maps it to
    // the parent's UUID.
    assert_eq!(line(lines, "DELETE FROM trip_notes")["class"], "write");
    assert_eq!(line(lines, "INSERT INTO trips")["class"], "write");
    assert!(
        !lines
            .iter()
            .any(|l| l["sql"].as_str().unwrap().contains("/* mezzanine */")),
        "Mezzanine's own statements are left out"
    );
    // The summary adds up over the lines.
    let summary = &summary["summary"];
    assert_eq!(
        summary["statements"].as_u64().unwrap() as usize,
        lines.len()
    );
    let per_class: u64 = ["row", "index", "write", "none", "other", "unparsed"]
        .iter()
        .map(|c| summary[*c].as_u64().unwrap())
        .sum();
    assert_eq!(per_class as usize, lines.len());
    let translatable: u64 = lines
        .iter()
        .filter(|l| ["row", "index", "write"].contains(&l["class"].as_str().unwrap()))
        .map(|l| l["calls_count"].as_u64().unwrap())
        .sum();
    assert_eq!(
        summary["translatable_calls"].as_u64().unwrap(),
        translatable
    );

    // --include-own shows them; --min-calls leaves out the rarely run.
    let own = json_lines(
        &mezzanine(
            config.path(),
            &[
                "query",
                "audit",
                "--from-pg-stat-statements",
                "--json",
                "--include-own",
            ],
        )
        .output()
        .unwrap(),
    );
    assert!(own.iter().any(|l| l["sql"]
        .as_str()
        .is_some_and(|s| s.starts_with("/* mezzanine */"))));
    let frequent = json_lines(
        &mezzanine(
            config.path(),
            &[
                "query",
                "audit",
                "--from-pg-stat-statements",
                "--json",
                "--min-calls",
                "3",
            ],
        )
        .output()
        .unwrap(),
    );
    let (_, frequent) = frequent.split_last().unwrap();
    assert!(frequent
        .iter()
        .all(|l| l["calls_count"].as_u64().unwrap() >= 3));
    line(frequent, "SELECT status FROM trips WHERE uuid = $1");
    // The human report names the classes and the share.
    let report = mezzanine(
        config.path(),
        &["query", "audit", "--from-pg-stat-statements"],
    )
    .output()
    .unwrap();
    let text = String::from_utf8_lossy(&report.stdout);
    assert!(
        text.contains("[row] SELECT status FROM trips WHERE uuid = $1  (3 calls"),
        "{text}"
    );
    assert!(
        text.contains("calls touching the layout are translatable"),
        "{text}"
    );
}

#[tokio::test]
async fn without_pg_stat_statements_the_audit_says_how_to_get_it() {
    let db = LegacyDb::trips().await;
    sqlx::raw_sql("DROP EXTENSION IF EXISTS pg_stat_statements")
        .execute(&db.pool)
        .await
        .unwrap();
    let config = config_file(&db.config_text);
    let out = mezzanine(
        config.path(),
        &["query", "audit", "--from-pg-stat-statements"],
    )
    .output()
    .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("CREATE EXTENSION pg_stat_statements"), "{err}");
}

/// A config with the example layout (no server is contacted).
fn trips_config() -> tempfile::NamedTempFile {
    config_file(
        &std::fs::read_to_string(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/config/examples/local.toml"
        ))
        .unwrap(),
    )
}

fn sql_file(text: &str) -> tempfile::NamedTempFile {
    let file = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(file.path(), text).unwrap();
    file
}

#[test]
fn files_keep_input_order_and_report_what_does_not_parse() {
    let config = trips_config();
    let file = sql_file(
        "-- the app's queries\nSELECT * FROM trips WHERE uuid = $1;\n\
         /* broken */ SELEC * FROM trips;\nSELECT name FROM cities WHERE id = 3;\n\
         UPDATE trips SET status = $1, version = version + 1 WHERE uuid = $2;\n\
         SELECT 'unterminated FROM trips",
    );
    let lines = json_lines(
        &mezzanine(config.path(), &["query", "audit", "--json"])
            .arg(file.path())
            .output()
            .unwrap(),
    );
    let classes: Vec<&str> = lines[..lines.len() - 1]
        .iter()
        .map(|l| l["class"].as_str().unwrap())
        .collect();
    assert_eq!(classes, ["row", "unparsed", "other", "write", "unparsed"]);
    assert!(lines[1]["reason"].as_str().unwrap().contains("SELEC"));
    assert!(lines[4]["reason"].as_str().unwrap().contains("nterminated"));
    assert_eq!(lines[2]["tables"], serde_json::json!(["cities"]));
    assert!(lines[0]["reason"].is_null());
    // From files each statement counts once: 2 of the 4 touching the
    // layout (unparsed included) are translatable.
    let summary = &lines[5]["summary"];
    assert_eq!(summary["calls"], 4);
    assert_eq!(summary["translatable_calls"], 2);
    assert_eq!(summary["translatable_share"].as_f64(), Some(0.5));
}

#[test]
fn bad_input_gets_clear_errors_and_documented_exit_codes() {
    let config = trips_config();
    let run = |args: &[&str]| mezzanine(config.path(), args).output().unwrap();
    // An empty file: no statements, a summary, exit 0.
    let empty = sql_file("");
    let out = run(&["query", "audit", "--json", empty.path().to_str().unwrap()]);
    assert!(out.status.success());
    assert!(String::from_utf8_lossy(&out.stdout).contains("\"statements\":0"));
    // No input named, a missing file: usage errors (2).
    let out = run(&["query", "audit"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("--from-pg-stat-statements"));
    let out = run(&["query", "audit", "no/such/file.sql"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("no/such/file.sql"));
    // A statement of a megabyte is read and classified.
    let keys: Vec<String> = (1..=90_000).map(|i| format!("${i}")).collect();
    let big = sql_file(&format!(
        "SELECT status FROM trips WHERE uuid IN ({});",
        keys.join(", ")
    ));
    assert!(std::fs::metadata(big.path()).unwrap().len() > 700_000);
    let lines = json_lines(&run(&[
        "query",
        "audit",
        "--json",
        big.path().to_str().unwrap(),
    ]));
    assert_eq!(lines[0]["class"], "row");
    // translate: 0 when the cell API answers, 2 when not; never a panic.
    let out = run(&[
        "query",
        "translate",
        "SELECT status FROM trips WHERE uuid = $1",
    ]);
    assert_eq!(out.status.code(), Some(0));
    assert!(String::from_utf8_lossy(&out.stdout).contains("get_cell_latest(row = $1, BASE)"));
    for sql in [
        "SELECT count(*) FROM trips",
        "SELECT * FROM no_such_table WHERE x = 1",
        "DROP TABLE trips",
        "SELEC",
        "",
        "SELECT 1; SELECT 2",
    ] {
        let out = run(&["query", "translate", sql]);
        assert_eq!(out.status.code(), Some(2), "{sql}");
        assert!(
            !String::from_utf8_lossy(&out.stderr).contains("panicked"),
            "{sql}"
        );
    }
    // A config without [layout] cannot classify anything.
    let text = std::fs::read_to_string(config.path()).unwrap();
    let bare = config_file(&text[..text.find("\n[layout]").unwrap()]);
    let out = mezzanine(bare.path(), &["query", "translate", "SELECT 1"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("[layout]"));
}

/// Runs `query run` and returns (exit code, JSON verdict or stderr).
fn query_run(config: &std::path::Path, sql: &str, params: &[&str]) -> (i32, Value, String) {
    let mut command = mezzanine(config, &["query", "run", "--json", sql]);
    for p in params {
        command.arg("--param").arg(p);
    }
    let out = command.output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout).to_string();
    let verdict = serde_json::from_str(&stdout).unwrap_or(Value::Null);
    (
        out.status.code().unwrap_or(-1),
        verdict,
        String::from_utf8_lossy(&out.stderr).to_string(),
    )
}

#[tokio::test]
async fn query_run_proves_translated_reads_and_names_a_planted_difference() {
    let db = LegacyDb::trips().await;
    legacy::trips::seed(&db.pool, "public", "uuid", 300, 11, |_| {})
        .await
        .unwrap();
    db.apply_schemaless().await;
    let legacy_store = db.store().await;
    let schemaless = schemaless::MySqlStore::connect(&db.config).unwrap();
    crate::backfill::backfill_now(&legacy_store, &schemaless, &db.config).await;
    let config = config_file(&db.config_text);
    for step in [
        &["index", "create", "trips_by_driver"][..],
        &["index", "backfill", "trips_by_driver"],
        &["index", "switch", "trips_by_driver"],
    ] {
        run_ok(mezzanine(config.path(), step));
    }
    // A driver with several trips, trips with notes and billing attempts.
    let (driver, since): (uuid::Uuid, String) = sqlx::query_as(
        "SELECT driver_uuid, (min(requested_at) + (max(requested_at) - min(requested_at)) / 2)::text \
         FROM trips GROUP BY driver_uuid ORDER BY count(*) DESC, driver_uuid LIMIT 1",
    )
    .fetch_one(&db.pool)
    .await
    .unwrap();
    let noted: uuid::Uuid = sqlx::query_scalar(
        "SELECT t.uuid FROM trips t JOIN trip_notes n ON n.trip_id = t.id \
         GROUP BY t.uuid ORDER BY count(*) DESC, t.uuid LIMIT 1",
    )
    .fetch_one(&db.pool)
    .await
    .unwrap();
    let some: Vec<uuid::Uuid> = sqlx::query_scalar("SELECT uuid FROM trips ORDER BY id LIMIT 3")
        .fetch_all(&db.pool)
        .await
        .unwrap();
    let (d, n) = (driver.to_string(), noted.to_string());
    let (a, b, c) = (
        some[0].to_string(),
        some[1].to_string(),
        some[2].to_string(),
    );
    let array = format!("{{{a},{b}}}");
    let reads: Vec<(&str, Vec<&str>)> = vec![
        ("SELECT * FROM trips WHERE uuid = $1", vec![&n]),
        ("SELECT trips.uuid, trips.driver_uuid, trips.status, trips.fare FROM trips WHERE trips.uuid = $1::uuid", vec![&a]),
        ("SELECT status, requested_at FROM trips WHERE uuid = ANY($1)", vec![&array]),
        ("SELECT trips.status, trips.version FROM trips WHERE trips.uuid IN ($1, $2, $3)", vec![&a, &b, &c]),
        ("SELECT n.author, n.body, n.created_at, n.seq FROM trip_notes n JOIN trips t ON n.trip_id = t.id WHERE t.uuid = $1 ORDER BY n.seq", vec![&n]),
        ("SELECT t.status, b.amount, b.succeeded FROM trips t LEFT JOIN billing_attempts b ON b.trip_id = t.id WHERE t.uuid = $1", vec![&n]),
        ("SELECT uuid, requested_at FROM trips WHERE driver_uuid = $1 AND requested_at >= $2 ORDER BY requested_at DESC LIMIT 20", vec![&d, &since]),
        ("SELECT * FROM trips WHERE driver_uuid = $1 ORDER BY requested_at DESC LIMIT 5", vec![&d]),
        ("SELECT t.uuid, t.fare FROM trips t WHERE t.driver_uuid = $1::uuid AND t.city_id IN (1, 2, 3, 4, 5)", vec![&d]),
        ("SELECT uuid FROM trips WHERE driver_uuid = $1 AND status = ANY($2)", vec![&d, "{completed,cancelled}"]),
        ("SELECT uuid, status FROM trips WHERE driver_uuid = $1 AND requested_at BETWEEN $2 AND now()", vec![&d, &since]),
        ("SELECT t.uuid, n.body FROM trips t JOIN trip_notes n ON n.trip_id = t.id WHERE t.driver_uuid = $1 ORDER BY t.requested_at", vec![&d]),
        // Conditions besides the row key, evaluated by PostgreSQL over the
        // rows Schemaless gave.
        ("SELECT status FROM trips WHERE uuid = ANY($1) AND status <> $2 AND (fare > 0 OR fare IS NULL)", vec![&array, "no such status"]),
        ("SELECT n.seq, n.body FROM trip_notes n JOIN trips t ON n.trip_id = t.id AND n.seq > 1 WHERE t.uuid = $1 AND n.author LIKE '%' ORDER BY n.seq", vec![&n]),
    ];
    let mut rows_seen = 0;
    for (sql, params) in &reads {
        let (code, verdict, err) = query_run(config.path(), sql, params);
        assert_eq!(code, 0, "{sql}: {err}\n{verdict:#}");
        assert_eq!(verdict["verdict"], "equal", "{sql}");
        let (pg, sl) = (
            verdict["postgres"].as_array().unwrap(),
            verdict["schemaless"].as_array().unwrap(),
        );
        assert_eq!(pg.len(), sl.len(), "{sql}");
        // The verdict judged the order (ties on the ORDER BY in any order);
        // here, the same rows on both sides.
        for row in pg {
            assert!(sl.contains(row), "{sql}: {row}");
        }
        rows_seen += verdict["postgres"].as_array().unwrap().len();
    }
    assert!(
        rows_seen > 20,
        "the reads returned rows to compare ({rows_seen})"
    );

    // Every translatable read of the corpus that query run can run: its
    // parameters chosen by what the plan compares them with.
    let model = query::Model::from_config(&db.config).unwrap();
    let trips = [n.as_str(), &a, &b, &c];
    let (mut ran, mut skipped) = (0, Vec::new());
    for (sql, class, _) in trips_corpus::TRIPS {
        if !matches!(class, query::Class::Row | query::Class::Index) {
            continue;
        }
        let params = corpus_params(&model, sql, &trips, &d, &since);
        let refs: Vec<&str> = params.iter().map(String::as_str).collect();
        let (code, verdict, err) = query_run(config.path(), sql, &refs);
        match code {
            0 => {
                assert_eq!(verdict["verdict"], "equal", "{sql}");
                ran += 1;
            }
            2 => skipped.push(format!("{sql}: {err}")),
            _ => panic!("{sql} {params:?}: exit {code}: {err}\n{verdict:#}"),
        }
    }
    assert!(
        ran >= 20,
        "only {ran} corpus reads ran; skipped:\n{}",
        skipped.join("\n")
    );
    eprintln!(
        "{ran} corpus reads ran both ways; {} skipped:\n{}",
        skipped.len(),
        skipped.join("\n")
    );
    // What is skipped is what the app filters or sorts itself.
    for why in &skipped {
        assert!(
            why.contains("in the app")
                || why.contains("LIMIT without ORDER BY")
                || why.contains("its LEFT JOIN picks the child rows"),
            "{why}"
        );
    }

    // A difference planted in Schemaless: a newer BASE cell with another
    // fare. query run names the field and exits 1.
    let base = schemaless::Column::new("BASE").unwrap();
    let key = schemaless::RowKey::from(some[0]);
    let latest = schemaless
        .get_cell_latest(&key, &base, schemaless::ReadFrom::Master)
        .await
        .unwrap()
        .expect("backfilled");
    let mut body = latest.cell.body.fields().clone();
    body.insert("fare".into(), serde_json::json!("99999.99"));
    schemaless::CellStore::put_cell(
        &schemaless,
        schemaless::Cell::new(
            key,
            base,
            schemaless::RefKey::new(latest.cell.key.ref_key.get() + 1).unwrap(),
            schemaless::Body::from_value(Value::Object(body)).unwrap(),
        ),
    )
    .await
    .unwrap();
    let (code, verdict, _) = query_run(
        config.path(),
        "SELECT uuid, fare, status FROM trips WHERE uuid = $1 AND status IS NOT NULL",
        &[&a],
    );
    assert_eq!(code, 1, "{verdict:#}");
    assert_eq!(verdict["verdict"], "different");
    let differences = verdict["differences"].to_string();
    assert!(differences.contains("fare: PostgreSQL"), "{differences}");
    assert!(differences.contains("99999.99"), "{differences}");
    assert!(!differences.contains("status:"), "{differences}");
    // The human form says so too.
    let out = mezzanine(
        config.path(),
        &[
            "query",
            "run",
            "SELECT uuid, fare FROM trips WHERE uuid = $1",
            "--param",
            &a,
        ],
    )
    .output()
    .unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stdout).contains("DIFFERENT"));

    // What it cannot run: exit 2 with the reason.
    for (sql, params, why) in [
        ("SELECT count(*) FROM trips", vec![], "aggregate"),
        (
            "SELECT t.status, b.amount FROM trips t LEFT JOIN billing_attempts b \
             ON b.trip_id = t.id AND b.succeeded WHERE t.uuid = $1",
            vec![a.as_str()],
            "its LEFT JOIN picks the child rows by b.succeeded",
        ),
        (
            "SELECT status FROM trips WHERE uuid = $1",
            vec![],
            "uses $1, and 0 --param",
        ),
        (
            "UPDATE trips SET status = 'x', version = version + 1 WHERE uuid = $1",
            vec![a.as_str()],
            "a write",
        ),
        (
            "SELECT status FROM trips WHERE uuid = $1; SELECT 1",
            vec![a.as_str()],
            "2 statements where one was expected",
        ),
    ] {
        let (code, _, err) = query_run(config.path(), sql, &params);
        assert_eq!(code, 2, "{sql}: {err}");
        assert!(err.contains(why), "{sql}: {err}");
    }
    // A condition PostgreSQL refuses fails there, with its error.
    let sql = "SELECT status FROM trips WHERE uuid = $1 AND city_id = 'seven'";
    let (code, _, err) = query_run(config.path(), sql, &[&a]);
    assert_eq!(code, 1, "{sql}: {err}");
    assert!(
        err.contains("invalid input syntax for type integer"),
        "{err}"
    );
    legacy_store.close().await;
    schemaless.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_primary_gate_refuses_direct_writes_and_names_them() {
    use tripstore::{Mode, TripStore};
    let db = LegacyDb::trips().await;
    db.apply_schemaless().await;
    let facade = TripStore::connect(&db.config).await.unwrap();
    crate::mirror::walk_to(&facade, &db.config, Mode::Shadow).await;
    // The facade's writes are Mezzanine's own, and are not counted.
    let mut source = legacy::trips::TripCells::new(9);
    for _ in 0..20 {
        facade.put_cells(source.new_trip()).await.unwrap();
    }
    let model = query::Model::from_config(&db.config).unwrap();
    assert_eq!(
        tripstore::direct_writes::since_snapshot(&db.pool, &model, Mode::Shadow)
            .await
            .unwrap(),
        vec![]
    );
    // Plain SQL writes are, by statement; reads and other tables are not.
    psql(
        &db,
        "UPDATE trips SET status = 'cancelled', version = version + 1 WHERE id = (SELECT min(id) FROM trips)",
    );
    psql(&db, "SELECT count(*) FROM trips");
    psql(
        &db,
        "CREATE TABLE IF NOT EXISTS cities (id int); INSERT INTO cities VALUES (1)",
    );
    let found = tripstore::direct_writes::since_snapshot(&db.pool, &model, Mode::Shadow)
        .await
        .unwrap();
    assert_eq!(found.len(), 1, "{found:?}");
    assert_eq!(found[0].table, "trips");
    assert_eq!(found[0].calls, 1);
    let config = config_file(&db.config_text);
    // Everything the toolkit sent (the facade, the backfill, the mode
    // steps) carries the mark: what the audit lists on the layout is the
    // test's own SQL (the harness's DDL, the psql statements) alone.
    let audit = json_lines(
        &mezzanine(
            config.path(),
            &["query", "audit", "--from-pg-stat-statements", "--json"],
        )
        .output()
        .unwrap(),
    );
    let unmarked: Vec<&str> = audit[..audit.len() - 1]
        .iter()
        .filter(|l| l["class"] != "other")
        .map(|l| l["sql"].as_str().unwrap())
        .filter(|sql| !sql.trim_start().starts_with("CREATE"))
        .collect();
    assert_eq!(unmarked.len(), 2, "{unmarked:#?}");
    assert!(unmarked
        .iter()
        .any(|s| s.starts_with("UPDATE trips SET status")));
    assert!(unmarked
        .iter()
        .any(|s| s.starts_with("SELECT count(*) FROM trips")));
    let out = mezzanine(config.path(), &["mode", "set", "primary"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("1 writes to layout tables"), "{err}");
    assert!(err.contains("1 x UPDATE trips SET status = $1"), "{err}");
    assert!(err.contains("gates.max_direct_writes = 0"), "{err}");
    // A budget of one lets the step through.
    let relaxed = config_file(&db.config_text.replace(
        crate::harness::TEST_GATES,
        &format!("{}max_direct_writes = 1\n", crate::harness::TEST_GATES),
    ));
    run_ok(mezzanine(relaxed.path(), &["mode", "set", "primary"]));
    // In primary, a plain SQL write to the legacy tables (a service still
    // writing them, a write inside a transaction block through the
    // proxy) would be stranded by the step to schemaless, where no one
    // reads PostgreSQL: that step is held the same way.
    psql(
        &db,
        "BEGIN; UPDATE trips SET status = 'disputed', version = version + 1 WHERE id = (SELECT max(id) FROM trips); COMMIT",
    );
    let out = mezzanine(config.path(), &["mode", "set", "schemaless"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("1 writes to layout tables"), "{err}");
    assert!(err.contains("UPDATE trips SET status = $1"), "{err}");
    assert!(err.contains("since this mode began"), "{err}");
    run_ok(mezzanine(relaxed.path(), &["mode", "set", "schemaless"]));
    facade.close().await;
}

/// Parameters for a corpus statement, by what its plan compares each `$n`
/// with: row keys get trips, an index's shard value the driver, its
/// filters values of their field, anything else (a LIMIT) a small number.
fn corpus_params(
    model: &query::Model,
    sql: &str,
    trips: &[&str],
    driver: &str,
    since: &str,
) -> Vec<String> {
    use query::expr::value_text;
    use query::plan::{Keys, Plan};
    let count = (1..=20).filter(|n| sql.contains(&format!("${n}"))).count();
    let mut params = vec!["5".to_string(); count];
    let mut set = |e: &query::sqlparser::ast::Expr, value: String| {
        if let Some(n) = value_text(e)
            .strip_prefix('$')
            .and_then(|n| n.parse::<usize>().ok())
        {
            params[n - 1] = value;
        }
    };
    match query::analyze(model, sql).plan {
        Some(Plan::Rows(read)) => match &read.keys {
            Keys::One(e) => set(e, trips[0].to_string()),
            Keys::List(list) => {
                for (i, e) in list.iter().enumerate() {
                    set(e, trips[i % trips.len()].to_string());
                }
            }
            Keys::Array(e) => set(e, format!("{{{}}}", trips.join(","))),
        },
        Some(Plan::Index(read)) => {
            set(&read.shard_value, driver.to_string());
            for f in &read.filters {
                let value = match (f.field.as_str(), f.array) {
                    ("status", true) => "{completed,cancelled}".to_string(),
                    ("status", false) => "completed".to_string(),
                    ("city_id", true) => "{1,2,3}".to_string(),
                    ("city_id", false) => "2".to_string(),
                    _ => since.to_string(),
                };
                for e in &f.values {
                    set(e, value.clone());
                }
            }
            if let Some(limit) = &read.limit {
                set(limit, "20".to_string());
            }
        }
        _ => {}
    }
    params
}
