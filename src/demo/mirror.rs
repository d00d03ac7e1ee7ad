//! Act 12 on: mode mirror, the relay, the backfill and the step to
//! shadow; it runs the capture and verification acts in between.

use std::time::{Duration, Instant};

use anyhow::Context;
use schemaless::{CellStore, ReadFrom};

use super::step;

/// Steps 12-15 and 18: mode mirror, writes reaching both stores through the
/// outbox; plain SQL writes through capture; the backfill of the history;
/// mode shadow.
pub(super) async fn mirror_steps(config: &config::Config, trips: u64) -> anyhow::Result<()> {
    use std::sync::Arc;

    step("12. mode mirror: every facade write also lands in the outbox, in the same transaction");
    let mut quiet = config.clone();
    // The relay is run by hand below, to show the outbox filling first.
    quiet.mirror.relay_in_app = false;
    let store = Arc::new(tripstore::TripStore::connect(&quiet).await?);
    let installed = mirror::capture::install::install(
        store.legacy().pool(),
        store.legacy().layout(),
        &config.capture,
    )
    .await?;
    println!(
        "capture install: {} triggers on {}, so that plain SQL writes reach Schemaless too (step 14)",
        installed.triggers,
        installed.tables.join(", ")
    );
    let change = store
        .set_mode(&tripstore::ModeRequest {
            target: tripstore::Mode::Mirror,
            force: false,
            by: "mezzanine demo".into(),
            reason: Some("the demo mirrors writes".into()),
        })
        .await?;
    println!(
        "mode {} -> {} (gates: the Schemaless schema on every shard, capture on every layout table)",
        change.from, change.to
    );
    let pool = store.legacy().pool().clone();
    let before = mirror::status::outbox(&pool).await?.0;
    let started = Instant::now();
    let writers: Vec<_> = (0..8u64)
        .map(|w| {
            let store = store.clone();
            let mine = trips / 8 + u64::from(w < trips % 8);
            tokio::spawn(async move {
                let mut source =
                    legacy::trips::TripCells::new(schemaless::cell::now_micros() as u64 ^ w);
                let mut last = None;
                for _ in 0..mine {
                    let trip = source.new_trip();
                    let done = source.complete(&trip[0]);
                    store.put_cells(trip).await?;
                    store.put_cell(done.clone()).await?;
                    last = Some(done);
                }
                Ok::<_, schemaless::Error>(last)
            })
        })
        .collect();
    let mut sample = None;
    for writer in writers {
        sample = writer.await??.or(sample);
    }
    let (depth, oldest, _) = mirror::status::outbox(&pool).await?;
    println!(
        "{trips} trips written through the facade in {:.2}s: PostgreSQL has them, the outbox holds {} new entries (the oldest {:.1}s old)",
        started.elapsed().as_secs_f64(),
        depth.saturating_sub(before),
        oldest.unwrap_or(0.0)
    );
    let sample = sample.context("no trip was written")?;
    let in_schemaless = store
        .schemaless()
        .get_cell_latest(&sample.key.row_key, &sample.key.column, ReadFrom::Master)
        .await?;
    println!(
        "trip {} in Schemaless before the relay runs: {}",
        sample.key.row_key,
        if in_schemaless.is_some() {
            "present"
        } else {
            "not yet"
        }
    );

    step("13. the relay drains the outbox into Schemaless");
    let relay = store.relay();
    let started = Instant::now();
    let mut total = 0;
    loop {
        let moved = relay.relay_batch().await?;
        if moved.idle() {
            break;
        }
        total += moved.delivered + moved.captured.cells;
        let left = mirror::status::outbox(&pool).await?.0;
        if left == 0 || total % 2000 < moved.delivered {
            println!("  relayed {total:>6} cells, {left:>6} left in the outbox");
        }
    }
    println!(
        "outbox drained: {total} cells in {:.2}s ({:.0} cells/s)",
        started.elapsed().as_secs_f64(),
        total as f64 / started.elapsed().as_secs_f64().max(1e-9)
    );
    println!("trip {} now, through each store:", sample.key.row_key);
    let from_legacy = store
        .legacy()
        .get_cells_for_row(&sample.key.row_key, ReadFrom::Master)
        .await?;
    let from_schemaless = store
        .schemaless()
        .get_cells_for_row(&sample.key.row_key, ReadFrom::Master)
        .await?;
    for (name, cells) in [
        ("PostgreSQL", &from_legacy),
        ("Schemaless", &from_schemaless),
    ] {
        for stored in cells {
            println!(
                "  {name:<10} {:<6} ref {}  {}",
                stored.cell.key.column.as_str(),
                stored.cell.key.ref_key,
                stored.cell.body
            );
        }
    }
    let same = from_legacy
        .iter()
        .map(|s| &s.cell)
        .eq(from_schemaless.iter().map(|s| &s.cell));
    anyhow::ensure!(
        same,
        "the two stores disagree about trip {}",
        sample.key.row_key
    );
    println!(
        "the same cells on both sides. `mezzanine mirror status` shows the outbox and the relays."
    );

    super::capture::capture_steps(config, &store, &pool, &sample).await?;

    step("15. the backfill: the history the mirror never saw, copied in planned chunks");
    // A plan made before every facade could have seen mode mirror might
    // miss rows created in between; the shadow gate checks it.
    let poll = legacy::connection::legacy_config(config)?.mode_poll_ms;
    tokio::time::sleep(Duration::from_millis(poll)).await;
    let legacy_store = store.legacy().clone();
    let plan = backfill::plan::create(&legacy_store, 250, true, "mezzanine demo").await?;
    println!(
        "planned ids {}..{} of {} in {} chunks of {}",
        plan.low_id, plan.high_id, plan.table, plan.chunks, plan.chunk_size
    );
    let runner = Arc::new(backfill::Backfill::new(
        legacy_store.clone(),
        store.schemaless().clone(),
        config,
        backfill::Options::from_config(&config.backfill),
    ));
    let task = {
        let runner = runner.clone();
        tokio::spawn(async move { runner.run(tokio_util::sync::CancellationToken::new()).await })
    };
    let progress = runner.progress();
    let plain = !std::io::IsTerminal::is_terminal(&std::io::stderr());
    let finished =
        crate::progress::show(&pool, backfill::plan::MAIN, &progress, plain, task).await?;
    anyhow::ensure!(finished, "the backfill did not finish");
    let status = backfill::status::read(&pool).await?;
    println!(
        "backfill complete: {} chunks, {} parents, {} cells ({} new to Schemaless, the rest mirrored already)",
        status.done, status.parents_done, status.cells_done, status.cells_written
    );
    anyhow::ensure!(status.failed == 0, "{} chunks failed", status.failed);
    let (seeded,): (uuid::Uuid,) = sqlx::query_as(
        "/* mezzanine */ SELECT t.uuid FROM trips t JOIN trip_notes n ON n.trip_id = t.id ORDER BY t.id LIMIT 1",
    )
    .fetch_one(&pool)
    .await
    .context("finding a seeded trip with notes")?;
    let row = schemaless::RowKey::from(seeded);
    let from_legacy = store
        .legacy()
        .get_cells_for_row(&row, ReadFrom::Master)
        .await?;
    let from_schemaless = store
        .schemaless()
        .get_cells_for_row(&row, ReadFrom::Master)
        .await?;
    // Schemaless may also hold columns the layout does not map (STATUS,
    // written by the billing trigger of an earlier demo run).
    let (mapped, other): (Vec<_>, Vec<_>) = from_schemaless.iter().partition(|s| {
        legacy_store
            .layout()
            .column(s.cell.key.column.as_str())
            .is_some()
    });
    let same = from_legacy
        .iter()
        .map(|s| &s.cell)
        .eq(mapped.iter().map(|s| &s.cell));
    anyhow::ensure!(same, "the two stores disagree about seeded trip {row}");
    println!(
        "seeded trip {row}: the same {} cells in PostgreSQL and in Schemaless{}",
        from_legacy.len(),
        if other.is_empty() {
            String::new()
        } else {
            format!(
                " (which also holds {} cells of columns outside the layout)",
                other.len()
            )
        }
    );

    super::verify::verify_steps(config, &store, &pool, row).await?;

    step("18. mode shadow: reads come from Schemaless, writes still go through PostgreSQL");
    let change = store
        .set_mode(&tripstore::ModeRequest {
            target: tripstore::Mode::Shadow,
            force: false,
            by: "mezzanine demo".into(),
            reason: Some("backfill complete, outbox drained".into()),
        })
        .await?;
    println!(
        "mode {} -> {} (gates: backfill complete, outbox and capture queue drained, nothing parked, the verifier's figures)",
        change.from, change.to
    );
    let base = schemaless::Column::new("BASE")?;
    let read = store
        .get_cell_latest(&row, &base, ReadFrom::Master)
        .await?
        .context("the seeded trip is not in Schemaless")?;
    println!(
        "get_cell_latest({row}, BASE), answered by Schemaless: ref {}, status {}",
        read.cell.key.ref_key,
        read.cell.body.fields()["status"]
    );
    store.close().await;
    Ok(())
}
