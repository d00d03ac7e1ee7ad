//! Reading a stored value: the SQL that reads a column as text
//! ([`Conversion::read_expr`]) and that text's JSON form
//! ([`Conversion::render`]).

use super::*;

impl Conversion {
    /// The SQL expression that reads column `column` (already quoted and
    /// qualified) as the text [`Conversion::render`] takes.
    pub fn read_expr(&self, column: &str) -> String {
        match self {
            // Microseconds since 1970 as whole days plus the time of day:
            // `extract(epoch …)` rounds near the end of the range (year
            // 294276 reads a microsecond late), days and times are exact.
            Conversion::Timestamptz | Conversion::Timestamp => {
                let utc = match self {
                    Conversion::Timestamptz => format!("({column} AT TIME ZONE 'UTC')"),
                    _ => column.to_string(),
                };
                format!(
                    "CASE WHEN isfinite({column}) THEN (({utc}::date - DATE '1970-01-01')::numeric * 86400000000                      + extract(epoch FROM {utc}::time) * 1000000)::numeric(40,0)::text ELSE {column}::text END"
                )
            }
            // The three fields as integers, whatever `IntervalStyle`
            // says: `extract` splits them exactly (months into years and
            // months, the time into hours, minutes and microseconds).
            Conversion::Interval => format!(
                "CASE WHEN {column} IS NULL THEN NULL ELSE \
                 (extract(year FROM {column}) * 12 + extract(month FROM {column}))::bigint::text || ' ' || \
                 extract(day FROM {column})::bigint::text || ' ' || \
                 (extract(hour FROM {column}) * 3600000000 + extract(minute FROM {column}) * 60000000 \
                  + extract(microseconds FROM {column}))::bigint::text END"
            ),
            // The amount, whatever `lc_monetary` prints around it.
            Conversion::Money => format!("({column})::pg_catalog.numeric::text"),
            // Hex whatever `bytea_output` says.
            Conversion::Bytea => format!("(E'\\\\x' || encode({column}, 'hex'))"),
            // An array of several dimensions, or subscripted from
            // another bound than 1, reads as its dimensions (`array_dims`)
            // and its elements ([`dims`]); a flat one from 1 as its
            // elements alone.
            Conversion::TextArray
            | Conversion::Int2Array
            | Conversion::Int4Array
            | Conversion::Int8Array => format!(
                "CASE WHEN {} THEN json_build_object('dims', array_dims({column}), 'elements', array_to_json({column}))::text \
                 ELSE array_to_json({column})::text END",
                shaped(column)
            ),
            Conversion::Range(subtype) => range::read_expr(*subtype, column),
            Conversion::Multirange(subtype) => multirange::read_expr(*subtype, column),
            // Printed under the layout's own settings whatever the
            // session's ([`COMPOSITE_TEXT`]).
            Conversion::Record => format!("mezzanine_public.composite_text({column})"),
            // `unnest` of composite values in FROM spreads each into its
            // fields: the elements are taken by subscript instead. (Its
            // dimensions alone when it is shaped otherwise: see
            // [`Conversion::render`].)
            //
            // `column` may be the app's own expression (`n`, `u.codes`),
            // so it is named only outside the subquery or in its FROM,
            // where the subquery's own names do not capture it; and
            // those names are the layout's own (`mezzanine_u`).
            Conversion::ArrayOf(Element::Record) => format!(
                "CASE WHEN {column} IS NULL THEN NULL \
                 WHEN {} THEN json_build_object('dims', array_dims({column}))::text \
                 ELSE (SELECT coalesce(json_agg(mezzanine_public.composite_text(mezzanine_u.mezzanine_a[mezzanine_s.mezzanine_n]) \
                                                ORDER BY mezzanine_s.mezzanine_n), '[]')::text \
                       FROM (SELECT {column}) AS mezzanine_u(mezzanine_a), \
                            generate_subscripts(mezzanine_u.mezzanine_a, 1) AS mezzanine_s(mezzanine_n)) END",
                shaped(column)
            ),
            // Element by element through the element's own reading, in
            // order (`unnest` reads every dimension's, the last fastest).
            Conversion::ArrayOf(element) => {
                let elements = format!(
                    "(SELECT coalesce(json_agg({} ORDER BY mezzanine_u.mezzanine_n), '[]') \
                      FROM unnest({column}) WITH ORDINALITY AS mezzanine_u(mezzanine_e, mezzanine_n))",
                    element.scalar().read_expr("mezzanine_u.mezzanine_e")
                );
                format!(
                    "CASE WHEN {column} IS NULL THEN NULL \
                     WHEN {} THEN json_build_object('dims', array_dims({column}), 'elements', {elements})::text \
                     ELSE {elements}::text END",
                    shaped(column)
                )
            }
            _ => format!("{column}::text"),
        }
    }

    /// [`Conversion::render`] of text the caller owns: text columns keep
    /// it as it is instead of copying it (the backfill reads every field
    /// through here).
    pub fn render_owned(&self, text: Option<String>) -> Result<Value, String> {
        match (self, text) {
            (
                Conversion::Text | Conversion::Enum | Conversion::Xml | Conversion::Record,
                Some(text),
            ) => Ok(Value::String(text)),
            (_, text) => self.render(text.as_deref()),
        }
    }

