//! Comparison: what two stores answered to the same read, through the
//! layout's canonical form and the configured rules.
//!
//! The unit of comparison is one (row key, column): a read of a cell or of
//! a column's latest cell is one; a row read is one per column either side
//! returned; an index query is one per row key either side listed (under
//! the index's column). A [`Difference`] names the unit and carries both
//! sides' values as JSON, for the mismatch store and the dashboard.

use std::collections::{BTreeMap, BTreeSet};

use schemaless::{Body, Cell, Column, IndexEntry, RowKey, StoredCell};
use serde_json::{json, Map, Value};

/// Puts a body into the one form both stores agree on (the legacy
/// layout's canonical form); the identity when there is no layout.
pub trait Canonical: Send + Sync {
    /// The canonical body, or an error text when the body does not fit
    /// the layout (it is then compared as it is).
    fn canonical(&self, column: &Column, body: &Body) -> Result<Body, String>;

    /// Whether both stores can hold `column`: Schemaless also keeps
    /// columns the legacy tables have no place for (a trigger's output),
    /// which are not compared.
    fn compares(&self, column: &Column) -> bool;
}

impl Canonical for legacy::LegacyStore {
    fn canonical(&self, column: &Column, body: &Body) -> Result<Body, String> {
        self.canonical_body(column, body).map_err(|e| e.to_string())
    }

    fn compares(&self, column: &Column) -> bool {
        self.layout().column(column.as_str()).is_some()
    }
}

/// The identity: bodies are compared as stored.
pub struct AsStored;

impl Canonical for AsStored {
    fn canonical(&self, _: &Column, body: &Body) -> Result<Body, String> {
        Ok(body.clone())
    }

    fn compares(&self, _: &Column) -> bool {
        true
    }
}

/// The `[verify]` rules: columns and fields left out, numeric tolerances.
#[derive(Clone, Debug, Default)]
pub struct Rules {
    ignored_columns: BTreeSet<String>,
    ignored_fields: BTreeMap<String, BTreeSet<String>>,
    tolerances: BTreeMap<String, BTreeMap<String, f64>>,
}

impl Rules {
    /// The rules of `[verify]` (already validated by the config).
    pub fn from_config(verify: &config::Verify) -> Rules {
        let mut rules = Rules::default();
        for rule in &verify.ignore {
            match rule.split_once('.') {
                Some((column, field)) => {
                    rules
                        .ignored_fields
                        .entry(column.to_string())
                        .or_default()
                        .insert(field.to_string());
                }
                None => {
                    rules.ignored_columns.insert(rule.clone());
                }
            }
        }
        for (rule, tolerance) in &verify.tolerance {
            if let Some((column, field)) = rule.split_once('.') {
                rules
                    .tolerances
                    .entry(column.to_string())
                    .or_default()
                    .insert(field.to_string(), *tolerance);
            }
        }
        rules
    }

    /// Whether the column is left out of every comparison.
    pub fn ignores(&self, column: &Column) -> bool {
        self.ignored_columns.contains(column.as_str())
    }

    /// Whether `field` of `column` is left out of comparisons.
    pub(crate) fn ignores_field(&self, column: &Column, field: &str) -> bool {
        self.ignored_fields
            .get(column.as_str())
            .is_some_and(|fields| fields.contains(field))
    }

    /// The tolerance of `field` of `column`, if it has one.
    pub(crate) fn tolerance(&self, column: &Column, field: &str) -> Option<f64> {
        self.tolerances
            .get(column.as_str())
            .and_then(|fields| fields.get(field))
            .copied()
    }

    /// The body's fields in canonical form, less the ignored ones.
    pub(crate) fn prepare(
        &self,
        canon: &dyn Canonical,
        column: &Column,
        body: &Body,
    ) -> Map<String, Value> {
        let mut fields = canon
            .canonical(column, body)
            .unwrap_or_else(|_| body.clone())
            .fields()
            .clone();
        if let Some(ignored) = self.ignored_fields.get(column.as_str()) {
            fields.retain(|name, _| !ignored.contains(name));
        }
        fields
    }

    fn same_fields(&self, column: &Column, a: &Map<String, Value>, b: &Map<String, Value>) -> bool {
        if a.len() != b.len() {
            return false;
        }
        let tolerances = self.tolerances.get(column.as_str());
        a.iter().all(|(name, x)| match b.get(name) {
            None => false,
            Some(y) if x == y => true,
            Some(y) => match (tolerances.and_then(|t| t.get(name)), number(x), number(y)) {
                (Some(tolerance), Some(x), Some(y)) => (x - y).abs() <= *tolerance,
                _ => false,
            },
        })
    }
}

