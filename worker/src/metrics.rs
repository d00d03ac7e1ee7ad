//! One metrics path for every process: the `metrics` crate's macros
//! record, `metrics-exporter-prometheus` renders, and [`router`] serves
//! `GET /metrics` on the [`crate::stack`].
//!
//! The recorder is process-wide: [`install`] sets it up once, and every
//! later call returns the same handle, so a process that serves a worker
//! and a dashboard, or a test that starts several workers, renders one set
//! of metrics.
//!
//! The worker's own metrics:
//!
//! | metric | type | meaning |
//! |---|---|---|
//! | `mezzanine_worker_requests_total{route,status}` | counter | answered requests, by route template and status |
//! | `mezzanine_worker_request_duration_seconds{route}` | histogram | time to answer |
//! | `mezzanine_worker_in_flight` | gauge | requests being handled now |
//! | `mezzanine_worker_rejected_total{reason}` | counter | requests turned away: `saturated`, `timeout`, `unauthorized`, `forbidden`, `headers_too_large` |
//! | `mezzanine_worker_cells_total{outcome}` | counter | cells put through this worker, by outcome |

use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, OnceLock};

use axum::http::header;
use axum::response::IntoResponse;
use axum::routing::get;
use axum::Router;
use metrics_exporter_prometheus::{Matcher, PrometheusBuilder, PrometheusHandle};

/// The content type of the Prometheus text format.
pub const PROMETHEUS_TEXT: &str = "text/plain; version=0.0.4";

/// Latency buckets, in seconds: from a loopback cell read to a slow batch.
const BUCKETS: &[f64] = &[
    0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
];

static HANDLE: OnceLock<PrometheusHandle> = OnceLock::new();

/// Installs the process's recorder (once) and returns its handle.
pub fn install() -> PrometheusHandle {
    HANDLE
        .get_or_init(|| {
            let builder = PrometheusBuilder::new()
                .set_buckets_for_metric(Matcher::Suffix("_seconds".into()), BUCKETS)
                .expect("the bucket list is not empty");
            let recorder = builder.build_recorder();
            let handle = recorder.handle();
            if metrics::set_global_recorder(recorder).is_err() {
                // Another recorder came first (a test harness's, say):
                // this handle then renders nothing, which is honest.
                tracing::warn!("a metrics recorder was already installed");
            }
            // Keep histograms bounded in memory between scrapes.
            let upkeep = handle.clone();
            std::thread::Builder::new()
                .name("metrics-upkeep".into())
                .spawn(move || loop {
                    std::thread::sleep(std::time::Duration::from_secs(5));
                    upkeep.run_upkeep();
                })
                .expect("spawning the metrics upkeep thread");
            handle
        })
        .clone()
}

/// What runs before each scrape: sets gauges read from the databases
/// (queue depths, plan states) so that they are current when rendered.
pub type Refresh =
    Arc<dyn Fn() -> Pin<Box<dyn Future<Output = ()> + Send>> + Send + Sync + 'static>;

/// `GET /metrics`, rendering every metric of the process after `refresh`.
pub fn router(refresh: Option<Refresh>) -> Router {
    let handle = install();
    Router::new().route(
        "/metrics",
        get(move || {
            let handle = handle.clone();
            let refresh = refresh.clone();
            async move {
                if let Some(refresh) = refresh {
                    refresh().await;
                }
                (
                    [
                        (header::CONTENT_TYPE, PROMETHEUS_TEXT),
                        (header::CACHE_CONTROL, "no-store"),
                    ],
                    handle.render(),
                )
                    .into_response()
            }
        }),
    )
}

/// A [`Refresh`] from an async closure.
pub fn refresh<F, Fut>(f: F) -> Refresh
where
    F: Fn() -> Fut + Send + Sync + 'static,
    Fut: Future<Output = ()> + Send + 'static,
{
    Arc::new(move || Box::pin(f()))
}
