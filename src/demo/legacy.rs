//! Acts 9-11: the legacy PostgreSQL model behind the facade.

use std::time::{Duration, Instant};

use anyhow::Context;
use schemaless::{Body, Cell, CellStore, ReadFrom, RefKey};
use serde_json::json;

use super::step;

/// Steps 9-11: the legacy PostgreSQL model behind the facade.
pub(super) async fn legacy_steps(config: &config::Config, trips: u64) -> anyhow::Result<()> {
    let legacy_config = legacy::connection::legacy_config(config)?;
    let layout = legacy::connection::layout_config(config)?;

    step("9. the legacy database: trips and three child tables in PostgreSQL");
    legacy::trips::init(legacy_config, &layout.schema, None).await?;
    let pool = legacy::connection::pool(legacy_config)?;
    let started = Instant::now();
    let counts =
        legacy::trips::seed(&pool, &layout.schema, &layout.uuid, trips, 42, |_| {}).await?;
    println!(
        "seeded {} trips, {} notes, {} billing attempts, {} fare adjustments in {:.2}s (COPY)",
        counts.trips,
        counts.notes,
        counts.billing_attempts,
        counts.fare_adjustments,
        started.elapsed().as_secs_f64()
    );
    let options = legacy::add_uuid::Options {
        batch: 1000,
        pause: Duration::ZERO,
    };
    let report = legacy::add_uuid::run(&pool, layout, &options, |_| {}).await?;
    println!(
        "legacy add-uuid: column {}, {} rows filled online, unique index {}",
        if report.added_column {
            "added"
        } else {
            "already there"
        },
        report.filled,
        if report.built_index {
            "built concurrently"
        } else {
            "already there"
        }
    );

    step("10. the tripstore facade in legacy mode: the cell API over PostgreSQL");
    let store = tripstore::TripStore::connect(config).await?;
    if store.mode() != tripstore::Mode::Legacy {
        let change = store
            .set_mode(&tripstore::ModeRequest {
                target: tripstore::Mode::Legacy,
                force: true,
                by: "mezzanine demo".into(),
                reason: Some("the demo reads through the legacy model".into()),
            })
            .await?;
        println!("mode was {}; the demo moved it back to legacy", change.from);
    }
    println!("mode: {}", store.mode());
    let (uuid, driver): (uuid::Uuid, uuid::Uuid) = sqlx::query_as(
        "/* mezzanine */ SELECT t.uuid, t.driver_uuid FROM trips t JOIN trip_notes n ON n.trip_id = t.id
         JOIN billing_attempts b ON b.trip_id = t.id ORDER BY t.id DESC LIMIT 1",
    )
    .fetch_one(&pool)
    .await
    .context("finding a trip with notes and billing attempts")?;
    let row = schemaless::RowKey::from(uuid);
    println!("get_cells_for_row({row}):");
    for stored in store.get_cells_for_row(&row, ReadFrom::Master).await? {
        println!(
            "  {:<17} ref {:<3} {}",
            stored.cell.key.column.as_str(),
            stored.cell.key.ref_key,
            stored.cell.body
        );
    }

    step("11. writing through the facade: a version-guarded upsert of the trips row");
    let base = schemaless::Column::new("BASE")?;
    let latest = store
        .get_cell_latest(&row, &base, ReadFrom::Master)
        .await?
        .context("the trip has no BASE cell")?;
    let mut fields = latest.cell.body.fields().clone();
    fields.insert("status".into(), json!("disputed"));
    let next = Cell::new(
        row,
        base.clone(),
        RefKey::new(latest.cell.key.ref_key.get() + 1)?,
        Body::from(fields),
    );
    println!(
        "BASE ref {} (status disputed): {:?}",
        next.key.ref_key,
        store.put_cell(next.clone()).await?
    );
    println!("the same cell again: {:?}", store.put_cell(next).await?);
    println!(
        "the old ref {} again: {:?} (a newer version is stored; nothing changes)",
        latest.cell.key.ref_key,
        store.put_cell(latest.cell.clone()).await?
    );
    let (status, version): (String, i64) =
        sqlx::query_as("/* mezzanine */ SELECT status, version FROM trips WHERE uuid = $1")
            .bind(uuid)
            .fetch_one(&pool)
            .await?;
    println!("in PostgreSQL: trips.status = {status:?}, version = {version}");
    let query = schemaless::IndexQuery {
        index: "trips_by_driver".into(),
        shard_value: json!(driver.to_string()),
        filters: vec![],
        order_by: Some("requested_at".into()),
        descending: true,
        limit: 3,
    };
    let entries = store.query_index(&query, ReadFrom::Master).await?;
    println!("query_index(trips_by_driver, {driver}), newest 3, answered by SQL:");
    for entry in entries {
        println!("  {} {}", entry.row_key, entry.fields);
    }
    store.close().await;
    pool.close().await;
    Ok(())
}
