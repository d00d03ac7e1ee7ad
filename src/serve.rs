//! `mezzanine serve`: the verification dashboard and `/metrics`.
//!
//! | path | what |
//! |---|---|
//! | `/` | the dashboard (one HTML page; it fetches `/api/status` every few seconds) |
//! | `/api/status` | the figures as JSON: mode, outbox, backfill, the verifier's report, the latest mismatches, the last full diff, the inventory of the app's SQL, the proxies' statuses (`mezzanine.proxies`, see [`proxy::heartbeat`]) |
//! | `/metrics` | Prometheus text, rendered by `metrics-exporter-prometheus` from the gauges below, set from PostgreSQL at each scrape |
//!
//! Metrics (besides those of the verifier's facades, see
//! [`verifier::sample`]):
//!
//! | metric | type | meaning |
//! |---|---|---|
//! | `mezzanine_mode{mode}` | gauge | 1 for the current mode |
//! | `mezzanine_outbox_depth` | gauge | outbox entries waiting |
//! | `mezzanine_outbox_oldest_age_seconds` | gauge | age of the oldest |
//! | `mezzanine_outbox_parked` | gauge | entries set aside |
//! | `mezzanine_capture_queue_depth` | gauge | captured changes waiting |
//! | `mezzanine_capture_oldest_age_seconds` | gauge | age of the oldest |
//! | `mezzanine_capture_parked{kind}` | gauge | captured changes set aside, by kind |
//! | `mezzanine_capture_slot_retained_bytes` | gauge | WAL the logical capture slot holds |
//! | `mezzanine_capture_tables{state}` | gauge | layout tables by capture state (installed, missing, partial, stale) |
//! | `mezzanine_backfill_chunks{state}` | gauge | chunks by state |
//! | `mezzanine_backfill_parents_done` | gauge | parent rows copied |
//! | `mezzanine_backfill_cells_done` | gauge | cells copied |
//! | `mezzanine_verify_samples{column}` | gauge | samples in the gates' window |
//! | `mezzanine_verify_matches{column}` | gauge | of those, matches |
//! | `mezzanine_verify_mismatches{column}` | gauge | of those, mismatches |
//! | `mezzanine_verify_dropped` | gauge | samples dropped on full queues in the window |
//! | `mezzanine_verify_replay_seconds_mean` | gauge | mean time of a replay on the other store in the window |
//! | `mezzanine_verify_mismatch_upper_bound` | gauge | 95% upper bound of the mismatch rate |
//! | `mezzanine_verify_open_mismatches` | gauge | mismatches not resolved |
//! | `mezzanine_proxies{state}` | gauge | proxies by heartbeat: `live` (within 10 s), `silent` (killed, or cut off from PostgreSQL, within the hour) |

use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use axum::http::StatusCode;
use axum::response::{Html, IntoResponse};
use axum::routing::get;
use axum::{Json, Router};
use clap::Args;
use serde_json::{json, Value};
use sqlx::PgPool;
use tokio::sync::Mutex;
use tokio_util::sync::CancellationToken;

const PAGE: &str = include_str!("dashboard.html");

#[derive(Args)]
pub struct ServeArgs {
    /// Where to listen (loopback by default; port 0 picks a free one).
    #[arg(long, default_value = "127.0.0.1:9400")]
    listen: SocketAddr,
    /// How often the page refreshes itself, in milliseconds.
    #[arg(long, default_value_t = 2000)]
    refresh_ms: u64,
}

/// What the handlers share.
struct Dashboard {
    pool: PgPool,
    legacy: legacy::LegacyStore,
    /// `[capture]`, for the tables it should cover.
    capture: config::Capture,
    refresh_ms: u64,
    /// Coverage is a scan of the parent table: computed at most every
    /// 30 s.
    coverage: Mutex<(Option<std::time::Instant>, Vec<CoverageFigure>)>,
    /// The layout as the SQL reader sees it, for the inventory.
    model: Option<query::Model>,
    /// The inventory of the app's SQL, and the (instant, calls touching
    /// the layout) readings its calls per minute come from.
    inventory: Mutex<Inventory>,
}

/// The statements panel: read from pg_stat_statements at most every 10 s.
#[derive(Default)]
struct Inventory {
    at: Option<std::time::Instant>,
    value: InventoryFigures,
    readings: std::collections::VecDeque<(std::time::Instant, u64)>,
}

