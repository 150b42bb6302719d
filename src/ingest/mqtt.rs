//! The MQTT transport (rumqttc): QoS 1, a persistent session, manual acks.
//!
//! A message is acknowledged only after its effect (or its dead letter) is committed,
//! and acks go out in arrival order. Messages are parsed as they arrive and wait in an
//! intake; the writer job takes what is waiting when it starts (group commit: what
//! arrived during the previous commit, up to `batch_max`, after `batch_ms` if set),
//! commits it in one transaction, and the PUBACKs of the commit are written in order
//! and flushed together. rumqttc does not re-subscribe after a reconnect; we do, on
//! every ConnAck. Messages received on a connection that has since dropped are
//! committed (applying is idempotent) but not acked: their packet ids belong to the old
//! connection, and the broker redelivers them.
//!
//! The intake is bounded (twice `batch_max` messages, or [`INTAKE_BYTES`]): when it is
//! full, the socket is not read until the writer catches up, so the broker, not our
//! memory, holds a backlog. A batch that cannot be committed at all (the database
//! locked by another process past its busy timeout, a full disk) is not acked; ingest
//! then reconnects, with backoff, so that the broker redelivers it.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rumqttc::{
    AsyncClient, ConnectionError, Event, EventLoop, MqttOptions, Packet, PubAck, Publish, QoS, Request, StateError,
    SubAck, Subscribe, SubscribeFilter, SubscribeReasonCode, Transport, mqttbytes::Error as MqttError,
};
use serde::Deserialize;
use tokio::sync::{Notify, mpsc, watch};

use super::IngestPolicy;
use super::payload::MAX_PACKET_BYTES;
use super::{Message, MessageEffect, apply_batch};
use crate::alarms::Applied;
use crate::domain::Timestamp;
use crate::store::{StoreError, Writer};
use crate::support::Secret;

/// Builds client options from the configuration: `mqtt://host:port` or `mqtts://`.
pub fn options(cfg: &MqttConfig, client_id: &str) -> anyhow::Result<MqttOptions> {
    let url = reqwest::Url::parse(&cfg.url).map_err(|e| anyhow::anyhow!("mqtt.url '{}': {e}", cfg.url))?;
    let (tls, default_port) = match url.scheme() {
        "mqtt" | "tcp" => (false, 1883),
        "mqtts" | "ssl" => (true, 8883),
        other => anyhow::bail!("mqtt.url: scheme '{other}' is not supported; use mqtt:// or mqtts://"),
    };
    let host = url.host_str().ok_or_else(|| anyhow::anyhow!("mqtt.url '{}' has no host", cfg.url))?;
    let mut opts = MqttOptions::new(client_id, host, url.port().unwrap_or(default_port));
    opts.set_clean_session(false);
    opts.set_manual_acks(true);
    opts.set_keep_alive(Duration::from_secs(30));
    opts.set_max_packet_size(super::payload::MAX_PACKET_BYTES, 1024 * 1024);
    opts.set_inflight(cfg.inflight);
    opts.set_request_channel_capacity(4096);
    if tls {
        let config = tls_config(cfg)?;
        opts.set_transport(Transport::tls_with_config(rumqttc::TlsConfiguration::Rustls(Arc::new(config))));
    }
    if let Some(user) = &cfg.username {
        opts.set_credentials(user, cfg.password.as_ref().map(|p| p.expose().to_string()).unwrap_or_default());
    }
    Ok(opts)
}

/// The TLS client configuration for `mqtts://`: the broker's CA (or the system's roots)
/// and, for brokers that require it, our client certificate. Built on ring explicitly,
/// not on a process-wide default provider.
fn tls_config(cfg: &MqttConfig) -> anyhow::Result<rustls::ClientConfig> {
    use anyhow::Context;
    use rustls::pki_types::PrivateKeyDer;
    use rustls::pki_types::pem::PemObject;

    use crate::support::tls::certs;

    let builder = crate::support::tls::builder(cfg.ca_file.as_deref(), "mqtt.ca_file")?;
    Ok(match (&cfg.client_cert_file, &cfg.client_key_file) {
        (Some(cert), Some(key)) => {
            let chain = certs(cert, "mqtt.client_cert_file")?;
            let key = PrivateKeyDer::from_pem_file(key)
                .with_context(|| format!("mqtt.client_key_file: no PEM private key in {}", key.display()))?;
            builder
                .with_client_auth_cert(chain, key)
                .context("mqtt.client_cert_file and mqtt.client_key_file do not match")?
        }
        _ => builder.with_no_client_auth(),
    })
}

