//! A statement held while Schemaless or the facade answers it, and when
//! a held write may start.

use bytes::BytesMut;
use pgwire::messages::extendedquery::{Close, Flush, Parse};
use tokio::sync::oneshot;

use super::held::{refuse_write, SERVED_STATEMENT};
use super::State;
use crate::answers::{Awaits, Owed};
use crate::frame::{self, Frame, Peeked};
use crate::sample::Held;
use crate::Shared;

/// A write's SQL and its parameters (`None` a NULL), as text.
pub(super) type Write = (String, Vec<Option<String>>);

/// A `Query` or `Bind` waiting for Schemaless's answer; nothing the app
/// sent after it is read until it is settled, so the order of statements
/// holds.
pub(super) struct Pending {
    pub(super) frame: Frame,
    /// What Schemaless or the facade answers; `None` while a write waits
    /// to start ([`Pending::deferred`]).
    pub(super) answer: Option<oneshot::Receiver<Held>>,
    /// The mode it was held in: in `schemaless`, a read Schemaless does
    /// not answer is refused rather than forwarded.
    pub(super) mode: tripstore::Mode,
    /// A read's statement and its parameters as text, to sample it.
    pub(super) read: Option<(String, Vec<String>)>,
    /// A prepared write's statement and parameters, not yet handed to the
    /// facade: PostgreSQL has not answered everything sent before its
    /// `Bind`.
    deferred: Option<Write>,
    /// The `Bind`s of the rest of a pipelined batch run with this write,
    /// whose answers come with its own.
    pub(super) batch: Vec<BytesMut>,
    /// The statements its batch parses were sent to PostgreSQL to be
    /// parsed first ([`check_parsed`]).
    checked: bool,
}

impl Pending {
    /// `frame` held until `answer` comes, in the mode of now.
    pub(super) fn new(
        shared: &Shared,
        frame: Frame,
        answer: oneshot::Receiver<Held>,
        read: Option<(String, Vec<String>)>,
    ) -> Pending {
        Pending {
            frame,
            answer: Some(answer),
            mode: shared.mode(),
            read,
            deferred: None,
            batch: Vec::new(),
            checked: false,
        }
    }

    /// `frame`, held in `mode` until `answer` comes (`read`: a read's
    /// statement and parameters, to sample it once forwarded).
    pub(super) fn held(
        frame: Frame,
        answer: oneshot::Receiver<Held>,
        mode: tripstore::Mode,
        read: Option<(String, Vec<String>)>,
    ) -> Pending {
        Pending {
            frame,
            answer: Some(answer),
            mode,
            read,
            deferred: None,
            batch: Vec::new(),
            checked: false,
        }
    }

    /// A write of a batch the facade already ran with the batch's first:
    /// its answer, as if it had come now.
    pub(super) fn answered(
        shared: &Shared,
        frame: Frame,
        result: Result<query::run::Written, query::run::Refused>,
    ) -> Pending {
        let (tx, answer) = oneshot::channel();
        let _ = tx.send(Held::Write(result));
        Pending::new(shared, frame, answer, None)
    }

    /// The `Bind` of a prepared write the facade is to run, held until it
    /// may start ([`Pending::ready`]). A `Flush` asks PostgreSQL for the
    /// answers still owed to what was sent before it.
    pub(super) fn write(
        shared: &Shared,
        state: &State,
        frame: Frame,
        write: Write,
        out: &mut BytesMut,
    ) -> Pending {
        if !state.answers.settled() {
            frame::encode(&Flush::new(), out);
        }
        Pending {
            frame,
            answer: None,
            mode: shared.mode(),
            read: None,
            deferred: Some(write),
            batch: Vec::new(),
            checked: false,
        }
    }

    /// A held write handed to the facade once it may run as PostgreSQL
    /// would run it (`None`: nothing is held any more). `unread` is what
    /// the app sent after its `Bind`, not read yet.
    ///
    /// - Messages sent to PostgreSQL before it (its own `Parse`, say, in
    ///   the same flight) may still fail, and PostgreSQL would then skip
    ///   the `Bind` and its `Execute` to the `Sync`: so it waits for their
    ///   answers, and after an error it is sent on to be skipped, nothing
    ///   of it run.
    /// - Statements the app sent after it before the `Sync` are in one
    ///   implicit transaction with it, which PostgreSQL rolls back whole
    ///   if one fails. When they are all translatable writes the facade
    ///   runs (JDBC's `executeBatch`, asyncpg's `executemany`), the batch
    ///   is run as one ([`query::run::write_batch`]: nothing is written
    ///   unless every write evaluates and checks), each answered at its
    ///   turn. Otherwise the write is refused (`0A000`) before anything is
    ///   written, and PostgreSQL skips the rest to the `Sync`, as after
    ///   any error.
    /// - A batch that parses its own statements (each with its `Parse`)
    ///   has them parsed on PostgreSQL first ([`check_parsed`]): after an
    ///   error there, the write is sent on to be skipped, nothing run.
    pub(super) fn ready(
        mut self,
        shared: &Shared,
        state: &mut State,
        unread: &[u8],
        out: &mut BytesMut,
    ) -> Option<Pending> {
        if self.deferred.is_none() {
            return Some(self);
        }
        if state.answers.skipping() {
            tracing::debug!("proxy: a write's Bind follows an error; PostgreSQL skips it");
            state.sent(self.frame.kind);
            out.extend_from_slice(&self.frame.bytes);
            return None;
        }
        if !state.answers.settled() {
            return Some(self);
        }
        let rest = match after(unread) {
            After::Unknown => return Some(self),
            After::Alone => Vec::new(),
            After::Others => match super::prepared::batched_writes(shared, state, unread) {
                Batch::Unknown => return Some(self),
                Batch::Writes { parsed, .. } if !parsed.is_empty() && !self.checked => {
                    check_parsed(state, &parsed, out);
                    self.checked = true;
                    return Some(self);
                }
                Batch::Writes { binds, .. } => binds,
                Batch::Not => {
                    refuse_write(shared, state, self.frame, PIPELINED, out);
                    return None;
                }
            },
        };
        let first = self.deferred.take().expect("checked");
        let session = state.session.clone();
        self.answer = Some(if rest.is_empty() {
            shared.sampling.write(first.0, first.1, session)
        } else {
            let (frames, writes): (Vec<BytesMut>, Vec<_>) = rest.into_iter().unzip();
            self.batch = frames;
            let statements = std::iter::once(first).chain(writes).collect();
            shared.sampling.write_batch(statements, session)
        });
        Some(self)
    }
}

