//! Benchmarks printed by `twinops bench`. Figures, not pass/fail: targets live here and
//! in ARCHITECTURE.md, never in timed tests.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::Context;
use serde_json::{Value, json};

use crate::approvals::{Approvals, Proposer};
use crate::domain::Timestamp;
use crate::rag::{DocIndex, SourceDoc, index_docs};
use crate::seed::{self, Rng, SeedOptions, copy_asset_id};
use crate::store::Store;
use crate::tools::{self, ToolContext};

#[derive(clap::Args)]
pub struct IngestBenchArgs {
    /// Messages to publish (one reading each) for each of the two measurements.
    #[arg(long, default_value_t = 20_000)]
    messages: usize,
    /// Measurements of each kind, alternating; the figures are their medians.
    #[arg(long, default_value_t = 5)]
    rounds: usize,
    /// An external broker (e.g. mqtt://127.0.0.1:1883 for Mosquitto); default: the
    /// embedded one on a free loopback port.
    #[arg(long)]
    broker: Option<String>,
    /// Ingest's `mqtt.batch_ms` (how long a first message waits for company before its
    /// commit starts); default: the daemon's for that broker (0 embedded, else 1).
    #[arg(long)]
    batch_ms: Option<u64>,
    /// Database to use; seeded with one day of the demo plant if it holds none.
    #[arg(long, default_value = "data/bench-ingest.db")]
    bench_db: PathBuf,
    #[arg(long, default_value = "seed")]
    from: PathBuf,
}

