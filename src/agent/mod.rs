//! The agent harness: the code around the model that makes a tool-using LLM
//! dependable. The model proposes; this code disposes.
//!
//! - `model.rs`: the provider-neutral interface and error classes.
//! - `openai.rs`, `anthropic.rs`, `rules/`: providers (the rules model's notes in `triage.rs`, its answers in `answers.rs`); `http.rs`: shared HTTP/SSE.
//! - `reliability.rs`: retries with jitter, circuit breakers, the fallback chain.
//! - `run.rs`: the bounded loop and its guardrails; `checks.rs`: what a final answer
//!   must be (the output checks and their flaws); `guard.rs`: text guardrails.
//! - `note.rs`: the triage note schema; `audit.rs`: the audit trail.
//!
//! Architecture Invariant: nothing here holds a writable database handle. Tools run on
//! read-only connections; proposals go through `approvals`; the audit trail goes
//! through the store's writer.

pub mod anthropic;
pub mod audit;
pub mod checks;
pub mod config;
pub mod conversation;
pub mod guard;
mod handover;
pub mod http;
mod judgement;
pub mod model;
pub mod note;
pub mod openai;
pub mod reliability;
pub mod rules;
mod run;
mod task;

pub use guard::clip;
pub use model::{
    ErrorClass, Message, Model, ModelError, ModelReply, ModelRequest, StreamEvent, StreamSink, TaskFacts, ToolCall,
    Usage,
};
pub use note::TriageNote;
pub use run::{Agent, HANDOVER_PROMPT, Outcome, Profile, RunReport, TRIAGE_PROMPT, Task};

use std::sync::Arc;

use self::config::{LlmConfig, ProviderKind};

/// The configured providers, in order. The `rules` model is appended by [`Agent::new`].
pub fn models_from_config(config: &LlmConfig) -> Vec<Arc<dyn Model>> {
    config
        .chain
        .iter()
        .map(|p| -> Arc<dyn Model> {
            let model = p.model.clone().unwrap_or_default();
            match p.kind {
                ProviderKind::Openai => Arc::new(
                    openai::OpenAi::new(
                        p.base_url.as_deref().unwrap_or("https://api.openai.com/v1"),
                        &model,
                        p.api_key.clone(),
                        p.tool_mode,
                        p.structured_output,
                    )
                    .with_sampling(openai::Sampling { temperature: p.temperature, seed: p.seed }),
                ),
                ProviderKind::Anthropic => Arc::new(anthropic::Anthropic::new(
                    p.base_url.as_deref().unwrap_or("https://api.anthropic.com"),
                    &model,
                    p.api_key.clone(),
                )),
                ProviderKind::Rules => Arc::new(rules::Rules),
            }
        })
        .collect()
}
