//! Sparkplug B against an implementation twinops did not write: Eclipse Tahu's
//! JavaScript edge client (`sparkplug-client` on npm, driven by `tests/sparkplug/edge.js`)
//! through Mosquitto. Needs `TWINOPS_TEST_MQTT_URL` (Mosquitto),
//! `TWINOPS_TEST_SPARKPLUG_JS` (a folder holding `node_modules/sparkplug-client`) and
//! `TWINOPS_TEST_NODE` (node); `.ci/run` provides all three.

mod common;

use std::path::Path;
use std::process::Stdio;
use std::time::Duration;

use common::{Plant, eventually};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader, Lines};
use tokio::process::{Child, ChildStdin, ChildStdout, Command};
use twinops::app::{Daemon, ServeOptions};
use twinops::config::Config;

struct Externals {
    mqtt: String,
    js: String,
    node: String,
}

fn externals() -> Option<Externals> {
    Some(Externals {
        mqtt: common::external("TWINOPS_TEST_MQTT_URL", "a Mosquitto broker")?,
        js: common::external(
            "TWINOPS_TEST_SPARKPLUG_JS",
            "a folder holding node_modules/sparkplug-client (npm install sparkplug-client@3.2.4 there)",
        )?,
        node: common::external("TWINOPS_TEST_NODE", "Node.js (e.g. /usr/bin/node)")?,
    })
}

/// Eclipse Tahu's edge node, talking on stdin and stdout.
struct Edge {
    child: Child,
    stdin: ChildStdin,
    lines: Lines<BufReader<ChildStdout>>,
}

impl Edge {
    fn spawn(x: &Externals, group: &str) -> Edge {
        let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/sparkplug/edge.js");
        let mut child = Command::new(&x.node)
            .arg(script)
            .args([&x.mqtt, group, "GW-1", "PLC-3"])
            .env("NODE_PATH", Path::new(&x.js).join("node_modules"))
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .kill_on_drop(true)
            .spawn()
            .expect("node starts");
        let stdin = child.stdin.take().unwrap();
        let lines = BufReader::new(child.stdout.take().unwrap()).lines();
        Edge { child, stdin, lines }
    }

    async fn say(&mut self, line: &str) {
        self.stdin.write_all(format!("{line}\n").as_bytes()).await.unwrap();
        self.stdin.flush().await.unwrap();
    }

    /// Waits for the edge node to print `want`.
    async fn heard(&mut self, want: &str, limit: Duration) -> bool {
        tokio::time::timeout(limit, async {
            while let Ok(Some(line)) = self.lines.next_line().await {
                if line.trim() == want {
                    return true;
                }
            }
            false
        })
        .await
        .unwrap_or(false)
    }

    /// SIGKILL: the broker publishes its will, the NDEATH.
    async fn kill(mut self) {
        self.child.kill().await.unwrap();
    }
}

async fn daemon(p: &Plant, x: &Externals, run: &str) -> Daemon {
    let path = common::sparkplug_config(p, &x.mqtt, run);
    let config = Config::load(&path, &|_| None).unwrap();
    let opts = ServeOptions { config, db: p.db_path(), demo: false, seed_dir: common::seed_dir() };
    let daemon = Daemon::start_on(p.store.clone(), opts).await.unwrap();
    common::until_subscribed(&daemon).await;
    daemon
}

/// Publishes `payloads` at QoS 1 with a client that sends up to 16 MiB, and waits for
/// the broker's acknowledgements.
async fn publish_large(url: &str, topic: &str, payloads: Vec<Vec<u8>>) {
    let mut opts = twinops::ingest::mqtt::options(
        &twinops::config::MqttConfig { url: url.into(), ..Default::default() },
        &format!("junk-{}", common::free_port()),
    )
    .unwrap();
    opts.set_clean_session(true);
    opts.set_max_packet_size(16 << 20, 16 << 20);
    let (client, mut eventloop) = rumqttc::AsyncClient::new(opts, 10);
    let n = payloads.len();
    for payload in payloads {
        client.publish(topic, rumqttc::QoS::AtLeastOnce, false, payload).await.unwrap();
    }
    let acked = tokio::time::timeout(Duration::from_secs(30), async {
        let mut acked = 0;
        while acked < n {
            if let Ok(rumqttc::Event::Incoming(rumqttc::Packet::PubAck(_))) = eventloop.poll().await {
                acked += 1;
            }
        }
    })
    .await;
    assert!(acked.is_ok(), "the broker took the payloads");
}

