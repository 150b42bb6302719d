//! The `rules` model: deterministic, offline, no network. It calls the same tools in a
//! fixed plan and writes its answer only from their results, with citations. It is the
//! default when no model is configured and the last link of every chain, so a triage
//! note is always produced.

use serde_json::{Value, json};

use super::model::{
    BoxFuture, Finish, GroupedAlarm, Message, Model, ModelError, ModelReply, ModelRequest, TaskFacts, ToolCall, Usage,
};
use super::note::{Evidence, TriageNote, Urgency};
use crate::domain::shown;

mod answers;
mod episode;
mod triage;

use answers::*;
use episode::*;
use triage::*;

pub struct Rules;

impl Model for Rules {
    fn name(&self) -> &str {
        "rules"
    }

    fn complete<'a>(
        &'a self,
        req: &'a ModelRequest,
        _timeout: std::time::Duration,
    ) -> BoxFuture<'a, Result<ModelReply, ModelError>> {
        Box::pin(async move { Ok(next(req)) })
    }
}

/// Tool results so far: (tool name, arguments, parsed result or None on error).
fn observations(messages: &[Message]) -> Vec<(String, Value, Option<Value>)> {
    let mut calls: Vec<&ToolCall> = Vec::new();
    let mut out = Vec::new();
    for m in messages {
        match m {
            Message::Assistant { tool_calls, .. } => calls.extend(tool_calls.iter()),
            Message::Tool { call_id, name, content, is_error } => {
                let args = calls
                    .iter()
                    .find(|c| &c.id == call_id)
                    .and_then(|c| c.arguments.clone().ok())
                    .unwrap_or(Value::Null);
                let parsed = if *is_error { None } else { parse_data(content) };
                out.push((name.clone(), args, parsed));
            }
            _ => {}
        }
    }
    out
}

/// The JSON inside a `<data>` wrapper.
fn parse_data(content: &str) -> Option<Value> {
    let start = content.find('{')?;
    let end = content.rfind('}')?;
    serde_json::from_str(&content[start..=end]).ok()
}

fn call(id: usize, name: &str, arguments: Value) -> ToolCall {
    ToolCall { id: format!("rules_{id}"), name: name.to_string(), arguments: Ok(arguments) }
}

fn reply_calls(calls: Vec<ToolCall>) -> ModelReply {
    ModelReply { text: None, tool_calls: calls, finish: Finish::ToolCalls, usage: Usage::default() }
}

fn reply_text(text: String) -> ModelReply {
    ModelReply { text: Some(text), tool_calls: Vec::new(), finish: Finish::Stop, usage: Usage::default() }
}

/// What the tools returned so far, as the plan reads it.
struct Seen<'a> {
    req: &'a ModelRequest,
    seen: Vec<(String, Value, Option<Value>)>,
}

impl Seen<'_> {
    fn offered(&self, name: &str) -> bool {
        self.req.tools.iter().any(|t| t.name == name)
    }

    fn done(&self, name: &str) -> bool {
        self.seen.iter().any(|(n, _, _)| n == name)
    }

    /// The latest successful result of `name`.
    fn result(&self, name: &str) -> Option<Value> {
        self.seen.iter().rev().find(|(n, _, r)| n == name && r.is_some()).and_then(|(_, _, r)| r.clone())
    }

    /// An id for the next call, unique in the run.
    fn next_id(&self, calls: &[ToolCall]) -> usize {
        self.seen.len() + calls.len()
    }
}

fn next(req: &ModelRequest) -> ModelReply {
    let s = Seen { req, seen: observations(&req.messages) };
    let t = &req.task;
    match (t.alarm_id, &t.asset_id, &t.question) {
        (Some(_), Some(asset), _) => triage_step(&s, asset),
        (_, _, Some(question)) => question_step(&s, question),
        _ => handover_step(&s),
    }
}

/// A sensor from `get_asset_details` as a note or an answer says it: `PUMP-004.PRESS-SUC
/// reads 0.52 bar (normal band; limits ll 0.3, l 0.5)`.
fn sensor_reads(s: &Value) -> String {
    let limits: Vec<String> = ["ll", "l", "h", "hh"]
        .iter()
        .filter(|k| !s["limits"][**k].is_null())
        .map(|k| format!("{k} {}", s["limits"][*k]))
        .collect();
    format!(
        "{} reads {} {} ({} band; limits {})",
        s["id"].as_str().unwrap_or_default(),
        s["latest"]["value"],
        s["unit"].as_str().unwrap_or_default(),
        s["band"].as_str().unwrap_or("unknown").replace('_', " "),
        if limits.is_empty() { "none".into() } else { limits.join(", ") }
    )
}
