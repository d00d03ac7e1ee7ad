//! `mezzanine capture install|uninstall`: the triggers that make
//! PostgreSQL record every change to the layout's tables.
//!
//! Each table of the layout gets one `AFTER INSERT OR UPDATE OR DELETE`
//! row trigger and one `AFTER TRUNCATE` statement trigger. What they
//! record in `mezzanine.capture_queue`, in the same transaction as the
//! change:
//!
//! - the parent table: per row column whose version, fields or row key
//!   changed, the parent id and row key (`w`); a deleted parent, or a
//!   parent whose row key changed, as the deletion of its old row key
//!   (`d`);
//! - a child table: the (parent id, ref key) of each child row inserted or
//!   whose fields changed (`w`), and of each one deleted or moved to
//!   another address (`d`);
//! - a truncated table (`t`).
//!
//! An update that changes no mapped field (an `updated_at`, a counter the
//! layout does not map) records nothing. The functions are generated from
//! the resolved layout, and skip a transaction that set
//! `mezzanine.capture = 'skip'` ([`legacy::store::CAPTURE_SETTING`]: the
//! facade's outbox already carries it).
//!
//! **Why row triggers, and plain ones.** Measured with `mezzanine bench
//! capture` on an app's mix of single-row writes, what a trigger costs is
//! almost all the queue row itself (heap, WAL, its primary key); the
//! first version, statement triggers with transition tables and one
//! set-based `INSERT ... SELECT` each, cost a write about 45% at
//! saturation against about 20% for these row triggers (transition tables
//! are built for every statement, and the set-based query is planned with
//! anti-joins even for one row). A bulk statement pays one small insert
//! per row either way. Values are compared natively, except floats and
//! `json` (as text: `-0` is not `0` in JSON, and `json` has no equality).
//!
//! **Privileges.** The capture functions are `SECURITY DEFINER`, owned by
//! the installer, so that the app's roles need no rights on schema
//! `mezzanine`. Instead of a per-call `SET search_path` (a measurable cost
//! on every write) every name they use is schema-qualified, types and
//! functions included, so that nothing the invoking role creates (in
//! `pg_temp` or elsewhere) can stand in for them.
//!
//! With `capture.bump_version`, the parent table also gets a `BEFORE
//! UPDATE` row trigger raising a row column's version by one when mapped
//! fields changed and the writer left the version as it was.
//!
//! Everything is installed in one transaction, under a short
//! `lock_timeout` that is retried ([`legacy::connection::ddl`]): the
//! triggers appear on every table at once or on none, and the app's
//! writes never queue long behind the DDL. `CREATE OR REPLACE` makes it
//! idempotent, and re-running it after a layout change brings the
//! functions up to date; each function's comment holds a fingerprint of
//! its text, which `capture status` compares with what the layout would
//! generate now.

use std::time::Duration;

use config::ColumnKind;
use legacy::conversion::Conversion;
use legacy::layout::{quote, ColumnLayout, Layout};
use legacy::store::CAPTURE_SETTING;
use sqlx::{PgPool, Row};

use crate::error::Error;

/// The row trigger capture puts on every app table of the layout.
pub const ROW_TRIGGER: &str = "mezzanine_capture";

/// The statement trigger recording a `TRUNCATE`.
pub const TRUNCATE_TRIGGER: &str = "mezzanine_capture_truncate";

/// The `BEFORE UPDATE` trigger of `capture.bump_version`.
pub const BUMP_TRIGGER: &str = "mezzanine_bump_version";

/// One app table of the layout and what capture puts on it.
#[derive(Clone, Debug)]
pub struct TablePlan {
    /// `schema.table`, for messages.
    pub name: String,
    /// Quoted and schema-qualified.
    pub table_sql: String,
    /// The triggers.
    triggers: Vec<TriggerPlan>,
}

