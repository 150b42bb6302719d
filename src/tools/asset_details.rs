//! `get_asset_details`: everything about one asset in one call.

use rusqlite::{OptionalExtension, params};
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::{Value, json};

use super::hints::existing_asset;
use super::{ToolContext, ToolDef, ToolError, define, parse_args};
use crate::alarms::list::{AlarmFilter, Order, Scope};
use crate::domain::{Access, Timestamp, shown};

const NAME: &str = "get_asset_details";
const DESCRIPTION: &str = "Everything about one asset in one call: its data (kind, station, status, criticality, \
make/model, installed and last-maintenance dates, which motor drives it or which pump it drives); every sensor with \
its latest value, unit, alarm limits (ll, l, h, hh), the band the value is in (normal, low, low_low, high, high_high), \
the change over the last 24 hours, and for vibration the ISO 10816-3 zone (A good, B acceptable, C restricted \
operation, D damage likely); active alarms, each with its rationalization from the master alarm database (causes, consequence of no action, the operator's documented response, respond_within_min in minutes) or rationalized: false when the site has not rationalized it; alarm_points, the documented response to each of the asset's rationalized alarm points, active or not; open work orders; the 5 latest maintenance records. asset_id format: \
PUMP-007 (not a sensor id like PUMP-007.VIB-DE). Next: get_sensor_history for a sensor's trend, list_alarms for \
alarm history, search_docs for procedures.";

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Args {
    /// Asset id, e.g. PUMP-007.
    asset_id: String,
}

pub fn def() -> ToolDef {
    define::<Args>(NAME, DESCRIPTION, Access::Read, "", |ctx, args| run(ctx, parse_args(args)?))
}

/// Readings older than this are reported as stale: the transmitter or the feed is down.
const STALE_SECS: i64 = 15 * 60;

fn run(ctx: &ToolContext, args: Args) -> Result<Value, ToolError> {
    let id = existing_asset(ctx.db, "asset_id", &args.asset_id)?;
    let (asset, machine_class) = asset_row(ctx, &id)?;
    let sensors = sensors(ctx, &id, machine_class.as_deref())?;
    let active =
        AlarmFilter { asset: Some(id.clone()), scope: Scope::Active, order: Order::Priority, ..Default::default() };
    // The asset's master alarm database entries, read once for its alarms and its points.
    let entries = crate::alarms::points::of_asset(ctx.db, id.as_str())?;
    let alarms: Vec<Value> = crate::alarms::list::list(ctx.db, &active, 100, 0)?
        .into_iter()
        .map(|a| {
            let entry = crate::alarms::points::pick(&entries, a.sensor_id.as_deref(), &a.code);
            let mut rationalization = crate::alarms::points::to_json(entry);
            if let Some(r) = rationalization.as_object_mut() {
                r.remove("asset_id");
                r.remove("code");
            }
            json!({
                "alarm_id": a.id, "code": a.code, "sensor_id": a.sensor_id, "severity": a.severity, "state": a.state,
                "raised_at": a.raised_at, "value": a.value, "threshold": a.threshold, "reraise_count": a.reraise_count,
                "rationalization": rationalization,
            })
        })
        .collect();
    let work_orders = rows_json(
        ctx,
        "SELECT id, status, action, priority, title, proposed_at
         FROM work_orders WHERE asset_id = ?1 AND status IN ('pending_approval', 'approved', 'dispatched')
         ORDER BY proposed_at DESC LIMIT 10",
        &id,
        |r| {
            Ok(json!({
                "work_order_id": r.get::<_, i64>(0)?, "status": r.get::<_, String>(1)?, "action": r.get::<_, String>(2)?,
                "priority": r.get::<_, String>(3)?, "title": r.get::<_, String>(4)?,
                "proposed_at": Timestamp::from_unix(r.get(5)?),
            }))
        },
    )?;
    let maintenance = rows_json(
        ctx,
        "SELECT performed_on, kind, summary, technician FROM maintenance_records
         WHERE asset_id = ?1 ORDER BY performed_on DESC LIMIT 5",
        &id,
        |r| {
            Ok(json!({
                "date": r.get::<_, String>(0)?, "kind": r.get::<_, String>(1)?,
                "summary": r.get::<_, String>(2)?, "technician": r.get::<_, String>(3)?,
            }))
        },
    )?;

    // The asset's rationalized points, briefly: what the site documented the operator
    // does about each alarm, whether or not it is active.
    let points: Vec<Value> = entries
        .into_iter()
        .filter(|p| !p.response.is_empty())
        .map(|p| {
            json!({"code": p.code, "sensor_id": p.sensor_id, "priority": p.priority,
                   "respond_within_min": p.respond_within_min, "response": p.response})
        })
        .collect();
    Ok(json!({
        "as_of": ctx.now,
        "asset": asset,
        "sensors": sensors,
        "active_alarms": alarms,
        "alarm_points": points,
        "open_work_orders": work_orders,
        "recent_maintenance": maintenance,
    }))
}

