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
//! The check reads each thing once, in two sweeps, a page of a thousand
//! at a time:
//!
//! 1. each home shard's rows: their latest cells and pointers there, and
//!    their entries on the shard each cell's value routes to (one
//!    statement per master): the pointer and the one entry that must be
//!    there;
//! 2. each shard's entries, in row key order: the pointers of their rows
//!    (one statement per master), so that an entry on another shard than
//!    its row's pointer names, or older than it, is found as stale.
//!
//! A row whose pointer is behind its latest cell is one the maintainer
//! has not reached yet: it is looked at again a few times, then reported
//! as behind, which is not a wrong entry but a maintainer that is slow or
//! stopped. The cost is one probe per row and per entry, whatever the
//! shard count.

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
/// cell of its column. `progress` is told each shard done in each sweep
/// (`"rows"` or `"entries"`, the shard, what was found so far).
pub async fn verify(
    store: &MySqlStore,
    name: &str,
    version: u32,
    progress: &(dyn Fn(&str, u32, &IndexCheck) + Sync),
) -> Result<IndexCheck> {
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
        progress("rows", shard, &check);
    }
    for shard in 0..store.topology().shard_count {
        let mut after: Option<RowKey> = None;
        loop {
            let page = shard_entries(store, &spec, version, shard, after.as_ref()).await?;
            let Some((last, _)) = page.last() else {
                break;
            };
            after = Some(*last);
            stale_entries(store, &spec, version, shard, &page, &mut check).await?;
            if page.len() < PAGE {
                break;
            }
        }
        progress("entries", shard, &check);
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
    // Each row's entries on the shard its latest cell's value routes to.
    let mut expected_on: BTreeMap<u32, Vec<&RowKey>> = BTreeMap::new();
    for (row, cell) in &latest {
        if let Some((value, _)) = spec.entry(&cell.cell.body) {
            expected_on
                .entry(shard_of_bytes(&value.routing_bytes(), topology.shard_count))
                .or_default()
                .push(row);
        }
    }
    let entries = read_entries(store, spec, version, &expected_on).await?;
    let mut behind = Vec::new();
    for row in keys {
        let found: &[Stored] = entries.get(row).map_or(&[], Vec::as_slice);
        // A row without a cell of the column has no entry (the second
        // sweep finds one left anywhere).
        let Some(cell) = latest.get(row) else {
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

/// The pointers of `keys`, read on each row's home shard: one statement
/// per master.
pub(super) async fn read_pointers(
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
    let mut by_master: BTreeMap<usize, Vec<String>> = BTreeMap::new();
    for (home, rows) in by_home {
        let mut sql = format!(
            "SELECT row_key, ref_key, entry_shard FROM `{}`.`{table}` WHERE row_key IN (",
            topology.database(home)
        );
        push_keys(&mut sql, &rows);
        by_master
            .entry(topology.cluster_index(home)?)
            .or_default()
            .push(sql);
    }
    let mut pointers = BTreeMap::new();
    for (cluster, statements) in by_master {
        let master = &topology.clusters[cluster].master();
        for r in master.fetch_all(statements.join(" UNION ALL ")).await? {
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

/// The stored entries of rows on given shards (`rows_on`: shard to row
/// keys): one statement per master.
pub(super) async fn read_entries(
    store: &MySqlStore,
    spec: &IndexSpec,
    version: u32,
    rows_on: &BTreeMap<u32, Vec<&RowKey>>,
) -> Result<BTreeMap<RowKey, Vec<Stored>>> {
    let topology = store.topology();
    let table = entry_table(&spec.name, version);
    let mut by_master: BTreeMap<usize, Vec<String>> = BTreeMap::new();
    for (shard, rows) in rows_on {
        let mut sql = format!(
            "SELECT {shard}, row_key, ref_key, fields FROM `{}`.`{table}` WHERE row_key IN (",
            topology.database(*shard)
        );
        push_keys(&mut sql, rows);
        by_master
            .entry(topology.cluster_index(*shard)?)
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

/// A page of `shard`'s entries in row key order, after `after`: each
/// entry's row and ref key.
async fn shard_entries(
    store: &MySqlStore,
    spec: &IndexSpec,
    version: u32,
    shard: u32,
    after: Option<&RowKey>,
) -> Result<Vec<(RowKey, i64)>> {
    let topology = store.topology();
    let mut sql = format!(
        "SELECT row_key, ref_key FROM `{}`.`{}`",
        topology.database(shard),
        entry_table(&spec.name, version)
    );
    if let Some(after) = after {
        sql.push_str(" WHERE row_key > ");
        push_hex(&mut sql, after.as_bytes());
    }
    sql.push_str(&format!(" ORDER BY row_key LIMIT {PAGE}"));
    let master = &topology.cluster(shard)?.master();
    let mut page = Vec::new();
    for r in master.fetch_all(sql).await? {
        let key: Vec<u8> = r.try_get(0).map_err(|e| master.error(e))?;
        let ref_key: i64 = r.try_get(1).map_err(|e| master.error(e))?;
        if let Some(row) = RowKey::from_slice(&key) {
            page.push((row, ref_key));
        }
    }
    Ok(page)
}

/// The entries of `page` (on `shard`) their rows' pointers do not account
/// for: on another shard than the pointer names, or older than it, or of
/// a row with no pointer. Entries on the pointer's shard are the first
/// sweep's; one newer than the pointer is the maintainer's work in flight.
async fn stale_entries(
    store: &MySqlStore,
    spec: &IndexSpec,
    version: u32,
    shard: u32,
    page: &[(RowKey, i64)],
    check: &mut IndexCheck,
) -> Result<()> {
    let rows: Vec<RowKey> = page.iter().map(|(row, _)| *row).collect();
    let pointers = read_pointers(store, spec, version, &rows).await?;
    for (row, ref_key) in page {
        let why = match pointers.get(row) {
            None => format!(
                "a stale entry on shard {shard} (ref key {ref_key}) of a row with no pointer"
            ),
            Some((_, Some(pointed))) if *pointed == shard => continue,
            Some((at, _)) if ref_key > at => continue,
            Some((at, pointed)) => format!(
                "a stale entry on shard {shard} (ref key {ref_key}); its pointer is at ref key {at} and names {}",
                shard_name(*pointed)
            ),
        };
        check.problems.push((*row, why));
    }
    Ok(())
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
