//! The OpenAI Chat Completions wire format with `tools`: OpenAI, Azure OpenAI, Ollama,
//! vLLM, llama.cpp server, LM Studio, LiteLLM. Streams (SSE) when the request asks
//! for deltas. For models without native tool calls, `json` tool mode asks for a JSON
//! object that is either a tool call or the final answer.

use std::time::Duration;

use std::sync::atomic::{AtomicU8, Ordering};

use serde_json::{Value, json};

use super::http::{Http, error_from_response, read_sse};
use super::model::{
    BoxFuture, ErrorClass, Finish, Message, Model, ModelError, ModelReply, ModelRequest, StreamEvent, ToolCall, Usage,
    parse_arguments,
};
use crate::support::Secret;

#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ToolMode {
    /// The `tools` parameter and `tool_calls` in replies.
    Native,
    /// No `tools`: the reply is constrained by `response_format` to a tool call or a
    /// final answer, written as JSON.
    Json,
}

pub struct OpenAi {
    name: String,
    url: String,
    model: String,
    api_key: Option<Secret>,
    tool_mode: ToolMode,
    structured_output: bool,
    /// How this server takes `response_format`, learnt from its refusals: servers differ
    /// (llama-cpp-python refuses `json_schema`), and a refusal is not the model failing.
    format: AtomicU8,
    sampling: Sampling,
    http: Http,
}

/// Sampling settings sent with every request when set: `temperature` 0 and a fixed
/// `seed` make a server such as llama.cpp's answer the same prompt the same way.
#[derive(Debug, Clone, Copy, Default, PartialEq, serde::Deserialize)]
pub struct Sampling {
    pub temperature: Option<f64>,
    pub seed: Option<u64>,
}

/// The `response_format` levels, most to least constrained.
const FORMAT_SCHEMA: u8 = 0;
const FORMAT_OBJECT: u8 = 1;
const FORMAT_NONE: u8 = 2;

impl OpenAi {
    pub fn new(
        base_url: &str,
        model: &str,
        api_key: Option<Secret>,
        tool_mode: ToolMode,
        structured_output: bool,
    ) -> OpenAi {
        OpenAi {
            name: format!("openai:{model}"),
            url: format!("{}/chat/completions", base_url.trim_end_matches('/')),
            model: model.to_string(),
            api_key,
            tool_mode,
            structured_output,
            format: AtomicU8::new(FORMAT_SCHEMA),
            sampling: Sampling::default(),
            http: Http::new(),
        }
    }

    pub fn with_sampling(mut self, sampling: Sampling) -> OpenAi {
        self.sampling = sampling;
        self
    }

    fn json_mode(&self, req: &ModelRequest) -> bool {
        self.tool_mode == ToolMode::Json && !req.tools.is_empty()
    }

    /// `response_format` for `schema`, at the level this server takes.
    fn response_format(&self, name: &str, schema: &Value) -> Option<Value> {
        match self.format.load(Ordering::Relaxed) {
            FORMAT_SCHEMA => Some(json!({"type": "json_schema", "json_schema": {"name": name, "schema": schema}})),
            FORMAT_OBJECT => Some(json!({"type": "json_object"})),
            _ => None,
        }
    }

    fn body(&self, req: &ModelRequest) -> Value {
        let json_mode = self.json_mode(req);
        let mut messages: Vec<Value> = req.messages.iter().map(|m| wire_message(m, json_mode)).collect();
        let mut body = json!({"model": self.model, "max_tokens": req.max_tokens});
        if let Some(t) = self.sampling.temperature {
            body["temperature"] = json!(t);
        }
        if let Some(seed) = self.sampling.seed {
            body["seed"] = json!(seed);
        }
        let format = if json_mode {
            messages.insert(1.min(messages.len()), json!({"role": "system", "content": json_mode_instructions(req)}));
            self.response_format("tool_call_or_answer", &json_mode_schema(req))
        } else {
            if !req.tools.is_empty() {
                body["tools"] = Value::Array(
                    req.tools
                        .iter()
                        .map(|t| json!({"type": "function", "function": {"name": t.name, "description": t.description, "parameters": t.schema}}))
                        .collect(),
                );
            }
            // Only when the harness says the answer is due: llama.cpp constrains every
            // reply to the format, and a model held to the note's schema cannot call a tool.
            req.final_schema
                .as_ref()
                .filter(|_| self.structured_output)
                .and_then(|s| self.response_format("final_answer", s))
        };
        if let Some(format) = format {
            body["response_format"] = format;
        }
        body["messages"] = Value::Array(messages);
        // json tool mode is not streamed: its text is JSON, not words for the operator.
        if req.stream.is_some() && !json_mode {
            body["stream"] = json!(true);
            body["stream_options"] = json!({"include_usage": true});
        }
        body
    }

