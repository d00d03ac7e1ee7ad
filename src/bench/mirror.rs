//! `mezzanine bench mirror`: what the outbox costs a facade write.
//!
//! The same writers (`--writers`, 32 by default) write trips through the
//! facade for the same time in mode `legacy` and in mode `mirror`, in
//! alternating rounds (legacy, mirror, legacy, mirror) so that the tables
//! growing and the caches warming favour neither. Each write is one
//! `put_cells` call: a new trip (BASE v1 and, for half the trips, a NOTES
//! cell) or that trip's BASE v2. The raw limit is `legacy` mode itself:
//! the target is a mirror p50 at most 1.15x the legacy p50.
//!
//! Two figures, because the relay's work lands on other machines in
//! production than here:
//!
//! - **the write path** (`p50_ratio`): the relay drains the outbox between
//!   rounds, never during one, so the figure is what the outbox costs the
//!   write itself;
//! - **with a relay running** in the same process during one more legacy
//!   and one more mirror round (`relay_running.p50_ratio`), as an app runs
//!   it. On the dev cluster the relay's Schemaless writes (a master and two
//!   minions per cluster applying them) take CPU from the cores PostgreSQL
//!   runs on, which a deployment with Schemaless on its own hosts does not
//!   pay.
//!
//! To tell the relay's own cost on PostgreSQL (taking and deleting outbox
//! batches) from that of its Schemaless writes on these shared cores, one
//! more legacy round runs with a Schemaless write load and no relay:
//! `put_cells` of fresh trips straight into the store, at the rate and in
//! batches of the mean size the relay moved during the mirror round.
//! `relay_running.p50_ratio_vs_schemaless_load` is the mirror round's p50
//! over that round's: what the relay costs the writes beyond its
//! Schemaless writes, which a deployment does not run on PostgreSQL's
//! host; `schemaless_load_p50_ratio` is what those writes alone cost the
//! legacy round here.
//!
//! Then the relay's own throughput: with the relay stopped, the writers
//! fill the outbox with `--backlog` cells, and one relay drains it.
//!
//! It runs on a database (`mzbench_mirror`) and a Schemaless instance of
//! its own, created afresh each run.

use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use clap::Args;
use schemaless::CellStore;
use serde_json::json;
use tokio_util::sync::CancellationToken;
use tripstore::{Mode, ModeRequest, TripStore};

use super::stats::Latencies;

#[derive(Args)]
pub struct MirrorArgs {
    /// Print one JSON object with every figure as the last line.
    #[arg(long)]
    json: bool,
    /// Concurrent writers, the same in both modes.
    #[arg(long, default_value_t = 32)]
    writers: u64,
    /// Seconds of writing per mode (split over two rounds each).
    #[arg(long, default_value_t = 10)]
    seconds: u64,
    /// Cells written to the outbox for the relay throughput run.
    #[arg(long, default_value_t = 20_000)]
    backlog: u64,
    /// The database and Schemaless instance the benchmark creates for
    /// itself.
    #[arg(long, default_value = "mzbench_mirror")]
    instance: String,
}

/// What one mode's rounds measured.
#[derive(Default)]
struct Round {
    latencies: Vec<Duration>,
    cells: u64,
    elapsed: Duration,
}

impl Round {
    fn add(&mut self, other: Round) {
        self.latencies.extend(other.latencies);
        self.cells += other.cells;
        self.elapsed += other.elapsed;
    }
}

