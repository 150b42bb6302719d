//! `propose_alarm_change`: a new set point, deadband, on- or off-delay for one alarm
//! point, parked for a supervisor with the replay of the point's last 30 days as its
//! evidence. It changes nothing itself.

use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::{Value, json};

use rusqlite::OptionalExtension;

use super::hints::{existing_asset, existing_sensor};
use super::{ToolContext, ToolDef, ToolError, define, parse_args};
use crate::alarms::definitions::Point;
use crate::alarms::replay::{self, Settings};
use crate::approvals::alarm_changes::EVIDENCE_DAYS;
use crate::domain::Access;
use crate::episodes::pairs;

const NAME: &str = "propose_alarm_change";
const DESCRIPTION: &str = "Propose a change to one alarm point for a supervisor to approve or reject in the HMI, \
to rationalize a bad actor. This changes NOTHING: the change waits as pending_approval. Two kinds. (1) Settings: a \
chattering point wants a deadband or an on-delay, a point that stands for days may want a new set point. Give \
sensor_id (format PUMP-007.VIB-DE), level (ll, l, h or hh) and only the settings to change: set_point and deadband \
in the sensor's unit, delays in whole seconds. The tool replays the sensor's last 30 days of readings with the \
current and the proposed settings and attaches the result as evidence (activations before and after, episodes no \
longer annunciated, how much later the first activation of an episode comes); a change that would hide real \
excursions shows it there. (2) Designed suppression (ISA-18.2, state-based): suppress one alarm while another is \
active, when it is a consequence of it (a pump's trip brings its low discharge pressure). Give suppress (the \
consequence) and while_active (its cause), each {asset_id, code, sensor_id if the pair names one}, copied from a \
pair get_alarm_correlations returns (while_active is the pair's first, suppress its then); no sensor_id/level or \
settings. Only a learned pair can be proposed; the evidence is the pair's figures and how many of the last 90 days' \
occurrences it would have kept from the operator (and how many of them critical). Returns alarm_change_id, status \
and the evidence. Tell operators it awaits approval; never say it is applied.";

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Args {
    /// Settings: the sensor whose alarm point changes, e.g. PUMP-007.VIB-DE.
    sensor_id: Option<String>,
    /// Settings: which of its set points: ll (low-low), l (low), h (high) or hh (high-high).
    level: Option<Level>,
    /// Suppression: the alarm to suppress (the consequence), e.g. {"asset_id": "PUMP-007", "code": "FLOW-LO"}.
    suppress: Option<AlarmPoint>,
    /// Suppression: the alarm whose activity suppresses it (the cause), e.g. {"asset_id": "PUMP-007", "code": "TRIP"}.
    while_active: Option<AlarmPoint>,
    /// New set point, in the sensor's unit.
    set_point: Option<f64>,
    /// New deadband (hysteresis), in the sensor's unit, 0 or more.
    #[schemars(range(min = 0.0))]
    deadband: Option<f64>,
    /// New on-delay: seconds the value must stay beyond the set point before the alarm raises.
    #[schemars(range(min = 0, max = 86400))]
    on_delay_s: Option<i64>,
    /// New off-delay: seconds the value must stay back before the alarm clears.
    #[schemars(range(min = 0, max = 86400))]
    off_delay_s: Option<i64>,
    /// Why, with the figures that show it (activations, chattering), 20 to 2000 characters.
    #[schemars(length(min = 20, max = 2000))]
    reason: String,
}

/// One alarm point, as get_alarm_correlations names it.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct AlarmPoint {
    /// The asset's id, e.g. PUMP-007.
    asset_id: String,
    /// The alarm's code, e.g. FLOW-LO.
    code: String,
    /// The sensor's id when the pair names one, e.g. PUMP-007.VIB-DE.
    sensor_id: Option<String>,
}

#[derive(Debug, Clone, Copy, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
enum Level {
    Ll,
    L,
    H,
    Hh,
}

pub fn def() -> ToolDef {
    define::<Args>(NAME, DESCRIPTION, Access::Propose, "", |ctx, args| run(ctx, parse_args(args)?))
}

