//! The layout resolved against the live schema: every table, column and
//! SQL type the config names, checked at connect, with the statements the
//! model runs prepared as text once.
//!
//! What is checked, each failure an error naming the thing:
//! - every table and column exists;
//! - the parent's id and every ref key and parent key are integers, the
//!   row key column is a `uuid` with a unique index;
//! - each child table has a unique index on exactly (parent key, ref key),
//!   which makes a child cell's address unique and its insert idempotent;
//! - every field's SQL type has a [`Conversion`].

use config::ColumnKind;
use schemaless::Column;
use sqlx::PgPool;

use crate::conversion::{self, Conversion};
use crate::error::Error;

mod catalog;
mod checks;
mod field;

use catalog::{composite_text, money_reads_back, table_info, TableInfo};
pub use checks::{Checks, Refusal, Unique};
pub use field::Field;

/// A quoted SQL identifier: `"trip_notes"`.
pub fn quote(name: &str) -> String {
    format!("\"{}\"", name.replace('"', "\"\""))
}

/// Where a layout column's cells live. A child carries its key to the
/// parent, so no code that joins a child to its parent can find it
/// missing.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Shape {
    /// The parent row itself: one cell per entity, its ref key the
    /// version column.
    Row,
    /// One cell per row of a child table.
    Child {
        /// The child's foreign key to the parent id, quoted.
        parent_sql: String,
    },
}

/// One Schemaless column of the layout.
#[derive(Clone, Debug)]
pub struct ColumnLayout {
    /// The Schemaless column.
    pub name: Column,
    /// Parent row or child table, with the child's key to its parent.
    pub shape: Shape,
    /// The table the cells come from, as in the config.
    pub table: String,
    /// Quoted and schema-qualified.
    pub(crate) table_sql: String,
    /// The ref key column, quoted.
    pub(crate) ref_key_sql: String,
    /// The body's fields, in JSON name order.
    pub fields: Vec<Field>,
    /// What PostgreSQL judges of a cell beyond the fields' own checks
    /// (`None`: nothing), asked before a write that reaches PostgreSQL
    /// only later ([`checks`]).
    pub checks: Option<Checks>,
}

impl ColumnLayout {
    /// The field called `json`.
    pub fn field(&self, json: &str) -> Option<&Field> {
        self.fields.iter().find(|f| f.json == json)
    }

    /// The read expressions of every field, on table alias `alias`.
    pub(crate) fn read_exprs(&self, alias: &str) -> String {
        self.fields
            .iter()
            .map(|f| {
                f.conversion
                    .read_expr(&format!("{alias}.{}", quote(&f.sql)))
            })
            .collect::<Vec<_>>()
            .join(", ")
    }

    /// The table, quoted and schema-qualified.
    pub fn table_sql(&self) -> &str {
        &self.table_sql
    }

    /// Parent row or child table, as the config names it.
    pub fn kind(&self) -> ColumnKind {
        match self.shape {
            Shape::Row => ColumnKind::Row,
            Shape::Child { .. } => ColumnKind::Child,
        }
    }

    /// The ref key column, quoted.
    pub fn ref_key_sql(&self) -> &str {
        &self.ref_key_sql
    }

    /// The names of the fields, for messages.
    pub(crate) fn field_names(&self) -> String {
        self.fields
            .iter()
            .map(|f| f.json.as_str())
            .collect::<Vec<_>>()
            .join(", ")
    }
}

/// One `[[index]]`, resolved.
#[derive(Clone, Debug)]
pub struct IndexLayout {
    /// Its name.
    pub name: String,
    /// Which layout column it indexes (position in [`Layout::columns`]).
    pub column: usize,
    /// The shard field.
    pub shard_field: Field,
    /// The denormalized fields.
    pub fields: Vec<Field>,
}

impl IndexLayout {
    /// The shard field or a denormalized field called `json`.
    pub fn field(&self, json: &str) -> Option<&Field> {
        std::iter::once(&self.shard_field)
            .chain(&self.fields)
            .find(|f| f.json == json)
    }
}

/// The whole layout, checked against the database.
#[derive(Clone, Debug)]
pub struct Layout {
    /// The PostgreSQL schema of the app's tables.
    pub schema: String,
    /// The parent table, as in the config.
    pub table: String,
    /// Quoted and schema-qualified.
    pub(crate) table_sql: String,
    /// The parent id column, quoted.
    pub(crate) id_sql: String,
    /// The row key column, quoted.
    pub(crate) uuid_sql: String,
    /// The columns, in config order.
    pub columns: Vec<ColumnLayout>,
    /// The indexes.
    pub indexes: Vec<IndexLayout>,
}

impl Layout {
    /// The child columns, each with its key to the parent id (quoted).
    pub fn children(&self) -> impl Iterator<Item = (&ColumnLayout, &str)> {
        self.columns.iter().filter_map(|c| match &c.shape {
            Shape::Child { parent_sql } => Some((c, parent_sql.as_str())),
            Shape::Row => None,
        })
    }

