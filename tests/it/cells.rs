//! Cell API semantics on MariaDB.

use schemaless::{CellKey, CellStore, Conflict, Error, ReadFrom, WriteOutcome};
use serde_json::json;

use crate::harness::{cell, column, row, Instance};

#[tokio::test]
async fn the_latest_cell_is_the_highest_ref_key_whatever_the_write_order() {
    let t = Instance::new(8).await;
    for ref_key in [1, 3, 2] {
        let put = t
            .store
            .put_cell(cell(1, "BASE", ref_key, json!({"version": ref_key})))
            .await
            .unwrap();
        assert_eq!(put, WriteOutcome::Written);
    }
    let latest = t
        .store
        .get_cell_latest(&row(1), &column("BASE"), ReadFrom::Master)
        .await
        .unwrap()
        .expect("a latest cell");
    assert_eq!(latest.cell, cell(1, "BASE", 3, json!({"version": 3})));

    let key = cell(1, "BASE", 2, json!({})).key;
    let second = t
        .store
        .get_cell(&key, ReadFrom::Master)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(second.cell.body.fields()["version"], json!(2));

    let absent = CellKey {
        ref_key: schemaless::RefKey::new(4).unwrap(),
        ..key
    };
    assert_eq!(
        t.store.get_cell(&absent, ReadFrom::Master).await.unwrap(),
        None
    );
    assert_eq!(
        t.store
            .get_cell_latest(&row(2), &column("BASE"), ReadFrom::Master)
            .await
            .unwrap(),
        None
    );
}

#[tokio::test]
async fn a_row_reads_back_the_latest_cell_of_each_of_many_columns() {
    let t = Instance::new(8).await;
    let columns = [
        "BASE",
        "STATUS",
        "NOTES",
        "billing_1",
        "fare_adj",
        "Zeta",
        "a",
    ];
    let mut batch = Vec::new();
    for (i, col) in columns.iter().enumerate() {
        for ref_key in 0..=(i as i64) {
            batch.push(cell(
                7,
                col,
                ref_key,
                json!({"col": col, "ref": ref_key, "text": "ünïcødé ✓"}),
            ));
        }
    }
    // Another row in the same store must not leak into this one.
    batch.push(cell(8, "BASE", 99, json!({"other": true})));
    let results = t.store.put_cells(batch).await.unwrap();
    assert!(results.iter().all(|r| *r == Ok(WriteOutcome::Written)));

    let cells = t
        .store
        .get_cells_for_row(&row(7), ReadFrom::Master)
        .await
        .unwrap();
    let mut expected: Vec<(String, i64)> = columns
        .iter()
        .enumerate()
        .map(|(i, c)| (c.to_string(), i as i64))
        .collect();
    expected.sort();
    let got: Vec<(String, i64)> = cells
        .iter()
        .map(|c| (c.cell.key.column.to_string(), c.cell.key.ref_key.get()))
        .collect();
    assert_eq!(got, expected);
    for c in &cells {
        assert_eq!(c.cell.body.fields()["text"], json!("ünïcødé ✓"));
        assert_eq!(c.cell.key.row_key, row(7));
    }
}

#[tokio::test]
async fn rewrites_are_idempotent_and_conflicts_change_nothing() {
    let t = Instance::new(8).await;
    let original = cell(3, "BASE", 1, json!({"fare": "12.50", "status": "done"}));
    assert_eq!(
        t.store.put_cell(original.clone()).await.unwrap(),
        WriteOutcome::Written
    );
    assert_eq!(
        t.store.put_cell(original.clone()).await.unwrap(),
        WriteOutcome::AlreadyPresent
    );
    let changed = cell(3, "BASE", 1, json!({"fare": "99.00", "status": "done"}));
    match t.store.put_cell(changed).await {
        Err(Error::Conflict { key }) => assert_eq!(key, original.key),
        other => panic!("expected a conflict, got {other:?}"),
    }
    let stored = t
        .store
        .get_cell(&original.key, ReadFrom::Master)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(stored.cell, original, "the stored cell is unchanged");
    // Exactly one copy exists in the change log.
    let shard = schemaless::routing::shard_of(&row(3), 8);
    let page = t
        .store
        .get_cells_for_shard(shard, 0, 100, ReadFrom::Master)
        .await
        .unwrap();
    assert_eq!(page.cells.len(), 1);
}

