//! The inbound MQTT contract: alarm events and telemetry as JSON, one event or a batch
//! per message. Parsed here, once, into domain types; what does not parse is a
//! [`Rejected`] with the reason it will be dead-lettered under.
//!
//! ```json
//! {"type": "alarm", "event_id": "scada-88412", "asset_id": "PUMP-007",
//!  "sensor_id": "PUMP-007.VIB-DE", "code": "VIB-HI", "severity": "medium",
//!  "state": "raised", "value": 4.82, "threshold": 4.5,
//!  "time": "2026-11-30T12:00:00Z", "message": "DE bearing vibration high"}
//! {"type": "reading", "sensor_id": "PUMP-007.VIB-DE", "time": "2026-11-30T12:00:00Z", "value": 4.82}
//! ```
//! A batch is a JSON array of these, or `{"events": [...]}`.

use serde::Deserialize;
use serde_json::Value;

use crate::domain::{AssetId, SensorId, Severity, Timestamp, parse_time};

/// Largest message accepted, in bytes.
pub const MAX_MESSAGE_BYTES: usize = 256 * 1024;
/// Largest MQTT packet ingest reads. Anything between this and [`MAX_MESSAGE_BYTES`] is
/// read so that it can be dead-lettered and acknowledged: a packet the client refused
/// at the socket would drop the connection, and the broker would redeliver it to every
/// new one. The broker must refuse larger messages (Mosquitto: `max_packet_size`);
/// the embedded broker does.
pub const MAX_PACKET_BYTES: usize = 16 * 1024 * 1024;
/// Most bytes of a refused message kept in its dead letter.
pub const DEAD_LETTER_BYTES: usize = 1024 * 1024;
/// Most events in one message.
pub const MAX_BATCH: usize = 1_000;
const MAX_EVENT_ID: usize = 128;
const MAX_CODE: usize = 32;
const MAX_MESSAGE_CHARS: usize = 1_000;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Transition {
    Raised,
    Cleared,
}

