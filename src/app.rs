//! `twinops serve`: builds every component from the configuration, runs them as tokio
//! tasks, and owns graceful shutdown (one signal, a deadline, then a forced stop).

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use tokio::sync::{Notify, watch};

use crate::accounts::{self, directory::Directory};
use crate::agent::{self, Agent};
use crate::approvals::Approvals;
use crate::cluster;
use crate::config::Config;
use crate::console::{NoteConsole, NotesOutput};
use crate::domain::{Role, Timestamp};
use crate::ingest;
use crate::opcua;
use crate::seed::{self, SeedOptions};
use crate::sim::{self, SimOptions};
use crate::store::Store;
use crate::triage::Triage;

/// How long shutdown waits for in-flight work before it stops anyway.
const SHUTDOWN_DEADLINE: Duration = Duration::from_secs(20);

pub struct ServeOptions {
    pub config: Config,
    pub db: PathBuf,
    /// Seed an empty database and run the simulator against the broker.
    pub demo: bool,
    /// Folder holding plant.toml and docs/ for --demo.
    pub seed_dir: PathBuf,
}

/// A running daemon. Dropping it does not stop it; call [`Daemon::shutdown`].
pub struct Daemon {
    stop: watch::Sender<bool>,
    tasks: Vec<tokio::task::JoinHandle<()>>,
    /// The demo simulator: stopped outright at shutdown, nothing to finish.
    simulator: Option<tokio::task::JoinHandle<()>>,
    scheduler: tokio_cron_scheduler::JobScheduler,
    pub store: Store,
    pub triage: Arc<Triage>,
    pub mqtt_url: String,
    /// Where the HMI listens, if it is on.
    pub web_addr: Option<SocketAddr>,
    /// Whether ingest is connected and subscribed.
    pub broker_up: watch::Receiver<bool>,
    /// Whether the OPC UA session is up and subscribed, when `[opcua]` is on.
    pub opcua_up: Option<watch::Receiver<bool>>,
    /// The demo supervisor's name and password, made by `--demo` on a database with no
    /// users; shown once.
    pub demo_login: Option<(String, String)>,
}

/// The agent on the configured chain, and the rules-only agent triage falls back to,
/// sharing one documentation index; their proposals go to `approvals`.
fn agents(store: &Store, config: &Config, approvals: &Approvals) -> (Arc<Agent>, Arc<Agent>) {
    let (llm, docs) = (&config.llm, config.doc_index());
    let agent = Agent::new(store.clone(), agent::models_from_config(llm), llm.limits.clone());
    let rules = Agent::new(store.clone(), Vec::new(), llm.limits.clone());
    (
        Arc::new(agent.with_docs(docs.clone()).with_approvals(approvals.clone())),
        Arc::new(rules.with_docs(docs).with_approvals(approvals.clone())),
    )
}

/// Seeds the demo plant into an empty twin.
fn seed_demo(store: &Store, seed_dir: &std::path::Path) -> anyhow::Result<()> {
    let seeded: i64 = store.read()?.query_row("SELECT count(*) FROM assets", [], |r| r.get(0))?;
    if seeded == 0 {
        let s = SeedOptions { dir: seed_dir.to_path_buf(), scale: 1, end: Timestamp::now(), days: 7 };
        let r = seed::seed(store, &s)?;
        tracing::info!(stage = "app", assets = r.assets, readings = r.readings, "seeded the demo plant");
    }
    Ok(())
}

/// The MQTT settings to run on: `mqtt.url`'s broker, or the embedded one, started here.
/// Each node of a pair keeps its own sessions on the broker (`client_id-node`).
fn broker(config: &Config) -> anyhow::Result<crate::config::MqttConfig> {
    let mut mqtt = config.mqtt.clone();
    if let Some(c) = &config.cluster {
        mqtt.client_id = format!("{}-{}", mqtt.client_id, c.node);
    }
    if mqtt.url.is_empty() {
        let listen: SocketAddr = mqtt.embedded_listen.parse().context("mqtt.embedded_listen")?;
        crate::broker::start(listen)?;
        if let Some(batch_ms @ 1..) = mqtt.batch_ms {
            tracing::warn!(
                stage = "app",
                batch_ms,
                "mqtt.batch_ms is above 0 with the embedded broker, which sends at most 100 messages before our \
                 acks: ingest waits with that window full and runs several times slower; remove mqtt.batch_ms"
            );
        }
        mqtt.use_embedded(listen);
        tracing::info!(stage = "app", %listen, "embedded MQTT broker started");
    }
    Ok(mqtt)
}

