//! Every endpoint, declared once: method, path, role, summary, body schema, handler.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::Arc;

use axum::extract::{ConnectInfo, Extension, Form, Json, Path, State};
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{MethodRouter, get, post};
use serde::Deserialize;
use serde_json::Value;

use super::endpoint::{Endpoint, ep};
use super::{ApiError, Credential, SESSION_COOKIE, WebState, admin, empty, require};
use crate::accounts::{self, AccountOp, LoginError, User};
use crate::domain::Role;

use super::alarms::*;
use super::chat::*;
use super::status::*;
use super::twin::*;
use super::work_orders::*;

type S = Arc<WebState>;

/// Every endpoint, in the order openapi.json lists them.
pub fn endpoints() -> Vec<Endpoint> {
    [pages(), accounts(), alarms(), episodes(), twin(), decisions()].into_iter().flatten().collect()
}

/// The page, its assets, login and logout, probes, the event stream, this description and metrics.
fn pages() -> Vec<Endpoint> {
    use Method as M;
    let viewer = Some(Role::Viewer);
    vec![
        ep(M::GET, "/", None, "The HMI page", get(page)).produces("text/html"),
        ep(M::GET, "/app.js", None, "The HMI script (an ES module: the shell)", get(script))
            .produces("text/javascript"),
        ep(M::GET, "/js/{file}", None, "One of the HMI's ES modules, e.g. core.js", get(module))
            .produces("text/javascript"),
        ep(M::GET, "/app.css", None, "The HMI style sheet", get(style)).produces("text/css"),
        ep(M::POST, "/login", None, "Log in with a form (name, password); sets the session cookie", post(login))
            .produces("text/html"),
        ep(M::POST, "/logout", None, "End the session", post(logout)).produces("text/html"),
        ep(M::GET, "/healthz", None, "The process is up", get(healthz)),
        ep(M::GET, "/readyz", None, "The database answers and the broker is connected", get(readyz)),
        ep(M::GET, "/events", viewer, "Server-sent events: alarm, note, work_order", get(super::events::stream))
            .produces("text/event-stream"),
        ep(M::GET, "/api/openapi.json", None, "This API's OpenAPI 3.1 description", get(openapi)),
        ep(M::GET, "/metrics", None, "Prometheus metrics (text format; no ids in labels)", get(metrics))
            .produces("text/plain"),
    ]
}

/// Users, tokens and the logged-in user.
fn accounts() -> Vec<Endpoint> {
    use Method as M;
    let (viewer, admin) = (Some(Role::Viewer), Some(Role::Admin));
    vec![
        ep(M::GET, "/api/me", viewer, "The logged-in user and role", get(me)),
        ep(
            M::POST,
            "/api/me/password",
            viewer,
            "Change your own password (current and new); your other sessions end",
            post(admin::change_own_password),
        )
        .body::<admin::OwnPasswordRequest>(),
        ep(M::GET, "/api/users", admin, "Users: role, disabled, live API tokens, login locks", get(admin::users)),
        ep(M::POST, "/api/users", admin, "Add a user (name, role, password)", post(admin::add_user))
            .body::<admin::NewUser>(),
        ep(M::POST, "/api/users/{name}/role", admin, "Change a user's role", post(admin::set_role))
            .body::<admin::RoleRequest>(),
        ep(
            M::POST,
            "/api/users/{name}/password",
            admin,
            "Reset a user's password; their sessions end",
            post(admin::reset_password),
        )
        .body::<admin::PasswordRequest>(),
        ep(
            M::POST,
            "/api/users/{name}/disable",
            admin,
            "Disable a user: no login, sessions end, API tokens stop working",
            post(admin::disable),
        ),
        ep(M::POST, "/api/users/{name}/enable", admin, "Enable a disabled user again", post(admin::enable)),
        ep(
            M::POST,
            "/api/users/{name}/unlock",
            admin,
            "Lift the locks failed logins put on a user (from every address)",
            post(admin::unlock),
        ),
        ep(M::GET, "/api/tokens", admin, "API tokens (never the token itself)", get(admin::tokens)),
        ep(
            M::GET,
            "/api/backup",
            admin,
            "A consistent copy of the twin (SQLite, as `twinops backup` writes it); the other node of a pair takes it \
             when it was away longer than the broker kept its sessions",
            get(admin::backup_copy),
        )
        .produces("application/vnd.sqlite3"),
        ep(M::POST, "/api/tokens", admin, "Create an API token for a user; shown once", post(admin::create_token))
            .body::<admin::NewToken>(),
        ep(M::POST, "/api/tokens/{id}/revoke", admin, "Revoke an API token for good", post(admin::revoke_token)),
        ep(
            M::GET,
            "/api/status",
            viewer,
            "Degraded conditions: model breakers, broker, alarm flood, triage backlog, refused messages",
            get(status),
        ),
    ]
}

