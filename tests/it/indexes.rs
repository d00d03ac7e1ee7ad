//! Sharded secondary indexes on MariaDB against the in-memory model's
//! brute force, through random writes, shard-field changes, out-of-order
//! ref keys and a version switch under load.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use schemaless::mysql::index::{self, Maintainer};
use schemaless::mysql::trigger;
use schemaless::{
    Cell, CellStore, Error, Filter, FilterOp, IndexQuery, MemoryStore, MySqlStore, ReadFrom,
};
use serde_json::{json, Value};
use tokio_util::sync::CancellationToken;

use crate::harness::{cell, Instance};

const SHARDS: u32 = 8;
const INDEX: &str = r#"
[[index]]
name = "by_driver"
column = "BASE"
shard_field = "driver"
fields = ["at", "city", "fare", "ok"]
types = { city = "int", fare = "decimal", ok = "bool" }

[[index]]
name = "by_email"
column = "ACCOUNT"
shard_field = "email"
fields = ["name"]
unique = true

[triggers]
poll_ms = 10
max_tries = 2
retry_backoff_ms = 1
"#;

const DRIVERS: [&str; 3] = [
    "0a0a0a0a-0000-4000-8000-000000000001",
    "0b0b0b0b-0000-4000-8000-000000000002",
    "driver-without-uuid",
];

fn random_cell(rng: &mut StdRng) -> Cell {
    let row = rng.random_range(0..12u128);
    let ref_key = rng.random_range(1..7i64);
    let mut body = serde_json::Map::new();
    match rng.random_range(0..10) {
        0 => {}                                            // no shard field: no entry
        1 => drop(body.insert("driver".into(), json!(7))), // wrong type: no entry
        _ => drop(body.insert("driver".into(), json!(DRIVERS[rng.random_range(0..3)]))),
    }
    body.insert(
        "at".into(),
        json!(format!(
            "2015-03-0{}T0{}:00:00.000000Z",
            rng.random_range(1..4),
            rng.random_range(0..3)
        )),
    );
    if rng.random_bool(0.9) {
        body.insert("city".into(), json!(rng.random_range(1..5)));
    }
    body.insert(
        "fare".into(),
        match rng.random_range(0..4) {
            0 => json!("9.5"),
            1 => json!("10.25"),
            2 => json!(100),
            _ => json!("not a number"),
        },
    );
    body.insert("ok".into(), json!(rng.random_bool(0.5)));
    body.insert("note".into(), json!("not indexed"));
    cell(row, "BASE", ref_key, Value::Object(body))
}

fn queries() -> Vec<IndexQuery> {
    let mut out = Vec::new();
    for driver in DRIVERS {
        let q = |filters: Vec<Filter>, order: Option<&str>, descending: bool, limit: usize| {
            IndexQuery {
                index: "by_driver".into(),
                shard_value: json!(driver),
                filters,
                order_by: order.map(str::to_string),
                descending,
                limit,
            }
        };
        let f = |field: &str, op: FilterOp, value: Value| Filter {
            field: field.into(),
            op,
            value,
        };
        out.push(q(vec![], None, false, 100));
        out.push(q(vec![], Some("at"), true, 3));
        out.push(q(
            vec![f("city", FilterOp::Ge, json!(2))],
            Some("city"),
            false,
            100,
        ));
        out.push(q(
            vec![f("fare", FilterOp::Lt, json!("10"))],
            Some("fare"),
            true,
            100,
        ));
        out.push(q(
            vec![f("fare", FilterOp::Gt, json!(9.9))],
            None,
            false,
            100,
        ));
        out.push(q(
            vec![
                f("city", FilterOp::In, json!([1, 3])),
                f("at", FilterOp::Le, json!("2015-03-02T01:00:00.000000Z")),
            ],
            Some("at"),
            false,
            100,
        ));
        out.push(q(
            vec![f("ok", FilterOp::Eq, json!(true))],
            Some("city"),
            true,
            2,
        ));
    }
    out
}

