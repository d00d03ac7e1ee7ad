//! Writes an app pipelined in one implicit transaction (a driver's
//! batch), run as one: every statement evaluated and checked before any
//! cell is put.

use std::collections::{HashMap, HashSet};

use super::*;

/// Runs statements an app pipelined in one implicit transaction (a
/// driver's batch: JDBC's `executeBatch`, asyncpg's `executemany`) as one
/// write, as PostgreSQL runs them: every statement's rows are evaluated
/// and checked before any cell is put, so a statement that fails leaves
/// nothing of the batch written, as PostgreSQL rolls the batch back.
///
/// The results, in order: one per statement, or up to the first that
/// fails, ending with its error; the ones before it are answered as
/// PostgreSQL answers them before the rollback (their rows, not written).
///
/// A statement reads the rows the batch's earlier statements write as
/// they leave them ([`Earlier`]), as PostgreSQL's later statement sees
/// the earlier ones' rows: a trip's note after the trip, an UPDATE of a
/// row the batch inserts. Statements are evaluated a few at once; one
/// that names a row an earlier one writes is evaluated again once those
/// before it are. As for one statement of several rows, a store failing
/// while the cells are put can leave some written.
///
/// A unique violation it finds is raised with PostgreSQL's fields
/// ([`super::constraint::explain`]).
pub async fn write_batch<S: CellStore>(
    eval: Evaluator<'_>,
    store: &S,
    catalog: &Catalog,
    model: (&crate::Model, &config::Limits),
    statements: &[(&str, &[Option<String>])],
) -> Vec<Result<Written, Refused>> {
    let mut results = run_batch(eval, store, catalog, model, statements).await;
    super::constraint::explain(eval.legacy, &mut results).await;
    results
}

