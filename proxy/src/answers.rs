//! What PostgreSQL owes a session: one entry per message sent to it that
//! it answers, in the order sent, so the relay knows which answer is
//! which.
//!
//! PostgreSQL answers in order: `ParseComplete` a `Parse`,
//! `BindComplete` a `Bind`, `CloseComplete` a `Close`, a `RowDescription`
//! or `NoData` a `Describe` (a statement's after its
//! `ParameterDescription`), `CommandComplete`, `EmptyQueryResponse` or
//! `PortalSuspended` an `Execute`, `ReadyForQuery` a `Sync`, a `Query`
//! (all of its answers before) and a `FunctionCall`. After an error in
//! the extended protocol it skips every message up to the next `Sync`,
//! `Query`s included. Notices, notifications and parameter changes come
//! at any time and answer nothing.
//!
//! The relay needs to know for two things: the `RowDescription` of a read
//! served from Schemaless names its columns' tables ([`Owed::origins`]),
//! and the answers to messages the proxy sent on its own (the `Close` and
//! `Parse` of a served `Bind`) are not the app's to see
//! ([`Owed::ours`]). An answer that fits nothing owed means the count is
//! lost: the session stops serving from Schemaless
//! ([`Answers::lost`]) and relays everything.

use std::collections::VecDeque;

use query::run::Origin;

/// The answer a message sent to PostgreSQL waits for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Awaits {
    Parse,
    Bind,
    Close,
    Describe,
    Execute,
    /// `ReadyForQuery`, after a `Sync`.
    Sync,
    /// `ReadyForQuery`, after a `Query` or a `FunctionCall` (or the
    /// startup): every answer before it is the query's.
    Query,
}

impl Awaits {
    /// What an app's message of type `kind` waits for, if anything.
    pub(crate) fn of(kind: u8) -> Option<Awaits> {
        Some(match kind {
            b'P' => Awaits::Parse,
            b'B' => Awaits::Bind,
            b'C' => Awaits::Close,
            b'D' => Awaits::Describe,
            b'E' => Awaits::Execute,
            b'S' => Awaits::Sync,
            b'Q' | b'F' => Awaits::Query,
            _ => return None,
        })
    }

    fn ready(self) -> bool {
        matches!(self, Awaits::Sync | Awaits::Query)
    }
}

/// One answer owed.
#[derive(Debug)]
pub(crate) struct Owed {
    pub awaits: Awaits,
    /// Sent by the proxy on its own: its answer is not relayed (an error
    /// is: the app's next step failed).
    pub ours: bool,
    /// The tables and attribute numbers its `RowDescription` names.
    pub origins: Option<Vec<Origin>>,
    /// The command tag its `CommandComplete` is to carry instead of
    /// PostgreSQL's: a write run through the facade, whose answer
    /// PostgreSQL renders with another statement.
    pub tag: Option<String>,
    /// Part of the proxy's probe of the session (`relay::probe`): its
    /// rows, its error and its `ReadyForQuery` are the proxy's too.
    pub probe: bool,
    /// A `Describe` of this prepared statement (its name and its text),
    /// whose `Parse` left parameter types unspecified: the types
    /// PostgreSQL resolved, in its `ParameterDescription`, are taken
    /// ([`Answers::described`]).
    pub describes: Option<(String, String)>,
    /// A simple `Query` the proxy composed of several statements (writes
    /// run through the facade): the origins and tag of each statement
    /// after the first, taken in turn as each `CommandComplete` passes.
    pub then: VecDeque<(Option<Vec<Origin>>, Option<String>)>,
}

/// What the proxy's probe of the session got.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Probed {
    /// Its one row's `DataRow` body.
    Row(Vec<u8>),
    /// An error, or no row.
    Failed,
}

/// What becomes of an answer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Seen {
    /// The app sees it as PostgreSQL sent it (its body maybe rewritten in
    /// place).
    Relay,
    /// It answers the proxy's own message: the app does not see it.
    Kept,
    /// A `CommandComplete` the app sees with this tag.
    Retag(String),
}

impl Owed {
    /// What the proxy's probe of the session is answered by, in order:
    /// its `Parse`, `Bind`, `Execute`, `Close` and `Sync`.
    pub(crate) const PROBE: [Awaits; 5] = [
        Awaits::Parse,
        Awaits::Bind,
        Awaits::Execute,
        Awaits::Close,
        Awaits::Sync,
    ];

