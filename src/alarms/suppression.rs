//! Designed suppression (ISA-18.2, state-based): an approved alarm change of kind
//! `suppression` keeps one point's new occurrences from the operator while its leader
//! point has an occurrence active. Such an occurrence is recorded and journalled as
//! `suppressed`, not annunciated and not triaged; once no leader holds it, and it is
//! still active, it is annunciated (`unsuppressed`) and triaged as any new alarm.
//! Proposing, approving and lifting are `approvals::alarm_changes`'; this is the
//! lifecycle's side, inside the transaction that applies each event.

use rusqlite::{Connection, OptionalExtension, params};

use super::QueuePolicy;
use crate::domain::{AlarmEvent, Severity, Timestamp};

/// The approved suppression holding a new occurrence, and its leader's occurrence.
#[derive(Debug, Clone, PartialEq)]
pub struct Holding {
    pub change_id: i64,
    pub leader_alarm: i64,
    pub leader: String,
}

impl Holding {
    /// The journal's words for it.
    pub fn detail(&self) -> String {
        format!(
            "suppressed by design (alarm change {}) while {} is active (alarm {})",
            self.change_id, self.leader, self.leader_alarm
        )
    }
}

/// `?1..?3`: the follower point (asset, sensor, code). An approved suppression of it
/// whose leader has an occurrence not yet returned to normal.
const HOLDING: &str = "SELECT s.id, l.id, s.while_asset_id || ' ' || s.while_code
     FROM alarm_changes s INDEXED BY alarm_changes_suppressing
     JOIN alarms l ON l.asset_id = s.while_asset_id AND coalesce(l.sensor_id, '') = coalesce(s.while_sensor_id, '')
                  AND l.code = s.while_code AND l.cleared_at IS NULL
     WHERE s.kind = 'suppression' AND s.status = 'approved'
       AND s.asset_id = ?1 AND coalesce(s.sensor_id, '') = coalesce(?2, '') AND s.code = ?3
     ORDER BY s.id LIMIT 1";

/// Whether a new occurrence of `ev`'s point is suppressed by design, and by what.
pub fn holding(conn: &Connection, ev: &AlarmEvent) -> rusqlite::Result<Option<Holding>> {
    held(conn, ev.asset_id.as_str(), ev.sensor_id.as_ref().map(|s| s.as_str()), &ev.code)
}

fn held(conn: &Connection, asset: &str, sensor: Option<&str>, code: &str) -> rusqlite::Result<Option<Holding>> {
    conn.prepare_cached(HOLDING)?
        .query_row(params![asset, sensor, code], |r| {
            Ok(Holding { change_id: r.get(0)?, leader_alarm: r.get(1)?, leader: r.get(2)? })
        })
        .optional()
}

/// When a release happens, and why: journalled with each occurrence released.
pub struct Release<'a> {
    pub at: Timestamp,
    pub received: Timestamp,
    pub actor: &'a str,
    pub why: String,
    pub policy: QueuePolicy,
}

/// After `ev`'s point returned to normal: the suppressed occurrences it led that no
/// other leader holds now are annunciated, journalled and triaged; returns them.
pub fn release_led_by(conn: &Connection, ev: &AlarmEvent, how: &Release) -> rusqlite::Result<Vec<i64>> {
    let mut stmt = conn.prepare_cached(
        "SELECT f.id, f.asset_id, f.sensor_id, f.code, f.severity
         FROM alarm_changes s INDEXED BY alarm_changes_leading
         JOIN alarms f ON f.asset_id = s.asset_id AND coalesce(f.sensor_id, '') = coalesce(s.sensor_id, '')
                      AND f.code = s.code AND f.cleared_at IS NULL AND f.state = 'suppressed'
         WHERE s.kind = 'suppression' AND s.status = 'approved'
           AND s.while_asset_id = ?1 AND coalesce(s.while_sensor_id, '') = coalesce(?2, '') AND s.while_code = ?3",
    )?;
    let held = stmt
        .query_map(params![ev.asset_id.as_str(), ev.sensor_id.as_ref().map(|s| s.as_str()), ev.code], held_row)?
        .collect::<rusqlite::Result<_>>()?;
    release(conn, held, how)
}

/// After suppression `change_id` was lifted: the occurrences it held that no other
/// leader holds now are annunciated, journalled and triaged; returns them.
pub fn release_lifted(conn: &Connection, change_id: i64, how: &Release) -> rusqlite::Result<Vec<i64>> {
    let mut stmt = conn.prepare_cached(
        "SELECT f.id, f.asset_id, f.sensor_id, f.code, f.severity FROM alarm_changes s
         JOIN alarms f ON f.asset_id = s.asset_id AND coalesce(f.sensor_id, '') = coalesce(s.sensor_id, '')
                      AND f.code = s.code AND f.cleared_at IS NULL AND f.state = 'suppressed'
         WHERE s.id = ?1",
    )?;
    let held = stmt.query_map([change_id], held_row)?.collect::<rusqlite::Result<_>>()?;
    release(conn, held, how)
}

/// A suppressed occurrence: id, asset, sensor, code, severity.
type Held = (i64, String, Option<String>, String, Severity);

fn held_row(r: &rusqlite::Row) -> rusqlite::Result<Held> {
    Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?, r.get(4)?))
}

fn release(conn: &Connection, held: Vec<Held>, how: &Release) -> rusqlite::Result<Vec<i64>> {
    let mut out = Vec::new();
    for (alarm, asset, sensor, code, severity) in held {
        // Another leader of the point may still be active.
        if self::held(conn, &asset, sensor.as_deref(), &code)?.is_some() {
            continue;
        }
        conn.prepare_cached("UPDATE alarms SET state = 'unacknowledged' WHERE id = ?1 AND state = 'suppressed'")?
            .execute([alarm])?;
        super::journal(conn, alarm, None, "unsuppressed", how.at.unix(), how.actor, &how.why)?;
        super::enqueue_triage(conn, alarm, &asset, severity, how.at, how.received, how.policy)?;
        out.push(alarm);
    }
    Ok(out)
}
