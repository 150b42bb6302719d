//! `propose_alarm_change`: a new set point, deadband, on- or off-delay for one alarm
//! point, parked for a supervisor with the replay of the point's last 30 days as its
//! evidence. It changes nothing itself.

use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::{Value, json};

use super::hints::existing_sensor;
use super::{ToolContext, ToolDef, ToolError, define, parse_args};
use crate::alarms::replay::{self, Settings};
use crate::approvals::alarm_changes::EVIDENCE_DAYS;
use crate::domain::Access;

const NAME: &str = "propose_alarm_change";
const DESCRIPTION: &str = "Propose a change to one alarm point's settings (set point, deadband, on-delay, \
off-delay) for a supervisor to approve or reject in the HMI, to rationalize a bad actor: a chattering point wants a \
deadband or an on-delay, a point that stands for days may want a new set point. This changes NOTHING: the change \
waits as pending_approval. The tool replays the sensor's last 30 days of readings with the current and the proposed \
settings and attaches the result as evidence (activations before and after, episodes no longer annunciated, how \
much later the first activation of an episode comes); a change that would hide real excursions shows it there. \
Give only the settings to change. sensor_id format: PUMP-007.VIB-DE; level: ll, l, h or hh; set_point and deadband \
in the sensor's unit; delays in whole seconds. Returns alarm_change_id, status and the replay. Tell operators it \
awaits approval; never say it is applied.";

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Args {
    /// Sensor whose alarm point changes, e.g. PUMP-007.VIB-DE.
    sensor_id: String,
    /// Which of its set points: ll (low-low), l (low), h (high) or hh (high-high).
    level: Level,
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
    let (sensor, _) = existing_sensor(ctx.db, "sensor_id", &args.sensor_id)?;
    let level = match args.level {
        Level::Ll => "ll",
        Level::L => "l",
        Level::H => "h",
        Level::Hh => "hh",
    };
    let target = replay::target(ctx.db, &format!("{sensor}:{level}")).map_err(ToolError::Rejected)?;
    let reason = args.reason.trim();
    if !(20..=2000).contains(&reason.chars().count()) {
        return Err(ToolError::InvalidArguments(
            "reason: 20 to 2000 characters, saying why with the figures that show it".into(),
        ));
    }
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
    let message = match (proposal.created, proposal.applies) {
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