/// The retained message on `topic`, as a new subscriber gets it.
async fn retained(url: &str, topic: &str) -> Option<String> {
    let opts = twinops::ingest::mqtt::options(
        &twinops::config::MqttConfig { url: url.into(), ..Default::default() },
        &format!("state-reader-{}", common::free_port()),
    )
    .unwrap();
    let mut opts = opts;
    opts.set_clean_session(true);
    let (client, mut eventloop) = rumqttc::AsyncClient::new(opts, 10);
    client.subscribe(topic, rumqttc::QoS::AtLeastOnce).await.unwrap();
    tokio::time::timeout(Duration::from_secs(10), async {
        loop {
            if let Ok(rumqttc::Event::Incoming(rumqttc::Packet::Publish(p))) = eventloop.poll().await {
                return String::from_utf8(p.payload.to_vec()).ok();
            }
        }
    })
    .await
    .ok()
    .flatten()
}

/// Births build the twin; data land as readings; a limit crossing raises an alarm that
/// gets a note; a forced sequence gap gets a rebirth request that Tahu's client obeys;
/// killing the edge node (its will is the NDEATH) raises communication loss, and its
/// rebirth clears it; a burst of data every 5 ms is stored whole.
#[tokio::test(flavor = "multi_thread")]
async fn tahus_edge_node_feeds_the_twin() {
    let Some(x) = externals() else { return };
    let p = Plant::new();
    let run = format!("sp{}", common::free_port());
    let daemon = daemon(&p, &x, &run).await;
    let state = retained(&x.mqtt, &format!("spBv1.0/STATE/{run}")).await.expect("a retained STATE");
    assert!(state.contains("\"online\":true"), "{state}");

    let mut edge = Edge::spawn(&x, &run);
    assert!(edge.heard("born", Duration::from_secs(30)).await, "Tahu's client connected and sent its births");
    let pressure =
        "SELECT count(*) FROM sensors WHERE id = 'PLC-3/Inputs/Discharge_Pressure' AND unit = 'bar' AND limit_hh = 6";
    assert!(eventually(Duration::from_secs(20), || p.count(pressure) == 1).await, "the DBIRTH built the sensor");
    assert_eq!(p.count(&format!("SELECT count(*) FROM assets WHERE id = 'PLC-3' AND station_id = '{run}'")), 1);

    edge.say("data 6.5").await;
    let raised = "SELECT count(*) FROM alarms WHERE asset_id = 'PLC-3' AND sensor_id = 'PLC-3/Inputs/Discharge_Pressure' AND cleared_at IS NULL";
    assert!(
        eventually(Duration::from_secs(20), || p.count(raised) >= 1).await,
        "HIHI from the limits; dead letters: {}; readings of it: {}",
        p.text("SELECT coalesce(group_concat(reason || ': ' || detail, ' | '), '') FROM dead_letters"),
        p.count("SELECT count(*) FROM readings WHERE sensor_key = (SELECT key FROM sensors WHERE id = 'PLC-3/Inputs/Discharge_Pressure')")
    );
    let noted = "SELECT count(*) FROM notes WHERE kind = 'triage' AND alarm_id IN (SELECT id FROM alarms WHERE asset_id = 'PLC-3')";
    assert!(eventually(Duration::from_secs(60), || p.count(noted) >= 1).await, "the alarm got a note");

    edge.say("gap").await;
    assert!(edge.heard("rebirth", Duration::from_secs(20)).await, "a sequence gap gets a rebirth request");

    edge.kill().await;
    let lost = "SELECT count(*) FROM alarms WHERE code = 'COMM_LOSS' AND asset_id = 'PLC-3' AND cleared_at IS NULL";
    assert!(eventually(Duration::from_secs(30), || p.count(lost) == 1).await, "its will raised communication loss");
    assert!(p.count("SELECT count(*) FROM sensors WHERE id LIKE 'PLC-3/%' AND stale_since IS NOT NULL") >= 2);

    let mut edge = Edge::spawn(&x, &run);
    assert!(edge.heard("born", Duration::from_secs(30)).await);
    assert!(eventually(Duration::from_secs(20), || p.count(lost) == 0).await, "its rebirth cleared it");

    // Bad input over the broker: bytes that are not protobuf, and 10 MB of them.
    let mut junk = vec![0xffu8; 16];
    junk.extend((0..4096u32).map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8));
    let topic = format!("spBv1.0/{run}/DDATA/GW-1/PLC-3");
    publish_large(&x.mqtt, &topic, vec![junk, vec![0xff; 10 << 20]]).await;
    let refused = "SELECT count(*) FROM dead_letters WHERE reason = 'malformed' AND topic LIKE 'spBv1.0/%'";
    assert!(
        eventually(Duration::from_secs(30), || p.count(refused) == 2).await,
        "both dead-lettered: {}",
        p.count(refused)
    );
    edge.say("data 4.4").await;
    let after = "SELECT count(*) FROM readings WHERE value = 4.4 AND sensor_key = (SELECT key FROM sensors WHERE id = 'PLC-3/Inputs/Discharge_Pressure')";
    assert!(eventually(Duration::from_secs(20), || p.count(after) == 1).await, "still ingesting after them");

    edge.say("burst 400 5").await;
    assert!(edge.heard("sent 400", Duration::from_secs(30)).await);
    let flow = "SELECT count(DISTINCT value) FROM readings WHERE value BETWEEN 1 AND 400 AND sensor_key = \
                (SELECT key FROM sensors WHERE id = 'PLC-3/Flow')";
    assert!(eventually(Duration::from_secs(30), || p.count(flow) == 400).await, "stored {} of 400", p.count(flow));
    edge.kill().await;
    daemon.shutdown().await;
}

