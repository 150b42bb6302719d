//! The alarm system's performance, as ANSI/ISA-18.2 (2016, Table 7 and clause 16) and
//! EEMUA 191 measure it, over any window of the journal.
//!
//! What counts is the *annunciated activation*: a new occurrence (`raised`) of a point
//! that was not out of service (suppressed) or shelved at that moment. Acknowledgements,
//! returns to normal, shelving, and repeats while the occurrence is still active
//! (`reraised`) are not activations. An occurrence raised while its point was out of
//! service is counted apart (`suppressed`), even if it still stands when the point
//! returns to service. Rates are over the window's length; peaks and floods over
//! 10-minute periods aligned in UTC (00:00, 00:10, ...); a period that the window only
//! partly covers still counts as a period.
//!
//! One pass over the journal in time order, in memory bounded by the number of alarm
//! points and of occurrences standing at once, not by the number of activations.

use std::collections::HashMap;

use rusqlite::{Connection, params};
use serde::Serialize;
use serde_json::{Value, json};

use crate::domain::{Severity, Timestamp};

const PERIOD_MS: i64 = 600_000;

/// The thresholds in use; every figure is stated with the definition it was computed by.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct KpiSettings {
    /// Chattering: this many activations of one point ...
    pub chatter_activations: usize,
    /// ... within this many seconds (ISA-18.2 TR5 and EEMUA 191: 3 in 60 s).
    pub chatter_window_secs: i64,
    /// Fleeting: returned to normal within this many seconds of its activation.
    pub fleeting_secs: i64,
    /// Stale: active continuously this long at the end of the window.
    pub stale_hours: i64,
    /// A flood starts with a 10-minute period of more than this many activations ...
    pub flood_start: i64,
    /// ... and ends with the first period of fewer than this many.
    pub flood_end: i64,
}

impl Default for KpiSettings {
    fn default() -> Self {
        KpiSettings {
            chatter_activations: super::CHATTER_ACTIVATIONS as usize,
            chatter_window_secs: super::CHATTER_WINDOW_SECS,
            fleeting_secs: 10,
            stale_hours: 24,
            flood_start: super::FLOOD_START,
            flood_end: super::FLOOD_END,
        }
    }
}

impl KpiSettings {
    pub fn validate(&self) -> Result<(), String> {
        if self.chatter_activations < 2 {
            return Err(format!(
                "chatter activations must be at least 2 (ISA-18.2 uses 3), got {}",
                self.chatter_activations
            ));
        }
        if !(1..=3600).contains(&self.chatter_window_secs) {
            return Err(format!(
                "chatter window must be 1 to 3600 s (ISA-18.2 uses 60), got {}",
                self.chatter_window_secs
            ));
        }
        if !(1..=3600).contains(&self.fleeting_secs) || !(1..=8760).contains(&self.stale_hours) {
            return Err("fleeting must be 1 to 3600 s and stale 1 to 8760 h".into());
        }
        if self.flood_end > self.flood_start || self.flood_end < 1 {
            return Err(format!(
                "a flood must end below where it starts: end {} is above start {}",
                self.flood_end, self.flood_start
            ));
        }
        Ok(())
    }
}

/// The longest window the figures are computed over (a year and a month).
pub const MAX_WINDOW_DAYS: i64 = 400;

/// A window from optional bounds (RFC 3339 or a date): `to` defaults to `now`, `from`
/// to 7 days before `to`. The one parser the CLI, the API and the agent's tool share.
pub fn window(from: Option<&str>, to: Option<&str>, now: Timestamp) -> Result<(Timestamp, Timestamp), String> {
    let parse = |name: &str, v: &str| crate::domain::parse_time(v).map_err(|e| format!("{name}: {e}"));
    let to = to.map(|t| parse("to", t)).transpose()?.unwrap_or(now);
    let from = from.map(|f| parse("from", f)).transpose()?.unwrap_or(to.plus_secs(-7 * 86_400));
    if from >= to {
        return Err(format!(
            "from ({}) must be before to ({}); e.g. from=2026-11-23T00:00:00Z&to=2026-11-30T00:00:00Z",
            from.to_rfc3339(),
            to.to_rfc3339()
        ));
    }
    if to.unix() - from.unix() > MAX_WINDOW_DAYS * 86_400 {
        return Err(format!("the window is over {MAX_WINDOW_DAYS} days; ask for a shorter one"));
    }
    Ok((from, to))
}

