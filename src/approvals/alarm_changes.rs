//! Alarm changes proposed and decided as work orders are, parked as `pending_approval`
//! until a supervisor decides: a new set point, deadband, on- or off-delay for one
//! alarm point, with the replay of the point's last 30 days as its evidence; or a
//! designed suppression of one point while another is active, with the learned pair
//! and the 90 days of occurrences it would have held as its evidence, in force until a
//! supervisor lifts it (`alarms::suppression` enforces it).
//!
//! An approved change to a point twinops evaluates from readings (`alarm_source =
//! limits`) is applied to the sensor and to the point's entry in the master alarm
//! database, in one transaction with its history and an audit entry: a management of
//! change. For a SCADA point it is a record for the SCADA engineer, who makes the change
//! in the SCADA; the twin is left as it is, and the next rationalization sheet import
//! brings the new settings in.

use rusqlite::{Connection, OptionalExtension, params};
use serde::{Deserialize, Serialize};

use super::{DEFAULT_TTL_SECS, DecisionError, Proposer};
use crate::alarms::QueuePolicy;
use crate::alarms::definitions::Point;
use crate::alarms::replay::{Comparison, Settings, Target};
use crate::alarms::suppression;
use crate::domain::{AlarmChangeStatus, Timestamp};
use crate::store::{StoreError, Writer};

/// Days of readings the evidence replays.
pub const EVIDENCE_DAYS: i64 = 30;

/// What proposing did.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ChangeProposal {
    pub alarm_change_id: i64,
    pub status: AlarmChangeStatus,
    /// False when a change of this point already awaited a decision; nothing new was written.
    pub created: bool,
    /// `twin` (applied to the sensor when approved) or `scada` (a record for the SCADA engineer).
    pub applies: String,
}

/// A proposed change as it is parked: on one node, or on both of a pair (`pair.rs`).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Parked {
    pub change: Change,
    pub reason: String,
    pub evidence: serde_json::Value,
    pub proposed_by: String,
    /// The proposing agent run, on the node it ran on only.
    pub run_id: Option<i64>,
    pub proposed_at: i64,
}

/// A change of one point's settings at one level (`hh`, `h`, `l`, `ll`).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct SettingsChange {
    pub sensor_id: String,
    pub asset_id: String,
    pub code: String,
    pub level: String,
    pub current: Settings,
    pub proposed: Settings,
}

/// What a proposed change would change.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Change {
    /// One point's settings at one level.
    Settings(SettingsChange),
    /// `follower` suppressed while `leader` is active.
    Suppression { leader: Point, follower: Point },
}

impl Parked {
    fn new(change: Change, reason: &str, evidence: serde_json::Value, by: &Proposer, now: Timestamp) -> Parked {
        let (reason, proposed_by, run_id) = (reason.trim().to_string(), by.label(), by.run_id());
        Parked { change, reason, evidence, proposed_by, run_id, proposed_at: now.unix() }
    }

    /// A change of `target`'s settings to `proposed`, with the replay as evidence.
    pub fn settings(
        target: &Target,
        proposed: Settings,
        reason: &str,
        evidence: &Comparison,
        by: &Proposer,
        now: Timestamp,
    ) -> Parked {
        let change = Change::Settings(SettingsChange {
            sensor_id: target.sensor_id.clone(),
            asset_id: target.asset_id.clone(),
            code: target.code.clone(),
            level: target.level.key().to_string(),
            current: target.current,
            proposed,
        });
        let evidence = serde_json::to_value(evidence).expect("comparisons serialize");
        Parked::new(change, reason, evidence, by, now)
    }

    /// A designed suppression of `follower` while `leader` is active.
    pub fn suppression(
        (leader, follower): (&Point, &Point),
        reason: &str,
        evidence: &impl Serialize,
        by: &Proposer,
        now: Timestamp,
    ) -> Parked {
        let change = Change::Suppression { leader: leader.clone(), follower: follower.clone() };
        let evidence = serde_json::to_value(evidence).expect("evidence serializes");
        Parked::new(change, reason, evidence, by, now)
    }
}

