//! Taking a value written: its check and canonical form
//! ([`Conversion::accept`]) and the text cast into the column.

use super::*;

impl Conversion {
    /// Checks a JSON value written for this type and returns its canonical
    /// form and the text to cast into the column (`None` for NULL).
    pub fn accept(&self, value: &Value) -> Result<(Value, Option<String>), String> {
        if value.is_null() {
            return Ok((Value::Null, None));
        }
        let canonical = match self {
            Conversion::ArrayOf(element) => return Conversion::accept_elements(*element, value),
            Conversion::Int2 => integer(value, i16::MIN.into(), i16::MAX.into(), "smallint")?,
            Conversion::Int4 => integer(value, i32::MIN.into(), i32::MAX.into(), "integer")?,
            Conversion::Int8 => integer(value, i64::MIN, i64::MAX, "bigint")?,
            Conversion::Numeric | Conversion::UnconstrainedNumeric => {
                let text = match value {
                    Value::String(s) => s.clone(),
                    Value::Number(n) => n.to_string(),
                    _ => return Err(expected("a decimal string such as \"12.50\"", value)),
                };
                Value::String(if *self == Conversion::Numeric {
                    canonical_decimal(&text)?
                } else {
                    schemaless::decimal::scaled_decimal(&text)?
                })
            }
            Conversion::Money => {
                let text = match value {
                    Value::String(s) => s.clone(),
                    Value::Number(n) => n.to_string(),
                    _ => return Err(expected("an amount string such as \"12.50\"", value)),
                };
                let canonical = canonical_decimal(&text)?;
                money_fits(&canonical)?;
                Value::String(canonical)
            }
            Conversion::Float4 => {
                let x = float_input(value)?;
                let narrowed = widen(x as f32);
                if x.is_finite() && narrowed != x {
                    return Err(format!(
                        "{value} is not exactly representable as a real (it would be stored as {narrowed})"
                    ));
                }
                exactly(value, float_value(narrowed), "a real")?
            }
            Conversion::Float8 => exactly(value, float_value(float_input(value)?), "a double")?,
            Conversion::Text | Conversion::Enum | Conversion::Xml | Conversion::Record => {
                let s = text(value, "a string")?;
                if s.contains('\0') {
                    return Err("text cannot contain the NUL character (\\u0000)".into());
                }
                value.clone()
            }
            Conversion::Char => {
                let s = text(value, "a string")?;
                if s.contains('\0') {
                    return Err("text cannot contain the NUL character (\\u0000)".into());
                }
                Value::String(s.trim_end_matches(' ').to_string())
            }
            Conversion::Bool => Value::Bool(
                value
                    .as_bool()
                    .ok_or_else(|| expected("true or false", value))?,
            ),
            Conversion::Uuid => {
                let s = text(value, "a UUID string")?;
                let uuid =
                    uuid::Uuid::parse_str(s).map_err(|e| format!("{s:?} is not a UUID: {e}"))?;
                Value::String(uuid.hyphenated().to_string())
            }
            Conversion::Timestamptz | Conversion::Timestamp => {
                let zone = *self == Conversion::Timestamptz;
                let s = text(value, "a timestamp string")?;
                let micros = time::parse_timestamp(s, zone)?;
                Value::String(time::format_timestamp(micros, zone)?)
            }
            Conversion::Date => {
                let s = text(value, "a date string YYYY-MM-DD")?;
                Value::String(time::canonical_date(s)?)
            }
            Conversion::Time => {
                let s = text(value, "a time string HH:MM:SS[.ffffff]")?;
                Value::String(duration::canonical_time(s)?)
            }
            Conversion::Timetz => {
                let s = text(
                    value,
                    "a time string with an offset HH:MM:SS[.ffffff]+HH[:MM]",
                )?;
                Value::String(zoned::canonical_timetz(s)?)
            }
            Conversion::Interval => {
                let s = text(value, "an ISO 8601 interval string such as \"P1DT2H\"")?;
                Value::String(duration::canonical_interval(s)?)
            }
            Conversion::Bytea => {
                let s = text(value, "a bytea string of \"\\x\" and hex digits")?;
                Value::String(duration::canonical_bytea(s)?)
            }
            Conversion::Inet | Conversion::Cidr => {
                let s = text(value, "a network address string")?;
                Value::String(network::canonical_inet(s, *self == Conversion::Cidr)?)
            }
            Conversion::Macaddr | Conversion::Macaddr8 => {
                let s = text(value, "a MAC address string")?;
                let len = if *self == Conversion::Macaddr { 6 } else { 8 };
                Value::String(network::canonical_mac(s, len)?)
            }
            Conversion::Bit => {
                let s = text(value, "a bit string such as \"0101\"")?;
                Value::String(bits::canonical_bits(s)?)
            }
            Conversion::Geometric(g) => {
                let s = text(value, "a geometric value as PostgreSQL prints it")?;
                Value::String(g.canonical(s)?)
            }
            Conversion::Range(subtype) => {
                let s = text(value, "a range string such as \"[1,5)\"")?;
                Value::String(range::accept(*subtype, s)?)
            }
            Conversion::Multirange(subtype) => {
                let s = text(value, "a multirange string such as \"{[1,3),[5,7)}\"")?;
                Value::String(multirange::accept(*subtype, s)?)
            }
            Conversion::Tsvector => {
                let s = text(value, "a tsvector string such as \"'fat':2 'rat':3\"")?;
                Value::String(tsvector::canonical_tsvector(s)?)
            }
            Conversion::Tsquery => {
                let s = text(value, "a tsquery string such as \"'fat' & 'rat'\"")?;
                Value::String(tsquery::canonical_tsquery(s)?)
            }
            Conversion::Hstore => Value::Object(hstore::accept(value)?),
            Conversion::Json => {
                return Ok((value.clone(), Some(value.to_string())));
            }
            Conversion::Jsonb => {
                let canonical = jsonb_numbers(value)?;
                let text = canonical.to_string();
                return Ok((canonical, Some(text)));
            }
            Conversion::TextArray => {
                let dims = dims::dimensions(value, false)?;
                for item in dims::leaves(value, &dims) {
                    match item {
                        Value::Null => {}
                        Value::String(s) if !s.contains('\0') => {}
                        Value::String(_) => {
                            return Err("text cannot contain the NUL character (\\u0000)".into())
                        }
                        other => return Err(expected("an array of strings", other)),
                    }
                }
                value.clone()
            }
            Conversion::Int2Array | Conversion::Int4Array | Conversion::Int8Array => {
                let (low, high, name) = match self {
                    Conversion::Int2Array => (i16::MIN.into(), i16::MAX.into(), "smallint"),
                    Conversion::Int4Array => (i32::MIN.into(), i32::MAX.into(), "integer"),
                    _ => (i64::MIN, i64::MAX, "bigint"),
                };
                let dims = dims::dimensions(value, false)?;
                let items = dims::leaves(value, &dims);
                let mut out = Vec::with_capacity(items.len());
                for (i, item) in items.into_iter().enumerate() {
                    out.push(if item.is_null() {
                        Value::Null
                    } else {
                        integer(item, low, high, name)
                            .map_err(|e| format!("{}: {e}", dims::position(&dims, i)))?
                    });
                }
                dims::nest(&dims, out)
            }
        };
        let param = self.param(&canonical);
        Ok((canonical, Some(param)))
    }

