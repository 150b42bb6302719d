//! `twinops alarms`: list alarms and act on them as an operator does in the HMI.

use super::*;
use crate::alarms::kpi;
use crate::alarms::list::{AlarmFilter, Scope};
use crate::decisions::{self, AlarmAction};

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
    /// The alarm system's performance over a window, as ISA-18.2 (Table 7) and EEMUA 191
    /// measure it: rates, peaks, floods, bad actors, chattering, fleeting and stale
    /// alarms, priority distribution, shelved and out-of-service points.
    #[command(
        after_help = "Examples:\n  twinops alarms kpi                       # the last 7 days\n  twinops alarms kpi --from 2026-11-01 --to 2026-12-01 --format md > november.md\n  twinops alarms kpi --format json --chatter-count 5 --chatter-window 120"
    )]
    Kpi {
        /// Start of the window, RFC 3339 or a date (default: 7 days before --to).
        #[arg(long)]
        from: Option<String>,
        /// End of the window, exclusive (default: now).
        #[arg(long)]
        to: Option<String>,
        #[arg(long, value_enum, default_value = "text")]
        format: crate::alarms::kpi_report::Format,
        /// Chattering: this many activations of one point ...
        #[arg(long, default_value_t = 3)]
        chatter_count: usize,
        /// ... within this many seconds.
        #[arg(long, default_value_t = 60)]
        chatter_window: i64,
    },
    /// Export the alarm journal as CSV, one row per event (raised, reraised, cleared,
    /// acked, shelved, unshelved, out_of_service, in_service), to the millisecond.
    #[command(
        after_help = "Examples:\n  twinops alarms export --from 2026-11-01 --to 2026-12-01 november.csv\n  twinops alarms export - | head"
    )]
    Export {
        #[arg(long)]
        from: Option<String>,
        #[arg(long)]
        to: Option<String>,
        /// The CSV file to write, or - for standard output.
        file: PathBuf,
    },
    /// What-if: run a sensor's stored readings through one of its alarm points with the
    /// current settings and with proposed ones, and compare the activations each would
    /// have raised, episode by episode.
    #[command(
        // `--deadband -0.5` is a value for the product's own check, not an option `-0`.
        allow_negative_numbers = true,
        after_help = "The point is SENSOR:LEVEL (levels ll, l, h, hh) or SENSOR:CODE. Settings not given stay as they are.\n\nExamples:\n  twinops alarms replay PUMP-007.VIB-DE:h --deadband 0.5 --on-delay 10\n  twinops alarms replay PUMP-004.PRESS-SUC:PRESS-SUC-LO --set-point 0.45 --days 7 --format json"
    )]
    Replay {
        point: String,
        /// The proposed set point, in the sensor's unit.
        #[arg(long)]
        set_point: Option<f64>,
        /// The proposed deadband, in the sensor's unit.
        #[arg(long)]
        deadband: Option<f64>,
        /// The proposed on-delay, seconds.
        #[arg(long)]
        on_delay: Option<i64>,
        /// The proposed off-delay, seconds.
        #[arg(long)]
        off_delay: Option<i64>,
        /// How many days of readings, back from now.
        #[arg(long, default_value_t = 30)]
        days: i64,
        #[arg(long, value_enum, default_value = "text")]
        format: crate::alarms::kpi_report::Format,
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
        AlarmsCommand::Kpi { from, to, format, chatter_count, chatter_window } => {
            kpi_figures(global, (from, to), format, chatter_count, chatter_window)?
        }
        AlarmsCommand::Replay { point, set_point, deadband, on_delay, off_delay, days, format } => {
            replay(global, &point, (set_point, deadband, on_delay, off_delay), days, format)?
        }
        AlarmsCommand::Export { from, to, file } => export(global, (from, to), &file)?,
        AlarmsCommand::List { active, asset, limit } => list(global, active, asset, limit)?,
        AlarmsCommand::Ack { alarm_id, returned: false, user } => {
            act(global, alarm_id, AlarmAction::Acknowledge, &user)?;
        }
        AlarmsCommand::Ack { alarm_id, returned: true, user } => ack_returned(global, alarm_id, &user)?,
        AlarmsCommand::Shelve { alarm_id, minutes, reason, user } => {
            act(global, alarm_id, AlarmAction::Shelve { secs: minutes * 60, reason }, &user)?;
            println!("for {minutes} minutes");
        }
        AlarmsCommand::Unshelve { alarm_id, user } => {
            act(global, alarm_id, AlarmAction::Unshelve, &user)?;
        }
        AlarmsCommand::OutOfService { alarm_id, reason, user } => {
            act(global, alarm_id, AlarmAction::OutOfService { reason }, &user)?;
            println!("its point's alarms are recorded, not annunciated or triaged, until it is back in service");
        }
        AlarmsCommand::InService { alarm_id, user } => {
            act(global, alarm_id, AlarmAction::InService, &user)?;
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// An operator's action on occurrence `id`: of a redundant pair through its decision
/// log (both nodes make it, naming the occurrence by its event id), alone here.
fn act(global: &Global, id: i64, action: AlarmAction, user: &str) -> anyhow::Result<()> {
    let store = global.open()?;
    let change = || Ok((decisions::ALARM, decisions::alarm_args(&shared_name(&store, id)?, &action)));
    let state = match global.through_pair(&store, change, user)? {
        Some(done) => done["state"].as_str().unwrap_or("waiting").to_string(),
        None => {
            let queue = global.config()?.ingest_policy().queue;
            action.apply(store.writer(), queue, id, user, Timestamp::now())?.to_string()
        }
    };
    println!("alarm {id} is now {state}");
    Ok(())
}

/// Acknowledges occurrence `id`'s point's returned-to-normal occurrences at once.
fn ack_returned(global: &Global, id: i64, user: &str) -> anyhow::Result<()> {
    let store = global.open()?;
    let change = || {
        let returned = alarms::returned_of(&*store.read()?, id)?;
        let events: Vec<String> = returned.into_iter().filter_map(|(_, e)| e).collect();
        Ok((decisions::RETURNED, decisions::returned_args(&shared_name(&store, id)?, &events)))
    };
    let ids: Vec<i64> = match global.through_pair(&store, change, user)? {
        Some(done) => serde_json::from_value(done["acknowledged"].clone()).unwrap_or_default(),
        None => alarms::acknowledge_returned(store.writer(), id, user, Timestamp::now())?,
    };
    let list: Vec<String> = ids.iter().map(i64::to_string).collect();
    println!("{} returned-to-normal alarm(s) acknowledged, now cleared: {}", ids.len(), list.join(", "));
    Ok(())
}

/// The event id that names occurrence `id` on both nodes of a pair.
fn shared_name(store: &Store, id: i64) -> anyhow::Result<String> {
    decisions::event_id_of(store, id)?.ok_or_else(|| anyhow::anyhow!("no alarm {id}; `twinops alarms list` shows them"))
}

/// `alarms kpi`: the figures over the window, the cache brought up to date first.
fn kpi_figures(
    global: &Global,
    (from, to): (Option<String>, Option<String>),
    format: crate::alarms::kpi_report::Format,
    chatter_count: usize,
    chatter_window: i64,
) -> anyhow::Result<()> {
    let store = global.open()?;
    let (from, to) = kpi::window(from.as_deref(), to.as_deref(), Timestamp::now()).map_err(anyhow::Error::msg)?;
    let settings = kpi::KpiSettings {
        chatter_activations: chatter_count,
        chatter_window_secs: chatter_window,
        ..Default::default()
    };
    settings.validate().map_err(anyhow::Error::msg)?;
    // The hours closed since housekeeping last ran (all of them, the first time); other
    // definitions than the default pass over the journal and have no use for them.
    if crate::alarms::kpi_cache::cacheable(&settings) {
        crate::alarms::kpi_cache::refresh(store.writer(), Timestamp::now())?;
    }
    let figures = crate::episodes::upkeep::alarm_performance(&*store.read()?, from, to, settings)?;
    println!("{}", crate::alarms::kpi_report::render(&figures, format));
    Ok(())
}

/// `alarms export`: the journal as CSV, to a file or `-` for standard output.
fn export(global: &Global, (from, to): (Option<String>, Option<String>), file: &std::path::Path) -> anyhow::Result<()> {
    let store = global.open()?;
    let (from, to) = kpi::window(from.as_deref(), to.as_deref(), Timestamp::now()).map_err(anyhow::Error::msg)?;
    let db = store.read()?;
    if file.as_os_str() == "-" {
        crate::alarms::journal::export(&db, from, to, std::io::stdout().lock())?;
    } else {
        let out = std::fs::File::create(file).with_context(|| format!("creating {}", file.display()))?;
        let n = crate::alarms::journal::export(&db, from, to, std::io::BufWriter::new(out))?;
        eprintln!("wrote {n} journal events from {} to {} to {}", from.to_rfc3339(), to.to_rfc3339(), file.display());
    }
    Ok(())
}

/// `alarms list`: occurrences, newest first.
fn list(global: &Global, active: bool, asset: Option<String>, limit: u32) -> anyhow::Result<()> {
    let store = global.open()?;
    let asset = asset.map(|a| AssetId::parse(&a)).transpose()?;
    let scope = if active { Scope::Active } else { Scope::Any };
    let filter = AlarmFilter { asset, scope, ..Default::default() };
    let rows = alarms::list::list(&*store.read()?, &filter, limit.into(), 0)?;
    println!(
        "{:>6}  {:<9} {:<22} {:<15} {:<8} {:<19} {:<20} {:<20} {:>4}",
        "id", "asset", "sensor", "code", "severity", "state", "raised", "cleared", "reps"
    );
    for a in rows {
        println!(
            "{:>6}  {:<9} {:<22} {:<15} {:<8} {:<19} {:<20} {:<20} {:>4}",
            a.id,
            a.asset_id,
            a.sensor_id.as_deref().unwrap_or("-"),
            a.code,
            a.severity,
            a.state,
            a.raised_at.to_rfc3339(),
            a.cleared_at.map_or("-".to_string(), |c| c.to_rfc3339()),
            a.reraise_count
        );
    }
    Ok(())
}

/// `alarms replay`: the point's readings with its settings and the proposed ones.
fn replay(
    global: &Global,
    point: &str,
    (set_point, deadband, on_delay, off_delay): (Option<f64>, Option<f64>, Option<i64>, Option<i64>),
    days: i64,
    format: crate::alarms::kpi_report::Format,
) -> anyhow::Result<()> {
    use crate::alarms::replay;
    anyhow::ensure!((1..=3660).contains(&days), "--days is 1 to 3660");
    let store = global.open()?;
    let db = store.read()?;
    let target = replay::target(&db, point).map_err(anyhow::Error::msg)?;
    let c = target.current;
    let proposed = replay::Settings {
        set_point: set_point.unwrap_or(c.set_point),
        deadband: deadband.unwrap_or(c.deadband),
        on_delay_s: on_delay.unwrap_or(c.on_delay_s),
        off_delay_s: off_delay.unwrap_or(c.off_delay_s),
    };
    proposed.validate().map_err(anyhow::Error::msg)?;
    let from = Timestamp::from_unix(Timestamp::now().unix() - days * 86_400);
    let comparison = replay::replay_sensor(&db, target.sensor_key, from, target.level, c, proposed)?;
    match format {
        crate::alarms::kpi_report::Format::Json => println!("{}", serde_json::to_string_pretty(&comparison)?),
        _ => println!("{}", comparison.render(&target)),
    }
    Ok(())
}
