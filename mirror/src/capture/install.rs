//! `mezzanine capture install|uninstall`: the triggers that make
//! PostgreSQL record every change to the layout's tables.
//!
//! Each table of the layout gets `AFTER INSERT`, `UPDATE` and `DELETE`
//! triggers, one statement each (with transition tables, so a bulk
//! statement costs one `INSERT ... SELECT` into the queue, not one per
//! row), and an `AFTER TRUNCATE` trigger. What they record, in the same
//! transaction as the change:
//!
//! - the parent table: per row column whose version or fields changed, the
//!   parent id and row key (`w`); a deleted parent, or a parent whose row
//!   key changed, as the deletion of its old row key (`d`);
//! - a child table: the (parent id, ref key) of each child row inserted or
//!   whose fields changed (`w`), and of each one deleted or moved to
//!   another address (`d`);
//! - a truncated table (`t`).
//!
//! An update that changes no mapped field (an `updated_at`, a counter the
//! layout does not map) records nothing. The trigger functions are
//! generated from the resolved layout, `SECURITY DEFINER` (owned by the
//! installer, so the app's roles need no rights on schema `mezzanine`) with
//! a fixed `search_path`, and skip a transaction that set
//! `mezzanine.capture = 'skip'` ([`legacy::store::CAPTURE_SETTING`]: the
//! facade's outbox already carries it).
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
use legacy::layout::{quote, ColumnLayout, Layout};
use legacy::store::CAPTURE_SETTING;
use sqlx::{PgPool, Row};

use crate::error::Error;

/// The prefix of every trigger capture puts on an app table.
pub const TRIGGER_PREFIX: &str = "mezzanine_capture_";

/// The `BEFORE UPDATE` trigger of `capture.bump_version`.
pub const BUMP_TRIGGER: &str = "mezzanine_bump_version";

/// The events captured, with the trigger suffix and transition tables.
const EVENTS: [Event; 4] = [Event::Insert, Event::Update, Event::Delete, Event::Truncate];

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Event {
    Insert,
    Update,
    Delete,
    Truncate,
}

impl Event {
    fn name(self) -> &'static str {
        match self {
            Event::Insert => "insert",
            Event::Update => "update",
            Event::Delete => "delete",
            Event::Truncate => "truncate",
        }
    }

    fn referencing(self) -> &'static str {
        match self {
            Event::Insert => "REFERENCING NEW TABLE AS new_rows FOR EACH STATEMENT",
            Event::Update => {
                "REFERENCING OLD TABLE AS old_rows NEW TABLE AS new_rows FOR EACH STATEMENT"
            }
            Event::Delete => "REFERENCING OLD TABLE AS old_rows FOR EACH STATEMENT",
            Event::Truncate => "FOR EACH STATEMENT",
        }
    }
}

