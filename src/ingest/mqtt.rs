//! The MQTT transport (rumqttc): QoS 1, a persistent session, manual acks.
//!
//! A message is acknowledged only after its effect (or its dead letter) is committed,
//! and acks go out in arrival order: messages are batched (group commit: what arrived
//! during the previous commit, up to `batch_max`, plus what arrives within `batch_ms`),
//! the batch is committed in one transaction, then acked in order. rumqttc does not re-subscribe after a reconnect; we do, on every ConnAck.
//! Messages received on a connection that has since dropped are committed (applying
//! is idempotent) but not acked: their packet ids belong to the old connection, and
//! the broker redelivers them.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use rumqttc::{AsyncClient, Event, MqttOptions, Packet, Publish, QoS, Transport};
use tokio::sync::{Notify, mpsc, watch};

use super::{Message, MessageEffect, submit_batch};
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

/// A received message and the connection it came on.
struct Incoming {
    publish: Publish,
    connection: u64,
}

/// Runs the MQTT ingest until `stop`. `wake` is notified when new occurrences need
/// triage. Returns the task and a watch of whether the broker connection is up.
pub fn start(
    writer: Writer,
    cfg: MqttConfig,
    policy: QueuePolicy,
    wake: Arc<Notify>,
    stop: watch::Receiver<bool>,
) -> anyhow::Result<(tokio::task::JoinHandle<()>, watch::Receiver<bool>)> {
    let opts = options(&cfg, &cfg.client_id)?;
    let (up_tx, up_rx) = watch::channel(false);
    let (client, mut eventloop) = AsyncClient::new(opts, 4096);
    let connection = Arc::new(AtomicU64::new(0));
    // Unbounded on purpose: the poller must never wait on the ingest loop, or acks
    // (which need the poller) and messages (which need the ingest loop) deadlock. What
    // it holds is bounded by the broker's in-flight window for QoS 1: unacked messages.
    let (tx, rx) = mpsc::unbounded_channel::<Incoming>();

    // The event loop gets a task of its own and is never cancelled mid-poll.
    let poll_client = client.clone();
    let topics = cfg.topics.clone();
    let conn_gen = Arc::clone(&connection);
    let mut poll_stop = stop.clone();
    let poller = tokio::spawn(async move {
        let mut backoff = Duration::from_millis(250);
        loop {
            let event = tokio::select! {
                e = eventloop.poll() => e,
                _ = poll_stop.changed() => break,
            };
            match event {
                Ok(Event::Incoming(Packet::ConnAck(_))) => {
                    let _ = up_tx.send(true);
                    let generation = conn_gen.fetch_add(1, Ordering::SeqCst) + 1;
                    tracing::info!(
                        stage = "ingest",
                        connection = generation,
                        "connected to the MQTT broker; subscribing"
                    );
                    for topic in &topics {
                        if let Err(e) = poll_client.try_subscribe(topic.clone(), QoS::AtLeastOnce) {
                            tracing::error!(stage = "ingest", topic = %topic, error = %e, "subscribe failed");
                        }
                    }
                    backoff = Duration::from_millis(250);
                }
                Ok(Event::Incoming(Packet::Publish(publish))) => {
                    let incoming = Incoming { publish, connection: conn_gen.load(Ordering::SeqCst) };
                    if tx.send(incoming).is_err() {
                        break;
                    }
                }
                Ok(_) => {}
                Err(e) => {
                    let _ = up_tx.send(false);
                    tracing::warn!(stage = "ingest", error = %e, retry_in_ms = backoff.as_millis() as u64, "MQTT connection lost; reconnecting");
                    tokio::select! {
                        _ = tokio::time::sleep(backoff) => {}
                        _ = poll_stop.changed() => break,
                    }
                    backoff = (backoff * 2).min(Duration::from_secs(30));
                }
            }
        }
    });

    let committer = Committer { writer, client: client.clone(), connection, wake, policy };
    let handle = tokio::spawn(async move {
        ingest_loop(committer, rx, cfg.batch_max, Duration::from_millis(cfg.batch_ms), stop).await;
        poller.abort();
    });
    Ok((handle, up_rx))
}

/// Commits batches and acknowledges their messages.
struct Committer {
    writer: Writer,
    client: AsyncClient,
    /// The broker connection's generation: acks for messages of an older one are void.
    connection: Arc<AtomicU64>,
    /// Told when new occurrences need triage.
    wake: Arc<Notify>,
    policy: QueuePolicy,
}