pub async fn run(args: ServeArgs, config_path: &Path) -> anyhow::Result<()> {
    let config = crate::load_config(config_path)?;
    let legacy = legacy::LegacyStore::connect(&config).await?;
    let pool = legacy.pool().clone();
    tripstore::mode::ensure_control(&pool).await?;
    mirror::schema::ensure(&pool).await?;
    backfill::plan::ensure_tables(&pool).await?;
    verifier::store::ensure(&pool).await?;
    // The inventory reads an INSERT that lists no columns by the tables'
    // column order, when the catalog gives it.
    let model = match query::Model::from_config(&config) {
        Some(m) => Some(match query::run::column_orders(&pool, &m).await {
            Ok(orders) => m.with_column_orders(orders),
            Err(_) => m,
        }),
        None => None,
    };
    let dashboard = Arc::new(Dashboard {
        pool,
        legacy,
        capture: config.capture.clone(),
        refresh_ms: args.refresh_ms.max(200),
        coverage: Mutex::new((None, Vec::new())),
        model,
        inventory: Mutex::new(Inventory::default()),
    });
    let cancel = CancellationToken::new();
    let served = worker::stack::serve(
        router(dashboard),
        &worker::Listen::plain(args.listen),
        cancel.clone(),
    )
    .await?;
    let bound = served.addr;
    // Tests and scripts read this line for the port.
    println!("dashboard on http://{bound}/ (metrics on http://{bound}/metrics)");
    crate::shutdown::stopped().await;
    cancel.cancel();
    served.done.await?;
    Ok(())
}

/// The dashboard's routes: the page, its JSON, and `/metrics` with the
/// gauges set from the same status first.
fn router(dashboard: Arc<Dashboard>) -> Router {
    let page = PAGE.replace("__REFRESH_MS__", &dashboard.refresh_ms.to_string());
    let metrics = {
        let dashboard = dashboard.clone();
        worker::metrics::refresh(move || {
            let dashboard = dashboard.clone();
            async move {
                match dashboard.status().await {
                    Ok(v) => set_gauges(&v),
                    Err(e) => tracing::warn!("reading the status for /metrics: {e:#}"),
                }
            }
        })
    };
    Router::new()
        .route(
            "/",
            get(move || {
                let page = page.clone();
                async move { Html(page) }
            }),
        )
        .route(
            "/api/status",
            get(move || {
                let dashboard = dashboard.clone();
                async move {
                    match dashboard.status().await {
                        Ok(status) => (StatusCode::OK, Json(status)).into_response(),
                        Err(e) => (
                            StatusCode::SERVICE_UNAVAILABLE,
                            Json(json!({ "error": format!("{e:#}") })),
                        )
                            .into_response(),
                    }
                }
            }),
        )
        .merge(worker::metrics::router(Some(metrics)))
        .fallback(|| async {
            (
                StatusCode::NOT_FOUND,
                "GET / (dashboard), /api/status, /metrics\n",
            )
        })
        .layer(axum::middleware::from_fn(worker::guard::record))
}

impl Dashboard {
    /// Every figure of the page.
    async fn status(&self) -> anyhow::Result<Status> {
        let pool = &self.pool;
        let mode = tripstore::mode::read(pool).await?;
        let (depth, oldest, parked) = mirror::status::outbox(pool).await?;
        let backfill = backfill::status::read(pool).await?;
        let since = tripstore::gates::verification_window(pool).await?;
        let report = verifier::report::read(pool, None, since).await?;
        let mismatches = verifier::store::mismatches(pool, false, None, 20).await?;
        let full = verifier::full::latest(pool).await?;
        let capture =
            mirror::capture::status::read(pool, Some(self.legacy.layout()), &self.capture).await?;
        let coverage = {
            let mut cached = self.coverage.lock().await;
            let stale = cached
                .0
                .is_none_or(|at| at.elapsed() >= Duration::from_secs(30));
            if stale {
                let coverage = verifier::report::coverage(pool, &self.legacy).await?;
                *cached = (
                    Some(std::time::Instant::now()),
                    coverage
                        .iter()
                        .map(|c| CoverageFigure {
                            column: c.column.clone(),
                            verified: c.verified,
                            rows: c.rows,
                            share: c.share(),
                        })
                        .collect(),
                );
            }
            cached.1.clone()
        };
        let inventory = self.inventory().await;
        let proxies = proxy::heartbeat::read(pool).await?;
        Ok(Status {
            generated_at: verifier_now(),
            mode: ModeFigures {
                mode: mode.mode,
                since: mode.changed_at,
                by: mode.changed_by,
                forced: mode.forced,
            },
            outbox: Outbox {
                depth,
                oldest_secs: oldest.unwrap_or(0.0),
                parked,
            },
            backfill: BackfillFigures {
                planned: backfill.plan.is_some(),
                chunks: backfill.total(),
                done: backfill.done,
                failed: backfill.failed,
                running: backfill.running,
                parents_done: backfill.parents_done,
                cells_done: backfill.cells_done,
                cells_per_sec: backfill.recent_cells_per_sec,
                complete: backfill.complete(),
            },
            verify: report,
            coverage,
            mismatches,
            full_diff: full,
            capture,
            inventory,
            proxies,
        })
    }

