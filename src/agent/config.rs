//! The `[llm]` part of `twinops.toml`: the model chain and the agent's limits, owned
//! here, with its validation; the top-level `config` module assembles it with the other parts.

use std::path::PathBuf;

use serde::Deserialize;

use super::openai::ToolMode;
use crate::support::Secret;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ProviderKind {
    Openai,
    Anthropic,
    Rules,
}

/// One link of the model chain.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ProviderConfig {
    pub kind: ProviderKind,
    #[serde(default)]
    pub base_url: Option<String>,
    #[serde(default)]
    pub model: Option<String>,
    #[serde(default)]
    pub api_key: Option<Secret>,
    /// Read the key from this file (trimmed); for systemd credentials and the like.
    #[serde(default)]
    pub api_key_file: Option<PathBuf>,
    /// openai only: `native` tool calls or `json` mode for models without them.
    #[serde(default = "native")]
    pub tool_mode: ToolMode,
    /// openai only: ask for the triage note with `response_format` JSON schema.
    #[serde(default)]
    pub structured_output: bool,
    /// openai only: `temperature` sent with every request (0 for repeatable answers).
    #[serde(default)]
    pub temperature: Option<f64>,
    /// openai only: `seed` sent with every request, for servers that honour it.
    #[serde(default)]
    pub seed: Option<u64>,
}

fn native() -> ToolMode {
    ToolMode::Native
}

/// Bounds on one agent run.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct AgentLimits {
    pub max_steps: u32,
    pub max_tool_calls: u32,
    pub max_calls_per_tool: u32,
    pub max_tokens: u64,
    pub max_output_tokens: u32,
    pub deadline_secs: u64,
    pub model_timeout_secs: u64,
    pub tool_timeout_ms: u64,
    pub max_retries: u32,
    pub max_result_chars: usize,
    pub context_budget_chars: usize,
    pub max_chat_chars: usize,
    pub breaker_failures: u32,
    pub breaker_cooldown_secs: u64,
}

impl Default for AgentLimits {
    fn default() -> Self {
        AgentLimits {
            max_steps: 10,
            max_tool_calls: 24,
            max_calls_per_tool: 8,
            max_tokens: 60_000,
            max_output_tokens: 1_500,
            deadline_secs: 120,
            model_timeout_secs: 60,
            tool_timeout_ms: 5_000,
            max_retries: 3,
            max_result_chars: 12_000,
            context_budget_chars: 96_000,
            max_chat_chars: 4_000,
            breaker_failures: 3,
            breaker_cooldown_secs: 30,
        }
    }
}

/// The `[llm]` part of `twinops.toml`.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LlmConfig {
    /// Providers tried in order; the `rules` model is always appended as the floor.
    #[serde(default)]
    pub chain: Vec<ProviderConfig>,
    #[serde(default)]
    pub limits: AgentLimits,
}

impl LlmConfig {
    /// Checks every provider and the limits; reads each `api_key_file` into its key.
    pub fn validate(&mut self) -> anyhow::Result<()> {
        use anyhow::Context;
        for (i, p) in self.chain.iter_mut().enumerate() {
            let at = format!("llm.chain[{i}]");
            if p.kind != ProviderKind::Rules && p.model.as_deref().is_none_or(str::is_empty) {
                anyhow::bail!(
                    "{at}.model is required for {:?} (e.g. gpt-4o-mini, llama3.1:8b, claude-sonnet-4-5)",
                    p.kind
                );
            }
            if let Some(file) = &p.api_key_file {
                let key = std::fs::read_to_string(file)
                    .with_context(|| format!("{at}.api_key_file: reading {}", file.display()))?;
                p.api_key = Some(Secret::new(key.trim()));
            }
            if let Some(t) = p.temperature
                && !(0.0..=2.0).contains(&t)
            {
                anyhow::bail!("{at}.temperature must be between 0 and 2, got {t}");
            }
            if let Some(url) = &p.base_url
                && !(url.starts_with("http://") || url.starts_with("https://"))
            {
                anyhow::bail!("{at}.base_url must start with http:// or https://, got '{url}'");
            }
        }
        let l = &self.limits;
        for (key, value) in [
            ("max_steps", l.max_steps as u64),
            ("max_tool_calls", l.max_tool_calls as u64),
            ("deadline_secs", l.deadline_secs),
        ] {
            anyhow::ensure!(value > 0, "llm.limits.{key} must be at least 1");
        }
        Ok(())
    }
}
