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

use std::collections::{HashMap, HashSet};
use std::time::Duration;

use bytes::{Buf, BytesMut};
use pgwire::messages::extendedquery::{Bind, Close, Describe, Execute, Parse};
use pgwire::messages::simplequery::Query;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::answers::{command_complete, Answers, Awaits, Owed, Seen};
use crate::frame::{self, Frame, FrameError};
use query::run::Origin;
use tokio::sync::oneshot;

use crate::params::{params_nullable, params_text};
use crate::route::{refusing_statement, unserved, Decision, Verdict};
use crate::sample::Held;
use crate::stats::{Route, SampleOutcome};
use crate::Shared;
use verifier::Side;

mod held;

use held::{refuse_held, refuse_prepared, refuse_write, settle, UNCOUNTED};

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
    /// one): their `Bind`s lose their parameters, so PostgreSQL reaches
    /// the refusal at `Execute` instead of a parameter count mismatch.
    refused: HashSet<String>,
    /// Prepared statements naming a layout table: their SQL, the
    /// `Parse`'s parameter types, and what the relay does at their
    /// `Bind`.
    reads: HashMap<String, Prepared>,
    /// Portals bound to a statement answered for Schemaless, until the
    /// `Sync` that ends them: the origins their `RowDescription` must
    /// name, and a write's command tag.
    served: HashMap<String, ServedPortal>,
    /// The session is on the legacy database: its statements are read.
    layout: bool,
    /// The app's user: its statements' values are evaluated as that role.
    role: std::sync::Arc<str>,
}

/// A prepared statement naming a layout table, which the relay reads at
/// each `Bind`.
#[derive(Clone)]
struct Prepared {
    sql: String,
    types: Vec<u32>,
    /// The mode it was judged in, at its `Parse`, and whether a
    /// transaction block was open: bound in another mode, or on the other
    /// side of a block, it is judged again as it would be now (an app's
    /// connection outlives a mode change).
    mode: tripstore::Mode,
    in_transaction: bool,
    /// One translatable read the relay may serve or sample.
    read: bool,
    /// One translatable write, which the facade runs in `primary` and
    /// `schemaless`.
    write: bool,
}

/// A portal answered for Schemaless.
#[derive(Clone, Debug, Default)]
struct ServedPortal {
    origins: Vec<Origin>,
    tag: Option<String>,
}

/// A `Query` or `Bind` waiting for Schemaless's answer; nothing the app
/// sent after it is read until it is settled, so the order of statements
/// holds.
struct Pending {
    frame: Frame,
    answer: oneshot::Receiver<Held>,
    /// The mode it was held in: in `schemaless`, a read Schemaless does
    /// not answer is refused rather than forwarded.
    mode: tripstore::Mode,
    /// A read's statement and its parameters as text, to sample it.
    read: Option<(String, Vec<String>)>,
}

impl Pending {
    /// `frame` held until `answer` comes, in the mode of now.
    fn new(
        shared: &Shared,
        frame: Frame,
        answer: oneshot::Receiver<Held>,
        read: Option<(String, Vec<String>)>,
    ) -> Pending {
        Pending {
            frame,
            answer,
            mode: shared.mode(),
            read,
        }
    }
}

