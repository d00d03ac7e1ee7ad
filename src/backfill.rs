//! `mezzanine backfill plan|run|status|pause|resume|retry`: the history
//! copied into Schemaless while the app keeps running.

use std::io::{IsTerminal, Write};
use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use backfill::{Backfill, Options, Progress};
use clap::{Args, Subcommand};
use schemaless::MySqlStore;
use tokio_util::sync::CancellationToken;

use crate::metrics;

#[derive(Subcommand)]
pub enum BackfillCommand {
    /// Split the parent id range into chunks and store the plan in
    /// PostgreSQL. An existing plan is kept unless --replace or --extend.
    Plan(PlanArgs),
    /// Copy the planned chunks with N workers until every chunk is done or
    /// failed. Several processes on several machines may run one plan.
    Run(RunArgs),
    /// The whole plan's state: chunks by state, rows and cells copied,
    /// rate, failed and running chunks.
    Status(StatusArgs),
    /// Tell every worker to stop claiming chunks (chunks in progress
    /// finish).
    Pause,
    /// Let the workers claim chunks again.
    Resume,
    /// Put failed chunks back to pending (after fixing their data).
    Retry,
}

#[derive(Args)]
pub struct PlanArgs {
    /// Parent ids per chunk (default: backfill.chunk_size).
    #[arg(long)]
    chunk_size: Option<u64>,
    /// Forget the existing plan and every chunk's state, and plan again.
    #[arg(long, conflicts_with = "extend")]
    replace: bool,
    /// Add chunks for the parent ids created since the plan was made.
    #[arg(long)]
    extend: bool,
}

#[derive(Args)]
pub struct RunArgs {
    /// Chunks copied at once (default: backfill.workers).
    #[arg(long)]
    workers: Option<usize>,
    /// Legacy rows per second for this process; 0 for no limit (default:
    /// backfill.max_rows_per_sec).
    #[arg(long)]
    max_rows_per_sec: Option<u64>,
    /// Pause while any minion lags more than this; 0 never (default:
    /// backfill.max_replication_lag_ms).
    #[arg(long)]
    max_replication_lag_ms: Option<u64>,
    /// Claim running chunks silent this long (default:
    /// backfill.stale_after_ms).
    #[arg(long)]
    stale_after_ms: Option<u64>,
    /// Serve Prometheus metrics on this address (e.g. 127.0.0.1:9465).
    #[arg(long)]
    metrics_addr: Option<SocketAddr>,
    /// Progress as plain lines every 5 s even on a terminal.
    #[arg(long)]
    plain: bool,
}

#[derive(Args)]
pub struct StatusArgs {
    /// One JSON object instead of text.
    #[arg(long, conflicts_with = "prometheus")]
    json: bool,
    /// The Prometheus exposition text.
    #[arg(long)]
    prometheus: bool,
}

pub async fn run(command: BackfillCommand, config_path: &Path) -> anyhow::Result<()> {
    let config = crate::load_config(config_path)?;
    let legacy_config =
        legacy::connection::legacy_config(&config).map_err(|e| crate::UsageError(e.to_string()))?;
    let pool = legacy::connection::pool(legacy_config)?;
    backfill::plan::ensure_tables(&pool).await?;
    match command {
        BackfillCommand::Plan(args) => {
            let size = crate::Overrides::new(&config)
                .set(
                    "chunk-size",
                    "backfill.chunk_size",
                    args.chunk_size,
                    |c, v| c.backfill.chunk_size = v,
                )
                .check()?
                .backfill
                .chunk_size;
            let legacy = legacy::LegacyStore::connect(&config).await?;
            if args.extend {
                let (plan, added) = backfill::plan::extend(&legacy).await?;
                println!(
                    "plan extended by {added} chunks: ids {}..{} of {} in {} chunks",
                    plan.low_id, plan.high_id, plan.table, plan.chunks
                );
            } else {
                let plan = backfill::plan::create(&legacy, size, args.replace, &crate::mode::who())
                    .await
                    .map_err(|e| match e {
                        backfill::Error::PlanExists(_) => crate::UsageError(e.to_string()).into(),
                        other => anyhow::Error::from(other),
                    })?;
                println!(
                    "planned ids {}..{} of {} in {} chunks of {}",
                    plan.low_id, plan.high_id, plan.table, plan.chunks, plan.chunk_size
                );
            }
            legacy.close().await;
        }
        BackfillCommand::Run(args) => run_backfill(&config, &pool, &args).await?,
        BackfillCommand::Status(args) => {
            let status = backfill::status::read(&pool).await?;
            if args.prometheus {
                metrics::record_backfill(&status, None);
                print!("{}", metrics::render());
            } else if args.json {
                println!("{}", status_json(&status));
            } else {
                print_status(&status);
            }
        }
        BackfillCommand::Pause => {
            backfill::plan::set_paused(&pool, true).await?;
            println!("backfill paused: workers finish their chunks and wait");
        }
        BackfillCommand::Resume => {
            backfill::plan::set_paused(&pool, false).await?;
            println!("backfill resumed");
        }
        BackfillCommand::Retry => {
            let n = backfill::plan::retry_failed(&pool).await?;
            println!("{n} failed chunks are pending again; `backfill run` copies them");
        }
    }
    pool.close().await;
    Ok(())
}

