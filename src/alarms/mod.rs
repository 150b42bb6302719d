//! The alarm lifecycle (ISA-18.2): occurrences, their states and journal, and flood
//! and chattering detection.
//!
//! Architecture Invariant: every state change of an alarm goes through this module and
//! is journalled in `alarm_events` (append-only) with who and when, in the same
//! transaction as the change.

pub mod activity;
pub mod definitions;
pub mod journal;
pub mod kpi;
pub mod kpi_cache;
pub mod kpi_report;
pub mod limits;
pub mod list;
pub mod points;
pub mod replay;
pub mod standing;
pub mod suppression;

use rusqlite::{Connection, OptionalExtension, params};
use serde::Serialize;

use crate::domain::{
    AlarmEvent, AlarmState, AssetId, DeadLetterReason, SensorId, Severity, Timestamp, Transition, TriageMode,
};
use crate::store::{StoreError, Writer};

/// ISA-18.2: a flood starts above 10 alarms in 10 minutes per operator position and
/// ends below 5.
pub const FLOOD_WINDOW_SECS: i64 = 600;
pub const FLOOD_START: i64 = 10;
pub const FLOOD_END: i64 = 5;
/// Chattering: 3 or more activations of one alarm point within 60 seconds.
pub const CHATTER_WINDOW_SECS: i64 = 60;
pub const CHATTER_ACTIVATIONS: i64 = 3;
/// Longest an alarm may be shelved.
pub const MAX_SHELVE_SECS: i64 = 24 * 3600;
/// Most triage jobs queued at once, by default (`triage.queue_capacity`).
pub const TRIAGE_QUEUE_CAPACITY: i64 = 200;

/// `alarms p`: the occurrences of the same point (asset, sensor, code) as `alarms a`.
macro_rules! same_point {
    () => {
        " JOIN alarms p ON p.asset_id = a.asset_id AND p.code = a.code
          AND coalesce(p.sensor_id, '') = coalesce(a.sensor_id, '') "
    };
}

/// How new occurrences are queued for triage.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct QueuePolicy {
    /// Most jobs queued at once. Occurrences are never dropped: past capacity they join
    /// the one overflow job, which the rules model triages (see `enqueue_triage`).
    pub capacity: i64,
    /// An occurrence received this many seconds or more after it was raised is backfill
    /// (a gateway replaying its buffer): journalled and counted, summarised with the
    /// rest of its backfill in one note rather than triaged as news.
    pub backfill_after_secs: i64,
}

/// By default, an occurrence an hour late is backfill.
pub const BACKFILL_AFTER_SECS: i64 = 3600;

impl Default for QueuePolicy {
    fn default() -> Self {
        QueuePolicy { capacity: TRIAGE_QUEUE_CAPACITY, backfill_after_secs: BACKFILL_AFTER_SECS }
    }
}

/// What an alarm event did.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "effect", rename_all = "snake_case")]
pub enum Applied {
    /// A new occurrence, with its triage job.
    Raised {
        alarm_id: i64,
        job_id: i64,
    },
    /// A repeat while active: counted on the open occurrence, no new triage.
    Reraised {
        alarm_id: i64,
    },
    Cleared {
        alarm_id: i64,
    },
    /// A new occurrence of a point that is out of service: recorded and journalled, not
    /// annunciated, not triaged (see [`remove_from_service`]).
    OutOfService {
        alarm_id: i64,
    },
    /// A new occurrence of a point suppressed by design while its leader is active:
    /// recorded and journalled, not annunciated, not triaged (see [`suppression`]).
    Suppressed {
        alarm_id: i64,
        alarm_change_id: i64,
    },
    /// This event id was seen before; nothing changed.
    Duplicate,
}

/// An event that is valid JSON but cannot apply to the twin.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum Refusal {
    #[error("no asset {0} in the twin")]
    UnknownAsset(String),
    #[error("no sensor {0} in the twin")]
    UnknownSensor(String),
    #[error("{0} is retired (left out of a full plant import); import it again to take its events")]
    Retired(String),
    #[error("sensor_id {sensor} belongs to {owner}, not {asset}")]
    SensorOfAnotherAsset { sensor: String, owner: String, asset: String },
    #[error("cleared event for {0} with no active occurrence")]
    UnmatchedClear(String),
}

