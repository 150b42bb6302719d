//! The HMI and its JSON API (axum): the page and its assets (in the binary: sites are
//! air-gapped), login by form into a session cookie, bearer tokens for machines,
//! roles per endpoint, cross-site request refusal, strict security headers, and the
//! `/events` stream.
//!
//! Architecture Invariant: every endpoint is declared once, in `api::endpoints`, with
//! its method, path, role and schemas; the router and `/api/openapi.json` are both
//! built from that list, so neither can drift from the other.

mod admin;
mod alarms;
mod api;
mod chat;
mod client;
mod endpoint;
mod episodes;
mod events;
mod openapi;
mod status;
mod twin;
mod work_orders;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};
use tokio::sync::watch;

use crate::accounts::{self, User};
use crate::agent::Agent;
use crate::domain::Role;
use crate::rag::DocIndex;
use crate::store::Store;

/// The `[web]` part: the HMI and the JSON API.
#[derive(Debug, Clone, serde::Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct WebConfig {
    /// Where the HMI listens; empty turns it off. Loopback by default: put a TLS
    /// reverse proxy in front to serve the control room.
    pub listen: String,
    /// A session ends after this long without a request.
    pub session_idle_minutes: u64,
    /// Mark the session cookie `Secure`: set when the HMI is reached over HTTPS.
    pub secure_cookies: bool,
    /// Reverse proxies (addresses or networks, e.g. "127.0.0.1", "10.0.0.0/8") whose
    /// `X-Forwarded-For` / `Forwarded` header names the client. From any other peer
    /// those headers are ignored: anyone could write them.
    pub trusted_proxies: Vec<crate::domain::IpNet>,
}

impl Default for WebConfig {
    fn default() -> Self {
        WebConfig {
            listen: "127.0.0.1:8080".into(),
            session_idle_minutes: 30,
            secure_cookies: false,
            trusted_proxies: Vec::new(),
        }
    }
}

impl WebConfig {
    pub fn validate(&self) -> anyhow::Result<()> {
        anyhow::ensure!(
            self.listen.is_empty() || self.listen.parse::<SocketAddr>().is_ok(),
            "web.listen '{}' is not an address like 127.0.0.1:8080 (empty turns the HMI off)",
            self.listen
        );
        anyhow::ensure!(self.session_idle_minutes > 0, "web.session_idle_minutes must be at least 1");
        Ok(())
    }
}

pub const SESSION_COOKIE: &str = "twinops_session";

/// What the handlers share.
pub struct WebState {
    pub store: Store,
    /// The chat agent (the configured models, the rules model as the floor).
    pub agent: Arc<Agent>,
    pub docs: DocIndex,
    pub cfg: WebConfig,
    /// Whether the MQTT ingest connection is up (for the degraded banner).
    pub broker_up: watch::Receiver<bool>,
    /// Whether the OPC UA session is up, when `[opcua]` is on.
    pub opcua_up: Option<watch::Receiver<bool>>,
    pub mcp: crate::mcp::McpConfig,
    /// For an alarm returned to service that needs triage.
    pub queue: crate::alarms::QueuePolicy,
    /// Directory login, when `[directory]` is set.
    pub directory: Option<crate::accounts::directory::Directory>,
    /// Of a redundant pair, this node and where it stands.
    pub cluster: Option<Pair>,
}

/// This node of a redundant pair: its settings and where it stands now.
pub struct Pair {
    pub cfg: crate::cluster::ClusterConfig,
    /// Where this node stands, how far it has come, and the other node.
    pub view: crate::cluster::PairView,
    /// Where the alarm actions go, on either node.
    pub log: Arc<crate::cluster::log::DecisionLog>,
    /// Sessions whose use went into the log in the last minute, by cookie hash: the
    /// page's burst of requests says it once.
    pub seen: std::sync::Mutex<std::collections::HashMap<String, std::time::Instant>>,
}

impl Pair {
    /// Makes a decision through the pair's log, answered with how it went on this node
    /// once it has come back and been applied here.
    pub async fn decide(&self, kind: &str, args: Value, actor: &str) -> Result<axum::Json<Value>, ApiError> {
        self.submit(kind, args, actor).await.map(axum::Json)
    }

