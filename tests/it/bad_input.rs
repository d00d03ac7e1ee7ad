//! Invalid input is rejected naming the field, and changes nothing;
//! corrupt stored data is an error naming the cell, never a panic.

use schemaless::mysql::{schema, Topology};
use schemaless::{Body, Cell, CellStore, Error, ReadFrom, WriteOutcome};
use serde_json::json;

use crate::harness::{cell, cluster, column, row, Instance};

fn field(err: Error) -> String {
    match err {
        Error::InvalidInput { field, .. } => field,
        other => panic!("expected an input error, got {other}"),
    }
}

async fn log_len(t: &Instance) -> usize {
    let mut n = 0;
    for shard in 0..t.config.instance.shard_count {
        n += t
            .store
            .get_cells_for_shard(shard, 0, 10_000, ReadFrom::Master)
            .await
            .unwrap()
            .cells
            .len();
    }
    n
}

#[test]
fn every_malformed_part_names_its_field() {
    let uuid = "6f1c1a0e-8a3b-4a55-9d1e-3c2b1a0f9e8d";
    let cases = [
        (Cell::parse("42", "BASE", 1, json!({})), "row_key"),
        (
            Cell::parse("6f1c1a0e-8a3b-4a55-9d1e", "BASE", 1, json!({})),
            "row_key",
        ),
        (Cell::parse(uuid, "", 1, json!({})), "column"),
        (Cell::parse(uuid, "BASE-2", 1, json!({})), "column"),
        (Cell::parse(uuid, "ÄBASE", 1, json!({})), "column"),
        (Cell::parse(uuid, "BASE", -5, json!({})), "ref_key"),
        (Cell::parse(uuid, "BASE", 1, json!(null)), "body"),
        (Cell::parse(uuid, "BASE", 1, json!([{"a": 1}])), "body"),
    ];
    for (result, expected) in cases {
        assert_eq!(field(result.unwrap_err()), expected);
    }
    assert_eq!(field(Body::parse("{not json").unwrap_err()), "body");
}

#[tokio::test]
async fn an_oversized_body_fails_the_whole_batch_and_writes_nothing() {
    let t =
        Instance::with_limits(4, "[limits]\nmax_body_bytes = 1000\nmax_batch_cells = 10\n").await;
    let mut batch: Vec<_> = (0..5)
        .map(|i| cell(i, "BASE", 1, json!({"ok": true})))
        .collect();
    batch.push(cell(9, "BASE", 1, json!({"pad": "x".repeat(1000)})));
    let err = t.store.put_cells(batch).await.unwrap_err();
    assert_eq!(field(err), "cells[5].body");
    assert_eq!(log_len(&t).await, 0, "nothing was written");

    let err = t
        .store
        .put_cell(cell(9, "BASE", 1, json!({"pad": "x".repeat(1000)})))
        .await
        .unwrap_err();
    assert!(err.to_string().contains("max_body_bytes = 1000"), "{err}");

    let too_many: Vec<_> = (0..11).map(|i| cell(i, "BASE", 1, json!({}))).collect();
    assert_eq!(
        field(t.store.put_cells(too_many).await.unwrap_err()),
        "cells"
    );
    assert_eq!(log_len(&t).await, 0, "nothing was written");
}

#[tokio::test]
async fn a_tampered_body_is_an_error_naming_the_cell() {
    let t = Instance::new(4).await;
    let victim = cell(77, "BASE", 3, json!({"fare": "10.00"}));
    let bystander = cell(78, "BASE", 1, json!({"fare": "11.00"}));
    t.store
        .put_cells(vec![victim.clone(), bystander.clone()])
        .await
        .unwrap();
    let shard = schemaless::routing::shard_of(&row(77), 4);
    let database = t.store.topology().database(shard);
    t.execute_on_master(
        shard,
        format!(
            "UPDATE `{database}`.entity SET body = X'789c0badcafe' WHERE row_key = X'{}'",
            row(77)
                .as_bytes()
                .iter()
                .map(|b| format!("{b:02x}"))
                .collect::<String>()
        ),
    )
    .await;

    let name = format!("{}/BASE/3", row(77));
    let check = |result: Result<_, Error>| match result {
        Err(Error::CorruptCell { cell, shard: s, .. }) => {
            assert_eq!(cell, name);
            assert_eq!(s, shard);
        }
        other => panic!("expected a corrupt-cell error, got {other:?}"),
    };
    check(
        t.store
            .get_cell(&victim.key, ReadFrom::Master)
            .await
            .map(|_| ()),
    );
    check(
        t.store
            .get_cell_latest(&row(77), &column("BASE"), ReadFrom::Master)
            .await
            .map(|_| ()),
    );
    check(
        t.store
            .get_cells_for_row(&row(77), ReadFrom::Master)
            .await
            .map(|_| ()),
    );
    // A write to its address is a conflict for that cell alone (the
    // damaged cell holds the address, set aside for repair), not an error
    // failing every batch that touches it.
    assert!(
        matches!(
            t.store.put_cell(victim.clone()).await,
            Err(Error::Conflict { .. })
        ),
        "a write over a damaged cell is a conflict"
    );
    let batch = t
        .store
        .put_cells(vec![
            victim.clone(),
            cell(79, "BASE", 1, json!({"fare": "12.00"})),
        ])
        .await
        .unwrap();
    assert!(
        batch[0].is_err() && matches!(batch[1], Ok(WriteOutcome::Written)),
        "{batch:?}"
    );
    let damaged = schemaless::mysql::damaged::counts(&t.store).await;
    assert_eq!(
        damaged
            .iter()
            .map(|(_, c)| *c.as_ref().unwrap())
            .sum::<u64>(),
        1,
        "{damaged:?}"
    );
    let err = t
        .store
        .get_cell(&victim.key, ReadFrom::Master)
        .await
        .unwrap_err();
    assert!(
        err.to_string().contains(&name),
        "the message names the cell: {err}"
    );
    // Other rows are unaffected.
    let other = t
        .store
        .get_cell(&bystander.key, ReadFrom::Master)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(other.cell, bystander);
}

