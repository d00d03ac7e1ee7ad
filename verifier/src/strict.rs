//! The strict check of `verify full` (`--strict`, `verify.strict`):
//! PostgreSQL's own reading of the values Schemaless holds.
//!
//! The full diff compares two outputs of one conversion: the legacy rows
//! read through [`legacy::conversion`], and Schemaless's bodies put in the
//! same canonical form. A conversion that bends a value (rounds a
//! `numeric`, drops a sign, shifts a time) bends it the same way on both
//! sides and agrees with itself. This check does not read the legacy side
//! through the conversion at all: for every cell the diff found equal, it
//! sends Schemaless's body to PostgreSQL as `json` (which keeps each
//! number's text: `jsonb` would turn `-0.0` into `0.0`), and PostgreSQL casts
//! each field to its column's type as the catalog names it and compares it
//! with the column:
//!
//! | column type (catalog) | equal when |
//! |---|---|
//! | `json`, `jsonb` | both as `jsonb` text (JSON `null` is SQL NULL) |
//! | arrays | the JSON array's elements, cast to the array type, as text; a `numeric` array's by value; a `jsonb[]`'s or `json[]`'s elements as JSON, by value; a `bit(n)[]`'s cast to the column's own type. An array of several dimensions (nested JSON arrays) through the literal the layout writes of it, cast likewise |
//! | `numeric` | equal as `numeric` (the value; not the scale a `numeric(p,s)` displays) |
//! | `real` | cast to `real`, as text (a `real` is written as its shortest text, which reads back as the same `real`) |
//! | `timestamp`, `timestamptz`, `date` | cast, as text; ISO 8601 expanded years (`+294276`, astronomical `-4712`) are rewritten in SQL to PostgreSQL's (`294276`, `4713 … BC`) |
//! | range types and their arrays | equal as ranges (by value: a `numrange`'s bounds as `numeric`s), the bounds quoted and their years rewritten as PostgreSQL's before the cast ([`legacy::range::param`]) |
//! | `text`, `varchar`, `citext` | the JSON string, byte for byte (`COLLATE "C"`: a case-insensitive type or collation would find `Bob` equal to `bob`) |
//! | `character(n)` | the JSON string, byte for byte, with the column's text (which drops the padding): a cast to `character` would cut it to one character |
//! | anything else (an enum, a domain's own constraints) | cast to the type without its modifier, as text |
//!
//! A field with a `verify.tolerance` is equal within it (as `numeric`);
//! ignored fields and columns are skipped. A legacy row whose ref key moved
//! since the diff read it does not join and is not judged here (the next
//! run compares it). A value PostgreSQL cannot read as its column's type is
//! a mismatch carrying PostgreSQL's error: the batch's statement fails, and
//! is repeated cell by cell, then field by field, to name the value.
//!
//! The cost is one statement per layout column per chunk, in the legacy
//! database; `bench verify` is measured without it.

use std::collections::BTreeMap;

use legacy::layout::{quote, ColumnLayout, Field, Shape};
use legacy::LegacyStore;
use schemaless::{Cell, RowKey};
use serde_json::{json, Map, Value};
use sqlx::{AssertSqlSafe, Row};

use crate::compare::{Difference, Rules};
use crate::error::Error;

/// What one cell's check found wrong, per field: PostgreSQL's text of the
/// column, or its error reading Schemaless's value.
enum Found {
    Differs(Option<String>),
    Unreadable(String),
}

