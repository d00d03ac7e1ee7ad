//! What Mezzanine reads from MariaDB servers the same way everywhere:
//! GTID positions and a minion's replica status. The store's failover,
//! the backfill's throttle and the dev cluster's replication wiring all
//! read them through here, so a column renamed by a MariaDB release is
//! fixed in one place.

use sqlx::mysql::MySqlRow;
use sqlx::Row;

/// The statement that reads a minion's replica status (one row, or none
/// when the server does not replicate).
pub const SHOW_REPLICA_STATUS: &str = "SHOW SLAVE STATUS";

/// Whether GTID position `have` includes everything in `want` (both are
/// comma-separated `domain-server-seq` lists, one entry per domain).
pub fn gtid_covers(have: &str, want: &str) -> bool {
    let parse = |s: &str| -> Vec<(u32, u64)> {
        s.split(',')
            .filter_map(|g| {
                let mut parts = g.trim().split('-');
                let domain = parts.next()?.parse().ok()?;
                let _server = parts.next()?;
                let seq = parts.next()?.parse().ok()?;
                Some((domain, seq))
            })
            .collect()
    };
    let have = parse(have);
    parse(want)
        .iter()
        .all(|(domain, seq)| have.iter().any(|(d, s)| d == domain && s >= seq))
}

/// A column as text, whether the server sends it as a string or as bytes
/// (MariaDB sends `SHOW` output and `@@` variables either way); None for
/// NULL or a missing column.
pub fn text<I: sqlx::ColumnIndex<MySqlRow> + Copy>(row: &MySqlRow, index: I) -> Option<String> {
    row.try_get::<Option<String>, _>(index)
        .ok()
        .flatten()
        .or_else(|| {
            row.try_get::<Option<Vec<u8>>, _>(index)
                .ok()
                .flatten()
                .map(|b| String::from_utf8_lossy(&b).into_owned())
        })
}

/// A count of seconds, whether the server sends it as an unsigned or a
/// signed integer or as text (a negative one as 0); None for NULL.
fn seconds(row: &MySqlRow, column: &str) -> Option<u64> {
    if let Ok(value) = row.try_get::<Option<u64>, _>(column) {
        return value;
    }
    if let Ok(value) = row.try_get::<Option<i64>, _>(column) {
        return value.map(|s| s.max(0) as u64);
    }
    text(row, column).and_then(|s| s.parse().ok())
}

/// One row of [`SHOW_REPLICA_STATUS`].
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ReplicaStatus {
    /// Whether the I/O thread (fetching the master's binlog) runs.
    pub io_running: bool,
    /// Whether the SQL thread (applying it) runs.
    pub sql_running: bool,
    /// MariaDB's own estimate of the lag; None unless both threads run.
    pub seconds_behind: Option<u64>,
    /// What the minion has received from its master (`Gtid_IO_Pos`).
    pub received: String,
    /// The last I/O or SQL error, if any.
    pub last_error: Option<String>,
}

impl ReplicaStatus {
    /// The status in the rows of [`SHOW_REPLICA_STATUS`]; None when the
    /// server does not replicate (no row).
    pub fn from_rows(rows: &[MySqlRow]) -> Option<ReplicaStatus> {
        let row = rows.first()?;
        let yes = |column: &str| text(row, column).as_deref() == Some("Yes");
        Some(ReplicaStatus {
            io_running: yes("Slave_IO_Running"),
            sql_running: yes("Slave_SQL_Running"),
            seconds_behind: seconds(row, "Seconds_Behind_Master"),
            received: text(row, "Gtid_IO_Pos").unwrap_or_default(),
            last_error: [text(row, "Last_IO_Error"), text(row, "Last_SQL_Error")]
                .into_iter()
                .flatten()
                .find(|e| !e.is_empty()),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::gtid_covers;

    #[test]
    fn a_position_covers_what_it_has_reached_in_every_domain() {
        assert!(gtid_covers("0-1-10", "0-1-10"));
        assert!(gtid_covers("0-1-11", "0-2-10"));
        assert!(!gtid_covers("0-1-9", "0-1-10"));
        assert!(gtid_covers("0-1-5,1-1-7", "1-1-7"));
        assert!(!gtid_covers("0-1-5", "0-1-5,1-1-1"));
        assert!(gtid_covers("0-2-11", "0-1-10"));
        assert!(!gtid_covers("", "0-1-1"));
        assert!(gtid_covers("0-1-5", ""));
        assert!(gtid_covers("0-1-5,1-2-7", "1-2-7"));
    }
}
