//! A scripted model server for tests and benchmarks: the one stand-in for the LLM.
//!
//! It speaks the OpenAI Chat Completions (`POST /v1/chat/completions`, streamed or not)
//! and Anthropic Messages (`POST /v1/messages`) wire formats over real HTTP on a local
//! port, answers each request with the next step of a script, and records every
//! request body. Like the real APIs, it rejects (400) a conversation whose tool results
//! do not answer the previous assistant turn's tool calls exactly. It also serves
//! `POST /v1/embeddings` when a test gives it an embedding function.

use std::collections::VecDeque;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Router;
use axum::body::Body;
use axum::extract::State;
use axum::http::{HeaderName, HeaderValue, Response, StatusCode};
use axum::routing::post;
use serde_json::{Value, json};

/// One scripted answer.
#[derive(Debug, Clone)]
pub enum Reply {
    /// A final text answer.
    Text(String),
    /// Tool calls: (id, name, arguments as the JSON text the model "wrote").
    ToolCalls(Vec<(String, String, String)>),
    /// An HTTP error with headers (e.g. 429 with `retry-after`).
    Status { status: u16, headers: Vec<(String, String)>, body: String },
    /// Wait this long, then give the next reply (for timeouts).
    Delay(Duration, Box<Reply>),
    /// The reply cut off at the output limit: `finish_reason: "length"`, and each tool
    /// call's arguments cut in half.
    Cut(Box<Reply>),
    /// A diligent model, for tests of many triage runs at once whose alarms are not
    /// known in advance: with no tool result in the conversation yet it reads the
    /// alarm's asset (`get_asset_details`), then writes a note that names the alarm,
    /// both taken from the alarm record in the task.
    Triage,
}

/// How a real server departs from the reference API, as seen with llama.cpp's
/// `llama-server` and `llama-cpp-python`'s server; each off by default.
#[derive(Debug, Clone, Copy, Default)]
pub struct Quirks {
    /// Every streamed chunk of a tool call repeats its name and id (llama-cpp-python).
    pub repeat_names: bool,
    /// No usage, streamed or not (llama-cpp-python's streams).
    pub no_usage: bool,
    /// HTTP 500 for an assistant message with `"content": null` (llama-cpp-python).
    pub refuse_null_content: bool,
    /// HTTP 500 for tool-call arguments in the conversation that are not JSON (llama-server).
    pub refuse_unparseable_arguments: bool,
    /// HTTP 500 for `response_format` of type `json_schema` (llama-cpp-python).
    pub refuse_json_schema: bool,
    /// With `response_format`, every reply is held to it, so no reply is a tool call
    /// (llama-server): a scripted tool call comes back as the text `{}`.
    pub format_constrains_replies: bool,
}

impl Reply {
    pub fn text(s: &str) -> Reply {
        Reply::Text(s.to_string())
    }

    /// One tool call with JSON arguments.
    pub fn call(id: &str, name: &str, args: Value) -> Reply {
        Reply::ToolCalls(vec![(id.to_string(), name.to_string(), args.to_string())])
    }

    pub fn calls(calls: &[(&str, &str, Value)]) -> Reply {
        Reply::ToolCalls(calls.iter().map(|(i, n, a)| (i.to_string(), n.to_string(), a.to_string())).collect())
    }

    pub fn status(status: u16, headers: &[(&str, &str)]) -> Reply {
        Reply::Status {
            status,
            headers: headers.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect(),
            body: json!({"error": {"message": format!("scripted {status}"), "type": "scripted"}}).to_string(),
        }
    }
}

#[derive(Default)]
struct Script {
    replies: VecDeque<Reply>,
    /// Replayed from the start when the script runs out (benchmarks); else errors.
    cycle: Vec<Reply>,
    requests: Vec<Value>,
    quirks: Quirks,
    embed: Option<fn(&str) -> Vec<f32>>,
}

