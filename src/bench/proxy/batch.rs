//! Pipelined batches of `bench proxy` (`batch_per_row_ratio`): in
//! `primary`, `--batch-rows` single-row INSERTs of new parent rows sent
//! as one batch, as psycopg's and asyncpg's `executemany` and JDBC's
//! `executeBatch` send it (a `Parse`, a `Bind` and an `Execute` per row,
//! one `Sync`: one implicit transaction), straight to PostgreSQL and
//! through the proxy, which runs the whole batch through the facade.
//!
//! The INSERT is built from the layout: the row key, every field of the
//! parent's row columns (but those PostgreSQL computes: generated,
//! identity `ALWAYS`) and their ref keys, valued as a seeded row has them
//! (PostgreSQL's text of each, as literals), so a direct INSERT and a
//! translated one write the same row under a fresh key.
//!
//! The batches go over a raw connection (sqlx sends a `Sync` per
//! statement, so it cannot send a batch), which speaks only the trust
//! authentication of the dev cluster the benchmark runs on.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use super::super::cpu::CpuMeter;
use super::ProxyArgs;

/// What the batches measured.
pub(super) struct Batches {
    /// The median batch, straight to PostgreSQL and through the proxy.
    pub(super) direct: Duration,
    pub(super) proxied: Duration,
    pub(super) rows: usize,
    /// Batches per path.
    pub(super) count: usize,
    /// CPU per row of the proxied batches, by process group.
    pub(super) proxied_cpu: Option<serde_json::Value>,
}

impl Batches {
    pub(super) fn direct_us_per_row(&self) -> f64 {
        self.direct.as_secs_f64() * 1e6 / self.rows as f64
    }

    pub(super) fn proxied_us_per_row(&self) -> f64 {
        self.proxied.as_secs_f64() * 1e6 / self.rows as f64
    }
}

/// The INSERT of one parent row under `$1`, valued as a row of the
/// parent table is in PostgreSQL.
pub(super) async fn insert_like(
    legacy: &legacy::LegacyStore,
    pool: &sqlx::PgPool,
) -> anyhow::Result<String> {
    let layout = legacy.layout();
    // Columns PostgreSQL computes itself take no value in an INSERT.
    let computed: Vec<String> = sqlx::query_scalar(
        "SELECT attname::text FROM pg_attribute WHERE attrelid = $1::regclass \
         AND attnum > 0 AND (attgenerated <> '' OR attidentity = 'a')",
    )
    .bind(layout.table_sql())
    .fetch_all(pool)
    .await?;
    let mut columns: Vec<String> = Vec::new();
    for column in &layout.columns {
        if column.kind() != config::ColumnKind::Row {
            continue;
        }
        let names = column
            .fields
            .iter()
            .filter(|f| !computed.contains(&f.sql))
            .map(|f| format!("\"{}\"", f.sql.replace('"', "\"\"")))
            .chain(std::iter::once(column.ref_key_sql().to_string()));
        for name in names {
            if !columns.contains(&name) {
                columns.push(name);
            }
        }
    }
    let read: Vec<String> = columns.iter().map(|c| format!("({c})::text")).collect();
    let row = sqlx::query(sqlx::AssertSqlSafe(format!(
        "SELECT {} FROM {} LIMIT 1",
        read.join(", "),
        layout.table_sql(),
    )))
    .fetch_one(pool)
    .await?;
    let mut values = vec!["$1".to_string()];
    for i in 0..columns.len() {
        let value: Option<String> = sqlx::Row::try_get(&row, i)?;
        values.push(match value {
            Some(text) => format!("'{}'", text.replace('\'', "''")),
            None => "NULL".into(),
        });
    }
    Ok(format!(
        "INSERT INTO {} ({}, {}) VALUES ({})",
        layout.table_sql(),
        layout.uuid_sql(),
        columns.join(", "),
        values.join(", ")
    ))
}

/// `args.batches` batches of `args.batch_rows` INSERTs (`sql`, its `$1` a
/// fresh key each) per path, in rounds direct, proxy, proxy, direct; the
/// CPU of the proxied rounds measured by `meter`.
pub(super) fn batch_rounds(
    args: &ProxyArgs,
    [direct_url, proxied_url]: [&str; 2],
    sql: &str,
    meter: Option<&CpuMeter>,
) -> anyhow::Result<Batches> {
    let rows = args.batch_rows;
    let per_round = args.batches.div_ceil(2).max(1);
    let mut times: [Vec<Duration>; 2] = Default::default();
    let mut connections = [connect(direct_url)?, connect(proxied_url)?];
    // Warm both paths: plans, pools, the proxy's catalog.
    for connection in &mut connections {
        batch(connection, sql, 10)?;
    }
    let mut proxied_started = None;
    let mut proxied_cpu = None;
    for (i, path) in [0usize, 1, 1, 0].into_iter().enumerate() {
        eprintln!(
            "pipelined batches of {rows} INSERTs, round {}/4: {} ...",
            i + 1,
            ["direct", "through the proxy and the facade"][path]
        );
        if i == 1 {
            proxied_started = meter.map(CpuMeter::sample);
        }
        for _ in 0..per_round {
            times[path].push(batch(&mut connections[path], sql, rows)?);
        }
        if let (2, Some(meter), Some(started)) = (i, meter, &proxied_started) {
            let units = (rows * per_round * 2) as u64;
            proxied_cpu = Some(meter.sample().since(started).per_unit_json(units));
        }
    }
    let [direct, proxied] = times.map(|mut t| {
        t.sort();
        t[t.len() / 2]
    });
    Ok(Batches {
        direct,
        proxied,
        rows,
        count: per_round * 2,
        proxied_cpu,
    })
}

