//! Range types as cell values: `int4range`, `int8range`, `numrange`,
//! `daterange`, `tsrange`, `tstzrange`.
//!
//! A range is a JSON string in PostgreSQL's own range syntax, in one
//! canonical form whose bounds are their subtype's canonical JSON text:
//!
//! | SQL | JSON |
//! |---|---|
//! | `int4range(1, 5)`, `'[1,4]'` | `"[1,5)"`: a discrete range (integers, dates) is always `[lower,upper)`, as PostgreSQL keeps it |
//! | `numrange(1.50, 2, '(]')` | `"(1.5,2]"`: a continuous range keeps its brackets; numbers as a `numeric`'s canonical text |
//! | `tstzrange('2015-03-08 08:30+01', NULL)` | `"[2015-03-08T07:30:00.000000Z,)"`: timestamps as the `timestamptz` field's text, UTC; an unbounded side is empty, and exclusive |
//! | `daterange('2015-03-08', '2015-03-08')` | `"empty"` |
//!
//! Written values are checked and put in that form (`(0,3]` of integers
//! is `[1,4)`; a lower bound above the upper one is refused, as
//! PostgreSQL refuses it; a range with no point is `empty`), so the two
//! stores compare equal whichever way a value was written. Bounds
//! PostgreSQL keeps but a cell cannot are refused on read and on write:
//! an infinite timestamp or date (`infinity`, as the scalar fields refuse
//! it), a `NaN` or infinite number.
//!
//! Read from PostgreSQL through `lower()`, `upper()`, `lower_inc()`,
//! `upper_inc()` and `isempty()` ([`read_expr`]), each bound through its
//! subtype's own exact reading (a timestamp as microseconds), so the
//! session's `TimeZone` and `DateStyle` do not matter. Written as the
//! canonical text with each bound quoted ([`param`]).

use std::cmp::Ordering;

use crate::conversion::Conversion;
use crate::time;
use schemaless::decimal::{canonical_decimal, compare_decimal};

/// A range type's subtype.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Subtype {
    Int4,
    Int8,
    Numeric,
    Date,
    Timestamp,
    Timestamptz,
}

impl Subtype {
    /// The subtype of the range type `typname` (`pg_type.typname`).
    pub fn of_type(typname: &str) -> Option<Subtype> {
        Some(match typname {
            "int4range" => Subtype::Int4,
            "int8range" => Subtype::Int8,
            "numrange" => Subtype::Numeric,
            "daterange" => Subtype::Date,
            "tsrange" => Subtype::Timestamp,
            "tstzrange" => Subtype::Timestamptz,
            _ => return None,
        })
    }

    fn scalar(self) -> Conversion {
        match self {
            Subtype::Int4 => Conversion::Int4,
            Subtype::Int8 => Conversion::Int8,
            Subtype::Numeric => Conversion::Numeric,
            Subtype::Date => Conversion::Date,
            Subtype::Timestamp => Conversion::Timestamp,
            Subtype::Timestamptz => Conversion::Timestamptz,
        }
    }

    pub(crate) fn name(self) -> &'static str {
        match self {
            Subtype::Int4 => "int4range",
            Subtype::Int8 => "int8range",
            Subtype::Numeric => "numrange",
            Subtype::Date => "daterange",
            Subtype::Timestamp => "tsrange",
            Subtype::Timestamptz => "tstzrange",
        }
    }
}

/// One bound's value, comparable and, for a discrete subtype, steppable.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Point {
    Int(i64),
    /// A `numeric`'s canonical text.
    Decimal(String),
    /// Days since 1970-01-01.
    Day(i64),
    /// Microseconds since 1970-01-01 (UTC for a `timestamptz`).
    Micros(i128),
}

impl Point {
    pub(crate) fn cmp(&self, other: &Point) -> Ordering {
        match (self, other) {
            (Point::Int(a), Point::Int(b)) => a.cmp(b),
            (Point::Decimal(a), Point::Decimal(b)) => compare_decimal(a, b),
            (Point::Day(a), Point::Day(b)) => a.cmp(b),
            (Point::Micros(a), Point::Micros(b)) => a.cmp(b),
            // One subtype per range: never compared.
            _ => Ordering::Equal,
        }
    }

