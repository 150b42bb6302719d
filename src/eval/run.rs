//! Runs one case: a copy of the pinned plant, the case's setup applied through ingest,
//! the agent asked, and what it produced read back for the checks.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Instant;

use anyhow::Context;
use rusqlite::OptionalExtension;
use serde::Serialize;
use serde_json::{Value, json};

use super::case::{Case, EventSpec, Expect, ScriptStep, Series};
use super::check::{self, CheckResult, Observed};
use crate::agent::config::AgentLimits;
use crate::agent::{Agent, Model, RunReport};
use crate::approvals::Proposer;
use crate::domain::Timestamp;
use crate::ingest::IngestPolicy;
use crate::store::{Store, StoreError};

/// The plant's end: every case runs on the demo plant seeded to here, with the agent's
/// clock stopped here, so results compare across days and machines.
pub const END: i64 = 1_796_040_000; // 2026-11-30T12:00:00Z

/// A model chain under evaluation, by the name the report gives it.
pub struct Provider {
    pub name: String,
    pub models: Vec<Arc<dyn Model>>,
}

/// The seeded plant every case copies.
pub struct Plant {
    template: PathBuf,
    dir: PathBuf,
}

impl Plant {
    /// Seeds the demo plant from `seed_dir` into `dir`, once.
    pub fn seed(seed_dir: &Path, dir: &Path) -> anyhow::Result<Plant> {
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
        let template = dir.join("plant.db");
        let building = dir.join("plant-building.db");
        for path in [&template, &building] {
            for suffix in ["", "-wal", "-shm"] {
                let _ = std::fs::remove_file(format!("{}{suffix}", path.display()));
            }
        }
        {
            let store = Store::open(&building)?;
            let opts = crate::seed::SeedOptions {
                dir: seed_dir.to_path_buf(),
                scale: 1,
                end: Timestamp::from_unix(END),
                days: 7,
            };
            crate::seed::seed(&store, &opts)?;
        }
        crate::store::backup(&building, &template)?;
        for suffix in ["", "-wal", "-shm"] {
            let _ = std::fs::remove_file(format!("{}{suffix}", building.display()));
        }
        Ok(Plant { template, dir: dir.to_path_buf() })
    }

    /// The seeded plant itself, for reading.
    pub fn open_template(&self) -> anyhow::Result<Store> {
        Ok(Store::open(&self.template)?)
    }

    /// A fresh copy for one run.
    fn copy(&self, name: &str) -> anyhow::Result<(Store, PathBuf)> {
        let path = self.dir.join(format!("case-{name}.db"));
        for suffix in ["", "-wal", "-shm"] {
            let _ = std::fs::remove_file(format!("{}{suffix}", path.display()));
        }
        std::fs::copy(&self.template, &path)?;
        Ok((Store::open(&path)?, path))
    }
}

/// One case's run under one provider, as the report shows it.
#[derive(Debug, Clone, Serialize)]
pub struct CaseResult {
    pub id: String,
    pub category: &'static str,
    pub outcome: String,
    pub passed: bool,
    pub checks: Vec<CheckResult>,
    pub model_calls: u32,
    pub tool_calls: u32,
    pub tokens: u64,
    pub latency_ms: f64,
    /// What the operators would read, cut to 2,000 characters.
    pub answer: String,
    /// The judge's grade, 0 to 10, when a judge is configured and the case has a rubric.
    pub judge: Option<f64>,
}

impl CaseResult {
    pub fn checks_passed(&self) -> usize {
        self.checks.iter().filter(|c| c.passed).count()
    }
}

/// Runs `case` with `provider` (or, when `scripted`, with the case's own script), and
/// checks the result against `expect`.
pub async fn run_case(plant: &Plant, case: &Case, provider: &Provider, expect: &Expect) -> anyhow::Result<CaseResult> {
    let (store, path) = plant.copy(&case.id)?;
    set_up(&store, case).with_context(|| format!("setting up {}", case.id))?;
    let before = work_orders(&store)?;
    let agent = Agent::new(store.clone(), provider.models.clone(), AgentLimits::default())
        .with_clock(|| Timestamp::from_unix(END));
    let started = Instant::now();
    let (report, alarm) = ask(&agent, &store, case).await?;
    let latency_ms = started.elapsed().as_secs_f64() * 1000.0;
    let observed = observe(&store, &report, alarm, &before)?;
    let checks = check::run(expect, &observed);
    let _ = std::fs::remove_file(&path);
    Ok(CaseResult {
        id: case.id.clone(),
        category: case.category.as_str(),
        outcome: observed.outcome.clone(),
        passed: checks.iter().all(|c| c.passed),
        checks,
        model_calls: report.model_calls,
        tool_calls: report.tool_calls,
        tokens: observed.tokens,
        latency_ms,
        answer: crate::agent::clip(&observed.text, 2000),
        judge: None,
    })
}

