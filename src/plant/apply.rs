//! The import as a change set against the twin, and its application in one
//! transaction: the same function computes what `--dry-run` prints and what is written.

use std::borrow::Cow;
use std::collections::{HashMap, HashSet};
use std::fmt;

use rusqlite::{Connection, OptionalExtension, params};

use super::model::{
    ALARM_POINT_FIELDS, ASSET_FIELDS, AlarmPointRow, AssetRow, ConnectionRow, PlantModel, SENSOR_FIELDS, SensorRow,
    point_key,
};
use super::{ImportError, Problem};
use crate::domain::Timestamp;
use crate::store::{StoreError, Writer};

/// A full import describes the whole plant: what it leaves out is retired. A partial
/// one adds and updates only.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Mode {
    Full,
    Partial,
}

#[derive(Debug, Clone, PartialEq)]
pub enum Change {
    Added {
        what: &'static str,
        id: String,
    },
    Changed {
        what: &'static str,
        id: String,
        field: &'static str,
        from: String,
        to: String,
    },
    /// In the twin, not in a full import: out of the lists, history kept.
    Retired {
        what: &'static str,
        id: String,
    },
    /// Retired before, in the import again.
    Returned {
        what: &'static str,
        id: String,
    },
}

/// What an import changes, in the order it is applied.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ChangeSet {
    pub changes: Vec<Change>,
}

impl ChangeSet {
    pub fn is_empty(&self) -> bool {
        self.changes.is_empty()
    }

    /// `12 assets added, 3 changed, 1 retired; 200 sensors added`.
    pub fn summary(&self) -> String {
        if self.changes.is_empty() {
            return "no changes: the twin already matches the files".into();
        }
        let mut parts = Vec::new();
        for what in ["site", "station", "asset", "sensor", "alarm point", "connection"] {
            let count = |f: &dyn Fn(&Change) -> bool| self.changes.iter().filter(|c| f(c)).count();
            let changed: HashSet<&str> = self
                .changes
                .iter()
                .filter_map(|c| match c {
                    Change::Changed { what: w, id, .. } if *w == what => Some(id.as_str()),
                    _ => None,
                })
                .collect();
            let counts = [
                (count(&|c| matches!(c, Change::Added { what: w, .. } if *w == what)), "added"),
                (changed.len(), "changed"),
                (count(&|c| matches!(c, Change::Retired { what: w, .. } if *w == what)), "retired"),
                (count(&|c| matches!(c, Change::Returned { what: w, .. } if *w == what)), "returned"),
            ];
            let said: Vec<String> = counts.iter().filter(|(n, _)| *n > 0).map(|(n, v)| format!("{n} {v}")).collect();
            if !said.is_empty() {
                parts.push(format!("{what}s: {}", said.join(", ")));
            }
        }
        parts.join("; ")
    }
}

impl fmt::Display for ChangeSet {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for c in &self.changes {
            match c {
                Change::Added { what, id } => writeln!(f, "+ {what} {id}")?,
                Change::Changed { what, id, field, from, to } => {
                    writeln!(f, "~ {what} {id}: {field} {from:?} -> {to:?}")?
                }
                Change::Retired { what, id } => writeln!(f, "- {what} {id} (retired; its history stays)")?,
                Change::Returned { what, id } => writeln!(f, "+ {what} {id} (back from retirement)")?,
            }
        }
        write!(f, "{}", self.summary())
    }
}

/// Checks the model against itself and the twin, and says what importing it changes.
pub fn diff(conn: &Connection, model: &PlantModel, mode: Mode) -> Result<ChangeSet, ImportError> {
    plan(conn, model, mode).map(|(_, changes)| changes)
}

/// The model as it will be written (alarm points keyed by tag alone given their tag's
/// asset) and what it changes.
fn plan<'m>(
    conn: &Connection,
    model: &'m PlantModel,
    mode: Mode,
) -> Result<(Cow<'m, PlantModel>, ChangeSet), ImportError> {
    let twin = Twin::read(conn).map_err(|e| ImportError(vec![internal(e)]))?;
    let model = with_point_assets(model, &twin)?;
    let changes = changes(&model, &twin, mode)?;
    Ok((model, changes))
}

