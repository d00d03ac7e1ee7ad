//! Online shard moves on real clusters: shards moved while writers,
//! readers, a trigger and an index maintainer run; a move killed -9 in
//! each phase and resumed (or rolled back); a cluster added and split
//! under load; bad input refused with nothing changed.
//!
//! The load keeps every acknowledged write; the checks after a move: each
//! is read back with its body (none lost), each shard holds exactly the
//! acknowledged cells (none duplicated, the old copy out of sight), every
//! read during the move was answered correctly or flagged stale, index
//! queries answer the same entries as the acknowledged cells imply, and
//! the trigger handled every cell, in added_id order per shard.

use std::collections::{BTreeSet, HashMap};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use schemaless::mysql::index::{self, Maintainer};
use schemaless::mysql::moves::run::{self as moves, MoveOptions};
use schemaless::mysql::moves::{state, Phase, MOVED_ENTITY};
use schemaless::mysql::trigger::{self, Handler, HandlerResult, Trigger};
use schemaless::mysql::{schema, Topology};
use schemaless::{Body, CellKey, CellStore, IndexQuery, MySqlStore, ReadFrom, StoredCell};
use serde_json::json;
use tokio_util::sync::CancellationToken;

use crate::harness::{cell, cluster, column, config_file, mezzanine, wait_past, Instance};

const SHARDS: u32 = 8;
const DRIVERS: [&str; 3] = ["driver-1", "driver-2", "driver-3"];
const EXTRA: &str = r#"
[[index]]
name = "by_driver"
column = "BASE"
shard_field = "driver"
fields = ["n"]
types = { n = "int" }

[triggers]
poll_ms = 10
lease_ms = 1500
"#;

/// (shard, added_id, key) of each cell the trigger handled, in order.
type Seen = Arc<Mutex<Vec<(u32, u64, String)>>>;

struct Recorder {
    seen: Seen,
}

#[async_trait]
impl Handler for Recorder {
    async fn handle(&self, cell: &StoredCell) -> HandlerResult {
        let shard = schemaless::routing::shard_of(&cell.cell.key.row_key, SHARDS);
        self.seen
            .lock()
            .unwrap()
            .push((shard, cell.added_id, cell.cell.key.to_string()));
        Ok(())
    }
}

