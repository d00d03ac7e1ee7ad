//! Shard moves, the copy so far: a shard copied to another cluster while
//! writers keep writing it ends, once they stop and one more pass runs,
//! equal to the source row for row (added_ids included); a copy started
//! again over a partial one ends the same; a copy to the shard's own
//! cluster is refused.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

use schemaless::mysql::backup::BackupError;
use schemaless::mysql::moves::ShardCopy;
use schemaless::CellStore;

use crate::harness::{cell, row, wait_past, Instance};

fn rows_on(shard: u32, shard_count: u32) -> impl Iterator<Item = u128> {
    (0u128..).filter(move |&n| schemaless::routing::shard_of(&row(n), shard_count) == shard)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_shard_copied_under_writes_ends_equal_to_its_source() {
    let t = Instance::new(8).await;
    let shard = 1;
    let topology = t.store.topology();
    assert_eq!(topology.cluster(shard).unwrap().name, "a");
    let first: Vec<_> = rows_on(shard, 8)
        .take(500)
        .map(|n| cell(n, "BASE", 1, serde_json::json!({ "n": n as u64 })))
        .collect();
    for batch in first.chunks(100) {
        for r in t.store.put_cells(batch.to_vec()).await.unwrap() {
            r.unwrap();
        }
    }

    assert!(matches!(
        ShardCopy::start(topology, shard, 0).await,
        Err(BackupError::Refused(_))
    ));

    let stop = Arc::new(AtomicBool::new(false));
    let progress = Arc::new(AtomicU64::new(0));
    let writers: Vec<_> = (0..2usize)
        .map(|w| {
            let store = t.store.clone();
            let stop = stop.clone();
            let progress = progress.clone();
            tokio::spawn(async move {
                let mut rows = rows_on(shard, 8).skip(1000 + w * 100_000);
                let mut acked = 0u64;
                while !stop.load(Ordering::Relaxed) {
                    let batch: Vec<_> = rows
                        .by_ref()
                        .take(5)
                        .map(|n| cell(n, "LIVE", 1, serde_json::json!({ "w": w as u64 })))
                        .collect();
                    for r in store.put_cells(batch).await.unwrap() {
                        r.unwrap();
                        acked += 1;
                    }
                    progress.fetch_add(5, Ordering::Relaxed);
                }
                acked
            })
        })
        .collect();
    wait_past(&progress, 0, "the writers' first cells").await;
    let mut copy = ShardCopy::start(topology, shard, 1).await.unwrap();
    assert!(
        copy.copied() >= 500,
        "{} copied by the snapshot",
        copy.copied()
    );
    // Passes while the writers go on: each after more cells were written.
    for _ in 0..5 {
        let seen = progress.load(Ordering::Relaxed);
        copy.catch_up().await.unwrap();
        wait_past(&progress, seen, "more writes between passes").await;
    }
    stop.store(true, Ordering::Relaxed);
    let mut acked = 0;
    for w in writers {
        acked += w.await.unwrap();
    }
    assert!(acked > 0, "the writers wrote nothing during the copy");
    // Writes stopped (as a fence stops them): one more pass is exact.
    copy.catch_up().await.unwrap();
    let (source, target) = copy.digests().await.unwrap();
    assert_eq!(
        source.0,
        500 + acked,
        "the source holds every acknowledged cell"
    );
    assert_eq!(source, target, "the copy differs from its source");
    assert_eq!(copy.catch_up().await.unwrap(), 0);

    // Started again over the copy (a mover that crashed): the same end.
    let mut again = ShardCopy::start(topology, shard, 1).await.unwrap();
    again.catch_up().await.unwrap();
    let (source, target) = again.digests().await.unwrap();
    assert_eq!(source, target);
    assert_eq!(again.position(), copy.position());
}
