//! `get_alarm_kpis`: how the alarm system is performing over a window, as ISA-18.2 and
//! EEMUA 191 measure it: for "what are our worst alarms this week?".

use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::Value;

use super::{ToolContext, ToolDef, ToolError, define, parse_args};
use crate::alarms::kpi;
use crate::domain::Access;

const NAME: &str = "get_alarm_kpis";
const DESCRIPTION: &str = "The alarm system's performance over a window (default: the 7 days to now), as ISA-18.2 \
Table 7 and EEMUA 191 define it, counting annunciated activations only (new occurrences not shelved or out of \
service; acknowledgements, returns to normal and repeats while active are not counted): annunciated, rate_per_day, \
rate_per_hour, rate_per_10min with rate_verdict, peak_10min (with its period's start), pct_periods_over_10, \
pct_time_in_flood and floods (start, end, activations, top contributors), top10_share_pct and bad_actors (the 10 \
points with most activations: asset_id, sensor_id, code, activations, share_pct), chattering and fleeting points, \
stale alarms (active 24 h or more at the end), priority_pct against the 80/15/5 target, shelved and out-of-service \
points with minutes. Each figure's definition is in `definitions`, its target in `targets`: quote them when you \
judge a figure. from and to are RFC 3339 UTC (e.g. 2026-11-23T00:00:00Z) or a date; to is exclusive; hours=8 \
instead of from gives the last shift. Lists are cut \
to 10 rows, the count in *_total.";

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Args {
    /// Start of the window, RFC 3339 UTC or a date. Default: 7 days before `to`.
    from: Option<String>,
    /// End of the window, exclusive. Default: now.
    to: Option<String>,
    /// Instead of `from`: the window's length in hours, ending at `to`, 1 to 9600 (8 for a shift).
    #[schemars(range(min = 1, max = 9600))]
    hours: Option<i64>,
}

pub fn def() -> ToolDef {
    define::<Args>(NAME, DESCRIPTION, Access::Read, "Ask for a shorter window.", |ctx, args| {
        run(ctx, parse_args(args)?)
    })
}

/// Lists are cut to this many rows for the model; the full lists are in the API.
const ROWS: usize = 10;

fn run(ctx: &ToolContext, args: Args) -> Result<Value, ToolError> {
    let from = match (args.hours, args.from) {
        (Some(_), Some(_)) => return Err(ToolError::InvalidArguments("give from or hours, not both".into())),
        (Some(hours), None) => {
            super::check_range("hours", hours, 1, 9600)?;
            let to = args
                .to
                .as_deref()
                .map(crate::domain::parse_time)
                .transpose()
                .map_err(|e| ToolError::InvalidArguments(format!("to: {e}")))?;
            Some(to.unwrap_or(ctx.now).plus_secs(-3600 * hours).to_rfc3339())
        }
        (None, from) => from,
    };
    let (from, to) = kpi::window(from.as_deref(), args.to.as_deref(), ctx.now).map_err(ToolError::InvalidArguments)?;
    let mut figures = kpi::compute(ctx.db, from, to, kpi::KpiSettings::default(), Some(ROWS))?.to_json();
    let Some(map) = figures.as_object_mut() else { return Ok(figures) };
    // The chart's series is for the page, not for reading.
    map.remove("per_10min");
    // The chattering and fleeting lists come cut, with their totals: a week of a large
    // plant has thousands of fleeting points, and naming them all is most of the cost.
    for key in ["floods", "stale", "shelved", "out_of_service"] {
        if let Some(Value::Array(list)) = map.get_mut(key)
            && list.len() > ROWS
        {
            let total = list.len();
            list.truncate(ROWS);
            map.insert(format!("{key}_total"), total.into());
        }
    }
    Ok(figures)
}
