//! A circuit breaker per storage node.
//!
//! A node that stops answering would otherwise cost every request a full
//! `storage.request_timeout_ms`. After `storage.breaker_failures`
//! consecutive failures or timeouts the breaker *opens*: requests to the
//! node fail at once with [`crate::Error::Unavailable`], so master reads
//! fail over to a minion and writes go to the buffers without waiting.
//! After `storage.breaker_open_ms` it is *half-open*: the store's
//! maintenance task sends one probe (`SELECT 1`); its success closes the
//! breaker, its failure opens it again for another period. Requests never
//! probe themselves, so no caller pays for finding out that a node is
//! still down.
//!
//! Only failures of the node count (no connection, a timeout, a server
//! shutting down or refusing writes because it is read-only): a duplicate
//! key or a bad statement is an answer, and an answering node is healthy.
//!
//! The state is exported as the gauge `mezzanine_schemaless_breaker_state{node}` (0
//! closed, 1 half-open, 2 open) and the counter
//! `mezzanine_schemaless_breaker_opened_total{node}`.

use std::sync::Mutex;
use std::time::{Duration, Instant};

/// Where a breaker stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BreakerState {
    /// Requests flow; failures are counted.
    Closed,
    /// Waiting for a probe's answer; requests are refused meanwhile.
    HalfOpen,
    /// Requests are refused until the open period is over.
    Open,
}

impl BreakerState {
    /// The value of the `mezzanine_schemaless_breaker_state` gauge.
    pub fn gauge(self) -> f64 {
        match self {
            BreakerState::Closed => 0.0,
            BreakerState::HalfOpen => 1.0,
            BreakerState::Open => 2.0,
        }
    }
}

impl std::fmt::Display for BreakerState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            BreakerState::Closed => "closed",
            BreakerState::HalfOpen => "half-open",
            BreakerState::Open => "open",
        })
    }
}

#[derive(Debug)]
struct State {
    state: BreakerState,
    /// Consecutive failures while closed.
    failures: u32,
    /// When it last opened (or when the running probe started).
    since: Instant,
    /// The failure that opened it, for status output and errors.
    last_error: Option<String>,
}

/// One node's breaker.
#[derive(Debug)]
pub struct Breaker {
    node: String,
    threshold: u32,
    open_for: Duration,
    state: Mutex<State>,
}

/// What a caller may do now.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Admission {
    /// Go ahead.
    Allowed,
    /// The breaker is open (or half-open with a probe out): fail fast.
    Refused {
        /// The failure that opened it.
        reason: String,
    },
}

impl Breaker {
    /// A closed breaker for `node`.
    pub fn new(node: &str, threshold: u32, open_for: Duration) -> Breaker {
        let breaker = Breaker {
            node: node.to_string(),
            threshold: threshold.max(1),
            open_for,
            state: Mutex::new(State {
                state: BreakerState::Closed,
                failures: 0,
                since: Instant::now(),
                last_error: None,
            }),
        };
        breaker.export(BreakerState::Closed);
        breaker
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// How many consecutive failures open it.
    pub fn threshold(&self) -> u32 {
        self.threshold
    }

    /// The current state.
    pub fn state(&self) -> BreakerState {
        self.lock().state
    }

    /// The failure that last opened the breaker, if it is not closed.
    pub fn last_error(&self) -> Option<String> {
        let s = self.lock();
        (s.state != BreakerState::Closed)
            .then(|| s.last_error.clone())
            .flatten()
    }

    /// Whether a request may go to the node now.
    pub fn admit(&self) -> Admission {
        let s = self.lock();
        match s.state {
            BreakerState::Closed => Admission::Allowed,
            BreakerState::Open | BreakerState::HalfOpen => Admission::Refused {
                reason: s
                    .last_error
                    .clone()
                    .unwrap_or_else(|| "it failed repeatedly".into()),
            },
        }
    }

    /// Whether a probe should be sent now: the breaker is open and its
    /// open period is over, or a probe has been out for longer than that
    /// (it hung). Makes the breaker half-open; the caller must report the
    /// probe's outcome with [`Breaker::success`] or [`Breaker::failure`].
    pub fn start_probe(&self) -> bool {
        let mut s = self.lock();
        let due = match s.state {
            BreakerState::Closed => false,
            BreakerState::Open | BreakerState::HalfOpen => s.since.elapsed() >= self.open_for,
        };
        if due {
            s.state = BreakerState::HalfOpen;
            s.since = Instant::now();
            drop(s);
            self.export(BreakerState::HalfOpen);
        }
        due
    }

    /// The node answered.
    pub fn success(&self) {
        let mut s = self.lock();
        s.failures = 0;
        if s.state != BreakerState::Closed {
            s.state = BreakerState::Closed;
            s.last_error = None;
            drop(s);
            tracing::info!(node = %self.node, "circuit breaker closed: the node answers again");
            self.export(BreakerState::Closed);
        }
    }

    /// The node failed or did not answer in time.
    pub fn failure(&self, error: &str) {
        let mut s = self.lock();
        s.failures = s.failures.saturating_add(1);
        let opens = match s.state {
            BreakerState::Closed => s.failures >= self.threshold,
            BreakerState::HalfOpen => true,
            // Requests admitted before it opened are still finishing.
            BreakerState::Open => false,
        };
        if opens {
            let was = s.state;
            s.state = BreakerState::Open;
            s.since = Instant::now();
            s.last_error = Some(error.to_string());
            drop(s);
            if was == BreakerState::Closed {
                tracing::warn!(node = %self.node, error, "circuit breaker opened");
                metrics::counter!("mezzanine_schemaless_breaker_opened_total", "node" => self.node.clone())
                    .increment(1);
            }
            self.export(BreakerState::Open);
        }
    }

    fn export(&self, state: BreakerState) {
        metrics::gauge!("mezzanine_schemaless_breaker_state", "node" => self.node.clone())
            .set(state.gauge());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn breaker(open_ms: u64) -> Breaker {
        Breaker::new("n", 3, Duration::from_millis(open_ms))
    }

    #[test]
    fn opens_after_consecutive_failures_only() {
        let b = breaker(1000);
        b.failure("x");
        b.failure("x");
        b.success();
        b.failure("x");
        b.failure("x");
        assert_eq!(b.state(), BreakerState::Closed);
        assert_eq!(b.admit(), Admission::Allowed);
        b.failure("refused");
        assert_eq!(b.state(), BreakerState::Open);
        assert_eq!(
            b.admit(),
            Admission::Refused {
                reason: "refused".into()
            }
        );
        assert_eq!(b.last_error().as_deref(), Some("refused"));
    }

    #[test]
    fn a_probe_is_due_only_after_the_open_period_and_decides() {
        let b = breaker(30);
        for _ in 0..3 {
            b.failure("down");
        }
        assert!(!b.start_probe(), "no probe before the period is over");
        std::thread::sleep(Duration::from_millis(40));
        assert!(b.start_probe());
        assert_eq!(b.state(), BreakerState::HalfOpen);
        assert!(matches!(b.admit(), Admission::Refused { .. }));
        assert!(!b.start_probe(), "one probe at a time");
        b.failure("still down");
        assert_eq!(b.state(), BreakerState::Open);
        std::thread::sleep(Duration::from_millis(40));
        assert!(b.start_probe());
        b.success();
        assert_eq!(b.state(), BreakerState::Closed);
        assert_eq!(b.admit(), Admission::Allowed);
        assert_eq!(b.last_error(), None);
    }

    #[test]
    fn a_closed_breaker_never_wants_a_probe() {
        let b = breaker(0);
        assert!(!b.start_probe());
    }
}