/// Alarms: the list, the figures, one alarm and the operator actions.
fn alarms() -> Vec<Endpoint> {
    use Method as M;
    let (viewer, operator, supervisor) = (Some(Role::Viewer), Some(Role::Operator), Some(Role::Supervisor));
    vec![
        ep(
            M::GET,
            "/api/alarms",
            viewer,
            "Alarms by priority then age (query: active, suppressed, asset, sensor, code, limit); sensor and code \
             with asset name one alarm point, whose occurrences these are",
            get(list_alarms),
        )
        .query::<AlarmQuery>(),
        ep(
            M::GET,
            "/api/alarm-points",
            viewer,
            "The alarm summary: one row per alarm point (asset, sensor, condition) that needs attention, with its \
             latest occurrence, how many occurrences need attention, and the first and last raise; active \
             unacknowledged first, then active acknowledged, then returned to normal, each by priority then age",
            get(alarm_points),
        ),
        ep(
            M::GET,
            "/api/alarm-kpis",
            viewer,
            "The alarm system's performance over a window (query: from, to, chatter_count, chatter_window_secs), as \
             ISA-18.2 Table 7 and EEMUA 191 define it: annunciated activations, rates, peak 10-minute count, floods, \
             bad actors, chattering, fleeting and stale alarms, priority distribution, shelved and out-of-service \
             points, each definition and target stated",
            get(alarm_kpis),
        )
        .query::<KpiQuery>(),
        ep(
            M::GET,
            "/api/alarms/{id}",
            viewer,
            "One alarm with its journal, its triage note (an episode member's is its episode's) and its episode",
            get(alarm),
        ),
        ep(M::POST, "/api/alarms/{id}/ack", operator, "Acknowledge an alarm", post(ack)),
        ep(
            M::POST,
            "/api/alarms/{id}/ack-returned",
            operator,
            "Acknowledge every returned-to-normal occurrence of this alarm's point (asset, sensor, code)",
            post(ack_returned),
        ),
        ep(
            M::POST,
            "/api/alarms/{id}/shelve",
            operator,
            "Shelve an active alarm for a while, with a reason",
            post(shelve),
        )
        .body::<ShelveRequest>(),
        ep(M::POST, "/api/alarms/{id}/unshelve", operator, "Return a shelved alarm before its time", post(unshelve)),
        ep(
            M::POST,
            "/api/alarms/{id}/out-of-service",
            supervisor,
            "Take an alarm's point out of service, with a reason: its alarms are recorded, not annunciated or triaged",
            post(out_of_service),
        )
        .body::<ReasonRequest>(),
        ep(
            M::POST,
            "/api/alarms/{id}/in-service",
            supervisor,
            "Return an alarm's point to service; an active alarm annunciates again",
            post(in_service),
        ),
    ]
}

