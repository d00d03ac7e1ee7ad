//! `hstore` (the extension's key-value type) as a JSON object of strings
//! and nulls: `{"color": "red", "size": null}`, what an app's hash of it
//! is. The object's keys are kept in one order (their bytes'), so one
//! value is one body.
//!
//! PostgreSQL's text of it ([`text`]) is what a write casts into the
//! column, and what a read ([`parse`]) reads back, the way `hstore_in`
//! reads any spelling: pairs `key => value` separated by commas, keys and
//! values quoted with `"` or not, `\` escaping the next character, an
//! unquoted `NULL` (any case) a null value. Of a key written twice, the
//! first is kept where PostgreSQL's sort keeps it (fewer than seven
//! pairs); where its sort's order of equal keys decides, two different
//! values of one key are refused rather than guessed between.

use serde_json::{Map, Value};

use crate::conversion::push_quoted;

/// The object `text` (an `hstore`'s text) holds.
pub fn parse(text: &str) -> Result<Map<String, Value>, String> {
    let shown = crate::conversion::shown(text);
    let chars: Vec<char> = text.chars().collect();
    let mut pairs: Vec<(String, Option<String>)> = Vec::new();
    let mut at = 0usize;
    // A key, or the end.
    while let Some((key, _)) = word(&chars, &mut at, false, &shown)? {
        // `=>`, spaces before it only.
        loop {
            match chars.get(at) {
                Some('=') => break,
                None => return Err(end()),
                Some(&c) if is_space(c) => at += 1,
                Some(_) => return Err(syntax(&shown, at)),
            }
        }
        at += 1;
        match chars.get(at) {
            Some('>') => at += 1,
            None => return Err(end()),
            Some(_) => return Err(syntax(&shown, at)),
        }
        let Some((value, quoted)) = word(&chars, &mut at, true, &shown)? else {
            return Err(end());
        };
        let value = (quoted || !value.eq_ignore_ascii_case("null")).then_some(value);
        pairs.push((key, value));
        // `,`, spaces, or the end.
        loop {
            match chars.get(at) {
                Some(',') => {
                    at += 1;
                    break;
                }
                None => return unique(pairs),
                Some(&c) if is_space(c) => at += 1,
                Some(_) => return Err(syntax(&shown, at)),
            }
        }
    }
    unique(pairs)
}

/// The object's `hstore` text, as `hstore_out` prints it: each key and
/// value quoted, `"` and `\` escaped with `\`, a null value `NULL`,
/// shorter keys first, then by their bytes.
pub fn text(map: &Map<String, Value>) -> String {
    let mut pairs: Vec<(&String, &Value)> = map.iter().collect();
    pairs.sort_by(|a, b| (a.0.len(), a.0.as_bytes()).cmp(&(b.0.len(), b.0.as_bytes())));
    let mut out = String::new();
    for (i, (k, v)) in pairs.into_iter().enumerate() {
        if i > 0 {
            out.push_str(", ");
        }
        push_pair(&mut out, k, v.as_str());
    }
    out
}

/// One pair as `hstore_out` prints it: `"key"=>"value"` (`"` and `\`
/// escaped with `\`), or `"key"=>NULL`.
pub fn push_pair(out: &mut String, key: &str, value: Option<&str>) {
    push_quoted(out, key);
    out.push_str("=>");
    match value {
        Some(v) => push_quoted(out, v),
        None => out.push_str("NULL"),
    }
}

/// A JSON value written for an `hstore` column, checked: an object whose
/// values are strings or nulls, nothing holding the NUL character.
pub fn accept(value: &Value) -> Result<Map<String, Value>, String> {
    let Some(map) = value.as_object() else {
        return Err(format!(
            "expected an object of strings and nulls, got {} ({value})",
            schemaless::cell::json_kind(value)
        ));
    };
    for (key, value) in map {
        if key.contains('\0') {
            return Err("an hstore key cannot contain the NUL character (\\u0000)".into());
        }
        match value {
            Value::Null => {}
            Value::String(s) if !s.contains('\0') => {}
            Value::String(_) => {
                return Err(format!(
                    "{key:?}: an hstore value cannot contain the NUL character (\\u0000)"
                ))
            }
            other => {
                return Err(format!(
                    "{key:?}: an hstore value is a string or null, got {} ({other})",
                    schemaless::cell::json_kind(other)
                ))
            }
        }
    }
    Ok(map.clone())
}

