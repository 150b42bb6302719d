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

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rumqttc::{
    AsyncClient, Event, EventLoop, MqttOptions, Packet, PubAck, Publish, QoS, Request, SubAck, Subscribe,
    SubscribeFilter, SubscribeReasonCode, Transport,
};
use tokio::sync::{Notify, mpsc, watch};

use super::{Message, MessageEffect, apply_batch};
use crate::alarms::Applied;
use crate::alarms::QueuePolicy;
use crate::config::MqttConfig;
use crate::domain::Timestamp;
use crate::store::{StoreError, Writer};

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
    opts.set_max_packet_size(super::payload::MAX_MESSAGE_BYTES + 1024, 1024 * 1024);
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
    use rustls::pki_types::pem::PemObject;
    use rustls::pki_types::{CertificateDer, PrivateKeyDer};

    let certs = |path: &std::path::Path, key: &str| -> anyhow::Result<Vec<CertificateDer<'static>>> {
        let certs = CertificateDer::pem_file_iter(path)
            .and_then(|it| it.collect::<Result<Vec<_>, _>>())
            .with_context(|| format!("{key}: reading PEM certificates from {}", path.display()))?;
        anyhow::ensure!(!certs.is_empty(), "{key}: no certificate in {}", path.display());
        Ok(certs)
    };
    let mut roots = rustls::RootCertStore::empty();
    match &cfg.ca_file {
        Some(path) => {
            for cert in certs(path, "mqtt.ca_file")? {
                roots
                    .add(cert)
                    .with_context(|| format!("mqtt.ca_file: a certificate in {} is not valid", path.display()))?;
            }
        }
        None => {
            let found = rustls_native_certs::load_native_certs();
            roots.add_parsable_certificates(found.certs);
            anyhow::ensure!(
                !roots.is_empty(),
                "mqtts: no system CA certificates found; set mqtt.ca_file to the broker's CA"
            );
        }
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()?
        .with_root_certificates(roots);
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

/// A running MQTT ingest.
pub struct Running {
    /// Ends after a stop, once what arrived before it is committed and acknowledged.
    pub task: tokio::task::JoinHandle<()>,
    /// Whether the broker connection is up and our subscriptions are granted.
    pub broker_up: watch::Receiver<bool>,
    /// Messages acknowledged to the broker so far (written and flushed).
    pub acked: watch::Receiver<u64>,
}

/// Runs the MQTT ingest until `stop`. `wake` is notified when new occurrences need
/// triage.
pub fn start(
    writer: Writer,
    cfg: MqttConfig,
    policy: QueuePolicy,
    wake: Arc<Notify>,
    stop: watch::Receiver<bool>,
) -> anyhow::Result<Running> {
    let opts = options(&cfg, &cfg.client_id)?;
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
    let ingest = Ingest {
        eventloop,
        _client: client,
        topics: cfg.topics.clone(),
        connection: 0,
        up,
        acked: acked_tx,
        writer,
        policy,
        wake,
        committed_tx,
        intake: Arc::default(),
        waiting_since: None,
        batch_max: cfg.batch_max,
        batch_wait: Duration::from_millis(cfg.batch_ms),
        jobs_out: 0,
    };
    let task = tokio::spawn(ingest.run(committed, stop));
    Ok(Running { task, broker_up, acked })
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
    waiting: Mutex<Vec<Received>>,
    /// A job is queued that has not yet taken `waiting`.
    job_queued: AtomicBool,
}

impl Intake {
    fn is_empty(&self) -> bool {
        self.waiting.lock().expect("intake lock").is_empty()
    }
}

/// A writer job's outcome, sent from the writer thread: the packet ids to acknowledge,
/// in arrival order (none if the commit failed).
struct Committed(Vec<AckId>);

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
    /// The broker connection's generation: acks for messages of an older one are void
    /// (their packet ids belong to that connection, and the broker redelivers them).
    connection: u64,
    up: watch::Sender<bool>,
    acked: watch::Sender<u64>,
    writer: Writer,
    policy: QueuePolicy,
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
}

