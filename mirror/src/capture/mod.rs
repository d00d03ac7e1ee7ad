//! Capture: writes that bypass the facade reach Schemaless too.
//!
//! Until the app is rewritten, many writers change the legacy tables with
//! plain SQL: admin scripts, cron jobs, services in other languages. The
//! outbox only carries the facade's writes. Capture makes PostgreSQL
//! itself record "parent P changed in column C" for every committed change
//! to a table of the layout; the relay ([`crate::Relay`]) delivers it next
//! to the outbox, reading each changed row as it is now and writing its
//! cells ([`deliver`]). A crash of any process loses nothing: a queue entry
//! commits with its change and is deleted only in the transaction that
//! delivered it; a slot is advanced only after delivery.
//!
//! A facade write is delivered once: its transaction sets
//! `mezzanine.capture = 'skip'` (see [`legacy::TransactionHook`]), so the
//! triggers leave it to the outbox; a slot knows it by its outbox row.
//!
//! The rules, from the layout alone:
//!
//! - **versions**: a row column's ref key is a version. An update that
//!   changes mapped fields and keeps the version would be a second body at
//!   one ref key: with `capture.bump_version` a `BEFORE UPDATE` trigger
//!   raises it; without, the relay parks the change with both bodies. A
//!   child row's ref key is its identity: a child row edited in place is
//!   parked the same way.
//! - **deletes**: cells are immutable, so a deleted parent or child row
//!   becomes a tombstone cell in `capture.tombstone_column` (see
//!   [`schemaless::tombstone`]), which the facade's reads and the verifier
//!   honour. A truncated table is parked: its rows are no longer known.
//!
//! Two methods record the changes (`capture.method`):
//!
//! - `triggers` (the default): row triggers on every layout table insert
//!   the queue row in the writer's transaction ([`install`]). They work on
//!   any server, with no restart and nothing retained, and a transaction
//!   opts out with a setting; they cost a plain SQL write its queue row
//!   (about 1.2x at saturation on the development machine, `mezzanine
//!   bench capture`) ([`triggers`]).
//! - `logical`: a `pgoutput` slot decoded by the relay ([`logical`]),
//!   free on the write path, but it needs `wal_level = logical` (a
//!   restart), the `REPLICATION` attribute, a replica identity that logs
//!   deleted rows' keys, and it retains WAL while no relay reads it.
//!
//! Both produce the same entries (which parent changed in which column),
//! and one delivery ([`deliver`]) turns them into cells.
//!
//! # Layout
//!
//! - [`triggers`]: the trigger method's functions, generated from the
//!   layout;
//! - [`install`]: install and uninstall (of either method), coverage;
//! - [`logical`]: setting the logical method up: publication, slot,
//!   replica identities, coverage;
//! - [`slot`]: reading the logical slot: decoding, the reader lock,
//!   advancing, what it holds;
//! - [`pgoutput`]: the messages of PostgreSQL's logical decoding plugin;
//! - `change`: a captured change (which parent, which column), queued or
//!   decoded;
//! - [`deliver`]: the relay's half: changes into cells;
//! - [`status`]: the queue, the slot, what is parked, retries.

mod change;
pub mod deliver;
pub mod install;
pub mod logical;
pub mod pgoutput;
pub mod slot;
pub mod status;
pub mod triggers;

pub use deliver::{CaptureDelivery, Captured};
pub use install::{Coverage, Installed, Uninstalled};
pub use status::{CaptureStatus, Parked, Queue};
