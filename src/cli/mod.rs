//! The command line. Each subcommand parses its arguments into library types and calls
//! the library; errors print with their context chain and exit 1.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context;
use clap::{Args, Parser, Subcommand, ValueEnum};

use crate::accounts::Change;
use crate::agent::{self, Agent};
use crate::alarms;
use crate::approvals::Proposer;
use crate::config::Config;
use crate::domain::{AssetId, Timestamp, parse_time};
use crate::ingest::dead_letters;
use crate::store::Store;
use crate::tools;
use crate::{bench, rag, seed};

mod agent_ops;
mod alarm_ops;
mod data;
mod episode_ops;
mod opcua_ops;
mod people;

use alarm_ops::AlarmsCommand;
use data::{DeadLettersCommand, DocsCommand, PlantCommand, ReadingsCommand};
use people::{TokenCommand, UserCommand};

/// `twinops --version`: the release, the commit it was built from, and the database
/// schema it writes (a database of a later schema is refused, an earlier one migrated).
static VERSION: std::sync::LazyLock<String> = std::sync::LazyLock::new(|| {
    format!(
        "{} (commit {}, database schema {})",
        env!("CARGO_PKG_VERSION"),
        env!("TWINOPS_GIT_COMMIT"),
        crate::store::SCHEMA_VERSION
    )
});

#[derive(Parser)]
#[command(
    name = "twinops",
    version = VERSION.as_str(),
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
    /// Folder for the database and other state. Default: the configuration's
    /// `data_dir`, else `data`.
    #[arg(long, global = true, env = "TWINOPS_DATA_DIR")]
    data_dir: Option<PathBuf>,
    /// SQLite database file. Default: DATA_DIR/twinops.db.
    #[arg(long, global = true, env = "TWINOPS_DB")]
    db: Option<PathBuf>,
    /// Configuration file; TWINOPS_* environment variables override it.
    #[arg(long, global = true, env = "TWINOPS_CONFIG", default_value = "twinops.toml")]
    config: PathBuf,
}

impl Global {
    /// `--db`, else `twinops.db` in the data folder: `--data-dir`, the configuration's
    /// `data_dir` (read only when neither is given), or `data`.
    fn db_path(&self) -> anyhow::Result<PathBuf> {
        if let Some(db) = &self.db {
            return Ok(db.clone());
        }
        let dir = match &self.data_dir {
            Some(dir) => dir.clone(),
            None => self.config()?.data_dir.unwrap_or_else(|| PathBuf::from("data")),
        };
        Ok(dir.join("twinops.db"))
    }

    /// The folder of the database and other state (the OPC UA certificates).
    fn data_dir(&self) -> anyhow::Result<PathBuf> {
        Ok(crate::store::data_dir_of(&self.db_path()?))
    }

    fn open(&self) -> anyhow::Result<Store> {
        let path = self.db_path()?;
        Store::open(&path).with_context(|| format!("opening {}", path.display()))
    }

    fn config(&self) -> anyhow::Result<Config> {
        Config::load(&self.config, &|k| std::env::var(k).ok())
    }

