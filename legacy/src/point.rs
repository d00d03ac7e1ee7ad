//! A `point` in its one canonical form: PostgreSQL's own text, `(x,y)`,
//! each coordinate a `double precision` printed as PostgreSQL prints it
//! with `extra_float_digits = 1` (the toolkit's sessions, and the default
//! since PostgreSQL 12): the shortest digits that read back as the same
//! double, in plain notation for a decimal exponent from -4 to 14 and in
//! scientific notation, with a signed exponent of at least two digits,
//! outside it (`(1.5,-2)`, `(1e+15,0.0001)`, `(1e-05,-0)`, `(NaN,Infinity)`).
//!
//! Input takes what `point`'s own input takes in the usual spellings:
//! `(x,y)` or `x,y`, spaces around the numbers, each number as Rust and
//! PostgreSQL both read a double (`1e300`, `-0`, `NaN`, `Infinity`,
//! `-Infinity`). A value PostgreSQL would round (a coordinate with more
//! digits than a double keeps) is still taken: the canonical text is the
//! double both read, so every path stores the same value.

/// The canonical text of the point written `text`.
pub fn canonical_point(text: &str) -> Result<String, String> {
    let inner = text.trim();
    let inner = match inner.strip_prefix('(') {
        Some(rest) => rest
            .strip_suffix(')')
            .ok_or_else(|| format!("{text:?} is not a point: an opening '(' without its ')'"))?,
        None => inner,
    };
    let (x, y) = inner
        .split_once(',')
        .ok_or_else(|| format!("{text:?} is not a point: expected \"(x,y)\""))?;
    let coordinate = |part: &str| {
        let part = part.trim();
        parse_double(part).ok_or_else(|| {
            format!("{text:?} is not a point: {part:?} is not a double precision number")
        })
    };
    Ok(format!(
        "({},{})",
        float8_text(coordinate(x)?),
        float8_text(coordinate(y)?)
    ))
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
            ("(1;2)", "expected \"(x,y)\""),
            ("(1,two)", "\"two\" is not a double"),
            ("(1,2,3)", "\"2,3\" is not a double"),
            ("(,2)", "\"\" is not a double"),
            ("(--1,2)", "\"--1\" is not a double"),
            ("(-NaN,2)", "\"-NaN\" is not a double"),
            ("(0x10,2)", "\"0x10\" is not a double"),
        ] {
            let err = canonical_point(text).unwrap_err();
            assert!(err.contains(says), "{text}: {err}");
        }
    }
}
