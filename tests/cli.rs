//! The `twinops` binary as a user runs it: tool definitions, one tool call printed as
//! a model would receive it, the exit codes, and help with examples.

mod common;

use std::process::{Command, Output};

use common::Plant;
use serde_json::Value;

fn twinops(plant: &Plant, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_twinops"))
        .arg("--db")
        .arg(plant.db_path())
        .args(args)
        .output()
        .expect("run twinops")
}

/// `twinops` with `input` on its stdin (passwords are read from there when it is not
/// a terminal).
fn twinops_with_input(plant: &Plant, args: &[&str], input: &str) -> Output {
    use std::io::Write;
    let mut child = Command::new(env!("CARGO_BIN_EXE_twinops"))
        .arg("--db")
        .arg(plant.db_path())
        .args(args)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("run twinops");
    child.stdin.take().unwrap().write_all(input.as_bytes()).unwrap();
    child.wait_with_output().unwrap()
}

fn stdout(out: &Output) -> String {
    String::from_utf8(out.stdout.clone()).unwrap()
}

/// `twinops serve --demo` on a fresh data directory, its MQTT on a free port, `env` set
/// on top (the model, the log level...). Its stderr lines arrive on `lines`.
struct Demo {
    child: std::process::Child,
    lines: std::sync::mpsc::Receiver<String>,
    reader: std::thread::JoinHandle<Vec<String>>,
}

impl Demo {
    fn start(dir: &std::path::Path, env: &[(&str, &str)]) -> Demo {
        use std::io::{BufRead, BufReader};
        let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
        let mut child = Command::new(env!("CARGO_BIN_EXE_twinops"))
            .arg("--data-dir")
            .arg(dir)
            .args(["--config", "/nonexistent/twinops.toml", "serve", "--demo", "--seed-from"])
            .arg(common::seed_dir())
            .env("TWINOPS_MQTT_LISTEN", format!("127.0.0.1:{port}"))
            .env_remove("TWINOPS_LLM_KIND")
            .env_remove("TWINOPS_MQTT_URL")
            .envs(env.iter().copied())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let (tx, lines) = std::sync::mpsc::channel();
        let stderr = child.stderr.take().unwrap();
        let reader = std::thread::spawn(move || {
            let mut all = Vec::new();
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                let _ = tx.send(line.clone());
                all.push(line);
            }
            all
        });
        Demo { child, lines, reader }
    }

    /// Stops it with SIGTERM: its exit status, and every line it wrote.
    fn stop(mut self) -> (std::process::ExitStatus, Vec<String>) {
        let _ = Command::new("kill").args(["-TERM", &self.child.id().to_string()]).status();
        let status = self.child.wait().unwrap();
        (status, self.reader.join().unwrap())
    }
}

#[test]
fn tools_list_prints_openai_and_anthropic_definitions() {
    let p = Plant::new();
    let out = twinops(&p, &["tools", "list"]);
    assert!(out.status.success());
    let defs: Value = serde_json::from_str(&stdout(&out)).unwrap();
    let defs = defs.as_array().unwrap();
    assert_eq!(defs.len(), 14);
    assert!(defs.iter().all(|d| d["type"] == "function" && d["function"]["parameters"]["type"] == "object"));
    let out = twinops(&p, &["tools", "list", "--format", "anthropic"]);
    let defs: Value = serde_json::from_str(&stdout(&out)).unwrap();
    assert!(defs.as_array().unwrap().iter().all(|d| d["input_schema"]["type"] == "object" && d["name"].is_string()));
}

/// `twinops tools list | grep -q function` ends as any Unix tool does when its reader
/// leaves: killed by SIGPIPE, with no panic on stderr.
#[test]
fn a_command_whose_reader_has_left_ends_quietly() {
    use std::os::unix::process::ExitStatusExt;
    let p = Plant::new();
    let (reader, writer) = std::io::pipe().unwrap();
    drop(reader);
    let out = Command::new(env!("CARGO_BIN_EXE_twinops"))
        .arg("--db")
        .arg(p.db_path())
        .args(["tools", "list"])
        .stdout(writer)
        .output()
        .expect("run twinops");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!stderr.contains("panicked"), "{stderr}");
    assert_eq!(out.status.signal(), Some(libc::SIGPIPE), "{:?}", out.status);
}

