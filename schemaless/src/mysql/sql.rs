//! SQL text for the entity tables.
//!
//! Statements are sent as text with their values rendered as literals, not
//! as prepared statements with binds. This is deliberate:
//!
//! - every statement names a per-shard database (`trips_0042.entity`), so
//!   with 4096 shards and variable-size multi-row inserts almost no two
//!   statements share a text, and a prepared-statement cache would miss,
//!   costing an extra prepare round trip (and a close) per call;
//! - the text protocol does each call in one round trip, and one packet
//!   can carry a whole transaction of statements.
//!
//! It is safe because every value rendered here comes from a validated
//! type: row keys and bodies as hex literals (`X'…'`), columns are
//! `[A-Za-z0-9_]` by construction, numbers are integers, and the instance
//! name is `[a-z0-9_]` by config validation. Nothing user-supplied is ever
//! pasted in as text.
//!
//! Hex costs twice the bytes on the wire, but it is what MariaDB reads
//! fastest: measured on the dev cluster, 100-row inserts of 240-byte bodies
//! cost the master 12–14 µs a cell with hex literals against 16–19 µs with
//! escaped `_binary'…'` literals (its lexer checks every byte of a quoted
//! string against the connection's character set). Binary literals would
//! also not fit the driver's text API, which takes UTF-8.

use std::fmt::Write;

use crate::cell::{CellKey, Column, RowKey};

/// The columns every read selects, in the order [`super::store`] decodes.
pub const CELL_COLUMNS: &str = "added_id, row_key, column_name, ref_key, body, created_at";

/// The tables every shard database has; a shard missing any of them is
/// completed by `schema apply`.
pub const SHARD_TABLES: [&str; 4] = [
    "entity",
    "trigger_offsets",
    "trigger_leases",
    "trigger_dead_letters",
];

/// `CREATE TABLE`s of a shard's trigger bookkeeping: per trigger, the last
/// handled added_id, the lease saying which runner owns the shard, and the
/// cells parked after failing too often.
pub fn create_trigger_tables(database: &str) -> [String; 4] {
    [
        format!(
            "CREATE TABLE IF NOT EXISTS `{database}`.`trigger_offsets` (
                name VARCHAR(64) CHARACTER SET ascii COLLATE ascii_bin NOT NULL PRIMARY KEY,
                added_id BIGINT UNSIGNED NOT NULL,
                awaited MEDIUMTEXT CHARACTER SET ascii NOT NULL,
                updated_at BIGINT NOT NULL
            ) ENGINE=InnoDB"
        ),
        format!(
            "CREATE TABLE IF NOT EXISTS `{database}`.`trigger_leases` (
                name VARCHAR(64) CHARACTER SET ascii COLLATE ascii_bin NOT NULL PRIMARY KEY,
                owner VARCHAR(128) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
                expires_at BIGINT NOT NULL
            ) ENGINE=InnoDB"
        ),
        format!(
            "CREATE TABLE IF NOT EXISTS `{database}`.`trigger_dead_letters` (
                name VARCHAR(64) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
                added_id BIGINT UNSIGNED NOT NULL,
                row_key BINARY(16) NOT NULL,
                column_name VARCHAR(64) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
                ref_key BIGINT NOT NULL,
                tries INT UNSIGNED NOT NULL,
                error TEXT NOT NULL,
                parked_at BIGINT NOT NULL,
                retry TINYINT(1) NOT NULL DEFAULT 0,
                PRIMARY KEY (name, added_id)
            ) ENGINE=InnoDB"
        ),
        // Instances made before awaited ids were saved as ranges had a
        // TEXT column, which thousands of holes outgrew.
        format!(
            "ALTER TABLE `{database}`.`trigger_offsets` MODIFY awaited MEDIUMTEXT CHARACTER SET ascii NOT NULL"
        ),
    ]
}

/// The master's clock in microseconds, as SQL: leases are timed by the
/// master holding them, so runners' clocks never have to agree.
pub const NOW_MICROS: &str = "CAST(UNIX_TIMESTAMP(NOW(6)) * 1000000 AS SIGNED)";

