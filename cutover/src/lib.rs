//! cutover: the migration as a team runs it, over the state every
//! facade, relay and worker shares (the legacy database's `mezzanine`
//! schema and the Schemaless shards).
//!
//! # Layout
//!
//! - [`status`]: one screen of where the migration stands: the mode and
//!   its read share, the gates of the next step, backfill progress, every
//!   lag, the verifier's figures, the storage nodes, the workers.
//!
//! Mode changes, dry runs, the read share and the history live with the
//! mode itself, in [`tripstore::mode`]: every facade needs them, and
//! `cutover` only reads them.

pub mod status;

pub use status::{Sources, Status};
