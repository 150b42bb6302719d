//! The audit trail: every run and every step (model call, tool call, guardrail
//! decision) in `agent_runs` / `agent_steps`. The run row is written when the run
//! starts; steps are buffered and written with the outcome when it ends (or every
//! [`FLUSH_AT`] steps), in one transaction, before the run's answer is handed back:
//! so the trail is complete before any note is published, at one commit per run
//! instead of one per step.

use std::time::Duration;

use rusqlite::{OptionalExtension, params};

use crate::domain::Timestamp;
use crate::store::{Store, StoreError, Writer};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StepKind {
    ModelCall,
    ToolCall,
    Guardrail,
}

impl StepKind {
    fn as_str(self) -> &'static str {
        match self {
            StepKind::ModelCall => "model_call",
            StepKind::ToolCall => "tool_call",
            StepKind::Guardrail => "guardrail",
        }
    }
}

#[derive(Debug, Clone)]
pub struct Step {
    pub kind: StepKind,
    pub name: String,
    pub arguments: Option<String>,
    pub result: Option<String>,
    pub is_error: bool,
    pub latency: Duration,
    pub tokens: Option<(u64, u64)>,
}

/// Buffered steps that force a write before the run ends.
pub const FLUSH_AT: usize = 64;

pub struct Audit {
    writer: Writer,
    /// Who drives the run, for metrics: `agent`, or `mcp` for an MCP host's calls.
    caller: &'static str,
    run_id: i64,
    seq: i64,
    pending: Vec<(i64, Step, i64)>,
}

impl Audit {
    pub async fn start(
        writer: Writer,
        profile: &str,
        trigger: &str,
        alarm_id: Option<i64>,
        now: Timestamp,
    ) -> Result<Audit, StoreError> {
        let (profile, trigger) = (profile.to_string(), trigger.to_string());
        let w = writer.clone();
        let run_id = w
            .call_async(move |c| {
                c.execute(
                    "INSERT INTO agent_runs (profile, trigger, alarm_id, started_at) VALUES (?1, ?2, ?3, ?4)",
                    params![profile, trigger, alarm_id, now.unix()],
                )?;
                Ok::<_, StoreError>(c.last_insert_rowid())
            })
            .await?;
        Ok(Audit { writer, caller: "agent", run_id, seq: 0, pending: Vec::new() })
    }

    /// Marks the run's steps as driven by `caller` (in metrics).
    pub fn with_caller(mut self, caller: &'static str) -> Audit {
        self.caller = caller;
        self
    }

    pub fn run_id(&self) -> i64 {
        self.run_id
    }

    pub fn record(&mut self, step: Step) {
        match step.kind {
            StepKind::ToolCall => {
                // The model names tools; only real names become label values.
                let tool = crate::tools::find(&step.name).map_or("unknown", |t| t.name);
                let outcome = if step.is_error { "error" } else { "ok" };
                crate::metrics::count(
                    "twinops_tool_calls_total",
                    &[("tool", tool), ("caller", "agent"), ("outcome", outcome)],
                    1.0,
                );
                crate::metrics::time("twinops_tool_call_seconds", &[("tool", tool)], step.latency);
            }
            StepKind::Guardrail => {
                crate::metrics::count("twinops_guardrail_decisions_total", &[("kind", step.name.as_str())], 1.0);
            }
            StepKind::ModelCall => {}
        }
        self.seq += 1;
        self.pending.push((self.seq, step, Timestamp::now().unix()));
    }

    /// Writes the buffered steps if there are many.
    pub async fn flush_if_large(&mut self) -> Result<(), StoreError> {
        if self.pending.len() >= FLUSH_AT { self.flush().await } else { Ok(()) }
    }

    /// Writes the buffered steps.
    pub async fn flush(&mut self) -> Result<(), StoreError> {
        if self.pending.is_empty() {
            return Ok(());
        }
        let steps = std::mem::take(&mut self.pending);
        let run_id = self.run_id;
        let w = self.writer.clone();
        w.call_async(move |c| insert_steps(c, run_id, &steps)).await
    }

    /// Writes the remaining steps and the run's outcome, in one transaction.
    pub async fn finish(
        &mut self,
        outcome: &str,
        model: Option<&str>,
        tokens: (u64, u64),
        error: Option<String>,
        flags: &[String],
    ) -> Result<(), StoreError> {
        let steps = std::mem::take(&mut self.pending);
        let (run_id, outcome, model) = (self.run_id, outcome.to_string(), model.map(str::to_string));
        let flags = serde_json::to_string(flags).unwrap_or_else(|_| "[]".into());
        let w = self.writer.clone();
        w.call_async(move |c| {
                insert_steps(c, run_id, &steps)?;
                c.prepare_cached(
                    "UPDATE agent_runs SET outcome = ?2, model = ?3, finished_at = ?4, tokens_in = ?5, tokens_out = ?6, error = ?7, flags = ?8 WHERE id = ?1",
                )?
                .execute(params![run_id, outcome, model, Timestamp::now().unix(), tokens.0 as i64, tokens.1 as i64, error, flags])?;
                Ok::<_, StoreError>(())
            })
        .await
    }
}

