//! `get_sensor_history`: what a sensor did over a window, as statistics and a short
//! downsampled series. Never thousands of raw points.

use rusqlite::{OptionalExtension, params};
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::{Value, json};

use super::hints::existing_sensor;
use super::{ToolContext, ToolDef, ToolError, check_range, define, parse_args};
use crate::domain::{Access, Timestamp, parse_time, shown};
use crate::store::{Limits, Summary};

const NAME: &str = "get_sensor_history";
const DESCRIPTION: &str = "History of one sensor over a window ending now (or at `until`): sample count, min and max \
(with their times), mean, standard deviation, first and last value, the least-squares trend (`trend`: the span it \
was fitted over and the change across that span; a rate per hour or per day only when the readings span most of an hour \
or a day, never stretched beyond the data; too few readings or too short a span says so instead), \
minutes spent beyond each alarm limit (ll, l, h, hh), and a downsampled series of `points` buckets \
[start, mean, min, max]. All values are in the sensor's unit, given in the result. sensor_id format: \
PUMP-007.VIB-DE (asset id, a dot, the tag); get_asset_details lists an asset's sensors. Use it to tell a developing \
fault (steady trend) from noise or a one-off spike.";

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Args {
    /// Sensor id, e.g. PUMP-007.VIB-DE.
    sensor_id: String,
    /// Window length in hours, 1 to 168 (7 days). Default 24.
    #[serde(default = "default_hours")]
    #[schemars(range(min = 1, max = 168))]
    hours: i64,
    /// Buckets in the downsampled series, 4 to 96. Default 24.
    #[serde(default = "default_points")]
    #[schemars(range(min = 4, max = 96))]
    points: i64,
    /// End of the window, RFC 3339 UTC. Default: now.
    until: Option<String>,
}

fn default_hours() -> i64 {
    24
}

fn default_points() -> i64 {
    24
}

pub fn def() -> ToolDef {
    define::<Args>(NAME, DESCRIPTION, Access::Read, "Ask for fewer points or a shorter window.", |ctx, args| {
        run(ctx, parse_args(args)?)
    })
}

/// A sample stands for at most this long when converting samples beyond a limit into
/// minutes, so that a gap in the data is not counted as time in alarm.
const MAX_SAMPLE_SECS: i64 = 300;

fn run(ctx: &ToolContext, args: Args) -> Result<Value, ToolError> {
    check_range("hours", args.hours, 1, 168)?;
    check_range("points", args.points, 4, 96)?;
    let (sensor_id, key) = existing_sensor(ctx.db, "sensor_id", &args.sensor_id)?;
    let to = match &args.until {
        Some(s) => parse_time(s).map_err(|e| ToolError::InvalidArguments(format!("until: {e}")))?,
        None => ctx.now,
    };
    let from = to.plus_secs(-3600 * args.hours);
    let (unit, kind, limits): (String, String, Limits) = ctx
        .db
        .prepare_cached("SELECT unit, kind, limit_ll, limit_l, limit_h, limit_hh FROM sensors WHERE key = ?1")?
        .query_row([key], |r| Ok((r.get(0)?, r.get(1)?, [r.get(2)?, r.get(3)?, r.get(4)?, r.get(5)?])))?;
    let sensor = json!({"id": sensor_id, "kind": kind, "unit": unit,
        "limits": {"ll": limits[0], "l": limits[1], "h": limits[2], "hh": limits[3]}});
    let window = json!({"from": from, "to": to, "hours": args.hours});

    let edge = |sql: &str| -> Result<Option<(i64, f64)>, ToolError> {
        Ok(ctx
            .db
            .prepare_cached(sql)?
            .query_row(params![key, (from.unix() + 1) * 1000, (to.unix() + 1) * 1000], |r| Ok((r.get(0)?, r.get(1)?)))
            .optional()?)
    };
    let first = edge(
        "SELECT ts / 1000, value FROM readings WHERE sensor_key = ?1 AND ts >= ?2 AND ts < ?3 ORDER BY ts LIMIT 1",
    )?;
    let last = edge(
        "SELECT ts / 1000, value FROM readings WHERE sensor_key = ?1 AND ts >= ?2 AND ts < ?3 ORDER BY ts DESC LIMIT 1",
    )?;
    let (Some(first), Some(last)) = (first, last) else {
        let hint = no_readings_hint(ctx, key)?;
        return Ok(json!({"sensor": sensor, "window": window, "samples": 0, "hint": hint}));
    };
    let acc = accumulate(ctx, key, (from.unix(), to.unix()), args.points as usize, &limits)?;
    let min_at = pin(
        ctx,
        key,
        acc.min,
        "SELECT ts / 1000 FROM readings WHERE sensor_key = ?1 AND ts >= ?2 AND ts < ?3 ORDER BY value ASC, ts LIMIT 1",
    )?;
    let max_at = pin(
        ctx,
        key,
        acc.max,
        "SELECT ts / 1000 FROM readings WHERE sensor_key = ?1 AND ts >= ?2 AND ts < ?3 ORDER BY value DESC, ts LIMIT 1",
    )?;

    let n = acc.total.n;
    // The sampling interval, from the data: minutes beyond a limit = samples beyond it
    // times the interval.
    let interval = if n > 1 { ((last.0 - first.0) as f64 / (n - 1) as f64).min(MAX_SAMPLE_SECS as f64) } else { 60.0 };
    let minutes = |i: usize| (acc.total.beyond[i] as f64 * interval / 60.0).round() as i64;
    Ok(json!({
        "sensor": sensor,
        "window": window,
        "samples": n,
        "stats": acc.stats(first, last, min_at, max_at),
        "minutes_beyond_limits": {"ll": minutes(0), "l": minutes(1), "h": minutes(2), "hh": minutes(3)},
        "series": {
            "columns": ["start", "mean", "min", "max"],
            "rows": acc.series(),
        },
    }))
}