/// Writes through `store` with `writers` tasks until `until`; returns each
/// call's latency and the cells written.
async fn write_for(
    store: &Arc<TripStore>,
    writers: u64,
    seed: u64,
    length: Duration,
) -> anyhow::Result<Round> {
    let stop = Arc::new(AtomicBool::new(false));
    let tasks: Vec<_> = (0..writers)
        .map(|w| {
            let (store, stop) = (store.clone(), stop.clone());
            tokio::spawn(async move {
                let mut source =
                    legacy::trips::TripCells::new(seed.wrapping_mul(7919).wrapping_add(w));
                let mut latencies = Vec::new();
                let mut cells = 0u64;
                while !stop.load(Ordering::Relaxed) {
                    let trip = source.new_trip();
                    let done = source.complete(&trip[0]);
                    cells += trip.len() as u64 + 1;
                    let started = Instant::now();
                    store.put_cells(trip).await?;
                    latencies.push(started.elapsed());
                    let started = Instant::now();
                    store.put_cell(done).await?;
                    latencies.push(started.elapsed());
                }
                Ok::<_, schemaless::Error>((latencies, cells))
            })
        })
        .collect();
    let started = Instant::now();
    tokio::time::sleep(length).await;
    stop.store(true, Ordering::Relaxed);
    let mut round = Round::default();
    for task in tasks {
        let (latencies, cells) = task.await??;
        round.latencies.extend(latencies);
        round.cells += cells;
    }
    round.elapsed = started.elapsed();
    Ok(round)
}

fn request(target: Mode) -> ModeRequest {
    ModeRequest {
        target,
        // Backwards is always allowed; forward from legacy to mirror is
        // gated on the schema, which is applied.
        force: false,
        by: "mezzanine bench mirror".into(),
        reason: Some("benchmark".into()),
    }
}

