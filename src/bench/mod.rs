//! `mezzanine bench …`: benchmarks users can run on their own servers.
//! Every figure is printed next to the raw limit of the same servers,
//! measured in the same run, and with `--json` the last line is one JSON
//! object holding every figure.
//!
//! - [`cells`]: `put_cells` against `LOAD DATA`, `get_cell_latest` against
//!   a raw primary-key `SELECT`;
//! - [`index`]: index lag under load, trigger and index backfill
//!   throughput;
//! - [`backfill`]: the backfill against a raw `LOAD DATA` of the same
//!   cells, and its peak memory at two sizes;
//! - [`mirror`]: facade write latency in `mirror` against `legacy`, and
//!   relay throughput;
//! - [`verify`]: facade read latency with sampling at 0%, 1% and 100%,
//!   and the full diff's speed;
//! - [`capture`]: plain SQL write latency with capture off and on, and
//!   the lag from a commit to its cells readable in Schemaless;
//! - [`availability`]: write throughput and latency with buffered writes
//!   off and on, and the time from a master's death to the first write
//!   taken, on private servers of its own (it kills a master);
//! - [`moves`]: a shard move's copy against `LOAD DATA`, its fence, and
//!   write latency on the moved shards before and during the moves.

mod availability;
mod backfill;
mod capture;
mod cells;
mod cpu;
mod index;
mod mirror;
mod moves;
mod point_reads;
mod proxy;
mod stats;
mod verify;
mod worker;

use std::path::Path;

use clap::Subcommand;
use schemaless::mysql::{schema, Topology};

#[derive(Subcommand)]
pub enum BenchCommand {
    /// put_cells throughput against a raw LOAD DATA of the same encoded
    /// cells into the same tables, and get_cell_latest latency against a
    /// raw primary-key SELECT through the same driver, on the dev cluster.
    Cells(cells::CellsArgs),
    /// Index lag (write to visible in a query) p50/p99 under a steady write
    /// load, and trigger and index backfill throughput, on the dev cluster.
    Index(index::IndexArgs),
    /// Facade write latency and throughput in mode mirror against mode
    /// legacy (same writers, same run), and relay throughput, on the dev
    /// cluster.
    Mirror(mirror::MirrorArgs),
    /// Backfill throughput against a raw LOAD DATA of the same cells into
    /// the same shard tables, and peak memory at two sizes, on the dev
    /// cluster.
    Backfill(backfill::BackfillArgs),
    /// Facade read latency with sampling at 0%, 1% and 100% (same readers,
    /// same run), and full-diff speed in parents/s, on the dev cluster.
    Verify(verify::VerifyArgs),
    /// Plain SQL write latency and throughput with capture off and on (same
    /// writers, same run), and the lag from a commit to its cells readable
    /// in Schemaless under a steady rate with a relay running, on the dev
    /// cluster.
    Capture(capture::CaptureArgs),
    /// Write throughput and p50/p99 latency with buffered writes off and on
    /// (one secondary), same run; then kill -9 a master under load and time
    /// the first write taken (hinted handoff) and the first written again
    /// after promoting its minion. Starts private servers of its own on
    /// free loopback ports: it kills one.
    Availability(availability::AvailabilityArgs),
    /// The cell API through a worker over HTTP (the Rust client,
    /// keep-alive, loopback) against a linked facade, same run, same
    /// concurrency: get_cell_latest p50/p99 and put throughput, on the
    /// dev cluster.
    Worker(worker::WorkerArgs),
    /// The proxy's cost: pgbench's select-only script straight to
    /// PostgreSQL and through `mezzanine proxy`, same run, same clients:
    /// p50/p99 latency and throughput; then a trip read by key served
    /// from Schemaless (shadow), and a trip's version bumped by key
    /// through the facade (primary), each against PostgreSQL.
    Proxy(proxy::ProxyArgs),
    /// A shard move's copy throughput against a raw LOAD DATA of the same
    /// cells into the same target master, the fence's length, and write
    /// p99 on the moved shards before and during the moves, on the dev
    /// cluster.
    Move(moves::MoveArgs),
}

