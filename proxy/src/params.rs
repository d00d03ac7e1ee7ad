//! A `Bind`'s parameters as the text PostgreSQL reads them, the way
//! `query run` binds them: sampling, serving and writing through the
//! facade all evaluate a statement with its `$n` written as literals.
//!
//! A parameter in text form is taken as it is. One in binary form is read
//! for the types whose binary form PostgreSQL documents and drivers send:
//! booleans, integers, floats, `numeric`, text-like types, `uuid`,
//! `json`/`jsonb`, `date`, `timestamp`/`timestamptz`, `time`/`timetz`,
//! `interval`, `bytea`, the network types, `money`, the geometric and bit
//! types, `tsvector`, `tsquery`, the range and multirange types over those, `hstore` (an extension's
//! type, whose OID each database gives it: [`Extensions`]), composite
//! types made with `CREATE TYPE ... AS` (their OIDs read likewise) whose
//! fields are any of these, and arrays of them, of any dimensions (sqlx, psycopg's `%b`, asyncpg and JDBC
//! bind these in binary). Anything else, or a parameter whose type the
//! `Parse` left unspecified, is not read: the statement is then not
//! sampled or served, and a write is refused (`0A000`) rather than guessed
//! at.

use bytes::Bytes;

mod containers;
mod database_types;

use containers::{array_text, multirange_text, range_text};
pub(crate) use database_types::Extensions;
use database_types::{hstore_text, record_text, BUILT_IN};

/// The parameters of a `Bind` as text, the way `query run` binds them, or
/// `None` when one cannot be read as text (a NULL, or a binary value of a
/// type whose form is not read here). `types` are the `Parse`'s type OIDs
/// (0 or missing: unspecified).
pub(crate) fn params_text(
    types: &[u32],
    formats: &[i16],
    params: &[Option<Bytes>],
    extensions: &Extensions,
) -> Option<Vec<String>> {
    params_nullable(types, formats, params, extensions)?
        .into_iter()
        .collect()
}

/// [`params_text`], a NULL read as `None`; `None` when a value cannot be
/// read as text.
pub(crate) fn params_nullable(
    types: &[u32],
    formats: &[i16],
    params: &[Option<Bytes>],
    extensions: &Extensions,
) -> Option<Vec<Option<String>>> {
    params
        .iter()
        .enumerate()
        .map(|(i, value)| {
            let Some(value) = value.as_ref() else {
                return Some(None);
            };
            // One format code applies to all; none means text.
            let format = match formats {
                [] => 0,
                [one] => *one,
                many => *many.get(i)?,
            };
            if format == 0 {
                return String::from_utf8(value.to_vec()).ok().map(Some);
            }
            binary_text(types.get(i).copied().unwrap_or(0), value, extensions).map(Some)
        })
        .collect()
}

