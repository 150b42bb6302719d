//! `/api/openapi.json`, built from the same endpoint list as the router.

use schemars::generate::SchemaSettings;
use serde_json::{Map, Value, json};

use super::api::Endpoint;

pub fn document(endpoints: &[Endpoint]) -> Value {
    let mut generator = SchemaSettings::openapi3().into_generator();
    let mut paths = Map::new();
    for e in endpoints {
        let mut op = Map::new();
        op.insert("summary".into(), json!(e.summary));
        let params: Vec<Value> = e
            .path
            .split('/')
            .filter_map(|seg| seg.strip_prefix('{').and_then(|s| s.strip_suffix('}')))
            .map(|name| json!({"name": name, "in": "path", "required": true, "schema": {"type": "string"}}))
            .collect();
        if !params.is_empty() {
            op.insert("parameters".into(), Value::Array(params));
        }
        if let Some(body) = e.body {
            let schema = body(&mut generator).to_value();
            op.insert(
                "requestBody".into(),
                json!({"required": true, "content": {"application/json": {"schema": schema}}}),
            );
        }
        let mut responses = Map::new();
        responses.insert("200".into(), json!({"description": "OK", "content": {e.produces: {}}}));
        if let Some(role) = e.role {
            responses.insert("401".into(), json!({"description": "Not logged in and no bearer token"}));
            responses.insert("403".into(), json!({"description": format!("Below the {role} role")}));
        }
        op.insert("responses".into(), Value::Object(responses));
        if let Some(role) = e.role {
            op.insert("x-role".into(), json!(role));
            op.insert("security".into(), json!([{"session": []}, {"bearer": []}]));
        }
        let item = paths.entry(e.path.to_string()).or_insert_with(|| json!({}));
        item[e.method.as_str().to_ascii_lowercase()] = Value::Object(op);
    }
    let schemas: Map<String, Value> = generator.take_definitions(true).into_iter().collect();
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