    /// [`Conversion::accept`] of a [`Conversion::ArrayOf`]: each element
    /// by its own conversion, the literal from the elements' texts.
    fn accept_elements(element: Element, value: &Value) -> Result<(Value, Option<String>), String> {
        let scalar = element.scalar();
        // A `json` or `jsonb` element is any JSON value, an array too;
        // otherwise an array in an array is a dimension.
        let dims = dims::dimensions(value, element.is_json())?;
        element.flat_only(&dims)?;
        let items = dims::leaves(value, &dims);
        let mut canonical = Vec::with_capacity(items.len());
        let mut texts = Vec::with_capacity(items.len());
        for (i, item) in items.into_iter().enumerate() {
            let (value, text) = scalar
                .accept(item)
                .map_err(|e| format!("{}: {e}", dims::position(&dims, i)))?;
            canonical.push(value);
            texts.push(text.map_or(Value::Null, Value::String));
        }
        Ok((
            dims::nest(&dims, canonical),
            Some(dims::literal(&dims, &texts, element.delimiter())),
        ))
    }

    /// The text PostgreSQL casts into the column, from a canonical value.
    fn param(&self, canonical: &Value) -> String {
        match (self, canonical) {
            (
                Conversion::Date | Conversion::Timestamp | Conversion::Timestamptz,
                Value::String(s),
            ) => time::postgres_text(s),
            (Conversion::Range(subtype), Value::String(s)) => range::param(*subtype, s),
            (Conversion::Multirange(subtype), Value::String(s)) => multirange::param(*subtype, s),
            (Conversion::Hstore, Value::Object(map)) => hstore::text(map),
            (_, Value::String(s)) => s.clone(),
            (
                Conversion::TextArray
                | Conversion::Int2Array
                | Conversion::Int4Array
                | Conversion::Int8Array,
                Value::Array(_),
            ) => {
                // Canonical, so rectangular.
                let dims = dims::dimensions(canonical, false).unwrap_or_default();
                dims::literal(&dims, dims::leaves(canonical, &dims), ',')
            }
            (_, other) => other.to_string(),
        }
    }
}

