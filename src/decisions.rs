//! Decisions people make in the HMI, made the same way on one node and on a redundant
//! pair. Alone, a decision is applied at once. Of a pair, it goes through the pair's
//! decision log (`cluster::log`) and is applied by both nodes in the broker's order,
//! each finding the alarm by its event id (the SCADA's, the same on both; local ids
//! differ), and journalled at the time it was made; the person is answered with how it
//! went on their node.
//!
//! Shared so far: the actions on one alarm occurrence (acknowledge, shelve, unshelve,
//! out of service, back in service), and work orders (`approvals::pair`: proposed,
//! decided, published, expired), alarm changes (proposed, decided, lifted, expired), and
//! accounts, sessions and tokens (`accounts::changes`), plant imports (with the
//! master alarm database's settings they carry), and acknowledgements passed on to
//! OPC UA (`opcua::acks`). A decision about an occurrence
//! that has not arrived on a node yet waits there, recorded, and is applied when it does.

use std::sync::Arc;

use rusqlite::{OptionalExtension, params};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use tokio::sync::{mpsc, watch};

use crate::accounts::{self, AccountError, AccountOp};
use crate::alarms::{self, ActionError, QueuePolicy};
use crate::approvals::{
    self,
    pair::{AlarmChangeOp, WorkOrderOp},
};
use crate::cluster::log::{Decision, DecisionLog, Delivered, Outcome, send_once};
use crate::cluster::{ClusterConfig, Progress};
use crate::domain::{AlarmState, Timestamp};
use crate::ingest::mqtt::MqttConfig;
use crate::opcua;
use crate::plant;
use crate::store::{Store, StoreError, Writer};

/// The decision log's kind for [`AlarmAction`]s.
pub const ALARM: &str = "alarm";

/// The decision log's kind for acknowledging a point's returned occurrences at once
/// ([`returned_args`]).
pub const RETURNED: &str = "alarm_returned";

/// The log's arguments for acknowledging, from the occurrence `event_id`, its point's
/// returned occurrences `event_ids` as the node where it was made saw them.
pub fn returned_args(event_id: &str, event_ids: &[String]) -> Value {
    json!({"event_id": event_id, "event_ids": event_ids})
}

/// The decision log's kind for a plant import ([`PlantImport`]): the plant, its alarm
/// points and the master alarm database's settings, as a site's files give them.
pub const PLANT: &str = "plant_import";

/// A plant import as the log carries it: the files themselves, which each node reads
/// and imports alike.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct PlantImport {
    pub files: plant::SiteFiles,
    pub mode: plant::Mode,
}

/// An operator's action on one alarm occurrence.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(tag = "action", rename_all = "snake_case")]
pub enum AlarmAction {
    Acknowledge,
    Shelve { secs: i64, reason: String },
    Unshelve,
    OutOfService { reason: String },
    InService,
}

impl AlarmAction {
    /// Applies the action to this node's occurrence `id`, as `actor` at `at`.
    pub fn apply(
        &self,
        writer: &Writer,
        queue: QueuePolicy,
        id: i64,
        actor: &str,
        at: Timestamp,
    ) -> Result<AlarmState, ActionError> {
        match self {
            AlarmAction::Acknowledge => alarms::acknowledge(writer, id, actor, at),
            AlarmAction::Shelve { secs, reason } => alarms::shelve(writer, id, actor, *secs, reason, at),
            AlarmAction::Unshelve => alarms::unshelve(writer, id, actor, at),
            AlarmAction::OutOfService { reason } => alarms::remove_from_service(writer, id, actor, reason, at),
            AlarmAction::InService => alarms::return_to_service(writer, id, actor, at, queue),
        }
    }
}

/// The HTTP status an action's refusal answers with.
pub fn status_of(e: &ActionError) -> u16 {
    match e {
        ActionError::NotFound(_) => 404,
        ActionError::WrongState { .. } | ActionError::Conflict(_) => 409,
        ActionError::Invalid(_) => 400,
        ActionError::Store(_) => 500,
    }
}

