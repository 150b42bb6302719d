//! The agent's tools: one file per tool, each with its argument type (the JSON schema is
//! derived from it), its description, its access class and its handler.
//!
//! Architecture Invariant: a handler gets a read-only connection and, at most, the
//! [`Approvals`] capability. No tool can write anything but a `pending_approval` row.

mod alarm_correlations;
mod alarm_kpis;
mod asset_details;
mod episode;
mod hints;

pub use hints::{Examples, mentioned_assets};
mod list_alarms;
mod list_assets;
mod propose_alarm_change;
mod propose_work_order;
mod read_doc;
mod search_docs;
mod sensor_history;
mod shift_handover;
mod system_summary;

use std::sync::LazyLock;

use rusqlite::Connection;
use schemars::JsonSchema;
use serde::de::DeserializeOwned;
use serde_json::{Value, json};

use crate::approvals::{Approvals, Proposer};
use crate::domain::{Access, Timestamp};
use crate::rag::DocIndex;

/// Longest tool result a model is shown, in characters (about 4,000 tokens).
pub const MAX_RESULT_CHARS: usize = 16_000;

/// What a tool call needs: a read-only view of the twin, the documentation index, the
/// proposal capability, the time it is, and who is calling.
pub struct ToolContext<'a> {
    pub db: &'a Connection,
    pub docs: &'a DocIndex,
    pub approvals: &'a Approvals,
    pub now: Timestamp,
    pub caller: Proposer,
}

/// What a tool context is made of: the twin, its documents, and where proposals go.
#[derive(Clone, Copy)]
pub struct Context<'a> {
    pub store: &'a crate::store::Store,
    pub docs: &'a DocIndex,
    pub approvals: &'a Approvals,
}

/// Runs `f` with a tool context on a fresh read connection of `ctx.store`: how the
/// agent, the HMI, MCP and the CLI all give a tool its view of the twin. A proposal
/// through a pair's log blocks: call it from `spawn_blocking`.
pub fn with<T>(
    ctx: Context,
    now: Timestamp,
    caller: Proposer,
    f: impl FnOnce(&ToolContext) -> T,
) -> Result<T, crate::store::StoreError> {
    let db = ctx.store.read()?;
    Ok(f(&ToolContext { db: &db, docs: ctx.docs, approvals: ctx.approvals, now, caller }))
}

/// [`with`] on a twin alone: proposals are recorded in it.
pub fn with_context<T>(
    store: &crate::store::Store,
    docs: &DocIndex,
    now: Timestamp,
    caller: Proposer,
    f: impl FnOnce(&ToolContext) -> T,
) -> Result<T, crate::store::StoreError> {
    let approvals = Approvals::new(store.writer().clone());
    with(Context { store, docs, approvals: &approvals }, now, caller, f)
}

/// A failed call. What the model sees is [`ToolError::for_model`]; internal causes go
/// to the operator log only.
#[derive(Debug, thiserror::Error)]
pub enum ToolError {
    /// The arguments do not fit the schema or break a stated bound.
    #[error("{0}")]
    InvalidArguments(String),
    /// An id or key that names nothing; the message lists what does exist.
    #[error("{0}")]
    NotFound(String),
    /// Valid request the twin cannot satisfy as asked (e.g. a conflicting state).
    #[error("{0}")]
    Rejected(String),
    #[error("internal error: {0:#}")]
    Internal(#[from] anyhow::Error),
}

impl From<rusqlite::Error> for ToolError {
    fn from(e: rusqlite::Error) -> Self {
        ToolError::Internal(e.into())
    }
}

impl From<crate::store::StoreError> for ToolError {
    fn from(e: crate::store::StoreError) -> Self {
        ToolError::Internal(e.into())
    }
}

impl From<crate::approvals::ProposeError> for ToolError {
    fn from(e: crate::approvals::ProposeError) -> Self {
        use crate::approvals::ProposeError;
        match e {
            ProposeError::Store(e) => e.into(),
            ProposeError::Pair(e) => ToolError::Rejected(format!(
                "Nothing was proposed: {e}. Say in your answer that the proposal could not be recorded and should be \
                 made again once the broker is back; do not propose it again now."
            )),
            ProposeError::Refused(m) => ToolError::Rejected(format!("Nothing was proposed: {m}.")),
        }
    }
}

impl ToolError {
    pub fn for_model(&self, tool: &str) -> String {
        match self {
            ToolError::InvalidArguments(m) => format!("Invalid arguments for {tool}: {m}"),
            ToolError::NotFound(m) | ToolError::Rejected(m) => m.clone(),
            ToolError::Internal(_) => format!(
                "{tool} failed on an internal error (logged for the operators). Try once more; if it fails again, continue without it and say so in your answer."
            ),
        }
    }
}

/// A tool's definition: one place for its name, description, schema and handler.
#[derive(Clone)]
pub struct ToolDef {
    pub name: &'static str,
    pub description: &'static str,
    pub access: Access,
    /// JSON Schema of the arguments, derived from the argument type.
    pub schema: Value,
    /// How to narrow a result that had to be cut.
    pub narrow_hint: &'static str,
    handler: fn(&ToolContext, Value) -> Result<Value, ToolError>,
}

/// What the model receives for one call.
#[derive(Debug, Clone, PartialEq)]
pub struct ToolOutput {
    pub content: String,
    pub is_error: bool,
}

impl ToolDef {
    /// Runs the tool on JSON arguments and renders what the model will read: the result
    /// as compact JSON cut to [`MAX_RESULT_CHARS`], or the error message.
    pub fn call(&self, ctx: &ToolContext, args: Value) -> ToolOutput {
        self.call_with_limit(ctx, args, MAX_RESULT_CHARS)
    }

