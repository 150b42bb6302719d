//! `/events`: server-sent events for the page. The journal tables are the feed: new
//! rows of `alarm_events` (raised, cleared, acknowledged, shelved, ...), `notes` and
//! work-order changes are read by id every half second, so a client that reconnects
//! with `Last-Event-ID`... simply re-reads lists; nothing is missed under load.

use std::convert::Infallible;
use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::extract::{Extension, State};
use axum::response::sse::{Event, KeepAlive, Sse};
use futures_util::Stream;
use rusqlite::params;
use serde_json::Value;

use super::{ApiError, Credential, WebState};

/// Where a client's feed has got to.
struct Cursor {
    alarm_event: i64,
    note: i64,
    work_order_change: i64,
    queue: std::collections::VecDeque<Event>,
}

/// How often an open stream checks that its credential still holds: a logout, a
/// disabled user or a revoked token ends the stream within this long.
const RECHECK: Duration = Duration::from_secs(5);

pub async fn stream(
    State(s): State<Arc<WebState>>,
    Extension(credential): Extension<Credential>,
) -> Result<Sse<impl Stream<Item = Result<Event, Infallible>>>, ApiError> {
    let db = s.store.read()?;
    let (alarm_event, note, work_order_change): (i64, i64, i64) = db.query_row(
        "SELECT (SELECT coalesce(max(id), 0) FROM alarm_events), (SELECT coalesce(max(id), 0) FROM notes),
                (SELECT coalesce(max(id), 0) FROM work_order_changes)",
        [],
        |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)),
    )?;
    drop(db);
    let start = Cursor { alarm_event, note, work_order_change, queue: Default::default() };
    let feed = (s, credential, start, Instant::now());
    let stream = futures_util::stream::unfold(feed, |(s, credential, mut c, mut checked)| async move {
        loop {
            if checked.elapsed() >= RECHECK {
                // Ends the stream; the page's next request gets the 401.
                if !matches!(credential.user(&s), Ok(Some(_))) {
                    return None;
                }
                checked = Instant::now();
            }
            if let Some(e) = c.queue.pop_front() {
                return Some((Ok(e), (s, credential, c, checked)));
            }
            tokio::time::sleep(Duration::from_millis(500)).await;
            if let Err(e) = poll(&s, &mut c) {
                tracing::warn!(stage = "web", error = %e, "event feed read failed");
            }
        }
    });
    Ok(Sse::new(stream).keep_alive(KeepAlive::default()))
}

fn rows(db: &rusqlite::Connection, sql: &str, after: i64) -> anyhow::Result<Vec<(i64, Value)>> {
    let mut stmt = db.prepare_cached(sql)?;
    let rows = stmt.query_map(params![after], |r| Ok((r.get::<_, i64>(0)?, r.get::<_, String>(1)?)))?;
    Ok(rows
        .map(|r| r.map(|(id, t)| (id, serde_json::from_str(&t).unwrap_or(Value::Null))))
        .collect::<Result<_, _>>()?)
}

fn poll(s: &WebState, c: &mut Cursor) -> anyhow::Result<()> {
    let db = s.store.read()?;
    for (id, v) in rows(
        &db,
        "SELECT e.id, json_object('alarm_id', e.alarm_id, 'kind', e.kind, 'asset_id', a.asset_id, 'severity', a.severity,
                'code', a.code, 'state', a.state)
         FROM alarm_events e JOIN alarms a ON a.id = e.alarm_id WHERE e.id > ?1 ORDER BY e.id LIMIT 500",
        c.alarm_event,
    )? {
        c.alarm_event = id;
        c.queue.push_back(Event::default().event("alarm").id(format!("a{id}")).data(v.to_string()));
    }
    for (id, v) in rows(
        &db,
        "SELECT id, json_object('note_id', id, 'kind', kind, 'alarm_id', alarm_id, 'run_id', run_id)
         FROM notes WHERE id > ?1 ORDER BY id LIMIT 500",
        c.note,
    )? {
        c.note = id;
        c.queue.push_back(Event::default().event("note").id(format!("n{id}")).data(v.to_string()));
    }
    for (id, v) in rows(
        &db,
        "SELECT c.id, json_object('id', c.work_order_id, 'status', c.status, 'asset_id', w.asset_id)
         FROM work_order_changes c JOIN work_orders w ON w.id = c.work_order_id WHERE c.id > ?1 ORDER BY c.id LIMIT 500",
        c.work_order_change,
    )? {
        c.work_order_change = id;
        c.queue.push_back(Event::default().event("work_order").id(format!("w{id}")).data(v.to_string()));
    }
    Ok(())
}
