//! Sparkplug B: twinops as a host application beside the JSON ingest, so that the
//! gateways sites already run (Ignition, Kepware, HiveMQ Edge, N3uron, Node-RED) feed
//! the twin without a bridge.
//!
//! Messages arrive on the same MQTT connection and intake as JSON events, are decoded
//! here off the writer thread (`decode`), and applied in ingest's transaction
//! (`host::Host::apply`), so they keep its guarantees: acknowledged after the commit,
//! in arrival order, refusals kept as dead letters. What a birth certificate describes
//! enters the twin through the plant import's checks and audit (actor `sparkplug`);
//! the edge nodes' sessions (bdSeq, seq, aliases) are kept in the database with the
//! readings they resolve, so a restart resumes them.
//!
//! Architecture Invariant: the only message twinops sends towards an edge node is the
//! rebirth request (`Node Control/Rebirth`), protocol housekeeping that changes nothing
//! in the process, and `rebirth = false` turns it off.

pub mod edge;
pub mod host;
#[rustfmt::skip]
pub mod proto;
pub mod topic;

use prost::Message as _;
use serde::Deserialize;

use crate::domain::{DeadLetterReason, Severity, Timestamp};
pub use host::{Comm, Host, Outcome, SparkplugReading};
pub use proto::Payload;
pub use topic::{Kind, Topic};

/// `[sparkplug]` in `twinops.toml`.
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct SparkplugConfig {
    pub enabled: bool,
    /// The Sparkplug group ids to take; empty: every group on the broker.
    pub groups: Vec<String>,
    /// Our STATE topic is `spBv1.0/STATE/{host_id}`; gateways set to this primary host
    /// buffer their data while twinops is away.
    pub host_id: String,
    /// Publish STATE (retained, with a will saying offline).
    pub primary_host: bool,
    /// Ask an edge node to publish its births again (NCMD `Node Control/Rebirth`) after
    /// data before its birth, a sequence gap or an alias never born. Off for sites whose
    /// policy forbids any publish towards edge nodes.
    pub rebirth: bool,
    /// Births may add stations, assets and sensors the twin lacks. Off: the plant comes
    /// from `plant import`, and a metric with no sensor is dead-lettered.
    pub auto_register: bool,
    /// How the namespace maps onto the twin. Placeholders: `{group}`, `{edge_node}`,
    /// `{device}`, `{metric}` (the metric's name, `/` kept, characters ids do not allow
    /// written `_`), and in `tag`, `{asset}`.
    pub station: String,
    /// The asset of a device's metrics.
    pub asset: String,
    /// The asset of the edge node's own metrics.
    pub node_asset: String,
    pub tag: String,
    /// Sensors a birth adds raise their alarms from their limits (`limits`), or take
    /// them as SCADA alarm events (`scada`).
    pub alarm_source: String,
    /// The priority of the communication-loss alarm a death raises.
    pub comm_loss_priority: Severity,
}

impl Default for SparkplugConfig {
    fn default() -> Self {
        SparkplugConfig {
            enabled: false,
            groups: Vec::new(),
            host_id: "twinops".into(),
            primary_host: true,
            rebirth: true,
            auto_register: true,
            station: "{group}".into(),
            asset: "{device}".into(),
            node_asset: "{edge_node}".into(),
            tag: "{asset}/{metric}".into(),
            alarm_source: "limits".into(),
            comm_loss_priority: Severity::High,
        }
    }
}

impl SparkplugConfig {
    /// Checks what serde cannot: ids and templates.
    pub fn validate(&self) -> Result<(), String> {
        let level = |what: &str, v: &str| {
            if v.is_empty() || v.contains(['/', '+', '#']) {
                Err(format!("sparkplug.{what} '{v}' must be non-empty and hold no '/', '+' or '#'"))
            } else {
                Ok(())
            }
        };
        level("host_id", &self.host_id)?;
        for g in &self.groups {
            level("groups", g)?;
        }
        for (name, template, allowed) in [
            ("station", &self.station, &["group", "edge_node"][..]),
            ("asset", &self.asset, &["group", "edge_node", "device"][..]),
            ("node_asset", &self.node_asset, &["group", "edge_node"][..]),
            ("tag", &self.tag, &["group", "edge_node", "device", "metric", "asset"][..]),
        ] {
            check_template(name, template, allowed)?;
        }
        if !matches!(self.alarm_source.as_str(), "limits" | "scada") {
            return Err(format!("sparkplug.alarm_source '{}' must be limits or scada", self.alarm_source));
        }
        Ok(())
    }

    /// The topic filters ingest subscribes to for Sparkplug.
    pub fn filters(&self) -> Vec<String> {
        if self.enabled { topic::filters(&self.groups) } else { Vec::new() }
    }

    /// Our STATE topic.
    pub fn state_topic(&self) -> String {
        format!("{}/STATE/{}", topic::NAMESPACE, self.host_id)
    }
}

