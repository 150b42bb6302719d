//! The running link to one server: a session kept by async-opcua's loop (reconnect
//! with capped backoff, reactivating the session when the server still has it), and
//! around it what twinops adds:
//!
//! - at each connect: the namespaces read again, the sensors' nodes resolved, and on a
//!   new session the subscriptions created again (a restarted server has none, and
//!   may have renumbered its namespaces); then a ConditionRefresh;
//! - every notification's sequence number checked: a gap is filled with Republish
//!   while the server still holds the messages; beyond that it is recorded in the audit
//!   log and the values read again (or the conditions refreshed);
//! - communication loss raised on the server's asset while it is away, its sensors
//!   stale, both cleared on return;
//! - each notification committed through `intake` in a writer transaction.

use std::collections::{HashMap, HashSet};
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_opcua::client::{
    MonitoredItemMap, OnSubscriptionNotificationCore, Session, SessionConnectMode, SessionPollResult,
};
use async_opcua::types::{
    AttributeId, DataChangeFilter, DataChangeNotification, DataChangeTrigger, DataValue, DeadbandType,
    EventNotificationList, ExtensionObject, MonitoredItemCreateRequest, MonitoringMode, MonitoringParameters,
    NamespaceMap, NotificationMessage, ReadValueId, StatusCode, TimestampsToReturn, Variant,
};
use futures_util::StreamExt;
use tokio::sync::{Notify, mpsc, watch};

use super::conditions::{self, Conditions};
use super::intake::{self, Outcome, Target};
use super::{OpcuaConfig, acks, browse, connect, node};
use crate::cluster::log::DecisionLog;
use crate::domain::{NodeRef, SensorId, Timestamp};
use crate::ingest::IngestPolicy;
use crate::store::{StoreError, Writer};

/// A running OPC UA link.
pub struct Running {
    pub task: tokio::task::JoinHandle<()>,
    /// Whether the session is up and subscribed.
    pub up: watch::Receiver<bool>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum Kind {
    Values,
    Events,
}

impl Kind {
    fn as_str(self) -> &'static str {
        match self {
            Kind::Values => "values",
            Kind::Events => "events",
        }
    }
}

/// A notification, with the subscriptions' generation it belongs to.
struct Note {
    kind: Kind,
    generation: u64,
    message: NotificationMessage,
}

/// async-opcua's callback: hands each notification, whole (its sequence number too),
/// to the link's task.
struct Forward {
    kind: Kind,
    generation: u64,
    tx: mpsc::UnboundedSender<Note>,
}

impl OnSubscriptionNotificationCore for Forward {
    fn on_subscription_notification(&mut self, message: NotificationMessage, _: MonitoredItemMap<'_>) {
        let _ = self.tx.send(Note { kind: self.kind, generation: self.generation, message });
    }
}

/// A subscription of the current generation, and the last sequence number seen.
struct Sub {
    id: u32,
    last: u32,
}

struct Link {
    cfg: Arc<OpcuaConfig>,
    data_dir: PathBuf,
    writer: Writer,
    policy: IngestPolicy,
    wake: Arc<Notify>,
    up: watch::Sender<bool>,
    tx: mpsc::UnboundedSender<Note>,
    generation: u64,
    subs: HashMap<Kind, Sub>,
    targets: Arc<Vec<Target>>,
    uris: Arc<Vec<String>>,
    conditions: Arc<Mutex<Conditions>>,
    unsupported: Arc<Mutex<HashSet<SensorId>>>,
    /// Since when the server has been away (communication loss raised), if it is.
    lost_since: Option<Timestamp>,
    connected_once: bool,
    failures: u32,
    /// Of a redundant pair, whether this node acts: only the acting one passes
    /// acknowledgements on, and it asks for a ConditionRefresh when it takes over.
    acting: watch::Receiver<bool>,
    /// Of a redundant pair, its decision log: acknowledgements passed on are recorded
    /// through it.
    log: Option<Arc<DecisionLog>>,
}

/// Whether this node acts, and of a redundant pair, the pair's decision log.
pub struct Role {
    pub acting: watch::Receiver<bool>,
    pub log: Option<Arc<DecisionLog>>,
}

