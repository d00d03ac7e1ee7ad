//! The PostgreSQL side of `query run`: the statement with its values
//! bound and evaluated once, and its rows re-read through each field's
//! read expression.

use super::*;

/// The SQL that reads `from` (an expression of the statement) as the text
/// the layout's conversion renders.
pub(super) fn read_expr(legacy: &LegacyStore, from: &Output, expr: &str) -> String {
    match field(legacy, from) {
        Some(f) => f.conversion.read_expr(&format!("({expr})")),
        None => format!("({expr})::text"),
    }
}

pub(super) fn field<'a>(
    legacy: &'a LegacyStore,
    from: &Output,
) -> Option<&'a legacy::layout::Field> {
    match from {
        Output::Field { column, field } => {
            let (_, c) = legacy.layout().column(column)?;
            c.field(field)
        }
        _ => None,
    }
}

/// A value read as text, as JSON the way a cell holds it.
pub(super) fn render(
    legacy: &LegacyStore,
    from: &Output,
    text: Option<String>,
) -> Result<Value, RunError> {
    let Some(text) = text else {
        return Ok(Value::Null);
    };
    Ok(match from {
        Output::Field { .. } => match field(legacy, from) {
            Some(f) => f
                .conversion
                .render(Some(&text))
                .map_err(|e| anyhow::anyhow!("reading {text:?}: {e}"))?,
            None => Value::String(text),
        },
        Output::RefKey { .. } => text
            .parse::<i64>()
            .map(Value::from)
            .unwrap_or(Value::String(text)),
        Output::RowKey | Output::Value(_) => Value::String(text),
    })
}

/// PostgreSQL's answer: the statement with its select list replaced by
/// each output's read expression (then the ORDER BY columns').
pub(super) async fn postgres_rows(
    legacy: &LegacyStore,
    statement: &Statement,
    outputs: &[Projected],
    order: &[(Projected, bool)],
) -> Result<Vec<Row>, RunError> {
    let all: Vec<&Projected> = outputs.iter().chain(order.iter().map(|(p, _)| p)).collect();
    let items: Vec<String> = all
        .iter()
        .enumerate()
        .map(|(i, p)| {
            format!(
                "{} AS \"mezzanine_{i}\"",
                read_expr(legacy, &p.from, &p.expr)
            )
        })
        .collect();
    let select_list = Parser::parse_sql(
        &PostgreSqlDialect {},
        &format!("SELECT {}", items.join(", ")),
    )
    .map_err(|e| anyhow::anyhow!("building the PostgreSQL side: {e}"))?;
    let projection = match select_list.first() {
        Some(Statement::Query(q)) => match q.body.as_ref() {
            SetExpr::Select(s) => s.projection.clone(),
            _ => unreachable!("a SELECT parses as a select"),
        },
        _ => unreachable!("a SELECT parses as a query"),
    };
    let mut statement = statement.clone();
    let Statement::Query(query) = &mut statement else {
        return Err(untranslatable("not a SELECT"));
    };
    let SetExpr::Select(select) = query.body.as_mut() else {
        return Err(untranslatable("not a plain SELECT"));
    };
    // An ORDER BY naming a select item (by position or output name) names
    // the app's, which the projection below replaces: the item's own
    // expression instead.
    if let Some(sqlparser::ast::OrderByKind::Expressions(items)) =
        query.order_by.as_mut().map(|o| &mut o.kind)
    {
        for item in items {
            item.expr = crate::read::output_named(select, &item.expr).clone();
        }
    }
    select.projection = projection;
    let sql = format!("/* mezzanine */ {statement}");
    let rows: Vec<sqlx::postgres::PgRow> = sqlx::raw_sql(sqlx::AssertSqlSafe(sql.clone()))
        .fetch_all(legacy.pool())
        .await
        .map_err(|e| anyhow::anyhow!("running on PostgreSQL: {e}\n  {sql}"))?;
    let mut out = Vec::with_capacity(rows.len());
    for row in rows {
        use sqlx::Row as _;
        let mut values = Vec::with_capacity(all.len());
        for (i, p) in all.iter().enumerate() {
            let text: Option<String> = row.try_get(i)?;
            values.push(render(legacy, &p.from, text)?);
        }
        let order = values.split_off(outputs.len());
        out.push(Row { values, order });
    }
    Ok(out)
}

/// Ends whatever a failed guarded `Query` left open: the statements
/// after the error did not run, so the block may still be open (and
/// aborted). A failure here closes the connection rather than return it
/// open.
async fn roll_back(conn: &mut sqlx::pool::PoolConnection<sqlx::Postgres>) {
    use sqlx::Executor as _;
    if conn.execute("ROLLBACK").await.is_err() {
        conn.close_on_drop();
    }
}