/// End-to-end ingest throughput (published, committed and acknowledged) beside what a
/// bare QoS 1 subscriber gets from the same broker in the same run. Rounds alternate
/// the two so that a noisy moment of the machine does not land on one side only.
pub fn ingest(args: &IngestBenchArgs) -> anyhow::Result<()> {
    use crate::sim::{connect, publish_all};
    use rumqttc::{Event, Packet, QoS};

    anyhow::ensure!(args.rounds > 0 && args.messages > 0, "--rounds and --messages must be at least 1");
    let store = seeded_store(&args.bench_db, &args.from, 1)?;
    let rt = tokio::runtime::Builder::new_multi_thread().enable_all().build()?;
    rt.block_on(async {
        let tag = format!("bench{}", Timestamp::now().unix());
        let cfg = ingest_config(&tag, args.broker.as_deref(), args.batch_ms).await?;
        let (url, batch_ms) = (cfg.url.clone(), cfg.batch_wait().as_millis());
        let n = args.messages;
        let base_ts = Timestamp::now().unix() + 86_400 * 365;
        // One reading per message; each round its own times, so every reading is new.
        let messages = |round: usize| -> Vec<Vec<u8>> {
            (0..n)
                .map(|i| {
                    let t = Timestamp::from_unix(base_ts + (round * n + i) as i64).to_rfc3339();
                    json!({"type": "reading", "sensor_id": "PUMP-001.FLOW", "time": t, "value": 400.0 + (i % 50) as f64}).to_string().into_bytes()
                })
                .collect()
        };
        let publish = |topic: String, id: String, msgs: Vec<Vec<u8>>| {
            let url = url.clone();
            tokio::spawn(async move { publish_all(&url, &id, &topic, msgs).await })
        };

        // Baseline: a bare QoS 1 subscriber that acks on receipt and does nothing else.
        let (sub, mut sub_loop) = connect(&url, &format!("{tag}-bare-sub"))?;
        sub.subscribe(format!("{tag}/bare"), QoS::AtLeastOnce).await?;
        loop {
            if let Event::Incoming(Packet::SubAck(_)) = sub_loop.poll().await? {
                break;
            }
        }
        // twinops: the ingest pipeline, committing in batches and acking after commit.
        let (stop_tx, stop) = tokio::sync::watch::channel(false);
        // The readings are a year ahead so that none collides with the seeded ones.
        let policy = crate::ingest::IngestPolicy { max_ahead_s: None, ..Default::default() };
        let mut ingest = crate::ingest::mqtt::start(store.writer().clone(), cfg, policy, std::sync::Arc::new(tokio::sync::Notify::new()), stop)?;
        ingest.broker_up.wait_for(|up| *up).await?; // connected and subscribed
        let db = store.read()?;
        let key: i64 = db.query_row("SELECT key FROM sensors WHERE id = 'PUMP-001.FLOW'", [], |r| r.get(0))?;
        // Readings from the future are an interrupted run's; they would count as ours.
        let clear = move |c: &rusqlite::Connection| {
            c.execute("DELETE FROM readings WHERE sensor_key = ?1 AND ts > ?2", rusqlite::params![key, (base_ts - 86_400) * 1000])?;
            c.execute("DELETE FROM readings_hourly WHERE sensor_key = ?1 AND hour > ?2", rusqlite::params![key, base_ts - 86_400])?;
            Ok::<_, crate::store::StoreError>(())
        };
        store.writer().call(clear)?;

        let (mut bare, mut ours) = (Vec::new(), Vec::new());
        let (mut bare_cpu, mut ours_cpu) = (Duration::ZERO, Duration::ZERO);
        let batches_before = crate::metrics::totals("twinops_ingest_batch_messages");
        let commits_before = crate::metrics::totals("twinops_ingest_commit_seconds");
        let writer_before = crate::metrics::counter("twinops_store_writer_busy_seconds_total");
        for round in 0..args.rounds {
            // The same payloads for both, each on its own topic.
            let msgs = messages(round);
            let bare_msgs = msgs.clone();
            let (started, cpu) = (Instant::now(), process_cpu());
            let publishing = publish(format!("{tag}/bare"), format!("{tag}-bare-pub"), bare_msgs);
            let mut received = 0;
            while received < n {
                if let Event::Incoming(Packet::Publish(_)) = sub_loop.poll().await? {
                    received += 1;
                }
            }
            bare.push(started.elapsed());
            bare_cpu += process_cpu().saturating_sub(cpu);
            publishing.await??;

            let (started, cpu) = (Instant::now(), process_cpu());
            let publishing = publish(format!("{tag}/ingest/telemetry"), format!("{tag}-pub"), msgs);
            let target = ((round + 1) * n) as u64;
            let acked = tokio::time::timeout(Duration::from_secs(300), ingest.acked.wait_for(|acked| *acked >= target)).await.is_ok();
            anyhow::ensure!(acked, "ingest stalled at {} of {target} acks", *ingest.acked.borrow());
            ours.push(started.elapsed());
            ours_cpu += process_cpu().saturating_sub(cpu);
            publishing.await??;
            let stored: i64 = db.query_row(
                "SELECT count(*) FROM readings WHERE sensor_key = ?1 AND ts >= ?2 AND ts < ?3",
                rusqlite::params![key, base_ts * 1000, (base_ts + target as i64) * 1000],
                |r| r.get(0),
            )?;
            anyhow::ensure!(stored as u64 == target, "{stored} readings stored after {target} acks");
        }
        let _ = stop_tx.send(true);
        let _ = ingest.task.await;
        // Leave the database as it was for the next run.
        store.writer().call(clear)?;

        let rate = |d: &Duration| n as f64 / d.as_secs_f64();
        let rates = |ds: &[Duration]| ds.iter().map(|d| format!("{:.0}", rate(d))).collect::<Vec<_>>().join(" ");
        let (bare_med, ours_med) = (Percentiles::of(bare.clone()).p50, Percentiles::of(ours.clone()).p50);
        println!(
            "twinops bench ingest: {n} QoS 1 messages (one reading each) per round, {} rounds, through {}, batch_ms {batch_ms}",
            args.rounds,
            if args.broker.is_some() { url.as_str() } else { "the embedded broker" }
        );
        println!("{:<50} {:>8} msg/s  (rounds: {})", "bare subscriber (acks on receipt), median", format!("{:.0}", rate(&bare_med)), rates(&bare));
        println!("{:<50} {:>8} msg/s  (rounds: {})", "twinops ingest (committed, then acked), median", format!("{:.0}", rate(&ours_med)), rates(&ours));
        let (batches, messages) = crate::metrics::totals("twinops_ingest_batch_messages");
        let (commits, commit_secs) = crate::metrics::totals("twinops_ingest_commit_seconds");
        let (batches, messages) = (batches - batches_before.0, messages - batches_before.1);
        let (commits, commit_secs) = (commits - commits_before.0, commit_secs - commits_before.1);
        println!(
            "twinops batches: {batches}, {:.0} messages each on average, {:.2} ms from queueing to commit",
            messages / batches.max(1) as f64,
            1000.0 * commit_secs / commits.max(1) as f64
        );
        // How much of the measured time the writer was in a transaction: well under 100%
        // means the rest of the round trip (the broker's) sets the pace.
        let writer_secs = crate::metrics::counter("twinops_store_writer_busy_seconds_total") - writer_before;
        let measured: f64 = ours.iter().map(Duration::as_secs_f64).sum();
        println!("twinops writer: in a transaction {:.0}% of the measured time", 100.0 * writer_secs / measured);
        let per_message = |cpu: Duration| format!("{:.1} µs", cpu.as_secs_f64() * 1e6 / (n * args.rounds) as f64);
        println!(
            "CPU per message, this process (publisher, subscriber{}): bare {}, twinops {}",
            if args.broker.is_some() { "" } else { ", broker" },
            per_message(bare_cpu),
            per_message(ours_cpu)
        );
        println!("twinops / bare: {:.0}% (medians; goal >= 80%)", 100.0 * rate(&ours_med) / rate(&bare_med));
        Ok::<_, anyhow::Error>(())
    })
}

/// Ingest's MQTT settings for a benchmark: `broker`, or the embedded one started on a
/// free loopback port; topics under `{tag}/ingest/`.
async fn ingest_config(
    tag: &str,
    broker: Option<&str>,
    batch_ms: Option<u64>,
) -> anyhow::Result<crate::config::MqttConfig> {
    let mut cfg = crate::config::MqttConfig {
        url: broker.unwrap_or_default().to_string(),
        client_id: format!("{tag}-twinops"),
        topics: vec![format!("{tag}/ingest/#")],
        batch_ms,
        ..Default::default()
    };
    if broker.is_none() {
        let port = std::net::TcpListener::bind("127.0.0.1:0")?.local_addr()?.port();
        let listen: std::net::SocketAddr = format!("127.0.0.1:{port}").parse()?;
        crate::broker::start(listen)?;
        tokio::time::sleep(Duration::from_millis(300)).await;
        cfg.use_embedded(listen);
    }
    Ok(cfg)
}

