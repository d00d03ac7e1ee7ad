//! Binary forms that hold other values (ranges, multiranges, arrays of
//! any dimensions), each element read by [`super::binary_text`].

use super::*;

/// A range's binary form (`range_send`): a flags byte, then each bound
/// that is there as its length and its subtype's binary form, as the
/// range literal PostgreSQL reads (`[1,5)`, `(,"2015-03-08")`, `empty`).
pub(super) fn range_text(subtype: u32, value: &[u8]) -> Option<String> {
    const EMPTY: u8 = 0x01;
    const LOWER_INCLUSIVE: u8 = 0x02;
    const UPPER_INCLUSIVE: u8 = 0x04;
    const LOWER_INFINITE: u8 = 0x08;
    const UPPER_INFINITE: u8 = 0x10;
    let (&flags, mut rest) = value.split_first()?;
    if flags & !(EMPTY | LOWER_INCLUSIVE | UPPER_INCLUSIVE | LOWER_INFINITE | UPPER_INFINITE) != 0 {
        return None;
    }
    if flags & EMPTY != 0 {
        return rest.is_empty().then(|| "empty".to_string());
    }
    let mut bound = |infinite: u8| -> Option<String> {
        if flags & infinite != 0 {
            return Some(String::new());
        }
        let (len, after) = rest.split_first_chunk::<4>()?;
        let len = usize::try_from(i32::from_be_bytes(*len)).ok()?;
        let text = binary_text(subtype, after.get(..len)?, BUILT_IN)?;
        rest = &after[len..];
        Some(format!(
            "\"{}\"",
            text.replace('\\', "\\\\").replace('"', "\\\"")
        ))
    };
    let lower = bound(LOWER_INFINITE)?;
    let upper = bound(UPPER_INFINITE)?;
    rest.is_empty().then(|| {
        format!(
            "{}{lower},{upper}{}",
            if flags & LOWER_INCLUSIVE != 0 {
                '['
            } else {
                '('
            },
            if flags & UPPER_INCLUSIVE != 0 {
                ']'
            } else {
                ')'
            },
        )
    })
}

/// A multirange's binary form (`multirange_send`: the count of ranges,
/// then each range's length and `range_send` form) as the multirange
/// literal PostgreSQL reads (`{[1,3),[5,7)}`).
pub(super) fn multirange_text(subtype: u32, value: &[u8]) -> Option<String> {
    let (count, mut rest) = value.split_first_chunk::<4>()?;
    let count = usize::try_from(i32::from_be_bytes(*count)).ok()?;
    let mut ranges = Vec::new();
    for _ in 0..count {
        let (len, after) = rest.split_first_chunk::<4>()?;
        let len = usize::try_from(i32::from_be_bytes(*len)).ok()?;
        ranges.push(range_text(subtype, after.get(..len)?)?);
        rest = &after[len..];
    }
    rest.is_empty().then(|| format!("{{{}}}", ranges.join(",")))
}

/// An array's binary form (dimensions, a NULL flag, the element type,
/// each dimension's length and lower bound, then each element's length
/// and bytes) as an array literal: nested by its dimensions, and
/// prefixed by its bounds (`[0:1]={…}`) when one is not 1, so that
/// PostgreSQL reads the value sent, and the layout refuses it by name.
pub(super) fn array_text(oid: u32, value: &[u8], extensions: &Extensions) -> Option<String> {
    let element = match oid {
        1000 => 16,
        1005 => 21,
        1007 => 23,
        1016 => 20,
        1021 => 700,
        1022 => 701,
        1009 => 25,
        1015 => 1043,
        1014 => 1042,
        2951 => 2950,
        1231 => 1700,
        1182 => 1082,
        1115 => 1114,
        1185 => 1184,
        1183 => 1083,
        1270 => 1266,
        1187 => 1186,
        1001 => 17,
        1041 => 869,
        651 => 650,
        1040 => 829,
        775 => 774,
        3807 => 3802,
        199 => 114,
        791 => 790,
        1561 => 1560,
        1563 => 1562,
        1017 => 600,
        1018 => 601,
        1019 => 602,
        1020 => 603,
        1027 => 604,
        629 => 628,
        719 => 718,
        3905 => 3904,
        3927 => 3926,
        3907 => 3906,
        3913 => 3912,
        3909 => 3908,
        3911 => 3910,
        6150 => 4451,
        6157 => 4536,
        6151 => 4532,
        6155 => 4535,
        6152 => 4533,
        6153 => 4534,
        3643 => 3614,
        3645 => 3615,
        _ => extensions.element_of(oid)?,
    };
    // A `box` has commas of its own: its arrays separate with `;`.
    let delimiter = if element == 603 { ";" } else { "," };
    let int = |at: usize| -> Option<i32> {
        value
            .get(at..at + 4)
            .map(|b| i32::from_be_bytes([b[0], b[1], b[2], b[3]]))
    };
    let ndim = usize::try_from(int(0)?).ok()?;
    if int(8)? as u32 != element || ndim > legacy::conversion::dims::MAX_DIMENSIONS {
        return None;
    }
    let mut dims = Vec::with_capacity(ndim);
    let mut bounds = String::new();
    let mut from_one = true;
    for d in 0..ndim {
        let len = usize::try_from(int(12 + 8 * d)?).ok()?;
        let lower = int(16 + 8 * d)?;
        bounds.push_str(&format!("[{lower}:{}]", i64::from(lower) + len as i64 - 1));
        from_one &= lower == 1;
        dims.push(len);
    }
    let count = dims
        .iter()
        .try_fold(1usize, |n, &len| n.checked_mul(len))
        .filter(|_| ndim > 0)
        .unwrap_or(0);
    let mut at = 12 + 8 * ndim;
    let mut items = Vec::with_capacity(count.min(value.len() / 4));
    for _ in 0..count {
        let len = int(at)?;
        at += 4;
        if len < 0 {
            items.push("NULL".to_string());
            continue;
        }
        let len = usize::try_from(len).ok()?;
        let text = binary_text(element, value.get(at..at + len)?, extensions)?;
        at += len;
        items.push(format!(
            "\"{}\"",
            text.replace('\\', "\\\\").replace('"', "\\\"")
        ));
    }
    if at != value.len() {
        return None;
    }
    let mut out = String::new();
    if !from_one {
        out.push_str(&bounds);
        out.push('=');
    }
    nest_literal(&mut out, &dims, &mut items.iter(), delimiter);
    Some(out)
}

/// Element texts (already quoted, or `NULL`) into an array literal of
/// dimensions `dims`: `{{"1","2"},{"3",NULL}}`.
fn nest_literal<'a>(
    out: &mut String,
    dims: &[usize],
    items: &mut impl Iterator<Item = &'a String>,
    delimiter: &str,
) {
    out.push('{');
    if let Some((&len, inner)) = dims.split_first() {
        for i in 0..len {
            if i > 0 {
                out.push_str(delimiter);
            }
            if inner.is_empty() {
                out.push_str(items.next().map_or("NULL", String::as_str));
            } else {
                nest_literal(out, inner, items, delimiter);
            }
        }
    }
    out.push('}');
}
