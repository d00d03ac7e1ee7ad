//! The proxy following the mode with reads the translator answers: in
//! `mirror` they are sampled, replayed on Schemaless and recorded by the
//! verifier, while the app gets PostgreSQL's answer; in `shadow` they are
//! answered from Schemaless, in the bytes PostgreSQL would have sent.

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use schemaless::CellStore;
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

/// Waits up to 30 s until the open sampled mismatches are exactly
/// `row`'s `BASE`.
async fn until_sampled(pool: &sqlx::PgPool, row: &uuid::Uuid, proxy: &ProxyProcess) {
    let deadline = Instant::now() + Duration::from_secs(30);
    let expected: BTreeSet<(String, String)> = [(row.to_string(), "BASE".to_string())].into();
    loop {
        let found = sampled_mismatches(pool).await;
        if found == expected {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "sampled mismatches {found:?}, expected {expected:?}; status {}",
            proxy.status()
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
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
    until_sampled(&db.pool, &planted, &proxy).await;
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

/// `program clients/proxy/script args...`: its output, or a failure
/// naming how the clients are installed. `java` runs a class compiled
/// from the source file with pgjdbc on its class path (Debian's, or
/// `MEZZANINE_PGJDBC_JAR`).
pub(crate) fn run_client(program: &str, script: &str, args: &[&str]) -> String {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("clients/proxy")
        .join(script);
    let mut command = std::process::Command::new(program);
    if program == "java" {
        let (jar, classes) = java_classes(&path);
        let class = path.file_stem().expect("a class's source file");
        // A short run: the first JIT tier and one GC thread cost the
        // shared cores least.
        command
            .args(["-XX:TieredStopAtLevel=1", "-XX:+UseSerialGC"])
            .arg("-cp")
            .arg(format!("{jar}:{}", classes.display()))
            .arg(class);
    } else {
        command.arg(&path);
    }
    let out = command
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("running {program}: {e}"));
    assert!(
        out.status.success(),
        "{program} {script}: {}\n(clients/proxy/install installs psycopg, asyncpg, pg and pgjdbc; .ci/run runs it)",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

/// pgjdbc's jar, and a directory of the classes compiled from `source`,
/// once per test process: the JDK's source launcher compiles the file
/// again at each run, 2.7 s of CPU each on the 2-core machine (a dozen
/// runs over the suite).
fn java_classes(source: &std::path::Path) -> (String, std::path::PathBuf) {
    type Compiled = std::collections::HashMap<std::path::PathBuf, std::path::PathBuf>;
    static COMPILED: std::sync::Mutex<Option<Compiled>> = std::sync::Mutex::new(None);
    let jar = std::env::var("MEZZANINE_PGJDBC_JAR")
        .unwrap_or_else(|_| "/usr/share/java/postgresql.jar".to_string());
    let mut compiled = COMPILED.lock().unwrap_or_else(|e| e.into_inner());
    let compiled = compiled.get_or_insert_with(Compiled::new);
    if let Some(dir) = compiled.get(source) {
        return (jar, dir.clone());
    }
    let dir = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!(
        "java-{}-{}",
        source.file_stem().unwrap_or_default().to_string_lossy(),
        std::process::id()
    ));
    let _ = std::fs::remove_dir_all(&dir);
    let out = std::process::Command::new("javac")
        .arg("-cp")
        .arg(&jar)
        .arg("-d")
        .arg(&dir)
        .arg(source)
        .output()
        .unwrap_or_else(|e| panic!("running javac: {e}"));
    assert!(
        out.status.success(),
        "javac {}: {}\n(clients/proxy/install installs the JDK and pgjdbc; .ci/run runs it)",
        source.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    compiled.insert(source.to_path_buf(), dir.clone());
    (jar, dir)
}

/// One simple-protocol statement on a raw connection: every message
/// PostgreSQL's answer is made of, byte for byte.
pub(crate) fn raw_answer(stream: &mut std::net::TcpStream, sql: &str) -> Vec<(u8, Vec<u8>)> {
    use std::io::Write;
    let mut message = vec![b'Q'];
    message.extend_from_slice(&((sql.len() + 5) as u32).to_be_bytes());
    message.extend_from_slice(sql.as_bytes());
    message.push(0);
    stream.write_all(&message).unwrap();
    crate::proxy::messages_until_ready(stream)
}

/// The `(N rows)` line of psql's last answer.
fn rows_line(out: &str) -> Option<&str> {
    out.lines().rev().find(|l| l.starts_with('('))
}

/// A prepared round: the statement to parse first, the parameter and its
/// format, the result formats.
type Round<'a> = (Option<&'a str>, (Vec<u8>, i16), &'a [i16]);

/// One message of the extended protocol: its type and body.
pub(crate) fn message(kind: u8, body: &[u8]) -> Vec<u8> {
    let mut m = vec![kind];
    m.extend_from_slice(&((body.len() + 4) as u32).to_be_bytes());
    m.extend_from_slice(body);
    m
}

pub(crate) fn cstr(text: &str) -> Vec<u8> {
    let mut b = text.as_bytes().to_vec();
    b.push(0);
    b
}

/// A prepared statement's round on a raw connection, as a driver sends it
/// in one write: `Parse` (once, when `parse`), `Describe` of the
/// statement, `Bind` of one parameter in `param_format` to the unnamed
/// portal with `result_formats`, `Describe` of the portal, `Execute`,
/// `Sync`. Every message of the answer.
pub(crate) fn raw_prepared(
    stream: &mut std::net::TcpStream,
    parse: Option<&str>,
    param: (&[u8], i16),
    result_formats: &[i16],
) -> Vec<(u8, Vec<u8>)> {
    let statement = "app statement";
    let mut out = Vec::new();
    if let Some(sql) = parse {
        // One parameter, declared uuid (2950), as drivers binding in
        // binary declare it.
        let body = [
            cstr(statement),
            cstr(sql),
            1i16.to_be_bytes().to_vec(),
            2950u32.to_be_bytes().to_vec(),
        ]
        .concat();
        out.extend(message(b'P', &body));
        out.extend(message(b'D', &[&b"S"[..], &cstr(statement)].concat()));
    }
    let mut bind = [cstr(""), cstr(statement)].concat();
    bind.extend_from_slice(&1i16.to_be_bytes());
    bind.extend_from_slice(&param.1.to_be_bytes());
    bind.extend_from_slice(&1i16.to_be_bytes());
    bind.extend_from_slice(&(param.0.len() as i32).to_be_bytes());
    bind.extend_from_slice(param.0);
    bind.extend_from_slice(&(result_formats.len() as i16).to_be_bytes());
    for f in result_formats {
        bind.extend_from_slice(&f.to_be_bytes());
    }
    out.extend(message(b'B', &bind));
    out.extend(message(b'D', &[&b"P"[..], &cstr("")].concat()));
    execute_and_sync(stream, out)
}

/// `out` (messages up to a `Bind` of the unnamed portal), then `Execute`
/// of that portal and `Sync`, sent in one write: every message of the
/// answer.
pub(crate) fn execute_and_sync(
    stream: &mut std::net::TcpStream,
    mut out: Vec<u8>,
) -> Vec<(u8, Vec<u8>)> {
    use std::io::Write;
    out.extend(message(
        b'E',
        &[cstr(""), 0i32.to_be_bytes().to_vec()].concat(),
    ));
    out.extend(message(b'S', &[]));
    stream.write_all(&out).unwrap();
    crate::proxy::messages_until_ready(stream)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shadow_serves_translatable_reads_from_schemaless_as_postgresql_would_send_them() {
    let (db, config, text, facade) = crate::verify::mirrored(30, 29, "").await;
    crate::mirror::walk_to(&facade, &config, tripstore::Mode::Shadow).await;
    let rows: Vec<(uuid::Uuid, String)> = sqlx::query_as(
        "SELECT t.uuid, t.driver_uuid::text FROM trips t
         WHERE EXISTS (SELECT 1 FROM trip_notes n WHERE n.trip_id = t.id)
         ORDER BY t.id LIMIT 1",
    )
    .fetch_all(&db.pool)
    .await
    .unwrap();
    let (known, known_driver) = rows[0].clone();
    // The planted copy has the known trip's driver: the index read is of
    // another one.
    let driver: String = sqlx::query_scalar(
        "SELECT driver_uuid::text FROM trips WHERE driver_uuid::text <> $1
         GROUP BY driver_uuid ORDER BY count(*) DESC, driver_uuid LIMIT 1",
    )
    .bind(&known_driver)
    .fetch_one(&db.pool)
    .await
    .unwrap();
    // A trip only Schemaless has: the known trip's BASE cell under a new
    // row key. PostgreSQL cannot answer it; only a read served from
    // Schemaless can.
    let base = schemaless::Column::new("BASE").unwrap();
    let mut planted = facade
        .schemaless()
        .get_cell_latest(
            &schemaless::RowKey::from(known),
            &base,
            schemaless::ReadFrom::Master,
        )
        .await
        .unwrap()
        .expect("the known trip's BASE cell")
        .cell;
    let planted_key = uuid::Uuid::new_v4();
    planted.key.row_key = schemaless::RowKey::from(planted_key);
    facade.schemaless().put_cell(planted).await.unwrap();

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
    let proxy = ProxyProcess::start(file.path(), "127.0.0.1:0");
    let direct_url = crate::harness::cluster().postgres_url(&db.name);
    let read_planted = format!(
        "\\set ON_ERROR_STOP 1\nSELECT uuid, status, city_id FROM trips WHERE uuid = '{planted_key}';\n"
    );
    // The proxy's facade sees shadow at its next mode poll.
    let deadline = Instant::now() + Duration::from_secs(15);
    let through = loop {
        let (ok, out, err) = psql(&proxy.url(&db), &read_planted);
        assert!(ok, "{err}");
        if out.contains(&planted_key.to_string()) {
            break out;
        }
        assert!(
            Instant::now() < deadline,
            "the planted row was never served: {out}; status {}",
            proxy.status()
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    assert_eq!(rows_line(&through), Some("(1 row)"), "{through}");
    let direct = psql(&direct_url, &read_planted).1;
    assert_eq!(rows_line(&direct), Some("(0 rows)"), "{direct}");
    // A read filtering on more than the row key is served too, the filter
    // applied to Schemaless's row: the planted trip has the known trip's
    // city and status.
    let (city, status): (i32, String) =
        sqlx::query_as("SELECT city_id, status FROM trips WHERE uuid = $1")
            .bind(known)
            .fetch_one(&db.pool)
            .await
            .unwrap();
    for (condition, rows) in [
        (
            format!("city_id = {city} AND status = '{status}'"),
            "(1 row)",
        ),
        (format!("city_id <> {city}"), "(0 rows)"),
        (
            format!("(status LIKE '{status}%' OR city_id < 0)"),
            "(1 row)",
        ),
        (format!("NOT (status = '{status}')"), "(0 rows)"),
    ] {
        let filtered = format!(
            "\\set ON_ERROR_STOP 1\nSELECT uuid, city_id FROM trips WHERE uuid = '{planted_key}' AND {condition};\n"
        );
        let (ok, out, err) = psql(&proxy.url(&db), &filtered);
        assert!(ok, "{err}");
        assert_eq!(rows_line(&out), Some(rows), "{condition}: {out}");
    }

    // Inside a transaction block, and untranslatable: PostgreSQL answers.
    let script = format!(
        "\\set ON_ERROR_STOP 1\nBEGIN;\nSELECT uuid FROM trips WHERE uuid = '{planted_key}';\nCOMMIT;\n\
         SELECT count(*) FROM trips;\n\
         SELECT count(*) FROM trips WHERE uuid = '{planted_key}';\n"
    );
    let (ok, through, err) = psql(&proxy.url(&db), &script);
    assert!(ok, "{err}");
    assert_eq!(through, psql(&direct_url, &script).1);
    assert!(through.contains("(0 rows)"), "{through}");

    // A session on another database (one with a table of the same name)
    // is only relayed: its statements are not the layout's.
    let other = crate::harness::LegacyDb::trips().await;
    let (ok, out, err) = psql(&proxy.url(&other), &read_planted);
    assert!(ok && rows_line(&out) == Some("(0 rows)"), "{out}{err}");

    // Byte for byte: the messages PostgreSQL sends for a served read are
    // those it sends for the same read of its own rows. Session settings
    // that change how values are written apply to both.
    let port = crate::harness::cluster().spec().postgres_port;
    let mut served = crate::proxy::raw_session(proxy.addr, &db);
    let mut own =
        crate::proxy::raw_session(std::net::SocketAddr::from(([127, 0, 0, 1], port)), &db);
    let settings =
        "SET TimeZone = 'Asia/Kolkata'; SET DateStyle = 'SQL, DMY'; SET extra_float_digits = 0";
    assert_eq!(
        raw_answer(&mut served, settings),
        raw_answer(&mut own, settings)
    );
    let reads = [
        format!(
            "SELECT uuid, status, fare, city_id, distance_km, requested_at, completed_at, \
             rider_uuid, version, 1 AS one, 'x' FROM trips WHERE uuid = '{known}'"
        ),
        format!(
            "SELECT t.uuid, n.seq, n.author, n.body AS said, n.created_at FROM trips t \
             JOIN trip_notes n ON n.trip_id = t.id WHERE t.uuid = '{known}' ORDER BY n.seq DESC"
        ),
        format!(
            "SELECT t.status, b.amount, b.succeeded, b.attempted_at FROM trips t \
             LEFT JOIN billing_attempts b ON b.trip_id = t.id WHERE t.uuid IN ('{known}') ORDER BY b.seq LIMIT 2"
        ),
        format!(
            "SELECT uuid, requested_at, city_id FROM trips WHERE driver_uuid = '{driver}' \
             ORDER BY requested_at DESC LIMIT 3"
        ),
        format!(
            "SELECT uuid, status, fare FROM trips WHERE uuid = '{known}' AND city_id > 0 \
             AND requested_at < now() AND status NOT LIKE 'x%'"
        ),
    ];
    for sql in &reads {
        let from_schemaless = raw_answer(&mut served, sql);
        let from_postgresql = raw_answer(&mut own, sql);
        assert!(
            from_postgresql.iter().any(|(kind, _)| *kind == b'D'),
            "{sql} has rows"
        );
        assert_eq!(from_schemaless, from_postgresql, "{sql}");
    }
    // The extended protocol: a prepared read bound with a text and then
    // a binary parameter, its rows in binary, in text, and mixed.
    let prepared = "SELECT uuid, fare, distance_km, requested_at, completed_at, city_id, status \
                    FROM trips WHERE uuid = $1";
    let rounds: [Round; 3] = [
        (Some(prepared), (known.to_string().into_bytes(), 0), &[1]),
        (None, (known.as_bytes().to_vec(), 1), &[]),
        (
            None,
            (known.to_string().into_bytes(), 0),
            &[0, 1, 1, 0, 1, 1, 0],
        ),
    ];
    for (parse, (param, format), results) in &rounds {
        let from_schemaless = raw_prepared(&mut served, *parse, (param, *format), results);
        let from_postgresql = raw_prepared(&mut own, *parse, (param, *format), results);
        assert!(
            from_postgresql.iter().any(|(kind, _)| *kind == b'D'),
            "{from_postgresql:?}"
        );
        assert_eq!(from_schemaless, from_postgresql, "{results:?}");
    }
    // Other languages' clients, prepared statements all: psycopg 3 (a
    // text and a binary uuid key, text and binary results) and Node's pg
    // (unnamed and named statements, text and binary results, the
    // fields' table and column ids) get from the proxy what PostgreSQL
    // gives them for a trip both stores hold, and the planted trip only
    // through the proxy.
    let by_key = "SELECT uuid, status, fare, city_id, distance_km, requested_at, completed_at, \
                  rider_uuid, version FROM trips WHERE uuid = $1";
    // (program, script, its first arguments, reads per key).
    for (program, script, lead, reads) in [
        ("python3", "served.py", None, 4),
        ("python3", "served_asyncpg.py", None, 4),
        ("node", "served.js", None, 4),
        ("java", "Jdbc.java", Some("served"), 21),
    ] {
        let run = |url: &str, key: &uuid::Uuid| {
            let key = key.to_string();
            let args = lead.into_iter().chain([url, by_key, key.as_str()]);
            run_client(program, script, &args.collect::<Vec<_>>())
        };
        // Each read's line: "<key> <how>: <rows>".
        let results = |out: &str, key: &uuid::Uuid| -> Vec<bool> {
            out.lines()
                .filter(|l| l.starts_with(&key.to_string()))
                .map(|l| !l.ends_with(": []"))
                .collect()
        };
        let through = run(&proxy.url(&db), &known);
        assert_eq!(through, run(&direct_url, &known), "{script}");
        assert_eq!(
            results(&through, &known),
            vec![true; reads],
            "{script}: {through}"
        );
        let planted_through = run(&proxy.url(&db), &planted_key);
        let planted_direct = run(&direct_url, &planted_key);
        assert_eq!(
            results(&planted_through, &planted_key),
            vec![true; reads],
            "{script}: {planted_through}"
        );
        assert_eq!(
            results(&planted_direct, &planted_key),
            vec![false; reads],
            "{script}: {planted_direct}"
        );
    }

    // The route: sqlx prepares and binds the planted key in binary.
    let pool = sqlx::postgres::PgPoolOptions::new()
        .max_connections(1)
        .connect(&proxy.url(&db))
        .await
        .unwrap();
    for _ in 0..2 {
        let found: Option<String> = sqlx::query_scalar("SELECT status FROM trips WHERE uuid = $1")
            .bind(planted_key)
            .fetch_optional(&pool)
            .await
            .unwrap();
        assert!(found.is_some(), "the planted row, from Schemaless");
    }
    pool.close().await;

    let status = proxy.status();
    // The planted reads (at least one served) and the byte comparisons;
    // the read in a transaction block is no translatable read served.
    assert!(
        count(&status, &["served", "schemaless"]) > (reads.len() + rounds.len() + 2) as u64,
        "{status}"
    );
    assert_eq!(count(&status, &["served", "postgresql"]), 0, "{status}");

    // Served reads are sampled too (every read, here), as reads
    // Schemaless answered: the verifier replays them on PostgreSQL and
    // records the planted trip, which PostgreSQL lacks, and only it.
    until_sampled(&db.pool, &planted_key, &proxy).await;
    let status = proxy.status();
    let sampling = &status["sampling"];
    assert!(
        count(sampling, &["statements", "offered"]) > (reads.len() + rounds.len()) as u64,
        "{status}"
    );
    assert!(count(sampling, &["verifier", "matches"]) >= 2, "{status}");

    // The dashboard shows the proxy, from the status it publishes in the
    // legacy database: the same counts, once its next heartbeat is in.
    let (mut dashboard, url, addr) = crate::verify::serve(file.path());
    let served_count = count(&status, &["served", "schemaless"]);
    let deadline = Instant::now() + Duration::from_secs(15);
    let reported = loop {
        let body = crate::verify::http_get(&addr, "/api/status");
        let api: Value = serde_json::from_str(body.split("\r\n\r\n").last().unwrap()).unwrap();
        let proxies = api["proxies"].as_array().cloned().unwrap_or_default();
        if let [one] = proxies.as_slice() {
            if count(&one["status"], &["served", "schemaless"]) == served_count {
                break one.clone();
            }
        }
        assert!(
            Instant::now() < deadline,
            "the proxy's status never reached the dashboard: {api}"
        );
        tokio::time::sleep(Duration::from_millis(300)).await;
    };
    assert_eq!(reported["live"], true, "{reported}");
    assert_eq!(reported["status"]["mode"], "shadow", "{reported}");
    let metrics = crate::verify::http_get(&addr, "/metrics");
    assert!(
        metrics.contains("mezzanine_proxies{state=\"live\"} 1"),
        "{metrics}"
    );
    let profile = tempfile::tempdir().unwrap();
    let dom = crate::verify::headless(
        profile.path(),
        &["--virtual-time-budget=8000", "--dump-dom"],
        &url,
    );
    let dom = String::from_utf8_lossy(&dom.stdout);
    for expected in [
        "1 live</span> of 1 reporting",
        "class=\"proxy\"",
        &format!("<td>{served_count} / 0 / 0</td>"),
    ] {
        assert!(
            dom.contains(expected),
            "{expected:?} not on the page: {dom}"
        );
    }
    // Stopped cleanly, the proxy takes its row away.
    drop((served, own));
    proxy.stop();
    let body = crate::verify::http_get(&addr, "/api/status");
    let api: Value = serde_json::from_str(body.split("\r\n\r\n").last().unwrap()).unwrap();
    assert_eq!(api["proxies"], serde_json::json!([]), "{api}");
    dashboard.kill().unwrap();
    dashboard.wait().unwrap();
    facade.close().await;
}

/// Before `primary`, the proxy forwards an app's translatable writes to
/// PostgreSQL, and from `primary` on the facade runs them: the `primary`
/// gate does not count them as direct writes, simple protocol or
/// prepared, whatever their values. What would go on writing PostgreSQL
/// behind the step still counts: an untranslatable write through the
/// proxy, a write in a transaction block, and the same statement sent by
/// another writer straight to PostgreSQL.
#[tokio::test(flavor = "multi_thread")]
async fn the_primary_gate_leaves_out_the_writes_the_proxy_moves_to_the_facade() {
    use crate::proxy_writes::{trip, INSERT_TRIP};
    use tripstore::{direct_writes::since_snapshot, Mode, TripStore};
    let db = crate::harness::LegacyDb::trips().await;
    db.apply_schemaless().await;
    let facade = TripStore::connect(&db.config).await.unwrap();
    crate::mirror::walk_to(&facade, &db.config, Mode::Shadow).await;
    let file = config_file(&format!("{}\n[proxy]\n", db.config_text));
    let proxy = ProxyProcess::start(file.path(), "127.0.0.1:0");
    crate::proxy_writes::proxy_in(&proxy, "shadow");
    let url = proxy.url(&db);
    let model = query::Model::from_config(&db.config).unwrap();
    let recorded = || async {
        sqlx::query_scalar::<_, Option<i64>>(
            "SELECT CASE WHEN to_regclass('mezzanine.proxied_writes') IS NOT NULL THEN
                 (xpath('//s/text()', query_to_xml(
                     'SELECT sum(calls) AS s FROM mezzanine.proxied_writes WHERE mode = ''shadow''',
                     false, false, '')))[1]::text::int8 END",
        )
        .fetch_one(&db.pool)
        .await
        .unwrap()
        .unwrap_or(0)
    };
    // A proxy makes the table if nothing has yet (a proxy in `legacy`).
    sqlx::raw_sql("DROP TABLE mezzanine.proxied_writes")
        .execute(&db.pool)
        .await
        .unwrap();
    let until_recorded = |n: i64| async move {
        let start = Instant::now();
        while recorded().await < n {
            assert!(start.elapsed() < Duration::from_secs(20), "not recorded");
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    };

    // Three INSERTs of literals (simple protocol), and an UPDATE the
    // driver prepares and binds twice.
    let keys: Vec<uuid::Uuid> = (0..3).map(|_| uuid::Uuid::new_v4()).collect();
    for k in &keys {
        let (ok, out, err) = psql(&url, &format!("\\set ON_ERROR_STOP 1\n{};\n", trip(*k)));
        assert!(ok && out.trim() == "INSERT 0 1", "{out}{err}");
    }
    let pool = sqlx::postgres::PgPoolOptions::new()
        .max_connections(1)
        .connect(&url)
        .await
        .unwrap();
    for status in ["accepted", "completed"] {
        sqlx::query("UPDATE trips SET status = $1, version = version + 1 WHERE uuid = $2")
            .bind(status)
            .bind(keys[0])
            .execute(&pool)
            .await
            .unwrap();
    }
    until_recorded(5).await;
    assert_eq!(
        since_snapshot(&db.pool, &model, Mode::Shadow)
            .await
            .unwrap(),
        vec![],
        "the proxy's writes are not direct"
    );
    let dry_run = crate::harness::mezzanine(file.path(), &["mode", "set", "primary", "--dry-run"])
        .output()
        .unwrap();
    let said = String::from_utf8_lossy(&dry_run.stdout).to_string()
        + &String::from_utf8_lossy(&dry_run.stderr);
    assert!(
        !said.contains("writes to layout tables since this mode began"),
        "{said}"
    );
    assert_eq!(
        proxy.status()["forwarded_writes"]["shadow"],
        5,
        "{}",
        proxy.status()
    );

    // What would still write PostgreSQL in primary counts.
    let direct = crate::harness::cluster().postgres_url(&db.name);
    let (ok, _, err) = psql(
        &direct,
        &format!("\\set ON_ERROR_STOP 1\n{};\n", trip(uuid::Uuid::new_v4())),
    );
    assert!(ok, "{err}");
    let by_city = "UPDATE trips SET status = 'held', version = version + 1 WHERE city_id = 7";
    let (ok, _, err) = psql(&url, &format!("\\set ON_ERROR_STOP 1\n{by_city};\n"));
    assert!(ok, "{err}");
    let (ok, _, err) = psql(
        &url,
        &format!(
            "\\set ON_ERROR_STOP 1\nBEGIN;\nDELETE FROM trips WHERE uuid = '{}';\nCOMMIT;\n",
            keys[2]
        ),
    );
    assert!(ok, "{err}");
    let found = since_snapshot(&db.pool, &model, Mode::Shadow)
        .await
        .unwrap();
    let calls = |start: &str| {
        found
            .iter()
            .filter(|w| w.sql.starts_with(start))
            .map(|w| w.calls)
            .sum::<u64>()
    };
    let insert = INSERT_TRIP.split(" VALUES").next().unwrap();
    assert_eq!(calls(insert), 1, "the direct INSERT alone: {found:?}");
    assert_eq!(
        calls("UPDATE trips SET status = $1, version = version + $2 WHERE city_id"),
        1,
        "{found:?}"
    );
    assert_eq!(calls("DELETE FROM trips"), 1, "in a block: {found:?}");
    assert_eq!(found.iter().map(|w| w.calls).sum::<u64>(), 3, "{found:?}");
    let refused = crate::harness::mezzanine(file.path(), &["mode", "set", "primary"])
        .output()
        .unwrap();
    assert!(!refused.status.success());
    let err = String::from_utf8_lossy(&refused.stderr);
    assert!(err.contains("3 writes to layout tables"), "{err}");

    // A new mode, a new count: entering a mode empties the table.
    crate::worker::forced(&facade, Mode::Mirror).await;
    assert_eq!(recorded().await, 0);
    pool.close().await;
    facade.close().await;
}
