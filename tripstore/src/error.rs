//! The facade's error type, for what is not a cell API call.

use crate::mode::Mode;

/// Everything connecting the facade and changing the mode can fail with.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The legacy model could not be set up (config, layout, PostgreSQL).
    #[error(transparent)]
    Legacy(#[from] legacy::Error),
    /// A cell store error.
    #[error(transparent)]
    Cell(#[from] schemaless::Error),
    /// PostgreSQL failed while reading or changing the mode.
    #[error("{context}: {source}")]
    Postgres {
        /// What was being done.
        context: String,
        /// The driver's error.
        #[source]
        source: sqlx::Error,
    },
    /// A mode name that is not one of the five.
    #[error("unknown mode {0:?}: the modes are legacy, mirror, shadow, primary, schemaless")]
    UnknownMode(String),
    /// The step is not allowed now; `--force` overrides it.
    #[error("mode {from} -> {to} refused: {reason} (--force overrides, and is recorded)")]
    Refused {
        /// The current mode.
        from: Mode,
        /// The mode asked for.
        to: Mode,
        /// Why.
        reason: String,
    },
    /// A read share that is not a percentage from 0 to 100.
    #[error("bad read share {0:?}: a percentage from 0 to 100, with at most two decimals (e.g. 1, 0.5, 100)")]
    BadShare(String),
    /// A control row or history line that does not read back.
    #[error("corrupt control data: {0}")]
    Corrupt(String),
    /// A gate could not be checked.
    #[error("checking the gate: {0}")]
    Gate(String),
    /// The mirror failed (its tables, the outbox, the reverse offsets).
    #[error(transparent)]
    Mirror(#[from] mirror::Error),
    /// The verifier failed (its tables, its figures).
    #[error(transparent)]
    Verify(#[from] verifier::Error),
    /// The backfill's plans could not be read.
    #[error(transparent)]
    Backfill(#[from] backfill::Error),
}

impl Error {
    pub(crate) fn postgres(context: &str, source: sqlx::Error) -> Error {
        Error::Postgres {
            context: context.to_string(),
            source,
        }
    }
}
