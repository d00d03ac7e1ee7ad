//! `mezzanine index create|backfill|switch|run|status`: sharded secondary
//! indexes and their versions.

use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::Context;
use clap::{Args, Subcommand};
use schemaless::mysql::index::{self, Maintainer, VersionState};
use schemaless::mysql::trigger;
use schemaless::{MySqlStore, RowKey};
use tokio_util::sync::CancellationToken;

#[derive(Subcommand)]
pub enum IndexCommand {
    /// Create the next version of an index (tables on every shard, state
    /// building).
    Create(NameArgs),
    /// Fill a building version from the entity tables (its maintenance
    /// trigger follows every shard's log from the start) until it has
    /// caught up, with progress.
    // `--version` names the index version here, not the program's.
    #[command(disable_version_flag = true)]
    Backfill(VersionArgs),
    /// Make a caught-up version the one queries read; the active one is
    /// retired. Queries are never interrupted.
    #[command(disable_version_flag = true)]
    Switch(SwitchArgs),
    /// Keep every active and building version current (the maintenance
    /// triggers), until Ctrl-C.
    Run,
    /// Versions of an index, their state and how far behind each is.
    Status(NameArgs),
    /// Check a version (default: the active one) against the cells it
    /// indexes: each row's pointer and its one entry, on the right shard,
    /// with its latest cell's ref key and fields, and no stale entry left.
    /// Exits 1 on a wrong, missing or stale entry, or a row the maintainer
    /// has not reached. With `--repair`, the rows found wrong are
    /// rewritten from their latest cells and the version checked again.
    #[command(disable_version_flag = true)]
    Verify(VerifyArgs),
}

#[derive(Args)]
pub struct VerifyArgs {
    /// The index's name.
    name: String,
    /// The version (default: the active one).
    #[arg(long)]
    version: Option<u32>,
    /// One JSON object: rows, entries, behind, problems (and, with
    /// `--repair`, what was repaired and the check after it).
    #[arg(long)]
    json: bool,
    /// Rewrite each row found wrong from its latest cell (its entry on the
    /// right shard, its other entries deleted, its pointer moved), guarded
    /// by ref key as the maintainer's writes are, so it is safe while
    /// `index run` goes on; then check again.
    #[arg(long)]
    repair: bool,
}

#[derive(Args)]
pub struct NameArgs {
    /// The index's name, as declared in `[[index]]`.
    name: String,
}

#[derive(Args)]
pub struct VersionArgs {
    /// The index's name.
    name: String,
    /// The version (default: the newest building one).
    #[arg(long)]
    version: Option<u32>,
}

#[derive(Args)]
pub struct SwitchArgs {
    /// The index's name.
    name: String,
    /// The version (default: the newest building one).
    #[arg(long)]
    version: Option<u32>,
    /// Switch even if the version has not caught up.
    #[arg(long)]
    force: bool,
}

async fn lag(store: &MySqlStore, name: &str, version: u32) -> anyhow::Result<u64> {
    Ok(trigger::lag(store, &index::trigger_name(name, version)).await?)
}

async fn building(store: &MySqlStore, name: &str, version: Option<u32>) -> anyhow::Result<u32> {
    let versions = index::versions(store, name).await?;
    match version {
        Some(v) if versions.iter().any(|(x, _)| *x == v) => Ok(v),
        Some(v) => Err(crate::UsageError(format!("index {name} has no version {v}")).into()),
        None => versions
            .iter()
            .rev()
            .find(|(_, s)| *s == VersionState::Building)
            .map(|(v, _)| *v)
            .ok_or_else(|| {
                crate::UsageError(format!(
                    "index {name} has no building version: `mezzanine index create {name}` makes one"
                ))
                .into()
            }),
    }
}

