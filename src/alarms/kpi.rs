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
//! A chattering episode begins with an activation that makes the count within the window
//! after one that did not. The activity is one pass over the journal in time order
//! ([`super::activity`]), in memory bounded by the points and the occurrences standing
//! at once; with the default definitions, closed hours come summed from a cache
//! ([`super::kpi_cache`]).

use std::collections::HashMap;

use rusqlite::{Connection, params};
use serde::Serialize;
use serde_json::{Value, json};

use super::activity::{self, PERIOD_MS, PointSums, SUPPRESSED};
pub use super::definitions::{KpiSettings, MAX_WINDOW_DAYS, Point};
use super::kpi_cache;
use crate::domain::{Severity, Timestamp};

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

#[derive(Debug, Default, Clone)]
struct PointStats {
    activations: i64,
    chatter_episodes: i64,
    fleeting: i64,
    /// Time out of service and shelved within the window (ms), and whether still so.
    oos_ms: i64,
    out_of_service: bool,
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
    /// Fleeting activations, all points.
    pub fleeting: i64,
    /// The points listed ([`listed_points`]): most activations first, ties by point.
    points: Vec<(Point, PointStats)>,
    /// The chattering and fleeting lists' cut, and their lengths uncut.
    rows: usize,
    listed_totals: [usize; 2],
    stale: Vec<Value>,
}

/// Computes the figures for [from, to), the chattering and fleeting points' lists cut to
/// `rows` if given (each cut list's length in `*_total`).
pub fn compute(
    conn: &Connection,
    from: Timestamp,
    to: Timestamp,
    settings: KpiSettings,
    rows: Option<usize>,
) -> rusqlite::Result<Kpis> {
    let (from_ms, to_ms) = (from.unix() * 1000, to.unix() * 1000);
    let first_period = from_ms.div_euclid(PERIOD_MS);
    let periods = ((to_ms - 1).div_euclid(PERIOD_MS) - first_period + 1).max(0);
    let (by_period, by_point) = kpi_cache::activity(conn, from_ms, to_ms, &settings)?;
    let mut per_period = vec![0; periods as usize];
    let (mut by_severity, mut suppressed) = ([0i64; 4], 0);
    for (p, n) in &by_period {
        if let Some(slot) = usize::try_from(p - first_period).ok().and_then(|i| per_period.get_mut(i)) {
            *slot += n[..4].iter().sum::<i64>();
        }
        for (s, v) in by_severity.iter_mut().zip(n) {
            *s += v;
        }
        suppressed += n[SUPPRESSED];
    }
    let floods = floods(conn, &per_period, first_period, (from_ms, to_ms), &settings, &by_point)?;
    let rows = rows.unwrap_or(usize::MAX);
    let (points, listed_totals) = listed_points(conn, &by_point, (from_ms, to_ms), rows)?;
    Ok(Kpis {
        from,
        to,
        settings,
        annunciated: by_severity.iter().sum(),
        suppressed,
        periods,
        per_period,
        floods,
        by_severity,
        fleeting: by_point.iter().map(|(_, c)| c.fleeting).sum(),
        points,
        rows,
        listed_totals,
        stale: stale(conn, to, settings.stale_hours)?,
    })
}

type Listed = Vec<(Point, PointStats)>;

/// The points the figures list, named: the ten most frequent, and the first `rows`
/// that chattered and that were fleeting, and every one shelved or out of service.
/// Most activations first, ties by point; those with none (held only) last. Also how
/// many chattered and how many were fleeting.
fn listed_points(
    conn: &Connection,
    sums: &PointSums,
    (from_ms, to_ms): (i64, i64),
    rows: usize,
) -> rusqlite::Result<(Listed, [usize; 2])> {
    let stats = |c: activity::Counts| PointStats {
        activations: c.activations,
        chatter_episodes: c.chatter_episodes,
        fleeting: c.fleeting,
        ..Default::default()
    };
    let (top, _) = sums.first(conn, 10, |c| c.activations > 0)?;
    let (chattering, chattering_total) = sums.first(conn, rows, |c| c.chatter_episodes > 0)?;
    let (fleeting, fleeting_total) = sums.first(conn, rows, |c| c.fleeting > 0)?;
    let mut seen = std::collections::HashSet::new();
    let mut points: Vec<(Point, PointStats)> = Vec::new();
    for r in top.into_iter().chain(chattering).chain(fleeting) {
        if seen.insert(r.key) {
            points.push((r.point, stats(r.counts)));
        }
    }
    let mut at: HashMap<Point, usize> = points.iter().enumerate().map(|(i, (p, _))| (p.clone(), i)).collect();
    for (p, h) in activity::held(conn, from_ms, to_ms)? {
        let i = match at.get(&p) {
            Some(&i) => i,
            None => {
                let counts = sums.key_of(conn, &p)?.map(|k| sums.get(k)).unwrap_or_default();
                at.insert(p.clone(), points.len());
                points.push((p, stats(counts)));
                points.len() - 1
            }
        };
        let s = &mut points[i].1;
        (s.oos_ms, s.out_of_service) = (h.out_of_service_ms, h.out_of_service_at_end);
        (s.shelved_ms, s.shelved_now) = (h.shelved_ms, h.shelved_at_end);
    }
    points.sort_unstable_by(|a, b| b.1.activations.cmp(&a.1.activations).then_with(|| a.0.order(&b.0)));
    Ok((points, [chattering_total, fleeting_total]))
}

