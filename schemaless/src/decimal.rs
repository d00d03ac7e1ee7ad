//! Exact decimals in one canonical text form, shared by the legacy model's
//! `numeric` conversion and by index fields of type `decimal`.

use std::cmp::Ordering;

/// The canonical text of an exact decimal: optional `-`, no leading zeros,
/// no exponent, no trailing zeros in the fraction, no `-0`.
pub fn canonical_decimal(text: &str) -> Result<String, String> {
    if let Some(special) = special(text) {
        return Ok(special.into());
    }
    let parts = Parts::of(text)?;
    Ok(parts.text(parts.fraction.trim_end_matches('0')))
}

/// The text an unconstrained `numeric` column gives back for `text`
/// written into it: [`numeric_text`], and `NaN` and the infinities as
/// PostgreSQL prints them.
pub fn scaled_decimal(text: &str) -> Result<String, String> {
    match special(text) {
        Some(special) => Ok(special.into()),
        None => numeric_text(text),
    }
}

/// `NaN` or an infinity, in the one spelling PostgreSQL prints.
fn special(text: &str) -> Option<&'static str> {
    match text {
        "NaN" => Some("NaN"),
        "Infinity" | "+Infinity" | "inf" | "+inf" => Some("Infinity"),
        "-Infinity" | "-inf" => Some("-Infinity"),
        _ => None,
    }
}

/// The text PostgreSQL's `numeric` (and so `jsonb`) gives a number:
/// [`canonical_decimal`], except that the fraction keeps the scale the
/// input had (`1.50` stays `1.50`, `1.50e1` is `15.0`, `1e5` is `100000`).
/// What a `jsonb` column reads back for a number written as `text`.
pub fn numeric_text(text: &str) -> Result<String, String> {
    let parts = Parts::of(text)?;
    Ok(parts.text(&parts.fraction))
}

/// A finite decimal: its sign, its whole part without leading zeros and
/// its fraction with the input's scale.
struct Parts {
    negative: bool,
    whole: String,
    fraction: String,
}

impl Parts {
    fn of(text: &str) -> Result<Parts, String> {
        let bad = || format!("{text:?} is not a decimal number");
        let (negative, rest) = match text.as_bytes().first() {
            Some(b'-') => (true, &text[1..]),
            Some(b'+') => (false, &text[1..]),
            _ => (false, text),
        };
        let (mantissa, exponent) = match rest.find(['e', 'E']) {
            Some(at) => {
                let exponent: i64 = rest[at + 1..].parse().map_err(|_| bad())?;
                if exponent.abs() > 1000 {
                    return Err(format!("{text:?}: exponents beyond ±1000 are not accepted"));
                }
                (&rest[..at], exponent)
            }
            None => (rest, 0),
        };
        let (int_part, frac_part) = match mantissa.split_once('.') {
            Some((i, f)) => (i, f),
            None => (mantissa, ""),
        };
        if (int_part.is_empty() && frac_part.is_empty())
            || !int_part.bytes().all(|b| b.is_ascii_digit())
            || !frac_part.bytes().all(|b| b.is_ascii_digit())
        {
            return Err(bad());
        }
        // All digits, and where the point falls among them; the scale is
        // the fraction's digits less the exponent, never below 0.
        let digits: Vec<u8> = int_part.bytes().chain(frac_part.bytes()).collect();
        let point = int_part.len() as i64 + exponent;
        let scale = (frac_part.len() as i64 - exponent).max(0) as usize;
        let mut whole = String::new();
        let mut fraction = String::new();
        if point <= 0 {
            fraction.extend(std::iter::repeat_n('0', (-point) as usize));
            fraction.extend(digits.iter().map(|&d| d as char));
        } else {
            let point = point as usize;
            for (i, &d) in digits.iter().enumerate() {
                if i < point {
                    whole.push(d as char);
                } else {
                    fraction.push(d as char);
                }
            }
            whole.extend(std::iter::repeat_n('0', point.saturating_sub(digits.len())));
        }
        // The digits past the point are exactly `scale` long already,
        // except that a point past the digits leaves none.
        fraction.extend(std::iter::repeat_n(
            '0',
            scale.saturating_sub(fraction.len()),
        ));
        Ok(Parts {
            negative,
            whole: whole.trim_start_matches('0').to_string(),
            fraction,
        })
    }

