//! Which tables the session's bare names find, and which role it runs
//! as, asked of PostgreSQL in the session itself.
//!
//! The translator reads `trips` as the layout's table. In the facade's
//! own session it is; in an app's it is whatever the app's `search_path`
//! finds first: `SET search_path = archive` makes it `archive.trips`, a
//! `CREATE TEMP TABLE trips` makes it the temporary one, and a role's
//! schema (`"$user"`) can come first. Serving that statement from
//! Schemaless, or running it as a write through the facade, would answer
//! or change another table than the app named. PostgreSQL 15 does not
//! report `search_path` or `SET ROLE` to the session (`ParameterStatus`),
//! so the relay asks: between two statements, with nothing owed and no
//! transaction open, it sends the session [`Router::probe`]'s statement
//! (`to_regclass` of each bare name against the qualified one,
//! `current_user` and `search_path`) under [`PROBE_STATEMENT`], extended
//! protocol, answers
//! kept from the app, and holds the app's next messages until it is
//! answered (one round trip).
//!
//! It asks at the session's start, after any statement that may change
//! the answer ([`changes`]: a `SET`/`RESET` of the path or the role,
//! `DISCARD`, DDL), and when the last answer is older than
//! [`FRESH`] (a function that sets the path, another session's DDL). Until
//! the answer to a change comes (a change pipelined with the statement it
//! affects), the session's names are [`Resolution::Unknown`].
//!
//! [`Router::probe`]: crate::route::Router::probe

use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::BytesMut;
use pgwire::messages::extendedquery::{Bind, Close, Execute, Parse, Sync};

use super::State;
use crate::answers::{Owed, Probed};
use crate::frame;
use crate::route::Resolution;
use crate::Shared;

/// The name the probe is prepared under: not one an app would choose (a
/// NUL cannot be in a name, a control character can).
pub(super) const PROBE_STATEMENT: &str = "\u{1}mezzanine probe";

/// How long an answer is trusted for changes the relay cannot see in the
/// app's text (a function or a `DO` block setting the path, another
/// session creating a table that comes first on it).
const FRESH: Duration = Duration::from_secs(1);

/// The first words (lowercase) of statements after which the answer may
/// differ: `SET` and `RESET` (of the path, of the role, `SET SESSION
/// AUTHORIZATION`, whose `"$user"` the path may name, `RESET ALL`),
/// `DISCARD`, DDL that adds, drops, renames or moves a table or schema,
/// and `DO` and `CALL`, which may run any of these. Only the first word:
/// a column called `created_at` is not a `CREATE`.
pub(super) const CHANGERS: [&str; 9] = [
    "set", "reset", "discard", "create", "drop", "alter", "import", "do", "call",
];

/// Whether a statement (its text, and its first word) may change which
/// tables the session's bare names find, or its role: one of
/// [`CHANGERS`], a `set_config` call, or a `SELECT ... INTO`. Read on
/// every statement, so nothing is allocated.
pub(super) fn changes(first: &str, sql: &str) -> bool {
    let has = |needle: &str| {
        sql.as_bytes()
            .windows(needle.len())
            .any(|w| w.eq_ignore_ascii_case(needle.as_bytes()))
    };
    CHANGERS.iter().any(|w| first.eq_ignore_ascii_case(w))
        || has("set_config")
        || (first.eq_ignore_ascii_case("select") && has(" into "))
}

/// The probe's state in one session.
#[derive(Debug)]
pub(super) struct Probe {
    /// The session may have changed since the last answer.
    due: bool,
    in_flight: bool,
    /// When the last answer came.
    at: Option<Instant>,
}

impl Probe {
    pub(super) fn new() -> Probe {
        Probe {
            due: true,
            in_flight: false,
            at: None,
        }
    }

    /// Sent and not answered yet: the app's next messages wait.
    pub(super) fn in_flight(&self) -> bool {
        self.in_flight
    }

    /// The session may have changed: ask again at the next chance.
    pub(super) fn due(&mut self) {
        self.due = true;
    }

    fn wanted(&self) -> bool {
        !self.in_flight && (self.due || self.at.is_none_or(|at| at.elapsed() >= FRESH))
    }
}

/// Sends the probe when it is wanted and the session is between
/// statements: the last `ReadyForQuery` said idle and nothing is owed (an
/// unsynced `Parse` or `Bind` has an implicit transaction open, which the
/// probe's `Sync` would end).
pub(super) fn send(shared: &Shared, state: &mut State, out: &mut BytesMut) {
    let Some(sql) = shared.router.probe() else {
        return;
    };
    if !state.layout
        || !state.probe.wanted()
        || state.status != b'I'
        || !state.answers.settled()
        || state.answers.lost()
    {
        return;
    }
    let name = Some(PROBE_STATEMENT.to_string());
    frame::encode(&Parse::new(name.clone(), sql.to_string(), Vec::new()), out);
    frame::encode(
        &Bind::new(None, name.clone(), Vec::new(), Vec::new(), Vec::new()),
        out,
    );
    frame::encode(&Execute::new(None, 0), out);
    frame::encode(&Close::new(b'S', name), out);
    frame::encode(&Sync::new(), out);
    for awaits in Owed::PROBE {
        state.answers.push(Owed::probe(awaits));
    }
    state.probe.in_flight = true;
    state.probe.due = false;
}

