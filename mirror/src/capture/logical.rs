//! `capture.method = "logical"`: changes read from a logical replication
//! slot instead of recorded by triggers.
//!
//! This file sets it up: `capture install` creates a publication of the
//! layout's tables (and of `mezzanine.outbox`) and a `pgoutput` slot;
//! [`super::slot`] reads it. The relay peeks at the
//! slot's changes (`pg_logical_slot_peek_binary_changes`), turns each
//! committed transaction's changes into the same entries the triggers
//! record (which parent changed in which column; see
//! [`super::install`]), delivers them as [`super::deliver`] does, and only
//! then advances the slot. A crash before the advance reads the same
//! changes again; they come back `AlreadyPresent`. One relay reads the
//! slot at a time (an advisory lock); the others go on with the outbox
//! and the queue.
//!
//! A transaction is skipped when it also wrote `mezzanine.outbox` (a
//! facade write: the outbox carries it) or emitted the message
//! `mezzanine.capture` (the reverse mirror and repair, whose cells come
//! from Schemaless).
//!
//! Deletions need the deleted row's keys: the parent's row key, a child's
//! (parent, ref key). Where a table's replica identity does not log them
//! (the default logs the primary key), install sets it to the unique index
//! on them, or to `FULL` when those columns may be NULL, and records what
//! it was, which `uninstall` restores.
//!
//! What it costs and asks, against triggers: nothing on the write path
//! (`bench capture`); `wal_level = logical` (a restart to change), the
//! `REPLICATION` attribute for the role relays run as, and WAL retained
//! for the whole database while no relay reads the slot (watch
//! `capture status`: its retained bytes; a slot PostgreSQL invalidated
//! under `max_slot_wal_keep_size` has lost changes, and says so). An
//! update that changes no mapped field cannot be told apart (old values
//! are not logged), so it is delivered and found `AlreadyPresent`.

use std::time::Duration;

use legacy::layout::{quote, Layout};
use sqlx::{PgPool, Row};

use super::install::Coverage;
use super::slot::{slot, slot_name, SLOT_LOCK};
use crate::error::Error;

/// The publication of the layout's tables.
pub const PUBLICATION: &str = "mezzanine_capture";

/// An identifier as the catalog has it, from its quoted form.
pub(crate) fn unquote(quoted: &str) -> String {
    quoted
        .strip_prefix('"')
        .and_then(|q| q.strip_suffix('"'))
        .unwrap_or(quoted)
        .replace("\"\"", "\"")
}

/// What a table needs its replica identity to log, and what it is.
struct Identity {
    /// `schema.table`.
    name: String,
    /// Quoted and qualified.
    table_sql: String,
    /// The key columns deletions need (SQL names).
    keys: Vec<String>,
}

fn identities(layout: &Layout) -> Vec<Identity> {
    let mut out = vec![Identity {
        name: format!("{}.{}", layout.schema, layout.table),
        table_sql: layout.table_sql().to_string(),
        keys: vec![unquote(layout.uuid_sql())],
    }];
    for (column, parent) in layout.children() {
        let keys = vec![unquote(parent), unquote(column.ref_key_sql())];
        match out.iter_mut().find(|i| i.table_sql == column.table_sql()) {
            Some(existing) => {
                for k in keys {
                    if !existing.keys.contains(&k) {
                        existing.keys.push(k);
                    }
                }
            }
            None => out.push(Identity {
                name: format!("{}.{}", layout.schema, column.table),
                table_sql: column.table_sql().to_string(),
                keys,
            }),
        }
    }
    out
}

