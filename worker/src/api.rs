//! The JSON of the HTTP API: requests and answers, with their OpenAPI
//! schemas. Bodies and field values are JSON exactly as stored (numbers
//! keep every digit); row keys are UUID text.

use schemaless::{CellResult, FilterOp, StoredCell, WriteOutcome};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use utoipa::{IntoParams, ToSchema};

/// The pattern of a row key: a UUID in its canonical hyphenated form,
/// the only form the API takes.
pub const ROW_KEY_PATTERN: &str =
    "^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$";

/// The pattern of a column name.
pub const COLUMN_PATTERN: &str = "^[A-Za-z0-9_]{1,64}$";

/// Whether `text` is a UUID in canonical hyphenated form (the uuid crate
/// also takes braces, URNs and bare hex; the API's document promises
/// one form, and takes only it).
pub fn is_canonical_uuid(text: &str) -> bool {
    text.len() == 36
        && text.bytes().enumerate().all(|(i, b)| match i {
            8 | 13 | 18 | 23 => b == b'-',
            _ => b.is_ascii_hexdigit(),
        })
}

/// A cell to write.
#[derive(Debug, Deserialize, Serialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CellIn {
    /// The entity: a UUID.
    #[schema(format = Uuid, pattern = "^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$")]
    pub row_key: String,
    /// The column: 1–64 characters of `[A-Za-z0-9_]`.
    #[schema(pattern = "^[A-Za-z0-9_]{1,64}$")]
    pub column: String,
    /// The version; the latest cell of a (row, column) has the highest.
    #[schema(minimum = 0)]
    #[serde(deserialize_with = "integer")]
    pub ref_key: i64,
    /// The cell's immutable value: a JSON object.
    #[schema(value_type = Object)]
    pub body: Value,
}

/// `POST /v1/cells`.
#[derive(Debug, Deserialize, Serialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct PutRequest {
    /// The batch, written in order. The whole batch is checked first: one
    /// invalid cell fails the request and nothing is written.
    pub cells: Vec<CellIn>,
}

/// What became of one cell.
#[derive(Clone, Copy, Debug, Deserialize, Serialize, ToSchema, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum Outcome {
    /// Stored now.
    Written,
    /// The same cell was already stored: an idempotent success.
    AlreadyPresent,
    /// A different body holds the address; nothing changed.
    Conflict,
    /// The legacy model keeps only the latest, and a higher ref key is
    /// stored; nothing changed.
    Superseded,
    /// Durable on two hosts, readable once the shard's master is back.
    Buffered,
}

impl From<&CellResult> for Outcome {
    fn from(r: &CellResult) -> Outcome {
        match r {
            Ok(WriteOutcome::Written) => Outcome::Written,
            Ok(WriteOutcome::AlreadyPresent) => Outcome::AlreadyPresent,
            Ok(WriteOutcome::Superseded) => Outcome::Superseded,
            Ok(WriteOutcome::Buffered) => Outcome::Buffered,
            Err(_) => Outcome::Conflict,
        }
    }
}

impl Outcome {
    /// The snake_case name, as in JSON and metrics.
    pub fn as_str(&self) -> &'static str {
        match self {
            Outcome::Written => "written",
            Outcome::AlreadyPresent => "already_present",
            Outcome::Conflict => "conflict",
            Outcome::Superseded => "superseded",
            Outcome::Buffered => "buffered",
        }
    }
}

/// One cell's result.
#[derive(Debug, Deserialize, Serialize, ToSchema)]
pub struct PutResult {
    /// What became of it.
    pub outcome: Outcome,
}

/// The answer to `POST /v1/cells`: one result per cell, in order.
#[derive(Debug, Deserialize, Serialize, ToSchema)]
pub struct PutResponse {
    /// In the batch's order.
    pub results: Vec<PutResult>,
}

/// A stored cell.
#[derive(Debug, Deserialize, Serialize, ToSchema)]
pub struct CellOut {
    /// The entity.
    #[schema(format = Uuid)]
    pub row_key: String,
    /// The column.
    pub column: String,
    /// The version.
    pub ref_key: i64,
    /// The value.
    #[schema(value_type = Object)]
    pub body: Value,
    /// Position in its shard's change log (0 where the store has none).
    pub added_id: u64,
    /// When it was first written, microseconds since the Unix epoch.
    pub created_at: i64,
}

