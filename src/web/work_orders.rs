//! The work-order endpoints: the list, and a supervisor's decision.

use std::sync::Arc;

use axum::extract::{Extension, Json, Path, Query, State};
use axum::http::StatusCode;
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::{Value, json};

use super::{ApiError, WebState};
use crate::accounts::User;
use crate::approvals::{self, DecisionError};
use crate::domain::Timestamp;

type S = Arc<WebState>;

#[derive(Deserialize, JsonSchema)]
pub(super) struct StatusQuery {
    /// Only work orders in this status: pending_approval, approved, rejected, expired, dispatched.
    #[schemars(extend("enum" = ["pending_approval", "approved", "rejected", "expired", "dispatched"]))]
    status: Option<String>,
}

pub(super) async fn work_orders(State(s): State<S>, Query(q): Query<StatusQuery>) -> Result<Json<Value>, ApiError> {
    let status = q.status.as_deref().map(crate::domain::WorkOrderStatus::parse).transpose();
    let rows = approvals::list(&*s.store.read()?, status.map_err(ApiError::bad_request)?)?;
    Ok(Json(json!({"work_orders": rows})))
}

/// A work-order decision, or taking an alarm's point out of service, needs a reason; it
/// goes in the record and the journal or audit log.
#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ReasonRequest {
    /// E.g. "permit 4471: suction transmitter replaced" (not blank).
    #[schemars(length(min = 1, max = 2000), pattern(r"\S"))]
    #[serde(deserialize_with = "reason")]
    pub reason: String,
}

/// The most characters a reason may have, as openapi.json states it.
const MAX_REASON_CHARS: usize = 2000;

/// A reason no longer than the schema states, checked as it is read: a request that
/// breaks it is refused (422, naming the field) before anything is decided. A blank
/// one is the decision's own refusal (400).
fn reason<'de, D: serde::Deserializer<'de>>(d: D) -> Result<String, D::Error> {
    let reason = String::deserialize(d)?;
    let chars = reason.chars().count();
    if chars > MAX_REASON_CHARS {
        return Err(serde::de::Error::custom(format!(
            "the reason has {chars} characters; at most {MAX_REASON_CHARS}: keep it to what the record needs"
        )));
    }
    Ok(reason)
}

/// A supervisor's decision on work order `id`: recorded at once, or, of a redundant
/// pair, through its decision log (the order named by its key), answered once it has
/// come back and been applied here.
pub(super) async fn decide(s: S, user: User, id: i64, approve: bool, reason: String) -> Result<Json<Value>, ApiError> {
    if let Some(pair) = &s.cluster {
        let key = approvals::pair::key_of(&*s.store.read()?, id)?
            .ok_or_else(|| ApiError::not_found(format!("no work order {id}; GET /api/work_orders lists them")))?;
        let op = approvals::pair::WorkOrderOp::Decide { key, approve, reason };
        let args = serde_json::to_value(op).map_err(|e| ApiError::internal(anyhow::Error::from(e)))?;
        return pair.decide(approvals::pair::KIND, args, &user.name).await;
    }
    let w = s.store.writer().clone();
    let status =
        tokio::task::spawn_blocking(move || approvals::decide(&w, id, &user.name, approve, &reason, Timestamp::now()))
            .await?
            .map_err(decision_error)?;
    Ok(Json(json!({"id": id, "status": status})))
}

/// A refused decision as the API answers it.
fn decision_error(e: DecisionError) -> ApiError {
    match e {
        DecisionError::Store(e) => e.into(),
        e => {
            ApiError::new(StatusCode::from_u16(approvals::status_of(&e)).unwrap_or(StatusCode::CONFLICT), e.to_string())
        }
    }
}

pub(super) async fn approve(
    State(s): State<S>,
    Extension(user): Extension<User>,
    Path(id): Path<i64>,
    Json(req): Json<ReasonRequest>,
) -> Result<Json<Value>, ApiError> {
    decide(s, user, id, true, req.reason).await
}

pub(super) async fn reject(
    State(s): State<S>,
    Extension(user): Extension<User>,
    Path(id): Path<i64>,
    Json(req): Json<ReasonRequest>,
) -> Result<Json<Value>, ApiError> {
    decide(s, user, id, false, req.reason).await
}

#[derive(Deserialize, JsonSchema)]
pub(super) struct ChangeStatusQuery {
    /// Only alarm changes in this status: pending_approval, approved, rejected, expired, lifted.
    #[schemars(extend("enum" = ["pending_approval", "approved", "rejected", "expired", "lifted"]))]
    status: Option<String>,
}

