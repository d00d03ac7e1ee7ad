//! One conversion per SQL type, both ways, so that every path agrees on
//! what a value means: a body read from a row, a body scanned for the
//! backfill and a body written by an app all pass through the same
//! [`Conversion::render`] or [`Conversion::accept`] and come out in the same
//! canonical form.
//!
//! | SQL type | JSON |
//! |---|---|
//! | `smallint`, `integer`, `bigint` | number (integer) |
//! | `numeric(p,s)` | string, exact: no exponent, no trailing fraction zeros (`"12.5"`, `"-0.001"`, `"NaN"`, `"Infinity"`); the column's scale prints it back as `12.50` |
//! | `numeric` (unconstrained) | string, exact, with the scale it was written with, as PostgreSQL prints it: `"12.50"` stays `"12.50"`, `"1.5e-3"` is `"0.0015"`, `"1e5"` is `"100000"` (the column keeps each value's own scale, so its text is part of the value) |
//! | `money` | string, the amount as a `numeric` is written (`"12.5"`, `"-0.07"`): PostgreSQL's text (`$12.50`) follows `lc_monetary`, the amount does not. At most two fraction digits (a third PostgreSQL would round), within the type's range; the layout refuses a server whose `lc_monetary` keeps another number of digits or another decimal point ([`crate::layout`]) |
//! | `real`, `double precision` | number, the shortest text of the float (`-0.0` kept); `"NaN"`, `"Infinity"`, `"-Infinity"` as strings. A number written whose value the type cannot hold exactly (`0.30000000000000001` is `0.3`, but `12.345678901234567890123` is not a double) is refused, naming the value it would become |
//! | `text`, `varchar`, `citext` | string, as written (a `citext`'s case kept) |
//! | `character(n)` | string without the trailing spaces the type pads with (PostgreSQL ignores them: `'ab'` and `'ab '` are one `character(3)`) |
//! | an enum type | string, one of the type's labels (the field checks which, [`crate::layout::Field::accept`]) |
//! | `boolean` | `true` / `false` |
//! | `uuid` | string, lowercase with hyphens |
//! | `timestamptz` | string, UTC, microseconds: `"2015-03-08T07:30:00.000000Z"` |
//! | `timestamp` | the same without `Z` |
//! | `date` | `"2015-03-08"` |
//! | `time` | `"07:30:00"`, `"07:30:05.25"`: PostgreSQL's text, the fraction's trailing zeros dropped ([`crate::duration`]) |
//! | `timetz` | `"07:30:00+01"`, `"07:30:05.25-03:30"`: PostgreSQL's text, the offset east of UTC as it prints it ([`crate::zoned`]) |
//! | `interval` | ISO 8601 as PostgreSQL prints it under `IntervalStyle = iso_8601`: `"P1Y2M3DT4H5M6.5S"`; months, days and time kept apart (`P1D` is not `PT24H`) |
//! | `bytea` | `"\\xdeadbeef"`: `\x` and lowercase hex |
//! | `inet`, `cidr` | PostgreSQL's text: `"10.1.2.3/8"`, `"2001:db8::1"`, a `cidr` with its mask always ([`crate::network`]) |
//! | `macaddr`, `macaddr8` | lowercase hex pairs: `"08:00:2b:01:02:03"` |
//! | `point`, `line`, `lseg`, `box`, `path`, `polygon`, `circle` | PostgreSQL's text, `"(1.5,-2)"`, `"(3,3),(1,1)"`, each coordinate a double printed as PostgreSQL prints it ([`crate::geometry`]) |
//! | `bit(n)`, `bit varying(n)` | string, the bits: `"0101"` ([`crate::bits`]); a `bit(n)` exactly `n` of them, a `bit varying(n)` at most `n` |
//! | `int4range`, `int8range`, `numrange`, `daterange`, `tsrange`, `tstzrange` | string, PostgreSQL's range syntax with each bound in its subtype's form: `"[1,5)"` (a discrete range always `[…)`), `"(1.5,2]"`, `"[2015-03-08T07:30:00.000000Z,)"`, `"empty"` ([`crate::range`]) |
//! | `tsvector` | string, PostgreSQL's text: lexemes sorted, each quoted and once, positions ascending with their weights, `"'a':1A,3 'fat' 'rat':2B"` ([`crate::tsvector`]) |
//! | `tsquery` | string, PostgreSQL's text: operands quoted with their modifiers, operators between spaces, parentheses only where priorities need them, `"'fat' & ( 'rat' | 'cat' )"` ([`crate::tsquery`]) |
//! | `hstore` | an object of strings and nulls, `{"color": "red", "size": null}` ([`crate::hstore`]) |
//! | `xml` | string, the text PostgreSQL stores (its `::text`: an XML declaration kept as written, where its output rewrites it); well-formed is PostgreSQL's to say, where the value is cast into the column |
//! | a composite type | string, PostgreSQL's text of the value under the layout's settings, whatever the session's ([`COMPOSITE_TEXT`]); a value of the type is PostgreSQL's to say |
//! | `jsonb` | the JSON value, numbers exact: written in the text `numeric` gives them (`1e5` is `100000`, `1.50` stays `1.50`), as `jsonb` reads them back |
//! | `json` | the JSON value, numbers exact and as written (`json` keeps its text) |
//! | `text[]`, `varchar[]` | array of strings (null elements allowed) |
//! | `smallint[]`, `integer[]`, `bigint[]` | array of integers (null elements allowed) |
//! | `numeric[]`, `real[]`, `double precision[]`, `boolean[]`, `uuid[]`, `timestamptz[]`, `timestamp[]`, `date[]`, `time[]`, `timetz[]`, `interval[]`, `bytea[]`, `inet[]`, `cidr[]`, `macaddr[]`, `character(n)[]`, an enum's array | array of the element type's JSON form (null elements allowed) |
//! | `money[]`, `bit(n)[]`, `bit varying(n)[]`, `tsvector[]`, `tsquery[]`, `hstore[]`, `xml[]`, `point[]` … `circle[]`, `int4range[]` … `tstzrange[]` | array of the element type's JSON form (a `box[]`'s literal separates its elements with `;`, as PostgreSQL's does) |
//! | `jsonb[]`, `json[]` | array of JSON values, each as a `jsonb` (or `json`) field's (an element that is JSON `null` is refused unless `layout.json_null = "sql_null"` carries it as an SQL NULL element, as a field's) |
//!
//! Every array may have up to six dimensions: nested JSON arrays,
//! rectangular, subscripted from 1 ([`dims`]); a `json[]`'s and a
//! `jsonb[]`'s are flat, their elements being any JSON value.
//!
//! A domain converts as its base type: a domain over `numeric(10,2)` is a
//! `numeric`, cast into the domain itself on write, so PostgreSQL checks
//! the domain's constraints there. A domain over a domain converts as the
//! base type at the end of the chain (with the innermost domain's
//! modifier, as PostgreSQL's `getBaseTypeAndTypmod`), and an array of a
//! domain as an array of that base type.
//!
//! **NULL**: an SQL NULL is JSON `null`, and every field of a column is in
//! every body read from the legacy tables. On write, a field left out of the
//! body is written as NULL, so `{}` and `{"fare": null}` are the same cell
//! once canonical. A `json`/`jsonb` value that is itself JSON `null`
//! renders as SQL NULL does (there is one `null`): in a column that
//! allows SQL NULL, [`crate::layout::Field::render`] refuses it unless the
//! layout carries it as SQL NULL (`layout.json_null`); in a `NOT NULL`
//! column it can only be the JSON value, and is written so
//! ([`crate::layout::Field::null_is_json`]).
//!
//! Values are read as text (`col::text`, timestamps as microseconds since 1970,
//! arrays through `array_to_json`), which PostgreSQL produces the same way
//! whatever the session's time zone or date style, and written as text
//! cast to the column's exact type.
//!
//! Its rooms: `read` (the SQL reading a column, and the JSON of what it
//! reads), `accept` (a value written: its check, canonical form and the
//! text cast into the column), `dims` (an array's dimensions) and `fits`
//! (what a type's modifier lets a value hold).

