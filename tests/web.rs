//! The HMI's API over real HTTP: the daemon's web server on port 0 of a seeded twin,
//! logins by form, sessions by cookie, tokens by header.

mod common;

use std::net::SocketAddr;

use common::Plant;
use reqwest::StatusCode;
use reqwest::header::{COOKIE, LOCATION, ORIGIN, SET_COOKIE};
use serde_json::{Value, json};
use twinops::accounts;
use twinops::app::{Daemon, ServeOptions};
use twinops::approvals::{Approvals, Proposer};
use twinops::config::Config;
use twinops::domain::{AssetId, Role, Timestamp, WorkAction, WorkOrderDraft, WorkPriority};

const PASSWORD: &str = "correct horse battery staple";

struct Hmi {
    daemon: Daemon,
    base: String,
    http: reqwest::Client,
}

impl Hmi {
    async fn start(p: &Plant) -> Hmi {
        Hmi::start_with(p, common::test_config("web")).await
    }

    async fn start_with(p: &Plant, config: Config) -> Hmi {
        let opts = ServeOptions { config, db: p.db_path(), demo: false, seed_dir: common::seed_dir() };
        let daemon = Daemon::start_on(p.store.clone(), opts).await.unwrap();
        let addr: SocketAddr = daemon.web_addr.unwrap();
        let http = reqwest::Client::builder().redirect(reqwest::redirect::Policy::none()).build().unwrap();
        Hmi { daemon, base: format!("http://{addr}"), http }
    }

    fn url(&self, path: &str) -> String {
        format!("{}{path}", self.base)
    }

    /// Logs in through the form as the page does; returns the session cookie.
    async fn login(&self, name: &str, password: &str) -> reqwest::Response {
        self.http
            .post(self.url("/login"))
            .header(ORIGIN, &self.base)
            .form(&[("name", name), ("password", password)])
            .send()
            .await
            .unwrap()
    }

    async fn session(&self, name: &str) -> String {
        let r = self.login(name, PASSWORD).await;
        assert_eq!(r.status(), StatusCode::SEE_OTHER);
        cookie_of(&r).expect("a session cookie")
    }

    async fn get(&self, path: &str, cookie: &str) -> reqwest::Response {
        self.http.get(self.url(path)).header(COOKIE, cookie).send().await.unwrap()
    }

    async fn post(&self, path: &str, cookie: &str, body: Value) -> reqwest::Response {
        self.http
            .post(self.url(path))
            .header(COOKIE, cookie)
            .header(ORIGIN, &self.base)
            .json(&body)
            .send()
            .await
            .unwrap()
    }
}

fn cookie_of(r: &reqwest::Response) -> Option<String> {
    let set = r.headers().get(SET_COOKIE)?.to_str().ok()?;
    let pair = set.split(';').next()?.to_string();
    (pair.len() > "twinops_session=".len()).then_some(pair)
}

/// Reads the `/events` stream until it says `wanted`, for at most `secs`; else what it
/// did say.
async fn feed_tells(feed: &mut reqwest::Response, wanted: &str, secs: u64) -> Result<(), String> {
    let mut seen = String::new();
    let found = tokio::time::timeout(std::time::Duration::from_secs(secs), async {
        while let Some(chunk) = feed.chunk().await.unwrap() {
            seen.push_str(&String::from_utf8_lossy(&chunk));
            if seen.contains(wanted) {
                return true;
            }
        }
        false
    })
    .await;
    if found == Ok(true) { Ok(()) } else { Err(seen) }
}

fn add_users(p: &Plant) {
    for (name, role) in
        [("viewer.ng", Role::Viewer), ("operator.kaur", Role::Operator), ("supervisor.ruiz", Role::Supervisor)]
    {
        accounts::add_user(&p.store, name, role, PASSWORD, "test").unwrap();
    }
}

fn pending_work_order(p: &Plant) -> i64 {
    let draft = WorkOrderDraft::new(
        AssetId::parse("PUMP-007").unwrap(),
        None,
        WorkAction::ReplaceBearing,
        WorkPriority::Urgent,
        "Replace PUMP-007 drive-end bearing",
        "Drive-end vibration is in zone C and rising week on week.",
        vec![],
    )
    .unwrap();
    Approvals::new(p.store.writer().clone()).propose(draft, Proposer::Run(1), Timestamp::now()).unwrap().work_order_id
}

