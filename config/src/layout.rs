//! `[legacy]`, `[layout]` and `[[index]]`: where the legacy PostgreSQL data
//! lives and how its tables map to Schemaless columns.
//!
//! Only names are declared here. SQL types come from the live schema when
//! the legacy model connects, so the file cannot disagree with the database
//! about them; what can be checked without a database (identifiers, kinds,
//! duplicate names, index fields) is checked by `Config::parse`.

use std::collections::BTreeMap;
use std::fmt;

use serde::de::{self, MapAccess, SeqAccess, Visitor};
use serde::{Deserialize, Deserializer};

/// `[legacy]`: the PostgreSQL database the data comes from. The toolkit's
/// own tables (mode, outbox, progress) live there too, in a schema of their
/// own named `mezzanine`.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Legacy {
    /// `legacy.url`: `postgres://USER[:PASS]@HOST:PORT/DATABASE`.
    pub url: String,
    /// `legacy.max_connections`: size of the connection pool to
    /// PostgreSQL. 1–1000. Default 16.
    #[serde(default = "default_max_connections")]
    pub max_connections: u32,
    /// `legacy.statement_timeout_ms`: PostgreSQL's `statement_timeout` for
    /// the toolkit's sessions, so a stuck statement fails instead of hanging
    /// its caller. 1–3600000. Default 10000.
    #[serde(default = "default_statement_timeout_ms")]
    pub statement_timeout_ms: u64,
    /// `legacy.mode_poll_ms`: how often every facade re-reads the mode, in
    /// case a LISTEN/NOTIFY message was missed. 10–600000. Default 1000.
    #[serde(default = "default_mode_poll_ms")]
    pub mode_poll_ms: u64,
}

fn default_max_connections() -> u32 {
    16
}

fn default_statement_timeout_ms() -> u64 {
    10_000
}

fn default_mode_poll_ms() -> u64 {
    1000
}

/// `[layout]`: the parent table and the Schemaless columns made from it
/// and from its child tables.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Layout {
    /// `layout.schema`: the PostgreSQL schema of the app's tables. Default
    /// `public`.
    #[serde(default = "default_schema")]
    pub schema: String,
    /// `layout.table`: the parent table; one row is one entity (a trip).
    pub table: String,
    /// `layout.id`: the parent's integer primary key (child tables refer to
    /// it).
    pub id: String,
    /// `layout.uuid`: the parent's UUID column, the row key. Added and
    /// filled online by `mezzanine legacy add-uuid` where it is missing.
    pub uuid: String,
    /// `[[layout.column]]`: the Schemaless columns.
    #[serde(rename = "column", default)]
    pub columns: Vec<LayoutColumn>,
    /// `layout.json_null`: what a `json`/`jsonb` value that is JSON
    /// `null` becomes in a column that allows SQL NULL. A cell has one
    /// `null`, which is SQL NULL there, so the two cannot both be kept:
    /// `refuse` (the default) reads such a row as unreadable, by name,
    /// and the proxy refuses writing one; `sql_null` carries it as SQL
    /// NULL, for an app that never tells the two apart.
    #[serde(default)]
    pub json_null: JsonNull,
}

/// `layout.json_null`: `refuse` or `sql_null`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum JsonNull {
    /// A JSON `null` in a nullable `json`/`jsonb` column cannot become a
    /// cell: its row is unreadable, with the reason.
    #[default]
    Refuse,
    /// It becomes SQL NULL (the one `null` a cell has).
    SqlNull,
}

fn default_schema() -> String {
    "public".to_string()
}

/// `[[layout.column]]`: one Schemaless column.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LayoutColumn {
    /// `layout.column[].name`: the Schemaless column name, 1–64 characters
    /// of `[A-Za-z0-9_]` (`BASE`, `NOTES`).
    pub name: String,
    /// `layout.column[].kind`: `row` (the parent row itself: one mutable
    /// cell, replaced when its version grows) or `child` (one cell per row
    /// of a child table).
    pub kind: ColumnKind,
    /// `layout.column[].table`: the child table (`child` only; a `row`
    /// column is always the parent table).
    pub table: Option<String>,
    /// `layout.column[].parent`: the child table's foreign key to
    /// `layout.id` (`child` only).
    pub parent: Option<String>,
    /// `layout.column[].ref_key`: the integer column giving the cell's ref
    /// key: a version for `row` (NULL means the row has no cell of this
    /// column), a sequence number for `child`.
    pub ref_key: String,
    /// `layout.column[].fields`: the body's fields. Either a list of names
    /// (JSON field = SQL column) or a table `{ json_field = "sql_column" }`.
    pub fields: Fields,
}