/// Checks Schemaless's `cells` (each of a layout column, found equal by the
/// diff) against the legacy rows through PostgreSQL's own casts; returns
/// one [`Difference`] per (row, column) where any field differs.
pub async fn check(
    legacy: &LegacyStore,
    rules: &Rules,
    cells: &[Cell],
) -> Result<Vec<Difference>, Error> {
    let mut by_column: BTreeMap<&str, Vec<&Cell>> = BTreeMap::new();
    for cell in cells {
        by_column
            .entry(cell.key.column.as_str())
            .or_default()
            .push(cell);
    }
    let mut differences = Vec::new();
    for (name, cells) in by_column {
        let Some((_, layout)) = legacy.layout().column(name) else {
            continue;
        };
        let column = &layout.name;
        if rules.ignores(column) {
            continue;
        }
        let fields: Vec<usize> = (0..layout.fields.len())
            .filter(|&i| !rules.ignores_field(column, &layout.fields[i].json))
            .collect();
        if fields.is_empty() {
            continue;
        }
        let docs: Vec<Value> = cells
            .iter()
            .map(|cell| {
                let body = rules.prepare(legacy, column, &cell.body);
                json!({
                    "k": cell.key.row_key.uuid(),
                    "r": cell.key.ref_key.get(),
                    "p": Value::Object(param_texts(layout, &body)),
                    "b": Value::Object(body),
                })
            })
            .collect();
        let found = column_check(legacy, rules, layout, &fields, &docs).await?;
        let mut per_row: BTreeMap<RowKey, (Vec<Value>, Vec<Value>)> = BTreeMap::new();
        for (at, wrong) in found {
            let cell = cells[at];
            let (theirs, ours) = per_row.entry(cell.key.row_key).or_default();
            let body = &docs[at]["b"];
            let mut postgres = Map::new();
            let mut errors = Map::new();
            let mut values = Map::new();
            for (field, found) in wrong {
                values.insert(
                    field.clone(),
                    body.get(&field).cloned().unwrap_or(Value::Null),
                );
                match found {
                    Found::Differs(text) => postgres.insert(field, json!(text)),
                    Found::Unreadable(error) => errors.insert(field, json!(error)),
                };
            }
            let mut legacy_side = json!({ "ref_key": cell.key.ref_key.get() });
            if !postgres.is_empty() {
                legacy_side["postgres_text"] = Value::Object(postgres);
            }
            if !errors.is_empty() {
                legacy_side["postgres_error"] = Value::Object(errors);
            }
            theirs.push(legacy_side);
            ours.push(json!({ "ref_key": cell.key.ref_key.get(), "fields": values }));
        }
        for (row_key, (postgres, schemaless)) in per_row {
            differences.push(Difference {
                row_key,
                column: column.clone(),
                legacy: json!({ "strict": postgres }),
                schemaless: json!({ "strict": schemaless }),
            });
        }
    }
    Ok(differences)
}

/// The cells of one column (as `docs`) whose `fields` PostgreSQL reads
/// otherwise: (position in `docs`, [(field, what was found)]).
async fn column_check(
    legacy: &LegacyStore,
    rules: &Rules,
    layout: &ColumnLayout,
    fields: &[usize],
    docs: &[Value],
) -> Result<Vec<(usize, Vec<(String, Found)>)>, Error> {
    let sql = statement(legacy, rules, layout, fields);
    let failed = match run(legacy, &sql, &Value::Array(docs.to_vec())).await {
        Ok(rows) => return Ok(differing(layout, fields, rows, 0)),
        Err(e) if data_exception(&e) => e,
        Err(e) => return Err(Error::postgres("the strict check")(e)),
    };
    tracing::debug!(
        "verify full --strict: a value does not read as its type ({failed}); checking cell by cell"
    );
    // Some value does not read as its type: cell by cell, then field by
    // field, to name it.
    let mut found = Vec::new();
    for (at, doc) in docs.iter().enumerate() {
        let one = Value::Array(vec![doc.clone()]);
        match run(legacy, &sql, &one).await {
            Ok(rows) => {
                found.extend(differing(layout, fields, rows, at));
                continue;
            }
            Err(e) if data_exception(&e) => {}
            Err(e) => return Err(Error::postgres("the strict check")(e)),
        }
        let mut wrong = Vec::new();
        for &i in fields {
            let json = layout.fields[i].json.clone();
            match run(legacy, &statement(legacy, rules, layout, &[i]), &one).await {
                Ok(rows) => {
                    for (_, mut fields) in differing(layout, &[i], rows, at) {
                        wrong.append(&mut fields);
                    }
                }
                Err(e) if data_exception(&e) => {
                    wrong.push((json, Found::Unreadable(database_message(&e))))
                }
                Err(e) => return Err(Error::postgres("the strict check")(e)),
            }
        }
        if !wrong.is_empty() {
            found.push((at, wrong));
        }
    }
    Ok(found)
}

/// The rows of [`run`] with a field not equal, positions moved by `base`.
fn differing(
    layout: &ColumnLayout,
    fields: &[usize],
    rows: Vec<Checked>,
    base: usize,
) -> Vec<(usize, Vec<(String, Found)>)> {
    rows.into_iter()
        .filter_map(|(n, equal, texts)| {
            let wrong: Vec<(String, Found)> = fields
                .iter()
                .zip(equal.iter().zip(texts))
                .filter(|(_, (equal, _))| !**equal)
                .map(|(&i, (_, text))| (layout.fields[i].json.clone(), Found::Differs(text)))
                .collect();
            (!wrong.is_empty()).then_some((base + n, wrong))
        })
        .collect()
}

type Checked = (usize, Vec<bool>, Vec<Option<String>>);

