//! A redundant pair: two twinops for one plant against the same broker, one acting.
//! Which one is decided by the lease of [`lease`], over the broker the site already
//! runs, as Sparkplug's primary host does it: each node's state is a retained message
//! with a will that says it is offline, and claims and renewals of the lease travel on
//! one topic, in the broker's one order.
//!
//! Topics, under `twinops/cluster/{name}/`: `lease` (claims, QoS 1; renewals, QoS 1
//! retained) and `node/{node}` (`{"online": bool}`, retained; the will says false).
//!
//! What this module gives the daemon is where the node stands ([`Standing`]), watched:
//! the parts that act (triage, notes out) run only while it says `acting`.

pub mod lease;
pub mod log;

use std::time::{Duration, Instant};

use rumqttc::{AsyncClient, Event, Incoming, LastWill, QoS};
use serde::Deserialize;
use serde_json::json;
use tokio::sync::watch;

pub use lease::{Heard, Lease, LeaseRules, Say, Standing};

use crate::ingest::mqtt::MqttConfig;

/// `[cluster]`: this node of a redundant pair.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ClusterConfig {
    /// The pair's name, the same on both nodes (letters, digits, `-`, `_`).
    pub name: String,
    /// This node's name, different on each (letters, digits, `-`, `_`).
    pub node: String,
    /// The other node's HMI, e.g. `https://twinops-b:8080`, for the banner's link.
    #[serde(default)]
    pub peer_hmi: String,
    /// A standby takes over after hearing nothing of the active node for this long.
    #[serde(default = "default_lease_ms")]
    pub lease_ms: u64,
    /// The active node renews its lease this often.
    #[serde(default = "default_renew_ms")]
    pub renew_ms: u64,
}

fn default_lease_ms() -> u64 {
    LeaseRules::default().lease.as_millis() as u64
}

fn default_renew_ms() -> u64 {
    LeaseRules::default().renew.as_millis() as u64
}

impl ClusterConfig {
    pub fn rules(&self) -> LeaseRules {
        LeaseRules { lease: Duration::from_millis(self.lease_ms), renew: Duration::from_millis(self.renew_ms) }
    }

    pub fn validate(&self) -> anyhow::Result<()> {
        for (key, value) in [("cluster.name", &self.name), ("cluster.node", &self.node)] {
            let ok = (1..=64).contains(&value.len())
                && value.chars().all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_');
            anyhow::ensure!(ok, "{key} '{value}': 1 to 64 letters, digits, '-' or '_' (it is part of MQTT topics)");
        }
        self.rules().validate().map_err(anyhow::Error::msg)
    }

    fn lease_topic(&self) -> String {
        format!("twinops/cluster/{}/lease", self.name)
    }

    fn node_topic(&self, node: &str) -> String {
        format!("twinops/cluster/{}/node/{node}", self.name)
    }
}

/// The lease's task and where the node stands.
pub struct Running {
    pub standing: watch::Receiver<Standing>,
    pub task: tokio::task::JoinHandle<()>,
}

/// Where a node stands without `[cluster]`: alone, it always acts.
pub fn alone() -> watch::Receiver<Standing> {
    watch::channel(Standing { acting: true, term: 0, holder: None }).1
}

/// How often the lease is looked at: what bounds how late a claim or a fence comes.
const TICK: Duration = Duration::from_millis(50);

/// Joins the pair on the broker of `mqtt` until `stop`.
pub fn start(cfg: ClusterConfig, mqtt: &MqttConfig, stop: watch::Receiver<bool>) -> anyhow::Result<Running> {
    cfg.validate()?;
    let mut opts = crate::ingest::mqtt::options(mqtt, &format!("twinops-cluster-{}-{}", cfg.name, cfg.node))?;
    opts.set_clean_session(true);
    opts.set_manual_acks(false);
    // A node gone without a word (killed, cut off) is offline for the broker, which
    // publishes its will, after 1.5 keep-alives; a closed connection at once.
    opts.set_keep_alive(Duration::from_secs(5));
    let offline = json!({"node": cfg.node, "online": false}).to_string();
    opts.set_last_will(LastWill::new(cfg.node_topic(&cfg.node), offline, QoS::AtLeastOnce, true));
    let (client, mut eventloop) = AsyncClient::new(opts, 64);
    // Renewals are small and timed: sent at once.
    eventloop.network_options.set_tcp_nodelay(true);
    let lease = Lease::new(&cfg.node, cfg.rules(), Instant::now());
    let (tx, standing) = watch::channel(lease.standing(Instant::now()));
    let task = tokio::spawn(run(cfg, client, eventloop, lease, tx, stop));
    Ok(Running { standing, task })
}

