//! Notes out: triage notes on MQTT (`{notes_topic}/{asset}`, QoS 1) and to a webhook
//! with a Slack-compatible body, retried; and the outbox, which sends work-order
//! decisions and shift handovers once each from the table that holds them.
//!
//! The webhook URL usually carries its token, so it is a [`Secret`] and never logged.

use std::time::Duration;

use rumqttc::{AsyncClient, QoS};
use serde_json::{Value, json};
use tokio::sync::{broadcast, watch};

use anyhow::Context;

use crate::agent::http::Http;
use crate::agent::reliability::RetryPolicy;
use crate::approvals::Approvals;
use crate::ingest::mqtt::MqttConfig;
use crate::store::{Store, StoreError};
use crate::support::Rng;
use crate::support::Secret;
use crate::triage::{PublishedNote, Triage, notes_after};
use std::sync::Arc;

/// The `[notify]` part.
#[derive(Debug, Clone, Default, serde::Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct NotifyConfig {
    /// POST each note here (Slack-compatible body). A secret: it usually holds a token.
    pub webhook_url: Option<Secret>,
}

impl NotifyConfig {
    pub fn validate(&self) -> anyhow::Result<()> {
        if let Some(url) = &self.webhook_url {
            let url = url.expose();
            anyhow::ensure!(
                url.starts_with("http://") || url.starts_with("https://"),
                "notify.webhook_url must start with http:// or https://"
            );
        }
        Ok(())
    }
}

/// The Slack-compatible body of a shift handover, marked AI advisory like a note's.
fn handover_webhook_body(h: &crate::handover::Handover) -> Value {
    json!({
        "text": format!(
            "*Shift handover* ({}){}\n{}\n_AI advisory (note {}, run {}); check before acting._",
            h.created_at.to_rfc3339(),
            flag_list(&h.flags),
            slack_text(&h.text),
            h.note_id,
            h.run_id.map_or("-".to_string(), |r| r.to_string())
        ),
    })
}

/// The Slack-compatible body of a note: `text` for any webhook, marked AI advisory.
pub fn webhook_body(note: &PublishedNote) -> Value {
    let summary = note.body["summary"].as_str().or(note.body["text"].as_str()).unwrap_or("(no summary)");
    let urgency = note.body["urgency"].as_str().unwrap_or("unknown");
    json!({
        "text": format!(
            "*{}* alarm {}: urgency {}{}\n{}\n_AI advisory (note {}, run {}); check before acting._",
            note.asset_id,
            note.alarm_id,
            slack_text(urgency),
            flag_list(&note.flags),
            slack_text(summary),
            note.note_id,
            note.run_id
        ),
    })
}

/// Text for a Slack-compatible message, escaped as Slack asks (`&`, `<`, `>`): model
/// output and what people typed arrive as text, never as a mention (`<!channel>`) or
/// a disguised link (`<https://...|here>`).
pub fn slack_text(text: &str) -> String {
    text.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;")
}

/// ` [ungrounded, partial]`, or nothing when there are no flags.
pub fn flag_list(flags: &[String]) -> String {
    if flags.is_empty() { String::new() } else { format!(" [{}]", flags.join(", ")) }
}

/// Posts one note, retrying server errors and timeouts with backoff. Returns the
/// attempts made, or the last error.
pub async fn post(
    client: &reqwest::Client,
    url: &Secret,
    note: &PublishedNote,
    policy: RetryPolicy,
) -> Result<u32, String> {
    post_json(client, url, &webhook_body(note), policy, note.note_id).await
}