fn check_template(name: &str, template: &str, allowed: &[&str]) -> Result<(), String> {
    let mut rest = template;
    while let Some(open) = rest.find('{') {
        let close =
            rest[open..].find('}').ok_or_else(|| format!("sparkplug.{name}: '{template}' has a {{ without its }}"))?;
        let key = &rest[open + 1..open + close];
        if !allowed.contains(&key) {
            return Err(format!(
                "sparkplug.{name}: '{{{key}}}' is not a placeholder here; use {}",
                allowed.iter().map(|a| format!("{{{a}}}")).collect::<Vec<_>>().join(", ")
            ));
        }
        rest = &rest[open + close + 1..];
    }
    if template.trim().is_empty() {
        return Err(format!("sparkplug.{name} must not be empty"));
    }
    Ok(())
}

/// `template` with its placeholders filled, written as an id: characters ids do not
/// allow become `_` (a metric `Inputs/Pump Speed` is `Inputs/Pump_Speed`).
pub fn fill(template: &str, values: &[(&str, &str)]) -> String {
    let mut out = template.to_string();
    for (key, value) in values {
        out = out.replace(&format!("{{{key}}}"), value);
    }
    crate::domain::as_id(&out)
}

/// A Sparkplug message, decoded off the writer thread.
#[derive(Debug, Clone)]
pub struct Decoded {
    pub topic: Topic,
    pub payload: Payload,
}

/// Why a Sparkplug message (or one metric of it) was refused: the dead letter's reason
/// and detail.
#[derive(Debug, Clone, PartialEq)]
pub struct Refused {
    pub reason: DeadLetterReason,
    pub detail: String,
}

impl Refused {
    pub fn new(reason: DeadLetterReason, detail: impl Into<String>) -> Refused {
        Refused { reason, detail: detail.into() }
    }
}

/// Decodes a message on the `spBv1.0/` namespace: its topic, then its protobuf payload.
pub fn decode(topic: &str, bytes: &[u8]) -> Result<Decoded, Refused> {
    let topic = Topic::parse(topic).map_err(|e| Refused::new(DeadLetterReason::Malformed, e))?;
    if matches!(topic.kind, Kind::State | Kind::Command) {
        return Ok(Decoded { topic, payload: Payload::default() });
    }
    let payload = Payload::decode(bytes).map_err(|e| {
        Refused::new(
            DeadLetterReason::Malformed,
            format!(
                "{topic}: the payload ({} bytes) is not a Sparkplug B protobuf payload ({e}); check that the sender \
                 speaks Sparkplug B, not Sparkplug A or JSON",
                bytes.len()
            ),
        )
    })?;
    Ok(Decoded { topic, payload })
}

/// A metric's value as a reading: numbers and booleans (1 and 0). `Err` names the type
/// twinops does not store.
pub fn number(m: &proto::payload::Metric) -> Result<Option<f64>, &'static str> {
    use proto::payload::metric::Value;
    let datatype = m.datatype.unwrap_or(0);
    let name = data_type_name(datatype);
    if !matches!(datatype, 1..=11) {
        return Err(name);
    }
    if m.is_null == Some(true) {
        return Ok(None);
    }
    // Signed integers travel as two's complement in the unsigned fields.
    Ok(match (&m.value, datatype) {
        (Some(Value::IntValue(v)), 1) => Some(f64::from(*v as u8 as i8)),
        (Some(Value::IntValue(v)), 2) => Some(f64::from(*v as u16 as i16)),
        (Some(Value::IntValue(v)), 3) => Some(f64::from(*v as i32)),
        (Some(Value::IntValue(v)), _) => Some(f64::from(*v)),
        (Some(Value::LongValue(v)), 4) => Some(*v as i64 as f64),
        (Some(Value::LongValue(v)), _) => Some(*v as f64),
        (Some(Value::FloatValue(v)), _) => Some(f64::from(*v)),
        (Some(Value::DoubleValue(v)), _) => Some(*v),
        (Some(Value::BooleanValue(v)), _) => Some(if *v { 1.0 } else { 0.0 }),
        _ => None,
    })
}

/// The Sparkplug name of a data type code.
pub fn data_type_name(code: u32) -> &'static str {
    match proto::DataType::try_from(code as i32) {
        Ok(t) => t.as_str_name(),
        Err(_) => "an unknown type",
    }
}

/// A metric property as text or number (`engUnit`, `engLow`, a limit).
pub fn property<'a>(m: &'a proto::payload::Metric, key: &str) -> Option<&'a proto::payload::PropertyValue> {
    let set = m.properties.as_ref()?;
    let i = set.keys.iter().position(|k| k.eq_ignore_ascii_case(key))?;
    set.values.get(i).filter(|v| v.is_null != Some(true))
}

