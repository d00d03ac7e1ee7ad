//! `mezzanine bench cells`: the store's write throughput and point-read
//! latency, each against the raw limit of the same servers in the same run.
//!
//! - Writes: the same pre-generated cells (trip-like bodies of about 300
//!   bytes of JSON) are loaded twice into the same, emptied tables: once by
//!   a raw `LOAD DATA INFILE` of their encoded form, one file per shard,
//!   and once through `put_cells` in batches of `limits.max_batch_cells`.
//!   Both run `--concurrency` loads at a time. Encoding, routing and
//!   duplicate detection are part of what `put_cells` is measured on; the
//!   raw load is given files already encoded and written.
//! - Reads: `get_cell_latest` of random cells, against a raw
//!   `SELECT … WHERE added_id = ?` of the same cells through the same
//!   driver on held connections, one at a time, interleaved so that all
//!   see the same machine. A third kind, the raw `SELECT … WHERE row_key =
//!   ? AND column_name = ? ORDER BY ref_key DESC LIMIT 1` the layout needs
//!   for a latest-cell read, separates what the store adds from what the
//!   layout's secondary-index lookup costs the server.
//!
//! The raw load reads its files on the server's host (`secure_file_priv`),
//! so this benchmark runs on the dev cluster, whose servers share this
//! machine.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use clap::Args;
use futures::{StreamExt, TryStreamExt};
use schemaless::mysql::{schema, Topology};
use schemaless::{codec, routing, Cell, CellStore, MySqlStore, WriteOutcome};
use serde_json::json;
use sqlx::{AssertSqlSafe, Row};

use crate::workload::Trips;

#[derive(Args)]
pub struct CellsArgs {
    /// How many cells to write.
    #[arg(long, default_value_t = 200_000)]
    cells: usize,
    /// Loads (put_cells calls, LOAD DATA statements) in flight at once.
    #[arg(long, default_value_t = 8)]
    concurrency: usize,
    /// Cells per put_cells call (default: the config's
    /// `limits.max_batch_cells`; the benchmark's own instance allows it).
    #[arg(long)]
    batch: Option<usize>,
    /// How many point reads to time, of each kind.
    #[arg(long, default_value_t = 20_000)]
    reads: usize,
    /// Print a JSON object with every figure as the last line.
    #[arg(long)]
    json: bool,
    /// The instance the benchmark creates (and drops) for itself.
    #[arg(long, default_value = "mzbench")]
    instance: String,
}

