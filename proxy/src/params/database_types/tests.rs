//! The binary forms of the types whose OIDs each database gives: read by
//! the OIDs the catalog says, and by no other.

use bytes::Bytes;

use super::BUILT_IN;
use crate::params::{params_text, Extensions};

/// An `hstore`'s binary form from its pairs, in the order given.
fn hstore(pairs: &[(&[u8], Option<&[u8]>)]) -> Vec<u8> {
    let mut out = (pairs.len() as i32).to_be_bytes().to_vec();
    for (key, value) in pairs {
        out.extend((key.len() as i32).to_be_bytes());
        out.extend_from_slice(key);
        match value {
            Some(v) => {
                out.extend((v.len() as i32).to_be_bytes());
                out.extend_from_slice(v);
            }
            None => out.extend((-1i32).to_be_bytes()),
        }
    }
    out
}

#[test]
fn binary_hstores_read_by_the_oids_the_database_gave_them() {
    // Whatever OIDs the database gave `hstore` and its array type.
    let ours = Extensions::with_hstore(16_500, 16_505);
    let read = |oid: u32, bytes: &[u8], extensions: &Extensions| {
        params_text(
            &[oid],
            &[1],
            &[Some(Bytes::copy_from_slice(bytes))],
            extensions,
        )
        .map(|mut v| v.remove(0))
    };
    let sent = hstore(&[
        (b"b", Some(b"2")),
        (b"a", None),
        (b"say \"hi\"", Some(b"back\\slash")),
        (b"", Some(b"")),
        (b"b", Some(b"3")),
    ]);
    // The pairs in the order sent: PostgreSQL keeps one of a key sent
    // twice as it does for the same text.
    assert_eq!(
        read(16_500, &sent, &ours).as_deref(),
        Some(r#""b"=>"2", "a"=>NULL, "say \"hi\""=>"back\\slash", ""=>"", "b"=>"3""#)
    );
    assert_eq!(read(16_500, &hstore(&[]), &ours).as_deref(), Some(""));
    // Unknown to a database without the extension, or at another OID.
    assert_eq!(read(16_500, &sent, BUILT_IN), None);
    assert_eq!(read(16_501, &sent, &ours), None);

    // An array of them: the element's OID in its header is hstore's.
    let mut array = Vec::new();
    for n in [1i32, 1, 16_500, 2, 1] {
        array.extend(n.to_be_bytes());
    }
    for element in [hstore(&[(b"k", Some(b"v"))]), hstore(&[])] {
        array.extend((element.len() as i32).to_be_bytes());
        array.extend(element);
    }
    assert_eq!(
        read(16_505, &array, &ours).as_deref(),
        Some(r#"{"\"k\"=>\"v\"",""}"#)
    );
    assert_eq!(read(16_505, &array, BUILT_IN), None);

    // What PostgreSQL refuses or no text carries is not read: a NULL key,
    // a NUL, a count beyond the bytes, bytes left over, bad UTF-8.
    let null_key = {
        let mut b = 1i32.to_be_bytes().to_vec();
        b.extend((-1i32).to_be_bytes());
        b.extend((-1i32).to_be_bytes());
        b
    };
    let mut left_over = hstore(&[(b"a", Some(b"b"))]);
    left_over.push(0);
    let mut short = hstore(&[(b"a", Some(b"b"))]);
    short[3] = 2;
    for bad in [
        null_key,
        hstore(&[(b"a\0", Some(b"b"))]),
        hstore(&[(b"a", Some(b"\0"))]),
        hstore(&[(b"\xff", Some(b"b"))]),
        left_over,
        short,
    ] {
        assert_eq!(read(16_500, &bad, &ours), None, "{bad:?}");
    }
}

/// `record_send`'s form: the field count, then each field's OID, length
/// (-1: NULL) and bytes.
fn record(fields: &[(u32, Option<&[u8]>)]) -> Vec<u8> {
    let mut out = (fields.len() as i32).to_be_bytes().to_vec();
    for (oid, bytes) in fields {
        out.extend(oid.to_be_bytes());
        match bytes {
            None => out.extend((-1i32).to_be_bytes()),
            Some(b) => {
                out.extend((b.len() as i32).to_be_bytes());
                out.extend(*b);
            }
        }
    }
    out
}

#[test]
fn binary_composites_read_as_record_out_writes_them() {
    let ours = Extensions::with_composite(16_600, 16_605);
    let read = |oid: u32, bytes: &[u8]| {
        params_text(&[oid], &[1], &[Some(Bytes::copy_from_slice(bytes))], &ours)
            .map(|mut v| v.remove(0))
    };
    // Text quoted where it holds a delimiter, a quote, a backslash or a
    // space, or is empty (quotes and backslashes doubled); NULL empty;
    // a nested composite quoted as a field.
    let inner = record(&[(23, Some(&7i32.to_be_bytes())), (25, Some(b"a b"))]);
    let sent = record(&[
        (25, Some(b"plain")),
        (25, Some(b"say \"hi\" \\ (x),y")),
        (25, Some(b"")),
        (23, None),
        (16_600, Some(&inner)),
    ]);
    assert_eq!(
        read(16_600, &sent).as_deref(),
        Some(r#"(plain,"say ""hi"" \\ (x),y","",,"(7,""a b"")")"#)
    );
    // Its array, element by element.
    let mut array = vec![0, 0, 0, 1, 0, 0, 0, 1];
    array.extend(16_600u32.to_be_bytes());
    array.extend(1i32.to_be_bytes());
    array.extend(1i32.to_be_bytes());
    array.extend((inner.len() as i32).to_be_bytes());
    array.extend(&inner);
    assert_eq!(read(16_605, &array).as_deref(), Some(r#"{"(7,\"a b\")"}"#));
    // A field of a type not read, bytes left over or missing, another
    // database's composite: not read.
    assert_eq!(read(16_600, &record(&[(2_249, Some(b"x"))])), None);
    let mut long = sent.clone();
    long.push(0);
    assert_eq!(read(16_600, &long), None);
    assert_eq!(read(16_600, &sent[..sent.len() - 1]), None);
    assert_eq!(read(16_700, &sent), None);
}
