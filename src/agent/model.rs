//! The model interface: "given messages and tool definitions, return text or tool
//! calls", with errors classified so the harness knows whether to retry, repair or
//! fall back.

use std::future::Future;
use std::pin::Pin;
use std::time::Duration;

use serde::Serialize;
use serde_json::Value;
use tokio::sync::mpsc::UnboundedSender;

/// What a run streams as it goes: answer text as it arrives, and each tool call as it
/// is made (the chat shows both live).
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum StreamEvent {
    Text {
        text: String,
    },
    Tool {
        name: String,
        arguments: String,
    },
    /// The text streamed so far is withdrawn (a draft that failed its checks, or a
    /// model set aside); what is kept follows.
    Retract {
        reason: String,
    },
}

pub type StreamSink = UnboundedSender<StreamEvent>;

pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// One message of a conversation, in provider-neutral form.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "role", rename_all = "snake_case")]
pub enum Message {
    System {
        content: String,
    },
    User {
        content: String,
    },
    Assistant {
        content: Option<String>,
        tool_calls: Vec<ToolCall>,
    },
    /// The answer to one tool call; every call is answered exactly once.
    Tool {
        call_id: String,
        name: String,
        content: String,
        is_error: bool,
    },
}

/// A tool call as the model made it. `arguments` is `Err(raw)` when the model sent
/// something that is not a JSON object.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ToolCall {
    pub id: String,
    pub name: String,
    #[serde(serialize_with = "ser_args")]
    pub arguments: Result<Value, String>,
}

fn ser_args<S: serde::Serializer>(a: &Result<Value, String>, s: S) -> Result<S::Ok, S::Error> {
    match a {
        Ok(v) => v.serialize(s),
        Err(raw) => raw.serialize(s),
    }
}

impl ToolCall {
    /// The arguments as the wire carries them: a JSON string.
    pub fn arguments_text(&self) -> String {
        match &self.arguments {
            Ok(v) => v.to_string(),
            Err(raw) => raw.clone(),
        }
    }
}

/// Parses tool-call arguments that arrive as a JSON string (the OpenAI wire format) or
/// as an object (as some servers send them).
pub fn parse_arguments(raw: &Value) -> Result<Value, String> {
    match raw {
        Value::Object(_) => Ok(raw.clone()),
        Value::Null => Ok(Value::Object(Default::default())),
        Value::String(s) if s.trim().is_empty() => Ok(Value::Object(Default::default())),
        Value::String(s) => match serde_json::from_str::<Value>(s) {
            Ok(v @ Value::Object(_)) => Ok(v),
            _ => Err(s.clone()),
        },
        other => Err(other.to_string()),
    }
}

/// A tool as offered to a model.
#[derive(Debug, Clone, Serialize)]
pub struct ToolSpec {
    pub name: String,
    pub description: String,
    pub schema: Value,
}

/// What the harness asks of a model.
#[derive(Debug, Clone, Default)]
pub struct ModelRequest {
    pub messages: Vec<Message>,
    pub tools: Vec<ToolSpec>,
    pub max_tokens: u32,
    /// JSON Schema the final answer must follow, where the provider can enforce it.
    pub final_schema: Option<Value>,
    /// Facts the harness knows about the task, for the offline `rules` model.
    pub task: TaskFacts,
    /// Streamed text deltas go here when set (chat).
    pub stream: Option<StreamSink>,
}

/// The task in structured form. Only the `rules` model reads it.
#[derive(Debug, Clone, Default, Serialize)]
pub struct TaskFacts {
    pub alarm_id: Option<i64>,
    pub asset_id: Option<String>,
    pub sensor_id: Option<String>,
    pub code: Option<String>,
    pub question: Option<String>,
    /// The assets a question names, directly or by a sensor, as the twin spells them, in
    /// order, at most three; and the words that read like ids but name nothing in it.
    pub mentioned: Vec<String>,
    pub not_in_twin: Vec<String>,
    /// Occurrences on the same asset triaged in the same run, after the lead alarm.
    pub grouped: Vec<GroupedAlarm>,
    /// Where the lead alarm's point stands: chattering, a bad actor, a repeat, long active.
    pub standing: Option<crate::alarms::standing::Standing>,
    /// The lead alarm's point in the master alarm database, when it has an entry; and
    /// whether it was looked up (a triage task does, other tasks do not).
    pub rationalization: Option<crate::alarms::points::Rationalization>,
    pub rationalized_checked: bool,
    /// The episode whose note this run writes, led by its ranked initiator (the alarm
    /// above): one note for every alarm in it.
    pub episode: Option<EpisodeFacts>,
}

