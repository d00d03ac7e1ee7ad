//! Combining concurrent calls into fewer, larger round trips, with no task
//! of its own: the write path's group commit ([`super::commit`]) and the
//! index maintainer's applies ([`super::index`]) use it per master.
//!
//! At most `lanes` runs go at a time. A call that finds a lane free leads
//! at once, so a call alone is not delayed. A call that finds every lane
//! busy waits; the next run takes it together with every call that waited
//! meanwhile (up to a weight cap), and answers each. When a run ends, its
//! lane passes to the oldest call still waiting, which leads the next.
//!
//! Callers may be cancelled at any point. A lane is a value ([`Lane`])
//! whose drop frees it or hands it on, so a lane cannot leak, even inside a
//! message never read. A waiting call's item is shared with (never only
//! held by) the run that takes it, so a call whose leader is cancelled
//! mid-run is told so ([`Combined::Abandoned`]) and can do its work alone.

use std::collections::VecDeque;
use std::future::Future;
use std::sync::{Arc, Mutex};

use tokio::sync::oneshot;

/// Runs of `T` items, each answered with an `O`.
pub(crate) struct Combiner<T, O> {
    lanes: usize,
    state: Mutex<State<T, O>>,
}

struct State<T, O> {
    /// Calls waiting for a lane, oldest first.
    waiting: VecDeque<Waiting<T, O>>,
    /// Lanes taken.
    busy: usize,
}

struct Waiting<T, O> {
    item: T,
    turn: oneshot::Sender<Turn<T, O>>,
}

/// What a waiting call is told.
enum Turn<T, O> {
    /// Its item went in another call's run.
    Done(O),
    /// A lane is free: lead the next run.
    Lead(Lane<T, O>),
}

/// What became of a call.
pub(crate) enum Combined<O> {
    /// Its answer, from the run that took it (its own or another's).
    Answered(O),
    /// It was taken by a run whose leader was cancelled before answering:
    /// whether the work was done is unknown.
    Abandoned,
}

/// A lane held. Dropped, it passes to the oldest waiting call still
/// waiting, or is freed.
pub(crate) struct Lane<T, O> {
    combiner: Option<Arc<Combiner<T, O>>>,
}

impl<T, O> Drop for Lane<T, O> {
    fn drop(&mut self) {
        if let Some(combiner) = self.combiner.take() {
            combiner.release();
        }
    }
}

/// How many items one run takes at most, by weight, besides its leader's
/// own (which always goes).
pub(crate) struct Cap<W> {
    /// The weight of one item.
    pub weight: W,
    /// The most a run carries.
    pub max: usize,
}

impl<T, O> Combiner<T, O> {
    pub(crate) fn new(lanes: usize) -> Arc<Combiner<T, O>> {
        Arc::new(Combiner {
            lanes: lanes.max(1),
            state: Mutex::new(State {
                waiting: VecDeque::new(),
                busy: 0,
            }),
        })
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State<T, O>> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Passes a lane on to the oldest call still waiting, or frees it.
    fn release(self: Arc<Self>) {
        loop {
            let next = {
                let mut state = self.lock();
                match state.waiting.pop_front() {
                    Some(next) => next,
                    None => {
                        state.busy -= 1;
                        return;
                    }
                }
            };
            let lane = Lane {
                combiner: Some(self.clone()),
            };
            match next.turn.send(Turn::Lead(lane)) {
                Ok(()) => return,
                // That call is gone (its item with it): the next one.
                Err(Turn::Lead(mut lane)) => lane.combiner = None,
                Err(Turn::Done(_)) => unreachable!("a lead was sent"),
            }
        }
    }

    /// Runs `item`, alone or with the calls waiting with it: `run` gets
    /// this call's item first, then the others', and answers each, in
    /// order (an answer missing for an item abandons that call).
    pub(crate) async fn submit<W, F, Fut>(
        self: &Arc<Self>,
        item: T,
        cap: Cap<W>,
        run: F,
    ) -> Combined<O>
    where
        T: Clone,
        W: Fn(&T) -> usize,
        F: FnOnce(Vec<T>) -> Fut,
        Fut: Future<Output = Vec<O>>,
    {
        let (turn, answer) = oneshot::channel();
        let lane = {
            let mut state = self.lock();
            if state.busy < self.lanes {
                state.busy += 1;
                Some(Lane {
                    combiner: Some(self.clone()),
                })
            } else {
                state.waiting.push_back(Waiting {
                    item: item.clone(),
                    turn,
                });
                None
            }
        };
        let lane = match lane {
            Some(lane) => lane,
            None => match answer.await {
                Ok(Turn::Done(outcome)) => return Combined::Answered(outcome),
                Ok(Turn::Lead(lane)) => lane,
                Err(_) => return Combined::Abandoned,
            },
        };
        let mut items = vec![item];
        let mut replies = Vec::new();
        {
            let mut state = self.lock();
            let mut weight = (cap.weight)(&items[0]);
            while let Some(next) = state.waiting.front() {
                let more = (cap.weight)(&next.item);
                if weight + more > cap.max && !replies.is_empty() {
                    break;
                }
                weight += more;
                let next = state.waiting.pop_front().expect("just looked at it");
                items.push(next.item);
                replies.push(next.turn);
            }
        }
        let mut answers = run(items).await.into_iter();
        let own = answers.next();
        for (reply, answer) in replies.into_iter().zip(answers) {
            let _ = reply.send(Turn::Done(answer));
        }
        drop(lane);
        match own {
            Some(answer) => Combined::Answered(answer),
            None => Combined::Abandoned,
        }
    }
}
