//! A Sparkplug B edge node's side, for the simulator and the benchmark: births, data by
//! alias and the death, with `seq` and `bdSeq` kept as the specification asks. (The
//! interoperability tests use Eclipse Tahu's client instead, not this.)

use prost::Message as _;

use super::proto::payload::{Metric, PropertySet, PropertyValue, metric, property_value};
use super::proto::{DataType, Payload};
use super::topic::NAMESPACE;

/// A metric as a birth describes it.
#[derive(Debug, Clone)]
pub struct MetricSpec {
    pub name: String,
    pub alias: u64,
    pub value: f64,
    pub unit: String,
    /// ll, l, h, hh, as properties `lolo`, `lo`, `hi`, `hihi`.
    pub limits: [Option<f64>; 4],
}

/// One edge node: its topics, `bdSeq` (one per connection) and `seq` (0-255 over every
/// message but the death).
pub struct EdgeNode {
    pub group: String,
    pub node: String,
    bd_seq: u64,
    seq: u64,
}

impl EdgeNode {
    pub fn new(group: &str, node: &str, bd_seq: u64) -> EdgeNode {
        EdgeNode { group: group.into(), node: node.into(), bd_seq, seq: 0 }
    }

    fn topic(&self, kind: &str, device: Option<&str>) -> String {
        match device {
            Some(d) => format!("{NAMESPACE}/{}/{kind}/{}/{d}", self.group, self.node),
            None => format!("{NAMESPACE}/{}/{kind}/{}", self.group, self.node),
        }
    }

    fn next_seq(&mut self) -> u64 {
        let seq = self.seq;
        self.seq = (self.seq + 1) % 256;
        seq
    }

    fn bd_seq_metric(&self) -> Metric {
        Metric {
            name: Some("bdSeq".into()),
            datatype: Some(DataType::Int64 as u32),
            value: Some(metric::Value::LongValue(self.bd_seq)),
            ..Metric::default()
        }
    }

    /// The NBIRTH: it starts the sequence at 0.
    pub fn node_birth(&mut self, at_ms: u64) -> (String, Vec<u8>) {
        self.seq = 0;
        let rebirth = Metric {
            name: Some("Node Control/Rebirth".into()),
            datatype: Some(DataType::Boolean as u32),
            value: Some(metric::Value::BooleanValue(false)),
            ..Metric::default()
        };
        let payload = Payload {
            timestamp: Some(at_ms),
            seq: Some(self.next_seq()),
            metrics: vec![self.bd_seq_metric(), rebirth],
            ..Payload::default()
        };
        (self.topic("NBIRTH", None), payload.encode_to_vec())
    }

    /// The NDEATH, as the broker sends it for us: its will.
    pub fn node_death(&self) -> (String, Vec<u8>) {
        let payload = Payload { metrics: vec![self.bd_seq_metric()], ..Payload::default() };
        (self.topic("NDEATH", None), payload.encode_to_vec())
    }

    pub fn device_birth(&mut self, device: &str, metrics: &[MetricSpec], at_ms: u64) -> (String, Vec<u8>) {
        let metrics = metrics
            .iter()
            .map(|m| {
                let mut keys = vec!["engUnit".to_string()];
                let mut values = vec![PropertyValue {
                    r#type: Some(DataType::String as u32),
                    is_null: None,
                    value: Some(property_value::Value::StringValue(m.unit.clone())),
                }];
                for (key, limit) in ["lolo", "lo", "hi", "hihi"].iter().zip(m.limits) {
                    if let Some(v) = limit {
                        keys.push(key.to_string());
                        values.push(PropertyValue {
                            r#type: Some(DataType::Double as u32),
                            is_null: None,
                            value: Some(property_value::Value::DoubleValue(v)),
                        });
                    }
                }
                Metric {
                    name: Some(m.name.clone()),
                    alias: Some(m.alias),
                    timestamp: Some(at_ms),
                    datatype: Some(DataType::Double as u32),
                    properties: Some(PropertySet { keys, values }),
                    value: Some(metric::Value::DoubleValue(m.value)),
                    ..Metric::default()
                }
            })
            .collect();
        let payload = Payload { timestamp: Some(at_ms), seq: Some(self.next_seq()), metrics, ..Payload::default() };
        (self.topic("DBIRTH", Some(device)), payload.encode_to_vec())
    }

    /// A DDATA of `(alias, value, time in ms)`.
    pub fn device_data(&mut self, device: &str, values: &[(u64, f64, u64)], at_ms: u64) -> (String, Vec<u8>) {
        let metrics = values
            .iter()
            .map(|&(alias, value, ms)| Metric {
                alias: Some(alias),
                timestamp: Some(ms),
                datatype: Some(DataType::Double as u32),
                value: Some(metric::Value::DoubleValue(value)),
                ..Metric::default()
            })
            .collect();
        let payload = Payload { timestamp: Some(at_ms), seq: Some(self.next_seq()), metrics, ..Payload::default() };
        (self.topic("DDATA", Some(device)), payload.encode_to_vec())
    }
}
