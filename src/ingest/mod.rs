//! Ingest: inbound events to committed effects. `payload` parses; [`apply`] commits a
//! message's effects, or its dead letters, in one write transaction, so the MQTT
//! transport can acknowledge the message once `apply` returns.

pub mod dead_letters;
pub mod history;
pub mod mqtt;
pub mod payload;
pub mod repeat;

use std::collections::HashMap;
use std::rc::Rc;
use std::sync::Arc;

use bytes::Bytes;
use rusqlite::{Connection, OptionalExtension};

pub use payload::{AlarmEvent, DEAD_LETTER_BYTES, Event, Parsed, ParsedEvent, Reading, Rejected, Transition, parse};

use crate::alarms::limits::{self, LimitSensor};
use crate::alarms::{self, Applied, QueuePolicy};
use crate::domain::{AssetId, Criticality, DeadLetterReason, SensorId, Severity, Timestamp};
use crate::sparkplug::{self, SparkplugConfig};
use crate::store::{self, Limits, Rollups, StoreError, Stored, Writer};

/// What ingest accepts, and how it queues triage.
#[derive(Debug, Clone, PartialEq)]
pub struct IngestPolicy {
    pub queue: QueuePolicy,
    /// Events stamped more than this many seconds after their receipt are refused: a
    /// gateway clock that runs ahead (or local time sent as UTC) would otherwise put
    /// "latest" readings and alarm times in the future. `None`: no limit.
    pub max_ahead_s: Option<i64>,
    /// Events stamped more than this many seconds before their receipt are refused: a
    /// site's choice, since a backfill after an outage is legitimately late. `None`
    /// (the default): no limit but [`CLOCK_RESET_BEFORE`].
    pub max_behind_s: Option<i64>,
    /// Set when Sparkplug B is taken (`[sparkplug] enabled`).
    pub sparkplug: Option<Arc<SparkplugConfig>>,
    /// When activations make an alarm episode.
    pub episodes: crate::episodes::EpisodeRules,
}

impl Default for IngestPolicy {
    fn default() -> Self {
        IngestPolicy {
            queue: QueuePolicy::default(),
            max_ahead_s: Some(MAX_AHEAD_S),
            max_behind_s: None,
            sparkplug: None,
            episodes: crate::episodes::EpisodeRules::default(),
        }
    }
}

/// The default for `mqtt.max_time_ahead_s`: five minutes of clock skew.
pub const MAX_AHEAD_S: i64 = 300;

/// Events stamped before 2001-01-01T00:00:00Z are refused whatever the policy: a
/// controller whose clock lost its battery restarts at its epoch (1970, 1980 or 2000),
/// and its "new" alarms would be triaged as decades old, its readings pruned by
/// retention within the hour.
pub const CLOCK_RESET_BEFORE: i64 = 978_307_200;

/// What one message did.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct MessageEffect {
    pub alarms: Vec<Applied>,
    pub readings: usize,
    pub duplicate_readings: usize,
    pub dead_letters: usize,
    /// The first refusal's reason and detail, when there were dead letters.
    pub first_refusal: Option<(DeadLetterReason, String)>,
    /// Sparkplug rebirth requests (NCMD topics) to publish once this is committed.
    pub rebirths: Vec<String>,
}

/// One MQTT message, parsed before it reaches the writer thread (parsing is the part
/// of ingest that needs no lock), with what a dead letter needs.
pub struct Message {
    topic: String,
    /// Shared with the MQTT client's read buffer, not copied out of it.
    payload: Bytes,
    body: Body,
}

/// A message as decoded: our JSON contract, or Sparkplug B on `spBv1.0/...`.
enum Body {
    Json(Result<Parsed, Rejected>),
    Sparkplug(Result<sparkplug::Decoded, sparkplug::Refused>),
}

impl Message {
    pub fn parse(topic: String, payload: impl Into<Bytes>) -> Message {
        let payload = payload.into();
        let body = if topic.starts_with("spBv1.0/") {
            Body::Sparkplug(sparkplug::decode(&topic, &payload))
        } else {
            Body::Json(parse(&payload))
        };
        Message { topic, payload, body }
    }

