//! Alarm episodes: the activations that belong together (a burst on connected
//! equipment, or an ISA-18.2 flood), the alarm that started them, what follows from it,
//! and the past episodes they resemble. One note per episode is written from these.
//!
//! - [`group`]: activations into episodes as they arrive: one joins the open episode it
//!   comes within `gap` of, when the plant's connections, a learned pair or a flood tie
//!   it to the episode; an episode is named once it has `min_points` points.
//! - [`rank`]: the initiator's candidates, each with the evidence that ranks it:
//!   first-out order, how many of the others lie downstream of it in the plant
//!   ([`graph`]), how many follow it as learned pairs ([`pairs`]).
//! - [`similar`]: past episodes by a time-aware sequence alignment.
//!
//! Architecture Invariant: the algorithms read activations and the plant, and call no
//! model; [`upkeep`] stores what they find in the caller's transaction (ingest's, as
//! each activation is committed).

pub mod graph;
pub mod pairs;
pub mod similar;
pub mod upkeep;

use serde::Serialize;

use crate::alarms::definitions::Point;
use graph::PlantGraph;
use pairs::Learned;
use similar::Step;

/// One annunciated activation: a new occurrence of a point, to the millisecond.
#[derive(Debug, Clone, PartialEq)]
pub struct Activation {
    pub alarm_id: i64,
    pub point: Point,
    pub at_ms: i64,
}

/// When activations make an episode.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct EpisodeRules {
    /// An activation joins an episode whose last came at most this long before it.
    pub gap_ms: i64,
    /// ... or at most this long, when a learned pair says it follows a member that late
    /// (a reservoir fills for minutes after its level transmitter sticks).
    pub late_ms: i64,
    /// An episode is named once it has this many points.
    pub min_points: usize,
}

impl Default for EpisodeRules {
    fn default() -> Self {
        EpisodeRules { gap_ms: 120_000, late_ms: 600_000, min_points: 3 }
    }
}

/// How much earlier than a candidate a point it explains may annunciate: RTUs and
/// gateways report at different rates, so a consequence can arrive a little first.
const REPORTING_SKEW_MS: i64 = 10_000;

/// Activations that belong together, in the order they came.
#[derive(Debug, Clone, PartialEq)]
pub struct Episode {
    pub members: Vec<Activation>,
}

impl Episode {
    pub fn start_ms(&self) -> i64 {
        self.members.first().map_or(0, |m| m.at_ms)
    }

    pub fn end_ms(&self) -> i64 {
        self.members.last().map_or(0, |m| m.at_ms)
    }

    /// Each point once, at its first activation (a chattering point is one step).
    pub fn first_outs(&self) -> Vec<&Activation> {
        let mut out: Vec<&Activation> = Vec::new();
        for m in &self.members {
            if !out.iter().any(|o| o.point == m.point) {
                out.push(m);
            }
        }
        out
    }

    /// The episode as a sequence for [`similar`].
    pub fn steps(&self) -> Vec<Step> {
        let start = self.start_ms();
        self.first_outs()
            .into_iter()
            .map(|m| Step { point: m.point.clone(), offset_s: (m.at_ms - start) as f64 / 1000.0 })
            .collect()
    }
}

/// What ties an activation to an episode: the plant, a learned pair, or both being
/// in one flood.
pub struct Context<'a> {
    pub plant: &'a PlantGraph,
    pub learned: &'a Learned,
}

impl Context<'_> {
    pub(crate) fn tied(&self, a: &Point, b: &Point) -> bool {
        a.asset_id.eq_ignore_ascii_case(&b.asset_id)
            || self.plant.related(&a.asset_id, &b.asset_id)
            || self.learned.get(a, b).is_some()
            || self.learned.get(b, a).is_some()
    }

    /// Whether `then`, `after_ms` after `first`, comes as the journal says it follows
    /// (within its learned lag's 90th percentile and half again).
    pub(crate) fn follows(&self, first: &Point, then: &Point, after_ms: i64) -> bool {
        self.learned.get(first, then).is_some_and(|p| after_ms as f64 <= p.lag_p90_s * 1500.0)
    }
}

/// Which of a few assets act on which, asked of the plant once per pair of assets
/// rather than once per pair of points (a flood's episode has far more points than
/// assets).
struct Reach {
    /// Each point's asset, as an index.
    asset: Vec<usize>,
    /// `down[i][j]`: asset `i` acts on asset `j`.
    down: Vec<Vec<bool>>,
}

