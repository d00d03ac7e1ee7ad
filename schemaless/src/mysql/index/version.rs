//! Index versions: created `building` with a maintenance trigger that
//! backfills them from every shard's log, switched `active` once caught
//! up (the old one `retired`), recorded on every master.

use std::time::Instant;

use sqlx::{AssertSqlSafe, Row};

use super::*;

/// `CREATE TABLE` of the index versions in an instance's metadata
/// database (`schema apply` creates it on every master).
pub fn create_versions_table(meta: &str) -> String {
    format!(
        "CREATE TABLE IF NOT EXISTS `{meta}`.`index_versions` (
            name VARCHAR(64) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
            version INT UNSIGNED NOT NULL,
            state VARCHAR(16) CHARACTER SET ascii NOT NULL,
            created_at BIGINT NOT NULL,
            PRIMARY KEY (name, version)
        ) ENGINE=InnoDB"
    )
}

/// Every version of an index, from the metadata every master keeps a copy
/// of: the first master that answers (so queries keep working with a
/// master down).
pub async fn versions(store: &MySqlStore, name: &str) -> Result<Vec<(u32, VersionState)>> {
    spec(store, name)?;
    let topology = store.topology();
    let meta = meta_database(&topology.instance);
    let mut last = None;
    for cluster in &topology.clusters {
        let master = cluster.master();
        let query = sqlx::query(AssertSqlSafe(format!(
            "SELECT version, state FROM `{meta}`.`index_versions` WHERE name = ? ORDER BY version"
        )))
        .bind(name.to_string());
        let rows = match master.acquire().await {
            Ok(mut conn) => {
                master
                    .run(&mut conn, |c| Box::pin(query.fetch_all(c)))
                    .await
            }
            Err(e) => Err(e),
        };
        let rows = match rows {
            Ok(rows) => rows,
            Err(e) if e.is_unavailable() => {
                last = Some(e);
                continue;
            }
            Err(e) => return Err(e),
        };
        return rows
            .iter()
            .map(|r| {
                let version: u32 = r.try_get(0).map_err(|e| master.error(e))?;
                let state: String = r.try_get(1).map_err(|e| master.error(e))?;
                let state = VersionState::parse(&state).ok_or_else(|| {
                    Error::Schema(format!("index {name} v{version}: unknown state {state:?}"))
                })?;
                Ok((version, state))
            })
            .collect();
    }
    Err(last.unwrap_or_else(|| Error::Schema("the instance has no clusters".into())))
}

/// Creates the next version of an index (tables on every shard, state
/// `building`); its trigger then backfills it. Returns the version.
pub async fn create_version(store: &MySqlStore, name: &str) -> Result<u32> {
    let spec = spec(store, name)?.clone();
    let topology = store.topology();
    let meta = meta_database(&topology.instance);
    for cluster in &topology.clusters {
        cluster
            .master()
            .execute(create_versions_table(&meta))
            .await?;
    }
    let version = versions(store, name)
        .await?
        .last()
        .map_or(1, |(v, _)| v + 1);
    let columns: String = spec
        .fields
        .iter()
        .enumerate()
        .map(|(i, f)| format!("f{i} {} NULL, ", sql_type(spec.type_of(f))))
        .collect();
    let entries = entry_table(name, version);
    let pointers = pointer_table(name, version);
    let shard_type = sql_type(spec.type_of(&spec.shard_field));
    // A unique index keys entries by value alone.
    let key = if spec.unique() {
        "shard_value"
    } else {
        "shard_value, row_key"
    };
    for shard in 0..topology.shard_count {
        let db = topology.database(shard);
        let master = &topology.cluster(shard)?.master();
        master
            .execute(format!(
                "CREATE TABLE IF NOT EXISTS `{db}`.`{entries}` (
                    shard_value {shard_type} NOT NULL,
                    row_key BINARY(16) NOT NULL,
                    ref_key BIGINT NOT NULL,
                    {columns}
                    fields MEDIUMTEXT CHARACTER SET utf8mb4 NOT NULL,
                    PRIMARY KEY ({key}),
                    KEY by_row (row_key)
                ) ENGINE=InnoDB;
                CREATE TABLE IF NOT EXISTS `{db}`.`{pointers}` (
                    row_key BINARY(16) NOT NULL PRIMARY KEY,
                    ref_key BIGINT NOT NULL,
                    entry_shard INT UNSIGNED NULL
                ) ENGINE=InnoDB"
            ))
            .await?;
    }
    set_state(store, name, version, VersionState::Building).await?;
    Ok(version)
}

async fn set_state(
    store: &MySqlStore,
    name: &str,
    version: u32,
    state: VersionState,
) -> Result<()> {
    let topology = store.topology();
    let meta = meta_database(&topology.instance);
    for cluster in &topology.clusters {
        let query = sqlx::query(AssertSqlSafe(format!(
            "INSERT INTO `{meta}`.`index_versions` (name, version, state, created_at) VALUES (?, ?, ?, ?)
             ON DUPLICATE KEY UPDATE state = VALUES(state)"
        )))
        .bind(name.to_string())
        .bind(version)
        .bind(state.as_str())
        .bind(crate::cell::now_micros());
        cluster.master().execute_prepared(query).await?;
    }
    Ok(())
}

/// Makes `version` the one queries read, retiring the active one.
pub async fn switch(store: &MySqlStore, name: &str, version: u32) -> Result<()> {
    let all = versions(store, name).await?;
    if !all.iter().any(|(v, _)| *v == version) {
        return Err(Error::invalid(
            "version",
            format!("index {name} has no version {version}"),
        ));
    }
    // The new one first: between the two steps both are active and
    // queries take the highest, so there is never no active version.
    set_state(store, name, version, VersionState::Active).await?;
    for (v, state) in all {
        if v != version && state == VersionState::Active {
            set_state(store, name, v, VersionState::Retired).await?;
        }
    }
    store
        .index_versions()
        .active
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .remove(name);
    Ok(())
}

/// The version queries of `name` read.
pub(super) async fn active_version(store: &MySqlStore, name: &str) -> Result<u32> {
    let cache = store.index_versions();
    if let Some((v, at)) = cache
        .active
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .get(name)
    {
        if at.elapsed() < VERSION_TTL {
            return Ok(*v);
        }
    }
    let version = versions(store, name)
        .await?
        .into_iter()
        .filter(|(_, s)| *s == VersionState::Active)
        .map(|(v, _)| v)
        .max()
        .ok_or_else(|| {
            Error::Schema(format!(
                "index {name} has no active version yet: `mezzanine index create {name}`, then `backfill` and `switch`"
            ))
        })?;
    cache
        .active
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .insert(name.to_string(), (version, Instant::now()));
    Ok(version)
}
