//! `mezzanine bench worker`: what HTTP costs. The same workload through a
//! linked `TripStore` and through a worker (the Rust client, keep-alive,
//! loopback), in the same run at the same concurrency: put throughput
//! (batches of new trips' cells) and `get_cell_latest` latency. Rounds
//! alternate linked, HTTP, HTTP, linked, so warming caches and noise
//! favour neither. The worker runs in this process on a free loopback
//! port, so it shares the machine's cores with the servers exactly as the
//! linked facade does.
//!
//! It runs in mode `schemaless` (the cell API proper) on a database
//! (`mzbench_worker`) and a Schemaless instance of its own, created afresh
//! each run.

use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use clap::Args;
use rand::Rng;
use schemaless::{CellStore, Column, ReadFrom, RowKey};
use serde_json::json;
use tokio_util::sync::CancellationToken;
use tripstore::{Mode, ModeRequest, TripStore};

use super::stats::Latencies;

#[derive(Args)]
pub struct WorkerArgs {
    /// Print one JSON object with every figure as the last line.
    #[arg(long)]
    json: bool,
    /// Concurrent callers, the same for both paths.
    #[arg(long, default_value_t = 16)]
    concurrency: usize,
    /// Trips per put call (each trip is several cells).
    #[arg(long, default_value_t = 4)]
    batch: usize,
    /// Seconds per path and operation (split over two rounds each).
    #[arg(long, default_value_t = 10)]
    seconds: u64,
    /// The database and Schemaless instance the benchmark creates for
    /// itself.
    #[arg(long, default_value = "mzbench_worker")]
    instance: String,
}

/// Puts new trips with `concurrency` tasks for `length`; cells written
/// and the rows written.
async fn put_for(
    store: Arc<dyn CellStore>,
    concurrency: usize,
    batch: usize,
    length: Duration,
    seed: u64,
) -> anyhow::Result<(u64, Vec<RowKey>)> {
    let stop = Arc::new(AtomicBool::new(false));
    let tasks: Vec<_> = (0..concurrency)
        .map(|t| {
            let (store, stop) = (store.clone(), stop.clone());
            tokio::spawn(async move {
                let mut source = legacy::trips::TripCells::new(seed * 1000 + t as u64);
                let (mut cells, mut rows) = (0u64, Vec::new());
                while !stop.load(Ordering::Relaxed) {
                    let mut call = Vec::new();
                    for _ in 0..batch {
                        let trip = source.new_trip();
                        rows.push(trip[0].key.row_key);
                        call.extend(trip);
                    }
                    cells += call.len() as u64;
                    store.put_cells(call).await?;
                }
                Ok::<_, schemaless::Error>((cells, rows))
            })
        })
        .collect();
    tokio::time::sleep(length).await;
    stop.store(true, Ordering::Relaxed);
    let (mut cells, mut rows) = (0, Vec::new());
    for task in tasks {
        let (c, r) = task.await??;
        cells += c;
        rows.extend(r);
    }
    Ok((cells, rows))
}

/// Reads random rows' latest BASE cell with `concurrency` tasks for
/// `length`; the latency of each read.
async fn get_for(
    store: Arc<dyn CellStore>,
    rows: Arc<Vec<RowKey>>,
    concurrency: usize,
    length: Duration,
) -> anyhow::Result<Vec<Duration>> {
    let stop = Arc::new(AtomicBool::new(false));
    let column = Column::new("BASE")?;
    let tasks: Vec<_> = (0..concurrency)
        .map(|_| {
            let (store, stop, rows, column) =
                (store.clone(), stop.clone(), rows.clone(), column.clone());
            tokio::spawn(async move {
                let mut latencies = Vec::new();
                while !stop.load(Ordering::Relaxed) {
                    let row = rows[rand::rng().random_range(0..rows.len())];
                    let started = Instant::now();
                    let found = store
                        .get_cell_latest(&row, &column, ReadFrom::Master)
                        .await?;
                    latencies.push(started.elapsed());
                    if found.is_none() {
                        return Err(schemaless::Error::invalid(
                            "row",
                            format!("{row} was written and is not found"),
                        ));
                    }
                }
                Ok(latencies)
            })
        })
        .collect();
    tokio::time::sleep(length).await;
    stop.store(true, Ordering::Relaxed);
    let mut all = Vec::new();
    for task in tasks {
        all.extend(task.await??);
    }
    Ok(all)
}