/// `CREATE TABLE` of a shard's entity table.
pub fn create_entity_table(database: &str) -> String {
    format!(
        "CREATE TABLE IF NOT EXISTS `{database}`.`entity` (
            added_id BIGINT UNSIGNED NOT NULL AUTO_INCREMENT,
            row_key BINARY(16) NOT NULL,
            column_name VARCHAR(64) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
            ref_key BIGINT NOT NULL,
            body MEDIUMBLOB NOT NULL,
            created_at BIGINT NOT NULL,
            PRIMARY KEY (added_id),
            UNIQUE KEY cell (row_key, column_name, ref_key)
        ) ENGINE=InnoDB"
    )
}

/// Appends `X'<hex>'`. Bodies are written through it (hundreds of
/// kilobytes a transaction), so it renders a chunk at a time from a table
/// of digit pairs instead of pushing characters one by one.
pub fn push_hex(sql: &mut String, bytes: &[u8]) {
    const PAIRS: [[u8; 2]; 256] = {
        const HEX: &[u8; 16] = b"0123456789abcdef";
        let mut table = [[0u8; 2]; 256];
        let mut b = 0;
        while b < 256 {
            table[b] = [HEX[b >> 4], HEX[b & 0xf]];
            b += 1;
        }
        table
    };
    sql.reserve(bytes.len() * 2 + 3);
    sql.push_str("X'");
    let mut text = [0u8; 256];
    for chunk in bytes.chunks(128) {
        for (pair, b) in text.chunks_exact_mut(2).zip(chunk) {
            pair.copy_from_slice(&PAIRS[*b as usize]);
        }
        sql.push_str(std::str::from_utf8(&text[..2 * chunk.len()]).expect("hex digits are ASCII"));
    }
    sql.push('\'');
}

/// Appends `'<column>'`; safe because columns are `[A-Za-z0-9_]`.
pub fn push_column(sql: &mut String, column: &Column) {
    sql.push('\'');
    sql.push_str(column.as_str());
    sql.push('\'');
}

/// Appends the predicate matching one cell address.
pub fn push_key_predicate(sql: &mut String, key: &CellKey) {
    sql.push_str("(row_key = ");
    push_hex(sql, key.row_key.as_bytes());
    sql.push_str(" AND column_name = ");
    push_column(sql, &key.column);
    let _ = write!(sql, " AND ref_key = {})", key.ref_key.get());
}

/// One row of a multi-row insert.
pub struct InsertRow<'a> {
    pub key: &'a CellKey,
    pub body: &'a [u8],
    pub created_at: i64,
}

/// The length of [`insert_head`]'s text without the database name.
const INSERT_HEAD_LEN: usize = 81;

/// The head of a multi-row insert into one shard's entity table.
fn insert_head(sql: &mut String, database: &str) {
    sql.push_str("INSERT INTO `");
    sql.push_str(database);
    sql.push_str("`.`entity` (row_key, column_name, ref_key, body, created_at) VALUES ");
}

/// Appends one row's tuple.
fn push_row(sql: &mut String, row: &InsertRow<'_>) {
    sql.push('(');
    push_hex(sql, row.key.row_key.as_bytes());
    sql.push(',');
    push_column(sql, &row.key.column);
    let _ = write!(sql, ",{},", row.key.ref_key.get());
    push_hex(sql, row.body);
    let _ = write!(sql, ",{})", row.created_at);
}

/// At most the length [`push_row`] writes.
fn row_len_bound(row: &InsertRow<'_>) -> usize {
    // Parentheses and commas, the row key's hex, the column quoted, two
    // 20-digit numbers, and the body's hex.
    8 + 35 + row.key.column.as_str().len() + 2 + 40 + 2 * row.body.len() + 3
}

/// Multi-row `INSERT`s of new cells into one shard, each at most `budget`
/// bytes long (a single row longer than that is a statement of its own;
/// bodies that large go as bound parameters, see [`needs_bind`]). A
/// duplicate address fails its statement (nothing of it is inserted),
/// which the store turns into a comparison: duplicates are detected,
/// never ignored.
pub fn insert_cells<'a>(
    database: &str,
    rows: impl IntoIterator<Item = InsertRow<'a>>,
    budget: usize,
) -> Vec<String> {
    let mut head = String::new();
    insert_head(&mut head, database);
    split_values(&head, rows, budget, |sql, row| push_row(sql, &row))
}