/// `'…'` or `'…'::uuid` holding a UUID as 32 hex digits, or 36 with
/// hyphens at PostgreSQL's places: the forms on which PostgreSQL's
/// `uuid_in` and `uuid::Uuid::parse_str` agree (PostgreSQL takes braces
/// and other hyphen places too, the crate `urn:uuid:`; those, and every
/// other expression, are left to PostgreSQL).
pub(super) fn literal_uuid(e: &Expr) -> Option<uuid::Uuid> {
    let text = match e {
        Expr::Nested(inner) => return literal_uuid(inner),
        Expr::Cast {
            expr,
            data_type: sqlparser::ast::DataType::Uuid,
            ..
        } => return literal_uuid(expr),
        Expr::Value(v) => match &v.value {
            sqlparser::ast::Value::SingleQuotedString(s) => s,
            _ => return None,
        },
        _ => return None,
    };
    let hex = |b: &u8| b.is_ascii_hexdigit();
    let canonical = match text.len() {
        32 => text.as_bytes().iter().all(hex),
        36 => text.bytes().enumerate().all(|(i, b)| match i {
            8 | 13 | 18 | 23 => b == b'-',
            _ => b.is_ascii_hexdigit(),
        }),
        _ => false,
    };
    canonical
        .then(|| uuid::Uuid::parse_str(text).ok())
        .flatten()
}

/// Evaluates a statement's values on PostgreSQL, in the types the cell
/// API takes them: on the legacy store's connections, and, for an app's
/// statement (the proxy's), as the app's own role.
///
/// An app's values may call functions (`now()`, `lower($1)`, and any
/// other): evaluated with the facade's connection as it logged in, they
/// would run with its privileges, not the app's, and a session-level
/// `set_config` would stay on a pooled connection. So with a `role` each
/// evaluation runs in a `READ ONLY` transaction after `SET LOCAL ROLE`
/// (the facade's user must be a member of the app's role, as a superuser
/// or the owner granted it is), rolled back at the end: what the app
/// could not do itself fails with PostgreSQL's own error, and nothing of
/// it stays.
///
/// What a value means also depends on the app session's settings: a
/// zoneless `'2015-03-08 02:30'` is a `timestamptz` in the session's
/// `TimeZone`, `'03/04/2015'` a date in its `DateStyle`. So an app's
/// [`AppSession`] carries those PostgreSQL reports to the session
/// ([`AppSession::REPORTED`]) and the `search_path` the proxy asks the
/// session for (a function or type named bare in a value is found
/// there), and each evaluation sets them (`SET LOCAL`) after the role.
#[derive(Clone, Copy)]
pub struct Evaluator<'a> {
    pub legacy: &'a LegacyStore,
    /// The app's role, for an app's statement; `None` for the operator's
    /// own (`query run`).
    pub role: Option<&'a str>,
    /// The app session's settings, set with the role.
    pub settings: &'a [(String, String)],
}