/// An alarm point: what the operator's list shows as one alarm.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize)]
pub struct Point {
    pub asset_id: String,
    pub sensor_id: Option<String>,
    pub code: String,
}

#[derive(Debug, Default, Clone)]
struct PointStats {
    activations: i64,
    /// The last `chatter_activations - 1` activation times, for the sliding window.
    recent: std::collections::VecDeque<i64>,
    chatter_episodes: i64,
    in_chatter: bool,
    fleeting: i64,
    out_of_service: bool,
    /// Out of service since (ms), and the time out of service within the window.
    oos_since: Option<i64>,
    oos_ms: i64,
    shelved_ms: i64,
    shelved_now: bool,
}

/// One flood episode: from its first period of more than `flood_start` activations to
/// the start of the first period with fewer than `flood_end`.
#[derive(Debug, Clone, Serialize)]
pub struct Flood {
    pub start: Timestamp,
    pub end: Timestamp,
    /// Still in flood at the end of the window.
    pub ongoing: bool,
    pub activations: i64,
    pub peak_10min: i64,
    pub top: Vec<Value>,
}

/// A window's figures. Build with [`compute`]; `to_json` is the contract other tools read.
#[derive(Debug, Clone)]
pub struct Kpis {
    pub from: Timestamp,
    pub to: Timestamp,
    pub settings: KpiSettings,
    pub annunciated: i64,
    pub suppressed: i64,
    pub periods: i64,
    /// Activations per 10-minute period, oldest first (the chart).
    pub per_period: Vec<i64>,
    pub floods: Vec<Flood>,
    pub by_severity: [i64; 4],
    points: Vec<(Point, PointStats)>,
    stale: Vec<Value>,
}

/// Computes the figures for [from, to).
pub fn compute(conn: &Connection, from: Timestamp, to: Timestamp, settings: KpiSettings) -> rusqlite::Result<Kpis> {
    let (from_ms, to_ms) = (from.unix() * 1000, to.unix() * 1000);
    let first_period = from_ms.div_euclid(PERIOD_MS);
    let periods = ((to_ms - 1).div_euclid(PERIOD_MS) - first_period + 1).max(0);
    let mut pass = Pass {
        settings,
        from_ms,
        to_ms,
        first_period,
        per_period: vec![0; periods as usize],
        period_points: HashMap::new(),
        ids: HashMap::new(),
        points: Vec::new(),
        key: String::new(),
        open: HashMap::new(),
        shelved: HashMap::new(),
        by_severity: [0; 4],
        annunciated: 0,
        suppressed: 0,
        floods: Floods::default(),
    };
    pass.state_at_start(conn)?;
    // A return to normal needs only its occurrence (the pass knows its point from the
    // raise): the join, and the point's strings, are for the other kinds.
    let mut stmt = conn.prepare_cached(
        "SELECT e.alarm_id, e.kind, e.at * 1000 + e.millis, a.asset_id, coalesce(a.sensor_id, ''), a.code, a.severity
         FROM alarm_events e LEFT JOIN alarms a ON a.id = e.alarm_id AND e.kind <> 'cleared'
         WHERE e.at >= ?1 AND e.at < ?2
           AND e.kind IN ('raised', 'cleared', 'shelved', 'unshelved', 'out_of_service', 'returned_to_service')
         ORDER BY e.at, e.millis, e.id",
    )?;
    let mut rows = stmt.query(params![from.unix(), to.unix()])?;
    while let Some(r) = rows.next()? {
        let (alarm, at): (i64, i64) = (r.get(0)?, r.get(2)?);
        let kind = r.get_ref(1)?.as_str()?;
        if kind == "cleared" {
            pass.cleared(alarm, at);
            continue;
        }
        let point = pass.point(r.get_ref(3)?.as_str()?, r.get_ref(4)?.as_str()?, r.get_ref(5)?.as_str()?);
        let severity = Severity::parse(r.get_ref(6)?.as_str()?).unwrap_or(Severity::Low);
        pass.event(alarm, kind, at, point, severity);
    }
    pass.finish_periods(periods);
    let stale = stale(conn, to, settings.stale_hours)?;
    Ok(pass.into_kpis(from, to, periods, stale))
}

