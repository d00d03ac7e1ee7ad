//! `mezzanine guard`: steps the cutover back when Schemaless misbehaves
//! (see [`cutover::guard`]), serving its figures on `/metrics`.

use std::net::SocketAddr;
use std::path::Path;

use clap::Args;
use tokio_util::sync::CancellationToken;

#[derive(Args)]
pub struct GuardArgs {
    /// Where to serve `/metrics` (port 0 picks a free one, printed).
    #[arg(long, default_value = "127.0.0.1:9600")]
    listen: SocketAddr,
    /// Look once, print what the guard sees and which thresholds are
    /// breached, and exit (0: none, 1: some), acting on nothing.
    #[arg(long)]
    check: bool,
}

pub async fn run(args: GuardArgs, config_path: &Path) -> anyhow::Result<()> {
    let config = crate::load_config(config_path)?;
    let legacy =
        legacy::connection::legacy_config(&config).map_err(|e| crate::UsageError(e.to_string()))?;
    let pool = legacy::connection::pool(legacy)?;
    let schemaless = schemaless::MySqlStore::connect(&config)?;
    let guard = cutover::Guard::new(pool.clone(), schemaless.clone(), &config);
    guard.ensure().await?;
    let settings = &config.guard;
    let result = if args.check {
        let observation = guard.observe().await?;
        println!("{}", serde_json::to_string_pretty(&observation)?);
        if observation.breaches.is_empty() {
            Ok(())
        } else {
            Err(anyhow::anyhow!(
                "{} thresholds breached: {}",
                observation.breaches.len(),
                observation
                    .breaches
                    .iter()
                    .map(|b| b.cause)
                    .collect::<Vec<_>>()
                    .join(", ")
            ))
        }
    } else {
        let cancel = CancellationToken::new();
        let served = worker::stack::serve(
            worker::metrics::router(None),
            &worker::Listen::plain(args.listen),
            cancel.clone(),
        )
        .await?;
        // Tests and scripts read this line for the port.
        println!(
            "{} watching over {} ms windows, stepping back after {} ms of breach (metrics on http://{}/metrics)",
            guard.name(),
            settings.window_ms,
            settings.for_ms,
            served.addr
        );
        let watching = {
            let cancel = cancel.clone();
            async move { guard.run(cancel).await }
        };
        let stop = cancel.clone();
        let (actions, ()) = tokio::join!(watching, async move {
            crate::shutdown::stopped().await;
            stop.cancel();
        });
        served.done.await?;
        let actions = actions?;
        println!(
            "the guard stopped after {} actions{}",
            actions.len(),
            if actions.is_empty() {
                String::new()
            } else {
                format!(
                    ": {}",
                    actions
                        .iter()
                        .map(|a| a.to_string())
                        .collect::<Vec<_>>()
                        .join("; ")
                )
            }
        );
        Ok(())
    };
    schemaless.close().await;
    pool.close().await;
    result
}