#[derive(clap::Args)]
pub struct SparkplugBenchArgs {
    /// DDATA messages per round (and as many JSON messages of the same readings).
    #[arg(long, default_value_t = 2_000)]
    messages: usize,
    /// Metrics per message.
    #[arg(long, default_value_t = 100)]
    metrics: usize,
    /// Rounds of each, alternating; the figures are their medians.
    #[arg(long, default_value_t = 3)]
    rounds: usize,
    /// An external broker (e.g. mqtt://127.0.0.1:1883 for Mosquitto); default: the
    /// embedded one on a free loopback port.
    #[arg(long)]
    broker: Option<String>,
    #[arg(long)]
    batch_ms: Option<u64>,
    /// Database to use; emptied of this benchmark's readings before and after.
    #[arg(long, default_value = "data/bench-sparkplug.db")]
    bench_db: PathBuf,
}

/// Sparkplug B ingest end to end (published at QoS 1, decoded, resolved by alias,
/// committed, acknowledged) beside the JSON path carrying the same readings in the same
/// run: DDATA messages of `metrics` metrics against JSON batches of as many readings.
pub fn sparkplug(args: &SparkplugBenchArgs) -> anyhow::Result<()> {
    use crate::sim::publish_all;
    use crate::sparkplug::edge::{EdgeNode, MetricSpec};

    anyhow::ensure!(
        args.rounds > 0 && args.messages > 0 && args.metrics > 0,
        "--rounds, --messages and --metrics must be at least 1"
    );
    let store = Store::open(&args.bench_db).with_context(|| format!("opening {}", args.bench_db.display()))?;
    let rt = tokio::runtime::Builder::new_multi_thread().enable_all().build()?;
    rt.block_on(async {
        let tag = format!("spbench{}", Timestamp::now().unix());
        let cfg = ingest_config(&tag, args.broker.as_deref(), args.batch_ms).await?;
        let url = cfg.url.clone();
        let sparkplug = crate::sparkplug::SparkplugConfig { enabled: true, groups: vec![tag.clone()], host_id: tag.clone(), primary_host: false, ..Default::default() };
        let policy = crate::ingest::IngestPolicy { max_ahead_s: None, sparkplug: Some(std::sync::Arc::new(sparkplug)), ..Default::default() };
        let (stop_tx, stop) = tokio::sync::watch::channel(false);
        let mut ingest = crate::ingest::mqtt::start(store.writer().clone(), cfg, policy, std::sync::Arc::new(tokio::sync::Notify::new()), stop)?;
        ingest.broker_up.wait_for(|up| *up).await?;

        // The births register device BENCH's metrics m000.. as sensors BENCH/m000...
        let (n, m) = (args.messages, args.metrics);
        let mut edge = EdgeNode::new(&tag, "gw", 0);
        let now_ms = Timestamp::now().unix() as u64 * 1000;
        let specs: Vec<MetricSpec> = (0..m)
            .map(|i| MetricSpec { name: format!("m{i:03}"), alias: i as u64, value: 0.0, unit: "bar".into(), limits: [None; 4] })
            .collect();
        let births = vec![edge.node_birth(now_ms), edge.device_birth("BENCH", &specs, now_ms)];
        for (topic, payload) in births {
            publish_all(&url, &format!("{tag}-birth"), &topic, vec![payload]).await?;
        }
        let acked = tokio::time::timeout(Duration::from_secs(60), ingest.acked.wait_for(|a| *a >= 2)).await.is_ok();
        anyhow::ensure!(acked, "the births were not taken");
        let db = store.read()?;
        let keys: i64 = db.query_row("SELECT count(*) FROM sensors WHERE id LIKE 'BENCH/m%'", [], |r| r.get(0))?;
        anyhow::ensure!(keys as usize >= m, "the births registered {keys} of {m} sensors");
        // Every reading of the run is new: a second of its own, a year ahead.
        let base = Timestamp::now().unix() + 86_400 * 365;
        let clear = move |c: &rusqlite::Connection| {
            c.execute("DELETE FROM readings WHERE ts > ?1", [(base - 86_400) * 1000])?;
            c.execute("DELETE FROM readings_hourly WHERE hour > ?1", [base - 86_400])?;
            Ok::<_, crate::store::StoreError>(())
        };
        store.writer().call(clear)?;

        let (mut json_t, mut sp_t) = (Vec::new(), Vec::new());
        let (mut json_cpu, mut sp_cpu) = (Duration::ZERO, Duration::ZERO);
        let mut expected_acks = 2u64;
        let mut stored_expected = 0i64;
        for round in 0..args.rounds {
            // JSON: the same readings as batches of `m` events.
            let second = |i: usize, path: usize| base + ((round * 2 + path) * n + i) as i64;
            let json_msgs: Vec<Vec<u8>> = (0..n)
                .map(|i| {
                    let t = Timestamp::from_unix(second(i, 0)).to_rfc3339();
                    let events: Vec<Value> = (0..m).map(|j| json!({"type": "reading", "sensor_id": format!("BENCH/m{j:03}"), "time": t, "value": (i + j) as f64})).collect();
                    json!({"events": events}).to_string().into_bytes()
                })
                .collect();
            let sp_msgs: Vec<Vec<u8>> = (0..n)
                .map(|i| {
                    let ms = second(i, 1) as u64 * 1000;
                    let values: Vec<(u64, f64, u64)> = (0..m).map(|j| (j as u64, (i + j) as f64, ms)).collect();
                    edge.device_data("BENCH", &values, ms).1
                })
                .collect();
            let json_bytes: usize = json_msgs.iter().map(Vec::len).sum();
            let sp_bytes: usize = sp_msgs.iter().map(Vec::len).sum();
            for (path, msgs) in [(0, json_msgs), (1, sp_msgs)] {
                let topic = if path == 0 { format!("{tag}/ingest/telemetry") } else { format!("spBv1.0/{tag}/DDATA/gw/BENCH") };
                let (started, cpu) = (Instant::now(), process_cpu());
                let publishing = { let url = url.clone(); let id = format!("{tag}-pub{path}"); tokio::spawn(async move { publish_all(&url, &id, &topic, msgs).await }) };
                expected_acks += n as u64;
                let done = tokio::time::timeout(Duration::from_secs(600), ingest.acked.wait_for(|a| *a >= expected_acks)).await.is_ok();
                anyhow::ensure!(done, "ingest stalled at {} of {expected_acks} acks", *ingest.acked.borrow());
                let (elapsed, used) = (started.elapsed(), process_cpu().saturating_sub(cpu));
                publishing.await??;
                if path == 0 { json_t.push(elapsed); json_cpu += used; } else { sp_t.push(elapsed); sp_cpu += used; }
            }
            stored_expected += (2 * n * m) as i64;
            let stored: i64 = db.query_row("SELECT count(*) FROM readings WHERE ts >= ?1", [base * 1000], |r| r.get(0))?;
            anyhow::ensure!(stored == stored_expected, "{stored} readings stored, {stored_expected} sent");
            if round == 0 {
                println!(
                    "twinops bench sparkplug: {n} messages of {m} readings per round and path, {} rounds, through {}; payloads: JSON {:.0} B, Sparkplug {:.0} B per message",
                    args.rounds,
                    if args.broker.is_some() { url.as_str() } else { "the embedded broker" },
                    json_bytes as f64 / n as f64,
                    sp_bytes as f64 / n as f64
                );
            }
        }
        let _ = stop_tx.send(true);
        let _ = ingest.task.await;
        store.writer().call(clear)?;

        let readings = (n * m) as f64;
        let rate = |d: Duration| readings / d.as_secs_f64();
        let rounds = |ds: &[Duration]| ds.iter().map(|d| format!("{:.0}", rate(*d))).collect::<Vec<_>>().join(" ");
        let (json_med, sp_med) = (Percentiles::of(json_t.clone()).p50, Percentiles::of(sp_t.clone()).p50);
        let per_reading = |cpu: Duration| format!("{:.2} µs", cpu.as_secs_f64() * 1e6 / (readings * args.rounds as f64));
        println!("{:<44} {:>10} readings/s  (rounds: {})", "JSON telemetry (committed, then acked), median", format!("{:.0}", rate(json_med)), rounds(&json_t));
        println!("{:<44} {:>10} readings/s  (rounds: {})", "Sparkplug DDATA (committed, then acked), median", format!("{:.0}", rate(sp_med)), rounds(&sp_t));
        println!("CPU per reading, this process: JSON {}, Sparkplug {}", per_reading(json_cpu), per_reading(sp_cpu));
        println!("Sparkplug / JSON: {:.0}% (medians; goal >= 300,000 readings/s against Mosquitto)", 100.0 * rate(sp_med) / rate(json_med));
        Ok::<_, anyhow::Error>(())
    })
}

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
    use crate::agent::openai::{OpenAi, ToolMode};
    use crate::agent::{Agent, Model};
    use crate::config::AgentLimits;
    use crate::scripted::{Reply, ScriptedServer};
    use std::sync::Arc;

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
        let steps_per_run = script.len();
        let server = ScriptedServer::cycling(script).await;
        let model: Arc<dyn Model> = Arc::new(OpenAi::new(&server.openai_url(), "scripted", None, ToolMode::Native, false));
        let agent = Agent::new(store.clone(), vec![model], AgentLimits::default());

        for _ in 0..5 {
            agent.ask("warm up", "bench", None).await?;
        }
        // Baseline, same run: the HTTP exchange alone, replaying a mid-run request body
        // (a fair size: prompt, tools and three tool results) to a server of the same
        // code that answers at once.
        let replay = server.requests().get(3).cloned().context("the warm-up recorded requests")?;
        let baseline_server = ScriptedServer::cycling(vec![Reply::text("ok")]).await;
        let baseline_url = format!("{}/chat/completions", baseline_server.openai_url());
        let client = crate::agent::http::Http::new().client().clone();
        let mut bare = Vec::new();
        for _ in 0..args.runs * steps_per_run {
            let started = Instant::now();
            let r = client.post(&baseline_url).json(&replay).send().await?;
            anyhow::ensure!(r.status().is_success(), "baseline request failed: {}", r.status());
            r.bytes().await?;
            bare.push(started.elapsed());
        }

        let mut per_step = Vec::with_capacity(args.runs);
        for _ in 0..args.runs {
            let started = Instant::now();
            let report = agent.ask("Give me the plant status and the vibration procedure.", "bench", None).await?;
            anyhow::ensure!(report.model_calls as usize == steps_per_run, "the scripted run took {} steps", report.model_calls);
            per_step.push(started.elapsed() / steps_per_run as u32);
        }
        let h = Percentiles::of(per_step);
        let b = Percentiles::of(bare);
        println!("twinops bench agent: {} runs of {steps_per_run} steps (4 tool calls + answer), scripted model over HTTP on loopback, ms", args.runs);
        println!("{:<40} {:>8} {:>8} {:>8}", "", "p50", "p99", "mean");
        println!("{:<40} {:>8} {:>8} {:>8}", "harness, per step (HTTP + tools + audit)", ms(h.p50), ms(h.p99), ms(h.mean));
        println!("{:<40} {:>8} {:>8} {:>8}", "bare HTTP round trip, same request", ms(b.p50), ms(b.p99), ms(b.mean));
        // A difference of medians (and of means); a difference of p99s means nothing.
        println!(
            "{:<40} {:>8} {:>8} {:>8}",
            "harness own cost per step (difference)",
            ms(h.p50.saturating_sub(b.p50)),
            "-",
            ms(h.mean.saturating_sub(b.mean))
        );
        println!("harness per step / bare round trip: {:.2}x at p50", h.p50.as_secs_f64() / b.p50.as_secs_f64());
        Ok::<_, anyhow::Error>(())
    })
}