/// The flood episodes in the periods, each with its three largest contributors.
fn floods(
    conn: &Connection,
    per_period: &[i64],
    first_period: i64,
    (from_ms, to_ms): (i64, i64),
    settings: &KpiSettings,
    window: &PointSums,
) -> rusqlite::Result<Vec<Flood>> {
    let mut spans: Vec<(usize, usize, i64, i64)> = Vec::new();
    let mut current: Option<(usize, i64, i64)> = None;
    for (i, &n) in per_period.iter().enumerate() {
        match &mut current {
            None if n > settings.flood_start => current = Some((i, n, n)),
            None => {}
            Some((_, count, peak)) if n >= settings.flood_end => {
                *count += n;
                *peak = (*peak).max(n);
            }
            Some((start, count, peak)) => {
                spans.push((*start, i, *count, *peak));
                current = None;
            }
        }
    }
    let ongoing = current.map(|(start, count, peak)| (start, per_period.len(), count, peak));
    let period_ms = |i: usize| (first_period + i as i64) * PERIOD_MS;
    let mut floods = Vec::new();
    for (start, end, activations, peak) in spans.into_iter().chain(ongoing) {
        let (a, b) = (period_ms(start).max(from_ms), period_ms(end).min(to_ms));
        let top = if (a, b) == (from_ms, to_ms) {
            top_points(conn, window, 3)?
        } else {
            top_points(conn, &kpi_cache::activity(conn, a, b, settings)?.1, 3)?
        };
        floods.push(Flood {
            start: Timestamp::from_unix(period_ms(start) / 1000),
            end: Timestamp::from_unix(b / 1000),
            ongoing: end == per_period.len(),
            activations,
            peak_10min: peak,
            top,
        });
    }
    Ok(floods)
}

/// Occurrences active continuously for `hours` or more at `to`, not shelved, out of
/// service or suppressed by design, oldest first.
fn stale(conn: &Connection, to: Timestamp, hours: i64) -> rusqlite::Result<Vec<Value>> {
    let mut stmt = conn.prepare_cached(
        "SELECT json_object('alarm_id', id, 'asset_id', asset_id, 'sensor_id', sensor_id, 'code', code,
                'severity', severity, 'active_since', rfc3339(raised_at),
                'active_hours', round((?1 - raised_at) / 3600.0, 1))
         FROM (SELECT * FROM alarms WHERE cleared_at IS NULL AND raised_at <= ?2
               UNION ALL
               SELECT * FROM alarms WHERE cleared_at > ?1 AND raised_at <= ?2)
         WHERE state NOT IN ('shelved', 'out_of_service', 'suppressed')
         ORDER BY raised_at, id",
    )?;
    crate::store::json_rows(&mut stmt, params![to.unix(), to.unix() - hours * 3600])
}

/// The `n` points with most activations, most first, ties by point.
fn top_points(conn: &Connection, sums: &PointSums, n: usize) -> rusqlite::Result<Vec<Value>> {
    let (top, _) = sums.first(conn, n, |c| c.activations > 0)?;
    Ok(top.into_iter().map(|r| point_json(&r.point, "activations", json!(r.counts.activations))).collect())
}