/// The asset's own row as JSON, and its ISO 10816-3 machine class.
fn asset_row(ctx: &ToolContext, id: &crate::domain::AssetId) -> Result<(Value, Option<String>), ToolError> {
    Ok(ctx
        .db
        .prepare_cached(
            "SELECT a.id, a.name, a.kind, a.station_id, s.name, a.status, a.criticality, a.manufacturer, a.model,
                a.machine_class, a.rated_power_kw, a.installed_on, a.last_maintenance_on, a.drives,
                (SELECT group_concat(m.id, ', ') FROM assets m WHERE m.drives = a.id)
         FROM assets a JOIN stations s ON s.id = a.station_id WHERE a.id = ?1",
        )?
        .query_row([id], |r| {
            let machine_class: Option<String> = r.get(9)?;
            Ok((
                json!({
                    "id": r.get::<_, String>(0)?,
                    "name": r.get::<_, String>(1)?,
                    "kind": r.get::<_, String>(2)?,
                    "station_id": r.get::<_, String>(3)?,
                    "station": r.get::<_, String>(4)?,
                    "status": r.get::<_, String>(5)?,
                    "criticality": r.get::<_, String>(6)?,
                    "manufacturer": r.get::<_, String>(7)?,
                    "model": r.get::<_, String>(8)?,
                    "machine_class": machine_class,
                    "rated_power_kw": r.get::<_, Option<f64>>(10)?,
                    "installed_on": r.get::<_, String>(11)?,
                    "last_maintenance_on": r.get::<_, Option<String>>(12)?,
                    "drives": r.get::<_, Option<String>>(13)?,
                    "driven_by": r.get::<_, Option<String>>(14)?,
                }),
                machine_class,
            ))
        })?)
}

/// Every sensor of the asset with its latest value, band, day's change, staleness and,
/// for vibration, the ISO 10816-3 zone.
fn sensors(
    ctx: &ToolContext,
    id: &crate::domain::AssetId,
    machine_class: Option<&str>,
) -> Result<Vec<Value>, ToolError> {
    let now = ctx.now.unix();
    let mut latest = ctx.db.prepare_cached(
        "SELECT ts / 1000, value FROM readings WHERE sensor_key = ?1 AND ts < (?2 + 1) * 1000 ORDER BY ts DESC LIMIT 1",
    )?;
    let mut stmt = ctx.db.prepare_cached(
        "SELECT key, id, kind, description, unit, limit_ll, limit_l, limit_h, limit_hh, stale_since, range_low, range_high
         FROM sensors WHERE asset_id = ?1 ORDER BY id",
    )?;
    // key, id, kind, description, unit, limits (ll, l, h, hh), communication lost at,
    // measuring range (low, high)
    type SensorRow = (i64, String, String, String, String, [Option<f64>; 4], Option<i64>, [Option<f64>; 2]);
    let rows: Vec<SensorRow> = stmt
        .query_map([id], |r| {
            let limits = [r.get(5)?, r.get(6)?, r.get(7)?, r.get(8)?];
            Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?, r.get(4)?, limits, r.get(9)?, [r.get(10)?, r.get(11)?]))
        })?
        .collect::<Result<_, _>>()?;
    let mut sensors = Vec::with_capacity(rows.len());
    for (key, sensor_id, kind, description, unit, limits, lost_at, range) in rows {
        let last: Option<(i64, f64)> =
            latest.query_row(params![key, now], |r| Ok((r.get(0)?, r.get(1)?))).optional()?;
        // The change over 24 h needs a reading from then (within the hour), not just
        // any older one: a sensor that was silent for days has no day's change.
        let day_ago: Option<f64> = latest
            .query_row(params![key, now - 86_400], |r| Ok((r.get::<_, i64>(0)?, r.get(1)?)))
            .optional()?
            .filter(|(ts, _)| *ts >= now - 86_400 - 3_600)
            .map(|(_, v)| v);
        let mut sensor = json!({
            "id": sensor_id,
            "kind": kind,
            "description": description,
            "unit": unit,
            "limits": {"ll": limits[0], "l": limits[1], "h": limits[2], "hh": limits[3]},
        });
        if range.iter().any(Option::is_some) {
            sensor["range"] = json!({"low": range[0], "high": range[1]});
        }
        match last {
            Some((ts, value)) => {
                sensor["latest"] = json!({"value": shown(value), "at": Timestamp::from_unix(ts)});
                sensor["band"] = json!(band(value, limits));
                if let Some(before) = day_ago {
                    sensor["change_24h"] = json!(shown(value - before));
                }
                if let Some(lost) = lost_at {
                    sensor["stale"] = json!(format!(
                        "communication lost {} ago (at {}): the last value is not current",
                        crate::domain::approx_duration(now - lost),
                        Timestamp::from_unix(lost).to_rfc3339()
                    ));
                } else if now - ts > STALE_SECS {
                    sensor["stale"] = json!(format!("no reading for {} minutes", (now - ts) / 60));
                }
                if kind == "vibration"
                    && let Some((zone, meaning)) = machine_class.and_then(|c| iso_10816_zone(c, value))
                {
                    sensor["iso_10816_zone"] = json!(format!("{zone} ({meaning})"));
                }
            }
            None => sensor["latest"] = Value::Null,
        }
        sensors.push(sensor);
    }

    Ok(sensors)
}

