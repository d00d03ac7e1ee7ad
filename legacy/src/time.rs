//! Timestamps and dates in their one canonical form.
//!
//! A `timestamptz` is the instant in UTC with exactly six fraction digits:
//! `2015-03-08T07:30:00.000000Z`. A `timestamp` (without time zone) is the
//! same without the `Z`. A `date` is `2015-03-08`. Years 0001–9999 are
//! four digits, and the text sorts like the time it names. PostgreSQL's
//! whole range is kept too, as ISO 8601 expanded years: `+294276-12-31…`
//! after 9999 and astronomical years before year 1 (`0000` is 1 BC,
//! `-4712` is 4713 BC); those texts do not sort with the others (an index
//! on such a field as a string orders them apart).
//!
//! Input may carry any UTC offset (`+05:30`, `-0800`, `Z`), a space instead
//! of the `T`, and 0–9 fraction digits; digits below the microsecond must
//! be zero, since PostgreSQL would round them away. The calendar arithmetic
//! is Howard Hinnant's `days_from_civil` (proleptic Gregorian), so no
//! time-zone database is involved: offsets are explicit in the text.
//!
//! Why not `jiff` (which the CLI uses for its own clock): its civil types
//! stop at years -9999..=9999, and PostgreSQL's timestamps run to 294276.
//! A value past 9999 is a value the app can store, so the canonical form
//! must carry it; splitting the calendar into jiff's range plus a
//! hand-written rest would give two sources of truth for one conversion.
//! The arithmetic is two short functions, tested round-trip over the whole
//! range against the formatter below.
//!
//! One job in one file (over 500 lines with its tests): parsing and
//! printing the three canonical forms share the calendar arithmetic and
//! the range checks, and splitting them would separate a form from its
//! inverse.

const MICROS_PER_SECOND: i64 = 1_000_000;
const SECONDS_PER_DAY: i64 = 86_400;

/// Days from 1970-01-01 to the given date.
fn days_from_civil(year: i64, month: u32, day: u32) -> i64 {
    let y = if month <= 2 { year - 1 } else { year };
    let era = if y >= 0 { y } else { y - 399 } / 400;
    let yoe = y - era * 400;
    let m = i64::from(month);
    let doy = (153 * (if m > 2 { m - 3 } else { m + 9 }) + 2) / 5 + i64::from(day) - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

/// The date `days` after 1970-01-01.
fn civil_from_days(days: i64) -> (i64, u32, u32) {
    let z = days + 719_468;
    let era = if z >= 0 { z } else { z - 146_096 } / 146_097;
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let month = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    let year = yoe + era * 400 + i64::from(month <= 2);
    (year, month, day)
}

fn days_in_month(year: i64, month: u32) -> u32 {
    match month {
        1 | 3 | 5 | 7 | 8 | 10 | 12 => 31,
        4 | 6 | 9 | 11 => 30,
        _ if (year % 4 == 0 && year % 100 != 0) || year % 400 == 0 => 29,
        _ => 28,
    }
}

/// A cursor over ASCII text, for the small grammars below.
struct Scanner<'a> {
    text: &'a [u8],
    at: usize,
}

impl Scanner<'_> {
    fn digits(&mut self, count: usize, what: &str) -> Result<u32, String> {
        let end = self.at + count;
        let slice = self
            .text
            .get(self.at..end)
            .filter(|s| s.iter().all(u8::is_ascii_digit))
            .ok_or_else(|| format!("expected {count} digits of {what}"))?;
        self.at = end;
        Ok(slice.iter().fold(0, |n, d| n * 10 + u32::from(d - b'0')))
    }

    fn expect(&mut self, byte: u8) -> Result<(), String> {
        if self.text.get(self.at) == Some(&byte) {
            self.at += 1;
            Ok(())
        } else {
            Err(format!("expected {:?}", byte as char))
        }
    }

    fn peek(&self) -> Option<u8> {
        self.text.get(self.at).copied()
    }

    fn done(&self) -> bool {
        self.at == self.text.len()
    }
}