/// A binary parameter of type `oid` as PostgreSQL's text form.
fn binary_text(oid: u32, value: &[u8], extensions: &Extensions) -> Option<String> {
    let fixed = |n: usize| (value.len() == n).then_some(value);
    Some(match oid {
        16 => (fixed(1)?[0] != 0).to_string(),
        20 => i64::from_be_bytes(fixed(8)?.try_into().ok()?).to_string(),
        21 => i16::from_be_bytes(fixed(2)?.try_into().ok()?).to_string(),
        23 => i32::from_be_bytes(fixed(4)?.try_into().ok()?).to_string(),
        // float4 and float8, exact: Rust prints the shortest text that
        // reads back as the same value, as PostgreSQL does.
        700 => float_text(
            f64::from(f32::from_be_bytes(fixed(4)?.try_into().ok()?)),
            true,
        ),
        701 => float_text(f64::from_be_bytes(fixed(8)?.try_into().ok()?), false),
        // text, varchar, bpchar, name, json: the text itself.
        25 | 1043 | 1042 | 19 | 114 => String::from_utf8(value.to_vec()).ok()?,
        // jsonb: a version byte (1), then the text.
        3802 => match value.split_first()? {
            (1, text) => String::from_utf8(text.to_vec()).ok()?,
            _ => return None,
        },
        2950 => uuid::Uuid::from_slice(value).ok()?.to_string(),
        1700 => numeric_text(value)?,
        1082 => date_text(i32::from_be_bytes(fixed(4)?.try_into().ok()?))?,
        1114 | 1184 => timestamp_text(i64::from_be_bytes(fixed(8)?.try_into().ok()?), oid == 1184)?,
        // time: microseconds since midnight.
        1083 => {
            let micros = i64::from_be_bytes(fixed(8)?.try_into().ok()?);
            (0..=86_400_000_000).contains(&micros).then_some(())?;
            legacy::duration::format_time(micros)
        }
        // timetz: microseconds since midnight, then the offset in
        // seconds west of UTC.
        1266 => {
            let value = fixed(12)?;
            let micros = i64::from_be_bytes(value[..8].try_into().ok()?);
            let west = i32::from_be_bytes(value[8..].try_into().ok()?);
            (0..=86_400_000_000).contains(&micros).then_some(())?;
            legacy::zoned::format_timetz(micros, west.checked_neg()?)
        }
        // interval: microseconds, days, months.
        1186 => {
            let value = fixed(16)?;
            legacy::duration::Interval {
                micros: i64::from_be_bytes(value[..8].try_into().ok()?),
                days: i32::from_be_bytes(value[8..12].try_into().ok()?),
                months: i32::from_be_bytes(value[12..].try_into().ok()?),
            }
            .format()
        }
        // inet, cidr: family (2: IPv4, 3: IPv6), mask length, a cidr
        // flag, the address's length, the address.
        869 | 650 => match value {
            [family @ (2 | 3), bits, _, len, address @ ..]
                if usize::from(*len) == address.len() && (*family == 2) == (address.len() == 4) =>
            {
                legacy::network::Inet::new(address, *bits)?.format(oid == 650)
            }
            _ => return None,
        },
        // macaddr, macaddr8: the bytes.
        829 | 774 => {
            let len = if oid == 829 { 6 } else { 8 };
            fixed(len)?
                .iter()
                .map(|b| format!("{b:02x}"))
                .collect::<Vec<_>>()
                .join(":")
        }
        // money: the amount in cents (the layout keeps two fraction
        // digits; it refuses a server whose `lc_monetary` keeps others).
        790 => {
            let cents = i64::from_be_bytes(fixed(8)?.try_into().ok()?);
            let sign = if cents < 0 { "-" } else { "" };
            let cents = cents.unsigned_abs();
            format!("{sign}{}.{:02}", cents / 100, cents % 100)
        }
        600..=604 | 628 | 718 => geometric_text(oid, value)?,
        // bit, varbit: the length in bits, then the bits, high first.
        1560 | 1562 => {
            let (len, bytes) = value.split_first_chunk::<4>()?;
            let len = usize::try_from(i32::from_be_bytes(*len)).ok()?;
            (bytes.len() == len.div_ceil(8)).then_some(())?;
            (0..len)
                .map(|i| {
                    if bytes[i / 8] >> (7 - i % 8) & 1 == 1 {
                        '1'
                    } else {
                        '0'
                    }
                })
                .collect()
        }
        // int4range, int8range, numrange, daterange, tsrange, tstzrange.
        3904 => range_text(23, value)?,
        3926 => range_text(20, value)?,
        3906 => range_text(1700, value)?,
        3912 => range_text(1082, value)?,
        3908 => range_text(1114, value)?,
        3910 => range_text(1184, value)?,
        // The multiranges over those.
        4451 => multirange_text(23, value)?,
        4536 => multirange_text(20, value)?,
        4532 => multirange_text(1700, value)?,
        4535 => multirange_text(1082, value)?,
        4533 => multirange_text(1114, value)?,
        4534 => multirange_text(1184, value)?,
        3614 => tsvector_text(value)?,
        3615 => legacy::tsquery::from_send(value)?,
        oid if extensions.is_hstore(oid) => hstore_text(value)?,
        oid if extensions.is_composite(oid) => record_text(value, extensions)?,
        17 => {
            let mut text = String::with_capacity(2 + value.len() * 2);
            text.push_str("\\x");
            for b in value {
                text.push_str(&format!("{b:02x}"));
            }
            text
        }
        _ => return array_text(oid, value, extensions),
    })
}

