//! Episodes kept in the twin as activations arrive, in the transaction that raises
//! each one: a new activation joins the open episode it is tied to (as
//! [`super::group`] ties them), or opens one with the recent activations in no episode
//! yet once they have enough points; members link to their episode and its initiator
//! is ranked again when a new point comes. An episode closes when nothing has joined it
//! for `late_ms`. The learned pairs are mined by housekeeping ([`refresh_pairs`]), not
//! on this path.

use rusqlite::{Connection, OptionalExtension, params};

use super::graph::PlantGraph;
use super::pairs::{Learned, Miner, Pair, PairRules};
use super::{Activation, Context, Episode, EpisodeRules, group, rank};
use crate::alarms::definitions::Point;

/// The most recent annunciated activations since `since_ms` that are in no episode
/// yet (at most [`POOL`]), in time order: the pool a new episode may open from.
fn unassigned(conn: &Connection, since_ms: i64) -> rusqlite::Result<Vec<Activation>> {
    let mut stmt = conn.prepare_cached(
        "SELECT a.id, a.asset_id, a.sensor_id, a.code, e.at * 1000 + e.millis
         FROM alarm_events e JOIN alarms a ON a.id = e.alarm_id
         WHERE e.kind = 'raised' AND e.at >= ?1 / 1000 AND e.at * 1000 + e.millis >= ?1
           AND a.state NOT IN ('out_of_service', 'suppressed') AND a.episode_id IS NULL
         ORDER BY 5 DESC, 1 DESC LIMIT ?2",
    )?;
    let mut pool: Vec<Activation> =
        stmt.query_map(params![since_ms, POOL], activation)?.collect::<rusqlite::Result<_>>()?;
    pool.reverse();
    Ok(pool)
}

/// The most activations in no episode that a new one is grouped with: a burst of
/// unrelated alarms costs each new one this many, not the whole burst.
const POOL: i64 = 200;

fn activation(r: &rusqlite::Row) -> rusqlite::Result<Activation> {
    Ok(Activation {
        alarm_id: r.get(0)?,
        point: Point { asset_id: r.get(1)?, sensor_id: r.get(2)?, code: r.get(3)? },
        at_ms: r.get(4)?,
    })
}

/// An episode's members, in time order.
fn members(conn: &Connection, episode: i64) -> rusqlite::Result<Vec<Activation>> {
    let mut stmt = conn.prepare_cached(
        "SELECT a.id, a.asset_id, a.sensor_id, a.code, e.at * 1000 + e.millis
         FROM alarms a JOIN alarm_events e ON e.alarm_id = a.id AND e.kind = 'raised'
         WHERE a.episode_id = ?1 ORDER BY 5, 1",
    )?;
    stmt.query_map([episode], activation)?.collect()
}

/// An episode's points, each at its first activation, in time order (`episode_points`):
/// what ties a new activation to it and ranks its initiator, read without the
/// thousands of repeats a flood brings.
fn first_outs(conn: &Connection, episode: i64) -> rusqlite::Result<Vec<Activation>> {
    let mut stmt = conn.prepare_cached(
        "SELECT first_alarm, asset_id, sensor_id, code, first_ms FROM episode_points
         WHERE episode_id = ?1 ORDER BY first_ms, first_alarm",
    )?;
    stmt.query_map([episode], activation)?.collect()
}

/// Records a point's first activation in `episode`.
fn add_point(conn: &Connection, episode: i64, a: &Activation) -> rusqlite::Result<()> {
    conn.prepare_cached(
        "INSERT OR IGNORE INTO episode_points (episode_id, asset_id, sensor_id, code, first_alarm, first_ms)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
    )?
    .execute(params![episode, a.point.asset_id, a.point.sensor_id, a.point.code, a.alarm_id, a.at_ms])?;
    Ok(())
}

/// Counts a repeat activation of a point already in `episode`.
fn count_repeat(conn: &Connection, episode: i64, a: &Activation) -> rusqlite::Result<()> {
    conn.prepare_cached(
        "UPDATE episode_points SET activations = activations + 1
         WHERE episode_id = ?1 AND asset_id = ?2 AND coalesce(sensor_id, '') = coalesce(?3, '') AND code = ?4",
    )?
    .execute(params![episode, a.point.asset_id, a.point.sensor_id, a.point.code])?;
    Ok(())
}