/// The log's arguments of an action on the occurrence whose event id is `event_id`.
pub fn alarm_args(event_id: &str, action: &AlarmAction) -> Value {
    let mut args = serde_json::to_value(action).unwrap_or(Value::Null);
    args["event_id"] = json!(event_id);
    args
}

/// The event id that names occurrence `id` on both nodes.
pub fn event_id_of(store: &Store, id: i64) -> Result<Option<String>, StoreError> {
    Ok(store
        .read()?
        .prepare_cached("SELECT event_id FROM alarms WHERE id = ?1")?
        .query_row([id], |r| r.get(0))
        .optional()?)
}

/// Applies one decision from the log on this node, once: a decision delivered again
/// (the node stopped before acknowledging it) answers as it did the first time, and is
/// not applied again. What it did is then [`record`]ed.
pub fn apply(store: &Store, queue: QueuePolicy, here: &str, d: &Decision) -> Result<Outcome, StoreError> {
    let db = store.read()?;
    let before: Option<(u16, String)> = db
        .prepare_cached("SELECT status, body FROM decisions WHERE id = ?1")?
        .query_row([&d.id], |r| Ok((r.get(0)?, r.get(1)?)))
        .optional()?;
    if let Some((status, body)) = before {
        return Ok((status, serde_json::from_str(&body).unwrap_or(Value::Null)));
    }
    apply_kind(store, &db, queue, here, d)
}

/// What `d` does, by its kind.
fn apply_kind(
    store: &Store,
    db: &rusqlite::Connection,
    queue: QueuePolicy,
    here: &str,
    d: &Decision,
) -> Result<Outcome, StoreError> {
    match d.kind.as_str() {
        ALARM => apply_alarm(store, db, queue, d),
        RETURNED => apply_returned(store, db, d),
        approvals::pair::KIND => {
            let here = here.to_string();
            on_writer(store, d, "a work-order decision", move |c, op: WorkOrderOp, d| {
                approvals::pair::apply(c, &op, d, &here)
            })
        }
        approvals::pair::CHANGE_KIND => {
            let here = here.to_string();
            on_writer(store, d, "an alarm-change decision", move |c, op: AlarmChangeOp, d| {
                approvals::pair::apply_change(c, &op, d, &here, queue)
            })
        }
        PLANT => on_writer(store, d, "a plant import", |c, op: PlantImport, d| {
            Ok(match op.files.import_within(c, op.mode, &d.actor)? {
                Ok(changes) => (200, json!({"changes": changes.to_string()})),
                Err(e) => (422, json!({"error": e.to_string()})),
            })
        }),
        accounts::changes::KIND => on_writer(store, d, "an account change", |c, op: AccountOp, d| {
            let at = Timestamp::from_unix(d.at);
            match accounts::changes::apply_in(c, &op, &d.actor, at) {
                Ok(body) => Ok((200, body)),
                Err(AccountError::Store(e)) => Err(e),
                Err(e) => Ok((accounts::status_of(&e), json!({"error": e.to_string()}))),
            }
        }),
        opcua::acks::KIND => {
            on_writer(store, d, "an OPC UA acknowledgement passed on", |c, passed, _| opcua::acks::apply(c, &passed))
        }
        // Made on a node of a later version (one upgraded first): kept here, not lost,
        // and applied once this node is upgraded too ([`apply_waiting`]).
        kind => {
            tracing::warn!(
                stage = "decisions",
                kind,
                "a decision of a kind this version does not know waits here: upgrade this node"
            );
            let waiting = format!(
                "a decision of kind '{kind}', which this version of twinops does not know: it is applied here once \
                 this node is upgraded to the other node's version"
            );
            Ok((WAITING, json!({"waiting": waiting, "unknown_kind": true})))
        }
    }
}

/// Reads `d`'s arguments as an `Op` (`what` it should be, for the refusal) and applies
/// it with `f` on the write connection.
fn on_writer<Op: serde::de::DeserializeOwned + Send + 'static>(
    store: &Store,
    d: &Decision,
    what: &str,
    f: impl FnOnce(&rusqlite::Connection, Op, &Decision) -> Result<Outcome, StoreError> + Send + 'static,
) -> Result<Outcome, StoreError> {
    let op: Op = match serde_json::from_value(d.args.clone()) {
        Ok(op) => op,
        Err(e) => return Ok((400, json!({"error": format!("not {what}: {e}")}))),
    };
    let d = d.clone();
    store.writer().call(move |c| f(c, op, &d))
}