impl Reach {
    fn of(points: &[&Activation], plant: &PlantGraph) -> Reach {
        let mut names: Vec<String> = Vec::new();
        let asset = points
            .iter()
            .map(|p| {
                let name = p.point.asset_id.to_lowercase();
                names.iter().position(|n| *n == name).unwrap_or_else(|| {
                    names.push(name);
                    names.len() - 1
                })
            })
            .collect();
        let down = names
            .iter()
            .enumerate()
            .map(|(i, from)| names.iter().enumerate().map(|(j, to)| i != j && plant.hops(from, to).is_some()).collect())
            .collect();
        Reach { asset, down }
    }

    /// Whether point `i`, at `i_ms`, accounts for point `j`, at `j_ms`: `j` came after
    /// it (give or take the reporting skew) on the same equipment or downstream of it,
    /// or the journal says `j` follows `i`. By the plant, and by the journal.
    fn explains(&self, (i, c): (usize, &Activation), (j, m): (usize, &Activation), learned: &Learned) -> (bool, bool) {
        let after = m.at_ms - c.at_ms >= -REPORTING_SKEW_MS;
        let (a, b) = (self.asset[i], self.asset[j]);
        let plant = after && (a == b && m.at_ms >= c.at_ms || a != b && self.down[a][b]);
        (plant, after && learned.get(&c.point, &m.point).is_some())
    }

    /// Whether point `j` is on other equipment upstream of point `i`'s.
    fn upstream(&self, i: usize, j: usize) -> bool {
        let (a, b) = (self.asset[i], self.asset[j]);
        a != b && self.down[b][a]
    }
}

/// Activations (in time order) into episodes. An activation joins the open group it
/// comes within the gap of and is tied to (the most recent such); otherwise it opens a
/// group of its own. Groups of fewer than `min_points` points are no episode: a lone
/// alarm, or background noise between upsets.
pub fn group(activations: &[Activation], rules: EpisodeRules, cx: &Context) -> Vec<Episode> {
    let mut open: Vec<Episode> = Vec::new();
    let mut done: Vec<Episode> = Vec::new();
    for a in activations {
        // Groups nothing can join any more.
        let (still, closed): (Vec<Episode>, Vec<Episode>) =
            open.into_iter().partition(|e| a.at_ms - e.end_ms() <= rules.gap_ms.max(rules.late_ms));
        done.extend(closed);
        open = still;
        let joins = |e: &&mut Episode| {
            let recent = a.at_ms - e.end_ms() <= rules.gap_ms;
            e.members
                .iter()
                .any(|m| (recent && cx.tied(&m.point, &a.point)) || cx.follows(&m.point, &a.point, a.at_ms - m.at_ms))
        };
        match open.iter_mut().rev().find(joins) {
            Some(e) => e.members.push(a.clone()),
            None => open.push(Episode { members: vec![a.clone()] }),
        }
    }
    done.extend(open);
    done.retain(|e| e.first_outs().len() >= rules.min_points);
    done.sort_by_key(Episode::start_ms);
    done
}

/// A candidate for the initiating alarm, with what ranks it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Candidate {
    pub point: Point,
    pub alarm_id: i64,
    pub score: f64,
    /// Its place in the first-out order (0: the first to annunciate).
    pub first_out: usize,
    /// Other points of the episode downstream of it in the plant's connections.
    pub downstream: Vec<Point>,
    /// Other points that follow it as learned pairs.
    pub followed_by: Vec<Point>,
    /// Other points upstream of it: it may be their consequence.
    pub upstream: Vec<Point>,
    /// The evidence in words, for the note and the HMI.
    pub evidence: Vec<String>,
}