/// The episode an episode note is written for, as it stood when the run began.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct EpisodeFacts {
    pub episode_id: i64,
    pub points: i64,
    pub activations: i64,
}

/// One of the alarms a triage run covers besides its lead.
#[derive(Debug, Clone, Serialize)]
pub struct GroupedAlarm {
    pub alarm_id: i64,
    pub code: String,
    pub severity: String,
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct Usage {
    pub input_tokens: u64,
    pub output_tokens: u64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Finish {
    Stop,
    ToolCalls,
    /// Cut off by the output token limit.
    Length,
    ContentFilter,
    Other,
}

/// A model's reply: text, tool calls, or both.
#[derive(Debug, Clone, PartialEq)]
pub struct ModelReply {
    pub text: Option<String>,
    pub tool_calls: Vec<ToolCall>,
    pub finish: Finish,
    pub usage: Usage,
}

/// How a failed call should be handled.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ErrorClass {
    /// Timeout, connection, 408/409/429, 5xx, 529: retry with backoff, then fall back.
    Transient,
    /// The reply could not be understood: repair once, then fall back.
    Malformed,
    /// 400, 401, 403, 404, quota: do not retry this provider; fall back.
    Permanent,
}

impl ErrorClass {
    pub fn as_str(self) -> &'static str {
        match self {
            ErrorClass::Transient => "transient",
            ErrorClass::Malformed => "malformed",
            ErrorClass::Permanent => "permanent",
        }
    }
}

#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("{class:?} model error from {provider}: {message}")]
pub struct ModelError {
    pub provider: String,
    pub class: ErrorClass,
    pub message: String,
    pub status: Option<u16>,
    /// From `Retry-After` or `retry-after-ms`.
    pub retry_after: Option<Duration>,
}

impl ModelError {
    pub fn new(provider: &str, class: ErrorClass, message: impl Into<String>) -> ModelError {
        ModelError { provider: provider.to_string(), class, message: message.into(), status: None, retry_after: None }
    }
}

/// Classifies an HTTP status. Quota exhaustion (429 with an `insufficient_quota` body)
/// is permanent: waiting will not fix it. So is a 500 that blames the request itself
/// (llama.cpp's "Failed to parse tool call arguments", llama-cpp-python's validation
/// errors): the same request would fail the same way.
pub fn classify_status(status: u16, body: &str) -> ErrorClass {
    match status {
        429 if body.contains("insufficient_quota") => ErrorClass::Permanent,
        500 if blames_the_request(body) => ErrorClass::Permanent,
        408 | 409 | 429 | 500..=599 => ErrorClass::Transient,
        _ => ErrorClass::Permanent,
    }
}

fn blames_the_request(body: &str) -> bool {
    let body = body.to_ascii_lowercase();
    ["failed to parse", "validation error", "invalid request", "input should be"].iter().any(|w| body.contains(w))
}

/// A model provider.
pub trait Model: Send + Sync {
    /// `kind:model`, for logs and the audit trail.
    fn name(&self) -> &str;
    /// One call, to be abandoned after `timeout`.
    fn complete<'a>(
        &'a self,
        req: &'a ModelRequest,
        timeout: Duration,
    ) -> BoxFuture<'a, Result<ModelReply, ModelError>>;
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn arguments_arrive_as_strings_or_objects() {
        assert_eq!(parse_arguments(&json!("{\"a\":1}")), Ok(json!({"a": 1})));
        assert_eq!(parse_arguments(&json!({"a": 1})), Ok(json!({"a": 1})));
        assert_eq!(parse_arguments(&json!("")), Ok(json!({})));
        assert_eq!(parse_arguments(&json!("{\"a\":")), Err("{\"a\":".to_string()));
        assert_eq!(parse_arguments(&json!("[1]")), Err("[1]".to_string()));
    }

    #[test]
    fn statuses_are_classified() {
        for s in [408, 409, 429, 500, 502, 503, 529] {
            assert_eq!(classify_status(s, ""), ErrorClass::Transient, "{s}");
        }
        for s in [400, 401, 403, 404, 422] {
            assert_eq!(classify_status(s, ""), ErrorClass::Permanent, "{s}");
        }
        assert_eq!(classify_status(429, r#"{"error":{"code":"insufficient_quota"}}"#), ErrorClass::Permanent);
        let llama = r#"{"error":{"code":500,"message":"Failed to parse tool call arguments as JSON: [json.exception.parse_error.101]","type":"server_error"}}"#;
        assert_eq!(classify_status(500, llama), ErrorClass::Permanent, "retrying the same content fails the same way");
    }
}
