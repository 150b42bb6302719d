//! `/api/openapi.json`, built from the same endpoint list as the router: every path
//! and query parameter with its type, the JSON or form body, and every status an
//! operation can answer with (each error as `{"error": ...}`).

use schemars::SchemaGenerator;
use schemars::generate::SchemaSettings;
use serde_json::{Map, Value, json};

use super::endpoint::{Endpoint, INTEGER_IDS};

/// What an error body is, whatever the status.
fn error(description: &str) -> Value {
    json!({"description": description, "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Error"}}}})
}

/// A citation key: a document path (no empty or `..` part), `#`, and a chunk or page.
const CITATION: &str = r"^[A-Za-z0-9_-][A-Za-z0-9_.-]*(/[A-Za-z0-9_-][A-Za-z0-9_.-]*)*#p?[0-9]{1,9}$";

/// An asset or sensor id, as `domain::AssetId` takes it.
fn id_schema() -> Value {
    json!({"type": "string", "minLength": 1, "maxLength": crate::domain::MAX_ID_CHARS, "pattern": r"^[A-Za-z0-9][A-Za-z0-9_.:/-]*$"})
}

/// A path parameter: a row id is a whole number; the plant's ids are text.
fn path_parameter(path: &str, name: &str) -> Value {
    let integer = name == "id" && INTEGER_IDS.iter().any(|p| path.starts_with(p));
    let (schema, description) = match (integer, name) {
        (true, _) => (json!({"type": "integer", "format": "int64", "minimum": 1}), "a row id, as the lists give it"),
        (false, "name") => {
            (json!({"type": "string", "pattern": "^[a-z0-9._-]{2,40}$"}), "a user name, e.g. operator.kaur")
        }
        (false, "file") => (json!({"type": "string"}), "a module of the page, e.g. core.js"),
        (false, "citation") => {
            (json!({"type": "string", "pattern": CITATION}), "a citation key, e.g. arp-vibration.md#2")
        }
        (false, _) if path.starts_with("/api/sensors/") => (id_schema(), "a sensor id, e.g. PUMP-007.VIB-DE"),
        (false, _) => (id_schema(), "an asset id, e.g. PUMP-007"),
    };
    json!({"name": name, "in": "path", "required": true, "schema": schema, "description": description})
}

/// The statuses an operation answers with, besides its success.
fn errors(e: &Endpoint, has_params: bool) -> Vec<(&'static str, Value)> {
    let mut out = Vec::new();
    let post = e.method == axum::http::Method::POST;
    if has_params || e.query.is_some() || post {
        out.push(("400", error("A parameter or value is not valid; the message says which")));
    }
    if has_params || e.body.is_some() {
        out.push((
            "404",
            error("No such item (in the path, or named in the body); the message says where they are listed"),
        ));
    }
    if e.role.is_some() {
        out.push(("401", error("Not logged in and no bearer token")));
        out.push(("403", error("Below the endpoint's role, or a cross-site request")));
    }
    if post && e.path.starts_with("/api/") {
        out.push(("409", error("The item's state does not allow it (e.g. already decided)")));
        out.push(("429", error("Too soon after the last one")));
    }
    if e.body.is_some() || e.path == "/login" {
        out.push(("413", error("The body is over 64 KiB")));
        out.push(("415", error("The body's Content-Type is not the one expected")));
        out.push(("422", error("The body does not match the schema (a missing or unknown field)")));
    }
    if e.path == "/login" {
        out.push(("429", error("Too many failed logins; the message says for how long")));
        out.push(("403", error("A directory user in none of the groups mapped to a role")));
        out.push(("503", error("The directory does not answer: directory accounts cannot log in now")));
    }
    out
}

/// One endpoint's operation: parameters, body, every response, role.
fn operation(e: &Endpoint, generator: &mut SchemaGenerator) -> Value {
    let mut op = Map::new();
    op.insert("summary".into(), json!(e.summary));
    let mut params: Vec<Value> = e
        .path
        .split('/')
        .filter_map(|seg| seg.strip_prefix('{').and_then(|s| s.strip_suffix('}')))
        .map(|name| path_parameter(e.path, name))
        .collect();
    let has_params = !params.is_empty();
    if let Some(query) = e.query {
        let schema = query(generator).to_value();
        for (name, prop) in schema["properties"].as_object().into_iter().flatten() {
            let mut prop = prop.clone();
            let description = prop.as_object_mut().and_then(|p| p.remove("description")).unwrap_or(json!(""));
            params.push(
                json!({"name": name, "in": "query", "required": false, "schema": prop, "description": description}),
            );
        }
    }
    if !params.is_empty() {
        op.insert("parameters".into(), Value::Array(params));
    }
    if let Some(body) = e.body {
        let schema = body(generator).to_value();
        op.insert("requestBody".into(), json!({"required": true, "content": {"application/json": {"schema": schema}}}));
    }
    let mut responses = Map::new();
    if e.path == "/login" {
        let form = json!({"type": "object", "required": ["name", "password"],
                          "properties": {"name": {"type": "string"}, "password": {"type": "string"}}});
        op.insert(
            "requestBody".into(),
            json!({"required": true, "content": {"application/x-www-form-urlencoded": {"schema": form}}}),
        );
        responses.insert("303".into(), json!({"description": "To the page: logged in, or ?login=failed"}));
    } else if e.path == "/logout" {
        responses.insert("303".into(), json!({"description": "To the page, logged out"}));
    } else {
        let created = e.method == axum::http::Method::POST && matches!(e.path, "/api/users" | "/api/tokens");
        let code = if created { "201" } else { "200" };
        responses.insert(code.into(), json!({"description": "OK", "content": {e.produces: {}}}));
    }
    if e.path == "/readyz" {
        responses.insert("503".into(), error("Not ready: the database or the broker does not answer"));
    }
    for (status, response) in errors(e, has_params) {
        responses.insert(status.into(), response);
    }
    op.insert("responses".into(), Value::Object(responses));
    if let Some(role) = e.role {
        op.insert("x-role".into(), json!(role));
        op.insert("security".into(), json!([{"session": []}, {"bearer": []}]));
    }
    Value::Object(op)
}

pub fn document(endpoints: &[Endpoint]) -> Value {
    let mut generator = SchemaSettings::openapi3().into_generator();
    let mut paths = Map::new();
    for e in endpoints {
        let item = paths.entry(e.path.to_string()).or_insert_with(|| json!({}));
        item[e.method.as_str().to_ascii_lowercase()] = operation(e, &mut generator);
    }
    let mut schemas: Map<String, Value> = generator.take_definitions(true).into_iter().collect();
    schemas.insert(
        "Error".into(),
        json!({"type": "object", "required": ["error"], "properties": {"error": {"type": "string", "description": "What went wrong and what to do"}}}),
    );
    json!({
        "openapi": "3.1.0",
        "info": {"title": "twinops HMI API", "version": env!("CARGO_PKG_VERSION"),
                 "description": "Alarms, assets, readings, triage notes, runs, work-order approval and chat. Errors are {\"error\": message}."},
        "paths": paths,
        "components": {
            "schemas": schemas,
            "securitySchemes": {
                "session": {"type": "apiKey", "in": "cookie", "name": super::SESSION_COOKIE},
                "bearer": {"type": "http", "scheme": "bearer", "description": "twinops token create"}
            }
        }
    })
}