/// The acceptance example: the developing vibration fault on PUMP-007, from the CLI.
#[test]
fn tools_call_shows_the_fault_and_errors_exit_2() {
    let p = Plant::new();
    let out = twinops(&p, &["tools", "call", "get_asset_details", r#"{"asset_id":"PUMP-007"}"#, "--now", common::END]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let d: Value = serde_json::from_str(&stdout(&out)).unwrap();
    let de = d["sensors"].as_array().unwrap().iter().find(|s| s["id"] == "PUMP-007.VIB-DE").unwrap().clone();
    assert_eq!(de["band"], "high");
    assert_eq!(d["active_alarms"][0]["code"], "VIB-HI");

    let out = twinops(&p, &["tools", "call", "search_docs", r#"{"query":"VIB-HI"}"#]);
    let r: Value = serde_json::from_str(&stdout(&out)).unwrap();
    assert_eq!(r["results"][0]["citation"], "arp-vibration.md#1");

    let out = twinops(&p, &["tools", "call", "get_asset_details", r#"{"asset_id":"PUMP-070"}"#]);
    assert_eq!(out.status.code(), Some(2));
    assert!(stdout(&out).contains("Closest asset ids: PUMP-007"));
    let out = twinops(&p, &["tools", "call", "get_asset_details", "{not json"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("the arguments are not JSON"));
}

#[test]
fn every_command_has_help_with_an_example() {
    let p = Plant::new();
    for cmd in [
        &["seed"][..],
        &["docs", "index"],
        &["docs", "search"],
        &["tools", "list"],
        &["tools", "call"],
        &["bench", "tools"],
        &["broker"],
        &["dead-letters", "list"],
        &["dead-letters", "replay"],
        &["handover"],
        &["backup"],
    ] {
        let mut args: Vec<&str> = cmd.to_vec();
        args.push("--help");
        let out = twinops(&p, &args);
        let text = stdout(&out);
        assert!(out.status.success() && text.contains("Example"), "{cmd:?}: {text}");
        assert!(text.contains("--db"), "{cmd:?} takes --db");
    }
}

/// `alarms ack ID --returned` acknowledges the point's returned-to-normal occurrences
/// and names them; with none left, it says so and exits 1.
#[test]
fn alarms_ack_returned_takes_a_points_returned_alarms_together() {
    let p = Plant::new();
    let returned = "SELECT count(*) FROM alarms WHERE asset_id = 'PUMP-004' AND code = 'PRESS-SUC-LO' AND state = 'rtn_unacknowledged'";
    let waiting = p.count(returned);
    assert!(waiting > 1, "the seeded plant has repeats: {waiting}");
    let one = p
        .count("SELECT max(id) FROM alarms WHERE asset_id = 'PUMP-004' AND code = 'PRESS-SUC-LO' AND state = 'rtn_unacknowledged'")
        .to_string();
    let out = twinops(&p, &["alarms", "ack", &one, "--returned", "--user", "operator.kaur"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let said = stdout(&out);
    assert!(
        said.starts_with(&format!("{waiting} returned-to-normal alarm(s) acknowledged")) && said.contains(&one),
        "{said}"
    );
    assert_eq!(p.count(returned), 0);
    let again = twinops(&p, &["alarms", "ack", &one, "--returned"]);
    assert_eq!(again.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&again.stderr).contains("no returned-to-normal alarm waiting"));
}

/// The operator's view of dead letters: listed with their reason, replayed by reason,
/// and the exit code says whether any was refused again.
#[test]
fn dead_letters_list_and_replay() {
    let p = Plant::new();
    let message =
        r#"[{"type": "reading", "sensor_id": "PUMP-001.FLOW2", "time": "2026-11-30T12:00:00Z", "value": 12.0}]"#;
    twinops::ingest::apply(
        p.store.writer(),
        "scada/telemetry",
        message.as_bytes(),
        twinops::domain::Timestamp::now(),
        Default::default(),
    )
    .unwrap();
    let out = twinops(&p, &["dead-letters", "list"]);
    let text = stdout(&out);
    assert!(
        out.status.success() && text.contains("unknown_sensor") && text.contains("no sensor PUMP-001.FLOW2"),
        "{text}"
    );

    let out = twinops(&p, &["dead-letters", "replay", "--reason", "unknown_sensor", "--user", "operator.kaur"]);
    assert_eq!(out.status.code(), Some(1), "refused again: {}", stdout(&out));
    assert!(stdout(&out).contains("refused again, unknown_sensor"), "{}", stdout(&out));

    p.write(
        "INSERT INTO sensors (id, asset_id, kind, description, unit) VALUES ('PUMP-001.FLOW2', 'PUMP-001', 'flow', 'second flow meter', 'm3/h')",
    );
    let out = twinops(&p, &["dead-letters", "replay", "--reason", "unknown_sensor"]);
    assert!(out.status.success(), "{}", stdout(&out));
    assert!(stdout(&out).contains("1 applied, 0 not"), "{}", stdout(&out));
    assert!(stdout(&twinops(&p, &["dead-letters", "list"])).contains("(none)"));
    assert!(stdout(&twinops(&p, &["dead-letters", "list", "--all"])).contains("(replayed "));

    let out = twinops(&p, &["dead-letters", "replay"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("name dead letters by id, or --reason"));
}

/// `twinops broker` on a port that is taken says so and which setting to change,
/// instead of running without a listener.
#[test]
fn broker_on_a_taken_port_fails_clearly() {
    let p = Plant::new();
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let listen = taken.local_addr().unwrap().to_string();
    let out = twinops(&p, &["broker", "--listen", &listen]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(err.contains(&format!("cannot listen on {listen}")), "{err}");
}

/// A client that disconnects cleanly (DISCONNECT, then closing its socket, as twinops
/// and the simulator do) leaves no ERROR in the broker's log: rumqttd logs one ("no-
/// connection id N is already gone") for the second of the two, and twinops drops it.
#[tokio::test(flavor = "multi_thread")]
async fn a_clean_disconnect_leaves_no_error_in_the_broker_log() {
    use std::io::Read;
    let listen = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().to_string();
    let mut broker = Command::new(env!("CARGO_BIN_EXE_twinops"))
        .args(["broker", "--listen", &listen])
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    tokio::time::sleep(std::time::Duration::from_millis(500)).await;
    for n in 0..3 {
        let cfg = twinops::config::MqttConfig { url: format!("mqtt://{listen}"), ..Default::default() };
        let (client, mut eventloop) =
            rumqttc::AsyncClient::new(twinops::ingest::mqtt::options(&cfg, &format!("clean-{n}")).unwrap(), 10);
        client.subscribe("clean/#", rumqttc::QoS::AtLeastOnce).await.unwrap();
        let session = tokio::time::timeout(std::time::Duration::from_secs(10), async {
            loop {
                match eventloop.poll().await {
                    Ok(rumqttc::Event::Incoming(rumqttc::Packet::SubAck(_))) => client.disconnect().await.unwrap(),
                    Ok(rumqttc::Event::Outgoing(rumqttc::Outgoing::Disconnect)) => break,
                    Ok(_) => {}
                    Err(e) => panic!("{e}"),
                }
            }
        });
        session.await.expect("subscribed and disconnected within 10 s");
        drop(eventloop);
    }
    tokio::time::sleep(std::time::Duration::from_millis(500)).await;
    broker.kill().unwrap();
    broker.wait().unwrap();
    let mut log = String::new();
    broker.stderr.take().unwrap().read_to_string(&mut log).unwrap();
    assert!(log.contains(&format!("MQTT on {listen}")), "the broker's log was read: {log}");
    assert!(!log.contains("ERROR"), "{log}");
}

#[test]
fn seed_into_a_fresh_data_dir_then_refuse_to_seed_again() {
    let dir = tempfile::tempdir().unwrap();
    let seed_dir = common::seed_dir();
    let run = || {
        Command::new(env!("CARGO_BIN_EXE_twinops"))
            .args(["--data-dir"])
            .arg(dir.path())
            .args(["seed", "--days", "1", "--from"])
            .arg(&seed_dir)
            .output()
            .unwrap()
    };
    let out = run();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(stdout(&out).contains("18 assets, 60 sensors, 86400 readings"), "{}", stdout(&out));
    assert!(dir.path().join("twinops.db").exists());
    let again = run();
    assert_eq!(again.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&again.stderr).contains("already holds a plant"));
}

/// With no model configured, `twinops triage` uses the offline rules model, prints a
/// grounded note, and `runs show` prints the run's trace.
#[test]
fn triage_without_a_model_uses_the_rules_model_and_runs_show_the_trace() {
    let p = Plant::new();
    let alarm = p.count("SELECT id FROM alarms WHERE asset_id = 'PUMP-007' AND cleared_at IS NULL").to_string();
    let out = Command::new(env!("CARGO_BIN_EXE_twinops"))
        .arg("--db")
        .arg(p.db_path())
        .args(["--config", "/nonexistent/twinops.toml", "triage", &alarm, "--now", common::END])
        .env_remove("TWINOPS_LLM_KIND")
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let note: Value = serde_json::from_str(&stdout(&out)).unwrap();
    assert!(note["summary"].as_str().unwrap().contains("PUMP-007.VIB-DE reads"), "{note}");
    // The site's rationalization of VIB-HI (the demo's sheet) is the response; the
    // procedure it came from is cited as evidence.
    assert_eq!(note["recommended_actions"][0], "Check the 24-hour and 7-day trend of the alarmed sensor", "{note}");
    assert!(note["evidence"].to_string().contains("arp-vibration.md#1"), "{note}");
    let summary = String::from_utf8_lossy(&out.stderr).to_string();
    assert!(summary.contains("final via rules") && !summary.contains("flagged"), "{summary}");

    let trace = twinops(&p, &["runs", "show", "1"]);
    let text = stdout(&trace);
    assert!(text.contains("outcome final, model rules") && text.contains("tool_call  get_sensor_history"), "{text}");
    let missing = twinops(&p, &["runs", "show", "99"]);
    assert_eq!(missing.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&missing.stderr).contains("no agent run 99"));
}

/// `twinops handover` writes one now and prints it; `--last N` prints the stored ones,
/// newest first, without a model run.
#[test]
fn handover_writes_now_and_last_prints_the_stored_ones() {
    let p = Plant::new();
    let run = |args: &[&str]| {
        let out = Command::new(env!("CARGO_BIN_EXE_twinops"))
            .arg("--db")
            .arg(p.db_path())
            .args(["--config", "/nonexistent/twinops.toml"])
            .args(args)
            .env_remove("TWINOPS_LLM_KIND")
            .env("USER", "kaur")
            .output()
            .unwrap();
        assert!(out.status.success(), "{args:?}: {}", String::from_utf8_lossy(&out.stderr));
        stdout(&out)
    };
    assert!(run(&["handover", "--last", "3"]).contains("no handover yet"));
    let first = run(&["handover"]);
    assert!(first.starts_with("-- handover note 1 at ") && first.contains("(final via rules)"), "{first}");
    assert!(first.contains("\nShift handover: 18 assets;"), "{first}");
    run(&["handover"]);
    let last = run(&["handover", "--last", "3"]);
    let (two, one) = (last.find("-- handover note 2 ").unwrap(), last.find("-- handover note 1 ").unwrap());
    assert!(two < one, "newest first: {last}");
    assert_eq!(p.count("SELECT count(*) FROM agent_runs WHERE profile = 'handover' AND trigger = 'user:kaur'"), 2);
}

/// `twinops backup` copies the twin while another connection is mid-write (as the
/// daemon's writer would be): the copy holds what was committed, not the open
/// transaction, passes its integrity check, and never overwrites a file.
#[test]
fn backup_copies_what_is_committed_while_a_writer_is_busy() {
    let p = Plant::new();
    let writer = rusqlite::Connection::open(p.db_path()).unwrap();
    writer.busy_timeout(std::time::Duration::from_secs(5)).unwrap();
    writer.execute_batch("BEGIN IMMEDIATE; DELETE FROM readings;").unwrap();

    let to = p.dir.path().join("backups").join("twinops-copy.db");
    std::fs::create_dir_all(to.parent().unwrap()).unwrap();
    let out = twinops(&p, &["backup", to.to_str().unwrap()]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let said = stdout(&out);
    assert!(said.contains("written to") && said.contains("integrity ok"), "{said}");
    writer.execute_batch("ROLLBACK").unwrap();

    let count = |db: &std::path::Path, sql: &str| -> i64 {
        rusqlite::Connection::open(db).unwrap().query_row(sql, [], |r| r.get(0)).unwrap()
    };
    let readings = "SELECT count(*) FROM readings";
    assert!(count(&to, readings) > 300_000, "the uncommitted delete is not in the copy");
    assert_eq!(count(&to, readings), count(&p.db_path(), readings));
    assert_eq!(count(&to, "SELECT count(*) FROM alarms"), p.count("SELECT count(*) FROM alarms"));
    assert!(!to.with_file_name("twinops-copy.db.partial").exists());

    let again = twinops(&p, &["backup", to.to_str().unwrap()]);
    assert_eq!(again.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&again.stderr).contains("a backup never overwrites one"));
}

/// Every command that reads the seed folder takes it as `--from`, which is what its
/// error says to pass when the folder is not where it looked.
#[test]
fn a_missing_seed_folder_names_the_flag_that_fixes_it() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("no-seed");
    let missing = missing.to_str().unwrap();
    for args in [vec!["seed", "--from", missing], vec!["serve", "--demo", "--from", missing]] {
        let out = Command::new(env!("CARGO_BIN_EXE_twinops"))
            .arg("--data-dir")
            .arg(dir.path())
            .args(["--config", "/nonexistent/twinops.toml"])
            .args(&args)
            .env("TWINOPS_MQTT_LISTEN", "127.0.0.1:0")
            .env("TWINOPS_WEB_LISTEN", "")
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{args:?}: {err}");
        assert!(err.contains(&format!("reading {missing}/plant.toml (pass --from with the folder")), "{args:?}: {err}");
    }
}

/// With a model server that refuses the API key and echoes it back, the daemon says in
/// its log that the provider failed and triage falls back to the rules model; the key
/// is in neither the log (at debug level) nor the audit trail.
#[test]
fn a_failing_model_provider_is_logged_without_its_key() {
    use std::time::{Duration, Instant};
    const KEY: &str = "sk-live-4f9c2e7a1b3d5e6f";
    let rt = tokio::runtime::Runtime::new().unwrap();
    let echo = twinops::scripted::Reply::Status {
        status: 401,
        headers: Vec::new(),
        body: format!(r#"{{"error": {{"message": "Incorrect API key provided: {KEY}"}}}}"#),
    };
    let server = rt.block_on(twinops::scripted::ScriptedServer::cycling(vec![echo]));
    let dir = tempfile::tempdir().unwrap();
    let url = server.openai_url();
    let demo = Demo::start(
        dir.path(),
        &[
            ("TWINOPS_WEB_LISTEN", ""),
            ("TWINOPS_LLM_KIND", "openai"),
            ("TWINOPS_LLM_MODEL", "gpt-test"),
            ("TWINOPS_LLM_BASE_URL", &url),
            ("TWINOPS_LLM_API_KEY", KEY),
            ("TWINOPS_LOG", "debug"),
        ],
    );
    let started = Instant::now();
    let mut degraded = false;
    while !degraded && started.elapsed() < Duration::from_secs(180) {
        degraded = demo
            .lines
            .recv_timeout(Duration::from_millis(500))
            .is_ok_and(|line| line.starts_with("note ") && line.contains("(degraded)"));
    }
    let log = demo.stop().1.join("\n");
    assert!(degraded, "a degraded note within 180 s (the demo seeds its week first)");
    assert!(!server.requests().is_empty(), "the provider was called");
    assert!(log.contains("the model provider failed; falling back"), "the failure is in the log");
    assert!(log.contains("[redacted]"), "with the server's message, key cut out");
    assert!(!log.contains(KEY), "the key reached the log");
    let db = rusqlite::Connection::open(dir.path().join("twinops.db")).unwrap();
    let leaked: i64 = db
        .query_row(
            "SELECT count(*) FROM agent_steps WHERE instr(coalesce(result, '') || coalesce(arguments, ''), ?1) > 0",
            [KEY],
            |r| r.get(0),
        )
        .unwrap();
    assert_eq!(leaked, 0, "the key reached the audit trail");
}

/// `twinops serve --demo` on a fresh data directory seeds the plant, starts the
/// embedded broker and the simulator, and prints triage notes within a minute, and a
/// handover written by `twinops handover` beside it; SIGTERM stops it cleanly.
#[test]
fn serve_demo_produces_notes_within_a_minute() {
    use std::time::{Duration, Instant};
    let dir = tempfile::tempdir().unwrap();
    let demo = Demo::start(dir.path(), &[("TWINOPS_WEB_LISTEN", "127.0.0.1:0")]);
    let started = Instant::now();
    let (mut note, mut login) = (None, None);
    while started.elapsed() < Duration::from_secs(60) {
        if let Ok(line) = demo.lines.recv_timeout(Duration::from_millis(500)) {
            if line.starts_with("demo supervisor login (shown once): supervisor / ") {
                login = Some(line);
            } else if line.starts_with("note ") {
                note = Some(line);
                break;
            }
        }
    }
    // A handover written from another process shows on the daemon's terminal too.
    let written = Command::new(env!("CARGO_BIN_EXE_twinops"))
        .arg("--data-dir")
        .arg(dir.path())
        .args(["--config", "/nonexistent/twinops.toml", "handover"])
        .env_remove("TWINOPS_LLM_KIND")
        .output()
        .unwrap();
    assert!(written.status.success(), "{}", String::from_utf8_lossy(&written.stderr));
    let told = Instant::now();
    let mut handover = None;
    while handover.is_none() && told.elapsed() < Duration::from_secs(20) {
        if let Ok(line) = demo.lines.recv_timeout(Duration::from_millis(500)) {
            handover = line.starts_with("shift handover, note ").then_some(line);
        }
    }
    let (status, _) = demo.stop();
    let handover = handover.expect("the handover on the daemon's terminal within 20 s");
    assert!(handover.contains("(user:"), "who asked: {handover}");
    let note = note.expect("a triage note within 60 s");
    assert!(note.contains("(final)") || note.contains("(degraded)"), "{note}");
    assert!(status.success(), "SIGTERM is a clean stop: {status:?}");
    let db = rusqlite::Connection::open(dir.path().join("twinops.db")).unwrap();
    let notes: i64 = db.query_row("SELECT count(*) FROM notes", [], |r| r.get(0)).unwrap();
    assert!(notes >= 1);
    let password = login.expect("the demo supervisor's password, printed once").rsplit(' ').next().unwrap().to_string();
    let hash: String = db
        .query_row("SELECT password_hash FROM users WHERE name = 'supervisor' AND role = 'supervisor'", [], |r| {
            r.get(0)
        })
        .unwrap();
    assert!(hash.starts_with("$argon2id$") && !hash.contains(&password), "stored hashed");
    let running: i64 =
        db.query_row("SELECT count(*) FROM triage_jobs WHERE state = 'running'", [], |r| r.get(0)).unwrap();
    assert_eq!(running, 0, "nothing left running after a graceful stop");
}

/// Accounts from the command line, as an installer manages them on the box: add, role,
/// disable (not the last admin), list, reset; tokens created, listed and revoked. Each
/// refusal says why and exits non-zero.
#[test]
fn users_and_tokens_are_managed_from_the_command_line() {
    let p = Plant::new();
    let password = "correct horse battery staple\n";
    for (name, role) in [("admin.lee", "admin"), ("operator.kaur", "operator")] {
        let out = twinops_with_input(&p, &["user", "add", name, "--role", role], password);
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    }
    let out = twinops(&p, &["user", "role", "operator.kaur", "supervisor"]);
    assert_eq!(stdout(&out).trim(), "operator.kaur is now supervisor");
    let out = twinops(&p, &["user", "role", "operator.kaur", "boss"]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("expected one of: viewer, operator, supervisor, admin"));
    let out = twinops(&p, &["user", "disable", "admin.lee"]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("admin.lee is the only admin left"));
    assert!(twinops(&p, &["user", "disable", "operator.kaur"]).status.success());
    let list = stdout(&twinops(&p, &["user", "list"]));
    let header = list.lines().next().unwrap();
    for column in ["role", "state", "created"] {
        let at = header.find(column).unwrap();
        for line in list.lines().skip(1) {
            let starts_here = line.get(..at).is_some_and(|before| before.ends_with(' '))
                && line.get(at..).is_some_and(|rest| !rest.starts_with(' '));
            assert!(starts_here, "the {column} column lines up:\n{list}");
        }
    }
    let kaur = list.lines().find(|l| l.starts_with("operator.kaur")).unwrap();
    assert_eq!(
        kaur.split_whitespace().take(4).collect::<Vec<_>>(),
        ["operator.kaur", "supervisor", "local", "disabled"]
    );
    let out = twinops_with_input(&p, &["user", "passwd", "nobody"], password);
    assert!(String::from_utf8_lossy(&out.stderr).contains("no user named nobody"));
    let out = twinops_with_input(&p, &["user", "passwd", "admin.lee"], "a new passphrase for lee\n");
    assert!(out.status.success());
    assert_eq!(p.count("SELECT count(*) FROM audit_log WHERE action = 'password_set' AND detail = 'admin.lee'"), 1);

    let out = twinops(&p, &["token", "create", "--user", "admin.lee", "--label", "historian"]);
    let token = stdout(&out).trim().to_string();
    assert!(token.starts_with("tw_"), "{token}");
    assert!(twinops::accounts::token_user(&p.store, &token).unwrap().is_some());
    let list = stdout(&twinops(&p, &["token", "list"]));
    let row: Vec<String> = list.lines().nth(1).unwrap().split_whitespace().map(String::from).collect();
    assert_eq!((row[1].as_str(), row[2].as_str(), row.last().unwrap().as_str()), ("admin.lee", "historian", "live"));
    assert!(!list.contains(&token), "never the token itself");
    assert_eq!(stdout(&twinops(&p, &["token", "revoke", &row[0]])).trim(), format!("token {} is revoked", row[0]));
    assert!(twinops::accounts::token_user(&p.store, &token).unwrap().is_none());
    assert!(stdout(&twinops(&p, &["token", "list"])).lines().nth(1).unwrap().ends_with("revoked"));
    let out = twinops(&p, &["token", "revoke", "99"]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("no API token 99"));
}

/// `twinops alarms kpi` prints the figures with their targets and definitions (text,
/// Markdown, JSON alike), and `twinops alarms export` writes the journal as CSV, one
/// row per event, to the millisecond, with spreadsheet formulas defused.
#[test]
fn alarm_kpis_and_the_journal_export_from_the_command_line() {
    let p = Plant::new();
    let window = ["--from", "2026-11-23T12:00:00Z", "--to", "2026-11-30T12:00:00Z"];
    let json_out = twinops(&p, &[&["alarms", "kpi", "--format", "json"][..], &window].concat());
    assert!(json_out.status.success(), "{}", String::from_utf8_lossy(&json_out.stderr));
    let k: Value = serde_json::from_str(&stdout(&json_out)).unwrap();
    let annunciated = k["annunciated"].as_i64().unwrap();
    assert!(annunciated > 0, "{k}");
    let text = stdout(&twinops(&p, &[&["alarms", "kpi"][..], &window].concat()));
    assert!(text.contains(&format!("annunciated activations                    {annunciated}")), "{text}");
    assert!(text.contains("~1 very likely acceptable, ~2 maximum manageable"), "{text}");
    assert!(text.contains("chattering: a point with 3 or more activations within 60 s"), "{text}");
    let md =
        stdout(&twinops(&p, &[&["alarms", "kpi", "--format", "md", "--chatter-count", "4"][..], &window].concat()));
    assert!(
        md.starts_with("# Alarm performance from 2026-11-23T12:00:00Z") && md.contains("| figure | value |"),
        "{md}"
    );
    assert!(md.contains("4 or more activations"), "{md}");
    let bad = twinops(&p, &["alarms", "kpi", "--from", "2026-12-01", "--to", "2026-11-01"]);
    assert!(!bad.status.success() && String::from_utf8_lossy(&bad.stderr).contains("must be before to"));

    p.write(
        "INSERT INTO alarms (event_id, asset_id, code, severity, state, message, raised_at, last_raised_at)
         VALUES ('csv-1', 'PUMP-007', 'CSV-TEST', 'low', 'unacknowledged', '=HYPERLINK(\"x\")', 1795953600, 1795953600);
         INSERT INTO alarm_events (alarm_id, event_id, kind, at, millis, actor, detail)
         VALUES (last_insert_rowid(), 'csv-1', 'raised', 1795953600, 250, 'scada', '=HYPERLINK(\"x\")');",
    );
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("journal.csv");
    let out = twinops(&p, &[&["alarms", "export"][..], &window, &[file.to_str().unwrap()]].concat());
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let csv = std::fs::read_to_string(&file).unwrap();
    let rows: Vec<&str> = csv.lines().collect();
    assert_eq!(rows[0], "time,asset_id,sensor_id,code,severity,event,actor,alarm_id,event_id,detail,episode_id");
    let events = p.count("SELECT count(*) FROM alarm_events WHERE at >= 1795435200 AND at < 1796040000");
    assert_eq!(rows.len() as i64 - 1, events, "one row per journal event");
    let row = rows.iter().find(|r| r.contains("CSV-TEST")).unwrap();
    assert!(row.starts_with("2026-11-29T12:00:00.250Z,PUMP-007,,CSV-TEST,low,raised,scada,"), "{row}");
    assert!(row.ends_with(",csv-1,\"'=HYPERLINK(\"\"x\"\")\","), "a formula is defused; no episode: {row}");
    assert!(rows.iter().any(|r| r.contains(",acked,") || r.contains(",cleared,")), "every kind of event");
}
