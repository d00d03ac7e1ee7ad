//! From a change to its cells: a row column's current cell, each changed
//! child row's cell, or a tombstone for what was deleted.

use super::*;

impl CaptureDelivery {
    /// What `entry` becomes, adding its cell (if any) to `cells`.
    pub(super) fn plan(
        &self,
        entry: &Change,
        current: &Current,
        cells: &mut BTreeMap<CellKey, Cell>,
    ) -> Plan {
        let layout = self.legacy.layout();
        let mut add = |cell: Cell| {
            let key = cell.key.clone();
            cells.entry(key.clone()).or_insert(cell);
            Plan::Cell(key)
        };
        match (entry.op.as_str(), entry.column.as_deref()) {
            ("t", column) => Plan::Park(
                "truncate",
                format!(
                    "the table of {} was truncated: which rows it held is no longer known, so Schemaless keeps their cells; delete them there by hand, or tombstone them",
                    column.map_or_else(|| format!("the parent table {}", layout.table), |c| format!("column {c}"))
                ),
                None,
            ),
            ("d", None) => {
                let Some(uuid) = entry.row_key else {
                    return Plan::Skip;
                };
                let back = current
                    .parents
                    .values()
                    .any(|p| p.row_key.is_some_and(|r| r.uuid() == uuid));
                if back {
                    return Plan::Skip;
                }
                add(tombstone::row_tombstone(
                    RowKey::from(uuid),
                    &self.tombstones,
                ))
            }
            (op, Some(name)) => {
                let Some((_, column)) = layout.column(name) else {
                    // The layout changed since: the column is not mapped.
                    return Plan::Skip;
                };
                let Some(parent_id) = entry.parent_id else {
                    return Plan::Skip;
                };
                let parent = current.parents.get(&parent_id);
                match (op, column.kind()) {
                    ("w", ColumnKind::Row) => {
                        let Some(parent) = parent else {
                            return Plan::Skip;
                        };
                        match parent.cells.iter().find(|(c, _)| c.as_str() == name) {
                            Some((_, Ok(Some(cell)))) => add(cell.clone()),
                            Some((_, Err(e))) => Plan::Park("unreadable", e.to_string(), None),
                            _ => Plan::Skip,
                        }
                    }
                    ("w", ColumnKind::Child) => {
                        let Some(ref_key) = entry.ref_key else {
                            return Plan::Skip;
                        };
                        match current
                            .children
                            .get(&(column.name.clone(), parent_id, ref_key))
                        {
                            Some(Ok(cell)) => add(cell.clone()),
                            Some(Err(e)) => Plan::Park("unreadable", e.to_string(), None),
                            None => Plan::Skip,
                        }
                    }
                    ("d", ColumnKind::Child) => {
                        let Some(ref_key) = entry.ref_key else {
                            return Plan::Skip;
                        };
                        if current
                            .children
                            .contains_key(&(column.name.clone(), parent_id, ref_key))
                        {
                            return Plan::Skip;
                        }
                        // A child of a deleted parent: the parent's own
                        // tombstone hides the whole row.
                        let Some(row_key) = parent.and_then(|p| p.row_key) else {
                            return Plan::Skip;
                        };
                        add(tombstone::cell_tombstone(
                            row_key,
                            &self.tombstones,
                            &column.name,
                            ref_key,
                        ))
                    }
                    _ => Plan::Skip,
                }
            }
            _ => Plan::Skip,
        }
    }

    pub(super) fn conflict_kind(&self, key: &CellKey) -> &'static str {
        match self.legacy.layout().column(key.column.as_str()) {
            Some((_, c)) if c.kind() == ColumnKind::Row => "no_new_version",
            Some(_) => "edited_in_place",
            None => "conflict",
        }
    }
}

/// What an entry becomes.
pub(super) enum Plan {
    /// A cell to write (its address in the batch's cells).
    Cell(CellKey),
    /// Nothing to write.
    Skip,
    /// Set aside: kind, reason, the legacy body if there is one.
    Park(&'static str, String, Option<Body>),
}
