//! `mezzanine bench move`: a shard move's copy throughput against a raw
//! `LOAD DATA` of the same cells into the same target master, and what
//! the move costs the writers of the moved shards.
//!
//! - The shards to move (`--shards`, the first ones of the first cluster)
//!   are filled with trip-like cells through `put_cells` (untimed).
//! - Writers (`--writers`, batches of 4 cells to the moved shards) run for
//!   a baseline period, then on through the raw load and the moves, so
//!   both run under the same writes.
//! - The raw limit: the same cells, encoded, written to `LOAD DATA` files
//!   and loaded into scratch tables of the same shape on the target
//!   cluster's master, one load per shard, all at once; timed until every
//!   load is acknowledged and until the minions applied it. The second
//!   is the ratio's base, as in `bench backfill`: a move's copy phase
//!   ends when its target's minions have applied the copy too (six
//!   servers share this machine's two cores, so a timing that left the
//!   minions' work out would flatter whichever ran first).
//! - The moves run one shard at a time in this process, as `shard move`
//!   runs them. Copy throughput is
//!   cells copied over the time from the start to the fence (snapshot and
//!   passes), summed over the shards; write latencies are split into
//!   before the moves, during them, and those that started while a fence
//!   was up.
//!
//! The moved shards are moved back at the end (untimed) and the instance
//! dropped, so the benchmark can run again on the same cluster.

use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use clap::Args;
use schemaless::mysql::moves::run::{self as moves, MoveOptions};
use schemaless::mysql::{schema, Topology};
use schemaless::{codec, routing, Cell, CellStore, MySqlStore};
use serde::Serialize;

use super::stats::Latencies;
use crate::workload::Trips;

#[derive(Args)]
pub struct MoveArgs {
    /// Cells in the moved shards before the move.
    #[arg(long, default_value_t = 100_000)]
    cells: usize,
    /// How many shards to move (the first ones of the first cluster).
    #[arg(long, default_value_t = 4)]
    shards: u32,
    /// Writers to the moved shards during the benchmark.
    #[arg(long, default_value_t = 2)]
    writers: usize,
    /// How long the writers run before the moves (the baseline).
    #[arg(long, default_value_t = 3)]
    baseline_secs: u64,
    /// Print a JSON object with every figure as the last line.
    #[arg(long)]
    json: bool,
    /// The instance the benchmark creates (and drops) for itself.
    #[arg(long, default_value = "mzbench_move")]
    instance: String,
}

#[derive(Serialize)]
struct Figures {
    cells: usize,
    shards: u32,
    copied: u64,
    copy_cells_per_s: f64,
    /// The raw load until its minions applied it, as the copy phase is
    /// timed.
    raw_load_cells_per_s: f64,
    /// The raw load until it was acknowledged (minions still applying).
    raw_load_acknowledged_cells_per_s: f64,
    /// Copy throughput over the raw load's (target >= 0.5).
    copy_ratio: f64,
    /// Over the raw load's until acknowledged.
    copy_ratio_acknowledged: f64,
    /// The longest fence of the moved shards (target <= 1000).
    fence_ms: u64,
    fence_ms_mean: f64,
    write_p50_before_us: f64,
    write_p99_before_us: f64,
    write_p99_during_move_us: f64,
    /// During the moves over before (p99).
    write_p99_during_move_ratio: f64,
    /// Writes that started while a fence was up: how many, their p99.
    writes_fenced: usize,
    write_p99_fenced_us: f64,
    write_max_during_move_us: f64,
    writes_before: usize,
    writes_during_move: usize,
}

/// One write's start (µs since the epoch) and latency.
type Timed = Arc<Mutex<Vec<(i64, Duration)>>>;

