//! The `rules` model: deterministic, offline, no network. It calls the same tools in a
//! fixed plan and writes its answer only from their results, with citations. It is the
//! default when no model is configured and the last link of every chain, so a triage
//! note is always produced.

use serde_json::{Value, json};

use super::model::{
    BoxFuture, Finish, GroupedAlarm, Message, Model, ModelError, ModelReply, ModelRequest, TaskFacts, ToolCall, Usage,
};
use super::note::{Evidence, TriageNote, Urgency};
use crate::domain::shown;

pub struct Rules;

impl Model for Rules {
    fn name(&self) -> &str {
        "rules"
    }

    fn complete<'a>(
        &'a self,
        req: &'a ModelRequest,
        _timeout: std::time::Duration,
    ) -> BoxFuture<'a, Result<ModelReply, ModelError>> {
        Box::pin(async move { Ok(next(req)) })
    }
}

/// Tool results so far: (tool name, arguments, parsed result or None on error).
fn observations(messages: &[Message]) -> Vec<(String, Value, Option<Value>)> {
    let mut calls: Vec<&ToolCall> = Vec::new();
    let mut out = Vec::new();
    for m in messages {
        match m {
            Message::Assistant { tool_calls, .. } => calls.extend(tool_calls.iter()),
            Message::Tool { call_id, name, content, is_error } => {
                let args = calls
                    .iter()
                    .find(|c| &c.id == call_id)
                    .and_then(|c| c.arguments.clone().ok())
                    .unwrap_or(Value::Null);
                let parsed = if *is_error { None } else { parse_data(content) };
                out.push((name.clone(), args, parsed));
            }
            _ => {}
        }
    }
    out
}

/// The JSON inside a `<data>` wrapper.
fn parse_data(content: &str) -> Option<Value> {
    let start = content.find('{')?;
    let end = content.rfind('}')?;
    serde_json::from_str(&content[start..=end]).ok()
}

fn call(id: usize, name: &str, arguments: Value) -> ToolCall {
    ToolCall { id: format!("rules_{id}"), name: name.to_string(), arguments: Ok(arguments) }
}

fn reply_calls(calls: Vec<ToolCall>) -> ModelReply {
    ModelReply { text: None, tool_calls: calls, finish: Finish::ToolCalls, usage: Usage::default() }
}

fn reply_text(text: String) -> ModelReply {
    ModelReply { text: Some(text), tool_calls: Vec::new(), finish: Finish::Stop, usage: Usage::default() }
}

/// What the tools returned so far, as the plan reads it.
struct Seen<'a> {
    req: &'a ModelRequest,
    seen: Vec<(String, Value, Option<Value>)>,
}

impl Seen<'_> {
    fn offered(&self, name: &str) -> bool {
        self.req.tools.iter().any(|t| t.name == name)
    }

    fn done(&self, name: &str) -> bool {
        self.seen.iter().any(|(n, _, _)| n == name)
    }

    /// The latest successful result of `name`.
    fn result(&self, name: &str) -> Option<Value> {
        self.seen.iter().rev().find(|(n, _, r)| n == name && r.is_some()).and_then(|(_, _, r)| r.clone())
    }

    /// An id for the next call, unique in the run.
    fn next_id(&self, calls: &[ToolCall]) -> usize {
        self.seen.len() + calls.len()
    }
}

fn next(req: &ModelRequest) -> ModelReply {
    let s = Seen { req, seen: observations(&req.messages) };
    let t = &req.task;
    match (t.alarm_id, &t.asset_id, &t.question) {
        (Some(_), Some(asset), _) => triage_step(&s, asset),
        (_, _, Some(question)) => question_step(&s, question),
        _ => handover_step(&s),
    }
}

/// Triage: the four reads at once, then the procedure, then the note.
fn triage_step(s: &Seen, asset: &str) -> ModelReply {
    let t = &s.req.task;
    let mut calls = Vec::new();
    let mut plan = vec![
        ("get_asset_details", json!({"asset_id": asset})),
        ("list_alarms", json!({"asset_id": asset, "last_hours": 168, "limit": 10})),
    ];
    if let Some(sensor) = &t.sensor_id {
        plan.push(("get_sensor_history", json!({"sensor_id": sensor, "hours": 24})));
    }
    if let Some(code) = &t.code {
        plan.push(("search_docs", json!({"query": code, "limit": 3})));
    }
    for (name, args) in plan {
        if s.offered(name) && !s.done(name) {
            calls.push(call(s.next_id(&calls), name, args));
        }
    }
    if !calls.is_empty() {
        return reply_calls(calls);
    }
    if s.offered("read_doc")
        && !s.done("read_doc")
        && let Some(citation) =
            s.result("search_docs").and_then(|r| r["results"][0]["citation"].as_str().map(str::to_string))
    {
        return reply_calls(vec![call(s.next_id(&[]), "read_doc", json!({"citation": citation}))]);
    }
    let note = triage_note(t, &s.seen);
    reply_text(serde_json::to_string(&note).expect("note serializes"))
}