/// A JSON number, or a string holding one (decimals are strings).
fn number(v: &Value) -> Option<f64> {
    match v {
        Value::Number(n) => n.as_f64(),
        Value::String(s) => s.parse().ok(),
        _ => None,
    }
}

/// Which store said what.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Side {
    /// The legacy PostgreSQL tables.
    Legacy,
    /// Schemaless.
    Schemaless,
}

impl Side {
    /// `legacy` or `schemaless`.
    pub fn as_str(self) -> &'static str {
        match self {
            Side::Legacy => "legacy",
            Side::Schemaless => "schemaless",
        }
    }

    /// The other store.
    pub fn other(self) -> Side {
        match self {
            Side::Legacy => Side::Schemaless,
            Side::Schemaless => Side::Legacy,
        }
    }
}

/// One (row key, column) on which the stores disagree.
#[derive(Clone, Debug, PartialEq)]
pub struct Difference {
    /// The row.
    pub row_key: RowKey,
    /// The column (an index's column for index queries).
    pub column: Column,
    /// What the legacy tables hold (JSON `null`: nothing).
    pub legacy: Value,
    /// What Schemaless holds.
    pub schemaless: Value,
}

impl Difference {
    /// Whether Schemaless lacks what the legacy tables have (as when the
    /// row is not backfilled yet).
    pub fn schemaless_missing(&self) -> bool {
        self.schemaless.is_null() || self.schemaless == json!([])
    }
}

/// The outcome of comparing one unit.
#[derive(Clone, Debug, PartialEq)]
pub struct Unit {
    /// The row.
    pub row_key: RowKey,
    /// The column.
    pub column: Column,
    /// The ref key of the newest cell compared (-1 when neither side has
    /// one): what a match verified.
    pub ref_key: i64,
    /// `None` when the stores agree.
    pub difference: Option<Difference>,
}

impl Unit {
    /// The unit of (row, column); `values` (legacy, Schemaless) are only
    /// made when the stores differ.
    fn new(
        row_key: RowKey,
        column: &Column,
        ref_key: i64,
        same: bool,
        values: impl FnOnce() -> (Value, Value),
    ) -> Unit {
        Unit {
            row_key,
            column: column.clone(),
            ref_key,
            difference: (!same).then(|| {
                let (legacy, schemaless) = values();
                Difference {
                    row_key,
                    column: column.clone(),
                    legacy,
                    schemaless,
                }
            }),
        }
    }
}

/// The JSON of a cell for the mismatch store: its ref key and canonical
/// body.
pub fn cell_json(rules: &Rules, canon: &dyn Canonical, cell: &Cell) -> Value {
    json!({
        "ref_key": cell.key.ref_key.get(),
        "body": Value::Object(rules.prepare(canon, &cell.key.column, &cell.body)),
    })
}

/// Compares two optional cells of one (row, column).
pub fn one_cell(
    rules: &Rules,
    canon: &dyn Canonical,
    row_key: RowKey,
    column: &Column,
    legacy: Option<&Cell>,
    schemaless: Option<&Cell>,
) -> Option<Unit> {
    if rules.ignores(column) {
        return None;
    }
    let same = match (legacy, schemaless) {
        (None, None) => true,
        (Some(a), Some(b)) => {
            a.key == b.key
                && rules.same_fields(
                    column,
                    &rules.prepare(canon, column, &a.body),
                    &rules.prepare(canon, column, &b.body),
                )
        }
        _ => false,
    };
    let ref_key = legacy
        .iter()
        .chain(schemaless.iter())
        .map(|c| c.key.ref_key.get())
        .max()
        .unwrap_or(-1);
    let value = |c: Option<&Cell>| c.map_or(Value::Null, |c| cell_json(rules, canon, c));
    Some(Unit::new(row_key, column, ref_key, same, || {
        (value(legacy), value(schemaless))
    }))
}

/// Compares two sets of cells of one (row, column) (every child cell of a
/// parent, as the full diff reads them), by ref key.
pub fn cell_sets(
    rules: &Rules,
    canon: &dyn Canonical,
    row_key: RowKey,
    column: &Column,
    legacy: &[&Cell],
    schemaless: &[&Cell],
) -> Option<Unit> {
    if rules.ignores(column) {
        return None;
    }
    let by_ref = |cells: &[&Cell]| -> BTreeMap<i64, Map<String, Value>> {
        cells
            .iter()
            .map(|c| (c.key.ref_key.get(), rules.prepare(canon, column, &c.body)))
            .collect()
    };
    let (a, b) = (by_ref(legacy), by_ref(schemaless));
    let same = a.len() == b.len()
        && a.iter()
            .all(|(k, x)| b.get(k).is_some_and(|y| rules.same_fields(column, x, y)));
    let ref_key = a.keys().chain(b.keys()).copied().max().unwrap_or(-1);
    let value = |m: BTreeMap<i64, Map<String, Value>>| {
        Value::Array(
            m.into_iter()
                .map(|(k, body)| json!({"ref_key": k, "body": Value::Object(body)}))
                .collect(),
        )
    };
    Some(Unit::new(row_key, column, ref_key, same, || {
        (value(a), value(b))
    }))
}