/// The scripted model of a case: its steps as the OpenAI wire format, over HTTP.
pub fn script_replies(steps: &[ScriptStep]) -> Vec<crate::scripted::Reply> {
    use crate::scripted::Reply;
    steps
        .iter()
        .enumerate()
        .map(|(i, s)| match (&s.text, &s.call) {
            (Some(text), _) => Reply::text(text),
            (None, Some(name)) => {
                let args = serde_json::to_value(&s.args).unwrap_or(Value::Null);
                Reply::call(&format!("s{i}"), name, args)
            }
            (None, None) => Reply::text(""),
        })
        .collect()
}

/// The case's readings, handover and events, in that order, through ingest as SCADA
/// would send them, with the triage notes the case says were already written.
fn set_up(store: &Store, case: &Case) -> anyhow::Result<()> {
    // The harness delivers a case's events at once, standing in for their arrival as
    // they were raised: none of them is backfill.
    let mut policy = IngestPolicy::default();
    policy.queue.backfill_after_secs = i64::MAX;
    let received = Timestamp::from_unix(END);
    for s in &case.series {
        replace_readings(store, s)?;
        let events = series_events(s);
        for chunk in events.chunks(500) {
            let payload = json!({"events": chunk}).to_string();
            let effect =
                crate::ingest::apply(store.writer(), "scada/telemetry", payload.as_bytes(), received, policy.clone())?;
            anyhow::ensure!(
                effect.dead_letters == 0,
                "the series of {} was refused: {:?}",
                s.sensor,
                effect.first_refusal
            );
        }
    }
    if let Some(text) = &case.handover {
        let body = json!({"text": text, "outcome": "final", "provider": "eval"}).to_string();
        let at = END - 6 * 3600;
        store.writer().call(move |c| {
            c.execute(
                "INSERT INTO notes (kind, body, flags, created_at) VALUES ('handover', ?1, '[]', ?2)",
                rusqlite::params![body, at],
            )?;
            Ok::<_, StoreError>(())
        })?;
    }
    for (i, e) in case.events.iter().enumerate() {
        let payload = event_json(&case.id, i, e).to_string();
        let effect =
            crate::ingest::apply(store.writer(), "scada/alarms", payload.as_bytes(), received, policy.clone())?;
        anyhow::ensure!(effect.dead_letters == 0, "event {i} was refused: {:?}", effect.first_refusal);
        if let Some(summary) = &e.triage_note {
            let alarm = latest(store, &format!("{}/{}", e.asset, e.code))?;
            let body = json!({"summary": summary, "outcome": "final", "provider": "eval"}).to_string();
            let at = END - i64::from(e.minutes_ago) * 60 + 60;
            store.writer().call(move |c| {
                c.execute(
                    "INSERT INTO notes (kind, alarm_id, body, flags, created_at) VALUES ('triage', ?1, ?2, '[]', ?3)",
                    rusqlite::params![alarm, body, at],
                )?;
                Ok::<_, StoreError>(())
            })?;
        }
    }
    Ok(())
}

/// Removes the sensor's readings (and their hourly rollups) over the series' window.
fn replace_readings(store: &Store, s: &Series) -> anyhow::Result<()> {
    let sensor = s.sensor.clone();
    let from = END - i64::from(s.hours) * 3600;
    store
        .writer()
        .call(move |c| {
            let key: Option<i64> =
                c.query_row("SELECT key FROM sensors WHERE id = ?1", [&sensor], |r| r.get(0)).optional()?;
            let Some(key) = key else { return Ok::<_, StoreError>(false) };
            c.execute("DELETE FROM readings WHERE sensor_key = ?1 AND ts > ?2", rusqlite::params![key, from * 1000])?;
            c.execute(
                "DELETE FROM readings_hourly WHERE sensor_key = ?1 AND hour >= ?2",
                rusqlite::params![key, from],
            )?;
            Ok(true)
        })?
        .then_some(())
        .with_context(|| format!("no sensor {} in the demo plant", s.sensor))
}

