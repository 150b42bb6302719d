//! A proposed work order, checked before it may reach `approvals`.

use super::{AssetId, Citation, WorkAction, WorkPriority};

pub const TITLE_CHARS: std::ops::RangeInclusive<usize> = 5..=120;
pub const JUSTIFICATION_CHARS: std::ops::RangeInclusive<usize> = 20..=2000;
pub const MAX_EVIDENCE: usize = 10;

/// What the agent (or a person) proposes. Valid by construction; no setters.
#[derive(Debug, Clone)]
pub struct WorkOrderDraft {
    asset_id: AssetId,
    alarm_id: Option<i64>,
    action: WorkAction,
    priority: WorkPriority,
    title: String,
    justification: String,
    evidence: Vec<Citation>,
}

impl WorkOrderDraft {
    pub fn new(
        asset_id: AssetId,
        alarm_id: Option<i64>,
        action: WorkAction,
        priority: WorkPriority,
        title: &str,
        justification: &str,
        evidence: Vec<Citation>,
    ) -> Result<Self, String> {
        let title = title.trim();
        let justification = justification.trim();
        let len = |s: &str| s.chars().count();
        if !TITLE_CHARS.contains(&len(title)) {
            return Err(format!(
                "title must be {} to {} characters, got {}",
                TITLE_CHARS.start(),
                TITLE_CHARS.end(),
                len(title)
            ));
        }
        if !JUSTIFICATION_CHARS.contains(&len(justification)) {
            return Err(format!(
                "justification must be {} to {} characters, got {}; say what was observed and why this action",
                JUSTIFICATION_CHARS.start(),
                JUSTIFICATION_CHARS.end(),
                len(justification)
            ));
        }
        if evidence.len() > MAX_EVIDENCE {
            return Err(format!("at most {MAX_EVIDENCE} evidence citations, got {}", evidence.len()));
        }
        if title.chars().chain(justification.chars()).any(|c| c.is_control() && c != '\n') {
            return Err("title and justification must be plain text without control characters".into());
        }
        Ok(WorkOrderDraft {
            asset_id,
            alarm_id,
            action,
            priority,
            title: title.to_string(),
            justification: justification.to_string(),
            evidence,
        })
    }

    /// Names the intent, not the attempt: the same alarm occurrence, asset and action
    /// always give the same key, however often the proposal is retried or reworded.
    /// Without an alarm, the intent is scoped to the day it was proposed on.
    pub fn intent_key(&self, day: &str) -> String {
        match self.alarm_id {
            Some(alarm) => format!("alarm:{alarm}/{}/{}", self.asset_id, self.action),
            None => format!("day:{day}/{}/{}", self.asset_id, self.action),
        }
    }

    pub fn asset_id(&self) -> &AssetId {
        &self.asset_id
    }
    pub fn alarm_id(&self) -> Option<i64> {
        self.alarm_id
    }
    pub fn action(&self) -> WorkAction {
        self.action
    }
    pub fn priority(&self) -> WorkPriority {
        self.priority
    }
    pub fn title(&self) -> &str {
        &self.title
    }
    pub fn justification(&self) -> &str {
        &self.justification
    }
    pub fn evidence(&self) -> &[Citation] {
        &self.evidence
    }
}
