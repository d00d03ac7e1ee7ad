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
//!   relay, one statement at a time ([`Decision::writable`]); a statement
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

use std::sync::Arc;

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
    /// One statement the translator answers as a write, in `primary` or
    /// `schemaless` outside a transaction block: the relay runs it
    /// through the facade (`query::run::write_through`) instead of
    /// PostgreSQL.
    pub writable: bool,
    /// One statement the translator answers as a write, in any mode: a
    /// prepared one is run through the facade if it is bound in those
    /// modes.
    pub write: bool,
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
        }
    }
}

/// The translator's model, and the names a statement must contain to
/// touch the layout at all.
pub struct Router {
    model: Option<Arc<Model>>,
    /// The layout's table names, lowercase: a statement whose text names
    /// none of them (in any case) cannot touch a layout table, and is not
    /// parsed. This keeps the parser off the path of everything else.
    names: Vec<String>,
}

impl Router {
    pub fn new(model: Option<Arc<Model>>) -> Router {
        let names = model
            .as_ref()
            .map(|m| {
                std::iter::once(m.layout.table.to_lowercase())
                    .chain(
                        m.layout
                            .columns
                            .iter()
                            .filter_map(|c| c.table.as_ref().map(|t| t.to_lowercase())),
                    )
                    .collect()
            })
            .unwrap_or_default();
        Router { model, names }
    }

    /// The analyses of `sql` (one or more statements), or none when it
    /// cannot touch the layout.
    pub fn analyze(&self, sql: &str) -> Vec<Analysis> {
        let Some(model) = &self.model else {
            return Vec::new();
        };
        let lower = sql.to_lowercase();
        if !self.names.iter().any(|n| lower.contains(n.as_str())) {
            return Vec::new();
        }
        query::analyze_text(model, sql)
    }

    /// What to do with `sql` in `mode`.
    pub fn decide(&self, sql: &str, mode: Mode, in_transaction: bool) -> Decision {
        let analyses = self.analyze(sql);
        let class = analyses
            .iter()
            .map(|a| a.class)
            .find(|c| *c != Class::Other)
            .unwrap_or(Class::Other);
        let alone =
            matches!(analyses.as_slice(), [one] if matches!(one.class, Class::Row | Class::Index));
        let alone_write = matches!(analyses.as_slice(), [one] if one.class == Class::Write);
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
                    } else if write && !alone_write && facade_writes {
                        Some(format!(
                            "{mode} mode: a translatable write runs through the facade, one \
                             statement at a time, and this one is sent with other statements \
                             in one Query; send it alone"
                        ))
                    } else {
                        None
                    }
                })
                .map_or(Verdict::Forward, Verdict::Refuse)
        };
        let samplable = verdict == Verdict::Forward && alone;
        let writable =
            verdict == Verdict::Forward && alone_write && facade_writes && !in_transaction;
        Decision {
            class,
            verdict,
            samplable,
            writable,
            write: alone_write,
        }
    }
}

/// Why `mode` refuses the statement `analysis`, if it does.
fn refusal(analysis: &Analysis, mode: Mode) -> Option<String> {
    if !matches!(mode, Mode::Primary | Mode::Schemaless) {
        return None;
    }
    let because = |why: &str| Some(format!("{mode} mode: {why}"));
    match analysis.class {
        Class::Other => None,
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
    let hint = hint.map_or_else(String::new, |h| format!(", HINT = {}", literal(h)));
    format!(
        "DO $mezzanine$ BEGIN RAISE EXCEPTION USING ERRCODE = '{code}', MESSAGE = {}{hint}; \
         END $mezzanine$",
        literal(message)
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_refusal_quotes_any_text_safely() {
        let sql = refusing_statement("it's $mezzanine$ odd");
        assert!(sql.contains("it''s $ mezzanine $ odd"), "{sql}");
        assert_eq!(sql.matches("$mezzanine$").count(), 2);
        assert!(sql.contains("ERRCODE = '0A000'"), "{sql}");
    }

    #[test]
    fn a_raised_error_keeps_a_well_formed_sqlstate_only() {
        assert!(raising_statement("23505", "dup", None).contains("ERRCODE = '23505'"));
        assert!(raising_statement("40001", "x", None).contains("ERRCODE = '40001'"));
        for bad in ["2350", "23505'", "abcde", ""] {
            let sql = raising_statement(bad, "m", None);
            assert!(sql.contains("ERRCODE = 'XX000'"), "{bad}: {sql}");
        }
    }

    #[test]
    fn without_a_layout_everything_is_forwarded_unparsed() {
        let router = Router::new(None);
        for mode in Mode::ALL {
            let d = router.decide("DELETE FROM anything", mode, false);
            assert_eq!(d.verdict, Verdict::Forward);
            assert_eq!(d.class, Class::Other);
        }
    }
}