/// No account exists on a fresh database; without a session the API answers 401; an
/// operator may not approve (403); a supervisor may (200), and the decision is
/// recorded with who, why and an audit entry.
#[tokio::test(flavor = "multi_thread")]
async fn roles_decide_who_may_do_what() {
    let p = Plant::new();
    assert_eq!(accounts::user_count(&p.store).unwrap(), 0, "no default account");
    let hmi = Hmi::start(&p).await;
    let r = hmi.login("admin", "admin").await;
    assert_eq!(r.headers()[LOCATION], "/?login=failed", "no default admin");

    add_users(&p);
    let wo = pending_work_order(&p);
    let r = hmi.http.get(hmi.url("/api/alarms")).send().await.unwrap();
    assert_eq!(r.status(), StatusCode::UNAUTHORIZED);
    assert!(r.json::<Value>().await.unwrap()["error"].as_str().unwrap().contains("log in first"));

    let operator = hmi.session("operator.kaur").await;
    let r = hmi.post(&format!("/api/work_orders/{wo}/approve"), &operator, json!({"reason": "go"})).await;
    assert_eq!(r.status(), StatusCode::FORBIDDEN);
    assert!(r.json::<Value>().await.unwrap()["error"].as_str().unwrap().contains("needs the supervisor role"));

    let viewer = hmi.session("viewer.ng").await;
    let alarms: Value = hmi.get("/api/alarms", &viewer).await.json().await.unwrap();
    let first = alarms["alarms"][0]["id"].as_i64().expect("the seeded plant has active alarms");
    let r = hmi.post(&format!("/api/alarms/{first}/ack"), &viewer, json!({})).await;
    assert_eq!(r.status(), StatusCode::FORBIDDEN, "viewers read only");

    // Decisions out: listen before deciding.
    let (sub, mut events) = rumqttc::AsyncClient::new(
        rumqttc::MqttOptions::new(
            "web-test-sub",
            "127.0.0.1",
            hmi.daemon.mqtt_url.rsplit(':').next().unwrap().parse().unwrap(),
        ),
        10,
    );
    sub.subscribe("twinops/work_orders/#", rumqttc::QoS::AtLeastOnce).await.unwrap();
    let published = tokio::spawn(async move {
        loop {
            if let Ok(rumqttc::Event::Incoming(rumqttc::Packet::Publish(p))) = events.poll().await {
                return (p.topic.clone(), serde_json::from_slice::<Value>(&p.payload).unwrap());
            }
        }
    });
    tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    let supervisor = hmi.session("supervisor.ruiz").await;
    let r = hmi.post(&format!("/api/work_orders/{wo}/approve"), &supervisor, json!({"reason": ""})).await;
    assert_eq!(r.status(), StatusCode::BAD_REQUEST, "a decision needs a reason");
    // Longer than openapi.json's maxLength (2000): refused as it says, nothing decided.
    let long = "x".repeat(2001);
    let r = hmi.post(&format!("/api/work_orders/{wo}/approve"), &supervisor, json!({ "reason": long })).await;
    assert_eq!(r.status(), StatusCode::UNPROCESSABLE_ENTITY, "a reason over 2000 characters");
    let said = r.text().await.unwrap();
    assert!(said.contains("reason") && said.contains("at most 2000"), "{said}");
    let r =
        hmi.post(&format!("/api/work_orders/{wo}/approve"), &supervisor, json!({"reason": "zone C, change it"})).await;
    assert_eq!(r.status(), StatusCode::OK);
    assert_eq!(r.json::<Value>().await.unwrap()["status"], "approved");
    let again = hmi.post(&format!("/api/work_orders/{wo}/approve"), &supervisor, json!({"reason": "again"})).await;
    assert_eq!(again.status(), StatusCode::CONFLICT);
    assert_eq!(
        p.count(&format!(
            "SELECT count(*) FROM work_orders WHERE id = {wo} AND decided_by = 'supervisor.ruiz' AND decision_reason = 'zone C, change it'"
        )),
        1
    );
    assert_eq!(
        p.count("SELECT count(*) FROM audit_log WHERE action = 'work_order_approved' AND actor = 'supervisor.ruiz'"),
        1
    );
    // Published on MQTT, then marked dispatched.
    let mut dispatched = false;
    for _ in 0..50 {
        if p.count(&format!("SELECT count(*) FROM work_orders WHERE id = {wo} AND status = 'dispatched'")) == 1 {
            dispatched = true;
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    assert!(dispatched, "an approved work order is published and dispatched");
    let (topic, body) = tokio::time::timeout(std::time::Duration::from_secs(10), published).await.unwrap().unwrap();
    assert_eq!(topic, "twinops/work_orders/PUMP-007");
    assert_eq!((body["work_order_id"].as_i64(), body["status"].as_str()), (Some(wo), Some("approved")));

    let r = hmi.post(&format!("/api/alarms/{first}/ack"), &operator, json!({})).await;
    assert_eq!(r.status(), StatusCode::OK, "{:?}", r.text().await);

    // Out of service is a supervisor's decision, with a reason; shelving an operator's.
    let active = alarms["alarms"].as_array().unwrap().iter().find(|a| a["cleared_at"].is_null() && a["id"] != first);
    let first = active.expect("the seeded plant has an active alarm")["id"].as_i64().unwrap();
    let oos = format!("/api/alarms/{first}/out-of-service");
    let r = hmi.post(&oos, &operator, json!({"reason": "permit 4471"})).await;
    assert_eq!(r.status(), StatusCode::FORBIDDEN);
    let r = hmi.post(&oos, &supervisor, json!({"reason": "permit 4471"})).await;
    assert_eq!(r.json::<Value>().await.unwrap()["state"], "out_of_service");
    let r = hmi.post(&format!("/api/alarms/{first}/shelve"), &operator, json!({"minutes": 60, "reason": "x"})).await;
    assert_eq!(r.status(), StatusCode::CONFLICT, "an alarm out of service is not shelved");
    let ids =
        |list: Value| list["alarms"].as_array().unwrap().iter().map(|a| a["id"].as_i64().unwrap()).collect::<Vec<_>>();
    let suppressed = ids(hmi.get("/api/alarms?suppressed=true", &viewer).await.json().await.unwrap());
    assert_eq!(suppressed, [first], "listed apart, for the HMI's suppressed alarms");
    assert!(!ids(hmi.get("/api/alarms", &viewer).await.json().await.unwrap()).contains(&first));
    let r = hmi.post(&format!("/api/alarms/{first}/in-service"), &supervisor, json!({})).await;
    assert_eq!(r.json::<Value>().await.unwrap()["state"], "unacknowledged", "still active: it annunciates again");
    hmi.post(&format!("/api/alarms/{first}/shelve"), &operator, json!({"minutes": 60, "reason": "permit 4472"})).await;
    let r = hmi.post(&format!("/api/alarms/{first}/unshelve"), &operator, json!({})).await;
    assert_eq!(r.json::<Value>().await.unwrap()["state"], "unacknowledged");
    let journal = p.text(&format!(
        "SELECT group_concat(kind || ' by ' || actor, ', ') FROM (SELECT kind, actor FROM alarm_events WHERE alarm_id = {first} AND actor != 'scada' ORDER BY id)"
    ));
    assert!(
        journal.ends_with(
            "out_of_service by supervisor.ruiz, returned_to_service by supervisor.ruiz, shelved by operator.kaur, unshelved by operator.kaur"
        ),
        "{journal}"
    );
    hmi.daemon.shutdown().await;
}

/// The HMI's event feed tells of a dispatch however long after the decision it comes
/// (here a work order approved a minute ago, as if the broker had been down since):
/// without the event the page would show "approved" until reloaded.
#[tokio::test(flavor = "multi_thread")]
async fn the_event_feed_tells_of_a_late_dispatch() {
    let p = Plant::new();
    add_users(&p);
    let hmi = Hmi::start(&p).await;
    let viewer = hmi.session("viewer.ng").await;
    let mut feed = hmi.get("/events", &viewer).await;
    assert_eq!(feed.status(), StatusCode::OK);

    let wo = pending_work_order(&p);
    let long_ago = Timestamp::now().unix() - 60;
    p.store
        .writer()
        .call(move |c| {
            c.execute(
                "UPDATE work_orders SET status = 'approved', proposed_at = ?2, decided_at = ?2, decided_by = 'supervisor.ruiz',
                     decision_reason = 'zone C' WHERE id = ?1",
                rusqlite::params![wo, long_ago],
            )
            .map_err(twinops::store::StoreError::from)
        })
        .unwrap();

    let told = feed_tells(&mut feed, &format!(r#"{{"id":{wo},"status":"dispatched""#), 15).await;
    assert!(told.is_ok(), "no work_order event saying dispatched; the feed said: {told:?}");
    let dispatched_at = p.count(&format!("SELECT dispatched_at FROM work_orders WHERE id = {wo}"));
    assert!(dispatched_at >= long_ago + 60, "dispatched_at is recorded");
    drop(feed);
    hmi.daemon.shutdown().await;
}

/// The returned-to-normal occurrences of a point are acknowledged together, each
/// journalled; active ones and other points are left; a viewer may not.
#[tokio::test(flavor = "multi_thread")]
async fn returned_alarms_of_a_point_are_acknowledged_together() {
    let p = Plant::new();
    add_users(&p);
    let hmi = Hmi::start(&p).await;
    let (viewer, operator) = (hmi.session("viewer.ng").await, hmi.session("operator.kaur").await);
    let point = "asset_id = 'PUMP-004' AND code = 'PRESS-SUC-LO'";
    let returned = format!("SELECT count(*) FROM alarms WHERE {point} AND state = 'rtn_unacknowledged'");
    let (waiting, others) =
        (p.count(&returned), p.count("SELECT count(*) FROM alarms WHERE state = 'rtn_unacknowledged'"));
    assert!(waiting > 1, "the seeded plant has repeats: {waiting}");
    let one = p.count(&format!("SELECT max(id) FROM alarms WHERE {point} AND state = 'rtn_unacknowledged'"));
    let path = format!("/api/alarms/{one}/ack-returned");

    assert_eq!(hmi.post(&path, &viewer, json!({})).await.status(), StatusCode::FORBIDDEN);
    let r = hmi.post(&path, &operator, json!({})).await;
    assert_eq!(r.status(), StatusCode::OK);
    let acked = r.json::<Value>().await.unwrap()["acknowledged"].as_array().unwrap().len() as i64;
    assert_eq!((acked, p.count(&returned)), (waiting, 0));
    assert_eq!(
        p.count("SELECT count(*) FROM alarms WHERE state = 'rtn_unacknowledged'"),
        others - waiting,
        "other points left"
    );
    let journalled = format!(
        "SELECT count(*) FROM alarm_events e JOIN alarms a ON a.id = e.alarm_id
         WHERE a.{point} AND e.kind = 'acknowledged' AND e.actor = 'operator.kaur'
           AND e.detail = 'with its point''s returned alarms'"
    );
    assert_eq!(p.count(&journalled), waiting);

    let again = hmi.post(&path, &operator, json!({})).await;
    assert_eq!(again.status(), StatusCode::CONFLICT);
    assert!(again.text().await.unwrap().contains("no returned-to-normal alarm waiting"));
    assert_eq!(hmi.post("/api/alarms/999999/ack-returned", &operator, json!({})).await.status(), StatusCode::NOT_FOUND);
    hmi.daemon.shutdown().await;
}

/// The banner says when the twin is missing data or notes: messages ingest refused in
/// the last 15 minutes (by reason), and occurrences triage gave up on.
#[tokio::test(flavor = "multi_thread")]
async fn the_banner_tells_of_refused_messages_and_triage_given_up() {
    let p = Plant::new();
    add_users(&p);
    let hmi = Hmi::start(&p).await;
    let viewer = hmi.session("viewer.ng").await;
    let status = || async { hmi.get("/api/status", &viewer).await.json::<Value>().await.unwrap() };
    // Calm once ingest is subscribed (on a loaded machine that can take a moment).
    common::until_subscribed(&hmi.daemon).await;
    let calm = status().await;
    assert_eq!(calm["degraded"], false, "{calm}");

    let port: u16 = hmi.daemon.mqtt_url.rsplit(':').next().unwrap().parse().unwrap();
    let (gateway, mut events) =
        rumqttc::AsyncClient::new(rumqttc::MqttOptions::new("banner-gw", "127.0.0.1", port), 10);
    tokio::spawn(async move { while events.poll().await.is_ok() {} });
    gateway.publish("scada/alarms", rumqttc::QoS::AtLeastOnce, false, "{not json").await.unwrap();
    let unknown =
        json!({"type": "reading", "sensor_id": "PUMP-099.FLOW", "time": Timestamp::now().to_rfc3339(), "value": 1.0});
    for _ in 0..2 {
        gateway.publish("scada/telemetry", rumqttc::QoS::AtLeastOnce, false, unknown.to_string()).await.unwrap();
    }
    for _ in 0..100 {
        if p.count("SELECT coalesce(sum(times_seen), 0) FROM dead_letters") == 3 {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    let alarm = p.count("SELECT min(id) FROM alarms");
    p.store
        .writer()
        .call(move |c| {
            let now = Timestamp::now().unix();
            c.execute(
                "INSERT INTO triage_jobs (alarm_id, state, priority, enqueued_at, started_at, attempts) VALUES (?1, 'failed', 1, ?2, ?2, 3)",
                [alarm, now],
            )?;
            c.execute("UPDATE alarms SET triage_job = ?2 WHERE id = ?1", [alarm, c.last_insert_rowid()])?;
            Ok::<_, twinops::store::StoreError>(())
        })
        .unwrap();

    let told = status().await;
    assert_eq!(told["degraded"], true, "{told}");
    let reasons = told["reasons"].to_string();
    assert!(
        // The same refused content twice is one dead letter, counted once.
        reasons.contains("ingest refused 2 message(s) or event(s) in the last 15 min (1 malformed, 1 unknown_sensor)"),
        "{reasons}"
    );
    assert!(reasons.contains("1 alarm occurrence(s) got no triage note in the last hour"), "{reasons}");
    assert_eq!((told["refused"]["total"].as_i64(), told["triage"]["failed_last_hour"].as_i64()), (Some(2), Some(1)));
    assert_eq!(told["refused"]["by_reason"][1], json!({"reason": "unknown_sensor", "count": 1}));
    hmi.daemon.shutdown().await;
}

/// The incoming shift reads handovers in the HMI; an operator may write one now (a
/// viewer may not), at most one a minute, and the event feed tells the page.
#[tokio::test(flavor = "multi_thread")]
async fn handovers_are_read_and_written_in_the_hmi() {
    let p = Plant::new();
    add_users(&p);
    let hmi = Hmi::start(&p).await;
    let (viewer, operator) = (hmi.session("viewer.ng").await, hmi.session("operator.kaur").await);
    let list = hmi.get("/api/handovers", &viewer).await.json::<Value>().await.unwrap();
    assert_eq!(list["handovers"], json!([]));
    let mut feed = hmi.get("/events", &viewer).await;

    let r = hmi.post("/api/handovers", &viewer, json!({})).await;
    assert_eq!(r.status(), StatusCode::FORBIDDEN, "viewers read only");
    let r = hmi.post("/api/handovers", &operator, json!({})).await;
    assert_eq!(r.status(), StatusCode::OK);
    let written = r.json::<Value>().await.unwrap();
    let text = written["text"].as_str().unwrap();
    assert!(text.starts_with("Shift handover:") && text.contains("PUMP-007"), "{written}");
    let note = written["note_id"].as_i64().unwrap();
    let r = hmi.post("/api/handovers", &operator, json!({})).await;
    assert_eq!(r.status(), StatusCode::CONFLICT, "one a minute");
    let error = r.json::<Value>().await.unwrap()["error"].as_str().unwrap().to_string();
    assert!(error.contains(&format!("handover note {note} was written")) && error.contains("ask again in"), "{error}");

    let list = hmi.get("/api/handovers?limit=5", &viewer).await.json::<Value>().await.unwrap();
    assert_eq!(list["handovers"].as_array().unwrap().len(), 1);
    assert_eq!(
        (list["handovers"][0]["note_id"].as_i64(), &list["handovers"][0]["text"]),
        (Some(note), &written["text"])
    );
    assert_eq!(list["handovers"][0]["trigger"], "user:operator.kaur", "who asked");
    let r = hmi.get("/api/handovers?limit=0", &viewer).await;
    assert_eq!(r.status(), StatusCode::BAD_REQUEST);
    assert!(r.text().await.unwrap().contains("use 1 to 50"));
    let run = written["run_id"].as_i64().unwrap();
    let asked = format!("SELECT count(*) FROM agent_runs WHERE id = {run} AND trigger = 'user:operator.kaur'");
    assert_eq!(p.count(&asked), 1);
    let audited = "SELECT count(*) FROM audit_log WHERE action = 'handover_written' AND actor = 'operator.kaur'";
    assert_eq!(p.count(audited), 1);

    let told = feed_tells(&mut feed, &format!(r#""note_id":{note},"kind":"handover""#), 10).await;
    assert!(told.is_ok(), "no note event for the handover; the feed said: {told:?}");
    drop(feed);
    hmi.daemon.shutdown().await;
}

/// A state-changing request from another site is refused, with a session or without;
/// a bearer token (no ambient credential) is not a cross-site risk.
#[tokio::test(flavor = "multi_thread")]
async fn cross_site_requests_are_refused() {
    let p = Plant::new();
    add_users(&p);
    let hmi = Hmi::start(&p).await;
    let operator = hmi.session("operator.kaur").await;
    let alarms: Value = hmi.get("/api/alarms", &operator).await.json().await.unwrap();
    let id = alarms["alarms"][0]["id"].as_i64().unwrap();
    let ack = |origin: Option<&str>, site: Option<&str>| {
        let mut r = hmi.http.post(hmi.url(&format!("/api/alarms/{id}/ack"))).header(COOKIE, &operator);
        if let Some(o) = origin {
            r = r.header(ORIGIN, o);
        }
        if let Some(s) = site {
            r = r.header("sec-fetch-site", s);
        }
        r.send()
    };
    for (origin, site) in [(Some("http://evil.example"), None), (None, Some("cross-site")), (None, None)] {
        let r = ack(origin, site).await.unwrap();
        assert_eq!(r.status(), StatusCode::FORBIDDEN, "{origin:?} {site:?}");
        assert!(r.text().await.unwrap().contains("cross-site request refused"));
    }
    let r = hmi
        .http
        .post(hmi.url("/login"))
        .header(ORIGIN, "http://evil.example")
        .form(&[("name", "operator.kaur"), ("password", PASSWORD)])
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::FORBIDDEN, "login CSRF too");
    assert_eq!(p.count(&format!("SELECT count(*) FROM alarms WHERE id = {id} AND acked_by IS NOT NULL")), 0);

    let (_, token) = accounts::create_token(&p.store, "operator.kaur", "test", "test").unwrap();
    let r = hmi.http.post(hmi.url(&format!("/api/alarms/{id}/ack"))).bearer_auth(&token).send().await.unwrap();
    assert_eq!(r.status(), StatusCode::OK);
    let r = hmi.http.get(hmi.url("/api/me")).bearer_auth("tw_not-a-token").send().await.unwrap();
    assert_eq!(r.status(), StatusCode::UNAUTHORIZED);
    assert_eq!(p.count("SELECT count(*) FROM api_tokens WHERE token_hash LIKE 'tw_%'"), 0, "stored hashed");
    hmi.daemon.shutdown().await;
}

/// Five wrong passwords lock the account out for a while (429), even with the right
/// one; a new login rotates the session id; logout makes the old cookie worthless.
#[tokio::test(flavor = "multi_thread")]
async fn login_limits_rotation_and_logout() {
    let p = Plant::new();
    add_users(&p);
    let hmi = Hmi::start(&p).await;
    for _ in 0..5 {
        let r = hmi.login("viewer.ng", "wrong password here").await;
        assert_eq!(r.headers()[LOCATION], "/?login=failed");
        assert!(cookie_of(&r).is_none());
    }
    let r = hmi.login("viewer.ng", PASSWORD).await;
    assert_eq!(r.status(), StatusCode::TOO_MANY_REQUESTS);
    assert!(r.text().await.unwrap().contains("too many failed logins"));
    assert_eq!(p.count("SELECT count(*) FROM audit_log WHERE action = 'login_failed' AND actor = 'viewer.ng'"), 5);

    let first = hmi.session("operator.kaur").await;
    let r = hmi
        .http
        .post(hmi.url("/login"))
        .header(ORIGIN, &hmi.base)
        .header(COOKIE, &first)
        .form(&[("name", "operator.kaur"), ("password", PASSWORD)])
        .send()
        .await
        .unwrap();
    let second = cookie_of(&r).unwrap();
    assert_ne!(first, second, "a new session id at login");
    assert_eq!(hmi.get("/api/me", &first).await.status(), StatusCode::UNAUTHORIZED, "the old one is ended");
    let me: Value = hmi.get("/api/me", &second).await.json().await.unwrap();
    assert_eq!((me["name"].as_str(), me["role"].as_str()), (Some("operator.kaur"), Some("operator")));
    let set = r.headers()[SET_COOKIE].to_str().unwrap().to_string();
    assert!(set.contains("HttpOnly") && set.contains("SameSite=Strict"), "{set}");
    assert_eq!(second.len(), "twinops_session=".len() + 64, "256 random bits");

    // Idle past web.session_idle_minutes: the session is over.
    let third = hmi.session("operator.kaur").await;
    p.write("UPDATE sessions SET last_seen_at = last_seen_at - 3600");
    assert_eq!(hmi.get("/api/me", &third).await.status(), StatusCode::UNAUTHORIZED, "idle timeout");
    let second = hmi.session("operator.kaur").await;

    let r = hmi.http.post(hmi.url("/logout")).header(COOKIE, &second).header(ORIGIN, &hmi.base).send().await.unwrap();
    assert_eq!(r.status(), StatusCode::SEE_OTHER);
    assert_eq!(hmi.get("/api/me", &second).await.status(), StatusCode::UNAUTHORIZED, "invalid after logout");
    assert_eq!(p.count("SELECT count(*) FROM audit_log WHERE action IN ('login', 'logout')"), 5);
    hmi.daemon.shutdown().await;
}

/// Every response carries the security headers; the OpenAPI description lists every
/// API path the router serves, with the roles.
#[tokio::test(flavor = "multi_thread")]
async fn headers_openapi_and_health() {
    let p = Plant::new();
    add_users(&p);
    let hmi = Hmi::start(&p).await;
    for path in ["/", "/app.js", "/api/me", "/healthz"] {
        let r = hmi.http.get(hmi.url(path)).send().await.unwrap();
        let csp = r.headers()["content-security-policy"].to_str().unwrap();
        assert!(
            csp.contains("script-src 'self'")
                && !csp.contains("unsafe-inline")
                && csp.contains("frame-ancestors 'none'"),
            "{path}: {csp}"
        );
        assert_eq!(r.headers()["x-content-type-options"], "nosniff");
    }
    let page = hmi.http.get(hmi.url("/")).send().await.unwrap().text().await.unwrap();
    assert!(
        !page.contains("<script>") && !page.contains("http://") && !page.contains("https://"),
        "no inline script, no remote origin"
    );

    let doc: Value = hmi.http.get(hmi.url("/api/openapi.json")).send().await.unwrap().json().await.unwrap();
    assert_eq!(doc["openapi"], "3.1.0");
    let approve = &doc["paths"]["/api/work_orders/{id}/approve"]["post"];
    assert_eq!(approve["x-role"], "supervisor");
    assert!(approve["requestBody"]["content"]["application/json"]["schema"].is_object());
    // What the server really does: typed path ids, query parameters, every status, the login form.
    assert_eq!(approve["parameters"][0]["schema"]["type"], "integer", "row ids are whole numbers");
    assert_eq!(
        doc["paths"]["/api/assets/{id}"]["get"]["parameters"][0]["schema"]["type"], "string",
        "plant ids are text"
    );
    let statuses: Vec<&String> = approve["responses"].as_object().unwrap().keys().collect();
    for s in ["200", "400", "401", "403", "404", "409", "413", "415", "422"] {
        assert!(statuses.iter().any(|k| *k == s), "{s} in {statuses:?}");
    }
    let query: Vec<&str> = doc["paths"]["/api/alarms"]["get"]["parameters"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|p| p["in"] == "query")
        .map(|p| p["name"].as_str().unwrap())
        .collect();
    assert!(
        ["active", "suppressed", "asset", "sensor", "code", "limit"].iter().all(|q| query.contains(q)),
        "{query:?}"
    );
    assert!(doc["paths"]["/api/users"]["post"]["responses"]["201"].is_object(), "a creation is 201");
    let login = &doc["paths"]["/login"]["post"];
    assert!(
        login["requestBody"]["content"]["application/x-www-form-urlencoded"]["schema"]["properties"]["password"]
            .is_object()
    );
    assert!(login["responses"]["303"].is_object() && login["responses"]["429"].is_object());
    let operator = hmi.session("operator.kaur").await;
    let gets = doc["paths"].as_object().unwrap().iter().filter(|(_, ops)| ops.get("get").is_some());
    for (path, _) in gets.filter(|(p, _)| p.starts_with("/api/") && !p.contains('{')) {
        let r = hmi.get(path, &operator).await;
        assert!(
            r.status() != StatusCode::NOT_FOUND && r.status() != StatusCode::METHOD_NOT_ALLOWED,
            "{path}: {}",
            r.status()
        );
    }
    assert_eq!(hmi.http.get(hmi.url("/healthz")).send().await.unwrap().status(), StatusCode::OK);
    assert_eq!(
        hmi.get("/api/sensors/PUMP-007.VIB-DE/readings?hours=500", &operator).await.status(),
        StatusCode::BAD_REQUEST
    );
    // The seeded week ended in the past: the trend shows its last 24 hours, and says so.
    let trend: Value = hmi.get("/api/sensors/PUMP-007.VIB-DE/readings?hours=24", &operator).await.json().await.unwrap();
    assert_eq!(
        (trend["until"].as_str(), trend["stale"].as_bool()),
        (Some(common::END), Some(true)),
        "{}",
        trend["until"]
    );
    assert!(trend["points"].as_array().unwrap().len() > 100, "the last day's readings");
    let r = hmi.get("/api/sensors/PUMP-007.NOPE/readings", &operator).await;
    assert_eq!(r.status(), StatusCode::NOT_FOUND);
    assert!(r.json::<Value>().await.unwrap()["error"].as_str().unwrap().contains("no sensor PUMP-007.NOPE"));
    hmi.daemon.shutdown().await;
}

fn sample(metrics: &str, series: &str) -> f64 {
    metrics.lines().find_map(|l| l.strip_prefix(series).and_then(|v| v.trim().parse().ok())).unwrap_or(0.0)
}

/// After an alarm over MQTT (triaged by the scripted model) and a chat turn, the
/// counters on /metrics have moved, and gauges read the twin.
#[tokio::test(flavor = "multi_thread")]
async fn metrics_move_after_a_scripted_run() {
    use twinops::scripted::{Reply, ScriptedServer};
    let p = Plant::new();
    add_users(&p);
    let note = json!({"summary": "METRICS-TEST on PUMP-007: a test alarm.", "urgency": "urgent",
                      "likely_causes": ["The metrics test raised it on purpose"],
                      "recommended_actions": ["No action beyond reading this note"], "proposed_work_order": null,
                      "evidence": [{"claim": "PUMP-007 details read", "source": "get_asset_details"}]});
    let server = ScriptedServer::start(vec![
        Reply::call("c1", "get_asset_details", json!({"asset_id": "PUMP-007"})),
        Reply::Text(note.to_string()),
        Reply::call("c2", "get_asset_details", json!({"asset_id": "PUMP-004"})),
        Reply::text("PUMP-004 is running."),
    ])
    .await;
    let path = p.dir.path().join("twinops.toml");
    std::fs::write(
        &path,
        format!("[[llm.chain]]\nkind = \"openai\"\nbase_url = \"{}\"\nmodel = \"scripted\"\n", server.openai_url()),
    )
    .unwrap();
    let mut config = common::test_config("metrics");
    config.llm = Config::load(&path, &|_| None).unwrap().llm;
    let hmi = Hmi::start_with(&p, config).await;
    let scrape = || async { hmi.http.get(hmi.url("/metrics")).send().await.unwrap().text().await.unwrap() };
    let before = scrape().await;
    assert!(
        before.contains("# TYPE twinops_ingest_messages_received_total counter"),
        "every declared metric is exported"
    );

    let event = json!({"type": "alarm", "event_id": "metrics-1", "asset_id": "PUMP-007", "code": "METRICS-TEST",
                       "severity": "high", "state": "raised", "time": Timestamp::now().to_rfc3339()});
    common::until_subscribed(&hmi.daemon).await;
    twinops::publish::publish_all(
        &hmi.daemon.mqtt_url,
        "metrics-pub",
        "scada/alarms",
        vec![event.to_string().into_bytes(), b"{oops".to_vec()],
    )
    .await
    .unwrap();
    let noted = "SELECT count(*) FROM notes n JOIN alarms a ON a.id = n.alarm_id WHERE a.event_id = 'metrics-1'";
    for _ in 0..100 {
        if p.count(noted) == 1 {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    assert_eq!(p.count(noted), 1);
    let operator = hmi.session("operator.kaur").await;
    let chat = hmi.post("/api/chat", &operator, json!({"message": "How is PUMP-004?"})).await.text().await.unwrap();
    assert!(chat.contains("event: done"), "{chat}");

    let after = scrape().await;
    for series in [
        "twinops_ingest_messages_received_total ",
        "twinops_ingest_messages_committed_total ",
        "twinops_ingest_messages_acked_total ",
        "twinops_ingest_dead_letters_total{reason=\"malformed\"} ",
        "twinops_alarms_raised_total{severity=\"high\"} ",
        "twinops_triage_runs_total{mode=\"agent\",outcome=\"final\"} ",
        "twinops_model_calls_total{provider=\"openai:scripted\",outcome=\"ok\"} ",
        "twinops_model_call_seconds_count{provider=\"openai:scripted\"} ",
        "twinops_tool_calls_total{tool=\"get_asset_details\",caller=\"agent\",outcome=\"ok\"} ",
        "twinops_http_requests_total{route=\"/api/chat\",method=\"POST\",status=\"200\"} ",
        "twinops_ingest_commit_seconds_count ",
    ] {
        assert!(sample(&after, series) > sample(&before, series), "{series} did not move:\n{after}");
    }
    assert!(after.contains("twinops_alarms{state=\"unacknowledged\",severity=\"high\"} "), "gauges read the twin");
    assert!(after.contains("twinops_model_breaker_open{provider=\"openai:scripted\"} 0"));
    assert!(!after.contains("metrics-1") && !after.contains("PUMP-007"), "no ids in labels");

    // Every time in the API's JSON is RFC 3339, from handlers on serde types and on
    // SQLite's json_object alike.
    let alarm = p.count("SELECT id FROM alarms WHERE event_id = 'metrics-1'");
    let run = p.count("SELECT max(id) FROM agent_runs");
    let mut times = 0;
    for path in [
        format!("/api/alarms/{alarm}"),
        "/api/alarms?active=false&limit=50".into(),
        "/api/alarm-points".into(),
        format!("/api/runs/{run}"),
        "/api/work_orders".into(),
        "/api/chat".into(),
        "/api/handovers".into(),
    ] {
        let body: Value = hmi.get(&path, &operator).await.json().await.unwrap();
        times += rfc3339_times(&path, &body);
    }
    assert!(times > 20, "the responses hold times to check ({times})");
    hmi.daemon.shutdown().await;
}

/// Checks that every field named like a time (`*_at`, `at`, `*_until`, `until`) is null
/// or RFC 3339; returns how many were checked.
fn rfc3339_times(path: &str, v: &Value) -> usize {
    match v {
        Value::Object(m) => m
            .iter()
            .map(|(k, v)| {
                let named = k.ends_with("_at") || k == "at" || k.ends_with("until");
                if named && !v.is_null() {
                    let text = v.as_str().unwrap_or_else(|| panic!("{path}: {k} is {v}, not RFC 3339"));
                    twinops::domain::parse_time(text).unwrap_or_else(|e| panic!("{path}: {k} = {text}: {e}"));
                    1
                } else {
                    rfc3339_times(path, v)
                }
            })
            .sum(),
        Value::Array(a) => a.iter().map(|v| rfc3339_times(path, v)).sum(),
        _ => 0,
    }
}

/// An admin manages accounts over the API, and each change takes effect at once: a new
/// role on the user's next request, a reset or a disable ending their sessions, a
/// revoked token refused. The last admin cannot be disabled or demoted. Everyone may
/// change their own password (with the current one), keeping the session they did it
/// from. Only an admin sees users and tokens; every change is in the audit log as done
/// by whoever did it.
#[tokio::test(flavor = "multi_thread")]
async fn an_admin_manages_users_and_tokens() {
    let p = Plant::new();
    add_users(&p);
    accounts::add_user(&p.store, "admin.lee", Role::Admin, PASSWORD, "test").unwrap();
    let hmi = Hmi::start(&p).await;
    let admin = hmi.session("admin.lee").await;
    let supervisor = hmi.session("supervisor.ruiz").await;
    assert_eq!(hmi.get("/api/users", &supervisor).await.status(), StatusCode::FORBIDDEN);
    assert_eq!(hmi.get("/api/tokens", &supervisor).await.status(), StatusCode::FORBIDDEN);
    let users: Value = hmi.get("/api/users", &admin).await.json().await.unwrap();
    let roles: Vec<(&str, &str)> =
        users.as_array().unwrap().iter().map(|u| (u["name"].as_str().unwrap(), u["role"].as_str().unwrap())).collect();
    assert_eq!(
        roles,
        [
            ("admin.lee", "admin"),
            ("operator.kaur", "operator"),
            ("supervisor.ruiz", "supervisor"),
            ("viewer.ng", "viewer")
        ]
    );

    // Adding: a short password is refused with the rule; a name taken, with a conflict.
    let short = json!({"name": "operator.diaz", "role": "operator", "password": "short"});
    let r = hmi.post("/api/users", &admin, short).await;
    assert_eq!(r.status(), StatusCode::BAD_REQUEST);
    assert!(r.text().await.unwrap().contains("at least 12 characters"));
    let diaz = json!({"name": "operator.diaz", "role": "operator", "password": PASSWORD});
    assert_eq!(hmi.post("/api/users", &admin, diaz.clone()).await.status(), StatusCode::CREATED);
    assert_eq!(hmi.post("/api/users", &admin, diaz).await.status(), StatusCode::CONFLICT);
    hmi.session("operator.diaz").await;

    // A role change applies to a session already open.
    let kaur = hmi.session("operator.kaur").await;
    let r = hmi.post("/api/users/operator.kaur/role", &admin, json!({"role": "supervisor"})).await;
    assert_eq!(r.status(), StatusCode::OK);
    let me: Value = hmi.get("/api/me", &kaur).await.json().await.unwrap();
    assert_eq!(me["role"], "supervisor");
    let r = hmi.post("/api/users/nobody/role", &admin, json!({"role": "viewer"})).await;
    assert_eq!(r.status(), StatusCode::NOT_FOUND);

    // Tokens: created for a user, listed with their last use, revoked for good.
    let r = hmi.post("/api/tokens", &admin, json!({"user": "operator.kaur", "label": "historian"})).await;
    assert_eq!(r.status(), StatusCode::CREATED);
    let created = r.json::<Value>().await.unwrap();
    let token = created["token"].as_str().unwrap().to_string();
    let bearer = |t: &str| hmi.http.get(hmi.url("/api/me")).bearer_auth(t.to_string()).send();
    assert_eq!(bearer(&token).await.unwrap().status(), StatusCode::OK);
    let tokens: Value = hmi.get("/api/tokens", &admin).await.json().await.unwrap();
    let listed = &tokens[0];
    assert_eq!(
        (&listed["user"], &listed["label"], &listed["revoked"]),
        (&json!("operator.kaur"), &json!("historian"), &json!(false))
    );
    assert!(listed["last_used_at"].is_string(), "its use is noted: {listed}");
    assert!(!tokens.to_string().contains(&token), "never the token itself");
    let id = listed["id"].as_i64().unwrap();
    assert_eq!(created["id"].as_i64(), Some(id), "the new token's id, to revoke it by");
    assert_eq!(hmi.post(&format!("/api/tokens/{id}/revoke"), &admin, json!({})).await.status(), StatusCode::OK);
    assert_eq!(bearer(&token).await.unwrap().status(), StatusCode::UNAUTHORIZED);
    assert_eq!(hmi.post("/api/tokens/9999/revoke", &admin, json!({})).await.status(), StatusCode::NOT_FOUND);

    // Disabling ends the sessions and refuses logins until enabled again.
    assert_eq!(hmi.post("/api/users/operator.kaur/disable", &admin, json!({})).await.status(), StatusCode::OK);
    assert_eq!(hmi.get("/api/me", &kaur).await.status(), StatusCode::UNAUTHORIZED);
    assert_eq!(hmi.login("operator.kaur", PASSWORD).await.headers()[LOCATION], "/?login=failed");
    let users: Value = hmi.get("/api/users", &admin).await.json().await.unwrap();
    assert!(users.as_array().unwrap().iter().any(|u| u["name"] == "operator.kaur" && u["disabled"] == true));
    let r = hmi.post("/api/tokens", &admin, json!({"user": "operator.kaur", "label": "while disabled"})).await;
    assert_eq!(r.status(), StatusCode::CONFLICT);
    assert!(r.text().await.unwrap().contains("operator.kaur is disabled"), "not 'no user named'");
    assert_eq!(hmi.post("/api/users/operator.kaur/enable", &admin, json!({})).await.status(), StatusCode::OK);
    hmi.session("operator.kaur").await;

    // A reset ends the user's sessions; the new password works.
    let viewer = hmi.session("viewer.ng").await;
    let new = "a brand new passphrase";
    let r = hmi.post("/api/users/viewer.ng/password", &admin, json!({"password": new})).await;
    assert_eq!(r.status(), StatusCode::OK);
    assert_eq!(hmi.get("/api/me", &viewer).await.status(), StatusCode::UNAUTHORIZED);
    assert_eq!(hmi.login("viewer.ng", PASSWORD).await.headers()[LOCATION], "/?login=failed");
    let viewer = cookie_of(&hmi.login("viewer.ng", new).await).expect("logged in with the new password");

    // The last admin stays one.
    for (path, body) in
        [("/api/users/admin.lee/disable", json!({})), ("/api/users/admin.lee/role", json!({"role": "supervisor"}))]
    {
        let r = hmi.post(path, &admin, body).await;
        assert_eq!(r.status(), StatusCode::CONFLICT, "{path}");
        assert!(r.text().await.unwrap().contains("only admin left"));
    }
    assert_eq!(p.text("SELECT role FROM users WHERE name = 'admin.lee'"), "admin");

    // One's own password: the current one is checked; the other sessions end.
    let elsewhere = cookie_of(&hmi.login("viewer.ng", new).await).unwrap();
    let r = hmi.post("/api/me/password", &viewer, json!({"current": "not the password", "new": PASSWORD})).await;
    assert_eq!(r.status(), StatusCode::FORBIDDEN);
    assert!(r.text().await.unwrap().contains("current password is wrong"));
    let r = hmi.post("/api/me/password", &viewer, json!({"current": new, "new": PASSWORD})).await;
    assert_eq!(r.status(), StatusCode::OK);
    assert_eq!(hmi.get("/api/me", &viewer).await.status(), StatusCode::OK, "this session stays");
    assert_eq!(hmi.get("/api/me", &elsewhere).await.status(), StatusCode::UNAUTHORIZED, "the others end");
    hmi.session("viewer.ng").await;

    let audited = |action: &str, actor: &str| {
        p.count(&format!("SELECT count(*) FROM audit_log WHERE action = '{action}' AND actor = '{actor}'"))
    };
    for action in [
        "user_added",
        "user_role_changed",
        "token_created",
        "token_revoked",
        "user_disabled",
        "user_enabled",
        "password_set",
    ] {
        assert_eq!(audited(action, "admin.lee"), 1, "{action}");
    }
    assert_eq!(audited("password_changed", "viewer.ng"), 1);
    assert_eq!(audited("password_change_refused", "viewer.ng"), 1);
    hmi.daemon.shutdown().await;
}

/// An admin takes a consistent copy of the twin over the HMI (what the other node of a
/// pair takes to catch up): a SQLite database with the twin in it, audited; anyone
/// else is refused.
#[tokio::test(flavor = "multi_thread")]
async fn an_admin_takes_a_backup_over_the_hmi() {
    let p = Plant::new();
    add_users(&p);
    accounts::add_user(&p.store, "admin.lee", Role::Admin, PASSWORD, "test").unwrap();
    let hmi = Hmi::start(&p).await;
    let supervisor = hmi.session("supervisor.ruiz").await;
    assert_eq!(hmi.get("/api/backup", &supervisor).await.status(), StatusCode::FORBIDDEN);
    let admin = hmi.session("admin.lee").await;
    let r = hmi.get("/api/backup", &admin).await;
    assert_eq!(r.status(), StatusCode::OK);
    assert_eq!(r.headers()["content-type"], "application/vnd.sqlite3");
    let bytes = r.bytes().await.unwrap();
    assert!(bytes.starts_with(b"SQLite format 3\0"), "a SQLite database");
    let dir = tempfile::tempdir().unwrap();
    let copy = dir.path().join("copy.db");
    std::fs::write(&copy, &bytes).unwrap();
    let db = rusqlite::Connection::open(&copy).unwrap();
    let count = |sql: &str| -> i64 { db.query_row(sql, [], |r| r.get(0)).unwrap() };
    assert_eq!(count("SELECT count(*) FROM users"), 4);
    assert_eq!(count("SELECT count(*) FROM sensors"), p.count("SELECT count(*) FROM sensors"));
    assert_eq!(p.count("SELECT count(*) FROM audit_log WHERE action = 'backup_taken' AND actor = 'admin.lee'"), 1);
    let left: Vec<_> = std::fs::read_dir(p.db_path().parent().unwrap())
        .unwrap()
        .filter_map(|e| e.ok().map(|e| e.file_name().to_string_lossy().to_string()))
        .filter(|n| n.contains("copy-"))
        .collect();
    assert!(left.is_empty(), "nothing left behind: {left:?}");
    hmi.daemon.shutdown().await;
}

/// An open `/events` stream lasts only as long as what opened it: a logout, a revoked
/// token or a disabled user ends it within seconds, while a stream whose credential
/// still holds stays open past the re-check.
#[tokio::test(flavor = "multi_thread")]
async fn an_open_event_stream_ends_with_its_credential() {
    let p = Plant::new();
    add_users(&p);
    let hmi = Hmi::start(&p).await;
    let (kaur, viewer) = (hmi.session("operator.kaur").await, hmi.session("viewer.ng").await);
    let (_, token) = accounts::create_token(&p.store, "supervisor.ruiz", "events", "test").unwrap();
    // Reads a stream to its end, in a task of its own.
    let watch = |r: reqwest::Response| {
        assert_eq!(r.status(), StatusCode::OK);
        tokio::spawn(async move {
            let mut r = r;
            while let Ok(Some(_)) = r.chunk().await {}
        })
    };
    let events = hmi.url("/events");
    let by_session = watch(hmi.http.get(&events).header(COOKIE, &kaur).send().await.unwrap());
    let by_token = watch(hmi.http.get(&events).bearer_auth(&token).send().await.unwrap());
    let by_disabled = watch(hmi.http.get(&events).header(COOKIE, &viewer).send().await.unwrap());
    tokio::time::sleep(std::time::Duration::from_secs(7)).await;
    for (what, stream) in [("session", &by_session), ("token", &by_token), ("user", &by_disabled)] {
        assert!(!stream.is_finished(), "the {what} stream stays open while its credential holds");
    }

    let r = hmi.http.post(hmi.url("/logout")).header(COOKIE, &kaur).header(ORIGIN, &hmi.base).send().await.unwrap();
    assert_eq!(r.status(), StatusCode::SEE_OTHER);
    let id = p.count("SELECT id FROM api_tokens");
    accounts::revoke_token(&p.store, id, "test").unwrap();
    accounts::change_user(&p.store, "viewer.ng", accounts::Change::Disable, "test").unwrap();
    for (what, stream) in [("session", by_session), ("token", by_token), ("user", by_disabled)] {
        let limit = std::time::Duration::from_secs(12);
        assert!(tokio::time::timeout(limit, stream).await.is_ok(), "the {what} stream ended");
    }
    hmi.daemon.shutdown().await;
}

impl Hmi {
    /// A login as sent through a proxy that says the client is `client`.
    async fn login_via(&self, name: &str, password: &str, client: &str) -> reqwest::Response {
        self.http
            .post(self.url("/login"))
            .header(ORIGIN, &self.base)
            .header("x-forwarded-for", client)
            .form(&[("name", name), ("password", password)])
            .send()
            .await
            .unwrap()
    }
}

/// Five wrong passwords lock a name for the address they came from: the admin sees the
/// lock (API and `user list`), each lock is in the audit log, and `unlock` or a
/// password reset lifts it.
#[tokio::test(flavor = "multi_thread")]
async fn an_admin_sees_and_lifts_a_lockout() {
    let p = Plant::new();
    add_users(&p);
    accounts::add_user(&p.store, "admin.li", Role::Admin, PASSWORD, "test").unwrap();
    let hmi = Hmi::start(&p).await;
    let admin = hmi.session("admin.li").await;
    for _ in 0..5 {
        hmi.login("supervisor.ruiz", "a wrong guess").await;
    }
    assert_eq!(hmi.login("supervisor.ruiz", PASSWORD).await.status(), StatusCode::TOO_MANY_REQUESTS);
    let users: Value = hmi.get("/api/users", &admin).await.json().await.unwrap();
    let ruiz = users.as_array().unwrap().iter().find(|u| u["name"] == "supervisor.ruiz").unwrap();
    assert_eq!(
        (ruiz["locks"][0]["address"].as_str(), ruiz["locks"][0]["failures"].as_i64()),
        (Some("127.0.0.1"), Some(5)),
        "{ruiz}"
    );
    assert_eq!(
        p.count("SELECT count(*) FROM audit_log WHERE action = 'login_locked' AND actor = 'supervisor.ruiz'"),
        1
    );
    let cli = |args: &[&str]| {
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_twinops"))
            .arg("--db")
            .arg(p.db_path())
            .args(["--config", "/nonexistent/twinops.toml"])
            .args(args)
            .output()
            .unwrap();
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        String::from_utf8(out.stdout).unwrap()
    };
    let listed = cli(&["user", "list"]);
    let line = listed.lines().find(|l| l.starts_with("supervisor.ruiz")).unwrap();
    assert!(
        line.contains("supervisor.ruiz locked for 127.0.0.1 until") && line.contains("(5 failed logins)"),
        "{listed}"
    );
    assert!(listed.lines().find(|l| l.starts_with("viewer.ng")).unwrap().ends_with(" -"), "{listed}");

    let r = hmi.post("/api/users/supervisor.ruiz/unlock", &admin, json!({})).await;
    assert_eq!(r.status(), StatusCode::OK);
    assert!(hmi.session("supervisor.ruiz").await.starts_with("twinops_session="), "unlocked");
    assert_eq!(p.count("SELECT count(*) FROM audit_log WHERE action = 'user_unlocked' AND actor = 'admin.li'"), 1);

    // Locked again; the CLI's unlock and a password reset lift it too.
    for _ in 0..5 {
        hmi.login("viewer.ng", "a wrong guess").await;
    }
    assert_eq!(hmi.login("viewer.ng", PASSWORD).await.status(), StatusCode::TOO_MANY_REQUESTS);
    assert!(cli(&["user", "unlock", "viewer.ng"]).contains("viewer.ng may log in again"));
    assert_eq!(hmi.login("viewer.ng", PASSWORD).await.status(), StatusCode::SEE_OTHER);
    for _ in 0..5 {
        hmi.login("operator.kaur", "a wrong guess").await;
    }
    let new = "a brand new password here";
    let r = hmi.post("/api/users/operator.kaur/password", &admin, json!({"password": new})).await;
    assert_eq!(r.status(), StatusCode::OK);
    assert_eq!(hmi.login("operator.kaur", new).await.status(), StatusCode::SEE_OTHER, "a reset lifts the lock");
    hmi.daemon.shutdown().await;
}

/// Behind a trusted proxy the client address is the one it forwards: a guesser locks
/// only their own address out, and the supervisor elsewhere still logs in. From a peer
/// that is not a trusted proxy, a forwarded header is ignored: spoofing one does not
/// dodge the lock.
#[tokio::test(flavor = "multi_thread")]
async fn forwarded_addresses_count_only_from_trusted_proxies() {
    let p = Plant::new();
    add_users(&p);
    let mut config = common::test_config("proxy");
    config.web.trusted_proxies = vec!["127.0.0.0/8".parse().unwrap()];
    let proxied = Hmi::start_with(&p, config).await;
    for _ in 0..5 {
        proxied.login_via("supervisor.ruiz", "a wrong guess", "198.51.100.66").await;
    }
    let guesser = proxied.login_via("supervisor.ruiz", PASSWORD, "198.51.100.66").await;
    assert_eq!(guesser.status(), StatusCode::TOO_MANY_REQUESTS);
    let console = proxied.login_via("supervisor.ruiz", PASSWORD, "10.20.0.5").await;
    assert_eq!(console.status(), StatusCode::SEE_OTHER, "the supervisor's console is not locked out");
    let audited = p.text("SELECT address FROM audit_log WHERE action = 'login' AND actor = 'supervisor.ruiz'");
    assert_eq!(audited, "10.20.0.5");
    proxied.daemon.shutdown().await;

    let direct = Hmi::start(&p).await;
    for i in 0..5 {
        direct.login_via("viewer.ng", "a wrong guess", &format!("203.0.113.{i}")).await;
    }
    let spoofed = direct.login_via("viewer.ng", PASSWORD, "203.0.113.99").await;
    assert_eq!(spoofed.status(), StatusCode::TOO_MANY_REQUESTS, "a spoofed header from an untrusted peer is ignored");
    assert_eq!(p.count("SELECT count(*) FROM audit_log WHERE action = 'login_failed' AND address LIKE '203.%'"), 0);
    direct.daemon.shutdown().await;
}

/// A chat run is its asker's: another operator or a viewer gets 404 (its question is
/// not shown), a supervisor and an admin see it; a triage run is everyone's.
#[tokio::test(flavor = "multi_thread")]
async fn a_chat_run_is_seen_by_its_asker_and_supervisors_only() {
    let p = Plant::new();
    add_users(&p);
    accounts::add_user(&p.store, "operator.bauer", Role::Operator, PASSWORD, "test").unwrap();
    accounts::add_user(&p.store, "admin.li", Role::Admin, PASSWORD, "test").unwrap();
    let hmi = Hmi::start(&p).await;
    let kaur = hmi.session("operator.kaur").await;
    let asked = hmi.post("/api/chat", &kaur, json!({"message": "How is PUMP-004? (a private question)"})).await;
    assert!(asked.text().await.unwrap().contains("event: done"));
    let history: Value = hmi.get("/api/chat", &kaur).await.json().await.unwrap();
    let run = history["messages"].as_array().unwrap().iter().find_map(|m| m["run_id"].as_i64()).expect("a run id");
    let path = format!("/api/runs/{run}");

    assert_eq!(hmi.get(&path, &kaur).await.status(), StatusCode::OK, "the asker");
    for other in ["operator.bauer", "viewer.ng"] {
        let r = hmi.get(&path, &hmi.session(other).await).await;
        assert_eq!(r.status(), StatusCode::NOT_FOUND, "{other}");
        assert!(!r.text().await.unwrap().contains("private question"));
    }
    for boss in ["supervisor.ruiz", "admin.li"] {
        let r = hmi.get(&path, &hmi.session(boss).await).await;
        assert_eq!(r.status(), StatusCode::OK, "{boss}");
    }
    p.write("INSERT INTO agent_runs (profile, trigger, started_at) VALUES ('triage', 'alarm:1', 1796040000)");
    let triage = p.count("SELECT max(id) FROM agent_runs WHERE profile = 'triage'");
    let r = hmi.get(&format!("/api/runs/{triage}"), &hmi.session("viewer.ng").await).await;
    assert_eq!(r.status(), StatusCode::OK, "a triage run is everyone's");
    hmi.daemon.shutdown().await;
}

/// Every error is JSON `{"error": ...}` with what to do, whatever refused the request:
/// an unknown route, a wrong method, a path id that is not a number, unknown fields,
/// no content type, a body over 64 KiB, a bad shelve. A browser's locked-out login
/// gets the page back with the reason, not raw JSON.
#[tokio::test(flavor = "multi_thread")]
async fn every_error_is_json_that_says_what_to_do() {
    let p = Plant::new();
    add_users(&p);
    let hmi = Hmi::start(&p).await;
    let (_, token) = accounts::create_token(&p.store, "supervisor.ruiz", "errors", "test").unwrap();
    let send = |method: reqwest::Method, path: &str| hmi.http.request(method, hmi.url(path)).bearer_auth(&token);
    let alarm = p.count("SELECT min(id) FROM alarms WHERE cleared_at IS NULL");
    let cases = [
        (send(reqwest::Method::GET, "/api/nope"), 404, "no such page or endpoint"),
        (send(reqwest::Method::DELETE, "/api/alarms"), 405, "DELETE is not allowed on /api/alarms"),
        (send(reqwest::Method::GET, "/api/runs/abc"), 400, "ids in paths are whole numbers"),
        // A tool's typed error decides the status: an unknown asset is 404, a bad id 400.
        (send(reqwest::Method::GET, "/api/assets/PUMP-999"), 404, "PUMP-999"),
        (send(reqwest::Method::GET, "/api/assets/no%20such%20thing"), 400, "asset_id"),
        (
            send(reqwest::Method::POST, "/api/chat").json(&json!({"message": "hi", "extra": 1})),
            422,
            "unknown field `extra`",
        ),
        (send(reqwest::Method::POST, "/api/chat").body("{\"message\": \"hi\"}"), 415, "Content-Type: application/json"),
        (
            send(reqwest::Method::POST, "/api/chat").json(&json!({"message": "x".repeat(70_000)})),
            413,
            "over the limit of 64 KiB",
        ),
        (
            send(reqwest::Method::POST, &format!("/api/alarms/{alarm}/shelve"))
                .json(&json!({"minutes": 5, "reason": " "})),
            400,
            "a reason is required",
        ),
        (
            send(reqwest::Method::POST, &format!("/api/alarms/{alarm}/shelve"))
                .json(&json!({"minutes": 0, "reason": "x"})),
            400,
            "not 0 minutes",
        ),
    ];
    for (request, status, says) in cases {
        let r = request.send().await.unwrap();
        let what = format!("{} {}", r.status(), r.url().path());
        assert_eq!(r.status().as_u16(), status, "{what}");
        assert!(r.headers()["content-type"].to_str().unwrap().starts_with("application/json"), "{what}");
        let body: Value = r.json().await.unwrap();
        let error = body["error"].as_str().unwrap_or_else(|| panic!("{what}: {body}"));
        assert!(error.contains(says), "{what}: {error}");
        assert!(!error.contains("--reason"), "no CLI flags in the HMI: {error}");
    }

    for _ in 0..5 {
        hmi.login("viewer.ng", "a wrong guess").await;
    }
    let page = hmi
        .http
        .post(hmi.url("/login"))
        .header(ORIGIN, &hmi.base)
        .header("accept", "text/html,application/xhtml+xml")
        .form(&[("name", "viewer.ng"), ("password", PASSWORD)])
        .send()
        .await
        .unwrap();
    assert_eq!(page.status(), StatusCode::SEE_OTHER);
    assert!(page.headers()[LOCATION].to_str().unwrap().starts_with("/?login=locked&minutes="));
    hmi.daemon.shutdown().await;
}

/// A model's placeholder note is set aside for the rules model's, and the note's header
/// in the HMI says why, in words (issue 28); the metric counts it by flaw.
#[tokio::test(flavor = "multi_thread")]
async fn a_set_aside_note_says_why_in_its_header() {
    use twinops::scripted::{Reply, ScriptedServer};
    let p = Plant::new();
    add_users(&p);
    let placeholder = json!({"summary": "1", "urgency": "urgent", "likely_causes": ["A", "B"],
                             "recommended_actions": ["1"], "proposed_work_order": null,
                             "evidence": [{"claim": "2023-07-21T08:29:10", "source": "Adabamai"}]});
    let server = ScriptedServer::cycling(vec![Reply::Text(placeholder.to_string())]).await;
    let path = p.dir.path().join("twinops.toml");
    std::fs::write(
        &path,
        format!("[[llm.chain]]\nkind = \"openai\"\nbase_url = \"{}\"\nmodel = \"scripted\"\n", server.openai_url()),
    )
    .unwrap();
    let mut config = common::test_config("set-aside");
    config.llm = Config::load(&path, &|_| None).unwrap().llm;
    let hmi = Hmi::start_with(&p, config).await;
    let event = json!({"type": "alarm", "event_id": "aside-1", "asset_id": "PUMP-004", "code": "ASIDE-TEST",
                       "severity": "medium", "state": "raised", "time": Timestamp::now().to_rfc3339()});
    common::until_subscribed(&hmi.daemon).await;
    twinops::publish::publish_all(
        &hmi.daemon.mqtt_url,
        "aside-pub",
        "scada/alarms",
        vec![event.to_string().into_bytes()],
    )
    .await
    .unwrap();
    let noted = "SELECT count(*) FROM notes n JOIN alarms a ON a.id = n.alarm_id WHERE a.event_id = 'aside-1'";
    for _ in 0..100 {
        if p.count(noted) == 1 {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    let id = p.count("SELECT id FROM alarms WHERE event_id = 'aside-1'");
    let operator = hmi.session("operator.kaur").await;
    let record: Value = hmi.get(&format!("/api/alarms/{id}"), &operator).await.json().await.unwrap();
    let note = &record["note"];
    assert_eq!(note["flags"], json!(["set_aside:no_observation", "degraded"]), "{record}");
    assert_eq!(
        note["set_aside"],
        "the model's note was set aside for the rules model's: no tool read the alarm's asset or sensor in this run"
    );
    assert!(note["body"]["summary"].as_str().unwrap().starts_with("ASIDE-TEST on PUMP-004"), "{note}");
    let metrics = hmi.http.get(hmi.url("/metrics")).send().await.unwrap().text().await.unwrap();
    assert!(metrics.contains("twinops_agent_notes_set_aside_total{flaw=\"no_observation\"} 1"), "{metrics}");
}

/// `GET /api/alarm-kpis`: the figures over a window, with the JSON keys other tools
/// read; a bad window is a 400 that says what to send; it is in the OpenAPI description.
#[tokio::test(flavor = "multi_thread")]
async fn alarm_kpis_over_http() {
    let p = Plant::new();
    add_users(&p);
    let hmi = Hmi::start(&p).await;
    let viewer = hmi.session("viewer.ng").await;
    let r = hmi.get("/api/alarm-kpis?from=2026-11-23T12:00:00Z&to=2026-11-30T12:00:00Z", &viewer).await;
    assert_eq!(r.status(), StatusCode::OK);
    let k: Value = r.json().await.unwrap();
    for key in [
        "annunciated",
        "rate_per_10min",
        "peak_10min",
        "pct_periods_over_10",
        "pct_time_in_flood",
        "floods",
        "top10_share_pct",
        "bad_actors",
        "chattering",
        "stale",
        "priority_pct",
    ] {
        assert!(k.get(key).is_some(), "{key} missing: {k}");
    }
    let raised = p.count("SELECT count(*) FROM alarm_events WHERE kind = 'raised' AND at >= strftime('%s', '2026-11-23T12:00:00') AND at < strftime('%s', '2026-11-30T12:00:00')");
    assert_eq!(k["annunciated"].as_i64(), Some(raised));
    assert_eq!(k["window"]["periods_10min"], 1008);
    let r = hmi.get("/api/alarm-kpis?from=2026-12-01&to=2026-11-01", &viewer).await;
    assert_eq!(r.status(), StatusCode::BAD_REQUEST);
    let e: Value = r.json().await.unwrap();
    assert!(e["error"].as_str().unwrap().contains("must be before to"), "{e}");
    let r = hmi.get("/api/alarm-kpis?chatter_count=1", &viewer).await;
    assert_eq!(r.status(), StatusCode::BAD_REQUEST);
    let spec: Value = hmi.http.get(hmi.url("/api/openapi.json")).send().await.unwrap().json().await.unwrap();
    let params = &spec["paths"]["/api/alarm-kpis"]["get"]["parameters"];
    assert!(params.as_array().unwrap().iter().any(|p| p["name"] == "chatter_window_secs"), "{params}");
}

/// An alarm's detail carries its point's entry in the master alarm database (the demo
/// site's sheet), with the entry's history; a point without one says it is not
/// rationalized.
#[tokio::test(flavor = "multi_thread")]
async fn an_alarms_detail_carries_its_rationalization() {
    let p = Plant::new();
    add_users(&p);
    let hmi = Hmi::start(&p).await;
    let viewer = hmi.session("viewer.ng").await;
    let with = p.count(
        "SELECT a.id FROM alarms a JOIN alarm_points p ON p.asset_id = a.asset_id AND p.code = a.code
           AND (p.sensor_id IS NULL OR p.sensor_id = a.sensor_id) ORDER BY a.id LIMIT 1",
    );
    // The demo's motors are not rationalized yet.
    let event = json!({"type": "alarm", "event_id": "mtr-1", "asset_id": "MTR-004", "sensor_id": "MTR-004.CURRENT",
        "code": "MTR-CURRENT-HI", "severity": "medium", "state": "raised", "value": 241.0, "threshold": 240.0,
        "time": common::end().to_rfc3339()});
    twinops::ingest::apply(
        p.store.writer(),
        "scada/alarms",
        event.to_string().as_bytes(),
        common::end(),
        Default::default(),
    )
    .unwrap();
    let without = p.count("SELECT id FROM alarms WHERE event_id = 'mtr-1'");
    let r: Value = hmi.get(&format!("/api/alarms/{with}"), &viewer).await.json().await.unwrap();
    let entry = &r["rationalization"];
    assert_eq!(entry["rationalized"], true, "{r}");
    assert_eq!(entry["code"], r["alarm"]["code"]);
    assert!(
        entry["response"].as_str().is_some_and(|s| s.len() > 20) && entry["respond_within_min"].is_number(),
        "{entry}"
    );
    assert_eq!(entry["history"][0]["new"], "added");
    assert_eq!(entry["history"][0]["actor"], "seed");
    let r: Value = hmi.get(&format!("/api/alarms/{without}"), &viewer).await.json().await.unwrap();
    assert_eq!(r["rationalization"]["rationalized"], false, "{r}");
    assert!(r["rationalization"]["note"].as_str().unwrap().starts_with("not rationalized"));
}

/// A proposed alarm change is listed with its replay and decided by a supervisor only;
/// deciding it twice is a conflict.
#[tokio::test(flavor = "multi_thread")]
async fn alarm_changes_are_decided_by_supervisors() {
    let p = Plant::new();
    add_users(&p);
    let proposed = p.ok(
        "propose_alarm_change",
        json!({"sensor_id": "PUMP-007.VIB-DE", "level": "h", "deadband": 0.5, "on_delay_s": 120,
               "reason": "VIB-HI is this week's bad actor: it chatters around 4.5 mm/s"}),
    );
    let id = proposed["alarm_change_id"].as_i64().unwrap();
    let hmi = Hmi::start(&p).await;
    let (viewer, operator, supervisor) =
        (hmi.session("viewer.ng").await, hmi.session("operator.kaur").await, hmi.session("supervisor.ruiz").await);
    let listed: Value = hmi.get("/api/alarm-changes?status=pending_approval", &viewer).await.json().await.unwrap();
    let change = &listed["alarm_changes"][0];
    assert_eq!((change["id"].as_i64(), change["applies"].as_str()), (Some(id), Some("scada")), "{listed}");
    assert!(
        change["evidence"]["current"]["activations"].as_i64().unwrap()
            > change["evidence"]["proposed"]["activations"].as_i64().unwrap()
    );
    let path = format!("/api/alarm-changes/{id}/approve");
    assert_eq!(hmi.post(&path, &operator, json!({"reason": "ok"})).await.status(), StatusCode::FORBIDDEN);
    assert_eq!(hmi.post(&path, &supervisor, json!({"reason": ""})).await.status(), StatusCode::BAD_REQUEST);
    let r = hmi.post(&path, &supervisor, json!({"reason": "MOC-17 for the SCADA engineer"})).await;
    assert_eq!(r.status(), StatusCode::OK);
    assert_eq!(r.json::<Value>().await.unwrap()["status"], "approved");
    let r = hmi.post(&format!("/api/alarm-changes/{id}/reject"), &supervisor, json!({"reason": "again"})).await;
    assert_eq!(r.status(), StatusCode::CONFLICT);
    assert_eq!(hmi.get("/api/alarm-changes?status=bogus", &viewer).await.status(), StatusCode::BAD_REQUEST);
    assert_eq!(
        hmi.post("/api/alarm-changes/999/approve", &supervisor, json!({"reason": "x"})).await.status(),
        StatusCode::NOT_FOUND
    );
    // Lifting is for a designed suppression in force (tests/suppression.rs), by a supervisor.
    let lift = format!("/api/alarm-changes/{id}/lift");
    assert_eq!(hmi.post(&lift, &operator, json!({"reason": "ok"})).await.status(), StatusCode::FORBIDDEN);
    let r = hmi.post(&lift, &supervisor, json!({"reason": "not a suppression"})).await;
    assert_eq!(r.status(), StatusCode::CONFLICT);
    assert!(r.text().await.unwrap().contains("only a suppression in force (approved) can be lifted"));
    assert_eq!(
        hmi.post("/api/alarm-changes/999/lift", &supervisor, json!({"reason": "x"})).await.status(),
        StatusCode::NOT_FOUND
    );
}
