//! Acts 7-8: a trigger (billing) on every completed trip, and a
//! secondary index by driver.

use std::time::{Duration, Instant};

use anyhow::Context;
use schemaless::{CellStore, MySqlStore, ReadFrom};

use super::step;

/// Steps 7-8: a trigger billing the trips just written, and a secondary
/// index by driver.
pub(super) async fn trigger_and_index_steps(
    config: &config::Config,
    store: &MySqlStore,
    sample: schemaless::RowKey,
) -> anyhow::Result<()> {
    use schemaless::mysql::{index, trigger};
    use tokio_util::sync::CancellationToken;

    step("7. a trigger: billing charges every completed trip, once per version, into STATUS");
    let billing = std::sync::Arc::new(super::flow::Billing::new(store.clone()));
    let mut options = config.triggers.clone();
    options.read_from = config::TriggerRead::Master;
    options.poll_ms = 20;
    let runner = trigger::Trigger::new(
        "billing",
        schemaless::Column::new("BASE")?,
        store.clone(),
        billing.clone(),
        options,
    )?;
    let cancel = CancellationToken::new();
    let task = {
        let cancel = cancel.clone();
        tokio::spawn(async move { runner.run(cancel).await })
    };
    let started = Instant::now();
    let lag = loop {
        tokio::time::sleep(Duration::from_millis(200)).await;
        let lag = trigger::lag(store, "billing").await?;
        if lag == 0 || started.elapsed() > Duration::from_secs(120) {
            break lag;
        }
    };
    cancel.cancel();
    task.await??;
    anyhow::ensure!(
        lag == 0,
        "the billing trigger is still {lag} cells behind after 2 minutes"
    );
    println!(
        "caught up in {:.2}s: {} approved, {} declined, {} already billed (redelivered or billed by an earlier run)",
        started.elapsed().as_secs_f64(),
        billing.charged.load(std::sync::atomic::Ordering::Relaxed),
        billing.declined.load(std::sync::atomic::Ordering::Relaxed),
        billing.replays.load(std::sync::atomic::Ordering::Relaxed)
    );
    for stored in store.get_cells_for_row(&sample, ReadFrom::Master).await? {
        println!(
            "  {:<7} ref {}  {}",
            stored.cell.key.column.as_str(),
            stored.cell.key.ref_key,
            stored.cell.body
        );
    }

    step("8. a secondary index: trips by driver, on the shard the driver's UUID routes to");
    let name = "trips_by_driver";
    let versions = index::versions(store, name).await?;
    let version = match versions
        .iter()
        .rev()
        .find(|(_, s)| *s == index::VersionState::Active)
    {
        Some((v, _)) => *v,
        None => {
            let v = index::create_version(store, name).await?;
            println!("created {name} v{v} (building)");
            v
        }
    };
    let maintainer = index::Maintainer::trigger(store, name, version, &config.triggers)?;
    let cancel = CancellationToken::new();
    let task = {
        let cancel = cancel.clone();
        tokio::spawn(async move { maintainer.run(cancel).await })
    };
    let started = Instant::now();
    loop {
        tokio::time::sleep(Duration::from_millis(200)).await;
        let lag = trigger::lag(store, &index::trigger_name(name, version)).await?;
        if lag == 0 {
            break;
        }
        anyhow::ensure!(
            started.elapsed() < Duration::from_secs(120),
            "{name} v{version} still {lag} behind"
        );
    }
    index::switch(store, name, version).await?;
    println!(
        "{name} v{version} backfilled from the change log and active in {:.2}s",
        started.elapsed().as_secs_f64()
    );
    let base = store
        .get_cell_latest(&sample, &schemaless::Column::new("BASE")?, ReadFrom::Master)
        .await?
        .context("the sample trip has no BASE")?;
    let driver = base.cell.body.fields()["driver_uuid"].clone();
    let query = schemaless::IndexQuery {
        index: name.into(),
        shard_value: driver.clone(),
        filters: vec![],
        order_by: None,
        descending: false,
        limit: 10,
    };
    for entry in store.query_index(&query, ReadFrom::Master).await? {
        println!(
            "query_index({name}, {driver}) -> {} {}",
            entry.row_key, entry.fields
        );
    }
    cancel.cancel();
    task.await??;
    Ok(())
}