    /// The app's statements on the layout tables, from pg_stat_statements:
    /// how many, calls per minute (between readings at least a minute
    /// apart when there are), the translatable share of calls, and the
    /// untranslated statements most called, with their reasons.
    async fn inventory(&self) -> InventoryFigures {
        let Some(model) = &self.model else {
            return InventoryFigures::unavailable("the config has no [layout]".into());
        };
        let mut inventory = self.inventory.lock().await;
        if inventory
            .at
            .is_some_and(|at| at.elapsed() < Duration::from_secs(10))
        {
            return inventory.value.clone();
        }
        let now = std::time::Instant::now();
        let value = match legacy::statements::read(&self.pool, 1).await {
            Err(e) => InventoryFigures::unavailable(e.to_string()),
            Ok(statements) => {
                let entries: Vec<query::audit::Entry> = statements
                    .into_iter()
                    .filter(|s| !query::audit::is_own(&s.query))
                    .map(|s| query::audit::Entry {
                        analysis: query::analyze(model, &s.query),
                        calls_count: Some(s.calls),
                        total_ms: Some(s.total_ms),
                    })
                    .filter(|e| e.analysis.class != query::Class::Other)
                    .collect();
                let summary = query::audit::Summary::of(&entries);
                inventory.readings.push_back((now, summary.calls));
                while inventory.readings.len() > 2
                    && now.duration_since(inventory.readings[1].0) >= Duration::from_secs(60)
                {
                    inventory.readings.pop_front();
                }
                let per_minute = match inventory.readings.front() {
                    Some((at, calls)) if now.duration_since(*at) >= Duration::from_secs(1) => {
                        let minutes = now.duration_since(*at).as_secs_f64() / 60.0;
                        Some(summary.calls.saturating_sub(*calls) as f64 / minutes)
                    }
                    _ => None,
                };
                let mut untranslated: Vec<&query::audit::Entry> = entries
                    .iter()
                    .filter(|e| {
                        matches!(
                            e.analysis.class,
                            query::Class::None | query::Class::Unparsed
                        )
                    })
                    .collect();
                untranslated.sort_by_key(|e| std::cmp::Reverse(e.weight()));
                InventoryFigures {
                    available: true,
                    error: None,
                    figures: Some(AppSql {
                        statements: entries.len(),
                        calls: summary.calls,
                        calls_per_minute: per_minute,
                        translatable_calls: summary.translatable_calls,
                        translatable_share: summary.translatable_share(),
                        per_class: summary.figures(),
                        top_untranslated: untranslated
                            .iter()
                            .take(10)
                            .map(|e| Untranslated {
                                sql: query::audit::one_line(&e.analysis.sql, 200),
                                class: e.analysis.class.as_str(),
                                calls: e.weight(),
                                reason: e.analysis.reason.clone(),
                            })
                            .collect(),
                    }),
                }
            }
        };
        inventory.at = Some(now);
        inventory.value = value.clone();
        value
    }
}

fn verifier_now() -> f64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64())
}

/// Every figure of the dashboard: what `/api/status` sends (the page's
/// script reads these names) and what `/metrics` sets its gauges from.
#[derive(serde::Serialize)]
struct Status {
    generated_at: f64,
    mode: ModeFigures,
    outbox: Outbox,
    backfill: BackfillFigures,
    verify: verifier::report::Report,
    coverage: Vec<CoverageFigure>,
    mismatches: Vec<verifier::store::Mismatch>,
    full_diff: Option<verifier::full::RunStatus>,
    capture: mirror::capture::status::CaptureStatus,
    inventory: InventoryFigures,
    /// Every proxy that reported within the hour, live ones first.
    proxies: Vec<proxy::heartbeat::Reported>,
}

/// The inventory of the app's SQL: the figures, or why there are none.
#[derive(Clone, Default, serde::Serialize)]
struct InventoryFigures {
    available: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    error: Option<String>,
    #[serde(flatten, skip_serializing_if = "Option::is_none")]
    figures: Option<AppSql>,
}

impl InventoryFigures {
    fn unavailable(error: String) -> InventoryFigures {
        InventoryFigures {
            available: false,
            error: Some(error),
            figures: None,
        }
    }
}

