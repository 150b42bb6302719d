//! The host application's side of a Sparkplug session, applied in ingest's
//! transaction: births register what they describe and remember each metric's alias,
//! data resolve to readings, deaths mark readings stale and raise communication loss.
//!
//! Sessions are rows (`sparkplug_nodes`, `sparkplug_devices`, `sparkplug_metrics`),
//! written with the readings they resolve: a batch that rolls back takes its session
//! changes with it, and a restarted daemon resolves the aliases of data the broker
//! kept for it. [`Host`] caches them for one transaction.

use std::collections::HashMap;
use std::sync::Arc;

use rusqlite::{Connection, OptionalExtension, params};

use super::proto::payload::Metric;
use super::{Decoded, Kind, Refused, SparkplugConfig, Topic, fill, number, property_number, property_text};
use crate::domain::{AssetId, DeadLetterReason, SensorId, Timestamp};
use crate::plant::{self, Mode, Origin, PlantModel, Site, StationRow};
use crate::store::StoreError;

/// A reading a Sparkplug metric gave.
#[derive(Debug, Clone, PartialEq)]
pub struct SparkplugReading {
    pub sensor: SensorId,
    pub time: Timestamp,
    /// The milliseconds past `time`'s second, as Sparkplug stamps them.
    pub millis: u16,
    pub value: f64,
    /// Sent by store-and-forward: stored, never evaluated for live alarms.
    pub historical: bool,
}

/// Communication loss on an asset, raised by a death, cleared by the next birth.
#[derive(Debug, Clone, PartialEq)]
pub struct Comm {
    pub asset: AssetId,
    pub raised: bool,
    pub event_id: String,
    pub time: Timestamp,
    pub message: String,
}

/// What one Sparkplug message asks of ingest.
#[derive(Debug, Default)]
pub struct Outcome {
    pub readings: Vec<SparkplugReading>,
    pub comm: Vec<Comm>,
    /// Refusals, each a dead letter with the message's payload.
    pub refused: Vec<Refused>,
    /// Null values and bad quality, skipped.
    pub skipped: usize,
    /// The NCMD topic of a rebirth request to send once this is committed.
    pub rebirth: Option<String>,
}

/// The sensor a metric's values go to, as its birth registered it: none for
/// housekeeping and types not stored.
type Born = Option<SensorId>;

/// A metric of a birth, as it is registered.
struct Row<'m> {
    name: String,
    alias: Option<u64>,
    datatype: u32,
    /// Its sensor, when its values are stored.
    sensor: Option<SensorId>,
    metric: Option<&'m Metric>,
}

/// An edge node's session, as stored.
#[derive(Debug, Default)]
struct Node {
    bd_seq: Option<i64>,
    seq: i64,
    online: bool,
    aliases: HashMap<u64, Born>,
    /// By (device, metric name); device "" for the node's own.
    names: HashMap<(String, String), Born>,
    /// Devices born in this session, with their asset.
    devices: HashMap<String, Option<AssetId>>,
}

/// The host application for one transaction.
pub struct Host {
    rules: Arc<SparkplugConfig>,
    nodes: HashMap<(String, String), Node>,
}

/// Metrics that are protocol housekeeping, not measurements.
fn housekeeping(name: &str) -> bool {
    name == "bdSeq" || name.starts_with("Node Control/") || name.starts_with("Device Control/")
}

/// A metric's time (ms since the epoch), else the payload's, else the receipt.
fn time_of(ms: Option<u64>, received: Timestamp) -> Timestamp {
    time_ms_of(ms, received).0
}

/// The same, with its milliseconds past the second.
fn time_ms_of(ms: Option<u64>, received: Timestamp) -> (Timestamp, u16) {
    ms.map_or((received, 0), |ms| (Timestamp::from_unix((ms / 1000) as i64), (ms % 1000) as u16))
}

impl Host {
    pub fn new(rules: Arc<SparkplugConfig>) -> Host {
        Host { rules, nodes: HashMap::new() }
    }

