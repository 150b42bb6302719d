//! The command line. Each subcommand parses its arguments into library types and calls
//! the library; errors print with their context chain and exit 1.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context;
use clap::{Args, Parser, Subcommand, ValueEnum};

use crate::accounts::Change;
use crate::agent::{self, Agent};
use crate::alarms;
use crate::approvals::{Approvals, Proposer};
use crate::config::Config;
use crate::domain::{AssetId, Timestamp, parse_time};
use crate::ingest::replay;
use crate::store::Store;
use crate::tools::{self, ToolContext};
use crate::{bench, rag, seed};

#[derive(Parser)]
#[command(
    name = "twinops",
    version,
    about = "An operations agent for pumping stations and water plants: \
a SQLite twin of the plant, documentation search, and the read-only tools an LLM uses to triage alarms."
)]
pub struct Cli {
    #[command(flatten)]
    global: Global,
    #[command(subcommand)]
    command: Command,
}

#[derive(Args)]
struct Global {
    /// Folder for the database and other state.
    #[arg(long, global = true, env = "TWINOPS_DATA_DIR", default_value = "data")]
    data_dir: PathBuf,
    /// SQLite database file. Default: DATA_DIR/twinops.db.
    #[arg(long, global = true, env = "TWINOPS_DB")]
    db: Option<PathBuf>,
    /// Configuration file; TWINOPS_* environment variables override it.
    #[arg(long, global = true, env = "TWINOPS_CONFIG", default_value = "twinops.toml")]
    config: PathBuf,
}

impl Global {
    fn db_path(&self) -> PathBuf {
        self.db.clone().unwrap_or_else(|| self.data_dir.join("twinops.db"))
    }

    fn open(&self) -> anyhow::Result<Store> {
        let path = self.db_path();
        Store::open(&path).with_context(|| format!("opening {}", path.display()))
    }

    fn config(&self) -> anyhow::Result<Config> {
        Config::load(&self.config, &|k| std::env::var(k).ok())
    }

    fn agent(&self, now: Option<&str>) -> anyhow::Result<Agent> {
        let config = self.config()?;
        let store = self.open()?;
        let agent = Agent::new(store, agent::models_from_config(&config.llm), config.llm.limits);
        Ok(match now {
            Some(s) => {
                let now = parse_time(s).map_err(anyhow::Error::msg).context("--now")?;
                agent.with_clock(move || now)
            }
            None => agent,
        })
    }
}

fn runtime() -> anyhow::Result<tokio::runtime::Runtime> {
    Ok(tokio::runtime::Builder::new_multi_thread().enable_all().build()?)
}

