//! Times of day with a zone offset (`time with time zone`, `timetz`) in
//! their one canonical form: PostgreSQL's own output, the time as a
//! `time` prints (`07:30:00`, `07:30:00.25`) followed by the offset east
//! of UTC as PostgreSQL prints it, its hours always and its minutes and
//! seconds only when not zero (`+00`, `-03:30`, `+05:45`, `+01:02:03`).
//! That output does not depend on the session's `DateStyle`.
//!
//! Two values are equal in PostgreSQL only with the same time and the
//! same offset (`12:00+01` is not `11:00+00`), so the canonical text
//! compares as PostgreSQL compares them; it does not order as PostgreSQL
//! orders them (by the instant in UTC first).
//!
//! Input takes the time as [`crate::duration::parse_time`] does, then an
//! offset: `+HH`, `+HH:MM`, `+HH:MM:SS`, `+HHMM`, or `Z` for `+00`. A zone
//! name is refused: without a date, which offset it means is not fixed.

use crate::duration::{format_time, parse_time, time_fits};

/// PostgreSQL's limit on an offset: 15:59:59 either way.
const MAX_OFFSET_SECONDS: i32 = (15 * 60 + 59) * 60 + 59;

/// The canonical text of a time of day (microseconds since midnight, 0
/// to 24 hours) at an offset `east` seconds east of UTC.
pub fn format_timetz(micros: i64, east: i32) -> String {
    let mut text = format_time(micros);
    text.push(if east >= 0 { '+' } else { '-' });
    let east = east.unsigned_abs();
    let (hours, minutes, seconds) = (east / 3600, east / 60 % 60, east % 60);
    text.push_str(&format!("{hours:02}"));
    if minutes != 0 || seconds != 0 {
        text.push_str(&format!(":{minutes:02}"));
    }
    if seconds != 0 {
        text.push_str(&format!(":{seconds:02}"));
    }
    text
}

/// A time of day with an offset: its microseconds since midnight and the
/// offset in seconds east of UTC.
pub fn parse_timetz(text: &str) -> Result<(i64, i32), String> {
    let bad = || {
        format!(
            "{text:?} is not a time of day with a zone offset (HH:MM:SS[.ffffff]+HH[:MM[:SS]]; \
             a zone name has no fixed offset without a date)"
        )
    };
    if let Some(clock) = text.strip_suffix(['Z', 'z']) {
        return Ok((parse_time(clock)?, 0));
    }
    let at = text.rfind(['+', '-']).ok_or_else(bad)?;
    let (clock, offset) = text.split_at(at);
    let micros = parse_time(clock)?;
    let sign = if offset.starts_with('-') { -1 } else { 1 };
    let digits = &offset[1..];
    let parts: Vec<&str> = if digits.len() == 4 && !digits.contains(':') {
        vec![&digits[..2], &digits[2..]]
    } else {
        digits.split(':').collect()
    };
    if parts.is_empty()
        || parts.len() > 3
        || parts
            .iter()
            .any(|p| p.len() != 2 || !p.bytes().all(|b| b.is_ascii_digit()))
    {
        return Err(bad());
    }
    let number = |i: usize| parts.get(i).map_or(Ok(0), |p| p.parse::<i32>());
    let (hours, minutes, seconds) = (
        number(0).map_err(|_| bad())?,
        number(1).map_err(|_| bad())?,
        number(2).map_err(|_| bad())?,
    );
    if minutes > 59 || seconds > 59 {
        return Err(bad());
    }
    let east = hours * 3600 + minutes * 60 + seconds;
    if east > MAX_OFFSET_SECONDS {
        return Err(format!(
            "{text:?}: PostgreSQL keeps offsets within 15:59:59 of UTC"
        ));
    }
    Ok((micros, sign * east))
}

/// The canonical text of a time of day with an offset written in any
/// form [`parse_timetz`] takes.
pub fn canonical_timetz(text: &str) -> Result<String, String> {
    parse_timetz(text).map(|(micros, east)| format_timetz(micros, east))
}

/// Whether a canonical `timetz` fits a `timetz(p)` of type modifier
/// `typmod`: PostgreSQL rounds the fraction past `p` digits.
pub fn timetz_fits(text: &str, typmod: i32) -> Result<(), String> {
    let (micros, _) = parse_timetz(text)?;
    time_fits(&format_time(micros), typmod).map_err(|e| e.replace(&format_time(micros), text))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn offsets_print_as_postgresql_prints_them() {
        for (input, canonical) in [
            ("07:30:00+00", "07:30:00+00"),
            ("07:30Z", "07:30:00+00"),
            ("07:30:00-00", "07:30:00+00"),
            ("07:30:00.250+01", "07:30:00.25+01"),
            ("23:59:59.999999-03:30", "23:59:59.999999-03:30"),
            ("00:00:00+0545", "00:00:00+05:45"),
            ("12:00:00+01:02:03", "12:00:00+01:02:03"),
            ("12:00:00-01:00:03", "12:00:00-01:00:03"),
            ("24:00:00-15:59:59", "24:00:00-15:59:59"),
            ("12:00:00+14:00", "12:00:00+14"),
        ] {
            assert_eq!(canonical_timetz(input).as_deref(), Ok(canonical), "{input}");
            assert_eq!(canonical_timetz(canonical).as_deref(), Ok(canonical));
        }
    }

    #[test]
    fn what_postgresql_refuses_or_would_read_otherwise_is_refused() {
        for bad in [
            "",
            "07:30:00",
            "07:30:00 America/New_York",
            "07:30:00 EST",
            "07:30:00+16",
            "07:30:00+1",
            "07:30:00+01:60",
            "07:30:00+01:00:00:00",
            "25:00:00+00",
            "07:30:00.1234567+00",
            "+01",
        ] {
            assert!(canonical_timetz(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn a_precision_refuses_digits_it_would_round() {
        assert!(timetz_fits("07:30:00.25+01", 2).is_ok());
        assert!(timetz_fits("07:30:00.25+01", -1).is_ok());
        let err = timetz_fits("07:30:00.25+01", 1).unwrap_err();
        assert!(err.contains("07:30:00.25+01"), "{err}");
    }
}
