//! CSV as SCADA tag exports, CMMS asset registers and alarm rationalization sheets
//! come: headers matched
//! case-insensitively with the usual aliases, UTF-8 with or without BOM, CRLF, and `,`,
//! `;` or tab as the separator (detected from the header line; with `;`, European
//! spreadsheets write decimal commas, and `12,5` is read as 12.5).

use super::Problem;
use super::model::{Origin, PlantModel, RawField, RawRow, alarm_point_row, asset_row, connection_row, sensor_row};

/// Canonical field, then the headers that mean it (compared lower-case, with spaces,
/// `_`, `-` and `.` folded to one space).
const ASSET_COLUMNS: &[(&str, &[&str])] = &[
    ("id", &["id", "asset", "asset id", "asset tag", "equipment", "equipment id", "equipment no", "asset no"]),
    ("station", &["station", "station id", "area", "location", "process area", "site area"]),
    ("kind", &["kind", "type", "equipment type", "asset type", "class", "equipment class", "category"]),
    ("name", &["name", "description", "desc", "asset name", "equipment name", "asset description"]),
    ("status", &["status", "state", "operating status"]),
    ("criticality", &["criticality", "critical", "criticality class", "abc"]),
    ("manufacturer", &["manufacturer", "make", "mfr", "vendor"]),
    ("model", &["model", "model no", "model number"]),
    ("machine_class", &["machine class", "iso class", "vibration class"]),
    ("rated_power_kw", &["rated power kw", "rated power", "power kw", "kw", "rated kw"]),
    ("installed_on", &["installed on", "installed", "install date", "installation date", "commissioned"]),
    ("parent", &["parent", "parent asset", "parent id", "parent equipment", "part of"]),
    ("drives", &["drives", "driven equipment"]),
    ("opcua_node", OPCUA_NODE_HEADERS),
];

const TAG_COLUMNS: &[(&str, &[&str])] = &[
    ("id", &["tag", "tag name", "tagname", "tag id", "point", "point name", "sensor", "sensor id", "name", "id"]),
    ("asset", &["asset", "asset id", "equipment", "equipment id", "device", "parent"]),
    ("kind", &["kind", "measurement", "measurement type", "signal type", "sensor kind", "quantity", "type"]),
    ("description", &["description", "desc", "documentation", "comment", "tag description"]),
    ("unit", &["unit", "units", "eu", "eng units", "engineering units", "eng unit", "engunit", "uom"]),
    ("range_low", &["range low", "eu low", "min eu", "eu min", "eng low", "englow", "low range", "range min", "lrv"]),
    (
        "range_high",
        &["range high", "eu high", "max eu", "eu max", "eng high", "enghigh", "high range", "range max", "urv"],
    ),
    ("ll", &["ll", "lolo", "lo lo", "low low", "lowlow", "lolo limit", "lolo alarm", "l2"]),
    ("l", &["l", "lo", "low", "lo limit", "lo alarm", "l1"]),
    ("h", &["h", "hi", "high", "hi limit", "hi alarm", "h1"]),
    ("hh", &["hh", "hihi", "hi hi", "high high", "highhigh", "hihi limit", "hihi alarm", "h2"]),
    ("deadband", &["deadband", "db", "alarm deadband", "hysteresis"]),
    ("on_delay_s", &["on delay s", "on delay", "on delay sec", "alarm delay", "delay s"]),
    ("alarm_source", &["alarm source", "alarms from"]),
    ("alarm_prefix", &["alarm prefix", "alarm code"]),
    ("priority_ll", &["ll priority", "lolo priority", "priority ll"]),
    ("priority_l", &["l priority", "lo priority", "priority l"]),
    ("priority_h", &["h priority", "hi priority", "priority h"]),
    ("priority_hh", &["hh priority", "hihi priority", "priority hh"]),
    ("opcua_node", OPCUA_NODE_HEADERS),
];

const OPCUA_NODE_HEADERS: &[&str] =
    &["opcua node", "opc ua node", "opc ua node id", "opcua node id", "node id", "nodeid", "opc node"];

