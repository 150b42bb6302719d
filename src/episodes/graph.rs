//! The plant's connections as a graph, cause to effect: `feeds`, `powers`,
//! `supplies_air`, `controls` (plant files' connections) and a motor's `drives`. An
//! upset at an asset shows downstream of it; how far down is the evidence.

use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::Mutex;

use rusqlite::Connection;

/// How far downstream an upset is followed: further, everything in a pumping
/// district would be "connected".
pub const MAX_HOPS: usize = 4;

/// Assets (lower case) and the assets each acts on.
#[derive(Debug, Default)]
pub struct PlantGraph {
    down: HashMap<String, Vec<String>>,
    /// The hops already found, (from, to) in lower case: ranking an episode asks of
    /// every pair of its points, again as each point joins (a flood of a hundred points
    /// asks ten thousand times), and the answers do not change while the graph lives.
    known: Mutex<HashMap<(String, String), Option<usize>>>,
}

/// The most answers [`PlantGraph`] keeps; past it they are forgotten and found again.
const MAX_KNOWN: usize = 200_000;

impl PlantGraph {
    /// From edges cause first (`from`, `to`), any case.
    pub fn from_edges<'a>(edges: impl IntoIterator<Item = (&'a str, &'a str)>) -> PlantGraph {
        let mut down: HashMap<String, Vec<String>> = HashMap::new();
        for (from, to) in edges {
            let to = to.to_lowercase();
            let next = down.entry(from.to_lowercase()).or_default();
            if !next.contains(&to) {
                next.push(to);
            }
        }
        PlantGraph { down, known: Mutex::default() }
    }

    /// The twin's live connections and drives.
    pub fn read(conn: &Connection) -> rusqlite::Result<PlantGraph> {
        let mut stmt = conn.prepare_cached(
            "SELECT from_asset, to_asset FROM asset_connections WHERE retired_at IS NULL
             UNION ALL SELECT id, drives FROM assets WHERE drives IS NOT NULL AND retired_at IS NULL",
        )?;
        let edges: Vec<(String, String)> =
            stmt.query_map([], |r| Ok((r.get(0)?, r.get(1)?)))?.collect::<rusqlite::Result<_>>()?;
        Ok(PlantGraph::from_edges(edges.iter().map(|(a, b)| (a.as_str(), b.as_str()))))
    }

    /// Hops from `from` down to `to` (0 for the same asset), within [`MAX_HOPS`].
    pub fn hops(&self, from: &str, to: &str) -> Option<usize> {
        let key = (from.to_lowercase(), to.to_lowercase());
        if key.0 == key.1 {
            return Some(0);
        }
        let mut known = self.known.lock().expect("plant graph answers");
        if let Some(hops) = known.get(&key) {
            return *hops;
        }
        let hops = self.search(&key.0, &key.1);
        if known.len() >= MAX_KNOWN {
            known.clear();
        }
        known.insert(key, hops);
        hops
    }

    /// Breadth first from `from` down to `to`, both lower case.
    fn search(&self, from: &str, to: &str) -> Option<usize> {
        let mut seen = HashSet::from([from]);
        let mut queue = VecDeque::from([(from, 0usize)]);
        while let Some((at, depth)) = queue.pop_front() {
            if depth == MAX_HOPS {
                continue;
            }
            for next in self.down.get(at).into_iter().flatten() {
                if next == to {
                    return Some(depth + 1);
                }
                if seen.insert(next.as_str()) {
                    queue.push_back((next.as_str(), depth + 1));
                }
            }
        }
        None
    }

    /// Whether one of the two acts on the other, within [`MAX_HOPS`].
    pub fn related(&self, a: &str, b: &str) -> bool {
        self.hops(a, b).is_some() || self.hops(b, a).is_some()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hops_follow_the_connections_downstream_only() {
        let g = PlantGraph::from_edges([("SWB-N", "MTR-001"), ("MTR-001", "PUMP-001"), ("PUMP-001", "VLV-001")]);
        assert_eq!(g.hops("swb-n", "VLV-001"), Some(3));
        assert_eq!(g.hops("VLV-001", "SWB-N"), None, "not upstream");
        assert!(g.related("VLV-001", "SWB-N"));
        assert_eq!(g.hops("PUMP-001", "PUMP-001"), Some(0));
        assert!(!g.related("PUMP-001", "PUMP-009"));
    }
}