/// STATE: the retained online message while twinops runs, and the will on a daemon
/// killed with SIGKILL, so gateways buffer while it is away.
#[tokio::test(flavor = "multi_thread")]
async fn a_killed_daemon_leaves_state_offline() {
    let Some(x) = externals() else { return };
    let p = Plant::new();
    let run = format!("st{}", common::free_port());
    let config = common::sparkplug_config(&p, &x.mqtt, &run);
    let mut daemon = common::serve_process(&p, &config);
    let topic = format!("spBv1.0/STATE/{run}");
    let mut online = None;
    for _ in 0..30 {
        online = retained(&x.mqtt, &topic).await;
        if online.is_some() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    let online = online.expect("STATE published on connect");
    assert!(online.contains("\"online\":true"), "{online}");
    daemon.kill().unwrap();
    daemon.wait().unwrap();
    let offline =
        eventually_text(|| async { retained(&x.mqtt, &topic).await }, |s| s.contains("\"online\":false")).await;
    let offline = offline.expect("the will said offline");
    let stamp = |s: &str| serde_json::from_str::<serde_json::Value>(s).unwrap()["timestamp"].clone();
    assert_eq!(stamp(&offline), stamp(&online), "the will carries the birth's timestamp");
}

async fn eventually_text<F, Fut>(mut get: F, ok: impl Fn(&str) -> bool) -> Option<String>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<String>>,
{
    for _ in 0..40 {
        if let Some(s) = get().await
            && ok(&s)
        {
            return Some(s);
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    None
}
