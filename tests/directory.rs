//! Directory login against a real OpenLDAP (`slapd` from Debian, started per test by
//! `.ci/slapd` with TLS and a small directory: a user per role, one in no group, one
//! the tests disable). `TWINOPS_TEST_SLAPD` names the slapd binary and
//! `TWINOPS_TEST_LDAP_TLS_DIR` the certificates `.ci/test-certs` made; each test runs
//! its own server, so one may change or stop it without touching the others.

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;

use tempfile::TempDir;
use twinops::accounts::directory::{Directory, DirectoryConfig, DirectoryError};
use twinops::accounts::{self, LoginError, Source};
use twinops::domain::Role;
use twinops::store::Store;

const BASE: &str = "dc=plant,dc=example";

/// A slapd of the test's own; stopped when dropped.
struct Slapd {
    dir: TempDir,
    port: u16,
    tls_port: u16,
    tls: PathBuf,
}

impl Slapd {
    fn start() -> Option<Slapd> {
        let slapd = common::external("TWINOPS_TEST_SLAPD", "OpenLDAP's slapd (Debian's slapd package)")?;
        let tls = common::external("TWINOPS_TEST_LDAP_TLS_DIR", "the test certificates (.ci/test-certs)")?;
        let script = Path::new(env!("CARGO_MANIFEST_DIR")).join(".ci/slapd");
        let path = format!("{}:{}", Path::new(&slapd).parent().unwrap().display(), std::env::var("PATH").unwrap());
        // Ports picked free may be taken by the time slapd binds them: try others.
        let mut errors = Vec::new();
        for _ in 0..3 {
            let dir = TempDir::new().unwrap();
            let (port, tls_port) = (common::free_port(), common::free_port());
            let out = Command::new(&script)
                .args([dir.path().join("ldap").to_str().unwrap(), &tls, &port.to_string(), &tls_port.to_string()])
                .env("PATH", &path)
                .output()
                .unwrap();
            let started = Slapd { dir, port, tls_port, tls: PathBuf::from(&tls) };
            if out.status.success() {
                return Some(started);
            }
            errors.push(String::from_utf8_lossy(&out.stderr).to_string());
        }
        panic!("slapd did not start: {errors:?}")
    }

    fn stop(&self) {
        let pid = std::fs::read_to_string(self.dir.path().join("ldap/slapd.pid")).unwrap_or_default();
        if pid.trim().is_empty() {
            return;
        }
        let _ = Command::new("kill").arg(pid.trim()).status();
        for _ in 0..100 {
            if std::net::TcpStream::connect(("127.0.0.1", self.port)).is_err() {
                return;
            }
            std::thread::sleep(std::time::Duration::from_millis(50));
        }
        panic!("slapd did not stop");
    }

    fn config(&self, url: &str) -> DirectoryConfig {
        let roles = [
            ("twinops-viewers", Role::Viewer),
            ("twinops-operators", Role::Operator),
            ("twinops-supervisors", Role::Supervisor),
            ("twinops-admins", Role::Admin),
        ]
        .map(|(cn, role)| (format!("cn={cn},ou=groups,{BASE}"), role))
        .into_iter()
        .collect();
        let toml = format!(
            "url = \"{url}\"\nca_file = \"{}\"\nbind_dn = \"cn=twinops,ou=services,{BASE}\"\n\
             bind_password = \"service-secret-1\"\nuser_base = \"ou=people,{BASE}\"\n\
             user_filter = \"(&(objectClass=inetOrgPerson)(uid={{name}})(!(employeeType=disabled)))\"\n\
             recheck_secs = 1\ntimeout_secs = 2\nroles = {{}}\n",
            self.tls.join("ca.pem").display()
        );
        let mut cfg: DirectoryConfig = toml::from_str(&toml).unwrap();
        cfg.roles = roles;
        cfg
    }

    fn starttls(&self) -> Directory {
        Directory::new(self.config(&format!("ldap://localhost:{}", self.port)), &|_| None).unwrap()
    }

    fn ldaps(&self) -> Directory {
        Directory::new(self.config(&format!("ldaps://localhost:{}", self.tls_port)), &|_| None).unwrap()
    }

