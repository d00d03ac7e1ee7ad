//! Prometheus metrics: the text exposition format, and a minimal HTTP
//! endpoint (`GET /metrics`) for the long-running commands.
//!
//! | metric | type | meaning |
//! |---|---|---|
//! | `mezzanine_mode{mode}` | gauge | 1 for the current mode |
//! | `mezzanine_outbox_depth` | gauge | entries waiting in the outbox |
//! | `mezzanine_outbox_oldest_age_seconds` | gauge | age of the oldest waiting entry (0 when empty) |
//! | `mezzanine_outbox_parked` | gauge | outbox entries set aside |
//! | `mezzanine_capture_queue_depth` | gauge | captured changes waiting for the relay |
//! | `mezzanine_capture_oldest_age_seconds` | gauge | age of the oldest (0 when empty) |
//! | `mezzanine_capture_parked{kind}` | gauge | captured changes set aside, by kind |
//! | `mezzanine_capture_slot_retained_bytes` | gauge | WAL the logical capture slot holds (0 without one) |
//! | `mezzanine_mirror_workers{kind}` | gauge | live relays / reverse mirrors (heartbeat within 10 s) |
//! | `mezzanine_mirror_rate_cells_per_second{kind}` | gauge | cells/s over all live workers of the kind |
//! | `mezzanine_reverse_lag_cells{shard}` | gauge | change-log cells not yet applied to PostgreSQL |
//! | `mezzanine_reverse_parked` | gauge | change-log cells the legacy model refused |
//! | `mezzanine_relay_cells_total` | counter | cells this process's relay delivered |
//! | `mezzanine_relay_failures_total` | counter | failed relay attempts in this process |
//! | `mezzanine_capture_changes_total` | counter | captured changes this process's relay took from the queue |
//! | `mezzanine_capture_tombstones_total` | counter | tombstones this process's relay wrote for deleted rows |
//! | `mezzanine_reverse_cells_total` | counter | cells this process's reverse mirror applied |
//! | `mezzanine_reverse_failures_total` | counter | failed reverse attempts in this process |

use std::fmt::Write as _;
use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;

use mirror::{MirrorStatus, WorkerStats};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio_util::sync::CancellationToken;

/// Every kind a captured change is parked as (see
/// [`mirror::capture::deliver`]), each exported even at 0.
pub const CAPTURE_PARKED_KINDS: [&str; 6] = [
    "no_new_version",
    "edited_in_place",
    "unreadable",
    "refused",
    "truncate",
    "conflict",
];

/// The counters of this process's workers.
#[derive(Default, Clone)]
pub struct Local {
    pub relay: Option<Arc<WorkerStats>>,
    pub reverse: Option<Arc<WorkerStats>>,
}

fn metric(out: &mut String, name: &str, kind: &str, help: &str) {
    let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} {kind}");
}