#[derive(clap::Args)]
pub struct ToolsBenchArgs {
    /// Copies of the demo plant (100 = about 1,800 assets, 6,000 sensors, 60 million readings).
    #[arg(long, default_value_t = 100)]
    scale: u32,
    /// Database to use; seeded at --scale if it holds no plant yet, reused otherwise.
    #[arg(long, default_value = "data/bench-tools.db")]
    bench_db: PathBuf,
    /// Folder holding plant.toml and docs/.
    #[arg(long, default_value = "seed")]
    from: PathBuf,
    /// Calls per tool.
    #[arg(long, default_value_t = 1000)]
    iterations: usize,
    /// Days of readings to seed (a large utility's scale, --scale 1000, with --days 1).
    #[arg(long, default_value_t = 7)]
    days: u32,
    /// Documentation chunks to search over; synthetic work reports make up the difference.
    #[arg(long, default_value_t = 10_000)]
    chunks: usize,
}

/// Latency percentiles of a set of samples.
pub struct Percentiles {
    pub p50: Duration,
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
        Percentiles { p50: at(0.50), p99: at(0.99), max: at(1.0), mean: total / samples.len() as u32, n: samples.len() }
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

pub fn tools(args: &ToolsBenchArgs) -> anyhow::Result<()> {
    let store = Store::open(&args.bench_db).with_context(|| format!("opening {}", args.bench_db.display()))?;
    let end: i64 = {
        let db = store.read()?;
        db.query_row("SELECT coalesce(max(ts), 0) / 1000 FROM readings WHERE sensor_key = 1", [], |r| r.get(0))?
    };
    let end = if end == 0 {
        let started = Instant::now();
        let end = Timestamp::now().floor_minute();
        eprintln!("seeding {} at scale {} (once; later runs reuse it)...", args.bench_db.display(), args.scale);
        let opts = SeedOptions { dir: args.from.clone(), scale: args.scale, end, days: args.days };
        let r = seed::seed(&store, &opts)?;
        eprintln!(
            "seeded {} assets, {} sensors, {} readings, {} alarms in {:.0} s",
            r.assets,
            r.sensors,
            r.readings,
            r.alarms,
            started.elapsed().as_secs_f64()
        );
        end
    } else {
        Timestamp::from_unix(end)
    };
    let have: i64 = store.read()?.query_row("SELECT count(*) FROM chunks", [], |r| r.get(0))?;
    if (have as usize) < args.chunks {
        let docs = synthetic_reports(args.chunks - have as usize);
        index_docs(&store, docs, Timestamp::now())?;
    }

    let db = store.read()?;
    let (assets, sensors, readings_est, chunks): (i64, i64, i64, i64) = db.query_row(
        "SELECT (SELECT count(*) FROM assets), (SELECT count(*) FROM sensors),
                (SELECT count(*) FROM sensors) * 7 * 1440, (SELECT count(*) FROM chunks)",
        [],
        |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?)),
    )?;
    let copies = (assets / 18).max(1) as u32;
    println!(
        "twinops bench tools: {assets} assets, {sensors} sensors, ~{readings_est} readings, {chunks} doc chunks; \
         {} calls per tool; latency of ToolDef::call (query + JSON rendering), ms",
        args.iterations
    );
    println!("{:<22} {:>8} {:>8} {:>8} {:>8}", "tool", "p50", "p99", "max", "mean");

    let approvals = Approvals::new(store.writer().clone());
    let docs = DocIndex::new();
    let started = Instant::now();
    docs.search(&db, "warm up", 1)?;
    println!(
        "{:<22} {:>8}  (search index built from {chunks} chunks, once per change)",
        "search index build",
        ms(started.elapsed())
    );
    let ctx =
        ToolContext { db: &db, docs: &docs, approvals: &approvals, now: end, caller: Proposer::User("bench".into()) };
    let mut rng = Rng::from_label("bench");
    let mut pick_asset =
        |base: &[&str]| copy_asset_id(base[rng.below(base.len() as u64) as usize], rng.below(copies as u64) as u32);
    let pumps = ["PUMP-001", "PUMP-004", "PUMP-007", "MTR-007", "VLV-002", "RES-001"];
    let tags = ["VIB-DE", "BRG-TEMP-DE", "PRESS-SUC", "FLOW"];
    let mut cases: Vec<(&str, Vec<Value>)> = Vec::new();
    let n = args.iterations;
    cases.push(("get_system_summary", vec![json!({})]));
    cases.push((
        "list_assets",
        (0..n)
            .map(|i| match i % 3 {
                0 => json!({"kind": "centrifugal_pump", "offset": (i * 7) % 500}),
                1 => json!({"station_id": "STN-S", "status": "running"}),
                _ => json!({"text": "booster", "limit": 50}),
            })
            .collect(),
    ));
    cases.push(("get_asset_details", (0..n).map(|_| json!({"asset_id": pick_asset(&pumps)})).collect()));
    cases.push((
        "list_alarms",
        (0..n)
            .map(|i| match i % 3 {
                0 => json!({"asset_id": pick_asset(&pumps), "last_hours": 168}),
                1 => json!({"state": "active", "min_severity": "medium"}),
                _ => json!({"last_hours": 24, "limit": 50}),
            })
            .collect(),
    ));
    cases.push((
        "get_sensor_history",
        (0..n)
            .map(|i| {
                let asset = pick_asset(&["PUMP-001", "PUMP-004", "PUMP-007"]);
                json!({"sensor_id": format!("{asset}.{}", tags[i % tags.len()]), "hours": 24})
            })
            .collect(),
    ));
    cases.push((
        "get_sensor_history 7d",
        (0..n)
            .map(|i| {
                let asset = pick_asset(&["PUMP-001", "PUMP-004", "PUMP-007"]);
                json!({"sensor_id": format!("{asset}.{}", tags[i % tags.len()]), "hours": 168, "points": 48})
            })
            .collect(),
    ));
    cases.push(("search_docs", QUERIES.iter().map(|q| json!({"query": q})).collect()));
    cases.push(("read_doc", (0..n).map(|i| json!({"citation": format!("arp-vibration.md#{}", i % 3)})).collect()));

    for (label, arg_sets) in &cases {
        let name = label.split_whitespace().next().expect("label");
        let tool = tools::find(name).expect("benchmarked tools exist");
        // One untimed pass over the argument sets first: the figures are for a warm
        // daemon, not for the first touch of each page of a 2 GB file.
        for args in arg_sets {
            tool.call(&ctx, args.clone());
        }
        let mut samples = Vec::with_capacity(n);
        for i in 0..n {
            let args = arg_sets[i % arg_sets.len()].clone();
            let started = Instant::now();
            let out = tool.call(&ctx, args);
            samples.push(started.elapsed());
            anyhow::ensure!(!out.is_error, "{label} failed during the benchmark: {}", out.content);
        }
        let p = Percentiles::of(samples);
        println!("{:<22} {:>8} {:>8} {:>8} {:>8}", label, ms(p.p50), ms(p.p99), ms(p.max), ms(p.mean));
    }

    // Proposals write: each is a durable commit (synchronous=FULL), so they are timed
    // apart from the reads, on fewer calls.
    let tool = tools::find("propose_work_order").expect("exists");
    let mut samples = Vec::new();
    let run_tag = Timestamp::now().unix();
    for i in 0..n.min(200) {
        let args = json!({
            "asset_id": copy_asset_id("PUMP-007", (i as u32) % copies),
            "action": "vibration_analysis", "priority": "normal",
            "title": format!("Bench proposal {run_tag}-{i}"),
            "justification": "Benchmark proposal: drive-end vibration trending up over the week.",
        });
        let started = Instant::now();
        let out = tool.call(&ctx, args);
        samples.push(started.elapsed());
        anyhow::ensure!(!out.is_error, "propose_work_order failed: {}", out.content);
    }
    let p = Percentiles::of(samples);
    println!(
        "{:<22} {:>8} {:>8} {:>8} {:>8}  (write + fsync; repeats are idempotent)",
        "propose_work_order",
        ms(p.p50),
        ms(p.p99),
        ms(p.max),
        ms(p.mean)
    );
    Ok(())
}