/// A question: the latest handover when it asks for one; otherwise the assets it names
/// (directly or by a sensor id), then the docs.
fn question_step(s: &Seen, question: &str) -> ModelReply {
    let t = &s.req.task;
    // "What changed since the last shift?": the shift's alarms and the plant now, as a
    // handover has them, from the last handover on.
    if t.mentioned.is_empty() && asks_what_changed(question) && s.offered("get_system_summary") {
        let plan = [
            ("get_shift_handover", json!({})),
            ("get_system_summary", json!({})),
            ("get_alarm_kpis", json!({"hours": SHIFT_HOURS})),
            ("list_alarms", json!({"last_hours": SHIFT_HOURS, "limit": 50})),
        ];
        let calls: Vec<ToolCall> = plan
            .into_iter()
            .filter(|(name, _)| s.offered(name) && !s.done(name))
            .enumerate()
            .map(|(i, (name, args))| call(s.next_id(&[]) + i, name, args))
            .collect();
        if !calls.is_empty() {
            return reply_calls(calls);
        }
        let since = match s.result("get_shift_handover") {
            Some(h) => format!("The last handover was written {}.", h["written_at"].as_str().unwrap_or("-")),
            None => "No handover has been written yet.".into(),
        };
        let mut text = format!("{since} What changed in the last {SHIFT_HOURS} h, from the tools:\n");
        text.push_str(&plant_status("The plant now", s));
        text.push_str(&shift_alarms(s));
        text.push_str(&awaiting_decision(s));
        return reply_text(text);
    }
    if asks_for_handover(question) && s.offered("get_shift_handover") {
        if !s.done("get_shift_handover") {
            return reply_calls(vec![call(s.next_id(&[]), "get_shift_handover", json!({}))]);
        }
        return reply_text(match s.result("get_shift_handover") {
            Some(h) => format!(
                "The latest shift handover, written {} ({}), as it was written then; check it against the plant now:\n{}",
                h["written_at"].as_str().unwrap_or("-"),
                h["written_by"].as_str().unwrap_or("-"),
                h["text"].as_str().unwrap_or_default()
            ),
            None => "No shift handover has been written yet: the HMI's Handover tab or `twinops handover` writes one."
                .into(),
        });
    }
    // The questions operators ask most, answered by the tool that holds the answer.
    if t.mentioned.is_empty() && asks_for_alarm_performance(question) && s.offered("get_alarm_kpis") {
        if !s.done("get_alarm_kpis") {
            return reply_calls(vec![call(s.next_id(&[]), "get_alarm_kpis", json!({}))]);
        }
        return reply_text(alarm_performance(s));
    }
    if t.mentioned.is_empty() && asks_for_active_alarms(question) && s.offered("list_alarms") {
        if !s.done("list_alarms") {
            return reply_calls(vec![call(s.next_id(&[]), "list_alarms", json!({"state": "active", "limit": 50}))]);
        }
        return reply_text(active_alarms(s));
    }
    if t.mentioned.is_empty()
        && t.not_in_twin.is_empty()
        && asks_for_status(question)
        && s.offered("get_system_summary")
    {
        if !s.done("get_system_summary") {
            return reply_calls(vec![call(s.next_id(&[]), "get_system_summary", json!({}))]);
        }
        return reply_text(plant_status("The plant now", s));
    }
    let details_of =
        |asset: &str| s.seen.iter().find(|(n, args, _)| n == "get_asset_details" && args["asset_id"] == asset);
    let mut calls = Vec::new();
    for asset in t.mentioned.iter().filter(|a| s.offered("get_asset_details") && details_of(a).is_none()) {
        calls.push(call(s.next_id(&calls), "get_asset_details", json!({"asset_id": asset})));
    }
    if s.offered("search_docs") && !s.done("search_docs") {
        calls.push(call(s.next_id(&calls), "search_docs", json!({"query": question, "limit": 3})));
    }
    if !calls.is_empty() {
        return reply_calls(calls);
    }
    let mut text = String::new();
    let mut unknown: Vec<&str> = t.not_in_twin.iter().map(String::as_str).collect();
    for asset in &t.mentioned {
        match details_of(asset).and_then(|(_, _, r)| r.as_ref()) {
            Some(d) => {
                text.push_str(asset_status(d).trim_end_matches('\n'));
                text.push_str(&point_state(d, question));
                text.push('\n');
            }
            None => unknown.push(asset.as_str()),
        }
    }
    if !unknown.is_empty() {
        text.push_str(&format!("Not in the twin: {}.\n", unknown.join(", ")));
    }
    let hits = s.result("search_docs").and_then(|r| r["results"].as_array().cloned()).unwrap_or_default();
    reply_text(documented_answer(text, &hits))
}