    /// The tool's own result, whole (not cut to a model's size), or its typed error: for
    /// callers that are not a model, like the HMI's API.
    pub fn run(&self, ctx: &ToolContext, args: Value) -> Result<Value, ToolError> {
        (self.handler)(ctx, args)
    }

    /// [`ToolDef::call`] with a result cut to `max_chars`.
    pub fn call_with_limit(&self, ctx: &ToolContext, args: Value, max_chars: usize) -> ToolOutput {
        match (self.handler)(ctx, args) {
            Ok(value) => ToolOutput { content: fit(value, max_chars, self.narrow_hint), is_error: false },
            Err(err) => {
                if let ToolError::Internal(cause) = &err {
                    tracing::error!(stage = "tools", tool = self.name, error = %format!("{cause:#}"), "tool failed");
                }
                ToolOutput { content: err.for_model(self.name), is_error: true }
            }
        }
    }
}

impl ToolDef {
    /// A tool defined outside this module (tests and probes); its schema is derived
    /// from `A` like every other.
    pub fn custom<A: DeserializeOwned + JsonSchema>(
        name: &'static str,
        description: &'static str,
        access: Access,
        handler: fn(&ToolContext, Value) -> Result<Value, ToolError>,
    ) -> ToolDef {
        define::<A>(name, description, access, "", handler)
    }
}

fn define<A: DeserializeOwned + JsonSchema>(
    name: &'static str,
    description: &'static str,
    access: Access,
    narrow_hint: &'static str,
    handler: fn(&ToolContext, Value) -> Result<Value, ToolError>,
) -> ToolDef {
    ToolDef { name, description, access, schema: schema_of::<A>(), narrow_hint, handler }
}

/// The argument schema as model APIs want it: draft-07 style, inlined, no `$schema`.
fn schema_of<A: JsonSchema>() -> Value {
    let mut settings = schemars::generate::SchemaSettings::draft07();
    settings.inline_subschemas = true;
    settings.meta_schema = None;
    let mut schema = settings.into_generator().into_root_schema_for::<A>().to_value();
    if let Some(obj) = schema.as_object_mut() {
        obj.remove("title");
        obj.entry("properties").or_insert_with(|| json!({}));
    }
    schema
}

/// Deserializes arguments, turning serde's complaint into a message that names the fix.
pub(crate) fn parse_args<A: DeserializeOwned>(args: Value) -> Result<A, ToolError> {
    let args = if args.is_null() { json!({}) } else { args };
    if !args.is_object() {
        return Err(ToolError::InvalidArguments(format!("arguments must be a JSON object, got {}", kind_of(&args))));
    }
    serde_json::from_value(args).map_err(|e| ToolError::InvalidArguments(e.to_string()))
}

fn kind_of(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

/// Checks a numeric argument against its documented bounds.
pub(crate) fn check_range(name: &str, value: i64, min: i64, max: i64) -> Result<(), ToolError> {
    if (min..=max).contains(&value) {
        Ok(())
    } else {
        Err(ToolError::InvalidArguments(format!("{name} must be between {min} and {max}, got {value}")))
    }
}

/// Rows per page of a paged tool when the model does not say.
pub(crate) fn default_page_limit() -> i64 {
    20
}

/// Checks a paged tool's `limit` (1-50) and `offset`.
pub(crate) fn check_page(limit: i64, offset: i64) -> Result<(), ToolError> {
    check_range("limit", limit, 1, 50)?;
    check_range("offset", offset, 0, 1_000_000)
}

/// The paging envelope: `total`, `offset`, `next_offset` (null on the last page) and
/// the rows under `field`.
pub(crate) fn page(total: i64, offset: i64, field: &str, rows: Vec<Value>) -> Value {
    let end = offset + rows.len() as i64;
    let mut out = serde_json::Map::new();
    out.insert("total".into(), json!(total));
    out.insert("offset".into(), json!(offset));
    out.insert("next_offset".into(), if end < total { json!(end) } else { Value::Null });
    out.insert(field.into(), Value::Array(rows));
    Value::Object(out)
}

static REGISTRY: LazyLock<Vec<ToolDef>> = LazyLock::new(|| {
    vec![
        system_summary::def(),
        list_assets::def(),
        asset_details::def(),
        list_alarms::def(),
        sensor_history::def(),
        search_docs::def(),
        read_doc::def(),
        shift_handover::def(),
        alarm_kpis::def(),
        episode::get_def(),
        episode::similar_def(),
        alarm_correlations::def(),
        propose_work_order::def(),
        propose_alarm_change::def(),
    ]
});

/// Every tool, in the order they are offered.
/// The episode tools: offered to an episode's note run ([`NOT_FOR_EPISODES`] make room
/// for them), served to MCP hosts and `tools call`. Their definitions are 900 tokens;
/// the others' already fill 4,800 of a small local model's 8,192.
const EPISODE_TOOLS: [&str; 3] = ["get_episode", "find_similar_episodes", "get_alarm_correlations"];

/// The plant-wide tools an episode's note run does without, for the episode tools' room.
pub const NOT_FOR_EPISODES: [&str; 4] = ["system_summary", "list_assets", "shift_handover", "get_alarm_kpis"];

/// The tools the agent's runs are offered (an episode's note run: see
/// the agent's episode profile).
pub fn offered() -> Vec<&'static ToolDef> {
    all().iter().filter(|t| !EPISODE_TOOLS.contains(&t.name)).collect()
}

pub fn all() -> &'static [ToolDef] {
    &REGISTRY
}

