//! The alarm figures' cache: each closed UTC hour's activity as [`activity::span`]
//! computes it with the default definitions (activations per 10-minute period by
//! severity, and per point its activations, fleeting activations and chattering
//! episodes begun). A year's figures then sum about as many rows as there are
//! (point, hour) pairs with an activation, instead of passing over every journal event.
//! Points are ids in a dictionary of their own (`alarm_kpi_points`), named only when a
//! figure lists them.
//!
//! An hour is cached once it is over, past the fleeting limit and a minute for events
//! in flight, by housekeeping or `alarms kpi`. An event journalled late (a gateway
//! replaying its buffer) drops the hours it can change ([`invalidate`]); until they are
//! cached again the figures pass over those hours' events. The cache holds nothing the
//! journal does not: emptying it loses nothing.

use std::collections::HashMap;

use rusqlite::{Connection, OptionalExtension, params};

use super::activity::{self, Activity, Counts, HOUR_MS, PERIOD_MS, PeriodCounts, PointSums};
use super::definitions::{KpiSettings, MAX_WINDOW_DAYS, Point};
use crate::domain::Timestamp;
use crate::store::{StoreError, Writer};

/// Hours computed per writer job, so ingest is never held up long.
const HOURS_PER_JOB: i64 = 24;
/// How long after an hour's fleeting limit it is cached: events still in flight.
const IN_FLIGHT_MS: i64 = 60_000;

/// The definitions the cache was computed with. Figures with other settings pass over
/// the journal; a cache of other definitions (an older build's) is emptied.
fn definition(s: &KpiSettings) -> String {
    format!("chatter {}/{}s, fleeting {}s", s.chatter_activations, s.chatter_window_secs, s.fleeting_secs)
}

pub fn cacheable(s: &KpiSettings) -> bool {
    definition(s) == definition(&KpiSettings::default())
}

/// Caches every closed hour not cached yet, from the journal's first event (or the
/// longest window the figures take) to `now`. Returns how many hours it computed.
pub fn refresh(writer: &Writer, now: Timestamp) -> Result<usize, StoreError> {
    let def = definition(&KpiSettings::default());
    let missing = writer.call(move |c| -> Result<Vec<(i64, i64)>, StoreError> {
        let other: Option<i64> = c
            .prepare_cached("SELECT 1 FROM alarm_kpi_hours WHERE definition <> ?1 LIMIT 1")?
            .query_row([&def], |r| r.get(0))
            .optional()?;
        if other.is_some() {
            c.execute_batch(
                "DELETE FROM alarm_kpi_hours; DELETE FROM alarm_kpi_periods; DELETE FROM alarm_kpi_point_hours;",
            )?;
        }
        let first: Option<i64> = c.query_row("SELECT min(at) FROM alarm_events", [], |r| r.get(0))?;
        let Some(first) = first else { return Ok(Vec::new()) };
        let fleeting_ms = KpiSettings::default().fleeting_secs * 1000;
        let now_ms = now.unix() * 1000;
        let lo = (first * 1000).div_euclid(HOUR_MS).max(now_ms.div_euclid(HOUR_MS) - (MAX_WINDOW_DAYS + 1) * 24);
        let hi = (now_ms - fleeting_ms - IN_FLIGHT_MS).div_euclid(HOUR_MS);
        let mut cached = c.prepare_cached("SELECT hour FROM alarm_kpi_hours WHERE hour >= ?1 AND hour < ?2")?;
        let cached: Vec<i64> = cached.query_map([lo, hi], |r| r.get(0))?.collect::<Result<_, _>>()?;
        Ok(gaps(lo, hi, &cached))
    })?;
    let mut computed = 0;
    for (from, to) in missing {
        let mut h = from;
        while h < to {
            let end = (h + HOURS_PER_JOB).min(to);
            writer.call(move |c| -> Result<(), StoreError> {
                let act = activity::span(c, h * HOUR_MS, end * HOUR_MS, &KpiSettings::default(), true)?;
                store(c, h, end, &act)?;
                Ok(())
            })?;
            computed += (end - h) as usize;
            h = end;
        }
    }
    Ok(computed)
}

