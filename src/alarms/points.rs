//! The master alarm database (MADB): each alarm point's rationalization, as the site's
//! sheet gives it (`plant import`): its priority and class, its causes, the consequence
//! of no action, the operator's response and the time allowed for it, and its settings.
//! A triage note quotes the documented response and consequence; a point without an
//! entry says it is not rationalized. Every change is kept in `alarm_point_changes`.

use rusqlite::{Connection, Row, params};
use serde::Serialize;

use crate::domain::Timestamp;

/// What a note and the HMI say of a point the master alarm database lacks.
pub const NOT_RATIONALIZED: &str = "not rationalized: the master alarm database has no entry for this alarm point, so it has no documented cause, consequence or operator response";

/// One alarm point's entry.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Rationalization {
    /// The entry's row, for its history.
    #[serde(skip)]
    pub id: i64,
    pub asset_id: String,
    pub code: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub sensor_id: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub priority: Option<String>,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub class: String,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub causes: String,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub consequence: String,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub response: String,
    /// The allowable response time, in minutes.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub respond_within_min: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub set_point: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub deadband: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub on_delay_s: Option<i64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub off_delay_s: Option<i64>,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub rationalized_by: String,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub rationalized_on: String,
}

const COLUMNS: &str =
    "id, asset_id, code, sensor_id, priority, class, causes, consequence, response, respond_within_min,
    set_point, deadband, on_delay_s, off_delay_s, rationalized_by, rationalized_on";

impl Rationalization {
    fn from_row(r: &Row) -> rusqlite::Result<Rationalization> {
        Ok(Rationalization {
            id: r.get(0)?,
            asset_id: r.get(1)?,
            code: r.get(2)?,
            sensor_id: r.get(3)?,
            priority: r.get(4)?,
            class: r.get(5)?,
            causes: r.get(6)?,
            consequence: r.get(7)?,
            response: r.get(8)?,
            respond_within_min: r.get(9)?,
            set_point: r.get(10)?,
            deadband: r.get(11)?,
            on_delay_s: r.get(12)?,
            off_delay_s: r.get(13)?,
            rationalized_by: r.get(14)?,
            rationalized_on: r.get(15)?,
        })
    }

    /// The causes as a list: sheets separate them with `;`.
    pub fn cause_list(&self) -> Vec<String> {
        split(&self.causes)
    }

    /// The operator's response, step by step.
    pub fn response_steps(&self) -> Vec<String> {
        split(&self.response)
    }

    /// `10 min`: the allowable response time as a note says it, in the unit the entry
    /// holds, so that the note's figure is the observed one.
    pub fn respond_within(&self) -> Option<String> {
        self.respond_within_min.map(|m| format!("{} min", crate::domain::shown(m)))
    }

    /// Who rationalized it and when, as a note says it: `rationalized by J. Murray on
    /// 2025-10-02`.
    pub fn provenance(&self) -> String {
        let by = (!self.rationalized_by.is_empty()).then(|| format!(" by {}", self.rationalized_by));
        let on = (!self.rationalized_on.is_empty()).then(|| format!(" on {}", self.rationalized_on));
        format!("master alarm database, rationalized{}{}", by.unwrap_or_default(), on.unwrap_or_default())
    }
}

fn split(text: &str) -> Vec<String> {
    text.split(';').map(|s| s.trim().trim_end_matches('.').to_string()).filter(|s| !s.is_empty()).collect()
}

/// The entry for one point (asset, sensor, code; the code in any case), if it has one
/// in service (see [`pick`]).
pub fn of(db: &Connection, asset: &str, sensor: Option<&str>, code: &str) -> rusqlite::Result<Option<Rationalization>> {
    Ok(pick(&of_asset(db, asset)?, sensor, code).cloned())
}

