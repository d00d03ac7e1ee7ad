//! Triggers on real MariaDB: every cell handled at least once and in
//! added_id order per shard, restarts resume from the offsets, two runners
//! never work one shard at once, failures park or stop.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use schemaless::mysql::trigger::{self, Handler, HandlerResult, Stopped, Trigger};
use schemaless::{Cell, CellStore, MySqlStore, ReadFrom, StoredCell};
use serde_json::json;
use sqlx::AssertSqlSafe;
use tokio_util::sync::CancellationToken;

use crate::harness::{cell, column, Instance};

const SHARDS: u32 = 8;

/// (runner, shard, added_id, cell key) of every cell handled, in order.
type Seen = Arc<Mutex<Vec<(&'static str, u32, u64, String)>>>;

/// Records what it handles; fails on bodies with `"fail": true` while
/// `failing` is set.
struct Recorder {
    runner: &'static str,
    seen: Seen,
    /// shard -> runner working on it right now.
    busy: Arc<Mutex<HashMap<u32, &'static str>>>,
    overlaps: Arc<Mutex<Vec<String>>>,
    failing: Arc<AtomicBool>,
    shard_count: u32,
}

#[async_trait]
impl Handler for Recorder {
    async fn handle(&self, cell: &StoredCell) -> HandlerResult {
        let shard = schemaless::routing::shard_of(&cell.cell.key.row_key, self.shard_count);
        if let Some(other) = self.busy.lock().unwrap().insert(shard, self.runner) {
            self.overlaps
                .lock()
                .unwrap()
                .push(format!("{other} and {} on shard {shard}", self.runner));
        }
        tokio::time::sleep(Duration::from_micros(200)).await;
        self.busy.lock().unwrap().remove(&shard);
        if self.failing.load(Ordering::Relaxed)
            && cell.cell.body.fields().get("fail") == Some(&json!(true))
        {
            return Err(format!("refusing {}", cell.cell.key));
        }
        self.seen.lock().unwrap().push((
            self.runner,
            shard,
            cell.added_id,
            cell.cell.key.to_string(),
        ));
        Ok(())
    }
}

#[derive(Clone, Default)]
struct Record {
    seen: Seen,
    busy: Arc<Mutex<HashMap<u32, &'static str>>>,
    overlaps: Arc<Mutex<Vec<String>>>,
    failing: Arc<AtomicBool>,
}

impl Record {
    fn handler(&self, runner: &'static str) -> Arc<Recorder> {
        Arc::new(Recorder {
            runner,
            seen: self.seen.clone(),
            busy: self.busy.clone(),
            overlaps: self.overlaps.clone(),
            failing: self.failing.clone(),
            shard_count: SHARDS,
        })
    }

    fn keys(&self) -> HashSet<String> {
        self.seen
            .lock()
            .unwrap()
            .iter()
            .map(|s| s.3.clone())
            .collect()
    }
}

fn options() -> config::Triggers {
    config::Triggers {
        batch: 50,
        read_from: config::TriggerRead::Minion,
        max_tries: 3,
        retry_backoff_ms: 1,
        on_failure: config::OnFailure::Park,
        max_parked: 100,
        lease_ms: 1500,
        poll_ms: 20,
        watch_ms: 5,
    }
}

fn start(
    store: &MySqlStore,
    name: &str,
    handler: Arc<dyn Handler>,
    options: config::Triggers,
) -> (
    CancellationToken,
    tokio::task::JoinHandle<schemaless::Result<Stopped>>,
) {
    let trigger = Trigger::new(name, column("BASE"), store.clone(), handler, options).unwrap();
    let cancel = CancellationToken::new();
    let token = cancel.clone();
    (
        cancel,
        tokio::spawn(async move { trigger.run(token).await }),
    )
}

/// Every BASE cell of the store, by key.
async fn base_cells(store: &MySqlStore) -> BTreeMap<String, StoredCell> {
    let mut all = BTreeMap::new();
    for shard in 0..SHARDS {
        let page = store
            .get_cells_for_shard(shard, 0, 100_000, ReadFrom::Master)
            .await
            .unwrap();
        for c in page.cells {
            if c.cell.key.column.as_str() == "BASE" {
                all.insert(c.cell.key.to_string(), c);
            }
        }
    }
    all
}

async fn until(what: &str, mut done: impl FnMut() -> bool) {
    for _ in 0..1500 {
        if done() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    panic!("timed out waiting for {what}");
}

/// Writes from several tasks at once (so commits land out of added_id
/// order) and rewrites existing cells (whose rolled-back fast path leaves
/// permanent holes in the log).
async fn write_load(store: &MySqlStore, from: u128, rows: u128) {
    let mut tasks = Vec::new();
    for w in 0..4u128 {
        let store = store.clone();
        tasks.push(tokio::spawn(async move {
            for chunk in (from + w * rows / 4..from + (w + 1) * rows / 4)
                .collect::<Vec<_>>()
                .chunks(25)
            {
                let mut batch: Vec<Cell> = Vec::new();
                for &r in chunk {
                    batch.push(cell(r, "BASE", 1, json!({"n": r as u64})));
                    batch.push(cell(r, "STATUS", 1, json!({"s": "x"})));
                }
                store.put_cells(batch.clone()).await.unwrap();
                // Half again, plus new cells: the fast path fails on the
                // duplicates and rolls back.
                batch.truncate(10);
                batch.push(cell(chunk[0], "BASE", 2, json!({"n": 0})));
                store.put_cells(batch).await.unwrap();
            }
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_cell_is_handled_in_order_and_a_restart_resumes() {
    let t = Instance::new(SHARDS).await;
    let record = Record::default();
    let (cancel, run) = start(&t.store, "orders", record.handler("a"), options());
    write_load(&t.store, 0, 400).await;
    let expected = base_cells(&t.store).await;
    assert!(expected.len() >= 400);
    until("every BASE cell handled", || {
        expected.keys().all(|k| record.keys().contains(k))
    })
    .await;
    cancel.cancel();
    assert_eq!(run.await.unwrap().unwrap(), Stopped::Cancelled);

    // In added_id order per shard, each exactly once (no restart yet), and
    // with the added_id the store gave it.
    let seen = record.seen.lock().unwrap().clone();
    let mut last: HashMap<u32, u64> = HashMap::new();
    for (_, shard, added_id, key) in &seen {
        assert!(
            last.insert(*shard, *added_id)
                .is_none_or(|prev| prev < *added_id),
            "out of order on shard {shard}"
        );
        assert_eq!(expected[key].added_id, *added_id);
    }
    assert_eq!(seen.len(), expected.len(), "a cell was handled twice");
    let status = trigger::status(&t.store, "orders").await.unwrap();
    assert!(
        status.iter().all(|s| s.owner.is_none() && s.parked == 0),
        "{status:?}"
    );

    // A new runner resumes from the saved offsets: new cells only.
    let before = seen.len();
    let (cancel, run) = start(&t.store, "orders", record.handler("b"), options());
    write_load(&t.store, 1000, 200).await;
    let expected = base_cells(&t.store).await;
    until("the new cells handled", || {
        expected.keys().all(|k| record.keys().contains(k))
    })
    .await;
    cancel.cancel();
    run.await.unwrap().unwrap();
    let again: Vec<_> = record.seen.lock().unwrap()[before..]
        .iter()
        .filter(|s| seen.iter().any(|old| old.3 == s.3))
        .cloned()
        .collect();
    assert!(
        again.is_empty(),
        "the restarted runner handled old cells again: {again:?}"
    );
}

/// Handles cells one by one through its recorder, but says of every batch
/// that a cell past its end failed: a broken handler contract.
struct OutOfRange(Arc<Recorder>);

#[async_trait]
impl Handler for OutOfRange {
    async fn handle(&self, cell: &StoredCell) -> HandlerResult {
        self.0.handle(cell).await
    }

    async fn handle_batch(&self, cells: &[StoredCell]) -> Result<(), (usize, String)> {
        Err((cells.len() + 7, "no such cell".into()))
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_handler_naming_a_cell_outside_its_batch_is_a_handler_error() {
    let t = Instance::new(SHARDS).await;
    let record = Record::default();
    let handler = Arc::new(OutOfRange(record.handler("a")));
    let (cancel, run) = start(&t.store, "liar", handler, options());
    write_load(&t.store, 0, 200).await;
    let expected = base_cells(&t.store).await;
    // Every cell is still handled (each on its own), and the runner is
    // alive: a panic would have ended its task.
    until("every BASE cell handled one by one", || {
        expected.keys().all(|k| record.keys().contains(k)) || run.is_finished()
    })
    .await;
    assert!(!run.is_finished(), "the runner ended: {:?}", run.await);
    cancel.cancel();
    assert_eq!(run.await.unwrap().unwrap(), Stopped::Cancelled);
    let status = trigger::status(&t.store, "liar").await.unwrap();
    assert!(status.iter().all(|s| s.parked == 0), "{status:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_runners_never_share_a_shard_and_take_over_a_dead_ones_shards() {
    let t = Instance::new(SHARDS).await;
    let record = Record::default();
    let (cancel_a, run_a) = start(&t.store, "pair", record.handler("a"), options());
    let (cancel_b, run_b) = start(&t.store, "pair", record.handler("b"), options());
    write_load(&t.store, 0, 300).await;
    let expected = base_cells(&t.store).await;
    for _ in 0..1500 {
        if expected.keys().all(|k| record.keys().contains(k)) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let missing: Vec<_> = expected
        .iter()
        .filter(|(k, _)| !record.keys().contains(*k))
        .map(|(k, c)| (k.clone(), c.added_id))
        .collect();
    eprintln!(
        "missing {missing:?}\nstatus {:?}",
        trigger::status(&t.store, "pair").await.unwrap()
    );
    let owners: Vec<Option<String>> = trigger::status(&t.store, "pair")
        .await
        .unwrap()
        .into_iter()
        .map(|s| s.owner)
        .collect();
    assert!(owners.iter().all(Option::is_some), "{owners:?}");

    // Runner a dies without releasing anything; b takes its shards over
    // once the leases run out, and handles what is written meanwhile.
    run_a.abort();
    let _ = run_a.await;
    drop(cancel_a);
    let after = record.seen.lock().unwrap().len();
    write_load(&t.store, 5000, 200).await;
    let expected = base_cells(&t.store).await;
    until("b handling every shard", || {
        expected.keys().all(|k| record.keys().contains(k))
    })
    .await;
    let late: HashSet<&str> = record.seen.lock().unwrap()[after..]
        .iter()
        .map(|s| s.0)
        .collect();
    assert_eq!(late, HashSet::from(["b"]), "a dead runner kept handling");
    cancel_b.cancel();
    run_b.await.unwrap().unwrap();
    assert!(
        record.overlaps.lock().unwrap().is_empty(),
        "two runners worked one shard at once: {:?}",
        record.overlaps.lock().unwrap()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failing_cells_are_parked_retried_and_past_the_limit_stop_the_trigger() {
    let t = Instance::new(SHARDS).await;
    let record = Record::default();
    record.failing.store(true, Ordering::Relaxed);
    let (cancel, run) = start(&t.store, "parking", record.handler("a"), options());
    let mut batch = Vec::new();
    for r in 0..60u128 {
        batch.push(cell(r, "BASE", 1, json!({"fail": r % 20 == 0})));
    }
    t.store.put_cells(batch).await.unwrap();
    until("the good cells handled", || record.keys().len() == 57).await;
    let parked = || async {
        trigger::status(&t.store, "parking")
            .await
            .unwrap()
            .iter()
            .map(|s| s.parked)
            .sum::<u64>()
    };
    for _ in 0..200 {
        if parked().await == 3 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(parked().await, 3);

    // The command line shows them, and retries them once the handler
    // works: the dead letters drain.
    let file = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(
        file.path(),
        crate::harness::cluster().config_toml(&t.config.instance.name, SHARDS),
    )
    .unwrap();
    let cli = |args: &[&str]| {
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_mezzanine"))
            .arg("--config")
            .arg(file.path())
            .args(args)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    let shown = cli(&["trigger", "status", "parking"]);
    assert!(
        shown.contains("1 runners, 0 shards unowned") && shown.contains(", 3 parked"),
        "{shown}"
    );
    record.failing.store(false, Ordering::Relaxed);
    let retried = cli(&["trigger", "retry", "parking"]);
    assert!(
        retried.contains("3 parked cells flagged for retry"),
        "{retried}"
    );
    until("the parked cells handled", || record.keys().len() == 60).await;
    for _ in 0..200 {
        if parked().await == 0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(parked().await, 0);
    cancel.cancel();
    run.await.unwrap().unwrap();

    // Past max_parked the trigger stops and says why.
    record.failing.store(true, Ordering::Relaxed);
    let mut strict = options();
    strict.max_parked = 2;
    let (_cancel, run) = start(&t.store, "strict", record.handler("a"), strict);
    let stopped = tokio::time::timeout(Duration::from_secs(30), run)
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    assert_eq!(
        stopped,
        Stopped::TooManyParked {
            parked: 3,
            limit: 2
        }
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stop_shard_halts_only_the_failing_shard() {
    let t = Instance::new(SHARDS).await;
    let record = Record::default();
    record.failing.store(true, Ordering::Relaxed);
    let mut stop = options();
    stop.on_failure = config::OnFailure::StopShard;
    let bad = crate::harness::row(7);
    let bad_shard = schemaless::routing::shard_of(&bad, SHARDS);
    let (cancel, run) = start(&t.store, "halting", record.handler("a"), stop);
    t.store
        .put_cell(cell(7, "BASE", 1, json!({"fail": true})))
        .await
        .unwrap();
    let mut batch = Vec::new();
    for r in 100..160u128 {
        batch.push(cell(r, "BASE", 1, json!({"n": 1})));
    }
    t.store.put_cells(batch.clone()).await.unwrap();
    let others: Vec<String> = batch
        .iter()
        .filter(|c| schemaless::routing::shard_of(&c.key.row_key, SHARDS) != bad_shard)
        .map(|c| c.key.to_string())
        .collect();
    until("the other shards' cells", || {
        others.iter().all(|k| record.keys().contains(k))
    })
    .await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    let stuck = batch
        .iter()
        .filter(|c| schemaless::routing::shard_of(&c.key.row_key, SHARDS) == bad_shard)
        .filter(|c| record.keys().contains(&c.key.to_string()))
        .count();
    assert_eq!(stuck, 0, "the stopped shard went on past its failing cell");
    let status = trigger::status(&t.store, "halting").await.unwrap();
    assert_eq!(status[bad_shard as usize].parked, 0);
    assert!(status[bad_shard as usize].lag > 0);
    cancel.cancel();
    run.await.unwrap().unwrap();
}

/// Counts what it handles and the highest added_id seen.
#[derive(Default)]
struct Counter {
    handled: std::sync::atomic::AtomicU64,
    last: std::sync::atomic::AtomicU64,
}

#[async_trait]
impl Handler for Counter {
    async fn handle(&self, cell: &StoredCell) -> HandlerResult {
        self.handled.fetch_add(1, Ordering::Relaxed);
        self.last.fetch_max(cell.added_id, Ordering::Relaxed);
        Ok(())
    }
}

/// 100,000 holes in one shard's change log (every other id, as rolled
/// back inserts leave them): the trigger goes through, its saved position
/// holds every awaited id as ranges, and a restart resumes from it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hundred_thousand_holes_are_awaited_saved_and_resumed() {
    let t = Instance::new(2).await;
    // Rows of shard 0, the one given holes.
    let mut mine =
        (0..).filter(|n| schemaless::routing::shard_of(&crate::harness::row(*n), 2) == 0);
    let seed = mine.next().unwrap();
    t.store
        .put_cells(vec![cell(seed, "SEED", 1, json!({"n": 1}))])
        .await
        .unwrap();
    let db = t.store.topology().database(0);
    t.execute_on_master(
        0,
        format!(
            "INSERT INTO `{db}`.`entity` (row_key, column_name, ref_key, body, created_at)
             SELECT UNHEX(MD5(seq)), 'GAPS', 1, (SELECT body FROM `{db}`.`entity` LIMIT 1), 0
             FROM `{db}`.seq_1_to_200000;
             DELETE FROM `{db}`.`entity` WHERE column_name = 'GAPS' AND added_id % 2 = 0"
        ),
    )
    .await;
    let cells = base_count(&t, &db).await;
    assert_eq!(cells, 100_000);

    let options = config::Triggers {
        batch: 1000,
        read_from: config::TriggerRead::Master,
        ..options()
    };
    let start = |handler: Arc<Counter>| {
        let trigger = Trigger::new(
            "gaps",
            column("GAPS"),
            t.store.clone(),
            handler,
            options.clone(),
        )
        .unwrap();
        let cancel = CancellationToken::new();
        let token = cancel.clone();
        (
            cancel,
            tokio::spawn(async move { trigger.run(token).await }),
        )
    };
    let counter = Arc::new(Counter::default());
    let (cancel, run) = start(counter.clone());
    let head: u64 = sqlx::query_scalar(AssertSqlSafe(format!(
        "SELECT MAX(added_id) FROM `{db}`.`entity`"
    )))
    .fetch_one(&t.store.topology().cluster(0).unwrap().master().pool)
    .await
    .unwrap();
    for _ in 0..3000 {
        if counter.handled.load(Ordering::Relaxed) >= cells || run.is_finished() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(counter.handled.load(Ordering::Relaxed), cells);
    cancel.cancel();
    assert_eq!(run.await.unwrap().unwrap(), Stopped::Cancelled);

    let (offset, awaited): (u64, String) = sqlx::query_as(AssertSqlSafe(format!(
        "SELECT added_id, awaited FROM `{db}`.`trigger_offsets` WHERE name = 'gaps'"
    )))
    .fetch_one(&t.store.topology().cluster(0).unwrap().master().pool)
    .await
    .unwrap();
    assert_eq!(offset, head);
    let saved = schemaless::mysql::awaited::Awaited::parse(&awaited);
    assert!(saved.ranges() >= 99_999, "{} ranges", saved.ranges());
    assert!(saved.ids().all(|id| id % 2 == 0), "a present id is awaited");

    // A restart resumes there: nothing is handled again.
    let again = Arc::new(Counter::default());
    let (cancel, run) = start(again.clone());
    t.store
        .put_cells(vec![cell(mine.next().unwrap(), "GAPS", 1, json!({"n": 7}))])
        .await
        .unwrap();
    until("the new cell", || {
        again.handled.load(Ordering::Relaxed) >= 1
    })
    .await;
    tokio::time::sleep(Duration::from_millis(700)).await;
    assert_eq!(again.handled.load(Ordering::Relaxed), 1);
    assert!(again.last.load(Ordering::Relaxed) > head);
    cancel.cancel();
    run.await.unwrap().unwrap();
}

async fn base_count(t: &Instance, db: &str) -> u64 {
    sqlx::query_scalar::<_, i64>(AssertSqlSafe(format!(
        "SELECT COUNT(*) FROM `{db}`.`entity` WHERE column_name = 'GAPS'"
    )))
    .fetch_one(&t.store.topology().cluster(0).unwrap().master().pool)
    .await
    .unwrap() as u64
}

/// A damaged stored cell does not stop its shard's followers: the trigger
/// handles every other cell past it, and the cell is set aside where
/// status shows it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_damaged_cell_is_set_aside_and_the_log_goes_on() {
    let t = Instance::new(2).await;
    let cells: Vec<_> = (0..30u128)
        .map(|n| cell(n, "BASE", 1, json!({ "n": n as u64 })))
        .collect();
    t.store.put_cells(cells).await.unwrap();
    let shard = schemaless::routing::shard_of(&crate::harness::row(10), 2);
    let db = t.store.topology().database(shard);
    let hex: String = crate::harness::row(10)
        .as_bytes()
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    t.execute_on_master(
        shard,
        format!("UPDATE `{db}`.entity SET body = X'789c0badcafe' WHERE row_key = X'{hex}'"),
    )
    .await;
    // The trigger reads from minions: they must have the damage too, or a
    // fast follower reads the intact cell there.
    t.wait_for_minions().await;
    let counter = Arc::new(Counter::default());
    let (cancel, run) = start(&t.store, "past", counter.clone(), options());
    until("every other cell handled", || {
        counter.handled.load(Ordering::Relaxed) >= 29
    })
    .await;
    // Later cells too.
    t.store
        .put_cells(vec![cell(100, "BASE", 1, json!({"n": 100}))])
        .await
        .unwrap();
    until("the next cell", || {
        counter.handled.load(Ordering::Relaxed) >= 30
    })
    .await;
    cancel.cancel();
    assert_eq!(run.await.unwrap().unwrap(), Stopped::Cancelled);
    let damaged = schemaless::mysql::damaged::counts(&t.store).await;
    assert_eq!(
        damaged
            .iter()
            .map(|(_, c)| *c.as_ref().unwrap())
            .sum::<u64>(),
        1,
        "{damaged:?}"
    );
}