/// The `[mqtt]` part: the broker to subscribe to, or the embedded one.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct MqttConfig {
    /// `mqtt://host:1883` or `mqtts://host:8883`. Empty: start the embedded broker on
    /// `embedded_listen` and connect to it.
    pub url: String,
    pub username: Option<String>,
    pub password: Option<Secret>,
    /// mqtts: the CA that signed the broker's certificate (PEM); the system's roots if unset.
    pub ca_file: Option<PathBuf>,
    /// mqtts: our client certificate (PEM), for brokers that require one.
    pub client_cert_file: Option<PathBuf>,
    /// mqtts: the client certificate's private key (PEM: PKCS#8, PKCS#1 or SEC1).
    pub client_key_file: Option<PathBuf>,
    /// Stable, so the broker keeps our session (and unacked messages) across restarts.
    pub client_id: String,
    /// Topic filters for alarm events and telemetry.
    pub topics: Vec<String>,
    /// Where the embedded broker listens (loopback by default).
    pub embedded_listen: String,
    /// Our own QoS 1 publishes (notes, decisions) that may await the broker's ack. How
    /// many the broker sends us unacknowledged is the broker's setting (MQTT 3.1.1
    /// has no way to ask), e.g. Mosquitto's `max_inflight_messages`.
    pub inflight: u16,
    /// Most messages committed in one transaction. A batch is what arrived while the
    /// previous one committed (group commit)... At most twice this many wait in
    /// memory; past that, ingest stops reading from the broker until the writer
    /// catches up.
    pub batch_max: usize,
    /// ...plus what arrives within this many milliseconds, if not 0. Unset: 1 with a
    /// configured broker, whose window for us should be large (Mosquitto
    /// `max_inflight_messages 1000`), so that commits grow from a few messages to ~70;
    /// 0 with the embedded broker, whose window of 100 waiting would leave full.
    pub batch_ms: Option<u64>,
    /// Events stamped more than this many seconds after they arrive are dead-lettered
    /// (`invalid`): a gateway clock that runs ahead, or local time sent as UTC. 0: no
    /// limit.
    pub max_time_ahead_s: u32,
    /// Events stamped more than this many seconds before they arrive are dead-lettered
    /// (`invalid`). 0 (the default): no limit, since a backfill after an outage is late
    /// by design; events stamped before 2001 (a reset clock) are refused regardless.
    pub max_time_behind_s: u32,
    /// Notes are published on `{notes_topic}/{asset}`.
    pub notes_topic: String,
}

impl MqttConfig {
    pub fn validate(&self) -> anyhow::Result<()> {
        anyhow::ensure!(
            self.url.is_empty() || self.url.starts_with("mqtt://") || self.url.starts_with("mqtts://"),
            "mqtt.url must start with mqtt:// or mqtts://, got '{}'",
            self.url
        );
        anyhow::ensure!(
            !self.topics.is_empty(),
            "mqtt.topics is empty; twinops would receive nothing (e.g. [\"scada/#\"])"
        );
        anyhow::ensure!(
            !self.client_id.trim().is_empty(),
            "mqtt.client_id must not be empty: the broker keeps the session under it"
        );
        anyhow::ensure!(
            self.embedded_listen.parse::<SocketAddr>().is_ok(),
            "mqtt.embedded_listen '{}' is not an address like 127.0.0.1:1883",
            self.embedded_listen
        );
        anyhow::ensure!(
            self.client_cert_file.is_some() == self.client_key_file.is_some(),
            "mqtt.client_cert_file and mqtt.client_key_file go together: set both or neither"
        );
        anyhow::ensure!(self.batch_max > 0 && self.inflight > 0, "mqtt.batch_max and mqtt.inflight must be at least 1");
        Ok(())
    }

