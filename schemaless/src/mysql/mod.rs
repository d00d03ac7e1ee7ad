//! The Schemaless store on MySQL/MariaDB.
//!
//! - [`topology`]: clusters, storage nodes and their pools, shard placement;
//! - [`schema`]: creating shard databases online and idempotently;
//! - [`sql`]: the statement texts, and why they are text;
//! - [`store`]: the cell API implementation;
//! - [`commit`]: group commit, the write path's calls combined per master;
//! - `combine`: concurrent calls combined into fewer round trips (group
//!   commit and the index maintainer's applies);
//! - [`breaker`]: a circuit breaker per storage node;
//! - [`backup`]: backups of every shard's cells, their manifest, and
//!   restores (whole or to a point in each change log);
//! - [`buffer`]: buffered writes, hinted handoff and the reconciler;
//! - [`lost`]: buffered writes that lost to another body, recorded;
//! - [`moves`]: shard moves between clusters: the copy so far;
//! - [`replay`]: the buffers replayed to a promoted master;
//! - [`failover`]: promoting a minion, and every store learning of it;
//! - [`follow`]: reading a shard's change log in order without skipping
//!   cells still being committed;
//! - [`pages`]: change-log pages of many shards of a node read in one
//!   statement when their readers come together;
//! - [`trigger`]: handlers run on every new cell of a column, per shard,
//!   with offsets, leases and dead letters;
//! - [`index`]: sharded secondary indexes, their maintenance trigger and
//!   versions;
//! - `history`: reads of every stored version (whole rows, one column of
//!   many rows);
//! - `repair`: the operator's rewrite of a (row, column), for the
//!   verifier.

pub mod awaited;
pub mod backup;
pub mod breaker;
pub mod buffer;
mod classify;
mod combine;
pub mod commit;
pub mod conn;
pub mod damaged;
pub mod failover;
pub mod follow;
mod history;
pub mod index;
pub mod lost;
pub mod moves;
pub mod pages;
mod repair;
pub mod replay;
pub mod schema;
pub mod sql;
pub mod store;
pub mod topology;
pub mod trigger;

pub use classify::{classify, storage_error};
pub use store::MySqlStore;
pub use topology::Topology;
