//! Writing readings: the raw row and its hourly rollup, in one transaction, through
//! one function, so the two can never disagree; and a sensor's trend as the HMI draws it.

use std::collections::HashMap;

use rusqlite::{Connection, params};

use super::{StoreError, Writer};
use crate::domain::Timestamp;

/// A sensor's alarm limits: [LL, L, H, HH].
pub type Limits = [Option<f64>; 4];

/// Aggregates of a run of samples from `start` on: one sample, or one hour's rollup.
/// Time sums are over each sample's offset from `start`, in hours.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Summary {
    pub start: i64,
    pub n: i64,
    pub sum: f64,
    pub sum_sq: f64,
    pub min: f64,
    pub max: f64,
    pub sum_t: f64,
    pub sum_tt: f64,
    pub sum_tv: f64,
    /// Samples beyond LL, L, H, HH.
    pub beyond: [i64; 4],
}

impl Summary {
    pub fn empty(start: i64) -> Summary {
        Summary {
            start,
            n: 0,
            sum: 0.0,
            sum_sq: 0.0,
            min: f64::INFINITY,
            max: f64::NEG_INFINITY,
            sum_t: 0.0,
            sum_tt: 0.0,
            sum_tv: 0.0,
            beyond: [0; 4],
        }
    }

    /// Adds a sample taken at `at_ms` (milliseconds since the epoch).
    pub fn add(&mut self, at_ms: i64, v: f64, limits: &Limits) {
        let t = (at_ms - self.start * 1000) as f64 / 3_600_000.0;
        self.n += 1;
        self.sum += v;
        self.sum_sq += v * v;
        self.min = self.min.min(v);
        self.max = self.max.max(v);
        self.sum_t += t;
        self.sum_tt += t * t;
        self.sum_tv += t * v;
        for (count, beyond) in self.beyond.iter_mut().zip(beyond_limits(v, limits)) {
            *count += i64::from(beyond);
        }
    }
}

/// Whether `v` is beyond each of LL, L, H, HH (strictly, as an alarm would be raised).
pub fn beyond_limits(v: f64, [ll, l, h, hh]: &Limits) -> [bool; 4] {
    let below = |x: &Option<f64>| x.is_some_and(|x| v < x);
    let above = |x: &Option<f64>| x.is_some_and(|x| v > x);
    [below(ll), below(l), above(h), above(hh)]
}

/// Inserts readings for one sensor, `(time in ms, value)`, skipping any already stored
/// (same sensor and millisecond), and adds the new ones to their hourly rollups. Returns
/// how many were new.
pub fn insert_readings(conn: &Connection, key: i64, limits: &Limits, rows: &[(i64, f64)]) -> rusqlite::Result<usize> {
    let mut batch = Rollups::default();
    let mut new = 0;
    for &(ts, v) in rows {
        new += usize::from(batch.insert(conn, key, limits, ts, v)? == Stored::New);
    }
    batch.flush(conn)?;
    Ok(new)
}

/// Readings written as they come, their hourly rollups summed in memory and written
/// once per sensor-hour by [`Rollups::flush`], in the same transaction: a batch of a
/// thousand readings costs a handful of rollup upserts, not a thousand.
#[derive(Default)]
pub struct Rollups {
    hours: HashMap<(i64, i64), Summary>,
}

/// What inserting a reading did.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Stored {
    New,
    /// The same value at the same millisecond was stored before: a harmless repeat.
    Duplicate,
    /// Another value is stored at this millisecond, kept; the argument is that value.
    Conflict(f64),
}

impl Rollups {
    /// Inserts one reading taken at `at_ms` (milliseconds since the epoch) unless a
    /// reading of the sensor is stored at that millisecond already.
    pub fn insert(
        &mut self,
        conn: &Connection,
        key: i64,
        limits: &Limits,
        at_ms: i64,
        v: f64,
    ) -> rusqlite::Result<Stored> {
        let mut insert = conn.prepare_cached(
            "INSERT INTO readings (sensor_key, ts, value) VALUES (?1, ?2, ?3) ON CONFLICT DO NOTHING",
        )?;
        if insert.execute(params![key, at_ms, v])? == 0 {
            let stored: f64 = conn
                .prepare_cached("SELECT value FROM readings WHERE sensor_key = ?1 AND ts = ?2")?
                .query_row(params![key, at_ms], |r| r.get(0))?;
            return Ok(if stored == v { Stored::Duplicate } else { Stored::Conflict(stored) });
        }
        let hour = at_ms.div_euclid(3_600_000) * 3600;
        self.hours.entry((key, hour)).or_insert_with(|| Summary::empty(hour)).add(at_ms, v, limits);
        Ok(Stored::New)
    }