    /// Points ingest at the embedded broker on `listen`, with that broker's `batch_ms`
    /// default.
    pub fn use_embedded(&mut self, listen: SocketAddr) {
        self.url = format!("mqtt://{listen}");
        self.batch_ms.get_or_insert(0);
    }

    /// How long a first message waits for company before its commit: `batch_ms`, or 1
    /// ms for a configured broker (see [`MqttConfig::use_embedded`]).
    pub fn batch_wait(&self) -> Duration {
        Duration::from_millis(self.batch_ms.unwrap_or(1))
    }
}

impl Default for MqttConfig {
    fn default() -> Self {
        MqttConfig {
            url: String::new(),
            username: None,
            password: None,
            ca_file: None,
            client_cert_file: None,
            client_key_file: None,
            client_id: "twinops".into(),
            topics: vec!["scada/#".into()],
            embedded_listen: "127.0.0.1:1883".into(),
            inflight: 100,
            batch_max: 500,
            batch_ms: None,
            max_time_ahead_s: super::MAX_AHEAD_S as u32,
            max_time_behind_s: 0,
            notes_topic: "twinops/notes".into(),
        }
    }
}

/// A running MQTT ingest.
pub struct Running {
    /// Ends after a stop, once what arrived before it is committed and acknowledged.
    pub task: tokio::task::JoinHandle<()>,
    /// Whether the broker connection is up and our subscriptions are granted.
    pub broker_up: watch::Receiver<bool>,
    /// Messages acknowledged to the broker so far (written and flushed).
    pub acked: watch::Receiver<u64>,
    intake: Arc<Intake>,
}

impl Running {
    /// Messages received and parsed, waiting for the writer.
    pub fn waiting(&self) -> usize {
        self.intake.waiting.lock().expect("intake lock").messages.len()
    }
}

/// Most payload bytes waiting for the writer, whatever their count.
pub const INTAKE_BYTES: usize = 32 << 20;

/// Runs the MQTT ingest until `stop`. `wake` is notified when new occurrences need
/// triage.
pub fn start(
    writer: Writer,
    cfg: MqttConfig,
    policy: IngestPolicy,
    wake: Arc<Notify>,
    stop: watch::Receiver<bool>,
) -> anyhow::Result<Running> {
    let mut opts = options(&cfg, &cfg.client_id)?;
    // Sparkplug's primary host: gateways buffer while our STATE says offline, which the
    // broker says for us (the will) when the connection drops. The birth and the will
    // carry the same timestamp, as Sparkplug 3.0 asks.
    let sparkplug = policy.sparkplug.clone();
    let state = sparkplug.as_ref().filter(|s| s.primary_host).map(|s| {
        let at_ms = Timestamp::now().unix() as u64 * 1000;
        opts.set_last_will(rumqttc::LastWill::new(
            s.state_topic(),
            crate::sparkplug::state(false, at_ms),
            QoS::AtLeastOnce,
            true,
        ));
        (s.state_topic(), crate::sparkplug::state(true, at_ms))
    });
    let mut topics = cfg.topics.clone();
    topics.extend(sparkplug.as_ref().map(|s| s.filters()).unwrap_or_default());
    let (up, broker_up) = watch::channel(false);
    let (acked_tx, acked) = watch::channel(0);
    let (client, mut eventloop) = AsyncClient::new(opts, 16);
    // No Nagle: acks are already written one flush per commit, and held back behind an
    // unacknowledged segment they would wait for the broker's delayed TCP ack while it
    // waits for them (seen as rounds at half speed).
    let mut network = eventloop.network_options();
    network.set_tcp_nodelay(true);
    eventloop.set_network_options(network);
    // Unbounded, but it holds one entry per writer job, and at most two are out.
    let (committed_tx, committed) = mpsc::unbounded_channel::<Committed>();
    let intake = Arc::new(Intake::default());
    let ingest = Ingest {
        eventloop,
        _client: client,
        topics,
        state,
        rebirths_sent: std::collections::HashMap::new(),
        connection: 0,
        up,
        acked: acked_tx,
        writer,
        policy,
        wake,
        committed_tx,
        intake: Arc::clone(&intake),
        waiting_since: None,
        batch_max: cfg.batch_max,
        batch_wait: cfg.batch_wait(),
        jobs_out: 0,
        jobs_queued: 0,
        retry_at: None,
        backoff: FIRST_BACKOFF,
        failing: false,
    };
    let task = tokio::spawn(ingest.run(committed, stop));
    Ok(Running { task, broker_up, acked, intake })
}

