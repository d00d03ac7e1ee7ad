//! What an INSERTed row's columns are evaluated from, and the values
//! drawn from sequences first: the read-only evaluation of a write's
//! values cannot draw them.

use super::*;

impl<S: CellStore> Writer<'_, S> {
    /// What each mapped column of an INSERTed row is evaluated from: the
    /// value given, or the default (a generated one stands in as NULL
    /// until the row is known), and which columns draw from a sequence
    /// (a default's `nextval`, or the app's own), which the read-only
    /// evaluation cannot draw: [`Writer::draw_all`] draws them first.
    pub(super) fn targets(&self, row: &Inserted) -> Result<Targets, Refused> {
        let mut targets = Vec::new();
        let mut drawn = Vec::new();
        let mut given = vec![false; self.cols.len()];
        for (i, c) in self.cols.iter().enumerate() {
            let value = row.values.iter().find(|(name, _)| *name == c.sql);
            given[i] = value.is_some();
            if c.attr.always && value.is_some() {
                return Err(Refused::new(
                    "428C9",
                    format!(
                        "cannot insert a non-DEFAULT value into column \"{}\": it is an identity column defined as GENERATED ALWAYS",
                        c.sql
                    ),
                ));
            }
            if c.attr.generated {
                if value.is_some() {
                    return Err(Refused::new(
                        "428C9",
                        format!(
                            "cannot insert a non-DEFAULT value into column \"{}\": it is a generated column",
                            c.sql
                        ),
                    ));
                }
                // Stands in until the row is known.
                targets.push((i, "NULL".into()));
                continue;
            }
            let default = c.attr.default.as_deref().filter(|_| value.is_none());
            if default.is_some_and(|d| d.to_ascii_lowercase().contains("nextval(")) {
                drawn.push((i, default.unwrap_or_default().to_string()));
            }
            // The app's own `nextval('seq')` (an id drawn in the INSERT):
            // drawn as a default is.
            if let Some((_, e)) = value.filter(|(_, e)| draws(e)) {
                drawn.push((i, e.to_string()));
            }
            targets.push((
                i,
                match value {
                    Some((_, e)) => e.to_string(),
                    None => default.unwrap_or("NULL").to_string(),
                },
            ));
        }
        Ok(Targets {
            targets,
            drawn,
            given,
        })
    }

    /// Draws every row's sequence values (`rows`' [`Targets::drawn`]) in
    /// one committed statement, in the rows' order, as PostgreSQL draws
    /// them for a multi-row INSERT (rows evaluated at once would draw in
    /// the order their round trips arrive), and puts each in its row's
    /// targets as a typed value.
    pub(super) async fn draw_all(&self, rows: &mut [Targets]) -> Result<(), Refused> {
        let items: Vec<String> = rows
            .iter()
            .flat_map(|row| row.drawn.iter())
            .enumerate()
            .map(|(n, (i, e))| format!("({n}, {})", self.cols[*i].read(e)))
            .collect();
        if items.is_empty() {
            return Ok(());
        }
        let sql = format!(
            "/* mezzanine: a write through the facade */ SELECT t FROM (VALUES {}) AS drawn(n, t) \
             ORDER BY n",
            items.join(", ")
        );
        let texts = self
            .eval
            .committed_rows(&sql)
            .await
            .map_err(evaluation_error)?;
        let mut texts = texts.iter().map(|row| {
            use sqlx::Row as _;
            row.try_get::<Option<String>, _>(0)
                .map_err(|e| Refused::new("XX000", e.to_string()))
        });
        for row in rows.iter_mut() {
            for (at, _) in &row.drawn {
                let text = texts
                    .next()
                    .ok_or_else(|| Refused::new("XX000", "fewer values drawn than asked"))??;
                row.targets[*at].1 = self.cols[*at].typed(&self.rendered(*at, text)?)?;
            }
        }
        Ok(())
    }
}

/// Whether `expr` is a bare `nextval('name')` (the name a literal, cast
/// or not; the call cast or not): a value drawn from a sequence, which the
/// read-only evaluation of the statement's values cannot draw. Only this
/// form is drawn in a committed transaction, never any other of the
/// app's expressions ([`Evaluator::committed_rows`]).
fn draws(expr: &Expr) -> bool {
    use sqlparser::ast::{FunctionArg, FunctionArgExpr, FunctionArguments};
    let Expr::Function(f) = strip(expr) else {
        return false;
    };
    let FunctionArguments::List(list) = &f.args else {
        return false;
    };
    crate::expr::last_name(&f.name) == "nextval"
        && list.clauses.is_empty()
        && list.duplicate_treatment.is_none()
        && matches!(
            list.args.as_slice(),
            [FunctionArg::Unnamed(FunctionArgExpr::Expr(arg))]
                if matches!(strip(arg), Expr::Value(v)
                    if matches!(v.value, sqlparser::ast::Value::SingleQuotedString(_)))
        )
}
