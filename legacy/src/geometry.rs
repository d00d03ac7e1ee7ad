//! PostgreSQL's geometric types in their one canonical form: PostgreSQL's
//! own text, each coordinate a `double precision` printed as PostgreSQL
//! prints it with `extra_float_digits = 1` (the toolkit's sessions, and
//! the default since PostgreSQL 12): the shortest digits that read back
//! as the same double, in plain notation for a decimal exponent from -4
//! to 14 and in scientific notation, with a signed exponent of at least
//! two digits, outside it (`1.5`, `-2`, `1e+15`, `0.0001`, `1e-05`, `-0`,
//! `NaN`, `Infinity`).
//!
//! | type | text |
//! |---|---|
//! | `point` | `(x,y)` |
//! | `line` | `{A,B,C}` (A and B not both zero) |
//! | `lseg` | `[(x1,y1),(x2,y2)]` |
//! | `box` | `(x1,y1),(x2,y2)`, the upper right corner first: PostgreSQL swaps the coordinates of corners written otherwise, and so does the canonical form |
//! | `path` | `[(x1,y1),...]` open, `((x1,y1),...)` closed |
//! | `polygon` | `((x1,y1),...)` |
//! | `circle` | `<(x,y),r>` (r not negative) |
//!
//! Input is that text, with spaces anywhere between its parts and each
//! number as PostgreSQL reads a double (`1e300`, `-0`, `NaN`,
//! `Infinity`); a `point` also as `x,y`. PostgreSQL reads more spellings
//! (a `box` as four bare numbers, a `line` as two points); a value is
//! refused here rather than stored in a form PostgreSQL would print
//! otherwise. A coordinate with more digits than a double keeps is taken
//! as the double both read, so every path stores the same value.

/// A geometric type.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Geometry {
    Point,
    Line,
    Lseg,
    Box,
    Path,
    Polygon,
    Circle,
}

impl Geometry {
    /// The type of `pg_type.typname`, if geometric.
    pub fn of_type(typname: &str) -> Option<Geometry> {
        Some(match typname {
            "point" => Geometry::Point,
            "line" => Geometry::Line,
            "lseg" => Geometry::Lseg,
            "box" => Geometry::Box,
            "path" => Geometry::Path,
            "polygon" => Geometry::Polygon,
            "circle" => Geometry::Circle,
            _ => return None,
        })
    }