async fn run_backfill(
    config: &config::Config,
    pool: &sqlx::PgPool,
    args: &RunArgs,
) -> anyhow::Result<()> {
    let flags = crate::Overrides::new(config)
        .set("workers", "backfill.workers", args.workers, |c, v| {
            c.backfill.workers = v
        })
        .set(
            "max-rows-per-sec",
            "backfill.max_rows_per_sec",
            args.max_rows_per_sec,
            |c, v| c.backfill.max_rows_per_sec = v,
        )
        .set(
            "max-replication-lag-ms",
            "backfill.max_replication_lag_ms",
            args.max_replication_lag_ms,
            |c, v| c.backfill.max_replication_lag_ms = v,
        )
        .set(
            "stale-after-ms",
            "backfill.stale_after_ms",
            args.stale_after_ms,
            |c, v| c.backfill.stale_after_ms = v,
        )
        .check()?;
    let options = Options::from_config(&flags.backfill);
    let legacy = legacy::LegacyStore::connect(config).await?;
    let schemaless = MySqlStore::connect(config)?;
    let runner = Arc::new(Backfill::new(
        legacy,
        schemaless.clone(),
        config,
        options.clone(),
    ));
    let progress = runner.progress();
    let cancel = CancellationToken::new();
    if let Some(addr) = args.metrics_addr {
        let (pool, progress) = (pool.clone(), progress.clone());
        metrics::serve(
            addr,
            worker::metrics::refresh(move || {
                let (pool, progress) = (pool.clone(), progress.clone());
                async move {
                    match backfill::status::read(&pool).await {
                        Ok(status) => metrics::record_backfill(&status, Some(&progress)),
                        Err(e) => tracing::warn!("reading the backfill's status for /metrics: {e}"),
                    }
                }
            }),
            cancel.clone(),
        )
        .await?;
    }
    eprintln!(
        "{}: {} workers{}",
        runner.owner(),
        options.workers,
        if options.max_rows_per_sec > 0 {
            format!(", at most {} rows/s", options.max_rows_per_sec)
        } else {
            String::new()
        }
    );
    let task = {
        let (runner, cancel) = (runner.clone(), cancel.clone());
        tokio::spawn(async move { runner.run(cancel).await })
    };
    let report = show_progress(
        pool,
        &progress,
        args.plain || !std::io::stderr().is_terminal(),
        task,
    );
    let finished = tokio::select! {
        result = report => result?,
        _ = crate::mirror::stopped() => {
            cancel.cancel();
            eprintln!("\nstopping: chunks in progress go back to other workers once their heartbeat is stale");
            false
        }
    };
    cancel.cancel();
    let status = backfill::status::read(pool).await?;
    println!(
        "this process: {} chunks done, {} failed, {} rows, {} cells ({} new); the plan: {} of {} chunks done, {} failed",
        Progress::get(&progress.chunks_done),
        Progress::get(&progress.chunks_failed),
        Progress::get(&progress.rows),
        Progress::get(&progress.cells),
        Progress::get(&progress.written),
        status.done,
        status.total(),
        status.failed
    );
    schemaless.close().await;
    if finished && status.failed > 0 {
        anyhow::bail!(
            "{} chunks failed; `mezzanine backfill status` shows why",
            status.failed
        );
    }
    Ok(())
}