/// The answer to a question: what the twin says of the assets, then the documentation
/// that matches.
fn documented_answer(text: String, hits: &[Value]) -> String {
    if hits.is_empty() && text.is_empty() {
        return "The offline rules model found nothing in the documentation for this question. A language model is not available; try the alarm code or equipment name.".into();
    }
    let mut answer = String::from(if text.is_empty() {
        "The offline rules model cannot reason about questions; these documentation sections match best:\n"
    } else {
        "The offline rules model cannot reason about questions; this is what the twin says:\n"
    });
    answer.push_str(&text);
    if !hits.is_empty() && !text.is_empty() {
        answer.push_str("Documentation that matches the question:\n");
    }
    for h in hits {
        answer.push_str(&format!(
            "- {} [{}]: {}\n",
            h["heading"].as_str().unwrap_or_default(),
            h["citation"].as_str().unwrap_or_default(),
            h["snippet"].as_str().unwrap_or_default()
        ));
    }
    answer
}

/// The shift a handover covers, in hours.
const SHIFT_HOURS: i64 = 8;

/// Shift handover: the summary and the shift's alarm figures, stated plainly.
fn handover_step(s: &Seen) -> ModelReply {
    let plan = [
        ("get_system_summary", json!({})),
        ("get_alarm_kpis", json!({"hours": SHIFT_HOURS})),
        ("list_alarms", json!({"last_hours": SHIFT_HOURS, "limit": 50})),
    ];
    let mut calls = Vec::new();
    for (name, args) in plan {
        if s.offered(name) && !s.done(name) {
            calls.push(call(s.next_id(&calls), name, args));
        }
    }
    if !calls.is_empty() {
        return reply_calls(calls);
    }
    let mut text = plant_status("Shift handover", s);
    text.push_str(&shift_alarms(s));
    text.push_str(&awaiting_decision(s));
    reply_text(text)
}

/// What waits for a supervisor: proposed work orders and alarm changes.
fn awaiting_decision(s: &Seen) -> String {
    let summary = s.result("get_system_summary").unwrap_or(Value::Null);
    let pending = |key: &str| summary[key]["pending_approval"].as_i64().unwrap_or(0);
    let (orders, changes) = (pending("work_orders"), pending("alarm_changes"));
    if orders + changes == 0 {
        return "\nNothing awaits a supervisor's decision.".into();
    }
    format!("\nAwaiting a supervisor's decision: {orders} work order(s), {changes} alarm change(s).")
}

/// The shift's alarms: activations and their peak, floods, bad actors, what was raised
/// and cleared, points shelved or out of service, stale alarms.
fn shift_alarms(s: &Seen) -> String {
    let Some(k) = s.result("get_alarm_kpis") else { return String::new() };
    let list = |key: &str| k[key].as_array().cloned().unwrap_or_default();
    let named = |p: &Value| {
        format!("{} on {}", p["code"].as_str().unwrap_or_default(), p["asset_id"].as_str().unwrap_or_default())
    };
    let mut text = format!(
        "\nAlarms in the last {SHIFT_HOURS} h: {} activations, peak {} in one 10-minute period, {} floods.",
        k["annunciated"],
        k["peak_10min"],
        list("floods").len()
    );
    let raised = s.result("list_alarms").and_then(|r| r["alarms"].as_array().cloned()).unwrap_or_default();
    if !raised.is_empty() {
        let cleared = raised.iter().filter(|a| !a["cleared_at"].is_null()).count();
        // Each point once, with how many of its occurrences the list holds.
        let mut points: Vec<(String, usize)> = Vec::new();
        for name in raised.iter().map(named) {
            match points.iter_mut().find(|(p, _)| *p == name) {
                Some((_, n)) => *n += 1,
                None => points.push((name, 1)),
            }
        }
        let points: Vec<String> =
            points.into_iter().map(|(p, n)| if n == 1 { p } else { format!("{p} ({n})") }).collect();
        let noted = raised.iter().filter(|a| !a["note_id"].is_null()).count();
        text.push_str(&format!(
            "\nRaised this shift: {} occurrences, {cleared} of them cleared since, {noted} with a triage note: {}.",
            raised.len(),
            points.join(", ")
        ));
    }
    let bad: Vec<String> = list("bad_actors")
        .iter()
        .take(3)
        .map(|p| {
            let n = p["activations"].as_i64().unwrap_or(0);
            format!("{} ({n} activation{})", named(p), if n == 1 { "" } else { "s" })
        })
        .collect();
    if !bad.is_empty() {
        text.push_str(&format!("\nMost frequent: {}.", bad.join(", ")));
    }
    for (key, label) in [
        ("chattering", "Chattering"),
        ("shelved", "Shelved"),
        ("out_of_service", "Out of service"),
        ("stale", "Stale (active 24 h or more)"),
    ] {
        let points: Vec<String> = list(key).iter().map(named).collect();
        if !points.is_empty() {
            text.push_str(&format!("\n{label}: {}.", points.join(", ")));
        }
    }
    text
}

