//! `mezzanine demo`: placeholder replaced below.
use std::path::Path;
use clap::Args;
#[derive(Args)]
pub struct DemoArgs {}
pub async fn run(_a: DemoArgs, _c: &Path, _d: &Path) -> anyhow::Result<()> { Ok(()) }