#[derive(Clone, Debug)]
struct TriggerPlan {
    trigger: String,
    function: String,
    /// `CREATE OR REPLACE FUNCTION` (with its fingerprint comment) and
    /// `CREATE OR REPLACE TRIGGER`.
    sql: String,
    fingerprint: String,
}

/// What `capture install` puts on every table of `layout`.
pub fn plan(layout: &Layout, bump_version: bool) -> Vec<TablePlan> {
    let mut tables = vec![parent_plan(layout, bump_version)];
    // A child table may carry several layout columns.
    let mut children: Vec<(&str, Vec<&ColumnLayout>)> = Vec::new();
    for column in layout
        .columns
        .iter()
        .filter(|c| c.kind == ColumnKind::Child)
    {
        match children.iter_mut().find(|(t, _)| *t == column.table_sql()) {
            Some((_, columns)) => columns.push(column),
            None => children.push((column.table_sql(), vec![column])),
        }
    }
    for (_, columns) in children {
        tables.push(child_plan(layout, &columns));
    }
    tables
}

/// A function's name: its kind, a hash of the table it belongs to (names
/// of any length fit PostgreSQL's 63 bytes), and what it handles.
fn function_name(kind: &str, table_sql: &str, what: &str) -> String {
    format!(
        "mezzanine.{}",
        quote(&format!(
            "{kind}_{:016x}_{what}",
            schemaless::routing::fnv1a64(table_sql.as_bytes())
        ))
    )
}

/// The value of a field as compared to tell whether it changed: natively,
/// but floats and `json` as text.
fn compared(record: &str, column: &str, conversion: Option<Conversion>) -> String {
    match conversion {
        Some(Conversion::Float4 | Conversion::Float8 | Conversion::Json) => {
            format!("{record}.{column}::pg_catalog.text")
        }
        _ => format!("{record}.{column}"),
    }
}

/// `ROW(NEW.a, …) IS DISTINCT FROM ROW(OLD.a, …)` over `columns` (quoted
/// name and conversion; key columns have none).
fn changed(columns: &[(String, Option<Conversion>)]) -> String {
    let side = |record: &str| {
        columns
            .iter()
            .map(|(c, conversion)| compared(record, c, *conversion))
            .collect::<Vec<_>>()
            .join(", ")
    };
    format!("ROW({}) IS DISTINCT FROM ROW({})", side("NEW"), side("OLD"))
}

fn fields(column: &ColumnLayout) -> impl Iterator<Item = (String, Option<Conversion>)> + '_ {
    column
        .fields
        .iter()
        .map(|f| (quote(&f.sql), Some(f.conversion)))
}

fn key(column: &str) -> (String, Option<Conversion>) {
    (column.to_string(), None)
}

/// One queue row: `column` is a quoted literal or `NULL`.
fn enqueue(column: &str, parent_id: &str, row_key: &str, ref_key: &str, op: char) -> String {
    format!(
        "INSERT INTO mezzanine.capture_queue (column_name, parent_id, row_key, ref_key, op)
      VALUES ({column}, {parent_id}::pg_catalog.int8, {row_key}, {ref_key}::pg_catalog.int8, '{op}');"
    )
}

/// A capture function's body: skip a transaction the facade marked, else
/// `record`.
fn capture_body(record: &str, returns: &str) -> String {
    format!(
        "BEGIN
  IF pg_catalog.current_setting('{CAPTURE_SETTING}', true) OPERATOR(pg_catalog.=) 'skip' THEN RETURN {returns}; END IF;
{record}
  RETURN {returns};
END"
    )
}