/// POSTs `body` to the webhook, retrying server errors and timeouts; `seed` varies the
/// jitter between callers.
async fn post_json(
    client: &reqwest::Client,
    url: &Secret,
    body: &Value,
    policy: RetryPolicy,
    seed: i64,
) -> Result<u32, String> {
    let mut rng = Rng::from_label(&format!("webhook-{seed}"));
    let mut last = String::new();
    for attempt in 0..=policy.max_retries {
        match client.post(url.expose()).timeout(Duration::from_secs(10)).json(body).send().await {
            Ok(r) if r.status().is_success() => return Ok(attempt + 1),
            Ok(r) if r.status().is_client_error() && r.status().as_u16() != 429 => {
                return Err(format!("webhook refused the note: HTTP {}", r.status()));
            }
            Ok(r) => last = format!("HTTP {}", r.status()),
            Err(e) => last = e.without_url().to_string(),
        }
        if attempt < policy.max_retries {
            tokio::time::sleep(policy.delay(attempt, None, rng.uniform())).await;
        }
    }
    Err(format!("webhook failed after {} attempts: {last}", policy.max_retries + 1))
}

/// Calls `deliver` for every published note until `stop`. A consumer that falls
/// behind the channel (a flood's worth of notes at once) catches up from the notes
/// table, so nothing stored goes undelivered.
async fn each_note<F, Fut>(
    store: Store,
    mut notes: broadcast::Receiver<PublishedNote>,
    mut stop: watch::Receiver<bool>,
    what: &str,
    mut deliver: F,
) where
    F: FnMut(PublishedNote) -> Fut,
    Fut: std::future::Future<Output = ()>,
{
    // Notes up to here came from the table while catching up; the channel may repeat them.
    let mut caught_up_to = 0;
    let mut last = 0;
    loop {
        let note = tokio::select! {
            n = notes.recv() => n,
            _ = stop.changed() => return,
        };
        match note {
            Ok(note) if note.note_id <= caught_up_to => {}
            Ok(note) => {
                last = last.max(note.note_id);
                deliver(note).await;
            }
            Err(broadcast::error::RecvError::Lagged(n)) => {
                tracing::info!(
                    stage = "notify",
                    skipped = n,
                    consumer = what,
                    "fell behind; catching up from the notes table"
                );
                let missed = match store.read().and_then(|db| notes_after(&db, last)) {
                    Ok(missed) => missed,
                    Err(e) => {
                        tracing::warn!(stage = "notify", consumer = what, error = %e, "cannot read the notes missed (they are stored)");
                        continue;
                    }
                };
                for note in missed {
                    last = last.max(note.note_id);
                    caught_up_to = last;
                    deliver(note).await;
                }
            }
            Err(_) => return,
        }
    }
}

/// A publishing connection of its own (client id `{client_id}-{what}`), polled by a
/// task until it disconnects; `None` (logged) if the configuration cannot make one.
fn publisher(cfg: &MqttConfig, what: &str) -> Option<(AsyncClient, tokio::task::JoinHandle<()>)> {
    let mut opts = match crate::ingest::mqtt::options(cfg, &format!("{}-{what}", cfg.client_id)) {
        Ok(o) => o,
        Err(e) => {
            tracing::error!(stage = "notify", error = %e, what, "nothing is published on MQTT");
            return None;
        }
    };
    opts.set_manual_acks(false);
    let (client, mut eventloop) = AsyncClient::new(opts, 1024);
    let what = what.to_string();
    let poller = tokio::spawn(async move {
        loop {
            match eventloop.poll().await {
                Ok(rumqttc::Event::Outgoing(rumqttc::Outgoing::Disconnect)) => break,
                Ok(_) => {}
                Err(e) => {
                    tracing::warn!(stage = "notify", error = %e, what, "publishing connection lost; reconnecting");
                    tokio::time::sleep(Duration::from_secs(1)).await;
                }
            }
        }
    });
    Some((client, poller))
}

