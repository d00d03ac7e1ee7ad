//! `mezzanine demo`: the end-to-end demo on the dev cluster.
//!
//! Brings the dev cluster up if it is not, applies the Schemaless schema,
//! writes a few thousand trip cells across every shard, shows the cell API's
//! guarantees (latest wins, idempotent rewrites, conflicts that change
//! nothing), and where the data lives: which shard, cluster and database
//! each row went to, and that every minion holds the same cells as its
//! master. Then the legacy side: the trips tables in PostgreSQL, seeded,
//! given UUIDs online, and read and written through the tripstore facade in
//! `legacy` mode; then mode `mirror`: trips written through the facade
//! fill the outbox in their legacy transactions, and the relay drains it
//! into Schemaless; the backfill copies the seeded history, and the mode
//! steps to `shadow`.

use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::Context;
use clap::Args;
use schemaless::mysql::Topology;
use schemaless::{
    routing, Body, Cell, CellStore, Error, MySqlStore, ReadFrom, RefKey, WriteOutcome,
};
use serde_json::json;
use sqlx::AssertSqlSafe;

use crate::workload::Trips;

/// The billing flow shared with `examples/billing`.
#[path = "../../examples/billing/flow.rs"]
mod flow;

// The acts after the cell API's, in the order the demo runs them.
mod capture;
mod legacy;
mod mirror;
mod triggers;
mod verify;

#[derive(Args)]
pub struct DemoArgs {
    /// How many trips to write (three cells each).
    #[arg(long, default_value_t = 2000)]
    trips: usize,
    /// How many trips to seed into the legacy PostgreSQL tables.
    #[arg(long, default_value_t = 2000)]
    legacy_trips: u64,
    /// How many trips to write through the facade in mode mirror.
    #[arg(long, default_value_t = 1000)]
    mirror_trips: u64,
    /// PostgreSQL's port for the dev cluster.
    #[arg(long, default_value_t = 55432)]
    postgres_port: u16,
}

fn step(title: &str) {
    println!("\n== {title}");
}

