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

use std::borrow::Cow;
use std::ops::Range;

use serde::Deserialize;
use serde_json::value::RawValue;

pub use crate::domain::{AlarmEvent, Transition};
use crate::domain::{AssetId, DeadLetterReason, SensorId, Severity, Timestamp, parse_time_ms};

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
/// The largest magnitude a value may have. Finite but absurd values (1e308 from an
/// overflowing register) would make the rollups' sums of squares infinite.
pub const MAX_ABS_VALUE: f64 = 1e12;

#[derive(Debug, Clone, PartialEq)]
pub struct Reading {
    pub sensor_id: SensorId,
    pub time: Timestamp,
    /// The milliseconds past `time`'s second (0-999): readings keep them.
    pub millis: u16,
    pub value: f64,
}

impl Reading {
    /// When it was taken, in milliseconds since the epoch.
    pub fn at_ms(&self) -> i64 {
        self.time.unix() * 1000 + i64::from(self.millis)
    }
}

#[derive(Debug, Clone, PartialEq)]
pub enum Event {
    Alarm(AlarmEvent),
    Reading(Reading),
}

impl Event {
    /// When the source says it happened.
    pub fn time(&self) -> Timestamp {
        match self {
            Event::Alarm(a) => a.time,
            Event::Reading(r) => r.time,
        }
    }
}

/// An event that parsed, with where its JSON lies in the payload (for a dead letter
/// should it not apply).
pub type ParsedEvent = (Event, Range<usize>);

/// A payload's events that parsed, and the ones rejected.
pub type Parsed = (Vec<ParsedEvent>, Vec<Rejected>);

/// An alarm event in the contract's JSON: what a gateway in twinops (OPC UA) sends
/// through the same parse and dead letters as one on MQTT.
pub fn alarm_json(a: &AlarmEvent) -> serde_json::Value {
    let mut e = serde_json::json!({
        "type": "alarm", "event_id": a.event_id, "asset_id": a.asset_id.as_str(), "code": a.code,
        "severity": a.severity.as_str(), "state": match a.transition { Transition::Raised => "raised", Transition::Cleared => "cleared" },
        "time": Timestamp::rfc3339_ms(a.time.unix() * 1000 + i64::from(a.millis)), "message": a.message,
    });
    for (key, value) in [("value", a.value), ("threshold", a.threshold)] {
        if let Some(v) = value.filter(|v| v.is_finite()) {
            e[key] = v.into();
        }
    }
    if let Some(s) = &a.sensor_id {
        e["sensor_id"] = s.as_str().into();
    }
    e
}

/// A reading in the contract's JSON, its time to the millisecond.
pub fn reading_json(sensor: &SensorId, at_ms: i64, value: f64) -> serde_json::Value {
    serde_json::json!({"type": "reading", "sensor_id": sensor.as_str(), "time": Timestamp::rfc3339_ms(at_ms), "value": value})
}

/// Why (part of) a message was not accepted. `reason` is the dead-letter reason.
#[derive(Debug, Clone, PartialEq)]
pub struct Rejected {
    pub reason: DeadLetterReason,
    pub detail: String,
    /// The offending event's JSON, or empty when the whole message is rejected.
    pub event: String,
}

impl Rejected {
    fn message(reason: DeadLetterReason, detail: String) -> Rejected {
        Rejected { reason, detail, event: String::new() }
    }
}

#[derive(Debug, Clone, Copy, Deserialize)]
#[serde(rename_all = "snake_case")]
enum Kind {
    Alarm,
    Reading,
}

/// One event as sent: every field of both kinds, checked against its kind in
/// [`event`]. Flat rather than a tagged enum because serde buffers a tagged enum's
/// fields before it reads the tag; this reads each event in one pass, strings borrowed
/// from the payload where they hold no escapes.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Wire<'a> {
    #[serde(rename = "type")]
    kind: Option<Kind>,
    #[serde(borrow, default)]
    event_id: Option<Text<'a>>,
    #[serde(borrow, default)]
    asset_id: Option<Text<'a>>,
    #[serde(borrow, default)]
    sensor_id: Option<Text<'a>>,
    #[serde(borrow, default)]
    code: Option<Text<'a>>,
    #[serde(default)]
    severity: Option<Severity>,
    #[serde(default)]
    state: Option<Transition>,
    #[serde(default)]
    value: Option<f64>,
    #[serde(default)]
    threshold: Option<f64>,
    #[serde(borrow, default)]
    time: Option<Text<'a>>,
    #[serde(borrow, default)]
    message: Option<Text<'a>>,
}

