//! Chat with the agent: the conversation kept per user, and the answer streamed.

use std::convert::Infallible;
use std::sync::Arc;

use axum::extract::{Extension, Json, State};
use axum::response::sse::{Event, KeepAlive, Sse};
use futures_util::Stream;
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::{Value, json};

use super::{ApiError, WebState};
use crate::accounts::User;
use crate::agent::StreamEvent;
use crate::agent::conversation::{self, Speaker};

type S = Arc<WebState>;

pub(super) async fn chat_history(
    State(s): State<S>,
    Extension(user): Extension<User>,
) -> Result<Json<Value>, ApiError> {
    let rows = conversation::history(&*s.store.read()?, user.id)?;
    Ok(Json(json!({"messages": rows})))
}

/// One question to the agent.
#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ChatRequest {
    /// The operator's question, at most 4,000 characters (not blank).
    #[schemars(length(min = 1, max = 4000), pattern(r"\S"))]
    pub message: String,
}

fn save_chat(s: &WebState, user_id: i64, who: Speaker, text: String, run_id: Option<i64>) -> Result<(), ApiError> {
    Ok(conversation::save(s.store.writer(), user_id, who, text, run_id)?)
}

/// Streams the agent's answer: `tool` events as tools are called, `text` deltas, then
/// `done` with the run id and outcome (or `error`). The exchange is kept per user.
pub(super) async fn chat(
    State(s): State<S>,
    Extension(user): Extension<User>,
    Json(req): Json<ChatRequest>,
) -> Result<Sse<impl Stream<Item = Result<Event, Infallible>>>, ApiError> {
    s.agent.chat_task(&req.message, &user.name).map_err(|e| ApiError::bad_request(e.to_string()))?;
    {
        let (st, text, id) = (Arc::clone(&s), req.message.clone(), user.id);
        tokio::task::spawn_blocking(move || save_chat(&st, id, Speaker::Operator, text, None)).await??;
    }
    let (tx, rx) = tokio::sync::mpsc::unbounded_channel::<StreamEvent>();
    let (done_tx, done_rx) = tokio::sync::oneshot::channel::<Event>();
    let st = Arc::clone(&s);
    tokio::spawn(async move {
        let event = match st.agent.ask(&req.message, &user.name, Some(tx)).await {
            Ok(report) => {
                let answer = report.answer.clone().unwrap_or_default();
                let (st2, id, run_id) = (Arc::clone(&st), user.id, report.run_id);
                let saved =
                    tokio::task::spawn_blocking(move || save_chat(&st2, id, Speaker::Agent, answer, Some(run_id)))
                        .await;
                if !matches!(saved, Ok(Ok(()))) {
                    tracing::warn!(stage = "web", run = report.run_id, "chat answer not saved");
                }
                Event::default().event("done").json_data(json!({"run_id": report.run_id, "outcome": report.outcome,
                    "answer": report.answer, "flags": report.flags}))
            }
            Err(e) => Event::default().event("error").json_data(json!({"error": format!("{e:#}")})),
        };
        let _ = done_tx.send(event.unwrap_or_default());
    });
    Ok(Sse::new(chat_events(rx, done_rx)).keep_alive(KeepAlive::default()))
}

/// The chat's SSE events: every streamed step, then the final `done` (or `error`).
pub(super) fn chat_events(
    rx: tokio::sync::mpsc::UnboundedReceiver<StreamEvent>,
    done: tokio::sync::oneshot::Receiver<Event>,
) -> impl Stream<Item = Result<Event, Infallible>> {
    futures_util::stream::unfold((rx, Some(done)), |(mut rx, done)| async move {
        if let Some(e) = rx.recv().await {
            let event = match &e {
                StreamEvent::Text { .. } => Event::default().event("text"),
                StreamEvent::Tool { .. } => Event::default().event("tool"),
                StreamEvent::Retract { .. } => Event::default().event("retract"),
            };
            return Some((Ok(event.json_data(&e).unwrap_or_default()), (rx, done)));
        }
        // The run is over (its sender dropped): the final event, then the end.
        let last = done?.await.unwrap_or_else(|_| Event::default().event("error").data("the run stopped"));
        Some((Ok(last), (rx, None)))
    })
}
