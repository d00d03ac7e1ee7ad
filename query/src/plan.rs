//! A translated statement: the cell API calls it becomes, kept as data so
//! that `query run` can execute them and the audit can print them.

use schemaless::FilterOp;
use sqlparser::ast::{Expr, SelectItem};

use crate::analysis::Class;
use crate::expr::{op_text, value_text};
use crate::model::Table;

/// Which rows a row read names.
#[derive(Clone, Debug)]
pub enum Keys {
    /// `uuid = v`.
    One(Expr),
    /// `uuid IN (v, ...)`.
    List(Vec<Expr>),
    /// `uuid = ANY(array)`.
    Array(Expr),
}

impl Keys {
    /// The rows as the calls name them (`row = $1`).
    pub fn text(&self) -> String {
        match self {
            Keys::One(v) => format!("row = {}", value_text(v)),
            Keys::List(vs) => format!(
                "rows in ({})",
                vs.iter().map(value_text).collect::<Vec<_>>().join(", ")
            ),
            Keys::Array(v) => format!("rows in {}", value_text(v)),
        }
    }
}

/// Where one output column comes from, as the layout maps it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Output {
    /// The row key.
    RowKey,
    /// The ref key of a cell of layout column `column`.
    RefKey { column: String },
    /// Field `field` of a cell of layout column `column`.
    Field { column: String, field: String },
    /// A value the statement computes without reading a column.
    Value(String),
}

/// One column of the result: its name and where it comes from.
#[derive(Clone, Debug)]
pub struct Projected {
    pub name: String,
    pub from: Output,
    /// The SQL expression it is selected by (`t.fare`, `"trips"."uuid"`).
    pub expr: String,
}

/// A condition the app checks on the cells it read.
#[derive(Clone, Debug)]
pub struct AppStep(pub String);

/// A read answered by row keys.
#[derive(Clone, Debug)]
pub struct RowRead {
    pub keys: Keys,
    /// `row` columns read at their latest cell.
    pub latest: Vec<String>,
    /// `child` columns read whole (every ref key).
    pub children: Vec<String>,
    /// Conditions, sorting and limits the app applies to what it read.
    pub steps: Vec<AppStep>,
    /// What the app filters what it read by (every condition besides the
    /// key, ANDed), its columns as placeholders
    /// ([`crate::expr::fill_columns`]) for `filter_columns`; `None` when
    /// it keeps every row it read.
    pub filter: Option<Expr>,
    /// The columns `filter` reads, in placeholder order.
    pub filter_columns: Vec<Projected>,
    /// A condition of a LEFT JOIN's `ON` besides the parent key: it picks
    /// the child rows joined, not the result's rows, so no filter of the
    /// joined rows is it.
    pub outer_condition: Option<String>,
    pub outputs: Vec<Projected>,
    /// Of `children`, those LEFT JOINed (a parent without such children
    /// is still a row).
    pub left: Vec<String>,
    /// ORDER BY, as columns with their direction (descending when true).
    pub order: Vec<(Projected, bool)>,
    pub limit: Option<Expr>,
    pub offset: Option<Expr>,
}

/// One filter of an index query.
#[derive(Clone, Debug)]
pub struct IndexFilter {
    pub field: String,
    pub op: FilterOp,
    /// One value, or the candidates of `IN`.
    pub values: Vec<Expr>,
    /// `= ANY(array)`: `values` holds the one array.
    pub array: bool,
}

/// A read answered by an index query.
#[derive(Clone, Debug)]
pub struct IndexRead {
    pub index: String,
    pub shard_field: String,
    pub shard_value: Expr,
    pub filters: Vec<IndexFilter>,
    pub order_by: Option<String>,
    pub descending: bool,
    /// `None`: no LIMIT, so the index's largest page.
    pub limit: Option<Expr>,
    /// `row` columns read per entry because the index does not hold what
    /// the statement selects.
    pub latest: Vec<String>,
    /// `child` columns read per entry.
    pub children: Vec<String>,
    pub outputs: Vec<Projected>,
    /// Of `children`, those LEFT JOINed.
    pub left: Vec<String>,
    /// ORDER BY, as columns with their direction.
    pub order: Vec<(Projected, bool)>,
}

