//! The one error type of the store.

use crate::cell::CellKey;

/// Everything a cell store call can fail with.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The caller passed something the API does not accept; nothing was
    /// written. `field` names it (`row_key`, `column`, `cells[3].body`, …).
    #[error("invalid {field}: {message}")]
    InvalidInput {
        /// The offending field, with the index of the cell in a batch.
        field: String,
        /// What is wrong with it.
        message: String,
    },
    /// A cell with this address exists with a different body. Cells are
    /// immutable: the stored cell is unchanged.
    #[error("conflict: cell {key} already exists with a different body")]
    Conflict {
        /// The address both bodies claim.
        key: CellKey,
    },
    /// A stored body could not be decoded: it was damaged on disk or
    /// written by something that is not this store.
    #[error("corrupt cell {cell} (shard {shard}, added_id {added_id}): {reason}")]
    CorruptCell {
        /// The cell's address, or what could be read of it.
        cell: String,
        /// The shard it lives in.
        shard: u32,
        /// Its change-log position.
        added_id: u64,
        /// What was wrong with it.
        reason: String,
    },
    /// The shard number is not one of this instance's.
    #[error("shard {shard} does not exist: the instance has {shard_count} shards")]
    NoSuchShard {
        /// The shard asked for.
        shard: u32,
        /// How many shards the instance has.
        shard_count: u32,
    },
    /// A storage node failed or could not be reached.
    #[error("storage node {node}: {source}")]
    Storage {
        /// Which node (URL without password).
        node: String,
        /// The driver's error.
        #[source]
        source: sqlx::Error,
    },
    /// The write transaction this call's cells were combined into (see
    /// [`crate::mysql::commit`]) failed because its node did: down,
    /// unreachable, or no longer the master. Whether the cells landed is
    /// unknown; retrying is safe. The caller whose call led the
    /// transaction gets the node's own error.
    #[error("storage node {node}: {reason}")]
    NodeFailed {
        /// Which node (URL without password).
        node: String,
        /// The node's error, as text.
        reason: String,
    },
    /// A storage node did not answer within `storage.request_timeout_ms`.
    /// A write that timed out may or may not have landed; retrying it is
    /// safe (it comes back `AlreadyPresent` if it did).
    #[error("storage node {node}: no answer within {after:?}")]
    Timeout {
        /// Which node (URL without password).
        node: String,
        /// The timeout in force.
        after: std::time::Duration,
    },
    /// The node's circuit breaker is open: it failed repeatedly and is not
    /// asked again until a probe finds it answering (see
    /// [`crate::mysql::breaker`]). Retryable.
    #[error("storage node {node} is unavailable (circuit breaker open after: {reason})")]
    Unavailable {
        /// Which node (URL without password).
        node: String,
        /// The failure that opened the breaker.
        reason: String,
    },
    /// A write was refused before it was sent: with `storage.durability =
    /// "two_hosts"` and no buffered writes, its master does not run
    /// semi-synchronous replication that would put it on a second host.
    /// Nothing was written; retrying helps once the master does.
    #[error(
        "storage node {node}: write refused, it would be acknowledged on one host only: {reason}"
    )]
    NotDurable {
        /// Which master (URL without password).
        node: String,
        /// What its replication lacks, and how to fix it.
        reason: String,
    },
    /// The store was created outside a Tokio runtime; its connection pools
    /// need one.
    #[error("the MySQL store must be created inside a Tokio runtime")]
    NoRuntime,
    /// The schema on the servers does not match this configuration.
    #[error("schema: {0}")]
    Schema(String),
    /// The store cannot do this at all (e.g. the legacy model has no change
    /// log). Final: retrying cannot help.
    ///
    /// Shared rather than legacy-only because `CellStore` is one trait
    /// over stores of unequal reach (the legacy model, the memory model
    /// without every version, a worker of an older release): a generic
    /// caller, the facade above all, needs one final "not here" it can
    /// route around, whichever store said it.
    #[error("{operation} is unsupported here: {reason}")]
    Unsupported {
        /// The API call.
        operation: &'static str,
        /// Why, and what to do instead.
        reason: String,
    },
    /// A remote store (a worker, called over HTTP by the client crate)
    /// answered with an error that has no variant of its own here, or
    /// could not be reached by any attempt.
    #[error("{node}: {code}: {message}")]
    Remote {
        /// The worker (its URL), or `workers` when every one was tried.
        node: String,
        /// The worker's error code (`internal`, `unavailable`, …).
        code: String,
        /// What it said.
        message: String,
        /// Whether the same call may succeed if tried again.
        retryable: bool,
    },
    /// A stored value cannot be turned into a cell (a legacy row whose
    /// value the layout's conversion refuses). Other rows are unaffected.
    #[error("cannot read {what} as a cell: {reason}")]
    Unreadable {
        /// Which row and field.
        what: String,
        /// What was wrong with it.
        reason: String,
    },
}