    /// One request; a refused `response_format` steps down a level and is sent again.
    async fn call(&self, req: &ModelRequest, timeout: Duration) -> Result<ModelReply, ModelError> {
        loop {
            let body = self.body(req);
            match self.send(req, &body, timeout).await {
                Err(e) if body.get("response_format").is_some() && refuses_the_format(&e) => {
                    let level = self.format.fetch_add(1, Ordering::Relaxed) + 1;
                    tracing::warn!(stage = "model", provider = %self.name, error = %e,
                        now = ["json_schema", "json_object", "none"][level.min(FORMAT_NONE) as usize],
                        "the server refused response_format; asking with less");
                }
                result => return result,
            }
        }
    }

    async fn send(&self, req: &ModelRequest, body: &Value, timeout: Duration) -> Result<ModelReply, ModelError> {
        let mut request = self.http.client().post(&self.url).timeout(timeout).json(body);
        if let Some(key) = &self.api_key {
            request = request.bearer_auth(key.expose());
        }
        let response = request.send().await.map_err(|e| self.http.transport_error(&self.name, e))?;
        if !response.status().is_success() {
            return Err(error_from_response(&self.name, response, self.api_key.as_ref()).await);
        }
        let reply = match (&req.stream, body["stream"] == true) {
            (Some(sink), true) => {
                let mut acc = StreamAccumulator::default();
                read_sse(&self.name, response, |data| {
                    if data == "[DONE]" {
                        return Ok(());
                    }
                    let chunk: Value = serde_json::from_str(data).map_err(|e| {
                        ModelError::new(&self.name, ErrorClass::Malformed, format!("bad stream chunk: {e}"))
                    })?;
                    if let Some(text) = acc.push(&chunk) {
                        let _ = sink.send(StreamEvent::Text { text });
                    }
                    Ok(())
                })
                .await?;
                acc.finish()
            }
            _ => {
                let value: Value = response.json().await.map_err(|e| {
                    ModelError::new(&self.name, ErrorClass::Malformed, format!("reply is not JSON: {e}"))
                })?;
                parse_reply(&self.name, &value)?
            }
        };
        if !self.json_mode(req) {
            return Ok(reply);
        }
        let reply = from_json_mode(&self.name, reply)?;
        if let (Some(sink), Some(text)) = (&req.stream, &reply.text) {
            let _ = sink.send(StreamEvent::Text { text: text.clone() });
        }
        Ok(reply)
    }
}

/// Whether an error is the server refusing `response_format` (not the model failing).
fn refuses_the_format(e: &ModelError) -> bool {
    let m = e.message.to_ascii_lowercase();
    matches!(e.status, Some(400 | 422 | 500)) && ["response_format", "json_schema"].iter().any(|w| m.contains(w))
}

impl Model for OpenAi {
    fn name(&self) -> &str {
        &self.name
    }

    fn complete<'a>(
        &'a self,
        req: &'a ModelRequest,
        timeout: Duration,
    ) -> BoxFuture<'a, Result<ModelReply, ModelError>> {
        Box::pin(self.call(req, timeout))
    }
}

fn wire_message(m: &Message, json_mode: bool) -> Value {
    match m {
        Message::System { content } => json!({"role": "system", "content": content}),
        Message::User { content } => json!({"role": "user", "content": content}),
        Message::Assistant { content, tool_calls } if json_mode => {
            let text = match tool_calls.first() {
                Some(c) => json!({"action": "call_tool", "tool": c.name, "arguments": c.arguments.clone().unwrap_or(json!({}))}).to_string(),
                None => json!({"action": "final", "answer": content}).to_string(),
            };
            json!({"role": "assistant", "content": text})
        }
        Message::Assistant { content, tool_calls } => {
            // "" rather than null: llama-cpp-python's server refuses a null content (500).
            let mut m = json!({"role": "assistant", "content": content.as_deref().unwrap_or_default()});
            if !tool_calls.is_empty() {
                // Arguments that were not JSON go back as {}: servers parse them (llama.cpp
                // fails the whole request otherwise), and the tool's error says what was wrong.
                m["tool_calls"] = Value::Array(
                    tool_calls
                        .iter()
                        .map(|c| {
                            let arguments = c.arguments.as_ref().map_or_else(|_| "{}".to_string(), Value::to_string);
                            json!({"id": c.id, "type": "function", "function": {"name": c.name, "arguments": arguments}})
                        })
                        .collect(),
                );
            }
            m
        }
        Message::Tool { name, content, .. } if json_mode => {
            json!({"role": "user", "content": format!("Result of {name}:\n{content}")})
        }
        Message::Tool { call_id, content, .. } => json!({"role": "tool", "tool_call_id": call_id, "content": content}),
    }
}

