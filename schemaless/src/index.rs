//! Secondary indexes: what an index holds and how a query is checked and
//! answered, shared by the MariaDB store and the in-memory model (which
//! answers by brute force over the latest cells, as the definition).
//!
//! An entry is a row whose latest cell of the indexed column has a usable
//! shard-field value; it carries that value and the denormalized fields.
//! A field whose value does not fit its declared type is null in the entry,
//! and null never matches a filter. Entries are ordered by the `order_by`
//! field (nulls last), then by row key; `descending` reverses both.

use std::cmp::Ordering;

use serde_json::{Map, Value};

use crate::api::{FilterOp, IndexEntry, IndexQuery};
use crate::cell::{Body, Column, RowKey};
use crate::decimal::{canonical_decimal, compare_decimal};
use crate::error::{Error, Result};
use config::IndexFieldType;

/// The most entries one query returns.
pub const MAX_LIMIT: usize = 10_000;

/// The longest string an index stores (characters).
pub const MAX_STRING: usize = 255;

/// One declared index.
#[derive(Clone, Debug)]
pub struct IndexSpec {
    /// Its name.
    pub name: String,
    /// The column whose cells it indexes.
    pub column: Column,
    /// The field whose value routes entries and queries.
    pub shard_field: String,
    /// The denormalized fields.
    pub fields: Vec<String>,
    config: config::Index,
}

/// A field value as an index compares it.
#[derive(Clone, Debug, PartialEq)]
pub enum IndexValue {
    /// `string`
    Str(String),
    /// `int`
    Int(i64),
    /// `float`
    Float(f64),
    /// `decimal`, canonical text
    Decimal(String),
    /// `bool`
    Bool(bool),
}

impl IndexValue {
    /// Orders two values of one field type.
    pub fn compare(&self, other: &IndexValue) -> Ordering {
        match (self, other) {
            (IndexValue::Str(a), IndexValue::Str(b)) => a.as_bytes().cmp(b.as_bytes()),
            (IndexValue::Int(a), IndexValue::Int(b)) => a.cmp(b),
            (IndexValue::Float(a), IndexValue::Float(b)) => a.total_cmp(b),
            (IndexValue::Decimal(a), IndexValue::Decimal(b)) => compare_decimal(a, b),
            (IndexValue::Bool(a), IndexValue::Bool(b)) => a.cmp(b),
            _ => Ordering::Equal,
        }
    }

    /// The bytes a shard value routes by: a UUID string by its 16 bytes
    /// (the same shard as the row it names), anything else by its text.
    pub fn routing_bytes(&self) -> Vec<u8> {
        match self {
            IndexValue::Str(s) => match uuid::Uuid::parse_str(s) {
                Ok(u) if s.len() == 36 => u.as_bytes().to_vec(),
                _ => s.as_bytes().to_vec(),
            },
            IndexValue::Int(i) => i.to_string().into_bytes(),
            IndexValue::Float(f) => f.to_string().into_bytes(),
            IndexValue::Decimal(d) => d.clone().into_bytes(),
            IndexValue::Bool(b) => b.to_string().into_bytes(),
        }
    }
}

/// A body value as a field of type `kind`, if it fits.
pub fn index_value(kind: IndexFieldType, value: &Value) -> Option<IndexValue> {
    match (kind, value) {
        (IndexFieldType::String, Value::String(s)) if s.chars().count() <= MAX_STRING => {
            Some(IndexValue::Str(s.clone()))
        }
        (IndexFieldType::Int, v) => v.as_i64().map(IndexValue::Int),
        (IndexFieldType::Float, Value::Number(n)) => n.as_f64().map(IndexValue::Float),
        (IndexFieldType::Decimal, Value::String(_) | Value::Number(_)) => {
            let text = match value {
                Value::String(s) => s.clone(),
                other => other.to_string(),
            };
            let canonical = canonical_decimal(&text).ok()?;
            // DECIMAL(65,20): 45 integer digits, 20 fraction digits.
            let digits = canonical.trim_start_matches('-');
            let (int, frac) = digits.split_once('.').unwrap_or((digits, ""));
            (int.len() <= 45 && frac.len() <= 20 && int.bytes().all(|b| b.is_ascii_digit()))
                .then_some(IndexValue::Decimal(canonical))
        }
        (IndexFieldType::Bool, Value::Bool(b)) => Some(IndexValue::Bool(*b)),
        _ => None,
    }
}

fn type_name(kind: IndexFieldType) -> &'static str {
    match kind {
        IndexFieldType::String => "a string of at most 255 characters",
        IndexFieldType::Int => "an integer",
        IndexFieldType::Float => "a number",
        IndexFieldType::Decimal => "a decimal (number or numeric string)",
        IndexFieldType::Bool => "true or false",
    }
}

/// A checked query: values converted to their field types.
#[derive(Clone, Debug)]
pub struct CheckedQuery {
    /// The shard-field value.
    pub shard_value: IndexValue,
    /// (field, op, values): one value, or the candidates of `IN`.
    pub filters: Vec<(String, FilterOp, Vec<IndexValue>)>,
    /// The order field, if any.
    pub order_by: Option<String>,
    /// Largest first.
    pub descending: bool,
    /// At most this many.
    pub limit: usize,
}

impl IndexSpec {
    /// The spec of a configured index.
    pub fn from_config(index: &config::Index) -> Result<IndexSpec> {
        Ok(IndexSpec {
            name: index.name.clone(),
            column: Column::new(&index.column)?,
            shard_field: index.shard_field.clone(),
            fields: index.fields.clone(),
            config: index.clone(),
        })
    }

    /// Whether a shard-field value has at most one row.
    pub fn unique(&self) -> bool {
        self.config.unique
    }

