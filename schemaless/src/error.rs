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
        /// The SQLSTATE of the refusal, when it is PostgreSQL's (a legacy
        /// store's write, or what it was asked): `23514` for a CHECK,
        /// `22001` for a value too long, … What an app speaking
        /// PostgreSQL's protocol is answered (the proxy). `None` for the
        /// store's own rules.
        sqlstate: Option<String>,
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
        /// What it means, decided when it was made by the classifier of
        /// the driver that raised it ([`crate::mysql::classify`] for
        /// MariaDB, `legacy::classify` for PostgreSQL), so this crate
        /// needs no other database's error codes.
        failure: Failure,
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
            sqlstate: None,
        }
    }

    /// An [`Error::InvalidInput`] that PostgreSQL raises, or would raise,
    /// with `sqlstate`.
    pub fn refused(field: &str, sqlstate: &str, message: impl Into<String>) -> Error {
        Error::InvalidInput {
            field: field.to_string(),
            message: message.into(),
            sqlstate: Some(sqlstate.to_string()),
        }
    }

    /// The SQLSTATE PostgreSQL gives this refusal, when it is
    /// PostgreSQL's ([`Error::refused`]).
    pub fn sqlstate(&self) -> Option<&str> {
        match self {
            Error::InvalidInput { sqlstate, .. } => sqlstate.as_deref(),
            _ => None,
        }
    }

    /// A database error from `node`, its meaning decided by `classify`, the
    /// classifier of the driver that raised it.
    pub fn classified(
        node: impl Into<String>,
        source: sqlx::Error,
        classify: fn(&sqlx::Error) -> Failure,
    ) -> Error {
        Error::Storage {
            node: node.into(),
            failure: classify(&source),
            source,
        }
    }

    /// Prefixes the field of an input error with the cell's index in its
    /// batch: `body` becomes `cells[3].body`.
    pub fn in_batch(self, index: usize) -> Error {
        match self {
            Error::InvalidInput {
                field,
                message,
                sqlstate,
            } => Error::InvalidInput {
                field: format!("cells[{index}].{field}"),
                message,
                sqlstate,
            },
            other => other,
        }
    }

    /// The index in its batch of the cell an input error is about, as
    /// [`Error::in_batch`] put it.
    pub fn batch_index(&self) -> Option<usize> {
        let Error::InvalidInput { field, .. } = self else {
            return None;
        };
        field
            .strip_prefix("cells[")?
            .split(']')
            .next()?
            .parse()
            .ok()
    }

    /// Whether the same call may succeed if simply tried again: a node that
    /// could not be reached, a timeout, a deadlock. Input errors, conflicts
    /// and corrupt cells are final.
    pub fn is_retryable(&self) -> bool {
        match self {
            Error::Storage { failure, .. } => failure.is_retryable(),
            Error::Timeout { .. } | Error::Unavailable { .. } | Error::NodeFailed { .. } => true,
            Error::Remote { retryable, .. } => *retryable,
            _ => false,
        }
    }

    /// What a database error means, if this is one.
    pub fn failure(&self) -> Option<Failure> {
        match self {
            Error::Storage { failure, .. } => Some(*failure),
            _ => None,
        }
    }

    /// Whether a table or database does not exist (yet): an instance whose
    /// schema predates a table has nothing in it.
    pub fn is_missing_table(&self) -> bool {
        self.failure() == Some(Failure::MissingTable)
    }

    /// Whether the shard was being moved or had moved away from the node
    /// written (see [`Failure::Moving`]).
    pub fn is_moving(&self) -> bool {
        self.failure() == Some(Failure::Moving)
    }

    /// Whether a statement failed on a duplicate key: on a cell insert, an
    /// address that exists.
    pub fn is_unique_violation(&self) -> bool {
        self.failure() == Some(Failure::UniqueViolation)
    }

    /// A deadlock, lock wait timeout or serialization failure: the
    /// statement was rolled back and may simply be tried again.
    pub fn is_lock_conflict(&self) -> bool {
        self.failure() == Some(Failure::Conflict)
    }

    /// Whether the node itself failed — down, frozen, shutting down, or no
    /// longer the master (read-only) — as opposed to answering with an
    /// error. These count against the node's circuit breaker, send master
    /// reads to a minion and writes to the buffers.
    pub fn is_unavailable(&self) -> bool {
        match self {
            Error::Timeout { .. } | Error::Unavailable { .. } | Error::NodeFailed { .. } => true,
            _ => self.failure() == Some(Failure::Unavailable),
        }
    }
}

/// What a database error means to its caller, whichever database said it.
///
/// Each driver has exactly one classifier that turns its error numbers or
/// SQLSTATEs into a `Failure`: [`crate::mysql::classify`] for MariaDB,
/// `legacy::classify` for PostgreSQL. Every retry decision, breaker and
/// fallback asks the kind, never an error code, so a code learned once is
/// known everywhere.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Failure {
    /// A deadlock, a lock wait that timed out, a serialization failure:
    /// the statement or transaction was rolled back; running it again is
    /// the cure.
    Conflict,
    /// The node failed: unreachable, connection lost, shutting down, or
    /// read-only (a master being replaced). It counts against the node.
    Unavailable,
    /// The node is up but turned this call away for now: too many
    /// connections, a statement timeout, a query interrupted, a connection
    /// error the server reported. Retried, not held against the node.
    Busy,
    /// The shard is being moved to another cluster and its writes are
    /// fenced for a moment (or it has moved, and this node holds its old,
    /// read-only copy): re-read the placements and try again (see
    /// [`crate::mysql::moves`]).
    Moving,
    /// A duplicate key.
    UniqueViolation,
    /// The table or database does not exist (yet).
    MissingTable,
    /// The statement or a value is larger than the server takes (a packet
    /// over `max_allowed_packet`): retrying sends the same bytes.
    TooLarge,
    /// A value the server cannot take as its column's type: too long, out
    /// of range, malformed (PostgreSQL's data exceptions, class 22).
    BadValue,
    /// A value a constraint refuses (NOT NULL, CHECK, foreign key,
    /// exclusion), or a trigger of the table raising an exception.
    ConstraintViolation,
    /// Anything else: a final answer from the server.
    Other,
}

impl Failure {
    /// Whether the same call may succeed if simply tried again.
    pub fn is_retryable(self) -> bool {
        matches!(
            self,
            Failure::Conflict | Failure::Unavailable | Failure::Busy | Failure::Moving
        )
    }

    /// The kind of the driver's own failures, which no server sent: an I/O
    /// error, a pool that timed out, a crashed connection worker, a broken
    /// protocol exchange are all the node being unreachable. `None` for a
    /// server's error, which the driver's classifier reads.
    pub fn of_transport(source: &sqlx::Error) -> Option<Failure> {
        match source {
            sqlx::Error::Io(_)
            | sqlx::Error::PoolTimedOut
            | sqlx::Error::WorkerCrashed
            | sqlx::Error::Protocol(_) => Some(Failure::Unavailable),
            _ => None,
        }
    }
}

/// Results of the store.
pub type Result<T, E = Error> = std::result::Result<T, E>;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_batch_index_is_read_back_from_an_input_error() {
        let e = Error::invalid("body.fare", "not a number").in_batch(12);
        assert_eq!(e.to_string(), "invalid cells[12].body.fare: not a number");
        assert_eq!(e.batch_index(), Some(12));
        assert_eq!(Error::invalid("body", "x").batch_index(), None);
        assert_eq!(Error::invalid("cells[x].body", "x").batch_index(), None);
        assert_eq!(
            Error::Schema("cells[1]".into()).in_batch(2).batch_index(),
            None
        );
    }
}
