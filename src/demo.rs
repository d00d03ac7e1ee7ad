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
#[path = "../examples/billing/flow.rs"]
mod flow;

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
    println!(
        "{:<8} {:<34} {:<8} {:>9} {:>9}",
        "CLUSTER", "NODE", "ROLE", "SHARDS", "CELLS"
    );
    for c in &topology.clusters {
        let nodes = std::iter::once((c.master(), "master"))
            .chain(c.minions().into_iter().map(|m| (m, "minion")));
        for (node, role) in nodes {
            let mut count: i64 = 0;
            for shard in c.shards.iter() {
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
            println!(
                "{:<8} {:<34} {:<8} {:>9} {:>9}",
                c.name,
                node.label,
                role,
                c.shards.to_string(),
                count
            );
        }
    }
    let page = store
        .get_cells_for_shard(shard, 0, 3, ReadFrom::Minion)
        .await?;
    println!("\nthe first cells of shard {shard}'s change log, read from a minion:");
    for c in &page.cells {
        println!("  added_id {:<6} {}", c.added_id, c.cell.key);
    }
    println!("  ... the next page starts after added_id {}", page.next);

    trigger_and_index_steps(&config, &store, row).await?;
    legacy_steps(&config, args.legacy_trips).await?;
    mirror_steps(&config, args.mirror_trips).await?;

    println!("\ndemo done. `mezzanine cluster status` shows the servers; `mezzanine cluster down` stops them.");
    store.close().await;
    topology.close().await;
    Ok(())
}

/// Steps 9-11: the legacy PostgreSQL model behind the facade.
async fn legacy_steps(config: &config::Config, trips: u64) -> anyhow::Result<()> {
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

/// Steps 16-17: every read sampled and replayed, the full diff; a stored
/// value tampered with behind the facade's back, found by a sampled read,
/// holding the gate shut, and repaired.
async fn verify_steps(
    config: &config::Config,
    store: &tripstore::TripStore,
    pool: &sqlx::PgPool,
    row: schemaless::RowKey,
) -> anyhow::Result<()> {
    use verifier::store::Settings;

    step("16. verify: every read sampled and replayed on Schemaless, then a full diff");
    // A fresh verification for this run of the demo.
    sqlx::raw_sql(
        "TRUNCATE mezzanine.verify_mismatches, mezzanine.verify_stats, mezzanine.verify_coverage,
                  mezzanine.verify_runs CASCADE;
         DELETE FROM mezzanine.verify_settings",
    )
    .execute(pool)
    .await?;
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
    let id = verifier::full::plan(pool, store.legacy(), 500, true).await?;
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
        "full diff: {} parents, {} cells compared in {:.2}s, {} mismatches",
        run.parents,
        run.cells,
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
        if outcome == verifier::repair::Repaired::Rewritten {
            println!(
                "verify repair {row}: {column} rewritten in {} from {} (the source of truth in mode {mode}), verified equal",
                mode.source_of_truth().other().as_str(),
                mode.source_of_truth().as_str()
            );
        }
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

/// Steps 12-15 and 18: mode mirror, writes reaching both stores through the
/// outbox; plain SQL writes through capture; the backfill of the history;
/// mode shadow.
async fn mirror_steps(config: &config::Config, trips: u64) -> anyhow::Result<()> {
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

    capture_steps(config, &store, &pool, &sample).await?;

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
        crate::backfill::show_progress(&pool, backfill::plan::MAIN, &progress, plain, task).await?;
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

    verify_steps(config, &store, &pool, row).await?;

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

/// Steps 7-8: a trigger billing the trips just written, and a secondary
/// index by driver.
async fn trigger_and_index_steps(
    config: &config::Config,
    store: &MySqlStore,
    sample: schemaless::RowKey,
) -> anyhow::Result<()> {
    use schemaless::mysql::{index, trigger};
    use tokio_util::sync::CancellationToken;

    step("7. a trigger: billing charges every completed trip, once per version, into STATUS");
    let billing = std::sync::Arc::new(flow::Billing::new(store.clone()));
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

/// Step 14: writes made with psql, not the facade, recorded by PostgreSQL
/// and delivered by the relay; a deleted row becomes a tombstone.
async fn capture_steps(
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
