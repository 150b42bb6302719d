//! A plant simulator that publishes alarm events and telemetry over MQTT, from the
//! seeded plant, for demos, tests and benchmarks.

use std::time::Duration;

use rumqttc::{AsyncClient, Event, MqttOptions, Packet, QoS};
use serde_json::{Value, json};

use crate::domain::Timestamp;
use crate::seed::Rng;

#[derive(Debug, Clone, clap::Args)]
pub struct SimOptions {
    /// Broker to publish to.
    #[arg(long, default_value = "mqtt://127.0.0.1:1883")]
    pub broker: String,
    /// Topic for the events.
    #[arg(long, default_value = "scada/alarms")]
    pub topic: String,
    /// Alarm events to publish (raises and clears over the seed plant's alarm points).
    #[arg(long, default_value_t = 100)]
    pub count: usize,
    /// Events per second; 0 = as fast as the broker takes them.
    #[arg(long, default_value_t = 10.0)]
    pub rate: f64,
    /// Percentage of events sent twice (redelivery as SCADA gateways do).
    #[arg(long, default_value_t = 0.0)]
    pub duplicates: f64,
    /// Percentage of messages that are malformed.
    #[arg(long, default_value_t = 0.0)]
    pub malformed: f64,
    /// Raise everything at once (an alarm flood), no clears.
    #[arg(long)]
    pub flood: bool,
    /// A prefix for event ids, so separate runs do not collide.
    #[arg(long, default_value = "sim")]
    pub run: String,
}

/// Alarm points of the seed plant that the simulator raises and clears.
const POINTS: &[(&str, &str, &str, f64)] = &[
    ("PUMP-007", "VIB-DE", "VIB-HI", 4.5),
    ("PUMP-004", "PRESS-SUC", "PRESS-SUC-LO", 0.5),
    ("PUMP-001", "BRG-TEMP-DE", "BRG-TEMP-HI", 80.0),
    ("PUMP-002", "FLOW", "FLOW-LO", 150.0),
    ("PUMP-006", "PRESS-DIS", "PRESS-DIS-HI", 6.5),
    ("MTR-004", "CURRENT", "MTR-CURRENT-HI", 240.0),
    ("MTR-007", "WDG-TEMP", "MTR-TEMP-HI", 130.0),
    ("RES-001", "LEVEL", "LEVEL-LO", 1.5),
];

/// The `i`th simulated event: raises and clears alternate per point, so each raise
/// after a clear is a new occurrence.
pub fn event(run: &str, i: usize, flood: bool, now: Timestamp) -> Value {
    let (asset, tag, code, threshold) = POINTS[i % POINTS.len()];
    let raised = flood || (i / POINTS.len()) % 2 == 0;
    let high = code.ends_with("HI");
    let value = if raised == high { threshold * 1.08 } else { threshold * 0.92 };
    json!({
        "type": "alarm", "event_id": format!("{run}-{i}"), "asset_id": asset, "sensor_id": format!("{asset}.{tag}"),
        "code": code, "severity": "medium",
        "state": if raised { "raised" } else { "cleared" },
        "value": (value * 1000.0).round() / 1000.0, "threshold": threshold,
        "time": now.to_rfc3339(),
        "message": format!("{asset} {tag} {}", if raised { "beyond limit" } else { "back to normal" }),
    })
}

/// What a simulation sent.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SimReport {
    /// MQTT messages published (and acknowledged by the broker).
    pub published: usize,
    /// Distinct events (each `event_id` once).
    pub events: usize,
    /// Events sent a second time.
    pub duplicates: usize,
    /// Malformed messages.
    pub malformed: usize,
}

/// Publishes `count` events at QoS 1 and waits until the broker has acknowledged them.
pub async fn simulate(opts: &SimOptions) -> anyhow::Result<SimReport> {
    let (client, mut eventloop) = connect(&opts.broker, &format!("twinops-sim-{}", opts.run))?;
    let mut rng = Rng::from_label(&opts.run);
    let mut messages: Vec<Vec<u8>> = Vec::new();
    let mut report = SimReport { events: opts.count, ..SimReport::default() };
    for i in 0..opts.count {
        let body = event(&opts.run, i, opts.flood, Timestamp::now()).to_string().into_bytes();
        if rng.uniform() * 100.0 < opts.malformed {
            messages.push(b"{\"type\": \"alarm\", \"event_id\": ".to_vec());
            report.malformed += 1;
        }
        messages.push(body.clone());
        if rng.uniform() * 100.0 < opts.duplicates {
            messages.push(body);
            report.duplicates += 1;
        }
    }
    report.published = messages.len();
    publish_all(client.clone(), &mut eventloop, &opts.topic, messages, opts.rate).await?;
    client.disconnect().await.ok();
    Ok(report)
}

/// A publishing client for `broker` (`mqtt://host:port`).
pub fn connect(broker: &str, client_id: &str) -> anyhow::Result<(AsyncClient, rumqttc::EventLoop)> {
    let url = reqwest::Url::parse(broker)?;
    let host = url.host_str().unwrap_or("127.0.0.1");
    let mut mqtt = MqttOptions::new(client_id, host, url.port().unwrap_or(1883));
    mqtt.set_keep_alive(Duration::from_secs(30));
    mqtt.set_inflight(200);
    mqtt.set_max_packet_size(1024 * 1024, 1024 * 1024);
    Ok(AsyncClient::new(mqtt, 1024))
}

/// Publishes `messages` at QoS 1 (at `rate` per second, 0 = as fast as possible) and
/// returns once the broker has acknowledged every one.
pub async fn publish_all(
    client: AsyncClient,
    eventloop: &mut rumqttc::EventLoop,
    topic: &str,
    messages: Vec<Vec<u8>>,
    rate: f64,
) -> anyhow::Result<()> {
    let total = messages.len();
    let topic = topic.to_string();
    let publisher = tokio::spawn(async move {
        for m in messages {
            client.publish(&topic, QoS::AtLeastOnce, false, m).await?;
            if rate > 0.0 {
                tokio::time::sleep(Duration::from_secs_f64(1.0 / rate)).await;
            }
        }
        anyhow::Ok(())
    });
    let mut acked = 0;
    while acked < total {
        match tokio::time::timeout(Duration::from_secs(30), eventloop.poll()).await {
            Ok(Ok(Event::Incoming(Packet::PubAck(_)))) => acked += 1,
            Ok(Ok(_)) => {}
            Ok(Err(e)) => {
                tracing::warn!(stage = "sim", error = %e, "publisher connection error; retrying");
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
            Err(_) => anyhow::bail!("the broker acknowledged {acked} of {total} messages and then went quiet for 30 s"),
        }
    }
    publisher.await??;
    Ok(())
}
