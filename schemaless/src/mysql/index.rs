//! Sharded secondary indexes on MariaDB, maintained by a built-in trigger.
//!
//! Each version `v` of index `name` has, in every shard database:
//! - `ix<v>_<name>`: the entries whose shard value routes to this shard
//!   (the same function as rows: a UUID value lands on the shard of the
//!   row it names). Primary key (shard value, row key); a query reads one
//!   shard only;
//! - `ixr<v>_<name>`: for each row of this shard, the ref key of the cell
//!   its entry reflects and the shard holding that entry.
//!
//! The trigger `index_<name>_v<v>` follows the change log (from the
//! master, for the lowest lag) and, for each cell of the indexed column
//! newer than the row's pointer: writes the new entry, deletes the row's
//! older entry (wherever its shard value had put it), then moves the
//! pointer. Each step is guarded by the ref key, so replays and late or
//! out-of-order cells change nothing, and a crash between steps is undone
//! by the redelivery. Entries are eventually consistent with the latest
//! cells.
//!
//! Versions (`<instance>_meta.index_versions` on every master): a new
//! version is created `building`; its trigger starts at the beginning of
//! every shard's log, which backfills it from the entity tables while
//! writes go on; `switch` makes it `active` (and the old one `retired`)
//! once it has caught up. Queries read the active version; both versions
//! are complete during the switch, so no query fails or sees a partial
//! index.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use sqlx::mysql::MySqlArguments;
use sqlx::{AssertSqlSafe, MySql, Row};

use super::combine::{Cap, Combined, Combiner};
use super::schema::meta_database;
use super::sql::push_hex;
use super::store::MySqlStore;
use super::trigger::{Handler, HandlerResult, Trigger};
use crate::api::{IndexEntry, IndexQuery, ReadFrom};
use crate::cell::{Body, RowKey, StoredCell};
use crate::error::{Error, Result};
use crate::index::{IndexSpec, IndexValue};
use crate::routing::{shard_of, shard_of_bytes};
use config::IndexFieldType;

/// How long the active version of an index is cached by a store.
const VERSION_TTL: Duration = Duration::from_secs(1);

/// Where a version of an index stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum VersionState {
    /// Created; its trigger is filling it.
    Building,
    /// What queries read.
    Active,
    /// Replaced by a newer version.
    Retired,
}

impl VersionState {
    /// `building`, `active` or `retired`.
    pub fn as_str(&self) -> &'static str {
        match self {
            VersionState::Building => "building",
            VersionState::Active => "active",
            VersionState::Retired => "retired",
        }
    }

    fn parse(text: &str) -> Option<VersionState> {
        match text {
            "building" => Some(VersionState::Building),
            "active" => Some(VersionState::Active),
            "retired" => Some(VersionState::Retired),
            _ => None,
        }
    }
}

/// The active versions a store has looked up recently.
#[derive(Default)]
pub struct VersionCache {
    active: Mutex<HashMap<String, (u32, Instant)>>,
}

fn sql_type(kind: IndexFieldType) -> &'static str {
    match kind {
        IndexFieldType::String => "VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin",
        IndexFieldType::Int => "BIGINT",
        IndexFieldType::Float => "DOUBLE",
        IndexFieldType::Decimal => "DECIMAL(65,20)",
        IndexFieldType::Bool => "TINYINT(1)",
    }
}

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

/// The entry table of a version.
pub fn entry_table(name: &str, version: u32) -> String {
    format!("ix{version}_{name}")
}

/// The row pointer table of a version.
pub fn pointer_table(name: &str, version: u32) -> String {
    format!("ixr{version}_{name}")
}

/// The maintenance trigger's name of a version.
pub fn trigger_name(name: &str, version: u32) -> String {
    format!("index_{name}_v{version}")
}

fn bind(
    query: sqlx::query::Query<'static, MySql, MySqlArguments>,
    value: Option<&IndexValue>,
) -> sqlx::query::Query<'static, MySql, MySqlArguments> {
    match value {
        None => query.bind(None::<String>),
        Some(IndexValue::Str(s)) | Some(IndexValue::Decimal(s)) => query.bind(s.clone()),
        Some(IndexValue::Int(i)) => query.bind(*i),
        Some(IndexValue::Float(f)) => query.bind(*f),
        Some(IndexValue::Bool(b)) => query.bind(*b),
    }
}

