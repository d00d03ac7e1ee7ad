//! The Schemaless side of `query run`: the plan's cell API calls (by row
//! key or through an index) and the rows rebuilt from the cells' bodies.

use super::*;

/// The cells of one row, by column.
#[derive(Default)]
pub(super) struct RowCells {
    latest: BTreeMap<String, StoredCell>,
    /// Child column -> its cells, in ref key order.
    children: BTreeMap<String, Vec<StoredCell>>,
    /// From an index entry: the fields it holds.
    entry: Option<(String, Value)>,
}

/// Cell reads of one statement in flight at once.
const READS_AT_ONCE: usize = 8;

pub(super) async fn read_cells<S: CellStore>(
    store: &S,
    rows: &[RowKey],
    latest: &[String],
    children: &[String],
) -> Result<Vec<(RowKey, RowCells)>, RunError> {
    let mut pairs = Vec::new();
    for (i, _) in rows.iter().enumerate() {
        for name in latest {
            pairs.push((i, name, Column::new(name)?));
        }
    }
    // Each (row, column) read is a round trip to its shard: they run
    // together, a few at a time, rather than one after another (a
    // served read of several columns waited for each in turn).
    let mut out: Vec<(RowKey, RowCells)> = rows.iter().map(|r| (*r, RowCells::default())).collect();
    for batch in pairs.chunks(READS_AT_ONCE) {
        let found = futures::future::try_join_all(
            batch
                .iter()
                .map(|(i, _, column)| store.get_cell_latest(&rows[*i], column, ReadFrom::Master)),
        )
        .await?;
        for ((i, name, _), cell) in batch.iter().zip(found) {
            if let Some(cell) = cell {
                out[*i].1.latest.insert((*name).clone(), cell);
            }
        }
    }
    for name in children {
        let column = Column::new(name)?;
        let all = store
            .get_column_cells(rows, &column, ReadFrom::Master)
            .await?;
        for cell in all {
            if let Some((_, cells)) = out.iter_mut().find(|(k, _)| *k == cell.cell.key.row_key) {
                cells.children.entry(name.clone()).or_default().push(cell);
            }
        }
    }
    Ok(out)
}

/// The result rows of one parent row: one per combination of its child
/// cells (a parent without cells of an inner-joined child has none).
/// What a read's result rows are made of.
pub(super) struct Shape<'a> {
    pub(super) outputs: &'a [Projected],
    pub(super) order: &'a [(Projected, bool)],
    pub(super) children: &'a [String],
    pub(super) left: &'a [String],
}

/// Whether the parent row `read` names has rows: one read at its latest
/// cell exists only if it has one; one read through its children only if
/// it has some (or a LEFT JOIN keeps it).
pub(super) fn exists(read: &RowRead, cells: &RowCells) -> bool {
    if !read.latest.is_empty() {
        return !cells.latest.is_empty();
    }
    !cells.children.is_empty() || !read.left.is_empty()
}

pub(super) fn rows_of(key: &RowKey, cells: &RowCells, shape: &Shape) -> Vec<Row> {
    let Shape {
        outputs,
        order,
        children,
        left,
    } = *shape;
    // Each combination: child column -> its cell (None: a LEFT JOIN's
    // missing child).
    let mut combos: Vec<BTreeMap<&str, Option<&StoredCell>>> = vec![BTreeMap::new()];
    for name in children {
        let list: Vec<Option<&StoredCell>> = match cells.children.get(name) {
            Some(list) if !list.is_empty() => list.iter().map(Some).collect(),
            _ if left.contains(name) => vec![None],
            _ => Vec::new(),
        };
        let mut next = Vec::new();
        for combo in &combos {
            for cell in &list {
                let mut c = combo.clone();
                c.insert(name.as_str(), *cell);
                next.push(c);
            }
        }
        combos = next;
    }
    let value = |p: &Projected, combo: &BTreeMap<&str, Option<&StoredCell>>| -> Value {
        match &p.from {
            Output::RowKey => Value::String(key.to_string()),
            Output::Value(_) => Value::Null,
            Output::RefKey { column } => {
                let cell = cells
                    .latest
                    .get(column)
                    .or_else(|| combo.get(column.as_str()).copied().flatten());
                cell.map_or(Value::Null, |c| Value::from(c.cell.key.ref_key.get()))
            }
            Output::Field { column, field } => {
                let cell = cells
                    .latest
                    .get(column)
                    .or_else(|| combo.get(column.as_str()).copied().flatten());
                match cell {
                    Some(c) => c
                        .cell
                        .body
                        .fields()
                        .get(field)
                        .cloned()
                        .unwrap_or(Value::Null),
                    None => match &cells.entry {
                        Some((index_column, fields)) if index_column == column => {
                            fields.get(field).cloned().unwrap_or(Value::Null)
                        }
                        _ => Value::Null,
                    },
                }
            }
        }
    };
    combos
        .iter()
        .map(|combo| Row {
            values: outputs.iter().map(|p| value(p, combo)).collect(),
            order: order.iter().map(|(p, _)| value(p, combo)).collect(),
        })
        .collect()
}