/// The tasks that take notes and decisions out: MQTT, the webhook if one is set, and
/// the outbox that retries both.
/// Of a redundant pair, also the task that keeps the other node's notes.
fn notifiers(
    store: &Store,
    mqtt: &crate::config::MqttConfig,
    config: &crate::config::Config,
    (triage, approvals): (&Arc<Triage>, Approvals),
    acting: &watch::Receiver<bool>,
    stop: &watch::Receiver<bool>,
) -> Vec<tokio::task::JoinHandle<()>> {
    let node = config.cluster.as_ref().map(|c| c.node.clone());
    let notes = crate::notify::mqtt_loop(store.clone(), mqtt.clone(), node.clone(), triage.subscribe(), stop.clone());
    let mut tasks = vec![tokio::spawn(notes)];
    if let Some(url) = config.notify.webhook_url.clone() {
        tasks.push(tokio::spawn(crate::notify::webhook_loop(store.clone(), url, triage.subscribe(), stop.clone())));
    }
    let webhook = config.notify.webhook_url.clone();
    let outbox =
        crate::notify::outbox_loop(store.clone(), approvals, mqtt.clone(), webhook, acting.clone(), stop.clone());
    tasks.push(tokio::spawn(outbox));
    if let Some(me) = node {
        let peer = crate::notify::peer_notes_loop(mqtt.clone(), me, Arc::clone(triage), stop.clone());
        tasks.push(tokio::spawn(peer));
    }
    tasks
}

/// Where this node stands: of a redundant pair, as its lease says (the lease's task
/// joins `tasks`); alone, always acting. Also the same as a plain flag, for the parts
/// that only ask whether to act.
fn standing(
    (store, config): (&Store, &Config),
    mqtt: &crate::config::MqttConfig,
    tasks: &mut Vec<tokio::task::JoinHandle<()>>,
    stop: &watch::Receiver<bool>,
) -> anyhow::Result<(Option<cluster::PairView>, watch::Receiver<bool>)> {
    let Some(cfg) = config.cluster.clone() else { return Ok((None, watch::channel(true).1)) };
    let (progress_tx, progress) = watch::channel(crate::decisions::progress(store)?);
    tasks.push(tokio::spawn(crate::decisions::progress_loop(store.clone(), progress_tx, stop.clone())));
    let cluster::Running { standing, peer, task } = cluster::start(cfg, mqtt, progress.clone(), stop.clone())?;
    tasks.push(task);
    let view = cluster::PairView { standing: standing.clone(), progress, peer };
    // The lease's task gone (stopping), the node no longer acts.
    let (tx, acting) = watch::channel(standing.borrow().acting);
    let mut watched = standing.clone();
    tasks.push(tokio::spawn(async move {
        while watched.changed().await.is_ok() {
            let now = watched.borrow_and_update().acting;
            tx.send_if_modified(|was| std::mem::replace(was, now) != now);
        }
        tx.send_replace(false);
    }));
    Ok((Some(view), acting))
}

/// The plant simulator against the daemon's broker, for `serve --demo`.
fn demo_simulator(opts: &ServeOptions, broker: &str) -> tokio::task::JoinHandle<()> {
    let sparkplug = (opts.config.sparkplug.enabled)
        .then(|| opts.config.sparkplug.groups.first().cloned().unwrap_or_else(|| "demo".into()));
    let sim = SimOptions::demo(broker, &opts.seed_dir, sparkplug);
    tokio::spawn(async move {
        tokio::time::sleep(Duration::from_secs(1)).await;
        if let Err(e) = sim::simulate(&sim).await {
            tracing::warn!(stage = "sim", error = %e, "demo simulator stopped");
        }
    })
}