/// How assets act on each other, as a plant's line lists and P&ID registers write it.
const CONNECTION_COLUMNS: &[(&str, &[&str])] = &[
    (
        "from",
        &[
            "from",
            "from asset",
            "from equipment",
            "upstream",
            "upstream equipment",
            "source asset",
            "asset",
            "equipment",
        ],
    ),
    ("to", &["to", "to asset", "to equipment", "downstream", "downstream equipment", "target asset", "connected to"]),
    ("kind", &["kind", "connection", "relation", "relationship", "link", "type", "connection type"]),
];

/// A rationalization sheet (the master alarm database's rows), with the headers alarm
/// management tools and spreadsheets use for them.
const RATIONALIZATION_COLUMNS: &[(&str, &[&str])] = &[
    ("asset", &["asset", "asset id", "equipment", "equipment id", "device"]),
    ("code", &["code", "alarm", "alarm code", "alarm type", "alarm id", "alarm name", "condition", "alarm condition"]),
    ("sensor", &["sensor", "sensor id", "tag", "tag name", "tagname", "point", "point name", "pv tag", "input tag"]),
    ("priority", &["priority", "alarm priority"]),
    ("class", &["class", "alarm class", "classification", "category"]),
    (
        "causes",
        &["causes", "cause", "cause s", "potential cause", "potential causes", "probable cause", "probable causes"],
    ),
    (
        "consequence",
        &[
            "consequence",
            "consequences",
            "consequence of inaction",
            "consequence of no action",
            "consequence of deviation",
            "impact",
        ],
    ),
    (
        "response",
        &[
            "response",
            "operator action",
            "operator actions",
            "corrective action",
            "corrective actions",
            "operator response",
            "required action",
            "action",
        ],
    ),
    (
        "respond_within_min",
        &[
            "respond within min",
            "respond within",
            "allowable response time",
            "allowable response time min",
            "allowable response time s",
            "time to respond",
            "time to respond min",
            "time to respond s",
            "response time",
            "response time min",
            "max response time",
            "maximum response time",
        ],
    ),
    (
        "set_point",
        &["set point", "setpoint", "sp", "alarm set point", "alarm setpoint", "alarm limit", "limit", "trip point"],
    ),
    ("deadband", &["deadband", "db", "alarm deadband", "hysteresis"]),
    ("on_delay_s", &["on delay s", "on delay", "on delay sec", "alarm on delay", "delay on", "on delay seconds"]),
    (
        "off_delay_s",
        &["off delay s", "off delay", "off delay sec", "alarm off delay", "delay off", "off delay seconds"],
    ),
    ("rationalized_by", &["rationalized by", "rationalised by", "reviewed by", "approved by", "rationalizer"]),
    (
        "rationalized_on",
        &[
            "rationalized on",
            "rationalised on",
            "rationalization date",
            "rationalisation date",
            "date rationalized",
            "reviewed on",
            "review date",
        ],
    ),
];

/// The columns that make a file a rationalization sheet: what an alarm means to the
/// operator, which no tag export or asset register carries.
const RATIONALIZATION_MARKS: [&str; 4] = ["causes", "consequence", "response", "respond_within_min"];

/// The four kinds of CSV a site brings, told apart by their headers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Table {
    Assets,
    Tags,
    Rationalization,
    Connections,
}

impl Table {
    fn columns(self) -> &'static [(&'static str, &'static [&'static str])] {
        match self {
            Table::Assets => ASSET_COLUMNS,
            Table::Tags => TAG_COLUMNS,
            Table::Rationalization => RATIONALIZATION_COLUMNS,
            Table::Connections => CONNECTION_COLUMNS,
        }
    }

    /// Columns a file needs, for the error that names them.
    fn required(self) -> &'static [&'static str] {
        match self {
            Table::Assets => &["id", "station", "kind"],
            Table::Tags => &["id", "asset"],
            // And the asset or the tag: see `missing_columns`.
            Table::Rationalization => &["code"],
            Table::Connections => &["from", "to", "kind"],
        }
    }

    fn described(self) -> &'static str {
        match self {
            Table::Assets => "asset register",
            Table::Tags => "tag export (it has units or limits)",
            Table::Rationalization => "rationalization sheet (it has causes, consequences or responses)",
            Table::Connections => "connection list (it has a to or downstream column)",
        }
    }
}

