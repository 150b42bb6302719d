//! OPC UA against servers twinops did not write. node-opcua (npm, pinned by
//! `tests/opcua/package-lock.json`) running its demo alarm address space (a tank level
//! with an exclusive and a non-exclusive level alarm) and a pump station of our own,
//! driven by `tests/opcua/server.mjs` over stdin: needs `TWINOPS_TEST_NODE` (node) and
//! `TWINOPS_TEST_OPCUA_JS` (a folder holding `node_modules/node-opcua`: `npm ci` in a
//! copy of `tests/opcua`). And asyncua (Python, a second stack, which reports alarms on
//! the equipment object): needs `TWINOPS_TEST_ASYNCUA`, a Python with asyncua 2.1.
//! `.ci/run` provides all three.

mod common;

use std::path::{Path, PathBuf};
use std::time::Duration;

use common::{Plant, eventually};
use tokio::io::AsyncWriteExt;
use tokio::net::{TcpListener, TcpStream};
use twinops::app::{Daemon, ServeOptions};
use twinops::bench::failover::{self, PairSpec};
use twinops::config::Config;
use twinops::domain::Role;

struct Externals {
    node: String,
    js: PathBuf,
}

fn externals() -> Option<Externals> {
    let node = common::external("TWINOPS_TEST_NODE", "Node.js (e.g. /usr/bin/node)")?;
    let js = common::external(
        "TWINOPS_TEST_OPCUA_JS",
        "a folder holding node_modules/node-opcua (npm ci in a copy of tests/opcua)",
    )?;
    Some(Externals { node, js: PathBuf::from(js) })
}

/// node-opcua's server, as the library drives it, asserting each step.
struct Server(twinops::opcua::interop::Server);

impl Server {
    async fn start(x: &Externals, port: u16, pki: &Path, extra: u32) -> Server {
        Server(twinops::opcua::interop::Server::start(&x.node, &x.js, port, pki, extra).await.unwrap())
    }

    async fn say(&mut self, line: &str) {
        self.0.ask(line).await.unwrap();
    }

    async fn ask(&mut self, line: &str) -> String {
        self.0.ask(line).await.unwrap()
    }

    async fn kill(self) {
        self.0.kill().await
    }
}

/// `twinops.toml` for OPC UA on `endpoint`, with `extra` settings in `[opcua]`.
fn config(p: &Plant, endpoint: &str, extra: &str) -> PathBuf {
    config_at(p, endpoint, &format!("timeout_secs = 10\n{extra}"))
}

fn config_at(p: &Plant, endpoint: &str, extra: &str) -> PathBuf {
    let toml = format!(
        "data_dir = \"{}\"\n[mqtt]\nembedded_listen = \"127.0.0.1:{}\"\n[web]\nlisten = \"\"\n\n\
         [opcua]\nenabled = true\nendpoint = \"{endpoint}\"\nsampling_interval_ms = 0\npublishing_interval_ms = 100\n\
         queue_size = 100\nreconnect_max_secs = 2\n{extra}\n",
        p.dir.path().display(),
        common::free_port()
    );
    let path = p.dir.path().join(format!("twinops-{}.toml", common::free_port()));
    std::fs::write(&path, toml).unwrap();
    path
}

async fn daemon(p: &Plant, config: &Path) -> Daemon {
    let config = Config::load(config, &|_| None).unwrap();
    let opts = ServeOptions { config, db: p.db_path(), demo: false, seed_dir: common::seed_dir() };
    let daemon = Daemon::start_on(p.store.clone(), opts).await.unwrap();
    let mut up = daemon.opcua_up.clone().expect("[opcua] is on");
    let connected = tokio::time::timeout(Duration::from_secs(60), up.wait_for(|up| *up)).await;
    assert!(matches!(connected, Ok(Ok(_))), "the OPC UA session is up within 60 s");
    daemon
}

fn twinops(p: &Plant, config: &Path, args: &[&str]) -> std::process::Output {
    std::process::Command::new(env!("CARGO_BIN_EXE_twinops"))
        .arg("--db")
        .arg(p.db_path())
        .arg("--config")
        .arg(config)
        .args(args)
        .output()
        .unwrap()
}

/// The guide's `plant import --partial` of the files `opcua browse` wrote in `out`.
fn import_browsed(p: &Plant, config: &Path, out: &Path) {
    let files: Vec<String> = ["plant.toml", "assets.csv", "tags.csv", "connections.csv"]
        .iter()
        .map(|f| out.join(f).display().to_string())
        .collect();
    let mut args = vec!["plant", "import", "--partial"];
    args.extend(files.iter().map(String::as_str));
    let import = twinops(p, config, &args);
    assert!(import.status.success(), "{}", text(&import));
}

fn text(o: &std::process::Output) -> String {
    format!("{}{}", String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr))
}

