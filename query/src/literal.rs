//! String values printed as literals PostgreSQL reads back exactly.
//!
//! Statements the proxy and `query run` send PostgreSQL (a write's values
//! evaluated, a bound parameter, a filter, a served read) are printed
//! from sqlparser's tree. Its printer doubles each lone `'` of a `'…'`
//! string but leaves a `''` or a `\'` inside it as it is (it cannot tell
//! whether the string was unescaped when parsed), so such strings are
//! turned into `E'…'` literals first.

use std::ops::ControlFlow;

/// A string value, as a literal PostgreSQL reads back as exactly that
/// string. sqlparser prints a `'…'` string with each lone `'` doubled
/// but a `''` or a `\'` inside it as it is (it cannot tell whether the
/// string was unescaped when parsed), so the value `it''s` would be read
/// back as `it's`, and `a\'b` would end the literal early. Such a string
/// becomes an `E'…'` literal, whose printing escapes every `'` and `\`;
/// any other stays `'…'`, as written.
pub fn string_literal(value: String) -> sqlparser::ast::Value {
    use sqlparser::ast::Value;
    if value.contains("''") || value.contains("\\'") {
        Value::EscapedStringLiteral(value)
    } else {
        Value::SingleQuotedString(value)
    }
}

/// Every `'…'` and `N'…'` string of `statement` ([`string_literal`]): printed, the
/// statement holds the values it was parsed with. Done to each statement
/// of an app's that is printed for PostgreSQL to evaluate or run.
pub fn exact_strings<V: sqlparser::ast::VisitMut>(statement: &mut V) {
    use sqlparser::ast::{Value, ValueWithSpan, VisitorMut};
    struct Exact;
    impl VisitorMut for Exact {
        type Break = ();
        fn pre_visit_value(&mut self, value: &mut ValueWithSpan) -> ControlFlow<()> {
            match &mut value.value {
                Value::SingleQuotedString(s) => value.value = string_literal(std::mem::take(s)),
                // `N'…'` is printed as `'…'` is: one holding `''` or `\'`
                // is the same text as an `E'…'` literal of it.
                Value::NationalStringLiteral(s) if s.contains("''") || s.contains("\\'") => {
                    value.value = Value::EscapedStringLiteral(std::mem::take(s))
                }
                _ => {}
            }
            ControlFlow::Continue(())
        }
    }
    let _ = statement.visit(&mut Exact);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn strings_print_as_literals_of_exactly_their_values() {
        for (value, printed) in [
            ("plain", "'plain'"),
            ("it's", "'it''s'"),
            ("it''s", "E'it\\'\\'s'"),
            ("a\\'b", "E'a\\\\\\'b'"),
            ("back\\slash", "'back\\slash'"),
        ] {
            assert_eq!(string_literal(value.into()).to_string(), printed, "{value}");
        }
        // An app's literals, parsed (unescaped), print back as the
        // values they hold.
        let sql = "SELECT 'say ''''hi''''', 'x\\''y', 'plain', N'n''''n' FROM t WHERE a = 'it''s'";
        let mut statement =
            sqlparser::parser::Parser::parse_sql(&sqlparser::dialect::PostgreSqlDialect {}, sql)
                .unwrap()
                .remove(0);
        exact_strings(&mut statement);
        assert_eq!(
            statement.to_string(),
            "SELECT E'say \\'\\'hi\\'\\'', E'x\\\\\\'y', 'plain', E'n\\'\\'n' FROM t WHERE a = 'it''s'"
        );
    }
}
