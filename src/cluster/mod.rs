//! A redundant pair: two twinops for one plant against the same broker, one acting.
//! Which one is decided by the lease of [`lease`], over the broker the site already
//! runs, as Sparkplug's primary host does it: each node's state is a retained message
//! with a will that says it is offline, and claims and renewals of the lease travel on
//! one topic, in the broker's one order.
//!
//! Topics, under `twinops/cluster/{name}/`: `lease` (claims, QoS 1; renewals, QoS 1
//! retained) and `node/{node}` (`{"online": bool}` and the node's [`Progress`],
//! retained and refreshed as it moves; the will, or the node itself as it stops, says
//! offline), from which each node knows how far behind the other is.
//!
//! What this module gives the daemon is where the node stands ([`Standing`]), watched:
//! the parts that act (triage, notes out) run only while it says `acting`.

pub mod copy;
pub mod lease;
pub mod log;
pub mod primary;

use std::time::{Duration, Instant};

use rumqttc::{AsyncClient, Event, Incoming, LastWill, QoS};
use serde::{Deserialize, Serialize};
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
    /// A file holding an admin's API token on the other node (accounts are shared, so
    /// one made on either works): with it, a node away longer than the broker kept its
    /// sessions takes a copy of the other's twin before it starts ([`copy`]).
    /// `TWINOPS_CLUSTER_PEER_TOKEN` overrides it.
    #[serde(default)]
    pub peer_token_file: Option<std::path::PathBuf>,
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

    /// The other node's API token ([`ClusterConfig::peer_token_file`]), if set.
    pub fn peer_token(&self, env: &dyn Fn(&str) -> Option<String>) -> Option<Result<String, String>> {
        let from_env = env("TWINOPS_CLUSTER_PEER_TOKEN");
        if from_env.is_none() && self.peer_token_file.is_none() {
            return None;
        }
        let token = crate::support::secret_from(from_env, None, self.peer_token_file.as_deref(), "cluster.peer_token");
        Some(token.map(|t| t.expose().to_string()))
    }

    /// The client id of this node's end of the decision log ([`log`]).
    fn log_client(&self) -> String {
        format!("twinops-cluster-{}-{}-log", self.name, self.node)
    }

    fn lease_topic(&self) -> String {
        format!("twinops/cluster/{}/lease", self.name)
    }

    /// The pair's decision log ([`log`]).
    fn log_topic(&self) -> String {
        format!("twinops/cluster/{}/log", self.name)
    }

    fn node_topic(&self, node: &str) -> String {
        format!("twinops/cluster/{}/node/{node}", self.name)
    }
}

/// How far a node has come: the decisions of the pair's log it has applied, and the
/// newest alarm occurrence it has ingested (raised at, unix s).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Progress {
    pub decisions: u64,
    pub newest_alarm: Option<i64>,
}

/// A node as its retained state on the broker says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeState {
    pub node: String,
    pub online: bool,
    /// Absent from a node that has not said (an older version, or offline).
    pub progress: Option<Progress>,
}

impl NodeState {
    /// How far this node is behind `mine`: decisions it has yet to apply, and seconds of
    /// alarms it has yet to ingest (0 when level or ahead; none when it has no alarm
    /// at all and `mine` has).
    pub fn behind(&self, mine: Progress) -> Option<Behind> {
        let theirs = self.progress?;
        let alarms = match (mine.newest_alarm, theirs.newest_alarm) {
            (Some(m), Some(t)) => Some((m - t).max(0)),
            (Some(_), None) => None,
            (None, _) => Some(0),
        };
        Some(Behind { decisions: mine.decisions.saturating_sub(theirs.decisions), alarms_s: alarms })
    }
}

/// How far one node is behind the other ([`NodeState::behind`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Behind {
    /// Decisions of the log it has yet to apply.
    pub decisions: u64,
    /// Seconds of alarms it has yet to ingest; none when it has no alarm at all.
    pub alarms_s: Option<i64>,
}

impl Behind {
    pub fn level(&self) -> bool {
        self.decisions == 0 && self.alarms_s == Some(0)
    }
}

/// What a node of a pair shows of it: where it stands, how far it has come, and what
/// the other node last said of itself.
#[derive(Clone)]
pub struct PairView {
    pub standing: watch::Receiver<Standing>,
    pub progress: watch::Receiver<Progress>,
    pub peer: watch::Receiver<Option<NodeState>>,
}

