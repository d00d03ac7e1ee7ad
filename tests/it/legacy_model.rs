//! The legacy model answers like the in-memory model wherever it supports
//! the operation: random operation sequences on the trips layout, run on
//! both.
//!
//! Where the legacy model differs by design, the comparison says exactly
//! how: a `row` column keeps only its latest cell, so a write below the
//! latest ref key is `Superseded` (the model stores it) and `get_cell` of a
//! ref key below the latest is unsupported.

use proptest::prelude::*;
use proptest::test_runner::{Config, TestRunner};
use schemaless::{
    Body, Cell, CellKey, CellResult, CellStore, Column, Error, MemoryStore, ReadFrom, RefKey,
    RowKey, WriteOutcome,
};
use serde_json::json;

use crate::harness::LegacyDb;

const ROWS: usize = 4;
const COLUMNS: [&str; 3] = ["BASE", "NOTES", "BILLING"];

/// Canonical bodies (every field, canonical values), so both stores hold
/// byte-equal bodies.
fn body(column: &str, variant: u8) -> Body {
    let v = i64::from(variant);
    let status = ["requested", "completed", "canceled"][usize::from(variant % 3)];
    let value = match column {
        "BASE" => json!({
            "driver_uuid": format!("00000000-0000-4000-8000-00000000000{variant}"),
            "rider_uuid": "11111111-1111-4111-8111-111111111111",
            "city_id": 7 + v,
            "status": status,
            "fare": if variant == 0 { json!(null) } else { json!(format!("{}.5", 10 + v)) },
            "currency": "EUR",
            "distance_km": if variant == 1 { json!(null) } else { json!(2.25 * (v + 1) as f64) },
            "requested_at": "2015-03-08T07:30:00.000000Z",
            "completed_at": if variant == 2 { json!("2015-03-08T08:00:00.250000Z") } else { json!(null) },
        }),
        "NOTES" => json!({
            "author": "rider",
            "text": format!("ü note {variant} — 乘客"),
            "at": "2015-11-01T05:30:00.000000Z",
        }),
        _ => json!({
            "amount": format!("{}", 3 + v),
            "currency": "EUR",
            "succeeded": variant.is_multiple_of(2),
            "processor_response": if variant == 0 { json!(null) } else { json!({"code": variant, "ok": [true, null]}) },
            "attempted_at": "2015-11-01T05:30:00.000001Z",
        }),
    };
    Body::from_value(value).unwrap()
}

#[derive(Clone, Debug)]
enum Op {
    Put(usize, usize, i64, u8),
    Batch(Vec<(usize, usize, i64, u8)>),
    Get(usize, usize, i64),
    Latest(usize, usize),
    Row(usize),
}

fn a_cell() -> impl Strategy<Value = (usize, usize, i64, u8)> {
    (0..ROWS, 0..COLUMNS.len(), 0i64..4, 0u8..3)
}

fn an_op() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => a_cell().prop_map(|(r, c, k, b)| Op::Put(r, c, k, b)),
        2 => proptest::collection::vec(a_cell(), 1..6).prop_map(Op::Batch),
        2 => (0..ROWS, 0..COLUMNS.len(), 0i64..4).prop_map(|(r, c, k)| Op::Get(r, c, k)),
        2 => (0..ROWS, 0..COLUMNS.len()).prop_map(|(r, c)| Op::Latest(r, c)),
        1 => (0..ROWS).prop_map(Op::Row),
    ]
}

fn make(rows: &[RowKey], (r, c, k, b): (usize, usize, i64, u8)) -> Cell {
    Cell::new(
        rows[r],
        Column::new(COLUMNS[c]).unwrap(),
        RefKey::new(k).unwrap(),
        body(COLUMNS[c], b),
    )
}

/// The ref key of the model's latest BASE cell of a row.
async fn latest_base(model: &MemoryStore, row: RowKey) -> Option<i64> {
    model
        .get_cell_latest(&row, &Column::new("BASE").unwrap(), ReadFrom::Master)
        .await
        .unwrap()
        .map(|c| c.cell.key.ref_key.get())
}

/// Compares one write's answers; `newer` is the model's latest BASE ref
/// key of the row, which a superseded write must be below.
fn same_write(
    cell: &Cell,
    model: &CellResult,
    legacy: &CellResult,
    newer: Option<i64>,
) -> Result<(), TestCaseError> {
    if legacy == &Ok(WriteOutcome::Superseded) {
        prop_assert_eq!(
            cell.key.column.as_str(),
            "BASE",
            "only a row column supersedes"
        );
        prop_assert!(
            newer.is_some_and(|n| n > cell.key.ref_key.get()),
            "superseded, but the model's latest BASE is {:?} for {}",
            newer,
            cell.key
        );
        // The model may answer anything: the old cell may be new to it,
        // the same, or a different body (a conflict the legacy model cannot
        // see, having kept no history).
        let _ = model;
    } else {
        prop_assert_eq!(legacy, model, "{}", cell.key);
    }
    Ok(())
}