/// The entry of a point among its asset's entries: the sensor's own, else the asset's
/// entry for the code on any sensor.
pub fn pick<'a>(entries: &'a [Rationalization], sensor: Option<&str>, code: &str) -> Option<&'a Rationalization> {
    let of_code = |e: &&Rationalization| e.code.eq_ignore_ascii_case(code);
    let own = entries.iter().filter(of_code).find(|e| e.sensor_id.is_some() && e.sensor_id.as_deref() == sensor);
    own.or_else(|| entries.iter().filter(of_code).find(|e| e.sensor_id.is_none()))
}

/// Every entry of an asset, by code.
pub fn of_asset(db: &Connection, asset: &str) -> rusqlite::Result<Vec<Rationalization>> {
    db.prepare_cached(&format!(
        "SELECT {COLUMNS} FROM alarm_points WHERE asset_id = ?1 AND retired_at IS NULL ORDER BY code"
    ))?
    .query_map([asset], Rationalization::from_row)?
    .collect()
}

/// The point's entry as the alarm detail and the agent are given it: the entry, or
/// `{"rationalized": false, "note": ...}`.
pub fn to_json(entry: Option<&Rationalization>) -> serde_json::Value {
    match entry {
        Some(r) => {
            let mut v = serde_json::to_value(r).unwrap_or_default();
            v["rationalized"] = true.into();
            v
        }
        None => serde_json::json!({"rationalized": false, "note": NOT_RATIONALIZED}),
    }
}

/// One change of a point's entry.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PointChange {
    pub at: Timestamp,
    pub actor: String,
    /// `import` or `approval`.
    pub source: String,
    /// The field changed, or `point` when the entry was added, retired or returned.
    pub field: String,
    pub old: String,
    pub new: String,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub reason: String,
}

/// An entry's changes, newest first (at most `limit`).
pub fn history(db: &Connection, point: i64, limit: i64) -> rusqlite::Result<Vec<PointChange>> {
    db.prepare_cached(
        "SELECT at, actor, source, field, old, new, reason FROM alarm_point_changes
         WHERE point_id = ?1 ORDER BY at DESC, id DESC LIMIT ?2",
    )?
    .query_map(params![point, limit], |r| {
        Ok(PointChange {
            at: Timestamp::from_unix(r.get(0)?),
            actor: r.get(1)?,
            source: r.get(2)?,
            field: r.get(3)?,
            old: r.get(4)?,
            new: r.get(5)?,
            reason: r.get(6)?,
        })
    })?
    .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry() -> Rationalization {
        Rationalization {
            id: 1,
            asset_id: "FLT-401".into(),
            code: "TURBIDITY-HI".into(),
            sensor_id: None,
            priority: Some("high".into()),
            class: String::new(),
            causes: "Filter breakthrough; backwash overdue.".into(),
            consequence: String::new(),
            response: "Check the dose; backwash FLT-401".into(),
            respond_within_min: Some(0.5),
            set_point: None,
            deadband: None,
            on_delay_s: None,
            off_delay_s: None,
            rationalized_by: "J. Murray".into(),
            rationalized_on: String::new(),
        }
    }

    #[test]
    fn a_sheets_lists_and_times_read_as_a_note_says_them() {
        let e = entry();
        assert_eq!(e.cause_list(), ["Filter breakthrough", "backwash overdue"]);
        assert_eq!(e.response_steps(), ["Check the dose", "backwash FLT-401"]);
        assert_eq!(e.respond_within().as_deref(), Some("0.5 min"));
        assert_eq!(
            Rationalization { respond_within_min: Some(10.0), ..e.clone() }.respond_within().as_deref(),
            Some("10 min")
        );
        assert_eq!(e.provenance(), "master alarm database, rationalized by J. Murray");
        let v = to_json(Some(&e));
        assert_eq!(v["rationalized"], true);
        assert!(v.get("consequence").is_none(), "empty fields are left out: {v}");
        assert_eq!(to_json(None)["rationalized"], false);
    }
}