impl PairView {
    /// The other node, and how far behind this one it is ([`NodeState::behind`]).
    pub fn peer_behind(&self) -> Option<(NodeState, Option<Behind>)> {
        let peer = self.peer.borrow().clone()?;
        let behind = peer.behind(*self.progress.borrow());
        Some((peer, behind))
    }
}

/// The lease's task, where the node stands, and what the other node last said of itself.
pub struct Running {
    pub standing: watch::Receiver<Standing>,
    pub peer: watch::Receiver<Option<NodeState>>,
    pub task: tokio::task::JoinHandle<()>,
}

/// Where a node stands without `[cluster]`: alone, it always acts.
pub fn alone() -> watch::Receiver<Standing> {
    watch::channel(Standing { acting: true, term: 0, holder: None }).1
}

/// How often the lease is looked at: what bounds how late a claim or a fence comes.
const TICK: Duration = Duration::from_millis(50);

/// Joins the pair on the broker of `mqtt` until `stop`, saying how far this node has
/// come as `progress` does.
pub fn start(
    cfg: ClusterConfig,
    mqtt: &MqttConfig,
    progress: watch::Receiver<Progress>,
    stop: watch::Receiver<bool>,
) -> anyhow::Result<Running> {
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
    let (peer_tx, peer) = watch::channel(None);
    let said = Said { progress, last: None, peer: peer_tx };
    let task = tokio::spawn(run(cfg, (client, eventloop), lease, (tx, said), stop));
    Ok(Running { standing, peer, task })
}

/// What a node says of itself on its state topic, and hears of the other.
struct Said {
    progress: watch::Receiver<Progress>,
    /// What it last said and when; none while disconnected.
    last: Option<(Progress, Instant)>,
    peer: watch::Sender<Option<NodeState>>,
}

/// A node's state is said again at most this often while its progress moves.
pub(crate) const PROGRESS_EVERY: Duration = Duration::from_secs(1);

impl Said {
    fn say(&mut self, cfg: &ClusterConfig, client: &AsyncClient) {
        let now = *self.progress.borrow();
        let online =
            json!({"node": cfg.node, "online": true, "decisions": now.decisions, "newest_alarm": now.newest_alarm});
        if client.try_publish(cfg.node_topic(&cfg.node), QoS::AtLeastOnce, true, online.to_string()).is_ok() {
            self.last = Some((now, Instant::now()));
        }
    }

    /// Says it again if it moved and was not said just now.
    fn refresh(&mut self, cfg: &ClusterConfig, client: &AsyncClient) {
        if let Some((said, at)) = self.last
            && said != *self.progress.borrow()
            && at.elapsed() >= PROGRESS_EVERY
        {
            self.say(cfg, client);
        }
    }
}

