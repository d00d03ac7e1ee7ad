//! worker: the facade served over HTTP/JSON, and the HTTP stack every
//! long-running command of Mezzanine serves on.
//!
//! A worker is a [`tripstore::TripStore`] behind HTTP: stateless, so any
//! number run side by side, each routing by the mode kept in PostgreSQL.
//! Clients in any language call it with a bearer token; the Rust client
//! (`client/`) and the Python one (`clients/python/`) retry on another
//! worker when one fails.
//!
//! | path | scope | what |
//! |---|---|---|
//! | `POST /v1/cells` | write | put a batch of cells |
//! | `GET /v1/rows/{row}/columns/{column}/refs/{ref}` | read | one cell |
//! | `GET /v1/rows/{row}/columns/{column}/latest` | read | the latest cell of a column |
//! | `GET /v1/rows/{row}` | read | a row's latest cells |
//! | `POST /v1/columns/{column}/cells` | read | every version of a column in some rows |
//! | `POST /v1/indexes/{index}/query` | read | an index query |
//! | `GET /v1/shards/{shard}/changes` | admin | a page of a shard's change log |
//! | `GET /v1/info` | read | the instance, its shard count, the mode |
//! | `GET /metrics` | admin | Prometheus text |
//! | `GET /healthz`, `/readyz`, `/openapi.json` | none | alive; stores reachable; the API document |
//!
//! # Layout
//!
//! - [`stack`]: the listener: TLS, header read timeout, graceful drain;
//! - [`guard`]: the in-flight limit, the request timeout, header size,
//!   request metrics;
//! - [`auth`]: bearer tokens and scopes;
//! - [`routes`]: the handlers;
//! - [`api`]: the JSON types;
//! - [`openapi`]: the generated OpenAPI document;
//! - [`backend`]: what a worker serves (the facade, or the in-memory
//!   model in tests);
//! - [`metrics`]: the process's Prometheus recorder and `/metrics`;
//! - [`error`]: error answers.
//!
//! # Example
//!
//! ```no_run
//! use std::sync::Arc;
//! use tokio_util::sync::CancellationToken;
//!
//! # async fn example() -> Result<(), Box<dyn std::error::Error>> {
//! let config = config::Config::load("mezzanine.toml")?;
//! let store = Arc::new(tripstore::TripStore::connect(&config).await?);
//! let shutdown = CancellationToken::new();
//! let served = worker::start(store, &config, false, None, shutdown.clone()).await?;
//! println!("worker on {}", served.url());
//! shutdown.cancel();
//! served.done.await?;
//! # Ok(())
//! # }
//! ```

pub mod api;
pub mod auth;
pub mod backend;
pub mod error;
pub mod guard;
pub mod metrics;
pub mod openapi;
pub mod routes;
pub mod stack;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::extract::DefaultBodyLimit;
use axum::http::header;
use axum::routing::{get, post};
use axum::Router;
use config::Scope;
use tokio_util::sync::CancellationToken;
use tower_http::catch_panic::CatchPanicLayer;
use tower_http::sensitive_headers::SetSensitiveRequestHeadersLayer;
use utoipa::OpenApi;

pub use auth::Tokens;
pub use backend::Backend;
pub use stack::{Listen, Served};

/// What can keep a worker from starting.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The tokens are missing or unusable.
    #[error(transparent)]
    Auth(#[from] auth::AuthError),
    /// `--insecure-no-auth` on an address other than loopback.
    #[error(
        "--insecure-no-auth serves anyone who can connect: it binds loopback only, and {0} is not"
    )]
    InsecureNotLoopback(SocketAddr),
    /// The listener could not start.
    #[error(transparent)]
    Stack(#[from] stack::StackError),
}

/// The largest request body a worker reads: a full batch of the largest
/// bodies, plus each cell's address and the JSON around it. Bodies past
/// `limits.max_body_bytes` within it get a 413 naming the cell.
pub fn max_request_bytes(limits: &config::Limits) -> usize {
    const PER_CELL: usize = 512;
    limits
        .max_batch_bytes
        .saturating_add(limits.max_batch_cells.saturating_mul(PER_CELL))
        .saturating_add(64 * 1024)
}