    /// The next value of a discrete subtype (`None` for a continuous one).
    fn next(&self, sub: Subtype) -> Result<Option<Point>, String> {
        Ok(Some(match self {
            Point::Int(n) => {
                let high = match sub {
                    Subtype::Int4 => i64::from(i32::MAX),
                    _ => i64::MAX,
                };
                if *n >= high {
                    return Err(format!("{n} + 1 is out of range for {}", sub.name()));
                }
                Point::Int(n + 1)
            }
            Point::Day(d) => Point::Day(d + 1),
            Point::Decimal(_) | Point::Micros(_) => return Ok(None),
        }))
    }

    /// The canonical JSON text of the bound.
    fn text(&self, sub: Subtype) -> Result<String, String> {
        Ok(match self {
            Point::Int(n) => n.to_string(),
            Point::Decimal(d) => d.clone(),
            Point::Day(d) => time::date_from_days(*d),
            Point::Micros(m) => time::format_timestamp(*m, sub == Subtype::Timestamptz)?,
        })
    }
}

/// A bound as written: its text, or unbounded.
type Side = Option<String>;

/// The parts of a range's text: `None` for `empty`, else (lower
/// inclusive, lower, upper, upper inclusive).
pub(crate) type Parts = Option<(bool, Side, Side, bool)>;

/// Splits PostgreSQL's range syntax: `empty`, or `[` or `(`, the lower
/// bound, `,`, the upper bound, `]` or `)`. A bound may be double-quoted
/// (with `\` or a doubled `"` escaping), else runs to the next `,` or
/// closing bracket; nothing at all is an unbounded side.
pub(crate) fn split(text: &str) -> Result<Parts, String> {
    let trimmed = text.trim();
    if trimmed.eq_ignore_ascii_case("empty") {
        return Ok(None);
    }
    let malformed = |why: &str| {
        format!(
            "{} is not a range ({why}); write it as PostgreSQL does, \"[lower,upper)\", \"(,upper]\" or \"empty\"",
            crate::conversion::shown(text)
        )
    };
    let mut chars = trimmed.chars().peekable();
    let lower_inc = match chars.next() {
        Some('[') => true,
        Some('(') => false,
        _ => return Err(malformed("it must start with [ or (")),
    };
    let mut bound = |stop: &[char]| -> Result<(Side, char), String> {
        let mut out = String::new();
        let mut quoted = false;
        let mut any = false;
        // Any character at all makes a bound, as in `range_parse`: only
        // nothing between the delimiters is unbounded, and a bound of
        // spaces alone is a value its subtype refuses.
        let mut spaces = false;
        while let Some(c) = chars.next() {
            match c {
                '"' if !quoted => {
                    quoted = true;
                    any = true;
                    loop {
                        match chars.next() {
                            Some('"') if chars.peek() == Some(&'"') => {
                                chars.next();
                                out.push('"');
                            }
                            Some('"') => break,
                            Some('\\') => match chars.next() {
                                Some(c) => out.push(c),
                                None => return Err(malformed("an unfinished escape")),
                            },
                            Some(c) => out.push(c),
                            None => return Err(malformed("an unfinished quoted bound")),
                        }
                    }
                }
                c if stop.contains(&c) => return Ok(((any || spaces).then_some(out), c)),
                '\\' => match chars.next() {
                    Some(c) => {
                        any = true;
                        out.push(c);
                    }
                    None => return Err(malformed("an unfinished escape")),
                },
                c if quoted && !c.is_whitespace() => {
                    return Err(malformed("text after a quoted bound"))
                }
                c => {
                    if !c.is_whitespace() || any {
                        any = true;
                        out.push(c);
                    } else {
                        spaces = true;
                    }
                }
            }
        }
        Err(malformed("it must end with ] or )"))
    };
    let (lower, _) = bound(&[','])?;
    let (upper, close) = bound(&[']', ')'])?;
    if chars.next().is_some() {
        return Err(malformed("text after its closing bracket"));
    }
    let trim = |side: Side| side.map(|s| s.trim_end().to_string());
    Ok(Some((lower_inc, trim(lower), trim(upper), close == ']')))
}

