//! What every `/v1` request passes before a handler sees it: the header
//! size check, the in-flight limit and the request timeout; and around
//! every request, its metrics.
//!
//! The in-flight limit sheds rather than queues: a saturated worker
//! answers 503 with `Retry-After` at once, so the client tries another
//! worker instead of waiting behind this one's backlog. (tower's
//! `ConcurrencyLimit` waits, which is the opposite.)

use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::extract::{MatchedPath, Request, State};
use axum::http::StatusCode;
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use tokio::sync::Semaphore;

use crate::error::ApiError;

/// The limits of `[worker]`.
pub struct Limits {
    /// One permit per request in flight.
    permits: Arc<Semaphore>,
    /// `worker.request_timeout_ms`.
    timeout: Duration,
    /// `worker.max_header_bytes`.
    max_header_bytes: usize,
}

impl Limits {
    /// The limits `[worker]` sets.
    pub fn new(worker: &config::Worker) -> Limits {
        Limits {
            permits: Arc::new(Semaphore::new(worker.max_in_flight)),
            timeout: Duration::from_millis(worker.request_timeout_ms),
            max_header_bytes: worker.max_header_bytes,
        }
    }
}

/// Middleware: header size, in-flight limit, timeout.
pub async fn limit(State(limits): State<Arc<Limits>>, request: Request, next: Next) -> Response {
    let header_bytes: usize = request.uri().to_string().len()
        + request
            .headers()
            .iter()
            .map(|(name, value)| name.as_str().len() + value.len() + 4)
            .sum::<usize>();
    if header_bytes > limits.max_header_bytes {
        metrics::counter!("mezzanine_worker_rejected_total", "reason" => "headers_too_large")
            .increment(1);
        return ApiError::new(
            StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE,
            "headers_too_large",
            format!(
                "the request's headers take {header_bytes} bytes; worker.max_header_bytes is {}",
                limits.max_header_bytes
            ),
        )
        .into_response();
    }
    let Ok(permit) = limits.permits.clone().try_acquire_owned() else {
        metrics::counter!("mezzanine_worker_rejected_total", "reason" => "saturated").increment(1);
        return ApiError::retry(
            "saturated",
            "this worker is handling worker.max_in_flight requests; try another worker or again shortly",
        )
        .into_response();
    };
    let answer = tokio::time::timeout(limits.timeout, next.run(request)).await;
    drop(permit);
    match answer {
        Ok(response) => response,
        Err(_) => {
            metrics::counter!("mezzanine_worker_rejected_total", "reason" => "timeout")
                .increment(1);
            // A put cut off here may or may not have landed; sending it
            // again is safe (it comes back `already_present` if it did).
            ApiError::retry(
                "timeout",
                format!(
                    "no answer within worker.request_timeout_ms ({} ms)",
                    limits.timeout.as_millis()
                ),
            )
            .into_response()
        }
    }
}

/// Middleware: counts and times every request by its route template.
pub async fn record(request: Request, next: Next) -> Response {
    let route = request
        .extensions()
        .get::<MatchedPath>()
        .map_or_else(|| "unmatched".to_string(), |p| p.as_str().to_string());
    let started = Instant::now();
    let in_flight = metrics::gauge!("mezzanine_worker_in_flight");
    in_flight.increment(1.0);
    let response = next.run(request).await;
    in_flight.decrement(1.0);
    metrics::histogram!("mezzanine_worker_request_duration_seconds", "route" => route.clone())
        .record(started.elapsed().as_secs_f64());
    metrics::counter!(
        "mezzanine_worker_requests_total",
        "route" => route,
        "status" => response.status().as_u16().to_string()
    )
    .increment(1);
    response
}
