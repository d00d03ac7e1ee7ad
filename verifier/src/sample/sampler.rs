//! The sampler the facade asks on each read: a random draw against the
//! rate, a per-second cap with a small burst, a queue that never makes
//! the served read wait, and the tallies the flush writes.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Instant, SystemTime, UNIX_EPOCH};

use tokio::sync::mpsc;

use crate::compare::Unit;
use crate::store::{Counts, Settings, Verified};

use super::*;

/// How many samples the cap lets through at once after a quiet spell.
const BURST: u64 = 4;

/// The facade's side of sampling: cheap checks on the read path.
#[derive(Clone)]
pub struct Sampler {
    shared: Arc<Shared>,
}

struct Shared {
    /// The rate as f64 bits.
    rate: AtomicU64,
    cap: AtomicU64,
    /// The cap's theoretical arrival time, nanoseconds since `started`.
    tat: AtomicU64,
    queue: mpsc::Sender<Sample>,
    tally: Mutex<Tally>,
    /// Every count since the sampler began (the tally is emptied by each
    /// flush).
    totals: Mutex<Counts>,
    started: Instant,
}

#[derive(Default)]
pub(super) struct Tally {
    pub(super) counts: HashMap<String, Counts>,
    pub(super) verified: Vec<Verified>,
}

impl Sampler {
    /// Whether to sample this read: a draw against the rate, then the
    /// per-second cap.
    pub fn wants(&self) -> bool {
        let rate = f64::from_bits(self.shared.rate.load(Ordering::Relaxed));
        if rate <= 0.0 || (rate < 1.0 && rand::random::<f64>() >= rate) {
            return false;
        }
        // The cap as an evenly spaced rate (GCRA, without a lock): each
        // sample moves the theoretical arrival time on by 1/cap; a sample is
        // taken while that time is at most a few intervals ahead of now. A
        // per-second window would let the whole second's samples through
        // in its first milliseconds, a burst of replays the served reads
        // would queue behind.
        let cap = self.shared.cap.load(Ordering::Relaxed).max(1);
        let interval = 1_000_000_000 / cap;
        let tolerance = interval * BURST;
        let now = self.shared.started.elapsed().as_nanos() as u64;
        let mut tat = self.shared.tat.load(Ordering::Relaxed);
        loop {
            let from = tat.max(now);
            if from - now > tolerance {
                return false;
            }
            match self.shared.tat.compare_exchange_weak(
                tat,
                from + interval,
                Ordering::Relaxed,
                Ordering::Relaxed,
            ) {
                Ok(_) => return true,
                Err(seen) => tat = seen,
            }
        }
    }

    /// Hands a served read over for replay; never waits. A full queue
    /// drops it (counted).
    pub fn offer(&self, sample: Sample) {
        let column = sample.read.column_label();
        if self.shared.queue.try_send(sample).is_err() {
            metrics::counter!("mezzanine_verify_dropped_total").increment(1);
            self.count(&column, |c| c.dropped += 1);
        }
    }

    /// The sampling now in force.
    pub fn settings(&self) -> Settings {
        Settings {
            sample_rate: f64::from_bits(self.shared.rate.load(Ordering::Relaxed)),
            max_samples_per_sec: self.shared.cap.load(Ordering::Relaxed),
        }
    }

    /// Changes the sampling of this facade (until the next stored setting
    /// is read; see [`crate::store::set_settings`] for every facade).
    pub fn set(&self, settings: Settings) {
        self.shared.rate.store(
            settings.sample_rate.clamp(0.0, 1.0).to_bits(),
            Ordering::Relaxed,
        );
        self.shared.cap.store(
            settings.max_samples_per_sec.clamp(1, 1_000_000),
            Ordering::Relaxed,
        );
    }

    pub(super) fn count(&self, column: &str, f: impl FnOnce(&mut Counts)) {
        let mut counts = Counts::default();
        f(&mut counts);
        let mut tally = self.shared.tally.lock().expect("sampler tally");
        tally
            .counts
            .entry(column.to_string())
            .or_default()
            .add(&counts);
        drop(tally);
        self.shared
            .totals
            .lock()
            .expect("sampler totals")
            .add(&counts);
    }

    /// Every count of this sampler since it began, over all columns: what
    /// this process's samples came to.
    pub fn totals(&self) -> Counts {
        *self.shared.totals.lock().expect("sampler totals")
    }

    pub(super) fn verified(&self, units: &[Unit]) {
        let at = now_secs();
        let mut tally = self.shared.tally.lock().expect("sampler tally");
        tally.verified.extend(units.iter().map(|u| Verified {
            row_key: u.row_key,
            column: u.column.clone(),
            ref_key: u.ref_key,
            at,
        }));
    }

    pub(super) fn take(&self) -> Tally {
        std::mem::take(&mut *self.shared.tally.lock().expect("sampler tally"))
    }

    pub(super) fn put_back(&self, tally: Tally) {
        let mut current = self.shared.tally.lock().expect("sampler tally");
        for (column, counts) in tally.counts {
            current.counts.entry(column).or_default().add(&counts);
        }
        // Coverage is kept only while it stays small: losing some of it
        // under a long outage only makes coverage look lower.
        if current.verified.len() < 100_000 {
            current.verified.extend(tally.verified);
        }
    }
}

pub(crate) fn now_secs() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64())
}

/// The facade's sampler and the queue its samples go to.
pub(super) fn with_queue(config: &config::Verify) -> (Sampler, mpsc::Receiver<Sample>) {
    let (sender, receiver) = mpsc::channel(config.queue);
    let sampler = Sampler {
        shared: Arc::new(Shared {
            rate: AtomicU64::new(config.sample_rate.to_bits()),
            cap: AtomicU64::new(config.max_samples_per_sec),
            tat: AtomicU64::new(0),
            queue: sender,
            tally: Mutex::new(Tally::default()),
            totals: Mutex::new(Counts::default()),
            started: Instant::now(),
        }),
    };
    (sampler, receiver)
}
