//! `mezzanine bench verify`: what sampling costs a facade read, and how
//! fast the full diff goes.
//!
//! A data set of `--trips` seeded trips is backfilled, the facade is put
//! in mode `mirror` (reads served by PostgreSQL, samples replayed on
//! Schemaless), and `--readers` tasks read random trips' latest BASE cell.
//!
//! First, without sampling and as fast as they can, to find the read
//! throughput the servers allow (the saturation point). Then at a steady
//! `--load` share of it (default 0.5: an app with headroom; latency at
//! saturation is queueing, not the cost of a read) for the same time with
//! sampling at 0%, 1% and 100%, in three cycles of the rounds 0%, 1%,
//! 100%, 100%, 1%, 0% so that warming caches and noise favour none. The raw limit is the 0% rounds:
//! the target is a p99 at 100% within 5% of it. At 100% the per-facade cap
//! (`--max-per-sec`, default `verify.max_samples_per_sec`) bounds the
//! replay work, as in production. Everything (the benchmark, PostgreSQL,
//! the MariaDB nodes, the replays) shares this machine's cores.
//!
//! What the replays cost the served reads here is mostly their database
//! work, on the same cores. To tell that from the sampler's own cost, a
//! fourth kind of round runs at 0% with a raw background load of the
//! same database work: on a thread and connection pools of its own (as
//! the replays have), `get_cell_latest` of random trips on Schemaless at
//! the rate the 100% rounds replay (`min(cap, paced rate)`), with no
//! sampler, queue, comparison or bookkeeping. `p99_ratio_raw_load` is what
//! that load alone does to the served reads' p99 (the ceiling of
//! `p99_ratio_100` on this machine), and `p99_ratio_100_vs_raw_load` what
//! sampling costs beyond it.
//!
//! Then `verify full` over the whole data set, in parents per second.
//!
//! It runs on a database (`mzbench_verify`) and a Schemaless instance of
//! its own, created afresh each run.

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
use verifier::store::Settings;

use super::stats::Latencies;

/// Cycles of measured rounds.
const CYCLES: usize = 3;

#[derive(Args)]
pub struct VerifyArgs {
    /// Print one JSON object with every figure as the last line.
    #[arg(long)]
    json: bool,
    /// Trips in the data set.
    #[arg(long, default_value_t = 20_000)]
    trips: u64,
    /// Concurrent readers, the same at every rate.
    #[arg(long, default_value_t = 16)]
    readers: u64,
    /// Seconds of reading per rate (split over two rounds each).
    #[arg(long, default_value_t = 10)]
    seconds: u64,
    /// The steady read rate of the measured rounds, as a share of the
    /// saturation throughput measured first (0 < load <= 1).
    #[arg(long, default_value_t = 0.5)]
    load: f64,
    /// Samples per second at most (default: verify.max_samples_per_sec).
    #[arg(long)]
    max_per_sec: Option<u64>,
    /// The database and Schemaless instance the benchmark creates for
    /// itself.
    #[arg(long, default_value = "mzbench_verify")]
    instance: String,
}