use serde_json::{Number, Value};

use crate::bits;
use crate::duration::{self, Interval};
use crate::geometry::Geometry;
use crate::hstore;
use crate::multirange;
use crate::network;
use crate::range::{self, Subtype};
use crate::time;
use crate::tsquery;
use crate::tsvector;
use crate::zoned;
pub use schemaless::decimal::canonical_decimal;

/// How one SQL type becomes JSON and back.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Conversion {
    /// `smallint`
    Int2,
    /// `integer`
    Int4,
    /// `bigint`
    Int8,
    /// `numeric(p,s)`, exact, as a string: the value without trailing
    /// fraction zeros (`"12.5"`), which the column's fixed scale prints
    /// back as PostgreSQL's text (`12.50`).
    Numeric,
    /// An unconstrained `numeric`, exact, as a string with the scale it was
    /// written with (`"12.50"` stays `"12.50"`): such a column keeps each
    /// value's own scale, and prints it.
    UnconstrainedNumeric,
    /// `money`: its amount, exact, as a `numeric` string.
    Money,
    /// `real`
    Float4,
    /// `double precision`
    Float8,
    /// `text`, `varchar`
    Text,
    /// `character(n)` (`bpchar`): text whose trailing spaces do not count.
    Char,
    /// An enum type: text, one of its labels.
    Enum,
    /// `boolean`
    Bool,
    /// `uuid`
    Uuid,
    /// `timestamp with time zone`
    Timestamptz,
    /// `timestamp without time zone`
    Timestamp,
    /// `date`
    Date,
    /// `time` (without time zone)
    Time,
    /// `time with time zone`: text, the time and its offset
    /// ([`crate::zoned`]).
    Timetz,
    /// `interval`: months, days and microseconds, kept apart.
    Interval,
    /// `bytea`, as `\x` and hex.
    Bytea,
    /// `inet`
    Inet,
    /// `cidr`
    Cidr,
    /// `macaddr`
    Macaddr,
    /// `macaddr8`
    Macaddr8,
    /// `point`, `line`, `lseg`, `box`, `path`, `polygon`, `circle`:
    /// PostgreSQL's text, its doubles as PostgreSQL prints them.
    Geometric(Geometry),
    /// `bit(n)`, `bit varying(n)`: the bits as `0` and `1`.
    Bit,
    /// A range type: PostgreSQL's range syntax, each bound in its
    /// subtype's form ([`crate::range`]).
    Range(Subtype),
    /// A multirange type: `{` ranges `}`, sorted and merged as PostgreSQL
    /// keeps them ([`crate::multirange`]).
    Multirange(Subtype),
    /// `tsvector`: PostgreSQL's text of it ([`crate::tsvector`]).
    Tsvector,
    /// `tsquery`: PostgreSQL's text of it ([`crate::tsquery`]).
    Tsquery,
    /// `hstore`: an object of strings and nulls ([`crate::hstore`]).
    Hstore,
    /// `xml`: the text PostgreSQL stores, as it stores it (its `::text`,
    /// declaration included; well-formedness is PostgreSQL's to judge).
    Xml,
    /// A composite type: PostgreSQL's text of the row value, as
    /// `record_out` prints it under the layout's session settings (UTC,
    /// ISO dates, shortest exact doubles), which `record_in` reads back
    /// to the same value; whether a string is one is PostgreSQL's to say
    /// where the value is cast into the column.
    Record,
    /// `json`: kept as text by PostgreSQL.
    Json,
    /// `jsonb`: numbers kept as `numeric`.
    Jsonb,
    /// `text[]`, `varchar[]`
    TextArray,
    /// `smallint[]`
    Int2Array,
    /// `integer[]`
    Int4Array,
    /// `bigint[]`
    Int8Array,
    /// A flat array of another scalar type: `numeric[]`, `uuid[]`,
    /// `timestamptz[]`, an enum's array...; each element converts as its
    /// type does.
    ArrayOf(Element),
}