/// Questions the way a model asks them.
const QUERIES: &[&str] = &[
    "What is the alarm response procedure for VIB-HI on a centrifugal pump?",
    "bearing temperature rising together with vibration on the drive end",
    "how to clean a blocked suction strainer on a booster pump",
    "symptoms of cavitation: low suction pressure and unsteady discharge pressure",
    "lockout tagout steps before replacing pump bearings",
    "who should I call out of hours for a motor winding temperature alarm",
    "reservoir level falling quickly, could it be a burst main?",
    "ISO 10816-3 zone boundaries for medium machines on flexible supports",
    "motor current high but flow is normal, what could cause it",
    "how much grease for the drive end bearing and how often",
    "valve position does not follow the setpoint, actuator torque trip",
    "previous repairs of mechanical seal leakage on the south booster pumps",
    "PRESS-SUC-LO suction pressure low time to respond",
    "what does zone C mean for long term operation of a pump",
    "steps to return a pump to service after bearing replacement and alignment",
    "discharge pressure high with the reservoir inlet valve closed",
];

/// Synthetic work reports, one chunk each, written like a technician's notes, so the
/// search runs over a realistic vocabulary at realistic size.
fn synthetic_reports(count: usize) -> Vec<SourceDoc> {
    const FINDINGS: &[&str] = &[
        "Drive-end bearing outer race shows spalling; grease darkened and dry.",
        "Suction strainer partly blocked with leaves and silt; differential pressure high.",
        "Coupling elements worn; misalignment of 0.12 mm measured at the spacer.",
        "Mechanical seal weeping at the gland; faces scored.",
        "Impeller vanes pitted near the eye, consistent with cavitation.",
        "Motor terminal box damp; insulation resistance low on phase W.",
        "Valve actuator torque switch tripping at 70% open; debris on the disc.",
        "Vibration spectrum shows running-speed peak, imbalance suspected.",
        "Non-return valve flap sticking partly open; reverse flow on stop.",
        "Level transmitter reading 0.08 m high against dip tape.",
    ];
    const ACTIONS: &[&str] = &[
        "Replaced both bearings, realigned the coupling and recorded baseline vibration.",
        "Cleaned the strainer and checked suction valve fully open; pump returned to duty.",
        "Replaced coupling elements and realigned to 0.03 mm.",
        "Fitted new mechanical seal; ran for 30 minutes without leakage.",
        "Recommended impeller replacement at next outage; reduced duty flow meanwhile.",
        "Dried terminal box, resealed gland plate, retested at 1 kV.",
        "Cleared debris, stroked valve 0-100-0%, recalibrated position feedback.",
        "Balanced impeller in workshop; vibration reduced from 5.1 to 1.8 mm/s.",
        "Serviced non-return valve hinge pin and seat.",
        "Recalibrated transmitter zero and span; verified alarms at LO and HI.",
    ];
    const CREWS: &[&str] = &["R. Okafor", "M. Lindqvist", "A. Brennan", "J. Achterberg", "contractor crew"];
    let mut rng = Rng::from_label("synthetic-reports");
    (0..count)
        .map(|i| {
            let asset = copy_asset_id(["PUMP-001", "PUMP-004", "PUMP-007", "MTR-004", "VLV-001", "RES-001"][i % 6], (i / 6 % 100) as u32);
            let finding = FINDINGS[rng.below(FINDINGS.len() as u64) as usize];
            let action = ACTIONS[rng.below(ACTIONS.len() as u64) as usize];
            let crew = CREWS[rng.below(CREWS.len() as u64) as usize];
            let hours = 2 + rng.below(14);
            SourceDoc {
                path: format!("bench/work-reports/wr-{i:05}.md"),
                text: format!(
                    "# Work report WR-{i:05}: {asset}\n\n## Findings and actions\n\nAsset {asset}, attended by {crew}, {hours} hours on site. \
                     Reported by the control room after alarms and operator rounds. {finding} {action} \
                     Follow-up inspection recommended at the next quarterly vibration route.\n"
                ),
            }
        })
        .collect()
}