/// A `tsvector`'s binary form (`tsvectorsend`: the count of lexemes,
/// then each lexeme's text ending in a NUL, its count of positions and
/// each position, the weight in its two high bits) as the text its input
/// reads. Only a value `tsvectorout` could have sent is read: lexemes
/// ascending and each once, positions ascending, none 0, at most 256.
fn tsvector_text(value: &[u8]) -> Option<String> {
    let (count, mut rest) = value.split_first_chunk::<4>()?;
    let count = usize::try_from(i32::from_be_bytes(*count)).ok()?;
    let mut out = String::new();
    let mut previous: Option<&[u8]> = None;
    for i in 0..count {
        let end = rest.iter().position(|&b| b == 0)?;
        let (lexeme, after) = (&rest[..end], &rest[end + 1..]);
        if lexeme.is_empty() || previous.is_some_and(|p| p >= lexeme) {
            return None;
        }
        previous = Some(lexeme);
        let (n, after) = after.split_first_chunk::<2>()?;
        let n = usize::from(u16::from_be_bytes(*n));
        if n > 256 || after.len() < 2 * n {
            return None;
        }
        if i > 0 {
            out.push(' ');
        }
        legacy::tsvector::push_lexeme(&mut out, std::str::from_utf8(lexeme).ok()?);
        let mut last = 0;
        for (j, p) in after[..2 * n].chunks_exact(2).enumerate() {
            let p = u16::from_be_bytes([p[0], p[1]]);
            let at = p & 0x3fff;
            if at <= last {
                return None;
            }
            last = at;
            out.push(if j == 0 { ':' } else { ',' });
            out.push_str(&at.to_string());
            out.push_str(["", "C", "B", "A"][usize::from(p >> 14)]);
        }
        rest = &after[2 * n..];
    }
    rest.is_empty().then_some(out)
}

/// A geometric type's binary form (its doubles, a path's closed flag and
/// a path's or polygon's point count) as the text its input reads.
fn geometric_text(oid: u32, value: &[u8]) -> Option<String> {
    let doubles = |bytes: &[u8]| -> Option<Vec<String>> {
        bytes.len().is_multiple_of(8).then_some(())?;
        Some(
            bytes
                .chunks_exact(8)
                .map(|c| {
                    float_text(
                        f64::from_be_bytes(c.try_into().expect("eight bytes")),
                        false,
                    )
                })
                .collect(),
        )
    };
    let points = |xy: &[String]| -> String {
        xy.chunks(2)
            .map(|p| format!("({},{})", p[0], p.get(1).map_or("", String::as_str)))
            .collect::<Vec<_>>()
            .join(",")
    };
    // A path (1 byte, closed or not) or polygon: the count, then points.
    let counted = |bytes: &[u8]| -> Option<Vec<String>> {
        let (n, rest) = bytes.split_first_chunk::<4>()?;
        let n = usize::try_from(i32::from_be_bytes(*n)).ok()?;
        (n >= 1 && rest.len() == n.checked_mul(16)?).then_some(())?;
        doubles(rest)
    };
    let fixed = |n: usize| (value.len() == n * 8).then(|| doubles(value)).flatten();
    Some(match oid {
        600 => points(&fixed(2)?),
        601 => format!("[{}]", points(&fixed(4)?)),
        603 => points(&fixed(4)?),
        628 => format!("{{{}}}", fixed(3)?.join(",")),
        718 => {
            let c = fixed(3)?;
            format!("<({},{}),{}>", c[0], c[1], c[2])
        }
        602 => {
            let (closed, rest) = value.split_first()?;
            let xy = counted(rest)?;
            match closed {
                0 => format!("[{}]", points(&xy)),
                1 => format!("({})", points(&xy)),
                _ => return None,
            }
        }
        604 => format!("({})", points(&counted(value)?)),
        _ => return None,
    })
}