pub fn find(name: &str) -> Option<&'static ToolDef> {
    REGISTRY.iter().find(|t| t.name == name)
}

/// Runs tool `name`; an unknown name is an error result that lists the real ones.
pub fn call(ctx: &ToolContext, name: &str, args: Value) -> ToolOutput {
    match find(name) {
        Some(tool) => tool.call(ctx, args),
        None => ToolOutput {
            content: format!(
                "There is no tool named '{name}'. Available tools: {}.",
                REGISTRY.iter().map(|t| t.name).collect::<Vec<_>>().join(", ")
            ),
            is_error: true,
        },
    }
}

/// The tool definitions in OpenAI's Chat Completions `tools` format.
pub fn openai_format(tools: &[&ToolDef]) -> Value {
    Value::Array(
        tools
            .iter()
            .map(|t| json!({"type": "function", "function": {"name": t.name, "description": t.description, "parameters": t.schema}}))
            .collect(),
    )
}

/// The tool definitions in Anthropic's Messages `tools` format.
pub fn anthropic_format(tools: &[&ToolDef]) -> Value {
    Value::Array(
        tools.iter().map(|t| json!({"name": t.name, "description": t.description, "input_schema": t.schema})).collect(),
    )
}

/// Renders `value` as compact JSON of at most `max` characters. Cuts structurally, so
/// what remains is still valid JSON: items are dropped from the end of the longest
/// array first (fixing `next_offset` so paging resumes at the first dropped item), then
/// the longest string is shortened. A `truncated` field says what was cut and how to
/// narrow the request.
pub fn fit(mut value: Value, max: usize, narrow_hint: &str) -> String {
    let text = value.to_string();
    if text.len() <= max {
        return text;
    }
    let original = text.len();
    let mut dropped = 0usize;
    let mut array_field: Option<String> = None;
    // Room for the marker itself.
    let budget = max.saturating_sub(400);
    while value.to_string().len() > budget {
        let Some(obj) = value.as_object_mut() else { break };
        let longest = obj
            .iter()
            .filter_map(|(k, v)| {
                v.as_array().filter(|a| a.len() > 1).map(|a| (k.clone(), v.to_string().len(), a.len()))
            })
            .max_by_key(|(_, len, _)| *len);
        let Some((field, _, len)) = longest else { break };
        // Drop a proportional share at once, then one by one near the end.
        let over = value.to_string().len() - budget;
        let arr = value[&field].as_array_mut().expect("array field");
        let per_item = (arr.iter().map(|v| v.to_string().len()).sum::<usize>() / len).max(1);
        let n = (over / per_item).clamp(1, len - 1);
        arr.truncate(len - n);
        dropped += n;
        array_field = Some(field);
    }
    let mut cut_chars = 0;
    while value.to_string().len() > budget {
        let over = value.to_string().len() - budget;
        let Some(s) = longest_string(&mut value) else { break };
        let total = s.chars().count();
        if total <= 16 {
            break;
        }
        let keep = total.saturating_sub(over + 40);
        let kept: String = s.chars().take(keep).collect();
        cut_chars += total - keep;
        *s = format!("{kept} …[cut]");
    }
    let mut note = format!("result cut from {original} to at most {max} characters");
    if let Some(field) = &array_field {
        note.push_str(&format!("; {dropped} item(s) of '{field}' omitted"));
        if let (Some(offset), Some(obj)) = (value.get("offset").and_then(Value::as_i64), value.as_object_mut()) {
            let kept = obj.get(field.as_str()).and_then(Value::as_array).map_or(0, Vec::len) as i64;
            obj.insert("next_offset".into(), json!(offset + kept));
        }
    }
    if cut_chars > 0 {
        note.push_str(&format!("; {cut_chars} characters of text cut"));
    }
    note.push_str(&format!(". {narrow_hint}"));
    match value.as_object_mut() {
        Some(obj) => {
            obj.insert("truncated".into(), Value::String(note));
            value.to_string()
        }
        None => {
            let text = value.to_string();
            let keep: String = text.chars().take(budget).collect();
            format!("{keep} …[{note}]")
        }
    }
}

