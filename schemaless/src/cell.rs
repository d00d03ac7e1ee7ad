//! Cells and their parts, validated at the API boundary.
//!
//! A value of [`RowKey`], [`Column`], [`RefKey`] or [`Body`] is valid by
//! construction: the parsing constructors are the only way in, and each
//! rejection is an [`Error::InvalidInput`] that names the field. The body's
//! size limit depends on configuration, so the stores check it in
//! [`check_batch`] before they write anything.

use std::fmt;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use serde_json::{Map, Value};
use uuid::Uuid;

use crate::error::Error;

/// The UUID of an entity (a trip). Its 16 bytes decide the shard.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct RowKey(Uuid);

impl RowKey {
    /// Parses a row key from text; anything but a UUID is rejected.
    pub fn parse(text: &str) -> Result<RowKey, Error> {
        Uuid::parse_str(text)
            .map(RowKey)
            .map_err(|e| Error::invalid("row_key", format!("{text:?} is not a UUID: {e}")))
    }

    /// A row key from bytes read back from storage.
    pub fn from_slice(bytes: &[u8]) -> Option<RowKey> {
        Uuid::from_slice(bytes).ok().map(RowKey)
    }

    /// A fresh random row key.
    pub fn random() -> RowKey {
        RowKey(Uuid::new_v4())
    }

    /// The UUID itself.
    pub fn uuid(&self) -> Uuid {
        self.0
    }

    /// The 16 bytes that are stored and routed on.
    pub fn as_bytes(&self) -> &[u8; 16] {
        self.0.as_bytes()
    }
}

impl From<Uuid> for RowKey {
    fn from(uuid: Uuid) -> Self {
        RowKey(uuid)
    }
}

impl fmt::Display for RowKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

/// A column name: 1–64 characters of `[A-Za-z0-9_]`, case-sensitive.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Column(Arc<str>);

impl Column {
    /// The longest column name.
    pub const MAX_LEN: usize = 64;

    /// Checks and wraps a column name.
    pub fn new(name: &str) -> Result<Column, Error> {
        if name.is_empty() || name.len() > Self::MAX_LEN {
            return Err(Error::invalid(
                "column",
                format!(
                    "{name:?} must be 1-{} characters long, not {}",
                    Self::MAX_LEN,
                    name.len()
                ),
            ));
        }
        if let Some(bad) = name
            .chars()
            .find(|c| !(c.is_ascii_alphanumeric() || *c == '_'))
        {
            return Err(Error::invalid(
                "column",
                format!("{name:?} contains {bad:?}; only [A-Za-z0-9_] is allowed"),
            ));
        }
        Ok(Column(name.into()))
    }

    /// The name as text.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for Column {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// The version of a cell; the latest cell of a (row, column) is the one
/// with the highest ref key. Never negative.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct RefKey(i64);

impl RefKey {
    /// Checks and wraps a ref key.
    pub fn new(value: i64) -> Result<RefKey, Error> {
        if value < 0 {
            return Err(Error::invalid(
                "ref_key",
                format!("{value} is negative; ref keys start at 0"),
            ));
        }
        Ok(RefKey(value))
    }

    /// The number itself.
    pub fn get(&self) -> i64 {
        self.0
    }
}

impl fmt::Display for RefKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

/// A cell's value: a JSON object.
///
/// A body never changes once built, so the length of its JSON text (which
/// every write checks, and the backfill measures first to cut its batches)
/// is counted at most once and kept.
pub struct Body {
    map: Map<String, Value>,
    /// [`Body::json_len`] once counted; [`UNCOUNTED`] before.
    json_len: AtomicUsize,
}

/// The mark of a body whose length is not counted yet. No body is that
/// long: a `Map` cannot hold `usize::MAX` bytes of text.
const UNCOUNTED: usize = usize::MAX;

impl Clone for Body {
    fn clone(&self) -> Self {
        Body {
            map: self.map.clone(),
            json_len: AtomicUsize::new(self.json_len.load(Ordering::Relaxed)),
        }
    }
}

impl PartialEq for Body {
    fn eq(&self, other: &Self) -> bool {
        self.map == other.map
    }
}

impl fmt::Debug for Body {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("Body").field(&self.map).finish()
    }
}

impl Body {
    /// Wraps a JSON value, which must be an object.
    pub fn from_value(value: Value) -> Result<Body, Error> {
        match value {
            Value::Object(map) => Ok(Body::from(map)),
            other => Err(Error::invalid(
                "body",
                format!("must be a JSON object, not {}", json_kind(&other)),
            )),
        }
    }