#[derive(Subcommand)]
enum Command {
    /// Run the daemon: MQTT ingest (embedded broker unless mqtt.url is set), alarm
    /// lifecycle, triage of every new occurrence, notes out.
    #[command(
        after_help = "Examples:\n  twinops serve --demo        # seed the demo plant, run the simulator, watch notes arrive\n  TWINOPS_MQTT_URL=mqtt://scada-gw:1883 twinops serve"
    )]
    Serve {
        /// Seed an empty database with the demo plant and run the plant simulator.
        #[arg(long)]
        demo: bool,
        /// Folder holding plant.toml and docs/ (for --demo); `--from`, as for seed and
        /// simulate, works too.
        #[arg(long, visible_alias = "from", default_value = "seed")]
        seed_from: PathBuf,
        /// Triage notes on the console: every note, or a summary a minute; `auto` sums
        /// them up under systemd (whose journal takes every line) and prints each otherwise.
        #[arg(long, value_enum, default_value = "auto")]
        notes: crate::console::NotesOutput,
    },
    /// Run the embedded MQTT broker on its own (in memory, loopback by default), for a
    /// site without a broker whose daemon must restart or crash without losing what
    /// the broker holds for it. Point mqtt.url at it.
    #[command(
        after_help = "Example:\n  twinops broker --listen 127.0.0.1:1883 &\n  TWINOPS_MQTT_URL=mqtt://127.0.0.1:1883 twinops serve"
    )]
    Broker {
        #[arg(long, default_value = "127.0.0.1:1883")]
        listen: std::net::SocketAddr,
    },
    /// Publish simulated alarm events from the seed plant to an MQTT broker.
    #[command(
        after_help = "Example:\n  twinops simulate --broker mqtt://127.0.0.1:1883 --count 500 --rate 0 --duplicates 10 --malformed 1"
    )]
    Simulate(crate::sim::SimOptions),
    /// Build the demo plant (assets, sensors, a week of readings, alarms, maintenance, docs).
    #[command(
        after_help = "Examples:\n  twinops seed\n  twinops seed --end 2026-11-30T12:00:00Z\n  twinops --db /tmp/big.db seed --scale 100"
    )]
    Seed(SeedArgs),
    /// The plant: import a site's own files into the twin, or export it to them.
    #[command(subcommand)]
    Plant(PlantCommand),
    /// Readings: backfill from a historian's export.
    #[command(subcommand)]
    Readings(ReadingsCommand),
    /// Documentation: index a folder of Markdown, or search it.
    #[command(subcommand)]
    Docs(DocsCommand),
    /// The agent's tools: list their definitions or call one as a model would.
    #[command(subcommand)]
    Tools(ToolsCommand),
    /// Ask the agent one question, as an operator would in the chat.
    #[command(
        after_help = "Examples:\n  twinops ask 'Why is PUMP-007 in alarm?'\n  TWINOPS_LLM_KIND=openai TWINOPS_LLM_BASE_URL=http://localhost:11434/v1 TWINOPS_LLM_MODEL=llama3.1:8b twinops ask 'What is wrong at the East Booster Station?'"
    )]
    Ask {
        question: String,
        /// Who is asking, for the audit trail.
        #[arg(long, env = "USER", default_value = "cli")]
        user: String,
        /// Evaluate as of this time (RFC 3339) instead of now.
        #[arg(long)]
        now: Option<String>,
    },
    /// Run triage on one alarm occurrence and print the note.
    #[command(after_help = "Example:\n  twinops triage 17")]
    Triage {
        alarm_id: i64,
        #[arg(long)]
        now: Option<String>,
    },
    /// The shift handover: write one now and print it (a running daemon publishes it as
    /// it does the scheduled ones), or print the latest stored with --last.
    #[command(after_help = "Examples:\n  twinops handover\n  twinops handover --last 3")]
    Handover {
        /// Print the latest N stored handovers, newest first, instead of writing one.
        #[arg(long, value_name = "N")]
        last: Option<u32>,
    },
    /// Agent runs: the audit trail.
    #[command(subcommand)]
    Runs(RunsCommand),
    /// Alarms: list, acknowledge, shelve, out of service (as a local operator).
    #[command(subcommand)]
    Alarms(AlarmsCommand),
    /// Messages and events ingest refused: list them, replay them once the cause is fixed.
    #[command(subcommand)]
    DeadLetters(DeadLettersCommand),
    /// Serve the twin's read-only tools to an MCP host over stdio (the host spawns it).
    #[command(
        after_help = "Examples:\n  twinops --db /var/lib/twinops/twinops.db mcp\n  (Claude Desktop: see README, \"Connecting an MCP host\")"
    )]
    Mcp {
        /// Offer propose_work_order too (it only parks a proposal for a supervisor).
        #[arg(long)]
        allow_propose: bool,
    },
    /// HMI users: add, list, change role, reset password, disable, enable.
    #[command(subcommand)]
    User(UserCommand),
    /// API tokens for machine clients (bearer tokens; shown once, stored hashed): create, list, revoke.
    #[command(subcommand)]
    Token(TokenCommand),
    /// Copy the database to a new file, consistent and checked, while the daemon runs.
    #[command(after_help = "Example:\n  twinops backup /var/backups/twinops/twinops-2026-12-01.db")]
    Backup {
        /// The backup file to write; it must not exist.
        to: PathBuf,
    },
    /// Print performance figures.
    #[command(subcommand)]
    Bench(BenchCommand),
}

#[derive(Subcommand)]
enum UserCommand {
    /// Add a user. The password is read from the terminal without echo, or from the
    /// first line of stdin when it is not a terminal.
    #[command(
        after_help = "Examples:\n  twinops user add admin --role admin\n  printf '%s\\n' \"$PASSWORD\" | twinops user add operator.kaur --role operator"
    )]
    Add {
        name: String,
        /// viewer, operator, supervisor or admin.
        #[arg(long)]
        role: String,
    },
    /// List users: role, whether disabled, live API tokens, login locks in force.
    #[command(after_help = "Examples:\n  twinops user list")]
    List,
    /// Change a user's role (from the next request on).
    #[command(after_help = "Examples:\n  twinops user role operator.kaur supervisor")]
    Role {
        name: String,
        /// viewer, operator, supervisor or admin.
        role: String,
    },
    /// Reset a user's password (prompt or stdin, as for add); their sessions end.
    #[command(
        after_help = "Examples:\n  twinops user passwd operator.kaur\n  printf '%s\\n' \"$PASSWORD\" | twinops user passwd operator.kaur"
    )]
    Passwd { name: String },
    /// Disable a user: no login, sessions end, API tokens stop working (until enabled).
    #[command(after_help = "Examples:\n  twinops user disable operator.kaur")]
    Disable { name: String },
    /// Enable a disabled user again (their unrevoked tokens work again).
    #[command(after_help = "Examples:\n  twinops user enable operator.kaur")]
    Enable { name: String },
    /// Lift the locks failed logins put on a user, from every address (`user list`
    /// shows them; a password reset lifts them too).
    #[command(after_help = "Examples:\n  twinops user unlock supervisor.osei")]
    Unlock { name: String },
}

