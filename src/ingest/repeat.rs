//! An alarm event whose id was seen before: a harmless repeat (QoS 1 redelivery, a
//! gateway resending after reconnect), or a conflict, when the same id comes with other
//! content. A gateway whose event counter resets at restart reuses ids; its new alarms
//! must not vanish as "duplicates", so a repeat is compared field by field.

use rusqlite::{Connection, OptionalExtension};

use super::payload::{self, AlarmEvent, Event, Transition};

/// The fields of `ev` that differ from the event first stored under its id; empty for
/// an exact repeat (or an id not stored). Ids compare without case, as the twin
/// resolves them.
///
/// The first event's bytes as received are compared when kept (`alarm_events.raw`,
/// since migration 16); for an event stored before, or one of ours (limits, Sparkplug),
/// the journal's asset, sensor, code, transition, time and message.
pub fn differing_fields(conn: &Connection, ev: &AlarmEvent) -> rusqlite::Result<Vec<&'static str>> {
    type Row = (Option<Vec<u8>>, String, i64, Option<String>, String, Option<String>, String);
    let stored: Option<Row> = conn
        .prepare_cached(
            "SELECT e.raw, e.kind, e.at * 1000 + e.millis, e.detail, a.asset_id, a.sensor_id, a.code
             FROM alarm_events e JOIN alarms a ON a.id = e.alarm_id WHERE e.event_id = ?1",
        )?
        .query_row([&ev.event_id], |r| {
            Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?, r.get(4)?, r.get(5)?, r.get(6)?))
        })
        .optional()?;
    let Some((raw, kind, at, detail, asset, sensor, code)) = stored else { return Ok(Vec::new()) };
    if let Some(first) = raw.as_deref().and_then(first_alarm) {
        return Ok(compare(ev, &first));
    }
    let first = Fields {
        asset: &asset,
        sensor: sensor.as_deref(),
        code: &code,
        transition: if kind == "cleared" { Transition::Cleared } else { Transition::Raised },
        at_ms: at,
        message: detail.as_deref().unwrap_or_default(),
    };
    Ok(first.differing(ev))
}

/// The alarm event in bytes kept as received.
fn first_alarm(raw: &[u8]) -> Option<AlarmEvent> {
    let (mut events, _) = payload::parse(raw).ok()?;
    match events.pop()?.0 {
        Event::Alarm(a) => Some(a),
        Event::Reading(_) => None,
    }
}

/// What the journal tells of an event without its bytes.
struct Fields<'a> {
    asset: &'a str,
    sensor: Option<&'a str>,
    code: &'a str,
    transition: Transition,
    at_ms: i64,
    message: &'a str,
}

impl Fields<'_> {
    fn differing(&self, ev: &AlarmEvent) -> Vec<&'static str> {
        let same_id = |a: Option<&str>, b: Option<&str>| match (a, b) {
            (Some(a), Some(b)) => a.eq_ignore_ascii_case(b),
            (a, b) => a == b,
        };
        [
            ("asset_id", same_id(Some(self.asset), Some(ev.asset_id.as_str()))),
            ("sensor_id", same_id(self.sensor, ev.sensor_id.as_ref().map(|s| s.as_str()))),
            ("code", self.code == ev.code),
            ("state", self.transition == ev.transition),
            ("time", self.at_ms == ev.at_ms()),
            ("message", self.message == ev.message),
        ]
        .into_iter()
        .filter_map(|(name, same)| (!same).then_some(name))
        .collect()
    }
}

/// Every field compared: the journal's, then severity, value and threshold.
fn compare(ev: &AlarmEvent, first: &AlarmEvent) -> Vec<&'static str> {
    let fields = Fields {
        asset: first.asset_id.as_str(),
        sensor: first.sensor_id.as_ref().map(|s| s.as_str()),
        code: &first.code,
        transition: first.transition,
        at_ms: first.at_ms(),
        message: &first.message,
    };
    let mut differ = fields.differing(ev);
    for (name, same) in [
        ("severity", first.severity == ev.severity),
        ("value", first.value == ev.value),
        ("threshold", first.threshold == ev.threshold),
    ] {
        if !same {
            differ.push(name);
        }
    }
    differ
}
