//! INSERT: one `put_cell` per row and column, with ON CONFLICT and
//! INSERT ... SELECT read as far as the cell API can follow them.

use super::*;

mod conflict;
mod values;

use conflict::{conflict_target, upserted};
use values::{positional, source_rows, Values};

/// The plan of an INSERT.
pub fn insert(model: &Model, insert: &Insert) -> Result<Plan, String> {
    let TableObject::TableName(name) = &insert.table else {
        return Err("inserts into a table function".to_string());
    };
    let rewritten = unqualified(insert, name, insert.table_alias.is_some());
    let insert = rewritten.as_ref().unwrap_or(insert);
    let Some(table) = model.table(name) else {
        return Err(format!(
            "inserts into {name}, outside the layout, from a layout table: read the cells \
             in the app and write {name} on its own"
        ));
    };
    // `DEFAULT VALUES` gives no column: a row of defaults.
    let columns: Vec<String> = match insert.source.as_deref() {
        Some(source) if insert.columns.is_empty() => positional(model, table, name, source)?,
        _ => insert.columns.iter().map(last).collect(),
    };
    let mut listed = std::collections::HashSet::new();
    if let Some(twice) = columns.iter().find(|c| !listed.insert(*c)) {
        return Err(refused_by_postgres(
            "42701",
            format!("column \"{twice}\" specified more than once"),
        ));
    }
    if let Some(OnInsert::OnConflict(c)) = &insert.on {
        conflict_target(model, table, name, c.conflict_target.as_ref())?;
        if let OnConflictAction::DoUpdate(update) = &c.action {
            assigned_once(&update.assignments)?;
        }
    }
    match &insert.on {
        None => {}
        Some(OnInsert::OnConflict(c)) => match &c.action {
            OnConflictAction::DoNothing => {}
            OnConflictAction::DoUpdate(update) => {
                let sets_ref_key = update.assignments.iter().any(|a| match &a.target {
                    AssignmentTarget::ColumnName(n) => {
                        matches!(model.source(table, &last(n)), Source::RefKey { .. })
                    }
                    AssignmentTarget::Tuple(_) => false,
                });
                if !sets_ref_key && !model.bump_version {
                    return Err(format!(
                        "an upsert (ON CONFLICT DO UPDATE) that changes a row of {name} without \
                         a new ref key: a cell is never changed; set the ref key column too, \
                         or write the new version with put_cell"
                    ));
                }
            }
        },
        Some(other) => return Err(format!("{other}: not PostgreSQL's ON CONFLICT")),
    }
    let upserts = matches!(&insert.on, Some(OnInsert::OnConflict(c))
        if matches!(c.action, OnConflictAction::DoUpdate(_)));
    let ids = match (table, upserts) {
        (Table::Child(_), _) => Ids::Parent,
        (Table::Parent, true) => Ids::Upserted,
        (Table::Parent, false) => Ids::Reserved,
    };
    let returns_id = check_returning(model, table, name, insert.returning.as_deref(), ids)?;
    let rows = source_rows(model, table, &columns, insert.source.as_deref(), name)?;
    // A parent row given its integer id: the id is reserved for it, as
    // one RETURNING reads is drawn and reserved. An upsert's row may be
    // an existing one, under another id.
    let id_at = (table == Table::Parent)
        .then(|| columns.iter().position(|c| *c == model.layout.id))
        .flatten()
        .filter(|&at| rows.iter().any(|row| !is_default(row.values[at])));
    if let (Some(at), true) = (id_at, upserts) {
        return Err(format!(
            "gives {name}.{} = {}, the integer id, in an upsert, whose row may be an existing \
             one under another id: leave it out",
            model.layout.id,
            rows.iter()
                .map(|row| row.values[at])
                .find(|v| !is_default(v))
                .map_or_else(String::new, ToString::to_string)
        ));
    }
    let reserves_ids = (returns_id && table == Table::Parent) || id_at.is_some();
    let mut puts = Vec::new();
    let mut written = Vec::new();
    for row in &rows {
        let (key, inserted, parent_id) = row_puts(model, table, name, &columns, row)?;
        written.push(Inserted {
            key,
            parent_id,
            of_parent_found: row.parent_uuid.is_some(),
            values: columns
                .iter()
                .zip(&row.values)
                .filter(|(c, v)| {
                    (table == Table::Parent || model.source(table, c) != Source::IntegerId)
                        && !is_default(v)
                })
                .map(|(c, v)| (c.clone(), (*v).clone()))
                .collect(),
        });
        match &insert.on {
            Some(OnInsert::OnConflict(c)) => match &c.action {
                OnConflictAction::DoUpdate(update) => puts.extend(upserted(
                    model, table, name, &columns, row, inserted, update,
                )?),
                OnConflictAction::DoNothing => puts.extend(inserted),
            },
            _ => puts.extend(inserted),
        }
    }
    let mut bumped = Vec::new();
    let conflict = match &insert.on {
        Some(OnInsert::OnConflict(c)) => match &c.action {
            OnConflictAction::DoNothing => OnConflict::Nothing {
                any: c.conflict_target.is_none(),
            },
            OnConflictAction::DoUpdate(update) => {
                let mut sets: Vec<(String, Expr)> = update
                    .assignments
                    .iter()
                    .filter_map(|a| match &a.target {
                        AssignmentTarget::ColumnName(n) => Some((last(n), a.value.clone())),
                        AssignmentTarget::Tuple(_) => None,
                    })
                    .collect();
                // `capture.bump_version`: each row column's version the
                // DO UPDATE leaves is raised, as the trigger raises it
                // on the conflict's UPDATE (none where its fields come
                // out unchanged).
                if model.bump_version && table == Table::Parent {
                    for c in model.columns_of(Table::Parent) {
                        let ref_key = &model.column(c).ref_key;
                        if !sets.iter().any(|(name, _)| name == ref_key) {
                            sets.push((ref_key.clone(), super::update::next_version(ref_key)));
                            bumped.push(ref_key.clone());
                        }
                    }
                }
                OnConflict::Update {
                    sets,
                    condition: update.selection.clone().map(Box::new),
                }
            }
        },
        _ => OnConflict::Fail,
    };
    Ok(Plan::Write(Box::new(Write {
        puts,
        table,
        alias: insert
            .table_alias
            .as_ref()
            .map_or_else(|| last(name), |a| folded(&a.alias)),
        rows: Rows::Insert {
            rows: written,
            conflict,
        },
        returning: returning_items(model, table, insert.returning.as_deref()),
        reserves_ids,
        reads_ids: returns_id && (upserts || table != Table::Parent),
        bumped,
    })))
}