    fn name(self) -> &'static str {
        match self {
            Geometry::Point => "point",
            Geometry::Line => "line",
            Geometry::Lseg => "lseg",
            Geometry::Box => "box",
            Geometry::Path => "path",
            Geometry::Polygon => "polygon",
            Geometry::Circle => "circle",
        }
    }

    /// The form a value is written in, for messages.
    fn form(self) -> &'static str {
        match self {
            Geometry::Point => "(x,y)",
            Geometry::Line => "{A,B,C}",
            Geometry::Lseg => "[(x1,y1),(x2,y2)]",
            Geometry::Box => "(x1,y1),(x2,y2)",
            Geometry::Path => "[(x1,y1),...] or ((x1,y1),...)",
            Geometry::Polygon => "((x1,y1),...)",
            Geometry::Circle => "<(x,y),r>",
        }
    }

    /// The canonical text of the value written `text`.
    pub fn canonical(self, text: &str) -> Result<String, String> {
        let shown = crate::conversion::shown(text);
        let parts = parse(text).map_err(|e| format!("{shown} is not a {}: {e}", self.name()))?;
        let wrong = || {
            format!(
                "{shown} is not a {} written as PostgreSQL prints one: {}",
                self.name(),
                self.form()
            )
        };
        let out = match (self, parts.as_slice()) {
            (Geometry::Point, [Part::Number(x), Part::Number(y)]) => point(*x, *y),
            (Geometry::Point, [p]) => point_of(p).ok_or_else(wrong)?,
            (Geometry::Line, [Part::Group('{', abc)]) => {
                let [Part::Number(a), Part::Number(b), Part::Number(c)] = abc.as_slice() else {
                    return Err(wrong());
                };
                if fp_zero(*a) && fp_zero(*b) {
                    return Err(format!(
                        "{shown} is not a line: A and B cannot both be zero"
                    ));
                }
                format!(
                    "{{{},{},{}}}",
                    float8_text(*a),
                    float8_text(*b),
                    float8_text(*c)
                )
            }
            (Geometry::Lseg, [Part::Group('[', ends)]) => {
                let [a, b] = ends.as_slice() else {
                    return Err(wrong());
                };
                let (a, b) = (
                    point_of(a).ok_or_else(wrong)?,
                    point_of(b).ok_or_else(wrong)?,
                );
                format!("[{a},{b}]")
            }
            (Geometry::Box, [a, b]) => {
                let (Some((x1, y1)), Some((x2, y2))) = (coordinates(a), coordinates(b)) else {
                    return Err(wrong());
                };
                // `box_in`: the first corner the upper right, coordinate
                // by coordinate, NaN above every number.
                let (hx, lx) = if below(x1, x2) { (x2, x1) } else { (x1, x2) };
                let (hy, ly) = if below(y1, y2) { (y2, y1) } else { (y1, y2) };
                format!("{},{}", point(hx, hy), point(lx, ly))
            }
            (Geometry::Path, [Part::Group(open @ ('[' | '('), points)])
            | (Geometry::Polygon, [Part::Group(open @ '(', points)])
                if !points.is_empty() =>
            {
                let texts: Option<Vec<String>> = points.iter().map(point_of).collect();
                let close = if *open == '[' { ']' } else { ')' };
                format!("{open}{}{close}", texts.ok_or_else(wrong)?.join(","))
            }
            (Geometry::Circle, [Part::Group('<', parts)]) => {
                let [center, Part::Number(r)] = parts.as_slice() else {
                    return Err(wrong());
                };
                if *r < 0.0 {
                    return Err(format!(
                        "{shown} is not a circle: its radius cannot be negative"
                    ));
                }
                format!(
                    "<{},{}>",
                    point_of(center).ok_or_else(wrong)?,
                    float8_text(*r)
                )
            }
            _ => return Err(wrong()),
        };
        Ok(out)
    }
}

/// The canonical text of the point written `text` (`(x,y)` or `x,y`).
pub fn canonical_point(text: &str) -> Result<String, String> {
    Geometry::Point.canonical(text)
}

/// Zero as `line_in` tells it (`FPzero`): within PostgreSQL's geometric
/// `EPSILON` of it. A line whose A and B are both that small is refused
/// there, so it is here: Schemaless must not keep a value the reverse
/// mirror could never write.
fn fp_zero(x: f64) -> bool {
    x.abs() <= 1.0e-6
}

/// `a < b` as PostgreSQL orders doubles (`float8_lt`): NaN above all.
fn below(a: f64, b: f64) -> bool {
    match (a.is_nan(), b.is_nan()) {
        (true, _) => false,
        (false, true) => true,
        (false, false) => a < b,
    }
}

/// One part of a geometric value's text: a number, or a bracketed list.
#[derive(Debug)]
enum Part {
    Number(f64),
    /// The opening bracket and what is inside, split at commas.
    Group(char, Vec<Part>),
}

fn coordinates(part: &Part) -> Option<(f64, f64)> {
    match part {
        Part::Group('(', xy) => match xy.as_slice() {
            [Part::Number(x), Part::Number(y)] => Some((*x, *y)),
            _ => None,
        },
        _ => None,
    }
}

fn point_of(part: &Part) -> Option<String> {
    coordinates(part).map(|(x, y)| point(x, y))
}

fn point(x: f64, y: f64) -> String {
    format!("({},{})", float8_text(x), float8_text(y))
}

