//! `mezzanine bench proxy`: what the proxy costs an app. pgbench's
//! select-only script (prepared statements, several clients) straight to
//! PostgreSQL and through the proxy, in the same run on the same servers:
//! p50/p99 latency from pgbench's per-transaction log, and throughput.
//! Rounds alternate direct, proxy, proxy, direct, so warming caches and
//! noise favour neither. The proxy runs in this process on a free
//! loopback port, sharing the machine's cores with the servers and
//! pgbench, as it would beside an app.
//!
//! Then reads served from Schemaless (`served_p50_ratio`): trips seeded
//! in both stores, the store switched to `shadow` (read share 100%), and
//! one translated read (a trip by its row key, the layout's row columns
//! by name) run by the same clients as a prepared statement straight to
//! PostgreSQL and through the proxy, which answers it from Schemaless.
//! The clients run on a thread of their own; the answers of both paths
//! are compared first.
//!
//! Last, writes through the facade (`written_p50_ratio`): the store
//! switched to `primary`, and an UPDATE of a trip's version by its row
//! key run straight in PostgreSQL and through the proxy, which runs it
//! through the facade.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;
use std::time::Duration;

use clap::Args;
use serde_json::json;
use tokio_util::sync::CancellationToken;

use super::stats::Latencies;

mod batch;
mod served;

use served::served_rounds;

#[derive(Args, Clone)]
pub struct ProxyArgs {
    /// Print one JSON object with every figure as the last line.
    #[arg(long)]
    json: bool,
    /// pgbench clients, the same both ways.
    #[arg(long, default_value_t = 8)]
    clients: u32,
    /// Seconds per path (split over two rounds each).
    #[arg(long, default_value_t = 20)]
    seconds: u64,
    /// pgbench's scale factor (100,000 accounts each).
    #[arg(long, default_value_t = 10)]
    scale: u32,
    /// Trips seeded for the served reads.
    #[arg(long, default_value_t = 2000)]
    trips: u64,
    /// Rows in each pipelined batch of INSERTs.
    #[arg(long, default_value_t = 1000)]
    batch_rows: usize,
    /// Pipelined batches per path.
    #[arg(long, default_value_t = 6)]
    batches: usize,
    /// The database the benchmark creates for itself.
    #[arg(long, default_value = "mzbench_proxy")]
    instance: String,
}

/// One pgbench round: its transactions' latencies and its throughput.
struct Round {
    latencies: Vec<Duration>,
    tps: f64,
}

fn pgbench(
    binary: &Path,
    url: &str,
    args: &[String],
    log_prefix: Option<&Path>,
) -> anyhow::Result<String> {
    let mut command = Command::new(binary);
    command.args(args);
    if let Some(prefix) = log_prefix {
        command
            .arg("-l")
            .arg(format!("--log-prefix={}", prefix.display()));
    }
    let out = command.arg(url).output()?;
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    if !out.status.success() {
        anyhow::bail!("pgbench {args:?} failed: {text}");
    }
    Ok(text)
}

