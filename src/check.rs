//! `twinops check`: a configuration and everything it points at, one line each, with a
//! verdict and, when something is wrong, what to do. What a site's engineer runs first
//! when the daemon will not start or a part of it is quiet. It changes nothing: the
//! database is opened without migrating, the broker sees a client of its own id that
//! subscribes to nothing, a model server gets one tiny request, nothing is posted.

use std::fmt;
use std::net::{SocketAddr, TcpListener, TcpStream, ToSocketAddrs};
use std::path::Path;
use std::time::{Duration, Instant};

use rusqlite::OpenFlags;
use serde_json::json;

use crate::agent::model::{Message, ModelRequest, ToolSpec};
use crate::config::{Config, ProviderKind};
use crate::store::SCHEMA_VERSION;

/// How long a part has to answer.
const TIMEOUT: Duration = Duration::from_secs(5);

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    Ok,
    /// Works, but worth knowing (an old schema to migrate, low disk).
    Warn,
    Fail,
    /// Not turned on by the configuration.
    Off,
}

impl Verdict {
    fn as_str(self) -> &'static str {
        match self {
            Verdict::Ok => "ok",
            Verdict::Warn => "warn",
            Verdict::Fail => "FAIL",
            Verdict::Off => "off",
        }
    }
}

/// One item's result: what was checked, how it went, and what to do when it failed.
#[derive(Debug, Clone)]
pub struct Line {
    pub item: String,
    pub verdict: Verdict,
    pub detail: String,
    pub fix: Option<String>,
}

impl Line {
    fn new(item: impl Into<String>, verdict: Verdict, detail: impl Into<String>) -> Line {
        Line { item: item.into(), verdict, detail: detail.into(), fix: None }
    }

    fn fail(item: impl Into<String>, detail: impl Into<String>, fix: impl Into<String>) -> Line {
        Line { fix: Some(fix.into()), ..Line::new(item, Verdict::Fail, detail) }
    }
}

impl fmt::Display for Line {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:<5} {:<13} {}", self.verdict.as_str(), self.item, self.detail)?;
        if let Some(fix) = &self.fix {
            write!(f, "\n{:19} -> {fix}", "")?;
        }
        Ok(())
    }
}

/// Checks every part `config` turns on; `db` is the database the daemon would open.
pub async fn run(config: &Config, config_path: &Path, db: &Path) -> Vec<Line> {
    let mut lines = vec![config_line(config_path), database(db)];
    lines.push(mqtt(config).await);
    lines.extend(models(config).await);
    lines.push(embeddings(config).await);
    lines.push(listen("web", &config.web.listen, "web.listen"));
    lines.push(documents(config.schedule.docs_dir.as_deref()));
    lines.push(webhook(config));
    lines.push(directory(config).await);
    lines.push(opcua(config, db).await);
    lines.push(cluster(config).await);
    lines
}

/// The redundant pair: which node holds the lease, and which nodes the broker has.
async fn cluster(config: &Config) -> Line {
    let Some(cfg) = &config.cluster else { return Line::new("cluster", Verdict::Off, "not configured: one node") };
    match crate::cluster::observe(cfg, &config.mqtt, Duration::from_secs(2)).await {
        Ok(seen) => {
            let nodes: Vec<String> = seen
                .nodes
                .iter()
                .map(|n| format!("{} {}", n.node, if n.online { "online" } else { "offline" }))
                .collect();
            let nodes = if nodes.is_empty() { "no node has joined yet".to_string() } else { nodes.join(", ") };
            let (mut verdict, acts) = match &seen.holder {
                Some((node, term)) => (Verdict::Ok, format!("node {node} acts (term {term})")),
                None => (Verdict::Warn, "no node holds the lease yet".to_string()),
            };
            let mut text = format!("pair {}, this node {}: {acts}; {nodes}", cfg.name, cfg.node);
            let acting = seen.holder.as_ref().and_then(|(h, _)| seen.nodes.iter().find(|n| &n.node == h));
            for other in seen.nodes.iter().filter(|n| n.online && Some(&n.node) != acting.map(|a| &a.node)) {
                match acting.and_then(|a| other.behind(a.progress?)) {
                    Some(b) if b.level() => text.push_str(&format!("; {} is level with the acting node", other.node)),
                    Some(b) => {
                        verdict = Verdict::Warn;
                        text.push_str(&format!(
                            "; {} is {} decisions and {} behind the acting node",
                            other.node,
                            b.decisions,
                            b.alarms_s.map_or("every alarm".to_string(), |s| format!("{s} s of alarms"))
                        ));
                    }
                    None => {}
                }
            }
            Line::new("cluster", verdict, text)
        }
        Err(e) => Line::fail(
            "cluster",
            format!("pair {}: {e:#}", cfg.name),
            "the pair decides through the broker: the [mqtt] line says what is wrong with it",
        ),
    }
}

