//! Closed vocabularies of the twin. Each mirrors a CHECK constraint in `schema.sql`;
//! `as_str` is the stored and serialized form.

use rusqlite::types::{FromSql, FromSqlError, FromSqlResult, ToSql, ToSqlOutput, ValueRef};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// Declares a snake_case text enum with `as_str`, `parse`, `ALL`, serde, schemars and
/// rusqlite conversions, so the five forms of one vocabulary cannot disagree.
macro_rules! text_enum {
    ($(#[$meta:meta])* $name:ident { $($(#[$vmeta:meta])* $variant:ident => $text:literal),+ $(,)? }) => {
        $(#[$meta])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize, JsonSchema)]
        pub enum $name {
            $($(#[$vmeta])* #[serde(rename = $text)] $variant),+
        }

        impl $name {
            pub const ALL: &'static [$name] = &[$($name::$variant),+];

            pub fn as_str(self) -> &'static str {
                match self { $($name::$variant => $text),+ }
            }

            /// Parses the stored form; the error lists the accepted values.
            pub fn parse(s: &str) -> Result<Self, String> {
                match s {
                    $($text => Ok($name::$variant),)+
                    other => Err(format!(
                        "'{other}' is not a valid {}; expected one of: {}",
                        stringify!($name),
                        [$($text),+].join(", ")
                    )),
                }
            }
        }

        // `pad`, so that a width (`{:<11}`) lines a table up.
        impl std::fmt::Display for $name {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.pad(self.as_str())
            }
        }

        // So that a test or a check can compare with the stored form: `reason == "malformed"`.
        impl PartialEq<&str> for $name {
            fn eq(&self, other: &&str) -> bool {
                self.as_str() == *other
            }
        }

        impl ToSql for $name {
            fn to_sql(&self) -> rusqlite::Result<ToSqlOutput<'_>> {
                Ok(ToSqlOutput::from(self.as_str()))
            }
        }

        impl FromSql for $name {
            fn column_result(value: ValueRef<'_>) -> FromSqlResult<Self> {
                let text = value.as_str()?;
                $name::parse(text).map_err(|e| FromSqlError::Other(e.into()))
            }
        }
    };
}

text_enum! {
    /// Alarm priority, lowest first (so `Ord` sorts by urgency).
    Severity { Low => "low", Medium => "medium", High => "high", Critical => "critical" }
}

impl Severity {
    /// Its place when the most urgent come first: critical 0, high 1, medium 2, low 3.
    /// The triage queue's priority.
    pub fn rank(self) -> i64 {
        (Severity::ALL.len() - 1 - Severity::ALL.iter().position(|s| *s == self).expect("in ALL")) as i64
    }

    /// SQL giving the severity in `column` its [`Severity::rank`], to sort by.
    pub fn sql_rank(column: &str) -> String {
        let whens: Vec<String> =
            Severity::ALL.iter().map(|s| format!("WHEN '{}' THEN {}", s.as_str(), s.rank())).collect();
        format!("CASE {column} {} END", whens.join(" "))
    }

    /// Weight used when ranking assets by need of attention.
    pub fn weight(self) -> u32 {
        match self {
            Severity::Low => 1,
            Severity::Medium => 3,
            Severity::High => 9,
            Severity::Critical => 27,
        }
    }
}

text_enum! {
    /// ISA-18.2 alarm states, as stored per occurrence.
    AlarmState {
        Unacknowledged => "unacknowledged",
        Acknowledged => "acknowledged",
        /// Returned to normal while still unacknowledged.
        RtnUnacknowledged => "rtn_unacknowledged",
        Cleared => "cleared",
        Shelved => "shelved",
        OutOfService => "out_of_service",
        /// Suppressed by design: raised while an approved suppression's leader was
        /// active; recorded, not annunciated, not triaged.
        Suppressed => "suppressed",
    }
}

text_enum! {
    AssetKind {
        CentrifugalPump => "centrifugal_pump",
        Motor => "motor",
        Valve => "valve",
        Reservoir => "reservoir",
    }
}

text_enum! {
    /// How one asset acts on another in the process (plant files' connections), from
    /// cause to effect: an upset at the first shows at the second.
    ConnectionKind {
        /// Process flow: the first's outlet is the second's inlet.
        Feeds => "feeds",
        /// Electrical supply (a switchboard or MCC to a motor or an RTU).
        Powers => "powers",
        /// Instrument air (a compressor to air-operated valves).
        SuppliesAir => "supplies_air",
        /// Control (a PLC or RTU, or a transmitter in a loop, to what it drives).
        Controls => "controls",
    }
}

text_enum! {
    AssetStatus {
        Running => "running",
        Standby => "standby",
        Stopped => "stopped",
        Maintenance => "maintenance",
        Fault => "fault",
        OutOfService => "out_of_service",
    }
}

text_enum! {
    /// A: loss stops supply to customers; B: loss reduces redundancy; C: minor.
    Criticality { A => "A", B => "B", C => "C" }
}

text_enum! {
    SensorKind {
        Vibration => "vibration",
        BearingTemperature => "bearing_temperature",
        Flow => "flow",
        DischargePressure => "discharge_pressure",
        SuctionPressure => "suction_pressure",
        MotorCurrent => "motor_current",
        WindingTemperature => "winding_temperature",
        ValvePosition => "valve_position",
        Level => "level",
    }
}

text_enum! {
    WorkOrderStatus {
        PendingApproval => "pending_approval",
        Approved => "approved",
        Rejected => "rejected",
        Expired => "expired",
        Dispatched => "dispatched",
    }
}

text_enum! {
    /// Where a proposed alarm change stands: decided by a supervisor, or expired.
    AlarmChangeStatus {
        PendingApproval => "pending_approval",
        Approved => "approved",
        Rejected => "rejected",
        Expired => "expired",
        /// An approved suppression a supervisor has since removed.
        Lifted => "lifted",
    }
}

text_enum! {
    /// How soon the field crew should act on a work order.
    WorkPriority { Emergency => "emergency", Urgent => "urgent", Normal => "normal", Low => "low" }
}

text_enum! {
    /// What a work order asks the field crew to do. Part of the idempotency key, so a
    /// closed list: two phrasings of one intent must not make two orders.
    WorkAction {
        Inspect => "inspect",
        VibrationAnalysis => "vibration_analysis",
        Lubricate => "lubricate",
        ReplaceBearing => "replace_bearing",
        Realign => "realign",
        ClearSuction => "clear_suction",
        RepairSeal => "repair_seal",
        ElectricalInspection => "electrical_inspection",
        CalibrateInstrument => "calibrate_instrument",
        ServiceValve => "service_valve",
    }
}

text_enum! {
    /// What a tool may do: read the twin, or park a proposal for human approval.
    Access { Read => "read", Propose => "propose" }
}

text_enum! {
    /// What a person may do in the HMI, least first (so `Ord` compares privilege).
    Role {
        /// Read everything.
        Viewer => "viewer",
        /// Also chat with the agent, acknowledge and shelve alarms.
        Operator => "operator",
        /// Also approve and reject work orders.
        Supervisor => "supervisor",
        /// Also manage users.
        Admin => "admin",
    }
}

text_enum! {
    /// Where a user, and a session, comes from: twinops's own accounts, or the site's
    /// directory (whose groups give the role and which owns the password).
    UserSource { Local => "local", Directory => "directory" }
}

text_enum! {
    /// How a triage job is run: with the configured models, or by the rules model alone
    /// (low severity, a chattering point, a flood, the overflow job, or over budget).
    TriageMode { Agent => "agent", Rules => "rules" }
}

text_enum! {
    /// Why a message, or one event of it, was refused and kept as a dead letter
    /// (`twinops dead-letters list`). Each says what fixes it.
    DeadLetterReason {
        /// Not JSON, not the contract's shape, or an undecodable Sparkplug payload: fix the sender.
        Malformed => "malformed",
        /// Larger than ingest reads: split it at the sender.
        Oversized => "oversized",
        /// Well formed, but a value breaks the contract (a time out of range, a sensor
        /// of another asset, a birth that does not fit the twin): fix the sender or the twin.
        Invalid => "invalid",
        /// No such asset in the twin: import it, then replay.
        UnknownAsset => "unknown_asset",
        /// No such sensor in the twin: import it, then replay.
        UnknownSensor => "unknown_sensor",
        /// A clear with no active occurrence to clear (its raise was lost or refused).
        UnmatchedClear => "unmatched_clear",
        /// Another value at a stored millisecond, or an event id reused with other content.
        Conflict => "conflict",
        /// For an asset or sensor a full import retired: import it again to take its events.
        Retired => "retired",
        /// A kind of message twinops does not take (a Sparkplug command, a metric type).
        Unsupported => "unsupported",
        /// Could not be stored (a fault, not bad input): fix the fault, then replay.
        Failed => "failed",
        /// Sparkplug data from a node or device not born since the host came up: it
        /// is asked to rebirth.
        NotBorn => "not_born",
        /// A Sparkplug metric alias its birth did not declare.
        UnknownAlias => "unknown_alias",
    }
}

#[cfg(test)]
mod tests {
    use super::Severity;

    #[test]
    fn severity_ranks_most_urgent_first_in_rust_and_sql() {
        let ranks: Vec<i64> =
            [Severity::Critical, Severity::High, Severity::Medium, Severity::Low].map(Severity::rank).to_vec();
        assert_eq!(ranks, [0, 1, 2, 3]);
        let db = rusqlite::Connection::open_in_memory().unwrap();
        for s in Severity::ALL {
            let sql = format!("SELECT {} FROM (SELECT ?1 AS severity)", Severity::sql_rank("severity"));
            let rank: i64 = db.query_row(&sql, [s.as_str()], |r| r.get(0)).unwrap();
            assert_eq!(rank, s.rank(), "{s}");
        }
    }
}