/// Records `p` as `pending_approval` under `uid` (of a pair: the proposing decision's
/// id, the same on both nodes), or returns the change with the same intent already
/// awaiting a decision: a settings change of the same point and level, or a
/// suppression of the same pair pending or in force. A suppression is enforced by
/// twinops's own lifecycle (`applies` is `twin`); a SCADA's own alarm display is not
/// changed by it.
pub fn park(c: &Connection, p: &Parked, uid: Option<&str>) -> Result<ChangeProposal, StoreError> {
    let parked = match &p.change {
        Change::Settings(s) => park_settings(c, p, s, uid)?,
        Change::Suppression { leader, follower } => park_suppression(c, p, (leader, follower), uid)?,
    };
    // Made alone: named from what a copy of this twin keeps alike (its id and time), so
    // that it can be decided through a pair's log once this node (and a copy of it) is
    // one; migration 40 named those made before.
    if parked.created && uid.is_none() {
        c.prepare_cached("UPDATE alarm_changes SET uid = 'local-' || id || '-' || proposed_at WHERE id = ?1")?
            .execute([parked.alarm_change_id])?;
    }
    Ok(parked)
}

fn park_settings(
    c: &Connection,
    p: &Parked,
    s: &SettingsChange,
    uid: Option<&str>,
) -> Result<ChangeProposal, StoreError> {
    let SettingsChange { sensor_id, asset_id, code, level, current, proposed } = s;
    let json = |v: serde_json::Result<String>| v.expect("settings serialize");
    let expires_at = p.proposed_at + DEFAULT_TTL_SECS;
    let applies = applies(c, sensor_id)?;
    let inserted = c
        .prepare_cached(
            "INSERT INTO alarm_changes (sensor_id, asset_id, code, level, current, proposed, reason, evidence, applies,
                         status, proposed_by, run_id, proposed_at, expires_at, uid)
                     VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, 'pending_approval', ?10, ?11, ?12, ?13, ?14)
                     ON CONFLICT (sensor_id, level) WHERE status = 'pending_approval' DO NOTHING",
        )?
        .execute(params![
            sensor_id,
            asset_id,
            code,
            level,
            json(serde_json::to_string(current)),
            json(serde_json::to_string(proposed)),
            p.reason,
            p.evidence.to_string(),
            applies,
            p.proposed_by,
            p.run_id,
            p.proposed_at,
            expires_at,
            uid
        ])?;
    let id: i64 = c
        .prepare_cached(
            "SELECT id FROM alarm_changes WHERE sensor_id = ?1 AND level = ?2 AND status = 'pending_approval'",
        )?
        .query_row(params![sensor_id, level], |r| r.get(0))?;
    let (status, created, applies) = (AlarmChangeStatus::PendingApproval, inserted == 1, applies.to_string());
    Ok(ChangeProposal { alarm_change_id: id, status, created, applies })
}

fn park_suppression(
    c: &Connection,
    p: &Parked,
    (leader, follower): (&Point, &Point),
    uid: Option<&str>,
) -> Result<ChangeProposal, StoreError> {
    let expires_at = p.proposed_at + DEFAULT_TTL_SECS;
    let existing: Option<(i64, AlarmChangeStatus)> = c
                .prepare_cached(
                    "SELECT id, status FROM alarm_changes WHERE kind = 'suppression' AND status IN ('pending_approval', 'approved')
                       AND asset_id = ?1 AND coalesce(sensor_id, '') = coalesce(?2, '') AND code = ?3
                       AND while_asset_id = ?4 AND coalesce(while_sensor_id, '') = coalesce(?5, '') AND while_code = ?6",
                )?
                .query_row(
                    params![
                        follower.asset_id,
                        follower.sensor_id,
                        follower.code,
                        leader.asset_id,
                        leader.sensor_id,
                        leader.code
                    ],
                    |r| Ok((r.get(0)?, r.get(1)?)),
                )
                .optional()?;
    if let Some((id, status)) = existing {
        return Ok(ChangeProposal { alarm_change_id: id, status, created: false, applies: "twin".into() });
    }
    let proposed = serde_json::json!({"suppress_while_active": leader}).to_string();
    c.prepare_cached(
                "INSERT INTO alarm_changes (kind, sensor_id, asset_id, code, while_asset_id, while_sensor_id, while_code,
                     current, proposed, reason, evidence, applies, status, proposed_by, run_id, proposed_at, expires_at, uid)
                 VALUES ('suppression', ?1, ?2, ?3, ?4, ?5, ?6, '{}', ?7, ?8, ?9, 'twin', 'pending_approval', ?10, ?11, ?12, ?13, ?14)",
            )?
            .execute(params![
                follower.sensor_id,
                follower.asset_id,
                follower.code,
                leader.asset_id,
                leader.sensor_id,
                leader.code,
                proposed,
                p.reason,
                p.evidence.to_string(),
                p.proposed_by,
                p.run_id,
                p.proposed_at,
                expires_at,
                uid
            ])?;
    let (id, status) = (c.last_insert_rowid(), AlarmChangeStatus::PendingApproval);
    Ok(ChangeProposal { alarm_change_id: id, status, created: true, applies: "twin".into() })
}