/// Occurrences active continuously for `hours` or more at `to`, not shelved or out of
/// service, oldest first.
fn stale(conn: &Connection, to: Timestamp, hours: i64) -> rusqlite::Result<Vec<Value>> {
    let mut stmt = conn.prepare_cached(
        "SELECT json_object('alarm_id', id, 'asset_id', asset_id, 'sensor_id', sensor_id, 'code', code,
                'severity', severity, 'active_since', rfc3339(raised_at),
                'active_hours', round((?1 - raised_at) / 3600.0, 1))
         FROM (SELECT * FROM alarms WHERE cleared_at IS NULL AND raised_at <= ?2
               UNION ALL
               SELECT * FROM alarms WHERE cleared_at > ?1 AND raised_at <= ?2)
         WHERE state NOT IN ('shelved', 'out_of_service')
         ORDER BY raised_at, id",
    )?;
    crate::store::json_rows(&mut stmt, params![to.unix(), to.unix() - hours * 3600])
}

/// The running state of the one pass.
struct Pass {
    settings: KpiSettings,
    from_ms: i64,
    to_ms: i64,
    first_period: i64,
    per_period: Vec<i64>,
    /// The current period's activations by point, for the flood contributors.
    period_points: HashMap<usize, i64>,
    ids: HashMap<String, usize>,
    points: Vec<(Point, PointStats)>,
    /// A reusable buffer for the point key, so a known point costs no allocation.
    key: String,
    /// Occurrences raised in the window and not yet cleared: (point, activation ms).
    open: HashMap<i64, (usize, i64)>,
    /// Occurrences shelved: since when (ms).
    shelved: HashMap<i64, (usize, i64)>,
    by_severity: [i64; 4],
    annunciated: i64,
    suppressed: i64,
    floods: Floods,
}

#[derive(Default)]
struct Floods {
    done: Vec<Flood>,
    current: Option<(i64, i64, i64, HashMap<usize, i64>)>,
    last_period: Option<i64>,
}

impl Pass {
    fn point(&mut self, asset: &str, sensor: &str, code: &str) -> usize {
        self.key.clear();
        for part in [asset, "\u{1f}", sensor, "\u{1f}", code] {
            self.key.push_str(part);
        }
        if let Some(&i) = self.ids.get(self.key.as_str()) {
            return i;
        }
        let point = Point {
            asset_id: asset.to_string(),
            sensor_id: (!sensor.is_empty()).then(|| sensor.to_string()),
            code: code.to_string(),
        };
        self.points.push((point, PointStats::default()));
        self.ids.insert(self.key.clone(), self.points.len() - 1);
        self.points.len() - 1
    }

