//! The bounded tool-call loop.
//!
//! ```text
//! for step in 1..=max_steps:
//!     deadline and token budget                 -> budget_exceeded (partial, flagged)
//!     reply = model chain (retry, breaker, fallback)
//!     final?  output checks; one repair turn; then publish (flagged if still failing)
//!     tool calls: allow-list, JSON, schema, budgets, repeats -> reads concurrently,
//!                 proposals one by one -> redact, truncate, delimit -> answered in order
//! -> budget_exceeded
//! ```

mod tool_calls;

use crate::approvals::Approvals;
use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use serde_json::json;
use tokio::time::Instant;

use super::audit::{Audit, Step, StepKind};
use super::checks::{Flaw, Review, WITHHELD};
use super::config::AgentLimits;
use super::model::{
    Finish, Message, Model, ModelReply, ModelRequest, StreamEvent, StreamSink, TaskFacts, ToolCall, ToolSpec, Usage,
};
use super::note::TriageNote;
use super::reliability::{Attempt, Chain, RetryPolicy, Served};
use super::rules::Rules;
use crate::domain::{Access, Timestamp};
use crate::rag::DocIndex;
use crate::store::{Store, StoreError};
use crate::tools::{self, ToolDef};

pub const TRIAGE_PROMPT: &str = include_str!("../../../prompts/triage.md");
const CHAT_PROMPT: &str = include_str!("../../../prompts/chat.md");
pub const HANDOVER_PROMPT: &str = include_str!("../../../prompts/handover.md");

/// What a run may do: its system prompt, the tools it is offered, and the shape of its
/// final answer.
#[derive(Debug, Clone)]
pub struct Profile {
    pub name: &'static str,
    pub system_prompt: &'static str,
    pub tools: Vec<String>,
    /// A triage run must end with a [`TriageNote`].
    pub structured_note: bool,
}

impl Profile {
    pub fn triage() -> Profile {
        Profile { name: "triage", system_prompt: TRIAGE_PROMPT, tools: names(tools::offered()), structured_note: true }
    }

    /// An episode's note: triage, with the episode tools in place of the plant-wide
    /// ones an episode does not need, so a small local model's context holds the same.
    pub fn episode() -> Profile {
        let mut tools = names(tools::all().iter().collect());
        tools.retain(|t| !tools::NOT_FOR_EPISODES.contains(&t.as_str()));
        Profile { name: "episode", system_prompt: TRIAGE_PROMPT, tools, structured_note: true }
    }

    pub fn chat() -> Profile {
        Profile { name: "chat", system_prompt: CHAT_PROMPT, tools: names(tools::offered()), structured_note: false }
    }

    /// The shift handover: read-only, plain text.
    pub fn handover() -> Profile {
        Profile {
            name: "handover",
            system_prompt: HANDOVER_PROMPT,
            tools: names(tools::offered()),
            structured_note: false,
        }
        .read_only()
    }

    /// Read-only: the same tools less the proposing ones.
    pub fn read_only(mut self) -> Profile {
        self.tools.retain(|t| tools::find(t).is_none_or(|d| d.access == Access::Read));
        self
    }
}

fn names(defs: Vec<&ToolDef>) -> Vec<String> {
    defs.into_iter().map(|d| d.name.to_string()).collect()
}

/// One unit of work for the agent.
#[derive(Debug, Clone)]
pub struct Task {
    pub profile: Profile,
    /// `alarm:17`, `user:kaur`, `schedule:handover`.
    pub trigger: String,
    pub facts: TaskFacts,
    /// The first user turn; untrusted parts already inside `<data>`.
    pub user_message: String,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Outcome {
    /// The preferred model answered and the answer passed its checks (or is flagged).
    Final,
    /// Steps, tool calls, tokens or time ran out; the answer is partial.
    BudgetExceeded,
    /// A fallback provider (possibly the `rules` model) served the run.
    Degraded,
    /// No answer could be produced.
    Failed,
}

impl Outcome {
    pub fn as_str(self) -> &'static str {
        match self {
            Outcome::Final => "final",
            Outcome::BudgetExceeded => "budget_exceeded",
            Outcome::Degraded => "degraded",
            Outcome::Failed => "failed",
        }
    }

