//! The demo plant: `seed/plant.toml` expanded into assets, sensors, a week of 1-minute
//! readings with two developing faults, the alarm history those readings imply, and
//! the maintenance history; then `seed/docs/` indexed.

mod signals;
mod spec;

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use anyhow::{Context, bail, ensure};
use rusqlite::{Connection, params};

use crate::alarms::limits;
pub use crate::alarms::limits::{Level, Point, Transition, scan, set_points};
pub use crate::alarms::limits::{code as alarm_code, severity as alarm_severity};
pub use crate::support::Rng;
pub use signals::Signal;
pub use spec::{ConnectionSpec, Fault, Limits, PlantSpec};

use crate::domain::{AssetId, AssetStatus, Criticality, Timestamp};
use crate::plant::{self, ImportError, Mode, Origin, PlantModel, Site, StationRow};
use crate::rag::{IndexReport, index_dir};
use crate::store::{Store, StoreError, insert_readings};

/// Samples a reading must stay beyond a set point before the alarm raises.
const ON_DELAY_SAMPLES: usize = 2;
/// Alarms raised this close to the end of the seeded week are left unacknowledged.
const UNACKED_WINDOW_SECS: i64 = 4 * 3600;
const OPERATORS: &[&str] = &["operator.kaur", "operator.mensah", "operator.doyle"];

pub struct SeedOptions {
    /// The folder holding `plant.toml` and `docs/`.
    pub dir: PathBuf,
    /// How many copies of the plant to build (1 for the demo).
    pub scale: u32,
    /// The last reading's time; the week ends here.
    pub end: Timestamp,
    pub days: u32,
}

#[derive(Debug, Default)]
pub struct SeedReport {
    pub assets: usize,
    pub sensors: usize,
    pub readings: usize,
    pub alarms: usize,
    pub active_alarms: usize,
    pub maintenance: usize,
    pub docs: IndexReport,
}

pub fn load_spec(dir: &Path) -> anyhow::Result<PlantSpec> {
    let path = dir.join("plant.toml");
    let text = std::fs::read_to_string(&path)
        .with_context(|| format!("reading {} (pass --from with the folder that holds plant.toml)", path.display()))?;
    let spec: PlantSpec = toml::from_str(&text).with_context(|| format!("parsing {}", path.display()))?;
    validate(&spec).with_context(|| format!("checking {}", path.display()))?;
    Ok(spec)
}

fn validate(spec: &PlantSpec) -> anyhow::Result<()> {
    for t in spec.templates.values().flatten() {
        t.sensor_kind().map_err(anyhow::Error::msg)?;
    }
    for a in &spec.assets {
        AssetId::parse(&a.id)?;
        let (kind, _, _) = a.parsed().map_err(anyhow::Error::msg)?;
        ensure!(spec.stations.iter().any(|s| s.id == a.station), "asset {}: unknown station {}", a.id, a.station);
        ensure!(spec.templates.contains_key(kind.as_str()), "asset {}: no sensor template for kind {kind}", a.id);
        if let Some(pump) = &a.drives {
            ensure!(spec.assets.iter().any(|p| &p.id == pump), "asset {}: drives unknown asset {pump}", a.id);
        }
    }
    for m in &spec.maintenance {
        ensure!(spec.assets.iter().any(|a| a.id == m.asset), "maintenance: unknown asset {}", m.asset);
    }
    Ok(())
}