    /// Changes the directory as its administrator (LDIF through ldapmodify).
    fn modify(&self, ldif: &str) {
        // ldap-utils, beside slapd.
        let mut child = Command::new("ldapmodify")
            .args(["-x", "-H", &format!("ldap://127.0.0.1:{}", self.port), "-D", &format!("cn=admin,{BASE}")])
            .args(["-w", "root-secret-1"])
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::null())
            .spawn()
            .unwrap();
        use std::io::Write;
        child.stdin.take().unwrap().write_all(ldif.as_bytes()).unwrap();
        assert!(child.wait().unwrap().success(), "ldapmodify failed on:\n{ldif}");
    }
}

impl Drop for Slapd {
    fn drop(&mut self) {
        self.stop();
    }
}

fn store() -> (TempDir, Store) {
    let dir = TempDir::new().unwrap();
    let store = Store::open(&dir.path().join("twinops.db")).unwrap();
    (dir, store)
}

fn password(name: &str) -> String {
    format!("Pass-{name}-1")
}

fn session_source(store: &Store, name: &str) -> String {
    store
        .read()
        .unwrap()
        .query_row(
            "SELECT s.source FROM sessions s JOIN users u ON u.id = s.user_id WHERE u.name = ?1 ORDER BY s.created_at DESC",
            [name],
            |r| r.get(0),
        )
        .unwrap()
}

#[test]
fn each_role_logs_in_and_the_wrong_ones_are_refused_for_what_they_are() {
    let Some(ldap) = Slapd::start() else { return };
    let (_d, store) = store();
    accounts::add_user(&store, "breakglass", Role::Admin, "local-password-1", "test").unwrap();
    for dir in [ldap.starttls(), ldap.ldaps()] {
        let login = |name: &str, pw: &str| accounts::login(&store, Some(&dir), name, pw, "10.0.0.9");
        for (name, role) in [
            ("viewer.vo", Role::Viewer),
            ("operator.ob", Role::Operator),
            ("supervisor.sk", Role::Supervisor),
            ("admin.ad", Role::Admin),
        ] {
            let (user, token) =
                login(name, &password(name)).unwrap_or_else(|e| panic!("{name} via {}: {e}", dir.url()));
            assert_eq!(user.role, role, "{name}");
            assert_eq!(session_source(&store, name), "directory");
            let live = accounts::session_user(&store, &token, std::time::Duration::from_secs(60)).unwrap();
            assert_eq!(live.map(|u| u.role), Some(role));
        }
        // Case as typed does not make another user.
        assert_eq!(login("Operator.OB", &password("operator.ob")).unwrap().0.name, "operator.ob");
        assert!(matches!(login("operator.ob", "Pass-wrong-1"), Err(LoginError::Wrong)));
        assert!(matches!(login("operator.ob", ""), Err(LoginError::Wrong)), "an empty password is no bind");
        assert!(matches!(login("no.such.user", "whatever-1"), Err(LoginError::Wrong)));
        let refused = login("nobody.nb", &password("nobody.nb")).unwrap_err();
        assert!(matches!(refused, LoginError::NoRole(_)), "{refused}");
        assert!(refused.to_string().contains("none of the directory groups"), "{refused}");
        // LDAP injection in the name finds nobody, whatever the password.
        for name in ["*)(uid=*", "admin)(|(a=*", "*", "admin.ad)(uid=*"] {
            assert!(matches!(login(name, &password("admin.ad")), Err(LoginError::Wrong)), "{name}");
        }
        // The break-glass local admin works beside the directory.
        assert_eq!(login("breakglass", "local-password-1").unwrap().0.role, Role::Admin);
        assert_eq!(dir.up(), Some(true));
    }
    let sources: Vec<(String, Source)> =
        accounts::accounts(&store).unwrap().into_iter().map(|a| (a.name, a.source)).collect();
    assert!(sources.contains(&("breakglass".into(), Source::Local)), "{sources:?}");
    assert!(sources.contains(&("admin.ad".into(), Source::Directory)), "{sources:?}");
    assert!(!sources.iter().any(|(n, _)| n == "nobody.nb" || n.contains('*')), "{sources:?}");
    // Their role and password are the directory's.
    let err =
        accounts::change_user(&store, "operator.ob", accounts::Change::Role(Role::Admin), "breakglass").unwrap_err();
    assert!(err.to_string().contains("change them there"), "{err}");
}