    /// The JSON value of a stored value read by [`Conversion::read_expr`]
    /// (`None` is SQL NULL).
    pub fn render(&self, text: Option<&str>) -> Result<Value, String> {
        let Some(text) = text else {
            return Ok(Value::Null);
        };
        match self {
            Conversion::Int2 | Conversion::Int4 | Conversion::Int8 => text
                .parse::<i64>()
                .map(Value::from)
                .map_err(|e| format!("{text:?} is not an integer: {e}")),
            Conversion::Numeric | Conversion::Money => canonical_decimal(text).map(Value::String),
            Conversion::UnconstrainedNumeric => {
                schemaless::decimal::scaled_decimal(text).map(Value::String)
            }
            Conversion::Float4 => {
                let x: f32 = text
                    .parse()
                    .map_err(|e| format!("{text:?} is not a real: {e}"))?;
                Ok(float_value(widen(x)))
            }
            Conversion::Float8 => {
                let x: f64 = text
                    .parse()
                    .map_err(|e| format!("{text:?} is not a double: {e}"))?;
                Ok(float_value(x))
            }
            Conversion::Text | Conversion::Enum | Conversion::Xml | Conversion::Record => {
                Ok(Value::String(text.to_string()))
            }
            // `::text` drops the padding already; a value read otherwise
            // is put in the same form.
            Conversion::Char => Ok(Value::String(text.trim_end_matches(' ').to_string())),
            Conversion::Bool => match text {
                "true" => Ok(Value::Bool(true)),
                "false" => Ok(Value::Bool(false)),
                _ => Err(format!("{text:?} is not a boolean")),
            },
            Conversion::Uuid => uuid::Uuid::parse_str(text)
                .map(|u| Value::String(u.hyphenated().to_string()))
                .map_err(|e| format!("{text:?} is not a UUID: {e}")),
            Conversion::Timestamptz | Conversion::Timestamp => {
                let micros: i128 = text.parse().map_err(|_| {
                    format!("{text:?} cannot be a cell value: only finite timestamps are")
                })?;
                time::format_timestamp(micros, *self == Conversion::Timestamptz).map(Value::String)
            }
            Conversion::Date => time::canonical_date(text).map(Value::String),
            Conversion::Time => duration::canonical_time(text).map(Value::String),
            Conversion::Timetz => zoned::canonical_timetz(text).map(Value::String),
            Conversion::Interval => Interval::from_fields(text).map(|i| Value::String(i.format())),
            Conversion::Bytea => duration::canonical_bytea(text).map(Value::String),
            Conversion::Inet | Conversion::Cidr => {
                network::canonical_inet(text, *self == Conversion::Cidr).map(Value::String)
            }
            Conversion::Macaddr => network::canonical_mac(text, 6).map(Value::String),
            Conversion::Macaddr8 => network::canonical_mac(text, 8).map(Value::String),
            Conversion::Geometric(g) => g.canonical(text).map(Value::String),
            Conversion::Bit => bits::canonical_bits(text).map(Value::String),
            Conversion::Range(subtype) => range::render(*subtype, text).map(Value::String),
            Conversion::Multirange(subtype) => {
                multirange::render(*subtype, text).map(Value::String)
            }
            Conversion::Tsvector => tsvector::canonical_tsvector(text).map(Value::String),
            Conversion::Tsquery => tsquery::canonical_tsquery(text).map(Value::String),
            Conversion::Hstore => hstore::parse(text).map(Value::Object),
            Conversion::Json | Conversion::Jsonb => {
                serde_json::from_str(text).map_err(|e| format!("stored JSON does not parse: {e}"))
            }
            Conversion::TextArray
            | Conversion::Int2Array
            | Conversion::Int4Array
            | Conversion::Int8Array => {
                let value: Value = serde_json::from_str(text)
                    .map_err(|e| format!("stored array does not parse: {e}"))?;
                let (_, elements) = stored_shape(value)?;
                // Checking it as input keeps one definition of a valid array
                // (rectangular, elements of the type).
                self.accept(&elements).map(|(canonical, _)| canonical)
            }
            Conversion::ArrayOf(element) => {
                let value: Value = serde_json::from_str(text)
                    .map_err(|e| format!("stored array does not parse: {e}"))?;
                let (dims, elements) = stored_shape(value)?;
                element.flat_only(&dims)?;
                let scalar = element.scalar();
                let items = array(&elements)?
                    .iter()
                    .map(|item| match item {
                        Value::Null => Ok(Value::Null),
                        Value::String(s) => scalar.render(Some(s)),
                        other => Err(expected("an element read as text", other)),
                    })
                    .collect::<Result<Vec<_>, _>>()?;
                Ok(dims::nest(&dims, items))
            }
        }
    }
}

/// Whether array `column` has several dimensions or is subscripted from
/// another bound than 1 (SQL): then it reads with its dimensions.
fn shaped(column: &str) -> String {
    format!("(array_lower({column}, 1) <> 1 OR array_ndims({column}) > 1)")
}

/// A stored array as read by [`Conversion::read_expr`]: its dimensions
/// and its elements (nested or flat, as that read gives them), refused
/// by name when subscripted from another bound than 1.
fn stored_shape(value: Value) -> Result<(Vec<usize>, Value), String> {
    match value {
        Value::Object(mut map) => {
            let bounds = map
                .get("dims")
                .and_then(Value::as_str)
                .ok_or("a stored array's dimensions are missing")?;
            let dims = dims::from_bounds(bounds)?;
            let elements = map.remove("elements").unwrap_or(Value::Array(Vec::new()));
            Ok((dims, elements))
        }
        Value::Array(items) => {
            let dims = if items.is_empty() {
                Vec::new()
            } else {
                vec![items.len()]
            };
            Ok((dims, Value::Array(items)))
        }
        other => Err(expected("an array", &other)),
    }
}