fn finish(reason: Option<&str>) -> Finish {
    match reason {
        Some("stop") | Some("end_turn") => Finish::Stop,
        Some("tool_calls") | Some("function_call") => Finish::ToolCalls,
        Some("length") => Finish::Length,
        Some("content_filter") => Finish::ContentFilter,
        _ => Finish::Other,
    }
}

fn usage(v: &Value) -> Usage {
    Usage {
        input_tokens: v["prompt_tokens"].as_u64().unwrap_or(0),
        output_tokens: v["completion_tokens"].as_u64().unwrap_or(0),
    }
}

/// Parses a non-streamed Chat Completions response.
pub fn parse_reply(provider: &str, v: &Value) -> Result<ModelReply, ModelError> {
    let malformed = |m: &str| ModelError::new(provider, ErrorClass::Malformed, m.to_string());
    let choice = v["choices"].get(0).ok_or_else(|| malformed("no choices in the reply"))?;
    let message = &choice["message"];
    let tool_calls = message["tool_calls"]
        .as_array()
        .map(|calls| {
            calls
                .iter()
                .enumerate()
                .map(|(i, c)| ToolCall {
                    id: c["id"].as_str().map_or_else(|| format!("call_{i}"), str::to_string),
                    name: c["function"]["name"].as_str().unwrap_or_default().to_string(),
                    arguments: parse_arguments(&c["function"]["arguments"]),
                })
                .collect()
        })
        .unwrap_or_default();
    let text = message["content"].as_str().filter(|s| !s.is_empty()).map(str::to_string);
    if text.is_none() && Vec::is_empty(&tool_calls) {
        return Err(malformed("the reply has neither text nor tool calls"));
    }
    Ok(ModelReply { text, tool_calls, finish: finish(choice["finish_reason"].as_str()), usage: usage(&v["usage"]) })
}

/// Reassembles a streamed reply: text deltas, and tool calls whose name and argument
/// fragments arrive in pieces keyed by `index`.
#[derive(Default)]
pub struct StreamAccumulator {
    text: String,
    calls: Vec<(String, String, String)>,
    finish: Option<String>,
    usage: Usage,
}

impl StreamAccumulator {
    /// Takes one chunk; returns the text delta it carried, if any.
    pub fn push(&mut self, chunk: &Value) -> Option<String> {
        if chunk["usage"].is_object() {
            self.usage = usage(&chunk["usage"]);
        }
        let choice = chunk["choices"].get(0)?;
        if let Some(reason) = choice["finish_reason"].as_str() {
            self.finish = Some(reason.to_string());
        }
        let delta = &choice["delta"];
        for call in delta["tool_calls"].as_array().into_iter().flatten() {
            let index = call["index"].as_u64().unwrap_or(self.calls.len() as u64) as usize;
            while self.calls.len() <= index {
                self.calls.push(Default::default());
            }
            let slot = &mut self.calls[index];
            if let Some(id) = call["id"].as_str() {
                slot.0 = id.to_string();
            }
            // OpenAI sends the name once, possibly in pieces; llama-cpp-python repeats
            // the whole name in every chunk. A repeat of what is there is not a piece.
            if let Some(name) = call["function"]["name"].as_str()
                && name != slot.1
            {
                slot.1.push_str(name);
            }
            if let Some(args) = call["function"]["arguments"].as_str() {
                slot.2.push_str(args);
            }
        }
        let text = delta["content"].as_str().filter(|s| !s.is_empty())?;
        self.text.push_str(text);
        Some(text.to_string())
    }

    pub fn finish(self) -> ModelReply {
        let tool_calls = self
            .calls
            .into_iter()
            .enumerate()
            .map(|(i, (id, name, args))| ToolCall {
                id: if id.is_empty() { format!("call_{i}") } else { id },
                name,
                arguments: parse_arguments(&Value::String(args)),
            })
            .collect();
        ModelReply {
            text: Some(self.text).filter(|t| !t.is_empty()),
            tool_calls,
            finish: finish(self.finish.as_deref()),
            usage: self.usage,
        }
    }
}

fn json_mode_schema(req: &ModelRequest) -> Value {
    let names: Vec<&str> = req.tools.iter().map(|t| t.name.as_str()).collect();
    json!({
        "type": "object",
        "properties": {
            "action": {"enum": ["call_tool", "final"]},
            "tool": {"enum": names},
            "arguments": {"type": "object"},
            "answer": {"type": "string"},
        },
        "required": ["action"],
    })
}