    /// Parses a body from JSON text.
    pub fn parse(text: &str) -> Result<Body, Error> {
        let value: Value = serde_json::from_str(text)
            .map_err(|e| Error::invalid("body", format!("is not valid JSON: {e}")))?;
        Body::from_value(value)
    }

    /// The fields of the object.
    pub fn fields(&self) -> &Map<String, Value> {
        &self.map
    }

    /// The body as a JSON value.
    pub fn to_value(&self) -> Value {
        Value::Object(self.map.clone())
    }

    /// Length of the compact JSON text, which is what `limits.max_body_bytes`
    /// limits. Counted by walking the value, as serde_json would write it,
    /// without writing it: every write checks it.
    pub fn json_len(&self) -> usize {
        // Relaxed is enough: racing threads count the same number.
        match self.json_len.load(Ordering::Relaxed) {
            UNCOUNTED => {
                let len = object_len(&self.map);
                self.json_len.store(len, Ordering::Relaxed);
                len
            }
            len => len,
        }
    }
}

fn object_len(map: &Map<String, Value>) -> usize {
    // Braces, then per field its key, a colon and its value, and the
    // commas between fields.
    2 + map.len().saturating_sub(1)
        + map
            .iter()
            .map(|(key, value)| string_len(key) + 1 + value_len(value))
            .sum::<usize>()
}

fn value_len(value: &Value) -> usize {
    match value {
        Value::Null | Value::Bool(true) => 4,
        Value::Bool(false) => 5,
        // With `arbitrary_precision` a number is written as its own text.
        Value::Number(n) => n.as_str().len(),
        Value::String(s) => string_len(s),
        Value::Array(items) => {
            2 + items.len().saturating_sub(1) + items.iter().map(value_len).sum::<usize>()
        }
        Value::Object(map) => object_len(map),
    }
}

/// A JSON string's length quoted and escaped as serde_json escapes: `"`
/// and `\` by a backslash, control characters as `\n`-style pairs or
/// `\u00XX`, everything else as it is.
fn string_len(s: &str) -> usize {
    // Most strings have nothing to escape: one pass the compiler turns
    // into vector compares says so, without counting byte by byte.
    let escapes = s.bytes().fold(false, |any, b| {
        any | (b < 0x20) | (b == b'"') | (b == b'\\')
    });
    if !escapes {
        return 2 + s.len();
    }
    2 + s.len()
        + s.bytes()
            .map(|b| match b {
                b'"' | b'\\' | 0x08 | 0x09 | 0x0a | 0x0c | 0x0d => 1,
                0x00..=0x1f => 5,
                _ => 0,
            })
            .sum::<usize>()
}

impl From<Map<String, Value>> for Body {
    fn from(map: Map<String, Value>) -> Self {
        Body {
            map,
            json_len: AtomicUsize::new(UNCOUNTED),
        }
    }
}

impl fmt::Display for Body {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let text = serde_json::to_string(&self.map).map_err(|_| fmt::Error)?;
        f.write_str(&text)
    }
}

/// What kind of JSON value this is, for error messages: `a string`, `null`.
pub fn json_kind(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

/// The address of a cell.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct CellKey {
    /// The entity.
    pub row_key: RowKey,
    /// The group of fields.
    pub column: Column,
    /// The version.
    pub ref_key: RefKey,
}

impl fmt::Display for CellKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}/{}", self.row_key, self.column, self.ref_key)
    }
}

/// A cell to write: its address and its immutable body.
#[derive(Clone, Debug, PartialEq)]
pub struct Cell {
    /// Where the cell lives.
    pub key: CellKey,
    /// What it holds.
    pub body: Body,
}

impl Cell {
    /// Builds a cell from already-validated parts.
    pub fn new(row_key: RowKey, column: Column, ref_key: RefKey, body: Body) -> Cell {
        Cell {
            key: CellKey {
                row_key,
                column,
                ref_key,
            },
            body,
        }
    }

    /// Builds a cell from raw parts, validating each and naming the first
    /// field that is wrong.
    pub fn parse(row_key: &str, column: &str, ref_key: i64, body: Value) -> Result<Cell, Error> {
        Ok(Cell::new(
            RowKey::parse(row_key)?,
            Column::new(column)?,
            RefKey::new(ref_key)?,
            Body::from_value(body)?,
        ))
    }
}

