//! Limit alarming as a SCADA system does it: a reading beyond a set point for an
//! on-delay raises; coming back past the deadband clears. One state machine for the
//! demo's history (`seed`), the simulator (`sim`) and alarms from telemetry (ingest,
//! sensors with `alarm_source = 'limits'`), where the on-delay is in seconds.

use rusqlite::{Connection, OptionalExtension, params};

use crate::domain::{AlarmEvent, Transition as Edge};
use crate::domain::{AssetId, Criticality, SensorId, Severity, Timestamp};

/// Set points in the order ll, l, h, hh.
pub type Limits = [Option<f64>; 4];

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Level {
    LowLow,
    Low,
    High,
    HighHigh,
}

impl Level {
    /// The suffix of the alarm code: `VIB` + `-HI`.
    pub fn suffix(self) -> &'static str {
        match self {
            Level::LowLow => "LOLO",
            Level::Low => "LO",
            Level::High => "HI",
            Level::HighHigh => "HIHI",
        }
    }

    pub fn is_high(self) -> bool {
        matches!(self, Level::High | Level::HighHigh)
    }

    /// The second-level limits (LL, HH) are the urgent ones.
    pub fn is_outer(self) -> bool {
        matches!(self, Level::LowLow | Level::HighHigh)
    }

    /// Its column and key in the twin: `ll`, `l`, `h`, `hh`.
    pub fn key(self) -> &'static str {
        LEVEL_NAMES[self.index()]
    }

    /// Its place in a sensor's [`Limits`] (ll, l, h, hh).
    pub fn index(self) -> usize {
        match self {
            Level::LowLow => 0,
            Level::Low => 1,
            Level::High => 2,
            Level::HighHigh => 3,
        }
    }

    pub fn word(self) -> &'static str {
        match self {
            Level::LowLow => "low-low",
            Level::Low => "low",
            Level::High => "high",
            Level::HighHigh => "high-high",
        }
    }
}

/// The set points a sensor has, each with its level.
pub fn set_points(limits: &Limits) -> Vec<(Level, f64)> {
    [Level::LowLow, Level::Low, Level::High, Level::HighHigh]
        .into_iter()
        .zip(*limits)
        .filter_map(|(level, sp)| sp.map(|sp| (level, sp)))
        .collect()
}

/// One change of an alarm point: raised or returned to normal at sample `index`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Transition {
    pub level: Level,
    pub set_point: f64,
    pub raised: bool,
    pub index: usize,
    pub value: f64,
}

/// One alarm point of a sensor as samples arrive: raises after `on_delay` samples
/// beyond the set point, clears when the value comes back past the deadband.
#[derive(Debug, Clone, Copy)]
pub struct Point {
    pub level: Level,
    pub set_point: f64,
    deadband: f64,
    on_delay: usize,
    active: bool,
    beyond_for: usize,
}

impl Point {
    pub fn new(level: Level, set_point: f64, deadband: f64, on_delay: usize) -> Point {
        Point { level, set_point, deadband, on_delay: on_delay.max(1), active: false, beyond_for: 0 }
    }

    pub fn active(&self) -> bool {
        self.active
    }

    /// The same point, raising only after `samples` consecutive samples beyond it.
    pub fn with_on_delay(self, samples: usize) -> Point {
        Point { on_delay: samples.max(1), ..self }
    }

    /// Feeds one sample: `Some(true)` when the alarm raises, `Some(false)` when it clears.
    pub fn sample(&mut self, value: f64) -> Option<bool> {
        if !self.active {
            self.beyond_for = if beyond(self.level, self.set_point, value) { self.beyond_for + 1 } else { 0 };
            self.active = self.beyond_for >= self.on_delay;
            return self.active.then_some(true);
        }
        let back = back(self.level, self.set_point, self.deadband, value);
        if back {
            self.active = false;
            self.beyond_for = 0;
        }
        back.then_some(false)
    }
}

/// Whether a value is past a set point, on the side the level alarms.
pub fn beyond(level: Level, set_point: f64, value: f64) -> bool {
    if level.is_high() { value > set_point } else { value < set_point }
}

/// Whether a value is back past the deadband, so an active alarm clears.
pub fn back(level: Level, set_point: f64, deadband: f64, value: f64) -> bool {
    if level.is_high() { value < set_point - deadband } else { value > set_point + deadband }
}

/// Scans a series for alarm transitions of one set point.
pub fn scan(values: &[f64], level: Level, set_point: f64, deadband: f64, on_delay: usize) -> Vec<Transition> {
    let mut point = Point::new(level, set_point, deadband, on_delay);
    values
        .iter()
        .enumerate()
        .filter_map(|(index, &value)| {
            point.sample(value).map(|raised| Transition { level, set_point, raised, index, value })
        })
        .collect()
}

/// A sensor whose alarms come from its readings (`alarm_source = 'limits'`), as the
/// twin has it.
#[derive(Debug, Clone)]
pub struct LimitSensor {
    pub key: i64,
    pub id: SensorId,
    pub asset: AssetId,
    pub limits: Limits,
    pub deadband: f64,
    pub on_delay_s: i64,
    /// The alarm code's stem: the sensor's alarm prefix, else its kind (`CHLORINE-RESIDUAL`).
    pub prefix: String,
    pub priorities: [Option<Severity>; 4],
    pub criticality: Criticality,
    pub unit: String,
    pub description: String,
}

const LEVEL_NAMES: [&str; 4] = ["ll", "l", "h", "hh"];

