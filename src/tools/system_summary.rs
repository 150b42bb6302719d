//! `get_system_summary`: the plant at a glance, and where to look first.

use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::{Map, Value, json};

use super::{ToolContext, ToolDef, ToolError, define, parse_args};
use crate::domain::{Access, Severity};

const NAME: &str = "get_system_summary";
const DESCRIPTION: &str = "Overview of the whole site right now: asset counts by status, active alarms by severity \
(and how many are unacknowledged), work orders by status, and the up to 5 assets most in need of attention with the \
reason (active alarms weighted by severity and asset criticality, fault status, overdue maintenance). Takes no \
arguments. Use it first when a question is about the plant as a whole or you do not know where to start; then call \
get_asset_details with an asset_id from needs_attention.";

/// No arguments.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Args {}

pub fn def() -> ToolDef {
    define::<Args>(NAME, DESCRIPTION, Access::Read, "", |ctx, args| run(ctx, parse_args(args)?))
}

/// Counts of `column` values in one GROUP BY query, as a JSON object.
fn counts(ctx: &ToolContext, sql: &str) -> Result<Map<String, Value>, ToolError> {
    let mut stmt = ctx.db.prepare_cached(sql)?;
    let rows = stmt.query_map([], |r| Ok((r.get::<_, String>(0)?, r.get::<_, i64>(1)?)))?;
    let mut out = Map::new();
    for row in rows {
        let (k, n) = row?;
        out.insert(k, json!(n));
    }
    Ok(out)
}

/// An asset that may need attention, as scored.
struct Candidate {
    id: String,
    status: String,
    criticality: String,
    /// Active alarms, and those unacknowledged.
    active: i64,
    unacked: i64,
    /// Last maintenance over a year ago, or never recorded.
    overdue: bool,
    score: i64,
}

impl Candidate {
    /// Why it scored, with its active alarms' codes (`codes`).
    fn reason(&self, codes: &str) -> String {
        let mut reason = String::new();
        if self.active > 0 {
            reason += &format!("{} active alarm(s): {codes}; ", self.active);
        }
        if self.unacked > 0 {
            reason += &format!("{} unacknowledged; ", self.unacked);
        }
        if self.status == "fault" {
            reason += "asset status is fault; ";
        }
        reason += &format!("criticality {}", self.criticality);
        if self.overdue {
            reason += "; no maintenance recorded in the last 365 days";
        }
        reason
    }
}

fn run(ctx: &ToolContext, _: Args) -> Result<Value, ToolError> {
    let site: (String, String) =
        ctx.db.query_row("SELECT id, name FROM sites LIMIT 1", [], |r| Ok((r.get(0)?, r.get(1)?))).map_err(|_| {
            ToolError::Rejected("The twin holds no plant yet: run `twinops seed` or connect the SCADA feed.".into())
        })?;
    // Kept by triggers (migration 11): a large utility's assets are not counted per call.
    let by_status = counts(ctx, "SELECT status, n FROM asset_status_counts WHERE n > 0 ORDER BY status")?;
    let asset_total: i64 = by_status.values().filter_map(Value::as_i64).sum();
    let rtn_unacked: i64 = ctx
        .db
        .prepare_cached("SELECT count(*) FROM alarms WHERE state = 'rtn_unacknowledged'")?
        .query_row([], |r| r.get(0))?;
    let work_orders = counts(ctx, "SELECT status, count(*) FROM work_orders GROUP BY status ORDER BY status")?;
    let alarm_changes = counts(ctx, "SELECT status, count(*) FROM alarm_changes GROUP BY status ORDER BY status")?;

    let (by_severity, unacked, shelved) = active_alarms(ctx)?;
    let attention = needs_attention(ctx)?;
    let active_total: i64 = by_severity.iter().map(|(_, n)| n).sum();
    let by_severity: Map<String, Value> =
        by_severity.into_iter().filter(|(_, n)| *n > 0).map(|(s, n)| (s.to_string(), json!(n))).collect();

    Ok(json!({
        "site": {"id": site.0, "name": site.1},
        "as_of": ctx.now,
        "assets": {"total": asset_total, "by_status": by_status},
        "active_alarms": {
            "total": active_total,
            "by_severity": by_severity,
            "unacknowledged": unacked,
            "shelved": shelved,
        },
        "returned_to_normal_unacknowledged": rtn_unacked,
        "work_orders": work_orders,
        "alarm_changes": alarm_changes,
        "needs_attention": attention,
        "next": "Call get_asset_details with an asset_id from needs_attention for its sensors, alarms and work orders.",
    }))
}