pub async fn run(args: DemoArgs, config_path: &Path, cluster_dir: &Path) -> anyhow::Result<()> {
    if args.trips == 0 {
        return Err(crate::UsageError("--trips must be positive".into()).into());
    }
    let config = crate::load_config(config_path)?;

    step("1. the dev cluster: PostgreSQL and MariaDB clusters on 127.0.0.1");
    let spec = crate::cluster::spec_from_config(config_path, args.postgres_port)?;
    let started = Instant::now();
    let cluster = crate::cluster::up(cluster_dir, spec).await?;
    println!("up in {:.1}s", started.elapsed().as_secs_f64());
    crate::cluster::print_status(&cluster).await;

    step("2. the Schemaless schema: one database per shard");
    let topology = Topology::from_config(&config)?;
    crate::schema::apply(&topology).await?;
    let store = MySqlStore::connect(&config)?;

    step("3. writing trips: BASE v1, BASE v2, and a STATUS v0");
    let seed = schemaless::cell::now_micros() as u64;
    let mut trips = Trips::new(seed);
    let status = schemaless::Column::new("STATUS")?;
    let mut cells = Vec::with_capacity(args.trips * 3);
    for _ in 0..args.trips {
        let row = trips.row_key();
        let v1 = trips.base_cell(row, 1);
        let mut v2 = v1.clone();
        v2.key.ref_key = RefKey::new(2)?;
        let mut fields = v1.body.fields().clone();
        fields.insert("status".into(), json!("completed"));
        v2.body = Body::from(fields);
        let paid = Cell::new(
            row,
            status.clone(),
            RefKey::new(0)?,
            Body::from_value(json!({"billing": "charged", "attempts": 1}))?,
        );
        cells.extend([v1, v2, paid]);
    }
    let started = Instant::now();
    let mut written = 0;
    for batch in cells.chunks(config.limits.max_batch_cells) {
        let results = store.put_cells(batch.to_vec()).await?;
        written += results
            .iter()
            .filter(|r| **r == Ok(WriteOutcome::Written))
            .count();
    }
    let elapsed = started.elapsed();
    println!(
        "{written} cells of {} trips written in {:.2}s ({:.0} cells/s), over {} shards",
        args.trips,
        elapsed.as_secs_f64(),
        written as f64 / elapsed.as_secs_f64(),
        config.instance.shard_count
    );

    step("4. cells are immutable: rewrites are idempotent, conflicts change nothing");
    let again = store.put_cells(cells[..3].to_vec()).await?;
    println!("the first trip's three cells again: {again:?}");
    let mut forged = cells[0].clone();
    let mut fields = forged.body.fields().clone();
    fields.insert("fare".into(), json!("0.01"));
    forged.body = Body::from(fields);
    match store.put_cell(forged).await {
        Err(Error::Conflict { key }) => println!("a different body for {key}: conflict, refused"),
        other => anyhow::bail!("expected a conflict, got {other:?}"),
    }
    let kept = store
        .get_cell(&cells[0].key, ReadFrom::Master)
        .await?
        .context("the first cell is missing")?;
    println!("stored fare is still {}", kept.cell.body.fields()["fare"]);

    step("5. reading a trip: the latest cell of each column");
    let row = cells[0].key.row_key;
    let shard = routing::shard_of(&row, config.instance.shard_count);
    let home = topology.cluster(shard)?;
    println!(
        "trip {row}\n  fnv1a64(row key) % {} = shard {shard}\n  -> cluster {:?}, database {}, master {}",
        config.instance.shard_count,
        home.name,
        topology.database(shard),
        home.master().label
    );
    for stored in store.get_cells_for_row(&row, ReadFrom::Master).await? {
        println!(
            "  {:<7} ref {}  added_id {:<6} {}",
            stored.cell.key.column.as_str(),
            stored.cell.key.ref_key,
            stored.added_id,
            stored.cell.body
        );
    }
    let latest = store
        .get_cell_latest(&row, &cells[0].key.column, ReadFrom::Master)
        .await?
        .context("no latest BASE")?;
    println!(
        "get_cell_latest(BASE) = ref {} (status {})",
        latest.cell.key.ref_key,
        latest.cell.body.fields()["status"]
    );

    step("6. where the data lives: every minion holds what its master holds");
    cluster
        .wait_all_caught_up(Duration::from_secs(120))
        .await
        .context("waiting for the minions")?;
    let mut table =
        crate::table::Table::new(&["CLUSTER", "NODE", "ROLE", "SHARDS", "CELLS"]).right(&[4]);
    for (i, c) in topology.clusters.iter().enumerate() {
        let shards = topology.shards_of(i);
        let nodes = std::iter::once((c.master(), "master"))
            .chain(c.minions().into_iter().map(|m| (m, "minion")));
        for (node, role) in nodes {
            let mut count: i64 = 0;
            for &shard in &shards {
                let sql = format!(
                    "SELECT COUNT(*) FROM `{}`.`entity`",
                    topology.database(shard)
                );
                let n: i64 = sqlx::query_scalar(AssertSqlSafe(sql))
                    .fetch_one(&node.pool)
                    .await
                    .with_context(|| format!("counting cells on {}", node.label))?;
                count += n;
            }
            table.row([
                c.name.to_string(),
                node.label.to_string(),
                role.to_string(),
                c.configured.map_or("-".to_string(), |r| r.to_string()),
                count.to_string(),
            ]);
        }
    }
    table.print("");
    let page = store
        .get_cells_for_shard(shard, 0, 3, ReadFrom::Minion)
        .await?;
    println!("\nthe first cells of shard {shard}'s change log, read from a minion:");
    for c in &page.cells {
        println!("  added_id {:<6} {}", c.added_id, c.cell.key);
    }
    println!("  ... the next page starts after added_id {}", page.next);

    triggers::trigger_and_index_steps(&config, &store, row).await?;
    retire_showcase(&config, &store, &cells).await?;
    legacy::legacy_steps(&config, args.legacy_trips).await?;
    mirror::mirror_steps(&config, args.mirror_trips).await?;

    println!("\ndemo done. `mezzanine cluster status` shows the servers; `mezzanine cluster down` stops them.");
    store.close().await;
    topology.close().await;
    Ok(())
}

/// Deletes the trips steps 3 to 8 wrote straight to Schemaless: they are
/// not the legacy database's, and the migration from step 9 on compares
/// the two stores row for row (the full diff's sweep would report each
/// as a row only Schemaless has, and `shadow` would serve them). Cells are
/// immutable, so each is deleted with a tombstone.
async fn retire_showcase(
    config: &config::Config,
    store: &MySqlStore,
    cells: &[Cell],
) -> anyhow::Result<()> {
    let column = schemaless::Column::new(&config.capture.tombstone_column)?;
    let rows: std::collections::BTreeSet<schemaless::RowKey> =
        cells.iter().map(|c| c.key.row_key).collect();
    let tombstones: Vec<Cell> = rows
        .iter()
        .map(|row| schemaless::tombstone::row_tombstone(*row, &column))
        .collect();
    for batch in tombstones.chunks(config.limits.max_batch_cells) {
        for result in store.put_cells(batch.to_vec()).await? {
            result.map_err(Error::from)?;
        }
    }
    println!(
        "\nthe {} trips written above are not the legacy database's: each is deleted with a tombstone in {column} (cells are immutable), so that from here on Schemaless holds only what the migration brings",
        rows.len()
    );
    Ok(())
}