    /// Which points were out of service, and which occurrences shelved, when the window
    /// starts: from the service events before it (a partial index keeps this cheap).
    fn state_at_start(&mut self, conn: &Connection) -> rusqlite::Result<()> {
        let mut stmt = conn.prepare_cached(
            "SELECT e.alarm_id, e.kind, e.at * 1000 + e.millis, a.asset_id, coalesce(a.sensor_id, ''), a.code,
                    a.cleared_at
             FROM alarm_events e INDEXED BY alarm_events_service JOIN alarms a ON a.id = e.alarm_id
             WHERE e.at < ?1 AND e.kind IN ('shelved', 'unshelved', 'out_of_service', 'returned_to_service')
             ORDER BY e.at, e.id",
        )?;
        let mut rows = stmt.query([self.from_ms / 1000])?;
        while let Some(r) = rows.next()? {
            let point = self.point(r.get_ref(3)?.as_str()?, r.get_ref(4)?.as_str()?, r.get_ref(5)?.as_str()?);
            let (alarm, at): (i64, i64) = (r.get(0)?, r.get(2)?);
            let cleared: Option<i64> = r.get(6)?;
            let stats = &mut self.points[point].1;
            match r.get_ref(1)?.as_str()? {
                "out_of_service" => stats.out_of_service = true,
                "returned_to_service" => stats.out_of_service = false,
                // Shelving ends with the occurrence's return to normal.
                "shelved" if cleared.is_none_or(|c| c * 1000 > self.from_ms) => {
                    self.shelved.insert(alarm, (point, at));
                }
                _ => {
                    self.shelved.remove(&alarm);
                }
            }
        }
        for (_, stats) in &mut self.points {
            if stats.out_of_service {
                stats.oos_since = Some(self.from_ms);
            }
        }
        for (_, since) in self.shelved.values_mut() {
            *since = self.from_ms;
        }
        Ok(())
    }

    fn event(&mut self, alarm: i64, kind: &str, at: i64, point: usize, severity: Severity) {
        match kind {
            "raised" => self.raised(alarm, at, point, severity),
            "shelved" => {
                self.shelved.insert(alarm, (point, at));
                self.points[point].1.shelved_now = true;
            }
            "unshelved" => self.unshelve(alarm, at),
            "out_of_service" => {
                let stats = &mut self.points[point].1;
                if !stats.out_of_service {
                    stats.out_of_service = true;
                    stats.oos_since = Some(at);
                }
            }
            "returned_to_service" => {
                let stats = &mut self.points[point].1;
                if let Some(since) = stats.oos_since.take() {
                    stats.oos_ms += at - since;
                }
                stats.out_of_service = false;
            }
            _ => {}
        }
    }

    /// A return to normal: a fleeting activation if within `fleeting_secs`; shelving
    /// ends with it.
    fn cleared(&mut self, alarm: i64, at: i64) {
        if let Some((p, raised)) = self.open.remove(&alarm)
            && at - raised <= self.settings.fleeting_secs * 1000
        {
            self.points[p].1.fleeting += 1;
        }
        self.unshelve(alarm, at);
    }

    fn unshelve(&mut self, alarm: i64, at: i64) {
        if let Some((p, since)) = self.shelved.remove(&alarm) {
            let stats = &mut self.points[p].1;
            stats.shelved_ms += at - since;
            stats.shelved_now = self.shelved.values().any(|(q, _)| *q == p);
        }
    }

    fn raised(&mut self, alarm: i64, at: i64, point: usize, severity: Severity) {
        let shelved = self.shelved.values().any(|(p, _)| *p == point);
        if self.points[point].1.out_of_service || shelved {
            self.suppressed += 1;
            return;
        }
        let period = at.div_euclid(PERIOD_MS) - self.first_period;
        self.close_periods_before(period);
        self.annunciated += 1;
        self.by_severity[Severity::ALL.iter().position(|s| *s == severity).unwrap_or(0)] += 1;
        if let Some(n) = self.per_period.get_mut(period as usize) {
            *n += 1;
        }
        *self.period_points.entry(point).or_default() += 1;
        self.open.insert(alarm, (point, at));
        let (window, needed) = (self.settings.chatter_window_secs * 1000, self.settings.chatter_activations);
        let stats = &mut self.points[point].1;
        stats.activations += 1;
        while stats.recent.front().is_some_and(|&t| at - t >= window) {
            stats.recent.pop_front();
        }
        stats.recent.push_back(at);
        if stats.recent.len() >= needed {
            if !stats.in_chatter {
                stats.chatter_episodes += 1;
            }
            stats.in_chatter = true;
            stats.recent.pop_front();
        } else if stats.recent.len() == 1 {
            stats.in_chatter = false;
        }
    }

    /// Settles the flood state of every period before `period` (the pass is in time
    /// order, so they are complete).
    fn close_periods_before(&mut self, period: i64) {
        let start = self.floods.last_period.map_or(0, |p| p + 1);
        for p in start..period.min(self.per_period.len() as i64) {
            self.close_period(p);
        }
    }