/// A rationalization sheet keyed by tag alone (alarm databases export the tag and the
/// alarm, not the equipment): each such point is on its tag's asset, as this import's
/// tag files or else the twin have it. A tag neither has, or one the tag files put on
/// two assets, is a problem at its cell.
fn with_point_assets<'m>(model: &'m PlantModel, twin: &Twin) -> Result<Cow<'m, PlantModel>, ImportError> {
    if model.alarm_points.iter().all(|p| !p.asset.is_empty()) {
        return Ok(Cow::Borrowed(model));
    }
    let mut imported: HashMap<String, Vec<&str>> = HashMap::new();
    for s in &model.sensors {
        let on = imported.entry(s.id.as_str().to_lowercase()).or_default();
        if !on.iter().any(|a| a.eq_ignore_ascii_case(&s.asset)) {
            on.push(&s.asset);
        }
    }
    let mut resolved = model.clone();
    let mut problems = Vec::new();
    for p in resolved.alarm_points.iter_mut().filter(|p| p.asset.is_empty()) {
        let Some(tag) = p.sensor.as_deref() else { continue };
        let key = tag.to_lowercase();
        let on: Vec<String> = match imported.get(&key) {
            Some(on) => on.iter().map(|a| a.to_string()).collect(),
            None => {
                twin.sensors.get(&key).and_then(|(_, f, _)| f.first()).map(|(_, a)| a.clone()).into_iter().collect()
            }
        };
        match on.as_slice() {
            [asset] => p.asset = asset.clone(),
            [] => problems.push(p.raw.problem(
                "sensor",
                format!(
                    "unknown tag '{tag}': the sheet has no asset column, so the alarm's asset is its tag's, and \
                     neither the twin nor this import's tag files have it; import the tag first, or add an asset column"
                ),
            )),
            several => problems.push(p.raw.problem(
                "sensor",
                format!(
                    "tag '{tag}' is on {} in this import's tag files, so the alarm's asset is not known; \
                     give the tag one asset, or add an asset column to the sheet",
                    several.join(" and ")
                ),
            )),
        }
    }
    if problems.is_empty() { Ok(Cow::Owned(resolved)) } else { Err(ImportError(problems)) }
}

/// What importing `model` changes in `twin`, once it is checked.
fn changes(model: &PlantModel, twin: &Twin, mode: Mode) -> Result<ChangeSet, ImportError> {
    check(model, twin, mode)?;
    let mut changes = Vec::new();
    if let Some((site, _)) = &model.site {
        match &twin.site {
            None => changes.push(Change::Added { what: "site", id: site.id.clone() }),
            Some((id, name, tz)) => {
                for (field, from, to) in [("name", name, &site.name), ("timezone", tz, &site.timezone)] {
                    if from != to {
                        changes.push(Change::Changed {
                            what: "site",
                            id: id.clone(),
                            field,
                            from: from.clone(),
                            to: to.clone(),
                        });
                    }
                }
            }
        }
    }
    for s in &model.stations {
        match twin.stations.get(&s.id.to_lowercase()) {
            None => changes.push(Change::Added { what: "station", id: s.id.clone() }),
            Some((id, name)) if name != &s.name => changes.push(Change::Changed {
                what: "station",
                id: id.clone(),
                field: "name",
                from: name.clone(),
                to: s.name.clone(),
            }),
            Some(_) => {}
        }
    }
    let assets: Vec<(String, Fields)> =
        model.assets.iter().map(|a| (a.id.as_str().to_string(), asset_fields(a, twin))).collect();
    compare("asset", &assets, &twin.assets, mode, &mut changes);
    let imported = imported_assets(model);
    let sensors: Vec<(String, Fields)> =
        model.sensors.iter().map(|s| (s.id.as_str().to_string(), sensor_fields(s, twin, &imported))).collect();
    compare("sensor", &sensors, &twin.sensors, mode, &mut changes);
    // The master alarm database is compared only when the import holds a rationalization
    // sheet: a full import of assets and tags alone leaves it as it is.
    if !model.alarm_points.is_empty() {
        let points: Vec<(String, Fields)> =
            model.alarm_points.iter().map(|p| (point_key_of(p, twin, &imported), point_fields(p, twin))).collect();
        compare("alarm point", &points, &twin.alarm_points, mode, &mut changes);
    }
    // Likewise the connections, only when the import holds some.
    if !model.connections.is_empty() {
        let connections: Vec<(String, Fields)> = model
            .connections
            .iter()
            .map(|c| (ConnectionRow::key(resolve(&c.from, twin), c.kind, resolve(&c.to, twin)), Vec::new()))
            .collect();
        compare("connection", &connections, &twin.connections, mode, &mut changes);
    }
    Ok(ChangeSet { changes })
}

/// Imports the model in one transaction, audited as `actor`'s; returns what changed.
/// With `dry_run`, nothing is written.
pub fn import(
    writer: &Writer,
    model: PlantModel,
    mode: Mode,
    dry_run: bool,
    actor: &str,
    files: &str,
) -> Result<ChangeSet, ImportError> {
    let (actor, files) = (actor.to_string(), files.to_string());
    writer
        .call(move |c| {
            if dry_run {
                return Ok(diff(c, &model, mode));
            }
            import_within(c, &model, mode, &actor, &files)
        })
        .map_err(|e| ImportError(vec![internal(e)]))?
}