    /// One answer to the proxy's probe: kept from the app, its row taken.
    pub(crate) fn probe(awaits: Awaits) -> Owed {
        Owed {
            awaits,
            ours: true,
            origins: None,
            tag: None,
            probe: true,
            describes: None,
            then: VecDeque::new(),
        }
    }

    /// One answer to a message the proxy sent on its own: kept from the
    /// app (but an error).
    pub(crate) fn ours(awaits: Awaits) -> Owed {
        Owed {
            ours: true,
            ..Owed::app(awaits)
        }
    }

    pub(crate) fn app(awaits: Awaits) -> Owed {
        Owed {
            awaits,
            ours: false,
            origins: None,
            tag: None,
            probe: false,
            describes: None,
            then: VecDeque::new(),
        }
    }
}

/// The answers owed, in order.
#[derive(Debug)]
pub(crate) struct Answers {
    owed: VecDeque<Owed>,
    /// `ReadyForQuery`s among them.
    readies: usize,
    lost: bool,
    /// An extended-protocol message failed and PostgreSQL skips what
    /// comes to it until the next `Sync`: messages sent after the error
    /// arrived (a held `Bind` let go behind it) are skipped unanswered.
    skipping: bool,
    /// The row the probe in flight got so far, and whether it failed.
    probe_row: Option<Vec<u8>>,
    probe_failed: bool,
    /// What the last probe got, once its `ReadyForQuery` came.
    probed: Option<Probed>,
    /// A `ParameterDescription` of a statement the relay asked to learn.
    described: Option<Described>,
}

/// The parameter types PostgreSQL resolved for a prepared statement.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Described {
    pub name: String,
    pub sql: String,
    pub types: Vec<u32>,
}

impl Answers {
    /// A session just started: the startup's `ReadyForQuery` is owed.
    pub(crate) fn starting() -> Answers {
        let mut answers = Answers {
            owed: VecDeque::new(),
            readies: 0,
            lost: false,
            skipping: false,
            probe_row: None,
            probe_failed: false,
            probed: None,
            described: None,
        };
        answers.push(Owed::app(Awaits::Query));
        answers
    }

    pub(crate) fn push(&mut self, owed: Owed) {
        self.readies += usize::from(owed.awaits.ready());
        self.owed.push_back(owed);
    }

    /// `ReadyForQuery`s still owed.
    pub(crate) fn readies(&self) -> usize {
        self.readies
    }

    /// Nothing is owed: not even an unsynced extended-protocol message
    /// (whose implicit transaction is open).
    pub(crate) fn settled(&self) -> bool {
        self.owed.is_empty()
    }

    /// What the probe got, once it is over (taken).
    pub(crate) fn probed(&mut self) -> Option<Probed> {
        self.probed.take()
    }

    /// The parameter types of a statement described since last asked
    /// (taken).
    pub(crate) fn described(&mut self) -> Option<Described> {
        self.described.take()
    }

    /// An extended-protocol message failed since the last `Sync` was
    /// answered: PostgreSQL skips what it is sent up to the next one.
    pub(crate) fn skipping(&self) -> bool {
        self.skipping
    }

    /// Whether an answer ever fitted nothing owed.
    pub(crate) fn lost(&self) -> bool {
        self.lost
    }

    fn pop(&mut self) -> Option<Owed> {
        let owed = self.owed.pop_front()?;
        self.readies -= usize::from(owed.awaits.ready());
        Some(owed)
    }

