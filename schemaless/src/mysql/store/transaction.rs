//! Transactions on one node: statements joined into as few packets as
//! the node's packet budget allows, run on one connection, rolled back
//! (or the connection closed) on any error.

use std::sync::Arc;

use sqlx::AssertSqlSafe;

use crate::error::{Error, Result};
use crate::mysql::topology::Node;

/// Runs `statements` as one transaction: in one round trip when their text
/// fits the node's packet budget, else in as few packets as fit, on one
/// connection (see [`run_transaction`]).
pub(crate) async fn transaction(node: &Node, statements: &[String]) -> Result<()> {
    run_transaction(node, packets(statements, node.packet_budget())).await
}

/// Runs a transaction already cut into packets (the first starting it, the
/// last committing it) on one connection. On any error the transaction is
/// rolled back before the connection goes back to the pool (or the
/// connection is closed, which rolls back too).
pub(crate) async fn run_transaction(node: &Node, packets: Vec<String>) -> Result<()> {
    run_transaction_reusing(node, packets, &mut Vec::new()).await
}

/// [`run_transaction`], handing the packets' buffers back in `spent`
/// (emptied, their capacity kept) for the next transaction's text: a bulk
/// writer that allocates hundreds of kilobytes afresh per transaction has
/// the kernel zero new pages for each.
pub(crate) async fn run_transaction_reusing(
    node: &Node,
    packets: Vec<String>,
    spent: &mut Vec<String>,
) -> Result<()> {
    let mut conn = node.acquire().await?;
    // Cancelled between packets (or before its ROLLBACK is answered), the
    // connection is closed, which rolls back, rather than reused with the
    // transaction open.
    conn.begin_transaction();
    let mut result = Ok(());
    for sql in packets {
        let sql = Arc::new(sql);
        let sent = sql.clone();
        result = node
            .run(&mut conn, |c| {
                Box::pin(async move {
                    sqlx::raw_sql(AssertSqlSafe(sent)).execute(c).await?;
                    Ok(())
                })
            })
            .await;
        // The driver is done with the text once the call returned.
        if let Ok(mut text) = Arc::try_unwrap(sql) {
            text.clear();
            spent.push(text);
        }
        if result.is_err() {
            break;
        }
    }
    if let Err(Error::Storage { .. }) = result {
        // A statement failed and the rest were skipped: the transaction is
        // still open on this connection.
        let rollback = node
            .run(&mut conn, |c| {
                Box::pin(async move { sqlx::raw_sql("ROLLBACK").execute(c).await.map(|_| ()) })
            })
            .await;
        if rollback.is_err() {
            conn.close_on_drop();
        } else {
            conn.end_transaction();
        }
    } else if result.is_err() {
        // A timeout: the connection is closed, which rolls back.
        conn.close_on_drop();
    } else {
        // The last packet ended with COMMIT.
        conn.end_transaction();
    }
    result
}

/// `START TRANSACTION`, the statements and `COMMIT`, joined by `;` into
/// texts of at most `budget` bytes (a statement longer than that alone).
fn packets(statements: &[String], budget: usize) -> Vec<String> {
    let mut out = Vec::new();
    let mut sql = String::from("START TRANSACTION");
    for statement in statements.iter().map(String::as_str).chain(["COMMIT"]) {
        if !sql.is_empty() && sql.len() + 1 + statement.len() > budget {
            out.push(std::mem::take(&mut sql));
        }
        if !sql.is_empty() {
            sql.push(';');
        }
        sql.push_str(statement);
    }
    out.push(sql);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_transaction_is_one_packet_when_it_fits_and_cut_when_not() {
        let statements: Vec<String> = (0..10).map(|i| format!("INSERT {i:0>40}")).collect();
        assert_eq!(
            packets(&statements, 1 << 20),
            vec![format!("START TRANSACTION;{};COMMIT", statements.join(";"))]
        );
        let cut = packets(&statements, 120);
        assert!(cut.len() > 3);
        assert!(cut.iter().all(|p| p.len() <= 120));
        assert_eq!(
            cut.join(";"),
            format!("START TRANSACTION;{};COMMIT", statements.join(";"))
        );
    }
}
