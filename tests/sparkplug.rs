//! Sparkplug B as a host application, message by message through ingest's transaction:
//! births build the twin, data resolve by alias, sequence gaps and unknown aliases ask
//! for a rebirth, deaths raise communication loss and the next birth clears it, and
//! bad input is dead-lettered with its reason. The payloads here are encoded with the
//! generated prost types; `sparkplug_interop.rs` drives Eclipse Tahu's own client.

mod common;

use std::sync::Arc;
use std::time::Duration;

use prost::Message as _;
use tempfile::TempDir;
use twinops::domain::Timestamp;
use twinops::ingest::{self, IngestPolicy, MessageEffect};
use twinops::sparkplug::proto::payload::{Metric, PropertySet, PropertyValue, metric, property_value};
use twinops::sparkplug::{Payload, SparkplugConfig};
use twinops::store::Store;

const DOUBLE: u32 = 10;
const STRING: u32 = 12;
const UINT64: u32 = 8;
const T0: u64 = 1_796_040_000_000;

struct Host {
    _dir: TempDir,
    path: std::path::PathBuf,
    store: Store,
    policy: IngestPolicy,
}

impl Host {
    fn new(config: SparkplugConfig) -> Host {
        let dir = TempDir::new().unwrap();
        let path = dir.path().join("twin.db");
        let store = Store::open(&path).unwrap();
        let policy = IngestPolicy { max_ahead_s: None, sparkplug: Some(Arc::new(config)), ..IngestPolicy::default() };
        Host { _dir: dir, path, store, policy }
    }

    fn send(&self, topic: &str, payload: &Payload) -> MessageEffect {
        self.send_bytes(topic, &payload.encode_to_vec())
    }

    fn send_bytes(&self, topic: &str, bytes: &[u8]) -> MessageEffect {
        ingest::apply(
            self.store.writer(),
            topic,
            bytes,
            Timestamp::from_unix((T0 / 1000) as i64 + 5),
            self.policy.clone(),
        )
        .unwrap()
    }

    fn count(&self, sql: &str) -> i64 {
        self.store.read().unwrap().query_row(sql, [], |r| r.get(0)).unwrap()
    }

    fn tool(&self, name: &str, args: serde_json::Value) -> serde_json::Value {
        let (docs, now) = (twinops::rag::DocIndex::new(), Timestamp::from_unix((T0 / 1000) as i64 + 600));
        let caller = twinops::approvals::Proposer::Run(1);
        let out =
            twinops::tools::with_context(&self.store, &docs, now, caller, |ctx| twinops::tools::call(ctx, name, args))
                .unwrap();
        assert!(!out.is_error, "{}", out.content);
        serde_json::from_str(&out.content).unwrap()
    }

    fn text(&self, sql: &str) -> String {
        self.store.read().unwrap().query_row(sql, [], |r| r.get(0)).unwrap()
    }
}

fn double(name: &str, alias: u64, value: f64) -> Metric {
    Metric {
        name: Some(name.into()),
        alias: Some(alias),
        datatype: Some(DOUBLE),
        value: Some(metric::Value::DoubleValue(value)),
        ..Metric::default()
    }
}

fn by_alias(alias: u64, value: f64, at: u64) -> Metric {
    Metric {
        alias: Some(alias),
        timestamp: Some(at),
        datatype: Some(DOUBLE),
        value: Some(metric::Value::DoubleValue(value)),
        ..Metric::default()
    }
}

