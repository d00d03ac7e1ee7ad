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
//!
//! Within a transaction, evaluations of as many values each (a driver's
//! batch of one statement, row after row) go in one `SELECT` of their
//! `UNION ALL`, each row tagged with its place: PostgreSQL then parses,
//! plans and runs one statement where it ran one per row, which was most
//! of its work per row. Should that statement fail, its evaluations go
//! again each alone in the next transaction, so the one that fails
//! fails with its own error and the others are answered as before.

use std::sync::Mutex;

use futures::channel::oneshot;

use super::*;

/// The most evaluations sent in one transaction.
const AT_ONCE: usize = 256;

type Answer = Result<Vec<Option<String>>, Refused>;

/// The most evaluations in one `UNION ALL`.
const UNION_AT_ONCE: usize = 64;

/// One evaluation waiting: its statement, how many values it gives,
/// whether it must go alone (its union failed), and who waits for it.
struct Waiter {
    sql: String,
    values: usize,
    alone: bool,
    tx: oneshot::Sender<Answer>,
}

/// The evaluations of one batch, combined.
#[derive(Default)]
pub(super) struct Evaluations {
    state: Mutex<Waiting>,
}

#[derive(Default)]
struct Waiting {
    queue: Vec<Waiter>,
    /// One caller sends the queue's evaluations until it is empty.
    sending: bool,
}

impl Evaluations {
    /// The first row of `sql` (a `SELECT` of `values` values, one row)
    /// evaluated by `eval`, each value as text, in a transaction with the
    /// other evaluations waiting then.
    pub(super) async fn texts(&self, eval: Evaluator<'_>, sql: String, values: usize) -> Answer {
        let (tx, rx) = oneshot::channel();
        let send = {
            let mut state = self.state.lock().expect("evaluations lock");
            state.queue.push(Waiter {
                sql,
                values,
                alone: false,
                tx,
            });
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
            let batch: Vec<Waiter> = {
                let mut state = self.0.state.lock().expect("evaluations lock");
                if state.queue.is_empty() {
                    state.sending = false;
                    return;
                }
                let n = state.queue.len().min(AT_ONCE);
                state.queue.drain(..n).collect()
            };
            let statements = combined(&batch);
            let sqls: Vec<String> = statements.iter().map(|(sql, _)| sql.clone()).collect();
            let mut answers = eval.statement_rows(&sqls).await.into_iter();
            let mut batch: Vec<Option<Waiter>> = batch.into_iter().map(Some).collect();
            let mut skipped = Vec::new();
            for (_, members) in statements {
                let answer = answers.next();
                let union = members.len() > 1;
                let mut waiters = members.iter().filter_map(|&i| batch[i].take());
                match (answer, union) {
                    (Some(Ok(rows)), true) => answer_union(waiters.collect(), rows),
                    // The union failed: each of its evaluations again,
                    // alone, to fail with its own error.
                    (Some(Err(_)), true) => {
                        skipped.extend(waiters.map(|w| Waiter { alone: true, ..w }))
                    }
                    (Some(answer), false) => {
                        if let Some(waiter) = waiters.next() {
                            let _ = waiter.tx.send(first_row(answer));
                        }
                    }
                    (None, _) => skipped.extend(waiters),
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

/// The statements sending `batch` takes: each run of evaluations of as
/// many values (none of them to go alone) in one `UNION ALL` of up to
/// [`UNION_AT_ONCE`], each row tagged with its evaluation's place in the
/// union; the rest as they are. With the places in `batch` each answers.
fn combined(batch: &[Waiter]) -> Vec<(String, Vec<usize>)> {
    let mut out: Vec<(String, Vec<usize>)> = Vec::new();
    let mut at = 0;
    while at < batch.len() {
        let first = &batch[at];
        let mut end = at + 1;
        if !first.alone {
            while end < batch.len()
                && end - at < UNION_AT_ONCE
                && !batch[end].alone
                && batch[end].values == first.values
            {
                end += 1;
            }
        }
        if end - at == 1 {
            out.push((first.sql.clone(), vec![at]));
        } else {
            let branches: Vec<String> = (at..end)
                .enumerate()
                .map(|(place, i)| format!("SELECT {place}, t.* FROM ({}) AS t", batch[i].sql))
                .collect();
            out.push((branches.join(" UNION ALL "), (at..end).collect()));
        }
        at = end;
    }
    out
}

/// Each of `waiters` answered from the row of a union tagged with its
/// place; one that got no row is told so.
fn answer_union(waiters: Vec<Waiter>, rows: Vec<sqlx::postgres::PgRow>) {
    use sqlx::Row as _;
    let mut by_place: Vec<Option<Answer>> = (0..waiters.len()).map(|_| None).collect();
    for row in rows {
        let place = row
            .try_get::<i32, _>(0)
            .ok()
            .and_then(|p| usize::try_from(p).ok());
        if let Some(slot) = place.and_then(|p| by_place.get_mut(p)) {
            *slot = Some(
                (1..row.len())
                    .map(|i| {
                        row.try_get::<Option<String>, _>(i)
                            .map_err(|e| Refused::new("XX000", e.to_string()))
                    })
                    .collect(),
            );
        }
    }
    for (waiter, answer) in waiters.into_iter().zip(by_place) {
        let _ =
            waiter.tx.send(answer.unwrap_or_else(|| {
                Err(Refused::new("XX000", "the values' evaluation gave no row"))
            }));
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
