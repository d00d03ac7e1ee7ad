//! A read by row key: the columns a plan reads, child rows and their
//! parent, LEFT JOINed children.

use super::*;

impl<'a> SelectPlan<'a> {
    pub(super) fn plan(
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
        // A LEFT JOIN's ON names no rows of the result: `ON ... AND
        // t.uuid = $1` joins children to that parent only, and keeps
        // every other parent.
        let key = (0..self.conds.len()).find(|i| match &self.conds[*i].1 {
            Cond::Cmp {
                col,
                op: FilterOp::Eq,
                ..
            }
            | Cond::InList { col, .. }
            | Cond::Any { col, .. } => {
                col.at == parent && col.source == Source::RowKey && !self.outer.contains(i)
            }
            _ => false,
        });
        match key {
            Some(i) => self.row_plan(i, order, ordered, limit, offset),
            None => self.index_plan(parent, &order_cols, ordered, limit, offset),
        }
    }

    pub(super) fn child_without_parent(&self) -> String {
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
    pub(super) fn columns_read(
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

    pub(super) fn row_plan(
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
        let mut filter: Option<Expr> = None;
        let mut filter_columns = Vec::new();
        let mut outer_condition = None;
        for (i, (e, _)) in self.conds.iter().enumerate() {
            if i == key {
                continue;
            }
            steps.push(AppStep(format!("filter in the app: {e}")));
            if self.outer.contains(&i) {
                outer_condition.get_or_insert_with(|| e.to_string());
                continue;
            }
            // Its columns numbered on from the conditions before it.
            let (over, cols) = over_columns(&self.scope, self.model, e, filter_columns.len())?;
            for col in &cols {
                filter_columns.push(Projected {
                    name: col.name.clone(),
                    from: self.output_of(col).ok_or_else(|| {
                        format!("filters by {}, which no cell holds", self.scope.show(col))
                    })?,
                    expr: self.scope.show(col),
                });
            }
            let over = Expr::Nested(Box::new(over));
            filter = Some(match filter {
                None => over,
                Some(before) => Expr::BinaryOp {
                    left: Box::new(before),
                    op: BinaryOperator::And,
                    right: Box::new(over),
                },
            });
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
            filter,
            filter_columns,
            outer_condition,
            outputs: self.outputs,
            left,
            order: ordered,
            limit: limit.cloned(),
            offset: offset.cloned(),
        })))
    }

    /// The child columns of LEFT JOINed tables.
    pub(super) fn left_children(&self) -> Vec<String> {
        self.left
            .iter()
            .filter_map(|&at| match self.scope.table(at) {
                Some(Table::Child(c)) => Some(self.model.column(c).name.clone()),
                _ => None,
            })
            .collect()
    }
}