/// A JSON string, borrowed from the payload unless it holds escapes.
struct Text<'a>(Cow<'a, str>);

impl<'de: 'a, 'a> Deserialize<'de> for Text<'a> {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct Visitor;
        impl<'de> serde::de::Visitor<'de> for Visitor {
            type Value = Text<'de>;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("a string")
            }
            fn visit_borrowed_str<E>(self, s: &'de str) -> Result<Text<'de>, E> {
                Ok(Text(Cow::Borrowed(s)))
            }
            fn visit_str<E>(self, s: &str) -> Result<Text<'de>, E> {
                Ok(Text(Cow::Owned(s.to_string())))
            }
        }
        d.deserialize_str(Visitor)
    }
}

/// A parse error with the field it is in (`severity: unknown variant ...`), found by
/// parsing again with the path tracked: only for an event that failed, so the usual case
/// pays nothing for it.
fn located(raw: &str, error: serde_json::Error) -> String {
    let mut de = serde_json::Deserializer::from_str(raw);
    match serde_path_to_error::deserialize::<_, Wire>(&mut de) {
        // An unknown field's message names it already.
        Err(e)
            if !e.path().to_string().starts_with(['.', '?']) && !e.inner().to_string().starts_with("unknown field") =>
        {
            format!("{}: {}", e.path(), e.inner())
        }
        _ => error.to_string(),
    }
}

/// Just the `events` of a batch object; anything else in it is ignored.
#[derive(Deserialize)]
struct Envelope<'a> {
    #[serde(borrow)]
    events: Option<&'a RawValue>,
}

/// The first byte of a JSON array and of an object, named: a batch or one event.
const ARRAY: u8 = b'[';
const OBJECT: u8 = b'{';

/// Parses one MQTT payload into the events it holds (each with where its JSON lies, kept
/// for a dead letter should it not apply) and the ones rejected. A message that is not
/// JSON at all, or too large, is one rejection; in a batch, each bad event is rejected
/// alone and the good ones are kept.
pub fn parse<'a>(payload: &'a [u8]) -> Result<Parsed, Rejected> {
    if payload.len() > MAX_MESSAGE_BYTES {
        return Err(Rejected::message(
            DeadLetterReason::Oversized,
            format!("{} bytes; the limit is {MAX_MESSAGE_BYTES}", payload.len()),
        ));
    }
    let not_json = |e: serde_json::Error| Rejected::message(DeadLetterReason::Malformed, format!("not JSON: {e}"));
    // Each event's JSON beside its parse, for a batch and a single event alike.
    let batch = |items: Vec<&'a RawValue>| {
        if items.len() > MAX_BATCH {
            return Err(Rejected::message(
                DeadLetterReason::Oversized,
                format!("{} events; the limit is {MAX_BATCH} per message", items.len()),
            ));
        }
        Ok(items.into_iter().map(|item| (item.get(), serde_json::from_str::<Wire>(item.get()))).collect())
    };
    let wires: Vec<(&str, Result<Wire, serde_json::Error>)> =
        match payload.iter().copied().find(|b| !b.is_ascii_whitespace()) {
            Some(ARRAY) => batch(serde_json::from_slice(payload).map_err(not_json)?)?,
            // One event (the usual case, read in one pass), or `{"events": [...]}`.
            Some(OBJECT) => {
                let one = serde_json::from_slice::<Wire>(payload);
                let envelope = match &one {
                    Ok(_) => None,
                    Err(_) => serde_json::from_slice::<Envelope>(payload).map_err(not_json)?.events,
                };
                match envelope {
                    Some(events) => batch(serde_json::from_str(events.get()).map_err(|_| {
                        Rejected::message(DeadLetterReason::Malformed, "`events` must be an array".into())
                    })?)?,
                    // It parsed as JSON, so it is UTF-8.
                    None => vec![(
                        std::str::from_utf8(payload)
                            .map_err(|e| Rejected::message(DeadLetterReason::Malformed, e.to_string()))?,
                        one,
                    )],
                }
            }
            _ => {
                let other: serde_json::Value = serde_json::from_slice(payload).map_err(not_json)?;
                return Err(Rejected::message(
                    DeadLetterReason::Malformed,
                    format!("expected an event object or an array, got {other}"),
                ));
            }
        };
    let mut events = Vec::with_capacity(wires.len());
    let mut rejected = Vec::new();
    for (raw, wire) in wires {
        match wire.map_err(|e| (DeadLetterReason::Malformed, located(raw, e))).and_then(event) {
            Ok(e) => events.push((e, span(payload, raw))),
            Err((reason, detail)) => rejected.push(Rejected { reason, detail, event: raw.to_string() }),
        }
    }
    Ok((events, rejected))
}