/// `opcua browse` writes files a site can review that `plant import` takes: objects as
/// assets (nested ones with their parent), variables as sensors with their node by
/// namespace URI, unit, EURange, and the limits of the conditions they are the source
/// of; references between objects whose type names a connection (Part 23's Controls,
/// the site's own Feeds) as the plant's connections; a string variable is said to be
/// skipped.
#[tokio::test(flavor = "multi_thread")]
async fn browse_writes_the_plant_files_the_import_takes() {
    common::logs();
    let Some(x) = externals() else { return };
    let p = Plant::new();
    let port = common::free_port();
    let _server = Server::start(&x, port, &p.dir.path().join("server-pki"), 0).await;
    let config = config(&p, &format!("opc.tcp://127.0.0.1:{port}"), "");
    let out = p.dir.path().join("browsed");
    let browse = twinops(&p, &config, &["opcua", "browse", "--out", out.to_str().unwrap()]);
    assert!(browse.status.success(), "{}", text(&browse));
    assert!(text(&browse).contains("skipped P-101/Mode: of data type"), "{}", text(&browse));
    let tags = std::fs::read_to_string(out.join("tags.csv")).unwrap();
    assert!(
        tags.contains("P-101.DischargePressure,P-101,,Discharge pressure,bar,0,16,")
            && tags.contains("nsu=urn:twinops-test:plant;s=PS1.P-101.DischargePressure"),
        "{tags}"
    );
    import_browsed(&p, &config, &out);
    assert_eq!(
        p.count("SELECT count(*) FROM assets WHERE id = 'P-101' AND parent_id = 'PS1' AND station_id = 'OPCUA'"),
        1
    );
    assert_eq!(
        p.count("SELECT count(*) FROM sensors WHERE id = 'Tank.TankLevel' AND limit_l = 0.2 AND limit_h = 0.8 AND limit_hh = 0.9 AND opcua_node LIKE 'nsu=%'"),
        1,
        "the exclusive level alarm's limits are the sensor's"
    );
    assert_eq!(p.count("SELECT count(*) FROM sensors WHERE opcua_node IS NOT NULL"), 5);
    let connections = std::fs::read_to_string(out.join("connections.csv")).unwrap();
    assert_eq!(connections, "from,kind,to\nPLC-1,controls,P-101\nWW-1,feeds,P-101\n");
    assert_eq!(
        p.text("SELECT group_concat(from_asset || ' ' || kind || ' ' || to_asset, ' | ') FROM (SELECT * FROM asset_connections WHERE to_asset = 'P-101' ORDER BY 1)"),
        "PLC-1 controls P-101 | WW-1 feeds P-101"
    );

    // Bad input: a node id by index, a root the server does not have, nobody listening.
    let by_index = twinops(&p, &config, &["opcua", "browse", "--root", "ns=2;s=PS1"]);
    assert!(!by_index.status.success() && text(&by_index).contains("renumber"), "{}", text(&by_index));
    let unknown = twinops(&p, &config, &["opcua", "browse", "--root", "nsu=urn:nowhere;s=X"]);
    assert!(!unknown.status.success() && text(&unknown).contains("no namespace 'urn:nowhere'"), "{}", text(&unknown));
    let nobody = config_at(&p, &format!("opc.tcp://127.0.0.1:{}", common::free_port()), "timeout_secs = 2");
    let refused = twinops(&p, &nobody, &["opcua", "browse", "--out", out.to_str().unwrap()]);
    assert!(
        !refused.status.success() && text(&refused).contains("check opcua.endpoint's host and port"),
        "{}",
        text(&refused)
    );
}

