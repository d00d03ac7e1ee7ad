//! Times of day and intervals in their one canonical form.
//!
//! A `time` is `HH:MM:SS` with the fraction PostgreSQL prints (up to six
//! digits, trailing zeros dropped: `07:30:00`, `07:30:00.25`), which is
//! also its output whatever the session's `DateStyle`. `24:00:00` is a
//! time, as in PostgreSQL.
//!
//! An `interval` is PostgreSQL's three fields (months, days, microseconds:
//! `1 day` and `24 hours` are different values, though they compare
//! equal) written as ISO 8601 with designators, exactly as PostgreSQL
//! prints it under `IntervalStyle = iso_8601`: `P1Y2M3DT4H5M6.5S`,
//! `P-1Y-2M`, `PT-0.5S`, `PT0S`. Each part carries its own sign, and
//! PostgreSQL reads the text back as the same three fields whatever the
//! session's `IntervalStyle`. Input takes the same form with any integer
//! parts (`P14M`, `PT36H`, `P2W`), a fraction only on the seconds, and is
//! put in the canonical form (`P1Y2M`, `PT36H`, `P14D`): weeks become days,
//! and nothing else carries over, as in PostgreSQL.
//!
//! Values are read from PostgreSQL as numbers (see
//! [`crate::conversion::Conversion::read_expr`]), never through the
//! session's output style.

const MICROS_PER_SECOND: i64 = 1_000_000;
const MICROS_PER_MINUTE: i64 = 60 * MICROS_PER_SECOND;
const MICROS_PER_HOUR: i64 = 60 * MICROS_PER_MINUTE;

/// A time of day's canonical text from its microseconds since midnight
/// (0 to 24 hours).
pub fn format_time(micros: i64) -> String {
    let (hours, rest) = (micros / MICROS_PER_HOUR, micros % MICROS_PER_HOUR);
    let (minutes, rest) = (rest / MICROS_PER_MINUTE, rest % MICROS_PER_MINUTE);
    let mut text = format!("{hours:02}:{minutes:02}:");
    push_seconds(&mut text, rest, 2);
    text
}

/// Seconds and their fraction (`micros` >= 0): zero-padded to `width`
/// digits, the fraction's trailing zeros dropped.
fn push_seconds(text: &mut String, micros: i64, width: usize) {
    let (seconds, fraction) = (micros / MICROS_PER_SECOND, micros % MICROS_PER_SECOND);
    text.push_str(&format!("{seconds:0width$}"));
    if fraction != 0 {
        let digits = format!(".{fraction:06}");
        text.push_str(digits.trim_end_matches('0'));
    }
}

/// The microseconds of a fraction's digits (at most six that count; any
/// past the sixth must be zeros, which PostgreSQL would round away).
fn fraction_micros(digits: &str, whole: &str) -> Result<i64, String> {
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return Err(format!("{whole:?}: the fraction must be digits"));
    }
    let (kept, past) = digits.split_at(digits.len().min(6));
    if past.bytes().any(|b| b != b'0') {
        return Err(format!(
            "{whole:?} has digits below the microsecond: PostgreSQL would round them"
        ));
    }
    let micros: i64 = kept.parse().map_err(|_| format!("{whole:?}"))?;
    Ok(micros * 10_i64.pow(6 - kept.len() as u32))
}