/// A cell as stored: with its change-log position and write time.
#[derive(Clone, Debug, PartialEq)]
pub struct StoredCell {
    /// The cell itself.
    pub cell: Cell,
    /// Position in its shard's change log (the entity table's primary key).
    pub added_id: u64,
    /// When it was first written, microseconds since the Unix epoch.
    pub created_at: i64,
}

/// Checks a batch against the configured limits before anything is written;
/// the error names the offending cell by its index in the batch.
pub fn check_batch(cells: &[Cell], limits: &config::Limits) -> Result<(), Error> {
    if cells.len() > limits.max_batch_cells {
        return Err(Error::invalid(
            "cells",
            format!(
                "a batch of {} cells exceeds limits.max_batch_cells = {}",
                cells.len(),
                limits.max_batch_cells
            ),
        ));
    }
    let mut bytes = 0usize;
    for (i, cell) in cells.iter().enumerate() {
        let len = cell.body.json_len();
        check_body_len(len, limits).map_err(|e| e.in_batch(i))?;
        bytes += len;
    }
    if bytes > limits.max_batch_bytes {
        return Err(Error::invalid(
            "cells",
            format!(
                "a batch of {bytes} bytes of bodies exceeds limits.max_batch_bytes = {}",
                limits.max_batch_bytes
            ),
        ));
    }
    Ok(())
}

/// Cuts `cells` into batches `put_cells` takes: at most
/// `limits.max_batch_cells` cells and `limits.max_batch_bytes` bytes of
/// body each (a cell over `max_body_bytes` is a batch of its own, which
/// `put_cells` refuses naming it).
pub fn batches<'a>(cells: &'a [Cell], limits: &config::Limits) -> Vec<&'a [Cell]> {
    let mut out = Vec::with_capacity(1);
    let mut start = 0;
    for size in batch_sizes(cells.iter().map(|c| c.body.json_len()), limits) {
        out.push(&cells[start..start + size]);
        start += size;
    }
    out
}

/// The sizes of consecutive batches of cells whose JSON lengths are
/// `lens`, cut as [`batches`] cuts them (for a caller that measured the
/// bodies already, or that moves the cells into owned batches).
pub fn batch_sizes(lens: impl IntoIterator<Item = usize>, limits: &config::Limits) -> Vec<usize> {
    let mut out = Vec::new();
    let (mut size, mut bytes) = (0usize, 0usize);
    for len in lens {
        if size > 0 && (size >= limits.max_batch_cells || bytes + len > limits.max_batch_bytes) {
            out.push(size);
            (size, bytes) = (0, 0);
        }
        size += 1;
        bytes += len;
    }
    if size > 0 {
        out.push(size);
    }
    out
}

/// Checks that every cell is one of (`row_key`, `column`): a rewrite of one
/// row's column must not touch another's.
pub fn check_cells_of(row_key: &RowKey, column: &Column, cells: &[Cell]) -> Result<(), Error> {
    match cells
        .iter()
        .find(|c| c.key.row_key != *row_key || c.key.column != *column)
    {
        Some(stray) => Err(Error::invalid(
            "cells",
            format!(
                "{} is not a cell of row {row_key}, column {column}",
                stray.key
            ),
        )),
        None => Ok(()),
    }
}

/// Checks one body against `limits.max_body_bytes`.
pub fn check_body(body: &Body, limits: &config::Limits) -> Result<(), Error> {
    check_body_len(body.json_len(), limits)
}

fn check_body_len(len: usize, limits: &config::Limits) -> Result<(), Error> {
    if len > limits.max_body_bytes {
        return Err(Error::invalid(
            "body",
            format!(
                "is {len} bytes of JSON, over limits.max_body_bytes = {}",
                limits.max_body_bytes
            ),
        ));
    }
    Ok(())
}