/// One app table of the layout and what capture puts on it.
#[derive(Clone, Debug)]
pub struct TablePlan {
    /// `schema.table`, for messages.
    pub name: String,
    /// Quoted and schema-qualified.
    pub table_sql: String,
    /// The triggers: (trigger name, function name, `CREATE` statements).
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

impl TablePlan {
    /// The names of the triggers capture wants on this table.
    pub fn trigger_names(&self) -> impl Iterator<Item = &str> {
        self.triggers.iter().map(|t| t.trigger.as_str())
    }
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

/// A function's name: its kind and event, and a hash of the table it
/// belongs to (names of any length fit PostgreSQL's 63 bytes).
fn function_name(kind: &str, table_sql: &str, event: &str) -> String {
    format!(
        "mezzanine.{}",
        quote(&format!(
            "{kind}_{:016x}_{event}",
            schemaless::routing::fnv1a64(table_sql.as_bytes())
        ))
    )
}

/// `ROW(p.a::text, p.b::text, …)`: the values compared to tell whether a
/// mapped field changed. Text, because not every type has an equality
/// (`json` has none) and the text of a value is what it stores.
fn row_text(alias: &str, columns: &[String]) -> String {
    let parts: Vec<String> = columns
        .iter()
        .map(|c| format!("{alias}.{c}::text"))
        .collect();
    format!("ROW({})", parts.join(", "))
}

fn field_columns(column: &ColumnLayout) -> Vec<String> {
    column.fields.iter().map(|f| quote(&f.sql)).collect()
}

/// The body of a capture function: skip a transaction the facade marked,
/// else record `insert` (an `INSERT ... SELECT` into the queue).
fn capture_body(insert: &str) -> String {
    format!(
        "BEGIN
  IF current_setting('{CAPTURE_SETTING}', true) = 'skip' THEN RETURN NULL; END IF;
  {insert};
  RETURN NULL;
END"
    )
}

const QUEUE: &str =
    "INSERT INTO mezzanine.capture_queue (column_name, parent_id, row_key, ref_key, op)";

fn trigger_plan(
    table_sql: &str,
    kind: &str,
    event: Event,
    body: String,
    timing: &str,
) -> TriggerPlan {
    let function = function_name(kind, table_sql, event.name());
    let trigger = if kind == "bump" {
        BUMP_TRIGGER.to_string()
    } else {
        format!("{TRIGGER_PREFIX}{}", event.name())
    };
    let fingerprint = format!(
        "{:016x}",
        schemaless::routing::fnv1a64(format!("{table_sql}\n{timing}\n{body}").as_bytes())
    );
    let security = if kind == "bump" {
        ""
    } else {
        " SECURITY DEFINER"
    };
    let sql = format!(
        "CREATE OR REPLACE FUNCTION {function}() RETURNS trigger LANGUAGE plpgsql{security}
  SET search_path = pg_catalog, pg_temp AS $mezzanine$
{body}
$mezzanine$;
COMMENT ON FUNCTION {function}() IS 'mezzanine capture {fingerprint}';
CREATE OR REPLACE TRIGGER {trigger} {timing} ON {table_sql} {referencing} EXECUTE FUNCTION {function}();",
        trigger = quote(&trigger),
        referencing = if kind == "bump" {
            "FOR EACH ROW"
        } else {
            event.referencing()
        },
    );
    TriggerPlan {
        trigger,
        function,
        sql,
        fingerprint,
    }
}

fn parent_plan(layout: &Layout, bump_version: bool) -> TablePlan {
    let (id, uuid) = (layout.id_sql(), layout.uuid_sql());
    let row_columns: Vec<&ColumnLayout> = layout
        .columns
        .iter()
        .filter(|c| c.kind == ColumnKind::Row)
        .collect();
    let literal = |c: &ColumnLayout| format!("'{}'", c.name.as_str());
    // Per row column, a write of every new row with a version.
    let inserted: Vec<String> = row_columns
        .iter()
        .map(|c| {
            format!(
                "SELECT {name}, n.{id}::int8, n.{uuid}, NULL::int8, 'w' FROM new_rows n WHERE n.{v} IS NOT NULL",
                name = literal(c),
                v = c.ref_key_sql()
            )
        })
        .collect();
    // Per row column, a write of every row whose version, fields or row
    // key changed; and the deletion of a row key no row has any more.
    let mut updated: Vec<String> = row_columns
        .iter()
        .map(|c| {
            let mut compared = vec![uuid.to_string(), c.ref_key_sql().to_string()];
            compared.extend(field_columns(c));
            format!(
                "SELECT {name}, n.{id}::int8, n.{uuid}, NULL::int8, 'w' FROM new_rows n LEFT JOIN old_rows o ON o.{id} = n.{id}
    WHERE n.{v} IS NOT NULL AND (o.{id} IS NULL OR {new} IS DISTINCT FROM {old})",
                name = literal(c),
                v = c.ref_key_sql(),
                new = row_text("n", &compared),
                old = row_text("o", &compared),
            )
        })
        .collect();
    updated.push(format!(
        "SELECT NULL, o.{id}::int8, o.{uuid}, NULL::int8, 'd' FROM old_rows o
    WHERE o.{uuid} IS NOT NULL AND NOT EXISTS (SELECT 1 FROM new_rows n WHERE n.{uuid} = o.{uuid})"
    ));
    let deleted = format!(
        "SELECT NULL, o.{id}::int8, o.{uuid}, NULL::int8, 'd' FROM old_rows o WHERE o.{uuid} IS NOT NULL"
    );
    let truncated = "SELECT NULL, NULL::int8, NULL::uuid, NULL::int8, 't'".to_string();

    let table_sql = layout.table_sql();
    let mut triggers = Vec::new();
    for event in EVENTS {
        let selects = match event {
            Event::Insert if inserted.is_empty() => continue,
            Event::Insert => inserted.join("\n  UNION ALL "),
            Event::Update => updated.join("\n  UNION ALL "),
            Event::Delete => deleted.clone(),
            Event::Truncate => truncated.clone(),
        };
        let timing = format!("AFTER {}", event.name().to_uppercase());
        triggers.push(trigger_plan(
            table_sql,
            "capture",
            event,
            capture_body(&format!("{QUEUE}\n  {selects}")),
            &timing,
        ));
    }
    if bump_version && !row_columns.is_empty() {
        triggers.push(trigger_plan(
            table_sql,
            "bump",
            Event::Update,
            bump_body(&row_columns),
            "BEFORE UPDATE",
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
    let mut body = format!(
        "BEGIN
  IF current_setting('{CAPTURE_SETTING}', true) = 'skip' THEN RETURN NEW; END IF;"
    );
    for column in row_columns {
        let v = column.ref_key_sql();
        let fields = field_columns(column);
        body.push_str(&format!(
            "
  IF NEW.{v} IS NOT DISTINCT FROM OLD.{v} AND OLD.{v} IS NOT NULL
     AND {new} IS DISTINCT FROM {old} THEN
    NEW.{v} := OLD.{v} + 1;
  END IF;",
            new = row_text("NEW", &fields),
            old = row_text("OLD", &fields),
        ));
    }
    body.push_str("\n  RETURN NEW;\nEND");
    body
}

fn child_plan(layout: &Layout, columns: &[&ColumnLayout]) -> TablePlan {
    let first = columns[0];
    let table_sql = first.table_sql();
    let per_column = |make: &dyn Fn(&ColumnLayout, &str, &str) -> String| -> String {
        columns
            .iter()
            .map(|c| {
                make(
                    c,
                    c.parent_sql().expect("a child has a parent key"),
                    c.ref_key_sql(),
                )
            })
            .collect::<Vec<_>>()
            .join("\n  UNION ALL ")
    };
    let name = |c: &ColumnLayout| format!("'{}'", c.name.as_str());
    let inserted = per_column(&|c, p, r| {
        format!(
            "SELECT {}, n.{p}::int8, NULL::uuid, n.{r}::int8, 'w' FROM new_rows n
    WHERE n.{p} IS NOT NULL AND n.{r} IS NOT NULL",
            name(c)
        )
    });
    let updated = per_column(&|c, p, r| {
        let fields = field_columns(c);
        format!(
            "SELECT {n}, n.{p}::int8, NULL::uuid, n.{r}::int8, 'w' FROM new_rows n
    LEFT JOIN old_rows o ON o.{p} = n.{p} AND o.{r} = n.{r}
    WHERE n.{p} IS NOT NULL AND n.{r} IS NOT NULL AND (o.{p} IS NULL OR {new} IS DISTINCT FROM {old})
  UNION ALL SELECT {n}, o.{p}::int8, NULL::uuid, o.{r}::int8, 'd' FROM old_rows o
    WHERE o.{p} IS NOT NULL AND o.{r} IS NOT NULL
      AND NOT EXISTS (SELECT 1 FROM new_rows n WHERE n.{p} = o.{p} AND n.{r} = o.{r})",
            n = name(c),
            new = row_text("n", &fields),
            old = row_text("o", &fields),
        )
    });
    let deleted = per_column(&|c, p, r| {
        format!(
            "SELECT {}, o.{p}::int8, NULL::uuid, o.{r}::int8, 'd' FROM old_rows o
    WHERE o.{p} IS NOT NULL AND o.{r} IS NOT NULL",
            name(c)
        )
    });
    let truncated = per_column(&|c, _, _| {
        format!(
            "SELECT {}, NULL::int8, NULL::uuid, NULL::int8, 't'",
            name(c)
        )
    });
    let triggers = EVENTS
        .iter()
        .map(|&event| {
            let selects = match event {
                Event::Insert => &inserted,
                Event::Update => &updated,
                Event::Delete => &deleted,
                Event::Truncate => &truncated,
            };
            trigger_plan(
                table_sql,
                "capture",
                event,
                capture_body(&format!("{QUEUE}\n  {selects}")),
                &format!("AFTER {}", event.name().to_uppercase()),
            )
        })
        .collect();
    TablePlan {
        name: format!("{}.{}", layout.schema, first.table),
        table_sql: table_sql.to_string(),
        triggers,
    }
}

/// What `install` did.
#[derive(Clone, Debug, Default)]
pub struct Installed {
    /// `schema.table` of every table now captured.
    pub tables: Vec<String>,
    /// Triggers created or replaced.
    pub triggers: usize,
    /// Whether the version bump is installed on the parent table.
    pub bump_version: bool,
}

/// Installs capture on every table of `layout` (see the module docs).
/// The role must own each table (or hold `TRIGGER` on it) and may create
/// in schema `mezzanine`; that is checked first, and a refusal names the
/// table and changes nothing.
pub async fn install(
    pool: &PgPool,
    layout: &Layout,
    settings: &config::Capture,
) -> Result<Installed, Error> {
    let tables = plan(layout, settings.bump_version);
    check_privileges(pool, &tables).await?;
    crate::schema::ensure(pool).await?;
    let mut sql = String::new();
    let mut triggers = 0;
    for table in &tables {
        for trigger in &table.triggers {
            sql.push_str(&trigger.sql);
            sql.push('\n');
            triggers += 1;
        }
    }
    // Triggers no longer wanted: the version bump when it was turned off.
    let parent = &tables[0];
    if !parent.triggers.iter().any(|t| t.trigger == BUMP_TRIGGER) {
        sql.push_str(&format!(
            "DROP TRIGGER IF EXISTS {} ON {};\n",
            quote(BUMP_TRIGGER),
            parent.table_sql
        ));
    }
    legacy::connection::ddl(
        pool,
        Duration::from_millis(settings.lock_timeout_ms),
        &sql,
        "installing capture",
    )
    .await
    .map_err(|e| Error::Capture(describe_ddl_error(&e, &tables)))?;
    Ok(Installed {
        tables: tables.iter().map(|t| t.name.clone()).collect(),
        triggers,
        bump_version: parent.triggers.iter().any(|t| t.trigger == BUMP_TRIGGER),
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
    for table in tables {
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
}

/// Removes every capture trigger and function, from whatever tables carry
/// them (the catalog says which, so a table since left out of the layout
/// is cleaned too), in one transaction under the same short, retried lock
/// timeout as `install`. The queue and what is parked stay: the relay
/// still delivers what was captured before.
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
    Ok(Uninstalled {
        tables,
        triggers: installed.len(),
        functions: functions.len(),
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
         WHERE NOT t.tgisinternal AND (t.tgname LIKE 'mezzanine\\_capture\\_%' OR t.tgname = $1)
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
/// install it now.
pub async fn coverage(
    pool: &PgPool,
    layout: &Layout,
    settings: &config::Capture,
) -> Result<Vec<Coverage>, Error> {
    let found = installed_triggers(pool).await?;
    Ok(plan(layout, settings.bump_version)
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
