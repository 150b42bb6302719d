//! `get_sensor_history`: what a sensor did over a window, as statistics and a short
//! downsampled series. Never thousands of raw points.

use rusqlite::{OptionalExtension, params};
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::{Value, json};

use super::hints::existing_sensor;
use super::{ToolContext, ToolDef, ToolError, check_range, define, parse_args};
use crate::domain::{Access, Timestamp, parse_time};

const NAME: &str = "get_sensor_history";
const DESCRIPTION: &str = "History of one sensor over a window ending now (or at `until`): sample count, min and max \
(with their times), mean, standard deviation, first and last value, the least-squares trend per hour and per day, \
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

/// A sample stands for at most this long when summing time beyond a limit, so a gap in
/// the data is not counted as time in alarm.
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
    let (unit, kind, limits): (String, String, [Option<f64>; 4]) = ctx.db.prepare_cached(
        "SELECT unit, kind, limit_ll, limit_l, limit_h, limit_hh FROM sensors WHERE key = ?1",
    )?
    .query_row([key], |r| Ok((r.get(0)?, r.get(1)?, [r.get(2)?, r.get(3)?, r.get(4)?, r.get(5)?])))?;

    let mut stmt = ctx.db.prepare_cached(
        "SELECT ts, value FROM readings WHERE sensor_key = ?1 AND ts > ?2 AND ts <= ?3 ORDER BY ts",
    )?;
    let mut rows = stmt.query(params![key, from.unix(), to.unix()])?;
    let buckets = args.points as usize;
    let span = (to.unix() - from.unix()) as f64;
    let mut acc = Accumulator::new(buckets);
    while let Some(row) = rows.next()? {
        let ts: i64 = row.get(0)?;
        let v: f64 = row.get(1)?;
        let b = (((ts - from.unix()) as f64 / span) * buckets as f64) as usize;
        acc.push(ts, v, b.min(buckets - 1), limits);
    }

    let sensor = json!({"id": sensor_id, "kind": kind, "unit": unit,
        "limits": {"ll": limits[0], "l": limits[1], "h": limits[2], "hh": limits[3]}});
    let window = json!({"from": from, "to": to, "hours": args.hours});
    if acc.n == 0 {
        let last: Option<i64> = ctx.db.prepare_cached("SELECT max(ts) FROM readings WHERE sensor_key = ?1")?
            .query_row([key], |r| r.get(0)).optional()?.flatten();
        let hint = match last {
            Some(ts) => format!("No readings in this window; the latest reading is at {}. Move the window with until, or widen hours.", Timestamp::from_unix(ts).to_rfc3339()),
            None => "This sensor has no readings at all: the transmitter may not be connected to the historian.".to_string(),
        };
        return Ok(json!({"sensor": sensor, "window": window, "samples": 0, "hint": hint}));
    }
    Ok(json!({
        "sensor": sensor,
        "window": window,
        "samples": acc.n,
        "stats": acc.stats(),
        "minutes_beyond_limits": {
            "ll": acc.beyond[0] / 60, "l": acc.beyond[1] / 60, "h": acc.beyond[2] / 60, "hh": acc.beyond[3] / 60,
        },
        "series": {
            "columns": ["start", "mean", "min", "max"],
            "rows": acc.series(from, span),
        },
    }))
}

/// One pass over the window: running sums for the statistics and the regression,
/// per-bucket min/mean/max, and time beyond each limit.
struct Accumulator {
    n: u64,
    sum: f64,
    sum_sq: f64,
    // Regression of value on hours since the first sample.
    t0: Option<i64>,
    sum_t: f64,
    sum_tt: f64,
    sum_tv: f64,
    min: (f64, i64),
    max: (f64, i64),
    first: f64,
    last: (f64, i64),
    beyond: [i64; 4],
    buckets: Vec<(u32, f64, f64, f64)>,
}

impl Accumulator {
    fn new(buckets: usize) -> Self {
        Accumulator {
            n: 0, sum: 0.0, sum_sq: 0.0, t0: None, sum_t: 0.0, sum_tt: 0.0, sum_tv: 0.0,
            min: (f64::INFINITY, 0), max: (f64::NEG_INFINITY, 0), first: 0.0, last: (0.0, 0),
            beyond: [0; 4], buckets: vec![(0, 0.0, f64::INFINITY, f64::NEG_INFINITY); buckets],
        }
    }

    fn push(&mut self, ts: i64, v: f64, bucket: usize, [ll, l, h, hh]: [Option<f64>; 4]) {
        if self.n > 0 {
            // The previous sample held until this one, up to the cap.
            let held = (ts - self.last.1).min(MAX_SAMPLE_SECS);
            let prev = self.last.0;
            for (i, (limit, high)) in [(ll, false), (l, false), (h, true), (hh, true)].into_iter().enumerate() {
                if limit.is_some_and(|x| if high { prev > x } else { prev < x }) {
                    self.beyond[i] += held;
                }
            }
        } else {
            self.first = v;
        }
        let t0 = *self.t0.get_or_insert(ts);
        let t = (ts - t0) as f64 / 3600.0;
        self.n += 1;
        self.sum += v;
        self.sum_sq += v * v;
        self.sum_t += t;
        self.sum_tt += t * t;
        self.sum_tv += t * v;
        if v < self.min.0 {
            self.min = (v, ts);
        }
        if v > self.max.0 {
            self.max = (v, ts);
        }
        self.last = (v, ts);
        let b = &mut self.buckets[bucket];
        b.0 += 1;
        b.1 += v;
        b.2 = b.2.min(v);
        b.3 = b.3.max(v);
    }

    fn stats(&self) -> Value {
        let n = self.n as f64;
        let mean = self.sum / n;
        let var = (self.sum_sq / n - mean * mean).max(0.0);
        let denom = n * self.sum_tt - self.sum_t * self.sum_t;
        let slope = if denom.abs() > f64::EPSILON { (n * self.sum_tv - self.sum_t * self.sum) / denom } else { 0.0 };
        json!({
            "min": r(self.min.0), "min_at": Timestamp::from_unix(self.min.1),
            "max": r(self.max.0), "max_at": Timestamp::from_unix(self.max.1),
            "mean": r(mean), "std_dev": r(var.sqrt()),
            "first": r(self.first), "last": r(self.last.0), "last_at": Timestamp::from_unix(self.last.1),
            "trend_per_hour": r(slope), "trend_per_day": r(slope * 24.0),
        })
    }

    fn series(&self, from: Timestamp, span: f64) -> Vec<Value> {
        let width = span / self.buckets.len() as f64;
        self.buckets
            .iter()
            .enumerate()
            .filter(|(_, b)| b.0 > 0)
            .map(|(i, b)| {
                let start = from.plus_secs((i as f64 * width) as i64);
                json!([start, r(b.1 / b.0 as f64), r(b.2), r(b.3)])
            })
            .collect()
    }
}

/// Rounds to 4 significant decimals: enough for any transmitter, fewer tokens.
fn r(v: f64) -> f64 {
    (v * 10_000.0).round() / 10_000.0
}
