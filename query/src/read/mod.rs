//! SELECT: row-key reads, an index query, or the reason neither answers.
//!
//! This file refuses what the cell API cannot answer and builds the
//! scope (tables, joins, conditions); its rooms: `project` (outputs and
//! readable columns), `row` (reads by row key) and `index` (reads
//! through a secondary index).

use schemaless::FilterOp;
use sqlparser::ast::{
    BinaryOperator, Expr, GroupByExpr, Ident, JoinConstraint, JoinOperator, LimitClause,
    OrderByKind, OrderBySort, Query, Select, SelectItem, SelectItemQualifiedWildcardKind, SetExpr,
};

use crate::expr::{aggregate_in, cond, conjuncts, over_columns, subquery_in, Col, Cond, Scope};
use crate::model::{folded, Model, Source, Table};
mod index;
mod project;
mod row;

use crate::plan::{AppStep, IndexFilter, IndexRead, Keys, Output, Plan, Projected, RowRead};

/// The plan of a SELECT, or why there is none.
pub fn plan(model: &Model, query: &Query) -> Result<Plan, String> {
    if query.with.is_some() {
        return Err(
            "WITH (a common table expression): the cell API runs no queries over \
                    queries; read the cells and combine them in the app"
                .to_string(),
        );
    }
    if let Some(lock) = query.locks.first() {
        return Err(format!(
            "row lock ({lock}): Schemaless has no locks; cells are append-only, so write \
             the next ref key and let a conflicting put_cell tell you another writer won"
        ));
    }
    if query.fetch.is_some() {
        return Err("FETCH FIRST: write it as LIMIT".to_string());
    }
    let select = match query.body.as_ref() {
        SetExpr::Select(select) => select,
        SetExpr::SetOperation { op, .. } => {
            return Err(format!(
                "{op}: the cell API answers one read at a time; run each side and merge in the app"
            ))
        }
        other => return Err(format!("a {} query body is not a SELECT", kind_of(other))),
    };
    let (limit, offset) = match &query.limit_clause {
        None => (None, None),
        Some(LimitClause::LimitOffset { limit, offset, .. }) => {
            (limit.as_ref(), offset.as_ref().map(|o| &o.value))
        }
        Some(LimitClause::OffsetCommaLimit { offset, limit }) => (Some(limit), Some(offset)),
    };
    let order: Vec<(&Expr, bool)> = match query.order_by.as_ref().map(|o| &o.kind) {
        None => Vec::new(),
        Some(OrderByKind::All(_)) => return Err("ORDER BY ALL: name the field".to_string()),
        Some(OrderByKind::Expressions(exprs)) => exprs
            .iter()
            .map(|e| {
                (
                    output_named(select, &e.expr),
                    matches!(e.options.sort, Some(OrderBySort::Desc)),
                )
            })
            .collect(),
    };
    SelectPlan::new(model, select)?.plan(&order, limit, offset)
}

/// What an ORDER BY item orders by, as PostgreSQL reads it: a position
/// (`ORDER BY 2`) or a bare name of an output column (`ORDER BY total`
/// after `fare * 2 AS total`) is that select item's expression; anything
/// else is itself.
pub(crate) fn output_named<'a>(select: &'a Select, expr: &'a Expr) -> &'a Expr {
    let item = |i: usize| match select.projection.get(i) {
        Some(SelectItem::UnnamedExpr(e) | SelectItem::ExprWithAlias { expr: e, .. }) => Some(e),
        _ => None,
    };
    match expr {
        Expr::Value(v) => match &v.value {
            sqlparser::ast::Value::Number(n, _) => n
                .parse::<usize>()
                .ok()
                .and_then(|n| n.checked_sub(1))
                .and_then(item)
                .unwrap_or(expr),
            _ => expr,
        },
        Expr::Identifier(name) => select
            .projection
            .iter()
            .find_map(|p| match p {
                SelectItem::ExprWithAlias { expr, alias } if folded(alias) == folded(name) => {
                    Some(expr)
                }
                _ => None,
            })
            .unwrap_or(expr),
        _ => expr,
    }
}

fn kind_of(body: &SetExpr) -> &'static str {
    match body {
        SetExpr::Values(_) => "VALUES",
        SetExpr::Query(_) => "nested",
        SetExpr::Insert(_) | SetExpr::Update(_) | SetExpr::Delete(_) => "data-modifying",
        _ => "non-SELECT",
    }
}

struct SelectPlan<'a> {
    model: &'a Model,
    scope: Scope,
    /// The parent table's place in the scope, when it is there.
    parent: Option<usize>,
    /// Conditions other than the join's, with their text.
    conds: Vec<(&'a Expr, Cond<'a>)>,
    /// Of `conds`, those of a LEFT JOIN's `ON` (by index).
    outer: Vec<usize>,
    outputs: Vec<Projected>,
    /// Every column the statement reads (outputs, conditions, order).
    read: Vec<Col>,
    /// Scope entries joined with LEFT JOIN.
    left: Vec<usize>,
}

