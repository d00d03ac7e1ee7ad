//! `mezzanine bench backfill`: the backfill against a raw `LOAD DATA` of
//! the same cells, and its memory at two sizes.
//!
//! It seeds `--trips` trips (1M by default) into a database of its own
//! (`mzbench_backfill`), backfills them into an instance of its own with
//! `--workers` workers, and times it until every minion has applied the
//! writes. Then, in the same run, the same cells are read back from
//! PostgreSQL, encoded as the store encodes them, written to one file per
//! shard (untimed), and loaded with `LOAD DATA` into the emptied shard
//! tables, timed the same way: `load_ratio` is backfill cells/s over raw
//! cells/s. Memory: the same backfill of `--small-trips` (a fifth by
//! default) runs first; `rss_ratio` is the peak RSS of the large run over
//! the small one's. Each backfill is a `mezzanine backfill run` process of
//! its own, so its peak RSS (`ru_maxrss`) is the backfill's alone. Flat
//! memory means a ratio near 1.
//!
//! Both phases print where the machine's CPU went per cell (the backfill
//! process, PostgreSQL, the masters, the minions), and the `load_ratio`
//! the backfill could reach at most if its own process cost nothing: the
//! ceiling left to the client.

use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::Context;
use clap::Args;
use schemaless::mysql::{schema, Topology};
use schemaless::{codec, MySqlStore};
use serde_json::json;

use super::cells::{count_cells, load_files, truncate, LoadFiles};

#[derive(Args)]
pub struct BackfillArgs {
    /// Print one JSON object with every figure as the last line.
    #[arg(long)]
    json: bool,
    /// Trips of the measured run.
    #[arg(long, default_value_t = 1_000_000)]
    trips: u64,
    /// Trips of the first, smaller run the memory is compared with
    /// (default a fifth of --trips; 0 skips it).
    #[arg(long)]
    small_trips: Option<u64>,
    /// Backfill workers.
    #[arg(long, default_value_t = 4)]
    workers: usize,
    /// Parent ids per chunk (default: backfill.chunk_size).
    #[arg(long)]
    chunk_size: Option<u64>,
    /// The database and Schemaless instance the benchmark creates for
    /// itself.
    #[arg(long, default_value = "mzbench_backfill")]
    instance: String,
}

/// Runs `mezzanine --config CONFIG backfill run ...` and returns its peak
/// RSS in bytes.
fn backfill_process(config: &Path, workers: usize) -> anyhow::Result<u64> {
    let child = std::process::Command::new(std::env::current_exe()?)
        .arg("--config")
        .arg(config)
        .args([
            "backfill",
            "run",
            "--plain",
            "--workers",
            &workers.to_string(),
            "--max-replication-lag-ms",
            "0",
            "--stale-after-ms",
            "60000",
        ])
        .stdout(std::process::Stdio::null())
        .spawn()
        .context("starting the backfill process")?;
    let pid = child.id() as libc::pid_t;
    let mut status = 0;
    // nix has no wait4, the one call that gives one child's own peak RSS
    // (RUSAGE_CHILDREN is the largest of every child reaped so far).
    // SAFETY: an all-zero rusage is valid; wait4 fills it in. The child is
    // reaped here, not by `Child` (which never waits on drop).
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    let waited = unsafe { libc::wait4(pid, &mut status, 0, &mut usage) };
    anyhow::ensure!(waited == pid, "waiting for the backfill process failed");
    anyhow::ensure!(
        libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0,
        "the backfill process failed (status {status})"
    );
    Ok(usage.ru_maxrss as u64 * 1024)
}

/// The config file the backfill processes run with: the user's, with the
/// benchmark's instance and database.
fn bench_config_file(
    config_path: &Path,
    instance: &str,
    url: &str,
) -> anyhow::Result<std::path::PathBuf> {
    let text = std::fs::read_to_string(config_path)
        .with_context(|| format!("reading {}", config_path.display()))?;
    let mut doc: toml_edit::DocumentMut = text.parse()?;
    doc["instance"]["name"] = toml_edit::value(instance);
    doc["legacy"]["url"] = toml_edit::value(url);
    let path = std::env::temp_dir().join(format!("{instance}_{}.toml", std::process::id()));
    std::fs::write(&path, doc.to_string())?;
    Ok(path)
}

struct Pass {
    trips: u64,
    cells: u64,
    acknowledged: Duration,
    replicated: Duration,
    peak_rss: u64,
    /// CPU by process group until replicated.
    cpu: super::cpu::CpuSpent,
}

