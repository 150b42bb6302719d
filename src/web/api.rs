//! Every endpoint, declared once: method, path, role, summary, body schema, handler.

use std::collections::BTreeMap;
use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;

use axum::extract::{ConnectInfo, Extension, Form, Json, Path, Query, State};
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode, header};
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use axum::routing::{MethodRouter, get, post};
use futures_util::Stream;
use rusqlite::{OptionalExtension, params};
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::{Value, json};

use super::endpoint::{Endpoint, ep};
use super::{ApiError, Credential, SESSION_COOKIE, WebState, admin, empty, require};
use crate::accounts::{self, LoginError, User};
use crate::agent::StreamEvent;
use crate::alarms::{self, list::AlarmFilter, list::Order, list::Scope};
use crate::approvals::{self, DecisionError, Proposer};
use crate::domain::{AssetId, Role, Severity, Timestamp};
use crate::tools;

type S = Arc<WebState>;

pub fn endpoints() -> Vec<Endpoint> {
    use Method as M;
    let (viewer, operator, supervisor, admin) =
        (Some(Role::Viewer), Some(Role::Operator), Some(Role::Supervisor), Some(Role::Admin));
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
        ep(M::GET, "/api/alarms/{id}", viewer, "One alarm with its journal and triage note", get(alarm)),
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
const APP_CSS: &str = include_str!("../../web/app.css");

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

/// The page's modules, one per tab and two shared (`web/js/`).
const MODULES: &[(&str, &str)] = &[
    ("account.js", include_str!("../../web/js/account.js")),
    ("advisory.js", include_str!("../../web/js/advisory.js")),
    ("alarms.js", include_str!("../../web/js/alarms.js")),
    ("approvals.js", include_str!("../../web/js/approvals.js")),
    ("assets.js", include_str!("../../web/js/assets.js")),
    ("chat.js", include_str!("../../web/js/chat.js")),
    ("core.js", include_str!("../../web/js/core.js")),
    ("handover.js", include_str!("../../web/js/handover.js")),
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
            accounts::end_session(&st.store, &old)?;
        }
        anyhow::Ok(accounts::login(&st.store, form.name.trim(), &form.password, &address))
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
            accounts::end_session(&st.store, &token)?;
            accounts::audit(&st.store, &user.name, "logout", "", None)
        })
        .await?
        .map_err(ApiError::internal)?;
    }
    let mut r = redirect("/");
    r.headers_mut().insert(header::SET_COOKIE, session_cookie(&s, "", 0));
    Ok(r)
}

async fn healthz() -> Json<Value> {
    Json(json!({"status": "ok"}))
}

async fn readyz(State(s): State<S>) -> Response {
    let db = s.store.read().and_then(|c| Ok(c.query_row("SELECT 1", [], |r| r.get::<_, i64>(0))?)).is_ok();
    let broker = *s.broker_up.borrow();
    let status = if db && broker { StatusCode::OK } else { StatusCode::SERVICE_UNAVAILABLE };
    (status, Json(json!({"database": db, "broker": broker}))).into_response()
}

async fn openapi() -> Json<Value> {
    Json(super::openapi::document(&endpoints()))
}

/// The registry's counters and histograms, and gauges read from the twin now.
async fn metrics(State(s): State<S>) -> Result<Response, ApiError> {
    use crate::metrics::{Gauges, render};
    let mut g = Gauges(Vec::new());
    {
        let db = s.store.read()?;
        let mut stmt =
            db.prepare_cached("SELECT state, severity, count(*) FROM alarms WHERE state != 'cleared' GROUP BY 1, 2")?;
        for row in stmt.query_map([], |r| Ok((r.get::<_, String>(0)?, r.get::<_, String>(1)?, r.get::<_, i64>(2)?)))? {
            let (state, severity, n) = row?;
            g.set("twinops_alarms", &[("state", &state), ("severity", &severity)], n as f64);
        }
        let flood = alarms::flood_state(&db, Timestamp::now(), false)?;
        g.set("twinops_alarm_flood", &[], f64::from(u8::from(flood.flood)));
        g.set("twinops_alarms_raised_last_10m", &[], flood.alarms_last_10_min as f64);
        let depth: i64 = db.query_row("SELECT count(*) FROM triage_jobs WHERE state = 'queued'", [], |r| r.get(0))?;
        g.set("twinops_triage_queue_depth", &[], depth as f64);
        let mut stmt = db.prepare_cached("SELECT status, count(*) FROM work_orders GROUP BY 1")?;
        for row in stmt.query_map([], |r| Ok((r.get::<_, String>(0)?, r.get::<_, i64>(1)?)))? {
            let (status, n) = row?;
            g.set("twinops_work_orders", &[("status", &status)], n as f64);
        }
    }
    for l in s.agent.chain().links() {
        let open = l.breaker.state() != crate::agent::reliability::BreakerState::Closed;
        g.set("twinops_model_breaker_open", &[("provider", l.model.name())], f64::from(u8::from(open)));
    }
    let mut r = render(&g).into_response();
    r.headers_mut().insert(header::CONTENT_TYPE, HeaderValue::from_static("text/plain; version=0.0.4; charset=utf-8"));
    Ok(r)
}

