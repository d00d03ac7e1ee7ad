//! Placements: a shard recorded on another cluster is where every store
//! reads and writes it, after its next refresh (or at once, for the store
//! that recorded it); the newest epoch wins; bad input changes nothing.

use std::time::{Duration, Instant};

use schemaless::mysql::topology::placement;
use schemaless::mysql::{schema, Topology};
use schemaless::{CellStore, MySqlStore, ReadFrom};

use crate::harness::{cell, cluster, config_file, mezzanine, row, Instance};

/// A row number whose row key lands on `shard` of `shard_count`.
fn row_on(shard: u32, shard_count: u32, skip: usize) -> u128 {
    (0u128..)
        .filter(|&n| schemaless::routing::shard_of(&row(n), shard_count) == shard)
        .nth(skip)
        .unwrap()
}

async fn entity_rows(t: &Instance, cluster: usize, shard: u32) -> i64 {
    let topology = t.store.topology();
    let master = topology.clusters[cluster].master();
    sqlx::query_scalar(sqlx::AssertSqlSafe(format!(
        "SELECT COUNT(*) FROM `{}`.`entity`",
        topology.database(shard)
    )))
    .fetch_one(&master.pool)
    .await
    .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_recorded_placement_moves_the_shards_reads_and_writes_everywhere() {
    let t = Instance::with_limits(8, "[storage]\ntopology_refresh_ms = 100\n").await;
    // Connected before the placement is recorded.
    let other = MySqlStore::connect(&t.config).unwrap();
    let shard = 1;
    assert_eq!(t.store.topology().cluster(shard).unwrap().name, "a");
    let before = cell(
        row_on(shard, 8, 0),
        "BASE",
        1,
        serde_json::json!({"where": "a"}),
    );
    t.store.put_cells(vec![before.clone()]).await.unwrap()[0]
        .clone()
        .unwrap();

    let placed = placement::record(t.store.topology(), shard, "b")
        .await
        .unwrap();
    assert_eq!((placed.cluster.as_str(), placed.epoch), ("b", 1));
    assert_eq!(t.store.topology().cluster(shard).unwrap().name, "b");
    assert_eq!(t.store.topology().shards_of(1), vec![1, 4, 5, 6, 7]);
    assert_eq!(t.store.topology().shards_of(0), vec![0, 2, 3]);
    // schema apply completes the shard where it is now.
    let topology = Topology::from_config(&t.config).unwrap();
    let report = schema::apply(&topology).await.unwrap();
    assert_eq!(report.clusters[1].created, 1, "{report:?}");
    assert!(schema::verify(&topology).await.unwrap().is_empty());
    topology.close().await;

    // The recording store reads and writes the shard on b: the cell
    // written on a is not there (nothing was copied), a new one lands on b.
    assert!(t
        .store
        .get_cell(&before.key, ReadFrom::Master)
        .await
        .unwrap()
        .is_none());
    let after = cell(
        row_on(shard, 8, 1),
        "BASE",
        1,
        serde_json::json!({"where": "b"}),
    );
    t.store.put_cells(vec![after.clone()]).await.unwrap()[0]
        .clone()
        .unwrap();
    assert_eq!(entity_rows(&t, 0, shard).await, 1);
    assert_eq!(entity_rows(&t, 1, shard).await, 1);
    assert_eq!(t.store.log_heads().await.unwrap()[shard as usize], 1);

    // `shard status` shows where the shards are now.
    let text = format!(
        "{}\n[storage]\ntopology_refresh_ms = 100\n",
        cluster().config_toml(&t.config.instance.name, 8)
    );
    let file = config_file(&text);
    let output = mezzanine(file.path(), &["shard", "status", "--json"])
        .output()
        .unwrap();
    assert!(output.status.success(), "{output:?}");
    let status: serde_json::Value = serde_json::from_slice(output.stdout.trim_ascii()).unwrap();
    assert_eq!(status["clusters"][0]["holds"], "0,2-3");
    assert_eq!(status["clusters"][1]["holds"], "1,4-7");
    assert_eq!(status["clusters"][1]["configured"], "4-7");
    assert_eq!(status["placements"][0]["shard"], 1);
    assert_eq!(status["placements"][0]["cluster"], "b");
    assert_eq!(status["placements"][0]["epoch"], 1);

    // The other store follows within its refresh period, by its own
    // maintenance task.
    let deadline = Instant::now() + Duration::from_secs(30);
    while other.topology().cluster(shard).unwrap().name != "b" {
        assert!(
            Instant::now() < deadline,
            "the other store never picked the placement up"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let got = other.get_cell(&after.key, ReadFrom::Master).await.unwrap();
    assert_eq!(got.unwrap().cell, after);

    // A store connected after the move reads placements at once, not a
    // refresh period later (here ten minutes).
    let slow_text = format!(
        "{}\n[storage]\ntopology_refresh_ms = 600000\n",
        cluster().config_toml(&t.config.instance.name, 8)
    );
    let late =
        MySqlStore::connect(&config::Config::parse(&slow_text, "slow.toml").unwrap()).unwrap();
    let deadline = Instant::now() + Duration::from_secs(20);
    while late.topology().cluster(shard).unwrap().name != "b" {
        assert!(
            Instant::now() < deadline,
            "a new store kept the config's placement"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    late.close().await;

    // A fresh topology (a command) applies it on its first refresh.
    let fresh = Topology::from_config(&t.config).unwrap();
    assert_eq!(fresh.cluster(shard).unwrap().name, "a");
    assert_eq!(placement::refresh(&fresh).await, vec![shard]);
    assert_eq!(fresh.cluster(shard).unwrap().name, "b");
    assert_eq!(fresh.placement_epoch(shard), 1);

    // Moved back: a newer epoch, which wins over the older one even where
    // the older is all a master has.
    let back = placement::record(&fresh, shard, "a").await.unwrap();
    assert_eq!(back.epoch, 2);
    let b_master = fresh.clusters[1].master();
    sqlx::raw_sql(sqlx::AssertSqlSafe(format!(
        "UPDATE `{}_meta`.`placement` SET cluster = 'b', epoch = 1 WHERE shard = {shard}",
        fresh.instance
    )))
    .execute(&b_master.pool)
    .await
    .unwrap();
    // Applied by this refresh, or a moment before by the store's own
    // maintenance task (its period is short here).
    let applied = placement::refresh(other.topology()).await;
    assert!(applied.iter().all(|s| *s == shard), "{applied:?}");
    assert_eq!(other.topology().cluster(shard).unwrap().name, "a");
    let got = other.get_cell(&before.key, ReadFrom::Master).await.unwrap();
    assert_eq!(got.unwrap().cell, before);
    // An older epoch applied after a newer one changes nothing.
    assert!(placement::refresh(other.topology()).await.is_empty());
    assert_eq!(other.topology().cluster(shard).unwrap().name, "a");
    fresh.close().await;
    other.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_placement_of_an_unknown_cluster_or_shard_is_refused_and_records_nothing() {
    let t = Instance::new(8).await;
    let topology = t.store.topology();
    let err = placement::record(topology, 2, "nowhere").await.unwrap_err();
    assert!(
        err.to_string().contains("no cluster named \"nowhere\""),
        "{err}"
    );
    let err = placement::record(topology, 8, "b").await.unwrap_err();
    assert!(
        matches!(err, schemaless::Error::NoSuchShard { shard: 8, .. }),
        "{err}"
    );
    assert!(placement::recorded(topology).await.is_empty());
    assert_eq!(topology.cluster(2).unwrap().name, "a");
    // A recorded placement naming a cluster this config lacks (another
    // config's) is ignored, not applied.
    let master = topology.clusters[0].master();
    sqlx::raw_sql(sqlx::AssertSqlSafe(format!(
        "INSERT INTO `{}_meta`.`placement` VALUES (2, 'zz', 9, 0)",
        topology.instance
    )))
    .execute(&master.pool)
    .await
    .unwrap();
    assert!(placement::refresh(topology).await.is_empty());
    assert_eq!(topology.cluster(2).unwrap().name, "a");
}