    fn close_period(&mut self, p: i64) {
        let n = self.per_period[p as usize];
        let at = |p: i64| Timestamp::from_unix((self.first_period + p) * PERIOD_MS / 1000);
        let contributors = std::mem::take(&mut self.period_points);
        let f = &mut self.floods;
        f.last_period = Some(p);
        match &mut f.current {
            None if n > self.settings.flood_start => f.current = Some((p, n, n, contributors)),
            None => {}
            Some((_, count, peak, top)) if n >= self.settings.flood_end => {
                *count += n;
                *peak = (*peak).max(n);
                for (k, v) in contributors {
                    *top.entry(k).or_default() += v;
                }
            }
            Some(_) => {
                let (start, count, peak, top) = f.current.take().expect("in a flood");
                let top = top_points(&self.points, top, 3);
                f.done.push(Flood {
                    start: at(start),
                    end: at(p),
                    ongoing: false,
                    activations: count,
                    peak_10min: peak,
                    top,
                });
            }
        }
    }

    fn finish_periods(&mut self, periods: i64) {
        self.close_periods_before(periods);
        if let Some((start, count, peak, top)) = self.floods.current.take() {
            let at = |p: i64| Timestamp::from_unix((self.first_period + p) * PERIOD_MS / 1000);
            let top = top_points(&self.points, top, 3);
            self.floods.done.push(Flood {
                start: at(start),
                end: Timestamp::from_unix(self.to_ms / 1000),
                ongoing: true,
                activations: count,
                peak_10min: peak,
                top,
            });
        }
        for (_, stats) in &mut self.points {
            if let Some(since) = stats.oos_since {
                stats.oos_ms += self.to_ms - since;
            }
        }
        for (p, since) in self.shelved.values() {
            self.points[*p].1.shelved_ms += self.to_ms - since;
            self.points[*p].1.shelved_now = true;
        }
    }

    fn into_kpis(self, from: Timestamp, to: Timestamp, periods: i64, stale: Vec<Value>) -> Kpis {
        Kpis {
            from,
            to,
            settings: self.settings,
            annunciated: self.annunciated,
            suppressed: self.suppressed,
            periods,
            per_period: self.per_period,
            floods: self.floods.done,
            by_severity: self.by_severity,
            points: self.points,
            stale,
        }
    }
}

/// The `n` points with most activations in `counts`, most first, ties by point.
fn top_points(points: &[(Point, PointStats)], counts: HashMap<usize, i64>, n: usize) -> Vec<Value> {
    let mut v: Vec<(usize, i64)> = counts.into_iter().collect();
    v.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| points[a.0].0.code.cmp(&points[b.0].0.code)).then(a.0.cmp(&b.0)));
    v.into_iter().take(n).map(|(p, count)| point_json(&points[p].0, "activations", json!(count))).collect()
}

fn point_json(p: &Point, key: &str, value: Value) -> Value {
    let mut v = json!({"asset_id": p.asset_id, "sensor_id": p.sensor_id, "code": p.code});
    v[key] = value;
    v
}

/// Percent with one decimal.
fn pct(part: i64, whole: i64) -> f64 {
    if whole == 0 { 0.0 } else { (1000.0 * part as f64 / whole as f64).round() / 10.0 }
}

fn round2(v: f64) -> f64 {
    (v * 100.0).round() / 100.0
}

/// ISA-18.2 Table 7's targets, as the figures are judged against them.
pub const TARGETS: &[(&str, &str)] = &[
    ("rate_per_10min", "~1 very likely acceptable, ~2 maximum manageable (per operator position)"),
    ("rate_per_hour", "~6 very likely acceptable, ~12 maximum manageable"),
    ("rate_per_day", "~150 very likely acceptable, ~300 maximum manageable"),
    ("peak_10min", "<= 10"),
    ("pct_periods_over_10", "~<1%"),
    ("pct_time_in_flood", "~<1%"),
    ("top10_share_pct", "~<1% to 5% maximum"),
    ("chattering", "zero"),
    ("fleeting", "zero"),
    ("stale", "fewer than 5 present on any day"),
    ("priority_pct", "~80% low, ~15% medium, ~5% high (critical shown apart)"),
];

