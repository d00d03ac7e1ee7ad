//! A node's connections as its callers hold them: a pooled connection
//! that, when its last call finished cleanly, goes back to a short stack
//! of the node's own instead of to the pool.
//!
//! sqlx 0.9 pings every connection on its way back into the pool (on a
//! task it spawns for each) to find one a cancelled call left half-read.
//! On the hot paths that is a second round trip for every statement, a
//! task hand-off, and the connection unavailable until the ping returns;
//! measured on `bench cells`, pool acquire and release were a fifth of a
//! point read's client CPU. A [`NodeConnection`] knows whether its calls
//! finished: [`super::topology::Node::run`] marks it settled when a call
//! completed (its answer read to the end, an error answer included), and
//! any other use of the connection (a mutable borrow outside `run`, a call
//! cut off by a timeout or a cancelled caller) leaves it unsettled. Only a
//! settled connection goes on the stack; every other one goes back to the
//! pool, which pings it as before, or is closed.
//!
//! The stack is last in, first out, so under load the same few
//! connections cycle and the rest age; a connection that sat on it longer
//! than [`STALE_AFTER`] is not trusted without a ping and is handed back to
//! the pool (which pings it) instead of being used.
//!
//! A connection on the stack is still one of the pool's, counted against
//! its size, and a caller waiting in the pool would not see it: with every
//! connection out, a caller that found the stack empty waits in the pool
//! while the others come back to the stack, until its acquire times out.
//! So a caller on its way to the pool says so ([`Spares::take_or_wait`]),
//! under the same lock as the stack, and while anyone waits there, finished
//! connections go back to the pool instead of the stack.

use std::ops::{Deref, DerefMut};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use sqlx::pool::PoolConnection;
use sqlx::MySql;

/// How long a connection may rest on the stack and still be used without
/// a ping: the same as the pool's rule for its idle connections.
pub(super) const STALE_AFTER: Duration = Duration::from_secs(1);

/// A node's stack of settled connections.
#[derive(Debug, Default)]
pub(super) struct Spares {
    stack: Mutex<Stack>,
}

#[derive(Debug, Default)]
struct Stack {
    /// Connections and when each came back, the newest last.
    resting: Vec<(PoolConnection<MySql>, Instant)>,
    /// Set by [`Spares::close`]: nothing is kept any more.
    closed: bool,
    /// Callers waiting for a connection from the pool.
    waiting: usize,
}

impl Spares {
    /// The newest resting connection, if one rested less than
    /// [`STALE_AFTER`]; otherwise a [`Waiting`] mark for the caller to hold
    /// while it takes one from the pool. Older ones are all handed back to
    /// the pool (they are older than the one on top), outside the lock.
    pub(super) fn take_or_wait(self: &Arc<Self>) -> Result<PoolConnection<MySql>, Waiting> {
        let stale = {
            let mut stack = self.stack.lock().unwrap_or_else(|p| p.into_inner());
            let stale = match stack.resting.pop() {
                Some((conn, since)) if since.elapsed() < STALE_AFTER => return Ok(conn),
                Some(top) => {
                    let mut stale = std::mem::take(&mut stack.resting);
                    stale.push(top);
                    stale
                }
                None => Vec::new(),
            };
            stack.waiting += 1;
            stale
        };
        drop(stale);
        Err(Waiting(self.clone()))
    }

    /// Keeps `conn` for the next caller, at most `keep` of them; `false`
    /// (and `conn` dropped back into the pool) when the stack is full or
    /// closed.
    fn put(&self, conn: PoolConnection<MySql>, keep: usize) -> bool {
        let mut stack = self.stack.lock().unwrap_or_else(|p| p.into_inner());
        if stack.closed || stack.waiting > 0 || stack.resting.len() >= keep {
            drop(stack);
            drop(conn);
            return false;
        }
        stack.resting.push((conn, Instant::now()));
        true
    }