/// Values arrive with their source time to the millisecond; a bad status is not stored
/// and marks the sensor stale, a good value clears it; the tank's level alarm raises,
/// gets a triage note, is acknowledged at the server and shows so, and clears; a node
/// that does not exist and a string variable are each dead-lettered once.
#[tokio::test(flavor = "multi_thread")]
async fn values_and_alarms_from_node_opcua_reach_the_twin() {
    common::logs();
    let Some(x) = externals() else { return };
    let p = Plant::new();
    let port = common::free_port();
    let mut server = Server::start(&x, port, &p.dir.path().join("server-pki"), 0).await;
    let config = config(&p, &format!("opc.tcp://127.0.0.1:{port}"), "auto_register = true");
    // Two tags a site mapped by hand: one to a node that does not exist, one to a string.
    let tags = p.dir.path().join("extra.csv");
    std::fs::write(
        &tags,
        "tag,asset,unit,opcua node\nPUMP-001.NOPE,PUMP-001,bar,nsu=urn:twinops-test:plant;s=PS1.P-101.Nope\n\
         PUMP-001.MODE,PUMP-001,,nsu=urn:twinops-test:plant;s=PS1.P-101.Mode\n",
    )
    .unwrap();
    let import = twinops(&p, &config, &["plant", "import", "--partial", tags.to_str().unwrap()]);
    assert!(import.status.success(), "{}", text(&import));
    let daemon = daemon(&p, &config).await;

    let pressure = "SELECT count(*) FROM readings WHERE sensor_key = (SELECT key FROM sensors WHERE id = 'P-101.DischargePressure')";
    assert!(eventually(Duration::from_secs(20), || p.count(pressure) >= 1).await, "the initial value arrived");
    server.say("set Pressure 7.25").await;
    let stored = "SELECT count(*) FROM readings WHERE value = 7.25";
    assert!(eventually(Duration::from_secs(20), || p.count(stored) == 1).await, "the new value arrived");
    // 20 values stamped 1 ms apart at the source (sampled 150 ms apart): each kept, at
    // its millisecond.
    server.say("burst 20 150").await;
    let burst = "SELECT count(*), max(ts) - min(ts) FROM readings WHERE value >= 100 AND value < 105 \
                 AND sensor_key = (SELECT key FROM sensors WHERE id = 'P-101.Flow')";
    let spread = || {
        p.store
            .read()
            .unwrap()
            .query_row(burst, [], |r| Ok((r.get::<_, i64>(0)?, r.get::<_, Option<i64>>(1)?)))
            .unwrap()
    };
    assert!(eventually(Duration::from_secs(20), || spread().0 == 20).await, "the burst arrived: {:?}", spread());
    assert_eq!(spread(), (20, Some(19)), "source times kept to the millisecond");

    server.say("bad Flow").await;
    let stale = "SELECT count(*) FROM sensors WHERE id = 'P-101.Flow' AND stale_since IS NOT NULL";
    assert!(eventually(Duration::from_secs(20), || p.count(stale) == 1).await, "a bad status marks the sensor stale");
    server.say("set Flow 130").await;
    assert!(eventually(Duration::from_secs(20), || p.count(stale) == 0).await, "a good value clears it");

    let bad = |reason: &str, like: &str| {
        format!(
            "SELECT count(*) FROM dead_letters WHERE reason = '{reason}' AND topic = 'opcua/values' AND detail LIKE '{like}'"
        )
    };
    assert!(
        eventually(Duration::from_secs(20), || p.count(&bad("invalid", "%PUMP-001.NOPE%BadNodeIdUnknown%")) == 1).await,
        "the missing node is dead-lettered: {}",
        p.text("SELECT coalesce(group_concat(reason || ': ' || detail, ' | '), '') FROM dead_letters")
    );
    server.say("set Mode MANUAL").await;
    server.say("set Mode AUTO").await;
    assert!(eventually(Duration::from_secs(20), || p.count(&bad("unsupported", "%PUMP-001.MODE%String%")) == 1).await);
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert_eq!(p.count(&bad("unsupported", "%PUMP-001.MODE%")), 1, "said once, not per value");
    let letter = p.count("SELECT id FROM dead_letters WHERE reason = 'unsupported' AND topic = 'opcua/values'");
    let policy = twinops::ingest::IngestPolicy::default();
    match twinops::ingest::dead_letters::replay(p.store.writer(), letter, "olivia", policy).unwrap() {
        twinops::ingest::dead_letters::Replay::Refused { detail, .. } => {
            assert!(detail.contains("opcua_node"), "{detail}")
        }
        other => panic!("a node's record is not replayed as an event: {other:?}"),
    }

    server.say("level 0.85").await;
    let raised = "SELECT count(*) FROM alarms WHERE asset_id = 'Tank' AND sensor_id = 'Tank.TankLevel' AND code = 'TANKLEVELCONDITION-H'";
    assert!(eventually(Duration::from_secs(20), || p.count(raised) == 1).await, "the level alarm raised");
    let noted = "SELECT count(*) FROM notes WHERE kind = 'triage' AND alarm_id IN (SELECT id FROM alarms WHERE asset_id = 'Tank')";
    assert!(eventually(Duration::from_secs(60), || p.count(noted) >= 1).await, "it got a triage note");
    server.say("ack").await;
    let acked = "SELECT count(*) FROM alarms WHERE asset_id = 'Tank' AND state = 'acknowledged' AND acked_by = 'opcua'";
    assert!(eventually(Duration::from_secs(20), || p.count(acked) == 1).await, "acknowledged at the server shows");
    server.say("level 0.95").await;
    let hh =
        "SELECT count(*) FROM alarms WHERE asset_id = 'Tank' AND code = 'TANKLEVELCONDITION-HH' AND cleared_at IS NULL";
    assert!(eventually(Duration::from_secs(20), || p.count(hh) == 1).await, "HighHigh is a point of its own");
    server.say("level 0.5").await;
    let open = "SELECT count(*) FROM alarms WHERE asset_id = 'Tank' AND code LIKE 'TANKLEVELCONDITION%' AND cleared_at IS NULL AND state != 'rtn_unacknowledged'";
    assert!(eventually(Duration::from_secs(20), || p.count(open) == 0).await, "both cleared when the level is normal");
    assert_eq!(p.count(raised), 1, "no occurrence doubled");
    daemon.shutdown().await;
}

