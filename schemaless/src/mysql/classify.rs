//! The one place that knows MariaDB's error numbers: every driver error
//! from a storage node becomes a [`Failure`] here, once, when the
//! [`Error::Storage`] is made.

use crate::error::{Error, Failure};

/// What a MariaDB driver error means.
pub fn classify(source: &sqlx::Error) -> Failure {
    if let Some(failure) = Failure::of_transport(source) {
        return failure;
    }
    let sqlx::Error::Database(db) = source else {
        return Failure::Other;
    };
    let Some(mysql) = db.try_downcast_ref::<sqlx::mysql::MySqlDatabaseError>() else {
        return Failure::Other;
    };
    match mysql.number() {
        // lock wait timeout, deadlock
        1205 | 1213 => Failure::Conflict,
        // server shutting down, read-only (a demoted master), connection
        // killed
        1053 | 1290 | 1927 => Failure::Unavailable,
        // too many connections, query interrupted
        1040 | 1317 => Failure::Busy,
        // duplicate entry
        1062 | 1586 => Failure::UniqueViolation,
        // a signal from a trigger: the fence of a shard move
        1644 if db
            .message()
            .starts_with(crate::mysql::moves::fence::MESSAGE) =>
        {
            Failure::Moving
        }
        // no such table, no such database
        1146 | 1049 => Failure::MissingTable,
        // out of range, truncated, incorrect value, data too long,
        // incorrect date or time
        1264 | 1265 | 1366 | 1406 | 1292 => Failure::BadValue,
        // column cannot be null, check constraint violated
        1048 | 3819 => Failure::ConstraintViolation,
        // packet larger than max_allowed_packet (its SQLSTATE is 08S01, a
        // connection error, but sending it again cannot help)
        1153 | 1301 => Failure::TooLarge,
        // other connection exceptions the server reports (08xxx): aborted
        // connections, network read and write errors
        _ if db.code().is_some_and(|code| code.starts_with("08")) => Failure::Busy,
        _ => Failure::Other,
    }
}

/// A storage node's error, classified.
pub fn storage_error(node: impl Into<String>, source: sqlx::Error) -> Error {
    Error::classified(node, source, classify)
}
