//! The address space as the twin's plant: a walk from a root node along hierarchical
//! references. Objects become assets (nested objects name their parent), variables of
//! a type the twin stores become sensors with their node, EngineeringUnits, EURange
//! as the measuring range, and the limits of the alarm conditions they are the source
//! of (HighHighLimit, HighLimit, LowLimit, LowLowLimit); the references between
//! those objects whose type names a connection (Part 23's
//! `Controls`, or a site's own `FlowsTo`, `Feeds`, `PoweredBy`, `SuppliesAir`...)
//! become the plant's connections. The result is the rows `plant import` reads:
//! written to files for review (`twinops opcua browse`), or imported at connect
//! (`auto_register`).

use std::collections::{HashMap, HashSet, VecDeque};
use std::path::{Path, PathBuf};

use async_opcua::client::Session;
use async_opcua::types::{
    AttributeId, BrowseDescription, BrowseDirection, BrowseResultMask, DataValue, EUInformation, NodeClass, NodeId,
    Range, ReadValueId, ReferenceDescription, ReferenceTypeId, TimestampsToReturn, Variant,
};

use super::OpcuaConfig;
use super::node::node_ref;
use crate::domain::as_id;
use crate::plant::{ASSET_FIELDS, CONNECTION_FIELDS, Origin, PlantModel, Problem, SENSOR_FIELDS, connection_word};

