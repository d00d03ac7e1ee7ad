//! cutover: the migration as a team runs it, over the state every
//! facade, relay and worker shares (the legacy database's `mezzanine`
//! schema and the Schemaless shards).
//!
//! # Layout
//!
//! - [`guard`]: steps the cutover back when Schemaless misbehaves, from
//!   what facades report and the shared state shows;
//! - [`status`]: one screen of where the migration stands: the mode and
//!   its read share, the gates of the next step, backfill progress, every
//!   lag, the verifier's figures, the storage nodes, the workers.
//!
//! Mode changes, dry runs, the read share and the history live with the
//! mode itself, in [`tripstore::mode`]: every facade needs them, and
//! `cutover` only reads them.

pub mod guard;
pub mod status;

pub use guard::Guard;
pub use status::{Sources, Status};