/// The years PostgreSQL's `date` holds (4713 BC to 5874897 AD).
const DATE_YEARS: std::ops::RangeInclusive<i64> = -4712..=5_874_897;
/// The years its `timestamp` and `timestamptz` hold.
const TIMESTAMP_YEARS: std::ops::RangeInclusive<i64> = -4712..=294_276;

fn parse_date_part(s: &mut Scanner) -> Result<(i64, u32, u32), String> {
    // `YYYY`, or a signed expanded year of 4 digits or more.
    let sign = match s.peek() {
        Some(b'-') => {
            s.at += 1;
            Some(-1)
        }
        Some(b'+') => {
            s.at += 1;
            Some(1)
        }
        _ => None,
    };
    let start = s.at;
    while s.peek().is_some_and(|b| b.is_ascii_digit()) && s.at - start < 8 {
        s.at += 1;
    }
    let digits = &s.text[start..s.at];
    if digits.len() < 4 {
        return Err("expected 4 digits of the year".into());
    }
    let year: i64 = digits.iter().fold(0, |n, d| n * 10 + i64::from(d - b'0')) * sign.unwrap_or(1);
    s.expect(b'-')?;
    let month = s.digits(2, "the month")?;
    s.expect(b'-')?;
    let day = s.digits(2, "the day")?;
    if !DATE_YEARS.contains(&year) {
        return Err(format!(
            "year {year} is outside PostgreSQL's range (-4712, i.e. 4713 BC, to 5874897)"
        ));
    }
    if !(1..=12).contains(&month) {
        return Err(format!("month {month} does not exist"));
    }
    if day == 0 || day > days_in_month(year, month) {
        return Err(format!("{year:04}-{month:02} has no day {day}"));
    }
    Ok((year, month, day))
}

/// `YYYY-MM-DD`, with an expanded year outside 0000–9999.
fn date_text(year: i64, month: u32, day: u32) -> String {
    let mut text = String::with_capacity(32);
    push_date(&mut text, year, month, day);
    text
}

/// Appends [`date_text`]'s text. Every timestamp and date cell the backfill
/// copies is written through here, so it pushes digits instead of going
/// through `format!`.
fn push_date(text: &mut String, year: i64, month: u32, day: u32) {
    match year {
        0..=9999 => push_digits(text, year.unsigned_abs(), 4),
        10_000.. => {
            text.push('+');
            push_digits(text, year.unsigned_abs(), 1);
        }
        _ => {
            text.push('-');
            push_digits(text, year.unsigned_abs(), 4);
        }
    }
    text.push('-');
    push_digits(text, month.into(), 2);
    text.push('-');
    push_digits(text, day.into(), 2);
}

/// Appends `n` in decimal, padded with zeros to at least `width` digits.
fn push_digits(text: &mut String, n: u64, width: usize) {
    let mut digits = [0u8; 20];
    let mut at = digits.len();
    let mut rest = n;
    loop {
        at -= 1;
        digits[at] = b'0' + (rest % 10) as u8;
        rest /= 10;
        if rest == 0 {
            break;
        }
    }
    for _ in (digits.len() - at)..width {
        text.push('0');
    }
    // Only ASCII digits were written.
    text.extend(digits[at..].iter().map(|&d| char::from(d)));
}

/// The text PostgreSQL takes for a canonical date or timestamp: the same,
/// except that years before 1 are written as BC (`-4712-01-01` is
/// `4713-01-01 BC`) and an expanded year loses its `+`.
pub fn postgres_text(canonical: &str) -> String {
    if let Some(rest) = canonical.strip_prefix('+') {
        return rest.to_string();
    }
    let (negative, rest) = match canonical.strip_prefix('-') {
        Some(rest) => (true, rest),
        None => (false, canonical),
    };
    let Some((year, tail)) = rest.split_once('-') else {
        return canonical.to_string();
    };
    let Ok(year) = year.parse::<i64>() else {
        return canonical.to_string();
    };
    let year = if negative { -year } else { year };
    if year > 0 {
        return canonical.to_string();
    }
    // A timestamptz's `Z` goes before the era: `… 00:00:00Z BC`.
    let tail = tail.replace('T', " ");
    format!("{:04}-{tail} BC", 1 - year)
}

