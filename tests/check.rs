//! `twinops check`, run as a site's engineer runs it: the binary, a configuration file,
//! and what it points at (a real SQLite file, the scripted model server over HTTP, a
//! real Mosquitto in CI). A working configuration passes every line; each fault is its
//! own failed line that says what to do, and the exit status says whether any failed.

mod common;

use std::net::TcpListener;
use std::path::Path;
use std::process::Command;

use serde_json::json;
use tempfile::TempDir;
use twinops::scripted::{Reply, ScriptedServer};

/// `twinops --config CONFIG check`: its exit status and what it printed.
fn check(config: &Path) -> (bool, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_twinops"))
        .arg("--config")
        .arg(config)
        .arg("check")
        .env_remove("TWINOPS_DATA_DIR")
        .env_remove("TWINOPS_DB")
        .env_remove("TWINOPS_MQTT_URL")
        .env_remove("TWINOPS_LLM_KIND")
        .env_remove("TWINOPS_EMBEDDINGS_BASE_URL")
        .output()
        .unwrap();
    (out.status.success(), format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr)))
}

/// The line for `item`, with the fix under it if any.
fn line<'a>(out: &'a str, item: &str) -> String {
    let lines: Vec<&'a str> = out.lines().collect();
    let at = lines
        .iter()
        .position(|l| l.split_whitespace().nth(1) == Some(item))
        .unwrap_or_else(|| panic!("no line for {item}:\n{out}"));
    let fix = lines.get(at + 1).filter(|l| l.trim_start().starts_with("->")).copied().unwrap_or_default();
    format!("{}\n{fix}", lines[at])
}

fn write_config(dir: &TempDir, toml: &str) -> std::path::PathBuf {
    let path = dir.path().join("twinops.toml");
    std::fs::write(&path, toml).unwrap();
    path
}

#[tokio::test(flavor = "multi_thread")]
async fn a_working_configuration_passes_every_line() {
    let dir = TempDir::new().unwrap();
    let model = ScriptedServer::cycling(vec![Reply::call("c1", "ping", json!({"echo": "twinops"}))]).await;
    model.serve_embeddings(|text| vec![text.len() as f32, 1.0, 0.5]);
    let docs = dir.path().join("manuals");
    std::fs::create_dir(&docs).unwrap();
    std::fs::write(docs.join("pump.md"), "# Pump\nCheck the seal.").unwrap();
    std::fs::write(docs.join("notes.docx"), "not read").unwrap();
    let data = dir.path().join("state");
    let config = write_config(
        &dir,
        &format!(
            "data_dir = \"{data}\"\n[mqtt]\nembedded_listen = \"127.0.0.1:{mqtt}\"\n[web]\nlisten = \"127.0.0.1:{web}\"\n\
             [schedule]\ndocs_dir = \"{docs}\"\n[embeddings]\nbase_url = \"{url}\"\nmodel = \"minilm\"\n\
             [[llm.chain]]\nkind = \"openai\"\nbase_url = \"{url}\"\nmodel = \"qwen\"\n\
             [[llm.chain]]\nkind = \"rules\"\n",
            data = data.display(),
            mqtt = common::free_port(),
            web = common::free_port(),
            docs = docs.display(),
            url = model.openai_url(),
        ),
    );

    let (passed, out) = check(&config);
    assert!(passed, "{out}");
    for item in ["config", "database", "mqtt", "llm.chain[0]", "llm.chain[1]", "embeddings", "web", "documents"] {
        assert!(line(&out, item).starts_with("ok "), "{item}:\n{out}");
    }
    assert!(line(&out, "database").contains("not there yet, created at first start"), "{out}");
    assert!(line(&out, "documents").contains("1 manuals to index, 1 other files"), "{out}");
    assert!(line(&out, "embeddings").contains("a 3-dimension vector"), "{out}");
    assert!(line(&out, "webhook").starts_with("off "), "{out}");
    assert!(out.contains("all 8 checks passed"), "{out}");
    assert!(line(&out, "config").ends_with("read\n"), "no setting from the environment: {out}");
    // The model was asked for one tool call, with the tool offered.
    let asked = model.requests();
    let chat = asked.iter().find(|r| r.get("messages").is_some()).expect("a chat request");
    assert_eq!(chat["tools"][0]["function"]["name"], "ping", "{chat}");

    // Once the daemon has made the database: its schema, and nothing migrated by a check.
    twinops::store::Store::open(&data.join("twinops.db")).unwrap();
    let (passed, out) = check(&config);
    assert!(passed, "{out}");
    let schema = twinops::store::SCHEMA_VERSION;
    assert!(line(&out, "database").contains(&format!("schema {schema}, writable")), "{out}");
}

