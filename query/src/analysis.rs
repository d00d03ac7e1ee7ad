//! What a statement becomes: its class, the cell API calls, or the reason
//! it cannot be answered.

use std::ops::ControlFlow;

use serde::Serialize;
use sqlparser::ast::{
    visit_expressions, visit_expressions_mut, visit_relations, visit_statements, AccessExpr,
    CopySource, Expr, ObjectName, ObjectType, Statement,
};
use sqlparser::dialect::PostgreSqlDialect;
use sqlparser::parser::Parser;

use crate::model::Model;
use crate::plan::Plan;
use crate::split;

/// How the cell API can answer a statement.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Class {
    /// Row-key reads: every row read belongs to a parent named by UUID.
    Row,
    /// An index query on a declared index (then row reads, if needed).
    Index,
    /// Cell writes by row key.
    Write,
    /// Touches layout tables but the cell API cannot express it.
    None,
    /// Touches no layout table.
    Other,
    /// Does not parse.
    Unparsed,
}

impl Class {
    pub const ALL: [Class; 6] = [
        Class::Row,
        Class::Index,
        Class::Write,
        Class::None,
        Class::Other,
        Class::Unparsed,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Class::Row => "row",
            Class::Index => "index",
            Class::Write => "write",
            Class::None => "none",
            Class::Other => "other",
            Class::Unparsed => "unparsed",
        }
    }

    /// Whether the cell API answers statements of this class.
    pub fn translatable(self) -> bool {
        matches!(self, Class::Row | Class::Index | Class::Write)
    }
}

