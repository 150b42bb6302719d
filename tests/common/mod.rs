//! Test helpers: a seeded demo plant, made once per test binary and copied into a
//! fresh directory for every test, so tests share nothing and seeding runs once.

#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use serde_json::Value;
use tempfile::TempDir;
use twinops::approvals::Proposer;
use twinops::domain::{Timestamp, parse_time};
use twinops::rag::DocIndex;
use twinops::seed::{SeedOptions, seed};
use twinops::store::Store;
use twinops::tools::{self, ToolOutput};

/// The value of an environment variable that names a program or service from outside
/// Cargo (Mosquitto, Chromium, a model server). Without it the test is skipped on a
/// developer's machine, but under `CI=true` it fails, naming what it needs: libtest
/// hides what a passing test prints, so a skip that only said so would go unseen.
pub fn external(var: &str, what: &str) -> Option<String> {
    match std::env::var(var) {
        Ok(v) if !v.is_empty() => Some(v),
        _ if std::env::var("CI").is_ok_and(|ci| ci == "true") => {
            panic!(
                "{var} is not set: this test needs {what}, and under CI=true it must run (.ci/run installs it and sets {var})"
            )
        }
        _ => None,
    }
}

/// `twinops.toml` for a daemon of run `run` on the broker at `url`, taking Sparkplug B
/// from group `run` (its STATE on `spBv1.0/STATE/{run}`), in the plant's folder.
pub fn sparkplug_config(p: &Plant, url: &str, run: &str) -> PathBuf {
    let toml = format!(
        "[mqtt]\nurl = \"{url}\"\nclient_id = \"twinops-{run}\"\ntopics = [\"{run}/scada/#\"]\n\n[web]\nlisten = \"127.0.0.1:0\"\n\n\
         [sparkplug]\nenabled = true\ngroups = [\"{run}\"]\nhost_id = \"{run}\"\n"
    );
    let path = p.dir.path().join("twinops.toml");
    std::fs::write(&path, toml).unwrap();
    path
}

/// `twinops serve` on the plant's database as a process of its own, so that a test can
/// kill it with SIGKILL.
pub fn serve_process(p: &Plant, config: &Path) -> std::process::Child {
    std::process::Command::new(env!("CARGO_BIN_EXE_twinops"))
        .arg("--db")
        .arg(p.db_path())
        .arg("--config")
        .arg(config)
        .arg("serve")
        .env_remove("TWINOPS_LLM_KIND")
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap()
}

/// The summary's per-asset sums of active alarms, kept by triggers, against the alarm
/// rows themselves.
pub fn assert_alarm_stats_agree(p: &Plant) {
    let differ = p.count(
        "SELECT count(*) FROM (
             SELECT asset_id, n, weight, unacked FROM active_alarm_stats
             EXCEPT
             SELECT asset_id, count(*),
                    sum(CASE severity WHEN 'critical' THEN 27 WHEN 'high' THEN 9 WHEN 'medium' THEN 3 ELSE 1 END),
                    sum(state = 'unacknowledged')
             FROM alarms WHERE cleared_at IS NULL GROUP BY asset_id)",
    );
    let rows = |sql: &str| p.count(sql);
    assert_eq!(differ, 0, "active_alarm_stats disagrees with the alarms");
    assert_eq!(
        rows("SELECT count(*) FROM active_alarm_stats"),
        rows("SELECT count(DISTINCT asset_id) FROM alarms WHERE cleared_at IS NULL"),
        "one row per asset in alarm"
    );
}

/// A port free on loopback now.
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

