//! `mezzanine mode show|set|reads|history`: the facade's mode and read
//! share, kept in PostgreSQL.

use std::path::Path;

use clap::{Args, Subcommand};
use tripstore::mode::{self, Check, Mode, ModeRequest, ReadShare, ReadsRequest};

#[derive(Subcommand)]
pub enum ModeCommand {
    /// Print the current mode, who set it, and the latest changes.
    Show,
    /// Move every facade to another mode. One step back is always allowed;
    /// a step forward must pass its gate; a jump is refused.
    Set(SetArgs),
    /// Set the share of reads Schemaless serves in shadow (the rest go to
    /// PostgreSQL), chosen by row key: one row is always answered by the
    /// same store at a given share. Stored with the mode and followed by
    /// every facade and worker; may be set before entering shadow.
    Reads(ReadsArgs),
    /// Every change of the mode and of the read share: who, when, why,
    /// forced or not, and the gate's checks at that moment.
    History(HistoryArgs),
}

#[derive(Args)]
pub struct SetArgs {
    /// legacy, mirror, shadow, primary or schemaless.
    mode: String,
    /// Take a refused step anyway (recorded in the history with what it
    /// overrode).
    #[arg(long)]
    force: bool,
    /// Why, for the history.
    #[arg(long)]
    reason: Option<String>,
    /// Check every condition of the step and print what would happen,
    /// changing nothing. Exit 0 if the step would be taken, 1 if not.
    #[arg(long, conflicts_with = "force")]
    dry_run: bool,
    /// With --dry-run: print the checks as JSON.
    #[arg(long, requires = "dry_run")]
    json: bool,
}

#[derive(Args)]
pub struct ReadsArgs {
    /// The share, a percentage from 0 to 100 (at most two decimals: 0.5).
    percent: String,
    /// Only for this layout column (otherwise for every column, dropping
    /// the shares set for single columns).
    #[arg(long)]
    column: Option<String>,
    /// Why, for the history.
    #[arg(long)]
    reason: Option<String>,
}

#[derive(Args)]
pub struct HistoryArgs {
    /// How many changes, newest first.
    #[arg(long, default_value_t = 50, value_parser = clap::value_parser!(i64).range(1..=100_000))]
    limit: i64,
    /// Print JSON (an array of changes) instead of text.
    #[arg(long)]
    json: bool,
}

/// The gate of `mode set MODE`, with the layout when the step needs it:
/// for coverage, capture's triggers, and (entering `mirror`) the reverse
/// mirror's catch-up before the step back from `shadow`. Without that
/// need, a layout that does not match the tables yet does not stop a
/// step.
pub async fn gate(
    config: &config::Config,
    pool: &sqlx::PgPool,
    target: Mode,
) -> anyhow::Result<tripstore::gates::MigrationGate> {
    let mut gate = tripstore::gates::MigrationGate::new(
        pool.clone(),
        schemaless::MySqlStore::connect(config)?,
        config,
    );
    let capture_checked = config.capture.enabled && config.capture.required;
    let needs_layout = config.gates.min_coverage > 0.0 || capture_checked || target == Mode::Mirror;
    if needs_layout && config.layout.is_some() {
        gate = gate.with_legacy(legacy::LegacyStore::connect(config).await?);
    }
    Ok(gate)
}

/// One line per check: `  PASS     name: why` or `  NOT YET  name: why`.
pub fn print_checks(checks: &[Check]) {
    for check in checks {
        println!(
            "  {:<8} {}: {}",
            if check.pass { "PASS" } else { "NOT YET" },
            check.name,
            check.why
        );
    }
}

pub async fn run(command: ModeCommand, config_path: &Path) -> anyhow::Result<()> {
    let config = crate::load_config(config_path)?;
    let legacy =
        legacy::connection::legacy_config(&config).map_err(|e| crate::UsageError(e.to_string()))?;
    let pool = legacy::connection::pool(legacy)?;
    mode::ensure_control(&pool).await?;
    let result = match command {
        ModeCommand::Show => show(&pool).await,
        ModeCommand::Set(args) => set(args, &config, &pool).await,
        ModeCommand::Reads(args) => reads(args, &config, &pool).await,
        ModeCommand::History(args) => history(args, &pool).await,
    };
    pool.close().await;
    result
}

async fn show(pool: &sqlx::PgPool) -> anyhow::Result<()> {
    let state = mode::read(pool).await?;
    println!("mode: {}", state.mode);
    println!(
        "set {} by {}{}{}",
        state.changed_at,
        state.changed_by,
        if state.forced { " (forced)" } else { "" },
        state.reason.map(|r| format!(": {r}")).unwrap_or_default()
    );
    let ladder: Vec<String> = Mode::ALL
        .iter()
        .map(|m| {
            if *m == state.mode {
                format!("[{m}]")
            } else {
                m.to_string()
            }
        })
        .collect();
    println!("ladder: {}", ladder.join(" -> "));
    println!(
        "reads in shadow: {} to Schemaless{}",
        state.reads.describe(),
        if state.mode == Mode::Shadow {
            ""
        } else {
            " (takes effect in shadow)"
        }
    );
    // The mirror's tables exist once a facade or `mirror` command has run;
    // before that there is nothing to show.
    if let Ok((depth, oldest, parked)) = mirror::status::outbox(pool).await {
        println!(
            "outbox: {depth} entries{}, {parked} parked (`mezzanine mirror status` for more)",
            oldest
                .map(|s| format!(", the oldest {s:.1}s old"))
                .unwrap_or_default()
        );
    }
    if let Ok(queue) = mirror::capture::status::queue(pool).await {
        println!(
            "capture queue: {} changes{}, {} parked (`mezzanine capture status` for more)",
            queue.depth,
            queue
                .oldest_secs
                .map(|s| format!(", the oldest {s:.1}s old"))
                .unwrap_or_default(),
            queue.parked
        );
    }
    let history = mode::history(pool, 10).await?;
    if !history.is_empty() {
        println!("\nlatest changes (`mezzanine mode history` for all):");
        for h in &history {
            println!("  {}", history_line(h));
        }
    }
    Ok(())
}

