//! `twinops plant export DIR`: the twin's plant in the files an import reads, so a
//! site can round-trip it through a spreadsheet: `plant.toml` (site and stations),
//! `assets.csv`, `tags.csv`, `alarm_points.csv` (the master alarm database, as a
//! rationalization sheet) and `connections.csv` (how the assets act on each other),
//! with the columns' canonical names. Retired assets and
//! sensors are left out, as an import of the files would retire them.

use std::path::Path;

use anyhow::Context;
use rusqlite::Connection;

use super::model::{ALARM_POINT_FIELDS, ASSET_FIELDS, CONNECTION_FIELDS, SENSOR_FIELDS};

/// Writes the five files into `dir`; returns their paths.
pub fn export(db: &Connection, dir: &Path) -> anyhow::Result<Vec<std::path::PathBuf>> {
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    let mut toml =
        String::from("# The plant, as exported by `twinops plant export`; `twinops plant import` reads it back.\n");
    let site = super::site(db)?;
    if let Some((id, name, tz)) = site {
        toml.push_str(&format!("\n[site]\nid = {}\nname = {}\ntimezone = {}\n", quote(&id), quote(&name), quote(&tz)));
    }
    let mut stmt = db.prepare("SELECT id, name FROM stations ORDER BY id")?;
    for row in stmt.query_map([], |r| Ok((r.get::<_, String>(0)?, r.get::<_, String>(1)?)))? {
        let (id, name) = row?;
        toml.push_str(&format!("\n[[stations]]\nid = {}\nname = {}\n", quote(&id), quote(&name)));
    }
    let assets = table(
        db,
        &ASSET_FIELDS,
        "SELECT id, station_id, kind, name, status, criticality, manufacturer, model, machine_class, rated_power_kw,
                installed_on, parent_id, drives, opcua_node FROM assets WHERE retired_at IS NULL ORDER BY id",
    )?;
    let tags = table(
        db,
        &SENSOR_FIELDS,
        "SELECT id, asset_id, kind, description, unit, range_low, range_high, limit_ll, limit_l, limit_h, limit_hh,
                deadband, on_delay_s,
                alarm_source, alarm_prefix, priority_ll, priority_l, priority_h, priority_hh, opcua_node
         FROM sensors WHERE retired_at IS NULL ORDER BY id",
    )?;
    let points = table(
        db,
        &ALARM_POINT_FIELDS,
        "SELECT p.asset_id, p.code, p.sensor_id, p.priority, p.class, p.causes, p.consequence, p.response,
                p.respond_within_min, p.set_point, p.deadband, p.on_delay_s, p.off_delay_s, p.rationalized_by,
                p.rationalized_on
         FROM alarm_points p JOIN assets a ON a.id = p.asset_id
         WHERE p.retired_at IS NULL AND a.retired_at IS NULL ORDER BY p.asset_id, p.code",
    )?;
    let connections = table(
        db,
        &CONNECTION_FIELDS,
        "SELECT c.from_asset, c.kind, c.to_asset FROM asset_connections c
         JOIN assets f ON f.id = c.from_asset JOIN assets t ON t.id = c.to_asset
         WHERE c.retired_at IS NULL AND f.retired_at IS NULL AND t.retired_at IS NULL
         ORDER BY c.from_asset, c.kind, c.to_asset",
    )?;
    let files = [
        ("plant.toml", toml),
        ("assets.csv", assets),
        ("tags.csv", tags),
        ("alarm_points.csv", points),
        ("connections.csv", connections),
    ];
    let mut written = Vec::new();
    for (name, text) in files {
        let path = dir.join(name);
        std::fs::write(&path, text).with_context(|| format!("writing {}", path.display()))?;
        written.push(path);
    }
    Ok(written)
}

fn table(db: &Connection, headers: &[&str], sql: &str) -> anyhow::Result<String> {
    let mut out = csv::Writer::from_writer(Vec::new());
    out.write_record(headers)?;
    let mut stmt = db.prepare(sql)?;
    let mut rows = stmt.query([])?;
    while let Some(r) = rows.next()? {
        let fields = (0..headers.len())
            .map(|i| Ok(super::apply::text_of(r.get_ref(i)?)))
            .collect::<rusqlite::Result<Vec<String>>>()?;
        out.write_record(&fields)?;
    }
    Ok(String::from_utf8(out.into_inner()?)?)
}

/// A TOML basic string: JSON's string escapes are TOML's.
fn quote(s: &str) -> String {
    serde_json::Value::String(s.to_string()).to_string()
}
