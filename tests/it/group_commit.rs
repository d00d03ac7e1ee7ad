//! Group commit: concurrent `put_cells` calls combined into one transaction
//! per master are each answered as if they had been written alone, and a
//! call cancelled at any point loses no other call's cells.

use std::time::Duration;

use schemaless::{Cell, CellStore, Conflict, ReadFrom, WriteOutcome};
use serde_json::json;

use crate::harness::{cell, row_number, Instance};

const ONE_LANE: &str = "[storage]\nwrite_lanes = 1\n";

/// Every cell of the instance, over all shards.
async fn stored(t: &Instance, shards: u32) -> Vec<schemaless::StoredCell> {
    let mut all = Vec::new();
    for shard in 0..shards {
        let page = t
            .store
            .get_cells_for_shard(shard, 0, 100_000, ReadFrom::Master)
            .await
            .unwrap();
        all.extend(page.cells);
    }
    all
}

#[tokio::test]
async fn concurrent_calls_are_combined_and_each_is_answered_for_its_own_cells() {
    let t = Instance::with_limits(8, ONE_LANE).await;
    let before = t.store.commit_stats();
    let calls: Vec<_> = (0..24u128)
        .map(|c| {
            let store = t.store.clone();
            let batch: Vec<Cell> = (0..50u128)
                .map(|i| {
                    cell(
                        c * 1000 + i,
                        "BASE",
                        1,
                        json!({"call": c as u64, "i": i as u64}),
                    )
                })
                .collect();
            tokio::spawn(async move { store.put_cells(batch).await })
        })
        .collect();
    for call in calls {
        let results = call.await.unwrap().expect("no call fails");
        assert_eq!(results.len(), 50);
        assert!(
            results.iter().all(|r| *r == Ok(WriteOutcome::Written)),
            "{results:?}"
        );
    }
    let stats = t.store.commit_stats();
    let (transactions, calls) = (
        stats.transactions - before.transactions,
        stats.calls - before.calls,
    );
    // 24 calls over two masters are 48 parts; with one lane per master,
    // parts that arrived while it was busy went together.
    assert_eq!(calls, 48);
    assert!(
        transactions < calls,
        "{transactions} transactions for {calls} calls"
    );
    let all = stored(&t, 8).await;
    assert_eq!(all.len(), 24 * 50);
    for c in all {
        let n = row_number(&c.cell.key.row_key);
        assert_eq!(c.cell.body.fields()["call"], json!((n / 1000) as u64));
        assert_eq!(c.cell.body.fields()["i"], json!((n % 1000) as u64));
    }
}

#[tokio::test]
async fn an_existing_cell_in_a_combined_transaction_sends_each_call_the_careful_way() {
    let t = Instance::with_limits(8, ONE_LANE).await;
    // Cells already stored: one call rewrites one unchanged (already
    // present), another writes one with a different body (a conflict).
    t.store
        .put_cells(vec![
            cell(1, "BASE", 1, json!({"v": "kept"})),
            cell(2, "BASE", 1, json!({"v": "first"})),
        ])
        .await
        .unwrap();
    let mut calls = Vec::new();
    for c in 0..16u128 {
        let mut batch: Vec<Cell> = (0..20u128)
            .map(|i| cell(10_000 + c * 100 + i, "BASE", 1, json!({"c": c as u64})))
            .collect();
        match c {
            3 => batch.push(cell(1, "BASE", 1, json!({"v": "kept"}))),
            7 => batch.push(cell(2, "BASE", 1, json!({"v": "second"}))),
            _ => {}
        }
        let store = t.store.clone();
        calls.push(tokio::spawn(
            async move { (c, store.put_cells(batch).await) },
        ));
    }
    for call in calls {
        let (c, results) = call.await.unwrap();
        let results = results.expect("no call fails");
        for r in &results[..20] {
            assert_eq!(*r, Ok(WriteOutcome::Written), "call {c}");
        }
        match c {
            3 => assert_eq!(results[20], Ok(WriteOutcome::AlreadyPresent)),
            7 => assert_eq!(
                results[20],
                Err(Conflict {
                    key: cell(2, "BASE", 1, json!({})).key
                })
            ),
            _ => assert_eq!(results.len(), 20),
        }
    }
    let all = stored(&t, 8).await;
    assert_eq!(all.len(), 2 + 16 * 20);
    let second = all
        .iter()
        .find(|c| c.cell.key == cell(2, "BASE", 1, json!({})).key)
        .unwrap();
    assert_eq!(
        second.cell.body.fields()["v"],
        json!("first"),
        "never overwritten"
    );
}

#[tokio::test]
async fn cancelled_calls_leave_no_lane_taken_and_lose_no_other_call() {
    let t = Instance::with_limits(8, ONE_LANE).await;
    let mut calls = Vec::new();
    for c in 0..40u128 {
        let store = t.store.clone();
        let batch: Vec<Cell> = (0..30u128)
            .map(|i| cell(c * 1000 + i, "BASE", 1, json!({"c": c as u64})))
            .collect();
        calls.push((c, tokio::spawn(async move { store.put_cells(batch).await })));
    }
    // Every third call is cancelled at a different moment: queued,
    // leading, or done already.
    let mut kept = Vec::new();
    for (c, call) in calls {
        if c % 3 == 0 {
            tokio::time::sleep(Duration::from_micros(300 * (c as u64 % 7))).await;
            call.abort();
        } else {
            kept.push((c, call));
        }
    }
    for (c, call) in kept {
        let results = tokio::time::timeout(Duration::from_secs(60), call)
            .await
            .unwrap_or_else(|_| panic!("call {c} never answered"))
            .unwrap()
            .expect("no call fails");
        // A call whose leader was cancelled after sending its
        // transaction finds its cells written by it: `AlreadyPresent`,
        // the same cells (checked below), never a conflict.
        assert!(
            results
                .iter()
                .all(|r| matches!(r, Ok(WriteOutcome::Written | WriteOutcome::AlreadyPresent))),
            "call {c}: {results:?}"
        );
    }
    // The lanes are free: new writes go through.
    let after = tokio::time::timeout(
        Duration::from_secs(30),
        t.store.put_cells(vec![cell(999_999, "BASE", 1, json!({}))]),
    )
    .await
    .expect("a write after the cancellations is answered")
    .unwrap();
    assert_eq!(after, vec![Ok(WriteOutcome::Written)]);
    let all = stored(&t, 8).await;
    for c in (0..40u128).filter(|c| c % 3 != 0) {
        let mine: Vec<_> = all
            .iter()
            .filter(|s| row_number(&s.cell.key.row_key) / 1000 == c)
            .collect();
        assert_eq!(mine.len(), 30, "call {c}'s cells");
        assert!(
            mine.iter()
                .all(|s| s.cell.body.fields()["c"] == json!(c as u64)),
            "call {c}'s own bodies"
        );
    }
}