fn insert_steps(c: &rusqlite::Connection, run_id: i64, steps: &[(i64, Step, i64)]) -> Result<(), StoreError> {
    let mut stmt = c.prepare_cached(
        "INSERT INTO agent_steps (run_id, seq, kind, name, arguments, result, is_error, latency_us, tokens_in, tokens_out, at)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11)",
    )?;
    for (seq, s, at) in steps {
        stmt.execute(params![
            run_id,
            seq,
            s.kind.as_str(),
            s.name,
            s.arguments,
            s.result,
            s.is_error,
            s.latency.as_micros() as i64,
            s.tokens.map(|t| t.0 as i64),
            s.tokens.map(|t| t.1 as i64),
            at
        ])?;
    }
    Ok(())
}

/// A run's trail as the HMI shows it: the run and its steps. A chat run is its asker's
/// (`user`) unless `sees_all` (a supervisor or admin); `None` to anyone else.
pub fn trail(
    db: &rusqlite::Connection,
    id: i64,
    user: &str,
    sees_all: bool,
) -> rusqlite::Result<Option<serde_json::Value>> {
    let run: Option<String> = db
        .query_row(
            "SELECT json_object('id', id, 'profile', profile, 'trigger', trigger, 'alarm_id', alarm_id, 'outcome', outcome,
                    'model', model, 'started_at', rfc3339(started_at), 'finished_at', rfc3339(finished_at), 'tokens_in', tokens_in,
                    'tokens_out', tokens_out, 'error', error, 'flags', json(flags))
             FROM agent_runs WHERE id = ?1 AND (profile != 'chat' OR trigger = 'user:' || ?2 OR ?3)",
            params![id, user, sees_all],
            |r| r.get(0),
        )
        .optional()?;
    let Some(run) = run else { return Ok(None) };
    let mut stmt = db.prepare_cached(
        "SELECT json_object('seq', seq, 'kind', kind, 'name', name, 'arguments', arguments, 'result', result,
                'is_error', is_error, 'latency_ms', latency_us / 1000.0)
         FROM agent_steps WHERE run_id = ?1 ORDER BY seq",
    )?;
    let steps = crate::store::json_rows(&mut stmt, [id])?;
    let run: serde_json::Value = serde_json::from_str(&run).unwrap_or(serde_json::Value::Null);
    Ok(Some(serde_json::json!({"run": run, "steps": steps})))
}

/// A run's trace as text, for `twinops runs show`.
pub fn render_run(store: &Store, run_id: i64) -> anyhow::Result<String> {
    let db = store.read()?;
    type RunRow = (String, String, Option<String>, Option<String>, i64, Option<i64>, i64, i64, Option<String>, String);
    let run: Option<RunRow> = db
        .query_row(
            "SELECT profile, trigger, outcome, model, started_at, finished_at, tokens_in, tokens_out, error, flags FROM agent_runs WHERE id = ?1",
            [run_id],
            |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?, r.get(4)?, r.get(5)?, r.get(6)?, r.get(7)?, r.get(8)?, r.get(9)?)),
        )
        .optional()?;
    let Some((profile, trigger, outcome, model, started, finished, tin, tout, error, flags)) = run else {
        anyhow::bail!("no agent run {run_id}; runs are numbered from 1 (see agent_runs)");
    };
    let mut out = format!(
        "run {run_id}: {profile} ({trigger}), outcome {}, model {}, started {}, {} ms, tokens {tin} in / {tout} out\n",
        outcome.as_deref().unwrap_or("unfinished"),
        model.as_deref().unwrap_or("-"),
        Timestamp::from_unix(started).to_rfc3339(),
        finished.map_or("-".to_string(), |f| ((f - started) * 1000).to_string()),
    );
    let flags: Vec<String> = serde_json::from_str(&flags).unwrap_or_default();
    if !flags.is_empty() {
        out.push_str(&format!("flags: {}\n", flags.join(", ")));
        for reason in flags.iter().filter_map(|f| super::note::set_aside_reason(f)) {
            out.push_str(&format!("set aside: {reason}\n"));
        }
    }
    if let Some(e) = error {
        out.push_str(&format!("error: {e}\n"));
    }
    let mut stmt = db.prepare("SELECT seq, kind, name, arguments, result, is_error, latency_us FROM agent_steps WHERE run_id = ?1 ORDER BY seq")?;
    let mut rows = stmt.query([run_id])?;
    while let Some(r) = rows.next()? {
        let (seq, kind, name, args, result, err, us): (i64, String, String, Option<String>, Option<String>, bool, i64) =
            (r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?, r.get(4)?, r.get(5)?, r.get(6)?);
        let short = |s: Option<String>| {
            let s = s.unwrap_or_default().replace('\n', " ");
            if s.chars().count() > 160 { format!("{}…", s.chars().take(160).collect::<String>()) } else { s }
        };
        out.push_str(&format!(
            "{seq:>3} {kind:<10} {name:<24} {:>8.1} ms{} {}\n      -> {}\n",
            us as f64 / 1000.0,
            if err { " ERROR" } else { "" },
            short(args),
            short(result)
        ));
    }
    Ok(out)
}