    /// Applies one message: what ingest must then store, raise or refuse.
    pub fn apply(&mut self, conn: &Connection, d: &Decoded, received: Timestamp) -> Result<Outcome, StoreError> {
        let mut out = Outcome::default();
        crate::metrics::count("twinops_sparkplug_messages_total", &[("type", d.topic.kind.as_str())], 1.0);
        match d.topic.kind {
            Kind::State | Kind::Command => {}
            Kind::NBirth => self.node_birth(conn, d, received, &mut out)?,
            Kind::NDeath => self.node_death(conn, d, received, &mut out)?,
            Kind::DBirth | Kind::DData | Kind::DDeath | Kind::NData => {
                if !self.node(conn, &d.topic)?.online {
                    out.refused.push(Refused::new(
                        DeadLetterReason::NotBorn,
                        format!(
                            "{}: edge node {}/{} has no session (no NBIRTH since it connected, or it died); a rebirth was requested",
                            d.topic, d.topic.group, d.topic.edge_node
                        ),
                    ));
                    self.ask_rebirth(&d.topic, &mut out);
                    return Ok(out);
                }
                self.sequence(conn, d, &mut out)?;
                match d.topic.kind {
                    Kind::DBirth => self.device_birth(conn, d, received, &mut out)?,
                    Kind::DDeath => self.device_death(conn, d, received, &mut out)?,
                    _ => self.data(d, received, &mut out),
                }
            }
        }
        Ok(out)
    }

    fn ask_rebirth(&self, topic: &Topic, out: &mut Outcome) {
        if self.rules.rebirth {
            out.rebirth = Some(topic.ncmd());
        }
    }

    /// The edge node's session, read from the database once per transaction.
    fn node(&mut self, conn: &Connection, topic: &Topic) -> Result<&mut Node, StoreError> {
        let key = (topic.group.clone(), topic.edge_node.clone());
        if !self.nodes.contains_key(&key) {
            let node = load(conn, &key.0, &key.1)?;
            self.nodes.insert(key.clone(), node);
        }
        Ok(self.nodes.get_mut(&key).expect("inserted above"))
    }

    /// Checks `seq` (0-255, wrapping) against the last one; a gap asks for a rebirth.
    /// The data is kept either way: a gap means something was lost, not that this is wrong.
    fn sequence(&mut self, conn: &Connection, d: &Decoded, out: &mut Outcome) -> Result<(), StoreError> {
        let node = self.node(conn, &d.topic)?;
        let expected = (node.seq + 1) % 256;
        let got = d.payload.seq.map(|s| s as i64);
        if let Some(seq) = got {
            node.seq = seq % 256;
        }
        conn.prepare_cached("UPDATE sparkplug_nodes SET seq = ?3 WHERE group_id = ?1 AND edge_node = ?2")?
            .execute(params![d.topic.group, d.topic.edge_node, node.seq])?;
        if got != Some(expected) {
            crate::metrics::count("twinops_sparkplug_sequence_gaps_total", &[], 1.0);
            tracing::warn!(stage = "ingest", sender = %d.topic.sender(), expected, got = ?got,
                "Sparkplug sequence gap: a message was lost or reordered; asking the edge node to rebirth");
            self.ask_rebirth(&d.topic, out);
        }
        Ok(())
    }

    fn node_birth(
        &mut self,
        conn: &Connection,
        d: &Decoded,
        received: Timestamp,
        out: &mut Outcome,
    ) -> Result<(), StoreError> {
        let t = &d.topic;
        let bd_seq = bd_seq(&d.payload);
        let now = received.unix();
        // A new session: the old aliases and device births are void.
        conn.prepare_cached("DELETE FROM sparkplug_metrics WHERE group_id = ?1 AND edge_node = ?2")?
            .execute(params![t.group, t.edge_node])?;
        conn.prepare_cached("UPDATE sparkplug_devices SET online = 0 WHERE group_id = ?1 AND edge_node = ?2")?
            .execute(params![t.group, t.edge_node])?;
        let seq = d.payload.seq.unwrap_or(0) as i64 % 256;
        conn.prepare_cached(
            "INSERT INTO sparkplug_nodes (group_id, edge_node, bd_seq, seq, online, changed_at) VALUES (?1, ?2, ?3, ?4, 1, ?5)
             ON CONFLICT (group_id, edge_node) DO UPDATE SET bd_seq = excluded.bd_seq, seq = excluded.seq, online = 1,
                 changed_at = excluded.changed_at",
        )?
        .execute(params![t.group, t.edge_node, bd_seq, seq, now])?;
        let node = Node { bd_seq, seq, online: true, ..Node::default() };
        self.nodes.insert((t.group.clone(), t.edge_node.clone()), node);
        let asset_id = fill(&self.rules.node_asset, &[("group", &t.group), ("edge_node", &t.edge_node)]);
        self.birth(conn, d, &asset_id, received, out)
    }

