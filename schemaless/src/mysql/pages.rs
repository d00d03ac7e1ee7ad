//! Change-log pages, read for many shards of one node in one statement.
//!
//! Every follower (trigger shard workers, index maintainers, the reverse
//! mirror) reads its shard's next page on its own. Under a steady write
//! load that is one statement per woken shard: `bench index` saw a master
//! answer some 330 page reads a second for 250 cells, each a statement
//! with a window function and its temporary tables, on the same cores the
//! writes need. Here the page reads of one node are combined like the
//! writes of a master ([`super::combine`]): a read that finds the node's
//! lane free goes at once, alone; reads arriving meanwhile go together in
//! the next statement (a `UNION ALL` of each shard's page, the same page
//! query as alone, tagged with its shard), and each gets its own rows.
//!
//! If a combined statement fails, each of its readers reads alone, so a
//! failure (a corrupt shard, a missing table) is that shard's own, with its
//! own error; a lone read's error is returned as it is.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use sqlx::mysql::MySqlRow;
use sqlx::Row;

use super::combine::{Cap, Combined, Combiner};
use super::sql;
use super::topology::Node;
use crate::error::{Error, Result};

/// The most shards one combined statement reads.
const MAX_SHARDS_PER_READ: usize = 32;

/// One shard's page request.
#[derive(Clone)]
pub(super) struct PageRequest {
    /// The shard's database.
    pub(super) database: String,
    /// The page starts after this added_id.
    pub(super) after: u64,
    /// At most this many cells.
    pub(super) limit: usize,
}

/// What a combined read answers each of its requests.
#[derive(Clone)]
enum Page {
    /// This shard's rows, in added_id order.
    Rows(Arc<Vec<MySqlRow>>),
    /// The combined statement failed: read alone.
    Alone,
    /// The lone read failed; its leader holds the error.
    Failed,
}

/// The page readers of a store, one combiner per node (by label).
#[derive(Default)]
pub(super) struct PageReaders {
    by_node: Mutex<HashMap<String, Arc<Combiner<PageRequest, Page>>>>,
    /// Statements sent and pages they read, for the figures.
    statements: AtomicU64,
    pages: AtomicU64,
}

/// What the change-log page reads of a store did so far.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PageStats {
    /// Statements sent.
    pub statements: u64,
    /// Pages (one shard each) they read: more than statements when reads
    /// were combined.
    pub pages: u64,
}

impl PageReaders {
    /// What the reads did so far.
    pub(super) fn stats(&self) -> PageStats {
        PageStats {
            statements: self.statements.load(Ordering::Relaxed),
            pages: self.pages.load(Ordering::Relaxed),
        }
    }

    fn counted(&self, pages: usize) {
        self.statements.fetch_add(1, Ordering::Relaxed);
        self.pages.fetch_add(pages as u64, Ordering::Relaxed);
        metrics::counter!("mezzanine_schemaless_changelog_statements_total").increment(1);
        metrics::counter!("mezzanine_schemaless_changelog_pages_total").increment(pages as u64);
    }
    fn combiner(&self, node: &Node) -> Arc<Combiner<PageRequest, Page>> {
        let mut by_node = self
            .by_node
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        // Looked up before inserting: every page read passes here, and
        // the label is cloned only for a node's first.
        if let Some(combiner) = by_node.get(&node.label) {
            return combiner.clone();
        }
        by_node
            .entry(node.label.clone())
            .or_insert_with(|| Combiner::new(1))
            .clone()
    }

    /// The rows of `request`'s page on `node`, read alone or with other
    /// shards' pages; at most `max_bytes` of bodies past the first row.
    pub(super) async fn read(
        &self,
        node: &Node,
        request: PageRequest,
        max_bytes: usize,
    ) -> Result<Arc<Vec<MySqlRow>>> {
        let mut failure: Option<Error> = None;
        let cap = Cap {
            weight: |_: &PageRequest| 1,
            max: MAX_SHARDS_PER_READ,
        };
        let combined = {
            let failure = &mut failure;
            self.combiner(node)
                .submit(request.clone(), cap, |requests| async move {
                    self.counted(requests.len());
                    match read_pages(node, &requests, max_bytes).await {
                        Ok(pages) => pages.into_iter().map(Page::Rows).collect(),
                        Err(e) if requests.len() == 1 => {
                            *failure = Some(e);
                            vec![Page::Failed]
                        }
                        Err(_) => requests.iter().map(|_| Page::Alone).collect(),
                    }
                })
                .await
        };
        match combined {
            Combined::Answered(Page::Rows(rows)) => Ok(rows),
            Combined::Answered(Page::Failed) => Err(failure.unwrap_or_else(|| {
                Error::Schema("a change-log read failed and lost its error".into())
            })),
            Combined::Answered(Page::Alone) | Combined::Abandoned => {
                self.counted(1);
                Ok(read_pages(node, &[request], max_bytes).await?.remove(0))
            }
        }
    }
}

/// Reads the pages of `requests` (shards of one node) in one statement;
/// each page's rows, in the requests' order.
async fn read_pages(
    node: &Node,
    requests: &[PageRequest],
    max_bytes: usize,
) -> Result<Vec<Arc<Vec<MySqlRow>>>> {
    if let [one] = requests {
        let rows = node
            .fetch_all(sql::select_changes(
                &one.database,
                one.after,
                one.limit,
                max_bytes,
            ))
            .await?;
        return Ok(vec![Arc::new(rows)]);
    }
    // Each part is tagged with its place in `requests`, not its shard:
    // two followers of one shard (two triggers) may ask from two offsets.
    let statement = requests
        .iter()
        .enumerate()
        .map(|(part, r)| {
            format!(
                "({})",
                sql::select_changes_tagged(&r.database, part, r.after, r.limit, max_bytes)
            )
        })
        .collect::<Vec<_>>()
        .join(" UNION ALL ");
    let rows = node.fetch_all(statement).await?;
    let mut by_part: Vec<Vec<MySqlRow>> = requests.iter().map(|_| Vec::new()).collect();
    for row in rows {
        let part: i64 = row
            .try_get(sql::PAGE_PART_COLUMN)
            .map_err(|e| node.error(e))?;
        by_part
            .get_mut(part as usize)
            .ok_or_else(|| Error::Schema(format!("a change-log read answered for part {part}")))?
            .push(row);
    }
    Ok(by_part
        .into_iter()
        .map(|mut rows| {
            // Each part is ordered; the union's order between and within
            // parts is not promised.
            rows.sort_by_key(|row| row.try_get::<u64, _>(0).unwrap_or(0));
            Arc::new(rows)
        })
        .collect())
}
