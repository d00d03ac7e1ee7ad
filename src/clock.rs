//! Times and durations as the commands print them.

/// Seconds since the epoch as `YYYY-MM-DDTHH:MM:SSZ` (whole seconds; a
/// time before 1970 or past jiff's range shows as the nearest end).
pub fn utc(secs: f64) -> String {
    let secs = (secs.max(0.0) as i64).min(jiff::Timestamp::MAX.as_second());
    let at = jiff::Timestamp::from_second(secs).unwrap_or(jiff::Timestamp::UNIX_EPOCH);
    at.strftime("%Y-%m-%dT%H:%M:%SZ").to_string()
}

/// Microseconds since the epoch as UTC text.
pub fn micros(micros: i64) -> String {
    legacy::time::format_timestamp(i128::from(micros), true).unwrap_or_else(|_| micros.to_string())
}

/// A duration in seconds, short: `42.0s`, `3m05s`, `2h10m`; `-` for none.
pub fn duration(secs: Option<f64>) -> String {
    match secs {
        None => "-".into(),
        Some(s) if s < 120.0 => format!("{s:.1}s"),
        Some(s) if s < 7200.0 => format!("{:.0}m{:02.0}s", (s / 60.0).floor(), s % 60.0),
        Some(s) => format!("{:.0}h{:02.0}m", (s / 3600.0).floor(), (s % 3600.0) / 60.0),
    }
}

/// Time left, as the progress line shows it: `1h05m`, `3m07s`.
pub fn eta(secs: f64) -> String {
    let secs = secs.round() as u64;
    if secs >= 3600 {
        format!("{}h{:02}m", secs / 3600, secs % 3600 / 60)
    } else {
        format!("{}m{:02}s", secs / 60, secs % 60)
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn utc_formats_known_instants() {
        assert_eq!(super::utc(0.0), "1970-01-01T00:00:00Z");
        assert_eq!(super::utc(951_782_400.0), "2000-02-29T00:00:00Z");
        assert_eq!(super::utc(1_796_000_000.5), "2026-11-30T00:53:20Z");
        assert_eq!(super::utc(-5.0), "1970-01-01T00:00:00Z");
        assert_eq!(super::utc(1e300), "9999-12-30T22:00:00Z");
    }
}
