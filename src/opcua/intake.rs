//! Notifications into the twin, inside a writer transaction: values and condition
//! events become the inbound contract's JSON events and go through ingest's
//! `apply_batch` (its time checks, duplicate rule, limit alarming, dead letters), so an
//! OPC UA value is stored exactly as the same value on MQTT would be. What the contract
//! has no words for is done here: a bad or uncertain value marks its sensor stale, an
//! acknowledgement at the SCADA acknowledges the twin's alarm.

use std::collections::HashSet;

use async_opcua::types::{DataValue, NodeId, StatusCode, Variant};
use rusqlite::{Connection, OptionalExtension, params};

use super::OpcuaConfig;
use super::conditions::{ConditionEvent, Conditions, Read, Source};
use super::node::node_ref;
use crate::alarms::Applied;
use crate::domain::{AlarmEvent, AssetId, DeadLetterReason, NodeRef, SensorId, Timestamp, Transition};
use crate::ingest::payload::{MAX_BATCH, alarm_json, reading_json};
use crate::ingest::{self, IngestPolicy, Message, MessageEffect, Rejected, dead_letters};
use crate::plant::{self, Mode, Origin, PlantModel, Site, StationRow};
use crate::store::StoreError;

/// The topics OPC UA events are dead-lettered under (and replayed from).
pub const VALUES_TOPIC: &str = "opcua/values";
pub const EVENTS_TOPIC: &str = "opcua/events";

/// The sensor a monitored item's values go to; its client handle is its index + 1.
#[derive(Debug, Clone)]
pub struct Target {
    pub sensor: SensorId,
    pub node: NodeRef,
}

/// What one writer job did.
#[derive(Debug, Default)]
pub struct Outcome {
    pub readings: usize,
    pub bad: usize,
    pub dead_letters: usize,
    /// New occurrences raised: triage is woken.
    pub raised: bool,
}

impl Outcome {
    fn add(&mut self, effects: &[MessageEffect]) {
        for e in effects {
            self.readings += e.readings;
            self.dead_letters += e.dead_letters;
            self.raised |= e.alarms.iter().any(|a| matches!(a, Applied::Raised { .. }));
        }
    }
}

/// The value of a monitored item as a reading's number: numbers, and booleans as 0/1.
/// `Err` names the type of anything else.
fn number(v: &Variant) -> Result<Option<f64>, String> {
    match v {
        Variant::Empty => Ok(None),
        Variant::Boolean(b) => Ok(Some(f64::from(u8::from(*b)))),
        v if v.is_numeric() => Ok(v.as_f64()),
        v => Err(format!("{:?}", v.type_id())),
    }
}

/// Data changes, each `(client handle, value)`, into readings.
pub fn values(
    conn: &Connection,
    targets: &[Target],
    items: &[(u32, DataValue)],
    unsupported: &mut HashSet<SensorId>,
    received: Timestamp,
    policy: &IngestPolicy,
) -> Result<Outcome, StoreError> {
    let mut out = Outcome::default();
    let mut events = Vec::new();
    let mut good: HashSet<&SensorId> = HashSet::new();
    for (handle, dv) in items {
        let Some(target) = (*handle as usize).checked_sub(1).and_then(|i| targets.get(i)) else { continue };
        let at = dv.source_timestamp.as_ref().or(dv.server_timestamp.as_ref());
        let at_ms = at.map_or(received.unix() * 1000, |t| t.as_chrono().timestamp_millis());
        let status = dv.status.unwrap_or(StatusCode::Good);
        if !status.is_good() {
            out.bad += 1;
            crate::metrics::count("twinops_opcua_bad_values_total", &[], 1.0);
            conn.prepare_cached(
                "UPDATE sensors SET stale_since = ?2 WHERE id = ?1 COLLATE NOCASE AND stale_since IS NULL",
            )?
            .execute(params![target.sensor.as_str(), at_ms.div_euclid(1000)])?;
            continue;
        }
        match dv.value.as_ref().map_or(Ok(None), number) {
            Ok(Some(value)) => {
                events.push(reading_json(&target.sensor, at_ms, value));
                good.insert(&target.sensor);
            }
            Ok(None) => {}
            Err(type_name) if unsupported.insert(target.sensor.clone()) => {
                let detail = format!(
                    "sensor {} (node {}) has a value of type {type_name}; twinops stores numbers and booleans as \
                     readings, so its values are not kept (said once per connection): clear opcua_node for it, or map a numeric node",
                    target.sensor, target.node
                );
                let payload = serde_json::json!({"sensor_id": target.sensor.as_str(), "node": target.node.to_string(), "type": type_name});
                let rejected = Rejected { reason: DeadLetterReason::Unsupported, detail, event: String::new() };
                dead_letters::write(conn, VALUES_TOPIC, payload.to_string().as_bytes(), &rejected, received)?;
                out.dead_letters += 1;
            }
            Err(_) => {}
        }
    }
    for sensor in good {
        conn.prepare_cached(
            "UPDATE sensors SET stale_since = NULL WHERE id = ?1 COLLATE NOCASE AND stale_since IS NOT NULL",
        )?
        .execute([sensor.as_str()])?;
    }
    out.add(&through_ingest(conn, VALUES_TOPIC, events, received, policy)?);
    Ok(out)
}