impl std::fmt::Display for Class {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One statement's verdict.
#[derive(Clone, Debug)]
pub struct Analysis {
    /// The statement as written.
    pub sql: String,
    pub class: Class,
    /// The plan, for `row`, `index` and `write`.
    pub plan: Option<Plan>,
    /// Why not, for `none` (the construct, and the fix where there is
    /// one) and `unparsed` (the parser's message).
    pub reason: Option<String>,
    /// The tables the statement names, as written, in order.
    pub tables: Vec<String>,
    /// Whether the statement only reads: a query, an EXPLAIN that does
    /// not run it, a `COPY ... TO`, a `PREPARE` of a read. Anything else
    /// (writes, DDL, `COPY ... FROM`, an unparsed statement) may change
    /// what it names.
    pub reads: bool,
    /// A translatable write's [`crate::audit::shape`], when read from its
    /// text ([`analyze`]): how the proxy counts the writes it forwards.
    pub shape: Option<String>,
}

impl Analysis {
    /// The cell API calls the statement becomes (empty unless
    /// translatable).
    pub fn calls(&self) -> Vec<String> {
        self.plan.as_ref().map(Plan::calls).unwrap_or_default()
    }
}

/// Every statement of `input` (statements separated by `;`), in order.
/// A statement that does not tokenize or parse is `unparsed` with the
/// parser's message; the parser's recursion limit makes a deeply nested
/// one `unparsed` too, never a stack overflow.
pub fn analyze_text(model: &Model, input: &str) -> Vec<Analysis> {
    split::statements(input)
        .into_iter()
        .map(|piece| match piece.error {
            Some(error) => Analysis {
                sql: piece.text,
                class: Class::Unparsed,
                plan: None,
                reason: Some(error),
                tables: Vec::new(),
                reads: false,
                shape: None,
            },
            None => analyze(model, &piece.text),
        })
        .collect()
}

/// One statement (the text of exactly one; a trailing `;` is allowed).
pub fn analyze(model: &Model, sql: &str) -> Analysis {
    let sql = sql.trim().trim_end_matches(';').trim_end().to_string();
    let statements = match Parser::parse_sql(&PostgreSqlDialect {}, &sql) {
        Ok(mut statements) => {
            statements
                .iter_mut()
                .for_each(crate::literal::exact_strings);
            statements
        }
        Err(e) => {
            return Analysis {
                sql,
                class: Class::Unparsed,
                plan: None,
                reason: Some(e.to_string()),
                tables: Vec::new(),
                reads: false,
                shape: None,
            }
        }
    };
    let [statement] = statements.as_slice() else {
        return Analysis {
            sql,
            class: Class::Unparsed,
            plan: None,
            reason: Some(format!(
                "{} statements where one was expected; separate them with `;` in a file",
                statements.len()
            )),
            tables: Vec::new(),
            reads: false,
            shape: None,
        };
    };
    let mut analysis = analyze_statement(model, sql, statement);
    if analysis.class == Class::Write {
        analysis.shape = Some(crate::audit::shape(statement));
    }
    analysis
}

/// [`analyze`] of a statement already parsed (and perhaps changed: its
/// parameters bound as literals), written `sql`. What the relay's hot
/// paths call: rendering a bound statement to text only to parse it again
/// cost a parse per write.
pub fn analyze_statement(model: &Model, sql: String, statement: &Statement) -> Analysis {
    let mut tables = Vec::new();
    let mut touches_layout = false;
    // A temporary table is created in the session's own schema, whatever
    // it is called: `CREATE TEMP TABLE trips` does not touch the layout's
    // `trips` (it hides it from that session's bare names).
    let created_temporary = match statement {
        Statement::CreateTable(create) if create.temporary => Some(&create.name),
        _ => None,
    };
    let mut named = |name: &ObjectName| {
        touches_layout |= created_temporary != Some(name) && model.table(name).is_some();
        let written = name.to_string();
        if !tables.contains(&written) {
            tables.push(written);
        }
    };
    let _ = visit_relations(statement, |name| {
        named(name);
        ControlFlow::<()>::Continue(())
    });
    unvisited_tables(statement).into_iter().for_each(named);
    let (class, plan, reason) = if !touches_layout {
        (Class::Other, None, None)
    } else {
        match classify(model, statement) {
            Ok(plan) => (plan.class(), Some(plan), None),
            Err(why) => (Class::None, None, Some(why)),
        }
    };
    Analysis {
        sql,
        class,
        plan,
        reason,
        tables,
        reads: only_reads(statement),
        shape: None,
    }
}

/// Whether `statement` only reads (see [`Analysis::reads`]). A query
/// with an INSERT, UPDATE, DELETE or MERGE in a `WITH` writes (`WITH u
/// AS (UPDATE trips ... RETURNING ...) SELECT ...`): taken for a read, it
/// was forwarded in `primary` as a read is, and changed PostgreSQL behind
/// the facade.
fn only_reads(statement: &Statement) -> bool {
    match statement {
        Statement::Query(_) => visit_statements(statement, |s| match s {
            Statement::Insert(_)
            | Statement::Update(_)
            | Statement::Delete(_)
            | Statement::Merge(_) => ControlFlow::Break(()),
            _ => ControlFlow::Continue(()),
        })
        .is_continue(),
        Statement::ExplainTable { .. }
        | Statement::Explain { analyze: false, .. }
        | Statement::Copy { to: true, .. } => true,
        Statement::Prepare { statement, .. } => only_reads(statement),
        _ => false,
    }
}

/// The tables `statement` names where sqlparser's relation visitor does
/// not look: a `COPY`'s table and a `DROP TABLE`'s. Without them a `COPY
/// trips FROM STDIN` was a statement on no layout table, forwarded in
/// `primary` as if it were one (a write the facade never saw), and a
/// `DROP TABLE trips` too.
fn unvisited_tables(statement: &Statement) -> Vec<&ObjectName> {
    match statement {
        Statement::Copy {
            source: CopySource::Table { table_name, .. },
            ..
        } => vec![table_name],
        Statement::Drop {
            object_type: ObjectType::Table,
            names,
            ..
        } => names.iter().collect(),
        _ => Vec::new(),
    }
}

/// The plan of a statement that touches the layout, or why there is none.
fn classify(model: &Model, statement: &Statement) -> Result<Plan, String> {
    if let Some(joined) = subscripted_columns(statement) {
        return classify_joined(model, &joined);
    }
    classify_joined(model, statement)
}

/// `statement` with each subscripted column named with its table
/// (`t.flags[1]`, which sqlparser reads as `t`, then `.flags`, then
/// `[1]`) read as column `t.flags`, subscripted: the walks that find a
/// statement's columns meet `t.flags` whole, where they met `t` as a
/// column of its own and refused the statement for it ("uses t.t").
/// `None` where the statement has none.
fn subscripted_columns(statement: &Statement) -> Option<Statement> {
    let split = |e: &Expr| match e {
        Expr::CompoundFieldAccess { root, access_chain } => {
            matches!(**root, Expr::Identifier(_) | Expr::CompoundIdentifier(_))
                && matches!(
                    access_chain.first(),
                    Some(AccessExpr::Dot(Expr::Identifier(_)))
                )
        }
        _ => false,
    };
    let found = visit_expressions(statement, |e| match split(e) {
        true => ControlFlow::Break(()),
        false => ControlFlow::Continue(()),
    });
    if found.is_continue() {
        return None;
    }
    let mut joined = statement.clone();
    let _ = visit_expressions_mut(&mut joined, |e| {
        if !split(e) {
            return ControlFlow::<()>::Continue(());
        }
        let Expr::CompoundFieldAccess { root, access_chain } = e else {
            return ControlFlow::Continue(());
        };
        let mut parts = match root.as_ref() {
            Expr::Identifier(i) => vec![i.clone()],
            Expr::CompoundIdentifier(parts) => parts.clone(),
            _ => return ControlFlow::Continue(()),
        };
        let dots = access_chain
            .iter()
            .take_while(|a| matches!(a, AccessExpr::Dot(Expr::Identifier(_))))
            .count();
        for access in access_chain.drain(..dots) {
            if let AccessExpr::Dot(Expr::Identifier(i)) = access {
                parts.push(i);
            }
        }
        *e = match access_chain.is_empty() {
            true => Expr::CompoundIdentifier(parts),
            false => Expr::CompoundFieldAccess {
                root: Box::new(Expr::CompoundIdentifier(parts)),
                access_chain: std::mem::take(access_chain),
            },
        };
        ControlFlow::Continue(())
    });
    Some(joined)
}

/// [`classify`] of a statement whose subscripted columns are whole
/// ([`subscripted_columns`]).
fn classify_joined(model: &Model, statement: &Statement) -> Result<Plan, String> {
    match statement {
        Statement::Query(query) => crate::read::plan(model, query),
        Statement::Insert(insert) => crate::write::insert(model, insert),
        Statement::Update(update) => crate::write::update(model, update),
        Statement::Copy { to: false, .. } => Err(
            "COPY FROM into a layout table: the cell API takes rows one statement at a time; \
             write them with INSERTs (the facade runs those), or load them while PostgreSQL \
             is the primary"
                .into(),
        ),
        Statement::Prepare { .. } => Err(
            "PREPARE (in SQL): EXECUTE names it, not its statement, so it cannot be judged \
             where it runs; prepare it through the protocol (the driver's prepared \
             statements), whose every Bind is judged"
                .into(),
        ),
        Statement::Delete(delete) => crate::write::delete(model, delete),
        other => {
            let text = other.to_string();
            let keyword = text.split_whitespace().next().unwrap_or("statement");
            Err(format!(
                "{} on a layout table: not an app query the cell API answers; run it \
                 on PostgreSQL while it is the primary, and in Schemaless through config \
                 and `schema apply`",
                keyword.to_uppercase()
            ))
        }
    }
}