async fn me(Extension(user): Extension<User>) -> Json<User> {
    Json(user)
}

/// Triage waiting longer than this is "behind" on the banner.
const TRIAGE_LATE_S: i64 = 300;
/// Dead letters this recent are on the banner.
const REFUSED_WINDOW_S: i64 = 900;

async fn status(State(s): State<S>) -> Result<Json<Value>, ApiError> {
    let now = Timestamp::now();
    let db = s.store.read()?;
    let flood = alarms::flood_state(&db, now, false)?;
    let backlog = crate::triage::backlog(&db, now)?;
    let refused = crate::ingest::replay::refused_since(&db, now.plus_secs(-REFUSED_WINDOW_S))?;
    // The page shows the site's name and its times in the site's zone.
    let site: Option<(String, String, String)> = db
        .query_row("SELECT id, name, timezone FROM sites LIMIT 1", [], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))
        .optional()?;
    drop(db);
    let site = site.map(|(id, name, timezone)| json!({"id": id, "name": name, "timezone": timezone}));
    let models: Vec<Value> = s
        .agent
        .chain()
        .links()
        .iter()
        .map(|l| json!({"provider": l.model.name(), "breaker": l.breaker.state()}))
        .collect();
    let model_down = s
        .agent
        .chain()
        .links()
        .iter()
        .any(|l| l.model.name() != "rules" && l.breaker.state() == crate::agent::reliability::BreakerState::Open);
    let broker_up = *s.broker_up.borrow();
    let mut reasons: Vec<String> = Vec::new();
    if model_down {
        reasons.push("a language model is failing; triage falls back to the next provider or the rules model".into());
    }
    if !broker_up {
        reasons.push("the MQTT broker is not connected; new alarms are not arriving".into());
    }
    if flood.flood {
        reasons.push("alarm flood: more than 10 alarms in 10 minutes; routine alarms get rules-model notes".into());
    }
    if backlog.waiting > 0 && backlog.oldest_wait_s >= TRIAGE_LATE_S {
        reasons.push(format!(
            "triage is behind: {} alarm occurrence(s) wait for a note, the oldest for {}; notes come late",
            backlog.waiting,
            crate::domain::approx_duration(backlog.oldest_wait_s)
        ));
    }
    if backlog.failed_last_hour > 0 {
        reasons.push(format!(
            "{} alarm occurrence(s) got no triage note in the last hour (triage gave up; the daemon log says why); \
             `twinops triage ALARM_ID` writes one",
            backlog.failed_last_hour
        ));
    }
    if refused.total > 0 {
        let by: Vec<String> = refused.by_reason.iter().map(|r| format!("{} {}", r.count, r.reason)).collect();
        reasons.push(format!(
            "ingest refused {} message(s) or event(s) in the last 15 min ({}): the twin lacks what they carried; \
             `twinops dead-letters list` shows them",
            refused.total,
            by.join(", ")
        ));
    }
    Ok(Json(json!({"degraded": !reasons.is_empty(), "reasons": reasons, "models": models, "broker_up": broker_up,
                   "flood": flood, "triage": backlog, "refused": refused, "site": site})))
}