fn run(ctx: &ToolContext, args: Args) -> Result<Value, ToolError> {
    let reason = args.reason.trim();
    if !(20..=2000).contains(&reason.chars().count()) {
        return Err(ToolError::InvalidArguments(
            "reason: 20 to 2000 characters, saying why with the figures that show it".into(),
        ));
    }
    match (&args.suppress, &args.while_active) {
        (Some(follower), Some(leader)) => {
            let settings = args.sensor_id.is_some()
                || args.level.is_some()
                || args.set_point.is_some()
                || args.deadband.is_some()
                || args.on_delay_s.is_some()
                || args.off_delay_s.is_some();
            if settings {
                return Err(ToolError::InvalidArguments(
                    "a suppression takes suppress, while_active and reason only: propose a settings change \
                     (sensor_id, level, set_point...) in a call of its own"
                        .into(),
                ));
            }
            suppression(ctx, leader, follower, reason)
        }
        (None, None) => settings(ctx, &args, reason),
        _ => Err(ToolError::InvalidArguments(
            "a suppression needs both suppress (the consequence) and while_active (its cause), each \
             {asset_id, code, sensor_id if any}, as a pair of get_alarm_correlations names them"
                .into(),
        )),
    }
}

fn settings(ctx: &ToolContext, args: &Args, reason: &str) -> Result<Value, ToolError> {
    let (Some(sensor_id), Some(level)) = (&args.sensor_id, args.level) else {
        return Err(ToolError::InvalidArguments(
            "a settings change needs sensor_id (e.g. PUMP-007.VIB-DE) and level (ll, l, h or hh); a suppression \
             needs suppress and while_active instead"
                .into(),
        ));
    };
    let (sensor, _) = existing_sensor(ctx.db, "sensor_id", sensor_id)?;
    let level = match level {
        Level::Ll => "ll",
        Level::L => "l",
        Level::H => "h",
        Level::Hh => "hh",
    };
    let target = replay::target(ctx.db, &format!("{sensor}:{level}")).map_err(ToolError::Rejected)?;
    let c = target.current;
    let proposed = Settings {
        set_point: args.set_point.unwrap_or(c.set_point),
        deadband: args.deadband.unwrap_or(c.deadband),
        on_delay_s: args.on_delay_s.unwrap_or(c.on_delay_s),
        off_delay_s: args.off_delay_s.unwrap_or(c.off_delay_s),
    };
    proposed.validate().map_err(ToolError::InvalidArguments)?;
    if proposed == c {
        return Err(ToolError::Rejected(format!(
            "These are {sensor} {level}'s current settings (set point {}, deadband {}, on-delay {} s, off-delay {} s): give at least one new value.",
            c.set_point, c.deadband, c.on_delay_s, c.off_delay_s
        )));
    }
    let from = ctx.now.plus_secs(-EVIDENCE_DAYS * 86_400);
    let evidence = replay::replay_sensor(ctx.db, target.sensor_key, from, target.level, c, proposed)?;
    let proposal =
        ctx.approvals.propose_alarm_change(&target, proposed, reason, &evidence, ctx.caller.clone(), ctx.now)?;
    let message = match (proposal.created, proposal.applies.as_str()) {
        (false, _) => "A change of this point already awaits a decision; no new proposal was made. Refer to this \
            alarm_change_id."
            .to_string(),
        (true, "twin") => "Recorded as a proposal only; nothing has changed. If a supervisor approves it in the HMI, \
            twinops applies it to the sensor. Tell the operators it awaits approval."
            .to_string(),
        (true, _) => "Recorded as a proposal only; nothing has changed. This point's alarms come from the SCADA: if a \
            supervisor approves it, the SCADA engineer makes the change there. Tell the operators it awaits approval."
            .to_string(),
    };
    Ok(json!({
        "alarm_change_id": proposal.alarm_change_id,
        "status": proposal.status,
        "created": proposal.created,
        "applies": proposal.applies,
        "point": {"sensor_id": target.sensor_id, "asset_id": target.asset_id, "code": target.code, "level": level},
        "evidence": evidence,
        "message": message,
    }))
}

