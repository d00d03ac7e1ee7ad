//! `[guard]`: when `mezzanine guard` steps the cutover back, and how often
//! facades report what it watches.

use serde::Deserialize;

use crate::validate::{in_range, in_share, problem, Problem};

/// `[guard]`: the thresholds of the guard, over a sliding window of what
/// facades report and the shared state shows. A threshold breached for
/// `for_ms` makes the guard step back (never forward).
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Guard {
    /// `guard.window_ms`: the sliding window the figures are taken over.
    /// 1000–3600000. Default 30000.
    #[serde(default = "default_window_ms")]
    pub window_ms: u64,
    /// `guard.for_ms`: how long a breach must last before the guard steps
    /// back (0: at once). 0–3600000. Default 5000.
    #[serde(default = "default_for_ms")]
    pub for_ms: u64,
    /// `guard.check_ms`: how often the guard looks. 100–60000. Default
    /// 1000.
    #[serde(default = "default_check_ms")]
    pub check_ms: u64,
    /// `guard.report_ms`: how often every facade writes its calls, errors
    /// and latencies per store to the shared state (`mezzanine.facade_reports`).
    /// 100–60000. Default 1000.
    #[serde(default = "default_report_ms")]
    pub report_ms: u64,
    /// `guard.min_calls`: the error rate and p99 of a store are judged only
    /// over at least this many calls in the window. 1–1000000000. Default
    /// 20.
    #[serde(default = "default_min_calls")]
    pub min_calls: u64,
    /// `guard.max_error_rate`: the share of Schemaless calls through
    /// facades that may fail (the store failed: not bad input or write
    /// conflicts). 0.0–1.0. Default 0.01.
    #[serde(default = "default_max_error_rate")]
    pub max_error_rate: f64,
    /// `guard.max_p99_ms`: the p99 latency of Schemaless calls through
    /// facades. 1–600000. Default 500.
    #[serde(default = "default_max_p99_ms")]
    pub max_p99_ms: u64,
    /// `guard.max_new_mismatches`: mismatches opened (or reopened) within
    /// the window. Default 0.
    #[serde(default)]
    pub max_new_mismatches: u64,
    /// `guard.max_outbox_lag_ms`: the age of the oldest outbox entry, and
    /// of the oldest captured change. A live outbox always holds the last
    /// milliseconds of writes, so 0 could never hold. 1–3600000. Default
    /// 30000.
    #[serde(default = "default_max_outbox_lag_ms")]
    pub max_outbox_lag_ms: u64,
    /// `guard.max_open_breakers`: storage-node breakers open in any
    /// facade's latest report. Default 0.
    #[serde(default)]
    pub max_open_breakers: u64,
}

fn default_window_ms() -> u64 {
    30_000
}

fn default_for_ms() -> u64 {
    5_000
}

fn default_check_ms() -> u64 {
    1_000
}

fn default_report_ms() -> u64 {
    1_000
}

fn default_min_calls() -> u64 {
    20
}

fn default_max_error_rate() -> f64 {
    0.01
}

fn default_max_p99_ms() -> u64 {
    500
}

fn default_max_outbox_lag_ms() -> u64 {
    30_000
}

impl Default for Guard {
    fn default() -> Guard {
        Guard {
            window_ms: default_window_ms(),
            for_ms: default_for_ms(),
            check_ms: default_check_ms(),
            report_ms: default_report_ms(),
            min_calls: default_min_calls(),
            max_error_rate: default_max_error_rate(),
            max_p99_ms: default_max_p99_ms(),
            max_new_mismatches: 0,
            max_outbox_lag_ms: default_max_outbox_lag_ms(),
            max_open_breakers: 0,
        }
    }
}

pub(crate) fn validate(guard: &Guard) -> Result<(), Problem> {
    in_range("guard.window_ms", guard.window_ms, 1_000, 3_600_000)?;
    in_range("guard.for_ms", guard.for_ms, 0, 3_600_000)?;
    in_range("guard.check_ms", guard.check_ms, 100, 60_000)?;
    in_range("guard.report_ms", guard.report_ms, 100, 60_000)?;
    in_range("guard.min_calls", guard.min_calls, 1, 1_000_000_000)?;
    in_share("guard.max_error_rate", guard.max_error_rate)?;
    if guard.max_p99_ms == 0 {
        return Err(problem(
            "guard.max_p99_ms",
            "0 can never hold (no call takes no time): must be between 1 and 600000",
        ));
    }
    in_range("guard.max_p99_ms", guard.max_p99_ms, 1, 600_000)?;
    if guard.max_outbox_lag_ms == 0 {
        return Err(problem(
            "guard.max_outbox_lag_ms",
            "0 can never hold while facades write (the outbox always holds the last milliseconds of writes): must be between 1 and 3600000",
        ));
    }
    in_range(
        "guard.max_outbox_lag_ms",
        guard.max_outbox_lag_ms,
        1,
        3_600_000,
    )?;
    if guard.report_ms > guard.window_ms {
        return Err(problem(
            "guard.report_ms",
            format!(
                "{} is longer than guard.window_ms = {}: a window would often hold no report",
                guard.report_ms, guard.window_ms
            ),
        ));
    }
    Ok(())
}