/// A bound's value from its JSON text (an app's, or a stored cell's).
pub(crate) fn point_from_json(sub: Subtype, text: &str) -> Result<Point, String> {
    Ok(match sub {
        Subtype::Int4 | Subtype::Int8 => {
            let n: i64 = text
                .parse()
                .map_err(|_| format!("{text:?} is not an integer"))?;
            if sub == Subtype::Int4 && i32::try_from(n).is_err() {
                return Err(format!("{n} is out of range for integer"));
            }
            Point::Int(n)
        }
        Subtype::Numeric => {
            let d = canonical_decimal(text)?;
            if matches!(d.as_str(), "NaN" | "Infinity" | "-Infinity") {
                return Err(format!(
                    "{d} cannot be a bound of a numrange kept as a cell; leave the side empty for no bound"
                ));
            }
            Point::Decimal(d)
        }
        Subtype::Date => Point::Day(time::date_days(&time::canonical_date(text)?)?),
        Subtype::Timestamp | Subtype::Timestamptz => {
            Point::Micros(time::parse_timestamp(text, sub == Subtype::Timestamptz)?)
        }
    })
}

/// A bound's value from its subtype's [`Conversion::read_expr`] text.
pub(crate) fn point_from_read(sub: Subtype, text: &str) -> Result<Point, String> {
    let value = sub.scalar().render(Some(text))?;
    match value {
        serde_json::Value::Number(n) => point_from_json(sub, &n.to_string()),
        serde_json::Value::String(s) => point_from_json(sub, &s),
        other => Err(format!("{other} is not a bound of a {}", sub.name())),
    }
}

/// A range that is not empty, in canonical form: each side's value
/// (`None`: unbounded, then exclusive) and whether it is inclusive.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Bounds {
    pub(crate) lower: Option<Point>,
    pub(crate) lower_inc: bool,
    pub(crate) upper: Option<Point>,
    pub(crate) upper_inc: bool,
}

impl Bounds {
    /// The canonical text: `[lower,upper)` with each bound's JSON text.
    pub(crate) fn text(&self, sub: Subtype) -> Result<String, String> {
        Ok(format!(
            "{}{},{}{}",
            if self.lower_inc { '[' } else { '(' },
            self.lower
                .as_ref()
                .map(|p| p.text(sub))
                .transpose()?
                .unwrap_or_default(),
            self.upper
                .as_ref()
                .map(|p| p.text(sub))
                .transpose()?
                .unwrap_or_default(),
            if self.upper_inc { ']' } else { ')' },
        ))
    }
}

/// The canonical text of a range from its parts, each bound's value
/// made by `point`.
fn canonical(
    sub: Subtype,
    parts: Parts,
    point: impl Fn(Subtype, &str) -> Result<Point, String>,
) -> Result<String, String> {
    match bounds(sub, parts, point)? {
        Some(bounds) => bounds.text(sub),
        None => Ok("empty".into()),
    }
}

/// A range's canonical bounds from its parts (`None`: empty), each
/// bound's value made by `point`.
pub(crate) fn bounds(
    sub: Subtype,
    parts: Parts,
    point: impl Fn(Subtype, &str) -> Result<Point, String>,
) -> Result<Option<Bounds>, String> {
    let Some((lower_inc, lower, upper, upper_inc)) = parts else {
        return Ok(None);
    };
    let lower = lower.map(|t| point(sub, &t)).transpose()?;
    let upper = upper.map(|t| point(sub, &t)).transpose()?;
    // An unbounded side is exclusive, as PostgreSQL prints it.
    let (mut lower_inc, mut upper_inc) =
        (lower_inc && lower.is_some(), upper_inc && upper.is_some());
    let (mut lower, mut upper) = (lower, upper);
    if let (Some(l), Some(u)) = (&lower, &upper) {
        if l.cmp(u) == Ordering::Greater {
            return Err(format!(
                "range lower bound must be less than or equal to range upper bound ({} > {})",
                l.text(sub)?,
                u.text(sub)?
            ));
        }
    }
    // A discrete range is `[lower,upper)`.
    if let Some(l) = &lower {
        if !lower_inc {
            if let Some(next) = l.next(sub)? {
                lower = Some(next);
                lower_inc = true;
            }
        }
    }
    if let Some(u) = &upper {
        if upper_inc {
            if let Some(next) = u.next(sub)? {
                upper = Some(next);
                upper_inc = false;
            }
        }
    }
    if let (Some(l), Some(u)) = (&lower, &upper) {
        match l.cmp(u) {
            Ordering::Greater => return Ok(None),
            Ordering::Equal if !(lower_inc && upper_inc) => return Ok(None),
            _ => {}
        }
    }
    Ok(Some(Bounds {
        lower,
        lower_inc,
        upper,
        upper_inc,
    }))
}