pub async fn run(command: IndexCommand, config_path: &Path) -> anyhow::Result<()> {
    let config = crate::load_config(config_path)?;
    let store = MySqlStore::connect(&config)?;
    let check = |name: &str| -> anyhow::Result<()> {
        if config.indexes.iter().any(|i| i.name == name) {
            Ok(())
        } else {
            Err(crate::UsageError(format!(
                "no [[index]] is called {name:?} in {}",
                config_path.display()
            ))
            .into())
        }
    };
    match command {
        IndexCommand::Create(args) => {
            check(&args.name)?;
            let v = index::create_version(&store, &args.name).await?;
            println!(
                "index {} v{v} created on {} shards (building); `mezzanine index backfill {}` fills it",
                args.name,
                config.instance.shard_count,
                args.name
            );
        }
        IndexCommand::Backfill(args) => {
            check(&args.name)?;
            let v = building(&store, &args.name, args.version).await?;
            let trigger = Maintainer::trigger(&store, &args.name, v, &config.triggers)?;
            let cancel = CancellationToken::new();
            let runner = {
                let cancel = cancel.clone();
                tokio::spawn(async move { trigger.run(cancel).await })
            };
            let started = Instant::now();
            let first = lag(&store, &args.name, v).await?;
            loop {
                tokio::time::sleep(Duration::from_millis(500)).await;
                let left = lag(&store, &args.name, v).await?;
                let done = first.saturating_sub(left);
                let rate = done as f64 / started.elapsed().as_secs_f64();
                eprintln!(
                    "index {} v{v}: {done} of {first} log cells handled, {left} left, {rate:.0} cells/s",
                    args.name
                );
                if left == 0 {
                    break;
                }
                if runner.is_finished() {
                    break;
                }
            }
            cancel.cancel();
            runner.await.context("the maintenance trigger")??;
            println!(
                "index {} v{v} has caught up in {:.1}s; `mezzanine index switch {}` makes it active (keep `mezzanine index run` going to keep it current)",
                args.name,
                started.elapsed().as_secs_f64(),
                args.name
            );
        }
        IndexCommand::Switch(args) => {
            check(&args.name)?;
            let v = building(&store, &args.name, args.version).await?;
            let behind = lag(&store, &args.name, v).await?;
            if behind > 0 && !args.force {
                anyhow::bail!(
                    "index {} v{v} is {behind} log cells behind: run `mezzanine index backfill {}` first (--force switches anyway)",
                    args.name,
                    args.name
                );
            }
            index::switch(&store, &args.name, v).await?;
            println!("index {} now reads v{v}", args.name);
        }
        IndexCommand::Run => {
            let cancel = CancellationToken::new();
            let mut runners = Vec::new();
            for spec in &config.indexes {
                for (v, state) in index::versions(&store, &spec.name).await? {
                    if state == VersionState::Retired {
                        continue;
                    }
                    let trigger = Maintainer::trigger(&store, &spec.name, v, &config.triggers)?;
                    let token = cancel.clone();
                    println!("maintaining index {} v{v} ({})", spec.name, state.as_str());
                    runners.push(tokio::spawn(async move { trigger.run(token).await }));
                }
            }
            if runners.is_empty() {
                anyhow::bail!("no index has an active or building version: `mezzanine index create NAME` first");
            }
            crate::shutdown::stopped().await;
            eprintln!("stopping: releasing shards");
            cancel.cancel();
            for runner in runners {
                runner.await.context("a maintenance trigger")??;
            }
        }
        IndexCommand::Verify(args) => {
            check(&args.name)?;
            let versions = index::versions(&store, &args.name).await?;
            let v = match args.version {
                Some(v) if versions.iter().any(|(x, _)| *x == v) => v,
                Some(v) => {
                    return Err(crate::UsageError(format!(
                        "index {} has no version {v}",
                        args.name
                    ))
                    .into())
                }
                None => versions
                    .iter()
                    .find(|(_, s)| *s == VersionState::Active)
                    .map(|(v, _)| *v)
                    .ok_or_else(|| {
                        crate::UsageError(format!(
                            "index {} has no active version: name one with --version",
                            args.name
                        ))
                    })?,
            };
            let shards = config.instance.shard_count;
            let said = |sweep: &str, shard: u32, so_far: &index::IndexCheck| {
                if (shard + 1).is_multiple_of(16) || shard + 1 == shards {
                    eprintln!(
                        "index {} v{v}: {sweep} of {} of {shards} shards checked, {} rows, {} problems so far",
                        args.name,
                        shard + 1,
                        so_far.rows,
                        so_far.problems.len()
                    );
                }
            };
            let mut found = index::verify(&store, &args.name, v, &said).await?;
            let mut repaired = None;
            if args.repair && !found.problems.is_empty() {
                if !args.json {
                    print_check(&args.name, v, &found);
                }
                let mut rows: Vec<RowKey> = found.problems.iter().map(|(row, _)| *row).collect();
                rows.sort_unstable();
                rows.dedup();
                let done = index::repair(&store, &args.name, v, &rows).await?;
                eprintln!(
                    "index {} v{v}: {} rows rewritten from their latest cells ({} stale entries, {} corrupt pointers); checking again ...",
                    args.name, done.rows, done.stale, done.corrupt_pointers
                );
                found = index::verify(&store, &args.name, v, &said).await?;
                repaired = Some(done);
            }
            if args.json {
                let problems: Vec<serde_json::Value> = found
                    .problems
                    .iter()
                    .map(|(row, why)| serde_json::json!({"row_key": row.to_string(), "problem": why}))
                    .collect();
                println!(
                    "{}",
                    serde_json::json!({
                        "index": args.name,
                        "version": v,
                        "rows": found.rows,
                        "entries": found.entries,
                        "behind": found.behind.iter().map(|r| r.to_string()).collect::<Vec<_>>(),
                        "problems": problems,
                        "repaired": repaired.as_ref().map(|r| serde_json::json!({
                            "rows": r.rows,
                            "stale": r.stale,
                            "corrupt_pointers": r.corrupt_pointers,
                        })),
                    })
                );
            } else {
                print_check(&args.name, v, &found);
            }
            store.close().await;
            if !found.problems.is_empty() {
                let next = match repaired {
                    None => "`mezzanine index verify --repair` rewrites those rows from their latest cells",
                    Some(_) => "they are what a repair cannot rewrite (a unique index's value held by another row: fix the cells), or what the maintainer changed meanwhile (run it again)",
                };
                anyhow::bail!(
                    "index {} v{v} disagrees with the cells in {} places: {next}; a new version (`mezzanine index create`, `backfill`, `switch`) rebuilds it whole",
                    args.name,
                    found.problems.len()
                );
            }
            if !found.behind.is_empty() {
                anyhow::bail!(
                    "{} rows' entries are behind their latest cell (e.g. {}): is `mezzanine index run` going? `mezzanine index status {}` shows the lag, and `mezzanine trigger status {}` the cells its maintainer parked (a unique index's second row of a value is parked)",
                    found.behind.len(),
                    found.behind[0],
                    args.name,
                    index::trigger_name(&args.name, v)
                );
            }
            return Ok(());
        }
        IndexCommand::Status(args) => {
            check(&args.name)?;
            let versions = index::versions(&store, &args.name).await?;
            if versions.is_empty() {
                println!("index {}: no versions yet", args.name);
            }
            for (v, state) in versions {
                println!(
                    "index {} v{v}: {}, {} log cells behind",
                    args.name,
                    state.as_str(),
                    lag(&store, &args.name, v).await?
                );
            }
        }
    }
    store.close().await;
    Ok(())
}

/// `index verify`'s summary and its first problems.
fn print_check(name: &str, v: u32, found: &index::IndexCheck) {
    println!(
        "index {name} v{v}: {} rows checked, {} entries as they should be, {} problems, {} rows behind",
        found.rows,
        found.entries,
        found.problems.len(),
        found.behind.len()
    );
    for (row, why) in found.problems.iter().take(20) {
        println!("  {row}: {why}");
    }
    if found.problems.len() > 20 {
        println!(
            "  ... and {} more (--json lists them all)",
            found.problems.len() - 20
        );
    }
}
