//! Both directions of one session on one task: the app to PostgreSQL
//! (each message judged, most forwarded as they came) and PostgreSQL to
//! the app (whole messages, noting each `ReadyForQuery`).
//!
//! One task and one event loop, not a task per direction: on a machine
//! whose cores are busy with PostgreSQL, every hand-off between tasks is
//! a wake-up on another thread, and the profile of `bench proxy` showed
//! those (the scheduler's spin locks and task switches) costing more than
//! the relaying itself. Writes are attempted only when the socket is
//! writable and reads only while the other side's buffer is short, so
//! neither side blocks the other: an app pipelining statements while
//! PostgreSQL streams results cannot deadlock the two.

use std::collections::HashMap;
use std::time::Duration;

use bytes::{Buf, BytesMut};
use pgwire::messages::extendedquery::{Close, Describe, Execute};
use pgwire::messages::simplequery::Query;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::answers::{command_complete, Answers, Awaits, Owed, Seen};
use crate::frame::{self, Frame, FrameError};
use query::run::Origin;

use crate::route::{refusing_statement, unserved, Resolution, Verdict};
use crate::sample::Held;
use crate::Shared;
use verifier::Side;

mod held;
mod judge;
mod pending;
mod prepared;
mod probe;
mod unapplied;

use held::{refuse_held, refuse_write, settle, UNCOUNTED, UNCOUNTED_WRITE};
use judge::route;
use pending::Pending;
use prepared::Prepared;

/// Past this many bytes waiting for one side, the other is not read.
const HIGH_WATER: usize = 256 * 1024;

/// Why a session ends early; each is sent to the app as a `FATAL` error
/// when it can still be.
#[derive(Debug, thiserror::Error)]
pub enum Fatal {
    #[error("{0}")]
    Protocol(String),
    #[error(transparent)]
    Frame(#[from] FrameError),
    #[error("the client sent nothing for {0:?}")]
    Idle(Duration),
    #[error("{0}")]
    Refused(String),
    #[error("{0}")]
    Io(#[from] std::io::Error),
}

impl Fatal {
    pub fn sqlstate(&self) -> &'static str {
        match self {
            Fatal::Protocol(_) => "08P01",
            Fatal::Frame(FrameError::TooLarge { .. }) => "54000",
            Fatal::Frame(FrameError::BadLength(_)) => "08P01",
            Fatal::Idle(_) => "57P05",
            Fatal::Refused(_) => "28000",
            Fatal::Io(_) => "08006",
        }
    }
}

/// What the session knows of PostgreSQL's side.
struct State {
    /// The status byte of the last `ReadyForQuery`: `I` idle, `T` in a
    /// transaction block, `E` in a failed one (0 before the first).
    status: u8,
    /// The answers PostgreSQL owes, in order.
    answers: Answers,
    /// A `BEGIN` was sent since PostgreSQL was last seen idle with
    /// nothing unanswered: a client that pipelines its next statement
    /// behind it is in the block before PostgreSQL says so.
    begun: bool,
    /// Prepared statements whose `Parse` was refused (`""` the unnamed
    /// one), with the reason. PostgreSQL prepares them as the app sent
    /// them, so the app learns their true parameters and columns (asyncpg
    /// checks its arguments against them before it binds); each `Bind`
    /// judged in the mode of the refusal binds the app's portal to the
    /// refusal instead, which PostgreSQL raises at `Execute`.
    refused: HashMap<String, String>,
    /// Prepared statements naming a layout table: their SQL, the
    /// `Parse`'s parameter types, and what the relay does at their
    /// `Bind`.
    reads: HashMap<String, Prepared>,
    /// Statements prepared in SQL (`PREPARE name AS ...`, forwarded) that
    /// name a layout table: the `PREPARE`'s text, by name. An `EXECUTE`
    /// of one is judged as that `PREPARE` would be now.
    named: HashMap<String, String>,
    /// The answers to the rest of a pipelined batch of writes the facade
    /// ran as one ([`pending::Pending::ready`]), each with the `Bind` it
    /// answers, in the order the app sent them.
    batch: std::collections::VecDeque<(BytesMut, Result<query::run::Written, query::run::Refused>)>,
    /// Portals bound to a statement answered for Schemaless, until the
    /// `Sync` that ends them: the origins their `RowDescription` must
    /// name, and a write's command tag.
    served: HashMap<String, ServedPortal>,
    /// The session is on the legacy database: its statements are read.
    layout: bool,
    /// The app's user and the settings PostgreSQL reported to the
    /// session: its statements' values are evaluated as that role, in
    /// those settings.
    session: std::sync::Arc<query::run::AppSession>,
    /// What the session's bare names find, as PostgreSQL last answered
    /// the probe (`probe`), and the probe's own state.
    resolution: Resolution,
    probe: probe::Probe,
    /// PostgreSQL reported `standard_conforming_strings = off`: its string
    /// literals read `\` as an escape, which the translator does not
    /// ([`crate::route::NONSTANDARD_STRINGS`]).
    nonstandard_strings: bool,
    /// The cells of the session's writes through the facade in `primary`
    /// not yet seen in PostgreSQL, the newest of each shard, by shard: its
    /// next statement forwarded there waits for them ([`crate::fresh`]).
    unapplied: Vec<(u32, schemaless::Cell)>,
}

/// A portal answered for Schemaless.
#[derive(Clone, Debug, Default)]
struct ServedPortal {
    origins: Vec<Origin>,
    tag: Option<String>,
}

impl State {
    fn new() -> State {
        State {
            status: 0,
            answers: Answers::starting(),
            begun: false,
            refused: HashMap::new(),
            reads: HashMap::new(),
            named: HashMap::new(),
            batch: std::collections::VecDeque::new(),
            served: HashMap::new(),
            layout: true,
            session: std::sync::Arc::default(),
            resolution: Resolution::Unknown,
            probe: probe::Probe::new(),
            nonstandard_strings: false,
            unapplied: Vec::new(),
        }
    }

