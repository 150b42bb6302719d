//! Benchmarks printed by `twinops bench`. Figures, not pass/fail: targets live here and
//! in ARCHITECTURE.md, never in timed tests.

use std::time::Duration;

use anyhow::Context;

use crate::domain::Timestamp;
use crate::seed::{self, SeedOptions};
use crate::store::Store;

mod agent;
mod alarms;
mod docs;
mod episodes;
pub mod failover;
mod ingest;
mod opcua;
mod readings;
mod tools;

pub use agent::{AgentBenchArgs, agent};
pub use alarms::{AlarmsBenchArgs, alarms};
pub use docs::{DocsBenchArgs, docs};
pub use episodes::{EpisodesBenchArgs, episodes};
pub use failover::{FailoverBenchArgs, failover};
pub use ingest::{IngestBenchArgs, SparkplugBenchArgs, ingest, sparkplug};
pub use opcua::{OpcuaBenchArgs, opcua};
pub use readings::{ReadingsBenchArgs, readings};
pub use tools::{ToolsBenchArgs, tools};

/// CPU time this process has used so far, all its threads (Linux schedstat, in ns; zero
/// where the kernel does not keep it).
fn process_cpu() -> Duration {
    let threads = std::fs::read_dir("/proc/self/task").into_iter().flatten().flatten();
    let ns = threads
        .filter_map(|t| std::fs::read_to_string(t.path().join("schedstat")).ok())
        .filter_map(|s| s.split_whitespace().next()?.parse::<u64>().ok())
        .sum();
    Duration::from_nanos(ns)
}

/// Latency percentiles of a set of samples.
pub struct Percentiles {
    pub p50: Duration,
    pub p95: Duration,
    pub p99: Duration,
    pub max: Duration,
    pub mean: Duration,
    pub n: usize,
}

impl Percentiles {
    pub fn of(mut samples: Vec<Duration>) -> Percentiles {
        assert!(!samples.is_empty(), "no samples");
        samples.sort();
        let at = |q: f64| samples[((samples.len() as f64 * q).ceil() as usize).clamp(1, samples.len()) - 1];
        let total: Duration = samples.iter().sum();
        let (mean, n) = (total / samples.len() as u32, samples.len());
        Percentiles { p50: at(0.50), p95: at(0.95), p99: at(0.99), max: at(1.0), mean, n }
    }
}

/// The benchmark's database, seeded with the demo plant (one copy, `days` of readings)
/// the first time.
fn seeded_store(path: &std::path::Path, seed_dir: &std::path::Path, days: u32) -> anyhow::Result<Store> {
    let store = Store::open(path).with_context(|| format!("opening {}", path.display()))?;
    let seeded: i64 = store.read()?.query_row("SELECT count(*) FROM assets", [], |r| r.get(0))?;
    if seeded == 0 {
        seed::seed(&store, &SeedOptions { dir: seed_dir.to_path_buf(), scale: 1, end: Timestamp::now(), days })?;
    }
    Ok(store)
}

fn ms(d: Duration) -> String {
    format!("{:.3}", d.as_secs_f64() * 1000.0)
}

/// The process's peak resident set (VmHWM), in KiB; 0 where /proc has none.
fn peak_rss_kib() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines().find(|l| l.starts_with("VmHWM:")).and_then(|l| l.split_whitespace().nth(1)?.parse().ok())
        })
        .unwrap_or(0)
}