/// Active alarms by severity (highest first), and how many are unacknowledged and shelved.
/// Counts by severity, most urgent first; then unacknowledged and shelved.
type ActiveCounts = (Vec<(&'static str, i64)>, i64, i64);

fn active_alarms(ctx: &ToolContext) -> Result<ActiveCounts, ToolError> {
    // Most urgent first.
    let mut by_severity: Vec<(&'static str, i64)> = Severity::ALL.iter().rev().map(|s| (s.as_str(), 0)).collect();
    let (mut unacked, mut shelved) = (0, 0);
    let mut stmt = ctx.db.prepare_cached(
        "SELECT severity, state, count(*) FROM alarms INDEXED BY alarms_active_asset
         WHERE cleared_at IS NULL GROUP BY severity, state",
    )?;
    let mut rows = stmt.query([])?;
    while let Some(r) = rows.next()? {
        let (severity, state, n): (String, String, i64) = (r.get(0)?, r.get(1)?, r.get(2)?);
        if let Some(entry) = by_severity.iter_mut().find(|(s, _)| *s == severity) {
            entry.1 += n;
        }
        match state.as_str() {
            "unacknowledged" => unacked += n,
            "shelved" => shelved += n,
            _ => {}
        }
    }
    Ok((by_severity, unacked, shelved))
}

/// The five assets most in need of attention, with why.
fn needs_attention(ctx: &ToolContext) -> Result<Vec<Value>, ToolError> {
    // Attention score: active alarms weighted by severity (1/3/9/27), times criticality
    // (A=3, B=2, C=1); plus 20 for a faulted asset, 2 per unacknowledged alarm, and 5 when
    // the last maintenance is over a year old (or never recorded). Driven from the
    // active alarms' per-asset sums (kept by triggers, migration 14) through covering
    // indexes: only assets with an active alarm or in fault can score. CROSS JOIN keeps
    // the few assets in alarm as the outer loop, not the 18,000 in the index.
    let mut stmt = ctx.db.prepare_cached(
        "WITH candidates AS (
             SELECT a.id, a.status, a.criticality, a.last_maintenance_on, act.n, act.unacked, act.weight AS w
             FROM active_alarm_stats act
             CROSS JOIN assets a INDEXED BY assets_attention ON a.id = act.asset_id AND a.retired_at IS NULL
             UNION ALL
             SELECT id, status, criticality, last_maintenance_on, 0, 0, 0 FROM assets
             WHERE status = 'fault' AND retired_at IS NULL
               AND NOT EXISTS (SELECT 1 FROM alarms al INDEXED BY alarms_active_asset
                               WHERE al.asset_id = assets.id AND al.cleared_at IS NULL)
         )
         SELECT id, status, criticality, n, unacked, coalesce(last_maintenance_on < ?1, 1) AS overdue,
                w * CASE criticality WHEN 'A' THEN 3 WHEN 'B' THEN 2 ELSE 1 END
                  + iif(status = 'fault', 20, 0) + 2 * unacked + 5 * coalesce(last_maintenance_on < ?1, 1) AS score
         FROM candidates ORDER BY score DESC, id LIMIT 5",
    )?;
    let top: Vec<Candidate> = stmt
        .query_map([ctx.now.plus_secs(-365 * 86_400).date()], |r| {
            Ok(Candidate {
                id: r.get(0)?,
                status: r.get(1)?,
                criticality: r.get(2)?,
                active: r.get(3)?,
                unacked: r.get(4)?,
                overdue: r.get(5)?,
                score: r.get(6)?,
            })
        })?
        .collect::<Result<_, _>>()?;
    // Names and alarm codes for the five shown only.
    let mut detail = ctx.db.prepare_cached(
        "SELECT a.name, (SELECT group_concat(code || ' ' || severity, ', ') FROM alarms INDEXED BY alarms_open_point
                         WHERE asset_id = a.id AND cleared_at IS NULL)
         FROM assets a WHERE a.id = ?1",
    )?;
    let attention: Vec<Value> = top
        .iter()
        .map(|c| {
            let (name, codes): (String, Option<String>) = detail.query_row([&c.id], |r| Ok((r.get(0)?, r.get(1)?)))?;
            Ok(json!({
                "asset_id": c.id,
                "name": name,
                "status": c.status,
                "criticality": c.criticality,
                "score": c.score,
                "reason": c.reason(codes.as_deref().unwrap_or("")),
            }))
        })
        .collect::<rusqlite::Result<Vec<Value>>>()?;
    Ok(attention)
}