    /// Hands every resting connection back to the pool and keeps none from
    /// now on: the pool's `close` waits for its connections to come back.
    pub(super) fn close(&self) {
        let resting = {
            let mut stack = self.stack.lock().unwrap_or_else(|p| p.into_inner());
            stack.closed = true;
            std::mem::take(&mut stack.resting)
        };
        drop(resting);
    }

    /// How many connections rest on the stack.
    pub(super) fn len(&self) -> usize {
        self.stack
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .resting
            .len()
    }
}

/// A caller waiting for a connection from the pool; while one is held,
/// finished connections go back to the pool, where it waits.
pub(super) struct Waiting(Arc<Spares>);

impl Drop for Waiting {
    fn drop(&mut self) {
        let mut stack = self.0.stack.lock().unwrap_or_else(|p| p.into_inner());
        stack.waiting -= 1;
    }
}

/// A connection taken from a node. Dereferences to the pooled connection;
/// dropped, it goes back as the module says.
pub struct NodeConnection {
    conn: Option<PoolConnection<MySql>>,
    spares: Arc<Spares>,
    /// How many connections the node keeps on its stack.
    keep: usize,
    /// Whether every use finished: set by `Node::run` after a completed
    /// call, cleared by any mutable use.
    settled: bool,
    /// [`NodeConnection::close_on_drop`] was called.
    closing: bool,
    /// A transaction is open on it across calls ([`NodeConnection::begin_transaction`]).
    transaction: bool,
}

impl NodeConnection {
    pub(super) fn new(conn: PoolConnection<MySql>, spares: Arc<Spares>, keep: usize) -> Self {
        NodeConnection {
            conn: Some(conn),
            spares,
            keep,
            settled: true,
            closing: false,
            transaction: false,
        }
    }

    /// Says that a transaction is open on the connection across calls
    /// (`START TRANSACTION` sent, `COMMIT` or `ROLLBACK` not yet answered).
    /// Dropped in that state (its caller cancelled between two calls) the
    /// connection is closed, which rolls the transaction back: neither the
    /// pool nor the node's stack would know to, and the next caller's
    /// statements would run inside it, its `START TRANSACTION` committing
    /// the rows left behind.
    pub fn begin_transaction(&mut self) {
        self.transaction = true;
    }

    /// Says that the transaction [`NodeConnection::begin_transaction`]
    /// marked was committed or rolled back.
    pub fn end_transaction(&mut self) {
        self.transaction = false;
    }

    /// Closes the connection when it is dropped instead of reusing it.
    pub fn close_on_drop(&mut self) {
        self.closing = true;
        if let Some(conn) = self.conn.as_mut() {
            conn.close_on_drop();
        }
    }

    /// Marks the connection's last use as finished: its answer was read to
    /// the end.
    pub(super) fn settle(&mut self) {
        self.settled = true;
    }

    fn inner(&self) -> &PoolConnection<MySql> {
        // Only `drop` takes it out.
        self.conn
            .as_ref()
            .expect("a NodeConnection holds its connection until dropped")
    }
}

impl Deref for NodeConnection {
    type Target = PoolConnection<MySql>;

    fn deref(&self) -> &Self::Target {
        self.inner()
    }
}

impl DerefMut for NodeConnection {
    fn deref_mut(&mut self) -> &mut Self::Target {
        // Whoever borrows it may leave a call half done.
        self.settled = false;
        self.conn
            .as_mut()
            .expect("a NodeConnection holds its connection until dropped")
    }
}

impl Drop for NodeConnection {
    fn drop(&mut self) {
        let Some(conn) = self.conn.take() else {
            return;
        };
        if self.transaction {
            let mut conn = conn;
            conn.close_on_drop();
            return;
        }
        if self.settled && !self.closing {
            self.spares.put(conn, self.keep);
        }
        // Otherwise `conn` drops here: back to the pool, which pings it, or
        // closed if `close_on_drop` was called.
    }
}

impl std::fmt::Debug for NodeConnection {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NodeConnection")
            .field("settled", &self.settled)
            .field("closing", &self.closing)
            .field("transaction", &self.transaction)
            .finish_non_exhaustive()
    }
}