/// The system summary, stated plainly: counts, then each asset that needs attention.
fn plant_status(title: &str, s: &Seen) -> String {
    let summary = s.result("get_system_summary").unwrap_or(Value::Null);
    let mut text = format!(
        "{title}: {} assets; {} active alarms ({} unacknowledged).",
        summary["assets"]["total"], summary["active_alarms"]["total"], summary["active_alarms"]["unacknowledged"]
    );
    for a in summary["needs_attention"].as_array().into_iter().flatten() {
        text.push_str(&format!(
            "\n- {} ({}): {}",
            a["asset_id"].as_str().unwrap_or_default(),
            a["name"].as_str().unwrap_or_default(),
            a["reason"].as_str().unwrap_or_default()
        ));
    }
    text
}

/// Whether a question asks how the alarm system performs: bad actors, rates, floods.
fn asks_for_alarm_performance(question: &str) -> bool {
    let q = question.to_lowercase();
    [
        "bad actor",
        "worst alarm",
        "most frequent alarm",
        "nuisance",
        "chattering",
        "alarm rate",
        "alarm performance",
        "kpi",
        "alarm load",
        "how many alarms",
    ]
    .iter()
    .any(|w| q.contains(w))
}

/// Whether a question asks which alarms are active now.
fn asks_for_active_alarms(question: &str) -> bool {
    let q = question.to_lowercase();
    ["alarms are active", "active alarms", "alarms active", "in alarm", "standing alarms", "current alarms"]
        .iter()
        .any(|w| q.contains(w))
}

/// The week's alarm figures from `get_alarm_kpis`, as an alarm engineer reads them.
fn alarm_performance(s: &Seen) -> String {
    let Some(k) = s.result("get_alarm_kpis") else {
        return "The alarm figures could not be read; try `twinops alarms kpi`.".into();
    };
    let point = |p: &Value| {
        format!(
            "{} {} on {} ({} activations)",
            p["code"].as_str().unwrap_or_default(),
            p["sensor_id"].as_str().unwrap_or("-"),
            p["asset_id"].as_str().unwrap_or_default(),
            p["activations"]
        )
    };
    let list = |key: &str| k[key].as_array().cloned().unwrap_or_default();
    let mut text = format!(
        "Alarm performance from {} to {} (ISA-18.2 / EEMUA-191, annunciated activations only): {} activations, {} per 10 minutes on average ({}; the lines are about 1 and 2), peak {} in one 10-minute period, {}% of the time in flood.",
        k["window"]["from"].as_str().unwrap_or("-"),
        k["window"]["to"].as_str().unwrap_or("-"),
        k["annunciated"],
        k["rate_per_10min"],
        k["rate_verdict"].as_str().unwrap_or("-"),
        k["peak_10min"],
        k["pct_time_in_flood"]
    );
    let bad: Vec<String> = list("bad_actors").iter().take(5).map(point).collect();
    if !bad.is_empty() {
        text.push_str(&format!(
            "\nMost frequent (the top 10 make {}% of all; the target is under 5%):\n- {}",
            k["top10_share_pct"],
            bad.join("\n- ")
        ));
    }
    let chattering: Vec<String> = list("chattering").iter().take(5).map(point).collect();
    text.push_str(&match chattering.is_empty() {
        true => "\nNo chattering points.".to_string(),
        false => format!("\nChattering (3 or more activations within 60 s): {}.", chattering.join("; ")),
    });
    let stale: Vec<String> = list("stale")
        .iter()
        .map(|a| {
            format!(
                "{} on {} since {}",
                a["code"].as_str().unwrap_or_default(),
                a["asset_id"].as_str().unwrap_or_default(),
                a["active_since"].as_str().unwrap_or_default()
            )
        })
        .collect();
    if !stale.is_empty() {
        text.push_str(&format!("\nStale (active 24 h or more): {}.", stale.join("; ")));
    }
    text
}