/// [`write_batch`], its errors as the facade finds them.
async fn run_batch<S: CellStore>(
    eval: Evaluator<'_>,
    store: &S,
    catalog: &Catalog,
    (model, limits): (&crate::Model, &config::Limits),
    statements: &[(&str, &[Option<String>])],
) -> Vec<Result<Written, Refused>> {
    // Each statement's plan and its table's columns, up to the first
    // that does not translate.
    let mut analyzed = Vec::with_capacity(statements.len());
    let mut failed = None;
    // A batch is mostly one statement bound again and again (`executemany`):
    // each text is parsed once, and each bind changes a copy.
    let mut parsed: HashMap<&str, Statement> = HashMap::new();
    for (sql, params) in statements {
        match analyze(eval, catalog, model, (sql, &mut parsed), params).await {
            Ok(ok) => analyzed.push(ok),
            Err(e) => {
                failed = Some(e);
                break;
            }
        }
    }
    let earlier = Earlier::default();
    let evaluations = evaluations::Evaluations::default();
    let readahead = readahead::Readahead::new(
        eval.legacy.layout(),
        eval.legacy.tombstones(),
        analyzed.iter().map(|(write, _)| write),
    );
    let writers: Vec<Writer<'_, S>> = analyzed
        .iter()
        .map(|(write, cols)| Writer {
            eval,
            store,
            cols,
            write,
            earlier: &earlier,
            evaluations: &evaluations,
            readahead: &readahead,
            ids: Default::default(),
        })
        .collect();
    // Every statement's rows, evaluated and checked, nothing put yet.
    let mut planned = Vec::with_capacity(writers.len());
    'plans: for chunk in writers.chunks(ROWS_AT_ONCE) {
        let plans = futures::future::join_all(chunk.iter().map(|writer| writer.plan())).await;
        for (writer, mut plan) in chunk.iter().zip(plans) {
            // Evaluated beside the statements before it: again, over what
            // they write, if it reads a row one of them writes.
            if earlier.read_by(&plan) {
                plan = writer.plan().await;
            }
            let (rows, cells, tag, named) = match plan {
                Ok(plan) => plan,
                Err(e) => {
                    failed = Some(e);
                    break 'plans;
                }
            };
            if let Err(e) = earlier.check(writer, &named, &cells) {
                failed = Some(e);
                break 'plans;
            }
            let staged = match writer.stage(cells) {
                Ok(staged) => staged,
                Err(e) => {
                    failed = Some(e);
                    break 'plans;
                }
            };
            earlier.add(writer, &staged.cells);
            planned.push((rows, staged, tag));
        }
    }
    if let Some(e) = failed {
        // As PostgreSQL answers the statements before the one that failed,
        // then rolls them back: nothing is put.
        let mut results: Vec<Result<Written, Refused>> = writers
            .iter()
            .zip(planned)
            .map(|(writer, (rows, _, tag))| {
                Ok(Written {
                    rendering: writer.rendering(&rows)?,
                    tag: format!("{tag} {}", rows.len()),
                    cells: 0,
                    written: Vec::new(),
                })
            })
            .collect();
        results.push(Err(e));
        return results;
    }
    // Every cell of the batch, put in as few calls as the store's limits
    // allow (a call per statement cost a transaction per statement on
    // each master); then each statement answered from its cells'
    // results, up to the first that failed.
    let mut cells = Vec::new();
    // The row of each cell a duplicate of any unique value skips (a
    // `DO NOTHING` without a target), numbered across the batch.
    let mut skippable = Vec::new();
    let mut rows_before = 0;
    for (writer, (_, staged, _)) in writers.iter().zip(&mut planned) {
        cells.append(&mut staged.cells);
        let any = matches!(
            writer.write.rows,
            Rows::Insert {
                conflict: OnConflict::Nothing { any: true },
                ..
            }
        );
        let (rows, of_row) = staged.rows();
        skippable.extend(of_row.iter().map(|&r| any.then_some(rows_before + r)));
        rows_before += rows;
    }
    let mut reservations = Vec::new();
    for (writer, (rows, staged, _)) in writers.iter().zip(&planned) {
        match writer.reservations(rows, staged) {
            Ok(more) => reservations.extend(more),
            Err(e) => return vec![Err(e)],
        }
    }
    if let Err(e) = ids::reserve_ids(eval.legacy, &reservations).await {
        return vec![Err(e)];
    }
    let unnumbered: Vec<RowKey> = writers
        .iter()
        .zip(&planned)
        .flat_map(|(writer, (rows, staged, _))| writer.unnumbered(rows, staged))
        .collect();
    if let Err(e) = ids::number_rows(eval.legacy, catalog, &unnumbered).await {
        return vec![Err(e)];
    }
    let all = cells.clone();
    let (put, failure) = put_all(store, limits, cells, &skippable).await;
    let mut results: Vec<Result<Written, Refused>> = Vec::with_capacity(writers.len());
    let mut at = 0;
    for (writer, (rows, staged, tag)) in writers.iter().zip(planned) {
        let end = at + staged.len();
        let Some(put) = put.get(at..end) else {
            results.push(Err(failure.unwrap_or_else(|| {
                Refused::new("XX000", "Schemaless answered fewer cells than were put")
            })));
            break;
        };
        let written = all[at..end]
            .iter()
            .zip(put)
            .filter(|(_, r)| matches!(r, Ok(schemaless::WriteOutcome::Written)))
            .map(|(c, _)| c.clone())
            .collect();
        let answered = writer
            .outcome(&staged, &all[at..end], put)
            .and_then(|kept| writer.answer(rows, &kept, (end - at, written), tag));
        let failed = answered.is_err();
        results.push(answered);
        if failed {
            break;
        }
        at = end;
    }
    results
}

/// What a batch's earlier statements write: the latest cell of each row
/// column, which a later statement reads before the store's, and every
/// cell, which a later statement must not write again.
#[derive(Default)]
pub(super) struct Earlier(std::sync::Mutex<Writes>);

#[derive(Default)]
struct Writes {
    /// The latest cell of each (row, column) written.
    latest: HashMap<(RowKey, Column), StoredCell>,
    /// Rows whose parent-table cells are written.
    rows: HashSet<RowKey>,
    /// Every cell written.
    keys: HashSet<schemaless::CellKey>,
    /// Rows whose child cells are written.
    children_of: HashSet<RowKey>,
    /// Rows deleted (their tombstone written).
    deleted: HashSet<RowKey>,
}

impl Earlier {
    fn written(&self) -> std::sync::MutexGuard<'_, Writes> {
        // Held only for map operations that cannot panic.
        self.0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// The latest cell of `column` in row `key` an earlier statement
    /// writes.
    pub(super) fn latest(&self, key: &RowKey, column: &Column) -> Option<StoredCell> {
        self.written().latest.get(&(*key, column.clone())).cloned()
    }

    /// Whether an earlier statement deletes row `key`: a later one finds
    /// it gone, as in PostgreSQL, and its key retired (an INSERT of it
    /// fails, see `Writer::retired`).
    pub(super) fn deletes(&self, key: &RowKey) -> bool {
        self.written().deleted.contains(key)
    }

