//! `mezzanine capture install|uninstall|status|retry`: database-side
//! capture of the writes that bypass the facade.
//!
//! `install` puts triggers on every table of the layout (see
//! [`mirror::capture::install`]); the relays deliver what they record.
//! `status` shows the tables covered, the queue and what is parked;
//! `retry` puts parked changes back into the queue after the cause was
//! fixed.

use std::path::Path;
use std::time::Duration;

use clap::{Args, Subcommand};
use mirror::capture::{self, CaptureStatus};

#[derive(Subcommand)]
pub enum CaptureCommand {
    /// Make PostgreSQL record every change to every table of the layout
    /// (triggers, in the writer's transaction). Online and idempotent; run
    /// it again after changing the layout or `capture.bump_version`.
    Install,
    /// Remove capture: the triggers from every table (the queue stays and
    /// is still delivered), or the logical slot (what it holds is
    /// delivered first) and publication. Online and idempotent.
    Uninstall,
    /// The tables covered, the queue's depth and age, parked changes.
    Status(StatusArgs),
    /// Put parked changes back into the queue (after fixing the cause),
    /// to be read and delivered again.
    Retry,
}

#[derive(Args)]
pub struct StatusArgs {
    /// One JSON object instead of text.
    #[arg(long)]
    json: bool,
}

pub async fn run(command: CaptureCommand, config_path: &Path) -> anyhow::Result<()> {
    let config = crate::load_config(config_path)?;
    let legacy_config =
        legacy::connection::legacy_config(&config).map_err(|e| crate::UsageError(e.to_string()))?;
    match command {
        CaptureCommand::Install => {
            if !config.capture.enabled {
                return Err(crate::UsageError(
                    "capture.enabled is false: no relay would deliver what the triggers record; turn it on first".into(),
                )
                .into());
            }
            let legacy = legacy::LegacyStore::connect(&config).await?;
            let installed =
                capture::install::install(legacy.pool(), legacy.layout(), &config.capture).await?;
            match installed.method {
                "logical" => println!(
                    "capture installed on {} by logical decoding (publication {}, a pgoutput slot{})",
                    installed.tables.join(", "),
                    mirror::capture::logical::PUBLICATION,
                    if installed.bump_version {
                        ", and the version bump trigger on the parent table"
                    } else {
                        ""
                    }
                ),
                _ => println!(
                    "capture installed on {} ({} triggers{})",
                    installed.tables.join(", "),
                    installed.triggers,
                    if installed.bump_version {
                        ", with the version bump on the parent table"
                    } else {
                        ""
                    }
                ),
            }
            println!(
                "every change to these tables is now recorded ({}) and delivered by the relays; deletions become tombstones in column {}",
                match installed.method {
                    "logical" => "in the slot; `capture status` shows the WAL it holds",
                    _ => "in mezzanine.capture_queue, in the writer's transaction",
                },
                config.capture.tombstone_column
            );
            legacy.close().await;
        }
        CaptureCommand::Uninstall => {
            let pool = legacy::connection::pool(legacy_config)?;
            // A slot's changes go with it: deliver them first.
            if capture::slot::slot(&pool).await?.is_some() {
                let mut logical = config.clone();
                logical.capture.method = config::CaptureMethod::Logical;
                let legacy = legacy::LegacyStore::connect(&logical).await?;
                let schemaless = schemaless::MySqlStore::connect(&logical)?;
                let relay =
                    mirror::Relay::new(&legacy, std::sync::Arc::new(schemaless.clone()), &logical)?;
                let moved = relay.drain().await?;
                println!(
                    "delivered what the capture slot held: {} cells ({} tombstones), {} parked",
                    moved.captured.cells, moved.captured.tombstones, moved.captured.parked
                );
                schemaless.close().await;
                legacy.close().await;
            }
            let removed = capture::install::uninstall(
                &pool,
                Duration::from_millis(config.capture.lock_timeout_ms),
            )
            .await?;
            if removed.logical {
                println!("logical capture removed: its slot, publication and replica identities");
            }
            if removed.triggers == 0 && removed.functions == 0 && !removed.logical {
                println!("capture was not installed: nothing to remove");
            } else if removed.triggers > 0 || removed.functions > 0 {
                println!(
                    "capture removed from {} ({} triggers, {} functions); changes already captured are still delivered",
                    if removed.tables.is_empty() {
                        "no table".to_string()
                    } else {
                        removed.tables.join(", ")
                    },
                    removed.triggers,
                    removed.functions
                );
            }
            pool.close().await;
        }
        CaptureCommand::Status(args) => {
            let pool = legacy::connection::pool(legacy_config)?;
            mirror::schema::ensure(&pool).await?;
            // The layout says which tables capture should cover; without
            // it (a layout that no longer resolves) the queue still shows.
            let legacy = match legacy::LegacyStore::connect(&config).await {
                Ok(l) => Some(l),
                Err(e) => {
                    eprintln!("warning: the layout does not resolve ({e}); tables not checked");
                    None
                }
            };
            let status =
                capture::status::read(&pool, legacy.as_ref().map(|l| l.layout()), &config.capture)
                    .await?;
            if args.json {
                println!("{}", serde_json::to_string(&status)?);
            } else {
                print_status(&status, &config.capture);
            }
            pool.close().await;
        }
        CaptureCommand::Retry => {
            let pool = legacy::connection::pool(legacy_config)?;
            mirror::schema::ensure(&pool).await?;
            let requeued = capture::status::retry_parked(&pool).await?;
            println!(
                "{requeued} parked changes put back into the capture queue; the relays read and deliver them again"
            );
            pool.close().await;
        }
    }
    Ok(())
}

