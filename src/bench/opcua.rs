//! `bench opcua`: value changes from node-opcua's server to twinops (stored and
//! committed) beside a bare async-opcua subscriber on the same server in the same run
//! (no storage), and the CPU each value costs.

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use async_opcua::client::{DataChangeCallback, Session};
use async_opcua::types::{
    AttributeId, MonitoredItemCreateRequest, MonitoringMode, MonitoringParameters, ReadValueId, TimestampsToReturn,
};
use tokio::sync::{Notify, watch};

use super::process_cpu;
use crate::domain::NodeRef;
use crate::opcua::interop::Server;
use crate::opcua::{OpcuaConfig, connect, link, node};
use crate::store::Store;

#[derive(clap::Args)]
pub struct OpcuaBenchArgs {
    /// Node.js, to run node-opcua's server.
    #[arg(long, env = "TWINOPS_TEST_NODE", default_value = "node")]
    node: String,
    /// A folder holding node_modules/node-opcua (`npm ci` in a copy of tests/opcua).
    #[arg(long, env = "TWINOPS_TEST_OPCUA_JS")]
    js: PathBuf,
    /// Variables the server changes together.
    #[arg(long, default_value_t = 500)]
    variables: usize,
    /// How often each changes, per second.
    #[arg(long, default_value_t = 10)]
    hz: u32,
    /// For how long, in seconds, per run.
    #[arg(long, default_value_t = 10)]
    seconds: u32,
}

/// What one run received.
struct Run {
    values: usize,
    elapsed: Duration,
    cpu: Duration,
}

pub fn opcua(args: &OpcuaBenchArgs) -> anyhow::Result<()> {
    anyhow::ensure!(
        args.variables > 0 && args.hz > 0 && args.seconds > 0,
        "--variables, --hz and --seconds must be at least 1"
    );
    let rt = tokio::runtime::Builder::new_multi_thread().enable_all().build()?;
    rt.block_on(run(args))
}