impl<'a> Evaluator<'a> {
    /// Values evaluated as the legacy store's own user.
    pub fn own(legacy: &'a LegacyStore) -> Evaluator<'a> {
        Evaluator {
            legacy,
            role: None,
            settings: &[],
        }
    }

    /// The rows of `sql` (one statement, values only). As a role, the
    /// transaction, the role and the statement go in one simple `Query`
    /// (one round trip); on an error, whatever the `Query` left open is
    /// rolled back before the connection goes back to the pool.
    pub(super) async fn rows(&self, sql: &str) -> Result<Vec<sqlx::postgres::PgRow>, sqlx::Error> {
        self.run(sql, false).await
    }

    /// The rows of `sql`, committed: for a column default that draws
    /// from a sequence (`nextval`), which a read-only transaction refuses.
    /// Only the catalog's own default expressions are run this way, never
    /// the app's values; a drawn number is gone whatever happens next, as
    /// it is when PostgreSQL draws it for an INSERT that then fails.
    pub(super) async fn committed_rows(
        &self,
        sql: &str,
    ) -> Result<Vec<sqlx::postgres::PgRow>, sqlx::Error> {
        self.run(sql, true).await
    }

    async fn run(
        &self,
        sql: &str,
        commit: bool,
    ) -> Result<Vec<sqlx::postgres::PgRow>, sqlx::Error> {
        let sql = format!("/* mezzanine */ {sql}");
        let Some(role) = self.role else {
            return sqlx::query(sqlx::AssertSqlSafe(sql))
                .fetch_all(self.legacy.pool())
                .await;
        };
        let mut conn = self.legacy.pool().acquire().await?;
        let (begin, end) = match commit {
            true => ("BEGIN", "COMMIT"),
            false => ("BEGIN READ ONLY", "ROLLBACK"),
        };
        let (mut guarded, _) = self.guard(begin, role);
        guarded.push_str(&format!("{sql}; {end}"));
        let rows = sqlx::raw_sql(sqlx::AssertSqlSafe(guarded))
            .fetch_all(&mut *conn)
            .await;
        if rows.is_err() {
            roll_back(&mut conn).await;
        }
        rows
    }

    /// The first row of each of `statements` (values only, as
    /// [`Evaluator::rows`] takes), evaluated as the app's role in one
    /// read-only transaction and one round trip: one `BEGIN`, one set of
    /// `SET LOCAL`s, the statements, one `ROLLBACK`, where each statement
    /// alone costs all of them. The answers in order, up to and including
    /// the first that failed: PostgreSQL skips the statements after it,
    /// which get no answer. Without a role (the operator's own `query
    /// run`), each statement is run alone.
    pub(super) async fn first_rows(
        &self,
        statements: &[String],
    ) -> Vec<Result<Option<sqlx::postgres::PgRow>, sqlx::Error>> {
        use futures::TryStreamExt as _;
        let Some(role) = self.role else {
            let mut out = Vec::with_capacity(statements.len());
            for sql in statements {
                let rows = self
                    .run(sql, false)
                    .await
                    .map(|rows| rows.into_iter().next());
                let failed = rows.is_err();
                out.push(rows);
                if failed {
                    break;
                }
            }
            return out;
        };
        let mut conn = match self.legacy.pool().acquire().await {
            Ok(conn) => conn,
            Err(e) => return vec![Err(e)],
        };
        // `before`: the statements ahead of the app's, `BEGIN` and each
        // `SET LOCAL`.
        let (mut guarded, before) = self.guard("BEGIN READ ONLY", role);
        for sql in statements {
            guarded.push_str(&format!("/* mezzanine */ {sql}; "));
        }
        guarded.push_str("ROLLBACK");
        let mut out: Vec<Result<Option<sqlx::postgres::PgRow>, sqlx::Error>> =
            Vec::with_capacity(statements.len());
        // One result per statement (its CommandComplete); a row belongs
        // to the statement whose result comes next.
        let mut completed = 0usize;
        let mut first: Option<sqlx::postgres::PgRow> = None;
        let mut failed = false;
        {
            let mut stream = sqlx::raw_sql(sqlx::AssertSqlSafe(guarded)).fetch_many(&mut *conn);
            loop {
                match stream.try_next().await {
                    Ok(Some(sqlx::Either::Right(row))) => {
                        first.get_or_insert(row);
                    }
                    Ok(Some(sqlx::Either::Left(_))) => {
                        if (before..before + statements.len()).contains(&completed) {
                            out.push(Ok(first.take()));
                        }
                        first = None;
                        completed += 1;
                    }
                    Ok(None) => break,
                    Err(e) => {
                        failed = true;
                        if out.len() < statements.len() {
                            out.push(Err(e));
                        }
                        break;
                    }
                }
            }
        }
        if failed {
            roll_back(&mut conn).await;
        }
        out
    }

    /// `begin`, the role, and the app session's settings, each a
    /// statement ending in `; `, and how many statements that is.
    fn guard(&self, begin: &str, role: &str) -> (String, usize) {
        let mut guarded = format!("{begin}; SET LOCAL ROLE {}; ", serve::quote(role));
        let mut statements = 2;
        for (name, value) in self.settings {
            if name == "search_path" {
                // A list, not one literal (which would be one schema).
                // PostgreSQL checked the value when it was set, so it
                // splits; one that did not would leave the default path.
                if let Some(list) = super::session::search_path_list(value) {
                    guarded.push_str(&format!("SET LOCAL search_path TO {list}; "));
                    statements += 1;
                }
                continue;
            }
            // Names are AppSession::REPORTED's; the value a literal.
            guarded.push_str(&format!(
                "SET LOCAL {} TO '{}'; ",
                serve::quote(name),
                value.replace('\'', "''")
            ));
            statements += 1;
        }
        (guarded, statements)
    }

    pub(super) async fn texts(&self, sql: String) -> Result<Vec<Option<String>>, RunError> {
        use sqlx::Row as _;
        let rows = self
            .rows(&sql)
            .await
            .map_err(|e| anyhow::anyhow!("evaluating {sql}: {e}"))?;
        rows.iter()
            .map(|r| {
                r.try_get::<Option<String>, _>(0)
                    .map_err(|e| RunError::Failed(anyhow::anyhow!("evaluating {sql}: {e}")))
            })
            .collect()
    }

    /// The row keys named. A key written as a UUID literal in one of
    /// the two forms PostgreSQL and the `uuid` crate read alike is read
    /// here; anything else is evaluated by PostgreSQL (a served read by
    /// its key saves a round trip; `bench proxy`'s served reads).
    pub(super) async fn keys(&self, keys: &Keys) -> Result<Vec<RowKey>, RunError> {
        let texts = match keys {
            Keys::One(e) => self.key(e).await?,
            Keys::List(list) => {
                let mut all = Vec::new();
                for e in list {
                    all.extend(self.key(e).await?);
                }
                all
            }
            Keys::Array(e) => {
                self.texts(format!("SELECT k::text FROM unnest(({e})::uuid[]) AS k"))
                    .await?
            }
        };
        let mut out: Vec<RowKey> = Vec::new();
        for text in texts.into_iter().flatten() {
            let uuid: uuid::Uuid = text.parse().map_err(|e| anyhow::anyhow!("{text}: {e}"))?;
            let key = RowKey::from(uuid);
            if !out.contains(&key) {
                out.push(key);
            }
        }
        Ok(out)
    }

    /// One key expression's value as text (`None`: NULL).
    async fn key(&self, e: &Expr) -> Result<Vec<Option<String>>, RunError> {
        match literal_uuid(e) {
            Some(uuid) => Ok(vec![Some(uuid.to_string())]),
            None => self.texts(format!("SELECT ({e})::uuid::text")).await,
        }
    }

    /// One value of `from`'s field, as the cells hold it.
    pub(super) async fn field_value(
        &self,
        column: &ColumnLayout,
        field: &str,
        e: &Expr,
    ) -> Result<Value, RunError> {
        let f = column
            .field(field)
            .ok_or_else(|| anyhow::anyhow!("column {} has no field {field}", column.name))?;
        // Evaluated once (see `write::columns`' `read`).
        let read = f.conversion.read_expr("v");
        let text = self
            .texts(format!(
                "SELECT {read} FROM (SELECT ({e})::{} AS v) AS once",
                f.sql_type
            ))
            .await?
            .pop()
            .flatten();
        Ok(f.render(text).map_err(|e| anyhow::anyhow!(e))?)
    }

    /// The values of an array expression, as the cells hold the field.
    pub(super) async fn field_values(
        &self,
        column: &ColumnLayout,
        field: &str,
        e: &Expr,
    ) -> Result<Vec<Value>, RunError> {
        let f = column
            .field(field)
            .ok_or_else(|| anyhow::anyhow!("column {} has no field {field}", column.name))?;
        let read = f.conversion.read_expr("v");
        let texts = self
            .texts(format!(
                "SELECT {read} FROM unnest(({e})::{}[]) AS v",
                f.sql_type
            ))
            .await?;
        texts
            .iter()
            .map(|t| {
                f.conversion
                    .render(t.as_deref())
                    .map_err(|e| RunError::Failed(anyhow::anyhow!(e)))
            })
            .collect()
    }

    pub(super) async fn count(&self, e: &Expr) -> Result<usize, RunError> {
        let text = self
            .texts(format!("SELECT ({e})::bigint::text"))
            .await?
            .pop()
            .flatten();
        text.and_then(|t| t.parse().ok())
            .ok_or_else(|| untranslatable(format!("{e} is not a row count")))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn expr(sql: &str) -> Expr {
        Parser::new(&PostgreSqlDialect {})
            .try_with_sql(sql)
            .unwrap()
            .parse_expr()
            .unwrap()
    }

    #[test]
    fn only_the_uuid_forms_postgresql_reads_alike_are_read_without_it() {
        let uuid: uuid::Uuid = "a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11".parse().unwrap();
        for read in [
            "'a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11'",
            "'A0EEBC99-9C0B-4EF8-BB6D-6BB9BD380A11'",
            "'a0eebc999c0b4ef8bb6d6bb9bd380a11'",
            "'a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11'::uuid",
            "('a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11')",
        ] {
            assert_eq!(literal_uuid(&expr(read)), Some(uuid), "{read}");
        }
        for left in [
            "'{a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11}'",
            "'urn:uuid:a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11'",
            "' a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11'",
            "'a0eebc99-9c0b4ef8-bb6d6bb9-bd380a11'",
            "'a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a1g'",
            "'a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11'::text",
            "lower('a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11')",
            "42",
        ] {
            assert_eq!(literal_uuid(&expr(left)), None, "{left}");
        }
    }
}
