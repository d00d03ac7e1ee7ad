//! `bit(n)` and `bit varying(n)` in their one canonical form: PostgreSQL's
//! own text, the bits as `0` and `1` (`"0101"`).
//!
//! Input is that, or either of the other spellings PostgreSQL's input
//! reads: `b` followed by binary digits, or `x` followed by hex digits,
//! four bits each (`"x1F"` is `"00011111"`). The length a column holds
//! is checked by the field ([`crate::layout::Field`]): a `bit(n)` exactly
//! `n` bits, a `bit varying(n)` at most `n`, as an assignment checks it
//! (an explicit cast would pad or cut instead).

/// The canonical text of the bit string written `text`.
pub fn canonical_bits(text: &str) -> Result<String, String> {
    let shown = crate::conversion::shown(text);
    let (hex, digits) = match text.as_bytes().first() {
        Some(b'x' | b'X') => (true, &text[1..]),
        Some(b'b' | b'B') => (false, &text[1..]),
        _ => (false, text),
    };
    let mut bits = String::with_capacity(digits.len() * if hex { 4 } else { 1 });
    for c in digits.chars() {
        match (hex, c) {
            (false, '0' | '1') => bits.push(c),
            (true, _) if c.is_ascii_hexdigit() => {
                let nibble = c.to_digit(16).expect("a hex digit");
                bits.push_str(&format!("{nibble:04b}"));
            }
            (false, _) => {
                return Err(format!(
                    "{shown} is not a bit string: {c:?} is not a binary digit"
                ))
            }
            (true, _) => {
                return Err(format!(
                    "{shown} is not a bit string: {c:?} is not a hex digit"
                ))
            }
        }
    }
    Ok(bits)
}

/// Whether `bits` (canonical) fits a column of type `typname` (`bit` or
/// `varbit`) with modifier `typmod` (its length; -1 for none), as an
/// assignment fits it; else PostgreSQL's message.
pub fn bits_fit(bits: &str, typname: &str, typmod: i32) -> Result<(), String> {
    let Ok(n) = usize::try_from(typmod) else {
        return Ok(());
    };
    let len = bits.len();
    match typname {
        "bit" if len != n => Err(format!(
            "bit string length {len} does not match type bit({n})"
        )),
        "varbit" if len > n => Err(format!("bit string too long for type bit varying({n})")),
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bits_have_one_form() {
        for (text, want) in [
            ("0101", "0101"),
            ("", ""),
            ("b110", "110"),
            ("x1F", "00011111"),
            ("Xa", "1010"),
        ] {
            assert_eq!(canonical_bits(text).as_deref(), Ok(want), "{text}");
        }
        for (text, says) in [
            ("012", "'2' is not a binary digit"),
            ("x1G", "'G' is not a hex digit"),
            (" 01", "' ' is not a binary digit"),
        ] {
            let err = canonical_bits(text).unwrap_err();
            assert!(err.contains(says), "{text}: {err}");
        }
    }

    #[test]
    fn lengths_are_held_as_an_assignment_holds_them() {
        assert_eq!(bits_fit("0101", "bit", 4), Ok(()));
        assert_eq!(
            bits_fit("101", "bit", 4).unwrap_err(),
            "bit string length 3 does not match type bit(4)"
        );
        assert_eq!(bits_fit("101", "varbit", 4), Ok(()));
        assert_eq!(
            bits_fit("10101", "varbit", 4).unwrap_err(),
            "bit string too long for type bit varying(4)"
        );
        assert_eq!(bits_fit("10101", "varbit", -1), Ok(()));
    }
}
