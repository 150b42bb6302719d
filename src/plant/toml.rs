//! A plant file in the shape of `seed/plant.toml`: `[site]`, `[[stations]]`,
//! `[[assets]]` and `[[sensors]]` (each field as the CSV columns name it; a sensor's
//! `limits = { h = 4.5, hh = 7.1 }` and `priority = { hh = "high" }`). Any part may be
//! left to a CSV of the same import.

use super::Problem;
use super::model::{
    ASSET_FIELDS, CONNECTION_FIELDS, LIMIT_NAMES, Origin, PlantModel, RawField, RawRow, SENSOR_FIELDS, Site,
    StationRow, asset_row, connection_row, sensor_row,
};

pub fn read(file: &str, text: &str, model: &mut PlantModel) -> Result<(), Vec<Problem>> {
    let at = |line: u64| Origin { file: file.to_string(), line };
    let problem = |line: u64, message: String| Problem { at: at(line), column: 0, field: None, message };
    let table: toml::Table = match text.parse() {
        Ok(t) => t,
        Err(e) => {
            let line = e.span().map_or(1, |s| text[..s.start.min(text.len())].lines().count().max(1) as u64);
            return Err(vec![problem(line, format!("not valid TOML: {}", e.message()))]);
        }
    };
    let mut problems = Vec::new();
    for key in table.keys() {
        if !matches!(key.as_str(), "site" | "stations" | "assets" | "sensors" | "connections") {
            problems.push(problem(
                line_of(text, key, 0),
                format!(
                    "unknown section '{key}': a plant file has [site], [[stations]], [[assets]], [[sensors]] and \
                     [[connections]]"
                ),
            ));
        }
    }
    if let Some(site) = table.get("site").and_then(|s| s.as_table()) {
        let get = |k: &str| site.get(k).and_then(|v| v.as_str()).map(str::to_string);
        match (get("id"), get("name"), get("timezone")) {
            (Some(id), Some(name), Some(timezone)) => {
                model.site = Some((Site { id, name, timezone }, at(line_of(text, "site", 0))));
            }
            _ => problems.push(problem(
                line_of(text, "site", 0),
                "[site] needs id, name and timezone (an IANA name such as Europe/London)".into(),
            )),
        }
    }
    for (i, station) in entries(&table, "stations").into_iter().enumerate() {
        let line = line_of(text, "stations", i);
        match (station.get("id").and_then(|v| v.as_str()), station.get("name").and_then(|v| v.as_str())) {
            (Some(id), Some(name)) => {
                model.stations.push(StationRow { id: id.trim().to_string(), name: name.to_string(), at: at(line) })
            }
            _ => problems.push(problem(line, "a station needs id and name".into())),
        }
    }
    for (i, asset) in entries(&table, "assets").into_iter().enumerate() {
        match raw_row(asset, &ASSET_FIELDS, at(line_of(text, "assets", i))).and_then(asset_row) {
            Ok(a) => model.assets.push(a),
            Err(p) => problems.extend(p),
        }
    }
    for (i, sensor) in entries(&table, "sensors").into_iter().enumerate() {
        match raw_row(sensor, &SENSOR_FIELDS, at(line_of(text, "sensors", i))).and_then(sensor_row) {
            Ok(s) => model.sensors.push(s),
            Err(p) => problems.extend(p),
        }
    }
    for (i, connection) in entries(&table, "connections").into_iter().enumerate() {
        match raw_row(connection, &CONNECTION_FIELDS, at(line_of(text, "connections", i))).and_then(connection_row) {
            Ok(c) => model.connections.push(c),
            Err(p) => problems.extend(p),
        }
    }
    if problems.is_empty() { Ok(()) } else { Err(problems) }
}

fn entries<'a>(table: &'a toml::Table, key: &str) -> Vec<&'a toml::Table> {
    table.get(key).and_then(|v| v.as_array()).map_or_else(Vec::new, |a| a.iter().filter_map(|v| v.as_table()).collect())
}

/// The line of the `n`-th `[[key]]` (or `[key]`) header, 1-based.
fn line_of(text: &str, key: &str, n: usize) -> u64 {
    let headers = [format!("[[{key}]]"), format!("[{key}]")];
    text.lines()
        .enumerate()
        .filter(|(_, l)| headers.iter().any(|h| l.trim_start().starts_with(h.as_str())))
        .nth(n)
        .map_or(1, |(i, _)| i as u64 + 1)
}

/// A TOML table as the fields of a row; unknown keys are problems, so a typo is not a
/// silently missing field.
fn raw_row(t: &toml::Table, keys: &[&'static str], at: Origin) -> Result<RawRow, Vec<Problem>> {
    let mut fields = Vec::new();
    let mut problems = Vec::new();
    let text = |v: &toml::Value| match v {
        toml::Value::String(s) => s.clone(),
        toml::Value::Integer(i) => i.to_string(),
        toml::Value::Float(f) => f.to_string(),
        toml::Value::Boolean(b) => b.to_string(),
        toml::Value::Datetime(d) => d.to_string(),
        other => format!("{other:?}"),
    };
    for (key, value) in t {
        let nested = match key.as_str() {
            "limits" => Some(""),
            "priority" => Some("priority_"),
            _ => None,
        };
        if let Some(prefix) = nested {
            for (limit, v) in value.as_table().into_iter().flatten() {
                match LIMIT_NAMES.iter().position(|l| l == limit) {
                    Some(i) => {
                        let name: &'static str = if prefix.is_empty() {
                            LIMIT_NAMES[i]
                        } else {
                            ["priority_ll", "priority_l", "priority_h", "priority_hh"][i]
                        };
                        fields.push(RawField { name, column: 0, header: format!("{key}.{limit}"), value: text(v) });
                    }
                    None => problems.push(Problem {
                        at: at.clone(),
                        column: 0,
                        field: Some(format!("{key}.{limit}")),
                        message: "unknown limit: limits are ll, l, h and hh".into(),
                    }),
                }
            }
            continue;
        }
        match keys.iter().find(|k| **k == key.as_str()) {
            Some(name) => fields.push(RawField { name, column: 0, header: key.clone(), value: text(value) }),
            None => problems.push(Problem {
                at: at.clone(),
                column: 0,
                field: Some(key.clone()),
                message: format!("unknown key; the keys are {}", keys.join(", ")),
            }),
        }
    }
    if problems.is_empty() { Ok(RawRow { at, fields }) } else { Err(problems) }
}