/// Alarm episodes: floods as one, their initiator, the floods like them.
fn episodes() -> Vec<Endpoint> {
    use Method as M;
    let viewer = Some(Role::Viewer);
    vec![
        ep(
            M::GET,
            "/api/episodes",
            viewer,
            "Alarm episodes (floods, bursts on connected equipment), newest first (query: limit, 1-200): when, how \
             many points and activations, the initiator, the note",
            get(super::episodes::list),
        )
        .query::<super::episodes::EpisodesQuery>(),
        ep(
            M::GET,
            "/api/episodes/{id}",
            viewer,
            "One alarm episode: its timeline (each point at its first activation), the initiator's candidates with \
             their evidence, its one note as it stands, and the past episodes most like it",
            get(super::episodes::one),
        ),
    ]
}

/// The twin: assets, sensors' readings, documents.
fn twin() -> Vec<Endpoint> {
    use Method as M;
    let viewer = Some(Role::Viewer);
    vec![
        ep(M::GET, "/api/assets", viewer, "Assets with status and active alarms", get(assets)),
        ep(
            M::GET,
            "/api/plant",
            viewer,
            "The plant as imported: site, stations, and each station's assets in service (kind, status, active alarms, parent)",
            get(plant),
        ),
        ep(M::GET, "/api/assets/{id}", viewer, "One asset: sensors with latest values against limits", get(asset)),
        ep(M::GET, "/api/sensors/{id}/readings", viewer, "Readings over a window (query: hours, 1-168)", get(readings))
            .query::<WindowQuery>(),
        ep(M::GET, "/api/docs/{citation}", viewer, "A documentation chunk by citation key", get(doc)),
        ep(
            M::GET,
            "/api/runs/{id}",
            viewer,
            "An agent run with its steps (model calls, tool calls, guardrails); a chat run only for its asker, or from supervisor up",
            get(run),
        ),
    ]
}

/// Work orders and alarm changes and their decisions, handovers, notes, runs and chat.
fn decisions() -> Vec<Endpoint> {
    use Method as M;
    let (viewer, operator, supervisor) = (Some(Role::Viewer), Some(Role::Operator), Some(Role::Supervisor));
    vec![
        ep(M::GET, "/api/work_orders", viewer, "Work orders (query: status)", get(work_orders)).query::<StatusQuery>(),
        ep(
            M::POST,
            "/api/work_orders/{id}/approve",
            supervisor,
            "Approve a pending work order, with a reason",
            post(approve),
        )
        .body::<ReasonRequest>(),
        ep(
            M::POST,
            "/api/work_orders/{id}/reject",
            supervisor,
            "Reject a pending work order, with a reason",
            post(reject),
        )
        .body::<ReasonRequest>(),
        ep(
            M::GET,
            "/api/alarm-changes",
            viewer,
            "Proposed alarm changes with their evidence (query: status): settings (set point, deadband, delays) with their replay, or designed suppressions (kind suppression: this point suppressed while_active another) with the learned pair and what they would have held back",
            get(alarm_changes),
        )
        .query::<ChangeStatusQuery>(),
        ep(
            M::POST,
            "/api/alarm-changes/{id}/approve",
            supervisor,
            "Approve a pending alarm change, with a reason: applied to the twin for points twinops evaluates, recorded for the SCADA engineer otherwise",
            post(approve_change),
        )
        .body::<ReasonRequest>(),
        ep(
            M::POST,
            "/api/alarm-changes/{id}/lift",
            supervisor,
            "Lift an approved designed suppression, with a reason: its point is annunciated again, and its occurrences held now and still active are annunciated and triaged",
            post(lift_change),
        )
        .body::<ReasonRequest>(),
        ep(
            M::POST,
            "/api/alarm-changes/{id}/reject",
            supervisor,
            "Reject a pending alarm change, with a reason",
            post(reject_change),
        )
        .body::<ReasonRequest>(),
        ep(
            M::GET,
            "/api/handovers",
            viewer,
            "Shift handovers, newest first (query: limit, 1-50, default 10)",
            get(handovers),
        )
        .query::<LimitQuery>(),
        ep(
            M::POST,
            "/api/handovers",
            operator,
            "Write a shift handover now (an agent run; at most one a minute); returns it",
            post(write_handover),
        ),
        ep(M::GET, "/api/chat", operator, "This user's conversation with the agent", get(chat_history)),
        ep(
            M::POST,
            "/api/chat",
            operator,
            "Ask the agent; the answer streams as server-sent events (tool, text, done)",
            post(chat),
        )
        .body::<ChatRequest>()
        .produces("text/event-stream"),
    ]
}

