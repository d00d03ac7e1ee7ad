//! The mirror's error type, for what is not a cell API call.

/// Everything setting up, running and inspecting the mirror can fail with.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A cell store call failed (Schemaless or the legacy model).
    #[error(transparent)]
    Cell(#[from] schemaless::Error),
    /// Connecting to or preparing the legacy database failed (the layout
    /// against the live schema, DDL).
    #[error(transparent)]
    Legacy(#[from] legacy::Error),
    /// Capture cannot be installed as asked (a missing privilege); nothing
    /// was changed.
    #[error("capture: {0}")]
    Capture(String),
    /// PostgreSQL failed on the mirror's own tables.
    #[error("{context}: {source}")]
    Postgres {
        /// What was being done.
        context: String,
        /// The driver's error.
        #[source]
        source: sqlx::Error,
    },
}

impl Error {
    pub(crate) fn postgres(context: &str) -> impl FnOnce(sqlx::Error) -> Error + '_ {
        move |source| Error::Postgres {
            context: context.to_string(),
            source,
        }
    }

    /// Whether the legacy database cancelled a statement at its
    /// `statement_timeout`.
    pub fn timed_out(&self) -> bool {
        match self {
            Error::Cell(schemaless::Error::Storage { source, .. })
            | Error::Postgres { source, .. } => legacy::connection::timed_out(source),
            _ => false,
        }
    }

    /// Whether trying again may help (a server down, a deadlock).
    pub fn is_retryable(&self) -> bool {
        match self {
            Error::Cell(e) => e.is_retryable(),
            Error::Legacy(e) => e.is_retryable(),
            Error::Postgres { source, .. } => legacy::classify(source).is_retryable(),
            Error::Capture(_) => false,
        }
    }
}