/// Contract events through ingest, a message per thousand.
fn through_ingest(
    conn: &Connection,
    topic: &str,
    events: Vec<serde_json::Value>,
    received: Timestamp,
    policy: &IngestPolicy,
) -> Result<Vec<MessageEffect>, StoreError> {
    let messages: Vec<Message> = events
        .chunks(MAX_BATCH)
        .map(|chunk| Message::parse(topic.to_string(), serde_json::to_vec(chunk).expect("JSON values serialize")))
        .collect();
    if messages.is_empty() {
        return Ok(Vec::new());
    }
    ingest::apply_batch(conn, &messages, received, policy.clone())
}

/// Event notifications (each the event filter's fields) into alarm transitions and
/// acknowledgements, in order.
pub fn events(
    conn: &Connection,
    cfg: &OpcuaConfig,
    state: &mut Conditions,
    fields: Vec<Vec<Variant>>,
    uris: &[String],
    received: Timestamp,
    policy: &IngestPolicy,
) -> Result<Outcome, StoreError> {
    let mut out = Outcome::default();
    for event in fields {
        let alarms = match ConditionEvent::read(&event) {
            Read::Other => continue,
            Read::RefreshStart => {
                state.refresh_started();
                continue;
            }
            Read::RefreshEnd => state.refresh_ended(conn, received, cfg)?.events,
            Read::Condition(e) => {
                let Some(condition) = &e.condition else { continue };
                let key = node_ref(condition, uris).map_or_else(|| condition.to_string(), |n| n.to_string());
                let by_uri = |n: &Option<NodeId>| n.as_ref().and_then(|n| node_ref(n, uris));
                let source = source(conn, cfg, by_uri(&e.input).as_ref(), by_uri(&e.source).as_ref())?;
                let effect = state.apply(conn, &e, &key, source, received, cfg)?;
                let applied = through_ingest(
                    conn,
                    EVENTS_TOPIC,
                    effect.events.iter().map(alarm_json).collect(),
                    received,
                    policy,
                )?;
                out.add(&applied);
                if let Some((at, code)) = effect.acknowledged {
                    let sensor = at.sensor.as_ref().map(SensorId::as_str);
                    crate::alarms::acknowledged_at_source(conn, at.asset.as_str(), sensor, &code, "opcua", received)?;
                }
                continue;
            }
        };
        out.add(&through_ingest(conn, EVENTS_TOPIC, alarms.iter().map(alarm_json).collect(), received, policy)?);
    }
    Ok(out)
}

/// Where a condition lands in the twin. Servers name the watched variable in one of two
/// places: as the SourceNode (node-opcua), or as the InputNode with the equipment object
/// as the SourceNode (Kepware, Ignition, asyncua). So: the sensor with the InputNode's
/// node, else the sensor with the SourceNode's, else the asset whose object the
/// SourceNode is, else the server's own asset.
fn source(
    conn: &Connection,
    cfg: &OpcuaConfig,
    input: Option<&NodeRef>,
    source: Option<&NodeRef>,
) -> rusqlite::Result<Source> {
    let sensor = |n: &NodeRef| -> rusqlite::Result<Option<Source>> {
        let found: Option<(String, String)> = conn
            .prepare_cached("SELECT id, asset_id FROM sensors WHERE opcua_node = ?1 AND retired_at IS NULL")?
            .query_row([n.to_string()], |r| Ok((r.get(0)?, r.get(1)?)))
            .optional()?;
        Ok(found.and_then(|(sensor, asset)| {
            Some(Source { asset: AssetId::parse(&asset).ok()?, sensor: SensorId::parse(&sensor).ok() })
        }))
    };
    for node in [input, source].into_iter().flatten() {
        if let Some(found) = sensor(node)? {
            return Ok(found);
        }
    }
    if let Some(node) = source {
        let asset: Option<String> = conn
            .prepare_cached("SELECT id FROM assets WHERE opcua_node = ?1 AND retired_at IS NULL")?
            .query_row([node.to_string()], |r| r.get(0))
            .optional()?;
        if let Some(asset) = asset.and_then(|a| AssetId::parse(&a).ok()) {
            return Ok(Source { asset, sensor: None });
        }
    }
    Ok(Source { asset: AssetId::parse(&cfg.server_asset).expect("validated"), sensor: None })
}