/// The parts of `text` at its top level, split at commas.
fn parse(text: &str) -> Result<Vec<Part>, String> {
    let mut chars = text.char_indices().peekable();
    let parts = parse_list(text, &mut chars, None, 0)?;
    Ok(parts)
}

/// Brackets inside brackets no geometric type's text goes deeper than
/// (a path's points in the path's own: two). Past it the text is refused
/// before the parse can go deeper: a body of a million `(` would
/// otherwise overflow the stack.
const MAX_DEPTH: usize = 3;

fn parse_list(
    text: &str,
    chars: &mut std::iter::Peekable<std::str::CharIndices<'_>>,
    close: Option<char>,
    depth: usize,
) -> Result<Vec<Part>, String> {
    if depth > MAX_DEPTH {
        return Err("brackets nested deeper than any geometric value's".into());
    }
    let mut parts = Vec::new();
    loop {
        while chars.next_if(|(_, c)| c.is_whitespace()).is_some() {}
        let part = match chars.peek().copied() {
            Some((_, open @ ('(' | '[' | '<' | '{'))) => {
                chars.next();
                let close = match open {
                    '(' => ')',
                    '[' => ']',
                    '<' => '>',
                    _ => '}',
                };
                Part::Group(open, parse_list(text, chars, Some(close), depth + 1)?)
            }
            Some((start, _)) => {
                let mut end = start;
                while let Some((at, c)) =
                    chars.next_if(|(_, c)| !c.is_whitespace() && !",()[]<>{}".contains(*c))
                {
                    end = at + c.len_utf8();
                }
                let number = &text[start..end];
                Part::Number(
                    parse_double(number)
                        .ok_or_else(|| format!("{number:?} is not a double precision number"))?,
                )
            }
            None => return Err("it ends early".into()),
        };
        parts.push(part);
        while chars.next_if(|(_, c)| c.is_whitespace()).is_some() {}
        match (chars.next(), close) {
            (Some((_, ',')), _) => continue,
            (Some((_, c)), Some(close)) if c == close => return Ok(parts),
            (None, None) => return Ok(parts),
            (Some((_, c)), _) => return Err(format!("unexpected {c:?}")),
            (None, Some(close)) => return Err(format!("an opening bracket without its {close:?}")),
        }
    }
}

/// A double as PostgreSQL's `float8in` reads it (`NaN`, `Infinity` and
/// `inf` in any case), refusing what Rust would read and PostgreSQL not.
fn parse_double(text: &str) -> Option<f64> {
    let digits = text.trim_start_matches(['+', '-']);
    let named = matches!(
        digits.to_ascii_lowercase().as_str(),
        "nan" | "inf" | "infinity"
    );
    if text.is_empty() || text.len() - digits.len() > 1 {
        return None;
    }
    if !named
        && !digits
            .bytes()
            .all(|b| b.is_ascii_digit() || b"eE+-.".contains(&b))
    {
        return None;
    }
    if named && digits.eq_ignore_ascii_case("nan") && digits.len() != text.len() {
        // PostgreSQL has no signed NaN.
        return None;
    }
    text.parse().ok()
}

/// `x` as PostgreSQL's `float8out` prints it with `extra_float_digits`
/// at 1: shortest round-trip digits, plain when the decimal exponent is
/// in -4..15, else `d.ddde±XX`.
pub fn float8_text(x: f64) -> String {
    if x.is_nan() {
        return "NaN".into();
    }
    if x.is_infinite() {
        return if x > 0.0 { "Infinity" } else { "-Infinity" }.into();
    }
    if x == 0.0 {
        return if x.is_sign_negative() { "-0" } else { "0" }.into();
    }
    let (digits, exponent) = shortest(x.abs());
    let sign = if x < 0.0 { "-" } else { "" };
    if (-4..15).contains(&exponent) {
        let point = exponent + 1;
        let text = if point <= 0 {
            format!("0.{}{digits}", "0".repeat(point.unsigned_abs() as usize))
        } else if point as usize >= digits.len() {
            format!("{digits}{}", "0".repeat(point as usize - digits.len()))
        } else {
            format!(
                "{}.{}",
                &digits[..point as usize],
                &digits[point as usize..]
            )
        };
        return format!("{sign}{text}");
    }
    let mantissa = match digits.len() {
        1 => digits.clone(),
        _ => format!("{}.{}", &digits[..1], &digits[1..]),
    };
    let exponent_sign = if exponent < 0 { '-' } else { '+' };
    format!(
        "{sign}{mantissa}e{exponent_sign}{:02}",
        exponent.unsigned_abs()
    )
}