fn print_status(status: &CaptureStatus, settings: &config::Capture) {
    println!(
        "capture: {} by {}, {} by the gates, bump_version {}, tombstones in column {}",
        if status.enabled {
            "enabled"
        } else {
            "disabled (relays leave the queue alone)"
        },
        settings.method.as_str(),
        if status.required {
            "required"
        } else {
            "not required"
        },
        if status.bump_version { "on" } else { "off" },
        settings.tombstone_column
    );
    if !status.tables.is_empty() {
        let mut table = crate::table::Table::new(&["TABLE", "STATE", "PROBLEMS"]);
        for t in &status.tables {
            table.row([
                t.table.to_string(),
                t.state.to_string(),
                t.problems.join("; "),
            ]);
        }
        table.print("");
    }
    let q = &status.queue;
    if let Some(slot) = &q.slot {
        println!(
            "slot {}: {} bytes of WAL held for the relay{}{}",
            slot.name,
            slot.retained_bytes,
            if slot.active { ", being read" } else { "" },
            match slot.wal_status.as_deref() {
                Some("lost") => ", LOST: changes were removed before a relay read them (reinstall, then backfill again)",
                _ => "",
            }
        );
    }
    match q.oldest_secs {
        Some(age) => println!(
            "queue: {} changes waiting{}, the oldest {age:.1}s old",
            q.depth,
            if q.slot.is_some() {
                " (and the slot's)"
            } else {
                ""
            }
        ),
        None => println!("queue: empty"),
    }
    if q.parked == 0 {
        println!("parked: none");
        return;
    }
    let kinds: Vec<String> = q
        .parked_by_kind
        .iter()
        .map(|(k, n)| format!("{k}: {n}"))
        .collect();
    println!(
        "parked: {} ({}); fix the cause, then `mezzanine capture retry`",
        q.parked,
        kinds.join(", ")
    );
    for p in &status.recent_parked {
        println!(
            "  #{} {} {}: {}",
            p.id,
            p.kind,
            crate::clock::utc(p.parked_at),
            p.reason
        );
        if let Some(body) = &p.legacy_body {
            println!("      legacy:     {body}");
        }
        if let Some(body) = &p.schemaless_body {
            println!("      schemaless: {body}");
        }
    }
}