    fn text(&self, fraction: &str) -> String {
        let zero = self.whole.is_empty() && fraction.bytes().all(|b| b == b'0');
        let mut out = String::with_capacity(self.whole.len() + fraction.len() + 3);
        if self.negative && !zero {
            out.push('-');
        }
        out.push_str(if self.whole.is_empty() {
            "0"
        } else {
            &self.whole
        });
        if !fraction.is_empty() {
            out.push('.');
            out.push_str(fraction);
        }
        out
    }
}

/// Compares two canonical decimals (finite ones; `NaN` and infinities sort
/// after every number, as in PostgreSQL).
pub fn compare_decimal(a: &str, b: &str) -> Ordering {
    fn rank(text: &str) -> i8 {
        match text {
            "-Infinity" => -1,
            "Infinity" => 1,
            "NaN" => 2,
            _ => 0,
        }
    }
    match (rank(a), rank(b)) {
        (0, 0) => {}
        (x, y) => return x.cmp(&y),
    }
    let (a_neg, a) = a.strip_prefix('-').map_or((false, a), |r| (true, r));
    let (b_neg, b) = b.strip_prefix('-').map_or((false, b), |r| (true, r));
    let magnitude = |x: &str, y: &str| {
        let (xi, xf) = x.split_once('.').unwrap_or((x, ""));
        let (yi, yf) = y.split_once('.').unwrap_or((y, ""));
        xi.len()
            .cmp(&yi.len())
            .then_with(|| xi.cmp(yi))
            .then_with(|| {
                let width = xf.len().max(yf.len());
                format!("{xf:0<width$}").cmp(&format!("{yf:0<width$}"))
            })
    };
    match (a_neg, b_neg) {
        (false, false) => magnitude(a, b),
        (true, true) => magnitude(b, a),
        (false, true) => Ordering::Greater,
        (true, false) => Ordering::Less,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numeric_text_keeps_the_scale_as_postgresql_does() {
        for (input, pg) in [
            ("1.50", "1.50"),
            ("1.50e1", "15.0"),
            ("1e5", "100000"),
            ("1E+5", "100000"),
            ("1.5e-3", "0.0015"),
            ("-0", "0"),
            ("-0.0", "0.0"),
            ("-0.10", "-0.10"),
            ("007.5", "7.5"),
            (
                "98765432109876543210987654321",
                "98765432109876543210987654321",
            ),
            (
                "0.1000000000000000055511151231257827",
                "0.1000000000000000055511151231257827",
            ),
            ("12e-1", "1.2"),
            ("120e-1", "12.0"),
        ] {
            assert_eq!(numeric_text(input).unwrap(), pg, "{input}");
        }
        assert_eq!(canonical_decimal("1.50e1").unwrap(), "15");
        assert!(numeric_text("1e1001").is_err());
        for (input, pg) in [("1.50", "1.50"), ("NaN", "NaN"), ("-inf", "-Infinity")] {
            assert_eq!(scaled_decimal(input).unwrap(), pg, "{input}");
        }
    }

    #[test]
    fn decimals_compare_as_numbers() {
        let mut values = vec![
            "10",
            "9.99",
            "-1",
            "-10.5",
            "0",
            "0.001",
            "NaN",
            "Infinity",
            "-Infinity",
            "123456789012345678901234567890",
        ];
        values.sort_by(|a, b| compare_decimal(a, b));
        assert_eq!(
            values,
            [
                "-Infinity",
                "-10.5",
                "-1",
                "0",
                "0.001",
                "9.99",
                "10",
                "123456789012345678901234567890",
                "Infinity",
                "NaN"
            ]
        );
    }
}
