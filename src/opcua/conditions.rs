//! Alarms & Conditions (OPC UA Part 9) onto the twin's alarm lifecycle.
//!
//! The event filter selects the condition's fields; each event is read into a
//! [`ConditionEvent`], and [`Conditions::apply`] decides what it means for the twin,
//! against what each condition was last seen as (`opcua_conditions`): a raise, a clear
//! (a condition that returned, or moved from High to HighHigh, clears the point it
//! was on), an acknowledgement made at the SCADA. The event id is the idempotence key,
//! so a ConditionRefresh's repeat of the last event changes nothing.

use std::collections::HashSet;

use async_opcua::types::{AttributeId, ByteString, EventFilter, NodeId, NumericRange, SimpleAttributeOperand, Variant};
use rusqlite::{Connection, OptionalExtension, params};

use super::OpcuaConfig;
use crate::domain::{AlarmEvent, AssetId, SensorId, Timestamp, Transition};

/// The fields the event filter selects, in order.
const FIELDS: [(u32, &str); 22] = [
    (2041, "EventId"),
    (2041, "EventType"),
    (2041, "SourceNode"),
    (2041, "SourceName"),
    (2041, "Time"),
    (2041, "Severity"),
    (2041, "Message"),
    (2782, ""), // ConditionId: the condition's NodeId attribute
    (2782, "ConditionName"),
    (2782, "Retain"),
    (2915, "ActiveState/Id"),
    (2881, "AckedState/Id"),
    (9341, "LimitState/CurrentState"),
    (9906, "HighHighState/Id"),
    (9906, "HighState/Id"),
    (9906, "LowState/Id"),
    (9906, "LowLowState/Id"),
    (2955, "HighHighLimit"),
    (2955, "HighLimit"),
    (2955, "LowLimit"),
    (2955, "LowLowLimit"),
    // The variable a limit alarm watches, where the source is the equipment object.
    (2915, "InputNode"),
];

/// RefreshStartEventType and RefreshEndEventType (Part 9).
const REFRESH_START: u32 = 2787;
const REFRESH_END: u32 = 2788;

/// The event filter for the notifiers' subscription.
pub fn filter() -> EventFilter {
    let select = FIELDS
        .iter()
        .map(|(ty, path)| {
            if path.is_empty() {
                // An empty path, not a null one: the condition itself (Part 9's own
                // examples). asyncua 2.1 reads a null path as an error and sends no
                // events at all.
                SimpleAttributeOperand {
                    type_definition_id: NodeId::new(0, *ty),
                    browse_path: Some(Vec::new()),
                    attribute_id: AttributeId::NodeId as u32,
                    index_range: NumericRange::None,
                }
            } else {
                SimpleAttributeOperand::new_value(NodeId::new(0, *ty), path)
            }
        })
        .collect();
    EventFilter { select_clauses: Some(select), where_clause: Default::default() }
}

/// One event as the filter selected it.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct ConditionEvent {
    pub event_id: String,
    pub event_type: Option<u32>,
    pub source: Option<NodeId>,
    /// The variable a limit alarm watches (AlarmConditionType's InputNode), when set.
    pub input: Option<NodeId>,
    pub source_name: String,
    pub time_ms: Option<i64>,
    pub severity: u16,
    pub message: String,
    pub condition: Option<NodeId>,
    pub condition_name: String,
    pub retain: bool,
    pub active: Option<bool>,
    pub acked: Option<bool>,
    /// An exclusive limit alarm's state: HighHigh, High, Low or LowLow.
    pub limit_state: String,
    /// A non-exclusive limit alarm's states: hh, h, l, ll.
    pub states: [bool; 4],
    /// hh, h, l, ll.
    pub limits: [Option<f64>; 4],
}

/// What an event's fields say, or why it is not one twinops takes.
pub enum Read {
    Condition(Box<ConditionEvent>),
    RefreshStart,
    RefreshEnd,
    /// Not a condition (an audit or system event): nothing for the twin.
    Other,
}