#[derive(Deserialize, JsonSchema)]
struct AlarmQuery {
    /// Only alarms that need attention (unacknowledged, acknowledged, returned to normal unacknowledged).
    active: Option<bool>,
    /// Only alarms kept from the operators: shelved or out of service (overrides `active`).
    suppressed: Option<bool>,
    /// An asset id, e.g. PUMP-007.
    asset: Option<String>,
    /// With `asset` and `code`: one alarm point (`-` for an alarm of the asset itself).
    sensor: Option<String>,
    /// An alarm code, e.g. VIB-HI.
    code: Option<String>,
    /// Most alarms returned, 1 to 1000 (default 200).
    limit: Option<u32>,
}

/// Rows of one JSON text column (SQLite's `json_object`), parsed.
fn json_rows(stmt: &mut rusqlite::CachedStatement<'_>, params: impl rusqlite::Params) -> rusqlite::Result<Vec<Value>> {
    let rows = stmt.query_map(params, |r| r.get::<_, String>(0))?;
    rows.map(|r| r.map(|t| serde_json::from_str(&t).unwrap_or(Value::Null))).collect()
}

async fn list_alarms(State(s): State<S>, Query(q): Query<AlarmQuery>) -> Result<Json<Value>, ApiError> {
    let limit = q.limit.unwrap_or(200).clamp(1, 1000);
    let scope = match (q.suppressed.unwrap_or(false), q.active.unwrap_or(true)) {
        (true, _) => Scope::Suppressed,
        (false, true) => Scope::Attention,
        (false, false) => Scope::Any,
    };
    let asset =
        q.asset.as_deref().map(AssetId::parse).transpose().map_err(|e| ApiError::bad_request(format!("asset: {e}")))?;
    let filter =
        AlarmFilter { asset, sensor: q.sensor, code: q.code, scope, order: Order::Priority, ..Default::default() };
    let alarms = alarms::list::list(&*s.store.read()?, &filter, limit.into(), 0)?;
    Ok(Json(json!({"alarms": alarms})))
}

/// The alarm summary an operator works from: one row per point, so that a point that
/// went in and out of alarm nine times is one row saying 9, not nine rows alike.
async fn alarm_points(State(s): State<S>) -> Result<Json<Value>, ApiError> {
    let db = s.store.read()?;
    let sql = format!(
        "WITH attention AS (
             SELECT * FROM alarms WHERE state IN ('unacknowledged', 'acknowledged', 'rtn_unacknowledged')),
         points AS (
             SELECT max(id) AS latest, count(*) AS n, min(raised_at) AS first_raised, max(raised_at) AS last_raised,
                    sum(state = 'unacknowledged' OR state = 'rtn_unacknowledged') AS unacked,
                    sum(state = 'rtn_unacknowledged') AS returned
             FROM attention GROUP BY asset_id, coalesce(sensor_id, ''), code)
         SELECT json_object('id', a.id, 'asset_id', a.asset_id, 'sensor_id', a.sensor_id, 'code', a.code,
                    'severity', a.severity, 'state', a.state,
                    'active', json(CASE WHEN a.cleared_at IS NULL THEN 'true' ELSE 'false' END), 'message', a.message,
                    'value', shown(a.value), 'threshold', shown(a.threshold), 'raised_at', rfc3339(a.raised_at),
                    'occurrences', p.n, 'unacknowledged', p.unacked, 'returned_unacknowledged', p.returned,
                    'first_raised_at', rfc3339(p.first_raised),
                    'last_raised_at', rfc3339(p.last_raised), 'note_id', n.id,
                    'triage', (SELECT state FROM triage_jobs j WHERE j.id = a.triage_job))
         FROM points p JOIN alarms a ON a.id = p.latest
         LEFT JOIN notes n ON n.alarm_id = a.id AND n.kind = 'triage'
         ORDER BY CASE WHEN a.state = 'unacknowledged' THEN 0 WHEN a.cleared_at IS NULL THEN 1 ELSE 2 END,
                  {}, a.raised_at DESC, a.id DESC
         LIMIT 1000",
        Severity::sql_rank("a.severity")
    );
    let mut stmt = db.prepare_cached(&sql)?;
    let points = json_rows(&mut stmt, [])?;
    let active = points.iter().filter(|p| p["active"] == json!(true)).count();
    Ok(Json(json!({"points": points, "active": active})))
}