async fn check(
    model: &MemoryStore,
    legacy: &legacy::LegacyStore,
    rows: &[RowKey],
    op: &Op,
) -> Result<(), TestCaseError> {
    match op {
        Op::Put(r, c, k, b) => {
            let cell = make(rows, (*r, *c, *k, *b));
            let m = model.put_cells(vec![cell.clone()]).await.unwrap().remove(0);
            let l = legacy
                .put_cells(vec![cell.clone()])
                .await
                .unwrap()
                .remove(0);
            same_write(&cell, &m, &l, latest_base(model, cell.key.row_key).await)?;
        }
        Op::Batch(specs) => {
            let cells: Vec<Cell> = specs.iter().map(|s| make(rows, *s)).collect();
            let m = model.put_cells(cells.clone()).await.unwrap();
            let l = legacy.put_cells(cells.clone()).await.unwrap();
            for ((cell, m), l) in cells.iter().zip(&m).zip(&l) {
                same_write(cell, m, l, latest_base(model, cell.key.row_key).await)?;
            }
        }
        Op::Get(r, c, k) => {
            let key = CellKey {
                row_key: rows[*r],
                column: Column::new(COLUMNS[*c]).unwrap(),
                ref_key: RefKey::new(*k).unwrap(),
            };
            let m = model
                .get_cell(&key, ReadFrom::Master)
                .await
                .unwrap()
                .map(|s| s.cell);
            let l = legacy.get_cell(&key, ReadFrom::Master).await;
            let newest = latest_base(model, rows[*r]).await;
            match (COLUMNS[*c], newest) {
                ("BASE", Some(n)) if n > *k => prop_assert!(
                    matches!(l, Err(Error::Unsupported { .. })),
                    "an old BASE read: {:?}",
                    l
                ),
                _ => prop_assert_eq!(l.unwrap().map(|s| s.cell), m),
            }
        }
        Op::Latest(r, c) => {
            let column = Column::new(COLUMNS[*c]).unwrap();
            let m = model
                .get_cell_latest(&rows[*r], &column, ReadFrom::Master)
                .await
                .unwrap();
            let l = legacy
                .get_cell_latest(&rows[*r], &column, ReadFrom::Master)
                .await
                .unwrap();
            prop_assert_eq!(l.map(|s| s.cell), m.map(|s| s.cell));
        }
        Op::Row(r) => {
            let m = model
                .get_cells_for_row(&rows[*r], ReadFrom::Master)
                .await
                .unwrap();
            let l = legacy
                .get_cells_for_row(&rows[*r], ReadFrom::Master)
                .await
                .unwrap();
            let strip = |cells: Vec<schemaless::StoredCell>| {
                cells.into_iter().map(|c| c.cell).collect::<Vec<_>>()
            };
            prop_assert_eq!(strip(l), strip(m));
        }
    }
    Ok(())
}

#[test]
fn the_legacy_model_answers_like_the_model() {
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let (db, legacy) = runtime.block_on(async {
        let db = LegacyDb::trips().await;
        let legacy = db.store().await;
        (db, legacy)
    });
    let mut runner = TestRunner::new(Config {
        cases: 24,
        failure_persistence: None,
        ..Config::default()
    });
    let result = runner.run(&proptest::collection::vec(an_op(), 1..30), |ops| {
        runtime.block_on(async {
            // Fresh row keys per case: the tables are shared, the rows not.
            let rows: Vec<RowKey> = (0..ROWS).map(|_| RowKey::random()).collect();
            let model = MemoryStore::new(8, db.config.limits.clone());
            // Child rows need their parent: every trip starts with BASE 0.
            let parents: Vec<Cell> = (0..ROWS).map(|r| make(&rows, (r, 0, 0, 0))).collect();
            model.put_cells(parents.clone()).await.unwrap();
            legacy.put_cells(parents).await.unwrap();
            for (i, op) in ops.iter().enumerate() {
                check(&model, &legacy, &rows, op)
                    .await
                    .map_err(|e| TestCaseError::fail(format!("operation {i} {op:?}: {e}")))?;
            }
            for r in 0..ROWS {
                check(&model, &legacy, &rows, &Op::Row(r)).await?;
            }
            Ok(())
        })
    });
    runtime.block_on(legacy.close());
    if let Err(e) = result {
        panic!("{e}");
    }
}