async fn run(
    cfg: ClusterConfig,
    (client, mut eventloop): (AsyncClient, rumqttc::EventLoop),
    mut lease: Lease,
    (tx, mut said): (watch::Sender<Standing>, Said),
    mut stop: watch::Receiver<bool>,
) {
    let mut tick = tokio::time::interval(TICK);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let (lease_topic, nodes) = (cfg.lease_topic(), cfg.node_topic("+"));
    loop {
        tokio::select! {
            _ = stop.changed() => break,
            _ = tick.tick() => {
                said.refresh(&cfg, &client);
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
                    said.say(&cfg, &client);
                    tracing::info!(stage = "cluster", cluster = %cfg.name, node = %cfg.node, "joined the pair's topics");
                }
                Ok(Event::Incoming(Incoming::Publish(p))) => {
                    match node_state(&p.payload) {
                        Some(state) if state.node != cfg.node => drop(said.peer.send_replace(Some(state))),
                        _ => {}
                    }
                    match heard(&p.payload) {
                        Some(h) => lease.heard(&h, Instant::now()),
                        None => tracing::warn!(stage = "cluster", topic = %p.topic, "a message on the pair's topics that is not ours; ignored"),
                    }
                }
                Ok(_) => {}
                Err(e) => {
                    said.last = None;
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
    leave(&cfg, &client, &mut eventloop).await;
}

/// Says this node is offline, as its will would, and disconnects (a clean disconnect
/// drops the will): the other node, if this one acted, takes over half a lease after
/// its last renewal rather than a whole lease, and `twinops check` and the HMI banner
/// show this one gone. Called once this node no longer acts; waits at most a second.
async fn leave(cfg: &ClusterConfig, client: &AsyncClient, eventloop: &mut rumqttc::EventLoop) {
    let offline = json!({"node": cfg.node, "online": false}).to_string();
    let _ = client.try_publish(cfg.node_topic(&cfg.node), QoS::AtLeastOnce, true, offline);
    let _ = client.try_disconnect();
    // Sent in order: the offline state, then the disconnect.
    let sent = async {
        while let Ok(event) = eventloop.poll().await {
            if matches!(event, Event::Outgoing(rumqttc::Outgoing::Disconnect)) {
                break;
            }
        }
    };
    let _ = tokio::time::timeout(Duration::from_secs(1), sent).await;
}

/// What the broker holds of a pair: the last renewal (the holder and its term) and
/// each node's state.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Observed {
    pub holder: Option<(String, u64)>,
    /// By name.
    pub nodes: Vec<NodeState>,
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
            Event::Incoming(Incoming::Publish(p)) => {
                if let Some(Heard::Renew { node, term, .. }) = heard(&p.payload) {
                    seen.holder = Some((node, term));
                }
                // The newest of each node's: the retained one comes first, and what it
                // publishes meanwhile after.
                if let Some(state) = node_state(&p.payload) {
                    seen.nodes.retain(|n| n.node != state.node);
                    seen.nodes.push(state);
                }
            }
            _ => {}
        }
    }
    let _ = client.try_disconnect();
    seen.nodes.sort_by(|a, b| a.node.cmp(&b.node));
    Ok(seen)
}

/// A planned switchover done: who acted, who acts now under which term, and how long
/// after the request the other node was seen holding the lease.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Switched {
    pub from: String,
    pub to: String,
    pub term: u64,
    pub after: Duration,
}

/// Asks the acting node of the pair to hand over to the other (`twinops switchover`),
/// and waits (up to `wait`) until the other holds the lease. Refused, asking nothing,
/// unless one node holds the lease and the other is online and level with it: a
/// switchover to a node that is away or behind would leave nobody acting, or one
/// acting on less than the whole twin.
pub async fn switchover(cfg: &ClusterConfig, mqtt: &MqttConfig, wait: Duration) -> anyhow::Result<Switched> {
    let seen = observe(cfg, mqtt, Duration::from_secs(2)).await?;
    let Some((from, term)) = seen.holder.clone() else {
        anyhow::bail!("no node holds the pair's lease: nothing to switch over (`twinops check` says more)");
    };
    let acting = seen.nodes.iter().find(|n| n.node == from);
    let Some(other) = seen.nodes.iter().find(|n| n.node != from && n.online) else {
        anyhow::bail!(
            "node {from} acts and the other node is not online: it would have nobody to hand over to; start it and \
             wait until `twinops check` says it is level"
        );
    };
    match acting.and_then(|a| other.behind(a.progress?)) {
        Some(b) if b.level() => {}
        Some(b) => anyhow::bail!(
            "node {} is {} decisions and {} behind node {from}: wait until `twinops check` says it is level",
            other.node,
            b.decisions,
            b.alarms_s.map_or("every alarm".to_string(), |s| format!("{s} s of alarms"))
        ),
        None => anyhow::bail!("node {from} has not said how far it has come yet; try again in a few seconds"),
    }
    let asked = Instant::now();
    let body = json!({"kind": "handover", "node": from, "term": term}).to_string();
    let client_id = format!("twinops-cluster-{}-{}-switchover", cfg.name, cfg.node);
    ask(mqtt, &client_id, &cfg.lease_topic(), body).await?;
    loop {
        let seen = observe(cfg, mqtt, Duration::from_millis(300)).await?;
        if let Some((to, now)) = seen.holder.filter(|(node, t)| *node != from && *t > term) {
            return Ok(Switched { from, to, term: now, after: asked.elapsed() });
        }
        anyhow::ensure!(
            asked.elapsed() < wait,
            "node {from} was asked to hand over, and node {} did not take the lease within {} s; \
             `twinops check` says who acts now (node {from} takes it back a lease after it stood back)",
            other.node,
            wait.as_secs()
        );
    }
}