/// A trigger on `table_sql` firing `events` (`AFTER INSERT OR …`) `each`
/// (`ROW` or `STATEMENT`), and its function.
fn trigger_plan(
    table_sql: &str,
    trigger: &str,
    function: String,
    body: String,
    (events, each): (&str, &str),
) -> TriggerPlan {
    let fingerprint = format!(
        "{:016x}",
        schemaless::routing::fnv1a64(format!("{table_sql}\n{events} {each}\n{body}").as_bytes())
    );
    // The bump trigger only changes NEW: it runs as the writer.
    let security = if trigger == BUMP_TRIGGER {
        ""
    } else {
        " SECURITY DEFINER"
    };
    let sql = format!(
        "CREATE OR REPLACE FUNCTION {function}() RETURNS trigger LANGUAGE plpgsql{security} AS $mezzanine$
{body}
$mezzanine$;
COMMENT ON FUNCTION {function}() IS 'mezzanine capture {fingerprint}';
CREATE OR REPLACE TRIGGER {trigger} {events} ON {table_sql} FOR EACH {each} EXECUTE FUNCTION {function}();",
        trigger = quote(trigger),
    );
    TriggerPlan {
        trigger: trigger.to_string(),
        function,
        sql,
        fingerprint,
    }
}

/// The row trigger and the truncate trigger of a table.
fn capture_triggers(table_sql: &str, record: &str, truncated: &str) -> Vec<TriggerPlan> {
    vec![
        trigger_plan(
            table_sql,
            ROW_TRIGGER,
            function_name("capture", table_sql, "row"),
            capture_body(record, "NULL"),
            ("AFTER INSERT OR UPDATE OR DELETE", "ROW"),
        ),
        trigger_plan(
            table_sql,
            TRUNCATE_TRIGGER,
            function_name("capture", table_sql, "truncate"),
            capture_body(truncated, "NULL"),
            ("AFTER TRUNCATE", "STATEMENT"),
        ),
    ]
}

fn parent_plan(layout: &Layout, bump_version: bool) -> TablePlan {
    let (id, uuid) = (layout.id_sql(), layout.uuid_sql());
    let row_columns: Vec<&ColumnLayout> = layout
        .columns
        .iter()
        .filter(|c| c.kind == ColumnKind::Row)
        .collect();
    let old_row_key_gone = enqueue(
        "NULL",
        &format!("OLD.{id}"),
        &format!("OLD.{uuid}"),
        "NULL",
        'd',
    );
    let mut record = format!(
        "  IF TG_OP OPERATOR(pg_catalog.=) 'DELETE' THEN
    IF OLD.{uuid} IS NOT NULL THEN
      {old_row_key_gone}
    END IF;
    RETURN NULL;
  END IF;
  IF TG_OP OPERATOR(pg_catalog.=) 'UPDATE' AND OLD.{uuid} IS NOT NULL AND OLD.{uuid} IS DISTINCT FROM NEW.{uuid} THEN
    {old_row_key_gone}
  END IF;"
    );
    for column in &row_columns {
        let v = column.ref_key_sql();
        let mut compared = vec![key(uuid), key(id), key(v)];
        compared.extend(fields(column));
        record.push_str(&format!(
            "
  IF NEW.{v} IS NOT NULL AND (TG_OP OPERATOR(pg_catalog.=) 'INSERT' OR {changed}) THEN
    {write}
  END IF;",
            changed = changed(&compared),
            write = enqueue(
                &format!("'{}'", column.name.as_str()),
                &format!("NEW.{id}"),
                &format!("NEW.{uuid}"),
                "NULL",
                'w'
            ),
        ));
    }
    let truncated = format!("  {}", enqueue("NULL", "NULL", "NULL", "NULL", 't'));
    let table_sql = layout.table_sql();
    let mut triggers = capture_triggers(table_sql, &record, &truncated);
    if bump_version && !row_columns.is_empty() {
        triggers.push(trigger_plan(
            table_sql,
            BUMP_TRIGGER,
            function_name("bump", table_sql, "row"),
            bump_body(&row_columns),
            ("BEFORE UPDATE", "ROW"),
        ));
    }
    TablePlan {
        name: format!("{}.{}", layout.schema, layout.table),
        table_sql: table_sql.to_string(),
        triggers,
    }
}

