//! What the layout says about the app's tables: which table is the parent,
//! which are children, and where each SQL column lives in a cell.
//!
//! Everything here comes from `[layout]` and `[[index]]`; no table or
//! column name is known to the code.

use std::collections::BTreeMap;

use config::{ColumnKind, Config, Index, Layout, LayoutColumn};
use sqlparser::ast::{Ident, ObjectName, ObjectNamePart};

/// A layout table a statement names.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Table {
    /// `layout.table`.
    Parent,
    /// The child table of `layout.columns[i]`.
    Child(usize),
}

/// Where a SQL column of a layout table is found in Schemaless.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Source {
    /// The row key (`layout.uuid`).
    RowKey,
    /// The ref key of layout column `column` (its `ref_key`).
    RefKey { column: usize },
    /// Field `field` of the body of layout column `column`.
    Field { column: usize, field: String },
    /// The parent's integer id (`layout.id`, or a child's `parent`): not
    /// in any cell.
    IntegerId,
    /// A column the layout does not map.
    Unmapped,
}

/// The layout and the indexes, as the translator reads them.
#[derive(Clone, Debug)]
pub struct Model {
    pub layout: Layout,
    pub indexes: Vec<Index>,
    /// `capture.tombstone_column`, named by the reason given for DELETE.
    pub tombstones: String,
    /// `capture.bump_version`: an UPDATE that changes a row column's
    /// fields and leaves its version (ref key) is the next version, as
    /// capture's `BEFORE UPDATE` trigger makes it in PostgreSQL.
    pub bump_version: bool,
    /// Whether a name without a schema (`trips`) names the layout's table
    /// of that name. It does when the statement's session finds that
    /// table first on its `search_path`, as the facade's own does; in a
    /// session that finds another one (`SET search_path = archive`, a
    /// temporary table of the same name), only a qualified name
    /// (`public.trips`) is the layout's ([`Model::qualified_only`]).
    pub bare_names: bool,
    /// Each layout table's columns in PostgreSQL's order (`attnum`), by
    /// the table's name as the config spells it: the target columns of an
    /// INSERT that lists none. Read from the catalog by whoever holds a
    /// connection ([`crate::run::column_orders`]: the proxy, the
    /// dashboard's inventory, `query audit --from-pg-stat-statements`);
    /// empty when nobody did, and such an INSERT is then untranslatable.
    pub column_orders: BTreeMap<String, Vec<String>>,
}

impl Model {
    /// The model of `config`; `None` when it has no `[layout]`.
    pub fn from_config(config: &Config) -> Option<Model> {
        Some(Model {
            layout: config.layout.clone()?,
            indexes: config.indexes.clone(),
            tombstones: config.capture.tombstone_column.clone(),
            bump_version: config.capture.bump_version,
            bare_names: true,
            column_orders: BTreeMap::new(),
        })
    }

    /// The same model, knowing each table's column order.
    pub fn with_column_orders(self, column_orders: BTreeMap<String, Vec<String>>) -> Model {
        Model {
            column_orders,
            ..self
        }
    }

    /// `table`'s columns in PostgreSQL's order, if read.
    pub fn column_order(&self, table: Table) -> Option<&[String]> {
        self.column_orders
            .get(self.table_name(table))
            .map(Vec::as_slice)
    }

    /// The same model for a session whose `search_path` finds other
    /// tables under the layout's names: only qualified names are the
    /// layout's.
    pub fn qualified_only(&self) -> Model {
        Model {
            bare_names: false,
            ..self.clone()
        }
    }

    /// The layout's tables (the parent, then each child), unqualified.
    pub fn table_names(&self) -> Vec<&str> {
        std::iter::once(self.layout.table.as_str())
            .chain(
                self.layout
                    .columns
                    .iter()
                    .filter(|c| c.kind == ColumnKind::Child)
                    .filter_map(|c| c.table.as_deref()),
            )
            .collect()
    }

    /// The layout table `name` names (`table`, `schema.table`, quoted or
    /// not), if any.
    pub fn table(&self, name: &ObjectName) -> Option<Table> {
        let parts: Vec<String> = name
            .0
            .iter()
            .map(|p| match p {
                ObjectNamePart::Identifier(i) => folded(i),
                ObjectNamePart::Function(f) => f.name.value.clone(),
            })
            .collect();
        let (schema, table) = match parts.as_slice() {
            [table] if self.bare_names => (None, table),
            [_] => return None,
            [schema, table] => (Some(schema), table),
            [_db, schema, table] => (Some(schema), table),
            _ => return None,
        };
        if schema.is_some_and(|s| *s != self.layout.schema) {
            return None;
        }
        if *table == self.layout.table {
            return Some(Table::Parent);
        }
        self.layout
            .columns
            .iter()
            .position(|c| c.kind == ColumnKind::Child && c.table.as_deref() == Some(table))
            .map(Table::Child)
    }

    /// The table's name as the config spells it.
    pub fn table_name(&self, table: Table) -> &str {
        match table {
            Table::Parent => &self.layout.table,
            Table::Child(i) => self.layout.columns[i].table.as_deref().unwrap_or_default(),
        }
    }

    pub fn column(&self, i: usize) -> &LayoutColumn {
        &self.layout.columns[i]
    }

    /// The layout columns whose cells hold `table`'s rows: the `row`
    /// columns for the parent, the one `child` column for a child.
    pub fn columns_of(&self, table: Table) -> Vec<usize> {
        match table {
            Table::Parent => (0..self.layout.columns.len())
                .filter(|&i| self.layout.columns[i].kind == ColumnKind::Row)
                .collect(),
            Table::Child(i) => vec![i],
        }
    }

    /// Where SQL column `name` of `table` is found.
    pub fn source(&self, table: Table, name: &str) -> Source {
        if table == Table::Parent && name == self.layout.uuid {
            return Source::RowKey;
        }
        for i in self.columns_of(table) {
            let column = &self.layout.columns[i];
            if let Some((field, _)) = column.fields.0.iter().find(|(_, sql)| *sql == name) {
                return Source::Field {
                    column: i,
                    field: field.clone(),
                };
            }
        }
        for i in self.columns_of(table) {
            if self.layout.columns[i].ref_key == name {
                return Source::RefKey { column: i };
            }
        }
        match table {
            Table::Parent if name == self.layout.id => Source::IntegerId,
            Table::Child(i) if self.layout.columns[i].parent.as_deref() == Some(name) => {
                Source::IntegerId
            }
            _ => Source::Unmapped,
        }
    }

    /// The SQL column of field `field` of layout column `column`.
    pub fn sql_column(&self, column: usize, field: &str) -> Option<&str> {
        self.layout.columns[column]
            .fields
            .0
            .get(field)
            .map(String::as_str)
    }

    /// The indexes over layout column `column`.
    pub fn indexes_on(&self, column: usize) -> impl Iterator<Item = &Index> {
        let name = &self.layout.columns[column].name;
        self.indexes.iter().filter(move |i| i.column == *name)
    }
}

/// An identifier as PostgreSQL resolves it: folded to lower case unless
/// quoted.
pub fn folded(ident: &Ident) -> String {
    if ident.quote_style.is_some() {
        ident.value.clone()
    } else {
        ident.value.to_lowercase()
    }
}