/// Microseconds since the Unix epoch, now.
pub fn now_micros() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_micros() as i64)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::strategy::Strategy;
    use serde_json::json;

    fn field_of(err: Error) -> String {
        match err {
            Error::InvalidInput { field, .. } => field,
            other => panic!("not an input error: {other}"),
        }
    }

    #[test]
    fn each_invalid_part_names_its_field() {
        let uuid = "6f1c1a0e-8a3b-4a55-9d1e-3c2b1a0f9e8d";
        assert_eq!(
            field_of(Cell::parse("trip-42", "BASE", 1, json!({})).unwrap_err()),
            "row_key"
        );
        assert_eq!(
            field_of(Cell::parse(uuid, "", 1, json!({})).unwrap_err()),
            "column"
        );
        assert_eq!(
            field_of(Cell::parse(uuid, "BA SE", 1, json!({})).unwrap_err()),
            "column"
        );
        assert_eq!(
            field_of(Cell::parse(uuid, &"C".repeat(65), 1, json!({})).unwrap_err()),
            "column"
        );
        assert_eq!(
            field_of(Cell::parse(uuid, "BASE", -1, json!({})).unwrap_err()),
            "ref_key"
        );
        assert_eq!(
            field_of(Cell::parse(uuid, "BASE", 1, json!([1])).unwrap_err()),
            "body"
        );
        assert_eq!(
            field_of(Cell::parse(uuid, "BASE", 1, json!("x")).unwrap_err()),
            "body"
        );
        assert!(Cell::parse(uuid, &"C".repeat(64), 0, json!({})).is_ok());
    }

    #[test]
    fn batch_limits_name_the_cell() {
        let limits = config::Limits {
            max_body_bytes: 20,
            max_batch_cells: 3,
            max_batch_bytes: 25,
        };
        let small = Cell::parse(
            "6f1c1a0e-8a3b-4a55-9d1e-3c2b1a0f9e8d",
            "BASE",
            1,
            json!({"a": 1}),
        )
        .unwrap();
        let mut big = small.clone();
        big.body = Body::from_value(json!({"text": "x".repeat(20)})).unwrap();
        assert!(check_batch(&[small.clone(), small.clone()], &limits).is_ok());
        assert_eq!(
            field_of(check_batch(&[small.clone(), big], &limits).unwrap_err()),
            "cells[1].body"
        );
        assert_eq!(
            field_of(check_batch(&vec![small.clone(); 4], &limits).unwrap_err()),
            "cells"
        );
        // Three bodies of 7 bytes are 21, four would be 28 > 25.
        let limits = config::Limits {
            max_batch_cells: 10,
            ..limits
        };
        assert_eq!(
            field_of(check_batch(&vec![small.clone(); 4], &limits).unwrap_err()),
            "cells"
        );
        let cells = vec![small; 10];
        let cut = batches(&cells, &limits);
        assert_eq!(
            cut.iter().map(|b| b.len()).collect::<Vec<_>>(),
            [3, 3, 3, 1]
        );
        assert!(cut.iter().all(|b| check_batch(b, &limits).is_ok()));
    }

    #[test]
    fn json_len_is_the_compact_text_length() {
        let body = Body::from_value(json!({"a": [1, 2], "b": "é"})).unwrap();
        assert_eq!(body.json_len(), body.to_string().len());
        let hard = Body::parse(
            r#"{"":"","q\"\\":"\u0000\u001f\b\t\n\f\r\u007f/","n":[-0,1.50,1e300,123456789012345678901234567890],"o":{"x":{},"y":[],"z":[null,true,false]},"u":"ümlaut ✓ \ud83d\ude00"}"#,
        )
        .unwrap();
        assert_eq!(hard.json_len(), hard.to_string().len());
        // The count is kept: a clone carries it, and a counted body equals
        // an uncounted one with the same fields.
        let counted = hard.clone();
        let fresh = Body::from(hard.fields().clone());
        assert_eq!(counted.json_len(), hard.to_string().len());
        assert_eq!(counted, fresh);
        assert_eq!(fresh.json_len(), counted.json_len());
    }

    proptest::proptest! {
        #[test]
        fn json_len_agrees_with_serde_json(
            fields in proptest::collection::btree_map(
                "\\PC{0,6}",
                proptest::prop_oneof![
                    "\\PC{0,12}".prop_map(Value::String),
                    proptest::prelude::any::<i64>().prop_map(Value::from),
                    proptest::prelude::any::<f64>().prop_filter("finite", |f| f.is_finite()).prop_map(Value::from),
                    proptest::prelude::any::<bool>().prop_map(Value::Bool),
                    proptest::collection::vec("[\\x00-\\x7f]{0,5}", 0..4)
                        .prop_map(|v| Value::Array(v.into_iter().map(Value::String).collect())),
                ],
                0..8,
            )
        ) {
            let body = Body::from(fields.into_iter().collect::<Map<String, Value>>());
            proptest::prop_assert_eq!(body.json_len(), body.to_string().len());
        }
    }
}
