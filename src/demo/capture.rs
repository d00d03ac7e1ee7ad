//! The capture act: plain SQL writes recorded and delivered by the relay.

use anyhow::Context;
use schemaless::{Cell, CellStore, ReadFrom};

use super::step;

/// Step 14: writes made with psql, not the facade, recorded by PostgreSQL
/// and delivered by the relay; a deleted row becomes a tombstone.
pub(super) async fn capture_steps(
    config: &config::Config,
    store: &tripstore::TripStore,
    pool: &sqlx::PgPool,
    sample: &Cell,
) -> anyhow::Result<()> {
    step("14. writes that bypass the facade: psql changes trips, PostgreSQL records it, the relay delivers it");
    let row = sample.key.row_key;
    let (id,): (i64,) = sqlx::query_as("/* mezzanine */ SELECT id FROM trips WHERE uuid = $1")
        .bind(row.uuid())
        .fetch_one(pool)
        .await?;
    let url = &legacy::connection::legacy_config(config)?.url;
    let psql = |sql: &str| -> anyhow::Result<String> {
        let binaries = devcluster::Binaries::find()?;
        let out = std::process::Command::new(&binaries.psql)
            .args(["-X", "-v", "ON_ERROR_STOP=1", "-d", url, "-c", sql])
            .output()
            .context("running psql")?;
        anyhow::ensure!(
            out.status.success(),
            "psql failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        Ok(String::from_utf8_lossy(&out.stdout)
            .trim()
            .replace('\n', " "))
    };
    let update =
        format!("UPDATE trips SET status = 'disputed', version = version + 1 WHERE id = {id}");
    let note = format!(
        "INSERT INTO trip_notes (trip_id, seq, author, body, created_at)
         SELECT {id}, coalesce(max(seq), 0) + 1, 'support', 'rider called: disputed by phone', now()
         FROM trip_notes WHERE trip_id = {id}"
    );
    println!("psql> {update};\n      {}", psql(&update)?);
    println!(
        "psql> INSERT INTO trip_notes (trip {id}, a note from support);\n      {}",
        psql(&note)?
    );
    let queue = mirror::capture::status::queue(pool).await?;
    println!(
        "capture queue: {} changes, recorded in the writers' own transactions (`mezzanine capture status`)",
        queue.depth
    );
    let moved = store.relay().drain().await?;
    let c = moved.captured;
    println!(
        "the relay read the changed rows as they are now: {} cells delivered ({} already there), {} parked",
        c.cells, c.already_present, c.parked
    );
    let base = schemaless::Column::new("BASE")?;
    let notes = schemaless::Column::new("NOTES")?;
    let latest = store
        .schemaless()
        .get_cell_latest(&row, &base, ReadFrom::Master)
        .await?
        .context("the trip is in Schemaless")?;
    println!(
        "Schemaless BASE of trip {row}: ref {} status {}",
        latest.cell.key.ref_key,
        latest.cell.body.fields()["status"]
    );
    let added = store
        .schemaless()
        .get_cell_latest(&row, &notes, ReadFrom::Master)
        .await?
        .context("the note is in Schemaless")?;
    println!(
        "Schemaless NOTES of trip {row}: ref {} {}",
        added.cell.key.ref_key, added.cell.body
    );

    let delete = format!(
        "DELETE FROM trip_notes WHERE trip_id = {id} AND seq = {}",
        added.cell.key.ref_key
    );
    println!("psql> {delete};\n      {}", psql(&delete)?);
    let moved = store.relay().drain().await?;
    println!(
        "cells are immutable: the delete became {} tombstone cell in column {}",
        moved.captured.tombstones, config.capture.tombstone_column
    );
    let raw = store
        .schemaless()
        .get_cell_latest(&row, &notes, ReadFrom::Master)
        .await?;
    let read = store
        .schemaless_reads()
        .get_cell_latest(&row, &notes, ReadFrom::Master)
        .await?;
    let legacy = store
        .legacy()
        .get_cell_latest(&row, &notes, ReadFrom::Master)
        .await?;
    let show = |c: &Option<schemaless::StoredCell>| {
        c.as_ref().map_or("none".to_string(), |c| {
            format!("ref {}", c.cell.key.ref_key)
        })
    };
    println!(
        "latest NOTES of trip {row}: stored {}, read through the tombstones {}, PostgreSQL {}",
        show(&raw),
        show(&read),
        show(&legacy)
    );
    anyhow::ensure!(
        read.as_ref().map(|c| &c.cell) == legacy.as_ref().map(|c| &c.cell),
        "the stores disagree about the notes of trip {row}"
    );
    Ok(())
}