/// The directory, when `[directory]` is set. A local user whose name the directory
/// also has is a configuration error, and stops the start; a directory that does not
/// answer does not (local logins work without it), and is logged.
async fn directory(store: &Store, config: &Config) -> anyhow::Result<Option<Directory>> {
    let Some(cfg) = config.directory.clone() else { return Ok(None) };
    let dir = Directory::new(cfg, &|k| std::env::var(k).ok())?;
    match accounts::directory_conflicts(store, &dir).await {
        Ok(both) if !both.is_empty() => anyhow::bail!(
            "these local users also exist in the directory ({}): {}; which of the two would log in? Rename or \
             remove the local ones (`twinops user disable NAME` does not do: the name stays), or narrow \
             directory.user_filter",
            dir.url(),
            both.join(", ")
        ),
        Ok(_) => tracing::info!(stage = "directory", url = dir.url(), "directory login on"),
        Err(e) => {
            tracing::warn!(stage = "directory", error = %e, "the directory does not answer at start; local logins work, directory ones will once it does")
        }
    }
    Ok(Some(dir))
}

/// Every `recheck_secs`, the roles of directory users with live sessions or tokens are
/// read again: a leaver loses access within that interval (of a pair, on both nodes).
fn recheck_directory(
    store: &Store,
    dir: Directory,
    log: Option<&Arc<cluster::log::DecisionLog>>,
    stop: &watch::Receiver<bool>,
) -> tokio::task::JoinHandle<()> {
    let (store, log, mut stop) = (store.clone(), log.cloned(), stop.clone());
    tokio::spawn(async move {
        let mut every = tokio::time::interval(dir.recheck());
        every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                _ = every.tick() => {}
                _ = stop.changed() => return,
            }
            match crate::decisions::recheck_directory(&store, &dir, log.as_deref()).await {
                Ok((checked, ended)) if ended > 0 => {
                    tracing::warn!(stage = "directory", checked, ended, "directory users lost access (audited)")
                }
                Ok(_) => {}
                Err(e) => {
                    tracing::warn!(stage = "directory", error = %e, "directory users' roles could not be read again")
                }
            }
        }
    })
}

/// The OPC UA link, when `[opcua]` is on; its certificates beside the database.
fn opcua_link(
    store: &Store,
    opts: &ServeOptions,
    policy: &ingest::IngestPolicy,
    wake: &Arc<Notify>,
    (acting, log): (&watch::Receiver<bool>, Option<&Arc<cluster::log::DecisionLog>>),
    stop: &watch::Receiver<bool>,
) -> Option<opcua::link::Running> {
    let cfg = opts.config.opcua.clone();
    cfg.enabled.then(|| {
        let data_dir = crate::store::data_dir_of(&opts.db);
        let (writer, wake) = (store.writer().clone(), Arc::clone(wake));
        let role = opcua::link::Role { acting: acting.clone(), log: log.cloned() };
        opcua::link::start(writer, cfg, data_dir, policy.clone(), wake, role, stop.clone())
    })
}

/// Of a redundant pair, its decision log, and the task that applies what comes
/// through it to this twin (both join `tasks`).
fn decision_log(
    store: &Store,
    config: &Config,
    mqtt: &crate::config::MqttConfig,
    tasks: &mut Vec<tokio::task::JoinHandle<()>>,
    stop: &watch::Receiver<bool>,
) -> anyhow::Result<Option<Arc<cluster::log::DecisionLog>>> {
    let Some(cfg) = &config.cluster else { return Ok(None) };
    let (log, decisions, task) = cluster::log::DecisionLog::start(cfg, mqtt, stop.clone())?;
    tasks.push(task);
    let queue = config.ingest_policy().queue;
    tasks.push(tokio::spawn(crate::decisions::run(store.clone(), queue, Arc::clone(&log), decisions)));
    Ok(Some(log))
}

/// How ingest takes messages. Of a pair that is Sparkplug's primary host, the STATE
/// follows the acting node (`cluster::primary`, its task joining `tasks`) instead of
/// riding on ingest's connection.
fn primary_host(
    config: &Config,
    (store, mqtt): (&Store, &crate::config::MqttConfig),
    acting: &watch::Receiver<bool>,
    (tasks, stop): (&mut Vec<tokio::task::JoinHandle<()>>, &watch::Receiver<bool>),
) -> ingest::IngestPolicy {
    let mut policy = config.ingest_policy();
    if let Some(sp) = policy.sparkplug.as_mut().filter(|s| s.primary_host && config.cluster.is_some()) {
        let shared = Arc::new((**sp).clone());
        Arc::make_mut(sp).primary_host = false;
        let run = cluster::primary::run(
            shared,
            (mqtt.clone(), mqtt.client_id.clone()),
            store.clone(),
            acting.clone(),
            stop.clone(),
        );
        tasks.push(tokio::spawn(run));
    }
    policy
}