/// The OPC UA server: a session opens with the configured security and login. Like the
/// daemon's first start, this makes our certificate if there is none and keeps a server
/// certificate it is shown and does not trust among the rejected, for `opcua trust`.
async fn opcua(config: &Config, db: &Path) -> Line {
    let cfg = &config.opcua;
    if !cfg.enabled {
        return Line::new("opcua", Verdict::Off, "not configured");
    }
    let data_dir = crate::store::data_dir_of(db);
    let env = |k: &str| std::env::var(k).ok();
    match crate::opcua::connect::once(cfg, &data_dir, &env).await {
        Ok((session, task)) => {
            let namespaces = crate::opcua::browse::namespace_uris(&session).await.map(|n| n.len()).unwrap_or(0);
            let _ = session.disconnect().await;
            task.abort();
            let login = if cfg.user.is_empty() { "anonymous".to_string() } else { format!("as {}", cfg.user) };
            Line::new(
                "opcua",
                Verdict::Ok,
                format!(
                    "{}: a session opens ({} {}, {login}); {namespaces} namespaces",
                    cfg.endpoint, cfg.security_policy, cfg.security_mode
                ),
            )
        }
        Err(e) => Line::fail(
            "opcua",
            format!("{e:#}"),
            "do what the line above says; `twinops opcua trust` lists server certificates",
        ),
    }
}

/// The directory: the service account binds (over TLS unless a lab allows plain).
async fn directory(config: &Config) -> Line {
    let Some(cfg) = config.directory.clone() else {
        return Line::new("directory", Verdict::Off, "not configured: local accounts only");
    };
    let url = cfg.url.clone();
    let dir = match crate::accounts::directory::Directory::new(cfg, &|k| std::env::var(k).ok()) {
        Ok(d) => d,
        Err(e) => return Line::fail("directory", format!("{e:#}"), "fix the [directory] setting it names"),
    };
    match dir.probe().await {
        Ok(()) => Line::new("directory", Verdict::Ok, format!("{url}: the service account binds")),
        Err(e) => Line::fail(
            "directory",
            e.to_string(),
            "check directory.url, ca_file (the CA that signed the directory's certificate), bind_dn and its password",
        ),
    }
}

fn config_line(path: &Path) -> Line {
    let env: Vec<String> = std::env::vars()
        .map(|(k, _)| k)
        .filter(|k| k.starts_with("TWINOPS_") && !k.starts_with("TWINOPS_TEST_"))
        // Not settings: the file's own name, the log filter, the build's stamp.
        .filter(|k| !["TWINOPS_CONFIG", "TWINOPS_LOG", "TWINOPS_GIT_COMMIT"].contains(&k.as_str()))
        .collect();
    let from = if path.exists() {
        format!("{} read", path.display())
    } else {
        format!("{} not found: the defaults", path.display())
    };
    let env = if env.is_empty() { String::new() } else { format!("; from the environment: {}", env.join(", ")) };
    Line::new("config", Verdict::Ok, format!("{from}{env}"))
}

/// The database: there (or its folder, to create it in), its schema, writable, disk.
fn database(path: &Path) -> Line {
    database_state(path).unwrap_or_else(|failed| failed)
}