/// Builds the plant into an empty database: the plant through the same import a site's
/// files go through (checked alike, audited as `seed`'s), then its history.
pub fn seed(store: &Store, opts: &SeedOptions) -> anyhow::Result<SeedReport> {
    ensure!(opts.scale >= 1 && opts.scale <= 10_000, "--scale must be between 1 and 10,000");
    let spec = Arc::new(load_spec(&opts.dir)?);
    let existing: i64 = store.read()?.query_row("SELECT count(*) FROM assets", [], |r| r.get(0))?;
    if existing > 0 {
        bail!(
            "{} already holds a plant ({existing} assets); seed into a new file with --db, or delete this one",
            store.path().display()
        );
    }
    let file = opts.dir.join("plant.toml").display().to_string();
    let mut model = plant_model(&spec, opts.scale, &file)?;
    // The demo site's rationalization sheet: some points rationalized, others not yet,
    // as at a site part-way through its alarm rationalization.
    let sheet = opts.dir.join("alarm_rationalization.csv");
    if sheet.exists() {
        model.alarm_points = plant::read(&[sheet])?.alarm_points;
    }
    let mut report = SeedReport { assets: model.assets.len(), sensors: model.sensors.len(), ..SeedReport::default() };
    plant::import(store.writer(), model, Mode::Full, false, "seed", &file)?;
    let keys: Arc<HashMap<String, i64>> = Arc::new(
        store
            .read()?
            .prepare("SELECT id, key FROM sensors")?
            .query_map([], |r| Ok((r.get(0)?, r.get(1)?)))?
            .collect::<rusqlite::Result<_>>()?,
    );
    let (end, days) = (opts.end.floor_minute(), opts.days);
    for copy in 0..opts.scale {
        let (spec, keys) = (Arc::clone(&spec), Arc::clone(&keys));
        let part = store.writer().call(move |conn| -> Result<SeedReport, StoreError> {
            Ok(insert_history(conn, &spec, &keys, copy, end, days)?)
        })?;
        report.readings += part.readings;
        report.alarms += part.alarms;
        report.active_alarms += part.active_alarms;
        report.maintenance += part.maintenance;
    }
    report.docs = index_dir(store, &opts.dir.join("docs"), Timestamp::now())?;
    Ok(report)
}

/// Asset ids of copy `copy`: numbers offset by 100 per copy (PUMP-007 -> PUMP-107).
pub fn copy_asset_id(id: &str, copy: u32) -> String {
    if copy == 0 {
        return id.to_string();
    }
    let (prefix, digits) = id.split_once('-').expect("validated asset id");
    let n: u32 = digits.parse().expect("validated asset id");
    format!("{prefix}-{:03}", n + 100 * copy)
}

fn copy_station_id(id: &str, copy: u32) -> String {
    if copy == 0 { id.to_string() } else { format!("{id}-{copy}") }
}

/// The demo plant, `scale` copies of it, as a plant import describes a site.
fn plant_model(spec: &PlantSpec, scale: u32, file: &str) -> Result<PlantModel, ImportError> {
    let at = Origin { file: file.to_string(), line: 0 };
    let site = Site { id: spec.site.id.clone(), name: spec.site.name.clone(), timezone: spec.site.timezone.clone() };
    let mut model = PlantModel { site: Some((site, at.clone())), ..PlantModel::default() };
    let mut problems = Vec::new();
    let number = |v: Option<f64>| v.map(|v| v.to_string()).unwrap_or_default();
    for copy in 0..scale {
        for s in &spec.stations {
            let name = if copy == 0 { s.name.clone() } else { format!("{} ({})", s.name, copy + 1) };
            model.stations.push(StationRow { id: copy_station_id(&s.id, copy), name, at: at.clone() });
        }
        for a in &spec.assets {
            let fields = [
                ("id", copy_asset_id(&a.id, copy)),
                ("station", copy_station_id(&a.station, copy)),
                ("kind", a.kind.clone()),
                ("name", a.name.clone()),
                ("status", a.status.clone()),
                ("criticality", a.criticality.clone()),
                ("manufacturer", a.manufacturer.clone()),
                ("model", a.model.clone()),
                ("machine_class", a.machine_class.clone().unwrap_or_default()),
                ("rated_power_kw", number(a.rated_power_kw)),
                ("installed_on", a.installed_on.clone()),
                ("drives", a.drives.as_deref().map(|p| copy_asset_id(p, copy)).unwrap_or_default()),
            ];
            problems.extend(model.push_asset(at.clone(), &fields).err().into_iter().flatten());
        }
        for s in sensor_plans(spec, copy) {
            let t = s.signal.template;
            let limits = t.limits.as_array();
            let fields = [
                ("id", s.sensor_id.clone()),
                ("asset", s.asset_id.clone()),
                ("kind", t.kind.clone()),
                ("description", t.description.clone()),
                ("unit", t.unit.clone()),
                ("ll", number(limits[0])),
                ("l", number(limits[1])),
                ("h", number(limits[2])),
                ("hh", number(limits[3])),
                ("deadband", t.deadband.to_string()),
                ("alarm_prefix", t.alarm_prefix.clone().unwrap_or_default()),
            ];
            problems.extend(model.push_sensor(at.clone(), &fields).err().into_iter().flatten());
        }
        for c in &spec.connections {
            let fields =
                [("from", copy_asset_id(&c.from, copy)), ("kind", c.kind.clone()), ("to", copy_asset_id(&c.to, copy))];
            problems.extend(model.push_connection(at.clone(), &fields).err().into_iter().flatten());
        }
    }
    if problems.is_empty() { Ok(model) } else { Err(ImportError(problems)) }
}