    fn device_birth(
        &mut self,
        conn: &Connection,
        d: &Decoded,
        received: Timestamp,
        out: &mut Outcome,
    ) -> Result<(), StoreError> {
        let t = &d.topic;
        conn.prepare_cached("DELETE FROM sparkplug_metrics WHERE group_id = ?1 AND edge_node = ?2 AND device = ?3")?
            .execute(params![t.group, t.edge_node, t.device])?;
        let node = self.node(conn, t)?;
        node.names.retain(|(device, _), _| device != &t.device);
        let asset_id =
            fill(&self.rules.asset, &[("group", &t.group), ("edge_node", &t.edge_node), ("device", &t.device)]);
        self.birth(conn, d, &asset_id, received, out)
    }

    /// What node and device births share: register the metrics (through the plant
    /// import when births may add to the twin), remember their aliases, clear the
    /// staleness and communication loss a death left, and store the values born.
    fn birth(
        &mut self,
        conn: &Connection,
        d: &Decoded,
        asset_id: &str,
        received: Timestamp,
        out: &mut Outcome,
    ) -> Result<(), StoreError> {
        let t = &d.topic;
        let measured = d.payload.metrics.iter().any(|m| m.name.as_deref().is_some_and(|n| !housekeeping(n)));
        let asset = match AssetId::parse(asset_id) {
            Ok(a) => Some(a),
            Err(e) if measured => {
                out.refused.push(Refused::new(
                    DeadLetterReason::Invalid,
                    format!("{t}: the asset id this birth maps to is not valid ({e}); change sparkplug.asset or sparkplug.node_asset"),
                ));
                None
            }
            Err(_) => None,
        };
        let mut rows = self.rows(d, asset_id, asset.is_some(), out);
        if let Some(asset) = &asset
            && rows.iter().any(|r| r.sensor.is_some())
        {
            let sensors: Vec<(&SensorId, &Metric)> =
                rows.iter().filter_map(|r| Some((r.sensor.as_ref()?, r.metric?))).collect();
            if self.rules.auto_register {
                if let Err(problems) = self.register(conn, t, asset, &sensors)? {
                    out.refused.push(Refused::new(
                        DeadLetterReason::Invalid,
                        format!("{t}: the birth does not fit the twin: {problems}"),
                    ));
                    for r in &mut rows {
                        r.sensor = None;
                    }
                }
            } else {
                for (id, _) in &sensors {
                    if !exists(conn, "SELECT 1 FROM sensors WHERE id = ?1 COLLATE NOCASE", [id.as_str()])? {
                        out.refused.push(Refused::new(
                            DeadLetterReason::UnknownSensor,
                            format!("{t}: no sensor {id} in the twin and sparkplug.auto_register is off: add it with `twinops plant import`, or turn auto_register on"),
                        ));
                    }
                }
            }
        }
        let asset = self.remember(conn, t, &rows, asset, received)?;
        for sensor in rows.iter().filter_map(|r| r.sensor.as_ref()) {
            conn.prepare_cached(
                "UPDATE sensors SET stale_since = NULL WHERE id = ?1 COLLATE NOCASE AND stale_since IS NOT NULL",
            )?
            .execute([sensor.as_str()])?;
        }
        let born_at = time_of(d.payload.timestamp, received);
        if let Some(asset) = asset {
            out.comm.push(Comm {
                asset,
                raised: false,
                event_id: format!(
                    "sparkplug:{}:COMM_LOSS:clear:{}",
                    t.sender(),
                    d.payload.timestamp.unwrap_or(received.unix() as u64 * 1000)
                ),
                time: born_at,
                message: format!("Sparkplug {} is back ({})", t.sender(), t.kind.as_str()),
            });
        }
        // The values born are readings like any other.
        for r in &rows {
            if let (Some(sensor), Some(m)) = (&r.sensor, r.metric) {
                self.reading(sensor, m, d.payload.timestamp, received, out);
            }
        }
        Ok(())
    }

