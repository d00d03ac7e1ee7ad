//! `mezzanine legacy init|seed|add-uuid`: the legacy PostgreSQL side.

use std::path::Path;
use std::time::{Duration, Instant};

use clap::{Args, Subcommand};

#[derive(Subcommand)]
pub enum LegacyCommand {
    /// Create the legacy database (if missing) and the sample trips tables:
    /// trips, trip_notes, billing_attempts, fare_adjustments.
    Init(InitArgs),
    /// Fill the sample tables with reproducible, realistic trips (bulk
    /// COPY), after the largest existing id.
    Seed(SeedArgs),
    /// Add the layout's UUID column to the parent table and fill it online:
    /// small batches, no long locks, resumable after a crash; then build
    /// its unique index concurrently and make it NOT NULL.
    AddUuid(AddUuidArgs),
}

#[derive(Args)]
pub struct InitArgs {
    /// Create trips with its UUID column already there (otherwise
    /// `legacy add-uuid` adds it, as to a real legacy table).
    #[arg(long)]
    with_uuid: bool,
}

#[derive(Args)]
pub struct SeedArgs {
    /// How many trips to add.
    #[arg(long, default_value_t = 10_000)]
    trips: u64,
    /// The random seed: the same seed gives the same trips.
    #[arg(long, default_value_t = 1)]
    seed: u64,
}

#[derive(Args)]
pub struct AddUuidArgs {
    /// Parent ids per fill transaction.
    #[arg(long, default_value_t = 5000)]
    batch: i64,
    /// Milliseconds to sleep between batches, leaving room for the app.
    #[arg(long, default_value_t = 0)]
    pause_ms: u64,
}

pub async fn run(command: LegacyCommand, config_path: &Path) -> anyhow::Result<()> {
    let config = crate::load_config(config_path)?;
    let legacy =
        legacy::connection::legacy_config(&config).map_err(|e| crate::UsageError(e.to_string()))?;
    let layout =
        legacy::connection::layout_config(&config).map_err(|e| crate::UsageError(e.to_string()))?;
    let label = legacy::connection::label(&legacy.url);
    match command {
        LegacyCommand::Init(args) => {
            let uuid = args.with_uuid.then_some(layout.uuid.as_str());
            legacy::trips::init(legacy, &layout.schema, uuid).await?;
            println!(
                "{label}: trips, trip_notes, billing_attempts and fare_adjustments are ready in schema {}{}",
                layout.schema,
                if args.with_uuid {
                    format!(" (trips has its {} column)", layout.uuid)
                } else {
                    String::new()
                }
            );
        }
        LegacyCommand::Seed(args) => {
            let pool = legacy::connection::pool(legacy)?;
            let started = Instant::now();
            let mut bar = crate::progress::Bar::new(false);
            let counts = legacy::trips::seed(
                &pool,
                &layout.schema,
                &layout.uuid,
                args.trips,
                args.seed,
                |c| {
                    let rate = c.trips as f64 / started.elapsed().as_secs_f64();
                    let left = args.trips.saturating_sub(c.trips) as f64 / rate.max(1.0);
                    bar.show(
                        c.trips,
                        args.trips,
                        format!("trips, {rate:.0} trips/s, ETA {}", crate::clock::eta(left)),
                    );
                },
            )
            .await?;
            bar.finish();
            let elapsed = started.elapsed().as_secs_f64();
            println!(
                "seeded {} trips, {} notes, {} billing attempts, {} fare adjustments ({} rows) in {elapsed:.1}s: {:.0} trips/s, {:.0} rows/s",
                counts.trips,
                counts.notes,
                counts.billing_attempts,
                counts.fare_adjustments,
                counts.rows(),
                counts.trips as f64 / elapsed,
                counts.rows() as f64 / elapsed
            );
            pool.close().await;
        }
        LegacyCommand::AddUuid(args) => {
            if args.batch < 1 {
                return Err(crate::UsageError("--batch must be positive".into()).into());
            }
            let pool = legacy::connection::pool(legacy)?;
            let started = Instant::now();
            let mut bar = crate::progress::Bar::new(false);
            let options = legacy::add_uuid::Options {
                batch: args.batch,
                pause: Duration::from_millis(args.pause_ms),
            };
            let report = legacy::add_uuid::run(&pool, layout, &options, |p| {
                bar.show(
                    u64::try_from(p.next_id).unwrap_or(0),
                    u64::try_from(p.last_id).unwrap_or(0),
                    format!("ids, {} rows filled", p.filled),
                );
            })
            .await?;
            bar.finish();
            println!(
                "{}.{}: column {}, {} rows filled by this run, unique index {}, NOT NULL {} ({:.1}s)",
                layout.table,
                layout.uuid,
                if report.added_column { "added" } else { "present" },
                report.filled,
                if report.built_index { "built" } else { "present" },
                if report.set_not_null { "set" } else { "already set" },
                started.elapsed().as_secs_f64()
            );
            pool.close().await;
        }
    }
    Ok(())
}
