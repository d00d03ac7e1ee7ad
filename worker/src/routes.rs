//! The handlers of `/v1`, `/healthz` and `/readyz`: each turns JSON into
//! a cell API call on the worker's store and the answer back into JSON.
//! Input is checked here before the store sees it, so that bad input is
//! always a 4xx naming the field, and nothing is written.

use std::sync::Arc;

use axum::extract::State;
use axum::http::{HeaderName, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use schemaless::{Cell, CellKey, Column, Filter, IndexQuery, RefKey, RowKey};

use crate::api::*;
use crate::backend::Backend;
use crate::error::{ApiError, Json, Path, Query};
use crate::openapi::Errors;

/// The header that says a read may be stale (`true`) or not (`false`).
pub const STALE_HEADER: HeaderName = HeaderName::from_static("mezzanine-stale");

/// What the handlers share.
pub struct App {
    /// The facade (or any store) calls go to.
    pub store: Arc<dyn Backend>,
    /// `[limits]`, checked before a call reaches the store.
    pub limits: config::Limits,
    /// `instance.name`.
    pub instance: String,
    /// The names of `[[index]]`: a query of another is a 404.
    pub indexes: Vec<String>,
    /// `worker.header_read_timeout_ms`, which also closes an idle
    /// keep-alive connection: clients drop pooled connections sooner.
    pub idle_timeout_ms: u64,
}

type Shared = State<Arc<App>>;

fn with_stale<T: serde::Serialize>(stale: bool, body: T) -> Response {
    (
        [(
            STALE_HEADER,
            HeaderValue::from_static(if stale { "true" } else { "false" }),
        )],
        axum::Json(body),
    )
        .into_response()
}

fn row_key(text: &str) -> Result<RowKey, ApiError> {
    if !is_canonical_uuid(text) {
        return Err(ApiError::invalid(format!(
            "invalid row_key: {text:?} is not a UUID in the form xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx"
        )));
    }
    RowKey::parse(text).map_err(ApiError::from)
}

fn column(text: &str) -> Result<Column, ApiError> {
    Column::new(text).map_err(ApiError::from)
}

fn page(limit: usize) -> Result<usize, ApiError> {
    if limit == 0 || limit > MAX_PAGE {
        return Err(ApiError::invalid(format!(
            "invalid limit: {limit} is not between 1 and {MAX_PAGE}"
        )));
    }
    Ok(limit)
}

/// Writes a batch of cells.
#[utoipa::path(
    post, path = "/v1/cells", tag = "cells",
    request_body = PutRequest,
    responses((status = 200, description = "One result per cell, in order", body = PutResponse), Errors),
    security(("bearer" = []))
)]
pub async fn put_cells(
    State(app): Shared,
    Json(request): Json<PutRequest>,
) -> Result<axum::Json<PutResponse>, ApiError> {
    let limits = &app.limits;
    if request.cells.len() > limits.max_batch_cells {
        return Err(ApiError::too_large(format!(
            "invalid cells: a batch of {} cells exceeds limits.max_batch_cells = {}",
            request.cells.len(),
            limits.max_batch_cells
        )));
    }
    let mut cells = Vec::with_capacity(request.cells.len());
    for (i, c) in request.cells.into_iter().enumerate() {
        if !is_canonical_uuid(&c.row_key) {
            return Err(ApiError::invalid(format!(
                "invalid cells[{i}].row_key: {:?} is not a UUID in the form xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx",
                c.row_key
            )));
        }
        let cell = Cell::parse(&c.row_key, &c.column, c.ref_key, c.body)
            .map_err(|e| ApiError::from(e.in_batch(i)))?;
        let bytes = cell.body.json_len();
        if bytes > limits.max_body_bytes {
            return Err(ApiError::too_large(format!(
                "invalid cells[{i}].body: {bytes} bytes exceeds limits.max_body_bytes = {}",
                limits.max_body_bytes
            )));
        }
        cells.push(cell);
    }
    let results = app.store.put_cells(cells).await?;
    let results: Vec<PutResult> = results
        .iter()
        .map(|r| {
            let outcome = Outcome::from(r);
            metrics::counter!("mezzanine_worker_cells_total", "outcome" => outcome.as_str())
                .increment(1);
            PutResult { outcome }
        })
        .collect();
    Ok(axum::Json(PutResponse { results }))
}