    /// The payload's size in bytes.
    pub fn payload_len(&self) -> usize {
        self.payload.len()
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
    policy: IngestPolicy,
) -> Result<MessageEffect, StoreError> {
    let message = Message::parse(topic.to_string(), payload.to_vec());
    writer.call(move |conn| Ok(apply_batch(conn, [&message], received, policy)?.remove(0)))
}

/// Applies several messages (an MQTT batch) inside the caller's transaction and
/// returns each one's effect, in order.
///
/// The batch is applied as a whole first. Should that fail (a fault in storing some
/// event, not bad input, which is already a dead letter), it is applied again one event
/// at a time, and an event that still fails becomes a dead letter with reason `failed`:
/// one such event does not hold back the rest, nor the messages behind it. An error is
/// returned only when even the dead letter cannot be written (disk full, I/O error);
/// then nothing of the batch is kept and the caller must not acknowledge it.
pub fn apply_batch<'a>(
    conn: &Connection,
    messages: impl IntoIterator<Item = &'a Message>,
    received: Timestamp,
    policy: IngestPolicy,
) -> Result<Vec<MessageEffect>, StoreError> {
    let messages: Vec<&Message> = messages.into_iter().collect();
    let whole = store::savepoint(conn, "batch", |conn| {
        let mut batch = Batch::new(received, policy.clone());
        let effects = messages.iter().map(|m| batch.apply(conn, m)).collect::<Result<Vec<_>, StoreError>>()?;
        batch.rollups.flush(conn)?;
        Ok::<_, StoreError>(effects)
    });
    match whole {
        Ok(effects) => Ok(effects),
        Err(e) => {
            tracing::warn!(stage = "ingest", error = %e, messages = messages.len(), "a batch failed to apply; applying its events one at a time");
            messages.iter().map(|m| apply_isolated(conn, m, received, &policy)).collect()
        }
    }
}

/// One message, each event in a savepoint of its own; an event that fails to apply is
/// dead-lettered (reason `failed`) with the error.
fn apply_isolated(
    conn: &Connection,
    m: &Message,
    received: Timestamp,
    policy: &IngestPolicy,
) -> Result<MessageEffect, StoreError> {
    let mut effect = MessageEffect::default();
    if let Body::Sparkplug(_) = m.body {
        // A Sparkplug message is one unit: its session state moves with it whole.
        let one = store::savepoint(conn, "event", |conn| {
            let mut batch = Batch::new(received, policy.clone());
            let effect = batch.apply(conn, m)?;
            batch.rollups.flush(conn)?;
            Ok::<_, StoreError>(effect)
        });
        return match one {
            Ok(effect) => Ok(effect),
            Err(e) => {
                effect.dead_letter_failed(conn, &m.topic, &m.payload, &e, "message", received)?;
                Ok(effect)
            }
        };
    }
    let Some(events) = m.accepted(conn, received, &mut effect)? else {
        return Ok(effect);
    };
    for (event, span) in events {
        let raw = &m.payload[span.clone()];
        let one = store::savepoint(conn, "event", |conn| {
            let mut batch = Batch::new(received, policy.clone());
            let mut alone = MessageEffect::default();
            batch.apply_event(conn, &m.topic, event, raw, &mut alone)?;
            batch.rollups.flush(conn)?;
            Ok::<_, StoreError>(alone)
        });
        match one {
            Ok(alone) => effect.add(alone),
            Err(e) => {
                effect.dead_letter_failed(conn, &m.topic, raw, &e, "event", received)?;
            }
        }
    }
    Ok(effect)
}

impl MessageEffect {
    /// Keeps a refusal as a dead letter ([`dead_letters::write`]) and counts it.
    fn dead_letter(
        &mut self,
        conn: &Connection,
        topic: &str,
        payload: &[u8],
        r: &Rejected,
        at: Timestamp,
    ) -> rusqlite::Result<()> {
        dead_letters::write(conn, topic, payload, r, at)?;
        self.dead_letters += 1;
        if self.first_refusal.is_none() {
            self.first_refusal = Some((r.reason, r.detail.clone()));
        }
        Ok(())
    }