/// Microseconds since midnight of a time of day: `HH:MM`, `HH:MM:SS` or
/// `HH:MM:SS.ffffff`, in range (`24:00:00` the largest).
pub fn parse_time(text: &str) -> Result<i64, String> {
    let bad = || format!("{text:?} is not a time of day (HH:MM:SS[.ffffff])");
    let (clock, fraction) = match text.split_once('.') {
        Some((clock, fraction)) => (clock, Some(fraction)),
        None => (text, None),
    };
    let parts: Vec<&str> = clock.split(':').collect();
    if !(2..=3).contains(&parts.len()) || (parts.len() == 2 && fraction.is_some()) {
        return Err(bad());
    }
    let number = |part: &str, max: i64| -> Result<i64, String> {
        if part.len() != 2 || !part.bytes().all(|b| b.is_ascii_digit()) {
            return Err(bad());
        }
        let n: i64 = part.parse().map_err(|_| bad())?;
        if n > max {
            return Err(format!("{text:?} is out of range for a time of day"));
        }
        Ok(n)
    };
    let hours = number(parts[0], 24)?;
    let minutes = number(parts[1], 59)?;
    let seconds = parts.get(2).map_or(Ok(0), |s| number(s, 59))?;
    let fraction = fraction.map_or(Ok(0), |f| fraction_micros(f, text))?;
    let micros = hours * MICROS_PER_HOUR
        + minutes * MICROS_PER_MINUTE
        + seconds * MICROS_PER_SECOND
        + fraction;
    if micros > 24 * MICROS_PER_HOUR {
        return Err(format!("{text:?} is out of range for a time of day"));
    }
    Ok(micros)
}

/// The canonical text of a time of day written in any form
/// [`parse_time`] takes.
pub fn canonical_time(text: &str) -> Result<String, String> {
    parse_time(text).map(format_time)
}

/// Whether a canonical time fits a `time(p)` of type modifier `typmod`:
/// PostgreSQL rounds the fraction past `p` digits.
pub fn time_fits(text: &str, typmod: i32) -> Result<(), String> {
    let micros = parse_time(text)?;
    fraction_fits(text, micros, typmod)
}

/// `micros` keeps no digit past the precision `typmod` (-1: six).
fn fraction_fits(text: &str, micros: i64, typmod: i32) -> Result<(), String> {
    let Ok(keeps) = u32::try_from(typmod & 0xffff) else {
        return Ok(());
    };
    if typmod < 0 || keeps >= 6 {
        return Ok(());
    }
    if micros % 10_i64.pow(6 - keeps) != 0 {
        return Err(format!(
            "{text} has more fraction digits than a precision of {keeps} keeps: PostgreSQL would round it"
        ));
    }
    Ok(())
}

/// PostgreSQL's three fields of an interval.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Interval {
    pub months: i32,
    pub days: i32,
    pub micros: i64,
}

impl Interval {
    /// The canonical text: PostgreSQL's `iso_8601` output.
    pub fn format(self) -> String {
        let (years, months) = (self.months / 12, self.months % 12);
        let time = self.micros;
        let (hours, rest) = (time / MICROS_PER_HOUR, time % MICROS_PER_HOUR);
        let (minutes, rest) = (rest / MICROS_PER_MINUTE, rest % MICROS_PER_MINUTE);
        if self.months == 0 && self.days == 0 && time == 0 {
            return "PT0S".into();
        }
        let mut text = String::from("P");
        let part = |text: &mut String, n: i64, unit: char| {
            if n != 0 {
                text.push_str(&format!("{n}{unit}"));
            }
        };
        part(&mut text, years.into(), 'Y');
        part(&mut text, months.into(), 'M');
        part(&mut text, self.days.into(), 'D');
        if time != 0 {
            text.push('T');
        }
        part(&mut text, hours, 'H');
        part(&mut text, minutes, 'M');
        if rest != 0 {
            if rest < 0 {
                text.push('-');
            }
            push_seconds(&mut text, rest.abs(), 1);
            text.push('S');
        }
        text
    }

