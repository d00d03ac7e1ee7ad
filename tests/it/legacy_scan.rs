//! Chunked scans and index queries over the seeded trips data set, checked
//! against the read API and against a brute-force filter.

use std::collections::BTreeMap;

use schemaless::{Cell, CellStore, Filter, FilterOp, IndexQuery, ReadFrom, RowKey};
use serde_json::{json, Value};

use crate::harness::LegacyDb;

async fn scan_all(store: &legacy::LegacyStore, chunk: i64) -> Vec<Cell> {
    let (low, high) = store.id_range().await.unwrap().expect("seeded");
    let mut cells = Vec::new();
    let mut at = low;
    while at <= high {
        let c = store.scan(at..at + chunk).await.unwrap();
        assert!(c.unreadable.is_empty(), "{:?}", c.unreadable);
        assert_eq!(c.parents_without_uuid, 0);
        cells.extend(c.cells);
        at += chunk;
    }
    cells
}

#[tokio::test]
async fn scans_cover_every_row_once_and_match_the_read_api() {
    let db = LegacyDb::trips().await;
    let counts = legacy::trips::seed(&db.pool, "public", "uuid", 3000, 11, |_| {})
        .await
        .unwrap();
    let store = db.store().await;
    let by_500 = scan_all(&store, 500).await;
    // One BASE cell per trip, one cell per child row.
    assert_eq!(by_500.len() as u64, counts.rows());
    assert_eq!(
        scan_all(&store, 1237).await,
        by_500,
        "chunking changed the cells"
    );

    // The latest cell of each column, from the scan, equals the read API's
    // answer for the row (every 25th trip, to keep the test quick).
    let mut latest: BTreeMap<RowKey, BTreeMap<String, Cell>> = BTreeMap::new();
    for cell in &by_500 {
        latest
            .entry(cell.key.row_key)
            .or_default()
            .insert(cell.key.column.as_str().to_string(), cell.clone());
    }
    assert_eq!(latest.len(), 3000);
    for (row, columns) in latest.iter().step_by(25) {
        let read: Vec<Cell> = store
            .get_cells_for_row(row, ReadFrom::Master)
            .await
            .unwrap()
            .into_iter()
            .map(|s| s.cell)
            .collect();
        assert_eq!(read, columns.values().cloned().collect::<Vec<_>>());
    }
    store.close().await;
}

/// The index entries a brute-force filter over BASE cells finds.
fn brute_force(cells: &[Cell], q: &IndexQuery) -> Vec<(RowKey, Value)> {
    let fields = ["driver_uuid", "requested_at", "city_id", "status"];
    let mut hits: Vec<(Value, RowKey, Value)> = cells
        .iter()
        .filter(|c| c.key.column.as_str() == "BASE")
        .filter(|c| c.body.fields()["driver_uuid"] == q.shard_value)
        .filter(|c| {
            q.filters.iter().all(|f| {
                let v = &c.body.fields()[&f.field];
                // Canonical timestamps sort as text; ids are integers.
                let cmp = |w: &Value| match (v, w) {
                    (Value::String(a), Value::String(b)) => a.cmp(b),
                    (a, b) => a.as_i64().unwrap().cmp(&b.as_i64().unwrap()),
                };
                match f.op {
                    FilterOp::Eq => cmp(&f.value).is_eq(),
                    FilterOp::Lt => cmp(&f.value).is_lt(),
                    FilterOp::Le => cmp(&f.value).is_le(),
                    FilterOp::Gt => cmp(&f.value).is_gt(),
                    FilterOp::Ge => cmp(&f.value).is_ge(),
                    FilterOp::In => f.value.as_array().unwrap().iter().any(|w| cmp(w).is_eq()),
                }
            })
        })
        .map(|c| {
            let entry: serde_json::Map<String, Value> = fields
                .iter()
                .map(|f| (f.to_string(), c.body.fields()[*f].clone()))
                .collect();
            (
                c.body.fields()["requested_at"].clone(),
                c.key.row_key,
                Value::Object(entry),
            )
        })
        .collect();
    hits.sort_by(|a, b| a.0.as_str().cmp(&b.0.as_str()).then(a.1.cmp(&b.1)));
    if q.descending {
        hits.reverse();
    }
    hits.into_iter()
        .take(q.limit)
        .map(|(_, r, e)| (r, e))
        .collect()
}

#[tokio::test]
async fn index_queries_match_a_brute_force_filter() {
    let db = LegacyDb::trips().await;
    legacy::trips::seed(&db.pool, "public", "uuid", 4000, 5, |_| {})
        .await
        .unwrap();
    let store = db.store().await;
    let cells = scan_all(&store, 1000).await;
    // Drivers by trip count: the busiest, a middling one, the quietest.
    let mut trips: BTreeMap<String, usize> = BTreeMap::new();
    for c in cells.iter().filter(|c| c.key.column.as_str() == "BASE") {
        *trips
            .entry(c.body.fields()["driver_uuid"].as_str().unwrap().to_string())
            .or_default() += 1;
    }
    let mut drivers: Vec<(usize, String)> = trips.into_iter().map(|(d, n)| (n, d)).collect();
    drivers.sort();
    assert!(
        drivers.last().unwrap().0 > 20,
        "the seed is not skewed: {:?}",
        drivers.last()
    );
    let picks = [
        &drivers[drivers.len() - 1],
        &drivers[drivers.len() / 2],
        &drivers[0],
    ];

    let mut checked = 0;
    for (_, driver) in picks {
        for (filters, descending, limit) in [
            (vec![], false, 1000),
            (vec![], true, 5),
            (
                vec![
                    Filter {
                        field: "status".into(),
                        op: FilterOp::Eq,
                        value: json!("completed"),
                    },
                    Filter {
                        field: "requested_at".into(),
                        op: FilterOp::Ge,
                        value: json!("2014-01-01T12:00:00.000000Z"),
                    },
                ],
                true,
                50,
            ),
            (
                vec![
                    Filter {
                        field: "city_id".into(),
                        op: FilterOp::In,
                        value: json!([1, 2, 3, 4]),
                    },
                    Filter {
                        field: "requested_at".into(),
                        op: FilterOp::Lt,
                        value: json!("2014-01-01T20:00:00+02:00"),
                    },
                ],
                false,
                1000,
            ),
            (
                vec![Filter {
                    field: "city_id".into(),
                    op: FilterOp::Gt,
                    value: json!(10),
                }],
                false,
                3,
            ),
        ] {
            let mut q = IndexQuery {
                index: "trips_by_driver".into(),
                shard_value: json!(driver),
                filters,
                order_by: Some("requested_at".into()),
                descending,
                limit,
            };
            let got: Vec<(RowKey, Value)> = store
                .query_index(&q, ReadFrom::Master)
                .await
                .unwrap()
                .into_iter()
                .map(|e| (e.row_key, e.fields.to_value()))
                .collect();
            // The brute force compares canonical text: give it the
            // canonical form of the offset timestamp.
            for f in &mut q.filters {
                if f.value == json!("2014-01-01T20:00:00+02:00") {
                    f.value = json!("2014-01-01T18:00:00.000000Z");
                }
            }
            assert_eq!(got, brute_force(&cells, &q), "{q:?}");
            checked += got.len();
        }
    }
    assert!(checked > 50, "the queries found almost nothing ({checked})");
    store.close().await;
}
