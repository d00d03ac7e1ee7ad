//! Entity rows written to a shard as they were stored, with their own
//! added_ids: a restore's writes and a shard copy's.
//!
//! Multi-row `INSERT IGNORE`s of hex literals, cut by rows and bytes. A
//! row whose added_id is already there is skipped, so writing the same
//! rows again (a restore or copy continued after a crash) changes nothing;
//! whoever continues compares the result (content digests) rather than
//! trust the skips.

use std::fmt::Write as _;

use super::format::Record;
use super::BackupError;
use crate::mysql::sql;
use crate::mysql::topology::Node;

/// Statement text per insert, at most (well under any packet budget).
const INSERT_BYTES: usize = 1 << 20;

/// Rows per insert, at most.
const INSERT_ROWS: u64 = 1000;

/// Rows buffered into one statement for one shard of one node.
pub struct Inserter<'a> {
    node: &'a Node,
    database: String,
    budget: usize,
    statement: String,
    rows: u64,
}

impl<'a> Inserter<'a> {
    /// Writes into `database`'s entity table on `node`.
    pub fn new(node: &'a Node, database: String) -> Inserter<'a> {
        Inserter {
            budget: INSERT_BYTES.min(node.packet_budget()),
            node,
            database,
            statement: String::new(),
            rows: 0,
        }
    }

    /// The statements inserting `records`, cut as [`Inserter::push`]
    /// cuts them, each with its row count: for a caller that sends several
    /// at once.
    pub fn statements(&mut self, records: &[Record]) -> Vec<(String, u64)> {
        let mut out = Vec::new();
        for record in records {
            if self.full_before(record) {
                out.push(self.take());
            }
            self.push_row(record);
            if self.rows >= INSERT_ROWS {
                out.push(self.take());
            }
        }
        if self.rows > 0 {
            out.push(self.take());
        }
        out
    }

    fn full_before(&self, record: &Record) -> bool {
        self.rows > 0 && self.statement.len() + 2 * record.body.len() + 200 > self.budget
    }

    fn take(&mut self) -> (String, u64) {
        (
            std::mem::take(&mut self.statement),
            std::mem::take(&mut self.rows),
        )
    }

    /// Adds a row; returns how many rows were written by a statement this
    /// sent (0 if it only buffered).
    pub async fn push(&mut self, record: &Record) -> Result<u64, BackupError> {
        let mut written = 0;
        if self.full_before(record) {
            written = self.flush().await?;
        }
        self.push_row(record);
        if self.rows >= INSERT_ROWS {
            written += self.flush().await?;
        }
        Ok(written)
    }

    /// Sends what is buffered; returns how many rows it held.
    pub async fn flush(&mut self) -> Result<u64, BackupError> {
        if self.rows == 0 {
            return Ok(0);
        }
        self.node
            .execute(std::mem::take(&mut self.statement))
            .await?;
        Ok(std::mem::take(&mut self.rows))
    }

    fn push_row(&mut self, record: &Record) {
        let statement = &mut self.statement;
        if self.rows == 0 {
            let _ = write!(
                statement,
                "INSERT IGNORE INTO `{}`.`entity` ({}) VALUES ",
                self.database,
                sql::CELL_COLUMNS
            );
        } else {
            statement.push(',');
        }
        let _ = write!(statement, "({}, ", record.added_id);
        sql::push_hex(statement, &record.row_key);
        // Records admit only `[A-Za-z0-9_]` column names (read from a
        // backup file, or from a VARCHAR of that alphabet).
        let _ = write!(statement, ", '{}', {}, ", record.column, record.ref_key);
        sql::push_hex(statement, &record.body);
        let _ = write!(statement, ", {})", record.created_at);
        self.rows += 1;
    }
}