impl ConditionEvent {
    pub fn read(fields: &[Variant]) -> Read {
        let get = |i: usize| fields.get(i).filter(|v| !matches!(v, Variant::Empty));
        let event_type = match get(1) {
            Some(Variant::NodeId(t)) if t.namespace == 0 => t.as_u32(),
            _ => None,
        };
        match event_type {
            Some(REFRESH_START) => return Read::RefreshStart,
            Some(REFRESH_END) => return Read::RefreshEnd,
            _ => {}
        }
        let node = |i: usize| match get(i) {
            Some(Variant::NodeId(n)) => Some((**n).clone()),
            _ => None,
        };
        let text = |i: usize| match get(i) {
            Some(Variant::LocalizedText(t)) => t.text.as_ref().to_string(),
            Some(Variant::String(s)) => s.as_ref().to_string(),
            _ => String::new(),
        };
        let flag = |i: usize| match get(i) {
            Some(Variant::Boolean(b)) => Some(*b),
            _ => None,
        };
        let Some(condition) = node(7) else { return Read::Other };
        let event_id = match get(0) {
            Some(Variant::ByteString(b)) => hex(b),
            _ => return Read::Other,
        };
        let time_ms = match get(4) {
            Some(Variant::DateTime(t)) => Some(t.as_chrono().timestamp_millis()),
            _ => None,
        };
        let severity = get(5).and_then(Variant::as_f64).map_or(0, |s| s.clamp(0.0, 1000.0) as u16);
        let limit = |i: usize| get(i).and_then(Variant::as_f64);
        Read::Condition(Box::new(ConditionEvent {
            event_id,
            event_type,
            source: node(2),
            input: node(21).filter(|n| !n.is_null()),
            source_name: text(3),
            time_ms,
            severity,
            message: text(6),
            condition: Some(condition),
            condition_name: text(8),
            retain: flag(9).unwrap_or(false),
            active: flag(10),
            acked: flag(11),
            limit_state: text(12),
            states: [13, 14, 15, 16].map(|i| flag(i).unwrap_or(false)),
            limits: [limit(17), limit(18), limit(19), limit(20)],
        }))
    }

    /// The twin's alarm code for this condition in its present state: the condition's
    /// name, with the limit it is beyond (`-HH`, `-H`, `-L`, `-LL`) for limit alarms.
    pub fn code(&self) -> String {
        let name = if self.condition_name.is_empty() { &self.source_name } else { &self.condition_name };
        let base = alarm_code(name);
        let suffix = match self.limit_state.as_str() {
            "HighHigh" => Some("HH"),
            "High" => Some("H"),
            "Low" => Some("L"),
            "LowLow" => Some("LL"),
            _ => ["HH", "H", "L", "LL"].into_iter().zip(self.states).find(|(_, on)| *on).map(|(s, _)| s),
        };
        let code = match suffix {
            Some(s) => format!("{}-{s}", clip(&base, 32 - s.len() - 1).trim_end_matches('-')),
            None => clip(&base, 32).trim_end_matches('-').to_string(),
        };
        if code.is_empty() { "OPCUA-CONDITION".into() } else { code }
    }

    /// The limit the condition is beyond, when it says.
    fn threshold(&self, code: &str) -> Option<f64> {
        let i = match code.rsplit('-').next()? {
            "HH" => 0,
            "H" => 1,
            "L" => 2,
            "LL" => 3,
            _ => return None,
        };
        self.limits[i]
    }
}

/// A name as an alarm code: upper-case letters and digits in parts joined by `-`
/// (`Tank Level_Condition` is `TANK-LEVEL-CONDITION`).
fn alarm_code(name: &str) -> String {
    name.to_ascii_uppercase()
        .split(|c: char| !c.is_ascii_alphanumeric())
        .filter(|p| !p.is_empty())
        .collect::<Vec<_>>()
        .join("-")
}

fn clip(s: &str, n: usize) -> &str {
    s.char_indices().nth(n).map_or(s, |(i, _)| &s[..i])
}

fn hex(b: &ByteString) -> String {
    crate::support::hex(b.value.as_deref().unwrap_or_default())
}

/// Where an event's source is in the twin.
#[derive(Debug, Clone, PartialEq)]
pub struct Source {
    pub asset: AssetId,
    pub sensor: Option<SensorId>,
}

/// What a condition event does to the twin: alarm events for ingest, and the point
/// an acknowledgement at the SCADA acknowledges.
#[derive(Debug, Default, PartialEq)]
pub struct Effect {
    pub events: Vec<AlarmEvent>,
    pub acknowledged: Option<(Source, String)>,
}

/// The conditions' state across events: which were seen during a ConditionRefresh.
#[derive(Debug, Default)]
pub struct Conditions {
    refreshing: Option<HashSet<String>>,
}

impl Conditions {
    pub fn refresh_started(&mut self) {
        self.refreshing = Some(HashSet::new());
    }

