//! Schemaless: a sharded, append-only cell store on MySQL/MariaDB.
//!
//! A cell is an immutable JSON object addressed by (row key, column, ref
//! key). Rows are spread over a fixed number of shards by a hash of their
//! row key; each shard is one MariaDB database on the cluster owning its
//! range. Writing a cell that exists is idempotent when the body is the same
//! and a conflict when it differs; nothing is ever overwritten. The latest
//! cell of a (row, column) is the one with the highest ref key, so writes
//! can be replayed in any order and give the same state.
//!
//! # Layout
//!
//! - [`cell`]: row keys, columns, ref keys, bodies, validated at the API
//!   boundary;
//! - [`codec`]: the stored form of a body (MessagePack, then zlib);
//! - [`decimal`]: exact decimals in one canonical form;
//! - [`routing`]: `fnv1a64(row key) % shard_count`;
//! - [`api`]: the [`CellStore`] trait every store implements;
//! - [`index`]: secondary index definitions, query checks, and the
//!   brute-force answer both stores are held to;
//! - [`memory`]: the in-memory model store;
//! - [`tombstone`]: deletes recorded as tombstone cells, and reads that
//!   honour them;
//! - [`mysql`]: the store on MariaDB shards, its topology and schema;
//! - [`error`]: the crate's error type.
//!
//! # Example
//!
//! ```
//! use schemaless::{Cell, CellStore, MemoryStore, ReadFrom, WriteOutcome};
//! use serde_json::json;
//!
//! # tokio::runtime::Runtime::new().unwrap().block_on(async {
//! let store = MemoryStore::new(64, config::Limits::default());
//! let trip = "6f1c1a0e-8a3b-4a55-9d1e-3c2b1a0f9e8d";
//! let v1 = Cell::parse(trip, "BASE", 1, json!({"status": "requested"})).unwrap();
//! let v2 = Cell::parse(trip, "BASE", 2, json!({"status": "completed"})).unwrap();
//! assert_eq!(store.put_cell(v1.clone()).await.unwrap(), WriteOutcome::Written);
//! assert_eq!(store.put_cell(v2.clone()).await.unwrap(), WriteOutcome::Written);
//! assert_eq!(store.put_cell(v1).await.unwrap(), WriteOutcome::AlreadyPresent);
//!
//! let latest = store
//!     .get_cell_latest(&v2.key.row_key, &v2.key.column, ReadFrom::Master)
//!     .await
//!     .unwrap()
//!     .unwrap();
//! assert_eq!(latest.cell.body, v2.body);
//! # });
//! ```

pub mod api;
pub mod cell;
pub mod codec;
pub mod decimal;
pub mod error;
pub mod index;
pub mod memory;
pub mod mysql;
pub mod pool;
pub mod retry;
pub mod routing;
pub mod tombstone;

pub use api::{
    Answer, CellResult, CellStore, Conflict, Filter, FilterOp, IndexEntry, IndexQuery, ReadFrom,
    ShardPage, WriteOutcome,
};
pub use cell::{Body, Cell, CellKey, Column, RefKey, RowKey, StoredCell};
pub use error::{Error, Failure, Result};
pub use memory::MemoryStore;
pub use mysql::MySqlStore;
