//! What the alarm figures count and by which thresholds: the KPI settings (chattering,
//! fleeting, stale, flood) and an alarm point's identity. Below the journal's pass
//! (`activity`), its hourly cache (`kpi_cache`) and the figures (`kpi`), which all
//! speak of them.

use serde::Serialize;

/// The thresholds in use; every figure is stated with the definition it was computed by.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct KpiSettings {
    /// Chattering: this many activations of one point ...
    pub chatter_activations: usize,
    /// ... within this many seconds (ISA-18.2 TR5 and EEMUA 191: 3 in 60 s).
    pub chatter_window_secs: i64,
    /// Fleeting: returned to normal within this many seconds of its activation.
    pub fleeting_secs: i64,
    /// Stale: active continuously this long at the end of the window.
    pub stale_hours: i64,
    /// A flood starts with a 10-minute period of more than this many activations ...
    pub flood_start: i64,
    /// ... and ends with the first period of fewer than this many.
    pub flood_end: i64,
}

impl Default for KpiSettings {
    fn default() -> Self {
        KpiSettings {
            chatter_activations: super::CHATTER_ACTIVATIONS as usize,
            chatter_window_secs: super::CHATTER_WINDOW_SECS,
            fleeting_secs: 10,
            stale_hours: 24,
            flood_start: super::FLOOD_START,
            flood_end: super::FLOOD_END,
        }
    }
}

impl KpiSettings {
    pub fn validate(&self) -> Result<(), String> {
        if !(2..=100).contains(&self.chatter_activations) {
            return Err(format!(
                "chatter activations must be 2 to 100 (ISA-18.2 uses 3), got {}",
                self.chatter_activations
            ));
        }
        if !(1..=3600).contains(&self.chatter_window_secs) {
            return Err(format!(
                "chatter window must be 1 to 3600 s (ISA-18.2 uses 60), got {}",
                self.chatter_window_secs
            ));
        }
        if !(1..=3600).contains(&self.fleeting_secs) || !(1..=8760).contains(&self.stale_hours) {
            return Err("fleeting must be 1 to 3600 s and stale 1 to 8760 h".into());
        }
        if self.flood_end > self.flood_start || self.flood_end < 1 {
            return Err(format!(
                "a flood must end below where it starts: end {} is above start {}",
                self.flood_end, self.flood_start
            ));
        }
        Ok(())
    }
}

/// The longest window the figures are computed over (a year and a month).
pub const MAX_WINDOW_DAYS: i64 = 400;

/// An alarm point: what the operator's list shows as one alarm.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, serde::Deserialize)]
pub struct Point {
    pub asset_id: String,
    pub sensor_id: Option<String>,
    pub code: String,
}

impl Point {
    /// The order lists of points take among equals: by code, then asset and sensor.
    pub fn order(&self, other: &Point) -> std::cmp::Ordering {
        (&self.code, &self.asset_id, &self.sensor_id).cmp(&(&other.code, &other.asset_id, &other.sensor_id))
    }
}
