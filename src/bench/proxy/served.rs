//! The served reads and writes of `bench proxy`: trips in both stores,
//! `shadow` at the full read share, and a trip read by its row key as a
//! prepared statement straight to PostgreSQL and through the proxy, which
//! answers it from Schemaless; then `primary`, and a trip's version
//! bumped by its row key straight in PostgreSQL and through the proxy,
//! which runs it through the facade.

use std::sync::Arc;
use std::time::Duration;

use super::super::stats::Latencies;
use super::ProxyArgs;

/// Reads of one path: their latencies and how many a second.
pub(super) struct Reads {
    pub(super) latencies: Latencies,
    pub(super) per_sec: f64,
}

/// Seeds `args.trips` trips in PostgreSQL and their cells in Schemaless,
/// switches to `shadow`, and runs the translated read direct and through
/// the proxy (`proxied`) in rounds direct, proxy, proxy, direct; then
/// switches to `primary` and does the same with an UPDATE of the
/// version. The reads, then the writes.
pub(super) async fn served_rounds(
    facade: &tripstore::TripStore,
    pool: &sqlx::PgPool,
    args: &ProxyArgs,
    direct_url: &str,
    proxied: &str,
) -> anyhow::Result<((Reads, Reads), (Reads, Reads))> {
    use schemaless::CellStore;
    let legacy = facade.legacy();
    let layout = legacy.layout();
    eprintln!(
        "served reads: seeding {} trips in both stores ...",
        args.trips
    );
    legacy::trips::seed(
        pool,
        &layout.schema,
        &unquoted(layout.uuid_sql()),
        args.trips,
        17,
        |_| {},
    )
    .await?;
    let (low, high) = legacy
        .id_range()
        .await?
        .ok_or_else(|| anyhow::anyhow!("no trips were seeded"))?;
    let mut at = low;
    while at <= high {
        let chunk = legacy.scan(at..at + 1000).await?;
        // Within the store's batch limit.
        for batch in chunk.cells.chunks(500) {
            for result in facade.schemaless().put_cells(batch.to_vec()).await? {
                result.map_err(|c| anyhow::anyhow!("seeding Schemaless: {c:?}"))?;
            }
        }
        at += 1000;
    }
    facade
        .set_mode(&tripstore::ModeRequest {
            target: tripstore::Mode::Shadow,
            force: true,
            by: "mezzanine bench proxy".into(),
            reason: Some("reads served from Schemaless, measured".into()),
        })
        .await?;
    // The layout's row columns' fields by name, but those the proxy
    // forwards (an unconstrained numeric, json).
    let mut columns = vec![layout.uuid_sql().to_string()];
    for column in &layout.columns {
        if column.kind() != config::ColumnKind::Row {
            continue;
        }
        for f in &column.fields {
            if f.keeps_text() {
                columns.push(format!("\"{}\"", f.sql.replace('"', "\"\"")));
            }
        }
    }
    let sql = format!(
        "SELECT {} FROM {} WHERE {} = $1",
        columns.join(", "),
        layout.table_sql(),
        layout.uuid_sql()
    );
    let keys: Vec<uuid::Uuid> = sqlx::query_scalar(sqlx::AssertSqlSafe(format!(
        "SELECT {} FROM {}",
        layout.uuid_sql(),
        layout.table_sql()
    )))
    .fetch_all(pool)
    .await?;
    let keys = Arc::new(keys);
    // The same answers both ways, for a few trips.
    let (first, second) = (
        read_rounds(direct_url, &sql, &keys, 1, Duration::ZERO)?,
        read_rounds(proxied, &sql, &keys, 1, Duration::ZERO)?,
    );
    anyhow::ensure!(
        first.1 == second.1,
        "the proxy's answers differ from PostgreSQL's: {:?} against {:?}",
        second.1,
        first.1
    );
    let reads = both_ways(
        args,
        [direct_url, proxied],
        &sql,
        &keys,
        ["a trip by its row key", "served by the proxy"],
    )?;
    // Writes: `primary`, where the proxy runs a translatable UPDATE
    // through the facade (the same UPDATE straight to PostgreSQL bumps
    // the legacy row: the reverse mirror does not run here).
    facade
        .set_mode(&tripstore::ModeRequest {
            target: tripstore::Mode::Primary,
            force: true,
            by: "mezzanine bench proxy".into(),
            reason: Some("writes through the facade, measured".into()),
        })
        .await?;
    let column = layout
        .columns
        .iter()
        .find(|c| c.kind() == config::ColumnKind::Row)
        .ok_or_else(|| anyhow::anyhow!("the layout has no row column"))?;
    let bump = format!(
        "UPDATE {} SET {} = {} + 1 WHERE {} = $1",
        layout.table_sql(),
        column.ref_key_sql(),
        column.ref_key_sql(),
        layout.uuid_sql()
    );
    let writes = both_ways(
        args,
        [direct_url, proxied],
        &bump,
        &keys,
        [
            "a trip's version bumped by its row key",
            "written through the facade",
        ],
    )?;
    Ok((reads, writes))
}

