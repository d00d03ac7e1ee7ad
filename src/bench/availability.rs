//! `mezzanine bench availability`: what buffered writes cost, and how soon
//! writes are taken again after a master dies.
//!
//! It starts private servers of its own on free loopback ports (three
//! MariaDB clusters of a master and one minion, and the PostgreSQL server
//! every dev cluster has), because it kills a master: the dev cluster of
//! `cluster up` is never touched. In one run:
//!
//! 1. write throughput and p50/p99 latency of `put_cell` with buffered
//!    writes off, then on (one secondary), same writers, same servers,
//!    same duration; `buffered_throughput_ratio` is on divided by off;
//! 2. with buffering on and the writers running, kill -9 one master and
//!    time the first acknowledged write of a cell of that master's shards
//!    (`first_write_after_death_s`: hinted handoff answers it `Buffered`);
//! 3. promote its minion and time until a write to those shards is
//!    `Written` again (`written_again_after_death_s`).

use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::Context;
use clap::Args;
use devcluster::{DevCluster, Spec};
use schemaless::mysql::{failover, schema, Topology};
use schemaless::{Cell, CellStore, MySqlStore, RowKey, WriteOutcome};
use serde_json::json;

use super::stats::Latencies;

#[derive(Args)]
pub struct AvailabilityArgs {
    /// Seconds of writing per phase (off, on).
    #[arg(long, default_value_t = 10)]
    seconds: u64,
    /// Concurrent writers.
    #[arg(long, default_value_t = 16)]
    writers: usize,
    /// Print every figure as one JSON object on the last line.
    #[arg(long)]
    json: bool,
}

const SHARDS: u32 = 48;

pub async fn run(
    args: AvailabilityArgs,
    _config: &Path,
    _cluster_dir: &Path,
) -> anyhow::Result<()> {
    if args.seconds == 0 || args.writers == 0 {
        return Err(crate::UsageError("--seconds and --writers must be at least 1".into()).into());
    }
    eprintln!("starting private servers (3 clusters of a master and a minion) ...");
    let cluster = DevCluster::private(Spec::free_ports(&["a", "b", "c"], 1)?)
        .await
        .context("starting the benchmark's own servers")?;
    let base = cluster.config_toml("bench_avail", SHARDS);
    let config_with = |secondaries: u32| -> anyhow::Result<config::Config> {
        let text = format!(
            "{base}\n[storage]\nbuffer_secondaries = {secondaries}\nrequest_timeout_ms = 2000\n\
             connect_timeout_ms = 1000\nbreaker_failures = 3\nbreaker_open_ms = 500\n\
             topology_refresh_ms = 200\nmax_connections_per_node = {}\n",
            args.writers.max(16)
        );
        Ok(config::Config::parse(&text, "bench-availability.toml")?)
    };
    let off_config = config_with(0)?;
    let on_config = config_with(1)?;
    let topology = Topology::from_config(&off_config)?;
    schema::apply(&topology).await?;
    topology.close().await;

    let seq = Arc::new(AtomicU64::new(0));
    eprintln!("warming up ...");
    let off_store = MySqlStore::connect(&off_config)?;
    load(&off_store, &seq, args.writers, Duration::from_secs(1), None).await;
    eprintln!("buffered writes off: {}s ...", args.seconds);
    let off = load(
        &off_store,
        &seq,
        args.writers,
        Duration::from_secs(args.seconds),
        None,
    )
    .await;
    off_store.close().await;
    let on_store = MySqlStore::connect(&on_config)?;
    eprintln!("buffered writes on (1 secondary): {}s ...", args.seconds);
    let on = load(
        &on_store,
        &seq,
        args.writers,
        Duration::from_secs(args.seconds),
        None,
    )
    .await;
    let ratio = on.per_sec / off.per_sec;
    print_phase("off", &off);
    print_phase("on (1 secondary)", &on);
    println!("buffered_throughput_ratio {ratio:.3}");

    // A master dies under the buffered load.
    eprintln!("killing a-master under load ...");
    let watch = Watch::default();
    let stop = Arc::new(AtomicBool::new(false));
    let loader = {
        let (store, seq, watch, stop) =
            (on_store.clone(), seq.clone(), watch.clone(), stop.clone());
        let writers = args.writers;
        tokio::spawn(async move {
            load_until(&store, &seq, writers, &stop, Some(&watch)).await;
        })
    };
    tokio::time::sleep(Duration::from_secs(1)).await;
    let killed = Instant::now();
    cluster.kill("a-master")?;
    watch.arm(killed);
    let deadline = Instant::now() + Duration::from_secs(60);
    while watch.first_acknowledged().is_none() && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let first_write = watch
        .first_acknowledged()
        .context("no write to the dead master's shards was acknowledged within 60 s")?;
    eprintln!("promoting a-minion1 ...");
    let report = failover::promote(
        &on_config,
        &on_store,
        "a",
        &cluster.mysql_url("a-minion1")?,
        false,
        Duration::from_secs(30),
    )
    .await?;
    while watch.first_written().is_none() && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    stop.store(true, Ordering::Relaxed);
    loader.await?;
    let written_again = watch
        .first_written()
        .context("writes to the promoted master never came back within 60 s")?;
    let handed_off = watch.handed_off.load(Ordering::Relaxed);
    println!(
        "first_write_after_death_s {:.3} (answered Buffered: {handed_off} cells handed off)",
        first_write.as_secs_f64()
    );
    println!(
        "written_again_after_death_s {:.3} (after promoting {} to master)",
        written_again.as_secs_f64(),
        report.new_master
    );
    on_store.close().await;
    if args.json {
        println!(
            "{}",
            json!({
                "bench": "availability",
                "seconds": args.seconds,
                "writers": args.writers,
                "off": phase_json(&off),
                "on": phase_json(&on),
                "buffered_throughput_ratio": ratio,
                "first_write_after_death_s": first_write.as_secs_f64(),
                "written_again_after_death_s": written_again.as_secs_f64(),
                "handed_off_cells": handed_off,
            })
        );
    }
    Ok(())
}