#[tokio::test(flavor = "multi_thread")]
async fn each_fault_is_its_own_line_with_what_to_do() {
    let dir = TempDir::new().unwrap();
    // A database from a later release, a port taken, nothing where the broker and the
    // model server should be, a documents folder that is not there.
    let db_dir = dir.path().join("state");
    std::fs::create_dir(&db_dir).unwrap();
    let conn = rusqlite::Connection::open(db_dir.join("twinops.db")).unwrap();
    conn.pragma_update(None, "user_version", 999).unwrap();
    drop(conn);
    let taken = TcpListener::bind("127.0.0.1:0").unwrap();
    let closed = common::free_port();
    let config = write_config(
        &dir,
        &format!(
            "data_dir = \"{data}\"\n[mqtt]\nurl = \"mqtt://127.0.0.1:{closed}\"\n[web]\nlisten = \"{web}\"\n\
             [schedule]\ndocs_dir = \"{docs}\"\n[notify]\nwebhook_url = \"http://127.0.0.1:{closed}/hooks/T0KEN\"\n\
             [[llm.chain]]\nkind = \"openai\"\nbase_url = \"http://127.0.0.1:{closed}/v1\"\nmodel = \"qwen\"\n",
            data = db_dir.display(),
            web = taken.local_addr().unwrap(),
            docs = dir.path().join("no-manuals").display(),
        ),
    );

    let (passed, out) = check(&config);
    assert!(!passed, "{out}");
    let expect = [
        ("database", "schema 999, newer than this build's", "restore a backup"),
        ("mqtt", "Connection refused", "nothing listens there"),
        ("llm.chain[0]", "Connection refused", "is it running, and is base_url right"),
        ("web", "in use", "change web.listen"),
        ("documents", "no-manuals", "fix schedule.docs_dir"),
        ("webhook", "Connection refused", "check the host"),
    ];
    for (item, what, fix) in expect {
        let l = line(&out, item);
        assert!(l.starts_with("FAIL "), "{item}:\n{out}");
        assert!(l.contains(what) && l.contains(fix), "{item} should say '{what}' and '{fix}':\n{l}");
    }
    assert!(!out.contains("T0KEN"), "the webhook's path holds a token and is not printed:\n{out}");
    assert!(out.contains("6 of 7 checks failed"), "{out}");

    // A configuration that does not parse is one failed line naming the key.
    let bad = write_config(&dir, "[mqtt]\nurll = \"mqtt://x\"\n");
    let (passed, out) = check(&bad);
    assert!(!passed && out.contains("FAIL  config") && out.contains("urll"), "{out}");
}

/// A server that answers in text where a tool call was asked for (llama.cpp without
/// --jinja) cannot run the agent: said, with the fix.
#[tokio::test(flavor = "multi_thread")]
async fn a_model_server_that_does_not_call_tools_fails_the_check() {
    let dir = TempDir::new().unwrap();
    let model = ScriptedServer::cycling(vec![Reply::text("pong")]).await;
    let config = write_config(
        &dir,
        &format!(
            "data_dir = \"{}\"\n[mqtt]\nembedded_listen = \"127.0.0.1:{}\"\n[web]\nlisten = \"\"\n\
             [[llm.chain]]\nkind = \"openai\"\nbase_url = \"{}\"\nmodel = \"qwen\"\n",
            dir.path().display(),
            common::free_port(),
            model.openai_url()
        ),
    );
    let (passed, out) = check(&config);
    assert!(!passed, "{out}");
    let l = line(&out, "llm.chain[0]");
    assert!(l.starts_with("FAIL ") && l.contains("without calling the tool") && l.contains("--jinja"), "{l}");
    assert!(line(&out, "web").starts_with("off "), "{out}");
}

/// Against Mosquitto: plain, and TLS with and without the client certificate it requires.
#[test]
fn the_broker_is_reached_with_the_configured_credentials_and_tls() {
    let Some(url) = common::external("TWINOPS_TEST_MQTT_URL", "an MQTT broker (Mosquitto)") else { return };
    let Some(tls_url) = common::external("TWINOPS_TEST_MQTTS_URL", "Mosquitto's TLS listener") else { return };
    let Some(certs) =
        common::external("TWINOPS_TEST_MQTT_TLS_DIR", "the test certificates (ca.pem, client.pem, client.key)")
    else {
        return;
    };
    let dir = TempDir::new().unwrap();
    let base = format!("data_dir = \"{}\"\n[web]\nlisten = \"\"\n", dir.path().display());
    let (passed, out) = check(&write_config(&dir, &format!("{base}[mqtt]\nurl = \"{url}\"\n")));
    assert!(passed, "{out}");
    assert!(line(&out, "mqtt").starts_with("ok ") && line(&out, "mqtt").contains("connected"), "{out}");

    let tls = format!("{base}[mqtt]\nurl = \"{tls_url}\"\nca_file = \"{certs}/ca.pem\"\n");
    let (passed, out) = check(&write_config(&dir, &tls));
    assert!(!passed, "the broker requires a client certificate:\n{out}");
    let l = line(&out, "mqtt");
    assert!(l.starts_with("FAIL ") && l.contains("requires a client certificate"), "{out}");
    let with_cert =
        format!("{tls}client_cert_file = \"{certs}/client.pem\"\nclient_key_file = \"{certs}/client.key\"\n");
    let (passed, out) = check(&write_config(&dir, &with_cert));
    assert!(passed, "{out}");
    assert!(line(&out, "mqtt").contains(&format!("{tls_url}: connected")), "{out}");
}