/// Where proposals go: the twin, or, of a pair, its decision log.
fn approvals(store: &Store, log: Option<&Arc<cluster::log::DecisionLog>>) -> Approvals {
    match log {
        Some(log) => Approvals::of_pair(store.writer().clone(), Arc::clone(log)),
        None => Approvals::new(store.writer().clone()),
    }
}

/// Triage on `agent` (`rules` its floor), acting while `acting` says so; the jobs the
/// last stop interrupted are queued again.
async fn triage(
    config: &Config,
    agent: &Arc<Agent>,
    rules: Arc<Agent>,
    acting: &watch::Receiver<bool>,
) -> anyhow::Result<Arc<Triage>> {
    let mut triage = Triage::new(Arc::clone(agent), rules, config.triage.llm_runs_per_minute)
        .with_episode_revisions_every(config.triage.episode_revise_secs)
        .with_acting(acting.clone());
    if config.cluster.is_some() {
        triage = triage.paired();
    }
    let requeued = triage.requeue_interrupted().await?;
    if requeued > 0 {
        tracing::warn!(stage = "app", jobs = requeued, "triage jobs interrupted by the last stop are queued again");
    }
    Ok(Arc::new(triage))
}

/// The timed jobs; for `--demo`, the housekeeping indexes the demo's documents.
async fn scheduler(
    opts: &ServeOptions,
    store: &Store,
    agent: Arc<Agent>,
    acting: watch::Receiver<bool>,
) -> anyhow::Result<tokio_cron_scheduler::JobScheduler> {
    let mut schedule = opts.config.schedule.clone();
    if opts.demo && schedule.docs_dir.is_none() {
        schedule.docs_dir = Some(opts.seed_dir.join("docs"));
    }
    crate::schedule::start(&schedule, store.clone(), agent, acting).await
}

/// The demo's login, made on first start: a supervisor with a random password.
fn demo_supervisor(store: &Store) -> anyhow::Result<Option<(String, String)>> {
    if crate::accounts::user_count(store)? > 0 {
        return Ok(None);
    }
    let password = crate::accounts::new_secret()[..20].to_string();
    crate::accounts::add_user(store, "supervisor", Role::Supervisor, &password, "twinops serve --demo")?;
    Ok(Some(("supervisor".to_string(), password)))
}

/// Of a pair, before the twin is opened: a node that was away longer than the broker
/// kept its sessions copies the other node's twin first ([`cluster::copy`]).
async fn catch_up(config: &Config, db: &std::path::Path) -> anyhow::Result<()> {
    use cluster::copy::CaughtUp;
    let Some(cfg) = &config.cluster else { return Ok(()) };
    // Read only when the session was lost: every other start would open the twin twice.
    let ours = || -> anyhow::Result<cluster::Progress> {
        if !db.exists() {
            return Ok(cluster::Progress::default());
        }
        Ok(crate::decisions::progress(&Store::open(db).with_context(|| format!("opening {}", db.display()))?)?)
    };
    let mqtt = broker(config)?;
    let mut ingest = mqtt.topics.clone();
    ingest.extend(config.ingest_policy().sparkplug.map(|s| s.filters()).unwrap_or_default());
    let sessions = [
        (mqtt.client_id.clone(), ingest),
        (format!("{}-peer-notes", mqtt.client_id), vec![format!("{}/#", mqtt.notes_topic)]),
    ];
    let token = cfg.peer_token(&|k| std::env::var(k).ok());
    match cluster::copy::catch_up((cfg, &mqtt), db, ours, &sessions, token).await {
        Ok(c @ (CaughtUp::SessionKept | CaughtUp::NothingToCopy)) => {
            tracing::info!(stage = "cluster", caught_up = ?c, "this node's sessions on the broker")
        }
        Ok(CaughtUp::Copied { bytes, kept }) => tracing::warn!(
            stage = "cluster", bytes, kept = ?kept,
            "this node was away longer than the broker kept its sessions: it starts on a copy of the other node's twin, its own kept aside"
        ),
        Ok(CaughtUp::NoToken { peer }) => tracing::warn!(
            stage = "cluster", %peer,
            "this node was away longer than the broker kept its sessions and node {peer} is ahead, but cluster.peer_token_file is not set, so it cannot copy that twin: it starts on its own, without what it missed. Set it to a file holding an admin's API token (`twinops token create --user ADMIN`)"
        ),
        // The broker away: nothing acts without it, and the sessions are looked at again next start.
        Err(e) => {
            tracing::warn!(stage = "cluster", error = %format!("{e:#}"), "could not see whether this node missed anything while it was away; starting on its own twin")
        }
    }
    Ok(())
}

