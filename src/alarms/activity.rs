//! Annunciated activity over a span of the journal: the one pass that decides, event by
//! event, which occurrences were activations, which began a chattering episode and
//! which were fleeting (definitions in [`super::kpi`]). The figures sum spans of it;
//! [`super::kpi_cache`] keeps it per closed hour.
//!
//! A span's result depends on nothing outside it but what the pass reads on purpose:
//! the points out of service and the occurrences shelved at its start (from the service
//! events before it), the activations of the two chatter windows before it (whether one
//! in the span begins an episode depends on them), and the returns to normal up to the
//! fleeting limit after it (whether one in the span was fleeting). So adjacent spans sum
//! to the span that covers both, which is what lets hours be cached.

use std::collections::{HashMap, VecDeque};

use rusqlite::{Connection, OptionalExtension, params};

use super::definitions::{KpiSettings, Point};
use crate::domain::Severity;

pub const PERIOD_MS: i64 = 600_000;
pub const HOUR_MS: i64 = 3_600_000;

/// A point's figures in a span (or an hour of it).
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Counts {
    pub activations: i64,
    pub fleeting: i64,
    /// Chattering episodes that began in the span.
    pub chatter_episodes: i64,
}

impl Counts {
    pub fn add(&mut self, other: Counts) {
        self.activations += other.activations;
        self.fleeting += other.fleeting;
        self.chatter_episodes += other.chatter_episodes;
    }
}

/// Per 10-minute period: activations by severity (in [`Severity::ALL`] order), then the
/// occurrences suppressed (raised while their point was out of service or shelved).
pub type PeriodCounts = [i64; 5];
pub const SUPPRESSED: usize = 4;

/// What a span of the journal holds.
#[derive(Debug, Default)]
pub struct Activity {
    /// Periods by number (Unix ms / 600,000), those with anything in them.
    pub periods: HashMap<i64, PeriodCounts>,
    /// The points seen, by index.
    pub points: Vec<Point>,
    /// Counts by (hour number, point index); the hour is 0 unless asked for by hour.
    pub counts: HashMap<(i64, usize), Counts>,
}

impl Activity {
    /// The span's counts per point, whatever hours they fell in.
    pub fn per_point(&self) -> Vec<Counts> {
        let mut sums = vec![Counts::default(); self.points.len()];
        for (&(_, p), c) in &self.counts {
            sums[p].add(*c);
        }
        sums
    }
}

/// A point in a window's sums: by its id in the cache's dictionary of points
/// (`alarm_kpi_points`), or by name when the cache does not know it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum PointKey {
    Cached(i64),
    Named(usize),
}

/// A point among the first of a window, named.
#[derive(Debug)]
pub struct Ranked {
    pub key: PointKey,
    pub point: Point,
    pub counts: Counts,
}

/// Counts per point over a window. The cache's rows give points as dictionary ids, named
/// only when they are listed: a week of a large utility has some 17,000 points with an
/// activation, of which a page lists a few dozen.
#[derive(Debug, Default)]
pub struct PointSums {
    /// By dictionary id (ids are dense from 1).
    cached: Vec<Counts>,
    /// Points from passes over the journal that the cache does not know.
    named: PointIndex,
    named_counts: Vec<Counts>,
}

impl PointSums {
    pub fn add_cached(&mut self, id: i64, c: Counts) {
        let i = usize::try_from(id).unwrap_or(0);
        if i >= self.cached.len() {
            self.cached.resize(i + 1, Counts::default());
        }
        self.cached[i].add(c);
    }

    pub fn add_named(&mut self, p: &Point, c: Counts) {
        let i = self.named.index(&p.asset_id, p.sensor_id.as_deref().unwrap_or(""), &p.code);
        if i == self.named_counts.len() {
            self.named_counts.push(Counts::default());
        }
        self.named_counts[i].add(c);
    }

