//! The one place that knows PostgreSQL's SQLSTATEs: every driver error
//! from the legacy database, the outbox or the migration's own tables
//! becomes a [`Failure`] here. The store of cells knows only the kinds.

use schemaless::{Error, Failure};

/// What a PostgreSQL driver error means.
pub fn classify(source: &sqlx::Error) -> Failure {
    if let Some(failure) = Failure::of_transport(source) {
        return failure;
    }
    let Some(code) = source.as_database_error().and_then(|db| db.code()) else {
        return Failure::Other;
    };
    match code.as_ref() {
        // serialization failure, deadlock, lock not available
        "40001" | "40P01" | "55P03" => Failure::Conflict,
        // admin shutdown, crash shutdown, cannot connect now
        "57P01" | "57P02" | "57P03" => Failure::Unavailable,
        // connection exceptions
        code if code.starts_with("08") => Failure::Unavailable,
        // too many connections, statement timeout or cancel
        "53300" | "57014" => Failure::Busy,
        "23505" => Failure::UniqueViolation,
        // undefined table, undefined schema
        "42P01" | "3F000" => Failure::MissingTable,
        // program limit exceeded (a row or statement too large)
        "54000" => Failure::TooLarge,
        // data exceptions: a value too long, out of range, malformed
        code if code.starts_with("22") => Failure::BadValue,
        // The row refused for what it holds: not null, check, foreign key,
        // restrict, exclusion, any other integrity constraint, or an
        // app's trigger raising an exception. Trying again refuses it
        // again: a writer that retried it would stop there for ever.
        "23502" | "23514" | "23503" | "23001" | "23P01" | "23000" | "P0001" => {
            Failure::ConstraintViolation
        }
        _ => Failure::Other,
    }
}

/// A PostgreSQL error as the cell API reports it, classified; `node` says
/// which database or table (`postgres (mezzanine.outbox)`).
pub fn storage_error(node: impl Into<String>, source: sqlx::Error) -> Error {
    Error::classified(node, source, classify)
}