/// The canonical form of a range an app writes (a JSON string in range
/// syntax, bounds in the subtype's JSON text or PostgreSQL's).
pub fn accept(sub: Subtype, text: &str) -> Result<String, String> {
    canonical(sub, split(text)?, point_from_json).map_err(|e| format!("a {}: {e}", sub.name()))
}

/// The canonical form of a range read by [`read_expr`].
pub fn render(sub: Subtype, text: &str) -> Result<String, String> {
    canonical(sub, split(text)?, point_from_read).map_err(|e| format!("a {}: {e}", sub.name()))
}

/// The SQL reading range `column`: its brackets around each bound read
/// by its subtype's own reading (quoted), or `empty`.
pub fn read_expr(sub: Subtype, column: &str) -> String {
    let read = |side: &str| sub.scalar().read_expr(&format!("{side}({column})"));
    format!(
        "CASE WHEN {column} IS NULL THEN NULL WHEN isempty({column}) THEN 'empty' ELSE \
         (CASE WHEN lower_inc({column}) THEN '[' ELSE '(' END) \
         || coalesce('\"' || {} || '\"', '') || ',' || coalesce('\"' || {} || '\"', '') \
         || (CASE WHEN upper_inc({column}) THEN ']' ELSE ')' END) END",
        read("lower"),
        read("upper")
    )
}

