//! `mezzanine buffer reconcile|status`: the buffers of buffered writes.

use std::path::Path;
use std::time::{Duration, Instant};

use clap::{Args, Subcommand};
use schemaless::mysql::buffer;
use schemaless::MySqlStore;

#[derive(Subcommand)]
pub enum BufferCommand {
    /// Run the buffer reconciler: write buffered cells their master never
    /// got, and delete the buffered copies of cells every answering minion
    /// of their cluster holds. Safe to kill at any point and to run in
    /// several processes.
    Reconcile(ReconcileArgs),
    /// How many cells each master's buffer holds, the oldest's age, and
    /// the buffered writes found lost to another body at their address.
    /// Exits 1 when a buffer cannot be read or a lost write is not yet
    /// taken by the verifier.
    Status,
}

#[derive(Args)]
pub struct ReconcileArgs {
    /// Stop once every buffer is empty (or after --timeout-secs) instead
    /// of running until interrupted.
    #[arg(long)]
    until_empty: bool,
    /// With --until-empty: give up (exit 1) after this long.
    #[arg(long, default_value_t = 600)]
    timeout_secs: u64,
    /// Pause between passes, in milliseconds.
    #[arg(long, default_value_t = 500)]
    every_ms: u64,
}

pub async fn run(command: BufferCommand, config_path: &Path) -> anyhow::Result<()> {
    let mut config = crate::load_config(config_path)?;
    // This process is the reconciler; its store must not run a second one.
    config.storage.reconcile_in_app = false;
    let store = MySqlStore::connect(&config)?;
    // Masters promoted since the config was written.
    for problem in schemaless::mysql::failover::refresh(store.topology()).await {
        tracing::debug!("reading promotions: {problem}");
    }
    match command {
        BufferCommand::Status => {
            let mut table =
                crate::table::Table::new(&["MASTER", "BUFFERED", "OLDEST", "ERROR"]).right(&[1, 2]);
            let mut unread = 0;
            for (node, backlog) in buffer::backlog(&store).await {
                match backlog {
                    Ok((count, oldest)) => table.row([
                        node.to_string(),
                        count.to_string(),
                        oldest.map_or("-".into(), |us| format!("{:.1}s", us as f64 / 1e6)),
                        String::new(),
                    ]),
                    Err(e) => {
                        unread += 1;
                        table.row([node.to_string(), "?".into(), "?".into(), e.to_string()]);
                    }
                }
            }
            table.print("");
            let (lost, failed) = schemaless::mysql::lost::read(&store, false).await;
            let untaken: Vec<_> = lost.iter().filter(|l| l.taken_at.is_none()).collect();
            println!(
                "\nlost buffered writes (acknowledged, then found beaten by another body): {} recorded, {} not yet taken by the verifier",
                lost.len(),
                untaken.len()
            );
            for l in untaken.iter().take(20) {
                println!(
                    "  {}  buffered {}  lost body {}  stored body {}",
                    l.key,
                    crate::clock::micros(l.buffered_at),
                    l.buffered_body,
                    l.stored_body.as_deref().unwrap_or("(not read)")
                );
            }
            if untaken.len() > 20 {
                println!("  … and {} more", untaken.len() - 20);
            }
            for (node, e) in &failed {
                println!("  {node}: lost writes not read: {e}");
            }
            // A buffer that could not be read may hold cells: a runbook
            // that checks the exit code must not read "empty" from it.
            if unread > 0 || !failed.is_empty() {
                anyhow::bail!(
                    "{} masters' buffers could not be read",
                    unread + failed.len()
                );
            }
            if !untaken.is_empty() {
                anyhow::bail!(
                    "{} lost buffered writes wait for the verifier: `mezzanine verify report` takes them as mismatches, `verify repair` settles them",
                    untaken.len()
                );
            }
            Ok(())
        }
        BufferCommand::Reconcile(args) => reconcile(&store, args).await,
    }
}

async fn reconcile(store: &MySqlStore, args: ReconcileArgs) -> anyhow::Result<()> {
    let started = Instant::now();
    let every = Duration::from_millis(args.every_ms.max(10));
    let mut total = buffer::Pass::default();
    let mut last_report = Instant::now();
    loop {
        let pass = buffer::reconcile_once(store).await?;
        total.replayed += pass.replayed;
        total.drained += pass.drained;
        total.conflicts += pass.conflicts;
        if last_report.elapsed() >= Duration::from_secs(5) || args.until_empty {
            if pass != buffer::Pass::default() {
                eprintln!(
                    "pass: {} replayed, {} drained, {} conflicts, {} pending, {} tables skipped",
                    pass.replayed, pass.drained, pass.conflicts, pass.pending, pass.skipped_tables
                );
            }
            last_report = Instant::now();
        }
        if args.until_empty && pass.pending == 0 && pass.skipped_tables == 0 {
            let empty = buffer::backlog(store)
                .await
                .into_iter()
                .all(|(_, b)| matches!(b, Ok((0, _))));
            if empty {
                println!(
                    "buffers empty after {:.1}s: {} replayed, {} drained, {} conflicts",
                    started.elapsed().as_secs_f64(),
                    total.replayed,
                    total.drained,
                    total.conflicts
                );
                return Ok(());
            }
        }
        if args.until_empty && started.elapsed() >= Duration::from_secs(args.timeout_secs) {
            anyhow::bail!(
                "buffers not empty after {}s (last pass: {} pending, {} tables skipped)",
                args.timeout_secs,
                pass.pending,
                pass.skipped_tables
            );
        }
        tokio::time::sleep(every).await;
    }
}
