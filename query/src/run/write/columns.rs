//! The mapped columns of the table a write names, and each value's way
//! into SQL (typed, for a `VALUES` row) and back (read as the layout
//! renders it).

use legacy::conversion::dims;

use super::*;

/// A `bit(n)[]` or `bit varying(n)[]` field's conversion.
const BIT_ARRAY: legacy::conversion::Conversion =
    legacy::conversion::Conversion::ArrayOf(legacy::conversion::Element::Bit);

/// A mapped column of the table written, in the order the `VALUES` rows
/// give them.
pub(super) struct Col<'a> {
    /// Its SQL name, unquoted.
    pub(super) sql: String,
    pub(super) attr: Attribute,
    pub(super) kind: Kind<'a>,
}

pub(super) enum Kind<'a> {
    RowKey,
    /// The parent's integer id, of an INSERT that gives it or whose
    /// RETURNING reads it: given or drawn from its default, reserved for
    /// the row, never in a cell. Of a child table, its key to the parent,
    /// whose RETURNING reads it: the parent's id ([`Writer::read_ids`]).
    Id,
    /// The ref key of layout column `usize`.
    RefKey(usize),
    /// A field of layout column `usize`.
    Field(usize, &'a Field),
}

impl Col<'_> {
    /// Whether a `null` of it is JSON's `null`, not SQL NULL
    /// ([`legacy::layout::Field::null_is_json`]).
    pub(super) fn null_is_json(&self) -> bool {
        matches!(self.kind, Kind::Field(_, f) if f.null_is_json())
    }

    /// `v` as a typed SQL value.
    pub(super) fn typed(&self, v: &Value) -> Result<String, Refused> {
        let text = match &self.kind {
            Kind::Field(_, f) => f
                .text_of(v)
                .map_err(|e| Refused::new("XX001", format!("a stored {}: {e}", f.json)))?,
            _ => match v {
                Value::Null => None,
                Value::String(s) => Some(s.clone()),
                other => Some(other.to_string()),
            },
        };
        let ty = &self.attr.sql_type;
        Ok(match text {
            Some(text) => format!("CAST({} AS {ty})", literal(&text)),
            None => format!("CAST(NULL AS {ty})"),
        })
    }

    /// The SQL reading `expr`, cast to the column's type, as text the
    /// layout renders.
    ///
    /// A string column with a length limit (or an array of such strings)
    /// is read without it: an explicit cast to `varchar(n)` or
    /// `character(n)` (or their arrays) cuts a long value silently, where the app's INSERT or UPDATE (an assignment) would
    /// have failed; the limit is applied as an assignment applies it, by
    /// [`Col::render`]. The value is still cast to the column's own type
    /// (a domain's constraints). A `bit(n)` or `bit varying(n)` likewise:
    /// an explicit cast pads or cuts the bits, an assignment refuses a
    /// length the column does not hold. Either way it is evaluated once.
    pub(super) fn read(&self, expr: &str) -> String {
        let ty = &self.attr.sql_type;
        match &self.kind {
            Kind::Field(_, f) if f.conversion == legacy::conversion::Conversion::Bit => format!(
                "(SELECT CASE WHEN CAST(v AS {ty}) IS NULL THEN NULL ELSE v::text END \
                 FROM (SELECT CAST(({expr}) AS pg_catalog.varbit) AS v) AS assigned)"
            ),
            Kind::Field(_, f) if f.conversion == BIT_ARRAY => format!(
                "(SELECT CASE WHEN CAST(v AS {ty}) IS NULL THEN NULL ELSE {} END \
                 FROM (SELECT CAST(({expr}) AS pg_catalog.varbit[]) AS v) AS assigned)",
                f.conversion.read_expr("v")
            ),
            Kind::Field(_, f) if f.max_chars.is_some() => {
                use legacy::conversion::{Conversion, Element};
                let unbounded = match f.conversion {
                    Conversion::Char => "pg_catalog.bpchar",
                    Conversion::ArrayOf(Element::Char) => "pg_catalog.bpchar[]",
                    Conversion::TextArray => "pg_catalog.text[]",
                    _ => "pg_catalog.text",
                };
                format!(
                    "(SELECT CASE WHEN CAST(v AS {ty}) IS NULL THEN NULL ELSE {} END \
                     FROM (SELECT ({expr}) AS v) AS assigned)",
                    f.conversion.read_expr(&format!("CAST(v AS {unbounded})"))
                )
            }
            // Once: the read expression names its value several times
            // (a timestamp's day and time of day, an interval's fields),
            // and a volatile value (`clock_timestamp()`, `nextval`) must
            // not give each of them another.
            Kind::Field(_, f) => format!(
                "(SELECT {} FROM (SELECT CAST(({expr}) AS {ty}) AS v) AS once)",
                f.conversion.read_expr("v")
            ),
            _ => format!("(CAST(({expr}) AS {ty}))::text"),
        }
    }

    pub(super) fn render(&self, text: Option<String>) -> Result<Value, Refused> {
        let Some(text) = text else {
            return Ok(Value::Null);
        };
        match &self.kind {
            Kind::Field(_, f) => {
                let value = f.render(Some(text)).map_err(|e| {
                    Refused::new(
                        "0A000",
                        format!("{}: {e} (Schemaless cannot hold this value)", f.json),
                    )
                })?;
                // An array's elements, through its dimensions.
                let dims = match &value {
                    Value::Array(_) => dims::dimensions(&value, !f.conversion.dimensional())
                        .map_err(|e| Refused::new("0A000", format!("{} {e}", f.json)))?,
                    _ => Vec::new(),
                };
                let items = dims::leaves(&value, &dims);
                let bits: Vec<&str> = match (f.conversion, &value) {
                    (legacy::conversion::Conversion::Bit, Value::String(bits)) => vec![bits],
                    (BIT_ARRAY, Value::Array(_)) => {
                        items.iter().filter_map(|v| v.as_str()).collect()
                    }
                    _ => Vec::new(),
                };
                // PostgreSQL's codes: a `bit(n)`'s length mismatch, a
                // `bit varying(n)`'s truncation (an array's elements are
                // assigned as the scalar is).
                let typname = f.typname.trim_start_matches('_');
                let code = if typname == "bit" { "22026" } else { "22001" };
                for bits in bits {
                    legacy::bits::bits_fit(bits, typname, f.typmod)
                        .map_err(|e| Refused::new(code, e))?;
                }
                let fitted = match &value {
                    Value::String(text) => f.fitted(text).map(|cut| cut.map(Value::String)),
                    Value::Array(_) => f.fitted_elements(&dims, &items),
                    _ => Ok(None),
                };
                match fitted {
                    Ok(None) => Ok(value),
                    Ok(Some(cut)) => Ok(cut),
                    Err(e) => Err(Refused::new(
                        "22001",
                        format!(
                            "value too long for type {}: {} {e}",
                            self.attr.sql_type, self.sql
                        ),
                    )),
                }
            }
            Kind::RowKey => Ok(Value::String(text)),
            Kind::Id | Kind::RefKey(_) => text
                .parse::<i64>()
                .map(Value::from)
                .map_err(|e| Refused::new("22003", format!("{} {text}: {e}", self.sql))),
        }
    }
}

