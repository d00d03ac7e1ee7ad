//! The cell API: one async trait that every store implements (the MySQL
//! store, the in-memory model, later the legacy model and the facade), so
//! callers — and the verifier — never care which store is behind it.

use async_trait::async_trait;
use serde_json::Value;

use crate::cell::{Body, Cell, CellKey, Column, RowKey, StoredCell};
use crate::error::{Error, Result};

/// Which node of a cluster a read goes to.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum ReadFrom {
    /// The master: sees every acknowledged write (read-your-writes).
    #[default]
    Master,
    /// A minion: takes load off the master, but may lag behind it. A
    /// cluster without minions answers from its master.
    Minion,
}

/// A read's answer, and whether it may be older than what the master
/// holds: with a master down (its circuit breaker open), master reads are
/// answered by a minion, which may lag behind it.
#[derive(Clone, Debug, PartialEq)]
pub struct Answer<T> {
    /// What was read.
    pub value: T,
    /// Whether a minion answered a master read: acknowledged writes may be
    /// missing from it (read-your-writes does not hold).
    pub stale: bool,
}

impl<T> Answer<T> {
    /// An answer from the node asked.
    pub fn fresh(value: T) -> Answer<T> {
        Answer {
            value,
            stale: false,
        }
    }
}

/// How a write was taken.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WriteOutcome {
    /// The cell is new and is now stored.
    Written,
    /// The same cell, with the same body, was already stored: an
    /// idempotent success, nothing changed.
    AlreadyPresent,
    /// Accepted and durable on two hosts, but not yet readable because the
    /// shard's master is down (hinted handoff).
    Buffered,
    /// Accepted, but a cell of the same row and column with a higher ref
    /// key is already stored, and this store keeps only the latest (the
    /// legacy model's parent row). Nothing changed; the latest cell is what
    /// every store agrees on, so replays in any order end the same.
    ///
    /// Only the legacy model answers it, yet it belongs to the shared
    /// API: the facade, the reverse mirror and the HTTP workers hand
    /// outcomes through `CellStore` without knowing which store answered,
    /// and a caller must be able to tell "nothing changed because newer
    /// data is there" from `Written` without a second, legacy-only result
    /// type that every generic caller would have to convert.
    Superseded,
}

/// A cell of a batch whose address is taken by a different body. The
/// stored cell is unchanged.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Conflict {
    /// The address.
    pub key: CellKey,
}

impl From<Conflict> for Error {
    fn from(c: Conflict) -> Error {
        Error::Conflict { key: c.key }
    }
}

/// What became of one cell of a `put_cells` batch.
pub type CellResult = std::result::Result<WriteOutcome, Conflict>;

/// One page of a shard's change log.
#[derive(Clone, Debug, PartialEq)]
pub struct ShardPage {
    /// Cells in added_id order.
    pub cells: Vec<StoredCell>,
    /// Where the next call starts (`after` for it): the last added_id
    /// returned, or the `after` given when the page is empty.
    pub next: u64,
}

/// A comparison in an index query's filter.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FilterOp {
    /// `=`
    Eq,
    /// `<`
    Lt,
    /// `<=`
    Le,
    /// `>`
    Gt,
    /// `>=`
    Ge,
    /// `IN`: the value is a JSON array of candidates.
    In,
}

/// One condition on a denormalized field of an index.
#[derive(Clone, Debug, PartialEq)]
pub struct Filter {
    /// The index field compared.
    pub field: String,
    /// How.
    pub op: FilterOp,
    /// With what: a value of the field's type (an array of them for `IN`).
    pub value: Value,
}

/// `query_index`'s question: the entries of one shard-field value.
#[derive(Clone, Debug, PartialEq)]
pub struct IndexQuery {
    /// The index's name, as declared in `[[index]]`.
    pub index: String,
    /// The value of the index's shard field (e.g. one driver's UUID).
    pub shard_value: Value,
    /// All must hold.
    pub filters: Vec<Filter>,
    /// Order by this index field (then by row key); by row key alone when
    /// absent.
    pub order_by: Option<String>,
    /// Largest first instead of smallest first.
    pub descending: bool,
    /// At most this many entries.
    pub limit: usize,
}