    /// What could not be stored (a fault, not bad input) kept as a dead letter `failed`
    /// with the error; `what` is the unit applied alone (an event, a Sparkplug message).
    fn dead_letter_failed(
        &mut self,
        conn: &Connection,
        topic: &str,
        raw: &[u8],
        e: &StoreError,
        what: &str,
        received: Timestamp,
    ) -> rusqlite::Result<()> {
        let detail = format!("could not be stored: {e}; the other {what}s of its batch were kept");
        tracing::error!(stage = "ingest", topic, error = %e, "{what} failed to apply; dead-lettered as `failed`");
        self.dead_letter(
            conn,
            topic,
            raw,
            &Rejected { reason: DeadLetterReason::Failed, detail, event: String::new() },
            received,
        )
    }

    fn add(&mut self, other: MessageEffect) {
        self.alarms.extend(other.alarms);
        self.readings += other.readings;
        self.duplicate_readings += other.duplicate_readings;
        self.dead_letters += other.dead_letters;
        self.first_refusal = self.first_refusal.take().or(other.first_refusal);
        self.rebirths.extend(other.rebirths);
    }
}

impl Message {
    /// Dead-letters what did not parse (the whole message, or single events of a
    /// batch) and returns the events that did, if any.
    fn accepted(
        &self,
        conn: &Connection,
        received: Timestamp,
        effect: &mut MessageEffect,
    ) -> Result<Option<&[ParsedEvent]>, StoreError> {
        let (events, rejected) = match &self.body {
            Body::Json(Ok(parsed)) => parsed,
            Body::Sparkplug(_) => return Ok(None),
            Body::Json(Err(whole)) => {
                effect.dead_letter(conn, &self.topic, &self.payload, whole, received)?;
                return Ok(None);
            }
        };
        for r in rejected {
            effect.dead_letter(conn, &self.topic, r.event.as_bytes(), r, received)?;
        }
        Ok(Some(events))
    }
}

/// A sensor as ingest needs it, looked up once per batch.
struct SensorRef {
    key: i64,
    limits: Limits,
    retired: bool,
    /// Set when the sensor's alarms come from its readings.
    alarms_from_readings: Option<LimitSensor>,
}

impl SensorRef {
    fn from_row(r: &rusqlite::Row) -> rusqlite::Result<SensorRef> {
        let limits = [r.get(1)?, r.get(2)?, r.get(3)?, r.get(4)?];
        let from_limits: bool = r.get(6)?;
        let severity = |i: usize| -> rusqlite::Result<Option<Severity>> {
            Ok(r.get::<_, Option<String>>(i)?.and_then(|s| Severity::parse(&s).ok()))
        };
        let alarms_from_readings =
            match (from_limits, SensorId::parse(&r.get::<_, String>(7)?), AssetId::parse(&r.get::<_, String>(8)?)) {
                (true, Ok(id), Ok(asset)) => Some(LimitSensor {
                    key: r.get(0)?,
                    id,
                    asset,
                    limits,
                    deadband: r.get(9)?,
                    on_delay_s: r.get(10)?,
                    prefix: limits::prefix_of(r.get(11)?, &r.get::<_, String>(12)?),
                    priorities: [severity(13)?, severity(14)?, severity(15)?, severity(16)?],
                    criticality: Criticality::parse(&r.get::<_, String>(17)?).unwrap_or(Criticality::B),
                    unit: r.get(18)?,
                    description: r.get(19)?,
                }),
                _ => None,
            };
        Ok(SensorRef { key: r.get(0)?, limits, retired: r.get(5)?, alarms_from_readings })
    }
}

/// State shared by the messages of one transaction: sensor lookups, rollup sums, and
/// the Sparkplug sessions touched.
struct Batch {
    /// Sensors looked up in this batch; None when unknown.
    sensors: HashMap<SensorId, Option<Rc<SensorRef>>>,
    rollups: Rollups,
    received: Timestamp,
    policy: IngestPolicy,
    sparkplug: Option<sparkplug::Host>,
    /// The plant's graph and the learned pairs, read once a batch for the episodes.
    episodes: std::cell::OnceCell<(crate::episodes::graph::PlantGraph, crate::episodes::pairs::Learned)>,
}

impl Batch {
    fn new(received: Timestamp, policy: IngestPolicy) -> Batch {
        let sparkplug = policy.sparkplug.clone().filter(|s| s.enabled).map(sparkplug::Host::new);
        Batch {
            sensors: HashMap::new(),
            rollups: Rollups::default(),
            received,
            policy,
            sparkplug,
            episodes: std::cell::OnceCell::new(),
        }
    }