/// Publishes each note as JSON on `{notes_topic}/{asset}` at QoS 1, on a connection of
/// its own (client id `{client_id}-notes`): outbound notes never queue in front of
/// the ingest connection's acknowledgements. Each names its occurrences by event id
/// too, and, of a redundant pair, the node that wrote it (`node`): the other node keeps
/// it ([`peer_notes_loop`]).
pub async fn mqtt_loop(
    store: Store,
    cfg: MqttConfig,
    node: Option<String>,
    notes: broadcast::Receiver<PublishedNote>,
    stop: watch::Receiver<bool>,
) {
    let Some((client, poller)) = publisher(&cfg, "notes") else { return };
    let topic = cfg.notes_topic.clone();
    let reader = store.clone();
    each_note(store, notes, stop, "mqtt", |note| {
        let (client, topic) = (client.clone(), format!("{topic}/{}", note.asset_id));
        let body = reader.read().map_err(|e| e.to_string()).and_then(|db| {
            crate::triage::peer::wire(&db, &note, node.as_deref()).map_err(|e| e.to_string())
        });
        async move {
            let body = match body {
                Ok(body) => body.to_string(),
                Err(e) => {
                    tracing::warn!(stage = "notify", error = %e, note = note.note_id, "note not published on MQTT: its event ids could not be read (it is stored)");
                    return;
                }
            };
            if let Err(e) = client.publish(topic, QoS::AtLeastOnce, false, body).await {
                tracing::warn!(stage = "notify", error = %e, note = note.note_id, "note not published on MQTT (it is stored)");
            }
        }
    })
    .await;
    let _ = client.disconnect().await;
    tokio::time::sleep(Duration::from_millis(50)).await;
    poller.abort();
}

/// Of a redundant pair: hears the notes the other node publishes (`{notes_topic}/#`,
/// QoS 1, a persistent session of its own so that none is missed while this node
/// reconnects or is down) and keeps them ([`Triage::hear_peer`]), acknowledging each
/// to the broker only once kept: a node killed before its writer took a note in gets
/// it again.
pub async fn peer_notes_loop(cfg: MqttConfig, me: String, triage: Arc<Triage>, mut stop: watch::Receiver<bool>) {
    let opts = match crate::ingest::mqtt::options(&cfg, &format!("{}-peer-notes", cfg.client_id)) {
        Ok(o) => o,
        Err(e) => {
            tracing::error!(stage = "notify", error = %e, "the other node's notes are not heard");
            // Triage does not wait for what it will never hear.
            triage.peer_notes_heard(true);
            return;
        }
    };
    let (client, mut eventloop) = AsyncClient::new(opts, 64);
    let topic = format!("{}/#", cfg.notes_topic);
    // Said once per kind of bad payload, not once per message.
    let mut said_bad = false;
    // What the broker kept for this session comes at once after the subscription:
    // once none has come for a while, every note of the other's is kept.
    let mut quiet: Option<tokio::time::Instant> = None;
    loop {
        let event = tokio::select! {
            // A message already here comes before the quiet's end.
            biased;
            e = eventloop.poll() => e,
            _ = tokio::time::sleep_until(quiet.unwrap_or_else(tokio::time::Instant::now)), if quiet.is_some() => {
                quiet = None;
                triage.peer_notes_heard(true);
                continue;
            }
            _ = stop.changed() => break,
        };
        match event {
            Ok(rumqttc::Event::Incoming(rumqttc::Incoming::ConnAck(_))) => {
                let _ = client.try_subscribe(&topic, QoS::AtLeastOnce);
            }
            Ok(rumqttc::Event::Incoming(rumqttc::Incoming::SubAck(_))) => {
                quiet = Some(tokio::time::Instant::now() + QUIET)
            }
            Ok(rumqttc::Event::Incoming(rumqttc::Incoming::Publish(p))) => {
                quiet = quiet.map(|_| tokio::time::Instant::now() + QUIET);
                match triage.hear_peer(p.payload.to_vec(), me.clone()).await {
                    Ok(Ok(_)) => {}
                    Ok(Err(e)) if !said_bad => {
                        said_bad = true;
                        tracing::warn!(stage = "notify", topic = %p.topic, error = %e, "a message on the notes topic that is not a note; ignored (said once)");
                    }
                    Ok(Err(_)) => {}
                    // Not acknowledged: the broker sends it again after the next connect.
                    Err(e) => {
                        tracing::warn!(stage = "notify", error = %e, "the other node's note could not be kept; it comes again");
                        continue;
                    }
                }
                let _ = client.try_ack(&p);
            }
            Ok(_) => {}
            Err(e) => {
                triage.peer_notes_heard(false);
                quiet = None;
                tracing::warn!(stage = "notify", error = %e, "the notes subscription is down; reconnecting");
                tokio::time::sleep(Duration::from_secs(1)).await;
            }
        }
    }
    let _ = client.try_disconnect();
}

