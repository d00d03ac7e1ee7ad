//! `capture.method = "logical"`: changes read from a logical replication
//! slot instead of recorded by triggers.
//!
//! `capture install` creates a publication of the layout's tables (and of
//! `mezzanine.outbox`) and a `pgoutput` slot. The relay peeks at the
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

use std::collections::HashMap;
use std::time::Duration;

use config::ColumnKind;
use legacy::layout::{quote, Layout};
use sqlx::{PgConnection, PgPool, Row};

use super::deliver::Entry;
use super::install::Coverage;
use super::pgoutput::{self, Message, Tuple};
use crate::error::Error;

/// The publication of the layout's tables.
pub const PUBLICATION: &str = "mezzanine_capture";

/// The advisory lock one reader of the slot holds at a time.
const SLOT_LOCK: i64 = 7_415_262_543;

/// The slot of this database: `mezzanine_` and the database's name (slot
/// names are unique across the server), hashed when it would be too long
/// or holds other characters.
pub async fn slot_name(executor: impl sqlx::PgExecutor<'_>) -> Result<String, Error> {
    let database: String = sqlx::query_scalar("SELECT current_database()::text")
        .fetch_one(executor)
        .await
        .map_err(Error::postgres("reading the database's name"))?;
    let simple = database.len() <= 40
        && database
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_');
    Ok(if simple {
        format!("mezzanine_{database}")
    } else {
        format!(
            "mezzanine_{:016x}",
            schemaless::routing::fnv1a64(database.as_bytes())
        )
    })
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
    let unquote = |q: &str| q.trim_matches('"').replace("\"\"", "\"");
    let mut out = vec![Identity {
        name: format!("{}.{}", layout.schema, layout.table),
        table_sql: layout.table_sql().to_string(),
        keys: vec![unquote(layout.uuid_sql())],
    }];
    for column in layout
        .columns
        .iter()
        .filter(|c| c.kind == ColumnKind::Child)
    {
        let keys = vec![
            unquote(column.parent_sql().expect("a child has a parent key")),
            unquote(column.ref_key_sql()),
        ];
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
        "SELECT c.relreplident::text,
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
        "SELECT format('%I', i.relname) FROM pg_index x
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
    let wal_level: String = sqlx::query_scalar("SELECT current_setting('wal_level')")
        .fetch_one(pool)
        .await
        .map_err(Error::postgres(context))?;
    if wal_level != "logical" {
        return Err(Error::Capture(format!(
            "capture.method = \"logical\" needs wal_level = logical, and this server has {wal_level}: set it in postgresql.conf and restart PostgreSQL, or use capture.method = \"triggers\"; nothing was installed"
        )));
    }
    let (user, replication): (String, bool) = sqlx::query_as(
        "SELECT current_user::text, rolsuper OR rolreplication FROM pg_roles WHERE rolname = current_user",
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
            "SELECT pg_has_role(relowner, 'USAGE') FROM pg_class WHERE oid = $1::regclass",
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
            "INSERT INTO mezzanine.capture_replica_identity (table_sql, identity, index_sql)
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
    let exists: bool =
        sqlx::query_scalar("SELECT EXISTS (SELECT 1 FROM pg_publication WHERE pubname = $1)")
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
        "SELECT pg_create_logical_replication_slot($1, 'pgoutput')
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
    sqlx::query("SELECT pg_advisory_lock($1)")
        .bind(SLOT_LOCK)
        .execute(&mut *conn)
        .await
        .map_err(Error::postgres(context))?;
    let dropped = sqlx::query(
        "SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots WHERE slot_name = $1",
    )
    .bind(&slot)
    .execute(&mut *conn)
    .await;
    let _ = sqlx::query("SELECT pg_advisory_unlock($1)")
        .bind(SLOT_LOCK)
        .execute(&mut *conn)
        .await;
    let slot_dropped = dropped.map_err(Error::postgres(context))?.rows_affected() > 0;
    drop(conn);
    let exists: bool =
        sqlx::query_scalar("SELECT EXISTS (SELECT 1 FROM pg_publication WHERE pubname = $1)")
            .bind(PUBLICATION)
            .fetch_one(pool)
            .await
            .map_err(Error::postgres("reading the publications"))?;
    let context = "reading the recorded replica identities";
    let recorded_table: bool =
        sqlx::query_scalar("SELECT to_regclass('mezzanine.capture_replica_identity') IS NOT NULL")
            .fetch_one(pool)
            .await
            .map_err(Error::postgres(context))?;
    let recorded: Vec<(String, String, Option<String>)> = if recorded_table {
        sqlx::query_as(
            "SELECT table_sql, identity, index_sql FROM mezzanine.capture_replica_identity
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

/// The capture slot as PostgreSQL reports it.
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct Slot {
    /// Its name.
    pub name: String,
    /// Whether a reader holds it now.
    pub active: bool,
    /// `reserved`, `extended`, `unreserved` or `lost` (PostgreSQL's
    /// `wal_status`): `lost` means changes were removed before a relay
    /// read them.
    pub wal_status: Option<String>,
    /// WAL bytes between the slot's confirmed position and now: what it
    /// keeps the server from recycling, and roughly what waits for the
    /// relay.
    pub retained_bytes: u64,
}

/// The slot, if it exists.
pub async fn slot(pool: &PgPool) -> Result<Option<Slot>, Error> {
    let name = slot_name(pool).await?;
    let row: Option<(bool, Option<String>, Option<i64>)> = sqlx::query_as(
        "SELECT active, wal_status,
                pg_wal_lsn_diff(pg_current_wal_lsn(), coalesce(confirmed_flush_lsn, restart_lsn))::int8
         FROM pg_replication_slots WHERE slot_name = $1",
    )
    .bind(&name)
    .fetch_optional(pool)
    .await
    .map_err(Error::postgres("reading the capture slot"))?;
    Ok(row.map(|(active, wal_status, retained)| Slot {
        name,
        active,
        wal_status,
        retained_bytes: retained.unwrap_or(0).max(0) as u64,
    }))
}

/// Per table of `layout`, whether logical capture covers it: published,
/// its replica identity logging the keys deletions need, the slot there
/// and not lost, and `wal_level = logical`.
pub async fn coverage(pool: &PgPool, layout: &Layout) -> Result<Vec<Coverage>, Error> {
    let context = "reading logical capture's state";
    let wal_level: String = sqlx::query_scalar("SELECT current_setting('wal_level')")
        .fetch_one(pool)
        .await
        .map_err(Error::postgres(context))?;
    let slot = slot(pool).await?;
    let published: Vec<String> = sqlx::query_scalar(
        "SELECT schemaname::text || '.' || tablename::text FROM pg_publication_tables WHERE pubname = $1",
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

/// What one read of the slot found.
#[derive(Debug, Default)]
pub struct Decoded {
    /// The entries of the transactions read, skipped ones left out.
    pub(crate) entries: Vec<Entry>,
    /// Where the slot may advance to: the end of the last transaction
    /// read.
    pub end_lsn: Option<String>,
    /// Changes read (rows of the peek).
    pub messages: u64,
    /// Transactions skipped (facade writes, the reverse mirror's).
    pub skipped: u64,
}

/// A table's role in the layout, for decoding its changes.
enum Role {
    Parent {
        id: usize,
        uuid: usize,
        /// (layout column, version's position).
        row_columns: Vec<(String, usize)>,
    },
    Child {
        /// (layout column, parent key's position, ref key's position).
        columns: Vec<(String, usize, usize)>,
    },
    /// `mezzanine.outbox`: a facade transaction.
    Outbox,
    Other,
}

fn role(layout: &Layout, relation: &pgoutput::Relation) -> Role {
    let unquote = |q: &str| q.trim_matches('"').replace("\"\"", "\"");
    let at = |name: &str| relation.columns.iter().position(|c| *c == name);
    if relation.namespace == "mezzanine" && relation.name == "outbox" {
        return Role::Outbox;
    }
    if relation.namespace != layout.schema {
        return Role::Other;
    }
    if relation.name == layout.table {
        let (Some(id), Some(uuid)) = (
            at(&unquote(layout.id_sql())),
            at(&unquote(layout.uuid_sql())),
        ) else {
            return Role::Other;
        };
        let row_columns = layout
            .columns
            .iter()
            .filter(|c| c.kind == ColumnKind::Row)
            .filter_map(|c| Some((c.name.to_string(), at(&unquote(c.ref_key_sql()))?)))
            .collect();
        return Role::Parent {
            id,
            uuid,
            row_columns,
        };
    }
    let columns: Vec<(String, usize, usize)> = layout
        .columns
        .iter()
        .filter(|c| c.kind == ColumnKind::Child && c.table == relation.name)
        .filter_map(|c| {
            Some((
                c.name.to_string(),
                at(&unquote(c.parent_sql()?))?,
                at(&unquote(c.ref_key_sql()))?,
            ))
        })
        .collect();
    if columns.is_empty() {
        Role::Other
    } else {
        Role::Child { columns }
    }
}

fn int(tuple: &Tuple, at: usize) -> Option<i64> {
    tuple.text(at)?.parse().ok()
}

fn uuid(tuple: &Tuple, at: usize) -> Option<uuid::Uuid> {
    tuple.text(at)?.parse().ok()
}

/// The entries a change makes, as the triggers would record them.
fn entries(role: &Role, message: &Message, out: &mut Vec<Entry>) {
    match (role, message) {
        (
            Role::Parent {
                id,
                uuid: u,
                row_columns,
            },
            Message::Insert { new, .. } | Message::Update { new, .. },
        ) => {
            if let Message::Update { old: Some(old), .. } = message {
                // The identity (row key) changed: the old one is gone.
                if let Some(was) = uuid(old, *u).filter(|was| Some(*was) != uuid(new, *u)) {
                    out.push(Entry::deleted_parent(int(old, *id), was));
                }
            }
            for (column, version) in row_columns {
                if new.text(*version).is_some() {
                    if let Some(parent) = int(new, *id) {
                        out.push(Entry::written(column, parent, uuid(new, *u), None));
                    }
                }
            }
        }
        (Role::Parent { id, uuid: u, .. }, Message::Delete { old, .. }) => {
            if let Some(was) = uuid(old, *u) {
                out.push(Entry::deleted_parent(int(old, *id), was));
            }
        }
        (Role::Child { columns }, Message::Insert { new, .. } | Message::Update { new, .. }) => {
            for (column, parent, ref_key) in columns {
                if let Message::Update { old: Some(old), .. } = message {
                    let before = (int(old, *parent), int(old, *ref_key));
                    if let (Some(p), Some(r)) = before {
                        if before != (int(new, *parent), int(new, *ref_key)) {
                            out.push(Entry::deleted_child(column, p, r));
                        }
                    }
                }
                if let (Some(p), Some(r)) = (int(new, *parent), int(new, *ref_key)) {
                    out.push(Entry::written(column, p, None, Some(r)));
                }
            }
        }
        (Role::Child { columns }, Message::Delete { old, .. }) => {
            for (column, parent, ref_key) in columns {
                if let (Some(p), Some(r)) = (int(old, *parent), int(old, *ref_key)) {
                    out.push(Entry::deleted_child(column, p, r));
                }
            }
        }
        _ => {}
    }
}

/// Reads up to about `max` changes from the slot on `conn` (whole
/// transactions), without consuming them: the caller advances the slot
/// once they are delivered. `conn` must hold [`lock`].
pub async fn peek(
    conn: &mut PgConnection,
    slot: &str,
    layout: &Layout,
    max: usize,
) -> Result<Decoded, Error> {
    let context = "reading the capture slot";
    let rows = sqlx::query(
        "SELECT lsn::text, data FROM pg_logical_slot_peek_binary_changes($1, NULL, $2,
             'proto_version', '1', 'publication_names', $3, 'messages', 'true')",
    )
    .bind(slot)
    .bind(max as i32)
    .bind(PUBLICATION)
    .fetch_all(&mut *conn)
    .await
    .map_err(Error::postgres(context))?;
    let mut decoded = Decoded {
        messages: rows.len() as u64,
        ..Decoded::default()
    };
    let mut roles: HashMap<u32, Role> = HashMap::new();
    let mut pending: Vec<Entry> = Vec::new();
    let mut skip = false;
    let mut commit_time: Option<i64> = None;
    for row in &rows {
        let data: Vec<u8> = row.try_get(1).map_err(Error::postgres(context))?;
        let message = pgoutput::parse(&data).map_err(|e| Error::Capture(e.to_string()))?;
        match &message {
            Message::Begin {
                commit_time: time, ..
            } => {
                pending.clear();
                skip = false;
                commit_time = Some(*time);
            }
            Message::Relation(relation) => {
                roles.insert(relation.id, role(layout, relation));
            }
            Message::Commit { .. } => {
                if skip {
                    decoded.skipped += 1;
                } else {
                    // PostgreSQL's epoch is 2000-01-01.
                    let at = commit_time.map_or(0.0, |t| t as f64 / 1e6 + 946_684_800.0);
                    decoded.entries.extend(pending.drain(..).map(|e| e.at(at)));
                }
                pending.clear();
                decoded.end_lsn = Some(row.try_get(0).map_err(Error::postgres(context))?);
            }
            Message::Message {
                transactional: true,
                prefix,
                ..
            } if prefix == "mezzanine.capture" => skip = true,
            Message::Insert { relation, .. }
            | Message::Update { relation, .. }
            | Message::Delete { relation, .. } => match roles.get(relation) {
                Some(Role::Outbox) => skip = true,
                Some(role) => entries(role, &message, &mut pending),
                None => {
                    return Err(Error::Capture(format!(
                        "a change of relation {relation} came before its description"
                    )))
                }
            },
            Message::Truncate { relations } => {
                for relation in relations {
                    match roles.get(relation) {
                        Some(Role::Parent { .. }) => pending.push(Entry::truncated(None)),
                        Some(Role::Child { columns }) => {
                            for (column, _, _) in columns {
                                pending.push(Entry::truncated(Some(column)));
                            }
                        }
                        _ => {}
                    }
                }
            }
            _ => {}
        }
    }
    Ok(decoded)
}

/// Takes the slot's reader lock on `conn` if no one holds it and the slot
/// `slot` exists (false, holding nothing, otherwise).
pub async fn try_lock(conn: &mut PgConnection, slot: &str) -> Result<bool, Error> {
    let context = "locking the capture slot";
    let exists: bool = sqlx::query_scalar(
        "SELECT EXISTS (SELECT 1 FROM pg_replication_slots WHERE slot_name = $1)",
    )
    .bind(slot)
    .fetch_one(&mut *conn)
    .await
    .map_err(Error::postgres(context))?;
    if !exists {
        return Ok(false);
    }
    sqlx::query_scalar("SELECT pg_try_advisory_lock($1)")
        .bind(SLOT_LOCK)
        .fetch_one(conn)
        .await
        .map_err(Error::postgres(context))
}

/// Releases it.
pub async fn unlock(conn: &mut PgConnection) -> Result<(), Error> {
    sqlx::query("SELECT pg_advisory_unlock($1)")
        .bind(SLOT_LOCK)
        .execute(conn)
        .await
        .map_err(Error::postgres("unlocking the capture slot"))?;
    Ok(())
}

/// The server's current WAL position.
pub async fn current_lsn(conn: &mut PgConnection) -> Result<String, Error> {
    sqlx::query_scalar("SELECT pg_current_wal_lsn()::text")
        .fetch_one(conn)
        .await
        .map_err(Error::postgres("reading the WAL position"))
}

/// Moves the slot past what was delivered: those changes are never read
/// again. A position behind the slot's leaves it where it is.
pub async fn advance(conn: &mut PgConnection, slot: &str, lsn: &str) -> Result<(), Error> {
    sqlx::query(
        "SELECT pg_replication_slot_advance(slot_name, greatest($2::pg_lsn, confirmed_flush_lsn))
         FROM pg_replication_slots WHERE slot_name = $1",
    )
    .bind(slot)
    .bind(lsn)
    .execute(conn)
    .await
    .map_err(Error::postgres("advancing the capture slot"))?;
    Ok(())
}

/// The commit time of the oldest change the slot holds, in seconds ago,
/// if any: the lag the gates check. Waits up to a second for the reader
/// lock (a relay holds it only while it reads).
pub async fn oldest_pending(pool: &PgPool) -> Result<Option<f64>, Error> {
    let slot = match slot(pool).await? {
        Some(s) => s.name,
        None => return Ok(None),
    };
    let context = "reading the capture slot's oldest change";
    let mut tx = pool.begin().await.map_err(Error::postgres(context))?;
    sqlx::raw_sql("SET LOCAL lock_timeout = '1s'")
        .execute(&mut *tx)
        .await
        .map_err(Error::postgres(context))?;
    sqlx::query("SELECT pg_advisory_xact_lock($1)")
        .bind(SLOT_LOCK)
        .execute(&mut *tx)
        .await
        .map_err(Error::postgres(context))?;
    let first: Option<Vec<u8>> = sqlx::query_scalar(
        "SELECT data FROM pg_logical_slot_peek_binary_changes($1, NULL, 1,
             'proto_version', '1', 'publication_names', $2) LIMIT 1",
    )
    .bind(&slot)
    .bind(PUBLICATION)
    .fetch_optional(&mut *tx)
    .await
    .map_err(Error::postgres(context))?;
    tx.commit().await.map_err(Error::postgres(context))?;
    let Some(data) = first else {
        return Ok(None);
    };
    match pgoutput::parse(&data).map_err(|e| Error::Capture(e.to_string()))? {
        Message::Begin { commit_time, .. } => {
            const UNIX_2000_MICROS: i64 = 946_684_800_000_000;
            let now = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_micros() as i64);
            Ok(Some(
                (now - UNIX_2000_MICROS - commit_time).max(0) as f64 / 1e6,
            ))
        }
        _ => Ok(None),
    }
}

/// A change the slot holds, as capture reads it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PendingChange {
    /// The layout column; none for a parent row as a whole.
    pub column: Option<String>,
    /// The parent's id, when the change carries it.
    pub parent_id: Option<i64>,
    /// The row key, when the change carries it.
    pub row_key: Option<uuid::Uuid>,
    /// A child's ref key.
    pub ref_key: Option<i64>,
    /// `w`, `d` or `t`.
    pub op: String,
}

/// Up to about `max` changes the slot holds, without consuming them
/// (skipped transactions left out): what the relay will deliver next.
/// Waits for a reading relay to finish its batch.
pub async fn pending(
    pool: &PgPool,
    layout: &Layout,
    max: usize,
) -> Result<Vec<PendingChange>, Error> {
    let context = "reading the capture slot";
    let mut conn = pool.acquire().await.map_err(Error::postgres(context))?;
    sqlx::query("SELECT pg_advisory_lock($1)")
        .bind(SLOT_LOCK)
        .execute(&mut *conn)
        .await
        .map_err(Error::postgres(context))?;
    let result = async {
        let slot = slot_name(&mut *conn).await?;
        peek(&mut conn, &slot, layout, max).await
    }
    .await;
    unlock(&mut conn).await?;
    Ok(result?.entries.into_iter().map(|e| e.pending()).collect())
}