/// With `acknowledge = true`, an operator's acknowledgement in twinops is passed on
/// to the server's Acknowledge method, once, and its result journalled.
#[tokio::test(flavor = "multi_thread")]
async fn an_acknowledgement_in_twinops_reaches_the_server_when_turned_on() {
    common::logs();
    let Some(x) = externals() else { return };
    let p = Plant::new();
    let port = common::free_port();
    let mut server = Server::start(&x, port, &p.dir.path().join("server-pki"), 0).await;
    let config = config(&p, &format!("opc.tcp://127.0.0.1:{port}"), "auto_register = true\nacknowledge = true");
    let daemon = daemon(&p, &config).await;
    server.say("level 0.85").await;
    let raised =
        "SELECT id FROM alarms WHERE asset_id = 'Tank' AND code = 'TANKLEVELCONDITION-H' AND state = 'unacknowledged'";
    assert!(eventually(Duration::from_secs(20), || p.count(&format!("SELECT count(*) FROM ({raised})")) == 1).await);
    assert_eq!(server.ask("acked").await, "false");
    let id = p.count(raised);
    twinops::alarms::acknowledge(p.store.writer(), id, "olivia", twinops::domain::Timestamp::now()).unwrap();
    let passed = "SELECT count(*) FROM opcua_acks WHERE result LIKE 'Good%'";
    assert!(
        eventually(Duration::from_secs(20), || p.count(passed) == 1).await,
        "passed on: {}",
        p.text("SELECT coalesce(group_concat(result, ' | '), '') FROM opcua_acks")
    );
    assert_eq!(server.ask("acked").await, "true", "the server's condition is acknowledged");
    assert_eq!(
        p.count("SELECT count(*) FROM audit_log WHERE action = 'opcua_acknowledge' AND detail LIKE '%olivia%'"),
        1
    );
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(p.count("SELECT count(*) FROM opcua_acks"), 1, "passed on once");
    daemon.shutdown().await;
}

/// A redundant pair with `acknowledge = true`: the acting node passes an operator's
/// acknowledgement on and the record of it reaches the standby through the pair's log,
/// so after the acting node is killed the new one does not pass it on again (the
/// server would answer that it is already acknowledged); what is acknowledged after
/// the takeover, the new node passes on.
#[tokio::test(flavor = "multi_thread")]
async fn a_pair_passes_an_acknowledgement_on_once_through_a_takeover() {
    common::logs();
    let Some(x) = externals() else { return };
    let plants = [Plant::new(), Plant::new()];
    let port = common::free_port();
    let mut server = Server::start(&x, port, &plants[0].dir.path().join("server-pki"), 0).await;
    let broker = format!("127.0.0.1:{}", common::free_port());
    twinops::broker::start(broker.parse().unwrap()).unwrap();
    let settings = format!(
        "[opcua]\nenabled = true\nendpoint = \"opc.tcp://127.0.0.1:{port}\"\nsampling_interval_ms = 0\n\
         publishing_interval_ms = 100\nreconnect_max_secs = 2\ntimeout_secs = 10\nauto_register = true\n\
         acknowledge = true\n"
    );
    let run = format!("ua{}", common::free_port());
    let spec = PairSpec { broker: format!("mqtt://{broker}"), run, lease_ms: 1500, renew_ms: 200, settings };
    let tokens: Vec<String> = plants
        .iter()
        .map(|p| {
            twinops::accounts::add_user(&p.store, "op", Role::Operator, "a long enough password", "test").unwrap();
            twinops::accounts::create_token(&p.store, "op", "test", "test").unwrap().1
        })
        .collect();
    let exe = Path::new(env!("CARGO_BIN_EXE_twinops"));
    let (wa, wb) = (common::free_port(), common::free_port());
    let mut nodes = [
        failover::Node::start(exe, &spec, "a", &plants[0].db_path(), wa, Some(wb)).unwrap(),
        failover::Node::start(exe, &spec, "b", &plants[1].db_path(), wb, Some(wa)).unwrap(),
    ];
    let unacked = |level: &str| {
        format!(
            "SELECT coalesce(max(id), 0) FROM alarms WHERE asset_id = 'Tank' AND code = 'TANKLEVELCONDITION-{level}' \
             AND state = 'unacknowledged'"
        )
    };
    let passed = "SELECT count(*) FROM opcua_acks WHERE result LIKE 'Good%'";
    let audited = "SELECT count(*) FROM audit_log WHERE action = 'opcua_acknowledge'";
    // Acknowledges the `level` alarm on node `i`, and waits until both nodes have it
    // passed on: `n` acknowledgements in all.
    let ack_on = async |nodes: &[failover::Node], i: usize, level: &str, n: i64| {
        let raised = unacked(level);
        let both = eventually(Duration::from_secs(60), || plants.iter().all(|p| p.count(&raised) > 0)).await;
        assert!(both, "the {level} alarm reaches both nodes");
        let r = twinops::agent::http::Http::new()
            .client()
            .post(format!("http://127.0.0.1:{}/api/alarms/{}/ack", nodes[i].web, plants[i].count(&raised)))
            .bearer_auth(&tokens[i])
            .send()
            .await
            .unwrap();
        assert!(r.status().is_success(), "{}", r.text().await.unwrap());
        let shared = eventually(Duration::from_secs(30), || plants.iter().all(|p| p.count(passed) == n)).await;
        let results: Vec<String> =
            plants.iter().map(|p| p.text("SELECT coalesce(group_concat(result, ' | '), '') FROM opcua_acks")).collect();
        assert!(shared, "passed on, and on record on both nodes: {results:?}");
    };
    let first = failover::acting_one(&nodes, Duration::from_secs(30)).await.unwrap();
    server.say("level 0.85").await;
    ack_on(&nodes, 1 - first, "H", 1).await;
    assert_eq!(server.ask("acked").await, "true", "the server's condition is acknowledged");

    nodes[first].kill();
    let second = failover::acting_one(&nodes, Duration::from_secs(30)).await.unwrap();
    assert_ne!(first, second, "the other node took over");
    // A few of the new node's rounds of passing acknowledgements on: nothing again.
    tokio::time::sleep(Duration::from_secs(4)).await;
    let p = &plants[second];
    assert_eq!(
        p.count("SELECT count(*) FROM opcua_acks"),
        1,
        "{}",
        p.text("SELECT group_concat(result) FROM opcua_acks")
    );
    assert_eq!(p.count(audited), 1, "one acknowledgement passed on, on the record once");

    nodes[first].restart().unwrap();
    server.say("level 0.95").await;
    assert_eq!(server.ask("acked").await, "false", "HighHigh is a new event to acknowledge");
    ack_on(&nodes, second, "HH", 2).await;
    assert_eq!(server.ask("acked").await, "true", "the new acting node passed it on");
    assert!(plants.iter().all(|p| p.count(audited) == 2));
    for n in &mut nodes {
        n.stop();
    }
    server.kill().await;
}

