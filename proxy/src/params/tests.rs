//! The parameters' own tests: text taken as it is, each binary form read
//! as PostgreSQL reads it, malformed ones refused.

use super::*;

#[test]
fn text_parameters_are_taken_as_they_are() {
    let p = [
        Some(Bytes::from_static(b"42")),
        Some(Bytes::from_static(b"x")),
    ];
    assert_eq!(
        params_text(&[], &[], &p, BUILT_IN),
        Some(vec!["42".into(), "x".into()])
    );
    assert_eq!(
        params_text(&[], &[0], &p, BUILT_IN),
        Some(vec!["42".into(), "x".into()])
    );
    assert_eq!(
        params_text(&[], &[], &[None], BUILT_IN),
        None,
        "NULL is not a literal"
    );
}

#[test]
fn binary_money_geometry_and_bits_read_as_text() {
    let doubles = |xs: &[f64]| -> Vec<u8> { xs.iter().flat_map(|x| x.to_be_bytes()).collect() };
    let counted = |prefix: &[u8], xs: &[f64]| -> Vec<u8> {
        let mut out = prefix.to_vec();
        out.extend(((xs.len() / 2) as i32).to_be_bytes());
        out.extend(doubles(xs));
        out
    };
    for (oid, bytes, want) in [
        (790, (-1234_i64).to_be_bytes().to_vec(), "-12.34"),
        (790, 5_i64.to_be_bytes().to_vec(), "0.05"),
        (
            790,
            i64::MIN.to_be_bytes().to_vec(),
            "-92233720368547758.08",
        ),
        (600, doubles(&[1.5, -2.0]), "(1.5,-2)"),
        (601, doubles(&[0.0, 0.0, 1.0, 1.0]), "[(0,0),(1,1)]"),
        (603, doubles(&[3.0, 3.0, 1.0, 1.0]), "(3,3),(1,1)"),
        (628, doubles(&[1.0, -1.0, 0.0]), "{1,-1,0}"),
        (718, doubles(&[1.0, 2.0, 0.5]), "<(1,2),0.5>"),
        (602, counted(&[0], &[0.0, 0.0, 1.5, 2.0]), "[(0,0),(1.5,2)]"),
        (602, counted(&[1], &[0.0, 0.0, 1.5, 2.0]), "((0,0),(1.5,2))"),
        (
            604,
            counted(&[], &[0.0, 0.0, 4.0, 0.0, 4.0, 3.0]),
            "((0,0),(4,0),(4,3))",
        ),
        (600, doubles(&[f64::NAN, f64::INFINITY]), "(NaN,Infinity)"),
        (
            1560,
            [&4_i32.to_be_bytes()[..], &[0b0101_0000]].concat(),
            "0101",
        ),
        (
            1562,
            [&10_i32.to_be_bytes()[..], &[0xff, 0b0100_0000]].concat(),
            "1111111101",
        ),
        (1562, 0_i32.to_be_bytes().to_vec(), ""),
    ] {
        assert_eq!(
            binary_text(oid, &bytes, BUILT_IN).as_deref(),
            Some(want),
            "{oid}"
        );
    }
    // Malformed: the wrong length, a count past the bytes, a bad flag.
    for (oid, bytes) in [
        (600, doubles(&[1.0])),
        (602, counted(&[2], &[0.0, 0.0])),
        (
            604,
            [&5_i32.to_be_bytes()[..], &doubles(&[0.0, 0.0])].concat(),
        ),
        (604, counted(&[], &[])),
        (1560, [&9_i32.to_be_bytes()[..], &[0xff]].concat()),
        (1562, (-1_i32).to_be_bytes().to_vec()),
        (790, vec![0; 7]),
    ] {
        assert_eq!(binary_text(oid, &bytes, BUILT_IN), None, "{oid}: {bytes:?}");
    }
}

#[test]
fn binary_parameters_of_simple_types_read_as_text() {
    let uuid = uuid::Uuid::from_u128(0x1234_5678_9abc_def0_1122_3344_5566_7788);
    let p = [
        Some(Bytes::copy_from_slice(uuid.as_bytes())),
        Some(Bytes::copy_from_slice(&(-7_i64).to_be_bytes())),
        Some(Bytes::copy_from_slice(&0.1_f64.to_be_bytes())),
        Some(Bytes::from_static(b"caf\xc3\xa9")),
    ];
    assert_eq!(
        params_text(&[2950, 20, 701, 25], &[1], &p, BUILT_IN),
        Some(vec![
            uuid.to_string(),
            "-7".into(),
            "0.1".into(),
            "café".into()
        ])
    );
    // Mixed formats, one per parameter.
    let mixed = [Some(Bytes::from_static(b"5")), p[1].clone()];
    assert_eq!(
        params_text(&[0, 20], &[0, 1], &mixed, BUILT_IN),
        Some(vec!["5".into(), "-7".into()])
    );
}

