//! Reading the logical capture slot (`capture.method = "logical"`): its
//! name and state, its changes decoded into the entries the triggers
//! would have recorded, the reader lock, advancing it once delivered, and
//! what it still holds. Setting it up is [`super::logical`]'s.
//!
//! Only one reader at a time (an advisory lock): a relay for a batch,
//! `capture status` and triage for a look. A transaction is skipped when
//! it also wrote `mezzanine.outbox` (a facade write: the outbox carries
//! it) or emitted the message `mezzanine.capture` (the reverse mirror and
//! repair, whose cells come from Schemaless). Old values are not logged,
//! so an update that changes no mapped field is delivered too (and found
//! `AlreadyPresent`).

use std::collections::HashMap;

use config::ColumnKind;
use legacy::layout::Layout;
use sqlx::{PgConnection, PgPool, Row};

use super::change::Change;
use super::logical::{unquote, PUBLICATION};
use super::pgoutput::{self, Message, Tuple};
use crate::error::Error;

/// The advisory lock one reader of the slot holds at a time.
pub(crate) const SLOT_LOCK: i64 = 7_415_262_543;

/// The slot of this database: `mezzanine_` and the database's name (slot
/// names are unique across the server), hashed when it would be too long
/// or holds other characters.
pub async fn slot_name(executor: impl sqlx::PgExecutor<'_>) -> Result<String, Error> {
    let database: String = sqlx::query_scalar("/* mezzanine */ SELECT current_database()::text")
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
        "/* mezzanine */ SELECT active, wal_status,
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

/// What one read of the slot found.
#[derive(Debug, Default)]
pub struct Decoded {
    /// The entries of the transactions read, skipped ones left out.
    pub(crate) entries: Vec<Change>,
    /// Where the slot may advance to: the end of the last transaction
    /// read.
    pub end_lsn: Option<String>,
    /// Changes read (rows of the peek).
    pub messages: u64,
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
            .filter(|c| c.kind() == ColumnKind::Row)
            .filter_map(|c| Some((c.name.to_string(), at(&unquote(c.ref_key_sql()))?)))
            .collect();
        return Role::Parent {
            id,
            uuid,
            row_columns,
        };
    }
    let columns: Vec<(String, usize, usize)> = layout
        .children()
        .filter(|(c, _)| c.table == relation.name)
        .filter_map(|(c, parent)| {
            Some((
                c.name.to_string(),
                at(&unquote(parent))?,
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
fn entries(role: &Role, message: &Message, out: &mut Vec<Change>) {
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
                    out.push(Change::deleted_parent(int(old, *id), was));
                }
            }
            for (column, version) in row_columns {
                if new.text(*version).is_some() {
                    if let Some(parent) = int(new, *id) {
                        out.push(Change::written(column, parent, uuid(new, *u), None));
                    }
                }
            }
        }
        (Role::Parent { id, uuid: u, .. }, Message::Delete { old, .. }) => {
            if let Some(was) = uuid(old, *u) {
                out.push(Change::deleted_parent(int(old, *id), was));
            }
        }
        (Role::Child { columns }, Message::Insert { new, .. } | Message::Update { new, .. }) => {
            for (column, parent, ref_key) in columns {
                if let Message::Update { old: Some(old), .. } = message {
                    let before = (int(old, *parent), int(old, *ref_key));
                    if let (Some(p), Some(r)) = before {
                        if before != (int(new, *parent), int(new, *ref_key)) {
                            out.push(Change::deleted_child(column, p, r));
                        }
                    }
                }
                if let (Some(p), Some(r)) = (int(new, *parent), int(new, *ref_key)) {
                    out.push(Change::written(column, p, None, Some(r)));
                }
            }
        }
        (Role::Child { columns }, Message::Delete { old, .. }) => {
            for (column, parent, ref_key) in columns {
                if let (Some(p), Some(r)) = (int(old, *parent), int(old, *ref_key)) {
                    out.push(Change::deleted_child(column, p, r));
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
        "/* mezzanine */ SELECT lsn::text, data FROM pg_logical_slot_peek_binary_changes($1, NULL, $2,
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
    let mut pending: Vec<Change> = Vec::new();
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
                if !skip {
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
                        Some(Role::Parent { .. }) => pending.push(Change::truncated(None)),
                        Some(Role::Child { columns }) => {
                            for (column, _, _) in columns {
                                pending.push(Change::truncated(Some(column)));
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
        "/* mezzanine */ SELECT EXISTS (SELECT 1 FROM pg_replication_slots WHERE slot_name = $1)",
    )
    .bind(slot)
    .fetch_one(&mut *conn)
    .await
    .map_err(Error::postgres(context))?;
    if !exists {
        return Ok(false);
    }
    sqlx::query_scalar("/* mezzanine */ SELECT pg_try_advisory_lock($1)")
        .bind(SLOT_LOCK)
        .fetch_one(conn)
        .await
        .map_err(Error::postgres(context))
}

/// Releases it.
pub async fn unlock(conn: &mut PgConnection) -> Result<(), Error> {
    sqlx::query("/* mezzanine */ SELECT pg_advisory_unlock($1)")
        .bind(SLOT_LOCK)
        .execute(conn)
        .await
        .map_err(Error::postgres("unlocking the capture slot"))?;
    Ok(())
}

/// The server's current WAL position.
pub async fn current_lsn(conn: &mut PgConnection) -> Result<String, Error> {
    sqlx::query_scalar("/* mezzanine */ SELECT pg_current_wal_lsn()::text")
        .fetch_one(conn)
        .await
        .map_err(Error::postgres("reading the WAL position"))
}

/// Moves the slot past what was delivered: those changes are never read
/// again. A position behind the slot's leaves it where it is.
pub async fn advance(conn: &mut PgConnection, slot: &str, lsn: &str) -> Result<(), Error> {
    sqlx::query(
        "/* mezzanine */ SELECT pg_replication_slot_advance(slot_name, greatest($2::pg_lsn, confirmed_flush_lsn))
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
    sqlx::query("/* mezzanine */ SELECT pg_advisory_xact_lock($1)")
        .bind(SLOT_LOCK)
        .execute(&mut *tx)
        .await
        .map_err(Error::postgres(context))?;
    let first: Option<Vec<u8>> = sqlx::query_scalar(
        "/* mezzanine */ SELECT data FROM pg_logical_slot_peek_binary_changes($1, NULL, 1,
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
    sqlx::query("/* mezzanine */ SELECT pg_advisory_lock($1)")
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