pub async fn run(args: WorkerArgs, config_path: &Path, cluster_dir: &Path) -> anyhow::Result<()> {
    if args.concurrency == 0 || args.batch == 0 || args.seconds == 0 {
        return Err(crate::UsageError(
            "--concurrency, --batch and --seconds must be positive".into(),
        )
        .into());
    }
    let mut config =
        super::own_instance(config_path, &args.instance, args.concurrency as u32 + 16)?;
    config.mirror.relay_in_app = false;
    config.mirror.reverse_in_app = false;
    config.capture.required = false;
    config.worker.listen = "127.0.0.1:0".parse()?;
    config.worker.max_in_flight = config.worker.max_in_flight.max(args.concurrency * 2);
    super::fresh_data_set(&config, config_path, cluster_dir).await?;
    let linked = Arc::new(TripStore::connect(&config).await?);
    linked
        .set_mode(&ModeRequest {
            target: Mode::Schemaless,
            force: true,
            by: "mezzanine bench worker".into(),
            reason: Some("benchmark of the cell API over HTTP".into()),
        })
        .await?;
    let shutdown = CancellationToken::new();
    let served = worker::start(linked.clone(), &config, true, None, shutdown.clone()).await?;
    let http = Arc::new(
        client::Client::builder()
            .worker(&served.url())?
            .deadline(Duration::from_secs(30))
            .connect()
            .await?,
    );
    eprintln!("worker on {}; warming up ...", served.url());
    let half = Duration::from_millis(args.seconds * 500);
    let stores: [Arc<dyn CellStore>; 2] = [linked.clone(), http.clone()];
    put_for(
        stores[0].clone(),
        args.concurrency,
        args.batch,
        Duration::from_secs(1),
        1,
    )
    .await?;
    put_for(
        stores[1].clone(),
        args.concurrency,
        args.batch,
        Duration::from_secs(1),
        2,
    )
    .await?;

    let mut cells = [0u64; 2];
    let mut rows = Vec::new();
    for (round, path) in [0usize, 1, 1, 0].into_iter().enumerate() {
        eprintln!(
            "puts, round {}/4: {} ...",
            round + 1,
            ["linked", "http"][path]
        );
        let (c, r) = put_for(
            stores[path].clone(),
            args.concurrency,
            args.batch,
            half,
            10 + round as u64,
        )
        .await?;
        cells[path] += c;
        rows.extend(r);
    }
    let rows = Arc::new(rows);
    let mut latencies: [Vec<Duration>; 2] = Default::default();
    for (round, path) in [0usize, 1, 1, 0].into_iter().enumerate() {
        eprintln!(
            "reads, round {}/4: {} ...",
            round + 1,
            ["linked", "http"][path]
        );
        latencies[path]
            .extend(get_for(stores[path].clone(), rows.clone(), args.concurrency, half).await?);
    }
    shutdown.cancel();
    served.done.await?;
    linked.close().await;

    let seconds = args.seconds as f64;
    let put_rate = [cells[0] as f64 / seconds, cells[1] as f64 / seconds];
    let [linked_reads, http_reads] = latencies.map(Latencies::new);
    let figures = json!({
        "concurrency": args.concurrency,
        "batch_trips": args.batch,
        "seconds": args.seconds,
        "linked": {
            "put_cells_per_s": put_rate[0],
            "get_p50_us": linked_reads.percentile_us(50.0),
            "get_p99_us": linked_reads.percentile_us(99.0),
            "gets": linked_reads.len(),
        },
        "http": {
            "put_cells_per_s": put_rate[1],
            "get_p50_us": http_reads.percentile_us(50.0),
            "get_p99_us": http_reads.percentile_us(99.0),
            "gets": http_reads.len(),
        },
        "get_p50_ratio": http_reads.percentile_us(50.0) / linked_reads.percentile_us(50.0),
        "get_p99_ratio": http_reads.percentile_us(99.0) / linked_reads.percentile_us(99.0),
        "put_throughput_ratio": put_rate[1] / put_rate[0],
    });
    println!(
        "puts: linked {:.0} cells/s, http {:.0} cells/s (ratio {:.3}, target >= 0.8)",
        put_rate[0],
        put_rate[1],
        figures["put_throughput_ratio"].as_f64().unwrap_or_default()
    );
    println!(
        "get_cell_latest: linked p50 {:.0} us p99 {:.0} us; http p50 {:.0} us p99 {:.0} us (p50 ratio {:.3}, target <= 1.5)",
        linked_reads.percentile_us(50.0),
        linked_reads.percentile_us(99.0),
        http_reads.percentile_us(50.0),
        http_reads.percentile_us(99.0),
        figures["get_p50_ratio"].as_f64().unwrap_or_default()
    );
    if args.json {
        println!("{figures}");
    }
    Ok(())
}
