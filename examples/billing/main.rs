//! The billing example: a trigger on BASE charges completed trips and
//! writes the outcome to STATUS.
//!
//! Needs the dev cluster (`cargo run -- cluster up`, or the demo, starts
//! it). Run with `cargo run --example billing [-- TRIPS]`.

mod flow;

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context;
use schemaless::mysql::trigger::{self, Trigger};
use schemaless::mysql::{schema, Topology};
use schemaless::{Body, Cell, CellStore, Column, MySqlStore, ReadFrom, RefKey, RowKey};
use serde_json::json;
use tokio_util::sync::CancellationToken;

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_env("MEZZANINE_LOG")
                .unwrap_or_else(|_| "warn".into()),
        )
        .with_writer(std::io::stderr)
        .init();
    let trips: u64 = std::env::args()
        .nth(1)
        .map(|n| n.parse())
        .transpose()
        .context("the argument is the number of trips")?
        .unwrap_or(500);
    let path =
        std::env::var("MEZZANINE_CONFIG").unwrap_or_else(|_| "config/examples/local.toml".into());
    let config = config::Config::load(&path)?;
    let topology = Topology::from_config(&config)?;
    schema::apply(&topology)
        .await
        .context("applying the schema (is the dev cluster up? `cargo run -- cluster up`)")?;
    topology.close().await;
    let store = MySqlStore::connect(&config)?;

    let billing = Arc::new(flow::Billing::new(store.clone()));
    let mut options = config.triggers.clone();
    options.read_from = config::TriggerRead::Master;
    options.poll_ms = 20;
    let trigger = Trigger::new(
        "billing",
        Column::new("BASE")?,
        store.clone(),
        billing.clone(),
        options,
    )?;
    let cancel = CancellationToken::new();
    let runner = {
        let cancel = cancel.clone();
        tokio::spawn(async move { trigger.run(cancel).await })
    };

    // Trips requested, then completed with a fare.
    let base = Column::new("BASE")?;
    let mut rows = Vec::new();
    let mut cells = Vec::new();
    for n in 0..trips {
        let row = RowKey::random();
        rows.push(row);
        let fare = format!("{}.{:02}", 5 + n % 60, (n * 7) % 100);
        for (version, status) in [(1, "requested"), (2, "completed")] {
            cells.push(Cell::new(
                row,
                base.clone(),
                RefKey::new(version)?,
                Body::from_value(json!({"status": status, "fare": fare, "currency": "EUR"}))?,
            ));
        }
    }
    let started = Instant::now();
    for batch in cells.chunks(config.limits.max_batch_cells) {
        store.put_cells(batch.to_vec()).await?;
    }
    println!("wrote {} BASE cells of {trips} trips", cells.len());

    // Done when every trip has its STATUS (the trigger may also bill
    // trips written earlier, by the demo or a previous run).
    let status = Column::new("STATUS")?;
    let deadline = Instant::now() + Duration::from_secs(120);
    let mut waiting = rows.clone();
    while !waiting.is_empty() {
        anyhow::ensure!(
            Instant::now() < deadline,
            "{} of {trips} trips still unbilled after 2 minutes",
            waiting.len()
        );
        let mut still = Vec::new();
        for row in waiting {
            if store
                .get_cell_latest(&row, &status, ReadFrom::Master)
                .await?
                .is_none()
            {
                still.push(row);
            }
        }
        waiting = still;
        if !waiting.is_empty() {
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
    println!(
        "billed {trips} trips in {:.2}s ({} approved and {} declined by this run, {} replays)",
        started.elapsed().as_secs_f64(),
        billing.charged.load(Ordering::Relaxed),
        billing.declined.load(Ordering::Relaxed),
        billing.replays.load(Ordering::Relaxed)
    );
    let first = store
        .get_cell_latest(&rows[0], &status, ReadFrom::Master)
        .await?
        .context("the first trip has no STATUS")?;
    println!("STATUS of trip {}: {}", rows[0], first.cell.body);

    cancel.cancel();
    runner.await??;
    let shards = trigger::status(&store, "billing").await?;
    println!(
        "trigger billing: {} shards, lag {} cells, {} parked",
        shards.len(),
        shards.iter().map(|s| s.lag).sum::<u64>(),
        shards.iter().map(|s| s.parked).sum::<u64>()
    );
    store.close().await;
    Ok(())
}