    /// An interval written as ISO 8601 with designators (see the module's
    /// docs).
    pub fn parse(text: &str) -> Result<Interval, String> {
        let bad = |why: &str| {
            format!("{text:?} is not an ISO 8601 interval such as \"P1Y2M3DT4H5M6.5S\": {why}")
        };
        let rest = text
            .strip_prefix('P')
            .ok_or_else(|| bad("it must start with P"))?;
        if rest.is_empty() {
            return Err(bad("it has no parts"));
        }
        let (date, time) = match rest.split_once('T') {
            Some((_, "")) => return Err(bad("nothing after T")),
            Some((date, time)) => (date, Some(time)),
            None => (rest, None),
        };
        let overflow = || format!("{text:?} is out of range for an interval");
        let (mut months, mut days, mut micros) = (0_i64, 0_i64, 0_i64);
        for (number, unit) in parts(date).map_err(|e| bad(&e))? {
            let n: i64 = number
                .parse()
                .map_err(|_| bad("only the seconds may have a fraction"))?;
            let (total, scale) = match unit {
                'Y' => (&mut months, 12),
                'M' => (&mut months, 1),
                'W' => (&mut days, 7),
                'D' => (&mut days, 1),
                _ => return Err(bad(&format!("{unit} is not a date part (Y, M, W, D)"))),
            };
            *total = n
                .checked_mul(scale)
                .and_then(|n| total.checked_add(n))
                .ok_or_else(overflow)?;
        }
        for (number, unit) in parts(time.unwrap_or("")).map_err(|e| bad(&e))? {
            let n = match unit {
                'S' => signed_seconds(number, text)?,
                'H' | 'M' => {
                    let n: i64 = number
                        .parse()
                        .map_err(|_| bad("only the seconds may have a fraction"))?;
                    let scale = if unit == 'H' {
                        MICROS_PER_HOUR
                    } else {
                        MICROS_PER_MINUTE
                    };
                    n.checked_mul(scale).ok_or_else(overflow)?
                }
                _ => return Err(bad(&format!("{unit} is not a time part (H, M, S)"))),
            };
            micros = micros.checked_add(n).ok_or_else(overflow)?;
        }
        Ok(Interval {
            months: i32::try_from(months).map_err(|_| overflow())?,
            days: i32::try_from(days).map_err(|_| overflow())?,
            micros,
        })
    }

    /// The interval PostgreSQL reads as `months days micros` (three
    /// integers, as [`crate::conversion::Conversion::read_expr`] gives).
    pub fn from_fields(text: &str) -> Result<Interval, String> {
        let bad = || format!("{text:?} is not an interval's stored fields");
        let mut fields = text.split(' ');
        let mut next = || fields.next().ok_or_else(bad);
        let (months, days, micros) = (next()?, next()?, next()?);
        Ok(Interval {
            months: months.parse().map_err(|_| bad())?,
            days: days.parse().map_err(|_| bad())?,
            micros: micros.parse().map_err(|_| bad())?,
        })
    }

    /// Whether it fits an `interval` column of type modifier `typmod`
    /// unchanged: its fields (`YEAR TO MONTH`, `DAY`, `HOUR TO MINUTE`...)
    /// drop the parts below them, and its precision the fraction's digits
    /// past it, as PostgreSQL's `AdjustIntervalForTypmod` does.
    pub fn fits(self, typmod: i32, text: &str) -> Result<(), String> {
        if typmod < 0 {
            return Ok(());
        }
        const MONTH: i32 = 1 << 1;
        const YEAR: i32 = 1 << 2;
        const DAY: i32 = 1 << 3;
        const HOUR: i32 = 1 << 10;
        const MINUTE: i32 = 1 << 11;
        const SECOND: i32 = 1 << 12;
        const FULL: i32 = 0x7fff;
        let range = (typmod >> 16) & 0x7fff;
        let dropped = |what: &str| {
            Err(format!(
                "{text} has {what}, which the column's interval fields drop: PostgreSQL would change it"
            ))
        };
        let whole = |unit: i64| self.micros % unit == 0;
        match range {
            FULL => {}
            YEAR if self.months % 12 != 0 => return dropped("months"),
            r if (r == YEAR || r == MONTH || r == YEAR | MONTH)
                && (self.days != 0 || self.micros != 0) =>
            {
                return dropped("days or a time")
            }
            DAY if self.micros != 0 => return dropped("a time"),
            r if (r == HOUR || r == DAY | HOUR) && !whole(MICROS_PER_HOUR) => {
                return dropped("minutes or seconds")
            }
            r if (r == MINUTE || r == HOUR | MINUTE || r == DAY | HOUR | MINUTE)
                && !whole(MICROS_PER_MINUTE) =>
            {
                return dropped("seconds")
            }
            _ => {}
        }
        if range == FULL || range & SECOND != 0 {
            return fraction_fits(text, self.micros, typmod);
        }
        Ok(())
    }
}