/// The worker's routes over `store`, with auth, limits and metrics.
///
/// `refresh` runs before each scrape of `/metrics`, to set gauges read
/// from the databases (the mirror's queues, say).
pub fn router(
    store: Arc<dyn Backend>,
    config: &config::Config,
    tokens: Arc<Tokens>,
    refresh: Option<metrics::Refresh>,
) -> Router {
    let app = Arc::new(routes::App {
        store,
        limits: config.limits.clone(),
        instance: config.instance.name.clone(),
        indexes: config.indexes.iter().map(|i| i.name.clone()).collect(),
        idle_timeout_ms: config.worker.header_read_timeout_ms,
    });
    let scoped = |scope: Scope, router: Router<Arc<routes::App>>| {
        router.route_layer(axum::middleware::from_fn_with_state(
            (tokens.clone(), scope),
            auth::require,
        ))
    };
    let read = scoped(
        Scope::Read,
        Router::new()
            .route(
                "/v1/rows/{row_key}/columns/{column}/refs/{ref_key}",
                get(routes::get_cell),
            )
            .route(
                "/v1/rows/{row_key}/columns/{column}/latest",
                get(routes::get_latest),
            )
            .route("/v1/rows/{row_key}", get(routes::get_row))
            .route("/v1/columns/{column}/cells", post(routes::get_column_cells))
            .route("/v1/indexes/{index}/query", post(routes::query_index))
            .route("/v1/info", get(routes::info)),
    );
    let write = scoped(
        Scope::Write,
        Router::new().route("/v1/cells", post(routes::put_cells)),
    );
    let admin = scoped(
        Scope::Admin,
        Router::new().route("/v1/shards/{shard}/changes", get(routes::get_changes)),
    );
    let limits = Arc::new(guard::Limits::new(&config.worker));
    let api = read
        .merge(write)
        .merge(admin)
        .route_layer(axum::middleware::from_fn_with_state(limits, guard::limit))
        .layer(DefaultBodyLimit::max(max_request_bytes(&config.limits)))
        .with_state(app.clone());
    let metrics = metrics::router(refresh).route_layer(axum::middleware::from_fn_with_state(
        (tokens.clone(), Scope::Admin),
        auth::require,
    ));
    let open = Router::new()
        .route("/healthz", get(routes::healthz))
        .route("/readyz", get(routes::readyz))
        .with_state(app)
        .route(
            "/openapi.json",
            get(|| async { axum::Json(openapi::ApiDoc::openapi()) }),
        );
    api.merge(metrics)
        .merge(open)
        .fallback(routes::not_found)
        .method_not_allowed_fallback(routes::method_not_allowed)
        .layer(axum::middleware::from_fn(guard::record))
        .layer(CatchPanicLayer::custom(|_| {
            axum::response::IntoResponse::into_response(error::ApiError::new(
                axum::http::StatusCode::INTERNAL_SERVER_ERROR,
                "internal",
                "the worker failed on this request; it is logged",
            ))
        }))
        .layer(SetSensitiveRequestHeadersLayer::new([
            header::AUTHORIZATION,
        ]))
}

/// How `[worker]` listens.
pub fn listen(worker: &config::Worker) -> Listen {
    Listen {
        addr: worker.listen,
        header_read_timeout: Duration::from_millis(worker.header_read_timeout_ms),
        // hyper's own limit is the last resort, past the JSON 431 of
        // `worker.max_header_bytes`.
        max_header_buffer: (worker.max_header_bytes * 4).max(64 * 1024),
        tls: worker.tls_cert.clone().zip(worker.tls_key.clone()),
        drain: Duration::from_millis(worker.request_timeout_ms) + Duration::from_secs(1),
    }
}

/// The tokens `[worker]` names, with their secrets read, if a worker may
/// start with them: without tokens only when `insecure`, and then on
/// loopback only. Checked before anything connects.
pub fn check(config: &config::Config, insecure: bool) -> Result<Arc<Tokens>, Error> {
    let tokens = Arc::new(Tokens::from_config(&config.worker, insecure)?);
    if tokens.is_insecure() && !config.worker.listen.ip().is_loopback() {
        return Err(Error::InsecureNotLoopback(config.worker.listen));
    }
    Ok(tokens)
}

/// Starts a worker serving `store` as `[worker]` says, until `shutdown`;
/// in-flight requests are then drained before [`Served::done`] ends.
/// With `insecure` and no tokens configured, every caller is admitted,
/// and the worker refuses any address but loopback.
pub async fn start(
    store: Arc<dyn Backend>,
    config: &config::Config,
    insecure: bool,
    refresh: Option<metrics::Refresh>,
    shutdown: CancellationToken,
) -> Result<Served, Error> {
    let tokens = check(config, insecure)?;
    let router = router(store, config, tokens, refresh);
    let listen = listen(&config.worker);
    Ok(stack::serve(router, &listen, shutdown).await?)
}
