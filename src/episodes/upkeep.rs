//! Episodes kept in the twin as activations arrive, in the transaction that raises
//! each one: the recent activations are grouped again with the new one ([`super::group`]);
//! the group that holds it, once it has enough points, is an episode (a new one, or the
//! one its members already belong to, several merged into the oldest); its members
//! link to it and its initiator is ranked again. An episode closes when nothing has
//! joined it for `late_ms`. The learned pairs are mined by housekeeping
//! ([`refresh_pairs`]), not on this path.

use std::collections::{BTreeSet, HashMap};

use rusqlite::{Connection, OptionalExtension, params};

use super::graph::PlantGraph;
use super::pairs::{Learned, Pair, PairRules};
use super::{Activation, Context, EpisodeRules, group, rank};
use crate::alarms::definitions::Point;

/// The annunciated activations raised since `since_ms`, and every member of an episode
/// still open however old, in time order; with the episode each belongs to.
fn recent(conn: &Connection, since_ms: i64) -> rusqlite::Result<(Vec<Activation>, HashMap<i64, i64>)> {
    let mut stmt = conn.prepare_cached(
        "SELECT a.id, a.asset_id, a.sensor_id, a.code, e.at * 1000 + e.millis, a.episode_id
         FROM alarm_events e JOIN alarms a ON a.id = e.alarm_id
         WHERE e.kind = 'raised' AND e.at >= ?1 / 1000 AND a.state != 'out_of_service'
         UNION
         SELECT a.id, a.asset_id, a.sensor_id, a.code, e.at * 1000 + e.millis, a.episode_id
         FROM episodes p JOIN alarms a ON a.episode_id = p.id
         JOIN alarm_events e ON e.alarm_id = a.id AND e.kind = 'raised'
         WHERE p.closed_at IS NULL
         ORDER BY 5, 1",
    )?;
    let mut episode_of = HashMap::new();
    let rows = stmt.query_map([since_ms], |r| {
        let alarm_id: i64 = r.get(0)?;
        if let Some(e) = r.get::<_, Option<i64>>(5)? {
            episode_of.insert(alarm_id, e);
        }
        Ok(Activation {
            alarm_id,
            point: Point { asset_id: r.get(1)?, sensor_id: r.get(2)?, code: r.get(3)? },
            at_ms: r.get(4)?,
        })
    })?;
    let activations = rows.collect::<rusqlite::Result<Vec<_>>>()?;
    Ok((activations, episode_of))
}

/// The learned pairs as housekeeping last stored them.
pub fn learned(conn: &Connection) -> rusqlite::Result<Learned> {
    let mut stmt = conn.prepare_cached(
        "SELECT first_asset, first_sensor, first_code, then_asset, then_sensor, then_code, support,
                first_activations, confidence, lift, lag_median_s, lag_p90_s FROM alarm_pairs",
    )?;
    let pairs = stmt
        .query_map([], |r| {
            Ok(Pair {
                first: Point { asset_id: r.get(0)?, sensor_id: r.get(1)?, code: r.get(2)? },
                then: Point { asset_id: r.get(3)?, sensor_id: r.get(4)?, code: r.get(5)? },
                support: r.get::<_, i64>(6)? as usize,
                first_activations: r.get::<_, i64>(7)? as usize,
                confidence: r.get(8)?,
                lift: r.get(9)?,
                lag_median_s: r.get(10)?,
                lag_p90_s: r.get(11)?,
            })
        })?
        .collect::<rusqlite::Result<Vec<_>>>()?;
    Ok(Learned::new(pairs))
}

/// Takes the annunciated activation `alarm_id` into its episode, if it makes or joins
/// one; returns the episode. Closes the episodes nothing can join any more.
pub fn upkeep(conn: &Connection, alarm_id: i64, at_ms: i64, rules: EpisodeRules) -> rusqlite::Result<Option<i64>> {
    conn.prepare_cached("UPDATE episodes SET closed_at = last_ms WHERE closed_at IS NULL AND last_ms < ?1")?
        .execute([at_ms - rules.late_ms.max(rules.gap_ms)])?;
    let (activations, episode_of) = recent(conn, at_ms - rules.late_ms.max(rules.gap_ms))?;
    let plant = PlantGraph::read(conn)?;
    let learned = learned(conn)?;
    let cx = Context { plant: &plant, learned: &learned };
    let groups = group(&activations, rules, &cx);
    let Some(found) = groups.into_iter().find(|g| g.members.iter().any(|m| m.alarm_id == alarm_id)) else {
        return Ok(None);
    };
    let ids: BTreeSet<i64> = found.members.iter().filter_map(|m| episode_of.get(&m.alarm_id).copied()).collect();
    let episode = match ids.first() {
        Some(&id) => id,
        None => {
            conn.prepare_cached(
                "INSERT INTO episodes (opened_ms, last_ms, points, activations, ranking) VALUES (?1, ?1, 0, 0, '[]')",
            )?
            .execute([found.start_ms()])?;
            conn.last_insert_rowid()
        }
    };
    // Two episodes one activation ties together are one: the oldest keeps its id.
    for &other in ids.iter().skip(1) {
        conn.prepare_cached("UPDATE alarms SET episode_id = ?1 WHERE episode_id = ?2")?.execute([episode, other])?;
        conn.prepare_cached("DELETE FROM episodes WHERE id = ?1")?.execute([other])?;
    }
    for m in &found.members {
        conn.prepare_cached("UPDATE alarms SET episode_id = ?2 WHERE id = ?1 AND episode_id IS NOT ?2")?
            .execute([m.alarm_id, episode])?;
    }
    let ranked = rank(&found, &cx);
    conn.prepare_cached(
        "UPDATE episodes SET opened_ms = min(opened_ms, ?2), last_ms = ?3, points = ?4, activations = ?5,
             initiator_alarm = ?6, ranking = ?7, closed_at = NULL
         WHERE id = ?1",
    )?
    .execute(params![
        episode,
        found.start_ms(),
        found.end_ms(),
        found.first_outs().len() as i64,
        found.members.len() as i64,
        ranked.first().map(|c| c.alarm_id),
        serde_json::to_string(&ranked).unwrap_or_else(|_| "[]".into())
    ])?;
    Ok(Some(episode))
}

