//! `mezzanine verify sample|full|repair|report`: are the stores the same,
//! and what to do when they are not.
//!
//! `full` and `report` have rooms of their own; `sample` and `repair` are
//! here.

use std::path::Path;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Instant;

use clap::{Args, Subcommand};
use schemaless::{MySqlStore, RowKey};
use tokio_util::sync::CancellationToken;
use verifier::full::Progress;
use verifier::repair::{Repair, Repaired};
use verifier::store::Settings;
use verifier::Rules;

mod full;
mod report;

#[derive(Subcommand)]
pub enum VerifyCommand {
    /// Show or change the read sampling of every running facade (within a
    /// second): the share of reads replayed on the other store, and a cap
    /// per facade per second.
    Sample(SampleArgs),
    /// Compare every cell of every parent, chunk by chunk over the legacy
    /// ids, in parallel; resumes an unfinished run. Exits 1 when it
    /// records mismatches.
    Full(FullArgs),
    /// Rewrite the side that is not the source of truth for the current
    /// mode (legacy until `primary`, Schemaless from then on), verify
    /// again and clear the mismatch.
    Repair(RepairArgs),
    /// Samples, matches and mismatches per column, the mismatch rate and
    /// its 95% upper confidence bound, open mismatches, coverage, and
    /// whether the gates would let the next step through.
    Report(ReportArgs),
}

#[derive(Args)]
pub struct SampleArgs {
    /// The share of reads to sample, 0.0-1.0.
    #[arg(long)]
    rate: Option<f64>,
    /// At most this many samples per second per facade.
    #[arg(long)]
    max_per_sec: Option<u64>,
    /// Forget the stored setting: facades started afterwards use
    /// `[verify]` again (running ones keep what they have).
    #[arg(long, conflicts_with_all = ["rate", "max_per_sec"])]
    reset: bool,
}

#[derive(Args)]
pub struct FullArgs {
    /// Chunks compared at once (default: verify.workers).
    #[arg(long)]
    workers: Option<usize>,
    /// Parent ids per chunk of a new run (default: verify.chunk_size).
    #[arg(long)]
    chunk_size: Option<u64>,
    /// Start a new run over the current id range instead of continuing.
    #[arg(long)]
    restart: bool,
    /// Compare only these layout columns (comma-separated), e.g. after a
    /// partial backfill of them.
    #[arg(long, value_delimiter = ',')]
    columns: Option<Vec<String>>,
    /// Compare only parents with ids in A..B (B excluded) or A..=B.
    #[arg(long, value_parser = crate::backfill::id_range)]
    ids: Option<(i64, i64)>,
    /// Also have PostgreSQL read every matching value Schemaless holds,
    /// cast to its column's type, and compare it with the column
    /// (verify.strict): finds what a bug in the conversion hides.
    #[arg(long)]
    strict: bool,
    /// Progress as plain lines every 5 s even on a terminal.
    #[arg(long)]
    plain: bool,
    /// The run's figures as one JSON object on the last line.
    #[arg(long)]
    json: bool,
}

#[derive(Args)]
pub struct RepairArgs {
    /// The row to repair (every column of the layout).
    #[arg(required_unless_present = "all", conflicts_with = "all")]
    row_key: Option<String>,
    /// Every open mismatch.
    #[arg(long)]
    all: bool,
}

#[derive(Args)]
pub struct ReportArgs {
    /// One JSON object instead of text.
    #[arg(long)]
    json: bool,
    /// Count every sample ever taken, not only those the gates count
    /// (since the current mode began and the backfill finished).
    #[arg(long)]
    all_time: bool,
    /// Mismatches listed (0-10000).
    #[arg(long, default_value_t = 10, value_parser = clap::value_parser!(i64).range(0..=10_000))]
    limit: i64,
}

pub async fn run(command: VerifyCommand, config_path: &Path) -> anyhow::Result<()> {
    let config = crate::load_config(config_path)?;
    let legacy_config =
        legacy::connection::legacy_config(&config).map_err(|e| crate::UsageError(e.to_string()))?;
    let pool = legacy::connection::pool(legacy_config)?;
    tripstore::mode::ensure_control(&pool).await?;
    backfill::plan::ensure_tables(&pool).await?;
    verifier::store::ensure(&pool).await?;
    match command {
        VerifyCommand::Sample(args) => sample(&config, &pool, args).await,
        VerifyCommand::Full(args) => full::full(&config, &pool, args).await,
        VerifyCommand::Repair(args) => repair(&config, &pool, args).await,
        VerifyCommand::Report(args) => report::report(&config, &pool, args).await,
    }
}