/// The canonical text of an interval written in any form
/// [`Interval::parse`] takes.
pub fn canonical_interval(text: &str) -> Result<String, String> {
    Interval::parse(text).map(Interval::format)
}

/// `1Y-2M` as (number, unit) pairs; each number may be signed, and the
/// seconds' may have a fraction.
fn parts(text: &str) -> Result<Vec<(&str, char)>, String> {
    let mut out = Vec::new();
    let mut start = 0;
    for (i, c) in text.char_indices() {
        if c.is_ascii_alphabetic() {
            let number = &text[start..i];
            if number.is_empty() || number == "-" || number == "+" {
                return Err(format!("{c} has no number"));
            }
            out.push((number, c));
            start = i + 1;
        }
    }
    if start != text.len() {
        return Err(format!("{:?} has no unit", &text[start..]));
    }
    Ok(out)
}

/// Seconds with an optional sign and fraction, in microseconds.
fn signed_seconds(number: &str, whole: &str) -> Result<i64, String> {
    let (negative, digits) = match number.strip_prefix('-') {
        Some(digits) => (true, digits),
        None => (false, number.strip_prefix('+').unwrap_or(number)),
    };
    let (seconds, fraction) = digits.split_once('.').unwrap_or((digits, ""));
    if seconds.is_empty() || !seconds.bytes().all(|b| b.is_ascii_digit()) {
        return Err(format!("{whole:?}: {number:?} is not a number of seconds"));
    }
    let overflow = || format!("{whole:?} is out of range for an interval");
    let seconds: i64 = seconds.parse().map_err(|_| overflow())?;
    let fraction = if fraction.is_empty() {
        0
    } else {
        fraction_micros(fraction, whole)?
    };
    let micros = seconds
        .checked_mul(MICROS_PER_SECOND)
        .and_then(|m| m.checked_add(fraction))
        .ok_or_else(overflow)?;
    Ok(if negative { -micros } else { micros })
}

