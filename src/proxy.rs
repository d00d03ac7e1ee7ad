//! `mezzanine proxy`: the PostgreSQL wire-protocol proxy apps connect to
//! instead of PostgreSQL (see the `proxy` crate and docs/proxy.md), and
//! `proxy status`, which asks a running one what it has done.

use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use axum::routing::get;
use clap::{Args, Subcommand};
use serde_json::Value;
use tokio_util::sync::CancellationToken;

#[derive(Args)]
#[command(args_conflicts_with_subcommands = true)]
pub struct ProxyArgs {
    #[command(subcommand)]
    command: Option<ProxyCommand>,
    /// Where apps connect, instead of `proxy.listen` (port 0 picks a free
    /// one; the proxy prints the address it bound).
    #[arg(long)]
    listen: Option<SocketAddr>,
    /// Where to serve `/status` (JSON) and `/metrics` (port 0 picks a
    /// free one, printed).
    #[arg(long, default_value = "127.0.0.1:9700")]
    status_listen: SocketAddr,
    /// After SIGTERM, how long open app connections may take to end
    /// before the proxy exits anyway.
    #[arg(long, default_value_t = 10_000)]
    drain_ms: u64,
}

#[derive(Subcommand)]
enum ProxyCommand {
    /// What a running proxy has done: clients, statements by class, mode
    /// and route, reads by the store that answered, writes run through
    /// the facade, sampling.
    Status {
        /// The proxy's status address (its `--status-listen`).
        #[arg(long, default_value = "127.0.0.1:9700")]
        from: SocketAddr,
        /// Print the status as JSON.
        #[arg(long)]
        json: bool,
    },
}

pub async fn run(args: ProxyArgs, config_path: &Path) -> anyhow::Result<()> {
    match args.command {
        Some(ProxyCommand::Status { from, json }) => status(from, json).await,
        None => serve(args, config_path).await,
    }
}

async fn serve(args: ProxyArgs, config_path: &Path) -> anyhow::Result<()> {
    let config = crate::load_config(config_path)?;
    let config = crate::Overrides::new(&config)
        .set("listen", "proxy.listen", args.listen, |c, v| {
            c.proxy.listen = v
        })
        .check()?;
    if config.legacy.is_none() {
        return Err(crate::UsageError(
            "no [legacy] section: the proxy forwards apps to legacy.url".into(),
        )
        .into());
    }
    let tls = match (&config.proxy.tls_cert, &config.proxy.tls_key) {
        (Some(cert), Some(key)) => Some(
            worker::stack::tls_acceptor(cert, key)
                .map_err(|e| crate::UsageError(format!("proxy.tls_cert: {e}")))?,
        ),
        _ => None,
    };
    let facade = Arc::new(tripstore::TripStore::connect(&config).await?);
    let proxy = Arc::new(
        proxy::Proxy::new(&config, facade.clone(), tls)
            .await
            .map_err(|e| crate::UsageError(e.to_string()))?,
    );
    let shutdown = CancellationToken::new();
    let served = proxy
        .serve(
            config.proxy.listen,
            shutdown.clone(),
            Duration::from_millis(args.drain_ms),
        )
        .await?;
    let listen = served.addr;
    let status_router = {
        let proxy = proxy.clone();
        axum::Router::new()
            .route(
                "/status",
                get(move || {
                    let proxy = proxy.clone();
                    async move { axum::Json(proxy.status(listen)) }
                }),
            )
            .merge(worker::metrics::router(None))
    };
    let status_served = worker::stack::serve(
        status_router,
        &worker::Listen::plain(args.status_listen),
        shutdown.clone(),
    )
    .await?;
    // Tests and scripts read this line for the addresses.
    println!(
        "proxy on {} forwarding to {} with sslmode={} (mode {}, status on http://{}/status)",
        listen,
        proxy.backend(),
        proxy.backend_sslmode(),
        facade.mode(),
        status_served.addr
    );
    crate::shutdown::stopped().await;
    eprintln!("taking no new connections; waiting for open ones to end");
    shutdown.cancel();
    served.done.await?;
    status_served.done.await?;
    facade.close().await;
    Ok(())
}