/// One row of an INSERT: its key (a child's: its parent's UUID; `None`:
/// the parent's UUID column's default, which PostgreSQL evaluates as it
/// would for the INSERT), its puts, and the integer id a child's parent
/// is named by, if it is.
type RowPuts = (Option<Expr>, Vec<Put>, Option<Expr>);

/// The [`RowPuts`] of `row`. A column not given, or given `DEFAULT`,
/// gets its default when the row is evaluated: the ref key's too
/// (`version bigint NOT NULL DEFAULT 1`). A column without a default is
/// null, and a null key or ref key is refused there as PostgreSQL
/// refuses it.
fn row_puts<'a>(
    model: &Model,
    table: Table,
    name: &ObjectName,
    columns: &[String],
    row: &Values<'a>,
) -> Result<RowPuts, String> {
    let value_of = |sql: &str| -> Option<&Expr> {
        columns
            .iter()
            .position(|c| c == sql)
            .map(|i| row.values[i])
            .filter(|v| !is_default(v))
    };
    // Every column written must be kept by the layout.
    for (i, column) in columns.iter().enumerate() {
        let value = row.values[i];
        if is_default(value) {
            continue;
        }
        match model.source(table, column) {
            Source::Unmapped => {
                return Err(format!(
                    "writes {name}.{column}, which the layout does not map: add it to the \
                     fields of a column, or Schemaless never holds it"
                ))
            }
            Source::IntegerId if matches!(table, Table::Child(_)) => {}
            // No cell holds the parent's integer id: the value is reserved
            // for the row (`mezzanine.row_ids`), and the reverse mirror
            // inserts the row under it, as an app that draws its ids
            // first (JPA's sequence generator) writes them.
            Source::IntegerId if is_value(value) && subquery_in(value).is_none() => {}
            Source::IntegerId => {
                return Err(format!(
                    "gives {name}.{column} = {value}, the integer id, which reads the \
                     database: give it as a value, or leave it out (or DEFAULT) and let \
                     PostgreSQL number the row"
                ))
            }
            _ if !is_value(value) => {
                return Err(format!(
                    "writes {name}.{column} = {value}, which reads the database: compute it \
                     in the app and pass it as a value"
                ))
            }
            _ => {}
        }
    }
    let mut parent_id = None;
    let row_key = match table {
        Table::Parent => value_of(&model.layout.uuid).cloned(),
        Table::Child(c) => Some({
            let fk = model.column(c).parent.clone().unwrap_or_default();
            match row.parent_uuid {
                Some(uuid) => {
                    let at = value_of(&fk).ok_or_else(|| {
                        format!("inserts into {name} without its parent key {fk}")
                    })?;
                    if !is_parent_id(model, at) {
                        return Err(format!(
                            "{name}.{fk} is given {at}, not {}.{}",
                            model.layout.table, model.layout.id
                        ));
                    }
                    uuid.clone()
                }
                None => {
                    let value = value_of(&fk).ok_or_else(|| {
                        format!("inserts into {name} without its parent key {fk}")
                    })?;
                    // The parent by UUID, or by its integer id (a value),
                    // which PostgreSQL maps to its UUID.
                    match parent_by_uuid(model, value) {
                        Some(uuid) => uuid.clone(),
                        None if is_value(value) && subquery_in(value).is_none() => {
                            parent_id = Some(value.clone());
                            super::uuid_of_id(model, value, false).ok_or_else(|| {
                                format!("{name}.{fk} = {value}: not an integer id")
                            })?
                        }
                        None => {
                            return Err(format!(
                                "names its parent by {name}.{fk} = {value}: name it by its \
                                 integer id, or by UUID ({fk} = (SELECT {} FROM {} WHERE {} = \
                                 $n))",
                                model.layout.id, model.layout.table, model.layout.uuid
                            ))
                        }
                    }
                }
            }
        }),
    };
    let row_text = row_key.as_ref().map_or_else(
        || format!("the default of {}", model.layout.uuid),
        value_text,
    );
    // The columns the INSERT gives a value of; given none (every column
    // its default, or only the key), all of the table's: PostgreSQL
    // writes the row whole.
    let touches = |c: &config::LayoutColumn| {
        value_of(&c.ref_key).is_some() || c.fields.0.values().any(|sql| value_of(sql).is_some())
    };
    let none_given = !model
        .columns_of(table)
        .into_iter()
        .any(|c| touches(model.column(c)));
    let mut puts = Vec::new();
    for c in model.columns_of(table) {
        let column = model.column(c);
        if !none_given && !touches(column) {
            continue;
        }
        puts.push(Put {
            row: format!("row = {row_text}"),
            column: column.name.clone(),
            ref_key: value_of(&column.ref_key)
                .map_or_else(|| format!("the default of {}", column.ref_key), value_text),
            fields: column
                .fields
                .0
                .iter()
                .map(|(field, sql)| {
                    (
                        field.clone(),
                        value_of(sql).map_or("default".to_string(), value_text),
                    )
                })
                .collect(),
            read_latest: false,
            merge: false,
            checks: Vec::new(),
        });
    }
    if puts.is_empty() {
        return Err(format!(
            "inserts into {name} no field of any layout column: nothing reaches Schemaless"
        ));
    }
    Ok((row_key, puts, parent_id))
}

