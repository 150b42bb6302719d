//! An MQTT publisher at QoS 1 that counts the broker's acknowledgements: the simulator
//! publishes through it, and so do the tests and benchmarks that feed a broker without
//! simulating anything.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

use anyhow::Context;
use rumqttc::{AsyncClient, Event, MqttOptions, Packet, QoS};

/// A publishing client for `broker` (`mqtt://host:port`).
pub fn connect(broker: &str, client_id: &str) -> anyhow::Result<(AsyncClient, rumqttc::EventLoop)> {
    let url = reqwest::Url::parse(broker).with_context(|| format!("broker URL {broker:?}"))?;
    let host = url.host_str().unwrap_or("127.0.0.1");
    let mut mqtt = MqttOptions::new(client_id, host, url.port().unwrap_or(1883));
    mqtt.set_keep_alive(Duration::from_secs(30));
    mqtt.set_inflight(200);
    mqtt.set_max_packet_size(1024 * 1024, 1024 * 1024);
    Ok(AsyncClient::new(mqtt, 1024))
}

/// A QoS 1 publisher that counts the broker's acknowledgements; rumqttc resends what
/// was not acknowledged when the connection comes back.
pub struct Publisher {
    client: AsyncClient,
    sent: usize,
    acked: Arc<AtomicUsize>,
    /// Set when a Sparkplug rebirth request came for us.
    rebirth: Arc<AtomicBool>,
    poller: tokio::task::JoinHandle<()>,
}

impl Publisher {
    pub fn connect(broker: &str, client_id: &str) -> anyhow::Result<Publisher> {
        Publisher::connect_as_edge(broker, client_id, None, None)
    }

    /// A publisher that is also a Sparkplug edge node: `will` is its NDEATH, and a
    /// message on `commands` (its NCMD topic) asks it for its births again.
    pub fn connect_as_edge(
        broker: &str,
        client_id: &str,
        will: Option<(String, Vec<u8>)>,
        commands: Option<&str>,
    ) -> anyhow::Result<Publisher> {
        let (client, mut eventloop) = connect(broker, client_id)?;
        if let Some((topic, payload)) = will {
            eventloop.mqtt_options.set_last_will(rumqttc::LastWill::new(topic, payload, QoS::AtLeastOnce, false));
        }
        let commands = commands.map(str::to_string);
        let acked = Arc::new(AtomicUsize::new(0));
        let counter = Arc::clone(&acked);
        let rebirth = Arc::new(AtomicBool::new(false));
        let asked = Arc::clone(&rebirth);
        let subscriber = client.clone();
        let poller = tokio::spawn(async move {
            loop {
                match eventloop.poll().await {
                    Ok(Event::Incoming(Packet::PubAck(_))) => {
                        counter.fetch_add(1, Ordering::Relaxed);
                    }
                    Ok(Event::Incoming(Packet::ConnAck(_))) => {
                        if let Some(topic) = &commands {
                            let _ = subscriber.subscribe(topic.clone(), QoS::AtMostOnce).await;
                        }
                    }
                    Ok(Event::Incoming(Packet::Publish(p))) if commands.as_deref() == Some(p.topic.as_str()) => {
                        asked.store(true, Ordering::Relaxed);
                    }
                    Ok(Event::Outgoing(rumqttc::Outgoing::Disconnect)) => break,
                    Ok(_) => {}
                    Err(e) => {
                        tracing::warn!(stage = "publish", error = %e, "publisher connection error; retrying");
                        tokio::time::sleep(Duration::from_millis(200)).await;
                    }
                }
            }
        });
        Ok(Publisher { client, sent: 0, acked, rebirth, poller })
    }

    /// Whether a rebirth was asked for since the last call.
    pub fn rebirth_asked(&self) -> bool {
        self.rebirth.swap(false, Ordering::Relaxed)
    }

    pub async fn publish(&mut self, topic: &str, payload: Vec<u8>) -> anyhow::Result<()> {
        self.client.publish(topic, QoS::AtLeastOnce, false, payload).await?;
        self.sent += 1;
        Ok(())
    }

    pub fn sent(&self) -> usize {
        self.sent
    }

    /// Waits until the broker has acknowledged every message, then disconnects.
    pub async fn finish(self) -> anyhow::Result<()> {
        let mut last = (self.acked.load(Ordering::Relaxed), std::time::Instant::now());
        loop {
            let acked = self.acked.load(Ordering::Relaxed);
            if acked >= self.sent {
                break;
            }
            if acked != last.0 {
                last = (acked, std::time::Instant::now());
            } else if last.1.elapsed() > Duration::from_secs(30) {
                self.poller.abort();
                anyhow::bail!("the broker acknowledged {acked} of {} messages and then went quiet for 30 s", self.sent);
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        self.client.disconnect().await.ok();
        // Let the DISCONNECT go out before the event loop is dropped.
        tokio::time::sleep(Duration::from_millis(20)).await;
        self.poller.abort();
        Ok(())
    }
}

/// Publishes `messages` at QoS 1 as fast as the broker takes them and returns once the
/// broker has acknowledged every one.
pub async fn publish_all(broker: &str, client_id: &str, topic: &str, messages: Vec<Vec<u8>>) -> anyhow::Result<()> {
    let mut p = Publisher::connect(broker, client_id)?;
    for m in messages {
        p.publish(topic, m).await?;
    }
    p.finish().await
}
