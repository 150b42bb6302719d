//! Consequential pairs learned from the journal: B follows A within a lag in most of
//! A's activations, more often than chance. Support, confidence and lift as association
//! rules state them, with the lag's median and 90th percentile; what ISA-18.2 calls
//! candidates for designed (state-based) suppression.

use std::collections::HashMap;

use rusqlite::{Connection, params};
use serde::Serialize;

use super::Activation;
use crate::alarms::definitions::Point;
use crate::domain::Timestamp;

/// What makes a pair worth naming.
#[derive(Debug, Clone, Copy)]
pub struct PairRules {
    /// B must follow A within this many milliseconds.
    pub lag_ms: i64,
    /// A must have been followed by B at least this many times.
    pub min_support: usize,
    /// ... in at least this share of A's activations.
    pub min_confidence: f64,
    /// ... and this many times more often than B's own rate would give.
    pub min_lift: f64,
}

impl Default for PairRules {
    fn default() -> Self {
        PairRules { lag_ms: 300_000, min_support: 3, min_confidence: 0.5, min_lift: 2.0 }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Pair {
    pub first: Point,
    pub then: Point,
    /// Activations of `first` followed by `then` within the lag.
    pub support: usize,
    pub first_activations: usize,
    /// support / first_activations.
    pub confidence: f64,
    /// confidence over the chance of `then` in any window of the lag's length.
    pub lift: f64,
    pub lag_median_s: f64,
    pub lag_p90_s: f64,
}

/// The pairs among `activations` (in time order) that meet `rules`, strongest first
/// (by lift, then support): [`Miner`]'s two passes over a slice.
pub fn mine(activations: &[Activation], rules: PairRules) -> Vec<Pair> {
    let mut miner = Miner::new(rules);
    for a in activations {
        miner.count(&a.point, a.at_ms);
    }
    miner.choose();
    for a in activations {
        miner.tally(&a.point, a.at_ms);
    }
    miner.finish()
}

/// Followers a point's heavy-hitter summary keeps (Misra-Gries): a pair is surely kept
/// when B is more than 1/65 of what follows A's activations (with 19 activations in a
/// 5-minute window, a large utility's year, that is a confidence of 0.3).
const HEAVY: usize = 64;

/// The consequential pairs of a journal read twice in time order, in memory that grows
/// with the points and the pairs worth a second look, never with the journal:
/// [`Miner::count`] every activation (each point's count and a bounded summary of what
/// follows it), [`Miner::choose`] the candidates, [`Miner::tally`] every activation
/// again (their exact support and a lag histogram of 1 s bins), [`Miner::finish`].
pub struct Miner {
    rules: PairRules,
    index: HashMap<Point, u32>,
    points: Vec<Point>,
    counts: Vec<u32>,
    /// Per point: what followed it (the whole pass's count) and its heavy followers.
    followed: Vec<(u64, Vec<(u32, u32)>)>,
    /// The activations within the lag of the newest, each with the points that followed it.
    window: Window,
    span: Option<(i64, i64)>,
    /// The chosen pairs: support and lags, by whole second.
    candidates: HashMap<(u32, u32), (u32, Vec<u32>)>,
    second_pass: bool,
}

impl Miner {
    pub fn new(rules: PairRules) -> Miner {
        Miner {
            rules,
            index: HashMap::new(),
            points: Vec::new(),
            counts: Vec::new(),
            followed: Vec::new(),
            window: Default::default(),
            span: None,
            candidates: HashMap::new(),
            second_pass: false,
        }
    }

    fn id(&mut self, point: &Point) -> u32 {
        if let Some(&i) = self.index.get(point) {
            return i;
        }
        let i = self.points.len() as u32;
        self.index.insert(point.clone(), i);
        self.points.push(point.clone());
        self.counts.push(0);
        self.followed.push((0, Vec::new()));
        i
    }

    /// First pass: one activation.
    pub fn count(&mut self, point: &Point, at_ms: i64) {
        let b = self.id(point);
        self.counts[b as usize] += 1;
        self.span = Some(self.span.map_or((at_ms, at_ms), |(f, _)| (f, at_ms)));
        let mut seen = Vec::new();
        follows(&mut self.window, self.rules.lag_ms, b, at_ms, |a, _| seen.push(a));
        for a in seen {
            let (total, heavy) = &mut self.followed[a as usize];
            *total += 1;
            if let Some(h) = heavy.iter_mut().find(|h| h.0 == b) {
                h.1 += 1;
            } else if heavy.len() < HEAVY {
                heavy.push((b, 1));
            } else {
                heavy.iter_mut().for_each(|h| h.1 -= 1);
                heavy.retain(|h| h.1 > 0);
            }
        }
    }

    /// Between the passes: the pairs that may meet the rules, allowing for what the
    /// summary undercounts (at most a point's followers over `HEAVY + 1`).
    pub fn choose(&mut self) {
        let r = self.rules;
        let span_ms = self.span.map_or(r.lag_ms, |(first, last)| (last - first).max(r.lag_ms));
        for (a, (total, heavy)) in self.followed.iter().enumerate() {
            let slack = (*total / (HEAVY as u64 + 1)) as u32;
            for &(b, n) in heavy {
                let most = n + slack;
                let confidence = f64::from(most) / f64::from(self.counts[a]);
                // A point that comes in every window (a bad actor) follows everything
                // by chance: its lift, at most this, rules it out here.
                let chance = (f64::from(self.counts[b as usize]) * r.lag_ms as f64 / span_ms as f64).min(1.0);
                if most as usize >= r.min_support && confidence >= r.min_confidence && confidence / chance >= r.min_lift
                {
                    self.candidates.insert((a as u32, b), (0, vec![0; (r.lag_ms / 1000) as usize + 1]));
                }
            }
        }
        self.followed = Vec::new();
        self.window.clear();
        self.second_pass = true;
    }

    /// Second pass: one activation, in the same order as the first.
    pub fn tally(&mut self, point: &Point, at_ms: i64) {
        debug_assert!(self.second_pass, "choose() comes between the passes");
        let Some(&b) = self.index.get(point) else { return };
        let candidates = &mut self.candidates;
        follows(&mut self.window, self.rules.lag_ms, b, at_ms, |a, lag_ms| {
            if let Some((support, lags)) = candidates.get_mut(&(a, b)) {
                *support += 1;
                lags[(lag_ms / 1000) as usize] += 1;
            }
        });
    }

    /// The pairs that meet the rules, strongest first (by lift, then support).
    pub fn finish(self) -> Vec<Pair> {
        let rules = self.rules;
        let Some((first, last)) = self.span else { return Vec::new() };
        let span_ms = (last - first).max(rules.lag_ms);
        let mut pairs: Vec<Pair> = self
            .candidates
            .into_iter()
            .filter_map(|((a, b), (support, lags))| {
                let (a, b) = (a as usize, b as usize);
                let confidence = f64::from(support) / f64::from(self.counts[a]);
                let chance = (f64::from(self.counts[b]) * rules.lag_ms as f64 / span_ms as f64).min(1.0);
                let lift = confidence / chance;
                if (support as usize) < rules.min_support || confidence < rules.min_confidence || lift < rules.min_lift
                {
                    return None;
                }
                // The lag's quantile, as the whole second its bin starts at.
                let at = |q: f64| {
                    let rank = ((support - 1) as f64 * q).round() as u32;
                    let mut seen = 0;
                    lags.iter()
                        .position(|&n| {
                            seen += n;
                            seen > rank
                        })
                        .unwrap_or(0) as f64
                };
                Some(Pair {
                    first: self.points[a].clone(),
                    then: self.points[b].clone(),
                    support: support as usize,
                    first_activations: self.counts[a] as usize,
                    confidence,
                    lift,
                    lag_median_s: at(0.5),
                    lag_p90_s: at(0.9),
                })
            })
            .collect();
        pairs.sort_by(|x, y| y.lift.total_cmp(&x.lift).then(y.support.cmp(&x.support)).then(x.first.order(&y.first)));
        pairs
    }
}

/// The activations in `window` that `b`, at `at_ms`, follows for the first time (each
/// of A's activations counts a B once, at its first), each with the lag; then `b` joins
/// the window, which keeps what lies within `lag_ms` of the newest.
fn follows(window: &mut Window, lag_ms: i64, b: u32, at_ms: i64, mut seen: impl FnMut(u32, i64)) {
    while window.front().is_some_and(|(_, t, _)| at_ms - t > lag_ms) {
        window.pop_front();
    }
    for (a, t, after) in window.iter_mut() {
        if *a != b && !after.contains(&b) {
            after.push(b);
            seen(*a, at_ms - *t);
        }
    }
    window.push_back((b, at_ms, Vec::new()));
}

/// Recent activations (point, ms) with the points that followed each.
type Window = std::collections::VecDeque<(u32, i64, Vec<u32>)>;

/// The learned pairs as a lookup: does `first` lead to `then`? Keyed by the first
/// point, then the next: a lookup borrows both points (ranking a flood's episode looks
/// up every pair of its points).
#[derive(Debug, Default, Clone)]
pub struct Learned(HashMap<Point, HashMap<Point, Pair>>);

impl Learned {
    pub fn new(pairs: Vec<Pair>) -> Learned {
        let mut by_first: HashMap<Point, HashMap<Point, Pair>> = HashMap::new();
        for p in pairs {
            by_first.entry(p.first.clone()).or_default().insert(p.then.clone(), p);
        }
        Learned(by_first)
    }

    pub fn get(&self, first: &Point, then: &Point) -> Option<&Pair> {
        self.0.get(first)?.get(then)
    }

    pub fn len(&self) -> usize {
        self.0.values().map(HashMap::len).sum()
    }

    pub fn iter(&self) -> impl Iterator<Item = &Pair> {
        self.0.values().flat_map(HashMap::values)
    }

    /// The `n` strongest: by lift, then support.
    pub fn strongest(&self, n: usize) -> Vec<&Pair> {
        let mut pairs: Vec<&Pair> = self.iter().collect();
        pairs.sort_by(|a, b| b.lift.total_cmp(&a.lift).then(b.support.cmp(&a.support)).then(a.first.order(&b.first)));
        pairs.truncate(n);
        pairs
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

/// What a proposed suppression rests on: the learned pair, and what it would have done
/// to the follower's occurrences over the last `days`.
#[derive(Debug, Clone, Serialize)]
pub struct SuppressionEvidence {
    pub days: i64,
    /// The pair as housekeeping learned it from the journal.
    pub pair: Pair,
    pub leader_activations: i64,
    pub follower_activations: i64,
    /// Of the follower's, raised while the leader had an occurrence active: what the
    /// suppression would have kept from the operator.
    pub while_leader_active: i64,
    /// ... and of those, critical ones: a suppression that hides a critical alarm needs
    /// the engineer's hardest look.
    pub critical_while_leader_active: i64,
    /// The follower's raised with the leader normal: still annunciated.
    pub otherwise: i64,
}

/// Days of the journal a suppression's evidence reads: the pairs' own window.
pub const SUPPRESSION_EVIDENCE_DAYS: i64 = 90;

/// The evidence for suppressing `follower` while `leader` is active, from the journal's
/// occurrences since `from` (up to `now`, an occurrence still active counts to it).
pub fn suppression_evidence(
    conn: &Connection,
    leader: &Point,
    follower: &Point,
    pair: Pair,
    from: Timestamp,
    now: Timestamp,
) -> rusqlite::Result<SuppressionEvidence> {
    let activations = |p: &Point| -> rusqlite::Result<i64> {
        conn.prepare_cached(
            "SELECT count(*) FROM alarms INDEXED BY alarms_asset WHERE asset_id = ?1 AND raised_at >= ?4
               AND coalesce(sensor_id, '') = coalesce(?2, '') AND code = ?3",
        )?
        .query_row(params![p.asset_id, p.sensor_id, p.code, from.unix()], |r| r.get(0))
    };
    let (while_active, critical): (i64, i64) = conn
        .prepare_cached(
            "SELECT count(*), coalesce(sum(b.severity = 'critical'), 0) FROM alarms b INDEXED BY alarms_asset
             WHERE b.asset_id = ?1 AND b.raised_at >= ?7 AND coalesce(b.sensor_id, '') = coalesce(?2, '') AND b.code = ?3
               AND EXISTS (SELECT 1 FROM alarms l INDEXED BY alarms_asset
                           WHERE l.asset_id = ?4 AND l.raised_at <= b.raised_at AND coalesce(l.cleared_at, ?8) >= b.raised_at
                             AND coalesce(l.sensor_id, '') = coalesce(?5, '') AND l.code = ?6)",
        )?
        .query_row(
            params![
                follower.asset_id,
                follower.sensor_id,
                follower.code,
                leader.asset_id,
                leader.sensor_id,
                leader.code,
                from.unix(),
                now.unix()
            ],
            |r| Ok((r.get(0)?, r.get(1)?)),
        )?;
    let follower_activations = activations(follower)?;
    Ok(SuppressionEvidence {
        days: (now.unix() - from.unix()) / 86_400,
        pair,
        leader_activations: activations(leader)?,
        follower_activations,
        while_leader_active: while_active,
        critical_while_leader_active: critical,
        otherwise: follower_activations - while_active,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn point(asset: &str, code: &str) -> Point {
        Point { asset_id: asset.into(), sensor_id: None, code: code.into() }
    }

    /// Known by construction: B follows A 30 s later in 8 of A's 10 activations; C comes
    /// at random, as often as B, and pairs with nothing.
    #[test]
    fn a_pair_that_follows_most_of_the_time_is_found_with_its_figures() {
        let (a, b, c) = (point("P1", "TRIP"), point("V1", "FLOW-LO"), point("X9", "DOOR"));
        let mut acts = Vec::new();
        for k in 0..10i64 {
            let t = k * 3_600_000;
            acts.push(Activation { alarm_id: 0, point: a.clone(), at_ms: t });
            if k < 8 {
                acts.push(Activation { alarm_id: 0, point: b.clone(), at_ms: t + 30_000 + k * 1000 });
            }
            acts.push(Activation { alarm_id: 0, point: c.clone(), at_ms: t + 1_800_000 });
        }
        acts.sort_by_key(|x| x.at_ms);
        let pairs = mine(&acts, PairRules::default());
        assert_eq!(pairs.len(), 1, "{pairs:?}");
        let p = &pairs[0];
        assert_eq!((&p.first, &p.then, p.support, p.first_activations), (&a, &b, 8, 10));
        assert!((p.confidence - 0.8).abs() < 1e-9);
        // B has 8 activations over 9.5 h of journal, in windows of 300 s: chance
        // 8 * 300 / 34_200 = 0.0702, lift 0.8 / 0.0702 = 11.4.
        assert!((p.lift - 0.8 / (8.0 * 300.0 / 34_200.0)).abs() < 1e-6, "{}", p.lift);
        assert_eq!((p.lag_median_s, p.lag_p90_s), (34.0, 36.0));
    }
}