/// The text of one transaction of new cells over several shards of one
/// master: `START TRANSACTION`, one multi-row `INSERT` per shard, `COMMIT`,
/// written straight into packets of at most `budget` bytes (a row that
/// does not fit the packet ends it, and the next packet resumes the
/// shard's insert). Run with `store::run_transaction_reusing`.
pub struct InsertTransaction {
    packets: Vec<String>,
    sql: String,
    budget: usize,
    /// The shard whose `INSERT` is open at the end of `sql`, if any.
    open: Option<u32>,
}

impl InsertTransaction {
    /// An empty transaction; `expected_bytes` sizes its first packet.
    pub fn new(budget: usize, expected_bytes: usize) -> InsertTransaction {
        InsertTransaction::reusing(String::new(), budget, expected_bytes)
    }

    /// An empty transaction written into `buffer` (cleared first), whose
    /// capacity a previous transaction left.
    pub fn reusing(mut sql: String, budget: usize, expected_bytes: usize) -> InsertTransaction {
        sql.clear();
        sql.reserve(expected_bytes.min(budget) + 64);
        sql.push_str("START TRANSACTION");
        InsertTransaction {
            packets: Vec::new(),
            sql,
            budget,
            open: None,
        }
    }

    /// Appends a row for `shard`, whose database is `database`. Rows of one
    /// shard should come together: each change of shard starts an insert.
    pub fn row(&mut self, shard: u32, database: &str, row: &InsertRow<'_>) {
        let continuing = self.open == Some(shard);
        let mut needed = 1 + row_len_bound(row);
        if !continuing {
            needed += INSERT_HEAD_LEN + database.len();
        }
        if self.sql.len() + needed > self.budget && !self.sql.is_empty() {
            self.packets.push(std::mem::take(&mut self.sql));
            self.open = None;
        }
        if self.open == Some(shard) {
            self.sql.push(',');
        } else {
            if !self.sql.is_empty() {
                self.sql.push(';');
            }
            insert_head(&mut self.sql, database);
            self.open = Some(shard);
        }
        push_row(&mut self.sql, row);
    }

    /// The packets, the last ending with `COMMIT`.
    pub fn finish(mut self) -> Vec<String> {
        if self.sql.len() + 7 > self.budget && !self.sql.is_empty() {
            self.packets.push(std::mem::take(&mut self.sql));
        }
        if !self.sql.is_empty() {
            self.sql.push(';');
        }
        self.sql.push_str("COMMIT");
        self.packets.push(self.sql);
        self.packets
    }
}

/// `head` followed by `(…)` tuples written by `push`, cut into statements
/// of at most `budget` bytes.
pub fn split_values<T>(
    head: &str,
    rows: impl IntoIterator<Item = T>,
    budget: usize,
    mut push: impl FnMut(&mut String, T),
) -> Vec<String> {
    let mut out = Vec::new();
    let mut sql = String::from(head);
    let mut tuple = String::new();
    for row in rows {
        tuple.clear();
        push(&mut tuple, row);
        if sql.len() > head.len() && sql.len() + 1 + tuple.len() > budget {
            out.push(std::mem::replace(&mut sql, String::from(head)));
        }
        if sql.len() > head.len() {
            sql.push(',');
        }
        sql.push_str(&tuple);
    }
    if sql.len() > head.len() {
        out.push(sql);
    }
    out
}

/// Bodies larger than this are inserted as bound parameters rather than
/// hex literals, which would double their size on the wire.
pub const MAX_LITERAL_BODY: usize = 256 * 1024;

/// Whether an encoded body goes as a bound parameter.
pub fn needs_bind(encoded: &[u8]) -> bool {
    encoded.len() > MAX_LITERAL_BODY
}

/// A one-row insert with placeholders, for large bodies.
pub fn insert_one_bound(database: &str) -> String {
    format!(
        "INSERT INTO `{database}`.`entity` (row_key, column_name, ref_key, body, created_at) VALUES (?, ?, ?, ?, ?)"
    )
}

/// The stored cells among `keys`.
pub fn select_keys<'a>(database: &str, keys: impl IntoIterator<Item = &'a CellKey>) -> String {
    let mut sql = format!("SELECT {CELL_COLUMNS} FROM `{database}`.`entity` WHERE ");
    for (i, key) in keys.into_iter().enumerate() {
        if i > 0 {
            sql.push_str(" OR ");
        }
        push_key_predicate(&mut sql, key);
    }
    sql
}

