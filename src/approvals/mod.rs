//! The only code that writes `work_orders`.
//!
//! Architecture Invariant: the agent can reach [`Approvals::propose`],
//! [`Approvals::propose_alarm_change`] and [`Approvals::propose_suppression`] and
//! nothing else here. Moving a work order or
//! an alarm change out of `pending_approval` takes an authenticated human, or the
//! expiry schedule ([`Approvals::expire_due`], [`alarm_changes::expire_due`]) when
//! nobody decided in time; no tool, model reply or agent code path calls those functions.

pub mod alarm_changes;
pub mod pair;

use std::sync::Arc;

use rusqlite::{Connection, OptionalExtension, params};
use serde::{Deserialize, Serialize};

use crate::cluster::log::{DecisionLog, SubmitError};
use crate::domain::{Timestamp, WorkOrderDraft, WorkOrderStatus};
use crate::store::{StoreError, Writer};

/// How long a proposal waits for a decision before it expires.
pub const DEFAULT_TTL_SECS: i64 = 72 * 3600;

/// Who proposed: an agent run or a person.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Proposer {
    Run(i64),
    User(String),
}

impl Proposer {
    /// The proposing run, when an agent proposed.
    fn run_id(&self) -> Option<i64> {
        match self {
            Proposer::Run(id) => Some(*id),
            Proposer::User(_) => None,
        }
    }

    fn label(&self) -> String {
        match self {
            Proposer::Run(id) => format!("agent:run/{id}"),
            Proposer::User(name) => name.clone(),
        }
    }
}

/// What proposing did.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Proposal {
    pub work_order_id: i64,
    pub status: WorkOrderStatus,
    /// False when a proposal with the same intent already existed; nothing new was written.
    pub created: bool,
    pub idempotency_key: String,
    pub decided_by: Option<String>,
    pub decision_reason: Option<String>,
}

/// The capability to park proposals. Cheap to clone.
#[derive(Clone)]
pub struct Approvals {
    writer: Writer,
    /// Of a redundant pair, its decision log: work orders go through it.
    log: Option<Arc<DecisionLog>>,
}