/// A select-only round of `seconds` against `url`.
fn round(
    binary: &Path,
    url: &str,
    clients: u32,
    seconds: u64,
    dir: &Path,
    name: &str,
) -> anyhow::Result<Round> {
    let prefix = dir.join(name);
    let args: Vec<String> = [
        "-S",
        "-M",
        "prepared",
        "-n",
        "-c",
        &clients.to_string(),
        "-j",
        "2",
        "-T",
        &seconds.to_string(),
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    let text = pgbench(binary, url, &args, Some(&prefix))?;
    let tps = text
        .lines()
        .find_map(|l| {
            l.strip_prefix("tps = ")?
                .split_whitespace()
                .next()?
                .parse::<f64>()
                .ok()
        })
        .ok_or_else(|| anyhow::anyhow!("no tps in pgbench's output: {text}"))?;
    // Each log line: client, transaction, latency in µs, script, epoch, µs.
    let mut latencies = Vec::new();
    for entry in std::fs::read_dir(dir)? {
        let path: PathBuf = entry?.path();
        let file_name = path
            .file_name()
            .and_then(|n| n.to_str())
            .unwrap_or_default();
        if !file_name.starts_with(&format!("{name}.")) {
            continue;
        }
        for line in std::fs::read_to_string(&path)?.lines() {
            if let Some(us) = line.split_whitespace().nth(2).and_then(|v| v.parse().ok()) {
                latencies.push(Duration::from_micros(us));
            }
        }
    }
    if latencies.is_empty() {
        anyhow::bail!("pgbench logged no transaction for {name}");
    }
    Ok(Round { latencies, tps })
}

pub async fn run(args: ProxyArgs, config_path: &Path, cluster_dir: &Path) -> anyhow::Result<()> {
    if args.clients == 0 || args.seconds < 2 || args.scale == 0 {
        return Err(crate::UsageError(
            "--clients and --scale must be positive, --seconds at least 2".into(),
        )
        .into());
    }
    if args.batch_rows == 0 || args.batches == 0 {
        return Err(crate::UsageError("--batch-rows and --batches must be positive".into()).into());
    }
    let mut config = super::own_instance(config_path, &args.instance, 4)?;
    config.mirror.relay_in_app = false;
    config.mirror.reverse_in_app = false;
    config.capture.required = false;
    config.proxy.max_clients = config.proxy.max_clients.max(args.clients as usize * 2);
    config.proxy.pool_size = config.proxy.pool_size.max(args.clients as usize * 2);
    let pool = super::fresh_data_set(&config, config_path, cluster_dir).await?;
    let direct_url = config
        .legacy
        .as_ref()
        .map(|l| l.url.clone())
        .unwrap_or_default();
    let binary = devcluster::Binaries::find()?.pgbench;
    eprintln!("loading pgbench's tables at scale {} ...", args.scale);
    pgbench(
        &binary,
        &direct_url,
        &["-i", "-q", "-s", &args.scale.to_string()].map(String::from),
        None,
    )?;
    let facade = Arc::new(tripstore::TripStore::connect(&config).await?);
    let proxy = proxy::Proxy::new(&config, facade.clone(), None).await?;
    let shutdown = CancellationToken::new();
    let served = proxy
        .serve(
            "127.0.0.1:0".parse()?,
            shutdown.clone(),
            Duration::from_secs(5),
        )
        .await?;
    let mut proxied = url::Url::parse(&direct_url)?;
    proxied.set_host(Some("127.0.0.1"))?;
    let _ = proxied.set_port(Some(served.addr.port()));
    // The raw limit of any proxy hop: bytes copied both ways on a
    // single-threaded runtime of its own, nothing read.
    let raw = raw_relay(proxy.backend()).await?;
    let mut relayed = proxied.clone();
    let _ = relayed.set_port(Some(raw.port()));
    let urls = [direct_url.clone(), proxied.to_string(), relayed.to_string()];
    // pgbench's per-transaction logs, removed at the end.
    let logs = std::env::temp_dir().join(format!("mezzanine-bench-proxy-{}", std::process::id()));
    std::fs::create_dir_all(&logs)?;
    let half = (args.seconds / 2).max(1);
    // Warm both paths (connections, plans, the buffer cache).
    for (path, url) in urls.iter().enumerate() {
        let warm = logs.join(format!("warm{path}"));
        std::fs::create_dir_all(&warm)?;
        let (binary, url, clients) = (binary.clone(), url.clone(), args.clients);
        // pgbench is waited for off the runtime: the proxy runs on it.
        tokio::task::spawn_blocking(move || round(&binary, &url, clients, 1, &warm, "w")).await??;
    }
    let mut latencies: [Vec<Duration>; 3] = Default::default();
    let mut tps = [0.0f64; 3];
    for (i, path) in [0usize, 1, 2, 2, 1, 0].into_iter().enumerate() {
        eprintln!(
            "select-only, round {}/6: {} ...",
            i + 1,
            ["direct", "proxy", "raw relay"][path]
        );
        let result = tokio::task::spawn_blocking({
            let (binary, url, dir) = (binary.clone(), urls[path].clone(), logs.clone());
            let clients = args.clients;
            move || round(&binary, &url, clients, half, &dir, &format!("r{i}"))
        })
        .await??;
        latencies[path].extend(result.latencies);
        tps[path] += result.tps / 2.0;
    }
    let _ = std::fs::remove_dir_all(&logs);
    let reads = served_rounds(&facade, &pool, &args, &direct_url, proxied.as_str()).await;
    // Pipelined batches, in `primary` where the served rounds left it.
    let batches = match &reads {
        Ok(_) => {
            let sql = batch::insert_like(facade.legacy(), &pool).await?;
            let meter = devcluster::DevCluster::open(cluster_dir)
                .ok()
                .map(|cluster| super::cpu::CpuMeter::new(&cluster));
            let (args, urls) = (args.clone(), [direct_url.clone(), proxied.to_string()]);
            tokio::task::spawn_blocking(move || {
                batch::batch_rounds(&args, [&urls[0], &urls[1]], &sql, meter.as_ref())
            })
            .await?
        }
        Err(_) => Err(anyhow::anyhow!("not measured: the served rounds failed")),
    };
    let status = proxy.status(served.addr);
    shutdown.cancel();
    served.done.await?;
    facade.close().await;
    pool.close().await;
    let ((direct_reads, served_reads), (direct_writes, facade_writes)) = reads?;
    let batches = batches?;
    anyhow::ensure!(
        status.served.get("schemaless").copied().unwrap_or(0) > 0,
        "the proxy served no read from Schemaless: {:?}",
        status.served
    );
    anyhow::ensure!(
        status.writes.get("written").copied().unwrap_or(0) > 0,
        "the proxy wrote nothing through the facade: {:?}",
        status.writes
    );
    let [direct, through, relay] = latencies.map(Latencies::new);
    let figures = json!({
        "clients": args.clients,
        "seconds": args.seconds,
        "scale": args.scale,
        "direct": {
            "p50_us": direct.percentile_us(50.0),
            "p99_us": direct.percentile_us(99.0),
            "tps": tps[0],
            "transactions": direct.len(),
        },
        "proxy": {
            "p50_us": through.percentile_us(50.0),
            "p99_us": through.percentile_us(99.0),
            "tps": tps[1],
            "transactions": through.len(),
        },
        "raw_relay": {
            "p50_us": relay.percentile_us(50.0),
            "p99_us": relay.percentile_us(99.0),
            "tps": tps[2],
            "transactions": relay.len(),
        },
        "raw_relay_p50_ratio": relay.percentile_us(50.0) / direct.percentile_us(50.0),
        "raw_relay_throughput_ratio": tps[2] / tps[0],
        "proxy_vs_raw_relay_throughput_ratio": tps[1] / tps[2],
        "passthrough_p50_ratio": through.percentile_us(50.0) / direct.percentile_us(50.0),
        "passthrough_p99_ratio": through.percentile_us(99.0) / direct.percentile_us(99.0),
        "passthrough_throughput_ratio": tps[1] / tps[0],
        "served": {
            "trips": args.trips,
            "direct_p50_us": direct_reads.latencies.percentile_us(50.0),
            "direct_p99_us": direct_reads.latencies.percentile_us(99.0),
            "direct_reads_per_sec": direct_reads.per_sec,
            "served_p50_us": served_reads.latencies.percentile_us(50.0),
            "served_p99_us": served_reads.latencies.percentile_us(99.0),
            "served_reads_per_sec": served_reads.per_sec,
            "served_by_schemaless": status.served.get("schemaless").copied().unwrap_or(0),
        },
        "served_p50_ratio": served_reads.latencies.percentile_us(50.0)
            / direct_reads.latencies.percentile_us(50.0),
        "served_p99_ratio": served_reads.latencies.percentile_us(99.0)
            / direct_reads.latencies.percentile_us(99.0),
        "served_throughput_ratio": served_reads.per_sec / direct_reads.per_sec,
        "written": {
            "direct_p50_us": direct_writes.latencies.percentile_us(50.0),
            "direct_p99_us": direct_writes.latencies.percentile_us(99.0),
            "direct_writes_per_sec": direct_writes.per_sec,
            "written_p50_us": facade_writes.latencies.percentile_us(50.0),
            "written_p99_us": facade_writes.latencies.percentile_us(99.0),
            "written_per_sec": facade_writes.per_sec,
            "written_through_facade": status.writes.get("written").copied().unwrap_or(0),
            "failed": status.writes.get("failed").copied().unwrap_or(0),
        },
        "written_p50_ratio": facade_writes.latencies.percentile_us(50.0)
            / direct_writes.latencies.percentile_us(50.0),
        "written_throughput_ratio": facade_writes.per_sec / direct_writes.per_sec,
        "batch": {
            "rows": batches.rows,
            "batches_per_path": batches.count,
            "direct_ms": batches.direct.as_secs_f64() * 1e3,
            "proxied_ms": batches.proxied.as_secs_f64() * 1e3,
            "direct_us_per_row": batches.direct_us_per_row(),
            "proxied_us_per_row": batches.proxied_us_per_row(),
            "proxied_cpu_us_per_row": batches.proxied_cpu,
        },
        "batch_per_row_ratio": batches.proxied_us_per_row() / batches.direct_us_per_row(),
    });
    println!(
        "select-only: direct p50 {:.0} us p99 {:.0} us {:.0} tps; proxy p50 {:.0} us p99 {:.0} us {:.0} tps",
        direct.percentile_us(50.0),
        direct.percentile_us(99.0),
        tps[0],
        through.percentile_us(50.0),
        through.percentile_us(99.0),
        tps[1],
    );
    println!(
        "passthrough: p50 ratio {:.3} (target <= 1.3), throughput ratio {:.3} (target >= 0.75)",
        figures["passthrough_p50_ratio"]
            .as_f64()
            .unwrap_or_default(),
        figures["passthrough_throughput_ratio"]
            .as_f64()
            .unwrap_or_default(),
    );
    println!(
        "a trip by its row key: direct p50 {:.0} us {:.0}/s; served from Schemaless through the proxy p50 {:.0} us {:.0}/s: p50 ratio {:.3}, throughput ratio {:.3}",
        direct_reads.latencies.percentile_us(50.0),
        direct_reads.per_sec,
        served_reads.latencies.percentile_us(50.0),
        served_reads.per_sec,
        figures["served_p50_ratio"].as_f64().unwrap_or_default(),
        figures["served_throughput_ratio"].as_f64().unwrap_or_default(),
    );
    println!(
        "a trip's version bumped by its row key: direct p50 {:.0} us {:.0}/s; through the proxy and the facade (primary) p50 {:.0} us {:.0}/s: p50 ratio {:.3}, throughput ratio {:.3}",
        direct_writes.latencies.percentile_us(50.0),
        direct_writes.per_sec,
        facade_writes.latencies.percentile_us(50.0),
        facade_writes.per_sec,
        figures["written_p50_ratio"].as_f64().unwrap_or_default(),
        figures["written_throughput_ratio"].as_f64().unwrap_or_default(),
    );
    println!(
        "a pipelined batch of {} INSERTs: direct {:.1} ms ({:.0} us per row); through the proxy and the facade (primary) {:.1} ms ({:.0} us per row): per-row ratio {:.1}",
        batches.rows,
        batches.direct.as_secs_f64() * 1e3,
        batches.direct_us_per_row(),
        batches.proxied.as_secs_f64() * 1e3,
        batches.proxied_us_per_row(),
        figures["batch_per_row_ratio"].as_f64().unwrap_or_default(),
    );
    if let Some(cpu) = &batches.proxied_cpu {
        println!("CPU µs per row of the proxied batches: {cpu}");
    }
    println!(
        "a raw TCP relay (bytes copied, nothing read) in the same run: p50 ratio {:.3}, throughput ratio {:.3}; the proxy makes {:.3} of the raw relay's throughput",
        figures["raw_relay_p50_ratio"].as_f64().unwrap_or_default(),
        figures["raw_relay_throughput_ratio"].as_f64().unwrap_or_default(),
        figures["proxy_vs_raw_relay_throughput_ratio"].as_f64().unwrap_or_default(),
    );
    if args.json {
        println!("{figures}");
    }
    Ok(())
}

/// A relay that copies bytes between each connection and `backend`, on
/// a single-threaded runtime of its own (as the proxy's sessions run):
/// what one more TCP hop costs on this machine, whatever the proxy does.
async fn raw_relay(backend: std::net::SocketAddr) -> anyhow::Result<std::net::SocketAddr> {
    let listener = std::net::TcpListener::bind("127.0.0.1:0")?;
    listener.set_nonblocking(true)?;
    let addr = listener.local_addr()?;
    std::thread::Builder::new()
        .name("raw-relay".into())
        .spawn(move || {
            let Ok(runtime) = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
            else {
                return;
            };
            runtime.block_on(async move {
                let Ok(listener) = tokio::net::TcpListener::from_std(listener) else {
                    return;
                };
                while let Ok((mut app, _)) = listener.accept().await {
                    tokio::spawn(async move {
                        let _ = app.set_nodelay(true);
                        if let Ok(mut pg) = tokio::net::TcpStream::connect(backend).await {
                            let _ = pg.set_nodelay(true);
                            let _ = tokio::io::copy_bidirectional(&mut app, &mut pg).await;
                        }
                    });
                }
            });
        })?;
    Ok(addr)
}