/// How long the notes subscription stays without a message before what the broker
/// kept for it counts as all heard.
const QUIET: Duration = Duration::from_millis(300);

/// Posts every published note to the webhook until `stop`.
pub async fn webhook_loop(
    store: Store,
    url: Secret,
    notes: broadcast::Receiver<PublishedNote>,
    stop: watch::Receiver<bool>,
) {
    let client = Http::new().client().clone();
    let policy = RetryPolicy { max_retries: 4, base: Duration::from_millis(500), cap: Duration::from_secs(30) };
    each_note(store, notes, stop, "webhook", |note| {
        let (client, url) = (client.clone(), url.clone());
        async move {
            if let Err(e) = post(&client, &url, &note, policy).await {
                tracing::warn!(stage = "notify", note = note.note_id, error = %e, "note not delivered to the webhook (it is stored)");
            }
        }
    })
    .await
}

/// Something the outbox publishes once and then marks: a work-order decision or a
/// shift handover.
struct Outgoing {
    topic: String,
    body: Value,
    /// What the webhook gets, if one is set.
    webhook: Value,
    mark: Mark,
}

enum Mark {
    /// `published` becomes the status; an approved order becomes `dispatched`.
    Decision {
        id: i64,
        status: String,
    },
    Handover {
        note_id: i64,
    },
}

/// The outbox: every second, what is stored but has not gone out (work-order decisions,
/// shift handovers) is published as JSON at QoS 1 and posted to the webhook if set,
/// then marked, so that each goes out once across restarts whichever process wrote it
/// (twice only if the daemon dies between sending and marking).
/// Work-order decisions go on `twinops/work_orders/{asset}` (an approved one is then
/// marked `dispatched`; rejections and expiries are published as they are), handovers
/// on [`crate::handover::TOPIC`].
/// Of a redundant pair, only the acting node sends (`acting`); the other's outbox waits.
pub async fn outbox_loop(
    store: Store,
    approvals: Approvals,
    cfg: MqttConfig,
    webhook: Option<Secret>,
    acting: watch::Receiver<bool>,
    mut stop: watch::Receiver<bool>,
) {
    let Some((client, poller)) = publisher(&cfg, "outbox") else { return };
    let http = Http::new().client().clone();
    let policy = RetryPolicy { max_retries: 4, base: Duration::from_millis(500), cap: Duration::from_secs(30) };
    loop {
        tokio::select! {
            _ = tokio::time::sleep(Duration::from_secs(1)) => {}
            _ = stop.changed() => break,
        }
        if !*acting.borrow() {
            continue;
        }
        let due = match store.read().and_then(|db| outbox_due(&db)) {
            Ok(d) => d,
            Err(e) => {
                tracing::warn!(stage = "notify", error = %e, "cannot read the outbox");
                continue;
            }
        };
        for item in due {
            let what = item.mark.describe();
            if let Err(e) = client.publish(&item.topic, QoS::AtLeastOnce, false, item.body.to_string()).await {
                tracing::warn!(stage = "notify", error = %e, what, "not published; retrying");
                break;
            }
            if let Some(url) = &webhook
                && let Err(e) = post_json(&http, url, &item.webhook, policy, item.mark.id()).await
            {
                tracing::warn!(stage = "notify", error = %e, what, "not delivered to the webhook");
            }
            if let Err(e) = item.mark.apply(&store, &approvals).await {
                tracing::warn!(stage = "notify", error = %e, what, "published but not marked");
            }
        }
    }
    let _ = client.disconnect().await;
    tokio::time::sleep(Duration::from_millis(50)).await;
    poller.abort();
}

