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

/// An asset-id argument, parsed and known to exist, as the twin spells it (ids are
/// found case-insensitively: `p-101a` is `P-101A`).
pub fn existing_asset(db: &Connection, field: &str, raw: &str) -> Result<AssetId, ToolError> {
    let id = AssetId::parse(raw).map_err(|e| id_error(field, e))?;
    let stored: Option<String> = db
        .prepare_cached("SELECT id FROM assets WHERE id = ?1 COLLATE NOCASE")?
        .query_row([&id], |r| r.get(0))
        .optional()?;
    if let Some(stored) = stored {
        return AssetId::parse(&stored).map_err(|e| id_error(field, e));
    }
    let sensor: Option<(String, String)> = db
        .prepare_cached("SELECT id, asset_id FROM sensors WHERE id = ?1 COLLATE NOCASE")?
        .query_row([&id], |r| Ok((r.get(0)?, r.get(1)?)))
        .optional()?;
    if let Some((sensor, asset)) = sensor {
        return Err(ToolError::InvalidArguments(format!(
            "{field}: '{sensor}' is a sensor id, not an asset id; its asset is {asset}. Pass {field}=\"{asset}\", or call get_sensor_history for the sensor itself."
        )));
    }
    Err(unknown_asset(db, &id)?)
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

/// A sensor-id argument, parsed and known to exist, as the twin spells it; returns it
/// with its readings key.
pub fn existing_sensor(db: &Connection, field: &str, raw: &str) -> Result<(SensorId, i64), ToolError> {
    let id = SensorId::parse(raw).map_err(|e| id_error(field, e))?;
    let found: Option<(String, i64)> = db
        .prepare_cached("SELECT id, key FROM sensors WHERE id = ?1 COLLATE NOCASE")?
        .query_row([&id], |r| Ok((r.get(0)?, r.get(1)?)))
        .optional()?;
    if let Some((stored, key)) = found {
        return Ok((SensorId::parse(&stored).map_err(|e| id_error(field, e))?, key));
    }
    let asset_named = |name: &str| -> Result<Option<String>, ToolError> {
        Ok(db
            .prepare_cached("SELECT id FROM assets WHERE id = ?1 COLLATE NOCASE")?
            .query_row([name], |r| r.get(0))
            .optional()?)
    };
    if let Some(asset) = asset_named(id.as_str())? {
        let sensors = sensors_of(db, &asset)?;
        let list = if sensors.is_empty() {
            "It has no sensors.".to_string()
        } else {
            format!("Sensors of {asset}: {}.", sensors.join(", "))
        };
        return Err(ToolError::InvalidArguments(format!("{field}: '{asset}' is an asset id, not a sensor id. {list}")));
    }
    // `ASSET.TAG`, as the demo plant and some sites name sensors: the asset's own list.
    if let Some(asset) = id.as_str().rsplit_once('.').map(|(a, _)| a).map(asset_named).transpose()?.flatten() {
        let sensors = sensors_of(db, &asset)?;
        let near = closest(id.as_str(), sensors.iter().map(String::as_str), 3);
        let near = if near.is_empty() { String::new() } else { format!(" Did you mean {}?", near.join(" or ")) };
        return Err(ToolError::NotFound(format!("No sensor {id}.{near} Sensors of {asset}: {}.", sensors.join(", "))));
    }
    let mut stmt = db.prepare_cached("SELECT id FROM sensors")?;
    let all: Vec<String> = stmt.query_map([], |r| r.get(0))?.collect::<Result<_, _>>()?;
    let near = closest(id.as_str(), all.iter().map(String::as_str), 3);
    let near = if near.is_empty() { String::new() } else { format!(" Did you mean {}?", near.join(" or ")) };
    let no_asset = match id.as_str().rsplit_once('.') {
        Some((asset, _)) => format!(" (there is no asset {asset} either)"),
        None => String::new(),
    };
    Err(ToolError::NotFound(format!(
        "No sensor {id}{no_asset}.{near} Call get_asset_details with the asset id to list its sensors, or list_assets to find the asset."
    )))
}

fn sensors_of(db: &Connection, asset: &str) -> Result<Vec<String>, ToolError> {
    let mut stmt = db.prepare_cached("SELECT id FROM sensors WHERE asset_id = ?1 ORDER BY id")?;
    let ids = stmt.query_map([asset], |r| r.get(0))?.collect::<Result<_, _>>()?;
    Ok(ids)
}

/// The assets a text names, directly or by one of their sensors, as the twin spells
/// them, in order, at most three; and the words that read like ids (two letters and a
/// digit at least) but name nothing in the twin, at most three. Any naming scheme: the
/// twin says what is an id, not the word's shape.
pub fn mentioned_assets(db: &Connection, text: &str) -> rusqlite::Result<(Vec<String>, Vec<String>)> {
    let (mut found, mut unknown): (Vec<String>, Vec<String>) = (Vec::new(), Vec::new());
    let words = text
        .split(|c: char| !(c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.' | '/' | ':')))
        .map(|w| w.trim_end_matches(['.', ':', '/']))
        .filter(|w| AssetId::parse(w).is_ok());
    let mut asset = db.prepare_cached("SELECT id FROM assets WHERE id = ?1 COLLATE NOCASE")?;
    let mut sensor = db.prepare_cached("SELECT asset_id FROM sensors WHERE id = ?1 COLLATE NOCASE")?;
    for word in words {
        let hit: Option<String> = match asset.query_row([word], |r| r.get(0)).optional()? {
            Some(a) => Some(a),
            None => sensor.query_row([word], |r| r.get(0)).optional()?,
        };
        match hit {
            Some(a) if !found.contains(&a) && found.len() < 3 => found.push(a),
            Some(_) => {}
            None => {
                let letters = word.chars().filter(char::is_ascii_alphabetic).count();
                let id_like = letters >= 2 && word.chars().any(|c| c.is_ascii_digit());
                if id_like && !unknown.iter().any(|u| u == word) && unknown.len() < 3 {
                    unknown.push(word.to_string());
                }
            }
        }
    }
    Ok((found, unknown))
}

/// Ids from the twin for the examples in tool descriptions, prompts and messages,
/// which are written with the demo plant's (`PUMP-007`, `PUMP-007.VIB-DE`, `STN-S`):
/// a site's model is shown its own ids' shape, not ours.
#[derive(Debug, Clone, Default)]
pub struct Examples {
    swaps: Vec<(&'static str, String)>,
}

impl Examples {
    /// The first sensor of the twin and its asset and station, where the demo's ids are
    /// not in the twin; nothing to swap on the demo plant or an empty twin.
    pub fn from_twin(db: &Connection) -> rusqlite::Result<Examples> {
        let demo: Option<i64> =
            db.query_row("SELECT 1 FROM sensors WHERE id = 'PUMP-007.VIB-DE'", [], |r| r.get(0)).optional()?;
        if demo.is_some() {
            return Ok(Examples::default());
        }
        let found: Option<(String, String, String)> = db
            .query_row(
                "SELECT s.id, a.id, a.station_id FROM sensors s JOIN assets a ON a.id = s.asset_id
                 WHERE s.retired_at IS NULL AND a.retired_at IS NULL ORDER BY s.key LIMIT 1",
                [],
                |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)),
            )
            .optional()?;
        Ok(Examples {
            swaps: found.map_or_else(Vec::new, |(sensor, asset, station)| {
                // Longest first: the sensor id holds the asset id.
                vec![("PUMP-007.VIB-DE", sensor), ("PUMP-007", asset), ("STN-S", station)]
            }),
        })
    }

    /// `text` with the demo's example ids replaced by the twin's.
    pub fn apply(&self, text: &str) -> String {
        self.swaps.iter().fold(text.to_string(), |t, (demo, own)| t.replace(demo, own))
    }
}

/// Explains an id that did not parse, with the move that fixes it.
pub fn id_error(field: &str, e: IdError) -> ToolError {
    let next = match &e {
        IdError::BadAsset { .. } => " Call list_assets to find asset ids.",
        IdError::BadSensor { .. } => " Call get_asset_details with the asset id to list its sensors.",
        IdError::BadCitation { .. } => " Call search_docs to find citation keys.",
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