impl Refusal {
    /// The dead-letter reason.
    pub fn reason(&self) -> DeadLetterReason {
        match self {
            Refusal::UnknownAsset(_) => DeadLetterReason::UnknownAsset,
            Refusal::UnknownSensor(_) => DeadLetterReason::UnknownSensor,
            Refusal::SensorOfAnotherAsset { .. } => DeadLetterReason::Invalid,
            Refusal::Retired(_) => DeadLetterReason::Retired,
            Refusal::UnmatchedClear(_) => DeadLetterReason::UnmatchedClear,
        }
    }
}

/// The event with its ids as the twin stores them (a site may send `p-101a` for
/// `P-101A`), or why it cannot apply: an unknown asset or sensor, or a sensor of
/// another asset.
fn resolve(conn: &Connection, ev: &AlarmEvent) -> Result<Result<AlarmEvent, Refusal>, StoreError> {
    let asset: Option<(String, bool)> = conn
        .prepare_cached("SELECT id, retired_at IS NOT NULL FROM assets WHERE id = ?1 COLLATE NOCASE")?
        .query_row([&ev.asset_id], |r| Ok((r.get(0)?, r.get(1)?)))
        .optional()?;
    let Some((asset, retired)) = asset.and_then(|(a, retired)| Some((AssetId::parse(&a).ok()?, retired))) else {
        return Ok(Err(Refusal::UnknownAsset(ev.asset_id.to_string())));
    };
    if retired {
        return Ok(Err(Refusal::Retired(format!("asset {asset}"))));
    }
    let mut sensor_id = None;
    if let Some(sensor) = &ev.sensor_id {
        let found: Option<(String, String, bool)> = conn
            .prepare_cached("SELECT id, asset_id, retired_at IS NOT NULL FROM sensors WHERE id = ?1 COLLATE NOCASE")?
            .query_row([sensor], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))
            .optional()?;
        let Some((id, owner, retired)) = found else { return Ok(Err(Refusal::UnknownSensor(sensor.to_string()))) };
        if retired {
            return Ok(Err(Refusal::Retired(format!("sensor {id}"))));
        }
        if owner != asset.as_str() {
            return Ok(Err(Refusal::SensorOfAnotherAsset { sensor: id, owner, asset: asset.to_string() }));
        }
        sensor_id = SensorId::parse(&id).ok();
    }
    Ok(Ok(AlarmEvent { asset_id: asset, sensor_id, ..ev.clone() }))
}

/// Most bytes of an event kept in its journal entry as received.
const RAW_EVENT_BYTES: usize = 16 * 1024;

/// Applies one alarm event inside the caller's transaction. `raw` is the event as
/// received, when it came from outside (kept in the journal: the text as sent, before
/// deceptive characters were stripped, and what a repeat of its id is compared with).
pub fn apply(
    conn: &Connection,
    ev: &AlarmEvent,
    raw: Option<&[u8]>,
    received: Timestamp,
    policy: QueuePolicy,
) -> Result<Result<Applied, Refusal>, StoreError> {
    let seen: Option<i64> = conn
        .prepare_cached("SELECT 1 FROM alarm_events WHERE event_id = ?1")?
        .query_row([&ev.event_id], |r| r.get(0))
        .optional()?;
    if seen.is_some() {
        return Ok(Ok(Applied::Duplicate));
    }
    let ev = match resolve(conn, ev)? {
        Ok(ev) => ev,
        Err(refusal) => return Ok(Err(refusal)),
    };
    let ev = &ev;
    // The open occurrence: id, state, and when it was raised (for the figures' cache).
    let open: Option<(i64, AlarmState, i64)> = conn
        .prepare_cached(
            "SELECT id, state, raised_at FROM alarms WHERE asset_id = ?1 AND coalesce(sensor_id, '') = coalesce(?2, '') AND code = ?3
             AND cleared_at IS NULL",
        )?
        .query_row(params![ev.asset_id, ev.sensor_id, ev.code], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))
        .optional()?;
    let t = ev.time.unix();
    let applied = match (ev.transition, open) {
        (Transition::Raised, Some((alarm_id, ..))) => {
            conn.prepare_cached("UPDATE alarms SET reraise_count = reraise_count + 1, last_raised_at = ?2, value = coalesce(?3, value) WHERE id = ?1")?
                .execute(params![alarm_id, t, ev.value])?;
            scada_journal(conn, alarm_id, ev, "reraised", raw)?;
            Applied::Reraised { alarm_id }
        }
        (Transition::Raised, None) => return raise(conn, ev, raw, received, policy).map(Ok),
        (Transition::Cleared, Some((alarm_id, state, raised))) => {
            let next = match state {
                AlarmState::Unacknowledged => AlarmState::RtnUnacknowledged,
                AlarmState::OutOfService => AlarmState::OutOfService,
                _ => AlarmState::Cleared,
            };
            conn.prepare_cached("UPDATE alarms SET cleared_at = ?2, state = ?3, shelved_until = NULL WHERE id = ?1")?
                .execute(params![alarm_id, t, next])?;
            scada_journal(conn, alarm_id, ev, "cleared", raw)?;
            kpi_cache::invalidate(conn, raised, ev.at_ms())?;
            // What this occurrence kept suppressed, and is still active, is annunciated now.
            let why = format!("{} {} returned to normal (alarm {alarm_id})", ev.asset_id, ev.code);
            let how = suppression::Release { at: ev.time, received, actor: "twinops", why, policy };
            suppression::release_led_by(conn, ev, &how)?;
            Applied::Cleared { alarm_id }
        }
        (Transition::Cleared, None) => {
            return Ok(Err(Refusal::UnmatchedClear(format!("{} {}", ev.asset_id, ev.code))));
        }
    };
    Ok(Ok(applied))
}