/// Reads with `readers` tasks for `length`, each as fast as it can or, with
/// `pace` (reads per second over all readers), at a steady rate; returns
/// each read's latency.
async fn read_for(
    store: &Arc<TripStore>,
    rows: &Arc<Vec<RowKey>>,
    readers: u64,
    length: Duration,
    pace: Option<f64>,
) -> anyhow::Result<Vec<Duration>> {
    let stop = Arc::new(AtomicBool::new(false));
    let base = Column::new("BASE")?;
    let tasks: Vec<_> = (0..readers)
        .map(|_| {
            let (store, stop, rows, base) =
                (store.clone(), stop.clone(), rows.clone(), base.clone());
            tokio::spawn(async move {
                let mut latencies = Vec::new();
                let mut tick = pace.map(|rate| {
                    let mut t =
                        tokio::time::interval(Duration::from_secs_f64(readers as f64 / rate));
                    t.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
                    t
                });
                while !stop.load(Ordering::Relaxed) {
                    if let Some(t) = tick.as_mut() {
                        t.tick().await;
                    }
                    let row = rows[rand::rng().random_range(0..rows.len())];
                    let started = Instant::now();
                    store.get_cell_latest(&row, &base, ReadFrom::Master).await?;
                    latencies.push(started.elapsed());
                }
                Ok::<_, schemaless::Error>(latencies)
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

pub async fn run(args: VerifyArgs, config_path: &Path, cluster_dir: &Path) -> anyhow::Result<()> {
    if !(args.load > 0.0 && args.load <= 1.0) {
        return Err(crate::UsageError("--load must be in (0, 1]".into()).into());
    }
    if args.trips == 0 || args.readers == 0 || args.seconds == 0 || args.max_per_sec == Some(0) {
        return Err(crate::UsageError(
            "--trips, --readers, --seconds and --max-per-sec must be positive".into(),
        )
        .into());
    }
    let mut config = super::own_instance(config_path, &args.instance, args.readers as u32 + 16)?;
    config.mirror.relay_in_app = false;
    // Reads are measured; no plain SQL writer runs, so capture is not
    // installed and the gate must not ask for it.
    config.capture.required = false;
    config.mirror.reverse_in_app = false;
    let cap = args
        .max_per_sec
        .unwrap_or(config.verify.max_samples_per_sec);
    let layout = legacy::connection::layout_config(&config)?.clone();
    let pool = super::fresh_data_set(&config, config_path, cluster_dir).await?;
    eprintln!("seeding {} trips ...", args.trips);
    legacy::trips::seed(&pool, &layout.schema, &layout.uuid, args.trips, 42, |_| {}).await?;

    let store = Arc::new(TripStore::connect(&config).await?);
    store
        .set_mode(&ModeRequest {
            target: Mode::Mirror,
            force: false,
            by: "mezzanine bench verify".into(),
            reason: Some("benchmark".into()),
        })
        .await?;
    eprintln!("backfilling ...");
    backfill::plan::create(store.legacy(), config.backfill.chunk_size, true, "bench").await?;
    let runner = backfill::Backfill::new(
        store.legacy().clone(),
        store.schemaless().clone(),
        &config,
        backfill::Options::from_config(&config.backfill),
    );
    anyhow::ensure!(
        runner.run(CancellationToken::new()).await?,
        "the backfill did not finish"
    );
    let uuids: Vec<uuid::Uuid> = sqlx::query_scalar(sqlx::AssertSqlSafe(format!(
        "SELECT {} FROM {}.trips",
        layout.uuid, layout.schema
    )))
    .fetch_all(&pool)
    .await?;
    let rows: Arc<Vec<RowKey>> = Arc::new(
        uuids
            .iter()
            .map(|u| RowKey::parse(&u.to_string()))
            .collect::<Result<_, _>>()?,
    );

    eprintln!("warming up ...");
    store.sampler().set(Settings {
        sample_rate: 0.0,
        max_samples_per_sec: cap,
    });
    read_for(&store, &rows, args.readers, Duration::from_secs(1), None).await?;
    let half = Duration::from_millis(args.seconds * 500);
    let saturation = read_for(&store, &rows, args.readers, half, None).await?;
    let saturation_rps = saturation.len() as f64 / half.as_secs_f64();
    let pace = saturation_rps * args.load;
    println!(
        "saturation: {saturation_rps:.0} reads/s (closed loop, no sampling); measured rounds at {pace:.0} reads/s ({}%)",
        args.load * 100.0
    );
    // Slots: sampling at 0%, 1% and 100%, and 0% under the raw load.
    let rates = [0.0, 0.01, 1.0, 0.0];
    const RAW_LOAD: usize = 3;
    let raw_rate = (cap as f64).min(pace);
    let mut latencies: [Vec<Duration>; 4] = Default::default();
    let before = verifier::report::read(&pool, None, None).await?.totals;
    // Three cycles of 0%, 1%, 100%, raw load, raw load, 100%, 1%, 0%: this
    // machine's noise (every server shares its cores) moves a p99 more
    // than one round can average out.
    let order: Vec<usize> =
        std::iter::repeat_n([0usize, 1, 2, RAW_LOAD, RAW_LOAD, 2, 1, 0], CYCLES)
            .flatten()
            .collect();
    let round_length = Duration::from_secs_f64(args.seconds as f64 / (2 * CYCLES) as f64);
    for (round, &slot) in order.iter().enumerate() {
        let rate = rates[slot];
        store.sampler().set(Settings {
            sample_rate: rate,
            max_samples_per_sec: cap,
        });
        eprintln!(
            "round {}/{}: {} readers, sampling {}% (at most {cap}/s){}, {:.1}s ...",
            round + 1,
            order.len(),
            args.readers,
            rate * 100.0,
            if slot == RAW_LOAD {
                format!(", a raw load of {raw_rate:.0} Schemaless reads/s")
            } else {
                String::new()
            },
            round_length.as_secs_f64()
        );
        let raw_load = (slot == RAW_LOAD)
            .then(|| RawLoad::start(config.clone(), rows.clone(), raw_rate))
            .transpose()?;
        let measured = read_for(&store, &rows, args.readers, round_length, Some(pace)).await;
        if let Some(load) = raw_load {
            load.stop()?;
        }
        latencies[slot].extend(measured?);
        // Let the replays of this round finish before the next.
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    store.sampler().set(Settings {
        sample_rate: 0.0,
        max_samples_per_sec: cap,
    });
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let after = verifier::report::read(&pool, None, None).await?.totals;
    let figures: Vec<Latencies> = latencies.into_iter().map(Latencies::new).collect();
    let reads_per_s = |l: &Latencies| l.len() as f64 / args.seconds as f64;
    for (slot, (rate, l)) in rates.iter().zip(&figures).enumerate() {
        println!(
            "sampling {:>5.1}%{}: {} reads ({:.0}/s), p50 {:.0} us, p99 {:.0} us",
            rate * 100.0,
            if slot == RAW_LOAD { " + raw load" } else { "" },
            l.len(),
            reads_per_s(l),
            l.percentile_us(50.0),
            l.percentile_us(99.0)
        );
    }
    let ratio = |i: usize, p: f64| figures[i].percentile_us(p) / figures[0].percentile_us(p);
    let samples = after.samples - before.samples;
    let mismatches = after.mismatches - before.mismatches;
    let dropped = after.dropped - before.dropped;
    println!(
        "p99 at 100% / p99 at 0%: {:.3} (target <= 1.05); at 1%: {:.3}; p50 ratios {:.3} and {:.3}",
        ratio(2, 99.0),
        ratio(1, 99.0),
        ratio(2, 50.0),
        ratio(1, 50.0)
    );
    println!(
        "under the raw load alone (0%, {raw_rate:.0} Schemaless reads/s on a thread of their own): p99 ratio {:.3}, p50 ratio {:.3}; 100% against it: p99 {:.3}, p50 {:.3}",
        ratio(RAW_LOAD, 99.0),
        ratio(RAW_LOAD, 50.0),
        figures[2].percentile_us(99.0) / figures[RAW_LOAD].percentile_us(99.0),
        figures[2].percentile_us(50.0) / figures[RAW_LOAD].percentile_us(50.0),
    );
    println!(
        "samples replayed and compared: {samples} ({mismatches} mismatches, {dropped} dropped on a full queue)"
    );

    eprintln!("full diff ...");
    let legacy = store.legacy().clone();
    let id = verifier::full::plan(
        &pool,
        &legacy,
        store.schemaless().topology().shard_count,
        config.verify.chunk_size,
        true,
    )
    .await?;
    let diff = tripstore::triage::full_diff(&legacy, store.schemaless(), &config);
    let started = Instant::now();
    let status = diff
        .run(
            id,
            config.verify.workers,
            &verifier::full::Progress::default(),
            &CancellationToken::new(),
        )
        .await?;
    let secs = started.elapsed().as_secs_f64();
    let parents_per_s = status.parents as f64 / secs;
    println!(
        "full diff: {} parents, {} cells in {secs:.1}s: {parents_per_s:.0} parents/s, {:.0} cells/s, {} mismatches ({} workers, chunks of {})",
        status.parents,
        status.cells,
        status.cells as f64 / secs,
        status.mismatches,
        config.verify.workers,
        config.verify.chunk_size
    );
    if args.json {
        let rate_json = |i: usize| {
            json!({
                "rate": rates[i],
                "reads": figures[i].len(),
                "p50_us": figures[i].percentile_us(50.0),
                "p99_us": figures[i].percentile_us(99.0),
            })
        };
        println!(
            "{}",
            json!({
                "trips": args.trips,
                "readers": args.readers,
                "max_samples_per_sec": cap,
                "saturation_reads_per_s": saturation_rps,
                "load": args.load,
                "paced_reads_per_s": pace,
                "rate_0": rate_json(0),
                "rate_1": rate_json(1),
                "rate_100": rate_json(2),
                "rate_0_raw_load": rate_json(RAW_LOAD),
                "raw_load_reads_per_s": raw_rate,
                "p99_ratio_raw_load": ratio(RAW_LOAD, 99.0),
                "p50_ratio_raw_load": ratio(RAW_LOAD, 50.0),
                "p99_ratio_100_vs_raw_load":
                    figures[2].percentile_us(99.0) / figures[RAW_LOAD].percentile_us(99.0),
                "p50_ratio_100_vs_raw_load":
                    figures[2].percentile_us(50.0) / figures[RAW_LOAD].percentile_us(50.0),
                "p99_ratio_100": ratio(2, 99.0),
                "p99_ratio_1": ratio(1, 99.0),
                "p50_ratio_100": ratio(2, 50.0),
                "p50_ratio_1": ratio(1, 50.0),
                "samples": samples,
                "mismatches": mismatches,
                "dropped": dropped,
                "diff_parents": status.parents,
                "diff_cells": status.cells,
                "diff_seconds": secs,
                "diff_parents_per_s": parents_per_s,
                "diff_mismatches": status.mismatches,
            })
        );
    }
    store.close().await;
    pool.close().await;
    anyhow::ensure!(
        mismatches == 0 && status.mismatches == 0,
        "the verifier found mismatches in a consistent data set"
    );
    Ok(())
}

/// The replays' database work without the sampler: Schemaless reads of
/// random trips at a steady rate, on a thread with a runtime and
/// connection pools of its own, as the replays have.
struct RawLoad {
    stop: Arc<AtomicBool>,
    thread: std::thread::JoinHandle<anyhow::Result<u64>>,
}

impl RawLoad {
    fn start(config: config::Config, rows: Arc<Vec<RowKey>>, rate: f64) -> anyhow::Result<RawLoad> {
        let stop = Arc::new(AtomicBool::new(false));
        let stopping = stop.clone();
        let thread = std::thread::Builder::new()
            .name("mz-raw-load".into())
            .spawn(move || {
                let runtime = tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()?;
                runtime.block_on(async move {
                    let store = schemaless::MySqlStore::connect(&config)?;
                    let base = Column::new("BASE")?;
                    let mut tick = tokio::time::interval(Duration::from_secs_f64(1.0 / rate));
                    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
                    let mut reads = 0u64;
                    while !stopping.load(Ordering::Relaxed) {
                        tick.tick().await;
                        let row = rows[rand::rng().random_range(0..rows.len())];
                        store.get_cell_latest(&row, &base, ReadFrom::Master).await?;
                        reads += 1;
                    }
                    store.close().await;
                    Ok(reads)
                })
            })?;
        Ok(RawLoad { stop, thread })
    }

    fn stop(self) -> anyhow::Result<u64> {
        self.stop.store(true, Ordering::Relaxed);
        self.thread
            .join()
            .map_err(|_| anyhow::anyhow!("the raw load's thread panicked"))?
    }
}