/// `row` or `child`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ColumnKind {
    /// The parent row itself: one mutable cell per entity.
    Row,
    /// One cell per row of a child table.
    Child,
}

/// JSON field name -> SQL column name, in JSON name order.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Fields(pub BTreeMap<String, String>);

impl<'de> Deserialize<'de> for Fields {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Fields, D::Error> {
        struct FieldsVisitor;

        impl<'de> Visitor<'de> for FieldsVisitor {
            type Value = Fields;

            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a list of field names, or a table of json_field = \"sql_column\"")
            }

            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Fields, A::Error> {
                let mut fields = BTreeMap::new();
                while let Some(name) = seq.next_element::<String>()? {
                    if fields.insert(name.clone(), name.clone()).is_some() {
                        return Err(de::Error::custom(format!("field {name:?} is listed twice")));
                    }
                }
                Ok(Fields(fields))
            }

            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Fields, A::Error> {
                let mut fields = BTreeMap::new();
                while let Some((json, sql)) = map.next_entry::<String, String>()? {
                    fields.insert(json, sql);
                }
                Ok(Fields(fields))
            }
        }

        deserializer.deserialize_any(FieldsVisitor)
    }
}

/// `[[index]]`: a secondary index over fields of one column, found by the
/// value of its shard field.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Index {
    /// `index[].name`: unique among indexes; 1–32 characters of
    /// `[a-z0-9_]`, starting with a letter.
    pub name: String,
    /// `index[].column`: the layout column whose cells are indexed.
    pub column: String,
    /// `index[].shard_field`: the body field whose value chooses the
    /// index shard; every query names one value of it.
    pub shard_field: String,
    /// `index[].fields`: the denormalized body fields an entry carries and
    /// queries may filter and order on.
    #[serde(default)]
    pub fields: Vec<String>,
    /// `index[].types`: how the Schemaless index stores and compares each
    /// field (shard field included): `string` (the default; byte order,
    /// which is time order for canonical timestamps), `int`, `float`,
    /// `decimal` (a number or numeric string, compared as a number) or
    /// `bool`. The legacy model takes its types from the live schema.
    #[serde(default)]
    pub types: BTreeMap<String, IndexFieldType>,
    /// `index[].unique`: at most one row per shard-field value. The index
    /// is maintained after the write, so a cell that would give a value a
    /// second row cannot be refused: its trigger parks it with the reason,
    /// and the value keeps its first row. Default false.
    #[serde(default)]
    pub unique: bool,
}

/// How an index stores and compares a field.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum IndexFieldType {
    /// A JSON string, compared byte by byte (at most 255 characters).
    #[default]
    String,
    /// A JSON integer (64-bit).
    Int,
    /// A JSON number (double).
    Float,
    /// A JSON number or numeric string, compared exactly as a number (up to
    /// 45 integer and 20 fraction digits).
    Decimal,
    /// `true` or `false`.
    Bool,
}

impl Index {
    /// The type of `field` (string unless declared).
    pub fn type_of(&self, field: &str) -> IndexFieldType {
        self.types.get(field).copied().unwrap_or_default()
    }
}

impl Layout {
    /// The column called `name`.
    pub fn column(&self, name: &str) -> Option<&LayoutColumn> {
        self.columns.iter().find(|c| c.name == name)
    }
}

/// A PostgreSQL identifier as the layout accepts it: 1–63 characters of
/// `[A-Za-z0-9_]`, not starting with a digit. Quoted in every statement, so
/// case is kept.
pub fn valid_sql_identifier(name: &str) -> bool {
    let mut chars = name.chars();
    matches!(chars.next(), Some(c) if c.is_ascii_alphabetic() || c == '_')
        && name.len() <= 63
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
}