/// What one phase measured.
struct Phase {
    writes: u64,
    errors: u64,
    per_sec: f64,
    p50_ms: f64,
    p99_ms: f64,
}

fn print_phase(name: &str, p: &Phase) {
    println!(
        "buffered writes {name:<17} {:>9.0} writes/s  p50 {:>6.2} ms  p99 {:>6.2} ms  ({} writes, {} errors)",
        p.per_sec, p.p50_ms, p.p99_ms, p.writes, p.errors
    );
}

fn phase_json(p: &Phase) -> serde_json::Value {
    json!({
        "writes": p.writes,
        "errors": p.errors,
        "writes_per_s": p.per_sec,
        "p50_ms": p.p50_ms,
        "p99_ms": p.p99_ms,
    })
}

/// Times the first acknowledged, and the first `Written`, write to cluster
/// a's shards after the kill.
#[derive(Clone, Default)]
struct Watch {
    killed: Arc<Mutex<Option<Instant>>>,
    acknowledged: Arc<Mutex<Option<Duration>>>,
    written: Arc<Mutex<Option<Duration>>>,
    handed_off: Arc<AtomicU64>,
}

impl Watch {
    fn arm(&self, at: Instant) {
        *self.killed.lock().unwrap_or_else(|p| p.into_inner()) = Some(at);
    }

    /// A write of cluster a issued at `started` came back with `outcome`.
    fn saw(&self, started: Instant, outcome: WriteOutcome) {
        let Some(killed) = *self.killed.lock().unwrap_or_else(|p| p.into_inner()) else {
            return;
        };
        if started < killed {
            return;
        }
        let after = killed.elapsed();
        if outcome == WriteOutcome::Buffered {
            self.handed_off.fetch_add(1, Ordering::Relaxed);
        }
        let mut first = self.acknowledged.lock().unwrap_or_else(|p| p.into_inner());
        first.get_or_insert(after);
        if outcome == WriteOutcome::Written {
            self.written
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .get_or_insert(after);
        }
    }

    fn first_acknowledged(&self) -> Option<Duration> {
        *self.acknowledged.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn first_written(&self) -> Option<Duration> {
        *self.written.lock().unwrap_or_else(|p| p.into_inner())
    }
}

fn cell(n: u64) -> Cell {
    let key = RowKey::from(uuid::Uuid::from_u128(
        0xbe4c_0000_0000_4000_8000_0000_0000_0000 | u128::from(n),
    ));
    Cell::new(
        key,
        schemaless::Column::new("BASE").expect("a valid column"),
        schemaless::RefKey::new(1).expect("a valid ref key"),
        schemaless::Body::parse(&format!(
            "{{\"trip\":{n},\"status\":\"completed\",\"fare\":{{\"amount\":\"{}.{:02}\",\"currency\":\"USD\"}}}}",
            n % 90 + 5,
            n % 100
        ))
        .expect("a valid body"),
    )
}

/// Whether a cell's shard is on cluster a (the first third).
fn on_cluster_a(c: &Cell) -> bool {
    schemaless::routing::shard_of(&c.key.row_key, SHARDS) < SHARDS / 3
}

async fn load(
    store: &MySqlStore,
    seq: &Arc<AtomicU64>,
    writers: usize,
    duration: Duration,
    watch: Option<&Watch>,
) -> Phase {
    let stop = Arc::new(AtomicBool::new(false));
    let timer = {
        let stop = stop.clone();
        tokio::spawn(async move {
            tokio::time::sleep(duration).await;
            stop.store(true, Ordering::Relaxed);
        })
    };
    let started = Instant::now();
    let (latencies, errors) = load_until(store, seq, writers, &stop, watch).await;
    let elapsed = started.elapsed();
    let _ = timer.await;
    let latencies = Latencies::new(latencies);
    Phase {
        writes: latencies.len() as u64,
        errors,
        per_sec: latencies.len() as f64 / elapsed.as_secs_f64(),
        p50_ms: latencies.percentile_us(50.0) / 1000.0,
        p99_ms: latencies.percentile_us(99.0) / 1000.0,
    }
}

/// `writers` tasks writing one new cell per call until `stop`; the
/// latencies of acknowledged writes, and the count of failed ones.
async fn load_until(
    store: &MySqlStore,
    seq: &Arc<AtomicU64>,
    writers: usize,
    stop: &Arc<AtomicBool>,
    watch: Option<&Watch>,
) -> (Vec<Duration>, u64) {
    let tasks: Vec<_> = (0..writers)
        .map(|_| {
            let (store, seq, stop, watch) =
                (store.clone(), seq.clone(), stop.clone(), watch.cloned());
            tokio::spawn(async move {
                let mut latencies = Vec::new();
                let mut errors = 0u64;
                while !stop.load(Ordering::Relaxed) {
                    let c = cell(seq.fetch_add(1, Ordering::Relaxed));
                    let watched = on_cluster_a(&c);
                    let started = Instant::now();
                    match store.put_cell(c).await {
                        Ok(outcome) => {
                            latencies.push(started.elapsed());
                            if let (Some(w), true) = (&watch, watched) {
                                w.saw(started, outcome);
                            }
                        }
                        Err(_) => errors += 1,
                    }
                }
                (latencies, errors)
            })
        })
        .collect();
    let mut all = Vec::new();
    let mut errors = 0;
    for t in tasks {
        if let Ok((l, e)) = t.await {
            all.extend(l);
            errors += e;
        }
    }
    (all, errors)
}