/// [`database`]'s line, a failure as the error.
fn database_state(path: &Path) -> Result<Line, Line> {
    let fail = |what: String, fix: &str| Line::fail("database", format!("{}: {what}", path.display()), fix);
    let dir = path.parent().unwrap_or(Path::new("."));
    // The daemon creates the folder (and its parents) at first start.
    let existing = dir
        .ancestors()
        .find(|d| d.as_os_str().is_empty() || d.is_dir())
        .ok_or_else(|| fail("no folder of it exists".into(), "set data_dir"))?;
    let existing = if existing.as_os_str().is_empty() { Path::new(".") } else { existing };
    let free = free_disk(existing);
    if !path.exists() {
        if !writable(existing) {
            return Err(fail(
                format!("not there, and {} is not writable by this user", existing.display()),
                "create the folder, owned by the user twinops runs as, or set data_dir (or --data-dir, --db)",
            ));
        }
        let line =
            Line::new("database", Verdict::Ok, format!("{}: not there yet, created at first start", path.display()));
        return Ok(with_disk(line, free));
    }
    let conn = rusqlite::Connection::open_with_flags(path, OpenFlags::SQLITE_OPEN_READ_WRITE).map_err(|e| {
        fail(
            format!("cannot be opened: {e}"),
            "check its owner and mode (the service user reads and writes it) and that it is a twinops database",
        )
    })?;
    let _ = conn.busy_timeout(Duration::from_secs(2));
    let schema: i64 = conn.pragma_query_value(None, "user_version", |r| r.get(0)).map_err(|e| {
        fail(
            format!("not readable as SQLite: {e}"),
            "it is damaged or not a database: stop the daemon and put a backup (twinops backup) in its place",
        )
    })?;
    if schema > SCHEMA_VERSION {
        return Err(fail(
            format!("schema {schema}, newer than this build's {SCHEMA_VERSION}"),
            "run the twinops release that wrote it, or restore a backup taken before the upgrade",
        ));
    }
    conn.execute_batch("BEGIN IMMEDIATE; ROLLBACK;").map_err(|e| {
        let fix = if e.to_string().contains("locked") {
            "another process holds a write lock for long: find it (fuser the file) and stop it"
        } else {
            "give the user twinops runs as write access to the file, its -wal and -shm, and the folder"
        };
        fail(format!("not writable: {e}"), fix)
    })?;
    let line = if schema < SCHEMA_VERSION {
        Line {
            fix: Some("take a backup first (twinops backup FILE): the upgrade cannot be undone".into()),
            ..Line::new(
                "database",
                Verdict::Warn,
                format!("{}: schema {schema}, migrated to {SCHEMA_VERSION} at the next start", path.display()),
            )
        }
    } else {
        Line::new("database", Verdict::Ok, format!("{}: schema {schema}, writable", path.display()))
    };
    Ok(with_disk(line, free))
}

/// An error and its causes, as one line (reqwest's own message leaves them out).
fn causes(e: &dyn std::error::Error) -> String {
    let mut out = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        out.push_str(": ");
        out.push_str(&s.to_string());
        source = s.source();
    }
    out
}

/// Free space where the database lives: under 100 MB fails, under 1 GB warns.
fn with_disk(mut line: Line, free: Option<u64>) -> Line {
    let Some(free) = free else { return line };
    line.detail.push_str(&format!("; {:.1} GB free", free as f64 / 1e9));
    if free < 100_000_000 {
        line.verdict = Verdict::Fail;
        line.fix = Some("free disk space: SQLite refuses every write when the disk is full".into());
    } else if free < 1_000_000_000 && line.verdict == Verdict::Ok {
        line.verdict = Verdict::Warn;
        line.fix =
            Some("under 1 GB: readings take about 60 bytes each; free space or lower readings_retention_days".into());
    }
    line
}

/// Whether this user may create files in `dir`.
fn writable(dir: &Path) -> bool {
    rustix::fs::access(dir, rustix::fs::Access::WRITE_OK | rustix::fs::Access::EXEC_OK).is_ok()
}

fn free_disk(dir: &Path) -> Option<u64> {
    let s = rustix::fs::statvfs(dir).ok()?;
    Some(s.f_bavail.saturating_mul(s.f_frsize))
}

