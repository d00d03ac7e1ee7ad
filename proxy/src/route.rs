//! What the proxy does with one statement, by the mode: the rules of the
//! facade applied to SQL.
//!
//! Every statement is read by the translator (`query`), with the layout
//! and the indexes from config; nothing here knows a table's name.
//! - A statement inside an explicit transaction block is forwarded: one
//!   transaction is never split across stores.
//! - `legacy`, `mirror`, `shadow`: PostgreSQL is the source of truth and
//!   capture mirrors plain SQL writes, so everything is forwarded. (In
//!   `shadow` the relay may answer a [`Decision::samplable`] read
//!   (a `Query`, or a prepared statement's `Bind`) from Schemaless instead,
//!   at the read share: `sample` and `query::run::render_from`.)
//! - `primary`: Schemaless is the source of truth. A translatable write
//!   (INSERT, UPDATE by row key, upsert) is run through the facade by the
//!   relay: one statement, or a simple `Query` of several writes run as
//!   one ([`Decision::writable`]); a statement
//!   that could change a layout table and that the cell API cannot express
//!   is refused with SQLSTATE `0A000` and the translator's reason; it
//!   would change PostgreSQL behind the reverse mirror's back. Translatable reads are
//!   answered from Schemaless by the relay, as the facade's are; the
//!   others (and a translatable read whose answer the relay cannot render
//!   exactly) are forwarded: the reverse mirror keeps PostgreSQL current.
//! - `schemaless`: PostgreSQL is no longer kept current, so statements on
//!   layout tables that Schemaless does not answer are refused, reads too
//!   (translatable writes run through the facade, as in `primary`):
//!   a translatable read is answered from Schemaless, or refused by the
//!   relay when it cannot be.
//!
//! Statements naming no layout table are forwarded in every mode, and so
//! is every statement of a session on another database than the legacy
//! one (`legacy.url`'s): the layout's tables are not in it.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use query::{Analysis, Class, Model};
use tripstore::Mode;

/// Whether a statement goes to PostgreSQL or is refused.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Verdict {
    Forward,
    /// Refused with SQLSTATE `0A000`; the reason names the construct.
    Refuse(String),
}

/// A statement's class and verdict.
#[derive(Clone, Debug)]
pub struct Decision {
    /// The class of the first statement touching the layout (`other` if
    /// none does), for the counts.
    pub class: Class,
    pub verdict: Verdict,
    /// One statement the translator answers as a read, forwarded: the
    /// verifier may sample it.
    pub samplable: bool,
    /// Statements the translator answers as writes (one, or several
    /// sent in one simple `Query`, each of them a write), in `primary` or
    /// `schemaless` outside a transaction block: the relay runs them
    /// through the facade (`query::run::write_batch`, as one, as
    /// PostgreSQL runs a `Query`'s statements in one implicit
    /// transaction) instead of PostgreSQL.
    pub writable: bool,
    /// One statement the translator answers as a write, in any mode: a
    /// prepared one is run through the facade if it is bound in those
    /// modes.
    pub write: bool,
    /// The shape of each of those writes ([`query::audit::shape`]):
    /// forwarded before `primary`, each is counted under it, so that the
    /// `primary` gate does not take it for a direct write (the proxy
    /// moves it to the facade at that step).
    pub shapes: Vec<String>,
}

impl Decision {
    /// A statement not read at all (a session on another database than
    /// the legacy one): forwarded, class `other`.
    pub fn unread() -> Decision {
        Decision {
            class: Class::Other,
            verdict: Verdict::Forward,
            samplable: false,
            writable: false,
            write: false,
            shapes: Vec::new(),
        }
    }

    /// The decision where the statement's meaning is not known for sure
    /// (`why`): forwarded, never served, sampled or written through the
    /// facade; a write the facade would run, and a read in `schemaless`,
    /// refused rather than guessed at.
    pub fn uncertain(&mut self, mode: Mode, why: &str) {
        if self.class == Class::Other {
            return;
        }
        let unserved_read = mode == Mode::Schemaless && self.samplable;
        if (self.writable || unserved_read) && self.verdict == Verdict::Forward {
            self.verdict = Verdict::Refuse(format!("{mode} mode: {why}"));
        }
        self.samplable = false;
        self.writable = false;
        self.write = false;
        self.shapes.clear();
    }
}

