//! `get_alarm_correlations`: the consequential pairs learned from the journal for an
//! asset's alarms: what usually follows them, and what they usually follow.

use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::{Value, json};

use super::{ToolContext, ToolDef, ToolError, define, parse_args};
use crate::domain::{Access, AssetId};
use crate::episodes::upkeep;

const NAME: &str = "get_alarm_correlations";
const DESCRIPTION: &str = "What the alarm journal has learned about an asset's alarms (asset_id, e.g. PUMP-007; \
code to narrow to one alarm, e.g. PRESS-SUC-LO): pairs where one alarm follows another within 5 minutes in most of \
the first's activations, more often than chance, from the last 90 days. follows_it: alarms that come after this \
asset's; it_follows: alarms this asset's come after. Each with support (times seen), first_activations, confidence \
(share of the first's activations followed), lift (how many times chance), lag_median_s and lag_p90_s. Use it to say \
which alarms are likely consequences of which, and quote the figures; a strong, steady pair is a candidate for \
designed suppression: propose_alarm_change with while_active set to the pair's first and suppress to its then proposes \
it for a supervisor, with the evidence. An empty result means nothing has been learned, not that the alarms are \
unrelated.";

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Args {
    /// The asset's id, as list_assets gives it.
    asset_id: String,
    /// One alarm code of the asset's, to narrow the pairs to it.
    code: Option<String>,
}

pub fn def() -> ToolDef {
    define::<Args>(NAME, DESCRIPTION, Access::Read, "", |ctx, args| run(ctx, parse_args(args)?))
}

/// Pairs per direction given to the model.
const ROWS: usize = 10;

fn run(ctx: &ToolContext, args: Args) -> Result<Value, ToolError> {
    let asset = AssetId::parse(&args.asset_id).map_err(|e| ToolError::InvalidArguments(format!("asset_id: {e}")))?;
    let known: Option<String> = rusqlite::OptionalExtension::optional(ctx.db.query_row(
        "SELECT id FROM assets WHERE id = ?1 COLLATE NOCASE",
        [asset.as_str()],
        |r| r.get(0),
    ))?;
    let Some(asset) = known else {
        return Err(ToolError::NotFound(format!("No asset {}; list_assets finds asset ids.", args.asset_id)));
    };
    let code = args.code.as_deref().map(str::to_uppercase);
    let is = |a: &str, c: &str| a.eq_ignore_ascii_case(&asset) && code.as_deref().is_none_or(|x| x == c.to_uppercase());
    let learned = upkeep::learned(ctx.db)?;
    let mut pairs: Vec<_> = learned.iter().collect();
    pairs.sort_by(|a, b| b.lift.total_cmp(&a.lift).then(b.support.cmp(&a.support)));
    let shown = |p: &&crate::episodes::pairs::Pair| {
        json!({
            "first": {"asset_id": p.first.asset_id, "sensor_id": p.first.sensor_id, "code": p.first.code},
            "then": {"asset_id": p.then.asset_id, "sensor_id": p.then.sensor_id, "code": p.then.code},
            "support": p.support, "first_activations": p.first_activations,
            "confidence": (p.confidence * 1000.0).round() / 1000.0, "lift": (p.lift * 10.0).round() / 10.0,
            "lag_median_s": p.lag_median_s, "lag_p90_s": p.lag_p90_s,
        })
    };
    let follows_it: Vec<Value> =
        pairs.iter().filter(|p| is(&p.first.asset_id, &p.first.code)).take(ROWS).map(shown).collect();
    let it_follows: Vec<Value> =
        pairs.iter().filter(|p| is(&p.then.asset_id, &p.then.code)).take(ROWS).map(shown).collect();
    Ok(json!({"asset_id": asset, "code": code, "follows_it": follows_it, "it_follows": it_follows,
              "pairs_learned": learned.len()}))
}
