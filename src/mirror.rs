//! `mezzanine mirror relay|reverse|status|retry|load`: the two directions
//! of the mirror, run by hand or watched.
//!
//! Facades run a relay and a reverse mirror themselves (following the
//! mode; see `[mirror]`). These commands run them as processes of their
//! own, whatever the mode: to drain an outbox left after a step back to
//! `legacy`, or to add capacity. Several at once share the work.

use std::net::SocketAddr;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use clap::{Args, Subcommand};
use mirror::{Relay, ReverseMirror, WorkerStats};
use schemaless::{CellStore, MySqlStore};
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

use crate::metrics;

#[derive(Subcommand)]
pub enum MirrorCommand {
    /// Drain the outbox into Schemaless until stopped (Ctrl-C / SIGTERM).
    Relay(RunArgs),
    /// Apply Schemaless's change log to the legacy tables until stopped.
    Reverse(RunArgs),
    /// Outbox depth and age, parked entries, reverse lag per shard, and
    /// the relays and reverse mirrors running anywhere.
    Status(StatusArgs),
    /// Put parked outbox entries back into the outbox, and apply parked
    /// change-log cells to the legacy tables again (after fixing the
    /// cause).
    Retry,
    /// Write new trips through the facade in whatever mode it is in (BASE
    /// and NOTES, then BASE completed): load for rehearsing a runbook.
    Load(LoadArgs),
}

#[derive(Args)]
pub struct RunArgs {
    /// Move what there is now, then exit.
    #[arg(long)]
    once: bool,
    /// Serve Prometheus metrics on this address (e.g. 127.0.0.1:9464).
    #[arg(long)]
    metrics_addr: Option<SocketAddr>,
}

#[derive(Args)]
pub struct StatusArgs {
    /// One JSON object instead of text.
    #[arg(long, conflicts_with = "prometheus")]
    json: bool,
    /// The Prometheus exposition text (for a textfile collector).
    #[arg(long)]
    prometheus: bool,
    /// Every shard's reverse position, not only those behind.
    #[arg(long)]
    all: bool,
}

#[derive(Args)]
pub struct LoadArgs {
    /// How many trips to write.
    #[arg(long, default_value_t = 10_000)]
    trips: u64,
    /// Concurrent writers.
    #[arg(long, default_value_t = 8)]
    writers: u64,
    /// Do not run the outbox relay in this process (leave the outbox to
    /// `mezzanine mirror relay` or the apps).
    #[arg(long)]
    no_relay: bool,
    /// The seed of the generated trips.
    #[arg(long, default_value_t = 1)]
    seed: u64,
}