    fn sensor(&mut self, conn: &Connection, id: &SensorId) -> rusqlite::Result<Option<Rc<SensorRef>>> {
        if let Some(found) = self.sensors.get(id) {
            return Ok(found.clone());
        }
        let found = conn
            .prepare_cached(
                "SELECT s.key, s.limit_ll, s.limit_l, s.limit_h, s.limit_hh, s.retired_at IS NOT NULL,
                        s.alarm_source = 'limits', s.id, s.asset_id, s.deadband, s.on_delay_s, s.alarm_prefix, s.kind,
                        s.priority_ll, s.priority_l, s.priority_h, s.priority_hh, a.criticality, s.unit, s.description
                 FROM sensors s JOIN assets a ON a.id = s.asset_id WHERE s.id = ?1 COLLATE NOCASE",
            )?
            .query_row([id], SensorRef::from_row)
            .optional()?
            .map(Rc::new);
        self.sensors.insert(id.clone(), found.clone());
        Ok(found)
    }

    /// An alarm event through the lifecycle; a live activation (not a backfill's) is
    /// taken into its episode in the same transaction.
    fn alarm(
        &self,
        conn: &Connection,
        event: &AlarmEvent,
        raw: Option<&[u8]>,
    ) -> Result<Result<Applied, alarms::Refusal>, StoreError> {
        let applied = alarms::apply(conn, event, raw, self.received, self.policy.queue)?;
        let live = self.received.unix() - event.time.unix() < self.policy.queue.backfill_after_secs;
        if let Ok(Applied::Raised { alarm_id, .. }) = &applied
            && live
        {
            if self.episodes.get().is_none() {
                let _ = self.episodes.set(crate::episodes::upkeep::context(conn)?);
            }
            let (plant, learned) = self.episodes.get().expect("set above");
            let cx = crate::episodes::Context { plant, learned };
            crate::episodes::upkeep::upkeep(conn, *alarm_id, event.at_ms(), self.policy.episodes, &cx)?;
        }
        Ok(applied)
    }

    /// The alarms a reading raises or clears on a sensor whose alarms come from its
    /// limits, through the same lifecycle as SCADA's alarm events.
    fn alarms_from_reading(
        &self,
        conn: &Connection,
        points: &LimitSensor,
        r: &Reading,
        effect: &mut MessageEffect,
    ) -> Result<(), StoreError> {
        for event in limits::evaluate(conn, points, (r.time, r.millis), r.value)? {
            match self.alarm(conn, &event, None)? {
                Ok(applied) => effect.alarms.push(applied),
                // The point's state says raised or cleared; a refusal here is the twin
                // changed under it (a sensor moved), worth a line, not a dead letter.
                Err(refusal) => {
                    tracing::warn!(stage = "ingest", event = %event.event_id, %refusal, "an alarm from the limits did not apply")
                }
            }
        }
        Ok(())
    }

    fn apply(&mut self, conn: &Connection, m: &Message) -> Result<MessageEffect, StoreError> {
        let mut effect = MessageEffect::default();
        if let Body::Sparkplug(decoded) = &m.body {
            self.apply_sparkplug(conn, m, decoded, &mut effect)?;
            return Ok(effect);
        }
        if let Some(events) = m.accepted(conn, self.received, &mut effect)? {
            for (event, span) in events {
                self.apply_event(conn, &m.topic, event, &m.payload[span.clone()], &mut effect)?;
            }
        }
        Ok(effect)
    }

    /// Why an event's time is refused, if it is: a reset clock, or further ahead of or
    /// behind its receipt than the policy allows.
    fn time_refusal(&self, time: Timestamp) -> Option<Rejected> {
        // On every event: the times are formatted only for a refusal.
        let (stamp, received) = (|| time.to_rfc3339(), || self.received.to_rfc3339());
        let gap = time.unix() - self.received.unix();
        let detail = if time.unix() < CLOCK_RESET_BEFORE {
            format!(
                "time: {} is before 2001, which a controller sends when its clock was reset: set the sender's clock \
                 (the event's real time is unknown, so it is not stored)",
                stamp()
            )
        } else if let Some(max) = self.policy.max_ahead_s.filter(|&max| gap > max) {
            format!(
                "time: {} is {} ahead of its receipt at {} (at most {max} s is accepted): check the sender's clock, and that it sends UTC",
                stamp(),
                crate::domain::approx_duration(gap),
                received()
            )
        } else if let Some(max) = self.policy.max_behind_s.filter(|&max| -gap > max) {
            format!(
                "time: {} is {} behind its receipt at {} (at most {max} s is accepted, mqtt.max_time_behind_s): \
                 check the sender's clock; for a backfill after an outage, raise the limit and replay",
                stamp(),
                crate::domain::approx_duration(-gap),
                received()
            )
        } else {
            return None;
        };
        Some(Rejected { reason: DeadLetterReason::Invalid, detail, event: String::new() })
    }