/// The router: each endpoint with its role check, endpoints on one path merged.
pub fn routes(state: S) -> axum::Router {
    let mut by_path: BTreeMap<&'static str, MethodRouter<S>> = BTreeMap::new();
    for e in endpoints() {
        let role = e.role;
        let handler = e.handler.layer(axum::middleware::from_fn(move |req, next| require(role, req, next)));
        let merged = match by_path.remove(e.path) {
            Some(existing) => existing.merge(handler),
            None => handler,
        };
        by_path.insert(e.path, merged);
    }
    let mut router = axum::Router::new();
    for (path, handler) in by_path {
        router = router.route(path, handler);
    }
    router.with_state(state)
}

const INDEX_HTML: &str = include_str!("../../web/index.html");
const APP_JS: &str = include_str!("../../web/app.js");
/// The page's style sheet, then uPlot's (vendored from npm: web/vendor/uplot).
const APP_CSS: &str = concat!(include_str!("../../web/app.css"), include_str!("../../web/vendor/uplot/uPlot.min.css"));

fn asset_response(content_type: &'static str, body: &'static str) -> Response {
    let mut r = body.into_response();
    r.headers_mut().insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
    r
}

async fn page() -> Response {
    asset_response("text/html; charset=utf-8", INDEX_HTML)
}

async fn script() -> Response {
    asset_response("text/javascript; charset=utf-8", APP_JS)
}

/// The page's modules, one per tab or view and two shared (`web/js/`), and the chart library.
const MODULES: &[(&str, &str)] = &[
    ("account.js", include_str!("../../web/js/account.js")),
    ("advisory.js", include_str!("../../web/js/advisory.js")),
    ("alarms.js", include_str!("../../web/js/alarms.js")),
    ("approvals.js", include_str!("../../web/js/approvals.js")),
    ("assets.js", include_str!("../../web/js/assets.js")),
    ("chat.js", include_str!("../../web/js/chat.js")),
    ("core.js", include_str!("../../web/js/core.js")),
    ("episodes.js", include_str!("../../web/js/episodes.js")),
    ("handover.js", include_str!("../../web/js/handover.js")),
    ("performance.js", include_str!("../../web/js/performance.js")),
    // uPlot, the charts (MIT; vendored from npm by version, web/vendor/uplot/LICENSE).
    ("uPlot.esm.js", include_str!("../../web/vendor/uplot/uPlot.esm.js")),
];

async fn module(Path(file): Path<String>) -> Result<Response, ApiError> {
    let (_, text) = MODULES.iter().find(|(name, _)| *name == file).ok_or_else(|| {
        let names: Vec<&str> = MODULES.iter().map(|(n, _)| *n).collect();
        ApiError::not_found(format!("no module {file}; the page's modules are {}", names.join(", ")))
    })?;
    Ok(asset_response("text/javascript; charset=utf-8", text))
}

async fn style() -> Response {
    asset_response("text/css; charset=utf-8", APP_CSS)
}

#[derive(Deserialize)]
struct LoginForm {
    name: String,
    password: String,
}

fn redirect(to: &str) -> Response {
    let mut r = empty(StatusCode::SEE_OTHER);
    r.headers_mut().insert(header::LOCATION, HeaderValue::from_str(to).expect("a plain path"));
    r
}

fn session_cookie(state: &WebState, value: &str, max_age: i64) -> HeaderValue {
    let secure = if state.cfg.secure_cookies { "; Secure" } else { "" };
    HeaderValue::from_str(&format!(
        "{SESSION_COOKIE}={value}; Path=/; HttpOnly; SameSite=Strict; Max-Age={max_age}{secure}"
    ))
    .expect("hex cookie")
}