pub async fn run(args: MoveArgs, config_path: &Path, cluster_dir: &Path) -> anyhow::Result<()> {
    if args.cells == 0 || args.shards == 0 || args.writers == 0 {
        return Err(
            crate::UsageError("--cells, --shards and --writers must be positive".into()).into(),
        );
    }
    let mut config = crate::load_config(config_path)?;
    config.instance.name = args.instance.clone();
    if config.clusters.len() < 2 {
        return Err(
            crate::UsageError("the config needs two clusters to move between".into()).into(),
        );
    }
    let spec = crate::cluster::spec_from_config(config_path, 55432)?;
    let cluster = crate::cluster::up(cluster_dir, spec).await?;
    let files_dir = cluster
        .nodes()
        .iter()
        .find(|n| n.spec.role.is_mariadb())
        .context("the dev cluster has no MariaDB node")?
        .files_dir();
    let topology = Topology::from_config(&config)?;
    schema::drop_instance(&topology).await?;
    schema::apply(&topology).await?;
    let moved: Vec<u32> = topology
        .shards_of(0)
        .into_iter()
        .take(args.shards as usize)
        .collect();
    if moved.len() < args.shards as usize {
        bail!(
            "cluster {} holds fewer than {} shards",
            topology.clusters[0].name,
            args.shards
        );
    }
    let target = topology.clusters[1].name.clone();
    let store = MySqlStore::connect(&config)?;
    let shard_count = config.instance.shard_count;

    eprintln!(
        "generating and writing {} cells to shards {moved:?} ...",
        args.cells
    );
    let mut trips = Trips::new(7);
    let mut cells = Vec::with_capacity(args.cells);
    while cells.len() < args.cells {
        let row = trips.row_key();
        if moved.contains(&routing::shard_of(&row, shard_count)) {
            cells.push(trips.base_cell(row, 1));
        }
    }
    for chunk in cells.chunks(config.limits.max_batch_cells) {
        for r in store.put_cells(chunk.to_vec()).await? {
            r.map_err(|c| anyhow::anyhow!("conflict writing {}", c.key))?;
        }
    }

    // --- writers: a baseline, the raw load, then the moves ------------
    let stop = Arc::new(AtomicBool::new(false));
    let timed: Timed = Arc::default();
    let mut writers = Vec::new();
    for w in 0..args.writers {
        let (store, stop, timed) = (store.clone(), stop.clone(), timed.clone());
        let moved = moved.clone();
        writers.push(tokio::spawn(async move {
            let mut trips = Trips::new(1000 + w as u64);
            while !stop.load(Ordering::Relaxed) {
                let mut batch: Vec<Cell> = Vec::with_capacity(4);
                while batch.len() < 4 {
                    let row = trips.row_key();
                    if moved.contains(&routing::shard_of(&row, shard_count)) {
                        batch.push(trips.base_cell(row, 1));
                    }
                }
                let at = schemaless::cell::now_micros();
                let started = Instant::now();
                for r in store.put_cells(batch).await? {
                    r.map_err(|c| anyhow::anyhow!("conflict writing {}", c.key))?;
                }
                timed.lock().unwrap().push((at, started.elapsed()));
            }
            Ok::<_, anyhow::Error>(())
        }));
    }
    tokio::time::sleep(Duration::from_secs(args.baseline_secs)).await;
    let baseline_until = schemaless::cell::now_micros();
    // The raw limit: LOAD DATA of the same cells on the target master,
    // under the same writers as the copy.
    let (raw_acknowledged, raw_replicated) = raw_load(
        &topology,
        &cluster,
        &files_dir,
        &args.instance,
        &cells,
        &config,
    )
    .await?;
    let moves_from = schemaless::cell::now_micros();
    eprintln!(
        "moving shards {moved:?} to {target} under {} writers ...",
        args.writers
    );
    let mover = Topology::from_config(&config)?;
    let mut records = moves::plan(&mover, &moved, &target).await?;
    let mut reports = Vec::new();
    for record in &mut records {
        reports.push(moves::run(&mover, record, &MoveOptions::default()).await?);
    }
    let moves_until = schemaless::cell::now_micros();
    stop.store(true, Ordering::Relaxed);
    for w in writers {
        w.await??;
    }

    let timed = timed.lock().unwrap().clone();
    let before = Latencies::new(
        timed
            .iter()
            .filter(|(at, _)| *at < baseline_until)
            .map(|t| t.1)
            .collect(),
    );
    let during: Vec<Duration> = timed
        .iter()
        .filter(|(at, _)| (moves_from..moves_until).contains(at))
        .map(|t| t.1)
        .collect();
    let fenced = Latencies::new(
        timed
            .iter()
            .filter(|(at, d)| {
                let end = at + d.as_micros() as i64;
                reports
                    .iter()
                    .any(|r| match (r.fenced_from_us, r.fenced_until_us) {
                        (Some(from), Some(until)) => *at < until && end > from,
                        _ => false,
                    })
            })
            .map(|t| t.1)
            .collect(),
    );
    let write_max = during.iter().max().copied().unwrap_or_default();
    let during = Latencies::new(during);
    let copied: u64 = reports.iter().map(|r| r.copied).sum();
    let copy_ms: u64 = reports.iter().map(|r| r.copy_ms).sum();
    let copy_rate = copied as f64 / (copy_ms.max(1) as f64 / 1000.0);
    let figures = Figures {
        cells: args.cells,
        shards: args.shards,
        copied,
        copy_cells_per_s: copy_rate,
        raw_load_cells_per_s: raw_replicated,
        raw_load_acknowledged_cells_per_s: raw_acknowledged,
        copy_ratio: copy_rate / raw_replicated,
        copy_ratio_acknowledged: copy_rate / raw_acknowledged,
        fence_ms: reports.iter().map(|r| r.fence_ms).max().unwrap_or(0),
        fence_ms_mean: reports.iter().map(|r| r.fence_ms as f64).sum::<f64>()
            / reports.len() as f64,
        write_p50_before_us: before.percentile_us(50.0),
        write_p99_before_us: before.percentile_us(99.0),
        write_p99_during_move_us: during.percentile_us(99.0),
        write_p99_during_move_ratio: during.percentile_us(99.0) / before.percentile_us(99.0),
        writes_fenced: fenced.len(),
        write_p99_fenced_us: fenced.percentile_us(99.0),
        write_max_during_move_us: write_max.as_secs_f64() * 1e6,
        writes_before: before.len(),
        writes_during_move: during.len(),
    };
    println!(
        "shard copy:          {:>10.0} cells/s ({} cells of {} shards in {:.2}s, snapshot and passes)",
        figures.copy_cells_per_s,
        copied,
        args.shards,
        copy_ms as f64 / 1000.0
    );
    println!(
        "raw LOAD DATA:       {:>10.0} cells/s until replicated, {:.0} until acknowledged (same cells, target master)",
        raw_replicated, raw_acknowledged
    );
    println!(
        "copy_ratio:          {:>10.2} (target >= 0.5); {:.2} against the load until acknowledged",
        figures.copy_ratio, figures.copy_ratio_acknowledged
    );
    println!(
        "fence:               {:>10} ms longest, {:.0} ms mean (target <= 1000)",
        figures.fence_ms, figures.fence_ms_mean
    );
    println!(
        "write p99:           {:>10.0} us before, {:.0} us during the moves (ratio {:.2}), {:.0} us for the {} writes that met a fence; max {:.0} us",
        figures.write_p99_before_us,
        figures.write_p99_during_move_us,
        figures.write_p99_during_move_ratio,
        figures.write_p99_fenced_us,
        figures.writes_fenced,
        figures.write_max_during_move_us
    );

    // Back where they were, untimed, and the instance dropped.
    let mut back = moves::plan(&mover, &moved, &topology.clusters[0].name).await?;
    for record in &mut back {
        moves::run(&mover, record, &MoveOptions::default()).await?;
    }
    store.close().await;
    mover.close().await;
    schema::drop_instance(&topology).await?;
    topology.close().await;
    if args.json {
        println!("{}", serde_json::to_string(&figures)?);
    }
    Ok(())
}