    /// One event's effect, or its dead letter when the twin refuses it (unknown
    /// sensor, a clear with no raise, ...).
    fn apply_event(
        &mut self,
        conn: &Connection,
        topic: &str,
        event: &Event,
        raw: &[u8],
        effect: &mut MessageEffect,
    ) -> Result<(), StoreError> {
        let refused = match event {
            _ if let Some(refusal) = self.time_refusal(event.time()) => refusal,
            Event::Alarm(a) => match self.alarm(conn, a, Some(raw))? {
                Err(refusal) => {
                    let unknown =
                        matches!(refusal, alarms::Refusal::UnknownAsset(_) | alarms::Refusal::UnknownSensor(_));
                    let detail = format!("{refusal}{}", if unknown { empty_twin_hint(conn)? } else { "" });
                    Rejected { reason: refusal.reason(), detail, event: String::new() }
                }
                Ok(Applied::Duplicate)
                    if let differ = repeat::differing_fields(conn, a)?
                        && !differ.is_empty() =>
                {
                    Rejected {
                        reason: DeadLetterReason::Conflict,
                        detail: format!(
                            "event_id {} was first received with other content (differs in: {}); the first is \
                             kept. A sender must not reuse event ids (a counter reset at restart does): make them \
                             unique, e.g. prefix them with the gateway's boot time",
                            a.event_id,
                            differ.join(", ")
                        ),
                        event: String::new(),
                    }
                }
                Ok(applied) => {
                    effect.alarms.push(applied);
                    return Ok(());
                }
            },
            Event::Reading(r) => match self.reading(conn, r, true, effect)? {
                Some(refused) => refused,
                None => return Ok(()),
            },
        };
        effect.dead_letter(conn, topic, raw, &refused, self.received)?;
        Ok(())
    }

    /// Stores a reading, and when `live` evaluates it for alarms from the limits; or
    /// says why the twin refuses it.
    fn reading(
        &mut self,
        conn: &Connection,
        r: &Reading,
        live: bool,
        effect: &mut MessageEffect,
    ) -> Result<Option<Rejected>, StoreError> {
        let refused = match self.sensor(conn, &r.sensor_id)? {
            Some(s) if s.retired => Rejected {
                reason: DeadLetterReason::Retired,
                detail: format!(
                    "sensor {} is retired (left out of a full plant import); import it again to take its readings",
                    r.sensor_id
                ),
                event: String::new(),
            },
            Some(s) => match self.rollups.insert(conn, s.key, &s.limits, r.at_ms(), r.value)? {
                Stored::New => {
                    effect.readings += 1;
                    if let (true, Some(points)) = (live, &s.alarms_from_readings) {
                        self.alarms_from_reading(conn, points, r, effect)?;
                    }
                    return Ok(None);
                }
                // Evaluated when it first came.
                Stored::Duplicate => {
                    effect.duplicate_readings += 1;
                    return Ok(None);
                }
                Stored::Conflict(stored) => Rejected {
                    reason: DeadLetterReason::Conflict,
                    detail: format!(
                        "sensor {} already has the value {stored} at {}, kept; this reading says {}. Two values \
                         for one millisecond mean two sources write this tag, or a sender stamps several samples \
                         with one time: check the gateway's mapping and time stamps",
                        r.sensor_id,
                        Timestamp::rfc3339_ms(r.at_ms()),
                        r.value
                    ),
                    event: String::new(),
                },
            },
            None => Rejected {
                reason: DeadLetterReason::UnknownSensor,
                detail: format!("no sensor {}{}", r.sensor_id, empty_twin_hint(conn)?),
                event: String::new(),
            },
        };
        Ok(Some(refused))
    }