/// Why a statement is refused in a session whose
/// `standard_conforming_strings` is off.
pub const NONSTANDARD_STRINGS: &str = "this session has standard_conforming_strings off, so a \
     backslash in a string literal is an escape to PostgreSQL but a letter to the translator; \
     turn it on (the default since PostgreSQL 9.1) for statements on layout tables to be served, \
     sampled or written through the facade";

/// How the session's unqualified names find tables: what its
/// `search_path` (and, through `"$user"`, its role) makes of the layout's
/// table names, as PostgreSQL answered the relay's probe of the session.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Resolution {
    /// Each layout table's bare name finds that table: a bare name is the
    /// layout's, as it is in the facade's own session.
    Layout,
    /// A bare name finds another table (another schema first on the
    /// path, a temporary table of that name) or none: only qualified
    /// names are the layout's, and a statement naming its tables bare is
    /// forwarded as one on other tables.
    Elsewhere,
    /// Not known: the session may have changed it (a `SET`, `RESET`,
    /// `DISCARD` or DDL sent in the same flight of messages) and
    /// PostgreSQL has not answered yet. Nothing is served or sampled; a
    /// write the facade would run, and a read in `schemaless`, are
    /// refused rather than guessed at.
    Unknown,
}

/// Why a statement is refused while the session's names are
/// [`Resolution::Unknown`].
pub const UNRESOLVED: &str = "this session may have changed its search_path or role (a SET, \
     RESET, DISCARD or DDL sent in the same flight of messages), so which table a bare name \
     finds is not known yet; send the statement after PostgreSQL has answered that change";

/// The translator's model, and the names a statement must contain to
/// touch the layout at all.
pub struct Router {
    model: Option<Arc<Model>>,
    /// The model for a session whose bare names find other tables.
    qualified: Option<Arc<Model>>,
    /// The layout's table names, lowercase: a statement whose text names
    /// none of them (in any case) cannot touch a layout table, and is not
    /// parsed. This keeps the parser off the path of everything else.
    names: Vec<String>,
    /// The statement the relay sends a session to learn its
    /// [`Resolution`] and its role ([`Router::probe`]).
    probe: Option<String>,
    /// Analyses of recent statement texts, by model: a driver sends the
    /// same text again and again (a `Parse` per execution of an unnamed
    /// statement, one per row of an `executemany`), and an analysis
    /// depends on the text and the model alone.
    recent: Mutex<Recent>,
}

/// [`Router::recent`]: analyses by (qualified model?, text), at most
/// [`RECENT`] of them, texts up to [`RECENT_TEXT`] bytes; emptied when
/// full, so ad hoc statements with literals cannot grow it.
#[derive(Default)]
struct Recent(HashMap<(bool, String), Arc<Vec<Analysis>>>);

/// How many analyses [`Recent`] keeps.
const RECENT: usize = 512;

/// The longest text [`Recent`] keeps an analysis of.
const RECENT_TEXT: usize = 8 * 1024;

impl Router {
    pub fn new(model: Option<Arc<Model>>) -> Router {
        let names = model
            .as_ref()
            .map(|m| m.table_names().iter().map(|t| t.to_lowercase()).collect())
            .unwrap_or_default();
        let probe = model.as_deref().map(probe_statement);
        let qualified = model.as_deref().map(|m| Arc::new(m.qualified_only()));
        Router {
            model,
            qualified,
            names,
            probe,
            recent: Mutex::default(),
        }
    }

    /// The statement that answers, in an app's session, its role
    /// (`current_user`, which `SET ROLE` changes) and whether each layout
    /// table's bare name finds that table there; `None` without a layout.
    pub fn probe(&self) -> Option<&str> {
        self.probe.as_deref()
    }

    /// The analyses of `sql` (one or more statements), or none when it
    /// cannot touch the layout.
    pub fn analyze(&self, sql: &str) -> Arc<Vec<Analysis>> {
        self.analyze_with(self.model.as_deref(), false, sql)
    }

    fn analyze_with(
        &self,
        model: Option<&Model>,
        qualified: bool,
        sql: &str,
    ) -> Arc<Vec<Analysis>> {
        let Some(model) = model else {
            return Arc::default();
        };
        let lower = sql.to_lowercase();
        if !self.names.iter().any(|n| lower.contains(n.as_str())) {
            return Arc::default();
        }
        if sql.len() > RECENT_TEXT {
            return Arc::new(query::analyze_text(model, sql));
        }
        let key = (qualified, sql.to_string());
        if let Some(known) = self.recent().0.get(&key) {
            return known.clone();
        }
        let analyses = Arc::new(query::analyze_text(model, sql));
        let mut recent = self.recent();
        if recent.0.len() >= RECENT {
            recent.0.clear();
        }
        recent.0.insert(key, analyses.clone());
        analyses
    }

