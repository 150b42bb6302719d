//! The shift handover: an agent run (read-only profile) at each shift change, or on
//! demand (`Agent::write_handover`), stored as a `handover` note. The incoming shift reads it in the HMI's
//! Handover tab; the daemon's outbox publishes each one once on [`TOPIC`] and to the
//! webhook, whoever wrote it (the schedule, the HMI, or `twinops handover`).

use rusqlite::{Connection, params};
use serde::Serialize;
use serde_json::Value;

use crate::domain::Timestamp;
use crate::store::StoreError;

/// Where handovers are published (QoS 1), as JSON: a [`Handover`].
pub const TOPIC: &str = "twinops/handover";

/// A stored shift handover. Serialized with `"kind": "handover"` first, so that a
/// subscriber that also takes triage notes can tell them apart.
#[derive(Debug, Clone, Serialize)]
#[serde(tag = "kind", rename = "handover")]
pub struct Handover {
    pub note_id: i64,
    /// The agent run that wrote it (`twinops runs show RUN_ID`).
    pub run_id: Option<i64>,
    /// Who asked: `schedule:handover` (the shift change), `user:kaur`.
    pub trigger: Option<String>,
    pub outcome: Option<String>,
    pub provider: Option<String>,
    /// `ungrounded`, `partial`, ...: read the text with them in mind.
    pub flags: Vec<String>,
    pub text: String,
    pub created_at: Timestamp,
}

/// The columns [`from_row`] reads, from `notes n` joined to `agent_runs r`.
macro_rules! select_handovers {
    () => {
        "SELECT n.id, n.run_id, n.body, n.flags, n.created_at, r.trigger
         FROM notes n LEFT JOIN agent_runs r ON r.id = n.run_id "
    };
}

fn from_row(r: &rusqlite::Row<'_>) -> rusqlite::Result<Handover> {
    let body: Value = serde_json::from_str(&r.get::<_, String>(2)?).unwrap_or(Value::Null);
    let text = |key: &str| body[key].as_str().map(str::to_string);
    Ok(Handover {
        note_id: r.get(0)?,
        run_id: r.get(1)?,
        trigger: r.get(5)?,
        outcome: text("outcome"),
        provider: text("provider"),
        flags: serde_json::from_str(&r.get::<_, String>(3)?).unwrap_or_default(),
        text: text("text").unwrap_or_default(),
        created_at: Timestamp::from_unix(r.get(4)?),
    })
}

/// Seconds between handovers asked for on demand: a second request within this long
/// gets the one just written, not another model run.
pub const MIN_INTERVAL_S: i64 = 60;

/// The latest `limit` handovers, newest first.
pub fn recent(conn: &Connection, limit: u32) -> Result<Vec<Handover>, StoreError> {
    let mut stmt =
        conn.prepare_cached(concat!(select_handovers!(), "WHERE n.kind = 'handover' ORDER BY n.id DESC LIMIT ?1"))?;
    let rows = stmt.query_map([limit], from_row)?;
    Ok(rows.collect::<Result<_, _>>()?)
}

/// Handovers not yet published, oldest first (at most 20 a pass).
pub fn unpublished(conn: &Connection) -> Result<Vec<Handover>, StoreError> {
    let mut stmt = conn.prepare_cached(concat!(
        select_handovers!(),
        "WHERE n.kind = 'handover' AND n.published_at IS NULL ORDER BY n.id LIMIT 20"
    ))?;
    let rows = stmt.query_map([], from_row)?;
    Ok(rows.collect::<Result<_, _>>()?)
}

/// Records that handover `note_id` went out.
pub fn mark_published(conn: &Connection, note_id: i64, at: Timestamp) -> Result<(), StoreError> {
    conn.prepare_cached("UPDATE notes SET published_at = ?2 WHERE id = ?1 AND kind = 'handover'")?
        .execute(params![note_id, at.unix()])?;
    Ok(())
}