impl Mark {
    fn id(&self) -> i64 {
        match self {
            Mark::Decision { id, .. } => *id,
            Mark::Handover { note_id } => *note_id,
        }
    }

    /// For the log: `work order 12`, `handover note 40`.
    fn describe(&self) -> String {
        match self {
            Mark::Decision { id, .. } => format!("work order {id}"),
            Mark::Handover { note_id } => format!("handover note {note_id}"),
        }
    }

    /// Marks it sent; of a pair, a work order's mark goes through the decision log, so
    /// that the other node does not send it again when it takes over.
    async fn apply(self, store: &Store, approvals: &Approvals) -> anyhow::Result<()> {
        let now = crate::domain::Timestamp::now();
        match (self, approvals.log()) {
            (Mark::Decision { id, status }, Some(log)) => {
                let key = crate::approvals::pair::key_of(&*store.read()?, id)?
                    .with_context(|| format!("work order {id} is gone"))?;
                let op = crate::approvals::pair::WorkOrderOp::Published { key, status };
                log.submit(crate::approvals::pair::KIND, serde_json::to_value(op)?, "twinops").await?;
            }
            (Mark::Decision { id, status }, None) => {
                store.writer().call_async(move |c| crate::approvals::mark_published(c, id, &status, now)).await?
            }
            (Mark::Handover { note_id }, _) => {
                store.writer().call_async(move |c| crate::handover::mark_published(c, note_id, now)).await?
            }
        }
        Ok(())
    }
}

/// What the outbox has to send: decisions first, then handovers, each oldest first.
fn outbox_due(db: &rusqlite::Connection) -> Result<Vec<Outgoing>, StoreError> {
    let mut due: Vec<Outgoing> = undecided_publications(db)?
        .into_iter()
        .map(|(id, asset, status, body)| {
            let text = format!(
                "Work order {id} on *{asset}* {status} by {}: {}",
                slack_text(body["decided_by"].as_str().unwrap_or("-")),
                slack_text(body["decision_reason"].as_str().unwrap_or(""))
            );
            Outgoing {
                topic: format!("twinops/work_orders/{asset}"),
                body,
                webhook: json!({"text": text}),
                mark: Mark::Decision { id, status },
            }
        })
        .collect();
    due.extend(crate::handover::unpublished(db)?.into_iter().map(|h| Outgoing {
        topic: crate::handover::TOPIC.to_string(),
        body: serde_json::to_value(&h).unwrap_or(Value::Null),
        webhook: handover_webhook_body(&h),
        mark: Mark::Handover { note_id: h.note_id },
    }));
    Ok(due)
}

/// Decided work orders whose decision has not gone out: (id, asset, status, JSON).
fn undecided_publications(db: &rusqlite::Connection) -> Result<Vec<(i64, String, String, Value)>, StoreError> {
    let mut stmt = db.prepare_cached(
        "SELECT id, asset_id, status, json_object('work_order_id', id, 'asset_id', asset_id, 'alarm_id', alarm_id,
                'action', action, 'priority', priority, 'title', title, 'justification', justification,
                'status', status, 'proposed_by', proposed_by, 'decided_by', decided_by, 'decided_at', rfc3339(decided_at),
                'decision_reason', decision_reason)
         FROM work_orders WHERE status IN ('approved', 'rejected', 'expired') AND published IS NOT status
         ORDER BY decided_at, id LIMIT 100",
    )?;
    let rows = stmt.query_map([], |r| {
        Ok((r.get(0)?, r.get(1)?, r.get(2)?, serde_json::from_str(&r.get::<_, String>(3)?).unwrap_or(Value::Null)))
    })?;
    Ok(rows.collect::<Result<_, _>>()?)
}