    /// A ConditionRefresh ended: the conditions the twin holds active that the server
    /// did not send again are no longer active there (they returned while the link was
    /// down, or the server restarted without them), so they are cleared.
    pub fn refresh_ended(&mut self, conn: &Connection, now: Timestamp, cfg: &OpcuaConfig) -> rusqlite::Result<Effect> {
        let Some(seen) = self.refreshing.take() else { return Ok(Effect::default()) };
        let mut effect = Effect::default();
        let rows: Vec<(String, String, Option<String>, String)> = conn
            .prepare_cached("SELECT condition, asset_id, sensor_id, code FROM opcua_conditions WHERE active = 1")?
            .query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?)))?
            .collect::<Result<_, _>>()?;
        for (condition, asset, sensor, code) in rows.into_iter().filter(|(c, ..)| !seen.contains(c)) {
            let Ok(asset) = AssetId::parse(&asset) else { continue };
            let sensor = sensor.and_then(|s| SensorId::parse(&s).ok());
            effect.events.push(AlarmEvent {
                event_id: format!("opcua:refresh:{condition}:{}", now.unix()),
                asset_id: asset,
                sensor_id: sensor,
                code,
                severity: cfg.priority(0),
                transition: Transition::Cleared,
                value: None,
                threshold: None,
                time: now,
                millis: 0,
                message: "no longer active at the OPC UA server (not in its ConditionRefresh)".into(),
            });
            set_state(conn, &condition, None, now)?;
        }
        Ok(effect)
    }

    /// One condition event: what it raises, clears or acknowledges in the twin. `key`
    /// is the condition's node by namespace URI (stable across a server's restart);
    /// `source` where its source node is in the twin (else the server's asset).
    pub fn apply(
        &mut self,
        conn: &Connection,
        e: &ConditionEvent,
        key: &str,
        source: Source,
        received: Timestamp,
        cfg: &OpcuaConfig,
    ) -> rusqlite::Result<Effect> {
        let key = key.to_string();
        if let Some(seen) = &mut self.refreshing {
            seen.insert(key.clone());
        }
        let time_ms = e.time_ms.unwrap_or(received.unix() * 1000);
        let time = Timestamp::from_unix(time_ms.div_euclid(1000));
        let millis = time_ms.rem_euclid(1000) as u16;
        let before: Option<(String, bool)> = conn
            .prepare_cached("SELECT code, active FROM opcua_conditions WHERE condition = ?1")?
            .query_row([&key], |r| Ok((r.get(0)?, r.get(1)?)))
            .optional()?;
        let last = before.as_ref().map(|(code, _)| code.clone());
        let was = before.filter(|(_, active)| *active).map(|(code, _)| code);
        let code = e.code();
        let active = e.active.unwrap_or(false);
        let priority = cfg.priority(e.severity.max(1));
        let message =
            if e.message.is_empty() { format!("{} ({})", e.condition_name, e.source_name) } else { e.message.clone() };
        let event = |code: &str, transition: Transition, id: String| AlarmEvent {
            event_id: id,
            asset_id: source.asset.clone(),
            sensor_id: source.sensor.clone(),
            code: code.to_string(),
            severity: priority,
            transition,
            value: None,
            threshold: e.threshold(code),
            time,
            millis,
            message: message.clone(),
        };
        let mut effect = Effect::default();
        match &was {
            Some(old) if !active || *old != code => {
                effect.events.push(event(old, Transition::Cleared, format!("opcua:{}:clear:{old}", e.event_id)));
            }
            _ => {}
        }
        if active && was.as_deref() != Some(code.as_str()) {
            effect.events.push(event(&code, Transition::Raised, format!("opcua:{}", e.event_id)));
        }
        if e.acked == Some(true) {
            let point = if active { code.clone() } else { last.unwrap_or(code.clone()) };
            effect.acknowledged = Some((source.clone(), point));
        }
        set_state(conn, &key, Some((&source, &code, active, &e.event_id)), received)?;
        Ok(effect)
    }
}

fn set_state(
    conn: &Connection,
    condition: &str,
    state: Option<(&Source, &str, bool, &str)>,
    at: Timestamp,
) -> rusqlite::Result<()> {
    match state {
        Some((source, code, active, event_id)) => conn
            .prepare_cached(
                "INSERT INTO opcua_conditions (condition, asset_id, sensor_id, code, active, changed_at, event_id)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)
             ON CONFLICT (condition) DO UPDATE SET asset_id = excluded.asset_id, sensor_id = excluded.sensor_id,
                 code = excluded.code, active = excluded.active, changed_at = excluded.changed_at,
                 event_id = excluded.event_id",
            )?
            .execute(params![
                condition,
                source.asset.as_str(),
                source.sensor.as_ref().map(SensorId::as_str),
                code,
                active,
                at.unix(),
                event_id
            ])?,
        None => conn
            .prepare_cached("UPDATE opcua_conditions SET active = 0, changed_at = ?2 WHERE condition = ?1")?
            .execute(params![condition, at.unix()])?,
    };
    Ok(())
}

