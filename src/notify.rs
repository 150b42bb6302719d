//! Notes out: on MQTT (`{notes_topic}/{asset}`, QoS 1) and to a webhook with a
//! Slack-compatible body, retried.
//!
//! The webhook URL usually carries its token, so it is a [`Secret`] and never logged.

use std::time::Duration;

use rumqttc::{AsyncClient, QoS};
use serde_json::{Value, json};
use tokio::sync::{broadcast, watch};

use crate::agent::http::Http;
use crate::agent::reliability::RetryPolicy;
use crate::config::Secret;
use crate::seed::Rng;
use crate::triage::PublishedNote;

/// The Slack-compatible body of a note: `text` for any webhook, marked AI advisory.
pub fn webhook_body(note: &PublishedNote) -> Value {
    let summary = note.body["summary"].as_str().or(note.body["text"].as_str()).unwrap_or("(no summary)");
    let urgency = note.body["urgency"].as_str().unwrap_or("unknown");
    let flags = if note.flags.is_empty() { String::new() } else { format!(" [{}]", note.flags.join(", ")) };
    json!({
        "text": format!(
            "*{}* alarm {}: urgency {urgency}{flags}\n{summary}\n_AI advisory (note {}, run {}); check before acting._",
            note.asset_id, note.alarm_id, note.note_id, note.run_id
        ),
    })
}

/// Posts one note, retrying server errors and timeouts with backoff. Returns the
/// attempts made, or the last error.
pub async fn post(
    client: &reqwest::Client,
    url: &Secret,
    note: &PublishedNote,
    policy: RetryPolicy,
) -> Result<u32, String> {
    let body = webhook_body(note);
    let mut rng = Rng::from_label(&format!("webhook-{}", note.note_id));
    let mut last = String::new();
    for attempt in 0..=policy.max_retries {
        match client.post(url.expose()).timeout(Duration::from_secs(10)).json(&body).send().await {
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
/// behind skips notes (they are stored) and says so under `what`.
async fn each_note<F, Fut>(
    mut notes: broadcast::Receiver<PublishedNote>,
    mut stop: watch::Receiver<bool>,
    what: &str,
    mut deliver: F,
) where
    F: FnMut(PublishedNote) -> Fut,
    Fut: std::future::Future<Output = ()>,
{
    loop {
        let note = tokio::select! {
            n = notes.recv() => n,
            _ = stop.changed() => return,
        };
        match note {
            Ok(note) => deliver(note).await,
            Err(broadcast::error::RecvError::Lagged(n)) => {
                tracing::warn!(stage = "notify", skipped = n, consumer = what, "fell behind; skipped notes are stored");
            }
            Err(_) => return,
        }
    }
}

/// Publishes each note as JSON on `{topic}/{asset}` at QoS 1.
pub async fn mqtt_loop(
    client: AsyncClient,
    topic: String,
    notes: broadcast::Receiver<PublishedNote>,
    stop: watch::Receiver<bool>,
) {
    each_note(notes, stop, "mqtt", |note| {
        let (client, topic) = (client.clone(), format!("{topic}/{}", note.asset_id));
        async move {
            let body = serde_json::to_vec(&note).unwrap_or_default();
            if let Err(e) = client.publish(topic, QoS::AtLeastOnce, false, body).await {
                tracing::warn!(stage = "notify", error = %e, note = note.note_id, "note not published on MQTT (it is stored)");
            }
        }
    })
    .await
}

/// Posts every published note to the webhook until `stop`.
pub async fn webhook_loop(url: Secret, notes: broadcast::Receiver<PublishedNote>, stop: watch::Receiver<bool>) {
    let client = Http::new().client().clone();
    let policy = RetryPolicy { max_retries: 4, base: Duration::from_millis(500), cap: Duration::from_secs(30) };
    each_note(notes, stop, "webhook", |note| {
        let (client, url) = (client.clone(), url.clone());
        async move {
            if let Err(e) = post(&client, &url, &note, policy).await {
                tracing::warn!(stage = "notify", note = note.note_id, error = %e, "note not delivered to the webhook (it is stored)");
            }
        }
    })
    .await
}
