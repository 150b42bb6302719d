//! Alarm occurrences as every surface lists them (the HMI, the `list_alarms` tool, the
//! CLI): one query, one row type, filters as a type.

use rusqlite::types::Value as Sql;
use rusqlite::{Connection, params_from_iter};
use serde::Serialize;

use crate::domain::{AlarmState, AssetId, Severity, Timestamp, shown};
use crate::store::Filter;

/// Which occurrences, by their state.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Scope {
    #[default]
    Any,
    /// The condition is still present (not cleared), shelved and out of service included.
    Active,
    /// What an operator must attend to: unacknowledged, acknowledged, or returned to
    /// normal but not acknowledged.
    Attention,
    /// Hidden from the operators: shelved or out of service.
    Suppressed,
    State(AlarmState),
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Order {
    /// Raised most recently first.
    #[default]
    Newest,
    /// Highest severity first, then newest.
    Priority,
}

/// What to list. `limit` is required by construction: a list is always bounded.
#[derive(Debug, Clone, Default)]
pub struct AlarmFilter {
    pub asset: Option<AssetId>,
    /// A sensor id, or `-` for alarms on the asset itself.
    pub sensor: Option<String>,
    pub code: Option<String>,
    pub min_severity: Option<Severity>,
    pub scope: Scope,
    /// Raised at or after.
    pub since: Option<Timestamp>,
    /// Raised before.
    pub until: Option<Timestamp>,
    pub order: Order,
}

/// One occurrence, with its triage note's id and the triage job's state when there are.
#[derive(Debug, Clone, Serialize)]
pub struct AlarmRow {
    pub id: i64,
    pub asset_id: String,
    pub sensor_id: Option<String>,
    pub code: String,
    pub severity: String,
    pub state: String,
    pub message: String,
    /// Rounded for display (4 significant figures); stored values are unchanged.
    pub value: Option<f64>,
    pub threshold: Option<f64>,
    pub raised_at: Timestamp,
    pub acked_at: Option<Timestamp>,
    pub acked_by: Option<String>,
    pub cleared_at: Option<Timestamp>,
    pub shelved_until: Option<Timestamp>,
    pub reraise_count: i64,
    pub note_id: Option<i64>,
    pub triage: Option<String>,
}

impl AlarmFilter {
    fn filter(&self) -> Filter {
        let mut f = Filter::new();
        if let Some(asset) = &self.asset {
            f.and("a.asset_id = ?", [Sql::from(asset.as_str().to_string())]);
        }
        if let Some(sensor) = &self.sensor {
            f.and("coalesce(a.sensor_id, '-') = ?", [Sql::from(sensor.clone())]);
        }
        if let Some(code) = &self.code {
            f.and("a.code = ?", [Sql::from(code.clone())]);
        }
        if let Some(min) = self.min_severity {
            let at_least: Vec<Sql> =
                Severity::ALL.iter().filter(|s| **s >= min).map(|s| Sql::from(s.as_str().to_string())).collect();
            match at_least.len() {
                1 => f.and("a.severity = ?", at_least),
                2 => f.and("a.severity IN (?, ?)", at_least),
                3 => f.and("a.severity IN (?, ?, ?)", at_least),
                _ => &mut f,
            };
        }
        match self.scope {
            Scope::Any => &mut f,
            Scope::Active => f.and("a.cleared_at IS NULL", []),
            Scope::Attention => f.and("a.state IN ('unacknowledged', 'acknowledged', 'rtn_unacknowledged')", []),
            Scope::Suppressed => f.and("a.state IN ('shelved', 'out_of_service')", []),
            Scope::State(s) => f.and("a.state = ?", [Sql::from(s.as_str().to_string())]),
        };
        if let Some(since) = self.since {
            f.and("a.raised_at >= ?", [Sql::from(since.unix())]);
        }
        if let Some(until) = self.until {
            f.and("a.raised_at < ?", [Sql::from(until.unix())]);
        }
        f
    }
}

/// How many occurrences match.
pub fn count(db: &Connection, q: &AlarmFilter) -> rusqlite::Result<i64> {
    let f = q.filter();
    db.prepare_cached(&["SELECT count(*) FROM alarms a", &f.where_clause()].concat())?
        .query_row(params_from_iter(f.params_with([])), |r| r.get(0))
}

/// A page of the occurrences that match, in `q.order`.
pub fn list(db: &Connection, q: &AlarmFilter, limit: i64, offset: i64) -> rusqlite::Result<Vec<AlarmRow>> {
    let f = q.filter();
    let order = match q.order {
        Order::Newest => "a.raised_at DESC, a.id DESC".to_string(),
        Order::Priority => format!("{}, a.raised_at DESC, a.id DESC", Severity::sql_rank("a.severity")),
    };
    let sql = format!(
        "SELECT a.id, a.asset_id, a.sensor_id, a.code, a.severity, a.state, a.message, a.value, a.threshold,
                a.raised_at, a.acked_at, a.acked_by, a.cleared_at, a.shelved_until, a.reraise_count,
                (SELECT n.id FROM notes n WHERE n.alarm_id = a.id AND n.kind = 'triage'),
                (SELECT j.state FROM triage_jobs j WHERE j.id = a.triage_job)
         FROM alarms a{} ORDER BY {order} LIMIT ? OFFSET ?",
        f.where_clause()
    );
    let at = |v: Option<i64>| v.map(Timestamp::from_unix);
    let mut stmt = db.prepare_cached(&sql)?;
    let rows = stmt.query_map(params_from_iter(f.params_with([Sql::from(limit), Sql::from(offset)])), |r| {
        Ok(AlarmRow {
            id: r.get(0)?,
            asset_id: r.get(1)?,
            sensor_id: r.get(2)?,
            code: r.get(3)?,
            severity: r.get(4)?,
            state: r.get(5)?,
            message: r.get(6)?,
            value: r.get::<_, Option<f64>>(7)?.map(shown),
            threshold: r.get::<_, Option<f64>>(8)?.map(shown),
            raised_at: Timestamp::from_unix(r.get(9)?),
            acked_at: at(r.get(10)?),
            acked_by: r.get(11)?,
            cleared_at: at(r.get(12)?),
            shelved_until: at(r.get(13)?),
            reraise_count: r.get(14)?,
            note_id: r.get(15)?,
            triage: r.get(16)?,
        })
    })?;
    rows.collect()
}
