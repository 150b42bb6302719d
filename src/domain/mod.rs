//! Validated types. Raw strings stop at the edge: everything past parsing holds one of
//! these, built by `parse`, never by hand.

mod alarm_event;
mod enums;
mod ids;
mod net;
mod node_ref;
mod time;
mod value;
mod work_order;

pub use alarm_event::{AlarmEvent, Transition};
pub use enums::{
    Access, AlarmChangeStatus, AlarmState, AssetKind, AssetStatus, ConnectionKind, Criticality, DeadLetterReason, Role,
    SensorKind, Severity, TriageMode, UserSource, WorkAction, WorkOrderStatus, WorkPriority,
};
pub use ids::{AssetId, Citation, ID_FORMAT, IdError, MAX_ID_CHARS, SensorId, as_id, kind_name};
pub use net::IpNet;
pub use node_ref::{NODE_FORMAT, NodeRef};
pub use time::{Timestamp, approx_duration, parse_time, parse_time_ms};
pub use value::shown;
pub use work_order::WorkOrderDraft;
