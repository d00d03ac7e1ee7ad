//! `mezzanine cluster up|down|status`: the dev servers on loopback.

use std::path::Path;
use std::time::Instant;

use anyhow::Context;
use clap::{Args, Subcommand};
use devcluster::{ClusterSpec, DevCluster, NodeState, Role, Spec};

use crate::UsageError;

#[derive(Subcommand)]
pub enum ClusterCommand {
    /// Start one PostgreSQL server and the MariaDB clusters of the config
    /// (a master and its minions each, GTID replication) on 127.0.0.1.
    /// Reuses servers already running.
    Up(UpArgs),
    /// Stop every server of the dev cluster cleanly.
    Down {
        /// Also delete the servers' data.
        #[arg(long)]
        purge: bool,
    },
    /// Show each server, its role, whether it runs, and each minion's lag.
    Status,
}

#[derive(Args)]
pub struct UpArgs {
    /// PostgreSQL's port.
    #[arg(long, default_value_t = 55432)]
    postgres_port: u16,
}

pub async fn run(command: ClusterCommand, config: &Path, dir: &Path) -> anyhow::Result<()> {
    match command {
        ClusterCommand::Up(args) => {
            let spec = spec_from_config(config, args.postgres_port)?;
            let started = Instant::now();
            let cluster = up(dir, spec).await?;
            println!(
                "dev cluster up in {:.1}s under {}",
                started.elapsed().as_secs_f64(),
                dir.display()
            );
            print_status(&cluster).await;
            Ok(())
        }
        ClusterCommand::Down { purge } => {
            let cluster = match DevCluster::open(dir) {
                Ok(c) => c,
                Err(devcluster::Error::NotFound(_)) => {
                    println!("no dev cluster under {}", dir.display());
                    return Ok(());
                }
                Err(e) => return Err(e.into()),
            };
            cluster.down().await?;
            println!("dev cluster under {} stopped", dir.display());
            if purge {
                cluster.purge()?;
                println!("data deleted");
            }
            Ok(())
        }
        ClusterCommand::Status => {
            let cluster = DevCluster::open(dir)?;
            print_status(&cluster).await;
            Ok(())
        }
    }
}

/// Brings the dev cluster up (idempotent).
pub async fn up(dir: &Path, spec: Spec) -> anyhow::Result<DevCluster> {
    DevCluster::up(dir, spec)
        .await
        .with_context(|| format!("bringing the dev cluster up under {}", dir.display()))
}

/// The dev cluster's layout from the config's cluster URLs: every node
/// must be on loopback, the dev cluster never starts anything elsewhere.
pub fn spec_from_config(config_path: &Path, postgres_port: u16) -> anyhow::Result<Spec> {
    let config = crate::load_config(config_path)?;
    let port_of = |key: &str, url: &str| -> anyhow::Result<u16> {
        let parsed = url::Url::parse(url).map_err(|e| UsageError(format!("{key}: {e}")))?;
        if !matches!(parsed.host_str(), Some("127.0.0.1") | Some("localhost")) {
            return Err(UsageError(format!(
                "{key} = {url:?}: the dev cluster only runs servers on 127.0.0.1"
            ))
            .into());
        }
        Ok(parsed.port().unwrap_or(3306))
    };
    let clusters = config
        .clusters
        .iter()
        .enumerate()
        .map(|(i, c)| {
            Ok(ClusterSpec {
                name: c.name.clone(),
                master_port: port_of(&format!("cluster[{i}].master"), &c.master)?,
                minion_ports: c
                    .minions
                    .iter()
                    .enumerate()
                    .map(|(k, m)| port_of(&format!("cluster[{i}].minions[{k}]"), m))
                    .collect::<anyhow::Result<_>>()?,
            })
        })
        .collect::<anyhow::Result<_>>()?;
    Ok(Spec {
        postgres_port,
        clusters,
    })
}

/// Prints one line per node: name, role, port, pid, state, minion lag.
pub async fn print_status(cluster: &DevCluster) {
    println!(
        "{:<12} {:<14} {:>6} {:>8} {:<8} REPLICATION",
        "NODE", "ROLE", "PORT", "PID", "STATE"
    );
    for node in cluster.nodes() {
        let state = node.state();
        let replication = match (&node.spec.role, state) {
            (Role::Minion { .. }, NodeState::Running) => {
                match cluster.minion_status(&node.spec.name).await {
                    Ok(s) if !(s.io_running && s.sql_running) => format!(
                        "stopped (io {}, sql {}){}",
                        yes_no(s.io_running),
                        yes_no(s.sql_running),
                        s.last_error.map(|e| format!(": {e}")).unwrap_or_default()
                    ),
                    Ok(s) if s.caught_up() => format!(
                        "caught up at {}",
                        if s.minion_gtid.is_empty() {
                            "(nothing written yet)"
                        } else {
                            &s.minion_gtid
                        }
                    ),
                    Ok(s) => format!(
                        "behind: at {} of {} ({}s)",
                        s.minion_gtid,
                        s.master_gtid.unwrap_or_else(|| "?".into()),
                        s.seconds_behind.map_or("?".into(), |n| n.to_string())
                    ),
                    Err(e) => format!("unknown: {e}"),
                }
            }
            (Role::Minion { .. }, _) => "-".into(),
            (Role::Master { .. }, NodeState::Running) => "binlog on, GTID".into(),
            _ => String::new(),
        };
        println!(
            "{:<12} {:<14} {:>6} {:>8} {:<8} {}",
            node.spec.name,
            node.spec.role.to_string(),
            node.spec.port,
            node.pid().map_or("-".into(), |p| p.to_string()),
            state.to_string(),
            replication
        );
    }
}

fn yes_no(b: bool) -> &'static str {
    if b {
        "yes"
    } else {
        "no"
    }
}