/// Starts the link; it runs until `stop`.
pub fn start(
    writer: Writer,
    cfg: OpcuaConfig,
    data_dir: PathBuf,
    policy: IngestPolicy,
    wake: Arc<Notify>,
    role: Role,
    stop: watch::Receiver<bool>,
) -> Running {
    let (up_tx, up) = watch::channel(false);
    let (tx, rx) = mpsc::unbounded_channel();
    let link = Link {
        cfg: Arc::new(cfg),
        data_dir,
        writer,
        policy,
        wake,
        up: up_tx,
        tx,
        generation: 0,
        subs: HashMap::new(),
        targets: Arc::new(Vec::new()),
        uris: Arc::new(Vec::new()),
        conditions: Arc::default(),
        unsupported: Arc::default(),
        lost_since: None,
        connected_once: false,
        failures: 0,
        acting: role.acting,
        log: role.log,
    };
    Running { task: tokio::spawn(link.run(rx, stop)), up }
}

impl Link {
    async fn run(mut self, mut notes: mpsc::UnboundedReceiver<Note>, mut stop: watch::Receiver<bool>) {
        let env = |k: &str| std::env::var(k).ok();
        loop {
            let pending = match connect::session(&self.cfg, &self.data_dir, &env).await {
                Ok(p) => p,
                Err(e) => {
                    self.failed(&format!("{e:#}")).await;
                    if wait(&mut stop, self.backoff()).await {
                        return;
                    }
                    continue;
                }
            };
            let session = pending.session;
            // The session's loop is polled in a task of its own: every request the
            // link makes below is answered through it.
            let (step_tx, mut steps) = mpsc::unbounded_channel();
            let poller = tokio::spawn(async move {
                let mut events = Box::pin(pending.events.enter());
                while let Some(step) = events.next().await {
                    let end = step.is_err();
                    if step_tx.send(step).is_err() || end {
                        return;
                    }
                }
            });
            let mut acks = tokio::time::interval(Duration::from_secs(1));
            acks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            let (mut role, mut paired) = (self.acting.clone(), true);
            loop {
                let acting = *self.acting.borrow();
                tokio::select! {
                    _ = acks.tick(), if self.cfg.acknowledge && *self.up.borrow() && acting => self.pass_acks(&session).await,
                    // Taking over: the server sends every condition it holds again, so
                    // this twin's alarm states are the server's before it acts on them.
                    changed = role.changed(), if paired => match changed {
                        Ok(()) if *role.borrow_and_update() && *self.up.borrow() => self.refresh(&session).await,
                        Ok(()) => {}
                        Err(_) => paired = false,
                    },
                    _ = stop.changed() => {
                        let _ = tokio::time::timeout(Duration::from_secs(2), session.disconnect()).await;
                        poller.abort();
                        return;
                    }
                    step = steps.recv() => match step {
                        Some(Ok(SessionPollResult::Reconnected(mode))) => {
                            if let Err(e) = self.connected(&session, mode).await {
                                self.failed(&format!("setting up the session failed: {e:#}")).await;
                                let _ = tokio::time::timeout(Duration::from_secs(2), session.disconnect()).await;
                                break;
                            }
                        }
                        Some(Ok(SessionPollResult::ConnectionLost(status))) => self.lost(status).await,
                        Some(Ok(SessionPollResult::ReconnectFailed(status))) => {
                            let why = connect::explain(status, &self.cfg, &connect::pki_dir(&self.cfg, &self.data_dir));
                            self.failed(&why).await;
                        }
                        Some(Ok(_)) => {}
                        Some(Err(status)) => {
                            self.lost(status).await;
                            break;
                        }
                        None => break,
                    },
                    Some(note) = notes.recv() => self.note(&session, note).await,
                }
            }
            poller.abort();
            self.subs.clear();
            if wait(&mut stop, self.backoff()).await {
                return;
            }
        }
    }

