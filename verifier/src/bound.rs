//! The 95% upper confidence bound of a mismatch rate.
//!
//! With `m` mismatches in `n` samples the bound is the exact one-sided
//! Clopper-Pearson bound: the rate `p` at which seeing `m` or fewer
//! mismatches has probability 5%. With `m = 0` that is `1 - 0.05^(1/n)`,
//! about `3/n` (the "rule of three"). It is found by bisection on the
//! binomial distribution function, summed in log space; past 2000
//! mismatches the Wilson score bound (within a hair of it there) is used.

/// The one-sided 95% upper bound of the rate, or 1.0 without samples.
pub fn upper_bound(mismatches: u64, samples: u64) -> f64 {
    if samples == 0 {
        return 1.0;
    }
    let (m, n) = (mismatches.min(samples), samples);
    if m == n {
        return 1.0;
    }
    if m == 0 {
        return 1.0 - 0.05f64.powf(1.0 / n as f64);
    }
    if m > 2000 {
        return wilson(m, n);
    }
    let (mut low, mut high) = (m as f64 / n as f64, 1.0);
    for _ in 0..100 {
        let mid = (low + high) / 2.0;
        if cdf(m, n, mid) > 0.05 {
            low = mid;
        } else {
            high = mid;
        }
    }
    high
}

/// P(X <= m) for X ~ Binomial(n, p).
fn cdf(m: u64, n: u64, p: f64) -> f64 {
    let (lp, lq) = (p.ln(), (1.0 - p).ln());
    let mut log_choose = 0.0; // ln C(n, 0)
    let mut total = 0.0;
    for k in 0..=m {
        if k > 0 {
            log_choose += ((n - k + 1) as f64).ln() - (k as f64).ln();
        }
        total += (log_choose + k as f64 * lp + (n - k) as f64 * lq).exp();
    }
    total
}

fn wilson(m: u64, n: u64) -> f64 {
    let z = 1.644_853_626_951_472_2; // one-sided 95%
    let (n, p) = (n as f64, m as f64 / n as f64);
    let centre = p + z * z / (2.0 * n);
    let spread = z * (p * (1.0 - p) / n + z * z / (4.0 * n * n)).sqrt();
    ((centre + spread) / (1.0 + z * z / n)).min(1.0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn zero_mismatches_is_about_three_over_n() {
        for n in [100u64, 1000, 10_000, 1_000_000] {
            let b = upper_bound(0, n);
            assert!((b * n as f64 - 3.0).abs() < 0.06, "n={n}: {b}");
        }
        assert_eq!(upper_bound(0, 0), 1.0);
    }

    #[test]
    fn matches_known_clopper_pearson_values() {
        // One-sided 95% upper bounds: 1 in 100 -> 0.0466, 5 in 1000 ->
        // 0.01049 (tables of the exact binomial bound).
        assert!((upper_bound(1, 100) - 0.0466).abs() < 0.0005);
        assert!((upper_bound(5, 1000) - 0.01049).abs() < 0.0002);
        assert_eq!(upper_bound(7, 7), 1.0);
    }

    #[test]
    fn the_bound_falls_with_more_samples_and_rises_with_mismatches() {
        assert!(upper_bound(3, 10_000) < upper_bound(3, 1000));
        assert!(upper_bound(4, 1000) > upper_bound(3, 1000));
        let w = upper_bound(3000, 100_000);
        assert!(w > 0.03 && w < 0.032, "{w}");
    }
}