    /// Of a redundant pair (`[cluster]`): makes a change through the pair's decision
    /// log, so that both nodes make it, and answers how it went on this node (a
    /// refusal is the error). `None`: this node is alone, the change is the caller's.
    fn through_pair(
        &self,
        store: &Store,
        change: impl FnOnce() -> anyhow::Result<(&'static str, serde_json::Value)>,
        actor: &str,
    ) -> anyhow::Result<Option<serde_json::Value>> {
        let config = self.config()?;
        let Some(cluster) = &config.cluster else { return Ok(None) };
        let (queue, pair) = (config.ingest_policy().queue, (cluster, &config.mqtt));
        let change = change()?;
        let (status, body) =
            runtime()?.block_on(crate::decisions::from_command_line(store, pair, queue, change, actor))?;
        anyhow::ensure!((200..300).contains(&status), "{}", body["error"].as_str().unwrap_or("refused by this node"));
        if let Some(waiting) = body["waiting"].as_str() {
            eprintln!("sent through the pair's decision log; {waiting}");
        }
        Ok(Some(body))
    }

    fn agent(&self, now: Option<&str>) -> anyhow::Result<Agent> {
        let config = self.config()?;
        let store = self.open()?;
        let agent = Agent::new(store, agent::models_from_config(&config.llm), config.llm.limits.clone())
            .with_docs(config.doc_index());
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
    /// OPC UA: browse a server into plant files; trust its certificate.
    #[command(subcommand)]
    Opcua(opcua_ops::OpcuaCommand),
    /// Readings: backfill from a historian's export.
    #[command(subcommand)]
    Readings(ReadingsCommand),
    /// Documentation: index a folder of manuals (Markdown, text, HTML, PDF), or search it.
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
    /// Alarm episodes: the floods and bursts kept, their initiators, the learned pairs.
    #[command(subcommand)]
    Episodes(episode_ops::EpisodesCommand),
    /// Messages and events ingest refused: list them, replay them once the cause is fixed.
    #[command(subcommand)]
    DeadLetters(DeadLettersCommand),
    /// Serve the twin's read-only tools to an MCP host over stdio (the host spawns it).
    #[command(
        after_help = "Examples:\n  twinops --db /var/lib/twinops/twinops.db mcp\n  (Claude Desktop: see the user guide, docs/src/agent.md, \"Connecting an MCP host\")"
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
    /// Check the configuration and everything it points at (database, broker, model
    /// servers, embeddings, listening addresses, documents), one line each with what to
    /// do; exit status 0 only when everything it turns on works. Changes nothing.
    #[command(after_help = "Example:\n  sudo -u twinops twinops --config /etc/twinops/twinops.toml check")]
    Check,
    /// Hand a redundant pair's acting role to the other node (a planned switchover, as
    /// before patching the acting node's host); waits until the other acts. Refused
    /// unless the other node is online and level with the acting one.
    #[command(after_help = "Example:\n  sudo -u twinops twinops --config /etc/twinops/twinops.toml switchover")]
    Switchover,
    /// Write the manual page or a shell's completions (for packagers).
    #[command(hide = true)]
    Generate {
        #[arg(value_enum)]
        what: Generate,
        /// Folder to write into.
        #[arg(long, default_value = ".")]
        out: PathBuf,
    },
    /// Copy the database to a new file, consistent and checked, while the daemon runs.
    #[command(after_help = "Example:\n  twinops backup /var/backups/twinops/twinops-2026-12-01.db")]
    Backup {
        /// The backup file to write; it must not exist.
        to: PathBuf,
    },
    /// Print performance figures.
    #[command(subcommand)]
    Bench(BenchCommand),
    /// Score the configured model on the plant's own cases (eval/cases), with checks
    /// that are code; retrieval figures beside them.
    #[command(
        after_help = "Examples:\n  twinops eval                                   # the configured model (rules when none)\n  TWINOPS_LLM_KIND=openai TWINOPS_LLM_BASE_URL=http://localhost:11434/v1 TWINOPS_LLM_MODEL=llama3.1:8b twinops eval\n  twinops eval --compare other.toml             # two providers side by side\n  twinops eval --scripted --category hostile    # an adversarial scripted model\n  twinops eval --floor eval/floor.toml          # fail below the rules model's score"
    )]
    Eval(crate::eval::EvalArgs),
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
        after_help = "Examples:\n  twinops bench ingest\n  twinops bench ingest --broker mqtt://127.0.0.1:1883 --batch-ms 1   # Mosquitto, set up as in the user guide (docs/src/connecting.md)"
    )]
    Ingest(bench::IngestBenchArgs),
    /// Sparkplug B ingest (DDATA of 100 metrics) beside JSON telemetry of the same readings.
    #[command(
        after_help = "Examples:\n  twinops bench sparkplug\n  twinops bench sparkplug --broker mqtt://127.0.0.1:1883   # Mosquitto"
    )]
    Sparkplug(bench::SparkplugBenchArgs),
    /// OPC UA: value changes from node-opcua's server to twinops (stored) beside a bare
    /// subscriber on the same server in the same run, and the CPU per value.
    #[command(
        after_help = "Example:\n  (cd tests/opcua && npm ci)\n  twinops bench opcua --js tests/opcua --variables 500 --hz 10"
    )]
    Opcua(bench::OpcuaBenchArgs),
    /// The agent harness's own overhead per step against an instant scripted model.
    #[command(after_help = "Example:\n  twinops bench agent --runs 300")]
    Agent(bench::AgentBenchArgs),
    /// `docs index` of a folder of manuals (a 500-page PDF, say), and again unchanged.
    #[command(after_help = "Example:\n  twinops bench docs /var/lib/twinops/manuals")]
    Docs(bench::DocsBenchArgs),
    /// `readings import` of a historian export beside the raw insert rate of the same rows.
    #[command(after_help = "Examples:\n  twinops bench readings\n  twinops bench readings --rows 1000000")]
    Readings(bench::ReadingsBenchArgs),
    /// The alarm performance figures over a year of a large utility's journal, and the
    /// KPI tool over a week, beside plain SQL over the same rows.
    Alarms(bench::AlarmsBenchArgs),
    /// Alarm episodes at a large utility's scale: mining the consequential pairs over a
    /// year's journal, matching an episode against 1,000 past ones, the upkeep per
    /// activation in a flood, each beside a plain baseline.
    #[command(
        after_help = "Examples:\n  twinops bench episodes\n  twinops bench episodes --scale 10 --activations 100000"
    )]
    Episodes(bench::EpisodesBenchArgs),
    /// A redundant pair under an alarm flood, the acting node SIGKILLed again and again:
    /// failover times, occurrences without a note, notes published twice, split brain.
    #[command(
        after_help = "Examples:\n  twinops bench failover\n  twinops bench failover --broker mqtt://127.0.0.1:1883 --kills 20   # Mosquitto"
    )]
    Failover(bench::FailoverBenchArgs),
}