/// The runs of hours in [lo, hi) that are not in `cached` (sorted).
fn gaps(lo: i64, hi: i64, cached: &[i64]) -> Vec<(i64, i64)> {
    let mut gaps = Vec::new();
    let mut next = lo;
    for &h in cached {
        if h > next {
            gaps.push((next, h));
        }
        next = next.max(h + 1);
    }
    if next < hi {
        gaps.push((next, hi));
    }
    gaps
}

/// Writes hours [from, to)'s activity, replacing what was there.
fn store(c: &Connection, from: i64, to: i64, act: &Activity) -> rusqlite::Result<()> {
    let def = definition(&KpiSettings::default());
    let per_hour = HOUR_MS / PERIOD_MS;
    c.prepare_cached("DELETE FROM alarm_kpi_point_hours WHERE hour >= ?1 AND hour < ?2")?.execute([from, to])?;
    c.prepare_cached("DELETE FROM alarm_kpi_periods WHERE period >= ?1 AND period < ?2")?
        .execute([from * per_hour, to * per_hour])?;
    let mut period = c.prepare_cached(
        "INSERT INTO alarm_kpi_periods (period, low, medium, high, critical, suppressed) VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
    )?;
    for (p, n) in &act.periods {
        period.execute(params![p, n[0], n[1], n[2], n[3], n[4]])?;
    }
    let mut ids: Vec<Option<i64>> = vec![None; act.points.len()];
    let mut row = c.prepare_cached(
        "INSERT INTO alarm_kpi_point_hours (hour, point, activations, fleeting, chatter_episodes)
         VALUES (?1, ?2, ?3, ?4, ?5)",
    )?;
    for (&(hour, p), n) in &act.counts {
        let id = match ids[p] {
            Some(id) => id,
            None => *ids[p].insert(dictionary_add(c, &act.points[p])?),
        };
        row.execute(params![hour, id, n.activations, n.fleeting, n.chatter_episodes])?;
    }
    let mut hour = c.prepare_cached("INSERT OR REPLACE INTO alarm_kpi_hours (hour, definition) VALUES (?1, ?2)")?;
    for h in from..to {
        hour.execute(params![h, def])?;
    }
    Ok(())
}

/// Point `p`'s id in the cache's dictionary, given one if it has none.
fn dictionary_add(c: &Connection, p: &Point) -> rusqlite::Result<i64> {
    if let Some(id) = activity::dictionary_id(c, p)? {
        return Ok(id);
    }
    c.prepare_cached("INSERT INTO alarm_kpi_points (asset_id, sensor_id, code) VALUES (?1, ?2, ?3)")?
        .execute(params![p.asset_id, p.sensor_id.as_deref().unwrap_or(""), p.code])?;
    Ok(c.last_insert_rowid())
}

/// Drops the cached hours an event journalled now can change: for an activation at
/// `at_ms`, its hour and those of the activations in the two chatter windows after it
/// (whose episodes may begin differently); for a return to normal, also the hour its
/// occurrence was raised in (`raised_secs`: whether it was fleeting). Cheap when
/// nothing is cached there, as for events that arrive on time.
pub(super) fn invalidate(conn: &Connection, raised_secs: i64, at_ms: i64) -> rusqlite::Result<()> {
    let window_ms = KpiSettings::default().chatter_window_secs * 1000;
    let from = (raised_secs * 1000).min(at_ms).div_euclid(HOUR_MS);
    let to = (at_ms + 2 * window_ms).div_euclid(HOUR_MS);
    let cached: Option<i64> = conn
        .prepare_cached("SELECT 1 FROM alarm_kpi_hours WHERE hour >= ?1 AND hour <= ?2 LIMIT 1")?
        .query_row([from, to], |r| r.get(0))
        .optional()?;
    if cached.is_none() {
        return Ok(());
    }
    let per_hour = HOUR_MS / PERIOD_MS;
    conn.prepare_cached("DELETE FROM alarm_kpi_hours WHERE hour >= ?1 AND hour <= ?2")?.execute([from, to])?;
    conn.prepare_cached("DELETE FROM alarm_kpi_point_hours WHERE hour >= ?1 AND hour <= ?2")?.execute([from, to])?;
    conn.prepare_cached("DELETE FROM alarm_kpi_periods WHERE period >= ?1 AND period < ?2")?
        .execute([from * per_hour, (to + 1) * per_hour])?;
    Ok(())
}