/// A designed suppression of `follower` while `leader` is active: only for a pair the
/// journal taught, with what it would have held back over the pairs' window.
fn suppression(
    ctx: &ToolContext,
    leader: &AlarmPoint,
    follower: &AlarmPoint,
    reason: &str,
) -> Result<Value, ToolError> {
    let (leader, follower) = (point(ctx, "while_active", leader)?, point(ctx, "suppress", follower)?);
    if leader == follower {
        return Err(ToolError::InvalidArguments(
            "suppress and while_active name the same alarm: a point cannot suppress itself".into(),
        ));
    }
    let learned = crate::episodes::upkeep::learned(ctx.db)?;
    let Some(pair) = learned.get(&leader, &follower).cloned() else {
        let reverse = learned.get(&follower, &leader).is_some();
        let hint = if reverse {
            " The journal has the pair the other way round: swap suppress and while_active."
        } else {
            " Call get_alarm_correlations for the asset to see the pairs learned; without one, say what you see for an engineer instead."
        };
        return Err(ToolError::Rejected(format!(
            "{} {} is not a learned consequence of {} {}: a designed suppression needs the journal's evidence that it follows in most of the cause's activations.{hint}",
            follower.asset_id, follower.code, leader.asset_id, leader.code
        )));
    };
    let from = ctx.now.plus_secs(-pairs::SUPPRESSION_EVIDENCE_DAYS * 86_400);
    let evidence = pairs::suppression_evidence(ctx.db, &leader, &follower, pair, from, ctx.now)?;
    if evidence.while_leader_active == 0 {
        return Err(ToolError::Rejected(format!(
            "In the last {} days no occurrence of {} {} came while {} {} was active (it follows the cause's activations, after it has returned to normal): a suppression while active would hold nothing back.",
            evidence.days, follower.asset_id, follower.code, leader.asset_id, leader.code
        )));
    }
    let proposal =
        ctx.approvals.propose_suppression(&leader, &follower, reason, &evidence, ctx.caller.clone(), ctx.now)?;
    let message = if proposal.created {
        "Recorded as a proposal only; nothing has changed. If a supervisor approves it, twinops stops annunciating and \
         triaging this alarm while its cause is active, and annunciates it if it is still active when the cause returns \
         to normal; the SCADA's own alarm display is unchanged. Tell the operators it awaits approval."
    } else {
        "A suppression of this pair is already pending or in force (see status); no new proposal was made. Refer to this \
         alarm_change_id."
    };
    let critical = if evidence.critical_while_leader_active > 0 {
        format!(
            " {} of the occurrences it would have held were critical: say so.",
            evidence.critical_while_leader_active
        )
    } else {
        String::new()
    };
    Ok(json!({
        "alarm_change_id": proposal.alarm_change_id,
        "kind": "suppression",
        "status": proposal.status,
        "created": proposal.created,
        "suppress": follower,
        "while_active": leader,
        "evidence": evidence,
        "message": format!("{message}{critical}"),
    }))
}

/// An alarm point as the journal stores it: ids as the twin spells them, the code as
/// its alarms carry it.
fn point(ctx: &ToolContext, field: &str, p: &AlarmPoint) -> Result<Point, ToolError> {
    let asset = existing_asset(ctx.db, &format!("{field}.asset_id"), &p.asset_id)?;
    let sensor = match &p.sensor_id {
        Some(s) => Some(existing_sensor(ctx.db, &format!("{field}.sensor_id"), s)?.0.to_string()),
        None => None,
    };
    let code: Option<String> = ctx
        .db
        .prepare_cached(
            "SELECT code FROM alarms INDEXED BY alarms_asset WHERE asset_id = ?1 AND code = ?2 COLLATE NOCASE
               AND coalesce(sensor_id, '') = coalesce(?3, '') ORDER BY raised_at DESC LIMIT 1",
        )?
        .query_row(rusqlite::params![asset.as_str(), p.code.trim(), sensor], |r| r.get(0))
        .optional()?;
    let Some(code) = code else {
        return Err(ToolError::NotFound(format!(
            "{field}: {asset} has no alarm {}{} in the journal. get_alarm_correlations gives the pairs with their exact asset_id, code and sensor_id.",
            p.code,
            sensor.as_deref().map(|s| format!(" on sensor {s}")).unwrap_or_default()
        )));
    };
    Ok(Point { asset_id: asset.to_string(), sensor_id: sensor, code })
}
