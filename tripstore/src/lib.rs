//! tripstore: the facade apps link. One cell API
//! ([`schemaless::CellStore`]) over both stores, switched by the mode.
//!
//! The mode is kept in PostgreSQL (`mezzanine.mode`), so every running
//! facade agrees; changes reach them by LISTEN/NOTIFY within milliseconds
//! and by polling within `legacy.mode_poll_ms` when a notification is lost.
//! Every mode is served: `legacy` (everything to PostgreSQL, through the
//! layout), `mirror` and `shadow` (writes to PostgreSQL and the outbox,
//! relayed to Schemaless), `primary` (writes to Schemaless, mirrored back)
//! and `schemaless`; see [`trip_store`] for the routing.
//!
//! # Layout
//!
//! - [`trip_store`]: [`TripStore`], the routing facade and its mode
//!   watcher;
//! - [`mode`]: the modes, the ladder, the control table;
//! - [`gates`]: what each step forward waits for;
//! - [`readiness`]: whether the stores the mode uses answer;
//! - [`report`]: what every facade reports to the guard (calls, failures,
//!   latencies per store, open breakers);
//! - [`triage`]: the verifier's questions to the mirror;
//! - [`error`]: the crate's error type.
//!
//! # Example
//!
//! ```no_run
//! use schemaless::{CellStore, ReadFrom, RowKey, Column};
//! use tripstore::TripStore;
//!
//! # async fn example() -> Result<(), Box<dyn std::error::Error>> {
//! let config = config::Config::load("config/examples/local.toml")?;
//! let trips = TripStore::connect(&config).await?;
//! let trip = RowKey::parse("6f1c1a0e-8a3b-4a55-9d1e-3c2b1a0f9e8d")?;
//! let base = trips
//!     .get_cell_latest(&trip, &Column::new("BASE")?, ReadFrom::Master)
//!     .await?;
//! println!("mode {}: {base:?}", trips.mode());
//! trips.close().await;
//! # Ok(())
//! # }
//! ```

pub mod direct_writes;
pub mod error;
pub mod gates;
pub mod mode;
pub mod readiness;
pub mod report;
pub mod triage;
pub mod trip_store;

pub use error::Error;
pub use mode::{Check, Mode, ModeChange, ModeRequest, ModeState, ReadShare, ReadsRequest};
pub use readiness::Readiness;
pub use trip_store::TripStore;
