//! The Sparkplug primary host of a redundant pair. Edge nodes set to the pair's host id
//! publish while its STATE says online and buffer while it says offline, so the STATE
//! must follow the node that acts, not either node's connection: the acting node opens a
//! connection of its own for it when it starts acting (its will, with the birth's
//! timestamp as Sparkplug 3.0 asks, says offline should it die), says offline and
//! closes it when it stops, and on taking over asks every edge node the twin knows for
//! a rebirth (unless `sparkplug.rebirth` is off), so that the new node has their births
//! whatever it missed. A node alone keeps STATE on its ingest connection instead.

use std::sync::Arc;
use std::time::Duration;

use rumqttc::{AsyncClient, Event, Incoming, LastWill, QoS};
use tokio::sync::watch;

use crate::domain::Timestamp;
use crate::ingest::mqtt::MqttConfig;
use crate::sparkplug::SparkplugConfig;
use crate::store::{Store, StoreError};

/// Publishes the pair's STATE from whichever of its nodes acts (`acting`), until `stop`.
pub async fn run(
    sparkplug: Arc<SparkplugConfig>,
    (mqtt, client_id): (MqttConfig, String),
    store: Store,
    mut acting: watch::Receiver<bool>,
    mut stop: watch::Receiver<bool>,
) {
    loop {
        if *acting.borrow_and_update() {
            let session = Session { sparkplug: &sparkplug, mqtt: &mqtt, client_id: &client_id, store: &store };
            tokio::select! {
                _ = session.hold(&mut acting) => {}
                _ = stop.changed() => return,
            }
        }
        tokio::select! {
            changed = acting.changed() => if changed.is_err() { return },
            _ = stop.changed() => return,
        }
    }
}

/// One stretch of acting: a connection whose birth says online and whose will says
/// offline, with one timestamp.
struct Session<'a> {
    sparkplug: &'a SparkplugConfig,
    mqtt: &'a MqttConfig,
    client_id: &'a str,
    store: &'a Store,
}

impl Session<'_> {
    /// Holds the STATE online while `acting` says so; says offline when it stops.
    async fn hold(&self, acting: &mut watch::Receiver<bool>) {
        // To the millisecond: a takeover within the second the old node started must
        // still carry a later timestamp than the old node's will.
        let at_ms = chrono::Utc::now().timestamp_millis().max(0) as u64;
        let topic = self.sparkplug.state_topic();
        let mut opts = match crate::ingest::mqtt::options(self.mqtt, &format!("{}-primary-host", self.client_id)) {
            Ok(o) => o,
            Err(e) => {
                tracing::error!(stage = "cluster", error = %e, "the Sparkplug STATE connection cannot be made");
                return;
            }
        };
        opts.set_clean_session(true);
        opts.set_keep_alive(Duration::from_secs(5));
        let offline = crate::sparkplug::state(false, at_ms);
        opts.set_last_will(LastWill::new(&topic, offline.clone(), QoS::AtLeastOnce, true));
        let (client, mut events) = AsyncClient::new(opts, 1024);
        loop {
            tokio::select! {
                event = events.poll() => match event {
                    Ok(Event::Incoming(Incoming::ConnAck(_))) => {
                        let online = crate::sparkplug::state(true, at_ms);
                        let _ = client.try_publish(&topic, QoS::AtLeastOnce, true, online);
                        tracing::info!(stage = "cluster", %topic, "Sparkplug STATE online: this node acts as the primary host");
                        self.ask_rebirths(&client);
                    }
                    Ok(_) => {}
                    Err(e) => {
                        tracing::warn!(stage = "cluster", error = %e, "the Sparkplug STATE connection is down; reconnecting");
                        tokio::time::sleep(Duration::from_millis(500)).await;
                    }
                },
                changed = acting.changed() => if changed.is_err() || !*acting.borrow_and_update() { break },
            }
        }
        // Stopped acting: offline at once (a clean disconnect does not publish the will).
        if client.publish(&topic, QoS::AtLeastOnce, true, offline).await.is_ok() {
            let _ = client.disconnect().await;
            let flushed = async { while events.poll().await.is_ok() {} };
            let _ = tokio::time::timeout(Duration::from_secs(2), flushed).await;
        }
        tracing::info!(stage = "cluster", %topic, "Sparkplug STATE offline: this node no longer acts");
    }

    /// Asks every edge node the twin knows to publish its births again (QoS 0, as
    /// Sparkplug sends commands).
    fn ask_rebirths(&self, client: &AsyncClient) {
        if !self.sparkplug.rebirth {
            return;
        }
        let edges = match known_edges(self.store) {
            Ok(e) => e,
            Err(e) => {
                tracing::warn!(stage = "cluster", error = %e, "the edge nodes to ask for a rebirth cannot be read");
                return;
            }
        };
        let request = crate::sparkplug::rebirth_request(Timestamp::now());
        for (group, edge) in &edges {
            let topic = crate::sparkplug::topic::ncmd(group, edge);
            let _ = client.try_publish(topic, QoS::AtMostOnce, false, request.clone());
        }
        if !edges.is_empty() {
            crate::metrics::count("twinops_sparkplug_rebirth_requests_total", &[], edges.len() as f64);
            tracing::info!(
                stage = "cluster",
                edge_nodes = edges.len(),
                "took over: asked the edge nodes for their births"
            );
        }
    }
}

/// The edge nodes the twin has heard of: (group, edge node).
fn known_edges(store: &Store) -> Result<Vec<(String, String)>, StoreError> {
    let db = store.read()?;
    let mut stmt = db.prepare_cached("SELECT group_id, edge_node FROM sparkplug_nodes ORDER BY 1, 2")?;
    let rows = stmt.query_map([], |r| Ok((r.get(0)?, r.get(1)?)))?;
    Ok(rows.collect::<Result<_, _>>()?)
}
