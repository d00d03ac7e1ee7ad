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

use std::collections::{HashMap, HashSet, VecDeque};
use std::time::Duration;

use bytes::{Buf, BytesMut};
use pgwire::messages::extendedquery::{Bind, Close, Parse};
use pgwire::messages::simplequery::Query;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::frame::{self, Frame, FrameError};
use query::run::{Origin, Serving};
use tokio::sync::oneshot;

use crate::route::{refusing_statement, Decision, Verdict};
use crate::sample::params_text;
use crate::stats::{Route, SampleOutcome, Store};
use crate::Shared;

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
#[derive(Default)]
struct State {
    /// The status byte of the last `ReadyForQuery`: `I` idle, `T` in a
    /// transaction block, `E` in a failed one (0 before the first).
    status: u8,
    /// `Query` and `Sync` messages sent that PostgreSQL has not yet
    /// answered with `ReadyForQuery`.
    unanswered: usize,
    /// A `BEGIN` was sent since PostgreSQL was last seen idle with
    /// nothing unanswered: a client that pipelines its next statement
    /// behind it is in the block before PostgreSQL says so.
    begun: bool,
    /// Prepared statements whose `Parse` was refused (`""` the unnamed
    /// one): their `Bind`s lose their parameters, so PostgreSQL reaches
    /// the refusal at `Execute` instead of a parameter count mismatch.
    refused: HashSet<String>,
    /// Prepared statements the verifier may sample (one translatable
    /// read each): their SQL and the `Parse`'s parameter types.
    reads: HashMap<String, (String, Vec<u32>)>,
    /// One entry per `Query`, `Sync` and `FunctionCall` sent, in order, until its
    /// `ReadyForQuery`: for a read served from Schemaless, the origins its
    /// `RowDescription` must name.
    units: VecDeque<Option<Vec<Origin>>>,
}

/// A `Query` waiting for Schemaless's answer; nothing the app sent after
/// it is read until it is settled, so the order of statements holds.
struct Pending {
    query: Frame,
    answer: oneshot::Receiver<Serving>,
}

impl State {
    fn in_transaction(&self) -> bool {
        (self.status != 0 && self.status != b'I') || self.begun
    }

    fn idle(&self) -> bool {
        !self.in_transaction() && self.unanswered == 0
    }

    fn ready(&mut self, status: u8) {
        self.units.pop_front();
        self.status = status;
        self.unanswered = self.unanswered.saturating_sub(1);
        if self.unanswered == 0 {
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
) -> Result<(), Fatal> {
    let max = shared.settings.max_message_bytes;
    let idle_timeout = Duration::from_millis(shared.settings.idle_timeout_ms);
    let (mut client_rd, mut client_wr) = tokio::io::split(client);
    let (mut pg_rd, mut pg_wr) = pg.split();
    // The startup's own `ReadyForQuery` answers the first unit.
    let mut state = State {
        unanswered: 1,
        units: VecDeque::from([None]),
        ..State::default()
    };
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
        let scanned = complete(&mut from_pg, &mut state);
        if scanned > 0 {
            to_client.extend_from_slice(&from_pg.split_to(scanned));
        }
        if terminated && to_pg.is_empty() {
            return Ok(());
        }
        let watch_idle = !idle_timeout.is_zero() && state.idle() && to_pg.is_empty();
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
                let Pending { query, .. } = pending.take().expect("guarded");
                settle(shared, &mut state, query, served, &mut to_pg);
            }
            _ = tokio::time::sleep(idle_timeout), if watch_idle => {
                let _ = pg_wr.write_all(b"X\0\0\0\x04").await;
                return Err(Fatal::Idle(idle_timeout));
            }
        }
    }
}