/// A prepared point read: one cell by address (binds: row key, column,
/// ref key).
pub fn select_key_bound(database: &str) -> String {
    format!(
        "SELECT {CELL_COLUMNS} FROM `{database}`.`entity` WHERE row_key = ? AND column_name = ? AND ref_key = ?"
    )
}

/// A prepared point read: the latest cell of (row, column) (binds: row
/// key, column).
pub fn select_latest_bound(database: &str) -> String {
    format!(
        "SELECT {CELL_COLUMNS} FROM `{database}`.`entity` WHERE row_key = ? AND column_name = ? ORDER BY ref_key DESC LIMIT 1"
    )
}

/// The latest cell of (row, column).
pub fn select_latest(database: &str, row_key: &RowKey, column: &Column) -> String {
    let mut sql = format!("SELECT {CELL_COLUMNS} FROM `{database}`.`entity` WHERE row_key = ");
    push_hex(&mut sql, row_key.as_bytes());
    sql.push_str(" AND column_name = ");
    push_column(&mut sql, column);
    sql.push_str(" ORDER BY ref_key DESC LIMIT 1");
    sql
}

/// The latest cell of every column of a row, ordered by column.
pub fn select_row(database: &str, row_key: &RowKey) -> String {
    let mut key = String::new();
    push_hex(&mut key, row_key.as_bytes());
    format!(
        "SELECT e.added_id, e.row_key, e.column_name, e.ref_key, e.body, e.created_at
         FROM `{database}`.`entity` e
         JOIN (SELECT column_name, MAX(ref_key) AS ref_key FROM `{database}`.`entity`
               WHERE row_key = {key} GROUP BY column_name) latest
           ON e.column_name = latest.column_name AND e.ref_key = latest.ref_key
         WHERE e.row_key = {key}
         ORDER BY e.column_name"
    )
}

/// The change-log cells whose added_id is in one of these inclusive ranges
/// (late arrivals).
pub fn select_changes_in(database: &str, ranges: &[(u64, u64)]) -> String {
    let list: Vec<String> = ranges
        .iter()
        .map(|(first, last)| format!("added_id BETWEEN {first} AND {last}"))
        .collect();
    format!(
        "SELECT {CELL_COLUMNS} FROM `{database}`.`entity` WHERE {} ORDER BY added_id",
        list.join(" OR ")
    )
}

/// A page of the change log: at most `limit` cells, and no more than
/// `max_bytes` of stored body past the first cell (which is always
/// read), so that a page of large cells cannot take gigabytes at once. The
/// cut is made by the server (a running sum over the page), so what is
/// left out is not sent; it is only ever a tail of the page, so a short
/// page has no gap the page itself made.
///
/// The running sum is taken over ids and lengths only, and the cells are
/// joined back by primary key: a derived table that carries the bodies
/// holds a BLOB, which MariaDB cannot keep in memory, so every page read
/// made (and deleted) on-disk temporary tables; under a few hundred reads
/// a second the file system's inode allocation became the masters' main
/// work.
pub fn select_changes(database: &str, after: u64, limit: usize, max_bytes: usize) -> String {
    select_changes_with(database, "", after, limit, max_bytes)
}

/// The column that tags each part of a combined page read.
pub const PAGE_PART_COLUMN: &str = "page_part";

/// [`select_changes`] with a last column, [`PAGE_PART_COLUMN`], saying
/// `part`: one part of a `UNION ALL` of several shards' pages.
pub fn select_changes_tagged(
    database: &str,
    part: usize,
    after: u64,
    limit: usize,
    max_bytes: usize,
) -> String {
    let tag = format!(", {part} AS {PAGE_PART_COLUMN}");
    select_changes_with(database, &tag, after, limit, max_bytes)
}

