//! The rules model's triage: the fixed plan of reads, then the note composed from the
//! observations alone (the alarm's judgement, the readings, the rationalization, the
//! documented procedure).

use super::*;
use crate::agent::judgement::Judgement;
use crate::alarms::points::Rationalization;

/// Triage: the four reads at once, then the procedure, then the note.
pub(super) fn triage_step(s: &Seen, asset: &str) -> ModelReply {
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
    plan.extend(episode_plan(t));
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
    let mut note = triage_note(t, &s.seen);
    if t.episode.is_some()
        && let Some(episode) = s.result("get_episode")
    {
        note = episode_note(note, &episode, &s.result("find_similar_episodes").unwrap_or(Value::Null));
    }
    reply_text(serde_json::to_string(&note).expect("note serializes"))
}

/// Composes the triage note from the observations alone.
pub(super) fn triage_note(t: &TaskFacts, seen: &[(String, Value, Option<Value>)]) -> TriageNote {
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
    let judgement = crate::agent::judgement::judge(t, &details, &history, alarm.as_ref());
    if let Some(j) = &judgement {
        summary.push(' ');
        summary.push_str(&j.sentence);
    }
    let r = t.rationalization.as_ref();
    summary.push_str(&rationalization_sentence(t));
    let procedure = Procedure::read(&doc);
    let citation = doc["citation"].as_str().map(str::to_string);
    let (likely_causes, mut recommended_actions) =
        causes_and_actions(r, &procedure, citation.as_deref(), judgement.as_ref());
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

/// What the note says to suspect and to do: the site's rationalization first, the
/// documented procedure (cited) where it is silent, and a judgement about the alarm
/// itself ahead of both.
fn causes_and_actions(
    r: Option<&Rationalization>,
    procedure: &Procedure,
    citation: Option<&str>,
    judgement: Option<&Judgement>,
) -> (Vec<String>, Vec<String>) {
    let cite = |s: String| match citation {
        Some(c) => format!("{s} [{c}]"),
        None => s,
    };
    let documented_causes = procedure
        .field("Probable causes")
        .map(|c| c.split(';').map(|s| s.trim().trim_end_matches('.').to_string()).filter(|s| !s.is_empty()).collect());
    let mut likely_causes: Vec<String> = r
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
    if let Some(j) = judgement {
        likely_causes.insert(0, j.cause.clone());
        recommended_actions.insert(0, j.action.clone());
    }
    (likely_causes, recommended_actions)
}

/// The alarm's sensor as the tools read it: its latest value, band and limits, its
/// zone, and the trend over the history's window, said in `summary`; returns the
/// evidence for each figure.
pub(super) fn readings(
    sensor_id: Option<&str>,
    details: &Value,
    history: &Value,
    summary: &mut String,
) -> Vec<Evidence> {
    let sensor = details["sensors"]
        .as_array()
        .and_then(|s| s.iter().find(|s| s["id"].as_str() == sensor_id))
        .cloned()
        .unwrap_or(Value::Null);
    let unit = sensor["unit"].as_str().unwrap_or_default();
    let mut evidence = Vec::new();
    if !sensor.is_null() {
        summary.push_str(&format!(" {}.", sensor_reads(&sensor)));
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
pub(super) fn trend_sentence(trend: &Value, unit: &str) -> String {
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
pub(super) struct Procedure<'a> {
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
pub(super) fn urgency(alarm: Option<&Value>, unread: bool, respond: Option<&str>, respond_min: Option<f64>) -> Urgency {
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
pub(super) fn documented(item: String) -> String {
    if crate::agent::guard::is_placeholder(&item, 2) { format!("{item} (documented)") } else { item }
}

/// What the note says of the point's rationalization: the consequence of no action,
/// with where it is documented; or that the point has none.
pub(super) fn rationalization_sentence(t: &TaskFacts) -> String {
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

/// Names the other alarms a grouped note covers, so that the note shown for each of
/// them says why it leads with another alarm.
pub(super) fn grouped_sentence(grouped: &[GroupedAlarm]) -> String {
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
pub(super) fn operator_actions(text: &str) -> Vec<String> {
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
