//! Set-based reads of many parents at once: whole chunks of parent ids for
//! the backfill and the full diff ([`LegacyStore::scan`]), and the current
//! rows behind captured changes for the capture relay
//! ([`LegacyStore::read_current`]).
//!
//! Both read the parent table once and each child table once, whatever
//! the number of parents, and convert through the same layout as every
//! other path: a row means the same thing whichever path read it. A row
//! the layout cannot convert is reported next to the others rather than
//! failing the whole read.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::ops::Range;

use config::ColumnKind;
use schemaless::{Cell, Column, Error, Result, RowKey};
use sqlx::postgres::PgRow;
use sqlx::{AssertSqlSafe, Row};
use uuid::Uuid;

use crate::layout::{ColumnLayout, Layout, Shape};
use crate::store::{read_cell, LegacyStore};

/// What part of a chunk a scan reads: some columns of the layout, and
/// the parents a predicate admits (a partial backfill or full diff).
#[derive(Clone, Debug, Default)]
pub struct ScanFilter {
    /// The layout columns to read (`None`: all).
    pub columns: Option<BTreeSet<String>>,
    /// The parents to read (`None`: all in the range).
    pub predicate: Option<crate::predicate::Predicate>,
}

impl ScanFilter {
    /// Whether cells of `column` are read.
    pub fn reads(&self, column: &str) -> bool {
        self.columns.as_ref().is_none_or(|c| c.contains(column))
    }
}

/// The cells of a range of parent ids, read in one snapshot.
#[derive(Debug, Default)]
pub struct Chunk {
    /// Every cell: the latest of each row column, every child cell; grouped
    /// by parent in id order.
    pub cells: Vec<Cell>,
    /// Parent rows in the range.
    pub parents: u64,
    /// Parent rows without a UUID yet (skipped: they have no row key).
    pub parents_without_uuid: u64,
    /// Rows whose values the layout cannot convert; the rest of the chunk
    /// is unaffected.
    pub unreadable: Vec<Unreadable>,
}

/// A row's column (a child column: one of its cells) that the layout
/// cannot convert: where, and why.
#[derive(Debug)]
pub struct Unreadable {
    pub row_key: RowKey,
    pub column: Column,
    pub error: Error,
}

impl std::fmt::Display for Unreadable {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.error.fmt(f)
    }
}

/// The rows behind captured changes, as they are now.
#[derive(Debug, Default)]
pub struct Current {
    /// The parents asked for (and the parents of the children asked for)
    /// that exist, by id.
    pub parents: HashMap<i64, CurrentParent>,
    /// The children asked for that exist and whose parent has a row key,
    /// by (column, parent id, ref key): the cell, or why it cannot be
    /// read.
    pub children: HashMap<(Column, i64, i64), Result<Cell>>,
}

/// A parent row as it is now.
#[derive(Debug)]
pub struct CurrentParent {
    /// Its row key; `None` before `legacy add-uuid` gave it one.
    pub row_key: Option<RowKey>,
    /// Per row column of the layout: its cell (`None` when the version is
    /// NULL: the row has no cell of it), or why it cannot be read.
    pub cells: Vec<(Column, Result<Option<Cell>>)>,
}

/// A parent row of [`parent_select`]: its id, row key and row column
/// cells.
type ParentRow = (i64, Option<RowKey>, Vec<(Column, Result<Option<Cell>>)>);

impl LegacyStore {
    /// The smallest and largest parent id, if there are parents.
    pub async fn id_range(&self) -> std::result::Result<Option<(i64, i64)>, crate::Error> {
        let sql = format!(
            "/* mezzanine */ SELECT min({id})::int8, max({id})::int8 FROM {table}",
            id = self.layout.id_sql(),
            table = self.layout.table_sql()
        );
        let (low, high): (Option<i64>, Option<i64>) = sqlx::query_as(AssertSqlSafe(sql))
            .fetch_one(&self.pool)
            .await
            .map_err(|e| crate::Error::postgres("reading the parent id range", e))?;
        Ok(low.zip(high))
    }

