//! Multirange types as cell values: `int4multirange`, `int8multirange`,
//! `nummultirange`, `datemultirange`, `tsmultirange`, `tstzmultirange`.
//!
//! A multirange is a JSON string in PostgreSQL's own syntax, `{` ranges
//! `}`, in the one canonical form PostgreSQL keeps
//! (`multirange_canonicalize`): each range canonical as a range field's
//! is ([`crate::range`]), empty ones left out, sorted by their lower then
//! upper bounds, and ranges that overlap or meet merged:
//!
//! | SQL | JSON |
//! |---|---|
//! | `'{[3,4], [1,2], (5,7)}'::int4multirange` | `"{[1,5),[6,7)}"` |
//! | `'{(1.5,2], [2.0,3), empty}'::nummultirange` | `"{(1.5,3)}"` |
//! | `'{}'` | `"{}"` |
//!
//! Read from PostgreSQL range by range (`unnest`), each through the range
//! reading; written as `{` and each range's text with its bounds quoted.

use std::cmp::Ordering;

use crate::range::{self, Bounds, Point, Subtype};

/// The subtype of the multirange type `typname` (`pg_type.typname`).
pub fn subtype_of(typname: &str) -> Option<Subtype> {
    Some(match typname {
        "int4multirange" => Subtype::Int4,
        "int8multirange" => Subtype::Int8,
        "nummultirange" => Subtype::Numeric,
        "datemultirange" => Subtype::Date,
        "tsmultirange" => Subtype::Timestamp,
        "tstzmultirange" => Subtype::Timestamptz,
        _ => return None,
    })
}

fn name(sub: Subtype) -> String {
    sub.name().replace("range", "multirange")
}

/// The canonical form of a multirange an app writes (a JSON string in
/// PostgreSQL's syntax, bounds in the subtype's JSON text or PostgreSQL's).
pub fn accept(sub: Subtype, text: &str) -> Result<String, String> {
    canonical(sub, text, range::point_from_json).map_err(|e| format!("a {}: {e}", name(sub)))
}

/// The canonical form of a multirange read by [`read_expr`].
pub fn render(sub: Subtype, text: &str) -> Result<String, String> {
    canonical(sub, text, range::point_from_read).map_err(|e| format!("a {}: {e}", name(sub)))
}

/// The SQL reading multirange `column`: `{`, each range read as a range
/// field is, `}`.
pub fn read_expr(sub: Subtype, column: &str) -> String {
    format!(
        "CASE WHEN {column} IS NULL THEN NULL ELSE '{{' || coalesce((SELECT string_agg({}, ',' ORDER BY u.n) \
         FROM unnest({column}) WITH ORDINALITY AS u(r, n)), '') || '}}' END",
        range::read_expr(sub, "u.r")
    )
}

/// The text PostgreSQL casts into the column, from a canonical
/// multirange: each range as [`range::param`] writes it.
pub fn param(sub: Subtype, canonical: &str) -> String {
    match ranges(canonical) {
        Ok(ranges) => {
            let written: Vec<String> = ranges.iter().map(|r| range::param(sub, r)).collect();
            format!("{{{}}}", written.join(","))
        }
        Err(_) => canonical.to_string(),
    }
}

fn canonical(
    sub: Subtype,
    text: &str,
    point: impl Fn(Subtype, &str) -> Result<Point, String> + Copy,
) -> Result<String, String> {
    let mut all = Vec::new();
    for literal in ranges(text)? {
        if let Some(bounds) = range::bounds(sub, range::split(literal)?, point)? {
            all.push(bounds);
        }
    }
    let merged = canonicalize(all);
    let texts = merged
        .iter()
        .map(|b| b.text(sub))
        .collect::<Result<Vec<_>, _>>()?;
    Ok(format!("{{{}}}", texts.join(",")))
}

