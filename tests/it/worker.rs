//! Workers: the facade over HTTP, called through the Rust client and raw
//! HTTP, held to the linked facade's answers.

use std::io::{BufRead, BufReader, Read as _, Write as _};
use std::net::SocketAddr;
use std::process::{Child, Stdio};
use std::sync::Arc;
use std::time::Duration;

use nix::sys::signal::Signal;
use schemaless::{
    Cell, CellKey, CellStore, Column, Filter, FilterOp, IndexQuery, ReadFrom, StoredCell,
};
use serde_json::{json, Value};
use tokio_util::sync::CancellationToken;
use tripstore::{Mode, ModeRequest, TripStore};

use crate::harness::{config_file, mezzanine, LegacyDb};

/// A plain reqwest client (the client crate's TLS features leave reqwest
/// without a default crypto provider: install ring's).
/// Its pooled connections are dropped well before a worker's idle
/// timeout (its header read timeout, 500 ms in some tests), as the
/// project's clients do.
pub(crate) fn http_client() -> reqwest::Client {
    let _ = rustls::crypto::ring::default_provider().install_default();
    reqwest::Client::builder()
        .pool_idle_timeout(Duration::from_millis(200))
        .build()
        .unwrap()
}

/// A worker on a free loopback port, in this process.
pub(crate) async fn worker_in_process(
    store: Arc<TripStore>,
    config: &config::Config,
) -> (worker::Served, CancellationToken) {
    let mut config = config.clone();
    config.worker.listen = "127.0.0.1:0".parse().unwrap();
    let shutdown = CancellationToken::new();
    let served = worker::start(store, &config, true, None, shutdown.clone())
        .await
        .expect("the worker starts");
    (served, shutdown)
}

pub(crate) async fn client_of(urls: &[String], token: Option<&str>) -> client::Client {
    let mut builder = client::Client::builder().deadline(Duration::from_secs(20));
    for url in urls {
        builder = builder.worker(url).unwrap();
    }
    if let Some(token) = token {
        builder = builder.token(token);
    }
    builder.connect().await.expect("the client connects")
}

/// What a read answered, comparable across stores: the value, or the
/// kind of error.
fn outcome<T: std::fmt::Debug>(result: &schemaless::Result<T>) -> String {
    match result {
        Ok(v) => format!("{v:?}"),
        Err(schemaless::Error::Unsupported { .. }) => "unsupported".into(),
        Err(schemaless::Error::InvalidInput { .. }) => "invalid input".into(),
        Err(_) => "error".into(),
    }
}

fn key_of(cell: &Cell) -> CellKey {
    cell.key.clone()
}

