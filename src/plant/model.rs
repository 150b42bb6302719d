//! The plant model an import builds, row by row, whatever file a row came from. Each
//! field is parsed here once, so a TOML table and a CSV row are checked alike.

use super::Problem;
use crate::domain::{AssetId, AssetStatus, ConnectionKind, Criticality, NodeRef, SensorId, Severity, kind_name};

/// Where a row came from: file and 1-based line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Origin {
    pub file: String,
    pub line: u64,
}

/// The fields of a row as written: each with its column (1-based; 0 in TOML) and the
/// header or key it came under.
#[derive(Debug, Clone)]
pub struct RawRow {
    pub at: Origin,
    pub fields: Vec<RawField>,
}

#[derive(Debug, Clone)]
pub struct RawField {
    /// The canonical name (`unit`), whatever the header said (`Eng Units`).
    pub name: &'static str,
    pub column: usize,
    pub header: String,
    pub value: String,
}

impl RawRow {
    fn get(&self, name: &str) -> Option<&RawField> {
        self.fields.iter().find(|f| f.name == name && !f.value.trim().is_empty())
    }

    fn text(&self, name: &str) -> Option<String> {
        self.get(name).map(|f| f.value.trim().to_string())
    }

    /// A problem with a field of this row (or the row, if the field is not in it).
    pub fn problem(&self, name: &str, message: impl Into<String>) -> Problem {
        let field = self.fields.iter().find(|f| f.name == name);
        Problem {
            at: self.at.clone(),
            column: field.map_or(0, |f| f.column),
            field: Some(field.map_or_else(|| name.to_string(), |f| f.header.clone())),
            message: message.into(),
        }
    }

    fn required(&self, name: &str, what: &str, problems: &mut Vec<Problem>) -> String {
        self.text(name).unwrap_or_else(|| {
            problems.push(self.problem(name, format!("{what} is required and empty")));
            String::new()
        })
    }

    fn number(&self, name: &str, problems: &mut Vec<Problem>) -> Option<f64> {
        let f = self.get(name)?;
        let v = f.value.trim();
        match v.parse::<f64>() {
            Ok(n) if n.is_finite() => Some(n),
            _ => {
                problems.push(self.problem(
                    name,
                    format!("'{v}' is not a number: write it with digits and a decimal point (4.5), or leave it empty"),
                ));
                None
            }
        }
    }
}

#[derive(Debug, Clone, PartialEq)]
pub struct Site {
    pub id: String,
    pub name: String,
    pub timezone: String,
}

#[derive(Debug, Clone)]
pub struct StationRow {
    pub id: String,
    pub name: String,
    pub at: Origin,
}

#[derive(Debug, Clone)]
pub struct AssetRow {
    pub id: AssetId,
    pub station: String,
    pub kind: String,
    pub name: String,
    pub status: AssetStatus,
    pub criticality: Criticality,
    pub manufacturer: String,
    pub model: String,
    pub machine_class: Option<String>,
    pub rated_power_kw: Option<f64>,
    pub installed_on: String,
    pub parent: Option<String>,
    pub drives: Option<String>,
    /// Its OPC UA object, by namespace URI: conditions whose source is this object (the
    /// equipment, as Kepware, Ignition and asyncua report limit alarms) land on it.
    pub opcua_node: Option<NodeRef>,
    pub raw: RawRow,
}

/// An asset's fields by their canonical names (CSV headers, TOML keys, export columns).
pub const ASSET_FIELDS: [&str; 14] = [
    "id",
    "station",
    "kind",
    "name",
    "status",
    "criticality",
    "manufacturer",
    "model",
    "machine_class",
    "rated_power_kw",
    "installed_on",
    "parent",
    "drives",
    "opcua_node",
];
/// A sensor's fields likewise.
pub const SENSOR_FIELDS: [&str; 20] = [
    "id",
    "asset",
    "kind",
    "description",
    "unit",
    "range_low",
    "range_high",
    "ll",
    "l",
    "h",
    "hh",
    "deadband",
    "on_delay_s",
    "alarm_source",
    "alarm_prefix",
    "priority_ll",
    "priority_l",
    "priority_h",
    "priority_hh",
    "opcua_node",
];

