//! `bench ingest` and `bench sparkplug`: ingest end to end against a baseline measured
//! through the same broker in the same run.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context;
use rumqttc::{AsyncClient, Event, EventLoop, Packet, QoS};
use serde_json::{Value, json};

use super::{Percentiles, process_cpu, seeded_store};
use crate::domain::Timestamp;
use crate::ingest::IngestPolicy;
use crate::ingest::mqtt::{MqttConfig, Running};
use crate::publish::{connect, publish_all};
use crate::sparkplug::edge::{EdgeNode, MetricSpec};
use crate::store::{Store, StoreError};

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

/// Ingest's MQTT settings for a benchmark: `broker`, or the embedded one started on a
/// free loopback port; topics under `{tag}/ingest/`.
async fn ingest_config(tag: &str, broker: Option<&str>, batch_ms: Option<u64>) -> anyhow::Result<MqttConfig> {
    let mut cfg = MqttConfig {
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

/// The ingest pipeline under measurement, as the daemon runs it.
struct Rig {
    store: Store,
    url: String,
    ingest: Running,
    stop: tokio::sync::watch::Sender<bool>,
    acks: u64,
}

/// One measured delivery: wall time and this process's CPU time.
struct Sample {
    elapsed: Duration,
    cpu: Duration,
}

impl Rig {
    /// Starts ingest; the readings a benchmark sends lie a year ahead, so the policy
    /// takes them.
    async fn start(
        store: Store,
        cfg: MqttConfig,
        sparkplug: Option<crate::sparkplug::SparkplugConfig>,
    ) -> anyhow::Result<Rig> {
        let url = cfg.url.clone();
        let policy = IngestPolicy { max_ahead_s: None, sparkplug: sparkplug.map(Arc::new), ..Default::default() };
        let (stop, stopped) = tokio::sync::watch::channel(false);
        let mut ingest = crate::ingest::mqtt::start(
            store.writer().clone(),
            cfg,
            policy,
            Arc::new(tokio::sync::Notify::new()),
            stopped,
        )?;
        ingest.broker_up.wait_for(|up| *up).await?; // connected and subscribed
        Ok(Rig { store, url, ingest, stop, acks: 0 })
    }

    /// Publishes `msgs` at QoS 1 on `topic` and waits until ingest has committed and
    /// acknowledged every one.
    async fn deliver(&mut self, topic: String, client: String, msgs: Vec<Vec<u8>>) -> anyhow::Result<Sample> {
        let (started, cpu) = (Instant::now(), process_cpu());
        self.acks += msgs.len() as u64;
        let target = self.acks;
        let url = self.url.clone();
        let publishing = tokio::spawn(async move { publish_all(&url, &client, &topic, msgs).await });
        let done =
            tokio::time::timeout(Duration::from_secs(600), self.ingest.acked.wait_for(|a| *a >= target)).await.is_ok();
        anyhow::ensure!(done, "ingest stalled at {} of {target} acks", *self.ingest.acked.borrow());
        let sample = Sample { elapsed: started.elapsed(), cpu: process_cpu().saturating_sub(cpu) };
        publishing.await??;
        Ok(sample)
    }

    /// Removes readings at and after `from` (unix seconds): an interrupted run's, and
    /// this run's once it is done, so the next run starts from the same database.
    fn clear_from(&self, from: i64) -> anyhow::Result<()> {
        self.store.writer().call(move |c| {
            c.execute("DELETE FROM readings WHERE ts >= ?1", [from * 1000])?;
            c.execute("DELETE FROM readings_hourly WHERE hour >= ?1", [from / 3600 * 3600])?;
            Ok::<_, StoreError>(())
        })?;
        Ok(())
    }

    async fn stop(self) {
        let _ = self.stop.send(true);
        let _ = self.ingest.task.await;
    }
}

/// The ingest writer's metrics at one moment, to report what a measurement added.
struct WriterMark {
    batches: (u64, f64),
    commits: (u64, f64),
    busy_secs: f64,
}

impl WriterMark {
    fn now() -> WriterMark {
        WriterMark {
            batches: crate::metrics::totals("twinops_ingest_batch_messages"),
            commits: crate::metrics::totals("twinops_ingest_commit_seconds"),
            busy_secs: crate::metrics::counter("twinops_store_writer_busy_seconds_total"),
        }
    }

    /// Batches and commits since the mark, and the share of `measured` the writer spent
    /// in a transaction: well under 100% means the broker's round trip sets the pace.
    fn print_since(&self, measured: Duration) {
        let now = WriterMark::now();
        let (batches, messages) = (now.batches.0 - self.batches.0, now.batches.1 - self.batches.1);
        let (commits, commit_secs) = (now.commits.0 - self.commits.0, now.commits.1 - self.commits.1);
        println!(
            "twinops batches: {batches}, {:.0} messages each on average, {:.2} ms from queueing to commit",
            messages / batches.max(1) as f64,
            1000.0 * commit_secs / commits.max(1) as f64
        );
        let busy = now.busy_secs - self.busy_secs;
        println!("twinops writer: in a transaction {:.0}% of the measured time", 100.0 * busy / measured.as_secs_f64());
    }
}

/// A median's rate and each round's, for a line of figures.
fn rates(per_round: &[Duration], items: f64) -> (String, String) {
    let rate = |d: Duration| format!("{:.0}", items / d.as_secs_f64());
    let median = Percentiles::of(per_round.to_vec()).p50;
    (rate(median), per_round.iter().map(|d| rate(*d)).collect::<Vec<_>>().join(" "))
}

fn median_rate(per_round: &[Duration], items: f64) -> f64 {
    items / Percentiles::of(per_round.to_vec()).p50.as_secs_f64()
}

/// A bare QoS 1 subscriber on `topic` that acks on receipt and does nothing else.
async fn bare_subscriber(url: &str, client: &str, topic: &str) -> anyhow::Result<(AsyncClient, EventLoop)> {
    let (sub, mut events) = connect(url, client)?;
    sub.subscribe(topic, QoS::AtLeastOnce).await?;
    loop {
        if let Event::Incoming(Packet::SubAck(_)) = events.poll().await? {
            return Ok((sub, events));
        }
    }
}

/// End-to-end ingest throughput (published, committed and acknowledged) beside what a
/// bare QoS 1 subscriber gets from the same broker in the same run. Rounds alternate
/// the two so that a noisy moment of the machine does not land on one side only.
pub fn ingest(args: &IngestBenchArgs) -> anyhow::Result<()> {
    anyhow::ensure!(args.rounds > 0 && args.messages > 0, "--rounds and --messages must be at least 1");
    let store = seeded_store(&args.bench_db, &args.from, 1)?;
    let rt = tokio::runtime::Builder::new_multi_thread().enable_all().build()?;
    rt.block_on(ingest_rounds(args, store))
}

async fn ingest_rounds(args: &IngestBenchArgs, store: Store) -> anyhow::Result<()> {
    let tag = format!("bench{}", Timestamp::now().unix());
    let cfg = ingest_config(&tag, args.broker.as_deref(), args.batch_ms).await?;
    let batch_ms = cfg.batch_wait().as_millis();
    let n = args.messages;
    let base_ts = Timestamp::now().unix() + 86_400 * 365;
    let (_client, mut sub) = bare_subscriber(&cfg.url, &format!("{tag}-bare-sub"), &format!("{tag}/bare")).await?;
    let mut rig = Rig::start(store, cfg, None).await?;
    rig.clear_from(base_ts - 86_400)?;
    let db = rig.store.read()?;
    let key: i64 = db.query_row("SELECT key FROM sensors WHERE id = 'PUMP-001.FLOW'", [], |r| r.get(0))?;

    let (mut bare, mut ours) = (Vec::new(), Vec::new());
    let (mut bare_cpu, mut ours_cpu) = (Duration::ZERO, Duration::ZERO);
    let before = WriterMark::now();
    for round in 0..args.rounds {
        // One reading per message; each round its own times, so every reading is new.
        // The same payloads for both, each on its own topic.
        let msgs: Vec<Vec<u8>> = (0..n)
            .map(|i| {
                let t = Timestamp::from_unix(base_ts + (round * n + i) as i64).to_rfc3339();
                let v = 400.0 + (i % 50) as f64;
                json!({"type": "reading", "sensor_id": "PUMP-001.FLOW", "time": t, "value": v}).to_string().into_bytes()
            })
            .collect();
        let (started, cpu) = (Instant::now(), process_cpu());
        let (url, topic, id, copy) = (rig.url.clone(), format!("{tag}/bare"), format!("{tag}-bare-pub"), msgs.clone());
        let publishing = tokio::spawn(async move { publish_all(&url, &id, &topic, copy).await });
        let mut received = 0;
        while received < n {
            if let Event::Incoming(Packet::Publish(_)) = sub.poll().await? {
                received += 1;
            }
        }
        bare.push(started.elapsed());
        bare_cpu += process_cpu().saturating_sub(cpu);
        publishing.await??;

        let sample = rig.deliver(format!("{tag}/ingest/telemetry"), format!("{tag}-pub"), msgs).await?;
        ours.push(sample.elapsed);
        ours_cpu += sample.cpu;
        let target = rig.acks as i64;
        let stored: i64 = db.query_row(
            "SELECT count(*) FROM readings WHERE sensor_key = ?1 AND ts >= ?2 AND ts < ?3",
            rusqlite::params![key, base_ts * 1000, (base_ts + target) * 1000],
            |r| r.get(0),
        )?;
        anyhow::ensure!(stored == target, "{stored} readings stored after {target} acks");
    }
    // Leave the database as it was for the next run.
    rig.clear_from(base_ts - 86_400)?;
    let broker = if args.broker.is_some() { rig.url.clone() } else { "the embedded broker".into() };
    rig.stop().await;

    println!(
        "twinops bench ingest: {n} QoS 1 messages (one reading each) per round, {} rounds, through {broker}, batch_ms {batch_ms}",
        args.rounds,
    );
    let ((bare_med, bare_rounds), (ours_med, ours_rounds)) = (rates(&bare, n as f64), rates(&ours, n as f64));
    println!("{:<50} {bare_med:>8} msg/s  (rounds: {bare_rounds})", "bare subscriber (acks on receipt), median");
    println!("{:<50} {ours_med:>8} msg/s  (rounds: {ours_rounds})", "twinops ingest (committed, then acked), median");
    before.print_since(ours.iter().sum());
    let per_message = |cpu: Duration| format!("{:.1} µs", cpu.as_secs_f64() * 1e6 / (n * args.rounds) as f64);
    println!(
        "CPU per message, this process (publisher, subscriber{}): bare {}, twinops {}",
        if args.broker.is_some() { "" } else { ", broker" },
        per_message(bare_cpu),
        per_message(ours_cpu)
    );
    println!(
        "twinops / bare: {:.0}% (medians; goal >= 80%)",
        100.0 * median_rate(&ours, n as f64) / median_rate(&bare, n as f64)
    );
    Ok(())
}

/// Sparkplug B ingest end to end (published at QoS 1, decoded, resolved by alias,
/// committed, acknowledged) beside the JSON path carrying the same readings in the same
/// run: DDATA messages of `metrics` metrics against JSON batches of as many readings.
pub fn sparkplug(args: &SparkplugBenchArgs) -> anyhow::Result<()> {
    anyhow::ensure!(
        args.rounds > 0 && args.messages > 0 && args.metrics > 0,
        "--rounds, --messages and --metrics must be at least 1"
    );
    let store = Store::open(&args.bench_db).with_context(|| format!("opening {}", args.bench_db.display()))?;
    let rt = tokio::runtime::Builder::new_multi_thread().enable_all().build()?;
    rt.block_on(sparkplug_rounds(args, store))
}

/// Births device BENCH of `m` metrics (m000.., aliases 0..) on group `tag`, as sensors
/// BENCH/m000...
async fn birth_bench_device(rig: &mut Rig, tag: &str, m: usize) -> anyhow::Result<EdgeNode> {
    let mut edge = EdgeNode::new(tag, "gw", 0);
    let now_ms = Timestamp::now().unix() as u64 * 1000;
    let specs: Vec<MetricSpec> = (0..m)
        .map(|i| MetricSpec {
            name: format!("m{i:03}"),
            alias: i as u64,
            value: 0.0,
            unit: "bar".into(),
            limits: [None; 4],
        })
        .collect();
    for (topic, payload) in [edge.node_birth(now_ms), edge.device_birth("BENCH", &specs, now_ms)] {
        rig.deliver(topic, format!("{tag}-birth"), vec![payload]).await?;
    }
    let keys: i64 =
        rig.store.read()?.query_row("SELECT count(*) FROM sensors WHERE id LIKE 'BENCH/m%'", [], |r| r.get(0))?;
    anyhow::ensure!(keys as usize >= m, "the births registered {keys} of {m} sensors");
    Ok(edge)
}

async fn sparkplug_rounds(args: &SparkplugBenchArgs, store: Store) -> anyhow::Result<()> {
    let tag = format!("spbench{}", Timestamp::now().unix());
    let cfg = ingest_config(&tag, args.broker.as_deref(), args.batch_ms).await?;
    let sparkplug = crate::sparkplug::SparkplugConfig {
        enabled: true,
        groups: vec![tag.clone()],
        host_id: tag.clone(),
        primary_host: false,
        ..Default::default()
    };
    let mut rig = Rig::start(store, cfg, Some(sparkplug)).await?;
    let (n, m) = (args.messages, args.metrics);
    let mut edge = birth_bench_device(&mut rig, &tag, m).await?;
    // Every reading of the run is new: a second of its own, a year ahead.
    let base = Timestamp::now().unix() + 86_400 * 365;
    rig.clear_from(base - 86_400)?;

    let (mut json_t, mut sp_t) = (Vec::new(), Vec::new());
    let (mut json_cpu, mut sp_cpu) = (Duration::ZERO, Duration::ZERO);
    for round in 0..args.rounds {
        let second = |i: usize, path: usize| base + ((round * 2 + path) * n + i) as i64;
        // JSON: the same readings as batches of `m` events.
        let json_msgs: Vec<Vec<u8>> = (0..n)
            .map(|i| {
                let t = Timestamp::from_unix(second(i, 0)).to_rfc3339();
                let events: Vec<Value> = (0..m)
                    .map(|j| json!({"type": "reading", "sensor_id": format!("BENCH/m{j:03}"), "time": t, "value": (i + j) as f64}))
                    .collect();
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
        if round == 0 {
            let size = |msgs: &[Vec<u8>]| msgs.iter().map(Vec::len).sum::<usize>() as f64 / n as f64;
            println!(
                "twinops bench sparkplug: {n} messages of {m} readings per round and path, {} rounds, through {}; payloads: JSON {:.0} B, Sparkplug {:.0} B per message",
                args.rounds,
                if args.broker.is_some() { rig.url.as_str() } else { "the embedded broker" },
                size(&json_msgs),
                size(&sp_msgs)
            );
        }
        let json = rig.deliver(format!("{tag}/ingest/telemetry"), format!("{tag}-pub0"), json_msgs).await?;
        let sp = rig.deliver(format!("spBv1.0/{tag}/DDATA/gw/BENCH"), format!("{tag}-pub1"), sp_msgs).await?;
        json_t.push(json.elapsed);
        sp_t.push(sp.elapsed);
        json_cpu += json.cpu;
        sp_cpu += sp.cpu;
        let expected = (2 * n * m * (round + 1)) as i64;
        let stored: i64 =
            rig.store.read()?.query_row("SELECT count(*) FROM readings WHERE ts >= ?1", [base * 1000], |r| r.get(0))?;
        anyhow::ensure!(stored == expected, "{stored} readings stored, {expected} sent");
    }
    rig.clear_from(base - 86_400)?;
    rig.stop().await;

    let readings = (n * m) as f64;
    let per_reading = |cpu: Duration| format!("{:.2} µs", cpu.as_secs_f64() * 1e6 / (readings * args.rounds as f64));
    let ((json_med, json_rounds), (sp_med, sp_rounds)) = (rates(&json_t, readings), rates(&sp_t, readings));
    println!(
        "{:<44} {json_med:>10} readings/s  (rounds: {json_rounds})",
        "JSON telemetry (committed, then acked), median"
    );
    println!(
        "{:<44} {sp_med:>10} readings/s  (rounds: {sp_rounds})",
        "Sparkplug DDATA (committed, then acked), median"
    );
    println!("CPU per reading, this process: JSON {}, Sparkplug {}", per_reading(json_cpu), per_reading(sp_cpu));
    println!(
        "Sparkplug / JSON: {:.0}% (medians; goal >= 300,000 readings/s against Mosquitto)",
        100.0 * median_rate(&sp_t, readings) / median_rate(&json_t, readings)
    );
    Ok(())
}