/// Draws progress until the run ends; returns whether the plan finished.
pub(crate) async fn show_progress(
    pool: &sqlx::PgPool,
    progress: &Progress,
    plain: bool,
    mut task: tokio::task::JoinHandle<Result<bool, backfill::Error>>,
) -> anyhow::Result<bool> {
    let started = Instant::now();
    let every = if plain {
        Duration::from_secs(5)
    } else {
        Duration::from_millis(250)
    };
    let mut tick = tokio::time::interval(every);
    tick.tick().await;
    let (mut total, mut done_at_start) = (0u64, None);
    let mut last_read = Instant::now() - Duration::from_secs(10);
    let mut done = 0u64;
    loop {
        tokio::select! {
            result = &mut task => {
                if !plain {
                    eprintln!();
                }
                return Ok(result??);
            }
            _ = tick.tick() => {}
        }
        if last_read.elapsed() >= Duration::from_secs(1) {
            if let Ok(status) = backfill::status::read(pool).await {
                total = status.total();
                done = status.done + status.failed;
                done_at_start.get_or_insert(done);
            }
            last_read = Instant::now();
        }
        let secs = started.elapsed().as_secs_f64().max(1e-3);
        let rows = Progress::get(&progress.rows);
        let cells = Progress::get(&progress.cells);
        let mine = done.saturating_sub(done_at_start.unwrap_or(done));
        let eta = if mine > 0 {
            let per_chunk = secs / mine as f64;
            format_eta(total.saturating_sub(done) as f64 * per_chunk)
        } else {
            "--".into()
        };
        let state = if progress.paused.load(std::sync::atomic::Ordering::Relaxed) {
            " PAUSED"
        } else if progress.lagging.load(std::sync::atomic::Ordering::Relaxed) {
            " WAITING FOR REPLICATION"
        } else {
            ""
        };
        let line = format!(
            "{done}/{total} chunks, {rows} rows ({:.0}/s), {cells} cells ({:.0}/s), ETA {eta}{state}",
            rows as f64 / secs,
            cells as f64 / secs,
        );
        if plain {
            eprintln!("{line}");
        } else {
            let width = 30usize;
            let filled = if total == 0 {
                width
            } else {
                (done as usize * width / total as usize).min(width)
            };
            eprint!(
                "\r[{}{}] {line}\x1b[K",
                "#".repeat(filled),
                "-".repeat(width - filled)
            );
            let _ = std::io::stderr().flush();
        }
    }
}

pub(crate) fn format_eta(secs: f64) -> String {
    let secs = secs.round() as u64;
    if secs >= 3600 {
        format!("{}h{:02}m", secs / 3600, secs % 3600 / 60)
    } else {
        format!("{}m{:02}s", secs / 60, secs % 60)
    }
}

fn print_status(status: &backfill::PlanStatus) {
    let Some(plan) = &status.plan else {
        println!("no backfill plan (`mezzanine backfill plan`)");
        return;
    };
    println!(
        "plan: {} ids {}..{} in {} chunks of {}, range set {}{}",
        plan.table,
        plan.low_id,
        plan.high_id,
        status.total(),
        plan.chunk_size,
        plan.extended_at,
        if plan.paused { ", PAUSED" } else { "" }
    );
    println!(
        "chunks: {} done, {} running, {} pending, {} failed{}",
        status.done,
        status.running,
        status.pending,
        status.failed,
        if status.complete() { " (complete)" } else { "" }
    );
    println!(
        "copied: {} parents, {} cells ({} new to Schemaless); {:.0} cells/s over the last minute",
        status.parents_done, status.cells_done, status.cells_written, status.recent_cells_per_sec
    );
    for c in &status.in_progress {
        println!(
            "  running chunk {} (ids {}..{}) by {}, heartbeat {:.1}s ago, attempt {}",
            c.id,
            c.start_id,
            c.end_id,
            c.owner.as_deref().unwrap_or("?"),
            c.silent_secs.unwrap_or(0.0),
            c.attempts
        );
    }
    for c in &status.failures {
        println!(
            "  FAILED chunk {} (ids {}..{}): {}",
            c.id,
            c.start_id,
            c.end_id,
            c.error.as_deref().unwrap_or("?")
        );
    }
}

fn status_json(status: &backfill::PlanStatus) -> serde_json::Value {
    serde_json::json!({
        "planned": status.plan.is_some(),
        "complete": status.complete(),
        "paused": status.plan.as_ref().is_some_and(|p| p.paused),
        "chunks": status.total(),
        "pending": status.pending,
        "running": status.running,
        "done": status.done,
        "failed": status.failed,
        "parents_done": status.parents_done,
        "cells_done": status.cells_done,
        "cells_written": status.cells_written,
        "recent_cells_per_sec": status.recent_cells_per_sec,
        "failures": status.failures.iter().map(|c| serde_json::json!({
            "id": c.id, "start_id": c.start_id, "end_id": c.end_id, "error": c.error,
        })).collect::<Vec<_>>(),
    })
}