    pub fn parse(s: &str) -> Option<Outcome> {
        [Outcome::Final, Outcome::BudgetExceeded, Outcome::Degraded, Outcome::Failed]
            .into_iter()
            .find(|o| o.as_str() == s)
    }
}

#[derive(Debug, Clone, serde::Serialize)]
pub struct RunReport {
    pub run_id: i64,
    pub outcome: Outcome,
    pub answer: Option<String>,
    pub note: Option<TriageNote>,
    /// `ungrounded`, `invalid_note`, `partial`, ...
    pub flags: Vec<String>,
    /// The provider that gave the last answer.
    pub provider: Option<String>,
    pub model_calls: u32,
    pub tool_calls: u32,
    pub usage: Usage,
}

type Clock = Arc<dyn Fn() -> Timestamp + Send + Sync>;

pub struct Agent {
    pub(super) store: Store,
    docs: DocIndex,
    /// Where the agent's proposals go: this twin, or a pair's decision log.
    pub(super) approvals: Approvals,
    chain: Chain,
    tools: Vec<Arc<ToolDef>>,
    validators: HashMap<String, jsonschema::Validator>,
    pub(super) limits: AgentLimits,
    pub(super) clock: Clock,
}

impl Agent {
    /// An agent over `models`, in order of preference; the `rules` model is appended as
    /// the floor unless the chain already ends with it.
    pub fn new(store: Store, mut models: Vec<Arc<dyn Model>>, limits: AgentLimits) -> Agent {
        if models.last().is_none_or(|m| m.name() != "rules") {
            models.push(Arc::new(Rules));
        }
        let retry = RetryPolicy {
            max_retries: limits.max_retries,
            base: Duration::from_millis(250),
            cap: Duration::from_secs(20),
        };
        let chain =
            Chain::new(models, retry, limits.breaker_failures, Duration::from_secs(limits.breaker_cooldown_secs));
        let mut agent = Agent {
            approvals: Approvals::new(store.writer().clone()),
            store,
            docs: DocIndex::new(),
            chain,
            tools: Vec::new(),
            validators: HashMap::new(),
            limits,
            clock: Arc::new(Timestamp::now),
        };
        agent = agent.with_tools(tools::all().to_vec());
        agent
    }

    /// Adds tools (tests add probes); a profile must still list them to offer them.
    pub fn with_tools(mut self, defs: Vec<ToolDef>) -> Agent {
        for def in defs {
            let validator = jsonschema::validator_for(&def.schema).expect("derived schemas are valid JSON Schema");
            self.validators.insert(def.name.to_string(), validator);
            self.tools.retain(|t| t.name != def.name);
            self.tools.push(Arc::new(def));
        }
        self
    }

    /// The time tools see as "now" (tests pin it to the seeded week).
    pub fn with_clock(mut self, clock: impl Fn() -> Timestamp + Send + Sync + 'static) -> Agent {
        self.clock = Arc::new(clock);
        self
    }

    pub fn chain(&self) -> &Chain {
        &self.chain
    }

    pub fn store(&self) -> &Store {
        &self.store
    }

    /// The search index the tools use (cheap to clone; built once, shared).
    /// The documentation search its tools use (by default BM25 alone).
    /// Proposals through `approvals` (a redundant pair's log) instead of to the twin.
    pub fn with_approvals(mut self, approvals: Approvals) -> Agent {
        self.approvals = approvals;
        self
    }

    pub fn approvals(&self) -> &Approvals {
        &self.approvals
    }

    pub fn with_docs(mut self, docs: DocIndex) -> Agent {
        self.docs = docs;
        self
    }

    pub fn docs(&self) -> &DocIndex {
        &self.docs
    }

    /// Runs a task to one of the four outcomes. Errors only if the audit trail cannot
    /// be written: a run that cannot be audited must not publish.
    pub async fn run(&self, task: Task, stream: Option<StreamSink>) -> Result<RunReport, StoreError> {
        let mut audit = Audit::start(
            self.store.writer().clone(),
            task.profile.name,
            &task.trigger,
            task.facts.alarm_id,
            Timestamp::now(),
        )
        .await?;
        let mut run = RunState::new(self, &task, audit.run_id());
        let outcome = run.go(&mut audit, stream).await;
        let report = run.report(outcome);
        let error = run.last_error.clone();
        audit
            .finish(
                report.outcome.as_str(),
                report.provider.as_deref(),
                (report.usage.input_tokens, report.usage.output_tokens),
                error,
                &report.flags,
            )
            .await?;
        Ok(report)
    }
}

