//! What becomes of a `Query` or `Bind` the relay held while Schemaless
//! answered it: the statement rendering Schemaless's rows sent in its
//! place, the app's own message forwarded, or (in `schemaless`) a
//! refusal raised by PostgreSQL where the read would have run.

use bytes::BytesMut;
use pgwire::messages::extendedquery::{Bind, Close, Parse};
use pgwire::messages::simplequery::Query;
use query::run::Serving;
use tokio::sync::oneshot;
use verifier::Side;

use super::State;
use crate::answers::{Awaits, Owed};
use crate::frame::{self, Frame};
use crate::route::{refusing_statement, unserved};
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
    (frame, mode): (Frame, tripstore::Mode),
    served: Result<Serving, oneshot::error::RecvError>,
    out: &mut BytesMut,
) -> Option<Side> {
    let why = match served {
        Ok(Serving::Serve(rendering)) => {
            return serve_held(shared, state, frame, rendering, out);
        }
        Ok(Serving::Forward(why)) => why,
        Err(_) => "the proxy is shutting down".to_string(),
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
/// `Query` or `Bind`.
fn serve_held(
    shared: &Shared,
    state: &mut State,
    frame: Frame,
    rendering: query::run::Rendering,
    out: &mut BytesMut,
) -> Option<Side> {
    if frame.kind == b'Q' {
        shared.stats.served(Store::Schemaless);
        state.answers.push(Owed {
            awaits: Awaits::Query,
            ours: false,
            origins: Some(rendering.origins),
        });
        frame::encode(&Query::new(rendering.sql), out);
        return Some(Side::Schemaless);
    }
    let Some(bind) = frame::decode::<Bind>(&frame) else {
        forward(shared, state, frame, out);
        return Some(Side::Legacy);
    };
    shared.stats.served(Store::Schemaless);
    let name = prepare_ours(state, rendering.sql, out);
    state.sent(b'B');
    state.served.insert(
        bind.portal_name.clone().unwrap_or_default(),
        rendering.origins,
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

/// Prepares `sql` as [`SERVED_STATEMENT`] (closing the one before), the
/// answers to both kept from the app; its name, for the `Bind`.
fn prepare_ours(state: &mut State, sql: String, out: &mut BytesMut) -> Option<String> {
    let name = Some(SERVED_STATEMENT.to_string());
    let ours = |awaits| Owed {
        awaits,
        ours: true,
        origins: None,
    };
    state.answers.push(ours(Awaits::Close));
    frame::encode(&Close::new(b'S', name.clone()), out);
    state.answers.push(ours(Awaits::Parse));
    frame::encode(&Parse::new(name.clone(), sql, Vec::new()), out);
    name
}

/// Why a session's reads are not served although the mode serves them:
/// an answer from PostgreSQL fit nothing it was sent, so the proxy no
/// longer knows which answers are its own.
pub(super) const UNCOUNTED: &str =
    "this session's answers can no longer be told apart from the proxy's; \
                         reconnect";

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
    if frame.kind == b'Q' {
        state.sent(b'Q');
        frame::encode(&Query::new(refusing_statement(reason)), out);
        return;
    }
    let Some(bind) = frame::decode::<Bind>(&frame) else {
        return forward(shared, state, frame, out);
    };
    let name = prepare_ours(state, refusing_statement(reason), out);
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
