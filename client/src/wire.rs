//! The workers' JSON, read into the cell API's types, and their error
//! answers into [`schemaless::Error`].

use reqwest::StatusCode;
use schemaless::{
    Answer, Body, Cell, CellKey, CellResult, Conflict, IndexEntry, IndexQuery, ReadFrom, RowKey,
    StoredCell, WriteOutcome,
};
use serde::Deserialize;
use serde_json::{json, Value};
use url::Url;

/// A final answer of a worker.
pub(crate) struct Reply {
    /// Which worker gave it.
    pub worker: String,
    pub status: StatusCode,
    /// The `Mezzanine-Stale` header.
    pub stale: bool,
    pub bytes: bytes::Bytes,
}

impl Reply {
    /// The body as `T`.
    pub fn json<T: serde::de::DeserializeOwned>(&self) -> schemaless::Result<T> {
        serde_json::from_slice(&self.bytes).map_err(|e| schemaless::Error::Remote {
            node: self.worker.clone(),
            code: "bad_answer".into(),
            message: format!("the answer is not the JSON expected: {e}"),
            retryable: false,
        })
    }

    /// A non-200 answer as an error.
    pub fn error(&self) -> schemaless::Error {
        let worker = Url::parse(&self.worker).expect("a worker URL parsed before");
        error(&worker, self.status, &self.bytes)
    }
}

#[derive(Deserialize)]
struct ErrorBody {
    code: String,
    message: String,
    /// A refusal's SQLSTATE, from a worker that sends it.
    #[serde(default)]
    sqlstate: Option<String>,
}

/// An error answer as a store error: bad input stays bad input (the
/// field named as the worker named it), an unsupported call stays
/// unsupported, the rest keep the worker's code.
pub(crate) fn error(worker: &Url, status: StatusCode, bytes: &[u8]) -> schemaless::Error {
    let body = serde_json::from_slice::<ErrorBody>(bytes).unwrap_or_else(|_| ErrorBody {
        code: status
            .canonical_reason()
            .unwrap_or("error")
            .to_lowercase()
            .replace(' ', "_"),
        message: String::from_utf8_lossy(&bytes[..bytes.len().min(512)]).into_owned(),
        sqlstate: None,
    });
    let invalid = |field: &str, message: &str| match &body.sqlstate {
        Some(sqlstate) => schemaless::Error::refused(field, sqlstate, message),
        None => schemaless::Error::invalid(field, message),
    };
    match status {
        StatusCode::BAD_REQUEST | StatusCode::PAYLOAD_TOO_LARGE => {
            match body
                .message
                .strip_prefix("invalid ")
                .and_then(|rest| rest.split_once(": "))
            {
                Some((field, message)) if !field.contains(' ') => invalid(field, message),
                _ => invalid(&body.code, &body.message),
            }
        }
        StatusCode::UNPROCESSABLE_ENTITY if body.code == "unsupported" => {
            schemaless::Error::Unsupported {
                operation: "a worker call",
                reason: body.message,
            }
        }
        _ => schemaless::Error::Remote {
            node: worker.to_string(),
            retryable: crate::retry::retried_status(status),
            code: body.code,
            message: body.message,
        },
    }
}

/// `/v1/info`.
#[derive(Debug, Default, Deserialize)]
pub(crate) struct Info {
    pub shard_count: u32,
    pub mode: String,
    pub max_batch_cells: usize,
    /// Absent from a worker older than the field: 0, keep the default.
    #[serde(default)]
    pub idle_timeout_ms: u64,
}

/// A stored cell as the workers send it.
#[derive(Deserialize)]
pub(crate) struct CellOut {
    row_key: String,
    column: String,
    ref_key: i64,
    body: Value,
    added_id: u64,
    created_at: i64,
}

impl CellOut {
    pub fn stored(self) -> schemaless::Result<StoredCell> {
        Ok(StoredCell {
            cell: Cell::parse(&self.row_key, &self.column, self.ref_key, self.body)?,
            added_id: self.added_id,
            created_at: self.created_at,
        })
    }
}