    /// Resolves the config's layout and indexes against the live schema.
    pub async fn resolve(
        layout: &config::Layout,
        indexes: &[config::Index],
        pool: &PgPool,
    ) -> Result<Layout, Error> {
        let schema = &layout.schema;
        let parent_name = format!("{schema}.{}", layout.table);
        let parent = table_info(pool, schema, &layout.table).await?;
        parent.integer(&parent_name, "layout.id", &layout.id)?;
        if !parent.has_unique(&[&layout.id]) {
            return Err(Error::Layout(format!(
                "layout.id: {parent_name}.{} is not unique (it needs a primary key or unique index)",
                layout.id
            )));
        }
        let uuid = parent.columns.get(&layout.uuid).ok_or_else(|| {
            Error::Layout(format!(
                "layout.uuid: table {parent_name} has no column {:?}; run `mezzanine legacy add-uuid` to add and fill it",
                layout.uuid
            ))
        })?;
        if uuid.typname != "uuid" {
            return Err(Error::Layout(format!(
                "layout.uuid: {parent_name}.{} is {}, but must be uuid",
                layout.uuid, uuid.full
            )));
        }
        if !parent.has_unique(&[&layout.uuid]) {
            return Err(Error::Layout(format!(
                "layout.uuid: {parent_name}.{} has no valid unique index yet; `mezzanine legacy add-uuid` builds it",
                layout.uuid
            )));
        }

        let mut columns = Vec::with_capacity(layout.columns.len());
        for spec in &layout.columns {
            let what = format!("layout column {}", spec.name);
            let shape = match (spec.kind, &spec.parent) {
                (ColumnKind::Row, _) => Shape::Row,
                (ColumnKind::Child, Some(parent)) => Shape::Child {
                    parent_sql: quote(parent),
                },
                (ColumnKind::Child, None) => {
                    return Err(Error::Layout(format!(
                        "{what}: a child column needs `parent`, its key to the parent id"
                    )))
                }
            };
            let (table, info) = match spec.kind {
                ColumnKind::Row => (layout.table.clone(), None),
                ColumnKind::Child => {
                    let table = spec.table.clone().expect("validated: a child has a table");
                    let info = table_info(pool, schema, &table).await?;
                    (table, Some(info))
                }
            };
            let info_ref = info.as_ref().unwrap_or(&parent);
            let table_name = format!("{schema}.{table}");
            info_ref.integer(&table_name, &format!("{what}, ref_key"), &spec.ref_key)?;
            if let Some(parent_key) = &spec.parent {
                info_ref.integer(&table_name, &format!("{what}, parent"), parent_key)?;
                if !info_ref.has_unique(&[parent_key, &spec.ref_key]) {
                    return Err(Error::Layout(format!(
                        "{what}: {table_name} needs a primary key or unique index on exactly ({parent_key}, {}), so that a child cell has one row",
                        spec.ref_key
                    )));
                }
            }
            let mut fields = Vec::with_capacity(spec.fields.0.len());
            for (json, sql) in &spec.fields.0 {
                let what = format!("{what}, field {json:?}");
                let c = info_ref.column(&table_name, &what, sql)?;
                let array = c.typname.starts_with('_');
                let conversion = match (&c.labels, c.composite, array) {
                    (Some(_), _, true) => Some(Conversion::ArrayOf(conversion::Element::Enum)),
                    (Some(_), _, false) => Some(Conversion::Enum),
                    (None, true, true) => Some(Conversion::ArrayOf(conversion::Element::Record)),
                    (None, true, false) => Some(Conversion::Record),
                    (None, false, _) => Conversion::for_type(&c.typname)
                        .map(|conversion| conversion.with_typmod(c.modifier)),
                };
                let conversion = conversion.ok_or_else(|| {
                    Error::Layout(format!(
                        "{what}: {table_name}.{sql} is {}, which no conversion takes (supported: {})",
                        c.full,
                        conversion::SUPPORTED
                    ))
                })?;
                // A `varchar(n)[]`'s modifier is its elements'.
                let sized = matches!(
                    c.typname.as_str(),
                    "varchar" | "bpchar" | "_varchar" | "_bpchar"
                ) && c.modifier > 4;
                fields.push(Field {
                    json: json.clone(),
                    sql: sql.clone(),
                    conversion,
                    sql_type: c.full.clone(),
                    typname: c.typname.clone(),
                    base_type: c.base.clone(),
                    typmod: c.modifier,
                    max_chars: sized.then(|| (c.modifier - 4) as usize),
                    labels: c.labels.clone(),
                    generated: c.generated,
                    identity_always: c.identity_always,
                    not_null: info_ref.checks.not_null(sql),
                    json_null_as_sql_null: layout.json_null == config::JsonNull::SqlNull,
                });
            }
            // The keys a check may read: the row key (in the parent
            // table) and the ref key, each unless a field is that column.
            fn key<'a>(
                info: &'a TableInfo,
                fields: &[Field],
                name: &'a str,
            ) -> Option<(&'a str, &'a str)> {
                let c = info.columns.get(name)?;
                (!fields.iter().any(|f| f.sql == name)).then_some((name, c.full.as_str()))
            }
            let keys = [
                (spec.kind == ColumnKind::Row)
                    .then(|| key(info_ref, &fields, &layout.uuid))
                    .flatten(),
                key(info_ref, &fields, &spec.ref_key),
            ];
            let given: Vec<_> = fields
                .iter()
                .map(|f| {
                    let given = checks::Given {
                        sql: &f.sql,
                        sql_type: &f.sql_type,
                        generated: f.generated,
                    };
                    (
                        given,
                        f.conversion.read_expr(&format!("p.{}", quote(&f.sql))),
                    )
                })
                .collect();
            let layout_tables: Vec<&str> = std::iter::once(layout.table.as_str())
                .chain(layout.columns.iter().filter_map(|c| c.table.as_deref()))
                .collect();
            let owner = match (spec.kind, spec.parent.as_deref()) {
                (ColumnKind::Row, _) | (_, None) => checks::Owner::Row { uuid: &layout.uuid },
                (ColumnKind::Child, Some(parent_key)) => checks::Owner::Child {
                    parent_key,
                    parent: &layout.table,
                    id: &layout.id,
                    uuid: &layout.uuid,
                },
            };
            let place = checks::Place {
                table: &table,
                schema,
                layout_tables: &layout_tables,
                owner,
                ref_key: &spec.ref_key,
            };
            let checks = checks::build(&info_ref.checks, &place, &given, keys);
            columns.push(ColumnLayout {
                name: Column::new(&spec.name).map_err(|e| Error::Layout(format!("{what}: {e}")))?,
                shape,
                table_sql: format!("{}.{}", quote(schema), quote(&table)),
                table,
                ref_key_sql: quote(&spec.ref_key),
                fields,
                checks,
            });
        }

