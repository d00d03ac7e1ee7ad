//! The shape of an array value: PostgreSQL's arrays have up to six
//! dimensions, each subscripted from a lower bound, and a cell keeps one
//! as nested JSON arrays (`'{{1,2},{3,4}}'` is `[[1,2],[3,4]]`).
//!
//! A JSON array of arrays is a PostgreSQL array of two dimensions only
//! when it is rectangular (every inner array as long as the others, as
//! PostgreSQL requires: `{{1},{2,3}}` is refused there too); an empty
//! inner array is no PostgreSQL array at all (`{{}}` is malformed). The
//! bounds are not kept: a cell's array always starts at 1, as every
//! array PostgreSQL builds from a literal does, so a stored value with
//! another lower bound (`'[0:1]={a,b}'`) is refused by name when it is
//! read, rather than read as another value.
//!
//! A `json[]`'s or `jsonb[]`'s element may itself be an array, so theirs
//! are flat: a nested JSON array there is one element.

use serde_json::Value;

/// The most dimensions PostgreSQL's arrays have (`MAXDIM`).
pub const MAX_DIMENSIONS: usize = 6;

/// The length of each dimension of `value`, an array (none for `[]`). With
/// `flat`, an array is one dimension whatever its items are.
pub fn dimensions(value: &Value, flat: bool) -> Result<Vec<usize>, String> {
    let items = value
        .as_array()
        .ok_or_else(|| super::expected("an array", value))?;
    if items.is_empty() {
        return Ok(Vec::new());
    }
    let mut dims = vec![items.len()];
    if flat {
        return Ok(dims);
    }
    let mut level = items;
    while let Some(Value::Array(first)) = level.first() {
        if first.is_empty() {
            return Err("an empty array inside an array, which PostgreSQL cannot hold".into());
        }
        dims.push(first.len());
        if dims.len() > MAX_DIMENSIONS {
            return Err(format!(
                "more than {MAX_DIMENSIONS} dimensions, PostgreSQL's most"
            ));
        }
        level = first;
    }
    check(items, &dims, &mut Vec::new())?;
    Ok(dims)
}

/// Every item at each depth of `items` an array of the length `dims`
/// says, and none below the last (`at` is the path so far, for the
/// message).
fn check(items: &[Value], dims: &[usize], at: &mut Vec<usize>) -> Result<(), String> {
    for (i, item) in items.iter().enumerate() {
        at.push(i);
        match (item, dims.get(1)) {
            (Value::Array(inner), Some(&len)) if inner.len() == len => {
                check(inner, &dims[1..], at)?
            }
            (Value::Array(inner), Some(&len)) => {
                return Err(format!(
                    "element {} has {} items where its first sibling has {len}: \
                     PostgreSQL's arrays of arrays are rectangular",
                    path(at),
                    inner.len()
                ))
            }
            (Value::Array(_), None) => {
                return Err(format!(
                    "element {} is an array where its first sibling is not: \
                     PostgreSQL's arrays of arrays are rectangular",
                    path(at)
                ))
            }
            (_, Some(_)) => {
                return Err(format!(
                    "element {} is not an array where its first sibling is: \
                     PostgreSQL's arrays of arrays are rectangular",
                    path(at)
                ))
            }
            (_, None) => {}
        }
        at.pop();
    }
    Ok(())
}

/// The elements of an array of dimensions `dims` ([`dimensions`]), in
/// PostgreSQL's order (the last subscript varying fastest).
pub fn leaves<'a>(value: &'a Value, dims: &[usize]) -> Vec<&'a Value> {
    let mut out = Vec::new();
    if !dims.is_empty() {
        push_leaves(value, dims.len(), &mut out);
    }
    out
}

fn push_leaves<'a>(value: &'a Value, depth: usize, out: &mut Vec<&'a Value>) {
    match value {
        Value::Array(items) if depth > 0 => {
            for item in items {
                push_leaves(item, depth - 1, out);
            }
        }
        other => out.push(other),
    }
}

/// `flat` elements (as many as the product of `dims`) nested into the
/// JSON arrays of those dimensions.
pub fn nest(dims: &[usize], flat: Vec<Value>) -> Value {
    if dims.len() <= 1 {
        return Value::Array(flat);
    }
    let mut level = flat;
    for &len in dims[1..].iter().rev() {
        let mut outer = Vec::with_capacity(level.len() / len.max(1));
        let mut rest = level.into_iter();
        loop {
            let chunk: Vec<Value> = rest.by_ref().take(len).collect();
            if chunk.is_empty() {
                break;
            }
            outer.push(Value::Array(chunk));
        }
        level = outer;
    }
    Value::Array(level)
}

/// How a message names the element at flat position `i` of an array of
/// `dims`: `element 3` in a flat array, `element [1][0]` (each index from
/// 0, as in the JSON) in a nested one.
pub fn position(dims: &[usize], i: usize) -> String {
    if dims.len() <= 1 {
        return format!("element {i}");
    }
    let mut at = vec![0; dims.len()];
    let mut rest = i;
    for (d, len) in dims.iter().enumerate().rev() {
        at[d] = rest % len;
        rest /= len;
    }
    format!("element {}", path(&at))
}

