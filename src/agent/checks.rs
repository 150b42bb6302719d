//! The output checks: what a final answer must be before anyone reads it. Each failure
//! is a named [`Flaw`] with a message for the model (its repair turn) and one for the
//! operator (the warning on an answer kept anyway).
//!
//! A triage note must stand on what this run observed: a tool read of the alarm's asset
//! or sensor, a summary that names the alarm, evidence whose every source ran or
//! resolves, figures, dates and times found in the observations, sentences rather than
//! placeholders, and an urgency that fits the alarm's priority and state unless the note
//! says why not. A schema-valid note with no tool behind it ("summary": "1", causes "A",
//! "B") was once published as final by a real small model; these checks are why that
//! cannot happen again.

use rusqlite::OptionalExtension;

use super::guard::{
    StateClaim, citations, claims_approval, claims_own_action, is_placeholder, state_claim, ungrounded_numbers,
    ungrounded_times,
};
use super::model::{Message, TaskFacts, ToolCall};
use super::note::{TriageNote, Urgency};
use crate::domain::Severity;
use crate::store::Store;

/// What an operator reads in place of an answer that claims an action the agent cannot
/// take, after its repair turn failed.
pub(super) const WITHHELD: &str = "The model's answer said it had approved, dispatched or operated something, which it cannot do, so the answer is withheld. Only a supervisor approves work orders (Approvals tab); ask again, or check the plant directly.";

/// What is wrong with a final answer: its flag, the repair message for the model, and
/// the warning an operator reads before the answer when it is kept anyway.
pub(super) struct Flaw {
    pub flag: &'static str,
    pub for_model: String,
    pub for_operator: String,
    /// The repair needs tools (the model must read the twin first), so the repair turn
    /// offers them instead of holding the model to the note's schema.
    pub needs_tools: bool,
}

impl Flaw {
    fn new(flag: &'static str, for_model: String, for_operator: String) -> Flaw {
        Flaw { flag, for_model, for_operator, needs_tools: false }
    }

    pub fn cut(max_output_tokens: u32) -> Flaw {
        Flaw::new(
            "truncated",
            format!("Your answer was cut off at the output limit of {max_output_tokens} tokens."),
            format!("This answer was cut off at the output limit ({max_output_tokens} tokens) and is incomplete."),
        )
    }
}

/// A final answer under review: what the run's task asks (its profile's contract, its
/// first turn and facts) and its conversation so far. The task's parts, not the task
/// itself, so that the checks sit below the loop that runs them.
pub(super) struct Review<'a> {
    pub store: &'a Store,
    /// The answer must be a triage note (the triage profile).
    pub structured_note: bool,
    /// The shift handover, which states no alarm of its own.
    pub handover: bool,
    pub user_message: &'a str,
    pub facts: &'a TaskFacts,
    pub messages: &'a [Message],
}