/// `multirange_canonicalize`: sorted by lower then upper bound, each
/// range merged into the one before it when they meet or overlap.
fn canonicalize(mut all: Vec<Bounds>) -> Vec<Bounds> {
    all.sort_by(|a, b| compare(&lower(a), &lower(b)).then_with(|| compare(&upper(a), &upper(b))));
    let mut out: Vec<Bounds> = Vec::with_capacity(all.len());
    for current in all {
        let Some(last) = out.last_mut() else {
            out.push(current);
            continue;
        };
        let meets = adjacent(&upper(last), &lower(&current));
        if !meets && compare(&upper(last), &lower(&current)) == Ordering::Less {
            out.push(current);
            continue;
        }
        // They meet or overlap: one range, to the greater upper bound.
        if compare(&upper(&current), &upper(last)) == Ordering::Greater {
            last.upper = current.upper;
            last.upper_inc = current.upper_inc;
        }
    }
    out
}

/// One bound as `range_cmp_bounds` sees it.
struct Bound<'a> {
    value: Option<&'a Point>,
    inclusive: bool,
    lower: bool,
}

fn lower(b: &Bounds) -> Bound<'_> {
    Bound {
        value: b.lower.as_ref(),
        inclusive: b.lower_inc,
        lower: true,
    }
}

fn upper(b: &Bounds) -> Bound<'_> {
    Bound {
        value: b.upper.as_ref(),
        inclusive: b.upper_inc,
        lower: false,
    }
}

/// `range_cmp_bounds`: an unbounded lower side before everything, an
/// unbounded upper side after; at one value, an exclusive lower bound
/// after it and an exclusive upper bound before it.
fn compare(a: &Bound, b: &Bound) -> Ordering {
    let side = |lower: bool| {
        if lower {
            Ordering::Less
        } else {
            Ordering::Greater
        }
    };
    match (a.value, b.value) {
        (None, None) if a.lower == b.lower => Ordering::Equal,
        (None, _) => side(a.lower),
        (_, None) => side(b.lower).reverse(),
        (Some(x), Some(y)) => match x.cmp(y) {
            Ordering::Equal => match (a.inclusive, b.inclusive) {
                (false, false) if a.lower == b.lower => Ordering::Equal,
                (false, false) => side(a.lower).reverse(),
                (false, true) => side(a.lower).reverse(),
                (true, false) => side(b.lower),
                (true, true) => Ordering::Equal,
            },
            other => other,
        },
    }
}

/// `bounds_adjacent` of a range's upper bound and the next one's lower
/// bound: the same value, exactly one of them inclusive (the canonical
/// `[a,b)` of a discrete subtype meets `[b,c)` so).
fn adjacent(upper: &Bound, lower: &Bound) -> bool {
    match (upper.value, lower.value) {
        (Some(u), Some(l)) => u.cmp(l) == Ordering::Equal && upper.inclusive != lower.inclusive,
        _ => false,
    }
}

