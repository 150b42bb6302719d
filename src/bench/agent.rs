//! `bench agent`: the harness's own cost per step against the bare HTTP round trip.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context;
use serde_json::json;

use super::{Percentiles, ms, seeded_store};
use crate::agent::config::AgentLimits;
use crate::agent::openai::{OpenAi, ToolMode};
use crate::agent::{Agent, Model};
use crate::scripted::{Reply, ScriptedServer};

#[derive(clap::Args)]
pub struct AgentBenchArgs {
    /// Agent runs to time (5 steps each: 4 tool calls, then the answer).
    #[arg(long, default_value_t = 300)]
    runs: usize,
    /// Database to use; seeded with the demo plant if it holds none.
    #[arg(long, default_value = "data/bench-agent.db")]
    bench_db: PathBuf,
    /// Folder holding plant.toml and docs/.
    #[arg(long, default_value = "seed")]
    from: PathBuf,
}

/// The harness's own cost per step: a scripted model that answers at once over real
/// HTTP, real tools on the seeded twin, audit writes included. Beside it, in the same
/// run, the bare HTTP round trip to the same server, which any harness pays.
pub fn agent(args: &AgentBenchArgs) -> anyhow::Result<()> {
    let store = seeded_store(&args.bench_db, &args.from, 7)?;
    let rt = tokio::runtime::Builder::new_multi_thread().enable_all().build()?;
    rt.block_on(async {
        let script = vec![
            Reply::call("s1", "get_system_summary", json!({})),
            Reply::call("s2", "read_doc", json!({"citation": "arp-vibration.md#1"})),
            Reply::call("s3", "list_assets", json!({"kind": "motor", "limit": 5})),
            Reply::call("s4", "search_docs", json!({"query": "bearing vibration high"})),
            Reply::text("Done: the summary, the procedure, the motors and the search are in."),
        ];
        let steps = script.len();
        let server = ScriptedServer::cycling(script).await;
        let model: Arc<dyn Model> =
            Arc::new(OpenAi::new(&server.openai_url(), "scripted", None, ToolMode::Native, false));
        let agent = Agent::new(store, vec![model], AgentLimits::default());
        for _ in 0..5 {
            agent.ask("warm up", "bench", None).await?;
        }
        // A mid-run request body: a fair size (prompt, tools and three tool results).
        let replay = server.requests().get(3).cloned().context("the warm-up recorded requests")?;
        let bare = Percentiles::of(bare_round_trips(&replay, args.runs * steps).await?);
        let mut per_step = Vec::with_capacity(args.runs);
        for _ in 0..args.runs {
            let started = Instant::now();
            let report = agent.ask("Give me the plant status and the vibration procedure.", "bench", None).await?;
            anyhow::ensure!(report.model_calls as usize == steps, "the scripted run took {} steps", report.model_calls);
            per_step.push(started.elapsed() / steps as u32);
        }
        print_agent(args.runs, steps, &Percentiles::of(per_step), &bare);
        Ok(())
    })
}

/// The baseline, same run: the HTTP exchange alone, replaying `body` `count` times to a
/// server of the same code that answers at once.
async fn bare_round_trips(body: &serde_json::Value, count: usize) -> anyhow::Result<Vec<Duration>> {
    let server = ScriptedServer::cycling(vec![Reply::text("ok")]).await;
    let url = format!("{}/chat/completions", server.openai_url());
    let client = crate::agent::http::Http::new().client().clone();
    let mut samples = Vec::with_capacity(count);
    for _ in 0..count {
        let started = Instant::now();
        let r = client.post(&url).json(body).send().await?;
        anyhow::ensure!(r.status().is_success(), "baseline request failed: {}", r.status());
        r.bytes().await?;
        samples.push(started.elapsed());
    }
    Ok(samples)
}

fn print_agent(runs: usize, steps: usize, h: &Percentiles, b: &Percentiles) {
    println!(
        "twinops bench agent: {runs} runs of {steps} steps (4 tool calls + answer), scripted model over HTTP on loopback, ms"
    );
    let row = |label: &str, p50: String, p99: String, mean: String| println!("{label:<40} {p50:>8} {p99:>8} {mean:>8}");
    row("", "p50".into(), "p99".into(), "mean".into());
    row("harness, per step (HTTP + tools + audit)", ms(h.p50), ms(h.p99), ms(h.mean));
    row("bare HTTP round trip, same request", ms(b.p50), ms(b.p99), ms(b.mean));
    // A difference of medians (and of means); a difference of p99s means nothing.
    let own = (ms(h.p50.saturating_sub(b.p50)), ms(h.mean.saturating_sub(b.mean)));
    row("harness own cost per step (difference)", own.0, "-".into(), own.1);
    println!("harness per step / bare round trip: {:.2}x at p50", h.p50.as_secs_f64() / b.p50.as_secs_f64());
}