/// Imports the model inside the caller's transaction (Sparkplug births, in ingest's),
/// audited as `actor`'s with `files` saying where it came from.
pub fn import_within(
    c: &Connection,
    model: &PlantModel,
    mode: Mode,
    actor: &str,
    files: &str,
) -> Result<Result<ChangeSet, ImportError>, StoreError> {
    let (model, changes) = match plan(c, model, mode) {
        Ok(planned) => planned,
        Err(e) => return Ok(Err(e)),
    };
    if !changes.is_empty() {
        write(c, &model, &changes)?;
        write_alarm_points(c, &model, &changes, actor)?;
        write_connections(c, &model, &changes)?;
        c.prepare_cached("INSERT INTO audit_log (at, actor, action, detail) VALUES (?1, ?2, 'plant_import', ?3)")?
            .execute(params![Timestamp::now().unix(), actor, format!("{files}: {}", changes.summary())])?;
    }
    Ok(Ok(changes))
}

fn internal(e: impl fmt::Display) -> Problem {
    Problem {
        at: super::Origin { file: "(the twin)".into(), line: 0 },
        column: 0,
        field: None,
        message: format!("the database could not be read or written: {e}"),
    }
}

/// A row as compared: each field's name and its value as text.
type Fields = Vec<(&'static str, String)>;
/// The twin's rows by lower-case id: the stored id, its fields, whether retired.
type Rows = HashMap<String, (String, Fields, bool)>;

/// The twin's plant as it stands, keyed by lower-case id (ids are found in any case).
struct Twin {
    site: Option<(String, String, String)>,
    stations: HashMap<String, (String, String)>,
    assets: Rows,
    sensors: Rows,
    /// Keyed by `from kind to` ([`ConnectionRow::key`]), lower-case; no fields.
    connections: Rows,
    /// Keyed by `asset sensor code` (see [`point_key`]), lower-case; and their row ids.
    alarm_points: Rows,
    point_ids: HashMap<String, i64>,
}

const ASSET_SQL: &str = "SELECT id, station_id, kind, name, status, criticality, manufacturer, model,
        coalesce(machine_class, ''), coalesce(rated_power_kw, ''), installed_on, coalesce(parent_id, ''),
        coalesce(drives, ''), coalesce(opcua_node, ''), retired_at IS NOT NULL FROM assets";
const SENSOR_SQL: &str =
    "SELECT id, asset_id, kind, description, unit, coalesce(range_low, ''), coalesce(range_high, ''),
        coalesce(limit_ll, ''), coalesce(limit_l, ''),
        coalesce(limit_h, ''), coalesce(limit_hh, ''), deadband, on_delay_s, alarm_source, coalesce(alarm_prefix, ''),
        coalesce(priority_ll, ''), coalesce(priority_l, ''), coalesce(priority_h, ''), coalesce(priority_hh, ''),
        coalesce(opcua_node, ''), retired_at IS NOT NULL FROM sensors";
const CONNECTION_SQL: &str =
    "SELECT from_asset || ' ' || kind || ' ' || to_asset, retired_at IS NOT NULL FROM asset_connections";
/// The key is [`point_key`]'s.
const ALARM_POINT_KEY: &str = "asset_id || ' ' || coalesce(sensor_id || ' ', '') || code";
const ALARM_POINT_SQL: &str = "SELECT asset_id || ' ' || coalesce(sensor_id || ' ', '') || code, coalesce(sensor_id, ''), coalesce(priority, ''), class,
        causes, consequence, response, coalesce(respond_within_min, ''), coalesce(set_point, ''),
        coalesce(deadband, ''), coalesce(on_delay_s, ''), coalesce(off_delay_s, ''), rationalized_by, rationalized_on,
        retired_at IS NOT NULL FROM alarm_points";

impl Twin {
    fn read(conn: &Connection) -> rusqlite::Result<Twin> {
        let site = super::site(conn)?;
        let mut stations = HashMap::new();
        let mut stmt = conn.prepare("SELECT id, name FROM stations")?;
        for row in stmt.query_map([], |r| Ok((r.get::<_, String>(0)?, r.get::<_, String>(1)?)))? {
            let (id, name) = row?;
            stations.insert(id.to_lowercase(), (id, name));
        }
        Ok(Twin {
            site,
            stations,
            assets: Twin::rows(conn, ASSET_SQL, &ASSET_FIELDS[1..])?,
            sensors: Twin::rows(conn, SENSOR_SQL, &SENSOR_FIELDS[1..])?,
            connections: Twin::rows(conn, CONNECTION_SQL, &[])?,
            alarm_points: Twin::rows(conn, ALARM_POINT_SQL, &ALARM_POINT_FIELDS[2..])?,
            point_ids: conn
                .prepare(&format!("SELECT lower({ALARM_POINT_KEY}), id FROM alarm_points"))?
                .query_map([], |r| Ok((r.get(0)?, r.get(1)?)))?
                .collect::<rusqlite::Result<_>>()?,
        })
    }

    fn rows(conn: &Connection, sql: &str, names: &[&'static str]) -> rusqlite::Result<Rows> {
        let mut stmt = conn.prepare(sql)?;
        let mut rows = stmt.query([])?;
        let mut out = HashMap::new();
        while let Some(r) = rows.next()? {
            let id: String = r.get(0)?;
            let fields = names
                .iter()
                .enumerate()
                .map(|(i, n)| Ok((*n, text_of(r.get_ref(i + 1)?))))
                .collect::<rusqlite::Result<Vec<_>>>()?;
            let retired: bool = r.get(names.len() + 1)?;
            out.insert(id.to_lowercase(), (id, fields, retired));
        }
        Ok(out)
    }

    /// The twin's spelling of an asset id, if it has the asset (retired or not).
    fn asset_id(&self, id: &str) -> Option<&str> {
        self.assets.get(&id.to_lowercase()).map(|(stored, ..)| stored.as_str())
    }

    fn sensor_id(&self, id: &str) -> Option<&str> {
        self.sensors.get(&id.to_lowercase()).map(|(stored, ..)| stored.as_str())
    }
}

/// A stored value as the import compares it: numbers in their shortest form.
pub(super) fn text_of(v: rusqlite::types::ValueRef) -> String {
    match v {
        rusqlite::types::ValueRef::Null => String::new(),
        rusqlite::types::ValueRef::Integer(i) => i.to_string(),
        rusqlite::types::ValueRef::Real(f) => number(f),
        rusqlite::types::ValueRef::Text(t) => String::from_utf8_lossy(t).into_owned(),
        rusqlite::types::ValueRef::Blob(_) => String::new(),
    }
}

fn number(f: f64) -> String {
    format!("{f}")
}

fn opt_number(v: Option<f64>) -> String {
    v.map(number).unwrap_or_default()
}

/// The ids an asset row refers to, as the twin or the import spells them.
fn resolve<'a>(id: &'a str, twin: &'a Twin) -> &'a str {
    twin.asset_id(id).unwrap_or(id)
}

fn asset_fields(a: &AssetRow, twin: &Twin) -> Fields {
    let station = twin.stations.get(&a.station.to_lowercase()).map_or(a.station.clone(), |(id, _)| id.clone());
    let values = [
        station,
        a.kind.clone(),
        a.name.clone(),
        a.status.as_str().to_string(),
        a.criticality.as_str().to_string(),
        a.manufacturer.clone(),
        a.model.clone(),
        a.machine_class.clone().unwrap_or_default(),
        opt_number(a.rated_power_kw),
        a.installed_on.clone(),
        a.parent.as_deref().map(|p| resolve(p, twin).to_string()).unwrap_or_default(),
        a.drives.as_deref().map(|p| resolve(p, twin).to_string()).unwrap_or_default(),
        a.opcua_node.as_ref().map(ToString::to_string).unwrap_or_default(),
    ];
    ASSET_FIELDS[1..].iter().copied().zip(values).collect()
}

/// The import's assets by lower-case id, as the import spells them (a plant of 18,000
/// assets and 60,000 tags is looked up in, not searched).
fn imported_assets(model: &PlantModel) -> HashMap<String, &str> {
    model.assets.iter().map(|a| (a.id.as_str().to_lowercase(), a.id.as_str())).collect()
}

fn sensor_fields(s: &SensorRow, twin: &Twin, imported: &HashMap<String, &str>) -> Fields {
    // The asset as the twin spells it, else as the import does.
    let asset = twin
        .asset_id(&s.asset)
        .map(str::to_string)
        .unwrap_or_else(|| imported.get(&s.asset.to_lowercase()).map_or(s.asset.clone(), |id| id.to_string()));
    let priority = |i: usize| s.priorities[i].map(|p| p.as_str().to_string()).unwrap_or_default();
    let values = [
        asset,
        s.kind.clone(),
        s.description.clone(),
        s.unit.clone(),
        opt_number(s.range[0]),
        opt_number(s.range[1]),
        opt_number(s.limits[0]),
        opt_number(s.limits[1]),
        opt_number(s.limits[2]),
        opt_number(s.limits[3]),
        number(s.deadband),
        s.on_delay_s.to_string(),
        s.alarm_source.clone(),
        s.alarm_prefix.clone().unwrap_or_default(),
        priority(0),
        priority(1),
        priority(2),
        priority(3),
        s.opcua_node.as_ref().map(ToString::to_string).unwrap_or_default(),
    ];
    SENSOR_FIELDS[1..].iter().copied().zip(values).collect()
}

/// An alarm point's key as the twin spells its asset and tag (else as the import does).
fn point_key_of(p: &AlarmPointRow, twin: &Twin, imported: &HashMap<String, &str>) -> String {
    let asset = twin
        .asset_id(&p.asset)
        .map(str::to_string)
        .unwrap_or_else(|| imported.get(&p.asset.to_lowercase()).map_or(p.asset.clone(), |id| id.to_string()));
    let sensor = p.sensor.as_deref().map(|s| twin.sensor_id(s).unwrap_or(s));
    point_key(&asset, sensor, &p.code)
}

fn point_fields(p: &AlarmPointRow, twin: &Twin) -> Fields {
    let sensor = p.sensor.as_deref().map(|s| twin.sensor_id(s).unwrap_or(s).to_string()).unwrap_or_default();
    let values = [
        sensor,
        p.priority.map(|p| p.as_str().to_string()).unwrap_or_default(),
        p.class.clone(),
        p.causes.clone(),
        p.consequence.clone(),
        p.response.clone(),
        opt_number(p.respond_within_min),
        opt_number(p.set_point),
        opt_number(p.deadband),
        p.on_delay_s.map(|d| d.to_string()).unwrap_or_default(),
        p.off_delay_s.map(|d| d.to_string()).unwrap_or_default(),
        p.rationalized_by.clone(),
        p.rationalized_on.clone(),
    ];
    ALARM_POINT_FIELDS[2..].iter().copied().zip(values).collect()
}

fn compare(what: &'static str, rows: &[(String, Fields)], twin: &Rows, mode: Mode, changes: &mut Vec<Change>) {
    let mut seen = HashSet::new();
    for (id, fields) in rows {
        seen.insert(id.to_lowercase());
        let Some((stored, before, retired)) = twin.get(&id.to_lowercase()) else {
            changes.push(Change::Added { what, id: id.clone() });
            continue;
        };
        if *retired {
            changes.push(Change::Returned { what, id: stored.clone() });
        }
        for ((field, to), (_, from)) in fields.iter().zip(before) {
            if to != from {
                changes.push(Change::Changed { what, id: stored.clone(), field, from: from.clone(), to: to.clone() });
            }
        }
    }
    if mode == Mode::Full {
        let mut gone: Vec<&String> =
            twin.iter().filter(|(k, (_, _, retired))| !retired && !seen.contains(*k)).map(|(_, (id, ..))| id).collect();
        gone.sort();
        changes.extend(gone.into_iter().map(|id| Change::Retired { what, id: id.clone() }));
    }
}

/// Ids given twice in the import, in any case.
fn duplicates(model: &PlantModel) -> Vec<Problem> {
    let mut problems = Vec::new();
    let mut first: HashMap<String, String> = HashMap::new();
    for s in &model.stations {
        if let Some(at) =
            first.insert(format!("station {}", s.id.to_lowercase()), format!("{}:{}", s.at.file, s.at.line))
        {
            problems.push(Problem {
                at: s.at.clone(),
                column: 0,
                field: Some("id".into()),
                message: format!("duplicate station id {} (first at {at})", s.id),
            });
        }
    }
    for a in &model.assets {
        let key = format!("asset {}", a.id.as_str().to_lowercase());
        if let Some(at) = first.insert(key, format!("{}:{}", a.raw.at.file, a.raw.at.line)) {
            problems.push(
                a.raw.problem(
                    "id",
                    format!("duplicate asset id {} (first at {at}); ids are compared in any case", a.id),
                ),
            );
        }
    }
    for s in &model.sensors {
        let key = format!("sensor {}", s.id.as_str().to_lowercase());
        if let Some(at) = first.insert(key, format!("{}:{}", s.raw.at.file, s.raw.at.line)) {
            problems.push(
                s.raw.problem("id", format!("duplicate tag {} (first at {at}); ids are compared in any case", s.id)),
            );
        }
    }
    for p in &model.alarm_points {
        let key = format!("alarm point {}", p.key().to_lowercase());
        if let Some(at) = first.insert(key, format!("{}:{}", p.raw.at.file, p.raw.at.line)) {
            problems.push(p.raw.problem(
                "code",
                format!("alarm point {} is given twice (first at {at}); one row per alarm point", p.key()),
            ));
        }
    }
    problems
}

/// The checks that need the whole import and the twin: duplicates, references to
/// stations and assets that exist in neither.
fn check(model: &PlantModel, twin: &Twin, mode: Mode) -> Result<(), ImportError> {
    let mut problems = duplicates(model);
    let stations: HashSet<String> = model.stations.iter().map(|s| s.id.to_lowercase()).collect();
    let station_known =
        |id: &str| stations.contains(&id.to_lowercase()) || twin.stations.contains_key(&id.to_lowercase());
    let imported = imported_assets(model);
    let in_import = |id: &str| imported.contains_key(&id.to_lowercase());
    // In a full import an asset must be in the files; in a partial one, in the twin will do.
    let asset_known = |id: &str| in_import(id) || (mode == Mode::Partial && twin.asset_id(id).is_some());
    for a in &model.assets {
        if !station_known(&a.station) {
            let known: Vec<&str> = model
                .stations
                .iter()
                .map(|s| s.id.as_str())
                .chain(twin.stations.values().map(|(id, _)| id.as_str()))
                .collect();
            problems.push(a.raw.problem(
                "station",
                format!(
                    "unknown station '{}': stations are {}; add it to [[stations]] in the plant TOML",
                    a.station,
                    list(&known)
                ),
            ));
        }
        for (field, target) in [("parent", &a.parent), ("drives", &a.drives)] {
            if let Some(t) = target
                && !asset_known(t)
            {
                problems.push(a.raw.problem(field, format!("unknown asset '{t}': it is in no file of this import")));
            }
        }
    }
    for s in &model.sensors {
        if !asset_known(&s.asset) {
            let hint = if twin.asset_id(&s.asset).is_some() {
                "it is in the twin but not in this full import, which would retire it: add it to the asset files, or import with --partial"
            } else {
                "add it to the asset register, or correct the tag's asset column"
            };
            problems.push(s.raw.problem("asset", format!("unknown asset '{}': {hint}", s.asset)));
        }
    }
    problems.extend(check_alarm_points(model, twin, &asset_known));
    problems.extend(check_connections(model, &asset_known));
    if model.site.is_none() && twin.site.is_none() && !model.stations.is_empty() {
        problems.push(Problem {
            at: model.stations[0].at.clone(),
            column: 0,
            field: None,
            message: "the twin has no site yet: give [site] (id, name, timezone) in the plant TOML".into(),
        });
    }
    if problems.is_empty() { Ok(()) } else { Err(ImportError(problems)) }
}

/// An alarm point's asset must be known, and its sensor, when given, known and on
/// that asset.
fn check_alarm_points(model: &PlantModel, twin: &Twin, asset_known: &dyn Fn(&str) -> bool) -> Vec<Problem> {
    let imported: HashMap<String, &str> =
        model.sensors.iter().map(|s| (s.id.as_str().to_lowercase(), s.asset.as_str())).collect();
    let sensor_asset = |id: &str| -> Option<String> {
        imported.get(&id.to_lowercase()).map(|a| a.to_string()).or_else(|| {
            twin.sensors.get(&id.to_lowercase()).and_then(|(_, f, _)| f.first()).map(|(_, asset)| asset.clone())
        })
    };
    let mut problems = Vec::new();
    for p in &model.alarm_points {
        if !asset_known(&p.asset) {
            problems.push(p.raw.problem(
                "asset",
                format!("unknown asset '{}': it is neither in the twin nor in this import's asset files", p.asset),
            ));
            continue;
        }
        let Some(sensor) = &p.sensor else { continue };
        match sensor_asset(sensor) {
            None => problems.push(p.raw.problem(
                "sensor",
                format!("unknown tag '{sensor}': it is neither in the twin nor in this import's tag files; correct it or leave it empty"),
            )),
            Some(on) if !on.eq_ignore_ascii_case(&p.asset) => problems.push(p.raw.problem(
                "sensor",
                format!("tag '{sensor}' is on {on}, not on {}: an alarm point's tag is on its asset", p.asset),
            )),
            Some(_) => {}
        }
    }
    problems
}

/// Each connection between two assets the import or the twin has, given once.
fn check_connections(model: &PlantModel, asset_known: &dyn Fn(&str) -> bool) -> Vec<Problem> {
    let mut problems = Vec::new();
    let mut first: HashMap<String, String> = HashMap::new();
    for c in &model.connections {
        for (field, id) in [("from", &c.from), ("to", &c.to)] {
            if !asset_known(id) {
                problems.push(c.raw.problem(
                    field,
                    format!("unknown asset '{id}': it is neither in the twin nor in this import's asset files"),
                ));
            }
        }
        let key = ConnectionRow::key(&c.from, c.kind, &c.to).to_lowercase();
        let here = format!("{}:{}", c.raw.at.file, c.raw.at.line);
        if let Some(at) = first.insert(key, here) {
            problems.push(
                c.raw
                    .problem("from", format!("{} {} {} is given twice (first at {at})", c.from, c.kind.as_str(), c.to)),
            );
        }
    }
    problems
}

fn list(ids: &[&str]) -> String {
    if ids.is_empty() { "none yet".into() } else { ids.iter().take(12).copied().collect::<Vec<_>>().join(", ") }
}

/// What the import adds, changes or returns, as (kind of row, lower-case id).
struct Touched(HashSet<(&'static str, String)>);

impl Touched {
    fn of(changes: &ChangeSet) -> Touched {
        Touched(
            changes
                .changes
                .iter()
                .filter_map(|ch| match ch {
                    Change::Added { what, id } | Change::Returned { what, id } | Change::Changed { what, id, .. } => {
                        Some((*what, id.to_lowercase()))
                    }
                    Change::Retired { .. } => None,
                })
                .collect(),
        )
    }

    fn has(&self, what: &'static str, id: &str) -> bool {
        self.0.contains(&(what, id.to_lowercase()))
    }
}

fn write_site_and_stations(c: &Connection, model: &PlantModel, touched: &Touched) -> Result<(), StoreError> {
    let twin = Twin::read(c)?;
    if let Some((site, _)) = &model.site {
        c.execute(
            "INSERT INTO sites (id, name, timezone) VALUES (?1, ?2, ?3)
             ON CONFLICT (id) DO UPDATE SET name = excluded.name, timezone = excluded.timezone",
            params![twin.site.as_ref().map_or(&site.id, |s| &s.0), site.name, site.timezone],
        )?;
    }
    let site_id: Option<String> = c.query_row("SELECT id FROM sites LIMIT 1", [], |r| r.get(0)).optional()?;
    for s in model.stations.iter().filter(|s| touched.has("station", &s.id)) {
        let id = twin.stations.get(&s.id.to_lowercase()).map_or(s.id.clone(), |(id, _)| id.clone());
        c.execute(
            "INSERT INTO stations (id, site_id, name) VALUES (?1, ?2, ?3) ON CONFLICT (id) DO UPDATE SET name = excluded.name",
            params![id, site_id, s.name],
        )?;
    }
    Ok(())
}

/// Writes what `diff` found, in an order the references allow.
fn write(c: &Connection, model: &PlantModel, changes: &ChangeSet) -> Result<(), StoreError> {
    let touched = Touched::of(changes);
    write_site_and_stations(c, model, &touched)?;
    let now = Timestamp::now().unix();
    // The stations as now stored; assets first without their references to other
    // assets, then the references.
    let twin = Twin::read(c)?;
    for a in model.assets.iter().filter(|a| touched.has("asset", a.id.as_str())) {
        let f = asset_fields(a, &twin);
        let id = twin.asset_id(a.id.as_str()).unwrap_or(a.id.as_str()).to_string();
        c.prepare_cached(
            "INSERT INTO assets (id, station_id, kind, name, status, criticality, manufacturer, model, machine_class,
                                 rated_power_kw, installed_on, opcua_node, retired_at)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, NULL)
             ON CONFLICT (id) DO UPDATE SET station_id = excluded.station_id, kind = excluded.kind, name = excluded.name,
                 status = excluded.status, criticality = excluded.criticality, manufacturer = excluded.manufacturer,
                 model = excluded.model, machine_class = excluded.machine_class, rated_power_kw = excluded.rated_power_kw,
                 installed_on = excluded.installed_on, opcua_node = excluded.opcua_node, retired_at = NULL",
        )?
        .execute(params![
            id,
            f[0].1,
            f[1].1,
            f[2].1,
            f[3].1,
            f[4].1,
            f[5].1,
            f[6].1,
            a.machine_class,
            a.rated_power_kw,
            f[9].1,
            a.opcua_node.as_ref().map(ToString::to_string)
        ])?;
    }
    let twin = Twin::read(c)?;
    for a in model.assets.iter().filter(|a| touched.has("asset", a.id.as_str())) {
        let refer = |t: &Option<String>| t.as_deref().map(|t| resolve(t, &twin).to_string());
        c.prepare_cached("UPDATE assets SET parent_id = ?2, drives = ?3 WHERE id = ?1")?.execute(params![
            resolve(a.id.as_str(), &twin),
            refer(&a.parent),
            refer(&a.drives)
        ])?;
    }
    for s in model.sensors.iter().filter(|s| touched.has("sensor", s.id.as_str())) {
        let stored = twin.sensors.get(&s.id.as_str().to_lowercase()).map_or(s.id.as_str(), |(id, ..)| id.as_str());
        let asset = resolve(&s.asset, &twin);
        let p = |i: usize| s.priorities[i].map(|p| p.as_str());
        c.prepare_cached(
            "INSERT INTO sensors (id, asset_id, kind, description, unit, limit_ll, limit_l, limit_h, limit_hh, deadband,
                                  on_delay_s, alarm_source, alarm_prefix, priority_ll, priority_l, priority_h, priority_hh,
                                  range_low, range_high, opcua_node, retired_at)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16, ?17, ?18, ?19, ?20, NULL)
             ON CONFLICT (id) DO UPDATE SET asset_id = excluded.asset_id, kind = excluded.kind,
                 description = excluded.description, unit = excluded.unit, range_low = excluded.range_low,
                 range_high = excluded.range_high, limit_ll = excluded.limit_ll,
                 limit_l = excluded.limit_l, limit_h = excluded.limit_h, limit_hh = excluded.limit_hh,
                 deadband = excluded.deadband, on_delay_s = excluded.on_delay_s, alarm_source = excluded.alarm_source,
                 alarm_prefix = excluded.alarm_prefix, priority_ll = excluded.priority_ll, priority_l = excluded.priority_l,
                 priority_h = excluded.priority_h, priority_hh = excluded.priority_hh,
                 opcua_node = excluded.opcua_node, retired_at = NULL",
        )?
        .execute(params![
            stored, asset, s.kind, s.description, s.unit, s.limits[0], s.limits[1], s.limits[2], s.limits[3], s.deadband,
            s.on_delay_s, s.alarm_source, s.alarm_prefix, p(0), p(1), p(2), p(3), s.range[0], s.range[1],
            s.opcua_node.as_ref().map(ToString::to_string)
        ])?;
    }
    for change in &changes.changes {
        let sql = match change {
            Change::Retired { what: "asset", .. } => "UPDATE assets SET retired_at = ?2 WHERE id = ?1",
            Change::Retired { what: "sensor", .. } => "UPDATE sensors SET retired_at = ?2 WHERE id = ?1",
            _ => continue,
        };
        if let Change::Retired { id, .. } = change {
            c.prepare_cached(sql)?.execute(params![id, now])?;
        }
    }
    Ok(())
}

