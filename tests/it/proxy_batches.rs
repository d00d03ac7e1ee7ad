//! Pipelined batches of writes through `mezzanine proxy` in `primary`:
//! statements an app sends with one `Sync` (JDBC's `executeBatch`,
//! psycopg's and asyncpg's `executemany`, a psycopg pipeline), which
//! PostgreSQL runs in one implicit transaction, answered message for
//! message as PostgreSQL answers them on the raw protocol, and written
//! whole or not at all.

use crate::proxy::{psql, ProxyProcess};
use crate::proxy_writes::{latest, primary, trip, INSERT_TRIP};

/// A `Parse` of `sql` under `name`, its one parameter a uuid.
pub(crate) fn parse_uuid(name: &str, sql: &str) -> Vec<u8> {
    parse_typed(name, sql, &[2950])
}

/// A `Parse` of `sql` under `name`, its parameters declared `types`.
pub(crate) fn parse_typed(name: &str, sql: &str, types: &[u32]) -> Vec<u8> {
    use crate::proxy_modes::{cstr, message};
    let mut parse = [cstr(name), cstr(sql)].concat();
    parse.extend_from_slice(&(types.len() as i16).to_be_bytes());
    for t in types {
        parse.extend_from_slice(&t.to_be_bytes());
    }
    message(b'P', &parse)
}

/// A `Bind` of statement `name` to the unnamed portal with `params` as
/// text, and its `Execute`.
fn bind_text(name: &str, params: &[String]) -> Vec<u8> {
    let params: Vec<&[u8]> = params.iter().map(|p| p.as_bytes()).collect();
    bind_in(name, 0, &params)
}

/// A `Bind` of statement `name` to the unnamed portal with `k` (a binary
/// uuid), and its `Execute`.
pub(crate) fn bind_uuid(name: &str, k: uuid::Uuid) -> Vec<u8> {
    bind_in(name, 1, &[k.as_bytes()])
}

/// A `Bind` of statement `name` to the unnamed portal with `params`, all
/// in `format` (0 text, 1 binary), and its `Execute`.
pub(crate) fn bind_in(name: &str, format: i16, params: &[&[u8]]) -> Vec<u8> {
    use crate::proxy_modes::{cstr, message};
    let mut bind = [cstr(""), cstr(name)].concat();
    bind.extend_from_slice(&1i16.to_be_bytes());
    bind.extend_from_slice(&format.to_be_bytes());
    bind.extend_from_slice(&(params.len() as i16).to_be_bytes());
    for p in params {
        bind.extend_from_slice(&(p.len() as i32).to_be_bytes());
        bind.extend_from_slice(p);
    }
    bind.extend_from_slice(&0i16.to_be_bytes());
    let mut out = message(b'B', &bind);
    out.extend(message(
        b'E',
        &[cstr(""), 0i32.to_be_bytes().to_vec()].concat(),
    ));
    out
}

/// `flight` then a `Sync` sent on a raw connection: the answer's message
/// kinds, and the SQLSTATE of its error.
pub(crate) fn raw_flight(
    stream: &mut std::net::TcpStream,
    mut flight: Vec<u8>,
) -> (Vec<u8>, String) {
    use std::io::Write;
    flight.extend(crate::proxy_modes::message(b'S', &[]));
    stream.write_all(&flight).unwrap();
    kinds_and_sqlstate(&crate::proxy::messages_until_ready(stream))
}

/// A pipelined batch on a raw connection, as JDBC's `executeBatch` and
/// asyncpg's `executemany` send one: `Parse` of `sql` (one uuid
/// parameter), then `Bind` (binary) and `Execute` per key, and one `Sync`
/// at the end, so every write is in one implicit transaction. The
/// answer's message kinds, and the SQLSTATE of its error.
fn raw_batch(
    stream: &mut std::net::TcpStream,
    sql: &str,
    keys: &[uuid::Uuid],
) -> (Vec<u8>, String) {
    let mut flight = parse_uuid("", sql);
    flight.extend(keys.iter().flat_map(|k| bind_uuid("", *k)));
    raw_flight(stream, flight)
}

