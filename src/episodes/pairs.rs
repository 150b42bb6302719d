//! Consequential pairs learned from the journal: B follows A within a lag in most of
//! A's activations, more often than chance. Support, confidence and lift as association
//! rules state them, with the lag's median and 90th percentile; what ISA-18.2 calls
//! candidates for designed (state-based) suppression.

use std::collections::HashMap;

use serde::Serialize;

use super::Activation;
use crate::alarms::definitions::Point;

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
/// (by lift, then support). One pass with a window of the lag's length: memory grows
/// with the points and the pairs seen, not with the journal.
pub fn mine(activations: &[Activation], rules: PairRules) -> Vec<Pair> {
    let mut index: HashMap<&Point, usize> = HashMap::new();
    let mut counts: Vec<usize> = Vec::new();
    for a in activations {
        let i = *index.entry(&a.point).or_insert_with(|| {
            counts.push(0);
            counts.len() - 1
        });
        counts[i] += 1;
    }
    let ids: Vec<usize> = activations.iter().map(|a| index[&a.point]).collect();
    let mut lags: HashMap<(usize, usize), Vec<i64>> = HashMap::new();
    let mut end = 0;
    let mut followed = Vec::new();
    for (i, a) in activations.iter().enumerate() {
        end = end.max(i + 1);
        while end < activations.len() && activations[end].at_ms - a.at_ms <= rules.lag_ms {
            end += 1;
        }
        followed.clear();
        for j in i + 1..end {
            let b = ids[j];
            // Each of A's activations counts a B once, at its first.
            if b != ids[i] && !followed.contains(&b) {
                followed.push(b);
                lags.entry((ids[i], b)).or_default().push(activations[j].at_ms - a.at_ms);
            }
        }
    }
    let span_ms = match (activations.first(), activations.last()) {
        (Some(f), Some(l)) => (l.at_ms - f.at_ms).max(rules.lag_ms),
        _ => return Vec::new(),
    };
    let points: Vec<&Point> = {
        let mut p = vec![None; counts.len()];
        for (point, &i) in &index {
            p[i] = Some(*point);
        }
        p.into_iter().map(|p| p.expect("every index has its point")).collect()
    };
    let mut pairs: Vec<Pair> = lags
        .into_iter()
        .filter_map(|((a, b), mut lag)| {
            let support = lag.len();
            let confidence = support as f64 / counts[a] as f64;
            let chance = (counts[b] as f64 * rules.lag_ms as f64 / span_ms as f64).min(1.0);
            let lift = confidence / chance;
            if support < rules.min_support || confidence < rules.min_confidence || lift < rules.min_lift {
                return None;
            }
            lag.sort_unstable();
            let at = |q: f64| lag[((lag.len() - 1) as f64 * q).round() as usize] as f64 / 1000.0;
            Some(Pair {
                first: points[a].clone(),
                then: points[b].clone(),
                support,
                first_activations: counts[a],
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

/// The learned pairs as a lookup: does `first` lead to `then`?
#[derive(Debug, Default, Clone)]
pub struct Learned(HashMap<(Point, Point), Pair>);

impl Learned {
    pub fn new(pairs: Vec<Pair>) -> Learned {
        Learned(pairs.into_iter().map(|p| ((p.first.clone(), p.then.clone()), p)).collect())
    }

    pub fn get(&self, first: &Point, then: &Point) -> Option<&Pair> {
        self.0.get(&(first.clone(), then.clone()))
    }

    pub fn len(&self) -> usize {
        self.0.len()
    }

    pub fn iter(&self) -> impl Iterator<Item = &Pair> {
        self.0.values()
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
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
