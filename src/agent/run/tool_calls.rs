//! A turn's tool calls: each admitted (offered, JSON, schema, the plan's budgets and
//! repeats) or refused with a message the model can act on; reads run concurrently on
//! the blocking pool, proposals one at a time; every result redacted, clipped and
//! delimited as data before the model sees it.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use serde_json::{Value, json};
use tokio::time::Instant;

use super::RunState;
use super::guardrail;
use crate::agent::audit::{Audit, Step, StepKind};
use crate::agent::config::AgentLimits;
use crate::agent::guard::{as_data, clip, redact};
use crate::agent::model::ToolCall;
use crate::approvals::Proposer;
use crate::domain::{Access, Timestamp};
use crate::tools::{self, ToolDef, ToolOutput};

/// The budgets and one-time allowances of the plan a run follows: the model's and, if
/// that is set aside, the rules model's, which starts with all of them fresh.
pub(super) struct Plan {
    /// Model calls left.
    pub(super) steps_left: u32,
    /// Tool calls made, against `max_tool_calls`.
    tool_calls: u32,
    per_tool: HashMap<String, u32>,
    /// Calls by tool and canonical arguments: exact repeats.
    repeats: HashMap<String, u32>,
    /// An answer that failed its schema was sent back for repair once.
    pub(super) output_repair_used: bool,
    /// A cut-off answer was asked for again once.
    pub(super) cut_retry_used: bool,
}

impl Plan {
    pub(super) fn new(limits: &AgentLimits) -> Plan {
        Plan {
            steps_left: limits.max_steps,
            tool_calls: 0,
            per_tool: HashMap::new(),
            repeats: HashMap::new(),
            output_repair_used: false,
            cut_retry_used: false,
        }
    }
}