impl From<&StoredCell> for CellOut {
    fn from(s: &StoredCell) -> CellOut {
        CellOut {
            row_key: s.cell.key.row_key.to_string(),
            column: s.cell.key.column.to_string(),
            ref_key: s.cell.key.ref_key.get(),
            body: s.cell.body.to_value(),
            added_id: s.added_id,
            created_at: s.created_at,
        }
    }
}

/// The answer to a one-cell read.
#[derive(Debug, Deserialize, Serialize, ToSchema)]
pub struct CellAnswer {
    /// The cell, or null when there is none.
    pub cell: Option<CellOut>,
    /// A minion answered for a master that is down: acknowledged writes
    /// may be missing. The `Mezzanine-Stale` header says the same.
    pub stale: bool,
}

/// The answer to a read of several cells.
#[derive(Debug, Deserialize, Serialize, ToSchema)]
pub struct CellsAnswer {
    /// The cells.
    pub cells: Vec<CellOut>,
    /// As in [`CellAnswer::stale`].
    pub stale: bool,
}

/// `POST /v1/columns/{column}/cells`.
#[derive(Debug, Deserialize, Serialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ColumnCellsRequest {
    /// The rows (UUIDs), at most `limits.max_batch_cells`.
    #[schema(value_type = Vec<RowKeyText>)]
    pub rows: Vec<String>,
    /// `master` (default) or `minion`.
    #[serde(default)]
    pub from: Source,
}

/// The answer to a change-log read.
#[derive(Debug, Deserialize, Serialize, ToSchema)]
pub struct ChangesAnswer {
    /// Cells in added_id order.
    pub cells: Vec<CellOut>,
    /// `after` for the next page.
    pub next: u64,
    /// As in [`CellAnswer::stale`].
    pub stale: bool,
}

/// Which node answers a read.
#[derive(Clone, Copy, Debug, Default, Deserialize, Serialize, ToSchema, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum Source {
    /// The master: read-your-writes.
    #[default]
    Master,
    /// A minion: may lag behind the master.
    Minion,
}

impl Source {
    /// The store's form.
    pub fn read_from(self) -> schemaless::ReadFrom {
        match self {
            Source::Master => schemaless::ReadFrom::Master,
            Source::Minion => schemaless::ReadFrom::Minion,
        }
    }
}

/// `?from=` of the reads.
#[derive(Debug, Default, Deserialize, IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct ReadParams {
    /// `master` (default) or `minion`.
    #[serde(default)]
    pub from: Source,
}

/// A row key in the canonical form of a UUID.
#[derive(ToSchema)]
#[schema(format = Uuid, pattern = "^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$")]
pub struct RowKeyText(pub String);

/// `?after=&limit=&from=` of a change-log read.
#[derive(Debug, Deserialize, IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct ChangesParams {
    /// Cells with a higher added_id than this (0: from the start).
    #[serde(default)]
    #[param(minimum = 0)]
    pub after: i64,
    /// At most this many cells, 1–10000. Default 100.
    #[serde(default = "default_limit")]
    #[param(minimum = 1, maximum = 10000)]
    pub limit: usize,
    /// `master` (default) or `minion`.
    #[serde(default)]
    pub from: Source,
}

fn default_limit() -> usize {
    100
}

/// An integer, also when written with a zero fraction (`823.0`): JSON
/// Schema counts that an integer, so a client may send it.
fn integer<'de, D, T>(deserializer: D) -> Result<T, D::Error>
where
    D: serde::Deserializer<'de>,
    T: TryFrom<i128>,
{
    use serde::de::Error;
    let number = serde_json::Number::deserialize(deserializer)?;
    let text = number.to_string();
    let whole = match text.split_once('.') {
        Some((whole, fraction)) if fraction.bytes().all(|b| b == b'0') => whole,
        Some(_) => return Err(D::Error::custom(format!("{text} is not an integer"))),
        None if text.contains(['e', 'E']) => {
            return Err(D::Error::custom(format!("{text} is not an integer")))
        }
        None => &text,
    };
    whole
        .parse::<i128>()
        .ok()
        .and_then(|n| T::try_from(n).ok())
        .ok_or_else(|| D::Error::custom(format!("{text} is out of range")))
}

