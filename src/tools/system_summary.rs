//! `get_system_summary`: the plant at a glance, and where to look first.

use rusqlite::params;
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::{Map, Value, json};

use super::{ToolContext, ToolDef, ToolError, define, parse_args};
use crate::domain::Access;

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

fn run(ctx: &ToolContext, _: Args) -> Result<Value, ToolError> {
    let site: (String, String) =
        ctx.db.query_row("SELECT id, name FROM sites LIMIT 1", [], |r| Ok((r.get(0)?, r.get(1)?))).map_err(|_| {
            ToolError::Rejected("The twin holds no plant yet: run `twinops seed` or connect the SCADA feed.".into())
        })?;
    let by_status = counts(ctx, "SELECT status, count(*) FROM assets GROUP BY status ORDER BY status")?;
    let asset_total: i64 = by_status.values().filter_map(Value::as_i64).sum();
    let by_severity = counts(
        ctx,
        "SELECT severity, count(*) FROM alarms WHERE cleared_at IS NULL GROUP BY severity
         ORDER BY CASE severity WHEN 'critical' THEN 0 WHEN 'high' THEN 1 WHEN 'medium' THEN 2 ELSE 3 END",
    )?;
    let active_total: i64 = by_severity.values().filter_map(Value::as_i64).sum();
    let by_state = counts(
        ctx,
        "SELECT state, count(*) FROM alarms
         WHERE state IN ('unacknowledged', 'rtn_unacknowledged', 'shelved', 'out_of_service') GROUP BY state",
    )?;
    let work_orders = counts(ctx, "SELECT status, count(*) FROM work_orders GROUP BY status ORDER BY status")?;

    // Attention score: active alarms weighted by severity (1/3/9/27), times criticality
    // (A=3, B=2, C=1); plus 20 for a faulted asset, 2 per unacknowledged alarm, and 5 when
    // the last maintenance is over a year old (or never recorded).
    // Driven from the active alarms (few) rather than the assets (many): only assets
    // with an active alarm or in fault can score.
    let mut stmt = ctx.db.prepare_cached(
        "WITH act AS (
             SELECT asset_id,
                    count(*) AS n,
                    sum(CASE severity WHEN 'critical' THEN 27 WHEN 'high' THEN 9 WHEN 'medium' THEN 3 ELSE 1 END) AS w,
                    sum(state = 'unacknowledged') AS unacked,
                    group_concat(code || ' ' || severity, ', ') AS codes
             FROM alarms WHERE cleared_at IS NULL GROUP BY asset_id
         ),
         candidates AS (
             SELECT asset_id AS id FROM act
             UNION SELECT id FROM assets WHERE status = 'fault'
         ),
         scored AS (
             SELECT a.id, a.name, a.status, a.criticality, act.n, act.unacked, act.codes,
                    coalesce(a.last_maintenance_on < ?1, 1) AS overdue,
                    coalesce(act.w, 0) * CASE a.criticality WHEN 'A' THEN 3 WHEN 'B' THEN 2 ELSE 1 END
                      + iif(a.status = 'fault', 20, 0) + 2 * coalesce(act.unacked, 0) AS base
             FROM candidates c JOIN assets a ON a.id = c.id LEFT JOIN act ON act.asset_id = a.id
         )
         SELECT id, name, status, criticality, base + 5 * overdue AS score,
                rtrim(
                    iif(n > 0, n || ' active alarm(s): ' || codes || '; ', '')
                    || iif(unacked > 0, unacked || ' unacknowledged; ', '')
                    || iif(status = 'fault', 'asset status is fault; ', '')
                    || 'criticality ' || criticality
                    || iif(overdue, '; no maintenance recorded in the last 365 days', ''),
                    '; ')
         FROM scored ORDER BY score DESC, id LIMIT 5",
    )?;
    let attention: Vec<Value> = stmt
        .query_map(params![ctx.now.plus_secs(-365 * 86_400).date()], |r| {
            Ok(json!({
                "asset_id": r.get::<_, String>(0)?,
                "name": r.get::<_, String>(1)?,
                "status": r.get::<_, String>(2)?,
                "criticality": r.get::<_, String>(3)?,
                "score": r.get::<_, i64>(4)?,
                "reason": r.get::<_, String>(5)?,
            }))
        })?
        .collect::<Result<_, _>>()?;

    Ok(json!({
        "site": {"id": site.0, "name": site.1},
        "as_of": ctx.now,
        "assets": {"total": asset_total, "by_status": by_status},
        "active_alarms": {
            "total": active_total,
            "by_severity": by_severity,
            "unacknowledged": by_state.get("unacknowledged").cloned().unwrap_or(json!(0)),
            "shelved": by_state.get("shelved").cloned().unwrap_or(json!(0)),
        },
        "returned_to_normal_unacknowledged": by_state.get("rtn_unacknowledged").cloned().unwrap_or(json!(0)),
        "work_orders": work_orders,
        "needs_attention": attention,
        "next": "Call get_asset_details with an asset_id from needs_attention for its sensors, alarms and work orders.",
    }))
}
