//! Health, readiness, Prometheus metrics and the degraded banner.

use std::sync::Arc;

use axum::extract::{Json, State};
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};

use super::{ApiError, WebState};
use crate::domain::Timestamp;
use crate::{alarms, approvals};

type S = Arc<WebState>;

pub(super) async fn healthz() -> Json<Value> {
    Json(json!({"status": "ok"}))
}

pub(super) async fn readyz(State(s): State<S>) -> Response {
    let db = s.store.read().and_then(|c| Ok(c.query_row("SELECT 1", [], |r| r.get::<_, i64>(0))?)).is_ok();
    let broker = *s.broker_up.borrow();
    let status = if db && broker { StatusCode::OK } else { StatusCode::SERVICE_UNAVAILABLE };
    let mut body = json!({"database": db, "broker": broker});
    // Shown, not required: without the directory, local logins and live sessions work.
    if let Some(dir) = &s.directory {
        body["directory"] = json!(dir.up());
    }
    // Shown, not required: the server's absence is an alarm (COMM_LOSS), not ours.
    if let Some(up) = &s.opcua_up {
        body["opcua"] = json!(*up.borrow());
    }
    // Shown, not required: a standby is ready, to read.
    if let Some(pair) = &s.cluster {
        body["cluster"] = pair.describe();
    }
    (status, Json(body)).into_response()
}

/// The registry's counters and histograms, and gauges read from the twin now.
pub(super) async fn metrics(State(s): State<S>) -> Result<Response, ApiError> {
    use crate::metrics::{Gauges, render};
    let mut g = Gauges(Vec::new());
    {
        let db = s.store.read()?;
        for (state, severity, n) in alarms::counts(&db)? {
            g.set("twinops_alarms", &[("state", &state), ("severity", &severity)], n as f64);
        }
        let flood = alarms::flood_state(&db, Timestamp::now(), false)?;
        g.set("twinops_alarm_flood", &[], f64::from(u8::from(flood.flood)));
        g.set("twinops_alarms_raised_last_10m", &[], flood.alarms_last_10_min as f64);
        g.set("twinops_triage_queue_depth", &[], crate::triage::queued(&db)? as f64);
        for (status, n) in approvals::counts(&db)? {
            g.set("twinops_work_orders", &[("status", &status)], n as f64);
        }
    }
    if let Some(up) = s.directory.as_ref().and_then(|d| d.up()) {
        g.set("twinops_directory_up", &[], f64::from(u8::from(up)));
    }
    if let Some(up) = &s.opcua_up {
        g.set("twinops_opcua_up", &[], f64::from(u8::from(*up.borrow())));
    }
    if let Some(pair) = &s.cluster {
        let now = pair.view.standing.borrow().clone();
        g.set("twinops_cluster_acting", &[], f64::from(u8::from(now.acting)));
        g.set("twinops_cluster_term", &[], now.term as f64);
        if let Some((peer, behind)) = pair.view.peer_behind() {
            g.set("twinops_cluster_peer_online", &[], f64::from(u8::from(peer.online)));
            if let Some(behind) = behind {
                g.set("twinops_cluster_peer_decisions_behind", &[], behind.decisions as f64);
                if let Some(s) = behind.alarms_s {
                    g.set("twinops_cluster_peer_alarms_behind_seconds", &[], s as f64);
                }
            }
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

/// Triage waiting longer than this is "behind" on the banner.
pub(super) const TRIAGE_LATE_S: i64 = 300;

/// Dead letters this recent are on the banner.
pub(super) const REFUSED_WINDOW_S: i64 = 900;

pub(super) async fn status(State(s): State<S>) -> Result<Json<Value>, ApiError> {
    let now = Timestamp::now();
    let db = s.store.read()?;
    let flood = alarms::flood_state(&db, now, false)?;
    let backlog = crate::triage::backlog(&db, now)?;
    let refused = crate::ingest::dead_letters::refused_since(&db, now.plus_secs(-REFUSED_WINDOW_S))?;
    // The page shows the site's name and its times in the site's zone.
    let site = crate::plant::site(&db)?;
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
    if s.opcua_up.as_ref().is_some_and(|up| !*up.borrow()) {
        reasons.push("the OPC UA server is not connected; its values and alarms are not arriving".into());
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
    let cluster = s.cluster.as_ref().map(|p| p.describe());
    Ok(Json(json!({"degraded": !reasons.is_empty(), "reasons": reasons, "models": models, "broker_up": broker_up,
                   "flood": flood, "triage": backlog, "refused": refused, "site": site, "cluster": cluster})))
}