/// One entry of an index: a row whose latest cell of the indexed column
/// matches, with the indexed fields of that cell.
#[derive(Clone, Debug, PartialEq)]
pub struct IndexEntry {
    /// The entity.
    pub row_key: RowKey,
    /// The shard field and the denormalized fields, as the cell has them.
    pub fields: Body,
}

/// The Schemaless cell API.
///
/// Writes never overwrite: a cell that exists with the same body is
/// [`WriteOutcome::AlreadyPresent`], with a different body a conflict.
/// Within one `put_cells` batch cells take effect in order, so a second
/// copy of a cell in the same batch is `AlreadyPresent` (or a conflict).
/// The cells one call adds to a shard enter its change log after those of
/// earlier calls, in address order (row key, column, ref key): every writer
/// then takes its locks in the same order, so concurrent overlapping
/// batches wait for each other instead of deadlocking.
#[async_trait]
pub trait CellStore: Send + Sync {
    /// How many shards the instance has.
    fn shard_count(&self) -> u32;

    /// Writes one cell.
    async fn put_cell(&self, cell: Cell) -> Result<WriteOutcome> {
        let mut results = self.put_cells(vec![cell]).await?;
        let result = results.pop().expect("one result per cell");
        result.map_err(Error::from)
    }

    /// Writes a batch; one result per cell, in the batch's order. The whole
    /// batch is validated first: an invalid cell fails the call and nothing
    /// is written.
    async fn put_cells(&self, cells: Vec<Cell>) -> Result<Vec<CellResult>>;

    /// One cell by its full address.
    async fn get_cell(&self, key: &CellKey, from: ReadFrom) -> Result<Option<StoredCell>> {
        Ok(self.get_cell_answer(key, from).await?.value)
    }

    /// The cell of (row, column) with the highest ref key.
    async fn get_cell_latest(
        &self,
        row_key: &RowKey,
        column: &Column,
        from: ReadFrom,
    ) -> Result<Option<StoredCell>> {
        Ok(self
            .get_cell_latest_answer(row_key, column, from)
            .await?
            .value)
    }

    /// The latest cell of every column of a row, ordered by column name.
    async fn get_cells_for_row(&self, row_key: &RowKey, from: ReadFrom) -> Result<Vec<StoredCell>> {
        Ok(self.get_cells_for_row_answer(row_key, from).await?.value)
    }

    /// The shard's change log: up to `limit` cells with added_id > `after`,
    /// in added_id order.
    async fn get_cells_for_shard(
        &self,
        shard: u32,
        after: u64,
        limit: usize,
        from: ReadFrom,
    ) -> Result<ShardPage>;

    // Each read of one row or one index value is implemented once, as its
    // `_answer` form, which says whether the answer may be stale (a
    // minion answered for a master that is down); the plain form drops
    // that. A store that never fails over answers `Answer::fresh`.

    /// [`CellStore::get_cell`], saying whether the answer may be stale.
    async fn get_cell_answer(
        &self,
        key: &CellKey,
        from: ReadFrom,
    ) -> Result<Answer<Option<StoredCell>>>;

    /// [`CellStore::get_cell_latest`], saying whether the answer may be
    /// stale.
    async fn get_cell_latest_answer(
        &self,
        row_key: &RowKey,
        column: &Column,
        from: ReadFrom,
    ) -> Result<Answer<Option<StoredCell>>>;

    /// [`CellStore::get_cells_for_row`], saying whether the answer may be
    /// stale.
    async fn get_cells_for_row_answer(
        &self,
        row_key: &RowKey,
        from: ReadFrom,
    ) -> Result<Answer<Vec<StoredCell>>>;

