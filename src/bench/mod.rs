//! placeholder
use std::path::Path;
use clap::Subcommand;
#[derive(Subcommand)]
pub enum BenchCommand { Cells }
pub async fn run(_c: BenchCommand, _p: &Path, _d: &Path) -> anyhow::Result<()> { Ok(()) }