    /// Every point with anything counted.
    pub fn iter(&self) -> impl Iterator<Item = (PointKey, Counts)> + '_ {
        let cached = self.cached.iter().enumerate().map(|(i, c)| (PointKey::Cached(i as i64), *c));
        let named = self.named_counts.iter().enumerate().map(|(i, c)| (PointKey::Named(i), *c));
        cached.chain(named).filter(|(_, c)| *c != Counts::default())
    }

    pub fn get(&self, key: PointKey) -> Counts {
        let slot = match key {
            PointKey::Cached(id) => usize::try_from(id).ok().and_then(|i| self.cached.get(i)),
            PointKey::Named(i) => self.named_counts.get(i),
        };
        slot.copied().unwrap_or_default()
    }

    /// Point `p`'s key: by name if a pass met it, else its dictionary id if the cache
    /// knows it (its counts may then be none in this window).
    pub fn key_of(&self, conn: &Connection, p: &Point) -> rusqlite::Result<Option<PointKey>> {
        if let Some(i) = self.named.get(&p.asset_id, p.sensor_id.as_deref().unwrap_or(""), &p.code) {
            return Ok(Some(PointKey::Named(i)));
        }
        Ok(dictionary_id(conn, p)?.map(PointKey::Cached))
    }

    pub fn name(&self, conn: &Connection, key: PointKey) -> rusqlite::Result<Point> {
        match key {
            PointKey::Named(i) => Ok(self.named.points[i].clone()),
            PointKey::Cached(id) => conn
                .prepare_cached("SELECT asset_id, sensor_id, code FROM alarm_kpi_points WHERE id = ?1")?
                .query_row([id], |r| {
                    let sensor: String = r.get(1)?;
                    Ok(Point {
                        asset_id: r.get(0)?,
                        sensor_id: (!sensor.is_empty()).then_some(sensor),
                        code: r.get(2)?,
                    })
                }),
        }
    }

    /// The first `n` of the points `keep` selects, most activations first, ties by
    /// point, named; and how many it selects in all. Only those with as many activations
    /// as the `n`th are named.
    pub fn first(
        &self,
        conn: &Connection,
        n: usize,
        keep: impl Fn(&Counts) -> bool,
    ) -> rusqlite::Result<(Vec<Ranked>, usize)> {
        let mut kept: Vec<(PointKey, Counts)> = self.iter().filter(|(_, c)| keep(c)).collect();
        let total = kept.len();
        if n == 0 {
            return Ok((Vec::new(), total));
        }
        if kept.len() > n {
            let least =
                kept.select_nth_unstable_by(n - 1, |a, b| b.1.activations.cmp(&a.1.activations)).1.1.activations;
            kept.retain(|(_, c)| c.activations >= least);
        }
        let mut first = Vec::with_capacity(kept.len());
        for (key, counts) in kept {
            first.push(Ranked { key, point: self.name(conn, key)?, counts });
        }
        first.sort_unstable_by(|a, b| {
            b.counts.activations.cmp(&a.counts.activations).then_with(|| a.point.order(&b.point))
        });
        first.truncate(n);
        Ok((first, total))
    }
}

/// Point `p`'s id in the cache's dictionary, if the cache ever counted it.
pub fn dictionary_id(conn: &Connection, p: &Point) -> rusqlite::Result<Option<i64>> {
    conn.prepare_cached("SELECT id FROM alarm_kpi_points WHERE asset_id = ?1 AND sensor_id = ?2 AND code = ?3")?
        .query_row(params![p.asset_id, p.sensor_id.as_deref().unwrap_or(""), p.code], |r| r.get(0))
        .optional()
}

/// Points by their three ids, each given an index the first time it is seen; a known
/// point costs no allocation.
#[derive(Debug, Default)]
pub struct PointIndex {
    pub points: Vec<Point>,
    ids: HashMap<String, usize>,
    key: String,
}

impl PointIndex {
    pub fn index(&mut self, asset: &str, sensor: &str, code: &str) -> usize {
        let mut key = std::mem::take(&mut self.key);
        Self::key_into(&mut key, asset, sensor, code);
        let i = match self.ids.get(key.as_str()) {
            Some(&i) => i,
            None => {
                self.points.push(Point {
                    asset_id: asset.to_string(),
                    sensor_id: (!sensor.is_empty()).then(|| sensor.to_string()),
                    code: code.to_string(),
                });
                self.ids.insert(key.clone(), self.points.len() - 1);
                self.points.len() - 1
            }
        };
        self.key = key;
        i
    }