/// The replica identity `table_sql` has now: `d`, `n`, `f` or `i`, the
/// columns it logs, and (for `i`) the index.
async fn current_identity(
    pool: &PgPool,
    table_sql: &str,
) -> Result<(String, Vec<String>, Option<String>), Error> {
    let context = "reading a table's replica identity";
    let row = sqlx::query(
        "/* mezzanine */ SELECT c.relreplident::text,
                (SELECT format('%I.%I', n.nspname, i.relname) FROM pg_index x
                   JOIN pg_class i ON i.oid = x.indexrelid JOIN pg_namespace n ON n.oid = i.relnamespace
                  WHERE x.indrelid = c.oid AND x.indisreplident),
                coalesce((SELECT array_agg(a.attname::text) FROM pg_index x
                   JOIN pg_attribute a ON a.attrelid = x.indrelid AND a.attnum = ANY(x.indkey)
                  WHERE x.indrelid = c.oid AND
                        CASE c.relreplident WHEN 'i' THEN x.indisreplident WHEN 'd' THEN x.indisprimary ELSE false END),
                  '{}')
         FROM pg_class c WHERE c.oid = $1::regclass",
    )
    .bind(table_sql)
    .fetch_one(pool)
    .await
    .map_err(Error::postgres(context))?;
    let kind: String = row.try_get(0).map_err(Error::postgres(context))?;
    let index: Option<String> = row.try_get(1).map_err(Error::postgres(context))?;
    let columns: Vec<String> = row.try_get(2).map_err(Error::postgres(context))?;
    Ok((kind, columns, index))
}

/// Whether an identity of `kind` over `columns` logs every one of `keys`.
fn logs(kind: &str, columns: &[String], keys: &[String]) -> bool {
    kind == "f" || (matches!(kind, "d" | "i") && keys.iter().all(|k| columns.contains(k)))
}

/// The `ALTER TABLE ... REPLICA IDENTITY` that makes `identity`'s table log
/// its keys: the unique index on exactly them when its columns are NOT
/// NULL, else `FULL`.
async fn identity_change(pool: &PgPool, identity: &Identity) -> Result<String, Error> {
    let index: Option<String> = sqlx::query_scalar(
        "/* mezzanine */ SELECT format('%I', i.relname) FROM pg_index x
           JOIN pg_class i ON i.oid = x.indexrelid
          WHERE x.indrelid = $1::regclass AND x.indisunique AND x.indisvalid AND x.indimmediate
            AND x.indpred IS NULL AND x.indexprs IS NULL
            AND (SELECT array_agg(a.attname::text ORDER BY a.attname) FROM pg_attribute a
                  WHERE a.attrelid = x.indrelid AND a.attnum = ANY(x.indkey))
                = (SELECT array_agg(k ORDER BY k) FROM unnest($2::text[]) k)
            AND NOT EXISTS (SELECT 1 FROM pg_attribute a
                  WHERE a.attrelid = x.indrelid AND a.attnum = ANY(x.indkey) AND NOT a.attnotnull)
          LIMIT 1",
    )
    .bind(&identity.table_sql)
    .bind(&identity.keys)
    .fetch_optional(pool)
    .await
    .map_err(Error::postgres("finding a replica identity index"))?;
    Ok(match index {
        Some(index) => format!(
            "ALTER TABLE {} REPLICA IDENTITY USING INDEX {index};",
            identity.table_sql
        ),
        None => format!("ALTER TABLE {} REPLICA IDENTITY FULL;", identity.table_sql),
    })
}

/// Whether the server and the role allow logical capture: `wal_level =
/// logical`, the `REPLICATION` attribute, the layout's tables owned. An
/// error says what is missing.
pub async fn check(pool: &PgPool, layout: &Layout) -> Result<(), Error> {
    let context = "checking what logical capture needs";
    let wal_level: String =
        sqlx::query_scalar("/* mezzanine */ SELECT current_setting('wal_level')")
            .fetch_one(pool)
            .await
            .map_err(Error::postgres(context))?;
    if wal_level != "logical" {
        return Err(Error::Capture(format!(
            "capture.method = \"logical\" needs wal_level = logical, and this server has {wal_level}: set it in postgresql.conf and restart PostgreSQL, or use capture.method = \"triggers\"; nothing was installed"
        )));
    }
    let (user, replication): (String, bool) = sqlx::query_as(
        "/* mezzanine */ SELECT current_user::text, rolsuper OR rolreplication FROM pg_roles WHERE rolname = current_user",
    )
    .fetch_one(pool)
    .await
    .map_err(Error::postgres(context))?;
    if !replication {
        return Err(Error::Capture(format!(
            "role {user} has no REPLICATION attribute, which a logical replication slot needs (ALTER ROLE {} REPLICATION; the roles relays run as need it too), or use capture.method = \"triggers\"; nothing was installed",
            quote(&user)
        )));
    }
    let tables = identities(layout);
    for table in &tables {
        let owner: bool = sqlx::query_scalar(
            "/* mezzanine */ SELECT pg_has_role(relowner, 'USAGE') FROM pg_class WHERE oid = $1::regclass",
        )
        .bind(&table.table_sql)
        .fetch_one(pool)
        .await
        .map_err(Error::postgres(context))?;
        if !owner {
            return Err(Error::Capture(format!(
                "role {user} does not own {}: a publication of it and its replica identity need the owner; nothing was installed",
                table.name
            )));
        }
    }
    Ok(())
}