pub async fn run(args: MirrorArgs, config_path: &Path, cluster_dir: &Path) -> anyhow::Result<()> {
    if args.writers == 0 || args.seconds == 0 || args.backlog == 0 {
        return Err(crate::UsageError(
            "--writers, --seconds and --backlog must be positive".into(),
        )
        .into());
    }
    let mut config = super::own_instance(config_path, &args.instance, args.writers as u32 + 8)?;
    // The relay is run by hand below, so it can be paused.
    config.mirror.relay_in_app = false;
    // What the outbox costs, alone: capture is not installed (with it, the
    // legacy rounds' writes would pay for the triggers and the mirror
    // rounds' would skip them), so the gate must not ask for it.
    // `bench capture` measures capture.
    config.capture.required = false;
    config.mirror.reverse_in_app = false;
    let pool = super::fresh_data_set(&config, config_path, cluster_dir).await?;

    let store = Arc::new(TripStore::connect(&config).await?);
    eprintln!("warming up ...");
    write_for(&store, args.writers, 1, Duration::from_secs(1)).await?;
    let half = Duration::from_millis(args.seconds * 500);

    // The write path: the relay drains between rounds, never during one.
    let mut legacy_round = Round::default();
    let mut mirror_round = Round::default();
    let mut max_depth = 0;
    for (i, mode) in [Mode::Legacy, Mode::Mirror, Mode::Legacy, Mode::Mirror]
        .into_iter()
        .enumerate()
    {
        store.set_mode(&request(mode)).await?;
        eprintln!(
            "round {}: {} writers in mode {mode} for {:.1}s, relay between rounds ...",
            i + 1,
            args.writers,
            half.as_secs_f64()
        );
        let round = write_for(&store, args.writers, 10 + i as u64, half).await?;
        max_depth = max_depth.max(mirror::status::outbox(&pool).await?.0);
        store.relay().drain().await?;
        if mode == Mode::Legacy {
            &mut legacy_round
        } else {
            &mut mirror_round
        }
        .add(round);
    }

    // As apps run it: a relay in the same process throughout.
    let cancel = CancellationToken::new();
    let relaying = {
        let store = store.clone();
        let cancel = cancel.clone();
        let (on, enabled) = tokio::sync::watch::channel(true);
        tokio::spawn(async move {
            store.relay().run(cancel, enabled).await;
            drop(on);
        })
    };
    let mut legacy_live = Round::default();
    let mut mirror_live = Round::default();
    let relayed_before = mirror::WorkerStats::get(&store.relay_stats().cells);
    let batches_before = mirror::WorkerStats::get(&store.relay_stats().batches);
    for (i, mode) in [Mode::Legacy, Mode::Mirror].into_iter().enumerate() {
        store.set_mode(&request(mode)).await?;
        eprintln!(
            "round {}: {} writers in mode {mode} for {:.1}s, relay running ...",
            i + 5,
            args.writers,
            half.as_secs_f64()
        );
        let round = write_for(&store, args.writers, 20 + i as u64, half).await?;
        max_depth = max_depth.max(mirror::status::outbox(&pool).await?.0);
        if mode == Mode::Legacy {
            &mut legacy_live
        } else {
            &mut mirror_live
        }
        .add(round);
    }
    let drain_started = Instant::now();
    while mirror::status::outbox(&pool).await?.0 > 0 {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let relayed_during = mirror::WorkerStats::get(&store.relay_stats().cells) - relayed_before;
    let relay_batches = mirror::WorkerStats::get(&store.relay_stats().batches) - batches_before;
    // The relay's mean batch: the load below writes batches of this size,
    // since a master's cost per cell falls with cells per statement.
    let relay_batch = (relayed_during as f64 / relay_batches.max(1) as f64).max(1.0);
    let relay_during_rate =
        relayed_during as f64 / (mirror_live.elapsed + drain_started.elapsed()).as_secs_f64();
    cancel.cancel();
    relaying.await?;

    // The relay's Schemaless writes alone, at its rate, during a legacy
    // round.
    store.set_mode(&request(Mode::Legacy)).await?;
    eprintln!(
        "round 7: {} writers in mode legacy for {:.1}s, {relay_during_rate:.0} cells/s written to Schemaless beside them in batches of {relay_batch:.0}, no relay ...",
        args.writers,
        half.as_secs_f64()
    );
    let loading = Arc::new(AtomicBool::new(true));
    let load = {
        let (store, loading) = (store.clone(), loading.clone());
        let per_tick = relay_batch.round() as usize;
        let every = Duration::from_secs_f64(per_tick as f64 / relay_during_rate.max(1.0));
        tokio::spawn(async move {
            let mut source = legacy::trips::TripCells::new(777);
            let mut tick = tokio::time::interval(every);
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
            let mut written = 0u64;
            while loading.load(Ordering::Relaxed) {
                tick.tick().await;
                let mut batch = Vec::with_capacity(per_tick + 2);
                while batch.len() < per_tick {
                    batch.extend(source.new_trip());
                }
                written += batch.len() as u64;
                store.schemaless().put_cells(batch).await?;
            }
            anyhow::Ok(written)
        })
    };
    let legacy_loaded = write_for(&store, args.writers, 30, half).await;
    loading.store(false, Ordering::Relaxed);
    let loaded_cells = load.await??;
    let legacy_loaded = legacy_loaded?;
    let schemaless_load_rate = loaded_cells as f64 / legacy_loaded.elapsed.as_secs_f64();
    // The backlog below is written in mirror.
    store.set_mode(&request(Mode::Mirror)).await?;

    // The relay alone: a backlog, then one relay drains it.
    eprintln!(
        "filling the outbox with {} cells, relay stopped ...",
        args.backlog
    );
    while mirror::status::outbox(&pool).await?.0 < args.backlog {
        write_for(&store, args.writers, 99, Duration::from_millis(500)).await?;
    }
    let backlog = mirror::status::outbox(&pool).await?.0;
    let started = Instant::now();
    let moved = store.relay().drain().await?;
    let relay_rate = moved.delivered as f64 / started.elapsed().as_secs_f64();

    let report = |name: &str, round: &Round| {
        let l = Latencies::new(round.latencies.clone());
        let (p50, p99) = (l.percentile_us(50.0), l.percentile_us(99.0));
        let rate = l.len() as f64 / round.elapsed.as_secs_f64();
        println!(
            "{name:<8} p50 {:>7.2} ms  p99 {:>7.2} ms  {rate:>7.0} writes/s  {:>7.0} cells/s  ({} writes)",
            p50 / 1000.0,
            p99 / 1000.0,
            round.cells as f64 / round.elapsed.as_secs_f64(),
            l.len()
        );
        (p50, p99, rate, l.len())
    };
    println!(
        "facade writes, {} writers, {}s per mode, the relay draining between rounds:",
        args.writers, args.seconds
    );
    let (lp50, lp99, lrate, ln) = report("legacy", &legacy_round);
    let (mp50, mp99, mrate, mn) = report("mirror", &mirror_round);
    let (p50_ratio, p99_ratio) = (mp50 / lp50, mp99 / lp99);
    println!(
        "mirror / legacy: p50 {p50_ratio:.3}x  p99 {p99_ratio:.3}x  throughput {:.3}x  (target p50 <= 1.15x)",
        mrate / lrate
    );
    println!(
        "facade writes, {} writers, {:.0}s per mode, a relay running in the same process:",
        args.writers,
        half.as_secs_f64()
    );
    let (llp50, llp99, llrate, _) = report("legacy", &legacy_live);
    let (mlp50, mlp99, mlrate, _) = report("mirror", &mirror_live);
    println!(
        "mirror / legacy: p50 {:.3}x  p99 {:.3}x  throughput {:.3}x  (the relay's Schemaless writes share these cores)",
        mlp50 / llp50,
        mlp99 / llp99,
        mlrate / llrate
    );
    let (lsp50, lsp99, lsrate, _) = report("legacy+", &legacy_loaded);
    println!(
        "legacy+: legacy with {schemaless_load_rate:.0} cells/s written to Schemaless beside it, no relay: p50 {:.3}x legacy; mirror with the relay against it: p50 {:.3}x  p99 {:.3}x  (the relay's own cost on PostgreSQL; target 1.15x)",
        lsp50 / llp50,
        mlp50 / lsp50,
        mlp99 / lsp99,
    );
    println!(
        "relay during the load {relay_during_rate:>8.0} cells/s (outbox at most {max_depth} entries at a round's end)"
    );
    println!(
        "relay alone           {relay_rate:>8.0} cells/s ({} of a {backlog}-entry backlog, {} shards)",
        moved.delivered, config.instance.shard_count
    );
    if args.json {
        println!(
            "{}",
            json!({
                "writers": args.writers,
                "seconds_per_mode": args.seconds,
                "legacy": {"p50_us": lp50, "p99_us": lp99, "writes_per_s": lrate, "writes": ln},
                "mirror": {"p50_us": mp50, "p99_us": mp99, "writes_per_s": mrate, "writes": mn},
                "p50_ratio": p50_ratio,
                "p99_ratio": p99_ratio,
                "throughput_ratio": mrate / lrate,
                "relay_running": {
                    "legacy": {"p50_us": llp50, "p99_us": llp99, "writes_per_s": llrate},
                    "mirror": {"p50_us": mlp50, "p99_us": mlp99, "writes_per_s": mlrate},
                    "p50_ratio": mlp50 / llp50,
                    "p99_ratio": mlp99 / llp99,
                    "throughput_ratio": mlrate / llrate,
                    "legacy_schemaless_load": {"p50_us": lsp50, "p99_us": lsp99, "writes_per_s": lsrate, "schemaless_cells_per_s": schemaless_load_rate},
                    "schemaless_load_p50_ratio": lsp50 / llp50,
                    "p50_ratio_vs_schemaless_load": mlp50 / lsp50,
                    "p99_ratio_vs_schemaless_load": mlp99 / lsp99,
                },
                "relay_during_load_cells_per_s": relay_during_rate,
                "relay_during_load_mean_batch": relay_batch,
                "relay_cells_per_s": relay_rate,
                "relay_backlog": backlog,
                "outbox_max_depth": max_depth,
            })
        );
    }
    store.close().await;
    pool.close().await;
    Ok(())
}
