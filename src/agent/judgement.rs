//! Judgement about the alarm before the process, as an experienced operator reads one:
//! a reading that has not moved at all for hours is a stuck transmitter; a lone sample
//! far from its neighbours is a spike in the signal; a low reading from a machine on
//! standby is expected; a value on the edge of its band that has changed little is
//! marginal, not a developing fault. The rules model's note leads with it; each figure
//! it quotes is one a tool returned.

use serde_json::Value;

use super::model::TaskFacts;
use super::note::Urgency;

/// What the note says first when the alarm itself is the story.
#[derive(Debug, Clone, PartialEq)]
pub struct Judgement {
    pub sentence: String,
    pub cause: String,
    pub action: String,
    /// The urgency it calls for, when it differs from the alarm's own.
    pub urgency: Option<Urgency>,
}

/// Fewest readings that make a flat line a stuck transmitter rather than a quiet hour.
const STUCK_MIN_READINGS: i64 = 30;
/// A value this close beyond its set point (share of the set point) is on the edge.
const EDGE_MARGIN: f64 = 0.05;
/// ... when it changed by less than this share of the set point over the window.
const EDGE_CHANGE: f64 = 0.10;

/// The judgement the observations call for, if any: from the asset's details (status,
/// the sensor's latest value, the active alarm) and the sensor's history.
pub fn judge(t: &TaskFacts, details: &Value, history: &Value, alarm: Option<&Value>) -> Option<Judgement> {
    let sensor_id = t.sensor_id.as_deref()?;
    let sensor = details["sensors"].as_array()?.iter().find(|s| s["id"].as_str() == Some(sensor_id))?;
    let unit = sensor["unit"].as_str().map(|u| format!(" {u}")).unwrap_or_default();
    let stats = &history["stats"];
    standby(t, details, sensor)
        .or_else(|| stuck(sensor_id, &unit, history))
        .or_else(|| spike(sensor_id, &unit, stats, history, sensor, alarm.is_some()))
        .or_else(|| edge(sensor_id, &unit, stats, sensor, alarm?))
}

/// The hours at the end of the history in which the reading never moved, all at the
/// last value: from the history's hourly rows (start, mean, min, max).
fn stuck(sensor_id: &str, unit: &str, history: &Value) -> Option<Judgement> {
    let rows = history["series"]["rows"].as_array()?;
    let samples = history["samples"].as_i64()?;
    let last = rows.last()?[3].as_f64()?;
    let flat: Vec<&Value> =
        rows.iter().rev().take_while(|r| r[2].as_f64() == Some(last) && r[3].as_f64() == Some(last)).collect();
    if flat.len() < 2 || samples < STUCK_MIN_READINGS {
        return None;
    }
    let since = flat.last()?[0].as_str()?;
    let value = &flat[0][3];
    Some(Judgement {
        sentence: format!(
            "{sensor_id} has read exactly {value}{unit} in every hour since {since}: a reading that does not move at all points to a stuck transmitter or a frozen signal, not to the process."
        ),
        cause: format!("Stuck transmitter or frozen signal: {sensor_id} has not changed since {since}"),
        action: format!("Check {sensor_id} locally (a hand-held reading) and its signal before any mechanical work"),
        urgency: None,
    })
}

/// A cleared alarm whose history was beyond a limit for a minute or two, with a peak
/// several times the readings' mean, and a normal reading now.
fn spike(
    sensor_id: &str,
    unit: &str,
    stats: &Value,
    history: &Value,
    sensor: &Value,
    active: bool,
) -> Option<Judgement> {
    let (max, mean) = (stats["max"].as_f64()?, stats["mean"].as_f64()?);
    let beyond = history["minutes_beyond_limits"].as_object()?;
    let minutes = beyond.values().filter_map(Value::as_i64).max()?;
    let normal_now = sensor["band"].as_str() == Some("normal");
    if active || !normal_now || minutes == 0 || minutes > 2 || mean <= 0.0 || max < 3.0 * mean {
        return None;
    }
    Some(Judgement {
        sentence: format!(
            "{sensor_id} was beyond its limits for {minutes} minute(s) of the {} h history: its peak of {}{unit} stands alone among readings averaging {}{unit}, and it reads {}{unit} now. A lone spike points to the signal (a loose connector, cabling, interference), not to the machine.",
            history["window"]["hours"], stats["max"], stats["mean"], sensor["latest"]["value"]
        ),
        cause: "Signal spike from the transmitter or its cabling (a loose connector, interference)".into(),
        action: format!(
            "Check {sensor_id}'s transmitter, connector and cabling; no mechanical action unless the spike repeats"
        ),
        urgency: Some(Urgency::Soon),
    })
}

fn standby(t: &TaskFacts, details: &Value, sensor: &Value) -> Option<Judgement> {
    let status = details["asset"]["status"].as_str()?;
    let code = t.code.as_deref()?;
    let asset = details["asset"]["id"].as_str()?;
    if !matches!(status, "standby" | "stopped") || !(code.ends_with("-LO") || code.ends_with("-LOLO")) {
        return None;
    }
    let kind = sensor["kind"].as_str().unwrap_or("reading").replace('_', " ");
    Some(Judgement {
        sentence: format!(
            "{asset} is on {status}: a low {kind} is expected because it is not running, so {code} should be suppressed while it is on {status} (state-based alarming); no mechanical action is needed."
        ),
        cause: format!("{asset} is on {status} and not running, so a low {kind} is expected"),
        action: format!(
            "Ask the alarm engineer to suppress {code} while {asset} is on {status} (state-based alarming)"
        ),
        urgency: Some(Urgency::Monitor),
    })
}

/// Only for low and medium alarms: a high or critical one keeps its urgency.
fn edge(sensor_id: &str, unit: &str, stats: &Value, sensor: &Value, alarm: &Value) -> Option<Judgement> {
    let (latest, set_point) = (sensor["latest"]["value"].as_f64()?, alarm["threshold"].as_f64()?);
    // The fitted change across the history's window (a single reading a day ago may be
    // from before the window's readings).
    let change = stats["trend"]["change"].as_f64().or_else(|| sensor["change_24h"].as_f64())?;
    let scale = set_point.abs();
    let minor = matches!(alarm["severity"].as_str(), Some("low" | "medium"));
    if !minor || scale == 0.0 || (latest - set_point).abs() > EDGE_MARGIN * scale || change.abs() > EDGE_CHANGE * scale
    {
        return None;
    }
    Some(Judgement {
        sentence: format!(
            "{sensor_id} reads {}{unit} against its set point of {}{unit} and has changed little over the window: a value on the edge of its band rather than a developing fault.",
            sensor["latest"]["value"], alarm["threshold"]
        ),
        cause: "A value on the edge of its band: the process near its set point, not a developing fault".into(),
        action: format!(
            "Watch {sensor_id} and check it on the next inspection round; no work order unless it moves further past its set point"
        ),
        urgency: Some(Urgency::Soon),
    })
}
