//! The in-memory store is the model: random operation sequences run on it
//! and on MariaDB must give the same answers.

use proptest::prelude::*;
use proptest::test_runner::{Config, TestRunner};
use schemaless::{Cell, CellKey, CellStore, MemoryStore, ReadFrom, StoredCell};
use serde_json::json;

use crate::harness::{cell, column, row, Instance};

const SHARDS: u32 = 4;
const COLUMNS: [&str; 3] = ["BASE", "STATUS", "notes"];

#[derive(Clone, Debug)]
enum Op {
    Put(Cell),
    Batch(Vec<Cell>),
    Get(CellKey),
    Latest(u128, &'static str),
    Row(u128),
    Log(u32, usize),
}

fn a_cell() -> impl Strategy<Value = Cell> {
    // A small space of addresses and bodies so that duplicates and
    // conflicts are frequent.
    (0u128..5, 0usize..3, 0i64..4, 0u8..3).prop_map(|(r, c, k, b)| {
        cell(
            r,
            COLUMNS[c],
            k,
            json!({"b": b, "text": "ü", "n": [b, null]}),
        )
    })
}

fn an_op() -> impl Strategy<Value = Op> {
    prop_oneof![
        3 => a_cell().prop_map(Op::Put),
        3 => proptest::collection::vec(a_cell(), 1..8).prop_map(Op::Batch),
        2 => a_cell().prop_map(|c| Op::Get(c.key)),
        2 => (0u128..5, 0usize..3).prop_map(|(r, c)| Op::Latest(r, COLUMNS[c])),
        1 => (0u128..5).prop_map(Op::Row),
        1 => (0u32..SHARDS, 1usize..4).prop_map(|(s, p)| Op::Log(s, p)),
    ]
}

/// What an answer is, without the parts that legitimately differ between
/// stores (added_id values and write times).
fn strip(cells: Vec<StoredCell>) -> Vec<Cell> {
    cells.into_iter().map(|c| c.cell).collect()
}

async fn whole_log(store: &dyn CellStore, shard: u32, page: usize) -> Vec<Cell> {
    let mut after = 0;
    let mut all: Vec<StoredCell> = Vec::new();
    loop {
        let p = store
            .get_cells_for_shard(shard, after, page, ReadFrom::Master)
            .await
            .unwrap();
        if p.cells.is_empty() {
            break;
        }
        after = p.next;
        all.extend(p.cells);
    }
    assert!(all.windows(2).all(|w| w[0].added_id < w[1].added_id));
    strip(all)
}

async fn answer(store: &dyn CellStore, op: &Op) -> String {
    match op {
        Op::Put(c) => format!(
            "{:?}",
            store.put_cell(c.clone()).await.map_err(|e| e.to_string())
        ),
        Op::Batch(cells) => format!("{:?}", store.put_cells(cells.clone()).await.unwrap()),
        Op::Get(k) => format!(
            "{:?}",
            store
                .get_cell(k, ReadFrom::Master)
                .await
                .unwrap()
                .map(|c| c.cell)
        ),
        Op::Latest(r, c) => format!(
            "{:?}",
            store
                .get_cell_latest(&row(*r), &column(c), ReadFrom::Master)
                .await
                .unwrap()
                .map(|c| c.cell)
        ),
        Op::Row(r) => format!(
            "{:?}",
            strip(
                store
                    .get_cells_for_row(&row(*r), ReadFrom::Master)
                    .await
                    .unwrap()
            )
        ),
        Op::Log(s, p) => format!("{:?}", whole_log(store, *s, *p).await),
    }
}

#[test]
fn mariadb_answers_like_the_model() {
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let mut runner = TestRunner::new(Config {
        cases: 24,
        failure_persistence: None,
        ..Config::default()
    });
    let result = runner.run(&proptest::collection::vec(an_op(), 1..40), |ops| {
        runtime.block_on(async {
            let t = Instance::new(SHARDS).await;
            let model = MemoryStore::new(SHARDS, t.config.limits.clone());
            for (i, op) in ops.iter().enumerate() {
                let expected = answer(&model, op).await;
                let got = answer(&t.store, op).await;
                prop_assert_eq!(
                    &got,
                    &expected,
                    "operation {} of {}: {:?}",
                    i,
                    ops.len(),
                    op
                );
            }
            for shard in 0..SHARDS {
                prop_assert_eq!(
                    whole_log(&t.store, shard, 100).await,
                    whole_log(&model, shard, 100).await
                );
            }
            t.store.close().await;
            Ok(())
        })
    });
    if let Err(e) = result {
        panic!("{e}");
    }
}