    /// Whether a read may be answered from Schemaless now: not in a
    /// transaction block, and the answers counted.
    fn may_serve(&self, shared: &Shared) -> bool {
        !self.in_transaction() && !self.answers.lost() && shared.sampling.may_serve()
    }

    /// Notes an app's message sent to PostgreSQL.
    fn sent(&mut self, kind: u8) {
        if let Some(awaits) = Awaits::of(kind) {
            self.answers.push(Owed::app(awaits));
        }
    }

    /// A batch's answer: the first write's, the rest kept for the
    /// `Bind`s (`frames`) that follow it.
    fn unbatch(&mut self, held: Held, frames: Vec<BytesMut>) -> Held {
        let Held::Batch(results) = held else {
            return held;
        };
        let mut results = results.into_iter();
        let first = results.next().unwrap_or_else(|| {
            Err(query::run::Refused::new(
                "XX000",
                "the facade answered a batch with nothing",
            ))
        });
        self.batch = frames.into_iter().zip(results).collect();
        Held::Write(first)
    }

    /// The answer kept for `frame`, if it is the batch's next write (the
    /// facade ran it with the batch's first).
    fn batched(
        &mut self,
        frame: &Frame,
    ) -> Option<Result<query::run::Written, query::run::Refused>> {
        if self.batch.front()?.0 != frame.bytes {
            // Not what the batch held (cannot be: the relay reads the
            // app's messages in order); nothing more is taken from it.
            tracing::warn!("proxy: a Bind that is not the next of its batch; batch dropped");
            self.batch.clear();
            return None;
        }
        self.batch.pop_front().map(|(_, result)| result)
    }

    fn in_transaction(&self) -> bool {
        (self.status != 0 && self.status != b'I') || self.begun
    }

    fn idle(&self) -> bool {
        !self.in_transaction() && self.answers.readies() == 0
    }

    fn ready(&mut self, status: u8) {
        self.status = status;
        if self.answers.readies() == 0 {
            self.begun = false;
        }
    }