fn path(at: &[usize]) -> String {
    at.iter().map(|i| format!("[{i}]")).collect()
}

/// The dimensions PostgreSQL's `array_dims` prints (`[1:2][1:3]`), if
/// every one starts at 1; otherwise the refusal naming them.
pub fn from_bounds(text: &str) -> Result<Vec<usize>, String> {
    let refused = || {
        format!(
            "an array subscripted {text}: a cell keeps an array's elements, not its bounds, \
             and every array it holds is subscripted from 1"
        )
    };
    let mut dims = Vec::new();
    for part in text.split_terminator(']') {
        let (lower, upper) = part
            .strip_prefix('[')
            .and_then(|p| p.split_once(':'))
            .ok_or_else(|| format!("{text:?} is not an array's dimensions"))?;
        let lower: i64 = lower.parse().map_err(|_| refused())?;
        let upper: i64 = upper.parse().map_err(|_| refused())?;
        if lower != 1 || upper < 1 {
            return Err(refused());
        }
        dims.push(upper as usize);
    }
    Ok(dims)
}

/// A PostgreSQL array literal of `flat` element texts nested by `dims`,
/// `delimiter` between elements: `{{"a","b"},{NULL,"c"}}`.
pub fn literal<'a>(
    dims: &[usize],
    flat: impl IntoIterator<Item = &'a Value>,
    delimiter: char,
) -> String {
    let mut out = String::new();
    if dims.is_empty() {
        out.push_str("{}");
        return out;
    }
    let mut items = flat.into_iter();
    push_level(&mut out, dims, &mut items, delimiter);
    out
}

fn push_level<'a>(
    out: &mut String,
    dims: &[usize],
    items: &mut impl Iterator<Item = &'a Value>,
    delimiter: char,
) {
    out.push('{');
    for i in 0..dims[0] {
        if i > 0 {
            out.push(delimiter);
        }
        if dims.len() > 1 {
            push_level(out, &dims[1..], items, delimiter);
            continue;
        }
        match items.next() {
            None | Some(Value::Null) => out.push_str("NULL"),
            Some(Value::String(s)) => super::push_quoted(out, s),
            Some(other) => out.push_str(&other.to_string()),
        }
    }
    out.push('}');
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_rectangular_array_has_its_dimensions() {
        assert_eq!(dimensions(&json!([]), false).unwrap(), Vec::<usize>::new());
        assert_eq!(dimensions(&json!([1, null]), false).unwrap(), vec![2]);
        let cube = json!([[[1, 2, 3], [4, 5, 6]], [[7, 8, 9], [10, 11, 12]]]);
        assert_eq!(dimensions(&cube, false).unwrap(), vec![2, 2, 3]);
        assert_eq!(dimensions(&cube, true).unwrap(), vec![2]);
        let flat: Vec<Value> = leaves(&cube, &[2, 2, 3]).into_iter().cloned().collect();
        assert_eq!(flat, (1..=12).map(Value::from).collect::<Vec<_>>());
        assert_eq!(nest(&[2, 2, 3], flat.clone()), cube);
        assert_eq!(position(&[2, 2, 3], 7), "element [1][0][1]");
        assert_eq!(position(&[12], 7), "element 7");
    }

    #[test]
    fn a_ragged_or_mixed_array_is_refused_by_its_element() {
        let ragged = dimensions(&json!([[1], [2, 3]]), false).unwrap_err();
        assert!(ragged.contains("element [1] has 2 items"), "{ragged}");
        let deeper = dimensions(&json!([[1, 2], [3, [4]]]), false).unwrap_err();
        assert!(deeper.contains("element [1][1] is an array"), "{deeper}");
        let scalar = dimensions(&json!([[1], 2]), false).unwrap_err();
        assert!(scalar.contains("element [1] is not an array"), "{scalar}");
        assert!(dimensions(&json!([[]]), false)
            .unwrap_err()
            .contains("empty array"));
        let seven = json!([[[[[[[1]]]]]]]);
        assert!(dimensions(&seven, false)
            .unwrap_err()
            .contains("6 dimensions"));
        assert_eq!(dimensions(&json!([[[[[[1]]]]]]), false).unwrap().len(), 6);
    }

    #[test]
    fn a_literal_nests_as_postgresql_writes_it() {
        let flat = [json!("a"), Value::Null, json!("b\"c"), json!(4)];
        assert_eq!(literal(&[2, 2], &flat, ','), r#"{{"a",NULL},{"b\"c",4}}"#);
        assert_eq!(literal(&[4], &flat, ';'), r#"{"a";NULL;"b\"c";4}"#);
        assert_eq!(literal(&[], &[], ','), "{}");
        assert!(leaves(&json!([]), &[]).is_empty());
    }

    #[test]
    fn bounds_other_than_one_are_refused_by_name() {
        assert_eq!(from_bounds("[1:2][1:3]").unwrap(), vec![2, 3]);
        let zero = from_bounds("[0:1]").unwrap_err();
        assert!(zero.contains("subscripted [0:1]"), "{zero}");
        assert!(from_bounds("[1:2][-3:-2]").is_err());
        assert!(from_bounds("nonsense").is_err());
    }
}