/// The active alarms from `list_alarms`, most recent first, each with its state.
fn active_alarms(s: &Seen) -> String {
    let rows = s.result("list_alarms").and_then(|r| r["alarms"].as_array().cloned()).unwrap_or_default();
    if rows.is_empty() {
        return "No alarms are active now (list_alarms, state active).".into();
    }
    let lines: Vec<String> = rows
        .iter()
        .map(|a| {
            format!(
                "- {} on {} ({}): {}, {}, raised {}, value {} against limit {}",
                a["code"].as_str().unwrap_or_default(),
                a["asset_id"].as_str().unwrap_or_default(),
                a["sensor_id"].as_str().unwrap_or("the asset"),
                a["severity"].as_str().unwrap_or_default(),
                a["state"].as_str().unwrap_or_default().replace('_', " "),
                a["raised_at"].as_str().unwrap_or_default(),
                a["value"],
                a["threshold"]
            )
        })
        .collect();
    let total = s.result("list_alarms").and_then(|r| r["total"].as_i64()).unwrap_or(rows.len() as i64);
    let shown = if total > rows.len() as i64 { format!(" (the first {} shown)", rows.len()) } else { String::new() };
    let are = if total == 1 { "alarm is" } else { "alarms are" };
    format!("{total} {are} active now{shown}:\n{}", lines.join("\n"))
}

/// Whether a question about no asset in particular asks how the plant is.
fn asks_for_status(question: &str) -> bool {
    let q = question.to_lowercase();
    ["attention", "status", "overview", "what is wrong", "what's wrong", "problems", "how is the plant"]
        .iter()
        .any(|w| q.contains(w))
}

/// Whether a question asks what changed over the shift (rather than for the handover).
fn asks_what_changed(question: &str) -> bool {
    let q = question.to_lowercase();
    (q.contains("changed") || q.contains("happened") || q.contains("new since"))
        && ["shift", "handover", "since"].iter().any(|w| q.contains(w))
}

/// Whether an operator's question is about the shift handover.
fn asks_for_handover(question: &str) -> bool {
    let q = question.to_lowercase();
    ["handover", "hand over", "handed over", "last shift", "previous shift"].iter().any(|w| q.contains(w))
}

/// Composes the triage note from the observations alone.
fn triage_note(t: &TaskFacts, seen: &[(String, Value, Option<Value>)]) -> TriageNote {
    let get = |name: &str| seen.iter().rev().find(|(n, _, r)| n == name && r.is_some()).and_then(|(_, _, r)| r.clone());
    let details = get("get_asset_details").unwrap_or(Value::Null);
    let doc = get("read_doc").unwrap_or(Value::Null);
    let code = t.code.as_deref().unwrap_or("alarm");
    let asset = &details["asset"];
    let alarm = details["active_alarms"]
        .as_array()
        .and_then(|a| a.iter().find(|a| a["alarm_id"].as_i64() == t.alarm_id))
        .cloned();

    let mut summary = format!(
        "{code} on {} ({}, criticality {}).",
        asset["id"].as_str().unwrap_or("the asset"),
        asset["name"].as_str().unwrap_or("unknown asset"),
        asset["criticality"].as_str().unwrap_or("?")
    );
    let mut evidence =
        readings(t.sensor_id.as_deref(), &details, &get("get_sensor_history").unwrap_or(Value::Null), &mut summary);
    // Absence of evidence is not a cleared alarm: say "no longer active" only when the
    // asset's active alarms were read and this one is not among them.
    match (&alarm, details.is_null()) {
        (None, false) => summary.push_str(" The alarm is no longer active."),
        (None, true) => summary.push_str(
            " The asset's details could not be read, so this note cannot say whether the alarm is still active; check it in the alarm list.",
        ),
        (Some(_), _) => {}
    }
    if !t.grouped.is_empty() {
        summary.push_str(&grouped_sentence(&t.grouped));
    }
    // A bad actor, a repeat or a long-standing alarm is said as such: the tenth
    // activation of a chattering point is not news.
    for said in t.standing.iter().filter(|s| s.is_notable()).flat_map(|s| s.sentences()) {
        summary.push(' ');
        summary.push_str(&said);
    }

    // When the alarm itself is the story (a stuck or spiking transmitter, a machine on
    // standby, a value on the edge of its band), the note leads with it.
    let history = get("get_sensor_history").unwrap_or(Value::Null);
    let judgement = super::judgement::judge(t, &details, &history, alarm.as_ref());
    if let Some(j) = &judgement {
        summary.push(' ');
        summary.push_str(&j.sentence);
    }
    let r = t.rationalization.as_ref();
    summary.push_str(&rationalization_sentence(t));
    let procedure = Procedure::read(&doc);
    let citation = doc["citation"].as_str().map(str::to_string);
    let cite = |s: String| match &citation {
        Some(c) => format!("{s} [{c}]"),
        None => s,
    };
    // The site's rationalization first; the documented procedure where it is silent.
    let documented_causes = procedure
        .field("Probable causes")
        .map(|c| c.split(';').map(|s| s.trim().trim_end_matches('.').to_string()).filter(|s| !s.is_empty()).collect());
    let likely_causes: Vec<String> = r
        .map(|r| r.cause_list().into_iter().map(documented).collect::<Vec<_>>())
        .filter(|c| !c.is_empty())
        .or(documented_causes)
        .map(|c: Vec<String>| c.into_iter().take(4).collect())
        .unwrap_or_else(|| vec!["No documented causes found; see the asset details.".to_string()]);
    let mut recommended_actions: Vec<String> = match r.map(|r| r.response_steps()).filter(|s| !s.is_empty()) {
        Some(steps) => steps.into_iter().map(documented).collect(),
        None => operator_actions(procedure.text).into_iter().map(cite).collect(),
    };
    if recommended_actions.is_empty() {
        recommended_actions.push("Check the asset locally and follow the site alarm response procedure.".into());
    }
    let mut likely_causes = likely_causes;
    if let Some(j) = &judgement {
        likely_causes.insert(0, j.cause.clone());
        recommended_actions.insert(0, j.action.clone());
    }
    let madb_minutes = r.and_then(|r| r.respond_within_min);
    let respond = r.and_then(|r| r.respond_within()).or_else(|| procedure.field("Time to respond"));
    if let Some(within) = &respond {
        recommended_actions.push(format!("Time to respond: {within}"));
    }
    if r.is_some_and(|r| !r.response.is_empty())
        && alarm.as_ref().is_some_and(|a| a["rationalization"]["rationalized"] == true)
    {
        evidence.push(Evidence {
            claim: format!("documented response for {code} (master alarm database)"),
            source: "get_asset_details".into(),
        });
    }
    if let Some(c) = &citation {
        evidence.push(Evidence { claim: format!("documented response for {code}"), source: c.clone() });
    }
    TriageNote {
        summary: summary.trim().to_string(),
        urgency: judgement
            .and_then(|j| j.urgency)
            .unwrap_or_else(|| urgency(alarm.as_ref(), details.is_null(), respond.as_deref(), madb_minutes)),
        likely_causes,
        recommended_actions,
        proposed_work_order: None,
        evidence,
    }
}