/// `capture.bump_version`: per row column, a version left as it was while
/// mapped fields changed is raised by one.
fn bump_body(row_columns: &[&ColumnLayout]) -> String {
    let mut record = String::new();
    for column in row_columns {
        let v = column.ref_key_sql();
        let fields: Vec<_> = fields(column).collect();
        record.push_str(&format!(
            "  IF NEW.{v} IS NOT DISTINCT FROM OLD.{v} AND OLD.{v} IS NOT NULL AND {changed} THEN
    NEW.{v} := OLD.{v} OPERATOR(pg_catalog.+) 1;
  END IF;
",
            changed = changed(&fields),
        ));
    }
    capture_body(record.trim_end(), "NEW")
}

fn child_plan(layout: &Layout, columns: &[&ColumnLayout]) -> TablePlan {
    let first = columns[0];
    let table_sql = first.table_sql();
    let mut record = String::new();
    let mut truncated = String::new();
    for column in columns {
        let p = column.parent_sql().expect("a child has a parent key");
        let r = column.ref_key_sql();
        let name = format!("'{}'", column.name.as_str());
        let mut compared = vec![key(p), key(r)];
        compared.extend(fields(column));
        record.push_str(&format!(
            "  IF TG_OP OPERATOR(pg_catalog.<>) 'INSERT' AND OLD.{p} IS NOT NULL AND OLD.{r} IS NOT NULL
     AND (TG_OP OPERATOR(pg_catalog.=) 'DELETE' OR {moved}) THEN
    {gone}
  END IF;
  IF TG_OP OPERATOR(pg_catalog.<>) 'DELETE' AND NEW.{p} IS NOT NULL AND NEW.{r} IS NOT NULL
     AND (TG_OP OPERATOR(pg_catalog.=) 'INSERT' OR {changed}) THEN
    {write}
  END IF;
",
            moved = changed(&[key(p), key(r)]),
            gone = enqueue(&name, &format!("OLD.{p}"), "NULL", &format!("OLD.{r}"), 'd'),
            changed = changed(&compared),
            write = enqueue(&name, &format!("NEW.{p}"), "NULL", &format!("NEW.{r}"), 'w'),
        ));
        truncated.push_str(&format!(
            "  {}\n",
            enqueue(&name, "NULL", "NULL", "NULL", 't')
        ));
    }
    TablePlan {
        name: format!("{}.{}", layout.schema, first.table),
        table_sql: table_sql.to_string(),
        triggers: capture_triggers(table_sql, record.trim_end(), truncated.trim_end()),
    }
}

/// What `install` did.
#[derive(Clone, Debug, Default)]
pub struct Installed {
    /// `triggers` or `logical`.
    pub method: &'static str,
    /// `schema.table` of every table now captured.
    pub tables: Vec<String>,
    /// Triggers created or replaced (the version bump's included).
    pub triggers: usize,
    /// Whether the version bump is installed on the parent table.
    pub bump_version: bool,
}

impl TablePlan {
    /// The plan without the capture triggers (what the logical method
    /// keeps: the version bump, if asked).
    fn bump_only(&self) -> TablePlan {
        TablePlan {
            triggers: self
                .triggers
                .iter()
                .filter(|t| t.trigger == BUMP_TRIGGER)
                .cloned()
                .collect(),
            ..self.clone()
        }
    }
}