pub fn property_text<'a>(m: &'a proto::payload::Metric, key: &str) -> Option<&'a str> {
    match property(m, key)?.value.as_ref()? {
        proto::payload::property_value::Value::StringValue(s) => Some(s.as_str()),
        _ => None,
    }
}

pub fn property_number(m: &proto::payload::Metric, key: &str) -> Option<f64> {
    use proto::payload::property_value::Value;
    let v = property(m, key)?;
    let signed = matches!(v.r#type, Some(1..=4));
    match v.value.as_ref()? {
        Value::IntValue(i) if signed => Some(f64::from(*i as i32)),
        Value::IntValue(i) => Some(f64::from(*i)),
        Value::LongValue(l) if signed => Some(*l as i64 as f64),
        Value::LongValue(l) => Some(*l as f64),
        Value::FloatValue(f) => Some(f64::from(*f)),
        Value::DoubleValue(d) => Some(*d),
        Value::StringValue(s) => s.trim().parse().ok(),
        _ => None,
    }
    .filter(|n: &f64| n.is_finite())
}

/// The payload of a rebirth request to an edge node.
pub fn rebirth_request(now: Timestamp) -> Vec<u8> {
    use proto::payload::{Metric, metric::Value};
    Payload {
        timestamp: Some(now.unix() as u64 * 1000),
        metrics: vec![Metric {
            name: Some("Node Control/Rebirth".into()),
            timestamp: Some(now.unix() as u64 * 1000),
            datatype: Some(proto::DataType::Boolean as u32),
            value: Some(Value::BooleanValue(true)),
            ..Metric::default()
        }],
        ..Payload::default()
    }
    .encode_to_vec()
}

/// Our STATE (Sparkplug 3.0): `{"online": true|false, "timestamp": ms}`; the will
/// carries the same timestamp as the birth it ends.
pub fn state(online: bool, at_ms: u64) -> Vec<u8> {
    serde_json::json!({"online": online, "timestamp": at_ms}).to_string().into_bytes()
}

#[cfg(test)]
mod tests {
    use super::*;
    use proto::payload::{Metric, metric::Value};

    #[test]
    fn templates_are_checked_and_filled_as_ids() {
        let c = SparkplugConfig::default();
        assert_eq!(c.validate(), Ok(()));
        let bad = SparkplugConfig { tag: "{asset}/{metrc}".into(), ..SparkplugConfig::default() };
        assert!(bad.validate().unwrap_err().contains("'{metrc}' is not a placeholder"));
        let bad = SparkplugConfig { host_id: "a/b".into(), ..SparkplugConfig::default() };
        assert!(bad.validate().is_err());
        assert_eq!(
            fill("{asset}/{metric}", &[("asset", "PLC-3"), ("metric", "Inputs/Pump Speed (rpm)")]),
            "PLC-3/Inputs/Pump_Speed__rpm_"
        );
    }

    #[test]
    fn numbers_follow_the_data_type_and_others_are_named() {
        let m =
            |datatype: u32, value: Value| Metric { datatype: Some(datatype), value: Some(value), ..Metric::default() };
        assert_eq!(number(&m(1, Value::IntValue(0xFFFF_FFFF))), Ok(Some(-1.0)), "Int8 -1, sign-extended");
        assert_eq!(number(&m(1, Value::IntValue(0xFF))), Ok(Some(-1.0)), "Int8 -1, one byte");
        assert_eq!(number(&m(2, Value::IntValue(0xFFFF_8000))), Ok(Some(-32768.0)));
        assert_eq!(number(&m(3, Value::IntValue(-5i32 as u32))), Ok(Some(-5.0)));
        assert_eq!(number(&m(7, Value::IntValue(4_000_000_000))), Ok(Some(4e9)), "UInt32");
        assert_eq!(number(&m(4, Value::LongValue(-7i64 as u64))), Ok(Some(-7.0)));
        assert_eq!(number(&m(9, Value::FloatValue(1.5))), Ok(Some(1.5)));
        assert_eq!(number(&m(10, Value::DoubleValue(2.25))), Ok(Some(2.25)));
        assert_eq!(number(&m(11, Value::BooleanValue(true))), Ok(Some(1.0)));
        assert_eq!(number(&m(12, Value::StringValue("x".into()))), Err("String"));
        assert_eq!(number(&Metric { datatype: Some(10), is_null: Some(true), ..Metric::default() }), Ok(None));
    }

    #[test]
    fn random_bytes_are_refused_with_a_reason() {
        let err = decode("spBv1.0/G/NDATA/E", &[0xff, 0xff, 0xff, 0x01, 0x02]).unwrap_err();
        assert_eq!(err.reason, "malformed");
        assert!(err.detail.contains("not a Sparkplug B protobuf payload"), "{}", err.detail);
        assert_eq!(decode("spBv1.0/G/NDATA", b"").unwrap_err().reason, "malformed");
    }
}