    /// The point's index, if it has one.
    pub fn get(&self, asset: &str, sensor: &str, code: &str) -> Option<usize> {
        let mut key = String::new();
        Self::key_into(&mut key, asset, sensor, code);
        self.ids.get(key.as_str()).copied()
    }

    fn key_into(key: &mut String, asset: &str, sensor: &str, code: &str) {
        key.clear();
        for part in [asset, "\u{1f}", sensor, "\u{1f}", code] {
            key.push_str(part);
        }
    }
}

/// Runs the pass over [start_ms, end_ms). With `by_hour`, counts are kept per hour of
/// the activation (what the cache stores); without, per point only (memory bounded by
/// the points, not the activations).
pub fn span(
    conn: &Connection,
    start_ms: i64,
    end_ms: i64,
    settings: &KpiSettings,
    by_hour: bool,
) -> rusqlite::Result<Activity> {
    let window_ms = settings.chatter_window_secs * 1000;
    let fleeting_ms = settings.fleeting_secs * 1000;
    // Seconds, as the journal's index holds them; milliseconds are sorted out below.
    let seed_secs = (start_ms - 2 * window_ms).div_euclid(1000);
    let mut pass = Pass {
        settings,
        by_hour,
        activity: Activity::default(),
        state: Vec::new(),
        index: PointIndex::default(),
        open: HashMap::new(),
        shelved: HashMap::new(),
    };
    pass.state_at(conn, seed_secs)?;
    // A return to normal needs only its occurrence (the pass knows its point from the
    // raise): the join, and the point's strings, are for the other kinds.
    let mut stmt = conn.prepare_cached(
        "SELECT e.alarm_id, e.kind, e.at * 1000 + e.millis, a.asset_id, coalesce(a.sensor_id, ''), a.code, a.severity,
                a.suppressed_by IS NOT NULL
         FROM alarm_events e LEFT JOIN alarms a ON a.id = e.alarm_id AND e.kind <> 'cleared'
         WHERE e.at >= ?1 AND e.at < ?2
           AND e.kind IN ('raised', 'cleared', 'shelved', 'unshelved', 'out_of_service', 'returned_to_service',
                          'unsuppressed')
         ORDER BY e.at, e.millis, e.id",
    )?;
    let last_secs = (end_ms + fleeting_ms).div_euclid(1000) + 1;
    let mut rows = stmt.query(params![seed_secs, last_secs])?;
    while let Some(r) = rows.next()? {
        let (alarm, at): (i64, i64) = (r.get(0)?, r.get(2)?);
        let kind = r.get_ref(1)?.as_str()?;
        if kind == "cleared" {
            pass.cleared(alarm, at, fleeting_ms);
            continue;
        }
        if at >= end_ms {
            continue;
        }
        let point = pass.point(r.get_ref(3)?.as_str()?, r.get_ref(4)?.as_str()?, r.get_ref(5)?.as_str()?);
        match kind {
            // Raised suppressed by design, an occurrence is annunciated (and counted) when
            // it is released, if it is still active then.
            "raised" | "unsuppressed" => {
                let severity = Severity::parse(r.get_ref(6)?.as_str()?).unwrap_or(Severity::Low);
                let suppressed = kind == "raised" && r.get::<_, bool>(7)?;
                pass.raised(alarm, at, point, severity, at >= start_ms, suppressed);
            }
            "shelved" => pass.shelve(alarm, point),
            "unshelved" => pass.unshelve(alarm),
            "out_of_service" => pass.state[point].out_of_service = true,
            "returned_to_service" => pass.state[point].out_of_service = false,
            _ => {}
        }
    }
    pass.activity.points = pass.index.points;
    Ok(pass.activity)
}

/// A point's running state in the pass.
#[derive(Debug, Default)]
struct PointState {
    /// The last `chatter_activations - 1` activation times (ms).
    recent: VecDeque<i64>,
    /// Whether its last activation was a chattering one.
    chattering: bool,
    out_of_service: bool,
    /// Its occurrences shelved now.
    shelved: u32,
}