    /// [`Pair::decide`]: the body of a success, or the refusal (the log's, or this node's).
    pub async fn submit(&self, kind: &str, args: Value, actor: &str) -> Result<Value, ApiError> {
        use crate::cluster::log::SubmitError;
        let (status, body) = self.log.submit(kind, args, actor).await.map_err(|e| {
            let status = match e {
                SubmitError::BrokerAway => StatusCode::SERVICE_UNAVAILABLE,
                SubmitError::NotBack(_) => StatusCode::GATEWAY_TIMEOUT,
            };
            ApiError::new(status, e.to_string())
        })?;
        match StatusCode::from_u16(status) {
            Ok(ok) if ok.is_success() => Ok(body),
            code => Err(ApiError::new(
                code.unwrap_or(StatusCode::INTERNAL_SERVER_ERROR),
                body["error"].as_str().unwrap_or("refused").to_string(),
            )),
        }
    }

    /// Whether the use of the session or API token that hashes to `hash` is still to
    /// be said: once a minute at most.
    pub fn first_seen(&self, hash: &str) -> bool {
        let mut seen = self.seen.lock().expect("seen sessions");
        let now = std::time::Instant::now();
        seen.retain(|_, at| now.duration_since(*at) < Duration::from_secs(60));
        seen.insert(hash.to_string(), now).is_none()
    }

    /// The pair as the banner, `/readyz` and `twinops check` show it. `peer`: the other
    /// node as it last said, and how far behind this one it is
    /// (decisions of the log it has yet to apply, seconds of alarms it has yet to ingest).
    pub fn describe(&self) -> serde_json::Value {
        let now = self.view.standing.borrow().clone();
        let peer = self.view.peer_behind().map(|(p, behind)| {
            json!({"node": p.node, "online": p.online,
                   "decisions_behind": behind.map(|b| b.decisions), "alarms_behind_s": behind.map(|b| b.alarms_s)})
        });
        json!({"node": self.cfg.node, "acting": now.acting, "term": now.term, "active_node": now.holder,
               "peer_hmi": self.cfg.peer_hmi, "peer": peer})
    }
}

/// An error as the API returns it: a status and a message a person can act on.
#[derive(Debug)]
pub struct ApiError {
    pub status: StatusCode,
    pub message: String,
}

impl ApiError {
    pub fn new(status: StatusCode, message: impl Into<String>) -> ApiError {
        ApiError { status, message: message.into() }
    }

    pub fn bad_request(message: impl Into<String>) -> ApiError {
        ApiError::new(StatusCode::BAD_REQUEST, message)
    }

    pub fn not_found(message: impl Into<String>) -> ApiError {
        ApiError::new(StatusCode::NOT_FOUND, message)
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        (self.status, axum::Json(json!({"error": self.message}))).into_response()
    }
}

impl ApiError {
    /// A fault of ours, not the caller's: logged in full, answered without detail.
    pub fn internal(e: impl Into<anyhow::Error>) -> ApiError {
        let e = e.into();
        tracing::error!(stage = "web", error = %format!("{e:#}"), "request failed");
        ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, "internal error; the daemon log has the details")
    }
}

impl From<crate::store::StoreError> for ApiError {
    fn from(e: crate::store::StoreError) -> Self {
        ApiError::internal(e)
    }
}

/// A blocking task that panicked.
impl From<tokio::task::JoinError> for ApiError {
    fn from(e: tokio::task::JoinError) -> Self {
        ApiError::internal(e)
    }
}

impl From<rusqlite::Error> for ApiError {
    fn from(e: rusqlite::Error) -> Self {
        ApiError::internal(e)
    }
}

/// The router: endpoints from `api::endpoints`, then authentication, cross-site
/// refusal and security headers around all of it.
pub fn router(state: Arc<WebState>) -> Router {
    api::routes(Arc::clone(&state))
        .merge(mcp_routes(&state))
        .layer(axum::middleware::from_fn_with_state(Arc::clone(&state), stand_by))
        .layer(axum::middleware::from_fn_with_state(Arc::clone(&state), authenticate))
        .layer(axum::middleware::from_fn(count_requests))
        .layer(axum::middleware::from_fn(refuse_cross_site))
        .layer(axum::middleware::from_fn(json_errors))
        .layer(axum::middleware::from_fn(security_headers))
        .layer(axum::extract::DefaultBodyLimit::max(64 * 1024))
}