/// Writers and readers on their own stores, as other processes would be.
struct Load {
    stop: Arc<AtomicBool>,
    written: Arc<AtomicU64>,
    read: Arc<AtomicU64>,
    stale: Arc<AtomicU64>,
    acked: Arc<Mutex<HashMap<CellKey, Body>>>,
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

impl Load {
    /// Two writers of 4-cell batches, 5 ms apart (each write must succeed:
    /// a fence makes writers wait, never fail) and one reader of
    /// acknowledged cells
    /// (each read must be answered with the acknowledged body or flagged
    /// stale), on stores of `config` other than the mover's.
    fn start(config: &config::Config, from_row: u128) -> Load {
        let stop = Arc::new(AtomicBool::new(false));
        let written = Arc::new(AtomicU64::new(0));
        let read = Arc::new(AtomicU64::new(0));
        let stale = Arc::new(AtomicU64::new(0));
        let acked: Arc<Mutex<HashMap<CellKey, Body>>> = Arc::default();
        let mut tasks = Vec::new();
        for w in 0..2u128 {
            let store = MySqlStore::connect(config).unwrap();
            let (stop, written, acked) = (stop.clone(), written.clone(), acked.clone());
            tasks.push(tokio::spawn(async move {
                let mut n = from_row + w * 1_000_000;
                while !stop.load(Ordering::Relaxed) {
                    let batch: Vec<_> = (n..n + 4)
                        .map(|r| {
                            cell(
                                r,
                                "BASE",
                                1,
                                json!({ "driver": DRIVERS[(r % 3) as usize], "n": r as u64 }),
                            )
                        })
                        .collect();
                    n += 4;
                    let results = store
                        .put_cells(batch.clone())
                        .await
                        .expect("a write during a shard move");
                    {
                        let mut acked = acked.lock().unwrap();
                        for (c, r) in batch.into_iter().zip(results) {
                            r.expect("a cell written during a shard move");
                            acked.insert(c.key, c.body);
                        }
                    }
                    written.fetch_add(4, Ordering::Relaxed);
                    // Steady, not flat out: other tests share the cores.
                    tokio::time::sleep(Duration::from_millis(5)).await;
                }
            }));
        }
        let reader = MySqlStore::connect(config).unwrap();
        let (stop2, read2, stale2, acked2) =
            (stop.clone(), read.clone(), stale.clone(), acked.clone());
        tasks.push(tokio::spawn(async move {
            let mut i = 0usize;
            while !stop2.load(Ordering::Relaxed) {
                let pick = {
                    let acked = acked2.lock().unwrap();
                    let len = acked.len();
                    (len > 0).then(|| {
                        let (k, b) = acked.iter().nth(i % len).unwrap();
                        (k.clone(), b.clone())
                    })
                };
                i = i.wrapping_add(7919);
                let Some((key, body)) = pick else {
                    tokio::time::sleep(Duration::from_millis(5)).await;
                    continue;
                };
                let answer = reader
                    .get_cell_answer(&key, ReadFrom::Master)
                    .await
                    .expect("a read during a shard move");
                if answer.stale {
                    stale2.fetch_add(1, Ordering::Relaxed);
                } else {
                    let got = answer.value.map(|c| c.cell.body);
                    assert_eq!(
                        got.as_ref(),
                        Some(&body),
                        "{key} read wrongly (not flagged stale) during a move"
                    );
                }
                read2.fetch_add(1, Ordering::Relaxed);
                tokio::time::sleep(Duration::from_millis(2)).await;
            }
        }));
        Load {
            stop,
            written,
            read,
            stale,
            acked,
            tasks,
        }
    }

    /// Lets the load run on for a few more writes and reads.
    async fn more(&self) {
        wait_past(
            &self.written,
            self.written.load(Ordering::Relaxed) + 20,
            "more writes",
        )
        .await;
        wait_past(
            &self.read,
            self.read.load(Ordering::Relaxed) + 20,
            "more reads",
        )
        .await;
    }

    async fn finish(self) -> HashMap<CellKey, Body> {
        self.stop.store(true, Ordering::Relaxed);
        for t in self.tasks {
            t.await.unwrap();
        }
        assert!(self.read.load(Ordering::Relaxed) > 0);
        let acked = self.acked.lock().unwrap().clone();
        acked
    }
}

/// Every acknowledged cell read back with its body, and each shard
/// holding exactly the acknowledged cells.
async fn nothing_lost_or_duplicated(store: &MySqlStore, acked: &HashMap<CellKey, Body>) {
    for (key, body) in acked {
        let got = store.get_cell(key, ReadFrom::Master).await.unwrap();
        assert_eq!(got.map(|c| c.cell.body).as_ref(), Some(body), "{key} lost");
    }
    let mut held = 0;
    for shard in 0..SHARDS {
        let page = store
            .get_cells_for_shard(shard, 0, 1_000_000, ReadFrom::Master)
            .await
            .unwrap();
        let keys: BTreeSet<_> = page.cells.iter().map(|c| c.cell.key.clone()).collect();
        assert_eq!(
            keys.len(),
            page.cells.len(),
            "shard {shard} holds a cell twice"
        );
        for k in &keys {
            assert!(
                acked.contains_key(k),
                "shard {shard} holds {k}, never acknowledged"
            );
        }
        held += keys.len();
    }
    assert_eq!(
        held,
        acked.len(),
        "the shards hold other than the acknowledged cells"
    );
}

/// Rows per driver as the acknowledged cells say.
fn expected_entries(acked: &HashMap<CellKey, Body>) -> HashMap<&'static str, BTreeSet<String>> {
    let mut out: HashMap<&'static str, BTreeSet<String>> = HashMap::new();
    for (key, body) in acked {
        let driver = body.fields()["driver"].as_str().unwrap();
        let d = DRIVERS.iter().find(|d| **d == driver).unwrap();
        out.entry(d).or_default().insert(key.row_key.to_string());
    }
    out
}

