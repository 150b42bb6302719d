//! Ingest: inbound events to committed effects. `payload` parses; [`apply`] commits a
//! message's effects, or its dead letters, in one write transaction, so the MQTT
//! transport can acknowledge the message once `apply` returns.

pub mod mqtt;
pub mod payload;

use std::collections::HashMap;

use rusqlite::{Connection, OptionalExtension, params};

pub use payload::{AlarmEvent, Event, Reading, Rejected, Transition, parse};

use crate::alarms::{self, Applied, QueuePolicy};

use crate::domain::{SensorId, Timestamp};
use crate::store::{Limits, Rollups, StoreError, Writer};

/// What one message did.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct MessageEffect {
    pub alarms: Vec<Applied>,
    pub readings: usize,
    pub duplicate_readings: usize,
    pub dead_letters: usize,
}

/// One MQTT message, parsed before it reaches the writer thread (parsing is the part
/// of ingest that needs no lock), with what a dead letter needs.
pub struct Message {
    topic: String,
    payload: Vec<u8>,
    parsed: Result<(Vec<(Event, serde_json::Value)>, Vec<Rejected>), Rejected>,
}

impl Message {
    pub fn parse(topic: String, payload: Vec<u8>) -> Message {
        let parsed = parse(&payload);
        Message { topic, payload, parsed }
    }
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
    let message = Message::parse(topic.to_string(), payload.to_vec());
    writer.call(move |conn| Ok(apply_batch(conn, [&message], received, policy)?.remove(0)))
}

/// Applies several messages (an MQTT batch) inside the caller's transaction and
/// returns each one's effect, in order.
pub fn apply_batch<'a>(
    conn: &Connection,
    messages: impl IntoIterator<Item = &'a Message>,
    received: Timestamp,
    policy: QueuePolicy,
) -> Result<Vec<MessageEffect>, StoreError> {
    let mut batch = Batch::default();
    let effects =
        messages.into_iter().map(|m| batch.apply(conn, m, received, policy)).collect::<Result<Vec<_>, _>>()?;
    batch.rollups.flush(conn)?;
    Ok(effects)
}

/// State shared by the messages of one transaction: sensor lookups and rollup sums.
#[derive(Default)]
struct Batch {
    sensors: HashMap<SensorId, Option<(i64, Limits)>>,
    rollups: Rollups,
}

impl Batch {
    fn sensor(&mut self, conn: &Connection, id: &SensorId) -> rusqlite::Result<Option<(i64, Limits)>> {
        if let Some(found) = self.sensors.get(id) {
            return Ok(*found);
        }
        let found = conn
            .prepare_cached("SELECT key, limit_ll, limit_l, limit_h, limit_hh FROM sensors WHERE id = ?1")?
            .query_row([id], |row| Ok((row.get(0)?, [row.get(1)?, row.get(2)?, row.get(3)?, row.get(4)?])))
            .optional()?;
        self.sensors.insert(id.clone(), found);
        Ok(found)
    }

    fn apply(
        &mut self,
        conn: &Connection,
        m: &Message,
        received: Timestamp,
        policy: QueuePolicy,
    ) -> Result<MessageEffect, StoreError> {
        let mut effect = MessageEffect::default();
        let (events, rejected) = match &m.parsed {
            Ok(parsed) => parsed,
            Err(whole) => {
                dead_letter(conn, &m.topic, &m.payload, whole, received)?;
                effect.dead_letters = 1;
                return Ok(effect);
            }
        };
        for r in rejected {
            dead_letter(conn, &m.topic, r.event.as_bytes(), r, received)?;
            effect.dead_letters += 1;
        }
        for (event, raw) in events {
            let refused = match event {
                Event::Alarm(a) => match alarms::apply(conn, a, received, policy)? {
                    Err(refusal) => {
                        Rejected { reason: refusal.reason(), detail: refusal.to_string(), event: String::new() }
                    }
                    Ok(applied) => {
                        effect.alarms.push(applied);
                        continue;
                    }
                },
                Event::Reading(r) => match self.sensor(conn, &r.sensor_id)? {
                    Some((key, limits)) => {
                        let new = self.rollups.insert(conn, key, &limits, r.time.unix(), r.value)?;
                        effect.readings += usize::from(new);
                        effect.duplicate_readings += usize::from(!new);
                        continue;
                    }
                    None => Rejected {
                        reason: "unknown_sensor",
                        detail: format!("no sensor {}", r.sensor_id),
                        event: String::new(),
                    },
                },
            };
            dead_letter(conn, &m.topic, raw.to_string().as_bytes(), &refused, received)?;
            effect.dead_letters += 1;
        }
        Ok(effect)
    }
}

fn dead_letter(conn: &Connection, topic: &str, payload: &[u8], r: &Rejected, at: Timestamp) -> rusqlite::Result<()> {
    crate::metrics::count("twinops_ingest_dead_letters_total", &[("reason", r.reason)], 1.0);
    conn.prepare_cached(
        "INSERT INTO dead_letters (received_at, topic, payload, reason, detail) VALUES (?1, ?2, ?3, ?4, ?5)",
    )?
    .execute(params![at.unix(), topic, payload, r.reason, r.detail])?;
    Ok(())
}
