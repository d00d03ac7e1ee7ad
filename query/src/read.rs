//! SELECT: row-key reads, an index query, or the reason neither answers.

use schemaless::FilterOp;
use sqlparser::ast::{
    Expr, GroupByExpr, Ident, JoinConstraint, JoinOperator, LimitClause, OrderByKind, OrderBySort,
    Query, Select, SelectItem, SelectItemQualifiedWildcardKind, SetExpr,
};

use crate::expr::{aggregate_in, cond, conjuncts, subquery_in, Col, Cond, Scope};
use crate::model::{Model, Source, Table};
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
            .map(|e| (&e.expr, matches!(e.options.sort, Some(OrderBySort::Desc))))
            .collect(),
    };
    SelectPlan::new(model, select)?.plan(&order, limit, offset)
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
        let mut on: Vec<&Expr> = Vec::new();
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
                    JoinConstraint::On(e) => on.push(e),
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
            outputs: Vec::new(),
            read: Vec::new(),
            left,
        };
        let mut linked = Vec::new();
        let all: Vec<&Expr> = on
            .into_iter()
            .chain(select.selection.iter())
            .flat_map(conjuncts)
            .collect();
        for e in all {
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

    /// Reads the select list into outputs.
    fn project(&mut self, select: &Select) -> Result<(), String> {
        for item in &select.projection {
            match item {
                SelectItem::Wildcard(_) => {
                    for at in 0..self.scope.tables.len() {
                        self.all_of(at);
                    }
                }
                SelectItem::QualifiedWildcard(kind, _) => {
                    let name = match kind {
                        SelectItemQualifiedWildcardKind::ObjectName(n) => crate::expr::last_name(n),
                        SelectItemQualifiedWildcardKind::Expr(e) => e.to_string(),
                    };
                    let Some(at) = self.scope.tables.iter().position(|t| t.alias == name) else {
                        return Err(format!("{name}.* names no table of the statement"));
                    };
                    self.all_of(at);
                }
                SelectItem::UnnamedExpr(e) => self.output(e, None)?,
                SelectItem::ExprWithAlias { expr, alias } => {
                    self.output(expr, Some(crate::model::folded(alias)))?
                }
                SelectItem::ExprWithAliases { expr, .. } => self.output(expr, None)?,
            }
        }
        Ok(())
    }

    /// `*` of one table: every column the layout maps (columns it does not
    /// map are not in Schemaless).
    fn all_of(&mut self, at: usize) {
        let Some(table) = self.scope.table(at) else {
            return;
        };
        let model = self.model;
        let mut names: Vec<String> = Vec::new();
        if table == Table::Parent {
            names.push(model.layout.uuid.clone());
        }
        for c in model.columns_of(table) {
            let column = model.column(c);
            names.extend(column.fields.0.values().cloned());
            names.push(column.ref_key.clone());
        }
        for name in names {
            if self.outputs.iter().any(|o| o.name == name) {
                continue;
            }
            let source = model.source(table, &name);
            let col = Col {
                at,
                name: name.clone(),
                source,
            };
            if let Some(from) = self.output_of(&col) {
                let expr = format!(
                    "{}.{}",
                    Ident::with_quote('"', self.scope.tables[at].alias.clone()),
                    Ident::with_quote('"', name.clone())
                );
                self.read.push(col);
                self.outputs.push(Projected { name, from, expr });
            }
        }
    }

    fn output(&mut self, e: &Expr, alias: Option<String>) -> Result<(), String> {
        if crate::expr::is_value(e) {
            self.outputs.push(Projected {
                name: alias.unwrap_or_else(|| "?column?".to_string()),
                from: Output::Value(crate::expr::value_text(e)),
                expr: e.to_string(),
            });
            return Ok(());
        }
        let Some(col) = self.scope.column(self.model, e)? else {
            return Err(format!(
                "selects the expression {e}: select the fields it uses and compute it in the app"
            ));
        };
        self.readable(&col)?;
        let from = self
            .output_of(&col)
            .expect("a readable column has an output");
        self.outputs.push(Projected {
            name: alias.unwrap_or_else(|| col.name.clone()),
            from,
            expr: e.to_string(),
        });
        self.read.push(col);
        Ok(())
    }

    fn output_of(&self, col: &Col) -> Option<Output> {
        let model = self.model;
        Some(match &col.source {
            Source::RowKey => Output::RowKey,
            Source::RefKey { column } => Output::RefKey {
                column: model.column(*column).name.clone(),
            },
            Source::Field { column, field } => Output::Field {
                column: model.column(*column).name.clone(),
                field: field.clone(),
            },
            Source::IntegerId | Source::Unmapped => return None,
        })
    }

    /// `Ok` when a cell holds the column.
    fn readable(&self, col: &Col) -> Result<(), String> {
        let model = self.model;
        let shown = self.scope.show(col);
        match col.source {
            Source::IntegerId => Err(match self.scope.table(col.at) {
                Some(Table::Parent) => format!(
                    "reads {shown}, the integer id, which no cell holds: rewrite it to the \
                     UUID {}.{} (the row key)",
                    self.scope.tables[col.at].alias, model.layout.uuid
                ),
                _ => format!(
                    "reads {shown}, the parent's integer id, which no cell holds: join the \
                     parent and use its UUID {}",
                    model.layout.uuid
                ),
            }),
            Source::Unmapped => Err(format!(
                "reads {shown}, which the layout does not map: add it to the fields of a \
                 column of {}",
                self.scope.tables[col.at].written
            )),
            _ => Ok(()),
        }
    }

    fn plan(
        mut self,
        order: &[(&'a Expr, bool)],
        limit: Option<&'a Expr>,
        offset: Option<&'a Expr>,
    ) -> Result<Plan, String> {
        let mut order_cols = Vec::new();
        for (e, desc) in order {
            let Some(col) = self.scope.column(self.model, e)? else {
                return Err(format!("orders by the expression {e}: sort in the app"));
            };
            self.readable(&col)?;
            order_cols.push((col, *desc));
        }
        self.read.extend(order_cols.iter().map(|(c, _)| c.clone()));
        let ordered: Vec<(Projected, bool)> = order
            .iter()
            .zip(&order_cols)
            .filter_map(|((e, desc), (col, _))| {
                Some((
                    Projected {
                        name: col.name.clone(),
                        from: self.output_of(col)?,
                        expr: e.to_string(),
                    },
                    *desc,
                ))
            })
            .collect();
        // A column no layout column maps is the first thing to fix.
        if let Some(col) = self.read.iter().find(|c| c.source == Source::Unmapped) {
            self.readable(col)?;
        }
        let Some(parent) = self.parent else {
            return Err(self.child_without_parent());
        };
        let key = self.conds.iter().position(|(_, c)| match c {
            Cond::Cmp {
                col,
                op: FilterOp::Eq,
                ..
            }
            | Cond::InList { col, .. }
            | Cond::Any { col, .. } => col.at == parent && col.source == Source::RowKey,
            _ => false,
        });
        match key {
            Some(i) => self.row_plan(i, order, ordered, limit, offset),
            None => self.index_plan(parent, &order_cols, ordered, limit, offset),
        }
    }

    fn child_without_parent(&self) -> String {
        let model = self.model;
        let by_id = self.conds.iter().find_map(|(_, c)| {
            c.cols()
                .into_iter()
                .find(|col| col.source == Source::IntegerId)
                .cloned()
        });
        let alias = &self.scope.tables[0].alias;
        match by_id {
            Some(col) => format!(
                "filters {} by {}, the parent's integer id: join {} ON {alias}.{} = {}.{} and \
                 filter by {}.{} (the row key)",
                self.scope.tables[col.at].written,
                self.scope.show(&col),
                model.layout.table,
                col.name,
                model.layout.table,
                model.layout.id,
                model.layout.table,
                model.layout.uuid
            ),
            None => format!(
                "reads {} without naming the parent rows: join {} on its key and filter by \
                 its UUID {}",
                self.scope.tables[0].written, model.layout.table, model.layout.uuid
            ),
        }
    }

    /// The layout columns to read for the columns the statement uses.
    fn columns_read(
        &self,
        skip_parent_fields_of: Option<(usize, &[String])>,
    ) -> (Vec<String>, Vec<String>) {
        let model = self.model;
        let mut latest = Vec::new();
        let mut children = Vec::new();
        for col in &self.read {
            let column = match &col.source {
                Source::RefKey { column } => *column,
                Source::Field { column, field } => {
                    if let Some((c, held)) = skip_parent_fields_of {
                        if c == *column && held.contains(field) {
                            continue;
                        }
                    }
                    *column
                }
                _ => continue,
            };
            let name = model.column(column).name.clone();
            if self.scope.table(col.at) == Some(Table::Parent) {
                if !latest.contains(&name) {
                    latest.push(name);
                }
            } else if !children.contains(&name) {
                children.push(name);
            }
        }
        // A child table in scope is read whole: its rows are the result's.
        for at in 0..self.scope.tables.len() {
            if let Some(Table::Child(c)) = self.scope.table(at) {
                let name = model.column(c).name.clone();
                if !children.contains(&name) {
                    children.push(name);
                }
            }
        }
        (latest, children)
    }

    fn row_plan(
        self,
        key: usize,
        order: &[(&Expr, bool)],
        ordered: Vec<(Projected, bool)>,
        limit: Option<&Expr>,
        offset: Option<&Expr>,
    ) -> Result<Plan, String> {
        for col in &self.read {
            self.readable(col)?;
        }
        let keys = match &self.conds[key].1 {
            Cond::Cmp { value, .. } => Keys::One((*value).clone()),
            Cond::InList { values, .. } => {
                Keys::List(values.iter().map(|v| (*v).clone()).collect())
            }
            Cond::Any { array, .. } => Keys::Array((*array).clone()),
            _ => unreachable!("the key condition is a comparison, IN or ANY"),
        };
        let (mut latest, children) = self.columns_read(None);
        if latest.is_empty() && children.is_empty() {
            // Whether the row exists is known from a cell of it.
            if let Some(&c) = self.model.columns_of(Table::Parent).first() {
                latest.push(self.model.column(c).name.clone());
            }
        }
        let mut steps = Vec::new();
        for (i, (e, _)) in self.conds.iter().enumerate() {
            if i != key {
                steps.push(AppStep(format!("filter in the app: {e}")));
            }
        }
        if !order.is_empty() {
            let by: Vec<String> = order
                .iter()
                .map(|(e, desc)| {
                    if *desc {
                        format!("{e} desc")
                    } else {
                        e.to_string()
                    }
                })
                .collect();
            steps.push(AppStep(format!("sort in the app: {}", by.join(", "))));
        }
        if let Some(offset) = offset {
            steps.push(AppStep(format!("skip in the app: {offset}")));
        }
        if let Some(limit) = limit {
            steps.push(AppStep(format!("limit in the app: {limit}")));
        }
        let left = self.left_children();
        Ok(Plan::Rows(Box::new(RowRead {
            keys,
            latest,
            children,
            steps,
            filtered: self.conds.len() > 1,
            outputs: self.outputs,
            left,
            order: ordered,
            limit: limit.cloned(),
            offset: offset.cloned(),
        })))
    }

    fn index_plan(
        self,
        parent: usize,
        order: &[(Col, bool)],
        ordered: Vec<(Projected, bool)>,
        limit: Option<&Expr>,
        offset: Option<&Expr>,
    ) -> Result<Plan, String> {
        let model = self.model;
        for (_, c) in &self.conds {
            for col in c.cols() {
                if col.source == Source::IntegerId && col.at == parent {
                    return Err(format!(
                        "filters by {}, the integer id: rewrite it to the UUID {}.{} (the row key)",
                        self.scope.show(col),
                        self.scope.tables[parent].alias,
                        model.layout.uuid
                    ));
                }
            }
        }
        let mut first_reason = None;
        for c in model.columns_of(Table::Parent) {
            for index in model.indexes_on(c) {
                let Some(shard_sql) = model.sql_column(c, &index.shard_field) else {
                    continue;
                };
                let shard = self.conds.iter().position(|(_, cond)| {
                    matches!(cond, Cond::Cmp { col, op: FilterOp::Eq, .. }
                        if col.at == parent && col.name == shard_sql)
                });
                let Some(shard) = shard else { continue };
                match self.fit(parent, c, index, shard, order, limit, offset) {
                    Ok(mut read) => {
                        read.order = ordered;
                        for col in &self.read {
                            self.readable(col)?;
                        }
                        return Ok(Plan::Index(Box::new(read)));
                    }
                    Err(why) => {
                        first_reason.get_or_insert(why);
                    }
                }
            }
        }
        if let Some(why) = first_reason {
            return Err(why);
        }
        Err(self.no_key(parent))
    }

    /// Why no index applies when none has its shard field compared.
    fn no_key(&self, parent: usize) -> String {
        let model = self.model;
        let table = &model.layout.table;
        let equal_field = self.conds.iter().find_map(|(_, c)| match c {
            Cond::Cmp {
                col,
                op: FilterOp::Eq,
                ..
            } if col.at == parent => match &col.source {
                Source::Field { column, field } => Some((*column, field.clone(), col.clone())),
                _ => None,
            },
            _ => None,
        });
        let declared: Vec<String> = model
            .columns_of(Table::Parent)
            .into_iter()
            .flat_map(|c| model.indexes_on(c))
            .map(|i| format!("{} ({})", i.name, i.shard_field))
            .collect();
        let declared = if declared.is_empty() {
            "no index is declared on its row columns".to_string()
        } else {
            format!("the indexes are {}", declared.join(", "))
        };
        match equal_field {
            Some((column, field, col)) => format!(
                "filters {table} by {} without its UUID {}, and no index has shard field \
                 {field:?} ({declared}): declare an [[index]] on column {} with \
                 shard_field = {field:?}",
                self.scope.show(&col),
                model.layout.uuid,
                model.column(column).name
            ),
            None => format!(
                "reads {table} without its UUID {} or an equality on an index's shard \
                 field ({declared}): filter by one, or declare an [[index]] whose \
                 shard_field the query compares with =",
                model.layout.uuid
            ),
        }
    }

    /// The index query of `index` (over row column `c`), whose shard field
    /// condition is `conds[shard]`; or why it does not answer.
    #[allow(clippy::too_many_arguments)]
    fn fit(
        &self,
        parent: usize,
        c: usize,
        index: &config::Index,
        shard: usize,
        order: &[(Col, bool)],
        limit: Option<&Expr>,
        offset: Option<&Expr>,
    ) -> Result<IndexRead, String> {
        let model = self.model;
        let held = |col: &Col| -> Option<String> {
            if col.at != parent {
                return None;
            }
            let field = model
                .column(c)
                .fields
                .0
                .iter()
                .find(|(_, sql)| **sql == col.name)
                .map(|(f, _)| f.clone())?;
            (field == index.shard_field || index.fields.contains(&field)).then_some(field)
        };
        let not_held = |col: &Col| -> String {
            match &col.source {
                Source::Field { field, .. } if col.at == parent => format!(
                    "{} is not among the fields of index {}: add {field:?} to its fields",
                    self.scope.show(col),
                    index.name
                ),
                Source::RowKey => format!(
                    "{} is the row key; query_index compares index fields only",
                    self.scope.show(col)
                ),
                _ if col.at != parent => format!(
                    "{} is a child field; query_index filters the parent's index fields only",
                    self.scope.show(col)
                ),
                _ => format!(
                    "{} is not a field index {} holds",
                    self.scope.show(col),
                    index.name
                ),
            }
        };
        let Cond::Cmp {
            value: shard_value, ..
        } = &self.conds[shard].1
        else {
            unreachable!("the shard condition is an equality");
        };
        let mut filters = Vec::new();
        for (i, (e, cond)) in self.conds.iter().enumerate() {
            if i == shard {
                continue;
            }
            let (col, filter) = match cond {
                Cond::Cmp { col, op, value } => (col, (*op, vec![(*value).clone()], false)),
                Cond::InList { col, values } => (
                    col,
                    (
                        FilterOp::In,
                        values.iter().map(|v| (*v).clone()).collect(),
                        false,
                    ),
                ),
                Cond::Any { col, array } => (col, (FilterOp::In, vec![(*array).clone()], true)),
                Cond::Between { col, low, high } => {
                    let field = held(col).ok_or_else(|| format!("filters by {}", not_held(col)))?;
                    filters.push(IndexFilter {
                        field: field.clone(),
                        op: FilterOp::Ge,
                        values: vec![(*low).clone()],
                        array: false,
                    });
                    filters.push(IndexFilter {
                        field,
                        op: FilterOp::Le,
                        values: vec![(*high).clone()],
                        array: false,
                    });
                    continue;
                }
                Cond::Link { .. } | Cond::Other { .. } => {
                    return Err(format!(
                        "the condition {e} is not a comparison (=, <, <=, >, >=, IN, ANY, \
                         BETWEEN) of an index field with a value, which query_index cannot \
                         apply: filter in the app"
                    ))
                }
            };
            let field = held(col).ok_or_else(|| format!("filters by {}", not_held(col)))?;
            filters.push(IndexFilter {
                field,
                op: filter.0,
                values: filter.1,
                array: filter.2,
            });
        }
        let (order_by, descending) = match order {
            [] => (None, false),
            [(col, desc)] if col.source == Source::RowKey => (None, *desc),
            [(col, desc)] => (
                Some(held(col).ok_or_else(|| format!("orders by {}", not_held(col)))?),
                *desc,
            ),
            [(col, desc), (then, then_desc)]
                if then.source == Source::RowKey && then_desc == desc =>
            {
                (
                    Some(held(col).ok_or_else(|| format!("orders by {}", not_held(col)))?),
                    *desc,
                )
            }
            _ => {
                return Err(
                    "orders by more than one field: query_index orders by one index \
                            field, then the row key"
                        .to_string(),
                )
            }
        };
        if let Some(offset) = offset {
            return Err(format!(
                "OFFSET {offset}: query_index has no offset; page on the order field (the \
                 next page starts after the last value seen)"
            ));
        }
        let mut holds: Vec<String> = index.fields.clone();
        holds.push(index.shard_field.clone());
        let (latest, children) = self.columns_read(Some((c, &holds)));
        if let (Some(limit), false) = (limit, children.is_empty()) {
            return Err(format!(
                "LIMIT {limit} over child rows joined to the index's rows: query_index \
                 limits parents, not joined rows; limit the parents (query them alone, \
                 then read their children) or page in the app"
            ));
        }
        Ok(IndexRead {
            index: index.name.clone(),
            shard_field: index.shard_field.clone(),
            shard_value: (*shard_value).clone(),
            filters,
            order_by,
            descending,
            limit: limit.cloned(),
            latest,
            children,
            outputs: self.outputs.clone(),
            left: self.left_children(),
            order: Vec::new(),
        })
    }

    /// The child columns of LEFT JOINed tables.
    fn left_children(&self) -> Vec<String> {
        self.left
            .iter()
            .filter_map(|&at| match self.scope.table(at) {
                Some(Table::Child(c)) => Some(self.model.column(c).name.clone()),
                _ => None,
            })
            .collect()
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
