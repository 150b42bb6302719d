//! `list_assets`: find assets by station, kind, status or name.

use rusqlite::types::Value as Sql;
use rusqlite::{OptionalExtension, params_from_iter};
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::{Value, json};

use super::{ToolContext, ToolDef, ToolError, check_page, default_page_limit, define, page, parse_args};
use crate::domain::{Access, AssetStatus};
use crate::store::{Filter, like_pattern_contains};

const NAME: &str = "list_assets";
/// Matches counted before the count says "more than".
const COUNT_CAP: i64 = 1000;
/// The assets whose id or name the trigram index matched.
const BY_TEXT: &str = "assets_text t JOIN assets a ON a.id = t.id";
const DESCRIPTION: &str = "List the plant's assets (pumps, motors, blowers, valves, tanks, analysers: whatever \
the site has), optionally filtered by station, kind, status or a text match on id or name; sorted by id, paged. \
Each row has id, name, kind, station, status, criticality (A = loss stops supply, B = loss reduces redundancy, \
C = minor) and the number of active alarms. Returns total (counted up to 1,000; past that, total_is_lower_bound is true and you should narrow the \
filters), offset and next_offset (null on the last page); a kind \
the twin lacks is answered with the kinds it has. Ids and kinds are the site's own, matched in any case. Use it to find \
asset ids; then call get_asset_details for one asset.";

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Args {
    /// Station id, e.g. STN-S. Omit for all stations.
    station_id: Option<String>,
    /// Asset kind, as the site names it (e.g. centrifugal_pump, blower, uv_reactor); any case.
    #[schemars(length(min = 1, max = 64))]
    kind: Option<String>,
    /// Operating status.
    status: Option<AssetStatus>,
    /// Case-insensitive text that the asset id or name must contain, e.g. "booster".
    #[schemars(length(min = 1, max = 100))]
    text: Option<String>,
    /// Rows per page, 1 to 50. Default 20.
    #[serde(default = "default_page_limit")]
    #[schemars(range(min = 1, max = 50))]
    limit: i64,
    /// Rows to skip, for the next page use next_offset. Default 0.
    #[serde(default)]
    #[schemars(range(min = 0))]
    offset: i64,
}

pub fn def() -> ToolDef {
    define::<Args>(
        NAME,
        DESCRIPTION,
        Access::Read,
        "Add filters (station_id, kind, status, text) or a smaller limit.",
        |ctx, args| run(ctx, parse_args(args)?),
    )
}

fn run(ctx: &ToolContext, args: Args) -> Result<Value, ToolError> {
    check_page(args.limit, args.offset)?;
    let station = args.station_id.as_deref().map(|s| known_station(ctx, s.trim())).transpose()?;
    let kind = args.kind.as_deref().map(|k| known_kind(ctx, k)).transpose()?;
    let text = match args.text.as_deref().map(str::trim) {
        Some("") => return Err(ToolError::InvalidArguments("text must not be empty; omit it to list all".into())),
        Some(t) if t.chars().count() > 100 => {
            return Err(ToolError::InvalidArguments("text must be at most 100 characters".into()));
        }
        t => t.map(str::to_string),
    };
    let filter_is_in_service_only = station.is_none() && kind.is_none() && args.status.is_none();
    let mut filter = Filter::new();
    filter.and("a.retired_at IS NULL", []);
    if let Some(station) = station {
        filter.and("a.station_id = ?", [Sql::from(station)]);
    }
    if let Some(kind) = kind {
        filter.and("a.kind = ?", [Sql::from(kind)]);
    }
    if let Some(status) = args.status {
        filter.and("a.status = ?", [Sql::from(status.as_str().to_string())]);
    }
    // The count stops past `cap`: beyond it the model needs a narrower list, not a number.
    let cap = COUNT_CAP.max(args.offset + args.limit);
    let (filter, from, total) = matching(ctx, filter, text.as_deref(), filter_is_in_service_only, cap)?;
    let where_clause = filter.where_clause();
    let mut stmt = ctx.db.prepare_cached(
        &[
            "SELECT a.id, a.name, a.kind, a.station_id, a.status, a.criticality,
                (SELECT count(*) FROM alarms al WHERE al.asset_id = a.id AND al.cleared_at IS NULL)
         FROM ",
            from,
            &where_clause,
            " ORDER BY a.id LIMIT ? OFFSET ?",
        ]
        .concat(),
    )?;
    let assets: Vec<Value> = stmt
        .query_map(params_from_iter(filter.params_with([Sql::from(args.limit), Sql::from(args.offset)])), |r| {
            Ok(json!({
                "id": r.get::<_, String>(0)?,
                "name": r.get::<_, String>(1)?,
                "kind": r.get::<_, String>(2)?,
                "station_id": r.get::<_, String>(3)?,
                "status": r.get::<_, String>(4)?,
                "criticality": r.get::<_, String>(5)?,
                "active_alarms": r.get::<_, i64>(6)?,
            }))
        })?
        .collect::<Result<_, _>>()?;
    Ok(paged(assets, total, cap, &args))
}