/// One cell by its full address.
#[utoipa::path(
    get, path = "/v1/rows/{row_key}/columns/{column}/refs/{ref_key}", tag = "cells",
    params(
        ("row_key" = String, Path, format = Uuid, pattern = "^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$", description = "The row key (a UUID)"),
        ("column" = String, Path, pattern = "^[A-Za-z0-9_]{1,64}$", description = "The column"),
        ("ref_key" = i64, Path, minimum = 0, description = "The ref key"),
        ReadParams
    ),
    responses((status = 200, description = "The cell, or null", body = CellAnswer,
        headers(("mezzanine-stale" = String, description = "`true` when a minion answered for a master that is down"))), Errors),
    security(("bearer" = []))
)]
pub async fn get_cell(
    State(app): Shared,
    Path((row, col, reference)): Path<(String, String, i64)>,
    Query(params): Query<ReadParams>,
) -> Result<Response, ApiError> {
    let key = CellKey {
        row_key: row_key(&row)?,
        column: column(&col)?,
        ref_key: RefKey::new(reference)?,
    };
    let answer = app
        .store
        .get_cell_answer(&key, params.from.read_from())
        .await?;
    Ok(with_stale(
        answer.stale,
        CellAnswer {
            cell: answer.value.as_ref().map(CellOut::from),
            stale: answer.stale,
        },
    ))
}

/// The latest cell of a row's column.
#[utoipa::path(
    get, path = "/v1/rows/{row_key}/columns/{column}/latest", tag = "cells",
    params(
        ("row_key" = String, Path, format = Uuid, pattern = "^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$", description = "The row key (a UUID)"),
        ("column" = String, Path, pattern = "^[A-Za-z0-9_]{1,64}$", description = "The column"),
        ReadParams
    ),
    responses((status = 200, description = "The cell with the highest ref key, or null", body = CellAnswer,
        headers(("mezzanine-stale" = String, description = "`true` when a minion answered for a master that is down"))), Errors),
    security(("bearer" = []))
)]
pub async fn get_latest(
    State(app): Shared,
    Path((row, col)): Path<(String, String)>,
    Query(params): Query<ReadParams>,
) -> Result<Response, ApiError> {
    let (row, col) = (row_key(&row)?, column(&col)?);
    let answer = app
        .store
        .get_cell_latest_answer(&row, &col, params.from.read_from())
        .await?;
    Ok(with_stale(
        answer.stale,
        CellAnswer {
            cell: answer.value.as_ref().map(CellOut::from),
            stale: answer.stale,
        },
    ))
}

/// The latest cell of every column of a row.
#[utoipa::path(
    get, path = "/v1/rows/{row_key}", tag = "cells",
    params(("row_key" = String, Path, format = Uuid, pattern = "^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$", description = "The row key (a UUID)"), ReadParams),
    responses((status = 200, description = "The row's latest cells, by column name", body = CellsAnswer,
        headers(("mezzanine-stale" = String, description = "`true` when a minion answered for a master that is down"))), Errors),
    security(("bearer" = []))
)]
pub async fn get_row(
    State(app): Shared,
    Path(row): Path<String>,
    Query(params): Query<ReadParams>,
) -> Result<Response, ApiError> {
    let row = row_key(&row)?;
    let answer = app
        .store
        .get_cells_for_row_answer(&row, params.from.read_from())
        .await?;
    Ok(with_stale(
        answer.stale,
        CellsAnswer {
            cells: answer.value.iter().map(CellOut::from).collect(),
            stale: answer.stale,
        },
    ))
}

/// Every stored version of a column in some rows.
#[utoipa::path(
    post, path = "/v1/columns/{column}/cells", tag = "cells",
    params(("column" = String, Path, pattern = "^[A-Za-z0-9_]{1,64}$", description = "The column")),
    request_body = ColumnCellsRequest,
    responses((status = 200, description = "Every cell of the column in those rows, in address order", body = CellsAnswer,
        headers(("mezzanine-stale" = String, description = "`true` when a minion answered for a master that is down"))), Errors),
    security(("bearer" = []))
)]
pub async fn get_column_cells(
    State(app): Shared,
    Path(col): Path<String>,
    Json(request): Json<ColumnCellsRequest>,
) -> Result<Response, ApiError> {
    let col = column(&col)?;
    if request.rows.len() > app.limits.max_batch_cells {
        return Err(ApiError::too_large(format!(
            "invalid rows: {} rows exceeds limits.max_batch_cells = {}",
            request.rows.len(),
            app.limits.max_batch_cells
        )));
    }
    let rows = request
        .rows
        .iter()
        .map(|r| row_key(r))
        .collect::<Result<Vec<_>, _>>()?;
    let answer = app
        .store
        .get_column_cells_answer(&rows, &col, request.from.read_from())
        .await?;
    Ok(with_stale(
        answer.stale,
        CellsAnswer {
            cells: answer.value.iter().map(CellOut::from).collect(),
            stale: answer.stale,
        },
    ))
}