/// Compares two row reads (the latest cell of every column): one unit per
/// column either side returned.
pub fn rows(
    rules: &Rules,
    canon: &dyn Canonical,
    row_key: RowKey,
    legacy: &[StoredCell],
    schemaless: &[StoredCell],
) -> Vec<Unit> {
    let columns: BTreeSet<&Column> = legacy
        .iter()
        .chain(schemaless)
        .map(|c| &c.cell.key.column)
        .filter(|column| canon.compares(column))
        .collect();
    let find = |cells: &'_ [StoredCell], column: &Column| -> Option<Cell> {
        cells
            .iter()
            .find(|c| c.cell.key.column == *column)
            .map(|c| c.cell.clone())
    };
    columns
        .into_iter()
        .filter_map(|column| {
            one_cell(
                rules,
                canon,
                row_key,
                column,
                find(legacy, column).as_ref(),
                find(schemaless, column).as_ref(),
            )
        })
        .collect()
}

/// Compares two answers to one index query: one unit per row key either
/// side listed, under the index's column. The order of entries is part of
/// the answer: a list whose entries agree but not their order is one
/// difference, on the first row key out of place.
pub fn index_entries(
    rules: &Rules,
    column: &Column,
    legacy: &[IndexEntry],
    schemaless: &[IndexEntry],
) -> Vec<Unit> {
    if rules.ignores(column) {
        return Vec::new();
    }
    let map = |entries: &[IndexEntry]| -> BTreeMap<RowKey, Map<String, Value>> {
        entries
            .iter()
            .map(|e| {
                let mut fields = e.fields.fields().clone();
                if let Some(ignored) = rules.ignored_fields.get(column.as_str()) {
                    fields.retain(|name, _| !ignored.contains(name));
                }
                (e.row_key, fields)
            })
            .collect()
    };
    let (a, b) = (map(legacy), map(schemaless));
    let keys: BTreeSet<&RowKey> = a.keys().chain(b.keys()).collect();
    let mut units: Vec<Unit> = keys
        .into_iter()
        .map(|row_key| {
            let (x, y) = (a.get(row_key), b.get(row_key));
            let same = match (x, y) {
                (Some(x), Some(y)) => rules.same_fields(column, x, y),
                _ => false,
            };
            let value = |m: Option<&Map<String, Value>>| {
                m.map_or(Value::Null, |f| json!({"entry": Value::Object(f.clone())}))
            };
            Unit::new(*row_key, column, -1, same, || (value(x), value(y)))
        })
        .collect();
    let order_a: Vec<RowKey> = legacy.iter().map(|e| e.row_key).collect();
    let order_b: Vec<RowKey> = schemaless.iter().map(|e| e.row_key).collect();
    if units.iter().all(|u| u.difference.is_none()) && order_a != order_b {
        if let Some((i, _)) = order_a
            .iter()
            .zip(&order_b)
            .enumerate()
            .find(|(_, (x, y))| x != y)
        {
            let row_key = order_a[i];
            if let Some(unit) = units.iter_mut().find(|u| u.row_key == row_key) {
                unit.difference = Some(Difference {
                    row_key,
                    column: column.clone(),
                    legacy: json!({"position": i}),
                    schemaless: json!({"position": order_b.iter().position(|k| *k == row_key)}),
                });
            }
        }
    }
    units
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cell(row: RowKey, column: &str, ref_key: i64, body: Value) -> Cell {
        Cell::new(
            row,
            Column::new(column).unwrap(),
            schemaless::RefKey::new(ref_key).unwrap(),
            Body::from_value(body).unwrap(),
        )
    }

    fn rules(ignore: &[&str], tolerance: &[(&str, f64)]) -> Rules {
        Rules::from_config(&config::Verify {
            ignore: ignore.iter().map(|s| s.to_string()).collect(),
            tolerance: tolerance.iter().map(|(k, v)| (k.to_string(), *v)).collect(),
            ..config::Verify::default()
        })
    }

    #[test]
    fn equal_cells_match_and_a_changed_field_differs() {
        let row = RowKey::random();
        let column = Column::new("BASE").unwrap();
        let a = cell(row, "BASE", 3, json!({"fare": "12.50", "status": "done"}));
        let b = cell(row, "BASE", 3, json!({"status": "done", "fare": "12.50"}));
        let c = cell(row, "BASE", 3, json!({"status": "done", "fare": "12.60"}));
        let r = rules(&[], &[]);
        let same = one_cell(&r, &AsStored, row, &column, Some(&a), Some(&b)).unwrap();
        assert_eq!(same.difference, None);
        assert_eq!(same.ref_key, 3);
        let differ = one_cell(&r, &AsStored, row, &column, Some(&a), Some(&c)).unwrap();
        let d = differ.difference.unwrap();
        assert_eq!(d.legacy["body"]["fare"], "12.50");
        assert_eq!(d.schemaless["body"]["fare"], "12.60");
    }

    #[test]
    fn ignore_rules_and_tolerances_apply() {
        let row = RowKey::random();
        let column = Column::new("BASE").unwrap();
        let a = cell(row, "BASE", 1, json!({"fare": "12.50", "note": "x"}));
        let b = cell(row, "BASE", 1, json!({"fare": "12.51", "note": "y"}));
        let strict = rules(&[], &[]);
        assert!(
            one_cell(&strict, &AsStored, row, &column, Some(&a), Some(&b))
                .unwrap()
                .difference
                .is_some()
        );
        let lenient = rules(&["BASE.note"], &[("BASE.fare", 0.02)]);
        assert!(
            one_cell(&lenient, &AsStored, row, &column, Some(&a), Some(&b))
                .unwrap()
                .difference
                .is_none()
        );
        let whole = rules(&["BASE"], &[]);
        assert!(one_cell(&whole, &AsStored, row, &column, Some(&a), Some(&b)).is_none());
    }

    #[test]
    fn missing_and_extra_cells_differ() {
        let row = RowKey::random();
        let column = Column::new("NOTES").unwrap();
        let a = cell(row, "NOTES", 1, json!({"text": "a"}));
        let b = cell(row, "NOTES", 2, json!({"text": "b"}));
        let r = rules(&[], &[]);
        let missing = one_cell(&r, &AsStored, row, &column, Some(&a), None).unwrap();
        assert!(missing.difference.unwrap().schemaless_missing());
        let extra = cell_sets(&r, &AsStored, row, &column, &[&a], &[&a, &b]).unwrap();
        let d = extra.difference.unwrap();
        assert_eq!(d.schemaless.as_array().unwrap().len(), 2);
        assert_eq!(extra.ref_key, 2);
        let same = cell_sets(&r, &AsStored, row, &column, &[&a, &b], &[&b, &a]).unwrap();
        assert!(same.difference.is_none());
    }

    /// A layout that knows only BASE.
    struct OnlyBase;

    impl Canonical for OnlyBase {
        fn canonical(&self, _: &Column, body: &Body) -> Result<Body, String> {
            Ok(body.clone())
        }

        fn compares(&self, column: &Column) -> bool {
            column.as_str() == "BASE"
        }
    }

    #[test]
    fn columns_only_schemaless_keeps_are_not_compared() {
        let row = RowKey::random();
        let stored = |c: Cell| StoredCell {
            cell: c,
            added_id: 0,
            created_at: 0,
        };
        let a = cell(row, "BASE", 1, json!({"s": "x"}));
        let status = cell(row, "STATUS", 0, json!({"billed": true}));
        let units = rows(
            &rules(&[], &[]),
            &OnlyBase,
            row,
            &[stored(a.clone())],
            &[stored(a.clone()), stored(status.clone())],
        );
        assert_eq!(units.len(), 1);
        assert!(units[0].difference.is_none());
        let units = rows(
            &rules(&[], &[]),
            &AsStored,
            row,
            &[stored(a.clone())],
            &[stored(a), stored(status)],
        );
        assert_eq!(units.iter().filter(|u| u.difference.is_some()).count(), 1);
    }

    #[test]
    fn index_answers_differ_by_entry_and_by_order() {
        let (x, y) = (RowKey::random(), RowKey::random());
        let column = Column::new("BASE").unwrap();
        let entry = |row, status: &str| IndexEntry {
            row_key: row,
            fields: Body::from_value(json!({"status": status})).unwrap(),
        };
        let r = rules(&[], &[]);
        let same = index_entries(
            &r,
            &column,
            &[entry(x, "a"), entry(y, "b")],
            &[entry(x, "a"), entry(y, "b")],
        );
        assert!(same.iter().all(|u| u.difference.is_none()));
        let changed = index_entries(&r, &column, &[entry(x, "a")], &[entry(x, "c")]);
        assert!(changed[0].difference.is_some());
        let order = index_entries(
            &r,
            &column,
            &[entry(x, "a"), entry(y, "b")],
            &[entry(y, "b"), entry(x, "a")],
        );
        assert_eq!(order.iter().filter(|u| u.difference.is_some()).count(), 1);
    }
}