pub fn main() -> ExitCode {
    use tracing_subscriber::layer::SubscriberExt;
    use tracing_subscriber::util::SubscriberInitExt;
    tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::try_from_env("TWINOPS_LOG").unwrap_or_else(|_| {
            "warn,rumqttd::server::broker=off,opcua_client=off,opcua_core=off,opcua_crypto=off".into()
        }))
        .with_writer(std::io::stderr)
        // Colour only on a terminal: under systemd, stderr is the journal.
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .finish()
        .with(crate::broker::QuietCleanDisconnects)
        .init();
    let cli = Cli::parse();
    if !matches!(cli.command, Command::Serve { .. } | Command::Broker { .. }) {
        // Rust ignores SIGPIPE, so printing into a closed pipe panics. A one-shot
        // command read by `head` or `grep -q` should end as any Unix tool does; the
        // daemon keeps ignoring it and sees EPIPE on the socket that closed.
        // SAFETY: no other thread exists yet; SIG_DFL is a valid disposition.
        unsafe { libc::signal(libc::SIGPIPE, libc::SIG_DFL) };
    }
    match run(cli) {
        Ok(code) => code,
        Err(err) => {
            eprintln!("error: {err:#}");
            ExitCode::FAILURE
        }
    }
}

fn run(cli: Cli) -> anyhow::Result<ExitCode> {
    let global = &cli.global;
    match cli.command {
        Command::Serve { demo, seed_from, notes } => {
            let opts =
                crate::app::ServeOptions { config: global.config()?, db: global.db_path()?, demo, seed_dir: seed_from };
            runtime()?.block_on(crate::app::serve(opts, notes))?;
        }
        Command::Broker { listen } => crate::broker::run(listen)?,
        Command::Simulate(opts) => simulate(&opts)?,
        Command::Bench(cmd) => bench(cmd)?,
        Command::Eval(args) => {
            let load = |path: &std::path::Path| -> anyhow::Result<crate::agent::config::LlmConfig> {
                anyhow::ensure!(path.exists(), "no config file {}", path.display());
                Ok(Config::load(path, &|_| None)?.llm)
            };
            let config = global.config()?;
            let chains = crate::eval::Chains {
                tested: config.llm,
                embeddings: config.embeddings,
                compare: args.compare.as_deref().map(load).transpose().context("--compare")?,
                judge: args.judge.as_deref().map(load).transpose().context("--judge")?,
            };
            if !crate::eval::main(&args, &chains)? {
                return Ok(ExitCode::FAILURE);
            }
        }
        Command::Mcp { allow_propose } => {
            let store = global.open()?;
            let allow = allow_propose || global.config()?.mcp.allow_propose;
            let docs = global.config()?.doc_index();
            runtime()?.block_on(crate::mcp::serve_stdio(store, docs, allow))?;
        }
        Command::Seed(args) => data::seed(global, args)?,
        Command::Check => return check(global),
        Command::Switchover => switchover(global)?,
        Command::Generate { what, out } => generate(what, &out)?,
        Command::Backup { to } => data::backup(global, &to)?,
        Command::Plant(cmd) => return data::plant(global, cmd),
        Command::Readings(cmd) => return data::readings(global, cmd),
        Command::Opcua(cmd) => return opcua_ops::run(global, cmd),
        Command::DeadLetters(cmd) => return data::dead_letters(global, cmd),
        Command::Docs(cmd) => return data::docs(global, cmd),
        Command::Tools(cmd) => return agent_ops::tools(global, cmd),
        Command::Ask { question, user, now } => agent_ops::ask(global, &question, &user, now.as_deref())?,
        Command::Triage { alarm_id, now } => agent_ops::triage(global, alarm_id, now.as_deref())?,
        Command::Handover { last } => agent_ops::handover(global, last)?,
        Command::Runs(RunsCommand::Show { run_id }) => print!("{}", agent::audit::render_run(&global.open()?, run_id)?),
        Command::User(cmd) => return people::user(global, cmd),
        Command::Token(cmd) => return people::token(global, cmd),
        Command::Alarms(cmd) => return alarm_ops::run(global, cmd),
        Command::Episodes(cmd) => return episode_ops::run(global, cmd),
    }
    Ok(ExitCode::SUCCESS)
}