/// What ties activations together: the plant's graph and the learned pairs, read once
/// for many activations (a batch of ingest's).
pub fn context(conn: &Connection) -> rusqlite::Result<(PlantGraph, Learned)> {
    Ok((PlantGraph::read(conn)?, learned(conn)?))
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
/// one; returns the episode. Bounded in a flood: the new activation is checked against
/// each open episode's distinct points (not its every member), and only the
/// activations in no episode yet are grouped again. Closes the episodes nothing can
/// join any more.
pub fn upkeep(
    conn: &Connection,
    alarm_id: i64,
    at_ms: i64,
    rules: EpisodeRules,
    cx: &Context,
) -> rusqlite::Result<Option<i64>> {
    let horizon = rules.late_ms.max(rules.gap_ms);
    conn.prepare_cached("UPDATE episodes SET closed_at = last_ms WHERE closed_at IS NULL AND last_ms < ?1")?
        .execute([at_ms - horizon])?;
    let new: Activation = conn
        .prepare_cached(
            "SELECT a.id, a.asset_id, a.sensor_id, a.code, e.at * 1000 + e.millis
             FROM alarms a JOIN alarm_events e ON e.alarm_id = a.id AND e.kind = 'raised' WHERE a.id = ?1",
        )?
        .query_row([alarm_id], activation)?;
    // An open episode it is tied to, the most recent first.
    let open: Vec<(i64, i64)> = conn
        .prepare_cached("SELECT id, last_ms FROM episodes WHERE closed_at IS NULL ORDER BY last_ms DESC, id DESC")?
        .query_map([], |r| Ok((r.get(0)?, r.get(1)?)))?
        .collect::<rusqlite::Result<_>>()?;
    for (episode, last_ms) in open {
        let points = Episode { members: first_outs(conn, episode)? };
        let recent = at_ms - last_ms <= rules.gap_ms;
        let joins = points
            .members
            .iter()
            .any(|m| (recent && cx.tied(&m.point, &new.point)) || cx.follows(&m.point, &new.point, at_ms - m.at_ms));
        if !joins {
            continue;
        }
        conn.prepare_cached("UPDATE alarms SET episode_id = ?2 WHERE id = ?1")?.execute([alarm_id, episode])?;
        let new_point = !points.members.iter().any(|m| m.point == new.point);
        conn.prepare_cached(
            "UPDATE episodes SET last_ms = max(last_ms, ?2), activations = activations + 1, points = points + ?3
             WHERE id = ?1",
        )?
        .execute(params![episode, at_ms, i64::from(new_point)])?;
        // A repeat changes no first-out order: the ranking stands.
        if !new_point {
            count_repeat(conn, episode, &new)?;
        }
        if new_point {
            add_point(conn, episode, &new)?;
            let mut grown = points;
            grown.members.push(new);
            rerank(conn, episode, &grown, cx)?;
        }
        return Ok(Some(episode));
    }
    // None: does it open one with the activations in no episode yet?
    let pool = unassigned(conn, at_ms - rules.gap_ms * rules.min_points as i64)?;
    let Some(found) = group(&pool, rules, cx).into_iter().find(|g| g.members.iter().any(|m| m.alarm_id == alarm_id))
    else {
        return Ok(None);
    };
    conn.prepare_cached(
        "INSERT INTO episodes (opened_ms, last_ms, points, activations, ranking, noticed_ms)
         VALUES (?1, ?1, 0, 0, '[]', ?2)",
    )?
    .execute([found.start_ms(), wall_clock_ms()])?;
    let episode = conn.last_insert_rowid();
    for m in &found.members {
        conn.prepare_cached("UPDATE alarms SET episode_id = ?2 WHERE id = ?1")?.execute([m.alarm_id, episode])?;
    }
    let firsts = found.first_outs();
    for m in &firsts {
        add_point(conn, episode, m)?;
    }
    for m in found.members.iter().filter(|m| !firsts.iter().any(|f| f.alarm_id == m.alarm_id)) {
        count_repeat(conn, episode, m)?;
    }
    conn.prepare_cached("UPDATE episodes SET last_ms = ?2, points = ?3, activations = ?4 WHERE id = ?1")?
        .execute(params![episode, found.end_ms(), found.first_outs().len() as i64, found.members.len() as i64])?;
    rerank(conn, episode, &found, cx)?;
    Ok(Some(episode))
}

/// Now by the wall clock, in ms: when an episode was recognised, whatever time its
/// activations carry.
fn wall_clock_ms() -> i64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_millis() as i64)
}

/// The candidates an episode keeps: the tool shows ten and the note reads the first
/// two.
pub const KEPT_CANDIDATES: usize = 10;