/// A new occurrence: out of service if its point is, otherwise annunciated and given
/// its triage job.
fn raise(
    conn: &Connection,
    ev: &AlarmEvent,
    raw: Option<&[u8]>,
    received: Timestamp,
    policy: QueuePolicy,
) -> Result<Applied, StoreError> {
    // A point stays out of service, across occurrences, until it is returned.
    let out_of_service: bool = conn
        .prepare_cached(
            "SELECT state = 'out_of_service' FROM alarms
             WHERE asset_id = ?1 AND coalesce(sensor_id, '') = coalesce(?2, '') AND code = ?3
             ORDER BY id DESC LIMIT 1",
        )?
        .query_row(params![ev.asset_id, ev.sensor_id, ev.code], |r| r.get(0))
        .optional()?
        .unwrap_or(false);
    let suppressor = if out_of_service { None } else { suppression::holding(conn, ev)? };
    let state = match (out_of_service, &suppressor) {
        (true, _) => AlarmState::OutOfService,
        (false, Some(_)) => AlarmState::Suppressed,
        (false, None) => AlarmState::Unacknowledged,
    };
    conn.prepare_cached(
        "INSERT INTO alarms (event_id, asset_id, sensor_id, code, severity, state, message, value, threshold,
                             raised_at, last_raised_at, suppressed_by)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?10, ?11)",
    )?
    .execute(params![
        ev.event_id,
        ev.asset_id,
        ev.sensor_id,
        ev.code,
        ev.severity,
        state,
        ev.message,
        ev.value,
        ev.threshold,
        ev.time.unix(),
        suppressor.as_ref().map(|s| s.change_id)
    ])?;
    let alarm_id = conn.last_insert_rowid();
    scada_journal(conn, alarm_id, ev, "raised", raw)?;
    kpi_cache::invalidate(conn, ev.time.unix(), ev.at_ms())?;
    if out_of_service {
        crate::metrics::count("twinops_alarms_suppressed_total", &[], 1.0);
        return Ok(Applied::OutOfService { alarm_id });
    }
    if let Some(s) = suppressor {
        crate::metrics::count("twinops_alarms_suppressed_total", &[], 1.0);
        journal(conn, alarm_id, None, "suppressed", ev.time.unix(), "twinops", &s.detail())?;
        return Ok(Applied::Suppressed { alarm_id, alarm_change_id: s.change_id });
    }
    crate::metrics::count("twinops_alarms_raised_total", &[("severity", ev.severity.as_str())], 1.0);
    let code = crate::metrics::bounded("twinops_alarms_raised_by_code_total", "code", &ev.code, 500);
    crate::metrics::count("twinops_alarms_raised_by_code_total", &[("code", &code)], 1.0);
    let late = received.unix() - ev.time.unix() >= policy.backfill_after_secs;
    let job_id = if late {
        crate::metrics::count("twinops_alarms_backfilled_total", &[], 1.0);
        enqueue_backfill(conn, alarm_id, received)?
    } else {
        enqueue_triage(conn, alarm_id, ev.asset_id.as_str(), ev.severity, ev.time, received, policy)?
    };
    Ok(Applied::Raised { alarm_id, job_id })
}

