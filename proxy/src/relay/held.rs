//! What becomes of a `Query` or `Bind` the relay held while Schemaless
//! answered it: the statement rendering Schemaless's rows sent in its
//! place, the app's own message forwarded, or (in `schemaless`) a
//! refusal raised by PostgreSQL where the read would have run. A write
//! the facade ran is answered the same way: the statement rendering its
//! RETURNING rows (or nothing) with the write's command tag, or the
//! error PostgreSQL would have raised, raised where the write would have
//! run.

use bytes::BytesMut;
use pgwire::messages::extendedquery::{Bind, Close, Parse};
use pgwire::messages::simplequery::Query;
use query::run::{Refused, Serving};
use tokio::sync::oneshot;
use verifier::Side;

use super::State;
use crate::answers::{Awaits, Owed};
use crate::frame::{self, Frame};
use crate::route::{raising_with, refusing_statement, unserved};
use crate::sample::Held;
use crate::stats::Store;
use crate::Shared;

/// The name of the statement a served `Bind` binds: the app's own
/// statements keep theirs. Not a name an app would choose (a NUL cannot be
/// in one, but a control character can).
pub(super) const SERVED_STATEMENT: &str = "\u{1}mezzanine served";

/// Sends a held `Query` or `Bind`: for a `Query`, the statement rendering
/// Schemaless's rows; for a `Bind`, that statement prepared (under
/// [`SERVED_STATEMENT`], its answers kept from the app) and bound to the
/// app's portal with the app's result formats. Or the app's own message,
/// when it is to be forwarded.
///
/// The store that answers, if one does (not for a refusal).
pub(super) fn settle(
    shared: &Shared,
    state: &mut State,
    (frame, mode, write): (Frame, tripstore::Mode, bool),
    served: Result<Held, oneshot::error::RecvError>,
    out: &mut BytesMut,
) -> Option<Side> {
    let why = match served {
        Ok(Held::Read(Serving::Serve(rendering))) => {
            return serve_held(shared, state, frame, rendering, None, out);
        }
        Ok(Held::Read(Serving::Forward(why))) => why,
        Ok(Held::Applied { awaited, unserved }) => {
            shared.stats.read_your_writes(awaited.as_str());
            match unserved {
                Some(why) => why,
                None => {
                    state.sent(frame.kind);
                    out.extend_from_slice(&frame.bytes);
                    return None;
                }
            }
        }
        Ok(Held::Write(Ok(mut written))) => {
            shared.stats.write(Some(written.cells));
            // In `primary` the reverse mirror brings them to PostgreSQL:
            // the session's next statement forwarded there waits for it.
            if mode == tripstore::Mode::Primary && shared.settings.read_your_writes_ms > 0 {
                let shards = shared.sampling.shard_count();
                state.awaiting(std::mem::take(&mut written.written), shards);
            }
            serve_held(
                shared,
                state,
                frame,
                written.rendering,
                Some(written.tag),
                out,
            );
            return None;
        }
        Ok(Held::Write(Err(refused))) => {
            fail_write(shared, state, frame, &refused, out);
            return None;
        }
        Ok(Held::Writes(results)) => {
            // Only a `Query` holds several statements: it is answered by
            // another, composed of their answers.
            serve_writes(shared, state, mode, results, out);
            return None;
        }
        Ok(Held::Batch(_)) => {
            // Unpacked into its first write's answer before it is settled.
            let refused = Refused::new("XX000", "a batch's answer reached one write");
            fail_write(shared, state, frame, &refused, out);
            return None;
        }
        Err(_) if !write => "the proxy is shutting down".to_string(),
        Err(_) => {
            // Nothing of it ran; a write is not sent to PostgreSQL behind
            // the facade.
            let refused = Refused::new("57P01", "the mezzanine proxy is shutting down");
            fail_write(shared, state, frame, &refused, out);
            return None;
        }
    };
    if let Some(reason) = unserved(mode, &why) {
        refuse_held(shared, state, frame, &reason, out);
        return None;
    }
    tracing::debug!("proxy: a translatable read is forwarded: {why}");
    forward(shared, state, frame, out);
    Some(Side::Legacy)
}

