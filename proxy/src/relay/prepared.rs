//! Prepared statements: each `Parse` naming a layout table judged and
//! remembered, and each `Bind` of one judged again when the mode (or the
//! transaction block) moved since, then held for Schemaless or the
//! facade, refused, or forwarded.

use std::collections::HashMap;

use bytes::BytesMut;
use pgwire::messages::extendedquery::{Bind, Close, Parse};

use super::held::{refuse_held, refuse_prepared, refuse_write, UNCOUNTED, UNCOUNTED_WRITE};
use super::pending::{Batch, Parsed};
use super::{route, Pending, State};
use crate::answers::Described;
use crate::frame::{self, Frame, Peeked};
use crate::params::{params_nullable, params_text};
use crate::route::{unserved, Decision, Resolution, Verdict};
use crate::stats::SampleOutcome;
use crate::Shared;
use verifier::Side;

/// A prepared statement naming a layout table, which the relay reads at
/// each `Bind`.
#[derive(Clone)]
pub(super) struct Prepared {
    sql: String,
    types: Vec<u32>,
    /// The mode it was judged in, at its `Parse`, and whether a
    /// transaction block was open: bound in another mode, or on the other
    /// side of a block, it is judged again as it would be now (an app's
    /// connection outlives a mode change).
    mode: tripstore::Mode,
    in_transaction: bool,
    /// What the session's bare names found when it was judged: bound
    /// after they changed (a `SET search_path`), it is judged again, as
    /// PostgreSQL resolves its names again.
    resolution: Resolution,
    /// One translatable read the relay may serve or sample.
    read: bool,
    /// One translatable write, which the facade runs in `primary` and
    /// `schemaless`.
    write: bool,
    /// Its shape, counted when it is forwarded before `primary`.
    shape: Option<String>,
}

/// A `Parse`: judged, and remembered when it names a layout table. A
/// refused one is still prepared as the app sent it (PostgreSQL's own
/// parse errors and its `Describe` answers reach the app as they would
/// directly), and refused at each `Bind`.
pub(super) fn parse(shared: &Shared, state: &mut State, frame: Frame, out: &mut BytesMut) {
    state.sent(b'P');
    let Some(parse) = frame::decode::<Parse>(&frame) else {
        out.extend_from_slice(&frame.bytes);
        return;
    };
    let name = parse.name.clone().unwrap_or_default();
    let mode = shared.mode();
    let in_transaction = state.in_transaction();
    let (decision, resolution) = route(shared, state, &parse.query, true);
    // Remembered if it names a layout table bare or qualified, whatever
    // the session's names find now: bound after they change, it may.
    let names_layout = decision.class != query::Class::Other
        || (resolution != Resolution::Layout
            && shared
                .router
                .decide(&parse.query, mode, in_transaction)
                .class
                != query::Class::Other);
    if names_layout {
        state.reads.insert(
            name.clone(),
            Prepared {
                sql: parse.query.clone(),
                types: parse.type_oids.clone(),
                mode,
                in_transaction,
                resolution,
                read: decision.samplable,
                write: decision.write,
                shape: decision.shapes.into_iter().next(),
            },
        );
    } else {
        state.reads.remove(&name);
    }
    match decision.verdict {
        Verdict::Forward => state.refused.remove(&name),
        Verdict::Refuse(reason) => state.refused.insert(name, reason),
    };
    out.extend_from_slice(&frame.bytes);
}

/// The name and text of prepared statement `name`, when the relay
/// remembers it: PostgreSQL's answer to its `Describe` gives the types it
/// resolved for every parameter ([`described`]). A driver that parses
/// without types, learns them from that answer and binds in binary
/// (asyncpg, Go's pgx) would otherwise bind parameters the relay cannot
/// read.
pub(super) fn remembered(state: &State, name: &str) -> Option<(String, String)> {
    let prepared = state.reads.get(name)?;
    Some((name.to_string(), prepared.sql.clone()))
}

/// The parameter types PostgreSQL resolved for a statement the relay
/// asked to learn, taken if the name still holds the same statement.
pub(super) fn described(state: &mut State, described: Described) {
    if let Some(prepared) = state
        .reads
        .get_mut(&described.name)
        .filter(|p| p.sql == described.sql)
    {
        prepared.types = described.types;
    }
}