/// Polls `check` until it holds or `limit` passes.
pub async fn eventually(limit: std::time::Duration, mut check: impl FnMut() -> bool) -> bool {
    let started = std::time::Instant::now();
    while started.elapsed() < limit {
        if check() {
            return true;
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    check()
}

/// Opens a persistent session for `client_id` subscribed to `filters` and leaves it:
/// from now on the broker keeps what is published there for that client.
pub async fn open_session(url: &str, client_id: &str, filters: &[String]) {
    let opts = twinops::ingest::mqtt::options(
        &twinops::config::MqttConfig { url: url.into(), ..Default::default() },
        client_id,
    )
    .unwrap();
    let (client, mut eventloop) = rumqttc::AsyncClient::new(opts, 10);
    let filters = filters.iter().map(|f| rumqttc::SubscribeFilter::new(f.clone(), rumqttc::QoS::AtLeastOnce));
    client.subscribe_many(filters).await.unwrap();
    let granted = tokio::time::timeout(std::time::Duration::from_secs(30), async {
        loop {
            if let rumqttc::Event::Incoming(rumqttc::Packet::SubAck(_)) = eventloop.poll().await.unwrap() {
                break;
            }
        }
    })
    .await;
    assert!(granted.is_ok(), "the broker at {url} granted the subscription");
    client.disconnect().await.unwrap();
    let _ = tokio::time::timeout(std::time::Duration::from_secs(2), eventloop.poll()).await;
}

/// One SCADA alarm event (asset, sensor, code) through ingest, received now; a refused
/// event fails the test.
pub fn scada_event(
    store: &twinops::store::Store,
    event_id: &str,
    (asset, sensor, code): (&str, Option<&str>, &str),
    severity: &str,
    state: &str,
    time: Timestamp,
) {
    let ev = serde_json::json!({"type": "alarm", "event_id": event_id, "asset_id": asset, "sensor_id": sensor,
                                "code": code, "severity": severity, "state": state, "time": time.to_rfc3339(),
                                "message": "test"});
    let effect = twinops::ingest::apply(
        store.writer(),
        "scada/alarms",
        ev.to_string().as_bytes(),
        Timestamp::now(),
        Default::default(),
    )
    .unwrap();
    assert_eq!(effect.dead_letters, 0, "{ev}");
}

/// The seeded week ends here; tools run "now" at this instant.
pub const END: &str = "2026-11-30T12:00:00Z";

pub fn end() -> Timestamp {
    parse_time(END).unwrap()
}

pub fn seed_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("seed")
}

fn template() -> &'static Path {
    static TEMPLATE: OnceLock<(TempDir, PathBuf)> = OnceLock::new();
    let (_, path) = TEMPLATE.get_or_init(|| {
        let dir = TempDir::new().unwrap();
        let path = dir.path().join("template.db");
        let store = Store::open(&path).unwrap();
        seed(&store, &SeedOptions { dir: seed_dir(), scale: 1, end: end(), days: 7 }).unwrap();
        drop(store);
        // Fold the WAL into the main file so that copying the one file copies it all.
        let conn = rusqlite::Connection::open(&path).unwrap();
        conn.busy_timeout(std::time::Duration::from_secs(5)).unwrap();
        conn.query_row("PRAGMA wal_checkpoint(TRUNCATE)", [], |r| r.get::<_, i64>(0)).unwrap();
        (dir, path)
    });
    path
}

/// A test's own copy of the seeded plant.
pub struct Plant {
    pub dir: TempDir,
    pub store: Store,
    pub docs: DocIndex,
}

impl Plant {
    pub fn new() -> Plant {
        let dir = TempDir::new().unwrap();
        let path = dir.path().join("twinops.db");
        std::fs::copy(template(), &path).unwrap();
        let store = Store::open(&path).unwrap();
        Plant { dir, store, docs: DocIndex::new() }
    }

    /// A twin with nothing in it yet (a site's first start).
    pub fn empty() -> Plant {
        let dir = TempDir::new().unwrap();
        let store = Store::open(&dir.path().join("twinops.db")).unwrap();
        Plant { dir, store, docs: DocIndex::new() }
    }

    pub fn db_path(&self) -> PathBuf {
        self.store.path().to_path_buf()
    }

    /// Calls a tool as the agent would, as of the end of the seeded week.
    pub fn call(&self, name: &str, args: Value) -> ToolOutput {
        tools::with_context(&self.store, &self.docs, end(), Proposer::Run(1), |ctx| tools::call(ctx, name, args))
            .unwrap()
    }

    /// Calls a tool that must succeed and returns its parsed result.
    pub fn ok(&self, name: &str, args: Value) -> Value {
        let out = self.call(name, args.clone());
        assert!(!out.is_error, "{name}({args}) failed: {}", out.content);
        serde_json::from_str(&out.content).unwrap_or_else(|e| panic!("{name} returned non-JSON ({e}): {}", out.content))
    }

    /// Calls a tool that must fail and returns the message the model sees.
    pub fn err(&self, name: &str, args: Value) -> String {
        let out = self.call(name, args.clone());
        assert!(out.is_error, "{name}({args}) should have failed, got: {}", out.content);
        out.content
    }

    /// Runs SQL on the write connection (test setup only).
    pub fn write(&self, sql: &'static str) {
        self.store.writer().call(move |c| c.execute_batch(sql).map_err(twinops::store::StoreError::from)).unwrap();
    }

    pub fn count(&self, sql: &str) -> i64 {
        self.store.read().unwrap().query_row(sql, [], |r| r.get(0)).unwrap()
    }

    /// The text of the first column of the first row.
    pub fn text(&self, sql: &str) -> String {
        self.store.read().unwrap().query_row(sql, [], |r| r.get(0)).unwrap()
    }
}

/// Waits until the daemon's ingest is connected and subscribed: what is published
/// before that is not kept for it.
pub async fn until_subscribed(daemon: &twinops::app::Daemon) {
    let mut up = daemon.broker_up.clone();
    let subscribed = tokio::time::timeout(std::time::Duration::from_secs(30), up.wait_for(|up| *up)).await;
    assert!(matches!(subscribed, Ok(Ok(_))), "ingest not subscribed within 30 s");
}

