//! Work orders and alarm changes of a redundant pair: proposed, decided (published,
//! lifted) and expired through the pair's decision log (`cluster::log`), and applied by
//! both nodes in its order, so that either node's HMI shows the same and a second
//! approval is a 409 on both. Local ids differ between the nodes: an order is named on
//! both by its intent key (`work_orders.idempotency_key`), made from its alarm's event
//! id; an alarm change by the id of the decision that proposed it (`alarm_changes.uid`).

use rusqlite::{Connection, OptionalExtension};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use super::alarm_changes::{self, Parked};
use super::{DecisionError, Proposer};
use crate::cluster::log::Decision;
use crate::domain::{Timestamp, WorkAction, WorkOrderDraft, WorkPriority};
use crate::store::StoreError;

/// The decision log's kind for [`WorkOrderOp`]s.
pub const KIND: &str = "work_order";

/// The decision log's kind for [`AlarmChangeOp`]s.
pub const CHANGE_KIND: &str = "alarm_change";

/// What a decision about alarm changes does.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(tag = "op", rename_all = "snake_case")]
pub enum AlarmChangeOp {
    /// Park a proposed change (or find the one with the same intent).
    Propose(Box<Parked>),
    /// A supervisor's approval or rejection (an approved settings change is applied).
    Decide { uid: String, approve: bool, reason: String },
    /// A supervisor lifts a suppression in force.
    Lift { uid: String, reason: String },
    /// Changes still pending past their expiry, as of the decision's time, expire.
    Expire,
}

/// Applies `op`, decided as `d` says (its id names a proposal on both nodes), to this
/// node (`here`); the outcome is an HTTP status and the body to answer with.
pub fn apply_change(
    c: &Connection,
    op: &AlarmChangeOp,
    d: &Decision,
    here: &str,
    queue: crate::alarms::QueuePolicy,
) -> Result<(u16, Value), StoreError> {
    let at = Timestamp::from_unix(d.at);
    match op {
        AlarmChangeOp::Propose(p) => {
            let p = Parked { run_id: p.run_id.filter(|_| d.node == here), ..(**p).clone() };
            Ok((200, serde_json::to_value(alarm_changes::park(c, &p, Some(&d.id))?).unwrap_or(Value::Null)))
        }
        AlarmChangeOp::Decide { uid, approve, reason } => {
            let Some(id) = change_of(c, uid)? else { return Ok(unknown_change(uid)) };
            match alarm_changes::decide_in(c, id, &d.actor, *approve, reason, at) {
                Ok(status) => Ok((200, json!({"id": id, "status": status}))),
                Err(e) => refused(e),
            }
        }
        AlarmChangeOp::Lift { uid, reason } => {
            let Some(id) = change_of(c, uid)? else { return Ok(unknown_change(uid)) };
            match alarm_changes::lift_in(c, id, &d.actor, reason, at, queue) {
                Ok(released) => Ok((200, json!({"id": id, "status": "lifted", "annunciated": released}))),
                Err(e) => refused(e),
            }
        }
        AlarmChangeOp::Expire => Ok((200, json!({"expired": alarm_changes::expire_due(c, at)?}))),
    }
}

/// A refused decision as its outcome; a store error stays one (the decision comes again).
fn refused(e: DecisionError) -> Result<(u16, Value), StoreError> {
    match e {
        DecisionError::Store(e) => Err(e),
        e => Ok((super::status_of(&e), json!({"error": e.to_string()}))),
    }
}

fn change_of(c: &Connection, uid: &str) -> Result<Option<i64>, StoreError> {
    Ok(c.prepare_cached("SELECT id FROM alarm_changes WHERE uid = ?1")?.query_row([uid], |r| r.get(0)).optional()?)
}

fn unknown_change(uid: &str) -> (u16, Value) {
    let error = format!("no alarm change named '{uid}' on this node; GET /api/alarm-changes lists them");
    (404, json!({"error": error}))
}

/// The id that names alarm change `id` on both nodes of a pair (one made alone, on a
/// node and the copy of its twin); none for an unknown id.
pub fn uid_of(c: &Connection, id: i64) -> Result<Option<String>, StoreError> {
    Ok(c.prepare_cached("SELECT uid FROM alarm_changes WHERE id = ?1")?
        .query_row([id], |r| r.get(0))
        .optional()?
        .flatten())
}

