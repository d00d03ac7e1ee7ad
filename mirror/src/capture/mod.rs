//! Capture: writes that bypass the facade reach Schemaless too.
//!
//! Until the app is rewritten, many writers change the legacy tables with
//! plain SQL: admin scripts, cron jobs, services in other languages. The
//! outbox only carries the facade's writes. Capture makes PostgreSQL
//! itself record, in the committing transaction, "parent P changed in
//! column C" for every change to a table of the layout, into
//! `mezzanine.capture_queue`; the relay ([`crate::Relay`]) drains it next
//! to the outbox, reading each changed row as it is now and writing its
//! cells ([`deliver`]). A crash of any process loses nothing: the queue
//! entry commits with the change, and is deleted only in the transaction
//! that delivered it.
//!
//! A facade write is delivered once: its transaction sets
//! `mezzanine.capture = 'skip'` (see [`legacy::TransactionHook`]), so the
//! triggers leave it to the outbox.
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
//! Logical decoding was the alternative. Triggers were chosen because
//! they commit with the change in the same transaction, need no
//! `wal_level = logical` (a restart of the app's database) and no
//! replication slot (which retains WAL without bound while no relay
//! runs), and let a transaction opt out (the facade's) with a setting. On
//! this machine a trigger costs a plain SQL write 0-14% (a two-statement
//! transaction, 4-8 writers); `mezzanine bench capture` measures it.
//!
//! # Layout
//!
//! - [`install`]: the triggers, generated from the layout; install,
//!   uninstall, coverage;
//! - [`deliver`]: the relay's half: queued changes into cells;
//! - [`status`]: the queue, what is parked, retries.

pub mod deliver;
pub mod install;
pub mod logical;
pub mod pgoutput;
pub mod status;

pub use deliver::{CaptureDelivery, Captured};
pub use install::{Coverage, Installed, Uninstalled};
pub use status::{CaptureStatus, Parked, Queue};