    /// Every cell of the parents whose id is in `ids`, in a few set-based
    /// queries (one for the parents, one per child column) in one
    /// repeatable-read snapshot.
    pub async fn scan(&self, ids: Range<i64>) -> Result<Chunk> {
        self.scan_filtered(ids, &ScanFilter::default()).await
    }

    /// The columns of the parent table, as PostgreSQL names them (what a
    /// predicate may read).
    pub async fn parent_columns(&self) -> std::result::Result<Vec<String>, crate::Error> {
        sqlx::query_scalar(
            "/* mezzanine */ SELECT attname::text FROM pg_attribute
             WHERE attrelid = to_regclass($1) AND attnum > 0 AND NOT attisdropped ORDER BY attnum",
        )
        .bind(self.layout.table_sql())
        .fetch_all(&self.pool)
        .await
        .map_err(|e| crate::Error::postgres("reading the parent table's columns", e))
    }

    /// Parses and checks a predicate on the parent table
    /// ([`crate::predicate`]), and has PostgreSQL plan it, so that a type
    /// error or a non-boolean expression is refused now rather than at the
    /// first chunk.
    pub async fn predicate(
        &self,
        text: &str,
    ) -> std::result::Result<crate::predicate::Predicate, crate::Error> {
        let columns = self.parent_columns().await?;
        let table = format!("{}.{}", self.layout.schema, self.layout.table);
        let predicate = crate::predicate::Predicate::parse(text, &table, &columns)
            .map_err(crate::Error::Predicate)?;
        let probe = format!(
            "/* mezzanine */ EXPLAIN SELECT 1 FROM {} p WHERE ({})",
            self.layout.table_sql(),
            predicate.sql()
        );
        sqlx::raw_sql(AssertSqlSafe(probe))
            .execute(&self.pool)
            .await
            .map_err(|e| {
                crate::Error::Predicate(format!("PostgreSQL refuses the predicate: {e}"))
            })?;
        Ok(predicate)
    }

    /// [`LegacyStore::scan`] of the columns and parents `filter` admits:
    /// the predicate is added to the parent read, children of parents it
    /// leaves out are dropped, and child tables of columns not read are
    /// not read.
    pub async fn scan_filtered(&self, ids: Range<i64>, filter: &ScanFilter) -> Result<Chunk> {
        let layout = &*self.layout;
        let mut tx = self.pool.begin().await.map_err(|e| self.storage(e))?;
        sqlx::query("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY")
            .execute(&mut *tx)
            .await
            .map_err(|e| self.storage(e))?;

        let predicate = filter
            .predicate
            .as_ref()
            .map(|p| format!(" AND ({})", p.sql()))
            .unwrap_or_default();
        let select = parent_select(
            layout,
            &format!(
                "p.{id} >= $1 AND p.{id} < $2{predicate} ORDER BY p.{id}",
                id = layout.id_sql()
            ),
        );
        let parents = sqlx::query(AssertSqlSafe(select))
            .bind(ids.start)
            .bind(ids.end)
            .fetch_all(&mut *tx)
            .await
            .map_err(|e| self.storage(e))?;

        let mut chunk = Chunk {
            parents: parents.len() as u64,
            ..Chunk::default()
        };
        // Parent id -> (row key, its cells so far).
        let mut by_id: BTreeMap<i64, (RowKey, Vec<Cell>)> = BTreeMap::new();
        for row in &parents {
            let (id, row_key, cells) = self.parent_row(row)?;
            let Some(row_key) = row_key else {
                chunk.parents_without_uuid += 1;
                continue;
            };
            let mut kept = Vec::new();
            for (column, cell) in cells {
                if !filter.reads(column.as_str()) {
                    continue;
                }
                match cell {
                    Ok(Some(cell)) => kept.push(cell),
                    Ok(None) => {}
                    Err(error) => chunk.unreadable.push(Unreadable {
                        row_key,
                        column,
                        error,
                    }),
                }
            }
            by_id.insert(id, (row_key, kept));
        }

        for (column, parent) in layout
            .children()
            .filter(|(c, _)| filter.reads(c.name.as_str()))
        {
            let sql = child_select(
                column,
                parent,
                &format!(
                    "WHERE c.{parent} >= $1 AND c.{parent} < $2 ORDER BY c.{parent}, c.{ref_key}",
                    ref_key = column.ref_key_sql()
                ),
            );
            let rows = sqlx::query(AssertSqlSafe(sql))
                .bind(ids.start)
                .bind(ids.end)
                .fetch_all(&mut *tx)
                .await
                .map_err(|e| self.storage(e))?;
            for row in &rows {
                let id: i64 = row.try_get(0).map_err(|e| self.storage(e))?;
                // A child of a parent without a UUID has no row key either.
                let Some((row_key, cells)) = by_id.get_mut(&id) else {
                    continue;
                };
                match child_cell(layout, column, row, id, *row_key) {
                    Ok(Some(cell)) => cells.push(cell),
                    Ok(None) => {}
                    Err(error) => chunk.unreadable.push(Unreadable {
                        row_key: *row_key,
                        column: column.name.clone(),
                        error,
                    }),
                }
            }
        }
        tx.commit().await.map_err(|e| self.storage(e))?;
        chunk.cells = by_id.into_values().flat_map(|(_, cells)| cells).collect();
        Ok(chunk)
    }