#[derive(clap::Args)]
pub struct ReadingsBenchArgs {
    /// Rows in the long-format historian export (time, tag, value, quality).
    #[arg(long, default_value_t = 10_000_000)]
    rows: u64,
    /// Folder for the generated file and the two databases (removed at the end).
    #[arg(long, default_value = "data/bench-readings")]
    dir: PathBuf,
    /// The plant the tags belong to: files for `plant import`.
    #[arg(long, default_values = ["tests/fixtures/lakeside/site.toml", "tests/fixtures/lakeside/assets.csv", "tests/fixtures/lakeside/tags.csv"])]
    plant: Vec<PathBuf>,
}

/// `readings import` of a long-format export beside the raw insert rate of the same
/// rows into the same table shape, in the same run: what parsing, lookups and rollups
/// cost. Memory is the process's peak resident set before and after the import.
pub fn readings(args: &ReadingsBenchArgs) -> anyhow::Result<()> {
    use std::io::Write;
    std::fs::create_dir_all(&args.dir)?;
    let csv = args.dir.join("historian.csv");
    let (import_db, raw_db) = (args.dir.join("import.db"), args.dir.join("raw.db"));
    for db in [&import_db, &raw_db] {
        for suffix in ["", "-wal", "-shm"] {
            let _ = std::fs::remove_file(format!("{}{suffix}", db.display()));
        }
    }
    let store = Store::open(&import_db)?;
    crate::plant::import_files(store.writer(), &args.plant, crate::plant::Mode::Full, false, "bench")?;
    let tags: Vec<(String, i64)> = {
        let db = store.read()?;
        let mut stmt = db.prepare("SELECT id, key FROM sensors ORDER BY key")?;
        stmt.query_map([], |r| Ok((r.get(0)?, r.get(1)?)))?.collect::<Result<_, _>>()?
    };
    // One row a second per tag, round-robin, from a fixed start: a historian's export.
    let start = 1_764_504_000i64;
    let mut out = std::io::BufWriter::with_capacity(1 << 20, std::fs::File::create(&csv)?);
    writeln!(out, "Timestamp,TagName,Value,Quality")?;
    let mut rng = Rng::from_label("bench-readings");
    for i in 0..args.rows {
        let (tag, _) = &tags[(i % tags.len() as u64) as usize];
        let ts = start + (i / tags.len() as u64) as i64;
        writeln!(out, "{ts}000,{tag},{:.3},Good", 50.0 + 10.0 * rng.gauss())?;
    }
    out.flush()?;
    drop(out);
    let size = std::fs::metadata(&csv)?.len();
    println!("historian export: {} rows over {} tags, {:.0} MB", args.rows, tags.len(), size as f64 / 1e6);

    let rss_before = peak_rss_kib();
    let summary = crate::ingest::history::import(store.writer(), &*store.read()?, &csv, None)?;
    let rss_after = peak_rss_kib();
    let import_rate = summary.stored as f64 / summary.seconds;
    drop(store);

    // The same rows, already in memory, inserted into the same table shape in 50,000-row
    // transactions with one prepared statement: no parsing, no lookups, no rollups.
    let raw = rusqlite::Connection::open(&raw_db)?;
    raw.execute_batch(
        "PRAGMA journal_mode = WAL; PRAGMA synchronous = FULL;
         CREATE TABLE readings (sensor_key INTEGER NOT NULL, ts INTEGER NOT NULL, value REAL NOT NULL,
                                PRIMARY KEY (sensor_key, ts)) STRICT, WITHOUT ROWID;",
    )?;
    let keys: Vec<i64> = tags.iter().map(|(_, k)| *k).collect();
    let mut rng = Rng::from_label("bench-readings");
    let rows: Vec<(i64, i64, f64)> = (0..args.rows)
        .map(|i| {
            let ts = (start + (i / keys.len() as u64) as i64) * 1000;
            (keys[(i % keys.len() as u64) as usize], ts, 50.0 + 10.0 * rng.gauss())
        })
        .collect();
    let started = Instant::now();
    for chunk in rows.chunks(50_000) {
        let tx = raw.unchecked_transaction()?;
        let mut stmt = tx.prepare_cached("INSERT INTO readings (sensor_key, ts, value) VALUES (?1, ?2, ?3)")?;
        for (k, ts, v) in chunk {
            stmt.execute(rusqlite::params![k, ts, v])?;
        }
        drop(stmt);
        tx.commit()?;
    }
    let raw_rate = rows.len() as f64 / started.elapsed().as_secs_f64();
    drop(raw);

    print!("{summary}");
    println!("readings import: {import_rate:.0} rows/s (stored, with hourly rollups)");
    println!("raw insert, same rows and table, no parsing or rollups: {raw_rate:.0} rows/s");
    println!("import / raw insert: {:.0}%", 100.0 * import_rate / raw_rate);
    println!(
        "peak resident memory: {:.0} MiB before the import, {:.0} MiB after ({} MB file)",
        rss_before as f64 / 1024.0,
        rss_after as f64 / 1024.0,
        size / 1_000_000
    );
    plant_import_time(&args.dir)?;
    let _ = std::fs::remove_dir_all(&args.dir);
    Ok(())
}