fn select_changes_with(
    database: &str,
    tag: &str,
    after: u64,
    limit: usize,
    max_bytes: usize,
) -> String {
    let columns = CELL_COLUMNS
        .split(", ")
        .map(|c| format!("e.{c}"))
        .collect::<Vec<_>>()
        .join(", ");
    format!(
        "SELECT {columns}{tag} FROM `{database}`.`entity` e JOIN (\
             SELECT added_id, SUM(len) OVER (ORDER BY added_id) - len AS before_it \
             FROM (SELECT added_id, LENGTH(body) AS len FROM `{database}`.`entity` \
                   WHERE added_id > {after} ORDER BY added_id LIMIT {limit}) page\
         ) sized ON e.added_id = sized.added_id \
         WHERE sized.before_it < {max_bytes} ORDER BY e.added_id"
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hex_literals_are_lowercase_and_quoted() {
        let mut s = String::new();
        push_hex(&mut s, &[0x00, 0xab, 0x7f]);
        assert_eq!(s, "X'00ab7f'");
    }

    #[test]
    fn values_are_cut_to_the_budget_and_none_is_lost() {
        let rows: Vec<String> = (0..100).map(|i| format!("{i:0>30}")).collect();
        let head = "INSERT INTO t VALUES ";
        let statements = split_values(head, &rows, 200, |sql, r| {
            sql.push('(');
            sql.push_str(r);
            sql.push(')');
        });
        assert!(statements.len() > 10);
        let mut seen = Vec::new();
        for s in &statements {
            assert!(s.len() <= 200, "{} bytes", s.len());
            let values = s.strip_prefix(head).unwrap();
            seen.extend(
                values
                    .split(',')
                    .map(|v| v.trim_matches(['(', ')']).to_string()),
            );
        }
        assert_eq!(seen, rows);
        // A row larger than the budget is a statement of its own.
        let big = ["x".repeat(500), "y".into()];
        let statements = split_values(head, &big, 200, |sql, r| sql.push_str(r));
        assert_eq!(statements.len(), 2);
        assert!(split_values(head, Vec::<String>::new(), 200, |_, _: String| {}).is_empty());
    }

    fn cell(i: usize) -> CellKey {
        CellKey {
            row_key: RowKey::from_slice(&[i as u8; 16]).unwrap(),
            column: Column::new("BASE").unwrap(),
            ref_key: crate::cell::RefKey::new(i as i64).unwrap(),
        }
    }

    #[test]
    fn a_transaction_is_one_packet_when_it_fits_and_cut_when_not() {
        let keys: Vec<CellKey> = (0..40).map(cell).collect();
        let body = vec![0x5au8; 100];
        let build = |budget: usize| {
            let mut t = InsertTransaction::new(budget, 0);
            for (i, key) in keys.iter().enumerate() {
                let shard = (i / 10) as u32;
                let row = InsertRow {
                    key,
                    body: &body,
                    created_at: 7,
                };
                t.row(shard, &format!("t_{shard:04}"), &row);
            }
            t.finish()
        };
        let whole = build(1 << 20);
        assert_eq!(whole.len(), 1);
        let text = &whole[0];
        assert!(text.starts_with("START TRANSACTION;INSERT INTO `t_0000`.`entity`"));
        assert!(text.ends_with(");COMMIT"));
        assert_eq!(
            text.matches("INSERT INTO").count(),
            4,
            "one insert per shard"
        );
        assert_eq!(text.matches("(X'").count(), 40);

        let cut = build(1000);
        assert!(cut.len() > 5);
        for packet in &cut {
            assert!(packet.len() <= 1000, "{} bytes", packet.len());
            // Every packet is whole statements.
            for statement in packet.split(';') {
                assert!(
                    statement == "START TRANSACTION"
                        || statement == "COMMIT"
                        || (statement.starts_with("INSERT INTO `t_") && statement.ends_with(",7)")),
                    "{statement}"
                );
            }
        }
        let all = cut.join(";");
        assert!(all.starts_with("START TRANSACTION;") && all.ends_with(";COMMIT"));
        assert_eq!(all.matches("(X'").count(), 40, "no row lost or repeated");
        for (i, key) in keys.iter().enumerate() {
            let mut hex = String::new();
            push_hex(&mut hex, key.row_key.as_bytes());
            let at = all.find(&format!("({hex},")).expect("every row is there");
            let shard = i / 10;
            let head = all[..at].rfind("INSERT INTO `").unwrap();
            assert!(
                all[head..].starts_with(&format!("INSERT INTO `t_{shard:04}`")),
                "row {i} in its shard's insert"
            );
        }
    }
}
