//! The instance and its clusters: names, URLs, shard ranges that cover
//! the instance exactly once, distinct nodes, and storage settings that
//! the clusters can hold.

use super::{check_url, in_range, problem, Problem, MAX_SHARD_COUNT};
use crate::model::Config;
use crate::urls::redact;

/// `[instance]` and `[[cluster]]`: names, URLs, and shard ranges that
/// cover the instance exactly once.
pub(super) fn instance_and_clusters(config: &Config) -> Result<(), Problem> {
    let instance = &config.instance;
    if !valid_instance_name(&instance.name) {
        return Err(problem(
            "instance.name",
            format!(
                "{:?} is not a valid instance name: use 1-32 characters of [a-z0-9_], starting with a letter",
                instance.name
            ),
        ));
    }
    in_range(
        "instance.shard_count",
        instance.shard_count.into(),
        1,
        MAX_SHARD_COUNT.into(),
    )?;

    if config.clusters.is_empty() {
        return Err(problem("cluster", "at least one [[cluster]] is required"));
    }
    for (i, cluster) in config.clusters.iter().enumerate() {
        if !valid_cluster_name(&cluster.name) {
            return Err(problem(
                format!("cluster[{i}].name"),
                format!(
                    "{:?} is not a valid cluster name: use 1-32 characters of [a-z0-9_-]",
                    cluster.name
                ),
            ));
        }
        if let Some(j) = config.clusters[..i]
            .iter()
            .position(|c| c.name == cluster.name)
        {
            return Err(problem(
                format!("cluster[{i}].name"),
                format!(
                    "cluster name {:?} is already used by cluster[{j}]",
                    cluster.name
                ),
            ));
        }
        check_url(&cluster.master).map_err(|m| problem(format!("cluster[{i}].master"), m))?;
        for (k, minion) in cluster.minions.iter().enumerate() {
            check_url(minion).map_err(|m| problem(format!("cluster[{i}].minions[{k}]"), m))?;
        }
        let Some(shards) = cluster.shards else {
            continue;
        };
        if shards.last >= instance.shard_count {
            return Err(problem(
                format!("cluster[{i}].shards"),
                format!(
                    "shard range {} reaches past the last shard {} (shard_count = {})",
                    shards,
                    instance.shard_count - 1,
                    instance.shard_count
                ),
            ));
        }
        for (j, other) in config.clusters[..i].iter().enumerate() {
            let Some(b) = other.shards else { continue };
            let a = shards;
            if a.first <= b.last && b.first <= a.last {
                return Err(problem(
                    format!("cluster[{i}].shards"),
                    format!(
                        "shard range {a} overlaps cluster[{j}] ({:?}, shards {b}) at shard {}",
                        other.name,
                        a.first.max(b.first)
                    ),
                ));
            }
        }
    }
    distinct_nodes(config)?;
    // No overlaps, so the ranges cover everything iff their sizes add up;
    // find the first uncovered shard to say where the gap is.
    let covered: u64 = config
        .clusters
        .iter()
        .filter_map(|c| c.shards)
        .map(|r| r.len() as u64)
        .sum();
    if covered != instance.shard_count as u64 {
        let mut ranges: Vec<_> = config.clusters.iter().filter_map(|c| c.shards).collect();
        ranges.sort_by_key(|r| r.first);
        let mut next = 0;
        for r in &ranges {
            if r.first > next {
                break;
            }
            next = r.last + 1;
        }
        return Err(problem(
            "cluster",
            format!(
                "the clusters' shard ranges leave shard {next} uncovered: together they must cover 0-{} exactly once",
                instance.shard_count - 1
            ),
        ));
    }
    Ok(())
}

/// `[storage]`: connection and timing ranges, and buffering that the
/// clusters can hold.
pub(super) fn storage(config: &Config) -> Result<(), Problem> {
    let storage = &config.storage;
    in_range(
        "storage.max_connections_per_node",
        storage.max_connections_per_node.into(),
        1,
        1000,
    )?;
    in_range(
        "storage.connect_timeout_ms",
        storage.connect_timeout_ms,
        1,
        3_600_000,
    )?;
    in_range(
        "storage.request_timeout_ms",
        storage.request_timeout_ms,
        1,
        3_600_000,
    )?;
    in_range(
        "storage.write_parallelism",
        storage.write_parallelism as u64,
        1,
        256,
    )?;
    in_range("storage.write_lanes", storage.write_lanes as u64, 1, 64)?;
    in_range(
        "storage.breaker_failures",
        storage.breaker_failures.into(),
        1,
        1000,
    )?;
    in_range(
        "storage.breaker_open_ms",
        storage.breaker_open_ms,
        10,
        600_000,
    )?;
    in_range(
        "storage.buffer_replay_after_ms",
        storage.buffer_replay_after_ms,
        0,
        3_600_000,
    )?;
    in_range(
        "storage.topology_refresh_ms",
        storage.topology_refresh_ms,
        50,
        600_000,
    )?;
    let others = config.clusters.len().saturating_sub(1) as u64;
    if u64::from(storage.buffer_secondaries) > others {
        return Err(problem(
            "storage.buffer_secondaries",
            format!(
                "is {}, but a write can only be buffered on the masters of other clusters and there {} {others}; \
                 use at most {others} (0 turns buffering off)",
                storage.buffer_secondaries,
                if others == 1 { "is" } else { "are" }
            ),
        ));
    }
    Ok(())
}

/// The legacy database URL must be `postgres://` or `postgresql://` with a
/// host and a database.
/// Every node serves one role in one cluster: a server named twice (as the
/// master of two clusters, as its own minion, as a minion of two) would
/// take one cluster's writes as the other's replication, or count one
/// host as two copies of an acknowledged write.
fn distinct_nodes(config: &Config) -> Result<(), Problem> {
    let mut seen: Vec<((String, u16), String)> = Vec::new();
    for (i, cluster) in config.clusters.iter().enumerate() {
        let nodes = std::iter::once((format!("cluster[{i}].master"), &cluster.master)).chain(
            cluster
                .minions
                .iter()
                .enumerate()
                .map(|(k, m)| (format!("cluster[{i}].minions[{k}]"), m)),
        );
        for (key, url) in nodes {
            let Some(server) = crate::urls::server(url, 3306) else {
                continue;
            };
            if let Some((_, first)) = seen.iter().find(|(s, _)| *s == server) {
                return Err(problem(
                    key,
                    format!(
                        "{} is the server of {first} too: each node is one master or one minion of one cluster",
                        redact(url)
                    ),
                ));
            }
            seen.push((server, key));
        }
    }
    Ok(())
}

pub(super) fn valid_instance_name(name: &str) -> bool {
    let mut chars = name.chars();
    matches!(chars.next(), Some(c) if c.is_ascii_lowercase())
        && name.len() <= 32
        && chars.all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_')
}

fn valid_cluster_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 32
        && name
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_' || c == '-')
}