/// Gives a late occurrence the backfill job waiting, or a new one: one job, and one
/// summary note, per backfill (`triage::backfill`), in `rules` mode and last in line.
fn enqueue_backfill(conn: &Connection, alarm_id: i64, now: Timestamp) -> rusqlite::Result<i64> {
    let waiting: Option<i64> = conn
        .prepare_cached("SELECT id FROM triage_jobs WHERE state = 'queued' AND backfill = 1 LIMIT 1")?
        .query_row([], |r| r.get(0))
        .optional()?;
    let job = match waiting {
        Some(job) => job,
        None => {
            conn.prepare_cached(
                "INSERT INTO triage_jobs (alarm_id, asset_id, state, priority, mode, enqueued_at, backfill)
                 VALUES (?1, NULL, 'queued', ?2, 'rules', ?3, 1)",
            )?
            .execute(params![alarm_id, Severity::Low.rank() + 1, now.unix()])?;
            conn.last_insert_rowid()
        }
    };
    conn.prepare_cached("UPDATE alarms SET triage_job = ?2 WHERE id = ?1")?.execute(params![alarm_id, job])?;
    Ok(job)
}

/// Gives a new occurrence its triage job, in the same transaction. Every occurrence
/// gets a note; the model is kept for the ones that need judgement.
///
/// - An occurrence on an asset that already has a job waiting joins it: one run
///   triages the asset's alarms together (in a flood, one run instead of dozens).
/// - Otherwise it gets a job of its own, in `rules` mode (no model) when it is low
///   severity, when its point is chattering, or during a flood unless it is high or
///   critical.
/// - With the queue at capacity, it joins the overflow job instead (`asset_id` NULL,
///   `rules` mode), so the queue never holds more than the policy's capacity and no
///   occurrence goes without a note.
fn enqueue_triage(
    conn: &Connection,
    alarm_id: i64,
    asset_id: &str,
    severity: Severity,
    at: Timestamp,
    now: Timestamp,
    policy: QueuePolicy,
) -> rusqlite::Result<i64> {
    let chattering = is_chattering(conn, alarm_id, at.plus_secs(1))?;
    if chattering {
        crate::metrics::count("twinops_alarm_chatter_total", &[], 1.0);
    }
    let routine = severity == Severity::Low
        || chattering
        || (severity <= Severity::Medium && flood_state(conn, at.plus_secs(1), false)?.flood);
    let rank = severity.rank();
    let waiting = |asset: Option<&str>| -> rusqlite::Result<Option<i64>> {
        conn.prepare_cached(
            "SELECT id FROM triage_jobs WHERE state = 'queued' AND asset_id IS ?1 AND backfill = 0 LIMIT 1",
        )?
        .query_row([asset], |r| r.get(0))
        .optional()
    };
    let join = |job: i64, routine: bool| -> rusqlite::Result<i64> {
        conn.prepare_cached(
            "UPDATE triage_jobs SET priority = min(priority, ?2), mode = CASE WHEN ?3 THEN mode ELSE 'agent' END
             WHERE id = ?1",
        )?
        .execute(params![job, rank, routine])?;
        Ok(job)
    };
    let create = |asset: Option<&str>, routine: bool| -> rusqlite::Result<i64> {
        conn.prepare_cached(
            "INSERT INTO triage_jobs (alarm_id, asset_id, state, priority, mode, enqueued_at)
             VALUES (?1, ?2, 'queued', ?3, ?4, ?5)",
        )?
        .execute(params![
            alarm_id,
            asset,
            rank,
            if routine { TriageMode::Rules } else { TriageMode::Agent },
            now.unix()
        ])?;
        Ok(conn.last_insert_rowid())
    };
    let job = if let Some(job) = waiting(Some(asset_id))? {
        join(job, routine)?
    } else {
        let queued: i64 = conn
            .prepare_cached("SELECT count(*) FROM triage_jobs WHERE state = 'queued'")?
            .query_row([], |r| r.get(0))?;
        // One slot is kept for the overflow job.
        if queued < policy.capacity - 1 {
            create(Some(asset_id), routine)?
        } else if let Some(overflow) = waiting(None)? {
            join(overflow, true)?
        } else {
            create(None, true)?
        }
    };
    conn.prepare_cached("UPDATE alarms SET triage_job = ?2 WHERE id = ?1")?.execute(params![alarm_id, job])?;
    Ok(job)
}