/// A float as PostgreSQL reads it back to the same value (`NaN`,
/// `Infinity` spelled its way).
fn float_text(x: f64, single: bool) -> String {
    if x.is_nan() {
        "NaN".into()
    } else if x.is_infinite() {
        if x > 0.0 { "Infinity" } else { "-Infinity" }.into()
    } else if single {
        // The shortest text of the f32, not of its f64 widening.
        (x as f32).to_string()
    } else {
        x.to_string()
    }
}

/// `numeric`'s binary form: digit count, weight (of the first base-10000
/// digit), sign, display scale, then the base-10000 digits.
fn numeric_text(value: &[u8]) -> Option<String> {
    let word = |at: usize| -> Option<u16> {
        value
            .get(at..at + 2)
            .map(|b| u16::from_be_bytes([b[0], b[1]]))
    };
    let ndigits = usize::from(word(0)?);
    let weight = i32::from(word(2)? as i16);
    let sign = word(4)?;
    let dscale = usize::from(word(6)?);
    if value.len() != 8 + 2 * ndigits {
        return None;
    }
    match sign {
        0x0000 | 0x4000 => {}
        0xC000 => return Some("NaN".into()),
        0xD000 => return Some("Infinity".into()),
        0xF000 => return Some("-Infinity".into()),
        _ => return None,
    }
    let digits: Vec<u16> = (0..ndigits)
        .map(|i| word(8 + 2 * i))
        .collect::<Option<_>>()?;
    if digits.iter().any(|&d| d > 9999) {
        return None;
    }
    // The base-10000 digit at position `g` (0: the first), zero where
    // none is stored.
    let at = |g: i32| -> u16 {
        usize::try_from(g)
            .ok()
            .and_then(|g| digits.get(g).copied())
            .unwrap_or(0)
    };
    let mut text = String::new();
    if sign == 0x4000 {
        text.push('-');
    }
    if weight < 0 {
        text.push('0');
    } else {
        text.push_str(&at(0).to_string());
        for g in 1..=weight {
            text.push_str(&format!("{:04}", at(g)));
        }
    }
    if dscale > 0 {
        let mut fraction = String::new();
        let mut g = weight + 1;
        while fraction.len() < dscale {
            fraction.push_str(&format!("{:04}", at(g)));
            g += 1;
        }
        fraction.truncate(dscale);
        text.push('.');
        text.push_str(&fraction);
    }
    Some(text)
}

/// Days from 1970-01-01 to PostgreSQL's epoch, 2000-01-01.
const EPOCH_DAYS: i64 = 10_957;

/// `date`'s binary form: days since 2000-01-01 (the extremes are the
/// infinities). Years before 1 AD are not read.
fn date_text(days: i32) -> Option<String> {
    match days {
        i32::MAX => return Some("infinity".into()),
        i32::MIN => return Some("-infinity".into()),
        _ => {}
    }
    let micros = (i128::from(days) + i128::from(EPOCH_DAYS)) * 86_400_000_000;
    let text = legacy::time::format_timestamp(micros, false).ok()?;
    let date = &text[..text.find('T')?];
    (!date.starts_with('-')).then(|| date.to_string())
}

/// `timestamp`'s and `timestamptz`'s binary form: microseconds since
/// 2000-01-01 (UTC for `timestamptz`).
fn timestamp_text(micros: i64, with_zone: bool) -> Option<String> {
    match micros {
        i64::MAX => return Some("infinity".into()),
        i64::MIN => return Some("-infinity".into()),
        _ => {}
    }
    let since_1970 = i128::from(micros) + i128::from(EPOCH_DAYS) * 86_400_000_000;
    let text = legacy::time::format_timestamp(since_1970, with_zone).ok()?;
    (!text.starts_with('-')).then_some(text)
}

#[cfg(test)]
mod tests;