fn bodies(cells: &[StoredCell]) -> Vec<(CellKey, Value)> {
    cells
        .iter()
        .map(|c| (c.cell.key.clone(), c.cell.body.to_value()))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_endpoint_answers_as_the_linked_facade_in_every_mode() {
    let db = LegacyDb::trips().await;
    db.apply_schemaless().await;
    let facade = Arc::new(TripStore::connect(&db.config).await.unwrap());
    let (served, shutdown) = worker_in_process(facade.clone(), &db.config).await;
    let http = client_of(&[served.url()], None).await;
    assert_eq!(http.shard_count(), facade.shard_count());
    let mut source = legacy::trips::TripCells::new(41);
    let mut written: Vec<Cell> = Vec::new();
    for mode in Mode::ALL {
        crate::mirror::walk_to(&facade, &db.config, mode).await;
        assert_eq!(facade.mode(), mode);
        let trip = source.new_trip();
        let outcomes: Vec<_> = http.put_cells(trip.clone()).await.unwrap();
        assert!(outcomes.iter().all(|o| o.is_ok()), "{mode}: {outcomes:?}");
        // The same batch again is what the facade says of it: a repeat.
        let again = http.put_cells(trip.clone()).await.unwrap();
        let linked = facade.put_cells(trip.clone()).await.unwrap();
        assert_eq!(again, linked, "{mode}");
        written.extend(trip.clone());
        // This mode's cells: those of earlier modes may still be on their
        // way through the relay, and could land between the two reads.
        for cell in &trip {
            let key = key_of(cell);
            let (a, b) = (
                http.get_cell_latest(&key.row_key, &key.column, ReadFrom::Master)
                    .await,
                facade
                    .get_cell_latest(&key.row_key, &key.column, ReadFrom::Master)
                    .await,
            );
            assert_eq!(outcome(&a), outcome(&b), "{mode}: latest of {key}");
            let (a, b) = (
                http.get_cell(&key, ReadFrom::Master).await,
                facade.get_cell(&key, ReadFrom::Master).await,
            );
            assert_eq!(outcome(&a), outcome(&b), "{mode}: {key}");
            let (a, b) = (
                http.get_cells_for_row(&key.row_key, ReadFrom::Master).await,
                facade
                    .get_cells_for_row(&key.row_key, ReadFrom::Master)
                    .await,
            );
            assert_eq!(
                a.as_deref().map(bodies).ok(),
                b.as_deref().map(bodies).ok(),
                "{mode}: row {}",
                key.row_key
            );
        }
        let last = written.last().unwrap().clone();
        let rows: Vec<_> = written.iter().map(|c| c.key.row_key).collect();
        let (a, b) = (
            http.get_column_cells(&rows, &last.key.column, ReadFrom::Master)
                .await,
            facade
                .get_column_cells(&rows, &last.key.column, ReadFrom::Master)
                .await,
        );
        assert_eq!(outcome(&a), outcome(&b), "{mode}: column cells");
        let base = written
            .iter()
            .find(|c| c.key.column.as_str() == "BASE")
            .unwrap();
        let query = IndexQuery {
            index: "trips_by_driver".into(),
            shard_value: base.body.fields()["driver_uuid"].clone(),
            filters: vec![Filter {
                field: "city_id".into(),
                op: FilterOp::Ge,
                value: json!(0),
            }],
            order_by: Some("requested_at".into()),
            descending: true,
            limit: 10,
        };
        let (a, b) = (
            http.query_index(&query, ReadFrom::Master).await,
            facade.query_index(&query, ReadFrom::Master).await,
        );
        assert_eq!(outcome(&a), outcome(&b), "{mode}: index");
        let shard = schemaless::routing::shard_of(&base.key.row_key, facade.shard_count());
        let (a, b) = (
            http.get_cells_for_shard(shard, 0, 50, ReadFrom::Master)
                .await,
            facade
                .get_cells_for_shard(shard, 0, 50, ReadFrom::Master)
                .await,
        );
        assert_eq!(outcome(&a), outcome(&b), "{mode}: change log");
        if mode == Mode::Legacy {
            assert!(matches!(a, Err(schemaless::Error::Unsupported { .. })));
        }
    }
    // Exact numbers survive the trip through JSON both ways.
    let exact = Cell::parse(
        &schemaless::RowKey::random().to_string(),
        "EXACT",
        1,
        serde_json::from_str(r#"{"big": 123456789012345678901234567890, "tiny": 1e-40, "x": 0.1000000000000000055511151231257827}"#).unwrap(),
    )
    .unwrap();
    http.put_cell(exact.clone()).await.unwrap();
    let back = http
        .get_cell(&exact.key, ReadFrom::Master)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(back.cell.body.to_string(), exact.body.to_string());
    shutdown.cancel();
    served.done.await.unwrap();
    facade.close().await;
}

fn secrets() -> [(&'static str, &'static str); 3] {
    [
        ("MZ_TEST_READ", "read-secret-0123456789abcdef"),
        ("MZ_TEST_WRITE", "write-secret-0123456789abcdef"),
        ("MZ_TEST_ADMIN", "admin-secret-0123456789abcdef"),
    ]
}

const TOKENS: &str = r#"
[[worker.tokens]]
name = "reader"
scope = "read"
secret_env = "MZ_TEST_READ"

[[worker.tokens]]
name = "writer"
scope = "write"
secret_env = "MZ_TEST_WRITE"

[[worker.tokens]]
name = "ops"
scope = "admin"
secret_env = "MZ_TEST_ADMIN"
"#;

/// A `mezzanine worker` process, and the address it printed.
struct WorkerProcess {
    child: Child,
    url: String,
    addr: SocketAddr,
    stderr: Arc<std::sync::Mutex<String>>,
}

impl WorkerProcess {
    fn start(config: &std::path::Path, extra: &[&str]) -> WorkerProcess {
        let mut args = vec!["worker", "--listen", "127.0.0.1:0"];
        args.extend_from_slice(extra);
        let mut command = mezzanine(config, &args);
        for (env, secret) in secrets() {
            command.env(env, secret);
        }
        let mut child = command
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let stderr = Arc::new(std::sync::Mutex::new(String::new()));
        {
            let mut pipe = child.stderr.take().unwrap();
            let stderr = stderr.clone();
            std::thread::spawn(move || {
                let mut text = String::new();
                let _ = pipe.read_to_string(&mut text);
                stderr
                    .lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner)
                    .push_str(&text);
            });
        }
        let mut line = String::new();
        BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        let url = line
            .split_whitespace()
            .nth(2)
            .unwrap_or_else(|| panic!("no address in {line:?}: {}", stderr.lock().unwrap().clone()))
            .to_string();
        let addr = url.trim_start_matches("http://").parse().unwrap();
        WorkerProcess {
            child,
            url,
            addr,
            stderr,
        }
    }

    fn signal(&self, signal: Signal) {
        let pid = nix::unistd::Pid::from_raw(self.child.id() as i32);
        nix::sys::signal::kill(pid, signal).expect("signalling our own worker");
    }
}

impl Drop for WorkerProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

pub(crate) async fn forced(facade: &TripStore, mode: Mode) {
    facade
        .set_mode(&ModeRequest {
            target: mode,
            force: true,
            by: "worker test".into(),
            reason: Some("testing the worker".into()),
        })
        .await
        .unwrap();
}

fn put_body(row: &str, column: &str, ref_key: i64) -> Value {
    json!({"cells": [{"row_key": row, "column": column, "ref_key": ref_key,
        "body": {"status": "requested", "fare": "12.50"}}]})
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tokens_and_scopes_decide_who_may_call_and_nothing_is_written_without() {
    let db = LegacyDb::trips().await;
    db.apply_schemaless().await;
    let facade = TripStore::connect(&db.config).await.unwrap();
    forced(&facade, Mode::Schemaless).await;
    let file = config_file(&format!("{}\n{TOKENS}", db.config_text));
    let worker = WorkerProcess::start(file.path(), &[]);
    let http = http_client();
    let row = schemaless::RowKey::random().to_string();
    let put = |auth: Option<&str>| {
        let mut request = http
            .post(format!("{}/v1/cells", worker.url))
            .json(&put_body(&row, "NOTES", 1));
        if let Some(auth) = auth {
            request = request.header("authorization", auth);
        }
        request.send()
    };
    let status_and_code = |r: reqwest::Response| async move {
        let status = r.status().as_u16();
        let body: Value = r.json().await.unwrap();
        (
            status,
            body["code"].as_str().unwrap_or_default().to_string(),
        )
    };
    assert_eq!(
        status_and_code(put(None).await.unwrap()).await,
        (401, "unauthorized".into())
    );
    assert_eq!(
        status_and_code(put(Some("Bearer not-the-secret-at-all")).await.unwrap()).await,
        (401, "unauthorized".into())
    );
    assert_eq!(
        status_and_code(
            put(Some("Bearer read-secret-0123456789abcdef"))
                .await
                .unwrap()
        )
        .await,
        (403, "forbidden".into())
    );
    let latest = |token: &'static str| {
        http.get(format!("{}/v1/rows/{row}/columns/NOTES/latest", worker.url))
            .bearer_auth(token)
            .send()
    };
    let read = latest("read-secret-0123456789abcdef").await.unwrap();
    assert_eq!(read.headers()["mezzanine-stale"], "false");
    let read: Value = read.json().await.unwrap();
    assert_eq!(read["cell"], Value::Null, "nothing was written: {read}");
    // The write token writes; reads need read or more.
    let written: Value = put(Some("Bearer write-secret-0123456789abcdef"))
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(written["results"][0]["outcome"], "written");
    let read: Value = latest("write-secret-0123456789abcdef")
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(read["cell"]["body"]["fare"], "12.50");
    // The change log and /metrics are the admin's.
    for path in ["/metrics", "/v1/shards/0/changes"] {
        let denied = http
            .get(format!("{}{path}", worker.url))
            .bearer_auth("write-secret-0123456789abcdef")
            .send()
            .await
            .unwrap();
        assert_eq!(denied.status().as_u16(), 403, "{path}");
    }
    let metrics = http
        .get(format!("{}/metrics", worker.url))
        .bearer_auth("admin-secret-0123456789abcdef")
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    for name in [
        "mezzanine_worker_requests_total",
        "mezzanine_worker_rejected_total{reason=\"unauthorized\"} 2",
        "mezzanine_worker_rejected_total{reason=\"forbidden\"}",
        "mezzanine_worker_cells_total{outcome=\"written\"} 1",
        "mezzanine_outbox_depth",
        "mezzanine_mode{mode=\"schemaless\"} 1",
    ] {
        assert!(metrics.contains(name), "{name} missing from:\n{metrics}");
    }
    // Open endpoints need no token.
    for path in ["/healthz", "/readyz", "/openapi.json"] {
        let r = http
            .get(format!("{}{path}", worker.url))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status().as_u16(), 200, "{path}");
    }
    // No secret reaches the log.
    worker.signal(Signal::SIGTERM);
    let mut worker = worker;
    let status = worker.child.wait().unwrap();
    assert!(status.success(), "{status}");
    std::thread::sleep(Duration::from_millis(100));
    let log = worker.stderr.lock().unwrap().clone();
    for (_, secret) in secrets() {
        assert!(!log.contains(secret), "a secret in the log: {log}");
    }
    facade.close().await;
}