/// The initiator's candidates, best first, and the points that follow from the best:
/// downstream of it or learned to follow it.
pub fn rank(episode: &Episode, cx: &Context) -> Vec<Candidate> {
    let firsts = episode.first_outs();
    let n = firsts.len();
    let others = (n.max(2) - 1) as f64;
    let start = episode.start_ms();
    let reach = Reach::of(&firsts, cx.plant);
    let mut candidates: Vec<Candidate> = firsts
        .iter()
        .enumerate()
        .map(|(order, c)| {
            let (mut downstream, mut followed_by, mut upstream) = (Vec::new(), Vec::new(), Vec::new());
            for (j, m) in firsts.iter().enumerate().filter(|(_, m)| m.point != c.point) {
                let (by_plant, by_journal) = reach.explains((order, c), (j, m), cx.learned);
                if by_plant {
                    downstream.push(m.point.clone());
                }
                if by_journal {
                    followed_by.push(m.point.clone());
                }
                if reach.upstream(order, j) {
                    upstream.push(m.point.clone());
                }
            }
            // The others it explains weigh most, the journal's word twice the plant's
            // (an alarm upstream of everything by chance explains nothing the journal
            // has seen follow it); first out breaks near ties; being downstream of
            // others counts against.
            let explained = (downstream.len() + 2 * followed_by.len()) as f64 / (3.0 * others);
            let score = 2.0 * explained + (1.0 - order as f64 / others).max(0.0) - upstream.len() as f64 / others;
            let mut evidence = vec![format!(
                "{} to annunciate ({:.1} s into the episode)",
                ordinal(order),
                (c.at_ms - start) as f64 / 1000.0
            )];
            if !downstream.is_empty() {
                evidence.push(format!(
                    "{} of the {} other points came after it on its equipment or downstream of it in the plant's \
                     connections",
                    downstream.len(),
                    n - 1
                ));
            }
            if !followed_by.is_empty() {
                evidence.push(format!(
                    "{} of the others follow it in the journal as learned consequential pairs",
                    followed_by.len()
                ));
            }
            if !upstream.is_empty() {
                evidence.push(format!("downstream of {} other points: it may be their consequence", upstream.len()));
            }
            Candidate {
                point: c.point.clone(),
                alarm_id: c.alarm_id,
                score,
                first_out: order,
                downstream,
                followed_by,
                upstream,
                evidence,
            }
        })
        .collect();
    candidates.sort_by(|a, b| b.score.total_cmp(&a.score).then(a.first_out.cmp(&b.first_out)));
    candidates
}

/// The points that follow from `initiator`: after it on its equipment or downstream of
/// it, or learned to follow it.
pub fn consequences(initiator: &Candidate) -> Vec<Point> {
    let mut out = initiator.downstream.clone();
    for p in &initiator.followed_by {
        if !out.contains(p) {
            out.push(p.clone());
        }
    }
    out
}

fn ordinal(i: usize) -> String {
    match i {
        0 => "first".into(),
        1 => "second".into(),
        2 => "third".into(),
        n => format!("{}th", n + 1),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn act(id: i64, asset: &str, code: &str, s: f64) -> Activation {
        Activation {
            alarm_id: id,
            point: Point { asset_id: asset.into(), sensor_id: None, code: code.into() },
            at_ms: (s * 1000.0) as i64,
        }
    }

    /// A power failure at the north switchboard trips its motor, whose pump's flow
    /// falls, whose header's pressure falls, the east booster's suction after it; a door
    /// alarm at another station comes in the middle; the next upset comes an hour later.
    /// Known by construction: one episode of five points, the switchboard its initiator,
    /// the four others its consequences; the door alarm in no episode.
    #[test]
    fn a_cascade_is_one_episode_led_by_its_initiator() {
        let plant = PlantGraph::from_edges([
            ("SWB-N", "MTR-001"),
            ("MTR-001", "PUMP-001"),
            ("PUMP-001", "VLV-001"),
            ("VLV-001", "PUMP-004"),
        ]);
        let learned = Learned::default();
        let cx = Context { plant: &plant, learned: &learned };
        // The pump's flow alarm annunciates before the switchboard's (a slow RTU): the
        // first out is not the initiator, the plant says who is.
        let acts = vec![
            act(1, "PUMP-001", "FLOW-LO", 0.0),
            act(2, "SWB-N", "POWER-FAIL", 1.5),
            act(3, "MTR-001", "TRIP", 2.0),
            act(4, "STN-S-KIOSK", "DOOR", 30.0),
            act(5, "VLV-001", "PRESS-LO", 40.0),
            act(6, "PUMP-004", "PRESS-SUC-LO", 95.0),
            act(7, "PUMP-001", "FLOW-LO", 100.0),
            act(8, "SWB-N", "POWER-FAIL", 3_700.0),
        ];
        let episodes = group(&acts, EpisodeRules::default(), &cx);
        assert_eq!(episodes.len(), 1, "{episodes:?}");
        let e = &episodes[0];
        let ids: Vec<i64> = e.members.iter().map(|m| m.alarm_id).collect();
        assert_eq!(ids, [1, 2, 3, 5, 6, 7], "the door alarm is not a member; the repeat is");
        assert_eq!(e.first_outs().len(), 5);
        let ranked = rank(e, &cx);
        assert_eq!(ranked[0].point.asset_id, "SWB-N", "{ranked:#?}");
        assert_eq!(ranked[0].downstream.len(), 4);
        assert!(ranked[0].evidence[0].starts_with("second to annunciate (1.5 s"), "{:?}", ranked[0].evidence);
        let mut following: Vec<String> = consequences(&ranked[0]).iter().map(|p| p.asset_id.clone()).collect();
        following.sort();
        assert_eq!(following, ["MTR-001", "PUMP-001", "PUMP-004", "VLV-001"]);
        assert!(ranked[1..].iter().all(|c| c.score < ranked[0].score));
    }
}