fn one(oid: u32, bytes: &[u8]) -> Option<String> {
    params_text(
        &[oid],
        &[1],
        &[Some(Bytes::copy_from_slice(bytes))],
        BUILT_IN,
    )
    .map(|mut v| v.remove(0))
}

/// `numeric`'s binary form from its parts.
fn numeric(weight: i16, sign: u16, dscale: u16, digits: &[u16]) -> Vec<u8> {
    let mut b = Vec::new();
    for w in [digits.len() as u16, weight as u16, sign, dscale] {
        b.extend_from_slice(&w.to_be_bytes());
    }
    for d in digits {
        b.extend_from_slice(&d.to_be_bytes());
    }
    b
}

#[test]
fn binary_numerics_read_as_postgresql_writes_them() {
    // 12345.678 (scale 3): digits 1, 2345, 6780, weight 1.
    assert_eq!(
        one(1700, &numeric(1, 0, 3, &[1, 2345, 6780])).as_deref(),
        Some("12345.678")
    );
    // -0.0012 (scale 4): digit 12 at weight -1.
    assert_eq!(
        one(1700, &numeric(-1, 0x4000, 4, &[12])).as_deref(),
        Some("-0.0012")
    );
    // 0.00000001 (scale 8): weight -2.
    assert_eq!(
        one(1700, &numeric(-2, 0, 8, &[1])).as_deref(),
        Some("0.00000001")
    );
    // 1000000 (weight 1, digits 100 and no second: zeros).
    assert_eq!(
        one(1700, &numeric(1, 0, 0, &[100])).as_deref(),
        Some("1000000")
    );
    // 12.50 keeps its scale; zero; NaN.
    assert_eq!(
        one(1700, &numeric(0, 0, 2, &[12, 5000])).as_deref(),
        Some("12.50")
    );
    assert_eq!(one(1700, &numeric(0, 0, 0, &[])).as_deref(), Some("0"));
    assert_eq!(
        one(1700, &numeric(0, 0xC000, 0, &[])).as_deref(),
        Some("NaN")
    );
    // A digit out of range, a short body: not read.
    assert_eq!(one(1700, &numeric(0, 0, 0, &[10000])), None);
    assert_eq!(one(1700, &numeric(0, 0, 0, &[1])[..9]), None);
}

#[test]
fn binary_times_read_from_postgresqls_epoch() {
    // 2000-01-01 is day 0; 2026-12-03 is day 9833.
    assert_eq!(
        one(1082, &0i32.to_be_bytes()).as_deref(),
        Some("2000-01-01")
    );
    assert_eq!(
        one(1082, &9833i32.to_be_bytes()).as_deref(),
        Some("2026-12-03")
    );
    assert_eq!(
        one(1082, &(-1i32).to_be_bytes()).as_deref(),
        Some("1999-12-31")
    );
    assert_eq!(
        one(1082, &i32::MAX.to_be_bytes()).as_deref(),
        Some("infinity")
    );
    let micros = 9833_i64 * 86_400_000_000 + 8 * 3_600_000_000 + 123_456;
    assert_eq!(
        one(1184, &micros.to_be_bytes()).as_deref(),
        Some("2026-12-03T08:00:00.123456Z")
    );
    assert_eq!(
        one(1114, &micros.to_be_bytes()).as_deref(),
        Some("2026-12-03T08:00:00.123456")
    );
    assert_eq!(
        one(1114, &i64::MIN.to_be_bytes()).as_deref(),
        Some("-infinity")
    );
    // Before 1 AD: not read.
    assert_eq!(one(1082, &(-800_000i32).to_be_bytes()), None);
}

