//! `bench failover`: a redundant pair of `twinops serve` processes under an alarm flood,
//! the acting one SIGKILLed again and again (and restarted), with the figures the pair
//! is held to: failover time, occurrences without a note, notes published twice,
//! samples where both nodes said they act. The pieces (a node as a process, the notes
//! heard, the tally) are the pair tests' too (`tests/cluster/`).

use std::collections::{BTreeSet, HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::Context;
use serde_json::Value;

use super::Percentiles;
use crate::ingest::mqtt::MqttConfig;

#[derive(clap::Args, Debug)]
pub struct FailoverBenchArgs {
    /// The broker both nodes share (Mosquitto, say); by default one embedded in the
    /// benchmark's process, which outlives the nodes.
    #[arg(long)]
    broker: Option<String>,
    /// SIGKILLs of the acting node.
    #[arg(long, default_value_t = 20)]
    kills: usize,
    /// Alarm occurrences published per second throughout.
    #[arg(long, default_value_t = 10)]
    rate: u32,
    /// The pair's lease (cluster.lease_ms) and renewal period (cluster.renew_ms).
    #[arg(long, default_value_t = 3000)]
    lease_ms: u64,
    #[arg(long, default_value_t = 400)]
    renew_ms: u64,
    /// Seconds of steady flood, before the kills, over which each node's CPU time per
    /// ingested message is measured (the pair's nodes beside the node alone). Shorter
    /// windows are noisy: three nodes share the machine's cores with the broker.
    #[arg(long, default_value_t = 60)]
    steady_secs: u64,
    /// The folder holding the demo plant (plant.toml).
    #[arg(long, default_value = "seed")]
    from: PathBuf,
}

/// A point an alarm can be raised on: (asset, sensor).
type Point = (String, String);

/// One node of a pair: `twinops serve` as a process of its own (so that it can be
/// SIGKILLed), on its own database, its log kept across restarts.
pub struct Node {
    pub name: String,
    pub web: u16,
    exe: PathBuf,
    db: PathBuf,
    http: crate::agent::http::Http,
    config: PathBuf,
    /// Set in its environment at every start (a clock put off by libfaketime, say).
    env: Vec<(String, String)>,
    child: Option<std::process::Child>,
}

/// What a pair's nodes share: the broker, the run's topics, the lease.
pub struct PairSpec {
    pub broker: String,
    /// The pair's name; also the prefix of its SCADA and notes topics.
    pub run: String,
    pub lease_ms: u64,
    pub renew_ms: u64,
    /// What every node's configuration adds (an `[opcua]` section, say).
    pub settings: String,
}

impl PairSpec {
    /// Alarm events for this pair go here.
    pub fn alarms_topic(&self) -> String {
        format!("{}/scada/alarms", self.run)
    }
}

impl Node {
    /// Writes the node's configuration beside `db` (a twin with the plant) and starts it.
    /// With `peer_web`, one of the pair; without, a node alone on the same topics (its
    /// notes on `{run}/alone/notes`), the baseline.
    pub fn start(
        exe: &Path,
        spec: &PairSpec,
        name: &str,
        db: &Path,
        web: u16,
        peer_web: Option<u16>,
    ) -> anyhow::Result<Node> {
        let (url, run, lease, renew) = (&spec.broker, &spec.run, spec.lease_ms, spec.renew_ms);
        let (client, notes, cluster) = match peer_web {
            Some(peer) => (
                format!("twinops-{run}"),
                format!("{run}/notes"),
                format!(
                    "[cluster]\nname = \"{run}\"\nnode = \"{name}\"\npeer_hmi = \"http://127.0.0.1:{peer}\"\n\
                     lease_ms = {lease}\nrenew_ms = {renew}\n"
                ),
            ),
            None => (format!("twinops-{run}-{name}"), format!("{run}/alone/notes"), String::new()),
        };
        let toml = format!(
            "[mqtt]\nurl = \"{url}\"\nclient_id = \"{client}\"\ntopics = [\"{run}/scada/#\"]\n\
             notes_topic = \"{notes}\"\n\n[web]\nlisten = \"127.0.0.1:{web}\"\n\n{cluster}\n{}",
            spec.settings
        );
        let config = db.with_extension("toml");
        std::fs::write(&config, toml).with_context(|| format!("writing {}", config.display()))?;
        let http = crate::agent::http::Http::new();
        let (exe, db, env) = (exe.into(), db.into(), Vec::new());
        let mut node = Node { name: name.into(), web, exe, db, http, config, env, child: None };
        node.restart()?;
        Ok(node)
    }

    /// From its next start on, runs with `key=value` in its environment.
    pub fn set_env(&mut self, key: &str, value: &str) {
        self.env.push((key.into(), value.into()));
    }

    pub fn restart(&mut self) -> anyhow::Result<()> {
        let log = std::fs::OpenOptions::new().create(true).append(true).open(self.log())?;
        let child = std::process::Command::new(&self.exe)
            .arg("--db")
            .arg(&self.db)
            .arg("--config")
            .arg(&self.config)
            .arg("serve")
            .env_remove("TWINOPS_LLM_KIND")
            .env("TWINOPS_LOG", std::env::var("TWINOPS_BENCH_LOG").unwrap_or_else(|_| "warn".into()))
            .envs(self.env.iter().map(|(k, v)| (k, v)))
            .stderr(log)
            .stdout(std::process::Stdio::null())
            .spawn()
            .with_context(|| format!("starting {}", self.exe.display()))?;
        self.child = Some(child);
        Ok(())
    }

    /// SIGTERM, as a service manager stops it for a patch or an upgrade: it finishes
    /// what it is doing and says it is leaving. SIGKILL after 20 s.
    pub fn stop(&mut self) {
        self.terminate();
        let Some(mut c) = self.child.take() else { return };
        let deadline = std::time::Instant::now() + Duration::from_secs(20);
        while matches!(c.try_wait(), Ok(None)) && std::time::Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(50));
        }
        let _ = c.kill();
        let _ = c.wait();
    }

    /// SIGTERM, without waiting for it to finish ([`Node::stop`] waits).
    pub fn terminate(&self) {
        if let Some(c) = &self.child {
            let _ = std::process::Command::new("kill").args(["-TERM", &c.id().to_string()]).status();
        }
    }

    /// Whether its process still runs (a node stopping may still finish its work).
    pub fn running(&mut self) -> bool {
        self.child.as_mut().is_some_and(|c| matches!(c.try_wait(), Ok(None)))
    }

    /// SIGKILL: gone without a word, as a host that dies.
    pub fn kill(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    pub fn log(&self) -> PathBuf {
        self.db.with_extension("log")
    }

    pub fn db(&self) -> &Path {
        &self.db
    }

    /// Its configuration file (`[cluster]` and all), for a command run beside it.
    pub fn config(&self) -> &Path {
        &self.config
    }

    /// The CPU time its process has used so far (user and system), if it runs.
    pub fn cpu(&self) -> Option<Duration> {
        cpu_time(self.child.as_ref()?.id())
    }

    /// What its `/readyz` says of the pair, if it answers.
    pub async fn pair(&self) -> Option<Value> {
        self.child.as_ref()?;
        let url = format!("http://127.0.0.1:{}/readyz", self.web);
        let r = self.http.client().get(url).timeout(Duration::from_secs(1)).send().await.ok()?;
        Some(r.json::<Value>().await.ok()?["cluster"].clone())
    }

    pub async fn acting(&self) -> bool {
        self.pair().await.is_some_and(|p| p["acting"] == true)
    }

    /// Of `events`, those without a triage note in this node's twin.
    pub fn without_note(&self, events: &[String]) -> anyhow::Result<Vec<String>> {
        let db = rusqlite::Connection::open_with_flags(&self.db, rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY)?;
        let mut stmt = db.prepare(
            "SELECT count(*) FROM alarms a JOIN notes n ON n.alarm_id = a.id AND n.kind = 'triage' WHERE a.event_id = ?1",
        )?;
        let mut missing = Vec::new();
        for e in events {
            if stmt.query_row([e.as_str()], |r| r.get::<_, i64>(0))? == 0 {
                missing.push(e.clone());
            }
        }
        Ok(missing)
    }
}