fn json_mode_instructions(req: &ModelRequest) -> String {
    let mut text = String::from(
        "You call tools by replying with JSON only: {\"action\":\"call_tool\",\"tool\":NAME,\"arguments\":{...}} \
         for one tool call, or {\"action\":\"final\",\"answer\":TEXT} when you are done. Tools:\n",
    );
    for t in &req.tools {
        text.push_str(&format!("- {}: {}\n  arguments schema: {}\n", t.name, t.description, t.schema));
    }
    text
}

static JSON_CALLS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// Turns a `json` tool-mode reply into a tool call or a final answer.
fn from_json_mode(provider: &str, reply: ModelReply) -> Result<ModelReply, ModelError> {
    let malformed = |m: String| ModelError::new(provider, ErrorClass::Malformed, m);
    let text = reply.text.as_deref().unwrap_or_default();
    let v: Value =
        serde_json::from_str(text).map_err(|e| malformed(format!("json tool mode: reply is not JSON: {e}")))?;
    match v["action"].as_str() {
        Some("call_tool") => {
            let name =
                v["tool"].as_str().ok_or_else(|| malformed("json tool mode: call_tool without a tool name".into()))?;
            let n = JSON_CALLS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            Ok(ModelReply {
                text: None,
                tool_calls: vec![ToolCall {
                    id: format!("json_{n}"),
                    name: name.to_string(),
                    arguments: parse_arguments(&v["arguments"]),
                }],
                finish: Finish::ToolCalls,
                usage: reply.usage,
            })
        }
        Some("final") => match v["answer"].as_str().map(str::trim).filter(|a| !a.is_empty()) {
            Some(answer) => Ok(ModelReply {
                text: Some(answer.to_string()),
                tool_calls: Vec::new(),
                finish: reply.finish,
                usage: reply.usage,
            }),
            None => Err(malformed("json tool mode: a final action without an answer".into())),
        },
        _ => Err(malformed(format!("json tool mode: unknown action in {text}"))),
    }
}

/// Default per-call timeout when the run's deadline allows more.
pub const DEFAULT_CALL_TIMEOUT: Duration = Duration::from_secs(120);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_parallel_tool_calls_and_usage() {
        let v = json!({"choices": [{"message": {"content": null, "tool_calls": [
            {"id": "a", "type": "function", "function": {"name": "read_doc", "arguments": "{\"citation\":\"x.md#0\"}"}},
            {"id": "b", "type": "function", "function": {"name": "list_assets", "arguments": {"kind": "motor"}}},
            {"id": "c", "type": "function", "function": {"name": "list_assets", "arguments": "{oops"}}
        ]}, "finish_reason": "tool_calls"}], "usage": {"prompt_tokens": 10, "completion_tokens": 3}});
        let r = parse_reply("t", &v).unwrap();
        assert_eq!(r.tool_calls.len(), 3);
        assert_eq!(r.tool_calls[1].arguments, Ok(json!({"kind": "motor"})));
        assert_eq!(r.tool_calls[2].arguments, Err("{oops".into()));
        assert_eq!((r.finish, r.usage.input_tokens), (Finish::ToolCalls, 10));
        assert!(parse_reply("t", &json!({"choices": []})).is_err());
    }

    #[test]
    fn reassembles_streamed_tool_call_fragments() {
        let mut acc = StreamAccumulator::default();
        for chunk in [
            json!({"choices": [{"delta": {"content": "Check"}}]}),
            json!({"choices": [{"delta": {"content": "ing."}}]}),
            json!({"choices": [{"delta": {"tool_calls": [{"index": 0, "id": "c1", "function": {"name": "get_asset", "arguments": ""}}]}}]}),
            json!({"choices": [{"delta": {"tool_calls": [{"index": 0, "function": {"name": "_details", "arguments": "{\"asset_"}}]}}]}),
            json!({"choices": [{"delta": {"tool_calls": [{"index": 0, "function": {"arguments": "id\":\"PUMP-007\"}"}}]}}]}),
            json!({"choices": [{"delta": {}, "finish_reason": "tool_calls"}]}),
            json!({"choices": [], "usage": {"prompt_tokens": 7, "completion_tokens": 2}}),
        ] {
            acc.push(&chunk);
        }
        let r = acc.finish();
        assert_eq!(r.text.as_deref(), Some("Checking."));
        assert_eq!(r.tool_calls[0].name, "get_asset_details");
        assert_eq!(r.tool_calls[0].arguments, Ok(json!({"asset_id": "PUMP-007"})));
        assert_eq!((r.finish, r.usage.output_tokens), (Finish::ToolCalls, 2));
    }
}