    /// Whether an earlier statement writes child rows of row `key` (an
    /// INSERT of one, or its tombstone).
    pub(super) fn writes_children_of(&self, key: &RowKey) -> bool {
        self.written().children_of.contains(key)
    }

    /// Whether a statement evaluated without the earlier statements'
    /// cells read a row they write: its rows name one, or its error came
    /// from one (a parent missing) or from no row it says (an error
    /// evaluating a value, which may have read one).
    fn read_by(&self, plan: &Result<Planned, Refused>) -> bool {
        let written = self.written();
        match plan {
            Ok((_, _, _, named)) => named.iter().any(|k| written.rows.contains(k)),
            Err(e) => match &e.row {
                Some(key) => written.rows.contains(key),
                None => !written.rows.is_empty(),
            },
        }
    }

    /// Whether `writer`'s statement, which names rows `named` and writes
    /// `cells`, writes a cell an earlier statement writes: an INSERT of a
    /// child row an earlier INSERT writes fails as PostgreSQL's would
    /// (`23505`); any other such write is refused, as is an UPDATE of
    /// child rows of a row whose child rows an earlier statement writes.
    fn check<S: CellStore>(
        &self,
        writer: &Writer<'_, S>,
        named: &[RowKey],
        cells: &[Vec<Cell>],
    ) -> Result<(), Refused> {
        let written = self.written();
        let child = matches!(writer.write.table, Table::Child(_));
        let inserts = matches!(
            writer.write.rows,
            Rows::Insert {
                conflict: OnConflict::Fail,
                ..
            }
        );
        if child && matches!(writer.write.rows, Rows::Update { .. } | Rows::Delete { .. }) {
            if let Some(key) = named.iter().find(|k| written.children_of.contains(k)) {
                return Err(again(key));
            }
        }
        match cells
            .iter()
            .flatten()
            .find(|c| written.keys.contains(&c.key))
        {
            Some(cell) if inserts => {
                Err(writer.duplicate(&cell.key.row_key, Some(cell.key.ref_key.get())))
            }
            Some(cell) => Err(again(&cell.key.row_key)),
            None => Ok(()),
        }
    }

    fn add<S: CellStore>(&self, writer: &Writer<'_, S>, cells: &[Cell]) {
        let mut written = self.written();
        let child = matches!(writer.write.table, Table::Child(_));
        for cell in cells {
            written.keys.insert(cell.key.clone());
            let row = cell.key.row_key;
            if child {
                written.children_of.insert(row);
                continue;
            }
            written.rows.insert(row);
            if matches!(writer.write.rows, Rows::Delete { .. }) {
                written.deleted.insert(row);
                continue;
            }
            let at = (row, cell.key.column.clone());
            let newer = written
                .latest
                .get(&at)
                .is_none_or(|s| s.cell.key.ref_key < cell.key.ref_key);
            if newer {
                let stored = StoredCell {
                    cell: cell.clone(),
                    added_id: 0,
                    created_at: 0,
                };
                written.latest.insert(at, stored);
            }
        }
    }
}

/// A write of a batch of a cell an earlier write of the batch writes.
fn again(key: &RowKey) -> Refused {
    Refused::new(
        "0A000",
        format!(
            "this write writes a cell of row {} that an earlier write of its pipelined batch \
             writes: send them with a Sync each",
            key.uuid()
        ),
    )
}

/// A statement's translated plan and its table's columns.
async fn analyze<'a, 's>(
    eval: Evaluator<'a>,
    catalog: &Catalog,
    model: &crate::Model,
    (sql, parsed): (&'s str, &mut HashMap<&'s str, Statement>),
    params: &[Option<String>],
) -> Result<(Write, Vec<Col<'a>>), Refused> {
    let mut statement = match parsed.get(sql) {
        Some(statement) => statement.clone(),
        None => {
            let statement = parse_one(sql)?;
            parsed.insert(sql, statement.clone());
            statement
        }
    };
    bind_parsed(&mut statement, params)?;
    let write = match crate::analyze_statement(model, sql.to_string(), &statement).plan {
        Some(Plan::Write(write)) => write,
        _ => return Err(Refused::new("0A000", "not a translatable write")),
    };
    let cols = columns(
        eval.legacy,
        catalog,
        model,
        (write.table, write.reserves_ids || write.reads_ids),
    )
    .await?;
    Ok((*write, cols))
}
