//! `mezzanine mode show|set`: the facade's mode, kept in PostgreSQL.

use std::path::Path;

use clap::{Args, Subcommand};
use tripstore::mode::{self, Mode, ModeRequest};

#[derive(Subcommand)]
pub enum ModeCommand {
    /// Print the current mode, who set it, and the latest changes.
    Show,
    /// Move every facade to another mode. One step back is always allowed;
    /// a step forward must pass its gate; a jump is refused.
    Set(SetArgs),
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
}

/// `user@host` of whoever runs the command.
pub fn who() -> String {
    let user = std::env::var("USER").unwrap_or_else(|_| "unknown".into());
    let mut name = [0u8; 256];
    // SAFETY: the buffer is valid for its length; the result is
    // NUL-terminated when it fits, which the search below relies on.
    let ok = unsafe { libc::gethostname(name.as_mut_ptr().cast(), name.len()) } == 0;
    let host = if ok {
        let end = name.iter().position(|&b| b == 0).unwrap_or(name.len());
        String::from_utf8_lossy(&name[..end]).into_owned()
    } else {
        "unknown".into()
    };
    format!("{user}@{host}")
}

pub async fn run(command: ModeCommand, config_path: &Path) -> anyhow::Result<()> {
    let config = crate::load_config(config_path)?;
    let legacy =
        legacy::connection::legacy_config(&config).map_err(|e| crate::UsageError(e.to_string()))?;
    let pool = legacy::connection::pool(legacy)?;
    mode::ensure_control(&pool).await?;
    match command {
        ModeCommand::Show => {
            let state = mode::read(&pool).await?;
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
            // The mirror's tables exist once a facade or `mirror` command
            // has run; before that there is nothing to show.
            if let Ok((depth, oldest, parked)) = mirror::status::outbox(&pool).await {
                println!(
                    "outbox: {depth} entries{}, {parked} parked (`mezzanine mirror status` for more)",
                    oldest
                        .map(|s| format!(", the oldest {s:.1}s old"))
                        .unwrap_or_default()
                );
            }
            if let Ok(queue) = mirror::capture::status::queue(&pool).await {
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
            let history = mode::history(&pool, 10).await?;
            if !history.is_empty() {
                println!("\nlatest changes:");
                for h in history {
                    println!(
                        "  {}  {} -> {}  by {}{}{}",
                        h.at,
                        h.from,
                        h.to,
                        h.by,
                        h.overridden
                            .map(|o| format!("  FORCED over: {o}"))
                            .unwrap_or_default(),
                        h.reason.map(|r| format!("  ({r})")).unwrap_or_default()
                    );
                }
            }
        }
        ModeCommand::Set(args) => {
            let target: Mode = args
                .mode
                .parse()
                .map_err(|e: tripstore::Error| crate::UsageError(e.to_string()))?;
            let request = ModeRequest {
                target,
                force: args.force,
                by: who(),
                reason: args.reason,
            };
            let mut gate = tripstore::gates::MigrationGate::new(
                pool.clone(),
                schemaless::MySqlStore::connect(&config)?,
                &config,
            );
            // Coverage and capture's triggers are checked against the
            // layout.
            let capture_checked = config.capture.enabled && config.capture.required;
            if config.gates.min_coverage > 0.0 || capture_checked {
                gate = gate.with_legacy(legacy::LegacyStore::connect(&config).await?);
            }
            let change = mode::set(&pool, &request, &gate).await?;
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
        }
    }
    pool.close().await;
    Ok(())
}