    /// Every stored cell of `column` in these rows: every ref key, in
    /// address order. Tombstones are read this way (see
    /// [`crate::tombstone`]), and so is the history a hidden latest cell
    /// falls back on.
    async fn get_column_cells(
        &self,
        rows: &[RowKey],
        column: &Column,
        from: ReadFrom,
    ) -> Result<Vec<StoredCell>> {
        Ok(self
            .get_column_cells_answer(rows, column, from)
            .await?
            .value)
    }

    /// [`CellStore::get_column_cells`], saying whether the answer may be
    /// stale. A store that cannot answer says so with
    /// [`Error::Unsupported`].
    async fn get_column_cells_answer(
        &self,
        rows: &[RowKey],
        column: &Column,
        from: ReadFrom,
    ) -> Result<Answer<Vec<StoredCell>>> {
        let _ = (rows, from);
        Err(Error::Unsupported {
            operation: "get_column_cells",
            reason: format!("this store cannot list every version of column {column}"),
        })
    }

    /// Entries of a secondary index for one shard-field value, filtered,
    /// ordered and limited.
    async fn query_index(&self, query: &IndexQuery, from: ReadFrom) -> Result<Vec<IndexEntry>> {
        Ok(self.query_index_answer(query, from).await?.value)
    }

    /// [`CellStore::query_index`], saying whether the answer may be stale.
    /// A store that cannot answer index queries says so with
    /// [`Error::Unsupported`].
    async fn query_index_answer(
        &self,
        query: &IndexQuery,
        from: ReadFrom,
    ) -> Result<Answer<Vec<IndexEntry>>> {
        let _ = from;
        Err(Error::Unsupported {
            operation: "query_index",
            reason: format!(
                "this store does not maintain secondary indexes (asked for index {:?})",
                query.index
            ),
        })
    }
}

/// A shared store is a store: wrappers such as
/// [`crate::tombstone::Tombstoned`] then take an `Arc<dyn CellStore>` as
/// readily as a concrete one. Every call is the inner store's own.
#[async_trait]
impl<T: CellStore + ?Sized> CellStore for std::sync::Arc<T> {
    fn shard_count(&self) -> u32 {
        (**self).shard_count()
    }

    async fn put_cells(&self, cells: Vec<Cell>) -> Result<Vec<CellResult>> {
        (**self).put_cells(cells).await
    }

    async fn get_cells_for_shard(
        &self,
        shard: u32,
        after: u64,
        limit: usize,
        from: ReadFrom,
    ) -> Result<ShardPage> {
        (**self)
            .get_cells_for_shard(shard, after, limit, from)
            .await
    }

    async fn get_cell_answer(
        &self,
        key: &CellKey,
        from: ReadFrom,
    ) -> Result<Answer<Option<StoredCell>>> {
        (**self).get_cell_answer(key, from).await
    }

    async fn get_cell_latest_answer(
        &self,
        row_key: &RowKey,
        column: &Column,
        from: ReadFrom,
    ) -> Result<Answer<Option<StoredCell>>> {
        (**self).get_cell_latest_answer(row_key, column, from).await
    }

    async fn get_cells_for_row_answer(
        &self,
        row_key: &RowKey,
        from: ReadFrom,
    ) -> Result<Answer<Vec<StoredCell>>> {
        (**self).get_cells_for_row_answer(row_key, from).await
    }

    async fn get_column_cells_answer(
        &self,
        rows: &[RowKey],
        column: &Column,
        from: ReadFrom,
    ) -> Result<Answer<Vec<StoredCell>>> {
        (**self).get_column_cells_answer(rows, column, from).await
    }

    async fn query_index_answer(
        &self,
        query: &IndexQuery,
        from: ReadFrom,
    ) -> Result<Answer<Vec<IndexEntry>>> {
        (**self).query_index_answer(query, from).await
    }
}