/// The rest of a pipelined batch, as far as the app has sent it.
pub(super) enum Batch {
    /// Not up to its `Sync` yet.
    Unknown,
    /// All translatable writes the facade runs now.
    Writes {
        /// Each `Bind`'s bytes, and its write's SQL and parameters.
        binds: Vec<(BytesMut, Write)>,
        /// The statements the batch parses, in order.
        parsed: Vec<Parsed>,
    },
    /// Something else is in it.
    Not,
}

/// A statement a batch parses (its `Parse` not sent yet): its name (`""`
/// the unnamed one), text and declared parameter types.
pub(super) struct Parsed {
    pub(super) name: String,
    pub(super) sql: String,
    pub(super) types: Vec<u32>,
}

/// Sends each statement a batch parses to PostgreSQL to be parsed first,
/// as the app's `Parse` will be, in the app's session (its role, its
/// path, its types), then closed: the answers are the proxy's, but an
/// error is relayed, and PostgreSQL then skips the held write to the
/// `Sync`, nothing of the batch run. Without this the facade would write
/// a batch whose later statement PostgreSQL refuses to parse (a key
/// declared `varchar`, a bad literal), the app told it failed.
///
/// A named statement is parsed under its own name, so one the session
/// already holds fails as the app's would (`42P05`); the unnamed one under
/// the proxy's own name ([`SERVED_STATEMENT`]), so the statement the held
/// write binds stays as it is. A `Flush` asks for the answers.
fn check_parsed(state: &mut State, parsed: &[Parsed], out: &mut BytesMut) {
    for statement in parsed {
        let name = match statement.name.as_str() {
            "" => {
                close_ours(state, SERVED_STATEMENT, out);
                SERVED_STATEMENT
            }
            name => name,
        };
        state.answers.push(Owed::ours(Awaits::Parse));
        frame::encode(
            &Parse::new(
                Some(name.to_string()),
                statement.sql.clone(),
                statement.types.clone(),
            ),
            out,
        );
        close_ours(state, name, out);
    }
    frame::encode(&Flush::new(), out);
}

/// A `Close` of statement `name`, its answer kept from the app.
fn close_ours(state: &mut State, name: &str, out: &mut BytesMut) {
    state.answers.push(Owed::ours(Awaits::Close));
    frame::encode(&Close::new(b'S', Some(name.to_string())), out);
}

/// Why a write pipelined with other statements in one implicit
/// transaction is refused.
const PIPELINED: &str = "a write the facade would run, sent with other statements than writes \
     it runs before its Sync: PostgreSQL runs them in one implicit transaction, which the \
     facade cannot make atomic with PostgreSQL's statements; send a Sync after the write";

/// What the app sent after a held write's `Bind`, as far as it has come.
#[derive(Debug, PartialEq, Eq)]
enum After {
    /// Not up to its `Sync` yet.
    Unknown,
    /// Only its `Describe`, `Execute` (and `Close`s) before a `Sync`, or a
    /// `Flush` (the app waits for the answer before it sends more).
    Alone,
    /// Another statement, or the end of the session (PostgreSQL rolls
    /// back a write never synced).
    Others,
}

/// Reads the messages at the start of `unread` (their type bytes only).
fn after(unread: &[u8]) -> After {
    for peeked in frame::peek(unread) {
        match peeked {
            Peeked::Whole(b'S' | b'H', _) | Peeked::Partial(b'S' | b'H') => return After::Alone,
            Peeked::Whole(b'D' | b'E' | b'C', _) | Peeked::Partial(b'D' | b'E' | b'C') => {}
            _ => return After::Others,
        }
    }
    After::Unknown
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::frame::message;

    #[test]
    fn a_write_alone_before_its_sync_is_told_from_a_pipelined_one() {
        let describe = message(b'D', b"P\0");
        let execute = message(b'E', b"\0\0\0\0\0");
        let sync = message(b'S', b"");
        let alone = [describe.clone(), execute.clone(), sync.clone()].concat();
        assert_eq!(after(&alone), After::Alone);
        // Up to any cut before the Sync's header, it is not known yet.
        for cut in 0..describe.len() + execute.len() + 5 {
            assert_eq!(after(&alone[..cut]), After::Unknown, "{cut}");
        }
        let flushed = [execute.clone(), message(b'H', b"")].concat();
        assert_eq!(after(&flushed), After::Alone);
        let batch = [
            execute.clone(),
            message(b'B', b"\0\0"),
            execute.clone(),
            sync,
        ]
        .concat();
        assert_eq!(after(&batch), After::Others);
        let ended = [execute, message(b'X', b"")].concat();
        assert_eq!(after(&ended), After::Others);
        assert_eq!(after(b"E\0\0\0\x02"), After::Others, "a length under 4");
    }
}
