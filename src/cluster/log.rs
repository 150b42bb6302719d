//! The pair's decision log: what people decide on either node goes to the broker on
//! one topic (`twinops/cluster/{name}/log`, QoS 1) and comes back to both in the
//! broker's one order, on a persistent session each, so that a node that was away gets
//! what it missed (as long as the broker keeps it). Each node applies every decision,
//! its own included, in that order; the node where it was made answers the person only
//! once it has come back and been applied ([`DecisionLog::submit`]).
//!
//! This is the transport; what a decision does is up to the caller.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rumqttc::{AsyncClient, Event, Incoming, QoS};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use tokio::sync::{mpsc, oneshot, watch};

use super::ClusterConfig;
use crate::domain::Timestamp;
use crate::ingest::mqtt::MqttConfig;

/// One decision as it travels: who made it where and when, and what (`kind` and its
/// arguments, the caller's vocabulary).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Decision {
    /// Unique: a decision delivered twice is applied once.
    pub id: String,
    /// The node it was made on.
    pub node: String,
    pub kind: String,
    pub args: Value,
    pub actor: String,
    /// When it was made, unix seconds: both nodes journal it at this time.
    pub at: i64,
}

impl Decision {
    /// A decision made now on `node`, under a fresh id.
    pub fn new(node: &str, kind: &str, args: Value, actor: &str) -> Decision {
        Decision {
            id: format!("{node}-{}", crate::support::hex(&crate::support::random_bytes::<12>())),
            node: node.into(),
            kind: kind.into(),
            args,
            actor: actor.into(),
            at: Timestamp::now().unix(),
        }
    }
}

/// Sends one decision from outside the daemon (the command line), on a connection of
/// its own, and returns once the broker has put it in the log's order (it has come back
/// on that connection, so both nodes' sessions hold it), with whether this node's
/// daemon is online to apply it (its retained state says so).
pub async fn send_once(cfg: &ClusterConfig, mqtt: &MqttConfig, decision: &Decision) -> Result<bool, SubmitError> {
    let client_id = format!(
        "twinops-cluster-{}-{}-cli-{}",
        cfg.name,
        cfg.node,
        crate::support::hex(&crate::support::random_bytes::<4>())
    );
    let mut opts = crate::ingest::mqtt::options(mqtt, &client_id).map_err(|_| SubmitError::BrokerAway)?;
    opts.set_clean_session(true);
    opts.set_manual_acks(false);
    // A plant import carries the site's files, up to what the daemon takes in.
    let most = crate::ingest::payload::MAX_PACKET_BYTES;
    opts.set_max_packet_size(most, most);
    let (client, mut events) = AsyncClient::new(opts, 16);
    let (topic, state) = (cfg.log_topic(), cfg.node_topic(&cfg.node));
    let deadline = tokio::time::Instant::now() + 2 * ROUND_TRIP_LIMIT;
    let (mut online, mut sent) = (false, false);
    let came_back = loop {
        let event = match tokio::time::timeout_at(deadline, events.poll()).await {
            Ok(Ok(event)) => event,
            _ => break false,
        };
        match event {
            Event::Incoming(Incoming::ConnAck(_)) => {
                let filters = [(&topic, QoS::AtLeastOnce), (&state, QoS::AtLeastOnce)];
                let filters = filters.map(|(t, q)| rumqttc::SubscribeFilter::new(t.clone(), q));
                let _ = client.try_subscribe_many(filters);
            }
            // The node's retained state comes with the subscription, before the decision.
            Event::Incoming(Incoming::SubAck(_)) if !sent => {
                let body = serde_json::to_vec(decision).unwrap_or_default();
                sent = client.try_publish(&topic, QoS::AtLeastOnce, false, body).is_ok();
            }
            Event::Incoming(Incoming::Publish(p)) if p.topic == state => {
                online = super::node_state(&p.payload).is_some_and(|s| s.online);
            }
            Event::Incoming(Incoming::Publish(p)) => {
                let back = serde_json::from_slice::<Decision>(&p.payload).is_ok_and(|d| d.id == decision.id);
                if back {
                    break true;
                }
            }
            _ => {}
        }
    };
    let _ = client.try_disconnect();
    match (came_back, sent) {
        (true, _) => Ok(online),
        (false, false) => Err(SubmitError::BrokerAway),
        (false, true) => Err(SubmitError::NotBack((2 * ROUND_TRIP_LIMIT).as_secs())),
    }
}

/// A decision come back from the broker, to apply and then [`Delivered::done`].
pub struct Delivered {
    pub decision: Decision,
    publish: rumqttc::Publish,
}

/// The outcome of applying a decision: an HTTP status and the body to answer with.
pub type Outcome = (u16, Value);

/// Why a decision was not answered.
#[derive(Debug, thiserror::Error)]
pub enum SubmitError {
    #[error(
        "the broker is not reachable from this node, so the decision cannot be shared with the other node; \
         nothing was changed: try again when the broker is back (the banner says when)"
    )]
    BrokerAway,
    #[error(
        "the decision went to the broker but has not come back within {0} s; it is applied on both nodes when it \
         does: look at the alarm before deciding again"
    )]
    NotBack(u64),
}