    /// A birth's metrics as they are registered, refusing (into `out`) those without a
    /// name, of a type not stored, or mapping to an invalid tag. Without sensors (no
    /// valid asset), every metric is recorded for its alias only.
    fn rows<'m>(&self, d: &'m Decoded, asset_id: &str, with_sensors: bool, out: &mut Outcome) -> Vec<Row<'m>> {
        let t = &d.topic;
        let mut rows: Vec<Row> = Vec::new();
        for m in &d.payload.metrics {
            let Some(name) = m.name.clone() else {
                out.refused.push(Refused::new(
                    DeadLetterReason::Invalid,
                    format!("{t}: a metric in a birth has no name (alias {:?})", m.alias),
                ));
                continue;
            };
            let datatype = m.datatype.unwrap_or(0);
            if housekeeping(&name) || !with_sensors {
                rows.push(Row { name, alias: m.alias, datatype, sensor: None, metric: None });
                continue;
            }
            if let Err(type_name) = number(m) {
                out.refused.push(Refused::new(
                    DeadLetterReason::Unsupported,
                    format!("{t}: metric '{name}' is of type {type_name}; twinops stores numbers and booleans as readings, so its values are not kept"),
                ));
                rows.push(Row { name, alias: m.alias, datatype, sensor: None, metric: None });
                continue;
            }
            let tag = fill(
                &self.rules.tag,
                &[
                    ("group", &t.group),
                    ("edge_node", &t.edge_node),
                    ("device", &t.device),
                    ("metric", &name),
                    ("asset", asset_id),
                ],
            );
            match SensorId::parse(&tag) {
                Ok(id) => rows.push(Row { name, alias: m.alias, datatype, sensor: Some(id), metric: Some(m) }),
                Err(e) => {
                    out.refused.push(Refused::new(
                        DeadLetterReason::Invalid,
                        format!("{t}: metric '{name}' maps to a tag that is not valid ({e}); change sparkplug.tag"),
                    ));
                    rows.push(Row { name, alias: m.alias, datatype, sensor: None, metric: None });
                }
            }
        }
        rows
    }

    /// Records the born metrics in the session (rows and cache) and the device as
    /// online; returns its asset when it has sensors.
    fn remember(
        &mut self,
        conn: &Connection,
        t: &Topic,
        rows: &[Row],
        asset: Option<AssetId>,
        received: Timestamp,
    ) -> Result<Option<AssetId>, StoreError> {
        let mut insert = conn.prepare_cached(
            "INSERT OR REPLACE INTO sparkplug_metrics (group_id, edge_node, device, name, alias, datatype, sensor_id)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
        )?;
        let node = self.nodes.get_mut(&(t.group.clone(), t.edge_node.clone())).expect("born above");
        for r in rows {
            insert.execute(params![
                t.group,
                t.edge_node,
                t.device,
                r.name,
                r.alias.map(|a| a as i64),
                r.datatype,
                r.sensor.as_ref().map(SensorId::as_str)
            ])?;
            let born: Born = r.sensor.clone();
            if let Some(a) = r.alias {
                node.aliases.insert(a, born.clone());
            }
            node.names.insert((t.device.clone(), r.name.clone()), born);
        }
        let has_sensors = rows.iter().any(|r| r.sensor.is_some());
        let asset = asset.filter(|_| has_sensors);
        node.devices.insert(t.device.clone(), asset.clone());
        conn.prepare_cached(
            "INSERT INTO sparkplug_devices (group_id, edge_node, device, asset_id, online, changed_at) VALUES (?1, ?2, ?3, ?4, 1, ?5)
             ON CONFLICT (group_id, edge_node, device) DO UPDATE SET asset_id = excluded.asset_id, online = 1,
                 changed_at = excluded.changed_at",
        )?
        .execute(params![t.group, t.edge_node, t.device, asset.as_ref().map(AssetId::as_str), received.unix()])?;
        Ok(asset)
    }

    /// Adds to the twin what the birth describes and the twin lacks (never changing what
    /// a plant import put there), through the import's checks, audited as `sparkplug`.
    fn register(
        &self,
        conn: &Connection,
        t: &Topic,
        asset: &AssetId,
        sensors: &[(&SensorId, &Metric)],
    ) -> Result<Result<(), String>, StoreError> {
        let file = format!("{}/{}/{}", super::topic::NAMESPACE, t.group, t.kind.as_str());
        let at = Origin { file: format!("{file}/{}", t.sender()), line: 0 };
        let mut model = PlantModel::default();
        let station = fill(&self.rules.station, &[("group", &t.group), ("edge_node", &t.edge_node)]);
        if !exists(conn, "SELECT 1 FROM sites", [])? {
            let site = Site {
                id: "sparkplug".into(),
                name: format!("Sparkplug host {}", self.rules.host_id),
                timezone: "UTC".into(),
            };
            model.site = Some((site, at.clone()));
        }
        let mut problems = Vec::new();
        if !exists(conn, "SELECT 1 FROM assets WHERE id = ?1 COLLATE NOCASE", [asset.as_str()])? {
            if !exists(conn, "SELECT 1 FROM stations WHERE id = ?1 COLLATE NOCASE", [&station])? {
                model.stations.push(StationRow { id: station.clone(), name: t.group.clone(), at: at.clone() });
            }
            let (kind, name) = if t.device.is_empty() { ("edge_node", &t.edge_node) } else { ("device", &t.device) };
            let fields = [
                ("id", asset.as_str().to_string()),
                ("station", station),
                ("kind", kind.into()),
                ("name", name.clone()),
            ];
            problems.extend(model.push_asset(at.clone(), &fields).err().into_iter().flatten());
        }
        for (id, m) in sensors {
            if exists(conn, "SELECT 1 FROM sensors WHERE id = ?1 COLLATE NOCASE", [id.as_str()])? {
                continue;
            }
            let limit = |keys: &[&str]| {
                keys.iter().find_map(|k| property_number(m, k)).map(|v| v.to_string()).unwrap_or_default()
            };
            let name = m.name.clone().unwrap_or_default();
            let description =
                ["description", "Documentation", "Tooltip"].iter().find_map(|k| property_text(m, k)).unwrap_or(&name);
            let fields = [
                ("id", id.as_str().to_string()),
                ("asset", asset.as_str().to_string()),
                ("description", description.to_string()),
                ("unit", property_text(m, "engUnit").unwrap_or_default().to_string()),
                ("range_low", limit(&["engLow"])),
                ("range_high", limit(&["engHigh"])),
                ("ll", limit(&["limitLoLo", "lolo", "ll"])),
                ("l", limit(&["limitLo", "lo", "l"])),
                ("h", limit(&["limitHi", "hi", "h"])),
                ("hh", limit(&["limitHiHi", "hihi", "hh"])),
                ("deadband", limit(&["deadband"])),
                ("alarm_source", self.rules.alarm_source.clone()),
            ];
            problems.extend(model.push_sensor(at.clone(), &fields).err().into_iter().flatten());
        }
        if !problems.is_empty() {
            return Ok(Err(plant::ImportError(problems).to_string()));
        }
        if model.stations.is_empty() && model.assets.is_empty() && model.sensors.is_empty() {
            return Ok(Ok(()));
        }
        Ok(plant::import_within(conn, &model, Mode::Partial, "sparkplug", &at.file)?
            .map(|_| ())
            .map_err(|e| e.to_string()))
    }

    /// NDATA and DDATA: each metric by alias (or name) to its sensor.
    fn data(&mut self, d: &Decoded, received: Timestamp, out: &mut Outcome) {
        let t = &d.topic;
        let node = self.nodes.get(&(t.group.clone(), t.edge_node.clone())).expect("loaded by apply");
        if t.kind == Kind::DData && !node.devices.contains_key(&t.device) {
            out.refused.push(Refused::new(
                DeadLetterReason::NotBorn,
                format!(
                    "{t}: device {} has no DBIRTH in this session of its edge node; a rebirth was requested",
                    t.device
                ),
            ));
            self.ask_rebirth(t, out);
            return;
        }
        let mut unknown = Vec::new();
        let mut found = Vec::new();
        for m in &d.payload.metrics {
            let born = match (m.alias, &m.name) {
                (Some(a), _) if let Some(b) = node.aliases.get(&a) => Some(b),
                (_, Some(n)) => node.names.get(&(t.device.clone(), n.clone())),
                _ => None,
            };
            match born {
                Some(Some(s)) => found.push((s, m)),
                Some(_) => out.skipped += 1,
                None => {
                    unknown.push(m.name.clone().unwrap_or_else(|| format!("alias {}", m.alias.unwrap_or_default())))
                }
            }
        }
        for (sensor, m) in found {
            self.reading(sensor, m, d.payload.timestamp, received, out);
        }
        if !unknown.is_empty() {
            out.refused.push(Refused::new(
                DeadLetterReason::UnknownAlias,
                format!(
                    "{t}: {} metric(s) not in this session's births ({}); their values were not stored and a rebirth was requested",
                    unknown.len(),
                    unknown.iter().take(10).cloned().collect::<Vec<_>>().join(", ")
                ),
            ));
            self.ask_rebirth(t, out);
        }
    }

    fn reading(&self, sensor: &SensorId, m: &Metric, payload_ms: Option<u64>, received: Timestamp, out: &mut Outcome) {
        // OPC quality in a `Quality` property: 192 and up is good.
        let bad = property_number(m, "Quality").is_some_and(|q| q < 192.0);
        let (time, millis) = time_ms_of(m.timestamp.or(payload_ms), received);
        match number(m) {
            Ok(Some(value)) if !bad => out.readings.push(SparkplugReading {
                sensor: sensor.clone(),
                time,
                millis,
                value,
                historical: m.is_historical == Some(true),
            }),
            _ => out.skipped += 1,
        }
    }

    /// NDEATH: honoured only when its bdSeq is the session's (an older session's will
    /// arriving late says nothing about this one).
    fn node_death(
        &mut self,
        conn: &Connection,
        d: &Decoded,
        received: Timestamp,
        out: &mut Outcome,
    ) -> Result<(), StoreError> {
        let t = &d.topic;
        let bd_seq = bd_seq(&d.payload);
        let node = self.node(conn, t)?;
        if !node.online || (node.bd_seq.is_some() && bd_seq.is_some() && node.bd_seq != bd_seq) {
            tracing::info!(stage = "ingest", sender = %t.sender(), bd_seq = ?bd_seq, session = ?node.bd_seq,
                "a Sparkplug NDEATH for a session that is not the current one; ignored");
            return Ok(());
        }
        node.online = false;
        let assets: Vec<(String, AssetId)> =
            node.devices.drain().filter_map(|(device, asset)| Some((device, asset?))).collect();
        conn.prepare_cached(
            "UPDATE sparkplug_nodes SET online = 0, changed_at = ?3 WHERE group_id = ?1 AND edge_node = ?2",
        )?
        .execute(params![t.group, t.edge_node, received.unix()])?;
        conn.prepare_cached(
            "UPDATE sparkplug_devices SET online = 0, changed_at = ?3 WHERE group_id = ?1 AND edge_node = ?2",
        )?
        .execute(params![t.group, t.edge_node, received.unix()])?;
        self.died(conn, d, assets, received, out)
    }

    fn device_death(
        &mut self,
        conn: &Connection,
        d: &Decoded,
        received: Timestamp,
        out: &mut Outcome,
    ) -> Result<(), StoreError> {
        let t = &d.topic;
        let node = self.node(conn, t)?;
        let asset = node.devices.remove(&t.device).flatten();
        conn.prepare_cached(
            "UPDATE sparkplug_devices SET online = 0, changed_at = ?4 WHERE group_id = ?1 AND edge_node = ?2 AND device = ?3",
        )?
        .execute(params![t.group, t.edge_node, t.device, received.unix()])?;
        let assets = asset.map(|a| (t.device.clone(), a)).into_iter().collect();
        self.died(conn, d, assets, received, out)
    }

    /// Marks the sensors of the node (NDEATH) or of one device (DDEATH) stale and raises
    /// communication loss on `assets`.
    fn died(
        &self,
        conn: &Connection,
        d: &Decoded,
        assets: Vec<(String, AssetId)>,
        received: Timestamp,
        out: &mut Outcome,
    ) -> Result<(), StoreError> {
        let (t, payload_ms) = (&d.topic, d.payload.timestamp);
        let device = (t.kind == Kind::DDeath).then_some(t.device.as_str());
        let at = time_of(payload_ms, received);
        let mut stmt = conn.prepare_cached(
            "SELECT sensor_id FROM sparkplug_metrics
             WHERE group_id = ?1 AND edge_node = ?2 AND (?3 IS NULL OR device = ?3) AND sensor_id IS NOT NULL",
        )?;
        let sensors: Vec<String> =
            stmt.query_map(params![t.group, t.edge_node, device], |r| r.get(0))?.collect::<Result<_, _>>()?;
        for s in &sensors {
            conn.prepare_cached(
                "UPDATE sensors SET stale_since = ?2 WHERE id = ?1 COLLATE NOCASE AND stale_since IS NULL",
            )?
            .execute(params![s, at.unix()])?;
        }
        let ms = payload_ms.unwrap_or(received.unix() as u64 * 1000);
        for (dev, asset) in assets {
            let sender = if dev.is_empty() {
                format!("{}/{}", t.group, t.edge_node)
            } else {
                format!("{}/{}/{dev}", t.group, t.edge_node)
            };
            out.comm.push(Comm {
                asset,
                raised: true,
                event_id: format!("sparkplug:{sender}:COMM_LOSS:{ms}"),
                time: at,
                message: format!(
                    "Communication lost with Sparkplug {sender} ({}): its readings are stale from {} until it is born again",
                    t.kind.as_str(),
                    at.to_rfc3339()
                ),
            });
        }
        Ok(())
    }
}