/// `twin` when twinops raises the sensor's alarms from its readings, else `scada`.
fn applies(c: &Connection, sensor: &str) -> rusqlite::Result<&'static str> {
    let source: String = c.query_row("SELECT alarm_source FROM sensors WHERE id = ?1", [sensor], |r| r.get(0))?;
    Ok(if source == "limits" { "twin" } else { "scada" })
}

/// A supervisor approves or rejects a pending change (the caller has checked the role).
/// Approving a `twin` change applies it to the sensor and the master alarm database;
/// approving a suppression puts it in force for the occurrences raised from then on.
pub fn decide(
    writer: &Writer,
    id: i64,
    supervisor: &str,
    approve: bool,
    reason: &str,
    now: Timestamp,
) -> Result<AlarmChangeStatus, DecisionError> {
    let (supervisor, reason) = (supervisor.to_string(), reason.to_string());
    writer.call(move |c| decide_in(c, id, &supervisor, approve, &reason, now))
}

/// [`decide`] on the write connection.
pub fn decide_in(
    c: &Connection,
    id: i64,
    supervisor: &str,
    approve: bool,
    reason: &str,
    now: Timestamp,
) -> Result<AlarmChangeStatus, DecisionError> {
    let reason = super::decision_reason(reason)?;
    let ChangeRow { status, kind, sensor, asset, code, level, proposed, applies, leader } = row(c, id)?;
    if status != AlarmChangeStatus::PendingApproval {
        return Err(DecisionError::NotPending { what: "alarm change", id, status: status.to_string() });
    }
    let next = if approve { AlarmChangeStatus::Approved } else { AlarmChangeStatus::Rejected };
    let what = if kind == "suppression" {
        format!("suppression {id} of {asset} {code} while {leader} is active")
    } else {
        let sensor = sensor.as_deref().unwrap_or_default();
        let scada = if applies == "twin" || !approve { "" } else { " (for the SCADA engineer to make in the SCADA)" };
        format!("alarm change {id} of {sensor} {code}{scada}")
    };
    if approve && applies == "twin" && kind == "settings" {
        let (sensor, level) = (sensor.unwrap_or_default(), level.unwrap_or_default());
        let s: Settings = serde_json::from_str(&proposed)
            .map_err(|e| DecisionError::Conflict(format!("the proposal's settings are unreadable: {e}")))?;
        apply(c, &sensor, &asset, &code, &level, s, supervisor, &reason, now)?;
    }
    c.prepare_cached(
        "UPDATE alarm_changes SET status = ?2, decided_by = ?3, decided_at = ?4, decision_reason = ?5 WHERE id = ?1",
    )?
    .execute(params![id, next, supervisor, now.unix(), reason])?;
    super::audit(c, now, supervisor, &format!("alarm_change_{next}"), &format!("{what}: {reason}"))?;
    Ok(next)
}

/// An alarm change as deciding and lifting read it.
struct ChangeRow {
    status: AlarmChangeStatus,
    kind: String,
    sensor: Option<String>,
    asset: String,
    code: String,
    level: Option<String>,
    proposed: String,
    applies: String,
    /// A suppression's leader, as `ASSET CODE`.
    leader: String,
}

