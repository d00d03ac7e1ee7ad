//! Asking PostgreSQL what it would refuse of cells, without writing them
//! ([`crate::layout::Checks`]): what a facade in mode `primary` does
//! before it writes to Schemaless, so that a cell the reverse mirror could
//! never apply is refused up front instead of acknowledged and parked.

use std::collections::BTreeMap;
use std::time::Duration;

use schemaless::{Cell, CellKey, CellStore, Error, Failure, ReadFrom, RefKey, Result, RowKey};
use sqlx::postgres::PgRow;
use sqlx::{AssertSqlSafe, Row};
use uuid::Uuid;

use super::write::{Prepared, Write};
use super::LegacyStore;
use crate::layout::{ColumnLayout, Refusal, Shape, Unique};

/// What asking found, when PostgreSQL refuses none of the cells.
#[derive(Debug, PartialEq, Eq)]
pub enum Asked {
    /// PostgreSQL would take every cell: it said so, or it has nothing to
    /// add to the layout's own checks (`asked` counts the cells it was
    /// asked about).
    Taken {
        /// Cells PostgreSQL judged.
        asked: usize,
    },
    /// PostgreSQL could not be asked (unreachable, failing): the reason.
    /// The cells' own checks passed; the rest is the reverse mirror's to
    /// find.
    Unasked(String),
}

impl LegacyStore {
    /// Asks PostgreSQL whether the legacy tables would take `cells`
    /// (canonical, as [`LegacyStore::canonical_cell`] gives them), without
    /// writing: a `NOT NULL` column given null, a domain's constraint, a
    /// malformed `xml`, a `CHECK` constraint of the table, a generated
    /// column given another value than PostgreSQL computes, a foreign key
    /// to a row a table outside the layout does not hold, a unique index
    /// another row holds the values for, an exclusion constraint another
    /// row's values refuse the cell beside. `Err` is the first cell refused,
    /// as a write of it would be refused (`in_batch` says which).
    /// Tombstones are not asked about.
    ///
    /// A unique index is asked of PostgreSQL's rows, which lag behind
    /// `current` (the store the cells go to first) by what the reverse
    /// mirror has not applied yet: a row PostgreSQL finds holding the
    /// values counts only if `current` says it still does (its latest
    /// cell is the one PostgreSQL has, or holds the same values), so a
    /// value another row gave up moments ago is not refused. A holder
    /// `current` has and PostgreSQL not yet is not seen: the reverse
    /// mirror parks what that race lets through.
    ///
    /// The `NOT NULL` columns are checked here, without PostgreSQL; the
    /// rest is asked only `within` the time given (`None`: not at all),
    /// after which the answer is [`Asked::Unasked`].
    pub async fn ask(
        &self,
        cells: &[Cell],
        within: Option<Duration>,
        current: &dyn CellStore,
    ) -> Result<Asked> {
        let mut columns: BTreeMap<usize, Vec<(usize, Prepared)>> = BTreeMap::new();
        for (i, cell) in cells.iter().enumerate() {
            let prepared = self.prepare(cell).map_err(|e| e.in_batch(i))?;
            let Write::Cell { column, params } = &prepared.what else {
                continue;
            };
            let layout = &self.layout.columns[*column];
            let null = layout
                .fields
                .iter()
                .zip(params)
                .find(|(f, param)| f.not_null && !f.generated && param.is_none());
            if let Some((field, _)) = null {
                return Err(Error::refused(
                    &format!("body.{}", field.json),
                    "23502",
                    format!(
                        "PostgreSQL refuses the value for {}: null value in column \"{}\" of \
                         relation \"{}\" violates not-null constraint",
                        layout.table, field.sql, layout.table
                    ),
                )
                .in_batch(i));
            }
            if layout.checks.is_some() {
                let column = *column;
                columns.entry(column).or_default().push((i, prepared));
            }
        }
        if columns.is_empty() {
            return Ok(Asked::Taken { asked: 0 });
        }
        let Some(within) = within else {
            return Ok(Asked::Unasked("not asked".into()));
        };
        let asking = async {
            let mut asked = 0;
            for (column, cells) in &columns {
                self.ask_column(*column, cells, current).await?;
                asked += cells.len();
            }
            Ok(asked)
        };
        match tokio::time::timeout(within, asking).await {
            Ok(Ok(asked)) => Ok(Asked::Taken { asked }),
            Ok(Err(Asking::Refused(e))) => Err(e),
            Ok(Err(Asking::Failed(reason))) => Ok(Asked::Unasked(reason)),
            Err(_) => Ok(Asked::Unasked(format!(
                "{} gave no answer within {within:?}",
                self.label
            ))),
        }
    }

