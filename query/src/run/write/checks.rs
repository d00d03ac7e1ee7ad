//! What a write's new row must pass before its cells are put: each
//! `NOT NULL` column holds a value (SQL NULL refused as PostgreSQL
//! refuses it, where the layout's `null` would be JSON's), and an
//! UPDATE's version is past the row's latest.

use super::*;

impl<S: CellStore> Writer<'_, S> {
    /// An UPDATE's cell must be a version past the row's latest (the one
    /// the UPDATE read), or that very cell again. At the latest's ref key
    /// with other values it could never be written (a cell is never
    /// changed; trying again would fail the same way); below it, it would
    /// be written and then hidden by the latest, the UPDATE counted and
    /// its values lost. PostgreSQL would have taken either: refused as
    /// the cell API cannot express it. (A version written by another
    /// writer after the read is a concurrent update: `40001`, see
    /// [`Writer::outcome`].)
    pub(super) fn past_latest(
        &self,
        cell: &Cell,
        latest: Option<&StoredCell>,
        ref_column: &str,
    ) -> Result<(), Refused> {
        let Some(latest) = latest else {
            return Ok(());
        };
        let (new, old) = (cell.key.ref_key.get(), latest.cell.key.ref_key.get());
        if new > old || (new == old && cell.body == latest.cell.body) {
            return Ok(());
        }
        Err(Refused::new(
            "0A000",
            format!(
                "sets {ref_column} to {new}, {} the row's latest version {old} of Schemaless \
                 column {}: a cell is never changed, so the values would be lost; write a new \
                 version ({ref_column} = {ref_column} + 1)",
                if new == old { "which is" } else { "below" },
                cell.key.column
            ),
        )
        .of_row(cell.key.row_key))
    }

    /// A new row's values against the columns' `NOT NULL`; a `null` of
    /// a `json`/`jsonb` column that is `NOT NULL` is JSON's (SQL NULL was
    /// refused as it was evaluated, [`Writer::rendered`]). An UPDATE's
    /// integer id is read for its RETURNING, not written: a row without
    /// one is refused as such ([`Writer::ids_known`]).
    pub(super) fn check_not_null(&self, new: &[Value]) -> Result<(), Refused> {
        let read_only = |c: &Col| self.write.reads_ids && matches!(c.kind, Kind::Id);
        match self
            .cols
            .iter()
            .zip(new)
            .find(|(c, v)| c.attr.not_null && v.is_null() && !c.null_is_json() && !read_only(c))
        {
            Some((c, _)) => Err(self.null_refused(c)),
            None => Ok(()),
        }
    }

    /// PostgreSQL's refusal of SQL NULL in column `c`.
    pub(super) fn null_refused(&self, c: &Col) -> Refused {
        Refused::new(
            "23502",
            format!(
                "null value in column \"{}\" of relation \"{}\" violates not-null constraint",
                c.sql,
                self.table_name()
            ),
        )
    }

    /// Column `i`'s value from the text PostgreSQL evaluated (`None`:
    /// SQL NULL), as the layout renders it. SQL NULL where a `null` in
    /// the cell would be JSON's is refused here, as the column's
    /// `NOT NULL` refuses it: once rendered, the two are one `null`.
    pub(super) fn rendered(&self, i: usize, text: Option<String>) -> Result<Value, Refused> {
        let c = &self.cols[i];
        if text.is_none() && c.null_is_json() {
            return Err(self.null_refused(c));
        }
        c.render(text)
    }
}
