//! The Schemaless store on MySQL/MariaDB.
//!
//! - [`topology`]: clusters, storage nodes and their pools, shard placement;
//! - [`schema`]: creating shard databases online and idempotently;
//! - [`sql`]: the statement texts, and why they are text;
//! - [`store`]: the cell API implementation.

pub mod schema;
pub mod sql;
pub mod store;
pub mod topology;

pub use store::MySqlStore;
pub use topology::Topology;
