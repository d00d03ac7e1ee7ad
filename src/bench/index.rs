//! `mezzanine bench index`: how long a write takes to show in an index
//! query under a steady write load, and how fast triggers go through the
//! change log.
//!
//! Lag: once the maintainer holds every shard and the load has run for a
//! second, a background load writes trips at `--load` cells/s while a probe
//! writes one trip with a driver of its own every 50 ms and queries the
//! index for that driver every millisecond until the trip shows; the lag is
//! from the write's acknowledgement to the first query that sees it. The
//! maintainer runs in this process (so it is woken by the writes) and reads
//! the change log from the masters.
//!
//! The floor: after each probe is seen, the same master work that any
//! index maintainer must do between a write's acknowledgement and its
//! entry becoming visible, done raw on a held connection to a master:
//! one primary-key read (the change log) and one single-row insert,
//! committed as every Schemaless write is (durable on the master and,
//! semi-synchronously, a minion). Its p50 and p99 under the same load, in
//! the same run, are the lag no maintainer of this design can beat here:
//! `lag_p99_vs_floor` is how far ours is from it.
//!
//! Throughput: a trigger with a handler that only counts goes through
//! `--cells` fresh cells from the start of the log; then a new index version
//! is backfilled over the same log, and `index verify` checks it.

use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use async_trait::async_trait;
use clap::Args;
use schemaless::mysql::index::{self, Maintainer};
use schemaless::mysql::trigger::{self, Handler, HandlerResult, Trigger};
use schemaless::mysql::{schema, Topology};
use schemaless::{
    Body, Cell, CellStore, Column, IndexQuery, MySqlStore, ReadFrom, RefKey, RowKey, StoredCell,
};
use serde_json::json;
use tokio_util::sync::CancellationToken;

use super::stats::Latencies;

#[derive(Args)]
pub struct IndexArgs {
    /// Print one JSON object with every figure as the last line.
    #[arg(long)]
    json: bool,
    /// How long to measure lag, in seconds (a probe every 50 ms or so: a
    /// p99 needs a few hundred).
    #[arg(long, default_value_t = 30)]
    seconds: u64,
    /// Background write load during the lag measurement, cells per second.
    #[arg(long, default_value_t = 500)]
    load: u64,
    /// Cells for the trigger and backfill throughput runs.
    #[arg(long, default_value_t = 20_000)]
    cells: usize,
    /// The instance the benchmark creates (and drops) for itself.
    #[arg(long, default_value = "mzbench_index")]
    instance: String,
}

const INDEX: &str = "bench_by_driver";

fn trip(row: RowKey, driver: &str, n: u64) -> anyhow::Result<Cell> {
    Ok(Cell::new(
        row,
        Column::new("BASE")?,
        RefKey::new(1)?,
        Body::from_value(json!({
            "driver_uuid": driver,
            "city_id": (n % 50) as i64,
            "status": "requested",
            "fare": "12.50",
        }))?,
    ))
}

struct Count(AtomicU64);

#[async_trait]
impl Handler for Count {
    async fn handle(&self, _cell: &StoredCell) -> HandlerResult {
        self.0.fetch_add(1, Ordering::Relaxed);
        Ok(())
    }
}