/// The points a runner-up keeps in each of its lists (its evidence says how many there
/// are); the initiator keeps all of its own, since its consequences are folded under it.
pub const KEPT_POINTS: usize = 10;

/// Ranks the episode's initiator again and stores the ranking with its evidence. Kept
/// whole, a flood's ranking grows with the square of its points (a hundred and fifty
/// points: 700 KB, written again as each joins), and ingest would fall behind.
fn rerank(conn: &Connection, episode: i64, found: &Episode, cx: &Context) -> rusqlite::Result<()> {
    let mut ranked = rank(found, cx);
    ranked.truncate(KEPT_CANDIDATES);
    for c in ranked.iter_mut().skip(1) {
        c.downstream.truncate(KEPT_POINTS);
        c.followed_by.truncate(KEPT_POINTS);
        c.upstream.truncate(KEPT_POINTS);
    }
    conn.prepare_cached("UPDATE episodes SET initiator_alarm = ?2, ranking = ?3 WHERE id = ?1")?.execute(params![
        episode,
        ranked.first().map(|c| c.alarm_id),
        serde_json::to_string(&ranked).unwrap_or_else(|_| "[]".into())
    ])?;
    Ok(())
}

/// What pair mining reads: the annunciated activations (point, ms) between ?1 and ?2
/// (seconds), in time order.
pub const MINED: &str = "SELECT a.asset_id, a.sensor_id, a.code, e.at * 1000 + e.millis
     FROM alarm_events e JOIN alarms a ON a.id = e.alarm_id
     WHERE e.kind = 'raised' AND e.at >= ?1 AND e.at <= ?2 AND a.state != 'out_of_service'
     ORDER BY e.at, e.millis, a.id";

/// Mines the consequential pairs from the `days` of the journal's annunciated
/// activations up to `now_ms` and stores them in place of the last ones; returns how many. The journal
/// is read twice, a row at a time ([`Miner`]): memory does not grow with it.
pub fn refresh_pairs(conn: &Connection, now_ms: i64, days: i64, rules: PairRules) -> rusqlite::Result<usize> {
    let mut stmt = conn.prepare_cached(MINED)?;
    let since = now_ms / 1000 - days * 86_400;
    let mut miner = Miner::new(rules);
    let mut pass = |miner: &mut Miner, first: bool| -> rusqlite::Result<()> {
        let mut rows = stmt.query([since, now_ms / 1000])?;
        while let Some(r) = rows.next()? {
            let point = Point { asset_id: r.get(0)?, sensor_id: r.get(1)?, code: r.get(2)? };
            if first { miner.count(&point, r.get(3)?) } else { miner.tally(&point, r.get(3)?) }
        }
        Ok(())
    };
    pass(&mut miner, true)?;
    miner.choose();
    pass(&mut miner, false)?;
    let pairs = miner.finish();
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

/// The alarm figures as the HMI, the API and `alarms kpi` show them: `kpi::compute`'s, with the
/// consequential pairs housekeeping last learned from the journal (the 10 strongest),
/// which ISA-18.2 rationalization weighs for designed suppression.
pub fn alarm_performance(
    conn: &Connection,
    from: crate::domain::Timestamp,
    to: crate::domain::Timestamp,
    settings: crate::alarms::kpi::KpiSettings,
) -> rusqlite::Result<serde_json::Value> {
    let mut figures = crate::alarms::kpi::compute(conn, from, to, settings, None)?.to_json();
    let learned = learned(conn)?;
    figures["consequential_pairs"] = serde_json::json!(learned.strongest(10));
    figures["definitions"]["consequential_pairs"] = serde_json::json!(
        "B follows A within 5 minutes in at least half of A's activations (confidence = support / A's activations), \
         at least 3 times, and at least twice as often as B's own rate would give (lift), over the last 90 days of \
         the journal as housekeeping last mined it; lag median and p90 in seconds. Candidates for designed \
         suppression (B suppressed while A is active), to be weighed in rationalization, not applied blindly"
    );
    Ok(figures)
}

/// An episode as the CLI and the API show it: its shape, the initiator's ranking, its
/// note, and its timeline: each point at its first activation (seconds after the
/// episode opened) with how many activations it had, the first `TIMELINE` points.
pub fn one(conn: &Connection, id: i64) -> rusqlite::Result<Option<serde_json::Value>> {
    let row: Option<String> = conn
        .prepare_cached(
            "SELECT json_object('id', id, 'opened', rfc3339(opened_ms / 1000), 'last', rfc3339(last_ms / 1000),
                 'closed', closed_at IS NOT NULL, 'points', points, 'activations', activations,
                 'initiator_alarm', initiator_alarm, 'ranking', json(ranking),
                 'note_id', (SELECT n.id FROM notes n WHERE n.episode_id = episodes.id),
                 'timeline', json((SELECT json_group_array(json_object('alarm_id', t.first_alarm, 'asset_id', t.asset_id,
                     'sensor_id', t.sensor_id, 'code', t.code, 'severity', t.severity,
                     'offset_s', round((t.first_ms - episodes.opened_ms) / 1000.0, 1), 'activations', t.n))
                     FROM (SELECT q.*, q.activations AS n, a.severity
                           FROM episode_points q JOIN alarms a ON a.id = q.first_alarm
                           WHERE q.episode_id = episodes.id ORDER BY q.first_ms, q.first_alarm LIMIT ?2) t)))
             FROM episodes WHERE id = ?1",
        )?
        .query_row([id, TIMELINE], |r| r.get(0))
        .optional()?;
    Ok(row.and_then(|r| serde_json::from_str(&r).ok()))
}