/// What acknowledges a message: the connection it came on, and its packet id there.
type AckId = (u64, u16);

/// A received message, parsed, with what acknowledges it once committed (none for
/// QoS 0).
struct Received {
    message: Message,
    ack: Option<AckId>,
}

/// Messages waiting for the writer. The writer job takes what is here when it starts,
/// not when it was queued: whatever arrived while the last commit was on disk goes
/// into the next one, so transactions (and fsyncs) grow with the load.
#[derive(Default)]
struct Intake {
    waiting: Mutex<Waiting>,
    /// The number of the writer job queued that has not yet taken from `waiting`, or 0.
    /// A number, not a flag, so that a job the writer gives up on before running it
    /// clears only its own claim.
    job_queued: AtomicU64,
}

#[derive(Default)]
struct Waiting {
    messages: Vec<Received>,
    /// Their payloads' bytes.
    bytes: usize,
}

impl Waiting {
    fn push(&mut self, received: Received) {
        self.bytes += received.message.payload_len();
        self.messages.push(received);
    }

    /// The oldest `n` (or all, if fewer wait).
    fn take(&mut self, n: usize) -> Vec<Received> {
        let taken: Vec<Received> = self.messages.drain(..n.min(self.messages.len())).collect();
        self.bytes -= taken.iter().map(|r| r.message.payload_len()).sum::<usize>();
        taken
    }

    fn full(&self, batch_max: usize) -> bool {
        self.messages.len() >= 2 * batch_max || self.bytes >= INTAKE_BYTES
    }
}

impl Intake {
    fn is_empty(&self) -> bool {
        self.waiting.lock().expect("intake lock").messages.is_empty()
    }

    /// Holds as much as it may: twice `batch_max` messages, or [`INTAKE_BYTES`].
    fn full(&self, batch_max: usize) -> bool {
        self.waiting.lock().expect("intake lock").full(batch_max)
    }

    /// Whether to queue a writer job now: none is queued, messages wait, and either we
    /// stop, or `batch_max` wait, or the intake is full, or they have `waited` enough.
    /// A full intake is not read from, so it must not wait for anything more.
    fn job_due(&self, batch_max: usize, stopping: bool, waited: bool) -> bool {
        if self.job_queued.load(Ordering::SeqCst) != 0 {
            return false;
        }
        let waiting = self.waiting.lock().expect("intake lock");
        let n = waiting.messages.len();
        n > 0 && (stopping || n >= batch_max || waiting.full(batch_max) || waited)
    }

    /// Clears `job`'s claim, if it is still the queued one.
    fn unqueue(&self, job: u64) {
        let _ = self.job_queued.compare_exchange(job, 0, Ordering::SeqCst, Ordering::SeqCst);
    }
}

/// A writer job's outcome, sent from the writer thread: the packet ids to acknowledge,
/// in arrival order, or that nothing was committed.
enum Committed {
    /// And the Sparkplug rebirth requests the commit asks for (NCMD topics).
    Acks(Vec<AckId>, Vec<String>),
    Failed,
}

const FIRST_BACKOFF: Duration = Duration::from_millis(250);
const REBIRTH_EVERY: Duration = Duration::from_secs(5);
/// Capped low: a delay left to grow while the broker is down would keep ingest away
/// for most of it after the broker returns (3.9 s after a 12 s outage, 30 s after a
/// long one). A reconnect every 2 s or so costs a broker nothing.
const MAX_BACKOFF: Duration = Duration::from_secs(2);

