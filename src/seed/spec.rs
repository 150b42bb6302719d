//! The plant description in `seed/plant.toml`, as parsed. Unknown keys are refused so
//! a typo in the file is an error, not a silently missing sensor.

use std::collections::BTreeMap;

use serde::Deserialize;

use crate::domain::{AssetKind, AssetStatus, Criticality, SensorKind};

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PlantSpec {
    pub site: SiteSpec,
    pub stations: Vec<StationSpec>,
    pub templates: BTreeMap<String, Vec<SensorTemplate>>,
    pub assets: Vec<AssetSpec>,
    #[serde(default)]
    pub maintenance: Vec<MaintenanceSpec>,
    /// How the assets act on each other, as a plant file's `[[connections]]`.
    #[serde(default)]
    pub connections: Vec<ConnectionSpec>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ConnectionSpec {
    pub from: String,
    pub kind: String,
    pub to: String,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SiteSpec {
    pub id: String,
    pub name: String,
    pub timezone: String,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StationSpec {
    pub id: String,
    pub name: String,
}

#[derive(Debug, Clone, Copy, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Limits {
    pub ll: Option<f64>,
    pub l: Option<f64>,
    pub h: Option<f64>,
    pub hh: Option<f64>,
}

impl Limits {
    /// In the order ll, l, h, hh.
    pub fn as_array(&self) -> [Option<f64>; 4] {
        [self.ll, self.l, self.h, self.hh]
    }
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SensorTemplate {
    pub tag: String,
    pub kind: String,
    pub description: String,
    pub unit: String,
    pub limits: Limits,
    pub deadband: f64,
    pub alarm_prefix: Option<String>,
    pub nominal: f64,
    pub noise: f64,
    pub demand: f64,
}

impl SensorTemplate {
    pub fn sensor_kind(&self) -> Result<SensorKind, String> {
        SensorKind::parse(&self.kind).map_err(|e| format!("template {}: {e}", self.tag))
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Fault {
    BearingWear,
    Cavitation,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AssetSpec {
    pub id: String,
    pub station: String,
    pub kind: String,
    pub name: String,
    pub status: String,
    pub criticality: String,
    pub manufacturer: String,
    pub model: String,
    pub machine_class: Option<String>,
    pub rated_power_kw: Option<f64>,
    pub installed_on: String,
    pub drives: Option<String>,
    pub fault: Option<Fault>,
}

impl AssetSpec {
    pub fn parsed(&self) -> Result<(AssetKind, AssetStatus, Criticality), String> {
        let at = |e: String| format!("asset {}: {e}", self.id);
        Ok((
            AssetKind::parse(&self.kind).map_err(at)?,
            AssetStatus::parse(&self.status).map_err(at)?,
            Criticality::parse(&self.criticality).map_err(at)?,
        ))
    }
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MaintenanceSpec {
    pub asset: String,
    pub days_ago: i64,
    pub kind: String,
    pub summary: String,
    pub technician: String,
}
