//! MessagePack of JSON values, numbers exact.
//!
//! Written by hand rather than through serde, because a JSON number here
//! keeps its exact text (serde_json's `arbitrary_precision`), and
//! MessagePack has no type for most of them. Each number is stored in the
//! first form that gives its text back unchanged:
//!
//! | number text | MessagePack |
//! |---|---|
//! | an integer in `i64` or `u64`, written plainly (`-3`, `18446744073709551615`) | int (the smallest of the standard int formats) |
//! | the shortest text of an `f64` as serde_json prints it (`12.5`, `1e300`, `0.1`) | float 64 |
//! | anything else (`98765432109876543210987654321`, `1.50`, `1e5`, `0.1000000000000000055511151231257827`) | ext type 1: the number's JSON text in ASCII |
//!
//! Everything else is standard: nil, booleans, str (UTF-8), array, map
//! with str keys. A reader that does not know ext type 1 still sees every
//! other field; this one refuses other ext types, bin, and maps whose keys
//! are not strings, rather than guess.

use serde_json::{Map, Number, Value};

/// The ext type of a number kept as its decimal text.
pub const EXACT_NUMBER_EXT: i8 = 1;

/// Nesting deeper than this is refused on decode: a hostile blob must not
/// exhaust the stack (serde_json's own parser stops at 128).
const MAX_DEPTH: usize = 256;

/// Appends the MessagePack of an object.
pub fn encode_map(map: &Map<String, Value>, out: &mut Vec<u8>) {
    header(out, map.len(), 0x80, 0xde, 0xdf);
    for (key, value) in map {
        string(out, key);
        encode(value, out);
    }
}

fn encode(value: &Value, out: &mut Vec<u8>) {
    match value {
        Value::Null => out.push(0xc0),
        Value::Bool(false) => out.push(0xc2),
        Value::Bool(true) => out.push(0xc3),
        Value::Number(n) => number(n, out),
        Value::String(s) => string(out, s),
        Value::Array(items) => {
            header(out, items.len(), 0x90, 0xdc, 0xdd);
            for item in items {
                encode(item, out);
            }
        }
        Value::Object(map) => encode_map(map, out),
    }
}

/// A fixarray/fixmap header (`fix` | len) below 16, else 16 or 32 bits.
fn header(out: &mut Vec<u8>, len: usize, fix: u8, m16: u8, m32: u8) {
    if len < 16 {
        out.push(fix | len as u8);
    } else if len <= u16::MAX as usize {
        out.push(m16);
        out.extend_from_slice(&(len as u16).to_be_bytes());
    } else {
        out.push(m32);
        out.extend_from_slice(&(len as u32).to_be_bytes());
    }
}

fn string(out: &mut Vec<u8>, s: &str) {
    let len = s.len();
    if len < 32 {
        out.push(0xa0 | len as u8);
    } else if len <= u8::MAX as usize {
        out.extend_from_slice(&[0xd9, len as u8]);
    } else if len <= u16::MAX as usize {
        out.push(0xda);
        out.extend_from_slice(&(len as u16).to_be_bytes());
    } else {
        out.push(0xdb);
        out.extend_from_slice(&(len as u32).to_be_bytes());
    }
    out.extend_from_slice(s.as_bytes());
}

fn number(n: &Number, out: &mut Vec<u8>) {
    let text = n.as_str();
    match plain_integer(text) {
        Some(Integer::Unsigned(u)) => unsigned(out, u),
        Some(Integer::Signed(i)) => signed(out, i),
        // The shortest text of a double, as serde_json writes it (the same
        // formatter, into a stack buffer).
        None if n
            .as_f64()
            .is_some_and(|x| x.is_finite() && zmij::Buffer::new().format_finite(x) == text) =>
        {
            let x = n.as_f64().expect("just read");
            out.push(0xcb);
            out.extend_from_slice(&x.to_be_bytes());
        }
        None => {
            let len = text.len();
            if len <= u8::MAX as usize {
                out.extend_from_slice(&[0xc7, len as u8]);
            } else if len <= u16::MAX as usize {
                out.push(0xc8);
                out.extend_from_slice(&(len as u16).to_be_bytes());
            } else {
                out.push(0xc9);
                out.extend_from_slice(&(len as u32).to_be_bytes());
            }
            out.push(EXACT_NUMBER_EXT as u8);
            out.extend_from_slice(text.as_bytes());
        }
    }
}

/// An integer written plainly.
enum Integer {
    Unsigned(u64),
    Signed(i64),
}

