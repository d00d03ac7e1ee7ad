//! `mezzanine proxy` with real clients against real servers: psql and
//! pgbench (they ship with PostgreSQL) and sqlx (the extended protocol),
//! through the proxy and direct; the mode's refusals; bad input; the
//! proxy killed under writes.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use serde_json::Value;
use tripstore::{Mode, TripStore};

use crate::harness::{cluster, config_file, mezzanine, LegacyDb};

/// A `mezzanine proxy` process.
pub(crate) struct ProxyProcess {
    pub(crate) child: Child,
    pub(crate) addr: SocketAddr,
    status: SocketAddr,
}

impl ProxyProcess {
    pub(crate) fn start(config: &std::path::Path, listen: &str) -> ProxyProcess {
        let mut child = mezzanine(
            config,
            &[
                "proxy",
                "--listen",
                listen,
                "--status-listen",
                "127.0.0.1:0",
            ],
        )
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap();
        let mut line = String::new();
        BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        // proxy on ADDR forwarding to PG with sslmode=X (mode M, status on http://S/status)
        let parsed = (|| {
            let words: Vec<&str> = line.split_whitespace().collect();
            let addr = words.get(2)?.parse().ok()?;
            let status = words
                .iter()
                .find_map(|w| w.strip_prefix("http://"))?
                .trim_end_matches(')')
                .trim_end_matches("/status")
                .parse()
                .ok()?;
            Some((addr, status))
        })();
        let Some((addr, status)) = parsed else {
            let _ = child.kill();
            let _ = child.wait();
            panic!("no addresses in {line:?}");
        };
        ProxyProcess {
            child,
            addr,
            status,
        }
    }

    pub(crate) fn url(&self, db: &LegacyDb) -> String {
        format!("postgres://postgres@{}/{}", self.addr, db.name)
    }

    pub(crate) fn status(&self) -> Value {
        let out = Command::new(env!("CARGO_BIN_EXE_mezzanine"))
            .args(["proxy", "status", "--json", "--from"])
            .arg(self.status.to_string())
            .output()
            .unwrap();
        assert!(out.status.success(), "{out:?}");
        serde_json::from_slice(&out.stdout).unwrap()
    }
}

impl ProxyProcess {
    /// Stops the proxy as a service manager would (SIGTERM), and waits.
    pub(crate) fn stop(mut self) {
        let term = Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status()
            .unwrap();
        assert!(term.success());
        let exited = self.child.wait().unwrap();
        assert!(exited.success(), "{exited:?}");
    }
}

impl Drop for ProxyProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn binaries() -> devcluster::Binaries {
    devcluster::Binaries::find().expect("the PostgreSQL binaries")
}

