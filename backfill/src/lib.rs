//! backfill: the history of the legacy tables copied into Schemaless while
//! the app keeps running.
//!
//! - **Plan** ([`plan`]): the parent id range split into chunks, stored in
//!   `mezzanine.backfill_plan` and `mezzanine.backfill_chunks` in the
//!   legacy database, each chunk `pending`, `running` (with its owner and
//!   heartbeat), `done` or `failed` (with the error). Ids past the planned
//!   range are added as new chunks by extending the plan.
//! - **Run** ([`run`]): workers in any number of processes claim chunks
//!   with `FOR UPDATE SKIP LOCKED`, read each in one snapshot with the
//!   legacy model's set-based scan, write its cells with `put_cells`
//!   grouped by shard, and mark it done. A chunk whose owner stopped
//!   writing heartbeats is claimed again.
//! - **Live writes and crashes need no locks.** Cells are immutable and the
//!   latest is the highest ref key: a cell the mirror wrote is the same
//!   cell the backfill writes (`AlreadyPresent`), or a newer one that wins.
//!   A chunk copied twice (a crash after its writes, before it was marked
//!   done) changes nothing the second time.
//! - **Throttle**: rows per second per process, and a pause while any
//!   minion lags its master by more than a threshold; `pause`/`resume` from
//!   anywhere through the plan row. Memory is one chunk per worker.
//! - **Status** ([`status`]): the whole plan from any machine; the gate of
//!   `mode set shadow` ([`status::refusal`]).

pub mod error;
pub mod plan;
pub mod run;
pub mod status;

pub use error::Error;
pub use plan::Plan;
pub use run::{Backfill, Options, Progress};
pub use status::PlanStatus;
