//! The conversions' own tests: each type both ways, and what each refuses.

use super::*;
use crate::geometry::Geometry;
use serde_json::json;

#[test]
fn owned_text_renders_as_borrowed_text() {
    for (conversion, text) in [
        (Conversion::Text, Some("héllo \"quoted\"")),
        (Conversion::Text, Some("")),
        (Conversion::Text, None),
        (Conversion::Int4, Some("-42")),
        (Conversion::Int4, Some("4x")),
        (Conversion::Timestamptz, Some("1425799800000000")),
        (Conversion::Json, Some(r#"{"a": [1, 2.50]}"#)),
        (Conversion::Bool, Some("maybe")),
    ] {
        assert_eq!(
            conversion.render_owned(text.map(str::to_string)),
            conversion.render(text),
            "{conversion:?} {text:?}"
        );
    }
}

#[test]
fn decimals_have_one_form() {
    for (text, canonical) in [
        ("12.50", "12.5"),
        ("0012.000", "12"),
        ("-0.00", "0"),
        ("+.5", "0.5"),
        ("1e3", "1000"),
        ("1.25E-3", "0.00125"),
        (
            "-123456789012345678901234567890.123456789",
            "-123456789012345678901234567890.123456789",
        ),
        ("NaN", "NaN"),
    ] {
        assert_eq!(canonical_decimal(text).unwrap(), canonical, "{text}");
    }
    for bad in ["", ".", "1.2.3", "12a", "e5", "--1", "1e99999"] {
        assert!(canonical_decimal(bad).is_err(), "{bad:?}");
    }
}

#[test]
fn json_numbers_are_exact_in_postgresql_form() {
    let written: Value = serde_json::from_str(
        r#"{"big": 98765432109876543210987654321, "tiny": 0.1000000000000000055511151231257827,
            "x": [12.345678901234567890123, 1.50, 1e5, -0.0, {"deep": 2.5e-3}]}"#,
    )
    .unwrap();
    let (canonical, param) = Conversion::Jsonb.accept(&written).unwrap();
    let back: Value = serde_json::from_str(&param.unwrap()).unwrap();
    assert_eq!(back, canonical);
    let n = |v: &Value| v.as_number().unwrap().as_str().to_string();
    assert_eq!(n(&canonical["big"]), "98765432109876543210987654321");
    assert_eq!(
        n(&canonical["tiny"]),
        "0.1000000000000000055511151231257827"
    );
    assert_eq!(n(&canonical["x"][0]), "12.345678901234567890123");
    assert_eq!(n(&canonical["x"][1]), "1.50");
    assert_eq!(n(&canonical["x"][2]), "100000");
    assert_eq!(n(&canonical["x"][3]), "0.0");
    assert_eq!(n(&canonical["x"][4]["deep"]), "0.0025");
    // What PostgreSQL reads back is kept as read.
    let read = Conversion::Jsonb
        .render(Some(r#"{"big": 98765432109876543210987654321}"#))
        .unwrap();
    assert_eq!(n(&read["big"]), "98765432109876543210987654321");
    assert!(Conversion::Jsonb
        .accept(&serde_json::from_str(r#"{"a": 1e5000}"#).unwrap())
        .is_err());
    // `json` keeps the text: what is written is what reads back.
    let (kept, _) = Conversion::Json.accept(&written).unwrap();
    assert_eq!(kept, written);
}

#[test]
fn floats_are_exact_or_refused() {
    let number = |t: &str| -> Value { serde_json::from_str(t).unwrap() };
    for ok in [
        "0.1",
        "1.50",
        "12.5",
        "1e300",
        "-0.0",
        "0.30000000000000004",
    ] {
        let (v, _) = Conversion::Float8.accept(&number(ok)).unwrap();
        assert_eq!(
            canonical_decimal(v.as_number().unwrap().as_str()).unwrap(),
            canonical_decimal(ok).unwrap()
        );
    }
    let err = Conversion::Float8
        .accept(&number("12.345678901234567890123"))
        .unwrap_err();
    assert!(
        err.contains("would be stored as 12.345678901234567"),
        "{err}"
    );
    assert!(Conversion::Float8
        .accept(&number("98765432109876543210987654321"))
        .is_err());
    assert!(Conversion::Float4.accept(&number("0.1")).is_ok());
    assert!(Conversion::Float4.accept(&number("16777217")).is_err());
}

#[test]
fn floats_read_as_written() {
    let (v, p) = Conversion::Float4.accept(&json!(1.1)).unwrap();
    assert_eq!(v, json!(1.1));
    assert_eq!(Conversion::Float4.render(p.as_deref()).unwrap(), v);
    assert!(Conversion::Float4.accept(&json!(1.123456789)).is_err());
    // An integral JSON number and its float are one value.
    let (one, _) = Conversion::Float8.accept(&json!(1)).unwrap();
    assert_eq!(one, Conversion::Float8.render(Some("1")).unwrap());
    assert_eq!(Conversion::Float8.render(Some("-0")).unwrap(), json!(-0.0));
    assert_ne!(json!(-0.0), json!(0.0), "-0 is kept, digit for digit");
    assert_eq!(
        Conversion::Float8.render(Some("NaN")).unwrap(),
        json!("NaN")
    );
}

#[test]
fn arrays_become_literals() {
    let (v, p) = Conversion::TextArray
        .accept(&json!(["a", "b\"c\\", null, "é"]))
        .unwrap();
    assert_eq!(v, json!(["a", "b\"c\\", null, "é"]));
    assert_eq!(p.unwrap(), r#"{"a","b\"c\\",NULL,"é"}"#);
    assert_eq!(
        Conversion::Int4Array.accept(&json!([])).unwrap().1.unwrap(),
        "{}"
    );
    assert!(Conversion::Int2Array.accept(&json!([70000])).is_err());
    assert!(Conversion::TextArray
        .accept(&json!([["nested"], "flat"]))
        .is_err());
}

#[test]
fn wrong_kinds_are_named() {
    let err = Conversion::Int4.accept(&json!("12")).unwrap_err();
    assert!(
        err.contains("expected an integer (integer), got a string"),
        "{err}"
    );
    let err = Conversion::Uuid.accept(&json!("nope")).unwrap_err();
    assert!(err.contains("not a UUID"), "{err}");
    assert_eq!(
        Conversion::Uuid
            .accept(&json!("6F1C1A0E-8A3B-4A55-9D1E-3C2B1A0F9E8D"))
            .unwrap()
            .0,
        json!("6f1c1a0e-8a3b-4a55-9d1e-3c2b1a0f9e8d")
    );
}

#[test]
fn character_values_have_no_padding() {
    assert_eq!(Conversion::for_type("bpchar"), Some(Conversion::Char));
    for (written, canonical) in [("ab", "ab"), ("ab   ", "ab"), ("  a b ", "  a b"), ("", "")] {
        let (v, p) = Conversion::Char.accept(&json!(written)).unwrap();
        assert_eq!((v, p), (json!(canonical), Some(canonical.to_string())));
        assert_eq!(
            Conversion::Char.render(Some(written)).unwrap(),
            json!(canonical)
        );
    }
    assert!(Conversion::Char.accept(&json!(7)).is_err());
    assert!(Conversion::Char.accept(&json!("a\u{0}")).is_err());
}

#[test]
fn enum_values_are_strings() {
    let (v, p) = Conversion::Enum.accept(&json!("completed")).unwrap();
    assert_eq!((v, p), (json!("completed"), Some("completed".to_string())));
    assert_eq!(
        Conversion::Enum.render_owned(Some("x".into())).unwrap(),
        json!("x")
    );
    assert!(Conversion::Enum.accept(&json!(true)).is_err());
}

#[test]
fn constrained_numerics_take_what_they_keep() {
    let typmod = |p: i32, s: i32| ((p << 16) | (s & 0x7ff)) + 4;
    for (text, p, s) in [
        ("12.5", 10, 2),
        ("-99999999.99", 10, 2),
        ("0", 3, 2),
        ("NaN", 4, 1),
        ("0.05", 2, 2),
        ("0.0012", 2, 4),
        ("1200", 4, -2),
        ("12.5", -1, -1),
    ] {
        let m = if p < 0 { -1 } else { typmod(p, s) };
        assert_eq!(numeric_fits(text, m), Ok(()), "{text} in ({p},{s})");
    }
    for (text, p, s, says) in [
        ("12.345", 10, 2, "PostgreSQL would round it"),
        ("100000000", 10, 2, "too large for numeric(10,2)"),
        ("-1.5", 2, 2, "too large"),
        ("0.012", 2, 4, "too large"),
        ("1250", 4, -2, "would round"),
        ("Infinity", 10, 2, "infinite"),
    ] {
        let err = numeric_fits(text, typmod(p, s)).unwrap_err();
        assert!(err.contains(says), "{text} in ({p},{s}): {err}");
    }
}

#[test]
fn timestamps_take_the_precision_they_keep() {
    assert!(timestamp_fits("2015-03-08T07:30:00.123000Z", 3).is_ok());
    assert!(timestamp_fits("2015-03-08T07:30:00.000000", 0).is_ok());
    assert!(timestamp_fits("2015-03-08T07:30:00.123456Z", -1).is_ok());
    let err = timestamp_fits("2015-03-08T07:30:00.123400Z", 3).unwrap_err();
    assert!(err.contains("precision of 3"), "{err}");
    assert!(timestamp_fits("+294276-12-31T23:59:59.500000", 0).is_err());
}

#[test]
fn an_unconstrained_numeric_keeps_the_scale_it_was_written_with() {
    // PostgreSQL's text of each, as `SELECT 'x'::numeric` prints it.
    let unconstrained = Conversion::Numeric.with_typmod(-1);
    assert_eq!(unconstrained, Conversion::UnconstrainedNumeric);
    for (written, stored) in [
        (json!("12.50"), "12.50"),
        // A JSON number as written (not through an f64).
        (serde_json::from_str("12.50").unwrap(), "12.50"),
        (json!("1.5e-3"), "0.0015"),
        (json!("1e5"), "100000"),
        (json!("-0.00"), "0.00"),
        (json!("NaN"), "NaN"),
        (json!("-inf"), "-Infinity"),
    ] {
        let (value, param) = unconstrained.accept(&written).unwrap();
        assert_eq!(value, json!(stored), "{written}");
        assert_eq!(param.as_deref(), Some(stored), "{written}");
        assert_eq!(unconstrained.render(Some(stored)), Ok(json!(stored)));
    }
    assert!(unconstrained.accept(&json!("12,5")).is_err());
    // A `numeric(p,s)` keeps the value; its column prints the scale.
    assert_eq!(Conversion::Numeric.with_typmod(655366), Conversion::Numeric);
    assert_eq!(Conversion::Numeric.render(Some("12.50")), Ok(json!("12.5")));
    // So do arrays, element by element.
    let numbers = Conversion::ArrayOf(Element::Numeric).with_typmod(-1);
    assert_eq!(numbers, Conversion::ArrayOf(Element::UnconstrainedNumeric));
    let (v, p) = numbers.accept(&json!(["12.50", null, "1e3"])).unwrap();
    assert_eq!(v, json!(["12.50", null, "1000"]));
    assert_eq!(p.as_deref(), Some(r#"{"12.50",NULL,"1000"}"#));
}

#[test]
fn arrays_of_other_scalars_convert_element_by_element() {
    let numbers = Conversion::ArrayOf(Element::Numeric);
    assert_eq!(Conversion::for_type("_numeric"), Some(numbers));
    let (v, p) = numbers
        .accept(&json!(["12.50", null, 1e3, "-0.0010"]))
        .unwrap();
    assert_eq!(v, json!(["12.5", null, "1000", "-0.001"]));
    assert_eq!(p.as_deref(), Some(r#"{"12.5",NULL,"1000","-0.001"}"#));
    let times = Conversion::ArrayOf(Element::Timestamptz);
    let (v, p) = times
        .accept(&json!(["2015-03-08T02:30:00-05:00", null]))
        .unwrap();
    assert_eq!(v, json!(["2015-03-08T07:30:00.000000Z", null]));
    assert!(p.unwrap().starts_with(r#"{"2015-03-08"#));
    // Read back: each element as its type reads it.
    assert_eq!(
        times.render(Some(r#"["1425799800000000", null]"#)).unwrap(),
        json!(["2015-03-08T07:30:00.000000Z", null])
    );
    let flags = Conversion::ArrayOf(Element::Bool);
    assert_eq!(
        flags.render(Some(r#"["true","false",null]"#)).unwrap(),
        json!([true, false, null])
    );
    assert_eq!(
        flags.accept(&json!([])).unwrap(),
        (json!([]), Some("{}".into()))
    );
    // Refused, naming the element.
    let err = numbers.accept(&json!(["1", "x"])).unwrap_err();
    assert!(err.starts_with("element 1:"), "{err}");
    assert!(numbers.accept(&json!([["1"], "2"])).is_err());
    assert!(numbers.accept(&json!("1")).is_err());
    assert!(flags.render(Some(r#""a string""#)).is_err());
}

#[test]
fn an_infinite_date_is_refused_by_name() {
    for text in ["infinity", "-infinity"] {
        let err = Conversion::Date.render(Some(text)).unwrap_err();
        assert!(err.contains("only finite dates are"), "{err}");
        let err = Conversion::Date.accept(&json!(text)).unwrap_err();
        assert!(err.contains("only finite dates are"), "{err}");
    }
}

#[test]
fn arrays_of_several_dimensions_nest_as_postgresql_subscripts_them() {
    let numbers = Conversion::ArrayOf(Element::Numeric);
    // Each element canonical, the literal nested.
    assert_eq!(
        numbers.accept(&json!([["1.50", null], [2, "-0"]])).unwrap(),
        (
            json!([["1.5", null], ["2", "0"]]),
            Some(r#"{{"1.5",NULL},{"2","0"}}"#.into())
        )
    );
    // An element refused by its place, ragged arrays by theirs.
    let err = numbers
        .accept(&json!([["1", "2"], ["3", "x"]]))
        .unwrap_err();
    assert!(err.starts_with("element [1][1]:"), "{err}");
    let err = numbers.accept(&json!([["1", "2"], ["3"]])).unwrap_err();
    assert!(err.contains("rectangular"), "{err}");
    assert!(numbers.accept(&json!([[]])).is_err());
    // Integers and text, which read through `array_to_json`.
    let ints = Conversion::Int4Array;
    assert_eq!(
        ints.accept(&json!([[1, 2], [null, 4]])).unwrap(),
        (json!([[1, 2], [null, 4]]), Some("{{1,2},{NULL,4}}".into()))
    );
    let err = ints
        .accept(&json!([[1, 2], [3, 4294967296u64]]))
        .unwrap_err();
    assert!(err.starts_with("element [1][1]:"), "{err}");
    let texts = Conversion::TextArray;
    assert_eq!(
        texts.accept(&json!([["a", "b\"c"]])).unwrap().1.unwrap(),
        r#"{{"a","b\"c"}}"#
    );
    // Read back: the dimensions with the elements, or refused by bounds.
    assert_eq!(
        ints.render(Some(
            r#"{"dims": "[1:2][1:2]", "elements": [[1, 2], [3, 4]]}"#
        ))
        .unwrap(),
        json!([[1, 2], [3, 4]])
    );
    let err = texts
        .render(Some(r#"{"dims": "[0:1]", "elements": ["a", "b"]}"#))
        .unwrap_err();
    assert!(err.contains("subscripted [0:1]"), "{err}");
    let times = Conversion::ArrayOf(Element::Timestamptz);
    assert_eq!(
        times
            .render(Some(r#"{"dims": "[1:1][1:2]", "elements": ["0", null]}"#))
            .unwrap(),
        json!([["1970-01-01T00:00:00.000000Z", null]])
    );
    // A `jsonb[]`'s arrays are its elements; one of several dimensions
    // cannot be told from them, and is refused.
    let documents = Conversion::ArrayOf(Element::Jsonb);
    assert_eq!(
        documents.accept(&json!([[1, 2]])).unwrap().0,
        json!([[1, 2]])
    );
    let err = documents
        .render(Some(r#"{"dims": "[1:1][1:2]", "elements": ["1", "2"]}"#))
        .unwrap_err();
    assert!(err.contains("2 dimensions"), "{err}");
}

#[test]
fn arrays_of_money_bits_geometry_ranges_and_json_take_their_elements_forms() {
    use crate::geometry::Geometry;
    use crate::range::Subtype;
    for (typname, element) in [
        ("_money", Element::Money),
        ("_bit", Element::Bit),
        ("_varbit", Element::Bit),
        ("_point", Element::Geometric(Geometry::Point)),
        ("_box", Element::Geometric(Geometry::Box)),
        ("_int4range", Element::Range(Subtype::Int4)),
        ("_tstzrange", Element::Range(Subtype::Timestamptz)),
        ("_json", Element::Json),
        ("_tsvector", Element::Tsvector),
        ("_xml", Element::Xml),
        ("_tsquery", Element::Tsquery),
    ] {
        assert_eq!(
            Conversion::for_type(typname),
            Some(Conversion::ArrayOf(element)),
            "{typname}"
        );
    }
    assert_eq!(Conversion::for_type("_pg_lsn"), None);
    // An `xml` is the text stored; whether it is well-formed is
    // PostgreSQL's to say, so any string without NUL is taken here.
    let xml = Conversion::for_type("xml").unwrap();
    let (v, p) = xml.accept(&json!("<?xml version=\"1.0\"?><a/>")).unwrap();
    assert_eq!(
        (v, p.as_deref()),
        (
            json!("<?xml version=\"1.0\"?><a/>"),
            Some("<?xml version=\"1.0\"?><a/>")
        )
    );
    assert!(xml.accept(&json!("a\u{0}")).is_err());
    assert!(xml.accept(&json!(["<a/>"])).is_err());
    assert_eq!(xml.render(Some("<b/>")).unwrap(), json!("<b/>"));
    // A box's commas are its own: the literal separates with `;`.
    let boxes = Conversion::ArrayOf(Element::Geometric(Geometry::Box));
    let (v, p) = boxes
        .accept(&json!(["(0,0),(1,1)", null, "(2,2),(3,3)"]))
        .unwrap();
    assert_eq!(v, json!(["(1,1),(0,0)", null, "(3,3),(2,2)"]));
    assert_eq!(p.as_deref(), Some(r#"{"(1,1),(0,0)";NULL;"(3,3),(2,2)"}"#));
    // Each element as its type takes it; refused by its index.
    let amounts = Conversion::ArrayOf(Element::Money);
    assert_eq!(
        amounts.accept(&json!(["12.50", 7])).unwrap().0,
        json!(["12.5", "7"])
    );
    let err = amounts.accept(&json!(["1", "1.234"])).unwrap_err();
    assert!(err.starts_with("element 1:"), "{err}");
    let ranges = Conversion::ArrayOf(Element::Range(Subtype::Int4));
    assert_eq!(
        ranges.accept(&json!(["[1,5]", "empty"])).unwrap().0,
        json!(["[1,6)", "empty"])
    );
    assert_eq!(
        ranges.render(Some(r#"["[1,6)", null]"#)).unwrap(),
        json!(["[1,6)", null])
    );
    // A `json[]`'s element is any JSON value, an array too; JSON `null`
    // reads back as the SQL NULL element it is written as.
    let documents = Conversion::ArrayOf(Element::Json);
    let written: serde_json::Value =
        serde_json::from_str(r#"[{"a": [1, 2.50]}, [3], "x", null]"#).unwrap();
    let (v, p) = documents.accept(&written).unwrap();
    assert_eq!(v, written, "numbers as written: a json keeps its text");
    assert_eq!(
        p.as_deref(),
        Some(r#"{"{\"a\":[1,2.50]}","[3]","\"x\"",NULL}"#)
    );
    assert_eq!(
        documents
            .render(Some(r#"["{\"a\": 1}", "null", null]"#))
            .unwrap(),
        json!([{"a": 1}, null, null])
    );
    let bits = Conversion::ArrayOf(Element::Bit);
    assert_eq!(
        bits.accept(&json!([["01"]])).unwrap().1.unwrap(),
        r#"{{"01"}}"#,
        "a dimension"
    );
    assert!(bits.accept(&json!(["012"])).is_err());
}

#[test]
fn money_takes_amounts_it_holds_to_the_cent() {
    for (written, kept) in [
        (json!("12.50"), "12.5"),
        (json!(7), "7"),
        (json!("-0.07"), "-0.07"),
        (json!("-92233720368547758.08"), "-92233720368547758.08"),
        (json!("92233720368547758.07"), "92233720368547758.07"),
    ] {
        let (value, param) = Conversion::Money.accept(&written).unwrap();
        assert_eq!(value, json!(kept), "{written}");
        assert_eq!(param.as_deref(), Some(kept));
    }
    for (written, says) in [
        (json!("1.234"), "money would round it"),
        (json!("92233720368547758.08"), "out of range"),
        (json!("-92233720368547758.09"), "out of range"),
        (json!("1e30"), "out of range"),
        (json!("NaN"), "not an amount"),
        (json!("Infinity"), "not an amount"),
        (json!("$12.50"), "decimal"),
        (json!([1]), "expected an amount string"),
    ] {
        let err = Conversion::Money.accept(&written).unwrap_err();
        assert!(err.contains(says), "{written}: {err}");
    }
    // A huge amount is named, not echoed whole.
    let err = Conversion::Money
        .accept(&json!("9".repeat(100_000)))
        .unwrap_err();
    assert!(err.contains("out of range") && err.len() < 300, "{err}");
    // Read as its amount, whatever PostgreSQL prints around it.
    assert_eq!(
        Conversion::Money.read_expr("c"),
        "(c)::pg_catalog.numeric::text"
    );
    assert_eq!(Conversion::Money.render(Some("12.50")), Ok(json!("12.5")));
    assert_eq!(Conversion::for_type("money"), Some(Conversion::Money));
}

#[test]
fn geometric_values_are_postgresqls_text() {
    let point = Conversion::Geometric(Geometry::Point);
    let (value, param) = point.accept(&json!("( 1.50 , 1e300 )")).unwrap();
    assert_eq!(value, json!("(1.5,1e+300)"));
    assert_eq!(param.as_deref(), Some("(1.5,1e+300)"));
    assert_eq!(point.render(Some("(NaN,-0)")), Ok(json!("(NaN,-0)")));
    assert!(point.accept(&json!([1.5, 2])).is_err());
    assert_eq!(Conversion::for_type("point"), Some(point));
    let boxed = Conversion::for_type("box").unwrap();
    assert_eq!(
        boxed.accept(&json!("(1,1),(3,3)")).unwrap().0,
        json!("(3,3),(1,1)")
    );
}