impl<'a> SelectPlan<'a> {
    fn new(model: &'a Model, select: &'a Select) -> Result<SelectPlan<'a>, String> {
        if select.distinct.is_some() {
            return Err("DISTINCT: read the rows and deduplicate them in the app".to_string());
        }
        let grouped = match &select.group_by {
            GroupByExpr::All(_) => true,
            GroupByExpr::Expressions(exprs, _) => !exprs.is_empty(),
        };
        if grouped || select.having.is_some() {
            return Err(
                "GROUP BY: Schemaless has no aggregates; aggregate in the app over \
                        an index query, or keep the figure in a cell of its own"
                    .to_string(),
            );
        }
        for item in &select.projection {
            if let SelectItem::UnnamedExpr(e) | SelectItem::ExprWithAlias { expr: e, .. } = item {
                if let Some(call) = aggregate_in(e) {
                    return Err(format!(
                        "aggregate {call}: Schemaless has no aggregates; count or sum in \
                         the app over an index query, or keep the figure in a cell of its own"
                    ));
                }
            }
        }
        if select.from.is_empty() {
            return Err(
                "a SELECT without FROM that reads a layout table in a subquery; \
                        read it on its own"
                    .to_string(),
            );
        }
        let mut scope = Scope::default();
        // Each join's ON, and whether the join is a LEFT one.
        let mut on: Vec<(&Expr, bool)> = Vec::new();
        let mut left = Vec::new();
        for from in &select.from {
            scope.add(model, &from.relation)?;
            for join in &from.joins {
                scope.add(model, &join.relation)?;
                if matches!(
                    join.join_operator,
                    JoinOperator::Left(_) | JoinOperator::LeftOuter(_)
                ) {
                    left.push(scope.tables.len() - 1);
                }
                let constraint = match &join.join_operator {
                    JoinOperator::Join(c)
                    | JoinOperator::Inner(c)
                    | JoinOperator::Left(c)
                    | JoinOperator::LeftOuter(c) => c,
                    other => {
                        return Err(format!(
                            "{}: only an inner or left join of a child to its parent on the \
                             layout's parent key is read by row key",
                            join_name(other)
                        ))
                    }
                };
                match constraint {
                    JoinConstraint::On(e) => {
                        on.push((e, left.last() == Some(&(scope.tables.len() - 1))))
                    }
                    other => {
                        return Err(format!(
                            "a join {}: write it as ON child.parent = parent.id",
                            match other {
                                JoinConstraint::Using(_) | JoinConstraint::UsingAlias(..) => {
                                    "with USING"
                                }
                                JoinConstraint::Natural => "NATURAL",
                                _ => "without a condition",
                            }
                        ))
                    }
                }
            }
        }
        if let Some(outside) = scope.tables.iter().find(|t| t.table.is_none()) {
            return Err(format!(
                "joins {}, a table outside the layout: Schemaless has no joins; read it \
                 from its own store and join in the app",
                outside.written
            ));
        }
        let parents: Vec<usize> = (0..scope.tables.len())
            .filter(|&at| scope.table(at) == Some(Table::Parent))
            .collect();
        if parents.len() > 1 {
            return Err(format!(
                "joins {} to itself: read each row by its UUID",
                model.layout.table
            ));
        }
        let parent = parents.first().copied();
        let mut plan = SelectPlan {
            model,
            scope,
            parent,
            conds: Vec::new(),
            outer: Vec::new(),
            outputs: Vec::new(),
            read: Vec::new(),
            left,
        };
        let mut linked = Vec::new();
        let all: Vec<(&Expr, bool)> = on
            .into_iter()
            .chain(select.selection.iter().map(|e| (e, false)))
            .flat_map(|(e, outer)| conjuncts(e).into_iter().map(move |c| (c, outer)))
            .collect();
        for (e, outer) in all {
            if let Some(sub) = subquery_in(e) {
                return Err(format!(
                    "subquery {sub}: the cell API runs no queries within queries; run it \
                     first and pass its result as a value"
                ));
            }
            match cond(&plan.scope, model, e)? {
                Cond::Link { left, right } => linked.push(plan.link(&left, &right, e)?),
                c => {
                    plan.read.extend(c.cols().into_iter().cloned());
                    if outer {
                        plan.outer.push(plan.conds.len());
                    }
                    plan.conds.push((e, c));
                }
            }
        }
        if let Some(parent) = parent {
            for at in 0..plan.scope.tables.len() {
                if at != parent && !linked.contains(&at) {
                    return Err(format!(
                        "{} is not joined to {} on the layout's parent key; join it ON {}.{} = {}.{}",
                        plan.scope.tables[at].alias,
                        plan.scope.tables[parent].alias,
                        plan.scope.tables[at].alias,
                        child_key(model, plan.scope.table(at)),
                        plan.scope.tables[parent].alias,
                        model.layout.id
                    ));
                }
            }
        } else if plan.scope.tables.len() > 1 {
            return Err(
                "joins child tables without their parent: join each to the parent \
                        on its key and filter the parent by UUID"
                    .to_string(),
            );
        }
        plan.project(select)?;
        Ok(plan)
    }

    /// Checks a join condition: a child's parent key against the parent's
    /// id. Returns the child's place in the scope.
    fn link(&self, left: &Col, right: &Col, e: &Expr) -> Result<usize, String> {
        let child_to_parent = |child: &Col, parent: &Col| {
            matches!(self.scope.table(child.at), Some(Table::Child(_)))
                && child.source == Source::IntegerId
                && Some(parent.at) == self.parent
                && parent.source == Source::IntegerId
        };
        if child_to_parent(left, right) {
            Ok(left.at)
        } else if child_to_parent(right, left) {
            Ok(right.at)
        } else {
            Err(format!(
                "joins on {e}, which is not the layout's parent key (a child's parent \
                 column = {}.{})",
                self.model.layout.table, self.model.layout.id
            ))
        }
    }
}

fn child_key(model: &Model, table: Option<Table>) -> String {
    match table {
        Some(Table::Child(c)) => model.column(c).parent.clone().unwrap_or_default(),
        _ => "parent".to_string(),
    }
}

fn join_name(op: &JoinOperator) -> &'static str {
    match op {
        JoinOperator::Right(_) | JoinOperator::RightOuter(_) => "RIGHT JOIN",
        JoinOperator::FullOuter(_) => "FULL JOIN",
        JoinOperator::CrossJoin(_) => "CROSS JOIN",
        _ => "this join",
    }
}
