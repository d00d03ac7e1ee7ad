//! Retired keys: where each deletion sent to Schemaless falls in the
//! outbox's order (`mezzanine.deletions`).
//!
//! A tombstone retires what it deletes for good (see
//! [`schemaless::tombstone`]): a cell written there later is hidden. The
//! relay must tell two outbox entries apart that Schemaless alone cannot:
//!
//! - a cell written *before* the deletion and delivered again after it
//!   (a relay that died before its commit): the cell stored with the same
//!   body, `AlreadyPresent`, and hidden as it should be;
//! - the same cell written *again after* the deletion (a facade write in
//!   `mirror` of the row as it was): PostgreSQL holds the row now, and
//!   Schemaless would answer `AlreadyPresent` and keep hiding it, the two
//!   stores disagreeing with nothing parked.
//!
//! Outbox ids are handed out in the order writes run, so each deletion is
//! recorded here with the last outbox id handed out when it was recorded
//! (`after`): by the facade's own write that enqueues the tombstone, by the
//! capture relay that writes a plain SQL deletion's tombstone, by the
//! reverse mirror that applies one written to Schemaless. An outbox entry
//! under a recorded deletion whose id is above `after` was written after
//! the deletion; the relay never delivers it ([`crate::relay`]).
//!
//! Why the last id handed out, and not the tombstone's own entry: capture
//! and the reverse mirror have no entry, and one rule serves all three. A
//! write of the same row racing the deletion takes its id after the
//! deletion's row lock is released (its statement waits on the row first),
//! so it is above the mark. What is left is a write that touches none of
//! the deleted rows (a child row of a table without a foreign key) running
//! while a deletion of its row commits; the sampled reads and the full diff
//! report that row.
//!
//! A key stays retired: rows are never removed from the table, as
//! tombstones are never removed from Schemaless. A key deleted twice keeps
//! its first mark.

use std::collections::BTreeSet;

use schemaless::tombstone::Deletion;
use schemaless::{Cell, Column};
use sqlx::PgConnection;
use uuid::Uuid;

/// The `column_name` of a whole row's deletion (its `ref_key` is 0).
const WHOLE_ROW: &str = "";

/// Records the deletions named by `tombstones` (tombstone cells now in
/// Schemaless or on their way there, in the caller's transaction). Cells
/// of other columns are left out; nothing is sent when none is left.
pub(crate) async fn record<'a>(
    conn: &mut PgConnection,
    column: &Column,
    tombstones: impl IntoIterator<Item = &'a Cell>,
) -> schemaless::Result<()> {
    // Once each: one statement may not update a row twice.
    let mut deleted = BTreeSet::new();
    for cell in tombstones {
        if cell.key.column != *column {
            continue;
        }
        deleted.insert(match Deletion::of(cell)? {
            Deletion::Row => (cell.key.row_key.uuid(), WHOLE_ROW.to_string(), 0),
            Deletion::Cell(column, ref_key) => (
                cell.key.row_key.uuid(),
                column.as_str().to_string(),
                ref_key,
            ),
        });
    }
    if deleted.is_empty() {
        return Ok(());
    }
    let mut row_keys: Vec<Uuid> = Vec::with_capacity(deleted.len());
    let mut columns: Vec<String> = Vec::with_capacity(deleted.len());
    let mut ref_keys: Vec<i64> = Vec::with_capacity(deleted.len());
    for (row_key, column, ref_key) in deleted {
        row_keys.push(row_key);
        columns.push(column);
        ref_keys.push(ref_key);
    }
    sqlx::query(
        "/* mezzanine */ INSERT INTO mezzanine.deletions (row_key, column_name, ref_key, after)
         SELECT d.row_key, d.column_name, d.ref_key,
                coalesce(pg_sequence_last_value(pg_get_serial_sequence('mezzanine.outbox', 'id')::regclass), 0)
         FROM UNNEST($1::uuid[], $2::text[], $3::int8[]) AS d(row_key, column_name, ref_key)
         ON CONFLICT (row_key, column_name, ref_key)
         DO UPDATE SET after = least(mezzanine.deletions.after, EXCLUDED.after)",
    )
    .bind(&row_keys)
    .bind(&columns)
    .bind(&ref_keys)
    .execute(&mut *conn)
    .await
    .map_err(|source| legacy::storage_error("postgres (mezzanine.deletions)", source))?;
    Ok(())
}