    /// The rows behind captured changes as they are now, read on `conn`
    /// (the capture relay's transaction, so that they are read after the
    /// changes it took from the queue committed): the parents with ids in
    /// `parents` or row keys in `row_keys`, and the child rows `children`
    /// (column, parent id, ref key); one query for the parents (those of
    /// the children included, for their row keys) and one per child
    /// column. What no longer exists is left out.
    pub async fn read_current(
        &self,
        conn: &mut sqlx::PgConnection,
        parents: &[i64],
        row_keys: &[Uuid],
        children: &[(Column, i64, i64)],
    ) -> Result<Current> {
        let layout = &*self.layout;
        let ids: Vec<i64> = parents
            .iter()
            .copied()
            .chain(children.iter().map(|(_, parent, _)| *parent))
            .collect::<BTreeSet<i64>>()
            .into_iter()
            .collect();
        let mut current = Current::default();
        if ids.is_empty() && row_keys.is_empty() {
            return Ok(current);
        }
        let select = parent_select(
            layout,
            &format!(
                "p.{} = ANY($1::int8[]) OR p.{} = ANY($2::uuid[])",
                layout.id_sql(),
                layout.uuid_sql()
            ),
        );
        let rows = sqlx::query(AssertSqlSafe(select))
            .bind(&ids)
            .bind(row_keys)
            .fetch_all(&mut *conn)
            .await
            .map_err(|e| self.storage(e))?;
        for row in &rows {
            let (id, row_key, cells) = self.parent_row(row)?;
            current.parents.insert(id, CurrentParent { row_key, cells });
        }

        let mut by_column: BTreeMap<&Column, BTreeSet<(i64, i64)>> = BTreeMap::new();
        for (column, parent, ref_key) in children {
            by_column
                .entry(column)
                .or_default()
                .insert((*parent, *ref_key));
        }
        for (name, keys) in by_column {
            let Some((_, column)) = layout.column(name.as_str()) else {
                return Err(Error::invalid(
                    "column",
                    format!(
                        "{name} is not a column of the layout (its columns are {})",
                        layout.column_names()
                    ),
                ));
            };
            let Shape::Child { parent_sql } = &column.shape else {
                return Err(Error::invalid(
                    "column",
                    format!("{name} is a row column, not a child table"),
                ));
            };
            let (wanted_parents, wanted_refs): (Vec<i64>, Vec<i64>) = keys.into_iter().unzip();
            let sql = child_select(
                column,
                parent_sql,
                &format!(
                    "JOIN unnest($1::int8[], $2::int8[]) AS k(parent, ref_key)
                     ON c.{parent_sql} = k.parent AND c.{ref_key} = k.ref_key",
                    ref_key = column.ref_key_sql()
                ),
            );
            let rows = sqlx::query(AssertSqlSafe(sql))
                .bind(&wanted_parents)
                .bind(&wanted_refs)
                .fetch_all(&mut *conn)
                .await
                .map_err(|e| self.storage(e))?;
            for row in &rows {
                let parent: i64 = row.try_get(0).map_err(|e| self.storage(e))?;
                let ref_key: i64 = row.try_get(1).map_err(|e| self.storage(e))?;
                let Some(row_key) = current.parents.get(&parent).and_then(|p| p.row_key) else {
                    continue;
                };
                let cell = child_cell(layout, column, row, parent, row_key).and_then(|cell| {
                    cell.ok_or_else(|| Error::Unreadable {
                        what: format!("{} of {} id {parent}", column.table, layout.table),
                        reason: "its ref key is NULL".into(),
                    })
                });
                current
                    .children
                    .insert((column.name.clone(), parent, ref_key), cell);
            }
        }
        Ok(current)
    }