#[derive(Subcommand)]
enum TokenCommand {
    /// Create a bearer token acting as USER (with that user's role).
    #[command(after_help = "Examples:\n  twinops token create --user scada-bridge --label 'historian export'")]
    Create {
        #[arg(long)]
        user: String,
        /// What the token is for, for the audit log.
        #[arg(long, default_value = "api")]
        label: String,
    },
    /// List tokens: id, user, label, created, last used (never the token itself).
    #[command(after_help = "Examples:\n  twinops token list")]
    List,
    /// Revoke a token for good, by the id `token list` shows.
    #[command(after_help = "Examples:\n  twinops token revoke 3")]
    Revoke { id: i64 },
}

#[derive(Subcommand)]
enum AlarmsCommand {
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

#[derive(Subcommand)]
enum PlantCommand {
    /// Import the plant from the files a site has: a TOML in the shape of
    /// seed/plant.toml and CSV asset registers and tag exports, combined as you like.
    /// One transaction: any error (each with file:line:column) and nothing is written.
    /// A full import retires what it leaves out; --partial only adds and updates.
    #[command(
        after_help = "Examples:\n  twinops plant import site.toml assets.csv tags.csv --dry-run\n  twinops plant import site.toml assets.csv tags.csv\n  twinops plant import new-tags.csv --partial"
    )]
    Import {
        #[arg(required = true)]
        files: Vec<PathBuf>,
        /// Print the changes (added; changed, field by field; retired) and write nothing.
        #[arg(long)]
        dry_run: bool,
        /// Add and update only; retire nothing.
        #[arg(long)]
        partial: bool,
        /// Who imports, for the audit log.
        #[arg(long, env = "USER", default_value = "cli")]
        user: String,
    },
    /// Write the twin's plant as plant.toml, assets.csv and tags.csv into a folder, in
    /// the shape `plant import` reads.
    #[command(after_help = "Example:\n  twinops plant export /tmp/plant")]
    Export { dir: PathBuf },
}

#[derive(Subcommand)]
enum ReadingsCommand {
    /// Import a historian's CSV export: long (time, tag, value[, quality]) or wide
    /// (time, then a column per tag); RFC 3339 or epoch seconds or milliseconds. Rows
    /// already stored are counted, not written again; bad quality, unknown tags and
    /// unreadable values are skipped and counted. Never raises live alarms.
    #[command(
        after_help = "Examples:\n  twinops readings import historian-2026-11.csv\n  twinops readings import local-times.csv --timezone America/Chicago"
    )]
    Import {
        file: PathBuf,
        /// The time zone of times written without an offset (IANA name, e.g.
        /// Europe/London); default: the site's. DST changes are handled.
        #[arg(long)]
        timezone: Option<String>,
    },
}

#[derive(Subcommand)]
enum DeadLettersCommand {
    /// List dead letters not yet replayed, oldest first.
    #[command(
        after_help = "Examples:\n  twinops dead-letters list\n  twinops dead-letters list --reason unknown_sensor --all"
    )]
    List {
        /// Only this reason: malformed, oversized, invalid, unknown_asset, unknown_sensor,
        /// unmatched_clear, failed.
        #[arg(long)]
        reason: Option<String>,
        /// Include those already replayed.
        #[arg(long)]
        all: bool,
        #[arg(long, default_value_t = 50)]
        limit: u32,
    },
    /// Apply dead letters again, by id or all of one reason; one refused again stays as it
    /// was, with the reason printed.
    #[command(
        after_help = "Examples:\n  twinops dead-letters replay 17 18\n  twinops dead-letters replay --reason unknown_sensor --user operator.kaur"
    )]
    Replay {
        ids: Vec<i64>,
        /// Every dead letter of this reason not yet replayed (instead of ids).
        #[arg(long, conflicts_with = "ids")]
        reason: Option<String>,
        #[arg(long, env = "USER", default_value = "cli")]
        user: String,
    },
}