/// The exposition text.
pub fn render(status: &MirrorStatus, mode: Option<tripstore::Mode>, local: &Local) -> String {
    let mut out = String::new();
    if let Some(current) = mode {
        metric(
            &mut out,
            "mezzanine_mode",
            "gauge",
            "1 for the mode the facades route by",
        );
        for m in tripstore::Mode::ALL {
            let _ = writeln!(
                out,
                "mezzanine_mode{{mode=\"{m}\"}} {}",
                u8::from(m == current)
            );
        }
    }
    metric(
        &mut out,
        "mezzanine_outbox_depth",
        "gauge",
        "Entries waiting in the outbox",
    );
    let _ = writeln!(out, "mezzanine_outbox_depth {}", status.outbox_depth);
    metric(
        &mut out,
        "mezzanine_outbox_oldest_age_seconds",
        "gauge",
        "Age of the oldest outbox entry (0 when empty)",
    );
    let _ = writeln!(
        out,
        "mezzanine_outbox_oldest_age_seconds {:.3}",
        status.outbox_oldest_secs.unwrap_or(0.0)
    );
    metric(
        &mut out,
        "mezzanine_outbox_parked",
        "gauge",
        "Outbox entries set aside",
    );
    let _ = writeln!(out, "mezzanine_outbox_parked {}", status.outbox_parked);
    let capture = &status.capture;
    metric(
        &mut out,
        "mezzanine_capture_queue_depth",
        "gauge",
        "Captured changes waiting for the relay",
    );
    let _ = writeln!(out, "mezzanine_capture_queue_depth {}", capture.depth);
    metric(
        &mut out,
        "mezzanine_capture_oldest_age_seconds",
        "gauge",
        "Age of the oldest captured change waiting (0 when empty)",
    );
    let _ = writeln!(
        out,
        "mezzanine_capture_oldest_age_seconds {:.3}",
        capture.oldest_secs.unwrap_or(0.0)
    );
    metric(
        &mut out,
        "mezzanine_capture_slot_retained_bytes",
        "gauge",
        "WAL bytes the logical capture slot holds for the relay (0 without a slot)",
    );
    let _ = writeln!(
        out,
        "mezzanine_capture_slot_retained_bytes {}",
        capture.slot.as_ref().map_or(0, |s| s.retained_bytes)
    );
    metric(
        &mut out,
        "mezzanine_capture_parked",
        "gauge",
        "Captured changes set aside, by kind",
    );
    for kind in CAPTURE_PARKED_KINDS {
        let _ = writeln!(
            out,
            "mezzanine_capture_parked{{kind=\"{kind}\"}} {}",
            capture.parked_by_kind.get(kind).copied().unwrap_or(0)
        );
    }
    metric(
        &mut out,
        "mezzanine_mirror_workers",
        "gauge",
        "Live relays and reverse mirrors (heartbeat within 10 s)",
    );
    metric(
        &mut out,
        "mezzanine_mirror_rate_cells_per_second",
        "gauge",
        "Cells per second over all live workers of a kind",
    );
    for kind in ["relay", "reverse"] {
        let live: Vec<_> = status
            .workers
            .iter()
            .filter(|w| w.kind == kind && !w.stale())
            .collect();
        let rate: f64 = live.iter().map(|w| w.rate).sum();
        let _ = writeln!(
            out,
            "mezzanine_mirror_workers{{kind=\"{kind}\"}} {}",
            live.len()
        );
        let _ = writeln!(
            out,
            "mezzanine_mirror_rate_cells_per_second{{kind=\"{kind}\"}} {rate:.1}"
        );
    }
    metric(
        &mut out,
        "mezzanine_reverse_lag_cells",
        "gauge",
        "Change-log cells not yet applied to the legacy tables",
    );
    for shard in &status.reverse {
        let _ = writeln!(
            out,
            "mezzanine_reverse_lag_cells{{shard=\"{}\"}} {}",
            shard.shard, shard.lag
        );
    }
    metric(
        &mut out,
        "mezzanine_reverse_parked",
        "gauge",
        "Change-log cells the legacy model refused",
    );
    let _ = writeln!(out, "mezzanine_reverse_parked {}", status.reverse_parked);
    if let Some(stats) = &local.relay {
        for (name, help, value) in [
            (
                "mezzanine_capture_changes_total",
                "Captured changes this process's relay took from the queue",
                &stats.captured,
            ),
            (
                "mezzanine_capture_tombstones_total",
                "Tombstones this process's relay wrote for deleted legacy rows",
                &stats.tombstones,
            ),
        ] {
            metric(&mut out, name, "counter", help);
            let _ = writeln!(out, "{name} {}", WorkerStats::get(value));
        }
    }
    for (kind, stats) in [("relay", &local.relay), ("reverse", &local.reverse)] {
        let Some(stats) = stats else { continue };
        let cells = format!("mezzanine_{kind}_cells_total");
        metric(&mut out, &cells, "counter", "Cells this process moved");
        let _ = writeln!(out, "{cells} {}", WorkerStats::get(&stats.cells));
        let failures = format!("mezzanine_{kind}_failures_total");
        metric(
            &mut out,
            &failures,
            "counter",
            "Failed attempts in this process",
        );
        let _ = writeln!(out, "{failures} {}", WorkerStats::get(&stats.failures));
    }
    out
}

/// The backfill's metrics: the plan's state from PostgreSQL, and this
/// process's counters when it runs workers.
///
/// | metric | type | meaning |
/// |---|---|---|
/// | `mezzanine_backfill_chunks{state}` | gauge | chunks pending, running, done, failed |
/// | `mezzanine_backfill_cells_done` | gauge | cells of done chunks (whole plan) |
/// | `mezzanine_backfill_cells_per_second` | gauge | over chunks finished in the last minute (whole plan) |
/// | `mezzanine_backfill_rows_total` | counter | legacy rows this process read |
/// | `mezzanine_backfill_cells_total` | counter | cells this process wrote |
/// | `mezzanine_backfill_failures_total` | counter | attempts that failed on a server in this process |
/// | `mezzanine_backfill_lag_pauses_total` | counter | pauses for replication lag in this process |
pub fn render_backfill(
    status: &backfill::PlanStatus,
    local: Option<&backfill::Progress>,
) -> String {
    use backfill::Progress;
    let mut out = String::new();
    metric(
        &mut out,
        "mezzanine_backfill_chunks",
        "gauge",
        "Backfill chunks by state",
    );
    for (state, n) in [
        ("pending", status.pending),
        ("running", status.running),
        ("done", status.done),
        ("failed", status.failed),
    ] {
        let _ = writeln!(out, "mezzanine_backfill_chunks{{state=\"{state}\"}} {n}");
    }
    metric(
        &mut out,
        "mezzanine_backfill_cells_done",
        "gauge",
        "Cells of done chunks",
    );
    let _ = writeln!(out, "mezzanine_backfill_cells_done {}", status.cells_done);
    metric(
        &mut out,
        "mezzanine_backfill_cells_per_second",
        "gauge",
        "Cells per second over the chunks finished in the last minute",
    );
    let _ = writeln!(
        out,
        "mezzanine_backfill_cells_per_second {:.1}",
        status.recent_cells_per_sec
    );
    if let Some(p) = local {
        for (name, help, value) in [
            (
                "rows_total",
                "Legacy rows this process read",
                Progress::get(&p.rows),
            ),
            (
                "cells_total",
                "Cells this process wrote",
                Progress::get(&p.cells),
            ),
            (
                "failures_total",
                "Attempts that failed on a server",
                Progress::get(&p.failures),
            ),
            (
                "lag_pauses_total",
                "Pauses for replication lag",
                Progress::get(&p.lag_pauses),
            ),
        ] {
            let name = format!("mezzanine_backfill_{name}");
            metric(&mut out, &name, "counter", help);
            let _ = writeln!(out, "{name} {value}");
        }
    }
    out
}