/// The alarm's sensor as the tools read it: its latest value, band and limits, its
/// zone, and the trend over the history's window, said in `summary`; returns the
/// evidence for each figure.
fn readings(sensor_id: Option<&str>, details: &Value, history: &Value, summary: &mut String) -> Vec<Evidence> {
    let sensor = details["sensors"]
        .as_array()
        .and_then(|s| s.iter().find(|s| s["id"].as_str() == sensor_id))
        .cloned()
        .unwrap_or(Value::Null);
    let unit = sensor["unit"].as_str().unwrap_or_default();
    let mut evidence = Vec::new();
    if !sensor.is_null() {
        let limits: Vec<String> = ["ll", "l", "h", "hh"]
            .iter()
            .filter(|k| !sensor["limits"][**k].is_null())
            .map(|k| format!("{k} {}", sensor["limits"][*k]))
            .collect();
        summary.push_str(&format!(
            " {} reads {} {unit} ({} band; limits {}).",
            sensor["id"].as_str().unwrap_or_default(),
            sensor["latest"]["value"],
            sensor["band"].as_str().unwrap_or("unknown"),
            if limits.is_empty() { "none".to_string() } else { limits.join(", ") }
        ));
        // The day's change only where there is a reading from a day ago.
        let change = match sensor.get("change_24h") {
            Some(c) => format!(", change over 24 h {c}"),
            None => String::new(),
        };
        evidence.push(Evidence {
            claim: format!(
                "{} latest {} {unit}{change}",
                sensor["id"].as_str().unwrap_or_default(),
                sensor["latest"]["value"]
            ),
            source: "get_asset_details".into(),
        });
        if let Some(zone) = sensor["iso_10816_zone"].as_str() {
            summary.push_str(&format!(" ISO 10816-3 zone {zone}."));
        }
    }
    if let Some(stats) = history.get("stats") {
        let trend = &stats["trend"];
        let said = trend_sentence(trend, unit);
        summary.push_str(&format!(" {said}"));
        evidence.push(Evidence {
            claim: format!(
                "over the {} h window: min {}, max {}, mean {} {unit}; {said}",
                history["window"]["hours"], stats["min"], stats["max"], stats["mean"]
            ),
            source: "get_sensor_history".into(),
        });
    }
    evidence
}

/// The history's trend in words: the change across the span the readings cover, never
/// a rate stretched beyond it, or why there is no trend.
fn trend_sentence(trend: &Value, unit: &str) -> String {
    if let Some(note) = trend["note"].as_str() {
        return format!("Trend: {note}.");
    }
    let change = trend["change"].as_f64().unwrap_or(0.0);
    let span = trend["span"].as_str().unwrap_or("window");
    let mut said = match change.partial_cmp(&0.0) {
        Some(std::cmp::Ordering::Equal) | None => format!("The least-squares trend is flat over the last {span}"),
        Some(o) => format!(
            "The least-squares trend {} {} {unit} over the last {span}",
            if o.is_gt() { "rose" } else { "fell" },
            shown(change.abs())
        ),
    };
    said.push_str(&format!(" ({} readings)", trend["readings"]));
    if let Some(per_day) = trend.get("per_day") {
        said.push_str(&format!(", {per_day} {unit} per day"));
    } else if let Some(per_hour) = trend.get("per_hour") {
        said.push_str(&format!(", {per_hour} {unit} per hour"));
    }
    said.push('.');
    said
}