/// The length of the whole messages at the start of `buf`, noting each
/// `ReadyForQuery`'s status before the app can see it.
fn complete(buf: &mut BytesMut, state: &mut State) -> usize {
    let mut at = 0;
    while buf.len() - at >= 5 {
        let len = u32::from_be_bytes([buf[at + 1], buf[at + 2], buf[at + 3], buf[at + 4]]) as usize;
        if buf.len() - at < len + 1 {
            break;
        }
        match buf[at] {
            b'Z' if len == 5 => state.ready(buf[at + 5]),
            b'T' => {
                if let Some(Some(origins)) = state.units.front() {
                    name_origins(&mut buf[at + 5..at + 1 + len], origins);
                }
            }
            _ => {}
        }
        at += len + 1;
    }
    at
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

/// Appends what PostgreSQL is to get for `frame`, or holds a `Query`
/// Schemaless may answer.
fn message(
    shared: &Shared,
    state: &mut State,
    frame: Frame,
    out: &mut BytesMut,
) -> Option<Pending> {
    match frame.kind {
        b'Q' => {
            state.unanswered += 1;
            let Some(query) = frame::decode::<Query>(&frame) else {
                // PostgreSQL names what is wrong with it.
                state.units.push_back(None);
                out.extend_from_slice(&frame.bytes);
                return None;
            };
            let in_transaction = state.in_transaction();
            let decision = route(shared, state, &query.query);
            if decision.samplable && !in_transaction && shared.sampling.may_serve() {
                let answer = shared.sampling.serve(query.query);
                return Some(Pending {
                    query: frame,
                    answer,
                });
            }
            state.units.push_back(None);
            if decision.samplable && shared.sampling.wants() {
                shared
                    .sampling
                    .sample(shared.stats.clone(), query.query.clone(), Vec::new());
            }
            match decision.verdict {
                Verdict::Forward => out.extend_from_slice(&frame.bytes),
                Verdict::Refuse(reason) => {
                    frame::encode(&Query::new(refusing_statement(&reason)), out)
                }
            }
        }
        b'P' => {
            let Some(parse) = frame::decode::<Parse>(&frame) else {
                out.extend_from_slice(&frame.bytes);
                return None;
            };
            let name = parse.name.clone().unwrap_or_default();
            let decision = route(shared, state, &parse.query);
            match decision.verdict {
                Verdict::Forward => {
                    state.refused.remove(&name);
                    if decision.samplable {
                        state.reads.insert(name, (parse.query, parse.type_oids));
                    } else {
                        state.reads.remove(&name);
                    }
                    out.extend_from_slice(&frame.bytes);
                }
                Verdict::Refuse(reason) => {
                    state.reads.remove(&name);
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
                out.extend_from_slice(&frame.bytes);
                return None;
            };
            let statement = bind.statement_name.as_deref().unwrap_or_default();
            if state.refused.contains(statement) {
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
            out.extend_from_slice(&frame.bytes);
            if let Some((sql, types)) = state.reads.get(statement) {
                if shared.sampling.wants() {
                    match params_text(types, &bind.parameter_format_codes, &bind.parameters) {
                        Some(params) => {
                            shared
                                .sampling
                                .sample(shared.stats.clone(), sql.clone(), params)
                        }
                        None => shared.stats.sample(SampleOutcome::ParamsNotRead),
                    }
                }
            }
        }
        b'C' if !state.refused.is_empty() || !state.reads.is_empty() => {
            if let Some(close) = frame::decode::<Close>(&frame) {
                if close.target_type == b'S' {
                    let name = close.name.as_deref().unwrap_or_default();
                    state.refused.remove(name);
                    state.reads.remove(name);
                }
            }
            out.extend_from_slice(&frame.bytes);
        }
        // `Sync`, and a `FunctionCall`: each gets a `ReadyForQuery`.
        b'S' | b'F' => {
            state.unanswered += 1;
            state.units.push_back(None);
            out.extend_from_slice(&frame.bytes);
        }
        _ => out.extend_from_slice(&frame.bytes),
    }
    None
}

/// Sends a held `Query`: the statement rendering Schemaless's rows, or
/// the app's own when it is to be forwarded.
fn settle(
    shared: &Shared,
    state: &mut State,
    query: Frame,
    served: Result<Serving, oneshot::error::RecvError>,
    out: &mut BytesMut,
) {
    match served {
        Ok(Serving::Serve(rendering)) => {
            shared.stats.served(Store::Schemaless);
            state.units.push_back(Some(rendering.origins));
            frame::encode(&Query::new(rendering.sql), out);
        }
        Ok(Serving::Forward(why)) => {
            tracing::debug!("proxy: a translatable read is forwarded: {why}");
            shared.stats.served(Store::Postgresql);
            state.units.push_back(None);
            out.extend_from_slice(&query.bytes);
        }
        Err(_) => {
            shared.stats.served(Store::Postgresql);
            state.units.push_back(None);
            out.extend_from_slice(&query.bytes);
        }
    }
}

/// The decision on `sql`, counted.
fn route(shared: &Shared, state: &mut State, sql: &str) -> Decision {
    let mode = shared.mode();
    let decision = shared.router.decide(sql, mode, state.in_transaction());
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
        let mut state = State {
            unanswered: 1,
            begun: true,
            ..State::default()
        };
        // CommandComplete "SELECT 1", then half a ReadyForQuery.
        let mut buf = BytesMut::from(&b"C\0\0\0\x0dSELECT 1\0Z\0\0"[..]);
        assert_eq!(complete(&mut buf, &mut state), 14);
        assert!(state.begun && state.unanswered == 1);
        buf.extend_from_slice(b"\0\x05T");
        assert_eq!(complete(&mut buf, &mut state), 20);
        assert_eq!(state.status, b'T');
        assert!(state.in_transaction() && !state.begun && state.unanswered == 0);
    }

    /// A `RowDescription` of fields (name, table OID, attribute number).
    fn row_description(fields: &[(&str, u32, i16)]) -> BytesMut {
        let mut body = Vec::new();
        body.extend_from_slice(&(fields.len() as i16).to_be_bytes());
        for (name, table, attnum) in fields {
            body.extend_from_slice(name.as_bytes());
            body.push(0);
            body.extend_from_slice(&table.to_be_bytes());
            body.extend_from_slice(&attnum.to_be_bytes());
            // type OID, size, modifier, format
            body.extend_from_slice(&[0, 0, 0, 25, 255, 255, 255, 255, 255, 255, 0, 0]);
        }
        let mut out = BytesMut::from(&b"T"[..]);
        out.extend_from_slice(&((body.len() + 4) as u32).to_be_bytes());
        out.extend_from_slice(&body);
        out
    }

    #[test]
    fn a_served_reads_row_description_names_its_columns_origins() {
        let served = vec![
            Origin {
                table: 16384,
                attnum: 3,
            },
            Origin::default(),
        ];
        // The startup's unit, then a served read's, then a forwarded one's.
        let mut state = State {
            unanswered: 3,
            units: VecDeque::from([None, Some(served), None]),
            ..State::default()
        };
        let mut buf = BytesMut::from(&b"Z\0\0\0\x05I"[..]);
        buf.extend_from_slice(&row_description(&[("fare", 0, 0), ("?column?", 0, 0)]));
        buf.extend_from_slice(b"Z\0\0\0\x05I");
        buf.extend_from_slice(&row_description(&[("x", 0, 0)]));
        let len = buf.len();
        assert_eq!(complete(&mut buf, &mut state), len);
        let mut expected = BytesMut::from(&b"Z\0\0\0\x05I"[..]);
        expected.extend_from_slice(&row_description(&[("fare", 16384, 3), ("?column?", 0, 0)]));
        expected.extend_from_slice(b"Z\0\0\0\x05I");
        expected.extend_from_slice(&row_description(&[("x", 0, 0)]));
        assert_eq!(buf, expected, "only the served read's description changes");
        assert_eq!(state.units.len(), 1);
    }
}