    fn recent(&self) -> std::sync::MutexGuard<'_, Recent> {
        // A panic while holding it left a map of whole entries.
        self.recent.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// What to do with `sql` in `mode`, in a session whose bare names
    /// find the layout's tables.
    pub fn decide(&self, sql: &str, mode: Mode, in_transaction: bool) -> Decision {
        self.decide_in(sql, mode, in_transaction, Resolution::Layout)
    }

    /// What to do with `sql` in `mode`, in a session whose names resolve
    /// as `resolution` says.
    pub fn decide_in(
        &self,
        sql: &str,
        mode: Mode,
        in_transaction: bool,
        resolution: Resolution,
    ) -> Decision {
        let (model, qualified) = match resolution {
            Resolution::Elsewhere => (self.qualified.as_deref(), true),
            Resolution::Layout | Resolution::Unknown => (self.model.as_deref(), false),
        };
        let mut decision = Router::judge(
            &self.analyze_with(model, qualified, sql),
            mode,
            in_transaction,
        );
        if resolution == Resolution::Unknown {
            decision.uncertain(mode, UNRESOLVED);
        }
        decision
    }

    /// The decision on a statement's analyses.
    fn judge(analyses: &[Analysis], mode: Mode, in_transaction: bool) -> Decision {
        let class = analyses
            .iter()
            .map(|a| a.class)
            .find(|c| *c != Class::Other)
            .unwrap_or(Class::Other);
        let alone = matches!(analyses, [one] if matches!(one.class, Class::Row | Class::Index));
        let alone_write = matches!(analyses, [one] if one.class == Class::Write);
        // Several writes in one `Query` run through the facade as one,
        // as PostgreSQL runs them in one implicit transaction; with any
        // other statement among them, the Query would be split across
        // the stores.
        let all_writes = !analyses.is_empty() && analyses.iter().all(|a| a.class == Class::Write);
        let facade_writes = matches!(mode, Mode::Primary | Mode::Schemaless);
        let verdict = if in_transaction {
            Verdict::Forward
        } else {
            analyses
                .iter()
                .find_map(|a| refusal(a, mode))
                .or_else(|| {
                    // The relay answers one statement from Schemaless, not
                    // a translatable read among others.
                    let read = analyses
                        .iter()
                        .any(|a| matches!(a.class, Class::Row | Class::Index));
                    let write = analyses.iter().any(|a| a.class == Class::Write);
                    if read && !alone {
                        unserved(
                            mode,
                            "it is sent with other statements in one Query; send it alone",
                        )
                    } else if write && !all_writes && facade_writes {
                        Some(format!(
                            "{mode} mode: a translatable write runs through the facade, and \
                             this one is sent in one Query with statements that are not \
                             translatable writes, which would split it across the stores; \
                             send it alone"
                        ))
                    } else {
                        None
                    }
                })
                .map_or(Verdict::Forward, Verdict::Refuse)
        };
        let samplable = verdict == Verdict::Forward && alone;
        let writable =
            verdict == Verdict::Forward && all_writes && facade_writes && !in_transaction;
        Decision {
            class,
            verdict,
            samplable,
            writable,
            write: alone_write,
            shapes: match all_writes {
                true => analyses.iter().filter_map(|a| a.shape.clone()).collect(),
                false => Vec::new(),
            },
        }
    }
}

/// The probe of a session for `model`'s layout: its role, and whether
/// every layout table's bare name finds that table (`to_regclass` of the
/// bare name against the qualified one; a bare name finding nothing is
/// not the layout's either: PostgreSQL would answer `42P01`).
fn probe_statement(model: &Model) -> String {
    let ident = |name: &str| format!("\"{}\"", name.replace('"', "\"\""));
    let literal = |text: &str| format!("'{}'", text.replace('\'', "''"));
    let schema = ident(&model.layout.schema);
    let checks: Vec<String> = model
        .table_names()
        .iter()
        .map(|table| {
            format!(
                "coalesce(to_regclass({}) = to_regclass({}), false)",
                literal(&ident(table)),
                literal(&format!("{schema}.{}", ident(table)))
            )
        })
        .collect();
    format!(
        "SELECT current_user::text, ({})::text, current_setting('search_path')",
        checks.join(" AND ")
    )
}

