//! The index maintainer: the trigger handler that writes entries, deletes
//! superseded ones and moves row pointers, each step guarded by the ref
//! key, with concurrent batches combined per master.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use async_trait::async_trait;
use sqlx::Row;

use super::*;

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
            by_shard.entry(shard).or_default().push(entry_tuple(
                &self.spec,
                row,
                &value,
                &fields,
                cell.cell.key.ref_key.get(),
            ));
        }
        // Statements per master: one transaction (one commit) each.
        let mut per_master: BTreeMap<usize, Vec<String>> = BTreeMap::new();
        for (shard, tuples) in by_shard {
            per_master
                .entry(topology.cluster_index(shard)?)
                .or_default()
                .push(entry_upsert(
                    &self.spec,
                    &topology.database(shard),
                    &entries,
                    &tuples,
                    Replace::Newer,
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
                crate::mysql::store::transaction(&topology.clusters[cluster].master(), &statements)
                    .await
            },
        ))
        .await?;
        Ok(())
    }
}

/// Which stored entry an upsert replaces.
#[derive(Clone, Copy)]
pub(super) enum Replace {
    /// One of an older cell: the maintainer's rule (replays change
    /// nothing).
    Newer,
    /// One of an older cell or of the same one: a repair rewrites an entry
    /// whose fields were changed under the same ref key.
    NewerOrSame,
}

/// One row's entry as a tuple of [`entry_upsert`]'s `VALUES`.
pub(super) fn entry_tuple(
    spec: &IndexSpec,
    row: &RowKey,
    value: &IndexValue,
    fields: &Body,
    ref_key: i64,
) -> String {
    let mut tuple = String::from("(");
    push_value(&mut tuple, Some(value));
    tuple.push(',');
    push_hex(&mut tuple, row.as_bytes());
    for field in &spec.fields {
        tuple.push(',');
        let v = fields
            .fields()
            .get(field)
            .and_then(|v| crate::index::index_value(spec.type_of(field), v));
        push_value(&mut tuple, v.as_ref());
    }
    tuple.push_str(",CONVERT(");
    push_hex(&mut tuple, fields.to_string().as_bytes());
    tuple.push_str(&format!(" USING utf8mb4),{ref_key})"));
    tuple
}

/// Writes `tuples` ([`entry_tuple`]) into `database`'s entry table
/// `entries`, replacing a stored entry of the same key as `replace` says.
pub(super) fn entry_upsert(
    spec: &IndexSpec,
    database: &str,
    entries: &str,
    tuples: &[String],
    replace: Replace,
) -> String {
    let names: String = (0..spec.fields.len()).map(|i| format!("f{i}, ")).collect();
    let compare = match replace {
        Replace::Newer => ">",
        Replace::NewerOrSame => ">=",
    };
    // ref_key is assigned last: the conditions before it must see the
    // stored ref key, not the new one. In a unique index the entry of a
    // value may belong to another row: then nothing changes.
    let newer = if spec.unique() {
        format!("row_key = VALUES(row_key) AND VALUES(ref_key) {compare} ref_key")
    } else {
        format!("VALUES(ref_key) {compare} ref_key")
    };
    let updates: String = (0..spec.fields.len())
        .map(|i| format!("f{i} = IF({newer}, VALUES(f{i}), f{i}), "))
        .collect();
    format!(
        "INSERT INTO `{database}`.`{entries}` (shard_value, row_key, {names}fields, ref_key) VALUES {}
         ON DUPLICATE KEY UPDATE {updates}
           fields = IF({newer}, VALUES(fields), fields),
           ref_key = IF({newer}, VALUES(ref_key), ref_key)",
        tuples.join(",")
    )
}

/// An index value as an SQL literal.
pub(super) fn push_value(sql: &mut String, value: Option<&IndexValue>) {
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