/// A lock is on the account, not on the spelling: after five wrong passwords for
/// `operator.ob` from one address, its other spellings (case, blanks around it, the
/// full-width compatibility forms) are locked too, with the right password, and are not
/// tried against the directory (stopped here, so trying it would say "does not answer").
/// The same holds for a local account; a right password under another spelling does not
/// lift the lock.
#[test]
fn a_lock_holds_the_account_however_its_name_is_typed() {
    let Some(ldap) = Slapd::start() else { return };
    let (_d, store) = store();
    accounts::add_user(&store, "breakglass", Role::Admin, "local-password-1", "test").unwrap();
    let dir = ldap.starttls();
    let login = |name: &str, pw: &str| accounts::login(&store, Some(&dir), name, pw, "10.0.0.9");
    for (account, right) in [("operator.ob", password("operator.ob")), ("breakglass", "local-password-1".into())] {
        for _ in 0..5 {
            assert!(matches!(login(account, "Pass-wrong-1"), Err(LoginError::Wrong)), "{account}");
        }
        let upper = account.to_uppercase();
        let full_width: String = account.chars().map(|c| char::from_u32(c as u32 - 0x21 + 0xFF01).unwrap()).collect();
        let capital = format!("{}{}", account[..1].to_uppercase(), &account[1..]);
        for typed in [account.to_string(), upper, capital, format!("  {account}\t"), full_width] {
            for pw in [right.as_str(), "Pass-wrong-1"] {
                let refused = login(&typed, pw).err();
                assert!(matches!(refused, Some(LoginError::Limited(_))), "{typed:?} with {pw}: {refused:?}");
            }
        }
    }
    ldap.stop();
    let refused = login("OPERATOR.OB", &password("operator.ob")).unwrap_err();
    assert!(matches!(refused, LoginError::Limited(_)), "a locked name is never tried against the directory: {refused}");
    // Failures were counted under the account's one name, and no spelling made a row.
    let names: Vec<String> = {
        let db = store.read().unwrap();
        let mut stmt = db.prepare("SELECT DISTINCT name FROM login_failures ORDER BY name").unwrap();
        stmt.query_map([], |r| r.get(0)).unwrap().collect::<Result<_, _>>().unwrap()
    };
    assert_eq!(names, ["breakglass", "operator.ob"]);
    // The administrator's unlock takes any spelling too.
    accounts::change_user(&store, "BreakGlass", accounts::Change::Unlock, "test").unwrap();
    assert!(login("BREAKGLASS", "local-password-1").is_ok());
}

/// An unknown name is refused in as long as a known name with a wrong password: the
/// medians of 20 tries each, interleaved, are within 10% of each other, so the time a
/// refusal takes does not tell which names the directory has.
#[test]
fn an_unknown_name_takes_as_long_to_refuse_as_a_wrong_password() {
    let Some(ldap) = Slapd::start() else { return };
    let (_d, store) = store();
    let dir = ldap.starttls();
    let median = |mut ms: Vec<f64>| {
        ms.sort_by(f64::total_cmp);
        ms[ms.len() / 2]
    };
    let (mut unknown, mut known) = (Vec::new(), Vec::new());
    // An address a try, so that no lock cuts a series short.
    for i in 0..21 {
        for (name, times) in [("no.such.user", &mut unknown), ("operator.ob", &mut known)] {
            let started = std::time::Instant::now();
            let refused = accounts::login(&store, Some(&dir), name, "Pass-wrong-1", &format!("192.0.2.{}", i + 1));
            assert!(matches!(refused, Err(LoginError::Wrong)), "{name}: {refused:?}");
            // The first round warms both paths (TLS session set-up, prepared statements).
            if i > 0 {
                times.push(started.elapsed().as_secs_f64() * 1000.0);
            }
        }
    }
    let (unknown, known) = (median(unknown), median(known));
    let ratio = unknown / known;
    assert!((0.9..=1.1).contains(&ratio), "median refusal: unknown name {unknown:.1} ms, wrong password {known:.1} ms");
}