impl Ingest {
    /// Runs until stopped: after `stop`, what already arrived is committed and
    /// acknowledged; messages still arriving are neither, so the broker keeps them.
    async fn run(mut self, mut committed: mpsc::UnboundedReceiver<Committed>, mut stop: watch::Receiver<bool>) {
        let mut backoff = Duration::from_millis(250);
        let mut retry_at: Option<tokio::time::Instant> = None;
        let mut stopping = false;
        loop {
            if self.job_due(stopping) {
                self.queue_job();
            }
            if stopping && self.jobs_out == 0 && self.intake.is_empty() {
                break;
            }
            // With `batch_ms`, the first message waits that long for company.
            let batch_deadline = self.waiting_since.filter(|_| !self.batch_wait.is_zero()).map(|t| t + self.batch_wait);
            let now = tokio::time::Instant::now();
            tokio::select! {
                biased;
                Some(done) = committed.recv() => self.write_acks(done, &mut committed).await,
                _ = stop.changed(), if !stopping => stopping = true,
                _ = tokio::time::sleep_until(retry_at.unwrap_or(now)), if retry_at.is_some() => retry_at = None,
                _ = tokio::time::sleep_until(batch_deadline.unwrap_or(now)), if batch_deadline.is_some() => {}
                event = self.eventloop.poll(), if retry_at.is_none() => match event {
                    Ok(Event::Incoming(Packet::ConnAck(_))) => {
                        self.connection += 1;
                        tracing::info!(stage = "ingest", connection = self.connection, "connected to the MQTT broker; subscribing");
                        self.subscribe().await;
                        backoff = Duration::from_millis(250);
                    }
                    Ok(Event::Incoming(Packet::SubAck(ack))) => self.subscribed(&ack),
                    Ok(Event::Incoming(Packet::Publish(publish))) if !stopping => self.take(publish),
                    Ok(_) => {}
                    Err(e) => {
                        let _ = self.up.send(false);
                        tracing::warn!(stage = "ingest", error = %e, retry_in_ms = backoff.as_millis() as u64, "MQTT connection lost; reconnecting");
                        retry_at = Some(tokio::time::Instant::now() + backoff);
                        backoff = (backoff * 2).min(Duration::from_secs(30));
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
        let message = Message::parse(publish.topic, publish.payload.to_vec());
        self.intake.waiting.lock().expect("intake lock").push(Received { message, ack });
        self.waiting_since.get_or_insert_with(tokio::time::Instant::now);
    }

    /// Whether to queue a writer job now: none is queued, messages wait, and either we
    /// stop, or `batch_max` wait, or `batch_ms` has passed (with `batch_ms` 0: the
    /// messages read from the socket in one go are all in).
    fn job_due(&self, stopping: bool) -> bool {
        if self.intake.job_queued.load(Ordering::SeqCst) {
            return false;
        }
        let waiting = self.intake.waiting.lock().expect("intake lock").len();
        let waited = if self.batch_wait.is_zero() {
            self.eventloop.state.events.is_empty()
        } else {
            self.waiting_since.is_none_or(|since| since.elapsed() >= self.batch_wait)
        };
        waiting > 0 && (stopping || waiting >= self.batch_max || waited)
    }

    /// Queues a writer job that takes up to `batch_max` waiting messages when it starts
    /// and, once they are committed, sends their acks back on the `committed` channel.
    fn queue_job(&mut self) {
        self.intake.job_queued.store(true, Ordering::SeqCst);
        self.waiting_since = None;
        self.jobs_out += 1;
        let (intake, batch_max, policy) = (Arc::clone(&self.intake), self.batch_max, self.policy);
        let queued = std::time::Instant::now();
        let job = move |conn: &rusqlite::Connection| {
            // Cleared before taking: a message added after the take sees no job queued
            // and queues one.
            intake.job_queued.store(false, Ordering::SeqCst);
            let taken: Vec<Received> = {
                let mut waiting = intake.waiting.lock().expect("intake lock");
                let n = waiting.len().min(batch_max);
                waiting.drain(..n).collect()
            };
            crate::metrics::count("twinops_ingest_messages_received_total", &[], taken.len() as f64);
            crate::metrics::observe("twinops_ingest_batch_messages", &[], taken.len() as f64);
            let effects = apply_batch(conn, taken.iter().map(|r| &r.message), Timestamp::now(), policy)?;
            Ok::<_, StoreError>((effects, taken.into_iter().filter_map(|r| r.ack).collect::<Vec<_>>()))
        };
        let (done, wake) = (self.committed_tx.clone(), Arc::clone(&self.wake));
        // Runs on the writer thread, right after the commit.
        let then = move |outcome: Result<(Vec<MessageEffect>, Vec<AckId>), StoreError>| {
            let acks = match outcome {
                Ok((effects, acks)) => {
                    crate::metrics::time("twinops_ingest_commit_seconds", &[], queued.elapsed());
                    crate::metrics::count("twinops_ingest_messages_committed_total", &[], effects.len() as f64);
                    if effects.iter().flat_map(|e| &e.alarms).any(|a| matches!(a, Applied::Raised { .. })) {
                        wake.notify_waiters();
                    }
                    acks
                }
                Err(e) => {
                    // Nothing committed, nothing acked: the broker redelivers.
                    tracing::error!(stage = "ingest", error = %e, "commit failed; messages left unacked for redelivery");
                    Vec::new()
                }
            };
            // Fails only once the ingest task has ended.
            let _ = done.send(Committed(acks));
        };
        self.writer.submit_then(job, then);
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
            let _ = self.up.send(false);
            self.eventloop.clean();
        }
    }

    /// Up once the broker has granted the subscriptions: before, nothing arrives. A
    /// refused filter (the broker's ACL) is an error that names it.
    fn subscribed(&self, ack: &SubAck) {
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
    }

    /// Writes the PUBACKs of this batch and of any committed behind it, in order, then
    /// flushes once.
    async fn write_acks(&mut self, first: Committed, more: &mut mpsc::UnboundedReceiver<Committed>) {
        let mut packets = Vec::with_capacity(first.0.len());
        let mut next = Some(first);
        while let Some(Committed(ids)) = next {
            self.jobs_out -= 1;
            let current = ids.iter().filter(|(connection, _)| *connection == self.connection);
            packets.extend(current.map(|&(_, pkid)| Packet::PubAck(PubAck::new(pkid))));
            next = more.try_recv().ok();
        }
        if packets.is_empty() || self.eventloop.network.is_none() {
            return;
        }
        let n = packets.len() as u64;
        match self.send(packets).await {
            Ok(()) => {
                crate::metrics::count("twinops_ingest_messages_acked_total", &[], n as f64);
                self.acked.send_modify(|acked| *acked += n);
            }
            Err(e) => {
                // The connection is gone; the broker redelivers what was not acked.
                tracing::warn!(stage = "ingest", error = %e, "acks not sent; the broker will redeliver");
                let _ = self.up.send(false);
                self.eventloop.clean();
            }
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