/// Copy `copy`'s week: readings, the alarm history they imply, maintenance records.
fn insert_history(
    conn: &Connection,
    spec: &PlantSpec,
    keys: &HashMap<String, i64>,
    copy: u32,
    end: Timestamp,
    days: u32,
) -> rusqlite::Result<SeedReport> {
    let mut report = SeedReport::default();
    let n = days as usize * 24 * 60;
    let start = end.unix() - 60 * (n as i64 - 1);
    for s in sensor_plans(spec, copy) {
        let t = s.signal.template;
        // Every sensor of the plan was imported just before.
        let Some(&key) = keys.get(&s.sensor_id) else { continue };

        let mut rng = Rng::from_label(&format!("{}/{copy}", s.sensor_id));
        let values = s.signal.generate(start, n, &mut rng);
        let rows: Vec<(i64, f64)> =
            values.iter().enumerate().map(|(i, v)| ((start + 60 * i as i64) * 1000, *v)).collect();
        let limits = [t.limits.ll, t.limits.l, t.limits.h, t.limits.hh];
        report.readings += insert_readings(conn, key, &limits, &rows)?;

        let Some(prefix) = s.alarm_prefix() else { continue };
        for (level, set_point) in set_points(&t.limits.as_array()) {
            let transitions = scan(&values, level, set_point, t.deadband, ON_DELAY_SAMPLES);
            let (alarms, active) = insert_alarm_history(conn, &s, prefix, &transitions, start, end, &mut rng)?;
            report.alarms += alarms;
            report.active_alarms += active;
        }
    }
    for m in &spec.maintenance {
        let asset = copy_asset_id(&m.asset, copy);
        let date = end.plus_secs(-86_400 * m.days_ago).date();
        conn.prepare_cached(
            "INSERT INTO maintenance_records (asset_id, performed_on, kind, summary, technician)
             VALUES (?1, ?2, ?3, ?4, ?5)",
        )?
        .execute(params![asset, date, m.kind, m.summary, m.technician])?;
        conn.prepare_cached(
            "UPDATE assets SET last_maintenance_on = max(coalesce(last_maintenance_on, ''), ?2) WHERE id = ?1",
        )?
        .execute(params![asset, date])?;
        report.maintenance += 1;
    }
    Ok(report)
}

/// One sensor of the plant with what shapes its signal (shared by the seed and the
/// simulator, so live telemetry continues the seeded week).
pub struct SensorPlan<'a> {
    pub asset_id: String,
    pub asset_name: &'a str,
    pub criticality: Criticality,
    pub sensor_id: String,
    pub signal: signals::Signal<'a>,
}

impl SensorPlan<'_> {
    /// The alarm code prefix, if this sensor alarms: alarming is suppressed by design
    /// on machines that are not running.
    pub fn alarm_prefix(&self) -> Option<&str> {
        self.signal.template.alarm_prefix.as_deref().filter(|_| self.signal.running)
    }

    /// The alarm message SCADA sends when `level` raises at `value`.
    pub fn alarm_message(&self, level: Level, value: f64, set_point: f64) -> String {
        let t = self.signal.template;
        format!(
            "{}: {} {} at {value:.2} {} (set point {set_point} {})",
            self.asset_name,
            t.description,
            level.word(),
            t.unit,
            t.unit
        )
    }
}