pub(super) async fn row_reads<S: CellStore>(
    eval: &Evaluator<'_>,
    store: &S,
    read: &RowRead,
) -> Result<Vec<Row>, RunError> {
    if let Some(on) = &read.outer_condition {
        return Err(untranslatable(format!(
            "its LEFT JOIN picks the child rows by {on} besides the parent key, which query run does not evaluate; run it without that condition"
        )));
    }
    if !read.order.is_empty() && (read.limit.is_some() || read.offset.is_some()) {
        return Err(untranslatable(
            "it sorts in the app and then limits, which query run does not evaluate",
        ));
    }
    let keys = eval.keys(&read.keys).await?;
    let cells = read_cells(store, &keys, &read.latest, &read.children).await?;
    // The filter's columns ride along past the ORDER BY's.
    let mut order = read.order.clone();
    order.extend(read.filter_columns.iter().map(|p| (p.clone(), false)));
    let shape = Shape {
        outputs: &read.outputs,
        order: &order,
        children: &read.children,
        left: &read.left,
    };
    let mut rows = Vec::new();
    for (key, cells) in &cells {
        if exists(read, cells) {
            rows.extend(rows_of(key, cells, &shape));
        }
    }
    if let Some(filter) = &read.filter {
        let columns = (read.order.len(), read.filter_columns.as_slice());
        rows = super::values::kept(eval, &super::Catalog::default(), filter, columns, rows)
            .await?
            .map_err(untranslatable)?;
    }
    let offset = match &read.offset {
        Some(e) => eval.count(e).await?,
        None => 0,
    };
    if let Some(limit) = &read.limit {
        let limit = eval.count(limit).await?;
        if rows.len() > offset + limit {
            return Err(untranslatable(
                "its LIMIT without ORDER BY picks any of more rows than it keeps, so no answer is the one to compare",
            ));
        }
    }
    Ok(rows.into_iter().skip(offset).collect())
}

/// The index query `read` makes, its values evaluated, and the name of
/// the column the index's entries come from; `None` for `LIMIT 0`.
pub(super) async fn index_query(
    eval: &Evaluator<'_>,
    read: &IndexRead,
) -> Result<(Option<IndexQuery>, String), RunError> {
    let legacy = eval.legacy;
    let index = legacy
        .layout()
        .index(&read.index)
        .ok_or_else(|| anyhow::anyhow!("index {} is not in the legacy layout", read.index))?;
    let column = &legacy.layout().columns[index.column];
    let shard_value = eval
        .field_value(column, &read.shard_field, &read.shard_value)
        .await?;
    let mut filters = Vec::new();
    for f in &read.filters {
        let value = match (f.op, f.array) {
            (FilterOp::In, true) => {
                Value::Array(eval.field_values(column, &f.field, &f.values[0]).await?)
            }
            (FilterOp::In, false) => {
                let mut all = Vec::new();
                for e in &f.values {
                    all.push(eval.field_value(column, &f.field, e).await?);
                }
                Value::Array(all)
            }
            _ => eval.field_value(column, &f.field, &f.values[0]).await?,
        };
        filters.push(Filter {
            field: f.field.clone(),
            op: f.op,
            value,
        });
    }
    let limit = match &read.limit {
        Some(e) => eval.count(e).await?,
        None => schemaless::index::MAX_LIMIT,
    };
    let query = IndexQuery {
        index: read.index.clone(),
        shard_value,
        filters,
        order_by: read.order_by.clone(),
        descending: read.descending,
        limit: limit.clamp(1, schemaless::index::MAX_LIMIT),
    };
    Ok(((limit > 0).then_some(query), column.name.to_string()))
}

pub(super) async fn index_reads<S: CellStore>(
    eval: &Evaluator<'_>,
    store: &S,
    read: &IndexRead,
) -> Result<Vec<Row>, RunError> {
    let (query, column) = index_query(eval, read).await?;
    let entries = match &query {
        None => Vec::new(),
        Some(query) => store.query_index(query, ReadFrom::Master).await?,
    };
    let keys: Vec<RowKey> = entries.iter().map(|e| e.row_key).collect();
    let mut cells = read_cells(store, &keys, &read.latest, &read.children).await?;
    let shape = Shape {
        outputs: &read.outputs,
        order: &read.order,
        children: &read.children,
        left: &read.left,
    };
    let mut rows = Vec::new();
    for (entry, (key, cells)) in entries.iter().zip(cells.iter_mut()) {
        cells.entry = Some((column.clone(), entry.fields.to_value()));
        rows.extend(rows_of(key, cells, &shape));
    }
    Ok(rows)
}