    /// The wait before building a session again: 1 s doubling to the cap, with jitter
    /// so that many clients of one server do not return in step.
    fn backoff(&self) -> Duration {
        let cap = self.cfg.reconnect_max_secs.max(1) * 1000;
        let base = (1000u64 << self.failures.min(10)).min(cap);
        let label = format!("{} {} {}", self.cfg.endpoint, Timestamp::now().unix(), self.failures);
        let jitter = crate::support::Rng::from_label(&label).below(base / 4 + 1);
        Duration::from_millis(base - base / 8 + jitter)
    }

    /// A connect that failed: said once, then every tenth time; communication loss
    /// raised if the server was up before.
    async fn failed(&mut self, why: &str) {
        self.failures += 1;
        crate::metrics::count("twinops_opcua_connect_failures_total", &[], 1.0);
        if self.failures == 1 || self.failures.is_multiple_of(10) {
            tracing::warn!(stage = "opcua", endpoint = %self.cfg.endpoint, attempts = self.failures, "cannot connect to the OPC UA server: {why}");
        }
        if self.connected_once {
            self.lost(StatusCode::BadNotConnected).await;
        }
    }

    async fn lost(&mut self, status: StatusCode) {
        self.up.send_replace(false);
        if self.lost_since.is_some() || !self.connected_once {
            return;
        }
        tracing::warn!(stage = "opcua", endpoint = %self.cfg.endpoint, %status, "the OPC UA server is away; communication loss raised");
        let since = Timestamp::now();
        self.lost_since = Some(since);
        let (cfg, policy) = (Arc::clone(&self.cfg), self.policy.clone());
        self.commit(move |conn| intake::comm_loss(conn, &cfg, true, since, Timestamp::now(), &policy)).await;
    }

    /// A session is up: resolve, subscribe (again, on a new session), refresh conditions.
    async fn connected(&mut self, session: &Arc<Session>, mode: SessionConnectMode) -> anyhow::Result<()> {
        if self.connected_once {
            crate::metrics::count("twinops_opcua_reconnects_total", &[], 1.0);
        }
        self.failures = 0;
        let uris = browse::namespace_uris(session).await?;
        let namespaces = node::namespace_map(&uris);
        self.uris = Arc::new(uris);
        let cfg = Arc::clone(&self.cfg);
        self.writer
            .call_async(move |conn| intake::ensure_server_asset(conn, &cfg))
            .await?
            .map_err(|e| anyhow::anyhow!("adding the server's asset {}: {e}", self.cfg.server_asset))?;
        if self.cfg.auto_register {
            self.register(session, &namespaces).await?;
        }
        if matches!(mode, SessionConnectMode::NewSession(_)) || self.subs.is_empty() {
            self.subscribe(session, &namespaces).await?;
        }
        self.connected_once = true;
        if let Some(since) = self.lost_since.take() {
            let (cfg, policy) = (Arc::clone(&self.cfg), self.policy.clone());
            self.commit(move |conn| intake::comm_loss(conn, &cfg, false, since, Timestamp::now(), &policy)).await;
        }
        // async-opcua 0.19 does not publish on a reactivated session until told to.
        session.trigger_publish_now();
        self.refresh(session).await;
        self.up.send_replace(true);
        tracing::info!(stage = "opcua", endpoint = %self.cfg.endpoint, sensors = self.targets.len(), "OPC UA session up");
        Ok(())
    }

    /// Adds to the twin what the root's tree has and it lacks (`auto_register`).
    async fn register(&self, session: &Session, namespaces: &NamespaceMap) -> anyhow::Result<()> {
        let Some(root) = node::resolve(&self.cfg.root, namespaces) else {
            anyhow::bail!("opcua.root {}: the server has no such namespace", self.cfg.root)
        };
        let found = browse::walk(session, &self.cfg, &root).await?;
        let model = found.model("opcua").map_err(crate::plant::ImportError)?;
        let file = format!("opcua {}", self.cfg.endpoint);
        let changes = self
            .writer
            .call_async(move |conn| {
                crate::plant::import_within(conn, &model, crate::plant::Mode::Partial, "opcua", &file)
            })
            .await??;
        if !changes.is_empty() {
            tracing::info!(stage = "opcua", changes = %changes.summary(), "the twin took what the OPC UA server has and it lacked");
        }
        Ok(())
    }