async fn sample(
    config: &config::Config,
    pool: &sqlx::PgPool,
    args: SampleArgs,
) -> anyhow::Result<()> {
    if args.reset {
        verifier::store::forget_settings(pool).await?;
        println!(
            "stored sampling forgotten; facades started from now use [verify]: rate {}, at most {}/s",
            config.verify.sample_rate, config.verify.max_samples_per_sec
        );
        return Ok(());
    }
    let current = verifier::store::settings(pool).await?;
    if args.rate.is_none() && args.max_per_sec.is_none() {
        match current {
            Some(s) => println!(
                "sampling {} of reads, at most {}/s per facade (set by `verify sample`)",
                s.sample_rate, s.max_samples_per_sec
            ),
            None => println!(
                "sampling {} of reads, at most {}/s per facade ([verify] of the config)",
                config.verify.sample_rate, config.verify.max_samples_per_sec
            ),
        }
        return Ok(());
    }
    let base = current.unwrap_or(Settings {
        sample_rate: config.verify.sample_rate,
        max_samples_per_sec: config.verify.max_samples_per_sec,
    });
    let flags = crate::Overrides::new(config)
        .set("rate", "verify.sample_rate", args.rate, |c, v| {
            c.verify.sample_rate = v
        })
        .set(
            "max-per-sec",
            "verify.max_samples_per_sec",
            args.max_per_sec,
            |c, v| c.verify.max_samples_per_sec = v,
        )
        .check()?;
    let wanted = Settings {
        sample_rate: args
            .rate
            .map_or(base.sample_rate, |_| flags.verify.sample_rate),
        max_samples_per_sec: args.max_per_sec.map_or(base.max_samples_per_sec, |_| {
            flags.verify.max_samples_per_sec
        }),
    };
    verifier::store::set_settings(pool, wanted, &host::who())
        .await
        .map_err(|e| match e {
            verifier::Error::Refused(m) => crate::UsageError(m).into(),
            other => anyhow::Error::from(other),
        })?;
    println!(
        "every facade now samples {} of reads, at most {}/s (within a second)",
        wanted.sample_rate, wanted.max_samples_per_sec
    );
    Ok(())
}

/// Takes the buffered writes Schemaless recorded as lost into the mismatch
/// store (a failure is a warning: the gates take them too).
async fn take_lost_writes(pool: &sqlx::PgPool, schemaless: &MySqlStore) {
    match verifier::store::take_buffer_conflicts(pool, schemaless).await {
        Ok(0) => {}
        Ok(n) => eprintln!(
            "{n} buffered writes lost to another body at their address are now open mismatches (read kind buffered_write)"
        ),
        Err(e) => eprintln!("warning: lost buffered writes not read: {e}"),
    }
}

async fn repair(
    config: &config::Config,
    pool: &sqlx::PgPool,
    args: RepairArgs,
) -> anyhow::Result<()> {
    let rows: Vec<(RowKey, Option<schemaless::Column>)> = if args.all {
        verifier::store::mismatches(pool, true, None, i64::MAX)
            .await?
            .into_iter()
            .map(|m| {
                Ok((
                    RowKey::parse(&m.row_key)?,
                    Some(schemaless::Column::new(&m.column)?),
                ))
            })
            .collect::<Result<_, schemaless::Error>>()?
    } else {
        let text = args.row_key.expect("clap requires a row key without --all");
        let row = RowKey::parse(&text).map_err(|e| crate::UsageError(e.to_string()))?;
        vec![(row, None)]
    };
    if rows.is_empty() {
        println!("no open mismatch to repair");
        return Ok(());
    }
    let mode = tripstore::mode::read(pool).await?.mode;
    let truth = mode.source_of_truth();
    let legacy = legacy::LegacyStore::connect(config).await?;
    let schemaless = MySqlStore::connect(config)?;
    let rules = Rules::from_config(&config.verify);
    let tombstones = schemaless::Column::new(&config.capture.tombstone_column)?;
    let repair = Repair {
        legacy: &legacy,
        schemaless: &schemaless,
        pool,
        rules: &rules,
        tombstones: Some(&tombstones),
        truth,
    };
    println!(
        "mode {mode}: the source of truth is {}, {} is rewritten",
        truth.as_str(),
        truth.other().as_str()
    );
    let mut failed = 0;
    for (row, column) in rows {
        let outcomes = match column {
            Some(c) => repair.column(&row, &c).await.map(|o| vec![(c, o)]),
            None => repair.row(&row).await,
        };
        match outcomes {
            Ok(outcomes) => {
                for (column, outcome) in outcomes {
                    let what = match outcome {
                        Repaired::AlreadyEqual => "already equal",
                        Repaired::Rewritten => "rewritten, verified equal",
                        Repaired::Deleted => {
                            "deleted (gone from the source of truth), verified equal"
                        }
                    };
                    println!("{row} {column}: {what}");
                }
            }
            Err(e) => {
                failed += 1;
                eprintln!("{row}: {e}");
            }
        }
    }
    legacy.close().await;
    schemaless.close().await;
    if failed > 0 {
        anyhow::bail!("{failed} repairs failed");
    }
    Ok(())
}
