//! Following one shard's change log in added_id order without losing a
//! cell that is still being committed.
//!
//! added_id is an auto-increment key: it is handed out when a row is
//! inserted, not when its transaction commits. Two writers on one shard
//! can commit out of order, so a reader may see added_id 11 while 10 is
//! still invisible; a follower that moved its offset to 11 would never see
//! 10. Holes are also permanent when a transaction rolls back (the store's
//! fast path does, on a duplicate), so waiting for every hole to fill would
//! stall for ever.
//!
//! At a hole (with every further hole of the page read, settled together)
//! the follower therefore:
//! 1. gives in-flight commits a moment ([`HOLE_GRACE`]);
//! 2. reads the range from the hole to the page's last cell on the master
//!    with `LOCK IN SHARE MODE`,
//!    which waits for every transaction holding an uncommitted row there;
//! 3. reading from a minion, waits until the minion has applied
//!    everything the master had (`MASTER_GTID_WAIT`);
//! 4. delivers what that range holds now, and remembers the ids still
//!    missing as *awaited* (ranges, bounded: [`super::awaited`]).
//!
//! One race is left: a multi-row `INSERT` takes all its ids first and
//! inserts its rows one by one, so an id may be taken while its row holds
//! no lock yet. Awaited ids are looked up again every
//! [`RECHECK_INTERVAL`] for [`AWAIT_HORIZON`]; a cell that turns up is
//! delivered then, after cells with higher added_ids. Delivery is thus in
//! added_id order except for such late cells, and at least once for every
//! cell committed within the horizon. The awaited ids are part of the
//! follower's position ([`ShardFollower::awaited`]), saved with the offset.
//!
//! (`information_schema.INNODB_TRX` looked like the way to know that no
//! transaction can still fill a hole, but on MariaDB 10.11 it keeps showing
//! transactions that have long committed.)

use std::time::{Duration, Instant};

use sqlx::Row;

use super::awaited::Awaited;
use super::store::MySqlStore;
use super::topology::Node;
use crate::api::ReadFrom;
use crate::cell::StoredCell;
use crate::error::Result;

/// How long a hole may stay open before the follower looks into it:
/// commits racing each other finish well within it.
pub const HOLE_GRACE: Duration = Duration::from_millis(2);

/// How often awaited ids are looked up again.
pub const RECHECK_INTERVAL: Duration = Duration::from_millis(500);

/// How long a missing id is awaited before it is taken as rolled back.
pub const AWAIT_HORIZON: Duration = Duration::from_secs(600);

/// Holes seen in the change log, settled together.
#[derive(Clone, Debug)]
struct Hole {
    /// The first missing added_id (the offset + 1 when it was seen).
    first: u64,
    /// Just past the last cell of the page read when it was seen: every
    /// hole below is settled at once.
    end: u64,
    /// When it was seen.
    seen: Instant,
}

/// A reader of one shard's change log that does not lose cells still
/// being committed.
pub struct ShardFollower {
    store: MySqlStore,
    shard: u32,
    /// The node read from: the master, or one minion kept for the whole
    /// follow so that its log only moves forward.
    node: Node,
    from_minion: bool,
    offset: u64,
    hole: Option<Hole>,
    /// Missing ids below the offset, with when they were given up on.
    awaited: Awaited,
    rechecked: Instant,
    /// Whether the last read left nothing to read at once (see
    /// [`ShardFollower::at_end`]).
    at_end: bool,
}

impl ShardFollower {
    /// Follows `shard` from just after `offset`, still awaiting `awaited`.
    pub fn new(
        store: MySqlStore,
        shard: u32,
        offset: u64,
        awaited: Awaited,
        from: ReadFrom,
    ) -> Result<ShardFollower> {
        let cluster = store.topology().cluster(shard)?;
        let node = Node::clone(&*store.topology().reader(shard, from)?);
        let from_minion = node.label != cluster.master().label;
        let now = Instant::now();
        Ok(ShardFollower {
            store,
            shard,
            node,
            from_minion,
            offset,
            hole: None,
            awaited,
            rechecked: now,
            at_end: false,
        })
    }

    /// The added_id of the last cell delivered or given up on.
    pub fn offset(&self) -> u64 {
        self.offset
    }

    /// Ids below the offset still awaited (save them with the offset).
    pub fn awaited(&self) -> &Awaited {
        &self.awaited
    }

    /// Whether the last [`ShardFollower::next`] left nothing to read at
    /// once: its page was not cut (by the limit or by bytes) and was taken
    /// whole, or it found a hole to give time. A caller may then wait for
    /// the next write instead of reading again.
    pub fn at_end(&self) -> bool {
        self.at_end
    }

    /// The shard followed.
    pub fn shard(&self) -> u32 {
        self.shard
    }