/// Installs the logical method (see the module docs), after [`check`].
/// The bump trigger and the removal of the triggers method come in
/// `extra_ddl`, run in the same transaction.
pub async fn install(
    pool: &PgPool,
    layout: &Layout,
    settings: &config::Capture,
    extra_ddl: &str,
) -> Result<Vec<String>, Error> {
    let context = "installing logical capture";
    let tables = identities(layout);
    crate::schema::ensure(pool).await?;

    let mut sql = String::new();
    for table in &tables {
        let (kind, columns, index) = current_identity(pool, &table.table_sql).await?;
        if logs(&kind, &columns, &table.keys) {
            continue;
        }
        sqlx::query(
            "/* mezzanine */ INSERT INTO mezzanine.capture_replica_identity (table_sql, identity, index_sql)
             VALUES ($1, $2, $3) ON CONFLICT (table_sql) DO NOTHING",
        )
        .bind(&table.table_sql)
        .bind(&kind)
        .bind(&index)
        .execute(pool)
        .await
        .map_err(Error::postgres("recording a replica identity"))?;
        sql.push_str(&identity_change(pool, table).await?);
        sql.push('\n');
    }
    let published: Vec<String> = tables
        .iter()
        .map(|t| t.table_sql.clone())
        .chain(std::iter::once("mezzanine.outbox".to_string()))
        .collect();
    let exists: bool = sqlx::query_scalar(
        "/* mezzanine */ SELECT EXISTS (SELECT 1 FROM pg_publication WHERE pubname = $1)",
    )
    .bind(PUBLICATION)
    .fetch_one(pool)
    .await
    .map_err(Error::postgres(context))?;
    sql.push_str(&format!(
        "{} PUBLICATION {PUBLICATION} {} TABLE {};\n{extra_ddl}",
        if exists { "ALTER" } else { "CREATE" },
        if exists { "SET" } else { "FOR" },
        published.join(", ")
    ));
    legacy::connection::ddl(
        pool,
        Duration::from_millis(settings.lock_timeout_ms),
        &sql,
        "installing logical capture",
    )
    .await?;
    // The slot last, outside any transaction that wrote: it waits for the
    // transactions running now, and decodes what commits after.
    let slot = slot_name(pool).await?;
    sqlx::query(
        "/* mezzanine */ SELECT pg_create_logical_replication_slot($1, 'pgoutput')
         WHERE NOT EXISTS (SELECT 1 FROM pg_replication_slots WHERE slot_name = $1)",
    )
    .bind(&slot)
    .execute(pool)
    .await
    .map_err(Error::postgres("creating the capture slot"))?;
    Ok(tables.into_iter().map(|t| t.name).collect())
}

