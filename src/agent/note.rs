//! The triage note: the structured object a triage run must end with, and the flaws
//! a model's note can be set aside for (named here, below the checks that find them and
//! the audit trail that reports them).

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// How soon operators should act, in the note's words.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum Urgency {
    /// Act now (minutes).
    Immediate,
    /// This shift (hours).
    Urgent,
    /// Within days.
    Soon,
    /// Monitor; no action needed yet.
    Monitor,
}

/// One piece of evidence: a claim and where it comes from.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Evidence {
    /// What was observed, with figures from the tools.
    pub claim: String,
    /// A citation key such as arp-vibration.md#1, or a tool name such as get_sensor_history.
    pub source: String,
}

/// An AI-advisory triage note for operators.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct TriageNote {
    /// Two or three sentences: what is happening, on which asset, how bad.
    pub summary: String,
    pub urgency: Urgency,
    /// Most likely first.
    pub likely_causes: Vec<String>,
    /// What the operator should do, in order.
    pub recommended_actions: Vec<String>,
    /// The work_order_id returned by propose_work_order, if one was proposed.
    #[serde(default)]
    pub proposed_work_order: Option<i64>,
    pub evidence: Vec<Evidence>,
}

impl TriageNote {
    /// The JSON Schema a triage answer must follow.
    pub fn schema() -> serde_json::Value {
        let mut settings = schemars::generate::SchemaSettings::draft07();
        settings.inline_subschemas = true;
        settings.meta_schema = None;
        settings.into_generator().into_root_schema_for::<TriageNote>().to_value()
    }

    /// Parses a model's final text: the JSON object, alone or in a ```json fence.
    pub fn parse(text: &str) -> Result<TriageNote, String> {
        let trimmed = text.trim();
        let body = trimmed
            .strip_prefix("```json")
            .or_else(|| trimmed.strip_prefix("```"))
            .and_then(|s| s.trim_end().strip_suffix("```"))
            .unwrap_or(trimmed);
        let start = body.find('{').ok_or("the answer holds no JSON object")?;
        let end = body.rfind('}').ok_or("the answer's JSON object is not closed")?;
        let note: TriageNote = serde_json::from_str(&body[start..=end]).map_err(|e| e.to_string())?;
        if note.summary.trim().is_empty() {
            return Err("summary is empty".into());
        }
        if note.recommended_actions.is_empty() {
            return Err("recommended_actions is empty; give at least one operator action".into());
        }
        Ok(note)
    }
}

/// Every flaw a triage note can be set aside for, with what it means to an operator
/// (`runs show`, the HMI's note header, the metric's `flaw` label).
pub const FLAWS: &[(&str, &str)] = &[
    ("invalid_note", "the answer was not a valid triage note"),
    ("truncated", "the answer was cut off at the output limit"),
    ("ungrounded", "figures, dates, times or citations appear in no tool result"),
    ("no_observation", "no tool read the alarm's asset or sensor in this run"),
    ("unnamed_alarm", "the summary does not name the alarm's asset and code"),
    ("unsourced_evidence", "an evidence source is neither a tool that ran nor a document that exists"),
    ("placeholder", "causes or actions are placeholders, not sentences"),
    ("urgency_mismatch", "the urgency does not fit the alarm's priority and state, and the note does not say why"),
    ("wrong_state", "the note misstates the alarm's state"),
    ("claims_approval", "the note speaks of an approval only a supervisor can give"),
    ("claims_action", "the answer claims an action the agent cannot take"),
];

/// What a `set_aside:<flaw>` flag means, in words, or None for another flag.
pub fn set_aside_reason(flag: &str) -> Option<String> {
    let flaw = flag.strip_prefix("set_aside:")?;
    let meaning = FLAWS.iter().find(|(f, _)| *f == flaw).map(|(_, m)| m.to_string()).unwrap_or_else(|| {
        match flaw.strip_prefix("budget:") {
            Some(what) => format!("the run's {what} budget ran out before a valid note"),
            None => flaw.replace('_', " "),
        }
    });
    Some(format!("the model's note was set aside for the rules model's: {meaning}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_fenced_json_and_names_what_is_wrong() {
        let ok = r#"```json
{"summary":"s","urgency":"urgent","likely_causes":["c"],"recommended_actions":["a"],"evidence":[{"claim":"x","source":"get_asset_details"}]}
```"#;
        assert_eq!(TriageNote::parse(ok).unwrap().urgency, Urgency::Urgent);
        assert!(TriageNote::parse("no json").unwrap_err().contains("no JSON object"));
        let err = TriageNote::parse(
            r#"{"summary":"s","urgency":"later","likely_causes":[],"recommended_actions":["a"],"evidence":[]}"#,
        )
        .unwrap_err();
        assert!(err.contains("later"), "{err}");
        assert!(TriageNote::schema()["properties"]["urgency"].to_string().contains("immediate"));
    }
}