/// `plant import` of a 5,000-tag plant (1,000 assets on 10 stations, 5 tags each) into
/// an empty twin, then the same files again (no changes).
fn plant_import_time(dir: &std::path::Path) -> anyhow::Result<()> {
    use std::fmt::Write;
    let mut site = String::from("[site]\nid = \"BIG\"\nname = \"A large works\"\ntimezone = \"UTC\"\n");
    let mut assets = String::from("Asset ID,Equipment Type,Area,Description\n");
    let mut tags = String::from("Tag Name,Equipment,Eng Units,Lo,Hi,HiHi,Description\n");
    for s in 0..10 {
        write!(site, "\n[[stations]]\nid = \"A{s:02}\"\nname = \"Area {s}\"\n")?;
    }
    for a in 0..1000 {
        writeln!(assets, "P-{a:04},Pump,A{:02},Pump {a}", a % 10)?;
        for (t, unit) in ["FIT", "PIT", "TIT", "VT", "JI"].iter().zip(["m3/h", "bar", "degC", "mm/s", "kW"]) {
            writeln!(tags, "{t}-{a:04},P-{a:04},{unit},1,80,95,{t} of pump {a}")?;
        }
    }
    let files: Vec<PathBuf> = [("big.toml", site), ("big-assets.csv", assets), ("big-tags.csv", tags)]
        .into_iter()
        .map(|(name, text)| {
            let path = dir.join(name);
            std::fs::write(&path, text).map(|()| path)
        })
        .collect::<Result<_, _>>()?;
    let db = dir.join("big.db");
    let store = Store::open(&db)?;
    let started = Instant::now();
    let first = crate::plant::import_files(store.writer(), &files, crate::plant::Mode::Full, false, "bench")?;
    let took = started.elapsed();
    let started = Instant::now();
    let again = crate::plant::import_files(store.writer(), &files, crate::plant::Mode::Full, false, "bench")?;
    println!(
        "plant import of 1,000 assets and 5,000 tags: {:.0} ms ({}); the same files again: {:.0} ms ({})",
        took.as_secs_f64() * 1000.0,
        first.summary(),
        started.elapsed().as_secs_f64() * 1000.0,
        again.summary()
    );
    Ok(())
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