fn spec<'a>(store: &'a MySqlStore, name: &str) -> Result<&'a IndexSpec> {
    store
        .indexes()
        .iter()
        .find(|i| i.name == name)
        .ok_or_else(|| crate::memory::unknown_index(store.indexes(), name))
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
async fn active_version(store: &MySqlStore, name: &str) -> Result<u32> {
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

/// Answers an index query from the active version, on one shard.
pub(crate) async fn query(
    store: &MySqlStore,
    query: &IndexQuery,
    from: ReadFrom,
) -> Result<crate::api::Answer<Vec<IndexEntry>>> {
    let spec = spec(store, &query.index)?;
    let checked = spec.check(query)?;
    let version = active_version(store, &spec.name).await?;
    let topology = store.topology();
    let shard = shard_of_bytes(&checked.shard_value.routing_bytes(), topology.shard_count);
    let column_of = |field: &str| -> String {
        if field == spec.shard_field {
            "shard_value".to_string()
        } else {
            let i = spec
                .fields
                .iter()
                .position(|f| f == field)
                .expect("checked");
            format!("f{i}")
        }
    };
    let mut sql = format!(
        "SELECT row_key, fields FROM `{}`.`{}` WHERE shard_value = ?",
        topology.database(shard),
        entry_table(&spec.name, version)
    );
    let mut values: Vec<IndexValue> = vec![checked.shard_value.clone()];
    for (field, op, candidates) in &checked.filters {
        let column = column_of(field);
        let op = match op {
            crate::api::FilterOp::Eq => "=",
            crate::api::FilterOp::Lt => "<",
            crate::api::FilterOp::Le => "<=",
            crate::api::FilterOp::Gt => ">",
            crate::api::FilterOp::Ge => ">=",
            crate::api::FilterOp::In => {
                let marks = vec!["?"; candidates.len()].join(", ");
                sql.push_str(&format!(" AND {column} IN ({marks})"));
                values.extend(candidates.iter().cloned());
                continue;
            }
        };
        sql.push_str(&format!(" AND {column} {op} ?"));
        values.push(candidates[0].clone());
    }
    let direction = if checked.descending { "DESC" } else { "ASC" };
    sql.push_str(" ORDER BY ");
    if let Some(order) = &checked.order_by {
        let column = column_of(order);
        sql.push_str(&format!("({column} IS NULL), {column} {direction}, "));
    }
    sql.push_str(&format!("row_key {direction} LIMIT {}", checked.limit));
    store
        .read_failover(shard, from, |node| {
            let mut q = sqlx::query(AssertSqlSafe(sql.clone()));
            for value in &values {
                q = bind(q, Some(value));
            }
            let spec = &spec;
            async move {
                let mut conn = node.acquire().await?;
                let rows = node.run(&mut conn, |c| Box::pin(q.fetch_all(c))).await?;
                rows.iter()
                    .map(|r| {
                        let row_key: Vec<u8> = r.try_get(0).map_err(|e| node.error(e))?;
                        let fields: String = r.try_get(1).map_err(|e| node.error(e))?;
                        let row_key =
                            RowKey::from_slice(&row_key).ok_or_else(|| Error::CorruptCell {
                                cell: format!("index {} entry", spec.name),
                                shard,
                                added_id: 0,
                                reason: "row key is not 16 bytes".into(),
                            })?;
                        let fields = Body::parse(&fields).map_err(|e| Error::CorruptCell {
                            cell: format!("index {} entry of {row_key}", spec.name),
                            shard,
                            added_id: 0,
                            reason: e.to_string(),
                        })?;
                        Ok(IndexEntry { row_key, fields })
                    })
                    .collect::<Result<Vec<_>>>()
            }
        })
        .await
}

/// The built-in handler that keeps one version of an index current.
pub struct Maintainer {
    store: MySqlStore,
    spec: IndexSpec,
    version: u32,
    /// Per cluster, the applies of its shards' batches, combined: the
    /// trigger's shard workers hand their batches in one by one, and those
    /// arriving while one apply of that master runs go together in the
    /// next (one pointer read, one transaction per master for all).
    applies: Vec<Arc<Combiner<Batch, Applied>>>,
}

/// One shard worker's batch, shared with the apply that carries it.
type Batch = Arc<Vec<StoredCell>>;

/// What an apply did for one batch.
#[derive(Clone)]
enum Applied {
    Done,
    Failed(String),
    /// The batch went with others and the whole failed: apply it alone,
    /// so that a failure is its own.
    Alone,
}

/// The most cells one combined apply takes besides its leader's.
const MAX_COMBINED_CELLS: usize = 5_000;

impl Maintainer {
    /// The trigger maintaining `version` of index `name`. It reads the
    /// change log from the master whatever `triggers.read_from` says: index
    /// lag is what users see.
    pub fn trigger(
        store: &MySqlStore,
        name: &str,
        version: u32,
        options: &config::Triggers,
    ) -> Result<Trigger> {
        let spec = spec(store, name)?.clone();
        let mut options = options.clone();
        options.read_from = config::TriggerRead::Master;
        let column = spec.column.clone();
        let handler = Arc::new(Maintainer {
            store: store.clone(),
            spec,
            version,
            applies: store
                .topology()
                .clusters
                .iter()
                .map(|_| Combiner::new(2))
                .collect(),
        });
        Trigger::new(
            &trigger_name(name, version),
            column,
            store.clone(),
            handler,
            options,
        )
    }

    /// Applies cells of shards of one master in a few round trips: read
    /// the pointers of their rows, write the new entries (one multi-row
    /// statement per entry shard), delete the rows' older entries, move the
    /// pointers. Each statement is guarded by ref key, so a batch that
    /// fails halfway is simply redone.
    async fn apply(&self, cells: &[&StoredCell]) -> Result<()> {
        let topology = self.store.topology();
        let Some(first) = cells.first() else {
            return Ok(());
        };
        let home_cluster =
            topology.cluster_index(shard_of(&first.cell.key.row_key, topology.shard_count))?;
        let home_master = &topology.clusters[home_cluster].master();
        let pointers = pointer_table(&self.spec.name, self.version);
        let entries = entry_table(&self.spec.name, self.version);

        // The newest cell of each row in the batch.
        let mut newest: BTreeMap<RowKey, &StoredCell> = BTreeMap::new();
        for cell in cells
            .iter()
            .copied()
            .filter(|c| c.cell.key.column == self.spec.column)
        {
            let slot = newest.entry(cell.cell.key.row_key).or_insert(cell);
            if cell.cell.key.ref_key > slot.cell.key.ref_key {
                *slot = cell;
            }
        }
        if newest.is_empty() {
            return Ok(());
        }
        // Rows by home shard: one pointer read for all of them.
        let mut by_home: BTreeMap<u32, Vec<RowKey>> = BTreeMap::new();
        for row in newest.keys() {
            by_home
                .entry(shard_of(row, topology.shard_count))
                .or_default()
                .push(*row);
        }
        let sql = by_home
            .iter()
            .map(|(home, rows)| {
                let mut sql = format!(
                    "SELECT row_key, ref_key, entry_shard FROM `{}`.`{pointers}` WHERE row_key IN (",
                    topology.database(*home)
                );
                for (i, row) in rows.iter().enumerate() {
                    if i > 0 {
                        sql.push(',');
                    }
                    push_hex(&mut sql, row.as_bytes());
                }
                sql.push(')');
                sql
            })
            .collect::<Vec<_>>()
            .join(" UNION ALL ");
        let mut old: HashMap<RowKey, (i64, Option<u32>)> = HashMap::new();
        for r in home_master.fetch_all(sql).await? {
            let key: Vec<u8> = r.try_get(0).map_err(|e| home_master.error(e))?;
            let ref_key: i64 = r.try_get(1).map_err(|e| home_master.error(e))?;
            let shard: Option<u32> = r.try_get(2).map_err(|e| home_master.error(e))?;
            if let Some(row) = RowKey::from_slice(&key) {
                old.insert(row, (ref_key, shard));
            }
        }
        newest.retain(|row, cell| {
            old.get(row)
                .is_none_or(|(r, _)| *r < cell.cell.key.ref_key.get())
        });
        if newest.is_empty() {
            return Ok(());
        }

        // 1. New entries, grouped by the shard their value routes to.
        let mut by_shard: BTreeMap<u32, Vec<String>> = BTreeMap::new();
        let mut entry_shard: HashMap<RowKey, u32> = HashMap::new();
        for (row, cell) in &newest {
            let Some((value, fields)) = self.spec.entry(&cell.cell.body) else {
                continue;
            };
            let shard = shard_of_bytes(&value.routing_bytes(), topology.shard_count);
            entry_shard.insert(*row, shard);
            let mut tuple = String::from("(");
            push_value(&mut tuple, Some(&value));
            tuple.push(',');
            push_hex(&mut tuple, row.as_bytes());
            for field in &self.spec.fields {
                tuple.push(',');
                let v = fields
                    .fields()
                    .get(field)
                    .and_then(|v| crate::index::index_value(self.spec.type_of(field), v));
                push_value(&mut tuple, v.as_ref());
            }
            tuple.push_str(",CONVERT(");
            push_hex(&mut tuple, fields.to_string().as_bytes());
            tuple.push_str(&format!(" USING utf8mb4),{})", cell.cell.key.ref_key.get()));
            by_shard.entry(shard).or_default().push(tuple);
        }
        let names: String = (0..self.spec.fields.len())
            .map(|i| format!("f{i}, "))
            .collect();
        // ref_key is assigned last: the conditions before it must see the
        // stored ref key, not the new one. In a unique index the entry of a
        // value may belong to another row: then nothing changes.
        let newer = if self.spec.unique() {
            "row_key = VALUES(row_key) AND VALUES(ref_key) > ref_key"
        } else {
            "VALUES(ref_key) > ref_key"
        };
        let updates: String = (0..self.spec.fields.len())
            .map(|i| format!("f{i} = IF({newer}, VALUES(f{i}), f{i}), "))
            .collect();
        // Statements per master: one transaction (one commit) each.
        let mut per_master: BTreeMap<usize, Vec<String>> = BTreeMap::new();
        for (shard, tuples) in by_shard {
            per_master
                .entry(topology.cluster_index(shard)?)
                .or_default()
                .push(format!(
                    "INSERT INTO `{}`.`{entries}` (shard_value, row_key, {names}fields, ref_key) VALUES {}
                     ON DUPLICATE KEY UPDATE {updates}
                       fields = IF({newer}, VALUES(fields), fields),
                       ref_key = IF({newer}, VALUES(ref_key), ref_key)",
                    topology.database(shard),
                    tuples.join(",")
                ));
        }
        if self.spec.unique() {
            // Entries first, then check that each value is ours: a value
            // held by another row is a violation, and this batch fails
            // before any pointer moves (its cells are retried one by one,
            // and the violating one is parked with the reason).
            self.run_per_master(std::mem::take(&mut per_master)).await?;
            self.check_unique(&newest, &entry_shard).await?;
        }

        // 2. Older entries of those rows, wherever their old value put them
        // (the new entries carry the new ref key and stay).
        let mut deletes: BTreeMap<u32, Vec<String>> = BTreeMap::new();
        for (row, cell) in &newest {
            if let Some((_, Some(shard))) = old.get(row) {
                let mut condition = String::from("(row_key = ");
                push_hex(&mut condition, row.as_bytes());
                condition.push_str(&format!(" AND ref_key < {})", cell.cell.key.ref_key.get()));
                deletes.entry(*shard).or_default().push(condition);
            }
        }
        for (shard, conditions) in deletes {
            per_master
                .entry(topology.cluster_index(shard)?)
                .or_default()
                .push(format!(
                    "DELETE FROM `{}`.`{entries}` WHERE {}",
                    topology.database(shard),
                    conditions.join(" OR ")
                ));
        }

        // 3. The pointers, last: a crash before them redoes the steps
        // above. Other masters commit first; the home master's entries,
        // deletes and pointers commit together after them.
        let mut pointer_rows: BTreeMap<u32, Vec<String>> = BTreeMap::new();
        for (row, cell) in &newest {
            let mut t = String::from("(");
            push_hex(&mut t, row.as_bytes());
            let shard = entry_shard
                .get(row)
                .map_or("NULL".to_string(), u32::to_string);
            t.push_str(&format!(",{shard},{})", cell.cell.key.ref_key.get()));
            pointer_rows
                .entry(shard_of(row, topology.shard_count))
                .or_default()
                .push(t);
        }
        let mut home_statements = per_master.remove(&home_cluster).unwrap_or_default();
        for (home, tuples) in pointer_rows {
            home_statements.push(format!(
                "INSERT INTO `{}`.`{pointers}` (row_key, entry_shard, ref_key) VALUES {}
                 ON DUPLICATE KEY UPDATE
                   entry_shard = IF(VALUES(ref_key) > ref_key, VALUES(entry_shard), entry_shard),
                   ref_key = GREATEST(ref_key, VALUES(ref_key))",
                topology.database(home),
                tuples.join(",")
            ));
        }
        self.run_per_master(per_master).await?;
        self.run_per_master(BTreeMap::from([(home_cluster, home_statements)]))
            .await
    }

    /// Applies `batches` (shards of one master) together, answering each;
    /// if the whole fails, each is applied alone by its own worker.
    async fn apply_combined(&self, batches: Vec<Batch>) -> Vec<Applied> {
        let cells: Vec<&StoredCell> = batches.iter().flat_map(|b| b.iter()).collect();
        match self.apply(&cells).await {
            Ok(()) => batches.iter().map(|_| Applied::Done).collect(),
            Err(e) if batches.len() == 1 => vec![Applied::Failed(e.to_string())],
            Err(_) => batches.iter().map(|_| Applied::Alone).collect(),
        }
    }

    /// Fails if a value of the batch's new entries belongs to another row.
    async fn check_unique(
        &self,
        newest: &BTreeMap<RowKey, &StoredCell>,
        entry_shard: &HashMap<RowKey, u32>,
    ) -> Result<()> {
        let topology = self.store.topology();
        let entries = entry_table(&self.spec.name, self.version);
        for (row, cell) in newest {
            let Some(&shard) = entry_shard.get(row) else {
                continue;
            };
            let Some((value, _)) = self.spec.entry(&cell.cell.body) else {
                continue;
            };
            let mut sql = format!(
                "SELECT row_key FROM `{}`.`{entries}` WHERE shard_value = ",
                topology.database(shard)
            );
            push_value(&mut sql, Some(&value));
            let master = &topology.cluster(shard)?.master();
            let rows = master.fetch_all(sql).await?;
            let owner = rows
                .first()
                .and_then(|r| r.try_get::<Vec<u8>, _>(0).ok())
                .and_then(|o| RowKey::from_slice(&o));
            if let Some(owner) = owner.filter(|o| o != row) {
                return Err(Error::invalid(
                    "index",
                    format!(
                        "unique index {}: {} = {} already belongs to row {owner}; {} keeps its old entry",
                        self.spec.name,
                        self.spec.shard_field,
                        cell.cell
                            .body
                            .fields()
                            .get(&self.spec.shard_field)
                            .cloned()
                            .unwrap_or_default(),
                        cell.cell.key
                    ),
                ));
            }
        }
        Ok(())
    }

    /// Runs each master's statements as one transaction in one round trip
    /// (one commit), the masters in parallel.
    async fn run_per_master(&self, per_master: BTreeMap<usize, Vec<String>>) -> Result<()> {
        let topology = self.store.topology();
        futures::future::try_join_all(per_master.into_iter().map(
            |(cluster, statements)| async move {
                super::store::transaction(&topology.clusters[cluster].master(), &statements).await
            },
        ))
        .await?;
        Ok(())
    }
}

/// An index value as an SQL literal.
fn push_value(sql: &mut String, value: Option<&IndexValue>) {
    match value {
        None => sql.push_str("NULL"),
        Some(IndexValue::Str(s)) => {
            sql.push_str("CONVERT(");
            push_hex(sql, s.as_bytes());
            sql.push_str(" USING utf8mb4)");
        }
        Some(IndexValue::Int(i)) => sql.push_str(&i.to_string()),
        Some(IndexValue::Float(f)) => sql.push_str(&format!("{f:e}")),
        // Canonical: digits, at most one point and a leading minus.
        Some(IndexValue::Decimal(d)) => sql.push_str(d),
        Some(IndexValue::Bool(b)) => sql.push_str(if *b { "1" } else { "0" }),
    }
}

#[async_trait]
impl Handler for Maintainer {
    async fn handle(&self, cell: &StoredCell) -> HandlerResult {
        self.apply(&[cell]).await.map_err(|e| e.to_string())
    }

    async fn handle_batch(&self, cells: &[StoredCell]) -> std::result::Result<(), (usize, String)> {
        let Some(first) = cells.first() else {
            return Ok(());
        };
        let topology = self.store.topology();
        let shard = shard_of(&first.cell.key.row_key, topology.shard_count);
        let cluster = topology
            .cluster_index(shard)
            .map_err(|e| (0, e.to_string()))?;
        let cap = Cap {
            weight: |batch: &Batch| batch.len(),
            max: MAX_COMBINED_CELLS,
        };
        let run = |batches: Vec<Batch>| self.apply_combined(batches);
        let applied = self.applies[cluster]
            .submit(Arc::new(cells.to_vec()), cap, run)
            .await;
        match applied {
            Combined::Answered(Applied::Done) => Ok(()),
            Combined::Answered(Applied::Failed(e)) => Err((0, e)),
            Combined::Answered(Applied::Alone) | Combined::Abandoned => {
                let cells: Vec<&StoredCell> = cells.iter().collect();
                self.apply(&cells).await.map_err(|e| (0, e.to_string()))
            }
        }
    }
}
