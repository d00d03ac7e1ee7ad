//! Repairing rows [`super::verify`] found wrong: each row's entry and
//! pointer rewritten from its latest cell, as the maintainer would have
//! left them.
//!
//! For each row, from its latest cell of the indexed column (read from the
//! master):
//!
//! 1. its entries on every shard are read (a row has at most a few);
//! 2. one transaction per master: the entry the latest cell gives is
//!    written on the shard its value routes to, replacing one of the same
//!    ref key (fields changed under it) or older; every other entry of the
//!    row at that ref key or older is deleted, wherever it is;
//! 3. then the pointers, on each row's home shard: moved to the latest
//!    cell unless they are already past it. A pointer past every cell the
//!    row has is corrupt (the maintainer only moves one to a cell it
//!    read, and cells are never deleted): it is put back, guarded by the
//!    ref key it holds.
//!
//! Every statement is guarded by ref key as the maintainer's are, so a
//! maintainer applying a newer cell meanwhile keeps its work, and a
//! repair can be run again. What a repair cannot fix (a unique index's
//! value held by another row) is still there when the rows are checked
//! again, which the caller does.

use std::collections::{BTreeMap, BTreeSet};

use super::maintainer::{entry_tuple, entry_upsert, push_value, Replace};
use super::verify::{read_entries, read_pointers};
use super::*;
use crate::api::CellStore;
use crate::cell::{CellKey, RefKey};

/// What [`repair`] did.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct IndexRepair {
    /// Rows whose entry (or absence of one) and pointer were rewritten.
    pub rows: u64,
    /// Entries found of those rows other than the one their latest cell
    /// gives (older, elsewhere), deleted unless the maintainer moved past
    /// them meanwhile.
    pub stale: u64,
    /// Pointers found past every cell of their row, put back.
    pub corrupt_pointers: u64,
}

/// Rewrites the entries and pointers of `rows` in version `version` of
/// index `name` from each row's latest cell. Rows without a cell of the
/// indexed column are left as they are.
pub async fn repair(
    store: &MySqlStore,
    name: &str,
    version: u32,
    rows: &[RowKey],
) -> Result<IndexRepair> {
    let spec = spec(store, name)?.clone();
    let mut done = IndexRepair::default();
    for page in rows.chunks(200) {
        repair_page(store, &spec, version, page, &mut done).await?;
    }
    Ok(done)
}