#[test]
fn binary_times_of_day_and_intervals_read_as_their_fields() {
    let micros = 7 * 3_600_000_000_i64 + 30 * 60_000_000 + 5_250_000;
    assert_eq!(
        one(1083, &micros.to_be_bytes()).as_deref(),
        Some("07:30:05.25")
    );
    assert_eq!(
        one(1083, &86_400_000_000_i64.to_be_bytes()).as_deref(),
        Some("24:00:00")
    );
    assert_eq!(one(1083, &(-1_i64).to_be_bytes()), None, "before midnight");
    // timetz '07:30:05.25-03:30': the offset is kept west of UTC.
    let mut tz = micros.to_be_bytes().to_vec();
    tz.extend_from_slice(&(3 * 3600 + 1800_i32).to_be_bytes());
    assert_eq!(one(1266, &tz).as_deref(), Some("07:30:05.25-03:30"));
    assert_eq!(one(1266, &tz[..8]), None, "short");
    // interval '1 year 2 mons -3 days 04:05:06.5': time, days, months.
    let mut i = Vec::new();
    i.extend_from_slice(&14_706_500_000_i64.to_be_bytes());
    i.extend_from_slice(&(-3_i32).to_be_bytes());
    i.extend_from_slice(&14_i32.to_be_bytes());
    assert_eq!(one(1186, &i).as_deref(), Some("P1Y2M-3DT4H5M6.5S"));
    assert_eq!(one(1186, &i[..12]), None, "short");
}

#[test]
fn binary_network_addresses_read_as_postgresql_prints_them() {
    assert_eq!(
        one(869, &[2, 8, 0, 4, 10, 1, 2, 3]).as_deref(),
        Some("10.1.2.3/8")
    );
    assert_eq!(
        one(650, &[2, 32, 1, 4, 10, 1, 2, 3]).as_deref(),
        Some("10.1.2.3/32")
    );
    let mut v6 = vec![3, 128, 0, 16, 0x20, 0x01, 0x0d, 0xb8];
    v6.extend_from_slice(&[0; 11]);
    v6.push(1);
    assert_eq!(one(869, &v6).as_deref(), Some("2001:db8::1"));
    assert_eq!(
        one(869, &[3, 8, 0, 4, 10, 1, 2, 3]),
        None,
        "IPv6 of 4 bytes"
    );
    assert_eq!(
        one(869, &[2, 33, 0, 4, 10, 1, 2, 3]),
        None,
        "a mask past 32"
    );
    assert_eq!(
        one(829, &[8, 0, 0x2b, 1, 2, 3]).as_deref(),
        Some("08:00:2b:01:02:03")
    );
    assert_eq!(
        one(774, &[8, 0, 0x2b, 1, 2, 3]),
        None,
        "macaddr8 is 8 bytes"
    );
}