/// Serves `GET /metrics` on `addr` until `cancel`, each scrape rendered
/// fresh by `scrape`.
pub async fn serve<F, Fut>(
    addr: SocketAddr,
    scrape: F,
    cancel: CancellationToken,
) -> anyhow::Result<()>
where
    F: Fn() -> Fut + Send + Sync + 'static,
    Fut: Future<Output = String> + Send,
{
    let scrape = Arc::new(scrape);
    serve_http(
        addr,
        move |path| {
            let scrape = scrape.clone();
            async move {
                if path == "/metrics" {
                    Response::ok(PROMETHEUS_TEXT, scrape().await)
                } else {
                    Response::not_found("GET /metrics\n")
                }
            }
        },
        cancel,
    )
    .await?;
    eprintln!("metrics on http://{addr}/metrics");
    Ok(())
}

/// The content type of the Prometheus text format.
pub const PROMETHEUS_TEXT: &str = "text/plain; version=0.0.4";

/// An HTTP response of [`serve_http`].
pub struct Response {
    /// Status line text, e.g. `200 OK`.
    pub status: &'static str,
    /// Content-Type.
    pub content_type: &'static str,
    /// The body.
    pub body: String,
}

impl Response {
    /// 200 with `body`.
    pub fn ok(content_type: &'static str, body: String) -> Response {
        Response {
            status: "200 OK",
            content_type,
            body,
        }
    }

    /// 404 with `body`.
    pub fn not_found(body: &str) -> Response {
        Response {
            status: "404 Not Found",
            content_type: "text/plain",
            body: body.to_string(),
        }
    }
}

/// A minimal HTTP/1.1 server for GET requests on `addr`, until `cancel`:
/// `handle` gets the path (without the query) and answers; every
/// connection is closed after its one response.
pub async fn serve_http<F, Fut>(
    addr: SocketAddr,
    handle: F,
    cancel: CancellationToken,
) -> anyhow::Result<SocketAddr>
where
    F: Fn(String) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Response> + Send,
{
    let listener = tokio::net::TcpListener::bind(addr)
        .await
        .map_err(|e| anyhow::anyhow!("serving on {addr}: {e}"))?;
    let bound = listener.local_addr()?;
    let handle = Arc::new(handle);
    tokio::spawn(async move {
        loop {
            let (mut socket, _) = tokio::select! {
                _ = cancel.cancelled() => return,
                accepted = listener.accept() => match accepted {
                    Ok(a) => a,
                    Err(e) => {
                        tracing::warn!("http endpoint: {e}");
                        continue;
                    }
                },
            };
            let handle = handle.clone();
            tokio::spawn(async move {
                let mut request = Vec::new();
                let mut buf = [0u8; 1024];
                while !request.windows(4).any(|w| w == b"\r\n\r\n") && request.len() < 16 * 1024 {
                    match socket.read(&mut buf).await {
                        Ok(0) | Err(_) => return,
                        Ok(n) => request.extend_from_slice(&buf[..n]),
                    }
                }
                let line = String::from_utf8_lossy(&request);
                let response = match line
                    .strip_prefix("GET ")
                    .and_then(|rest| rest.split(' ').next())
                {
                    Some(target) => {
                        let path = target.split('?').next().unwrap_or(target).to_string();
                        handle(path).await
                    }
                    None => Response {
                        status: "405 Method Not Allowed",
                        content_type: "text/plain",
                        body: "only GET\n".into(),
                    },
                };
                let head = format!(
                    "HTTP/1.1 {}\r\nContent-Type: {}\r\nContent-Length: {}\r\nCache-Control: no-store\r\nConnection: close\r\n\r\n",
                    response.status,
                    response.content_type,
                    response.body.len()
                );
                let _ = socket.write_all(head.as_bytes()).await;
                let _ = socket.write_all(response.body.as_bytes()).await;
            });
        }
    });
    Ok(bound)
}