/// A `bytea` value's canonical text, `\x` and lowercase hex digits (what
/// PostgreSQL prints under `bytea_output = hex`, and reads whatever the
/// setting).
pub fn canonical_bytea(text: &str) -> Result<String, String> {
    let hex = text
        .strip_prefix("\\x")
        .ok_or_else(|| format!("{text:?} is not bytea in hex form (\"\\x\" and hex digits)"))?;
    if !hex.len().is_multiple_of(2) || !hex.bytes().all(|b| b.is_ascii_hexdigit()) {
        return Err(format!(
            "{text:?} is not bytea in hex form: after \"\\x\", pairs of hex digits"
        ));
    }
    Ok(format!("\\x{}", hex.to_ascii_lowercase()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn times_of_day_have_one_form() {
        for (text, canonical) in [
            ("07:30", "07:30:00"),
            ("07:30:05", "07:30:05"),
            ("07:30:05.250", "07:30:05.25"),
            ("23:59:59.999999", "23:59:59.999999"),
            ("00:00:00.000000000", "00:00:00"),
            ("24:00:00", "24:00:00"),
        ] {
            assert_eq!(canonical_time(text).unwrap(), canonical, "{text}");
        }
        for bad in [
            "7:30",
            "24:00:01",
            "12:60:00",
            "12:00:60",
            "12:00:00.0000001",
            "12:00.5",
            "noon",
            "12:00:00.",
            "",
        ] {
            assert!(canonical_time(bad).is_err(), "{bad:?}");
        }
        assert!(time_fits("07:30:05.25", 2).is_ok());
        assert!(time_fits("07:30:05.25", 1).is_err());
        assert!(time_fits("07:30:05", 0).is_ok());
        assert!(time_fits("07:30:05.000001", -1).is_ok());
    }

    #[test]
    fn intervals_print_as_postgresql_prints_iso_8601() {
        let i = |months, days, micros| Interval {
            months,
            days,
            micros,
        };
        for (interval, text) in [
            (i(0, 0, 0), "PT0S"),
            (i(14, 3, 14_706_500_000), "P1Y2M3DT4H5M6.5S"),
            (i(-14, 0, 0), "P-1Y-2M"),
            (i(0, 0, -500_000), "PT-0.5S"),
            (i(0, 0, -3_600_000_001), "PT-1H-0.000001S"),
            (i(0, 1, 0), "P1D"),
            (i(0, 0, 86_400_000_000), "PT24H"),
            (i(1, -1, 60_000_000), "P1M-1DT1M"),
            (
                i(i32::MIN, i32::MIN, i64::MIN),
                "P-178956970Y-8M-2147483648DT-2562047788H-54.775808S",
            ),
        ] {
            assert_eq!(interval.format(), text, "{interval:?}");
            assert_eq!(Interval::parse(text).unwrap(), interval, "{text}");
        }
    }

    #[test]
    fn interval_input_takes_any_integer_parts() {
        for (text, canonical) in [
            ("P14M", "P1Y2M"),
            ("PT36H", "PT36H"),
            ("P2W", "P14D"),
            ("PT90M", "PT1H30M"),
            ("PT1.500S", "PT1.5S"),
            ("P1Y-12M", "PT0S"),
            ("PT+5S", "PT5S"),
        ] {
            assert_eq!(canonical_interval(text).unwrap(), canonical, "{text}");
        }
        for bad in [
            "",
            "P",
            "1 day",
            "PT",
            "P1.5Y",
            "P1H",
            "PT1D",
            "P1",
            "PTS",
            "P99999999999Y",
            "PT0.0000001S",
            "P1Y2",
        ] {
            assert!(canonical_interval(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn intervals_fit_their_fields_and_precision() {
        let typmod = |range: i32, precision: i32| (range << 16) | precision;
        let year_to_month = typmod((1 << 2) | (1 << 1), 0xffff);
        let day = typmod(1 << 3, 0xffff);
        let hour_to_minute = typmod((1 << 10) | (1 << 11), 0xffff);
        let full_2 = typmod(0x7fff, 2);
        let fits = |text: &str, typmod: i32| Interval::parse(text).unwrap().fits(typmod, text);
        assert!(fits("P1Y2M", year_to_month).is_ok());
        assert!(fits("P1Y2M1D", year_to_month).is_err());
        assert!(fits("P3D", day).is_ok());
        assert!(fits("P3DT1H", day).is_err());
        assert!(fits("PT2H30M", hour_to_minute).is_ok());
        assert!(fits("PT2H30M1S", hour_to_minute).is_err());
        assert!(fits("PT1.25S", full_2).is_ok());
        assert!(fits("PT1.255S", full_2).is_err());
        assert!(fits("PT1.255S", -1).is_ok());
    }

    #[test]
    fn bytea_is_lowercase_hex() {
        assert_eq!(canonical_bytea("\\xDEadBEEF").unwrap(), "\\xdeadbeef");
        assert_eq!(canonical_bytea("\\x").unwrap(), "\\x");
        for bad in ["deadbeef", "\\xabc", "\\xzz", "\\000"] {
            assert!(canonical_bytea(bad).is_err(), "{bad:?}");
        }
    }
}