async fn alarm(State(s): State<S>, Path(id): Path<i64>) -> Result<Json<Value>, ApiError> {
    let db = s.store.read()?;
    let record: Option<String> = db
        .query_row(
            "SELECT json_object('id', id, 'asset_id', asset_id, 'sensor_id', sensor_id, 'code', code, 'severity', severity,
                    'state', state, 'message', message, 'value', shown(value), 'threshold', shown(threshold),
                    'unit', (SELECT unit FROM sensors s WHERE s.id = alarms.sensor_id), 'raised_at', rfc3339(raised_at),
                    'cleared_at', rfc3339(cleared_at), 'acked_at', rfc3339(acked_at), 'acked_by', acked_by, 'shelved_until', rfc3339(shelved_until),
                    'reraise_count', reraise_count)
             FROM alarms WHERE id = ?1",
            [id],
            |r| r.get(0),
        )
        .optional()?;
    let record = record.ok_or_else(|| ApiError::not_found(format!("no alarm {id}; GET /api/alarms lists them")))?;
    let mut stmt = db.prepare_cached(
        "SELECT json_object('kind', kind, 'at', rfc3339(at), 'actor', actor, 'detail', detail) FROM alarm_events WHERE alarm_id = ?1 ORDER BY id",
    )?;
    let journal = json_rows(&mut stmt, [id])?;
    let note: Option<(i64, String, String, Option<i64>, String)> = db
        .query_row(
            "SELECT id, body, flags, run_id, rfc3339(created_at) FROM notes WHERE alarm_id = ?1 AND kind = 'triage'",
            [id],
            |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?, r.get(4)?)),
        )
        .optional()?;
    let note = note.map(|(note_id, body, flags, run_id, at)| {
        json!({"note_id": note_id, "body": serde_json::from_str::<Value>(&body).unwrap_or(Value::Null),
               "flags": serde_json::from_str::<Value>(&flags).unwrap_or(Value::Null), "run_id": run_id,
               "created_at": at, "advisory": "AI advisory: check before acting"})
    });
    Ok(Json(
        json!({"alarm": serde_json::from_str::<Value>(&record).unwrap_or(Value::Null), "journal": journal, "note": note}),
    ))
}

fn action_error(e: alarms::ActionError) -> ApiError {
    match e {
        alarms::ActionError::NotFound(_) => ApiError::not_found(e.to_string()),
        alarms::ActionError::WrongState { .. } => ApiError::new(StatusCode::CONFLICT, e.to_string()),
        alarms::ActionError::Invalid(m) => ApiError::bad_request(m),
        alarms::ActionError::Store(e) => e.into(),
    }
}

async fn ack(
    State(s): State<S>,
    Extension(user): Extension<User>,
    Path(id): Path<i64>,
) -> Result<Json<Value>, ApiError> {
    let w = s.store.writer().clone();
    alarm_action(id, move || alarms::acknowledge(&w, id, &user.name, Timestamp::now())).await
}

async fn ack_returned(
    State(s): State<S>,
    Extension(user): Extension<User>,
    Path(id): Path<i64>,
) -> Result<Json<Value>, ApiError> {
    let w = s.store.writer().clone();
    let ids = tokio::task::spawn_blocking(move || alarms::acknowledge_returned(&w, id, &user.name, Timestamp::now()))
        .await?
        .map_err(action_error)?;
    Ok(Json(json!({"acknowledged": ids})))
}

/// Runs an operator action off the async threads (it waits on the writer) and answers
/// with the alarm's new state.
async fn alarm_action(
    id: i64,
    action: impl FnOnce() -> Result<crate::domain::AlarmState, alarms::ActionError> + Send + 'static,
) -> Result<Json<Value>, ApiError> {
    let state = tokio::task::spawn_blocking(action).await?.map_err(action_error)?;
    Ok(Json(json!({"id": id, "state": state})))
}

/// Shelving takes a duration and a reason; both go in the alarm's journal.
#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ShelveRequest {
    /// How long, in minutes (1 to 1440).
    pub minutes: i64,
    /// Why, for the journal (e.g. "permit 4471: PUMP-001 isolated for work").
    pub reason: String,
}

async fn shelve(
    State(s): State<S>,
    Extension(user): Extension<User>,
    Path(id): Path<i64>,
    Json(req): Json<ShelveRequest>,
) -> Result<Json<Value>, ApiError> {
    let w = s.store.writer().clone();
    alarm_action(id, move || {
        alarms::shelve(&w, id, &user.name, req.minutes.saturating_mul(60), &req.reason, Timestamp::now())
    })
    .await
}