impl Daemon {
    /// Whether the twin holds a plant (an asset in service).
    pub fn has_plant(&self) -> anyhow::Result<bool> {
        let any: i64 =
            self.store.read()?.query_row("SELECT count(*) FROM assets WHERE retired_at IS NULL", [], |r| r.get(0))?;
        Ok(any > 0)
    }

    /// Starts the broker (if embedded), ingest, triage workers and the note publisher.
    pub async fn start(opts: ServeOptions) -> anyhow::Result<Daemon> {
        catch_up(&opts.config, &opts.db).await?;
        let store = Store::open(&opts.db).with_context(|| format!("opening {}", opts.db.display()))?;
        Daemon::start_on(store, opts).await
    }

    /// [`Daemon::start`] on a store that is already open (`opts.db` is not used).
    pub async fn start_on(store: Store, opts: ServeOptions) -> anyhow::Result<Daemon> {
        if opts.demo {
            seed_demo(&store, &opts.seed_dir)?;
        }
        // Before anything starts: a configuration it refuses leaves nothing running.
        let directory = directory(&store, &opts.config).await?;
        let mqtt = broker(&opts.config)?;
        let (stop, stop_rx) = watch::channel(false);
        let mut tasks = Vec::new();
        let (view, acting) = standing((&store, &opts.config), &mqtt, &mut tasks, &stop_rx)?;
        let log = decision_log(&store, &opts.config, &mqtt, &mut tasks, &stop_rx)?;

        let approvals = approvals(&store, log.as_ref());
        let (agent, rules) = agents(&store, &opts.config, &approvals);
        let triage = triage(&opts.config, &agent, rules, &acting).await?;

        let wake = Arc::new(Notify::new());
        let policy = primary_host(&opts.config, (&store, &mqtt), &acting, (&mut tasks, &stop_rx));
        let ingest = ingest::mqtt::start(
            store.writer().clone(),
            mqtt.clone(),
            policy.clone(),
            Arc::clone(&wake),
            stop_rx.clone(),
        )?;
        let broker_up = ingest.broker_up.clone();
        tasks.push(ingest.task);
        let opcua = opcua_link(&store, &opts, &policy, &wake, (&acting, log.as_ref()), &stop_rx).map(|link| {
            tasks.push(link.task);
            link.up
        });
        tasks.push(tokio::spawn(Arc::clone(&triage).run_workers(opts.config.triage.workers, wake, stop_rx.clone())));
        tasks.extend(notifiers(&store, &mqtt, &opts.config, (&triage, approvals.clone()), &acting, &stop_rx));
        let demo_login = if opts.demo { demo_supervisor(&store)? } else { None };
        tasks.extend(directory.clone().map(|d| recheck_directory(&store, d, log.as_ref(), &stop_rx)));
        let mut web_addr = None;
        if !opts.config.web.listen.is_empty() {
            let listener = tokio::net::TcpListener::bind(&opts.config.web.listen).await.with_context(|| {
                format!(
                    "web.listen {}: cannot listen (set web.listen, or empty to turn the HMI off)",
                    opts.config.web.listen
                )
            })?;
            web_addr = Some(listener.local_addr()?);
            let state = crate::web::WebState {
                store: store.clone(),
                agent: Arc::clone(&agent),
                docs: agent.docs().clone(),
                cfg: opts.config.web.clone(),
                broker_up,
                opcua_up: opcua.clone(),
                mcp: opts.config.mcp.clone(),
                queue: policy.queue,
                directory: directory.clone(),
                cluster: opts
                    .config
                    .cluster
                    .clone()
                    .zip(log.clone())
                    .zip(view.clone())
                    .map(|((cfg, log), view)| crate::web::Pair { cfg, view, log, seen: Default::default() }),
            };
            tasks.push(tokio::spawn(crate::web::serve(listener, Arc::new(state), stop_rx.clone())));
        }
        let scheduler = scheduler(&opts, &store, agent, acting).await?;
        let simulator = opts.demo.then(|| demo_simulator(&opts, &mqtt.url));
        Ok(Daemon {
            stop,
            tasks,
            simulator,
            scheduler,
            store,
            triage,
            mqtt_url: mqtt.url,
            web_addr,
            broker_up: ingest.broker_up,
            opcua_up: opcua,
            demo_login,
        })
    }

