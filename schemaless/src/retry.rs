//! Waiting before trying again, one way everywhere: `backon`'s
//! exponential backoff with jitter.
//!
//! Two shapes of retry share it. A call that may fail for a moment (a
//! deadlock, a lock not granted) is retried a bounded number of times
//! with [`backoff`] and `backon::Retryable`. A worker that runs for ever
//! pauses between failed rounds by [`Pauses`], which grows while rounds
//! fail and starts small again after one succeeds. Jitter keeps the
//! processes that failed together (every relay after a PostgreSQL
//! restart) from retrying in step.

use std::time::Duration;

use backon::{BackoffBuilder, ExponentialBackoff, ExponentialBuilder};

pub use backon::Retryable;

/// Backoff for a call retried at most `retries` times: the pause starts
/// at `first`, doubles up to `max`, and each is stretched by a random
/// share of itself (up to twice).
pub fn backoff(first: Duration, max: Duration, retries: usize) -> ExponentialBuilder {
    ExponentialBuilder::default()
        .with_min_delay(first)
        .with_max_delay(max)
        .with_max_times(retries)
        .with_jitter()
}

/// The pauses of a long-running worker between failed rounds: from
/// `first`, doubling to `max`, with jitter, never over `max`; back to
/// `first` after a round succeeds.
#[derive(Debug)]
pub struct Pauses {
    builder: ExponentialBuilder,
    max: Duration,
    next: ExponentialBackoff,
}

impl Pauses {
    /// Pauses from `first` up to `max`.
    pub fn new(first: Duration, max: Duration) -> Pauses {
        let max = max.max(first);
        let builder = ExponentialBuilder::default()
            .with_min_delay(first)
            .with_max_delay(max)
            .without_max_times()
            .with_jitter();
        Pauses {
            builder,
            max,
            next: builder.build(),
        }
    }

    /// The pause after a failed round; the next one is longer.
    pub fn failed(&mut self) -> Duration {
        self.next.next().unwrap_or(self.max).min(self.max)
    }

    /// A round succeeded: the next failure pauses briefly again.
    pub fn succeeded(&mut self) {
        self.next = self.builder.build();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pauses_grow_with_jitter_up_to_the_max_and_reset() {
        let (first, max) = (Duration::from_millis(100), Duration::from_millis(350));
        let mut pauses = Pauses::new(first, max);
        let waits: Vec<Duration> = (0..6).map(|_| pauses.failed()).collect();
        // Each pause is at least its step (100, 200, then the 350 cap)
        // and at most twice it, never over the max.
        let steps = [100, 200, 350, 350, 350, 350].map(Duration::from_millis);
        for (wait, step) in waits.iter().zip(steps) {
            assert!(*wait >= step && *wait <= (step * 2).min(max), "{waits:?}");
        }
        pauses.succeeded();
        let again = pauses.failed();
        assert!(again >= first && again < first * 2, "{again:?}");
    }

    #[test]
    fn jitter_spreads_the_pauses_of_workers_that_failed_together() {
        let pauses: std::collections::HashSet<Duration> = (0..20)
            .map(|_| Pauses::new(Duration::from_millis(100), Duration::from_secs(10)).failed())
            .collect();
        assert!(pauses.len() > 1, "{pauses:?}");
    }

    #[tokio::test]
    async fn a_call_is_retried_while_its_error_says_so_and_at_most_retries_times() {
        let mut calls = 0;
        let result: Result<(), &str> = (|| {
            calls += 1;
            async { Err("deadlock") }
        })
        .retry(backoff(
            Duration::from_millis(1),
            Duration::from_millis(4),
            3,
        ))
        .when(|e| *e == "deadlock")
        .await;
        assert_eq!((result, calls), (Err("deadlock"), 4));

        let mut calls = 0;
        let result: Result<(), &str> = (|| {
            calls += 1;
            async { Err("syntax error") }
        })
        .retry(backoff(
            Duration::from_millis(1),
            Duration::from_millis(4),
            3,
        ))
        .when(|e| *e == "deadlock")
        .await;
        assert_eq!((result, calls), (Err("syntax error"), 1));
    }
}