/// The integer whose text is `text` exactly as Rust prints it (no sign on
/// zero, no leading zeros, no `+`) and that fits `u64`, or if negative
/// `i64`.
fn plain_integer(text: &str) -> Option<Integer> {
    let (negative, digits) = match text.strip_prefix('-') {
        Some(rest) => (true, rest),
        None => (false, text),
    };
    let plain = !digits.is_empty()
        && digits.bytes().all(|b| b.is_ascii_digit())
        && (digits == "0" || !digits.starts_with('0'))
        && !(negative && digits == "0");
    if !plain {
        return None;
    }
    let magnitude: u64 = digits.parse().ok()?;
    if !negative {
        return Some(Integer::Unsigned(magnitude));
    }
    // -9223372036854775808 is the one magnitude past i64::MAX.
    let signed = 0i64.checked_sub_unsigned(magnitude)?;
    Some(Integer::Signed(signed))
}

fn unsigned(out: &mut Vec<u8>, u: u64) {
    if u < 128 {
        out.push(u as u8);
    } else if u <= u8::MAX.into() {
        out.extend_from_slice(&[0xcc, u as u8]);
    } else if u <= u16::MAX.into() {
        out.push(0xcd);
        out.extend_from_slice(&(u as u16).to_be_bytes());
    } else if u <= u32::MAX.into() {
        out.push(0xce);
        out.extend_from_slice(&(u as u32).to_be_bytes());
    } else {
        out.push(0xcf);
        out.extend_from_slice(&u.to_be_bytes());
    }
}

fn signed(out: &mut Vec<u8>, i: i64) {
    if i >= -32 {
        out.push(i as i8 as u8);
    } else if i >= i8::MIN.into() {
        out.extend_from_slice(&[0xd0, i as i8 as u8]);
    } else if i >= i16::MIN.into() {
        out.push(0xd1);
        out.extend_from_slice(&(i as i16).to_be_bytes());
    } else if i >= i32::MIN.into() {
        out.push(0xd2);
        out.extend_from_slice(&(i as i32).to_be_bytes());
    } else {
        out.push(0xd3);
        out.extend_from_slice(&i.to_be_bytes());
    }
}

/// Decodes one value that must fill `bytes` exactly.
pub fn decode(bytes: &[u8]) -> Result<Value, String> {
    let mut reader = Reader { bytes, at: 0 };
    let value = reader.value(0)?;
    if reader.at != bytes.len() {
        return Err(format!("{} bytes after the value", bytes.len() - reader.at));
    }
    Ok(value)
}