/// Every sensor of copy `copy` of the plant, asset by asset.
pub fn sensor_plans(spec: &PlantSpec, copy: u32) -> Vec<SensorPlan<'_>> {
    let by_id: HashMap<&str, &spec::AssetSpec> = spec.assets.iter().map(|a| (a.id.as_str(), a)).collect();
    let mut out = Vec::new();
    for a in &spec.assets {
        let (kind, status, criticality) = a.parsed().expect("validated");
        let id = copy_asset_id(&a.id, copy);
        // A motor inherits the fault of the pump it drives.
        let driven = a.drives.as_deref().and_then(|p| by_id.get(p));
        let fault = a.fault.or(driven.and_then(|p| p.fault));
        let running = matches!(status, AssetStatus::Running);
        for t in &spec.templates[kind.as_str()] {
            let kind = t.sensor_kind().expect("validated");
            out.push(SensorPlan {
                sensor_id: format!("{id}.{}", t.tag),
                asset_id: id.clone(),
                asset_name: &a.name,
                criticality,
                signal: signals::Signal { template: t, kind, running, fault, via_motor: driven.is_some() },
            });
        }
    }
    out
}

/// Writes the occurrences one set point's transitions imply, with their journal, and
/// acknowledgements by the shift's operators. Returns (occurrences, still active).
fn insert_alarm_history(
    conn: &Connection,
    p: &SensorPlan,
    prefix: &str,
    transitions: &[Transition],
    start: i64,
    end: Timestamp,
    rng: &mut Rng,
) -> rusqlite::Result<(usize, usize)> {
    let mut count = (0, 0);
    let mut i = 0;
    while i < transitions.len() {
        let raise = transitions[i];
        let clear = transitions.get(i + 1).filter(|t| !t.raised);
        i += if clear.is_some() { 2 } else { 1 };

        let level = raise.level;
        let code = limits::code(prefix, level);
        let severity = limits::severity(level, p.criticality);
        let raised_at = start + 60 * raise.index as i64;
        let cleared_at = clear.map(|c| start + 60 * c.index as i64);
        let ack_at = Some(raised_at + 60 * (2 + rng.below(18) as i64))
            .filter(|&t| t <= end.unix() && raised_at < end.unix() - UNACKED_WINDOW_SECS);
        let acked_by = ack_at.map(|_| OPERATORS[rng.below(OPERATORS.len() as u64) as usize]);
        let state = match (cleared_at.is_some(), ack_at.is_some()) {
            (true, true) => "cleared",
            (true, false) => "rtn_unacknowledged",
            (false, true) => "acknowledged",
            (false, false) => "unacknowledged",
        };
        let message = p.alarm_message(level, raise.value, raise.set_point);
        let event_id = format!("seed:{}:{code}:{raised_at}", p.sensor_id);
        conn.prepare_cached(
            "INSERT INTO alarms (event_id, asset_id, sensor_id, code, severity, state, message, value,
                                 threshold, raised_at, last_raised_at, acked_at, acked_by, cleared_at)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?10, ?11, ?12, ?13)",
        )?
        .execute(params![
            event_id,
            p.asset_id,
            p.sensor_id,
            code,
            severity,
            state,
            message,
            raise.value,
            raise.set_point,
            raised_at,
            ack_at,
            acked_by,
            cleared_at
        ])?;
        let alarm_id = conn.last_insert_rowid();
        let mut journal = vec![(raised_at, "raised", Some(event_id.clone()), "scada", message.clone())];
        if let Some(at) = cleared_at {
            let value = clear.expect("cleared").value;
            journal.push((
                at,
                "cleared",
                Some(format!("{event_id}:clear")),
                "scada",
                format!("returned to normal at {value:.2} {}", p.signal.template.unit),
            ));
        }
        if let (Some(at), Some(by)) = (ack_at, acked_by) {
            journal.push((at, "acknowledged", None, by, String::new()));
        }
        journal.sort_by_key(|j| j.0);
        let mut insert = conn.prepare_cached(
            "INSERT INTO alarm_events (alarm_id, event_id, kind, at, actor, detail) VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
        )?;
        for (at, kind, event, actor, detail) in journal {
            insert.execute(params![alarm_id, event, kind, at, actor, detail])?;
        }
        count.0 += 1;
        count.1 += usize::from(cleared_at.is_none());
    }
    Ok(count)
}