#[test]
fn a_leaver_or_a_user_moved_out_of_a_group_loses_access_at_the_next_check() {
    let Some(ldap) = Slapd::start() else { return };
    let (_d, store) = store();
    let dir = ldap.starttls();
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    let mut sessions = Vec::new();
    for name in ["leaver.lv", "operator.ob", "supervisor.sk"] {
        sessions.push(accounts::login(&store, Some(&dir), name, &password(name), "10.0.0.9").unwrap().1);
    }
    let (_, token) = accounts::create_token(&store, "leaver.lv", "historian", "admin.ad").unwrap();
    assert!(accounts::token_user(&store, &token).unwrap().is_some());
    assert_eq!(rt.block_on(accounts::recheck_directory_users(&store, &dir)).unwrap(), (3, 0), "nothing changed yet");

    // The leaver is disabled; the operator is taken out of the operators; the
    // supervisor becomes an admin.
    ldap.modify(&format!(
        "dn: uid=leaver.lv,ou=people,{BASE}\nchangetype: modify\nadd: employeeType\nemployeeType: disabled\n"
    ));
    ldap.modify(&format!(
        "dn: cn=twinops-operators,ou=groups,{BASE}\nchangetype: modify\ndelete: member\nmember: uid=operator.ob,ou=people,{BASE}\n"
    ));
    ldap.modify(&format!(
        "dn: cn=twinops-admins,ou=groups,{BASE}\nchangetype: modify\nadd: member\nmember: uid=supervisor.sk,ou=people,{BASE}\n"
    ));
    assert_eq!(rt.block_on(accounts::recheck_directory_users(&store, &dir)).unwrap(), (3, 2));
    let idle = std::time::Duration::from_secs(60);
    assert!(accounts::session_user(&store, &sessions[0], idle).unwrap().is_none(), "the leaver's session ended");
    assert!(accounts::token_user(&store, &token).unwrap().is_none(), "the leaver's token revoked");
    assert!(accounts::session_user(&store, &sessions[1], idle).unwrap().is_none(), "out of the group: no session");
    let promoted = accounts::session_user(&store, &sessions[2], idle).unwrap().expect("still in");
    assert_eq!(promoted.role, Role::Admin, "the new group's role, live");
    let audit: Vec<String> = store
        .read()
        .unwrap()
        .prepare("SELECT action || ' ' || detail FROM audit_log WHERE action LIKE 'directory_%' ORDER BY id")
        .unwrap()
        .query_map([], |r| r.get(0))
        .unwrap()
        .map(Result::unwrap)
        .collect();
    assert!(audit.iter().any(|a| a.starts_with("directory_access_ended leaver.lv")), "{audit:?}");
    assert!(audit.iter().any(|a| a.contains("supervisor.sk: supervisor -> admin")), "{audit:?}");
    // And they cannot log in again.
    assert!(matches!(
        accounts::login(&store, Some(&dir), "leaver.lv", &password("leaver.lv"), "10.0.0.9"),
        Err(LoginError::Wrong)
    ));
    assert!(matches!(
        accounts::login(&store, Some(&dir), "operator.ob", &password("operator.ob"), "10.0.0.9"),
        Err(LoginError::NoRole(_))
    ));
}