/// Installs capture on every table of `layout` by `settings.method` (see
/// the module docs, and [`super::logical`]), removing what the other
/// method installed. The role must own each table (or hold `TRIGGER` on
/// it) and may create in schema `mezzanine`; that is checked first, and a
/// refusal names the table and changes nothing.
pub async fn install(
    pool: &PgPool,
    layout: &Layout,
    settings: &config::Capture,
) -> Result<Installed, Error> {
    let lock_timeout = Duration::from_millis(settings.lock_timeout_ms);
    let mut tables = plan(layout, settings.bump_version);
    let logical = settings.method == config::CaptureMethod::Logical;
    if logical {
        tables = tables.iter().map(TablePlan::bump_only).collect();
        super::logical::check(pool, layout).await?;
    }
    check_privileges(pool, &tables).await?;
    let mut sql = String::new();
    let mut triggers = 0;
    for table in &tables {
        for trigger in &table.triggers {
            sql.push_str(&trigger.sql);
            sql.push('\n');
            triggers += 1;
        }
        // Triggers no longer wanted: the version bump turned off, the
        // capture triggers under the logical method.
        for unwanted in [ROW_TRIGGER, TRUNCATE_TRIGGER, BUMP_TRIGGER] {
            if !table.triggers.iter().any(|t| t.trigger == unwanted) {
                sql.push_str(&format!(
                    "DROP TRIGGER IF EXISTS {} ON {};\n",
                    quote(unwanted),
                    table.table_sql
                ));
            }
        }
    }
    let names = if logical {
        super::logical::install(pool, layout, settings, &sql)
            .await
            .map_err(|e| match e {
                Error::Legacy(e) => Error::Capture(describe_ddl_error(&e, &tables)),
                other => other,
            })?
    } else {
        crate::schema::ensure(pool).await?;
        legacy::connection::ddl(pool, lock_timeout, &sql, "installing capture")
            .await
            .map_err(|e| Error::Capture(describe_ddl_error(&e, &tables)))?;
        super::logical::uninstall(pool, lock_timeout).await?;
        tables.iter().map(|t| t.name.clone()).collect()
    };
    Ok(Installed {
        method: settings.method.as_str(),
        tables: names,
        triggers,
        bump_version: tables[0].triggers.iter().any(|t| t.trigger == BUMP_TRIGGER),
    })
}

/// The role may put triggers on every table and create functions in
/// schema `mezzanine`; otherwise an error naming what is missing.
async fn check_privileges(pool: &PgPool, tables: &[TablePlan]) -> Result<(), Error> {
    let context = "checking the privileges capture needs";
    let user: String = sqlx::query_scalar("SELECT current_user::text")
        .fetch_one(pool)
        .await
        .map_err(Error::postgres(context))?;
    // Tables that get no trigger (logical capture without the version
    // bump) are checked by the logical method, which needs their owner.
    for table in tables.iter().filter(|t| !t.triggers.is_empty()) {
        let allowed: bool =
            sqlx::query_scalar("SELECT has_table_privilege($1::regclass, 'TRIGGER')")
                .bind(&table.table_sql)
                .fetch_one(pool)
                .await
                .map_err(Error::postgres(context))?;
        if !allowed {
            return Err(Error::Capture(format!(
                "role {user} may not create triggers on {}: it must own the table or hold TRIGGER on it (GRANT TRIGGER ON {} TO {}); nothing was installed",
                table.name,
                table.table_sql,
                quote(&user)
            )));
        }
    }
    // The queue and the functions live in schema mezzanine: the role
    // creates them there, or the schema itself.
    let (exists, allowed): (bool, bool) = sqlx::query_as(
        "SELECT to_regnamespace('mezzanine') IS NOT NULL,
                CASE WHEN to_regnamespace('mezzanine') IS NOT NULL
                     THEN has_schema_privilege('mezzanine', 'CREATE')
                     ELSE has_database_privilege(current_database(), 'CREATE') END",
    )
    .fetch_one(pool)
    .await
    .map_err(Error::postgres(context))?;
    if !allowed {
        return Err(Error::Capture(if exists {
            format!(
                "role {user} may not create functions in schema mezzanine (GRANT CREATE ON SCHEMA mezzanine TO {}); nothing was installed",
                quote(&user)
            )
        } else {
            format!(
                "role {user} may not create schema mezzanine in this database (GRANT CREATE ON DATABASE ... TO {}, or install as the tables' owner); nothing was installed",
                quote(&user)
            )
        }));
    }
    Ok(())
}