pub(super) async fn alarm_changes(
    State(s): State<S>,
    Query(q): Query<ChangeStatusQuery>,
) -> Result<Json<Value>, ApiError> {
    let status = q.status.as_deref().map(crate::domain::AlarmChangeStatus::parse).transpose();
    let rows = approvals::alarm_changes::list(&*s.store.read()?, status.map_err(ApiError::bad_request)?)?;
    Ok(Json(json!({"alarm_changes": rows})))
}

/// Of a redundant pair: an alarm-change decision through its decision log, the change
/// named by the id both nodes know it by.
async fn change_through_pair(
    s: &S,
    user: &User,
    id: i64,
    op: impl FnOnce(String) -> approvals::pair::AlarmChangeOp,
) -> Option<Result<Json<Value>, ApiError>> {
    let pair = s.cluster.as_ref()?;
    let uid = match s.store.read().map_err(ApiError::from).and_then(|db| Ok(approvals::pair::uid_of(&db, id)?)) {
        Ok(Some(uid)) => uid,
        Ok(None) => {
            return Some(Err(ApiError::not_found(format!(
                "no alarm change {id} on this node; GET /api/alarm-changes lists them"
            ))));
        }
        Err(e) => return Some(Err(e)),
    };
    let args = match serde_json::to_value(op(uid)) {
        Ok(a) => a,
        Err(e) => return Some(Err(ApiError::internal(anyhow::Error::from(e)))),
    };
    Some(pair.decide(approvals::pair::CHANGE_KIND, args, &user.name).await)
}

async fn decide_change(s: S, user: User, id: i64, approve: bool, reason: String) -> Result<Json<Value>, ApiError> {
    use approvals::alarm_changes;
    let shared = |uid| approvals::pair::AlarmChangeOp::Decide { uid, approve, reason: reason.clone() };
    if let Some(answer) = change_through_pair(&s, &user, id, shared).await {
        return answer;
    }
    let w = s.store.writer().clone();
    let status = tokio::task::spawn_blocking(move || {
        alarm_changes::decide(&w, id, &user.name, approve, &reason, Timestamp::now())
    })
    .await?
    .map_err(decision_error)?;
    Ok(Json(json!({"id": id, "status": status})))
}

pub(super) async fn approve_change(
    State(s): State<S>,
    Extension(user): Extension<User>,
    Path(id): Path<i64>,
    Json(req): Json<ReasonRequest>,
) -> Result<Json<Value>, ApiError> {
    decide_change(s, user, id, true, req.reason).await
}

/// Lifts a designed suppression in force: its point annunciates again; what it holds
/// now and is still active is annunciated and triaged.
pub(super) async fn lift_change(
    State(s): State<S>,
    Extension(user): Extension<User>,
    Path(id): Path<i64>,
    Json(req): Json<ReasonRequest>,
) -> Result<Json<Value>, ApiError> {
    let shared = |uid| approvals::pair::AlarmChangeOp::Lift { uid, reason: req.reason.clone() };
    if let Some(answer) = change_through_pair(&s, &user, id, shared).await {
        return answer;
    }
    let (w, queue) = (s.store.writer().clone(), s.queue);
    let released = tokio::task::spawn_blocking(move || {
        approvals::alarm_changes::lift(&w, id, &user.name, &req.reason, Timestamp::now(), queue)
    })
    .await?
    .map_err(decision_error)?;
    Ok(Json(json!({"id": id, "status": "lifted", "annunciated": released})))
}

pub(super) async fn reject_change(
    State(s): State<S>,
    Extension(user): Extension<User>,
    Path(id): Path<i64>,
    Json(req): Json<ReasonRequest>,
) -> Result<Json<Value>, ApiError> {
    decide_change(s, user, id, false, req.reason).await
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::{AlarmChangeStatus, WorkOrderStatus};

    /// The statuses openapi.json lists are the vocabularies the server parses.
    #[test]
    fn the_status_queries_list_every_status() {
        let listed = |schema: schemars::Schema| -> Vec<String> {
            let v = schema.to_value();
            v["properties"]["status"]["enum"]
                .as_array()
                .unwrap()
                .iter()
                .map(|s| s.as_str().unwrap().to_string())
                .collect()
        };
        let all = |names: Vec<&str>| names.into_iter().map(String::from).collect::<Vec<_>>();
        assert_eq!(
            listed(schemars::schema_for!(StatusQuery)),
            all(WorkOrderStatus::ALL.iter().map(|s| s.as_str()).collect())
        );
        assert_eq!(
            listed(schemars::schema_for!(ChangeStatusQuery)),
            all(AlarmChangeStatus::ALL.iter().map(|s| s.as_str()).collect())
        );
    }
}
