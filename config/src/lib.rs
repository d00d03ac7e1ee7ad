//! Typed, validated configuration for Mezzanine.
//!
//! One TOML file describes a Schemaless instance: its name and fixed shard
//! count, the MariaDB clusters holding its shard ranges, the limits enforced
//! at the cell API boundary, and how the storage layer talks to its nodes.
//! Everything is checked before anything connects: unknown keys, overlapping
//! or missing shard ranges, malformed URLs and out-of-range numbers are all
//! errors that name the file, the line and the key.
//!
//! # Layout
//!
//! - [`model`]: the configuration types, one `///` per field (this is the
//!   reference documentation of every key);
//! - [`layout`]: `[legacy]`, `[layout]` and `[[index]]`, the legacy
//!   PostgreSQL tables and how they map to Schemaless columns;
//! - [`shards`]: shard ranges such as `"0-31"`;
//! - [`locate`]: finds the line of a key in the source text, so that errors
//!   found after parsing still point at the right place (errors found while
//!   parsing carry their key path from `serde_path_to_error` and their line
//!   from toml's span);
//! - [`urls`]: database URLs redacted for messages, their server, TLS;
//! - [`validate`]: the checks that need more than one key at a time;
//! - [`worker`]: `[worker]`, the HTTP workers and their tokens.
//! - [`proxy`]: `[proxy]`, the PostgreSQL wire-protocol proxy.
//!
//! # Example
//!
//! ```
//! let toml = r#"
//! [instance]
//! name = "trips"
//! shard_count = 8
//!
//! [[cluster]]
//! name = "a"
//! master = "mysql://root@127.0.0.1:33061"
//! shards = "0-7"
//! "#;
//! let config = config::Config::parse(toml, "inline.toml").unwrap();
//! assert_eq!(config.instance.shard_count, 8);
//! assert_eq!(config.cluster_for_shard(5).unwrap().name, "a");
//!
//! let err = config::Config::parse(&toml.replace("0-7", "0-8"), "bad.toml").unwrap_err();
//! assert!(err.to_string().starts_with("bad.toml:9: cluster[0].shards:"));
//! ```

pub mod guard;
pub mod layout;
pub mod locate;
pub mod model;
pub mod proxy;
pub mod shards;
pub mod urls;
mod validate;
pub mod worker;

use std::path::{Path, PathBuf};

pub use guard::Guard;
pub use layout::{
    ColumnKind, Fields, Index, IndexFieldType, JsonNull, Layout, LayoutColumn, Legacy,
};
pub use model::{
    Backfill, Capture, CaptureMethod, Cluster, Config, Durability, Gates, Instance, Limits, Mirror,
    OnFailure, Storage, TriggerRead, Triggers, Verify, ONE_HOST_WARNING,
};
pub use shards::ShardRange;
pub use validate::Problem;
pub use worker::{Scope, Token, Worker};

/// Everything that can be wrong with a configuration file.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The file could not be read at all.
    #[error("reading config file {path}: {source}")]
    Read {
        /// The path as given.
        path: PathBuf,
        /// What the operating system said.
        source: std::io::Error,
    },
    /// The file was read but a key is missing, unknown, malformed or
    /// inconsistent with another key.
    #[error("{file}:{line}: {key}: {message}")]
    Invalid {
        /// The file name as given (or a label for inline text).
        file: String,
        /// 1-based line of the offending key (or of its table when the key
        /// is missing).
        line: usize,
        /// Dotted path of the key, with array indexes: `cluster[1].shards`.
        key: String,
        /// What is wrong, and where useful what was expected.
        message: String,
    },
}

impl Config {
    /// Reads and validates a configuration file.
    pub fn load(path: impl AsRef<Path>) -> Result<Config, Error> {
        let path = path.as_ref();
        let text = std::fs::read_to_string(path).map_err(|source| Error::Read {
            path: path.to_path_buf(),
            source,
        })?;
        Config::parse(&text, &path.display().to_string())
    }

    /// Parses and validates configuration text; `file` labels errors.
    pub fn parse(text: &str, file: &str) -> Result<Config, Error> {
        let config: Config = deserialize(text).map_err(|(line, key, message)| Error::Invalid {
            file: file.to_string(),
            line,
            key,
            message,
        })?;
        validate::validate(&config).map_err(|problem| {
            let line = locate::line_of_key(text, &problem.key);
            Error::Invalid {
                file: file.to_string(),
                line,
                key: problem.key.to_string(),
                message: problem.message,
            }
        })?;
        Ok(config)
    }

    /// Checks a configuration again after a program changed it, as a
    /// command-line flag that overrides a key does: the same rules as
    /// [`Config::parse`], naming the key that breaks one.
    pub fn check(&self) -> Result<(), Problem> {
        validate::validate(self)
    }

    /// The cluster whose shard range holds `shard`, if any.
    pub fn cluster_for_shard(&self, shard: u32) -> Option<&Cluster> {
        self.clusters
            .iter()
            .find(|c| c.shards.is_some_and(|r| r.contains(shard)))
    }
}

/// Deserializes `text`, or says where it fails: the line, the key path
/// (`cluster[1].minions[0]`, tracked by `serde_path_to_error` as the
/// deserializer walks the document) and toml's message. A syntax error
/// has no path yet, only a line.
fn deserialize(text: &str) -> Result<Config, (usize, String, String)> {
    let document = toml::Deserializer::parse(text).map_err(|e| {
        let line = e.span().map_or(1, |span| locate::line_at(text, span.start));
        (line, "(syntax)".to_string(), e.message().trim().to_string())
    })?;
    serde_path_to_error::deserialize(document).map_err(|e| {
        let key = match e.path().to_string().as_str() {
            "." | "" => "(top level)".to_string(),
            path => path.to_string(),
        };
        let line = match e.inner().span() {
            Some(span) => locate::line_at(text, span.start),
            None => locate::line_of_key(text, &key),
        };
        (line, key, e.inner().message().trim().to_string())
    })
}