/// The journal entry of a source event, with its bytes as received.
fn scada_journal(
    conn: &Connection,
    alarm_id: i64,
    ev: &AlarmEvent,
    kind: &str,
    raw: Option<&[u8]>,
) -> rusqlite::Result<()> {
    let raw = raw.filter(|r| r.len() <= RAW_EVENT_BYTES);
    conn.prepare_cached(
        "INSERT INTO alarm_events (alarm_id, event_id, kind, at, millis, actor, detail, raw)
         VALUES (?1, ?2, ?3, ?4, ?5, 'scada', ?6, ?7)",
    )?
    .execute(params![alarm_id, ev.event_id, kind, ev.time.unix(), ev.millis, ev.message, raw])?;
    Ok(())
}

fn journal(
    conn: &Connection,
    alarm_id: i64,
    event_id: Option<&str>,
    kind: &str,
    at: i64,
    actor: &str,
    detail: &str,
) -> rusqlite::Result<()> {
    conn.prepare_cached(
        "INSERT INTO alarm_events (alarm_id, event_id, kind, at, actor, detail) VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
    )?
    .execute(params![alarm_id, event_id, kind, at, actor, detail])?;
    Ok(())
}

/// Why an operator action was refused.
#[derive(Debug, thiserror::Error)]
pub enum ActionError {
    #[error("no alarm {0}; list alarms with `twinops alarms list`")]
    NotFound(i64),
    #[error("alarm {id} is {state}; {hint}")]
    WrongState { id: i64, state: AlarmState, hint: &'static str },
    /// The request is fine but the alarm's history does not allow it (HTTP 409).
    #[error("{0}")]
    Conflict(String),
    /// The request itself is not (HTTP 400).
    #[error("{0}")]
    Invalid(String),
    #[error(transparent)]
    Store(#[from] StoreError),
}

impl From<rusqlite::Error> for ActionError {
    fn from(e: rusqlite::Error) -> Self {
        ActionError::Store(e.into())
    }
}

fn state_of(conn: &Connection, id: i64) -> Result<(AlarmState, Option<i64>, Option<i64>), ActionError> {
    conn.prepare_cached("SELECT state, acked_at, cleared_at FROM alarms WHERE id = ?1")?
        .query_row([id], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))
        .optional()?
        .ok_or(ActionError::NotFound(id))
}

/// Acknowledges an alarm: unacknowledged becomes acknowledged; returned-to-normal
/// unacknowledged becomes cleared. Returns the new state.
pub fn acknowledge(writer: &Writer, id: i64, user: &str, now: Timestamp) -> Result<AlarmState, ActionError> {
    let user = user.to_string();
    writer.call(move |conn| {
        let (state, _, _) = state_of(conn, id)?;
        let next = match state {
            AlarmState::Unacknowledged => AlarmState::Acknowledged,
            AlarmState::RtnUnacknowledged => AlarmState::Cleared,
            state => {
                return Err(ActionError::WrongState {
                    id,
                    state,
                    hint: "only unacknowledged alarms can be acknowledged",
                });
            }
        };
        conn.prepare_cached("UPDATE alarms SET state = ?2, acked_at = ?3, acked_by = ?4 WHERE id = ?1")?
            .execute(params![id, next, now.unix(), user])?;
        journal(conn, id, None, "acknowledged", now.unix(), &user, "")?;
        Ok(next)
    })
}

/// Acknowledges, in the caller's transaction, the occurrences of a point its source
/// says were acknowledged there (an operator at the SCADA, through OPC UA's
/// AckedState): unacknowledged becomes acknowledged, returned-to-normal
/// unacknowledged becomes cleared, each journalled as `actor`'s. Returns their ids.
pub fn acknowledged_at_source(
    conn: &Connection,
    asset: &str,
    sensor: Option<&str>,
    code: &str,
    actor: &str,
    at: Timestamp,
) -> rusqlite::Result<Vec<i64>> {
    let open: Vec<(i64, AlarmState)> = conn
        .prepare_cached(
            "SELECT id, state FROM alarms WHERE asset_id = ?1 COLLATE NOCASE AND coalesce(sensor_id, '') = coalesce(?2, '') COLLATE NOCASE
             AND code = ?3 COLLATE NOCASE AND state IN ('unacknowledged', 'rtn_unacknowledged') ORDER BY id",
        )?
        .query_map(params![asset, sensor, code], |r| Ok((r.get(0)?, r.get(1)?)))?
        .collect::<Result<_, _>>()?;
    for (id, state) in &open {
        let next = if *state == AlarmState::Unacknowledged { AlarmState::Acknowledged } else { AlarmState::Cleared };
        conn.prepare_cached("UPDATE alarms SET state = ?2, acked_at = ?3, acked_by = ?4 WHERE id = ?1")?
            .execute(params![id, next, at.unix(), actor])?;
        journal(conn, *id, None, "acknowledged", at.unix(), actor, "acknowledged at the source")?;
    }
    Ok(open.into_iter().map(|(id, _)| id).collect())
}

/// Acknowledges every returned-to-normal occurrence of alarm `id`'s point (asset,
/// sensor, code) at once: a point that went in and out of alarm many times leaves a
/// row each, whose condition is gone; the operator has read one and acknowledges them
/// together. Active occurrences are left to be acknowledged one by one. Returns the ids
/// acknowledged, each journalled.
pub fn acknowledge_returned(writer: &Writer, id: i64, user: &str, now: Timestamp) -> Result<Vec<i64>, ActionError> {
    let user = user.to_string();
    writer.call(move |conn| {
        let ids: Vec<i64> = returned_of(conn, id)?.into_iter().map(|(id, _)| id).collect();
        acknowledge_these_returned(conn, id, &ids, &user, now)
    })
}

/// The occurrences of alarm `id`'s point that returned to normal unacknowledged, with
/// their event ids (what a redundant pair shares).
pub fn returned_of(conn: &Connection, id: i64) -> rusqlite::Result<Vec<(i64, Option<String>)>> {
    conn.prepare_cached(concat!(
        "SELECT p.id, p.event_id FROM alarms a",
        same_point!(),
        "WHERE a.id = ?1 AND p.state = 'rtn_unacknowledged' ORDER BY p.id"
    ))?
    .query_map([id], |r| Ok((r.get(0)?, r.get(1)?)))?
    .collect()
}

/// Acknowledges those of `ids` (alarm `id`'s point's) still returned unacknowledged;
/// none left is a 409, a state.
pub fn acknowledge_these_returned(
    conn: &Connection,
    id: i64,
    ids: &[i64],
    user: &str,
    now: Timestamp,
) -> Result<Vec<i64>, ActionError> {
    let mut done = Vec::new();
    for &alarm in ids {
        let changed = conn
            .prepare_cached(
                "UPDATE alarms SET state = 'cleared', acked_at = ?2, acked_by = ?3
                 WHERE id = ?1 AND state = 'rtn_unacknowledged'",
            )?
            .execute(params![alarm, now.unix(), user])?;
        if changed == 1 {
            journal(conn, alarm, None, "acknowledged", now.unix(), user, "with its point's returned alarms")?;
            done.push(alarm);
        }
    }
    if done.is_empty() {
        let (state, ..) = state_of(conn, id)?;
        // A state, not a bad request: the HTTP answer is 409.
        return Err(ActionError::WrongState {
            id,
            state,
            hint: "its point has no returned-to-normal alarm waiting for acknowledgement",
        });
    }
    Ok(done)
}

/// Shelves an active alarm for `secs` (at most 24 hours), with a reason.
pub fn shelve(
    writer: &Writer,
    id: i64,
    user: &str,
    secs: i64,
    reason: &str,
    now: Timestamp,
) -> Result<AlarmState, ActionError> {
    if !(60..=MAX_SHELVE_SECS).contains(&secs) {
        return Err(ActionError::Invalid(format!(
            "shelve for 1 to 1440 minutes (24 hours), not {} minutes",
            secs / 60
        )));
    }
    if reason.trim().is_empty() {
        return Err(ActionError::Invalid(
            "say why the alarm is shelved: a reason is required, and goes in the alarm's journal".into(),
        ));
    }
    let (user, reason) = (user.to_string(), reason.trim().to_string());
    writer.call(move |conn| {
        let (state, _, cleared) = state_of(conn, id)?;
        if cleared.is_some() || !matches!(state, AlarmState::Unacknowledged | AlarmState::Acknowledged) {
            return Err(ActionError::WrongState { id, state, hint: "only active alarms can be shelved" });
        }
        let until = now.unix() + secs;
        conn.prepare_cached("UPDATE alarms SET state = 'shelved', shelved_until = ?2 WHERE id = ?1")?
            .execute(params![id, until])?;
        journal(
            conn,
            id,
            None,
            "shelved",
            now.unix(),
            &user,
            &format!("until {}: {reason}", Timestamp::from_unix(until).to_rfc3339()),
        )?;
        Ok(AlarmState::Shelved)
    })
}

/// Returns shelved alarms whose shelf time is over to their state before shelving.
pub fn unshelve_expired(writer: &Writer, now: Timestamp) -> Result<usize, StoreError> {
    writer.call(move |conn| {
        let mut stmt =
            conn.prepare_cached("SELECT id, acked_at FROM alarms WHERE state = 'shelved' AND shelved_until <= ?1")?;
        let due: Vec<(i64, Option<i64>)> =
            stmt.query_map([now.unix()], |r| Ok((r.get(0)?, r.get(1)?)))?.collect::<Result<_, _>>()?;
        for (id, acked) in &due {
            let state = if acked.is_some() { AlarmState::Acknowledged } else { AlarmState::Unacknowledged };
            conn.prepare_cached("UPDATE alarms SET state = ?2, shelved_until = NULL WHERE id = ?1")?
                .execute(params![id, state])?;
            journal(conn, *id, None, "unshelved", now.unix(), "twinops", "shelf time over")?;
        }
        Ok(due.len())
    })
}

/// Returns a shelved alarm to its state before shelving, before its shelf time is over.
pub fn unshelve(writer: &Writer, id: i64, user: &str, now: Timestamp) -> Result<AlarmState, ActionError> {
    let user = user.to_string();
    writer.call(move |conn| {
        let (state, acked, _) = state_of(conn, id)?;
        if state != AlarmState::Shelved {
            return Err(ActionError::WrongState { id, state, hint: "only shelved alarms can be unshelved" });
        }
        let next = if acked.is_some() { AlarmState::Acknowledged } else { AlarmState::Unacknowledged };
        conn.prepare_cached("UPDATE alarms SET state = ?2, shelved_until = NULL WHERE id = ?1")?
            .execute(params![id, next])?;
        journal(conn, id, None, "unshelved", now.unix(), &user, "")?;
        Ok(next)
    })
}

/// Takes an alarm's point (its asset, sensor and code) out of service, for maintenance
/// or a failed instrument, with a reason: until it is returned, its occurrences are
/// recorded but not annunciated, not counted towards a flood, and not triaged. Returns
/// the new state.
pub fn remove_from_service(
    writer: &Writer,
    id: i64,
    user: &str,
    reason: &str,
    now: Timestamp,
) -> Result<AlarmState, ActionError> {
    if reason.trim().is_empty() {
        return Err(ActionError::Invalid(
            "say why the alarm is taken out of service, e.g. the permit number: a reason is required, and goes in the alarm's journal".into(),
        ));
    }
    let (user, reason) = (user.to_string(), reason.trim().to_string());
    writer.call(move |conn| {
        let (state, _, _) = state_of(conn, id)?;
        if state == AlarmState::OutOfService {
            return Err(ActionError::WrongState { id, state, hint: "return it to service first" });
        }
        let latest: i64 = conn
            .prepare_cached(concat!("SELECT max(p.id) FROM alarms a", same_point!(), "WHERE a.id = ?1"))?
            .query_row([id], |r| r.get(0))?;
        if latest != id {
            return Err(ActionError::Conflict(format!(
                "alarm {id} is not its point's latest occurrence; take alarm {latest} out of service instead"
            )));
        }
        conn.prepare_cached("UPDATE alarms SET state = 'out_of_service', shelved_until = NULL WHERE id = ?1")?
            .execute([id])?;
        journal(conn, id, None, "out_of_service", now.unix(), &user, &reason)?;
        Ok(AlarmState::OutOfService)
    })
}

/// Returns an alarm's point to service. An occurrence still active annunciates again
/// (unacknowledged) and is triaged if it never was; one that cleared meanwhile is
/// cleared. Returns the named occurrence's new state.
pub fn return_to_service(
    writer: &Writer,
    id: i64,
    user: &str,
    now: Timestamp,
    policy: QueuePolicy,
) -> Result<AlarmState, ActionError> {
    let user = user.to_string();
    writer.call(move |conn| {
        let (state, _, _) = state_of(conn, id)?;
        if state != AlarmState::OutOfService {
            return Err(ActionError::WrongState {
                id,
                state,
                hint: "only alarms out of service can be returned to it",
            });
        }
        // Every occurrence of the point that is out of service: the named one, and those
        // raised and cleared while it was.
        let mut stmt = conn.prepare_cached(concat!(
            "SELECT p.id, p.cleared_at IS NULL, p.triage_job IS NULL, p.asset_id, p.severity, p.raised_at FROM alarms a",
            same_point!(),
            "WHERE a.id = ?1 AND p.state = 'out_of_service'"
        ))?;
        let point: Vec<(i64, bool, bool, String, Severity, i64)> = stmt
            .query_map([id], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?, r.get(4)?, r.get(5)?)))?
            .collect::<Result<_, _>>()?;
        let mut named = AlarmState::OutOfService;
        for (alarm, active, untriaged, asset, severity, raised_at) in point {
            let next = if active { AlarmState::Unacknowledged } else { AlarmState::Cleared };
            // Annunciated again, it needs a fresh acknowledgement (the old one stays in
            // the journal).
            conn.prepare_cached(
                "UPDATE alarms SET state = ?2,
                     acked_at = CASE WHEN ?3 THEN NULL ELSE acked_at END,
                     acked_by = CASE WHEN ?3 THEN NULL ELSE acked_by END
                 WHERE id = ?1",
            )?
            .execute(params![alarm, next, active])?;
            journal(conn, alarm, None, "returned_to_service", now.unix(), &user, "")?;
            if active && untriaged {
                enqueue_triage(conn, alarm, &asset, severity, Timestamp::from_unix(raised_at), now, policy)?;
            }
            if alarm == id {
                named = next;
            }
        }
        Ok(named)
    })
}