/// The changes made on either node of a pair, since they go through its decision log:
/// (routes under, ending in).
const SHARED: &[(&str, &[&str])] = &[
    ("/api/users", &[""]),
    ("/api/tokens", &[""]),
    ("/api/me/password", &[""]),
    ("/api/alarms/", &["/ack", "/ack-returned", "/shelve", "/unshelve", "/out-of-service", "/in-service"]),
    ("/api/work_orders/", &["/approve", "/reject"]),
    ("/api/alarm-changes/", &["/approve", "/reject", "/lift"]),
];

/// The node of a pair that stands by serves reads and logins, and refuses what would
/// change the twin or run a model (the acting node's twin would not have it), saying
/// where to go instead.
async fn stand_by(State(state): State<Arc<WebState>>, req: Request, next: Next) -> Response {
    let reads = matches!(*req.method(), Method::GET | Method::HEAD | Method::OPTIONS);
    let path = req.uri().path();
    let session = matches!(path, "/login" | "/logout");
    let shared = SHARED.iter().any(|(under, ends)| path.starts_with(under) && ends.iter().any(|e| path.ends_with(e)));
    let Some(pair) = state.cluster.as_ref().filter(|_| !reads && !session && !shared) else {
        return next.run(req).await;
    };
    let now = pair.view.standing.borrow().clone();
    if now.acting {
        return next.run(req).await;
    }
    let active = now.holder.map_or("no node (the pair is choosing one)".to_string(), |n| format!("node {n}"));
    let there = if pair.cfg.peer_hmi.is_empty() { String::new() } else { format!(" at {}", pair.cfg.peer_hmi) };
    let mut r = ApiError::new(
        StatusCode::SERVICE_UNAVAILABLE,
        format!(
            "this node ({}) stands by: {active} acts (term {}). Make this change on the acting node's HMI{there}; \
             reads, alarm actions (acknowledge, shelve, out of service), decisions on work orders and alarm \
             changes, and users and tokens work here",
            pair.cfg.node, now.term
        ),
    )
    .into_response();
    r.headers_mut().insert(header::RETRY_AFTER, HeaderValue::from_static("5"));
    r
}

/// `/mcp`: MCP over streamable HTTP (rmcp), for bearer tokens only, the SDK's host
/// check on. Each session's server knows the token's user from the request.
fn mcp_routes(state: &WebState) -> Router {
    use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
    use rmcp::transport::streamable_http_server::{StreamableHttpServerConfig, StreamableHttpService};
    let (store, docs, allow) = (state.store.clone(), state.docs.clone(), state.mcp.allow_propose);
    let approvals = state.agent.approvals().clone();
    let mut hosts: Vec<String> = vec!["localhost".into(), "127.0.0.1".into(), "::1".into()];
    hosts.extend(state.mcp.allowed_hosts.iter().cloned());
    let service = StreamableHttpService::new(
        move || Ok(crate::mcp::TwinMcp::new(store.clone(), docs.clone(), approvals.clone(), allow, "http")),
        Arc::new(LocalSessionManager::default()),
        StreamableHttpServerConfig::default().with_allowed_hosts(hosts),
    );
    Router::new()
        .nest_service("/mcp", service)
        .layer(axum::middleware::from_fn(session_ended))
        .layer(axum::middleware::from_fn(require_bearer))
}

/// A DELETE ends an MCP session. rmcp answers 202; the clients (the official Python
/// SDK's among them) expect 200 or 204 and log a failure otherwise, so it is 204.
async fn session_ended(req: Request, next: Next) -> Response {
    let delete = req.method() == axum::http::Method::DELETE;
    let response = next.run(req).await;
    if delete && response.status() == StatusCode::ACCEPTED {
        return StatusCode::NO_CONTENT.into_response();
    }
    response
}

async fn require_bearer(req: Request, next: Next) -> Response {
    match req.extensions().get::<Credential>() {
        Some(Credential::Token(_)) => next.run(req).await,
        _ => ApiError::new(
            StatusCode::UNAUTHORIZED,
            "MCP needs a bearer token: create one with `twinops token create --user NAME` and send Authorization: Bearer <token>",
        )
        .into_response(),
    }
}

/// Serves the HMI on `listener` until `stop`.
pub async fn serve(listener: tokio::net::TcpListener, state: Arc<WebState>, mut stop: watch::Receiver<bool>) {
    let app = router(state).into_make_service_with_connect_info::<SocketAddr>();
    let shutdown = async move {
        let _ = stop.changed().await;
    };
    if let Err(e) = axum::serve(listener, app).with_graceful_shutdown(shutdown).await {
        tracing::error!(stage = "web", error = %e, "HMI server stopped");
    }
}