/// The broker: the embedded one's address free, or `mqtt.url`'s broker accepting a
/// connection with the configured credentials and TLS.
async fn mqtt(config: &Config) -> Line {
    let m = &config.mqtt;
    if m.url.is_empty() {
        let mut line = listen("mqtt", &m.embedded_listen, "mqtt.embedded_listen");
        line.detail = format!("the embedded broker: {}", line.detail);
        return line;
    }
    // An id of its own: a second connection under the daemon's would cut the daemon off.
    let mut opts = match crate::ingest::mqtt::options(m, &format!("{}-check", m.client_id)) {
        Ok(o) => o,
        Err(e) => return Line::fail("mqtt", format!("{e:#}"), "fix the [mqtt] setting it names"),
    };
    opts.set_clean_session(true);
    let (client, mut events) = rumqttc::AsyncClient::new(opts, 10);
    let started = Instant::now();
    let outcome = tokio::time::timeout(TIMEOUT, async {
        loop {
            match events.poll().await {
                Ok(rumqttc::Event::Incoming(rumqttc::Packet::ConnAck(_))) => return Ok(()),
                Ok(_) => {}
                Err(e) => return Err(e),
            }
        }
    })
    .await;
    let _ = client.try_disconnect();
    let url = &m.url;
    match outcome {
        Ok(Ok(())) => Line::new(
            "mqtt",
            Verdict::Ok,
            format!(
                "{url}: connected{} in {} ms",
                m.username.as_ref().map(|u| format!(" as {u}")).unwrap_or_default(),
                started.elapsed().as_millis()
            ),
        ),
        Err(_) => Line::fail(
            "mqtt",
            format!("{url}: no answer in {} s", TIMEOUT.as_secs()),
            "a firewall, or the wrong host: check mqtt.url (TWINOPS_MQTT_URL) and that the port is open from here",
        ),
        Ok(Err(e)) => mqtt_failure(url, e),
    }
}

fn mqtt_failure(url: &str, e: rumqttc::ConnectionError) -> Line {
    use rumqttc::{ConnectReturnCode, ConnectionError};
    let text = e.to_string();
    let fix = match &e {
        _ if text.contains("CertificateRequired") => {
            "the broker requires a client certificate: set mqtt.client_cert_file and mqtt.client_key_file"
        }
        ConnectionError::ConnectionRefused(
            ConnectReturnCode::BadUserNamePassword | ConnectReturnCode::NotAuthorized,
        ) => "the broker refused the credentials: check mqtt.username and the password (TWINOPS_MQTT_PASSWORD)",
        ConnectionError::ConnectionRefused(_) => "the broker refused the connection: see its log for why",
        ConnectionError::Tls(_) => {
            "TLS failed: mqtt.ca_file must hold the CA that signed the broker's certificate, the host in mqtt.url \
             must be a name in it, and a broker that asks for a client certificate needs client_cert_file and \
             client_key_file"
        }
        ConnectionError::Io(io) if io.kind() == std::io::ErrorKind::ConnectionRefused => {
            "nothing listens there: is the broker running, and is the port in mqtt.url right?"
        }
        _ => "check mqtt.url (TWINOPS_MQTT_URL) and that the broker is reachable from here",
    };
    Line::fail("mqtt", format!("{url}: {text}"), fix)
}

