//! `mezzanine bench capture`: what capture costs a plain SQL write, and how
//! long a captured change takes to be readable in Schemaless.
//!
//! **The write path.** The same writers (`--writers`, 8 by default) run
//! plain SQL transactions against the legacy tables (not through the
//! facade: this is the app that is not rewritten yet) for the same time
//! with capture off and on, in `--rounds` alternating pairs of rounds
//! (off, on, off, on, ...) so that the tables growing, the caches warming
//! and the machine's own drift favour neither; capture is installed and
//! uninstalled between rounds, online. Between rounds the relay delivers
//! the queue, the minions catch up and PostgreSQL checkpoints, so that no
//! round pays for the one before. The raw limit is capture off. A write is
//! one transaction of an app's kind:
//!
//! - 40%: a trip's status and version (`UPDATE trips ... version + 1`);
//! - 30%: a note added to a trip (`INSERT INTO trip_notes`);
//! - 30%: a new trip with its first note (two `INSERT`s, one
//!   transaction).
//!
//! The relay delivers the queue between rounds, never during one, so
//! `write_p50_ratio` (on / off) is what the triggers cost the write
//! itself. Target: at most 1.15.
//!
//! **The lag.** With capture on and a relay running in this process (as
//! every facade runs one), `--rate` writes per second (500 by default) of
//! the first kind; for one write in ten a prober reads the trip's BASE from
//! the Schemaless master every 2 ms until it shows the new version. The
//! lag runs from the commit's acknowledgement to that read. Target: p99 at
//! most 1 s.
//!
//! Both methods (`capture.method`) are measured, interleaved with capture
//! off in every round (off, triggers, logical, off, ...), logical
//! decoding only where `wal_level = logical`. The headline keys
//! (`write_p50_ratio`, `lag_p99_ms`, ...) are the configured method's; each
//! method's own are under `triggers` and `logical`.
//!
//! It runs on a database (`mzbench_capture`) and a Schemaless instance of
//! its own, created afresh each run.
//!
//! Its rooms: `writers` (the round's load) and `lag` (the probes); this
//! file runs the rounds and reports.

use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use clap::Args;
use config::CaptureMethod;
use legacy::LegacyStore;
use mirror::Relay;
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use schemaless::{CellStore, Column, MySqlStore, ReadFrom, RowKey};
use serde_json::json;
use sqlx::PgPool;
use tokio_util::sync::CancellationToken;

use super::stats::Latencies;

mod lag;
mod writers;

use lag::measure_lag;
use writers::{write_for, Round};

#[derive(Args)]
pub struct CaptureArgs {
    /// Print one JSON object with every figure as the last line.
    #[arg(long)]
    json: bool,
    /// Concurrent plain SQL writers in the write rounds, the same with
    /// capture off and on.
    #[arg(long, default_value_t = 8)]
    writers: u64,
    /// Seconds of writing with capture off, and as many on.
    #[arg(long, default_value_t = 10)]
    seconds: u64,
    /// Pairs of rounds (off, on) the seconds are split into.
    #[arg(long, default_value_t = 5)]
    rounds: u64,
    /// Writes per second while the lag is measured.
    #[arg(long, default_value_t = 500)]
    rate: u64,
    /// Seconds of the lag measurement.
    #[arg(long, default_value_t = 10)]
    lag_seconds: u64,
    /// Trips seeded first (the writes update them and add notes).
    #[arg(long, default_value_t = 20_000)]
    trips: u64,
    /// The database and Schemaless instance the benchmark creates for
    /// itself.
    #[arg(long, default_value = "mzbench_capture")]
    instance: String,
}

/// One capture method under test: its config and its relay.
struct Method {
    method: CaptureMethod,
    config: config::Config,
    relay: Arc<Relay>,
}

impl Method {
    fn new(
        method: CaptureMethod,
        config: &config::Config,
        legacy: &LegacyStore,
        schemaless: &MySqlStore,
    ) -> anyhow::Result<Method> {
        let mut config = config.clone();
        config.capture.method = method;
        let relay = Arc::new(Relay::new(legacy, Arc::new(schemaless.clone()), &config)?);
        Ok(Method {
            method,
            config,
            relay,
        })
    }
}