/// Where the page comes from and how many assets match (counted up to `cap + 1`).
/// Text of 3 characters or more is looked up in the trigram index; the page then comes
/// from its matches when they are few, or from a walk in id order, which meets enough
/// matches soon, when they are many.
fn matching(
    ctx: &ToolContext,
    mut filter: Filter,
    text: Option<&str>,
    filter_is_in_service_only: bool,
    cap: i64,
) -> Result<(Filter, &'static str, i64), ToolError> {
    let count = |filter: &Filter, from: &str| -> rusqlite::Result<i64> {
        ctx.db
            .prepare_cached(
                &["SELECT count(*) FROM (SELECT 1 FROM ", from, &filter.where_clause(), " LIMIT ?)"].concat(),
            )?
            .query_row(params_from_iter(filter.params_with([Sql::from(cap + 1)])), |r| r.get(0))
    };
    let mut from = "assets a";
    let total = match text {
        Some(t) if t.chars().count() >= 3 => {
            let phrase = Sql::from(format!("\"{}\"", t.replace('"', "\"\"")));
            let mut indexed = filter.clone();
            indexed.and("t.assets_text MATCH ?", [phrase.clone()]);
            // The index holds only assets in service: text alone is counted in it.
            let total = if filter_is_in_service_only {
                let mut alone = Filter::new();
                alone.and("t.assets_text MATCH ?", [phrase]);
                count(&alone, "assets_text t")?
            } else {
                count(&indexed, BY_TEXT)?
            };
            if total <= cap {
                (filter, from) = (indexed, BY_TEXT);
            } else {
                like_text(&mut filter, t);
            }
            total
        }
        Some(t) => {
            like_text(&mut filter, t);
            count(&filter, from)?
        }
        None => count(&filter, from)?,
    };
    Ok((filter, from, total))
}

/// The page, with a hint when the count was capped, nothing matched, or the offset is
/// past the end.
fn paged(assets: Vec<Value>, total: i64, cap: i64, args: &Args) -> Value {
    let capped = total > cap;
    let total = total.min(cap);
    let mut out = page(total, args.offset, "assets", assets);
    if capped {
        out["total_is_lower_bound"] = json!(true);
        out["next_offset"] = json!(args.offset + args.limit);
        out["hint"] = json!(format!(
            "More than {total} assets match. Narrow the list with station_id, kind, status or a longer text."
        ));
    } else if total == 0 {
        out["hint"] = json!("No asset matches these filters. Remove a filter, or check the spelling.");
    } else if args.offset >= total {
        out["hint"] = json!(format!("offset {} is past the last row; there are {total} rows in all.", args.offset));
    }
    out
}

/// The station id as the twin spells it, or what does exist.
fn known_station(ctx: &ToolContext, given: &str) -> Result<String, ToolError> {
    let known: Option<String> = ctx
        .db
        .prepare_cached("SELECT id FROM stations WHERE id = ?1 COLLATE NOCASE")?
        .query_row([given], |r| r.get(0))
        .optional()?;
    known.ok_or_else(|| unknown_station(ctx, given))
}

/// The kind's canonical name when an asset in service has it; otherwise the kinds there are.
fn known_kind(ctx: &ToolContext, given: &str) -> Result<String, ToolError> {
    let kind = crate::domain::kind_name(given);
    let known: Option<i64> = ctx
        .db
        .prepare_cached("SELECT 1 FROM assets WHERE kind = ?1 AND retired_at IS NULL LIMIT 1")?
        .query_row([&kind], |r| r.get(0))
        .optional()?;
    if known.is_none() {
        let list: Vec<String> = kinds(ctx)?.iter().map(|(k, n)| format!("{k} ({n})")).collect();
        return Err(ToolError::NotFound(format!(
            "No asset of kind '{kind}'. Kinds in the twin: {}. Omit kind to list all assets.",
            list.join(", ")
        )));
    }
    Ok(kind)
}

/// The asset kinds in the twin, with how many assets each (retired ones left out).
/// Text anywhere in the id or name, in any case, by scanning (what the trigram index
/// cannot look up, or need not).
fn like_text(filter: &mut Filter, text: &str) {
    let pattern = like_pattern_contains(text);
    filter.and(
        "(a.id LIKE ? ESCAPE '\\' OR a.name LIKE ? ESCAPE '\\')",
        [Sql::from(pattern.clone()), Sql::from(pattern)],
    );
}

fn kinds(ctx: &ToolContext) -> Result<Vec<(String, i64)>, ToolError> {
    let mut stmt = ctx
        .db
        .prepare_cached("SELECT kind, count(*) FROM assets WHERE retired_at IS NULL GROUP BY kind ORDER BY kind")?;
    Ok(stmt.query_map([], |r| Ok((r.get(0)?, r.get(1)?)))?.collect::<Result<_, _>>()?)
}

fn unknown_station(ctx: &ToolContext, given: &str) -> ToolError {
    let list = ctx
        .db
        .prepare_cached("SELECT id || ' (' || name || ')' FROM stations ORDER BY id LIMIT 20")
        .and_then(|mut stmt| stmt.query_map([], |r| r.get::<_, String>(0))?.collect::<Result<Vec<_>, _>>());
    match list {
        Ok(list) => ToolError::NotFound(format!("No station {given}. Stations: {}.", list.join(", "))),
        Err(e) => ToolError::from(e),
    }
}