    /// Creates the values and events subscriptions of a new generation, deleting the
    /// last one's (on a new session the server has them no more: the delete only
    /// clears them from the client).
    async fn subscribe(&mut self, session: &Arc<Session>, namespaces: &NamespaceMap) -> anyhow::Result<()> {
        let old: Vec<u32> = self.subs.drain().map(|(_, s)| s.id).collect();
        if !old.is_empty() {
            let _ = session.delete_subscriptions(&old).await;
        }
        self.generation += 1;
        self.unsupported.lock().expect("unsupported lock").clear();
        let (targets, unresolved) = self.targets(namespaces).await?;
        self.targets = Arc::new(targets);
        let publishing = Duration::from_millis(self.cfg.publishing_interval_ms);
        // Lifetime and keep-alive counts: a keep-alive every 10 intervals, the
        // subscription kept for 3 keep-alives' worth of silence from us.
        let forward = |kind| Forward { kind, generation: self.generation, tx: self.tx.clone() };
        let values = session.create_subscription(publishing, 30, 10, 0, 0, true, forward(Kind::Values)).await?;
        let items = self.value_items(namespaces);
        let mut refused = unresolved;
        // In requests of 500: servers limit a message's size (node-opcua closes the
        // connection on 2,000 items in one).
        for chunk in items.chunks(500) {
            let created = session.create_monitored_items(values, TimestampsToReturn::Both, chunk.to_vec()).await?;
            for c in created.iter().filter(|c| !c.result.status_code.is_good()) {
                let target = &self.targets[c.requested_parameters.client_handle as usize - 1];
                refused.push((target.clone(), c.result.status_code));
            }
        }
        self.subs.insert(Kind::Values, Sub { id: values, last: 0 });
        self.dead_letter_refused(refused).await;
        let events = session.create_subscription(publishing, 30, 10, 0, 0, true, forward(Kind::Events)).await?;
        let notifiers: Vec<MonitoredItemCreateRequest> = self
            .cfg
            .event_notifiers
            .iter()
            .filter_map(|n| node::resolve(n, namespaces))
            .enumerate()
            .map(|(i, node)| MonitoredItemCreateRequest {
                item_to_monitor: ReadValueId {
                    node_id: node,
                    attribute_id: AttributeId::EventNotifier as u32,
                    ..Default::default()
                },
                monitoring_mode: MonitoringMode::Reporting,
                requested_parameters: MonitoringParameters {
                    client_handle: i as u32 + 1,
                    sampling_interval: 0.0,
                    filter: ExtensionObject::from_message(conditions::filter()),
                    queue_size: 10_000,
                    discard_oldest: true,
                },
            })
            .collect();
        session.create_monitored_items(events, TimestampsToReturn::Both, notifiers).await?;
        self.subs.insert(Kind::Events, Sub { id: events, last: 0 });
        Ok(())
    }

    /// The twin's sensors with a node, resolved on this server; and those whose
    /// namespace it does not have.
    async fn targets(&self, namespaces: &NamespaceMap) -> anyhow::Result<(Vec<Target>, Vec<(Target, StatusCode)>)> {
        let rows: Vec<(String, String)> = self
            .writer
            .call_async(|conn| {
                let rows = conn
                    .prepare("SELECT id, opcua_node FROM sensors WHERE opcua_node IS NOT NULL AND retired_at IS NULL ORDER BY id")?
                    .query_map([], |r| Ok((r.get(0)?, r.get(1)?)))?
                    .collect::<Result<Vec<_>, _>>()?;
                Ok::<_, StoreError>(rows)
            })
            .await?;
        let (mut targets, mut unresolved) = (Vec::new(), Vec::new());
        for (sensor, text) in rows {
            let (Ok(sensor), Ok(node)) = (SensorId::parse(&sensor), NodeRef::parse(&text)) else { continue };
            let target = Target { sensor, node };
            match node::resolve(&target.node, namespaces) {
                Some(_) => targets.push(target),
                None => unresolved.push((target, StatusCode::BadNodeIdUnknown)),
            }
        }
        Ok((targets, unresolved))
    }