async fn unshelve(
    State(s): State<S>,
    Extension(user): Extension<User>,
    Path(id): Path<i64>,
) -> Result<Json<Value>, ApiError> {
    let w = s.store.writer().clone();
    alarm_action(id, move || alarms::unshelve(&w, id, &user.name, Timestamp::now())).await
}

async fn out_of_service(
    State(s): State<S>,
    Extension(user): Extension<User>,
    Path(id): Path<i64>,
    Json(req): Json<ReasonRequest>,
) -> Result<Json<Value>, ApiError> {
    let w = s.store.writer().clone();
    alarm_action(id, move || alarms::remove_from_service(&w, id, &user.name, &req.reason, Timestamp::now())).await
}

async fn in_service(
    State(s): State<S>,
    Extension(user): Extension<User>,
    Path(id): Path<i64>,
) -> Result<Json<Value>, ApiError> {
    let (w, queue) = (s.store.writer().clone(), s.queue);
    alarm_action(id, move || alarms::return_to_service(&w, id, &user.name, Timestamp::now(), queue)).await
}

/// Runs a read tool for the page, as the user: the same view of the twin the agent has.
fn tool(s: &WebState, user: &User, name: &str, args: Value) -> Result<Value, ApiError> {
    let def = tools::find(name)
        .ok_or_else(|| ApiError::internal(anyhow::anyhow!("the HMI asked for a tool that does not exist: {name}")))?;
    let caller = Proposer::User(user.name.clone());
    let result = tools::with_context(&s.store, &s.docs, Timestamp::now(), caller, |ctx| def.run(ctx, args))?;
    // The tool's typed error decides the status; the page gets the result whole.
    result.map_err(|e| match e {
        tools::ToolError::InvalidArguments(m) => ApiError::bad_request(m),
        tools::ToolError::NotFound(m) => ApiError::not_found(m),
        tools::ToolError::Rejected(m) => ApiError::new(StatusCode::CONFLICT, m),
        tools::ToolError::Internal(cause) => ApiError::internal(cause),
    })
}

async fn assets(State(s): State<S>, Extension(user): Extension<User>) -> Result<Json<Value>, ApiError> {
    Ok(Json(tool(&s, &user, "list_assets", json!({"limit": 50}))?))
}

async fn plant(State(s): State<S>) -> Result<Json<Value>, ApiError> {
    Ok(Json(crate::plant::tree(&*s.store.read()?)?))
}

async fn asset(
    State(s): State<S>,
    Extension(user): Extension<User>,
    Path(id): Path<String>,
) -> Result<Json<Value>, ApiError> {
    Ok(Json(tool(&s, &user, "get_asset_details", json!({"asset_id": id}))?))
}

async fn doc(
    State(s): State<S>,
    Extension(user): Extension<User>,
    Path(citation): Path<String>,
) -> Result<Json<Value>, ApiError> {
    Ok(Json(tool(&s, &user, "read_doc", json!({"citation": citation}))?))
}

#[derive(Deserialize, JsonSchema)]
struct WindowQuery {
    /// Hours back from now (or from the last reading of a quiet sensor), 1 to 168 (default 24).
    hours: Option<i64>,
}

/// Most points a trend returns; longer windows are thinned to min and max per bucket,
/// so spikes survive.
const MAX_POINTS: usize = 2000;

