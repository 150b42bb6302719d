//! Ingest over a real MQTT broker: the embedded one always, and Mosquitto when
//! `TWINOPS_TEST_MQTT_URL` points at one (`.ci/run` starts it). The publisher is the
//! plant simulator at QoS 1; the daemon runs in-process on a seeded twin.

mod common;

use std::time::{Duration, Instant};

use common::Plant;
use serde_json::json;
use twinops::app::{Daemon, ServeOptions};
use twinops::config::Config;
use twinops::scripted::{Reply, ScriptedServer};
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
    common::logs();
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

/// A daemon on `broker_url` (or the embedded broker) whose triage model is the
/// scripted server; `extra` is appended to its twinops.toml.
async fn daemon_with_model(p: &Plant, run: &str, broker_url: Option<&str>, model_url: &str, extra: &str) -> Daemon {
    let mqtt = match broker_url {
        Some(url) => format!("url = \"{url}\""),
        None => format!("embedded_listen = \"127.0.0.1:{}\"", free_port()),
    };
    let toml = format!(
        "[mqtt]\n{mqtt}\nclient_id = \"twinops-{run}\"\ntopics = [\"{run}/scada/#\"]\n\n\
         [[llm.chain]]\nkind = \"openai\"\nbase_url = \"{model_url}\"\nmodel = \"scripted\"\n\n{extra}"
    );
    let path = p.dir.path().join("twinops.toml");
    std::fs::write(&path, toml).unwrap();
    let config = Config::load(&path, &|_| None).unwrap();
    let opts = ServeOptions { config, db: p.db_path(), demo: false, seed_dir: common::seed_dir() };
    let daemon = Daemon::start_on(p.store.clone(), opts).await.unwrap();
    // The daemon subscribes on connect; give it a moment before publishing.
    tokio::time::sleep(Duration::from_millis(500)).await;
    daemon
}

/// A triage note with no figures, so any run of the scripted model is grounded.
fn plain_note() -> Reply {
    Reply::Text(
        json!({"summary": "Several alarms at once on this asset; treat them as one event.", "urgency": "urgent",
               "likely_causes": ["a common upstream cause"], "recommended_actions": ["Check the station overview"],
               "proposed_work_order": null, "evidence": []})
        .to_string(),
    )
}

/// A flood of 2,000 and more occurrences: the triage queue never holds more than its
/// capacity, every occurrence gets a note (one asset's waiting alarms share one run;
/// past capacity, the overflow job's rules runs), and the model is called no more
/// often than the per-minute budget allows.
async fn flood_is_triaged_within_budget(broker_url: Option<String>) {
    let p = Plant::new();
    let run = format!("f{}", free_port());
    let server = ScriptedServer::cycling(vec![plain_note()]).await;
    let extra = "[triage]\nworkers = 2\nllm_runs_per_minute = 6\nqueue_capacity = 8\n";
    let started = Instant::now();
    let daemon = daemon_with_model(&p, &run, broker_url.as_deref(), &server.openai_url(), extra).await;

    let sim = SimOptions { flood: true, ..SimOptions::burst(&daemon.mqtt_url, &run, 5_000) };
    let publisher = tokio::spawn(async move { simulate(&sim).await });
    let mut max_queued = 0;
    while !publisher.is_finished() {
        max_queued = max_queued.max(p.count("SELECT count(*) FROM triage_jobs WHERE state = 'queued'"));
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let report = publisher.await.unwrap().unwrap();
    assert!(report.raises >= 2_000, "{report:?}");

    let ours = format!("FROM alarms WHERE event_id LIKE '{run}-%'");
    let journal = format!("SELECT count(*) FROM alarm_events WHERE event_id LIKE '{run}-%'");
    let stored = eventually(Duration::from_secs(60), || p.count(&journal) as usize == report.events).await;
    assert!(stored, "stored {} of {} events", p.count(&journal), report.events);
    let occurrences = p.count(&format!("SELECT count(*) {ours}"));
    assert!(occurrences >= 2_000, "{occurrences} occurrences");
    let noted = format!("SELECT count(*) {ours} AND id IN (SELECT alarm_id FROM notes WHERE kind = 'triage')");
    let all_noted = eventually(Duration::from_secs(300), || {
        max_queued = max_queued.max(p.count("SELECT count(*) FROM triage_jobs WHERE state = 'queued'"));
        p.count(&noted) == occurrences
    })
    .await;
    let elapsed = started.elapsed();
    daemon.shutdown().await;
    assert!(all_noted, "{} of {occurrences} occurrences have a note", p.count(&noted));
    assert!(max_queued <= 8, "the queue held {max_queued} jobs; capacity 8");

    let runs = p.count(&format!("SELECT count(DISTINCT run_id) FROM notes WHERE alarm_id IN (SELECT id {ours})"));
    assert!(runs < occurrences / 2, "{runs} runs for {occurrences} occurrences: grouped");
    let model_runs = p.count("SELECT count(*) FROM agent_runs WHERE model LIKE 'openai%'");
    let allowed = 6 + (6.0 * elapsed.as_secs_f64() / 60.0).ceil() as i64;
    assert!(model_runs >= 1, "the model triaged the first alarms");
    assert!(model_runs <= allowed, "{model_runs} model runs in {elapsed:?}; the budget allows {allowed}");
    let overflow = p.count(&format!(
        "SELECT count(*) {ours} AND triage_job IN (SELECT id FROM triage_jobs WHERE asset_id IS NULL)"
    ));
    assert!(overflow > 0, "past capacity, occurrences joined the overflow job");
    println!(
        "flood: {} events, {occurrences} occurrences, {runs} runs ({model_runs} with the model, {allowed} allowed), \
         at most {max_queued} jobs queued, {overflow} occurrences through the overflow job, {elapsed:?}",
        report.events
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn embedded_broker_flood_is_triaged_within_budget() {
    flood_is_triaged_within_budget(None).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn mosquitto_flood_is_triaged_within_budget() {
    let Ok(url) = std::env::var("TWINOPS_TEST_MQTT_URL") else {
        println!("NOT RUN: mosquitto_flood_is_triaged_within_budget needs TWINOPS_TEST_MQTT_URL");
        return;
    };
    flood_is_triaged_within_budget(Some(url)).await;
}
