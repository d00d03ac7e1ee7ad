//! `mezzanine cell get|row|put|index`: cells read and written through the
//! facade (a linked `TripStore`, so the mode routes them as it routes the
//! apps' calls), for ad-hoc work during a cutover. `--json` prints what a
//! worker's API answers.

use std::path::Path;

use clap::{Args, Subcommand};
use schemaless::{
    Answer, Body, Cell, CellKey, CellStore, Column, Filter, FilterOp, IndexQuery, ReadFrom, RefKey,
    RowKey, StoredCell,
};
use serde_json::{json, Value};
use tripstore::TripStore;
use worker::api::{CellOut, Outcome};

#[derive(Subcommand)]
pub enum CellCommand {
    /// One cell: the latest of the column, or the one with REF.
    Get(GetArgs),
    /// The latest cell of every column of a row.
    Row(RowArgs),
    /// Write one cell (idempotent: the same cell again is
    /// `already_present`).
    Put(PutArgs),
    /// Query a secondary index for one shard-field value.
    Index(IndexArgs),
}

#[derive(Args)]
pub struct Read {
    /// Read from a minion instead of the master (may lag behind it).
    #[arg(long)]
    minion: bool,
    /// Print JSON, as a worker answers.
    #[arg(long)]
    json: bool,
}

impl Read {
    fn from(&self) -> ReadFrom {
        if self.minion {
            ReadFrom::Minion
        } else {
            ReadFrom::Master
        }
    }
}

#[derive(Args)]
pub struct GetArgs {
    /// The row key (a UUID).
    row: String,
    /// The column.
    column: String,
    /// The ref key; the latest cell when absent.
    #[arg(allow_negative_numbers = true)]
    reference: Option<i64>,
    #[command(flatten)]
    read: Read,
}

#[derive(Args)]
pub struct RowArgs {
    /// The row key (a UUID).
    row: String,
    #[command(flatten)]
    read: Read,
}

#[derive(Args)]
pub struct PutArgs {
    /// The row key (a UUID).
    row: String,
    /// The column.
    column: String,
    /// The ref key (0 or more).
    #[arg(allow_negative_numbers = true)]
    reference: i64,
    /// The body: a JSON object.
    #[arg(long)]
    body: String,
    /// Print JSON, as a worker answers.
    #[arg(long)]
    json: bool,
}

#[derive(Args)]
pub struct IndexArgs {
    /// The index, as named in `[[index]]`.
    name: String,
    /// The shard field's value (JSON, or else taken as a string).
    value: String,
    /// A condition on an index field: `FIELD=V`, `FIELD<V`, `FIELD<=V`,
    /// `FIELD>V`, `FIELD>=V`, or `FIELD in [V, ...]`; V is JSON, or else
    /// a string. Repeat for several (all must hold).
    #[arg(long)]
    filter: Vec<String>,
    /// Order by this index field.
    #[arg(long)]
    order_by: Option<String>,
    /// Largest first.
    #[arg(long)]
    desc: bool,
    /// At most this many entries.
    #[arg(long, default_value_t = 20)]
    limit: usize,
    #[command(flatten)]
    read: Read,
}

fn usage(e: impl std::fmt::Display) -> anyhow::Error {
    crate::UsageError(e.to_string()).into()
}

/// JSON text, or else the text as a JSON string.
fn value(text: &str) -> Value {
    serde_json::from_str(text.trim()).unwrap_or_else(|_| Value::String(text.trim().to_string()))
}

/// `FIELD OP VALUE` as a filter.
fn filter(text: &str) -> anyhow::Result<Filter> {
    if let Some((field, rest)) = text.split_once(" in ") {
        let values = value(rest);
        if !values.is_array() {
            return Err(usage(format!(
                "--filter {text:?}: `in` takes a JSON array, e.g. [\"a\", \"b\"]"
            )));
        }
        return Ok(Filter {
            field: field.trim().to_string(),
            op: FilterOp::In,
            value: values,
        });
    }
    // Two-character operators first, so `<=` is not read as `<`.
    for (token, op) in [
        (">=", FilterOp::Ge),
        ("<=", FilterOp::Le),
        ("=", FilterOp::Eq),
        ("<", FilterOp::Lt),
        (">", FilterOp::Gt),
    ] {
        if let Some((field, rest)) = text.split_once(token) {
            return Ok(Filter {
                field: field.trim().to_string(),
                op,
                value: value(rest),
            });
        }
    }
    Err(usage(format!(
        "--filter {text:?}: use FIELD=V, FIELD<V, FIELD<=V, FIELD>V, FIELD>=V or FIELD in [V, ...]"
    )))
}

fn show(cell: &StoredCell) -> String {
    format!(
        "{}/{}/{} (added_id {}): {}",
        cell.cell.key.row_key,
        cell.cell.key.column,
        cell.cell.key.ref_key,
        cell.added_id,
        cell.cell.body
    )
}

fn stale_note(stale: bool) -> &'static str {
    if stale {
        " (stale: answered by a minion while the master is down)"
    } else {
        ""
    }
}

pub async fn run(command: CellCommand, config_path: &Path) -> anyhow::Result<()> {
    let config = crate::load_config(config_path)?;
    // Every input is checked before anything connects.
    let call = Call::parse(command)?;
    let store = TripStore::connect(&config).await?;
    let result = call.run(&store).await;
    store.close().await;
    result
}