/// Of a redundant pair: what one node's reading of the directory calls for is a change
/// the pair's log carries (as JSON) and the other node applies alike, so a leaver's
/// session made through the log on both ends on both, and a new role is taken on both.
#[test]
fn what_the_directory_says_of_a_leaver_reaches_the_other_node_of_a_pair() {
    let Some(ldap) = Slapd::start() else { return };
    let ((_da, a), (_db, b)) = (store(), store());
    let dir = ldap.starttls();
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    // As the log does: each change applied on both nodes, from what it carries.
    let both = |op: &accounts::AccountOp, by: &str| {
        let carried: accounts::AccountOp = serde_json::from_value(op.args()).unwrap();
        let on_b = accounts::changes::perform(&b, &carried, by);
        let on_a = accounts::changes::perform(&a, op, by);
        assert_eq!(on_a.is_ok(), on_b.is_ok(), "{on_a:?} / {on_b:?}");
        on_a
    };
    let mut sessions = Vec::new();
    for name in ["leaver.lv", "supervisor.sk"] {
        sessions.push(accounts::login_with(&a, Some(&dir), name, &password(name), "10.0.0.9", both).unwrap().1);
    }
    ldap.modify(&format!(
        "dn: uid=leaver.lv,ou=people,{BASE}\nchangetype: modify\nadd: employeeType\nemployeeType: disabled\n"
    ));
    ldap.modify(&format!(
        "dn: cn=twinops-admins,ou=groups,{BASE}\nchangetype: modify\nadd: member\nmember: uid=supervisor.sk,ou=people,{BASE}\n"
    ));
    let (checked, changes) = rt.block_on(accounts::directory_changes(&a, &dir)).unwrap();
    assert_eq!((checked, changes.len()), (2, 2), "{changes:?}");
    for op in &changes {
        both(op, "directory").unwrap();
    }
    let idle = std::time::Duration::from_secs(60);
    for node in [&a, &b] {
        assert!(accounts::session_user(node, &sessions[0], idle).unwrap().is_none(), "the leaver's session ended");
        let promoted = accounts::session_user(node, &sessions[1], idle).unwrap().expect("still in");
        assert_eq!(promoted.role, Role::Admin);
    }
    // The other node's reading, a moment later, finds nothing left to change.
    assert_eq!(rt.block_on(accounts::directory_changes(&b, &dir)).unwrap().1, []);
}

#[test]
fn with_the_directory_down_live_sessions_and_local_logins_keep_working() {
    let Some(ldap) = Slapd::start() else { return };
    let (_d, store) = store();
    accounts::add_user(&store, "breakglass", Role::Admin, "local-password-1", "test").unwrap();
    let dir = ldap.ldaps();
    let (_, session) =
        accounts::login(&store, Some(&dir), "operator.ob", &password("operator.ob"), "10.0.0.9").unwrap();
    ldap.stop();

    let refused = accounts::login(&store, Some(&dir), "supervisor.sk", &password("supervisor.sk"), "10.0.0.9");
    let refused = refused.unwrap_err();
    assert!(matches!(refused, LoginError::DirectoryDown), "{refused}");
    assert!(refused.to_string().contains("does not answer"), "not 'wrong password': {refused}");
    assert_eq!(dir.up(), Some(false));
    assert!(accounts::login(&store, Some(&dir), "breakglass", "local-password-1", "10.0.0.9").is_ok());
    let live = accounts::session_user(&store, &session, std::time::Duration::from_secs(60)).unwrap();
    assert!(live.is_some(), "a live session outlasts the directory's outage");
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    let started = std::time::Instant::now();
    let err = rt.block_on(accounts::recheck_directory_users(&store, &dir)).unwrap_err();
    assert!(matches!(err, DirectoryError::Unreachable { .. }), "{err}");
    assert!(started.elapsed() < std::time::Duration::from_secs(10), "calls time out");
    let live = accounts::session_user(&store, &session, std::time::Duration::from_secs(60)).unwrap();
    assert!(live.is_some(), "an unanswered check ends nothing");
    // The failed directory login did not count towards a lock as a wrong password would.
    let failures: i64 = store
        .read()
        .unwrap()
        .query_row("SELECT count(*) FROM audit_log WHERE action = 'login_failed'", [], |r| r.get(0))
        .unwrap();
    assert_eq!(failures, 0);
}

#[test]
fn a_local_user_the_directory_also_has_is_a_conflict() {
    let Some(ldap) = Slapd::start() else { return };
    let (_d, store) = store();
    accounts::add_user(&store, "operator.ob", Role::Viewer, "local-password-1", "test").unwrap();
    accounts::add_user(&store, "breakglass", Role::Admin, "local-password-1", "test").unwrap();
    let dir = ldap.starttls();
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    assert_eq!(rt.block_on(accounts::directory_conflicts(&store, &dir)).unwrap(), ["operator.ob"]);
    // Meanwhile the local account wins: the directory's password does not log it in.
    assert!(matches!(
        accounts::login(&store, Some(&dir), "operator.ob", &password("operator.ob"), "10.0.0.9"),
        Err(LoginError::Wrong)
    ));
}