/// Loads `cells` with `LOAD DATA` into scratch tables shaped like `entity`
/// on the second cluster's master, a load per shard, all at once, and
/// returns cells per second until every load returned (acknowledged by a
/// minion, semi-synchronously) and until the minions applied them.
async fn raw_load(
    topology: &Topology,
    cluster: &devcluster::DevCluster,
    files_dir: &Path,
    instance: &str,
    cells: &[Cell],
    config: &config::Config,
) -> anyhow::Result<(f64, f64)> {
    let cap = codec::inflated_cap(config.limits.max_body_bytes);
    let mut files =
        super::cells::LoadFiles::new(files_dir, &format!("{instance}_raw"), topology.shard_count);
    for c in cells {
        files.add(c, &codec::encode(&c.body, cap)?)?;
    }
    let files = files.finish()?;
    let master = topology.clusters[1].master();
    let scratch = format!("{instance}_rawload");
    master
        .execute(format!(
            "DROP DATABASE IF EXISTS `{scratch}`; CREATE DATABASE `{scratch}`"
        ))
        .await?;
    for (shard, _) in &files {
        master
            .execute(
                schemaless::mysql::sql::create_entity_table(&scratch)
                    .replace("`entity`", &format!("`entity_{shard}`")),
            )
            .await?;
    }
    eprintln!("LOAD DATA of {} cells on {} ...", cells.len(), master.label);
    let started = Instant::now();
    let loads = files.iter().map(|(shard, path)| {
        let master = master.clone();
        let scratch = scratch.clone();
        async move {
            let path_text = path.display().to_string();
            if path_text.contains('\'') || path_text.contains('\\') {
                bail!("cannot LOAD DATA from {path_text}: quotes or backslashes in the path");
            }
            master
                .execute(format!(
                    "LOAD DATA INFILE '{path_text}' INTO TABLE `{scratch}`.`entity_{shard}` CHARACTER SET binary \
                     FIELDS TERMINATED BY '\\t' ESCAPED BY '\\\\' LINES TERMINATED BY '\\n' \
                     (row_key, column_name, ref_key, body, created_at)"
                ))
                .await?;
            Ok(())
        }
    });
    futures::future::try_join_all(loads).await?;
    let acknowledged = started.elapsed();
    cluster.wait_all_caught_up(Duration::from_secs(600)).await?;
    let replicated = started.elapsed();
    for (_, path) in &files {
        let _ = std::fs::remove_file(path);
    }
    master.execute(format!("DROP DATABASE `{scratch}`")).await?;
    let n = cells.len() as f64;
    Ok((n / acknowledged.as_secs_f64(), n / replicated.as_secs_f64()))
}