/// An alarm response procedure as `read_doc` returns it.
struct Procedure<'a> {
    text: &'a str,
}

impl<'a> Procedure<'a> {
    fn read(doc: &'a Value) -> Procedure<'a> {
        Procedure { text: doc["text"].as_str().unwrap_or_default() }
    }

    /// A "- **Label:** value" entry, with its wrapped continuation lines.
    fn field(&self, label: &str) -> Option<String> {
        let mut lines = self.text.lines().skip_while(|l| !l.trim().starts_with(&format!("- **{label}:**")));
        let first = lines.next()?.trim().trim_start_matches(&format!("- **{label}:**")).trim().to_string();
        let rest = lines.take_while(|l| {
            let t = l.trim();
            !t.is_empty() && !t.starts_with("- **") && !t.starts_with(char::is_numeric)
        });
        Some(std::iter::once(first).chain(rest.map(|l| l.trim().to_string())).collect::<Vec<_>>().join(" "))
    }
}

/// From the alarm's severity and the procedure's time to respond; an alarm that is
/// active, or whose state could not be read, is at least "soon".
/// The note's urgency: from the alarm's severity, and its time to respond (the master
/// alarm database's minutes, else the procedure's words).
fn urgency(alarm: Option<&Value>, unread: bool, respond: Option<&str>, respond_min: Option<f64>) -> Urgency {
    let severity = alarm.and_then(|a| a["severity"].as_str()).unwrap_or_default();
    if alarm.is_none() && !unread {
        // Returned to normal or cleared: worth a look at the cause, not an emergency.
        return if respond.is_some() { Urgency::Soon } else { Urgency::Monitor };
    }
    match (severity, respond) {
        ("critical" | "high", _) => Urgency::Immediate,
        // As the procedures' words read: minutes are immediate, hours urgent.
        _ if respond_min.is_some_and(|m| m < 60.0) => Urgency::Immediate,
        _ if respond_min.is_some() => Urgency::Urgent,
        (_, Some(r)) if r.contains("minute") => Urgency::Immediate,
        (_, Some(r)) if r.contains("hour") => Urgency::Urgent,
        _ if alarm.is_some() || unread => Urgency::Soon,
        _ => Urgency::Monitor,
    }
}

/// A site's one-word cause or step ("Misalignment") said with where it comes from, so
/// that it reads as the site's word and not as a placeholder.
fn documented(item: String) -> String {
    if crate::agent::guard::is_placeholder(&item, 2) { format!("{item} (documented)") } else { item }
}

/// What the note says of the point's rationalization: the consequence of no action,
/// with where it is documented; or that the point has none.
fn rationalization_sentence(t: &TaskFacts) -> String {
    match &t.rationalization {
        Some(r) if !r.consequence.is_empty() => {
            format!(" Consequence of no action ({}): {}.", r.provenance(), r.consequence.trim_end_matches('.'))
        }
        Some(r) => format!(" The alarm point is rationalized ({}), with no consequence documented.", r.provenance()),
        None if t.rationalized_checked => {
            format!(" This alarm point is {}.", crate::alarms::points::NOT_RATIONALIZED)
        }
        None => String::new(),
    }
}

/// The sensors a question names by their kind ("the low suction pressure on
/// PUMP-004": suction_pressure), each with its reading, band and limits, and the
/// documented response to its alarm points (the level the question names, when it
/// names one), from `get_asset_details`.
fn point_state(d: &Value, question: &str) -> String {
    let q = question.to_lowercase();
    let words = |s: &str| s.split(['_', ' ', '-']).filter(|w| !w.is_empty()).map(str::to_string).collect::<Vec<_>>();
    let level: &[&str] = if q.contains("low") {
        &["-LO", "-LOLO"]
    } else if q.contains("high") {
        &["-HI", "-HIHI"]
    } else {
        &["-"]
    };
    let mut text = String::new();
    for s in d["sensors"].as_array().into_iter().flatten() {
        let kind = words(s["kind"].as_str().unwrap_or_default());
        if kind.is_empty() || !kind.iter().all(|w| q.contains(w.as_str())) {
            continue;
        }
        let id = s["id"].as_str().unwrap_or_default();
        let unit = s["unit"].as_str().unwrap_or_default();
        let limits: Vec<String> = ["ll", "l", "h", "hh"]
            .iter()
            .filter(|k| !s["limits"][**k].is_null())
            .map(|k| format!("{k} {}", s["limits"][*k]))
            .collect();
        text.push_str(&format!(
            "\n  {id} reads {} {unit} ({} band; limits {}).",
            s["latest"]["value"],
            s["band"].as_str().unwrap_or("unknown").replace('_', " "),
            if limits.is_empty() { "none".into() } else { limits.join(", ") }
        ));
        let documented = d["alarm_points"].as_array().into_iter().flatten().filter(|p| {
            p["sensor_id"].as_str() == Some(id)
                && level.iter().any(|l| p["code"].as_str().is_some_and(|c| c.contains(l)))
        });
        for p in documented {
            let within = p["respond_within_min"]
                .as_f64()
                .map(|m| format!(", respond within {} min", shown(m)))
                .unwrap_or_default();
            text.push_str(&format!(
                "\n  Documented response to {} (master alarm database{within}): {}",
                p["code"].as_str().unwrap_or_default(),
                p["response"].as_str().unwrap_or_default()
            ));
        }
    }
    text
}

/// One asset's state from `get_asset_details`: status, active alarms, the sensors
/// outside their normal band, open work orders.
fn asset_status(d: &Value) -> String {
    let a = &d["asset"];
    let mut text = format!(
        "- {} ({}, criticality {}) is {}.",
        a["id"].as_str().unwrap_or_default(),
        a["name"].as_str().unwrap_or_default(),
        a["criticality"].as_str().unwrap_or("?"),
        a["status"].as_str().unwrap_or("in an unknown state")
    );
    let alarms: Vec<String> = d["active_alarms"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|al| {
            format!(
                "{} on {} ({}, {}, raised {}, value {} against limit {})",
                al["code"].as_str().unwrap_or_default(),
                al["sensor_id"].as_str().unwrap_or("the asset"),
                al["severity"].as_str().unwrap_or_default(),
                al["state"].as_str().unwrap_or_default().replace('_', " "),
                al["raised_at"].as_str().unwrap_or_default(),
                al["value"],
                al["threshold"]
            )
        })
        .collect();
    if alarms.is_empty() {
        text.push_str(" No active alarms.");
    } else {
        text.push_str(&format!(" Active alarms: {}.", alarms.join("; ")));
    }
    let off_band: Vec<String> = d["sensors"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|s| s["band"].as_str().is_some_and(|b| b != "normal"))
        .map(|s| {
            let mut one = format!(
                "{} reads {} {} ({} band)",
                s["id"].as_str().unwrap_or_default(),
                s["latest"]["value"],
                s["unit"].as_str().unwrap_or_default(),
                s["band"].as_str().unwrap_or_default().replace('_', " ")
            );
            if let Some(zone) = s["iso_10816_zone"].as_str() {
                one.push_str(&format!(", ISO 10816-3 zone {zone}"));
            }
            one
        })
        .collect();
    if !off_band.is_empty() {
        text.push_str(&format!(" Outside their normal band: {}.", off_band.join("; ")));
    }
    let orders = d["open_work_orders"].as_array().map_or(0, Vec::len);
    if orders > 0 {
        text.push_str(&format!(" Open work orders: {orders}."));
    }
    text.push('\n');
    text
}

/// Names the other alarms a grouped note covers, so that the note shown for each of
/// them says why it leads with another alarm.
fn grouped_sentence(grouped: &[GroupedAlarm]) -> String {
    const NAMED: usize = 5;
    let mut names: Vec<String> =
        grouped.iter().take(NAMED).map(|g| format!("{} (alarm {}, {})", g.code, g.alarm_id, g.severity)).collect();
    if grouped.len() > NAMED {
        names.push(format!("{} more", grouped.len() - NAMED));
    }
    let more = if grouped.len() == 1 { "1 more alarm" } else { &format!("{} more alarms", grouped.len()) };
    format!(
        " This note also covers {more} on the asset, raised while this one waited for triage: {}.",
        names.join(", ")
    )
}

/// The numbered steps under "Operator action", or the text on its line.
fn operator_actions(text: &str) -> Vec<String> {
    let mut lines = text.lines().skip_while(|l| !l.trim().starts_with("- **Operator action:**"));
    let Some(first) = lines.next() else { return Vec::new() };
    let inline = first.trim().trim_start_matches("- **Operator action:**").trim();
    let mut out: Vec<String> = Vec::new();
    if !inline.is_empty() {
        out.push(inline.to_string());
    }
    for l in lines {
        let t = l.trim();
        if t.starts_with("- **") {
            break;
        }
        match t.split_once(". ") {
            Some((n, rest)) if n.chars().all(|c| c.is_ascii_digit()) && !n.is_empty() => out.push(rest.to_string()),
            _ if !t.is_empty() => {
                if let Some(last) = out.last_mut() {
                    last.push(' ');
                    last.push_str(t);
                }
            }
            _ => {}
        }
    }
    out
}