/// The element types of [`Conversion::ArrayOf`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Element {
    Numeric,
    UnconstrainedNumeric,
    Float4,
    Float8,
    Bool,
    Uuid,
    Timestamptz,
    Timestamp,
    Date,
    Time,
    Timetz,
    Interval,
    Bytea,
    Inet,
    Cidr,
    Macaddr,
    Macaddr8,
    Char,
    Enum,
    Money,
    Bit,
    Geometric(Geometry),
    Range(Subtype),
    Multirange(Subtype),
    Tsvector,
    Tsquery,
    Hstore,
    Xml,
    Record,
    /// A `json[]`'s elements: any JSON value each, arrays included.
    Json,
    /// A `jsonb[]`'s elements: any JSON value each, arrays included.
    Jsonb,
}

impl Element {
    /// The conversion of one element.
    pub fn scalar(self) -> Conversion {
        match self {
            Element::Numeric => Conversion::Numeric,
            Element::UnconstrainedNumeric => Conversion::UnconstrainedNumeric,
            Element::Float4 => Conversion::Float4,
            Element::Float8 => Conversion::Float8,
            Element::Bool => Conversion::Bool,
            Element::Uuid => Conversion::Uuid,
            Element::Timestamptz => Conversion::Timestamptz,
            Element::Timestamp => Conversion::Timestamp,
            Element::Date => Conversion::Date,
            Element::Time => Conversion::Time,
            Element::Timetz => Conversion::Timetz,
            Element::Interval => Conversion::Interval,
            Element::Bytea => Conversion::Bytea,
            Element::Inet => Conversion::Inet,
            Element::Cidr => Conversion::Cidr,
            Element::Macaddr => Conversion::Macaddr,
            Element::Macaddr8 => Conversion::Macaddr8,
            Element::Char => Conversion::Char,
            Element::Enum => Conversion::Enum,
            Element::Money => Conversion::Money,
            Element::Bit => Conversion::Bit,
            Element::Geometric(g) => Conversion::Geometric(g),
            Element::Range(subtype) => Conversion::Range(subtype),
            Element::Multirange(subtype) => Conversion::Multirange(subtype),
            Element::Tsvector => Conversion::Tsvector,
            Element::Tsquery => Conversion::Tsquery,
            Element::Hstore => Conversion::Hstore,
            Element::Xml => Conversion::Xml,
            Element::Record => Conversion::Record,
            Element::Json => Conversion::Json,
            Element::Jsonb => Conversion::Jsonb,
        }
    }