    /// Up to `limit` next cells: late arrivals first, then the log in
    /// added_id order. Empty when there is nothing new yet.
    pub async fn next(&mut self, limit: usize) -> Result<Vec<StoredCell>> {
        let mut out = self.late_arrivals().await?;
        let (cells, cut) = self
            .store
            .read_changes(&self.node, self.shard, self.offset, limit)
            .await?;
        let contiguous = contiguous_run(self.offset, &cells);
        self.at_end = true;
        if contiguous > 0 || cells.is_empty() {
            self.at_end = !cut && contiguous == cells.len();
            out.extend(cells.into_iter().take(contiguous));
            if let Some(last) = out.last().filter(|c| c.added_id > self.offset) {
                self.offset = last.added_id;
                self.hole = None;
            }
            return Ok(out);
        }
        // A hole right after the offset, and maybe more in the page: all
        // of them are settled at once, up to the page's last cell (one at
        // a time, a log with 100,000 holes took as many polls).
        let first = self.offset + 1;
        let hole = match &self.hole {
            Some(h) if h.first == first => h.clone(),
            _ => {
                self.hole = Some(Hole {
                    first,
                    end: cells.last().map_or(first, |c| c.added_id + 1),
                    seen: Instant::now(),
                });
                return Ok(out);
            }
        };
        if hole.seen.elapsed() < HOLE_GRACE {
            return Ok(out);
        }
        self.settle(&hole).await?;
        let (cells, cut) = self
            .store
            .read_changes(&self.node, self.shard, self.offset, limit)
            .await?;
        let page = cells.len();
        let now = Instant::now();
        // A page cut short by bytes ends before the hole's end (a cell
        // was there): the rest is read next time, not taken for missing.
        let hole = Hole {
            end: match cells.last() {
                Some(last) if last.added_id + 1 < hole.end => last.added_id + 1,
                _ => hole.end,
            },
            ..hole
        };
        let mut expected = self.offset + 1;
        let mut taken = 0;
        for cell in cells {
            if cell.added_id >= hole.end && cell.added_id != expected {
                break;
            }
            if expected < cell.added_id {
                self.awaited.insert(expected, cell.added_id - 1, now);
            }
            expected = cell.added_id + 1;
            self.offset = cell.added_id;
            out.push(cell);
            taken += 1;
        }
        self.at_end = !cut && taken == page;
        if expected < hole.end {
            self.awaited.insert(expected, hole.end - 1, now);
            self.offset = self.offset.max(hole.end - 1);
        }
        self.hole = None;
        Ok(out)
    }

    /// Waits for the transactions that hold uncommitted rows in the hole,
    /// and for the minion read from to apply what the master has.
    async fn settle(&self, hole: &Hole) -> Result<()> {
        let master = &self.store.topology().cluster(self.shard)?.master();
        let database = self.store.topology().database(self.shard);
        master
            .fetch_all(format!(
                "SELECT added_id FROM `{database}`.`entity`
                 WHERE added_id >= {} AND added_id < {} LOCK IN SHARE MODE",
                hole.first, hole.end
            ))
            .await?;
        if !self.from_minion {
            return Ok(());
        }
        let position = master.gtid_binlog_pos().await?;
        let query = sqlx::query("SELECT MASTER_GTID_WAIT(?, ?)")
            .bind(position)
            .bind(self.node.request_timeout.as_secs_f64() / 2.0);
        let reached: Option<i64> = match self.node.fetch_optional(query).await? {
            Some(row) => row.try_get(0).map_err(|e| self.node.error(e))?,
            None => None,
        };
        if reached != Some(0) {
            return Err(crate::error::Error::Timeout {
                node: self.node.label.clone(),
                after: self.node.request_timeout / 2,
            });
        }
        Ok(())
    }

    /// Awaited cells that have turned up; forgets ids awaited too long.
    async fn late_arrivals(&mut self) -> Result<Vec<StoredCell>> {
        if self.awaited.is_empty() || self.rechecked.elapsed() < RECHECK_INTERVAL {
            return Ok(Vec::new());
        }
        self.rechecked = Instant::now();
        self.awaited.expire(AWAIT_HORIZON);
        let ranges = self.awaited.next_page();
        if ranges.is_empty() {
            return Ok(Vec::new());
        }
        let found = self
            .store
            .read_changes_in(&self.node, self.shard, &ranges)
            .await?;
        for cell in &found {
            tracing::info!(
                shard = self.shard,
                "late cell {} (added_id {}) delivered after the log moved past it",
                cell.cell.key,
                cell.added_id
            );
            self.awaited.remove(cell.added_id);
        }
        Ok(found)
    }
}

/// How many cells, from the first, continue `offset` without a gap.
fn contiguous_run(offset: u64, cells: &[StoredCell]) -> usize {
    cells
        .iter()
        .enumerate()
        .take_while(|(i, c)| c.added_id == offset + 1 + *i as u64)
        .count()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cell::{Body, Cell, Column, RefKey, RowKey};

    fn at(added_id: u64) -> StoredCell {
        StoredCell {
            cell: Cell::new(
                RowKey::random(),
                Column::new("A").unwrap(),
                RefKey::new(1).unwrap(),
                Body::from_value(serde_json::json!({})).unwrap(),
            ),
            added_id,
            created_at: 0,
        }
    }

    #[test]
    fn a_run_stops_at_the_first_gap() {
        let cells: Vec<StoredCell> = [5, 6, 7, 9, 10].into_iter().map(at).collect();
        assert_eq!(contiguous_run(4, &cells), 3);
        assert_eq!(contiguous_run(3, &cells), 0);
        assert_eq!(contiguous_run(4, &[]), 0);
    }
}