    /// Adds the summed readings to their rollups. Must run before the transaction ends.
    pub fn flush(self, conn: &Connection) -> rusqlite::Result<()> {
        let mut upsert = conn.prepare_cached(
            "INSERT INTO readings_hourly (sensor_key, hour, n, sum, sum_sq, min, max, sum_t, sum_tt, sum_tv, n_ll, n_l, n_h, n_hh)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14)
             ON CONFLICT (sensor_key, hour) DO UPDATE SET
                 n = n + excluded.n, sum = sum + excluded.sum, sum_sq = sum_sq + excluded.sum_sq,
                 min = min(min, excluded.min), max = max(max, excluded.max),
                 sum_t = sum_t + excluded.sum_t, sum_tt = sum_tt + excluded.sum_tt, sum_tv = sum_tv + excluded.sum_tv,
                 n_ll = n_ll + excluded.n_ll, n_l = n_l + excluded.n_l, n_h = n_h + excluded.n_h, n_hh = n_hh + excluded.n_hh",
        )?;
        let mut hours: Vec<_> = self.hours.into_iter().collect();
        // Key order: the upserts walk the rollup index forwards.
        hours.sort_unstable_by_key(|(k, _)| *k);
        for ((key, _), s) in hours {
            upsert.execute(params![
                key,
                s.start,
                s.n,
                s.sum,
                s.sum_sq,
                s.min,
                s.max,
                s.sum_t,
                s.sum_tt,
                s.sum_tv,
                s.beyond[0],
                s.beyond[1],
                s.beyond[2],
                s.beyond[3]
            ])?;
        }
        Ok(())
    }
}

/// Deletes raw readings older than `before`, at most `batch` rows per transaction so
/// that ingest never waits long behind it; the hourly rollups are kept for long
/// trends. Returns the rows deleted.
pub async fn prune_readings(writer: &Writer, before: Timestamp, batch: usize) -> Result<usize, StoreError> {
    let w = writer.clone();
    let keys: Vec<i64> = w
        .call_async(|c| {
            let mut stmt = c.prepare_cached("SELECT key FROM sensors ORDER BY key")?;
            let keys = stmt.query_map([], |r| r.get(0))?.collect::<Result<_, _>>()?;
            Ok::<_, StoreError>(keys)
        })
        .await?;
    let mut deleted = 0;
    for key in keys {
        loop {
            let n = w
                .call_async(move |c| {
                    // The oldest `batch` rows of one sensor: a range scan of the primary key.
                    Ok::<_, StoreError>(c.prepare_cached(
                        "DELETE FROM readings WHERE sensor_key = ?1 AND ts <= (
                             SELECT max(ts) FROM (SELECT ts FROM readings WHERE sensor_key = ?1 AND ts < ?2 ORDER BY ts LIMIT ?3))",
                    )?
                    .execute(rusqlite::params![key, before.unix() * 1000, batch as i64])?)
                })
                .await?;
            deleted += n;
            if n < batch {
                break;
            }
        }
    }
    Ok(deleted)
}

/// Most points a trend returns; longer windows are thinned to min and max per bucket,
/// so spikes survive.
pub const MAX_TREND_POINTS: usize = 2000;

/// A sensor's trend for the HMI over `hours`: its unit, limits, and `[unix s, value]`
/// points. The window ends now, or at the last reading when the sensor has gone quiet
/// (`stale`): a stale sensor's trend shows its last hours, not an empty chart. `None`
/// when there is no such sensor.
pub fn trend(
    db: &rusqlite::Connection,
    sensor_id: &str,
    hours: i64,
    now: crate::domain::Timestamp,
) -> rusqlite::Result<Option<serde_json::Value>> {
    use rusqlite::OptionalExtension;
    let sensor: Option<(i64, String, String, [Option<f64>; 4])> = db
        .query_row(
            "SELECT key, unit, description, limit_ll, limit_l, limit_h, limit_hh FROM sensors WHERE id = ?1",
            [sensor_id],
            |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, [r.get(3)?, r.get(4)?, r.get(5)?, r.get(6)?])),
        )
        .optional()?;
    let Some((key, unit, description, [ll, l, h, hh])) = sensor else { return Ok(None) };
    let now = now.unix();
    let last: Option<i64> = db
        .prepare_cached("SELECT ts / 1000 FROM readings WHERE sensor_key = ?1 AND ts <= ?2 ORDER BY ts DESC LIMIT 1")?
        .query_row(rusqlite::params![key, (now + 1) * 1000], |r| r.get(0))
        .optional()?;
    let until = last.map_or(now, |last| last.min(now));
    let since = until - hours * 3600;
    let mut stmt = db.prepare_cached(
        "SELECT ts / 1000, value FROM readings WHERE sensor_key = ?1 AND ts >= ?2 AND ts < ?3 ORDER BY ts",
    )?;
    let all: Vec<(i64, f64)> = stmt
        .query_map(rusqlite::params![key, since * 1000, (until + 1) * 1000], |r| Ok((r.get(0)?, r.get(1)?)))?
        .collect::<Result<_, _>>()?;
    let points: Vec<(i64, f64)> = if all.len() <= MAX_TREND_POINTS {
        all
    } else {
        all.chunks(all.len().div_ceil(MAX_TREND_POINTS / 2))
            .flat_map(|c| {
                let lo = c.iter().min_by(|a, b| a.1.total_cmp(&b.1)).copied().expect("non-empty");
                let hi = c.iter().max_by(|a, b| a.1.total_cmp(&b.1)).copied().expect("non-empty");
                if lo.0 <= hi.0 { [lo, hi] } else { [hi, lo] }
            })
            .collect()
    };
    Ok(Some(serde_json::json!({"sensor_id": sensor_id, "unit": unit, "description": description, "hours": hours,
                   "until": crate::domain::Timestamp::from_unix(until), "stale": until < now - 300,
                   "limits": {"ll": ll, "l": l, "h": h, "hh": hh}, "points": points})))
}