/// Logs to the test's output when `RUST_LOG` is set (e.g. `RUST_LOG=twinops=debug`).
pub fn logs() {
    if std::env::var_os("RUST_LOG").is_some() {
        let _ = tracing_subscriber::fmt()
            .with_test_writer()
            .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
            .try_init();
    }
}

/// A daemon configuration for one test: its own embedded broker port and client id,
/// the HMI on a free port, the rules model.
pub fn test_config(label: &str) -> twinops::config::Config {
    let mut config = twinops::config::Config::default();
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    config.mqtt.embedded_listen = format!("127.0.0.1:{port}");
    config.mqtt.client_id = format!("twinops-{label}-{port}");
    config.web.listen = "127.0.0.1:0".into();
    config
}

/// A broker in a process of its own that the test can restart on the same port.
pub enum OwnBroker {
    /// `twinops broker`: in memory, so its retained messages do not survive a restart.
    Embedded { listen: String, process: std::process::Child },
    /// Mosquitto with persistence: retained messages survive a restart.
    Mosquitto { listen: String, bin: String, conf: std::path::PathBuf, process: std::process::Child },
}

impl OwnBroker {
    pub async fn embedded() -> OwnBroker {
        let listen = format!("127.0.0.1:{}", free_port());
        let process = Self::spawn_embedded(&listen);
        let broker = OwnBroker::Embedded { listen, process };
        broker.listening().await;
        broker
    }

    pub async fn mosquitto(bin: String, dir: &std::path::Path) -> OwnBroker {
        use std::os::unix::fs::MetadataExt;
        let port = free_port();
        let conf = dir.join("mosquitto.conf");
        // As root, Mosquitto would switch to its own user, which cannot write here.
        let root = std::fs::metadata("/proc/self").unwrap().uid() == 0;
        let text = format!(
            "{}listener {port} 127.0.0.1\nallow_anonymous true\npersistence true\npersistence_location {}/\n",
            if root { "user root\n" } else { "" },
            dir.display()
        );
        std::fs::write(&conf, text).unwrap();
        let process = Self::spawn_mosquitto(&bin, &conf);
        let broker = OwnBroker::Mosquitto { listen: format!("127.0.0.1:{port}"), bin, conf, process };
        broker.listening().await;
        broker
    }

    fn spawn_embedded(listen: &str) -> std::process::Child {
        std::process::Command::new(env!("CARGO_BIN_EXE_twinops"))
            .args(["broker", "--listen", listen])
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap()
    }

    fn spawn_mosquitto(bin: &str, conf: &std::path::Path) -> std::process::Child {
        std::process::Command::new(bin)
            .arg("-c")
            .arg(conf)
            .stderr(std::process::Stdio::null())
            .spawn()
            .expect("TWINOPS_TEST_MOSQUITTO runs")
    }

    pub fn url(&self) -> String {
        let (OwnBroker::Embedded { listen, .. } | OwnBroker::Mosquitto { listen, .. }) = self;
        format!("mqtt://{listen}")
    }

    pub async fn listening(&self) {
        let (OwnBroker::Embedded { listen, .. } | OwnBroker::Mosquitto { listen, .. }) = self;
        let up = eventually(std::time::Duration::from_secs(10), || std::net::TcpStream::connect(listen).is_ok()).await;
        assert!(up, "the broker listens on {listen}");
    }

    /// Stops the broker as a service manager would (SIGTERM: Mosquitto saves its
    /// state) and starts it again on the same port.
    pub async fn restart(&mut self) {
        self.stop();
        self.start().await;
    }

    /// Stops the broker as a service manager would (SIGTERM: Mosquitto saves its state).
    pub fn stop(&mut self) {
        let (OwnBroker::Embedded { process, .. } | OwnBroker::Mosquitto { process, .. }) = self;
        let _ = std::process::Command::new("kill").args(["-TERM", &process.id().to_string()]).status();
        process.wait().unwrap();
    }

    /// Starts it again on the same port, after [`OwnBroker::stop`].
    pub async fn start(&mut self) {
        let next = match self {
            OwnBroker::Embedded { listen, .. } => Self::spawn_embedded(listen),
            OwnBroker::Mosquitto { bin, conf, .. } => Self::spawn_mosquitto(bin, conf),
        };
        let (OwnBroker::Embedded { process, .. } | OwnBroker::Mosquitto { process, .. }) = self;
        *process = next;
        self.listening().await;
    }
}

impl Drop for OwnBroker {
    fn drop(&mut self) {
        let (OwnBroker::Embedded { process, .. } | OwnBroker::Mosquitto { process, .. }) = self;
        let _ = process.kill();
        let _ = process.wait();
    }
}