/// Takes the probe's answer: the session's [`Resolution`], and its role
/// and `search_path`, as whom and where its values are evaluated (a
/// function or type the app names bare is found in its own schemas). A
/// probe that failed leaves the
/// names unknown (nothing is served; writes the facade would run are
/// refused) and is tried again after [`FRESH`].
pub(super) fn answered(state: &mut State, probed: Probed) {
    state.probe.in_flight = false;
    state.probe.at = Some(Instant::now());
    let fields = match &probed {
        Probed::Row(row) => data_row(row),
        Probed::Failed => None,
    };
    let Some([Some(role), Some(found), Some(path)]) = fields.as_deref() else {
        tracing::warn!("the probe of a session's search_path and role failed: {probed:?}");
        state.resolution = Resolution::Unknown;
        return;
    };
    state.resolution = match found.as_str() {
        "true" | "t" => Resolution::Layout,
        _ => Resolution::Elsewhere,
    };
    let mut session = (*state.session).clone();
    session.role.clone_from(role);
    session.found_search_path(path);
    if session != *state.session {
        state.session = Arc::new(session);
    }
}

/// The text fields of a `DataRow` body, `None` for a NULL; `None` for a
/// body that does not parse.
fn data_row(body: &[u8]) -> Option<Vec<Option<String>>> {
    let count = u16::from_be_bytes(body.get(0..2)?.try_into().ok()?);
    let mut at = 2;
    let mut fields = Vec::with_capacity(usize::from(count));
    for _ in 0..count {
        let len = i32::from_be_bytes(body.get(at..at + 4)?.try_into().ok()?);
        at += 4;
        if len < 0 {
            fields.push(None);
            continue;
        }
        let len = usize::try_from(len).ok()?;
        let text = std::str::from_utf8(body.get(at..at + len)?).ok()?;
        fields.push(Some(text.to_string()));
        at += len;
    }
    (at == body.len()).then_some(fields)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_data_row_is_read_whole_or_not_at_all() {
        let row = [
            &[0u8, 3][..],
            &[0, 0, 0, 3],
            b"app",
            &[0xff, 0xff, 0xff, 0xff],
            &[0, 0, 0, 4],
            b"true",
        ]
        .concat();
        assert_eq!(
            data_row(&row),
            Some(vec![Some("app".into()), None, Some("true".into())])
        );
        assert_eq!(data_row(&row[..row.len() - 1]), None);
        assert_eq!(data_row(&[row.clone(), vec![0]].concat()), None);
        assert_eq!(data_row(&[]), None);
    }

    #[test]
    fn statements_that_may_move_a_bare_name_are_seen() {
        let first = |sql: &'static str| sql.split_whitespace().next().unwrap_or_default();
        for sql in [
            "SET search_path = archive, public",
            "set Search_Path to default",
            "RESET ALL",
            "SET ROLE reporting",
            "SET SESSION AUTHORIZATION other",
            "DISCARD ALL",
            "SELECT set_config($1, $2, false)",
            "CREATE TEMP TABLE trips (id int)",
            "SELECT * INTO TEMPORARY t FROM x",
            "ALTER TABLE trips SET SCHEMA old",
            "DROP SCHEMA archive CASCADE",
            "DO $$ BEGIN PERFORM 1; END $$",
        ] {
            assert!(changes(first(sql), sql), "{sql}");
        }
        for sql in [
            "SELECT uuid FROM trips WHERE uuid = $1",
            "INSERT INTO trips (uuid, created_at) VALUES ($1, now())",
            "UPDATE trips SET status = 'dropped', role = 'x' WHERE uuid = $1",
            "INSERT INTO t (a) SELECT a FROM trips WHERE temp > 3",
            "BEGIN",
        ] {
            assert!(!changes(first(sql), sql), "{sql}");
        }
    }

    #[test]
    fn a_new_session_is_probed_and_an_answer_stays_fresh_a_while() {
        let mut probe = Probe::new();
        assert!(probe.wanted());
        probe.in_flight = true;
        probe.due = false;
        assert!(!probe.wanted(), "not twice at once");
        probe.in_flight = false;
        probe.at = Some(Instant::now());
        assert!(!probe.wanted());
        probe.due();
        assert!(probe.wanted());
        probe.due = false;
        probe.at = Instant::now().checked_sub(FRESH);
        assert!(probe.wanted());
    }
}