/// `twinops check` binds the service account: a line that says so, or what to fix.
#[test]
fn check_says_whether_the_directory_takes_the_service_account() {
    let Some(ldap) = Slapd::start() else { return };
    let dir = TempDir::new().unwrap();
    let run = |password: &str| {
        let config = dir.path().join("twinops.toml");
        let toml = format!(
            "data_dir = \"{}\"\n[web]\nlisten = \"\"\n[mqtt]\nembedded_listen = \"127.0.0.1:{}\"\n[directory]\n\
             url = \"ldaps://localhost:{}\"\nca_file = \"{}\"\nbind_dn = \"cn=twinops,ou=services,{BASE}\"\n\
             bind_password = \"{password}\"\nuser_base = \"ou=people,{BASE}\"\n\
             user_filter = \"(uid={{name}})\"\n[directory.roles]\n\"cn=twinops-operators,ou=groups,{BASE}\" = \"operator\"\n",
            dir.path().display(),
            common::free_port(),
            ldap.tls_port,
            ldap.tls.join("ca.pem").display()
        );
        std::fs::write(&config, toml).unwrap();
        let out = Command::new(env!("CARGO_BIN_EXE_twinops"))
            .args(["--config", config.to_str().unwrap(), "check"])
            .env_remove("TWINOPS_DIRECTORY_BIND_PASSWORD")
            .output()
            .unwrap();
        (out.status.success(), String::from_utf8_lossy(&out.stdout).to_string())
    };
    let (passed, out) = run("service-secret-1");
    assert!(passed, "{out}");
    assert!(out.lines().any(|l| l.starts_with("ok    directory") && l.contains("service account binds")), "{out}");
    let (passed, out) = run("wrong-secret");
    assert!(!passed, "{out}");
    assert!(out.contains("FAIL  directory") && out.contains("refused the service account"), "{out}");
    assert!(!out.contains("wrong-secret"), "the password is never printed:\n{out}");
}