#[tokio::test]
async fn a_different_shard_count_for_an_existing_instance_is_refused() {
    let t = Instance::new(4).await;
    t.store
        .put_cell(cell(1, "BASE", 1, json!({})))
        .await
        .unwrap();
    let text = cluster().config_toml(&t.config.instance.name, 8);
    let config = config::Config::parse(&text, "changed.toml").unwrap();
    let topology = Topology::from_config(&config).unwrap();
    let err = schema::apply(&topology).await.unwrap_err();
    assert!(err.to_string().contains("created with 4 shards"), "{err}");
    // Nothing was created for the new count.
    let missing = schema::verify(&Topology::from_config(&t.config).unwrap())
        .await
        .unwrap();
    assert!(missing.is_empty());
    let node = &topology.clusters[0].master();
    let shard_dbs: i64 = sqlx::query_scalar(
        "SELECT COUNT(*) FROM information_schema.schemata WHERE schema_name LIKE CONCAT(?, '\\_%')",
    )
    .bind(&t.config.instance.name)
    .fetch_one(&node.pool)
    .await
    .unwrap();
    // cluster a holds shards 0-1 of 4 (plus the meta database)
    assert_eq!(shard_dbs, 3);
}

#[tokio::test]
async fn an_unapplied_schema_is_a_final_error_and_an_unreachable_node_a_retryable_one() {
    let name = format!("noschema{}", std::process::id() % 100_000);
    let config = config::Config::parse(&cluster().config_toml(&name, 4), "t.toml").unwrap();
    let store = schemaless::MySqlStore::connect(&config).unwrap();
    let err = store
        .put_cell(cell(1, "BASE", 1, json!({})))
        .await
        .unwrap_err();
    assert!(matches!(err, Error::Storage { .. }), "{err}");
    assert!(
        !err.is_retryable(),
        "a missing shard database does not heal by retrying: {err}"
    );

    // Port 1 on loopback refuses connections.
    let text = cluster().config_toml(&name, 4).replace(
        &cluster().mysql_url("a-master").unwrap(),
        "mysql://root@127.0.0.1:1",
    );
    let config = config::Config::parse(&text, "t.toml").unwrap();
    let store = schemaless::MySqlStore::connect(&config).unwrap();
    // Shard 0 is on cluster a, whose master now points at port 1.
    let err = store
        .get_cells_for_shard(0, 0, 10, ReadFrom::Master)
        .await
        .unwrap_err();
    assert!(
        err.is_retryable(),
        "an unreachable node may come back: {err}"
    );
    assert!(
        err.to_string().contains("127.0.0.1:1"),
        "the error names the node: {err}"
    );
}

/// A page of the change log carries at most `limits.max_batch_bytes` of
/// stored body past its first cell, so a page of large cells cannot take
/// gigabytes at once; following `next` still reads every cell, in order,
/// once.
#[tokio::test]
async fn a_change_log_page_is_cut_by_bytes_and_the_rest_follows() {
    let t = Instance::with_limits(
        2,
        "[limits]\nmax_body_bytes = 300000\nmax_batch_bytes = 300000\n",
    )
    .await;
    // Bodies that do not compress much: pseudo-random hex.
    let mut seed = 0x2545_f491_4f6c_dd1du64;
    let mut noise = |len: usize| {
        (0..len)
            .map(|_| {
                seed ^= seed << 13;
                seed ^= seed >> 7;
                seed ^= seed << 17;
                char::from_digit((seed % 16) as u32, 16).unwrap()
            })
            .collect::<String>()
    };
    let mut cells: Vec<Cell> = (0..10)
        .map(|i| cell(i + 1, "BASE", 1, json!({ "blob": noise(200_000) })))
        .collect();
    for c in &cells {
        t.store.put_cell(c.clone()).await.unwrap();
    }
    // Uncut, each shard is one page of at most 10 cells.
    let mut pages = 0;
    let mut seen = Vec::new();
    for shard in 0..2 {
        let mut after = 0;
        loop {
            let page = t
                .store
                .get_cells_for_shard(shard, after, 100, ReadFrom::Master)
                .await
                .unwrap();
            if page.cells.is_empty() {
                break;
            }
            assert!(
                page.cells.len() <= 4,
                "{} cells of about 100 KB stored",
                page.cells.len()
            );
            pages += 1;
            seen.extend(page.cells.into_iter().map(|s| s.cell));
            after = page.next;
        }
    }
    assert!(pages >= 4, "{pages} pages");
    let key = |c: &Cell| c.key.clone();
    seen.sort_by_key(key);
    cells.sort_by_key(key);
    assert_eq!(seen, cells);
}
