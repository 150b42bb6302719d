//! Operators' acknowledgements passed on to the server (`acknowledge = true`): which
//! are due, and the record that one was passed on (`opcua_acks` and the audit log).
//!
//! Of a redundant pair only the acting node passes acknowledgements on, and it shares
//! each result through the pair's decision log ([`KIND`]), so that a node taking over
//! does not pass on again what the other already did. The record names the
//! acknowledgement as both nodes have it: the occurrence's event id (the SCADA's), and
//! who acknowledged it when (local journal ids differ between the nodes).

use rusqlite::{Connection, OptionalExtension, params};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use crate::domain::Timestamp;
use crate::store::StoreError;

/// The decision log's kind for [`Passed`].
pub const KIND: &str = "opcua_ack";

/// An acknowledgement in twinops waiting to be passed on to the server.
#[derive(Debug, Clone, PartialEq)]
pub struct Due {
    /// This node's journal row of the acknowledgement.
    pub journal_id: i64,
    pub passed: Passed,
    /// The condition's last event, by EventId in hex: the one the Acknowledge names.
    pub opcua_event: String,
}

/// An acknowledgement that was passed on, and what the server answered.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Passed {
    /// The occurrence's event id (`alarms.event_id`).
    pub event_id: String,
    /// Who acknowledged it in twinops, and when (unix seconds).
    pub acked_by: String,
    pub acked_at: i64,
    /// The condition's node, as `NodeRef` text.
    pub condition: String,
    /// The server's answer (a status code), or why it was not asked.
    pub result: String,
}

/// The acknowledgements made in twinops (not at the server: actor `opcua`) of alarms
/// on OPC UA conditions since the condition last changed, not yet passed on; oldest
/// first, at most 100.
pub fn due(c: &Connection) -> Result<Vec<Due>, StoreError> {
    let rows = c
        .prepare_cached(
            "SELECT e.id, a.event_id, e.actor, e.at, c.condition, c.event_id FROM alarm_events e
             JOIN alarms a ON a.id = e.alarm_id
             JOIN opcua_conditions c ON c.asset_id = a.asset_id AND c.code = a.code
                  AND coalesce(c.sensor_id, '') = coalesce(a.sensor_id, '')
             WHERE e.kind = 'acknowledged' AND e.actor != 'opcua' AND e.at >= c.changed_at - 1
               AND c.event_id IS NOT NULL AND e.id NOT IN (SELECT alarm_event_id FROM opcua_acks)
             ORDER BY e.id LIMIT 100",
        )?
        .query_map([], |r| {
            let passed = Passed {
                event_id: r.get(1)?,
                acked_by: r.get(2)?,
                acked_at: r.get(3)?,
                condition: r.get(4)?,
                result: String::new(),
            };
            Ok(Due { journal_id: r.get(0)?, passed, opcua_event: r.get(5)? })
        })?
        .collect::<Result<Vec<_>, _>>()?;
    Ok(rows)
}

/// Records that the acknowledgement `journal_id` was passed on, once: a second record
/// of it (the log bringing back what this node recorded while the broker was away)
/// changes nothing.
pub fn record(c: &Connection, journal_id: i64, passed: &Passed) -> Result<(), StoreError> {
    let now = Timestamp::now().unix();
    let new = c
        .prepare_cached("INSERT OR IGNORE INTO opcua_acks (alarm_event_id, at, result) VALUES (?1, ?2, ?3)")?
        .execute(params![journal_id, now, passed.result])?;
    if new == 1 {
        let detail = format!(
            "acknowledgement by {} passed on to the OPC UA condition {}: {}",
            passed.acked_by, passed.condition, passed.result
        );
        c.prepare_cached(
            "INSERT INTO audit_log (at, actor, action, detail) VALUES (?1, 'opcua', 'opcua_acknowledge', ?2)",
        )?
        .execute(params![now, detail])?;
    }
    Ok(())
}

/// Applies a [`Passed`] from the pair's log on this node: the acknowledgement it names
/// is recorded as passed on. Answers as a decision does: 200, 202 while the occurrence
/// has not arrived here (applied when it does), 404 for an acknowledgement this node
/// does not have.
pub fn apply(c: &Connection, passed: &Passed) -> Result<(u16, Value), StoreError> {
    let alarm: Option<i64> = c
        .prepare_cached("SELECT id FROM alarms WHERE event_id = ?1")?
        .query_row([&passed.event_id], |r| r.get(0))
        .optional()?;
    let Some(alarm) = alarm else {
        let waiting = format!(
            "the alarm occurrence with event id '{}' has not arrived on this node yet; the record that its \
             acknowledgement was passed on to OPC UA is made when it does",
            passed.event_id
        );
        return Ok((202, json!({"waiting": waiting})));
    };
    let journal: Option<i64> = c
        .prepare_cached(
            "SELECT id FROM alarm_events WHERE alarm_id = ?1 AND kind = 'acknowledged' AND at = ?2 AND actor = ?3
             ORDER BY id LIMIT 1",
        )?
        .query_row(params![alarm, passed.acked_at, passed.acked_by], |r| r.get(0))
        .optional()?;
    let Some(journal_id) = journal else {
        let error = format!(
            "occurrence {} has no acknowledgement by {} at {} on this node",
            passed.event_id, passed.acked_by, passed.acked_at
        );
        return Ok((404, json!({"error": error})));
    };
    record(c, journal_id, passed)?;
    Ok((200, json!({"journal_id": journal_id, "result": passed.result})))
}