    /// The type of a field of the index.
    pub fn type_of(&self, field: &str) -> IndexFieldType {
        self.config.type_of(field)
    }

    /// The shard field and the denormalized fields.
    pub fn all_fields(&self) -> impl Iterator<Item = &String> {
        std::iter::once(&self.shard_field).chain(&self.fields)
    }

    fn holds(&self, field: &str) -> bool {
        self.all_fields().any(|f| f == field)
    }

    /// Checks a query against the index, naming the wrong part.
    pub fn check(&self, query: &IndexQuery) -> Result<CheckedQuery> {
        if query.limit == 0 || query.limit > MAX_LIMIT {
            return Err(Error::invalid(
                "limit",
                format!("must be between 1 and {MAX_LIMIT}, got {}", query.limit),
            ));
        }
        let convert = |field: &str, value: &Value, key: &str| {
            let kind = self.type_of(field);
            index_value(kind, value).ok_or_else(|| {
                Error::invalid(
                    key,
                    format!(
                        "expected {} for field {field:?} of index {}, got {value}",
                        type_name(kind),
                        self.name
                    ),
                )
            })
        };
        let shard_value = convert(&self.shard_field, &query.shard_value, "shard_value")?;
        let mut filters = Vec::with_capacity(query.filters.len());
        for (i, filter) in query.filters.iter().enumerate() {
            if !self.holds(&filter.field) {
                return Err(Error::invalid(
                    &format!("filters[{i}].field"),
                    format!(
                        "index {} holds no field {:?} (it holds {})",
                        self.name,
                        filter.field,
                        self.all_fields().cloned().collect::<Vec<_>>().join(", ")
                    ),
                ));
            }
            let key = format!("filters[{i}].value");
            let values = if filter.op == FilterOp::In {
                let items = filter
                    .value
                    .as_array()
                    .ok_or_else(|| Error::invalid(&key, "IN takes an array of values"))?;
                if items.is_empty() {
                    return Err(Error::invalid(&key, "IN takes at least one value"));
                }
                items
                    .iter()
                    .enumerate()
                    .map(|(k, v)| convert(&filter.field, v, &format!("{key}[{k}]")))
                    .collect::<Result<Vec<_>>>()?
            } else {
                vec![convert(&filter.field, &filter.value, &key)?]
            };
            filters.push((filter.field.clone(), filter.op, values));
        }
        if let Some(order) = &query.order_by {
            if !self.holds(order) {
                return Err(Error::invalid(
                    "order_by",
                    format!("index {} holds no field {order:?}", self.name),
                ));
            }
        }
        Ok(CheckedQuery {
            shard_value,
            filters,
            order_by: query.order_by.clone(),
            descending: query.descending,
            limit: query.limit,
        })
    }

    /// The entry of a row whose latest cell of the column has `body`: the
    /// shard value and the fields as the body has them (null where a value
    /// does not fit its type). `None` when the shard field is unusable.
    pub fn entry(&self, body: &Body) -> Option<(IndexValue, Body)> {
        let shard = index_value(
            self.type_of(&self.shard_field),
            body.fields().get(&self.shard_field)?,
        )?;
        let mut fields = Map::new();
        for field in self.all_fields() {
            let value = body.fields().get(field).cloned().unwrap_or(Value::Null);
            let fits = index_value(self.type_of(field), &value).is_some();
            fields.insert(field.clone(), if fits { value } else { Value::Null });
        }
        Some((shard, Body::from(fields)))
    }

    /// Answers a checked query by brute force over (row, latest body)
    /// pairs: the definition both stores must agree with.
    pub fn brute_force<'a>(
        &self,
        query: &CheckedQuery,
        rows: impl IntoIterator<Item = (RowKey, &'a Body)>,
    ) -> Vec<IndexEntry> {
        let mut hits: Vec<(Option<IndexValue>, IndexEntry)> = Vec::new();
        for (row_key, body) in rows {
            let Some((shard, fields)) = self.entry(body) else {
                continue;
            };
            if shard.compare(&query.shard_value) != Ordering::Equal {
                continue;
            }
            let value_of = |field: &str| {
                fields
                    .fields()
                    .get(field)
                    .and_then(|v| index_value(self.type_of(field), v))
            };
            let matches = query.filters.iter().all(|(field, op, values)| {
                let Some(v) = value_of(field) else {
                    return false;
                };
                let cmp = v.compare(&values[0]);
                match op {
                    FilterOp::Eq => cmp == Ordering::Equal,
                    FilterOp::Lt => cmp == Ordering::Less,
                    FilterOp::Le => cmp != Ordering::Greater,
                    FilterOp::Gt => cmp == Ordering::Greater,
                    FilterOp::Ge => cmp != Ordering::Less,
                    FilterOp::In => values.iter().any(|w| v.compare(w) == Ordering::Equal),
                }
            });
            if matches {
                let key = query.order_by.as_deref().and_then(value_of);
                hits.push((key, IndexEntry { row_key, fields }));
            }
        }
        hits.sort_by(|(ka, a), (kb, b)| {
            let by_key = match (ka, kb) {
                (Some(x), Some(y)) => x.compare(y),
                // Nulls last, whichever the direction.
                (Some(_), None) => return Ordering::Less,
                (None, Some(_)) => return Ordering::Greater,
                (None, None) => Ordering::Equal,
            };
            let order = by_key.then_with(|| a.row_key.cmp(&b.row_key));
            if query.descending {
                order.reverse()
            } else {
                order
            }
        });
        hits.into_iter()
            .take(query.limit)
            .map(|(_, entry)| entry)
            .collect()
    }
}