impl Error {
    /// An [`Error::InvalidInput`].
    pub fn invalid(field: &str, message: impl Into<String>) -> Error {
        Error::InvalidInput {
            field: field.to_string(),
            message: message.into(),
        }
    }

    /// Prefixes the field of an input error with the cell's index in its
    /// batch: `body` becomes `cells[3].body`.
    pub fn in_batch(self, index: usize) -> Error {
        match self {
            Error::InvalidInput { field, message } => Error::InvalidInput {
                field: format!("cells[{index}].{field}"),
                message,
            },
            other => other,
        }
    }

    /// Whether the same call may succeed if simply tried again: a node that
    /// could not be reached, a timeout, a deadlock. Input errors, conflicts
    /// and corrupt cells are final.
    pub fn is_retryable(&self) -> bool {
        match self {
            Error::Storage { source, .. } => driver_error_is_retryable(source),
            Error::Timeout { .. } | Error::Unavailable { .. } | Error::NodeFailed { .. } => true,
            Error::Remote { retryable, .. } => *retryable,
            _ => false,
        }
    }

    /// Whether a table or database does not exist (yet): an instance whose
    /// schema predates a table has nothing in it.
    pub fn is_missing_table(&self) -> bool {
        matches!(self, Error::Storage { source: sqlx::Error::Database(db), .. }
            if db
                .try_downcast_ref::<sqlx::mysql::MySqlDatabaseError>()
                .is_some_and(|e| matches!(e.number(), 1146 | 1049)))
    }

    /// Whether a MySQL statement failed on a duplicate key: on a cell
    /// insert, an address that exists.
    pub fn is_unique_violation(&self) -> bool {
        matches!(self, Error::Storage { source: sqlx::Error::Database(db), .. } if db.is_unique_violation())
    }

    /// A deadlock or lock wait timeout on MySQL: the statement was rolled
    /// back and may simply be tried again.
    pub fn is_lock_conflict(&self) -> bool {
        matches!(self, Error::Storage { source: sqlx::Error::Database(db), .. }
            if db
                .try_downcast_ref::<sqlx::mysql::MySqlDatabaseError>()
                .is_some_and(|m| matches!(m.number(), 1205 | 1213)))
    }

    /// Whether the node itself failed — down, frozen, shutting down, or no
    /// longer the master (read-only) — as opposed to answering with an
    /// error. These count against the node's circuit breaker, send master
    /// reads to a minion and writes to the buffers.
    pub fn is_unavailable(&self) -> bool {
        match self {
            Error::Timeout { .. } | Error::Unavailable { .. } | Error::NodeFailed { .. } => true,
            Error::Storage { source, .. } => match source {
                sqlx::Error::Io(_)
                | sqlx::Error::PoolTimedOut
                | sqlx::Error::WorkerCrashed
                | sqlx::Error::Protocol(_) => true,
                sqlx::Error::Database(db) => db
                    .try_downcast_ref::<sqlx::mysql::MySqlDatabaseError>()
                    // server shutting down, read-only (a demoted master),
                    // connection killed
                    .is_some_and(|e| matches!(e.number(), 1053 | 1290 | 1927)),
                _ => false,
            },
            _ => false,
        }
    }
}

/// Whether a driver error may go away if the same call is tried again: a
/// node that could not be reached, a pool that timed out, a deadlock or
/// lock timeout, a server shutting down (by MySQL error number or by
/// SQLSTATE, which PostgreSQL reports too).
pub fn driver_error_is_retryable(source: &sqlx::Error) -> bool {
    match source {
        sqlx::Error::Io(_)
        | sqlx::Error::PoolTimedOut
        | sqlx::Error::WorkerCrashed
        | sqlx::Error::Protocol(_) => true,
        sqlx::Error::Database(db) => {
            let mysql = db
                .try_downcast_ref::<sqlx::mysql::MySqlDatabaseError>()
                .is_some_and(|e| {
                    matches!(
                        e.number(),
                        // too many connections, server shutting down,
                        // lock wait timeout, deadlock, read-only (a
                        // master being replaced), query interrupted
                        1040 | 1053 | 1205 | 1213 | 1290 | 1317 | 1927
                    )
                });
            // The same cases by SQLSTATE, which the legacy model's
            // PostgreSQL reports: serialization failure, deadlock,
            // lock not available, statement timeout, too many
            // connections, shutdown, connection failures.
            let sqlstate = db.code().is_some_and(|code| {
                matches!(
                    code.as_ref(),
                    "40001" | "40P01" | "55P03" | "57014" | "53300" | "57P01" | "57P02" | "57P03"
                ) || code.starts_with("08")
            });
            mysql || sqlstate
        }
        _ => false,
    }
}

/// Results of the store.
pub type Result<T, E = Error> = std::result::Result<T, E>;