async fn run(legacy: &LegacyStore, sql: &str, docs: &Value) -> Result<Vec<Checked>, sqlx::Error> {
    let rows = sqlx::query(AssertSqlSafe(sql.to_string()))
        .bind(docs.to_string())
        .fetch_all(legacy.pool())
        .await?;
    rows.iter()
        .map(|row| {
            let n: i64 = row.try_get(0)?;
            Ok(((n - 1) as usize, row.try_get(1)?, row.try_get(2)?))
        })
        .collect()
}

/// A data exception (SQLSTATE class 22): a value that does not read as
/// its type, as opposed to a failing connection.
/// Whether `e` says a value does not read as its type: a data exception,
/// or the syntax error some types' input functions raise instead
/// (`tsvector`'s `42601`; `hstore`'s `XX000` before PostgreSQL 16). The
/// statement itself is the check's own, so a syntax error in it is the
/// value's; were it the statement's, every field alone would say so.
fn data_exception(e: &sqlx::Error) -> bool {
    legacy::classify(e) == schemaless::Failure::BadValue
        || e.as_database_error()
            .and_then(|d| d.code())
            .is_some_and(|code| code == "42601" || code == "XX000")
}

fn database_message(e: &sqlx::Error) -> String {
    e.as_database_error()
        .map(|d| d.message().to_string())
        .unwrap_or_else(|| e.to_string())
}

/// The statement that checks `fields` of the cells in `$1` (a JSON array
/// of `{"k": row key, "r": ref key, "b": body}`): per cell that joins its
/// legacy row at the same ref key, its position, whether each field is
/// equal, and PostgreSQL's text of each column.
fn statement(
    legacy: &LegacyStore,
    rules: &Rules,
    layout: &ColumnLayout,
    fields: &[usize],
) -> String {
    let parent = legacy.layout();
    let rows = match &layout.shape {
        Shape::Row => format!(
            "JOIN {table} t ON t.{uuid} = (s.e->>'k')::uuid AND t.{ref_key} = (s.e->>'r')::int8",
            table = parent.table_sql(),
            uuid = parent.uuid_sql(),
            ref_key = layout.ref_key_sql(),
        ),
        Shape::Child { parent_sql } => format!(
            "JOIN {table} p ON p.{uuid} = (s.e->>'k')::uuid
             JOIN {child} t ON t.{parent_key} = p.{id} AND t.{ref_key} = (s.e->>'r')::int8",
            table = parent.table_sql(),
            uuid = parent.uuid_sql(),
            id = parent.id_sql(),
            child = layout.table_sql(),
            parent_key = parent_sql,
            ref_key = layout.ref_key_sql(),
        ),
    };
    let mut equal = Vec::with_capacity(fields.len());
    let mut texts = Vec::with_capacity(fields.len());
    for &i in fields {
        let field = &layout.fields[i];
        let column = format!("t.{}", quote(&field.sql));
        equal.push(format!(
            "coalesce({}, false)",
            same(field, &column, rules.tolerance(&layout.name, &field.json))
        ));
        texts.push(format!("{column}::text"));
    }
    format!(
        "/* mezzanine */ SELECT s.n, ARRAY[{}]::bool[], ARRAY[{}]::text[]
         FROM json_array_elements($1::text::json) WITH ORDINALITY AS s(e, n)
         {rows}",
        equal.join(", "),
        texts.join(", "),
    )
}

/// The text PostgreSQL reads of each field of `body` compared through
/// it ([`by_param`]): a range's JSON text with its bounds quoted and a
/// year before 1 written BC ([`legacy::range::param`]), as the
/// timestamps' rule below rewrites a scalar's in SQL; an `hstore`'s
/// object as its `hstore` text. A range string it cannot read is left
/// as it is, any other value it cannot read goes as its JSON text: for
/// PostgreSQL to refuse.
fn param_texts(layout: &ColumnLayout, body: &Map<String, Value>) -> Map<String, Value> {
    let mut out = Map::new();
    for field in &layout.fields {
        let Some(value) = body.get(&field.json) else {
            continue;
        };
        if !by_param(field) && !nested(field, value) {
            continue;
        }
        let hstore = matches!(
            field.conversion,
            legacy::conversion::Conversion::Hstore
                | legacy::conversion::Conversion::ArrayOf(legacy::conversion::Element::Hstore)
        );
        let read = match (field.conversion.accept(value), value) {
            (Ok((_, Some(param))), _) => param,
            (Ok((_, None)), _) => continue,
            (_, Value::String(text)) if !hstore => text.clone(),
            // A value it cannot read: the JSON's own text, which
            // PostgreSQL refuses as the column's type (an `hstore` string
            // among them: quoted, it is a key with no value).
            (_, other) => other.to_string(),
        };
        out.insert(field.json.clone(), Value::String(read));
    }
    out
}