struct Pass<'a> {
    settings: &'a KpiSettings,
    by_hour: bool,
    activity: Activity,
    state: Vec<PointState>,
    index: PointIndex,
    /// Activations in the span not yet returned to normal: (point, activation ms).
    open: HashMap<i64, (usize, i64)>,
    /// Occurrences shelved now, and their point.
    shelved: HashMap<i64, usize>,
}

impl Pass<'_> {
    fn point(&mut self, asset: &str, sensor: &str, code: &str) -> usize {
        let i = self.index.index(asset, sensor, code);
        if i == self.state.len() {
            self.state.push(PointState::default());
        }
        i
    }

    /// Which points were out of service, and which occurrences shelved, at `secs`: from
    /// the service events before it (a partial index keeps this cheap).
    fn state_at(&mut self, conn: &Connection, secs: i64) -> rusqlite::Result<()> {
        let mut stmt = conn.prepare_cached(
            "SELECT e.alarm_id, e.kind, a.asset_id, coalesce(a.sensor_id, ''), a.code, a.cleared_at
             FROM alarm_events e INDEXED BY alarm_events_service JOIN alarms a ON a.id = e.alarm_id
             WHERE e.at < ?1 AND e.kind IN ('shelved', 'unshelved', 'out_of_service', 'returned_to_service')
             ORDER BY e.at, e.id",
        )?;
        let mut rows = stmt.query([secs])?;
        while let Some(r) = rows.next()? {
            let point = self.point(r.get_ref(2)?.as_str()?, r.get_ref(3)?.as_str()?, r.get_ref(4)?.as_str()?);
            let alarm: i64 = r.get(0)?;
            let cleared: Option<i64> = r.get(5)?;
            match r.get_ref(1)?.as_str()? {
                "out_of_service" => self.state[point].out_of_service = true,
                "returned_to_service" => self.state[point].out_of_service = false,
                // Shelving ends with the occurrence's return to normal.
                "shelved" if cleared.is_none_or(|c| c >= secs) => self.shelve(alarm, point),
                _ => self.unshelve(alarm),
            }
        }
        Ok(())
    }

    fn shelve(&mut self, alarm: i64, point: usize) {
        if self.shelved.insert(alarm, point).is_none() {
            self.state[point].shelved += 1;
        }
    }

    fn unshelve(&mut self, alarm: i64) {
        if let Some(p) = self.shelved.remove(&alarm) {
            self.state[p].shelved -= 1;
        }
    }

    /// A return to normal: a fleeting activation if within the limit; shelving ends
    /// with it.
    fn cleared(&mut self, alarm: i64, at: i64, fleeting_ms: i64) {
        if let Some((p, raised)) = self.open.remove(&alarm)
            && at - raised <= fleeting_ms
        {
            let hour = self.hour(raised);
            self.activity.counts.entry((hour, p)).or_default().fleeting += 1;
        }
        self.unshelve(alarm);
    }

    fn hour(&self, at: i64) -> i64 {
        if self.by_hour { at.div_euclid(HOUR_MS) } else { 0 }
    }

    /// A new occurrence. Before the span (`counted` false) it only feeds the chatter
    /// state of the activations after it.
    fn raised(&mut self, alarm: i64, at: i64, point: usize, severity: Severity, counted: bool, suppressed: bool) {
        let period = at.div_euclid(PERIOD_MS);
        let state = &mut self.state[point];
        if suppressed || state.out_of_service || state.shelved > 0 {
            if counted {
                self.activity.periods.entry(period).or_default()[SUPPRESSED] += 1;
            }
            return;
        }
        // Chattering: this activation and those of the window before it reach the count.
        // An episode begins with a chattering activation after one that was not.
        let (window, needed) = (self.settings.chatter_window_secs * 1000, self.settings.chatter_activations);
        while state.recent.front().is_some_and(|&t| at - t >= window) {
            state.recent.pop_front();
        }
        state.recent.push_back(at);
        let chattering = state.recent.len() >= needed;
        let begins = chattering && !state.chattering;
        state.chattering = chattering;
        if state.recent.len() >= needed {
            state.recent.pop_front();
        }
        if !counted {
            return;
        }
        let severity = Severity::ALL.iter().position(|s| *s == severity).unwrap_or(0);
        self.activity.periods.entry(period).or_default()[severity] += 1;
        let hour = self.hour(at);
        let counts = self.activity.counts.entry((hour, point)).or_default();
        counts.activations += 1;
        counts.chatter_episodes += i64::from(begins);
        self.open.insert(alarm, (point, at));
    }
}