pub async fn run(args: CaptureArgs, config_path: &Path, cluster_dir: &Path) -> anyhow::Result<()> {
    if args.writers == 0
        || args.seconds == 0
        || args.rounds == 0
        || args.rate == 0
        || args.lag_seconds == 0
    {
        return Err(crate::UsageError(
            "--writers, --seconds, --rounds, --rate and --lag-seconds must be positive".into(),
        )
        .into());
    }
    if args.trips == 0 {
        return Err(crate::UsageError("--trips must be positive".into()).into());
    }
    let config = super::own_instance(config_path, &args.instance, args.writers as u32 + 24)?;
    let pool = super::fresh_data_set(&config, config_path, cluster_dir).await?;
    let spec = crate::cluster::spec_from_config(config_path, 55432)?;
    let cluster = crate::cluster::up(cluster_dir, spec).await?;
    let layout = legacy::connection::layout_config(&config)?;
    eprintln!("seeding {} trips ...", args.trips);
    legacy::trips::seed(&pool, &layout.schema, &layout.uuid, args.trips, 5, |_| {}).await?;
    sqlx::raw_sql(sqlx::AssertSqlSafe(format!(
        "CREATE SEQUENCE IF NOT EXISTS {}.mzbench_note_seq START 1000000",
        legacy::layout::quote(&layout.schema)
    )))
    .execute(&pool)
    .await?;
    mirror::schema::ensure(&pool).await?;
    let legacy = LegacyStore::connect(&config).await?;
    let schemaless = MySqlStore::connect(&config)?;
    let lock_timeout = Duration::from_millis(config.capture.lock_timeout_ms);
    // Both methods, the configured one first; logical decoding only where
    // the server allows it.
    let wal_level: String = sqlx::query_scalar("SELECT current_setting('wal_level')")
        .fetch_one(&pool)
        .await?;
    let mut methods = vec![config.capture.method];
    for other in [CaptureMethod::Triggers, CaptureMethod::Logical] {
        if !methods.contains(&other) && (other != CaptureMethod::Logical || wal_level == "logical")
        {
            methods.push(other);
        }
    }
    if !methods.contains(&CaptureMethod::Logical) {
        eprintln!("wal_level is {wal_level}: logical decoding is not measured");
    }
    let setups: Vec<Method> = methods
        .iter()
        .map(|m| Method::new(*m, &config, &legacy, &schemaless))
        .collect::<anyhow::Result<_>>()?;

    eprintln!("warming up ...");
    write_for(&pool, args.writers, args.trips, 1, Duration::from_secs(1)).await?;
    let length = Duration::from_millis(args.seconds * 1000 / args.rounds);
    let mut off = Round::default();
    let mut on: Vec<Round> = setups.iter().map(|_| Round::default()).collect();
    let mut captured = vec![0u64; setups.len()];
    // Rounds: off, then each method, `rounds` times over.
    let sides =
        (0..args.rounds).flat_map(|_| std::iter::once(None).chain((0..setups.len()).map(Some)));
    let total = args.rounds as usize * (setups.len() + 1);
    for (i, side) in sides.enumerate() {
        match side {
            Some(m) => {
                mirror::capture::install::install(
                    &pool,
                    legacy.layout(),
                    &setups[m].config.capture,
                )
                .await?;
            }
            None => {
                mirror::capture::install::uninstall(&pool, lock_timeout).await?;
            }
        }
        eprintln!(
            "round {} of {total}: {} plain SQL writers, capture {} for {:.1}s ...",
            i + 1,
            args.writers,
            side.map_or("off", |m| setups[m].method.as_str()),
            length.as_secs_f64()
        );
        let round = write_for(&pool, args.writers, args.trips, 10 + i as u64, length).await?;
        if let Some(m) = side {
            captured[m] += setups[m].relay.drain().await?.captured.entries;
        }
        cluster.wait_all_caught_up(Duration::from_secs(600)).await?;
        // Without the privilege (pg_checkpoint) rounds simply run on.
        let _ = sqlx::query("CHECKPOINT").execute(&pool).await;
        match side {
            Some(m) => on[m].add(round),
            None => off.add(round),
        }
    }

    // The lag: capture on, a relay running, a steady rate; per method.
    let mut lags = Vec::new();
    for setup in &setups {
        mirror::capture::install::install(&pool, legacy.layout(), &setup.config.capture).await?;
        setup.relay.drain().await?;
        let cancel = CancellationToken::new();
        let relaying = {
            let (relay, cancel) = (setup.relay.clone(), cancel.clone());
            let (on, enabled) = tokio::sync::watch::channel(true);
            tokio::spawn(async move {
                relay.run(cancel, enabled).await;
                drop(on);
            })
        };
        eprintln!(
            "lag, capture by {}: {} writes/s for {}s with a relay running, one in ten probed ...",
            setup.method.as_str(),
            args.rate,
            args.lag_seconds
        );
        let measured = measure_lag(
            &pool,
            &schemaless,
            args.rate,
            Duration::from_secs(args.lag_seconds),
            args.trips,
        )
        .await;
        cancel.cancel();
        relaying.await?;
        lags.push(measured?);
    }
    // Leave nothing installed: a slot would hold the server's WAL.
    mirror::capture::install::uninstall(&pool, lock_timeout).await?;

    let (op50, op99, orate, off_writes) = off.figures();
    println!(
        "plain SQL writes, {} writers, {}s each way in {} rounds, the relay delivering between rounds:",
        args.writers, args.seconds, args.rounds
    );
    println!(
        "capture off          p50 {:>7.2} ms  p99 {:>7.2} ms  {orate:>7.0} writes/s  ({off_writes} writes)",
        op50 / 1000.0,
        op99 / 1000.0
    );
    let mut figures = serde_json::Map::new();
    for (m, setup) in setups.iter().enumerate() {
        let (np50, np99, nrate, nn) = on[m].figures();
        let (lag_list, written, elapsed, timeouts) = &lags[m];
        let lag = Latencies::new(lag_list.clone());
        let (lag_p50, lag_p99) = (
            lag.percentile_us(50.0) / 1000.0,
            lag.percentile_us(99.0) / 1000.0,
        );
        let achieved = *written as f64 / elapsed.as_secs_f64();
        let name = setup.method.as_str();
        println!(
            "capture by {name:<9} p50 {:>7.2} ms  p99 {:>7.2} ms  {nrate:>7.0} writes/s  ({nn} writes)",
            np50 / 1000.0,
            np99 / 1000.0
        );
        println!(
            "  on / off: p50 {:.3}x  p99 {:.3}x  throughput {:.3}x  (target p50 <= 1.15x); {} changes captured",
            np50 / op50,
            np99 / op99,
            nrate / orate,
            captured[m]
        );
        println!(
            "  lag, commit to visible in Schemaless, at {achieved:.0} writes/s (asked {}): p50 {lag_p50:.1} ms  p99 {lag_p99:.1} ms  ({} probes, {timeouts} not visible within 10 s; target p99 <= 1000 ms)",
            args.rate,
            lag.len()
        );
        figures.insert(
            name.into(),
            json!({
                "p50_us": np50, "p99_us": np99, "writes_per_s": nrate, "writes": nn,
                "write_p50_ratio": np50 / op50,
                "write_p99_ratio": np99 / op99,
                "throughput_ratio": nrate / orate,
                "captured_changes": captured[m],
                "lag_rate_achieved": achieved,
                "lag_p50_ms": lag_p50,
                "lag_p99_ms": lag_p99,
                "lag_probes": lag.len(),
                "lag_timeouts": timeouts,
            }),
        );
    }
    if args.json {
        // The headline keys are the configured method's.
        let main = figures[config.capture.method.as_str()].clone();
        let mut out = json!({
            "method": config.capture.method.as_str(),
            "writers": args.writers,
            "seconds_per_side": args.seconds,
            "rounds": args.rounds,
            "lag_rate_asked": args.rate,
            "off": {"p50_us": op50, "p99_us": op99, "writes_per_s": orate, "writes": off_writes},
        });
        for key in [
            "write_p50_ratio",
            "write_p99_ratio",
            "throughput_ratio",
            "lag_p50_ms",
            "lag_p99_ms",
            "lag_probes",
            "lag_timeouts",
        ] {
            out[key] = main[key].clone();
        }
        for (name, value) in figures {
            out[name] = value;
        }
        println!("{out}");
    }
    legacy.close().await;
    schemaless.close().await;
    pool.close().await;
    Ok(())
}
