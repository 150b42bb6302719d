//! `twinops episodes`: the alarm episodes the twin has kept, and the consequential
//! pairs learned from the journal.

use super::*;
use crate::episodes::pairs::PairRules;
use crate::episodes::upkeep;

#[derive(Subcommand)]
pub(super) enum EpisodesCommand {
    /// The latest episodes, newest first: when, how many points, the initiator.
    #[command(after_help = "Example:\n  twinops episodes list --limit 20")]
    List {
        #[arg(long, default_value_t = 20, value_parser = clap::value_parser!(i64).range(1..=1000))]
        limit: i64,
    },
    /// One episode as JSON: its timeline (each point at its first activation), its
    /// note, and the initiator's candidates each with the evidence that ranks it.
    #[command(after_help = "Example:\n  twinops episodes show 12")]
    Show { episode_id: i64 },
    /// The consequential pairs (B follows A within 5 minutes in most of A's activations,
    /// more than chance): candidates for designed suppression. `--refresh` mines them
    /// again from the last 90 days of the journal, as housekeeping does.
    #[command(after_help = "Examples:\n  twinops episodes pairs\n  twinops episodes pairs --refresh")]
    Pairs {
        #[arg(long)]
        refresh: bool,
        #[arg(long, default_value_t = 30)]
        limit: usize,
    },
}

pub(super) fn run(global: &Global, cmd: EpisodesCommand) -> anyhow::Result<ExitCode> {
    let store = global.open()?;
    match cmd {
        EpisodesCommand::List { limit } => {
            let episodes = upkeep::list(&*store.read()?, limit)?;
            if episodes.is_empty() {
                println!(
                    "no episodes yet: an episode is 3 or more points whose alarms come together on connected equipment"
                );
            }
            for e in episodes {
                let initiator = &e["initiator"];
                let note = e["note_id"].as_i64().map_or("no note yet".to_string(), |n| format!("note {n}"));
                println!(
                    "{:>5}  {}  {:>3} points {:>4} activations{}  initiator: {} {} (alarm {})  {note}",
                    e["id"],
                    e["opened"].as_str().unwrap_or(""),
                    e["points"],
                    e["activations"],
                    if e["closed"] == true { "" } else { "  (open)" },
                    initiator["asset_id"].as_str().unwrap_or("-"),
                    initiator["code"].as_str().unwrap_or("-"),
                    initiator["alarm_id"]
                );
            }
        }
        EpisodesCommand::Show { episode_id } => match upkeep::one(&*store.read()?, episode_id)? {
            Some(e) => println!("{}", serde_json::to_string_pretty(&e)?),
            None => anyhow::bail!("no episode {episode_id}; `twinops episodes list` shows them"),
        },
        EpisodesCommand::Pairs { refresh, limit } => {
            if refresh {
                let now = Timestamp::now().unix() * 1000;
                let n = store.writer().call(move |c| {
                    Ok::<_, crate::store::StoreError>(upkeep::refresh_pairs(c, now, 90, PairRules::default())?)
                })?;
                println!("{n} pairs learned from the last 90 days of the journal");
            }
            let learned = upkeep::learned(&*store.read()?)?;
            for p in learned.strongest(limit) {
                println!(
                    "{} {} -> {} {}: {} of {} ({:.0}%), lift {:.1}, lag median {:.0} s, p90 {:.0} s",
                    p.first.asset_id,
                    p.first.code,
                    p.then.asset_id,
                    p.then.code,
                    p.support,
                    p.first_activations,
                    p.confidence * 100.0,
                    p.lift,
                    p.lag_median_s,
                    p.lag_p90_s
                );
            }
        }
    }
    Ok(ExitCode::SUCCESS)
}
