//! Alarm occurrences as every surface lists them (the HMI, the `list_alarms` tool, the
//! CLI): one query, one row type, filters as a type.

use rusqlite::types::Value as Sql;
use rusqlite::{Connection, OptionalExtension, params_from_iter};
use serde::Serialize;
use serde_json::{Value, json};

use crate::domain::{AlarmState, AssetId, Severity, Timestamp, shown};
use crate::store::Filter;

/// Which occurrences, by their state.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Scope {
    #[default]
    Any,
    /// The condition is still present (not cleared), shelved and out of service included.
    Active,
    /// What an operator must attend to: unacknowledged, acknowledged, or returned to
    /// normal but not acknowledged.
    Attention,
    /// Hidden from the operators: shelved or out of service.
    Suppressed,
    State(AlarmState),
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Order {
    /// Raised most recently first.
    #[default]
    Newest,
    /// Highest severity first, then newest.
    Priority,
}

/// What to list. `limit` is required by construction: a list is always bounded.
#[derive(Debug, Clone, Default)]
pub struct AlarmFilter {
    pub asset: Option<AssetId>,
    /// A sensor id, or `-` for alarms on the asset itself.
    pub sensor: Option<String>,
    pub code: Option<String>,
    pub min_severity: Option<Severity>,
    pub scope: Scope,
    /// Raised at or after.
    pub since: Option<Timestamp>,
    /// Raised before.
    pub until: Option<Timestamp>,
    pub order: Order,
}

/// One occurrence, with its triage note's id and the triage job's state when there are.
#[derive(Debug, Clone, Serialize)]
pub struct AlarmRow {
    pub id: i64,
    pub asset_id: String,
    pub sensor_id: Option<String>,
    pub code: String,
    pub severity: String,
    pub state: String,
    pub message: String,
    /// Rounded for display (4 significant figures); stored values are unchanged.
    pub value: Option<f64>,
    pub threshold: Option<f64>,
    pub raised_at: Timestamp,
    pub acked_at: Option<Timestamp>,
    pub acked_by: Option<String>,
    pub cleared_at: Option<Timestamp>,
    pub shelved_until: Option<Timestamp>,
    pub reraise_count: i64,
    pub note_id: Option<i64>,
    pub triage: Option<String>,
    /// The alarm episode it came in, if any (`GET /api/episodes/{id}`).
    pub episode_id: Option<i64>,
}

impl AlarmFilter {
    fn filter(&self) -> Filter {
        let mut f = Filter::new();
        if let Some(asset) = &self.asset {
            f.and("a.asset_id = ?", [Sql::from(asset.as_str().to_string())]);
        }
        if let Some(sensor) = &self.sensor {
            f.and("coalesce(a.sensor_id, '-') = ?", [Sql::from(sensor.clone())]);
        }
        if let Some(code) = &self.code {
            f.and("a.code = ?", [Sql::from(code.clone())]);
        }
        if let Some(min) = self.min_severity {
            let at_least: Vec<Sql> =
                Severity::ALL.iter().filter(|s| **s >= min).map(|s| Sql::from(s.as_str().to_string())).collect();
            match at_least.len() {
                1 => f.and("a.severity = ?", at_least),
                2 => f.and("a.severity IN (?, ?)", at_least),
                3 => f.and("a.severity IN (?, ?, ?)", at_least),
                _ => &mut f,
            };
        }
        match self.scope {
            Scope::Any => &mut f,
            Scope::Active => f.and("a.cleared_at IS NULL", []),
            Scope::Attention => f.and("a.state IN ('unacknowledged', 'acknowledged', 'rtn_unacknowledged')", []),
            Scope::Suppressed => f.and("a.state IN ('shelved', 'out_of_service', 'suppressed')", []),
            Scope::State(s) => f.and("a.state = ?", [Sql::from(s.as_str().to_string())]),
        };
        if let Some(since) = self.since {
            f.and("a.raised_at >= ?", [Sql::from(since.unix())]);
        }
        if let Some(until) = self.until {
            f.and("a.raised_at < ?", [Sql::from(until.unix())]);
        }
        f
    }
}

/// How many occurrences match.
pub fn count(db: &Connection, q: &AlarmFilter) -> rusqlite::Result<i64> {
    let f = q.filter();
    db.prepare_cached(&["SELECT count(*) FROM alarms a", &f.where_clause()].concat())?
        .query_row(params_from_iter(f.params_with([])), |r| r.get(0))
}