#[derive(Debug, Clone, PartialEq)]
pub struct AlarmEvent {
    pub event_id: String,
    pub asset_id: AssetId,
    pub sensor_id: Option<SensorId>,
    pub code: String,
    pub severity: Severity,
    pub transition: Transition,
    pub value: Option<f64>,
    pub threshold: Option<f64>,
    pub time: Timestamp,
    /// Untrusted text from the source, at most 1,000 characters.
    pub message: String,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Reading {
    pub sensor_id: SensorId,
    pub time: Timestamp,
    pub value: f64,
}

#[derive(Debug, Clone, PartialEq)]
pub enum Event {
    Alarm(AlarmEvent),
    Reading(Reading),
}

/// A payload's events that parsed, each with its JSON (for a dead letter should it not
/// apply), and the ones rejected.
pub type Parsed = (Vec<(Event, Value)>, Vec<Rejected>);

/// Why (part of) a message was not accepted. `reason` is the dead-letter reason.
#[derive(Debug, Clone, PartialEq)]
pub struct Rejected {
    pub reason: &'static str,
    pub detail: String,
    /// The offending event's JSON, or empty when the whole message is rejected.
    pub event: String,
}

impl Rejected {
    fn message(reason: &'static str, detail: String) -> Rejected {
        Rejected { reason, detail, event: String::new() }
    }
}

#[derive(Deserialize)]
#[serde(tag = "type", rename_all = "snake_case", deny_unknown_fields)]
enum Wire {
    Alarm {
        event_id: String,
        asset_id: String,
        #[serde(default)]
        sensor_id: Option<String>,
        code: String,
        severity: Severity,
        state: Transition,
        #[serde(default)]
        value: Option<f64>,
        #[serde(default)]
        threshold: Option<f64>,
        time: String,
        #[serde(default)]
        message: String,
    },
    Reading {
        sensor_id: String,
        time: String,
        value: f64,
    },
}

/// Parses one MQTT payload into the events it holds (each with its own JSON, kept for
/// a dead letter should it not apply) and the ones rejected. A message that is not JSON
/// at all, or too large, is one rejection; in a batch, each bad event is rejected alone
/// and the good ones are kept.
pub fn parse(payload: &[u8]) -> Result<Parsed, Rejected> {
    if payload.len() > MAX_MESSAGE_BYTES {
        return Err(Rejected::message(
            "oversized",
            format!("{} bytes; the limit is {MAX_MESSAGE_BYTES}", payload.len()),
        ));
    }
    let value: Value =
        serde_json::from_slice(payload).map_err(|e| Rejected::message("malformed", format!("not JSON: {e}")))?;
    let items = match value {
        Value::Array(items) => items,
        Value::Object(mut obj) if obj.contains_key("events") => match obj.remove("events") {
            Some(Value::Array(items)) => items,
            _ => return Err(Rejected::message("malformed", "`events` must be an array".into())),
        },
        obj @ Value::Object(_) => vec![obj],
        other => {
            return Err(Rejected::message("malformed", format!("expected an event object or an array, got {other}")));
        }
    };
    if items.len() > MAX_BATCH {
        return Err(Rejected::message(
            "oversized",
            format!("{} events; the limit is {MAX_BATCH} per message", items.len()),
        ));
    }
    let mut events = Vec::with_capacity(items.len());
    let mut rejected = Vec::new();
    for item in items {
        match event(&item) {
            Ok(e) => events.push((e, item)),
            Err((reason, detail)) => rejected.push(Rejected { reason, detail, event: item.to_string() }),
        }
    }
    Ok((events, rejected))
}

fn event(item: &Value) -> Result<Event, (&'static str, String)> {
    let wire = Wire::deserialize(item).map_err(|e| ("malformed", e.to_string()))?;
    let invalid = |d: String| ("invalid", d);
    let time = |t: &str| parse_time(t).map_err(|e| invalid(format!("time: {e}")));
    let finite = |name: &str, v: Option<f64>| match v {
        Some(x) if !x.is_finite() => Err(invalid(format!("{name} is not a finite number"))),
        _ => Ok(v),
    };
    match wire {
        Wire::Reading { sensor_id, time: t, value } => Ok(Event::Reading(Reading {
            sensor_id: SensorId::parse(&sensor_id).map_err(|e| invalid(format!("sensor_id: {e}")))?,
            time: time(&t)?,
            value: finite("value", Some(value))?.expect("given"),
        })),
        Wire::Alarm { event_id, asset_id, sensor_id, code, severity, state, value, threshold, time: t, message } => {
            let event_id = event_id.trim().to_string();
            if event_id.is_empty() || event_id.len() > MAX_EVENT_ID || event_id.chars().any(char::is_control) {
                return Err(invalid(format!("event_id must be 1 to {MAX_EVENT_ID} printable characters")));
            }
            let code = code.trim().to_ascii_uppercase();
            let code_ok = !code.is_empty()
                && code.len() <= MAX_CODE
                && code
                    .split('-')
                    .all(|p| !p.is_empty() && p.bytes().all(|b| b.is_ascii_uppercase() || b.is_ascii_digit()));
            if !code_ok {
                return Err(invalid(format!("code '{code}' is not an alarm code like VIB-HI")));
            }
            let asset_id = AssetId::parse(&asset_id).map_err(|e| invalid(format!("asset_id: {e}")))?;
            let sensor_id =
                sensor_id.map(|s| SensorId::parse(&s)).transpose().map_err(|e| invalid(format!("sensor_id: {e}")))?;
            if let Some(s) = &sensor_id
                && s.asset() != asset_id
            {
                return Err(invalid(format!("sensor_id {s} belongs to {}, not {asset_id}", s.asset())));
            }
            let message: String =
                message.chars().filter(|c| !c.is_control() || *c == '\n').take(MAX_MESSAGE_CHARS).collect();
            Ok(Event::Alarm(AlarmEvent {
                event_id,
                asset_id,
                sensor_id,
                code,
                severity,
                transition: state,
                value: finite("value", value)?,
                threshold: finite("threshold", threshold)?,
                time: time(&t)?,
                message,
            }))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn single_events_and_batches() {
        let one = br#"{"type":"alarm","event_id":"e1","asset_id":"pump-007","sensor_id":"PUMP-007.VIB-DE","code":"vib-hi","severity":"medium","state":"raised","value":4.8,"threshold":4.5,"time":"2026-11-30T12:00:00Z","message":"high"}"#;
        let (events, rejected) = parse(one).unwrap();
        assert!(rejected.is_empty());
        let Event::Alarm(a) = &events[0].0 else { panic!() };
        assert_eq!((a.asset_id.as_str(), a.code.as_str(), a.transition), ("PUMP-007", "VIB-HI", Transition::Raised));

        let batch = br#"{"events":[{"type":"reading","sensor_id":"PUMP-007.FLOW","time":"2026-11-30T12:00:00Z","value":400},
            {"type":"reading","sensor_id":"PUMP-007.FLOW","time":"yesterday","value":1},
            {"type":"alarm","event_id":"e2","asset_id":"PUMP-007","sensor_id":"PUMP-004.FLOW","code":"FLOW-LO","severity":"low","state":"cleared","time":"2026-11-30T12:00:00Z"},
            {"type":"gossip"}]}"#;
        let (events, rejected) = parse(batch).unwrap();
        assert_eq!(events.len(), 1);
        let reasons: Vec<_> = rejected.iter().map(|r| (r.reason, r.detail.as_str())).collect();
        assert!(reasons[0].1.contains("not a time"), "{reasons:?}");
        assert!(reasons[1].1.contains("belongs to PUMP-004"), "{reasons:?}");
        assert_eq!(reasons[2].0, "malformed");
    }

    #[test]
    fn whole_messages_rejected() {
        assert_eq!(parse(b"not json").unwrap_err().reason, "malformed");
        assert_eq!(parse(b"42").unwrap_err().reason, "malformed");
        assert_eq!(parse(&vec![b' '; MAX_MESSAGE_BYTES + 1]).unwrap_err().reason, "oversized");
        let r = parse(br#"{"type":"alarm","event_id":"","asset_id":"PUMP-007","code":"X","severity":"low","state":"raised","time":"2026-11-30T12:00:00Z","extra":1}"#).unwrap();
        assert_eq!(r.1[0].reason, "malformed", "unknown fields are refused");
    }
}
