//! Writes an app pipelined in one implicit transaction (a driver's
//! batch), run as one: every statement evaluated and checked before any
//! cell is put.

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
/// A statement's rows are evaluated against the stores as they are, not
/// as the batch's earlier statements would leave them: a statement
/// writing a row an earlier one writes is refused (`0A000`; send them
/// with a `Sync` each). As for one statement of several rows, a store
/// failing while the cells are put can leave some written.
pub async fn write_batch<S: CellStore>(
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
    for (sql, params) in statements {
        match analyze(eval, catalog, model, sql, params).await {
            Ok(ok) => analyzed.push(ok),
            Err(e) => {
                failed = Some(e);
                break;
            }
        }
    }
    let writers: Vec<Writer<'_, S>> = analyzed
        .iter()
        .map(|(write, cols)| Writer {
            eval,
            limits,
            store,
            cols,
            write,
        })
        .collect();
    // Every statement's rows, evaluated and checked, nothing put yet.
    let mut planned = Vec::with_capacity(writers.len());
    let mut earlier = BatchWrites::default();
    // A batch's statements are evaluated a few at once, as a statement's
    // rows are; each is still checked against the ones before it, in
    // order.
    'plans: for chunk in writers.chunks(ROWS_AT_ONCE) {
        let plans = futures::future::join_all(chunk.iter().map(|writer| writer.plan())).await;
        for (writer, plan) in chunk.iter().zip(plans) {
            let (rows, cells, tag, named) = match plan {
                Ok(plan) => plan,
                Err(e) => {
                    // A row an earlier write of the batch writes may be what
                    // this one needed (a parent row, a key to update).
                    failed = Some(match &e.row {
                        Some(key)
                            if earlier.rows.contains(key) || earlier.children_of.contains(key) =>
                        {
                            again(key)
                        }
                        _ => e,
                    });
                    break 'plans;
                }
            };
            if let Err(e) = earlier.check(writer, &named, &cells) {
                failed = Some(e);
                break 'plans;
            }
            earlier.add(writer, &cells);
            planned.push((rows, cells, tag));
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
                })
            })
            .collect();
        results.push(Err(e));
        return results;
    }
    // Put a few statements at once too (the batch's rows are apart); the
    // results end at the first that failed.
    let mut results: Vec<Result<Written, Refused>> = Vec::with_capacity(writers.len());
    let mut planned = planned.into_iter();
    for chunk in writers.chunks(ROWS_AT_ONCE) {
        let finishing = chunk
            .iter()
            .zip(planned.by_ref())
            .map(|(writer, (rows, cells, tag))| writer.finish(rows, cells, tag));
        results.extend(futures::future::join_all(finishing).await);
        if results.iter().any(Result::is_err) {
            break;
        }
    }
    if let Some(first) = results.iter().position(Result::is_err) {
        results.truncate(first + 1);
    }
    results
}

/// What a batch's earlier writes write, to tell a later write that
/// depends on them: each was evaluated against the stores alone.
#[derive(Default)]
struct BatchWrites {
    /// Rows whose parent-table cells an earlier write writes.
    rows: std::collections::HashSet<RowKey>,
    /// Child rows an earlier write writes, and the rows they belong to.
    children: std::collections::HashSet<schemaless::CellKey>,
    children_of: std::collections::HashSet<RowKey>,
}

impl BatchWrites {
    /// Whether `writer`'s statement, which names rows `named` and writes
    /// `cells`, was evaluated without what an earlier write writes: an
    /// INSERT of a row or child row an earlier INSERT writes fails as
    /// PostgreSQL's would (`23505`); any other overlap is refused.
    fn check<S: CellStore>(
        &self,
        writer: &Writer<'_, S>,
        named: &[RowKey],
        cells: &[Vec<Cell>],
    ) -> Result<(), Refused> {
        let child = matches!(writer.write.table, Table::Child(_));
        let inserts = matches!(
            writer.write.rows,
            Rows::Insert {
                conflict: OnConflict::Fail,
                ..
            }
        );
        let updates = matches!(writer.write.rows, Rows::Update { .. });
        if let Some(key) = named.iter().find(|k| self.rows.contains(k)) {
            return Err(if inserts && !child {
                duplicate(&writer.table_name(), key)
            } else {
                again(key)
            });
        }
        if child && updates {
            if let Some(key) = named.iter().find(|k| self.children_of.contains(k)) {
                return Err(again(key));
            }
        }
        if child {
            if let Some(cell) = cells
                .iter()
                .flatten()
                .find(|c| self.children.contains(&c.key))
            {
                return Err(if inserts {
                    duplicate(&writer.table_name(), &cell.key.row_key)
                } else {
                    again(&cell.key.row_key)
                });
            }
        }
        Ok(())
    }

    fn add<S: CellStore>(&mut self, writer: &Writer<'_, S>, cells: &[Vec<Cell>]) {
        for cell in cells.iter().flatten() {
            if matches!(writer.write.table, Table::Child(_)) {
                self.children.insert(cell.key.clone());
                self.children_of.insert(cell.key.row_key);
            } else {
                self.rows.insert(cell.key.row_key);
            }
        }
    }
}

/// A write of a batch on a row an earlier write of the batch writes.
fn again(key: &RowKey) -> Refused {
    Refused::new(
        "0A000",
        format!(
            "this write names row {} that an earlier write of its pipelined batch writes, and \
             the facade evaluates a batch's writes before it writes any: send them with a \
             Sync each",
            key.uuid()
        ),
    )
}

/// A statement's translated plan and its table's columns.
async fn analyze<'a>(
    eval: Evaluator<'a>,
    catalog: &Catalog,
    model: &crate::Model,
    sql: &str,
    params: &[Option<String>],
) -> Result<(Write, Vec<Col<'a>>), Refused> {
    let statement = bind_nullable(sql, params)?;
    let write = match crate::analyze(model, &statement.to_string()).plan {
        Some(Plan::Write(write)) => write,
        _ => return Err(Refused::new("0A000", "not a translatable write")),
    };
    let cols = columns(eval.legacy, catalog, model, write.table).await?;
    Ok((*write, cols))
}
