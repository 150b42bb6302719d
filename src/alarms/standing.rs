//! Where an alarm point stands in the alarm system: whether it chatters, whether it is
//! one of this week's bad actors, how long its occurrence has stood, and whether an
//! occurrence of it was triaged within the hour. A triage note says so: the tenth
//! activation of a chattering point is not news, and operators should read it as such.

use rusqlite::{Connection, OptionalExtension, params};
use serde::Serialize;

use super::activity::{Counts, PointSums};
use super::kpi::{KpiSettings, Point};
use super::kpi_cache;
use crate::domain::Timestamp;

/// An earlier occurrence of the same point, triaged within the hour.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct EarlierNote {
    pub alarm_id: i64,
    pub raised_at: Timestamp,
    pub note_id: i64,
}

/// The point's standing, as of `now`.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Standing {
    /// Annunciated activations of the point in the hour to `now`.
    pub activations_last_hour: i64,
    /// It chattered in that hour (the KPI definition: 3 or more within 60 s).
    pub chattering: bool,
    /// Its rank (1 to 10) among this week's most frequent points, when it is a bad actor
    /// (at least [`BAD_ACTOR_MIN_WEEK`] activations), and its activations in the week.
    pub week_rank: Option<usize>,
    pub week_activations: i64,
    /// How long this occurrence has been active, when it still is.
    pub active_for_secs: Option<i64>,
    pub earlier: Option<EarlierNote>,
}

impl Standing {
    /// Whether there is anything to say: a bad actor, a repeat, or a long-standing alarm.
    pub fn is_notable(&self) -> bool {
        self.chattering
            || self.week_rank.is_some()
            || self.earlier.is_some()
            || self.active_for_secs.is_some_and(|s| s >= 3600)
    }

    /// What the model is shown (as data): the figures, and the same sentences the rules
    /// model writes, so that either note quotes only what it was given.
    pub fn to_json(&self) -> serde_json::Value {
        let mut v = serde_json::to_value(self).unwrap_or_default();
        if let Some(secs) = self.active_for_secs {
            v["active_for"] = crate::domain::approx_duration(secs).into();
        }
        v["said"] = self.sentences().into();
        v
    }

    /// What a note says of it, in sentences whose figures are the standing's own.
    pub fn sentences(&self) -> Vec<String> {
        let mut out = Vec::new();
        if let Some(e) = &self.earlier {
            out.push(format!(
                "A repeat: alarm {} on this point, raised {}, was triaged within the hour (note {}); read that note rather than treating this as new.",
                e.alarm_id,
                e.raised_at.to_rfc3339(),
                e.note_id
            ));
        }
        if self.chattering {
            out.push(format!("This point is chattering: {} activations in the last hour.", self.activations_last_hour));
        }
        if let Some(rank) = self.week_rank {
            out.push(format!(
                "A bad actor: number {rank} of this week's most frequent alarms, with {} activations in 7 days.",
                self.week_activations
            ));
        }
        if let Some(secs) = self.active_for_secs.filter(|s| *s >= 3600) {
            out.push(format!("Active for {} (since it was raised).", crate::domain::approx_duration(secs)));
        }
        out
    }
}

/// A bad actor is one of the week's 10 most frequent points with at least this many
/// activations in it (more than one a day): on a quiet plant, a point raised once is
/// not a bad actor for being in the top 10 of few.
pub const BAD_ACTOR_MIN_WEEK: i64 = 10;

/// The standing of alarm `alarm_id`'s point as of `now`.
pub fn of(conn: &Connection, alarm_id: i64, now: Timestamp) -> rusqlite::Result<Option<Standing>> {
    // asset, sensor, code, raised at, cleared at
    type Row = (String, Option<String>, String, i64, Option<i64>);
    let row: Option<Row> = conn
        .prepare_cached("SELECT asset_id, sensor_id, code, raised_at, cleared_at FROM alarms WHERE id = ?1")?
        .query_row([alarm_id], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?, r.get(4)?)))
        .optional()?;
    let Some((asset, sensor, code, raised_at, cleared_at)) = row else { return Ok(None) };
    let point = Point { asset_id: asset.clone(), sensor_id: sensor.clone(), code: code.clone() };
    let counts = |from: Timestamp| -> rusqlite::Result<(PointSums, Counts)> {
        let (_, sums) =
            kpi_cache::activity(conn, from.unix() * 1000, (now.unix() + 1) * 1000, &KpiSettings::default())?;
        let counts = sums.key_of(conn, &point)?.map(|k| sums.get(k)).unwrap_or_default();
        Ok((sums, counts))
    };
    let (_, hour) = counts(now.plus_secs(-3600))?;
    let (activations_last_hour, chattering) = (hour.activations, hour.chatter_episodes > 0);
    let (week, counts) = counts(now.plus_secs(-7 * 86_400))?;
    let week_activations = counts.activations;
    let week_rank = if week_activations >= BAD_ACTOR_MIN_WEEK {
        let (top, _) = week.first(conn, 10, |c| c.activations > 0)?;
        top.iter().position(|r| r.point == point).map(|i| i + 1)
    } else {
        None
    };
    let earlier = conn
        .prepare_cached(
            "SELECT a.id, a.raised_at, n.id FROM alarms a JOIN notes n ON n.alarm_id = a.id AND n.kind = 'triage'
             WHERE a.asset_id = ?1 AND coalesce(a.sensor_id, '') = coalesce(?2, '') AND a.code = ?3
               AND a.id <> ?4 AND a.raised_at >= ?5 AND a.raised_at <= ?6
             ORDER BY a.raised_at DESC, a.id DESC LIMIT 1",
        )?
        .query_row(params![asset, sensor, code, alarm_id, raised_at - 3600, raised_at], |r| {
            Ok(EarlierNote { alarm_id: r.get(0)?, raised_at: Timestamp::from_unix(r.get(1)?), note_id: r.get(2)? })
        })
        .optional()?;
    Ok(Some(Standing {
        activations_last_hour,
        chattering,
        week_rank,
        week_activations,
        active_for_secs: cleared_at.is_none().then_some(now.unix() - raised_at).filter(|s| *s >= 0),
        earlier,
    }))
}
