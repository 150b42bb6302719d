//! The rules model's answers to chat questions and its shift handover: the questions
//! operators ask most, each routed to the tools that hold the answer, and said plainly.

use super::*;

/// A question: the latest handover when it asks for one; otherwise the assets it names
/// (directly or by a sensor id), then the docs.
pub(super) fn question_step(s: &Seen, question: &str) -> ModelReply {
    let t = &s.req.task;
    // "What changed since the last shift?": the shift's alarms and the plant now, as a
    // handover has them, from the last handover on.
    if t.mentioned.is_empty() && asks_what_changed(question) && s.offered("get_system_summary") {
        return what_changed(s);
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
pub(super) fn documented_answer(text: String, hits: &[Value]) -> String {
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
pub(super) const SHIFT_HOURS: i64 = 8;

/// Shift handover: the summary and the shift's alarm figures, stated plainly.
pub(super) fn handover_step(s: &Seen) -> ModelReply {
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
pub(super) fn awaiting_decision(s: &Seen) -> String {
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
pub(super) fn shift_alarms(s: &Seen) -> String {
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
pub(super) fn plant_status(title: &str, s: &Seen) -> String {
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
pub(super) fn asks_for_alarm_performance(question: &str) -> bool {
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
pub(super) fn asks_for_active_alarms(question: &str) -> bool {
    let q = question.to_lowercase();
    ["alarms are active", "active alarms", "alarms active", "in alarm", "standing alarms", "current alarms"]
        .iter()
        .any(|w| q.contains(w))
}

/// The week's alarm figures from `get_alarm_kpis`, as an alarm engineer reads them.
pub(super) fn alarm_performance(s: &Seen) -> String {
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
pub(super) fn active_alarms(s: &Seen) -> String {
    let rows = s.result("list_alarms").and_then(|r| r["alarms"].as_array().cloned()).unwrap_or_default();
    if rows.is_empty() {
        return "No alarms are active now (list_alarms, state active).".into();
    }
    let lines: Vec<String> = rows
        .iter()
        .map(|a| {
            format!(
                "- {} on {} ({}): {}",
                a["code"].as_str().unwrap_or_default(),
                a["asset_id"].as_str().unwrap_or_default(),
                a["sensor_id"].as_str().unwrap_or("the asset"),
                alarm_state(a)
            )
        })
        .collect();
    let total = s.result("list_alarms").and_then(|r| r["total"].as_i64()).unwrap_or(rows.len() as i64);
    let shown = if total > rows.len() as i64 { format!(" (the first {} shown)", rows.len()) } else { String::new() };
    let are = if total == 1 { "alarm is" } else { "alarms are" };
    format!("{total} {are} active now{shown}:\n{}", lines.join("\n"))
}

/// Whether a question about no asset in particular asks how the plant is.
pub(super) fn asks_for_status(question: &str) -> bool {
    let q = question.to_lowercase();
    ["attention", "status", "overview", "what is wrong", "what's wrong", "problems", "how is the plant"]
        .iter()
        .any(|w| q.contains(w))
}

/// Whether a question asks what changed over the shift (rather than for the handover).
pub(super) fn asks_what_changed(question: &str) -> bool {
    let q = question.to_lowercase();
    (q.contains("changed") || q.contains("happened") || q.contains("new since"))
        && ["shift", "handover", "since"].iter().any(|w| q.contains(w))
}

/// Whether an operator's question is about the shift handover.
pub(super) fn asks_for_handover(question: &str) -> bool {
    let q = question.to_lowercase();
    ["handover", "hand over", "handed over", "last shift", "previous shift"].iter().any(|w| q.contains(w))
}

/// The sensors a question names by their kind ("the low suction pressure on
/// PUMP-004": suction_pressure), each with its reading, band and limits, and the
/// documented response to its alarm points (the level the question names, when it
/// names one), from `get_asset_details`.
pub(super) fn point_state(d: &Value, question: &str) -> String {
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
        text.push_str(&format!("\n  {}.", sensor_reads(s)));
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
pub(super) fn asset_status(d: &Value) -> String {
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
                "{} on {} ({})",
                al["code"].as_str().unwrap_or_default(),
                al["sensor_id"].as_str().unwrap_or("the asset"),
                alarm_state(al)
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

/// An alarm row's state as a list says it: `medium, unacknowledged, raised T, value V
/// against limit L`.
fn alarm_state(a: &Value) -> String {
    format!(
        "{}, {}, raised {}, value {} against limit {}",
        a["severity"].as_str().unwrap_or_default(),
        a["state"].as_str().unwrap_or_default().replace('_', " "),
        a["raised_at"].as_str().unwrap_or_default(),
        a["value"],
        a["threshold"]
    )
}

/// What changed over the shift: the tools a handover reads, then its lines, from the
/// last handover on.
fn what_changed(s: &Seen) -> ModelReply {
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
    reply_text(text)
}