    /// Whether an element is any JSON value, arrays included (an array
    /// element of another type would be a dimension).
    fn is_json(self) -> bool {
        matches!(self, Element::Json | Element::Jsonb)
    }

    /// Refuses an array of several dimensions of an element kept flat: a
    /// `json`'s or `jsonb`'s (its elements' own arrays would read as
    /// dimensions) or a composite type's (read by subscript).
    fn flat_only(self, dims: &[usize]) -> Result<(), String> {
        let what = match self {
            Element::Json | Element::Jsonb => {
                "JSON values (whose own arrays would read as dimensions)"
            }
            Element::Record => "a composite type",
            _ => return Ok(()),
        };
        if dims.len() > 1 {
            return Err(format!(
                "an array of {} dimensions of {what}: a cell keeps those flat",
                dims.len()
            ));
        }
        Ok(())
    }

    /// The character between elements in the type's array literal: a
    /// `box` has commas of its own, so its arrays use `;` (`typdelim`).
    pub fn delimiter(self) -> char {
        match self {
            Element::Geometric(Geometry::Box) => ';',
            _ => ',',
        }
    }
}

/// The function that reads a composite value ([`Conversion::Record`]):
/// its text as `record_out` prints it under the layout's session settings,
/// whatever the session calling it says. A composite's text prints each
/// field by the field type's output, so a `timestamptz` field follows
/// `TimeZone`, an `interval` `IntervalStyle`, a `date` `DateStyle`; the
/// proxy evaluates an app's values, and replays its reads, in the app's
/// own session. A function's `SET` clauses hold while it runs, and its
/// argument is already a value (read in the caller's settings), so the
/// text is the one form whatever the caller's. The layout creates it
/// where a layout field is composite, in schema `mezzanine_public`, which
/// every role may use (the proxy evaluates values as the app's role).
pub const COMPOSITE_TEXT: &str =
    "/* mezzanine */ CREATE OR REPLACE FUNCTION mezzanine_public.composite_text(anyelement) RETURNS text
    LANGUAGE sql STABLE PARALLEL SAFE
    SET \"TimeZone\" = 'UTC' SET \"DateStyle\" = 'ISO, YMD' SET \"IntervalStyle\" = 'iso_8601'
    SET extra_float_digits = 1 SET bytea_output = 'hex'
    AS $mezzanine$ SELECT $1::pg_catalog.text $mezzanine$";