fn properties(pairs: &[(&str, property_value::Value)]) -> PropertySet {
    PropertySet {
        keys: pairs.iter().map(|(k, _)| k.to_string()).collect(),
        values: pairs
            .iter()
            .map(|(_, v)| PropertyValue { r#type: None, is_null: None, value: Some(v.clone()) })
            .collect(),
    }
}

fn bd_seq(n: u64) -> Metric {
    Metric {
        name: Some("bdSeq".into()),
        datatype: Some(UINT64),
        value: Some(metric::Value::LongValue(n)),
        ..Metric::default()
    }
}

fn payload(seq: u64, at: u64, metrics: Vec<Metric>) -> Payload {
    Payload { timestamp: Some(at), seq: Some(seq), metrics, ..Payload::default() }
}

/// A pressure transmitter with its unit and limits in properties, and a text metric.
fn device_birth(seq: u64) -> Payload {
    let mut pressure = double("Inputs/Discharge Pressure", 1, 4.1);
    pressure.properties = Some(properties(&[
        ("engUnit", property_value::Value::StringValue("bar".into())),
        ("engLow", property_value::Value::DoubleValue(0.0)),
        ("engHigh", property_value::Value::DoubleValue(10.0)),
        ("hi", property_value::Value::DoubleValue(5.0)),
        ("hihi", property_value::Value::DoubleValue(6.0)),
        ("deadband", property_value::Value::DoubleValue(0.1)),
    ]));
    let status = Metric {
        name: Some("Status".into()),
        alias: Some(2),
        datatype: Some(STRING),
        value: Some(metric::Value::StringValue("Running".into())),
        ..Metric::default()
    };
    payload(seq, T0, vec![pressure, status, double("Flow", 3, 41.0)])
}

fn born(h: &Host) {
    h.send("spBv1.0/North/NBIRTH/GW-1", &payload(0, T0, vec![bd_seq(0), double("Uptime", 10, 3600.0)]));
    h.send("spBv1.0/North/DBIRTH/GW-1/PLC-3", &device_birth(1));
}

#[test]
fn births_build_the_twin_and_data_resolve_by_alias() {
    let h = Host::new(SparkplugConfig { enabled: true, ..SparkplugConfig::default() });
    born(&h);
    assert_eq!(
        h.count("SELECT count(*) FROM assets WHERE id = 'PLC-3' AND kind = 'device' AND station_id = 'North'"),
        1
    );
    assert_eq!(h.count("SELECT count(*) FROM assets WHERE id = 'GW-1' AND kind = 'edge_node'"), 1);
    assert_eq!(
        h.text("SELECT unit || ' ' || range_low || '-' || range_high || ' ' || limit_h || ' ' || limit_hh || ' ' || alarm_source FROM sensors WHERE id = 'PLC-3/Inputs/Discharge_Pressure'"),
        "bar 0.0-10.0 5.0 6.0 limits"
    );
    assert_eq!(h.count("SELECT count(*) FROM sensors WHERE id LIKE 'PLC-3/%'"), 2, "the text metric is not a sensor");
    assert_eq!(
        h.count("SELECT count(*) FROM dead_letters WHERE reason = 'unsupported' AND detail LIKE '%''Status'' is of type String%'"),
        1
    );
    assert_eq!(h.count("SELECT count(*) FROM audit_log WHERE action = 'plant_import' AND actor = 'sparkplug'"), 2);
    assert_eq!(h.count("SELECT count(*) FROM readings"), 3, "the values born are readings");

    let data = payload(2, T0 + 60_000, vec![by_alias(1, 4.4, T0 + 60_000), by_alias(3, 40.0, T0 + 60_000)]);
    let e = h.send("spBv1.0/North/DDATA/GW-1/PLC-3", &data);
    assert_eq!((e.readings, e.dead_letters, e.rebirths.len()), (2, 0, 0), "{e:?}");
    // Past HIHI: the limits raise alarms like JSON telemetry does.
    let e = h.send("spBv1.0/North/DDATA/GW-1/PLC-3", &payload(3, T0 + 120_000, vec![by_alias(1, 6.5, T0 + 120_000)]));
    assert_eq!(e.alarms.len(), 2, "HI and HIHI: {e:?}");
    assert_eq!(h.count("SELECT count(*) FROM alarms WHERE asset_id = 'PLC-3' AND cleared_at IS NULL"), 2);

    // Store-and-forward history is stored and never raises live alarms.
    let mut old = by_alias(3, 99.0, T0 - 3_600_000);
    old.is_historical = Some(true);
    let mut again = by_alias(1, 9.9, T0 - 3_600_000);
    again.is_historical = Some(true);
    let e = h.send("spBv1.0/North/DDATA/GW-1/PLC-3", &payload(4, T0 + 130_000, vec![old, again]));
    assert_eq!((e.readings, e.alarms.len()), (2, 0), "{e:?}");

    // Re-encoded by the same name after a restart of the daemon: the session is in the
    // database, so the broker's backlog resolves without a rebirth.
    let Host { _dir, path, store, policy } = h;
    drop(store);
    let h = Host { store: Store::open(&path).unwrap(), _dir, path, policy };
    let e = h.send("spBv1.0/North/DDATA/GW-1/PLC-3", &payload(5, T0 + 180_000, vec![by_alias(3, 42.0, T0 + 180_000)]));
    assert_eq!((e.readings, e.dead_letters, e.rebirths.len()), (1, 0, 0), "{e:?}");
}

/// Sparkplug stamps milliseconds: values 5 ms apart are each a reading.
#[test]
fn milliseconds_are_kept() {
    let h = Host::new(SparkplugConfig { enabled: true, ..SparkplugConfig::default() });
    born(&h);
    let at = T0 + 60_000;
    let values: Vec<Metric> = (0..200).map(|i| by_alias(3, i as f64, at + 5 * i)).collect();
    let e = h.send("spBv1.0/North/DDATA/GW-1/PLC-3", &payload(2, at, values));
    assert_eq!((e.readings, e.duplicate_readings), (200, 0), "one second, 200 readings");
    let stored = "SELECT count(*) FROM readings WHERE sensor_key = (SELECT key FROM sensors WHERE id = 'PLC-3/Flow') AND ts % 1000 <> 0";
    assert_eq!(h.count(stored), 199, "their milliseconds kept (the first falls on the second)");
    let hour = "SELECT n FROM readings_hourly WHERE sensor_key = (SELECT key FROM sensors WHERE id = 'PLC-3/Flow') AND hour = 1796040000";
    assert_eq!(h.count(hour), 201, "the rollup counts them all, with the value born");
}

#[test]
fn gaps_unknown_aliases_and_data_before_birth_ask_for_a_rebirth() {
    let h = Host::new(SparkplugConfig { enabled: true, ..SparkplugConfig::default() });
    let e = h.send("spBv1.0/North/NDATA/GW-1", &payload(4, T0, vec![by_alias(10, 1.0, T0)]));
    assert_eq!(e.rebirths, ["spBv1.0/North/NCMD/GW-1"], "data before any birth");
    assert_eq!(h.count("SELECT count(*) FROM dead_letters WHERE reason = 'not_born'"), 1);

    born(&h);
    let e = h.send("spBv1.0/North/DDATA/GW-1/PLC-3", &payload(5, T0 + 1000, vec![by_alias(1, 4.0, T0 + 1000)]));
    assert_eq!(e.readings, 1, "a gap loses nothing that did arrive");
    assert_eq!(e.rebirths, ["spBv1.0/North/NCMD/GW-1"], "seq 2 was due, 5 came");
    let e = h.send("spBv1.0/North/DDATA/GW-1/PLC-3", &payload(6, T0 + 2000, vec![by_alias(1, 4.0, T0 + 2000)]));
    assert!(e.rebirths.is_empty(), "in sequence again");
    let wrapped = h.send("spBv1.0/North/DDATA/GW-1/PLC-3", &payload(7, T0 + 3000, vec![by_alias(99, 1.0, T0 + 3000)]));
    assert_eq!(wrapped.rebirths.len(), 1, "an alias never born");
    assert_eq!(h.count("SELECT count(*) FROM dead_letters WHERE reason = 'unknown_alias'"), 1);
    let e = h.send("spBv1.0/North/DDATA/GW-1/PLC-9", &payload(8, T0 + 4000, vec![by_alias(1, 1.0, T0 + 4000)]));
    assert_eq!((e.dead_letters, e.rebirths.len()), (1, 1), "a device never born");

    // seq wraps from 255 to 0.
    h.send("spBv1.0/North/NBIRTH/GW-1", &payload(0, T0, vec![bd_seq(1)]));
    h.send("spBv1.0/North/DBIRTH/GW-1/PLC-3", &device_birth(1));
    for seq in 2..=255 {
        h.send(
            "spBv1.0/North/DDATA/GW-1/PLC-3",
            &payload(seq, T0 + seq * 10, vec![by_alias(3, seq as f64, T0 + seq * 10)]),
        );
    }
    let e = h.send("spBv1.0/North/DDATA/GW-1/PLC-3", &payload(0, T0 + 9_000, vec![by_alias(3, 1.0, T0 + 9_000)]));
    assert!(e.rebirths.is_empty(), "255 then 0 is in sequence: {e:?}");

    let off = Host::new(SparkplugConfig { enabled: true, rebirth: false, ..SparkplugConfig::default() });
    let e = off.send("spBv1.0/North/NDATA/GW-1", &payload(4, T0, vec![by_alias(10, 1.0, T0)]));
    assert!(e.rebirths.is_empty(), "rebirth = false: nothing is sent towards the edge node");
}

#[test]
fn a_death_raises_communication_loss_and_the_next_birth_clears_it() {
    let h = Host::new(SparkplugConfig { enabled: true, ..SparkplugConfig::default() });
    born(&h);
    let stale = "SELECT count(*) FROM sensors WHERE stale_since IS NOT NULL";
    // A will from an older session (another bdSeq) says nothing of this one.
    h.send(
        "spBv1.0/North/NDEATH/GW-1",
        &Payload { timestamp: Some(T0), metrics: vec![bd_seq(7)], ..Payload::default() },
    );
    assert_eq!(h.count(stale), 0);

    let e = h.send(
        "spBv1.0/North/NDEATH/GW-1",
        &Payload { timestamp: Some(T0 + 5_000), metrics: vec![bd_seq(0)], ..Payload::default() },
    );
    assert_eq!(e.alarms.len(), 2, "the edge node's own asset and its device: {e:?}");
    assert_eq!(
        h.count("SELECT count(*) FROM alarms WHERE code = 'COMM_LOSS' AND severity = 'high' AND cleared_at IS NULL AND asset_id IN ('GW-1', 'PLC-3')"),
        2
    );
    assert_eq!(h.count(stale), 3);
    assert!(h.text("SELECT message FROM alarms WHERE asset_id = 'PLC-3'").contains("stale"));
    let details = h.tool("get_asset_details", serde_json::json!({"asset_id": "plc-3"}));
    let shown = details["sensors"][0]["stale"].as_str().unwrap_or_default().to_string();
    assert!(shown.starts_with("communication lost ") && shown.contains("not current"), "{details}");

    h.send("spBv1.0/North/NBIRTH/GW-1", &payload(0, T0 + 10_000, vec![bd_seq(1), double("Uptime", 10, 1.0)]));
    assert_eq!(
        h.count("SELECT count(*) FROM alarms WHERE asset_id = 'GW-1' AND cleared_at IS NULL"),
        0,
        "its rebirth clears it"
    );
    h.send("spBv1.0/North/DBIRTH/GW-1/PLC-3", &device_birth(1));
    assert_eq!(h.count("SELECT count(*) FROM alarms WHERE code = 'COMM_LOSS' AND cleared_at IS NULL"), 0);
    assert_eq!(h.count(stale), 0);

    // A device's own death.
    let e = h.send("spBv1.0/North/DDEATH/GW-1/PLC-3", &payload(2, T0 + 20_000, vec![]));
    assert_eq!(e.alarms.len(), 1);
    assert_eq!(h.count(stale), 2, "the device's sensors only");
}

#[test]
fn bad_input_is_dead_lettered_and_ingest_goes_on() {
    let h = Host::new(SparkplugConfig { enabled: true, ..SparkplugConfig::default() });
    let mut noise = vec![0u8; 4096];
    let mut x: u32 = 12345;
    for b in &mut noise {
        x = x.wrapping_mul(1_103_515_245).wrapping_add(12_345);
        *b = (x >> 16) as u8;
    }
    let e = h.send_bytes("spBv1.0/North/DDATA/GW-1/PLC-3", &noise);
    assert_eq!(e.dead_letters, 1);
    let big = vec![0xffu8; 10 << 20];
    let e = h.send_bytes("spBv1.0/North/NBIRTH/GW-1", &big);
    assert_eq!(e.dead_letters, 1, "10 MB of it");
    assert_eq!(h.count("SELECT count(*) FROM dead_letters WHERE reason = 'malformed'"), 2);
    assert_eq!(
        h.count("SELECT max(length(payload)) FROM dead_letters"),
        twinops::ingest::DEAD_LETTER_BYTES as i64,
        "a large payload is kept in part"
    );
    let e = h.send_bytes("spBv1.0/North/BOGUS/GW-1", b"");
    assert_eq!(e.dead_letters, 1, "an unknown message type");

    born(&h);
    let e = h.send("spBv1.0/North/DDATA/GW-1/PLC-3", &payload(2, T0 + 1000, vec![by_alias(1, 4.2, T0 + 1000)]));
    assert_eq!(e.readings, 1, "still ingesting");

    let disabled = Host::new(SparkplugConfig::default());
    let e = disabled.send("spBv1.0/North/NBIRTH/GW-1", &payload(0, T0, vec![bd_seq(0)]));
    assert_eq!(e.dead_letters, 1);
    assert!(disabled.text("SELECT detail FROM dead_letters").contains("[sparkplug] enabled = true"));
}

#[test]
fn without_auto_register_births_map_onto_the_imported_plant_only() {
    let h = Host::new(SparkplugConfig { enabled: true, auto_register: false, ..SparkplugConfig::default() });
    born(&h);
    assert_eq!(h.count("SELECT count(*) FROM assets"), 0, "nothing registered");
    assert!(
        h.count(
            "SELECT count(*) FROM dead_letters WHERE reason = 'unknown_sensor' AND detail LIKE '%auto_register is off%'"
        ) >= 1
    );
    let e = h.send("spBv1.0/North/DDATA/GW-1/PLC-3", &payload(2, T0 + 1000, vec![by_alias(1, 4.2, T0 + 1000)]));
    assert_eq!((e.readings, e.dead_letters), (0, 1), "refused as unknown_sensor, as JSON ingest does: {e:?}");
}

/// twinops killed with SIGKILL while an edge node publishes at QoS 1, then restarted:
/// no reading lost or doubled. The broker keeps the daemon's session and what it did
/// not acknowledge; the edge node's session (aliases, seq) is in the database, so what
/// arrives after the restart resolves without a rebirth.
#[tokio::test(flavor = "multi_thread")]
async fn a_daemon_killed_mid_stream_loses_and_doubles_no_reading() {
    use twinops::sparkplug::edge::{EdgeNode, MetricSpec};
    let Some(url) = common::external("TWINOPS_TEST_MQTT_URL", "a Mosquitto broker") else { return };
    let p = common::Plant::new();
    let run = format!("kill{}", common::free_port());
    let config = common::sparkplug_config(&p, &url, &run);
    let spawn = || common::serve_process(&p, &config);
    common::open_session(
        &url,
        &format!("twinops-{run}"),
        &twinops::sparkplug::topic::filters(std::slice::from_ref(&run)),
    )
    .await;
    let mut daemon = spawn();

    let (messages, metrics) = (3_000u64, 10u64);
    let mut edge = EdgeNode::new(&run, "GW-9", 1);
    let specs: Vec<MetricSpec> = (0..metrics)
        .map(|i| MetricSpec { name: format!("T{i}"), alias: i, value: 0.0, unit: "degC".into(), limits: [None; 4] })
        .collect();
    let base = T0 / 1000 * 1000;
    let publisher = tokio::spawn(async move {
        let mut p = twinops::publish::Publisher::connect(&url, &format!("edge-{}", common::free_port())).unwrap();
        for (topic, payload) in [edge.node_birth(base), edge.device_birth("RTU-9", &specs, base)] {
            p.publish(&topic, payload).await.unwrap();
        }
        for i in 1..=messages {
            let ms = base + i * 1000;
            let values: Vec<(u64, f64, u64)> = (0..metrics).map(|a| (a, (i * 100 + a) as f64, ms)).collect();
            let (topic, payload) = edge.device_data("RTU-9", &values, ms);
            p.publish(&topic, payload).await.unwrap();
        }
        p.finish().await.unwrap();
    });
    let ours = "SELECT count(*) FROM readings WHERE sensor_key IN (SELECT key FROM sensors WHERE id LIKE 'RTU-9/T%')";
    assert!(common::eventually(Duration::from_secs(60), || p.count(ours) >= 3_000).await, "ingest started");
    daemon.kill().unwrap();
    daemon.wait().unwrap();
    let at_kill = p.count(ours);
    let expected = ((messages + 1) * metrics) as i64;
    assert!(at_kill < expected, "killed mid-stream ({at_kill} stored)");
    let mut daemon = spawn();
    publisher.await.unwrap();
    let all = common::eventually(Duration::from_secs(120), || p.count(ours) >= expected).await;
    let _ = std::process::Command::new("kill").args(["-TERM", &daemon.id().to_string()]).status();
    daemon.wait().unwrap();
    assert!(all, "stored {} of {expected} (at the kill: {at_kill})", p.count(ours));
    assert_eq!(p.count(ours), expected, "each reading once");
    assert_eq!(p.count("SELECT count(*) FROM dead_letters"), 0, "nothing refused: the session resumed");
}

/// `simulate --sparkplug` publishes the demo plant as an edge node, one device per
/// asset: with `tag = "{asset}.{metric}"` its metrics are the seeded sensors, so
/// `serve --demo` runs on Sparkplug with nothing registered twice or refused.
#[tokio::test(flavor = "multi_thread")]
async fn the_simulator_is_an_edge_node_of_the_demo_plant() {
    let p = common::Plant::new();
    let run = format!("simsp{}", common::free_port());
    let mut config = common::test_config(&run);
    config.sparkplug = SparkplugConfig {
        enabled: true,
        groups: vec![run.clone()],
        host_id: run.clone(),
        tag: "{asset}.{metric}".into(),
        ..SparkplugConfig::default()
    };
    let broker = format!("mqtt://{}", config.mqtt.embedded_listen);
    let opts = twinops::app::ServeOptions { config, db: p.db_path(), demo: false, seed_dir: common::seed_dir() };
    let daemon = twinops::app::Daemon::start_on(p.store.clone(), opts).await.unwrap();
    common::until_subscribed(&daemon).await;
    let (assets, sensors) = (p.count("SELECT count(*) FROM assets"), p.count("SELECT count(*) FROM sensors"));
    let since = Timestamp::now().unix() - 1;

    let mut sim = twinops::sim::SimOptions::burst(&broker, &run, 2);
    (sim.rate, sim.interval, sim.sparkplug) = (2.0, 1.0, Some(run.clone()));
    let report = twinops::sim::simulate(&sim).await.unwrap();
    assert!(report.telemetry >= 18, "a DDATA per asset per sample: {report:?}");
    let fresh = format!("SELECT count(DISTINCT sensor_key) FROM readings WHERE ts >= {since}");
    assert!(
        common::eventually(Duration::from_secs(20), || p.count(&fresh) as i64 >= sensors).await,
        "{} of {sensors}",
        p.count(&fresh)
    );
    assert_eq!(p.count("SELECT count(*) FROM assets"), assets, "the seeded assets, not new ones");
    assert_eq!(p.count("SELECT count(*) FROM sensors"), sensors);
    assert_eq!(p.count("SELECT count(*) FROM dead_letters"), 0);
    assert_eq!(
        p.count(&format!(
            "SELECT count(*) FROM sparkplug_devices WHERE group_id = '{run}' AND device <> '' AND online = 1"
        )),
        18
    );
    daemon.shutdown().await;
}

/// The simulator's edge node hears a rebirth request on its NCMD topic.
#[tokio::test(flavor = "multi_thread")]
async fn the_simulators_edge_node_hears_a_rebirth_request() {
    let listen: std::net::SocketAddr = format!("127.0.0.1:{}", common::free_port()).parse().unwrap();
    twinops::broker::start(listen).unwrap();
    tokio::time::sleep(Duration::from_millis(300)).await;
    let url = format!("mqtt://{listen}");
    let ncmd = "spBv1.0/demo/NCMD/sim";
    let edge = twinops::publish::Publisher::connect_as_edge(&url, "sim-edge", None, Some(ncmd)).unwrap();
    assert!(!edge.rebirth_asked());
    // Until its subscription is in, a request would be missed: ask until heard.
    let heard = common::eventually(Duration::from_secs(10), || {
        let url = url.clone();
        tokio::spawn(async move {
            let payload = twinops::sparkplug::rebirth_request(Timestamp::now());
            let _ = twinops::publish::publish_all(&url, &format!("host-{}", common::free_port()), ncmd, vec![payload])
                .await;
        });
        edge.rebirth_asked()
    })
    .await;
    assert!(heard, "the rebirth request reached the edge node");
}
