//! Floods like this one: an episode as the sequence of its points in the order they
//! first annunciated, with their time into the episode, aligned with past ones by a
//! Smith-Waterman local alignment whose match score decays with the difference in
//! timing (the "modified Smith-Waterman with time distance" of the alarm flood
//! literature). Order and timing count, not only which alarms came.

use serde::Serialize;

use crate::alarms::definitions::Point;

/// One step of an episode: a point and its first annunciation, seconds into the episode.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Step {
    pub point: Point,
    pub offset_s: f64,
}

/// The alignment's scores: a match of the same point, of the same alarm code on
/// another asset, a mismatch and a gap; and how fast a match's credit decays with the
/// difference in timing (seconds).
const SAME_POINT: f64 = 2.0;
const SAME_CODE: f64 = 0.6;
const MISMATCH: f64 = -0.8;
const GAP: f64 = -0.5;
const TIME_SCALE_S: f64 = 120.0;

fn pair_score(a: &Step, b: &Step) -> f64 {
    let decay = (-(a.offset_s - b.offset_s).abs() / TIME_SCALE_S).exp();
    if a.point == b.point {
        SAME_POINT * (0.5 + 0.5 * decay)
    } else if a.point.code == b.point.code {
        SAME_CODE * decay
    } else {
        MISMATCH
    }
}

/// The best local alignment's score (0 when nothing aligns).
pub fn align(a: &[Step], b: &[Step]) -> f64 {
    let mut prev = vec![0.0; b.len() + 1];
    let mut row = vec![0.0; b.len() + 1];
    let mut best: f64 = 0.0;
    for x in a {
        row[0] = 0.0;
        for (j, y) in b.iter().enumerate() {
            let v = (prev[j] + pair_score(x, y)).max(prev[j + 1] + GAP).max(row[j] + GAP).max(0.0);
            row[j + 1] = v;
            best = best.max(v);
        }
        std::mem::swap(&mut prev, &mut row);
    }
    best
}

/// Similarity from 0 to 1: the alignment over what each would score against itself.
pub fn similarity(a: &[Step], b: &[Step]) -> f64 {
    let (aa, bb) = (align(a, a), align(b, b));
    if aa <= 0.0 || bb <= 0.0 {
        return 0.0;
    }
    (align(a, b) / (aa * bb).sqrt()).min(1.0)
}

/// The `k` most similar of `past` (by index) with their scores, best first; ties go
/// to the more recent (the later index).
pub fn most_similar(episode: &[Step], past: &[Vec<Step>], k: usize) -> Vec<(usize, f64)> {
    let mut scored: Vec<(usize, f64)> =
        past.iter().enumerate().map(|(i, p)| (i, similarity(episode, p))).filter(|(_, s)| *s > 0.0).collect();
    scored.sort_by(|x, y| y.1.total_cmp(&x.1).then(y.0.cmp(&x.0)));
    scored.truncate(k);
    scored
}

#[cfg(test)]
mod tests {
    use super::*;

    fn steps(seq: &[(&str, &str, f64)]) -> Vec<Step> {
        seq.iter()
            .map(|(asset, code, t)| Step {
                point: Point { asset_id: asset.to_string(), sensor_id: None, code: code.to_string() },
                offset_s: *t,
            })
            .collect()
    }

    /// The same flood again (a consequence missing, timings shifted) is nearer than a
    /// flood of the same alarms in another order, and far nearer than another flood.
    #[test]
    fn order_and_timing_count_not_only_the_alarms() {
        let flood = steps(&[
            ("SWB-N", "POWER-FAIL", 0.0),
            ("MTR-001", "TRIP", 2.0),
            ("PUMP-001", "FLOW-LO", 20.0),
            ("PUMP-004", "PRESS-SUC-LO", 90.0),
        ]);
        let again =
            steps(&[("SWB-N", "POWER-FAIL", 0.0), ("MTR-001", "TRIP", 3.0), ("PUMP-004", "PRESS-SUC-LO", 100.0)]);
        let shuffled = steps(&[
            ("PUMP-004", "PRESS-SUC-LO", 0.0),
            ("PUMP-001", "FLOW-LO", 30.0),
            ("MTR-001", "TRIP", 60.0),
            ("SWB-N", "POWER-FAIL", 200.0),
        ]);
        let other = steps(&[("AIR-E", "PRESS-LO", 0.0), ("VLV-002", "POS-FAIL", 40.0)]);
        assert!((similarity(&flood, &flood) - 1.0).abs() < 1e-9);
        let (s_again, s_shuffled, s_other) =
            (similarity(&flood, &again), similarity(&flood, &shuffled), similarity(&flood, &other));
        assert!(s_again > 0.6, "{s_again}");
        assert!(s_again > s_shuffled + 0.2, "{s_again} vs {s_shuffled}");
        assert_eq!(s_other, 0.0);
        assert_eq!(most_similar(&flood, &[other, shuffled, again], 2).iter().map(|r| r.0).collect::<Vec<_>>(), [2, 1]);
    }
}
