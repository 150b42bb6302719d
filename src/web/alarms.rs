//! The alarm endpoints: the list, the summary by point, one occurrence, and the
//! operator's actions on it.

use std::sync::Arc;

use axum::extract::{Extension, Json, Path, Query, State};
use axum::http::StatusCode;
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::{Value, json};

use super::{ApiError, WebState};
use crate::accounts::User;
use crate::alarms::{self, list::AlarmFilter, list::Order, list::Scope};
use crate::decisions::{self, AlarmAction};
use crate::domain::{AssetId, Timestamp};

use super::work_orders::ReasonRequest;

type S = Arc<WebState>;

#[derive(Deserialize, JsonSchema)]
pub(super) struct AlarmQuery {
    /// Only alarms that need attention (unacknowledged, acknowledged, returned to normal unacknowledged).
    active: Option<bool>,
    /// Only alarms kept from the operators: shelved or out of service (overrides `active`).
    suppressed: Option<bool>,
    /// An asset id, e.g. PUMP-007.
    #[schemars(length(min = 1, max = 64), pattern(r"^[A-Za-z0-9][A-Za-z0-9_.:/-]*$"))]
    asset: Option<String>,
    /// With `asset` and `code`: one alarm point (`-` for an alarm of the asset itself).
    #[schemars(length(min = 1, max = 64))]
    sensor: Option<String>,
    /// An alarm code, e.g. VIB-HI.
    #[schemars(length(min = 1, max = 64))]
    code: Option<String>,
    /// Most alarms returned, 1 to 1000 (default 200).
    #[schemars(range(min = 1, max = 1000))]
    limit: Option<u32>,
}

pub(super) async fn list_alarms(State(s): State<S>, Query(q): Query<AlarmQuery>) -> Result<Json<Value>, ApiError> {
    let limit = q.limit.unwrap_or(200);
    if !(1..=1000).contains(&limit) {
        return Err(ApiError::bad_request(format!("limit {limit}: use 1 to 1000 (default 200)")));
    }
    let scope = match (q.suppressed.unwrap_or(false), q.active.unwrap_or(true)) {
        (true, _) => Scope::Suppressed,
        (false, true) => Scope::Attention,
        (false, false) => Scope::Any,
    };
    let asset =
        q.asset.as_deref().map(AssetId::parse).transpose().map_err(|e| ApiError::bad_request(format!("asset: {e}")))?;
    for (name, value) in [("sensor", &q.sensor), ("code", &q.code)] {
        if value.as_ref().is_some_and(|v| v.is_empty() || v.chars().count() > 64) {
            return Err(ApiError::bad_request(format!("{name}: 1 to 64 characters, or leave it out")));
        }
    }
    let filter =
        AlarmFilter { asset, sensor: q.sensor, code: q.code, scope, order: Order::Priority, ..Default::default() };
    let alarms = alarms::list::list(&*s.store.read()?, &filter, limit.into(), 0)?;
    Ok(Json(json!({"alarms": alarms})))
}

#[derive(Deserialize, JsonSchema)]
pub(super) struct KpiQuery {
    /// Start of the window, RFC 3339 UTC or a date, e.g. 2026-11-23T00:00:00Z (default: 7 days before `to`).
    #[schemars(extend("format" = "date-time"))]
    from: Option<String>,
    /// End of the window, exclusive, RFC 3339 UTC or a date (default: now).
    #[schemars(extend("format" = "date-time"))]
    to: Option<String>,
    /// Chattering: this many activations of one point within `chatter_window_secs`, 2 to 100 (default 3).
    #[schemars(range(min = 2, max = 100))]
    chatter_count: Option<u32>,
    /// The chattering window in seconds, 1 to 3600 (default 60).
    #[schemars(range(min = 1, max = 3600))]
    chatter_window_secs: Option<u32>,
}

/// The alarm system's performance over a window (ISA-18.2 Table 7, EEMUA 191), every
/// figure with its definition and target. A year of a large site's journal takes a
/// second or two: it runs off the async workers.
pub(super) async fn alarm_kpis(State(s): State<S>, Query(q): Query<KpiQuery>) -> Result<Json<Value>, ApiError> {
    let (from, to) =
        alarms::kpi::window(q.from.as_deref(), q.to.as_deref(), Timestamp::now()).map_err(ApiError::bad_request)?;
    let defaults = alarms::kpi::KpiSettings::default();
    let settings = alarms::kpi::KpiSettings {
        chatter_activations: q.chatter_count.map_or(defaults.chatter_activations, |n| n as usize),
        chatter_window_secs: q.chatter_window_secs.map_or(defaults.chatter_window_secs, i64::from),
        ..defaults
    };
    settings.validate().map_err(ApiError::bad_request)?;
    let store = s.store.clone();
    let figures = tokio::task::spawn_blocking(move || -> Result<Value, ApiError> {
        Ok(crate::episodes::upkeep::alarm_performance(&*store.read()?, from, to, settings)?)
    })
    .await??;
    Ok(Json(figures))
}

/// The alarm summary an operator works from: one row per point, so that a point that
/// went in and out of alarm nine times is one row saying 9, not nine rows alike.
pub(super) async fn alarm_points(State(s): State<S>) -> Result<Json<Value>, ApiError> {
    let points = alarms::list::points(&*s.store.read()?)?;
    let active = points.iter().filter(|p| p["active"] == json!(true)).count();
    Ok(Json(json!({"points": points, "active": active})))
}