/// The app's statements on the layout tables, from pg_stat_statements.
#[derive(Clone, serde::Serialize)]
struct AppSql {
    statements: usize,
    calls: u64,
    calls_per_minute: Option<f64>,
    translatable_calls: u64,
    translatable_share: Option<f64>,
    per_class: Value,
    top_untranslated: Vec<Untranslated>,
}

/// One statement the cell API cannot answer, with its calls and reason.
#[derive(Clone, serde::Serialize)]
struct Untranslated {
    sql: String,
    class: &'static str,
    calls: u64,
    reason: Option<String>,
}

#[derive(serde::Serialize)]
struct ModeFigures {
    mode: tripstore::Mode,
    since: String,
    by: String,
    forced: bool,
}

#[derive(serde::Serialize)]
struct Outbox {
    depth: u64,
    oldest_secs: f64,
    parked: u64,
}

#[derive(serde::Serialize)]
struct BackfillFigures {
    planned: bool,
    chunks: u64,
    done: u64,
    failed: u64,
    running: u64,
    parents_done: u64,
    cells_done: u64,
    cells_per_sec: f64,
    complete: bool,
}

/// The verified share of one column (cached: counting is a scan).
#[derive(Clone, serde::Serialize)]
struct CoverageFigure {
    column: String,
    verified: u64,
    rows: u64,
    share: f64,
}

/// Sets the gauges `/metrics` renders from the status.
fn set_gauges(status: &Status) {
    let live = status.proxies.iter().filter(|p| p.live).count();
    metrics::gauge!("mezzanine_proxies", "state" => "live").set(live as f64);
    metrics::gauge!("mezzanine_proxies", "state" => "silent")
        .set((status.proxies.len() - live) as f64);
    for m in tripstore::Mode::ALL {
        metrics::gauge!("mezzanine_mode", "mode" => m.as_str())
            .set(f64::from(u8::from(m == status.mode.mode)));
    }
    let outbox = &status.outbox;
    metrics::gauge!("mezzanine_outbox_depth").set(outbox.depth as f64);
    metrics::gauge!("mezzanine_outbox_oldest_age_seconds").set(outbox.oldest_secs);
    metrics::gauge!("mezzanine_outbox_parked").set(outbox.parked as f64);
    let queue = &status.capture.queue;
    metrics::gauge!("mezzanine_capture_queue_depth").set(queue.depth as f64);
    metrics::gauge!("mezzanine_capture_oldest_age_seconds").set(queue.oldest_secs.unwrap_or(0.0));
    metrics::gauge!("mezzanine_capture_slot_retained_bytes")
        .set(queue.slot.as_ref().map_or(0.0, |s| s.retained_bytes as f64));
    for kind in crate::metrics::CAPTURE_PARKED_KINDS {
        metrics::gauge!("mezzanine_capture_parked", "kind" => kind)
            .set(queue.parked_by_kind.get(kind).copied().unwrap_or(0) as f64);
    }
    for state in ["installed", "missing", "partial", "stale"] {
        let count = status
            .capture
            .tables
            .iter()
            .filter(|t| t.state == state)
            .count();
        metrics::gauge!("mezzanine_capture_tables", "state" => state).set(count as f64);
    }
    let b = &status.backfill;
    let pending = b.chunks.saturating_sub(b.done + b.failed + b.running);
    for (state, value) in [
        ("done", b.done),
        ("failed", b.failed),
        ("running", b.running),
        ("pending", pending),
    ] {
        metrics::gauge!("mezzanine_backfill_chunks", "state" => state).set(value as f64);
    }
    metrics::gauge!("mezzanine_backfill_parents_done").set(b.parents_done as f64);
    metrics::gauge!("mezzanine_backfill_cells_done").set(b.cells_done as f64);
    let r = &status.verify;
    for c in &r.by_column {
        let column = c.column.clone();
        metrics::gauge!("mezzanine_verify_samples", "column" => column.clone())
            .set(c.counts.samples as f64);
        metrics::gauge!("mezzanine_verify_matches", "column" => column.clone())
            .set(c.counts.matches as f64);
        metrics::gauge!("mezzanine_verify_mismatches", "column" => column)
            .set(c.counts.mismatches as f64);
    }
    metrics::gauge!("mezzanine_verify_dropped").set(r.totals.dropped as f64);
    metrics::gauge!("mezzanine_verify_replay_seconds_mean").set(r.replay_mean_ms / 1000.0);
    metrics::gauge!("mezzanine_verify_mismatch_upper_bound").set(r.upper_bound);
    metrics::gauge!("mezzanine_verify_open_mismatches").set(r.open_mismatches as f64);
}