/// Records that `d` was applied here with `outcome`, or is waiting (status 202).
pub fn record(writer: &Writer, d: &Decision, outcome: &Outcome) -> Result<(), StoreError> {
    let (d, (status, body)) = (d.clone(), (outcome.0, outcome.1.to_string()));
    writer.call(move |c| {
        c.prepare_cached(
            "INSERT OR IGNORE INTO decisions (id, node, kind, args, actor, at, applied_at, status, body)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9)",
        )?
        .execute(params![
            d.id,
            d.node,
            d.kind,
            d.args.to_string(),
            d.actor,
            d.at,
            Timestamp::now().unix(),
            status,
            body
        ])?;
        Ok::<_, StoreError>(())
    })
}

/// The outcome of a decision about an occurrence this node has not ingested yet: it
/// waits here (recorded, acknowledged to the broker) and is applied when the
/// occurrence arrives ([`apply_waiting`]), in the log's order.
const WAITING: u16 = 202;

fn apply_alarm(
    store: &Store,
    db: &rusqlite::Connection,
    queue: QueuePolicy,
    d: &Decision,
) -> Result<Outcome, StoreError> {
    let event_id = d.args["event_id"].as_str().unwrap_or_default();
    // After an earlier decision still waiting for the same occurrence, in the log's order.
    let behind: bool = db
        .prepare_cached(
            "SELECT EXISTS (SELECT 1 FROM decisions WHERE status = 202 AND kind = 'alarm'
                            AND json_extract(args, '$.event_id') = ?1)",
        )?
        .query_row([event_id], |r| r.get(0))?;
    let id: Option<i64> = db
        .prepare_cached("SELECT id FROM alarms WHERE event_id = ?1")?
        .query_row([event_id], |r| r.get(0))
        .optional()?;
    match id {
        Some(id) if !behind => apply_alarm_to(store.writer(), queue, d, id),
        _ => {
            let waiting = format!(
                "the alarm occurrence with event id '{event_id}' has not arrived on this node yet; the decision is \
                 applied here when it does"
            );
            Ok((WAITING, json!({"waiting": waiting})))
        }
    }
}

fn apply_alarm_to(writer: &Writer, queue: QueuePolicy, d: &Decision, id: i64) -> Result<Outcome, StoreError> {
    let action: AlarmAction = match serde_json::from_value(d.args.clone()) {
        Ok(a) => a,
        Err(e) => return Ok((400, json!({"error": format!("not an alarm action: {e}")}))),
    };
    Ok(match action.apply(writer, queue, id, &d.actor, Timestamp::from_unix(d.at)) {
        Ok(state) => (200, json!({"id": id, "state": state})),
        Err(ActionError::Store(e)) => return Err(e),
        Err(e) => (status_of(&e), json!({"error": e.to_string()})),
    })
}

/// Acknowledges, of the occurrences the decision names, those returned unacknowledged
/// here (one this node has not ingested is left out).
fn apply_returned(store: &Store, db: &rusqlite::Connection, d: &Decision) -> Result<Outcome, StoreError> {
    let local = |event: &str| -> Result<Option<i64>, StoreError> {
        Ok(db
            .prepare_cached("SELECT id FROM alarms WHERE event_id = ?1")?
            .query_row([event], |r| r.get(0))
            .optional()?)
    };
    let events: Vec<String> = serde_json::from_value(d.args["event_ids"].clone()).unwrap_or_default();
    let mut ids = Vec::new();
    for e in &events {
        ids.extend(local(e)?);
    }
    let Some(id) = local(d.args["event_id"].as_str().unwrap_or_default())?.or(ids.first().copied()) else {
        let error = "none of the occurrences this acknowledges has arrived on this node";
        return Ok((404, json!({"error": error})));
    };
    let (actor, at) = (d.actor.clone(), Timestamp::from_unix(d.at));
    let done =
        store.writer().call(move |c| Ok::<_, StoreError>(alarms::acknowledge_these_returned(c, id, &ids, &actor, at)));
    Ok(match done? {
        Ok(acknowledged) => (200, json!({"acknowledged": acknowledged})),
        Err(ActionError::Store(e)) => return Err(e),
        Err(e) => (status_of(&e), json!({"error": e.to_string()})),
    })
}

