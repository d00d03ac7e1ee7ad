//! `mezzanine worker`: the facade served over HTTP until SIGTERM or
//! Ctrl-C, then drained. See the `worker` crate for the endpoints, and
//! docs/worker.md for the runbook.

use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;

use clap::Args;
use tokio_util::sync::CancellationToken;

use crate::metrics;

#[derive(Args)]
pub struct WorkerArgs {
    /// Where to listen, instead of `worker.listen` (port 0 picks a free
    /// one; the worker prints the address it bound).
    #[arg(long)]
    listen: Option<SocketAddr>,
    /// Serve without tokens: anyone who can connect may read and write.
    /// Only when no `[[worker.tokens]]` are configured, and only on a
    /// loopback address.
    #[arg(long)]
    insecure_no_auth: bool,
}

pub async fn run(args: WorkerArgs, config_path: &Path) -> anyhow::Result<()> {
    let config = crate::load_config(config_path)?;
    let config = crate::Overrides::new(&config)
        .set("listen", "worker.listen", args.listen, |c, v| {
            c.worker.listen = v
        })
        .check()?;
    worker::check(&config, args.insecure_no_auth).map_err(|e| crate::UsageError(e.to_string()))?;
    if args.insecure_no_auth && !config.worker.tokens.is_empty() {
        return Err(crate::UsageError(
            "--insecure-no-auth with [[worker.tokens]] configured: remove one or the other".into(),
        )
        .into());
    }
    let store = Arc::new(tripstore::TripStore::connect(&config).await?);
    let refresh = {
        let store = store.clone();
        worker::metrics::refresh(move || {
            let store = store.clone();
            async move {
                let local = metrics::Local {
                    relay: Some(store.relay_stats()),
                    reverse: Some(store.reverse_stats()),
                };
                match store.mirror_status().await {
                    Ok(status) => metrics::record_mirror(&status, Some(store.mode()), &local),
                    Err(e) => tracing::warn!("reading the mirror's status for /metrics: {e}"),
                }
            }
        })
    };
    let shutdown = CancellationToken::new();
    let served = worker::start(
        store.clone(),
        &config,
        args.insecure_no_auth,
        Some(refresh),
        shutdown.clone(),
    )
    .await?;
    // Tests and scripts read this line for the address.
    println!(
        "worker on {} (mode {}, {})",
        served.url(),
        store.mode(),
        if args.insecure_no_auth {
            "no auth".to_string()
        } else {
            format!("{} tokens", config.worker.tokens.len())
        }
    );
    crate::shutdown::stopped().await;
    eprintln!("draining in-flight requests");
    shutdown.cancel();
    served.done.await?;
    store.close().await;
    Ok(())
}