    /// Asks about one layout column's cells in one statement. A cast
    /// PostgreSQL refuses fails the whole statement without saying which
    /// cell's: then each is asked alone, to name it.
    async fn ask_column(
        &self,
        column: usize,
        cells: &[(usize, Prepared)],
        current: &dyn CellStore,
    ) -> std::result::Result<(), Asking> {
        let layout = &self.layout.columns[column];
        let checks = layout.checks.as_ref().expect("asked only with checks");
        let rows = match self.run_checks(column, cells).await {
            Ok(rows) => rows,
            Err(e) if refused(&e) => {
                if cells.len() > 1 {
                    for cell in cells {
                        Box::pin(self.ask_column(column, std::slice::from_ref(cell), current))
                            .await?;
                    }
                }
                let i = cells[0].0;
                return Err(Asking::Refused(self.write_error(layout, e).in_batch(i)));
            }
            Err(e) => return Err(Asking::Failed(format!("{}: {e}", self.label))),
        };
        if rows.len() != cells.len() {
            return Err(Asking::Failed(format!(
                "the checks of {} answered {} rows for {} cells",
                layout.table,
                rows.len(),
                cells.len()
            )));
        }
        for row in &rows {
            let ordinal: i64 = get(row, 0)?;
            let Some((i, prepared)) = usize::try_from(ordinal - 1).ok().and_then(|n| cells.get(n))
            else {
                return Err(Asking::Failed(format!("no cell {ordinal} was asked about")));
            };
            let refusal = |refusal: &Refusal, why: &str| {
                Asking::Refused(
                    Error::refused(
                        "body",
                        refusal.sqlstate,
                        format!(
                            "PostgreSQL refuses the value for {}: {}{why}",
                            layout.table, refusal.says
                        ),
                    )
                    .in_batch(*i),
                )
            };
            for (j, says) in checks.refusals.iter().enumerate() {
                if get::<Option<bool>>(row, 1 + j)? == Some(true) {
                    return Err(refusal(says, ""));
                }
            }
            // Each unique index's (row key, ref key) of a holder in the
            // table, and whether an earlier cell of the batch holds it.
            for (j, unique) in checks.unique.iter().enumerate() {
                let at = 1 + checks.refusals.len() + 3 * j;
                if get::<Option<bool>>(row, at + 2)? == Some(true) {
                    return Err(refusal(
                        &unique.refusal,
                        ": an earlier cell of the batch holds it",
                    ));
                }
                let holder = get::<Option<Uuid>>(row, at)?.zip(get::<Option<i64>>(row, at + 1)?);
                let Some((holder, holder_ref)) = holder else {
                    continue;
                };
                if self
                    .still_holds(current, layout, unique, prepared, holder, holder_ref)
                    .await?
                {
                    return Err(refusal(
                        &unique.refusal,
                        &format!(": row {holder} holds it"),
                    ));
                }
            }
            // A generated column PostgreSQL computes otherwise, or any
            // value it would keep otherwise.
            self.check_read_back(layout, row, checks.read_back_at(), prepared)
                .map_err(|e| Asking::Refused(e.in_batch(*i)))?;
        }
        Ok(())
    }

    /// Whether `holder`, which PostgreSQL found holding `prepared`'s
    /// values for `unique` at ref key `holder_ref`, still holds them in
    /// `current`. A row: its latest cell of the column is the one
    /// PostgreSQL has (or an older one), or a newer one with the same
    /// values. A child: its cell is there (a cell's address is never
    /// given another body). Deleted in `current` (a tombstone is latest),
    /// it holds nothing.
    async fn still_holds(
        &self,
        current: &dyn CellStore,
        layout: &ColumnLayout,
        unique: &Unique,
        prepared: &Prepared,
        holder: Uuid,
        holder_ref: i64,
    ) -> std::result::Result<bool, Asking> {
        let row_key = RowKey::from(holder);
        let failed = |e: Error| Asking::Failed(format!("reading row {holder} of Schemaless: {e}"));
        if let Shape::Child { .. } = layout.shape {
            let ref_key = RefKey::new(holder_ref).map_err(failed)?;
            let key = CellKey {
                row_key,
                column: layout.name.clone(),
                ref_key,
            };
            let cell = current.get_cell(&key, ReadFrom::Master).await;
            return Ok(cell.map_err(failed)?.is_some());
        }
        let latest = current
            .get_cell_latest(&row_key, &layout.name, ReadFrom::Master)
            .await
            .map_err(failed)?;
        let Some(latest) = latest else {
            return Ok(false);
        };
        if latest.cell.key.ref_key.get() <= holder_ref {
            return Ok(true);
        }
        let (Some(fields), Write::Cell { params, .. }) = (&unique.fields, &prepared.what) else {
            return Ok(false);
        };
        let theirs = match self.prepare(&latest.cell) {
            Ok(Prepared {
                what: Write::Cell { params, .. },
                ..
            }) => params,
            // A latest cell the layout cannot read holds nothing asked.
            _ => return Ok(false),
        };
        Ok(fields.iter().all(|&f| theirs.get(f) == params.get(f)))
    }

    async fn run_checks(
        &self,
        column: usize,
        cells: &[(usize, Prepared)],
    ) -> std::result::Result<Vec<PgRow>, sqlx::Error> {
        let layout = &self.layout.columns[column];
        let checks = layout.checks.as_ref().expect("asked only with checks");
        let row_keys: Vec<Uuid> = cells.iter().map(|(_, p)| p.row_key).collect();
        let ref_keys: Vec<i64> = cells.iter().map(|(_, p)| p.ref_key).collect();
        let mut query = sqlx::query(AssertSqlSafe(checks.statement.clone()))
            .bind(row_keys)
            .bind(ref_keys);
        for f in 0..layout.fields.len() {
            let values: Vec<Option<String>> = cells
                .iter()
                .map(|(_, p)| match &p.what {
                    Write::Cell { params, .. } => params[f].clone(),
                    Write::Delete(_) => None,
                })
                .collect();
            query = query.bind(values);
        }
        query.fetch_all(&self.asking).await
    }
}

/// Why asking stopped.
enum Asking {
    /// PostgreSQL refuses a cell: the error its write would get.
    Refused(Error),
    /// PostgreSQL could not answer.
    Failed(String),
}

/// Output `at` of a row of the check statement.
fn get<'r, T>(row: &'r PgRow, at: usize) -> std::result::Result<T, Asking>
where
    T: sqlx::Decode<'r, sqlx::Postgres> + sqlx::Type<sqlx::Postgres>,
{
    row.try_get(at).map_err(|e| Asking::Failed(e.to_string()))
}

/// Whether PostgreSQL refused a value (as opposed to failing).
fn refused(e: &sqlx::Error) -> bool {
    matches!(
        crate::classify(e),
        Failure::BadValue | Failure::ConstraintViolation
    )
}