impl Review<'_> {
    /// The output contract: a triage answer parses as a note and stands on this run's
    /// observations; every number, date and time is observed; every citation resolves.
    pub fn flaws(&self, text: &str) -> Vec<Flaw> {
        let mut flaws = Vec::new();
        if self.structured_note {
            match TriageNote::parse(text) {
                Err(e) => {
                    return vec![Flaw::new(
                        "invalid_note",
                        format!(
                            "Your answer is not a valid triage note ({e}). Reply with only the JSON object: summary, urgency (immediate, urgent, soon or monitor), likely_causes, recommended_actions, proposed_work_order, evidence."
                        ),
                        "This is not a valid triage note.".into(),
                    )];
                }
                Ok(note) => flaws.extend(self.note_flaws(&note)),
            }
        }
        let arguments: Vec<String> = self.calls().map(ToolCall::arguments_text).collect();
        let observed = self.observed(&arguments);
        flaws.extend(self.false_claims(text));
        // What was not observed, each kind with what the model should do instead and
        // the warning an operator reads; the messages keep their wording.
        let unobserved = [
            (
                ungrounded_numbers(text, &observed),
                "These numbers in your answer appear in no tool result",
                "Every figure must come from a tool result; call a tool for it or leave it out.",
                "Unverified: these figures appear in no tool result",
                " Check them before acting.",
            ),
            (
                ungrounded_times(text, &observed),
                "These dates or times in your answer appear in no tool result",
                "Quote times as the tools give them (RFC 3339 UTC, e.g. raised_at), or leave them out.",
                "Unverified: these dates or times appear in no tool result",
                "",
            ),
            (
                self.unobserved_ids(text, &observed),
                "These asset, sensor or alarm ids appear in no tool result",
                "Speak only of alarms and assets the tools showed you.",
                "Unverified: these ids appear in no tool result",
                "",
            ),
            (
                self.unresolved_citations(text),
                "These citations do not exist",
                "Cite only keys that search_docs or read_doc returned.",
                "These citations do not exist",
                "",
            ),
        ];
        for (found, said, next, warned, then) in unobserved {
            if !found.is_empty() {
                let list = found.join(", ");
                flaws.push(Flaw::new(
                    "ungrounded",
                    format!("{said}: {list}. {next}"),
                    format!("{warned}: {list}.{then}"),
                ));
            }
        }
        flaws
    }

    /// In a shift handover, the ids it names (PUMP-007, VIB-HI) that no observation
    /// holds: a handover's claims about alarms must be the tools', as a note's are.
    fn unobserved_ids(&self, text: &str, observed: &[&str]) -> Vec<String> {
        if !self.handover {
            return Vec::new();
        }
        let mut out: Vec<String> = Vec::new();
        for word in text.split(|c: char| !(c.is_ascii_alphanumeric() || matches!(c, '-' | '.' | '_'))) {
            let id = word.trim_matches(['.', '-', '_']);
            let looks_like_id = id.len() >= 3
                && id.chars().any(|c| c.is_ascii_uppercase())
                && id.chars().any(|c| c.is_ascii_digit() || c == '-')
                && id.chars().all(|c| c.is_ascii_uppercase() || c.is_ascii_digit() || matches!(c, '-' | '.' | '_'));
            if looks_like_id && !observed.iter().any(|o| o.contains(id)) && !out.iter().any(|o| o == id) {
                out.push(id.to_string());
            }
        }
        out
    }

    /// The model's own tool calls in this run.
    fn calls(&self) -> impl Iterator<Item = &ToolCall> {
        self.messages.iter().flat_map(|m| match m {
            Message::Assistant { tool_calls, .. } => tool_calls.as_slice(),
            _ => &[],
        })
    }

    /// What the model was shown or chose itself: tool results, the task, and the
    /// arguments of its own tool calls (it may say "over the last 48 hours"). Not the
    /// harness's own repair turns: they quote the very numbers in question.
    fn observed<'s>(&'s self, arguments: &'s [String]) -> Vec<&'s str> {
        self.messages
            .iter()
            .filter_map(|m| match m {
                Message::Tool { content, .. } => Some(content.as_str()),
                _ => None,
            })
            .chain(std::iter::once(self.user_message))
            .chain(arguments.iter().map(String::as_str))
            .collect()
    }

    /// The tools that answered without error in this run, each with its arguments.
    fn answered(&self) -> Vec<(&str, String)> {
        self.messages
            .iter()
            .filter_map(|m| match m {
                Message::Tool { call_id, name, is_error: false, .. } => {
                    let args = self.calls().find(|c| &c.id == call_id).map(ToolCall::arguments_text);
                    Some((name.as_str(), args.unwrap_or_default()))
                }
                _ => None,
            })
            .collect()
    }

    /// What a triage note must have beyond its schema.
    fn note_flaws(&self, note: &TriageNote) -> Vec<Flaw> {
        let facts = &self.facts;
        let asset = facts.asset_id.as_deref().unwrap_or_default();
        let sensor = facts.sensor_id.as_deref();
        let code = facts.code.as_deref().unwrap_or_default();
        let answered = self.answered();
        let mut flaws = Vec::new();
        let names_alarm_point = |args: &str| {
            let args = args.to_lowercase();
            (!asset.is_empty() && args.contains(&asset.to_lowercase()))
                || sensor.is_some_and(|s| args.contains(&s.to_lowercase()))
        };
        let is_read = |name: &str| crate::tools::find(name).is_some_and(|t| t.access == crate::domain::Access::Read);
        if !answered.iter().any(|(name, args)| is_read(name) && names_alarm_point(args)) {
            let sensor_hint = sensor.map(|s| format!(" and get_sensor_history with sensor_id {s}")).unwrap_or_default();
            flaws.push(Flaw {
                needs_tools: true,
                ..Flaw::new(
                    "no_observation",
                    format!(
                        "You wrote the note without reading the twin in this run. Call get_asset_details with asset_id {asset}{sensor_hint} now, then write the note from their results only."
                    ),
                    "No tool read the alarm's asset or sensor in this run, so nothing in this note was observed.".into(),
                )
            });
        }
        if !self.names_alarm(&note.summary) {
            let what = if code.is_empty() { sensor.unwrap_or("its sensor").to_string() } else { code.to_string() };
            flaws.push(Flaw::new(
                "unnamed_alarm",
                format!("Your summary must name the alarm as the operator's list does: the asset {asset} and {what}."),
                format!("The summary does not name the alarm ({asset}, {what})."),
            ));
        }
        let bad_sources: Vec<&str> =
            note.evidence.iter().map(|e| e.source.as_str()).filter(|s| !self.source_resolves(s, &answered)).collect();
        if !bad_sources.is_empty() {
            let ran: Vec<&str> = answered.iter().map(|(n, _)| *n).collect();
            flaws.push(Flaw::new(
                "unsourced_evidence",
                format!(
                    "These evidence sources are neither a tool that ran in this run nor a citation that exists: {}. A source is a tool name you called ({}) or a citation key search_docs returned.",
                    bad_sources.join(", "),
                    if ran.is_empty() { "none yet".to_string() } else { ran.join(", ") }
                ),
                format!("Evidence cites sources that do not exist: {}.", bad_sources.join(", ")),
            ));
        }
        let placeholders: Vec<&str> = note
            .likely_causes
            .iter()
            .chain(&note.recommended_actions)
            .map(String::as_str)
            .filter(|i| is_placeholder(i, 2))
            .collect();
        if !placeholders.is_empty() {
            let quoted: Vec<String> = placeholders.iter().map(|p| format!("{p:?}")).collect();
            flaws.push(Flaw::new(
                "placeholder",
                format!(
                    "These are placeholders, not sentences: {}. Write each cause and action as a sentence an operator can act on, from the tool results and the documented alarm response.",
                    quoted.join(", ")
                ),
                format!("Placeholders in place of causes or actions: {}.", quoted.join(", ")),
            ));
        }
        flaws.extend(self.urgency_flaw(note));
        flaws
    }

    /// Whether a summary names the alarm's asset, and its code or sensor.
    fn names_alarm(&self, summary: &str) -> bool {
        let facts = &self.facts;
        let s = summary.to_lowercase();
        let has = |x: &str| !x.is_empty() && s.contains(&x.to_lowercase());
        let asset = facts.asset_id.as_deref().is_none_or(has);
        let tag = facts.sensor_id.as_deref().map(|id| id.rsplit('.').next().unwrap_or(id));
        let point = (facts.code.is_none() && facts.sensor_id.is_none())
            || facts.code.as_deref().is_some_and(has)
            || facts.sensor_id.as_deref().is_some_and(has)
            || tag.is_some_and(has);
        asset && point
    }

    /// Whether an evidence source names a tool that answered in this run, or cites
    /// only documents that exist.
    fn source_resolves(&self, source: &str, answered: &[(&str, String)]) -> bool {
        let words: Vec<&str> = source.split(|c: char| !(c.is_alphanumeric() || c == '_')).collect();
        if answered.iter().any(|(name, _)| words.contains(name)) {
            return true;
        }
        let cited = citations(source);
        !cited.is_empty() && self.unresolved_citations(source).is_empty()
    }

    /// The urgency a note gives must fit the alarm as stored: an active high or
    /// critical alarm is not "soon" or "monitor", an active medium one not "monitor", a
    /// low one not "immediate", a cleared one not "immediate", unless the note says why.
    fn urgency_flaw(&self, note: &TriageNote) -> Option<Flaw> {
        let alarm = self.facts.alarm_id?;
        let db = self.store.read().ok()?;
        let (severity, active): (String, bool) = db
            .query_row("SELECT severity, cleared_at IS NULL FROM alarms WHERE id = ?1", [alarm], |r| {
                Ok((r.get(0)?, r.get(1)?))
            })
            .optional()
            .ok()??;
        let severity = Severity::parse(&severity).ok()?;
        let allowed: &[Urgency] = match (active, severity) {
            (false, _) => &[Urgency::Urgent, Urgency::Soon, Urgency::Monitor],
            (true, Severity::Critical | Severity::High) => &[Urgency::Immediate, Urgency::Urgent],
            (true, Severity::Medium) => &[Urgency::Immediate, Urgency::Urgent, Urgency::Soon],
            (true, Severity::Low) => &[Urgency::Urgent, Urgency::Soon, Urgency::Monitor],
        };
        if allowed.contains(&note.urgency) || says_why(note) {
            return None;
        }
        let state = if active { "active" } else { "cleared" };
        let urgency = serde_json::to_value(note.urgency).ok()?.as_str()?.to_string();
        let fits: Vec<String> =
            allowed.iter().filter_map(|u| serde_json::to_value(u).ok()?.as_str().map(str::to_string)).collect();
        Some(Flaw::new(
            "urgency_mismatch",
            format!(
                "Urgency {urgency} does not fit alarm {alarm} ({state}, priority {}): use {}, or say in the summary why this alarm needs otherwise (\"because ...\").",
                severity.as_str(),
                fits.join(" or ")
            ),
            format!("Urgency {urgency} does not fit this {state} {} alarm.", severity.as_str()),
        ))
    }

    /// What a triage note must not say: an alarm state the twin contradicts, or an
    /// approval. The numbers check cannot see these, and operators act on them.
    fn false_claims(&self, text: &str) -> Vec<Flaw> {
        let mut flaws = Vec::new();
        if claims_own_action(text) {
            flaws.push(Flaw::new(
                "claims_action",
                "You are read-only: you cannot approve, dispatch, acknowledge, shelve or operate anything, and must not say you did. Say what a person must do instead (a supervisor approves work orders in the HMI).".into(),
                WITHHELD.into(),
            ));
        }
        let (true, Some(alarm)) = (self.structured_note, self.facts.alarm_id) else {
            return flaws;
        };
        let active: Option<bool> = self.store.read().ok().and_then(|db| {
            db.query_row("SELECT cleared_at IS NULL FROM alarms WHERE id = ?1", [alarm], |r| r.get(0))
                .optional()
                .ok()
                .flatten()
        });
        let wrong = match (state_claim(text), active) {
            (Some(StateClaim::NotActive), Some(true)) => Some("active"),
            (Some(StateClaim::Active), Some(false)) => Some("no longer active (cleared)"),
            _ => None,
        };
        if let Some(state) = wrong {
            flaws.push(Flaw::new(
                "wrong_state",
                format!("Your note misstates the alarm's state: alarm {alarm} is {state}. State it as the tools show it, or leave it out."),
                format!("This note misstates the alarm's state: alarm {alarm} is {state}."),
            ));
        }
        if claims_approval(text) {
            flaws.push(Flaw::new(
                "claims_approval",
                "A triage note cannot report an approval: only a supervisor approves a work order, in the HMI, after your note. Leave approval out.".into(),
                "This note speaks of an approval, which only a supervisor can give.".into(),
            ));
        }
        flaws
    }

    /// Citation keys in `text` that name no stored chunk.
    fn unresolved_citations(&self, text: &str) -> Vec<String> {
        let Ok(db) = self.store.read() else { return citations(text) };
        citations(text)
            .into_iter()
            .filter(|c| {
                let Ok(c) = crate::domain::Citation::parse(c) else { return true };
                db.query_row(
                    "SELECT 1 FROM chunks ch JOIN documents d ON d.id = ch.document_id WHERE d.path = ?1 AND ch.seq = ?2",
                    rusqlite::params![c.path(), c.seq()],
                    |_| Ok(()),
                )
                .optional()
                .ok()
                .flatten()
                .is_none()
            })
            .collect()
    }
}

/// Whether a note explains an urgency that differs from what the alarm's priority and
/// state suggest: a reason in its summary, or the documented time to respond it quotes.
fn says_why(note: &TriageNote) -> bool {
    const REASONS: [&str; 7] =
        ["because", "despite", "although", "even though", "however", "urgency", "time to respond"];
    let text = format!("{} {}", note.summary, note.recommended_actions.join(" ")).to_lowercase();
    REASONS.iter().any(|r| text.contains(r))
}