/// Why a proposal was not recorded.
#[derive(Debug, thiserror::Error)]
pub enum ProposeError {
    #[error(transparent)]
    Store(#[from] StoreError),
    /// Of a pair: the decision log could not carry it.
    #[error(transparent)]
    Pair(#[from] SubmitError),
    /// Of a pair: the log carried it and this node refused it (the reason).
    #[error("{0}")]
    Refused(String),
}

impl Approvals {
    pub fn new(writer: Writer) -> Approvals {
        Approvals { writer, log: None }
    }

    /// Of a redundant pair: work orders are proposed, decided and expired through `log`.
    pub fn of_pair(writer: Writer, log: Arc<DecisionLog>) -> Approvals {
        Approvals { writer, log: Some(log) }
    }

    /// The pair's decision log, if this node is one of a pair.
    pub fn log(&self) -> Option<&Arc<DecisionLog>> {
        self.log.as_ref()
    }

    /// Records `draft` as `pending_approval`, or returns the existing work order with the
    /// same intent key unchanged. Of a pair, through its decision log, answered once
    /// applied here: call it from a blocking thread of the runtime (`spawn_blocking`).
    pub fn propose(&self, draft: WorkOrderDraft, by: Proposer, now: Timestamp) -> Result<Proposal, ProposeError> {
        let Some(log) = &self.log else {
            return Ok(self.writer.call(move |conn| propose_in(conn, &draft, &by, now))?);
        };
        let alarm = draft.alarm_id();
        let event_id: Option<String> = self.writer.call(move |c| -> Result<_, StoreError> {
            let Some(alarm) = alarm else { return Ok(None) };
            Ok(c.prepare_cached("SELECT event_id FROM alarms WHERE id = ?1")?
                .query_row([alarm], |r| r.get(0))
                .optional()?
                .flatten())
        })?;
        let op = pair::WorkOrderOp::Propose(pair::Proposed::of(&draft, event_id, &by, now));
        submit_waiting(log, pair::KIND, &op, &by)
    }

    /// Parks a proposed change of a point's settings with its replay as evidence
    /// ([`alarm_changes::park`]), or returns the change of the same point already
    /// awaiting a decision.
    pub fn propose_alarm_change(
        &self,
        target: &crate::alarms::replay::Target,
        proposed: crate::alarms::replay::Settings,
        reason: &str,
        evidence: &crate::alarms::replay::Comparison,
        by: Proposer,
        now: Timestamp,
    ) -> Result<alarm_changes::ChangeProposal, ProposeError> {
        let parked = alarm_changes::Parked::settings(target, proposed, reason, evidence, &by, now);
        let Some(log) = &self.log else {
            return Ok(self.writer.call(move |c| alarm_changes::park(c, &parked, None))?);
        };
        submit_waiting(log, pair::CHANGE_KIND, &pair::AlarmChangeOp::Propose(Box::new(parked)), &by)
    }

    /// Parks a proposed designed suppression (`follower` suppressed while `leader` is
    /// active) with its evidence ([`alarm_changes::park`]).
    pub fn propose_suppression(
        &self,
        leader: &crate::alarms::definitions::Point,
        follower: &crate::alarms::definitions::Point,
        reason: &str,
        evidence: &impl Serialize,
        by: Proposer,
        now: Timestamp,
    ) -> Result<alarm_changes::ChangeProposal, ProposeError> {
        let parked = alarm_changes::Parked::suppression((leader, follower), reason, evidence, &by, now);
        let Some(log) = &self.log else {
            return Ok(self.writer.call(move |c| alarm_changes::park(c, &parked, None))?);
        };
        submit_waiting(log, pair::CHANGE_KIND, &pair::AlarmChangeOp::Propose(Box::new(parked)), &by)
    }
}

impl Approvals {
    /// Marks proposals still pending past their expiry as `expired`, returning their
    /// ids: a stale proposal must not be approved days later on old evidence. Of a
    /// pair, through its log (in order with approvals; either node may ask).
    pub async fn expire_due(&self, now: Timestamp) -> Result<Vec<i64>, ProposeError> {
        let Some(log) = &self.log else {
            return Ok(self.writer.call_async(move |c| expire_in(c, now)).await?);
        };
        let op = serde_json::to_value(pair::WorkOrderOp::Expire).unwrap_or_default();
        let due = "SELECT EXISTS (SELECT 1 FROM work_orders WHERE status = 'pending_approval' AND expires_at <= ?1)";
        self.expire_through(log, (pair::KIND, op), due, now).await
    }

    /// [`Approvals::expire_due`] for alarm changes ([`alarm_changes::expire_due`]).
    pub async fn expire_changes_due(&self, now: Timestamp) -> Result<Vec<i64>, ProposeError> {
        let Some(log) = &self.log else {
            return Ok(self
                .writer
                .call_async(move |c| Ok::<_, StoreError>(alarm_changes::expire_due(c, now)?))
                .await?);
        };
        let op = serde_json::to_value(pair::AlarmChangeOp::Expire).unwrap_or_default();
        let due = "SELECT EXISTS (SELECT 1 FROM alarm_changes WHERE status = 'pending_approval' AND expires_at <= ?1)";
        self.expire_through(log, (pair::CHANGE_KIND, op), due, now).await
    }

    /// Sends an expiry through the pair's log when `due` (a query of `?1`, now) says
    /// something is due here.
    async fn expire_through(
        &self,
        log: &DecisionLog,
        (kind, op): (&str, serde_json::Value),
        due: &'static str,
        now: Timestamp,
    ) -> Result<Vec<i64>, ProposeError> {
        let due: bool = self
            .writer
            .call_async(move |c| -> Result<bool, StoreError> {
                Ok(c.prepare_cached(due)?.query_row([now.unix()], |r| r.get(0))?)
            })
            .await?;
        if !due {
            return Ok(Vec::new());
        }
        let (_, body) = log.submit(kind, op, "twinops").await?;
        Ok(serde_json::from_value(body["expired"].clone()).unwrap_or_default())
    }
}

/// Sends a proposal through a pair's `log` from a blocking thread of the runtime, and
/// reads how it went on this node.
fn submit_waiting<T: serde::de::DeserializeOwned>(
    log: &DecisionLog,
    kind: &str,
    op: &impl Serialize,
    by: &Proposer,
) -> Result<T, ProposeError> {
    let args = serde_json::to_value(op).map_err(|e| ProposeError::Refused(e.to_string()))?;
    let (status, body) = tokio::runtime::Handle::current().block_on(log.submit(kind, args, &by.label()))?;
    match serde_json::from_value::<T>(body.clone()) {
        Ok(answer) if status == 200 => Ok(answer),
        _ => Err(ProposeError::Refused(body["error"].as_str().unwrap_or("refused by this node").to_string())),
    }
}

/// Expires what is pending past its expiry at `now`; the ids.
fn expire_in(c: &Connection, now: Timestamp) -> Result<Vec<i64>, StoreError> {
    let mut stmt = c.prepare_cached(
        "UPDATE work_orders SET status = 'expired', decided_by = 'twinops', decided_at = ?1,
                decision_reason = 'no decision before the proposal expired'
         WHERE status = 'pending_approval' AND expires_at <= ?1 RETURNING id",
    )?;
    let ids = stmt.query_map([now.unix()], |r| r.get(0))?.collect::<Result<Vec<i64>, _>>()?;
    Ok(ids)
}

/// The outbox published the decision on work order `id` (its `status`) at `now`: an
/// approved order becomes `dispatched`.
pub fn mark_published(c: &Connection, id: i64, status: &str, now: Timestamp) -> Result<(), StoreError> {
    let next = if status == "approved" { "dispatched" } else { status };
    c.prepare_cached(
        "UPDATE work_orders SET published = ?2,
             dispatched_at = CASE WHEN status = 'approved' THEN ?3 ELSE dispatched_at END,
             status = CASE WHEN status = 'approved' THEN 'dispatched' ELSE status END
         WHERE id = ?1",
    )?
    .execute(params![id, next, now.unix()])?;
    Ok(())
}

/// Why a decision (of a work order or an alarm change) was refused.
#[derive(Debug, thiserror::Error)]
pub enum DecisionError {
    #[error("no {what} {id}; {list} lists them")]
    NotFound { what: &'static str, id: i64, list: &'static str },
    #[error("{what} {id} is {status}; only pending_approval ones can be decided")]
    NotPending { what: &'static str, id: i64, status: String },
    #[error("give a reason for the decision (it goes in the record)")]
    NoReason,
    /// The decision cannot be carried out as the twin stands (an alarm change that
    /// would put a sensor's limits out of order).
    #[error("{0}")]
    Conflict(String),
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// A decision's reason, trimmed; an empty one is refused (it goes in the record).
fn decision_reason(reason: &str) -> Result<String, DecisionError> {
    let reason = reason.trim();
    if reason.is_empty() { Err(DecisionError::NoReason) } else { Ok(reason.to_string()) }
}

impl From<rusqlite::Error> for DecisionError {
    fn from(e: rusqlite::Error) -> Self {
        DecisionError::Store(e.into())
    }
}

/// The HTTP status a refused decision answers with.
pub fn status_of(e: &DecisionError) -> u16 {
    match e {
        DecisionError::NotFound { .. } => 404,
        DecisionError::NotPending { .. } | DecisionError::Conflict(_) => 409,
        DecisionError::NoReason => 400,
        DecisionError::Store(_) => 500,
    }
}

/// A supervisor approves or rejects a pending proposal. The caller has checked the
/// role; this records who, when and why, and audits it. Approved work orders are then
/// published and marked `dispatched` by `notify`.
pub fn decide(
    writer: &Writer,
    id: i64,
    supervisor: &str,
    approve: bool,
    reason: &str,
    now: Timestamp,
) -> Result<WorkOrderStatus, DecisionError> {
    let (supervisor, reason) = (supervisor.to_string(), reason.to_string());
    writer.call(move |c| decide_in(c, id, &supervisor, approve, &reason, now))
}

fn decide_in(
    c: &Connection,
    id: i64,
    supervisor: &str,
    approve: bool,
    reason: &str,
    now: Timestamp,
) -> Result<WorkOrderStatus, DecisionError> {
    let reason = decision_reason(reason)?;
    let status: WorkOrderStatus = c
        .prepare_cached("SELECT status FROM work_orders WHERE id = ?1")?
        .query_row([id], |r| r.get(0))
        .optional()?
        .ok_or(DecisionError::NotFound { what: "work order", id, list: "GET /api/work_orders" })?;
    if status != WorkOrderStatus::PendingApproval {
        return Err(DecisionError::NotPending { what: "work order", id, status: status.to_string() });
    }
    let next = if approve { WorkOrderStatus::Approved } else { WorkOrderStatus::Rejected };
    c.prepare_cached(
        "UPDATE work_orders SET status = ?2, decided_by = ?3, decided_at = ?4, decision_reason = ?5 WHERE id = ?1",
    )?
    .execute(params![id, next, supervisor, now.unix(), reason])?;
    audit(c, now, supervisor, &format!("work_order_{next}"), &format!("work order {id}: {reason}"))?;
    Ok(next)
}

/// One line of the audit log: who did what, when.
fn audit(c: &Connection, now: Timestamp, actor: &str, action: &str, detail: &str) -> rusqlite::Result<()> {
    c.prepare_cached("INSERT INTO audit_log (at, actor, action, detail) VALUES (?1, ?2, ?3, ?4)")?.execute(params![
        now.unix(),
        actor,
        action,
        detail
    ])?;
    Ok(())
}

fn propose_in(
    conn: &Connection,
    draft: &WorkOrderDraft,
    by: &Proposer,
    now: Timestamp,
) -> Result<Proposal, StoreError> {
    let row = pair::Proposed::of(draft, None, by, now);
    let inserted = insert(conn, &row, draft.alarm_id(), row.run_id)?;
    proposal_of(conn, &row.key, inserted)
}

/// Inserts `p` as `pending_approval` on this node's `alarm_id` and `run_id`, unless an
/// order with its key exists; whether it was inserted.
fn insert(c: &Connection, p: &pair::Proposed, alarm_id: Option<i64>, run_id: Option<i64>) -> Result<bool, StoreError> {
    let inserted = c
        .prepare_cached(
            "INSERT INTO work_orders (idempotency_key, asset_id, alarm_id, action, priority, title,
                                      justification, evidence, status, proposed_by, run_id,
                                      proposed_at, expires_at)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, 'pending_approval', ?9, ?10, ?11, ?12)
             ON CONFLICT (idempotency_key) DO NOTHING",
        )?
        .execute(params![
            p.key,
            p.asset_id,
            alarm_id,
            p.action,
            p.priority,
            p.title,
            p.justification,
            serde_json::to_string(&p.evidence).expect("strings serialize"),
            p.proposed_by,
            run_id,
            p.proposed_at,
            p.proposed_at + DEFAULT_TTL_SECS
        ])?;
    Ok(inserted == 1)
}

/// The work order with intent `key` (just inserted or already present) as proposing answers.
fn proposal_of(c: &Connection, key: &str, created: bool) -> Result<Proposal, StoreError> {
    let (work_order_id, status, decided_by, decision_reason) = c
        .prepare_cached("SELECT id, status, decided_by, decision_reason FROM work_orders WHERE idempotency_key = ?1")?
        .query_row([key], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?)))?;
    Ok(Proposal { work_order_id, status, created, idempotency_key: key.to_string(), decided_by, decision_reason })
}
/// Work orders by status: the gauge.
pub fn counts(db: &Connection) -> rusqlite::Result<Vec<(String, i64)>> {
    let mut stmt = db.prepare_cached("SELECT status, count(*) FROM work_orders GROUP BY 1")?;
    let rows = stmt.query_map([], |r| Ok((r.get(0)?, r.get(1)?)))?;
    rows.collect()
}

/// The latest 200 work orders, newest first, in `status` when given, as the HMI lists them.
pub fn list(db: &Connection, status: Option<WorkOrderStatus>) -> rusqlite::Result<Vec<serde_json::Value>> {
    let mut stmt = db.prepare_cached(
        "SELECT json_object('id', id, 'asset_id', asset_id, 'alarm_id', alarm_id, 'action', action, 'priority', priority,
                'title', title, 'justification', justification, 'evidence', json(evidence), 'status', status,
                'proposed_by', proposed_by, 'run_id', run_id, 'proposed_at', rfc3339(proposed_at), 'expires_at', rfc3339(expires_at),
                'decided_by', decided_by, 'decided_at', rfc3339(decided_at), 'decision_reason', decision_reason,
                'dispatched_at', rfc3339(dispatched_at))
         FROM work_orders WHERE ?1 IS NULL OR status = ?1 ORDER BY proposed_at DESC, id DESC LIMIT 200",
    )?;
    crate::store::json_rows(&mut stmt, [status])
}