/// The alarm code stem for a sensor without an alarm prefix: its kind in capitals,
/// words joined by dashes, as alarm codes are written.
pub fn prefix_of(alarm_prefix: Option<String>, kind: &str) -> String {
    alarm_prefix.unwrap_or_else(|| {
        let words: Vec<String> =
            kind.split(|c: char| !c.is_ascii_alphanumeric()).filter(|w| !w.is_empty()).map(str::to_uppercase).collect();
        let stem = words.join("-");
        if stem.is_empty() {
            "LIMIT".into()
        } else {
            stem.chars().take(26).collect::<String>().trim_end_matches('-').to_string()
        }
    })
}

/// Evaluates one new reading of `s` against its set points, in the caller's
/// transaction, and returns the alarm events it raises or clears. A reading older than
/// the last one evaluated changes nothing (a late or historical value never raises a
/// live alarm); event ids are made of point, level and time, so the same reading
/// evaluated again could not raise twice.
pub fn evaluate(
    conn: &Connection,
    s: &LimitSensor,
    (time, millis): (Timestamp, u16),
    value: f64,
) -> rusqlite::Result<Vec<AlarmEvent>> {
    let mut events = Vec::new();
    for (i, sp) in s.limits.iter().enumerate() {
        let Some(set_point) = *sp else { continue };
        let level = [Level::LowLow, Level::Low, Level::High, Level::HighHigh][i];
        let state: Option<(Option<i64>, bool, i64)> = conn
            .prepare_cached(
                "SELECT beyond_since, active, last_ts FROM limit_points WHERE sensor_key = ?1 AND level = ?2",
            )?
            .query_row(params![s.key, LEVEL_NAMES[i]], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))
            .optional()?;
        let (mut since, mut active, last) = state.unwrap_or((None, false, i64::MIN));
        let t = time.unix();
        if t < last {
            continue;
        }
        let mut transition = None;
        if !active {
            since = beyond(level, set_point, value).then(|| since.unwrap_or(t));
            if since.is_some_and(|since| t - since >= s.on_delay_s) {
                (active, since, transition) = (true, None, Some(Edge::Raised));
            }
        } else if back(level, set_point, s.deadband, value) {
            (active, transition) = (false, Some(Edge::Cleared));
        }
        conn.prepare_cached(
            "INSERT INTO limit_points (sensor_key, level, beyond_since, active, last_ts) VALUES (?1, ?2, ?3, ?4, ?5)
             ON CONFLICT (sensor_key, level) DO UPDATE SET beyond_since = excluded.beyond_since,
                 active = excluded.active, last_ts = excluded.last_ts",
        )?
        .execute(params![s.key, LEVEL_NAMES[i], since, active, t])?;
        if let Some(transition) = transition {
            events.push(event(s, (level, i, set_point), transition, (time, millis), value));
        }
    }
    Ok(events)
}

fn event(
    s: &LimitSensor,
    (level, i, set_point): (Level, usize, f64),
    transition: Edge,
    (time, millis): (Timestamp, u16),
    value: f64,
) -> AlarmEvent {
    let raised = transition == Edge::Raised;
    let unit = if s.unit.is_empty() { String::new() } else { format!(" {}", s.unit) };
    let what = if s.description.is_empty() { s.id.to_string() } else { s.description.clone() };
    let message = if raised {
        format!(
            "{what} {value}{unit}, past the {} limit {set_point}{unit} (raised by twinops from the readings)",
            level.word()
        )
    } else {
        format!("{what} {value}{unit}, back within the {} limit {set_point}{unit}", level.word())
    };
    AlarmEvent {
        event_id: format!(
            "limits:{}:{}:{}:{}",
            s.id,
            LEVEL_NAMES[i],
            if raised { "raised" } else { "cleared" },
            time.unix() * 1000 + i64::from(millis)
        ),
        asset_id: s.asset.clone(),
        sensor_id: Some(s.id.clone()),
        code: code(&s.prefix, level),
        severity: s.priorities[i].unwrap_or_else(|| severity(level, s.criticality)),
        transition,
        value: Some(value),
        threshold: Some(set_point),
        time,
        millis,
        message,
    }
}

/// The alarm code of a point: `VIB` + high -> `VIB-HI`.
pub fn code(prefix: &str, level: Level) -> String {
    format!("{prefix}-{}", level.suffix())
}

/// Outer limits (LL, HH) are high priority, critical on criticality-A equipment; inner
/// limits are medium.
pub fn severity(level: Level, criticality: Criticality) -> Severity {
    match (level.is_outer(), criticality) {
        (true, Criticality::A) => Severity::Critical,
        (true, _) => Severity::High,
        (false, _) => Severity::Medium,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn raises_after_the_on_delay_and_clears_past_the_deadband() {
        let values = [4.0, 4.6, 4.4, 4.6, 4.7, 4.4, 4.3, 4.1];
        let t = scan(&values, Level::High, 4.5, 0.3, 2);
        assert_eq!(t.len(), 2, "{t:?}");
        assert!(t[0].raised && t[0].index == 4, "one sample beyond the set point is not enough");
        assert!(!t[1].raised && t[1].index == 7, "4.4 and 4.3 are inside the deadband");
    }

    #[test]
    fn low_limits_mirror_high_ones() {
        let t = scan(&[1.0, 0.4, 0.4, 0.52, 0.6], Level::Low, 0.5, 0.05, 2);
        assert_eq!(t.iter().map(|t| (t.raised, t.index)).collect::<Vec<_>>(), [(true, 2), (false, 4)]);
    }
}