/// The ingest task. It owns the rumqttc event loop and does everything between the
/// socket and the writer thread, so a message crosses threads twice: to the writer and
/// back as an ack.
///
/// Acks are written here, not sent through `AsyncClient::ack`: the event loop takes
/// one request per turn and flushes after each, one write per message; here a commit's
/// PUBACKs go out in one flush. Nothing is ever sent through the client's request
/// channel, so when a commit lands `poll()` is only ever interrupted while waiting for
/// the network or a timer, or in a flush whose bytes stay buffered: no packet is lost.
struct Ingest {
    eventloop: EventLoop,
    /// Keeps the request channel open: the event loop ends once every client is gone.
    _client: AsyncClient,
    topics: Vec<String>,
    /// Our Sparkplug STATE topic and its online payload, published on every connection.
    state: Option<(String, Vec<u8>)>,
    /// When a rebirth was last asked of each edge node (its NCMD topic): at most one
    /// every [`REBIRTH_EVERY`], however many gaps a burst of messages shows.
    rebirths_sent: std::collections::HashMap<String, std::time::Instant>,
    /// The broker connection's generation: acks for messages of an older one are void
    /// (their packet ids belong to that connection, and the broker redelivers them).
    connection: u64,
    up: watch::Sender<bool>,
    acked: watch::Sender<u64>,
    writer: Writer,
    policy: IngestPolicy,
    /// Told when new occurrences need triage.
    wake: Arc<Notify>,
    committed_tx: mpsc::UnboundedSender<Committed>,
    intake: Arc<Intake>,
    /// When the oldest message not yet offered to a writer job arrived (for `batch_ms`).
    waiting_since: Option<tokio::time::Instant>,
    batch_max: usize,
    batch_wait: Duration,
    /// Writer jobs queued whose outcome has not come back.
    jobs_out: usize,
    /// Writer jobs queued so far (numbers them).
    jobs_queued: u64,
    /// When to reconnect, after the connection dropped or a batch failed to commit.
    retry_at: Option<tokio::time::Instant>,
    backoff: Duration,
    /// The last connection ended on what a reconnect alone does not cure (a batch that
    /// failed to commit, a packet too large to read): the backoff keeps growing across
    /// reconnects until a commit succeeds.
    failing: bool,
}

impl Ingest {
    /// Runs until stopped: after `stop`, what already arrived is committed and
    /// acknowledged; messages still arriving are neither, so the broker keeps them.
    async fn run(mut self, mut committed: mpsc::UnboundedReceiver<Committed>, mut stop: watch::Receiver<bool>) {
        let mut stopping = false;
        loop {
            if self.job_due(stopping) {
                self.queue_job();
            }
            let idle = self.intake.is_empty();
            if stopping && self.jobs_out == 0 && idle {
                break;
            }
            if idle {
                // A job took them all, including any that came after it was queued.
                self.waiting_since = None;
            }
            // With `batch_ms`, the first message waits that long for company; not while a
            // job is queued, which will take it anyway (a deadline already past would
            // win every turn of the biased select, and the socket would never be read).
            let job_queued = self.intake.job_queued.load(Ordering::SeqCst) != 0;
            let batch_deadline =
                (self.waiting_since).filter(|_| !self.batch_wait.is_zero() && !job_queued).map(|t| t + self.batch_wait);
            let now = tokio::time::Instant::now();
            // A full intake is not added to: the broker keeps the rest until it drains.
            let reading = self.retry_at.is_none() && !self.intake.full(self.batch_max);
            tokio::select! {
                biased;
                Some(done) = committed.recv() => self.write_acks(done, &mut committed).await,
                _ = stop.changed(), if !stopping => stopping = true,
                _ = tokio::time::sleep_until(self.retry_at.unwrap_or(now)), if self.retry_at.is_some() => self.retry_at = None,
                _ = tokio::time::sleep_until(batch_deadline.unwrap_or(now)), if batch_deadline.is_some() => {}
                event = self.eventloop.poll(), if reading => match event {
                    Ok(Event::Incoming(Packet::ConnAck(_))) => {
                        self.connection += 1;
                        tracing::info!(stage = "ingest", connection = self.connection, "connected to the MQTT broker; subscribing");
                        self.subscribe().await;
                        self.publish_state().await;
                    }
                    Ok(Event::Incoming(Packet::SubAck(ack))) => self.subscribed(&ack),
                    Ok(Event::Incoming(Packet::Publish(publish))) if !stopping => self.take(publish),
                    Ok(_) => {}
                    Err(ConnectionError::MqttState(StateError::Deserialization(MqttError::PayloadSizeLimitExceeded(size)))) => {
                        tracing::error!(
                            stage = "ingest", size, limit = MAX_PACKET_BYTES, retry_in_ms = self.backoff.as_millis() as u64,
                            "the broker holds a message for us larger than ingest can read and offers it on every connection, so \
                             ingest is stuck behind it; set the broker's message size limit under this limit (Mosquitto: \
                             max_packet_size 16777216) and clear the message from the broker"
                        );
                        self.failing = true;
                        self.reconnect_later();
                    }
                    Err(e) => {
                        tracing::warn!(stage = "ingest", error = %e, retry_in_ms = self.backoff.as_millis() as u64, "MQTT connection lost; reconnecting");
                        self.reconnect_later();
                    }
                },
            }
        }
        // A clean DISCONNECT: the session (and what was not acked) stays with the broker.
        if let Some(network) = self.eventloop.network.as_mut() {
            let _ = network.write(Packet::Disconnect).await;
            let _ = tokio::time::timeout(Duration::from_secs(2), network.flush()).await;
        }
    }