/// One `put_cell` of a write.
#[derive(Clone, Debug)]
pub struct Put {
    /// The row or rows, as the calls name them (`row = $1`).
    pub row: String,
    pub column: String,
    /// The ref key, as an expression of the statement's values (or of the
    /// latest cell, for `version + 1`).
    pub ref_key: String,
    /// The body's fields and their values.
    pub fields: Vec<(String, String)>,
    /// The latest cell is read first.
    pub read_latest: bool,
    /// The body is the latest cell's, with `fields` set (an update);
    /// otherwise `fields` are the whole body.
    pub merge: bool,
    /// Conditions on the latest cell checked before the put.
    pub checks: Vec<String>,
}

/// A write: the calls it becomes, as the audit shows them, and the rows
/// it writes, as `query::run::write` runs them.
#[derive(Clone, Debug)]
pub struct Write {
    pub puts: Vec<Put>,
    /// The table written: the parent, or a child column's table.
    pub table: Table,
    /// The name the statement's expressions give that table: its alias,
    /// or its own (last) name.
    pub alias: String,
    pub rows: Rows,
    /// RETURNING's items (they name only what the cells hold, or
    /// values, or a parent INSERT's integer id).
    pub returning: Vec<SelectItem>,
    /// A parent INSERT gives the integer id or RETURNING names it: each
    /// row inserted gets one (given, or drawn from the column's default),
    /// reserved for the row in `mezzanine.row_ids` before its cells are
    /// put.
    pub reserves_ids: bool,
    /// A parent UPDATE or DELETE whose RETURNING names the integer id:
    /// each row's is read before its cells are put (the legacy table's,
    /// or the row's reservation in `mezzanine.row_ids`).
    pub reads_ids: bool,
    /// The ref key columns an UPDATE's SET (or an upsert's DO UPDATE)
    /// raises by one only because it changes their fields and leaves
    /// them ([`crate::Model::bump_version`]): a row whose fields of that
    /// column come out unchanged keeps its version, and gets no cell, as
    /// capture's trigger leaves an unchanged row.
    pub bumped: Vec<String>,
}

/// The rows a write names and what it sets in them. Values are keyed by
/// SQL column name (unquoted, as the layout names it).
#[derive(Clone, Debug)]
pub enum Rows {
    /// INSERT: each row's key (a child's parent's UUID) and its values.
    Insert {
        rows: Vec<Inserted>,
        conflict: OnConflict,
    },
    /// UPDATE by row key: what SET assigns (expressions of the latest
    /// row), and the WHERE's other conditions on the latest row.
    Update {
        keys: Box<Keys>,
        sets: Vec<(String, Expr)>,
        conditions: Vec<Expr>,
    },
    /// DELETE by row key: the WHERE's other conditions on the latest row.
    /// Each row there (and matching) gets a tombstone.
    Delete {
        keys: Box<Keys>,
        conditions: Vec<Expr>,
    },
}

/// One row an INSERT gives.
#[derive(Clone, Debug)]
pub struct Inserted {
    /// The row key (a child's: its parent's); `None` for a parent row
    /// whose UUID column is not given: its default, evaluated.
    pub key: Option<Expr>,
    /// The columns given, the parent's integer id excluded.
    pub values: Vec<(String, Expr)>,
    /// A child row's parent named by its integer id: the id, whose UUID
    /// `key` asks of PostgreSQL (no parent has it: a foreign key error).
    pub parent_id: Option<Expr>,
    /// A child row an `INSERT ... SELECT ... FROM parent WHERE uuid = v`
    /// gives: there is none when no parent row has that key, as the
    /// SELECT then finds none (`INSERT 0 0`, not a foreign key error).
    pub of_parent_found: bool,
}

/// What an INSERT does when the row exists.
#[derive(Clone, Debug)]
pub enum OnConflict {
    /// Fails, as a unique key would.
    Fail,
    /// `DO NOTHING`: the row is left as it is. `any`: no conflict target,
    /// so a row that would duplicate a value of any unique index (or that
    /// an exclusion constraint refuses) is skipped too, as PostgreSQL
    /// skips it (not only one whose key is taken).
    Nothing { any: bool },
    /// `DO UPDATE SET ... [WHERE ...]`: the assignments, on the latest
    /// row and `EXCLUDED`, where the condition holds there (a row where
    /// it does not is left as it is, and neither counted nor returned).
    Update {
        sets: Vec<(String, Expr)>,
        condition: Option<Box<Expr>>,
    },
}