        let composite = columns.iter().flat_map(|c| &c.fields).any(|f| {
            matches!(
                f.conversion,
                Conversion::Record | Conversion::ArrayOf(conversion::Element::Record)
            )
        });
        if composite {
            composite_text(pool).await?;
        }

        let money = columns
            .iter()
            .flat_map(|c| c.fields.iter().map(move |f| (c, f)))
            .find(|(_, f)| {
                matches!(
                    f.conversion,
                    Conversion::Money | Conversion::ArrayOf(conversion::Element::Money)
                )
            });
        if let Some((column, field)) = money {
            money_reads_back(pool, &format!("{}.{}", column.table_sql, quote(&field.sql))).await?;
        }

        let mut resolved_indexes = Vec::with_capacity(indexes.len());
        for index in indexes {
            let column = columns
                .iter()
                .position(|c| c.name.as_str() == index.column)
                .ok_or_else(|| {
                    Error::Layout(format!(
                        "index {}: no layout column {:?}",
                        index.name, index.column
                    ))
                })?;
            let field = |name: &str| {
                columns[column].field(name).cloned().ok_or_else(|| {
                    Error::Layout(format!(
                        "index {}: column {} has no field {name:?}",
                        index.name, index.column
                    ))
                })
            };
            resolved_indexes.push(IndexLayout {
                name: index.name.clone(),
                column,
                shard_field: field(&index.shard_field)?,
                fields: index
                    .fields
                    .iter()
                    .map(|f| field(f))
                    .collect::<Result<_, _>>()?,
            });
        }

        Ok(Layout {
            schema: schema.clone(),
            table: layout.table.clone(),
            table_sql: format!("{}.{}", quote(schema), quote(&layout.table)),
            id_sql: quote(&layout.id),
            uuid_sql: quote(&layout.uuid),
            columns,
            indexes: resolved_indexes,
        })
    }

    /// The parent table, quoted and schema-qualified.
    pub fn table_sql(&self) -> &str {
        &self.table_sql
    }

    /// The parent id column, quoted.
    pub fn id_sql(&self) -> &str {
        &self.id_sql
    }

    /// The row key (UUID) column, quoted.
    pub fn uuid_sql(&self) -> &str {
        &self.uuid_sql
    }

    /// The layout column called `name`.
    pub fn column(&self, name: &str) -> Option<(usize, &ColumnLayout)> {
        self.columns
            .iter()
            .enumerate()
            .find(|(_, c)| c.name.as_str() == name)
    }

    /// Checks names a command was given (`--columns`): at least one, each
    /// a column of the layout; the error names the columns there are.
    pub fn check_columns(&self, names: &[String]) -> Result<(), String> {
        if names.is_empty() {
            return Err("--columns names no column".into());
        }
        match names.iter().find(|n| self.column(n).is_none()) {
            None => Ok(()),
            Some(unknown) => Err(format!(
                "{unknown} is not a column of the layout (its columns: {})",
                self.columns
                    .iter()
                    .map(|c| c.name.as_str())
                    .collect::<Vec<_>>()
                    .join(", ")
            )),
        }
    }

    /// The index called `name`.
    pub fn index(&self, name: &str) -> Option<&IndexLayout> {
        self.indexes.iter().find(|i| i.name == name)
    }

    /// The names of the columns, for messages.
    pub fn column_names(&self) -> String {
        self.columns
            .iter()
            .map(|c| c.name.as_str())
            .collect::<Vec<_>>()
            .join(", ")
    }
}