async fn readings(
    State(s): State<S>,
    Path(id): Path<String>,
    Query(q): Query<WindowQuery>,
) -> Result<Json<Value>, ApiError> {
    let hours = q.hours.unwrap_or(24);
    if !(1..=168).contains(&hours) {
        return Err(ApiError::bad_request(format!("hours must be 1 to 168, not {hours}")));
    }
    let db = s.store.read()?;
    let sensor: Option<(i64, String, String, [Option<f64>; 4])> = db
        .query_row(
            "SELECT key, unit, description, limit_ll, limit_l, limit_h, limit_hh FROM sensors WHERE id = ?1",
            [&id],
            |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, [r.get(3)?, r.get(4)?, r.get(5)?, r.get(6)?])),
        )
        .optional()?;
    let (key, unit, description, [ll, l, h, hh]) = sensor.ok_or_else(|| {
        ApiError::not_found(format!("no sensor {id}; sensor ids look like PUMP-007.VIB-DE (GET /api/assets/PUMP-007)"))
    })?;
    // The window ends now, or at the last reading when the sensor has gone quiet: a
    // stale sensor's trend shows its last hours, not an empty chart.
    let now = Timestamp::now().unix();
    let last: Option<i64> = db
        .prepare_cached("SELECT ts / 1000 FROM readings WHERE sensor_key = ?1 AND ts <= ?2 ORDER BY ts DESC LIMIT 1")?
        .query_row(params![key, (now + 1) * 1000], |r| r.get(0))
        .optional()?;
    let until = last.map_or(now, |last| last.min(now));
    let since = until - hours * 3600;
    let mut stmt = db.prepare_cached(
        "SELECT ts / 1000, value FROM readings WHERE sensor_key = ?1 AND ts >= ?2 AND ts < ?3 ORDER BY ts",
    )?;
    let all: Vec<(i64, f64)> = stmt
        .query_map(params![key, since * 1000, (until + 1) * 1000], |r| Ok((r.get(0)?, r.get(1)?)))?
        .collect::<Result<_, _>>()?;
    let points: Vec<(i64, f64)> = if all.len() <= MAX_POINTS {
        all
    } else {
        all.chunks(all.len().div_ceil(MAX_POINTS / 2))
            .flat_map(|c| {
                let lo = c.iter().min_by(|a, b| a.1.total_cmp(&b.1)).copied().expect("non-empty");
                let hi = c.iter().max_by(|a, b| a.1.total_cmp(&b.1)).copied().expect("non-empty");
                if lo.0 <= hi.0 { [lo, hi] } else { [hi, lo] }
            })
            .collect()
    };
    Ok(Json(json!({"sensor_id": id, "unit": unit, "description": description, "hours": hours,
                   "until": Timestamp::from_unix(until), "stale": until < now - 300,
                   "limits": {"ll": ll, "l": l, "h": h, "hh": hh}, "points": points})))
}

/// A run's trail. A chat run is its asker's: others see it only from supervisor up (to
/// anyone else it does not exist); triage and handover runs are everyone's.
async fn run(
    State(s): State<S>,
    Extension(user): Extension<User>,
    Path(id): Path<i64>,
) -> Result<Json<Value>, ApiError> {
    let db = s.store.read()?;
    let run: Option<String> = db
        .query_row(
            "SELECT json_object('id', id, 'profile', profile, 'trigger', trigger, 'alarm_id', alarm_id, 'outcome', outcome,
                    'model', model, 'started_at', rfc3339(started_at), 'finished_at', rfc3339(finished_at), 'tokens_in', tokens_in,
                    'tokens_out', tokens_out, 'error', error, 'flags', json(flags))
             FROM agent_runs WHERE id = ?1 AND (profile != 'chat' OR trigger = 'user:' || ?2 OR ?3)",
            params![id, user.name, user.role >= Role::Supervisor],
            |r| r.get(0),
        )
        .optional()?;
    let run = run.ok_or_else(|| {
        ApiError::not_found(format!("no run {id} of yours; runs are listed with their notes and chat answers"))
    })?;
    let mut stmt = db.prepare_cached(
        "SELECT json_object('seq', seq, 'kind', kind, 'name', name, 'arguments', arguments, 'result', result,
                'is_error', is_error, 'latency_ms', latency_us / 1000.0)
         FROM agent_steps WHERE run_id = ?1 ORDER BY seq",
    )?;
    let steps = json_rows(&mut stmt, [id])?;
    Ok(Json(json!({"run": serde_json::from_str::<Value>(&run).unwrap_or(Value::Null), "steps": steps})))
}

#[derive(Deserialize, JsonSchema)]
struct StatusQuery {
    /// Only work orders in this status: pending_approval, approved, rejected, expired, dispatched.
    status: Option<String>,
}

