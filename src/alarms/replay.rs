//! What-if replay (`twinops alarms replay`): a sensor's stored readings run through one
//! alarm point's state machine twice, with its current settings and with proposed ones
//! (set point, deadband, on-delay, off-delay), so an alarm engineer sees what a change
//! would have done before proposing it: how many activations each would have raised,
//! and how much later (or earlier) the first activation of each episode would have come.
//!
//! The machine is the one the twin runs on telemetry (`limits::evaluate`), in time: it
//! raises once the value has stayed beyond the set point for the on-delay, and clears once
//! it has stayed back past the deadband for the off-delay. An *episode* is a span in which
//! either setting has the alarm active (their active spans merged), so each is compared
//! with itself.

use rusqlite::{Connection, OptionalExtension, params};
use serde::{Deserialize, Serialize};

use super::limits::{Level, back, beyond};
use crate::domain::Timestamp;

/// An alarm point's settings, as replayed.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Settings {
    pub set_point: f64,
    pub deadband: f64,
    pub on_delay_s: i64,
    pub off_delay_s: i64,
}

impl Settings {
    /// Refuses settings no alarm system would take.
    pub fn validate(&self) -> Result<(), String> {
        if !self.set_point.is_finite() || !self.deadband.is_finite() || self.deadband < 0.0 {
            return Err(format!(
                "the set point must be a number and the deadband 0 or more (got {} and {})",
                self.set_point, self.deadband
            ));
        }
        if self.on_delay_s < 0 || self.off_delay_s < 0 || self.on_delay_s > 86_400 || self.off_delay_s > 86_400 {
            return Err("the on- and off-delays are whole seconds from 0 to 86400".into());
        }
        Ok(())
    }
}

/// One point's state over time, in milliseconds.
#[derive(Debug, Clone)]
struct Machine {
    level: Level,
    s: Settings,
    active: bool,
    beyond_since: Option<i64>,
    back_since: Option<i64>,
}

impl Machine {
    fn new(level: Level, s: Settings) -> Machine {
        Machine { level, s, active: false, beyond_since: None, back_since: None }
    }

    /// Feeds one reading: `Some(true)` when the alarm raises, `Some(false)` when it clears.
    fn sample(&mut self, at_ms: i64, value: f64) -> Option<bool> {
        if !self.active {
            self.beyond_since = beyond(self.level, self.s.set_point, value).then(|| self.beyond_since.unwrap_or(at_ms));
            if self.beyond_since.is_some_and(|since| at_ms - since >= self.s.on_delay_s * 1000) {
                (self.active, self.beyond_since) = (true, None);
                return Some(true);
            }
            return None;
        }
        self.back_since =
            back(self.level, self.s.set_point, self.s.deadband, value).then(|| self.back_since.unwrap_or(at_ms));
        if self.back_since.is_some_and(|since| at_ms - since >= self.s.off_delay_s * 1000) {
            (self.active, self.back_since) = (false, None);
            return Some(false);
        }
        None
    }
}

/// What one setting would have done over the readings.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Outcome {
    pub settings: Settings,
    pub activations: usize,
    /// Time in alarm, seconds.
    pub active_s: f64,
    /// Each activation's span, ms: raised, cleared (None: still active at the end).
    #[serde(skip)]
    spans: Vec<(i64, Option<i64>)>,
}

/// The two outcomes side by side, episode by episode.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Comparison {
    pub readings: usize,
    pub from: Option<Timestamp>,
    pub to: Option<Timestamp>,
    pub current: Outcome,
    pub proposed: Outcome,
    pub episodes: usize,
    /// Episodes the proposed settings would not have annunciated at all.
    pub suppressed: usize,
    /// Episodes only the proposed settings would have annunciated.
    pub added: usize,
    /// For episodes both annunciate: how much later the proposed first activation comes
    /// (negative: earlier), seconds: median and largest.
    pub delay_median_s: Option<f64>,
    pub delay_max_s: Option<f64>,
}