#[derive(Deserialize)]
pub(crate) struct CellAnswer {
    pub cell: Option<CellOut>,
    pub stale: bool,
}

#[derive(Deserialize)]
struct CellsAnswer {
    cells: Vec<CellOut>,
    stale: bool,
}

/// A `{cells, stale}` answer.
pub(crate) fn cells_answer(reply: &Reply) -> schemaless::Result<Answer<Vec<StoredCell>>> {
    let answer: CellsAnswer = reply.json()?;
    Ok(Answer {
        value: answer
            .cells
            .into_iter()
            .map(CellOut::stored)
            .collect::<schemaless::Result<_>>()?,
        stale: answer.stale || reply.stale,
    })
}

#[derive(Deserialize)]
pub(crate) struct ChangesAnswer {
    pub cells: Vec<CellOut>,
    pub next: u64,
}

#[derive(Deserialize)]
pub(crate) struct EntryOut {
    row_key: String,
    fields: Value,
}

impl EntryOut {
    pub fn entry(self) -> schemaless::Result<IndexEntry> {
        Ok(IndexEntry {
            row_key: RowKey::parse(&self.row_key)?,
            fields: Body::from_value(self.fields)?,
        })
    }
}

#[derive(Deserialize)]
pub(crate) struct EntriesAnswer {
    pub entries: Vec<EntryOut>,
    pub stale: bool,
}

#[derive(Deserialize)]
#[serde(rename_all = "snake_case")]
pub(crate) enum Outcome {
    Written,
    AlreadyPresent,
    Conflict,
    Superseded,
    Buffered,
}

impl Outcome {
    pub fn result(&self, key: &CellKey) -> CellResult {
        match self {
            Outcome::Written => Ok(WriteOutcome::Written),
            Outcome::AlreadyPresent => Ok(WriteOutcome::AlreadyPresent),
            Outcome::Superseded => Ok(WriteOutcome::Superseded),
            Outcome::Buffered => Ok(WriteOutcome::Buffered),
            Outcome::Conflict => Err(Conflict { key: key.clone() }),
        }
    }
}

#[derive(Deserialize)]
pub(crate) struct PutResult {
    pub outcome: Outcome,
}

#[derive(Deserialize)]
pub(crate) struct PutResponse {
    pub results: Vec<PutResult>,
}

/// A cell as `POST /v1/cells` takes it.
pub(crate) fn cell_in(cell: &Cell) -> Value {
    json!({
        "row_key": cell.key.row_key.to_string(),
        "column": cell.key.column.as_str(),
        "ref_key": cell.key.ref_key.get(),
        "body": cell.body.to_value(),
    })
}

/// `?from=`.
pub(crate) fn from(from: ReadFrom) -> &'static str {
    match from {
        ReadFrom::Master => "master",
        ReadFrom::Minion => "minion",
    }
}

/// An index query's body.
pub(crate) fn index_query(query: &IndexQuery, read: ReadFrom) -> Value {
    let op = |op: schemaless::FilterOp| match op {
        schemaless::FilterOp::Eq => "eq",
        schemaless::FilterOp::Lt => "lt",
        schemaless::FilterOp::Le => "le",
        schemaless::FilterOp::Gt => "gt",
        schemaless::FilterOp::Ge => "ge",
        schemaless::FilterOp::In => "in",
    };
    json!({
        "shard_value": query.shard_value,
        "filters": query.filters.iter().map(|f| json!({
            "field": f.field, "op": op(f.op), "value": f.value,
        })).collect::<Vec<_>>(),
        "order_by": query.order_by,
        "descending": query.descending,
        "limit": query.limit.clamp(1, 10_000),
        "from": from(read),
    })
}

/// A path segment, percent-encoded (index names are checked by the
/// worker; this only keeps a strange one from changing the path).
pub(crate) fn segment(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for b in text.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b'~') {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}
