//! Backfill is not news. A gateway that replays a day of buffered alarm events after an
//! outage delivers occurrences stamped hours ago, most already cleared: each is
//! journalled and counted in the alarm figures as it arrives, and the backfill as a
//! whole gets one summary note (every occurrence in it points to that note), written
//! from the journal without a model: what arrived late, over which span, what is still
//! active and needs looking at in the alarm list.

use rusqlite::{Connection, params};

use crate::agent::note::{Evidence, TriageNote, Urgency};
use crate::domain::{Timestamp, approx_duration};

/// Still-active occurrences named in the note, most severe first; the rest are counted.
const NAMED: usize = 10;

/// The summary note of the backfill made of `alarm_ids`, as the journal has them now.
pub fn summary(db: &Connection, alarm_ids: &[i64], received: Timestamp) -> rusqlite::Result<TriageNote> {
    let mut stmt = db.prepare_cached(&format!(
        "SELECT asset_id, code, severity, raised_at, cleared_at IS NULL, state
         FROM alarms WHERE id IN (SELECT value FROM json_each(?1)) ORDER BY {}, raised_at",
        crate::domain::Severity::sql_rank("severity")
    ))?;
    let ids = serde_json::to_string(alarm_ids).expect("ids serialize");
    let rows: Vec<(String, String, String, i64, bool, String)> = stmt
        .query_map(params![ids], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?, r.get(4)?, r.get(5)?)))?
        .collect::<rusqlite::Result<_>>()?;
    let n = rows.len();
    let first = rows.iter().map(|r| r.3).min().unwrap_or(received.unix());
    let last = rows.iter().map(|r| r.3).max().unwrap_or(received.unix());
    let active: Vec<&(String, String, String, i64, bool, String)> =
        rows.iter().filter(|r| r.4 && r.5 != "out_of_service").collect();
    let urgent = active.iter().any(|r| matches!(r.2.as_str(), "high" | "critical"));
    let at = |t: i64| Timestamp::from_unix(t).to_rfc3339();
    let mut summary = format!(
        "Backfill: {n} alarm occurrence(s) raised between {} and {} reached twinops at {}, up to {} late (a gateway or SCADA replaying its buffer after an outage). They are journalled and counted in the alarm figures; this one note covers them all.",
        at(first),
        at(last),
        received.to_rfc3339(),
        approx_duration(received.unix() - first)
    );
    summary.push_str(&match active.len() {
        0 => " All of them have cleared since.".to_string(),
        k => format!(" {} cleared since; {k} still active.", n - k),
    });
    let mut actions: Vec<String> = active
        .iter()
        .take(NAMED)
        .map(|(asset, code, severity, raised, ..)| {
            format!("Review {code} on {asset} ({severity}, raised {}, still active) in the alarm list", at(*raised))
        })
        .collect();
    if active.len() > NAMED {
        actions.push(format!(
            "Review the other {} still-active occurrences of the backfill in the alarm list",
            active.len() - NAMED
        ));
    }
    actions.push("Check the link between the gateway and its SCADA or PLCs for the outage that buffered them".into());
    Ok(TriageNote {
        summary,
        urgency: if urgent {
            Urgency::Urgent
        } else if active.is_empty() {
            Urgency::Monitor
        } else {
            Urgency::Soon
        },
        likely_causes: vec![
            "Alarm events buffered during a communications outage and delivered on reconnection".into(),
        ],
        recommended_actions: actions,
        proposed_work_order: None,
        evidence: vec![Evidence {
            claim: format!("{n} occurrences raised {} to {}, received {}", at(first), at(last), received.to_rfc3339()),
            source: "alarm journal".into(),
        }],
    })
}
