//! The outbox: cells committed to the legacy tables, waiting for the relay.

use async_trait::async_trait;
use legacy::TransactionHook;
use schemaless::{Cell, CellResult, Column, Result, WriteOutcome};
use uuid::Uuid;

/// The hook a mirrored write runs in its legacy transaction: every cell the
/// legacy tables now hold goes into `mezzanine.outbox`. A `Written` cell
/// is inserted by the statement that writes it (see
/// [`TransactionHook::copy_table`]), so mirroring costs no round trip per
/// cell; an `AlreadyPresent` one (a retried write may find its first
/// attempt committed without knowing whether its entry was delivered) by
/// one statement before the commit. A `Superseded` cell is not enqueued:
/// the legacy tables did not keep it, and the newer cell that superseded it
/// was mirrored when it was written. A deletion is recorded with its place
/// in the outbox's order ([`crate::retired`]).
pub struct Outbox {
    /// `capture.tombstone_column`: cells there are deletions.
    tombstones: Column,
}

impl Outbox {
    /// The hook of a store whose deletions are cells of `tombstones`.
    pub fn new(tombstones: Column) -> Outbox {
        Outbox { tombstones }
    }
}

#[async_trait]
impl TransactionHook for Outbox {
    /// The outbox carries every cell the batch writes: capture must not
    /// deliver them a second time.
    fn skip_capture(&self) -> bool {
        true
    }

    fn copy_table(&self) -> Option<&str> {
        Some("mezzanine.outbox")
    }

    async fn before_commit(
        &self,
        tx: &mut sqlx::PgConnection,
        cells: &[Cell],
        results: &[CellResult],
    ) -> Result<()> {
        let mut row_keys: Vec<Uuid> = Vec::with_capacity(cells.len());
        let mut columns: Vec<&str> = Vec::with_capacity(cells.len());
        let mut ref_keys: Vec<i64> = Vec::with_capacity(cells.len());
        let mut bodies: Vec<String> = Vec::with_capacity(cells.len());
        for (cell, result) in cells.iter().zip(results) {
            if matches!(result, Ok(WriteOutcome::AlreadyPresent)) {
                row_keys.push(cell.key.row_key.uuid());
                columns.push(cell.key.column.as_str());
                ref_keys.push(cell.key.ref_key.get());
                bodies.push(cell.body.to_value().to_string());
            }
        }
        if !row_keys.is_empty() {
            sqlx::query(
                "/* mezzanine */ INSERT INTO mezzanine.outbox (row_key, column_name, ref_key, body)
                 SELECT * FROM UNNEST($1::uuid[], $2::text[], $3::int8[], $4::text[])",
            )
            .bind(&row_keys)
            .bind(&columns)
            .bind(&ref_keys)
            .bind(&bodies)
            .execute(&mut *tx)
            .await
            .map_err(|source| legacy::storage_error("postgres (mezzanine.outbox)", source))?;
        }
        // Last, so that every entry of the batch is below the mark: the
        // batch's cells are not written after its deletions (the legacy
        // store applies deletions last).
        let enqueued = cells
            .iter()
            .zip(results)
            .filter(|(_, result)| result.is_ok())
            .map(|(cell, _)| cell);
        crate::retired::record(&mut *tx, &self.tombstones, enqueued).await?;
        Ok(())
    }
}

/// Whether the outbox holds a change of any of `rows` (parent UUIDs) not
/// delivered yet.
pub async fn holds(pool: &sqlx::PgPool, rows: &[Uuid]) -> std::result::Result<bool, sqlx::Error> {
    sqlx::query_scalar(
        "/* mezzanine */ SELECT EXISTS (SELECT 1 FROM mezzanine.outbox WHERE row_key = ANY($1))",
    )
    .bind(rows)
    .fetch_one(pool)
    .await
}
