//! `mezzanine cluster up|down|status|promote`: the dev servers on
//! loopback, the storage nodes as the store sees them, and promoting a
//! minion when a master has died.

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
    /// Show each dev server, its role, whether it runs, and each minion's
    /// lag; then every storage node of the config as the store sees it:
    /// role (after promotions), circuit breaker, round trip.
    Status,
    /// Make a minion the master of its cluster after the master died: the
    /// minion applies what it received, stops replicating and takes
    /// writes; the other minions are re-pointed to it; the promotion is
    /// recorded on the masters, where every running store picks it up
    /// within `storage.topology_refresh_ms`. Refused while the master
    /// still answers, and for a minion that received less than another.
    Promote(PromoteArgs),
    /// Add a cluster to the config file, holding no shards yet, and create
    /// the instance's metadata on its master: the first step of splitting
    /// a cluster. Roll the new config out to every process, then move
    /// shards to it with `mezzanine shard move`.
    Add(add::AddArgs),
}

mod add;

#[derive(Args)]
pub struct PromoteArgs {
    /// The cluster's name, as in the config.
    cluster: String,
    /// The minion: its URL as in the config, `minionN` (its position in
    /// the config's list), or its dev cluster name (`a-minion1`).
    node: String,
    /// Promote it even if another minion received more (what only that
    /// one has is lost, unless buffered writes hold it).
    #[arg(long)]
    force: bool,
    /// How long the minion may take to apply what it has received.
    #[arg(long, default_value_t = 30)]
    wait_secs: u64,
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
            match DevCluster::open(dir) {
                Ok(cluster) => print_status(&cluster).await,
                Err(devcluster::Error::NotFound(_)) => {
                    println!("no dev cluster under {}", dir.display())
                }
                Err(e) => return Err(e.into()),
            }
            println!();
            print_storage_nodes(&crate::load_config(config)?).await
        }
        ClusterCommand::Promote(args) => promote(args, config, dir).await,
        ClusterCommand::Add(args) => add::add(args, config).await,
    }
}

/// Every storage node of the config, as a store sees it after a probe:
/// its role (with the recorded promotions), breaker and round trip.
async fn print_storage_nodes(config: &config::Config) -> anyhow::Result<()> {
    let store = schemaless::MySqlStore::connect(config)?;
    let topology = store.topology();
    schemaless::mysql::failover::refresh(topology).await;
    let probes = topology.clusters.iter().flat_map(|c| {
        let master = c.master();
        c.members.iter().map(move |node| {
            let is_master = node.label == master.label;
            let role = if is_master {
                format!("master of {}", c.name)
            } else {
                format!("minion of {}", c.name)
            };
            let node = node.clone();
            async move {
                // Enough probes to open the breaker of a node that is
                // down, as a running store's would be.
                let mut outcome = node.probe().await;
                for _ in 1..node_failures(&node) {
                    if outcome.is_ok() {
                        break;
                    }
                    outcome = node.probe().await;
                }
                let semi_sync = match outcome {
                    Ok(_) => semi_sync_state(&node, is_master).await,
                    Err(_) => "-".into(),
                };
                (node, role, outcome, semi_sync)
            }
        })
    });
    let results = futures::future::join_all(probes).await;
    let mut table = crate::table::Table::new(&[
        "STORAGE NODE",
        "ROLE",
        "BREAKER",
        "PING",
        "SEMI-SYNC",
        "LAST ERROR",
    ])
    .right(&[3]);
    for (node, role, outcome, semi_sync) in results {
        let (ping, error) = match outcome {
            Ok(t) => (format!("{:.1}ms", t.as_secs_f64() * 1000.0), String::new()),
            Err(e) => ("-".into(), e.to_string()),
        };
        table.row([
            node.label.to_string(),
            role.to_string(),
            node.breaker.state().to_string(),
            ping,
            semi_sync.to_string(),
            error,
        ]);
    }
    table.print("");
    let durability = config.storage.durability;
    println!(
        "durability: {}{}",
        durability.as_str(),
        match (durability, config.storage.buffer_secondaries) {
            (config::Durability::OneHost, _) => format!("  WARNING: {}", config::ONE_HOST_WARNING),
            (_, 0) =>
                " (by semi-synchronous replication: a master without it is refused writes)".into(),
            (_, n) => format!(" (by buffered writes on {n} other masters)"),
        }
    );
    for (master, count) in schemaless::mysql::damaged::counts(&store).await {
        match count {
            Ok(0) => {}
            Ok(n) => println!(
                "{master}: {n} damaged cells set aside (see {}.damaged_cells; repair them with `verify repair`)",
                schemaless::mysql::schema::meta_database(&config.instance.name)
            ),
            Err(e) => println!("{master}: damaged cells unknown: {e}"),
        }
    }
    for c in &topology.clusters {
        if c.epoch() > 0 {
            println!(
                "cluster {}: master {} since promotion {}",
                c.name,
                c.master().label,
                c.epoch()
            );
        }
    }
    store.close().await;
    Ok(())
}