/// The range literals of a multirange's text, as `multirange_in` splits
/// them: `{`, ranges (each `empty` or bracketed, a bound quoted with `"`
/// or escaped with `\`) separated by `,`, `}`; spaces around each.
fn ranges(text: &str) -> Result<Vec<&str>, String> {
    let malformed = |why: &str| {
        format!(
            "{} is not a multirange ({why}); write it as PostgreSQL does, \"{{[1,3),[5,7)}}\" or \"{{}}\"",
            crate::conversion::shown(text)
        )
    };
    let body = text.trim_start();
    let Some(body) = body.strip_prefix('{') else {
        return Err(malformed("it must start with {"));
    };
    let bytes = body.as_bytes();
    let mut out = Vec::new();
    let mut at = 0;
    let skip_spaces = |at: &mut usize| {
        while *at < bytes.len() && bytes[*at].is_ascii_whitespace() {
            *at += 1;
        }
    };
    skip_spaces(&mut at);
    if bytes.get(at) == Some(&b'}') {
        at += 1;
    } else {
        loop {
            skip_spaces(&mut at);
            let start = at;
            match bytes.get(at) {
                Some(b'[' | b'(') => {
                    at += 1;
                    let mut quoted = false;
                    loop {
                        match (bytes.get(at), quoted) {
                            (None, _) => {
                                return Err(malformed("a range without its closing bracket"))
                            }
                            (Some(b'\\'), _) => at += 2,
                            (Some(b'"'), true) if bytes.get(at + 1) == Some(&b'"') => at += 2,
                            (Some(b'"'), q) => {
                                quoted = !q;
                                at += 1;
                            }
                            (Some(b']' | b')'), false) => {
                                at += 1;
                                break;
                            }
                            _ => at += 1,
                        }
                    }
                }
                _ if body[at..]
                    .get(..5)
                    .is_some_and(|w| w.eq_ignore_ascii_case("empty")) =>
                {
                    at += 5
                }
                _ => return Err(malformed("a range must start with [ or ( or be empty")),
            }
            out.push(&body[start..at.min(body.len())]);
            skip_spaces(&mut at);
            match bytes.get(at) {
                Some(b',') => at += 1,
                Some(b'}') => {
                    at += 1;
                    break;
                }
                _ => return Err(malformed("ranges are separated by , and end with }")),
            }
        }
    }
    if !body[at.min(body.len())..].trim().is_empty() {
        return Err(malformed("text after its closing }"));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranges_are_sorted_and_merged_where_they_meet_or_overlap() {
        for (sub, text, canonical) in [
            (Subtype::Int4, "{[3,4], [1,2], (5,7)}", "{[1,5),[6,7)}"),
            (Subtype::Int4, "{}", "{}"),
            (Subtype::Int4, " { } ", "{}"),
            (Subtype::Int4, "{empty, [1,1), EMPTY}", "{}"),
            (Subtype::Int4, "{[1,10), [2,3)}", "{[1,10)}"),
            (Subtype::Int4, "{(,3), [2,)}", "{(,)}"),
            (Subtype::Numeric, "{(1.5,2], [2.0,3), empty}", "{(1.5,3)}"),
            (Subtype::Numeric, "{[1,2), (2,3)}", "{[1,2),(2,3)}"),
            (Subtype::Numeric, "{[1,2], (2,3)}", "{[1,3)}"),
            (Subtype::Numeric, "{[1,2), [2,3)}", "{[1,3)}"),
            (Subtype::Numeric, "{[1,2], [2,3)}", "{[1,3)}"),
            (Subtype::Numeric, "{(1,2], (1,2)}", "{(1,2]}"),
            (Subtype::Numeric, "{(1,2), [1,2)}", "{[1,2)}"),
            (
                Subtype::Date,
                "{[2015-03-08,2015-03-08], [2015-03-09,2015-03-10)}",
                "{[2015-03-08,2015-03-10)}",
            ),
            (Subtype::Int4, "{[1,2),\"\"}", "error"),
        ] {
            match accept(sub, text) {
                Ok(got) => assert_eq!(got, canonical, "{text}"),
                Err(e) => assert_eq!(canonical, "error", "{text}: {e}"),
            }
        }
    }

    #[test]
    fn what_multirange_in_refuses_is_refused() {
        for (bad, says) in [
            ("[1,2)", "must start with {"),
            ("{[1,2)", "separated by"),
            ("{[1,2),}", "must start with [ or ("),
            ("{[1,2)} x", "after its closing"),
            ("{[1,2) [3,4)}", "separated by"),
            ("{[\"1,2)}", "closing bracket"),
            ("{[5,1)}", "lower bound must be less"),
        ] {
            let err = accept(Subtype::Int4, bad).unwrap_err();
            assert!(err.contains(says), "{bad}: {err}");
            assert!(err.contains("int4multirange"), "{bad}: {err}");
        }
    }

    #[test]
    fn a_read_multirange_and_its_written_form_meet_in_one_canonical_text() {
        assert_eq!(
            render(Subtype::Int4, "{[\"1\",\"5\"),[\"6\",\"7\")}").unwrap(),
            "{[1,5),[6,7)}"
        );
        assert_eq!(render(Subtype::Date, "{}").unwrap(), "{}");
        assert_eq!(
            param(Subtype::Date, "{[-4712-01-01,2015-03-08),[2016-01-01,)}"),
            "{[\"4713-01-01 BC\",\"2015-03-08\"),[\"2016-01-01\",)}"
        );
        for (sub, text) in [
            (Subtype::Int4, "{[1,5),[6,7)}"),
            (Subtype::Numeric, "{(1.5,2],[3,)}"),
            (Subtype::Timestamptz, "{[2015-03-08T07:30:00.000000Z,)}"),
        ] {
            assert_eq!(accept(sub, text).unwrap(), text);
        }
    }
}