async fn work_orders(State(s): State<S>, Query(q): Query<StatusQuery>) -> Result<Json<Value>, ApiError> {
    if let Some(st) = &q.status {
        crate::domain::WorkOrderStatus::parse(st).map_err(ApiError::bad_request)?;
    }
    let db = s.store.read()?;
    let mut stmt = db.prepare_cached(
        "SELECT json_object('id', id, 'asset_id', asset_id, 'alarm_id', alarm_id, 'action', action, 'priority', priority,
                'title', title, 'justification', justification, 'evidence', json(evidence), 'status', status,
                'proposed_by', proposed_by, 'run_id', run_id, 'proposed_at', rfc3339(proposed_at), 'expires_at', rfc3339(expires_at),
                'decided_by', decided_by, 'decided_at', rfc3339(decided_at), 'decision_reason', decision_reason,
                'dispatched_at', rfc3339(dispatched_at))
         FROM work_orders WHERE ?1 IS NULL OR status = ?1 ORDER BY proposed_at DESC, id DESC LIMIT 200",
    )?;
    let rows = json_rows(&mut stmt, [q.status])?;
    Ok(Json(json!({"work_orders": rows})))
}

#[derive(Deserialize, JsonSchema)]
struct LimitQuery {
    /// Most handovers returned, 1 to 50 (default 10).
    limit: Option<u32>,
}

async fn handovers(State(s): State<S>, Query(q): Query<LimitQuery>) -> Result<Json<Value>, ApiError> {
    let limit = q.limit.unwrap_or(10);
    if !(1..=50).contains(&limit) {
        return Err(ApiError::bad_request(format!("limit {limit}: use 1 to 50 (default 10)")));
    }
    let db = s.store.read()?;
    Ok(Json(json!({"handovers": crate::handover::recent(&db, limit)?})))
}

/// Writes a handover now, unless one was written within the last minute: then the
/// answer is 409 with that one's id, which the page shows instead.
async fn write_handover(State(s): State<S>, Extension(user): Extension<User>) -> Result<Json<Value>, ApiError> {
    let latest = crate::handover::recent(&*s.store.read()?, 1)?.pop();
    if let Some(h) = latest {
        let age = Timestamp::now().unix() - h.created_at.unix();
        if age < crate::handover::MIN_INTERVAL_S {
            return Err(ApiError::new(
                StatusCode::CONFLICT,
                format!(
                    "handover note {} was written {age} s ago; read it, or ask again in {} s",
                    h.note_id,
                    crate::handover::MIN_INTERVAL_S - age
                ),
            ));
        }
    }
    // A task of its own: a page closed mid-run must not cancel the run half-way.
    let st = Arc::clone(&s);
    let written = tokio::spawn(async move {
        let h = st.agent.write_handover(&format!("user:{}", user.name)).await?;
        let detail = format!("note {}", h.note_id);
        tokio::task::spawn_blocking(move || accounts::audit(&st.store, &user.name, "handover_written", &detail, None))
            .await??;
        anyhow::Ok(h)
    });
    Ok(Json(serde_json::to_value(written.await?.map_err(ApiError::internal)?).map_err(ApiError::internal)?))
}

/// A work-order decision, or taking an alarm's point out of service, needs a reason; it
/// goes in the record and the journal or audit log.
#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ReasonRequest {
    /// E.g. "permit 4471: suction transmitter replaced".
    pub reason: String,
}

async fn decide(s: S, user: User, id: i64, approve: bool, reason: String) -> Result<Json<Value>, ApiError> {
    let w = s.store.writer().clone();
    let status =
        tokio::task::spawn_blocking(move || approvals::decide(&w, id, &user.name, approve, &reason, Timestamp::now()))
            .await?
            .map_err(|e| match e {
                DecisionError::NotFound(_) => ApiError::not_found(e.to_string()),
                DecisionError::NotPending { .. } => ApiError::new(StatusCode::CONFLICT, e.to_string()),
                DecisionError::NoReason => ApiError::bad_request(e.to_string()),
                DecisionError::Store(e) => e.into(),
            })?;
    Ok(Json(json!({"id": id, "status": status})))
}

async fn approve(
    State(s): State<S>,
    Extension(user): Extension<User>,
    Path(id): Path<i64>,
    Json(req): Json<ReasonRequest>,
) -> Result<Json<Value>, ApiError> {
    decide(s, user, id, true, req.reason).await
}

async fn reject(
    State(s): State<S>,
    Extension(user): Extension<User>,
    Path(id): Path<i64>,
    Json(req): Json<ReasonRequest>,
) -> Result<Json<Value>, ApiError> {
    decide(s, user, id, false, req.reason).await
}