/// A field compared by value through the text PostgreSQL reads of it: a
/// range or multirange (by value, as a `numeric` is), an `hstore` (an
/// object in the cell), or an array of any of them.
fn by_param(field: &Field) -> bool {
    use legacy::conversion::{Conversion, Element};
    matches!(
        field.conversion,
        Conversion::Range(_)
            | Conversion::ArrayOf(Element::Range(_))
            | Conversion::Multirange(_)
            | Conversion::ArrayOf(Element::Multirange(_))
            | Conversion::Hstore
            | Conversion::ArrayOf(Element::Hstore)
    )
}

/// An array of several dimensions (an array of arrays, where the arrays
/// are dimensions and not `jsonb[]` elements): PostgreSQL reads it
/// through its literal ([`param_texts`]), as JSON has no cast to one.
fn nested(field: &Field, value: &Value) -> bool {
    field.conversion.dimensional() && value.get(0).is_some_and(Value::is_array)
}

/// Whether Schemaless's value of `field` (in `s.e`) is what `column`
/// holds, by the column's catalog type alone.
fn same(field: &Field, column: &str, tolerance: Option<f64>) -> String {
    let flat = same_flat(field, column, tolerance);
    if tolerance.is_some() || by_param(field) || !field.conversion.dimensional() {
        return flat;
    }
    // An array of several dimensions: its literal cast as the column's
    // type, by value for a `numeric[]`, else as text; cast to the
    // column's own `character(n)[]` or `bit(n)[]`, whose elements the
    // type without its modifier would cut to one.
    let param = format!("(s.e->'p'->>{})", literal(&field.json));
    let nested = match field.typname.as_str() {
        "_numeric" if field.typmod >= 0 => {
            format!("{param}::numeric[] IS NOT DISTINCT FROM {column}::numeric[]")
        }
        typname => {
            let ty = match typname {
                "_bpchar" | "_bit" | "_varbit" => &field.sql_type,
                _ => &field.base_type,
            };
            format!("{param}::{ty}::text IS NOT DISTINCT FROM {column}::text COLLATE \"C\"")
        }
    };
    format!(
        "CASE WHEN json_typeof((s.e->'b'->{})->0) = 'array' THEN {nested} ELSE {flat} END",
        literal(&field.json)
    )
}