/// A TCP proxy between twinops and the server. `cut` makes every connection a black
/// hole towards twinops for `for_`, then closes it: what the server sent meanwhile
/// (publish responses it counts as delivered) is lost on the way, so twinops must find
/// the gap in the sequence numbers and ask for those notifications again (Republish).
struct Proxy {
    port: u16,
    cut: tokio::sync::watch::Sender<bool>,
}

impl Proxy {
    async fn start(to: u16) -> Proxy {
        Proxy::start_on("127.0.0.1", to).await
    }

    /// The same, listening on another loopback address (`127.0.0.2`: one the server's
    /// certificate does not name).
    async fn start_on(address: &str, to: u16) -> Proxy {
        use tokio::io::AsyncReadExt;
        let listener = TcpListener::bind((address, 0)).await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let (cut, cut_rx) = tokio::sync::watch::channel(false);
        tokio::spawn(async move {
            while let Ok((inbound, _)) = listener.accept().await {
                let cut_rx = cut_rx.clone();
                tokio::spawn(async move {
                    let Ok(outbound) = TcpStream::connect(("127.0.0.1", to)).await else { return };
                    let (mut from_client, mut to_client) = inbound.into_split();
                    let (mut from_server, mut to_server) = outbound.into_split();
                    let up = async { tokio::io::copy(&mut from_client, &mut to_server).await };
                    let down = async {
                        let mut buf = vec![0u8; 64 * 1024];
                        loop {
                            let n = from_server.read(&mut buf).await.unwrap_or(0);
                            if n == 0 {
                                return;
                            }
                            if *cut_rx.borrow() {
                                continue; // into the black hole
                            }
                            if to_client.write_all(&buf[..n]).await.is_err() {
                                return;
                            }
                        }
                    };
                    let mut ended = cut_rx.clone();
                    tokio::select! {
                        _ = up => {}
                        _ = down => {}
                        // The black hole ends by closing the connection.
                        _ = async { let _ = ended.wait_for(|c| *c).await; let _ = ended.wait_for(|c| !*c).await; } => {}
                    }
                });
            }
        });
        Proxy { port, cut }
    }
}