/// Writes the master alarm database's rows that `diff` found changed, with one history
/// row per changed field (and per point added, returned or retired).
/// Adds, returns and retires the connections `changes` names.
fn write_connections(c: &Connection, model: &PlantModel, changes: &ChangeSet) -> Result<(), StoreError> {
    let touched = Touched::of(changes);
    let twin = Twin::read(c)?;
    for r in &model.connections {
        let (from, to) = (resolve(&r.from, &twin), resolve(&r.to, &twin));
        if touched.has("connection", &ConnectionRow::key(from, r.kind, to)) {
            c.prepare_cached(
                "INSERT INTO asset_connections (from_asset, kind, to_asset) VALUES (?1, ?2, ?3)
                 ON CONFLICT (from_asset, kind, to_asset) DO UPDATE SET retired_at = NULL",
            )?
            .execute(params![from, r.kind, to])?;
        }
    }
    let now = Timestamp::now().unix();
    for change in &changes.changes {
        if let Change::Retired { what: "connection", id } = change {
            c.prepare_cached(
                "UPDATE asset_connections SET retired_at = ?2 WHERE from_asset || ' ' || kind || ' ' || to_asset = ?1",
            )?
            .execute(params![id, now])?;
        }
    }
    Ok(())
}

fn write_alarm_points(c: &Connection, model: &PlantModel, changes: &ChangeSet, actor: &str) -> Result<(), StoreError> {
    let twin = Twin::read(c)?;
    let imported = imported_assets(model);
    let now = Timestamp::now().unix();
    let touched = Touched::of(changes);
    let mut ids: HashMap<String, i64> = twin.point_ids.clone();
    for p in &model.alarm_points {
        let key = point_key_of(p, &twin, &imported);
        if !touched.has("alarm point", &key) {
            continue;
        }
        let asset = resolve(&p.asset, &twin);
        let sensor = p.sensor.as_deref().map(|s| twin.sensor_id(s).unwrap_or(s));
        let values = params![
            asset,
            p.code,
            sensor,
            p.priority.map(|p| p.as_str()),
            p.class,
            p.causes,
            p.consequence,
            p.response,
            p.respond_within_min,
            p.set_point,
            p.deadband,
            p.on_delay_s,
            p.off_delay_s,
            p.rationalized_by,
            p.rationalized_on
        ];
        match ids.get(&key.to_lowercase()) {
            Some(&id) => {
                c.prepare_cached(
                    "UPDATE alarm_points SET asset_id = ?1, code = ?2, sensor_id = ?3, priority = ?4, class = ?5,
                         causes = ?6, consequence = ?7, response = ?8, respond_within_min = ?9, set_point = ?10,
                         deadband = ?11, on_delay_s = ?12, off_delay_s = ?13, rationalized_by = ?14,
                         rationalized_on = ?15, retired_at = NULL
                     WHERE id = ?16",
                )?
                .execute(rusqlite::params_from_iter(values.iter().copied().chain([&id as &dyn rusqlite::ToSql])))?;
            }
            None => {
                c.prepare_cached(
                    "INSERT INTO alarm_points (asset_id, code, sensor_id, priority, class, causes, consequence, response,
                         respond_within_min, set_point, deadband, on_delay_s, off_delay_s, rationalized_by, rationalized_on)
                     VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15)",
                )?
                .execute(values)?;
                ids.insert(key.to_lowercase(), c.last_insert_rowid());
            }
        }
    }
    for change in &changes.changes {
        let (id, field, old, new) = match change {
            Change::Added { what: "alarm point", id } => (id, "point", "", "added"),
            Change::Returned { what: "alarm point", id } => (id, "point", "retired", "returned"),
            Change::Retired { what: "alarm point", id } => (id, "point", "", "retired"),
            Change::Changed { what: "alarm point", id, field, from, to } => (id, *field, from.as_str(), to.as_str()),
            _ => continue,
        };
        let Some(&point) = ids.get(&id.to_lowercase()) else { continue };
        if matches!(change, Change::Retired { .. }) {
            c.prepare_cached("UPDATE alarm_points SET retired_at = ?2 WHERE id = ?1")?.execute(params![point, now])?;
        }
        c.prepare_cached(
            "INSERT INTO alarm_point_changes (point_id, at, actor, source, field, old, new)
             VALUES (?1, ?2, ?3, 'import', ?4, ?5, ?6)",
        )?
        .execute(params![point, now, actor, field, old, new])?;
    }
    Ok(())
}