pub async fn run(args: CellsArgs, config_path: &Path, cluster_dir: &Path) -> anyhow::Result<()> {
    if args.cells == 0 || args.reads == 0 || args.concurrency == 0 {
        return Err(crate::UsageError(
            "--cells, --reads and --concurrency must be positive".into(),
        )
        .into());
    }
    let mut config = crate::load_config(config_path)?;
    config.instance.name = args.instance.clone();
    if let Some(batch) = args.batch {
        if batch == 0 || batch > 100_000 {
            return Err(crate::UsageError("--batch must be between 1 and 100000".into()).into());
        }
        config.limits.max_batch_cells = batch;
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
    let store = MySqlStore::connect(&config)?;
    let shard_count = config.instance.shard_count;

    eprintln!("generating {} cells ...", args.cells);
    let mut trips = Trips::new(42);
    let cells: Vec<Cell> = (0..args.cells)
        .map(|_| {
            let row = trips.row_key();
            trips.base_cell(row, 1)
        })
        .collect();
    let cap = codec::inflated_cap(config.limits.max_body_bytes);
    let json_bytes: usize = cells.iter().map(|c| c.body.json_len()).sum();
    let encoded: Vec<Vec<u8>> = cells
        .iter()
        .map(|c| codec::encode(&c.body, cap))
        .collect::<Result<_, _>>()?;
    let encoded_bytes: usize = encoded.iter().map(Vec::len).sum();

    // --- raw limit: LOAD DATA of the same encoded cells ---------------
    eprintln!("writing LOAD DATA files ...");
    let files = write_load_files(&files_dir, &args.instance, shard_count, &cells, &encoded)?;
    cluster.wait_all_caught_up(Duration::from_secs(600)).await?;
    eprintln!(
        "LOAD DATA of {} cells into {shard_count} shards ...",
        args.cells
    );
    let started = Instant::now();
    load_files(&topology, &files, args.concurrency).await?;
    let load_elapsed = started.elapsed();
    cluster.wait_all_caught_up(Duration::from_secs(600)).await?;
    let load_replicated = started.elapsed();
    for (_, path) in &files {
        let _ = std::fs::remove_file(path);
    }
    let loaded = count_cells(&topology).await?;
    if loaded != args.cells as u64 {
        bail!("LOAD DATA stored {loaded} cells, expected {}", args.cells);
    }
    truncate(&topology).await?;
    cluster.wait_all_caught_up(Duration::from_secs(600)).await?;

    // --- put_cells ----------------------------------------------------
    eprintln!("put_cells of {} cells ...", args.cells);
    let batch = config.limits.max_batch_cells;
    let batches: Vec<Vec<Cell>> = cells.chunks(batch).map(<[Cell]>::to_vec).collect();
    let commits_before = store.commit_stats();
    let cpu_before = super::cpu::process_cpu();
    let started = Instant::now();
    let written: Vec<usize> = futures::stream::iter(batches.into_iter().map(|chunk| {
        let store = store.clone();
        async move {
            let results = store.put_cells(chunk).await?;
            Ok::<_, anyhow::Error>(
                results
                    .iter()
                    .filter(|r| **r == Ok(WriteOutcome::Written))
                    .count(),
            )
        }
    }))
    .buffer_unordered(args.concurrency)
    .try_collect()
    .await?;
    let put_elapsed = started.elapsed();
    let put_client_cpu = super::cpu::process_cpu().saturating_sub(cpu_before);
    let commits = store.commit_stats();
    let put_transactions = commits.transactions - commits_before.transactions;
    let calls_per_transaction =
        (commits.calls - commits_before.calls) as f64 / put_transactions.max(1) as f64;
    cluster.wait_all_caught_up(Duration::from_secs(600)).await?;
    let put_replicated = started.elapsed();
    let written: usize = written.iter().sum();
    if written != args.cells {
        bail!("put_cells wrote {written} cells, expected {}", args.cells);
    }

    // --- point reads ----------------------------------------------------
    eprintln!("timing {} point reads of each kind ...", args.reads);
    let reads = super::point_reads::time_reads(&store, &topology, &cells, args.reads).await?;
    let (ours, raw, raw_latest) = (&reads.ours, &reads.raw_pk, &reads.raw_latest);

    // The ratio is taken on replicated throughput: a write phase ends when
    // every minion has applied it. A single LOAD DATA statement per shard
    // is acknowledged before its minions start applying it, so timing
    // acknowledgements alone would leave the raw load's replication work
    // outside its window while put_cells, many smaller transactions,
    // shares the machine with its minions' work as it goes. Over a long
    // backfill only the replicated rate can be sustained.
    let put_rate = args.cells as f64 / put_replicated.as_secs_f64();
    let load_rate = args.cells as f64 / load_replicated.as_secs_f64();
    let put_ack_rate = args.cells as f64 / put_elapsed.as_secs_f64();
    let load_ack_rate = args.cells as f64 / load_elapsed.as_secs_f64();
    let figures = json!({
        "cells": args.cells,
        "shards": shard_count,
        "concurrency": args.concurrency,
        "batch_cells": batch,
        "body_json_bytes_avg": json_bytes as f64 / args.cells as f64,
        "body_stored_bytes_avg": encoded_bytes as f64 / args.cells as f64,
        "put_cells_per_sec": put_rate,
        "load_data_cells_per_sec": load_rate,
        "put_ratio": put_rate / load_rate,
        "put_acked_cells_per_sec": put_ack_rate,
        "put_client_cpu_us_per_cell": put_client_cpu.as_secs_f64() * 1e6 / args.cells as f64,
        "put_transactions": put_transactions,
        "put_calls_per_transaction": calls_per_transaction,
        "load_data_acked_cells_per_sec": load_ack_rate,
        "put_acked_ratio": put_ack_rate / load_ack_rate,
        "reads": args.reads,
        "get_latest_p50_us": ours.percentile_us(50.0),
        "get_latest_p99_us": ours.percentile_us(99.0),
        "raw_select_p50_us": raw.percentile_us(50.0),
        "raw_select_p99_us": raw.percentile_us(99.0),
        "get_ratio": ours.percentile_us(50.0) / raw.percentile_us(50.0),
        "get_p99_ratio": ours.percentile_us(99.0) / raw.percentile_us(99.0),
        "raw_latest_p50_us": raw_latest.percentile_us(50.0),
        "raw_latest_p99_us": raw_latest.percentile_us(99.0),
        "get_vs_raw_latest_ratio": ours.percentile_us(50.0) / raw_latest.percentile_us(50.0),
        "raw_latest_vs_pk_ratio": raw_latest.percentile_us(50.0) / raw.percentile_us(50.0),
        "get_latest_client_cpu_us": reads.cpu[0],
        "raw_select_client_cpu_us": reads.cpu[1],
        "raw_latest_client_cpu_us": reads.cpu[2],
    });
    println!(
        "cells: {} of {:.0} bytes JSON ({:.0} bytes stored) over {shard_count} shards, {} at a time",
        args.cells,
        figures["body_json_bytes_avg"].as_f64().unwrap_or_default(),
        figures["body_stored_bytes_avg"].as_f64().unwrap_or_default(),
        args.concurrency
    );
    println!("                 replicated to every minion     acknowledged by the masters");
    println!(
        "put_cells        {:>10.0} cells/s ({:>6.2}s)    {:>10.0} cells/s ({:>6.2}s)",
        put_rate,
        put_replicated.as_secs_f64(),
        put_ack_rate,
        put_elapsed.as_secs_f64()
    );
    println!(
        "raw LOAD DATA    {:>10.0} cells/s ({:>6.2}s)    {:>10.0} cells/s ({:>6.2}s)",
        load_rate,
        load_replicated.as_secs_f64(),
        load_ack_rate,
        load_elapsed.as_secs_f64()
    );
    println!(
        "put_ratio        {:>10.2} (target >= 0.75)      {:>10.2}",
        put_rate / load_rate,
        put_ack_rate / load_ack_rate
    );
    println!(
        "put_cells client CPU {:.1} us per cell; {put_transactions} transactions, {calls_per_transaction:.1} calls (one master's part of a call) each",
        put_client_cpu.as_secs_f64() * 1e6 / args.cells as f64
    );
    println!(
        "get_cell_latest  p50 {:>7.1} us  p99 {:>7.1} us",
        ours.percentile_us(50.0),
        ours.percentile_us(99.0)
    );
    println!(
        "raw PK SELECT    p50 {:>7.1} us  p99 {:>7.1} us",
        raw.percentile_us(50.0),
        raw.percentile_us(99.0)
    );
    println!(
        "raw latest SELECT p50 {:>7.1} us  p99 {:>7.1} us  (the layout's own statement for this read)",
        raw_latest.percentile_us(50.0),
        raw_latest.percentile_us(99.0)
    );
    println!(
        "client CPU per read: get_cell_latest {:.1} us, raw PK SELECT {:.1} us, raw latest SELECT {:.1} us",
        reads.cpu[0], reads.cpu[1], reads.cpu[2]
    );
    println!(
        "get_ratio        {:>10.2}   (p50; target <= 1.2); against the raw latest SELECT {:.2}; raw latest over raw PK {:.2}",
        ours.percentile_us(50.0) / raw.percentile_us(50.0),
        ours.percentile_us(50.0) / raw_latest.percentile_us(50.0),
        raw_latest.percentile_us(50.0) / raw.percentile_us(50.0)
    );
    if args.json {
        println!("{figures}");
    }
    store.close().await;
    schema::drop_instance(&topology).await?;
    topology.close().await;
    Ok(())
}

/// One tab-separated file per shard in the servers' `secure_file_priv`
/// folder, binary fields escaped for `LOAD DATA`.
fn write_load_files(
    dir: &Path,
    instance: &str,
    shard_count: u32,
    cells: &[Cell],
    encoded: &[Vec<u8>],
) -> anyhow::Result<Vec<(u32, PathBuf)>> {
    let mut files = LoadFiles::new(dir, instance, shard_count);
    for (cell, body) in cells.iter().zip(encoded) {
        files.add(cell, body)?;
    }
    files.finish()
}

/// `LOAD DATA` files written a cell at a time (so a data set larger than
/// memory can be loaded): one per shard, opened on its first cell.
pub(super) struct LoadFiles {
    dir: PathBuf,
    instance: String,
    shard_count: u32,
    created_at: i64,
    writers: Vec<Option<(PathBuf, std::io::BufWriter<std::fs::File>)>>,
}

impl LoadFiles {
    pub(super) fn new(dir: &Path, instance: &str, shard_count: u32) -> LoadFiles {
        LoadFiles {
            dir: dir.to_path_buf(),
            instance: instance.to_string(),
            shard_count,
            created_at: schemaless::cell::now_micros(),
            writers: (0..shard_count).map(|_| None).collect(),
        }
    }

    pub(super) fn add(&mut self, cell: &Cell, body: &[u8]) -> anyhow::Result<()> {
        let shard = routing::shard_of(&cell.key.row_key, self.shard_count);
        let slot = &mut self.writers[shard as usize];
        if slot.is_none() {
            let path = self.dir.join(format!("{}_{shard:04}.tsv", self.instance));
            let file = std::fs::File::create(&path)
                .with_context(|| format!("creating {}", path.display()))?;
            *slot = Some((path, std::io::BufWriter::new(file)));
        }
        let (_, w) = slot.as_mut().expect("just created");
        write_escaped(w, cell.key.row_key.as_bytes())?;
        write!(w, "\t{}\t{}\t", cell.key.column, cell.key.ref_key)?;
        write_escaped(w, body)?;
        writeln!(w, "\t{}", self.created_at)?;
        Ok(())
    }

    pub(super) fn finish(self) -> anyhow::Result<Vec<(u32, PathBuf)>> {
        let mut files = Vec::new();
        for (shard, slot) in self.writers.into_iter().enumerate() {
            if let Some((path, mut w)) = slot {
                w.flush()?;
                files.push((shard as u32, path));
            }
        }
        Ok(files)
    }
}

fn write_escaped(w: &mut impl Write, bytes: &[u8]) -> std::io::Result<()> {
    for &b in bytes {
        match b {
            0 => w.write_all(b"\\0")?,
            b'\t' => w.write_all(b"\\t")?,
            b'\n' => w.write_all(b"\\n")?,
            b'\\' => w.write_all(b"\\\\")?,
            _ => w.write_all(&[b])?,
        }
    }
    Ok(())
}

/// Loads every shard's file, `concurrency` loads at a time.
pub(super) async fn load_files(
    topology: &Topology,
    files: &[(u32, PathBuf)],
    concurrency: usize,
) -> anyhow::Result<()> {
    let loads: Vec<_> = files
        .iter()
        .map(|(shard, path)| load_file(topology, *shard, path))
        .collect();
    futures::stream::iter(loads)
        .buffer_unordered(concurrency)
        .try_collect::<Vec<()>>()
        .await?;
    Ok(())
}

async fn load_file(topology: &Topology, shard: u32, path: &Path) -> anyhow::Result<()> {
    let path_text = path.display().to_string();
    if path_text.contains('\'') || path_text.contains('\\') {
        bail!("cannot LOAD DATA from {path_text}: quotes or backslashes in the path");
    }
    let node = &topology.cluster(shard)?.master();
    let sql = format!(
        "LOAD DATA INFILE '{path_text}' INTO TABLE `{}`.`entity` CHARACTER SET binary \
         FIELDS TERMINATED BY '\\t' ESCAPED BY '\\\\' LINES TERMINATED BY '\\n' \
         (row_key, column_name, ref_key, body, created_at)",
        topology.database(shard)
    );
    sqlx::raw_sql(AssertSqlSafe(sql))
        .execute(&node.pool)
        .await
        .with_context(|| format!("LOAD DATA into shard {shard} on {}", node.label))?;
    Ok(())
}

async fn for_each_shard_sql(
    topology: &Topology,
    sql: impl Fn(&str) -> String,
) -> anyhow::Result<Vec<u64>> {
    let mut out = Vec::new();
    for shard in 0..topology.shard_count {
        let node = &topology.cluster(shard)?.master();
        let rows = sqlx::raw_sql(AssertSqlSafe(sql(&topology.database(shard))))
            .fetch_all(&node.pool)
            .await?;
        for row in rows {
            out.push(row.try_get::<i64, _>(0)? as u64);
        }
    }
    Ok(out)
}

pub(super) async fn count_cells(topology: &Topology) -> anyhow::Result<u64> {
    Ok(for_each_shard_sql(topology, |db| {
        format!("SELECT COUNT(*) FROM `{db}`.`entity`")
    })
    .await?
    .iter()
    .sum())
}

pub(super) async fn truncate(topology: &Topology) -> anyhow::Result<()> {
    for shard in 0..topology.shard_count {
        let node = &topology.cluster(shard)?.master();
        let sql = format!("TRUNCATE TABLE `{}`.`entity`", topology.database(shard));
        sqlx::raw_sql(AssertSqlSafe(sql))
            .execute(&node.pool)
            .await?;
    }
    Ok(())
}