/// A page of the occurrences that match, in `q.order`.
pub fn list(db: &Connection, q: &AlarmFilter, limit: i64, offset: i64) -> rusqlite::Result<Vec<AlarmRow>> {
    let f = q.filter();
    let order = match q.order {
        Order::Newest => "a.raised_at DESC, a.id DESC".to_string(),
        Order::Priority => format!("{}, a.raised_at DESC, a.id DESC", Severity::sql_rank("a.severity")),
    };
    let sql = format!(
        "SELECT a.id, a.asset_id, a.sensor_id, a.code, a.severity, a.state, a.message, a.value, a.threshold,
                a.raised_at, a.acked_at, a.acked_by, a.cleared_at, a.shelved_until, a.reraise_count,
                (SELECT n.id FROM notes n WHERE n.alarm_id = a.id AND n.kind = 'triage'),
                (SELECT j.state FROM triage_jobs j WHERE j.id = a.triage_job), a.episode_id
         FROM alarms a{} ORDER BY {order} LIMIT ? OFFSET ?",
        f.where_clause()
    );
    let at = |v: Option<i64>| v.map(Timestamp::from_unix);
    let mut stmt = db.prepare_cached(&sql)?;
    let rows = stmt.query_map(params_from_iter(f.params_with([Sql::from(limit), Sql::from(offset)])), |r| {
        Ok(AlarmRow {
            id: r.get(0)?,
            asset_id: r.get(1)?,
            sensor_id: r.get(2)?,
            code: r.get(3)?,
            severity: r.get(4)?,
            state: r.get(5)?,
            message: r.get(6)?,
            value: r.get::<_, Option<f64>>(7)?.map(shown),
            threshold: r.get::<_, Option<f64>>(8)?.map(shown),
            raised_at: Timestamp::from_unix(r.get(9)?),
            acked_at: at(r.get(10)?),
            acked_by: r.get(11)?,
            cleared_at: at(r.get(12)?),
            shelved_until: at(r.get(13)?),
            reraise_count: r.get(14)?,
            note_id: r.get(15)?,
            triage: r.get(16)?,
            episode_id: r.get(17)?,
        })
    })?;
    rows.collect()
}

/// The alarm summary an operator works from: one row per point (asset, sensor, code)
/// that needs attention, with its latest occurrence, how many need attention, and the
/// first and last raise; unacknowledged first, then active, then returned.
pub fn points(db: &Connection) -> rusqlite::Result<Vec<Value>> {
    let sql = format!(
        "WITH attention AS (
             SELECT * FROM alarms WHERE state IN ('unacknowledged', 'acknowledged', 'rtn_unacknowledged')),
         points AS (
             SELECT max(id) AS latest, count(*) AS n, min(raised_at) AS first_raised, max(raised_at) AS last_raised,
                    sum(state = 'unacknowledged' OR state = 'rtn_unacknowledged') AS unacked,
                    sum(state = 'rtn_unacknowledged') AS returned
             FROM attention GROUP BY asset_id, coalesce(sensor_id, ''), code)
         SELECT json_object('id', a.id, 'asset_id', a.asset_id, 'sensor_id', a.sensor_id, 'code', a.code,
                    'severity', a.severity, 'state', a.state,
                    'active', json(CASE WHEN a.cleared_at IS NULL THEN 'true' ELSE 'false' END), 'message', a.message,
                    'value', shown(a.value), 'threshold', shown(a.threshold), 'raised_at', rfc3339(a.raised_at),
                    'occurrences', p.n, 'unacknowledged', p.unacked, 'returned_unacknowledged', p.returned,
                    'first_raised_at', rfc3339(p.first_raised),
                    'last_raised_at', rfc3339(p.last_raised), 'note_id', n.id,
                    'triage', (SELECT state FROM triage_jobs j WHERE j.id = a.triage_job),
                    'episode', CASE WHEN e.id IS NOT NULL THEN json_object('id', e.id, 'points', e.points,
                        'note_id', (SELECT x.id FROM notes x WHERE x.episode_id = e.id),
                        'initiator', json((SELECT json_object('alarm_id', i.id, 'asset_id', i.asset_id,
                            'sensor_id', i.sensor_id, 'code', i.code) FROM alarms i WHERE i.id = e.initiator_alarm))) END)
         FROM points p JOIN alarms a ON a.id = p.latest
         LEFT JOIN episodes e ON e.id = a.episode_id
         LEFT JOIN notes n ON n.alarm_id = a.id AND n.kind = 'triage'
         ORDER BY CASE WHEN a.state = 'unacknowledged' THEN 0 WHEN a.cleared_at IS NULL THEN 1 ELSE 2 END,
                  {}, a.raised_at DESC, a.id DESC
         LIMIT 1000",
        Severity::sql_rank("a.severity")
    );
    crate::store::json_rows(&mut db.prepare_cached(&sql)?, [])
}