pub async fn run(command: MirrorCommand, config_path: &Path) -> anyhow::Result<()> {
    let config = crate::load_config(config_path)?;
    let legacy_config =
        legacy::connection::legacy_config(&config).map_err(|e| crate::UsageError(e.to_string()))?;
    let pool = legacy::connection::pool(legacy_config)?;
    tripstore::mode::ensure_control(&pool).await?;
    mirror::schema::ensure(&pool).await?;
    let schemaless = MySqlStore::connect(&config)?;
    match command {
        MirrorCommand::Relay(args) => {
            let legacy = legacy::LegacyStore::connect(&config).await?;
            let relay = Arc::new(Relay::new(&legacy, Arc::new(schemaless.clone()), &config)?);
            if args.once {
                let moved = relay.drain().await?;
                println!(
                    "relayed {} outbox entries ({} already in Schemaless), parked {}, dropped {} written after their key's deletion and deleted again since",
                    moved.delivered, moved.already_present, moved.parked, moved.retired
                );
                if config.capture.enabled {
                    let c = moved.captured;
                    println!(
                        "delivered {} captured changes: {} cells ({} already in Schemaless, {} tombstones), {} needed none, parked {}",
                        c.entries, c.cells, c.already_present, c.tombstones, c.skipped, c.parked
                    );
                }
            } else {
                let local = metrics::Local {
                    relay: Some(relay.stats()),
                    reverse: None,
                };
                let worker = relay.clone();
                run_worker(
                    &pool,
                    &schemaless,
                    args.metrics_addr,
                    local,
                    "relayed",
                    relay.stats(),
                    move |cancel, on| {
                        let worker = worker.clone();
                        async move { worker.run(cancel, on).await }
                    },
                )
                .await?;
            }
        }
        MirrorCommand::Reverse(args) => {
            let legacy = legacy::LegacyStore::connect(&config).await?;
            let reverse = Arc::new(ReverseMirror::new(legacy, schemaless.clone(), &config));
            if !reverse.started().await? {
                anyhow::bail!(
                    "the reverse mirror has no offsets yet: they are set at the change-log heads when the mode enters primary (`mezzanine mode set primary`)"
                );
            }
            if args.once {
                let applied = reverse.catch_up().await?;
                println!(
                    "applied {} change-log cells to the legacy tables ({} changed nothing), skipped {}, parked {}",
                    applied.applied, applied.already_there, applied.skipped, applied.parked
                );
            } else {
                let local = metrics::Local {
                    relay: None,
                    reverse: Some(reverse.stats()),
                };
                let worker = reverse.clone();
                run_worker(
                    &pool,
                    &schemaless,
                    args.metrics_addr,
                    local,
                    "applied",
                    reverse.stats(),
                    move |cancel, on| {
                        let worker = worker.clone();
                        async move { worker.run(cancel, on).await }
                    },
                )
                .await?;
            }
        }
        MirrorCommand::Status(args) => status(&pool, &schemaless, &args).await?,
        MirrorCommand::Retry => {
            let requeued = mirror::status::retry_parked_outbox(&pool).await?;
            println!("{requeued} parked outbox entries put back into the outbox");
            let legacy = legacy::LegacyStore::connect(&config).await?;
            let (applied, still) = mirror::reverse::retry_parked(&legacy).await?;
            println!("{applied} parked change-log cells applied, {still} still refused");
        }
        MirrorCommand::Load(args) => load(&config, &args).await?,
    }
    schemaless.close().await;
    pool.close().await;
    Ok(())
}

/// Runs a worker until Ctrl-C or SIGTERM, printing progress every five
/// seconds and serving metrics if asked.
async fn run_worker<F, Fut>(
    pool: &sqlx::PgPool,
    schemaless: &MySqlStore,
    metrics_addr: Option<SocketAddr>,
    local: metrics::Local,
    verb: &str,
    stats: Arc<WorkerStats>,
    work: F,
) -> anyhow::Result<()>
where
    F: FnOnce(CancellationToken, watch::Receiver<bool>) -> Fut,
    Fut: std::future::Future<Output = ()> + Send + 'static,
{
    let cancel = CancellationToken::new();
    if let Some(addr) = metrics_addr {
        let (pool, schemaless) = (pool.clone(), schemaless.clone());
        metrics::serve(
            addr,
            worker::metrics::refresh(move || {
                let (pool, schemaless, local) = (pool.clone(), schemaless.clone(), local.clone());
                async move { record(&pool, &schemaless, &local).await }
            }),
            cancel.clone(),
        )
        .await?;
    }
    // Runs whatever the mode: the sender lives as long as the worker.
    let (_on, enabled) = watch::channel(true);
    let task = tokio::spawn(work(cancel.clone(), enabled));
    let mut tick = tokio::time::interval(Duration::from_secs(5));
    tick.tick().await;
    let (mut last, mut at) = (0, Instant::now());
    loop {
        tokio::select! {
            _ = crate::shutdown::stopped() => break,
            _ = tick.tick() => {
                let cells = WorkerStats::get(&stats.cells);
                let rate = (cells - last) as f64 / at.elapsed().as_secs_f64();
                (last, at) = (cells, Instant::now());
                let depth = mirror::status::outbox(pool).await.map(|o| o.0.to_string()).unwrap_or_else(|e| e.to_string());
                eprintln!(
                    "{verb} {cells} cells ({rate:.0}/s), {} failures, {} parked; outbox {depth}{}",
                    WorkerStats::get(&stats.failures),
                    WorkerStats::get(&stats.parked),
                    stats.last_error().map(|e| format!("; last error: {e}")).unwrap_or_default()
                );
            }
        }
    }
    cancel.cancel();
    task.await?;
    Ok(())
}

