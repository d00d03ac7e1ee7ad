//! Every answer that is not a success: a JSON `{ "code", "message" }`
//! with the status that says whose fault it was. Bad input is always a
//! 4xx; a 5xx means the worker or a store behind it failed, and a 503
//! carries `Retry-After` when trying again (on this or another worker)
//! may help.

use axum::extract::rejection::{JsonRejection, PathRejection, QueryRejection};
use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use serde::Serialize;
use utoipa::ToSchema;

/// The body of every error answer.
#[derive(Debug, Serialize, ToSchema)]
pub struct ErrorBody {
    /// A stable, machine-readable name: `invalid_input`, `invalid_json`,
    /// `too_large`, `unauthorized`, `forbidden`, `not_found`, `conflict`,
    /// `unsupported`, `saturated`, `timeout`, `unavailable`, `internal`, …
    pub code: String,
    /// What went wrong, for a person.
    pub message: String,
    /// The SQLSTATE PostgreSQL gives (or would give) a refused cell: a
    /// write in mode `primary` that the legacy tables would refuse
    /// (`23514` for a CHECK, `23505` for a unique value another row
    /// holds, …). Absent for everything else.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub sqlstate: Option<String>,
}

/// An error answer: status, code and message, and how soon to retry.
#[derive(Debug)]
pub struct ApiError {
    /// The HTTP status.
    pub status: StatusCode,
    /// [`ErrorBody::code`].
    pub code: &'static str,
    /// [`ErrorBody::message`].
    pub message: String,
    /// Seconds for `Retry-After`, on answers a retry may fix.
    pub retry_after: Option<u32>,
    /// [`ErrorBody::sqlstate`].
    pub sqlstate: Option<String>,
}

impl ApiError {
    /// An error with no `Retry-After`.
    pub fn new(status: StatusCode, code: &'static str, message: impl Into<String>) -> ApiError {
        ApiError {
            status,
            code,
            message: message.into(),
            retry_after: None,
            sqlstate: None,
        }
    }

    /// 400 `invalid_input`.
    pub fn invalid(message: impl Into<String>) -> ApiError {
        ApiError::new(StatusCode::BAD_REQUEST, "invalid_input", message)
    }

    /// 413 `too_large`.
    pub fn too_large(message: impl Into<String>) -> ApiError {
        ApiError::new(StatusCode::PAYLOAD_TOO_LARGE, "too_large", message)
    }

    /// 404 `not_found`.
    pub fn not_found(message: impl Into<String>) -> ApiError {
        ApiError::new(StatusCode::NOT_FOUND, "not_found", message)
    }

    /// 503 with `Retry-After: 1`: this worker cannot answer now, another
    /// one (or this one, shortly) may.
    pub fn retry(code: &'static str, message: impl Into<String>) -> ApiError {
        ApiError {
            retry_after: Some(1),
            ..ApiError::new(StatusCode::SERVICE_UNAVAILABLE, code, message)
        }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let mut response = (
            self.status,
            axum::Json(ErrorBody {
                code: self.code.to_string(),
                message: self.message,
                sqlstate: self.sqlstate,
            }),
        )
            .into_response();
        if let Some(secs) = self.retry_after {
            response
                .headers_mut()
                .insert(header::RETRY_AFTER, HeaderValue::from(secs));
        }
        response
    }
}

impl From<schemaless::Error> for ApiError {
    fn from(e: schemaless::Error) -> ApiError {
        use schemaless::Error as E;
        let message = e.to_string();
        match &e {
            E::InvalidInput { sqlstate, .. } => ApiError {
                sqlstate: sqlstate.clone(),
                ..ApiError::invalid(message)
            },
            E::Conflict { .. } => ApiError::new(StatusCode::CONFLICT, "conflict", message),
            E::NoSuchShard { .. } => ApiError::not_found(message),
            // Unsupported in the current mode (the legacy model has no
            // change log, say): final for this request, the caller's to
            // change, not a failure of the worker.
            E::Unsupported { .. } => {
                ApiError::new(StatusCode::UNPROCESSABLE_ENTITY, "unsupported", message)
            }
            E::Timeout { .. } => ApiError::retry("timeout", message),
            E::Unavailable { .. } | E::NodeFailed { .. } | E::NotDurable { .. } => {
                ApiError::retry("unavailable", message)
            }
            E::Storage { .. } if e.is_retryable() => ApiError::retry("unavailable", message),
            E::CorruptCell { .. } => {
                ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, "corrupt_cell", message)
            }
            E::Unreadable { .. } => {
                ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, "unreadable", message)
            }
            _ => ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, "internal", message),
        }
    }
}

impl From<JsonRejection> for ApiError {
    fn from(r: JsonRejection) -> ApiError {
        let status = r.status();
        let code = match status {
            StatusCode::PAYLOAD_TOO_LARGE => "too_large",
            StatusCode::UNSUPPORTED_MEDIA_TYPE => "unsupported_media_type",
            _ => "invalid_json",
        };
        // A body that parses as JSON but not as the request (a missing
        // field, a string for a number) is as much bad input as one that
        // does not parse: 400 either way.
        let status = if status.is_client_error() && status != StatusCode::UNPROCESSABLE_ENTITY {
            status
        } else {
            StatusCode::BAD_REQUEST
        };
        ApiError::new(status, code, r.body_text())
    }
}

impl From<PathRejection> for ApiError {
    fn from(r: PathRejection) -> ApiError {
        ApiError::invalid(r.body_text())
    }
}

impl From<QueryRejection> for ApiError {
    fn from(r: QueryRejection) -> ApiError {
        ApiError::invalid(r.body_text())
    }
}

/// `axum::Json`, answering a bad body with an [`ApiError`].
#[derive(axum::extract::FromRequest)]
#[from_request(via(axum::Json), rejection(ApiError))]
pub struct Json<T>(pub T);

/// `axum::extract::Path`, answering a bad path with an [`ApiError`].
#[derive(axum::extract::FromRequestParts)]
#[from_request(via(axum::extract::Path), rejection(ApiError))]
pub struct Path<T>(pub T);

/// `axum::extract::Query`, answering a bad query with an [`ApiError`].
#[derive(axum::extract::FromRequestParts)]
#[from_request(via(axum::extract::Query), rejection(ApiError))]
pub struct Query<T>(pub T);