/// One change on one line.
fn history_line(h: &mode::HistoryEntry) -> String {
    let what = match (h.kind.as_str(), &h.reads) {
        ("reads", Some(reads)) => format!("reads in {} -> {}", h.to, reads.describe()),
        _ => format!("{} -> {}", h.from, h.to),
    };
    format!(
        "{}  {what}  by {}{}{}",
        h.at,
        h.by,
        h.overridden
            .as_ref()
            .map(|o| format!("  FORCED over: {o}"))
            .unwrap_or_default(),
        h.reason
            .as_ref()
            .map(|r| format!("  ({r})"))
            .unwrap_or_default()
    )
}

async fn set(args: SetArgs, config: &config::Config, pool: &sqlx::PgPool) -> anyhow::Result<()> {
    let target: Mode = args
        .mode
        .parse()
        .map_err(|e: tripstore::Error| crate::UsageError(e.to_string()))?;
    let gate = gate(config, pool, target).await?;
    if args.dry_run {
        let plan = mode::dry_run(pool, target, &gate).await?;
        let verdict = if plan.from == plan.to {
            format!("mode is already {}: nothing would change", plan.to)
        } else if let Some(refusal) = plan.refusal() {
            format!(
                "mode {} -> {} would be refused ({}): {}",
                plan.from, plan.to, refusal.name, refusal.why
            )
        } else {
            format!("mode {} -> {} would be taken", plan.from, plan.to)
        };
        if args.json {
            /// `mode set --dry-run --json`.
            #[derive(serde::Serialize)]
            struct DryRun<'a> {
                from: tripstore::Mode,
                to: tripstore::Mode,
                pass: bool,
                gates: &'a [tripstore::mode::Check],
            }
            let json = DryRun {
                from: plan.from,
                to: plan.to,
                pass: plan.passes(),
                gates: &plan.checks,
            };
            println!("{}", serde_json::to_string_pretty(&json)?);
        } else {
            println!("dry run: {}", verdict);
            print_checks(&plan.checks);
            println!("nothing was changed");
        }
        if plan.passes() {
            return Ok(());
        }
        anyhow::bail!("{verdict}");
    }
    let request = ModeRequest {
        target,
        force: args.force,
        by: host::who(),
        reason: args.reason,
    };
    let change = mode::set(pool, &request, &gate).await?;
    if change.from == change.to {
        println!("mode is already {}", change.to);
    } else if let Some(overridden) = change.overridden {
        println!(
            "mode {} -> {} (FORCED over: {overridden})",
            change.from, change.to
        );
    } else {
        println!("mode {} -> {}", change.from, change.to);
    }
    Ok(())
}

async fn reads(
    args: ReadsArgs,
    config: &config::Config,
    pool: &sqlx::PgPool,
) -> anyhow::Result<()> {
    let bp =
        ReadShare::parse_percent(&args.percent).map_err(|e| crate::UsageError(e.to_string()))?;
    if let Some(column) = &args.column {
        let columns: Vec<&str> = config
            .layout
            .iter()
            .flat_map(|l| l.columns.iter().map(|c| c.name.as_str()))
            .collect();
        if !columns.contains(&column.as_str()) {
            return Err(crate::UsageError(format!(
                "--column {column}: not a column of the layout (its columns: {})",
                columns.join(", ")
            ))
            .into());
        }
    }
    let request = ReadsRequest {
        bp,
        column: args.column,
        by: host::who(),
        reason: args.reason,
    };
    let (before, after) = mode::set_reads(pool, &request).await?;
    let state = mode::read(pool).await?;
    if before == after {
        println!(
            "reads in shadow are already {} to Schemaless",
            after.describe()
        );
    } else {
        println!(
            "reads in shadow: {} -> {} to Schemaless{}",
            before.describe(),
            after.describe(),
            if state.mode == Mode::Shadow {
                ""
            } else {
                "; the mode is not shadow, so this takes effect when it is"
            }
        );
    }
    Ok(())
}

async fn history(args: HistoryArgs, pool: &sqlx::PgPool) -> anyhow::Result<()> {
    let history = mode::history(pool, args.limit).await?;
    if args.json {
        println!("{}", serde_json::to_string_pretty(&history)?);
        return Ok(());
    }
    if history.is_empty() {
        println!("the mode has never changed");
    }
    for h in &history {
        println!("{}", history_line(h));
        if !h.checks.is_empty() {
            print_checks(&h.checks);
        }
    }
    Ok(())
}