fn row(c: &Connection, id: i64) -> Result<ChangeRow, DecisionError> {
    c.prepare_cached(
        "SELECT status, kind, sensor_id, asset_id, code, level, proposed, applies,
                coalesce(while_asset_id || ' ' || while_code, '') FROM alarm_changes WHERE id = ?1",
    )?
    .query_row([id], |r| {
        Ok(ChangeRow {
            status: r.get(0)?,
            kind: r.get(1)?,
            sensor: r.get(2)?,
            asset: r.get(3)?,
            code: r.get(4)?,
            level: r.get(5)?,
            proposed: r.get(6)?,
            applies: r.get(7)?,
            leader: r.get(8)?,
        })
    })
    .optional()?
    .ok_or(DecisionError::NotFound { what: "alarm change", id, list: "GET /api/alarm-changes" })
}

/// A supervisor lifts a designed suppression in force (the caller has checked the
/// role): from now on its point's occurrences are annunciated, and those it holds now
/// that are still active are annunciated and triaged at once. Audited.
pub fn lift(
    writer: &Writer,
    id: i64,
    supervisor: &str,
    reason: &str,
    now: Timestamp,
    policy: QueuePolicy,
) -> Result<Vec<i64>, DecisionError> {
    let (supervisor, reason) = (supervisor.to_string(), reason.to_string());
    writer.call(move |c| lift_in(c, id, &supervisor, &reason, now, policy))
}

/// [`lift`] on the write connection.
pub fn lift_in(
    c: &Connection,
    id: i64,
    supervisor: &str,
    reason: &str,
    now: Timestamp,
    policy: QueuePolicy,
) -> Result<Vec<i64>, DecisionError> {
    let reason = super::decision_reason(reason)?;
    let ChangeRow { status, kind, asset, code, leader, .. } = row(c, id)?;
    if kind != "suppression" || status != AlarmChangeStatus::Approved {
        return Err(DecisionError::Conflict(format!(
            "alarm change {id} is a {kind} change, {status}: only a suppression in force (approved) can be lifted"
        )));
    }
    c.prepare_cached(
        "UPDATE alarm_changes SET status = 'lifted', lifted_by = ?2, lifted_at = ?3, lift_reason = ?4 WHERE id = ?1",
    )?
    .execute(params![id, supervisor, now.unix(), reason])?;
    let why = format!("suppression {id} lifted by {supervisor}: {reason}");
    let how = suppression::Release { at: now, received: now, actor: supervisor, why, policy };
    let released = suppression::release_lifted(c, id, &how)?;
    c.prepare_cached("INSERT INTO audit_log (at, actor, action, detail) VALUES (?1, ?2, ?3, ?4)")?.execute(
            params![
                now.unix(),
                supervisor,
                "alarm_change_lifted",
                format!(
                    "suppression {id} of {asset} {code} while {leader} is active, lifted ({} occurrence(s) annunciated): {reason}",
                    released.len()
                )
            ],
        )?;
    Ok(released)
}

