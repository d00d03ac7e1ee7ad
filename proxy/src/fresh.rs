//! Reading one's own writes in `primary`.
//!
//! There a write through the facade goes to Schemaless, and reaches
//! PostgreSQL only once the reverse mirror applies it (it polls every
//! `mirror.reverse_poll_ms`). A statement the proxy then forwards to
//! PostgreSQL (a `count(*)`, a join the cell API cannot follow, anything
//! in a transaction block) would not see what the same session just
//! wrote: an INSERT acknowledged, then a count without it. So the session
//! keeps the cells of its writes until PostgreSQL is seen to hold them,
//! and a statement it forwards meanwhile waits for that, at most
//! `proxy.read_your_writes_ms`. Served reads and writes through the
//! facade do not wait: Schemaless has the writes already. A write the
//! reverse mirror parked (PostgreSQL refused to apply it: a trigger, a
//! constraint the facade does not ask) will not be there however long
//! the statement waits: it stops waiting for that one.

use schemaless::tombstone::Deletion;
use schemaless::{Cell, CellKey, CellStore, ReadFrom, Result};

use legacy::layout::Shape;
use legacy::LegacyStore;

/// How the wait for a session's writes ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Awaited {
    /// PostgreSQL holds every one.
    Applied,
    /// The reverse mirror parked one, and holds the rest.
    Parked,
    /// Not all there within `proxy.read_your_writes_ms`.
    TimedOut,
    /// PostgreSQL could not be asked.
    Failed,
}

impl Awaited {
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Awaited::Applied => "applied",
            Awaited::Parked => "parked",
            Awaited::TimedOut => "timed_out",
            Awaited::Failed => "failed",
        }
    }
}

/// Whether the reverse mirror parked `cell`: PostgreSQL refused to apply
/// it, and it stays out until `mezzanine mirror retry-parked` (or
/// whoever fixes the cause) applies it.
pub(crate) async fn parked(legacy: &LegacyStore, cell: &Cell) -> sqlx::Result<bool> {
    sqlx::query_scalar(
        "/* mezzanine */ SELECT EXISTS (SELECT 1 FROM mezzanine.reverse_parked
         WHERE row_key = $1 AND column_name = $2 AND ref_key = $3)",
    )
    .bind(cell.key.row_key.uuid())
    .bind(cell.key.column.as_str())
    .bind(cell.key.ref_key.get())
    .fetch_one(legacy.pool())
    .await
}

/// Whether PostgreSQL holds what `cell` wrote, as the reverse mirror
/// applies it: a row column's version or a newer one, a child row, a
/// deletion done. A cell of a column the layout does not map is not
/// applied by anyone: it counts as there.
pub(crate) async fn applied(legacy: &LegacyStore, tombstones: &str, cell: &Cell) -> Result<bool> {
    let layout = legacy.layout();
    let row = &cell.key.row_key;
    if cell.key.column.as_str() == tombstones {
        return match Deletion::of(cell)? {
            Deletion::Row => {
                for column in layout.columns.iter().filter(|c| c.shape == Shape::Row) {
                    let latest = legacy
                        .get_cell_latest(row, &column.name, ReadFrom::Master)
                        .await?;
                    if latest.is_some() {
                        return Ok(false);
                    }
                }
                Ok(true)
            }
            Deletion::Cell(column, ref_key) => {
                let Ok(ref_key) = schemaless::RefKey::new(ref_key) else {
                    return Ok(true);
                };
                let key = CellKey {
                    row_key: *row,
                    column,
                    ref_key,
                };
                Ok(legacy.get_cell(&key, ReadFrom::Master).await?.is_none())
            }
        };
    }
    let Some((_, column)) = layout.column(cell.key.column.as_str()) else {
        return Ok(true);
    };
    match column.shape {
        Shape::Row => Ok(legacy
            .get_cell_latest(row, &column.name, ReadFrom::Master)
            .await?
            .is_some_and(|latest| latest.cell.key.ref_key.get() >= cell.key.ref_key.get())),
        Shape::Child { .. } => Ok(legacy
            .get_cell(&cell.key, ReadFrom::Master)
            .await?
            .is_some()),
    }
}