pub async fn run(args: BackfillArgs, config_path: &Path, cluster_dir: &Path) -> anyhow::Result<()> {
    let small = args.small_trips.unwrap_or(args.trips / 5);
    if args.trips == 0 || args.workers == 0 || args.workers > 256 {
        return Err(crate::UsageError(
            "--trips must be positive and --workers between 1 and 256".into(),
        )
        .into());
    }
    let mut config = super::own_instance(config_path, &args.instance, args.workers as u32 + 4)?;
    if let Some(size) = args.chunk_size {
        config.backfill.chunk_size = size.max(1);
    }
    let layout = legacy::connection::layout_config(&config)?.clone();
    let child_config = bench_config_file(config_path, &args.instance, &legacy_config_url(&config))?;

    let spec = crate::cluster::spec_from_config(config_path, 55432)?;
    let cluster = crate::cluster::up(cluster_dir, spec).await?;
    let meter = super::cpu::CpuMeter::new(&cluster);
    let files_dir = cluster
        .nodes()
        .iter()
        .find(|n| n.spec.role.is_mariadb())
        .context("the dev cluster has no MariaDB node")?
        .files_dir();
    let topology = Topology::from_config(&config)?;
    schema::drop_instance(&topology).await?;
    schema::apply(&topology).await?;
    let legacy_config = legacy::connection::legacy_config(&config)?;
    legacy::trips::init(legacy_config, &layout.schema, Some(&layout.uuid)).await?;
    let pool = legacy::connection::pool(legacy_config)?;
    let schemaless = MySqlStore::connect(&config)?;

    let mut passes = Vec::new();
    for trips in [small, args.trips].into_iter().filter(|&t| t > 0) {
        sqlx::raw_sql(sqlx::AssertSqlSafe(format!(
            "DROP SCHEMA IF EXISTS mezzanine CASCADE;
             TRUNCATE {s}.trip_notes, {s}.billing_attempts, {s}.fare_adjustments, {s}.trips RESTART IDENTITY",
            s = layout.schema
        )))
        .execute(&pool)
        .await?;
        truncate(&topology).await?;
        cluster.wait_all_caught_up(Duration::from_secs(600)).await?;
        eprintln!("seeding {trips} trips ...");
        let counts =
            legacy::trips::seed(&pool, &layout.schema, &layout.uuid, trips, 42, |_| {}).await?;
        let legacy = legacy::LegacyStore::connect(&config).await?;
        let plan = backfill::plan::create(
            &legacy,
            config.backfill.chunk_size,
            true,
            "mezzanine bench backfill",
        )
        .await?;
        eprintln!(
            "backfilling {trips} trips ({} rows) in {} chunks with {} workers ...",
            counts.rows(),
            plan.chunks,
            args.workers
        );
        let cpu_before = meter.sample();
        let started = Instant::now();
        let peak = {
            let (path, workers) = (child_config.clone(), args.workers);
            tokio::task::spawn_blocking(move || backfill_process(&path, workers)).await??
        };
        let acknowledged = started.elapsed();
        cluster
            .wait_all_caught_up(Duration::from_secs(1800))
            .await?;
        let replicated = started.elapsed();
        let cpu = meter.sample().since(&cpu_before);
        let status = backfill::status::read(&pool).await?;
        anyhow::ensure!(status.complete(), "the backfill did not finish: {status:?}");
        let cells = status.cells_done;
        eprintln!(
            "  {cells} cells in {:.1}s ({:.0} cells/s until replicated), peak RSS {:.0} MB",
            replicated.as_secs_f64(),
            cells as f64 / replicated.as_secs_f64(),
            peak as f64 / 1e6
        );
        passes.push(Pass {
            trips,
            cells,
            acknowledged,
            replicated,
            peak_rss: peak,
            cpu,
        });
        legacy.close().await;
    }
    let main = passes.last().expect("the measured pass");

    // The raw limit: the same cells, encoded, loaded with LOAD DATA.
    eprintln!("writing LOAD DATA files of the same cells ...");
    let legacy = legacy::LegacyStore::connect(&config).await?;
    let cap = codec::inflated_cap(config.limits.max_body_bytes);
    let mut files = LoadFiles::new(&files_dir, &args.instance, config.instance.shard_count);
    let (low, high) = legacy.id_range().await?.context("no trips were seeded")?;
    let mut raw_cells = 0u64;
    let mut at = low;
    while at <= high {
        let chunk = legacy.scan(at..at + 10_000).await?;
        for cell in &chunk.cells {
            files.add(cell, &codec::encode(&cell.body, cap)?)?;
        }
        raw_cells += chunk.cells.len() as u64;
        at += 10_000;
    }
    let files = files.finish()?;
    anyhow::ensure!(
        raw_cells == main.cells,
        "the legacy tables hold {raw_cells} cells, the backfill wrote {}",
        main.cells
    );
    truncate(&topology).await?;
    cluster.wait_all_caught_up(Duration::from_secs(600)).await?;
    eprintln!("LOAD DATA of {raw_cells} cells ...");
    let cpu_before = meter.sample();
    let started = Instant::now();
    load_files(&topology, &files, args.workers).await?;
    let raw_acknowledged = started.elapsed();
    cluster
        .wait_all_caught_up(Duration::from_secs(1800))
        .await?;
    let raw_replicated = started.elapsed();
    let raw_cpu = meter.sample().since(&cpu_before);
    for (_, path) in &files {
        let _ = std::fs::remove_file(path);
    }
    let loaded = count_cells(&topology).await?;
    anyhow::ensure!(
        loaded == raw_cells,
        "LOAD DATA stored {loaded} cells, expected {raw_cells}"
    );

    let rate = |cells: u64, d: Duration| cells as f64 / d.as_secs_f64();
    let backfill_rate = rate(main.cells, main.replicated);
    let raw_rate = rate(raw_cells, raw_replicated);
    let load_ratio = backfill_rate / raw_rate;
    let rss_ratio = (passes.len() == 2).then(|| main.peak_rss as f64 / passes[0].peak_rss as f64);
    println!(
        "backfill   {} trips, {} cells: {:>8.0} trips/s {:>8.0} cells/s until replicated ({:.1}s), {:.0} cells/s acknowledged",
        main.trips,
        main.cells,
        rate(main.trips, main.replicated),
        backfill_rate,
        main.replicated.as_secs_f64(),
        rate(main.cells, main.acknowledged)
    );
    println!(
        "raw LOAD DATA of the same cells:        {raw_rate:>8.0} cells/s until replicated ({:.1}s), {:.0} cells/s acknowledged",
        raw_replicated.as_secs_f64(),
        rate(raw_cells, raw_acknowledged)
    );
    println!("load_ratio {load_ratio:.3} (target >= 0.75)");
    println!("backfill: {}", main.cpu.per_unit_line(main.cells, "cell"));
    println!("raw load: {}", raw_cpu.per_unit_line(raw_cells, "cell"));
    let bound = main
        .cpu
        .ratio_bound_free_client(main.cells, &raw_cpu, raw_cells);
    println!("load_ratio if the backfill process cost nothing: at most {bound:.3}");
    for pass in &passes {
        println!(
            "peak RSS backfilling {:>8} trips: {:>6.1} MB",
            pass.trips,
            pass.peak_rss as f64 / 1e6
        );
    }
    if let Some(r) = rss_ratio {
        println!("rss_ratio {r:.3} (flat memory: near 1)");
    }
    if args.json {
        println!(
            "{}",
            json!({
                "trips": main.trips,
                "cells": main.cells,
                "workers": args.workers,
                "chunk_size": config.backfill.chunk_size,
                "trips_per_s": rate(main.trips, main.replicated),
                "cells_per_s": backfill_rate,
                "cells_per_s_acknowledged": rate(main.cells, main.acknowledged),
                "raw_cells_per_s": raw_rate,
                "raw_cells_per_s_acknowledged": rate(raw_cells, raw_acknowledged),
                "load_ratio": load_ratio,
                "peak_rss_bytes": main.peak_rss,
                "small_trips": (passes.len() == 2).then(|| passes[0].trips),
                "small_peak_rss_bytes": (passes.len() == 2).then(|| passes[0].peak_rss),
                "rss_ratio": rss_ratio,
                "cpu_us_per_cell": main.cpu.per_unit_json(main.cells),
                "raw_cpu_us_per_cell": raw_cpu.per_unit_json(raw_cells),
                "load_ratio_bound_free_client": bound,
            })
        );
    }
    let _ = std::fs::remove_file(&child_config);
    legacy.close().await;
    schemaless.close().await;
    pool.close().await;
    topology.close().await;
    Ok(())
}

fn legacy_config_url(config: &config::Config) -> String {
    config
        .legacy
        .as_ref()
        .map(|l| l.url.clone())
        .unwrap_or_default()
}