/// Writes an approved change to the sensor (its set point at `level`, its deadband and
/// on-delay) and to the point's entry, each changed field in the entry's history.
#[allow(clippy::too_many_arguments)]
fn apply(
    c: &Connection,
    sensor: &str,
    asset: &str,
    code: &str,
    level: &str,
    s: Settings,
    by: &str,
    reason: &str,
    now: Timestamp,
) -> Result<(), DecisionError> {
    let limits: [Option<f64>; 4] =
        c.query_row("SELECT limit_ll, limit_l, limit_h, limit_hh FROM sensors WHERE id = ?1", [sensor], |r| {
            Ok([r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?])
        })?;
    let i = ["ll", "l", "h", "hh"].iter().position(|l| *l == level).unwrap_or(2);
    let mut after = limits;
    after[i] = Some(s.set_point);
    let present: Vec<f64> = after.iter().flatten().copied().collect();
    if present.windows(2).any(|w| w[0] > w[1]) {
        return Err(DecisionError::Conflict(format!(
            "{sensor}'s limits would be out of order with the {level} set point at {}: they must rise ll <= l <= h <= hh; reject this change",
            s.set_point
        )));
    }
    // One statement per level: the column is a fixed identifier, never text from a row.
    let sql = match i {
        0 => "UPDATE sensors SET limit_ll = ?2, deadband = ?3, on_delay_s = ?4 WHERE id = ?1",
        1 => "UPDATE sensors SET limit_l = ?2, deadband = ?3, on_delay_s = ?4 WHERE id = ?1",
        2 => "UPDATE sensors SET limit_h = ?2, deadband = ?3, on_delay_s = ?4 WHERE id = ?1",
        _ => "UPDATE sensors SET limit_hh = ?2, deadband = ?3, on_delay_s = ?4 WHERE id = ?1",
    };
    c.prepare_cached(sql)?.execute(params![sensor, s.set_point, s.deadband, s.on_delay_s])?;
    // The point's entry as every reader finds it (`points::of`), or a new one.
    let entry = crate::alarms::points::of(c, asset, Some(sensor), code)?;
    let point = match &entry {
        Some(e) => e.id,
        None => {
            c.prepare_cached("INSERT INTO alarm_points (asset_id, code, sensor_id) VALUES (?1, ?2, ?3)")?
                .execute(params![asset, code, sensor])?;
            c.last_insert_rowid()
        }
    };
    let text = |v: Option<String>| v.unwrap_or_default();
    let before: [String; 4] = [
        text(entry.as_ref().and_then(|e| e.set_point).map(|v| v.to_string())),
        text(entry.as_ref().and_then(|e| e.deadband).map(|v| v.to_string())),
        text(entry.as_ref().and_then(|e| e.on_delay_s).map(|v| v.to_string())),
        text(entry.as_ref().and_then(|e| e.off_delay_s).map(|v| v.to_string())),
    ];
    let fields = ["set_point", "deadband", "on_delay_s", "off_delay_s"];
    let new = [s.set_point.to_string(), s.deadband.to_string(), s.on_delay_s.to_string(), s.off_delay_s.to_string()];
    c.prepare_cached(
        "UPDATE alarm_points SET set_point = ?2, deadband = ?3, on_delay_s = ?4, off_delay_s = ?5, retired_at = NULL WHERE id = ?1",
    )?
    .execute(params![point, s.set_point, s.deadband, s.on_delay_s, s.off_delay_s])?;
    for ((field, old), new) in fields.iter().zip(before).zip(new) {
        if old != new {
            c.prepare_cached(
                "INSERT INTO alarm_point_changes (point_id, at, actor, source, field, old, new, reason)
                 VALUES (?1, ?2, ?3, 'approval', ?4, ?5, ?6, ?7)",
            )?
            .execute(params![point, now.unix(), by, field, old, new, reason])?;
        }
    }
    Ok(())
}

/// Marks changes still pending past their expiry as `expired`: a stale proposal must
/// not be approved on old evidence.
pub fn expire_due(c: &Connection, now: Timestamp) -> rusqlite::Result<Vec<i64>> {
    c.prepare_cached(
        "UPDATE alarm_changes SET status = 'expired', decided_by = 'twinops', decided_at = ?1,
                decision_reason = 'no decision before the proposal expired'
         WHERE status = 'pending_approval' AND expires_at <= ?1 RETURNING id",
    )?
    .query_map([now.unix()], |r| r.get(0))?
    .collect()
}

/// The latest 200 changes, newest first, in `status` when given, as the HMI lists them.
pub fn list(db: &Connection, status: Option<AlarmChangeStatus>) -> rusqlite::Result<Vec<serde_json::Value>> {
    let mut stmt = db.prepare_cached(
        "SELECT json_object('id', id, 'kind', kind, 'sensor_id', sensor_id, 'asset_id', asset_id, 'code', code,
                'level', level, 'while_active', CASE WHEN kind = 'suppression' THEN json_object('asset_id', while_asset_id,
                    'sensor_id', while_sensor_id, 'code', while_code) END,
                'current', json(current), 'proposed', json(proposed), 'reason', reason, 'evidence', json(evidence),
                'applies', applies, 'status', status, 'proposed_by', proposed_by, 'run_id', run_id,
                'proposed_at', rfc3339(proposed_at), 'expires_at', rfc3339(expires_at), 'decided_by', decided_by,
                'decided_at', rfc3339(decided_at), 'decision_reason', decision_reason, 'lifted_by', lifted_by,
                'lifted_at', rfc3339(lifted_at), 'lift_reason', lift_reason,
                'suppressed_occurrences', CASE WHEN kind = 'suppression'
                    THEN (SELECT count(*) FROM alarms a WHERE a.suppressed_by = alarm_changes.id) END)
         FROM alarm_changes WHERE ?1 IS NULL OR status = ?1 ORDER BY proposed_at DESC, id DESC LIMIT 200",
    )?;
    crate::store::json_rows(&mut stmt, [status])
}
