//! `shard move`, `shard resume`, `shard rollback`, `shard gc`: the
//! commands over [`schemaless::mysql::moves::run`], with their output.

use std::time::Duration;

use clap::Args;
use schemaless::mysql::backup::BackupError;
use schemaless::mysql::moves::run::{self, MoveOptions};
use schemaless::mysql::moves::{state, MoveRecord, MoveReport, Phase};
use schemaless::mysql::Topology;
use serde::Serialize;

use crate::table::Table;
use crate::UsageError;

#[derive(Args)]
pub struct MoveArgs {
    /// The shards to move: `12`, `0-15`, or a list such as `0-3,9`.
    shards: String,
    /// The cluster to move them to, by its name in the config.
    #[arg(long)]
    to: String,
    /// Check the move and say what it would do, changing nothing.
    #[arg(long)]
    dry_run: bool,
    /// How long a fence holds if this command dies under it (writes to the
    /// shard resume at the source after it).
    #[arg(long, default_value_t = 10_000)]
    fence_timeout_ms: u64,
    /// Stop after saving this phase and wait to be killed: fire drills
    /// and the tests of a killed move.
    #[arg(long, hide = true, value_parser = parse_phase)]
    hold_at: Option<Phase>,
    #[command(flatten)]
    output: OutputArgs,
}

#[derive(Args)]
pub struct OutputArgs {
    /// One JSON object on the last line.
    #[arg(long)]
    json: bool,
}

#[derive(Args)]
pub struct RollbackArgs {
    /// Only the moves of these shards.
    shards: Option<String>,
    #[command(flatten)]
    output: OutputArgs,
}

#[derive(Args)]
pub struct GcArgs {
    /// Keep old copies of moves finished less than this long ago.
    #[arg(long, default_value_t = 3600)]
    grace_s: u64,
    /// Say what would be dropped, dropping nothing.
    #[arg(long)]
    dry_run: bool,
    #[command(flatten)]
    output: OutputArgs,
}

fn parse_phase(text: &str) -> Result<Phase, String> {
    [
        Phase::Copying,
        Phase::CatchingUp,
        Phase::Fenced,
        Phase::Switched,
    ]
    .into_iter()
    .find(|p| p.as_str() == text)
    .ok_or_else(|| format!("not a phase to hold at: {text:?}"))
}

/// `12`, `0-15`, `0-3,9` as shard numbers, each checked against the
/// instance's shard count.
pub fn shard_list(text: &str, shard_count: u32) -> Result<Vec<u32>, UsageError> {
    let mut shards = Vec::new();
    for part in text.split(',') {
        let range: config::ShardRange = part.parse().map_err(UsageError)?;
        if range.last >= shard_count {
            return Err(UsageError(format!(
                "shard {} does not exist: the instance has shards 0-{}",
                range.last,
                shard_count - 1
            )));
        }
        shards.extend(range.iter());
    }
    shards.sort_unstable();
    shards.dedup();
    Ok(shards)
}

fn refused(e: BackupError) -> anyhow::Error {
    match e {
        BackupError::Refused(message) => UsageError(message).into(),
        other => other.into(),
    }
}

/// `--json` output of `shard move` and `shard resume`.
#[derive(Serialize)]
struct Moved {
    moves: Vec<MoveReport>,
}

pub async fn start(topology: &Topology, args: MoveArgs) -> anyhow::Result<()> {
    let shards = shard_list(&args.shards, topology.shard_count)?;
    let records = run::plan(topology, &shards, &args.to)
        .await
        .map_err(refused)?;
    if args.dry_run {
        for r in &records {
            println!(
                "would move shard {} from {} to {}",
                r.shard, r.source, r.target
            );
        }
        return Ok(());
    }
    let options = MoveOptions {
        fence_timeout: Duration::from_millis(args.fence_timeout_ms),
        hold_at: args.hold_at,
        ..MoveOptions::default()
    };
    run_all(topology, records, &options, args.output.json).await
}

