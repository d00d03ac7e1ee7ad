//! `mezzanine schema apply`: create the instance's shard databases.

use std::path::Path;

use anyhow::Context;
use clap::Subcommand;
use schemaless::mysql::{schema, Topology};

#[derive(Subcommand)]
pub enum SchemaCommand {
    /// Create every missing shard database and entity table on each
    /// cluster's master (replication carries them to the minions).
    /// Idempotent and online: rerun it at any time.
    Apply,
    /// Check that every shard exists and the recorded shard count matches
    /// the config.
    Verify,
}

pub async fn run(command: SchemaCommand, config_path: &Path) -> anyhow::Result<()> {
    let config = crate::load_config(config_path)?;
    let topology = Topology::from_config(&config)?;
    let result = match command {
        SchemaCommand::Apply => apply(&topology).await,
        SchemaCommand::Verify => verify(&topology).await,
    };
    topology.close().await;
    result
}

/// Applies the schema and prints what was created where.
pub async fn apply(topology: &Topology) -> anyhow::Result<()> {
    println!(
        "applying schema of instance {:?} ({} shards) ...",
        topology.instance, topology.shard_count
    );
    let report = schema::apply(topology)
        .await
        .context("applying the schema")?;
    for c in &report.clusters {
        println!(
            "  cluster {:<8} {:<32} {:>5} shard databases created, {:>5} already present",
            c.cluster, c.master, c.created, c.existing
        );
    }
    println!(
        "done in {:.2}s: {} created, {} already present",
        report.elapsed.as_secs_f64(),
        report.created(),
        report.existing()
    );
    Ok(())
}

async fn verify(topology: &Topology) -> anyhow::Result<()> {
    let missing = schema::verify(topology).await?;
    if missing.is_empty() {
        println!(
            "schema of instance {:?} is complete: {} shards",
            topology.instance, topology.shard_count
        );
        Ok(())
    } else {
        anyhow::bail!(
            "{} of {} shards are missing (first: {}); run `mezzanine schema apply`",
            missing.len(),
            topology.shard_count,
            missing[0]
        )
    }
}
