//! `mezzanine backfill plan|run|status|pause|resume|retry`: the history
//! copied into Schemaless while the app keeps running.

use std::io::IsTerminal;
use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;

use backfill::{Backfill, Options, Progress};
use clap::{Args, Subcommand};
use schemaless::MySqlStore;
use tokio_util::sync::CancellationToken;

use crate::metrics;

mod status;
use status::{print_status, PlanJson, StatusJson};

#[derive(Subcommand)]
pub enum BackfillCommand {
    /// Split the parent id range into chunks and store the plan in
    /// PostgreSQL. An existing plan is kept unless --replace or --extend.
    /// Named plans coexist: the full backfill (`main`) and partial ones
    /// (--columns, --ids, --where), each with its own chunks and status.
    Plan(PlanArgs),
    /// Copy a plan's chunks with N workers until every chunk is done or
    /// failed. Several processes on several machines may run one plan.
    Run(RunArgs),
    /// Every plan's state (or one's, with --plan): chunks by state, rows
    /// and cells copied, rate, failed and running chunks.
    Status(StatusArgs),
    /// Tell every worker of a plan to stop claiming chunks (chunks in
    /// progress finish).
    Pause(PlanName),
    /// Let a plan's workers claim chunks again.
    Resume(PlanName),
    /// Put a plan's failed chunks back to pending (after fixing their
    /// data).
    Retry(PlanName),
}

#[derive(Args)]
pub struct PlanName {
    /// The plan.
    #[arg(long, default_value = backfill::plan::MAIN)]
    plan: String,
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
    #[arg(long, conflicts_with_all = ["columns", "ids", "where_"])]
    extend: bool,
    /// The plan's name: `main` is the full backfill; give partial plans
    /// names of their own (1-64 of a-z, 0-9, _ and -).
    #[arg(long, default_value = backfill::plan::MAIN)]
    name: String,
    /// Copy only these layout columns (comma-separated), e.g. one just
    /// added to the layout.
    #[arg(long, value_delimiter = ',')]
    columns: Option<Vec<String>>,
    /// Copy only parents with ids in A..B (B excluded) or A..=B.
    #[arg(long, value_parser = id_range)]
    ids: Option<(i64, i64)>,
    /// Copy only parents this predicate on the parent table admits, e.g.
    /// "city_id = 7 AND requested_at >= '2015-01-01'" (only the parent's
    /// columns; no subquery; only functions without side effects).
    #[arg(long = "where", id = "where_")]
    where_: Option<String>,
}

/// `A..B` (B excluded) or `A..=B`.
pub(crate) fn id_range(text: &str) -> Result<(i64, i64), String> {
    let bad = || format!("{text:?} is not an id range: A..B (B excluded) or A..=B");
    let (low, high, inclusive) = match text.split_once("..=") {
        Some((low, high)) => (low, high, true),
        None => {
            let (low, high) = text.split_once("..").ok_or_else(bad)?;
            (low, high, false)
        }
    };
    let low: i64 = low.trim().parse().map_err(|_| bad())?;
    let high: i64 = high.trim().parse().map_err(|_| bad())?;
    let high = if inclusive {
        high.checked_add(1).ok_or_else(bad)?
    } else {
        high
    };
    if high <= low {
        return Err(format!("{text:?} is an empty id range"));
    }
    Ok((low, high))
}

#[derive(Args)]
pub struct RunArgs {
    /// The plan to run.
    #[arg(long, default_value = backfill::plan::MAIN)]
    plan: String,
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
    /// Only this plan (default: every plan).
    #[arg(long)]
    plan: Option<String>,
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
            let result = plan(&legacy, &args, size).await;
            legacy.close().await;
            result?;
        }
        BackfillCommand::Run(args) => run_backfill(&config, &pool, &args).await?,
        BackfillCommand::Status(args) => {
            let statuses = match &args.plan {
                Some(name) => {
                    backfill::plan::existing(&pool, name).await.map_err(usage)?;
                    vec![backfill::status::read_plan(&pool, name).await?]
                }
                None => backfill::status::all(&pool).await?,
            };
            // The full backfill's figures stay where they always were
            // (without its plan: none).
            let main = match &args.plan {
                Some(_) => statuses[0].clone(),
                None => statuses
                    .iter()
                    .find(|s| {
                        s.plan
                            .as_ref()
                            .is_some_and(|p| p.name == backfill::plan::MAIN)
                    })
                    .cloned()
                    .unwrap_or_default(),
            };
            if args.prometheus {
                metrics::record_backfill(&main, None);
                print!("{}", metrics::render());
            } else if args.json {
                let json = StatusJson {
                    main: PlanJson::of(&main),
                    plans: statuses.iter().map(PlanJson::of).collect(),
                };
                println!("{}", serde_json::to_string(&json)?);
            } else if statuses.is_empty() {
                println!("no backfill plan (`mezzanine backfill plan`)");
            } else {
                for (i, status) in statuses.iter().enumerate() {
                    if i > 0 {
                        println!();
                    }
                    print_status(status);
                }
            }
        }
        BackfillCommand::Pause(name) => {
            backfill::plan::set_paused_plan(&pool, &name.plan, true)
                .await
                .map_err(usage)?;
            println!(
                "backfill plan {} paused: workers finish their chunks and wait",
                name.plan
            );
        }
        BackfillCommand::Resume(name) => {
            backfill::plan::set_paused_plan(&pool, &name.plan, false)
                .await
                .map_err(usage)?;
            println!("backfill plan {} resumed", name.plan);
        }
        BackfillCommand::Retry(name) => {
            let n = backfill::plan::retry_failed_plan(&pool, &name.plan)
                .await
                .map_err(usage)?;
            println!(
                "{n} failed chunks of plan {} are pending again; `backfill run --plan {}` copies them",
                name.plan, name.plan
            );
        }
    }
    pool.close().await;
    Ok(())
}