/// A row of the plant import, by its canonical field names.
pub type Fields = Vec<(&'static str, String)>;

/// What a walk found.
#[derive(Debug, Default)]
pub struct Found {
    /// The server's application name, which names the site of a twin that has none.
    pub server_name: String,
    pub assets: Vec<Fields>,
    pub sensors: Vec<Fields>,
    /// How the assets act on each other (from, kind, to), from the references between them.
    pub connections: Vec<Fields>,
    /// Variables not taken, each with why (a string variable, one outside any object).
    pub skipped: Vec<String>,
}

/// The most nodes a walk visits: an address space larger than this is browsed from a
/// narrower `--root`.
pub const MAX_NODES: usize = 50_000;
const MAX_DEPTH: usize = 12;

/// Condition types of Part 9 (namespace 0): such objects are alarms, not equipment.
const CONDITION_TYPES: [u32; 22] = [
    2782, 2830, 2881, 2915, 2955, 9341, 9482, 9623, 9764, 9906, 10060, 10214, 10368, 10523, 10637, 10751, 11753, 13225,
    17080, 18347, 18496, 2929,
];

/// The data types stored as readings: Boolean to Double, Number, Integer, UInteger,
/// Duration.
fn stored_type(data_type: &NodeId) -> bool {
    data_type.namespace == 0 && matches!(data_type.as_u32(), Some(1..=11 | 26 | 27 | 28 | 290))
}

/// A variable found under an asset.
struct Candidate {
    node: NodeId,
    name: String,
    asset: String,
}

/// Walks from `root` and returns the plant rows.
pub async fn walk(session: &Session, cfg: &OpcuaConfig, root: &NodeId) -> anyhow::Result<Found> {
    let uris = namespace_uris(session).await?;
    let mut found = Found {
        server_name: session.endpoint_info().endpoint.server.application_name.text.as_ref().to_string(),
        ..Found::default()
    };
    let mut candidates = Vec::new();
    let mut seen: HashSet<NodeId> = HashSet::new();
    let mut asset_ids: HashSet<String> = HashSet::new();
    // Each object taken as an asset, by its node: what the connections join.
    let mut asset_nodes: HashMap<NodeId, String> = HashMap::new();
    // A site's own object as the root (not a folder, not the standard's) is an asset too.
    let root_asset = match root_object(session, root).await? {
        Some(r) => {
            let id = unique(as_id(r.browse_name.name.as_ref()), &mut asset_ids);
            found.assets.push(asset_fields(cfg, &id, &r, None, &uris));
            asset_nodes.insert(root.clone(), id.clone());
            Some(id)
        }
        None => None,
    };
    let mut queue: VecDeque<(NodeId, Option<String>, usize)> = VecDeque::from([(root.clone(), root_asset, 0)]);
    while let Some((node, parent, depth)) = queue.pop_front() {
        anyhow::ensure!(
            seen.len() < MAX_NODES,
            "more than {MAX_NODES} nodes under the root: browse from a narrower one (--root, or opcua.root)"
        );
        for r in references(session, &node, ReferenceTypeId::HierarchicalReferences, 0b11).await? {
            let child = r.node_id.node_id.clone();
            if child.namespace == 0 || !seen.insert(child.clone()) {
                continue;
            }
            let name = r.browse_name.name.as_ref().to_string();
            match r.node_class {
                NodeClass::Object if is_condition(&r) => {}
                NodeClass::Object if depth < MAX_DEPTH => {
                    let folder = r.type_definition.node_id == NodeId::new(0, 61u32);
                    let asset = if folder {
                        parent.clone()
                    } else {
                        let id = unique(as_id(&name), &mut asset_ids);
                        found.assets.push(asset_fields(cfg, &id, &r, parent.as_deref(), &uris));
                        asset_nodes.insert(child.clone(), id.clone());
                        Some(id)
                    };
                    queue.push_back((child, asset, depth + 1));
                }
                NodeClass::Variable if r.reference_type_id != ReferenceTypeId::HasProperty => match &parent {
                    Some(asset) => candidates.push(Candidate { node: child, name, asset: asset.clone() }),
                    None => {
                        found.skipped.push(format!("{name}: a variable outside any object (no asset to put it on)"))
                    }
                },
                _ => {}
            }
        }
    }
    for chunk in candidates.chunks(200) {
        sensors(session, chunk, &uris, &mut found).await?;
    }
    connections(session, &asset_nodes, &mut found).await?;
    Ok(found)
}

/// The references from one asset's object to another's, as the plant's connections: a
/// reference type whose browse name, in words (`FlowsTo` is "flows to", `PoweredBy`
/// "powered by"), is a connection as plant files write it. Other relations between two
/// assets are said to be skipped.
async fn connections(session: &Session, assets: &HashMap<NodeId, String>, found: &mut Found) -> anyhow::Result<()> {
    let mut links: Vec<(String, NodeId, String)> = Vec::new();
    let mut objects: Vec<(&NodeId, &String)> = assets.iter().collect();
    objects.sort_by(|a, b| a.1.cmp(b.1));
    for (node, from) in objects {
        // All references, not only non-hierarchical ones: Part 23's Controls is a
        // hierarchical reference (so the walk may have come down it too).
        for r in references(session, node, ReferenceTypeId::References, 0b1).await? {
            if let Some(to) = assets.get(&r.node_id.node_id).filter(|to| *to != from) {
                links.push((from.clone(), r.reference_type_id.clone(), to.clone()));
            }
        }
    }
    let mut types: Vec<NodeId> = links.iter().map(|l| l.1.clone()).collect();
    types.sort_by_key(|t| t.to_string());
    types.dedup();
    let names = read(session, &types.iter().map(|t| (t.clone(), AttributeId::BrowseName)).collect::<Vec<_>>()).await?;
    let named: HashMap<&NodeId, String> = types
        .iter()
        .zip(names)
        .map(|(t, v)| match v.value {
            Some(Variant::QualifiedName(q)) => (t, q.name.as_ref().to_string()),
            _ => (t, t.to_string()),
        })
        .collect();
    let mut seen = HashSet::new();
    for (from, kind, to) in links {
        let name = &named[&kind];
        match connection_word(&words(name)) {
            Some((kind, reversed)) => {
                let (from, to) = if reversed { (to, from) } else { (from, to) };
                if seen.insert((from.clone(), kind, to.clone())) {
                    found.connections.push(vec![("from", from), ("kind", kind.as_str().to_string()), ("to", to)]);
                }
            }
            // The standard's structure (Organizes, HasComponent...) is the hierarchy,
            // already taken; a relation of the standard or the site's is said.
            None if !worth_naming(&kind) => {}
            None => found.skipped.push(format!(
                "{from} {name} {to}: not a connection twinops knows (feeds, powers, supplies_air, controls); \
                 add it to connections.csv by hand if it is one"
            )),
        }
    }
    found.connections.sort();
    Ok(())
}

/// Whether a reference type that is not a connection is worth saying it was skipped: a
/// site's own, or a relation of the standard between equipment (IsPhysicallyConnectedTo,
/// HasCause, HasEffect, Utilizes, Requires); not the standard's hierarchy.
fn worth_naming(kind: &NodeId) -> bool {
    kind.namespace != 0 || kind.as_u32().is_some_and(|id| matches!(id, 53 | 54 | 25255 | 25256 | 25257))
}

/// A reference type's browse name in words: `FlowsTo` is "flows to", `Is_Fed_By` "is fed by".
fn words(name: &str) -> String {
    let mut out = String::new();
    for (i, c) in name.chars().enumerate() {
        if c == '_' || c == '-' || c == ' ' {
            out.push(' ');
        } else {
            if i > 0 && c.is_uppercase() && !out.ends_with(' ') {
                out.push(' ');
            }
            out.extend(c.to_lowercase());
        }
    }
    out
}

/// The root as a reference, when it is an object of the site's that is an asset: its
/// browse name, display name and type, from its parent's reference to it.
async fn root_object(session: &Session, root: &NodeId) -> anyhow::Result<Option<ReferenceDescription>> {
    if root.namespace == 0 {
        return Ok(None);
    }
    let description = BrowseDescription {
        node_id: root.clone(),
        browse_direction: BrowseDirection::Inverse,
        reference_type_id: ReferenceTypeId::HierarchicalReferences.into(),
        include_subtypes: true,
        node_class_mask: 0,
        result_mask: BrowseResultMask::All as u32,
    };
    let result = session.browse(&[description], 1, None).await?.remove(0);
    anyhow::ensure!(result.status_code.is_good(), "browsing the root {root}: {}", result.status_code);
    let Some(parent) = result.references.and_then(|r| r.into_iter().next()) else { return Ok(None) };
    // The parent's forward reference to the root says what the root is.
    let siblings = references(session, &parent.node_id.node_id, ReferenceTypeId::HierarchicalReferences, 0b1).await?;
    Ok(siblings
        .into_iter()
        .find(|r| &r.node_id.node_id == root)
        .filter(|r| r.type_definition.node_id != NodeId::new(0, 61u32) && !is_condition(r)))
}

fn is_condition(r: &ReferenceDescription) -> bool {
    let t = &r.type_definition.node_id;
    t.namespace == 0 && t.as_u32().is_some_and(|id| CONDITION_TYPES.contains(&id))
}

/// `id`, or `id_2`, `id_3`... when another object of the walk took it.
fn unique(id: String, taken: &mut HashSet<String>) -> String {
    let mut candidate = id.clone();
    let mut n = 1;
    while !taken.insert(candidate.to_lowercase()) {
        n += 1;
        candidate = format!("{id}_{n}");
    }
    candidate
}

/// An object as an asset, with its node: conditions whose source is the object land on it.
fn asset_fields(
    cfg: &OpcuaConfig,
    id: &str,
    r: &ReferenceDescription,
    parent: Option<&str>,
    uris: &[String],
) -> Fields {
    vec![
        ("id", id.to_string()),
        ("station", cfg.station.clone()),
        ("kind", "equipment".into()),
        ("name", r.display_name.text.as_ref().to_string()),
        ("parent", parent.unwrap_or_default().to_string()),
        ("opcua_node", node_ref(&r.node_id.node_id, uris).map(|n| n.to_string()).unwrap_or_default()),
    ]
}

/// The server's NamespaceArray (i=2255).
pub async fn namespace_uris(session: &Session) -> anyhow::Result<Vec<String>> {
    let value = read(session, &[(NodeId::new(0, 2255u32), AttributeId::Value)]).await?.remove(0);
    match value.value {
        Some(Variant::Array(a)) => Ok(a.values.iter().map(|v| v.to_string()).collect()),
        _ => anyhow::bail!("the server's NamespaceArray (i=2255) could not be read"),
    }
}

/// A node's forward references of one type (and its subtypes), all pages.
async fn references(
    session: &Session,
    node: &NodeId,
    kind: ReferenceTypeId,
    class_mask: u32,
) -> anyhow::Result<Vec<ReferenceDescription>> {
    let description = BrowseDescription {
        node_id: node.clone(),
        browse_direction: BrowseDirection::Forward,
        reference_type_id: kind.into(),
        include_subtypes: true,
        node_class_mask: class_mask,
        result_mask: BrowseResultMask::All as u32,
    };
    let mut result = session.browse(&[description], 1000, None).await?.remove(0);
    anyhow::ensure!(result.status_code.is_good(), "browsing {node}: {}", result.status_code);
    let mut out = result.references.take().unwrap_or_default();
    while !result.continuation_point.is_null() {
        result = session.browse_next(false, &[result.continuation_point.clone()]).await?.remove(0);
        out.extend(result.references.take().unwrap_or_default());
    }
    Ok(out)
}

async fn read(session: &Session, what: &[(NodeId, AttributeId)]) -> anyhow::Result<Vec<DataValue>> {
    let ids: Vec<ReadValueId> = what
        .iter()
        .map(|(node, attribute)| ReadValueId {
            node_id: node.clone(),
            attribute_id: *attribute as u32,
            ..Default::default()
        })
        .collect();
    Ok(session.read(&ids, TimestampsToReturn::Neither, 0.0).await?)
}

/// The sensors among `chunk`: their type, description, unit, range and limits.
async fn sensors(session: &Session, chunk: &[Candidate], uris: &[String], found: &mut Found) -> anyhow::Result<()> {
    let attributes: Vec<(NodeId, AttributeId)> = chunk
        .iter()
        .flat_map(|c| [(c.node.clone(), AttributeId::DataType), (c.node.clone(), AttributeId::Description)])
        .collect();
    let values = read(session, &attributes).await?;
    for (c, pair) in chunk.iter().zip(values.chunks(2)) {
        let data_type = match &pair[0].value {
            Some(Variant::NodeId(t)) => (**t).clone(),
            _ => NodeId::null(),
        };
        if !stored_type(&data_type) {
            found.skipped.push(format!(
                "{}/{}: of data type {data_type}; twinops stores numbers and booleans as readings",
                c.asset, c.name
            ));
            continue;
        }
        let Some(node) = node_ref(&c.node, uris) else { continue };
        let description = match &pair[1].value {
            Some(Variant::LocalizedText(t)) if !t.text.is_empty() => t.text.as_ref().to_string(),
            _ => c.name.clone(),
        };
        let (unit, range) = analog(session, &c.node).await?;
        let limits = condition_limits(session, &c.node).await?;
        let number = |v: Option<f64>| v.map(|v| v.to_string()).unwrap_or_default();
        found.sensors.push(vec![
            ("id", format!("{}.{}", c.asset, as_id(&c.name))),
            ("asset", c.asset.clone()),
            ("description", description),
            ("unit", unit),
            ("range_low", number(range.as_ref().map(|r| r.low))),
            ("range_high", number(range.as_ref().map(|r| r.high))),
            ("ll", number(limits[0])),
            ("l", number(limits[1])),
            ("h", number(limits[2])),
            ("hh", number(limits[3])),
            // The server raises the alarms (Alarms & Conditions); its limits are kept
            // for the master alarm database, not evaluated again here.
            ("alarm_source", "scada".into()),
            ("opcua_node", node.to_string()),
        ]);
    }
    Ok(())
}

/// EngineeringUnits' display name and EURange, when the variable has them (AnalogItemType).
async fn analog(session: &Session, node: &NodeId) -> anyhow::Result<(String, Option<Range>)> {
    let properties = references(session, node, ReferenceTypeId::HasProperty, 0b10).await?;
    let (mut unit, mut range) = (String::new(), None);
    for p in properties {
        let name = p.browse_name.name.as_ref();
        if !matches!(name, "EngineeringUnits" | "EURange") {
            continue;
        }
        let value = read(session, &[(p.node_id.node_id.clone(), AttributeId::Value)]).await?.remove(0);
        if let Some(Variant::ExtensionObject(o)) = value.value {
            if let Some(eu) = o.inner_as::<EUInformation>() {
                unit = eu.display_name.text.as_ref().to_string();
            } else if let Some(r) = o.inner_as::<Range>() {
                range = Some(r.clone());
            }
        }
    }
    Ok((unit, range))
}

/// The limits (ll, l, h, hh) of the conditions `node` is the source of (HasCondition).
async fn condition_limits(session: &Session, node: &NodeId) -> anyhow::Result<[Option<f64>; 4]> {
    let mut limits = [None; 4];
    for condition in references(session, node, ReferenceTypeId::HasCondition, 0b1).await? {
        for p in references(session, &condition.node_id.node_id, ReferenceTypeId::HierarchicalReferences, 0b10).await? {
            let slot = match p.browse_name.name.as_ref() {
                "LowLowLimit" => 0,
                "LowLimit" => 1,
                "HighLimit" => 2,
                "HighHighLimit" => 3,
                _ => continue,
            };
            let value = read(session, &[(p.node_id.node_id.clone(), AttributeId::Value)]).await?.remove(0);
            limits[slot] = limits[slot].or(value.value.as_ref().and_then(Variant::as_f64));
        }
    }
    Ok(limits)
}

impl Found {
    /// The rows as a plant model, each checked as a file's row is.
    pub fn model(&self, file: &str) -> Result<PlantModel, Vec<Problem>> {
        let at = Origin { file: file.to_string(), line: 0 };
        let mut model = PlantModel::default();
        let mut problems = Vec::new();
        for a in &self.assets {
            problems.extend(model.push_asset(at.clone(), a).err().into_iter().flatten());
        }
        for s in &self.sensors {
            problems.extend(model.push_sensor(at.clone(), s).err().into_iter().flatten());
        }
        for c in &self.connections {
            problems.extend(model.push_connection(at.clone(), c).err().into_iter().flatten());
        }
        if problems.is_empty() { Ok(model) } else { Err(problems) }
    }

    /// Writes `assets.csv`, `tags.csv`, `connections.csv` and `plant.toml` (the station, and the site when
    /// `with_site`: a twin with none yet takes the server's name for it) into `dir` for
    /// `plant import`; returns the files written.
    pub fn write(&self, cfg: &OpcuaConfig, dir: &Path, with_site: bool) -> anyhow::Result<Vec<PathBuf>> {
        std::fs::create_dir_all(dir)?;
        let quote = |s: &str| serde_json::Value::String(s.to_string()).to_string();
        let mut plant = String::new();
        if with_site {
            let name = if self.server_name.trim().is_empty() { cfg.endpoint.as_str() } else { self.server_name.trim() };
            // `Lift station 3 (asyncua)` is `lift-station-3-asyncua`.
            let words: Vec<String> = name
                .split(|c: char| !c.is_ascii_alphanumeric())
                .filter(|w| !w.is_empty())
                .map(str::to_ascii_lowercase)
                .collect();
            let id = match words.join("-") {
                id if id.is_empty() => "opcua".to_string(),
                id => id.chars().take(40).collect::<String>().trim_end_matches('-').to_string(),
            };
            plant.push_str(&format!(
                "# The twin has no site yet: this one is named after the server (edit the id, name and\n\
                 # time zone, an IANA name such as Europe/Dublin, before the first import).\n\
                 [site]\nid = {}\nname = {}\ntimezone = \"UTC\"\n\n",
                quote(&id),
                quote(name)
            ));
        }
        plant.push_str(&format!(
            "# The station of the assets `twinops opcua browse` found on {}.\n[[stations]]\nid = {}\nname = {}\n",
            cfg.endpoint,
            quote(&cfg.station),
            quote(&format!("OPC UA {}", cfg.endpoint))
        ));
        let files = [
            ("plant.toml", plant),
            ("assets.csv", csv_of(&ASSET_FIELDS, &self.assets)?),
            ("tags.csv", csv_of(&SENSOR_FIELDS, &self.sensors)?),
            ("connections.csv", csv_of(&CONNECTION_FIELDS, &self.connections)?),
        ];
        let mut written = Vec::new();
        for (name, text) in files {
            let path = dir.join(name);
            std::fs::write(&path, text)?;
            written.push(path);
        }
        Ok(written)
    }
}

fn csv_of(headers: &[&str], rows: &[Fields]) -> anyhow::Result<String> {
    let mut out = csv::Writer::from_writer(Vec::new());
    out.write_record(headers)?;
    for row in rows {
        out.write_record(headers.iter().map(|h| row.iter().find(|(k, _)| k == h).map_or("", |(_, v)| v.as_str())))?;
    }
    Ok(String::from_utf8(out.into_inner()?)?)
}