/// psql running `script` against `url`: (status, stdout, stderr).
pub(crate) fn psql(url: &str, script: &str) -> (bool, String, String) {
    let mut child = Command::new(binaries().psql)
        .args(["-X", "-v", "VERBOSITY=verbose", "-d", url, "-f", "-"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(script.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// The config of `db` with `[proxy]` settings appended.
fn with_proxy(db: &LegacyDb, proxy: &str) -> tempfile::NamedTempFile {
    config_file(&format!("{}\n[proxy]\n{proxy}\n", db.config_text))
}

/// Every kind of traffic psql makes: types in text form (NULLs, numeric,
/// jsonb, arrays, timestamps, bytea), COPY both ways, transactions,
/// prepared statements, errors with their SQLSTATE, notices, LISTEN and
/// NOTIFY, and reads of the layout's tables.
const WORKLOAD: &str = r#"
\set ON_ERROR_STOP 0
SET TimeZone = 'UTC';
CREATE TEMP TABLE v (id int PRIMARY KEY, n numeric, j jsonb, a int[], t timestamptz, b bytea, s text);
INSERT INTO v VALUES
  (1, 12.50, '{"k": [1, 2.5, null]}', '{1,NULL,3}', '2026-12-03 10:00:00.123456+00', '\x00ff', 'tab	and ''quote'''),
  (2, NULL, NULL, NULL, NULL, NULL, NULL),
  (3, -0.000000000000000000001, '"x"', '{}', 'infinity', '\x', '');
SELECT * FROM v ORDER BY id;
SELECT n * 3, j -> 'k', a[1], t + interval '1 day', length(b) FROM v ORDER BY id;
COPY v TO STDOUT;
COPY v (id, s) FROM STDIN;
10	copied
11	\N
\.
SELECT id, s FROM v WHERE id >= 10 ORDER BY id;
BEGIN;
INSERT INTO v (id) VALUES (20);
SELECT count(*) FROM v;
ROLLBACK;
SELECT count(*) FROM v;
PREPARE q (int) AS SELECT id, s FROM v WHERE id = $1;
EXECUTE q(1);
DEALLOCATE q;
SELECT * FROM no_such_table;
SELECT 1/0;
INSERT INTO v (id) VALUES (1);
DO $$ BEGIN RAISE NOTICE 'a notice from %', 'plpgsql'; END $$;
LISTEN proxy_test;
NOTIFY proxy_test, 'a payload';
SELECT count(*) FROM trips;
SELECT uuid IS NULL FROM trips LIMIT 0;
SELEC 1;
"#;

/// psql's lines with what differs between any two sessions taken out:
/// the server process id of a notification, the number of the session's
/// temporary schema.
fn normalized(text: &str) -> String {
    text.lines()
        .map(
            |l| match (l.find("server process with PID"), l.find("pg_temp_")) {
                (Some(at), _) => l[..at].to_string(),
                (_, Some(at)) => format!("{}pg_temp_N", &l[..at]),
                _ => l.to_string(),
            },
        )
        .collect::<Vec<_>>()
        .join("\n")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn psql_and_pgbench_get_what_postgresql_gives_them_directly() {
    let db = LegacyDb::trips().await;
    let file = with_proxy(&db, "");
    let proxy = ProxyProcess::start(file.path(), "127.0.0.1:0");
    let direct = cluster().postgres_url(&db.name);
    let (ok_direct, out_direct, err_direct) = psql(&direct, WORKLOAD);
    let (ok_proxy, out_proxy, err_proxy) = psql(&proxy.url(&db), WORKLOAD);
    assert!(ok_direct && ok_proxy, "{err_direct}\n{err_proxy}");
    assert!(
        out_direct.contains("12.50"),
        "the workload ran: {out_direct}"
    );
    assert!(
        err_direct.contains("42P01"),
        "errors carry SQLSTATEs: {err_direct}"
    );
    assert_eq!(normalized(&out_direct), normalized(&out_proxy));
    assert_eq!(normalized(&err_direct), normalized(&err_proxy));

    // pgbench: its tables loaded through the proxy (COPY), its standard
    // script in both protocols, several clients at once.
    let pgbench = |args: &[&str]| {
        let out = Command::new(binaries().pgbench)
            .args(args)
            .arg(proxy.url(&db))
            .output()
            .unwrap();
        let text = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(out.status.success(), "pgbench {args:?}: {text}");
        text
    };
    pgbench(&["-i", "-s", "1", "-q"]);
    for protocol in ["simple", "extended", "prepared"] {
        let text = pgbench(&["-c", "4", "-j", "2", "-t", "200", "-M", protocol]);
        assert!(
            text.contains("number of failed transactions: 0"),
            "{protocol}: {text}"
        );
        assert!(
            text.contains("number of transactions actually processed: 800/800"),
            "{text}"
        );
    }
    let status = proxy.status();
    assert_eq!(status["mode"], "legacy");
    assert!(status["connections"]["served"].as_u64().unwrap() >= 2 + 4 * 3);
    let forwarded_other: u64 = status["statements"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|s| s["class"] == "other" && s["route"] == "forwarded")
        .map(|s| s["count"].as_u64().unwrap())
        .sum();
    assert!(forwarded_other > 2400, "{status}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn primary_refuses_what_the_cell_api_cannot_express_and_forwards_the_rest() {
    let db = LegacyDb::trips().await;
    db.apply_schemaless().await;
    legacy::trips::seed(&db.pool, "public", "uuid", 5, 7, |_| {})
        .await
        .unwrap();
    let facade = TripStore::connect(&db.config).await.unwrap();
    crate::worker::forced(&facade, Mode::Primary).await;
    let file = with_proxy(&db, "");
    let proxy = ProxyProcess::start(file.path(), "127.0.0.1:0");
    let trips = db.count("SELECT count(*) FROM trips").await;
    assert_eq!(trips, 5);

    // Simple protocol: refused with 0A000 and the translator's reason.
    let (_, _, err) = psql(&proxy.url(&db), "DELETE FROM trips;\n");
    assert!(err.contains("0A000"), "{err}");
    assert!(
        err.contains("writes every row of trips"),
        "the audit's reason: {err}"
    );
    // The parser cannot read it and it names a layout table: refused.
    let (_, _, err) = psql(&proxy.url(&db), "DELETE FRM trips;\n");
    assert!(
        err.contains("0A000") && err.contains("cannot parse"),
        "{err}"
    );
    // Inside an explicit transaction block: forwarded, as one.
    let (_, _, err) = psql(&proxy.url(&db), "UPDATE trips SET status = 'x';\n");
    assert!(err.contains("0A000"), "refused outside a block: {err}");
    let (_, out, err) = psql(
        &proxy.url(&db),
        "BEGIN;\nUPDATE trips SET status = 'x';\nSELECT count(*) AS inside FROM trips WHERE status = 'x';\nROLLBACK;\n",
    );
    assert!(err.is_empty(), "stderr: {err}\nstdout: {out}");
    assert!(
        out.contains("UPDATE 5") && out.contains("\n      5\n"),
        "{out}"
    );
    assert_eq!(
        db.count("SELECT count(*) FROM trips WHERE status = 'x'")
            .await,
        0
    );
    // Reads the cell API cannot express are forwarded in primary (the
    // reverse mirror keeps PostgreSQL current), and so is what names no
    // layout table.
    let (ok, out, err) = psql(
        &proxy.url(&db),
        "\\set ON_ERROR_STOP 1\nSELECT count(*) FROM trips;\nSELECT 41 + 1;\n",
    );
    assert!(ok, "{err}");
    assert!(out.contains(" 5\n") && out.contains(" 42\n"), "{out}");
    // COPY: out of a layout table, a read, forwarded; into one, a write
    // the facade would never see, refused before any row is sent.
    let (ok, out, err) = psql(
        &proxy.url(&db),
        "\\set ON_ERROR_STOP 1\nCOPY (SELECT count(*) FROM trips) TO STDOUT;\nCOPY trips (uuid) TO STDOUT;\n",
    );
    assert!(
        ok && out.starts_with("5\n") && out.lines().count() == 6,
        "{out}{err}"
    );
    let (ok, _, err) = psql(
        &proxy.url(&db),
        "\\set ON_ERROR_STOP 1\nCOPY trips (uuid, version) FROM STDIN;\n6f1c1a0e-0000-4000-8000-00000000c0b1\t1\n\\.\n",
    );
    assert!(
        !ok && err.contains("0A000") && err.contains("COPY FROM"),
        "{err}"
    );
    assert_eq!(db.count("SELECT count(*) FROM trips").await, 5);
    // A write inside a WITH is a write, not a read to forward.
    let (_, _, err) = psql(
        &proxy.url(&db),
        "WITH u AS (UPDATE trips SET status = 'x' RETURNING uuid) SELECT count(*) FROM u;\n",
    );
    assert!(err.contains("0A000"), "{err}");
    assert_eq!(
        db.count("SELECT count(*) FROM trips WHERE status = 'x'")
            .await,
        0
    );
    // Nor is the table dropped from under the facade.
    let (_, _, err) = psql(&proxy.url(&db), "DROP TABLE trips CASCADE;\n");
    assert!(err.contains("0A000"), "{err}");
    assert_eq!(db.count("SELECT count(*) FROM trips").await, 5);

    // Extended protocol (sqlx prepares every statement): the refusal
    // arrives at the statement, in order, and the session goes on.
    let pool = sqlx::postgres::PgPoolOptions::new()
        .max_connections(1)
        .connect(&proxy.url(&db))
        .await
        .unwrap();
    let refused = sqlx::query("DELETE FROM trips WHERE city_id = $1")
        .bind(1_i64)
        .execute(&pool)
        .await
        .unwrap_err();
    assert_eq!(sqlstate(&refused).as_deref(), Some("0A000"), "{refused}");
    // The same prepared statement again, then another on the session.
    assert!(sqlx::query("DELETE FROM trips WHERE city_id = $1")
        .bind(2_i64)
        .execute(&pool)
        .await
        .is_err());
    let n: i64 = sqlx::query_scalar("SELECT count(*) FROM trips WHERE id > $1")
        .bind(0_i64)
        .fetch_one(&pool)
        .await
        .unwrap();
    assert_eq!(n, 5);
    pool.close().await;
    assert_eq!(
        db.count("SELECT count(*) FROM trips").await,
        5,
        "nothing deleted"
    );

    // Translatable reads are answered from Schemaless, which has none
    // of the five trips (nothing was backfilled): PostgreSQL has it,
    // the proxy answers as Schemaless does. One it cannot render exactly
    // (`*`) is forwarded.
    let key: uuid::Uuid = sqlx::query_scalar("SELECT uuid FROM trips ORDER BY id LIMIT 1")
        .fetch_one(&db.pool)
        .await
        .unwrap();
    let by_key =
        format!("\\set ON_ERROR_STOP 1\nSELECT uuid, status FROM trips WHERE uuid = '{key}';\n");
    let (ok, out, err) = psql(&proxy.url(&db), &by_key);
    assert!(ok && out.contains("(0 rows)"), "{out}{err}");
    let direct = crate::harness::cluster().postgres_url(&db.name);
    let (ok, out, err) = psql(&direct, &by_key);
    assert!(ok && out.contains("(1 row)"), "{out}{err}");
    let everything = format!("SELECT * FROM trips WHERE uuid = '{key}';\n");
    let (ok, out, err) = psql(
        &proxy.url(&db),
        &format!("\\set ON_ERROR_STOP 1\n{everything}"),
    );
    assert!(ok && out.contains("(1 row)"), "{out}{err}");
    assert_eq!(proxy.status()["served"]["schemaless"], 1);

    // In schemaless, reads of layout tables are refused too, but those
    // Schemaless answers.
    crate::worker::forced(&facade, Mode::Schemaless).await;
    let (_, _, err) = wait_for(|| {
        let r = psql(&proxy.url(&db), "SELECT count(*) FROM trips;\n");
        r.2.contains("0A000").then_some(r)
    });
    assert!(err.contains("schemaless mode"), "{err}");
    let (ok, out, _) = psql(&proxy.url(&db), "\\set ON_ERROR_STOP 1\nSELECT 7 * 6;\n");
    assert!(ok && out.contains(" 42\n"), "{out}");
    let (ok, out, err) = psql(&proxy.url(&db), &by_key);
    assert!(ok && out.contains("(0 rows)"), "{out}{err}");
    let (_, _, err) = psql(&proxy.url(&db), &everything);
    assert!(
        err.contains("0A000") && err.contains("cannot answer from Schemaless"),
        "{err}"
    );
    // A translatable read among other statements (one Query: psql's
    // `\;`) is refused whole.
    let (_, out, err) = psql(
        &proxy.url(&db),
        &format!("SELECT 1 AS before \\; SELECT uuid FROM trips WHERE uuid = '{key}';\n"),
    );
    assert!(
        err.contains("0A000") && err.contains("send it alone"),
        "{out}{err}"
    );
    // Prepared: served, refused at its Bind, and the session goes on.
    let pool = sqlx::postgres::PgPoolOptions::new()
        .max_connections(1)
        .connect(&proxy.url(&db))
        .await
        .unwrap();
    for _ in 0..2 {
        let found: Option<String> = sqlx::query_scalar("SELECT status FROM trips WHERE uuid = $1")
            .bind(key)
            .fetch_optional(&pool)
            .await
            .unwrap();
        assert_eq!(found, None, "answered from Schemaless");
        let refused = sqlx::query("SELECT * FROM trips WHERE uuid = $1")
            .bind(key)
            .fetch_all(&pool)
            .await
            .unwrap_err();
        assert_eq!(sqlstate(&refused).as_deref(), Some("0A000"), "{refused}");
    }
    let n: i32 = sqlx::query_scalar("SELECT 40 + $1")
        .bind(2_i32)
        .fetch_one(&pool)
        .await
        .unwrap();
    assert_eq!(n, 42);
    pool.close().await;
    let served = &proxy.status()["served"];
    assert_eq!(served["schemaless"], 4, "{served}");
    assert_eq!(served["refused"], 3, "{served}");

    let status = proxy.status();
    let refused: u64 = status["statements"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|s| s["route"] == "refused")
        .map(|s| s["count"].as_u64().unwrap())
        .sum();
    assert!(refused >= 5, "{status}");
    facade.close().await;
}

/// The SQLSTATE of a database error.
pub(crate) fn sqlstate(e: &sqlx::Error) -> Option<String> {
    e.as_database_error()
        .and_then(|e| e.code())
        .map(|c| c.to_string())
}

/// Polls `f` every 100 ms for up to 10 s (the mode reaches a facade by
/// NOTIFY, or by its poll).
pub(crate) fn wait_for<T>(mut f: impl FnMut() -> Option<T>) -> T {
    for _ in 0..100 {
        if let Some(v) = f() {
            return v;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    panic!("not reached in 10 s");
}

/// A raw connection through the proxy, past authentication (the dev
/// cluster trusts loopback).
pub(crate) fn raw_session(addr: SocketAddr, db: &LegacyDb) -> TcpStream {
    let mut stream = TcpStream::connect(addr).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    let mut body = Vec::new();
    body.extend_from_slice(&196608_i32.to_be_bytes());
    for (k, v) in [("user", "postgres"), ("database", db.name.as_str())] {
        body.extend_from_slice(k.as_bytes());
        body.push(0);
        body.extend_from_slice(v.as_bytes());
        body.push(0);
    }
    body.push(0);
    let mut packet = ((body.len() + 4) as i32).to_be_bytes().to_vec();
    packet.extend_from_slice(&body);
    stream.write_all(&packet).unwrap();
    read_until_ready(&mut stream);
    stream
}

/// Reads messages up to `ReadyForQuery`; returns their type bytes and the
/// text of any error.
fn read_until_ready(stream: &mut TcpStream) -> (Vec<u8>, String) {
    let messages = messages_until_ready(stream);
    let errors = messages
        .iter()
        .filter(|(kind, _)| *kind == b'E')
        .map(|(_, body)| String::from_utf8_lossy(body).into_owned())
        .collect();
    (messages.into_iter().map(|(kind, _)| kind).collect(), errors)
}

/// The messages (type, body) up to and with `ReadyForQuery`, or up to
/// the connection's end.
pub(crate) fn messages_until_ready(stream: &mut TcpStream) -> Vec<(u8, Vec<u8>)> {
    let mut messages = Vec::new();
    loop {
        let mut header = [0u8; 5];
        if stream.read_exact(&mut header).is_err() {
            return messages;
        }
        let len = u32::from_be_bytes([header[1], header[2], header[3], header[4]]) as usize;
        let mut body = vec![0u8; len - 4];
        stream.read_exact(&mut body).unwrap();
        messages.push((header[0], body));
        if header[0] == b'Z' {
            return messages;
        }
    }
}

/// Whatever the proxy sends before it closes the connection.
fn read_to_close(stream: &mut TcpStream) -> String {
    let mut all = Vec::new();
    let _ = stream.read_to_end(&mut all);
    String::from_utf8_lossy(&all).into_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_input_ends_only_its_own_connection() {
    let db = LegacyDb::trips().await;
    let file = with_proxy(&db, "max_clients = 3\nmax_message_bytes = 65536");
    let proxy = ProxyProcess::start(file.path(), "127.0.0.1:0");
    let works = || {
        let (ok, out, err) = psql(&proxy.url(&db), "\\set ON_ERROR_STOP 1\nSELECT 6 * 7;\n");
        assert!(ok && out.contains(" 42\n"), "{out}{err}");
    };
    // One session stays open throughout: nothing below disturbs it.
    let mut bystander = raw_session(proxy.addr, &db);

    // A malformed startup packet: a length under the minimum, then one
    // over PostgreSQL's limit, then an unknown protocol.
    for packet in [
        &b"\0\0\0\x03\0\0\0\0"[..],
        &b"\x7f\0\0\0\0\x03\0\0"[..],
        &b"\0\0\0\x08\0\x09\0\0"[..],
    ] {
        let mut s = TcpStream::connect(proxy.addr).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        s.write_all(packet).unwrap();
        let answer = read_to_close(&mut s);
        assert!(
            answer.starts_with('E') && answer.contains("08P01"),
            "{answer:?}"
        );
    }
    // Random bytes after a good startup.
    let mut s = raw_session(proxy.addr, &db);
    s.write_all(b"\x01\x02\x03\x04\x05\x06\x07\x08").unwrap();
    assert!(!read_to_close(&mut s).is_empty());
    // An oversized message is refused from its header.
    let mut s = raw_session(proxy.addr, &db);
    s.write_all(b"Q\x00\x10\x00\x00").unwrap();
    let answer = read_to_close(&mut s);
    assert!(
        answer.contains("54000") && answer.contains("max_message_bytes"),
        "{answer:?}"
    );
    // A client gone mid-statement (half a Query).
    let mut s = raw_session(proxy.addr, &db);
    s.write_all(b"Q\0\0\0\x20SELECT pg_sleep(").unwrap();
    drop(s);
    // A statement nothing can parse is PostgreSQL's to answer.
    let (_, _, err) = psql(&proxy.url(&db), "SELEC 1;\n");
    assert!(err.contains("42601"), "{err}");
    works();

    // Past max_clients: 53300, and a slot frees when a client leaves.
    let a = raw_session(proxy.addr, &db);
    let b = raw_session(proxy.addr, &db);
    let mut c = TcpStream::connect(proxy.addr).unwrap();
    c.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let mut startup = Vec::new();
    startup.extend_from_slice(&(4 + 4 + 14 + 1_i32).to_be_bytes());
    startup.extend_from_slice(&196608_i32.to_be_bytes());
    startup.extend_from_slice(b"user\0postgres\0\0");
    c.write_all(&startup).unwrap();
    let answer = read_to_close(&mut c);
    assert!(answer.contains("53300"), "{answer:?}");
    drop((a, b));
    wait_for(|| {
        let (ok, out, _) = psql(&proxy.url(&db), "SELECT 6 * 7;\n");
        (ok && out.contains(" 42\n")).then_some(())
    });

    bystander.write_all(b"Q\0\0\0\x0dSELECT 1\0").unwrap();
    let (kinds, errors) = read_until_ready(&mut bystander);
    assert!(errors.is_empty(), "{errors}");
    assert_eq!(kinds, b"TDCZ", "the bystander's query answered whole");
    let status = proxy.status();
    assert!(
        status["connections"]["bad_startup"].as_u64().unwrap() >= 3,
        "{status}"
    );
    assert!(
        status["connections"]["refused_full"].as_u64().unwrap() >= 1,
        "{status}"
    );
}

/// Waits (up to 30 s) until `acked` holds at least `n` rows; their count.
async fn stored_at_least(db: &LegacyDb, n: i64) -> i64 {
    for _ in 0..1500 {
        let count = db.count("SELECT count(*) FROM acked").await;
        if count >= n {
            return count;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    panic!("acked never reached {n} rows");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_proxy_killed_under_writes_loses_no_acknowledged_write() {
    let db = LegacyDb::trips().await;
    sqlx::raw_sql("CREATE TABLE acked (id bigint PRIMARY KEY, writer int NOT NULL)")
        .execute(&db.pool)
        .await
        .unwrap();
    let file = with_proxy(&db, "");
    let proxy = ProxyProcess::start(file.path(), "127.0.0.1:0");
    let addr = proxy.addr;
    let url = proxy.url(&db);
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let mut writers = Vec::new();
    for writer in 0..4_i64 {
        let url = url.clone();
        let stop = stop.clone();
        writers.push(tokio::spawn(async move {
            let mut acked = Vec::new();
            let mut failures = 0;
            let mut next = writer * 1_000_000;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                // A new connection when the last one broke: the app's
                // reconnect.
                let Ok(mut conn) = <sqlx::PgConnection as sqlx::Connection>::connect(&url).await
                else {
                    failures += 1;
                    tokio::time::sleep(Duration::from_millis(20)).await;
                    continue;
                };
                loop {
                    if stop.load(std::sync::atomic::Ordering::Relaxed) {
                        break;
                    }
                    next += 1;
                    match sqlx::query("INSERT INTO acked VALUES ($1, $2)")
                        .bind(next)
                        .bind(writer as i32)
                        .execute(&mut conn)
                        .await
                    {
                        Ok(_) => acked.push(next),
                        Err(_) => {
                            failures += 1;
                            break;
                        }
                    }
                }
            }
            (acked, failures)
        }));
    }
    let before_kill = stored_at_least(&db, 200).await;
    let mut proxy = proxy;
    proxy.child.kill().unwrap();
    proxy.child.wait().unwrap();
    // Started again on the same port, as a supervisor would; the writers
    // go on through it.
    let again = ProxyProcess::start(file.path(), &addr.to_string());
    stored_at_least(&db, before_kill + 200).await;
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let mut acked = Vec::new();
    let mut failures = 0;
    for w in writers {
        let (a, f) = w.await.unwrap();
        acked.extend(a);
        failures += f;
    }
    assert!(failures >= 1, "the kill broke some connection");
    assert!(acked.len() > 400, "{} writes acknowledged", acked.len());
    let stored: Vec<i64> = sqlx::query_scalar("SELECT id FROM acked")
        .fetch_all(&db.pool)
        .await
        .unwrap();
    let stored: std::collections::HashSet<i64> = stored.into_iter().collect();
    let lost: Vec<&i64> = acked.iter().filter(|id| !stored.contains(id)).collect();
    assert!(
        lost.is_empty(),
        "{} acknowledged writes lost: {lost:?}",
        lost.len()
    );
    // Writes went on through the restarted proxy.
    let served = again.status()["connections"]["served"].as_u64().unwrap();
    assert!(served >= 4, "the writers reconnected: {served}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idle_session_is_closed_but_never_one_inside_a_transaction() {
    let db = LegacyDb::trips().await;
    let file = with_proxy(&db, "idle_timeout_ms = 300");
    let proxy = ProxyProcess::start(file.path(), "127.0.0.1:0");
    let mut idle = raw_session(proxy.addr, &db);
    let mut in_block = raw_session(proxy.addr, &db);
    in_block.write_all(b"Q\0\0\0\x0aBEGIN\0").unwrap();
    let (kinds, errors) = read_until_ready(&mut in_block);
    assert!(errors.is_empty() && kinds.ends_with(b"Z"), "{errors}");
    let began = std::time::Instant::now();
    // Idle outside a transaction: FATAL 57P05, then the connection ends
    // (read until it does; the read's own timeout is 10 s).
    let started = std::time::Instant::now();
    let answer = read_to_close(&mut idle);
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "closed by the idle timeout"
    );
    assert!(
        answer.starts_with('E') && answer.contains("57P05"),
        "{answer:?}"
    );
    // Inside one: still served past twice the timeout (a span of time is
    // the condition here), and the block commits.
    if let Some(rest) = Duration::from_millis(600).checked_sub(began.elapsed()) {
        std::thread::sleep(rest);
    }
    in_block.write_all(b"Q\0\0\0\x0bCOMMIT\0").unwrap();
    let (kinds, errors) = read_until_ready(&mut in_block);
    assert!(errors.is_empty(), "{errors}");
    assert_eq!(kinds, b"CZ", "COMMIT answered");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_a_certificate_apps_connect_over_tls_only() {
    let db = LegacyDb::trips().await;
    let (ca, cert, key) = crate::tls::certificates();
    let dir = tempfile::tempdir().unwrap();
    let path = |name: &str| dir.path().join(name).to_str().unwrap().to_string();
    std::fs::write(path("ca.crt"), &ca).unwrap();
    std::fs::write(path("proxy.crt"), &cert).unwrap();
    std::fs::write(path("proxy.key"), &key).unwrap();
    let file = with_proxy(
        &db,
        &format!(
            "tls_cert = \"{}\"\ntls_key = \"{}\"",
            path("proxy.crt"),
            path("proxy.key")
        ),
    );
    let proxy = ProxyProcess::start(file.path(), "127.0.0.1:0");
    // Verified against the CA, for the proxy's address.
    let url = format!(
        "{}?sslmode=verify-full&sslrootcert={}",
        proxy.url(&db),
        path("ca.crt")
    );
    let (ok, out, err) = psql(&url, "\\set ON_ERROR_STOP 1\n\\conninfo\nSELECT 6 * 7;\n");
    assert!(ok, "{err}");
    assert!(out.contains("SSL connection"), "{out}");
    assert!(out.contains(" 42\n"), "{out}");
    // An app that does not ask for TLS is refused, with the reason.
    let (ok, _, err) = psql(
        &format!("{}?sslmode=disable", proxy.url(&db)),
        "SELECT 1;\n",
    );
    assert!(!ok);
    assert!(err.contains("TLS connections only"), "{err}");
    // One that trusts another CA refuses the proxy.
    let (other_ca, _, _) = crate::tls::certificates();
    std::fs::write(path("other.crt"), &other_ca).unwrap();
    let (ok, _, err) = psql(
        &format!(
            "{}?sslmode=verify-full&sslrootcert={}",
            proxy.url(&db),
            path("other.crt")
        ),
        "SELECT 1;\n",
    );
    assert!(!ok && err.contains("SSL"), "{err}");
}