/// Where `part`, borrowed from `payload`, lies in it.
fn span(payload: &[u8], part: &str) -> Range<usize> {
    let start = (part.as_ptr() as usize).wrapping_sub(payload.as_ptr() as usize);
    debug_assert!(
        start.checked_add(part.len()).is_some_and(|end| end <= payload.len()),
        "not borrowed from the payload"
    );
    start..start + part.len()
}

type Refused = (DeadLetterReason, String);

fn invalid(detail: String) -> Refused {
    (DeadLetterReason::Invalid, detail)
}

fn missing(field: &str, fields: &str) -> Refused {
    (DeadLetterReason::Malformed, format!("missing field `{field}`: {fields}"))
}

fn time(t: &str) -> Result<(Timestamp, u16), Refused> {
    parse_time_ms(t).map_err(|e| invalid(format!("time: {e}")))
}

/// A value a plant can have measured: finite, and within ±1e12.
fn finite(name: &str, v: Option<f64>) -> Result<Option<f64>, Refused> {
    match v {
        Some(x) if !x.is_finite() => Err(invalid(format!("{name} is not a finite number"))),
        Some(x) if x.abs() > MAX_ABS_VALUE => Err(invalid(format!(
            "{name} {x:e} is beyond ±1e12, which no plant measures (a sender's overflow or an uninitialised register); it is not stored"
        ))),
        _ => Ok(v),
    }
}

fn event(wire: Wire) -> Result<Event, Refused> {
    match wire.kind {
        None => Err((DeadLetterReason::Malformed, "missing field `type`: \"alarm\" or \"reading\"".to_string())),
        Some(Kind::Reading) => reading(wire),
        Some(Kind::Alarm) => alarm(wire),
    }
}

fn reading(wire: Wire) -> Result<Event, Refused> {
    const FIELDS: &str = "a reading has sensor_id, time and value";
    let Wire { event_id, asset_id, sensor_id, code, severity, state, value, threshold, time: t, message, .. } = wire;
    let extra = [
        ("event_id", event_id.is_some()),
        ("asset_id", asset_id.is_some()),
        ("code", code.is_some()),
        ("severity", severity.is_some()),
        ("state", state.is_some()),
        ("threshold", threshold.is_some()),
        ("message", message.is_some()),
    ];
    if let Some((field, _)) = extra.iter().find(|(_, given)| *given) {
        return Err((DeadLetterReason::Malformed, format!("field `{field}` is not part of a reading: {FIELDS}")));
    }
    let sensor_id = sensor_id.ok_or_else(|| missing("sensor_id", FIELDS))?;
    let t = t.ok_or_else(|| missing("time", FIELDS))?;
    let value = value.ok_or_else(|| missing("value", FIELDS))?;
    let (at, millis) = time(&t.0)?;
    Ok(Event::Reading(Reading {
        sensor_id: SensorId::parse(&sensor_id.0).map_err(|e| invalid(format!("sensor_id: {e}")))?,
        time: at,
        millis,
        value: finite("value", Some(value))?.expect("given"),
    }))
}

