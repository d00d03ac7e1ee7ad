//! The verifier's error type.

/// Everything verifying and repairing can fail with.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A cell store call failed (Schemaless or the legacy model).
    #[error(transparent)]
    Cell(#[from] schemaless::Error),
    /// A legacy-model setup call failed.
    #[error(transparent)]
    Legacy(#[from] legacy::Error),
    /// PostgreSQL failed on the verifier's own tables.
    #[error("{context}: {source}")]
    Postgres {
        /// What was being done.
        context: String,
        /// The driver's error.
        #[source]
        source: sqlx::Error,
    },
    /// A request that cannot be carried out as asked.
    #[error("{0}")]
    Refused(String),
    /// Bad usage: an unknown column, an empty range.
    #[error("{0}")]
    Usage(String),
}

impl Error {
    pub(crate) fn postgres(context: &str) -> impl FnOnce(sqlx::Error) -> Error + '_ {
        move |source| Error::Postgres {
            context: context.to_string(),
            source,
        }
    }
}