/// Why a window holds no readings, and where to look instead.
fn no_readings_hint(ctx: &ToolContext, key: i64) -> Result<String, ToolError> {
    let latest: Option<i64> = ctx
        .db
        .prepare_cached("SELECT max(ts) / 1000 FROM readings WHERE sensor_key = ?1")?
        .query_row([key], |r| r.get(0))
        .optional()?
        .flatten();
    let hint = match latest {
        Some(ts) => format!(
            "No readings in this window; the latest reading is at {}. Move the window with until, or widen hours.",
            Timestamp::from_unix(ts).to_rfc3339()
        ),
        None => {
            "This sensor has no readings at all: the transmitter may not be connected to the historian.".to_string()
        }
    };
    Ok(hint)
}

/// The window (from, to], in unix seconds, as `points` buckets: whole hours inside it
/// come from the hourly rollups and the ragged ends from the raw readings. The sums
/// combine exactly either way.
fn accumulate(
    ctx: &ToolContext,
    key: i64,
    (from, to): (i64, i64),
    points: usize,
    limits: &Limits,
) -> Result<Accumulator, ToolError> {
    let full_start = (from + 1 + 3599).div_euclid(3600) * 3600;
    let full_end = (to + 1).div_euclid(3600) * 3600;
    let mut acc = Accumulator::new(from, to, points);
    let mut raw = ctx
        .db
        .prepare_cached("SELECT ts, value FROM readings WHERE sensor_key = ?1 AND ts >= ?2 AND ts < ?3 ORDER BY ts")?;
    // Readings in the seconds (lo, hi]; `ts` is in milliseconds.
    let mut add_raw = |lo: i64, hi: i64, acc: &mut Accumulator| -> Result<(), ToolError> {
        let mut rows = raw.query(params![key, (lo + 1) * 1000, (hi + 1) * 1000])?;
        while let Some(row) = rows.next()? {
            let (at_ms, v): (i64, f64) = (row.get(0)?, row.get(1)?);
            let mut one = Summary::empty(at_ms.div_euclid(1000));
            one.add(at_ms, v, limits);
            acc.push(&one);
        }
        Ok(())
    };
    if full_start < full_end {
        add_raw(from, full_start - 1, &mut acc)?;
        let mut stmt = ctx.db.prepare_cached(
            "SELECT hour, n, sum, sum_sq, min, max, sum_t, sum_tt, sum_tv, n_ll, n_l, n_h, n_hh
             FROM readings_hourly WHERE sensor_key = ?1 AND hour >= ?2 AND hour < ?3 ORDER BY hour",
        )?;
        let mut rows = stmt.query(params![key, full_start, full_end])?;
        while let Some(r) = rows.next()? {
            acc.push(&Summary {
                start: r.get(0)?,
                n: r.get(1)?,
                sum: r.get(2)?,
                sum_sq: r.get(3)?,
                min: r.get(4)?,
                max: r.get(5)?,
                sum_t: r.get(6)?,
                sum_tt: r.get(7)?,
                sum_tv: r.get(8)?,
                beyond: [r.get(9)?, r.get(10)?, r.get(11)?, r.get(12)?],
            });
        }
        add_raw(full_end - 1, to, &mut acc)?;
    } else {
        add_raw(from, to, &mut acc)?;
    }
    Ok(acc)
}

/// An extreme found in a rollup, pinned to its exact sample's time.
fn pin(ctx: &ToolContext, key: i64, (_, start, n): (f64, i64, i64), sql: &str) -> Result<i64, ToolError> {
    if n == 1 {
        return Ok(start);
    }
    let ts: Option<i64> = ctx
        .db
        .prepare_cached(sql)?
        .query_row(params![key, start * 1000, (start + 3600) * 1000], |r| r.get(0))
        .optional()?;
    Ok(ts.unwrap_or(start))
}

/// Fewer readings, or a shorter span, give no trend: a line through them says nothing.
const MIN_TREND_READINGS: i64 = 3;
const MIN_TREND_SECS: i64 = 10;
/// A rate per hour or per day is given only when the readings span this share of it.
const RATE_COVERAGE: f64 = 0.9;

