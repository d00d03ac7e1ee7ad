//! What a caller may do inside a write's transaction ([`TransactionHook`]:
//! the outbox's rows, skipping capture), and the capture setting that a
//! transaction whose changes reach Schemaless another way sets.

use async_trait::async_trait;
use schemaless::{Cell, CellResult, Result};

/// The setting database-side capture (`mezzanine capture install`) reads:
/// a transaction that sets it to `skip` is not captured.
pub const CAPTURE_SETTING: &str = "mezzanine.capture";

/// How a transaction whose changes reach Schemaless another way begins:
/// with [`CAPTURE_SETTING`] set for the transaction alone (capture
/// triggers read it), in the same round trip as its `BEGIN`.
pub(super) const SKIP_CAPTURE: &str = "BEGIN; SET LOCAL mezzanine.capture = 'skip'";

/// The same, for a transaction that writes no outbox row: it also emits
/// the logical decoding message `mezzanine.capture`, by which a logical
/// capture slot knows to skip it (a facade write is known by its outbox
/// row).
pub(super) const SKIP_CAPTURE_MARKED: &str = "BEGIN; SET LOCAL mezzanine.capture = 'skip';
     SELECT pg_catalog.pg_logical_emit_message(true, 'mezzanine.capture', 'skip')";

/// Statements that must commit in the same PostgreSQL transaction as a
/// legacy write (see [`crate::LegacyStore::put_cells_with`]).
#[async_trait]
pub trait TransactionHook: Send + Sync {
    /// Whether the batch's changes reach Schemaless another way (the
    /// outbox carries them, or they came from Schemaless), so that
    /// database-side capture must skip the transaction: a facade write is
    /// then delivered once, not twice. Default false: plain writes are
    /// captured like any other writer's.
    fn skip_capture(&self) -> bool {
        false
    }

    /// A table `(row_key uuid, column_name text, ref_key bigint, body
    /// text)` that every cell the batch writes (`Written`) is also inserted
    /// into, by the very statement that writes it (a data-modifying CTE):
    /// no round trip of its own. Cells found already there are not copied.
    fn copy_table(&self) -> Option<&str> {
        None
    }

    /// Whether a parent row the batch inserts takes the integer id
    /// reserved for its row key in `mezzanine.row_ids` (the proxy reserves
    /// there, in `primary`, the id an INSERT gives or the one it drew
    /// for `RETURNING id`), consuming the reservation in the same
    /// statement. The
    /// reverse mirror's writes do; the table must exist (the mirror's
    /// schema). Without a reservation the id is the column's default, as
    /// always. Ignored with [`TransactionHook::copy_table`].
    fn reserved_ids(&self) -> bool {
        false
    }

    /// Runs first in the transaction (e.g. to lock what the hook updates);
    /// an error rolls the batch back.
    async fn begin(&self, _tx: &mut sqlx::PgConnection) -> Result<()> {
        Ok(())
    }

    /// Runs after every cell was written, before the commit. `cells` are
    /// the batch's cells with canonical bodies, `results` what each write
    /// did, in batch order; an error rolls the batch back. Does nothing
    /// unless overridden.
    async fn before_commit(
        &self,
        _tx: &mut sqlx::PgConnection,
        _cells: &[Cell],
        _results: &[CellResult],
    ) -> Result<()> {
        Ok(())
    }
}

/// The hook of a plain `put_cells`.
pub(crate) struct NoHook;

impl TransactionHook for NoHook {}