async fn run(args: &OpcuaBenchArgs) -> anyhow::Result<()> {
    let dir = std::env::temp_dir().join(format!("twinops-bench-opcua-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    let result = runs(args, &dir).await;
    let _ = std::fs::remove_dir_all(&dir);
    result
}

async fn runs(args: &OpcuaBenchArgs, dir: &std::path::Path) -> anyhow::Result<()> {
    let port = std::net::TcpListener::bind("127.0.0.1:0")?.local_addr()?.port();
    let mut server = Server::start(&args.node, &args.js, port, &dir.join("server-pki"), 0).await?;
    server.ask(&format!("bench {}", args.variables)).await?;
    let cfg = OpcuaConfig {
        enabled: true,
        endpoint: format!("opc.tcp://127.0.0.1:{port}"),
        sampling_interval_ms: 0,
        publishing_interval_ms: 100,
        queue_size: 100,
        root: NodeRef::parse("nsu=urn:twinops-test:plant;s=Bench").map_err(anyhow::Error::msg)?,
        auto_register: true,
        ..OpcuaConfig::default()
    };
    let expected = args.variables * args.hz as usize * args.seconds as usize;
    println!(
        "node-opcua changes {} variables {} times a second for {} s per run (about {expected} values)",
        args.variables, args.hz, args.seconds
    );
    let bare = bare(args, &cfg, dir, &mut server).await?;
    let ours = twinops(args, &cfg, dir, &mut server).await?;
    let rate = |r: &Run| r.values as f64 / r.elapsed.as_secs_f64();
    let cpu = |r: &Run| r.cpu.as_secs_f64() * 1e6 / r.values.max(1) as f64;
    println!("{:<44} {:>9} {:>11} {:>14}", "", "values", "values/s", "CPU/value, µs");
    println!(
        "{:<44} {:>9} {:>11.0} {:>14.1}",
        "bare async-opcua subscriber (no storage)",
        bare.values,
        rate(&bare),
        cpu(&bare)
    );
    println!("{:<44} {:>9} {:>11.0} {:>14.1}", "twinops (stored and committed)", ours.values, rate(&ours), cpu(&ours));
    println!(
        "twinops / bare: {:.1}% of the values, {:.1}% of the rate (goal: at least 90%)",
        100.0 * ours.values as f64 / bare.values.max(1) as f64,
        100.0 * rate(&ours) / rate(&bare).max(f64::MIN_POSITIVE)
    );
    server.kill().await;
    Ok(())
}

/// Waits for the initial values (`count` at the number of variables), then has the
/// server churn and measures what `count` gains, in how long, for how much CPU.
async fn measure(args: &OpcuaBenchArgs, server: &mut Server, count: impl Fn() -> usize) -> anyhow::Result<Run> {
    let initial = Instant::now();
    while count() < args.variables && initial.elapsed() < Duration::from_secs(30) {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let (from, cpu0, started) = (count(), process_cpu(), Instant::now());
    server.ask(&format!("churn {} {}", args.hz, args.seconds)).await?;
    let elapsed = drain(server, args.seconds, started, &count).await?;
    Ok(Run { values: count() - from, elapsed, cpu: process_cpu() - cpu0 })
}

/// Waits for the churn to end, then for `count` to stop growing; returns the time from
/// `started` to its last growth.
async fn drain(
    server: &mut Server,
    seconds: u32,
    started: Instant,
    count: impl Fn() -> usize,
) -> anyhow::Result<Duration> {
    anyhow::ensure!(
        server.heard("done churn", Duration::from_secs(u64::from(seconds) + 30)).await.is_some(),
        "the server's churn did not end"
    );
    let (mut last, mut last_at) = (count(), started.elapsed());
    loop {
        tokio::time::sleep(Duration::from_millis(500)).await;
        let now = count();
        if now == last {
            return Ok(last_at);
        }
        (last, last_at) = (now, started.elapsed());
    }
}

/// The bench variables as the server numbers them now.
async fn bench_nodes(session: &Session, n: usize) -> anyhow::Result<Vec<async_opcua::types::NodeId>> {
    let uris = crate::opcua::browse::namespace_uris(session).await?;
    let namespaces = node::namespace_map(&uris);
    (0..n)
        .map(|i| {
            let r = NodeRef::parse(&format!("nsu=urn:twinops-test:plant;s=Bench.V{i}")).map_err(anyhow::Error::msg)?;
            node::resolve(&r, &namespaces).ok_or_else(|| anyhow::anyhow!("no plant namespace on the server"))
        })
        .collect()
}

async fn bare(
    args: &OpcuaBenchArgs,
    cfg: &OpcuaConfig,
    dir: &std::path::Path,
    server: &mut Server,
) -> anyhow::Result<Run> {
    let env = |_: &str| None;
    let (session, task) = connect::once(cfg, dir, &env).await?;
    let count = Arc::new(AtomicUsize::new(0));
    let counter = Arc::clone(&count);
    let callback = DataChangeCallback::new(move |_, _| {
        counter.fetch_add(1, Ordering::Relaxed);
    });
    let sub = session.create_subscription(Duration::from_millis(100), 30, 10, 0, 0, true, callback).await?;
    let items: Vec<MonitoredItemCreateRequest> = bench_nodes(&session, args.variables)
        .await?
        .into_iter()
        .enumerate()
        .map(|(i, node_id)| MonitoredItemCreateRequest {
            item_to_monitor: ReadValueId { node_id, attribute_id: AttributeId::Value as u32, ..Default::default() },
            monitoring_mode: MonitoringMode::Reporting,
            requested_parameters: MonitoringParameters {
                client_handle: i as u32 + 1,
                sampling_interval: 0.0,
                queue_size: 100,
                discard_oldest: true,
                ..Default::default()
            },
        })
        .collect();
    for chunk in items.chunks(500) {
        session.create_monitored_items(sub, TimestampsToReturn::Both, chunk.to_vec()).await?;
    }
    let run = measure(args, server, || count.load(Ordering::Relaxed)).await?;
    let _ = session.delete_subscription(sub).await;
    let _ = session.disconnect().await;
    task.abort();
    Ok(run)
}

async fn twinops(
    args: &OpcuaBenchArgs,
    cfg: &OpcuaConfig,
    dir: &std::path::Path,
    server: &mut Server,
) -> anyhow::Result<Run> {
    let store = Store::open(&dir.join("bench.db"))?;
    let (stop, stop_rx) = watch::channel(false);
    let policy = crate::ingest::IngestPolicy { max_ahead_s: None, ..Default::default() };
    let (writer, wake) = (store.writer().clone(), Arc::new(Notify::new()));
    let role = link::Role { acting: watch::channel(true).1, log: None };
    let running = link::start(writer, cfg.clone(), dir.to_path_buf(), policy, wake, role, stop_rx);
    let readings = || -> usize {
        store
            .read()
            .ok()
            .and_then(|c| c.query_row("SELECT count(*) FROM readings", [], |r| r.get::<_, i64>(0)).ok())
            .unwrap_or(0) as usize
    };
    let mut up = running.up.clone();
    tokio::time::timeout(Duration::from_secs(60), up.wait_for(|u| *u))
        .await
        .map_err(|_| anyhow::anyhow!("twinops did not connect"))??;
    let run = measure(args, server, readings).await?;
    let _ = stop.send(true);
    let _ = running.task.await;
    Ok(run)
}
