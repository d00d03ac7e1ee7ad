//! A translated read as the cell reads it makes, its values evaluated:
//! what the proxy hands the verifier when it samples a statement, so the
//! sample is replayed, triaged and recorded like any read the facade
//! served.

use super::*;

/// One cell API read of a statement.
#[derive(Clone, Debug, PartialEq)]
pub enum CellRead {
    /// `get_cell_latest` of a `row` column.
    Latest(RowKey, Column),
    /// `get_cells_for_row`: a row whose `child` columns the statement
    /// reads (the verifier compares the row's latest cells).
    Row(RowKey),
    /// `query_index`, with the name of the column its entries come from.
    Index(IndexQuery, String),
}

/// The cell reads of `sql` with `params` bound (`$n`, as text), or why it
/// has none: a write, a statement the cell API does not answer, values
/// that do not evaluate. `legacy` evaluates the values (each once, as
/// `query run` does).
pub async fn cell_reads(
    eval: Evaluator<'_>,
    model: &crate::Model,
    sql: &str,
    params: &[String],
) -> Result<Vec<CellRead>, RunError> {
    let statement = bind(sql, params)?;
    let plan = match crate::analyze_statement(model, sql.to_string(), &statement).plan {
        Some(plan @ (Plan::Rows(_) | Plan::Index(_))) => plan,
        _ => return Err(untranslatable("not a translatable read")),
    };
    let mut reads = Vec::new();
    match &plan {
        Plan::Rows(read) => {
            for key in eval.keys(&read.keys).await? {
                for name in &read.latest {
                    reads.push(CellRead::Latest(key, Column::new(name)?));
                }
                if !read.children.is_empty() {
                    reads.push(CellRead::Row(key));
                }
            }
        }
        Plan::Index(read) => {
            if let (Some(query), column) = cells::index_query(&eval, read).await? {
                reads.push(CellRead::Index(query, column));
            }
        }
        Plan::Write(_) => unreachable!("writes are refused above"),
    }
    Ok(reads)
}