/// Sends the statement rendering Schemaless's rows in place of a held
/// `Query` or `Bind`; `tag`, a write's, replaces the one PostgreSQL
/// answers it with.
fn serve_held(
    shared: &Shared,
    state: &mut State,
    frame: Frame,
    rendering: query::run::Rendering,
    tag: Option<String>,
    out: &mut BytesMut,
) -> Option<Side> {
    let read = tag.is_none();
    if frame.kind == b'Q' {
        if read {
            shared.stats.served(Store::Schemaless);
        }
        state.answers.push(Owed {
            origins: Some(rendering.origins),
            tag,
            ..Owed::app(Awaits::Query)
        });
        frame::encode(&Query::new(rendering.sql), out);
        return Some(Side::Schemaless);
    }
    let Some(bind) = frame::decode::<Bind>(&frame) else {
        // Not seen: the relay decoded it to hold it.
        forward(shared, state, frame, out);
        return Some(Side::Legacy);
    };
    if read {
        shared.stats.served(Store::Schemaless);
    }
    let name = prepare_ours(state, rendering.sql, out);
    state.sent(b'B');
    state.served.insert(
        bind.portal_name.clone().unwrap_or_default(),
        super::ServedPortal {
            origins: rendering.origins,
            tag,
        },
    );
    frame::encode(
        &Bind::new(
            bind.portal_name,
            name,
            Vec::new(),
            Vec::new(),
            bind.result_column_format_codes,
        ),
        out,
    );
    Some(Side::Schemaless)
}

/// Answers a held `Query` of several writes the facade ran as one
/// (`results`: one per statement, or up to the first that failed): one
/// `Query` to PostgreSQL of each statement's rendering, in order, each
/// `CommandComplete` retagged with its write's tag; a failure is raised
/// where its statement would have run, after the ones before it answered,
/// as PostgreSQL answers a `Query` whose statement fails (its implicit
/// transaction rolled back: the facade put nothing).
fn serve_writes(
    shared: &Shared,
    state: &mut State,
    mode: tripstore::Mode,
    results: Vec<Result<query::run::Written, Refused>>,
    out: &mut BytesMut,
) {
    let mut statements = Vec::with_capacity(results.len());
    let mut answers = std::collections::VecDeque::with_capacity(results.len());
    let failed = results.iter().any(Result::is_err);
    for result in results {
        match result {
            Ok(mut written) => {
                if !failed {
                    shared.stats.write(Some(written.cells));
                    if mode == tripstore::Mode::Primary && shared.settings.read_your_writes_ms > 0 {
                        let shards = shared.sampling.shard_count();
                        state.awaiting(std::mem::take(&mut written.written), shards);
                    }
                }
                statements.push(written.rendering.sql);
                answers.push_back((Some(written.rendering.origins), Some(written.tag)));
            }
            Err(refused) => {
                shared.stats.write(None);
                let hint = (refused.sqlstate == "58000")
                    .then_some("mezzanine proxy: the write ran through the facade, in Schemaless");
                statements.push(raising_with(
                    &refused.sqlstate,
                    &refused.message,
                    hint,
                    &refused.diagnostics,
                ));
                break;
            }
        }
    }
    let (origins, tag) = answers.pop_front().unwrap_or_default();
    state.answers.push(Owed {
        origins,
        tag,
        then: answers,
        ..Owed::app(Awaits::Query)
    });
    frame::encode(&Query::new(statements.join(";\n")), out);
}

/// Prepares `sql` as [`SERVED_STATEMENT`] (closing the one before), the
/// answers to both kept from the app; its name, for the `Bind`.
fn prepare_ours(state: &mut State, sql: String, out: &mut BytesMut) -> Option<String> {
    let name = Some(SERVED_STATEMENT.to_string());
    state.answers.push(Owed::ours(Awaits::Close));
    frame::encode(&Close::new(b'S', name.clone()), out);
    state.answers.push(Owed::ours(Awaits::Parse));
    frame::encode(&Parse::new(name.clone(), sql, Vec::new()), out);
    name
}