/// [`same`] of a value that is not an array of several dimensions.
fn same_flat(field: &Field, column: &str, tolerance: Option<f64>) -> String {
    let value = format!("(s.e->'b'->{})", literal(&field.json));
    let text = format!("({value} #>> '{{}}')");
    let base = &field.base_type;
    if let Some(tolerance) = tolerance {
        return format!(
            "CASE WHEN {text} IS NULL OR {column} IS NULL THEN {text} IS NULL AND {column} IS NULL
                  ELSE abs({text}::numeric - {column}::numeric) <= {tolerance:?}::numeric END"
        );
    }
    if by_param(field) {
        // By value, as a `numeric` is (a `numrange` keeps `1.50`); an
        // array element by element, by the type's `=`.
        return format!(
            "(s.e->'p'->>{})::{base} IS NOT DISTINCT FROM {column}",
            literal(&field.json)
        );
    }
    match field.typname.as_str() {
        "json" | "jsonb" => format!(
            "nullif({value}::jsonb, 'null'::jsonb)::text IS NOT DISTINCT FROM nullif({column}::jsonb, 'null'::jsonb)::text"
        ),
        // By value, as a `numeric(p,s)` is: `numeric(6,2)[]` shows
        // `12.50`. An unconstrained one's elements keep their scale, and
        // are compared as text below.
        "_numeric" if field.typmod >= 0 => format!(
            "(CASE WHEN json_typeof({value}) = 'array' THEN
                  ARRAY(SELECT a.e FROM json_array_elements_text({value}) WITH ORDINALITY AS a(e, n) ORDER BY a.n)::numeric[]
              END) IS NOT DISTINCT FROM {column}::numeric[]"
        ),
        // Cast to the column's own `character(n)[]`, whose elements print
        // padded as the column's do: the type without its modifier is an
        // array of `character(1)`, which would cut every element to one
        // letter.
        "_bpchar" => format!(
            "(CASE WHEN json_typeof({value}) = 'array' THEN
                  ARRAY(SELECT a.e FROM json_array_elements_text({value}) WITH ORDINALITY AS a(e, n) ORDER BY a.n)::{}
              END)::text IS NOT DISTINCT FROM {column}::text COLLATE \"C\"",
            field.sql_type
        ),
        // Each element as JSON (a string element's text is not `jsonb`
        // input), JSON `null` as the SQL NULL the layout reads it as.
        "_jsonb" => format!(
            "(CASE WHEN json_typeof({value}) = 'array' THEN
                  ARRAY(SELECT nullif(a.e::jsonb, 'null'::jsonb) FROM json_array_elements({value}) WITH ORDINALITY AS a(e, n) ORDER BY a.n)
              END) IS NOT DISTINCT FROM {column}"
        ),
        // As `jsonb[]`'s: a `json` has no `=`, its text keeps spacing.
        "_json" => format!(
            "(CASE WHEN json_typeof({value}) = 'array' THEN
                  ARRAY(SELECT nullif(a.e::jsonb, 'null'::jsonb) FROM json_array_elements({value}) WITH ORDINALITY AS a(e, n) ORDER BY a.n)
              END) IS NOT DISTINCT FROM
             (CASE WHEN {column} IS NOT NULL THEN
                  ARRAY(SELECT nullif(c.e::jsonb, 'null'::jsonb) FROM unnest({column}) WITH ORDINALITY AS c(e, n) ORDER BY c.n)
              END)"
        ),
        // Each element cast to `xml` (PostgreSQL judges it) and compared
        // as stored: an `xml[]`'s text rewrites declarations.
        "_xml" => format!(
            "(CASE WHEN json_typeof({value}) = 'array' THEN
                  ARRAY(SELECT a.e::xml::text FROM json_array_elements_text({value}) WITH ORDINALITY AS a(e, n) ORDER BY a.n)
              END) IS NOT DISTINCT FROM
             (CASE WHEN {column} IS NOT NULL THEN
                  ARRAY(SELECT c.e::text FROM unnest({column}) WITH ORDINALITY AS c(e, n) ORDER BY c.n)
              END)"
        ),
        // Cast to the column's own type: `bit[]` is an array of `bit(1)`,
        // which would refuse every longer element.
        "_bit" | "_varbit" => format!(
            "(CASE WHEN json_typeof({value}) = 'array' THEN
                  ARRAY(SELECT a.e FROM json_array_elements_text({value}) WITH ORDINALITY AS a(e, n) ORDER BY a.n)::{}
              END)::text IS NOT DISTINCT FROM {column}::text COLLATE \"C\"",
            field.sql_type
        ),
        array if array.starts_with('_') => format!(
            "(CASE WHEN json_typeof({value}) = 'array' THEN
                  ARRAY(SELECT a.e FROM json_array_elements_text({value}) WITH ORDINALITY AS a(e, n) ORDER BY a.n)::{base}
              END)::text IS NOT DISTINCT FROM {column}::text COLLATE \"C\""
        ),
        // An unconstrained `numeric` keeps each value's scale, and so
        // does its cell: `1.5` is not the `1.50` the column holds.
        "numeric" if field.typmod < 0 => {
            format!("{text}::numeric::text IS NOT DISTINCT FROM {column}::text COLLATE \"C\"")
        }
        "numeric" => format!("{text}::numeric IS NOT DISTINCT FROM {column}"),
        "timestamptz" | "timestamp" | "date" => {
            let year = format!("substring({text} FROM '^([+-]?[0-9]+)-')");
            format!(
                "(CASE WHEN {year}::numeric <= 0
                       THEN lpad((1 - {year}::numeric)::text, 4, '0') || substring({text} FROM '^[+-]?[0-9]+(-.*)$') || ' BC'
                       ELSE ltrim({text}, '+') END)::{base}::text IS NOT DISTINCT FROM {column}::text COLLATE \"C\""
            )
        }
        "text" | "varchar" | "bpchar" | "citext" => format!("{text} IS NOT DISTINCT FROM {column}::text COLLATE \"C\""),
        // The bits as text: a cast to `bit` without its length would cut
        // them to one.
        "bit" | "varbit" => format!("{text} IS NOT DISTINCT FROM {column}::text COLLATE \"C\""),
        _ => format!("{text}::{base}::text IS NOT DISTINCT FROM {column}::text COLLATE \"C\""),
    }
}

/// A quoted SQL string literal.
fn literal(text: &str) -> String {
    format!("'{}'", text.replace('\'', "''"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn literals_double_their_quotes() {
        assert_eq!(literal("it's"), "'it''s'");
    }
}
