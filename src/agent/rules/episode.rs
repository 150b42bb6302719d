//! The rules model's episode note: the initiator's own triage, led by the episode's
//! shape (its initiator with the evidence that ranks it, the consequences) and closed
//! by the flood like it before, all read from `get_episode` and `find_similar_episodes`.

use super::*;

/// The episode reads, when the task is an episode's note.
pub(super) fn episode_plan(t: &TaskFacts) -> Vec<(&'static str, Value)> {
    match &t.episode {
        Some(e) => vec![
            ("get_episode", json!({"episode_id": e.episode_id})),
            ("find_similar_episodes", json!({"episode_id": e.episode_id, "limit": 3})),
        ],
        None => Vec::new(),
    }
}

/// At most this many consequences are named; the episode view lists them all.
const NAMED: usize = 6;

/// `PUMP-004 SUCTION-LO`, or `PUMP-002.VIB-NDE VIB-HI` when the point has a sensor
/// (an asset's two bearings may raise the same code).
fn point(p: &Value) -> String {
    let at = p["sensor_id"].as_str().or(p["asset_id"].as_str()).unwrap_or("?");
    format!("{at} {}", p["code"].as_str().unwrap_or("?"))
}

/// The points the initiator explains (downstream of it, or learned to follow it), once each.
fn consequences(best: &Value) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for p in best["downstream"].as_array().into_iter().chain(best["followed_by"].as_array()).flatten() {
        let named = point(p);
        if !out.contains(&named) {
            out.push(named);
        }
    }
    out
}

/// The episode's sentences: its shape, the initiator with its evidence (and a close
/// second), what follows from it.
fn episode_head(episode: &Value, ranking: &[Value], consequences: &[String]) -> String {
    let best = &ranking[0];
    let evidence =
        best["evidence"].as_array().map(|e| e.iter().filter_map(Value::as_str).collect::<Vec<_>>().join("; "));
    let mut head = format!(
        "Alarm episode {}: {} alarm points, {} activations since {}. Likely initiator: {} (alarm {}): {}.",
        episode["id"],
        episode["points"],
        episode["activations"],
        episode["opened"].as_str().unwrap_or("?"),
        point(&best["point"]),
        best["alarm_id"],
        evidence.unwrap_or_default()
    );
    // A close second is said: the operator then checks both.
    if let (Some(second), Some(s1)) = (ranking.get(1), best["score"].as_f64())
        && second["score"].as_f64().is_some_and(|s2| s2 >= 0.8 * s1)
    {
        head.push_str(&format!(" {} ranks nearly as high; check it too.", point(&second["point"])));
    }
    if consequences.is_empty() {
        head.push_str(" No other alarm of the episode is known to follow from it.");
    } else {
        let more = if consequences.len() > NAMED { ", and others the episode lists" } else { "" };
        head.push_str(&format!(
            " Following from it: {}{more}.",
            consequences[..consequences.len().min(NAMED)].join(", ")
        ));
    }
    head
}

/// The most similar past episode, when it is the same kind of upset, in a sentence.
fn resembles(like: Option<&Value>) -> String {
    let Some(s) = like else { return " No past episode resembles it.".to_string() };
    let mut said = format!(
        " It resembles episode {} of {} (similarity {}), started by {} (alarm {})",
        s["episode_id"],
        s["opened"].as_str().unwrap_or("?"),
        s["similarity"],
        point(&s["initiator"]),
        s["initiator"]["alarm_id"]
    );
    if let Some(note) = s["note_id"].as_i64() {
        said.push_str(&format!("; read its note (note {note}) for what was found then"));
    }
    said.push('.');
    said
}

/// Turns the initiator's note into the episode's: the episode first, then the
/// initiator's own triage, then the flood like it; the consequences folded under it.
pub(super) fn episode_note(mut note: TriageNote, episode: &Value, similar: &Value) -> TriageNote {
    let ranking = episode["ranking"].as_array().cloned().unwrap_or_default();
    let Some(best) = ranking.first() else { return note };
    let consequences = consequences(best);
    let initiator = point(&best["point"]);
    let like = similar["similar"].as_array().and_then(|s| s.first()).filter(|s| s["similarity"].as_f64() >= Some(0.6));
    note.summary = format!("{} {}{}", episode_head(episode, &ranking, &consequences), note.summary, resembles(like));
    if !consequences.is_empty() {
        note.recommended_actions.push(format!(
            "Deal with {initiator} first: {} follow from it and are expected to clear once it is restored; one that stays is a fault of its own.",
            consequences[..consequences.len().min(NAMED)].join(", ")
        ));
    }
    if let Some(orders) = like.and_then(|s| s["work_orders"].as_array()).filter(|w| !w.is_empty()) {
        let listed: Vec<String> = orders
            .iter()
            .take(3)
            .map(|w| {
                format!(
                    "work order {} ({}, {})",
                    w["id"],
                    w["action"].as_str().unwrap_or("?"),
                    w["status"].as_str().unwrap_or("?")
                )
            })
            .collect();
        note.recommended_actions
            .push(format!("Last time this was followed by {}: check whether the same applies.", listed.join(", ")));
    }
    note.evidence.insert(
        0,
        Evidence {
            claim: format!("{initiator} ranked first of the episode's initiator candidates"),
            source: "get_episode".into(),
        },
    );
    if let Some(s) = like {
        note.evidence.push(Evidence {
            claim: format!("episode {} is the most similar past episode", s["episode_id"]),
            source: "find_similar_episodes".into(),
        });
    }
    note
}