#[derive(Subcommand)]
enum RunsCommand {
    /// Print one run's trace: every model call, tool call and guardrail decision.
    #[command(after_help = "Example:\n  twinops runs show 1")]
    Show { run_id: i64 },
}

#[derive(Args)]
struct SeedArgs {
    /// Folder holding plant.toml and docs/.
    #[arg(long, default_value = "seed")]
    from: PathBuf,
    /// Copies of the plant (asset numbers offset by 100 per copy), for benchmarks.
    #[arg(long, default_value_t = 1)]
    scale: u32,
    /// Time of the last reading, RFC 3339. Default: now. Pin it for reproducible data.
    #[arg(long)]
    end: Option<String>,
    /// Days of 1-minute readings.
    #[arg(long, default_value_t = 7, value_parser = clap::value_parser!(u32).range(1..=31))]
    days: u32,
}

#[derive(Subcommand)]
enum DocsCommand {
    /// Chunk and index every .md file under DIR; unchanged files are skipped.
    #[command(after_help = "Example:\n  twinops docs index seed/docs")]
    Index { dir: PathBuf },
    /// Search the indexed documentation (BM25), as the search_docs tool does.
    #[command(after_help = "Example:\n  twinops docs search 'VIB-HI pump bearing vibration'")]
    Search {
        query: String,
        #[arg(long, default_value_t = 5)]
        limit: usize,
    },
}

#[derive(Clone, Copy, ValueEnum)]
enum ToolFormat {
    Openai,
    Anthropic,
}

#[derive(Subcommand)]
enum ToolsCommand {
    /// Print the tool definitions as a model API receives them.
    #[command(after_help = "Examples:\n  twinops tools list\n  twinops tools list --format anthropic")]
    List {
        #[arg(long, value_enum, default_value = "openai")]
        format: ToolFormat,
    },
    /// Run one tool and print exactly what a model would receive, errors included.
    #[command(
        after_help = "Examples:\n  twinops tools call get_asset_details '{\"asset_id\":\"PUMP-007\"}'\n  twinops tools call search_docs '{\"query\":\"VIB-HI\"}'"
    )]
    Call {
        name: String,
        /// Arguments as a JSON object.
        #[arg(default_value = "{}")]
        args: String,
        /// Evaluate as of this time (RFC 3339) instead of now.
        #[arg(long)]
        now: Option<String>,
    },
}

#[derive(Subcommand)]
enum BenchCommand {
    /// p50/p99 latency of every tool on a scaled plant, and of search_docs over a large corpus.
    #[command(after_help = "Examples:\n  twinops bench tools\n  twinops bench tools --scale 10 --iterations 200")]
    Tools(bench::ToolsBenchArgs),
    /// Ingest throughput against a bare subscriber on the same broker.
    #[command(
        after_help = "Examples:\n  twinops bench ingest\n  twinops bench ingest --broker mqtt://127.0.0.1:1883 --batch-ms 1   # Mosquitto, set up as in the README"
    )]
    Ingest(bench::IngestBenchArgs),
    /// Sparkplug B ingest (DDATA of 100 metrics) beside JSON telemetry of the same readings.
    #[command(
        after_help = "Examples:\n  twinops bench sparkplug\n  twinops bench sparkplug --broker mqtt://127.0.0.1:1883   # Mosquitto"
    )]
    Sparkplug(bench::SparkplugBenchArgs),
    /// The agent harness's own overhead per step against an instant scripted model.
    #[command(after_help = "Example:\n  twinops bench agent --runs 300")]
    Agent(bench::AgentBenchArgs),
    /// `readings import` of a historian export beside the raw insert rate of the same rows.
    #[command(after_help = "Examples:\n  twinops bench readings\n  twinops bench readings --rows 1000000")]
    Readings(bench::ReadingsBenchArgs),
}

pub fn main() -> ExitCode {
    use tracing_subscriber::layer::SubscriberExt;
    use tracing_subscriber::util::SubscriberInitExt;
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_env("TWINOPS_LOG")
                .unwrap_or_else(|_| "warn,rumqttd::server::broker=off".into()),
        )
        .with_writer(std::io::stderr)
        // Colour only on a terminal: under systemd, stderr is the journal.
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .finish()
        .with(crate::broker::QuietCleanDisconnects)
        .init();
    match run(Cli::parse()) {
        Ok(code) => code,
        Err(err) => {
            eprintln!("error: {err:#}");
            ExitCode::FAILURE
        }
    }
}

