//! Alarm episodes for the page: the list, and one episode as an operator reads it in a
//! flood (its timeline, initiator and consequences, its note, the floods like it).

use std::sync::Arc;

use axum::extract::{Extension, Json, Path, Query, State};
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::{Value, json};

use super::twin::tool;
use super::{ApiError, WebState};
use crate::accounts::User;
use crate::episodes::upkeep;

type S = Arc<WebState>;

#[derive(Deserialize, JsonSchema)]
pub(super) struct EpisodesQuery {
    /// How many, newest first, 1 to 200 (default 20).
    #[schemars(range(min = 1, max = 200))]
    limit: Option<i64>,
}

pub(super) async fn list(State(s): State<S>, Query(q): Query<EpisodesQuery>) -> Result<Json<Value>, ApiError> {
    let limit = q.limit.unwrap_or(20);
    if !(1..=200).contains(&limit) {
        return Err(ApiError::bad_request(format!("limit must be 1 to 200, not {limit}")));
    }
    Ok(Json(json!({"episodes": upkeep::list(&*s.store.read()?, limit)?})))
}

/// The episode (as `get_episode` gives it), its note as it stands, and the past
/// episodes most like it (as `find_similar_episodes` gives them).
pub(super) async fn one(
    State(s): State<S>,
    Extension(user): Extension<User>,
    Path(id): Path<i64>,
) -> Result<Json<Value>, ApiError> {
    let mut episode = tool(&s, &user, "get_episode", json!({"episode_id": id}))?;
    let similar = tool(&s, &user, "find_similar_episodes", json!({"episode_id": id, "limit": 3}))?;
    episode["similar"] = similar["similar"].clone();
    let note_id = episode["note_id"].as_i64();
    let note = match note_id {
        Some(note) => crate::alarms::list::note(&*s.store.read()?, note)?,
        None => None,
    };
    episode["note"] = note.unwrap_or(Value::Null);
    Ok(Json(episode))
}