/// A failed install's error, naming the table where PostgreSQL says which.
fn describe_ddl_error(e: &legacy::Error, tables: &[TablePlan]) -> String {
    let text = e.to_string();
    match tables
        .iter()
        .find(|t| text.contains(&t.name) || text.contains(t.name.rsplit('.').next().unwrap_or("")))
    {
        Some(t) => format!("on {}: {text}; nothing was installed", t.name),
        None => format!("{text}; nothing was installed"),
    }
}

/// What `uninstall` removed.
#[derive(Clone, Debug, Default)]
pub struct Uninstalled {
    /// `schema.table` of every table that had capture triggers.
    pub tables: Vec<String>,
    /// Triggers dropped.
    pub triggers: usize,
    /// Functions dropped.
    pub functions: usize,
    /// Whether logical capture's slot, publication or replica identities
    /// were there (and are gone).
    pub logical: bool,
}

/// Removes every capture trigger and function, from whatever tables carry
/// them (the catalog says which, so a table since left out of the layout
/// is cleaned too), in one transaction under the same short, retried lock
/// timeout as `install`; and logical capture's slot and publication, and
/// the replica identities it changed. The queue and what is parked stay:
/// the relay still delivers what was queued before.
pub async fn uninstall(pool: &PgPool, lock_timeout: Duration) -> Result<Uninstalled, Error> {
    let installed = installed_triggers(pool).await?;
    let functions: Vec<String> = sqlx::query_scalar(
        "SELECT format('%I.%I()', n.nspname, p.proname) FROM pg_proc p
         JOIN pg_namespace n ON n.oid = p.pronamespace
         WHERE n.nspname = 'mezzanine' AND (p.proname LIKE 'capture\\_%' OR p.proname LIKE 'bump\\_%')",
    )
    .fetch_all(pool)
    .await
    .map_err(Error::postgres("listing capture's functions"))?;
    let mut sql = String::new();
    let mut tables: Vec<String> = Vec::new();
    for t in &installed {
        sql.push_str(&format!(
            "DROP TRIGGER IF EXISTS {} ON {};\n",
            quote(&t.trigger),
            t.table_sql
        ));
        if !tables.contains(&t.table) {
            tables.push(t.table.clone());
        }
    }
    for f in &functions {
        sql.push_str(&format!("DROP FUNCTION IF EXISTS {f};\n"));
    }
    if !sql.is_empty() {
        legacy::connection::ddl(pool, lock_timeout, &sql, "uninstalling capture").await?;
    }
    let logical = super::logical::uninstall(pool, lock_timeout).await?;
    Ok(Uninstalled {
        tables,
        triggers: installed.len(),
        functions: functions.len(),
        logical,
    })
}

/// One capture trigger found in the catalog.
#[derive(Clone, Debug)]
pub struct InstalledTrigger {
    /// `schema.table`.
    pub table: String,
    /// The table, quoted and qualified (`"public"."trips"`).
    pub table_sql: String,
    /// The trigger's name.
    pub trigger: String,
    /// Whether it is enabled (`ALTER TABLE ... DISABLE TRIGGER` turns it
    /// off without removing it).
    pub enabled: bool,
    /// The fingerprint in its function's comment.
    pub fingerprint: Option<String>,
}

