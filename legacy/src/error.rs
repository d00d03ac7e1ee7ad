//! The error type of the legacy crate's own operations (connecting,
//! resolving the layout, the sample data set, add-uuid). The cell API
//! itself answers with [`schemaless::Error`], the trait's error.

/// Everything connecting to and preparing the legacy database can fail with.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The configuration lacks what this operation needs.
    #[error("config: {0}")]
    Config(String),
    /// The layout does not match the live schema: a missing table or
    /// column, a type no conversion takes, a missing unique index.
    #[error("layout: {0}")]
    Layout(String),
    /// PostgreSQL failed or could not be reached.
    #[error("{context}: {source}")]
    Postgres {
        /// What was being done, as a present-tense phrase.
        context: String,
        /// The driver's error.
        #[source]
        source: sqlx::Error,
    },
    /// A predicate on the parent table that is refused: it does not
    /// parse, reads another table, runs a subquery or a function that is
    /// not allowed, or PostgreSQL cannot plan it.
    #[error("--where: {0}")]
    Predicate(String),
    /// A cell API error (bad input, conflicts, unreadable rows).
    #[error(transparent)]
    Cell(#[from] schemaless::Error),
}

impl Error {
    pub(crate) fn postgres(context: impl Into<String>, source: sqlx::Error) -> Error {
        Error::Postgres {
            context: context.into(),
            source,
        }
    }

    /// Whether trying again may succeed (a lost connection, a deadlock, a
    /// timeout); layout and config errors are final.
    pub fn is_retryable(&self) -> bool {
        match self {
            Error::Postgres { source, .. } => crate::classify(source).is_retryable(),
            Error::Cell(e) => e.is_retryable(),
            _ => false,
        }
    }
}