#[tokio::test]
async fn a_mixed_batch_reports_each_cell() {
    let t = Instance::new(8).await;
    let existing = cell(10, "BASE", 1, json!({"v": 1}));
    let other_existing = cell(11, "STATUS", 5, json!({"s": "paid"}));
    t.store
        .put_cells(vec![existing.clone(), other_existing.clone()])
        .await
        .unwrap();

    let batch = vec![
        cell(12, "BASE", 1, json!({"new": 1})),          // new
        existing.clone(),                                // duplicate of a stored cell
        cell(11, "STATUS", 5, json!({"s": "refunded"})), // conflicts with a stored cell
        cell(13, "NOTES", 1, json!({"n": "a"})),         // new ...
        cell(13, "NOTES", 1, json!({"n": "a"})),         // ... and its copy in the same batch
        cell(14, "NOTES", 2, json!({"n": "b"})),         // new ...
        cell(14, "NOTES", 2, json!({"n": "c"})),         // ... and a conflicting copy
    ];
    let results = t.store.put_cells(batch).await.unwrap();
    assert_eq!(
        results,
        vec![
            Ok(WriteOutcome::Written),
            Ok(WriteOutcome::AlreadyPresent),
            Err(Conflict {
                key: other_existing.key.clone()
            }),
            Ok(WriteOutcome::Written),
            Ok(WriteOutcome::AlreadyPresent),
            Ok(WriteOutcome::Written),
            Err(Conflict {
                key: cell(14, "NOTES", 2, json!({})).key
            }),
        ]
    );
    let stored = t
        .store
        .get_cell(&other_existing.key, ReadFrom::Master)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(stored.cell, other_existing);
    let first_wins = t
        .store
        .get_cell(&cell(14, "NOTES", 2, json!({})).key, ReadFrom::Master)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(first_wins.cell.body.fields()["n"], json!("b"));
}

#[tokio::test]
async fn concurrent_writers_of_the_same_cells_agree_on_one_written_copy() {
    let t = Instance::new(4).await;
    let batch: Vec<_> = (0..200)
        .map(|i| cell(1000 + i, "BASE", 1, json!({"i": i as u64})))
        .collect();
    // Each writer sends the cells in its own order: overlapping batches
    // must wait for each other, never deadlock or fail.
    let writers: Vec<_> = (0..6u64)
        .map(|w| {
            let store = t.store.clone();
            let mut order: Vec<usize> = (0..batch.len()).collect();
            order.sort_by_key(|i| (*i as u64 * (2 * w + 1) * 7919) % 211);
            let shuffled: Vec<_> = order.iter().map(|&i| batch[i].clone()).collect();
            tokio::spawn(async move { (order, store.put_cells(shuffled).await) })
        })
        .collect();
    let mut written = vec![0; batch.len()];
    for w in writers {
        let (order, results) = w.await.unwrap();
        let results = results.expect("no writer fails");
        for (position, r) in results.iter().enumerate() {
            let i = order[position];
            match r {
                Ok(WriteOutcome::Written) => written[i] += 1,
                Ok(WriteOutcome::AlreadyPresent) => {}
                other => panic!("cell {i}: {other:?}"),
            }
        }
    }
    assert!(
        written.iter().all(|&n| n == 1),
        "each cell written exactly once: {written:?}"
    );
    let mut total = 0;
    for shard in 0..4 {
        total += t
            .store
            .get_cells_for_shard(shard, 0, 1000, ReadFrom::Master)
            .await
            .unwrap()
            .cells
            .len();
    }
    assert_eq!(total, batch.len());
}

