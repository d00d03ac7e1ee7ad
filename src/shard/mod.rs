//! `mezzanine shard`: `status` (which cluster holds each shard now,
//! against the ranges config gave the clusters, the placements recorded
//! since and the moves in progress) here; `move`, `resume`, `rollback` and
//! `gc` in [`moving`].

use std::path::Path;

use clap::Subcommand;
use schemaless::mysql::topology::placement;
use schemaless::mysql::Topology;
use serde::Serialize;

use crate::table::Table;

mod moving;

#[derive(Subcommand)]
pub enum ShardCommand {
    /// Per cluster: the shards config gave it and those it holds now (after
    /// placements recorded by shard moves), and every recorded placement
    /// with its epoch. Reads the placements from every master that answers.
    Status {
        /// One JSON object instead of tables.
        #[arg(long)]
        json: bool,
    },
    /// Moves shards to another cluster while they take writes: copies each
    /// shard (a snapshot, then its change log), fences its writes for the
    /// last cells (writers wait, none fail), switches the placement every
    /// store follows, and keeps the old copy read-only until `shard gc`.
    /// One shard at a time.
    Move(moving::MoveArgs),
    /// Finishes every move that was killed or failed: one that had not
    /// switched starts again from its copy (keeping what it copied), one
    /// that had switched only finishes.
    Resume(moving::OutputArgs),
    /// Gives up every unfinished move (or those of SHARDS) that has not
    /// switched: lifts its fences and drops the partial copy; the shard
    /// stays where it was. A switched move is refused (move it back).
    Rollback(moving::RollbackArgs),
    /// Drops the old copies of moves finished at least the grace period
    /// ago, from the clusters the shards left.
    Gc(moving::GcArgs),
}

/// `shard status --json`.
#[derive(Serialize)]
struct Status {
    instance: String,
    shard_count: u32,
    clusters: Vec<ClusterShards>,
    placements: Vec<Placed>,
    /// Every move still in progress, and the finished ones whose old copy
    /// `shard gc` has not dropped yet.
    moves: Vec<schemaless::mysql::moves::MoveRecord>,
}

#[derive(Serialize)]
struct ClusterShards {
    name: String,
    /// As config gives them.
    configured: String,
    /// As placed now, as ranges (`0-30,32`).
    holds: String,
    shards: usize,
}

#[derive(Serialize)]
struct Placed {
    shard: u32,
    cluster: String,
    epoch: u64,
    /// Whether this config knows the cluster (a placement naming another
    /// is ignored).
    known: bool,
}

pub async fn run(command: ShardCommand, config_path: &Path) -> anyhow::Result<()> {
    let config = crate::load_config(config_path)?;
    let topology = Topology::from_config(&config)?;
    let result = match command {
        ShardCommand::Status { json } => status(&topology, json).await,
        ShardCommand::Move(args) => moving::start(&topology, args).await,
        ShardCommand::Resume(args) => moving::resume(&topology, args).await,
        ShardCommand::Rollback(args) => moving::rollback(&topology, args).await,
        ShardCommand::Gc(args) => moving::gc(&topology, args).await,
    };
    topology.close().await;
    result
}

async fn status(topology: &Topology, json: bool) -> anyhow::Result<()> {
    let mut recorded: Vec<_> = placement::recorded(topology).await.into_values().collect();
    recorded.sort_by_key(|p| p.shard);
    placement::refresh(topology).await;
    let moves: Vec<_> = schemaless::mysql::moves::state::recorded(topology)
        .await
        .into_iter()
        .filter(|m| m.phase.in_progress() || m.phase == schemaless::mysql::moves::Phase::Done)
        .collect();
    let status = Status {
        moves,
        instance: topology.instance.clone(),
        shard_count: topology.shard_count,
        clusters: topology
            .clusters
            .iter()
            .enumerate()
            .map(|(i, c)| {
                let shards = topology.shards_of(i);
                ClusterShards {
                    name: c.name.clone(),
                    configured: c.configured.map_or("-".to_string(), |r| r.to_string()),
                    holds: ranges(&shards),
                    shards: shards.len(),
                }
            })
            .collect(),
        placements: recorded
            .into_iter()
            .map(|p| Placed {
                known: topology.cluster_named(&p.cluster).is_some(),
                shard: p.shard,
                cluster: p.cluster,
                epoch: p.epoch,
            })
            .collect(),
    };
    if json {
        println!("{}", serde_json::to_string(&status)?);
        return Ok(());
    }
    let mut table = Table::new(&["CLUSTER", "CONFIGURED", "HOLDS NOW", "SHARDS"]).right(&[3]);
    for c in &status.clusters {
        table.row([
            c.name.clone(),
            c.configured.clone(),
            if c.holds.is_empty() {
                "-".into()
            } else {
                c.holds.clone()
            },
            c.shards.to_string(),
        ]);
    }
    table.print("  ");
    moving::print_moves(&status.moves);
    if status.placements.is_empty() {
        println!("no shard has moved: every shard is where config put it");
        return Ok(());
    }
    println!("placements recorded ({}):", status.placements.len());
    let mut table = Table::new(&["SHARD", "CLUSTER", "EPOCH", "NOTE"]).right(&[0, 2]);
    for p in &status.placements {
        table.row([
            p.shard.to_string(),
            p.cluster.clone(),
            p.epoch.to_string(),
            if p.known {
                ""
            } else {
                "cluster not in this config: ignored"
            }
            .to_string(),
        ]);
    }
    table.print("  ");
    Ok(())
}

/// Sorted shard numbers as ranges: `[0, 1, 2, 5]` is `0-2,5`.
fn ranges(shards: &[u32]) -> String {
    let mut out: Vec<String> = Vec::new();
    let mut i = 0;
    while i < shards.len() {
        let first = shards[i];
        let mut last = first;
        while i + 1 < shards.len() && shards[i + 1] == last + 1 {
            i += 1;
            last = shards[i];
        }
        out.push(if first == last {
            first.to_string()
        } else {
            format!("{first}-{last}")
        });
        i += 1;
    }
    out.join(",")
}

#[cfg(test)]
mod tests {
    #[test]
    fn shard_lists_read_as_ranges() {
        assert_eq!(super::ranges(&[0, 1, 2, 5, 7, 8]), "0-2,5,7-8");
        assert_eq!(super::ranges(&[4]), "4");
        assert_eq!(super::ranges(&[]), "");
    }
}
