//! Group commit: the fast path of `put_cells`, combined per master.
//!
//! A master runs at most `storage.write_lanes` of this process's write
//! transactions at a time. A call that finds a lane free writes at once: its
//! latency is what it was alone. A call that finds every lane busy waits,
//! and the next transaction takes it together with every other call that
//! waited meanwhile: one multi-row `INSERT` per shard for all of them, one
//! commit. MariaDB's cost per cell falls steeply with the rows per
//! statement and per transaction (measured on the dev cluster, 16-row
//! statements cost the master about 19 µs a cell and its minions 12 µs
//! each; 100-row statements 14 µs and 10 µs), so under load the servers do
//! less work for the same cells, and the client sends fewer, larger
//! packets.
//!
//! The work runs on the callers' own tasks, with no task of its own: the
//! caller that takes a lane leads, writing its cells and those of the
//! callers waiting; when it is done it answers them and passes the lane to
//! the next caller that waited too late to be taken. Callers may be
//! cancelled at any point:
//! - a lane is a value ([`Lane`]) whose drop frees it or hands it on, so
//!   it cannot leak, even when it is dropped in a message never read;
//! - a waiting caller keeps its cells (shared with the leader), so if its
//!   leader is cancelled mid-write it is answered by the channel closing
//!   and writes them on its own (the careful path, which finds any of them
//!   that landed and answers `AlreadyPresent`).
//!
//! Semantics are those of one call's fast path: plain `INSERT`s, so a cell
//! whose address exists fails the transaction, which is rolled back whole;
//! then every call in it takes the careful path on its own (compare, insert
//! what is missing). Nothing is ignored or overwritten. Rows are merged per
//! shard, shards ascending and rows sorted by address, the lock order every
//! writer keeps.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use super::combine::{Cap, Combined, Combiner};
use super::sql::{InsertRow, InsertTransaction};
use super::store::{run_transaction_reusing, MySqlStore, Pending};
use crate::cell::now_micros;
use crate::error::{Error, Result};

/// One call's part of a batch for one master: its shard groups, shared
/// with the transaction that carries them.
pub(super) type Groups = Arc<Vec<(u32, Vec<Pending>)>>;

/// The most hex text one combined transaction carries besides its
/// leader's own cells (which always go): a transaction holds its row locks
/// until it commits, and waiting callers should not wait for an unbounded
/// one.
const MAX_COMBINED_TEXT: usize = 16 << 20;

/// What became of a call's cells.
pub(super) enum Outcome {
    /// All of them are committed.
    Written,
    /// None of them was written by the fast path, for a reason the careful
    /// path settles: an address exists, a lock conflict, a transaction
    /// combined with other calls failed, or its leader was cancelled. Some
    /// may have landed (a cancelled leader); the careful path finds them.
    Alone,
    /// The master failed while writing them (down, frozen, no longer the
    /// master): whether they landed is unknown.
    Failed(Error),
}

/// The group commit of one cluster's master.
pub(super) struct Committer {
    calls: Arc<Combiner<Groups, Outcome>>,
    /// The cluster's name, for metrics.
    cluster: String,
    /// Fast-path transactions sent, and the calls they carried.
    transactions: AtomicU64,
    calls_carried: AtomicU64,
    /// Text buffers of finished transactions, for the next ones.
    texts: Mutex<Vec<String>>,
}

/// How much the group commit combined: fast-path transactions sent and the
/// `put_cells` calls (parts for one master) they carried, over every master.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CommitStats {
    /// Transactions.
    pub transactions: u64,
    /// Calls.
    pub calls: u64,
}

impl Committer {
    pub(super) fn new(lanes: usize, cluster: &str) -> Arc<Committer> {
        Arc::new(Committer {
            calls: Combiner::new(lanes),
            cluster: cluster.to_string(),
            transactions: AtomicU64::new(0),
            calls_carried: AtomicU64::new(0),
            texts: Mutex::new(Vec::new()),
        })
    }

    pub(super) fn stats(&self) -> CommitStats {
        CommitStats {
            transactions: self.transactions.load(Ordering::Relaxed),
            calls: self.calls_carried.load(Ordering::Relaxed),
        }
    }

    /// Writes one call's groups for this master, alone or combined with
    /// the calls waiting with it.
    pub(super) async fn write(
        &self,
        store: &MySqlStore,
        cluster: usize,
        groups: Groups,
    ) -> Outcome {
        let cap = Cap {
            weight: hex_text,
            max: MAX_COMBINED_TEXT,
        };
        let run = |all: Vec<Groups>| self.run(store, cluster, all);
        match self.calls.submit(groups, cap, run).await {
            Combined::Answered(outcome) => outcome,
            // Taken by a leader that was cancelled before it answered.
            Combined::Abandoned => Outcome::Alone,
        }
    }