    /// One row of [`parent_select`].
    fn parent_row(&self, row: &PgRow) -> Result<ParentRow> {
        let layout = &*self.layout;
        let id: i64 = row.try_get(0).map_err(|e| self.storage(e))?;
        let uuid: Option<Uuid> = row.try_get(1).map_err(|e| self.storage(e))?;
        let Some(uuid) = uuid else {
            return Ok((id, None, Vec::new()));
        };
        let row_key = RowKey::from(uuid);
        let mut cells = Vec::new();
        let mut at = 2;
        for column in row_columns(layout) {
            let what = || {
                format!(
                    "{} id {id} ({row_key}), column {}",
                    layout.table, column.name
                )
            };
            cells.push((
                column.name.clone(),
                read_cell(column, row, at, row_key, &what),
            ));
            at += 1 + column.fields.len();
        }
        Ok((id, Some(row_key), cells))
    }
}

fn row_columns(layout: &Layout) -> impl Iterator<Item = &ColumnLayout> {
    layout
        .columns
        .iter()
        .filter(|c| c.kind() == ColumnKind::Row)
}

/// `SELECT` of the parents matching `filter` (on alias `p`): id, row key,
/// then the ref key and fields of each row column.
fn parent_select(layout: &Layout, filter: &str) -> String {
    let mut select = format!(
        "/* mezzanine */ SELECT p.{id}::int8, p.{uuid}",
        id = layout.id_sql(),
        uuid = layout.uuid_sql()
    );
    for column in row_columns(layout) {
        select.push_str(&format!(
            ", p.{}::int8, {}",
            column.ref_key_sql(),
            column.read_exprs("p")
        ));
    }
    select.push_str(&format!(
        " FROM {table} p WHERE {filter}",
        table = layout.table_sql()
    ));
    select
}

/// `SELECT` of a child column's rows (alias `c`), `tail` being a join
/// and/or a `WHERE`: parent id, ref key, fields. `parent` is the child's
/// key to the parent id.
fn child_select(column: &ColumnLayout, parent: &str, tail: &str) -> String {
    format!(
        "/* mezzanine */ SELECT c.{parent}::int8, c.{ref_key}::int8, {exprs} FROM {table} c {tail}",
        ref_key = column.ref_key_sql(),
        exprs = column.read_exprs("c"),
        table = column.table_sql(),
    )
}

/// The cell of one row of [`child_select`].
fn child_cell(
    layout: &Layout,
    column: &ColumnLayout,
    row: &PgRow,
    parent: i64,
    row_key: RowKey,
) -> Result<Option<Cell>> {
    let what = || {
        format!(
            "{} of {} id {parent} ({row_key}), column {}",
            column.table, layout.table, column.name
        )
    };
    read_cell(column, row, 1, row_key, &what)
}
