//! The layout of the legacy tables, the secondary indexes, and capture's
//! tombstone column: SQL names, column kinds, fields, and that none of
//! them collide.

use super::topology::valid_instance_name;
use super::{in_range, problem, Problem};
use crate::layout::{valid_sql_identifier, ColumnKind, Layout};
use crate::model::Config;

pub(super) fn layout(layout: &Layout) -> Result<(), Problem> {
    sql_name("layout.schema".into(), &layout.schema)?;
    sql_name("layout.table".into(), &layout.table)?;
    sql_name("layout.id".into(), &layout.id)?;
    sql_name("layout.uuid".into(), &layout.uuid)?;
    if layout.id == layout.uuid {
        return Err(problem("layout.uuid", "must differ from layout.id"));
    }
    if layout.columns.is_empty() {
        return Err(problem(
            "layout",
            "at least one [[layout.column]] is required",
        ));
    }
    for (i, column) in layout.columns.iter().enumerate() {
        let key = |k: &str| format!("layout.column[{i}].{k}");
        if !valid_column_name(&column.name) {
            return Err(problem(
                key("name"),
                format!(
                    "{:?} is not a valid column name: use 1-64 characters of [A-Za-z0-9_]",
                    column.name
                ),
            ));
        }
        if let Some(j) = layout.columns[..i]
            .iter()
            .position(|c| c.name == column.name)
        {
            return Err(problem(
                key("name"),
                format!(
                    "column {:?} is already declared by layout.column[{j}]",
                    column.name
                ),
            ));
        }
        match column.kind {
            ColumnKind::Row => {
                if let Some(table) = &column.table {
                    if *table != layout.table {
                        return Err(problem(
                            key("table"),
                            format!("a row column is the parent table {:?}; leave table out (or set it to the parent)", layout.table),
                        ));
                    }
                }
                if column.parent.is_some() {
                    return Err(problem(
                        key("parent"),
                        "only a child column has a parent key",
                    ));
                }
            }
            ColumnKind::Child => {
                let Some(table) = &column.table else {
                    return Err(problem(
                        key("table"),
                        "a child column needs its child table",
                    ));
                };
                sql_name(key("table"), table)?;
                if *table == layout.table {
                    return Err(problem(
                        key("table"),
                        "a child table cannot be the parent table; use kind = \"row\"",
                    ));
                }
                let Some(parent) = &column.parent else {
                    return Err(problem(
                        key("parent"),
                        format!(
                            "a child column needs the foreign key of {table} to {}.{}",
                            layout.table, layout.id
                        ),
                    ));
                };
                sql_name(key("parent"), parent)?;
            }
        }
        sql_name(key("ref_key"), &column.ref_key)?;
        if column.fields.0.is_empty() {
            return Err(problem(key("fields"), "a column needs at least one field"));
        }
        let mut used = std::collections::BTreeMap::new();
        for (json, sql) in &column.fields.0 {
            if json.is_empty() || json.len() > 128 {
                return Err(problem(
                    key("fields"),
                    format!("field name {json:?} must be 1-128 characters"),
                ));
            }
            sql_name(key("fields"), sql)?;
            let own_id = (column.kind == ColumnKind::Row).then_some(&layout.id);
            let reserved = [
                Some(&layout.uuid),
                Some(&column.ref_key),
                column.parent.as_ref(),
                own_id,
            ];
            if reserved.contains(&Some(sql)) {
                return Err(problem(
                    key("fields"),
                    format!("field {json:?} maps to {sql:?}, which the layout already uses as a key column"),
                ));
            }
            if let Some(other) = used.insert(sql, json) {
                return Err(problem(
                    key("fields"),
                    format!("fields {other:?} and {json:?} both map to SQL column {sql:?}"),
                ));
            }
        }
    }
    Ok(())
}

fn sql_name(key: String, name: &str) -> Result<(), Problem> {
    if valid_sql_identifier(name) {
        Ok(())
    } else {
        Err(problem(
            key,
            format!("{name:?} is not a valid SQL name: use 1-63 characters of [A-Za-z0-9_], not starting with a digit"),
        ))
    }
}

fn valid_column_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 64
        && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
}

pub(super) fn indexes(config: &Config) -> Result<(), Problem> {
    for (i, index) in config.indexes.iter().enumerate() {
        let key = |k: &str| format!("index[{i}].{k}");
        if !valid_instance_name(&index.name) || index.name.len() > 32 {
            return Err(problem(
                key("name"),
                format!("{:?} is not a valid index name: use 1-32 characters of [a-z0-9_], starting with a letter", index.name),
            ));
        }
        if let Some(j) = config.indexes[..i]
            .iter()
            .position(|x| x.name == index.name)
        {
            return Err(problem(
                key("name"),
                format!("index {:?} is already declared by index[{j}]", index.name),
            ));
        }
        for field in index.types.keys() {
            if *field != index.shard_field && !index.fields.contains(field) {
                return Err(problem(
                    format!("index[{i}].types.{field}"),
                    format!("{field:?} is neither the shard field nor one of the index's fields"),
                ));
            }
        }
        if !valid_column_name(&index.column) {
            return Err(problem(
                key("column"),
                format!("{:?} is not a valid column name", index.column),
            ));
        }
        for (k, field) in index.fields.iter().enumerate() {
            if *field == index.shard_field || index.fields[..k].contains(field) {
                return Err(problem(
                    format!("index[{i}].fields[{k}]"),
                    format!("field {field:?} is already part of the index"),
                ));
            }
        }
        // Without a layout the index is Schemaless-only: its column and
        // fields are not checked against one.
        let Some(layout) = &config.layout else {
            continue;
        };
        let Some(column) = layout.column(&index.column) else {
            let names: Vec<&str> = layout.columns.iter().map(|c| c.name.as_str()).collect();
            return Err(problem(
                key("column"),
                format!(
                    "no layout column is called {:?}; the columns are {}",
                    index.column,
                    names.join(", ")
                ),
            ));
        };
        let has = |field: &str| column.fields.0.contains_key(field);
        if !has(&index.shard_field) {
            return Err(problem(
                key("shard_field"),
                format!(
                    "column {} has no field {:?}",
                    column.name, index.shard_field
                ),
            ));
        }
        for (k, field) in index.fields.iter().enumerate() {
            if !has(field) {
                return Err(problem(
                    format!("index[{i}].fields[{k}]"),
                    format!("column {} has no field {field:?}", column.name),
                ));
            }
        }
    }
    Ok(())
}

pub(super) fn capture(config: &Config) -> Result<(), Problem> {
    let capture = &config.capture;
    in_range(
        "capture.lock_timeout_ms",
        capture.lock_timeout_ms,
        10,
        60_000,
    )?;
    let tombstones = &capture.tombstone_column;
    if !valid_column_name(tombstones) {
        return Err(problem(
            "capture.tombstone_column",
            format!(
                "{tombstones:?} is not a valid column name: use 1-64 characters of [A-Za-z0-9_]"
            ),
        ));
    }
    if let Some(layout) = &config.layout {
        if layout.column(tombstones).is_some() {
            return Err(problem(
                "capture.tombstone_column",
                format!("{tombstones:?} is a layout column; tombstones need a column of their own"),
            ));
        }
    }
    if let Some(index) = config.indexes.iter().find(|i| i.column == *tombstones) {
        return Err(problem(
            "capture.tombstone_column",
            format!(
                "{tombstones:?} is indexed by index {:?}; tombstones need a column of their own",
                index.name
            ),
        ));
    }
    Ok(())
}
