//! Each statement judged as it passes: the router's decision in the
//! session's mode, transaction and resolution of names, counted; and the
//! statements that change what is judged next (a `BEGIN`, a change of
//! the path or the role, which sends the probe, a `PREPARE` in SQL).

use query::named::Step;
use query::Class;

use super::{probe, State};
use crate::route::{Decision, Resolution, Verdict, NONSTANDARD_STRINGS};
use crate::stats::Route;
use crate::Shared;

/// The decision on `sql`, counted, and the resolution of the session's
/// names it was made in. A statement that may change them (a `SET
/// search_path`...) makes them unknown, for the statements after it,
/// until the probe answers again. A `Parse` is judged as
/// if they were the layout's while unknown: it runs nothing, and its
/// `Bind` is judged again in the resolution of then.
pub(super) fn route(
    shared: &Shared,
    state: &mut State,
    sql: &str,
    parse: bool,
) -> (Decision, Resolution) {
    let mode = shared.mode();
    let mut resolution = state.resolution;
    let decision = if state.layout {
        if parse && resolution == Resolution::Unknown {
            resolution = Resolution::Layout;
        }
        let decision = decide(shared, state, sql, mode, resolution);
        if shared.router.probe().is_some() && probe::changes(first_word(sql), sql) {
            state.resolution = Resolution::Unknown;
            state.probe.due();
        }
        if decision.verdict == Verdict::Forward {
            remember_named(shared, state, sql, mode);
        }
        decision
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
    (decision, resolution)
}

/// The router's decision on `sql` in `mode`, in the session's names and
/// transaction, with each `EXECUTE` of a statement prepared in SQL on a
/// layout table judged as its `PREPARE` would be now: prepared in
/// `mirror`, a write executed in `primary` is refused as the `PREPARE`
/// would be, not forwarded to change PostgreSQL behind the facade.
pub(super) fn decide(
    shared: &Shared,
    state: &State,
    sql: &str,
    mode: tripstore::Mode,
    resolution: Resolution,
) -> Decision {
    let in_transaction = state.in_transaction();
    let mut decision = shared
        .router
        .decide_in(sql, mode, in_transaction, resolution);
    if state.nonstandard_strings {
        decision.uncertain(mode, NONSTANDARD_STRINGS);
    }
    if state.named.is_empty() {
        return decision;
    }
    for step in query::named::steps(sql) {
        let Step::Execute { name } = step else {
            continue;
        };
        let Some(prepare) = state.named.get(&name) else {
            continue;
        };
        let now = shared
            .router
            .decide_in(prepare, mode, in_transaction, resolution);
        if decision.class == Class::Other {
            decision.class = now.class;
        }
        if let (Verdict::Forward, Verdict::Refuse(reason)) = (&decision.verdict, now.verdict) {
            decision.verdict = Verdict::Refuse(format!(
                "EXECUTE {name} runs a statement prepared in SQL on a layout table, judged \
                 as its PREPARE would be now: {reason}"
            ));
        }
    }
    decision
}

/// The session's statements prepared in SQL after `sql`, forwarded in
/// `mode`: a `PREPARE` naming a layout table (bare or qualified) is
/// remembered under its name, and `DEALLOCATE` and `DISCARD ALL` forget.
fn remember_named(shared: &Shared, state: &mut State, sql: &str, mode: tripstore::Mode) {
    for step in query::named::steps(sql) {
        match step {
            Step::Prepare { name, text } => {
                if shared.router.decide(&text, mode, false).class != Class::Other {
                    state.named.insert(name, text);
                } else {
                    state.named.remove(&name);
                }
            }
            Step::Deallocate { name } => {
                state.named.remove(&name);
            }
            Step::Forget => state.named.clear(),
            Step::Execute { .. } => {}
        }
    }
}

/// Whether `sql` begins with `BEGIN` or `START TRANSACTION` (after
/// spaces and comments).
fn opens_transaction(sql: &str) -> bool {
    let word = first_word(sql);
    word.eq_ignore_ascii_case("begin") || word.eq_ignore_ascii_case("start")
}

/// The first word of `sql` (after spaces and comments), as written.
fn first_word(sql: &str) -> &str {
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
    let end = rest
        .find(|c: char| !c.is_ascii_alphabetic())
        .unwrap_or(rest.len());
    &rest[..end]
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
}
