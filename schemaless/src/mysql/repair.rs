//! The operator's repair of one (row, column), for the verifier.
//!
//! The repair is the one place where cells are deleted or replaced: the
//! cell API never does it, and nothing but `mezzanine verify repair`
//! (after a comparison with the source of truth) should. Replacements are
//! inserted as new change-log entries, so triggers and the reverse mirror
//! see them; each index's pointer for the row is moved below the replaced
//! ref key, so its maintainer rewrites the row's entry from the new cell.

use super::index::{pointer_table, versions};
use super::sql::{self, push_column, push_hex};
use super::store::{transaction, MySqlStore};
use crate::cell::{check_batch, check_cells_of, now_micros, Cell, Column, RowKey};
use crate::codec;
use crate::error::{Error, Result};

impl MySqlStore {
    /// Makes the cells of (`row_key`, `column`) whose ref key lies in
    /// `from_ref_key..=to_ref_key` exactly `cells` (all of that row and
    /// column), in one transaction on the shard's master: the others are
    /// deleted, these inserted anew. Cells outside the range are kept:
    /// older versions below it, and above it any cell written after the
    /// caller read what it compared (a newer version relayed meanwhile
    /// must not be deleted by a repair that never saw it).
    pub async fn replace_cells(
        &self,
        row_key: &RowKey,
        column: &Column,
        from_ref_key: i64,
        to_ref_key: i64,
        cells: Vec<Cell>,
    ) -> Result<()> {
        check_batch(&cells, self.limits())?;
        check_cells_of(row_key, column, &cells)?;
        if let Some(out) = cells
            .iter()
            .find(|c| !(from_ref_key..=to_ref_key).contains(&c.key.ref_key.get()))
        {
            return Err(Error::invalid(
                "cells",
                format!(
                    "{} is outside the replaced ref keys ({from_ref_key} to {to_ref_key})",
                    out.key
                ),
            ));
        }
        let topology = self.topology();
        let shard = crate::routing::shard_of(row_key, topology.shard_count);
        let database = topology.database(shard);
        let mut encoded = Vec::with_capacity(cells.len());
        for cell in &cells {
            let body = codec::encode(&cell.body, self.inflated_cap())
                .map_err(|e| Error::invalid("body", format!("cannot be stored: {e}")))?;
            encoded.push(body);
        }
        let mut key = String::new();
        push_hex(&mut key, row_key.as_bytes());
        let mut delete =
            format!("DELETE FROM `{database}`.`entity` WHERE row_key = {key} AND column_name = ");
        push_column(&mut delete, column);
        delete.push_str(&format!(
            " AND ref_key >= {from_ref_key} AND ref_key <= {to_ref_key}"
        ));
        let mut statements = vec![delete];
        let master = &topology.cluster(shard)?.master();
        if !cells.is_empty() {
            let created_at = now_micros();
            statements.extend(sql::insert_cells(
                &database,
                cells
                    .iter()
                    .zip(&encoded)
                    .map(|(cell, body)| sql::InsertRow {
                        key: &cell.key,
                        body,
                        created_at,
                    }),
                master.packet_budget(),
            ));
        }
        for spec in self.indexes().iter().filter(|s| s.column == *column) {
            for (version, _) in versions(self, &spec.name).await? {
                statements.push(format!(
                    "UPDATE `{database}`.`{}` SET ref_key = {} WHERE row_key = {key} AND ref_key >= {from_ref_key}",
                    pointer_table(&spec.name, version),
                    from_ref_key - 1
                ));
            }
        }
        transaction(master, &statements).await?;
        self.changes_signal(shard);
        Ok(())
    }
}