    fn value_items(&self, namespaces: &NamespaceMap) -> Vec<MonitoredItemCreateRequest> {
        let deadband = match self.cfg.deadband.as_str() {
            "absolute" => DeadbandType::Absolute,
            "percent" => DeadbandType::Percent,
            _ => DeadbandType::None,
        };
        let filter = DataChangeFilter {
            trigger: DataChangeTrigger::StatusValueTimestamp,
            deadband_type: deadband as u32,
            deadband_value: self.cfg.deadband_value,
        };
        self.targets
            .iter()
            .enumerate()
            .filter_map(|(i, t)| {
                Some(MonitoredItemCreateRequest {
                    item_to_monitor: ReadValueId {
                        node_id: node::resolve(&t.node, namespaces)?,
                        attribute_id: AttributeId::Value as u32,
                        ..Default::default()
                    },
                    monitoring_mode: MonitoringMode::Reporting,
                    requested_parameters: MonitoringParameters {
                        client_handle: i as u32 + 1,
                        sampling_interval: self.cfg.sampling_interval_ms as f64,
                        filter: ExtensionObject::from_message(filter.clone()),
                        queue_size: self.cfg.queue_size,
                        discard_oldest: true,
                    },
                })
            })
            .collect()
    }

    /// Sensors whose node the server refused (no such node, a filter it does not take):
    /// a dead letter each, reason `invalid`, with the fix.
    async fn dead_letter_refused(&self, refused: Vec<(Target, StatusCode)>) {
        if refused.is_empty() {
            return;
        }
        let endpoint = self.cfg.endpoint.clone();
        self.commit(move |conn| {
            for (t, status) in &refused {
                let detail = format!(
                    "sensor {}: node {} cannot be subscribed on {endpoint} ({status}): correct opcua_node in the tag \
                     file (`twinops opcua browse` lists the server's nodes) and import it again",
                    t.sensor, t.node
                );
                let rejected = crate::ingest::Rejected {
                    reason: crate::domain::DeadLetterReason::Invalid,
                    detail,
                    event: String::new(),
                };
                let payload = serde_json::json!({"sensor_id": t.sensor.as_str(), "node": t.node.to_string(), "status": status.to_string()});
                crate::ingest::dead_letters::write(conn, intake::VALUES_TOPIC, payload.to_string().as_bytes(), &rejected, Timestamp::now())?;
            }
            Ok(Outcome::default())
        })
        .await;
    }

    /// Operators' acknowledgements in twinops of alarms on OPC UA conditions, passed on
    /// to the server (`acknowledge = true`): its Acknowledge method on the condition,
    /// naming the condition's last event; each result recorded (`acks`). Of a pair,
    /// the record goes through the pair's log, so the other node has it too and does
    /// not pass the same acknowledgement on after a takeover; with the broker away it
    /// is made here alone.
    async fn pass_acks(&self, session: &Session) {
        let Ok(due) = self.writer.call_async(acks::due).await else { return };
        let namespaces = node::namespace_map(&self.uris);
        for acks::Due { journal_id, mut passed, opcua_event } in due {
            let node = NodeRef::parse(&passed.condition).ok().and_then(|n| node::resolve(&n, &namespaces));
            passed.result = match node {
                None => format!("{}: not on this server", passed.condition),
                Some(node) => {
                    let comment = format!("acknowledged in twinops by {}", passed.acked_by);
                    match session.call_one(conditions::acknowledge_request(node, &opcua_event, &comment)).await {
                        Ok(r) => r.status_code.to_string(),
                        // Not answered: tried again at the next tick.
                        Err(e) => {
                            tracing::warn!(stage = "opcua", error = %e, "passing an acknowledgement on failed; trying again");
                            return;
                        }
                    }
                }
            };
            if let Some(log) = &self.log {
                let args = serde_json::to_value(&passed).unwrap_or_default();
                match log.submit(acks::KIND, args, "opcua").await {
                    Ok(_) => continue,
                    Err(e) => {
                        tracing::warn!(stage = "opcua", error = %e, "an acknowledgement passed on is recorded on this node only")
                    }
                }
            }
            self.commit(move |conn| {
                acks::record(conn, journal_id, &passed)?;
                Ok(Outcome::default())
            })
            .await;
        }
    }