#[test]
fn a_worker_without_tokens_needs_the_flag_and_then_loopback() {
    let file = config_file(
        "[instance]\nname = \"w\"\nshard_count = 8\n[[cluster]]\nname = \"a\"\nmaster = \"mysql://root@127.0.0.1:1\"\nshards = \"0-7\"\n[legacy]\nurl = \"postgres://postgres@127.0.0.1:1/x\"\n",
    );
    let out = mezzanine(file.path(), &["worker"]).output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("--insecure-no-auth"), "{err}");
    let out = mezzanine(
        file.path(),
        &["worker", "--insecure-no-auth", "--listen", "0.0.0.0:0"],
    )
    .output()
    .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("loopback"), "{err}");
    // A token whose secret is not in the environment is named.
    let with_token = format!(
        "{}\n[[worker.tokens]]\nname = \"app\"\nscope = \"write\"\nsecret_env = \"MZ_TEST_UNSET_SECRET\"\n",
        std::fs::read_to_string(file.path()).unwrap()
    );
    let file = config_file(&with_token);
    let out = mezzanine(file.path(), &["worker"])
        .env_remove("MZ_TEST_UNSET_SECRET")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("MZ_TEST_UNSET_SECRET"), "{err}");
}

/// Sends a request's headers, saying a body follows, and not the body:
/// the request holds its in-flight permit until the body comes.
fn hanging_put(addr: SocketAddr, body: &str) -> std::net::TcpStream {
    let mut stream = std::net::TcpStream::connect(addr).unwrap();
    write!(
        stream,
        "POST /v1/cells HTTP/1.1\r\nHost: {addr}\r\nAuthorization: Bearer write-secret-0123456789abcdef\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n",
        body.len()
    )
    .unwrap();
    stream.flush().unwrap();
    stream
}