/// Replays `readings` (time in ms, value; in time order) with both settings.
pub fn compare(
    level: Level,
    current: Settings,
    proposed: Settings,
    readings: impl Iterator<Item = (i64, f64)>,
) -> Comparison {
    let mut machines = [Machine::new(level, current), Machine::new(level, proposed)];
    let mut spans: [Vec<(i64, Option<i64>)>; 2] = [Vec::new(), Vec::new()];
    let (mut n, mut first, mut last) = (0usize, None, None);
    for (at, value) in readings {
        n += 1;
        first.get_or_insert(at);
        last = Some(at);
        for (m, s) in machines.iter_mut().zip(spans.iter_mut()) {
            match m.sample(at, value) {
                Some(true) => s.push((at, None)),
                Some(false) => {
                    if let Some(open) = s.last_mut() {
                        open.1 = Some(at);
                    }
                }
                None => {}
            }
        }
    }
    let end = last.unwrap_or(0);
    let outcome = |settings, spans: Vec<(i64, Option<i64>)>| Outcome {
        settings,
        activations: spans.len(),
        // A fold from +0: an empty f64 sum is -0, which JSON shows as `-0.0`.
        active_s: spans.iter().map(|(a, b)| (b.unwrap_or(end) - a) as f64 / 1000.0).fold(0.0, |t, s| t + s),
        spans,
    };
    let [c, p] = spans;
    let (current, proposed) = (outcome(current, c), outcome(proposed, p));
    let episodes = episodes(&current.spans, &proposed.spans, end);
    let mut delays: Vec<f64> =
        episodes.iter().filter_map(|e| Some((e.proposed? - e.current?) as f64 / 1000.0)).collect();
    delays.sort_by(f64::total_cmp);
    Comparison {
        readings: n,
        from: first.map(|ms| Timestamp::from_unix(ms.div_euclid(1000))),
        to: last.map(|ms| Timestamp::from_unix(ms.div_euclid(1000))),
        episodes: episodes.len(),
        suppressed: episodes.iter().filter(|e| e.current.is_some() && e.proposed.is_none()).count(),
        added: episodes.iter().filter(|e| e.current.is_none() && e.proposed.is_some()).count(),
        delay_median_s: (!delays.is_empty()).then(|| delays[delays.len() / 2]),
        delay_max_s: delays.iter().copied().max_by(f64::total_cmp),
        current,
        proposed,
    }
}

/// One episode: the first activation in it under each setting, ms.
struct Episode {
    current: Option<i64>,
    proposed: Option<i64>,
}

/// The active spans of both settings merged into episodes, in time order.
fn episodes(current: &[(i64, Option<i64>)], proposed: &[(i64, Option<i64>)], end: i64) -> Vec<Episode> {
    let mut all: Vec<(i64, i64, bool)> = current
        .iter()
        .map(|&(a, b)| (a, b.unwrap_or(end), true))
        .chain(proposed.iter().map(|&(a, b)| (a, b.unwrap_or(end), false)))
        .collect();
    all.sort_by_key(|&(a, ..)| a);
    let mut out: Vec<(i64, Episode)> = Vec::new();
    for (start, stop, is_current) in all {
        match out.last_mut() {
            Some((until, e)) if start <= *until => {
                *until = (*until).max(stop);
                let slot = if is_current { &mut e.current } else { &mut e.proposed };
                slot.get_or_insert(start);
            }
            _ => {
                let e = if is_current {
                    Episode { current: Some(start), proposed: None }
                } else {
                    Episode { current: None, proposed: Some(start) }
                };
                out.push((stop, e));
            }
        }
    }
    out.into_iter().map(|(_, e)| e).collect()
}

/// Replays a sensor's readings from `from` (unix seconds) on, streamed from the store.
pub fn replay_sensor(
    db: &Connection,
    sensor_key: i64,
    from: Timestamp,
    level: Level,
    current: Settings,
    proposed: Settings,
) -> rusqlite::Result<Comparison> {
    let mut stmt =
        db.prepare_cached("SELECT ts, value FROM readings WHERE sensor_key = ?1 AND ts >= ?2 ORDER BY ts")?;
    let mut rows = stmt.query(params![sensor_key, from.unix() * 1000])?;
    let mut failed = None;
    let readings = std::iter::from_fn(|| match rows.next() {
        Ok(Some(r)) => match (r.get::<_, i64>(0), r.get::<_, f64>(1)) {
            (Ok(t), Ok(v)) => Some((t, v)),
            (Err(e), _) | (_, Err(e)) => {
                failed = Some(e);
                None
            }
        },
        Ok(None) => None,
        Err(e) => {
            failed = Some(e);
            None
        }
    });
    let comparison = compare(level, current, proposed, readings);
    match failed {
        Some(e) => Err(e),
        None => Ok(comparison),
    }
}

