//! The change log: `get_cells_for_shard` order, paging and minion reads.

use std::collections::HashSet;

use schemaless::{CellStore, Error, ReadFrom, StoredCell};
use serde_json::json;

use crate::harness::{cell, Instance};

async fn whole_log(t: &Instance, shard: u32, page: usize, from: ReadFrom) -> Vec<StoredCell> {
    let mut after = 0;
    let mut all = Vec::new();
    loop {
        let p = t
            .store
            .get_cells_for_shard(shard, after, page, from)
            .await
            .unwrap();
        assert!(p.cells.len() <= page);
        if p.cells.is_empty() {
            assert_eq!(
                p.next, after,
                "an empty page leaves the position where it was"
            );
            return all;
        }
        assert_eq!(p.next, p.cells.last().unwrap().added_id);
        after = p.next;
        all.extend(p.cells);
    }
}

#[tokio::test]
async fn the_log_pages_through_every_cell_once_in_added_id_order() {
    let t = Instance::new(4).await;
    let mut written = HashSet::new();
    for round in 0..5 {
        let batch: Vec<_> = (0..60)
            .map(|i| cell(i, "BASE", round, json!({"round": round, "i": i as u64})))
            .collect();
        for c in &batch {
            written.insert(c.key.clone());
        }
        t.store.put_cells(batch).await.unwrap();
    }
    let mut seen = HashSet::new();
    for shard in 0..4 {
        let log = whole_log(&t, shard, 7, ReadFrom::Master).await;
        assert!(
            log.windows(2).all(|w| w[0].added_id < w[1].added_id),
            "added_id order"
        );
        // Within a shard, a later round's cell of a row comes after its
        // earlier rounds: the log is the order of writing.
        for w in log.windows(2) {
            if w[0].cell.key.row_key == w[1].cell.key.row_key {
                assert!(w[0].cell.key.ref_key < w[1].cell.key.ref_key);
            }
        }
        for c in log {
            assert_eq!(schemaless::routing::shard_of(&c.cell.key.row_key, 4), shard);
            assert!(
                seen.insert(c.cell.key.clone()),
                "{} listed twice",
                c.cell.key
            );
        }
    }
    assert_eq!(seen, written);
}

#[tokio::test]
async fn a_minion_serves_the_same_log_after_catching_up() {
    let t = Instance::new(4).await;
    let batch: Vec<_> = (0..120)
        .map(|i| cell(500 + i, "STATUS", 1, json!({"i": i as u64})))
        .collect();
    t.store.put_cells(batch).await.unwrap();
    t.wait_for_minions().await;
    for shard in 0..4 {
        let master = whole_log(&t, shard, 10, ReadFrom::Master).await;
        let minion = whole_log(&t, shard, 10, ReadFrom::Minion).await;
        assert!(!master.is_empty());
        assert_eq!(master, minion, "shard {shard}");
    }
}

#[tokio::test]
async fn an_unknown_shard_is_an_error() {
    let t = Instance::new(4).await;
    match t
        .store
        .get_cells_for_shard(4, 0, 10, ReadFrom::Master)
        .await
    {
        Err(Error::NoSuchShard {
            shard: 4,
            shard_count: 4,
        }) => {}
        other => panic!("expected NoSuchShard, got {other:?}"),
    }
}

/// Page reads of many shards of one master, from many offsets at once,
/// go in fewer statements than pages, and each reader gets exactly its
/// own shard's page from its own offset (two readers of one shard
/// included), as when read alone.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_page_reads_are_combined_and_each_gets_its_own_page() {
    let t = Instance::new(8).await;
    for round in 0..4 {
        let batch: Vec<_> = (0..120)
            .map(|i| cell(i, "BASE", round, json!({"round": round, "i": i as u64})))
            .collect();
        t.store.put_cells(batch).await.unwrap();
    }
    let topology = t.store.topology();
    let master = topology.clusters[0].master();
    let shards: Vec<u32> = topology.shards_of(0);
    // Each shard's whole log, read alone, page by page.
    let mut logs = std::collections::HashMap::new();
    for &shard in &shards {
        logs.insert(shard, whole_log(&t, shard, 1000, ReadFrom::Master).await);
    }
    let mut asks = Vec::new();
    for _ in 0..3 {
        for &shard in &shards {
            let log = &logs[&shard];
            for skip in [0, log.len() / 2] {
                let after = if skip == 0 { 0 } else { log[skip - 1].added_id };
                asks.push((shard, after, 7usize));
            }
        }
    }
    let before = t.store.page_stats();
    let answers = futures::future::join_all(asks.iter().map(|&(shard, after, limit)| {
        let (store, master) = (t.store.clone(), master.clone());
        async move { store.read_changes(&master, shard, after, limit).await }
    }))
    .await;
    let after_stats = t.store.page_stats();
    for (&(shard, after, limit), answer) in asks.iter().zip(answers) {
        let (cells, cut) = answer.unwrap();
        let expected: Vec<u64> = logs[&shard]
            .iter()
            .filter(|c| c.added_id > after)
            .take(limit)
            .map(|c| c.added_id)
            .collect();
        let got: Vec<u64> = cells.iter().map(|c| c.added_id).collect();
        assert_eq!(got, expected, "shard {shard} after {after}");
        assert!(cells.iter().all(|c| schemaless::routing::shard_of(
            &c.cell.key.row_key,
            topology.shard_count
        ) == shard));
        assert_eq!(cut, expected.len() == limit);
    }
    let pages = after_stats.pages - before.pages;
    let statements = after_stats.statements - before.statements;
    assert_eq!(pages, asks.len() as u64);
    assert!(
        statements < pages,
        "{} concurrent page reads took {statements} statements",
        asks.len()
    );
}
