//! `search_docs`: the documentation search (BM25, fused with embeddings when configured).

use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::{Value, json};

use super::{ToolContext, ToolDef, ToolError, check_range, define, parse_args};
use crate::domain::Access;
use crate::rag::SearchError;

const NAME: &str = "search_docs";
const DESCRIPTION: &str = "Search the site's documentation: alarm response procedures (one per alarm code, with \
cause, consequence, operator action and time to respond), O&M manuals per equipment type, vibration severity \
guidance, lockout/tagout, escalation and on-call. Returns the best-matching chunks, best first, each with a citation \
key (e.g. arp-vibration.md#2, or blower-om.pdf#p3 for a page of a PDF manual), its document and heading, and a short snippet. Query with the alarm code, equipment \
and symptom, e.g. 'VIB-HI pump bearing vibration'. Then call read_doc with a citation to read the chunk in full; \
cite it in your answer as [arp-vibration.md#2].";

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Args {
    /// What to look for, in words: alarm code, equipment, symptom, task.
    #[schemars(length(min = 1, max = 500))]
    query: String,
    /// Results, 1 to 10. Default 5.
    #[serde(default = "default_limit")]
    #[schemars(range(min = 1, max = 10))]
    limit: i64,
}

fn default_limit() -> i64 {
    5
}

pub fn def() -> ToolDef {
    define::<Args>(NAME, DESCRIPTION, Access::Read, "Ask for fewer results.", |ctx, args| run(ctx, parse_args(args)?))
}

fn run(ctx: &ToolContext, args: Args) -> Result<Value, ToolError> {
    check_range("limit", args.limit, 1, 10)?;
    if args.query.chars().count() > 500 {
        return Err(ToolError::InvalidArguments("query must be at most 500 characters; use the key words only".into()));
    }
    let hits = ctx.docs.search(ctx.db, &args.query, args.limit as usize).map_err(|e| match e {
        SearchError::NoTerms => ToolError::InvalidArguments(e.to_string()),
        SearchError::Sqlite(e) => ToolError::Internal(e.into()),
    })?;
    if hits.is_empty() {
        return Ok(json!({
            "results": [],
            "hint": "No documentation matched. Try other words: the alarm code (e.g. PRESS-SUC-LO), the equipment (pump, motor, valve, reservoir) or the symptom.",
        }));
    }
    let results: Vec<Value> = hits
        .into_iter()
        .map(|h| json!({"citation": h.citation, "document": h.document, "heading": h.heading, "snippet": h.snippet}))
        .collect();
    Ok(json!({
        "results": results,
        "next": "Call read_doc with a citation for the full text; cite it as [citation] in your answer.",
    }))
}