/// Each model server of the chain: the model served, and one tool call made.
async fn models(config: &Config) -> Vec<Line> {
    let models = crate::agent::models_from_config(&config.llm);
    if config.llm.chain.is_empty() {
        return vec![Line::new("llm", Verdict::Ok, "no model server configured: the rules model triages (built in)")];
    }
    let mut lines = Vec::new();
    for (i, (p, model)) in config.llm.chain.iter().zip(models).enumerate() {
        let item = format!("llm.chain[{i}]");
        if p.kind == ProviderKind::Rules {
            lines.push(Line::new(item, Verdict::Ok, "the rules model: built in, no server"));
            continue;
        }
        let name = model.name().to_string();
        // The models an OpenAI-compatible server lists, to name them if ours fails.
        let mut served = None;
        if p.kind == ProviderKind::Openai {
            match served_models(&item, p.base_url.as_deref(), p.api_key.as_ref()).await {
                Ok(s) => served = s,
                Err(line) => {
                    lines.push(line);
                    continue;
                }
            }
        }
        let started = Instant::now();
        let request = ModelRequest {
            messages: vec![
                Message::System {
                    content: "You check that tool calling works. Answer only by calling the tool.".into(),
                },
                Message::User { content: "Call the tool `ping` with `echo` set to \"twinops\".".into() },
            ],
            tools: vec![ToolSpec {
                name: "ping".into(),
                description: "Answers pong. Call it with echo set to the word you were given.".into(),
                schema: json!({"type": "object", "properties": {"echo": {"type": "string"}}, "required": ["echo"]}),
            }],
            max_tokens: 200,
            ..Default::default()
        };
        let timeout = Duration::from_secs(config.llm.limits.model_timeout_secs.clamp(1, 60));
        let line = match model.complete(&request, timeout).await {
            Ok(reply) if reply.tool_calls.iter().any(|c| c.name == "ping") => Line::new(
                item,
                Verdict::Ok,
                format!("{name}: answered with a tool call in {:.1} s", started.elapsed().as_secs_f64()),
            ),
            Ok(reply) => Line::fail(
                item,
                format!(
                    "{name}: answered without calling the tool ({:?}: {})",
                    reply.finish,
                    reply.text.unwrap_or_default().chars().take(80).collect::<String>()
                ),
                "the agent needs tool calls: start llama.cpp's llama-server with --jinja, vLLM with \
                 --enable-auto-tool-choice and a --tool-call-parser, or set tool_mode = \"json\" for this provider",
            ),
            Err(e) => {
                let model = p.model.as_deref().unwrap_or_default();
                let fix = match served.filter(|s| !s.iter().any(|m| m == model)) {
                    Some(s) => format!(
                        "the server does not serve '{model}'; it serves {}: set model to one of them",
                        s.join(", ")
                    ),
                    None => model_fix(&e),
                };
                Line::fail(item, format!("{name}: {}", e.message), fix)
            }
        };
        lines.push(line);
    }
    lines
}

fn model_fix(e: &crate::agent::model::ModelError) -> String {
    match e.status {
        Some(401 | 403) => "the server refused the key: check api_key_file (or TWINOPS_LLM_API_KEY)".into(),
        Some(404) => {
            "no such model or path: check model and base_url (an OpenAI-compatible base_url ends in /v1)".into()
        }
        Some(429) => "rate limited or out of quota at the provider".into(),
        Some(_) => "the server failed the request: see its log".into(),
        None => "the server does not answer: is it running, and is base_url right and reachable from here?".into(),
    }
}

/// The models an OpenAI-compatible server lists at `/models` (`None` if it lists none);
/// a failed line if it does not answer at all.
async fn served_models(
    item: &str,
    base_url: Option<&str>,
    key: Option<&crate::support::Secret>,
) -> Result<Option<Vec<String>>, Line> {
    crate::support::install_tls_provider();
    let base = base_url.unwrap_or("https://api.openai.com/v1").trim_end_matches('/');
    let Ok(client) = reqwest::Client::builder().timeout(TIMEOUT).build() else { return Ok(None) };
    let mut req = client.get(format!("{base}/models"));
    if let Some(key) = key {
        req = req.bearer_auth(key.expose());
    }
    let resp = req.send().await.map_err(|e| {
        Line::fail(
            item,
            format!("{base}: {}", if e.is_timeout() { "no answer in 5 s".to_string() } else { causes(&e) }),
            "the server does not answer: is it running, and is base_url right and reachable from here?",
        )
    })?;
    if !resp.status().is_success() {
        return Ok(None);
    }
    let body: serde_json::Value = resp.json().await.unwrap_or_default();
    let served: Vec<String> =
        body["data"].as_array().into_iter().flatten().filter_map(|m| m["id"].as_str().map(str::to_string)).collect();
    Ok((!served.is_empty()).then_some(served))
}

async fn embeddings(config: &Config) -> Line {
    let Some(cfg) = config.embeddings.clone() else {
        return Line::new("embeddings", Verdict::Off, "not configured: the documentation search is BM25 alone");
    };
    let url = cfg.base_url.clone();
    let started = Instant::now();
    let result = tokio::task::spawn_blocking(move || {
        crate::rag::Embedder::new(cfg).embed(&["drive-end bearing temperature high".to_string()])
    })
    .await;
    match result {
        Ok(Ok(v)) => Line::new(
            "embeddings",
            Verdict::Ok,
            format!("{url}: a {}-dimension vector in {} ms", v[0].len(), started.elapsed().as_millis()),
        ),
        Ok(Err(e)) => Line::fail(
            "embeddings",
            format!("{url}: {e}"),
            "check embeddings.base_url and model; the search falls back to BM25 alone meanwhile",
        ),
        Err(e) => Line::fail("embeddings", format!("{url}: {e}"), "report this as a bug"),
    }
}

