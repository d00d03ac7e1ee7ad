//! The legacy model: the PostgreSQL tables a migration starts from, seen
//! through the Schemaless cell API.
//!
//! A **layout** (config `[layout]`) maps a parent table and its child
//! tables to Schemaless columns. [`LegacyStore`] implements
//! [`schemaless::CellStore`] over those tables ("the Schemaless API
//! emulated on the PostgreSQL model"), and [`LegacyStore::scan`] reads the
//! cells of a range of parent ids in a few set-based queries for the
//! backfill and the full diff. Every path converts values with the same
//! [`conversion`], so a row means the same thing whichever path read it.
//! This crate knows nothing of MySQL.
//!
//! # Layout
//!
//! - [`conversion`]: SQL type <-> JSON, and the canonical form of each;
//! - [`time`]: canonical timestamps and dates;
//! - [`bits`]: canonical bit strings;
//! - [`geometry`]: canonical `point`s, `box`es and the other geometric types;
//! - [`layout`]: the config's layout checked against the live schema;
//! - [`store`]: the cell API over the legacy tables;
//! - [`scan`]: set-based reads of many parents: chunks for the backfill
//!   and the full diff, the current rows behind captured changes;
//! - [`index`]: `query_index` answered by SQL;
//! - [`connection`]: sessions to PostgreSQL, all configured alike;
//! - [`trips`]: the sample trips data set (tables and seeded generator);
//! - [`add_uuid`]: adds and fills the UUID row key column online;
//! - [`error`]: the crate's error type.
//!
//! # Example
//!
//! Canonical values need no database:
//!
//! ```
//! use legacy::conversion::Conversion;
//! use serde_json::json;
//!
//! let (value, sql) = Conversion::Timestamptz
//!     .accept(&json!("2015-03-08T02:30:00-05:00"))
//!     .unwrap();
//! assert_eq!(value, json!("2015-03-08T07:30:00.000000Z"));
//! assert_eq!(sql.as_deref(), Some("2015-03-08T07:30:00.000000Z"));
//! let (fare, _) = Conversion::Numeric.accept(&json!("12.50")).unwrap();
//! assert_eq!(fare, json!("12.5"));
//! ```

pub mod add_uuid;
pub mod bits;
mod classify;
pub mod connection;
pub mod conversion;
pub mod duration;
pub mod error;
pub mod geometry;
pub mod hstore;
pub mod index;
pub mod layout;
pub mod multirange;
pub mod network;
pub mod predicate;
pub mod range;
mod repair;
pub mod scan;
pub mod statements;
pub mod store;
pub mod time;
pub mod trips;
pub mod tsquery;
pub mod tsvector;
pub mod zoned;

pub use classify::{classify, storage_error};
pub use error::Error;
pub use layout::Layout;
pub use scan::{Chunk, Current, CurrentParent};
pub use store::{Asked, LegacyStore, TransactionHook};
