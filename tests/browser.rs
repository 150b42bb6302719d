//! The HMI in a real browser: headless Chromium driven over WebDriver (chromedriver),
//! against the daemon on a seeded twin with the scripted model server. Runs when
//! `TWINOPS_TEST_CHROMEDRIVER` (and optionally `TWINOPS_TEST_CHROME`, the browser
//! binary) are set; `.ci/run` installs Debian's chromium and chromium-driver.
//! Screenshots go to `target/hmi-screenshots/`.

mod common;

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use common::{Plant, free_port};
use serde_json::{Value, json};
use twinops::accounts;
use twinops::app::{Daemon, ServeOptions};
use twinops::config::Config;
use twinops::domain::{Role, Timestamp};
use twinops::scripted::{Reply, ScriptedServer};

const PASSWORD: &str = "correct horse battery staple";

/// A minimal WebDriver client: what this test needs and no more.
struct Browser {
    http: reqwest::Client,
    session: String,
}

impl Browser {
    /// Starts chromedriver and a headless Chromium session on it.
    async fn start(driver: &str) -> (Browser, std::process::Child) {
        let driver_port = free_port();
        let chromedriver = std::process::Command::new(driver)
            .arg(format!("--port={driver_port}"))
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap();
        let http = reqwest::Client::new();
        let driver_url = format!("http://127.0.0.1:{driver_port}");
        let started = Instant::now();
        while http.get(format!("{driver_url}/status")).send().await.is_err() {
            assert!(started.elapsed() < Duration::from_secs(20), "chromedriver did not start");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        let mut chrome = json!({"args": ["--headless=new", "--no-sandbox", "--disable-gpu", "--window-size=1920,1080",
                                         "--disable-dev-shm-usage", "--no-first-run"]});
        if let Ok(bin) = std::env::var("TWINOPS_TEST_CHROME") {
            chrome["binary"] = json!(bin);
        }
        let caps = json!({"capabilities": {"alwaysMatch": {"browserName": "chrome", "goog:chromeOptions": chrome,
                                                            "goog:loggingPrefs": {"performance": "ALL"}}}});
        let created: Value =
            http.post(format!("{driver_url}/session")).json(&caps).send().await.unwrap().json().await.unwrap();
        let id = created["value"]["sessionId"].as_str().unwrap_or_else(|| panic!("no session: {created}")).to_string();
        (Browser { http, session: format!("{driver_url}/session/{id}") }, chromedriver)
    }

    /// Logs in as `name` (with [`PASSWORD`]) and waits for the alarm list.
    async fn login(&self, base: &str, name: &str) {
        self.post("/url", json!({"url": format!("{base}/")})).await;
        self.until("the login form", "!document.querySelector('#login').hidden").await;
        let chrome = "['#tabs', '#who', '#logout'].filter(s => document.querySelector(s).getClientRects().length > 0)";
        let shown = self.js(&format!("return {chrome}.length;")).await;
        assert_eq!(shown, 0, "the login page shows no tabs and no Log out");
        self.type_into("#login-name", name).await;
        self.type_into("#login-password", PASSWORD).await;
        self.click("#login-submit").await;
        self.until(
            "the alarm list",
            &format!(
                "document.querySelector('#user') && document.querySelector('#user').textContent.includes('{name}')"
            ),
        )
        .await;
    }

    async fn cmd(&self, method: reqwest::Method, path: &str, body: Option<Value>) -> Value {
        let url = format!("{}{path}", self.session);
        let mut req = self.http.request(method, &url).timeout(Duration::from_secs(60));
        if let Some(b) = body {
            req = req.json(&b);
        }
        let v: Value = req.send().await.unwrap().json().await.unwrap();
        assert!(v["value"].get("error").is_none(), "{path}: {}", v["value"]);
        v["value"].clone()
    }

    async fn post(&self, path: &str, body: Value) -> Value {
        self.cmd(reqwest::Method::POST, path, Some(body)).await
    }

    async fn get(&self, path: &str) -> Value {
        self.cmd(reqwest::Method::GET, path, None).await
    }

    async fn js(&self, script: &str) -> Value {
        self.post("/execute/sync", json!({"script": script, "args": []})).await
    }

    /// Waits until `script` (a JS expression) is truthy, returning its value.
    async fn until(&self, what: &str, script: &str) -> Value {
        let started = Instant::now();
        loop {
            let v = self.js(&format!("return {script};")).await;
            if !(v.is_null() || v == false || v == "") {
                return v;
            }
            if started.elapsed() > Duration::from_secs(45) {
                let page = self.js("return location.href + '\\n' + document.body.innerText;").await;
                panic!("waited 45 s for {what}; the page shows:\n{}", page.as_str().unwrap_or_default());
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    /// Does `action` (`click`, `clear`, `value`) on the element; live updates may
    /// re-render it between finding and acting, so a stale element is found again.
    async fn on(&self, css: &str, action: &str, body: Value) {
        for _ in 0..20 {
            let el = self.post("/element", json!({"using": "css selector", "value": css})).await;
            let id = el.as_object().unwrap().values().next().unwrap().as_str().unwrap().to_string();
            let url = format!("{}/element/{id}/{action}", self.session);
            let v: Value = self.http.post(&url).json(&body).send().await.unwrap().json().await.unwrap();
            match v["value"]["error"].as_str() {
                None => return,
                Some("stale element reference") => tokio::time::sleep(Duration::from_millis(100)).await,
                Some(_) => panic!("{action} {css}: {}", v["value"]),
            }
        }
        panic!("{css} kept going stale");
    }

    async fn click(&self, css: &str) {
        self.on(css, "click", json!({})).await;
    }

    async fn type_into(&self, css: &str, text: &str) {
        self.on(css, "value", json!({"text": text})).await;
    }

    async fn clear(&self, css: &str) {
        self.on(css, "clear", json!({})).await;
    }

    async fn screenshot(&self, path: &Path) {
        let png = base64(self.get("/screenshot").await.as_str().unwrap());
        std::fs::write(path, png).unwrap();
    }
}

/// ChromeDriver's path (skipped without it, failed under CI) and the screenshots' folder.
fn browser_test() -> Option<(String, PathBuf)> {
    let driver = common::external("TWINOPS_TEST_CHROMEDRIVER", "ChromeDriver (e.g. /usr/bin/chromedriver)")?;
    let shots = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("target/hmi-screenshots");
    std::fs::create_dir_all(&shots).unwrap();
    Some((driver, shots))
}

fn base64(text: &str) -> Vec<u8> {
    let value = |c: u8| match c {
        b'A'..=b'Z' => c - b'A',
        b'a'..=b'z' => c - b'a' + 26,
        b'0'..=b'9' => c - b'0' + 52,
        b'+' => 62,
        _ => 63,
    };
    let clean: Vec<u8> = text.bytes().filter(|c| !c.is_ascii_whitespace() && *c != b'=').collect();
    let mut out = Vec::with_capacity(clean.len() * 3 / 4);
    for chunk in clean.chunks(4) {
        let n = chunk.iter().enumerate().fold(0u32, |n, (i, &c)| n | (u32::from(value(c)) << (18 - 6 * i)));
        out.extend(&n.to_be_bytes()[1..chunk.len()]);
    }
    out
}

/// Log in as a supervisor; see an alarm raised over MQTT appear without a reload; open
/// its triage note and a citation; ask the chat and see the streamed answer (a hostile
/// one, rendered inert); approve the pending work order and see it dispatched; change
/// one's own password; as an admin, add and disable a user and create a token. The
/// browser requests nothing from another origin.
#[tokio::test(flavor = "multi_thread")]
async fn the_hmi_in_a_real_browser() {
    let Some((driver, shots)) = browser_test() else { return };

    let p = Plant::new();
    accounts::add_user(&p.store, "supervisor.ruiz", Role::Supervisor, PASSWORD, "test").unwrap();
    accounts::add_user(&p.store, "admin.lee", Role::Admin, PASSWORD, "test").unwrap();
    let server = ScriptedServer::start(vec![
        Reply::calls(&[
            ("c0", "get_asset_details", json!({"asset_id": "PUMP-007"})),
            ("c1", "search_docs", json!({"query": "VIB-HI pump bearing vibration", "limit": 3})),
            (
                "c2",
                "propose_work_order",
                json!({"asset_id": "PUMP-007", "action": "replace_bearing", "priority": "urgent",
                       "title": "Replace PUMP-007 drive-end bearing",
                       "justification": "Drive-end vibration is in zone C and rising.", "evidence": ["arp-vibration.md#1"]}),
            ),
        ]),
        Reply::Text(
            json!({"summary": "VIB-HIHI on PUMP-007: drive-end vibration is high and rising: bearing wear.", "urgency": "urgent",
                   "likely_causes": ["drive-end bearing wear"], "recommended_actions": ["Plan a changeover to the standby pump [arp-vibration.md#1]"],
                   "proposed_work_order": null, "evidence": [{"claim": "Response procedure for VIB-HI", "source": "arp-vibration.md#1"}]})
            .to_string(),
        ),
        Reply::text(
            "The pump needs attention. <script>window.pwned = true</script> ![chart](http://evil.example/chart.png) **Check the bearing.**",
        ),
        Reply::call("h1", "get_system_summary", json!({})),
        Reply::text(
            "Shift handover: PUMP-007 drive-end vibration is rising.\n- PUMP-007: watch the bearing <img src=x onerror=\"window.pwned = true\">",
        ),
    ])
    .await;

    let mut config = common::test_config("browser");
    let path = p.dir.path().join("twinops.toml");
    std::fs::write(
        &path,
        format!("[[llm.chain]]\nkind = \"openai\"\nbase_url = \"{}\"\nmodel = \"scripted\"\n", server.openai_url()),
    )
    .unwrap();
    config.llm = Config::load(&path, &|_| None).unwrap().llm;
    let opts = ServeOptions { config, db: p.db_path(), demo: false, seed_dir: common::seed_dir() };
    let daemon = Daemon::start_on(p.store.clone(), opts).await.unwrap();
    let base = format!("http://{}", daemon.web_addr.unwrap());

    let (b, mut chromedriver) = Browser::start(&driver).await;
    let http = b.http.clone();

    // Log in.
    b.login(&base, "supervisor.ruiz").await;

    // Every Content-Security-Policy violation from here on is kept, and none may happen.
    b.js("window.cspViolations = []; document.addEventListener('securitypolicyviolation', (e) => window.cspViolations.push(`${e.violatedDirective} ${e.sample || e.sourceFile || ''}`)); return true;").await;

    // An alarm raised over MQTT appears without a reload.
    let event = json!({"type": "alarm", "event_id": "browser-1", "asset_id": "PUMP-007", "sensor_id": "PUMP-007.VIB-DE",
                       "code": "VIB-HIHI", "severity": "critical", "state": "raised", "value": 7.4, "threshold": 7.1,
                       "time": Timestamp::now().to_rfc3339(), "message": "South booster pump 2: vibration \u{202E}hgih-hgih\u{202C} high-high"});
    common::until_subscribed(&daemon).await;
    twinops::publish::publish_all(
        &daemon.mqtt_url,
        "browser-pub",
        "scada/alarms",
        vec![event.to_string().into_bytes()],
    )
    .await
    .unwrap();
    // Its id once the twin has it (publishing returns before the daemon ingests it).
    let id = "SELECT coalesce(max(id), 0) FROM alarms WHERE event_id = 'browser-1'";
    assert!(common::eventually(Duration::from_secs(30), || p.count(id) > 0).await, "browser-1 never ingested");
    let alarm_id = p.count(id);
    let row = format!("document.querySelector('#alarm-rows tr[data-alarm=\"{alarm_id}\"]')");
    b.until("the new alarm in the list", &row).await;
    b.until("its triage note", &format!("{row}.textContent.includes('note')")).await;
    // Unacknowledged: marked by more than bold text, and first.
    let marked = b.js(&format!("return {row}.classList.contains('unacked') && {row}.querySelector('.unack') !== null && document.querySelector('#alarm-rows tr') === {row};")).await;
    assert_eq!(marked, true, "the unacknowledged alarm is marked and first");
    b.screenshot(&shots.join("alarms.png")).await;

    // Its triage note, marked AI advisory, and a citation opening the document chunk.
    b.click(&format!("#alarm-rows tr[data-alarm=\"{alarm_id}\"]")).await;
    let note =
        b.until("the note", "document.querySelector('#note') && document.querySelector('#note').textContent").await;
    assert!(
        note.as_str().unwrap().contains("AI advisory") && note.as_str().unwrap().contains("bearing wear"),
        "{note}"
    );
    // The alarm text as sent carried a right-to-left override; the page shows its words
    // in the order they were written.
    let shown = b
        .until("the alarm's message", "document.body.textContent.includes('hgih-hgih') && document.body.textContent")
        .await;
    assert!(!shown.as_str().unwrap().contains('\u{202E}'), "a bidi override reached the page");
    b.click("#note a.citation").await;
    let chunk = b
        .until(
            "the document chunk",
            "!document.querySelector('#doc-dialog').hidden && document.querySelector('#doc-body').textContent",
        )
        .await;
    assert!(chunk.as_str().unwrap().contains("4.5 mm/s"), "{chunk}");
    let raw_markdown = b.js("return document.querySelector('#doc-body').textContent.includes('**');").await;
    assert_eq!(raw_markdown, false, "the document is rendered, not shown as raw Markdown");
    b.click("#doc-close").await;
    // Values with their unit; times 24-hour in the site's zone (Europe/London), the zone shown.
    let detail = b.js("return document.querySelector('#alarm-detail .kv').textContent;").await;
    let detail = detail.as_str().unwrap();
    assert!(detail.contains("7.4 mm/s (limit 7.1 mm/s)"), "{detail}");
    assert!(detail.contains("GMT") && !detail.contains(" AM") && !detail.contains(" PM"), "{detail}");
    // The point's rationalization from the demo site's sheet.
    let madb = b.js("return document.querySelector('#alarm-detail .rationalization').textContent;").await;
    assert!(
        madb.as_str().unwrap().contains("Start the standby pump") && madb.as_str().unwrap().contains("15 min"),
        "{madb}"
    );
    b.click("#note .trace-button").await;
    let trace = b
        .until("the tool trace", "document.querySelector('.trace') && document.querySelector('.trace').textContent")
        .await;
    assert!(trace.as_str().unwrap().contains("search_docs"), "{trace}");
    let sideways = b.js("const t = document.querySelector('.trace'); return t.scrollWidth > t.clientWidth + 1;").await;
    assert_eq!(sideways, false, "the trace wraps: no sideways scroll");
    let indented = b
        .js(r#"return [...document.querySelectorAll('.trace pre')].some(p => p.textContent.includes('\n  "'));"#)
        .await;
    assert_eq!(indented, true, "tool arguments and results as indented JSON");

    // The supervisor takes the alarm's point out of service, with a reason, and back.
    // Events that arrive while the reason is being typed leave it as it is.
    b.type_into("#oos-reason", "permit 4471: vibration").await;
    let other = json!({"type": "alarm", "event_id": "browser-2", "asset_id": "PUMP-001", "sensor_id": "PUMP-001.FLOW",
                       "code": "FLOW-LO", "severity": "low", "state": "raised", "value": 140.0, "threshold": 150.0,
                       "time": Timestamp::now().to_rfc3339(), "message": "Pump 1 flow low"});
    twinops::publish::publish_all(
        &daemon.mqtt_url,
        "browser-pub2",
        "scada/alarms",
        vec![other.to_string().into_bytes()],
    )
    .await
    .unwrap();
    b.until(
        "the other alarm in the list",
        "document.querySelector('#alarm-rows tr[data-key=\"PUMP-001|PUMP-001.FLOW|FLOW-LO\"]')",
    )
    .await;
    tokio::time::sleep(Duration::from_millis(800)).await;
    let kept = b.js("return document.querySelector('#oos-reason').value;").await;
    assert_eq!(kept, "permit 4471: vibration", "the half-typed reason survived the live update");
    b.type_into("#oos-reason", " probe replaced").await;
    b.click("#out-of-service").await;
    b.until("the return-to-service button", "document.querySelector('#in-service')").await;
    // Out of the list of alarms that need attention, into the one of suppressed alarms.
    let suppressed = format!("document.querySelector('#suppressed-rows tr[data-alarm=\"{alarm_id}\"]')");
    b.until(
        "the alarm among the suppressed",
        &format!("{suppressed} && !document.querySelector('#suppressed').hidden"),
    )
    .await;
    assert_eq!(b.js(&format!("return {row} === null;")).await, true, "no longer among those needing attention");
    b.js("document.querySelector('#suppressed').open = true;").await;
    b.screenshot(&shots.join("suppressed.png")).await;
    b.click("#in-service").await;
    b.until("the out-of-service button again", "document.querySelector('#out-of-service')").await;
    b.until("the alarm back in the list", &format!("{row} && !{suppressed}")).await;
    let journal = p.text(&format!(
        "SELECT group_concat(kind || ': ' || coalesce(detail, ''), ' | ') FROM alarm_events WHERE alarm_id = {alarm_id} AND actor = 'supervisor.ruiz'"
    ));
    assert_eq!(journal, "out_of_service: permit 4471: vibration probe replaced | returned_to_service: ");

    // Shelving the other alarm: a refused request says why in the alarm's panel, naming
    // the field, and keeps what was typed; a live update while the operator types the
    // reason leaves the text, the focus and the caret where they were.
    let flow = "#alarm-rows tr[data-key=\"PUMP-001|PUMP-001.FLOW|FLOW-LO\"]";
    b.click(flow).await;
    b.until("the shelving inputs", "document.querySelector('#shelve-reason')").await;
    b.clear("#shelve-minutes").await;
    b.type_into("#shelve-minutes", "0.5").await;
    b.type_into("#shelve-reason", "permit 4480").await;
    b.click("#shelve").await;
    let said =
        b.until("the refusal in the panel", "document.querySelector('#alarm-detail .action-error')?.textContent").await;
    let said = said.as_str().unwrap();
    assert!(said.contains("Minutes") && said.contains("1 to 1440"), "{said}");
    let invalid = b.js("return document.querySelector('#shelve-minutes').getAttribute('aria-invalid');").await;
    assert_eq!(invalid, "true", "the field is marked");
    assert_eq!(b.js("return document.querySelector('#shelve-reason').value;").await, "permit 4480");
    b.clear("#shelve-minutes").await;
    b.type_into("#shelve-minutes", "1.5").await;
    b.type_into("#shelve-reason", ": flow").await;
    let third = json!({"type": "alarm", "event_id": "browser-3", "asset_id": "PUMP-002", "sensor_id": "PUMP-002.FLOW",
                       "code": "FLOW-LO", "severity": "low", "state": "raised", "value": 141.0, "threshold": 150.0,
                       "time": Timestamp::now().to_rfc3339(), "message": "Pump 2 flow low"});
    twinops::publish::publish_all(
        &daemon.mqtt_url,
        "browser-pub3",
        "scada/alarms",
        vec![third.to_string().into_bytes()],
    )
    .await
    .unwrap();
    b.until(
        "the third alarm in the list",
        "document.querySelector('#alarm-rows tr[data-key=\"PUMP-002|PUMP-002.FLOW|FLOW-LO\"]')",
    )
    .await;
    tokio::time::sleep(Duration::from_millis(800)).await;
    let kept = b
        .js("const r = document.querySelector('#shelve-reason'); \
             return [r.value, document.activeElement === r, r.selectionStart];")
        .await;
    assert_eq!(kept, json!(["permit 4480: flow", true, 17]), "text, focus and caret survive the live update");
    // Keys sent to whatever has the focus land in the reason.
    b.post(
        "/actions",
        json!({"actions": [{"type": "key", "id": "kb", "actions": [
            {"type": "keyDown", "value": " "}, {"type": "keyUp", "value": " "},
            {"type": "keyDown", "value": "1"}, {"type": "keyUp", "value": "1"}]}]}),
    )
    .await;
    assert_eq!(b.js("return document.querySelector('#shelve-reason').value;").await, "permit 4480: flow 1");
    b.click("#shelve").await;
    b.until("the unshelve button", "document.querySelector('#unshelve')").await;
    assert_eq!(b.js("return document.querySelector('#alarm-detail .action-error');").await, Value::Null);
    let shelved = "SELECT count(*) FROM alarms a JOIN alarm_events e ON e.alarm_id = a.id \
                   WHERE a.event_id = 'browser-2' AND a.state = 'shelved' AND e.kind = 'shelved' \
                   AND e.detail LIKE '%permit 4480: flow 1%' AND a.shelved_until - e.at = 90";
    assert_eq!(p.count(shelved), 1, "shelved for 1.5 minutes, with the reason as typed");

    // A point that went in and out of alarm many times: its returned occurrences are
    // acknowledged together, from one of them.
    let returned = "SELECT count(*) FROM alarms WHERE asset_id = 'PUMP-004' AND code = 'PRESS-SUC-LO' AND state = 'rtn_unacknowledged'";
    let waiting = p.count(returned);
    assert!(waiting > 1, "the seeded plant has repeats: {waiting}");
    // One row for the point, with its count, subdued as returned to normal.
    let point = "#alarm-rows tr[data-key=\"PUMP-004|PUMP-004.PRESS-SUC|PRESS-SUC-LO\"]";
    let summary = b.until("the point's row", &format!("document.querySelector('{point}')?.textContent")).await;
    assert!(summary.as_str().unwrap().contains(&format!("×{waiting}")), "{summary}");
    let rows = b.js("return document.querySelectorAll('#alarm-rows tr[data-key=\"PUMP-004|PUMP-004.PRESS-SUC|PRESS-SUC-LO\"]').length;").await;
    assert_eq!(rows, 1, "one row per point");
    b.click(point).await;
    let label = b
        .until(
            "the group button",
            "document.querySelector('#ack-returned') && document.querySelector('#ack-returned').textContent",
        )
        .await;
    assert_eq!(label, format!("Acknowledge all {waiting} returned to normal on PUMP-004 PRESS-SUC-LO"));
    b.click("#ack-returned").await;
    b.until("the point's row gone", &format!("document.querySelector('{point}') === null")).await;
    assert_eq!(p.count(returned), 0);

    // The chat streams its answer; the hostile parts stay text.
    b.click("button[data-tab=chat]").await;
    b.type_into("#chat-input", "How is PUMP-007?").await;
    b.click("#chat-send").await;
    let answer = b
        .until("the streamed answer", "document.querySelector('.msg.agent[data-run] .md') && document.querySelector('.msg.agent[data-run] .md').textContent")
        .await;
    assert!(answer.as_str().unwrap().contains("<script>window.pwned = true</script>"), "shown as text: {answer}");
    assert_eq!(b.js("return window.pwned === undefined;").await, true, "the script did not run");
    assert_eq!(b.js("return document.querySelectorAll('#chat-log img, #chat-log script').length;").await, 0);

    // The shift handover: none yet; an operator (here the supervisor) writes one now.
    b.click("button[data-tab=handover]").await;
    b.until("no handover yet", "document.querySelector('#handover-when').textContent.includes('No handover yet')")
        .await;
    b.click("#handover-write").await;
    let handover = b
        .until("the handover", "document.querySelector('#handover-latest .md') && document.querySelector('#handover-latest .md').textContent")
        .await;
    let handover = handover.as_str().unwrap();
    assert!(handover.contains("PUMP-007: watch the bearing <img src=x"), "shown as text: {handover}");
    assert_eq!(b.js("return document.querySelectorAll('#handover-latest img').length;").await, 0);
    assert_eq!(b.js("return window.pwned === undefined;").await, true, "the handler did not run");
    let when = b.js("return document.querySelector('#handover-when').textContent;").await;
    assert!(when.as_str().unwrap().ends_with("by supervisor.ruiz."), "{when}");
    b.screenshot(&shots.join("handover.png")).await;

    // The trend chart.
    b.click("button[data-tab=assets]").await;
    b.until("the asset list", "document.querySelector('#asset-rows tr[data-asset=\"PUMP-007\"]')").await;
    // The plant as imported: stations as headers, every asset once, a motor under the
    // pump it drives.
    let tree = b
        .js("return [document.querySelectorAll('#asset-rows tr.station').length, \
             document.querySelectorAll('#asset-rows tr[data-asset]').length, \
             document.querySelector('#asset-rows tr[data-station=\"STN-S\"]').innerText, \
             document.querySelector('#asset-rows tr[data-asset=\"MTR-007\"] td').innerText, \
             document.querySelector('#asset-rows tr[data-asset=\"PUMP-007\"]').nextElementSibling.dataset.asset];")
        .await;
    assert_eq!(tree[0], 3, "{tree}");
    assert_eq!(tree[1], p.count("SELECT count(*) FROM assets WHERE retired_at IS NULL"), "{tree}");
    assert!(tree[2].as_str().unwrap().starts_with("South Booster Station (STN-S)"), "{tree}");
    assert_eq!((tree[3].as_str(), tree[4].as_str()), (Some("└ MTR-007"), Some("MTR-007")), "{tree}");
    b.click("#asset-rows tr[data-asset=\"PUMP-007\"]").await;
    b.until("the trend chart (uPlot)", "document.querySelector('#trend-canvas .uplot canvas')").await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    b.screenshot(&shots.join("trend.png")).await;

    // Approve the pending work order; it is dispatched.
    b.click("button[data-tab=approvals]").await;
    b.until("the pending work order", "document.querySelector('#approval-list .card .approve')").await;
    b.screenshot(&shots.join("approvals.png")).await;
    b.type_into("#approval-list .card .reason", "zone C: change the bearing").await;
    // A live update while the reason is typed takes nothing away, focus included.
    let fourth = json!({"type": "alarm", "event_id": "browser-4", "asset_id": "PUMP-003", "sensor_id": "PUMP-003.FLOW",
                        "code": "FLOW-LO", "severity": "low", "state": "raised", "value": 139.0, "threshold": 150.0,
                        "time": Timestamp::now().to_rfc3339(), "message": "Pump 3 flow low"});
    twinops::publish::publish_all(
        &daemon.mqtt_url,
        "browser-pub4",
        "scada/alarms",
        vec![fourth.to_string().into_bytes()],
    )
    .await
    .unwrap();
    assert!(
        common::eventually(Duration::from_secs(20), || p
            .count("SELECT count(*) FROM alarms WHERE event_id = 'browser-4'")
            == 1)
        .await
    );
    tokio::time::sleep(Duration::from_millis(800)).await;
    let kept = b
        .js("const r = document.querySelector('#approval-list .card .reason'); return [r.value, document.activeElement === r];")
        .await;
    assert_eq!(kept, json!(["zone C: change the bearing", true]), "the approval's reason survives the live update");
    b.type_into("#approval-list .card .reason", " this week").await;
    b.click("#approval-list .card .approve").await;
    let asked =
        b.until("the confirmation", "document.querySelector('#approval-list .card .confirm')?.textContent").await;
    assert!(asked.as_str().unwrap().contains("It will be dispatched to maintenance for PUMP-007"), "{asked}");
    assert_eq!(p.count("SELECT count(*) FROM work_orders WHERE status = 'pending_approval'"), 1, "not before the yes");
    b.click("#approval-list .card .confirm-yes").await;
    b.until(
        "the dispatched work order",
        "[...document.querySelectorAll('#decided-list .card .status')].some(e => e.textContent.includes('dispatched'))",
    )
    .await;
    assert_eq!(
        p.count("SELECT count(*) FROM work_orders WHERE status = 'dispatched' AND decided_by = 'supervisor.ruiz'"),
        1
    );

    // Alarm performance: the figures against their targets, the rate chart over every
    // 10-minute period of the week (uPlot, served by twinops), the Pareto, definitions.
    b.click("button[data-tab=performance]").await;
    b.until("the alarm figures", "document.querySelector('#kpi-figures')").await;
    b.until("the rate chart", "document.querySelector('#kpi-rate .uplot canvas')").await;
    let shown = b
        .js("return [Number(document.querySelector('#kpi-rate').dataset.periods), \
             document.querySelector('#kpi-figures').innerText, \
             document.querySelectorAll('#kpi-definitions li').length, \
             Number(document.querySelector('#kpi-pareto').dataset.points)];")
        .await;
    assert!(shown[0].as_i64().unwrap() >= 1008, "a week of 10-minute periods: {shown}");
    assert!(shown[1].as_str().unwrap().contains("Peak in one 10-minute period"), "{shown}");
    assert!(shown[2].as_i64().unwrap() >= 8 && shown[3].as_i64().unwrap() >= 1, "{shown}");
    tokio::time::sleep(Duration::from_millis(300)).await;
    b.screenshot(&shots.join("alarm-performance.png")).await;

    let pad = |asset: &str| {
        format!(
            "parseFloat(getComputedStyle(document.querySelector('#asset-rows tr[data-asset=\"{asset}\"] td')).paddingLeft)"
        )
    };
    let indented = b.js(&format!("return {} > {};", pad("MTR-007"), pad("PUMP-007"))).await;
    assert_eq!(indented, json!(true), "the motor is indented under its pump, by classes");
    let violations = b.js("return window.cspViolations;").await;
    assert_eq!(violations, json!([]), "the page breaks its own Content-Security-Policy");

    // Accounts: the supervisor changes their own password and sees no user admin; an
    // admin adds a user, disables them and creates a token, shown once.
    b.click("button[data-tab=account]").await;
    b.until("the account view", "!document.querySelector('#view-account').hidden").await;
    assert_eq!(b.js("return document.querySelector('#admin-panel').hidden;").await, true, "users are for admins");
    let new_password = "a brand new passphrase";
    b.type_into("#own-current", PASSWORD).await;
    b.type_into("#own-new", new_password).await;
    b.click("#own-password-submit").await;
    b.until("the change confirmed", "document.querySelector('#own-password-result').textContent === 'Changed.'").await;
    b.click("#logout").await;
    b.until("the login form", "!document.querySelector('#login').hidden").await;
    b.type_into("#login-name", "admin.lee").await;
    b.type_into("#login-password", PASSWORD).await;
    b.click("#login-submit").await;
    b.until("the admin's page", "document.querySelector('#user').textContent.includes('admin.lee')").await;
    b.click("button[data-tab=account]").await;
    b.until("the users", "document.querySelector('#user-rows tr[data-user=\"supervisor.ruiz\"]')").await;
    // A refusal's own message, in the page.
    b.type_into("#new-user-name", "supervisor.ruiz").await;
    b.type_into("#new-user-password", PASSWORD).await;
    b.click("#add-user").await;
    let shown = "!document.querySelector('#error').hidden && document.querySelector('#error-text').textContent";
    let error = b.until("the error in the page", shown).await;
    assert!(error.as_str().unwrap().contains("a user named supervisor.ruiz already exists"), "{error}");
    b.click("#error-dismiss").await;
    b.until("the error dismissed", "document.querySelector('#error').hidden").await;
    b.clear("#new-user-name").await;
    b.clear("#new-user-password").await;
    b.type_into("#new-user-name", "operator.diaz").await;
    b.type_into("#new-user-password", PASSWORD).await;
    b.click("#add-user").await;
    let diaz = "document.querySelector('#user-rows tr[data-user=\"operator.diaz\"]')";
    b.until("the new user", &format!("{diaz} && {diaz}.querySelector('.state').textContent === 'enabled'")).await;
    b.click("#user-rows tr[data-user=\"operator.diaz\"] .disable").await;
    b.click("#user-rows tr[data-user=\"operator.diaz\"] .confirm-yes").await;
    b.until("the user disabled", &format!("{diaz}.querySelector('.state').textContent === 'disabled'")).await;
    b.type_into("#new-token-user", "supervisor.ruiz").await;
    b.type_into("#new-token-label", "historian export").await;
    b.click("#add-token").await;
    let token = b.until("the token, once", "document.querySelector('#new-token-value')?.textContent").await;
    b.until("the token listed", "document.querySelector('#token-rows tr .revoke')").await;
    b.screenshot(&shots.join("account.png")).await;
    let token = token.as_str().unwrap();
    assert_eq!(accounts::token_user(&p.store, token).unwrap().map(|u| u.name).as_deref(), Some("supervisor.ruiz"));
    assert_eq!(p.text("SELECT role || ' ' || disabled FROM users WHERE name = 'operator.diaz'"), "operator 1");
    assert_eq!(
        p.count("SELECT count(*) FROM audit_log WHERE action = 'password_changed' AND actor = 'supervisor.ruiz'"),
        1
    );

    // Every request the browser made went to the HMI itself.
    let log = b.post("/se/log", json!({"type": "performance"})).await;
    let mut urls = Vec::new();
    for entry in log.as_array().unwrap() {
        let m: Value = serde_json::from_str(entry["message"].as_str().unwrap()).unwrap();
        if m["message"]["method"] == "Network.requestWillBeSent" {
            urls.push(m["message"]["params"]["request"]["url"].as_str().unwrap().to_string());
        }
    }
    assert!(urls.len() > 5, "{urls:?}");
    let foreign: Vec<&String> = urls.iter().filter(|u| !u.starts_with(&base) && !u.starts_with("data:")).collect();
    assert!(foreign.is_empty(), "requests to other origins: {foreign:?}");

    let _ = http.delete(&b.session).send().await;
    let _ = chromedriver.kill();
    let _ = chromedriver.wait();
    daemon.shutdown().await;
    println!("screenshots in {}", shots.display());
}

/// A flood as an operator meets it in the HMI, with no model (the rules model writes the
/// note): an upset on the demo plant (raw water pump 1 trips; the north header's
/// pressure falls, then two boosters' suction) is one episode in the alarm list, the
/// trip's row first with its consequences folded under it; unfolded, they show. The
/// episode view has the timeline with the trip marked as the initiator, the episode's
/// note naming it, and an earlier flood like it one click away.
#[tokio::test(flavor = "multi_thread")]
async fn a_flood_in_the_hmi_is_one_episode_under_its_initiator() {
    let Some((driver, shots)) = browser_test() else { return };
    let p = Plant::new();
    accounts::add_user(&p.store, "operator.diaz", Role::Operator, PASSWORD, "test").unwrap();
    let opts = ServeOptions {
        config: common::test_config("episodes"),
        db: p.db_path(),
        demo: false,
        seed_dir: common::seed_dir(),
    };
    let daemon = Daemon::start_on(p.store.clone(), opts).await.unwrap();
    let base = format!("http://{}", daemon.web_addr.unwrap());
    common::until_subscribed(&daemon).await;
    let upset = [
        ("PUMP-001", "PUMP-TRIP", 0),
        ("VLV-001", "PRESS-LO", 20),
        ("PUMP-004", "SUCTION-LO", 80),
        ("PUMP-006", "SUCTION-LO", 150),
    ];
    let send = |round: i64, state: &'static str, at: Timestamp| {
        let url = daemon.mqtt_url.clone();
        let events: Vec<Vec<u8>> = upset
            .iter()
            .enumerate()
            .map(|(i, (asset, code, secs))| {
                let time = if state == "raised" { at.plus_secs(*secs) } else { at };
                json!({"type": "alarm", "event_id": format!("flood-{round}-{state}-{i}"), "asset_id": asset, "code": code,
                       "severity": "high", "state": state, "time": time.to_rfc3339(), "message": format!("{asset} {code}")})
                .to_string()
                .into_bytes()
            })
            .collect();
        async move { twinops::publish::publish_all(&url, "episodes-pub", "scada/alarms", events).await.unwrap() }
    };
    // The same upset 50 minutes ago, gone back to normal; and now.
    let now = Timestamp::now();
    send(0, "raised", now.plus_secs(-3_000)).await;
    send(0, "cleared", now.plus_secs(-2_500)).await;
    send(1, "raised", now.plus_secs(-150)).await;
    let noted = "SELECT count(*) FROM notes WHERE episode_id IS NOT NULL";
    let started = Instant::now();
    while p.count(noted) < 2
        || p.count("SELECT count(*) FROM alarms a WHERE a.event_id LIKE 'flood-%' AND NOT EXISTS (SELECT 1 FROM notes n WHERE n.alarm_id = a.id)") > 0
    {
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "the two episodes' notes did not come: {} episodes, {} episode notes, alarms and notes: {}",
            p.count("SELECT count(*) FROM episodes"),
            p.count(noted),
            p.text("SELECT group_concat(a.id || ':' || a.state || ':' || coalesce(a.episode_id, '-') || ':' || coalesce(n.id, '-'), ' ') FROM alarms a LEFT JOIN notes n ON n.alarm_id = a.id")
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let episode = p.count("SELECT max(id) FROM episodes");
    let earlier = p.count("SELECT min(id) FROM episodes");
    let trip = p.count("SELECT id FROM alarms WHERE event_id = 'flood-1-raised-0'");

    let (b, mut chromedriver) = Browser::start(&driver).await;
    b.login(&base, "operator.diaz").await;

    let head = format!("document.querySelector('#alarm-rows tr[data-alarm=\"{trip}\"]')");
    b.until("the trip's row", &format!("{head} && {head}.classList.contains('episode-head')")).await;
    let shown = "[...document.querySelectorAll('#alarm-rows tr.episode-member')].filter(r => !r.hidden).length";
    let members = "document.querySelectorAll('#alarm-rows tr.episode-member').length";
    assert_eq!(
        b.js(&format!("return [{shown}, {members}];")).await,
        json!([0, 3]),
        "consequences folded under the trip"
    );
    let order = b.js("return [...document.querySelectorAll('#alarm-rows tr')].slice(0, 4).map(r => r.className.includes('episode-head') ? 'head' : r.className.includes('episode-member') ? 'member' : 'other');").await;
    assert_eq!(order, json!(["head", "member", "member", "member"]), "the episode's rows together, the trip first");
    b.click(&format!("#alarm-rows tr[data-alarm=\"{trip}\"] button.fold")).await;
    b.until("the consequences unfolded", &format!("{shown} === 3")).await;
    let fold = b.js(&format!("return {head}.querySelector('button.fold').textContent;")).await;
    assert_eq!(fold, "▾ 3 more", "the fold says it is open");
    b.screenshot(&shots.join("episode-list.png")).await;

    b.click(&format!("#alarm-rows tr[data-alarm=\"{trip}\"] a.episode-link")).await;
    b.until(
        "the episode view",
        &format!(
            "document.querySelector('#alarm-detail .episode-title')?.textContent.includes('Alarm episode {episode}')"
        ),
    )
    .await;
    let initiator =
        b.js("return document.querySelector('#alarm-detail table.timeline tr.initiator').textContent;").await;
    let initiator = initiator.as_str().unwrap();
    assert!(
        initiator.contains("PUMP-001") && initiator.contains("PUMP-TRIP") && initiator.contains("initiator"),
        "{initiator}"
    );
    let follows = b.js("return [...document.querySelectorAll('#alarm-detail table.timeline td.role')].filter(td => td.textContent.includes('follows')).length;").await;
    assert_eq!(follows, 3);
    let note = b.js("return document.querySelector('#alarm-detail #note').textContent;").await;
    let note = note.as_str().unwrap();
    assert!(
        note.contains(&format!("Alarm episode {episode}")) && note.contains("Likely initiator: PUMP-001 PUMP-TRIP"),
        "{note}"
    );
    b.screenshot(&shots.join("episode.png")).await;
    b.click(&format!("#alarm-detail ul.similar a[data-episode=\"{earlier}\"]")).await;
    b.until(
        "the earlier episode",
        &format!(
            "document.querySelector('#alarm-detail .episode-title')?.textContent.includes('Alarm episode {earlier}')"
        ),
    )
    .await;

    // From a member alarm, its episode is one click away.
    let header = p.count("SELECT id FROM alarms WHERE event_id = 'flood-1-raised-1'");
    b.click(&format!("#alarm-rows tr[data-alarm=\"{header}\"]")).await;
    b.until("the member's episode link", "document.querySelector('#open-episode')").await;
    b.click("#open-episode").await;
    b.until(
        "its episode",
        &format!(
            "document.querySelector('#alarm-detail .episode-title')?.textContent.includes('Alarm episode {episode}')"
        ),
    )
    .await;

    let _ = b.http.delete(&b.session).send().await;
    let _ = chromedriver.kill();
    let _ = chromedriver.wait();
    daemon.shutdown().await;
}