async fn index_answers(store: &MySqlStore) -> HashMap<&'static str, BTreeSet<String>> {
    let mut out = HashMap::new();
    for driver in DRIVERS {
        let q = IndexQuery {
            index: "by_driver".into(),
            shard_value: json!(driver),
            filters: vec![],
            order_by: None,
            descending: false,
            limit: 10_000,
        };
        let entries = store.query_index(&q, ReadFrom::Master).await.unwrap();
        out.insert(
            driver,
            entries.iter().map(|e| e.row_key.to_string()).collect(),
        );
    }
    out
}

async fn until_caught_up(store: &MySqlStore, name: &str) {
    for _ in 0..1500 {
        if trigger::lag(store, name).await.unwrap() == 0 {
            return;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    panic!("trigger {name} never caught up");
}

fn run_trigger(trigger: Trigger) -> (CancellationToken, tokio::task::JoinHandle<()>) {
    let cancel = CancellationToken::new();
    let token = cancel.clone();
    (
        cancel,
        tokio::spawn(async move {
            trigger.run(token).await.unwrap();
        }),
    )
}

/// An index maintainer and a recording trigger, run by a store; started
/// again (from their saved offsets) on a store of a new config.
struct Watchers {
    version: u32,
    seen: Seen,
    running: Vec<(CancellationToken, tokio::task::JoinHandle<()>)>,
}

impl Watchers {
    /// Builds a version of the index and makes it active, starts its
    /// maintainer and the trigger, writes 200 cells and checks the index
    /// answers what they imply. Returns them with those cells.
    async fn start(
        store: &MySqlStore,
        config: &config::Config,
    ) -> (Watchers, HashMap<CellKey, Body>) {
        let version = index::create_version(store, "by_driver").await.unwrap();
        let mut watchers = Watchers {
            version,
            seen: Arc::default(),
            running: Vec::new(),
        };
        watchers.run(store, config);
        until_caught_up(store, &index::trigger_name("by_driver", version)).await;
        index::switch(store, "by_driver", version).await.unwrap();
        let mut initial = HashMap::new();
        for chunk in (50_000_000u128..50_000_200).collect::<Vec<_>>().chunks(50) {
            let batch: Vec<_> = chunk
                .iter()
                .map(|&r| {
                    cell(
                        r,
                        "BASE",
                        1,
                        json!({ "driver": DRIVERS[(r % 3) as usize], "n": r as u64 }),
                    )
                })
                .collect();
            for (c, r) in batch
                .iter()
                .zip(store.put_cells(batch.clone()).await.unwrap())
            {
                r.unwrap();
                initial.insert(c.key.clone(), c.body.clone());
            }
        }
        until_caught_up(store, &index::trigger_name("by_driver", version)).await;
        assert_eq!(index_answers(store).await, expected_entries(&initial));
        (watchers, initial)
    }

    fn run(&mut self, store: &MySqlStore, config: &config::Config) {
        self.running.push(run_trigger(
            Maintainer::trigger(store, "by_driver", self.version, &config.triggers).unwrap(),
        ));
        self.running.push(run_trigger(
            Trigger::new(
                "orders",
                column("BASE"),
                store.clone(),
                Arc::new(Recorder {
                    seen: self.seen.clone(),
                }),
                config.triggers.clone(),
            )
            .unwrap(),
        ));
    }

    async fn stop(&mut self) {
        for (cancel, run) in self.running.drain(..) {
            cancel.cancel();
            run.await.unwrap();
        }
    }

    /// Once caught up: the index answers what the acknowledged cells
    /// imply, and the trigger handled every cell, the first time in
    /// added_id order per shard.
    async fn check(mut self, store: &MySqlStore, acked: &HashMap<CellKey, Body>) {
        until_caught_up(store, &index::trigger_name("by_driver", self.version)).await;
        assert_eq!(index_answers(store).await, expected_entries(acked));
        until_caught_up(store, "orders").await;
        self.stop().await;
        let seen = self.seen.lock().unwrap().clone();
        let handled: BTreeSet<&String> = seen.iter().map(|s| &s.2).collect();
        for key in acked.keys() {
            assert!(handled.contains(&key.to_string()), "{key} never handled");
        }
        let mut first: HashMap<String, ()> = HashMap::new();
        let mut last: HashMap<u32, u64> = HashMap::new();
        for (shard, added_id, key) in &seen {
            if first.insert(key.clone(), ()).is_some() {
                continue;
            }
            assert!(
                last.insert(*shard, *added_id)
                    .is_none_or(|prev| prev < *added_id),
                "shard {shard}: {key} (added_id {added_id}) handled after a later cell"
            );
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shards_move_under_load_with_a_trigger_and_an_index_running() {
    let t = Instance::with_limits(SHARDS, EXTRA).await;
    let topology = t.store.topology();
    let (a, b) = (
        topology.clusters[0].name.clone(),
        topology.clusters[1].name.clone(),
    );
    assert_eq!(topology.cluster(0).unwrap().name, a);
    let (watchers, initial) = Watchers::start(&t.store, &t.config).await;

    let load = Load::start(&t.config, 0);
    load.more().await;

    // The mover: a topology of its own, as the CLI has.
    let mover = Topology::from_config(&t.config).unwrap();
    let mut records = moves::plan(&mover, &[0, 1], &b).await.unwrap();
    for record in &mut records {
        load.more().await;
        let report = moves::run(&mover, record, &MoveOptions::default())
            .await
            .unwrap();
        assert!(report.copied > 0, "{report:?}");
        assert!(
            report.fence_ms > 0 && report.fence_ms < 10_000,
            "{report:?}"
        );
    }
    load.more().await;
    let stale = load.stale.load(Ordering::Relaxed);
    let mut acked = load.finish().await;
    assert!(acked.len() > 100, "only {} cells written", acked.len());
    acked.extend(initial);

    // Every store follows: the moved shards are on b now.
    for shard in [0, 1] {
        assert_eq!(mover.cluster(shard).unwrap().name, b);
    }
    assert_eq!(mover.cluster(2).unwrap().name, a);
    nothing_lost_or_duplicated(&t.store, &acked).await;
    // The old copies: out of sight, kept for `shard gc`.
    let a_master = mover.clusters[0].master();
    for shard in [0, 1] {
        let tables = schemaless::mysql::moves::fence::tables(&a_master, &mover.database(shard))
            .await
            .unwrap();
        assert!(
            tables.contains(&MOVED_ENTITY.to_string()) && !tables.contains(&"entity".to_string()),
            "{tables:?}"
        );
    }
    watchers.check(&t.store, &acked).await;

    // Done moves are listed until `shard gc` drops their old copies.
    let done = state::recorded(&mover).await;
    assert_eq!(done.len(), 2);
    assert!(done
        .iter()
        .all(|r| r.phase == Phase::Done && r.fence_ms.is_some()));
    assert!(moves::collect(&mover, Duration::from_secs(3600), false)
        .await
        .unwrap()
        .is_empty());
    let collected = moves::collect(&mover, Duration::ZERO, false).await.unwrap();
    assert_eq!(collected.len(), 2);
    assert!(
        schemaless::mysql::moves::fence::tables(&a_master, &mover.database(0))
            .await
            .unwrap()
            .is_empty()
    );
    nothing_lost_or_duplicated(&t.store, &acked).await;
    eprintln!("{} reads flagged stale during the moves", stale);
    mover.close().await;
}

/// A config text for a fresh instance on the test clusters.
fn fresh_text(extra: &str) -> String {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let name = format!(
        "mv{}_{}",
        std::process::id() % 100_000,
        NEXT.fetch_add(1, Ordering::Relaxed)
    );
    format!("{}\n{extra}", cluster().config_toml(&name, SHARDS))
}

/// The config of `text`, its schema applied.
async fn applied(text: &str) -> config::Config {
    let config = config::Config::parse(text, "moves.toml").unwrap();
    let topology = Topology::from_config(&config).unwrap();
    schema::apply(&topology).await.unwrap();
    topology.close().await;
    config
}

/// A fresh instance: its config text and config, schema applied.
async fn instance_text(extra: &str) -> (String, config::Config) {
    let text = fresh_text(extra);
    let config = applied(&text).await;
    (text, config)
}

fn status_json(path: &std::path::Path) -> serde_json::Value {
    let out = mezzanine(path, &["shard", "status", "--json"])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

/// The phase of `shard`'s newest move.
fn phase_of(status: &serde_json::Value, shard: u32) -> Option<String> {
    status["moves"]
        .as_array()
        .unwrap()
        .iter()
        .rfind(|m| m["shard"] == shard)
        .map(|m| m["phase"].as_str().unwrap().to_string())
}

/// `shard move SHARD --to TO --hold-at PHASE` started in the background
/// (with `extra` flags), once `shard status` shows the move holding at
/// that phase (a minute at most).
async fn move_held_at(
    path: &std::path::Path,
    shard: u32,
    to: &str,
    phase: &str,
    extra: &[&str],
) -> std::process::Child {
    let shard_text = shard.to_string();
    let mut args = vec!["shard", "move", &shard_text, "--to", to, "--hold-at", phase];
    args.extend_from_slice(extra);
    let child = mezzanine(path, &args)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    while phase_of(&status_json(path), shard).as_deref() != Some(phase) {
        assert!(
            std::time::Instant::now() < deadline,
            "the move of shard {shard} never reached {phase}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    child
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_move_killed_in_each_phase_resumes_to_the_same_end() {
    let (text, config) = instance_text("").await;
    let file = config_file(&text);
    let load = Load::start(&config, 0);
    let store = MySqlStore::connect(&config).unwrap();
    let b = config.clusters[1].name.clone();
    for (shard, phase) in [
        (0u32, "copying"),
        (1, "catching_up"),
        (2, "fenced"),
        (3, "switched"),
    ] {
        load.more().await;
        let mut child = move_held_at(
            file.path(),
            shard,
            &b,
            phase,
            &["--fence-timeout-ms", "1500"],
        )
        .await;
        child.kill().unwrap(); // SIGKILL
        child.wait().unwrap();
        // Writes go on (a fence lifts at its deadline; a switched
        // shard's target fence too), then the move is resumed.
        load.more().await;
        let out = mezzanine(file.path(), &["shard", "resume", "--json"])
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "resume after {phase}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let status = status_json(file.path());
        assert_eq!(
            phase_of(&status, shard).as_deref(),
            Some("done"),
            "{status}"
        );
        load.more().await;
    }
    // A move killed while catching up and rolled back: the shard stays,
    // the partial copy is gone.
    let mut child =
        move_held_at(file.path(), 4, &config.clusters[0].name, "catching_up", &[]).await;
    child.kill().unwrap();
    child.wait().unwrap();
    let out = mezzanine(file.path(), &["shard", "rollback", "4"])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    load.more().await;
    let acked = load.finish().await;
    let topology = store.topology();
    schemaless::mysql::topology::placement::refresh(topology).await;
    for shard in 0..4 {
        assert_eq!(topology.cluster(shard).unwrap().name, b, "shard {shard}");
    }
    assert_eq!(
        topology.cluster(4).unwrap().name,
        b,
        "the rolled back shard moved"
    );
    let a_master = topology.clusters[0].master();
    assert!(
        schemaless::mysql::moves::fence::tables(&a_master, &topology.database(4))
            .await
            .unwrap()
            .is_empty(),
        "the rolled back copy is left on the target"
    );
    assert_eq!(
        phase_of(&status_json(file.path()), 4).as_deref(),
        None,
        "a rolled back move is listed"
    );
    nothing_lost_or_duplicated(&store, &acked).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cluster_added_and_split_under_load_loses_nothing() {
    // An instance whose first cluster holds every shard.
    let text = fresh_text("");
    let at = text.find("\n[[cluster]]\nname = \"b\"").unwrap();
    let b_table = text[at..].to_string();
    let one_cluster = format!(
        "{}\n{EXTRA}",
        text[..at].replace("shards = \"0-3\"", "shards = \"0-7\"")
    );
    let config = applied(&one_cluster).await;
    let file = config_file(&one_cluster);
    let url = |key: &str| {
        let line = b_table.lines().find(|l| l.starts_with(key)).unwrap();
        line.split('"')
            .filter(|s| s.starts_with("mysql://"))
            .map(str::to_string)
            .collect::<Vec<_>>()
    };
    let (master, minions) = (url("master").remove(0), url("minions"));
    let store = MySqlStore::connect(&config).unwrap();
    let (mut watchers, initial) = Watchers::start(&store, &config).await;
    let load = Load::start(&config, 0);
    load.more().await;

    let mut args = vec!["cluster", "add", "b", "--master", master.as_str()];
    for m in &minions {
        args.extend(["--minion", m.as_str()]);
    }
    let out = mezzanine(file.path(), &args).output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let split = config::Config::load(file.path()).unwrap();
    assert_eq!(split.clusters.len(), 2);
    assert_eq!(split.clusters[1].shards, None);
    // The stores of the load have the old config: as the runbook says,
    // every process gets the new one before shards move.
    let acked_before = load.finish().await;
    watchers.stop().await;
    let store = MySqlStore::connect(&split).unwrap();
    watchers.run(&store, &split);
    let load = Load::start(&split, 10_000_000);
    load.more().await;
    let out = mezzanine(
        file.path(),
        &["shard", "move", "4-7", "--to", "b", "--json"],
    )
    .output()
    .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let last = String::from_utf8_lossy(&out.stdout)
        .lines()
        .last()
        .unwrap()
        .to_string();
    let report: serde_json::Value = serde_json::from_str(&last).unwrap();
    assert_eq!(report["moves"].as_array().unwrap().len(), 4);
    load.more().await;
    let mut acked = load.finish().await;
    acked.extend(acked_before);
    acked.extend(initial);
    schemaless::mysql::topology::placement::refresh(store.topology()).await;
    let status = status_json(file.path());
    assert_eq!(status["clusters"][0]["holds"], "0-3", "{status}");
    assert_eq!(status["clusters"][1]["holds"], "4-7", "{status}");
    nothing_lost_or_duplicated(&store, &acked).await;
    watchers.check(&store, &acked).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_moves_are_refused_and_change_nothing() {
    let (text, config) = instance_text("").await;
    let file = config_file(&text);
    let (a, b) = (
        config.clusters[0].name.as_str(),
        config.clusters[1].name.as_str(),
    );
    let refused = |args: &[&str], says: &str| {
        let out = mezzanine(file.path(), args).output().unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {stderr}");
        assert!(stderr.contains(says), "{args:?}: {stderr}");
    };
    let before = status_json(file.path());
    refused(&["shard", "move", "1", "--to", a], "is on cluster");
    refused(
        &["shard", "move", "1", "--to", "nowhere"],
        "no cluster named \"nowhere\"",
    );
    refused(&["shard", "move", "8", "--to", b], "does not exist");
    refused(&["shard", "move", "x", "--to", b], "expected a shard range");
    refused(&["shard", "move", "0-5", "--to", b], "is on cluster");
    assert_eq!(
        status_json(file.path()),
        before,
        "a refused move changed something"
    );

    // Overlapping moves: one in progress holds its shard.
    let mut child = move_held_at(file.path(), 1, b, "catching_up", &[]).await;
    refused(
        &["shard", "move", "0-2", "--to", b],
        "is being moved already",
    );
    child.kill().unwrap();
    child.wait().unwrap();
    let out = mezzanine(file.path(), &["shard", "rollback"])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let after = status_json(file.path());
    assert_eq!(after["clusters"], before["clusters"]);
    assert_eq!(after["placements"], before["placements"]);
}
