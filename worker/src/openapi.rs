//! The OpenAPI document, generated from the handlers' annotations and the
//! request and answer types, served at `/openapi.json`.

use std::collections::BTreeMap;

use utoipa::openapi::security::{HttpAuthScheme, HttpBuilder, SecurityScheme};
use utoipa::openapi::{ContentBuilder, Ref, RefOr, ResponseBuilder};
use utoipa::{Modify, OpenApi};

use crate::error::ErrorBody;
use crate::routes;

/// The document.
#[derive(OpenApi)]
#[openapi(
    info(
        title = "Mezzanine worker",
        description = "The Schemaless cell API over HTTP: a worker is the migration facade (TripStore) behind HTTP, routing by the mode. Every /v1 call needs `Authorization: Bearer <token>`: `read` for reads and index queries, `write` for puts, `admin` for change logs and /metrics."
    ),
    paths(
        routes::put_cells,
        routes::get_cell,
        routes::get_latest,
        routes::get_row,
        routes::get_column_cells,
        routes::query_index,
        routes::get_changes,
        routes::info,
        routes::healthz,
        routes::readyz,
    ),
    components(schemas(ErrorBody)),
    modifiers(&Bearer)
)]
pub struct ApiDoc;

struct Bearer;

impl Modify for Bearer {
    fn modify(&self, openapi: &mut utoipa::openapi::OpenApi) {
        let components = openapi.components.get_or_insert_with(Default::default);
        components.add_security_scheme(
            "bearer",
            SecurityScheme::Http(HttpBuilder::new().scheme(HttpAuthScheme::Bearer).build()),
        );
    }
}

/// The error answers every `/v1` endpoint may give, each a JSON
/// [`ErrorBody`].
pub struct Errors;

impl utoipa::IntoResponses for Errors {
    fn responses() -> BTreeMap<String, RefOr<utoipa::openapi::response::Response>> {
        [
            ("400", "Bad input: malformed JSON, a bad row key, column or ref key, an unknown field; nothing was written"),
            ("401", "No valid bearer token"),
            ("403", "The token's scope is too small"),
            ("404", "No such shard, index or endpoint"),
            ("405", "The endpoint does not take this method"),
            ("409", "The cell exists with a different body"),
            ("413", "A body, a batch or a cell over [limits]"),
            ("415", "The body is not application/json"),
            ("422", "The store cannot answer this in the current mode"),
            ("431", "The request's headers are too large"),
            ("500", "A failure of the worker or a corrupt stored cell"),
            ("503", "Saturated, timed out or a store unavailable: retry, on another worker (see Retry-After)"),
        ]
        .into_iter()
        .map(|(status, description)| {
            let response = ResponseBuilder::new()
                .description(description)
                .content(
                    "application/json",
                    ContentBuilder::new()
                        .schema(Some(Ref::from_schema_name("ErrorBody")))
                        .build(),
                )
                .build();
            (status.to_string(), RefOr::T(response))
        })
        .collect()
    }
}
