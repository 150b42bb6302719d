//! Ingest: inbound events to committed effects. `payload` parses; [`apply`] commits a
//! message's effects, or its dead letters, in one write transaction, so the MQTT
//! transport can acknowledge the message once `apply` returns.

pub mod mqtt;
pub mod payload;

use rusqlite::{Connection, OptionalExtension, params};

pub use payload::{AlarmEvent, Event, Reading, Rejected, Transition, parse};

use crate::alarms::{self, Applied, QueuePolicy};

use crate::domain::Timestamp;
use crate::store::{Limits, StoreError, Writer, insert_readings};

/// What one message did.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct MessageEffect {
    pub alarms: Vec<Applied>,
    pub readings: usize,
    pub duplicate_readings: usize,
    pub dead_letters: usize,
}

/// Commits the effects of one MQTT message: alarm transitions (enqueueing triage for
/// new occurrences), readings, and a dead letter for everything refused. Returns once
/// committed; nothing in the message is lost either way.
pub fn apply(
    writer: &Writer,
    topic: &str,
    payload: &[u8],
    received: Timestamp,
    policy: QueuePolicy,
) -> Result<MessageEffect, StoreError> {
    let topic = topic.to_string();
    let payload = payload.to_vec();
    writer.call(move |conn| apply_in(conn, &topic, &payload, received, policy))
}

/// Commits several messages in one transaction (the MQTT batch), returning each one's
/// effect in order.
pub async fn apply_batch(
    writer: &Writer,
    messages: Vec<(String, Vec<u8>)>,
    received: Timestamp,
    policy: QueuePolicy,
) -> Result<Vec<MessageEffect>, StoreError> {
    writer
        .call_async(move |conn| {
            messages.iter().map(|(topic, payload)| apply_in(conn, topic, payload, received, policy)).collect()
        })
        .await
}

fn apply_in(
    conn: &Connection,
    topic: &str,
    payload: &[u8],
    received: Timestamp,
    policy: QueuePolicy,
) -> Result<MessageEffect, StoreError> {
    let mut effect = MessageEffect::default();
    let (events, rejected) = match parse(payload) {
        Ok(parsed) => parsed,
        Err(whole) => {
            dead_letter(conn, topic, payload, &whole, received)?;
            effect.dead_letters = 1;
            return Ok(effect);
        }
    };
    for r in &rejected {
        dead_letter(conn, topic, r.event.as_bytes(), r, received)?;
        effect.dead_letters += 1;
    }
    for (event, raw) in events {
        match event {
            Event::Alarm(a) => match alarms::apply(conn, &a, received, policy)? {
                Err(refusal) => {
                    let r = Rejected { reason: refusal.reason(), detail: refusal.to_string(), event: String::new() };
                    dead_letter(conn, topic, raw.as_bytes(), &r, received)?;
                    effect.dead_letters += 1;
                }
                Ok(applied) => effect.alarms.push(applied),
            },
            Event::Reading(r) => {
                let sensor: Option<(i64, Limits)> = conn
                    .prepare_cached("SELECT key, limit_ll, limit_l, limit_h, limit_hh FROM sensors WHERE id = ?1")?
                    .query_row([&r.sensor_id], |row| {
                        Ok((row.get(0)?, [row.get(1)?, row.get(2)?, row.get(3)?, row.get(4)?]))
                    })
                    .optional()?;
                match sensor {
                    Some((key, limits)) => {
                        let new = insert_readings(conn, key, &limits, &[(r.time.unix(), r.value)])?;
                        effect.readings += new;
                        effect.duplicate_readings += 1 - new;
                    }
                    None => {
                        let rej = Rejected {
                            reason: "unknown_sensor",
                            detail: format!("no sensor {}", r.sensor_id),
                            event: String::new(),
                        };
                        dead_letter(conn, topic, raw.as_bytes(), &rej, received)?;
                        effect.dead_letters += 1;
                    }
                }
            }
        }
    }
    Ok(effect)
}

fn dead_letter(conn: &Connection, topic: &str, payload: &[u8], r: &Rejected, at: Timestamp) -> rusqlite::Result<()> {
    conn.prepare_cached(
        "INSERT INTO dead_letters (received_at, topic, payload, reason, detail) VALUES (?1, ?2, ?3, ?4, ?5)",
    )?
    .execute(params![at.unix(), topic, payload, r.reason, r.detail])?;
    Ok(())
}