/// The point a replay is of: a sensor and one of its levels, with the settings in force.
#[derive(Debug, Clone, PartialEq)]
pub struct Target {
    pub sensor_key: i64,
    pub sensor_id: String,
    pub asset_id: String,
    pub level: Level,
    /// The alarm code the point raises (`VIB-HI`).
    pub code: String,
    pub unit: String,
    pub current: Settings,
}

const LEVELS: [(Level, &[&str]); 4] = [
    (Level::LowLow, &["ll", "lolo", "low-low", "lowlow"]),
    (Level::Low, &["l", "lo", "low"]),
    (Level::High, &["h", "hi", "high"]),
    (Level::HighHigh, &["hh", "hihi", "high-high", "highhigh"]),
];

/// Finds `SENSOR:LEVEL` (`PUMP-007.VIB-DE:h`) or `SENSOR:CODE` (`PUMP-007.VIB-DE:VIB-HI`):
/// the sensor's set point at that level, its deadband and on-delay as the twin has them,
/// and the off-delay from the master alarm database (the twin's own machine has none).
pub fn target(db: &Connection, point: &str) -> Result<Target, String> {
    let Some((sensor, which)) = point.rsplit_once(':') else {
        return Err(format!(
            "'{point}' names no level: write SENSOR:LEVEL (PUMP-007.VIB-DE:h; levels ll, l, h, hh) or SENSOR:CODE (PUMP-007.VIB-DE:VIB-HI)"
        ));
    };
    type Row = (i64, String, String, [Option<f64>; 4], f64, i64, Option<String>, String, String);
    let row: Option<Row> = db
        .query_row(
            "SELECT key, id, asset_id, limit_ll, limit_l, limit_h, limit_hh, deadband, on_delay_s, alarm_prefix, kind, unit
             FROM sensors WHERE id = ?1 COLLATE NOCASE AND retired_at IS NULL",
            [sensor],
            |r| {
                Ok((
                    r.get(0)?,
                    r.get(1)?,
                    r.get(2)?,
                    [r.get(3)?, r.get(4)?, r.get(5)?, r.get(6)?],
                    r.get(7)?,
                    r.get(8)?,
                    r.get(9)?,
                    r.get(10)?,
                    r.get(11)?,
                ))
            },
        )
        .optional()
        .map_err(|e| format!("the twin could not be read: {e}"))?;
    let Some((key, id, asset, limits, deadband, on_delay_s, prefix, kind, unit)) = row else {
        return Err(format!(
            "no sensor '{sensor}' in service; `twinops tools call list_assets` shows the plant's sensors"
        ));
    };
    let stem = super::limits::prefix_of(prefix, &kind);
    let w = which.trim().to_lowercase();
    let found = LEVELS.iter().position(|(level, names)| {
        names.contains(&w.as_str()) || super::limits::code(&stem, *level).eq_ignore_ascii_case(which.trim())
    });
    let Some(i) = found else {
        return Err(format!(
            "'{which}' is neither a level (ll, l, h, hh) nor one of {id}'s alarm codes ({})",
            LEVELS.iter().map(|(l, _)| super::limits::code(&stem, *l)).collect::<Vec<_>>().join(", ")
        ));
    };
    let level = LEVELS[i].0;
    let code = super::limits::code(&stem, level);
    let entry =
        super::points::of(db, &asset, Some(&id), &code).map_err(|e| format!("the twin could not be read: {e}"))?;
    let Some(set_point) = limits[i].or(entry.as_ref().and_then(|e| e.set_point)) else {
        return Err(format!(
            "{id} has no {} set point in its tag or the master alarm database, so there is nothing to compare with: replay one of its levels that alarms",
            level.word()
        ));
    };
    let current =
        Settings { set_point, deadband, on_delay_s, off_delay_s: entry.and_then(|e| e.off_delay_s).unwrap_or(0) };
    Ok(Target { sensor_key: key, sensor_id: id, asset_id: asset, level, code, unit, current })
}