fn print_handover(h: &crate::handover::Handover) {
    println!(
        "-- handover note {} at {}, run {} ({} via {}){}\n{}\n",
        h.note_id,
        h.created_at.to_rfc3339(),
        h.run_id.map_or("-".into(), |r| r.to_string()),
        h.outcome.as_deref().unwrap_or("-"),
        h.provider.as_deref().unwrap_or("-"),
        crate::notify::flag_list(&h.flags),
        h.text
    );
}

fn print_summary(r: &agent::RunReport) {
    eprintln!(
        "\n-- run {}: {} via {}, {} model call(s), {} tool call(s), {} tokens{}; `twinops runs show {}` for the trace",
        r.run_id,
        r.outcome.as_str(),
        r.provider.as_deref().unwrap_or("-"),
        r.model_calls,
        r.tool_calls,
        r.usage.input_tokens + r.usage.output_tokens,
        if r.flags.is_empty() { String::new() } else { format!(", flagged {}", r.flags.join(", ")) },
        r.run_id
    );
}

fn run(cli: Cli) -> anyhow::Result<ExitCode> {
    match cli.command {
        Command::Seed(args) => {
            let end = match &args.end {
                Some(s) => parse_time(s).map_err(anyhow::Error::msg).context("--end")?,
                None => Timestamp::now(),
            };
            let store = cli.global.open()?;
            let opts = seed::SeedOptions { dir: args.from, scale: args.scale, end, days: args.days };
            let r = seed::seed(&store, &opts)?;
            println!(
                "seeded {}: {} assets, {} sensors, {} readings, {} alarms ({} active), {} maintenance records, \
                 {} documents in {} chunks; readings end at {}",
                store.path().display(),
                r.assets,
                r.sensors,
                r.readings,
                r.alarms,
                r.active_alarms,
                r.maintenance,
                r.docs.added + r.docs.updated + r.docs.unchanged,
                r.docs.chunks_written,
                end.floor_minute().to_rfc3339()
            );
        }
        Command::Docs(DocsCommand::Index { dir }) => {
            let store = cli.global.open()?;
            let r = rag::index_dir(&store, &dir, Timestamp::now())?;
            println!(
                "indexed {}: {} added, {} updated, {} unchanged, {} chunks written",
                dir.display(),
                r.added,
                r.updated,
                r.unchanged,
                r.chunks_written
            );
        }
        Command::Docs(DocsCommand::Search { query, limit }) => {
            let store = cli.global.open()?;
            let db = store.read()?;
            for hit in rag::DocIndex::new().search(&db, &query, limit)? {
                println!(
                    "{:>7.3}  {:<32} {}\n         {}",
                    hit.score,
                    hit.citation.as_str(),
                    hit.heading,
                    hit.snippet.replace('\n', " ")
                );
            }
        }
        Command::Tools(ToolsCommand::List { format }) => {
            let all: Vec<_> = tools::all().iter().collect();
            let defs = match format {
                ToolFormat::Openai => tools::openai_format(&all),
                ToolFormat::Anthropic => tools::anthropic_format(&all),
            };
            println!("{}", serde_json::to_string_pretty(&defs)?);
        }
        Command::Tools(ToolsCommand::Call { name, args, now }) => {
            let args: serde_json::Value =
                serde_json::from_str(&args).with_context(|| format!("the arguments are not JSON: {args}"))?;
            let now = match &now {
                Some(s) => parse_time(s).map_err(anyhow::Error::msg).context("--now")?,
                None => Timestamp::now(),
            };
            let store = cli.global.open()?;
            let db = store.read()?;
            let approvals = Approvals::new(store.writer().clone());
            let user = std::env::var("USER").unwrap_or_else(|_| "cli".into());
            let docs = rag::DocIndex::new();
            let ctx = ToolContext {
                db: &db,
                docs: &docs,
                approvals: &approvals,
                now,
                caller: Proposer::User(format!("cli:{user}")),
            };
            let out = tools::call(&ctx, &name, args);
            println!("{}", out.content);
            if out.is_error {
                return Ok(ExitCode::from(2));
            }
        }
        Command::Serve { demo, seed_from, notes } => {
            let config = cli.global.config()?;
            let opts = crate::app::ServeOptions { config, db: cli.global.db_path(), demo, seed_dir: seed_from };
            runtime()?.block_on(crate::app::serve(opts, notes))?;
        }
        Command::Broker { listen } => {
            crate::broker::run(listen)?;
        }
        Command::Simulate(opts) => {
            let r = runtime()?.block_on(crate::sim::simulate(&opts))?;
            println!(
                "published {} messages on {}: {} alarm events ({} raises) on {}, {} duplicates, {} malformed; {} telemetry batches on {}",
                r.published,
                opts.broker,
                r.events,
                r.raises,
                opts.topic,
                r.duplicates,
                r.malformed,
                r.telemetry,
                opts.telemetry_topic
            );
        }
        Command::Bench(BenchCommand::Tools(args)) => bench::tools(&args)?,
        Command::Bench(BenchCommand::Agent(args)) => bench::agent(&args)?,
        Command::Bench(BenchCommand::Ingest(args)) => bench::ingest(&args)?,
        Command::Bench(BenchCommand::Sparkplug(args)) => bench::sparkplug(&args)?,
        Command::Bench(BenchCommand::Readings(args)) => bench::readings(&args)?,
        Command::Ask { question, user, now } => {
            let agent = cli.global.agent(now.as_deref())?;
            let report = runtime()?.block_on(async {
                let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
                let printer = tokio::spawn(async move {
                    use std::io::Write;
                    let mut streamed = false;
                    while let Some(event) = rx.recv().await {
                        match event {
                            crate::agent::StreamEvent::Text { text } => {
                                print!("{text}");
                                streamed = true;
                            }
                            crate::agent::StreamEvent::Tool { name, arguments } => {
                                eprintln!("[{name} {}]", crate::agent::clip(&arguments, 200))
                            }
                            // The terminal cannot take text back: say so, and print what is kept.
                            crate::agent::StreamEvent::Retract { reason } => {
                                println!("\n[the text above is withdrawn: {reason}]");
                                streamed = false;
                            }
                        }
                        let _ = std::io::stdout().flush();
                    }
                    streamed
                });
                let report = agent.ask(&question, &user, Some(tx)).await;
                let streamed = printer.await.unwrap_or(false);
                report.map(|r| (r, streamed))
            })?;
            let (report, streamed) = report;
            if !streamed {
                println!("{}", report.answer.as_deref().unwrap_or("(no answer)"));
            }
            print_summary(&report);
        }
        Command::Backup { to } => {
            let from = cli.global.db_path();
            let b = crate::store::backup(&from, &to)?;
            println!(
                "backup of {} written to {}: {:.1} MiB, schema version {}, integrity ok, in {:.1} s",
                from.display(),
                to.display(),
                b.bytes as f64 / (1024.0 * 1024.0),
                b.schema_version,
                b.elapsed.as_secs_f64()
            );
        }
        Command::Handover { last: Some(n) } => {
            let db = cli.global.open()?.read()?;
            let handovers = crate::handover::recent(&db, n)?;
            if handovers.is_empty() {
                println!("no handover yet: `twinops handover` writes one");
            }
            for h in handovers {
                print_handover(&h);
            }
        }
        Command::Handover { last: None } => {
            let agent = cli.global.agent(None)?;
            let user = std::env::var("USER").unwrap_or_else(|_| "cli".into());
            print_handover(&runtime()?.block_on(agent.write_handover(&format!("user:{user}")))?);
        }
        Command::Triage { alarm_id, now } => {
            let agent = cli.global.agent(now.as_deref())?;
            let report = runtime()?.block_on(agent.triage(alarm_id))?;
            match &report.note {
                Some(note) => println!("{}", serde_json::to_string_pretty(note)?),
                None => println!("{}", report.answer.as_deref().unwrap_or("(no note)")),
            }
            print_summary(&report);
        }
        Command::Alarms(AlarmsCommand::List { active, asset, limit }) => {
            let store = cli.global.open()?;
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
        Command::Mcp { allow_propose } => {
            let store = cli.global.open()?;
            let allow = allow_propose || cli.global.config()?.mcp.allow_propose;
            runtime()?.block_on(crate::mcp::serve_stdio(store, allow))?;
        }
        Command::User(UserCommand::Add { name, role }) => {
            let role = crate::domain::Role::parse(&role).map_err(anyhow::Error::msg)?;
            let store = cli.global.open()?;
            let password = read_password(&format!("password for {name}: "))?;
            let user = crate::accounts::add_user(&store, &name, role, &password, "cli")?;
            println!("added {} as {}", user.name, user.role);
        }
        Command::User(UserCommand::List) => {
            let store = cli.global.open()?;
            let accounts = crate::accounts::accounts(&store)?;
            // Columns as wide as their longest value, so that they line up.
            let w = accounts.iter().map(|a| a.name.chars().count()).max().unwrap_or(0).max(4);
            println!("{:<w$} {:<11} {:<9} {:>6}  {:<20}  locks", "name", "role", "state", "tokens", "created");
            for a in accounts {
                let state = if a.disabled { "disabled" } else { "enabled" };
                let locks: Vec<String> = a.locks.iter().map(ToString::to_string).collect();
                println!(
                    "{:<w$} {:<11} {state:<9} {:>6}  {:<20}  {}",
                    a.name,
                    a.role.as_str(),
                    a.live_tokens,
                    a.created_at.to_rfc3339(),
                    if locks.is_empty() { "-".to_string() } else { locks.join("; ") }
                );
            }
        }
        Command::User(UserCommand::Role { name, role }) => {
            let role = crate::domain::Role::parse(&role).map_err(anyhow::Error::msg)?;
            change_user(&cli.global, &name, Change::Role(role), &format!("is now {role}"))?;
        }
        Command::User(UserCommand::Passwd { name }) => {
            let password = read_password(&format!("new password for {name}: "))?;
            change_user(
                &cli.global,
                &name,
                Change::Password(password),
                "has a new password; their sessions have ended",
            )?;
        }
        Command::User(UserCommand::Disable { name }) => {
            change_user(&cli.global, &name, Change::Disable, "is disabled: no login, no sessions, no tokens")?;
        }
        Command::User(UserCommand::Enable { name }) => {
            change_user(&cli.global, &name, Change::Enable, "is enabled")?;
        }
        Command::User(UserCommand::Unlock { name }) => {
            change_user(&cli.global, &name, Change::Unlock, "may log in again from every address")?;
        }
        Command::Token(TokenCommand::Create { user, label }) => {
            let store = cli.global.open()?;
            let (id, token) = crate::accounts::create_token(&store, &user, &label, "cli")?;
            println!("{token}");
            eprintln!(
                "token {id}: send it as `Authorization: Bearer <token>`; it is not shown again (`twinops token revoke {id}` ends it)"
            );
        }
        Command::Token(TokenCommand::List) => {
            let store = cli.global.open()?;
            println!("{:>4}  {:<24} {:<20} {:<21} {:<21} state", "id", "user", "label", "created", "last used");
            for t in crate::accounts::tokens(&store)? {
                let used = t.last_used_at.map_or("never".into(), |t| t.to_rfc3339());
                let state = if t.revoked { "revoked" } else { "live" };
                println!(
                    "{:>4}  {:<24} {:<20} {:<21} {used:<21} {state}",
                    t.id,
                    t.user,
                    t.label,
                    t.created_at.to_rfc3339()
                );
            }
        }
        Command::Token(TokenCommand::Revoke { id }) => {
            crate::accounts::revoke_token(&cli.global.open()?, id, "cli")?;
            println!("token {id} is revoked");
        }
        Command::Alarms(AlarmsCommand::Ack { alarm_id, returned: false, user }) => {
            let store = cli.global.open()?;
            let state = alarms::acknowledge(store.writer(), alarm_id, &user, Timestamp::now())?;
            println!("alarm {alarm_id} is now {state}");
        }
        Command::Alarms(AlarmsCommand::Ack { alarm_id, returned: true, user }) => {
            let store = cli.global.open()?;
            let ids = alarms::acknowledge_returned(store.writer(), alarm_id, &user, Timestamp::now())?;
            let list: Vec<String> = ids.iter().map(i64::to_string).collect();
            println!("{} returned-to-normal alarm(s) acknowledged, now cleared: {}", ids.len(), list.join(", "));
        }
        Command::Alarms(AlarmsCommand::Shelve { alarm_id, minutes, reason, user }) => {
            let store = cli.global.open()?;
            alarms::shelve(store.writer(), alarm_id, &user, minutes * 60, &reason, Timestamp::now())?;
            println!("alarm {alarm_id} is shelved for {minutes} minutes");
        }
        Command::Alarms(AlarmsCommand::Unshelve { alarm_id, user }) => {
            let store = cli.global.open()?;
            let state = alarms::unshelve(store.writer(), alarm_id, &user, Timestamp::now())?;
            println!("alarm {alarm_id} is now {state}");
        }
        Command::Alarms(AlarmsCommand::OutOfService { alarm_id, reason, user }) => {
            let store = cli.global.open()?;
            alarms::remove_from_service(store.writer(), alarm_id, &user, &reason, Timestamp::now())?;
            println!("alarm {alarm_id} is out of service: its point's alarms are recorded, not annunciated or triaged");
        }
        Command::Alarms(AlarmsCommand::InService { alarm_id, user }) => {
            let store = cli.global.open()?;
            let policy = cli.global.config()?.ingest_policy().queue;
            let state = alarms::return_to_service(store.writer(), alarm_id, &user, Timestamp::now(), policy)?;
            println!("alarm {alarm_id} is back in service and now {state}");
        }
        Command::Plant(PlantCommand::Import { files, dry_run, partial, user }) => {
            let store = cli.global.open()?;
            let mode = if partial { crate::plant::Mode::Partial } else { crate::plant::Mode::Full };
            let changes = crate::plant::import_files(store.writer(), &files, mode, dry_run, &user)?;
            println!("{changes}");
            if dry_run {
                println!("(dry run: nothing was written)");
            }
        }
        Command::Readings(ReadingsCommand::Import { file, timezone }) => {
            let store = cli.global.open()?;
            let summary = crate::ingest::history::import(store.writer(), &*store.read()?, &file, timezone.as_deref())?;
            print!("{summary}");
        }
        Command::Plant(PlantCommand::Export { dir }) => {
            let store = cli.global.open()?;
            for path in crate::plant::export(&*store.read()?, &dir)? {
                println!("wrote {}", path.display());
            }
        }
        Command::DeadLetters(DeadLettersCommand::List { reason, all, limit }) => {
            let store = cli.global.open()?;
            let letters = replay::list(&*store.read()?, reason.as_deref(), all, limit)?;
            println!(
                "{:>6}  {:<20} {:>5}  {:<15} {:>7}  {:<28} detail",
                "id", "received", "seen", "reason", "bytes", "topic"
            );
            for d in &letters {
                let replayed = d.replayed_at.map(|t| format!(" (replayed {})", t.to_rfc3339())).unwrap_or_default();
                let again = match d.times_seen {
                    1 => String::new(),
                    _ => format!(" (last seen {})", d.last_seen_at.to_rfc3339()),
                };
                println!(
                    "{:>6}  {:<20} {:>5}  {:<15} {:>7}  {:<28} {}{again}{replayed}",
                    d.id,
                    d.received_at.to_rfc3339(),
                    d.times_seen,
                    d.reason,
                    d.bytes,
                    d.topic,
                    d.detail.chars().take(120).collect::<String>()
                );
            }
            if letters.is_empty() {
                println!("(none)");
            }
        }
        Command::DeadLetters(DeadLettersCommand::Replay { ids, reason, user }) => {
            let store = cli.global.open()?;
            let ids = match reason {
                Some(reason) => {
                    replay::list(&*store.read()?, Some(&reason), false, u32::MAX)?.iter().map(|d| d.id).collect()
                }
                None if ids.is_empty() => {
                    anyhow::bail!("name dead letters by id, or --reason; `twinops dead-letters list` shows them")
                }
                None => ids,
            };
            let policy = cli.global.config()?.ingest_policy();
            let (mut applied, mut refused) = (0, 0);
            for id in ids {
                match replay::replay(store.writer(), id, &user, policy.clone())? {
                    replay::Replay::Applied(e) => {
                        applied += 1;
                        println!(
                            "{id}: applied ({} alarm events, {} readings, {} already stored)",
                            e.alarms.len(),
                            e.readings,
                            e.duplicate_readings
                        );
                    }
                    replay::Replay::Refused { reason, detail } => {
                        refused += 1;
                        println!("{id}: refused again, {reason}: {detail}");
                    }
                    replay::Replay::AlreadyReplayed(at) => println!("{id}: already replayed at {}", at.to_rfc3339()),
                    replay::Replay::NotFound => {
                        refused += 1;
                        println!("{id}: no such dead letter; `twinops dead-letters list --all` shows them");
                    }
                }
            }
            println!("{applied} applied, {refused} not");
            if refused > 0 {
                return Ok(ExitCode::from(1));
            }
        }
        Command::Runs(RunsCommand::Show { run_id }) => {
            let store = cli.global.open()?;
            print!("{}", agent::audit::render_run(&store, run_id)?);
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// An administrator's change to a user, from the command line; says what it did.
fn change_user(global: &Global, name: &str, change: Change, done: &str) -> anyhow::Result<()> {
    crate::accounts::change_user(&global.open()?, name, change, "cli")?;
    println!("{name} {done}");
    Ok(())
}

/// A password from the terminal (no echo), or the first line of stdin when piped.
fn read_password(prompt: &str) -> anyhow::Result<String> {
    use std::io::IsTerminal;
    let password = if std::io::stdin().is_terminal() {
        let first = rpassword::prompt_password(prompt)?;
        let again = rpassword::prompt_password("again: ")?;
        anyhow::ensure!(first == again, "the two passwords differ; nothing was changed");
        first
    } else {
        let mut line = String::new();
        std::io::stdin().read_line(&mut line)?;
        line.trim_end_matches(['\r', '\n']).to_string()
    };
    Ok(password)
}
