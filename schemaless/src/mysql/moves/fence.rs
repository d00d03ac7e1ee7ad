//! The fence of a shard move: triggers on every table of the shard's
//! database that refuse writes with [`MESSAGE`].
//!
//! A fence is `BEFORE` triggers, not a lock or `read_only`, because it has
//! to cover one shard of a server that holds many and to outlive the
//! connection that made it. Creating a trigger takes the table's metadata
//! lock, so once [`fence`] returns every transaction that wrote the table
//! without the trigger has ended: what the source holds then is all it
//! will ever hold, and one more catch-up pass makes the copy exact.
//!
//! A [`Hold::Until`] fence names a deadline on the master's own clock and
//! lets writes through after it: a mover killed while the shard is fenced
//! leaves it writable again a few seconds later, never stuck. A
//! [`Hold::Always`] fence is what the old copy keeps once the shard has
//! moved. The store turns the fence's error into a wait: it re-reads the
//! placements and tries again (see [`crate::error::Failure::Moving`]), so
//! no write fails for a fence that is lifted or moved past in time.

use sqlx::Row;

use crate::error::Result;
use crate::mysql::topology::Node;

/// How a fence's error message begins (the classifier knows it by this).
pub const MESSAGE: &str = "mezzanine: shard moving";

/// How long a fence's triggers may wait for the metadata lock of a table
/// a long transaction holds: writes queue behind a waiting DDL, so a fence
/// that cannot be put up at once gives up and is tried again later.
const LOCK_WAIT_SECONDS: u32 = 2;

/// The names of fence triggers begin with this.
const PREFIX: &str = "mz_fence_";

/// How long a fence holds.
#[derive(Clone, Copy, Debug)]
pub enum Hold {
    /// Until this many milliseconds from now, by the master's clock.
    Until(u64),
    /// Until lifted.
    Always,
}

/// Which tables a fence covers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Scope {
    /// Every table of the shard's database: what the last pass and the
    /// copy of the other tables need frozen.
    Shard,
    /// Only `entity`: the cells, which is what the switch needs held.
    /// (Each trigger is a DDL statement of a few milliseconds, and the
    /// fence's length is what writers wait.)
    Entity,
}

/// The shard database's tables, entity first.
pub async fn tables(node: &Node, database: &str) -> Result<Vec<String>> {
    let rows = node
        .fetch_all(format!(
            "SELECT table_name FROM information_schema.tables
             WHERE table_schema = '{database}' AND table_type = 'BASE TABLE'
             ORDER BY table_name = 'entity' DESC, table_name"
        ))
        .await?;
    rows.iter()
        .map(|r| r.try_get::<String, _>(0).map_err(|e| node.error(e)))
        .collect()
}

/// Puts up (or replaces) the fence of `shard` on `node`: every write to
/// `entity` and every change to the other tables of its database is
/// refused while it holds. `entity` takes inserts only (cells are never
/// changed); the trigger bookkeeping and index tables are changed in
/// place, so they are fenced for updates and deletes too.
pub async fn fence(
    node: &Node,
    database: &str,
    shard: u32,
    hold: Hold,
    scope: Scope,
) -> Result<()> {
    let condition = match hold {
        Hold::Until(ms) => {
            let now: f64 = node
                .fetch_all("SELECT CAST(UNIX_TIMESTAMP(NOW(6)) AS DOUBLE)".to_string())
                .await?
                .first()
                .and_then(|r| r.try_get(0).ok())
                .unwrap_or_default();
            format!("UNIX_TIMESTAMP(NOW(6)) < {:.6}", now + ms as f64 / 1000.0)
        }
        Hold::Always => "TRUE".to_string(),
    };
    let mut statements = vec![format!(
        "SET SESSION lock_wait_timeout = {LOCK_WAIT_SECONDS}"
    )];
    for table in tables(node, database).await? {
        if scope == Scope::Entity && table != "entity" {
            continue;
        }
        let events: &[&str] = if table == "entity" {
            &["INSERT"]
        } else {
            &["INSERT", "UPDATE", "DELETE"]
        };
        for event in events {
            statements.push(format!(
                "CREATE OR REPLACE TRIGGER `{database}`.`{}` BEFORE {event} ON `{database}`.`{table}`
                 FOR EACH ROW IF {condition} THEN
                   SIGNAL SQLSTATE '45000' SET MYSQL_ERRNO = 1644,
                     MESSAGE_TEXT = '{MESSAGE}: shard {shard} is fenced for a move';
                 END IF",
                trigger_name(&table, event)
            ));
        }
    }
    statements.push("SET SESSION lock_wait_timeout = DEFAULT".to_string());
    node.execute(statements.join(";\n")).await
}

/// The name of the fence trigger of `table` for `event`: named by the
/// table, so fencing again (the table list changes when `entity` is
/// renamed) replaces each table's own trigger. Trigger names take 64
/// characters; a longer one ends in a hash of the table's name instead.
fn trigger_name(table: &str, event: &str) -> String {
    let event = event[..1].to_ascii_lowercase();
    let name = format!("{PREFIX}{event}_{table}");
    if name.len() <= 64 {
        return name;
    }
    let hash = table.bytes().fold(0xcbf2_9ce4_8422_2325u64, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    });
    format!("{PREFIX}{event}_{hash:016x}")
}

/// Takes the fence of the shard database down, if it has one.
pub async fn lift(node: &Node, database: &str) -> Result<()> {
    let names = fences(node, database).await?;
    if names.is_empty() {
        return Ok(());
    }
    let mut statements = vec![format!(
        "SET SESSION lock_wait_timeout = {LOCK_WAIT_SECONDS}"
    )];
    statements.extend(
        names
            .iter()
            .map(|name| format!("DROP TRIGGER IF EXISTS `{database}`.`{name}`")),
    );
    statements.push("SET SESSION lock_wait_timeout = DEFAULT".to_string());
    node.execute(statements.join(";\n")).await
}

/// The fence triggers of the shard database.
pub async fn fences(node: &Node, database: &str) -> Result<Vec<String>> {
    let rows = node
        .fetch_all(format!(
            "SELECT trigger_name FROM information_schema.triggers
             WHERE trigger_schema = '{database}' AND trigger_name LIKE '{}%'",
            PREFIX.replace('_', "\\_")
        ))
        .await?;
    rows.iter()
        .map(|r| r.try_get::<String, _>(0).map_err(|e| node.error(e)))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn trigger_names_follow_the_table_and_fit() {
        assert_eq!(trigger_name("entity", "INSERT"), "mz_fence_i_entity");
        assert_eq!(
            trigger_name("ix2_by_driver", "DELETE"),
            "mz_fence_d_ix2_by_driver"
        );
        let long = "t".repeat(64);
        let name = trigger_name(&long, "UPDATE");
        assert!(
            name.len() <= 64 && name.starts_with("mz_fence_u_"),
            "{name}"
        );
        assert_ne!(name, trigger_name(&"u".repeat(64), "UPDATE"));
    }
}