/// Why `mode` refuses the statement `analysis`, if it does.
fn refusal(analysis: &Analysis, mode: Mode) -> Option<String> {
    if !matches!(mode, Mode::Primary | Mode::Schemaless) {
        return None;
    }
    let because = |why: &str| Some(format!("{mode} mode: {why}"));
    match analysis.class {
        Class::Other => None,
        // PostgreSQL refuses it before it runs (`42601`): forwarded, the
        // app gets PostgreSQL's own error, and nothing is written.
        Class::None
            if analysis
                .reason
                .as_deref()
                .is_some_and(|r| r.starts_with(query::REFUSED_BY_POSTGRES)) =>
        {
            None
        }
        // The text names a layout table and the parser could not read it:
        // nothing proves it does not write one.
        Class::Unparsed => because(&format!(
            "the statement names a layout table and the translator cannot parse it ({})",
            analysis.reason.as_deref().unwrap_or("no reason given")
        )),
        Class::None if !analysis.reads || mode == Mode::Schemaless => because(&format!(
            "the cell API cannot express it: {}",
            analysis.reason.as_deref().unwrap_or("no reason given")
        )),
        Class::None => None,
        // Run through the facade by the relay.
        Class::Write => None,
        // Answered from Schemaless by the relay, which refuses what it
        // cannot answer in `schemaless` (`unserved`).
        Class::Row | Class::Index => None,
    }
}

/// Why a translatable read that Schemaless did not answer (`why`) is
/// refused in `mode`, if it is: in `schemaless`, PostgreSQL is no
/// longer kept current, so it cannot answer instead.
pub fn unserved(mode: Mode, why: &str) -> Option<String> {
    (mode == Mode::Schemaless).then(|| {
        format!(
            "{mode} mode: a translatable read the proxy cannot answer from Schemaless ({why}), \
             and PostgreSQL is no longer kept current in this mode"
        )
    })
}

/// A statement PostgreSQL answers with the refusal as its error, so the
/// error reaches the client in order with everything before it, and
/// PostgreSQL's own rules (an error aborts the implicit transaction and,
/// in the extended protocol, skips to `Sync`) hold unchanged.
pub fn refusing_statement(reason: &str) -> String {
    raising_statement(
        "0A000",
        &format!("mezzanine proxy refused the statement: {reason}"),
        Some("what each mode refuses, and why: docs/proxy.md, \"What is refused\""),
    )
}

/// A statement PostgreSQL answers with error `sqlstate` (five digits or
/// capitals; anything else is `XX000`), `message` and `hint`: how a
/// write the facade failed reaches the app, as [`refusing_statement`]'s
/// refusal does.
pub fn raising_statement(sqlstate: &str, message: &str, hint: Option<&str>) -> String {
    raising_with(sqlstate, message, hint, &query::run::Diagnostics::default())
}

/// [`raising_statement`], with PostgreSQL's other fields of the error
/// (detail, schema, table, constraint) where the facade has them.
pub fn raising_with(
    sqlstate: &str,
    message: &str,
    hint: Option<&str>,
    diagnostics: &query::run::Diagnostics,
) -> String {
    let literal = |text: &str| {
        format!(
            "'{}'",
            text.replace('\'', "''")
                .replace("$mezzanine$", "$ mezzanine $")
        )
    };
    let code = if sqlstate.len() == 5
        && sqlstate
            .bytes()
            .all(|b| b.is_ascii_digit() || b.is_ascii_uppercase())
    {
        sqlstate
    } else {
        "XX000"
    };
    let mut options = String::new();
    for (option, value) in [
        ("HINT", hint),
        ("DETAIL", diagnostics.detail.as_deref()),
        ("SCHEMA", diagnostics.schema.as_deref()),
        ("TABLE", diagnostics.table.as_deref()),
        ("CONSTRAINT", diagnostics.constraint.as_deref()),
    ] {
        if let Some(value) = value {
            options.push_str(&format!(", {option} = {}", literal(value)));
        }
    }
    format!(
        "DO $mezzanine$ BEGIN RAISE EXCEPTION USING ERRCODE = '{code}', MESSAGE = {}{options}; \
         END $mezzanine$",
        literal(message)
    )
}

#[cfg(test)]
mod tests;