/// Publishes `body` on `topic` at QoS 1 over a connection of its own (the site's broker,
/// with its TLS and login) and returns once the broker has acknowledged it.
async fn ask(mqtt: &MqttConfig, client_id: &str, topic: &str, body: String) -> anyhow::Result<()> {
    let mut opts = crate::ingest::mqtt::options(mqtt, client_id)?;
    opts.set_clean_session(true);
    let (client, mut events) = AsyncClient::new(opts, 4);
    let acked = async {
        loop {
            match events.poll().await? {
                Event::Incoming(Incoming::ConnAck(_)) => {
                    client.try_publish(topic, QoS::AtLeastOnce, false, body.clone())?
                }
                Event::Incoming(Incoming::PubAck(_)) => return anyhow::Ok(()),
                _ => {}
            }
        }
    };
    tokio::time::timeout(Duration::from_secs(5), acked)
        .await
        .map_err(|_| anyhow::anyhow!("the broker did not acknowledge the request within 5 s"))??;
    let _ = client.try_disconnect();
    let _ = tokio::time::timeout(Duration::from_millis(200), events.poll()).await;
    Ok(())
}

/// A node's state, if `payload` is one.
fn node_state(payload: &[u8]) -> Option<NodeState> {
    #[derive(Deserialize)]
    struct Msg {
        node: String,
        online: bool,
        decisions: Option<u64>,
        newest_alarm: Option<i64>,
    }
    let m: Msg = serde_json::from_slice(payload).ok()?;
    let progress = m.decisions.map(|decisions| Progress { decisions, newest_alarm: m.newest_alarm });
    Some(NodeState { node: m.node, online: m.online, progress: progress.filter(|_| m.online) })
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
        (Some("handover"), Some(term), _) => Some(Heard::HandOver { node: m.node, term }),
        (None, _, Some(false)) => Some(Heard::Offline { node: m.node }),
        (None, _, Some(true)) => Some(Heard::Online { node: m.node }),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn how_far_behind_the_other_node_is() {
        let me = Progress { decisions: 12, newest_alarm: Some(1_000) };
        let other = |progress| NodeState { node: "b".into(), online: true, progress };
        let behind = |p| other(Some(p)).behind(me);
        let b = |decisions, alarms_s| Some(Behind { decisions, alarms_s });
        assert_eq!(behind(Progress { decisions: 9, newest_alarm: Some(940) }), b(3, Some(60)));
        assert!(behind(Progress { decisions: 14, newest_alarm: Some(1_005) }).unwrap().level(), "ahead is level");
        assert_eq!(behind(Progress { decisions: 0, newest_alarm: None }), b(12, None), "no alarm at all");
        assert_eq!(other(None).behind(me), None, "it has not said");
        let state = br#"{"node": "b", "online": true, "decisions": 9, "newest_alarm": 940}"#;
        assert_eq!(node_state(state), Some(other(Some(Progress { decisions: 9, newest_alarm: Some(940) }))));
        let will = br#"{"node": "b", "online": false}"#;
        assert_eq!(node_state(will), Some(NodeState { node: "b".into(), online: false, progress: None }));
        assert_eq!(node_state(br#"{"kind": "renew", "node": "b", "term": 3, "seq": 1}"#), None);
    }

    /// What travels on the lease topic, as `heard` reads it (the switchover's request
    /// is what `twinops switchover` publishes).
    #[test]
    fn the_lease_topics_messages() {
        let handover = heard(br#"{"kind": "handover", "node": "a", "term": 7}"#);
        assert_eq!(handover, Some(Heard::HandOver { node: "a".into(), term: 7 }));
        let renew = heard(br#"{"kind": "renew", "node": "b", "term": 3, "seq": 4}"#);
        assert_eq!(renew, Some(Heard::Renew { node: "b".into(), term: 3, seq: 4 }));
        assert_eq!(heard(br#"{"node": "b", "online": false}"#), Some(Heard::Offline { node: "b".into() }));
        assert_eq!(heard(br#"{"kind": "handover", "node": "a"}"#), None, "no term, no request");
    }
}