impl State {
    fn new() -> State {
        State {
            status: 0,
            answers: Answers::starting(),
            begun: false,
            refused: HashSet::new(),
            reads: HashMap::new(),
            served: HashMap::new(),
            layout: true,
            role: std::sync::Arc::from(""),
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
}

/// Relays `client` and `pg` until either ends. `from_client` holds what
/// the app sent after its startup packet.
pub async fn relay(
    shared: &Shared,
    client: &mut crate::session::Opened,
    pg: &mut TcpStream,
    mut from_client: BytesMut,
    (layout, user): (bool, &str),
) -> Result<(), Fatal> {
    let max = shared.settings.max_message_bytes;
    let idle_timeout = Duration::from_millis(shared.settings.idle_timeout_ms);
    let (mut client_rd, mut client_wr) = tokio::io::split(client);
    let (mut pg_rd, mut pg_wr) = pg.split();
    let mut state = State::new();
    state.layout = layout;
    state.role = std::sync::Arc::from(user);
    let mut to_pg = BytesMut::with_capacity(8192);
    let mut from_pg = BytesMut::with_capacity(64 * 1024);
    let mut to_client = BytesMut::with_capacity(64 * 1024);
    let mut terminated = false;
    let mut pending: Option<Pending> = None;
    loop {
        while pending.is_none() {
            let Some(frame) = frame::next(&mut from_client, max)? else {
                break;
            };
            terminated |= frame.kind == b'X';
            pending = message(shared, &mut state, frame, &mut to_pg);
            if terminated {
                break;
            }
        }
        complete(&mut from_pg, &mut state, &mut to_client);
        if terminated && to_pg.is_empty() {
            return Ok(());
        }
        let watch_idle =
            !idle_timeout.is_zero() && state.idle() && to_pg.is_empty() && pending.is_none();
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
            served = async { (&mut pending.as_mut().expect("guarded").answer).await }, if pending.is_some() => {
                let Pending { frame, mode, read, .. } = pending.take().expect("guarded");
                let write = read.is_none();
                let side = settle(shared, &mut state, (frame, mode, write), served, &mut to_pg);
                // The read is sampled as the store that answered it.
                if let (Some(side), Some((sql, params))) = (side, read) {
                    if shared.sampling.wants() {
                        let role = state.role.clone();
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
        let seen = state.answers.answer(kind, &mut buf[at + 5..at + 1 + len]);
        if kind == b'Z' && len == 5 {
            state.ready(buf[at + 5]);
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
            let decision = route(shared, state, &query.query);
            if decision.writable && !state.answers.lost() {
                let answer =
                    shared
                        .sampling
                        .write(query.query.clone(), Vec::new(), state.role.clone());
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
                        .serve(query.query.clone(), Vec::new(), state.role.clone());
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
            state.sent(b'Q');
            if decision.samplable && shared.sampling.wants() {
                shared.sampling.sample(
                    shared.stats.clone(),
                    (query.query.clone(), Vec::new(), state.role.clone()),
                    Side::Legacy,
                );
            }
            match decision.verdict {
                Verdict::Forward => out.extend_from_slice(&frame.bytes),
                Verdict::Refuse(reason) => {
                    frame::encode(&Query::new(refusing_statement(&reason)), out)
                }
            }
        }
        b'P' => {
            state.sent(b'P');
            let Some(parse) = frame::decode::<Parse>(&frame) else {
                out.extend_from_slice(&frame.bytes);
                return None;
            };
            let name = parse.name.clone().unwrap_or_default();
            let mode = shared.mode();
            let in_transaction = state.in_transaction();
            let decision = route(shared, state, &parse.query);
            if decision.class == query::Class::Other {
                state.reads.remove(&name);
            } else {
                state.reads.insert(
                    name.clone(),
                    Prepared {
                        sql: parse.query.clone(),
                        types: parse.type_oids.clone(),
                        mode,
                        in_transaction,
                        read: decision.samplable,
                        write: decision.write,
                    },
                );
            }
            match decision.verdict {
                Verdict::Forward => {
                    state.refused.remove(&name);
                    out.extend_from_slice(&frame.bytes);
                }
                Verdict::Refuse(reason) => {
                    state.refused.insert(name);
                    frame::encode(
                        &Parse::new(parse.name, refusing_statement(&reason), Vec::new()),
                        out,
                    );
                }
            }
        }
        b'B' if !state.refused.is_empty() || !state.reads.is_empty() => {
            let Some(bind) = frame::decode::<Bind>(&frame) else {
                state.sent(b'B');
                out.extend_from_slice(&frame.bytes);
                return None;
            };
            let portal = bind.portal_name.clone().unwrap_or_default();
            state.served.remove(&portal);
            let statement = bind.statement_name.as_deref().unwrap_or_default();
            let prepared = state.reads.get(statement).cloned();
            let now = shared.mode();
            if let Some(p) = prepared
                .as_ref()
                .filter(|p| p.mode != now || p.in_transaction != state.in_transaction())
            {
                if let Some(reason) = rejudged(shared, state, statement, p, now) {
                    refuse_prepared(state, frame, &reason, out);
                    return None;
                }
            }
            if state.refused.contains(statement) {
                state.sent(b'B');
                frame::encode(
                    &Bind::new(
                        bind.portal_name,
                        bind.statement_name,
                        Vec::new(),
                        Vec::new(),
                        Vec::new(),
                    ),
                    out,
                );
                return None;
            }
            let Some(Prepared {
                sql,
                types,
                read,
                write,
                ..
            }) = prepared
            else {
                state.sent(b'B');
                out.extend_from_slice(&frame.bytes);
                return None;
            };
            if write && matches!(now, tripstore::Mode::Primary | tripstore::Mode::Schemaless) {
                return bind_write(shared, state, frame, &bind, sql, &types, out);
            }
            if !read {
                state.sent(b'B');
                out.extend_from_slice(&frame.bytes);
                return None;
            }
            let params = params_text(&types, &bind.parameter_format_codes, &bind.parameters);
            let may_serve = state.may_serve(shared);
            if let (Some(params), true) = (&params, may_serve) {
                let answer = shared
                    .sampling
                    .serve(sql.clone(), params.clone(), state.role.clone());
                let read = Some((sql, params.clone()));
                return Some(Pending::new(shared, frame, answer, read));
            }
            let why = if may_serve {
                "its parameters are in a binary format the proxy does not read; send them as text"
            } else {
                UNCOUNTED
            };
            if let Some(reason) = unserved(shared.mode(), why).filter(|_| !state.in_transaction()) {
                refuse_held(shared, state, frame, &reason, out);
                return None;
            }
            state.sent(b'B');
            out.extend_from_slice(&frame.bytes);
            if shared.sampling.wants() {
                match params {
                    Some(params) => shared.sampling.sample(
                        shared.stats.clone(),
                        (sql, params, state.role.clone()),
                        Side::Legacy,
                    ),
                    None => shared.stats.sample(SampleOutcome::ParamsNotRead),
                }
            }
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
        b'D' if !state.served.is_empty() => {
            let origins = frame::decode::<Describe>(&frame)
                .filter(|d| d.target_type == b'P')
                .and_then(|d| {
                    state
                        .served
                        .get(d.name.as_deref().unwrap_or_default())
                        .map(|p| p.origins.clone())
                });
            state.answers.push(Owed {
                awaits: Awaits::Describe,
                ours: false,
                origins,
                tag: None,
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
                awaits: Awaits::Execute,
                ours: false,
                origins: None,
                tag,
            });
            out.extend_from_slice(&frame.bytes);
        }
        b'S' => {
            // It ends the implicit transaction, and the portals with it.
            state.served.clear();
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

/// Holds the `Bind` of a prepared translatable write while the facade
/// runs it, or refuses it when it cannot run (a parameter in a binary
/// form the proxy does not read, or answers no longer counted).
fn bind_write(
    shared: &Shared,
    state: &mut State,
    frame: Frame,
    bind: &Bind,
    sql: String,
    types: &[u32],
    out: &mut BytesMut,
) -> Option<Pending> {
    if state.in_transaction() {
        // Forwarded, as every statement in a transaction block is.
        state.sent(b'B');
        out.extend_from_slice(&frame.bytes);
        return None;
    }
    let why = if state.answers.lost() {
        UNCOUNTED_WRITE
    } else {
        match params_nullable(types, &bind.parameter_format_codes, &bind.parameters) {
            Some(params) => {
                let answer = shared.sampling.write(sql, params, state.role.clone());
                return Some(Pending::new(shared, frame, answer, None));
            }
            None => {
                "a translatable write whose parameters are in a binary format the proxy does \
                 not read; send them as text"
            }
        }
    };
    refuse_write(shared, state, frame, why, out);
    None
}

/// Judges again a prepared statement bound in another mode than the one
/// its `Parse` was judged in (or on the other side of a transaction
/// block): why it is refused now, if it is.
/// One whose `Parse` was refused and that the new mode would forward
/// cannot run (PostgreSQL holds the refusal under its name): it is to be
/// prepared again.
fn rejudged(
    shared: &Shared,
    state: &State,
    name: &str,
    prepared: &Prepared,
    now: tripstore::Mode,
) -> Option<String> {
    let decision = shared
        .router
        .decide(&prepared.sql, now, state.in_transaction());
    match decision.verdict {
        Verdict::Refuse(reason) => Some(reason),
        Verdict::Forward if state.refused.contains(name) => Some(format!(
            "the statement was refused when it was prepared ({} mode{}), and PostgreSQL holds \
             that refusal under its name; the mode is now {now}: prepare it again",
            prepared.mode,
            if prepared.in_transaction {
                ", in a transaction block"
            } else {
                ""
            }
        )),
        Verdict::Forward => None,
    }
}

/// Why a translatable write is refused when the session's answers can no
/// longer be told apart from the proxy's.
const UNCOUNTED_WRITE: &str = "a translatable write runs through the facade, and this \
     session's answers can no longer be told apart from the proxy's; reconnect";

/// The decision on `sql`, counted.
fn route(shared: &Shared, state: &mut State, sql: &str) -> Decision {
    let mode = shared.mode();
    let decision = if state.layout {
        shared.router.decide(sql, mode, state.in_transaction())
    } else {
        Decision::unread()
    };
    let route = match decision.verdict {
        Verdict::Forward => Route::Forwarded,
        Verdict::Refuse(_) => Route::Refused,
    };
    shared.stats.statement(decision.class, mode, route);
    if opens_transaction(sql) {
        state.begun = true;
    }
    decision
}

/// Whether `sql` begins with `BEGIN` or `START TRANSACTION` (after
/// spaces and comments).
fn opens_transaction(sql: &str) -> bool {
    let mut rest = sql.trim_start();
    loop {
        if let Some(after) = rest.strip_prefix("--") {
            rest = after.split_once('\n').map_or("", |(_, r)| r).trim_start();
        } else if let Some(after) = rest.strip_prefix("/*") {
            rest = after.split_once("*/").map_or("", |(_, r)| r).trim_start();
        } else {
            break;
        }
    }
    let word: String = rest
        .chars()
        .take_while(|c| c.is_ascii_alphabetic())
        .collect::<String>()
        .to_ascii_lowercase();
    word == "begin" || word == "start"
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn transaction_openers_are_seen_past_comments() {
        assert!(opens_transaction("BEGIN"));
        assert!(opens_transaction("  begin isolation level serializable"));
        assert!(opens_transaction("/* app */ -- x\n START TRANSACTION"));
        assert!(!opens_transaction("SELECT 'begin'"));
        assert!(
            !opens_transaction("beginning"),
            "a longer word is not BEGIN"
        );
    }

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
            state.answers.push(Owed {
                awaits,
                ours: true,
                origins: None,
                tag: None,
            });
        }
        state.sent(b'B');
        state.sent(b'S');
        let mut buf =
            BytesMut::from(&b"1\0\0\0\x043\0\0\0\x041\0\0\0\x042\0\0\0\x04Z\0\0\0\x05I"[..]);
        complete(&mut buf, &mut state, &mut out);
        assert_eq!(&out[..], b"1\0\0\0\x042\0\0\0\x04Z\0\0\0\x05I");
    }
}