/// How long a point was shelved and out of service within a window.
#[derive(Debug, Default, Clone, Copy)]
pub struct Held {
    pub out_of_service_ms: i64,
    pub out_of_service_at_end: bool,
    pub shelved_ms: i64,
    pub shelved_at_end: bool,
}

/// Time out of service and shelved within [from_ms, to_ms), per point, from the service
/// events alone (a partial index keeps them few). Shelving ends with the occurrence's
/// return to normal.
pub fn held(conn: &Connection, from_ms: i64, to_ms: i64) -> rusqlite::Result<Vec<(Point, Held)>> {
    let mut stmt = conn.prepare_cached(
        "SELECT e.alarm_id, e.kind, e.at * 1000 + e.millis, a.asset_id, coalesce(a.sensor_id, ''), a.code,
                (SELECT c.at * 1000 + c.millis FROM alarm_events c
                 WHERE c.alarm_id = a.id AND c.kind = 'cleared' ORDER BY c.at, c.id LIMIT 1)
         FROM alarm_events e INDEXED BY alarm_events_service JOIN alarms a ON a.id = e.alarm_id
         WHERE e.at < ?1 AND e.kind IN ('shelved', 'unshelved', 'out_of_service', 'returned_to_service')
         ORDER BY e.at, e.millis, e.id",
    )?;
    let clip = |since: i64, until: i64| (until.min(to_ms) - since.max(from_ms)).max(0);
    let mut index = PointIndex::default();
    let mut held: Vec<Held> = Vec::new();
    let mut out_since: HashMap<usize, i64> = HashMap::new();
    // Shelved occurrences: (point, since, their return to normal if any).
    let mut shelved: HashMap<i64, (usize, i64, Option<i64>)> = HashMap::new();
    let mut rows = stmt.query([to_ms.div_euclid(1000) + 1])?;
    while let Some(r) = rows.next()? {
        let (alarm, at): (i64, i64) = (r.get(0)?, r.get(2)?);
        if at >= to_ms {
            break;
        }
        let p = index.index(r.get_ref(3)?.as_str()?, r.get_ref(4)?.as_str()?, r.get_ref(5)?.as_str()?);
        if p == held.len() {
            held.push(Held::default());
        }
        match r.get_ref(1)?.as_str()? {
            "out_of_service" => {
                out_since.entry(p).or_insert(at);
            }
            "returned_to_service" => {
                if let Some(since) = out_since.remove(&p) {
                    held[p].out_of_service_ms += clip(since, at);
                }
            }
            "shelved" => {
                shelved.entry(alarm).or_insert((p, at, r.get(6)?));
            }
            _ => {
                if let Some((p, since, cleared)) = shelved.remove(&alarm) {
                    held[p].shelved_ms += clip(since, cleared.map_or(at, |c| c.min(at)));
                }
            }
        }
    }
    for (p, since) in out_since {
        held[p].out_of_service_ms += clip(since, to_ms);
        held[p].out_of_service_at_end = true;
    }
    for (p, since, cleared) in shelved.into_values() {
        let until = cleared.filter(|&c| c < to_ms);
        held[p].shelved_ms += clip(since, until.unwrap_or(to_ms));
        held[p].shelved_at_end |= until.is_none();
    }
    let mut points: Vec<(Point, Held)> = index.points.into_iter().zip(held).collect();
    points.retain(|(_, h)| h.out_of_service_ms > 0 || h.out_of_service_at_end || h.shelved_ms > 0 || h.shelved_at_end);
    Ok(points)
}