/// `(SELECT id FROM parent WHERE uuid = v)`: `v`.
pub(super) fn parent_by_uuid<'a>(model: &Model, value: &'a Expr) -> Option<&'a Expr> {
    let Expr::Subquery(query) = strip(value) else {
        return None;
    };
    let SetExpr::Select(select) = query.body.as_ref() else {
        return None;
    };
    if select.from.len() != 1 || !select.from[0].joins.is_empty() {
        return None;
    }
    let mut scope = Scope::default();
    scope.add(model, &select.from[0].relation).ok()?;
    if scope.table(0) != Some(Table::Parent) {
        return None;
    }
    let [SelectItem::UnnamedExpr(id) | SelectItem::ExprWithAlias { expr: id, .. }] =
        select.projection.as_slice()
    else {
        return None;
    };
    let id = scope.column(model, id).ok()??;
    if id.source != Source::IntegerId {
        return None;
    }
    let where_ = select.selection.as_ref()?;
    match conjuncts(where_).as_slice() {
        [only] => match cond(&scope, model, only).ok()? {
            Cond::Cmp {
                col,
                op: schemaless::FilterOp::Eq,
                value,
            } if col.source == Source::RowKey => Some(value),
            _ => None,
        },
        _ => None,
    }
}

/// Whether `expr` is the parent's id column (in INSERT ... SELECT).
fn is_parent_id(model: &Model, expr: &Expr) -> bool {
    match strip(expr) {
        Expr::Identifier(i) => folded(i) == model.layout.id,
        Expr::CompoundIdentifier(parts) => {
            parts.last().is_some_and(|i| folded(i) == model.layout.id)
        }
        _ => false,
    }
}

/// `DEFAULT` in a VALUES row: the column's default, as if not given.
fn is_default(expr: &Expr) -> bool {
    matches!(expr, Expr::Identifier(i) if i.quote_style.is_none() && i.value.eq_ignore_ascii_case("default"))
}