    /// Stops taking messages, commits and acks what is in flight, lets running triage
    /// jobs finish, within the deadline; a job cut off is requeued at the next start.
    pub async fn shutdown(mut self) {
        if let Some(sim) = &self.simulator {
            sim.abort();
        }
        let _ = self.scheduler.shutdown().await;
        let _ = self.stop.send(true);
        let all = async {
            for t in self.tasks {
                let _ = t.await;
            }
        };
        if tokio::time::timeout(SHUTDOWN_DEADLINE, all).await.is_err() {
            tracing::warn!(
                stage = "app",
                "shutdown deadline passed; stopping with work in flight (it is requeued at start)"
            );
        }
    }
}

/// Runs the daemon until SIGINT or SIGTERM; `notes` says how the console shows the
/// triage notes.
pub async fn serve(opts: ServeOptions, notes: NotesOutput) -> anyhow::Result<()> {
    let mut console = NoteConsole::new(notes);
    let opcua = opts.config.opcua.clone();
    let daemon = Daemon::start(opts).await?;
    eprintln!(
        "twinops is serving: MQTT {}, database {}. Ctrl-C stops it.",
        daemon.mqtt_url,
        daemon.store.path().display()
    );
    if let Some(addr) = daemon.web_addr {
        eprintln!("HMI: http://{addr}/");
    }
    if opcua.enabled {
        let registers = if opcua.auto_register { ", adding what the twin lacks" } else { "" };
        eprintln!("OPC UA: {} ({} {}){registers}", opcua.endpoint, opcua.security_policy, opcua.security_mode);
    }
    // With OPC UA's auto_register, the server's address space is the plant.
    let registers = opcua.enabled && opcua.auto_register;
    if !registers && !daemon.has_plant()? {
        let hint = "the twin has no plant yet: events are kept as dead letters until it is loaded. Load it with \
                    `twinops plant import site.toml assets.csv tags.csv`, then bring them in with \
                    `twinops dead-letters replay --reason unknown_sensor` (and unknown_asset); or try `twinops serve --demo`";
        tracing::warn!(stage = "app", "{hint}");
        eprintln!("{hint}");
    }
    if let Some((name, password)) = &daemon.demo_login {
        eprintln!("demo supervisor login (shown once): {name} / {password}");
    } else if crate::accounts::user_count(&daemon.store)? == 0 {
        eprintln!("no HMI users yet: create one with `twinops user add NAME --role admin`");
    }
    crate::sdnotify::notify("READY=1");
    let watchdog = crate::sdnotify::watchdog_interval().map(|every| {
        tokio::spawn(async move {
            loop {
                crate::sdnotify::notify("WATCHDOG=1");
                tokio::time::sleep(every).await;
            }
        })
    });
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
    let mut notes = daemon.triage.subscribe();
    let mut summaries = tokio::time::interval(NoteConsole::EVERY);
    // Handovers are written by the schedule, the HMI or the CLI: the table says which is new.
    let latest_handover = || daemon.store.read().ok().and_then(|db| crate::handover::recent(&db, 1).ok()?.pop());
    let mut handover_seen = latest_handover().map_or(0, |h| h.note_id);
    let mut handovers = tokio::time::interval(Duration::from_secs(5));
    loop {
        tokio::select! {
            _ = tokio::signal::ctrl_c() => break,
            _ = term.recv() => break,
            n = notes.recv() => if let Some(line) = n.ok().and_then(|n| console.note(&n)) {
                eprintln!("{line}");
            },
            _ = summaries.tick() => if let Some(line) = console.tick() {
                eprintln!("{line}");
            },
            _ = handovers.tick() => if let Some(h) = latest_handover().filter(|h| h.note_id > handover_seen) {
                handover_seen = h.note_id;
                eprintln!("shift handover, note {} ({}):\n{}", h.note_id, h.trigger.as_deref().unwrap_or("-"), h.text);
            },
        }
    }
    eprintln!("stopping: committing and acknowledging what is in flight...");
    crate::sdnotify::notify("STOPPING=1");
    if let Some(w) = watchdog {
        w.abort();
    }
    daemon.shutdown().await;
    Ok(())
}