/// A node's semi-synchronous replication: for a master, whether it is on
/// and waiting now, with how many minions acknowledge; for a minion,
/// whether it acknowledges.
async fn semi_sync_state(node: &schemaless::mysql::topology::Node, master: bool) -> String {
    let status = |name: &str| {
        format!(
            "(SELECT VARIABLE_VALUE FROM information_schema.GLOBAL_STATUS WHERE VARIABLE_NAME = '{name}')"
        )
    };
    let sql = if master {
        format!(
            "SELECT CAST(@@rpl_semi_sync_master_enabled AS CHAR), {}, {}",
            status("RPL_SEMI_SYNC_MASTER_STATUS"),
            status("RPL_SEMI_SYNC_MASTER_CLIENTS")
        )
    } else {
        format!(
            "SELECT CAST(@@rpl_semi_sync_slave_enabled AS CHAR), {}, ''",
            status("RPL_SEMI_SYNC_SLAVE_STATUS")
        )
    };
    let row = match node.fetch_all(sql).await {
        Ok(rows) => rows.into_iter().next(),
        Err(_) => return "unknown".into(),
    };
    use sqlx::Row;
    let get = |i: usize| {
        row.as_ref()
            .and_then(|r| r.try_get::<Option<String>, _>(i).ok().flatten())
            .unwrap_or_default()
    };
    // A boolean variable reads `ON`/`OFF` as text.
    let enabled = matches!(get(0).to_ascii_uppercase().as_str(), "1" | "ON");
    match (enabled, get(1).eq_ignore_ascii_case("ON"), master) {
        (true, true, true) => format!("on, {} acking", get(2)),
        (true, false, true) => "on, not waiting".into(),
        (true, true, false) => "acks".into(),
        (true, false, false) => "on, not acking".into(),
        (false, ..) => "off".into(),
    }
}

fn node_failures(node: &schemaless::mysql::topology::Node) -> u32 {
    node.breaker.threshold()
}

/// `cluster promote`.
async fn promote(args: PromoteArgs, config_path: &Path, dir: &Path) -> anyhow::Result<()> {
    let config = crate::load_config(config_path)?;
    let cluster = config
        .clusters
        .iter()
        .find(|c| c.name == args.cluster)
        .ok_or_else(|| {
            UsageError(format!(
                "no cluster named {:?} in {}",
                args.cluster,
                config_path.display()
            ))
        })?;
    let dev = DevCluster::open(dir).ok();
    // NODE as a config URL, `minionN`, or a dev cluster node's name.
    let url = if args.node.contains("://") {
        args.node.clone()
    } else if let Some(n) = args
        .node
        .strip_prefix("minion")
        .and_then(|n| n.parse::<usize>().ok())
    {
        cluster
            .minions
            .get(n.wrapping_sub(1))
            .cloned()
            .ok_or_else(|| {
                UsageError(format!(
                    "cluster {:?} has {} minions; there is no {}",
                    args.cluster,
                    cluster.minions.len(),
                    args.node
                ))
            })?
    } else if let Some(node) = dev.as_ref().and_then(|d| d.node(&args.node).ok()) {
        let port = node.spec.port;
        std::iter::once(&cluster.master)
            .chain(&cluster.minions)
            .find(|u| url::Url::parse(u).ok().and_then(|u| u.port()) == Some(port))
            .cloned()
            .ok_or_else(|| {
                UsageError(format!(
                    "{} (port {port}) is not a node of cluster {:?} in {}",
                    args.node,
                    args.cluster,
                    config_path.display()
                ))
            })?
    } else {
        return Err(UsageError(format!(
            "{:?} is neither a URL of cluster {:?}, nor minionN, nor a dev cluster node",
            args.node, args.cluster
        ))
        .into());
    };
    let store = schemaless::MySqlStore::connect(&config)?;
    schemaless::mysql::failover::refresh(store.topology()).await;
    let report = schemaless::mysql::failover::promote(
        &config,
        &store,
        &args.cluster,
        &url,
        args.force,
        std::time::Duration::from_secs(args.wait_secs),
    )
    .await
    .with_context(|| format!("promoting {} in cluster {:?}", args.node, args.cluster))?;
    store.close().await;
    println!(
        "cluster {}: {} is the master now (was {}), at GTID {}",
        report.cluster,
        report.new_master,
        report.old_master,
        if report.position.is_empty() {
            "(nothing written yet)"
        } else {
            &report.position
        }
    );
    for m in &report.repointed {
        println!("  {m} now replicates from it");
    }
    let replayed = &report.replayed;
    if replayed.replayed + replayed.conflicts + replayed.later_writes > 0
        || !replayed.unread.is_empty()
    {
        println!(
            "  buffered writes replayed to it before it took new writes: {} ({} lost to a body it already held, {} later writes to an address an earlier one took; the reconciler records both kinds in buffer_conflicts)",
            replayed.replayed, replayed.conflicts, replayed.later_writes
        );
    }
    for unread in &replayed.unread {
        println!(
            "  a buffer could not be read (the reconciler replays it when it answers): {unread}"
        );
    }
    for m in &report.unreachable {
        println!("  {m} did not answer: re-point it when it is back");
    }
    println!(
        "  promotion {} recorded on {}; running stores switch within storage.topology_refresh_ms",
        report.epoch,
        report.recorded_on.join(", ")
    );
    if let Some(mut dev) = dev {
        let port = url::Url::parse(&url).ok().and_then(|u| u.port());
        if let Some(name) = port
            .and_then(|p| dev.node_on_port(p))
            .map(|n| n.spec.name.clone())
        {
            dev.record_promotion(&args.cluster, &name)?;
            println!(
                "  dev cluster record updated: {name} is the master; the old master restarts as a minion"
            );
        }
    }
    Ok(())
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
                master: None,
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
    let mut table =
        crate::table::Table::new(&["NODE", "ROLE", "PORT", "PID", "STATE", "REPLICATION"])
            .right(&[2, 3]);
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
        table.row([
            node.spec.name.to_string(),
            node.spec.role.to_string(),
            node.spec.port.to_string(),
            node.pid().map_or("-".into(), |p| p.to_string()),
            state.to_string(),
            replication,
        ]);
    }
    table.print("");
}

fn yes_no(b: bool) -> &'static str {
    if b {
        "yes"
    } else {
        "no"
    }
}