/// Limits in the order ll, l, h, hh.
pub type Limits = [Option<f64>; 4];
pub const LIMIT_NAMES: [&str; 4] = ["ll", "l", "h", "hh"];

#[derive(Debug, Clone)]
pub struct SensorRow {
    pub id: SensorId,
    pub asset: String,
    pub kind: String,
    pub description: String,
    pub unit: String,
    /// The instrument's measuring range (Sparkplug's engLow and engHigh).
    pub range: [Option<f64>; 2],
    pub limits: Limits,
    pub deadband: f64,
    pub on_delay_s: i64,
    /// `scada` (alarms arrive as SCADA events) or `limits` (raised from readings).
    pub alarm_source: String,
    pub alarm_prefix: Option<String>,
    pub priorities: [Option<Severity>; 4],
    /// Its OPC UA node, by namespace URI: twinops subscribes to it when `[opcua]` is on.
    pub opcua_node: Option<NodeRef>,
    pub raw: RawRow,
}

/// An alarm point's fields by their canonical names (the rationalization sheet's
/// headers as `plant export` writes them).
pub const ALARM_POINT_FIELDS: [&str; 15] = [
    "asset",
    "code",
    "sensor",
    "priority",
    "class",
    "causes",
    "consequence",
    "response",
    "respond_within_min",
    "set_point",
    "deadband",
    "on_delay_s",
    "off_delay_s",
    "rationalized_by",
    "rationalized_on",
];

/// One alarm point of the master alarm database, as a rationalization sheet gives it:
/// what the alarm means and what the operator does about it.
#[derive(Debug, Clone)]
pub struct AlarmPointRow {
    /// Empty when the sheet names only the tag: the import takes the tag's asset.
    pub asset: String,
    /// The alarm code as alarms carry it (`PRESS-SUC-LO`), compared in any case.
    pub code: String,
    pub sensor: Option<String>,
    pub priority: Option<Severity>,
    pub class: String,
    pub causes: String,
    pub consequence: String,
    pub response: String,
    /// Allowable response time, in minutes.
    pub respond_within_min: Option<f64>,
    pub set_point: Option<f64>,
    pub deadband: Option<f64>,
    pub on_delay_s: Option<i64>,
    pub off_delay_s: Option<i64>,
    pub rationalized_by: String,
    /// `YYYY-MM-DD`.
    pub rationalized_on: String,
    pub raw: RawRow,
}

impl AlarmPointRow {
    /// The point as the sheet names it: `RWP-101A VT-10010 VIBRATION-HI`, or
    /// `PUMP-004 PRESS-SUC-LO` without a tag.
    pub fn key(&self) -> String {
        point_key(&self.asset, self.sensor.as_deref(), &self.code)
    }
}

/// How one asset acts on another, cause first: `from` feeds, powers, supplies air to or
/// controls `to`. Written either way round (`fed by`, `powered by`), stored this way.
#[derive(Debug, Clone)]
pub struct ConnectionRow {
    pub from: String,
    pub to: String,
    pub kind: ConnectionKind,
    pub raw: RawRow,
}

/// A connection's fields by their canonical names.
pub const CONNECTION_FIELDS: [&str; 3] = ["from", "kind", "to"];

impl ConnectionRow {
    /// `PUMP-001 feeds VLV-001`: the key the import compares by.
    pub fn key(from: &str, kind: ConnectionKind, to: &str) -> String {
        format!("{from} {} {to}", kind.as_str())
    }
}

/// A connection's kind as plant files write it, and whether the row names the effect
/// first (`VLV-001 fed by PUMP-001`).
pub fn connection_word(s: &str) -> Option<(ConnectionKind, bool)> {
    let folded: String = s.trim().to_lowercase().replace(['_', '-'], " ");
    Some(match folded.as_str() {
        "feeds" | "feeds into" | "flows to" | "discharges to" | "supplies" | "process" | "flow" => {
            (ConnectionKind::Feeds, false)
        }
        "fed by" | "fed from" | "flows from" | "suction from" => (ConnectionKind::Feeds, true),
        "powers" | "supplies power to" | "power" | "electrical" | "electrical supply" => {
            (ConnectionKind::Powers, false)
        }
        "powered by" | "power from" | "supplied power by" | "power supply from" => (ConnectionKind::Powers, true),
        "supplies air" | "supplies air to" | "air" | "instrument air" => (ConnectionKind::SuppliesAir, false),
        "air from" | "supplied air by" | "instrument air from" => (ConnectionKind::SuppliesAir, true),
        "controls" | "control" | "drives signal to" => (ConnectionKind::Controls, false),
        "controlled by" | "control from" => (ConnectionKind::Controls, true),
        _ => return None,
    })
}