/// The kinds of decision this version applies.
const KINDS: &[&str] = &[
    ALARM,
    RETURNED,
    PLANT,
    approvals::pair::KIND,
    approvals::pair::CHANGE_KIND,
    accounts::changes::KIND,
    opcua::acks::KIND,
];

/// Applies, in the log's order, the decisions that were waiting for an occurrence that
/// has arrived since, or for this node to know their kind (it was upgraded); returns
/// how many.
pub fn apply_waiting(store: &Store, queue: QueuePolicy, here: &str) -> Result<usize, StoreError> {
    let db = store.read()?;
    // An alarm action names its occurrence as `event_id`; a work order's proposal, as
    // `alarm_event_id`. One of a kind an earlier version did not know has no occurrence
    // to wait for (0).
    let kinds = json!(KINDS).to_string();
    let ready: Vec<(Decision, i64)> = db
        .prepare_cached(
            "SELECT d.id, d.node, d.kind, d.args, d.actor, d.at, coalesce(a.id, 0) FROM decisions d
             LEFT JOIN alarms a ON a.event_id = coalesce(json_extract(d.args, '$.event_id'),
                                                         json_extract(d.args, '$.alarm_event_id'))
             WHERE d.status = 202
               AND (a.id IS NOT NULL
                    OR (json_extract(d.body, '$.unknown_kind') AND d.kind IN (SELECT value FROM json_each(?1))))
             ORDER BY d.rowid",
        )?
        .query_map([&kinds], |r| {
            let args: String = r.get(3)?;
            let args = serde_json::from_str(&args).unwrap_or(Value::Null);
            let d = Decision { id: r.get(0)?, node: r.get(1)?, kind: r.get(2)?, args, actor: r.get(4)?, at: r.get(5)? };
            Ok((d, r.get(6)?))
        })?
        .collect::<rusqlite::Result<_>>()?;
    let mut applied = 0;
    for (d, alarm) in &ready {
        // An alarm action here is ready: its occurrence has come, and those before it in
        // the log were applied just before it (`apply_alarm` would find itself waiting).
        let (status, body) = match d.kind.as_str() {
            ALARM if *alarm != 0 => apply_alarm_to(store.writer(), queue, d, *alarm)?,
            _ => apply_kind(store, &db, queue, here, d)?,
        };
        if status == WAITING {
            continue;
        }
        applied += 1;
        let (id, body) = (d.id.clone(), body.to_string());
        store.writer().call(move |c| {
            c.prepare_cached("UPDATE decisions SET status = ?2, body = ?3, applied_at = ?4 WHERE id = ?1")?
                .execute(params![id, status, body, Timestamp::now().unix()])?;
            Ok::<_, StoreError>(())
        })?;
    }
    Ok(applied)
}

