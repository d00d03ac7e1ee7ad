//! Pacing: pausing while a minion lags behind its master, and a rate
//! limit on legacy rows per process.

use super::*;

impl Backfill {
    /// Pauses the workers while any minion lags more than the limit.
    pub(super) async fn watch_lag(&self, stop: CancellationToken) {
        let limit = self.options.max_replication_lag;
        if limit.is_zero() {
            return;
        }
        let mut warned = false;
        loop {
            let mut worst: Option<(String, Duration)> = None;
            for cluster in &self.schemaless.topology().clusters {
                for minion in &cluster.minions() {
                    match replication_lag(minion).await {
                        Ok(Some(lag)) if worst.as_ref().is_none_or(|(_, w)| lag > *w) => {
                            worst = Some((minion.label.clone(), lag));
                        }
                        Ok(Some(_)) => {}
                        Err(e) if !warned => {
                            warned = true;
                            tracing::warn!(
                                "replication lag of {} is unknown ({e}); not pausing for it",
                                minion.label
                            );
                        }
                        Ok(None) if !warned => {
                            warned = true;
                            tracing::warn!(
                                "replication lag of {} is unknown (replication is not running); not pausing for it",
                                minion.label
                            );
                        }
                        _ => {}
                    }
                }
            }
            let lagging = worst.as_ref().is_some_and(|(_, lag)| *lag > limit);
            let was = self.progress.lagging.swap(lagging, Ordering::Relaxed);
            if lagging && !was {
                Progress::add(&self.progress.lag_pauses, 1);
                let (node, lag) = worst.expect("lagging means a lag");
                tracing::warn!("pausing: {node} is {lag:?} behind its master (limit {limit:?})");
            } else if was && !lagging {
                tracing::info!("resuming: the minions caught up");
            }
            sleep_or_cancel(&stop, Duration::from_secs(1)).await;
            if stop.is_cancelled() {
                return;
            }
        }
    }
}

/// How far a minion is behind its master (`Seconds_Behind_Master`);
/// `None` when replication is not running.
pub(super) async fn replication_lag(
    node: &schemaless::mysql::topology::Node,
) -> Result<Option<Duration>, Error> {
    let rows = node.fetch_all(mariadb::SHOW_REPLICA_STATUS.into()).await?;
    Ok(mariadb::ReplicaStatus::from_rows(&rows)
        .and_then(|status| status.seconds_behind)
        .map(Duration::from_secs))
}

/// Rows per second for one process: a bucket of a second's worth, taken
/// from before each chunk is written.
pub(super) struct Throttle {
    rate: u64,
    state: Mutex<(f64, Instant)>,
}

impl Throttle {
    pub(super) fn new(rate: u64) -> Throttle {
        Throttle::starting(rate, Instant::now())
    }

    /// A full second's allowance at `at`.
    fn starting(rate: u64, at: Instant) -> Throttle {
        Throttle {
            rate,
            state: Mutex::new((rate as f64, at)),
        }
    }

    pub(super) async fn acquire(&self, rows: u64) {
        if self.rate == 0 {
            return;
        }
        let wait = self.take(rows, Instant::now());
        tokio::time::sleep(wait).await;
    }

    /// Takes `rows` from the allowance at `now` (refilled at the rate,
    /// up to a second's): how long to wait before writing them.
    fn take(&self, rows: u64, now: Instant) -> Duration {
        let mut state = self.state.lock().expect("throttle lock");
        let rate = self.rate as f64;
        state.0 = (state.0 + now.duration_since(state.1).as_secs_f64() * rate).min(rate);
        state.1 = now;
        state.0 -= rows as f64;
        if state.0 < 0.0 {
            Duration::from_secs_f64(-state.0 / rate)
        } else {
            Duration::ZERO
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// On a clock of its own (each wait slept exactly): without tokio's
    /// paused time, whose `test-util` feature would make every build of
    /// the workspace's tests compile tokio and all that depends on it
    /// again, with other features than `cargo build`'s.
    #[test]
    fn the_throttle_keeps_the_rate() {
        let started = Instant::now();
        let throttle = Throttle::starting(1000, started);
        // A second's burst is free; the next 3000 rows take 3 seconds.
        let mut now = started;
        for _ in 0..4 {
            now += throttle.take(1000, now);
        }
        let elapsed = now.duration_since(started).as_secs_f64();
        assert!((2.999..3.001).contains(&elapsed), "{elapsed}");
        // Idle, the allowance refills up to a second's, not beyond.
        now += Duration::from_secs(10);
        assert_eq!(throttle.take(1000, now), Duration::ZERO);
        assert!(throttle.take(500, now) > Duration::from_millis(499));
    }

    #[tokio::test]
    async fn no_rate_is_no_limit() {
        let free = Throttle::new(0);
        free.acquire(1_000_000).await;
        assert!(free.state.lock().unwrap().0 == 0.0);
    }
}