/// The points `keep` selects, in order, each with its two figures.
fn list(
    points: &[(Point, PointStats)],
    keep: &dyn Fn(&PointStats) -> bool,
    figures: &dyn Fn(&PointStats) -> [(&'static str, Value); 2],
) -> Vec<Value> {
    points
        .iter()
        .filter(|(_, s)| keep(s))
        .map(|(p, s)| {
            let [(k1, v1), (k2, v2)] = figures(s);
            let mut v = point_json(p, k1, v1);
            v[k2] = v2;
            v
        })
        .collect()
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

    /// The points with activations, most first.
    fn ranked(&self) -> &[(Point, PointStats)] {
        let n = self.points.partition_point(|(_, s)| s.activations > 0);
        &self.points[..n]
    }

    pub fn top10_share_pct(&self) -> f64 {
        pct(self.ranked().iter().take(10).map(|(_, s)| s.activations).sum(), self.annunciated)
    }

    /// The contract: the keys other tools read, every figure beside its definition.
    pub fn to_json(&self) -> Value {
        let (peak, peak_at) = self.peak();
        let over_10 = self.per_period.iter().filter(|&&n| n > 10).count() as i64;
        let ranked = self.ranked();
        let minutes = |ms: i64| json!(round2(ms as f64 / 60_000.0));
        let bad_actors = list(&ranked[..ranked.len().min(10)], &|_| true, &|s| {
            [("activations", json!(s.activations)), ("share_pct", json!(pct(s.activations, self.annunciated)))]
        });
        let mut chattering = list(ranked, &|s| s.chatter_episodes > 0, &|s| {
            [("activations", json!(s.activations)), ("chatter_episodes", json!(s.chatter_episodes))]
        });
        let mut fleeting = list(ranked, &|s| s.fleeting > 0, &|s| {
            [("fleeting", json!(s.fleeting)), ("activations", json!(s.activations))]
        });
        chattering.truncate(self.rows);
        fleeting.truncate(self.rows);
        // Points shelved or out of service in the window: minutes, and whether still so.
        let shelved = list(&self.points, &|s| s.shelved_ms > 0 || s.shelved_now, &|s| {
            [("shelved_minutes", minutes(s.shelved_ms)), ("shelved_at_end", json!(s.shelved_now))]
        });
        let out_of_service = list(&self.points, &|s| s.oos_ms > 0 || s.out_of_service, &|s| {
            [("out_of_service_minutes", minutes(s.oos_ms)), ("out_of_service_at_end", json!(s.out_of_service))]
        });
        let severity = |i: usize| (Severity::ALL[i].as_str(), self.by_severity[i]);
        let priority: serde_json::Map<String, Value> =
            (0..4).map(|i| (severity(i).0.into(), json!(severity(i).1))).collect();
        let priority_pct: serde_json::Map<String, Value> =
            (0..4).map(|i| (severity(i).0.into(), json!(pct(severity(i).1, self.annunciated)))).collect();
        let hours = self.hours();
        let mut figures = json!({
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
            "fleeting_activations": self.fleeting,
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
        });
        for (key, total) in ["chattering", "fleeting"].into_iter().zip(self.listed_totals) {
            if total > self.rows {
                figures[format!("{key}_total")] = total.into();
            }
        }
        figures
    }

    /// Every definition in force, in words, for wherever the figures are shown.
    pub fn definitions(&self) -> Value {
        let s = &self.settings;
        json!({
            "annunciated": "activations shown to the operator: new occurrences of a point not shelved, not out of service and not suppressed by design (one released by its suppression while still active counts when released); acknowledgements, returns to normal, shelving and repeats while active are not counted",
            "suppressed": "occurrences raised while their point was out of service or shelved, or suppressed by design while their cause was active (not annunciated, not in any other figure)",
            "periods": "10-minute periods aligned in UTC (hh:00, hh:10, ...); a period the window covers in part counts whole",
            "rate": "annunciated activations divided by the window's length",
            "flood": format!("starts with a 10-minute period of more than {} activations and ends with the first period of fewer than {}; its periods are time in flood", s.flood_start, s.flood_end),
            "top10_share_pct": "the 10 points with most activations, as a share of all activations",
            "chattering": format!("a point with {} or more activations within {} s; an episode begins with an activation that makes the count after one that did not", s.chatter_activations, s.chatter_window_secs),
            "fleeting": format!("an activation that returned to normal within {} s", s.fleeting_secs),
            "stale": format!("an occurrence active continuously for {} h or more at the end of the window, not shelved, out of service or suppressed by design", s.stale_hours),
            "priority": "share of annunciated activations by priority (severity); the target is ISA-18.2's 80/15/5 for low/medium/high, critical shown apart",
        })
    }
}