/// The SQL types the layout can map, as `pg_type.typname`, for messages.
pub const SUPPORTED: &str = "smallint, integer, bigint, numeric, money, real, double precision, text, varchar, citext, character(n), boolean, uuid, timestamptz, timestamp, date, time, timetz, interval, bytea, inet, cidr, macaddr, macaddr8, point, line, lseg, box, path, polygon, circle, bit, varbit, int4range, int8range, numrange, daterange, tsrange, tstzrange, their multiranges, tsvector, tsquery, hstore, json, jsonb, text[], varchar[], citext[], smallint[], integer[], bigint[], numeric[], real[], double precision[], boolean[], uuid[], timestamptz[], timestamp[], date[], time[], timetz[], interval[], bytea[], inet[], cidr[], macaddr[], macaddr8[], character(n)[], money[], bit[], varbit[], the geometric types' and the range types' arrays, tsvector[], tsquery[], hstore[], xml, xml[], json[], jsonb[], enum types and their arrays, composite types and their arrays, and domains over any of these (over other domains too) and their arrays";

impl Conversion {
    /// The conversion of a column of this type whose modifier is `typmod`
    /// (`atttypmod`, -1 for none; an array's is its elements'): a
    /// `numeric` without one keeps each value's scale
    /// ([`Conversion::UnconstrainedNumeric`]).
    pub fn with_typmod(self, typmod: i32) -> Conversion {
        match self {
            Conversion::Numeric if typmod < 0 => Conversion::UnconstrainedNumeric,
            Conversion::ArrayOf(Element::Numeric) if typmod < 0 => {
                Conversion::ArrayOf(Element::UnconstrainedNumeric)
            }
            other => other,
        }
    }

    /// The conversion for a column of type `typname` (`pg_type.typname`:
    /// `int4`, `_text`, …), if there is one. An enum type has no fixed
    /// name: the layout gives its columns [`Conversion::Enum`] by the
    /// catalog's `typtype`, and a composite type's
    /// [`Conversion::Record`].
    pub fn for_type(typname: &str) -> Option<Conversion> {
        Some(match typname {
            "int2" => Conversion::Int2,
            "int4" => Conversion::Int4,
            "int8" => Conversion::Int8,
            "numeric" => Conversion::Numeric,
            "money" => Conversion::Money,
            "float4" => Conversion::Float4,
            "float8" => Conversion::Float8,
            // `citext` (the extension's) is text whose comparisons
            // ignore case: its value is the text as written.
            "text" | "varchar" | "citext" => Conversion::Text,
            "bpchar" => Conversion::Char,
            "bool" => Conversion::Bool,
            "uuid" => Conversion::Uuid,
            "timestamptz" => Conversion::Timestamptz,
            "timestamp" => Conversion::Timestamp,
            "date" => Conversion::Date,
            "time" => Conversion::Time,
            "timetz" => Conversion::Timetz,
            "interval" => Conversion::Interval,
            "bytea" => Conversion::Bytea,
            "inet" => Conversion::Inet,
            "cidr" => Conversion::Cidr,
            "macaddr" => Conversion::Macaddr,
            "macaddr8" => Conversion::Macaddr8,
            "bit" | "varbit" => Conversion::Bit,
            "json" => Conversion::Json,
            "jsonb" => Conversion::Jsonb,
            "tsvector" => Conversion::Tsvector,
            "tsquery" => Conversion::Tsquery,
            "hstore" => Conversion::Hstore,
            "xml" => Conversion::Xml,
            "_text" | "_varchar" | "_citext" => Conversion::TextArray,
            "_int2" => Conversion::Int2Array,
            "_int4" => Conversion::Int4Array,
            "_int8" => Conversion::Int8Array,
            "_numeric" => Conversion::ArrayOf(Element::Numeric),
            "_float4" => Conversion::ArrayOf(Element::Float4),
            "_float8" => Conversion::ArrayOf(Element::Float8),
            "_bool" => Conversion::ArrayOf(Element::Bool),
            "_uuid" => Conversion::ArrayOf(Element::Uuid),
            "_timestamptz" => Conversion::ArrayOf(Element::Timestamptz),
            "_timestamp" => Conversion::ArrayOf(Element::Timestamp),
            "_date" => Conversion::ArrayOf(Element::Date),
            "_time" => Conversion::ArrayOf(Element::Time),
            "_timetz" => Conversion::ArrayOf(Element::Timetz),
            "_interval" => Conversion::ArrayOf(Element::Interval),
            "_bytea" => Conversion::ArrayOf(Element::Bytea),
            "_bpchar" => Conversion::ArrayOf(Element::Char),
            "_jsonb" => Conversion::ArrayOf(Element::Jsonb),
            "_inet" => Conversion::ArrayOf(Element::Inet),
            "_cidr" => Conversion::ArrayOf(Element::Cidr),
            "_macaddr" => Conversion::ArrayOf(Element::Macaddr),
            "_macaddr8" => Conversion::ArrayOf(Element::Macaddr8),
            "_money" => Conversion::ArrayOf(Element::Money),
            "_bit" | "_varbit" => Conversion::ArrayOf(Element::Bit),
            "_json" => Conversion::ArrayOf(Element::Json),
            "_tsvector" => Conversion::ArrayOf(Element::Tsvector),
            "_tsquery" => Conversion::ArrayOf(Element::Tsquery),
            "_hstore" => Conversion::ArrayOf(Element::Hstore),
            "_xml" => Conversion::ArrayOf(Element::Xml),
            other => match other.strip_prefix('_') {
                Some(element) => Conversion::ArrayOf(
                    match (Subtype::of_type(element), multirange::subtype_of(element)) {
                        (Some(subtype), _) => Element::Range(subtype),
                        (_, Some(subtype)) => Element::Multirange(subtype),
                        _ => Element::Geometric(Geometry::of_type(element)?),
                    },
                ),
                None => match (Subtype::of_type(other), multirange::subtype_of(other)) {
                    (Some(subtype), _) => Conversion::Range(subtype),
                    (_, Some(subtype)) => Conversion::Multirange(subtype),
                    _ => Conversion::Geometric(Geometry::of_type(other)?),
                },
            },
        })
    }