pub async fn resume(topology: &Topology, args: OutputArgs) -> anyhow::Result<()> {
    let mut records: Vec<MoveRecord> = state::in_progress(topology).await.into_values().collect();
    records.sort_by_key(|r| r.shard);
    if records.is_empty() && !args.json {
        println!("no move to resume");
    }
    run_all(topology, records, &MoveOptions::default(), args.json).await
}

async fn run_all(
    topology: &Topology,
    records: Vec<MoveRecord>,
    options: &MoveOptions,
    json: bool,
) -> anyhow::Result<()> {
    let mut reports = Vec::new();
    for mut record in records {
        let report = run::run(topology, &mut record, options)
            .await
            .map_err(refused)
            .map_err(|e| {
                e.context(format!(
                    "moving shard {} from {} to {} (phase {}; `shard resume` continues, `shard rollback` gives up)",
                    record.shard, record.source, record.target, record.phase
                ))
            })?;
        if !json {
            println!(
                "shard {} moved from {} to {}: {} cells copied ({} catch-up passes, {:.1}s), {} rows of other tables, writes fenced {} ms",
                report.shard,
                report.source,
                report.target,
                report.copied,
                report.passes,
                report.copy_ms as f64 / 1000.0,
                report.side_rows,
                report.fence_ms
            );
        }
        reports.push(report);
    }
    if json {
        println!("{}", serde_json::to_string(&Moved { moves: reports })?);
    }
    Ok(())
}

pub async fn rollback(topology: &Topology, args: RollbackArgs) -> anyhow::Result<()> {
    let only = args
        .shards
        .as_deref()
        .map(|s| shard_list(s, topology.shard_count))
        .transpose()?;
    let mut records: Vec<MoveRecord> = state::in_progress(topology)
        .await
        .into_values()
        .filter(|r| only.as_ref().is_none_or(|o| o.contains(&r.shard)))
        .collect();
    records.sort_by_key(|r| r.shard);
    for record in &mut records {
        run::rollback(topology, record).await.map_err(refused)?;
        if !args.output.json {
            println!(
                "shard {}: move to {} rolled back; it stays on {}",
                record.shard, record.target, record.source
            );
        }
    }
    if args.output.json {
        println!(
            "{}",
            serde_json::json!({ "rolled_back": records.iter().map(|r| r.shard).collect::<Vec<_>>() })
        );
    } else if records.is_empty() {
        println!("no move to roll back");
    }
    Ok(())
}

pub async fn gc(topology: &Topology, args: GcArgs) -> anyhow::Result<()> {
    let collected = run::collect(topology, Duration::from_secs(args.grace_s), args.dry_run)
        .await
        .map_err(refused)?;
    if args.output.json {
        println!(
            "{}",
            serde_json::json!({ "dry_run": args.dry_run, "collected": collected })
        );
        return Ok(());
    }
    let verb = if args.dry_run {
        "would drop"
    } else {
        "dropped"
    };
    for r in &collected {
        println!(
            "{verb} the old copy of shard {} from cluster {}",
            r.shard, r.source
        );
    }
    if collected.is_empty() {
        println!(
            "no old copy is due (moves finished less than {}s ago keep theirs)",
            args.grace_s
        );
    }
    Ok(())
}

/// The moves part of `shard status`.
pub fn print_moves(moves: &[MoveRecord]) {
    if moves.is_empty() {
        return;
    }
    println!("moves ({}):", moves.len());
    let mut table =
        Table::new(&["SHARD", "FROM", "TO", "PHASE", "COPIED", "FENCE MS"]).right(&[0, 4, 5]);
    for m in moves {
        table.row([
            m.shard.to_string(),
            m.source.clone(),
            m.target.clone(),
            if m.phase == Phase::Done {
                "done (old copy kept until shard gc)".to_string()
            } else {
                m.phase.to_string()
            },
            m.copied.to_string(),
            m.fence_ms.map_or("-".into(), |ms| ms.to_string()),
        ]);
    }
    table.print("  ");
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shard_lists_parse_and_are_checked() {
        assert_eq!(shard_list("0-3,9,2", 16).unwrap(), vec![0, 1, 2, 3, 9]);
        assert!(shard_list("16", 16)
            .unwrap_err()
            .0
            .contains("does not exist"));
        assert!(shard_list("x", 16).is_err());
    }
}
