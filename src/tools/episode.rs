//! `get_episode` and `find_similar_episodes`: an alarm flood as one episode, its
//! initiator with the evidence that ranks it, and the floods like it before.

use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::{Value, json};

use super::{ToolContext, ToolDef, ToolError, check_range, define, parse_args};
use crate::domain::Access;
use crate::episodes::upkeep;

const GET: &str = "get_episode";
const GET_DESCRIPTION: &str = "An alarm episode: the alarms that came together in an upset (a flood, or a burst on \
connected equipment), given by episode_id or by the alarm_id of any member (an integer, as list_alarms gives it). \
Returns opened and last (UTC), points, activations, note_id (the episode's note, once written), timeline (each point \
at its first activation: alarm_id, asset_id, sensor_id, code, severity, offset_s after opening, activations; the \
first 100), and ranking: the candidates for the initiating alarm, best first, each with score, first_out (0 = first to \
annunciate), downstream and followed_by (the other points it explains through the plant's connections and the \
journal's learned pairs), upstream (points it may be a consequence of) and evidence in words. Name the first \
candidate as the likely initiator with its evidence, and its downstream and followed_by points as its \
consequences; say when the scores are close. Then call find_similar_episodes for the floods like it before.";

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct GetArgs {
    /// The episode's id (from a note or `episodes list`).
    episode_id: Option<i64>,
    /// Or any member alarm's id.
    alarm_id: Option<i64>,
}

pub fn get_def() -> ToolDef {
    define::<GetArgs>(GET, GET_DESCRIPTION, Access::Read, "", |ctx, args| get(ctx, parse_args(args)?))
}

fn episode_id(ctx: &ToolContext, episode: Option<i64>, alarm: Option<i64>) -> Result<i64, ToolError> {
    match (episode, alarm) {
        (Some(e), None) => Ok(e),
        (None, Some(a)) => upkeep::of_alarm(ctx.db, a)?.ok_or_else(|| {
            ToolError::NotFound(format!(
                "Alarm {a} is in no episode (it came alone, or the alarm id does not exist): triage it on its own \
                 with get_asset_details and list_alarms."
            ))
        }),
        _ => Err(ToolError::InvalidArguments("give episode_id or alarm_id, one of them".into())),
    }
}

fn get(ctx: &ToolContext, args: GetArgs) -> Result<Value, ToolError> {
    let id = episode_id(ctx, args.episode_id, args.alarm_id)?;
    upkeep::one(ctx.db, id)?.ok_or_else(|| {
        ToolError::NotFound(format!("No episode {id}; get_episode with a member's alarm_id finds its episode."))
    })
}

const SIMILAR: &str = "find_similar_episodes";
const SIMILAR_DESCRIPTION: &str = "The past alarm episodes most like this one (by episode_id or a member's \
alarm_id), by an alignment of the order and timing in which their points first annunciated: each with similarity \
(0 to 1; above about 0.6 it is the same kind of upset), opened (UTC), points, its initiator (alarm_id, asset_id, \
code), its note (note_id and summary: the episode's note, or its initiator's), and the work orders proposed on the initiator's asset within a day of it \
(id, action, status). limit 1 to 5, default 3. Say what was found and done the last time, with the episode's id and \
date; an empty list means nothing like it happened before.";

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SimilarArgs {
    episode_id: Option<i64>,
    alarm_id: Option<i64>,
    /// How many, 1 to 5. Default 3.
    #[schemars(range(min = 1, max = 5))]
    limit: Option<i64>,
}

pub fn similar_def() -> ToolDef {
    define::<SimilarArgs>(SIMILAR, SIMILAR_DESCRIPTION, Access::Read, "", |ctx, args| similar(ctx, parse_args(args)?))
}

fn similar(ctx: &ToolContext, args: SimilarArgs) -> Result<Value, ToolError> {
    let limit = args.limit.unwrap_or(3);
    check_range("limit", limit, 1, 5)?;
    let id = episode_id(ctx, args.episode_id, args.alarm_id)?;
    let exists = ctx.db.prepare_cached("SELECT 1 FROM episodes WHERE id = ?1")?.exists([id])?;
    if !exists {
        return Err(ToolError::NotFound(format!("No episode {id}.")));
    }
    let mut out = Vec::new();
    for (past, score) in upkeep::similar_to(ctx.db, id, limit as usize)? {
        let row: String = ctx.db.query_row(
            "SELECT json_object('episode_id', p.id, 'similarity', round(?2, 3), 'opened', rfc3339(p.opened_ms / 1000),
                 'points', p.points,
                 'initiator', json_object('alarm_id', a.id, 'asset_id', a.asset_id, 'code', a.code),
                 'note_id', coalesce((SELECT n.id FROM notes n WHERE n.episode_id = p.id),
                     (SELECT n.id FROM notes n WHERE n.alarm_id = a.id AND n.kind = 'triage')),
                 'note', coalesce((SELECT json_extract(n.body, '$.summary') FROM notes n WHERE n.episode_id = p.id),
                     (SELECT json_extract(n.body, '$.summary') FROM notes n WHERE n.alarm_id = a.id AND n.kind = 'triage')),
                 'work_orders', json((SELECT json_group_array(json_object('id', w.id, 'action', w.action, 'status', w.status))
                     FROM work_orders w WHERE w.asset_id = a.asset_id
                       AND w.proposed_at BETWEEN p.opened_ms / 1000 AND p.opened_ms / 1000 + 86400)))
             FROM episodes p LEFT JOIN alarms a ON a.id = p.initiator_alarm WHERE p.id = ?1",
            rusqlite::params![past, score],
            |r| r.get(0),
        )?;
        out.push(serde_json::from_str::<Value>(&row).unwrap_or(Value::Null));
    }
    Ok(json!({"episode_id": id, "similar": out}))
}
