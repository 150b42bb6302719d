//! `get_shift_handover`: what an earlier shift handed over.

use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::{Value, json};

use super::{ToolContext, ToolDef, ToolError, check_range, define, parse_args};
use crate::domain::Access;

const NAME: &str = "get_shift_handover";
const DESCRIPTION: &str = "A shift handover as it was written: written_at (UTC), written_by (schedule:handover is \
the shift change, user:NAME an operator who asked), its flags (e.g. ungrounded: a figure in it was not found in the \
tool results), and its text. back = 0 (the default) is the latest, 1 the one before it, up to 9. Use it when asked \
what the previous shift handed over, or to carry open items into a new handover. It describes the plant as it was \
then: check each item against the plant now with get_asset_details or list_alarms before repeating it.";

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Args {
    /// 0 for the latest handover, 1 for the one before it, up to 9. Default 0.
    #[serde(default)]
    #[schemars(range(min = 0, max = 9))]
    back: i64,
}

pub fn def() -> ToolDef {
    define::<Args>(NAME, DESCRIPTION, Access::Read, "", |ctx, args| run(ctx, parse_args(args)?))
}

fn run(ctx: &ToolContext, args: Args) -> Result<Value, ToolError> {
    check_range("back", args.back, 0, 9)?;
    let mut handovers = crate::handover::recent(ctx.db, args.back as u32 + 1)?;
    if handovers.is_empty() {
        return Err(ToolError::NotFound(
            "No shift handover has been written yet. For the plant now, call get_system_summary.".into(),
        ));
    }
    if handovers.len() <= args.back as usize {
        return Err(ToolError::NotFound(format!(
            "There are only {} handovers: back must be at most {}.",
            handovers.len(),
            handovers.len() - 1
        )));
    }
    let h = handovers.swap_remove(args.back as usize);
    Ok(json!({
        "note_id": h.note_id,
        "written_at": h.created_at,
        "written_by": h.trigger,
        "flags": h.flags,
        "text": h.text,
    }))
}