/// What the loop does after a step that did not go through: take another, or stop.
enum Flow {
    Again,
    Done(Outcome),
}

/// The mutable state of one run.
struct RunState<'a> {
    agent: &'a Agent,
    task: &'a Task,
    run_id: i64,
    /// The conversation and the tools offered, reused from step to step.
    request: ModelRequest,
    deadline: Instant,
    usage: Usage,
    model_calls: u32,
    tool_calls: u32,
    link_floor: usize,
    degraded: bool,
    provider: Option<String>,
    plan: tool_calls::Plan,
    /// Whether a model other than the rules model called a tool in this run.
    model_called_tools: bool,
    /// Answer text went out on the stream since the last retraction.
    draft_streamed: bool,
    /// The tools the profile offers (the last step offers none).
    offered: Vec<ToolSpec>,
    /// The twin's ids for the examples the harness gives.
    examples: tools::Examples,
    answer: Option<String>,
    note: Option<TriageNote>,
    flags: Vec<String>,
    last_error: Option<String>,
}

impl<'a> RunState<'a> {
    fn new(agent: &'a Agent, task: &'a Task, run_id: i64) -> RunState<'a> {
        // Examples in the tools' words and the prompt are the twin's own ids.
        let examples = agent.store.read().ok().and_then(|db| tools::Examples::from_twin(&db).ok()).unwrap_or_default();
        let offered: Vec<ToolSpec> = agent
            .tools
            .iter()
            .filter(|t| task.profile.tools.iter().any(|n| n == t.name))
            .map(|t| ToolSpec {
                name: t.name.to_string(),
                description: examples.apply(t.description),
                schema: serde_json::from_str(&examples.apply(&t.schema.to_string()))
                    .unwrap_or_else(|_| t.schema.clone()),
            })
            .collect();
        RunState {
            agent,
            task,
            run_id,
            request: ModelRequest {
                messages: vec![
                    Message::System { content: examples.apply(task.profile.system_prompt) },
                    Message::User { content: task.user_message.clone() },
                ],
                tools: offered.clone(),
                max_tokens: agent.limits.max_output_tokens,
                // Asked for only when the answer is due (`ask_for_final`).
                final_schema: None,
                task: task.facts.clone(),
                stream: None,
            },
            deadline: Instant::now() + Duration::from_secs(agent.limits.deadline_secs),
            usage: Usage::default(),
            model_calls: 0,
            tool_calls: 0,
            link_floor: 0,
            degraded: false,
            provider: None,
            plan: tool_calls::Plan::new(&agent.limits),
            model_called_tools: false,
            draft_streamed: false,
            offered,
            examples,
            answer: None,
            note: None,
            flags: Vec::new(),
            last_error: None,
        }
    }

    fn report(&self, outcome: Outcome) -> RunReport {
        RunReport {
            run_id: self.run_id,
            outcome,
            answer: self.answer.clone(),
            note: self.note.clone(),
            flags: self.flags.clone(),
            provider: self.provider.clone(),
            model_calls: self.model_calls,
            tool_calls: self.tool_calls,
            usage: self.usage,
        }
    }

    fn budget_exceeded(&mut self, what: &str) -> Outcome {
        self.flags.push("partial".into());
        self.flags.push(format!("budget:{what}"));
        if self.answer.is_none() {
            self.answer = self.request.messages.iter().rev().find_map(|m| match m {
                Message::Assistant { content: Some(t), .. } => Some(t.clone()),
                _ => None,
            });
        }
        Outcome::BudgetExceeded
    }

    /// A budget ran out. A triage run without a valid note yet gets the rules model's
    /// own note instead of a partial one (None: the run goes on, on the rules plan); any
    /// other run ends here, partial.
    /// Takes a step from the budget (true when it is the last one), or says what to do
    /// now that steps, time or tokens have run out.
    fn take_step(&mut self, audit: &mut Audit) -> Result<bool, Flow> {
        let budget = |run: &mut Self, what: &str, audit: &mut Audit| match run.out_of_budget(what, audit) {
            Some(outcome) => Flow::Done(outcome),
            None => Flow::Again,
        };
        let Some(left) = self.plan.steps_left.checked_sub(1) else { return Err(budget(self, "steps", audit)) };
        self.plan.steps_left = left;
        // The rules model costs no time or tokens worth counting: its plan is bounded
        // by its steps alone, so a triage note is written even past the deadline.
        let limits = &self.agent.limits;
        let spent = if self.on_rules_plan() {
            None
        } else if Instant::now() >= self.deadline {
            Some("deadline")
        } else if self.usage.input_tokens + self.usage.output_tokens >= limits.max_tokens {
            Some("tokens")
        } else {
            None
        };
        if let Some(what) = spent {
            return Err(budget(self, what, audit));
        }
        if left == 0 {
            self.last_step();
        }
        Ok(left == 0)
    }

    /// One model call through the chain, its attempts audited; a failure past the
    /// deadline is the deadline budget running out, any other ends the run.
    async fn call_model(&mut self, audit: &mut Audit) -> Result<Served, Flow> {
        let limits = &self.agent.limits;
        let mut attempts = Vec::new();
        let call_timeout = Duration::from_secs(limits.model_timeout_secs);
        // The rules model answers at once, in-process: its plan is not held to a
        // deadline the model already spent.
        let deadline = if self.on_rules_plan() { Instant::now() + call_timeout } else { self.deadline };
        let served =
            self.agent.chain.complete(&self.request, self.link_floor, deadline, call_timeout, &mut attempts).await;
        self.model_calls += 1;
        self.record_attempts(&attempts, audit);
        served.map_err(|e| {
            if Instant::now() < self.deadline {
                self.last_error = Some(e.to_string());
                return Flow::Done(Outcome::Failed);
            }
            self.last_error = Some(format!(
                "the run's deadline of {} s (llm.limits.deadline_secs) was reached waiting for the model; its last error: {e}",
                self.agent.limits.deadline_secs
            ));
            match self.out_of_budget("deadline", audit) {
                Some(outcome) => Flow::Done(outcome),
                None => Flow::Again,
            }
        })
    }

    fn out_of_budget(&mut self, what: &str, audit: &mut Audit) -> Option<Outcome> {
        if self.task.profile.structured_note && self.note.is_none() && !self.on_rules_plan() {
            let why = format!("the run's {what} budget ran out before a valid note");
            crate::metrics::count("twinops_agent_notes_set_aside_total", &[("flaw", &format!("budget:{what}"))], 1.0);
            self.start_over_with_rules(audit, Some(format!("set_aside:budget:{what}")), &why);
            return None;
        }
        Some(self.budget_exceeded(what))
    }

    /// Whether the run is on the rules model's plan (the chain's last link).
    fn on_rules_plan(&self) -> bool {
        self.link_floor + 1 >= self.agent.chain.links().len()
    }

    /// The loop: a step taken from the budget, a model call, then the tools it asked
    /// for, or its answer checked and settled.
    async fn go(&mut self, audit: &mut Audit, stream: Option<StreamSink>) -> Outcome {
        let limits = &self.agent.limits;
        self.request.stream = stream;
        loop {
            let last_step = match self.take_step(audit) {
                Ok(last) => last,
                Err(Flow::Again) => continue,
                Err(Flow::Done(outcome)) => return outcome,
            };
            self.fit_context(audit);
            let served = match self.call_model(audit).await {
                Ok(served) => served,
                Err(Flow::Again) => continue,
                Err(Flow::Done(outcome)) => return outcome,
            };
            let rules = served.provider == Rules.name();
            // The floor never trusts a failed provider's turns: it runs its own plan.
            if rules && served.link > self.link_floor && self.request.messages.len() > 2 {
                self.start_over_with_rules(audit, None, "the model provider failed mid-run");
                continue;
            }
            if served.link > 0 {
                self.degraded = true;
                self.link_floor = served.link;
            }
            self.provider = Some(served.provider.clone());
            let reply = served.reply;
            self.count_usage(&reply, rules, audit);
            self.request
                .messages
                .push(Message::Assistant { content: reply.text.clone(), tool_calls: reply.tool_calls.clone() });
            let cut = reply.finish == Finish::Length;
            if !reply.tool_calls.is_empty() {
                self.model_called_tools |= !rules;
                if last_step || cut {
                    self.refuse_calls(&reply.tool_calls, last_step, audit);
                    if last_step && let Some(outcome) = self.out_of_budget("steps", audit) {
                        return outcome;
                    }
                    continue;
                }
                self.run_turn(&reply.tool_calls, audit).await;
                continue;
            }
            let text = reply.text.unwrap_or_default();
            if self.request.stream.is_some() && !text.is_empty() {
                self.draft_streamed = true;
            }
            if cut && !self.plan.cut_retry_used && !last_step {
                self.plan.cut_retry_used = true;
                audit.record(guardrail("cut_off", "answer", "asked once for the complete answer, shorter"));
                self.retract("the answer was cut off at the output limit; a complete one follows");
                self.ask_for_final(format!(
                    "Your answer was cut off at the output limit of {} tokens. Give your complete answer again, shorter.",
                    limits.max_output_tokens
                ));
                continue;
            }
            if let Some(outcome) = self.settle(text, cut, rules, last_step, audit) {
                return outcome;
            }
        }
    }

    /// Checks a final answer. Returns the outcome when it is kept (flagged where it must
    /// be), or None when the run goes on: a repair turn, or the rules model's own plan
    /// in place of a triage note that failed its checks twice.
    fn settle(&mut self, text: String, cut: bool, rules: bool, last_step: bool, audit: &mut Audit) -> Option<Outcome> {
        let structured = self.task.profile.structured_note;
        if structured && !rules && !self.model_called_tools {
            tracing::warn!(stage = "agent", run = self.run_id, provider = ?self.provider,
                "the model wrote a triage note without calling a tool; with llama.cpp, run llama-server with --jinja and a tool-capable chat template");
        }
        let review = Review {
            store: &self.agent.store,
            structured_note: self.task.profile.structured_note,
            handover: self.task.profile.name == "handover",
            user_message: &self.task.user_message,
            facts: &self.task.facts,
            messages: &self.request.messages,
        };
        let mut flaws = review.flaws(&text);
        if cut {
            flaws.insert(0, Flaw::cut(self.agent.limits.max_output_tokens));
        }
        if flaws.is_empty() {
            return Some(self.publish(text, last_step));
        }
        let for_model = flaws.iter().map(|f| f.for_model.as_str()).collect::<Vec<_>>().join(" ");
        if !self.plan.output_repair_used && !last_step && !cut {
            self.plan.output_repair_used = true;
            audit.record(guardrail("output_check", &for_model, "repair turn requested"));
            self.retract("the draft failed its checks; a corrected answer follows");
            if flaws.iter().any(|f| f.needs_tools) {
                // The model must read the twin first: tools stay offered, no schema yet.
                self.request
                    .messages
                    .push(Message::User { content: format!("{for_model} Then give your final answer.") });
            } else {
                self.ask_for_final(format!("{for_model} Correct this and give your final answer again."));
            }
            return None;
        }
        if structured && !rules {
            crate::metrics::count("twinops_agent_notes_set_aside_total", &[("flaw", flaws[0].flag)], 1.0);
            let flag = format!("set_aside:{}", flaws[0].flag);
            self.start_over_with_rules(audit, Some(flag), &for_model);
            return None;
        }
        for f in &flaws {
            if !self.flags.iter().any(|x| x == f.flag) {
                self.flags.push(f.flag.into());
            }
        }
        audit.record(guardrail("output_check", &for_model, &format!("published flagged {}", flaws[0].flag)));
        if structured {
            return Some(self.publish(text, last_step));
        }
        // Text an operator reads: the warning comes first. A claim to have done what the
        // agent cannot do is not shown at all: an operator who reads "approved" may act.
        let warning = flaws.iter().map(|f| f.for_operator.as_str()).collect::<Vec<_>>().join(" ");
        let text = if flaws.iter().any(|f| f.flag == "claims_action") {
            format!("⚠ {WITHHELD}")
        } else {
            format!("⚠ {warning}\n\n{text}")
        };
        if self.draft_streamed {
            self.retract("the answer failed its checks; it follows with its warning");
            if let Some(sink) = &self.request.stream {
                let _ = sink.send(StreamEvent::Text { text: text.clone() });
            }
        }
        Some(self.publish(text, last_step))
    }

    fn publish(&mut self, text: String, last_step: bool) -> Outcome {
        if self.task.profile.structured_note {
            self.note = TriageNote::parse(&text).ok();
        }
        self.answer = Some(text);
        if last_step {
            return self.budget_exceeded("steps");
        }
        if self.degraded { Outcome::Degraded } else { Outcome::Final }
    }

    /// The last step: no tools, and the note's schema where the provider can hold the
    /// model to it, so the model answers with what it has.
    fn last_step(&mut self) {
        self.request.tools.clear();
        self.ask_for_final(
            "This is the last step of this run: no more tools. Give your final answer now from the tool results you have, and say what you could not check.".into(),
        );
    }

    /// Asks for the final answer: a user turn, and the note's schema from here on.
    fn ask_for_final(&mut self, content: String) {
        self.request.final_schema = self.task.profile.structured_note.then(TriageNote::schema);
        self.request.messages.push(Message::User { content });
    }

    /// Tells the stream that the text it carried so far is withdrawn.
    fn retract(&mut self, reason: &str) {
        if std::mem::take(&mut self.draft_streamed)
            && let Some(sink) = &self.request.stream
        {
            let _ = sink.send(StreamEvent::Retract { reason: reason.to_string() });
        }
    }

    /// Abandons the conversation and lets the rules model run its own plan from the
    /// task, with its own tool calls and a fresh step budget: nothing from the turns
    /// before is trusted. The trace keeps them.
    fn start_over_with_rules(&mut self, audit: &mut Audit, flag: Option<String>, why: &str) {
        let decision = "the conversation is set aside; the rules model runs its own plan from the task";
        audit.record(guardrail("fallback", why, decision));
        self.flags.extend(flag);
        self.retract("the model's answer was set aside; the offline rules model's answer follows");
        self.link_floor = self.agent.chain.links().len() - 1;
        self.degraded = true;
        self.request.messages.truncate(2);
        self.request.tools = self.offered.clone();
        self.request.final_schema = None;
        self.plan = tool_calls::Plan::new(&self.agent.limits);
    }

    /// Answers calls that must not run: cut off mid-arguments, or made on the last step.
    fn refuse_calls(&mut self, calls: &[ToolCall], last_step: bool, audit: &mut Audit) {
        for call in calls {
            let content = if last_step {
                format!("{} was not run: the run's step budget is spent.", call.name)
            } else {
                format!(
                    "Your {} call was cut off at the output limit of {} tokens before its arguments were complete, and was not run. Call it again, with shorter arguments.",
                    call.name, self.agent.limits.max_output_tokens
                )
            };
            audit.record(guardrail(if last_step { "last_step" } else { "cut_off" }, &call.name, "not run"));
            self.request.messages.push(Message::Tool {
                call_id: call.id.clone(),
                name: call.name.clone(),
                content,
                is_error: true,
            });
        }
    }

    /// Runs one turn's tool calls and answers each in the conversation.
    async fn run_turn(&mut self, calls: &[ToolCall], audit: &mut Audit) {
        if let Some(sink) = &self.request.stream {
            for call in calls {
                let _ = sink.send(StreamEvent::Tool { name: call.name.clone(), arguments: call.arguments_text() });
            }
        }
        let results = self.run_tools(calls, audit).await;
        for (call, output) in calls.iter().zip(results) {
            self.request.messages.push(Message::Tool {
                call_id: call.id.clone(),
                name: call.name.clone(),
                content: output.content,
                is_error: output.is_error,
            });
        }
        if let Err(e) = audit.flush_if_large().await {
            tracing::error!(stage = "agent", error = %e, "audit flush failed");
        }
    }

    /// Adds a reply's tokens to the run's budget. A server that reports none (as
    /// llama-cpp-python's streams do) is counted by estimate, so the budget still holds.
    fn count_usage(&mut self, reply: &ModelReply, rules: bool, audit: &mut Audit) {
        let mut usage = reply.usage;
        if usage == Usage::default() && !rules {
            let chars = |m: &Message| serde_json::to_string(m).map_or(0, |s| s.len()) as u64;
            usage.input_tokens = self.request.messages.iter().map(chars).sum::<u64>() / 4 + 1;
            let written = reply.text.as_deref().map_or(0, str::len)
                + reply.tool_calls.iter().map(|c| c.arguments_text().len() + c.name.len()).sum::<usize>();
            usage.output_tokens = written as u64 / 4 + 1;
            audit.record(guardrail(
                "usage_estimated",
                self.provider.as_deref().unwrap_or("model"),
                &format!(
                    "the server reported no token usage; counted {} in / {} out at 4 characters a token",
                    usage.input_tokens, usage.output_tokens
                ),
            ));
        }
        self.usage.input_tokens += usage.input_tokens;
        self.usage.output_tokens += usage.output_tokens;
    }

    /// Metrics and the audit trail for each attempt of one model call.
    fn record_attempts(&self, attempts: &[Attempt], audit: &mut Audit) {
        for a in attempts {
            let provider = a.provider.as_str();
            let outcome = a.result.as_ref().map_or_else(|e| e.class.as_str(), |_| "ok");
            crate::metrics::count("twinops_model_calls_total", &[("provider", provider), ("outcome", outcome)], 1.0);
            crate::metrics::time("twinops_model_call_seconds", &[("provider", provider)], a.latency);
            if let Ok(r) = &a.result {
                for (direction, n) in [("input", r.usage.input_tokens), ("output", r.usage.output_tokens)] {
                    crate::metrics::count(
                        "twinops_model_tokens_total",
                        &[("provider", provider), ("direction", direction)],
                        n as f64,
                    );
                }
            }
            let (result, is_error, tokens) = match &a.result {
                Ok(r) => (
                    json!({"text": r.text, "tool_calls": r.tool_calls, "finish": r.finish}).to_string(),
                    false,
                    Some((r.usage.input_tokens, r.usage.output_tokens)),
                ),
                Err(e) => (e.to_string(), true, None),
            };
            let arguments = json!({"messages": self.request.messages.len(), "tools": self.request.tools.len(), "waited_ms": a.waited.as_millis() as u64}).to_string();
            audit.record(Step {
                kind: StepKind::ModelCall,
                name: a.provider.clone(),
                arguments: Some(arguments),
                result: Some(result),
                is_error,
                latency: a.latency,
                tokens,
            });
        }
    }

    /// Keeps the conversation inside the context budget: the oldest tool results are
    /// shortened first; the system prompt and the latest user turn are never touched.
    fn fit_context(&mut self, audit: &mut Audit) {
        let budget = self.agent.limits.context_budget_chars;
        let size = |m: &Message| match m {
            Message::System { content } | Message::User { content } => content.len(),
            Message::Assistant { content, tool_calls } => {
                content.as_ref().map_or(0, String::len)
                    + tool_calls.iter().map(|c| c.arguments_text().len() + c.name.len()).sum::<usize>()
            }
            Message::Tool { content, .. } => content.len(),
        };
        let mut total: usize = self.request.messages.iter().map(size).sum();
        let mut elided = 0;
        // The newest turn's results stay whole: the model has not seen them yet.
        let protect_from = self
            .request
            .messages
            .iter()
            .rposition(|m| matches!(m, Message::Assistant { .. }))
            .unwrap_or(self.request.messages.len());
        for m in self.request.messages.iter_mut().take(protect_from) {
            if total <= budget {
                break;
            }
            if let Message::Tool { content, name, .. } = m
                && content.len() > 200
            {
                let before = content.len();
                *content = format!(
                    "[earlier {name} result elided to fit the context budget; call the tool again if you need it]"
                );
                total = total - before + content.len();
                elided += 1;
            }
        }
        if elided > 0 {
            audit.record(guardrail("context_budget", &format!("{elided} old tool result(s)"), "elided"));
        }
    }
}

fn guardrail(name: &str, subject: &str, decision: &str) -> Step {
    Step {
        kind: StepKind::Guardrail,
        name: name.to_string(),
        arguments: Some(subject.to_string()),
        result: Some(decision.to_string()),
        is_error: false,
        latency: Duration::ZERO,
        tokens: None,
    }
}