/// The `bdSeq` a birth or death carries (a UInt64 where the sender leaves the type out).
fn bd_seq(payload: &super::Payload) -> Option<i64> {
    let m = payload.metrics.iter().find(|m| m.name.as_deref() == Some("bdSeq"))?;
    number(&Metric { datatype: m.datatype.or(Some(8)), ..m.clone() }).ok().flatten().map(|v| v as i64)
}

fn exists(conn: &Connection, sql: &str, params: impl rusqlite::Params) -> rusqlite::Result<bool> {
    Ok(conn.prepare_cached(sql)?.query_row(params, |_| Ok(())).optional()?.is_some())
}

/// An edge node's session from its rows.
fn load(conn: &Connection, group: &str, edge_node: &str) -> rusqlite::Result<Node> {
    let Some((bd_seq, seq, online)) = conn
        .prepare_cached("SELECT bd_seq, seq, online FROM sparkplug_nodes WHERE group_id = ?1 AND edge_node = ?2")?
        .query_row([group, edge_node], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))
        .optional()?
    else {
        return Ok(Node::default());
    };
    let mut node = Node { bd_seq, seq, online, ..Node::default() };
    let mut stmt = conn.prepare_cached(
        "SELECT device, name, alias, sensor_id FROM sparkplug_metrics WHERE group_id = ?1 AND edge_node = ?2",
    )?;
    let mut rows = stmt.query([group, edge_node])?;
    while let Some(r) = rows.next()? {
        let sensor = r.get::<_, Option<String>>(3)?.and_then(|s| SensorId::parse(&s).ok());
        let born: Born = sensor;
        if let Some(alias) = r.get::<_, Option<i64>>(2)? {
            node.aliases.insert(alias as u64, born.clone());
        }
        node.names.insert((r.get(0)?, r.get(1)?), born);
    }
    let mut stmt = conn.prepare_cached(
        "SELECT device, asset_id FROM sparkplug_devices WHERE group_id = ?1 AND edge_node = ?2 AND online = 1",
    )?;
    let mut rows = stmt.query([group, edge_node])?;
    while let Some(r) = rows.next()? {
        let asset = r.get::<_, Option<String>>(1)?.and_then(|a| AssetId::parse(&a).ok());
        node.devices.insert(r.get(0)?, asset);
    }
    Ok(node)
}