    /// A Sparkplug message: the session's verdict from `sparkplug::Host`, then its
    /// readings and communication-loss alarms through the same paths as JSON events.
    /// Refusals are one dead letter per reason, with the message's payload, so a
    /// refused DDATA of 100 metrics is one dead letter, not 100.
    fn apply_sparkplug(
        &mut self,
        conn: &Connection,
        m: &Message,
        decoded: &Result<sparkplug::Decoded, sparkplug::Refused>,
        effect: &mut MessageEffect,
    ) -> Result<(), StoreError> {
        let mut refused: Vec<Rejected> = Vec::new();
        let refuse = |r: sparkplug::Refused| Rejected { reason: r.reason, detail: r.detail, event: String::new() };
        match (decoded, self.sparkplug.as_mut()) {
            (Err(r), _) => refused.push(refuse(r.clone())),
            (Ok(_), None) => refused.push(Rejected {
                reason: DeadLetterReason::Unsupported,
                detail: "a Sparkplug B message, and Sparkplug is not enabled: set [sparkplug] enabled = true in twinops.toml".into(),
                event: String::new(),
            }),
            (Ok(d), Some(host)) => {
                let out = host.apply(conn, d, self.received)?;
                refused.extend(out.refused.into_iter().map(refuse));
                effect.rebirths.extend(out.rebirth);
                for r in out.readings {
                    let reading = Reading { sensor_id: r.sensor, time: r.time, millis: r.millis, value: r.value };
                    let refusal = match self.time_refusal(r.time) {
                        Some(refusal) => Some(refusal),
                        None => self.reading(conn, &reading, !r.historical, effect)?,
                    };
                    refused.extend(refusal);
                }
                for c in out.comm {
                    self.comm_loss(conn, c, effect)?;
                }
            }
        }
        let mut by_reason: Vec<(DeadLetterReason, usize, String)> = Vec::new();
        for r in refused {
            match by_reason.iter_mut().find(|(reason, ..)| *reason == r.reason) {
                Some(entry) => entry.1 += 1,
                None => by_reason.push((r.reason, 1, r.detail)),
            }
        }
        for (reason, n, first) in by_reason {
            let detail = if n == 1 {
                first
            } else {
                format!("{n} refusals for this reason in this message; the first: {first}")
            };
            let refused = Rejected { reason, detail, event: String::new() };
            effect.dead_letter(conn, &m.topic, &m.payload, &refused, self.received)?;
        }
        Ok(())
    }

    /// A Sparkplug death's communication-loss alarm, or its clear on the next birth,
    /// through the alarm lifecycle like SCADA's.
    fn comm_loss(&self, conn: &Connection, c: sparkplug::Comm, effect: &mut MessageEffect) -> Result<(), StoreError> {
        let severity = self.policy.sparkplug.as_ref().map_or(Severity::High, |s| s.comm_loss_priority);
        let event = AlarmEvent {
            event_id: c.event_id,
            asset_id: c.asset,
            sensor_id: None,
            code: "COMM_LOSS".into(),
            severity,
            transition: if c.raised { Transition::Raised } else { Transition::Cleared },
            value: None,
            threshold: None,
            time: c.time,
            millis: 0,
            message: c.message,
        };
        match self.alarm(conn, &event, None)? {
            Ok(applied) => effect.alarms.push(applied),
            // A birth clears what no death raised: nothing to say.
            Err(_) if !c.raised => {}
            Err(refusal) => {
                tracing::warn!(stage = "ingest", event = %event.event_id, %refusal, "a communication-loss alarm did not apply")
            }
        }
        Ok(())
    }
}

/// What a refusal for an unknown id adds when the twin has no plant at all: the move
/// that brings the events in.
fn empty_twin_hint(conn: &Connection) -> rusqlite::Result<&'static str> {
    let any: Option<i64> =
        conn.prepare_cached("SELECT 1 FROM assets LIMIT 1")?.query_row([], |r| r.get(0)).optional()?;
    Ok(if any.is_some() {
        ""
    } else {
        "; the twin has no plant yet: load it with `twinops plant import`, then `twinops dead-letters replay --reason unknown_sensor` (and unknown_asset) brings these events in"
    })
}