/// What a decision about work orders does.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(tag = "op", rename_all = "snake_case")]
pub enum WorkOrderOp {
    /// Park a proposal (or find the one with the same key).
    Propose(Proposed),
    /// A supervisor's approval or rejection.
    Decide { key: String, approve: bool, reason: String },
    /// The acting node published the decision on `status`: an approved order is
    /// dispatched.
    Published { key: String, status: String },
    /// Proposals still pending past their expiry, as of the decision's time, expire.
    Expire,
}

/// A proposal as both nodes record it.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Proposed {
    pub key: String,
    pub asset_id: String,
    pub alarm_event_id: Option<String>,
    pub action: WorkAction,
    pub priority: WorkPriority,
    pub title: String,
    pub justification: String,
    pub evidence: Vec<String>,
    pub proposed_by: String,
    /// The proposing agent run, on the node it ran on only.
    pub run_id: Option<i64>,
    pub proposed_at: i64,
}

impl Proposed {
    /// `draft` as proposed by `by` at `now`; `event_id` is its alarm's.
    pub fn of(draft: &WorkOrderDraft, event_id: Option<String>, by: &Proposer, now: Timestamp) -> Proposed {
        let key = match (&event_id, draft.alarm_id()) {
            (Some(event), _) => format!("event:{event}/{}/{}", draft.asset_id(), draft.action()),
            _ => draft.intent_key(&now.date()),
        };
        Proposed {
            key,
            asset_id: draft.asset_id().to_string(),
            alarm_event_id: event_id,
            action: draft.action(),
            priority: draft.priority(),
            title: draft.title().into(),
            justification: draft.justification().into(),
            evidence: draft.evidence().iter().map(|c| c.as_str().to_string()).collect(),
            proposed_by: by.label(),
            run_id: by.run_id(),
            proposed_at: now.unix(),
        }
    }
}

/// Applies `op`, decided as `d` says, to this node (`here`); the outcome is an HTTP
/// status and the body to answer with.
pub fn apply(c: &Connection, op: &WorkOrderOp, d: &Decision, here: &str) -> Result<(u16, Value), StoreError> {
    let at = Timestamp::from_unix(d.at);
    match op {
        WorkOrderOp::Propose(p) => propose(c, p, here == d.node),
        WorkOrderOp::Decide { key, approve, reason } => {
            let Some(id) = id_of(c, key)? else { return Ok(unknown(key)) };
            match super::decide_in(c, id, &d.actor, *approve, reason, at) {
                Ok(status) => Ok((200, json!({"id": id, "status": status}))),
                Err(e) => refused(e),
            }
        }
        WorkOrderOp::Published { key, status } => {
            let Some(id) = id_of(c, key)? else { return Ok(unknown(key)) };
            super::mark_published(c, id, status, at)?;
            Ok((200, json!({"id": id})))
        }
        WorkOrderOp::Expire => Ok((200, json!({"expired": super::expire_in(c, at)?}))),
    }
}

fn propose(c: &Connection, p: &Proposed, ours: bool) -> Result<(u16, Value), StoreError> {
    let alarm_id: Option<i64> = match &p.alarm_event_id {
        Some(event) => {
            let id = c
                .prepare_cached("SELECT id FROM alarms WHERE event_id = ?1")?
                .query_row([event], |r| r.get(0))
                .optional()?;
            // Linked to its alarm on this node too: it waits until the alarm is here.
            if id.is_none() {
                let waiting = format!("the alarm occurrence '{event}' this order answers has not arrived here yet");
                return Ok((202, json!({"waiting": waiting})));
            }
            id
        }
        None => None,
    };
    let inserted = super::insert(c, p, alarm_id, p.run_id.filter(|_| ours))?;
    let proposal = super::proposal_of(c, &p.key, inserted)?;
    Ok((200, serde_json::to_value(proposal).unwrap_or(Value::Null)))
}

fn id_of(c: &Connection, key: &str) -> Result<Option<i64>, StoreError> {
    Ok(c.prepare_cached("SELECT id FROM work_orders WHERE idempotency_key = ?1")?
        .query_row([key], |r| r.get(0))
        .optional()?)
}

fn unknown(key: &str) -> (u16, Value) {
    (404, json!({"error": format!("no work order with key '{key}' on this node; GET /api/work_orders lists them")}))
}

/// The key that names work order `id` on both nodes of a pair.
pub fn key_of(c: &Connection, id: i64) -> Result<Option<String>, StoreError> {
    Ok(c.prepare_cached("SELECT idempotency_key FROM work_orders WHERE id = ?1")?
        .query_row([id], |r| r.get(0))
        .optional()?)
}