/// A `Bind` of a statement the relay remembers (or refused): judged
/// again if the mode moved since its `Parse`, then held for Schemaless
/// or the facade, refused, or forwarded (and maybe sampled).
pub(super) fn bind(
    shared: &Shared,
    state: &mut State,
    frame: Frame,
    out: &mut BytesMut,
) -> Option<Pending> {
    if !state.batch.is_empty() {
        if let Some(result) = state.batched(&frame) {
            return Some(Pending::answered(shared, frame, result));
        }
    }
    let Some(bind) = frame::decode::<Bind>(&frame) else {
        state.sent(b'B');
        out.extend_from_slice(&frame.bytes);
        return None;
    };
    let portal = bind.portal_name.clone().unwrap_or_default();
    state.served.remove(&portal);
    let statement = bind.statement_name.as_deref().unwrap_or_default();
    let mut prepared = state.reads.get(statement).cloned();
    let now = shared.mode();
    let moved = |p: &Prepared| {
        p.mode != now
            || p.in_transaction != state.in_transaction()
            || p.resolution != state.resolution
    };
    // Judged again when the mode (or the block, or the names) moved since
    // its `Parse`; otherwise a `Parse` refused stays refused.
    let verdict = match prepared.as_mut().filter(|p| moved(p)) {
        Some(p) => rejudged(shared, state, p).map(|decision| {
            p.read = decision.samplable;
            p.write = decision.write;
            p.shape = decision.shapes.into_iter().next();
        }),
        None => state.refused.get(statement).cloned().map_or(Ok(()), Err),
    };
    if let Err(reason) = verdict {
        refuse_prepared(state, frame, &reason, out);
        return None;
    }
    let Some(Prepared {
        sql,
        types,
        read,
        write,
        shape,
        ..
    }) = prepared
    else {
        return state.forward(shared, frame, out);
    };
    if write && matches!(now, tripstore::Mode::Primary | tripstore::Mode::Schemaless) {
        return bind_write(shared, state, frame, &bind, sql, &types, out);
    }
    if let Some(shape) = shape.filter(|_| write && !state.in_transaction()) {
        shared.stats.forwarded_write(now, &shape);
    }
    if !read {
        return state.forward(shared, frame, out);
    }
    let params = params_text(
        &types,
        &bind.parameter_format_codes,
        &bind.parameters,
        &shared.extensions,
    );
    let may_serve = state.may_serve(shared);
    if let (Some(params), true) = (&params, may_serve) {
        let answer = shared
            .sampling
            .serve(sql.clone(), params.clone(), state.session.clone());
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
    if shared.sampling.wants() {
        match params {
            Some(params) => shared.sampling.sample(
                shared.stats.clone(),
                (sql, params, state.session.clone()),
                Side::Legacy,
            ),
            None => shared.stats.sample(SampleOutcome::ParamsNotRead),
        }
    }
    state.forward(shared, frame, out)
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
        return state.forward(shared, frame, out);
    }
    let why = if state.answers.lost() {
        UNCOUNTED_WRITE
    } else {
        match params_nullable(
            types,
            &bind.parameter_format_codes,
            &bind.parameters,
            &shared.extensions,
        ) {
            Some(params) => return Some(Pending::write(shared, state, frame, (sql, params), out)),
            None => {
                "a translatable write whose parameters are in a binary format the proxy does \
                 not read; send them as text"
            }
        }
    };
    refuse_write(shared, state, frame, why, out);
    None
}

/// How many bytes of a pipelined batch the relay reads ahead, waiting
/// for its `Sync`, before it refuses the batch instead.
const MOST_BATCHED: usize = 16 << 20;

