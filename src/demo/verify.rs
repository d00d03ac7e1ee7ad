//! The verification act: sampled and full comparison, a planted
//! mismatch holding the gate shut, and its repair.

use std::time::{Duration, Instant};

use anyhow::Context;
use schemaless::{CellStore, ReadFrom};
use serde_json::json;

use super::step;

/// Steps 16-17: every read sampled and replayed, the full diff; a stored
/// value tampered with behind the facade's back, found by a sampled read,
/// holding the gate shut, and repaired.
pub(super) async fn verify_steps(
    config: &config::Config,
    store: &tripstore::TripStore,
    pool: &sqlx::PgPool,
    row: schemaless::RowKey,
) -> anyhow::Result<()> {
    use verifier::store::Settings;

    step("16. verify: every read sampled and replayed on Schemaless, then a full diff");
    // A fresh verification for this run of the demo.
    verifier::store::reset(pool).await?;
    store.sampler().set(Settings {
        sample_rate: 1.0,
        max_samples_per_sec: 5000,
    });
    let uuids: Vec<uuid::Uuid> =
        sqlx::query_scalar("/* mezzanine */ SELECT uuid FROM trips ORDER BY random() LIMIT 300")
            .fetch_all(pool)
            .await?;
    for uuid in &uuids {
        store
            .get_cells_for_row(&schemaless::RowKey::from(*uuid), ReadFrom::Master)
            .await?;
    }
    // The replays run in the background; their counts reach PostgreSQL
    // once a second.
    tokio::time::sleep(Duration::from_millis(2500)).await;
    let diff = tripstore::triage::full_diff(store.legacy(), store.schemaless(), config);
    let id = verifier::full::plan(
        pool,
        store.legacy(),
        store.schemaless().topology().shard_count,
        500,
        true,
    )
    .await?;
    let started = Instant::now();
    let run = diff
        .run(
            id,
            config.verify.workers,
            &verifier::full::Progress::default(),
            &tokio_util::sync::CancellationToken::new(),
        )
        .await?;
    println!(
        "full diff: {} parents, {} cells compared, and {} Schemaless row keys swept over {} shards for rows PostgreSQL lacks, in {:.2}s: {} mismatches",
        run.parents,
        run.cells,
        run.swept_rows,
        run.sweeps,
        started.elapsed().as_secs_f64(),
        run.mismatches
    );
    anyhow::ensure!(run.mismatches == 0, "the full diff found mismatches");
    let since = tripstore::gates::verification_window(pool).await?;
    let report = verifier::report::read(pool, Some(store.legacy()), since).await?;
    println!(
        "{} reads sampled, {} parents diffed: {} (row, column) comparisons, {} mismatches, 95% upper bound of the rate {:.5}",
        uuids.len(),
        run.parents,
        report.totals.samples,
        report.totals.mismatches,
        report.upper_bound
    );
    for c in &report.coverage {
        println!(
            "  coverage {:<16} {:>6.2}% of {} parents verified since their last write",
            c.column,
            c.share() * 100.0,
            c.rows
        );
    }

    step("17. tamper with a stored value behind the facade's back: found, reported, repaired");
    let base = schemaless::Column::new("BASE")?;
    let cell = store
        .schemaless()
        .get_cell_latest(&row, &base, ReadFrom::Master)
        .await?
        .context("the trip is in Schemaless")?
        .cell;
    let was = cell.body.fields()["status"].clone();
    let mut fields = cell.body.fields().clone();
    fields.insert("status".into(), json!("tampered"));
    let encoded = schemaless::codec::encode(
        &schemaless::Body::from(fields),
        schemaless::codec::inflated_cap(config.limits.max_body_bytes),
    )?;
    let topology = store.schemaless().topology();
    let shard = schemaless::routing::shard_of(&row, topology.shard_count);
    let (mut body_hex, mut key_hex) = (String::new(), String::new());
    schemaless::mysql::sql::push_hex(&mut body_hex, &encoded);
    schemaless::mysql::sql::push_hex(&mut key_hex, row.as_bytes());
    topology
        .cluster(shard)?
        .master()
        .execute(format!(
            "UPDATE `{}`.`entity` SET body = {body_hex} WHERE row_key = {key_hex} AND column_name = 'BASE' AND ref_key = {}",
            topology.database(shard),
            cell.key.ref_key.get()
        ))
        .await?;
    println!(
        "UPDATE on the MariaDB master of shard {shard}: trip {row} BASE v{} status {was} -> \"tampered\"",
        cell.key.ref_key
    );
    let deadline = Instant::now() + Duration::from_secs(20);
    let found = loop {
        // A read through the facade (served by PostgreSQL), sampled.
        store.get_cell_latest(&row, &base, ReadFrom::Master).await?;
        tokio::time::sleep(Duration::from_millis(400)).await;
        let open = verifier::store::mismatches(pool, true, Some(&row), 10).await?;
        if let Some(m) = open.into_iter().next() {
            break m;
        }
        anyhow::ensure!(
            Instant::now() < deadline,
            "the sampled replay never reported the tampered trip"
        );
    };
    println!(
        "a sampled read found it, after triage: {} {} ({} read): legacy status {} | schemaless status {}",
        found.row_key,
        found.column,
        found.read_kind,
        found.legacy["body"]["status"],
        found.schemaless["body"]["status"]
    );
    let refused = store
        .set_mode(&tripstore::ModeRequest {
            target: tripstore::Mode::Shadow,
            force: false,
            by: "mezzanine demo".into(),
            reason: None,
        })
        .await;
    match refused {
        Err(e) => println!("the gate holds: {e}"),
        Ok(_) => anyhow::bail!("mode shadow was allowed with an open mismatch"),
    }
    let mode = store.mode();
    let repair = verifier::repair::Repair {
        legacy: store.legacy(),
        schemaless: store.schemaless(),
        pool,
        rules: &verifier::Rules::from_config(&config.verify),
        tombstones: Some(store.schemaless_reads().column()),
        truth: mode.source_of_truth(),
    };
    for (column, outcome) in repair.row(&row).await? {
        let what = match outcome {
            verifier::repair::Repaired::AlreadyEqual => continue,
            verifier::repair::Repaired::Rewritten => "rewritten",
            verifier::repair::Repaired::Deleted => "deleted",
        };
        println!(
            "verify repair {row}: {column} {what} in {} from {} (the source of truth in mode {mode}), verified equal",
            mode.source_of_truth().other().as_str(),
            mode.source_of_truth().as_str()
        );
    }
    let report = verifier::report::read(pool, None, since).await?;
    println!(
        "open mismatches now {}; `mezzanine verify report` has the figures, `mezzanine serve` the dashboard",
        report.open_mismatches
    );
    anyhow::ensure!(
        report.open_mismatches == 0,
        "the repair left mismatches open"
    );
    store.sampler().set(Settings {
        sample_rate: config.verify.sample_rate,
        max_samples_per_sec: config.verify.max_samples_per_sec,
    });
    Ok(())
}