    /// Takes in one answer (`body` may be rewritten in place): whether the
    /// app is to see it, and how.
    pub(crate) fn answer(&mut self, kind: u8, body: &mut [u8]) -> Seen {
        let Some(front) = self.owed.front() else {
            // Only what comes at any time is owed nothing.
            if !matches!(kind, b'N' | b'A' | b'S') {
                self.lost = true;
            }
            return Seen::Relay;
        };
        let awaits = front.awaits;
        let probe = front.probe;
        match kind {
            b'Z' => {
                // Whatever was owed before it was skipped: after an
                // error, as PostgreSQL skips to `Sync`; otherwise the
                // count is lost.
                let skipping = std::mem::take(&mut self.skipping);
                let mut kept = false;
                while let Some(owed) = self.pop() {
                    if owed.awaits.ready() {
                        kept = owed.probe;
                        break;
                    }
                    self.lost |= !skipping;
                }
                if !kept {
                    return Seen::Relay;
                }
                let failed = std::mem::take(&mut self.probe_failed);
                self.probed = Some(match self.probe_row.take() {
                    Some(row) if !failed => Probed::Row(row),
                    _ => Probed::Failed,
                });
                Seen::Kept
            }
            b'E' if !awaits.ready() => {
                self.skipping = true;
                self.pop();
                while self.owed.front().is_some_and(|o| o.awaits != Awaits::Sync) {
                    self.pop();
                }
                if probe {
                    self.probe_failed = true;
                    return Seen::Kept;
                }
                Seen::Relay
            }
            b'D' if probe && awaits == Awaits::Execute => {
                self.probe_row = Some(body.to_vec());
                Seen::Kept
            }
            b't' if awaits == Awaits::Describe => {
                if let (Some((name, sql)), Some(types)) = (&front.describes, parameter_types(body))
                {
                    self.described = Some(Described {
                        name: name.clone(),
                        sql: sql.clone(),
                        types,
                    });
                }
                Seen::Relay
            }
            b'T' => {
                if let Some(origins) = &front.origins {
                    name_origins(body, origins);
                }
                if awaits == Awaits::Describe {
                    self.pop();
                }
                Seen::Relay
            }
            b'n' => self.completes(Awaits::Describe),
            b'1' => self.completes(Awaits::Parse),
            b'2' => self.completes(Awaits::Bind),
            b'3' => self.completes(Awaits::Close),
            b'C' | b'I' | b's' if awaits == Awaits::Execute => {
                let tag = self.pop().and_then(|o| o.tag);
                match tag {
                    _ if probe => Seen::Kept,
                    Some(tag) if kind == b'C' => Seen::Retag(tag),
                    _ => Seen::Relay,
                }
            }
            // A simple `Query` run through the facade: each statement's
            // `CommandComplete` in turn.
            b'C' => match self.owed.front_mut() {
                Some(front) if awaits == Awaits::Query && front.tag.is_some() => {
                    let tag = front.tag.take().unwrap_or_default();
                    if let Some((origins, next)) = front.then.pop_front() {
                        front.origins = origins;
                        front.tag = next;
                    }
                    Seen::Retag(tag)
                }
                _ => Seen::Relay,
            },
            _ => Seen::Relay,
        }
    }

    /// An answer that completes what `expected` waits for.
    fn completes(&mut self, expected: Awaits) -> Seen {
        match self.owed.front().map(|o| o.awaits) {
            Some(awaits) if awaits == expected => {
                if self.pop().is_some_and(|o| o.ours) {
                    Seen::Kept
                } else {
                    Seen::Relay
                }
            }
            Some(Awaits::Query) => Seen::Relay,
            _ => {
                self.lost = true;
                Seen::Relay
            }
        }
    }
}

/// The type OIDs of a `ParameterDescription` body: a count, then each.
fn parameter_types(body: &[u8]) -> Option<Vec<u32>> {
    let (count, rest) = body.split_first_chunk::<2>()?;
    let count = usize::from(u16::from_be_bytes(*count));
    (rest.len() == count * 4).then(|| {
        rest.chunks_exact(4)
            .map(|c| u32::from_be_bytes([c[0], c[1], c[2], c[3]]))
            .collect()
    })
}

/// A `CommandComplete` message carrying `tag`.
pub(crate) fn command_complete(tag: &str, out: &mut bytes::BytesMut) {
    out.extend_from_slice(b"C");
    out.extend_from_slice(
        &u32::try_from(tag.len() + 5)
            .unwrap_or(u32::MAX)
            .to_be_bytes(),
    );
    out.extend_from_slice(tag.as_bytes());
    out.extend_from_slice(&[0]);
}

/// Writes each column's table OID and attribute number into the body of
/// a `RowDescription` (in place: both are fixed-width).
fn name_origins(body: &mut [u8], origins: &[Origin]) {
    let mut at = 2;
    for origin in origins {
        let Some(end) = body.get(at..).and_then(|b| b.iter().position(|&c| c == 0)) else {
            return;
        };
        at += end + 1;
        let Some(fixed) = body.get_mut(at..at + 18) else {
            return;
        };
        fixed[0..4].copy_from_slice(&origin.table.to_be_bytes());
        fixed[4..6].copy_from_slice(&origin.attnum.to_be_bytes());
        at += 18;
    }
}

#[cfg(test)]
mod tests;