#[tokio::test]
async fn reads_agree_when_too_many_shards_per_node_to_prepare() {
    // 1100 shards over two clusters is 550 per node: past what every
    // connection can keep prepared, so point reads go as text.
    let t = Instance::new(1100).await;
    assert!(!t.store.topology().prepared_reads());
    let cells: Vec<_> = (0..300)
        .map(|i| cell(2000 + i, "BASE", 1 + (i as i64 % 3), json!({"i": i as u64})))
        .collect();
    t.store.put_cells(cells.clone()).await.unwrap();
    for c in &cells {
        let got = t
            .store
            .get_cell(&c.key, ReadFrom::Master)
            .await
            .unwrap()
            .unwrap();
        assert_eq!(got.cell, *c);
        let latest = t
            .store
            .get_cell_latest(&c.key.row_key, &c.key.column, ReadFrom::Master)
            .await
            .unwrap()
            .unwrap();
        assert_eq!(latest.cell, *c);
    }
    let small = Instance::new(8).await;
    assert!(small.store.topology().prepared_reads());
}

/// A batch whose statements together exceed the server's
/// `max_allowed_packet` (1,000 cells of 20 KB of incompressible text,
/// about 30 MB as hex) is cut into statements that fit, on the fast path
/// and on the careful path, and nothing is lost.
#[tokio::test]
async fn a_batch_larger_than_the_packet_limit_is_written_whole() {
    use rand::{Rng, SeedableRng};
    let t = Instance::new(4).await;
    let packet: u64 = sqlx::query_scalar("SELECT @@max_allowed_packet")
        .fetch_one(&t.store.topology().cluster(0).unwrap().master().pool)
        .await
        .unwrap();
    let mut rng = rand::rngs::StdRng::seed_from_u64(7);
    let cells: Vec<_> = (0..1000u128)
        .map(|i| {
            let text: String = (0..20_000)
                .map(|_| rng.random_range(b'!'..=b'~') as char)
                .collect();
            cell(i, "BIG", 1, json!({ "text": text }))
        })
        .collect();
    let wire: usize = cells.iter().map(|c| c.body.json_len() * 2).sum();
    assert!(
        wire as u64 > packet,
        "the test must exceed the packet limit ({wire} <= {packet})"
    );
    let results = t.store.put_cells(cells.clone()).await.unwrap();
    assert!(results
        .iter()
        .all(|r| matches!(r, Ok(WriteOutcome::Written))));
    // Again, with one new cell among them: the careful path.
    let mut again = cells[..999].to_vec();
    again.push(cell(5000, "BIG", 1, json!({"text": "new"})));
    let results = t.store.put_cells(again).await.unwrap();
    assert_eq!(
        results
            .iter()
            .filter(|r| matches!(r, Ok(WriteOutcome::AlreadyPresent)))
            .count(),
        999
    );
    assert!(matches!(results[999], Ok(WriteOutcome::Written)));
    for c in cells.iter().step_by(97) {
        let got = t
            .store
            .get_cell(&c.key, ReadFrom::Master)
            .await
            .unwrap()
            .unwrap();
        assert_eq!(got.cell.body, c.body);
    }
}

/// A repair replaces only the ref keys it read: a version written above
/// them meanwhile (a newer cell relayed while the repair compared) is
/// kept, not deleted with the cells it did see.
#[tokio::test]
async fn a_repair_replaces_only_the_ref_keys_it_read() {
    let t = Instance::new(4).await;
    let versions: Vec<_> = (1..=4)
        .map(|r| cell(42, "BASE", r, json!({ "v": r })))
        .collect();
    t.store.put_cells(versions).await.unwrap();
    let fixed = cell(42, "BASE", 2, json!({"v": "fixed"}));
    t.store
        .replace_cells(&row(42), &column("BASE"), 2, 3, vec![fixed.clone()])
        .await
        .unwrap();
    let left: Vec<(i64, serde_json::Value)> = t
        .store
        .get_column_cells(&[row(42)], &column("BASE"), ReadFrom::Master)
        .await
        .unwrap()
        .into_iter()
        .map(|c| (c.cell.key.ref_key.get(), c.cell.body.fields()["v"].clone()))
        .collect();
    assert_eq!(
        left,
        vec![(1, json!(1)), (2, json!("fixed")), (4, json!(4))],
        "ref 3 replaced away, ref 4 (above what was read) kept"
    );
    let outside = cell(42, "BASE", 7, json!({"v": 7}));
    let err = t
        .store
        .replace_cells(&row(42), &column("BASE"), 2, 3, vec![outside])
        .await
        .unwrap_err();
    assert!(
        err.to_string().contains("outside the replaced ref keys"),
        "{err}"
    );
}