/// The mapped columns of `table`: the parent's UUID, then each layout
/// column's ref key and fields (a child table: its column's); with
/// `id`, last, the parent's integer id (a child table: its key to it).
pub(super) async fn columns<'a>(
    legacy: &'a LegacyStore,
    catalog: &Catalog,
    model: &crate::Model,
    (table, id): (Table, bool),
) -> Result<Vec<Col<'a>>, Refused> {
    let layout = legacy.layout();
    let mut wanted: Vec<(&str, String, Kind<'a>)> = Vec::new();
    let of_table: Vec<usize> = match table {
        Table::Parent => {
            wanted.push((layout.table_sql(), unquote(layout.uuid_sql()), Kind::RowKey));
            (0..layout.columns.len())
                .filter(|&i| layout.columns[i].shape == Shape::Row)
                .collect()
        }
        Table::Child(c) => layout
            .column(model.column(c).name.as_str())
            .map(|(i, _)| vec![i])
            .unwrap_or_default(),
    };
    for i in of_table {
        let c = &layout.columns[i];
        wanted.push((c.table_sql(), unquote(c.ref_key_sql()), Kind::RefKey(i)));
        for f in &c.fields {
            wanted.push((c.table_sql(), f.sql.clone(), Kind::Field(i, f)));
        }
    }
    match table {
        Table::Parent if id => {
            wanted.push((layout.table_sql(), unquote(layout.id_sql()), Kind::Id));
        }
        Table::Child(c) if id => {
            if let Some((_, child)) = layout.column(model.column(c).name.as_str()) {
                if let Shape::Child { parent_sql } = &child.shape {
                    wanted.push((child.table_sql(), unquote(parent_sql), Kind::Id));
                }
            }
        }
        _ => {}
    }
    let mut cols: Vec<Col> = Vec::new();
    for (table_sql, sql, kind) in wanted {
        if cols.iter().any(|c| c.sql == sql) {
            continue;
        }
        let attr = catalog.attribute(legacy, table_sql, &sql).await?;
        cols.push(Col { sql, attr, kind });
    }
    Ok(cols)
}
