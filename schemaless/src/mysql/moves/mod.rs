//! Shard moves: a shard's home changed from one cluster to another while
//! it takes writes.
//!
//! Built so far: [`copy`], the bulk of a move: a consistent snapshot of
//! the shard copied to the target cluster's master with every cell's own
//! added_id, then the source's change log followed from the snapshot's
//! position until the copy is level, and [`crate::mysql::topology::placement`],
//! which switches where every store sends the shard.
//!
//! To come, in this order (see the notes): fencing the source
//! shard's writes for at most about a second (a `BEFORE INSERT` trigger
//! with a deadline, so a mover that dies lifts its own fence; writes that
//! meet it refresh placements and retry, none fails), the last catch-up
//! under the fence, a permanent fence on the old copy and then the
//! placement (that order, so a crash never leaves two writable homes), the
//! trigger and index bookkeeping of the shard, the move's state kept for
//! `shard status`, resume and rollback, and `shard gc`.

pub mod copy;

pub use copy::ShardCopy;