/// A raw session on `url` (trust authentication), ready for queries.
fn connect(url: &str) -> anyhow::Result<TcpStream> {
    let url = url::Url::parse(url)?;
    let host = url.host_str().unwrap_or("127.0.0.1");
    let port = url.port().unwrap_or(5432);
    let user = match url.username() {
        "" => "postgres",
        user => user,
    };
    let database = url.path().trim_start_matches('/');
    let mut stream = TcpStream::connect((host, port))?;
    stream.set_nodelay(true)?;
    stream.set_read_timeout(Some(Duration::from_secs(300)))?;
    let mut body = 196608_i32.to_be_bytes().to_vec();
    for (k, v) in [("user", user), ("database", database)] {
        body.extend_from_slice(k.as_bytes());
        body.push(0);
        body.extend_from_slice(v.as_bytes());
        body.push(0);
    }
    body.push(0);
    let mut startup = ((body.len() + 4) as i32).to_be_bytes().to_vec();
    startup.extend(body);
    stream.write_all(&startup)?;
    for (kind, body) in until_ready(&mut stream)? {
        if kind == b'R' && body.get(..4) != Some(&[0, 0, 0, 0]) {
            anyhow::bail!(
                "{host}:{port} asks for a password: the pipelined batches of bench proxy \
                 speak only trust authentication (the dev cluster's)"
            );
        }
    }
    Ok(stream)
}

/// One batch of `rows` INSERTs on `stream`, timed from the first byte
/// sent to `ReadyForQuery`; an error in the answer fails it.
fn batch(stream: &mut TcpStream, sql: &str, rows: usize) -> anyhow::Result<Duration> {
    let mut flight = Vec::with_capacity(rows * 48 + sql.len() + 32);
    let mut parse = cstr("");
    parse.extend(cstr(sql));
    parse.extend_from_slice(&1i16.to_be_bytes());
    parse.extend_from_slice(&2950u32.to_be_bytes()); // uuid
    message(&mut flight, b'P', &parse);
    for _ in 0..rows {
        let key = uuid::Uuid::new_v4();
        let mut bind = cstr("");
        bind.extend(cstr(""));
        bind.extend_from_slice(&1i16.to_be_bytes());
        bind.extend_from_slice(&1i16.to_be_bytes()); // binary
        bind.extend_from_slice(&1i16.to_be_bytes());
        bind.extend_from_slice(&16i32.to_be_bytes());
        bind.extend_from_slice(key.as_bytes());
        bind.extend_from_slice(&0i16.to_be_bytes());
        message(&mut flight, b'B', &bind);
        let mut execute = cstr("");
        execute.extend_from_slice(&0i32.to_be_bytes());
        message(&mut flight, b'E', &execute);
    }
    message(&mut flight, b'S', &[]);
    let started = Instant::now();
    stream.write_all(&flight)?;
    let answer = until_ready(stream)?;
    let took = started.elapsed();
    let completed = answer.iter().filter(|(kind, _)| *kind == b'C').count();
    anyhow::ensure!(
        completed == rows,
        "a batch of {rows} INSERTs completed {completed}"
    );
    Ok(took)
}

/// Messages up to `ReadyForQuery`; an `ErrorResponse` fails with its text.
fn until_ready(stream: &mut TcpStream) -> anyhow::Result<Vec<(u8, Vec<u8>)>> {
    let mut messages = Vec::new();
    loop {
        let mut header = [0u8; 5];
        stream.read_exact(&mut header)?;
        let len = u32::from_be_bytes([header[1], header[2], header[3], header[4]]) as usize;
        let mut body = vec![0u8; len.saturating_sub(4)];
        stream.read_exact(&mut body)?;
        if header[0] == b'E' {
            let fields: Vec<String> = body
                .split(|b| *b == 0)
                .filter(|f| matches!(f.first(), Some(b'C' | b'M')))
                .map(|f| String::from_utf8_lossy(&f[1..]).into_owned())
                .collect();
            anyhow::bail!("the batch failed: {}", fields.join(" "));
        }
        let ready = header[0] == b'Z';
        messages.push((header[0], body));
        if ready {
            return Ok(messages);
        }
    }
}

fn cstr(s: &str) -> Vec<u8> {
    let mut out = s.as_bytes().to_vec();
    out.push(0);
    out
}

fn message(out: &mut Vec<u8>, kind: u8, body: &[u8]) {
    out.push(kind);
    out.extend_from_slice(&((body.len() + 4) as i32).to_be_bytes());
    out.extend_from_slice(body);
}