impl RunState<'_> {
    /// Checks and runs one turn's tool calls; returns one output per call, in order.
    pub(super) async fn run_tools(&mut self, calls: &[ToolCall], audit: &mut Audit) -> Vec<ToolOutput> {
        let limits = &self.agent.limits;
        let mut outputs: Vec<Option<ToolOutput>> = vec![None; calls.len()];
        let mut reads = Vec::new();
        let mut proposals = Vec::new();
        for (i, call) in calls.iter().enumerate() {
            match self.admit(call) {
                Err((guard, message)) => {
                    audit.record(guardrail(guard, &format!("{} {}", call.name, call.arguments_text()), &message));
                    outputs[i] = Some(ToolOutput { content: message, is_error: true });
                }
                Ok((def, args)) => {
                    if def.access == Access::Propose {
                        proposals.push((i, def, args));
                    } else {
                        reads.push((i, def, args));
                    }
                }
            }
        }
        // Reads run concurrently; proposals one at a time, after the reads.
        let timeout = Duration::from_millis(limits.tool_timeout_ms);
        let handles: Vec<_> = reads
            .into_iter()
            .map(|(i, def, args)| (i, def.clone(), args.clone(), self.spawn_tool(def, args)))
            .collect();
        for (i, def, args, handle) in handles {
            outputs[i] = Some(self.finish_tool(&def, &args, handle, timeout, audit).await);
        }
        for (i, def, args) in proposals {
            let handle = self.spawn_tool(def.clone(), args.clone());
            outputs[i] = Some(self.finish_tool(&def, &args, handle, timeout, audit).await);
        }
        outputs.into_iter().map(|o| o.expect("every call answered")).collect()
    }

    /// The guardrails a call passes before it may run, in order.
    fn admit(&mut self, call: &ToolCall) -> Result<(Arc<ToolDef>, Value), (&'static str, String)> {
        let def = Arc::clone(self.offered(&call.name)?);
        let args = match &call.arguments {
            Ok(v) => v.clone(),
            Err(raw) => {
                let shown = clip(raw, 200);
                return Err((
                    "arguments_json",
                    self.examples.apply(&format!(
                        "The arguments of your {} call were not a valid JSON object: {shown}. Send the call again with the arguments as one JSON object, e.g. {{\"asset_id\": \"PUMP-007\"}}.",
                        call.name
                    )),
                ));
            }
        };
        self.check_schema(&def, &args)?;
        self.spend(&def, &args)?;
        Ok((def, args))
    }

    /// The tool `name`, when this task offers it; otherwise what it does offer.
    fn offered(&self, name: &str) -> Result<&Arc<ToolDef>, (&'static str, String)> {
        let offered = |n: &str| self.request.tools.iter().any(|o| o.name == n);
        if let Some(def) = self.agent.tools.iter().find(|t| t.name == name && offered(name)) {
            return Ok(def);
        }
        let list = self.request.tools.iter().map(|o| o.name.as_str()).collect::<Vec<_>>().join(", ");
        Err((
            "allow_list",
            if self.agent.tools.iter().any(|t| t.name == name) {
                format!("Tool '{name}' is not available for this task and was not run. Available tools: {list}.")
            } else {
                format!("There is no tool named '{name}'. Available tools: {list}.")
            },
        ))
    }

    fn check_schema(&self, def: &ToolDef, args: &Value) -> Result<(), (&'static str, String)> {
        let Some(validator) = self.agent.validators.get(def.name) else { return Ok(()) };
        let errors: Vec<String> = validator
            .iter_errors(args)
            .map(|e| {
                // The message quotes the value; a hostile one can be megabytes.
                let at = e.instance_path().to_string();
                let e = clip(&e.to_string(), 200);
                if at.is_empty() { e } else { format!("{at}: {e}") }
            })
            .collect();
        if errors.is_empty() {
            return Ok(());
        }
        Err(("schema", format!("Invalid arguments for {}: {}. Fix them and call again.", def.name, errors.join("; "))))
    }

    /// Counts the call against the run's budgets (all calls, per tool, exact repeats),
    /// or says which one it would break.
    fn spend(&mut self, def: &ToolDef, args: &Value) -> Result<(), (&'static str, String)> {
        let limits = &self.agent.limits;
        if self.plan.tool_calls >= limits.max_tool_calls {
            return Err((
                "tool_budget",
                format!(
                    "The tool-call budget of this run ({}) is spent; {} was not run. Finish your answer with what you have.",
                    limits.max_tool_calls, def.name
                ),
            ));
        }
        let used = self.plan.per_tool.entry(def.name.to_string()).or_default();
        if *used >= limits.max_calls_per_tool {
            return Err((
                "per_tool_limit",
                format!(
                    "{} has been called {used} times in this run, the limit; it was not run. Use the results you have or another tool.",
                    def.name
                ),
            ));
        }
        let key = format!("{}:{}", def.name, canonical(args));
        let seen = self.plan.repeats.entry(key).or_default();
        *seen += 1;
        if *seen >= 3 {
            return Err((
                "repeat",
                format!(
                    "You already called {} with exactly these arguments twice; the result will not change. Change the arguments, use another tool, or finish your answer.",
                    def.name
                ),
            ));
        }
        *self.plan.per_tool.get_mut(def.name).expect("inserted") += 1;
        self.tool_calls += 1;
        self.plan.tool_calls += 1;
        Ok(())
    }

    /// Starts a tool on the blocking pool; returns its handle and when it started.
    fn spawn_tool(&self, def: Arc<ToolDef>, args: Value) -> (tokio::task::JoinHandle<ToolOutput>, Instant) {
        let (store, docs, approvals) =
            (self.agent.store.clone(), self.agent.docs.clone(), self.agent.approvals.clone());
        let (now, run_id, max_chars) = ((self.agent.clock)(), self.run_id, self.agent.limits.max_result_chars);
        let handle = tokio::task::spawn_blocking(move || {
            let ctx = tools::Context { store: &store, docs: &docs, approvals: &approvals };
            run_blocking(ctx, now, run_id, &def, args, max_chars)
        });
        (handle, Instant::now())
    }

    async fn finish_tool(
        &self,
        def: &ToolDef,
        args: &Value,
        (handle, started): (tokio::task::JoinHandle<ToolOutput>, Instant),
        timeout: Duration,
        audit: &mut Audit,
    ) -> ToolOutput {
        // The timeout runs from the tool's start, not from when this turn awaits it.
        let remaining = timeout.saturating_sub(started.elapsed());
        let output = match tokio::time::timeout(remaining, handle).await {
            Ok(Ok(out)) => out,
            Ok(Err(join)) => {
                tracing::error!(stage = "agent", tool = def.name, error = %join, "tool task panicked");
                ToolOutput {
                    content: format!(
                        "{} failed on an internal error (logged for the operators). Continue without it and say so.",
                        def.name
                    ),
                    is_error: true,
                }
            }
            Err(_) => {
                audit.record(guardrail(
                    "tool_timeout",
                    &format!("{} {args}", def.name),
                    &format!("no result within {} ms", timeout.as_millis()),
                ));
                ToolOutput {
                    content: format!(
                        "{} did not answer within {} ms and was abandoned. Try once more with a narrower request, or continue without it.",
                        def.name,
                        timeout.as_millis()
                    ),
                    is_error: true,
                }
            }
        };
        let (redacted, hits) = redact(&output.content);
        if hits > 0 {
            audit.record(guardrail(
                "redaction",
                def.name,
                &format!("{hits} e-mail address(es) or phone number(s) removed"),
            ));
        }
        // Errors are capped as results are: one can quote what the model sent.
        let content = if output.is_error {
            clip(&redacted, self.agent.limits.max_result_chars)
        } else {
            as_data(&format!("tool:{}", def.name), &redacted)
        };
        audit.record(Step {
            kind: StepKind::ToolCall,
            name: def.name.to_string(),
            arguments: Some(args.to_string()),
            result: Some(content.clone()),
            is_error: output.is_error,
            latency: started.elapsed(),
            tokens: None,
        });
        ToolOutput { content, is_error: output.is_error }
    }
}

fn run_blocking(
    ctx: tools::Context,
    now: Timestamp,
    run_id: i64,
    def: &ToolDef,
    args: Value,
    max_chars: usize,
) -> ToolOutput {
    tools::with(ctx, now, Proposer::Run(run_id), |ctx| def.call_with_limit(ctx, args, max_chars)).unwrap_or_else(|e| {
        tracing::error!(stage = "agent", error = %e, "no read connection for a tool");
        ToolOutput { content: format!("{} could not reach the database. Try again shortly.", def.name), is_error: true }
    })
}

/// A JSON value with object keys sorted, so equal arguments compare equal.
fn canonical(v: &Value) -> String {
    match v {
        Value::Object(map) => {
            let mut keys: Vec<&String> = map.keys().collect();
            keys.sort();
            let parts: Vec<String> = keys.iter().map(|k| format!("{}:{}", json!(k), canonical(&map[*k]))).collect();
            format!("{{{}}}", parts.join(","))
        }
        Value::Array(items) => format!("[{}]", items.iter().map(canonical).collect::<Vec<_>>().join(",")),
        other => other.to_string(),
    }
}