/// Sets the mirror's gauges before a scrape.
async fn record(pool: &sqlx::PgPool, schemaless: &MySqlStore, local: &metrics::Local) {
    let mode = tripstore::mode::read(pool).await.ok().map(|s| s.mode);
    match mirror::status::read(pool, schemaless).await {
        Ok(status) => metrics::record_mirror(&status, mode, local),
        Err(e) => tracing::warn!("reading the mirror's status for /metrics: {e}"),
    }
}

async fn status(
    pool: &sqlx::PgPool,
    schemaless: &MySqlStore,
    args: &StatusArgs,
) -> anyhow::Result<()> {
    let mode = tripstore::mode::read(pool).await?.mode;
    let status = mirror::status::read(pool, schemaless).await?;
    if args.prometheus {
        metrics::record_mirror(&status, Some(mode), &metrics::Local::default());
        print!("{}", metrics::render());
        return Ok(());
    }
    if args.json {
        let json = StatusJson {
            mode: mode.as_str(),
            outbox_depth: status.outbox_depth,
            outbox_oldest_secs: status.outbox_oldest_secs,
            outbox_parked: status.outbox_parked,
            capture: &status.capture,
            reverse_lag: status.reverse_lag(),
            reverse_error: status.reverse_error.as_deref(),
            reverse_parked: status.reverse_parked,
            lost_buffered_writes: status.lost_buffered_writes,
            reverse: &status.reverse,
            workers: &status.workers,
        };
        let json = serde_json::to_string(&json)?;
        println!("{json}");
        return Ok(());
    }
    println!("mode: {mode}");
    println!(
        "outbox: {} entries{}, {} parked",
        status.outbox_depth,
        status
            .outbox_oldest_secs
            .map(|s| format!(", the oldest {s:.1}s old"))
            .unwrap_or_default(),
        status.outbox_parked
    );
    match status.lost_buffered_writes {
        Some(0) => {}
        Some(n) => println!(
            "lost buffered writes: {n} acknowledged while a master was down, then beaten by another body at their address (`mezzanine buffer status` lists them)"
        ),
        None => println!("lost buffered writes: unknown, a master did not answer"),
    }
    let capture = &status.capture;
    println!(
        "capture queue: {} changes{}, {} parked{}",
        capture.depth,
        capture
            .oldest_secs
            .map(|s| format!(", the oldest {s:.1}s old"))
            .unwrap_or_default(),
        capture.parked,
        if capture.parked > 0 {
            " (`mezzanine capture status` shows why)"
        } else {
            ""
        }
    );
    if let Some(e) = &status.reverse_error {
        println!("reverse: lag unknown, Schemaless did not answer: {e}");
    } else if status.reverse.is_empty() {
        println!("reverse: not started (offsets are set when the mode enters primary)");
    } else {
        let behind = status.reverse.iter().filter(|s| s.lag > 0).count();
        println!(
            "reverse: lag {} cells on {behind} of {} shards, {} parked",
            status.reverse_lag(),
            status.reverse.len(),
            status.reverse_parked
        );
        let shown: Vec<_> = status
            .reverse
            .iter()
            .filter(|s| args.all || s.lag > 0 || s.awaited > 0)
            .collect();
        if !shown.is_empty() {
            let mut table =
                crate::table::Table::new(&["SHARD", "OFFSET", "HEAD", "LAG", "AWAITED", "APPLIED"])
                    .right(&[0, 1, 2, 3, 4, 5]);
            for s in shown {
                table.row([
                    s.shard.to_string(),
                    s.offset.to_string(),
                    s.head.to_string(),
                    s.lag.to_string(),
                    s.awaited.to_string(),
                    s.applied.to_string(),
                ]);
            }
            table.print("");
        }
    }
    if status.workers.is_empty() {
        println!("workers: none has written a heartbeat in the last hour");
    } else {
        println!("workers:");
        let mut table = crate::table::Table::new(&[
            "KIND", "NAME", "CELLS", "CELLS/S", "FAILURES", "PARKED", "STATE",
        ])
        .right(&[2, 3, 4, 5]);
        for w in &status.workers {
            table.row([
                w.kind.to_string(),
                w.name.to_string(),
                w.cells.to_string(),
                format!("{:.0}", w.rate),
                w.failures.to_string(),
                w.parked.to_string(),
                format!(
                    "{}{}",
                    if w.stale() {
                        format!("gone (silent {:.0}s)", w.silent_secs)
                    } else {
                        "live".into()
                    },
                    w.last_error
                        .as_ref()
                        .map(|e| format!("; last error: {e}"))
                        .unwrap_or_default()
                ),
            ]);
        }
        table.print("  ");
    }
    Ok(())
}