fn alarm(wire: Wire) -> Result<Event, Refused> {
    const FIELDS: &str = "an alarm event has event_id, asset_id, code, severity, state and time; sensor_id, \
                          value, threshold and message are optional";
    let Wire { event_id, asset_id, sensor_id, code, severity, state, value, threshold, time: t, message, .. } = wire;
    let event_id = event_id.ok_or_else(|| missing("event_id", FIELDS))?;
    let asset_id = asset_id.ok_or_else(|| missing("asset_id", FIELDS))?;
    let code = code.ok_or_else(|| missing("code", FIELDS))?;
    let severity = severity.ok_or_else(|| missing("severity", FIELDS))?;
    let state = state.ok_or_else(|| missing("state", FIELDS))?;
    let t = t.ok_or_else(|| missing("time", FIELDS))?;
    let event_id = event_id.0.trim().to_string();
    if event_id.is_empty() || event_id.len() > MAX_EVENT_ID || event_id.chars().any(char::is_control) {
        return Err(invalid(format!("event_id must be 1 to {MAX_EVENT_ID} printable characters")));
    }
    let code = code.0.trim().to_ascii_uppercase();
    let code_ok = !code.is_empty()
        && code.len() <= MAX_CODE
        && code.split('-').all(|p| !p.is_empty() && p.bytes().all(|b| b.is_ascii_uppercase() || b.is_ascii_digit()));
    if !code_ok {
        return Err(invalid(format!("code '{code}' is not an alarm code like VIB-HI")));
    }
    let asset_id = AssetId::parse(&asset_id.0).map_err(|e| invalid(format!("asset_id: {e}")))?;
    // Whether the sensor is the asset's is the twin's to say (`alarms::apply`).
    let sensor_id =
        sensor_id.map(|s| SensorId::parse(&s.0)).transpose().map_err(|e| invalid(format!("sensor_id: {e}")))?;
    let message: String = (message.map(|m| m.0).unwrap_or_default().chars())
        .filter(|c| (!c.is_control() || *c == '\n') && !deceives(*c))
        .take(MAX_MESSAGE_CHARS)
        .collect();
    let (time, millis) = time(&t.0)?;
    Ok(Event::Alarm(AlarmEvent {
        event_id,
        asset_id,
        sensor_id,
        code,
        severity,
        transition: state,
        value: finite("value", value)?,
        threshold: finite("threshold", threshold)?,
        time,
        millis,
        message,
    }))
}