/// A decision made on the command line of a node of a pair: sent through the pair's
/// log ([`send_once`]), then answered as this node applied it. With this node's daemon
/// not running, it is applied here at once and recorded, so that the daemon does not
/// apply it again when the log brings it.
pub async fn from_command_line(
    store: &Store,
    (cfg, mqtt): (&ClusterConfig, &MqttConfig),
    queue: QueuePolicy,
    (kind, args): (&str, Value),
    actor: &str,
) -> anyhow::Result<Outcome> {
    let d = Decision::new(&cfg.node, kind, args, actor);
    if !send_once(cfg, mqtt, &d).await? {
        let (s, here, decision) = (store.clone(), cfg.node.clone(), d.clone());
        let outcome = tokio::task::spawn_blocking(move || apply(&s, queue, &here, &decision)).await??;
        record(store.writer(), &d, &outcome)?;
        return Ok(outcome);
    }
    let limit = std::time::Duration::from_secs(10);
    let started = std::time::Instant::now();
    loop {
        let done: Option<(u16, String)> = store
            .read()?
            .prepare_cached("SELECT status, body FROM decisions WHERE id = ?1")?
            .query_row([&d.id], |r| Ok((r.get(0)?, r.get(1)?)))
            .optional()?;
        if let Some((status, body)) = done {
            return Ok((status, serde_json::from_str(&body).unwrap_or(Value::Null)));
        }
        anyhow::ensure!(
            started.elapsed() < limit,
            "the change went through the pair's log, but this node's daemon has not applied it within {} s; it \
             does when it can (both nodes will have it): look before making it again",
            limit.as_secs()
        );
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
}

/// Reads the directory users' roles again ([`accounts::directory_changes`]) and makes
/// the changes the directory calls for: of a pair through its log, so that a leaver
/// loses access on both nodes (either node's reading will do; the second finds nothing
/// left to change); with the broker away, or alone, on this node at once. Returns how
/// many users were checked and how many lost access.
pub async fn recheck_directory(
    store: &Store,
    dir: &accounts::directory::Directory,
    log: Option<&DecisionLog>,
) -> Result<(usize, usize), accounts::directory::DirectoryError> {
    let (checked, changes) = accounts::directory_changes(store, dir).await?;
    let mut ended = 0;
    for op in &changes {
        let shared = match log.filter(|l| l.up()) {
            Some(log) => match log.submit(accounts::changes::KIND, op.args(), "directory").await {
                Ok((_, body)) => Some(body["ended"] == true),
                Err(e) => {
                    tracing::warn!(stage = "directory", error = %e, "a directory change could not go through the pair's log; made on this node");
                    None
                }
            },
            None => None,
        };
        ended += usize::from(match shared {
            Some(ended) => ended,
            None => accounts::directory_change(store, op)?,
        });
    }
    Ok((checked, ended))
}

/// How far this node has come ([`Progress`]): decisions applied (those [`prune`]d
/// included), the newest occurrence.
pub fn progress(store: &Store) -> Result<Progress, StoreError> {
    let db = store.read()?;
    let decisions: i64 = db
        .prepare_cached(
            "SELECT (SELECT count(*) FROM decisions WHERE status <> 202)
                    + coalesce((SELECT n FROM decisions_pruned WHERE id = 1), 0)",
        )?
        .query_row([], |r| r.get(0))?;
    let newest_alarm = db.prepare_cached("SELECT max(raised_at) FROM alarms")?.query_row([], |r| r.get(0))?;
    Ok(Progress { decisions: decisions.max(0) as u64, newest_alarm })
}

/// How long an applied decision is kept. The record is what makes a decision the
/// broker delivers again answer as the first time, and the broker redelivers only what
/// was not yet acknowledged, milliseconds after the record; what a decision did stays
/// in the journal and the audit log. A session in use adds one a minute.
pub const KEEP_DAYS: i64 = 30;

/// Deletes the decisions applied more than [`KEEP_DAYS`] before `now` (one waiting is
/// kept however old), a thousand per transaction, counting them in `decisions_pruned`;
/// returns how many.
pub fn prune(writer: &Writer, now: Timestamp) -> Result<usize, StoreError> {
    let before = now.unix() - KEEP_DAYS * 86_400;
    let mut pruned = 0;
    loop {
        let n = writer.call(move |c| {
            let n = c
                .prepare_cached(
                    "DELETE FROM decisions WHERE rowid IN
                       (SELECT rowid FROM decisions WHERE applied_at < ?1 AND status <> 202 LIMIT 1000)",
                )?
                .execute([before])?;
            c.prepare_cached(
                "INSERT INTO decisions_pruned (id, n) VALUES (1, ?1) ON CONFLICT (id) DO UPDATE SET n = n + excluded.n",
            )?
            .execute([n as i64])?;
            Ok::<_, StoreError>(n)
        })?;
        pruned += n;
        if n < 1000 {
            return Ok(pruned);
        }
    }
}

/// Keeps `tx` at this node's [`progress`], looked at every second, until `stop`.
pub async fn progress_loop(store: Store, tx: watch::Sender<Progress>, mut stop: watch::Receiver<bool>) {
    loop {
        tokio::select! {
            _ = tokio::time::sleep(std::time::Duration::from_secs(1)) => {}
            _ = stop.changed() => break,
        }
        let s = store.clone();
        match tokio::task::spawn_blocking(move || progress(&s)).await {
            Ok(Ok(now)) => drop(tx.send_if_modified(|was| std::mem::replace(was, now) != now)),
            Ok(Err(e)) => {
                tracing::warn!(stage = "decisions", error = %e, "how far this node has come could not be read")
            }
            Err(e) => tracing::error!(stage = "decisions", error = %e, "reading this node's progress panicked"),
        }
    }
}

/// Applies the decisions of the log as they come, in its order, until it ends; and,
/// every second, those that were waiting for their occurrence and can now be applied.
pub async fn run(store: Store, queue: QueuePolicy, log: Arc<DecisionLog>, mut decisions: mpsc::Receiver<Delivered>) {
    let here = log.node().to_string();
    let mut tick = tokio::time::interval(std::time::Duration::from_secs(1));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut hourly = tokio::time::interval(std::time::Duration::from_secs(3600));
    hourly.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        let delivered = tokio::select! {
            d = decisions.recv() => match d {
                Some(d) => d,
                None => break,
            },
            _ = hourly.tick() => {
                let s = store.clone();
                match tokio::task::spawn_blocking(move || prune(s.writer(), Timestamp::now())).await {
                    Ok(Ok(0)) => {}
                    Ok(Ok(n)) => tracing::info!(stage = "decisions", n, days = KEEP_DAYS, "old applied decisions pruned"),
                    Ok(Err(e)) => tracing::warn!(stage = "decisions", error = %e, "old decisions could not be pruned; trying again in an hour"),
                    Err(e) => tracing::error!(stage = "decisions", error = %e, "pruning decisions panicked"),
                }
                continue;
            }
            _ = tick.tick() => {
                let (s, here) = (store.clone(), here.clone());
                match tokio::task::spawn_blocking(move || apply_waiting(&s, queue, &here)).await {
                    Ok(Ok(0)) => {}
                    Ok(Ok(n)) => tracing::info!(stage = "decisions", n, "decisions applied once their occurrence arrived"),
                    Ok(Err(e)) => tracing::warn!(stage = "decisions", error = %e, "waiting decisions could not be applied; trying again"),
                    Err(e) => tracing::error!(stage = "decisions", error = %e, "applying waiting decisions panicked"),
                }
                continue;
            }
        };
        apply_delivered(&store, queue, &here, &log, delivered).await;
    }
}