/// A triage note by its id, as the HMI shows it (marked as advice): its body, flags,
/// run and revision, and the alarms it covers.
pub fn note(db: &Connection, note_id: i64) -> rusqlite::Result<Option<Value>> {
    let row: Option<String> = db
        .prepare_cached(
            "SELECT json_object('note_id', n.id, 'alarm_id', n.alarm_id, 'body', json(n.body), 'flags', json(n.flags),
                    'run_id', n.run_id, 'created_at', rfc3339(n.created_at), 'revised_at', rfc3339(n.revised_at),
                    'revision', n.revision, 'episode_id', n.episode_id,
                    'covers', (SELECT count(*) FROM notes c WHERE c.covered_by = n.id),
                    'advisory', 'AI advisory: check before acting')
             FROM notes n WHERE n.id = ?1 AND n.kind = 'triage'",
        )?
        .query_row([note_id], |r| r.get(0))
        .optional()?;
    Ok(row.and_then(|r| serde_json::from_str(&r).ok()))
}

/// One occurrence as the HMI shows it: the alarm with its sensor's unit, its journal,
/// and its triage note (marked as advice); `None` when there is no such alarm.
pub fn one(db: &Connection, id: i64) -> rusqlite::Result<Option<Value>> {
    let record: Option<String> = db
        .query_row(
            "SELECT json_object('id', id, 'asset_id', asset_id, 'sensor_id', sensor_id, 'code', code, 'severity', severity,
                    'state', state, 'message', message, 'value', shown(value), 'threshold', shown(threshold),
                    'unit', (SELECT unit FROM sensors s WHERE s.id = alarms.sensor_id), 'raised_at', rfc3339(raised_at),
                    'cleared_at', rfc3339(cleared_at), 'acked_at', rfc3339(acked_at), 'acked_by', acked_by, 'shelved_until', rfc3339(shelved_until),
                    'reraise_count', reraise_count, 'suppressed_by', suppressed_by)
             FROM alarms WHERE id = ?1",
            [id],
            |r| r.get(0),
        )
        .optional()?;
    let Some(record) = record else { return Ok(None) };
    let mut stmt = db.prepare_cached(
        "SELECT json_object('kind', kind, 'at', rfc3339(at), 'actor', actor, 'detail', detail) FROM alarm_events WHERE alarm_id = ?1 ORDER BY id",
    )?;
    let journal = crate::store::json_rows(&mut stmt, [id])?;
    // A grouped alarm's note is its lead's: said with the note and alarm that cover it.
    // (id, body, flags, run, created, the covering note and its alarm)
    type NoteRow = (i64, String, String, Option<i64>, String, Option<(i64, i64)>);
    let note: Option<NoteRow> = db
        .query_row(
            // A covered record shows its lead's note as it stands (an episode's is revised).
            "SELECT n.id, coalesce(l.body, n.body), coalesce(l.flags, n.flags), coalesce(l.run_id, n.run_id),
                    rfc3339(n.created_at), l.id, l.alarm_id
             FROM notes n LEFT JOIN notes l ON l.id = n.covered_by WHERE n.alarm_id = ?1 AND n.kind = 'triage'",
            [id],
            |r| {
                let lead = match (r.get::<_, Option<i64>>(5)?, r.get::<_, Option<i64>>(6)?) {
                    (Some(note), Some(alarm)) => Some((note, alarm)),
                    _ => None,
                };
                Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?, r.get(4)?, lead))
            },
        )
        .optional()?;
    let note = note.map(|(note_id, body, flags, run_id, at, lead)| {
        json!({"note_id": note_id, "body": serde_json::from_str::<Value>(&body).unwrap_or(Value::Null),
               "flags": serde_json::from_str::<Value>(&flags).unwrap_or(Value::Null), "run_id": run_id,
               "created_at": at, "advisory": "AI advisory: check before acting",
               "covered_by": lead.map(|(note, alarm)| json!({"note_id": note, "alarm_id": alarm}))})
    });
    // The episode it came in, with that episode's one note: the link an alarm triaged
    // on its own before its flood was recognised still has.
    let episode: Option<String> = db
        .prepare_cached(
            "SELECT json_object('episode_id', p.id, 'points', p.points, 'closed', p.closed_at IS NOT NULL,
                    'initiator_alarm', p.initiator_alarm, 'note_id', (SELECT n.id FROM notes n WHERE n.episode_id = p.id))
             FROM alarms a JOIN episodes p ON p.id = a.episode_id WHERE a.id = ?1",
        )?
        .query_row([id], |r| r.get(0))
        .optional()?;
    let episode = episode.and_then(|e| serde_json::from_str::<Value>(&e).ok()).unwrap_or(Value::Null);
    Ok(Some(json!({"alarm": serde_json::from_str::<Value>(&record).unwrap_or(Value::Null), "journal": journal,
                   "note": note, "episode": episode})))
}