/// Writes `--trips` trips through the facade with `--writers` tasks: each
/// trip is one batch (BASE v1 and maybe NOTES), then BASE v2. Prints
/// `acked N` as writes are acknowledged, so a test can kill it midway and
/// know what was acknowledged.
async fn load(config: &config::Config, args: &LoadArgs) -> anyhow::Result<()> {
    if args.writers == 0 || args.trips == 0 {
        return Err(crate::UsageError("--trips and --writers must be positive".into()).into());
    }
    let mut config = config.clone();
    if args.no_relay {
        config.mirror.relay_in_app = false;
    }
    let store = Arc::new(tripstore::TripStore::connect(&config).await?);
    eprintln!(
        "writing {} trips in mode {} with {} writers",
        args.trips,
        store.mode(),
        args.writers
    );
    let next = Arc::new(AtomicU64::new(0));
    let acked = Arc::new(AtomicU64::new(0));
    let started = Instant::now();
    let writers = (0..args.writers).map(|w| {
        let (store, next, acked) = (store.clone(), next.clone(), acked.clone());
        let seed = args.seed.wrapping_mul(1_000_003).wrapping_add(w);
        let trips = args.trips;
        tokio::spawn(async move {
            let mut cells = legacy::trips::TripCells::new(seed);
            while next.fetch_add(1, Ordering::Relaxed) < trips {
                let trip = cells.new_trip();
                let completed = cells.complete(&trip[0]);
                store.put_cells(trip).await?;
                store.put_cell(completed).await?;
                let n = acked.fetch_add(1, Ordering::Relaxed) + 1;
                if n % 100 == 0 {
                    println!("acked {n}");
                }
            }
            Ok::<_, schemaless::Error>(())
        })
    });
    let results = futures::future::join_all(writers).await;
    for result in results {
        result??;
    }
    let elapsed = started.elapsed().as_secs_f64();
    let n = acked.load(Ordering::Relaxed);
    println!("acked {n}");
    println!(
        "{n} trips written in {elapsed:.2}s ({:.0} trips/s) in mode {}",
        n as f64 / elapsed,
        store.mode()
    );
    store.close().await;
    Ok(())
}

/// `mirror status --json`.
#[derive(serde::Serialize)]
struct StatusJson<'a> {
    mode: &'static str,
    outbox_depth: u64,
    outbox_oldest_secs: Option<f64>,
    outbox_parked: u64,
    capture: &'a mirror::capture::Queue,
    reverse_lag: u64,
    reverse_error: Option<&'a str>,
    reverse_parked: u64,
    lost_buffered_writes: Option<u64>,
    reverse: &'a [mirror::status::ShardLag],
    workers: &'a [mirror::status::Worker],
}