/// A command with its input checked.
enum Call {
    Get(CellKeyOrLatest, Read),
    Row(RowKey, Read),
    Put(Cell, bool),
    Index(IndexQuery, Read),
}

enum CellKeyOrLatest {
    Key(CellKey),
    Latest(RowKey, Column),
}

impl Call {
    fn parse(command: CellCommand) -> anyhow::Result<Call> {
        Ok(match command {
            CellCommand::Get(a) => {
                let row = RowKey::parse(&a.row).map_err(usage)?;
                let column = Column::new(&a.column).map_err(usage)?;
                let what = match a.reference {
                    Some(r) => CellKeyOrLatest::Key(CellKey {
                        row_key: row,
                        column,
                        ref_key: RefKey::new(r).map_err(usage)?,
                    }),
                    None => CellKeyOrLatest::Latest(row, column),
                };
                Call::Get(what, a.read)
            }
            CellCommand::Row(a) => Call::Row(RowKey::parse(&a.row).map_err(usage)?, a.read),
            CellCommand::Put(a) => {
                let body: Value = serde_json::from_str(&a.body)
                    .map_err(|e| usage(format!("--body is not JSON: {e}")))?;
                Call::Put(
                    Cell::new(
                        RowKey::parse(&a.row).map_err(usage)?,
                        Column::new(&a.column).map_err(usage)?,
                        RefKey::new(a.reference).map_err(usage)?,
                        Body::from_value(body).map_err(usage)?,
                    ),
                    a.json,
                )
            }
            CellCommand::Index(a) => {
                if a.limit == 0 || a.limit > worker::api::MAX_PAGE {
                    return Err(usage(format!(
                        "--limit {} is not between 1 and {}",
                        a.limit,
                        worker::api::MAX_PAGE
                    )));
                }
                Call::Index(
                    IndexQuery {
                        index: a.name,
                        shard_value: value(&a.value),
                        filters: a
                            .filter
                            .iter()
                            .map(|f| filter(f))
                            .collect::<Result<_, _>>()?,
                        order_by: a.order_by,
                        descending: a.desc,
                        limit: a.limit,
                    },
                    a.read,
                )
            }
        })
    }

    async fn run(self, store: &TripStore) -> anyhow::Result<()> {
        match self {
            Call::Get(what, read) => {
                let answer: Answer<Option<StoredCell>> = match &what {
                    CellKeyOrLatest::Key(key) => store.get_cell_answer(key, read.from()).await?,
                    CellKeyOrLatest::Latest(row, column) => {
                        store
                            .get_cell_latest_answer(row, column, read.from())
                            .await?
                    }
                };
                if read.json {
                    let cell = answer.value.as_ref().map(CellOut::from);
                    println!("{}", json!({ "cell": cell, "stale": answer.stale }));
                } else {
                    match &answer.value {
                        Some(cell) => println!("{}{}", show(cell), stale_note(answer.stale)),
                        None => println!("no such cell{}", stale_note(answer.stale)),
                    }
                }
            }
            Call::Row(row, read) => {
                let answer = store.get_cells_for_row_answer(&row, read.from()).await?;
                if read.json {
                    let cells: Vec<CellOut> = answer.value.iter().map(CellOut::from).collect();
                    println!("{}", json!({ "cells": cells, "stale": answer.stale }));
                } else {
                    for cell in &answer.value {
                        println!("{}", show(cell));
                    }
                    println!("{} columns{}", answer.value.len(), stale_note(answer.stale));
                }
            }
            Call::Put(cell, as_json) => {
                let key = cell.key.clone();
                let results = store.put_cells(vec![cell]).await?;
                let outcome = Outcome::from(&results[0]);
                if as_json {
                    println!("{}", json!({ "results": [{ "outcome": outcome }] }));
                } else {
                    println!("{key}: {}", outcome.as_str());
                }
                if outcome == Outcome::Conflict {
                    anyhow::bail!("cell {key} already exists with a different body");
                }
            }
            Call::Index(query, read) => {
                let answer = store.query_index_answer(&query, read.from()).await?;
                if read.json {
                    let entries: Vec<Value> = answer
                        .value
                        .iter()
                        .map(|e| json!({ "row_key": e.row_key.to_string(), "fields": e.fields.to_value() }))
                        .collect();
                    println!("{}", json!({ "entries": entries, "stale": answer.stale }));
                } else {
                    for entry in &answer.value {
                        println!("{} {}", entry.row_key, entry.fields);
                    }
                    println!("{} entries{}", answer.value.len(), stale_note(answer.stale));
                }
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn filters_read_their_operator_and_value() {
        let f = filter("requested_at>=2024-01-01").unwrap();
        assert_eq!((f.field.as_str(), f.op), ("requested_at", FilterOp::Ge));
        assert_eq!(f.value, json!("2024-01-01"));
        let f = filter("fare < 12.5").unwrap();
        assert_eq!((f.field.as_str(), f.op), ("fare", FilterOp::Lt));
        assert_eq!(f.value.to_string(), "12.5");
        let f = filter("status in [\"done\", \"open\"]").unwrap();
        assert_eq!(f.op, FilterOp::In);
        assert_eq!(f.value, json!(["done", "open"]));
        assert!(filter("status in done").is_err());
        assert!(filter("status").is_err());
    }
}
