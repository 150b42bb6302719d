//! `propose_work_order`: the one tool with an effect. It parks a proposal for a
//! supervisor; it cannot approve, dispatch or change anything else.

use rusqlite::{OptionalExtension, params};
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::{Value, json};

use super::hints::{existing_asset, id_error};
use super::{ToolContext, ToolDef, ToolError, define, parse_args};
use crate::domain::{Access, Citation, WorkAction, WorkOrderDraft, WorkOrderStatus, WorkPriority};

const NAME: &str = "propose_work_order";
const DESCRIPTION: &str = "Propose a maintenance work order for a supervisor to approve or reject in the HMI. This \
does NOT approve, schedule or dispatch anything: the order waits as pending_approval, and nothing happens in the \
field until a supervisor approves it. Proposing the same action for the same asset and alarm again returns the \
existing order instead of a new one. Use it only when the evidence (readings, alarms, procedures) supports a field \
action; cite that evidence. Returns work_order_id and status. Tell operators the order awaits approval; never say it \
is approved.";

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Args {
    /// Asset the work is on, e.g. PUMP-007.
    asset_id: String,
    /// The alarm occurrence this answers (alarm_id from list_alarms or get_asset_details), if any.
    alarm_id: Option<i64>,
    /// What the crew should do.
    action: WorkAction,
    /// emergency: now, any hour; urgent: this shift; normal: within a week; low: next planned visit.
    priority: WorkPriority,
    /// One line for the work queue, 5 to 120 characters.
    #[schemars(length(min = 5, max = 120))]
    title: String,
    /// What was observed and why this action, with figures from the tools, 20 to 2000 characters.
    #[schemars(length(min = 20, max = 2000))]
    justification: String,
    /// Citation keys of the procedures or documents supporting it, e.g. ["arp-vibration.md#1"].
    #[serde(default)]
    #[schemars(length(max = 10))]
    evidence: Vec<String>,
}

pub fn def() -> ToolDef {
    define::<Args>(NAME, DESCRIPTION, Access::Propose, "", |ctx, args| run(ctx, parse_args(args)?))
}

fn run(ctx: &ToolContext, args: Args) -> Result<Value, ToolError> {
    let asset = existing_asset(ctx.db, "asset_id", &args.asset_id)?;
    if let Some(alarm) = args.alarm_id {
        let on: Option<String> = ctx
            .db
            .prepare_cached("SELECT asset_id FROM alarms WHERE id = ?1")?
            .query_row([alarm], |r| r.get(0))
            .optional()?;
        match on {
            None => {
                return Err(ToolError::NotFound(format!(
                    "No alarm with alarm_id {alarm}. Call list_alarms with asset_id \"{asset}\" to find it, or omit alarm_id."
                )));
            }
            Some(on) if on != asset.as_str() => {
                return Err(ToolError::Rejected(format!(
                    "Alarm {alarm} is on {on}, not {asset}. Propose for {on}, or omit alarm_id."
                )));
            }
            Some(_) => {}
        }
    }
    let mut evidence = Vec::with_capacity(args.evidence.len());
    let mut unknown = Vec::new();
    for raw in &args.evidence {
        let citation = Citation::parse(raw).map_err(|e| id_error("evidence", e))?;
        let exists: Option<i64> = ctx
            .db
            .prepare_cached(
                "SELECT 1 FROM chunks c JOIN documents d ON d.id = c.document_id WHERE d.path = ?1 AND c.seq = ?2",
            )?
            .query_row(params![citation.path(), citation.seq()], |r| r.get(0))
            .optional()?;
        if exists.is_none() {
            unknown.push(citation.as_str().to_string());
        }
        evidence.push(citation);
    }
    if !unknown.is_empty() {
        return Err(ToolError::NotFound(format!(
            "These evidence citations do not exist: {}. Use citation keys returned by search_docs, or drop them.",
            unknown.join(", ")
        )));
    }
    let draft = WorkOrderDraft::new(
        asset,
        args.alarm_id,
        args.action,
        args.priority,
        &args.title,
        &args.justification,
        evidence,
    )
    .map_err(ToolError::InvalidArguments)?;
    let proposal = ctx.approvals.propose(draft, ctx.caller.clone(), ctx.now)?;
    let message = match (proposal.created, proposal.status) {
        (true, _) => {
            "Recorded as a proposal only; nothing has been dispatched. A supervisor must approve it in the HMI. \
                      Tell the operators it awaits approval."
                .to_string()
        }
        (false, WorkOrderStatus::PendingApproval) => "A proposal with the same intent (same alarm, asset and action) \
            already awaits approval; no new order was made. Refer to this work_order_id."
            .to_string(),
        (false, status) => format!(
            "A proposal with the same intent already exists and was {status}{}{}. Do not propose it again; report that decision instead.",
            proposal.decided_by.as_deref().map(|b| format!(" by {b}")).unwrap_or_default(),
            proposal.decision_reason.as_deref().map(|r| format!(" (reason: {r})")).unwrap_or_default(),
        ),
    };
    Ok(json!({
        "work_order_id": proposal.work_order_id,
        "status": proposal.status,
        "created": proposal.created,
        "message": message,
    }))
}