/// Runs the maintainer of `version` until cancelled.
fn maintain(
    store: &MySqlStore,
    config: &config::Config,
    version: u32,
) -> (CancellationToken, tokio::task::JoinHandle<()>) {
    let trigger = Maintainer::trigger(store, "by_driver", version, &config.triggers).unwrap();
    let cancel = CancellationToken::new();
    let token = cancel.clone();
    (
        cancel,
        tokio::spawn(async move {
            trigger.run(token).await.unwrap();
        }),
    )
}

/// Waits until the maintainer of `version` of `index` has handled every
/// cell.
async fn caught_up(store: &MySqlStore, version: u32, index: &str) {
    let name = index::trigger_name(index, version);
    for _ in 0..1000 {
        if trigger::lag(store, &name).await.unwrap() == 0 {
            return;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    panic!("index version {version} never caught up");
}

async fn same_answers(store: &MySqlStore, model: &MemoryStore) -> usize {
    let mut found = 0;
    for q in queries() {
        let got = store.query_index(&q, ReadFrom::Master).await.unwrap();
        let want = model.query_index(&q, ReadFrom::Master).await.unwrap();
        assert_eq!(got, want, "{q:?}");
        found += got.len();
    }
    found
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn indexes_answer_like_a_brute_force_and_switch_versions_without_a_failed_query() {
    let t = Instance::with_limits(SHARDS, INDEX).await;
    let model =
        MemoryStore::with_indexes(SHARDS, t.config.limits.clone(), &t.config.indexes).unwrap();
    let mut rng = StdRng::seed_from_u64(42);
    // Cells written before the index exists: the first version backfills
    // them from the entity tables.
    for _ in 0..10 {
        let batch: Vec<Cell> = (0..8).map(|_| random_cell(&mut rng)).collect();
        t.store.put_cells(batch.clone()).await.unwrap();
        model.put_cells(batch).await.unwrap();
    }
    let err = t
        .store
        .query_index(&queries()[0], ReadFrom::Master)
        .await
        .unwrap_err();
    assert!(
        err.to_string().contains("has no active version yet"),
        "{err}"
    );
    assert_eq!(
        index::create_version(&t.store, "by_driver").await.unwrap(),
        1
    );
    let (stop1, run1) = maintain(&t.store, &t.config, 1);
    caught_up(&t.store, 1, "by_driver").await;
    index::switch(&t.store, "by_driver", 1).await.unwrap();
    assert!(same_answers(&t.store, &model).await > 10);

    // Random writes: shard-field changes, older ref keys arriving late.
    for round in 0..6 {
        for _ in 0..5 {
            let batch: Vec<Cell> = (0..6).map(|_| random_cell(&mut rng)).collect();
            t.store.put_cells(batch.clone()).await.unwrap();
            model.put_cells(batch).await.unwrap();
        }
        caught_up(&t.store, 1, "by_driver").await;
        assert!(same_answers(&t.store, &model).await > 0, "round {round}");
    }

    // A new version is backfilled while writes go on, then switched to
    // while queries run: none of them fails.
    let v2 = index::create_version(&t.store, "by_driver").await.unwrap();
    assert_eq!(v2, 2);
    let (stop2, run2) = maintain(&t.store, &t.config, v2);
    let querying = Arc::new(AtomicBool::new(true));
    let answered = Arc::new(AtomicU64::new(0));
    let reader = {
        let (store, querying, answered) = (t.store.clone(), querying.clone(), answered.clone());
        tokio::spawn(async move {
            while querying.load(Ordering::Relaxed) {
                for q in queries() {
                    store
                        .query_index(&q, ReadFrom::Master)
                        .await
                        .expect("a query during the switch");
                    answered.fetch_add(1, Ordering::Relaxed);
                }
            }
        })
    };
    for _ in 0..4 {
        let batch: Vec<Cell> = (0..6).map(|_| random_cell(&mut rng)).collect();
        t.store.put_cells(batch.clone()).await.unwrap();
        model.put_cells(batch).await.unwrap();
    }
    caught_up(&t.store, v2, "by_driver").await;
    index::switch(&t.store, "by_driver", v2).await.unwrap();
    tokio::time::sleep(Duration::from_millis(1200)).await;
    querying.store(false, Ordering::Relaxed);
    reader.await.unwrap();
    assert!(answered.load(Ordering::Relaxed) > 0);
    let states = index::versions(&t.store, "by_driver").await.unwrap();
    assert_eq!(
        states,
        vec![
            (1, index::VersionState::Retired),
            (2, index::VersionState::Active)
        ]
    );
    stop1.cancel();
    run1.await.unwrap();
    caught_up(&t.store, v2, "by_driver").await;
    same_answers(&t.store, &model).await;
    stop2.cancel();
    run2.await.unwrap();
}

#[tokio::test]
async fn bad_index_queries_name_what_is_wrong() {
    let t = Instance::with_limits(SHARDS, INDEX).await;
    let base = queries()[0].clone();
    let with = |f: &dyn Fn(&mut IndexQuery)| {
        let mut q = base.clone();
        f(&mut q);
        q
    };
    for (q, expected) in [
        (
            with(&|q| q.index = "nope".into()),
            "index: no index is called \"nope\" (declared: by_driver, by_email)",
        ),
        (
            with(&|q| q.shard_value = json!(5)),
            "shard_value: expected a string",
        ),
        (
            with(&|q| {
                q.filters = vec![Filter {
                    field: "note".into(),
                    op: FilterOp::Eq,
                    value: json!("x"),
                }]
            }),
            "filters[0].field: index by_driver holds no field \"note\"",
        ),
        (
            with(&|q| {
                q.filters = vec![Filter {
                    field: "city".into(),
                    op: FilterOp::Eq,
                    value: json!("two"),
                }]
            }),
            "filters[0].value: expected an integer for field \"city\"",
        ),
        (
            with(&|q| {
                q.filters = vec![Filter {
                    field: "city".into(),
                    op: FilterOp::In,
                    value: json!([]),
                }]
            }),
            "filters[0].value: IN takes at least one value",
        ),
        (with(&|q| q.limit = 0), "limit: must be between 1 and 10000"),
    ] {
        match t.store.query_index(&q, ReadFrom::Master).await {
            Err(Error::InvalidInput { field, message, .. }) => {
                let text = format!("{field}: {message}");
                assert!(text.contains(expected), "{text}");
            }
            other => panic!("{q:?}: {other:?}"),
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_unique_index_keeps_the_first_row_and_parks_the_second() {
    let t = Instance::with_limits(SHARDS, INDEX).await;
    let v = index::create_version(&t.store, "by_email").await.unwrap();
    index::switch(&t.store, "by_email", v).await.unwrap();
    let trigger = Maintainer::trigger(&t.store, "by_email", v, &t.config.triggers).unwrap();
    let cancel = CancellationToken::new();
    let running = {
        let cancel = cancel.clone();
        tokio::spawn(async move { trigger.run(cancel).await.unwrap() })
    };
    let query = |email: &str| IndexQuery {
        index: "by_email".into(),
        shard_value: json!(email),
        filters: vec![],
        order_by: None,
        descending: false,
        limit: 10,
    };
    let owners = |email: &'static str| {
        let store = t.store.clone();
        async move {
            store
                .query_index(&query(email), ReadFrom::Master)
                .await
                .unwrap()
                .into_iter()
                .map(|e| e.row_key)
                .collect::<Vec<_>>()
        }
    };
    let name = index::trigger_name("by_email", v);
    let parked = || async {
        trigger::status(&t.store, &name)
            .await
            .unwrap()
            .iter()
            .map(|s| s.parked)
            .sum::<u64>()
    };

    t.store
        .put_cell(cell(
            1,
            "ACCOUNT",
            1,
            json!({"email": "ana@example.com", "name": "Ana"}),
        ))
        .await
        .unwrap();
    caught_up(&t.store, v, "by_email").await;
    assert_eq!(
        owners("ana@example.com").await,
        vec![crate::harness::row(1)]
    );

    // A second row claims the same value: it is parked, the first keeps it.
    t.store
        .put_cell(cell(
            2,
            "ACCOUNT",
            1,
            json!({"email": "ana@example.com", "name": "Imposter"}),
        ))
        .await
        .unwrap();
    for _ in 0..500 {
        if parked().await == 1 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(parked().await, 1);
    assert_eq!(
        owners("ana@example.com").await,
        vec![crate::harness::row(1)]
    );

    // The first row moves to another address; the parked cell, retried,
    // now takes the freed value.
    t.store
        .put_cell(cell(
            1,
            "ACCOUNT",
            2,
            json!({"email": "ana@example.org", "name": "Ana"}),
        ))
        .await
        .unwrap();
    caught_up(&t.store, v, "by_email").await;
    assert_eq!(trigger::retry_parked(&t.store, &name).await.unwrap(), 1);
    for _ in 0..500 {
        if parked().await == 0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(parked().await, 0);
    assert_eq!(
        owners("ana@example.com").await,
        vec![crate::harness::row(2)]
    );
    assert_eq!(
        owners("ana@example.org").await,
        vec![crate::harness::row(1)]
    );
    cancel.cancel();
    running.await.unwrap();
}

/// Runs `sql(database)` on the master of every shard.
async fn on_every_shard(store: &MySqlStore, sql: impl Fn(&str) -> String) {
    let topology = store.topology();
    for shard in 0..topology.shard_count {
        let db = topology.database(shard);
        topology
            .cluster(shard)
            .unwrap()
            .master()
            .execute(sql(&db))
            .await
            .unwrap();
    }
}

/// `index::verify` finds an index that agrees with the cells silent, then
/// each way its entries can go wrong behind the maintainer's back, by row:
/// an entry gone, an entry's fields changed, a stale entry left on
/// another shard; and a row the maintainer has not reached as behind.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn verify_finds_entries_missing_changed_stale_and_rows_not_reached() {
    let t = Instance::with_limits(SHARDS, INDEX).await;
    let body = |driver: Option<&str>, city: i64| {
        let mut body =
            json!({"at": "2015-03-01T00:00:00.000000Z", "city": city, "fare": "9.5", "ok": true});
        if let Some(driver) = driver {
            body["driver"] = json!(driver);
        }
        body
    };
    let mut cells = Vec::new();
    for row in 0..30u128 {
        let driver = (row % 5 != 4).then_some(DRIVERS[(row % 3) as usize]);
        cells.push(cell(row, "BASE", 1, body(driver, 1)));
        // A second version moves some rows to another driver (another
        // entry shard): the first entry must be gone.
        cells.push(cell(
            row,
            "BASE",
            2,
            body(driver.map(|_| DRIVERS[((row + 1) % 3) as usize]), 2),
        ));
    }
    t.store.put_cells(cells).await.unwrap();
    let v = index::create_version(&t.store, "by_driver").await.unwrap();
    let (stop, run) = maintain(&t.store, &t.config, v);
    caught_up(&t.store, v, "by_driver").await;
    index::switch(&t.store, "by_driver", v).await.unwrap();
    let clean = index::verify(&t.store, "by_driver", v, &|_, _, _| {})
        .await
        .unwrap();
    assert_eq!(clean.rows, 30);
    assert_eq!(clean.entries, 24, "every row with a driver has one entry");
    assert!(
        clean.problems.is_empty() && clean.behind.is_empty(),
        "{clean:?}"
    );
    stop.cancel();
    run.await.unwrap();

    // Behind the maintainer's back (it is stopped).
    let key = |row: u128| cell(row, "BASE", 1, json!({})).key.row_key;
    let table = index::entry_table("by_driver", v);
    let hex = |row: u128| {
        let mut sql = String::new();
        schemaless::mysql::sql::push_hex(&mut sql, key(row).as_bytes());
        sql
    };
    on_every_shard(&t.store, |db| {
        format!("DELETE FROM `{db}`.`{table}` WHERE row_key = {}", hex(0))
    })
    .await;
    on_every_shard(&t.store, |db| {
        format!(
            "UPDATE `{db}`.`{table}` SET fields = '{{}}' WHERE row_key = {}",
            hex(1)
        )
    })
    .await;
    let topology = t.store.topology();
    let stale_db = topology.database(0);
    topology
        .cluster(0)
        .unwrap()
        .master()
        .execute(format!(
            "INSERT INTO `{stale_db}`.`{table}` (shard_value, row_key, ref_key, fields) VALUES ('gone-driver', {}, 1, '{{}}')",
            hex(2)
        ))
        .await
        .unwrap();
    // A new cell the stopped maintainer never sees.
    t.store
        .put_cells(vec![cell(3, "BASE", 3, body(Some(DRIVERS[0]), 3))])
        .await
        .unwrap();
    let found = index::verify(&t.store, "by_driver", v, &|_, _, _| {})
        .await
        .unwrap();
    let of = |row: u128| -> Vec<&String> {
        found
            .problems
            .iter()
            .filter(|(r, _)| *r == key(row))
            .map(|(_, why)| why)
            .collect()
    };
    assert!(
        of(0).iter().any(|w| w.starts_with("no entry on shard")),
        "{found:?}"
    );
    assert!(of(1).iter().any(|w| w.contains("holds {}")), "{found:?}");
    assert!(
        of(2)
            .iter()
            .any(|w| w.starts_with("a stale entry on shard 0")),
        "{found:?}"
    );
    assert_eq!(found.problems.len(), 3, "{found:?}");
    assert_eq!(found.behind, vec![key(3)]);

    // A pointer past every cell of its row (row 5's latest is ref key 2).
    let pointers = index::pointer_table("by_driver", v);
    on_every_shard(&t.store, |db| {
        format!(
            "UPDATE `{db}`.`{pointers}` SET ref_key = 9 WHERE row_key = {}",
            hex(5)
        )
    })
    .await;
    // `--repair` rewrites the four rows found wrong from their latest
    // cells, then checks again: nothing wrong is left, and the row the
    // stopped maintainer has not reached is still its to do.
    let file = crate::harness::config_file(&t.text);
    let out = crate::harness::mezzanine(
        file.path(),
        &["index", "verify", "by_driver", "--repair", "--json"],
    )
    .output()
    .unwrap();
    let said: serde_json::Value = serde_json::from_str(
        String::from_utf8_lossy(&out.stdout)
            .lines()
            .last()
            .unwrap_or_default(),
    )
    .unwrap_or_else(|e| panic!("{e}: {out:?}"));
    assert_eq!(
        said["repaired"],
        json!({"rows": 4, "stale": 1, "corrupt_pointers": 1}),
        "{said}"
    );
    assert_eq!(said["problems"], json!([]), "{said}");
    assert_eq!(said["behind"], json!([key(3).to_string()]), "{said}");
    // Row 3's entry is counted once the maintainer has reached it.
    assert_eq!(said["entries"], json!(23), "{said}");
    assert!(!out.status.success(), "a row behind still fails: {out:?}");
    // The maintainer, started again, takes row 3's new cell from there.
    let (stop, run) = maintain(&t.store, &t.config, v);
    caught_up(&t.store, v, "by_driver").await;
    stop.cancel();
    run.await.unwrap();
    let healed = index::verify(&t.store, "by_driver", v, &|_, _, _| {})
        .await
        .unwrap();
    assert!(
        healed.problems.is_empty() && healed.behind.is_empty(),
        "{healed:?}"
    );
    assert_eq!(healed.entries, 24);
}