/// The server's asset (and its station), added when the twin lacks it, audited as
/// `opcua`: communication loss and conditions whose source is no sensor go on it.
pub fn ensure_server_asset(conn: &Connection, cfg: &OpcuaConfig) -> Result<Result<(), String>, StoreError> {
    let exists = |sql: &str, id: &str| -> rusqlite::Result<bool> {
        Ok(conn.prepare_cached(sql)?.query_row([id], |_| Ok(())).optional()?.is_some())
    };
    if exists("SELECT 1 FROM assets WHERE id = ?1 COLLATE NOCASE", &cfg.server_asset)? {
        return Ok(Ok(()));
    }
    let at = Origin { file: format!("opcua {}", cfg.endpoint), line: 0 };
    let mut model = PlantModel::default();
    if conn.prepare_cached("SELECT 1 FROM sites")?.query_row([], |_| Ok(())).optional()?.is_none() {
        let site = Site { id: "opcua".into(), name: format!("OPC UA {}", cfg.endpoint), timezone: "UTC".into() };
        model.site = Some((site, at.clone()));
    }
    if !exists("SELECT 1 FROM stations WHERE id = ?1 COLLATE NOCASE", &cfg.station)? {
        model.stations.push(StationRow {
            id: cfg.station.clone(),
            name: format!("OPC UA {}", cfg.endpoint),
            at: at.clone(),
        });
    }
    let fields = [
        ("id", cfg.server_asset.clone()),
        ("station", cfg.station.clone()),
        ("kind", "opcua_server".into()),
        ("name", format!("OPC UA server {}", cfg.endpoint)),
    ];
    if let Err(problems) = model.push_asset(at.clone(), &fields) {
        return Ok(Err(plant::ImportError(problems).to_string()));
    }
    Ok(plant::import_within(conn, &model, Mode::Partial, "opcua", &at.file)?.map(|_| ()).map_err(|e| e.to_string()))
}

/// Communication loss with the server, raised on its asset (and its sensors marked
/// stale) or cleared, through the alarm lifecycle like a SCADA's.
pub fn comm_loss(
    conn: &Connection,
    cfg: &OpcuaConfig,
    raised: bool,
    since: Timestamp,
    received: Timestamp,
    policy: &IngestPolicy,
) -> Result<Outcome, StoreError> {
    if raised {
        conn.prepare_cached(
            "UPDATE sensors SET stale_since = ?1 WHERE opcua_node IS NOT NULL AND stale_since IS NULL",
        )?
        .execute([since.unix()])?;
    }
    let event = AlarmEvent {
        event_id: format!("opcua:{}:COMM_LOSS:{}{}", cfg.endpoint, since.unix(), if raised { "" } else { ":clear" }),
        asset_id: AssetId::parse(&cfg.server_asset).expect("validated"),
        sensor_id: None,
        code: "COMM_LOSS".into(),
        severity: cfg.comm_loss_priority,
        transition: if raised { Transition::Raised } else { Transition::Cleared },
        value: None,
        threshold: None,
        time: if raised { since } else { received },
        millis: 0,
        message: if raised {
            format!(
                "Communication lost with OPC UA server {}: its sensors' readings are stale until it is back",
                cfg.endpoint
            )
        } else {
            format!("OPC UA server {} is back", cfg.endpoint)
        },
    };
    // Not through the contract's JSON: COMM_LOSS is the twin's own code (Sparkplug's
    // deaths raise it too), not one a SCADA sends.
    let mut out = Outcome::default();
    match crate::alarms::apply(conn, &event, None, received, policy.queue)? {
        Ok(applied) => out.raised = matches!(applied, Applied::Raised { .. }),
        Err(refusal) if raised => {
            tracing::warn!(stage = "opcua", event = %event.event_id, %refusal, "the communication-loss alarm did not apply")
        }
        Err(_) => {}
    }
    Ok(out)
}

/// A gap the server could no longer fill (Republish refused): recorded in the audit
/// log, naming the subscription and the missing sequence numbers.
pub fn gap(conn: &Connection, subscription: &str, missing: (u32, u32), at: Timestamp) -> rusqlite::Result<()> {
    let detail = format!(
        "OPC UA subscription {subscription}: notifications {}..={} lost (the server no longer held them for Republish); {}",
        missing.0,
        missing.1,
        if subscription == "values" { "the values were read again" } else { "a ConditionRefresh was asked" }
    );
    conn.prepare_cached("INSERT INTO audit_log (at, actor, action, detail) VALUES (?1, 'opcua', 'opcua_gap', ?2)")?
        .execute(params![at.unix(), detail])?;
    Ok(())
}