struct Reader<'a> {
    bytes: &'a [u8],
    at: usize,
}

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8], String> {
        let end = self
            .at
            .checked_add(n)
            .filter(|end| *end <= self.bytes.len())
            .ok_or_else(|| format!("truncated at byte {} (wanted {n} more)", self.at))?;
        let out = &self.bytes[self.at..end];
        self.at = end;
        Ok(out)
    }

    fn byte(&mut self) -> Result<u8, String> {
        Ok(self.take(1)?[0])
    }

    fn be<const N: usize>(&mut self) -> Result<[u8; N], String> {
        Ok(self.take(N)?.try_into().expect("take gave N bytes"))
    }

    fn len(&mut self, width: usize) -> Result<usize, String> {
        Ok(match width {
            1 => self.byte()? as usize,
            2 => u16::from_be_bytes(self.be()?) as usize,
            _ => u32::from_be_bytes(self.be()?) as usize,
        })
    }

    fn value(&mut self, depth: usize) -> Result<Value, String> {
        if depth > MAX_DEPTH {
            return Err(format!("nested deeper than {MAX_DEPTH}"));
        }
        let marker = self.byte()?;
        Ok(match marker {
            0x00..=0x7f => Value::from(marker),
            0x80..=0x8f => self.map((marker & 0x0f) as usize, depth)?,
            0x90..=0x9f => self.array((marker & 0x0f) as usize, depth)?,
            0xa0..=0xbf => self.string((marker & 0x1f) as usize)?,
            0xc0 => Value::Null,
            0xc2 => Value::Bool(false),
            0xc3 => Value::Bool(true),
            0xca => float(f32::from_be_bytes(self.be()?).into())?,
            0xcb => float(f64::from_be_bytes(self.be()?))?,
            0xcc => Value::from(self.byte()?),
            0xcd => Value::from(u16::from_be_bytes(self.be()?)),
            0xce => Value::from(u32::from_be_bytes(self.be()?)),
            0xcf => Value::from(u64::from_be_bytes(self.be()?)),
            0xd0 => Value::from(self.byte()? as i8),
            0xd1 => Value::from(i16::from_be_bytes(self.be()?)),
            0xd2 => Value::from(i32::from_be_bytes(self.be()?)),
            0xd3 => Value::from(i64::from_be_bytes(self.be()?)),
            0xd9 => {
                let n = self.len(1)?;
                self.string(n)?
            }
            0xda => {
                let n = self.len(2)?;
                self.string(n)?
            }
            0xdb => {
                let n = self.len(4)?;
                self.string(n)?
            }
            0xdc => {
                let n = self.len(2)?;
                self.array(n, depth)?
            }
            0xdd => {
                let n = self.len(4)?;
                self.array(n, depth)?
            }
            0xde => {
                let n = self.len(2)?;
                self.map(n, depth)?
            }
            0xdf => {
                let n = self.len(4)?;
                self.map(n, depth)?
            }
            0xd4..=0xd8 => {
                let n = 1 << (marker - 0xd4);
                self.ext(n)?
            }
            0xc7 => {
                let n = self.len(1)?;
                self.ext(n)?
            }
            0xc8 => {
                let n = self.len(2)?;
                self.ext(n)?
            }
            0xc9 => {
                let n = self.len(4)?;
                self.ext(n)?
            }
            0xe0..=0xff => Value::from(marker as i8),
            0xc4..=0xc6 => return Err("binary data is not a JSON value".into()),
            0xc1 => return Err("byte 0xc1 is never used in MessagePack".into()),
        })
    }

    fn string(&mut self, n: usize) -> Result<Value, String> {
        let bytes = self.take(n)?;
        std::str::from_utf8(bytes)
            .map(|s| Value::String(s.to_string()))
            .map_err(|e| format!("a string is not UTF-8: {e}"))
    }

    fn array(&mut self, n: usize, depth: usize) -> Result<Value, String> {
        // Every element takes at least a byte: a length past the end is
        // damage, found before anything is allocated for it.
        if n > self.bytes.len() - self.at {
            return Err(format!("an array of {n} elements is longer than its blob"));
        }
        let mut items = Vec::with_capacity(n);
        for _ in 0..n {
            items.push(self.value(depth + 1)?);
        }
        Ok(Value::Array(items))
    }

    fn map(&mut self, n: usize, depth: usize) -> Result<Value, String> {
        if n > (self.bytes.len() - self.at) / 2 {
            return Err(format!("a map of {n} entries is longer than its blob"));
        }
        let mut map = Map::new();
        for _ in 0..n {
            let Value::String(key) = self.value(depth + 1)? else {
                return Err("a map key is not a string".into());
            };
            let value = self.value(depth + 1)?;
            map.insert(key, value);
        }
        Ok(Value::Object(map))
    }

    fn ext(&mut self, n: usize) -> Result<Value, String> {
        let kind = self.byte()? as i8;
        let data = self.take(n)?;
        if kind != EXACT_NUMBER_EXT {
            return Err(format!("unknown MessagePack extension type {kind}"));
        }
        let text = std::str::from_utf8(data).map_err(|_| "an exact number is not ASCII")?;
        exact_number(text)
            .map(Value::Number)
            .ok_or_else(|| format!("{text:?} is not a JSON number"))
    }
}

/// A finite float as a JSON number.
fn float(x: f64) -> Result<Value, String> {
    Number::from_f64(x)
        .map(Value::Number)
        .ok_or_else(|| format!("{x} is not a JSON number"))
}