/// Every capture trigger in the database.
pub async fn installed_triggers(pool: &PgPool) -> Result<Vec<InstalledTrigger>, Error> {
    let rows = sqlx::query(
        "SELECT n.nspname::text, c.relname::text, format('%I.%I', n.nspname, c.relname), t.tgname::text,
                t.tgenabled <> 'D', obj_description(t.tgfoid, 'pg_proc')
         FROM pg_trigger t
         JOIN pg_class c ON c.oid = t.tgrelid
         JOIN pg_namespace n ON n.oid = c.relnamespace
         WHERE NOT t.tgisinternal AND (t.tgname LIKE 'mezzanine\\_capture%' OR t.tgname = $1)
         ORDER BY 1, 2, 4",
    )
    .bind(BUMP_TRIGGER)
    .fetch_all(pool)
    .await
    .map_err(Error::postgres("reading capture's triggers"))?;
    let context = "reading capture's triggers";
    rows.iter()
        .map(|row| {
            let schema: String = row.try_get(0).map_err(Error::postgres(context))?;
            let table: String = row.try_get(1).map_err(Error::postgres(context))?;
            let comment: Option<String> = row.try_get(5).map_err(Error::postgres(context))?;
            Ok(InstalledTrigger {
                table: format!("{schema}.{table}"),
                table_sql: row.try_get(2).map_err(Error::postgres(context))?,
                trigger: row.try_get(3).map_err(Error::postgres(context))?,
                enabled: row.try_get(4).map_err(Error::postgres(context))?,
                fingerprint: comment
                    .and_then(|c| c.strip_prefix("mezzanine capture ").map(str::to_string)),
            })
        })
        .collect()
}

/// How one table of the layout is covered.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct Coverage {
    /// `schema.table`.
    pub table: String,
    /// `installed` (every trigger there, enabled and current), `missing`
    /// (none), `partial` (some missing or disabled) or `stale` (installed
    /// for another layout or setting: run `capture install` again).
    pub state: String,
    /// Triggers capture wants there and does not find, or finds disabled
    /// or out of date.
    pub problems: Vec<String>,
}

impl Coverage {
    /// Whether capture is complete on the table.
    pub fn installed(&self) -> bool {
        self.state == "installed"
    }
}

/// Per table of `layout`, whether capture is installed as `install` would
/// install it now, by `settings.method`.
pub async fn coverage(
    pool: &PgPool,
    layout: &Layout,
    settings: &config::Capture,
) -> Result<Vec<Coverage>, Error> {
    let mut tables = plan(layout, settings.bump_version);
    if settings.method == config::CaptureMethod::Logical {
        tables = tables.iter().map(TablePlan::bump_only).collect();
        let mut logical = super::logical::coverage(pool, layout).await?;
        // The version bump is a trigger either way.
        for (table, triggers) in logical
            .iter_mut()
            .zip(trigger_coverage(pool, &tables).await?)
        {
            if !triggers.problems.is_empty() {
                table.problems.extend(triggers.problems);
                if table.state == "installed" {
                    table.state = "partial".into();
                }
            }
        }
        return Ok(logical);
    }
    trigger_coverage(pool, &tables).await
}

/// Per table, whether the triggers of `tables` are there, enabled and
/// current.
async fn trigger_coverage(pool: &PgPool, tables: &[TablePlan]) -> Result<Vec<Coverage>, Error> {
    let found = installed_triggers(pool).await?;
    Ok(tables
        .iter()
        .map(|table| {
            let mut missing = 0;
            let mut problems = Vec::new();
            for want in &table.triggers {
                match found
                    .iter()
                    .find(|f| f.table == table.name && f.trigger == want.trigger)
                {
                    None => {
                        missing += 1;
                        problems.push(format!("{} is missing", want.trigger));
                    }
                    Some(f) if !f.enabled => problems.push(format!("{} is disabled", want.trigger)),
                    Some(f) if f.fingerprint.as_deref() != Some(want.fingerprint.as_str()) => {
                        problems.push(format!(
                            "{} is out of date (function {})",
                            want.trigger, want.function
                        ))
                    }
                    Some(_) => {}
                }
            }
            let state = if problems.is_empty() {
                "installed"
            } else if missing == table.triggers.len() {
                "missing"
            } else if missing == 0 && problems.iter().all(|p| p.contains("out of date")) {
                "stale"
            } else {
                "partial"
            };
            Coverage {
                table: table.name.clone(),
                state: state.into(),
                problems,
            }
        })
        .collect())
}