    /// ConditionRefresh on the events subscription: the server sends every retained
    /// condition again between RefreshStart and RefreshEnd.
    async fn refresh(&self, session: &Session) {
        let Some(events) = self.subs.get(&Kind::Events) else { return };
        match session.call_one(conditions::refresh_request(events.id)).await {
            Ok(r) if r.status_code.is_good() => {}
            Ok(r) => {
                tracing::info!(stage = "opcua", status = %r.status_code, "the server refused ConditionRefresh; conditions arrive as they change")
            }
            Err(e) => tracing::warn!(stage = "opcua", error = %e, "ConditionRefresh failed"),
        }
    }

    /// One notification: its sequence checked (a gap filled by Republish, or recorded
    /// and made good by reading again), then committed.
    async fn note(&mut self, session: &Session, note: Note) {
        if note.generation != self.generation {
            return;
        }
        let kind = note.kind;
        let Some(sub) = self.subs.get_mut(&kind) else { return };
        let (id, seq) = (sub.id, note.message.sequence_number);
        let has_data = note.message.notification_data.as_ref().is_some_and(|d| !d.is_empty());
        tracing::trace!(stage = "opcua", subscription = kind.as_str(), seq, has_data, last = sub.last, "notification");
        let Some((missing, last)) = sequence(sub.last, seq, has_data) else { return };
        sub.last = last;
        let labels = [("subscription", kind.as_str())];
        crate::metrics::count("twinops_opcua_notifications_total", &labels, f64::from(u8::from(has_data)));
        if let Some(missing) = missing {
            crate::metrics::count("twinops_opcua_sequence_gaps_total", &labels, 1.0);
            self.fill_gap(session, kind, id, missing).await;
        }
        if has_data {
            self.process(kind, note.message).await;
        }
    }

    async fn fill_gap(&mut self, session: &Session, kind: Kind, id: u32, missing: (u32, u32)) {
        let labels = [("subscription", kind.as_str())];
        let mut lost: Option<(u32, u32)> = None;
        // At most 1000 asked for: a longer gap is beyond what a server keeps.
        for n in missing.0..=missing.1.min(missing.0.saturating_add(999)) {
            match session.republish(id, n).await {
                Ok(message) => {
                    crate::metrics::count("twinops_opcua_republished_total", &labels, 1.0);
                    self.process(kind, message).await;
                }
                Err(_) => lost = Some((lost.map_or(n, |l| l.0), n)),
            }
        }
        if missing.1 > missing.0.saturating_add(999) {
            lost = Some((lost.map_or(missing.0, |l| l.0), missing.1));
        }
        let Some(range) = lost else { return };
        tracing::warn!(
            stage = "opcua",
            subscription = kind.as_str(),
            from = range.0,
            to = range.1,
            "OPC UA notifications lost beyond Republish; reading again"
        );
        let name = kind.as_str();
        self.commit(move |conn| {
            intake::gap(conn, name, range, Timestamp::now())?;
            Ok(Outcome::default())
        })
        .await;
        match kind {
            Kind::Values => self.read_again(session).await,
            Kind::Events => self.refresh(session).await,
        }
    }

    /// Every target's value read now, stored as a data change would be.
    async fn read_again(&mut self, session: &Session) {
        let namespaces = node::namespace_map(&self.uris);
        let ids: Vec<(u32, ReadValueId)> = self
            .targets
            .iter()
            .enumerate()
            .filter_map(|(i, t)| {
                let node_id = node::resolve(&t.node, &namespaces)?;
                Some((
                    i as u32 + 1,
                    ReadValueId { node_id, attribute_id: AttributeId::Value as u32, ..Default::default() },
                ))
            })
            .collect();
        let read: Vec<ReadValueId> = ids.iter().map(|(_, r)| r.clone()).collect();
        match session.read(&read, TimestampsToReturn::Both, 0.0).await {
            Ok(values) => {
                let items: Vec<(u32, DataValue)> = ids.iter().map(|(h, _)| *h).zip(values).collect();
                self.commit_values(items).await;
            }
            Err(e) => tracing::warn!(stage = "opcua", error = %e, "reading the values again failed"),
        }
    }