impl Kpis {
    pub fn hours(&self) -> f64 {
        (self.to.unix() - self.from.unix()) as f64 / 3600.0
    }

    pub fn rate_per_10min(&self) -> f64 {
        let h = self.hours();
        if h <= 0.0 { 0.0 } else { self.annunciated as f64 / (h * 6.0) }
    }

    /// Where the average rate stands against ISA-18.2's two lines.
    pub fn rate_verdict(&self) -> &'static str {
        match self.rate_per_10min() {
            r if r <= 1.0 => "very likely acceptable",
            r if r <= 2.0 => "manageable",
            _ => "over the maximum manageable",
        }
    }

    pub fn peak(&self) -> (i64, Option<Timestamp>) {
        let Some((i, &n)) = self.per_period.iter().enumerate().max_by_key(|&(i, n)| (*n, std::cmp::Reverse(i))) else {
            return (0, None);
        };
        let start = (self.from.unix() * 1000).div_euclid(PERIOD_MS) + i as i64;
        (n, (n > 0).then(|| Timestamp::from_unix(start * PERIOD_MS / 1000)))
    }

    fn flood_periods(&self) -> i64 {
        self.floods
            .iter()
            .map(|f| {
                let end = if f.ongoing { self.to.unix() * 1000 } else { f.end.unix() * 1000 };
                ((end - f.start.unix() * 1000) + PERIOD_MS - 1) / PERIOD_MS
            })
            .sum()
    }

    /// The points by activations, most first.
    fn ranked(&self) -> Vec<&(Point, PointStats)> {
        let mut v: Vec<&(Point, PointStats)> = self.points.iter().filter(|(_, s)| s.activations > 0).collect();
        v.sort_by(|a, b| b.1.activations.cmp(&a.1.activations).then_with(|| a.0.code.cmp(&b.0.code)));
        v
    }

    /// A point's annunciated activations in the window, its rank among the ten most
    /// frequent (1 to 10) if it is one, and whether it chattered.
    pub fn point(&self, asset_id: &str, sensor_id: Option<&str>, code: &str) -> (i64, Option<usize>, bool) {
        let same = |p: &Point| p.asset_id == asset_id && p.sensor_id.as_deref() == sensor_id && p.code == code;
        let rank = self.ranked().iter().take(10).position(|(p, _)| same(p)).map(|i| i + 1);
        self.points
            .iter()
            .find(|(p, _)| same(p))
            .map_or((0, None, false), |(_, s)| (s.activations, rank, s.chatter_episodes > 0))
    }

    pub fn top10_share_pct(&self) -> f64 {
        pct(self.ranked().iter().take(10).map(|(_, s)| s.activations).sum(), self.annunciated)
    }

    /// The contract: the keys other tools read, every figure beside its definition.
    pub fn to_json(&self) -> Value {
        let (peak, peak_at) = self.peak();
        let over_10 = self.per_period.iter().filter(|&&n| n > 10).count() as i64;
        let bad_actors: Vec<Value> = self
            .ranked()
            .iter()
            .take(10)
            .map(|(p, s)| {
                let mut v = point_json(p, "activations", json!(s.activations));
                v["share_pct"] = json!(pct(s.activations, self.annunciated));
                v
            })
            .collect();
        let chattering: Vec<Value> = self
            .ranked()
            .iter()
            .filter(|(_, s)| s.chatter_episodes > 0)
            .map(|(p, s)| {
                let mut v = point_json(p, "activations", json!(s.activations));
                v["chatter_episodes"] = json!(s.chatter_episodes);
                v
            })
            .collect();
        let fleeting: Vec<Value> = self
            .ranked()
            .iter()
            .filter(|(_, s)| s.fleeting > 0)
            .map(|(p, s)| {
                let mut v = point_json(p, "fleeting", json!(s.fleeting));
                v["activations"] = json!(s.activations);
                v
            })
            .collect();
        // Points shelved or out of service in the window: minutes, and whether still so.
        let held = |minutes_key: &str, at_end_key: &str, of: &dyn Fn(&PointStats) -> (i64, bool)| -> Vec<Value> {
            self.points
                .iter()
                .filter(|(_, s)| of(s).0 > 0 || of(s).1)
                .map(|(p, s)| {
                    let mut v = point_json(p, minutes_key, json!(round2(of(s).0 as f64 / 60_000.0)));
                    v[at_end_key] = json!(of(s).1);
                    v
                })
                .collect()
        };
        let shelved = held("shelved_minutes", "shelved_at_end", &|s| (s.shelved_ms, s.shelved_now));
        let out_of_service = held("out_of_service_minutes", "out_of_service_at_end", &|s| (s.oos_ms, s.out_of_service));
        let fleeting_total: i64 = self.points.iter().map(|(_, s)| s.fleeting).sum();
        let severity = |i: usize| (Severity::ALL[i].as_str(), self.by_severity[i]);
        let priority: serde_json::Map<String, Value> =
            (0..4).map(|i| (severity(i).0.into(), json!(severity(i).1))).collect();
        let priority_pct: serde_json::Map<String, Value> =
            (0..4).map(|i| (severity(i).0.into(), json!(pct(severity(i).1, self.annunciated)))).collect();
        let hours = self.hours();
        json!({
            "window": {"from": self.from, "to": self.to, "hours": round2(hours), "periods_10min": self.periods},
            "annunciated": self.annunciated,
            "suppressed": self.suppressed,
            "rate_per_day": round2(self.annunciated as f64 * 24.0 / hours.max(1e-9)),
            "rate_per_hour": round2(self.annunciated as f64 / hours.max(1e-9)),
            "rate_per_10min": round2(self.rate_per_10min()),
            "rate_verdict": self.rate_verdict(),
            "peak_10min": peak,
            "peak_10min_at": peak_at,
            "pct_periods_over_10": pct(over_10, self.periods),
            "pct_time_in_flood": pct(self.flood_periods(), self.periods),
            "floods": self.floods,
            "top10_share_pct": self.top10_share_pct(),
            "bad_actors": bad_actors,
            "chattering": chattering,
            "fleeting": fleeting,
            "fleeting_activations": fleeting_total,
            "stale": self.stale,
            "priority": priority,
            "priority_pct": priority_pct,
            "priority_target_pct": {"low": 80, "medium": 15, "high": 5},
            "shelved": shelved,
            "out_of_service": out_of_service,
            "per_10min": self.per_period,
            "settings": self.settings,
            "definitions": self.definitions(),
            "targets": TARGETS.iter().map(|(k, v)| (k.to_string(), json!(v))).collect::<serde_json::Map<_, _>>(),
        })
    }

    /// Every definition in force, in words, for wherever the figures are shown.
    pub fn definitions(&self) -> Value {
        let s = &self.settings;
        json!({
            "annunciated": "activations shown to the operator: new occurrences of a point not shelved and not out of service; acknowledgements, returns to normal, shelving and repeats while active are not counted",
            "suppressed": "occurrences raised while their point was out of service or shelved (not annunciated, not in any other figure)",
            "periods": "10-minute periods aligned in UTC (hh:00, hh:10, ...); a period the window covers in part counts whole",
            "rate": "annunciated activations divided by the window's length",
            "flood": format!("starts with a 10-minute period of more than {} activations and ends with the first period of fewer than {}; its periods are time in flood", s.flood_start, s.flood_end),
            "top10_share_pct": "the 10 points with most activations, as a share of all activations",
            "chattering": format!("a point with {} or more activations within {} s", s.chatter_activations, s.chatter_window_secs),
            "fleeting": format!("an activation that returned to normal within {} s", s.fleeting_secs),
            "stale": format!("an occurrence active continuously for {} h or more at the end of the window, not shelved or out of service", s.stale_hours),
            "priority": "share of annunciated activations by priority (severity); the target is ISA-18.2's 80/15/5 for low/medium/high, critical shown apart",
        })
    }
}
