//! `mezzanine backup` (and `backup verify`) and `mezzanine restore`: the
//! command line of [`schemaless::mysql::backup`].

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Instant;

use anyhow::Context;
use clap::{Args, Subcommand};
use schemaless::mysql::backup::{self, BackupError, BackupOptions, RestoreOptions, Until};
use schemaless::mysql::Topology;

use crate::table::Table;
use crate::UsageError;

/// `mezzanine backup`.
#[derive(Args)]
#[command(args_conflicts_with_subcommands = true)]
pub struct BackupArgs {
    #[command(subcommand)]
    command: Option<BackupCommand>,
    /// The directory to write: new, or empty.
    #[arg(long, value_name = "DIR", required = false)]
    to: Option<PathBuf>,
    /// Only these shards ("12" or "0-15"); all of them by default.
    #[arg(long, value_name = "SHARDS")]
    shards: Option<config::ShardRange>,
    /// How many shards are read at once.
    #[arg(long, default_value_t = 4, value_parser = clap::value_parser!(u16).range(1..=256))]
    parallel: u16,
    /// Print the manifest as JSON when done, instead of a table.
    #[arg(long)]
    json: bool,
    /// Plain progress lines instead of a bar.
    #[arg(long)]
    plain: bool,
}

#[derive(Subcommand)]
pub enum BackupCommand {
    /// Check a backup's files against its manifest: lengths and SHA-256
    /// checksums, and (unless --quick) every record read back and its
    /// content digest. Exits 1 if any file is damaged.
    Verify {
        /// The backup directory.
        dir: PathBuf,
        /// Checksums only, without decompressing the files.
        #[arg(long)]
        quick: bool,
        /// One JSON object instead of a table.
        #[arg(long)]
        json: bool,
    },
}

/// `mezzanine restore`.
#[derive(Args)]
pub struct RestoreArgs {
    /// The backup directory.
    #[arg(long, value_name = "DIR")]
    from: PathBuf,
    /// The configuration of the instance to restore into: no cells yet,
    /// the backup's shard count, any name and clusters.
    #[arg(long, value_name = "NEW.toml")]
    to_config: PathBuf,
    /// Restore each shard's change log only up to this added_id: `N` for
    /// every shard, `SHARD:N` for one, comma-separated (`500,3:120`).
    #[arg(long, value_name = "ID")]
    until_added_id: Option<String>,
    /// How many shards are written at once.
    #[arg(long, default_value_t = 4, value_parser = clap::value_parser!(u16).range(1..=256))]
    parallel: u16,
    /// One JSON object when done, instead of a table.
    #[arg(long)]
    json: bool,
    /// Plain progress lines instead of a bar.
    #[arg(long)]
    plain: bool,
}

pub async fn run(args: BackupArgs, config_path: &Path) -> anyhow::Result<()> {
    match (args.command, args.to) {
        (Some(BackupCommand::Verify { dir, quick, json }), _) => verify(&dir, !quick, json),
        (None, Some(to)) => {
            let config = crate::load_config(config_path)?;
            let topology = Topology::from_config(&config)?;
            let options = BackupOptions {
                shards: args.shards,
                parallel: args.parallel.into(),
                ..BackupOptions::default()
            };
            let result = write(&topology, &to, &options, args.json, args.plain).await;
            topology.close().await;
            result
        }
        (None, None) => Err(UsageError(
            "say where to write the backup (--to DIR), or `backup verify DIR`".into(),
        )
        .into()),
    }
}

/// Counts cells for a progress bar that a ticker redraws.
struct Ticker {
    cells: Arc<AtomicU64>,
    task: tokio::task::JoinHandle<crate::progress::Bar>,
    stop: tokio::sync::watch::Sender<bool>,
}

impl Ticker {
    fn start(plain: bool, verb: &'static str) -> Ticker {
        let cells = Arc::new(AtomicU64::new(0));
        let (stop, mut stopped) = tokio::sync::watch::channel(false);
        let counted = cells.clone();
        let task = tokio::spawn(async move {
            let mut bar = crate::progress::Bar::new(plain);
            let started = Instant::now();
            loop {
                let n = counted.load(Ordering::Relaxed);
                let rate = n as f64 / started.elapsed().as_secs_f64().max(1e-3);
                bar.show(n, n, format!("cells {verb} ({rate:.0}/s)"));
                tokio::select! {
                    _ = tokio::time::sleep(bar.tick()) => {}
                    _ = stopped.changed() => return bar,
                }
            }
        });
        Ticker { cells, task, stop }
    }

    async fn finish(self) {
        let _ = self.stop.send(true);
        if let Ok(bar) = self.task.await {
            bar.finish();
        }
    }
}

fn refused(e: BackupError) -> anyhow::Error {
    match e {
        BackupError::Refused(message) => UsageError(message).into(),
        e @ BackupError::Manifest { .. } => UsageError(e.to_string()).into(),
        other => other.into(),
    }
}

