//! Statements prepared in SQL, by name: what `PREPARE`, `EXECUTE`,
//! `DEALLOCATE` and `DISCARD ALL` do to a session's named statements.
//!
//! An `EXECUTE` names its statement, not what it runs, so judged alone
//! it touches no table at all. A caller that remembers each `PREPARE`
//! naming a layout table (its [`Step::Prepare`]) judges the `EXECUTE` as
//! that `PREPARE` would be judged now: a write prepared in `mirror` and
//! executed in `primary` must not reach PostgreSQL behind the facade.

use sqlparser::ast::{DiscardObject, Ident, Statement};
use sqlparser::dialect::PostgreSqlDialect;
use sqlparser::parser::Parser;

/// What one statement does to the session's named statements.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Step {
    /// `PREPARE name AS ...`: `text` is the whole `PREPARE`, as written.
    Prepare { name: String, text: String },
    /// `EXECUTE name [(...)]`.
    Execute { name: String },
    /// `DEALLOCATE [PREPARE] name`.
    Deallocate { name: String },
    /// `DEALLOCATE [PREPARE] ALL`, `DISCARD ALL`: every name is gone.
    Forget,
}

/// The steps of `input` (one or more statements), in order; statements
/// that take no step, or do not parse, are left out. Text that cannot
/// hold one of the four keywords is not parsed at all.
pub fn steps(input: &str) -> Vec<Step> {
    if !["prepare", "execute", "deallocate", "discard"]
        .iter()
        .any(|word| mentions(input, word))
    {
        return Vec::new();
    }
    crate::split::statements(input)
        .into_iter()
        .filter(|piece| piece.error.is_none())
        .filter_map(|piece| step(&piece.text))
        .collect()
}

/// Whether `input` holds `word` in any case (no allocation: every
/// statement the proxy relays passes here).
fn mentions(input: &str, word: &str) -> bool {
    input
        .as_bytes()
        .windows(word.len())
        .any(|w| w.eq_ignore_ascii_case(word.as_bytes()))
}

/// The step of one statement's text, if it takes one.
fn step(text: &str) -> Option<Step> {
    let text = text.trim().trim_end_matches(';').trim_end();
    let word = text
        .split(|c: char| !c.is_ascii_alphabetic())
        .find(|w| !w.is_empty())?
        .to_ascii_lowercase();
    if word == "deallocate" {
        return deallocation(text);
    }
    if !matches!(word.as_str(), "prepare" | "execute" | "discard") {
        return None;
    }
    let statements = Parser::parse_sql(&PostgreSqlDialect {}, text).ok()?;
    let [statement] = statements.as_slice() else {
        return None;
    };
    match statement {
        Statement::Prepare { name, .. } => Some(Step::Prepare {
            name: folded(name),
            text: text.to_string(),
        }),
        Statement::Execute {
            name: Some(name),
            immediate: false,
            ..
        } => match name.0.as_slice() {
            [part] => part.as_ident().map(|i| Step::Execute { name: folded(i) }),
            _ => None,
        },
        Statement::Discard {
            object_type: DiscardObject::ALL,
        } => Some(Step::Forget),
        _ => None,
    }
}

/// `DEALLOCATE [PREPARE] { name | ALL }`, read by words: the parser takes
/// `ALL` for a keyword it will not accept as a name.
fn deallocation(text: &str) -> Option<Step> {
    let statements = Parser::parse_sql(&PostgreSqlDialect {}, text).ok();
    if let Some([Statement::Deallocate { name, .. }]) = statements.as_deref() {
        return Some(
            if name.quote_style.is_none() && name.value.eq_ignore_ascii_case("all") {
                Step::Forget
            } else {
                Step::Deallocate { name: folded(name) }
            },
        );
    }
    let words: Vec<String> = text
        .split_whitespace()
        .map(str::to_ascii_lowercase)
        .collect();
    match words
        .iter()
        .map(String::as_str)
        .collect::<Vec<_>>()
        .as_slice()
    {
        ["deallocate", "all"] | ["deallocate", "prepare", "all"] => Some(Step::Forget),
        _ => None,
    }
}

/// A name as PostgreSQL keeps it: folded to lower case unless quoted.
fn folded(ident: &Ident) -> String {
    match ident.quote_style {
        Some(_) => ident.value.clone(),
        None => ident.value.to_lowercase(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn execute(name: &str) -> Step {
        Step::Execute { name: name.into() }
    }

    #[test]
    fn each_statement_takes_its_step_with_names_folded_as_postgresql_folds_them() {
        assert_eq!(
            steps("PREPARE Put (uuid) AS INSERT INTO t (id) VALUES ($1)"),
            vec![Step::Prepare {
                name: "put".into(),
                text: "PREPARE Put (uuid) AS INSERT INTO t (id) VALUES ($1)".into()
            }]
        );
        assert_eq!(steps("EXECUTE put('x')"), vec![execute("put")]);
        assert_eq!(steps("execute \"Put\" ( 1 , 2 );"), vec![execute("Put")]);
        assert_eq!(steps("EXECUTE put"), vec![execute("put")]);
        assert_eq!(
            steps("DEALLOCATE PREPARE Put"),
            vec![Step::Deallocate { name: "put".into() }]
        );
        assert_eq!(
            steps("deallocate \"Put\""),
            vec![Step::Deallocate { name: "Put".into() }]
        );
        assert_eq!(steps("DEALLOCATE ALL"), vec![Step::Forget]);
        assert_eq!(steps("deallocate prepare all"), vec![Step::Forget]);
        assert_eq!(steps("DISCARD ALL"), vec![Step::Forget]);
    }

    #[test]
    fn steps_are_found_among_other_statements_and_nowhere_else() {
        assert_eq!(
            steps("PREPARE a AS SELECT 1; SELECT 'execute b'; EXECUTE a; DISCARD PLANS"),
            vec![
                Step::Prepare {
                    name: "a".into(),
                    text: "PREPARE a AS SELECT 1".into()
                },
                execute("a"),
            ]
        );
        assert!(steps("SELECT prepare FROM t").is_empty());
        assert!(steps("SELECT 1").is_empty());
        assert!(steps("PREPARE broken AS").is_empty());
    }
}