impl Comparison {
    /// The comparison as a table an alarm engineer reads.
    pub fn render(&self, t: &Target) -> String {
        let unit = if t.unit.is_empty() { String::new() } else { format!(" {}", t.unit) };
        let span = match (self.from, self.to) {
            (Some(a), Some(b)) => format!("{} readings from {} to {}", self.readings, a.to_rfc3339(), b.to_rfc3339()),
            _ => "no readings in the window (a longer --days, or a sensor with history)".into(),
        };
        let mut out = format!(
            "Replay of {} {} ({} on {}): {span}\n\n{:<10} {:>12} {:>10} {:>9} {:>10} {:>12} {:>14}\n",
            t.sensor_id,
            t.level.word(),
            t.code,
            t.asset_id,
            "",
            "set point",
            "deadband",
            "on-delay",
            "off-delay",
            "activations",
            "time in alarm"
        );
        for (name, o) in [("current", &self.current), ("proposed", &self.proposed)] {
            let s = &o.settings;
            out.push_str(&format!(
                "{name:<10} {:>12} {:>10} {:>9} {:>10} {:>12} {:>14}\n",
                format!("{}{unit}", s.set_point),
                s.deadband,
                format!("{} s", s.on_delay_s),
                format!("{} s", s.off_delay_s),
                o.activations,
                crate::domain::approx_duration(o.active_s.round() as i64)
            ));
        }
        out.push_str(&format!(
            "\n{} episodes (spans in alarm under either setting): {} would not annunciate with the proposed settings, {} only with them.",
            self.episodes, self.suppressed, self.added
        ));
        if let (Some(median), Some(max)) = (self.delay_median_s, self.delay_max_s) {
            out.push_str(&format!(
                "\nFirst activation of an episode both annunciate: median {}, at most {}.",
                later(median),
                later(max)
            ));
        }
        out
    }
}

/// `12 s later`, `3 s earlier`, `at the same time`.
fn later(secs: f64) -> String {
    match secs {
        s if s > 0.0 => format!("{} later", crate::domain::approx_duration(s.round() as i64)),
        s if s < 0.0 => format!("{} earlier", crate::domain::approx_duration(-s.round() as i64)),
        _ => "at the same time".into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(set_point: f64, deadband: f64, on_delay_s: i64, off_delay_s: i64) -> Settings {
        Settings { set_point, deadband, on_delay_s, off_delay_s }
    }

    /// One reading a second.
    fn series(values: &[f64]) -> impl Iterator<Item = (i64, f64)> + '_ {
        values.iter().enumerate().map(|(i, &v)| (i as i64 * 1000, v))
    }

    #[test]
    fn a_deadband_and_delays_turn_chatter_into_one_activation() {
        // Chatter around 4.5: up, down, up, down, then a real excursion.
        let values = [4.0, 4.6, 4.4, 4.6, 4.4, 4.6, 4.4, 4.0, 5.0, 5.1, 5.2, 5.0, 4.0, 4.0];
        let c = compare(Level::High, s(4.5, 0.0, 0, 0), s(4.5, 0.3, 2, 0), series(&values));
        assert_eq!(c.readings, 14);
        assert_eq!(c.current.activations, 4, "each rise past 4.5 raises without a deadband");
        assert_eq!(c.proposed.activations, 1, "only the excursion stays 2 s beyond");
        assert_eq!((c.episodes, c.suppressed, c.added), (4, 3, 0));
        assert_eq!((c.delay_median_s, c.delay_max_s), (Some(2.0), Some(2.0)), "raised at 10 s, not at 8 s");
    }

    #[test]
    fn an_off_delay_holds_the_alarm_and_a_lower_set_point_raises_earlier() {
        let values = [1.0, 2.0, 3.0, 0.0, 3.0, 0.0, 0.0, 0.0];
        let c = compare(Level::High, s(2.5, 0.0, 0, 0), s(2.5, 0.0, 0, 3), series(&values));
        assert_eq!((c.current.activations, c.proposed.activations), (2, 1), "the dip at 3 s is shorter than 3 s");
        assert_eq!(c.proposed.active_s, 5.0, "raised at 2 s, cleared at 7 s");
        let earlier = compare(Level::High, s(2.5, 0.0, 0, 0), s(1.5, 0.0, 0, 0), series(&values[..4]));
        assert_eq!(earlier.delay_median_s, Some(-1.0), "a lower high set point raises a second earlier");
        let low = compare(Level::Low, s(0.5, 0.1, 0, 0), s(0.5, 0.1, 60, 0), series(&values));
        assert_eq!((low.current.activations, low.proposed.activations, low.suppressed), (2, 0, 2));
        assert!(s(1.0, -1.0, 0, 0).validate().is_err() && s(1.0, 0.0, -5, 0).validate().is_err());
    }
}
