//! Shard moves: a shard's home changed from one cluster to another while
//! it takes writes.
//!
//! - [`copy`]: the bulk of a move, a consistent snapshot of the shard
//!   copied to the target cluster's master with every cell's own
//!   added_id, then the source's change log followed until the copy is
//!   nearly level. Keeping the added_ids keeps every trigger, index and
//!   reverse-mirror offset valid on the new home.
//! - [`fence`]: triggers that refuse the shard's writes for the last pass
//!   and the switch, with a deadline so a dead mover's fence lifts itself.
//! - [`side`]: the shard's other tables (trigger bookkeeping, index
//!   entries), copied whole under the fence.
//! - [`run`]: the phases in the order that makes a move safe to kill
//!   anywhere, and resume, rollback and `shard gc`.
//! - [`state`]: each move's phase, on every master, for `shard status`.
//!
//! The switch itself is a placement ([`crate::mysql::topology::placement`]),
//! which every store re-reads; a store that meets a fence or the old
//! copy's renamed table re-reads it at once (see
//! [`crate::error::Failure::Moving`]).

pub mod copy;
pub mod fence;
pub mod run;
pub mod side;
pub mod state;

pub use copy::ShardCopy;
pub use run::{MoveOptions, MoveReport};
pub use state::{MoveRecord, Phase};

/// What the old copy's `entity` table is renamed to once the shard has
/// moved: readable by an operator until `shard gc`, invisible to stores.
pub const MOVED_ENTITY: &str = "moved_entity";
