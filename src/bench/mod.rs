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
//!   and the full diff's speed.

mod backfill;
mod cells;
mod index;
mod mirror;
mod stats;
mod verify;

use std::path::Path;

use clap::Subcommand;

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
}

pub async fn run(command: BenchCommand, config: &Path, cluster_dir: &Path) -> anyhow::Result<()> {
    match command {
        BenchCommand::Cells(args) => cells::run(args, config, cluster_dir).await,
        BenchCommand::Index(args) => index::run(args, config, cluster_dir).await,
        BenchCommand::Mirror(args) => mirror::run(args, config, cluster_dir).await,
        BenchCommand::Backfill(args) => backfill::run(args, config, cluster_dir).await,
        BenchCommand::Verify(args) => verify::run(args, config, cluster_dir).await,
    }
}