/// Checks a date and returns its canonical text: `YYYY-MM-DD` (an
/// expanded year outside 0000–9999), from that form or PostgreSQL's
/// `YYYY-MM-DD BC`.
pub fn canonical_date(text: &str) -> Result<String, String> {
    if matches!(text, "infinity" | "-infinity") {
        return Err(format!(
            "{text:?} cannot be a cell value: only finite dates are"
        ));
    }
    let (date, bc) = match text.strip_suffix(" BC") {
        Some(date) => (date, true),
        None => (text, false),
    };
    let mut s = Scanner {
        text: date.as_bytes(),
        at: 0,
    };
    let (year, month, day) = parse_date_part(&mut s).map_err(|e| format!("{text:?}: {e}"))?;
    if !s.done() {
        return Err(format!("{text:?} is not a date of the form YYYY-MM-DD"));
    }
    let year = match bc {
        true if year >= 1 => 1 - year,
        true => return Err(format!("{text:?}: a BC year starts at 1")),
        false => year,
    };
    Ok(date_text(year, month, day))
}

/// Days from 1970-01-01 to a date in [`canonical_date`]'s form.
pub fn date_days(canonical: &str) -> Result<i64, String> {
    let mut s = Scanner {
        text: canonical.as_bytes(),
        at: 0,
    };
    let (year, month, day) = parse_date_part(&mut s).map_err(|e| format!("{canonical:?}: {e}"))?;
    if !s.done() {
        return Err(format!(
            "{canonical:?} is not a date of the form YYYY-MM-DD"
        ));
    }
    Ok(days_from_civil(year, month, day))
}

/// The date `days` after 1970-01-01, in [`canonical_date`]'s form.
pub fn date_from_days(days: i64) -> String {
    let (year, month, day) = civil_from_days(days);
    date_text(year, month, day)
}