pub fn cookie(headers: &HeaderMap, name: &str) -> Option<String> {
    headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .filter_map(|kv| kv.trim().split_once('='))
        .find(|(k, _)| *k == name)
        .map(|(_, v)| v.to_string())
}

/// How the request was authenticated: the session cookie's value or the bearer token.
#[derive(Debug, Clone)]
pub enum Credential {
    Session(String),
    Token(String),
}

impl Credential {
    /// The user it stands for now, if it is still good (a session not ended or idle, a
    /// token not revoked, the user not disabled).
    pub fn user(&self, state: &WebState) -> Result<Option<User>, crate::store::StoreError> {
        match self {
            Credential::Token(token) => accounts::token_user_with(&state.store, token, |used| admin::seen(state, used)),
            Credential::Session(session) => {
                let idle = Duration::from_secs(state.cfg.session_idle_minutes * 60);
                accounts::session_user_with(&state.store, session, idle, |seen| admin::seen(state, seen))
            }
        }
    }
}

/// HTTP metrics by route template (never the raw path: it holds ids), method, status.
async fn count_requests(req: Request, next: Next) -> Response {
    let route = req
        .extensions()
        .get::<axum::extract::MatchedPath>()
        .map_or_else(|| "unmatched".to_string(), |m| m.as_str().to_string());
    let method = req.method().as_str().to_string();
    let started = std::time::Instant::now();
    let res = next.run(req).await;
    let status = res.status().as_u16().to_string();
    crate::metrics::count(
        "twinops_http_requests_total",
        &[("route", &route), ("method", &method), ("status", &status)],
        1.0,
    );
    crate::metrics::time("twinops_http_request_seconds", &[("route", &route)], started.elapsed());
    res
}

/// Resolves the session cookie or bearer token into the [`User`] (a request extension).
async fn authenticate(State(state): State<Arc<WebState>>, mut req: Request, next: Next) -> Response {
    let bearer = req
        .headers()
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .map(str::to_string);
    let credential = match (bearer, cookie(req.headers(), SESSION_COOKIE)) {
        (Some(token), _) => Some(Credential::Token(token)),
        (None, Some(session)) => Some(Credential::Session(session)),
        (None, None) => None,
    };
    if let Some(credential) = credential {
        match credential.user(&state) {
            Ok(Some(user)) => {
                req.extensions_mut().insert(user);
                req.extensions_mut().insert(credential);
            }
            Ok(None) => {}
            Err(e) => return ApiError::from(e).into_response(),
        }
    }
    next.run(req).await
}

/// Enforces an endpoint's role: 401 without a user, 403 below the role.
pub async fn require(role: Option<Role>, req: Request, next: Next) -> Response {
    let Some(role) = role else { return next.run(req).await };
    match req.extensions().get::<User>() {
        None => {
            ApiError::new(StatusCode::UNAUTHORIZED, "log in first (POST /login), or send Authorization: Bearer <token>")
                .into_response()
        }
        Some(u) if u.role < role => {
            ApiError::new(StatusCode::FORBIDDEN, format!("this needs the {role} role; {} is {}", u.name, u.role))
                .into_response()
        }
        Some(_) => next.run(req).await,
    }
}

/// Refuses state-changing requests that a browser sent from another site: the Origin
/// must be this host, or `Sec-Fetch-Site` must say same-origin. Bearer-token requests
/// carry no ambient credential and are exempt; no GET changes state.
async fn refuse_cross_site(req: Request, next: Next) -> Response {
    if matches!(*req.method(), Method::GET | Method::HEAD | Method::OPTIONS) {
        return next.run(req).await;
    }
    // `/mcp` takes bearer tokens only (no ambient credential), and says 401 itself.
    if req.uri().path().starts_with("/mcp") {
        return next.run(req).await;
    }
    let h = req.headers();
    let bearer = h.get(header::AUTHORIZATION).and_then(|v| v.to_str().ok()).is_some_and(|v| v.starts_with("Bearer "));
    if bearer {
        return next.run(req).await;
    }
    let host = h.get(header::HOST).and_then(|v| v.to_str().ok()).unwrap_or("");
    // A browser that hides the referrer sends `Origin: null` on form posts; then
    // `Sec-Fetch-Site` decides.
    let origin_ok = h
        .get(header::ORIGIN)
        .and_then(|v| v.to_str().ok())
        .filter(|o| *o != "null")
        .map(|o| o.strip_prefix("http://").or(o.strip_prefix("https://")).is_some_and(|rest| rest == host));
    let fetch_site = h.get("sec-fetch-site").and_then(|v| v.to_str().ok());
    let allowed = match (origin_ok, fetch_site) {
        (Some(ok), _) => ok && fetch_site.is_none_or(|s| s == "same-origin" || s == "none"),
        (None, Some(site)) => site == "same-origin" || site == "none",
        (None, None) => false,
    };
    if allowed {
        next.run(req).await
    } else {
        ApiError::new(
            StatusCode::FORBIDDEN,
            "cross-site request refused: send it from the HMI's own page, or use a bearer token",
        )
        .into_response()
    }
}

