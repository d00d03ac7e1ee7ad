//! `mezzanine capture install|uninstall`, and whether capture is installed
//! ([`coverage`]), for either method: the triggers of [`super::triggers`]
//! or the slot and publication of [`super::logical`].
//!
//! Everything is installed in one transaction, under a short
//! `lock_timeout` that is retried ([`legacy::connection::ddl`]): the
//! triggers appear on every table at once or on none, and the app's
//! writes never queue long behind the DDL. `CREATE OR REPLACE` makes it
//! idempotent, and re-running it after a layout change brings the
//! functions up to date; each function's comment holds a fingerprint of
//! its text, which [`coverage`] compares with what the layout would
//! generate now. Installing one method removes what the other installed.

use std::time::Duration;

use legacy::layout::{quote, Layout};
use sqlx::{PgPool, Row};

pub use super::triggers::{plan, TablePlan, BUMP_TRIGGER, ROW_TRIGGER, TRUNCATE_TRIGGER};
use crate::error::Error;

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
    let user: String = sqlx::query_scalar("/* mezzanine */ SELECT current_user::text")
        .fetch_one(pool)
        .await
        .map_err(Error::postgres(context))?;
    // Tables that get no trigger (logical capture without the version
    // bump) are checked by the logical method, which needs their owner.
    for table in tables.iter().filter(|t| !t.triggers.is_empty()) {
        let allowed: bool = sqlx::query_scalar(
            "/* mezzanine */ SELECT has_table_privilege($1::regclass, 'TRIGGER')",
        )
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
        "/* mezzanine */ SELECT to_regnamespace('mezzanine') IS NOT NULL,
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
        "/* mezzanine */ SELECT format('%I.%I()', n.nspname, p.proname) FROM pg_proc p
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
        "/* mezzanine */ SELECT n.nspname::text, c.relname::text, format('%I.%I', n.nspname, c.relname), t.tgname::text,
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