/// A listening address: free to bind now.
fn listen(item: &str, addr: &str, key: &str) -> Line {
    if addr.is_empty() {
        return Line::new(item, Verdict::Off, format!("off ({key} is empty)"));
    }
    let parsed: SocketAddr = match addr.parse() {
        Ok(a) => a,
        Err(_) => {
            return Line::fail(item, format!("'{addr}' is not an address"), format!("set {key} like 127.0.0.1:8080"));
        }
    };
    match TcpListener::bind(parsed) {
        Ok(_) => Line::new(item, Verdict::Ok, format!("{addr} is free to listen on")),
        Err(e) => {
            let fix = match e.kind() {
                std::io::ErrorKind::AddrInUse => format!(
                    "another program listens there (twinops serve itself, if it is running: then this line is \
                     expected); stop it or change {key}"
                ),
                std::io::ErrorKind::PermissionDenied => {
                    format!("ports under 1024 need privileges: set {key} to a higher port")
                }
                _ => format!("this machine has no such address: set {key} to one of its own"),
            };
            Line::fail(item, format!("{addr}: {e}"), fix)
        }
    }
}

/// The documents folder housekeeping re-indexes.
fn documents(dir: Option<&Path>) -> Line {
    let Some(dir) = dir else {
        return Line::new(
            "documents",
            Verdict::Off,
            "schedule.docs_dir not set (manuals indexed with twinops docs index)",
        );
    };
    let entries = match std::fs::read_dir(dir) {
        Ok(e) => e,
        Err(e) => {
            return Line::fail(
                "documents",
                format!("{}: {e}", dir.display()),
                "create the folder or fix schedule.docs_dir; the service user must be able to read it",
            );
        }
    };
    let mut counts = (0usize, 0usize);
    for path in entries.flatten().map(|e| e.path()).filter(|p| p.is_file()) {
        if crate::rag::is_document(&path) {
            counts.0 += 1;
        } else {
            counts.1 += 1;
        }
    }
    let detail = format!("{}: {} manuals to index, {} other files", dir.display(), counts.0, counts.1);
    if counts.0 == 0 {
        return Line {
            fix: Some(format!("put the manuals there as {}", crate::rag::DOCUMENT_KINDS)),
            ..Line::new("documents", Verdict::Warn, detail)
        };
    }
    Line::new("documents", Verdict::Ok, detail)
}

/// The webhook's host reachable; nothing is posted.
fn webhook(config: &Config) -> Line {
    let Some(url) = &config.notify.webhook_url else {
        return Line::new("webhook", Verdict::Off, "notify.webhook_url not set");
    };
    let Ok(parsed) = reqwest::Url::parse(url.expose()) else {
        return Line::fail("webhook", "notify.webhook_url is not a URL", "set it to the full https:// address");
    };
    // The address only: the path usually holds a token.
    let host = parsed.host_str().unwrap_or_default().to_string();
    let port = parsed.port_or_known_default().unwrap_or(443);
    let reachable = (host.as_str(), port)
        .to_socket_addrs()
        .map_err(|e| e.to_string())
        .and_then(|mut a| a.next().ok_or_else(|| "no address".to_string()))
        .and_then(|a| TcpStream::connect_timeout(&a, TIMEOUT).map_err(|e| e.to_string()));
    match reachable {
        Ok(_) => Line::new("webhook", Verdict::Ok, format!("{host}:{port} reachable (nothing posted)")),
        Err(e) => Line::fail(
            "webhook",
            format!("{host}:{port}: {e}"),
            "notes will not reach it: check the host, the site's proxy and firewall",
        ),
    }
}

/// The closing line, and whether everything turned on works.
pub fn summary(lines: &[Line]) -> (String, bool) {
    let failed = lines.iter().filter(|l| l.verdict == Verdict::Fail).count();
    let on = lines.iter().filter(|l| l.verdict != Verdict::Off).count();
    if failed == 0 {
        (format!("all {on} checks passed: everything the configuration turns on works"), true)
    } else {
        (format!("{failed} of {on} checks failed"), false)
    }
}