async fn apply_delivered(store: &Store, queue: QueuePolicy, here: &str, log: &DecisionLog, delivered: Delivered) {
    let (s, d, here) = (store.clone(), delivered.decision.clone(), here.to_string());
    match tokio::task::spawn_blocking(move || apply(&s, queue, &here, &d)).await {
        // Recorded before the broker lets go of it and the person is answered: a 2xx
        // means their node has it on record (a waiting decision lives only there), and
        // a node that stops in between gets it again and answers from the record.
        Ok(Ok(outcome)) => {
            if recorded(store, &delivered.decision, &outcome).await {
                log.done(delivered, outcome);
            }
        }
        // Not acknowledged: the broker sends it again, after a restart at the latest.
        Ok(Err(e)) => {
            tracing::error!(stage = "decisions", id = %delivered.decision.id, error = %e, "a decision could not be applied; it comes again")
        }
        Err(e) => tracing::error!(stage = "decisions", error = %e, "applying a decision panicked"),
    }
}

/// [`record`]s, saying why not when it could not.
async fn recorded(store: &Store, d: &Decision, outcome: &Outcome) -> bool {
    let (w, d, outcome) = (store.writer().clone(), d.clone(), outcome.clone());
    match tokio::task::spawn_blocking(move || record(&w, &d, &outcome)).await {
        Ok(Ok(())) => true,
        Ok(Err(e)) => {
            tracing::warn!(stage = "decisions", error = %e, "a decision applied here could not be recorded");
            false
        }
        Err(e) => {
            tracing::error!(stage = "decisions", error = %e, "recording a decision panicked");
            false
        }
    }
}
