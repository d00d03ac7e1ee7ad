//! A batch's evaluations, combined: the values of the rows its statements
//! write are evaluated by PostgreSQL as the app's role, each in a
//! read-only transaction of its own. Run one by one, each costs a round
//! trip, a pooled connection, and a `BEGIN`, the role's and the session's
//! `SET LOCAL`s and a `ROLLBACK` around one `SELECT`: for a driver's batch
//! of single-row INSERTs, most of PostgreSQL's work. [`Evaluations`]
//! sends every evaluation waiting when one is due in one transaction
//! instead ([`Evaluator::first_rows`]), so a batch's rows, evaluated a
//! few at once, share their round trips.
//!
//! Nothing waits to be combined: the first evaluation goes at once, and
//! those asked for while it runs go together next (group commit's way).
//! An evaluation that fails fails alone, as it would by itself: the ones
//! PostgreSQL skipped after it go in the next transaction.

use std::sync::Mutex;

use futures::channel::oneshot;

use super::*;

/// The most evaluations sent in one transaction.
const AT_ONCE: usize = 256;

type Answer = Result<Vec<Option<String>>, Refused>;

/// The evaluations of one batch, combined.
#[derive(Default)]
pub(super) struct Evaluations {
    state: Mutex<Waiting>,
}

#[derive(Default)]
struct Waiting {
    queue: Vec<(String, oneshot::Sender<Answer>)>,
    /// One caller sends the queue's evaluations until it is empty.
    sending: bool,
}

impl Evaluations {
    /// The first row of `sql` evaluated by `eval`, each value as text, in
    /// a transaction with the other evaluations waiting then.
    pub(super) async fn texts(&self, eval: Evaluator<'_>, sql: String) -> Answer {
        let (tx, rx) = oneshot::channel();
        let send = {
            let mut state = self.state.lock().expect("evaluations lock");
            state.queue.push((sql, tx));
            !std::mem::replace(&mut state.sending, true)
        };
        if send {
            let mut sending = Sending(self);
            sending.run(eval).await;
        }
        rx.await.unwrap_or_else(|_| {
            Err(Refused::new(
                "57014",
                "the evaluation of the write's values was abandoned",
            ))
        })
    }
}

/// The caller sending the queue. Dropped before the queue is empty (its
/// future abandoned), it drops what still waits, whose callers then get
/// an error rather than wait for a sender that is gone.
struct Sending<'a>(&'a Evaluations);

impl Sending<'_> {
    async fn run(&mut self, eval: Evaluator<'_>) {
        loop {
            let batch: Vec<(String, oneshot::Sender<Answer>)> = {
                let mut state = self.0.state.lock().expect("evaluations lock");
                if state.queue.is_empty() {
                    state.sending = false;
                    return;
                }
                let n = state.queue.len().min(AT_ONCE);
                state.queue.drain(..n).collect()
            };
            let statements: Vec<String> = batch.iter().map(|(sql, _)| sql.clone()).collect();
            let mut answers = eval.first_rows(&statements).await.into_iter();
            let mut skipped = Vec::new();
            for (sql, tx) in batch {
                match answers.next() {
                    Some(answer) => {
                        let _ = tx.send(first_row(answer.map(|row| row.into_iter().collect())));
                    }
                    None => skipped.push((sql, tx)),
                }
            }
            // Skipped after a failure: first in the next transaction.
            if !skipped.is_empty() {
                let mut state = self.0.state.lock().expect("evaluations lock");
                skipped.append(&mut state.queue);
                state.queue = skipped;
            }
        }
    }
}

impl Drop for Sending<'_> {
    fn drop(&mut self) {
        let mut state = self.0.state.lock().expect("evaluations lock");
        if state.sending {
            state.sending = false;
            state.queue.clear();
        }
    }
}