/// [`raw_batch`] of statements prepared first, each under its name
/// (`named`, prepared again on each call), bound in the batch in the
/// order of `binds`: the batch's answer.
fn raw_named_batch(
    stream: &mut std::net::TcpStream,
    named: &[(&str, &str)],
    binds: &[(&str, uuid::Uuid)],
) -> (Vec<u8>, String) {
    use crate::proxy_modes::{cstr, message};
    let mut prepare = Vec::new();
    for (name, sql) in named {
        prepare.extend(message(b'C', &[b"S".to_vec(), cstr(name)].concat()));
        prepare.extend(parse_uuid(name, sql));
    }
    assert_eq!(raw_flight(stream, prepare).1, "", "prepared");
    let flight = binds.iter().flat_map(|(name, k)| bind_uuid(name, *k));
    raw_flight(stream, flight.collect())
}

/// An answer's message kinds, and the SQLSTATE of its error.
fn kinds_and_sqlstate(answer: &[(u8, Vec<u8>)]) -> (Vec<u8>, String) {
    let sqlstate = answer
        .iter()
        .find(|(kind, _)| *kind == b'E')
        .map(|(_, body)| {
            let text = String::from_utf8_lossy(body);
            text.split('\0')
                .find_map(|f| f.strip_prefix('C').map(str::to_string))
                .unwrap_or_default()
        })
        .unwrap_or_default();
    (answer.iter().map(|(kind, _)| *kind).collect(), sqlstate)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pipelined_batch_of_writes_runs_whole_or_not_at_all_as_in_postgresql() {
    // PostgreSQL runs a batch sent with one Sync in one implicit
    // transaction: a row that fails rolls back the rows before it. The
    // facade evaluates and checks every write of the batch before it puts
    // a cell, so the app gets the same answers and nothing is written.
    let (db, facade, file) = primary().await;
    let proxy = ProxyProcess::start(file.path(), "127.0.0.1:0");
    let insert = INSERT_TRIP.replace("'{k}'", "$1");
    let taken = uuid::Uuid::new_v4();
    let (ok, out, err) = psql(
        &proxy.url(&db),
        &format!("\\set ON_ERROR_STOP 1\n{};\n", trip(taken)),
    );
    assert!(ok, "{out}{err}");
    sqlx::query(sqlx::AssertSqlSafe(format!(
        "{} ON CONFLICT DO NOTHING",
        trip(taken)
    )))
    .execute(&db.pool)
    .await
    .unwrap();
    let (mut own, mut through) = raw_sessions(&db, &proxy);
    let fresh = || uuid::Uuid::new_v4();
    let in_postgres = |k: uuid::Uuid| format!("SELECT count(*) FROM trips WHERE uuid = '{k}'");

    // A row that exists, after one that does not: 23505 at the second,
    // the first rolled back (directly) or never written (through).
    let (a, b) = (fresh(), fresh());
    let direct = raw_batch(&mut own, &insert, &[a, taken]);
    assert_eq!(direct, (b"12C2EZ".to_vec(), "23505".to_string()));
    assert_eq!(db.count(&in_postgres(a)).await, 0, "rolled back");
    assert_eq!(raw_batch(&mut through, &insert, &[b, taken]), direct);
    assert!(latest(&facade, b, "BASE").await.is_none(), "written");

    // One key twice in the batch: 23505 at the second, nothing written.
    let (a, b) = (fresh(), fresh());
    let direct = raw_batch(&mut own, &insert, &[a, a]);
    assert_eq!(direct, (b"12C2EZ".to_vec(), "23505".to_string()));
    assert_eq!(raw_batch(&mut through, &insert, &[b, b]), direct);
    assert!(latest(&facade, b, "BASE").await.is_none(), "written");

    // Rows that all go in: every one written, answered as PostgreSQL does.
    let direct = raw_batch(&mut own, &insert, &[fresh(), fresh(), fresh()]);
    assert_eq!(direct, (b"12C2C2CZ".to_vec(), String::new()));
    let rows = [fresh(), fresh(), fresh()];
    assert_eq!(raw_batch(&mut through, &insert, &rows), direct);
    for k in rows {
        assert!(latest(&facade, k, "BASE").await.is_some(), "not written");
    }

    // A write pipelined with a statement that is not one the facade
    // runs: refused at the write (its Execute raises the refusal),
    // nothing written, the rest skipped to the Sync.
    use crate::proxy_modes::{cstr, message};
    let k = fresh();
    let other = [cstr(""), cstr("SELECT 1"), 0i16.to_be_bytes().to_vec()].concat();
    let plain_bind = [cstr(""), cstr(""), vec![0, 0, 0, 0, 0, 0]].concat();
    let execute = message(b'E', &[cstr(""), 0i32.to_be_bytes().to_vec()].concat());
    let flight = [
        parse_uuid("", &insert),
        bind_uuid("", k),
        message(b'P', &other),
        message(b'B', &plain_bind),
        execute,
    ]
    .concat();
    let answer = raw_flight(&mut through, flight);
    assert_eq!(answer, (b"12EZ".to_vec(), "0A000".to_string()));
    assert!(latest(&facade, k, "BASE").await.is_none(), "written");

    // Writes of one row in one batch: each later one reads what the
    // earlier ones write, as in PostgreSQL (a note for a trip the batch
    // inserts, UPDATEs of it, an upsert of it), all written.
    let note = "INSERT INTO trip_notes (trip_id, seq, author, body, created_at) VALUES \
                ((SELECT id FROM trips WHERE uuid = $1), 1, 'ops', 'a note', now())";
    let bump = "UPDATE trips SET version = version + 1 WHERE uuid = $1";
    let upsert = format!(
        "{} ON CONFLICT (uuid) DO UPDATE SET status = 'upserted', version = trips.version + 1",
        insert
    );
    let named = [
        ("s_trip", insert.as_str()),
        ("s_note", note),
        ("s_bump", bump),
        ("s_upsert", upsert.as_str()),
    ];
    let (d, k) = (fresh(), fresh());
    let binds = |k| {
        [
            ("s_trip", k),
            ("s_note", k),
            ("s_bump", k),
            ("s_upsert", k),
            ("s_bump", k),
        ]
    };
    let direct = raw_named_batch(&mut own, &named, &binds(d));
    assert_eq!(direct, (b"2C2C2C2C2CZ".to_vec(), String::new()));
    assert_eq!(raw_named_batch(&mut through, &named, &binds(k)), direct);
    let base = latest(&facade, k, "BASE").await.expect("written");
    assert_eq!(base.cell.key.ref_key.get(), 4, "{base:?}");
    assert_eq!(base.cell.body.fields()["status"], "upserted");
    assert!(latest(&facade, k, "NOTES").await.is_some(), "the note");
    let row = format!("SELECT version, status FROM trips WHERE uuid = '{d}'");
    let (version, status): (i64, String) = sqlx::query_as(sqlx::AssertSqlSafe(row))
        .fetch_one(&db.pool)
        .await
        .unwrap();
    assert_eq!((version, status.as_str()), (4, "upserted"), "PostgreSQL's");
    // A note of a trip the batch inserts, inserted twice: 23505 at the
    // second (the notes' key is the trip and seq), nothing written.
    let (d, k) = (fresh(), fresh());
    let twice = |k| [("s_trip", k), ("s_note", k), ("s_note", k)];
    let direct = raw_named_batch(&mut own, &named, &twice(d));
    assert_eq!(direct, (b"2C2C2EZ".to_vec(), "23505".to_string()));
    assert_eq!(raw_named_batch(&mut through, &named, &twice(k)), direct);
    assert!(latest(&facade, k, "BASE").await.is_none(), "written");

    // A later statement that fails on its own rows (one key twice in a
    // two-row INSERT, 23505) after one that goes in: nothing written,
    // the earlier statement's cells not put either.
    let values = &insert[insert.find("VALUES ").expect("VALUES") + 7..];
    let two_rows = format!("{insert}, {values}");
    let named = [("s_trip", insert.as_str()), ("s_two", two_rows.as_str())];
    let (d, k) = ([fresh(), fresh()], [fresh(), fresh()]);
    let binds = |k: [uuid::Uuid; 2]| [("s_trip", k[0]), ("s_two", k[1])];
    let direct = raw_named_batch(&mut own, &named, &binds(d));
    assert_eq!(direct, (b"2C2EZ".to_vec(), "23505".to_string()));
    assert_eq!(raw_named_batch(&mut through, &named, &binds(k)), direct);
    none_written(&facade, &k).await;

    // A write with its own Sync runs.
    a_write_alone_runs(&mut through, &insert, &facade).await;
    facade.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batch_that_parses_each_of_its_statements_runs_whole_or_nowhere() {
    // JDBC's Statement.addBatch, a psycopg pipeline, Npgsql's batches:
    // each statement with its own Parse, one Sync at the end. The facade
    // runs the batch as one; a statement PostgreSQL would refuse to parse
    // stops it before anything is written. (No reverse mirror runs, so a
    // row in PostgreSQL would be the statement run there.)
    let (db, facade, file) = crate::proxy_writes::primary_without_reverse().await;
    let proxy = ProxyProcess::start(file.path(), "127.0.0.1:0");
    let insert = INSERT_TRIP.replace("'{k}'", "$1");
    let (mut own, mut through) = raw_sessions(&db, &proxy);
    let fresh = || uuid::Uuid::new_v4();
    let in_postgres = |k: uuid::Uuid| format!("SELECT count(*) FROM trips WHERE uuid = '{k}'");
    // Each key's own unnamed Parse (its key as text), Bind and Execute.
    let each_parsed = |keys: &[uuid::Uuid], types: &[u32]| -> Vec<u8> {
        keys.iter()
            .flat_map(|k| {
                [
                    parse_typed("", &insert, types),
                    bind_text("", &[k.to_string()]),
                ]
                .concat()
            })
            .collect()
    };

    // All go in: answered as PostgreSQL answers them, all written.
    let (d, t) = ([fresh(), fresh(), fresh()], [fresh(), fresh(), fresh()]);
    let direct = raw_flight(&mut own, each_parsed(&d, &[2950]));
    assert_eq!(direct, (b"12C12C12CZ".to_vec(), String::new()));
    assert_eq!(raw_flight(&mut through, each_parsed(&t, &[2950])), direct);
    for k in t {
        assert!(latest(&facade, k, "BASE").await.is_some(), "not written");
        assert_eq!(db.count(&in_postgres(k)).await, 0, "run on PostgreSQL");
    }

    // The second statement's Parse fails on PostgreSQL (its key declared
    // varchar, as JDBC's setString declares it): the batch is rolled back
    // there, and nothing is written through. PostgreSQL answers the first
    // statement before the error; through the proxy the error comes at
    // the first Bind (its answers are not given for a batch that fails).
    let statements = |keys: [uuid::Uuid; 3]| {
        [
            each_parsed(&keys[..1], &[2950]),
            each_parsed(&keys[1..2], &[1043]),
            each_parsed(&keys[2..], &[2950]),
        ]
        .concat()
    };
    let (d, t) = ([fresh(), fresh(), fresh()], [fresh(), fresh(), fresh()]);
    let direct = raw_flight(&mut own, statements(d));
    assert_eq!(direct, (b"12CEZ".to_vec(), "42804".to_string()));
    assert_eq!(db.count(&in_postgres(d[0])).await, 0, "rolled back");
    assert_eq!(
        raw_flight(&mut through, statements(t)),
        (b"1EZ".to_vec(), "42804".to_string())
    );
    none_written(&facade, &t).await;

    // A literal PostgreSQL refuses at its Parse (JDBC's Statement batches
    // send SQL text): 22P02, nothing written.
    let bad = trip(fresh()).replacen("'6f1c1a0e-0000-4000-8000-000000000001'", "'not-a-uuid'", 1);
    let with_bad = |k: uuid::Uuid| {
        [
            each_parsed(&[k], &[2950]),
            parse_typed("", &bad, &[]),
            bind_text("", &[]),
        ]
        .concat()
    };
    let (d, t) = (fresh(), fresh());
    let direct = raw_flight(&mut own, with_bad(d));
    assert_eq!(direct, (b"12CEZ".to_vec(), "22P02".to_string()));
    assert_eq!(
        raw_flight(&mut through, with_bad(t)),
        (b"1EZ".to_vec(), "22P02".to_string())
    );
    assert!(latest(&facade, t, "BASE").await.is_none(), "written");

    // A named statement the batch parses, binds and closes: as
    // PostgreSQL answers it; parsed again in a later batch, the same.
    use crate::proxy_modes::{cstr, message};
    let close_named = message(b'C', &[b"S".to_vec(), cstr("s_batch")].concat());
    let named = |keys: [uuid::Uuid; 2]| {
        [
            each_parsed(&keys[..1], &[2950]),
            parse_typed("s_batch", &insert, &[2950]),
            bind_text("s_batch", &[keys[1].to_string()]),
            close_named.clone(),
        ]
        .concat()
    };
    for _ in 0..2 {
        let (d, t) = ([fresh(), fresh()], [fresh(), fresh()]);
        let direct = raw_flight(&mut own, named(d));
        assert_eq!(direct, (b"12C12C3Z".to_vec(), String::new()));
        assert_eq!(raw_flight(&mut through, named(t)), direct);
        for k in t {
            assert!(latest(&facade, k, "BASE").await.is_some(), "not written");
        }
    }

    // A name the session already holds, parsed again in a batch:
    // PostgreSQL refuses it (42P05), and nothing is written.
    for stream in [&mut own, &mut through] {
        let prepare = parse_typed("s_held", &insert, &[2950]);
        assert_eq!(raw_flight(stream, prepare), (b"1Z".to_vec(), String::new()));
    }
    let again = |keys: [uuid::Uuid; 2]| {
        [
            each_parsed(&keys[..1], &[2950]),
            parse_typed("s_held", &insert, &[2950]),
            bind_text("s_held", &[keys[1].to_string()]),
        ]
        .concat()
    };
    let (d, t) = ([fresh(), fresh()], [fresh(), fresh()]);
    assert_eq!(
        raw_flight(&mut own, again(d)),
        (b"12CEZ".to_vec(), "42P05".to_string())
    );
    assert_eq!(
        raw_flight(&mut through, again(t)),
        (b"1EZ".to_vec(), "42P05".to_string())
    );
    none_written(&facade, &t).await;

    // A statement closed before the batch binds it again: PostgreSQL
    // refuses that Bind (26000); the proxy refuses the batch (0A000).
    // Either way nothing is written.
    let closed = |keys: [uuid::Uuid; 2]| {
        [
            parse_typed("s_closed", &insert, &[2950]),
            bind_text("s_closed", &[keys[0].to_string()]),
            message(b'C', &[b"S".to_vec(), cstr("s_closed")].concat()),
            bind_text("s_closed", &[keys[1].to_string()]),
        ]
        .concat()
    };
    let (d, t) = ([fresh(), fresh()], [fresh(), fresh()]);
    assert_eq!(raw_flight(&mut own, closed(d)).1, "26000");
    assert_eq!(raw_flight(&mut through, closed(t)).1, "0A000");
    none_written(&facade, &t).await;

    // The session goes on: a write with its own Sync runs.
    a_write_alone_runs(&mut through, &insert, &facade).await;
    facade.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batchs_values_are_evaluated_together_and_fail_where_postgresql_fails() {
    // The values of a batch's rows are evaluated by PostgreSQL (as the
    // app's role, read only) in shared transactions rather than one
    // each: forty INSERTs take fewer than forty. A value that fails
    // in the middle of them fails where PostgreSQL fails, nothing
    // written, the rows before it answered.
    let (db, facade, file) = primary().await;
    let proxy = ProxyProcess::start(file.path(), "127.0.0.1:0");
    let (mut own, mut through) = raw_sessions(&db, &proxy);
    let insert = INSERT_TRIP.replace("'{k}'", "$1");
    sqlx::query("CREATE EXTENSION IF NOT EXISTS pg_stat_statements")
        .execute(&db.pool)
        .await
        .unwrap();
    let transactions = || async {
        let (calls,): (i64,) = sqlx::query_as(
            "SELECT coalesce(sum(s.calls), 0)::int8 FROM pg_stat_statements s \
             JOIN pg_database d ON d.oid = s.dbid \
             WHERE d.datname = current_database() AND s.query = 'BEGIN READ ONLY'",
        )
        .fetch_one(&db.pool)
        .await
        .unwrap();
        calls
    };
    let before = transactions().await;
    let keys: Vec<uuid::Uuid> = (0..40).map(|_| uuid::Uuid::new_v4()).collect();
    let (kinds, sqlstate) = raw_batch(&mut through, &insert, &keys);
    assert_eq!(sqlstate, "");
    assert_eq!(kinds.len(), 2 + 2 * 40, "{kinds:?}");
    for k in &keys {
        assert!(
            latest(&facade, *k, "BASE").await.is_some(),
            "{k} not written"
        );
    }
    // How many go together depends on how the rows' evaluations overlap
    // in time (group commit's way), so the bound is the one a transaction
    // per row would break; the count also holds any other read-only
    // evaluation the proxy made meanwhile.
    let evaluated_in = transactions().await - before;
    assert!(
        (1..keys.len() as i64).contains(&evaluated_in),
        "{} rows evaluated in {evaluated_in} transactions",
        keys.len()
    );

    // The 23rd of forty divides by zero: 22012 there, as PostgreSQL says.
    // (Volatile, so PostgreSQL divides when it runs the row, not when it
    // plans it at the Bind.)
    let failing = insert.replace("12.5,", "12.5 / floor(random()),");
    let named = [("s_ok", insert.as_str()), ("s_bad", failing.as_str())];
    let binds = |keys: &[uuid::Uuid]| -> Vec<(&'static str, uuid::Uuid)> {
        keys.iter()
            .enumerate()
            .map(|(i, k)| (if i == 22 { "s_bad" } else { "s_ok" }, *k))
            .collect()
    };
    let direct_keys: Vec<uuid::Uuid> = (0..40).map(|_| uuid::Uuid::new_v4()).collect();
    let direct = raw_named_batch(&mut own, &named, &binds(&direct_keys));
    assert_eq!(direct.1, "22012", "{direct:?}");
    let keys: Vec<uuid::Uuid> = (0..40).map(|_| uuid::Uuid::new_v4()).collect();
    assert_eq!(raw_named_batch(&mut through, &named, &binds(&keys)), direct);
    none_written(&facade, &keys).await;
    a_write_alone_runs(&mut through, &insert, &facade).await;
    facade.close().await;
}

/// Asserts Schemaless holds no BASE cell of any of `keys`.
async fn none_written(facade: &tripstore::TripStore, keys: &[uuid::Uuid]) {
    for k in keys {
        assert!(latest(facade, *k, "BASE").await.is_none(), "{k} written");
    }
}

/// The session goes on: a write with its own `Sync` runs.
async fn a_write_alone_runs(
    through: &mut std::net::TcpStream,
    insert: &str,
    facade: &tripstore::TripStore,
) {
    let k = uuid::Uuid::new_v4();
    let (kinds, sqlstate) = raw_batch(through, insert, &[k]);
    assert_eq!((kinds.as_slice(), sqlstate.as_str()), (&b"12CZ"[..], ""));
    assert!(latest(facade, k, "BASE").await.is_some());
}

/// Raw sessions straight to PostgreSQL and through `proxy`.
fn raw_sessions(
    db: &crate::harness::LegacyDb,
    proxy: &ProxyProcess,
) -> (std::net::TcpStream, std::net::TcpStream) {
    let port = crate::harness::cluster().spec().postgres_port;
    let own_addr = std::net::SocketAddr::from(([127, 0, 0, 1], port));
    (
        crate::proxy::raw_session(own_addr, db),
        crate::proxy::raw_session(proxy.addr, db),
    )
}

/// A store that counts the reads made through it: point reads (one row
/// each) and reads of a column of many rows.
struct Counting<S> {
    inner: S,
    point: std::sync::atomic::AtomicUsize,
    many: std::sync::atomic::AtomicUsize,
}

impl<S> Counting<S> {
    fn counts(&self) -> (usize, usize) {
        use std::sync::atomic::Ordering::Relaxed;
        (self.point.load(Relaxed), self.many.load(Relaxed))
    }

    fn count(&self, which: &std::sync::atomic::AtomicUsize) {
        which.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    }
}

#[async_trait::async_trait]
impl<S: schemaless::CellStore> schemaless::CellStore for Counting<S> {
    fn shard_count(&self) -> u32 {
        self.inner.shard_count()
    }

    async fn put_cells(
        &self,
        cells: Vec<schemaless::Cell>,
    ) -> schemaless::Result<Vec<schemaless::CellResult>> {
        self.inner.put_cells(cells).await
    }

    async fn get_cells_for_shard(
        &self,
        shard: u32,
        after: u64,
        limit: usize,
        from: schemaless::ReadFrom,
    ) -> schemaless::Result<schemaless::ShardPage> {
        self.inner
            .get_cells_for_shard(shard, after, limit, from)
            .await
    }

    async fn get_cell_answer(
        &self,
        key: &schemaless::CellKey,
        from: schemaless::ReadFrom,
    ) -> schemaless::Result<schemaless::Answer<Option<schemaless::StoredCell>>> {
        self.count(&self.point);
        self.inner.get_cell_answer(key, from).await
    }

    async fn get_cell_latest_answer(
        &self,
        row_key: &schemaless::RowKey,
        column: &schemaless::Column,
        from: schemaless::ReadFrom,
    ) -> schemaless::Result<schemaless::Answer<Option<schemaless::StoredCell>>> {
        self.count(&self.point);
        self.inner
            .get_cell_latest_answer(row_key, column, from)
            .await
    }

    async fn get_cells_for_row_answer(
        &self,
        row_key: &schemaless::RowKey,
        from: schemaless::ReadFrom,
    ) -> schemaless::Result<schemaless::Answer<Vec<schemaless::StoredCell>>> {
        self.count(&self.point);
        self.inner.get_cells_for_row_answer(row_key, from).await
    }

    async fn get_column_cells_answer(
        &self,
        rows: &[schemaless::RowKey],
        column: &schemaless::Column,
        from: schemaless::ReadFrom,
    ) -> schemaless::Result<schemaless::Answer<Vec<schemaless::StoredCell>>> {
        self.count(&self.many);
        self.inner.get_column_cells_answer(rows, column, from).await
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batchs_rows_are_read_ahead_together_not_one_by_one() {
    // A driver's executemany of INSERTs by literal keys: the rows'
    // latest cells and tombstones are read once for the whole batch (a
    // read of each row column and of the tombstone column, for every
    // row), not with a point read or two per row. The answers are the
    // same: a key that exists fails as PostgreSQL's would, one deleted is
    // retired.
    let (db, facade) = {
        let (db, facade, _) = primary().await;
        (db, std::sync::Arc::new(facade))
    };
    let model = query::Model::from_config(&db.config).unwrap();
    let catalog = query::run::Catalog::default();
    let legacy = facade.legacy().clone();
    let eval = query::run::Evaluator {
        legacy: &legacy,
        role: None,
        settings: &[],
    };
    let store = Counting {
        inner: facade.clone(),
        point: Default::default(),
        many: Default::default(),
    };
    let insert = INSERT_TRIP.replace("'{k}'", "$1");
    let batch = |keys: &[uuid::Uuid]| -> Vec<(String, Vec<Option<String>>)> {
        keys.iter()
            .map(|k| (insert.clone(), vec![Some(k.to_string())]))
            .collect()
    };
    let run = |statements: Vec<(String, Vec<Option<String>>)>| {
        let (store, catalog, model, limits) = (&store, &catalog, &model, &db.config.limits);
        async move {
            let refs: Vec<(&str, &[Option<String>])> = statements
                .iter()
                .map(|(sql, params)| (sql.as_str(), params.as_slice()))
                .collect();
            query::run::write_batch(eval, store, catalog, (model, limits), &refs).await
        }
    };

    let keys: Vec<uuid::Uuid> = (0..40).map(|_| uuid::Uuid::new_v4()).collect();
    let results = run(batch(&keys)).await;
    assert_eq!(results.len(), 40);
    for result in &results {
        assert_eq!(result.as_ref().unwrap().tag, "INSERT 0 1");
    }
    let row_columns = legacy
        .layout()
        .columns
        .iter()
        .filter(|c| matches!(c.shape, legacy::layout::Shape::Row))
        .count();
    assert_eq!(
        store.counts(),
        (0, row_columns + 1),
        "(point reads, reads of many rows) for 40 rows"
    );
    for k in &keys {
        assert!(latest(&facade, *k, "BASE").await.is_some(), "not written");
    }

    // The same keys again after a fresh one: the first that exists fails
    // the batch (23505), nothing written; a deleted key is retired.
    let fresh = uuid::Uuid::new_v4();
    let results = run(batch(&[fresh, keys[3]])).await;
    assert_eq!(results.len(), 2);
    assert_eq!(results[1].as_ref().unwrap_err().sqlstate, "23505");
    assert!(latest(&facade, fresh, "BASE").await.is_none(), "written");
    let deleted = schemaless::Column::new(&db.config.capture.tombstone_column).unwrap();
    schemaless::CellStore::put_cell(
        facade.as_ref(),
        schemaless::tombstone::row_tombstone(keys[5].into(), &deleted),
    )
    .await
    .unwrap();
    let results = run(batch(&[keys[5]])).await;
    let refused = results[0].as_ref().unwrap_err();
    assert!(
        refused.sqlstate == "23505" && refused.message.contains("retired"),
        "{refused:?}"
    );
    assert_eq!(store.counts().0, 0, "no point read");
    let _ = db;
}