fn check(global: &Global) -> anyhow::Result<ExitCode> {
    println!("twinops {}: checking {}", VERSION.as_str(), global.config.display());
    let config = match global.config() {
        Ok(c) => c,
        Err(e) => {
            println!(
                "FAIL  config        {e:#}\n{:19} -> fix the file (unknown keys and bad values are named above)",
                ""
            );
            return Ok(ExitCode::FAILURE);
        }
    };
    let db = global.db_path()?;
    let lines = runtime()?.block_on(crate::check::run(&config, &global.config, &db));
    for line in &lines {
        println!("{line}");
    }
    let (summary, passed) = crate::check::summary(&lines);
    println!("{summary}");
    Ok(if passed { ExitCode::SUCCESS } else { ExitCode::FAILURE })
}

fn switchover(global: &Global) -> anyhow::Result<()> {
    let config = global.config()?;
    let Some(cfg) = &config.cluster else {
        anyhow::bail!(
            "{} has no [cluster]: this node runs alone, there is nothing to switch over",
            global.config.display()
        )
    };
    // Long enough for the other's claim and its fence, with a lease to spare.
    let wait = cfg.rules().lease * 3;
    let done = runtime()?.block_on(crate::cluster::switchover(cfg, &config.mqtt, wait))?;
    println!(
        "node {} holds the lease (term {}), {:.1} s after node {} was asked to hand over; node {} stopped acting \
         at once, and node {} acts half a lease ({:.1} s) after its last renewal",
        done.to,
        done.term,
        done.after.as_secs_f64(),
        done.from,
        done.from,
        done.to,
        cfg.rules().fence().as_secs_f64()
    );
    Ok(())
}

#[derive(Clone, Copy, ValueEnum)]
enum Generate {
    /// twinops.1, the manual page (roff).
    Man,
    Bash,
    Zsh,
    Fish,
}

/// The manual page or completions, from the command line's own definition.
fn generate(what: Generate, out: &std::path::Path) -> anyhow::Result<()> {
    use clap::CommandFactory;
    use clap_complete::Shell;
    let mut cmd = Cli::command();
    std::fs::create_dir_all(out).with_context(|| format!("creating {}", out.display()))?;
    let (shell, file) = match what {
        Generate::Man => {
            let path = out.join("twinops.1");
            let mut buf = Vec::new();
            clap_mangen::Man::new(cmd).render(&mut buf)?;
            std::fs::write(&path, buf).with_context(|| format!("writing {}", path.display()))?;
            println!("{}", path.display());
            return Ok(());
        }
        Generate::Bash => (Shell::Bash, "twinops.bash"),
        Generate::Zsh => (Shell::Zsh, "_twinops"),
        Generate::Fish => (Shell::Fish, "twinops.fish"),
    };
    let path = out.join(file);
    let mut f = std::fs::File::create(&path).with_context(|| format!("writing {}", path.display()))?;
    clap_complete::generate(shell, &mut cmd, "twinops", &mut f);
    println!("{}", path.display());
    Ok(())
}

fn simulate(opts: &crate::sim::SimOptions) -> anyhow::Result<()> {
    let r = runtime()?.block_on(crate::sim::simulate(opts))?;
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
    Ok(())
}

fn bench(cmd: BenchCommand) -> anyhow::Result<()> {
    match cmd {
        BenchCommand::Tools(args) => bench::tools(&args),
        BenchCommand::Agent(args) => bench::agent(&args),
        BenchCommand::Ingest(args) => bench::ingest(&args),
        BenchCommand::Sparkplug(args) => bench::sparkplug(&args),
        BenchCommand::Opcua(args) => bench::opcua(&args),
        BenchCommand::Readings(args) => bench::readings(&args),
        BenchCommand::Alarms(args) => bench::alarms(&args),
        BenchCommand::Episodes(args) => bench::episodes(&args),
        BenchCommand::Failover(args) => bench::failover(&args),
        BenchCommand::Docs(args) => bench::docs(&args),
    }
}