/// The rest of a pipelined batch after a held write's `Bind` (`unread`,
/// up to its `Sync`): whether it is only translatable writes the facade
/// runs now, with their `Describe`s, `Execute`s and `Close`s. Each
/// `Bind` binds a statement prepared before the batch (as judged when it
/// was prepared) or one the batch parses itself (JDBC's
/// `Statement.addBatch`, a psycopg pipeline: each statement's own
/// `Parse`), judged here; those `Parse`s are returned to be checked on
/// PostgreSQL before anything runs ([`Parsed`]).
pub(super) fn batched_writes(shared: &Shared, state: &State, unread: &[u8]) -> Batch {
    let now = shared.mode();
    let waiting = || {
        if unread.len() > MOST_BATCHED {
            Batch::Not
        } else {
            Batch::Unknown
        }
    };
    // Each message is decoded only once the `Sync` has come (the batch is
    // looked at again on every read of the app's messages until then).
    if !synced(unread) {
        return waiting();
    }
    let facade_runs = matches!(now, tripstore::Mode::Primary | tripstore::Mode::Schemaless);
    let mut binds = Vec::new();
    let mut parsed: Vec<Parsed> = Vec::new();
    // Statements the batch parses (`Some`) or closes (`None`) by name,
    // before PostgreSQL has seen any of it.
    let mut batch_names: HashMap<String, Option<(String, Vec<u32>)>> = HashMap::new();
    for peeked in frame::peek(unread) {
        let bytes = match peeked {
            Peeked::Whole(_, bytes) => bytes,
            Peeked::Partial(_) => return waiting(),
            Peeked::Malformed => return Batch::Not,
        };
        let frame = |kind| Frame {
            kind,
            bytes: BytesMut::from(bytes),
        };
        match bytes[0] {
            b'S' if binds.is_empty() => return Batch::Not,
            b'S' => return Batch::Writes { binds, parsed },
            b'D' | b'E' => {}
            b'C' => {
                let Some(close) = frame::decode::<Close>(&frame(b'C')) else {
                    return Batch::Not;
                };
                if close.target_type == b'S' {
                    // A later `Bind` of it fails on PostgreSQL (26000).
                    batch_names.insert(close.name.unwrap_or_default(), None);
                }
            }
            b'P' => {
                let Some(parse) = frame::decode::<Parse>(&frame(b'P')) else {
                    return Batch::Not;
                };
                let decision =
                    super::judge::decide(shared, state, &parse.query, now, state.resolution);
                if decision.verdict != Verdict::Forward || !decision.writable || !facade_runs {
                    return Batch::Not;
                }
                let name = parse.name.unwrap_or_default();
                if !name.is_empty() && matches!(batch_names.get(&name), Some(Some(_))) {
                    // Named twice without a `Close`: PostgreSQL refuses the
                    // second (42P05).
                    return Batch::Not;
                }
                batch_names.insert(
                    name.clone(),
                    Some((parse.query.clone(), parse.type_oids.clone())),
                );
                parsed.push(Parsed {
                    name,
                    sql: parse.query,
                    types: parse.type_oids,
                });
            }
            b'B' => {
                let frame = frame(b'B');
                let Some(bind) = frame::decode::<Bind>(&frame) else {
                    return Batch::Not;
                };
                let name = bind.statement_name.as_deref().unwrap_or_default();
                let (sql, types) = match batch_names.get(name) {
                    Some(Some((sql, types))) => (sql, types),
                    Some(None) => return Batch::Not,
                    None => match state.reads.get(name).filter(|p| {
                        p.write
                            && p.mode == now
                            && p.in_transaction == state.in_transaction()
                            && p.resolution == state.resolution
                            && !state.refused.contains_key(name)
                            && facade_runs
                    }) {
                        Some(p) => (&p.sql, &p.types),
                        None => return Batch::Not,
                    },
                };
                let Some(params) = params_nullable(
                    types,
                    &bind.parameter_format_codes,
                    &bind.parameters,
                    &shared.extensions,
                ) else {
                    return Batch::Not;
                };
                binds.push((frame.bytes, (sql.clone(), params)));
            }
            _ => return Batch::Not,
        }
    }
    waiting()
}

/// Whether the whole of a `Sync` is among the messages at the start of
/// `unread` (their headers only are read).
fn synced(unread: &[u8]) -> bool {
    frame::peek(unread).any(|peeked| {
        // Malformed: the batch is judged (and refused) now.
        matches!(peeked, Peeked::Whole(b'S', _) | Peeked::Malformed)
    })
}

/// Judges again a prepared statement bound in another mode than the one
/// its `Parse` was judged in (or on the other side of a transaction
/// block, or after the session's names changed): its decision now, or
/// why it is refused now. One whose `Parse` was refused runs if it
/// would now be forwarded: PostgreSQL holds it as the app sent it.
fn rejudged(shared: &Shared, state: &State, prepared: &Prepared) -> Result<Decision, String> {
    let decision = super::judge::decide(
        shared,
        state,
        &prepared.sql,
        shared.mode(),
        state.resolution,
    );
    match decision.verdict {
        Verdict::Refuse(reason) => Err(reason),
        Verdict::Forward => Ok(decision),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::frame::message;

    #[test]
    fn a_batch_is_synced_once_its_whole_sync_has_come() {
        let bind = message(b'B', b"\0\0\0\0\0\0\0\0");
        let execute = message(b'E', b"\0\0\0\0\0");
        let batch = [
            bind.clone(),
            execute.clone(),
            bind,
            execute,
            message(b'S', b""),
        ]
        .concat();
        assert!(synced(&batch));
        for cut in 0..batch.len() {
            assert!(!synced(&batch[..cut]), "{cut}");
        }
        assert!(synced(b"E\0\0\0\x02"), "malformed: judged at once");
    }
}