/// A running scripted server. Stops when dropped.
pub struct ScriptedServer {
    addr: SocketAddr,
    script: Arc<Mutex<Script>>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for ScriptedServer {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl ScriptedServer {
    /// Starts on 127.0.0.1 and a free port, with `replies` played once.
    pub async fn start(replies: Vec<Reply>) -> ScriptedServer {
        ScriptedServer::start_with(replies, Vec::new()).await
    }

    /// Starts with a script replayed forever (for benchmarks).
    pub async fn cycling(replies: Vec<Reply>) -> ScriptedServer {
        ScriptedServer::start_with(Vec::new(), replies).await
    }

    /// Starts with `replies` played once, behaving as a real server with `quirks` does.
    pub async fn start_as(replies: Vec<Reply>, quirks: Quirks) -> ScriptedServer {
        let server = ScriptedServer::start_with(replies, Vec::new()).await;
        server.script.lock().expect("script lock").quirks = quirks;
        server
    }

    async fn start_with(replies: Vec<Reply>, cycle: Vec<Reply>) -> ScriptedServer {
        let script = Arc::new(Mutex::new(Script {
            replies: replies.into(),
            cycle,
            requests: Vec::new(),
            quirks: Quirks::default(),
            embed: None,
        }));
        let app = Router::new()
            .route("/v1/chat/completions", post(openai))
            .route("/v1/messages", post(anthropic))
            .route("/v1/embeddings", post(embeddings))
            .with_state(Arc::clone(&script));
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind a local port");
        let addr = listener.local_addr().expect("local address");
        let task = tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        ScriptedServer { addr, script, task }
    }

    /// Base URL for the `openai` provider.
    pub fn openai_url(&self) -> String {
        format!("http://{}/v1", self.addr)
    }

    /// Base URL for the `anthropic` provider.
    pub fn anthropic_url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Every request body received, in order.
    pub fn requests(&self) -> Vec<Value> {
        self.script.lock().expect("script lock").requests.clone()
    }

    /// Serves `/v1/embeddings` with `f` as the model (without it, the endpoint answers
    /// 501 as a llama-server started without `--embeddings` does).
    pub fn serve_embeddings(&self, f: fn(&str) -> Vec<f32>) {
        self.script.lock().expect("script lock").embed = Some(f);
    }

    pub fn push(&self, replies: Vec<Reply>) {
        self.script.lock().expect("script lock").replies.extend(replies);
    }
}

fn next_reply(script: &Mutex<Script>, body: &Value) -> Option<Reply> {
    let mut s = script.lock().expect("script lock");
    s.requests.push(body.clone());
    if s.replies.is_empty() && !s.cycle.is_empty() {
        let cycle = s.cycle.clone();
        s.replies.extend(cycle);
    }
    Some(bind(s.replies.pop_front()?, body))
}

/// The reply with its [`Reply::Triage`] made concrete for this request.
fn bind(reply: Reply, body: &Value) -> Reply {
    match reply {
        Reply::Triage => triage_reply(body),
        Reply::Delay(wait, next) => Reply::Delay(wait, Box::new(bind(*next, body))),
        Reply::Cut(inner) => Reply::Cut(Box::new(bind(*inner, body))),
        other => other,
    }
}

/// What [`Reply::Triage`] answers to this request (OpenAI or Anthropic messages).
fn triage_reply(body: &Value) -> Reply {
    let messages = body["messages"].as_array().map_or(&[][..], Vec::as_slice);
    let text_of = |m: &Value| match &m["content"] {
        Value::String(s) => s.clone(),
        Value::Array(blocks) => blocks.iter().filter_map(|b| b["text"].as_str()).collect::<Vec<_>>().join("\n"),
        _ => String::new(),
    };
    let task = messages.iter().find(|m| m["role"] == "user").map(text_of).unwrap_or_default();
    let record: Value = task
        .split_once("<data source=\"alarm\">")
        .and_then(|(_, rest)| rest.split_once("</data>"))
        .and_then(|(json, _)| serde_json::from_str(json.trim()).ok())
        .unwrap_or(Value::Null);
    let field = |k: &str| record[k].as_str().unwrap_or("?").to_string();
    let (asset, code) = (field("asset_id"), field("code"));
    let read = messages.iter().any(|m| {
        m["role"] == "tool" || m["content"].as_array().is_some_and(|b| b.iter().any(|b| b["type"] == "tool_result"))
    });
    if !read {
        return Reply::call("triage_read", "get_asset_details", json!({"asset_id": asset}));
    }
    Reply::Text(
        json!({
            "summary": format!("{code} on {asset}: several alarms at once on this asset; treat them as one event."),
            "urgency": "urgent",
            "likely_causes": ["A common upstream cause on the same station"],
            "recommended_actions": [format!("Check the station overview for {asset} on SCADA")],
            "proposed_work_order": null,
            "evidence": [{"claim": format!("{asset} details read"), "source": "get_asset_details"}],
        })
        .to_string(),
    )
}

fn json_response(status: u16, body: Value) -> Response<Body> {
    Response::builder()
        .status(status)
        .header("content-type", "application/json")
        .body(Body::from(body.to_string()))
        .expect("response")
}

fn error_response(status: u16, headers: &[(String, String)], body: &str) -> Response<Body> {
    let mut r = Response::builder().status(StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR));
    for (k, v) in headers {
        if let (Ok(k), Ok(v)) = (HeaderName::try_from(k.as_str()), HeaderValue::from_str(v)) {
            r = r.header(k, v);
        }
    }
    r.header("content-type", "application/json").body(Body::from(body.to_string())).expect("response")
}

fn bad_request(message: String) -> Response<Body> {
    json_response(400, json!({"error": {"message": message, "type": "invalid_request_error"}}))
}

/// Resolves delays and cuts, then returns the reply to give and whether it was cut.
async fn resolve(mut reply: Reply) -> (Reply, bool) {
    let mut cut = false;
    loop {
        match reply {
            Reply::Delay(wait, next) => {
                tokio::time::sleep(wait).await;
                reply = *next;
            }
            Reply::Cut(inner) => {
                cut = true;
                reply = match *inner {
                    Reply::ToolCalls(calls) => Reply::ToolCalls(
                        calls
                            .into_iter()
                            .map(|(id, name, args)| (id, name, args[..args.len() / 2].to_string()))
                            .collect(),
                    ),
                    other => other,
                };
            }
            other => return (other, cut),
        }
    }
}

/// The 500 a real server gives for a request it cannot take, per `quirks`.
fn refused_by_quirks(quirks: Quirks, body: &Value) -> Option<String> {
    let messages = body["messages"].as_array().map_or(&[][..], Vec::as_slice);
    let assistant = messages.iter().filter(|m| m["role"] == "assistant");
    if quirks.refuse_null_content && assistant.clone().any(|m| m["content"].is_null()) {
        return Some(
            "1 validation error for CreateChatCompletionRequest: messages.content: Input should be a valid string"
                .into(),
        );
    }
    let unparseable = assistant
        .flat_map(|m| m["tool_calls"].as_array().cloned().unwrap_or_default())
        .any(|c| c["function"]["arguments"].as_str().is_some_and(|a| serde_json::from_str::<Value>(a).is_err()));
    if quirks.refuse_unparseable_arguments && unparseable {
        return Some(
            "Failed to parse tool call arguments as JSON: [json.exception.parse_error.101] parse error".into(),
        );
    }
    if quirks.refuse_json_schema && body["response_format"]["type"] == "json_schema" {
        return Some("1 validation error: response_format.type: Input should be 'text' or 'json_object'".into());
    }
    None
}

fn tokens(text: &str) -> u64 {
    (text.len() as u64 / 4).max(1)
}

/// Checks OpenAI's rule: an assistant turn with tool_calls is followed by exactly one
/// tool message per call id, before anything else.
fn check_openai_tool_ids(messages: &[Value]) -> Result<(), String> {
    let mut i = 0;
    while i < messages.len() {
        let calls: Vec<String> = messages[i]["tool_calls"]
            .as_array()
            .map(|c| c.iter().filter_map(|c| c["id"].as_str().map(str::to_string)).collect())
            .unwrap_or_default();
        i += 1;
        if calls.is_empty() {
            continue;
        }
        let mut answered = Vec::new();
        while i < messages.len() && messages[i]["role"] == "tool" {
            let id = messages[i]["tool_call_id"].as_str().unwrap_or_default().to_string();
            if !calls.contains(&id) || answered.contains(&id) {
                return Err(format!(
                    "Invalid parameter: messages with role 'tool' must be a response to a preceding message with 'tool_calls'; unexpected tool_call_id '{id}'"
                ));
            }
            answered.push(id);
            i += 1;
        }
        if answered.len() != calls.len() {
            return Err(format!(
                "An assistant message with 'tool_calls' must be followed by tool messages responding to each 'tool_call_id'. Missing: {:?}",
                calls.iter().filter(|c| !answered.contains(c)).collect::<Vec<_>>()
            ));
        }
    }
    Ok(())
}

/// Parses and records a request, checks its tool ids with `check`, and takes the next
/// scripted reply; or the error response a real API would give.
#[allow(clippy::result_large_err)] // an error response is an ordinary outcome here, returned at once
fn take(
    script: &Mutex<Script>,
    raw: &[u8],
    check: fn(&[Value]) -> Result<(), String>,
) -> Result<(Value, Reply), Response<Body>> {
    let body = serde_json::from_slice::<Value>(raw).map_err(|_| bad_request("body is not JSON".into()))?;
    let messages = body["messages"].as_array().map_or(&[][..], Vec::as_slice);
    if let Err(e) = check(messages) {
        script.lock().expect("script lock").requests.push(body);
        return Err(bad_request(e));
    }
    let reply = next_reply(script, &body).ok_or_else(|| {
        json_response(500, json!({"error": {"type": "api_error", "message": "the script is exhausted"}}))
    })?;
    Ok((body, reply))
}

async fn openai(State(script): State<Arc<Mutex<Script>>>, raw: axum::body::Bytes) -> Response<Body> {
    let quirks = script.lock().expect("script lock").quirks;
    if let Ok(body) = serde_json::from_slice::<Value>(&raw)
        && let Some(message) = refused_by_quirks(quirks, &body)
    {
        script.lock().expect("script lock").requests.push(body);
        return json_response(500, json!({"error": {"code": 500, "message": message, "type": "server_error"}}));
    }
    let (body, reply) = match take(&script, &raw, check_openai_tool_ids) {
        Ok(taken) => taken,
        Err(response) => return response,
    };
    let input = tokens(&body["messages"].to_string());
    let (reply, cut) = resolve(reply).await;
    let (text, calls) = match reply {
        Reply::Status { status, headers, body } => return error_response(status, &headers, &body),
        Reply::ToolCalls(_) if quirks.format_constrains_replies && body.get("response_format").is_some() => {
            (Some("{}".to_string()), Vec::new())
        }
        Reply::Text(t) => (Some(t), Vec::new()),
        Reply::ToolCalls(c) => (None, c),
        Reply::Delay(..) | Reply::Cut(_) | Reply::Triage => unreachable!("resolved and bound"),
    };
    let output = tokens(text.as_deref().unwrap_or_default()) + calls.iter().map(|c| tokens(&c.2)).sum::<u64>();
    let finish = match (cut, calls.is_empty()) {
        (true, _) => "length",
        (false, true) => "stop",
        (false, false) => "tool_calls",
    };
    let usage = (!quirks.no_usage)
        .then(|| json!({"prompt_tokens": input, "completion_tokens": output, "total_tokens": input + output}));
    if body["stream"] == true {
        return openai_stream(text, calls, finish, usage, quirks);
    }
    let tool_calls: Vec<Value> = calls
        .iter()
        .map(|(id, name, args)| json!({"id": id, "type": "function", "function": {"name": name, "arguments": args}}))
        .collect();
    let mut message = json!({"role": "assistant", "content": text});
    if !tool_calls.is_empty() {
        message["tool_calls"] = Value::Array(tool_calls);
    }
    json_response(
        200,
        json!({
            "id": "chatcmpl-scripted", "object": "chat.completion", "model": body["model"],
            "choices": [{"index": 0, "message": message, "finish_reason": finish}],
            "usage": usage,
        }),
    )
}

/// The same reply as Server-Sent Events: text in small deltas, each tool call's name
/// first and its arguments in two fragments (with its name and id again in each, as
/// llama-cpp-python sends them, under `repeat_names`), then the finish reason and usage.
fn openai_stream(
    text: Option<String>,
    calls: Vec<(String, String, String)>,
    finish: &str,
    usage: Option<Value>,
    quirks: Quirks,
) -> Response<Body> {
    let mut events: Vec<Value> = Vec::new();
    let chunk = |delta: Value, finish: Option<&str>| json!({"object": "chat.completion.chunk", "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]});
    events.push(chunk(json!({"role": "assistant", "content": ""}), None));
    if let Some(t) = text {
        let chars: Vec<char> = t.chars().collect();
        for piece in chars.chunks(8) {
            events.push(chunk(json!({"content": piece.iter().collect::<String>()}), None));
        }
    }
    for (index, (id, name, args)) in calls.iter().enumerate() {
        events.push(chunk(json!({"tool_calls": [{"index": index, "id": id, "type": "function", "function": {"name": name, "arguments": ""}}]}), None));
        let mid = args.char_indices().nth(args.chars().count() / 2).map_or(0, |(i, _)| i);
        for part in [&args[..mid], &args[mid..]] {
            let mut call = json!({"index": index, "function": {"arguments": part}});
            if quirks.repeat_names {
                call["id"] = json!(id);
                call["function"]["name"] = json!(name);
            }
            events.push(chunk(json!({"tool_calls": [call]}), None));
        }
    }
    events.push(chunk(json!({}), Some(finish)));
    if let Some(usage) = usage {
        events.push(json!({"object": "chat.completion.chunk", "choices": [], "usage": usage}));
    }
    let mut body = String::new();
    for e in events {
        body.push_str(&format!("data: {e}\n\n"));
    }
    body.push_str("data: [DONE]\n\n");
    Response::builder()
        .status(200)
        .header("content-type", "text/event-stream")
        .body(Body::from(body))
        .expect("response")
}

/// Checks Anthropic's rule: an assistant turn with tool_use blocks is followed by a
/// user turn whose tool_result blocks answer exactly those ids.
fn check_anthropic_tool_ids(messages: &[Value]) -> Result<(), String> {
    for (i, m) in messages.iter().enumerate() {
        let uses: Vec<&str> = m["content"]
            .as_array()
            .map(|b| b.iter().filter(|b| b["type"] == "tool_use").filter_map(|b| b["id"].as_str()).collect())
            .unwrap_or_default();
        if uses.is_empty() {
            continue;
        }
        let results: Vec<&str> = messages
            .get(i + 1)
            .and_then(|n| n["content"].as_array())
            .map(|b| {
                b.iter().filter(|b| b["type"] == "tool_result").filter_map(|b| b["tool_use_id"].as_str()).collect()
            })
            .unwrap_or_default();
        let mut a = uses.clone();
        let mut b = results.clone();
        a.sort();
        b.sort();
        if a != b {
            return Err(format!(
                "messages.{}: tool_use ids were found without tool_result blocks immediately after: expected {uses:?}, got {results:?}",
                i + 1
            ));
        }
    }
    Ok(())
}

async fn anthropic(State(script): State<Arc<Mutex<Script>>>, raw: axum::body::Bytes) -> Response<Body> {
    let (body, reply) = match take(&script, &raw, check_anthropic_tool_ids) {
        Ok(taken) => taken,
        Err(response) => return response,
    };
    let input = tokens(&body["messages"].to_string());
    let (content, stop) = match resolve(reply).await.0 {
        Reply::Status { status, headers, body } => return error_response(status, &headers, &body),
        Reply::Text(t) => (vec![json!({"type": "text", "text": t})], "end_turn"),
        Reply::ToolCalls(calls) => (
            calls
                .iter()
                .map(|(id, name, args)| {
                    let input: Value = serde_json::from_str(args).unwrap_or_else(|_| Value::String(args.clone()));
                    json!({"type": "tool_use", "id": id, "name": name, "input": input})
                })
                .collect(),
            "tool_use",
        ),
        Reply::Delay(..) | Reply::Cut(_) | Reply::Triage => unreachable!("resolved and bound"),
    };
    let output = tokens(&Value::Array(content.clone()).to_string());
    json_response(
        200,
        json!({
            "id": "msg_scripted", "type": "message", "role": "assistant", "model": body["model"],
            "content": content, "stop_reason": stop,
            "usage": {"input_tokens": input, "output_tokens": output},
        }),
    )
}

/// `POST /v1/embeddings`: `input` a string or a list of them; one vector each, in order.
async fn embeddings(State(script): State<Arc<Mutex<Script>>>, raw: axum::body::Bytes) -> Response<Body> {
    let body: Value = match serde_json::from_slice(&raw) {
        Ok(v) => v,
        Err(e) => return bad_request(format!("body is not JSON: {e}")),
    };
    let embed = {
        let mut s = script.lock().expect("script lock");
        s.requests.push(body.clone());
        s.embed
    };
    let Some(embed) = embed else {
        let message = "This server does not support embeddings. Start it with `--embeddings`";
        return json_response(501, json!({"error": {"code": 501, "message": message, "type": "not_supported_error"}}));
    };
    let inputs: Vec<&str> = match &body["input"] {
        Value::String(s) => vec![s.as_str()],
        Value::Array(items) => match items.iter().map(Value::as_str).collect::<Option<Vec<&str>>>() {
            Some(v) => v,
            None => return bad_request("input must be a string or a list of strings".into()),
        },
        _ => return bad_request("input is required".into()),
    };
    let data: Vec<Value> = (inputs.iter().enumerate())
        .map(|(i, text)| json!({"object": "embedding", "index": i, "embedding": embed(text)}))
        .collect();
    let tokens: u64 = inputs.iter().map(|t| tokens(t)).sum();
    json_response(
        200,
        json!({"object": "list", "model": body["model"], "data": data, "usage": {"prompt_tokens": tokens, "total_tokens": tokens}}),
    )
}