    /// A `ParameterStatus` body (name, value): one the session's values
    /// depend on is kept for their evaluation. A statement already handed
    /// to Schemaless or the facade keeps the settings it was handed with:
    /// a `SET TimeZone` pipelined with a write in one flight of messages
    /// is seen after the write's values are evaluated (send it on its
    /// own, as drivers and psql do).
    fn parameter(&mut self, body: &[u8]) {
        let mut parts = body.split(|b| *b == 0);
        let (Some(name), Some(value)) = (parts.next(), parts.next()) else {
            return;
        };
        let (Ok(name), Ok(value)) = (std::str::from_utf8(name), std::str::from_utf8(value)) else {
            return;
        };
        if name == "standard_conforming_strings" {
            self.nonstandard_strings = value != "on";
        }
        let mut session = (*self.session).clone();
        if session.reported(name, value) {
            self.session = std::sync::Arc::new(session);
        }
    }
}

/// Relays `client` and `pg` until either ends. `from_client` holds what
/// the app sent after its startup packet.
pub async fn relay(
    shared: &Shared,
    client: &mut crate::session::Opened,
    pg: &mut crate::upstream::Backend,
    mut from_client: BytesMut,
    (layout, user): (bool, &str),
) -> Result<(), Fatal> {
    let max = shared.settings.max_message_bytes;
    let idle_timeout = Duration::from_millis(shared.settings.idle_timeout_ms);
    let (mut client_rd, mut client_wr) = tokio::io::split(client);
    let (mut pg_rd, mut pg_wr) = tokio::io::split(pg);
    let mut state = State::new();
    state.layout = layout;
    state.session = std::sync::Arc::new(query::run::AppSession::new(user));
    let mut to_pg = BytesMut::with_capacity(8192);
    let mut from_pg = BytesMut::with_capacity(64 * 1024);
    let mut to_client = BytesMut::with_capacity(64 * 1024);
    let mut terminated = false;
    let mut pending: Option<Pending> = None;
    loop {
        if pending.is_none() {
            probe::send(shared, &mut state, &mut to_pg);
        }
        // While the probe is answered, the app's next statements wait
        // (unless the count of answers is lost: then nothing is probed).
        while pending.is_none() && (!state.probe.in_flight() || state.answers.lost()) {
            let Some(frame) = frame::next(&mut from_client, max)? else {
                break;
            };
            terminated |= frame.kind == b'X';
            pending = message(shared, &mut state, frame, &mut to_pg);
            if terminated {
                break;
            }
        }
        let probing = state.probe.in_flight();
        complete(&mut from_pg, &mut state, &mut to_client);
        pending = pending.and_then(|p| p.ready(shared, &mut state, &from_client, &mut to_pg));
        if probing && !state.probe.in_flight() {
            // Answered: what the app sent meanwhile is read now, before
            // waiting on either side (it may wait for nothing else).
            continue;
        }
        if terminated && to_pg.is_empty() {
            return Ok(());
        }
        let watch_idle = !idle_timeout.is_zero()
            && state.idle()
            && to_pg.is_empty()
            && pending.is_none()
            && !state.probe.in_flight();
        tokio::select! {
            biased;
            n = pg_wr.write(&to_pg), if !to_pg.is_empty() => to_pg.advance(n?),
            n = client_wr.write(&to_client), if !to_client.is_empty() => to_client.advance(n?),
            n = pg_rd.read_buf(&mut from_pg), if to_client.len() < HIGH_WATER => {
                if n? == 0 {
                    // PostgreSQL ended the session (a FATAL it sent is
                    // already relayed): the app's connection ends too.
                    client_wr.write_all(&to_client).await?;
                    let _ = client_wr.shutdown().await;
                    return Ok(());
                }
            }
            n = client_rd.read_buf(&mut from_client), if to_pg.len() < HIGH_WATER && !terminated => {
                if n? == 0 {
                    // The app went away (mid-statement, say): PostgreSQL
                    // ends the session and rolls back what was open.
                    let _ = pg_wr.shutdown().await;
                    return Ok(());
                }
            }
            served = async { pending.as_mut().and_then(|p| p.answer.as_mut()).expect("guarded").await },
                if pending.as_ref().is_some_and(|p| p.answer.is_some()) => {
                let Pending { frame, mode, read, batch, .. } = pending.take().expect("guarded");
                let write = read.is_none();
                let served = served.map(|held| state.unbatch(held, batch));
                // A read Schemaless did not answer goes to PostgreSQL once
                // the session's writes are there.
                let (frame, served) = match served {
                    Ok(Held::Read(query::run::Serving::Forward(why))) => {
                        let unserved = (mode, read.clone(), Some(why.clone()));
                        match state.await_writes(shared, frame, unserved) {
                            Ok(held) => {
                                pending = Some(held);
                                continue;
                            }
                            Err(frame) => (frame, Ok(Held::Read(query::run::Serving::Forward(why)))),
                        }
                    }
                    other => (frame, other),
                };
                let side = settle(shared, &mut state, (frame, mode, write), served, &mut to_pg);
                // The read is sampled as the store that answered it.
                if let (Some(side), Some((sql, params))) = (side, read) {
                    if shared.sampling.wants() {
                        let role = state.session.clone();
                        shared.sampling.sample(shared.stats.clone(), (sql, params, role), side);
                    }
                }
            }
            _ = tokio::time::sleep(idle_timeout), if watch_idle => {
                let _ = pg_wr.write_all(b"X\0\0\0\x04").await;
                return Err(Fatal::Idle(idle_timeout));
            }
        }
    }
}

/// Moves the whole messages at the start of `buf` to `out`, each taken
/// in by [`Answers`] before the app can see it (and kept from it when it
/// answers the proxy), noting each `ReadyForQuery`'s status.
fn complete(buf: &mut BytesMut, state: &mut State, out: &mut BytesMut) {
    let mut at = 0;
    let mut kept = 0;
    while buf.len() - at >= 5 {
        let len = u32::from_be_bytes([buf[at + 1], buf[at + 2], buf[at + 3], buf[at + 4]]) as usize;
        if buf.len() - at < len + 1 {
            break;
        }
        let kind = buf[at];
        if kind == b'S' {
            state.parameter(&buf[at + 5..at + 1 + len]);
        }
        let seen = state.answers.answer(kind, &mut buf[at + 5..at + 1 + len]);
        if kind == b'Z' && len == 5 {
            state.ready(buf[at + 5]);
        }
        if let Some(probed) = state.answers.probed() {
            probe::answered(state, probed);
        }
        if let Some(described) = state.answers.described() {
            prepared::described(state, described);
        }
        match seen {
            Seen::Relay => {}
            Seen::Kept => {
                out.extend_from_slice(&buf[kept..at]);
                kept = at + len + 1;
            }
            Seen::Retag(tag) => {
                out.extend_from_slice(&buf[kept..at]);
                command_complete(&tag, out);
                kept = at + len + 1;
            }
        }
        at += len + 1;
    }
    out.extend_from_slice(&buf[kept..at]);
    buf.advance(at);
}

/// Appends what PostgreSQL is to get for `frame`, or holds a `Query` or
/// `Bind` Schemaless may answer.
fn message(
    shared: &Shared,
    state: &mut State,
    frame: Frame,
    out: &mut BytesMut,
) -> Option<Pending> {
    match frame.kind {
        b'Q' => {
            let Some(query) = frame::decode::<Query>(&frame) else {
                // PostgreSQL names what is wrong with it.
                state.sent(b'Q');
                out.extend_from_slice(&frame.bytes);
                return None;
            };
            let may_serve = state.may_serve(shared);
            let outside = !state.in_transaction();
            let (decision, _) = route(shared, state, &query.query, false);
            if decision.writable && !state.answers.lost() {
                let answer =
                    shared
                        .sampling
                        .write(query.query.clone(), Vec::new(), state.session.clone());
                return Some(Pending::new(shared, frame, answer, None));
            }
            if decision.writable {
                refuse_write(shared, state, frame, UNCOUNTED_WRITE, out);
                return None;
            }
            if decision.samplable && may_serve {
                let answer =
                    shared
                        .sampling
                        .serve(query.query.clone(), Vec::new(), state.session.clone());
                let read = Some((query.query, Vec::new()));
                return Some(Pending::new(shared, frame, answer, read));
            }
            if let Some(reason) = decision
                .samplable
                .then(|| unserved(shared.mode(), UNCOUNTED))
                .flatten()
                .filter(|_| outside)
            {
                refuse_held(shared, state, frame, &reason, out);
                return None;
            }
            if decision.samplable && shared.sampling.wants() {
                shared.sampling.sample(
                    shared.stats.clone(),
                    (query.query.clone(), Vec::new(), state.session.clone()),
                    Side::Legacy,
                );
            }
            match decision.verdict {
                Verdict::Forward => {
                    // A translatable write the facade runs from `primary`
                    // on: counted for that step's gate.
                    for shape in decision.shapes.iter().filter(|_| outside) {
                        shared.stats.forwarded_write(shared.mode(), shape);
                    }
                    return state.forward(shared, frame, out);
                }
                Verdict::Refuse(reason) => {
                    state.sent(b'Q');
                    frame::encode(&Query::new(refusing_statement(&reason)), out)
                }
            }
        }
        b'P' => {
            prepared::parse(shared, state, frame, out);
        }
        b'B' if !state.refused.is_empty() || !state.reads.is_empty() => {
            return prepared::bind(shared, state, frame, out);
        }
        b'B' if !state.unapplied.is_empty() => {
            return state.forward(shared, frame, out);
        }
        b'C' if !state.refused.is_empty()
            || !state.reads.is_empty()
            || !state.served.is_empty() =>
        {
            state.sent(b'C');
            if let Some(close) = frame::decode::<Close>(&frame) {
                let name = close.name.as_deref().unwrap_or_default();
                if close.target_type == b'S' {
                    state.refused.remove(name);
                    state.reads.remove(name);
                } else {
                    state.served.remove(name);
                }
            }
            out.extend_from_slice(&frame.bytes);
        }
        b'D' if !state.served.is_empty() || !state.reads.is_empty() => {
            let describe = frame::decode::<Describe>(&frame);
            let name = |d: &Describe| d.name.clone().unwrap_or_default();
            let origins = describe
                .as_ref()
                .filter(|d| d.target_type == b'P')
                .and_then(|d| state.served.get(&name(d)).map(|p| p.origins.clone()));
            let describes = describe
                .as_ref()
                .filter(|d| d.target_type == b'S')
                .and_then(|d| prepared::remembered(state, &name(d)));
            state.answers.push(Owed {
                origins,
                describes,
                ..Owed::app(Awaits::Describe)
            });
            out.extend_from_slice(&frame.bytes);
        }
        b'E' if !state.served.is_empty() => {
            let tag = frame::decode::<Execute>(&frame).and_then(|e| {
                state
                    .served
                    .get(e.name.as_deref().unwrap_or_default())
                    .and_then(|p| p.tag.clone())
            });
            state.answers.push(Owed {
                tag,
                ..Owed::app(Awaits::Execute)
            });
            out.extend_from_slice(&frame.bytes);
        }
        b'S' => {
            // It ends the implicit transaction, and the portals with it
            // (and a batch's answers, all taken by now).
            state.served.clear();
            state.batch.clear();
            state.sent(b'S');
            out.extend_from_slice(&frame.bytes);
        }
        kind => {
            state.sent(kind);
            out.extend_from_slice(&frame.bytes);
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ready_for_query_is_seen_only_in_whole_messages() {
        let mut state = State::new();
        let mut out = BytesMut::new();
        complete(
            &mut BytesMut::from(&b"Z\0\0\0\x05I"[..]),
            &mut state,
            &mut out,
        );
        state.begun = true;
        state.sent(b'Q');
        // CommandComplete "SELECT 1", then half a ReadyForQuery.
        let mut buf = BytesMut::from(&b"C\0\0\0\x0dSELECT 1\0Z\0\0"[..]);
        complete(&mut buf, &mut state, &mut out);
        assert_eq!(&buf[..], b"Z\0\0");
        assert!(state.begun && state.answers.readies() == 1);
        buf.extend_from_slice(b"\0\x05T");
        complete(&mut buf, &mut state, &mut out);
        assert!(buf.is_empty());
        assert_eq!(state.status, b'T');
        assert!(state.in_transaction() && !state.begun && state.answers.readies() == 0);
        assert_eq!(&out[..], b"Z\0\0\0\x05IC\0\0\0\x0dSELECT 1\0Z\0\0\0\x05T");
    }

    #[test]
    fn answers_to_the_proxys_own_messages_are_cut_out_of_the_stream() {
        let mut state = State::new();
        let mut out = BytesMut::new();
        complete(
            &mut BytesMut::from(&b"Z\0\0\0\x05I"[..]),
            &mut state,
            &mut out,
        );
        out.clear();
        state.sent(b'P');
        for awaits in [Awaits::Close, Awaits::Parse] {
            state.answers.push(Owed::ours(awaits));
        }
        state.sent(b'B');
        state.sent(b'S');
        let mut buf =
            BytesMut::from(&b"1\0\0\0\x043\0\0\0\x041\0\0\0\x042\0\0\0\x04Z\0\0\0\x05I"[..]);
        complete(&mut buf, &mut state, &mut out);
        assert_eq!(&out[..], b"1\0\0\0\x042\0\0\0\x04Z\0\0\0\x05I");
    }
}
