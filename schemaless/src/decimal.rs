//! Exact decimals in one canonical text form, shared by the legacy model's
//! `numeric` conversion and by index fields of type `decimal`.

use std::cmp::Ordering;

/// The canonical text of an exact decimal: optional `-`, no leading zeros,
/// no exponent, no trailing zeros in the fraction, no `-0`.
pub fn canonical_decimal(text: &str) -> Result<String, String> {
    match text {
        "NaN" | "Infinity" | "-Infinity" => return Ok(text.to_string()),
        "+Infinity" | "inf" | "+inf" => return Ok("Infinity".into()),
        "-inf" => return Ok("-Infinity".into()),
        _ => {}
    }
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
    // All digits, and where the point falls among them.
    let digits: Vec<u8> = int_part.bytes().chain(frac_part.bytes()).collect();
    let point = int_part.len() as i64 + exponent;
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
    let whole = whole.trim_start_matches('0');
    let fraction = fraction.trim_end_matches('0');
    let mut out = String::with_capacity(whole.len() + fraction.len() + 3);
    if negative && !(whole.is_empty() && fraction.is_empty()) {
        out.push('-');
    }
    out.push_str(if whole.is_empty() { "0" } else { whole });
    if !fraction.is_empty() {
        out.push('.');
        out.push_str(fraction);
    }
    Ok(out)
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
