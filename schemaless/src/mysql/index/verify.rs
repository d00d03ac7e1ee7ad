//! Checking a version of an index against the cells it indexes.
//!
//! The maintainer's contract: for every row with a cell of the indexed
//! column, the row's pointer (on its home shard) holds the ref key of the
//! row's latest cell and the shard its entry is on; that entry, on the
//! shard its shard value routes to, carries the latest cell's ref key and
//! its fields; no other entry of the row is left anywhere. (Tombstones are
//! the readers' business: a deleted row's entry stays, and queries through
//! [`crate::tombstone::Tombstoned`] leave it out.)
//!
//! The check sweeps each home shard's row keys a page at a time, reads the
//! rows' latest cells and pointers there and their entries on every shard
//! (one statement per master), and compares. A row whose pointer is behind
//! its latest cell is one the maintainer has not reached yet: it is looked
//! at again a few times, then reported as behind, which is not a wrong
//! entry but a maintainer that is slow or stopped.

use std::collections::BTreeMap;
use std::time::Duration;

use serde_json::Value;
use sqlx::Row;

use super::*;

/// Row keys read per page.
const PAGE: usize = 1000;

/// How many times rows behind are looked at again, and how long apart.
const AGAIN: (usize, Duration) = (10, Duration::from_millis(300));

/// What [`verify`] found.
#[derive(Debug, Default)]
pub struct IndexCheck {
    /// Rows with a cell of the indexed column, checked.
    pub rows: u64,
    /// Entries found where they belong, as they should be.
    pub entries: u64,
    /// Rows whose pointer is still behind their latest cell after the
    /// looks again: the maintainer has not reached them.
    pub behind: Vec<RowKey>,
    /// What is wrong, by row.
    pub problems: Vec<(RowKey, String)>,
}

/// One row's pointer: the ref key its entry reflects and the entry's
/// shard.
type Pointer = (i64, Option<u32>);

/// One stored entry of a row: its shard, ref key and fields.
type Stored = (u32, i64, Value);

/// Checks version `version` of index `name` against every row's latest
/// cell of its column.
pub async fn verify(store: &MySqlStore, name: &str, version: u32) -> Result<IndexCheck> {
    let spec = spec(store, name)?.clone();
    let mut check = IndexCheck::default();
    let mut behind = Vec::new();
    for shard in 0..store.topology().shard_count {
        let mut after: Option<RowKey> = None;
        loop {
            let keys = store
                .shard_row_keys(shard, after.as_ref(), PAGE, ReadFrom::Master)
                .await?;
            let Some(last) = keys.last().copied() else {
                break;
            };
            after = Some(last);
            behind.extend(check_rows(store, &spec, version, &keys, &mut check).await?);
            if keys.len() < PAGE {
                break;
            }
        }
    }
    for _ in 0..AGAIN.0 {
        if behind.is_empty() {
            break;
        }
        tokio::time::sleep(AGAIN.1).await;
        check.rows -= behind.len() as u64;
        behind = check_rows(store, &spec, version, &behind, &mut check).await?;
    }
    check.behind = behind;
    Ok(check)
}

/// Checks the rows `keys` (any shards), adding to `check`; returns the
/// rows whose pointer is behind their latest cell.
async fn check_rows(
    store: &MySqlStore,
    spec: &IndexSpec,
    version: u32,
    keys: &[RowKey],
    check: &mut IndexCheck,
) -> Result<Vec<RowKey>> {
    let topology = store.topology();
    let mut latest: BTreeMap<RowKey, StoredCell> = BTreeMap::new();
    for cell in store
        .column_cells(keys, &spec.column, ReadFrom::Master)
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
    let pointers = read_pointers(store, spec, version, keys).await?;
    let entries = read_entries(store, spec, version, keys).await?;
    let mut behind = Vec::new();
    for row in keys {
        let found: &[Stored] = entries.get(row).map_or(&[], Vec::as_slice);
        let Some(cell) = latest.get(row) else {
            for (shard, ref_key, _) in found {
                check.problems.push((
                    *row,
                    format!(
                        "an entry on shard {shard} (ref key {ref_key}) for a row with no {} cell",
                        spec.column
                    ),
                ));
            }
            continue;
        };
        check.rows += 1;
        let ref_key = cell.cell.key.ref_key.get();
        let pointer = pointers.get(row).copied();
        match pointer {
            None => {
                behind.push(*row);
                continue;
            }
            Some((at, _)) if at < ref_key => {
                behind.push(*row);
                continue;
            }
            Some((at, _)) if at > ref_key => {
                check.problems.push((
                    *row,
                    format!(
                        "its pointer is at ref key {at}, above the latest {} cell's {ref_key}",
                        spec.column
                    ),
                ));
                continue;
            }
            Some(_) => {}
        }
        let expected = spec.entry(&cell.cell.body).map(|(value, fields)| {
            (
                shard_of_bytes(&value.routing_bytes(), topology.shard_count),
                fields.to_value(),
            )
        });
        let pointed = pointer.and_then(|(_, shard)| shard);
        if pointed != expected.as_ref().map(|(shard, _)| *shard) {
            check.problems.push((
                *row,
                format!(
                    "its pointer names {}, its latest cell's shard value routes to {}",
                    shard_name(pointed),
                    shard_name(expected.as_ref().map(|(shard, _)| *shard))
                ),
            ));
        }
        let mut matched = false;
        for (shard, stored_ref, fields) in found {
            let right = expected.as_ref().is_some_and(|(want, want_fields)| {
                want == shard && *stored_ref == ref_key && fields == want_fields
            });
            if right && !matched {
                matched = true;
                check.entries += 1;
                continue;
            }
            let why = match &expected {
                Some((want, want_fields)) if want == shard && *stored_ref == ref_key => format!(
                    "its entry on shard {shard} holds {fields}, its latest cell (ref key {ref_key}) gives {want_fields}"
                ),
                _ => format!(
                    "a stale entry on shard {shard} (ref key {stored_ref}); the latest cell, ref key {ref_key}, {}",
                    match &expected {
                        Some((want, _)) => format!("belongs on shard {want}"),
                        None => "has no shard value".to_string(),
                    }
                ),
            };
            check.problems.push((*row, why));
        }
        if let (Some((want, _)), false) = (&expected, matched) {
            if !found
                .iter()
                .any(|(shard, r, _)| shard == want && *r == ref_key)
            {
                check.problems.push((
                    *row,
                    format!("no entry on shard {want} for its latest cell (ref key {ref_key})"),
                ));
            }
        }
    }
    Ok(behind)
}