pub fn connection_row(raw: RawRow) -> Result<ConnectionRow, Vec<Problem>> {
    let mut problems = Vec::new();
    let first = raw.required("from", "the asset the connection starts at", &mut problems);
    let second = raw.required("to", "the asset it acts on", &mut problems);
    let kind = raw.required("kind", "the connection's kind (feeds, powers, supplies_air, controls)", &mut problems);
    let parsed = connection_word(&kind);
    if parsed.is_none() && !kind.is_empty() {
        problems.push(raw.problem(
            "kind",
            format!(
                "'{kind}' is not a connection: write feeds, powers, supplies_air or controls (or the other way \
                 round: fed by, powered by, air from, controlled by)"
            ),
        ));
    }
    if !first.is_empty() && first.eq_ignore_ascii_case(&second) {
        problems.push(raw.problem("to", format!("{first} is connected to itself: name two assets")));
    }
    let Some((kind, reversed)) = parsed.filter(|_| problems.is_empty()) else { return Err(problems) };
    let (from, to) = if reversed { (second, first) } else { (first, second) };
    Ok(ConnectionRow { from, to, kind, raw })
}

#[derive(Debug, Clone, Default)]
pub struct PlantModel {
    pub site: Option<(Site, Origin)>,
    pub stations: Vec<StationRow>,
    pub assets: Vec<AssetRow>,
    pub sensors: Vec<SensorRow>,
    /// The master alarm database's rows, when the import holds a rationalization sheet.
    pub alarm_points: Vec<AlarmPointRow>,
    /// How the assets act on each other, when the import holds connections.
    pub connections: Vec<ConnectionRow>,
}