/// A right password starts a new session (any session the browser held is ended
/// first: the id is rotated at login); a wrong one counts against the account and the
/// address.
async fn login(
    State(s): State<S>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    headers: HeaderMap,
    credential: Option<Extension<Credential>>,
    Form(form): Form<LoginForm>,
) -> Result<Response, ApiError> {
    let st = Arc::clone(&s);
    let address = super::client::address(peer.ip(), &headers, &s.cfg.trusted_proxies).to_string();
    // The page's form wants a page back, not JSON shown raw.
    let browser = headers.get(header::ACCEPT).and_then(|v| v.to_str().ok()).is_some_and(|a| a.contains("text/html"));
    let result = tokio::task::spawn_blocking(move || {
        if let Some(Extension(Credential::Session(old))) = credential {
            accounts::store_errors(admin::access(&st, &AccountOp::end_session(&old, false), "twinops"))?;
        }
        let by_pair = |op: &AccountOp, by: &str| admin::access(&st, op, by);
        anyhow::Ok(accounts::login_with(
            &st.store,
            st.directory.as_ref(),
            &form.name,
            &form.password,
            &address,
            by_pair,
        ))
    })
    .await?
    .map_err(ApiError::internal)?;
    match result {
        Ok((_, token)) => {
            let mut r = redirect("/");
            r.headers_mut().insert(header::SET_COOKIE, session_cookie(&s, &token, accounts::SESSION_MAX_SECS));
            Ok(r)
        }
        Err(LoginError::Wrong) => Ok(redirect("/?login=failed")),
        Err(LoginError::Limited(wait)) if browser => {
            Ok(redirect(&format!("/?login=locked&minutes={}", wait.as_secs().div_ceil(60))))
        }
        Err(e @ LoginError::Limited(_)) => Err(ApiError::new(StatusCode::TOO_MANY_REQUESTS, e.to_string())),
        Err(LoginError::NoRole(_)) if browser => Ok(redirect("/?login=nogroup")),
        Err(e @ LoginError::NoRole(_)) => Err(ApiError::new(StatusCode::FORBIDDEN, e.to_string())),
        Err(LoginError::DirectoryDown) if browser => Ok(redirect("/?login=directory")),
        Err(e @ LoginError::DirectoryDown) => Err(ApiError::new(StatusCode::SERVICE_UNAVAILABLE, e.to_string())),
        Err(e @ LoginError::NotShared(_)) => Err(ApiError::new(StatusCode::SERVICE_UNAVAILABLE, e.to_string())),
        Err(LoginError::Store(e)) => Err(e.into()),
    }
}

async fn logout(
    State(s): State<S>,
    user: Option<Extension<User>>,
    credential: Option<Extension<Credential>>,
) -> Result<Response, ApiError> {
    if let (Some(Extension(Credential::Session(token))), Some(Extension(user))) = (credential, user) {
        let st = Arc::clone(&s);
        tokio::task::spawn_blocking(move || {
            accounts::store_errors(admin::access(&st, &AccountOp::end_session(&token, true), &user.name))
        })
        .await?
        .map_err(ApiError::internal)?;
    }
    let mut r = redirect("/");
    r.headers_mut().insert(header::SET_COOKIE, session_cookie(&s, "", 0));
    Ok(r)
}

async fn openapi() -> Json<Value> {
    Json(super::openapi::document(&endpoints()))
}

async fn me(Extension(user): Extension<User>) -> Json<User> {
    Json(user)
}

#[cfg(test)]
mod tests {
    /// Every module in `web/js/` is served: one left out leaves the page blank.
    #[test]
    fn every_page_module_is_served() {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("web/js");
        for entry in std::fs::read_dir(dir).unwrap() {
            let name = entry.unwrap().file_name().to_string_lossy().to_string();
            assert!(super::MODULES.iter().any(|(m, _)| *m == name), "web/js/{name} is not in MODULES");
        }
    }
}