/// The text PostgreSQL casts into the column, from a canonical range:
/// each bound quoted, a date or timestamp as PostgreSQL reads it (a BC
/// year written as BC).
pub fn param(sub: Subtype, canonical: &str) -> String {
    let Ok(Some((lower_inc, lower, upper, upper_inc))) = split(canonical) else {
        return canonical.to_string();
    };
    let quote = |side: Side| match side {
        None => String::new(),
        Some(text) => {
            let text = match sub {
                Subtype::Date | Subtype::Timestamp | Subtype::Timestamptz => {
                    time::postgres_text(&text)
                }
                _ => text,
            };
            format!("\"{}\"", text.replace('\\', "\\\\").replace('"', "\\\""))
        }
    };
    format!(
        "{}{},{}{}",
        if lower_inc { '[' } else { '(' },
        quote(lower),
        quote(upper),
        if upper_inc { ']' } else { ')' }
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn discrete_ranges_are_kept_as_lower_inclusive_upper_exclusive() {
        assert_eq!(accept(Subtype::Int4, "[1,4]").unwrap(), "[1,5)");
        assert_eq!(accept(Subtype::Int4, "(0,3]").unwrap(), "[1,4)");
        assert_eq!(accept(Subtype::Int4, " ( 0 , 3 ] ").unwrap(), "[1,4)");
        assert_eq!(accept(Subtype::Int8, "(,7]").unwrap(), "(,8)");
        assert_eq!(accept(Subtype::Int8, "[,)").unwrap(), "(,)");
        assert_eq!(accept(Subtype::Int4, "[3,3)").unwrap(), "empty");
        assert_eq!(accept(Subtype::Int4, "(3,4)").unwrap(), "empty");
        assert_eq!(accept(Subtype::Int4, "EMPTY").unwrap(), "empty");
        assert_eq!(
            accept(Subtype::Date, "(2015-03-07,\"2015-03-08\"]").unwrap(),
            "[2015-03-08,2015-03-09)"
        );
        assert_eq!(
            accept(Subtype::Date, "[2015-02-28,2015-02-28]").unwrap(),
            "[2015-02-28,2015-03-01)"
        );
    }

    #[test]
    fn continuous_ranges_keep_their_brackets_in_canonical_bounds() {
        assert_eq!(accept(Subtype::Numeric, "(1.50,2]").unwrap(), "(1.5,2]");
        assert_eq!(accept(Subtype::Numeric, "[1.0,1]").unwrap(), "[1,1]");
        assert_eq!(accept(Subtype::Numeric, "[1.0,1)").unwrap(), "empty");
        assert_eq!(
            accept(
                Subtype::Timestamptz,
                "[\"2015-03-08 08:30:00+01\",2015-03-08T09:00:00Z)"
            )
            .unwrap(),
            "[2015-03-08T07:30:00.000000Z,2015-03-08T09:00:00.000000Z)"
        );
        assert_eq!(
            accept(Subtype::Timestamp, "[2015-03-08T07:30:00,)").unwrap(),
            "[2015-03-08T07:30:00.000000,)"
        );
    }

    #[test]
    fn what_postgresql_refuses_or_a_cell_cannot_keep_is_refused() {
        for (sub, bad, says) in [
            (Subtype::Int4, "[5,1)", "lower bound must be less"),
            (Subtype::Int4, "[1,2147483648)", "out of range"),
            (Subtype::Int4, "[1,2147483647]", "out of range"),
            (Subtype::Int4, "1,2", "must start with"),
            (Subtype::Int4, "[1,2", "must end with"),
            (Subtype::Int4, "[1,2)x", "after its closing"),
            (Subtype::Int4, "[a,2)", "not an integer"),
            (Subtype::Numeric, "[NaN,2)", "cannot be a bound"),
            (Subtype::Date, "[infinity,)", "infinity"),
            (Subtype::Timestamptz, "[2015-03-08T07:30:00,)", "offset"),
            (Subtype::Int4, "[\"1,2)", "unfinished quoted"),
            (Subtype::Int4, "[5, )", "not an integer"),
            (Subtype::Numeric, "[ ,5)", "not a decimal number"),
        ] {
            let err = accept(sub, bad).unwrap_err();
            assert!(err.contains(says), "{bad}: {err}");
        }
    }

    #[test]
    fn a_read_range_and_its_written_form_meet_in_one_canonical_text() {
        // As `read_expr` reads them: each bound by its subtype's reading.
        assert_eq!(render(Subtype::Int4, "[\"1\",\"5\")").unwrap(), "[1,5)");
        assert_eq!(
            render(Subtype::Timestamptz, "[\"1425799800000000\",)").unwrap(),
            "[2015-03-08T07:30:00.000000Z,)"
        );
        assert_eq!(
            render(Subtype::Date, "[\"4713-01-01 BC\",\"2015-03-08\")").unwrap(),
            "[-4712-01-01,2015-03-08)"
        );
        assert_eq!(render(Subtype::Numeric, "empty").unwrap(), "empty");
        assert!(render(Subtype::Timestamptz, "[\"infinity\",)").is_err());
        // Written back with each bound quoted, in PostgreSQL's own text.
        assert_eq!(
            param(Subtype::Date, "[-4712-01-01,2015-03-08)"),
            "[\"4713-01-01 BC\",\"2015-03-08\")"
        );
        assert_eq!(param(Subtype::Int4, "(,8)"), "(,\"8\")");
        assert_eq!(param(Subtype::Int4, "empty"), "empty");
        // The canonical text is its own canonical form.
        for (sub, text) in [
            (Subtype::Int4, "[1,5)"),
            (Subtype::Numeric, "(1.5,2]"),
            (Subtype::Timestamptz, "[2015-03-08T07:30:00.000000Z,)"),
            (Subtype::Date, "[-4712-01-01,2015-03-08)"),
        ] {
            assert_eq!(accept(sub, text).unwrap(), text);
        }
    }
}
