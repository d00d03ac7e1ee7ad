//! The types whose OIDs each database gives its own: an extension's
//! (`hstore`) and the composite types made with `CREATE TYPE ... AS`. Their
//! OIDs are read from the catalog when the proxy starts ([`Extensions`]),
//! and their binary forms read here.

use super::binary_text;

/// The OIDs of extensions' types whose binary form is read: each database
/// gives them its own when the extension is created, so they are read
/// from the catalog of the legacy database when the proxy starts.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct Extensions {
    /// `hstore`'s OID and its array type's, per schema it is created in.
    hstore: Vec<(u32, u32)>,
    /// Each composite type's (`CREATE TYPE ... AS`) OID and its array
    /// type's.
    composites: Vec<(u32, u32)>,
}

impl Extensions {
    /// The types as the catalog of `pool`'s database has them (none when
    /// the extensions are not created there).
    pub(crate) async fn read(pool: &sqlx::PgPool) -> Result<Extensions, sqlx::Error> {
        let rows: Vec<(i64, i64)> = sqlx::query_as(
            "/* mezzanine */ SELECT oid::int8, typarray::int8 FROM pg_type
             WHERE typname = 'hstore' AND typtype = 'b' ORDER BY oid",
        )
        .fetch_all(pool)
        .await?;
        let composites: Vec<(i64, i64)> = sqlx::query_as(
            "/* mezzanine */ SELECT t.oid::int8, t.typarray::int8 FROM pg_type t
             JOIN pg_class c ON c.oid = t.typrelid
             WHERE t.typtype = 'c' AND c.relkind = 'c' ORDER BY t.oid",
        )
        .fetch_all(pool)
        .await?;
        let oid = |n: i64| u32::try_from(n).unwrap_or(0);
        let pairs =
            |rows: Vec<(i64, i64)>| rows.into_iter().map(|(t, a)| (oid(t), oid(a))).collect();
        Ok(Extensions {
            hstore: pairs(rows),
            composites: pairs(composites),
        })
    }

    /// `hstore`'s OID `oid` and its array type's `array`.
    #[cfg(test)]
    pub(crate) fn with_hstore(oid: u32, array: u32) -> Extensions {
        Extensions {
            hstore: vec![(oid, array)],
            composites: Vec::new(),
        }
    }

    /// A composite type `oid` and its array type's `array`.
    #[cfg(test)]
    pub(crate) fn with_composite(oid: u32, array: u32) -> Extensions {
        Extensions {
            hstore: Vec::new(),
            composites: vec![(oid, array)],
        }
    }

    pub(super) fn is_composite(&self, oid: u32) -> bool {
        oid != 0 && self.composites.iter().any(|(t, _)| *t == oid)
    }

    pub(super) fn is_hstore(&self, oid: u32) -> bool {
        oid != 0 && self.hstore.iter().any(|(t, _)| *t == oid)
    }

    /// The element type of the array type `oid`, if it is one of these.
    pub(super) fn element_of(&self, oid: u32) -> Option<u32> {
        self.hstore
            .iter()
            .chain(&self.composites)
            .find(|(_, a)| *a == oid && oid != 0)
            .map(|(t, _)| *t)
    }
}

/// No extension's type: a range's bounds are built-in types.
pub(super) const BUILT_IN: &Extensions = &Extensions {
    hstore: Vec::new(),
    composites: Vec::new(),
};

/// A composite value's binary form (`record_send`: the count of fields,
/// then each field's type OID, its length, -1 for NULL, and its own binary
/// form) as the text `record_in` reads the same value from, as
/// `record_out` writes it: a NULL field empty, a field quoted (`"` and `\`
/// doubled) when it is empty or holds a delimiter, a quote, a backslash or
/// a space. A field of a type not read here makes the whole value unread.
pub(super) fn record_text(value: &[u8], extensions: &Extensions) -> Option<String> {
    fn int(rest: &mut &[u8]) -> Option<i32> {
        let (head, tail) = rest.split_first_chunk::<4>()?;
        *rest = tail;
        Some(i32::from_be_bytes(*head))
    }
    let mut rest = value;
    let count = usize::try_from(int(&mut rest)?).ok()?;
    let mut fields = Vec::with_capacity(count);
    for _ in 0..count {
        let oid = int(&mut rest)? as u32;
        let len = int(&mut rest)?;
        if len < 0 {
            fields.push(String::new());
            continue;
        }
        let len = usize::try_from(len).ok()?;
        let (bytes, tail) = (rest.get(..len)?, rest.get(len..)?);
        rest = tail;
        let text = binary_text(oid, bytes, extensions)?;
        let plain = !text.is_empty()
            && !text
                .chars()
                .any(|c| matches!(c, '"' | '\\' | '(' | ')' | ',') || c.is_ascii_whitespace());
        fields.push(match plain {
            true => text,
            false => format!("\"{}\"", text.replace('\\', "\\\\").replace('"', "\"\"")),
        });
    }
    rest.is_empty().then(|| format!("({})", fields.join(",")))
}

/// An `hstore`'s binary form (`hstore_send`: the count of pairs, then each
/// key's length and bytes, each value's length, -1 for NULL, and bytes) as
/// the text `hstore_in` reads the same pairs from, in the order sent:
/// `hstore_recv` and `hstore_in` make one value of the pairs alike (a key
/// sent twice included). A NULL key, which PostgreSQL refuses, or text
/// holding NUL, which no text form carries, is not read.
pub(super) fn hstore_text(value: &[u8]) -> Option<String> {
    let (count, mut rest) = value.split_first_chunk::<4>()?;
    let count = usize::try_from(i32::from_be_bytes(*count)).ok()?;
    let mut out = String::new();
    for i in 0..count {
        let key = hstore_item(&mut rest)??;
        let value = hstore_item(&mut rest)?;
        if i > 0 {
            out.push_str(", ");
        }
        legacy::hstore::push_pair(&mut out, key, value);
    }
    rest.is_empty().then_some(out)
}

/// One key or value of an `hstore`'s binary form, `rest` moved past it:
/// `Some(None)` for NULL.
fn hstore_item<'a>(rest: &mut &'a [u8]) -> Option<Option<&'a str>> {
    let (len, after) = rest.split_first_chunk::<4>()?;
    let len = i32::from_be_bytes(*len);
    if len < 0 {
        *rest = after;
        return Some(None);
    }
    let bytes = after.get(..usize::try_from(len).ok()?)?;
    *rest = &after[bytes.len()..];
    let s = std::str::from_utf8(bytes).ok()?;
    (!s.contains('\0')).then_some(Some(s))
}

#[cfg(test)]
mod tests;
