//! Which failures are tried again on another worker, and how long to wait
//! between attempts.

use std::time::Duration;

use rand::Rng;
use reqwest::header::{HeaderMap, RETRY_AFTER};
use reqwest::StatusCode;
use url::Url;

/// Exponential backoff with full jitter: attempt `n` (from 1) waits a
/// random time up to `min(max, base * 2^(n-1))`, so clients that failed
/// together do not come back together.
///
/// This is the one retry in the workspace not on `schemaless::retry`
/// (backon): backon's jitter only adds to each step, while a client fleet
/// hitting one worker wants full jitter (a wait anywhere from zero), and
/// the loop in `call` also moves to the next worker, honours a lone
/// worker's `Retry-After` and stops at the call's deadline rather than at
/// a count. `Backoff` is public: apps tune it through the builder.
#[derive(Clone, Copy, Debug)]
pub struct Backoff {
    /// The ceiling of the first wait.
    pub base: Duration,
    /// The largest ceiling.
    pub max: Duration,
}

impl Default for Backoff {
    fn default() -> Self {
        Backoff {
            base: Duration::from_millis(20),
            max: Duration::from_secs(1),
        }
    }
}

impl Backoff {
    /// The wait before attempt `attempt` + 1.
    pub fn delay(&self, attempt: u32) -> Duration {
        let ceiling = self
            .base
            .saturating_mul(1u32 << attempt.saturating_sub(1).min(16))
            .min(self.max);
        let micros = ceiling.as_micros() as u64;
        Duration::from_micros(rand::rng().random_range(0..=micros))
    }
}

/// One attempt's end.
pub(crate) enum Attempt {
    /// An answer that is final, whatever its status.
    Done(crate::wire::Reply),
    /// A failure another worker (or this one, later) may not have.
    Retry {
        error: schemaless::Error,
        retry_after: Option<Duration>,
    },
}

/// Statuses that say "not now, not here": a proxy's bad gateway, a
/// saturated or failing-over worker, a gateway timeout.
pub fn retried_status(status: StatusCode) -> bool {
    matches!(
        status,
        StatusCode::BAD_GATEWAY | StatusCode::SERVICE_UNAVAILABLE | StatusCode::GATEWAY_TIMEOUT
    )
}

/// `Retry-After` in seconds, if given.
pub(crate) fn retry_after(headers: &HeaderMap) -> Option<Duration> {
    headers
        .get(RETRY_AFTER)?
        .to_str()
        .ok()?
        .trim()
        .parse::<u64>()
        .ok()
        .map(|secs| Duration::from_secs(secs.min(60)))
}

/// A connection error or a timeout, as a retryable store error.
pub(crate) fn transport(worker: &Url, e: &reqwest::Error) -> schemaless::Error {
    let node = worker.to_string();
    if e.is_timeout() {
        return schemaless::Error::Timeout {
            node,
            after: Duration::ZERO,
        };
    }
    schemaless::Error::Unavailable {
        node,
        reason: format!("{e}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn delays_grow_and_stay_under_the_ceiling() {
        let backoff = Backoff {
            base: Duration::from_millis(10),
            max: Duration::from_millis(100),
        };
        for attempt in 1..20 {
            let ceiling =
                Duration::from_millis(10 * (1u64 << (attempt - 1).min(16))).min(backoff.max);
            for _ in 0..50 {
                assert!(backoff.delay(attempt) <= ceiling);
            }
        }
        // Jitter: not every delay is the same.
        let delays: std::collections::HashSet<_> = (0..50).map(|_| backoff.delay(5)).collect();
        assert!(delays.len() > 1);
    }

    #[test]
    fn only_gateway_and_unavailable_statuses_are_retried() {
        for status in [502, 503, 504] {
            assert!(retried_status(StatusCode::from_u16(status).unwrap()));
        }
        for status in [200, 400, 401, 403, 404, 409, 413, 422, 500] {
            assert!(!retried_status(StatusCode::from_u16(status).unwrap()));
        }
    }
}