async fn chat_history(State(s): State<S>, Extension(user): Extension<User>) -> Result<Json<Value>, ApiError> {
    let db = s.store.read()?;
    let mut stmt = db.prepare_cached(
        "SELECT json_object('id', id, 'role', role, 'text', text, 'run_id', run_id, 'created_at', rfc3339(created_at))
         FROM (SELECT * FROM chat_messages WHERE user_id = ?1 ORDER BY id DESC LIMIT 200) ORDER BY id",
    )?;
    let rows = json_rows(&mut stmt, [user.id])?;
    Ok(Json(json!({"messages": rows})))
}

/// One question to the agent.
#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ChatRequest {
    /// The operator's question, at most 4,000 characters.
    pub message: String,
}

fn save_chat(
    s: &WebState,
    user_id: i64,
    role: &'static str,
    text: String,
    run_id: Option<i64>,
) -> Result<(), ApiError> {
    s.store.writer().call(move |c| {
        c.prepare_cached(
            "INSERT INTO chat_messages (user_id, role, text, run_id, created_at) VALUES (?1, ?2, ?3, ?4, ?5)",
        )?
        .execute(params![user_id, role, text, run_id, Timestamp::now().unix()])?;
        Ok::<_, crate::store::StoreError>(())
    })?;
    Ok(())
}

/// Streams the agent's answer: `tool` events as tools are called, `text` deltas, then
/// `done` with the run id and outcome (or `error`). The exchange is kept per user.
async fn chat(
    State(s): State<S>,
    Extension(user): Extension<User>,
    Json(req): Json<ChatRequest>,
) -> Result<Sse<impl Stream<Item = Result<Event, Infallible>>>, ApiError> {
    s.agent.chat_task(&req.message, &user.name).map_err(|e| ApiError::bad_request(e.to_string()))?;
    {
        let (st, text, id) = (Arc::clone(&s), req.message.clone(), user.id);
        tokio::task::spawn_blocking(move || save_chat(&st, id, "operator", text, None)).await??;
    }
    let (tx, rx) = tokio::sync::mpsc::unbounded_channel::<StreamEvent>();
    let (done_tx, done_rx) = tokio::sync::oneshot::channel::<Event>();
    let st = Arc::clone(&s);
    tokio::spawn(async move {
        let event = match st.agent.ask(&req.message, &user.name, Some(tx)).await {
            Ok(report) => {
                let answer = report.answer.clone().unwrap_or_default();
                let (st2, id, run_id) = (Arc::clone(&st), user.id, report.run_id);
                let saved =
                    tokio::task::spawn_blocking(move || save_chat(&st2, id, "agent", answer, Some(run_id))).await;
                if !matches!(saved, Ok(Ok(()))) {
                    tracing::warn!(stage = "web", run = report.run_id, "chat answer not saved");
                }
                Event::default().event("done").json_data(json!({"run_id": report.run_id, "outcome": report.outcome,
                    "answer": report.answer, "flags": report.flags}))
            }
            Err(e) => Event::default().event("error").json_data(json!({"error": format!("{e:#}")})),
        };
        let _ = done_tx.send(event.unwrap_or_default());
    });
    Ok(Sse::new(chat_events(rx, done_rx)).keep_alive(KeepAlive::default()))
}

/// The chat's SSE events: every streamed step, then the final `done` (or `error`).
fn chat_events(
    rx: tokio::sync::mpsc::UnboundedReceiver<StreamEvent>,
    done: tokio::sync::oneshot::Receiver<Event>,
) -> impl Stream<Item = Result<Event, Infallible>> {
    futures_util::stream::unfold((rx, Some(done)), |(mut rx, done)| async move {
        if let Some(e) = rx.recv().await {
            let event = match &e {
                StreamEvent::Text { .. } => Event::default().event("text"),
                StreamEvent::Tool { .. } => Event::default().event("tool"),
                StreamEvent::Retract { .. } => Event::default().event("retract"),
            };
            return Some((Ok(event.json_data(&e).unwrap_or_default()), (rx, done)));
        }
        // The run is over (its sender dropped): the final event, then the end.
        let last = done?.await.unwrap_or_else(|_| Event::default().event("error").data("the run stopped"));
        Some((Ok(last), (rx, None)))
    })
}
