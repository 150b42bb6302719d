//! The triage note: the structured object a triage run must end with.

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
