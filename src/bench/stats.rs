//! Percentiles of measured latencies.

use std::time::Duration;

/// Sorted latency samples.
pub struct Latencies(Vec<Duration>);

impl Latencies {
    pub fn new(mut samples: Vec<Duration>) -> Latencies {
        samples.sort_unstable();
        Latencies(samples)
    }

    /// How many samples.
    #[allow(clippy::len_without_is_empty)]
    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// The `p`-th percentile (0–100) in microseconds, nearest-rank.
    pub fn percentile_us(&self, p: f64) -> f64 {
        if self.0.is_empty() {
            return f64::NAN;
        }
        let rank = ((p / 100.0) * self.0.len() as f64).ceil() as usize;
        let index = rank.clamp(1, self.0.len()) - 1;
        self.0[index].as_secs_f64() * 1e6
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nearest_rank_percentiles() {
        let l = Latencies::new((1..=100).rev().map(Duration::from_micros).collect());
        assert_eq!(l.percentile_us(50.0), 50.0);
        assert_eq!(l.percentile_us(99.0), 99.0);
        assert_eq!(l.percentile_us(100.0), 100.0);
        assert!(Latencies::new(vec![]).percentile_us(50.0).is_nan());
    }
}