/// The least-squares trend as what it is: a change across the span the readings cover
/// (`slope_per_hour` times the span), with a rate per hour or per day only when the
/// span covers most of one. A slope from 45 s of data is never stretched to a day.
fn trend(n: i64, slope_per_hour: f64, first: i64, last: i64) -> Value {
    let span = last - first;
    if n < MIN_TREND_READINGS || span < MIN_TREND_SECS {
        return json!({
            "readings": n, "span_s": span,
            "note": format!(
                "no trend: {n} readings over {} (at least {MIN_TREND_READINGS} readings over {MIN_TREND_SECS} s are needed)",
                span_text(span)
            ),
        });
    }
    let mut trend = json!({
        "readings": n, "from": Timestamp::from_unix(first), "to": Timestamp::from_unix(last),
        "span_s": span, "span": span_text(span),
        "change": shown(slope_per_hour * span as f64 / 3600.0),
    });
    if span as f64 >= RATE_COVERAGE * 3600.0 {
        trend["per_hour"] = json!(shown(slope_per_hour));
    }
    if span as f64 >= RATE_COVERAGE * 86_400.0 {
        trend["per_day"] = json!(shown(slope_per_hour * 24.0));
    }
    trend
}

/// A span as said in a note: seconds, minutes or hours, to 4 significant figures, so
/// that 23 h 59 min reads "23.98 h", not "23 h" or "a day".
fn span_text(secs: i64) -> String {
    match secs {
        s if s < 120 => format!("{s} s"),
        s if s < 7_200 => format!("{} min", shown(s as f64 / 60.0)),
        s => format!("{} h", shown(s as f64 / 3600.0)),
    }
}

/// Combines summaries (single samples and hourly rollups) into window statistics, a
/// least-squares trend and per-bucket series.
struct Accumulator {
    from: i64,
    span: f64,
    /// Totals, with time sums in hours since `from`.
    total: Summary,
    /// (value, segment start, segment size) of the extremes.
    min: (f64, i64, i64),
    max: (f64, i64, i64),
    buckets: Vec<Summary>,
}

impl Accumulator {
    fn new(from: i64, to: i64, buckets: usize) -> Self {
        let span = (to - from) as f64;
        let width = span / buckets as f64;
        Accumulator {
            from,
            span,
            total: Summary::empty(from),
            min: (f64::INFINITY, 0, 0),
            max: (f64::NEG_INFINITY, 0, 0),
            buckets: (0..buckets).map(|i| Summary::empty(from + (i as f64 * width) as i64)).collect(),
        }
    }

    fn push(&mut self, s: &Summary) {
        // Shift the segment's time sums from its own start to the window's.
        let h = (s.start - self.from) as f64 / 3600.0;
        let t = &mut self.total;
        t.n += s.n;
        t.sum += s.sum;
        t.sum_sq += s.sum_sq;
        t.sum_t += s.n as f64 * h + s.sum_t;
        t.sum_tt += s.n as f64 * h * h + 2.0 * h * s.sum_t + s.sum_tt;
        t.sum_tv += h * s.sum + s.sum_tv;
        for (a, b) in t.beyond.iter_mut().zip(s.beyond) {
            *a += b;
        }
        if s.min < self.min.0 {
            self.min = (s.min, s.start, s.n);
        }
        if s.max > self.max.0 {
            self.max = (s.max, s.start, s.n);
        }
        let last = self.buckets.len() - 1;
        let slot = (((s.start - self.from) as f64 / self.span) * self.buckets.len() as f64) as usize;
        let b = &mut self.buckets[slot.min(last)];
        b.n += s.n;
        b.sum += s.sum;
        b.min = b.min.min(s.min);
        b.max = b.max.max(s.max);
    }

    fn stats(&self, first: (i64, f64), last: (i64, f64), min_at: i64, max_at: i64) -> Value {
        let t = &self.total;
        let n = t.n as f64;
        let mean = t.sum / n;
        let var = (t.sum_sq / n - mean * mean).max(0.0);
        let denom = n * t.sum_tt - t.sum_t * t.sum_t;
        let slope = if denom.abs() > 1e-9 { (n * t.sum_tv - t.sum_t * t.sum) / denom } else { 0.0 };
        json!({
            "min": shown(self.min.0), "min_at": Timestamp::from_unix(min_at),
            "max": shown(self.max.0), "max_at": Timestamp::from_unix(max_at),
            "mean": shown(mean), "std_dev": shown(var.sqrt()),
            "first": shown(first.1), "first_at": Timestamp::from_unix(first.0),
            "last": shown(last.1), "last_at": Timestamp::from_unix(last.0),
            "trend": trend(t.n, slope, first.0, last.0),
        })
    }

    fn series(&self) -> Vec<Value> {
        self.buckets
            .iter()
            .filter(|b| b.n > 0)
            .map(|b| json!([Timestamp::from_unix(b.start), shown(b.sum / b.n as f64), shown(b.min), shown(b.max)]))
            .collect()
    }
}
