//! Checks that serde cannot express: names, number ranges, URLs, and that
//! the clusters' shard ranges cover the instance exactly once.
//!
//! One function per section, in the order [`validate`] calls them:
//! `topology` (instance, clusters, storage), `sections` (limits, legacy,
//! triggers, mirror, backfill, gates, verify), `layout` (the legacy
//! tables, indexes, capture); `[guard]` and `[worker]` are checked by
//! their own modules. This file holds the checks they share.

use crate::model::Config;
use crate::urls::redact;

mod layout;
mod sections;
mod topology;

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

/// Every check, section by section, in this order: the first problem
/// found is the one reported.
pub(crate) fn validate(config: &Config) -> Result<(), Problem> {
    topology::instance_and_clusters(config)?;
    sections::limits(&config.limits)?;
    topology::storage(config)?;
    sections::legacy(config)?;
    sections::triggers(&config.triggers)?;
    sections::mirror(&config.mirror)?;
    sections::backfill(&config.backfill)?;
    sections::gates(&config.gates)?;
    sections::verify(&config.verify)?;
    if let Some(layout) = &config.layout {
        layout::layout(layout)?;
    }
    layout::indexes(config)?;
    layout::capture(config)?;
    crate::guard::validate(&config.guard)?;
    crate::worker::validate(&config.worker)?;
    crate::proxy::validate(&config.proxy)
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
