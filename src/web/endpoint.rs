//! An endpoint, declared once: the router and the OpenAPI description are both built
//! from the list in `api.rs`.

use std::sync::Arc;

use axum::http::Method;
use axum::routing::MethodRouter;
use schemars::{JsonSchema, Schema, SchemaGenerator};

use super::WebState;
use crate::domain::Role;

/// One endpoint: the router and the OpenAPI description are both built from these.
pub struct Endpoint {
    pub method: Method,
    pub path: &'static str,
    pub summary: &'static str,
    /// The least role that may call it; `None` for public endpoints.
    pub role: Option<Role>,
    /// The JSON request body's schema, if it takes one.
    pub body: Option<fn(&mut SchemaGenerator) -> Schema>,
    /// The query parameters' struct, if it takes any (one parameter per property).
    pub query: Option<fn(&mut SchemaGenerator) -> Schema>,
    /// The response's content type.
    pub produces: &'static str,
    pub(super) handler: MethodRouter<Arc<WebState>>,
}

fn schema_of<T: JsonSchema>(g: &mut SchemaGenerator) -> Schema {
    g.subschema_for::<T>()
}

pub(super) fn ep(
    method: Method,
    path: &'static str,
    role: Option<Role>,
    summary: &'static str,
    handler: MethodRouter<Arc<WebState>>,
) -> Endpoint {
    Endpoint { method, path, summary, role, body: None, query: None, produces: "application/json", handler }
}

/// Paths whose `{id}` is a whole number (a row id); other ids are the plant's own
/// (`PUMP-007`, `PUMP-007.VIB-DE`).
pub const INTEGER_IDS: &[&str] = &[
    "/api/alarms/{id}",
    "/api/runs/{id}",
    "/api/work_orders/{id}",
    "/api/tokens/{id}",
    "/api/alarm-changes/{id}",
    "/api/episodes/{id}",
];

impl Endpoint {
    pub(super) fn body<T: JsonSchema>(mut self) -> Endpoint {
        self.body = Some(schema_of::<T>);
        self
    }

    pub(super) fn query<T: JsonSchema>(mut self) -> Endpoint {
        self.query = Some(|g| g.root_schema_for::<T>());
        self
    }

    pub(super) fn produces(mut self, content_type: &'static str) -> Endpoint {
        self.produces = content_type;
        self
    }
}