/// `get_val`: a key (`value` false: `=` ends it) or a value (`,` ends
/// it) from `at`, and whether it was quoted; `None` at the end of the
/// input before one starts. `at` is left on the first character after it.
fn word(
    chars: &[char],
    at: &mut usize,
    value: bool,
    shown: &str,
) -> Result<Option<(String, bool)>, String> {
    let mut out = String::new();
    // Spaces before it.
    while chars.get(*at).is_some_and(|&c| is_space(c)) {
        *at += 1;
    }
    match chars.get(*at) {
        None => return Ok(None),
        Some('"') => {
            *at += 1;
            loop {
                match chars.get(*at) {
                    None => return Err(end()),
                    Some('"') => {
                        *at += 1;
                        return Ok(Some((out, true)));
                    }
                    Some('\\') => {
                        let escaped = chars.get(*at + 1).ok_or_else(end)?;
                        out.push(*escaped);
                        *at += 2;
                    }
                    Some(&c) => {
                        out.push(c);
                        *at += 1;
                    }
                }
            }
        }
        Some('=') if !value => return Err(syntax(shown, *at)),
        // The first character is taken whatever it is (a `,` or a `=` in
        // a value too); the ones after it end the word where they would.
        Some(_) => {}
    }
    let mut first = true;
    loop {
        match chars.get(*at) {
            None => break,
            Some('\\') => {
                let escaped = chars.get(*at + 1).ok_or_else(end)?;
                out.push(*escaped);
                *at += 2;
            }
            Some('=') if !value && !first => break,
            Some(',') if value && !first => break,
            Some(&c) if is_space(c) => {
                // Taken with the word, as `get_val` consumes it.
                *at += 1;
                break;
            }
            Some(&c) => {
                out.push(c);
                *at += 1;
            }
        }
        first = false;
    }
    Ok(Some((out, false)))
}

/// The pairs as one object, each key once (`hstoreUniquePairs`): the
/// first of a key written twice, where PostgreSQL's sort keeps it so.
fn unique(pairs: Vec<(String, Option<String>)>) -> Result<Map<String, Value>, String> {
    let mut map = Map::new();
    // PostgreSQL's sort of fewer than seven pairs, or of pairs already in
    // its order, keeps equal keys as written; otherwise it may not.
    let in_order = pairs
        .windows(2)
        .all(|w| (w[0].0.len(), w[0].0.as_bytes()) <= (w[1].0.len(), w[1].0.as_bytes()));
    let stable = pairs.len() < 7 || in_order;
    for (key, value) in pairs {
        let value = value.map_or(Value::Null, Value::String);
        match map.get(&key) {
            None => {
                map.insert(key, value);
            }
            Some(kept) if *kept == value || stable => {}
            Some(_) => {
                return Err(format!(
                    "the key {} is written twice with different values: PostgreSQL keeps either",
                    crate::conversion::shown(&key)
                ))
            }
        }
    }
    Ok(map)
}

/// `scanner_isspace`: the spaces of PostgreSQL's own SQL scanner.
fn is_space(c: char) -> bool {
    matches!(c, ' ' | '\t' | '\n' | '\r' | '\x0c')
}

fn syntax(shown: &str, at: usize) -> String {
    format!("syntax error in hstore {shown}, at character {}", at + 1)
}

fn end() -> String {
    "syntax error in hstore: unexpected end of string".into()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn spellings_read_as_objects_and_print_as_postgresql_prints_them() {
        for (written, object) in [
            ("", json!({})),
            ("  ", json!({})),
            ("a=>1", json!({"a": "1"})),
            (
                r#"b=>1, a=>NULL, aa=>"x\"y", ""=>"", c=>"NULL", d=>null"#,
                json!({"": "", "a": null, "b": "1", "c": "NULL", "d": null, "aa": "x\"y"}),
            ),
            (r#""k k"=>v\,w"#, json!({"k k": "v,w"})),
            ("a=>b,", json!({"a": "b"})),
            ("a=>1, a=>2", json!({"a": "1"})),
            ("a=>,b", json!({"a": ",b"})),
            ("a>b=>c", json!({"a>b": "c"})),
            (r"a=>\NULL", json!({"a": null})),
            ("é=>ü", json!({"é": "ü"})),
        ] {
            let parsed = parse(written).unwrap_or_else(|e| panic!("{written}: {e}"));
            assert_eq!(Value::Object(parsed), object, "{written}");
        }
        let map = parse(r#"b=>1, a=>NULL, aa=>"x\"y", ""=>"", c=>"a\\b""#).unwrap();
        assert_eq!(
            text(&map),
            r#"""=>"", "a"=>NULL, "b"=>"1", "c"=>"a\\b", "aa"=>"x\"y""#
        );
        assert_eq!(parse(&text(&map)).unwrap(), map);
    }

    #[test]
    fn what_postgresql_refuses_is_refused() {
        for (written, why) in [
            ("a = > b", "syntax error"),
            ("a=>", "end of string"),
            ("a", "end of string"),
            ("=>a", "syntax error"),
            (r#"a=>"open"#, "end of string"),
            ("a=>b c=>d", "syntax error"),
            ("a=>1,b=>1,c=>1,d=>1,e=>1,f=>1,a=>2", "written twice"),
        ] {
            let err = parse(written).unwrap_err();
            assert!(err.contains(why), "{written}: {err}");
        }
        assert!(accept(&json!({"a": 1}))
            .unwrap_err()
            .contains("string or null"));
        assert!(accept(&json!(["a"])).unwrap_err().contains("an object"));
        assert!(accept(&json!({"a\u{0}": "b"})).unwrap_err().contains("NUL"));
    }
}