/// The shortest decimal digits that read back as `x` (finite, positive),
/// without leading or trailing zeros, and the decimal exponent of the
/// first. Ryū's, as PostgreSQL's: of two candidates equally near, the
/// even one (`1149636667324797.25` is `…797.2`, where Rust's own
/// formatting says `…797.3`).
fn shortest(x: f64) -> (String, i32) {
    let mut buffer = ryu::Buffer::new();
    let text = buffer.format_finite(x);
    let (mantissa, exponent) = match text.split_once('e') {
        Some((m, e)) => (m, e.parse::<i32>().expect("Ryū writes a decimal exponent")),
        None => (text, 0),
    };
    let (whole, fraction) = mantissa.split_once('.').unwrap_or((mantissa, ""));
    let all = format!("{whole}{fraction}");
    let significant = all.trim_start_matches('0');
    let leading = (all.len() - significant.len()) as i32;
    (
        significant.trim_end_matches('0').to_string(),
        whole.len() as i32 - 1 - leading + exponent,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn coordinates_print_as_postgresql_prints_them() {
        // Each pair as `SELECT point(a, b)::text` printed it on
        // PostgreSQL 15 with extra_float_digits = 1.
        for (x, want) in [
            (1.5, "1.5"),
            (-2.0, "-2"),
            (1e15, "1e+15"),
            (123456789012345.0, "123456789012345"),
            (0.0001, "0.0001"),
            (0.00001, "1e-05"),
            (1.5e-5, "1.5e-05"),
            (5e-324, "5e-324"),
            (f64::MAX, "1.7976931348623157e+308"),
            (-0.0, "-0"),
            (123456789.0, "123456789"),
            (1e14, "100000000000000"),
            (f64::NEG_INFINITY, "-Infinity"),
            (2.5e-310, "2.5e-310"),
            (1e22, "1e+22"),
            (0.1 + 0.2, "0.30000000000000004"),
            // A tie between two shortest candidates: the even one.
            (1_149_636_667_324_797.0 + 0.25, "1.1496366673247972e+15"),
        ] {
            assert_eq!(float8_text(x), want, "{x:e}");
        }
    }

    #[test]
    fn points_are_read_in_the_usual_spellings_and_printed_one_way() {
        for (text, want) in [
            ("(1.5,-2)", "(1.5,-2)"),
            (" ( 1.50 , -2.0 ) ", "(1.5,-2)"),
            ("1,2", "(1,2)"),
            ("(1e300,-0)", "(1e+300,-0)"),
            ("(NaN,infinity)", "(NaN,Infinity)"),
            ("(-Infinity,+3)", "(-Infinity,3)"),
        ] {
            assert_eq!(canonical_point(text).as_deref(), Ok(want), "{text}");
        }
        for (text, says) in [
            ("(1,2", "without its ')'"),
            ("(1;2)", "\"1;2\" is not a double"),
            ("(1,two)", "\"two\" is not a double"),
            ("(1,2,3)", "written as PostgreSQL prints one: (x,y)"),
            ("(,2)", "\"\" is not a double"),
            ("(--1,2)", "\"--1\" is not a double"),
            ("(-NaN,2)", "\"-NaN\" is not a double"),
            ("(0x10,2)", "\"0x10\" is not a double"),
            ("(1,2))", "unexpected ')'"),
            ("((((1,2))))", "nested deeper"),
            ("", "ends early"),
        ] {
            let err = canonical_point(text).unwrap_err();
            assert!(err.contains(says), "{text}: {err}");
        }
    }

    #[test]
    fn a_text_of_a_million_brackets_is_refused_not_a_stack_overflow() {
        let deep = "(".repeat(1_000_000);
        for geometry in [Geometry::Point, Geometry::Path, Geometry::Polygon] {
            let err = geometry.canonical(&deep).unwrap_err();
            assert!(err.contains("nested deeper"), "{err}");
            // The value named, not echoed whole.
            assert!(err.len() < 200, "{err}");
        }
    }

    #[test]
    fn every_geometric_type_is_printed_as_postgresql_prints_it() {
        // Each as PostgreSQL 15 printed the value written.
        for (geometry, text, want) in [
            (Geometry::Line, "{1,-1,0}", "{1,-1,0}"),
            (Geometry::Line, " { 0.5 , 0 , 1e300 } ", "{0.5,0,1e+300}"),
            (Geometry::Line, "{1.0000001e-6,0,1}", "{1.0000001e-06,0,1}"),
            (
                Geometry::Lseg,
                " [ ( 1 , 2 ) , ( 3 , 4 ) ] ",
                "[(1,2),(3,4)]",
            ),
            (Geometry::Box, "(1,1),(3,3)", "(3,3),(1,1)"),
            (Geometry::Box, "(3,1),(1,3)", "(3,3),(1,1)"),
            (Geometry::Box, "(NaN,1),(2,3)", "(NaN,3),(2,1)"),
            (Geometry::Box, "( 1 , 2 ) , ( 3 , 4 )", "(3,4),(1,2)"),
            (Geometry::Path, "[(1,2),(3,4)]", "[(1,2),(3,4)]"),
            (Geometry::Path, "((1,2),(3,4))", "((1,2),(3,4))"),
            (Geometry::Path, "[(1,2)]", "[(1,2)]"),
            (
                Geometry::Polygon,
                "((1,2),(3,4),(5,0))",
                "((1,2),(3,4),(5,0))",
            ),
            (Geometry::Polygon, "((1,2))", "((1,2))"),
            (Geometry::Circle, "<(1,2),3>", "<(1,2),3>"),
            (Geometry::Circle, "<(1,2),NaN>", "<(1,2),NaN>"),
        ] {
            assert_eq!(geometry.canonical(text).as_deref(), Ok(want), "{text}");
        }
        for (geometry, text, says) in [
            (Geometry::Line, "{0,0,1}", "A and B cannot both be zero"),
            // PostgreSQL's `FPzero`: within 1e-6 of zero is zero.
            (
                Geometry::Line,
                "{1e-7,1e-7,1}",
                "A and B cannot both be zero",
            ),
            (Geometry::Line, "{1e-6,-0,1}", "A and B cannot both be zero"),
            (Geometry::Line, "[(1,2),(3,4)]", "{A,B,C}"),
            (Geometry::Lseg, "((1,2),(3,4))", "[(x1,y1),(x2,y2)]"),
            (Geometry::Box, "1,2,3,4", "(x1,y1),(x2,y2)"),
            (Geometry::Path, "[]", "is not a path"),
            (Geometry::Path, "(1,2)", "[(x1,y1),...]"),
            (Geometry::Polygon, "[(1,2)]", "((x1,y1),...)"),
            (Geometry::Circle, "<(1,2),-1>", "radius cannot be negative"),
            (Geometry::Circle, "((1,2),3)", "<(x,y),r>"),
        ] {
            let err = geometry.canonical(text).unwrap_err();
            assert!(err.contains(says), "{text}: {err}");
        }
    }
}