pub(super) async fn alarm(State(s): State<S>, Path(id): Path<i64>) -> Result<Json<Value>, ApiError> {
    let db = s.store.read()?;
    let record = alarms::list::one(&db, id)?;
    let mut record = record.ok_or_else(|| ApiError::not_found(format!("no alarm {id}; GET /api/alarms lists them")))?;
    // The point's entry in the master alarm database, with its last changes.
    let a = &record["alarm"];
    let (asset, sensor, code) = (a["asset_id"].as_str(), a["sensor_id"].as_str(), a["code"].as_str());
    let entry = alarms::points::of(&db, asset.unwrap_or_default(), sensor, code.unwrap_or_default())?;
    let mut rationalization = alarms::points::to_json(entry.as_ref());
    if let Some(e) = &entry {
        rationalization["history"] = json!(alarms::points::history(&db, e.id, 20)?);
    }
    record["rationalization"] = rationalization;
    // Why the model's note was set aside, in words, for the note's header.
    let reasons: Vec<String> = record["note"]["flags"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|f| crate::agent::note::set_aside_reason(f.as_str()?))
        .collect();
    if let Some(note) = record.get_mut("note").filter(|n| n.is_object()) {
        note["set_aside"] = json!(reasons.first());
    }
    Ok(Json(record))
}

pub(super) fn action_error(e: alarms::ActionError) -> ApiError {
    match e {
        alarms::ActionError::Store(e) => e.into(),
        e => {
            ApiError::new(StatusCode::from_u16(decisions::status_of(&e)).unwrap_or(StatusCode::CONFLICT), e.to_string())
        }
    }
}

/// An operator's action on alarm `id`: applied at once, or, of a redundant pair,
/// through its decision log, answered once it has come back and been applied here.
async fn decide(s: &S, id: i64, action: AlarmAction, user: User) -> Result<Json<Value>, ApiError> {
    let Some(pair) = &s.cluster else {
        let (w, queue) = (s.store.writer().clone(), s.queue);
        return alarm_action(id, move || action.apply(&w, queue, id, &user.name, Timestamp::now())).await;
    };
    let event_id = decisions::event_id_of(&s.store, id)?
        .ok_or_else(|| ApiError::not_found(format!("no alarm {id}; GET /api/alarms lists them")))?;
    pair.decide(decisions::ALARM, decisions::alarm_args(&event_id, &action), &user.name).await
}

pub(super) async fn ack(
    State(s): State<S>,
    Extension(user): Extension<User>,
    Path(id): Path<i64>,
) -> Result<Json<Value>, ApiError> {
    decide(&s, id, AlarmAction::Acknowledge, user).await
}

pub(super) async fn ack_returned(
    State(s): State<S>,
    Extension(user): Extension<User>,
    Path(id): Path<i64>,
) -> Result<Json<Value>, ApiError> {
    if let Some(pair) = &s.cluster {
        // The occurrences as this node sees them, named for both.
        let event_id = decisions::event_id_of(&s.store, id)?
            .ok_or_else(|| ApiError::not_found(format!("no alarm {id}; GET /api/alarms lists them")))?;
        let returned = alarms::returned_of(&*s.store.read()?, id)?;
        let events: Vec<String> = returned.into_iter().filter_map(|(_, e)| e).collect();
        return pair.decide(decisions::RETURNED, decisions::returned_args(&event_id, &events), &user.name).await;
    }
    let w = s.store.writer().clone();
    let ids = tokio::task::spawn_blocking(move || alarms::acknowledge_returned(&w, id, &user.name, Timestamp::now()))
        .await?
        .map_err(action_error)?;
    Ok(Json(json!({"acknowledged": ids})))
}

/// Runs an operator action off the async threads (it waits on the writer) and answers
/// with the alarm's new state.
pub(super) async fn alarm_action(
    id: i64,
    action: impl FnOnce() -> Result<crate::domain::AlarmState, alarms::ActionError> + Send + 'static,
) -> Result<Json<Value>, ApiError> {
    let state = tokio::task::spawn_blocking(action).await?.map_err(action_error)?;
    Ok(Json(json!({"id": id, "state": state})))
}

/// Shelving takes a duration and a reason; both go in the alarm's journal.
#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ShelveRequest {
    /// How long, in minutes (1 to 1440; a fraction is taken to the second). A number,
    /// since JSON does not tell 30 from 30.0.
    #[schemars(range(min = 1, max = 1440))]
    pub minutes: f64,
    /// Why, for the journal (e.g. "permit 4471: PUMP-001 isolated for work"; not blank).
    #[schemars(length(min = 1, max = 2000), pattern(r"\S"))]
    pub reason: String,
}

pub(super) async fn shelve(
    State(s): State<S>,
    Extension(user): Extension<User>,
    Path(id): Path<i64>,
    Json(req): Json<ShelveRequest>,
) -> Result<Json<Value>, ApiError> {
    // `as` saturates: a huge number becomes i64::MAX seconds, which shelve refuses.
    let secs = (req.minutes * 60.0).round() as i64;
    decide(&s, id, AlarmAction::Shelve { secs, reason: req.reason }, user).await
}

pub(super) async fn unshelve(
    State(s): State<S>,
    Extension(user): Extension<User>,
    Path(id): Path<i64>,
) -> Result<Json<Value>, ApiError> {
    decide(&s, id, AlarmAction::Unshelve, user).await
}

pub(super) async fn out_of_service(
    State(s): State<S>,
    Extension(user): Extension<User>,
    Path(id): Path<i64>,
    Json(req): Json<ReasonRequest>,
) -> Result<Json<Value>, ApiError> {
    decide(&s, id, AlarmAction::OutOfService { reason: req.reason }, user).await
}

pub(super) async fn in_service(
    State(s): State<S>,
    Extension(user): Extension<User>,
    Path(id): Path<i64>,
) -> Result<Json<Value>, ApiError> {
    decide(&s, id, AlarmAction::InService, user).await
}