async fn write(
    topology: &Topology,
    to: &Path,
    options: &BackupOptions,
    json: bool,
    plain: bool,
) -> anyhow::Result<()> {
    let started = Instant::now();
    let ticker = Ticker::start(plain, "backed up");
    let cells = ticker.cells.clone();
    let result = backup::backup(topology, to, options, &|n| {
        cells.fetch_add(n, Ordering::Relaxed);
    })
    .await;
    ticker.finish().await;
    let manifest = result
        .map_err(refused)
        .with_context(|| format!("backing up instance {:?}", topology.instance))?;
    if json {
        println!("{}", serde_json::to_string(&manifest)?);
        return Ok(());
    }
    let mut table =
        Table::new(&["SHARD", "CELLS", "POSITION", "FILE BYTES", "FROM"]).right(&[0, 1, 2, 3]);
    for e in &manifest.shards {
        table.row([
            e.shard.to_string(),
            e.cells.to_string(),
            e.position.to_string(),
            e.file_bytes.to_string(),
            e.source.clone(),
        ]);
    }
    table.print("  ");
    let cells: u64 = manifest.shards.iter().map(|e| e.cells).sum();
    let bytes: u64 = manifest.shards.iter().map(|e| e.file_bytes).sum();
    let seconds = started.elapsed().as_secs_f64();
    println!(
        "backup {} of instance {:?}: {} shards, {cells} cells, {bytes} bytes compressed, in {seconds:.1}s ({:.0} cells/s); manifest {}",
        manifest.id,
        manifest.instance,
        manifest.shards.len(),
        cells as f64 / seconds.max(1e-3),
        to.join(backup::MANIFEST).display()
    );
    Ok(())
}

fn verify(dir: &Path, deep: bool, json: bool) -> anyhow::Result<()> {
    let (manifest, checked) = backup::manifest::verify(dir, deep).map_err(refused)?;
    let damaged = checked.iter().filter(|c| c.problem.is_some()).count();
    if json {
        println!(
            "{}",
            serde_json::json!({
                "backup_id": manifest.id,
                "instance": manifest.instance,
                "deep": deep,
                "shards": checked,
                "damaged": damaged,
            })
        );
    } else {
        let mut table = Table::new(&["SHARD", "FILE", "CELLS", "STATE"]).right(&[0, 2]);
        for c in &checked {
            table.row([
                c.shard.to_string(),
                c.file.clone(),
                c.cells.to_string(),
                c.problem.clone().unwrap_or_else(|| "ok".into()),
            ]);
        }
        table.print("  ");
        println!(
            "backup {} of instance {:?}: {} files, {damaged} damaged ({})",
            manifest.id,
            manifest.instance,
            checked.len(),
            if deep {
                "checksums and records"
            } else {
                "checksums only"
            }
        );
    }
    if damaged > 0 {
        anyhow::bail!("{damaged} of {} backup files are damaged", checked.len());
    }
    Ok(())
}

pub async fn restore(args: RestoreArgs) -> anyhow::Result<()> {
    let until = match &args.until_added_id {
        Some(text) => {
            Until::parse(text).map_err(|e| UsageError(format!("--until-added-id: {e}")))?
        }
        None => Until::default(),
    };
    let config = crate::load_config(&args.to_config)?;
    let topology = Topology::from_config(&config)?;
    let options = RestoreOptions {
        until,
        parallel: args.parallel.into(),
    };
    let started = Instant::now();
    let ticker = Ticker::start(args.plain, "restored");
    let cells = ticker.cells.clone();
    let result = backup::restore(&args.from, &topology, &options, &|n| {
        cells.fetch_add(n, Ordering::Relaxed);
    })
    .await;
    ticker.finish().await;
    topology.close().await;
    let report = result.map_err(refused).with_context(|| {
        format!(
            "restoring {} into instance {:?}",
            args.from.display(),
            config.instance.name
        )
    })?;
    if args.json {
        println!("{}", serde_json::to_string(&report)?);
        return Ok(());
    }
    let mut table =
        Table::new(&["SHARD", "CELLS", "POSITION", "WHOLE", "CHECKED"]).right(&[0, 1, 2]);
    for s in &report.shards {
        table.row([
            s.shard.to_string(),
            s.cells.to_string(),
            s.position.to_string(),
            if s.whole { "yes" } else { "no" }.to_string(),
            "count and digest match".to_string(),
        ]);
    }
    table.print("  ");
    let cells: u64 = report.shards.iter().map(|s| s.cells).sum();
    println!(
        "restored backup {} of {:?} into {:?}{}: {} shards, {cells} cells in {:.1}s, each read back and matching",
        report.backup_id,
        report.from_instance,
        report.instance,
        if report.resumed { " (continuing an earlier run)" } else { "" },
        report.shards.len(),
        started.elapsed().as_secs_f64()
    );
    Ok(())
}
