//! What a SELECT outputs: its projection resolved against the scope, and
//! whether every column it reads can be read through the cell API.

use super::*;

impl SelectPlan<'_> {
    /// Reads the select list into outputs.
    pub(super) fn project(&mut self, select: &Select) -> Result<(), String> {
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
    pub(super) fn all_of(&mut self, at: usize) {
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

    pub(super) fn output(&mut self, e: &Expr, alias: Option<String>) -> Result<(), String> {
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

    pub(super) fn output_of(&self, col: &Col) -> Option<Output> {
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
    pub(super) fn readable(&self, col: &Col) -> Result<(), String> {
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
}