/// Acknowledge (Part 9: AcknowledgeableConditionType's method i=9111) on `condition`,
/// naming the event acknowledged (its EventId, hex as stored) with a comment.
pub fn acknowledge_request(condition: NodeId, event_id: &str, comment: &str) -> async_opcua::types::CallMethodRequest {
    let bytes: Vec<u8> =
        (0..event_id.len() / 2).filter_map(|i| u8::from_str_radix(event_id.get(2 * i..2 * i + 2)?, 16).ok()).collect();
    async_opcua::types::CallMethodRequest {
        object_id: condition,
        method_id: NodeId::new(0, 9111u32),
        input_arguments: Some(vec![
            Variant::ByteString(ByteString::from(bytes)),
            Variant::LocalizedText(Box::new(async_opcua::types::LocalizedText::new("", comment))),
        ]),
    }
}

/// ConditionRefresh (Part 9): ConditionType (i=2782)'s method i=3875, with the
/// subscription's id.
pub fn refresh_request(subscription: u32) -> async_opcua::types::CallMethodRequest {
    async_opcua::types::CallMethodRequest {
        object_id: NodeId::new(0, 2782u32),
        method_id: NodeId::new(0, 3875u32),
        input_arguments: Some(vec![Variant::UInt32(subscription)]),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::Severity;

    fn limit_event(state: &str, active: bool) -> ConditionEvent {
        ConditionEvent {
            event_id: "0a0b".into(),
            condition: Some(NodeId::new(1, 1005u32)),
            condition_name: "TankLevelCondition".into(),
            source_name: "TankLevel".into(),
            active: Some(active),
            limit_state: state.into(),
            limits: [Some(0.9), Some(0.8), Some(0.2), None],
            severity: 700,
            ..ConditionEvent::default()
        }
    }

    #[test]
    fn a_limit_alarm_is_one_point_per_limit_and_a_move_between_them_clears_the_first() {
        let conn = Connection::open_in_memory().unwrap();
        conn.execute_batch(
            "CREATE TABLE opcua_conditions (condition TEXT PRIMARY KEY, asset_id TEXT NOT NULL, sensor_id TEXT,
             code TEXT NOT NULL, active INTEGER NOT NULL, changed_at INTEGER NOT NULL, event_id TEXT) STRICT;",
        )
        .unwrap();
        let cfg = OpcuaConfig::default();
        let source = Source { asset: AssetId::parse("Tank").unwrap(), sensor: SensorId::parse("Tank.TankLevel").ok() };
        let now = Timestamp::from_unix(1_800_000_000);
        let mut conditions = Conditions::default();
        let high = conditions.apply(&conn, &limit_event("High", true), "c1", source.clone(), now, &cfg).unwrap();
        assert_eq!(high.events.len(), 1);
        assert_eq!(
            (high.events[0].code.as_str(), high.events[0].transition, high.events[0].threshold),
            ("TANKLEVELCONDITION-H", Transition::Raised, Some(0.8))
        );
        assert_eq!(high.events[0].severity, Severity::High);
        let mut hh = limit_event("HighHigh", true);
        hh.event_id = "0c".into();
        let moved = conditions.apply(&conn, &hh, "c1", source.clone(), now, &cfg).unwrap();
        let got: Vec<(&str, Transition)> = moved.events.iter().map(|e| (e.code.as_str(), e.transition)).collect();
        assert_eq!(got, [("TANKLEVELCONDITION-H", Transition::Cleared), ("TANKLEVELCONDITION-HH", Transition::Raised)]);
        // A refresh that does not send the condition again clears it.
        conditions.refresh_started();
        let cleared = conditions.refresh_ended(&conn, now, &cfg).unwrap();
        let got: Vec<(&str, Transition)> = cleared.events.iter().map(|e| (e.code.as_str(), e.transition)).collect();
        assert_eq!(got, [("TANKLEVELCONDITION-HH", Transition::Cleared)]);
        // Acknowledged at the SCADA while inactive: the point it was last on.
        let mut acked = limit_event("", false);
        acked.acked = Some(true);
        let effect = conditions.apply(&conn, &acked, "c1", source.clone(), now, &cfg).unwrap();
        assert!(effect.events.is_empty());
        assert_eq!(effect.acknowledged, Some((source, "TANKLEVELCONDITION-HH".into())));
        let odd = ConditionEvent { condition_name: "Tank level_2 / Hi!".into(), ..ConditionEvent::default() };
        assert_eq!(odd.code(), "TANK-LEVEL-2-HI");
    }
}