fn fold(header: &str) -> String {
    header
        .trim()
        .to_lowercase()
        .split(|c: char| c.is_whitespace() || matches!(c, '_' | '-' | '.' | '(' | ')' | '/'))
        .filter(|w| !w.is_empty())
        .collect::<Vec<_>>()
        .join(" ")
}

/// The separator of a header line: the most frequent of `,` `;` tab outside quotes.
fn separator(text: &str) -> u8 {
    let header = text.lines().next().unwrap_or_default();
    let mut counts = [0usize; 3];
    let mut quoted = false;
    for c in header.chars() {
        match c {
            '"' => quoted = !quoted,
            ',' if !quoted => counts[0] += 1,
            ';' if !quoted => counts[1] += 1,
            '\t' if !quoted => counts[2] += 1,
            _ => {}
        }
    }
    let best = (0..3).max_by_key(|&i| (counts[i], usize::from(i == 0))).unwrap_or(0);
    [b',', b';', b'\t'][best]
}

/// Maps headers to canonical fields, in the table the headers show: a rationalization
/// sheet has a cause, consequence or response column; a tag export a unit or a limit;
/// anything else is an asset register.
fn columns(headers: &[String]) -> (Table, Vec<Option<&'static str>>) {
    let folded: Vec<String> = headers.iter().map(|h| fold(h)).collect();
    let has = |table: &[(&str, &[&str])], marks: &[&str]| {
        folded.iter().any(|h| table.iter().any(|(name, aliases)| marks.contains(name) && aliases.contains(&h.as_str())))
    };
    let table = if has(RATIONALIZATION_COLUMNS, &RATIONALIZATION_MARKS) {
        Table::Rationalization
    } else if has(CONNECTION_COLUMNS, &["to"]) {
        Table::Connections
    } else if has(TAG_COLUMNS, &["unit", "range_low", "range_high", "ll", "l", "h", "hh", "deadband"]) {
        Table::Tags
    } else {
        Table::Assets
    };
    let mut taken: Vec<&str> = Vec::new();
    let mapped = folded
        .iter()
        .map(|h| {
            let name = table
                .columns()
                .iter()
                .find(|(name, aliases)| aliases.contains(&h.as_str()) && !taken.contains(name))?
                .0;
            taken.push(name);
            Some(name)
        })
        .collect();
    (table, mapped)
}

pub fn read(file: &str, text: &str, model: &mut PlantModel) -> Result<(), Vec<Problem>> {
    // The csv crate counts a CRLF file's lines one short: give it LF.
    let text = &text.replace("\r\n", "\n");
    let sep = separator(text);
    let mut reader = ::csv::ReaderBuilder::new().delimiter(sep).flexible(true).from_reader(text.as_bytes());
    let at = |line: u64| Origin { file: file.to_string(), line };
    let headers: Vec<String> = match reader.headers() {
        Ok(h) => h.iter().map(str::to_string).collect(),
        Err(e) => {
            return Err(vec![Problem {
                at: at(1),
                column: 0,
                field: None,
                message: format!("unreadable header: {e}"),
            }]);
        }
    };
    let (table, mapped) = columns(&headers);
    missing_columns(table, &mapped, &at(1))?;
    let mut problems = Vec::new();
    for record in reader.records() {
        let record = match record {
            Ok(r) => r,
            Err(e) => {
                let line = e.position().map_or(0, |p| p.line());
                problems.push(Problem {
                    at: at(line),
                    column: 0,
                    field: None,
                    message: format!("unreadable row: {e}"),
                });
                continue;
            }
        };
        let line = record.position().map_or(0, |p| p.line());
        if record.iter().all(|f| f.trim().is_empty()) {
            continue;
        }
        if record.len() < headers.len() {
            problems.push(Problem {
                at: at(line),
                column: 0,
                field: None,
                message: format!(
                    "the row has {} fields, the header {}: a separator is missing, or a field holding the separator is not in quotes",
                    record.len(),
                    headers.len()
                ),
            });
            continue;
        }
        let fields = mapped
            .iter()
            .enumerate()
            .filter_map(|(i, name)| {
                let name = (*name)?;
                let mut value = record.get(i).unwrap_or_default().to_string();
                if sep == b';' && is_decimal_comma(&value) {
                    value = value.replace(',', ".");
                }
                Some(RawField { name, column: i + 1, header: headers[i].clone(), value })
            })
            .collect();
        let raw = RawRow { at: at(line), fields };
        let row = match table {
            Table::Tags => sensor_row(raw).map(|s| model.sensors.push(s)),
            Table::Assets => asset_row(raw).map(|a| model.assets.push(a)),
            Table::Rationalization => alarm_point_row(raw).map(|p| model.alarm_points.push(p)),
            Table::Connections => connection_row(raw).map(|c| model.connections.push(c)),
        };
        if let Err(p) = row {
            problems.extend(p);
        }
    }
    if problems.is_empty() { Ok(()) } else { Err(problems) }
}