/// Errors of the caller's asking (a plan that exists, is unknown or
/// cannot be made as asked) exit 2.
fn usage(e: backfill::Error) -> anyhow::Error {
    match e {
        backfill::Error::PlanExists(_)
        | backfill::Error::NoSuchPlan { .. }
        | backfill::Error::BadPlan(_)
        | backfill::Error::Legacy(legacy::Error::Predicate(_)) => {
            crate::UsageError(e.to_string()).into()
        }
        other => anyhow::Error::from(other),
    }
}

async fn plan(
    legacy: &legacy::LegacyStore,
    args: &PlanArgs,
    chunk_size: u64,
) -> anyhow::Result<()> {
    if args.extend {
        let (plan, added) = backfill::plan::extend_plan(legacy, &args.name)
            .await
            .map_err(usage)?;
        println!(
            "plan {} extended by {added} chunks: ids {}..{} of {} in {} chunks",
            plan.name, plan.low_id, plan.high_id, plan.table, plan.chunks
        );
        return Ok(());
    }
    let predicate = match &args.where_ {
        Some(text) => Some(
            legacy
                .predicate(text)
                .await
                .map_err(|e| crate::UsageError(e.to_string()))?,
        ),
        None => None,
    };
    let spec = backfill::plan::Spec {
        name: args.name.clone(),
        columns: args.columns.clone(),
        ids: args.ids,
        predicate,
    };
    let plan = backfill::plan::create_plan(legacy, &spec, chunk_size, args.replace, &host::who())
        .await
        .map_err(usage)?;
    println!(
        "planned {}: ids {}..{} of {} in {} chunks of {} ({})",
        plan.name,
        plan.low_id,
        plan.high_id,
        plan.table,
        plan.chunks,
        plan.chunk_size,
        plan.scope()
    );
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
    backfill::plan::existing(pool, &args.plan)
        .await
        .map_err(usage)?;
    let legacy = legacy::LegacyStore::connect(config).await?;
    let schemaless = MySqlStore::connect(config)?;
    let runner = Arc::new(
        Backfill::new(legacy, schemaless.clone(), config, options.clone()).for_plan(&args.plan),
    );
    let plan_name = args.plan.clone();
    let progress = runner.progress();
    let cancel = CancellationToken::new();
    if let Some(addr) = args.metrics_addr {
        let (pool, progress, name) = (pool.clone(), progress.clone(), plan_name.clone());
        metrics::serve(
            addr,
            worker::metrics::refresh(move || {
                let (pool, progress, name) = (pool.clone(), progress.clone(), name.clone());
                async move {
                    match backfill::status::read_plan(&pool, &name).await {
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
        "{} on plan {}: {} workers{}",
        runner.owner(),
        runner.plan(),
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
    let report = crate::progress::show(
        pool,
        &plan_name,
        &progress,
        args.plain || !std::io::stderr().is_terminal(),
        task,
    );
    let finished = tokio::select! {
        result = report => result?,
        _ = crate::shutdown::stopped() => {
            cancel.cancel();
            eprintln!("\nstopping: chunks in progress go back to other workers once their heartbeat is stale");
            false
        }
    };
    cancel.cancel();
    let status = backfill::status::read_plan(pool, &plan_name).await?;
    println!(
        "this process: {} chunks done, {} failed, {} rows, {} cells ({} new); plan {plan_name}: {} of {} chunks done, {} failed",
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
            "{} chunks failed; `mezzanine backfill status --plan {plan_name}` shows why",
            status.failed
        );
    }
    Ok(())
}