/// Every error is JSON `{"error": ...}` that says what to do. axum's own rejections (a
/// body that is not JSON, unknown fields, a path id that is not a number, a body over
/// the limit) are plain text, and unknown routes and wrong methods have no body: they
/// are rewritten here, their text kept. `/mcp` speaks its own protocol and is left alone.
async fn json_errors(req: Request, next: Next) -> Response {
    if req.uri().path().starts_with("/mcp") {
        return next.run(req).await;
    }
    let (method, path) = (req.method().clone(), req.uri().path().to_string());
    let res = next.run(req).await;
    let status = res.status();
    let json = res.headers().get(header::CONTENT_TYPE).is_some_and(|v| v.as_bytes().starts_with(b"application/json"));
    if !(status.is_client_error() || status.is_server_error()) || json {
        return res;
    }
    let (parts, body) = res.into_parts();
    let text = axum::body::to_bytes(body, 16 * 1024).await.map(|b| String::from_utf8_lossy(&b).trim().to_string());
    let text = text.unwrap_or_default();
    const SCHEMA: &str = "the API is described at /api/openapi.json";
    let error = match status {
        StatusCode::NOT_FOUND if text.is_empty() => format!("no such page or endpoint; {SCHEMA}"),
        StatusCode::METHOD_NOT_ALLOWED => {
            format!("{method} is not allowed on {path}; {SCHEMA}, with each path's methods")
        }
        StatusCode::PAYLOAD_TOO_LARGE => "the request body is over the limit of 64 KiB; send less".to_string(),
        StatusCode::UNSUPPORTED_MEDIA_TYPE => {
            format!("{text}: send the body as JSON with the header `Content-Type: application/json`")
        }
        StatusCode::UNPROCESSABLE_ENTITY => format!("{text}; {SCHEMA}, with each body's fields"),
        StatusCode::BAD_REQUEST if text.starts_with("Invalid URL") => {
            format!("{text}: ids in paths are whole numbers, as the lists give them; {SCHEMA}")
        }
        _ if text.is_empty() => format!("{}; {SCHEMA}", status.canonical_reason().unwrap_or("error")),
        _ => format!("{text}; {SCHEMA}"),
    };
    let mut rewritten = ApiError::new(status, error).into_response();
    for (name, value) in &parts.headers {
        if name != header::CONTENT_TYPE && name != header::CONTENT_LENGTH {
            rewritten.headers_mut().insert(name, value.clone());
        }
    }
    rewritten
}

/// The page loads only its own script and style; nothing from other origins, no
/// inline script, no framing.
const CSP: &str = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; \
                   connect-src 'self'; font-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'";

async fn security_headers(req: Request, next: Next) -> Response {
    let mut res = next.run(req).await;
    let h = res.headers_mut();
    for (name, value) in [
        ("content-security-policy", CSP),
        ("x-content-type-options", "nosniff"),
        ("x-frame-options", "DENY"),
        ("referrer-policy", "same-origin"),
        ("cross-origin-opener-policy", "same-origin"),
        ("cross-origin-resource-policy", "same-origin"),
        ("permissions-policy", "camera=(), microphone=(), geolocation=()"),
    ] {
        h.insert(name, HeaderValue::from_static(value));
    }
    if !h.contains_key(header::CACHE_CONTROL) {
        h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    }
    res
}

/// An empty response with a status (redirects and the like).
pub fn empty(status: StatusCode) -> Response {
    let mut r = Response::new(Body::empty());
    *r.status_mut() = status;
    r
}
