//! A read through a secondary index: which index fits the conditions,
//! order and limit, or why none does.

use super::*;

impl SelectPlan<'_> {
    pub(super) fn index_plan(
        self,
        parent: usize,
        order: &[(Col, bool)],
        ordered: Vec<(Projected, bool)>,
        limit: Option<&Expr>,
        offset: Option<&Expr>,
    ) -> Result<Plan, String> {
        let model = self.model;
        if let Some(&i) = self.outer.first() {
            return Err(format!(
                "a LEFT JOIN's ON has the condition {}, which picks the child rows joined, \
                 not the rows read: an index query reads rows by conditions of the WHERE",
                self.conds[i].0
            ));
        }
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
    pub(super) fn no_key(&self, parent: usize) -> String {
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
    pub(super) fn fit(
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
}