/// A batch queued for commit, waiting to be acknowledged.
struct Pending {
    batch: Vec<Incoming>,
    queued: std::time::Instant,
    committed: tokio::sync::oneshot::Receiver<Result<Vec<MessageEffect>, StoreError>>,
}

/// Collects batches, parses them and queues them for the writer; a second task
/// acknowledges each batch once it is committed, in order. So the next batch is parsed
/// and queued while the last one commits (two in the queue at most: back-pressure).
async fn ingest_loop(
    c: Committer,
    mut rx: mpsc::UnboundedReceiver<Incoming>,
    batch_max: usize,
    batch_wait: Duration,
    mut stop: watch::Receiver<bool>,
) {
    let (pending_tx, mut pending_rx) = mpsc::channel::<Pending>(2);
    let c = Arc::new(c);
    let acker = {
        let c = Arc::clone(&c);
        tokio::spawn(async move {
            while let Some(p) = pending_rx.recv().await {
                c.ack(p).await;
            }
        })
    };
    loop {
        let mut batch: Vec<Incoming> = Vec::new();
        let first = tokio::select! {
            biased;
            _ = stop.changed() => None,
            m = rx.recv() => m,
        };
        let Some(first) = first else {
            // Stopping: commit and ack what already arrived, then take no more.
            while let Ok(m) = rx.try_recv() {
                batch.push(m);
            }
            if !batch.is_empty() {
                let _ = pending_tx.send(c.submit(batch)).await;
            }
            break;
        };
        batch.push(first);
        // Group commit: take what is already waiting (it piled up during the last
        // commit), and wait up to `batch_wait` for more only if configured to. Waiting
        // for a full batch would cap throughput at the broker's in-flight window per
        // `batch_wait`.
        let deadline = tokio::time::Instant::now() + batch_wait;
        while batch.len() < batch_max {
            match rx.try_recv() {
                Ok(m) => batch.push(m),
                Err(_) if batch_wait.is_zero() => break,
                Err(_) => match tokio::time::timeout_at(deadline, rx.recv()).await {
                    Ok(Some(m)) => batch.push(m),
                    _ => break,
                },
            }
        }
        if pending_tx.send(c.submit(batch)).await.is_err() {
            break;
        }
    }
    drop(pending_tx);
    let _ = acker.await;
}

impl Committer {
    fn submit(&self, batch: Vec<Incoming>) -> Pending {
        let messages: Vec<Message> =
            batch.iter().map(|m| Message::parse(m.publish.topic.clone(), m.publish.payload.to_vec())).collect();
        crate::metrics::count("twinops_ingest_messages_received_total", &[], batch.len() as f64);
        crate::metrics::observe("twinops_ingest_batch_messages", &[], batch.len() as f64);
        let committed = submit_batch(&self.writer, messages, Timestamp::now(), self.policy);
        Pending { batch, queued: std::time::Instant::now(), committed }
    }

    async fn ack(&self, Pending { batch, queued, committed }: Pending) {
        let effects = match committed.await {
            Ok(Ok(e)) => {
                crate::metrics::time("twinops_ingest_commit_seconds", &[], queued.elapsed());
                crate::metrics::count("twinops_ingest_messages_committed_total", &[], batch.len() as f64);
                e
            }
            Ok(Err(e)) => {
                // Nothing committed, nothing acked: the broker redelivers.
                tracing::error!(stage = "ingest", error = %e, messages = batch.len(), "commit failed; messages left unacked for redelivery");
                return;
            }
            Err(_) => return,
        };
        let current = self.connection.load(Ordering::SeqCst);
        let mut acked = 0;
        for m in batch {
            if m.connection != current {
                continue;
            }
            match self.client.ack(&m.publish).await {
                Ok(()) => acked += 1,
                Err(e) => tracing::warn!(stage = "ingest", error = %e, "ack not sent; the broker will redeliver"),
            }
        }
        crate::metrics::count("twinops_ingest_messages_acked_total", &[], f64::from(acked));
        if effects.iter().flat_map(|e| &e.alarms).any(|a| matches!(a, Applied::Raised { .. })) {
            self.wake.notify_waiters();
        }
    }
}