/// What a statement becomes.
#[derive(Clone, Debug)]
pub enum Plan {
    Rows(Box<RowRead>),
    Index(Box<IndexRead>),
    Write(Box<Write>),
}

impl Plan {
    pub fn class(&self) -> Class {
        match self {
            Plan::Rows(_) => Class::Row,
            Plan::Index(_) => Class::Index,
            Plan::Write(_) => Class::Write,
        }
    }

    /// The calls, one per line as the audit prints them.
    pub fn calls(&self) -> Vec<String> {
        match self {
            Plan::Rows(read) => {
                let keys = read.keys.text();
                let mut calls: Vec<String> = read
                    .latest
                    .iter()
                    .map(|c| format!("get_cell_latest({keys}, {c})"))
                    .collect();
                calls.extend(
                    read.children
                        .iter()
                        .map(|c| format!("get_column_cells({keys}, {c})")),
                );
                calls.extend(read.steps.iter().map(|s| s.0.clone()));
                calls
            }
            Plan::Index(read) => {
                let mut args = vec![
                    read.index.clone(),
                    format!("{} = {}", read.shard_field, value_text(&read.shard_value)),
                ];
                for f in &read.filters {
                    args.push(match (f.op, f.array) {
                        (FilterOp::In, true) => {
                            format!("{} in {}", f.field, value_text(&f.values[0]))
                        }
                        (FilterOp::In, false) => format!(
                            "{} in ({})",
                            f.field,
                            f.values
                                .iter()
                                .map(value_text)
                                .collect::<Vec<_>>()
                                .join(", ")
                        ),
                        (op, _) => {
                            format!("{} {} {}", f.field, op_text(op), value_text(&f.values[0]))
                        }
                    });
                }
                match (&read.order_by, read.descending) {
                    (Some(field), true) => args.push(format!("order by {field} desc")),
                    (Some(field), false) => args.push(format!("order by {field}")),
                    (None, true) => args.push("order by row key desc".to_string()),
                    (None, false) => {}
                }
                args.push(match &read.limit {
                    Some(limit) => format!("limit {}", value_text(limit)),
                    None => format!(
                        "limit {} (no LIMIT: page on the order field)",
                        schemaless::index::MAX_LIMIT
                    ),
                });
                let mut calls = vec![format!("query_index({})", args.join(", "))];
                calls.extend(
                    read.latest
                        .iter()
                        .map(|c| format!("get_cell_latest(row, {c}) per entry")),
                );
                calls.extend(
                    read.children
                        .iter()
                        .map(|c| format!("get_column_cells(the entries' rows, {c})")),
                );
                calls
            }
            Plan::Write(write) => {
                let mut calls = Vec::new();
                if write.reserves_ids {
                    calls.push(
                        "reserve each row's integer id (the one given, or drawn from its \
                         default) in mezzanine.row_ids: the reverse mirror inserts the row \
                         under it"
                            .to_string(),
                    );
                }
                if write.reads_ids {
                    calls.push(
                        "read each row's integer id (the legacy table's, or its reservation \
                         in mezzanine.row_ids: ids never change)"
                            .to_string(),
                    );
                }
                for put in &write.puts {
                    if put.read_latest {
                        calls.push(format!("get_cell_latest({}, {})", put.row, put.column));
                    }
                    calls.extend(put.checks.iter().cloned());
                    let fields: Vec<String> = put
                        .fields
                        .iter()
                        .map(|(f, v)| format!("{f}: {v}"))
                        .collect();
                    let body = if put.merge {
                        format!("latest body with {{{}}}", fields.join(", "))
                    } else {
                        format!("{{{}}}", fields.join(", "))
                    };
                    calls.push(format!(
                        "put_cell({}, {}, ref_key = {}, {body})",
                        put.row, put.column, put.ref_key
                    ));
                }
                calls
            }
        }
    }
}