    /// Whether a value is an array whose arrays are dimensions
    /// ([`dims`]): a `json[]`'s elements, and a `json` value, may be
    /// arrays themselves.
    pub fn dimensional(&self) -> bool {
        match self {
            Conversion::TextArray
            | Conversion::Int2Array
            | Conversion::Int4Array
            | Conversion::Int8Array => true,
            Conversion::ArrayOf(element) => !element.is_json(),
            _ => false,
        }
    }
}

/// `text` quoted for a message, cut to its first 60 characters: a
/// refusal names the value without echoing a megabyte body back.
pub(crate) fn shown(text: &str) -> String {
    match text.char_indices().nth(60) {
        Some((at, _)) => format!("{:?}…", &text[..at]),
        None => format!("{text:?}"),
    }
}

fn expected(what: &str, got: &Value) -> String {
    format!(
        "expected {what}, got {} ({got})",
        schemaless::cell::json_kind(got)
    )
}

fn array(value: &Value) -> Result<&Vec<Value>, String> {
    value.as_array().ok_or_else(|| expected("an array", value))
}

/// The f64 nearest to an f32 that prints like the f32 (1.1f32 becomes 1.1,
/// not 1.100000023841858), so a real reads back as the number written.
fn widen(x: f32) -> f64 {
    x.to_string().parse().expect("a printed f32 parses as f64")
}

/// A float as JSON: a number when finite (always the float kind, so `1`
/// and `1.0` are one value; `-0.0` stays negative, as PostgreSQL keeps it),
/// else its name as a string.
fn float_value(x: f64) -> Value {
    if x.is_nan() {
        Value::String("NaN".into())
    } else if x == f64::INFINITY {
        Value::String("Infinity".into())
    } else if x == f64::NEG_INFINITY {
        Value::String("-Infinity".into())
    } else {
        Value::Number(Number::from_f64(x).expect("a finite float"))
    }
}

/// `s` in double quotes, `"` and `\` escaped with `\`: an array
/// element's form, and an `hstore` key's or value's.
pub(crate) fn push_quoted(out: &mut String, s: &str) {
    out.push('"');
    for c in s.chars() {
        if c == '"' || c == '\\' {
            out.push('\\');
        }
        out.push(c);
    }
    out.push('"');
}

mod accept;
pub mod dims;
mod fits;
mod read;
pub use fits::{money_fits, numeric_fits, timestamp_fits, MONEY_SCALE};

#[cfg(test)]
mod tests;
