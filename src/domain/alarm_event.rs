//! An alarm event from the source: what ingest parses, the alarm lifecycle applies, and
//! the limits evaluation makes from readings. Here so that `alarms` and `ingest` both
//! depend on it, not on each other.

use serde::Deserialize;

use super::{AssetId, SensorId, Severity, Timestamp};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Transition {
    Raised,
    Cleared,
}

#[derive(Debug, Clone, PartialEq)]
pub struct AlarmEvent {
    pub event_id: String,
    pub asset_id: AssetId,
    pub sensor_id: Option<SensorId>,
    pub code: String,
    pub severity: Severity,
    pub transition: Transition,
    pub value: Option<f64>,
    pub threshold: Option<f64>,
    pub time: Timestamp,
    /// The milliseconds past `time`'s second (0-999), kept in the alarm journal.
    pub millis: u16,
    /// Untrusted text from the source, at most 1,000 characters.
    pub message: String,
}

impl AlarmEvent {
    /// When it happened, in milliseconds since the epoch.
    pub fn at_ms(&self) -> i64 {
        self.time.unix() * 1000 + i64::from(self.millis)
    }
}
