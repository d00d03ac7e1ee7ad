//! A captured change: which parent changed in which column, as a queue
//! row records it or as decoded from the logical slot. Not the values:
//! delivery reads the rows as they are now ([`super::deliver`]).

use uuid::Uuid;

/// One captured change: a queue row, or a change decoded from the
/// logical slot.
#[derive(Clone, Debug)]
pub(crate) struct Change {
    pub(crate) column: Option<String>,
    pub(crate) parent_id: Option<i64>,
    pub(crate) row_key: Option<Uuid>,
    pub(crate) ref_key: Option<i64>,
    pub(crate) op: String,
    /// When it was captured (committed, for the slot), seconds since the
    /// epoch.
    pub(crate) captured_at: f64,
}

impl Change {
    /// A row written: a row column of a parent, or a child row.
    pub(crate) fn written(
        column: &str,
        parent_id: i64,
        row_key: Option<Uuid>,
        ref_key: Option<i64>,
    ) -> Change {
        Change {
            column: Some(column.to_string()),
            parent_id: Some(parent_id),
            row_key,
            ref_key,
            op: "w".into(),
            captured_at: 0.0,
        }
    }

    /// A parent row (its row key) deleted.
    pub(crate) fn deleted_parent(parent_id: Option<i64>, row_key: Uuid) -> Change {
        Change {
            column: None,
            parent_id,
            row_key: Some(row_key),
            ref_key: None,
            op: "d".into(),
            captured_at: 0.0,
        }
    }

    /// A child row deleted (or moved away from this address).
    pub(crate) fn deleted_child(column: &str, parent_id: i64, ref_key: i64) -> Change {
        Change {
            column: Some(column.to_string()),
            parent_id: Some(parent_id),
            row_key: None,
            ref_key: Some(ref_key),
            op: "d".into(),
            captured_at: 0.0,
        }
    }

    /// A table truncated: the parent table (`None`) or a child column's.
    pub(crate) fn truncated(column: Option<&str>) -> Change {
        Change {
            column: column.map(str::to_string),
            parent_id: None,
            row_key: None,
            ref_key: None,
            op: "t".into(),
            captured_at: 0.0,
        }
    }

    /// What a caller outside the crate may see of it.
    pub(crate) fn pending(self) -> super::slot::PendingChange {
        super::slot::PendingChange {
            column: self.column,
            parent_id: self.parent_id,
            row_key: self.row_key,
            ref_key: self.ref_key,
            op: self.op,
        }
    }

    /// The same, captured at `at` (seconds since the epoch).
    pub(crate) fn at(mut self, at: f64) -> Change {
        self.captured_at = at;
        self
    }
}
