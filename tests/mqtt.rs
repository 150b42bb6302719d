//! Ingest over a real MQTT broker: the embedded one always, and Mosquitto when
//! `TWINOPS_TEST_MQTT_URL` points at one (`.ci/run` starts it). The publisher is the
//! plant simulator at QoS 1; the daemon runs in-process on a seeded twin.

mod common;

use std::time::{Duration, Instant};

use common::Plant;
use twinops::app::{Daemon, ServeOptions};
use twinops::config::Config;
use twinops::sim::{SimOptions, simulate};

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

/// Polls `check` until it holds or `limit` passes.
async fn eventually(limit: Duration, mut check: impl FnMut() -> bool) -> bool {
    let started = Instant::now();
    while started.elapsed() < limit {
        if check() {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    check()
}

/// Publishes events with duplicates and malformed messages through `broker_url` (or
/// the embedded broker when None) and checks that every valid event is stored exactly
/// once, every malformed one is a dead letter, and the daemon is still up.
async fn loses_nothing(broker_url: Option<String>, events: usize) {
    let p = Plant::new();
    let run = format!("t{}", free_port());
    let mut config = Config::default();
    config.mqtt.client_id = format!("twinops-test-{run}");
    config.mqtt.topics = vec![format!("{run}/scada/#")];
    match &broker_url {
        Some(url) => config.mqtt.url = url.clone(),
        None => config.mqtt.embedded_listen = format!("127.0.0.1:{}", free_port()),
    }
    config.triage.workers = 1;
    let opts = ServeOptions { config, db: p.db_path(), demo: false, seed_dir: common::seed_dir() };
    let daemon = Daemon::start_on(p.store.clone(), opts).await.unwrap();
    let sim = SimOptions { duplicates: 10.0, malformed: 1.0, ..SimOptions::burst(&daemon.mqtt_url, &run, events) };
    // The daemon subscribes on connect; give it a moment before publishing.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let report = simulate(&sim).await.unwrap();
    assert!(report.duplicates > 0 && report.malformed > 0, "{report:?}");

    let journal = format!("SELECT count(*) FROM alarm_events WHERE event_id LIKE '{run}-%'");
    let stored = eventually(Duration::from_secs(60), || p.count(&journal) as usize >= report.events).await;
    assert!(stored, "stored {} of {} events", p.count(&journal), report.events);
    assert_eq!(p.count(&journal) as usize, report.events, "every event exactly once");
    let distinct = p.count(&format!("SELECT count(DISTINCT event_id) FROM alarm_events WHERE event_id LIKE '{run}-%'"));
    assert_eq!(distinct as usize, report.events);
    let malformed = p.count("SELECT count(*) FROM dead_letters WHERE reason = 'malformed'");
    assert_eq!(malformed as usize, report.malformed);

    // Still up: one more event goes through.
    let more = SimOptions { topic: sim.topic.clone(), ..SimOptions::burst(&daemon.mqtt_url, &format!("{run}x"), 1) };
    simulate(&more).await.unwrap();
    let one = format!("SELECT count(*) FROM alarm_events WHERE event_id = '{run}x-0'");
    assert!(eventually(Duration::from_secs(20), || p.count(&one) == 1).await);
    daemon.shutdown().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn embedded_broker_ingest_loses_nothing() {
    loses_nothing(None, 5_000).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn mosquitto_ingest_loses_nothing() {
    let Ok(url) = std::env::var("TWINOPS_TEST_MQTT_URL") else {
        println!("NOT RUN: mosquitto_ingest_loses_nothing needs TWINOPS_TEST_MQTT_URL (e.g. mqtt://127.0.0.1:1883)");
        return;
    };
    loses_nothing(Some(url), 5_000).await;
}

/// The daemon process is killed with SIGKILL in the middle of a 20,000-event publish
/// and started again: every event is stored exactly once. The broker (Mosquitto) keeps
/// the daemon's session and redelivers what was not acknowledged; the publisher's own
/// QoS 1 retries cover the rest.
#[tokio::test(flavor = "multi_thread")]
async fn sigkill_mid_publish_loses_and_doubles_nothing() {
    let Ok(url) = std::env::var("TWINOPS_TEST_MQTT_URL") else {
        println!(
            "NOT RUN: sigkill_mid_publish_loses_and_doubles_nothing needs TWINOPS_TEST_MQTT_URL (a Mosquitto broker)"
        );
        return;
    };
    let p = Plant::new();
    let run = format!("k{}", free_port());
    let spawn = || {
        std::process::Command::new(env!("CARGO_BIN_EXE_twinops"))
            .arg("--db")
            .arg(p.db_path())
            .args(["--config", "/nonexistent/twinops.toml", "serve"])
            .env("TWINOPS_MQTT_URL", &url)
            .env("TWINOPS_MQTT_TOPICS", format!("{run}/#"))
            .env("TWINOPS_MQTT_CLIENT_ID", format!("twinops-{run}"))
            .env_remove("TWINOPS_LLM_KIND")
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap()
    };
    let mut daemon = spawn();
    tokio::time::sleep(Duration::from_secs(1)).await;
    let sim = SimOptions::burst(&url, &run, 20_000);
    let publisher = tokio::spawn(async move { simulate(&sim).await });
    let journal = format!("SELECT count(*) FROM alarm_events WHERE event_id LIKE '{run}-%'");
    assert!(eventually(Duration::from_secs(60), || p.count(&journal) >= 3_000).await, "ingest started");
    daemon.kill().unwrap();
    daemon.wait().unwrap();
    let at_kill = p.count(&journal);
    assert!(at_kill < 20_000, "killed mid-publish ({at_kill} stored)");
    let mut daemon = spawn();
    let report = publisher.await.unwrap().unwrap();
    let all = eventually(Duration::from_secs(120), || p.count(&journal) as usize >= report.events).await;
    let _ = std::process::Command::new("kill").args(["-TERM", &daemon.id().to_string()]).status();
    daemon.wait().unwrap();
    assert!(all, "stored {} of {} (at the kill: {at_kill})", p.count(&journal), report.events);
    assert_eq!(p.count(&journal) as usize, report.events, "exactly once");
    let distinct = p.count(&format!("SELECT count(DISTINCT event_id) FROM alarm_events WHERE event_id LIKE '{run}-%'"));
    assert_eq!(distinct as usize, report.events);
    assert_eq!(p.count("SELECT count(*) FROM dead_letters"), 0, "a clear never overtook its raise");
}