/// The most entries or cells one page returns.
pub const MAX_PAGE: usize = 10_000;

/// A comparison of an index query, as the HTTP API spells it: the wire
/// twin of [`FilterOp`], so that the OpenAPI schema (`ToSchema`) and the
/// lowercase names stay out of the store crate.
#[derive(Clone, Copy, Debug, Deserialize, Serialize, ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum Op {
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
    /// One of an array of values.
    In,
}

impl From<Op> for FilterOp {
    fn from(op: Op) -> FilterOp {
        match op {
            Op::Eq => FilterOp::Eq,
            Op::Lt => FilterOp::Lt,
            Op::Le => FilterOp::Le,
            Op::Gt => FilterOp::Gt,
            Op::Ge => FilterOp::Ge,
            Op::In => FilterOp::In,
        }
    }
}

impl From<FilterOp> for Op {
    fn from(op: FilterOp) -> Op {
        match op {
            FilterOp::Eq => Op::Eq,
            FilterOp::Lt => Op::Lt,
            FilterOp::Le => Op::Le,
            FilterOp::Gt => Op::Gt,
            FilterOp::Ge => Op::Ge,
            FilterOp::In => Op::In,
        }
    }
}

/// One condition on an index field.
#[derive(Debug, Deserialize, Serialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct FilterIn {
    /// The index field.
    pub field: String,
    /// How it is compared.
    pub op: Op,
    /// With what: a value of the field's type (an array for `in`).
    pub value: Value,
}

/// `POST /v1/indexes/{index}/query`.
#[derive(Debug, Deserialize, Serialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct IndexQueryIn {
    /// The value of the index's shard field.
    pub shard_value: Value,
    /// All must hold.
    #[serde(default)]
    pub filters: Vec<FilterIn>,
    /// Order by this index field (then by row key); by row key when absent.
    #[serde(default)]
    pub order_by: Option<String>,
    /// Largest first.
    #[serde(default)]
    pub descending: bool,
    /// At most this many entries, 1–10000. Default 100.
    #[serde(default = "default_limit", deserialize_with = "integer")]
    #[schema(minimum = 1, maximum = 10000)]
    pub limit: usize,
    /// `master` (default) or `minion`.
    #[serde(default)]
    pub from: Source,
}

/// One index entry.
#[derive(Debug, Deserialize, Serialize, ToSchema)]
pub struct EntryOut {
    /// The entity.
    #[schema(format = Uuid)]
    pub row_key: String,
    /// The shard field and the denormalized fields.
    #[schema(value_type = Object)]
    pub fields: Value,
}

/// The answer to an index query.
#[derive(Debug, Deserialize, Serialize, ToSchema)]
pub struct EntriesAnswer {
    /// The entries, in the order asked.
    pub entries: Vec<EntryOut>,
    /// As in [`CellAnswer::stale`].
    pub stale: bool,
}

/// `GET /v1/info`: what a client needs to know of the instance.
#[derive(Debug, Deserialize, Serialize, ToSchema)]
pub struct Info {
    /// The instance's name.
    pub instance: String,
    /// How many shards it has.
    pub shard_count: u32,
    /// The mode calls are routed by now.
    pub mode: String,
    /// `limits.max_batch_cells`.
    pub max_batch_cells: usize,
    /// `limits.max_body_bytes`.
    pub max_body_bytes: usize,
    /// How long the worker keeps an idle keep-alive connection open
    /// (`worker.header_read_timeout_ms`: the wait for a request's headers
    /// starts when the previous answer is sent). A client drops a pooled
    /// connection before then, so it never sends on one being closed.
    pub idle_timeout_ms: u64,
    /// The worker's version.
    pub version: String,
}

/// One store's readiness.
#[derive(Debug, Deserialize, Serialize, ToSchema)]
pub struct CheckOut {
    /// `legacy` or `schemaless:<cluster>`.
    pub store: String,
    /// Whether it answered.
    pub ok: bool,
    /// What failed or is degraded.
    pub detail: Option<String>,
}

/// `GET /readyz`.
#[derive(Debug, Deserialize, Serialize, ToSchema)]
pub struct Ready {
    /// Every store the mode uses answered.
    pub ready: bool,
    /// The current mode.
    pub mode: String,
    /// One check per store the mode uses.
    pub checks: Vec<CheckOut>,
}