/// Mines the consequential pairs from the last `days` of the journal's annunciated
/// activations and stores them in place of the last ones; returns how many.
pub fn refresh_pairs(conn: &Connection, now_ms: i64, days: i64, rules: PairRules) -> rusqlite::Result<usize> {
    let mut stmt = conn.prepare_cached(
        "SELECT a.id, a.asset_id, a.sensor_id, a.code, e.at * 1000 + e.millis
         FROM alarm_events e JOIN alarms a ON a.id = e.alarm_id
         WHERE e.kind = 'raised' AND e.at >= ?1 AND a.state != 'out_of_service'
         ORDER BY e.at, e.millis, a.id",
    )?;
    let activations: Vec<Activation> = stmt
        .query_map([now_ms / 1000 - days * 86_400], |r| {
            Ok(Activation {
                alarm_id: r.get(0)?,
                point: Point { asset_id: r.get(1)?, sensor_id: r.get(2)?, code: r.get(3)? },
                at_ms: r.get(4)?,
            })
        })?
        .collect::<rusqlite::Result<_>>()?;
    let pairs = super::pairs::mine(&activations, rules);
    conn.prepare_cached("DELETE FROM alarm_pairs")?.execute([])?;
    for p in &pairs {
        conn.prepare_cached(
            "INSERT INTO alarm_pairs (first_asset, first_sensor, first_code, then_asset, then_sensor, then_code,
                 support, first_activations, confidence, lift, lag_median_s, lag_p90_s, mined_ms)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13)",
        )?
        .execute(params![
            p.first.asset_id,
            p.first.sensor_id,
            p.first.code,
            p.then.asset_id,
            p.then.sensor_id,
            p.then.code,
            p.support as i64,
            p.first_activations as i64,
            p.confidence,
            p.lift,
            p.lag_median_s,
            p.lag_p90_s,
            now_ms
        ])?;
    }
    Ok(pairs.len())
}

/// An episode as the CLI and the API show it.
pub fn one(conn: &Connection, id: i64) -> rusqlite::Result<Option<serde_json::Value>> {
    let row: Option<String> = conn
        .prepare_cached(
            "SELECT json_object('id', id, 'opened', rfc3339(opened_ms / 1000), 'last', rfc3339(last_ms / 1000),
                 'closed', closed_at IS NOT NULL, 'points', points, 'activations', activations,
                 'initiator_alarm', initiator_alarm, 'ranking', json(ranking),
                 'members', json((SELECT json_group_array(json_object('alarm_id', a.id, 'asset_id', a.asset_id,
                     'sensor_id', a.sensor_id, 'code', a.code, 'severity', a.severity, 'raised', rfc3339(a.raised_at)))
                     FROM alarms a WHERE a.episode_id = episodes.id)))
             FROM episodes WHERE id = ?1",
        )?
        .query_row([id], |r| r.get(0))
        .optional()?;
    Ok(row.and_then(|r| serde_json::from_str(&r).ok()))
}

/// The latest episodes, newest first: id, when, size, initiator.
pub fn list(conn: &Connection, limit: i64) -> rusqlite::Result<Vec<serde_json::Value>> {
    let mut stmt = conn.prepare_cached(
        "SELECT json_object('id', p.id, 'opened', rfc3339(p.opened_ms / 1000), 'last', rfc3339(p.last_ms / 1000),
             'closed', p.closed_at IS NOT NULL, 'points', p.points, 'activations', p.activations,
             'initiator', json_object('alarm_id', a.id, 'asset_id', a.asset_id, 'code', a.code))
         FROM episodes p LEFT JOIN alarms a ON a.id = p.initiator_alarm ORDER BY p.opened_ms DESC, p.id DESC LIMIT ?1",
    )?;
    let rows = stmt.query_map([limit], |r| r.get::<_, String>(0))?;
    rows.map(|r| r.map(|s| serde_json::from_str(&s).unwrap_or_default())).collect()
}