/// Whether the worker has answered (or closed) `stream` already.
fn answered(stream: &std::net::TcpStream) -> bool {
    stream.set_nonblocking(true).unwrap();
    let mut byte = [0u8; 1];
    let answered = match stream.peek(&mut byte) {
        Ok(_) => true,
        Err(e) => e.kind() != std::io::ErrorKind::WouldBlock,
    };
    stream.set_nonblocking(false).unwrap();
    answered
}

fn finish(mut stream: std::net::TcpStream, body: &str) -> String {
    stream.write_all(body.as_bytes()).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(20)))
        .unwrap();
    let mut answer = Vec::new();
    let mut buf = [0u8; 4096];
    while let Ok(n) = stream.read(&mut buf) {
        if n == 0 {
            break;
        }
        answer.extend_from_slice(&buf[..n]);
        if String::from_utf8_lossy(&answer).contains("\"results\"") {
            break;
        }
    }
    String::from_utf8_lossy(&answer).into_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_saturated_worker_sheds_with_retry_after_recovers_and_drains_on_sigterm() {
    let db = LegacyDb::trips().await;
    db.apply_schemaless().await;
    let facade = TripStore::connect(&db.config).await.unwrap();
    forced(&facade, Mode::Schemaless).await;
    let file = config_file(&format!(
        "{}\n[worker]\nmax_in_flight = 1\nrequest_timeout_ms = 30000\nheader_read_timeout_ms = 500\n{}",
        db.config_text, TOKENS
    ));
    let worker = WorkerProcess::start(file.path(), &[]);
    let http = http_client();
    let row = schemaless::RowKey::random().to_string();
    let body = put_body(&row, "NOTES", 7).to_string();
    let read = || {
        http.get(format!("{}/v1/rows/{row}", worker.url))
            .bearer_auth("read-secret-0123456789abcdef")
            .send()
    };
    // A client that trickles its headers (slowloris) is cut off after
    // worker.header_read_timeout_ms, holding nothing.
    let mut slow = std::net::TcpStream::connect(worker.addr).unwrap();
    write!(slow, "GET /healthz HTTP/1.1\r\nHost: x\r\nX-Slow: ").unwrap();
    slow.set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    let started = std::time::Instant::now();
    let mut rest = Vec::new();
    let closed = slow.read_to_end(&mut rest);
    assert!(
        closed.is_ok() && started.elapsed() < Duration::from_secs(5),
        "the connection was not closed: {closed:?} after {:?}",
        started.elapsed()
    );

    // One request holds the only permit: the next is shed at once.
    let mut hanging = hanging_put(worker.addr, &body);
    let mut shed = None;
    let mut seen = Vec::new();
    let mut resent = 0;
    for _ in 0..100 {
        let r = read().await.unwrap();
        if r.status().as_u16() == 503 {
            shed = Some(r);
            break;
        }
        seen.push(r.status().as_u16());
        // The worker serves connections on tasks in no fixed order: a
        // read may take the permit first, and the put is shed instead.
        // Then the put is sent again, until it is the one holding.
        if answered(&hanging) {
            hanging = hanging_put(worker.addr, &body);
            resent += 1;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let shed = shed.unwrap_or_else(|| {
        let stderr = worker.stderr.lock().unwrap().clone();
        panic!("a saturated worker answers 503; got {seen:?} (the held put sent again {resent} times); worker: {stderr}")
    });
    assert_eq!(shed.headers()["retry-after"], "1");
    let error: Value = shed.json().await.unwrap();
    assert_eq!(error["code"], "saturated");
    // The held request completes, and the worker recovers.
    let answer = finish(hanging, &body);
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    assert!(answer.contains("written"), "{answer}");
    assert_eq!(read().await.unwrap().status().as_u16(), 200);

    // SIGTERM while a request is in flight: it still gets its answer,
    // then the worker exits cleanly and takes no new connections.
    let row = schemaless::RowKey::random().to_string();
    let body = put_body(&row, "NOTES", 8).to_string();
    let hanging = hanging_put(worker.addr, &body);
    tokio::time::sleep(Duration::from_millis(300)).await;
    worker.signal(Signal::SIGTERM);
    tokio::time::sleep(Duration::from_millis(300)).await;
    let answer = finish(hanging, &body);
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    let mut worker = worker;
    let status = worker.child.wait().unwrap();
    assert!(status.success(), "{status}");
    assert!(std::net::TcpStream::connect(worker.addr).is_err());
    let stored = facade
        .get_cell_latest(
            &schemaless::RowKey::parse(&row).unwrap(),
            &Column::new("NOTES").unwrap(),
            ReadFrom::Master,
        )
        .await
        .unwrap();
    assert!(stored.is_some(), "the drained write is stored");
    facade.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_input_gets_a_json_4xx_writes_nothing_and_the_worker_keeps_serving() {
    let db = LegacyDb::trips().await;
    db.apply_schemaless().await;
    let text = db.config_text.replacen(
        "[legacy]",
        "[limits]\nmax_body_bytes = 1024\nmax_batch_cells = 5\n\n[legacy]",
        1,
    );
    let config = config::Config::parse(&text, "limits.toml").unwrap();
    let facade = Arc::new(TripStore::connect(&config).await.unwrap());
    crate::mirror::walk_to(&facade, &config, Mode::Primary).await;
    let before = crate::mirror::all_schemaless_cells(facade.schemaless())
        .await
        .len();
    let trips_before = db.count("SELECT count(*) FROM trips").await;
    let (served, shutdown) = worker_in_process(facade.clone(), &config).await;
    let url = served.url();
    let http = http_client();
    let row = schemaless::RowKey::random().to_string();
    let cell = |row: &str, column: &str, ref_key: Value, body: Value| json!({"row_key": row, "column": column, "ref_key": ref_key, "body": body});
    let base = json!({"status": "requested"});
    let cases: Vec<(&str, reqwest::RequestBuilder, u16)> = vec![
        (
            "malformed JSON",
            http.post(format!("{url}/v1/cells"))
                .header("content-type", "application/json")
                .body("{\"cells\": [}"),
            400,
        ),
        (
            "a row key that is not a UUID",
            http.post(format!("{url}/v1/cells"))
                .json(&json!({"cells": [cell("trip-1", "BASE", json!(1), base.clone())]})),
            400,
        ),
        (
            "a negative ref key",
            http.post(format!("{url}/v1/cells"))
                .json(&json!({"cells": [cell(&row, "BASE", json!(-1), base.clone())]})),
            400,
        ),
        (
            "a ref key past i64",
            http.post(format!("{url}/v1/cells")).json(
                &json!({"cells": [cell(&row, "BASE", json!(18446744073709551616u128 as f64), base.clone())]}),
            ),
            400,
        ),
        (
            "an unknown column in primary",
            http.post(format!("{url}/v1/cells"))
                .json(&json!({"cells": [cell(&row, "NO_SUCH_COLUMN", json!(1), base.clone())]})),
            400,
        ),
        (
            "a body that is not an object",
            http.post(format!("{url}/v1/cells"))
                .json(&json!({"cells": [cell(&row, "BASE", json!(1), json!([1, 2]))]})),
            400,
        ),
        (
            "a body over limits.max_body_bytes",
            http.post(format!("{url}/v1/cells")).json(
                &json!({"cells": [cell(&row, "BASE", json!(1), json!({"notes": "x".repeat(2000)}))]}),
            ),
            413,
        ),
        (
            "a batch over limits.max_batch_cells",
            http.post(format!("{url}/v1/cells")).json(&json!({"cells": (1..=6)
                .map(|r| cell(&row, "BASE", json!(r), base.clone()))
                .collect::<Vec<_>>()})),
            413,
        ),
        (
            "a request without a body",
            http.post(format!("{url}/v1/cells"))
                .header("content-type", "application/json"),
            400,
        ),
        (
            "no content type",
            http.post(format!("{url}/v1/cells")).body("{\"cells\": []}"),
            415,
        ),
        (
            "an unknown field",
            http.post(format!("{url}/v1/cells"))
                .json(&json!({"cells": [], "extra": 1})),
            400,
        ),
        (
            "a row key in the path that is not a UUID",
            http.get(format!("{url}/v1/rows/not-a-uuid")),
            400,
        ),
        (
            "a ref key in the path that is not a number",
            http.get(format!("{url}/v1/rows/{row}/columns/BASE/refs/abc")),
            400,
        ),
        (
            "a negative ref key in the path",
            http.get(format!("{url}/v1/rows/{row}/columns/BASE/refs/-3")),
            400,
        ),
        (
            "a bad column name",
            http.get(format!("{url}/v1/rows/{row}/columns/no%20such/latest")),
            400,
        ),
        (
            "an unknown read source",
            http.get(format!("{url}/v1/rows/{row}?from=elsewhere")),
            400,
        ),
        (
            "a shard that does not exist",
            http.get(format!("{url}/v1/shards/99999/changes")),
            404,
        ),
        (
            "a row key in a form other than the canonical one",
            http.get(format!("{url}/v1/rows/{}", row.replace('-', ""))),
            400,
        ),
        (
            "a negative change-log position",
            http.get(format!("{url}/v1/shards/0/changes?after=-1")),
            400,
        ),
        (
            "a change-log limit of 0",
            http.get(format!("{url}/v1/shards/0/changes?limit=0")),
            400,
        ),
        (
            "an index that does not exist",
            http.post(format!("{url}/v1/indexes/nope/query"))
                .json(&json!({"shard_value": "x"})),
            404,
        ),
        (
            "an enormous header",
            http.get(format!("{url}/v1/info"))
                .header("x-padding", "p".repeat(32 * 1024)),
            431,
        ),
        ("an unknown path", http.get(format!("{url}/v2/cells")), 404),
        (
            "a wrong method",
            http.delete(format!("{url}/v1/cells")),
            405,
        ),
    ];
    for (what, request, status) in cases {
        let response = request.send().await.unwrap();
        assert_eq!(response.status().as_u16(), status, "{what}");
        let body: Value = response
            .json()
            .await
            .unwrap_or_else(|e| panic!("{what}: the error is not JSON: {e}"));
        assert!(
            body["code"].is_string() && body["message"].is_string(),
            "{what}: {body}"
        );
    }
    // hyper's own limit, past the worker's: still a 4xx, still serving.
    let huge = http
        .get(format!("{url}/v1/info"))
        .header("x-padding", "p".repeat(1024 * 1024))
        .send()
        .await;
    if let Ok(r) = huge {
        assert_eq!(r.status().as_u16(), 431);
    }
    assert_eq!(
        crate::mirror::all_schemaless_cells(facade.schemaless())
            .await
            .len(),
        before,
        "nothing was written"
    );
    assert_eq!(db.count("SELECT count(*) FROM trips").await, trips_before);
    let alive = http.get(format!("{url}/healthz")).send().await.unwrap();
    assert_eq!(alive.status().as_u16(), 200);
    let info: Value = http
        .get(format!("{url}/v1/info"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(info["mode"], "primary");
    assert_eq!(
        info["idle_timeout_ms"], config.worker.header_read_timeout_ms,
        "{info}"
    );
    shutdown.cancel();
    served.done.await.unwrap();
    facade.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_killed_under_load_fails_no_request_and_loses_no_write() {
    let db = LegacyDb::trips().await;
    db.apply_schemaless().await;
    let facade = TripStore::connect(&db.config).await.unwrap();
    forced(&facade, Mode::Schemaless).await;
    let file = config_file(&format!("{}\n{TOKENS}", db.config_text));
    let doomed = WorkerProcess::start(file.path(), &[]);
    let survivor = WorkerProcess::start(file.path(), &[]);
    let store = client_of(
        &[doomed.url.clone(), survivor.url.clone()],
        Some("write-secret-0123456789abcdef"),
    )
    .await;
    let acknowledged = Arc::new(std::sync::Mutex::new(Vec::<Cell>::new()));
    let writers: Vec<_> = (0..4)
        .map(|w| {
            let (store, acknowledged) = (store.clone(), acknowledged.clone());
            tokio::spawn(async move {
                let mut source = legacy::trips::TripCells::new(100 + w);
                for _ in 0..60 {
                    let trip = source.new_trip();
                    let results = store
                        .put_cells(trip.clone())
                        .await
                        .expect("no request fails: it is retried on the other worker");
                    assert!(results.iter().all(|r| r.is_ok()), "{results:?}");
                    acknowledged.lock().unwrap().extend(trip);
                }
            })
        })
        .collect();
    // Kill one worker once the load is going.
    while acknowledged.lock().unwrap().len() < 40 {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    doomed.signal(Signal::SIGKILL);
    let at_kill = acknowledged.lock().unwrap().len();
    for writer in writers {
        writer.await.unwrap();
    }
    let acknowledged = acknowledged.lock().unwrap().clone();
    assert!(
        acknowledged.len() > at_kill,
        "the load went on after the kill ({at_kill} cells before it)"
    );
    for cell in &acknowledged {
        let stored = facade
            .get_cell(&cell.key, ReadFrom::Master)
            .await
            .unwrap()
            .unwrap_or_else(|| panic!("acknowledged cell {} is missing", cell.key));
        assert_eq!(stored.cell.body, cell.body);
    }
    // And every read through the survivor agrees.
    for cell in acknowledged.iter().take(50) {
        let read = store
            .get_cell(&cell.key, ReadFrom::Master)
            .await
            .unwrap()
            .unwrap();
        assert_eq!(read.cell.body, cell.body);
    }
    drop(survivor);
    facade.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_with_a_certificate_serves_https_only() {
    let db = LegacyDb::trips().await;
    db.apply_schemaless().await;
    let facade = Arc::new(TripStore::connect(&db.config).await.unwrap());
    let (ca, cert, key) = crate::tls::certificates();
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("worker.crt"), &cert).unwrap();
    std::fs::write(dir.path().join("worker.key"), &key).unwrap();
    let mut config = db.config.clone();
    config.worker.tls_cert = Some(dir.path().join("worker.crt"));
    config.worker.tls_key = Some(dir.path().join("worker.key"));
    let (served, shutdown) = worker_in_process(facade.clone(), &config).await;
    assert!(served.url().starts_with("https://"));
    let store = client::Client::builder()
        .worker(&served.url())
        .unwrap()
        .root_certificate_pem(ca.as_bytes())
        .connect()
        .await
        .expect("the client trusts the CA");
    let cell = legacy::trips::TripCells::new(5).new_trip().remove(0);
    store.put_cell(cell.clone()).await.unwrap();
    let read = store
        .get_cell(&cell.key, ReadFrom::Master)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(read.cell.body, cell.body);
    // Plain HTTP to the TLS port gets no answer; a client that does not
    // trust the CA refuses the worker.
    let plain = http_client()
        .get(format!("http://{}/healthz", served.addr))
        .timeout(Duration::from_secs(5))
        .send()
        .await;
    assert!(plain.is_err(), "{plain:?}");
    let untrusting = client::Client::builder()
        .worker(&served.url())
        .unwrap()
        .deadline(Duration::from_secs(2))
        .connect()
        .await;
    assert!(untrusting.is_err());
    shutdown.cancel();
    served.done.await.unwrap();
    facade.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_cell_commands_read_and_write_through_the_facade() {
    let db = LegacyDb::trips().await;
    db.apply_schemaless().await;
    // In legacy mode, through the layout: the index is answered by
    // PostgreSQL at once.
    let file = config_file(&db.config_text);
    let row = schemaless::RowKey::random().to_string();
    let driver = schemaless::RowKey::random().to_string();
    let body = json!({"driver_uuid": driver, "rider_uuid": "00000000-0000-4000-8000-000000000002",
        "city_id": 7, "status": "requested", "currency": "EUR",
        "requested_at": "2024-05-01T10:00:00.000000Z"})
    .to_string();
    let run = |args: &[&str]| {
        let out = mezzanine(file.path(), args).output().unwrap();
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    let (code, out, err) = run(&["cell", "put", &row, "BASE", "1", "--body", &body, "--json"]);
    assert_eq!(code, Some(0), "{err}");
    assert_eq!(
        serde_json::from_str::<Value>(&out).unwrap()["results"][0]["outcome"],
        "written"
    );
    let (_, out, _) = run(&["cell", "put", &row, "BASE", "1", "--body", &body]);
    assert!(out.contains("already_present"), "{out}");
    let other = body.replace("requested\"", "completed\"");
    let (code, _, err) = run(&["cell", "put", &row, "BASE", "1", "--body", &other]);
    assert_eq!(code, Some(1));
    assert!(err.contains("different body"), "{err}");
    let (code, out, _) = run(&["cell", "get", &row, "BASE", "--json"]);
    assert_eq!(code, Some(0));
    let got: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(got["cell"]["body"]["city_id"], 7);
    assert_eq!(got["stale"], false);
    let (_, out, _) = run(&["cell", "get", &row, "BASE", "2"]);
    assert!(out.contains("no such cell"), "{out}");
    let (_, out, _) = run(&["cell", "row", &row, "--json"]);
    assert_eq!(
        serde_json::from_str::<Value>(&out).unwrap()["cells"]
            .as_array()
            .unwrap()
            .len(),
        1
    );
    // The index is maintained asynchronously: wait for the entry.
    let mut entries = Value::Null;
    for _ in 0..100 {
        let (code, out, err) = run(&[
            "cell",
            "index",
            "trips_by_driver",
            &driver,
            "--filter",
            "city_id>=7",
            "--json",
        ]);
        assert_eq!(code, Some(0), "{err}");
        entries = serde_json::from_str::<Value>(&out).unwrap()["entries"].clone();
        if entries.as_array().is_some_and(|e| !e.is_empty()) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(entries[0]["row_key"], row.as_str(), "{entries}");
    // Bad input: a usage error, nothing connects or changes.
    for args in [
        vec!["cell", "get", "not-a-uuid", "BASE"],
        vec!["cell", "put", &row, "BASE", "-1", "--body", "{}"],
        vec!["cell", "put", &row, "BASE", "3", "--body", "[1]"],
        vec![
            "cell",
            "index",
            "trips_by_driver",
            "x",
            "--filter",
            "nonsense",
        ],
    ] {
        let (code, _, err) = run(&args);
        assert_eq!(code, Some(2), "{args:?}: {err}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_stale_answer_says_so_and_readiness_follows_the_stores_the_mode_uses() {
    use devcluster::{DevCluster, Spec};
    let cluster = DevCluster::private(Spec::free_ports(&["a"], 1).unwrap())
        .await
        .unwrap();
    let (config, _pool) = crate::harness::private_trips(
        &cluster,
        "wstale",
        "[storage]\nrequest_timeout_ms = 400\nconnect_timeout_ms = 400\nbreaker_failures = 2\nbreaker_open_ms = 300\n",
    )
    .await;
    cluster
        .wait_all_caught_up(Duration::from_secs(30))
        .await
        .unwrap();
    let facade = Arc::new(TripStore::connect(&config).await.unwrap());
    forced(&facade, Mode::Schemaless).await;
    let cell = legacy::trips::TripCells::new(77).new_trip().remove(0);
    facade.put_cell(cell.clone()).await.unwrap();
    cluster
        .wait_all_caught_up(Duration::from_secs(30))
        .await
        .unwrap();
    let (served, shutdown) = worker_in_process(facade.clone(), &config).await;
    let url = served.url();
    let http = http_client();
    let ready = || async {
        let r = http.get(format!("{url}/readyz")).send().await.unwrap();
        let status = r.status().as_u16();
        (status, r.json::<Value>().await.unwrap())
    };
    let (status, body) = ready().await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["mode"], "schemaless");
    assert_eq!(body["checks"][0]["store"], "schemaless:a", "{body}");

    // PostgreSQL is not a store of mode schemaless: still ready.
    cluster.pause("postgres").unwrap();
    let (status, body) = ready().await;
    cluster.resume("postgres").unwrap();
    assert_eq!(status, 200, "{body}");
    assert!(
        body["checks"]
            .as_array()
            .unwrap()
            .iter()
            .all(|c| c["store"] != "legacy"),
        "{body}"
    );

    // The master down: master reads are answered by the minion, and say
    // so in the body and a header; readiness says the cluster is degraded.
    cluster.pause("a-master").unwrap();
    let latest = format!(
        "{url}/v1/rows/{}/columns/{}/latest",
        cell.key.row_key, cell.key.column
    );
    let mut stale = None;
    for _ in 0..50 {
        let r = http.get(&latest).send().await.unwrap();
        if r.status().as_u16() == 200
            && r.headers()
                .get("mezzanine-stale")
                .is_some_and(|v| v == "true")
        {
            stale = Some(r.json::<Value>().await.unwrap());
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let stale = stale.expect("a stale answer while the master is down");
    assert_eq!(stale["stale"], true);
    assert_eq!(stale["cell"]["body"], cell.body.to_value());
    let (status, body) = ready().await;
    assert_eq!(status, 200, "{body}");
    assert!(
        body["checks"][0]["detail"]
            .as_str()
            .is_some_and(|d| d.contains("minion")),
        "{body}"
    );
    // No node of the cluster answers: not ready.
    cluster.pause("a-minion1").unwrap();
    let (status, body) = ready().await;
    cluster.resume("a-minion1").unwrap();
    cluster.resume("a-master").unwrap();
    assert_eq!(status, 503, "{body}");
    assert_eq!(body["ready"], false);
    shutdown.cancel();
    served.done.await.unwrap();
    facade.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tombstone_posted_over_http_deletes_the_row_and_a_bad_one_is_a_400() {
    // `legacy` mode: the facade deletes the PostgreSQL rows in the write's
    // transaction (docs/migration.md, "Deletes through the facade").
    let db = LegacyDb::trips().await;
    db.apply_schemaless().await;
    let facade = TripStore::connect(&db.config).await.unwrap();
    let file = config_file(&format!("{}\n{TOKENS}", db.config_text));
    let worker = WorkerProcess::start(file.path(), &[]);
    let http = http_client();
    let row = schemaless::RowKey::random();
    let trip = json!({"driver_uuid": "6f1c1a0e-8a3b-4a55-9d1e-3c2b1a0f9e8d",
        "rider_uuid": "7f1c1a0e-8a3b-4a55-9d1e-3c2b1a0f9e8d", "city_id": 3,
        "status": "requested", "currency": "USD",
        "requested_at": "2015-03-08T07:30:00Z"});
    let note = json!({"author": "ops", "text": "x", "at": "2015-03-08T07:31:00Z"});
    let post = |cells: Value| {
        http.post(format!("{}/v1/cells", worker.url))
            .header("authorization", "Bearer write-secret-0123456789abcdef")
            .json(&json!({ "cells": cells }))
            .send()
    };
    let cell = |column: &str, ref_key: i64, body: &Value| json!({"row_key": row.to_string(), "column": column, "ref_key": ref_key, "body": body});
    let r = post(json!([cell("BASE", 1, &trip), cell("NOTES", 1, &note)]))
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 200, "{}", r.text().await.unwrap());
    let in_postgresql = format!(
        "SELECT (SELECT count(*) FROM trips WHERE uuid = '{row}') + \
         (SELECT count(*) FROM trip_notes n JOIN trips t ON t.id = n.trip_id WHERE t.uuid = '{row}')"
    );
    assert_eq!(db.count(&in_postgresql).await, 2);

    // One version of the row column cannot be deleted in PostgreSQL: 400
    // naming the field, nothing deleted.
    let base = schemaless::Column::new("BASE").unwrap();
    let at = schemaless::tombstone::cell_ref_key(&base, 1).get();
    let version = cell("DELETED", at, &json!({"column": "BASE", "ref_key": 1}));
    let r = post(json!([version])).await.unwrap();
    assert_eq!(r.status().as_u16(), 400);
    let body: Value = r.json().await.unwrap();
    assert_eq!(body["code"], "invalid_input", "{body}");
    assert!(
        body["message"].as_str().unwrap().contains("body.column"),
        "{body}"
    );
    assert_eq!(db.count(&in_postgresql).await, 2);

    // The row's tombstone: the row and its note are gone.
    let r = post(json!([cell("DELETED", 0, &json!({"row": true}))]))
        .await
        .unwrap();
    let body: Value = r.json().await.unwrap();
    assert_eq!(body["results"][0]["outcome"], "written", "{body}");
    assert_eq!(db.count(&in_postgresql).await, 0);
    facade.close().await;
}