/// A problem for each required column the header lacks, naming the headers that fit.
/// A rationalization sheet needs the asset's column or the tag's (the tag gives the
/// asset).
fn missing_columns(table: Table, mapped: &[Option<&'static str>], header: &Origin) -> Result<(), Vec<Problem>> {
    let aliases = |r: &str| {
        let names = table.columns().iter().find(|(n, _)| *n == r).map_or(&[][..], |(_, a)| *a);
        names.iter().take(6).map(|a| format!("'{a}'")).collect::<Vec<_>>().join(", ")
    };
    let problem = |message: String| Problem { at: header.clone(), column: 0, field: None, message };
    let mut missing: Vec<Problem> = table
        .required()
        .iter()
        .filter(|r| !mapped.contains(&Some(**r)))
        .map(|r| {
            problem(format!("no column for {r} in this {}: name one of {} (any case)", table.described(), aliases(r)))
        })
        .collect();
    if table == Table::Rationalization && !mapped.contains(&Some("asset")) && !mapped.contains(&Some("sensor")) {
        missing.push(problem(format!(
            "no column for the asset or the tag in this {}: name the asset with one of {}, or the tag (whose asset \
             the alarm is then on) with one of {} (any case)",
            table.described(),
            aliases("asset"),
            aliases("sensor")
        )));
    }
    if missing.is_empty() { Ok(()) } else { Err(missing) }
}

fn is_decimal_comma(v: &str) -> bool {
    let v = v.trim().trim_start_matches('-');
    v.split_once(',').is_some_and(|(a, b)| {
        !a.is_empty() && !b.is_empty() && a.bytes().all(|c| c.is_ascii_digit()) && b.bytes().all(|c| c.is_ascii_digit())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn headers_are_matched_with_their_aliases() {
        let headers: Vec<String> =
            ["Tag Name", "Eng Units", "Equipment", "LoLo", "Hi_Hi", "Desc"].iter().map(|s| s.to_string()).collect();
        let (table, mapped) = columns(&headers);
        assert_eq!(table, Table::Tags);
        assert_eq!(mapped, [Some("id"), Some("unit"), Some("asset"), Some("ll"), Some("hh"), Some("description")]);
        let (table, mapped) = columns(&["Asset ID".into(), "Equipment Type".into(), "Area".into()]);
        assert_eq!(table, Table::Assets);
        assert_eq!(mapped, [Some("id"), Some("kind"), Some("station")]);
        let sheet: Vec<String> =
            ["Equipment", "Alarm", "Tag", "Priority", "Corrective Action", "Allowable Response Time (min)", "Deadband"]
                .iter()
                .map(|s| s.to_string())
                .collect();
        let (table, mapped) = columns(&sheet);
        assert_eq!(table, Table::Rationalization, "a deadband column does not make a sheet a tag export");
        assert_eq!(
            mapped,
            [
                Some("asset"),
                Some("code"),
                Some("sensor"),
                Some("priority"),
                Some("response"),
                Some("respond_within_min"),
                Some("deadband")
            ]
        );
    }

    #[test]
    fn the_separator_is_detected_and_decimal_commas_read() {
        assert_eq!(separator("Tag;Unit;\"Hi, alarm\"\r\nX;bar;1,5"), b';');
        assert_eq!(separator("Tag,Unit\nX,bar"), b',');
        assert_eq!(separator("Tag\tUnit\tHi\n"), b'\t');
        assert!(is_decimal_comma("12,5") && is_decimal_comma("-0,25") && !is_decimal_comma("1,000,000"));
    }
}
