//! Errors that tell the model its next move: the right id, the closest matches, and
//! which tool lists the rest.

use rusqlite::{Connection, OptionalExtension};

use super::ToolError;
use crate::domain::{AssetId, IdError, SensorId};

/// Up to `n` candidates closest to `given` by edit distance, best first; only those
/// plausibly meant (distance at most a third of the length, and at least 2).
pub fn closest<'a>(given: &str, candidates: impl IntoIterator<Item = &'a str>, n: usize) -> Vec<String> {
    let given = given.to_ascii_uppercase();
    let max = (given.chars().count() / 3).max(2);
    let mut scored: Vec<(usize, &str)> = candidates
        .into_iter()
        .map(|c| (edit_distance(&given, &c.to_ascii_uppercase()), c))
        .filter(|(d, _)| *d <= max)
        .collect();
    scored.sort();
    scored.into_iter().take(n).map(|(_, c)| c.to_string()).collect()
}

/// Edit distance counting a swap of neighbours as one edit (optimal string
/// alignment): typing PUMP-070 for PUMP-007 is one slip, not two.
fn edit_distance(a: &str, b: &str) -> usize {
    let (a, b): (Vec<char>, Vec<char>) = (a.chars().collect(), b.chars().collect());
    let mut d = vec![vec![0usize; b.len() + 1]; a.len() + 1];
    for (i, row) in d.iter_mut().enumerate() {
        row[0] = i;
    }
    for (j, cell) in d[0].iter_mut().enumerate() {
        *cell = j;
    }
    for i in 1..=a.len() {
        for j in 1..=b.len() {
            let cost = usize::from(a[i - 1] != b[j - 1]);
            d[i][j] = (d[i - 1][j] + 1).min(d[i][j - 1] + 1).min(d[i - 1][j - 1] + cost);
            if i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1] {
                d[i][j] = d[i][j].min(d[i - 2][j - 2] + 1);
            }
        }
    }
    d[a.len()][b.len()]
}

/// An asset-id argument, parsed and known to exist.
pub fn existing_asset(db: &Connection, field: &str, raw: &str) -> Result<AssetId, ToolError> {
    let id = AssetId::parse(raw).map_err(|e| id_error(field, e))?;
    let found: Option<i64> =
        db.prepare_cached("SELECT 1 FROM assets WHERE id = ?1")?.query_row([&id], |r| r.get(0)).optional()?;
    match found {
        Some(_) => Ok(id),
        None => Err(unknown_asset(db, &id)?),
    }
}

fn unknown_asset(db: &Connection, id: &AssetId) -> Result<ToolError, ToolError> {
    let mut stmt = db.prepare_cached("SELECT id FROM assets")?;
    let ids: Vec<String> = stmt.query_map([], |r| r.get(0))?.collect::<Result<_, _>>()?;
    let near = closest(id.as_str(), ids.iter().map(String::as_str), 5);
    let hint = if near.is_empty() { String::new() } else { format!(" Closest asset ids: {}.", near.join(", ")) };
    Ok(ToolError::NotFound(format!(
        "No asset with id {id}.{hint} Call list_assets (filter by station_id, kind or text) to find asset ids."
    )))
}

/// A sensor-id argument, parsed and known to exist; returns it with its readings key.
pub fn existing_sensor(db: &Connection, field: &str, raw: &str) -> Result<(SensorId, i64), ToolError> {
    let id = match SensorId::parse(raw) {
        Ok(id) => id,
        Err(IdError::AssetNotSensor { given }) => {
            let sensors = sensors_of(db, &given)?;
            let list = if sensors.is_empty() {
                format!("No asset {given} exists either; call list_assets to find asset ids.")
            } else {
                format!("Sensors of {given}: {}.", sensors.join(", "))
            };
            return Err(ToolError::InvalidArguments(format!(
                "{field}: '{given}' is an asset id, not a sensor id. {list}"
            )));
        }
        Err(e) => return Err(id_error(field, e)),
    };
    let key: Option<i64> =
        db.prepare_cached("SELECT key FROM sensors WHERE id = ?1")?.query_row([&id], |r| r.get(0)).optional()?;
    if let Some(key) = key {
        return Ok((id, key));
    }
    let asset = id.asset();
    let sensors = sensors_of(db, &asset)?;
    let msg = if sensors.is_empty() {
        format!(
            "No sensor {id}: there is no asset {asset} either. Call list_assets to find asset ids, then get_asset_details for their sensors."
        )
    } else {
        let near = closest(id.as_str(), sensors.iter().map(String::as_str), 3);
        let near = if near.is_empty() { String::new() } else { format!(" Did you mean {}?", near.join(" or ")) };
        format!("No sensor {id}.{near} Sensors of {asset}: {}.", sensors.join(", "))
    };
    Err(ToolError::NotFound(msg))
}

fn sensors_of(db: &Connection, asset: &AssetId) -> Result<Vec<String>, ToolError> {
    let mut stmt = db.prepare_cached("SELECT id FROM sensors WHERE asset_id = ?1 ORDER BY id")?;
    let ids = stmt.query_map([asset], |r| r.get(0))?.collect::<Result<_, _>>()?;
    Ok(ids)
}

/// Explains an id that did not parse, with the move that fixes it.
pub fn id_error(field: &str, e: IdError) -> ToolError {
    let next = match &e {
        IdError::SensorNotAsset { asset, .. } => {
            format!(" Pass {field}=\"{asset}\", or call get_sensor_history for the sensor itself.")
        }
        IdError::BadAsset { .. } => " Call list_assets to find asset ids.".to_string(),
        IdError::BadSensor { .. } | IdError::AssetNotSensor { .. } => {
            " Call get_asset_details with the asset id to list its sensors.".to_string()
        }
        IdError::BadCitation { .. } => " Call search_docs to find citation keys.".to_string(),
    };
    ToolError::InvalidArguments(format!("{field}: {e}.{next}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn closest_prefers_small_edits() {
        let ids = ["PUMP-007", "PUMP-017", "PUMP-070", "MTR-007", "VLV-001"];
        assert_eq!(closest("PUMP-077", ids, 3), ["PUMP-007", "PUMP-017", "PUMP-070"]);
        assert_eq!(closest("PUMP-070", ["PUMP-001", "PUMP-007"], 1), ["PUMP-007"], "a swap is one edit");
        assert!(closest("RESERVOIR-999", ids, 3).is_empty());
        assert_eq!(edit_distance("kitten", "sitting"), 3);
    }
}