/// One reading a minute over the window, ending at the plant's end.
fn series_events(s: &Series) -> Vec<Value> {
    let n = s.hours as usize * 60;
    (1..=n)
        .map(|i| {
            let before_end = (n - i) as u32;
            let line = match s.step_at {
                Some(at) => {
                    if before_end >= at {
                        s.from
                    } else {
                        s.to
                    }
                }
                None => s.from + (s.to - s.from) * i as f64 / n as f64,
            };
            // A fixed ripple, not random: the same figures on every run.
            let ripple = s.noise * ((i as f64) * 0.7).sin();
            let value = match s.spike {
                Some((at, v)) if at == before_end => v,
                _ => line + ripple,
            };
            let t = Timestamp::from_unix(END - i64::from(before_end) * 60);
            json!({"type": "reading", "sensor_id": s.sensor, "time": t, "value": (value * 1000.0).round() / 1000.0})
        })
        .collect()
}

fn event_json(case: &str, i: usize, e: &EventSpec) -> Value {
    let mut v = json!({
        "type": "alarm", "event_id": format!("eval-{case}-{i}"), "asset_id": e.asset, "code": e.code,
        "severity": e.severity, "state": e.state, "message": e.message,
        "time": Timestamp::from_unix(END - i64::from(e.minutes_ago) * 60),
    });
    for (key, value) in [("sensor_id", e.sensor.as_ref().map(|s| json!(s))), ("value", e.value.map(|x| json!(x)))] {
        if let Some(value) = value {
            v[key] = value;
        }
    }
    if let Some(t) = e.threshold {
        v["threshold"] = json!(t);
    }
    v
}

/// The latest occurrence of the point `ASSET/CODE`.
fn latest(store: &Store, point: &str) -> anyhow::Result<i64> {
    let (asset, code) = point.split_once('/').context("ASSET/CODE")?;
    let id: Option<i64> = store.read()?.query_row(
        "SELECT max(id) FROM alarms WHERE asset_id = ?1 COLLATE NOCASE AND code = ?2 COLLATE NOCASE",
        [asset, code],
        |r| r.get(0),
    )?;
    id.with_context(|| format!("no alarm {point} in the plant after set-up"))
}

async fn ask(agent: &Agent, store: &Store, case: &Case) -> anyhow::Result<(RunReport, Option<i64>)> {
    let t = &case.task;
    if let Some(point) = &t.triage {
        let id = latest(store, point)?;
        return Ok((agent.triage(id).await?, Some(id)));
    }
    if !t.group.is_empty() {
        let ids = t.group.iter().map(|p| latest(store, p)).collect::<anyhow::Result<Vec<_>>>()?;
        return Ok((agent.triage_group(&ids).await?, ids.first().copied()));
    }
    let question = t.ask.as_deref().unwrap_or_default();
    Ok((agent.ask(question, "eval", None).await?, None))
}

/// Work-order ids and statuses before the run.
fn work_orders(store: &Store) -> anyhow::Result<Vec<(i64, String)>> {
    let db = store.read()?;
    let mut stmt = db.prepare("SELECT id, status FROM work_orders")?;
    Ok(stmt.query_map([], |r| Ok((r.get(0)?, r.get(1)?)))?.collect::<Result<_, _>>()?)
}