pub async fn run(command: BenchCommand, config: &Path, cluster_dir: &Path) -> anyhow::Result<()> {
    // The availability benchmark runs on private servers it removes.
    let on_dev_cluster = !matches!(command, BenchCommand::Availability(_));
    let result = run_one(command, config, cluster_dir).await;
    if on_dev_cluster {
        trim_binary_logs(cluster_dir).await;
    }
    result
}

/// Deletes the dev cluster's binary logs the benchmark wrote, once its
/// minions have them: a few runs would otherwise fill the disk. Best
/// effort: a cluster that is down or behind keeps its logs, with a
/// warning.
async fn trim_binary_logs(cluster_dir: &Path) {
    let purged = match devcluster::DevCluster::open(cluster_dir) {
        Ok(cluster) => cluster
            .purge_binary_logs(std::time::Duration::from_secs(600))
            .await
            .map_err(anyhow::Error::from),
        Err(e) => Err(e.into()),
    };
    if let Err(e) = purged {
        eprintln!("warning: the dev cluster's binary logs were not purged: {e:#}");
    }
}

async fn run_one(command: BenchCommand, config: &Path, cluster_dir: &Path) -> anyhow::Result<()> {
    match command {
        BenchCommand::Cells(args) => cells::run(args, config, cluster_dir).await,
        BenchCommand::Index(args) => index::run(args, config, cluster_dir).await,
        BenchCommand::Mirror(args) => mirror::run(args, config, cluster_dir).await,
        BenchCommand::Backfill(args) => backfill::run(args, config, cluster_dir).await,
        BenchCommand::Verify(args) => verify::run(args, config, cluster_dir).await,
        BenchCommand::Availability(args) => availability::run(args, config, cluster_dir).await,
        BenchCommand::Capture(args) => capture::run(args, config, cluster_dir).await,
        BenchCommand::Worker(args) => worker::run(args, config, cluster_dir).await,
        BenchCommand::Proxy(args) => proxy::run(args, config, cluster_dir).await,
        BenchCommand::Move(args) => moves::run(args, config, cluster_dir).await,
    }
}

/// The config at `config_path`, pointed at a PostgreSQL database and a
/// Schemaless instance of the benchmark's own (both named `instance`),
/// with at least `connections` PostgreSQL connections.
pub(crate) fn own_instance(
    config_path: &Path,
    instance: &str,
    connections: u32,
) -> anyhow::Result<config::Config> {
    let mut config = crate::load_config(config_path)?;
    config.instance.name = instance.to_string();
    let legacy_config = config
        .legacy
        .as_mut()
        .ok_or_else(|| crate::UsageError("the config has no [legacy] table".into()))?;
    let mut url = url::Url::parse(&legacy_config.url)?;
    url.set_path(&format!("/{instance}"));
    legacy_config.url = url.to_string();
    legacy_config.max_connections = legacy_config.max_connections.max(connections);
    Ok(config)
}

/// Starts the dev cluster if needed, recreates the instance's shard
/// databases empty, and creates the legacy trips tables emptied, without
/// the toolkit's own tables. Returns a pool to the legacy database.
pub(crate) async fn fresh_data_set(
    config: &config::Config,
    config_path: &Path,
    cluster_dir: &Path,
) -> anyhow::Result<sqlx::PgPool> {
    let layout = legacy::connection::layout_config(config)?;
    let spec = crate::cluster::spec_from_config(config_path, 55432)?;
    crate::cluster::up(cluster_dir, spec).await?;
    let topology = Topology::from_config(config)?;
    schema::drop_instance(&topology).await?;
    schema::apply(&topology).await?;
    topology.close().await;
    let legacy_config = legacy::connection::legacy_config(config)?;
    legacy::trips::init(legacy_config, &layout.schema, Some(&layout.uuid)).await?;
    let pool = legacy::connection::pool(legacy_config)?;
    sqlx::raw_sql(sqlx::AssertSqlSafe(format!(
        "DROP SCHEMA IF EXISTS mezzanine CASCADE;
         TRUNCATE {s}.trip_notes, {s}.billing_attempts, {s}.fare_adjustments, {s}.trips",
        s = layout.schema
    )))
    .execute(&pool)
    .await?;
    Ok(pool)
}
