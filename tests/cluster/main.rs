//! A redundant pair of twinops on a real broker: the embedded one, and Mosquitto when
//! `TWINOPS_TEST_MQTT_URL` points at one. The lease alone through kills and a cut link
//! (`lease`); two daemons through kills, a cut link, restarts, an upgrade, a broker
//! restart and a node away longer than the broker keeps its sessions, every occurrence
//! noted once on both twins; decisions, work orders and alarm changes (`approvals`),
//! accounts and the command line (`accounts`) through the pair's log; and how a node
//! applies what the log brings, on its store alone (`applying`).

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;

use serde_json::json;
use twinops::bench::failover::{self, PairSpec};
use twinops::cluster::{self, ClusterConfig, Standing};
use twinops::config::MqttConfig;

#[path = "../common/mod.rs"]
mod common;

mod accounts;
mod applying;
mod approvals;
mod lease;
mod model;

use accounts::{accounts_reach_both, command_line_reaches_both};
use lease::Proxy;

const LEASE_MS: u64 = 1500;

/// The agent's proposal the alarm-change tests decide: PUMP-007.VIB-DE's HH set point
/// from 7.1 to 7.6 mm/s, proposed at `at` (unix seconds).
fn vib_hh_change(at: i64) -> twinops::approvals::alarm_changes::Parked {
    use twinops::alarms::replay::Settings;
    use twinops::approvals::alarm_changes::{Change, Parked, SettingsChange};
    let settings = |set_point| Settings { set_point, deadband: 0.2, on_delay_s: 10, off_delay_s: 0 };
    Parked {
        change: Change::Settings(SettingsChange {
            sensor_id: "PUMP-007.VIB-DE".into(),
            asset_id: "PUMP-007".into(),
            code: "VIB-HH".into(),
            level: "hh".into(),
            current: settings(7.1),
            proposed: settings(7.6),
        }),
        reason: "Chattering at 7.1 mm/s during start-up; the replay halves the occurrences.".into(),
        evidence: json!({"replayed_days": 30}),
        proposed_by: "agent:run/7".into(),
        run_id: Some(7),
        proposed_at: at,
    }
}

/// A pair on `broker` under a fresh name starting with `prefix`, its lease as the
/// tests' own.
fn spec(broker: String, prefix: &str) -> PairSpec {
    let run = format!("{prefix}{}", common::free_port());
    PairSpec { broker, run, lease_ms: LEASE_MS, renew_ms: 200, settings: String::new() }
}

