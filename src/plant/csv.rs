//! CSV as SCADA tag exports and CMMS asset registers come: headers matched
//! case-insensitively with the usual aliases, UTF-8 with or without BOM, CRLF, and `,`,
//! `;` or tab as the separator (detected from the header line; with `;`, European
//! spreadsheets write decimal commas, and `12,5` is read as 12.5).

use super::Problem;
use super::model::{Origin, PlantModel, RawField, RawRow, asset_row, sensor_row};

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
];

/// Columns a file needs, per kind of file, for the error that names them.
const TAG_REQUIRED: [&str; 2] = ["id", "asset"];
const ASSET_REQUIRED: [&str; 3] = ["id", "station", "kind"];

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

/// Maps headers to canonical fields; the table is the one whose required columns are
/// there (a tag export has a unit or a limit column).
fn columns(headers: &[String]) -> (bool, Vec<Option<&'static str>>) {
    let folded: Vec<String> = headers.iter().map(|h| fold(h)).collect();
    let is_tags = folded.iter().any(|h| {
        TAG_COLUMNS.iter().any(|(name, aliases)| {
            matches!(*name, "unit" | "range_low" | "range_high" | "ll" | "l" | "h" | "hh" | "deadband")
                && aliases.contains(&h.as_str())
        })
    });
    let table = if is_tags { TAG_COLUMNS } else { ASSET_COLUMNS };
    let mut taken: Vec<&str> = Vec::new();
    let mapped = folded
        .iter()
        .map(|h| {
            let name = table.iter().find(|(name, aliases)| aliases.contains(&h.as_str()) && !taken.contains(name))?.0;
            taken.push(name);
            Some(name)
        })
        .collect();
    (is_tags, mapped)
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
    let (is_tags, mapped) = columns(&headers);
    missing_columns(is_tags, &mapped, &at(1))?;
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
        let row = if is_tags {
            sensor_row(raw).map(|s| model.sensors.push(s))
        } else {
            asset_row(raw).map(|a| model.assets.push(a))
        };
        if let Err(p) = row {
            problems.extend(p);
        }
    }
    if problems.is_empty() { Ok(()) } else { Err(problems) }
}

/// A problem for each required column the header lacks, naming the headers that fit.
fn missing_columns(is_tags: bool, mapped: &[Option<&'static str>], header: &Origin) -> Result<(), Vec<Problem>> {
    let (table, required) =
        if is_tags { (TAG_COLUMNS, &TAG_REQUIRED[..]) } else { (ASSET_COLUMNS, &ASSET_REQUIRED[..]) };
    let missing: Vec<Problem> = required
        .iter()
        .filter(|r| !mapped.contains(&Some(**r)))
        .map(|r| {
            let aliases = table.iter().find(|(n, _)| n == r).map_or(&[][..], |(_, a)| *a);
            Problem {
                at: header.clone(),
                column: 0,
                field: None,
                message: format!(
                    "no column for {r} in this {}: name one of {} (any case)",
                    if is_tags { "tag export (it has units or limits)" } else { "asset register" },
                    aliases.iter().take(6).map(|a| format!("'{a}'")).collect::<Vec<_>>().join(", ")
                ),
            }
        })
        .collect();
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
        let (is_tags, mapped) = columns(&headers);
        assert!(is_tags);
        assert_eq!(mapped, [Some("id"), Some("unit"), Some("asset"), Some("ll"), Some("hh"), Some("description")]);
        let (is_tags, mapped) = columns(&["Asset ID".into(), "Equipment Type".into(), "Area".into()]);
        assert!(!is_tags);
        assert_eq!(mapped, [Some("id"), Some("kind"), Some("station")]);
    }

    #[test]
    fn the_separator_is_detected_and_decimal_commas_read() {
        assert_eq!(separator("Tag;Unit;\"Hi, alarm\"\r\nX;bar;1,5"), b';');
        assert_eq!(separator("Tag,Unit\nX,bar"), b',');
        assert_eq!(separator("Tag\tUnit\tHi\n"), b'\t');
        assert!(is_decimal_comma("12,5") && is_decimal_comma("-0,25") && !is_decimal_comma("1,000,000"));
    }
}
