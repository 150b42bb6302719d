//! `twinops alarms`: list alarms and act on them as an operator does in the HMI.

use super::*;

#[derive(Subcommand)]
pub(super) enum AlarmsCommand {
    /// List alarm occurrences, newest first.
    #[command(
        after_help = "Examples:\n  twinops alarms list --active\n  twinops alarms list --asset PUMP-007 --limit 50"
    )]
    List {
        /// Only alarms whose condition is still present.
        #[arg(long)]
        active: bool,
        #[arg(long)]
        asset: Option<String>,
        #[arg(long, default_value_t = 20)]
        limit: u32,
    },
    /// Acknowledge an alarm.
    #[command(
        after_help = "Examples:\n  twinops alarms ack 46 --user operator.kaur\n  twinops alarms ack 52 --returned   # and every other returned-to-normal alarm of its point"
    )]
    Ack {
        alarm_id: i64,
        /// Acknowledge every returned-to-normal occurrence of the alarm's point (asset,
        /// sensor, code) instead: the rows a point leaves each time it goes in and out.
        #[arg(long)]
        returned: bool,
        #[arg(long, env = "USER", default_value = "cli")]
        user: String,
    },
    /// Shelve an active alarm for a while (at most 24 hours), with a reason.
    #[command(after_help = "Example:\n  twinops alarms shelve 46 --minutes 120 --reason 'permit 4471: bearing change'")]
    Shelve {
        alarm_id: i64,
        #[arg(long)]
        minutes: i64,
        #[arg(long)]
        reason: String,
        #[arg(long, env = "USER", default_value = "cli")]
        user: String,
    },
    /// Return a shelved alarm before its shelf time is over.
    #[command(after_help = "Example:\n  twinops alarms unshelve 46")]
    Unshelve {
        alarm_id: i64,
        #[arg(long, env = "USER", default_value = "cli")]
        user: String,
    },
    /// Take an alarm's point out of service (maintenance, a failed instrument), with a
    /// reason: until it is returned, its occurrences are recorded but not annunciated
    /// or triaged.
    #[command(
        name = "out-of-service",
        after_help = "Example:\n  twinops alarms out-of-service 46 --reason 'permit 4471: transmitter replaced'"
    )]
    OutOfService {
        alarm_id: i64,
        #[arg(long)]
        reason: String,
        #[arg(long, env = "USER", default_value = "cli")]
        user: String,
    },
    /// Return an alarm's point to service; if its condition is still present, the alarm
    /// annunciates again and is triaged.
    #[command(name = "in-service", after_help = "Example:\n  twinops alarms in-service 46")]
    InService {
        alarm_id: i64,
        #[arg(long, env = "USER", default_value = "cli")]
        user: String,
    },
}

pub(super) fn run(global: &Global, cmd: AlarmsCommand) -> anyhow::Result<ExitCode> {
    match cmd {
        AlarmsCommand::List { active, asset, limit } => {
            let store = global.open()?;
            let asset = asset.map(|a| AssetId::parse(&a)).transpose()?;
            let db = store.read()?;
            let mut stmt = db.prepare(
                "SELECT id, asset_id, coalesce(sensor_id, '-'), code, severity, state, raised_at, cleared_at, reraise_count
                 FROM alarms WHERE (?1 = 0 OR cleared_at IS NULL) AND (?2 IS NULL OR asset_id = ?2)
                 ORDER BY raised_at DESC, id DESC LIMIT ?3",
            )?;
            let mut rows = stmt.query(rusqlite::params![active, asset, limit])?;
            println!(
                "{:>6}  {:<9} {:<22} {:<15} {:<8} {:<19} {:<20} {:<20} {:>4}",
                "id", "asset", "sensor", "code", "severity", "state", "raised", "cleared", "reps"
            );
            while let Some(r) = rows.next()? {
                let cleared: Option<i64> = r.get(7)?;
                println!(
                    "{:>6}  {:<9} {:<22} {:<15} {:<8} {:<19} {:<20} {:<20} {:>4}",
                    r.get::<_, i64>(0)?,
                    r.get::<_, String>(1)?,
                    r.get::<_, String>(2)?,
                    r.get::<_, String>(3)?,
                    r.get::<_, String>(4)?,
                    r.get::<_, String>(5)?,
                    Timestamp::from_unix(r.get(6)?).to_rfc3339(),
                    cleared.map_or("-".to_string(), |c| Timestamp::from_unix(c).to_rfc3339()),
                    r.get::<_, i64>(8)?
                );
            }
        }
        AlarmsCommand::Ack { alarm_id, returned: false, user } => {
            let store = global.open()?;
            let state = alarms::acknowledge(store.writer(), alarm_id, &user, Timestamp::now())?;
            println!("alarm {alarm_id} is now {state}");
        }
        AlarmsCommand::Ack { alarm_id, returned: true, user } => {
            let store = global.open()?;
            let ids = alarms::acknowledge_returned(store.writer(), alarm_id, &user, Timestamp::now())?;
            let list: Vec<String> = ids.iter().map(i64::to_string).collect();
            println!("{} returned-to-normal alarm(s) acknowledged, now cleared: {}", ids.len(), list.join(", "));
        }
        AlarmsCommand::Shelve { alarm_id, minutes, reason, user } => {
            let store = global.open()?;
            alarms::shelve(store.writer(), alarm_id, &user, minutes * 60, &reason, Timestamp::now())?;
            println!("alarm {alarm_id} is shelved for {minutes} minutes");
        }
        AlarmsCommand::Unshelve { alarm_id, user } => {
            let store = global.open()?;
            let state = alarms::unshelve(store.writer(), alarm_id, &user, Timestamp::now())?;
            println!("alarm {alarm_id} is now {state}");
        }
        AlarmsCommand::OutOfService { alarm_id, reason, user } => {
            let store = global.open()?;
            alarms::remove_from_service(store.writer(), alarm_id, &user, &reason, Timestamp::now())?;
            println!("alarm {alarm_id} is out of service: its point's alarms are recorded, not annunciated or triaged");
        }
        AlarmsCommand::InService { alarm_id, user } => {
            let store = global.open()?;
            let policy = global.config()?.ingest_policy().queue;
            let state = alarms::return_to_service(store.writer(), alarm_id, &user, Timestamp::now(), policy)?;
            println!("alarm {alarm_id} is back in service and now {state}");
        }
    }
    Ok(ExitCode::SUCCESS)
}