async fn until(what: &str, limit: Duration, mut ok: impl FnMut() -> bool) -> Duration {
    let start = Instant::now();
    while !ok() {
        assert!(start.elapsed() < limit, "{what}: not within {limit:?}");
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    start.elapsed()
}

fn broker(url: Option<String>) -> String {
    url.unwrap_or_else(|| {
        let listen = format!("127.0.0.1:{}", common::free_port());
        twinops::broker::start(listen.parse().unwrap()).unwrap();
        format!("mqtt://{listen}")
    })
}

/// Two `twinops serve` of one pair on twins of their own, with an operator's and a
/// supervisor's API token on each, and a publisher of the SCADA's alarms.
struct TestPair {
    spec: PairSpec,
    /// Kept: the twins' directories live as long as the pair.
    plants: Vec<common::Plant>,
    tokens: Vec<String>,
    sups: Vec<String>,
    admins: Vec<String>,
    nodes: [failover::Node; 2],
    scada: Scada,
}

/// The SCADA of a test: a publisher of alarms on the pair's topic.
struct Scada {
    publisher: rumqttc::AsyncClient,
    topic: String,
    /// Points alarms can be raised on: (asset, sensor).
    points: Vec<(String, String)>,
}

impl Scada {
    /// Raises an alarm on point `k` under `event_id`, with `code`; its message is the
    /// event id, so a scripted model can tell which occurrences a run is about.
    async fn raise(&self, event_id: &str, k: usize, code: &str) {
        let (asset, sensor) = &self.points[k % self.points.len()];
        let ev = json!({"type": "alarm", "event_id": event_id, "asset_id": asset, "sensor_id": sensor,
                        "code": code, "severity": "high", "state": "raised",
                        "time": twinops::domain::Timestamp::now().to_rfc3339(), "message": event_id});
        self.publisher.publish(&self.topic, rumqttc::QoS::AtLeastOnce, false, ev.to_string()).await.unwrap();
    }
}

impl TestPair {
    fn start(spec: PairSpec) -> TestPair {
        let (wa, wb) = (common::free_port(), common::free_port());
        let plants: Vec<common::Plant> = (0..2).map(|_| common::Plant::new()).collect();
        let token = |p: &common::Plant, name: &str, role| {
            twinops::accounts::add_user(&p.store, name, role, "a long enough password", "test").unwrap();
            twinops::accounts::create_token(&p.store, name, "test", "test").unwrap().1
        };
        let tokens = plants.iter().map(|p| token(p, "op", twinops::domain::Role::Operator)).collect();
        let sups = plants.iter().map(|p| token(p, "sup", twinops::domain::Role::Supervisor)).collect();
        let admins = plants.iter().map(|p| token(p, "adm", twinops::domain::Role::Admin)).collect();
        let exe = std::path::Path::new(env!("CARGO_BIN_EXE_twinops"));
        let nodes = [
            failover::Node::start(exe, &spec, "a", &plants[0].db_path(), wa, Some(wb)).unwrap(),
            failover::Node::start(exe, &spec, "b", &plants[1].db_path(), wb, Some(wa)).unwrap(),
        ];
        let points: Vec<(String, String)> = {
            let db = plants[0].store.read().unwrap();
            let mut stmt = db.prepare("SELECT asset_id, id FROM sensors ORDER BY id LIMIT 12").unwrap();
            stmt.query_map([], |r| Ok((r.get(0)?, r.get(1)?))).unwrap().map(Result::unwrap).collect()
        };
        let opts = twinops::ingest::mqtt::options(
            &MqttConfig { url: spec.broker.clone(), ..Default::default() },
            &format!("pub-{}", spec.run),
        )
        .unwrap();
        let (publisher, mut pub_events) = rumqttc::AsyncClient::new(opts, 100);
        tokio::spawn(async move {
            loop {
                if pub_events.poll().await.is_err() {
                    tokio::time::sleep(Duration::from_millis(200)).await;
                }
            }
        });
        let scada = Scada { publisher, topic: spec.alarms_topic(), points };
        TestPair { spec, plants, tokens, sups, admins, nodes, scada }
    }
}

/// Two `twinops serve` of one pair while alarms arrive: the acting one is SIGKILLed
/// again and again (and restarted); every occurrence gets a note, on both twins, and
/// none gets two; the standby refuses writes, saying where to make them.
async fn two_daemons(url: Option<String>) {
    two_daemons_skewed(url, None).await;
}

/// [`two_daemons`], node b's wall clock put off by libfaketime: `skew` is the library
/// and the offset (`+30s`).
async fn two_daemons_skewed(url: Option<String>, skew: Option<(&str, &str)>) {
    let spec = spec(broker(url), "p");
    let notes = failover::hear_notes(&spec.broker, &spec.run).unwrap();
    let TestPair { spec, plants: _plants, tokens, sups, admins, mut nodes, scada } = TestPair::start(spec);
    if let Some((lib, offset)) = skew {
        // Node b again, its wall clock off from the first start on (the lease runs on
        // each node's monotonic clock; the journal takes the wall clock of the node
        // where a decision was made).
        nodes[1].kill();
        nodes[1].set_env("LD_PRELOAD", lib);
        nodes[1].set_env("FAKETIME", offset);
        nodes[1].set_env("TWINOPS_LOG", "info");
        nodes[1].restart().unwrap();
        // It is: its log's times run ahead.
        let ahead = || {
            let log = std::fs::read_to_string(nodes[1].log()).unwrap_or_default();
            let last = log
                .lines()
                .rev()
                .filter_map(|l| l.split_whitespace().next())
                .filter_map(|t| t.parse::<chrono::DateTime<chrono::Utc>>().ok())
                .next();
            last.is_some_and(|t| t > chrono::Utc::now() + chrono::Duration::seconds(20))
        };
        assert!(common::eventually(Duration::from_secs(15), ahead).await, "node b's clock is not ahead");
    }
    // The standby serves reads and refuses writes, pointing at the acting node.
    let active = failover::acting_one(&nodes, Duration::from_secs(30)).await.unwrap();
    let standby = &nodes[1 - active];
    let r = twinops::agent::http::Http::new()
        .client()
        .post(format!("http://127.0.0.1:{}/api/chat", standby.web))
        .bearer_auth(&tokens[1 - active])
        .json(&serde_json::json!({"message": "hello"}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 503);
    let why = r.text().await.unwrap();
    let there = format!("http://127.0.0.1:{}", nodes[active].web);
    assert!(why.contains("stands by") && why.contains(&there), "{why}");
    let pair = standby.pair().await.unwrap();
    assert_eq!((&pair["acting"], &pair["active_node"]), (&json!(false), &json!(nodes[active].name)));
    let Flood { events, actives, takeovers } = flood_through_kills(&mut nodes, &scada, &spec.run, 4, |_, _| ()).await;
    all_noted(&nodes, &events).await;
    // No occurrence in two notes, no note published twice.
    let t = failover::tally(&notes.lock().unwrap(), &events);
    assert!(t.published_twice.is_empty() && t.in_two_notes.is_empty() && t.notes > 0, "{t:?}");
    // Each kill handed over to the other node, within the issue's bound.
    assert!(actives.windows(2).all(|w| w[0] != w[1]), "the other node took over after each kill: {actives:?}");
    assert!(takeovers.iter().all(|t| *t < Duration::from_secs(10)), "{takeovers:?}");
    decisions_reach_both(&nodes, &tokens, &events).await;
    work_order_approved_on_the_standby(&nodes, &sups, (&scada.publisher, &spec.run)).await;
    accounts_reach_both(&nodes, &admins).await;
    command_line_reaches_both(&mut nodes).await;
    // Each node says how far behind the other is: level, once all has come through.
    let start = Instant::now();
    loop {
        let mut peers = Vec::new();
        for n in &nodes {
            peers.push(n.pair().await.map(|p| p["peer"].clone()).unwrap_or_default());
        }
        let level =
            |p: &serde_json::Value| p["online"] == true && p["decisions_behind"] == 0 && p["alarms_behind_s"] == 0;
        if peers.iter().all(level) {
            break;
        }
        assert!(start.elapsed() < Duration::from_secs(15), "not level: {peers:?}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Waits (up to 60 s) until every one of `events` has its note on both twins (the
/// standby keeps the acting one's); fails with each node's last log lines if not.
async fn all_noted(nodes: &[failover::Node], events: &[String]) {
    let mut missing = Vec::new();
    let settled = common::eventually(Duration::from_secs(60), || {
        missing = nodes.iter().flat_map(|n| n.without_note(events).unwrap()).collect();
        missing.is_empty()
    })
    .await;
    if !settled {
        for n in nodes {
            let log = std::fs::read_to_string(n.log()).unwrap_or_default();
            let tail: Vec<&str> = log.lines().rev().take(40).collect();
            eprintln!("--- {} (last lines, newest first)\n{}", n.log().display(), tail.join("\n"));
        }
        panic!("occurrences without a note: {missing:?}");
    }
}

/// What [`flood_through_kills`] raised and saw: the occurrences (event ids), the node
/// that acted in each round, and how long after each kill the other took over.
struct Flood {
    events: Vec<String>,
    actives: Vec<usize>,
    takeovers: Vec<Duration>,
}

/// `rounds` rounds of an alarm on each of the SCADA's points, 60 ms apart (code `T{round}`,
/// event ids `{run}-{round}-{k}`); halfway through each the acting node is SIGKILLed,
/// and it is started again once the other has taken over (a node back sooner may take
/// its lease back). `watch(acting, killing)` is called as each round starts and just
/// before its kill.
async fn flood_through_kills(
    nodes: &mut [failover::Node; 2],
    scada: &Scada,
    run: &str,
    rounds: usize,
    mut watch: impl FnMut(usize, bool),
) -> Flood {
    let mut flood = Flood { events: Vec::new(), actives: Vec::new(), takeovers: Vec::new() };
    for round in 0..rounds {
        let active = failover::acting_one(nodes, Duration::from_secs(30)).await.unwrap();
        flood.actives.push(active);
        watch(active, false);
        let mut killed = None;
        for k in 0..scada.points.len() {
            let event_id = format!("{run}-{round}-{k}");
            scada.raise(&event_id, k, &format!("T{round}")).await;
            flood.events.push(event_id);
            tokio::time::sleep(Duration::from_millis(60)).await;
            if k == scada.points.len() / 2 {
                watch(active, true);
                nodes[active].kill();
                killed = Some(Instant::now());
            }
        }
        failover::acting_one(nodes, Duration::from_secs(30)).await.unwrap();
        flood.takeovers.extend(killed.map(|k| k.elapsed()));
        nodes[active].restart().unwrap();
    }
    flood
}

/// A work order proposed on the pair's log (as the acting node's agent does) is on both
/// twins; a supervisor approves it on the standby's HMI; approving it again on the
/// acting node is a 409; both show it approved.
async fn work_order_approved_on_the_standby(
    nodes: &[failover::Node],
    sups: &[String],
    (publisher, run): (&rumqttc::AsyncClient, &str),
) {
    use twinops::approvals::pair::{KIND, Proposed, WorkOrderOp};
    use twinops::domain::{WorkAction, WorkPriority};
    let key = "day:2026-12-06/PUMP-007/inspect".to_string();
    let proposed = Proposed {
        key: key.clone(),
        asset_id: "PUMP-007".into(),
        alarm_event_id: None,
        action: WorkAction::Inspect,
        priority: WorkPriority::Normal,
        title: "Inspect PUMP-007 seal".into(),
        justification: "Seal leak reported on the morning round; look before it grows.".into(),
        evidence: Vec::new(),
        proposed_by: "agent:run/1".into(),
        run_id: Some(1),
        proposed_at: twinops::domain::Timestamp::now().unix(),
    };
    let decision = twinops::cluster::log::Decision {
        id: format!("t-{run}"),
        node: "t".into(),
        kind: KIND.into(),
        args: serde_json::to_value(WorkOrderOp::Propose(proposed)).unwrap(),
        actor: "agent:run/1".into(),
        at: twinops::domain::Timestamp::now().unix(),
    };
    let topic = format!("twinops/cluster/{run}/log");
    let body = serde_json::to_vec(&decision).unwrap();
    publisher.publish(topic, rumqttc::QoS::AtLeastOnce, false, body).await.unwrap();
    let row = |n: &failover::Node| -> Option<(i64, String)> {
        let db = rusqlite::Connection::open(n.db()).unwrap();
        db.query_row("SELECT id, status FROM work_orders WHERE idempotency_key = ?1", [&key], |r| {
            Ok((r.get(0)?, r.get(1)?))
        })
        .ok()
    };
    assert!(common::eventually(Duration::from_secs(10), || nodes.iter().all(|n| row(n).is_some())).await);
    let active = failover::acting_one(nodes, Duration::from_secs(30)).await.unwrap();
    let http = twinops::agent::http::Http::new();
    let approve = |i: usize| {
        let url = format!("http://127.0.0.1:{}/api/work_orders/{}/approve", nodes[i].web, row(&nodes[i]).unwrap().0);
        http.client().post(url).bearer_auth(&sups[i]).json(&json!({"reason": "crew on site"})).send()
    };
    let r = approve(1 - active).await.unwrap();
    assert_eq!(r.status().as_u16(), 200, "{}", r.text().await.unwrap());
    let again = approve(active).await.unwrap();
    assert_eq!(again.status().as_u16(), 409, "{}", again.text().await.unwrap());
    let approved = || nodes.iter().all(|n| row(n).is_some_and(|r| r.1 == "approved" || r.1 == "dispatched"));
    assert!(common::eventually(Duration::from_secs(10), approved).await);
}

/// Waits until both nodes have applied the same decisions (each applies every one):
/// what one has answered, the other then has too.
async fn level(nodes: &[failover::Node]) {
    let applied = |n: &failover::Node| -> std::collections::BTreeSet<String> {
        let db = rusqlite::Connection::open(n.db()).unwrap();
        let mut stmt = db.prepare("SELECT id FROM decisions WHERE status <> 202").unwrap();
        stmt.query_map([], |r| r.get(0)).unwrap().map(Result::unwrap).collect()
    };
    let level = common::eventually(Duration::from_secs(10), || applied(&nodes[0]) == applied(&nodes[1]));
    assert!(
        level.await,
        "the nodes did not come level: {:?}",
        applied(&nodes[0]).symmetric_difference(&applied(&nodes[1])).collect::<Vec<_>>()
    );
}

/// Calls `call` until it answers `want`, for up to 10 s: the last status.
async fn status_becomes<F>(want: u16, call: impl Fn() -> F) -> u16
where
    F: std::future::Future<Output = reqwest::Result<reqwest::Response>>,
{
    let started = Instant::now();
    loop {
        let status = call().await.map_or(0, |r| r.status().as_u16());
        if status == want || started.elapsed() > Duration::from_secs(10) {
            return status;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// An acknowledgement made on the standby and a shelving made on the acting node go
/// through the pair's log: both twins show them, journalled at the same time; the same
/// acknowledgement again is a 409 on either node.
async fn decisions_reach_both(nodes: &[failover::Node], tokens: &[String], events: &[String]) {
    let active = failover::acting_one(nodes, Duration::from_secs(30)).await.unwrap();
    let http = twinops::agent::http::Http::new();
    let local_id = |n: &failover::Node, event: &str| -> i64 {
        let db = rusqlite::Connection::open(n.db()).unwrap();
        db.query_row("SELECT id FROM alarms WHERE event_id = ?1", [event], |r| r.get(0)).unwrap()
    };
    let post = |i: usize, event: &str, action: &str, body: serde_json::Value| {
        let url = format!("http://127.0.0.1:{}/api/alarms/{}/{action}", nodes[i].web, local_id(&nodes[i], event));
        http.client().post(url).bearer_auth(&tokens[i]).json(&body).send()
    };
    let state = |n: &failover::Node, event: &str| -> (String, Option<i64>) {
        let db = rusqlite::Connection::open(n.db()).unwrap();
        db.query_row("SELECT state, acked_at FROM alarms WHERE event_id = ?1", [event], |r| Ok((r.get(0)?, r.get(1)?)))
            .unwrap()
    };
    let (acked, shelved) = (&events[0], &events[1]);
    let r = post(1 - active, acked, "ack", json!({})).await.unwrap();
    assert_eq!(r.status().as_u16(), 200, "{}", r.text().await.unwrap());
    let again = post(active, acked, "ack", json!({})).await.unwrap();
    assert_eq!(again.status().as_u16(), 409, "{}", again.text().await.unwrap());
    let r = post(active, shelved, "shelve", json!({"minutes": 30, "reason": "permit 4471"})).await.unwrap();
    assert_eq!(r.status().as_u16(), 200, "{}", r.text().await.unwrap());
    let settled = common::eventually(Duration::from_secs(10), || {
        nodes.iter().all(|n| state(n, acked).0 == "acknowledged" && state(n, shelved).0 == "shelved")
    })
    .await;
    assert!(settled, "{:?}", nodes.iter().map(|n| (state(n, acked), state(n, shelved))).collect::<Vec<_>>());
    assert_eq!(state(&nodes[0], acked).1, state(&nodes[1], acked).1, "journalled at the time it was made, on both");
}

#[tokio::test(flavor = "multi_thread")]
async fn embedded_broker_two_daemons_note_every_alarm_once_through_kills() {
    two_daemons(None).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn mosquitto_two_daemons_note_every_alarm_once_through_kills() {
    let Some(url) = common::external("TWINOPS_TEST_MQTT_URL", "a Mosquitto broker") else { return };
    two_daemons(Some(url)).await;
}

/// The same with one node's clock 30 s ahead (`TWINOPS_TEST_FAKETIME`: libfaketime's
/// library): nothing the pair decides rests on the two clocks agreeing.
#[tokio::test(flavor = "multi_thread")]
async fn mosquitto_two_daemons_with_one_clock_30_s_ahead() {
    let Some(url) = common::external("TWINOPS_TEST_MQTT_URL", "a Mosquitto broker") else { return };
    let Some(lib) = common::external("TWINOPS_TEST_FAKETIME", "libfaketime (libfaketime.so.1)") else { return };
    two_daemons_skewed(Some(url), Some((&lib, "+30s"))).await;
}

/// Of a pair that is Sparkplug's primary host, the STATE follows the acting node on a
/// real broker: online when it starts acting (and every edge node the twin knows is
/// asked for a rebirth), offline by its will when it dies, online again from the node
/// that takes over with a later timestamp, offline when that one stops acting.
async fn primary_host_follows_the_acting_node(url: Option<String>) {
    use twinops::cluster::primary;
    use twinops::sparkplug::SparkplugConfig;
    let mqtt = MqttConfig { url: broker(url), ..Default::default() };
    let host = format!("pair-host-{}", common::free_port());
    let sparkplug = Arc::new(SparkplugConfig {
        enabled: true,
        host_id: host.clone(),
        primary_host: true,
        rebirth: true,
        ..Default::default()
    });
    let plant = common::Plant::new();
    let edge = format!("edge-{host}");
    plant
        .store
        .writer()
        .call(move |c| -> Result<usize, twinops::store::StoreError> {
            Ok(c.execute(
                "INSERT INTO sparkplug_nodes (group_id, edge_node, seq, online, changed_at) VALUES ('G', ?1, 0, 1, 0)",
                [&edge],
            )?)
        })
        .unwrap();
    // What the broker carries on the STATE topic and to the edge node, heard apart.
    let opts = twinops::ingest::mqtt::options(&mqtt, &format!("watch-{host}")).unwrap();
    let (watcher, mut events) = rumqttc::AsyncClient::new(opts, 16);
    let heard = Arc::new(std::sync::Mutex::new(Vec::<(String, serde_json::Value)>::new()));
    let h = Arc::clone(&heard);
    let (state_topic, ncmd) = (format!("spBv1.0/STATE/{host}"), format!("spBv1.0/G/NCMD/edge-{host}"));
    let filters = [state_topic.clone(), ncmd.clone()];
    tokio::spawn(async move {
        while let Ok(e) = events.poll().await {
            match e {
                rumqttc::Event::Incoming(rumqttc::Incoming::ConnAck(_)) => {
                    for f in &filters {
                        watcher.subscribe(f, rumqttc::QoS::AtLeastOnce).await.unwrap();
                    }
                }
                rumqttc::Event::Incoming(rumqttc::Incoming::Publish(p)) => {
                    let v = serde_json::from_slice(&p.payload).unwrap_or(serde_json::Value::Null);
                    h.lock().unwrap().push((p.topic.clone(), v));
                }
                _ => {}
            }
        }
    });
    tokio::time::sleep(Duration::from_millis(300)).await;
    let states = || -> Vec<(bool, u64)> {
        let heard = heard.lock().unwrap();
        let s = heard.iter().filter(|(t, _)| *t == state_topic);
        s.map(|(_, v)| (v["online"] == true, v["timestamp"].as_u64().unwrap())).collect()
    };
    let node = |name: &str, acting: bool| {
        let (tx, rx) = watch::channel(acting);
        let (stop_tx, stop) = watch::channel(false);
        let who = (mqtt.clone(), format!("{host}-{name}"));
        let task = tokio::spawn(primary::run(Arc::clone(&sparkplug), who, plant.store.clone(), rx, stop));
        (tx, stop_tx, task)
    };
    let (_a, _a_stop, a_task) = node("a", true);
    let (b, _b_stop, _b_task) = node("b", false);
    until("a's STATE online", Duration::from_secs(10), || states().len() == 1).await;
    let ta = states()[0];
    assert!(ta.0, "{:?}", states());
    let rebirths = || heard.lock().unwrap().iter().filter(|(t, _)| *t == ncmd).count();
    until("the edge node asked for a rebirth", Duration::from_secs(10), || rebirths() == 1).await;
    a_task.abort(); // gone without a word
    until("a's will", Duration::from_secs(10), || states().len() == 2).await;
    assert_eq!(states()[1], (false, ta.1), "the will carries the birth's timestamp");
    b.send_replace(true);
    until("b's STATE online", Duration::from_secs(10), || states().len() == 3).await;
    let tb = states()[2];
    assert!(tb.0 && tb.1 > ta.1, "online, later than a's: {:?}", states());
    until("asked again on takeover", Duration::from_secs(10), || rebirths() == 2).await;
    b.send_replace(false);
    until("b says offline", Duration::from_secs(10), || states().len() == 4).await;
    assert_eq!(states()[3], (false, tb.1));
}

#[tokio::test(flavor = "multi_thread")]
async fn embedded_broker_primary_host_follows_the_acting_node() {
    primary_host_follows_the_acting_node(None).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn mosquitto_primary_host_follows_the_acting_node() {
    let Some(url) = common::external("TWINOPS_TEST_MQTT_URL", "a Mosquitto broker") else { return };
    primary_host_follows_the_acting_node(Some(url)).await;
}

/// A pair through a restart of its broker (Mosquitto with persistence, stopped as a
/// service manager stops it): while it is away both nodes serve reads, neither acts,
/// and a decision is refused with what to do; when it is back one node acts again, the
/// decision made before is on both twins, and every occurrence, before and after, has
/// its note on both, none in two notes.
#[tokio::test(flavor = "multi_thread")]
async fn mosquitto_a_pair_through_a_broker_restart() {
    let Some(bin) = common::external("TWINOPS_TEST_MOSQUITTO", "the mosquitto program") else { return };
    let dir = tempfile::tempdir().unwrap();
    let mut broker = common::OwnBroker::mosquitto(bin, dir.path()).await;
    let spec = spec(broker.url(), "r");
    let notes = failover::hear_notes(&spec.broker, &spec.run).unwrap();
    let pair = TestPair::start(spec);
    let (nodes, http) = (&pair.nodes, twinops::agent::http::Http::new());
    failover::acting_one(nodes, Duration::from_secs(30)).await.unwrap();
    let mut events = Vec::new();
    let raise = async |events: &mut Vec<String>, round: &str| {
        for k in 0..pair.scada.points.len() {
            let event_id = format!("{}-{round}-{k}", pair.spec.run);
            pair.scada.raise(&event_id, k, &format!("R{round}")).await;
            events.push(event_id);
        }
    };
    raise(&mut events, "before").await;
    let noted = |events: &[String]| nodes.iter().all(|n| n.without_note(events).unwrap().is_empty());
    assert!(common::eventually(Duration::from_secs(60), || noted(&events)).await, "notes before the restart");
    let ack = |i: usize, event: &str| {
        let db = rusqlite::Connection::open(nodes[i].db()).unwrap();
        let id: i64 = db.query_row("SELECT id FROM alarms WHERE event_id = ?1", [event], |r| r.get(0)).unwrap();
        let url = format!("http://127.0.0.1:{}/api/alarms/{id}/ack", nodes[i].web);
        http.client().post(url).bearer_auth(&pair.tokens[i]).send()
    };
    assert_eq!(ack(0, &events[0]).await.unwrap().status().as_u16(), 200);

    // Away: reads served, nobody acts, decisions refused.
    broker.stop();
    let idle = async || {
        for n in nodes {
            if n.pair().await.is_none_or(|p| p["acting"] == true) {
                return false;
            }
        }
        true
    };
    let start = Instant::now();
    while !idle().await {
        assert!(start.elapsed() < Duration::from_secs(10), "a node still acts with the broker away");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let refused = ack(1, &events[1]).await.unwrap();
    assert_eq!(refused.status().as_u16(), 503);
    assert!(refused.text().await.unwrap().contains("broker"));
    let r = http.client().get(format!("http://127.0.0.1:{}/api/alarms", nodes[1].web)).bearer_auth(&pair.tokens[1]);
    assert_eq!(r.send().await.unwrap().status().as_u16(), 200, "reads are served");

    // Back: one node acts; what came before and after is noted once, on both.
    broker.start().await;
    failover::acting_one(nodes, Duration::from_secs(30)).await.unwrap();
    raise(&mut events, "after").await;
    assert!(common::eventually(Duration::from_secs(60), || noted(&events)).await, "notes after the restart");
    let acked = |n: &failover::Node| {
        let db = rusqlite::Connection::open(n.db()).unwrap();
        db.query_row("SELECT state FROM alarms WHERE event_id = ?1", [&events[0]], |r| r.get::<_, String>(0)).unwrap()
    };
    assert!(nodes.iter().all(|n| acked(n) == "acknowledged"), "the decision made before is on both");
    let t = failover::tally(&notes.lock().unwrap(), &events);
    assert!(t.published_twice.is_empty() && t.in_two_notes.is_empty(), "{t:?}");
}

/// Two daemons, the acting one reaching the broker through a proxy that black-holes
/// its link (as a switch dropping its packets: no will is published) while alarms keep
/// coming, then closes it. The other takes over; the cut node stops acting before the
/// other starts (both nodes' `/readyz` sampled every 20 ms throughout: never both);
/// once the link heals, the cut node rejoins as standby, and every occurrence has its
/// note on both twins, none in two notes, none published twice.
async fn a_cut_link_between_daemons(url: Option<String>) {
    let spec = spec(broker(url), "cut");
    let proxy = Proxy::start(&spec.broker).await;
    let notes = failover::hear_notes(&spec.broker, &spec.run).unwrap();
    let mut pair = TestPair::start(spec);
    // Node a through the proxy, and acting.
    pair.nodes[0].kill();
    let config = std::fs::read_to_string(pair.nodes[0].config()).unwrap();
    std::fs::write(pair.nodes[0].config(), config.replace(&pair.spec.broker, &proxy.url)).unwrap();
    pair.nodes[0].restart().unwrap();
    if failover::acting_one(&pair.nodes, Duration::from_secs(30)).await.unwrap() == 1 {
        pair.nodes[1].kill();
        assert_eq!(failover::acting_one(&pair.nodes, Duration::from_secs(30)).await.unwrap(), 0);
        pair.nodes[1].restart().unwrap();
    }
    let (both, stop) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicBool::new(false)));
    let webs = pair.nodes.iter().map(|n| n.web).collect();
    let watch = tokio::spawn(failover::watch_both(webs, Arc::clone(&both), Arc::clone(&stop)));
    let mut events = Vec::new();
    for round in ["before", "cut", "healed"] {
        match round {
            "cut" => proxy.black_hole(),
            "healed" => proxy.close_and_heal(),
            _ => {}
        }
        for k in 0..pair.scada.points.len() {
            let event_id = format!("{}-{round}-{k}", pair.spec.run);
            pair.scada.raise(&event_id, k, &format!("C{round}")).await;
            events.push(event_id);
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        if round == "cut" {
            let other = failover::acting_one(&pair.nodes, Duration::from_secs(30)).await.unwrap();
            assert_eq!(other, 1, "the node with a working link took over");
        }
    }
    let rejoined = async || pair.nodes[0].pair().await.is_some_and(|p| p["active_node"] == "b" && p["acting"] == false);
    let started = Instant::now();
    while !rejoined().await {
        assert!(started.elapsed() < Duration::from_secs(30), "node a did not rejoin as standby");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    all_noted(&pair.nodes, &events).await;
    stop.store(true, Ordering::Relaxed);
    let samples = watch.await.unwrap();
    assert_eq!(both.load(Ordering::Relaxed), 0, "both nodes acted in some of {samples} samples");
    let t = failover::tally(&notes.lock().unwrap(), &events);
    assert!(t.published_twice.is_empty() && t.in_two_notes.is_empty(), "{t:?}");
}

#[tokio::test(flavor = "multi_thread")]
async fn embedded_broker_two_daemons_through_a_cut_link() {
    common::logs();
    a_cut_link_between_daemons(None).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn mosquitto_two_daemons_through_a_cut_link() {
    common::logs();
    let Some(url) = common::external("TWINOPS_TEST_MQTT_URL", "a Mosquitto broker") else { return };
    a_cut_link_between_daemons(Some(url)).await;
}

/// Both nodes of a pair stopped at once (SIGKILL) while alarms keep coming, then both
/// started again: the broker kept what came meanwhile for each node's session, one
/// node acts, and every occurrence, before, during and after, has its note on both
/// twins, none in two notes.
async fn both_restarted(url: Option<String>) {
    let spec = spec(broker(url), "both");
    let notes = failover::hear_notes(&spec.broker, &spec.run).unwrap();
    let mut pair = TestPair::start(spec);
    failover::acting_one(&pair.nodes, Duration::from_secs(30)).await.unwrap();
    let mut events = Vec::new();
    for round in ["before", "down", "after"] {
        if round == "down" {
            pair.nodes.iter_mut().for_each(failover::Node::kill);
        }
        for k in 0..pair.scada.points.len() {
            let event_id = format!("{}-{round}-{k}", pair.spec.run);
            pair.scada.raise(&event_id, k, &format!("B{round}")).await;
            events.push(event_id);
        }
        if round == "down" {
            for n in pair.nodes.iter_mut() {
                n.restart().unwrap();
            }
            failover::acting_one(&pair.nodes, Duration::from_secs(30)).await.unwrap();
        }
    }
    all_noted(&pair.nodes, &events).await;
    let t = failover::tally(&notes.lock().unwrap(), &events);
    assert!(t.published_twice.is_empty() && t.in_two_notes.is_empty(), "{t:?}");
}

/// A pair upgraded one node at a time, as the guide says: the standby is stopped
/// (SIGTERM), and started again (the new version) while the acting node works on,
/// alarms coming and an acknowledgement made meanwhile; once it is level, the acting
/// node is stopped the same way, the other takes over, and it comes back as the
/// standby. Every occurrence has its note on both twins, none in two notes, and the
/// acknowledgement made while one node was down is on both. (The same binary: what a
/// node of the older version does with a decision it does not know is
/// `a_decision_of_a_later_version_waits_for_the_upgrade`.)
async fn upgraded_one_node_at_a_time(url: Option<String>) {
    let spec = spec(broker(url), "up");
    let notes = failover::hear_notes(&spec.broker, &spec.run).unwrap();
    let mut pair = TestPair::start(spec);
    let first = failover::acting_one(&pair.nodes, Duration::from_secs(30)).await.unwrap();
    let (mut events, mut acked) = (Vec::new(), None);
    for (round, down) in [("standby", 1 - first), ("acting", first)] {
        pair.nodes[down].stop();
        let acting = failover::acting_one(&pair.nodes, Duration::from_secs(30)).await.unwrap();
        assert_ne!(acting, down, "the node still up acts");
        // A node stopped says it is gone (a clean disconnect drops its will): the other
        // shows it offline, not as it last said.
        let peer = || pair.nodes[acting].pair();
        let gone = async {
            while peer().await.is_none_or(|p| p["peer"]["online"] != false) {
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        };
        let said = tokio::time::timeout(Duration::from_secs(5), gone).await;
        assert!(said.is_ok(), "the {round} node stopped, and the other shows: {:?}", peer().await);
        for k in 0..pair.scada.points.len() {
            let event_id = format!("{}-{round}-{k}", pair.spec.run);
            pair.scada.raise(&event_id, k, &format!("U{round}")).await;
            events.push(event_id);
        }
        if acked.is_none() {
            // Acknowledged on the acting node while the other is down.
            let (node, event) = (&pair.nodes[acting], events[0].clone());
            let id = || -> Option<i64> {
                let db = rusqlite::Connection::open(node.db()).unwrap();
                db.query_row("SELECT id FROM alarms WHERE event_id = ?1", [&event], |r| r.get(0)).ok()
            };
            assert!(common::eventually(Duration::from_secs(10), || id().is_some()).await);
            let url = format!("http://127.0.0.1:{}/api/alarms/{}/ack", node.web, id().unwrap());
            let r = reqwest::Client::new().post(url).bearer_auth(&pair.tokens[acting]).send().await.unwrap();
            assert_eq!(r.status().as_u16(), 200, "{}", r.text().await.unwrap());
            acked = Some(event);
        }
        pair.nodes[down].restart().unwrap();
        level(&pair.nodes).await;
    }
    all_noted(&pair.nodes, &events).await;
    let t = failover::tally(&notes.lock().unwrap(), &events);
    assert!(t.published_twice.is_empty() && t.in_two_notes.is_empty(), "{t:?}");
    let state = |n: &failover::Node| -> String {
        let db = rusqlite::Connection::open(n.db()).unwrap();
        db.query_row("SELECT state FROM alarms WHERE event_id = ?1", [acked.as_ref().unwrap()], |r| r.get(0)).unwrap()
    };
    assert!(pair.nodes.iter().all(|n| state(n) == "acknowledged"), "the acknowledgement made meanwhile is on both");
}

/// `twinops switchover` beside the acting node (as its command line is run) while
/// alarms come: what it says and does.
fn switchover(n: &failover::Node) -> (bool, String) {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_twinops"))
        .arg("--db")
        .arg(n.db())
        .arg("--config")
        .arg(n.config())
        .arg("switchover")
        .output()
        .unwrap();
    (out.status.success(), format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr)))
}

/// A planned switchover (`twinops switchover`) while alarms come: the other node acts,
/// as the command says; then back again from the other side. Every occurrence is noted
/// on both twins, none twice. With the other node stopped it is refused, saying why,
/// and the acting node goes on acting.
async fn switched_over_and_back(url: Option<String>) {
    let spec = spec(broker(url), "w");
    let notes = failover::hear_notes(&spec.broker, &spec.run).unwrap();
    let mut pair = TestPair::start(spec);
    let mut events = Vec::new();
    for round in 0..2 {
        let acting = failover::acting_one(&pair.nodes, Duration::from_secs(30)).await.unwrap();
        level(&pair.nodes).await;
        for k in 0..6 {
            let event_id = format!("{}-{round}-{k}", pair.spec.run);
            pair.scada.raise(&event_id, k, &format!("W{round}")).await;
            events.push(event_id);
            tokio::time::sleep(Duration::from_millis(60)).await;
        }
        let (ok, said) = switchover(&pair.nodes[acting]);
        let other = &pair.nodes[1 - acting];
        assert!(ok && said.contains(&format!("node {} holds the lease", other.name)), "{said}");
        let now = failover::acting_one(&pair.nodes, Duration::from_secs(10)).await.unwrap();
        assert_eq!(now, 1 - acting, "{said}");
    }
    all_noted(&pair.nodes, &events).await;
    let t = failover::tally(&notes.lock().unwrap(), &events);
    assert!(t.published_twice.is_empty() && t.in_two_notes.is_empty() && t.notes > 0, "{t:?}");
    let acting = failover::acting_one(&pair.nodes, Duration::from_secs(10)).await.unwrap();
    pair.nodes[1 - acting].stop();
    let (ok, said) = switchover(&pair.nodes[acting]);
    assert!(!ok && said.contains("not online"), "{said}");
    assert!(pair.nodes[acting].acting().await, "the acting node goes on acting");
}

#[tokio::test(flavor = "multi_thread")]
async fn embedded_broker_switched_over_and_back() {
    switched_over_and_back(None).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn mosquitto_switched_over_and_back() {
    let Some(url) = common::external("TWINOPS_TEST_MQTT_URL", "a Mosquitto broker") else { return };
    switched_over_and_back(Some(url)).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn mosquitto_upgraded_one_node_at_a_time() {
    let Some(url) = common::external("TWINOPS_TEST_MQTT_URL", "a Mosquitto broker") else { return };
    upgraded_one_node_at_a_time(Some(url)).await;
}

/// A node away longer than the broker kept its sessions (wiped while it is stopped, as
/// a broker restarted without persistence loses them) while alarms come and a decision
/// is made: at its start it copies the other node's twin (its own kept aside) and has
/// every occurrence, its note and the decision; none is noted twice. Restarted with its
/// sessions whole, it copies nothing. On Mosquitto only: the embedded broker (rumqttd)
/// does not say in its ConnAck whether it kept a session, and a pair runs on the site's
/// broker anyway.
async fn a_node_away_longer_than_the_broker_keeps(url: Option<String>) {
    let spec = spec(broker(url), "away");
    let notes = failover::hear_notes(&spec.broker, &spec.run).unwrap();
    let mut pair = TestPair::start(spec);
    let a = failover::acting_one(&pair.nodes, Duration::from_secs(30)).await.unwrap();
    let s = 1 - a;
    let copies = |n: &failover::Node| -> usize {
        let dir = std::fs::read_dir(n.db().parent().unwrap()).unwrap();
        dir.filter(|e| e.as_ref().unwrap().file_name().to_string_lossy().contains("before-copy")).count()
    };
    // Each node's first admin was made before the pair: node a's token works on a.
    pair.nodes[s].set_env("TWINOPS_CLUSTER_PEER_TOKEN", &pair.admins[a]);
    pair.nodes[s].set_env("TWINOPS_LOG", "warn,twinops::app=info");
    pair.nodes[s].stop();
    pair.nodes[s].restart().unwrap();
    level(&pair.nodes).await;
    assert_eq!(copies(&pair.nodes[s]), 0, "its sessions were whole: nothing copied");

    pair.nodes[s].stop();
    let (run, name) = (pair.spec.run.clone(), pair.nodes[s].name.clone());
    for client in [
        format!("twinops-cluster-{run}-{name}-log"),
        format!("twinops-{run}-{name}"),
        format!("twinops-{run}-{name}-peer-notes"),
    ] {
        forget_session(&pair.spec.broker, &client).await;
    }
    let mut events = Vec::new();
    for k in 0..pair.scada.points.len() {
        let event_id = format!("{run}-away-{k}");
        pair.scada.raise(&event_id, k, "AWAY").await;
        events.push(event_id);
    }
    let acting = &pair.nodes[a];
    let id = || -> Option<i64> {
        let db = rusqlite::Connection::open(acting.db()).unwrap();
        db.query_row("SELECT id FROM alarms WHERE event_id = ?1", [&events[0]], |r| r.get(0)).ok()
    };
    assert!(common::eventually(Duration::from_secs(10), || id().is_some()).await);
    let url = format!("http://127.0.0.1:{}/api/alarms/{}/ack", acting.web, id().unwrap());
    let r = reqwest::Client::new().post(url).bearer_auth(&pair.tokens[a]).send().await.unwrap();
    assert_eq!(r.status().as_u16(), 200, "{}", r.text().await.unwrap());
    let noted = || pair.nodes[a].without_note(&events).unwrap().is_empty();
    assert!(common::eventually(Duration::from_secs(30), noted).await, "noted on the acting node");
    // At once: what the acting node applied just now, its state on the broker says within
    // the second or two the node away listens for it.
    pair.nodes[s].restart().unwrap();
    let noted = || pair.nodes.iter().all(|n| n.without_note(&events).unwrap().is_empty());
    let ok = common::eventually(Duration::from_secs(60), noted).await;
    let log = std::fs::read_to_string(pair.nodes[s].log()).unwrap_or_default();
    assert!(ok, "every occurrence noted on both; node {}'s log:\n{log}", pair.nodes[s].name);
    assert_eq!(copies(&pair.nodes[s]), 1, "its own twin kept aside");
    let state = |n: &failover::Node| -> String {
        let db = rusqlite::Connection::open(n.db()).unwrap();
        db.query_row("SELECT state FROM alarms WHERE event_id = ?1", [&events[0]], |r| r.get(0)).unwrap()
    };
    assert_eq!(state(&pair.nodes[s]), "acknowledged", "the decision made while it was away");
    level(&pair.nodes).await;
    let t = failover::tally(&notes.lock().unwrap(), &events);
    assert!(t.published_twice.is_empty() && t.in_two_notes.is_empty(), "{t:?}");
}

/// Connects as `client_id` on a clean session and leaves: the broker forgets what it
/// kept for that client.
async fn forget_session(url: &str, client_id: &str) {
    let mut opts =
        twinops::ingest::mqtt::options(&MqttConfig { url: url.into(), ..Default::default() }, client_id).unwrap();
    opts.set_clean_session(true);
    let (client, mut events) = rumqttc::AsyncClient::new(opts, 10);
    loop {
        let event = tokio::time::timeout(Duration::from_secs(10), events.poll()).await.unwrap().unwrap();
        if matches!(event, rumqttc::Event::Incoming(rumqttc::Incoming::ConnAck(_))) {
            break;
        }
    }
    client.disconnect().await.unwrap();
    let _ = tokio::time::timeout(Duration::from_secs(1), async { while events.poll().await.is_ok() {} }).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn mosquitto_a_node_away_longer_than_the_broker_keeps_copies_the_other() {
    let Some(url) = common::external("TWINOPS_TEST_MQTT_URL", "a Mosquitto broker") else { return };
    a_node_away_longer_than_the_broker_keeps(Some(url)).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn embedded_broker_both_nodes_restarted() {
    both_restarted(None).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn mosquitto_both_nodes_restarted() {
    let Some(url) = common::external("TWINOPS_TEST_MQTT_URL", "a Mosquitto broker") else { return };
    both_restarted(Some(url)).await;
}