fn integer(value: &Value, low: i64, high: i64, name: &str) -> Result<Value, String> {
    let n = value
        .as_i64()
        .ok_or_else(|| expected(&format!("an integer ({name})"), value))?;
    if n < low || n > high {
        return Err(format!("{n} is out of range for {name} ({low} to {high})"));
    }
    Ok(Value::from(n))
}

fn float_input(value: &Value) -> Result<f64, String> {
    match value {
        Value::Number(n) => n.as_f64().ok_or_else(|| expected("a number", value)),
        Value::String(s) => match s.as_str() {
            "NaN" => Ok(f64::NAN),
            "Infinity" => Ok(f64::INFINITY),
            "-Infinity" => Ok(f64::NEG_INFINITY),
            _ => Err(expected(
                "a number, or \"NaN\", \"Infinity\", \"-Infinity\"",
                value,
            )),
        },
        _ => Err(expected("a number", value)),
    }
}

/// `stored` if it is the number `written` means, to the last digit (`1.50`
/// is `1.5`); else the refusal that names what the value would become.
fn exactly(written: &Value, stored: Value, kind: &str) -> Result<Value, String> {
    if let (Value::Number(w), Value::Number(s)) = (written, &stored) {
        let same = matches!(
            (canonical_decimal(w.as_str()), canonical_decimal(s.as_str())),
            (Ok(a), Ok(b)) if a == b
        );
        if !same {
            return Err(format!(
                "{w} is not exactly representable as {kind} (it would be stored as {s})"
            ));
        }
    }
    Ok(stored)
}

/// A JSON value with every number in the text `numeric` gives it, which
/// is what a `jsonb` column reads back: the value written and the value
/// read are then one value, digit for digit.
fn jsonb_numbers(value: &Value) -> Result<Value, String> {
    Ok(match value {
        Value::Number(n) => {
            let text = schemaless::decimal::numeric_text(n.as_str())?;
            Value::Number(
                schemaless::codec::pack::exact_number(&text)
                    .ok_or_else(|| format!("{n} cannot be kept as a JSON number"))?,
            )
        }
        Value::Array(items) => {
            Value::Array(items.iter().map(jsonb_numbers).collect::<Result<_, _>>()?)
        }
        Value::Object(map) => Value::Object(
            map.iter()
                .map(|(k, v)| Ok((k.clone(), jsonb_numbers(v)?)))
                .collect::<Result<_, String>>()?,
        ),
        other => other.clone(),
    })
}

/// `value` as a string, or the refusal saying what was `expected`.
fn text<'a>(value: &'a Value, what: &str) -> Result<&'a str, String> {
    value.as_str().ok_or_else(|| expected(what, value))
}