    /// One transaction for these calls' cells, and each call's outcome.
    async fn run(&self, store: &MySqlStore, cluster: usize, all: Vec<Groups>) -> Vec<Outcome> {
        let calls = all.len();
        self.transactions.fetch_add(1, Ordering::Relaxed);
        self.calls_carried
            .fetch_add(calls as u64, Ordering::Relaxed);
        metrics::counter!("mezzanine_schemaless_write_transactions_total", "cluster" => self.cluster.clone())
            .increment(1);
        metrics::counter!("mezzanine_schemaless_write_calls_total", "cluster" => self.cluster.clone())
            .increment(calls as u64);
        let combined = calls > 1;
        let each = |outcome: fn() -> Outcome| (0..calls).map(|_| outcome()).collect();
        match self.commit(store, cluster, &all).await {
            Ok(Committed::Yes) => each(|| Outcome::Written),
            Ok(Committed::Overlap) => each(|| Outcome::Alone),
            Err(e) if combined && e.is_unavailable() => {
                let shared: Vec<Outcome> = (1..calls)
                    .map(|_| Outcome::Failed(shared_failure(&e)))
                    .collect();
                std::iter::once(Outcome::Failed(e)).chain(shared).collect()
            }
            // An address that exists, a lock conflict, or (combined) any
            // error that may be one call's own: each writes alone.
            Err(e) if combined || is_settled_alone(&e) => each(|| Outcome::Alone),
            Err(e) => vec![Outcome::Failed(e)],
        }
    }
}

/// What a combined transaction came to, short of failing.
enum Committed {
    /// Every cell is committed.
    Yes,
    /// Two of the calls write one address: nothing was sent, each writes
    /// alone (the careful path decides which copy is written).
    Overlap,
}

/// Whether the careful path settles this failure of a fast-path
/// transaction: an address that exists, or a lock conflict.
fn is_settled_alone(e: &Error) -> bool {
    e.is_unique_violation() || e.is_lock_conflict()
}

/// The failure of a combined transaction, for each caller in it: the node
/// and what happened, retryable as the original is.
fn shared_failure(e: &Error) -> Error {
    match e {
        Error::Timeout { node, after } => Error::Timeout {
            node: node.clone(),
            after: *after,
        },
        Error::Unavailable { node, reason } => Error::Unavailable {
            node: node.clone(),
            reason: reason.clone(),
        },
        Error::Storage { node, source, .. } => Error::NodeFailed {
            node: node.clone(),
            reason: source.to_string(),
        },
        other => Error::NodeFailed {
            node: String::new(),
            reason: other.to_string(),
        },
    }
}

/// Roughly the SQL text these groups make: what the size cap counts.
fn hex_text(groups: &Groups) -> usize {
    groups
        .iter()
        .flat_map(|(_, items)| items.iter())
        .map(|p| 2 * p.encoded.len() + 100)
        .sum()
}

/// The most text buffers a committer keeps, and the largest it keeps.
const KEPT_TEXTS: usize = 4;
const KEPT_TEXT_CAPACITY: usize = 32 << 20;

impl Committer {
    /// One transaction of the cells of `all`, merged per shard.
    async fn commit(
        &self,
        store: &MySqlStore,
        cluster: usize,
        all: &[Groups],
    ) -> Result<Committed> {
        let topology = store.topology();
        let node = topology.clusters[cluster].master();
        let mut shards: BTreeMap<u32, Vec<&Pending>> = BTreeMap::new();
        for groups in all {
            for (shard, items) in groups.iter() {
                shards.entry(*shard).or_default().extend(items.iter());
            }
        }
        let text = all.iter().map(hex_text).sum();
        if all.len() > 1 {
            for items in shards.values_mut() {
                // Stable: a call's own rows are sorted already.
                items.sort_by(|a, b| a.cell.key.cmp(&b.cell.key));
                // Two calls writing one address: the insert would fail anyway.
                if items.windows(2).any(|w| w[0].cell.key == w[1].cell.key) {
                    return Ok(Committed::Overlap);
                }
            }
        }
        let created_at = now_micros();
        let buffer = self.lock_texts().pop().unwrap_or_default();
        let mut transaction = InsertTransaction::reusing(buffer, node.packet_budget(), text);
        for (shard, items) in &shards {
            let database = topology.database(*shard);
            for p in items {
                transaction.row(
                    *shard,
                    &database,
                    &InsertRow {
                        key: &p.cell.key,
                        body: &p.encoded,
                        created_at,
                    },
                );
            }
        }
        let mut spent = Vec::new();
        let result = run_transaction_reusing(&node, transaction.finish(), &mut spent).await;
        let mut texts = self.lock_texts();
        for buffer in spent {
            if texts.len() < KEPT_TEXTS && buffer.capacity() <= KEPT_TEXT_CAPACITY {
                texts.push(buffer);
            }
        }
        drop(texts);
        result?;
        Ok(Committed::Yes)
    }

    fn lock_texts(&self) -> std::sync::MutexGuard<'_, Vec<String>> {
        self.texts.lock().unwrap_or_else(|p| p.into_inner())
    }
}
