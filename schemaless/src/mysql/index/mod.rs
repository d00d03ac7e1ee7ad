//! Sharded secondary indexes on MariaDB, maintained by a built-in trigger.
//!
//! Each version `v` of index `name` has, in every shard database:
//! - `ix<v>_<name>`: the entries whose shard value routes to this shard
//!   (the same function as rows: a UUID value lands on the shard of the
//!   row it names). Primary key (shard value, row key); a query reads one
//!   shard only;
//! - `ixr<v>_<name>`: for each row of this shard, the ref key of the cell
//!   its entry reflects and the shard holding that entry.
//!
//! The trigger `index_<name>_v<v>` follows the change log (from the
//! master, for the lowest lag) and, for each cell of the indexed column
//! newer than the row's pointer: writes the new entry, deletes the row's
//! older entry (wherever its shard value had put it), then moves the
//! pointer. Each step is guarded by the ref key, so replays and late or
//! out-of-order cells change nothing, and a crash between steps is undone
//! by the redelivery. Entries are eventually consistent with the latest
//! cells.
//!
//! Versions (`<instance>_meta.index_versions` on every master): a new
//! version is created `building`; its trigger starts at the beginning of
//! every shard's log, which backfills it from the entity tables while
//! writes go on; `switch` makes it `active` (and the old one `retired`)
//! once it has caught up. Queries read the active version; both versions
//! are complete during the switch, so no query fails or sees a partial
//! index.
//!
//! Its rooms: `version` (creating, listing and switching versions),
//! `query` (reading the active version), `maintainer` (the trigger
//! handler that keeps entries current), `verify` (checking a version
//! against the cells) and `repair` (rewriting what it found wrong); this file holds the table names and what they
//! share.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use sqlx::mysql::MySqlArguments;
use sqlx::MySql;

use super::combine::{Cap, Combined, Combiner};
use super::schema::meta_database;
use super::sql::push_hex;
use super::store::MySqlStore;
use super::trigger::{Handler, HandlerResult, Trigger};
use crate::api::{IndexEntry, IndexQuery, ReadFrom};
use crate::cell::{Body, RowKey, StoredCell};
use crate::error::{Error, Result};
use crate::index::{IndexSpec, IndexValue};
use crate::routing::{shard_of, shard_of_bytes};
use config::IndexFieldType;

mod maintainer;
mod query;
mod repair;
mod verify;
mod version;

pub use maintainer::Maintainer;
pub(crate) use query::query;
pub use repair::{repair, IndexRepair};
pub use verify::{verify, IndexCheck};
pub use version::{create_version, create_versions_table, switch, versions};

/// How long the active version of an index is cached by a store.
const VERSION_TTL: Duration = Duration::from_secs(1);

/// Where a version of an index stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum VersionState {
    /// Created; its trigger is filling it.
    Building,
    /// What queries read.
    Active,
    /// Replaced by a newer version.
    Retired,
}

impl VersionState {
    /// `building`, `active` or `retired`.
    pub fn as_str(&self) -> &'static str {
        match self {
            VersionState::Building => "building",
            VersionState::Active => "active",
            VersionState::Retired => "retired",
        }
    }

    fn parse(text: &str) -> Option<VersionState> {
        match text {
            "building" => Some(VersionState::Building),
            "active" => Some(VersionState::Active),
            "retired" => Some(VersionState::Retired),
            _ => None,
        }
    }
}

/// The active versions a store has looked up recently.
#[derive(Default)]
pub struct VersionCache {
    active: Mutex<HashMap<String, (u32, Instant)>>,
}

fn sql_type(kind: IndexFieldType) -> &'static str {
    match kind {
        IndexFieldType::String => "VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin",
        IndexFieldType::Int => "BIGINT",
        IndexFieldType::Float => "DOUBLE",
        IndexFieldType::Decimal => "DECIMAL(65,20)",
        IndexFieldType::Bool => "TINYINT(1)",
    }
}

/// The entry table of a version.
pub fn entry_table(name: &str, version: u32) -> String {
    format!("ix{version}_{name}")
}

/// The row pointer table of a version.
pub fn pointer_table(name: &str, version: u32) -> String {
    format!("ixr{version}_{name}")
}

/// The maintenance trigger's name of a version.
pub fn trigger_name(name: &str, version: u32) -> String {
    format!("index_{name}_v{version}")
}

fn bind(
    query: sqlx::query::Query<'static, MySql, MySqlArguments>,
    value: Option<&IndexValue>,
) -> sqlx::query::Query<'static, MySql, MySqlArguments> {
    match value {
        None => query.bind(None::<String>),
        Some(IndexValue::Str(s)) | Some(IndexValue::Decimal(s)) => query.bind(s.clone()),
        Some(IndexValue::Int(i)) => query.bind(*i),
        Some(IndexValue::Float(f)) => query.bind(*f),
        Some(IndexValue::Bool(b)) => query.bind(*b),
    }
}

fn spec<'a>(store: &'a MySqlStore, name: &str) -> Result<&'a IndexSpec> {
    store
        .indexes()
        .iter()
        .find(|i| i.name == name)
        .ok_or_else(|| crate::memory::unknown_index(store.indexes(), name))
}