/// The number whose JSON text is exactly `text`, if it is one.
pub fn exact_number(text: &str) -> Option<Number> {
    let n: Number = serde_json::from_str(text).ok()?;
    (n.as_str() == text).then_some(n)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn round_trip(value: Value) -> Value {
        let Value::Object(map) = &value else {
            panic!("an object")
        };
        let mut out = Vec::new();
        encode_map(map, &mut out);
        decode(&out).unwrap()
    }

    #[test]
    fn numbers_keep_their_text() {
        for text in [
            "0",
            "-1",
            "-32",
            "-33",
            "127",
            "128",
            "-9223372036854775808",
            "18446744073709551615",
            "18446744073709551616",
            "98765432109876543210987654321",
            "0.1000000000000000055511151231257827",
            "12.345678901234567890123",
            "12.5",
            "1.50",
            "1e5",
            "1E+5",
            "-0",
            "-0.0",
            "1e300",
            "1e-7",
            "0.1",
            "1e999999",
        ] {
            let value: Value = serde_json::from_str(&format!("{{\"n\": {text}}}")).unwrap();
            // serde_json spells an exponent one way (`1e+5`); digits and
            // everything else stay as written.
            let parsed = value["n"].as_number().unwrap().as_str().to_string();
            if !text.contains(['e', 'E']) {
                assert_eq!(parsed, text);
            }
            let back = round_trip(value.clone());
            assert_eq!(back["n"].as_number().unwrap().as_str(), parsed, "{text}");
            assert_eq!(back, value);
        }
    }

    #[test]
    fn plain_values_use_standard_formats() {
        let value = json!({"i": 5, "x": 1.5, "s": "ü", "a": [null, true], "o": {}});
        let Value::Object(map) = &value else {
            unreachable!()
        };
        let mut out = Vec::new();
        encode_map(map, &mut out);
        // Any MessagePack reader gets the same values back.
        use rmpv_like::Any;
        let theirs: std::collections::BTreeMap<String, Any> = rmp_serde::from_slice(&out).unwrap();
        assert_eq!(theirs["i"], Any::Int(5));
        assert_eq!(theirs["x"], Any::Float(1.5));
        assert_eq!(theirs["s"], Any::Text("ü".into()));
        assert_eq!(theirs["a"], Any::List(vec![Any::Null(()), Any::Bool(true)]));
        assert_eq!(theirs["o"], Any::Map(Default::default()));
        assert_eq!(round_trip(value.clone()), value);
    }

    /// Enough of a MessagePack value for rmp_serde to read any standard
    /// format into without serde_json's number handling.
    mod rmpv_like {
        #[derive(serde::Deserialize, Debug, PartialEq)]
        #[serde(untagged)]
        pub enum Any {
            Null(()),
            Bool(bool),
            Int(i64),
            Float(f64),
            Text(String),
            List(Vec<Any>),
            Map(std::collections::BTreeMap<String, Any>),
        }
    }

    #[test]
    fn damage_is_an_error() {
        for bytes in [
            &[0x81, 0xa1, b'n', 0xc7, 2, 9, b'1', b'2'][..],
            &[0x81, 0xa1, b'n', 0xc7, 2, 1, b'x', b'2'],
            &[0x81, 0xa1, b'n', 0xc7, 3, 1, b'0', b'1', b'2'],
            &[0x81, 0x01, 0x02],
            &[0xdd, 0xff, 0xff, 0xff, 0xff],
            &[0xdf, 0xff, 0xff, 0xff, 0xff],
            &[0xc4, 1, 0],
            &[0xc1],
            &[0xcb, 0x7f, 0xf8, 0, 0, 0, 0, 0, 0],
            &[0x80, 0x80],
        ] {
            assert!(decode(bytes).is_err(), "{bytes:x?}");
        }
        let deep = [0x91u8; 10_000];
        assert!(decode(&deep).unwrap_err().contains("deeper"));
    }

    /// The rule before `plain_integer`: an integer when the number's text
    /// is what `u64`'s or `i64`'s `to_string` gives back.
    fn integer_by_round_trip(text: &str) -> Option<i128> {
        let n: Number = serde_json::from_str(text).ok()?;
        if let Some(u) = n.as_u64().filter(|u| text == u.to_string()) {
            return Some(u.into());
        }
        n.as_i64().filter(|i| text == i.to_string()).map(i128::from)
    }

    fn integer_now(text: &str) -> Option<i128> {
        match plain_integer(text)? {
            Integer::Unsigned(u) => Some(u.into()),
            Integer::Signed(i) => Some(i.into()),
        }
    }

    #[test]
    fn integers_are_told_apart_as_before() {
        for text in [
            "0",
            "-0",
            "00",
            "01",
            "-01",
            "1",
            "-1",
            "+1",
            "9223372036854775807",
            "9223372036854775808",
            "-9223372036854775808",
            "-9223372036854775809",
            "18446744073709551615",
            "18446744073709551616",
            "1.0",
            "1e2",
            "",
            "-",
        ] {
            assert_eq!(integer_now(text), integer_by_round_trip(text), "{text:?}");
        }
    }

    proptest::proptest! {
        #[test]
        fn integer_texts_are_classified_as_before(text in "-?[0-9]{1,21}") {
            proptest::prop_assert_eq!(integer_now(&text), integer_by_round_trip(&text));
        }

        #[test]
        fn doubles_are_stored_as_doubles_exactly_when_before(x in proptest::num::f64::NORMAL | proptest::num::f64::SUBNORMAL | proptest::num::f64::ZERO) {
            let n = Number::from_f64(x).expect("finite");
            let before = n.as_f64().filter(|x| Number::from_f64(*x).is_some_and(|back| back.as_str() == n.as_str())).is_some()
                && integer_by_round_trip(n.as_str()).is_none();
            let mut out = Vec::new();
            number(&n, &mut out);
            proptest::prop_assert_eq!(out[0] == 0xcb, before, "{}", n.as_str());
        }
    }
}