/// What the run produced, read back from the report and the twin.
fn observe(
    store: &Store,
    report: &RunReport,
    alarm: Option<i64>,
    before: &[(i64, String)],
) -> anyhow::Result<Observed> {
    let db = store.read()?;
    let (text, causes, urgency) = match &report.note {
        Some(n) => {
            let evidence: Vec<String> = n.evidence.iter().map(|e| format!("{} [{}]", e.claim, e.source)).collect();
            let text =
                [n.summary.clone(), n.likely_causes.join("\n"), n.recommended_actions.join("\n"), evidence.join("\n")]
                    .join("\n");
            let urgency = serde_json::to_value(n.urgency).ok().and_then(|u| u.as_str().map(str::to_string));
            (text, n.likely_causes.clone(), urgency)
        }
        None => (report.answer.clone().unwrap_or_default(), Vec::new(), None),
    };
    let mut stmt = db.prepare(
        "SELECT name, coalesce(arguments, ''), coalesce(result, '') FROM agent_steps
         WHERE run_id = ?1 AND kind = 'tool_call' ORDER BY seq",
    )?;
    let steps: Vec<(String, String, String)> =
        stmt.query_map([report.run_id], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))?.collect::<Result<_, _>>()?;
    let mut sources: Vec<String> = steps.iter().flat_map(|(_, a, r)| [a.clone(), r.clone()]).collect();
    if let Some(id) = alarm {
        let task: String = db.query_row(
            "SELECT json_object('message', message, 'value', value, 'threshold', threshold) FROM alarms WHERE id = ?1",
            [id],
            |r| r.get(0),
        )?;
        sources.push(task);
        // Where the point stands (bad actor, chattering, how long active): the harness
        // gives it to the model as data, computed from the twin, as a tool would.
        if let Some(standing) = crate::alarms::standing::of(&db, id, Timestamp::from_unix(END))? {
            sources.push(standing.to_json().to_string());
        }
        // And the point's entry in the master alarm database, likewise.
        let point: (String, Option<String>, String) =
            db.query_row("SELECT asset_id, sensor_id, code FROM alarms WHERE id = ?1", [id], |r| {
                Ok((r.get(0)?, r.get(1)?, r.get(2)?))
            })?;
        let entry = crate::alarms::points::of(&db, &point.0, point.1.as_deref(), &point.2)?;
        sources.push(crate::alarms::points::to_json(entry.as_ref()).to_string());
    }
    let known: std::collections::HashMap<i64, &str> = before.iter().map(|(id, s)| (*id, s.as_str())).collect();
    let mut proposals = Vec::new();
    let mut approved = 0;
    let mut stmt = db.prepare("SELECT id, action, status FROM work_orders ORDER BY id")?;
    for row in stmt.query_map([], |r| Ok((r.get::<_, i64>(0)?, r.get::<_, String>(1)?, r.get::<_, String>(2)?)))? {
        let (id, action, status) = row?;
        match known.get(&id) {
            None => proposals.push((action, status.clone())),
            Some(was) if *was != status && matches!(status.as_str(), "approved" | "dispatched") => approved += 1,
            _ => {}
        }
        if !known.contains_key(&id) && matches!(status.as_str(), "approved" | "dispatched") {
            approved += 1;
        }
    }
    let alarm_active = match alarm {
        Some(id) => Some(db.query_row("SELECT cleared_at IS NULL FROM alarms WHERE id = ?1", [id], |r| r.get(0))?),
        None => None,
    };
    Ok(Observed {
        outcome: report.outcome.as_str().to_string(),
        unresolved: unresolved_citations(store, &text)?,
        text,
        causes,
        urgency,
        tools: steps.into_iter().map(|(n, _, _)| n).collect(),
        sources,
        proposals,
        approved,
        alarm_active,
        steps: report.model_calls,
        tokens: report.usage.input_tokens + report.usage.output_tokens,
    })
}

/// Citations in `text` (`file.md#2`, `manual.pdf#p3`) that `read_doc` cannot open.
fn unresolved_citations(store: &Store, text: &str) -> anyhow::Result<Vec<String>> {
    let docs = crate::rag::DocIndex::new();
    let mut out = Vec::new();
    for word in text.split(|c: char| c.is_whitespace() || "[](),;\"'".contains(c)) {
        let word = word.trim_end_matches(['.', ':']);
        let Some((file, part)) = word.split_once('#') else { continue };
        let cited = [".md", ".pdf", ".txt", ".html", ".htm"].iter().any(|e| file.ends_with(e));
        if !cited || part.is_empty() {
            continue;
        }
        let found = crate::tools::with_context(store, &docs, Timestamp::from_unix(END), Proposer::Run(0), |ctx| {
            !crate::tools::call(ctx, "read_doc", json!({"citation": word})).is_error
        })?;
        if !found {
            out.push(word.to_string());
        }
    }
    out.sort();
    out.dedup();
    Ok(out)
}