/// The most points an episode's timeline lists (a flood over the whole plant has
/// hundreds; the first ones hold its initiator).
pub const TIMELINE: i64 = 100;

/// The latest episodes, newest first: id, when, size, initiator.
pub fn list(conn: &Connection, limit: i64) -> rusqlite::Result<Vec<serde_json::Value>> {
    let mut stmt = conn.prepare_cached(
        "SELECT json_object('id', p.id, 'opened', rfc3339(p.opened_ms / 1000), 'last', rfc3339(p.last_ms / 1000),
             'closed', p.closed_at IS NOT NULL, 'points', p.points, 'activations', p.activations,
             'initiator', json_object('alarm_id', a.id, 'asset_id', a.asset_id, 'code', a.code),
             'note_id', (SELECT n.id FROM notes n WHERE n.episode_id = p.id))
         FROM episodes p LEFT JOIN alarms a ON a.id = p.initiator_alarm ORDER BY p.opened_ms DESC, p.id DESC LIMIT ?1",
    )?;
    let rows = stmt.query_map([limit], |r| r.get::<_, String>(0))?;
    rows.map(|r| r.map(|s| serde_json::from_str(&s).unwrap_or_default())).collect()
}

/// The episode that holds alarm occurrence `alarm_id`, if any.
pub fn of_alarm(conn: &Connection, alarm_id: i64) -> rusqlite::Result<Option<i64>> {
    conn.prepare_cached("SELECT episode_id FROM alarms WHERE id = ?1")?
        .query_row([alarm_id], |r| r.get::<_, Option<i64>>(0))
        .optional()
        .map(Option::flatten)
}

/// The past episodes most like `episode` (of the 1,000 before it), best first, with
/// their similarity from 0 to 1 ([`super::similar`]).
pub fn similar_to(conn: &Connection, episode: i64, k: usize) -> rusqlite::Result<Vec<(i64, f64)>> {
    let this = Episode { members: members(conn, episode)? };
    let mut stmt = conn.prepare_cached(
        "SELECT p.id, a.id, a.asset_id, a.sensor_id, a.code, e.at * 1000 + e.millis
         FROM (SELECT id FROM episodes WHERE opened_ms < (SELECT opened_ms FROM episodes WHERE id = ?1)
               ORDER BY opened_ms DESC LIMIT 1000) p
         JOIN alarms a ON a.episode_id = p.id JOIN alarm_events e ON e.alarm_id = a.id AND e.kind = 'raised'
         ORDER BY p.id, 6, 2",
    )?;
    let mut past: Vec<(i64, Episode)> = Vec::new();
    let rows = stmt.query_map([episode], |r| {
        Ok((
            r.get::<_, i64>(0)?,
            Activation {
                alarm_id: r.get(1)?,
                point: Point { asset_id: r.get(2)?, sensor_id: r.get(3)?, code: r.get(4)? },
                at_ms: r.get(5)?,
            },
        ))
    })?;
    for row in rows {
        let (id, a) = row?;
        match past.last_mut() {
            Some((last, e)) if *last == id => e.members.push(a),
            _ => past.push((id, Episode { members: vec![a] })),
        }
    }
    let sequences: Vec<Vec<super::similar::Step>> = past.iter().map(|(_, e)| e.steps()).collect();
    Ok(super::similar::most_similar(&this.steps(), &sequences, k).into_iter().map(|(i, s)| (past[i].0, s)).collect())
}