/// The HMI's rules hold for directory users as for local ones, over real HTTP: roles
/// decide (an operator may not approve, 403), cross-site requests are refused, a login
/// rotates the session, logout ends it, wrong passwords lock the name; a user in no
/// group is told so; `/readyz` shows the directory; the Account API says where users
/// come from and refuses to change a directory user's role.
#[tokio::test(flavor = "multi_thread")]
async fn the_hmi_rules_hold_for_directory_users() {
    use reqwest::StatusCode;
    use reqwest::header::{ACCEPT, COOKIE, LOCATION, ORIGIN, SET_COOKIE};
    use serde_json::{Value, json};

    let Some(ldap) = Slapd::start() else { return };
    let p = common::Plant::new();
    let mut config = common::test_config("directory");
    config.directory = Some(ldap.config(&format!("ldaps://localhost:{}", ldap.tls_port)));
    let opts = twinops::app::ServeOptions { config, db: p.db_path(), demo: false, seed_dir: common::seed_dir() };
    let daemon = twinops::app::Daemon::start_on(p.store.clone(), opts).await.unwrap();
    let base = format!("http://{}", daemon.web_addr.unwrap());
    let http = reqwest::Client::builder().redirect(reqwest::redirect::Policy::none()).build().unwrap();
    let login = |name: &str, pw: &str, accept: &str| {
        http.post(format!("{base}/login"))
            .header(ORIGIN, &base)
            .header(ACCEPT, accept)
            .form(&[("name", name), ("password", pw)])
            .send()
    };
    let cookie = |r: &reqwest::Response| {
        r.headers().get(SET_COOKIE).map(|v| v.to_str().unwrap().split(';').next().unwrap().to_string())
    };
    let session = |name: &'static str| {
        let login = &login;
        async move {
            let r = login(name, &password(name), "text/html").await.unwrap();
            assert_eq!(r.headers()[LOCATION], "/", "{name}");
            cookie(&r).unwrap()
        }
    };
    let post = |path: String, cookie: String, body: Value| {
        http.post(format!("{base}{path}")).header(COOKIE, cookie).header(ORIGIN, &base).json(&body).send()
    };

    let draft = twinops::domain::WorkOrderDraft::new(
        twinops::domain::AssetId::parse("PUMP-007").unwrap(),
        None,
        twinops::domain::WorkAction::ReplaceBearing,
        twinops::domain::WorkPriority::Urgent,
        "Replace PUMP-007 drive-end bearing",
        "Drive-end vibration is in zone C and rising week on week.",
        vec![],
    )
    .unwrap();
    let wo = twinops::approvals::Approvals::new(p.store.writer().clone())
        .propose(draft, twinops::approvals::Proposer::Run(1), twinops::domain::Timestamp::now())
        .unwrap()
        .work_order_id;
    let operator = session("operator.ob").await;
    let r = post(format!("/api/work_orders/{wo}/approve"), operator.clone(), json!({"reason": "go"})).await.unwrap();
    assert_eq!(r.status(), StatusCode::FORBIDDEN, "an operator from the directory may not approve");
    // Cross-site: refused, with a directory session as with a local one.
    let r = http
        .post(format!("{base}/api/work_orders/{wo}/approve"))
        .header(COOKIE, session("supervisor.sk").await)
        .header(ORIGIN, "http://evil.example")
        .json(&json!({"reason": "csrf"}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::FORBIDDEN);
    let supervisor = session("supervisor.sk").await;
    let r =
        post(format!("/api/work_orders/{wo}/approve"), supervisor.clone(), json!({"reason": "zone C"})).await.unwrap();
    assert_eq!(r.status(), StatusCode::OK, "{:?}", r.text().await);
    assert_eq!(
        p.count(&format!("SELECT count(*) FROM work_orders WHERE id = {wo} AND decided_by = 'supervisor.sk'")),
        1
    );

    // A new login rotates the session id; logout ends it.
    let again = session("supervisor.sk").await;
    assert_ne!(again, supervisor);
    let r = http.post(format!("{base}/logout")).header(COOKIE, &again).header(ORIGIN, &base).send().await.unwrap();
    assert_eq!(r.status(), StatusCode::SEE_OTHER);
    let me = http.get(format!("{base}/api/me")).header(COOKIE, &again).send().await.unwrap();
    assert_eq!(me.status(), StatusCode::UNAUTHORIZED);

    // No group: said, to the page and to a client.
    let r = login("nobody.nb", &password("nobody.nb"), "text/html").await.unwrap();
    assert_eq!(r.headers()[LOCATION], "/?login=nogroup");
    let r = login("nobody.nb", &password("nobody.nb"), "application/json").await.unwrap();
    assert_eq!(r.status(), StatusCode::FORBIDDEN);
    // Five wrong passwords lock the name, right password or not.
    for _ in 0..5 {
        let r = login("viewer.vo", "Pass-wrong-1", "text/html").await.unwrap();
        assert_eq!(r.headers()[LOCATION], "/?login=failed");
    }
    let r = login("viewer.vo", &password("viewer.vo"), "application/json").await.unwrap();
    assert_eq!(r.status(), StatusCode::TOO_MANY_REQUESTS);

    // Out of the group: the daemon's own check (recheck_secs = 1 here) ends the session.
    let me = |cookie: String| http.get(format!("{base}/api/me")).header(COOKIE, cookie).send();
    assert_eq!(me(operator.clone()).await.unwrap().status(), StatusCode::OK);
    ldap.modify(&format!(
        "dn: cn=twinops-operators,ou=groups,{BASE}\nchangetype: modify\ndelete: member\nmember: uid=operator.ob,ou=people,{BASE}\n"
    ));
    let started = std::time::Instant::now();
    while me(operator.clone()).await.unwrap().status() != StatusCode::UNAUTHORIZED {
        assert!(started.elapsed() < std::time::Duration::from_secs(10), "the session outlived its group");
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    }

    let ready: Value = http.get(format!("{base}/readyz")).send().await.unwrap().json().await.unwrap();
    assert_eq!(ready["directory"], true, "{ready}");
    let admin = session("admin.ad").await;
    let users: Value =
        http.get(format!("{base}/api/users")).header(COOKIE, &admin).send().await.unwrap().json().await.unwrap();
    let source = |name: &str| {
        users.as_array().or(users["users"].as_array()).unwrap().iter().find(|u| u["name"] == name).unwrap()["source"]
            .clone()
    };
    assert_eq!(source("supervisor.sk"), "directory", "{users}");
    let r = post("/api/users/operator.ob/role".into(), admin.clone(), json!({"role": "admin"})).await.unwrap();
    assert!(r.status().is_client_error(), "{}", r.status());
    assert!(r.text().await.unwrap().contains("change them there"));
    daemon.shutdown().await;
}