/// Why a session's reads are not served although the mode serves them:
/// an answer from PostgreSQL fit nothing it was sent, so the proxy no
/// longer knows which answers are its own.
pub(super) const UNCOUNTED: &str =
    "this session's answers can no longer be told apart from the proxy's; \
                         reconnect";

/// Why a translatable write is refused when the session's answers can no
/// longer be told apart from the proxy's.
pub(super) const UNCOUNTED_WRITE: &str = "a translatable write runs through the facade, and this \
     session's answers can no longer be told apart from the proxy's; reconnect";

/// A `Query` or `Bind` of a translatable read refused (in `schemaless`,
/// where PostgreSQL cannot answer it instead): PostgreSQL raises the
/// refusal where the read would have run, so it reaches the app in order
/// and the extended protocol skips to `Sync` as for any error. A `Bind`
/// binds the app's portal to the refusing statement, prepared under
/// [`SERVED_STATEMENT`] with its answers kept from the app.
pub(super) fn refuse_held(
    shared: &Shared,
    state: &mut State,
    frame: Frame,
    reason: &str,
    out: &mut BytesMut,
) {
    shared.stats.served(Store::Refused);
    raise_held(state, frame, refusing_statement(reason), out);
}

/// A prepared statement's `Bind` that the mode, changed since its
/// `Parse`, refuses (`0A000`): the portal is bound to the refusal.
pub(super) fn refuse_prepared(state: &mut State, frame: Frame, reason: &str, out: &mut BytesMut) {
    tracing::debug!("proxy: a prepared statement is refused at its Bind: {reason}");
    raise_held(state, frame, refusing_statement(reason), out);
}

/// A held translatable write the proxy refuses to run (`0A000`).
pub(super) fn refuse_write(
    shared: &Shared,
    state: &mut State,
    frame: Frame,
    reason: &str,
    out: &mut BytesMut,
) {
    shared.stats.write(None);
    raise_held(state, frame, refusing_statement(reason), out);
}

/// A held write the facade failed: the error PostgreSQL would have
/// raised, with its SQLSTATE.
fn fail_write(
    shared: &Shared,
    state: &mut State,
    frame: Frame,
    refused: &Refused,
    out: &mut BytesMut,
) {
    shared.stats.write(None);
    let hint = (refused.sqlstate == "58000")
        .then_some("mezzanine proxy: the write ran through the facade, in Schemaless");
    raise_held(
        state,
        frame,
        raising_with(
            &refused.sqlstate,
            &refused.message,
            hint,
            &refused.diagnostics,
        ),
        out,
    );
}

/// Sends `raising` (a statement raising an error) where the held
/// message would have run; a `Bind` binds the app's portal to it.
fn raise_held(state: &mut State, frame: Frame, raising: String, out: &mut BytesMut) {
    if frame.kind == b'Q' {
        state.sent(b'Q');
        frame::encode(&Query::new(raising), out);
        return;
    }
    let Some(bind) = frame::decode::<Bind>(&frame) else {
        // Not seen: the relay decoded it to hold it.
        state.sent(frame.kind);
        out.extend_from_slice(&frame.bytes);
        return;
    };
    let name = prepare_ours(state, raising, out);
    state.sent(b'B');
    state
        .served
        .remove(bind.portal_name.as_deref().unwrap_or_default());
    frame::encode(
        &Bind::new(bind.portal_name, name, Vec::new(), Vec::new(), Vec::new()),
        out,
    );
}

/// A held message sent as the app sent it.
fn forward(shared: &Shared, state: &mut State, frame: Frame, out: &mut BytesMut) {
    shared.stats.served(Store::Postgresql);
    state.sent(frame.kind);
    out.extend_from_slice(&frame.bytes);
}
