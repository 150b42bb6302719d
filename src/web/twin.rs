//! Read views of the twin for the page: assets, the plant, documents, a sensor's
//! readings, a run's trail, handovers.

use std::sync::Arc;

use axum::extract::{Extension, Json, Path, Query, State};
use axum::http::StatusCode;
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::{Value, json};

use super::{ApiError, WebState};
use crate::accounts::{self, User};
use crate::approvals::Proposer;
use crate::domain::{Role, Timestamp};
use crate::tools;

type S = Arc<WebState>;

/// Runs a read tool for the page, as the user: the same view of the twin the agent has.
pub(super) fn tool(s: &WebState, user: &User, name: &str, args: Value) -> Result<Value, ApiError> {
    let def = tools::find(name)
        .ok_or_else(|| ApiError::internal(anyhow::anyhow!("the HMI asked for a tool that does not exist: {name}")))?;
    let caller = Proposer::User(user.name.clone());
    let result = tools::with_context(&s.store, &s.docs, Timestamp::now(), caller, |ctx| def.run(ctx, args))?;
    // The tool's typed error decides the status; the page gets the result whole.
    result.map_err(|e| match e {
        tools::ToolError::InvalidArguments(m) => ApiError::bad_request(m),
        tools::ToolError::NotFound(m) => ApiError::not_found(m),
        tools::ToolError::Rejected(m) => ApiError::new(StatusCode::CONFLICT, m),
        tools::ToolError::Internal(cause) => ApiError::internal(cause),
    })
}

pub(super) async fn assets(State(s): State<S>, Extension(user): Extension<User>) -> Result<Json<Value>, ApiError> {
    Ok(Json(tool(&s, &user, "list_assets", json!({"limit": 50}))?))
}

pub(super) async fn plant(State(s): State<S>) -> Result<Json<Value>, ApiError> {
    Ok(Json(crate::plant::tree(&*s.store.read()?)?))
}

pub(super) async fn asset(
    State(s): State<S>,
    Extension(user): Extension<User>,
    Path(id): Path<String>,
) -> Result<Json<Value>, ApiError> {
    Ok(Json(tool(&s, &user, "get_asset_details", json!({"asset_id": id}))?))
}

pub(super) async fn doc(
    State(s): State<S>,
    Extension(user): Extension<User>,
    Path(citation): Path<String>,
) -> Result<Json<Value>, ApiError> {
    Ok(Json(tool(&s, &user, "read_doc", json!({"citation": citation}))?))
}

#[derive(Deserialize, JsonSchema)]
pub(super) struct WindowQuery {
    /// Hours back from now (or from the last reading of a quiet sensor), 1 to 168 (default 24).
    #[schemars(range(min = 1, max = 168))]
    hours: Option<i64>,
}

pub(super) async fn readings(
    State(s): State<S>,
    Path(id): Path<String>,
    Query(q): Query<WindowQuery>,
) -> Result<Json<Value>, ApiError> {
    let hours = q.hours.unwrap_or(24);
    if !(1..=168).contains(&hours) {
        return Err(ApiError::bad_request(format!("hours must be 1 to 168, not {hours}")));
    }
    let trend = crate::store::trend(&*s.store.read()?, &id, hours, Timestamp::now())?;
    Ok(Json(trend.ok_or_else(|| {
        ApiError::not_found(format!("no sensor {id}; sensor ids look like PUMP-007.VIB-DE (GET /api/assets/PUMP-007)"))
    })?))
}

/// A run's trail. A chat run is its asker's: others see it only from supervisor up (to
/// anyone else it does not exist); triage and handover runs are everyone's.
pub(super) async fn run(
    State(s): State<S>,
    Extension(user): Extension<User>,
    Path(id): Path<i64>,
) -> Result<Json<Value>, ApiError> {
    let trail = crate::agent::audit::trail(&*s.store.read()?, id, &user.name, user.role >= Role::Supervisor)?;
    let trail = trail.ok_or_else(|| {
        ApiError::not_found(format!("no run {id} of yours; runs are listed with their notes and chat answers"))
    })?;
    Ok(Json(trail))
}

#[derive(Deserialize, JsonSchema)]
pub(super) struct LimitQuery {
    /// Most handovers returned, 1 to 50 (default 10).
    #[schemars(range(min = 1, max = 50))]
    limit: Option<u32>,
}

pub(super) async fn handovers(State(s): State<S>, Query(q): Query<LimitQuery>) -> Result<Json<Value>, ApiError> {
    let limit = q.limit.unwrap_or(10);
    if !(1..=50).contains(&limit) {
        return Err(ApiError::bad_request(format!("limit {limit}: use 1 to 50 (default 10)")));
    }
    let db = s.store.read()?;
    Ok(Json(json!({"handovers": crate::handover::recent(&db, limit)?})))
}

/// Writes a handover now, unless one was written within the last minute: then the
/// answer is 409 with that one's id, which the page shows instead.
pub(super) async fn write_handover(
    State(s): State<S>,
    Extension(user): Extension<User>,
) -> Result<Json<Value>, ApiError> {
    let latest = crate::handover::recent(&*s.store.read()?, 1)?.pop();
    if let Some(h) = latest {
        let age = Timestamp::now().unix() - h.created_at.unix();
        if age < crate::handover::MIN_INTERVAL_S {
            return Err(ApiError::new(
                StatusCode::CONFLICT,
                format!(
                    "handover note {} was written {age} s ago; read it, or ask again in {} s",
                    h.note_id,
                    crate::handover::MIN_INTERVAL_S - age
                ),
            ));
        }
    }
    // A task of its own: a page closed mid-run must not cancel the run half-way.
    let st = Arc::clone(&s);
    let written = tokio::spawn(async move {
        let h = st.agent.write_handover(&format!("user:{}", user.name)).await?;
        let detail = format!("note {}", h.note_id);
        tokio::task::spawn_blocking(move || accounts::audit(&st.store, &user.name, "handover_written", &detail, None))
            .await??;
        anyhow::Ok(h)
    });
    Ok(Json(serde_json::to_value(written.await?.map_err(ApiError::internal)?).map_err(ApiError::internal)?))
}