/// Parses a timestamp to microseconds since the epoch (UTC). With
/// `with_zone`, an offset (`Z`, `±HH:MM`, `±HHMM`, `±HH`) is required;
/// without it, none is allowed and the time is taken as is.
pub fn parse_timestamp(text: &str, with_zone: bool) -> Result<i128, String> {
    let fail = |e: String| {
        let form = if with_zone {
            "YYYY-MM-DDTHH:MM:SS[.ffffff]Z or ...+HH:MM"
        } else {
            "YYYY-MM-DDTHH:MM:SS[.ffffff], without an offset"
        };
        format!("{text:?} is not a timestamp of the form {form}: {e}")
    };
    let mut s = Scanner {
        text: text.as_bytes(),
        at: 0,
    };
    let (year, month, day) = parse_date_part(&mut s).map_err(fail)?;
    if !TIMESTAMP_YEARS.contains(&year) {
        return Err(fail(format!(
            "year {year} is outside the range of PostgreSQL's timestamps (-4712, i.e. 4713 BC, to 294276)"
        )));
    }
    match s.peek() {
        Some(b'T' | b't' | b' ') => s.at += 1,
        _ => return Err(fail("expected 'T' after the date".into())),
    }
    let hour = s.digits(2, "the hour").map_err(fail)?;
    s.expect(b':').map_err(fail)?;
    let minute = s.digits(2, "the minute").map_err(fail)?;
    s.expect(b':').map_err(fail)?;
    let second = s.digits(2, "the second").map_err(fail)?;
    if hour > 23 || minute > 59 || second > 59 {
        return Err(fail(format!(
            "{hour:02}:{minute:02}:{second:02} is not a time of day"
        )));
    }
    let mut micros: i64 = 0;
    if s.peek() == Some(b'.') {
        s.at += 1;
        let start = s.at;
        while s.peek().is_some_and(|b| b.is_ascii_digit()) {
            s.at += 1;
        }
        let fraction = &text[start..s.at];
        if fraction.is_empty() || fraction.len() > 9 {
            return Err(fail("the fraction takes 1-9 digits".into()));
        }
        let (kept, below) = fraction.split_at(fraction.len().min(6));
        if below.bytes().any(|b| b != b'0') {
            return Err(fail(
                "the time is finer than a microsecond, which would be rounded".into(),
            ));
        }
        micros = format!("{kept:0<6}")
            .parse()
            .expect("six ASCII digits are a number");
    }
    let offset_seconds: i64 = if with_zone {
        match s.peek() {
            Some(b'Z' | b'z') => {
                s.at += 1;
                0
            }
            Some(sign @ (b'+' | b'-')) => {
                s.at += 1;
                let hours = s.digits(2, "the offset hours").map_err(fail)?;
                let minutes = if s.done() {
                    0
                } else {
                    if s.peek() == Some(b':') {
                        s.at += 1;
                    }
                    s.digits(2, "the offset minutes").map_err(fail)?
                };
                if hours > 15 || minutes > 59 {
                    return Err(fail(format!(
                        "offset {hours:02}:{minutes:02} is out of range"
                    )));
                }
                let seconds = i64::from(hours * 3600 + minutes * 60);
                if sign == b'-' {
                    -seconds
                } else {
                    seconds
                }
            }
            _ => return Err(fail("a UTC offset is required (Z or +HH:MM)".into())),
        }
    } else {
        0
    };
    if !s.done() {
        let rest = &text[s.at..];
        return Err(fail(if with_zone {
            format!("unexpected {rest:?} at the end")
        } else {
            format!("unexpected {rest:?} at the end (the column has no time zone)")
        }));
    }
    let seconds = days_from_civil(year, month, day) * SECONDS_PER_DAY
        + i64::from(hour * 3600 + minute * 60 + second)
        - offset_seconds;
    // Past year 294247 the microseconds since 1970 no longer fit an i64
    // (PostgreSQL counts from 2000).
    let micros = i128::from(seconds) * i128::from(MICROS_PER_SECOND) + i128::from(micros);
    // An offset can push a time just inside the range outside of it.
    format_timestamp(micros, with_zone).map_err(fail)?;
    Ok(micros)
}

/// The canonical text of an instant given in microseconds since the epoch.
pub fn format_timestamp(micros: i128, with_zone: bool) -> Result<String, String> {
    let per_second = i128::from(MICROS_PER_SECOND);
    let seconds = i64::try_from(micros.div_euclid(per_second))
        .map_err(|_| format!("{micros} microseconds is outside every calendar"))?;
    let fraction = micros.rem_euclid(per_second);
    let days = seconds.div_euclid(SECONDS_PER_DAY);
    let of_day = seconds.rem_euclid(SECONDS_PER_DAY);
    let (year, month, day) = civil_from_days(days);
    if !TIMESTAMP_YEARS.contains(&year) {
        return Err(format!(
            "year {year} is outside the range of PostgreSQL's timestamps (-4712, i.e. 4713 BC, to 294276)"
        ));
    }
    let mut text = String::with_capacity(32);
    push_date(&mut text, year, month, day);
    text.push('T');
    // Both are in range: of_day in 0..86400, fraction in 0..1_000_000.
    let (of_day, fraction) = (of_day.unsigned_abs(), fraction.unsigned_abs() as u64);
    push_digits(&mut text, of_day / 3600, 2);
    text.push(':');
    push_digits(&mut text, of_day % 3600 / 60, 2);
    text.push(':');
    push_digits(&mut text, of_day % 60, 2);
    text.push('.');
    push_digits(&mut text, fraction, 6);
    if with_zone {
        text.push('Z');
    }
    Ok(text)
}

#[cfg(test)]
mod tests;