/// The activity of [from_ms, to_ms): the cached hours inside it summed, the rest (its
/// ragged ends, hours not cached yet) passed over. With other than the default
/// definitions, all of it is passed over.
pub fn activity(
    conn: &Connection,
    from_ms: i64,
    to_ms: i64,
    settings: &KpiSettings,
) -> rusqlite::Result<(HashMap<i64, PeriodCounts>, PointSums)> {
    // One snapshot: housekeeping may cache hours meanwhile.
    conn.execute_batch("SAVEPOINT kpi_snapshot")?;
    let result = activity_in_snapshot(conn, from_ms, to_ms, settings);
    conn.execute_batch("RELEASE kpi_snapshot")?;
    result
}

fn activity_in_snapshot(
    conn: &Connection,
    from_ms: i64,
    to_ms: i64,
    settings: &KpiSettings,
) -> rusqlite::Result<(HashMap<i64, PeriodCounts>, PointSums)> {
    let (h1, h2) = ((from_ms + HOUR_MS - 1).div_euclid(HOUR_MS), to_ms.div_euclid(HOUR_MS));
    let cached: Vec<i64> = if cacheable(settings) && h1 < h2 {
        let mut stmt = conn.prepare_cached("SELECT hour FROM alarm_kpi_hours WHERE hour >= ?1 AND hour < ?2")?;
        stmt.query_map([h1, h2], |r| r.get(0))?.collect::<Result<_, _>>()?
    } else {
        Vec::new()
    };
    let mut periods: HashMap<i64, PeriodCounts> = HashMap::new();
    let mut points = PointSums::default();
    // The spans not cached: gaps between cached hours, in milliseconds, ends included.
    let mut raw: Vec<(i64, i64)> = Vec::new();
    if cached.is_empty() {
        raw.push((from_ms, to_ms));
    } else {
        raw.push((from_ms, h1 * HOUR_MS));
        raw.extend(gaps(h1, h2, &cached).into_iter().map(|(a, b)| (a * HOUR_MS, b * HOUR_MS)));
        raw.push((h2 * HOUR_MS, to_ms));
        sum_cached(conn, h1, h2, &mut periods, &mut points)?;
    }
    let used_cache = !cached.is_empty();
    for (a, b) in raw.into_iter().filter(|(a, b)| a < b) {
        let span = activity::span(conn, a, b, settings, false)?;
        for (p, n) in &span.periods {
            let into = periods.entry(*p).or_default();
            for (i, v) in n.iter().enumerate() {
                into[i] += v;
            }
        }
        // A point the cached hours may have counted too is summed under its id.
        for (p, c) in span.points.iter().zip(span.per_point()) {
            match used_cache.then(|| activity::dictionary_id(conn, p)).transpose()?.flatten() {
                Some(id) => points.add_cached(id, c),
                None => points.add_named(p, c),
            }
        }
    }
    Ok((periods, points))
}

/// Adds the cached hours [h1, h2) (only cached hours have rows).
fn sum_cached(
    conn: &Connection,
    h1: i64,
    h2: i64,
    periods: &mut HashMap<i64, PeriodCounts>,
    points: &mut PointSums,
) -> rusqlite::Result<()> {
    let per_hour = HOUR_MS / PERIOD_MS;
    let mut stmt = conn.prepare_cached(
        "SELECT period, low, medium, high, critical, suppressed FROM alarm_kpi_periods
         WHERE period >= ?1 AND period < ?2",
    )?;
    let mut rows = stmt.query([h1 * per_hour, h2 * per_hour])?;
    while let Some(r) = rows.next()? {
        periods.insert(r.get(0)?, [r.get(1)?, r.get(2)?, r.get(3)?, r.get(4)?, r.get(5)?]);
    }
    // One range scan, summed here by point (SQLite's GROUP BY would sort the rows first).
    let mut stmt = conn.prepare_cached(
        "SELECT point, activations, fleeting, chatter_episodes FROM alarm_kpi_point_hours WHERE hour >= ?1 AND hour < ?2",
    )?;
    let mut rows = stmt.query([h1, h2])?;
    while let Some(r) = rows.next()? {
        points
            .add_cached(r.get(0)?, Counts { activations: r.get(1)?, fleeting: r.get(2)?, chatter_episodes: r.get(3)? });
    }
    Ok(())
}