/// The alarm rate against the ISA-18.2 flood figures.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct FloodState {
    pub alarms_last_10_min: i64,
    /// Above 10 in 10 minutes starts a flood; it lasts until the rate is below 5.
    pub flood: bool,
}

/// Occurrences not cleared, by state and severity: the alarm gauges.
pub fn counts(conn: &Connection) -> rusqlite::Result<Vec<(String, String, i64)>> {
    let mut stmt =
        conn.prepare_cached("SELECT state, severity, count(*) FROM alarms WHERE state != 'cleared' GROUP BY 1, 2")?;
    let rows = stmt.query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))?;
    rows.collect()
}

/// Whether the plant is in an alarm flood, given whether it was in one before
/// (hysteresis: start above 10, end below 5). Occurrences not annunciated (out of
/// service, suppressed by design) do not count: taking a faulty instrument out of
/// service is how a flood of its nuisance alarms is ended.
pub fn flood_state(conn: &Connection, now: Timestamp, was_flood: bool) -> rusqlite::Result<FloodState> {
    let n: i64 = conn
        .prepare_cached(
            "SELECT count(*) FROM alarms WHERE raised_at > ?1 AND state NOT IN ('out_of_service', 'suppressed')",
        )?
        .query_row([now.unix() - FLOOD_WINDOW_SECS], |r| r.get(0))?;
    let flood = if was_flood { n >= FLOOD_END } else { n > FLOOD_START };
    Ok(FloodState { alarms_last_10_min: n, flood })
}

/// Whether an alarm point is chattering: 3 or more activations (raises and re-raises)
/// in the last 60 seconds.
pub fn is_chattering(conn: &Connection, alarm_id: i64, now: Timestamp) -> rusqlite::Result<bool> {
    let n: i64 = conn
        .prepare_cached(concat!(
            "SELECT count(*) FROM alarm_events e JOIN alarms a ON a.id = e.alarm_id",
            same_point!(),
            "WHERE p.id = ?1 AND e.kind IN ('raised', 'reraised') AND e.at > ?2"
        ))?
        .query_row(params![alarm_id, now.unix() - CHATTER_WINDOW_SECS], |r| r.get(0))?;
    Ok(n >= CHATTER_ACTIVATIONS)
}