fn rows_json(
    ctx: &ToolContext,
    sql: &str,
    id: &crate::domain::AssetId,
    map: impl FnMut(&rusqlite::Row) -> rusqlite::Result<Value>,
) -> Result<Vec<Value>, ToolError> {
    let mut stmt = ctx.db.prepare_cached(sql)?;
    let rows = stmt.query_map([id], map)?.collect::<Result<_, _>>()?;
    Ok(rows)
}

/// Which alarm band a value is in, outermost first.
pub fn band(value: f64, [ll, l, h, hh]: [Option<f64>; 4]) -> &'static str {
    let beyond = |limit: Option<f64>, high: bool| limit.is_some_and(|x| if high { value >= x } else { value <= x });
    if beyond(hh, true) {
        "high_high"
    } else if beyond(h, true) {
        "high"
    } else if beyond(ll, false) {
        "low_low"
    } else if beyond(l, false) {
        "low"
    } else {
        "normal"
    }
}

/// ISO 10816-3 evaluation zone for a vibration velocity (mm/s RMS), from the machine
/// class text ("... group 1|2, rigid|flexible ..."). Zone boundaries A/B, B/C, C/D.
pub fn iso_10816_zone(machine_class: &str, mm_s: f64) -> Option<(char, &'static str)> {
    let class = machine_class.to_ascii_lowercase();
    let flexible = class.contains("flexible");
    let bounds = match (class.contains("group 1"), class.contains("group 2"), flexible) {
        (true, _, false) => [2.3, 4.5, 7.1],
        (true, _, true) => [3.5, 7.1, 11.0],
        (_, true, false) => [1.4, 2.8, 4.5],
        (_, true, true) => [2.3, 4.5, 7.1],
        _ => return None,
    };
    Some(if mm_s <= bounds[0] {
        ('A', "newly commissioned condition")
    } else if mm_s <= bounds[1] {
        ('B', "acceptable for unrestricted long-term operation")
    } else if mm_s <= bounds[2] {
        ('C', "unsatisfactory: restricted operation until corrective action")
    } else {
        ('D', "severe enough to cause damage")
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bands_and_zones() {
        let limits = [Some(0.3), Some(0.5), Some(4.5), Some(7.1)];
        assert_eq!(band(6.0, limits), "high");
        assert_eq!(band(7.1, limits), "high_high");
        assert_eq!(band(0.4, limits), "low");
        assert_eq!(band(2.0, [None; 4]), "normal");
        let class = "ISO 10816-3 group 2, flexible support";
        assert_eq!(iso_10816_zone(class, 6.2).unwrap().0, 'C');
        assert_eq!(iso_10816_zone(class, 1.9).unwrap().0, 'A');
        assert_eq!(iso_10816_zone("group 2, rigid", 3.0).unwrap().0, 'C');
        assert!(iso_10816_zone("unknown", 3.0).is_none());
    }
}