/// Removes the slot (waiting for the reader holding it), the publication,
/// and the replica identities install changed. Returns whether there was
/// anything.
pub async fn uninstall(pool: &PgPool, lock_timeout: Duration) -> Result<bool, Error> {
    let slot = slot_name(pool).await?;
    let mut conn = pool
        .acquire()
        .await
        .map_err(Error::postgres("uninstalling logical capture"))?;
    let context = "dropping the capture slot";
    sqlx::query("/* mezzanine */ SELECT pg_advisory_lock($1)")
        .bind(SLOT_LOCK)
        .execute(&mut *conn)
        .await
        .map_err(Error::postgres(context))?;
    let dropped = sqlx::query(
        "/* mezzanine */ SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots WHERE slot_name = $1",
    )
    .bind(&slot)
    .execute(&mut *conn)
    .await;
    let _ = sqlx::query("/* mezzanine */ SELECT pg_advisory_unlock($1)")
        .bind(SLOT_LOCK)
        .execute(&mut *conn)
        .await;
    let slot_dropped = dropped.map_err(Error::postgres(context))?.rows_affected() > 0;
    drop(conn);
    let exists: bool = sqlx::query_scalar(
        "/* mezzanine */ SELECT EXISTS (SELECT 1 FROM pg_publication WHERE pubname = $1)",
    )
    .bind(PUBLICATION)
    .fetch_one(pool)
    .await
    .map_err(Error::postgres("reading the publications"))?;
    let context = "reading the recorded replica identities";
    let recorded_table: bool = sqlx::query_scalar(
        "/* mezzanine */ SELECT to_regclass('mezzanine.capture_replica_identity') IS NOT NULL",
    )
    .fetch_one(pool)
    .await
    .map_err(Error::postgres(context))?;
    let recorded: Vec<(String, String, Option<String>)> = if recorded_table {
        sqlx::query_as(
            "/* mezzanine */ SELECT table_sql, identity, index_sql FROM mezzanine.capture_replica_identity
             WHERE to_regclass(table_sql) IS NOT NULL",
        )
        .fetch_all(pool)
        .await
        .map_err(Error::postgres(context))?
    } else {
        Vec::new()
    };
    let mut sql = String::new();
    if exists {
        sql.push_str(&format!("DROP PUBLICATION {PUBLICATION};\n"));
    }
    for (table, identity, index) in &recorded {
        let restored = match (identity.as_str(), index) {
            ("n", _) => "NOTHING".to_string(),
            ("f", _) => "FULL".to_string(),
            ("i", Some(index)) => {
                let name = index.rsplit('.').next().unwrap_or(index);
                format!("USING INDEX {name}")
            }
            _ => "DEFAULT".to_string(),
        };
        sql.push_str(&format!(
            "ALTER TABLE {table} REPLICA IDENTITY {restored};\n"
        ));
    }
    if !sql.is_empty() {
        sql.push_str("DELETE FROM mezzanine.capture_replica_identity;\n");
        legacy::connection::ddl(pool, lock_timeout, &sql, "uninstalling logical capture").await?;
    }
    Ok(slot_dropped || exists || !recorded.is_empty())
}

/// Per table of `layout`, whether logical capture covers it: published,
/// its replica identity logging the keys deletions need, the slot there
/// and not lost, and `wal_level = logical`.
pub async fn coverage(pool: &PgPool, layout: &Layout) -> Result<Vec<Coverage>, Error> {
    let context = "reading logical capture's state";
    let wal_level: String =
        sqlx::query_scalar("/* mezzanine */ SELECT current_setting('wal_level')")
            .fetch_one(pool)
            .await
            .map_err(Error::postgres(context))?;
    let slot = slot(pool).await?;
    let published: Vec<String> = sqlx::query_scalar(
        "/* mezzanine */ SELECT schemaname::text || '.' || tablename::text FROM pg_publication_tables WHERE pubname = $1",
    )
    .bind(PUBLICATION)
    .fetch_all(pool)
    .await
    .map_err(Error::postgres(context))?;
    let mut out = Vec::new();
    for table in identities(layout) {
        let mut problems = Vec::new();
        let in_publication = published.contains(&table.name);
        if !in_publication {
            problems.push(format!("not in publication {PUBLICATION}"));
        }
        let (kind, columns, _) = current_identity(pool, &table.table_sql).await?;
        if !logs(&kind, &columns, &table.keys) {
            problems.push(format!(
                "its replica identity does not log {}",
                table.keys.join(", ")
            ));
        }
        match &slot {
            None => problems.push("the capture slot is missing".into()),
            Some(s) if s.wal_status.as_deref() == Some("lost") => problems.push(
                "the capture slot lost changes (wal_status lost): reinstall and backfill again"
                    .into(),
            ),
            Some(_) => {}
        }
        if wal_level != "logical" {
            problems.push(format!("wal_level is {wal_level}, not logical"));
        }
        let state = if problems.is_empty() {
            "installed"
        } else if !in_publication && slot.is_none() {
            "missing"
        } else {
            "partial"
        };
        out.push(Coverage {
            table: table.name,
            state: state.into(),
            problems,
        });
    }
    Ok(out)
}