    async fn process(&mut self, kind: Kind, message: NotificationMessage) {
        let mut items: Vec<(u32, DataValue)> = Vec::new();
        let mut events: Vec<Vec<Variant>> = Vec::new();
        for data in message.notification_data.into_iter().flatten() {
            if let Some(change) = data.inner_as::<DataChangeNotification>() {
                items.extend(change.monitored_items.iter().flatten().map(|n| (n.client_handle, n.value.clone())));
            } else if let Some(list) = data.inner_as::<EventNotificationList>() {
                events.extend(list.events.iter().flatten().map(|e| e.event_fields.clone().unwrap_or_default()));
            }
        }
        match kind {
            Kind::Values => self.commit_values(items).await,
            Kind::Events => {
                let (cfg, policy) = (Arc::clone(&self.cfg), self.policy.clone());
                let (state, uris) = (Arc::clone(&self.conditions), Arc::clone(&self.uris));
                self.commit(move |conn| {
                    let mut state = state.lock().expect("conditions lock");
                    intake::events(conn, &cfg, &mut state, events, &uris, Timestamp::now(), &policy)
                })
                .await;
            }
        }
    }

    async fn commit_values(&self, items: Vec<(u32, DataValue)>) {
        if items.is_empty() {
            return;
        }
        let (targets, policy, unsupported) =
            (Arc::clone(&self.targets), self.policy.clone(), Arc::clone(&self.unsupported));
        self.commit(move |conn| {
            let mut unsupported = unsupported.lock().expect("unsupported lock");
            intake::values(conn, &targets, &items, &mut unsupported, Timestamp::now(), &policy)
        })
        .await;
    }

    /// Runs `job` in a writer transaction; a failure is logged (the values of that
    /// notification are lost to a fault of our own disk, said as such).
    async fn commit<F>(&self, job: F)
    where
        F: FnOnce(&rusqlite::Connection) -> Result<Outcome, StoreError> + Send + 'static,
    {
        match self.writer.call_async(job).await {
            Ok(outcome) => {
                if outcome.raised {
                    self.wake.notify_waiters();
                }
            }
            Err(e) => tracing::error!(stage = "opcua", error = %e, "an OPC UA notification could not be committed"),
        }
    }
}

/// What a notification's sequence number says against the last one seen: `None` for
/// one already had (a Republish answered it); else the numbers missing before it, if
/// any, and the new last. A keep-alive carries the next number, not one of its own.
fn sequence(last: u32, seq: u32, has_data: bool) -> Option<(Option<(u32, u32)>, u32)> {
    if has_data && seq <= last {
        return None;
    }
    let last_now = if has_data { seq } else { seq.saturating_sub(1) };
    let missing = (last < seq.saturating_sub(1)).then(|| (last + 1, seq - 1));
    Some((missing, last.max(last_now)))
}

/// Sleeps `d` unless stopped first; true when stopped.
async fn wait(stop: &mut watch::Receiver<bool>, d: Duration) -> bool {
    tokio::select! {
        _ = stop.changed() => true,
        _ = tokio::time::sleep(d) => *stop.borrow(),
    }
}

#[cfg(test)]
mod tests {
    use super::sequence;

    #[test]
    fn sequence_numbers_find_gaps_in_data_and_behind_keep_alives() {
        assert_eq!(sequence(0, 1, true), Some((None, 1)), "the first");
        assert_eq!(sequence(2, 6, true), Some((Some((3, 5)), 6)), "three lost before this one");
        assert_eq!(sequence(6, 7, false), Some((None, 6)), "a keep-alive names the next number");
        assert_eq!(sequence(6, 9, false), Some((Some((7, 8)), 8)), "two lost before a keep-alive");
        assert_eq!(sequence(6, 6, true), None, "had already");
        assert_eq!(sequence(6, 4, true), None, "a Republish's answer come again");
    }
}