impl Drop for Node {
    fn drop(&mut self) {
        self.kill();
    }
}

/// Waits until exactly one of `nodes` acts and returns its index; two acting at once
/// is an error.
pub async fn acting_one(nodes: &[Node], limit: Duration) -> anyhow::Result<usize> {
    let start = Instant::now();
    loop {
        let mut acting = Vec::new();
        for (i, n) in nodes.iter().enumerate() {
            if n.acting().await {
                acting.push(i);
            }
        }
        anyhow::ensure!(acting.len() <= 1, "both nodes act");
        if let [i] = acting[..] {
            return Ok(i);
        }
        anyhow::ensure!(start.elapsed() < limit, "no node acts within {limit:?}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Every message on `{run}/notes/#`, as JSON, heard on a connection of its own.
pub fn hear_notes(broker: &str, run: &str) -> anyhow::Result<Arc<Mutex<Vec<Value>>>> {
    let cfg = MqttConfig { url: broker.into(), ..Default::default() };
    let mut opts = crate::ingest::mqtt::options(&cfg, &format!("twinops-{run}-notes-heard"))?;
    opts.set_clean_session(true);
    let (client, mut events) = rumqttc::AsyncClient::new(opts, 100);
    let heard = Arc::new(Mutex::new(Vec::new()));
    let (h, topic) = (Arc::clone(&heard), format!("{run}/notes/#"));
    tokio::spawn(async move {
        loop {
            match events.poll().await {
                Ok(rumqttc::Event::Incoming(rumqttc::Incoming::ConnAck(_))) => {
                    let _ = client.try_subscribe(&topic, rumqttc::QoS::AtLeastOnce);
                }
                Ok(rumqttc::Event::Incoming(rumqttc::Incoming::Publish(p))) => {
                    if let Ok(v) = serde_json::from_slice(&p.payload) {
                        h.lock().expect("notes heard").push(v);
                    }
                }
                Ok(_) => {}
                Err(_) => tokio::time::sleep(Duration::from_millis(200)).await,
            }
        }
    });
    Ok(heard)
}

/// What the notes heard say of `events`: notes published twice (the same lead and
/// revision again) and occurrences in the notes of two different leads.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Tally {
    pub notes: usize,
    pub published_twice: Vec<String>,
    pub in_two_notes: Vec<String>,
}

pub fn tally(notes: &[Value], events: &[String]) -> Tally {
    let mut leads: HashMap<&str, BTreeSet<&str>> = HashMap::new();
    let mut sent = HashSet::new();
    let mut t = Tally { notes: notes.len(), ..Tally::default() };
    for n in notes {
        let lead = n["event_id"].as_str().unwrap_or("");
        if !sent.insert((lead, n["revision"].as_i64())) {
            t.published_twice.push(format!("{lead} revision {}", n["revision"]));
        }
        let covers = n["covers_event_ids"].as_array().into_iter().flatten().filter_map(Value::as_str);
        for e in std::iter::once(lead).chain(covers) {
            leads.entry(e).or_default().insert(lead);
        }
    }
    t.in_two_notes = events.iter().filter(|e| leads.get(e.as_str()).is_some_and(|l| l.len() > 1)).cloned().collect();
    t
}

pub fn failover(args: &FailoverBenchArgs) -> anyhow::Result<()> {
    anyhow::ensure!(args.kills > 0 && args.rate > 0, "--kills and --rate must be at least 1");
    let rt = tokio::runtime::Builder::new_multi_thread().enable_all().build()?;
    let dir = std::env::temp_dir().join(format!("twinops-bench-failover-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    let result = rt.block_on(run(args, &dir));
    match &result {
        Ok(()) if std::env::var_os("TWINOPS_BENCH_KEEP").is_none() => drop(std::fs::remove_dir_all(&dir)),
        _ => eprintln!("the nodes' databases and logs are kept in {}", dir.display()),
    }
    result
}

async fn run(args: &FailoverBenchArgs, dir: &Path) -> anyhow::Result<()> {
    let broker = match &args.broker {
        Some(url) => url.clone(),
        None => {
            let listen: std::net::SocketAddr = format!("127.0.0.1:{}", free_port()?).parse()?;
            crate::broker::start(listen)?;
            format!("mqtt://{listen}")
        }
    };
    let spec = PairSpec {
        broker: broker.clone(),
        run: format!("failover{}", std::process::id()),
        lease_ms: args.lease_ms,
        renew_ms: args.renew_ms,
        settings: String::new(),
    };
    let Started { mut nodes, alone, points, token } = pair(args, &spec, dir)?;
    let notes = hear_notes(&broker, &spec.run)?;
    acting_one(&nodes, Duration::from_secs(30)).await?;

    let published = Arc::new(Mutex::new(Vec::new()));
    let stop = Arc::new(AtomicBool::new(false));
    let what = (spec.broker.clone(), spec.alarms_topic(), args.rate);
    let flood = tokio::spawn(flood(what, points, Arc::clone(&published), Arc::clone(&stop)));
    // Before the watch on both nodes starts: its 50 requests a second to each node of
    // the pair, and none to the node alone, would be counted as the pair's cost.
    let cpu = steady(&nodes, &alone, &published, Duration::from_secs(args.steady_secs)).await;
    let both = Arc::new(AtomicUsize::new(0));
    let watch = tokio::spawn(watch_both(nodes.iter().map(|n| n.web).collect(), Arc::clone(&both), Arc::clone(&stop)));
    let operator = nodes.iter().map(|n| (n.web, n.db().to_path_buf())).collect();
    let writes = tokio::spawn(live_writes(operator, token.clone(), Arc::clone(&published), Arc::clone(&stop)));
    let failovers = kills(&mut nodes, args.kills).await;
    stop.store(true, Ordering::Relaxed);
    let failovers = failovers?;
    flood.await??;
    let samples = watch.await?;
    let (answered, took) = writes.await?;

    let events = published.lock().expect("published").clone();
    let missing = settle(&nodes, &events, Duration::from_secs(120)).await?;
    let lost = lost_writes(&nodes, &answered, Duration::from_secs(30)).await?;
    let heard = notes.lock().expect("notes").clone();
    if std::env::var_os("TWINOPS_BENCH_KEEP").is_some() {
        let lines: Vec<String> = heard.iter().map(Value::to_string).collect();
        std::fs::write(dir.join("notes-heard.jsonl"), lines.join("\n"))?;
    }
    let t = tally(&heard, &events);
    let acked = &events[..events.len().min(200)];
    let trips = round_trips(&nodes, &token, acked).await?;
    let baseline = round_trips(std::slice::from_ref(&alone), &token, acked).await?;
    let on = if args.broker.is_some() { broker.as_str() } else { "embedded" };
    let figures = Figures {
        events: events.len(),
        failovers,
        missing,
        tally: t,
        trips,
        baseline,
        both: both.load(Ordering::Relaxed),
        samples,
        cpu,
        writes: (answered.len(), lost),
        live: (!took.is_empty()).then(|| Percentiles::of(took)),
    };
    report(args, on, &figures);
    anyhow::ensure!(
        figures.broken() == 0,
        "the pair lost or doubled something, or both nodes acted: see the zeros above (the nodes' logs are kept)"
    );
    Ok(())
}

/// An operator at the HMI while the kills go on: acknowledges the flood's occurrences
/// on the two nodes in turn (each a decision through the pair's log), until `stop`;
/// returns those answered 2xx, with how long each took. A node killed, or the log not
/// answering in time, is a refusal, which is allowed; a 2xx is a promise
/// ([`lost_writes`]).
async fn live_writes(
    nodes: Vec<(u16, PathBuf)>,
    token: String,
    published: Arc<Mutex<Vec<String>>>,
    stop: Arc<AtomicBool>,
) -> (Vec<String>, Vec<Duration>) {
    let http = crate::agent::http::Http::new();
    let (mut answered, mut took, mut next) = (Vec::new(), Vec::new(), 0);
    while !stop.load(Ordering::Relaxed) {
        tokio::time::sleep(Duration::from_millis(200)).await;
        let Some(event) = published.lock().expect("published").get(next).cloned() else { continue };
        let (web, db) = &nodes[next % nodes.len()];
        next += 1;
        let id: Option<i64> = rusqlite::Connection::open_with_flags(db, rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY)
            .and_then(|db| {
                db.query_row("SELECT id FROM alarms WHERE event_id = ?1 AND state = 'unacknowledged'", [&event], |r| {
                    r.get(0)
                })
            })
            .ok();
        let Some(id) = id else { continue };
        let url = format!("http://127.0.0.1:{web}/api/alarms/{id}/ack");
        let started = Instant::now();
        let sent = http.client().post(url).bearer_auth(&token).timeout(Duration::from_secs(10)).send().await;
        if sent.is_ok_and(|r| r.status().is_success()) {
            answered.push(event);
            took.push(started.elapsed());
        }
    }
    (answered, took)
}

/// Of the occurrences whose acknowledgement was answered 2xx, those not acknowledged
/// on both twins after waiting up to `limit` for the log (`node:event`).
async fn lost_writes(nodes: &[Node], answered: &[String], limit: Duration) -> anyhow::Result<Vec<String>> {
    let start = Instant::now();
    loop {
        let mut lost = Vec::new();
        for n in nodes {
            let db = rusqlite::Connection::open_with_flags(n.db(), rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY)?;
            let mut acked = db.prepare(
                "SELECT EXISTS (SELECT 1 FROM alarm_events e JOIN alarms a ON a.id = e.alarm_id
                                WHERE a.event_id = ?1 AND e.kind = 'acknowledged')",
            )?;
            for event in answered {
                if !acked.query_row([event], |r| r.get::<_, bool>(0))? {
                    lost.push(format!("{}:{event}", n.name));
                }
            }
        }
        if lost.is_empty() || start.elapsed() > limit {
            return Ok(lost);
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

/// CPU time per ingested message in a steady flood: the acting node, the standby, and
/// the node alone, over the same window.
struct Steady {
    messages: usize,
    secs: u64,
    acting: Duration,
    standby: Duration,
    alone: Duration,
}

/// Measures [`Steady`] over `window` of the flood (after a second to settle), or none
/// where a figure could not be read (not Linux, a node not running).
async fn steady(nodes: &[Node], alone: &Node, published: &Mutex<Vec<String>>, window: Duration) -> Option<Steady> {
    if window.is_zero() {
        return None;
    }
    tokio::time::sleep(Duration::from_secs(1)).await;
    let active = acting_one(nodes, Duration::from_secs(30)).await.ok()?;
    let (acting, standby) = (&nodes[active], &nodes[1 - active]);
    let sample = || Some((acting.cpu()?, standby.cpu()?, alone.cpu()?, published.lock().expect("published").len()));
    let before = sample()?;
    tokio::time::sleep(window).await;
    let after = sample()?;
    let messages = after.3 - before.3;
    let per = |a: Duration, b: Duration| (a - b) / (messages.max(1) as u32);
    Some(Steady {
        messages,
        secs: window.as_secs(),
        acting: per(after.0, before.0),
        standby: per(after.1, before.1),
        alone: per(after.2, before.2),
    })
}

/// The CPU time process `pid` has used, user and system (`/proc/{pid}/stat`).
fn cpu_time(pid: u32) -> Option<Duration> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // After the command's name in parentheses: state is field 3, utime 14, stime 15.
    let fields: Vec<&str> = stat.rsplit_once(')')?.1.split_whitespace().collect();
    let ticks: u64 = fields.get(11)?.parse::<u64>().ok()? + fields.get(12)?.parse::<u64>().ok()?;
    // SAFETY: sysconf reads a constant of the system; no memory is passed.
    let per_second = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    (per_second > 0).then(|| Duration::from_secs_f64(ticks as f64 / per_second as f64))
}

/// What a run measured.
struct Figures {
    events: usize,
    failovers: Vec<Duration>,
    missing: Vec<String>,
    tally: Tally,
    trips: Option<Percentiles>,
    baseline: Option<Percentiles>,
    both: usize,
    samples: usize,
    cpu: Option<Steady>,
    /// Acknowledgements made during the kills and answered 2xx, and those of them
    /// missing from a twin at the end.
    writes: (usize, Vec<String>),
    /// How long those took to be answered.
    live: Option<Percentiles>,
}

impl Figures {
    /// How many of the goals that must be zero in every run are not.
    fn broken(&self) -> usize {
        let t = &self.tally;
        self.missing.len() + t.published_twice.len() + t.in_two_notes.len() + self.writes.1.len() + self.both
    }
}

fn report(args: &FailoverBenchArgs, on: &str, f: &Figures) {
    let p = Percentiles::of(f.failovers.clone());
    println!(
        "bench failover: {} SIGKILLs of the acting node, lease {} ms (renewed every {} ms), {} alarm occurrences at \
         {}/s, broker {on}",
        args.kills, args.lease_ms, args.renew_ms, f.events, args.rate
    );
    println!(
        "  failover (SIGKILL to the other node acting): p50 {:.2} s, p95 {:.2} s, max {:.2} s",
        p.p50.as_secs_f64(),
        p.p95.as_secs_f64(),
        p.max.as_secs_f64()
    );
    println!("  occurrences without a note (on either twin): {}", f.missing.len());
    println!(
        "  notes published twice: {}; occurrences in two notes: {}; notes published: {}",
        f.tally.published_twice.len(),
        f.tally.in_two_notes.len(),
        f.tally.notes
    );
    if let (Some(r), Some(b)) = (&f.trips, &f.baseline) {
        println!(
            "  an acknowledgement through the decision log, answered once applied ({} alternating between the \
             nodes): p50 {} ms, p99 {} ms, max {} ms",
            r.n,
            super::ms(r.p50),
            super::ms(r.p99),
            super::ms(r.max)
        );
        println!(
            "  the same acknowledgements on a node alone (baseline, same run): p50 {} ms, p99 {} ms; the pair costs \
             {:.1}x at p50",
            super::ms(b.p50),
            super::ms(b.p99),
            r.p50.as_secs_f64() / b.p50.as_secs_f64().max(1e-9)
        );
    }
    if let Some(c) = &f.cpu {
        let us = |d: Duration| d.as_secs_f64() * 1e6;
        println!(
            "  CPU per ingested message, steady flood ({} occurrences in {} s): acting node {:.0} us, standby {:.0} us, \
             node alone (baseline, same run) {:.0} us; the acting node costs {:.2}x, the standby {:.2}x",
            c.messages,
            c.secs,
            us(c.acting),
            us(c.standby),
            us(c.alone),
            us(c.acting) / us(c.alone).max(1e-9),
            us(c.standby) / us(c.alone).max(1e-9)
        );
    }
    let took = f
        .live
        .as_ref()
        .map_or(String::new(), |p| format!(" (answered in p50 {} ms, max {} ms)", super::ms(p.p50), super::ms(p.max)));
    println!(
        "  acknowledgements made on the HMI during the kills and answered 2xx, then lost: {} of {}{took}",
        f.writes.1.len(),
        f.writes.0
    );
    let (both, samples) = (f.both, f.samples);
    println!("  samples with both nodes acting: {both} of {samples} (each node's /readyz, every 20 ms)");
    println!(
        "  goals: failover p95 < 5 s and max < 10 s; a decision's round trip p99 < 20 ms; the acting node's CPU per \
         message at most 1.10x the node alone's; zeros in every other line"
    );
    for (what, list) in [
        ("published twice", &f.tally.published_twice),
        ("in two notes", &f.tally.in_two_notes),
        ("without a note", &f.missing),
        ("answered 2xx and lost", &f.writes.1),
    ] {
        if !list.is_empty() {
            let more = if list.len() > 10 { format!(" and {} more", list.len() - 10) } else { String::new() };
            println!("  {what}: {}{more}", list[..list.len().min(10)].join(", "));
        }
    }
}

/// What [`pair`] starts.
struct Started {
    /// The pair.
    nodes: Vec<Node>,
    /// A node alone on the same broker and topics: the baseline.
    alone: Node,
    /// The points an alarm flood can raise.
    points: Vec<Point>,
    /// An operator's API token, on every node.
    token: String,
}

/// The pair's two nodes and a node alone, started on copies of one seeded twin.
fn pair(args: &FailoverBenchArgs, spec: &PairSpec, dir: &Path) -> anyhow::Result<Started> {
    let template = dir.join("template.db");
    let store = super::seeded_store(&template, &args.from, 1)?;
    crate::accounts::add_user(&store, "bench", crate::domain::Role::Operator, &crate::accounts::new_secret(), "bench")?;
    let token = crate::accounts::create_token(&store, "bench", "bench failover", "bench")?.1;
    let points: Vec<Point> = store
        .read()?
        .prepare("SELECT asset_id, id FROM sensors ORDER BY id LIMIT 40")?
        .query_map([], |r| Ok((r.get(0)?, r.get(1)?)))?
        .collect::<rusqlite::Result<_>>()?;
    drop(store);
    let exe = std::env::current_exe()?;
    let (wa, wb) = (free_port()?, free_port()?);
    let mut nodes = Vec::new();
    for (name, web, peer) in [("a", wa, wb), ("b", wb, wa)] {
        let db = dir.join(format!("{name}.db"));
        crate::store::backup(&template, &db)?;
        nodes.push(Node::start(&exe, spec, name, &db, web, Some(peer))?);
    }
    let db = dir.join("alone.db");
    crate::store::backup(&template, &db)?;
    let alone = Node::start(&exe, spec, "alone", &db, free_port()?, None)?;
    Ok(Started { nodes, alone, points, token })
}

/// SIGKILLs the acting node `n` times, each time timing until the other acts, then
/// restarting the killed one and waiting until it has rejoined as standby.
async fn kills(nodes: &mut [Node], n: usize) -> anyhow::Result<Vec<Duration>> {
    let mut failovers = Vec::new();
    for kill in 0..n {
        let active = acting_one(nodes, Duration::from_secs(30)).await.with_context(|| format!("before kill {kill}"))?;
        tokio::time::sleep(Duration::from_millis(500)).await;
        nodes[active].kill();
        let killed = Instant::now();
        let other = 1 - active;
        while !nodes[other].acting().await {
            let name = &nodes[other].name;
            anyhow::ensure!(killed.elapsed() < Duration::from_secs(30), "kill {kill}: node {name} never took over");
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        failovers.push(killed.elapsed());
        nodes[active].restart()?;
        let back = Instant::now();
        while nodes[active].pair().await.is_none_or(|p| p["active_node"] != nodes[other].name.as_str()) {
            let name = &nodes[active].name;
            anyhow::ensure!(back.elapsed() < Duration::from_secs(30), "kill {kill}: node {name} did not come back");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
    Ok(failovers)
}

/// Acknowledges each of `events` on the nodes in turn through the HMI's API (each a
/// decision through the pair's log, answered once applied on that node), timing each.
async fn round_trips(nodes: &[Node], token: &str, events: &[String]) -> anyhow::Result<Option<Percentiles>> {
    let http = crate::agent::http::Http::new();
    let mut took = Vec::new();
    for (i, event) in events.iter().enumerate() {
        let node = &nodes[i % nodes.len()];
        let db = rusqlite::Connection::open_with_flags(node.db(), rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY)?;
        let id: i64 = db
            .query_row("SELECT id FROM alarms WHERE event_id = ?1 AND state = 'unacknowledged'", [event], |r| r.get(0))
            .unwrap_or(0);
        if id == 0 {
            continue;
        }
        let url = format!("http://127.0.0.1:{}/api/alarms/{id}/ack", node.web);
        let start = Instant::now();
        let r = http.client().post(url).bearer_auth(token).timeout(Duration::from_secs(10)).send().await?;
        anyhow::ensure!(r.status().is_success(), "acknowledging {event} on node {}: {}", node.name, r.text().await?);
        took.push(start.elapsed());
    }
    Ok((!took.is_empty()).then(|| Percentiles::of(took)))
}

/// Waits up to `limit` for every one of `events` to have its note on both twins;
/// returns those still without one (`node:event`).
async fn settle(nodes: &[Node], events: &[String], limit: Duration) -> anyhow::Result<Vec<String>> {
    let start = Instant::now();
    loop {
        let mut missing = Vec::new();
        for n in nodes {
            missing.extend(n.without_note(events)?.into_iter().map(|e| format!("{}:{e}", n.name)));
        }
        if missing.is_empty() || start.elapsed() > limit {
            return Ok(missing);
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

/// Asks both nodes' `/readyz` every 20 ms until `stop`, counting the samples where both
/// said they act; returns the samples taken.
pub async fn watch_both(webs: Vec<u16>, both: Arc<AtomicUsize>, stop: Arc<AtomicBool>) -> usize {
    let http = crate::agent::http::Http::new();
    let mut samples = 0;
    while !stop.load(Ordering::Relaxed) {
        let mut acting = 0;
        for web in &webs {
            let url = format!("http://127.0.0.1:{web}/readyz");
            let r = http.client().get(url).timeout(Duration::from_millis(500)).send().await;
            if let Ok(r) = r {
                acting += usize::from(r.json::<Value>().await.is_ok_and(|v| v["cluster"]["acting"] == true));
            }
        }
        samples += 1;
        if acting > 1 {
            both.fetch_add(1, Ordering::Relaxed);
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    samples
}

/// Publishes one alarm occurrence every `1/rate` s until `stop`, each on a new point
/// (the points in turn, a new code each round), recording the event ids.
async fn flood(
    spec: (String, String, u32),
    points: Vec<Point>,
    published: Arc<Mutex<Vec<String>>>,
    stop: Arc<AtomicBool>,
) -> anyhow::Result<()> {
    let (broker, topic, rate) = spec;
    anyhow::ensure!(!points.is_empty(), "the plant has no sensors");
    let cfg = MqttConfig { url: broker, ..Default::default() };
    let mut opts = crate::ingest::mqtt::options(&cfg, &format!("{topic}-flood").replace('/', "-"))?;
    opts.set_clean_session(true);
    let (client, mut events) = rumqttc::AsyncClient::new(opts, 1000);
    let poller = tokio::spawn(async move {
        loop {
            if let Err(e) = events.poll().await {
                eprintln!("bench failover: the flood's connection: {e}; reconnecting");
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
    });
    let mut every = tokio::time::interval(Duration::from_secs_f64(1.0 / f64::from(rate)));
    let mut n = 0usize;
    while !stop.load(Ordering::Relaxed) {
        every.tick().await;
        let (asset, sensor) = &points[n % points.len()];
        let event_id = format!("{topic}-{n}").replace('/', "-");
        let ev = serde_json::json!({"type": "alarm", "event_id": event_id, "asset_id": asset, "sensor_id": sensor,
            "code": format!("FLOOD-{}", n / points.len()), "severity": "high", "state": "raised",
            "time": crate::domain::Timestamp::now().to_rfc3339(), "message": "bench failover"});
        client.publish(&topic, rumqttc::QoS::AtLeastOnce, false, ev.to_string()).await?;
        published.lock().expect("published").push(event_id);
        n += 1;
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    poller.abort();
    Ok(())
}

fn free_port() -> anyhow::Result<u16> {
    Ok(std::net::TcpListener::bind("127.0.0.1:0")?.local_addr()?.port())
}
