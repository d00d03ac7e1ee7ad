//! The tests' store of cells and their builders, shared by the read
//! view's tests and the write guard's.

use serde_json::Value;

use super::Tombstoned;
use crate::api::{CellStore, IndexQuery};
use crate::cell::{Body, Cell, Column, RefKey, RowKey};
use crate::memory::MemoryStore;
use serde_json::json;

pub(super) const ROW: &str = "6f1c1a0e-8a3b-4a55-9d1e-3c2b1a0f9e8d";
pub(super) const OTHER: &str = "fb6d4a3e-2f11-4c5e-8d7a-9e1f2a3b4c5d";

pub(super) fn config() -> config::Config {
    config::Config::parse(
        r#"
[instance]
name = "t"
shard_count = 4
[[cluster]]
name = "a"
master = "mysql://root@127.0.0.1:1"
shards = "0-3"
[[index]]
name = "by_driver"
column = "BASE"
shard_field = "driver"
fields = ["status"]
"#,
        "test.toml",
    )
    .unwrap()
}

pub(super) fn cell(row: &str, column: &str, ref_key: i64, body: Value) -> Cell {
    Cell::parse(row, column, ref_key, body).unwrap()
}

pub(super) fn tombstone(row: &str, ref_key: i64, body: Body) -> Cell {
    Cell::new(
        RowKey::parse(row).unwrap(),
        Column::new("DELETED").unwrap(),
        RefKey::new(ref_key).unwrap(),
        body,
    )
}

pub(super) async fn store() -> Tombstoned<MemoryStore> {
    let config = config();
    let memory = MemoryStore::with_indexes(4, config::Limits::default(), &config.indexes).unwrap();
    memory
        .put_cells(vec![
            cell(
                ROW,
                "BASE",
                1,
                json!({"driver": "d1", "status": "requested"}),
            ),
            cell(
                ROW,
                "BASE",
                2,
                json!({"driver": "d1", "status": "completed"}),
            ),
            cell(ROW, "NOTES", 1, json!({"text": "one"})),
            cell(ROW, "NOTES", 2, json!({"text": "two"})),
            cell(ROW, "NOTES", 3, json!({"text": "three"})),
            cell(
                OTHER,
                "BASE",
                1,
                json!({"driver": "d1", "status": "requested"}),
            ),
        ])
        .await
        .unwrap();
    Tombstoned::new(memory, &config).unwrap()
}

pub(super) fn notes() -> Column {
    Column::new("NOTES").unwrap()
}

pub(super) fn base() -> Column {
    Column::new("BASE").unwrap()
}

pub(super) fn row() -> RowKey {
    RowKey::parse(ROW).unwrap()
}

pub(super) fn by_driver(limit: usize) -> IndexQuery {
    IndexQuery {
        index: "by_driver".into(),
        shard_value: json!("d1"),
        filters: vec![],
        order_by: None,
        descending: false,
        limit,
    }
}