async fn repair_page(
    store: &MySqlStore,
    spec: &IndexSpec,
    version: u32,
    rows: &[RowKey],
    done: &mut IndexRepair,
) -> Result<()> {
    let topology = store.topology();
    let entries = entry_table(&spec.name, version);
    let pointers = pointer_table(&spec.name, version);
    let mut latest: BTreeMap<RowKey, StoredCell> = BTreeMap::new();
    for cell in store
        .column_cells(rows, &spec.column, ReadFrom::Master)
        .await?
        .value
    {
        match latest.get(&cell.cell.key.row_key) {
            Some(kept) if kept.cell.key.ref_key >= cell.cell.key.ref_key => {}
            _ => {
                latest.insert(cell.cell.key.row_key, cell);
            }
        }
    }
    let keys: Vec<RowKey> = latest.keys().copied().collect();
    let everywhere: BTreeMap<u32, Vec<&RowKey>> = (0..topology.shard_count)
        .map(|shard| (shard, keys.iter().collect()))
        .collect();
    let found = read_entries(store, spec, version, &everywhere).await?;
    let stored_pointers = read_pointers(store, spec, version, &keys).await?;

    let mut entry_statements: BTreeMap<usize, Vec<String>> = BTreeMap::new();
    let mut pointer_statements: BTreeMap<usize, Vec<String>> = BTreeMap::new();
    for (row, cell) in &latest {
        let ref_key = cell.cell.key.ref_key.get();
        let expected = spec.entry(&cell.cell.body).map(|(value, fields)| {
            (
                shard_of_bytes(&value.routing_bytes(), topology.shard_count),
                value,
                fields,
            )
        });
        // The right entry, written again.
        if let Some((shard, value, fields)) = &expected {
            let tuple = entry_tuple(spec, row, value, fields, ref_key);
            entry_statements
                .entry(topology.cluster_index(*shard)?)
                .or_default()
                .push(entry_upsert(
                    spec,
                    &topology.database(*shard),
                    &entries,
                    &[tuple],
                    Replace::NewerOrSame,
                ));
        }
        // Every other entry of the row, up to the latest cell.
        // On the right shard one of them (at most) is the right entry,
        // rewritten; the rest go.
        let right_shard = expected.as_ref().map(|(s, _, _)| *s);
        let up_to_latest = found.get(row).map_or(0, |f| {
            f.iter().filter(|(_, at, _)| *at <= ref_key).count() as u64
        });
        let on_right_shard = found.get(row).map_or(0, |f| {
            let on = f
                .iter()
                .filter(|(s, at, _)| Some(*s) == right_shard && *at <= ref_key);
            on.count() as u64
        });
        done.stale += up_to_latest - on_right_shard.min(1);
        let shards: BTreeSet<u32> = found
            .get(row)
            .map(|f| f.iter().map(|(shard, _, _)| *shard).collect())
            .unwrap_or_default();
        for shard in shards {
            let mut sql = format!(
                "DELETE FROM `{}`.`{entries}` WHERE row_key = ",
                topology.database(shard)
            );
            push_hex(&mut sql, row.as_bytes());
            sql.push_str(&format!(" AND ref_key <= {ref_key}"));
            if let Some((right, value, _)) = &expected {
                if *right == shard {
                    sql.push_str(" AND NOT (shard_value <=> ");
                    push_value(&mut sql, Some(value));
                    sql.push(')');
                }
            }
            entry_statements
                .entry(topology.cluster_index(shard)?)
                .or_default()
                .push(sql);
        }
        // The pointer, last.
        let home = shard_of(row, topology.shard_count);
        let database = topology.database(home);
        let entry_shard = expected
            .as_ref()
            .map_or("NULL".to_string(), |(s, _, _)| s.to_string());
        let mut sql = format!(
            "INSERT INTO `{database}`.`{pointers}` (row_key, entry_shard, ref_key) VALUES ("
        );
        push_hex(&mut sql, row.as_bytes());
        sql.push_str(&format!(
            ",{entry_shard},{ref_key}) ON DUPLICATE KEY UPDATE
               entry_shard = IF(VALUES(ref_key) >= ref_key, VALUES(entry_shard), entry_shard),
               ref_key = GREATEST(ref_key, VALUES(ref_key))"
        ));
        let mut statements = vec![sql];
        if let Some((past, _)) = stored_pointers.get(row).filter(|(at, _)| *at > ref_key) {
            // Past the latest cell read: corrupt, unless that cell was
            // written since.
            let key = CellKey {
                row_key: *row,
                column: spec.column.clone(),
                ref_key: RefKey::new(*past)?,
            };
            if store.get_cell(&key, ReadFrom::Master).await?.is_none() {
                let mut sql = format!(
                    "UPDATE `{database}`.`{pointers}` SET entry_shard = {entry_shard}, ref_key = {ref_key} WHERE row_key = "
                );
                push_hex(&mut sql, row.as_bytes());
                sql.push_str(&format!(" AND ref_key = {past}"));
                statements.push(sql);
                done.corrupt_pointers += 1;
            }
        }
        pointer_statements
            .entry(topology.cluster_index(home)?)
            .or_default()
            .extend(statements);
        done.rows += 1;
    }
    for phase in [entry_statements, pointer_statements] {
        futures::future::try_join_all(phase.into_iter().map(|(cluster, statements)| async move {
            crate::mysql::store::transaction(&topology.clusters[cluster].master(), &statements)
                .await
        }))
        .await?;
    }
    Ok(())
}