/// This node's end of the log.
pub struct DecisionLog {
    node: String,
    topic: String,
    client: AsyncClient,
    up: watch::Receiver<bool>,
    waiting: Mutex<HashMap<String, oneshot::Sender<Outcome>>>,
}

/// How long a person waits for their decision to come back.
const ROUND_TRIP_LIMIT: Duration = Duration::from_secs(5);

impl DecisionLog {
    /// Joins the log of the pair `cfg` names; decisions come out of the receiver in the
    /// broker's order, to be applied and acknowledged one by one.
    pub fn start(
        cfg: &ClusterConfig,
        mqtt: &MqttConfig,
        stop: watch::Receiver<bool>,
    ) -> anyhow::Result<(Arc<DecisionLog>, mpsc::Receiver<Delivered>, tokio::task::JoinHandle<()>)> {
        let mut opts = crate::ingest::mqtt::options(mqtt, &cfg.log_client())?;
        // Persistent, acknowledged after applying: a decision is not lost to a node that
        // stops or is away, and comes again if it stopped before applying it.
        opts.set_clean_session(false);
        opts.set_manual_acks(true);
        let (client, mut eventloop) = AsyncClient::new(opts, 256);
        // A decision is one small packet a person waits for: sent at once, not held
        // back for company (Nagle's algorithm and a delayed ack cost 40 ms a trip).
        eventloop.network_options.set_tcp_nodelay(true);
        let (up_tx, up) = watch::channel(false);
        let log = Arc::new(DecisionLog {
            node: cfg.node.clone(),
            topic: cfg.log_topic(),
            client,
            up,
            waiting: Mutex::default(),
        });
        let (tx, rx) = mpsc::channel(256);
        let task = tokio::spawn(Arc::clone(&log).run(eventloop, up_tx, tx, stop));
        Ok((log, rx, task))
    }

    async fn run(
        self: Arc<Self>,
        mut eventloop: rumqttc::EventLoop,
        up: watch::Sender<bool>,
        tx: mpsc::Sender<Delivered>,
        mut stop: watch::Receiver<bool>,
    ) {
        loop {
            let event = tokio::select! {
                e = eventloop.poll() => e,
                _ = stop.changed() => break,
            };
            match event {
                Ok(Event::Incoming(Incoming::ConnAck(_))) => {
                    let _ = self.client.try_subscribe(&self.topic, QoS::AtLeastOnce);
                }
                Ok(Event::Incoming(Incoming::SubAck(_))) => {
                    up.send_replace(true);
                }
                Ok(Event::Incoming(Incoming::Publish(publish))) => {
                    match serde_json::from_slice::<Decision>(&publish.payload) {
                        Ok(decision) => {
                            if tx.send(Delivered { decision, publish }).await.is_err() {
                                break;
                            }
                        }
                        Err(e) => {
                            tracing::warn!(stage = "cluster", error = %e, "a message on the decision log that is not a decision; dropped");
                            let _ = self.client.try_ack(&publish);
                        }
                    }
                }
                Ok(_) => {}
                Err(e) => {
                    up.send_replace(false);
                    tracing::warn!(stage = "cluster", error = %e, "the decision log's connection is down; reconnecting (changes are refused meanwhile)");
                    tokio::time::sleep(Duration::from_millis(500)).await;
                }
            }
        }
        up.send_replace(false);
        let _ = self.client.try_disconnect();
    }

    /// This node's name.
    pub fn node(&self) -> &str {
        &self.node
    }

    /// Whether decisions can be made now (the log's connection is up).
    pub fn up(&self) -> bool {
        *self.up.borrow()
    }

    /// Sends a decision and waits until it has come back and been applied on this node;
    /// returns how it went there.
    pub async fn submit(&self, kind: &str, args: Value, actor: &str) -> Result<Outcome, SubmitError> {
        if !self.up() {
            return Err(SubmitError::BrokerAway);
        }
        let decision = Decision::new(&self.node, kind, args, actor);
        let id = decision.id.clone();
        let (tx, rx) = oneshot::channel();
        self.waiting.lock().expect("waiting decisions").insert(id.clone(), tx);
        let body = serde_json::to_vec(&decision).unwrap_or_default();
        let sent =
            tokio::time::timeout(ROUND_TRIP_LIMIT, self.client.publish(&self.topic, QoS::AtLeastOnce, false, body))
                .await;
        if !matches!(sent, Ok(Ok(()))) {
            self.waiting.lock().expect("waiting decisions").remove(&id);
            return Err(SubmitError::BrokerAway);
        }
        match tokio::time::timeout(ROUND_TRIP_LIMIT, rx).await {
            Ok(Ok(outcome)) => Ok(outcome),
            _ => {
                self.waiting.lock().expect("waiting decisions").remove(&id);
                Err(SubmitError::NotBack(ROUND_TRIP_LIMIT.as_secs()))
            }
        }
    }

    /// A decision was applied here: it is acknowledged to the broker (it does not come
    /// again), and the person waiting for it, if they are on this node, gets `outcome`.
    pub fn done(&self, delivered: Delivered, outcome: Outcome) {
        let _ = self.client.try_ack(&delivered.publish);
        if let Some(tx) = self.waiting.lock().expect("waiting decisions").remove(&delivered.decision.id) {
            let _ = tx.send(outcome);
        }
    }
}
