//! The backfill's error type.

/// Everything planning, running and inspecting a backfill can fail with.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A cell store call failed (Schemaless or the legacy model).
    #[error(transparent)]
    Cell(#[from] schemaless::Error),
    /// The legacy model could not be set up.
    #[error(transparent)]
    Legacy(#[from] legacy::Error),
    /// PostgreSQL failed on the backfill's tables.
    #[error("{context}: {source}")]
    Postgres {
        /// What was being done.
        context: String,
        /// The driver's error.
        #[source]
        source: sqlx::Error,
    },
    /// A plan exists and replacing it was not asked for.
    #[error("a backfill plan already exists ({0}); `backfill plan --replace` starts over, `backfill plan --extend` adds the ids created since")]
    PlanExists(String),
    /// No plan has that name.
    #[error("there is no backfill plan named {name:?} (plans: {})", if known.is_empty() { "none".to_string() } else { known.join(", ") })]
    NoSuchPlan {
        /// The name asked for.
        name: String,
        /// The plans there are.
        known: Vec<String>,
    },
    /// A plan that cannot be made as asked (a bad name, an unknown column,
    /// an empty range, a predicate refused).
    #[error("{0}")]
    BadPlan(String),
    /// There is no plan yet.
    #[error("there is no backfill plan: run `mezzanine backfill plan` first")]
    NoPlan,
}

impl Error {
    pub(crate) fn postgres(context: &str) -> impl FnOnce(sqlx::Error) -> Error + '_ {
        move |source| Error::Postgres {
            context: context.to_string(),
            source,
        }
    }
}
