//! Anthropic's Messages API: `tool_use` blocks out, `tool_result` blocks back.

use std::time::Duration;

use serde_json::{Value, json};

use super::http::{Http, error_from_response};
use super::model::{
    BoxFuture, ErrorClass, Finish, Message, Model, ModelError, ModelReply, ModelRequest, StreamEvent, ToolCall, Usage,
};
use crate::support::Secret;

const API_VERSION: &str = "2023-06-01";

pub struct Anthropic {
    name: String,
    url: String,
    model: String,
    api_key: Option<Secret>,
    http: Http,
}

impl Anthropic {
    pub fn new(base_url: &str, model: &str, api_key: Option<Secret>) -> Anthropic {
        Anthropic {
            name: format!("anthropic:{model}"),
            url: format!("{}/v1/messages", base_url.trim_end_matches('/')),
            model: model.to_string(),
            api_key,
            http: Http::new(),
        }
    }

    async fn call(&self, req: &ModelRequest, timeout: Duration) -> Result<ModelReply, ModelError> {
        let mut body =
            json!({"model": self.model, "max_tokens": req.max_tokens, "messages": wire_messages(&req.messages)});
        let system: Vec<&str> = req
            .messages
            .iter()
            .filter_map(|m| if let Message::System { content } = m { Some(content.as_str()) } else { None })
            .collect();
        if !system.is_empty() {
            body["system"] = json!(system.join("\n\n"));
        }
        if !req.tools.is_empty() {
            body["tools"] = Value::Array(
                req.tools
                    .iter()
                    .map(|t| json!({"name": t.name, "description": t.description, "input_schema": t.schema}))
                    .collect(),
            );
        }
        let mut request =
            self.http.client().post(&self.url).timeout(timeout).header("anthropic-version", API_VERSION).json(&body);
        if let Some(key) = &self.api_key {
            request = request.header("x-api-key", key.expose());
        }
        let response = request.send().await.map_err(|e| self.http.transport_error(&self.name, e))?;
        if !response.status().is_success() {
            return Err(error_from_response(&self.name, response, self.api_key.as_ref()).await);
        }
        let value: Value = response
            .json()
            .await
            .map_err(|e| ModelError::new(&self.name, ErrorClass::Malformed, format!("reply is not JSON: {e}")))?;
        let reply = parse_reply(&self.name, &value)?;
        if let (Some(sink), Some(text)) = (&req.stream, &reply.text) {
            let _ = sink.send(StreamEvent::Text { text: text.clone() });
        }
        Ok(reply)
    }
}

impl Model for Anthropic {
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

/// Maps the conversation to Messages-API turns: tool results become `tool_result`
/// blocks in a user turn, and adjacent user blocks merge, since roles must alternate.
pub fn wire_messages(messages: &[Message]) -> Vec<Value> {
    let mut out: Vec<Value> = Vec::new();
    let mut push = |role: &str, blocks: Vec<Value>| match out.last_mut() {
        Some(last) if last["role"] == role => {
            last["content"].as_array_mut().expect("blocks").extend(blocks);
        }
        _ => out.push(json!({"role": role, "content": blocks})),
    };
    for m in messages {
        match m {
            Message::System { .. } => {}
            Message::User { content } => push("user", vec![json!({"type": "text", "text": content})]),
            Message::Assistant { content, tool_calls } => {
                let mut blocks: Vec<Value> = content.iter().map(|t| json!({"type": "text", "text": t})).collect();
                blocks.extend(tool_calls.iter().map(|c| {
                    json!({"type": "tool_use", "id": c.id, "name": c.name, "input": c.arguments.clone().unwrap_or_else(|_| json!({}))})
                }));
                push("assistant", blocks);
            }
            Message::Tool { call_id, content, is_error, .. } => push(
                "user",
                vec![json!({"type": "tool_result", "tool_use_id": call_id, "content": content, "is_error": is_error})],
            ),
        }
    }
    out
}

pub fn parse_reply(provider: &str, v: &Value) -> Result<ModelReply, ModelError> {
    let blocks = v["content"]
        .as_array()
        .ok_or_else(|| ModelError::new(provider, ErrorClass::Malformed, "reply has no content blocks"))?;
    let mut text = String::new();
    let mut tool_calls = Vec::new();
    for b in blocks {
        match b["type"].as_str() {
            Some("text") => text.push_str(b["text"].as_str().unwrap_or_default()),
            Some("tool_use") => tool_calls.push(ToolCall {
                id: b["id"].as_str().unwrap_or_default().to_string(),
                name: b["name"].as_str().unwrap_or_default().to_string(),
                arguments: if b["input"].is_object() { Ok(b["input"].clone()) } else { Err(b["input"].to_string()) },
            }),
            _ => {}
        }
    }
    let finish = match v["stop_reason"].as_str() {
        Some("end_turn") | Some("stop_sequence") => Finish::Stop,
        Some("tool_use") => Finish::ToolCalls,
        Some("max_tokens") => Finish::Length,
        _ => Finish::Other,
    };
    let usage = Usage {
        input_tokens: v["usage"]["input_tokens"].as_u64().unwrap_or(0),
        output_tokens: v["usage"]["output_tokens"].as_u64().unwrap_or(0),
    };
    if text.is_empty() && tool_calls.is_empty() {
        return Err(ModelError::new(provider, ErrorClass::Malformed, "the reply has neither text nor tool calls"));
    }
    Ok(ModelReply { text: Some(text).filter(|t| !t.is_empty()), tool_calls, finish, usage })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tool_results_merge_into_one_user_turn() {
        let call = |id: &str| ToolCall { id: id.into(), name: "read_doc".into(), arguments: Ok(json!({})) };
        let msgs = vec![
            Message::System { content: "s".into() },
            Message::User { content: "q".into() },
            Message::Assistant { content: None, tool_calls: vec![call("a"), call("b")] },
            Message::Tool { call_id: "a".into(), name: "read_doc".into(), content: "r1".into(), is_error: false },
            Message::Tool { call_id: "b".into(), name: "read_doc".into(), content: "r2".into(), is_error: true },
            Message::User { content: "fix it".into() },
        ];
        let wire = wire_messages(&msgs);
        assert_eq!(wire.len(), 3);
        assert_eq!(wire[2]["content"].as_array().unwrap().len(), 3);
        assert_eq!(wire[2]["content"][1]["is_error"], true);
        assert_eq!(wire[1]["content"][0]["type"], "tool_use");
    }
}