#[test]
fn binary_json_bytea_and_arrays_read_as_literals() {
    assert_eq!(one(3802, b"\x01{\"a\": 1}").as_deref(), Some("{\"a\": 1}"));
    assert_eq!(one(3802, b"\x02{}"), None, "an unknown jsonb version");
    assert_eq!(one(17, &[0, 255]).as_deref(), Some("\\x00ff"));
    // int4[] {1,NULL,3}: one dimension, has nulls, element 23.
    let mut a = Vec::new();
    for x in [1i32, 1, 23, 3, 1, 4, 1] {
        a.extend_from_slice(&x.to_be_bytes());
    }
    a.extend_from_slice(&(-1i32).to_be_bytes());
    a.extend_from_slice(&4i32.to_be_bytes());
    a.extend_from_slice(&3i32.to_be_bytes());
    assert_eq!(one(1007, &a).as_deref(), Some("{\"1\",NULL,\"3\"}"));
    // text[] {"a\"b"} and the empty array.
    let mut t = Vec::new();
    for x in [1i32, 0, 25, 1, 1, 3] {
        t.extend_from_slice(&x.to_be_bytes());
    }
    t.extend_from_slice(b"a\"b");
    assert_eq!(one(1009, &t).as_deref(), Some("{\"a\\\"b\"}"));
    let mut empty = Vec::new();
    for x in [0i32, 0, 25] {
        empty.extend_from_slice(&x.to_be_bytes());
    }
    assert_eq!(one(1009, &empty).as_deref(), Some("{}"));
    // int4[] {{1,2},{3,NULL}}: two dimensions of two, nested; the same
    // elements subscripted from 0 and 5 carry their bounds.
    let square = |lower: [i32; 2]| {
        let mut a = Vec::new();
        for x in [2i32, 1, 23, 2, lower[0], 2, lower[1]] {
            a.extend_from_slice(&x.to_be_bytes());
        }
        for x in [1i32, 2, 3] {
            a.extend_from_slice(&4i32.to_be_bytes());
            a.extend_from_slice(&x.to_be_bytes());
        }
        a.extend_from_slice(&(-1i32).to_be_bytes());
        a
    };
    assert_eq!(
        one(1007, &square([1, 1])).as_deref(),
        Some(r#"{{"1","2"},{"3",NULL}}"#)
    );
    assert_eq!(
        one(1007, &square([0, 5])).as_deref(),
        Some(r#"[0:1][5:6]={{"1","2"},{"3",NULL}}"#)
    );
    let mut short = square([1, 1]);
    short.truncate(short.len() - 4);
    assert_eq!(one(1007, &short), None, "an element missing");
    // The element type must be the array's.
    t[8..12].copy_from_slice(&23u32.to_be_bytes());
    assert_eq!(one(1009, &t), None);
}

#[test]
fn binary_parameters_of_other_or_unknown_types_are_not_read() {
    let p = [Some(Bytes::from_static(&[0, 0, 0, 1]))];
    assert_eq!(params_text(&[600], &[1], &p, BUILT_IN), None, "point");
    assert_eq!(
        params_text(&[0], &[1], &p, BUILT_IN),
        None,
        "unspecified type"
    );
    assert_eq!(
        params_text(&[23], &[1], &[Some(Bytes::from_static(&[1]))], BUILT_IN),
        None,
        "short"
    );
}

/// A range's binary form: flags, then each bound there as length and
/// bytes.
fn range(flags: u8, bounds: &[&[u8]]) -> Vec<u8> {
    let mut bytes = vec![flags];
    for bound in bounds {
        bytes.extend_from_slice(&(bound.len() as i32).to_be_bytes());
        bytes.extend_from_slice(bound);
    }
    bytes
}

#[test]
fn binary_ranges_read_as_range_literals() {
    let (one_, five) = (1i32.to_be_bytes(), 5i32.to_be_bytes());
    assert_eq!(
        one(3904, &range(0x02, &[&one_, &five])).as_deref(),
        Some("[\"1\",\"5\")")
    );
    assert_eq!(one(3904, &range(0x01, &[])).as_deref(), Some("empty"));
    assert_eq!(
        one(3926, &range(0x08 | 0x10, &[])).as_deref(),
        Some("(,)"),
        "both sides unbounded"
    );
    // tstzrange [2000-01-01 00:00:00.5 UTC,): microseconds since 2000.
    assert_eq!(
        one(3910, &range(0x02 | 0x10, &[&500_000i64.to_be_bytes()])).as_deref(),
        Some("[\"2000-01-01T00:00:00.500000Z\",)")
    );
    // daterange (2015-03-08,2015-03-10]: days since 2000-01-01.
    let (a, b) = (5_545i32.to_be_bytes(), 5_547i32.to_be_bytes());
    assert_eq!(
        one(3912, &range(0x04, &[&a, &b])).as_deref(),
        Some("(\"2015-03-08\",\"2015-03-10\"]")
    );
    // numrange [1.5,): numeric 1.5 is digits [1, 5000], weight 0, dscale 1.
    let n = numeric(0, 0, 1, &[1, 5000]);
    assert_eq!(
        one(3906, &range(0x02 | 0x10, &[&n])).as_deref(),
        Some("[\"1.5\",)")
    );
    // Malformed: bytes left over, an unknown flag, a short bound, a bound
    // of the wrong width, an empty range with bounds.
    let mut extra = range(0x02, &[&one_, &five]);
    extra.push(0);
    for bad in [
        extra,
        range(0x40, &[&one_, &five]),
        vec![0x02, 0, 0, 0, 4, 0],
        range(0x02, &[&[1, 2], &five]),
        range(0x01, &[&one_]),
    ] {
        assert_eq!(one(3904, &bad), None, "{bad:?}");
    }
}

#[test]
fn binary_json_arrays_read_element_by_element() {
    // jsonb[] {'{"a":1}', NULL}: element 3802, each a version byte and text.
    let mut a = Vec::new();
    for x in [1i32, 1, 3802, 2, 1] {
        a.extend_from_slice(&x.to_be_bytes());
    }
    a.extend_from_slice(&8i32.to_be_bytes());
    a.extend_from_slice(b"\x01{\"a\":1}");
    a.extend_from_slice(&(-1i32).to_be_bytes());
    assert_eq!(one(3807, &a).as_deref(), Some("{\"{\\\"a\\\":1}\",NULL}"));
}

#[test]
fn binary_arrays_of_boxes_and_ranges_read_with_their_delimiters() {
    // box[] {(1,1),(0,0); (2,2),(0,0)}: element 603, four doubles each
    // (the upper right corner, then the lower left).
    let corners = |x: f64| -> Vec<u8> {
        [x, x, 0.0, 0.0]
            .iter()
            .flat_map(|d| d.to_be_bytes())
            .collect()
    };
    let mut boxes = Vec::new();
    for x in [1i32, 0, 603, 2, 1] {
        boxes.extend_from_slice(&x.to_be_bytes());
    }
    for x in [1.0, 2.0] {
        boxes.extend_from_slice(&32i32.to_be_bytes());
        boxes.extend_from_slice(&corners(x));
    }
    assert_eq!(
        one(1020, &boxes).as_deref(),
        Some("{\"(1,1),(0,0)\";\"(2,2),(0,0)\"}"),
        "a box's own commas: its array separates elements with ';'"
    );
    // int4range[] {[1,5)}: element 3904.
    let mut ranges = Vec::new();
    for x in [1i32, 0, 3904, 1, 1] {
        ranges.extend_from_slice(&x.to_be_bytes());
    }
    let bound = range(0x02, &[&1i32.to_be_bytes(), &5i32.to_be_bytes()]);
    ranges.extend_from_slice(&(bound.len() as i32).to_be_bytes());
    ranges.extend_from_slice(&bound);
    assert_eq!(
        one(3905, &ranges).as_deref(),
        Some("{\"[\\\"1\\\",\\\"5\\\")\"}")
    );
    // The element type must be the array's.
    ranges[8..12].copy_from_slice(&3926u32.to_be_bytes());
    assert_eq!(one(3905, &ranges), None);
}

#[test]
fn binary_tsvectors_read_as_their_text() {
    let hex = |h: &str| -> Vec<u8> {
        (0..h.len())
            .step_by(2)
            .map(|i| u8::from_str_radix(&h[i..i + 2], 16).unwrap())
            .collect()
    };
    // `tsvectorsend('sat:4,2A cat:3b it''s')`, and the empty tsvector.
    let sent = hex("00000003636174000001800369742773000000736174000002c0020004");
    assert_eq!(
        one(3614, &sent).as_deref(),
        Some("'cat':3B 'it''s' 'sat':2A,4")
    );
    assert_eq!(one(3614, &hex("00000000")).as_deref(), Some(""));
    // What `tsvectorout` could not have sent is not read: lexemes out of
    // order or twice, positions out of order, bytes left over, a count
    // beyond the bytes.
    for bad in [
        "0000000262000000610000",
        "0000000261000000610000",
        "000000016100000200040002",
        "00000001610000ff",
        "00000002610000",
        "00000001610001",
    ] {
        assert_eq!(one(3614, &hex(bad)), None, "{bad}");
    }
}

#[test]
fn binary_multiranges_read_range_by_range() {
    let multirange = |ranges: &[Vec<u8>]| {
        let mut out = (ranges.len() as i32).to_be_bytes().to_vec();
        for r in ranges {
            out.extend((r.len() as i32).to_be_bytes());
            out.extend_from_slice(r);
        }
        out
    };
    let int = |n: i32| n.to_be_bytes();
    let sent = multirange(&[
        range(0x02, &[&int(1), &int(3)]),
        range(0x02 | 0x10, &[&int(5)]),
    ]);
    assert_eq!(
        one(4451, &sent).as_deref(),
        Some("{[\"1\",\"3\"),[\"5\",)}")
    );
    assert_eq!(one(4451, &multirange(&[])).as_deref(), Some("{}"));
    // An array of them: the element's OID in its header.
    let mut array = Vec::new();
    for n in [1i32, 1, 4451, 1, 1] {
        array.extend(n.to_be_bytes());
    }
    array.extend((sent.len() as i32).to_be_bytes());
    array.extend(&sent);
    assert_eq!(
        one(6150, &array).as_deref(),
        Some(r#"{"{[\"1\",\"3\"),[\"5\",)}"}"#)
    );
    // Malformed: a count beyond the ranges, bytes left over, a bad range.
    let mut short = sent.clone();
    short[3] = 3;
    let mut extra = sent.clone();
    extra.push(0);
    for bad in [short, extra, multirange(&[range(0x40, &[])])] {
        assert_eq!(one(4451, &bad), None, "{bad:?}");
    }
}
