//! Checks that serde cannot express: names, number ranges, URLs, and that
//! the clusters' shard ranges cover the instance exactly once.

use crate::layout::{valid_sql_identifier, ColumnKind, Layout};
use crate::model::Config;
use crate::urls::redact;

/// One thing wrong with a parsed configuration, before it is given a line.
#[derive(Debug)]
pub struct Problem {
    /// Dotted key path with array indexes, `cluster[1].shards`.
    pub key: String,
    /// What is wrong, and where useful what was expected.
    pub message: String,
}

pub(crate) fn problem(key: impl Into<String>, message: impl Into<String>) -> Problem {
    Problem {
        key: key.into(),
        message: message.into(),
    }
}

/// The largest shard count: shard databases are named with a 4-digit number.
pub const MAX_SHARD_COUNT: u32 = 10_000;

/// The largest body limit: an encoded body must fit a MEDIUMBLOB (16 MiB)
/// even when MessagePack is larger than the JSON it came from.
pub const MAX_BODY_BYTES_LIMIT: usize = 8 * 1024 * 1024;

pub(crate) fn validate(config: &Config) -> Result<(), Problem> {
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
        if cluster.shards.last >= instance.shard_count {
            return Err(problem(
                format!("cluster[{i}].shards"),
                format!(
                    "shard range {} reaches past the last shard {} (shard_count = {})",
                    cluster.shards,
                    instance.shard_count - 1,
                    instance.shard_count
                ),
            ));
        }
        for (j, other) in config.clusters[..i].iter().enumerate() {
            let (a, b) = (cluster.shards, other.shards);
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
    let covered: u64 = config.clusters.iter().map(|c| c.shards.len() as u64).sum();
    if covered != instance.shard_count as u64 {
        let mut ranges: Vec<_> = config.clusters.iter().map(|c| c.shards).collect();
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

    let limits = &config.limits;
    in_range(
        "limits.max_body_bytes",
        limits.max_body_bytes as u64,
        2,
        MAX_BODY_BYTES_LIMIT as u64,
    )?;
    in_range(
        "limits.max_batch_cells",
        limits.max_batch_cells as u64,
        1,
        100_000,
    )?;
    in_range(
        "limits.max_batch_bytes",
        limits.max_batch_bytes as u64,
        limits.max_body_bytes as u64,
        1 << 30,
    )?;
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
    if let Some(legacy) = &config.legacy {
        check_postgres_url(&legacy.url).map_err(|m| problem("legacy.url", m))?;
        in_range(
            "legacy.max_connections",
            legacy.max_connections.into(),
            1,
            1000,
        )?;
        in_range(
            "legacy.statement_timeout_ms",
            legacy.statement_timeout_ms,
            1,
            3_600_000,
        )?;
        in_range("legacy.mode_poll_ms", legacy.mode_poll_ms, 10, 600_000)?;
    }
    let triggers = &config.triggers;
    in_range("triggers.batch", triggers.batch as u64, 1, 10_000)?;
    in_range("triggers.max_tries", triggers.max_tries.into(), 1, 1000)?;
    in_range(
        "triggers.retry_backoff_ms",
        triggers.retry_backoff_ms,
        0,
        600_000,
    )?;
    in_range("triggers.max_parked", triggers.max_parked, 0, 10_000_000)?;
    in_range("triggers.lease_ms", triggers.lease_ms, 100, 3_600_000)?;
    in_range("triggers.poll_ms", triggers.poll_ms, 1, 600_000)?;
    in_range("triggers.watch_ms", triggers.watch_ms, 0, 60_000)?;
    let mirror = &config.mirror;
    in_range("mirror.relay_batch", mirror.relay_batch as u64, 1, 10_000)?;
    in_range("mirror.relay_poll_ms", mirror.relay_poll_ms, 1, 600_000)?;
    in_range("mirror.relay_linger_ms", mirror.relay_linger_ms, 0, 10_000)?;
    in_range(
        "mirror.retry_backoff_ms",
        mirror.retry_backoff_ms,
        1,
        600_000,
    )?;
    in_range(
        "mirror.max_backoff_ms",
        mirror.max_backoff_ms,
        mirror.retry_backoff_ms,
        3_600_000,
    )?;
    in_range(
        "mirror.reverse_batch",
        mirror.reverse_batch as u64,
        1,
        10_000,
    )?;
    in_range("mirror.reverse_poll_ms", mirror.reverse_poll_ms, 1, 600_000)?;
    let backfill = &config.backfill;
    in_range("backfill.chunk_size", backfill.chunk_size, 1, 1_000_000)?;
    in_range("backfill.workers", backfill.workers as u64, 1, 256)?;
    in_range(
        "backfill.max_rows_per_sec",
        backfill.max_rows_per_sec,
        0,
        1_000_000_000,
    )?;
    in_range(
        "backfill.max_replication_lag_ms",
        backfill.max_replication_lag_ms,
        0,
        3_600_000,
    )?;
    in_range(
        "backfill.stale_after_ms",
        backfill.stale_after_ms,
        100,
        3_600_000,
    )?;
    in_range(
        "gates.max_outbox_lag_ms",
        config.gates.max_outbox_lag_ms,
        0,
        3_600_000,
    )?;
    in_share(
        "gates.max_mismatch_upper_bound",
        config.gates.max_mismatch_upper_bound,
    )?;
    in_share("gates.min_coverage", config.gates.min_coverage)?;
    validate_verify(&config.verify)?;
    if let Some(layout) = &config.layout {
        validate_layout(layout)?;
    }
    validate_indexes(config)?;
    validate_capture(config)?;
    crate::guard::validate(&config.guard)?;
    crate::worker::validate(&config.worker)
}

fn validate_capture(config: &Config) -> Result<(), Problem> {
    let capture = &config.capture;
    in_range(
        "capture.lock_timeout_ms",
        capture.lock_timeout_ms,
        10,
        60_000,
    )?;
    let tombstones = &capture.tombstone_column;
    if !valid_column_name(tombstones) {
        return Err(problem(
            "capture.tombstone_column",
            format!(
                "{tombstones:?} is not a valid column name: use 1-64 characters of [A-Za-z0-9_]"
            ),
        ));
    }
    if let Some(layout) = &config.layout {
        if layout.column(tombstones).is_some() {
            return Err(problem(
                "capture.tombstone_column",
                format!("{tombstones:?} is a layout column; tombstones need a column of their own"),
            ));
        }
    }
    if let Some(index) = config.indexes.iter().find(|i| i.column == *tombstones) {
        return Err(problem(
            "capture.tombstone_column",
            format!(
                "{tombstones:?} is indexed by index {:?}; tombstones need a column of their own",
                index.name
            ),
        ));
    }
    Ok(())
}

fn sql_name(key: String, name: &str) -> Result<(), Problem> {
    if valid_sql_identifier(name) {
        Ok(())
    } else {
        Err(problem(
            key,
            format!("{name:?} is not a valid SQL name: use 1-63 characters of [A-Za-z0-9_], not starting with a digit"),
        ))
    }
}

fn validate_layout(layout: &Layout) -> Result<(), Problem> {
    sql_name("layout.schema".into(), &layout.schema)?;
    sql_name("layout.table".into(), &layout.table)?;
    sql_name("layout.id".into(), &layout.id)?;
    sql_name("layout.uuid".into(), &layout.uuid)?;
    if layout.id == layout.uuid {
        return Err(problem("layout.uuid", "must differ from layout.id"));
    }
    if layout.columns.is_empty() {
        return Err(problem(
            "layout",
            "at least one [[layout.column]] is required",
        ));
    }
    for (i, column) in layout.columns.iter().enumerate() {
        let key = |k: &str| format!("layout.column[{i}].{k}");
        if !valid_column_name(&column.name) {
            return Err(problem(
                key("name"),
                format!(
                    "{:?} is not a valid column name: use 1-64 characters of [A-Za-z0-9_]",
                    column.name
                ),
            ));
        }
        if let Some(j) = layout.columns[..i]
            .iter()
            .position(|c| c.name == column.name)
        {
            return Err(problem(
                key("name"),
                format!(
                    "column {:?} is already declared by layout.column[{j}]",
                    column.name
                ),
            ));
        }
        match column.kind {
            ColumnKind::Row => {
                if let Some(table) = &column.table {
                    if *table != layout.table {
                        return Err(problem(
                            key("table"),
                            format!("a row column is the parent table {:?}; leave table out (or set it to the parent)", layout.table),
                        ));
                    }
                }
                if column.parent.is_some() {
                    return Err(problem(
                        key("parent"),
                        "only a child column has a parent key",
                    ));
                }
            }
            ColumnKind::Child => {
                let Some(table) = &column.table else {
                    return Err(problem(
                        key("table"),
                        "a child column needs its child table",
                    ));
                };
                sql_name(key("table"), table)?;
                if *table == layout.table {
                    return Err(problem(
                        key("table"),
                        "a child table cannot be the parent table; use kind = \"row\"",
                    ));
                }
                let Some(parent) = &column.parent else {
                    return Err(problem(
                        key("parent"),
                        format!(
                            "a child column needs the foreign key of {table} to {}.{}",
                            layout.table, layout.id
                        ),
                    ));
                };
                sql_name(key("parent"), parent)?;
            }
        }
        sql_name(key("ref_key"), &column.ref_key)?;
        if column.fields.0.is_empty() {
            return Err(problem(key("fields"), "a column needs at least one field"));
        }
        let mut used = std::collections::BTreeMap::new();
        for (json, sql) in &column.fields.0 {
            if json.is_empty() || json.len() > 128 {
                return Err(problem(
                    key("fields"),
                    format!("field name {json:?} must be 1-128 characters"),
                ));
            }
            sql_name(key("fields"), sql)?;
            let own_id = (column.kind == ColumnKind::Row).then_some(&layout.id);
            let reserved = [
                Some(&layout.uuid),
                Some(&column.ref_key),
                column.parent.as_ref(),
                own_id,
            ];
            if reserved.contains(&Some(sql)) {
                return Err(problem(
                    key("fields"),
                    format!("field {json:?} maps to {sql:?}, which the layout already uses as a key column"),
                ));
            }
            if let Some(other) = used.insert(sql, json) {
                return Err(problem(
                    key("fields"),
                    format!("fields {other:?} and {json:?} both map to SQL column {sql:?}"),
                ));
            }
        }
    }
    Ok(())
}

fn validate_indexes(config: &Config) -> Result<(), Problem> {
    for (i, index) in config.indexes.iter().enumerate() {
        let key = |k: &str| format!("index[{i}].{k}");
        if !valid_instance_name(&index.name) || index.name.len() > 32 {
            return Err(problem(
                key("name"),
                format!("{:?} is not a valid index name: use 1-32 characters of [a-z0-9_], starting with a letter", index.name),
            ));
        }
        if let Some(j) = config.indexes[..i]
            .iter()
            .position(|x| x.name == index.name)
        {
            return Err(problem(
                key("name"),
                format!("index {:?} is already declared by index[{j}]", index.name),
            ));
        }
        for field in index.types.keys() {
            if *field != index.shard_field && !index.fields.contains(field) {
                return Err(problem(
                    format!("index[{i}].types.{field}"),
                    format!("{field:?} is neither the shard field nor one of the index's fields"),
                ));
            }
        }
        if !valid_column_name(&index.column) {
            return Err(problem(
                key("column"),
                format!("{:?} is not a valid column name", index.column),
            ));
        }
        for (k, field) in index.fields.iter().enumerate() {
            if *field == index.shard_field || index.fields[..k].contains(field) {
                return Err(problem(
                    format!("index[{i}].fields[{k}]"),
                    format!("field {field:?} is already part of the index"),
                ));
            }
        }
        // Without a layout the index is Schemaless-only: its column and
        // fields are not checked against one.
        let Some(layout) = &config.layout else {
            continue;
        };
        let Some(column) = layout.column(&index.column) else {
            let names: Vec<&str> = layout.columns.iter().map(|c| c.name.as_str()).collect();
            return Err(problem(
                key("column"),
                format!(
                    "no layout column is called {:?}; the columns are {}",
                    index.column,
                    names.join(", ")
                ),
            ));
        };
        let has = |field: &str| column.fields.0.contains_key(field);
        if !has(&index.shard_field) {
            return Err(problem(
                key("shard_field"),
                format!(
                    "column {} has no field {:?}",
                    column.name, index.shard_field
                ),
            ));
        }
        for (k, field) in index.fields.iter().enumerate() {
            if !has(field) {
                return Err(problem(
                    format!("index[{i}].fields[{k}]"),
                    format!("column {} has no field {field:?}", column.name),
                ));
            }
        }
    }
    Ok(())
}

fn valid_column_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 64
        && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
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

fn check_postgres_url(text: &str) -> Result<(), String> {
    let shown = redact(text);
    let url = url::Url::parse(text).map_err(|e| format!("{shown} is not a valid URL: {e}"))?;
    if !matches!(url.scheme(), "postgres" | "postgresql") {
        return Err(format!(
            "{shown} must start with postgres:// or postgresql://, not {}://",
            url.scheme()
        ));
    }
    if url.host_str().is_none_or(str::is_empty) {
        return Err(format!("{shown} names no host"));
    }
    if url.path().len() <= 1 {
        return Err(format!("{shown} names no database: add /DATABASE"));
    }
    crate::urls::check_tls(text)
}

fn validate_verify(verify: &crate::Verify) -> Result<(), Problem> {
    in_share("verify.sample_rate", verify.sample_rate)?;
    in_range(
        "verify.max_samples_per_sec",
        verify.max_samples_per_sec,
        1,
        1_000_000,
    )?;
    in_range("verify.queue", verify.queue as u64, 1, 1_000_000)?;
    in_range("verify.replayers", verify.replayers as u64, 1, 64)?;
    in_range("verify.triage_delay_ms", verify.triage_delay_ms, 0, 600_000)?;
    in_range("verify.triage_wait_ms", verify.triage_wait_ms, 0, 3_600_000)?;
    in_range("verify.chunk_size", verify.chunk_size, 1, 1_000_000)?;
    in_range("verify.workers", verify.workers as u64, 1, 256)?;
    in_range(
        "verify.stale_after_ms",
        verify.stale_after_ms,
        100,
        3_600_000,
    )?;
    for (i, rule) in verify.ignore.iter().enumerate() {
        check_field_rule(&format!("verify.ignore[{i}]"), rule, true)?;
    }
    for (rule, tolerance) in &verify.tolerance {
        let key = format!("verify.tolerance.{rule}");
        check_field_rule(&key, rule, false)?;
        if !(tolerance.is_finite() && *tolerance >= 0.0) {
            return Err(problem(
                key,
                format!("must be a number >= 0, got {tolerance}"),
            ));
        }
    }
    Ok(())
}

/// `COLUMN` (when `column_alone`) or `COLUMN.field`.
fn check_field_rule(key: &str, rule: &str, column_alone: bool) -> Result<(), Problem> {
    let mut parts = rule.splitn(2, '.');
    let column = parts.next().unwrap_or_default();
    let field = parts.next();
    let column_ok = !column.is_empty()
        && column.len() <= 64
        && column
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_');
    let shape_ok = match field {
        None => column_alone,
        Some(f) => !f.is_empty(),
    };
    if column_ok && shape_ok {
        return Ok(());
    }
    let wanted = if column_alone {
        "\"COLUMN\" or \"COLUMN.field\""
    } else {
        "\"COLUMN.field\""
    };
    Err(problem(key, format!("{rule:?} is not {wanted}")))
}

pub(crate) fn in_share(key: &str, value: f64) -> Result<(), Problem> {
    if !(0.0..=1.0).contains(&value) {
        return Err(problem(
            key,
            format!("must be between 0.0 and 1.0, got {value}"),
        ));
    }
    Ok(())
}

/// `value` of `key` must lie in `low..=high`.
pub(crate) fn in_range(key: &str, value: u64, low: u64, high: u64) -> Result<(), Problem> {
    if value < low || value > high {
        return Err(problem(
            key,
            format!("must be between {low} and {high}, got {value}"),
        ));
    }
    Ok(())
}

fn valid_instance_name(name: &str) -> bool {
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

/// A storage node URL must be `mysql://` or `mariadb://` with a host.
fn check_url(text: &str) -> Result<(), String> {
    let shown = redact(text);
    let url = url::Url::parse(text).map_err(|e| format!("{shown} is not a valid URL: {e}"))?;
    if !matches!(url.scheme(), "mysql" | "mariadb") {
        return Err(format!(
            "{shown} must start with mysql:// or mariadb://, not {}://",
            url.scheme()
        ));
    }
    if url.host_str().is_none_or(str::is_empty) {
        return Err(format!("{shown} names no host"));
    }
    if url.path().len() > 1 {
        return Err(format!(
            "{shown} names a database ({}); shard databases are chosen by the store, leave the path empty",
            url.path()
        ));
    }
    crate::urls::check_tls(text)
}
