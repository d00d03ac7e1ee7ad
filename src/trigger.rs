//! `mezzanine trigger status|retry`: the state of a trigger's shards, and
//! re-driving its parked cells. Triggers themselves run inside the apps
//! that register their handlers (see `examples/billing.rs`).

use std::path::Path;

use clap::{Args, Subcommand};
use schemaless::mysql::trigger;
use schemaless::MySqlStore;

#[derive(Subcommand)]
pub enum TriggerCommand {
    /// Per shard: the last handled added_id, the log's head, the lag, the
    /// runner holding the shard, and parked cells.
    Status(NameArgs),
    /// Flag every parked cell for another try; the runners owning their
    /// shards call the handler on them again.
    Retry(NameArgs),
}

#[derive(Args)]
pub struct NameArgs {
    /// The trigger's name.
    name: String,
    /// Show every shard, not only those with lag, parked cells or no owner.
    #[arg(long)]
    all: bool,
}

pub async fn run(command: TriggerCommand, config_path: &Path) -> anyhow::Result<()> {
    let config = crate::load_config(config_path)?;
    let store = MySqlStore::connect(&config)?;
    match command {
        TriggerCommand::Status(args) => {
            trigger::check_name(&args.name).map_err(|e| crate::UsageError(e.to_string()))?;
            let shards = trigger::status(&store, &args.name).await?;
            let owners: std::collections::BTreeSet<&str> =
                shards.iter().filter_map(|s| s.owner.as_deref()).collect();
            let lag: u64 = shards.iter().map(|s| s.lag).sum();
            let parked: u64 = shards.iter().map(|s| s.parked).sum();
            let unowned = shards.iter().filter(|s| s.owner.is_none()).count();
            println!(
                "trigger {}: {} shards, {} runners, {unowned} shards unowned, lag {lag} cells, {parked} parked",
                args.name,
                shards.len(),
                owners.len()
            );
            let mut table = crate::table::Table::new(&[
                "SHARD", "OFFSET", "HEAD", "LAG", "PARKED", "RETRYING", "OWNER",
            ])
            .right(&[0, 1, 2, 3, 4, 5]);
            for s in shards
                .iter()
                .filter(|s| args.all || s.lag > 0 || s.parked > 0 || s.owner.is_none())
            {
                table.row([
                    s.shard.to_string(),
                    s.offset.to_string(),
                    s.head.to_string(),
                    s.lag.to_string(),
                    s.parked.to_string(),
                    s.retrying.to_string(),
                    s.owner.as_deref().unwrap_or("-").to_string(),
                ]);
            }
            table.print("");
        }
        TriggerCommand::Retry(args) => {
            trigger::check_name(&args.name).map_err(|e| crate::UsageError(e.to_string()))?;
            let flagged = trigger::retry_parked(&store, &args.name).await?;
            println!(
                "trigger {}: {flagged} parked cells flagged for retry; `mezzanine trigger status {}` shows them drain",
                args.name, args.name
            );
        }
    }
    store.close().await;
    Ok(())
}