async fn status(from: SocketAddr, json: bool) -> anyhow::Result<()> {
    let url = format!("http://{from}/status");
    // Plain HTTP on loopback; reqwest still wants a TLS configuration.
    let tls = rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()?
    .with_root_certificates(rustls::RootCertStore::empty())
    .with_no_client_auth();
    let status: Value = reqwest::Client::builder()
        .use_preconfigured_tls(tls)
        .timeout(Duration::from_secs(10))
        .build()?
        .get(&url)
        .send()
        .await
        .and_then(reqwest::Response::error_for_status)
        .map_err(|e| anyhow::anyhow!("asking the proxy at {url}: {e}"))?
        .json()
        .await?;
    if json {
        println!("{}", serde_json::to_string_pretty(&status)?);
        return Ok(());
    }
    let field = |key: &str| status.get(key).cloned().unwrap_or(Value::Null);
    println!(
        "proxy on {} (mode {}): {} of {} clients, {} of {} PostgreSQL connections",
        field("listen").as_str().unwrap_or("?"),
        field("mode").as_str().unwrap_or("?"),
        field("clients"),
        field("max_clients"),
        field("backends"),
        field("pool_size"),
    );
    if let Some(connections) = field("connections").as_object() {
        let parts: Vec<String> = connections
            .iter()
            .map(|(k, v)| format!("{k} {v}"))
            .collect();
        println!("connections: {}", parts.join(", "));
    }
    let mut table = crate::table::Table::new(&["CLASS", "MODE", "ROUTE", "STATEMENTS"]).right(&[3]);
    for row in field("statements").as_array().into_iter().flatten() {
        let text = |k: &str| {
            row.get(k)
                .and_then(Value::as_str)
                .unwrap_or("?")
                .to_string()
        };
        table.row([
            text("class"),
            text("mode"),
            text("route"),
            row.get("count").map(Value::to_string).unwrap_or_default(),
        ]);
    }
    table.print("");
    let sampling = field("sampling");
    let count = |v: &Value, k: &str| v.get(k).and_then(Value::as_u64).unwrap_or(0);
    let served = field("served");
    println!(
        "translatable reads the mode serves from Schemaless (shadow, primary, schemaless): {} served from Schemaless, {} from PostgreSQL, {} refused",
        count(&served, "schemaless"),
        count(&served, "postgresql"),
        count(&served, "refused"),
    );
    let writes = field("writes");
    println!(
        "translatable writes run through the facade (primary, schemaless): {} written ({} cells), {} failed",
        count(&writes, "written"),
        status.get("write_cells").and_then(Value::as_u64).unwrap_or(0),
        count(&writes, "failed"),
    );
    let forwarded = field("forwarded_writes");
    println!(
        "translatable writes forwarded to PostgreSQL (the facade runs them from primary on; the primary gate leaves them out): {} in legacy, {} in mirror, {} in shadow",
        count(&forwarded, "legacy"),
        count(&forwarded, "mirror"),
        count(&forwarded, "shadow"),
    );
    let statements = sampling.get("statements").cloned().unwrap_or(Value::Null);
    let verifier = sampling.get("verifier").cloned().unwrap_or(Value::Null);
    println!(
        "sampled reads: {} drawn, {} offered to the verifier ({} cell reads), {} failed, {} with parameters not read",
        count(&statements, "drawn"),
        count(&statements, "offered"),
        count(&sampling, "cell_reads"),
        count(&statements, "failed"),
        count(&statements, "params_not_read"),
    );
    println!(
        "verifier: {} compared, {} equal, {} mismatches, {} transient, {} unsettled, {} replay errors, {} dropped",
        count(&verifier, "samples"),
        count(&verifier, "matches"),
        count(&verifier, "mismatches"),
        count(&verifier, "transient"),
        count(&verifier, "unsettled"),
        count(&verifier, "replay_errors"),
        count(&verifier, "dropped"),
    );
    Ok(())
}