/// `sql` with keys in turn, straight to PostgreSQL and through the proxy
/// (`urls`), by `args.clients` clients in rounds direct, proxy, proxy,
/// direct: each path's latencies and rate.
fn both_ways(
    args: &ProxyArgs,
    urls: [&str; 2],
    sql: &str,
    keys: &Arc<Vec<uuid::Uuid>>,
    [what, through]: [&str; 2],
) -> anyhow::Result<(Reads, Reads)> {
    let half = Duration::from_secs((args.seconds / 2).max(1));
    let mut latencies: [Vec<Duration>; 2] = Default::default();
    let mut per_sec = [0.0f64; 2];
    for (i, path) in [0usize, 1, 1, 0].into_iter().enumerate() {
        eprintln!(
            "{what}, round {}/4: {} ...",
            i + 1,
            ["direct", through][path]
        );
        let (round, _) = read_rounds(urls[path], sql, keys, args.clients, half)?;
        per_sec[path] += round.len() as f64 / half.as_secs_f64() / 2.0;
        latencies[path].extend(round);
    }
    let [direct, proxied] = latencies.map(Latencies::new);
    Ok((
        Reads {
            latencies: direct,
            per_sec: per_sec[0],
        },
        Reads {
            latencies: proxied,
            per_sec: per_sec[1],
        },
    ))
}

/// `"name"` as `name`.
fn unquoted(quoted: &str) -> String {
    quoted
        .strip_prefix('"')
        .and_then(|q| q.strip_suffix('"'))
        .map_or_else(|| quoted.to_string(), |q| q.replace("\"\"", "\""))
}

/// `clients` connections to `url` on a thread and runtime of their own,
/// each running `sql` with keys in turn for `length` (with a zero length,
/// one pass over the first 20 keys on one connection, whose answers are
/// returned: each column's bytes as PostgreSQL sent them). The latencies, and the answers.
fn read_rounds(
    url: &str,
    sql: &str,
    keys: &Arc<Vec<uuid::Uuid>>,
    clients: u32,
    length: Duration,
) -> anyhow::Result<(Vec<Duration>, Vec<String>)> {
    use sqlx::{Connection, Row};
    let (url, sql, keys) = (url.to_string(), sql.to_string(), keys.clone());
    let thread = std::thread::spawn(move || -> anyhow::Result<_> {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?;
        runtime.block_on(async move {
            let deadline = std::time::Instant::now() + length;
            let mut tasks = tokio::task::JoinSet::new();
            for client in 0..clients as usize {
                let mut conn = sqlx::PgConnection::connect(&url).await?;
                let (sql, keys) = (sql.clone(), keys.clone());
                tasks.spawn(async move {
                    let mut latencies = Vec::new();
                    let mut answers = Vec::new();
                    let mut n = client * 7919;
                    loop {
                        let done = if length.is_zero() {
                            answers.len() >= 20.min(keys.len())
                        } else {
                            std::time::Instant::now() >= deadline
                        };
                        if done {
                            break;
                        }
                        let key = keys[n % keys.len()];
                        n += 1;
                        let started = std::time::Instant::now();
                        let row = match sqlx::query(sqlx::AssertSqlSafe(sql.clone()))
                            .bind(key)
                            .fetch_optional(&mut conn)
                            .await
                        {
                            Ok(row) => row,
                            // A write through the facade that lost a race
                            // for a version (two clients on one key): the
                            // next key.
                            Err(e)
                                if e.as_database_error().and_then(|d| d.code()).as_deref()
                                    == Some("40001") =>
                            {
                                continue
                            }
                            Err(e) => return Err(e.into()),
                        };
                        latencies.push(started.elapsed());
                        if length.is_zero() {
                            answers.push(match row {
                                Some(row) => (0..row.len())
                                    .map(|i| match row.try_get_raw(i) {
                                        // The bytes PostgreSQL sent.
                                        Ok(raw) => format!("{:?}", raw.as_bytes().ok()),
                                        Err(e) => format!("column {i}: {e}"),
                                    })
                                    .collect::<Vec<_>>()
                                    .join(", "),
                                None => "no row".into(),
                            });
                        }
                    }
                    conn.close().await?;
                    Ok::<_, anyhow::Error>((latencies, answers))
                });
            }
            let mut latencies = Vec::new();
            let mut answers = Vec::new();
            while let Some(done) = tasks.join_next().await {
                let (l, a) = done??;
                latencies.extend(l);
                answers.extend(a);
            }
            Ok((latencies, answers))
        })
    });
    thread
        .join()
        .map_err(|_| anyhow::anyhow!("a reading client panicked"))?
}