    /// Parses a message here, off the writer thread, and adds it to the intake.
    fn take(&mut self, publish: Publish) {
        let ack = (publish.qos == QoS::AtLeastOnce).then_some((self.connection, publish.pkid));
        let message = Message::parse(publish.topic, publish.payload);
        self.intake.waiting.lock().expect("intake lock").push(Received { message, ack });
        self.waiting_since.get_or_insert_with(tokio::time::Instant::now);
    }

    /// Drops the connection (if still up) and connects again after the backoff, which
    /// doubles each time until a connection is subscribed (and, after a failed batch,
    /// one commits).
    fn reconnect_later(&mut self) {
        let _ = self.up.send(false);
        self.eventloop.clean();
        // Packets read but not yet taken belong to this connection: their packet ids
        // mean other messages on the next one. The broker redelivers them.
        self.eventloop.state.events.clear();
        // Up to a quarter more, so that clients a broker restart dropped together do not
        // all come back in the same instant.
        let jitter = f64::from(
            std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.subsec_nanos()),
        ) / 4e9;
        self.retry_at = Some(tokio::time::Instant::now() + self.backoff.mul_f64(1.0 + jitter));
        self.backoff = (self.backoff * 2).min(MAX_BACKOFF);
    }

    /// Whether to queue a writer job now (see [`Intake::job_due`]); the messages have
    /// waited enough once `batch_ms` has passed, or with `batch_ms` 0, once the packets
    /// the client read from the socket in one go are all taken.
    fn job_due(&self, stopping: bool) -> bool {
        let waited = if self.batch_wait.is_zero() {
            self.eventloop.state.events.is_empty()
        } else {
            self.waiting_since.is_none_or(|since| since.elapsed() >= self.batch_wait)
        };
        self.intake.job_due(self.batch_max, stopping, waited)
    }

    /// Queues a writer job that takes up to `batch_max` waiting messages when it starts
    /// and, once they are committed, sends their acks back on the `committed` channel.
    fn queue_job(&mut self) {
        self.jobs_queued += 1;
        let number = self.jobs_queued;
        self.intake.job_queued.store(number, Ordering::SeqCst);
        self.waiting_since = None;
        self.jobs_out += 1;
        let (intake, batch_max, policy) = (Arc::clone(&self.intake), self.batch_max, self.policy.clone());
        let queued = std::time::Instant::now();
        let job = move |conn: &rusqlite::Connection| {
            // Cleared before taking: a message added after the take sees no job queued
            // and queues one.
            intake.unqueue(number);
            let taken = intake.waiting.lock().expect("intake lock").take(batch_max);
            crate::metrics::count("twinops_ingest_messages_received_total", &[], taken.len() as f64);
            crate::metrics::observe("twinops_ingest_batch_messages", &[], taken.len() as f64);
            let effects = apply_batch(conn, taken.iter().map(|r| &r.message), Timestamp::now(), policy.clone())?;
            Ok::<_, StoreError>((effects, taken.into_iter().filter_map(|r| r.ack).collect::<Vec<_>>()))
        };
        let (done, wake, intake) = (self.committed_tx.clone(), Arc::clone(&self.wake), Arc::clone(&self.intake));
        // Runs on the writer thread, right after the commit (or at once, should the
        // writer give up on the job before running it: then its claim is cleared here).
        let then = move |outcome: Result<(Vec<MessageEffect>, Vec<AckId>), StoreError>| {
            intake.unqueue(number);
            let committed = match outcome {
                Ok((effects, acks)) => {
                    crate::metrics::time("twinops_ingest_commit_seconds", &[], queued.elapsed());
                    crate::metrics::count("twinops_ingest_messages_committed_total", &[], effects.len() as f64);
                    if effects.iter().flat_map(|e| &e.alarms).any(|a| matches!(a, Applied::Raised { .. })) {
                        wake.notify_waiters();
                    }
                    let rebirths = effects.into_iter().flat_map(|e| e.rebirths).collect();
                    Committed::Acks(acks, rebirths)
                }
                Err(e) => {
                    crate::metrics::count("twinops_ingest_batches_failed_total", &[], 1.0);
                    tracing::error!(stage = "ingest", error = %e, "a batch could not be committed; it stays unacked, and ingest reconnects so that the broker redelivers it");
                    Committed::Failed
                }
            };
            // Fails only once the ingest task has ended.
            let _ = done.send(committed);
        };
        self.writer.submit_then(job, then);
    }

    /// Rebirth requests (QoS 0, as Sparkplug sends commands), at most one per edge node
    /// every [`REBIRTH_EVERY`].
    fn rebirth_requests(&mut self, topics: Vec<String>) -> Vec<Packet> {
        let now = std::time::Instant::now();
        let mut out = Vec::new();
        for topic in topics {
            if self.rebirths_sent.get(&topic).is_some_and(|at| now.duration_since(*at) < REBIRTH_EVERY) {
                continue;
            }
            self.rebirths_sent.insert(topic.clone(), now);
            tracing::info!(stage = "ingest", topic = %topic, "asking a Sparkplug edge node to publish its births again");
            crate::metrics::count("twinops_sparkplug_rebirth_requests_total", &[], 1.0);
            let payload = crate::sparkplug::rebirth_request(Timestamp::now());
            out.push(Packet::Publish(Publish::new(topic, QoS::AtMostOnce, payload)));
        }
        out
    }

    /// Publishes our Sparkplug STATE, retained, so gateways set to this primary host
    /// send (and release what they buffered).
    async fn publish_state(&mut self) {
        let Some((topic, payload)) = self.state.clone() else { return };
        let mut publish = Publish::new(topic, QoS::AtLeastOnce, payload);
        publish.retain = true;
        match self.eventloop.state.handle_outgoing_packet(Request::Publish(publish)) {
            Ok(Some(packet)) => {
                if let Err(e) = self.send(vec![packet]).await {
                    tracing::warn!(stage = "ingest", error = %e, "Sparkplug STATE not published; reconnecting");
                    self.reconnect_later();
                }
            }
            Ok(None) => {}
            Err(e) => tracing::error!(stage = "ingest", error = %e, "Sparkplug STATE not published"),
        }
    }

    /// Subscribes to the ingest topics (rumqttc does not re-subscribe after a reconnect).
    async fn subscribe(&mut self) {
        let filters = self.topics.iter().map(|t| SubscribeFilter::new(t.clone(), QoS::AtLeastOnce));
        let request = Request::Subscribe(Subscribe::new_many(filters));
        let packet = match self.eventloop.state.handle_outgoing_packet(request) {
            Ok(Some(packet)) => packet,
            Ok(None) => return,
            Err(e) => {
                tracing::error!(stage = "ingest", topics = ?self.topics, error = %e, "subscribe failed");
                return;
            }
        };
        if let Err(e) = self.send(vec![packet]).await {
            tracing::error!(stage = "ingest", topics = ?self.topics, error = %e, "subscribe failed; reconnecting");
            self.reconnect_later();
        }
    }

    /// Up once the broker has granted the subscriptions: before, nothing arrives. A
    /// refused filter (the broker's ACL) is an error that names it.
    fn subscribed(&mut self, ack: &SubAck) {
        let refused: Vec<&String> = (self.topics.iter().zip(&ack.return_codes))
            .filter(|(_, code)| matches!(code, SubscribeReasonCode::Failure))
            .map(|(topic, _)| topic)
            .collect();
        if refused.is_empty() {
            tracing::info!(stage = "ingest", topics = ?self.topics, "subscribed");
        } else {
            tracing::error!(stage = "ingest", refused = ?refused, "the broker refused these mqtt.topics (check its ACL for our user and client id); nothing arrives on them");
        }
        let _ = self.up.send(refused.len() < self.topics.len());
        if !self.failing {
            self.backoff = FIRST_BACKOFF;
        }
    }

    /// Writes the PUBACKs of this batch and of any committed behind it, in order, then
    /// flushes once. After a batch that failed, nothing more is acked on this
    /// connection (acks must keep arrival order): it is dropped so that the broker
    /// redelivers everything from the failed batch on.
    async fn write_acks(&mut self, first: Committed, more: &mut mpsc::UnboundedReceiver<Committed>) {
        let mut packets = Vec::new();
        let mut failed = false;
        let mut next = Some(first);
        while let Some(committed) = next {
            self.jobs_out -= 1;
            match committed {
                Committed::Acks(ids, rebirths) if !failed => {
                    let current = ids.iter().filter(|(connection, _)| *connection == self.connection);
                    packets.extend(current.map(|&(_, pkid)| Packet::PubAck(PubAck::new(pkid))));
                    packets.extend(self.rebirth_requests(rebirths));
                }
                Committed::Acks(..) => {}
                Committed::Failed => failed = true,
            }
            next = more.try_recv().ok();
        }
        if !packets.is_empty() && self.eventloop.network.is_some() {
            let n = packets.iter().filter(|p| matches!(p, Packet::PubAck(_))).count() as u64;
            match self.send(packets).await {
                Ok(()) => {
                    crate::metrics::count("twinops_ingest_messages_acked_total", &[], n as f64);
                    self.acked.send_modify(|acked| *acked += n);
                }
                Err(e) => {
                    // The connection is gone; the broker redelivers what was not acked.
                    tracing::warn!(stage = "ingest", error = %e, "acks not sent; the broker will redeliver");
                    self.reconnect_later();
                    return;
                }
            }
        }
        if failed {
            self.failing = true;
            if self.eventloop.network.is_some() {
                self.reconnect_later();
            }
        } else if self.failing {
            self.failing = false;
            self.backoff = FIRST_BACKOFF;
        }
    }

    /// Writes packets to the broker and flushes them, within the connection timeout.
    async fn send(&mut self, packets: Vec<Packet>) -> anyhow::Result<()> {
        let Some(network) = self.eventloop.network.as_mut() else {
            anyhow::bail!("not connected");
        };
        let timeout = Duration::from_secs(self.eventloop.network_options.connection_timeout());
        tokio::time::timeout(timeout, async {
            for packet in packets {
                network.write(packet).await?;
            }
            network.flush().await
        })
        .await
        .map_err(|_| anyhow::anyhow!("the broker took more than {} s to take our packets", timeout.as_secs()))??;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn add(intake: &Intake, payload_bytes: usize) {
        let message = Message::parse("scada/telemetry".into(), vec![b' '; payload_bytes]);
        intake.waiting.lock().unwrap().push(Received { message, ack: Some((1, 1)) });
    }

    /// A full intake stops ingest reading the socket, so a commit must not wait for the
    /// packets the client still holds: they would never be taken, and ingest would
    /// stall for good (as it once did when large messages filled it by bytes).
    #[test]
    fn a_full_intake_is_committed_without_waiting_for_unread_packets() {
        let intake = Intake::default();
        add(&intake, 1_000);
        assert!(!intake.job_due(500, false, false), "packets still unread: wait for them");
        assert!(intake.job_due(500, false, true), "all taken: commit");
        assert!(intake.job_due(500, true, false), "stopping: commit");

        for _ in 0..3 {
            add(&intake, 12 << 20);
        }
        assert!(intake.full(500), "full by bytes with 4 messages");
        assert!(intake.job_due(500, false, false), "full: commit now");

        intake.job_queued.store(7, Ordering::SeqCst);
        assert!(!intake.job_due(500, false, true), "a queued job takes them when it starts");
    }
}