fn shard_name(shard: Option<u32>) -> String {
    shard.map_or("no shard".to_string(), |s| format!("shard {s}"))
}

/// The pointers of `keys`, read on each row's home shard.
async fn read_pointers(
    store: &MySqlStore,
    spec: &IndexSpec,
    version: u32,
    keys: &[RowKey],
) -> Result<BTreeMap<RowKey, Pointer>> {
    let topology = store.topology();
    let table = pointer_table(&spec.name, version);
    let mut by_home: BTreeMap<u32, Vec<&RowKey>> = BTreeMap::new();
    for row in keys {
        by_home
            .entry(shard_of(row, topology.shard_count))
            .or_default()
            .push(row);
    }
    let mut pointers = BTreeMap::new();
    for (home, rows) in by_home {
        let mut sql = format!(
            "SELECT row_key, ref_key, entry_shard FROM `{}`.`{table}` WHERE row_key IN (",
            topology.database(home)
        );
        push_keys(&mut sql, &rows);
        let master = &topology.cluster(home)?.master();
        for r in master.fetch_all(sql).await? {
            let key: Vec<u8> = r.try_get(0).map_err(|e| master.error(e))?;
            let ref_key: i64 = r.try_get(1).map_err(|e| master.error(e))?;
            let shard: Option<u32> = r.try_get(2).map_err(|e| master.error(e))?;
            if let Some(row) = RowKey::from_slice(&key) {
                pointers.insert(row, (ref_key, shard));
            }
        }
    }
    Ok(pointers)
}

/// Every stored entry of `keys`, on every shard: one statement per
/// master.
async fn read_entries(
    store: &MySqlStore,
    spec: &IndexSpec,
    version: u32,
    keys: &[RowKey],
) -> Result<BTreeMap<RowKey, Vec<Stored>>> {
    let topology = store.topology();
    let table = entry_table(&spec.name, version);
    let rows: Vec<&RowKey> = keys.iter().collect();
    let mut by_master: BTreeMap<usize, Vec<String>> = BTreeMap::new();
    for shard in 0..topology.shard_count {
        let mut sql = format!(
            "SELECT {shard}, row_key, ref_key, fields FROM `{}`.`{table}` WHERE row_key IN (",
            topology.database(shard)
        );
        push_keys(&mut sql, &rows);
        by_master
            .entry(topology.cluster_index(shard)?)
            .or_default()
            .push(sql);
    }
    let mut entries: BTreeMap<RowKey, Vec<Stored>> = BTreeMap::new();
    for (cluster, statements) in by_master {
        let master = &topology.clusters[cluster].master();
        for r in master.fetch_all(statements.join(" UNION ALL ")).await? {
            let shard: i64 = r.try_get(0).map_err(|e| master.error(e))?;
            let key: Vec<u8> = r.try_get(1).map_err(|e| master.error(e))?;
            let ref_key: i64 = r.try_get(2).map_err(|e| master.error(e))?;
            let text: String = r.try_get(3).map_err(|e| master.error(e))?;
            let Some(row) = RowKey::from_slice(&key) else {
                continue;
            };
            let fields = serde_json::from_str(&text).map_err(|e| Error::Unreadable {
                what: format!("the entry of {row} on shard {shard}"),
                reason: format!("its fields are not JSON: {e}"),
            })?;
            entries
                .entry(row)
                .or_default()
                .push((shard as u32, ref_key, fields));
        }
    }
    Ok(entries)
}

/// Appends `X'..',X'..')`.
fn push_keys(sql: &mut String, rows: &[&RowKey]) {
    for (i, row) in rows.iter().enumerate() {
        if i > 0 {
            sql.push(',');
        }
        push_hex(sql, row.as_bytes());
    }
    sql.push(')');
}
