//! Accounts, sessions, tokens and the command line of a pair's node, through the
//! pair's log: made on one node, in force on both.

use super::*;

/// Users, logins and tokens made on either node work on both, and no secret is in the
/// log: a user added on the standby logs in on the acting node, and that session's
/// cookie works on the standby (its use there keeps it alive on both); a token made on
/// the acting node works on the standby until revoked there; failed logins on one node
/// lock the name on the other, and an unlock on the one lifts it; a password changed on
/// one is the password on both; disabling the user ends their sessions on both.
pub(super) async fn accounts_reach_both(nodes: &[failover::Node], admins: &[String]) {
    use reqwest::header::{COOKIE, LOCATION, ORIGIN, SET_COOKIE};
    let (first, second) = ("first pair password", "second pair password");
    let a = failover::acting_one(nodes, Duration::from_secs(30)).await.unwrap();
    let s = 1 - a;
    let http = reqwest::Client::builder().redirect(reqwest::redirect::Policy::none()).build().unwrap();
    let base = |i: usize| format!("http://127.0.0.1:{}", nodes[i].web);
    let admin = |i: usize, path: &str, body: serde_json::Value| {
        http.post(format!("{}{path}", base(i))).bearer_auth(&admins[i]).json(&body).send()
    };
    let login = |i: usize, password: &'static str| {
        let form = [("name", "op.pair"), ("password", password)];
        http.post(format!("{}/login", base(i))).header(ORIGIN, base(i)).form(&form).send()
    };
    let cookie = |r: &reqwest::Response| -> Option<String> {
        let set = r.headers().get(SET_COOKIE)?.to_str().ok()?;
        set.split(';').next().filter(|c| !c.ends_with('=')).map(str::to_string)
    };
    let me = |i: usize, cookie: &str| http.get(format!("{}/api/me", base(i))).header(COOKIE, cookie).send();
    let me_by_token = |i: usize, token: &str| http.get(format!("{}/api/me", base(i))).bearer_auth(token).send();

    let r = admin(s, "/api/users", json!({"name": "op.pair", "role": "operator", "password": first})).await.unwrap();
    assert_eq!(r.status().as_u16(), 201, "added on the standby: {}", r.text().await.unwrap());
    // A write is answered once applied on its node; the other applies it within moments.
    level(nodes).await;
    let r = login(a, first).await.unwrap();
    let session = cookie(&r).unwrap_or_else(|| panic!("a session on the acting node: {:?}", r.headers()));
    level(nodes).await;
    let r = me(s, &session).await.unwrap();
    assert_eq!(r.status().as_u16(), 200, "the acting node's session works on the standby");
    assert_eq!(r.json::<serde_json::Value>().await.unwrap()["name"], "op.pair");
    // Used on the standby a while after it was last seen: the acting node hears of it.
    let seen = |n: &failover::Node| -> i64 {
        let db = rusqlite::Connection::open(n.db()).unwrap();
        db.query_row(
            "SELECT max(last_seen_at) FROM sessions s JOIN users u ON u.id = s.user_id WHERE u.name = 'op.pair'",
            [],
            |r| r.get(0),
        )
        .unwrap()
    };
    for n in nodes {
        let db = rusqlite::Connection::open(n.db()).unwrap();
        db.execute("UPDATE sessions SET last_seen_at = last_seen_at - 600 WHERE user_id = (SELECT id FROM users WHERE name = 'op.pair')", []).unwrap();
    }
    let before = seen(&nodes[a]);
    assert_eq!(me(s, &session).await.unwrap().status().as_u16(), 200);
    assert!(common::eventually(Duration::from_secs(10), || seen(&nodes[a]) >= before + 600).await, "seen on both");

    let r = admin(a, "/api/tokens", json!({"user": "op.pair", "label": "pair token"})).await.unwrap();
    assert_eq!(r.status().as_u16(), 201);
    let token = r.json::<serde_json::Value>().await.unwrap()["token"].as_str().unwrap().to_string();
    level(nodes).await;
    assert_eq!(me_by_token(s, &token).await.unwrap().status().as_u16(), 200, "the token works on the standby");
    let listed = |i: usize| {
        let r = http.get(format!("{}/api/tokens", base(i))).bearer_auth(&admins[i]).send();
        async move {
            let all: serde_json::Value = r.await.unwrap().json().await.unwrap();
            all.as_array().unwrap().iter().find(|t| t["label"] == "pair token").unwrap().clone()
        }
    };
    // Said without the request waiting for it: shortly.
    let started = Instant::now();
    while !listed(a).await["last_used_at"].is_string() {
        assert!(started.elapsed() < Duration::from_secs(10), "its use on the standby does not show on the acting node");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let id = listed(s).await["id"].clone();
    let r = admin(s, &format!("/api/tokens/{id}/revoke"), json!({})).await.unwrap();
    assert_eq!(r.status().as_u16(), 200, "revoked on the standby: {}", r.text().await.unwrap());
    let status = status_becomes(401, || me_by_token(a, &token)).await;
    assert_eq!(status, 401, "the revoked token still works on the acting node");

    for _ in 0..twinops::accounts::lockout::PER_NAME_AND_ADDRESS {
        let r = login(a, "a wrong guess at it").await.unwrap();
        assert_eq!(r.headers()[LOCATION], "/?login=failed");
    }
    level(nodes).await;
    let r = login(s, first).await.unwrap();
    assert_eq!(r.status().as_u16(), 429, "failed logins on one node lock the name on the other");
    let r = admin(a, "/api/users/op.pair/unlock", json!({})).await.unwrap();
    assert_eq!(r.status().as_u16(), 200);
    level(nodes).await;
    let r = login(s, first).await.unwrap();
    let on_standby = cookie(&r).expect("unlocked on both");
    level(nodes).await;

    let r = http
        .post(format!("{}/api/me/password", base(s)))
        .header(COOKIE, &on_standby)
        .header(ORIGIN, base(s))
        .json(&json!({"current": first, "new": second}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 200, "{}", r.text().await.unwrap());
    level(nodes).await;
    assert_eq!(login(a, first).await.unwrap().headers()[LOCATION], "/?login=failed", "the old password is gone");
    let renewed = cookie(&login(a, second).await.unwrap()).expect("the new password works on the other node");
    level(nodes).await;
    assert_eq!(me(s, &on_standby).await.unwrap().status().as_u16(), 200, "the changing session stays");

    let r = admin(a, "/api/users/op.pair/disable", json!({})).await.unwrap();
    assert_eq!(r.status().as_u16(), 200);
    for (i, c) in [(s, &on_standby), (a, &renewed), (s, &renewed)] {
        let status = status_becomes(401, || me(i, c)).await;
        assert_eq!(status, 401, "a disabled user's session still works on node {}", nodes[i].name);
    }
    // Only hashes travelled: no password, token or cookie in either node's record of the log.
    for n in nodes {
        let db = rusqlite::Connection::open(n.db()).unwrap();
        let args: Vec<String> = db
            .prepare("SELECT args FROM decisions WHERE kind = 'account'")
            .unwrap()
            .query_map([], |r| r.get(0))
            .unwrap()
            .map(Result::unwrap)
            .collect();
        assert!(args.len() >= 10, "{args:?}");
        let secrets =
            [first, second, &token, session.split('=').nth(1).unwrap(), on_standby.split('=').nth(1).unwrap()];
        assert!(args.iter().all(|a| secrets.iter().all(|s| !a.contains(s))), "a secret in the log: {args:?}");
    }
}

/// Changes made with the command line of either node go through the pair's log: a user
/// added beside the acting node and a plant import beside the standby are on both
/// twins; with a node's daemon stopped, a user added beside it is made there at once
/// and on the other through the log, and once the daemon is back (the log bringing it
/// the same decision) it is not made twice.
pub(super) async fn command_line_reaches_both(nodes: &mut [failover::Node; 2]) {
    use std::io::Write;
    let cli = |n: &failover::Node, args: &[&str], stdin: &str| {
        let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_twinops"))
            .arg("--db")
            .arg(n.db())
            .arg("--config")
            .arg(n.config())
            .args(args)
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        child.stdin.take().unwrap().write_all(stdin.as_bytes()).unwrap();
        let out = child.wait_with_output().unwrap();
        let said = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
        assert!(out.status.success(), "twinops {args:?} beside node {}: {said}", n.name);
        said
    };
    fn count(n: &failover::Node, sql: &str) -> i64 {
        rusqlite::Connection::open(n.db()).unwrap().query_row(sql, [], |r| r.get(0)).unwrap()
    }
    async fn on_both(nodes: &[failover::Node], sql: &str) -> bool {
        common::eventually(Duration::from_secs(10), || nodes.iter().all(|n| count(n, sql) == 1)).await
    }
    let a = failover::acting_one(&nodes[..], Duration::from_secs(30)).await.unwrap();
    let s = 1 - a;
    cli(&nodes[a], &["user", "add", "op.cli", "--role", "viewer"], "a command line password\n");
    assert!(
        on_both(&nodes[..], "SELECT count(*) FROM users WHERE name = 'op.cli'").await,
        "a user added beside the acting node"
    );
    let sheet = nodes[s].db().with_file_name("one-tag.csv");
    std::fs::write(&sheet, "Tag,Equipment,Units,Hi\nPIT-9999,PUMP-007,bar,4\n").unwrap();
    let said = cli(&nodes[s], &["plant", "import", sheet.to_str().unwrap(), "--partial"], "");
    assert!(said.contains("PIT-9999"), "{said}");
    assert!(
        on_both(&nodes[..], "SELECT count(*) FROM sensors WHERE id = 'PIT-9999'").await,
        "imported beside the standby"
    );

    nodes[s].kill();
    // Down as far as the broker knows (its will published), as a command line run
    // beside a stopped daemon finds it, not in the moment before.
    let gone = || async { nodes[a].pair().await.is_some_and(|p| p["peer"]["online"] == false) };
    let started = Instant::now();
    while !gone().await {
        assert!(started.elapsed() < Duration::from_secs(15), "node {} still shows online", nodes[s].name);
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    cli(&nodes[s], &["user", "add", "op.offline", "--role", "viewer"], "made while the daemon is down\n");
    assert!(on_both(&nodes[..], "SELECT count(*) FROM users WHERE name = 'op.offline'").await, "made here and there");
    nodes[s].restart().unwrap();
    let back = || async { nodes[s].pair().await.is_some_and(|p| p["peer"]["decisions_behind"] == 0) };
    let started = Instant::now();
    while !back().await {
        assert!(started.elapsed() < Duration::from_secs(30), "node {} did not come back level", nodes[s].name);
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let added = "SELECT count(*) FROM audit_log WHERE action = 'user_added' AND detail LIKE 'op.offline %'";
    assert_eq!((count(&nodes[a], added), count(&nodes[s], added)), (1, 1), "made once on each node");
}
