//! mirror: every write reaches both stores, and a crash between the two
//! loses nothing.
//!
//! - **Forward** (modes `mirror` and `shadow`): a facade write is one
//!   PostgreSQL transaction that changes the legacy tables *and* inserts
//!   the cell into `mezzanine.outbox` ([`Outbox`], a
//!   [`legacy::TransactionHook`]). A [`Relay`] drains the outbox into
//!   Schemaless in batches and deletes what landed, in the same
//!   transaction that locked the entries (`FOR UPDATE SKIP LOCKED`, so
//!   several relays share the work and never hold one entry at once). A
//!   relay that dies between the Schemaless write and its commit leaves
//!   the entries in place; they are delivered again and come back
//!   `AlreadyPresent`. Schemaless being down only grows the outbox.
//! - **Reverse** (mode `primary`): facade writes go to Schemaless first.
//!   The [`ReverseMirror`] follows every shard's change log and applies
//!   the cells to the legacy tables through the layout, version-guarded,
//!   so replays and late, older cells change nothing. Each shard's offset
//!   lives in `mezzanine.reverse_offsets` and is advanced in the same
//!   PostgreSQL transaction as the rows it covers: the legacy tables and
//!   the offset can never disagree, even after PostgreSQL itself is
//!   restored from a backup or failed over (the offset moves back with the
//!   data, and the cells are applied again).
//! - **Capture** (modes `mirror` onwards): writes that bypass the facade
//!   (plain SQL) are recorded by triggers on the legacy tables in
//!   `mezzanine.capture_queue`, in the writer's transaction, and the same
//!   relay delivers them: it reads the changed rows as they are now and
//!   writes their cells, and a tombstone for each deleted row
//!   ([`capture`]).
//! - **Visibility**: [`status`] reads the outbox depth and age, the parked
//!   entries, the reverse offsets against the change-log heads, and the
//!   heartbeats every relay and reverse mirror writes to
//!   `mezzanine.mirror_workers` (throughput, failures, last error).
//!
//! Cells are immutable and the latest is the one with the highest ref key,
//! so delivery order never matters: replaying any subset in any order ends
//! in the same state.
//!
//! # Layout
//!
//! - [`schema`]: the mirror's tables in the `mezzanine` schema;
//! - [`capture`]: database-side capture of plain SQL writes: the
//!   triggers, their delivery, their status;
//! - [`outbox`]: the transaction hook that fills the outbox;
//! - [`relay`]: the relay;
//! - [`retired`]: where each deletion falls in the outbox's order;
//! - [`reverse`]: the reverse mirror;
//! - [`status`]: what `mezzanine mirror status` and the metrics show;
//! - [`worker`]: heartbeats, backoff and counters shared by the two loops.

pub mod capture;
pub mod error;
pub mod outbox;
pub mod relay;
pub mod retired;
pub mod reverse;
pub mod schema;
pub mod status;
pub mod worker;

pub use error::Error;
pub use outbox::Outbox;
pub use relay::Relay;
pub use reverse::ReverseMirror;
pub use status::MirrorStatus;
pub use worker::WorkerStats;
