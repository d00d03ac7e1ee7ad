//! The sections that are number ranges and URLs: one function each, in
//! the order `validate` checks them.

use super::{check_postgres_url, in_range, in_share, problem, Problem, MAX_BODY_BYTES_LIMIT};
use crate::model::Config;

/// `[limits]`.
pub(super) fn limits(limits: &crate::Limits) -> Result<(), Problem> {
    in_range(
        "limits.max_body_bytes",
        limits.max_body_bytes as u64,
        2,
        MAX_BODY_BYTES_LIMIT as u64,
    )?;
    in_range(
        "limits.max_batch_cells",
        limits.max_batch_cells as u64,
        1,
        100_000,
    )?;
    in_range(
        "limits.max_batch_bytes",
        limits.max_batch_bytes as u64,
        limits.max_body_bytes as u64,
        1 << 30,
    )?;
    Ok(())
}

/// `[legacy]`, when present.
pub(super) fn legacy(config: &Config) -> Result<(), Problem> {
    if let Some(legacy) = &config.legacy {
        check_postgres_url(&legacy.url).map_err(|m| problem("legacy.url", m))?;
        in_range(
            "legacy.max_connections",
            legacy.max_connections.into(),
            1,
            1000,
        )?;
        in_range(
            "legacy.statement_timeout_ms",
            legacy.statement_timeout_ms,
            1,
            3_600_000,
        )?;
        in_range("legacy.mode_poll_ms", legacy.mode_poll_ms, 10, 600_000)?;
    }
    Ok(())
}

/// `[triggers]`.
pub(super) fn triggers(triggers: &crate::Triggers) -> Result<(), Problem> {
    in_range("triggers.batch", triggers.batch as u64, 1, 10_000)?;
    in_range("triggers.max_tries", triggers.max_tries.into(), 1, 1000)?;
    in_range(
        "triggers.retry_backoff_ms",
        triggers.retry_backoff_ms,
        0,
        600_000,
    )?;
    in_range("triggers.max_parked", triggers.max_parked, 0, 10_000_000)?;
    in_range("triggers.lease_ms", triggers.lease_ms, 100, 3_600_000)?;
    in_range("triggers.poll_ms", triggers.poll_ms, 1, 600_000)?;
    in_range("triggers.watch_ms", triggers.watch_ms, 0, 60_000)?;
    Ok(())
}

/// `[mirror]`.
pub(super) fn mirror(mirror: &crate::Mirror) -> Result<(), Problem> {
    in_range("mirror.relay_batch", mirror.relay_batch as u64, 1, 10_000)?;
    in_range("mirror.relay_poll_ms", mirror.relay_poll_ms, 1, 600_000)?;
    in_range("mirror.relay_linger_ms", mirror.relay_linger_ms, 0, 10_000)?;
    in_range(
        "mirror.retry_backoff_ms",
        mirror.retry_backoff_ms,
        1,
        600_000,
    )?;
    in_range(
        "mirror.max_backoff_ms",
        mirror.max_backoff_ms,
        mirror.retry_backoff_ms,
        3_600_000,
    )?;
    in_range(
        "mirror.reverse_batch",
        mirror.reverse_batch as u64,
        1,
        10_000,
    )?;
    in_range("mirror.reverse_poll_ms", mirror.reverse_poll_ms, 1, 600_000)?;
    Ok(())
}

/// `[backfill]`.
pub(super) fn backfill(backfill: &crate::Backfill) -> Result<(), Problem> {
    in_range("backfill.chunk_size", backfill.chunk_size, 1, 1_000_000)?;
    in_range("backfill.workers", backfill.workers as u64, 1, 256)?;
    in_range(
        "backfill.max_rows_per_sec",
        backfill.max_rows_per_sec,
        0,
        1_000_000_000,
    )?;
    in_range(
        "backfill.max_replication_lag_ms",
        backfill.max_replication_lag_ms,
        0,
        3_600_000,
    )?;
    in_range(
        "backfill.stale_after_ms",
        backfill.stale_after_ms,
        100,
        3_600_000,
    )?;
    Ok(())
}

/// `[gates]`.
pub(super) fn gates(gates: &crate::Gates) -> Result<(), Problem> {
    in_range(
        "gates.max_outbox_lag_ms",
        gates.max_outbox_lag_ms,
        0,
        3_600_000,
    )?;
    in_share(
        "gates.max_mismatch_upper_bound",
        gates.max_mismatch_upper_bound,
    )?;
    in_share("gates.min_coverage", gates.min_coverage)?;
    Ok(())
}

pub(super) fn verify(verify: &crate::Verify) -> Result<(), Problem> {
    in_share("verify.sample_rate", verify.sample_rate)?;
    in_range(
        "verify.max_samples_per_sec",
        verify.max_samples_per_sec,
        1,
        1_000_000,
    )?;
    in_range("verify.queue", verify.queue as u64, 1, 1_000_000)?;
    in_range("verify.replayers", verify.replayers as u64, 1, 64)?;
    in_range("verify.triage_delay_ms", verify.triage_delay_ms, 0, 600_000)?;
    in_range("verify.triage_wait_ms", verify.triage_wait_ms, 0, 3_600_000)?;
    in_range("verify.chunk_size", verify.chunk_size, 1, 1_000_000)?;
    in_range("verify.workers", verify.workers as u64, 1, 256)?;
    in_range(
        "verify.stale_after_ms",
        verify.stale_after_ms,
        100,
        3_600_000,
    )?;
    for (i, rule) in verify.ignore.iter().enumerate() {
        check_field_rule(&format!("verify.ignore[{i}]"), rule, true)?;
    }
    for (rule, tolerance) in &verify.tolerance {
        let key = format!("verify.tolerance.{rule}");
        check_field_rule(&key, rule, false)?;
        if !(tolerance.is_finite() && *tolerance >= 0.0) {
            return Err(problem(
                key,
                format!("must be a number >= 0, got {tolerance}"),
            ));
        }
    }
    Ok(())
}

/// `COLUMN` (when `column_alone`) or `COLUMN.field`.
fn check_field_rule(key: &str, rule: &str, column_alone: bool) -> Result<(), Problem> {
    let mut parts = rule.splitn(2, '.');
    let column = parts.next().unwrap_or_default();
    let field = parts.next();
    let column_ok = !column.is_empty()
        && column.len() <= 64
        && column
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_');
    let shape_ok = match field {
        None => column_alone,
        Some(f) => !f.is_empty(),
    };
    if column_ok && shape_ok {
        return Ok(());
    }
    let wanted = if column_alone {
        "\"COLUMN\" or \"COLUMN.field\""
    } else {
        "\"COLUMN.field\""
    };
    Err(problem(key, format!("{rule:?} is not {wanted}")))
}