fn longest_string(value: &mut Value) -> Option<&mut String> {
    match value {
        Value::String(s) => Some(s),
        Value::Array(items) => items.iter_mut().filter_map(longest_string).max_by_key(|s| s.len()),
        Value::Object(map) => map.values_mut().filter_map(longest_string).max_by_key(|s| s.len()),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fit_leaves_small_results_alone() {
        let v = json!({"a": [1, 2, 3]});
        assert_eq!(fit(v.clone(), 100, "narrow"), v.to_string());
    }

    #[test]
    fn fit_drops_items_and_fixes_paging() {
        let items: Vec<Value> = (0..200).map(|i| json!({"id": i, "text": "x".repeat(50)})).collect();
        let v = json!({"total": 500, "offset": 100, "next_offset": 300, "alarms": items});
        let out = fit(v, 4000, "Narrow with asset_id.");
        assert!(out.len() <= 4000, "{}", out.len());
        let parsed: Value = serde_json::from_str(&out).expect("still JSON");
        let kept = parsed["alarms"].as_array().unwrap().len() as i64;
        assert!(kept > 10 && kept < 200);
        assert_eq!(parsed["next_offset"], json!(100 + kept));
        let note = parsed["truncated"].as_str().unwrap();
        assert!(note.contains(&format!("{} item(s) of 'alarms' omitted", 200 - kept)), "{note}");
        assert!(note.ends_with("Narrow with asset_id."), "{note}");
    }

    #[test]
    fn fit_cuts_a_long_string_with_a_marker() {
        let v = json!({"text": "word ".repeat(10_000), "citation": "a.md#1"});
        let out = fit(v, 2000, "Read a smaller part.");
        assert!(out.len() <= 2000);
        let parsed: Value = serde_json::from_str(&out).unwrap();
        assert!(parsed["text"].as_str().unwrap().ends_with("…[cut]"));
        assert_eq!(parsed["citation"], "a.md#1");
        assert!(parsed["truncated"].as_str().unwrap().contains("characters of text cut"));
    }
}