async fn run(
    cfg: ClusterConfig,
    client: AsyncClient,
    mut eventloop: rumqttc::EventLoop,
    mut lease: Lease,
    tx: watch::Sender<Standing>,
    mut stop: watch::Receiver<bool>,
) {
    let mut tick = tokio::time::interval(TICK);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let (lease_topic, nodes) = (cfg.lease_topic(), cfg.node_topic("+"));
    loop {
        tokio::select! {
            _ = stop.changed() => break,
            _ = tick.tick() => {
                if let Some(say) = lease.tick(Instant::now()) {
                    let (kind, term, retain) = match say {
                        Say::Claim(t) => ("claim", t, false),
                        Say::Renew(t) => ("renew", t, true),
                    };
                    let body = json!({"kind": kind, "node": cfg.node, "term": term, "seq": lease.seq()}).to_string();
                    // Never waits on a dead connection: a renewal not sent is one that
                    // does not come back, and the fence does the rest.
                    let _ = client.try_publish(&lease_topic, QoS::AtLeastOnce, retain, body);
                }
            }
            event = eventloop.poll() => match event {
                Ok(Event::Incoming(Incoming::ConnAck(_))) => {
                    lease.reconnected(Instant::now());
                    let _ = client.try_subscribe(&lease_topic, QoS::AtLeastOnce);
                    let _ = client.try_subscribe(&nodes, QoS::AtLeastOnce);
                    let online = json!({"node": cfg.node, "online": true}).to_string();
                    let _ = client.try_publish(cfg.node_topic(&cfg.node), QoS::AtLeastOnce, true, online);
                    tracing::info!(stage = "cluster", cluster = %cfg.name, node = %cfg.node, "joined the pair's topics");
                }
                Ok(Event::Incoming(Incoming::Publish(p))) => match heard(&p.payload) {
                    Some(h) => lease.heard(&h, Instant::now()),
                    None => tracing::warn!(stage = "cluster", topic = %p.topic, "a message on the pair's topics that is not ours; ignored"),
                },
                Ok(_) => {}
                Err(e) => {
                    tracing::warn!(stage = "cluster", error = %e, "the pair's broker connection is down; reconnecting (this node does not act meanwhile)");
                    tokio::time::sleep(Duration::from_millis(200)).await;
                }
            },
        }
        let now = lease.standing(Instant::now());
        if *tx.borrow() != now {
            let was = tx.borrow().acting;
            if was != now.acting {
                tracing::warn!(stage = "cluster", node = %cfg.node, acting = now.acting, term = now.term, holder = ?now.holder, "this node's role changed");
            }
            tx.send_replace(now);
        }
    }
    tx.send_replace(Standing { acting: false, ..lease.standing(Instant::now()) });
    let _ = client.try_disconnect();
}

/// What the broker holds of a pair: the last renewal (the holder and its term) and
/// each node's state.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Observed {
    pub holder: Option<(String, u64)>,
    /// (node, online), by name.
    pub nodes: Vec<(String, bool)>,
}

/// Reads what the broker holds of the pair `cfg` names, on a connection of its own,
/// for `twinops check`: the retained messages come at once; `wait` bounds the wait.
pub async fn observe(cfg: &ClusterConfig, mqtt: &MqttConfig, wait: Duration) -> anyhow::Result<Observed> {
    let mut opts = crate::ingest::mqtt::options(mqtt, &format!("twinops-cluster-{}-{}-check", cfg.name, cfg.node))?;
    opts.set_clean_session(true);
    let (client, mut events) = AsyncClient::new(opts, 16);
    let mut seen = Observed::default();
    let deadline = tokio::time::Instant::now() + wait;
    let mut subscribed = false;
    loop {
        let event = match tokio::time::timeout_at(deadline, events.poll()).await {
            Err(_) if subscribed => break,
            Err(_) => anyhow::bail!("the broker did not answer within {} ms", wait.as_millis()),
            Ok(e) => e?,
        };
        match event {
            Event::Incoming(Incoming::ConnAck(_)) => {
                client.try_subscribe(cfg.lease_topic(), QoS::AtLeastOnce)?;
                client.try_subscribe(cfg.node_topic("+"), QoS::AtLeastOnce)?;
                subscribed = true;
            }
            Event::Incoming(Incoming::Publish(p)) => match heard(&p.payload) {
                Some(Heard::Renew { node, term, .. }) => seen.holder = Some((node, term)),
                Some(Heard::Online { node }) => seen.nodes.push((node, true)),
                Some(Heard::Offline { node }) => seen.nodes.push((node, false)),
                _ => {}
            },
            _ => {}
        }
    }
    let _ = client.try_disconnect();
    seen.nodes.sort();
    seen.nodes.dedup_by(|a, b| a.0 == b.0);
    Ok(seen)
}

/// A message of the pair's topics: a claim, a renewal, or a node's state.
fn heard(payload: &[u8]) -> Option<Heard> {
    #[derive(Deserialize)]
    struct Msg {
        kind: Option<String>,
        node: String,
        term: Option<u64>,
        #[serde(default)]
        seq: u64,
        online: Option<bool>,
    }
    let m: Msg = serde_json::from_slice(payload).ok()?;
    match (m.kind.as_deref(), m.term, m.online) {
        (Some("claim"), Some(term), _) => Some(Heard::Claim { node: m.node, term, seq: m.seq }),
        (Some("renew"), Some(term), _) => Some(Heard::Renew { node: m.node, term, seq: m.seq }),
        (None, _, Some(false)) => Some(Heard::Offline { node: m.node }),
        (None, _, Some(true)) => Some(Heard::Online { node: m.node }),
        _ => None,
    }
}