/// Characters that make text display other than it reads: bidirectional overrides and
/// isolates, and zero-width characters. Alarm text is untrusted; they are dropped at
/// ingest (the dead letter or journal of the raw payload keeps the original bytes).
pub fn deceives(c: char) -> bool {
    matches!(c, '\u{200B}'..='\u{200F}' | '\u{202A}'..='\u{202E}' | '\u{2060}'..='\u{2069}' | '\u{FEFF}')
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
        // Ids as sent; the twin resolves their case (alarms::apply).
        assert_eq!((a.asset_id.as_str(), a.code.as_str(), a.transition), ("pump-007", "VIB-HI", Transition::Raised));

        let batch = br#"{"events":[{"type":"reading","sensor_id":"PUMP-007.FLOW","time":"2026-11-30T12:00:00Z","value":400},
            {"type":"reading","sensor_id":"PUMP-007.FLOW","time":"yesterday","value":1},
            {"type":"alarm","event_id":"e2","asset_id":"PUMP-007","sensor_id":"PUMP-004.FLOW","code":"FLOW-LO","severity":"low","state":"cleared","time":"2026-11-30T12:00:00Z"},
            {"type":"gossip"}]}"#;
        let (events, rejected) = parse(batch).unwrap();
        assert_eq!(events.len(), 2, "whose sensor is whose is the twin's to say");
        let reasons: Vec<_> = rejected.iter().map(|r| (r.reason, r.detail.as_str())).collect();
        assert!(reasons[0].1.contains("not a time"), "{reasons:?}");
        assert_eq!(reasons[1].0, "malformed");
    }

    #[test]
    fn events_keep_their_own_bytes_and_escaped_text() {
        let payload = br#"[ {"type":"reading", "sensor_id":"PUMP-007.FLOW","time":"2026-11-30T12:00:00Z","value":1.5} ,
            {"type":"alarm","event_id":"e\u0031","asset_id":"PUMP-007","code":"VIB-HI","severity":"low","state":"raised",
             "time":"2026-11-30T12:00:00Z","message":"say \"hi\"\tthen\nstop"} ]"#;
        let (events, rejected) = parse(payload).unwrap();
        assert!(rejected.is_empty(), "{rejected:?}");
        let text = std::str::from_utf8(payload).unwrap();
        let first = &text[events[0].1.clone()];
        assert!(first.starts_with(r#"{"type":"reading""#) && first.ends_with("1.5}"), "{first}");
        assert!(text[events[1].1.clone()].ends_with(r#"then\nstop"}"#));
        let Event::Alarm(a) = &events[1].0 else { panic!() };
        assert_eq!(
            (a.event_id.as_str(), a.message.as_str()),
            ("e1", "say \"hi\"then\nstop"),
            "escapes decoded, tab dropped"
        );

        let one = br#" {"type":"reading","sensor_id":"PUMP-007.FLOW","time":"2026-11-30T12:00:00Z","value":2} "#;
        let (events, _) = parse(one).unwrap();
        assert_eq!(events[0].1, 0..one.len(), "a single event is the whole payload");
    }

    #[test]
    fn each_kind_names_its_fields() {
        let detail = |payload: &[u8]| parse(payload).unwrap().1.remove(0).detail;
        let reading_with_code =
            br#"{"type":"reading","sensor_id":"PUMP-007.FLOW","time":"2026-11-30T12:00:00Z","value":1,"code":"X"}"#;
        assert_eq!(
            detail(reading_with_code),
            "field `code` is not part of a reading: a reading has sensor_id, time and value"
        );
        assert!(
            detail(br#"{"type":"alarm","event_id":"e1"}"#).starts_with("missing field `asset_id`: an alarm event has")
        );
        assert!(detail(br#"{"sensor_id":"PUMP-007.FLOW"}"#).starts_with("missing field `type`"));
        assert!(detail(br#"{"type":"gossip"}"#).starts_with("type: unknown variant `gossip`"));
        let colour = detail(br#"{"type":"reading","colour":"red"}"#);
        assert!(colour.starts_with("unknown field `colour`"), "{colour}");
        // A value of the wrong type or outside a vocabulary names its field.
        let alarm = |fields: &str| {
            let alarm = r#"{"type":"alarm","event_id":"e1","asset_id":"PUMP-007","code":"VIB-HI","time":"2026-11-30T12:00:00Z""#;
            detail(format!("{alarm},{fields}}}").as_bytes())
        };
        assert_eq!(
            alarm(r#""severity":"hi","state":"raised""#).split(" at line").next().unwrap(),
            "severity: unknown variant `hi`, expected one of `low`, `medium`, `high`, `critical`"
        );
        assert!(alarm(r#""severity":"high","state":"open""#).starts_with("state: unknown variant `open`"));
        let nan = alarm(r#""severity":"high","state":"raised","value":"NaN""#);
        assert!(nan.starts_with(r#"value: invalid type: string "NaN", expected f64"#), "{nan}");
        assert_eq!(parse(br#"{"events": 5}"#).unwrap_err().detail, "`events` must be an array");
    }

    #[test]
    fn hostile_events_are_refused_one_by_one() {
        let reading = r#"{"type":"reading","sensor_id":"PUMP-007.FLOW","time":"2026-11-30T12:00:00Z","value":1}"#;
        // Deep enough to overflow the stack of a recursive parser, within the size limit.
        let nested = format!("{}{}", "[".repeat(100_000), "]".repeat(100_000));
        let hostile = [
            r#"{"type":"reading","sensor_id":"PUMP-007.FLOW","time":"2026-11-30T12:00:00Z","value":1,"value":2}"#,
            r#"{"type":"reading","sensor_id":"PUMP-007.FLOW","time":"2026-11-30T12:00:00Z","value":1e400}"#,
            r#"{"type":"reading","sensor_id":7,"time":"2026-11-30T12:00:00Z","value":1}"#,
            r#"{"type":"reading","sensor_id":"PUMP-007.FLOW","time":"2026-11-30T12:00:00Z","value":"1"}"#,
            r#"{"type":"alarm","event_id":"x","asset_id":"PUMP-007","code":"VIB-HI","severity":"low","state":"raised","time":"2026-11-30T12:00:00Z","message":{"a":1}}"#,
            r#""a string""#,
            nested.as_str(),
        ];
        let batch = format!("[{reading},{}]", hostile.join(","));
        let (events, rejected) = parse(batch.as_bytes()).unwrap();
        assert_eq!(events.len(), 1, "the good event is kept");
        let details: Vec<_> = rejected.iter().map(|r| (r.reason, r.detail.as_str())).collect();
        assert_eq!(details.len(), hostile.len(), "{details:?}");
        assert!(details.iter().all(|(reason, _)| *reason == "malformed"), "{details:?}");
        assert!(details[0].1.contains("duplicate field `value`"), "{details:?}");
        assert!(details[2].1.contains("expected a string"), "{details:?}");
        assert_eq!(rejected[5].event, r#""a string""#, "each refusal keeps its own JSON");
        let wrapped = format!(r#"{{"x": {nested}}}"#);
        let (events, rejected) = parse(wrapped.as_bytes()).unwrap();
        assert!(events.is_empty() && rejected[0].detail.contains("unknown field `x`"), "{:?}", rejected[0].detail);
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