/// Entries of a secondary index for one shard-field value.
#[utoipa::path(
    post, path = "/v1/indexes/{index}/query", tag = "indexes",
    params(("index" = String, Path, description = "The index, as named in [[index]]")),
    request_body = IndexQueryIn,
    responses((status = 200, description = "The entries", body = EntriesAnswer,
        headers(("mezzanine-stale" = String, description = "`true` when a minion answered for a master that is down"))), Errors),
    security(("bearer" = []))
)]
pub async fn query_index(
    State(app): Shared,
    Path(index): Path<String>,
    Json(q): Json<IndexQueryIn>,
) -> Result<Response, ApiError> {
    if !app.indexes.contains(&index) {
        return Err(ApiError::not_found(format!(
            "no index is called {index:?} (declared: {})",
            app.indexes.join(", ")
        )));
    }
    let query = IndexQuery {
        index,
        shard_value: q.shard_value,
        filters: q
            .filters
            .into_iter()
            .map(|f| Filter {
                field: f.field,
                op: f.op.into(),
                value: f.value,
            })
            .collect(),
        order_by: q.order_by,
        descending: q.descending,
        limit: page(q.limit)?,
    };
    let answer = app
        .store
        .query_index_answer(&query, q.from.read_from())
        .await?;
    Ok(with_stale(
        answer.stale,
        EntriesAnswer {
            entries: answer
                .value
                .iter()
                .map(|e| EntryOut {
                    row_key: e.row_key.to_string(),
                    fields: e.fields.to_value(),
                })
                .collect(),
            stale: answer.stale,
        },
    ))
}

/// A page of a shard's change log.
#[utoipa::path(
    get, path = "/v1/shards/{shard}/changes", tag = "changes",
    params(("shard" = u32, Path, minimum = 0, description = "The shard"), ChangesParams),
    responses((status = 200, description = "Cells after `after`, in added_id order", body = ChangesAnswer,
        headers(("mezzanine-stale" = String, description = "`true` when a minion answered for a master that is down"))), Errors),
    security(("bearer" = []))
)]
pub async fn get_changes(
    State(app): Shared,
    Path(shard): Path<u32>,
    Query(params): Query<ChangesParams>,
) -> Result<Response, ApiError> {
    let limit = page(params.limit)?;
    let after = u64::try_from(params.after)
        .map_err(|_| ApiError::invalid(format!("invalid after: {} is negative", params.after)))?;
    let page = app
        .store
        .get_cells_for_shard(shard, after, limit, params.from.read_from())
        .await?;
    // The change log is read from the node asked; it is never answered by
    // another one, so it is never stale for a master read.
    Ok(with_stale(
        false,
        ChangesAnswer {
            cells: page.cells.iter().map(CellOut::from).collect(),
            next: page.next,
            stale: false,
        },
    ))
}

/// The instance, the mode and the limits.
#[utoipa::path(
    get, path = "/v1/info", tag = "worker",
    responses((status = 200, description = "What a client needs to know", body = Info), Errors),
    security(("bearer" = []))
)]
pub async fn info(State(app): Shared) -> axum::Json<Info> {
    axum::Json(Info {
        instance: app.instance.clone(),
        shard_count: app.store.shard_count(),
        mode: app.store.mode(),
        max_batch_cells: app.limits.max_batch_cells,
        max_body_bytes: app.limits.max_body_bytes,
        idle_timeout_ms: app.idle_timeout_ms,
        version: env!("CARGO_PKG_VERSION").to_string(),
    })
}

/// Alive: the process answers. Needs no token.
#[utoipa::path(
    get, path = "/healthz", tag = "worker",
    responses((status = 200, description = "Alive", body = String, content_type = "text/plain"))
)]
pub async fn healthz() -> &'static str {
    "ok\n"
}

/// Ready: every store the current mode uses answers. Needs no token.
#[utoipa::path(
    get, path = "/readyz", tag = "worker",
    responses(
        (status = 200, description = "Ready", body = Ready),
        (status = 503, description = "A store the mode needs does not answer", body = Ready)
    )
)]
pub async fn readyz(State(app): Shared) -> Response {
    let ready = app.store.ready().await;
    let status = if ready.ready {
        StatusCode::OK
    } else {
        StatusCode::SERVICE_UNAVAILABLE
    };
    (status, axum::Json(ready)).into_response()
}

/// Any path that is not a route.
pub async fn not_found() -> ApiError {
    ApiError::not_found("no such endpoint; the API is described at /openapi.json")
}

/// A route asked with a method it does not take.
pub async fn method_not_allowed() -> ApiError {
    ApiError::new(
        StatusCode::METHOD_NOT_ALLOWED,
        "method_not_allowed",
        "this endpoint does not take that method; see /openapi.json",
    )
}