pub async fn run(args: IndexArgs, config_path: &Path, cluster_dir: &Path) -> anyhow::Result<()> {
    if args.seconds == 0 || args.cells == 0 {
        return Err(crate::UsageError("--seconds and --cells must be positive".into()).into());
    }
    let mut config = crate::load_config(config_path)?;
    config.instance.name = args.instance.clone();
    config.indexes = vec![config::Index {
        name: INDEX.into(),
        column: "BASE".into(),
        shard_field: "driver_uuid".into(),
        fields: vec!["city_id".into(), "status".into()],
        types: [("city_id".to_string(), config::IndexFieldType::Int)].into(),
        unique: false,
    }];
    let spec = crate::cluster::spec_from_config(config_path, 55432)?;
    crate::cluster::up(cluster_dir, spec).await?;
    let topology = Topology::from_config(&config)?;
    schema::drop_instance(&topology).await?;
    schema::apply(&topology).await?;
    let store = MySqlStore::connect(&config)?;
    let v1 = index::create_version(&store, INDEX).await?;
    index::switch(&store, INDEX, v1).await?;
    let options = config.triggers.clone();
    let mut floor = Floor::new(&topology).await?;

    // Lag under load.
    let loading = Arc::new(AtomicBool::new(true));
    let loaded = Arc::new(AtomicU64::new(0));
    let load = {
        let (store, loading, loaded) = (store.clone(), loading.clone(), loaded.clone());
        // A hundred small writes a second rather than ten bursts: a steady
        // load, as the target is stated for.
        let per_tick = (args.load / 100).max(1);
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(Duration::from_millis(10));
            let mut n = 0u64;
            while loading.load(Ordering::Relaxed) {
                tick.tick().await;
                let batch: Vec<Cell> = (0..per_tick)
                    .map(|_| {
                        n += 1;
                        trip(RowKey::random(), &uuid::Uuid::new_v4().to_string(), n)
                    })
                    .collect::<anyhow::Result<_>>()?;
                store.put_cells(batch).await?;
                loaded.fetch_add(per_tick, Ordering::Relaxed);
            }
            anyhow::Ok(())
        })
    };
    // The servers' own floor under the load alone, before the maintainer
    // starts: what the write load leaves of the machine.
    let load_only_for = Duration::from_secs((args.seconds / 3).max(3));
    eprintln!(
        "timing the raw floor for {}s under the load alone ...",
        load_only_for.as_secs()
    );
    tokio::time::sleep(Duration::from_secs(1)).await;
    let mut floors_load_only = Vec::new();
    let started = Instant::now();
    while started.elapsed() < load_only_for {
        floors_load_only.push(floor.once(floors_load_only.len()).await?);
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let maintainer = Maintainer::trigger(&store, INDEX, v1, &options)?;
    let maintainer_stats = maintainer.stats();
    let cancel = CancellationToken::new();
    let maintaining = {
        let cancel = cancel.clone();
        tokio::spawn(async move { maintainer.run(cancel).await })
    };
    eprintln!(
        "measuring index lag for {}s under {} cells/s ...",
        args.seconds, args.load
    );
    // The lag is that of a steady state: the maintainer first takes its
    // shards and the load runs for a second, so that connections are open
    // and statements prepared before the first probe.
    let warming = Instant::now();
    while maintainer_stats.shards_owned.load(Ordering::Relaxed)
        < u64::from(config.instance.shard_count)
    {
        anyhow::ensure!(
            warming.elapsed() < Duration::from_secs(60),
            "the index maintainer did not take its shards within 60 s"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    tokio::time::sleep(Duration::from_secs(1)).await;
    let loaded_before = loaded.load(Ordering::Relaxed);
    let started = Instant::now();
    let mut lags = Vec::new();
    let mut floors = Vec::new();
    let mut n = 0;
    while started.elapsed() < Duration::from_secs(args.seconds) {
        n += 1;
        let row = RowKey::random();
        let driver = uuid::Uuid::new_v4().to_string();
        store.put_cell(trip(row, &driver, n)?).await?;
        let acked = Instant::now();
        let query = IndexQuery {
            index: INDEX.into(),
            shard_value: json!(driver),
            filters: vec![],
            order_by: None,
            descending: false,
            limit: 1,
        };
        loop {
            let found = store.query_index(&query, ReadFrom::Master).await?;
            if found.iter().any(|e| e.row_key == row) {
                lags.push(acked.elapsed());

                break;
            }
            anyhow::ensure!(
                acked.elapsed() < Duration::from_secs(30),
                "a write did not show in the index within 30 s"
            );
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        floors.push(floor.once(n as usize).await?);
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    loading.store(false, Ordering::Relaxed);
    load.await??;
    let load_rate =
        (loaded.load(Ordering::Relaxed) - loaded_before) as f64 / started.elapsed().as_secs_f64();
    let lags = Latencies::new(lags);
    let (p50, p99) = (
        lags.percentile_us(50.0) / 1000.0,
        lags.percentile_us(99.0) / 1000.0,
    );
    println!("index lag        p50 {p50:>7.2} ms  p99 {p99:>7.2} ms  ({} probes, load {load_rate:.0} cells/s; target p99 < 20 ms)", lags.len());
    let floors = Latencies::new(floors);
    let (floor_p50, floor_p99) = (
        floors.percentile_us(50.0) / 1000.0,
        floors.percentile_us(99.0) / 1000.0,
    );
    println!("raw floor        p50 {floor_p50:>7.2} ms  p99 {floor_p99:>7.2} ms  (a primary-key read and a durable single-row insert on a master, same load and maintainer; lag p99 / floor p99 {:.2})", p99 / floor_p99);
    let floors_load_only = Latencies::new(floors_load_only);
    let (floor_load_only_p50, floor_load_only_p99) = (
        floors_load_only.percentile_us(50.0) / 1000.0,
        floors_load_only.percentile_us(99.0) / 1000.0,
    );
    println!("raw floor        p50 {floor_load_only_p50:>7.2} ms  p99 {floor_load_only_p99:>7.2} ms  (the same, under the write load alone, before the maintainer ran)");
    floor.close().await?;
    cancel.cancel();
    maintaining.await??;

    // Trigger throughput over fresh cells.
    eprintln!("writing {} cells for the throughput runs ...", args.cells);
    let cells: Vec<Cell> = (0..args.cells as u64)
        .map(|n| trip(RowKey::random(), &uuid::Uuid::new_v4().to_string(), n))
        .collect::<anyhow::Result<_>>()?;
    for batch in cells.chunks(config.limits.max_batch_cells) {
        store.put_cells(batch.to_vec()).await?;
    }
    let total_log = trigger::lag(&store, "bench_count").await?;
    let counter = Arc::new(Count(AtomicU64::new(0)));
    let mut count_options = config.triggers.clone();
    count_options.read_from = config::TriggerRead::Master;
    count_options.batch = 500;
    let counting = Trigger::new(
        "bench_count",
        Column::new("BASE")?,
        store.clone(),
        counter.clone(),
        count_options,
    )?;
    let cancel = CancellationToken::new();
    let started = Instant::now();
    let runner = {
        let cancel = cancel.clone();
        tokio::spawn(async move { counting.run(cancel).await })
    };
    while counter.0.load(Ordering::Relaxed) < total_log {
        anyhow::ensure!(
            started.elapsed() < Duration::from_secs(600),
            "the trigger did not finish in 10 minutes"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let trigger_rate = total_log as f64 / started.elapsed().as_secs_f64();
    cancel.cancel();
    runner.await??;
    println!("trigger          {trigger_rate:>10.0} cells/s  ({total_log} cells, no-op handler, {} shards)", config.instance.shard_count);

    // Index backfill throughput: a new version over the same log.
    let v2 = index::create_version(&store, INDEX).await?;
    let backfill = Maintainer::trigger(&store, INDEX, v2, &options)?;
    let cancel = CancellationToken::new();
    let started = Instant::now();
    let runner = {
        let cancel = cancel.clone();
        tokio::spawn(async move { backfill.run(cancel).await })
    };
    let name = index::trigger_name(INDEX, v2);
    loop {
        tokio::time::sleep(Duration::from_millis(100)).await;
        if trigger::lag(&store, &name).await? == 0 {
            break;
        }
        anyhow::ensure!(
            started.elapsed() < Duration::from_secs(600),
            "the backfill did not finish in 10 minutes"
        );
    }
    let backfill_rate = total_log as f64 / started.elapsed().as_secs_f64();
    cancel.cancel();
    runner.await??;
    println!("index backfill   {backfill_rate:>10.0} cells/s");

    // `index verify` over the version just built: both sweeps.
    let started = Instant::now();
    let checked = index::verify(&store, INDEX, v2, &|_, _, _| {}).await?;
    let verify_secs = started.elapsed().as_secs_f64();
    anyhow::ensure!(
        checked.problems.is_empty() && checked.behind.is_empty(),
        "index verify found the freshly built version wrong: {:?}",
        &checked.problems[..checked.problems.len().min(3)]
    );
    let verify_rate = checked.rows as f64 / verify_secs;
    println!(
        "index verify     {verify_rate:>10.0} rows/s  ({} rows, {} entries, {verify_secs:.1}s)",
        checked.rows, checked.entries
    );

    if args.json {
        println!(
            "{}",
            json!({
                "lag_p50_ms": p50,
                "lag_p99_ms": p99,
                "floor_p50_ms": floor_p50,
                "floor_p99_ms": floor_p99,
                "lag_p99_vs_floor": p99 / floor_p99,
                "floor_load_only_p50_ms": floor_load_only_p50,
                "floor_load_only_p99_ms": floor_load_only_p99,
                "probes": lags.len(),
                "load_cells_per_s": load_rate,
                "trigger_cells_per_s": trigger_rate,
                "index_backfill_cells_per_s": backfill_rate,
                "index_verify_rows_per_s": verify_rate,
                "log_cells": total_log,
                "shards": config.instance.shard_count,
            })
        );
    }
    store.close().await;
    schema::drop_instance(&topology).await?;
    topology.close().await;
    Ok(())
}

/// The raw floor of index lag: one connection held to each master, with a
/// table of its own in the cluster's first shard database.
struct Floor {
    held: Vec<(String, sqlx::pool::PoolConnection<sqlx::MySql>)>,
}

impl Floor {
    async fn new(topology: &Topology) -> anyhow::Result<Floor> {
        let mut held = Vec::with_capacity(topology.clusters.len());
        for (i, cluster) in topology.clusters.iter().enumerate() {
            // A cluster holding no shard has no index entries to time.
            let Some(&first) = topology.shards_of(i).first() else {
                continue;
            };
            let database = topology.database(first);
            let mut connection = cluster.master().pool.acquire().await?;
            sqlx::raw_sql(sqlx::AssertSqlSafe(format!(
                "CREATE TABLE IF NOT EXISTS `{database}`.`bench_floor` \
                 (id BIGINT UNSIGNED AUTO_INCREMENT PRIMARY KEY, at BIGINT NOT NULL)"
            )))
            .execute(&mut *connection)
            .await?;
            held.push((database, connection));
        }
        Ok(Floor { held })
    }

    /// Times one read and one durable insert on master `n % masters`.
    async fn once(&mut self, n: usize) -> anyhow::Result<Duration> {
        let slot = n % self.held.len();
        let (database, connection) = &mut self.held[slot];
        let started = Instant::now();
        sqlx::query(sqlx::AssertSqlSafe(format!(
            "SELECT added_id FROM `{database}`.`entity` ORDER BY added_id DESC LIMIT 1"
        )))
        .fetch_optional(&mut **connection)
        .await?;
        sqlx::query(sqlx::AssertSqlSafe(format!(
            "INSERT INTO `{database}`.`bench_floor` (at) VALUES (?)"
        )))
        .bind(n as i64)
        .execute(&mut **connection)
        .await?;
        Ok(started.elapsed())
    }

    async fn close(self) -> anyhow::Result<()> {
        for (database, mut connection) in self.held {
            sqlx::raw_sql(sqlx::AssertSqlSafe(format!(
                "DROP TABLE IF EXISTS `{database}`.`bench_floor`"
            )))
            .execute(&mut *connection)
            .await?;
        }
        Ok(())
    }
}