/// A link cut for 3 s (what the server sent meanwhile lost on the way, then the
/// connection closed) loses no value: the notifications lost in flight come back by
/// Republish, the server's queue holds the rest; none is doubled.
#[tokio::test(flavor = "multi_thread")]
async fn a_cut_link_loses_nothing() {
    common::logs();
    let Some(x) = externals() else { return };
    let p = Plant::new();
    let port = common::free_port();
    let mut server = Server::start(&x, port, &p.dir.path().join("server-pki"), 0).await;
    let proxy = Proxy::start(port).await;
    let config = config(&p, &format!("opc.tcp://127.0.0.1:{}", proxy.port), "auto_register = true");
    let daemon = daemon(&p, &config).await;
    let flow = "SELECT count(*) FROM readings WHERE sensor_key = (SELECT key FROM sensors WHERE id = 'P-101.Flow')";
    assert!(eventually(Duration::from_secs(20), || p.count(flow) >= 1).await);
    let before = p.count(flow);
    server.say("set Flow 150").await;
    assert!(eventually(Duration::from_secs(20), || p.count(flow) == before + 1).await, "values pass the proxy");
    let before = before + 1;
    let republished = || twinops::metrics::counter("twinops_opcua_republished_total");
    let republished_before = republished();

    proxy.cut.send_replace(true);
    for v in 1..=5 {
        server.say(&format!("set Flow {}", 200 + v)).await;
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    proxy.cut.send_replace(false);
    assert!(
        eventually(Duration::from_secs(30), || p.count(flow) == before + 5).await,
        "the five values of the cut arrived: {} of 5",
        p.count(flow) - before
    );
    assert!(republished() > republished_before, "what was lost in flight came back by Republish");
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(p.count(flow), before + 5, "none doubled");
    daemon.shutdown().await;
}

/// A SIGKILL of the server raises communication loss and marks the sensors stale; the
/// server back with its namespaces renumbered still resolves every node (values and
/// alarms arrive again), communication loss clears.
#[tokio::test(flavor = "multi_thread")]
async fn a_server_restart_with_renumbered_namespaces_resumes() {
    common::logs();
    let Some(x) = externals() else { return };
    let p = Plant::new();
    let port = common::free_port();
    let pki = p.dir.path().join("server-pki");
    let server = Server::start(&x, port, &pki, 0).await;
    let config = config(&p, &format!("opc.tcp://127.0.0.1:{port}"), "auto_register = true");
    let daemon = daemon(&p, &config).await;
    let pressure = |v: f64| {
        format!(
            "SELECT count(*) FROM readings WHERE value = {v} AND sensor_key = (SELECT key FROM sensors WHERE id = 'P-101.DischargePressure')"
        )
    };
    assert!(eventually(Duration::from_secs(20), || p.count(&pressure(4.2)) >= 1).await);
    server.kill().await;
    let lost =
        "SELECT count(*) FROM alarms WHERE asset_id = 'OPCUA-SERVER' AND code = 'COMM_LOSS' AND cleared_at IS NULL";
    assert!(eventually(Duration::from_secs(30), || p.count(lost) == 1).await, "communication loss raised");
    assert!(p.count("SELECT count(*) FROM sensors WHERE opcua_node IS NOT NULL AND stale_since IS NOT NULL") >= 5);

    let mut server = Server::start(&x, port, &pki, 3).await;
    assert!(eventually(Duration::from_secs(30), || p.count(lost) == 0).await, "cleared when the server is back");
    server.say("set Pressure 9.5").await;
    assert!(
        eventually(Duration::from_secs(20), || p.count(&pressure(9.5)) == 1).await,
        "a value from the renumbered namespace arrived"
    );
    server.say("level 0.85").await;
    let raised =
        "SELECT count(*) FROM alarms WHERE asset_id = 'Tank' AND code = 'TANKLEVELCONDITION-H' AND cleared_at IS NULL";
    assert!(eventually(Duration::from_secs(20), || p.count(raised) == 1).await, "an alarm after the restart raised");
    assert_eq!(p.count("SELECT count(*) FROM alarms WHERE code = 'COMM_LOSS'"), 1, "one occurrence of the loss");
    daemon.shutdown().await;
}

/// Basic256Sha256 SignAndEncrypt: an unknown server certificate is refused with what
/// to do, kept among the rejected; once accepted by its thumbprint, the connect works,
/// with Aes128-Sha256-RsaOaep and Aes256-Sha256-RsaPss too, and as an X.509 user; a
/// wrong password is said.
#[tokio::test(flavor = "multi_thread")]
async fn an_untrusted_certificate_is_refused_until_trusted() {
    common::logs();
    let Some(x) = externals() else { return };
    let p = Plant::new();
    let port = common::free_port();
    let _server = Server::start(&x, port, &p.dir.path().join("server-pki"), 0).await;
    let config = config(
        &p,
        &format!("opc.tcp://127.0.0.1:{port}"),
        "security_policy = \"Basic256Sha256\"\nsecurity_mode = \"SignAndEncrypt\"\nuser = \"operator\"\npassword = \"secret-pw\"",
    );
    let out = p.dir.path().join("browsed");
    let browse = || twinops(&p, &config, &["opcua", "browse", "--out", out.to_str().unwrap()]);
    let refused = browse();
    assert!(!refused.status.success());
    assert!(
        text(&refused).contains("not trusted") && text(&refused).contains("twinops opcua trust"),
        "{}",
        text(&refused)
    );
    let check = |p: &Plant| {
        let out = text(&twinops(p, &config, &["check"]));
        out.lines().skip_while(|l| !l.contains(" opcua ")).take(2).collect::<Vec<_>>().join("\n")
    };
    let line = check(&p);
    assert!(line.starts_with("FAIL  opcua") && line.contains("not trusted"), "{line}");
    let listed = text(&twinops(&p, &config, &["opcua", "trust"]));
    let line = listed.lines().find(|l| l.starts_with("REJECTED")).unwrap_or_else(|| panic!("{listed}"));
    let thumbprint = line.split_whitespace().nth(1).unwrap();
    let accepted = twinops(&p, &config, &["opcua", "trust", "--accept", &thumbprint[..12]]);
    assert!(accepted.status.success(), "{}", text(&accepted));
    let trusted = browse();
    assert!(trusted.status.success(), "{}", text(&trusted));
    assert!(std::fs::read_to_string(out.join("tags.csv")).unwrap().contains("Tank.TankLevel"));
    let line = check(&p);
    assert!(line.starts_with("ok    opcua") && line.contains("Basic256Sha256 SignAndEncrypt, as operator"), "{line}");
    // The other policies, with the certificate now trusted.
    for (policy, mode) in [("Aes128-Sha256-RsaOaep", "SignAndEncrypt"), ("Aes256-Sha256-RsaPss", "Sign")] {
        let other = config_at(
            &p,
            &format!("opc.tcp://127.0.0.1:{port}"),
            &format!(
                "security_policy = \"{policy}\"\nsecurity_mode = \"{mode}\"\nuser = \"operator\"\npassword = \"secret-pw\""
            ),
        );
        let browsed = twinops(&p, &other, &["opcua", "browse", "--out", out.to_str().unwrap()]);
        assert!(browsed.status.success(), "{policy} {mode}: {}", text(&browsed));
    }
    // An X.509 user identity instead of a name and password.
    let (cert, key) = (p.dir.path().join("user/cert.der"), p.dir.path().join("user/key.pem"));
    let user = async_opcua::crypto::X509Data {
        key_size: 2048,
        common_name: "twinops-user".into(),
        organization: "Plant".into(),
        organizational_unit: "Control room".into(),
        country: "GB".into(),
        state: "".into(),
        alt_host_names: vec!["urn:twinops:user".to_string()].into(),
        certificate_duration_days: 30,
    };
    async_opcua::crypto::CertificateStore::create_certificate_and_key(&user, true, &cert, &key).unwrap();
    let x509 = config_at(
        &p,
        &format!("opc.tcp://127.0.0.1:{port}"),
        &format!(
            "security_policy = \"Basic256Sha256\"\nsecurity_mode = \"SignAndEncrypt\"\nuser_certificate = \"{}\"\nuser_private_key = \"{}\"",
            cert.display(),
            key.display()
        ),
    );
    let browsed = twinops(&p, &x509, &["opcua", "browse", "--out", out.to_str().unwrap()]);
    assert!(browsed.status.success(), "as an X.509 user: {}", text(&browsed));

    // Reached at an address its certificate does not name: refused for the host name,
    // before any certificate is kept, and `opcua trust` says so rather than "none yet".
    let elsewhere = Proxy::start_on("127.0.0.2", port).await;
    let other_host = config_at(
        &p,
        &format!("opc.tcp://127.0.0.2:{}", elsewhere.port),
        "security_policy = \"Basic256Sha256\"\nsecurity_mode = \"SignAndEncrypt\"\nuser = \"operator\"\npassword = \"secret-pw\"",
    );
    let refused = twinops(&p, &other_host, &["opcua", "browse", "--out", out.to_str().unwrap()]);
    assert!(!refused.status.success() && text(&refused).contains("does not name the host"), "{}", text(&refused));
    let listed = text(&twinops(&p, &other_host, &["opcua", "trust"]));
    let last = listed.lines().find(|l| l.starts_with("last refused: ")).unwrap_or_else(|| panic!("{listed}"));
    assert!(last.contains("opc.tcp://127.0.0.2") && last.contains("does not name the host"), "{last}");
    // Our own certificate's subject says twinops, not a placeholder's organisation and place.
    let own = async_opcua::crypto::CertificateStore::read_cert(&p.dir.path().join("opcua-pki/own/cert.der")).unwrap();
    assert_eq!(own.subject_name(), "CN=twinops");

    let wrong = config_with_password(&p, port, "wrong");
    let refused = twinops(&p, &wrong, &["opcua", "browse", "--out", out.to_str().unwrap()]);
    assert!(
        !refused.status.success() && text(&refused).contains("refused the login as user 'operator'"),
        "{}",
        text(&refused)
    );
}

fn config_with_password(p: &Plant, port: u16, password: &str) -> PathBuf {
    let extra = format!(
        "security_policy = \"Basic256Sha256\"\nsecurity_mode = \"SignAndEncrypt\"\nuser = \"operator\"\npassword = \"{password}\""
    );
    config(p, &format!("opc.tcp://127.0.0.1:{port}"), &extra)
}

/// A second, independent server: asyncua (Python), on a twin that has nothing yet.
/// `opcua browse` writes files a fresh database takes as they are (the site named after
/// the server, each object's node on its asset); values arrive; asyncua's alarm, whose
/// SourceNode is the pump object and InputNode its pressure variable, lands on the pump
/// and its sensor (not on the server's asset), is triaged, and clears. Before, asyncua
/// sent no events at all: it could not read the filter's null browse path. The
/// station's references become its connections: Controls, the site's FlowsTo, and its
/// PoweredBy the other way round; IsPhysicallyConnectedTo (no direction) is skipped.
#[tokio::test(flavor = "multi_thread")]
async fn values_and_an_alarm_from_asyncua_land_on_the_equipment() {
    common::logs();
    let Some(python) =
        common::external("TWINOPS_TEST_ASYNCUA", "a Python with asyncua 2.1 (pip install asyncua==2.1.0)")
    else {
        return;
    };
    let p = Plant::empty();
    let port = common::free_port();
    let mut server = Server(twinops::opcua::interop::Server::start_asyncua(&python, port).await.unwrap());
    let config = config(&p, &format!("opc.tcp://127.0.0.1:{port}"), "");
    let out = p.dir.path().join("browsed");
    let browse = twinops(&p, &config, &["opcua", "browse", "--out", out.to_str().unwrap()]);
    assert!(browse.status.success(), "{}", text(&browse));
    let plant_toml = std::fs::read_to_string(out.join("plant.toml")).unwrap();
    assert!(plant_toml.contains("[site]\nid = \"lift-station-3-gateway-asyncua\""), "{plant_toml}");
    let assets = std::fs::read_to_string(out.join("assets.csv")).unwrap();
    assert!(
        assets.contains("Pump01,OPCUA,equipment,Pump01,,,,,,,,LS3,,nsu=urn:twinops-test:asyncua;s=LS3.Pump01\n"),
        "{assets}"
    );
    let connections = std::fs::read_to_string(out.join("connections.csv")).unwrap();
    assert_eq!(connections, "from,kind,to\nMCC1,powers,Pump01\nRTU1,controls,Pump01\nWetWell,feeds,Pump01\n");
    assert!(
        text(&browse).contains("skipped RTU1 IsPhysicallyConnectedTo MCC1: not a connection twinops knows"),
        "{}",
        text(&browse)
    );
    // The guide's command, as written, on the empty twin.
    import_browsed(&p, &config, &out);
    assert_eq!(p.count("SELECT count(*) FROM asset_connections WHERE to_asset = 'Pump01'"), 3);
    assert_eq!(p.count("SELECT count(*) FROM assets WHERE id = 'Pump01' AND opcua_node LIKE 'nsu=%LS3.Pump01'"), 1);
    // plant export keeps the asset's node.
    let exported = p.dir.path().join("exported");
    let export = twinops(&p, &config, &["plant", "export", exported.to_str().unwrap()]);
    assert!(export.status.success(), "{}", text(&export));
    let again = std::fs::read_to_string(exported.join("assets.csv")).unwrap();
    assert!(again.contains("nsu=urn:twinops-test:asyncua;s=LS3.Pump01"), "{again}");

    let daemon = daemon(&p, &config).await;
    server.say("set 6.75").await;
    let stored = "SELECT count(*) FROM readings WHERE value = 6.75 \
                  AND sensor_key = (SELECT key FROM sensors WHERE id = 'Pump01.DischargePressure')";
    assert!(eventually(Duration::from_secs(20), || p.count(stored) == 1).await, "the value arrived");
    server.say("raise").await;
    let raised = "SELECT count(*) FROM alarms WHERE asset_id = 'Pump01' AND sensor_id = 'Pump01.DischargePressure' \
                  AND code = 'HIGHPRESSURE' AND cleared_at IS NULL";
    assert!(
        eventually(Duration::from_secs(20), || p.count(raised) == 1).await,
        "the alarm landed on the pump and its sensor: {}",
        p.text("SELECT coalesce(group_concat(asset_id || '/' || coalesce(sensor_id, '-') || '/' || code, ' | '), 'none') FROM alarms")
    );
    let noted = "SELECT count(*) FROM notes WHERE kind = 'triage' AND alarm_id IN (SELECT id FROM alarms WHERE asset_id = 'Pump01')";
    assert!(eventually(Duration::from_secs(60), || p.count(noted) >= 1).await, "it got a triage note");
    server.say("clear").await;
    let open = "SELECT count(*) FROM alarms WHERE code = 'HIGHPRESSURE' AND cleared_at IS NULL";
    assert!(eventually(Duration::from_secs(20), || p.count(open) == 0).await, "it cleared");
    assert_eq!(p.count("SELECT count(*) FROM alarms WHERE code = 'HIGHPRESSURE'"), 1, "one occurrence");
    assert_eq!(p.count("SELECT count(*) FROM alarms WHERE code != 'HIGHPRESSURE'"), 0, "nothing on the server's asset");
    daemon.shutdown().await;
    server.kill().await;
}
