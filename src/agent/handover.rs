//! The shift handover run, stored as a `handover` note ([`crate::handover`]).

use anyhow::Context;
use rusqlite::params;
use serde_json::json;

use super::{Agent, Outcome};
use crate::domain::Timestamp;
use crate::handover::Handover;
use crate::store::StoreError;

impl Agent {
    /// Runs the handover now and stores it; `trigger` as for [`Agent::handover`]. Returns
    /// the stored note.
    pub async fn write_handover(&self, trigger: &str) -> anyhow::Result<Handover> {
        let report = self.handover(trigger).await?;
        let text = report.answer.clone().context("the handover run produced no text")?;
        let mut flags = report.flags.clone();
        if report.outcome != Outcome::Final {
            flags.push(report.outcome.as_str().to_string());
        }
        let flags_text = serde_json::to_string(&flags).unwrap_or_default();
        let body = json!({"text": text, "outcome": report.outcome, "provider": report.provider}).to_string();
        let (run_id, now) = (report.run_id, Timestamp::now());
        let w = self.store().writer().clone();
        let note_id = w
            .call_async(move |c| {
                c.prepare_cached(
                    "INSERT INTO notes (kind, alarm_id, run_id, body, flags, created_at) VALUES ('handover', NULL, ?1, ?2, ?3, ?4)",
                )?
                .execute(params![run_id, body, flags_text, now.unix()])?;
                Ok::<_, StoreError>(c.last_insert_rowid())
            })
            .await?;
        Ok(Handover {
            note_id,
            run_id: Some(run_id),
            trigger: Some(trigger.to_string()),
            outcome: Some(report.outcome.as_str().to_string()),
            provider: report.provider,
            flags,
            text,
            created_at: now,
        })
    }
}