impl PlantModel {
    /// Adds an asset a program describes (the demo plant), checked as a file's row is.
    pub fn push_asset(&mut self, at: Origin, fields: &[(&'static str, String)]) -> Result<(), Vec<Problem>> {
        self.assets.push(asset_row(RawRow::given(at, fields))?);
        Ok(())
    }

    /// Adds a connection a program describes (OPC UA references, Sparkplug templates),
    /// checked as a file's row is.
    pub fn push_connection(&mut self, at: Origin, fields: &[(&'static str, String)]) -> Result<(), Vec<Problem>> {
        self.connections.push(connection_row(RawRow::given(at, fields))?);
        Ok(())
    }

    /// Adds a sensor a program describes, checked as a file's row is.
    pub fn push_sensor(&mut self, at: Origin, fields: &[(&'static str, String)]) -> Result<(), Vec<Problem>> {
        self.sensors.push(sensor_row(RawRow::given(at, fields))?);
        Ok(())
    }
}

impl RawRow {
    fn given(at: Origin, fields: &[(&'static str, String)]) -> RawRow {
        let fields = fields
            .iter()
            .map(|(name, value)| RawField { name, column: 0, header: name.to_string(), value: value.clone() })
            .collect();
        RawRow { at, fields }
    }
}

/// A CMMS's status word as the twin's: `Operating` is running.
fn status_word(s: &str) -> &str {
    match s.trim().to_lowercase().as_str() {
        "running" | "operating" | "in service" | "active" | "online" | "operational" => "running",
        "standby" | "stand by" | "spare" | "duty standby" => "standby",
        "stopped" | "inactive" | "offline" | "idle" => "stopped",
        "maintenance" | "under maintenance" | "in maintenance" | "repair" => "maintenance",
        "fault" | "faulted" | "failed" | "tripped" => "fault",
        "out_of_service" | "out of service" | "decommissioned" | "not ready" | "isolated" => "out_of_service",
        _ => s,
    }
}

/// Criticality as A/B/C, 1/2/3 or high/medium/low.
fn criticality_word(s: &str) -> &str {
    match s.trim().to_lowercase().as_str() {
        "a" | "1" | "high" | "critical" => "A",
        "b" | "2" | "medium" => "B",
        "c" | "3" | "low" => "C",
        _ => s,
    }
}

pub fn asset_row(raw: RawRow) -> Result<AssetRow, Vec<Problem>> {
    let mut problems = Vec::new();
    let id = raw.required("id", "the asset id", &mut problems);
    let id = match AssetId::parse(&id) {
        Ok(id) => Some(id),
        Err(e) if !id.is_empty() => {
            problems.push(raw.problem("id", e.to_string()));
            None
        }
        Err(_) => None,
    };
    let station = raw.required("station", "the station", &mut problems);
    let kind_text = raw.required("kind", "the asset kind (e.g. blower, centrifugal_pump)", &mut problems);
    let name = raw.text("name").unwrap_or_default();
    let status = match raw.text("status") {
        None => AssetStatus::Running,
        Some(s) => AssetStatus::parse(status_word(&s)).unwrap_or_else(|e| {
            problems
                .push(raw.problem("status", format!("{e} (or a CMMS word: operating, in service, decommissioned)")));
            AssetStatus::Running
        }),
    };
    let criticality = match raw.text("criticality") {
        None => Criticality::B,
        Some(s) => Criticality::parse(criticality_word(&s)).unwrap_or_else(|e| {
            problems.push(raw.problem("criticality", format!("{e} (or 1, 2, 3; high, medium, low)")));
            Criticality::B
        }),
    };
    let rated_power_kw = raw.number("rated_power_kw", &mut problems);
    let opcua_node = opcua_node(&raw, &mut problems);
    let row = AssetRow {
        id: id.unwrap_or_else(|| AssetId::parse("invalid").expect("a valid id")),
        station,
        kind: kind_name(&kind_text),
        name: if name.is_empty() { raw.text("id").unwrap_or_default() } else { name },
        status,
        criticality,
        manufacturer: raw.text("manufacturer").unwrap_or_default(),
        model: raw.text("model").unwrap_or_default(),
        machine_class: raw.text("machine_class"),
        rated_power_kw,
        installed_on: raw.text("installed_on").unwrap_or_default(),
        parent: raw.text("parent"),
        drives: raw.text("drives"),
        opcua_node,
        raw,
    };
    if problems.is_empty() { Ok(row) } else { Err(problems) }
}

/// A row's OPC UA node, by namespace URI, when it names one.
fn opcua_node(raw: &RawRow, problems: &mut Vec<Problem>) -> Option<NodeRef> {
    raw.text("opcua_node")
        .and_then(|n| NodeRef::parse(&n).map_err(|e| problems.push(raw.problem("opcua_node", e))).ok())
}

pub fn sensor_row(raw: RawRow) -> Result<SensorRow, Vec<Problem>> {
    let mut problems = Vec::new();
    let id = raw.required("id", "the tag (sensor id)", &mut problems);
    let id = match SensorId::parse(&id) {
        Ok(id) => Some(id),
        Err(e) if !id.is_empty() => {
            problems.push(raw.problem("id", e.to_string()));
            None
        }
        Err(_) => None,
    };
    let asset = raw.required("asset", "the asset the tag belongs to", &mut problems);
    let limits: Limits = LIMIT_NAMES.map(|l| raw.number(l, &mut problems));
    let present: Vec<(usize, f64)> = limits.iter().enumerate().filter_map(|(i, l)| l.map(|v| (i, v))).collect();
    for pair in present.windows(2) {
        let ((a, va), (b, vb)) = (pair[0], pair[1]);
        if va > vb {
            problems.push(raw.problem(
                LIMIT_NAMES[b],
                format!(
                    "limits out of order: {} {va} is above {} {vb}; they must rise ll <= l <= h <= hh",
                    LIMIT_NAMES[a], LIMIT_NAMES[b]
                ),
            ));
        }
    }
    let range = [raw.number("range_low", &mut problems), raw.number("range_high", &mut problems)];
    if let [Some(low), Some(high)] = range
        && low >= high
    {
        problems.push(raw.problem("range_high", format!("the range's high end {high} is not above its low end {low}")));
    }
    let deadband = raw.number("deadband", &mut problems).unwrap_or(0.0);
    if deadband < 0.0 {
        problems.push(raw.problem("deadband", "the deadband cannot be negative"));
    }
    let on_delay_s = raw.seconds("on_delay_s", "on-delay", &mut problems).unwrap_or(0);
    let alarm_source = raw.text("alarm_source").map_or("scada".to_string(), |s| s.to_lowercase());
    if !matches!(alarm_source.as_str(), "scada" | "limits") {
        problems.push(raw.problem(
            "alarm_source",
            format!("'{alarm_source}' is not an alarm source: scada (alarms come as SCADA events) or limits (raised from the readings)"),
        ));
    }
    let mut priorities = [None; 4];
    for (i, name) in ["priority_ll", "priority_l", "priority_h", "priority_hh"].iter().enumerate() {
        if let Some(p) = raw.text(name) {
            match Severity::parse(&p.to_lowercase()) {
                Ok(s) => priorities[i] = Some(s),
                Err(e) => problems.push(raw.problem(name, e)),
            }
        }
    }
    let opcua_node = opcua_node(&raw, &mut problems);
    let row = SensorRow {
        id: id.unwrap_or_else(|| SensorId::parse("invalid").expect("a valid id")),
        asset,
        kind: kind_name(&raw.text("kind").unwrap_or_else(|| "measurement".into())),
        description: raw.text("description").unwrap_or_default(),
        unit: raw.text("unit").unwrap_or_default(),
        range,
        limits,
        deadband,
        on_delay_s,
        alarm_source,
        alarm_prefix: raw.text("alarm_prefix"),
        priorities,
        opcua_node,
        raw,
    };
    if problems.is_empty() { Ok(row) } else { Err(problems) }
}

/// An alarm point's name in change lists and errors: asset, tag (when it has one), code.
pub fn point_key(asset: &str, sensor: Option<&str>, code: &str) -> String {
    match sensor {
        Some(sensor) => format!("{asset} {sensor} {code}"),
        None => format!("{asset} {code}"),
    }
}

/// A site's priority word as the twin's: ISA-18.2 leaves the names to the site, and
/// numbers mean opposite things at different sites, so they are refused.
fn priority_word(s: &str) -> &str {
    match s.trim().to_lowercase().as_str() {
        "emergency" | "critical" | "urgent critical" => "critical",
        "high" | "urgent" => "high",
        "medium" | "med" | "normal" => "medium",
        "low" | "advisory" | "warning" => "low",
        _ => s,
    }
}

/// An allowable response time as sheets write it (`10`, `10 min`, `< 5 min`, `3-10 min`,
/// `30 s`, `1 h`), in minutes; a range is taken at its upper end. A header that names a
/// unit (`Time to Respond (s)`) sets it for bare numbers.
fn response_minutes(value: &str, header: &str) -> Result<f64, String> {
    let v = value.trim().to_lowercase();
    let v = v.trim_start_matches(['<', '≤', '=', '~']).trim_start_matches("within").trim();
    let split = v.find(|c: char| !(c.is_ascii_digit() || matches!(c, '.' | '-' | ' '))).unwrap_or(v.len());
    let (number, unit) = v.split_at(split);
    let upper = number.rsplit('-').next().unwrap_or_default().trim();
    let n: f64 = upper.parse().map_err(|_| {
        format!("'{value}' is not a response time: write minutes (10), or a number with a unit (30 s, 10 min, 1 h)")
    })?;
    let header = header.to_lowercase();
    let unit = if unit.trim().is_empty() {
        if header.contains("(s)") || header.contains("sec") {
            "s"
        } else if header.contains("(h)") || header.contains("hour") {
            "h"
        } else {
            "min"
        }
    } else {
        unit.trim()
    };
    let factor = match unit {
        "s" | "sec" | "secs" | "second" | "seconds" => 1.0 / 60.0,
        "m" | "min" | "mins" | "minute" | "minutes" => 1.0,
        "h" | "hr" | "hrs" | "hour" | "hours" => 60.0,
        _ => return Err(format!("'{value}': unknown unit '{unit}'; use s, min or h")),
    };
    if n < 0.0 || !n.is_finite() {
        return Err(format!("'{value}': a response time is 0 or more"));
    }
    Ok(n * factor)
}

impl RawRow {
    /// A whole number of seconds, 0 or more, if given.
    fn seconds(&self, name: &str, what: &str, problems: &mut Vec<Problem>) -> Option<i64> {
        match self.number(name, problems) {
            Some(d) if d < 0.0 || d.fract() != 0.0 => {
                problems.push(self.problem(name, format!("the {what} is a whole number of seconds, 0 or more")));
                None
            }
            d => d.map(|d| d as i64),
        }
    }
}

pub fn alarm_point_row(raw: RawRow) -> Result<AlarmPointRow, Vec<Problem>> {
    let mut problems = Vec::new();
    // Sheets exported from alarm databases name the tag and the alarm, not the
    // equipment: with a tag, the asset may be left to the tag's (resolved at import).
    let asset = match raw.text("sensor") {
        Some(_) => raw.text("asset").unwrap_or_default(),
        None => raw.required("asset", "the asset the alarm is on (or its tag, whose asset it then is)", &mut problems),
    };
    let code = raw.required("code", "the alarm code (as alarms carry it, e.g. PRESS-SUC-LO)", &mut problems);
    if code.chars().count() > 64 || code.chars().any(char::is_control) {
        problems.push(raw.problem("code", "an alarm code is at most 64 characters, with no control characters"));
    }
    let priority = raw.text("priority").and_then(|p| match Severity::parse(priority_word(&p)) {
        Ok(s) => Some(s),
        Err(_) => {
            problems.push(raw.problem(
                "priority",
                format!("'{p}' is not a priority: write low, medium, high or critical (or emergency, urgent); numbered priorities mean different things at different sites, so name them"),
            ));
            None
        }
    });
    let respond_within_min = raw.get("respond_within_min").and_then(|f| {
        response_minutes(&f.value, &f.header).map_err(|e| problems.push(raw.problem("respond_within_min", e))).ok()
    });
    let deadband = raw.number("deadband", &mut problems);
    if deadband.is_some_and(|d| d < 0.0) {
        problems.push(raw.problem("deadband", "the deadband cannot be negative"));
    }
    let rationalized_on = raw.text("rationalized_on").unwrap_or_default();
    if !rationalized_on.is_empty() && chrono::NaiveDate::parse_from_str(&rationalized_on, "%Y-%m-%d").is_err() {
        problems.push(raw.problem(
            "rationalized_on",
            format!("'{rationalized_on}' is not a date: write it as YYYY-MM-DD (2026-03-14)"),
        ));
    }
    let row = AlarmPointRow {
        asset,
        code,
        sensor: raw.text("sensor"),
        priority,
        class: raw.text("class").unwrap_or_default(),
        causes: raw.text("causes").unwrap_or_default(),
        consequence: raw.text("consequence").unwrap_or_default(),
        response: raw.text("response").unwrap_or_default(),
        respond_within_min,
        set_point: raw.number("set_point", &mut problems),
        deadband,
        on_delay_s: raw.seconds("on_delay_s", "on-delay", &mut problems),
        off_delay_s: raw.seconds("off_delay_s", "off-delay", &mut problems),
        rationalized_by: raw.text("rationalized_by").unwrap_or_default(),
        rationalized_on,
        raw,
    };
    if problems.is_empty() { Ok(row) } else { Err(problems) }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn response_times_are_read_as_sheets_write_them() {
        assert_eq!(response_minutes("10", "Time to Respond"), Ok(10.0));
        assert_eq!(response_minutes("< 5 min", "Response"), Ok(5.0));
        assert_eq!(response_minutes("3-10 min", "Allowable Response Time"), Ok(10.0));
        assert_eq!(response_minutes("30", "Time to Respond (s)"), Ok(0.5));
        assert_eq!(response_minutes("1 h", "x"), Ok(60.0));
        assert!(response_minutes("soon", "x").unwrap_err().contains("not a response time"));
        assert!(response_minutes("5 days", "x").unwrap_err().contains("unknown unit"));
    }

    #[test]
    fn numbered_priorities_are_refused() {
        assert_eq!(priority_word("Emergency"), "critical");
        assert!(Severity::parse(priority_word("1")).is_err());
    }
}
