//! Durable triage: every new alarm occurrence belongs to a job, given in the
//! transaction that created the occurrence (see `alarms::enqueue_triage`: one asset's
//! waiting alarms share a job; past capacity they share the overflow job). Workers take
//! jobs by severity, then age, and run the agent once per asset in the job; every
//! occurrence gets exactly one note, stored in one transaction with the run's end.
//!
//! A job running when the process died is found `running` at start-up and queued
//! again; occurrences that already have a note are skipped, and the proposal
//! idempotency key keeps a work order single.
//!
//! Of a redundant pair, only the acting node takes jobs and stores notes (`acting`,
//! looked at again before each note is stored); the other keeps the notes it hears
//! ([`peer`]), so that its queue, on takeover, holds only what has no note yet.

pub mod backfill;
mod episodes;
pub mod peer;

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rusqlite::{OptionalExtension, params};
use serde::Serialize;
use serde_json::{Value, json};
use tokio::sync::{broadcast, watch};

use crate::agent::{Agent, Outcome, RunReport};
use crate::domain::{Timestamp, TriageMode};
use crate::store::{StoreError, Writer};

/// The `[triage]` part.
#[derive(Debug, Clone, serde::Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct TriageConfig {
    /// Concurrent triage runs.
    pub workers: usize,
    /// Runs with a language model per minute; beyond it, the rules model triages.
    pub llm_runs_per_minute: u32,
    /// Most triage jobs queued at once; past it, new occurrences join one overflow job
    /// that the rules model triages. Nothing is dropped.
    pub queue_capacity: i64,
    /// Seconds between an occurrence's raise and its arrival past which it is backfill
    /// (a gateway replaying its buffer): summarised in one note per backfill.
    pub backfill_after_secs: i64,
    /// Seconds between revisions of an episode's note while the episode grows.
    pub episode_revise_secs: i64,
}

impl Default for TriageConfig {
    fn default() -> Self {
        TriageConfig {
            workers: 2,
            llm_runs_per_minute: 20,
            queue_capacity: crate::alarms::TRIAGE_QUEUE_CAPACITY,
            backfill_after_secs: crate::alarms::BACKFILL_AFTER_SECS,
            episode_revise_secs: REVISE_AFTER_SECS,
        }
    }
}

impl TriageConfig {
    pub fn validate(&self) -> anyhow::Result<()> {
        anyhow::ensure!(self.workers > 0, "triage.workers must be at least 1");
        anyhow::ensure!(
            self.queue_capacity >= 2,
            "triage.queue_capacity must be at least 2 (one job plus the overflow job)"
        );
        anyhow::ensure!(
            self.backfill_after_secs >= 60,
            "triage.backfill_after_secs must be at least 60: an occurrence a few seconds late is news, not backfill"
        );
        anyhow::ensure!(
            (0..=3600).contains(&self.episode_revise_secs),
            "triage.episode_revise_secs must be between 0 and 3600 (seconds between revisions of a growing episode's note)"
        );
        Ok(())
    }
}

/// Attempts before a job is given up as `failed`.
const MAX_ATTEMPTS: i64 = 3;

/// A stored note, as published to the HMI, MQTT and webhooks.
#[derive(Debug, Clone, Serialize)]
pub struct PublishedNote {
    pub note_id: i64,
    pub alarm_id: i64,
    pub asset_id: String,
    pub run_id: i64,
    pub outcome: Outcome,
    pub provider: Option<String>,
    pub flags: Vec<String>,
    /// The structured triage note, or the text answer if none could be parsed.
    pub body: Value,
    pub created_at: Timestamp,
    /// The other alarms this note covers (grouped with its lead in one run, or members
    /// of its episode): theirs link to this one and are not published again.
    pub covers: Vec<i64>,
    /// The alarm episode this is the one note of, if it is one.
    pub episode_id: Option<i64>,
    /// 1 when written; an episode's note is revised in place as the episode grows and
    /// published again under the same `note_id` with the next revision.
    pub revision: i64,
}

/// LLM runs allowed per minute; beyond that, jobs are triaged by the rules model.
struct Budget {
    per_minute: f64,
    tokens: f64,
    at: Instant,
}

impl Budget {
    fn take(&mut self) -> bool {
        let now = Instant::now();
        self.tokens =
            (self.tokens + now.duration_since(self.at).as_secs_f64() * self.per_minute / 60.0).min(self.per_minute);
        self.at = now;
        if self.tokens >= 1.0 {
            self.tokens -= 1.0;
            true
        } else {
            false
        }
    }
}

pub struct Triage {
    agent: Arc<Agent>,
    rules: Arc<Agent>,
    writer: Writer,
    notes: broadcast::Sender<PublishedNote>,
    budget: Mutex<Budget>,
    /// One run at a time per episode: two workers taking two assets' jobs of one flood
    /// write one note, not two.
    episodes: Mutex<std::collections::HashMap<i64, Arc<tokio::sync::Mutex<()>>>>,
    revise_after_secs: i64,
    /// Whether this node acts (always, unless it is one of a redundant pair).
    acting: watch::Receiver<bool>,
    /// Of a pair: whether the notes the other node published while this one was away
    /// have been kept ([`Triage::peer_notes_heard`]). Until they are, this node takes
    /// no job even when it acts: it would triage again what the other already noted,
    /// or revise an episode's note under a revision number the other already used.
    heard: watch::Sender<bool>,
}

struct Job {
    id: i64,
    mode: TriageMode,
    enqueued_at: i64,
    /// A backfill: its occurrences get one summary note (`backfill`), not a run each.
    backfill: bool,
    /// Occurrences still without a note, grouped by asset and by when they were raised
    /// (within [`GROUP_SECS`] of the group's first), most severe first.
    groups: Vec<Vec<i64>>,
    /// The alarm episodes some of its occurrences belong to (not in `groups`): each gets
    /// its episode's one note.
    episodes: Vec<i64>,
}

/// An episode's note is revised when the episode has gained a point since it was written
/// and its last revision is this old (by default): updated as a flood grows, not
/// rewritten per alarm.
pub const REVISE_AFTER_SECS: i64 = 15;

/// Occurrences on one asset raised within this many seconds of each other are triaged
/// together; further apart, they are separate events, whatever their queue.
pub const GROUP_SECS: i64 = 600;

impl Triage {
    /// `agent` triages with the configured models; `rules` with the rules model only,
    /// for low-severity and over-budget jobs.
    pub fn new(agent: Arc<Agent>, rules: Arc<Agent>, llm_runs_per_minute: u32) -> Triage {
        let writer = agent.store().writer().clone();
        let per_minute = f64::from(llm_runs_per_minute.max(1));
        Triage {
            agent,
            rules,
            writer,
            notes: broadcast::channel(256).0,
            budget: Mutex::new(Budget { per_minute, tokens: per_minute, at: Instant::now() }),
            episodes: Mutex::default(),
            revise_after_secs: REVISE_AFTER_SECS,
            acting: watch::channel(true).1,
            heard: watch::channel(true).0,
        }
    }

    /// One of a redundant pair: takes no job until the other node's notes have been
    /// heard ([`Triage::peer_notes_heard`]).
    pub fn paired(self) -> Triage {
        self.heard.send_replace(false);
        self
    }

    /// Whether the other node's notes waiting on the broker for this one have all been
    /// kept (the notes subscription is up and quiet), or not (it is down).
    pub fn peer_notes_heard(&self, heard: bool) {
        self.heard.send_if_modified(|was| std::mem::replace(was, heard) != heard);
    }

    /// Takes jobs only while `acting` says so: this node is the acting one of a pair.
    pub fn with_acting(mut self, acting: watch::Receiver<bool>) -> Triage {
        self.acting = acting;
        self
    }

    fn acting(&self) -> bool {
        *self.acting.borrow()
    }

    /// Keeps a note the other node of the pair published (the notes topic's payload),
    /// and takes in every note of its whose occurrence this node now has. `me` is this
    /// node's name: its own notes come back on the topic too, and are ignored.
    pub async fn hear_peer(&self, payload: Vec<u8>, me: String) -> Result<Result<usize, String>, StoreError> {
        let note = match peer::read(&payload, &me) {
            Ok(Some(note)) => note,
            Ok(None) => return Ok(Ok(0)),
            Err(e) => return Ok(Err(e)),
        };
        self.writer
            .call_async(move |c| {
                let now = Timestamp::now();
                peer::keep(c, &note, now)?;
                Ok(Ok(peer::adopt_pending(c, now)?))
            })
            .await
    }

    /// Takes in the other node's notes whose occurrences have come since they were heard.
    pub async fn adopt_peer_notes(&self) -> Result<usize, StoreError> {
        let w = self.writer.clone();
        w.call_async(|c| Ok(peer::adopt_pending(c, Timestamp::now())?)).await
    }

    /// Seconds between revisions of a growing episode's note (`triage.episode_revise_secs`).
    pub fn with_episode_revisions_every(mut self, secs: i64) -> Triage {
        self.revise_after_secs = secs;
        self
    }

    /// Notes as they are stored (for SSE, MQTT and webhooks).
    pub fn subscribe(&self) -> broadcast::Receiver<PublishedNote> {
        self.notes.subscribe()
    }

    /// Queues again the jobs that were running when the process stopped.
    pub async fn requeue_interrupted(&self) -> Result<usize, StoreError> {
        let w = self.writer.clone();
        w.call_async(|c| Ok(c.execute("UPDATE triage_jobs SET state = 'queued' WHERE state = 'running'", [])?)).await
    }

    async fn claim(&self) -> Result<Option<Job>, StoreError> {
        let w = self.writer.clone();
        w.call_async(|c| {
            // The other node's notes first (of a pair, after a takeover): an occurrence
            // it noted is not triaged again.
            peer::adopt_pending(c, Timestamp::now())?;
            let Some((id, mode, enqueued_at, backfill)) = c
                .prepare_cached(
                    "UPDATE triage_jobs SET state = 'running', started_at = ?1, attempts = attempts + 1
                     WHERE id = (SELECT id FROM triage_jobs WHERE state = 'queued' ORDER BY priority, enqueued_at, id LIMIT 1)
                     RETURNING id, mode, enqueued_at, backfill",
                )?
                .query_row([Timestamp::now().unix()], |r| {
                    Ok((r.get::<_, i64>(0)?, r.get::<_, TriageMode>(1)?, r.get::<_, i64>(2)?, r.get::<_, bool>(3)?))
                })
                .optional()?
            else {
                return Ok(None);
            };
            let mut stmt = c.prepare_cached(&format!(
                "SELECT a.id, a.asset_id, a.raised_at, {}, a.episode_id FROM alarms a
                 WHERE a.triage_job = ?1 AND NOT EXISTS (SELECT 1 FROM notes n WHERE n.kind = 'triage' AND n.alarm_id = a.id)
                 ORDER BY a.asset_id, a.raised_at, a.id",
                crate::domain::Severity::sql_rank("a.severity")
            ))?;
            // (asset, first raised, [(severity rank, raised, alarm id)])
            type Group = (String, i64, Vec<(i64, i64, i64)>);
            let mut groups: Vec<Group> = Vec::new();
            let mut episodes: Vec<i64> = Vec::new();
            let rows = stmt.query_map([id], |r| {
                Ok((
                    r.get::<_, i64>(0)?,
                    r.get::<_, String>(1)?,
                    r.get::<_, i64>(2)?,
                    r.get::<_, i64>(3)?,
                    r.get::<_, Option<i64>>(4)?,
                ))
            })?;
            for row in rows {
                let (alarm, asset, raised, rank, episode) = row?;
                if let Some(episode) = episode.filter(|_| !backfill) {
                    if !episodes.contains(&episode) {
                        episodes.push(episode);
                    }
                    continue;
                }
                match groups.last_mut() {
                    Some((a, first, members)) if *a == asset && (backfill || raised - *first <= GROUP_SECS) => {
                        members.push((rank, raised, alarm))
                    }
                    _ => groups.push((asset, raised, vec![(rank, raised, alarm)])),
                }
            }
            let groups = groups
                .into_iter()
                .map(|(.., mut members)| {
                    members.sort();
                    members.into_iter().map(|(.., id)| id).collect()
                })
                .collect();
            Ok(Some(Job { id, mode, enqueued_at, backfill, groups, episodes }))
        })
        .await
    }

    /// Takes the next job and triages its occurrences, one run per asset. `None` when
    /// the queue is empty; otherwise the notes stored (none if the job failed and was
    /// queued again).
    pub async fn run_next(&self) -> Result<Option<Vec<PublishedNote>>, StoreError> {
        let Some(job) = self.claim().await? else { return self.revise_stale().await };
        let waited = (Timestamp::now().unix() - job.enqueued_at).max(0) as f64;
        crate::metrics::observe("twinops_triage_wait_seconds", &[], waited);
        let mut stored = Vec::new();
        if job.backfill {
            stored = self.summarize_backfill(&job).await?;
        }
        for group in job.groups.iter().filter(|_| !job.backfill) {
            let report = match self.run_with(job.mode, |agent| agent.triage_group(group)).await {
                Ok(report) if !self.acting() => {
                    let e = format!("run {} ended after this node stopped acting; not stored", report.run_id);
                    return self.fail(&job, e).await.map(|_| Some(stored));
                }
                Ok(report) => report,
                Err(e) => return self.fail(&job, e).await.map(|_| Some(stored)),
            };
            tracing::info!(
                stage = "triage",
                job = job.id,
                alarms = ?group,
                run = report.run_id,
                outcome = report.outcome.as_str(),
                provider = report.provider.as_deref().unwrap_or("-"),
                "triaged"
            );
            for note in self.store(group, report).await? {
                let _ = self.notes.send(note.clone());
                stored.push(note);
            }
        }
        for &episode in &job.episodes {
            match self.note_episode(episode, job.mode).await? {
                Ok(notes) => stored.extend(notes),
                Err(e) => return self.fail(&job, e).await.map(|_| Some(stored)),
            }
        }
        let (id, w) = (job.id, self.writer.clone());
        w.call_async(move |c| {
            c.prepare_cached(
                "UPDATE triage_jobs SET state = 'done', finished_at = ?2, last_error = NULL WHERE id = ?1",
            )?
            .execute(params![id, Timestamp::now().unix()])?;
            Ok::<_, StoreError>(())
        })
        .await?;
        Ok(Some(stored))
    }

    /// A backfill's one note, for every occurrence in it, written from the journal by an
    /// audited run without a model.
    async fn summarize_backfill(&self, job: &Job) -> Result<Vec<PublishedNote>, StoreError> {
        let ids: Vec<i64> = job.groups.iter().flatten().copied().collect();
        let Some(&lead) = ids.first() else { return Ok(Vec::new()) };
        let received = Timestamp::from_unix(job.enqueued_at);
        let of = ids.clone();
        let note = self.writer.call_async(move |c| Ok::<_, StoreError>(backfill::summary(c, &of, received)?)).await?;
        let mut audit = crate::agent::audit::Audit::start(
            self.writer.clone(),
            "backfill",
            &format!("backfill:job/{}", job.id),
            Some(lead),
            Timestamp::now(),
        )
        .await?;
        audit.finish("final", Some("rules"), (0, 0), None, &[]).await?;
        tracing::info!(stage = "triage", job = job.id, alarms = ids.len(), run = audit.run_id(), "backfill summarised");
        let report = RunReport {
            run_id: audit.run_id(),
            outcome: Outcome::Final,
            answer: None,
            note: Some(note),
            flags: vec!["backfill".into()],
            provider: Some("rules".into()),
            model_calls: 0,
            tool_calls: 0,
            usage: Default::default(),
        };
        let notes = self.store(&ids, report).await?;
        for note in &notes {
            let _ = self.notes.send(note.clone());
        }
        Ok(notes)
    }

    /// Runs jobs until the queue is empty; returns how many notes were stored.
    pub async fn drain(&self) -> Result<usize, StoreError> {
        let mut n = 0;
        loop {
            match self.run_next().await {
                Ok(Some(_)) => n += 1,
                Ok(None) => {
                    let queued: i64 = self.agent.store().read()?.query_row(
                        "SELECT count(*) FROM triage_jobs WHERE state = 'queued'",
                        [],
                        |r| r.get(0),
                    )?;
                    if queued == 0 {
                        return Ok(n);
                    }
                }
                Err(e) => return Err(e),
            }
        }
    }

    /// `concurrency` workers taking jobs until `stop` turns true; idle workers poll
    /// every `idle` (new occurrences also wake them through `wake`).
    pub async fn run_workers(
        self: Arc<Self>,
        concurrency: usize,
        wake: Arc<tokio::sync::Notify>,
        mut stop: tokio::sync::watch::Receiver<bool>,
    ) {
        let mut workers = tokio::task::JoinSet::new();
        for _ in 0..concurrency.max(1) {
            let (me, wake, mut stop) = (Arc::clone(&self), Arc::clone(&wake), stop.clone());
            let (mut acting, mut heard) = (me.acting.clone(), me.heard.subscribe());
            workers.spawn(async move {
                while !*stop.borrow() {
                    if !*acting.borrow_and_update() || !*heard.borrow_and_update() {
                        // Standing by, or not yet caught up with the other node's notes:
                        // they are taken in as their occurrences come, so the queue
                        // holds only what has none.
                        if let Err(e) = me.adopt_peer_notes().await {
                            tracing::warn!(stage = "triage", error = %e, "the other node's notes could not be kept");
                        }
                        tokio::select! {
                            _ = acting.changed() => {}
                            _ = heard.changed() => {}
                            _ = tokio::time::sleep(Duration::from_secs(1)) => {}
                            _ = stop.changed() => {}
                        }
                        continue;
                    }
                    match me.run_next().await {
                        Ok(Some(_)) => continue,
                        Ok(None) => {}
                        Err(e) => tracing::error!(stage = "triage", error = %e, "triage worker error"),
                    }
                    tokio::select! {
                        _ = wake.notified() => {}
                        _ = tokio::time::sleep(Duration::from_secs(2)) => {}
                        _ = stop.changed() => {}
                    }
                }
            });
        }
        let _ = stop.changed().await;
        while workers.join_next().await.is_some() {}
    }

    /// One run, with the configured models when the job's mode and the per-minute
    /// budget allow, else with the rules model; timed and counted. A failed run is the
    /// error the job is queued again with.
    async fn run_with<'a, F, Fut>(&'a self, mode: TriageMode, run: F) -> Result<RunReport, String>
    where
        F: FnOnce(&'a Agent) -> Fut,
        Fut: std::future::Future<Output = anyhow::Result<RunReport>> + 'a,
    {
        let use_model = mode == TriageMode::Agent && self.budget.lock().expect("budget lock").take();
        let agent = if use_model { &self.agent } else { &self.rules };
        let started = Instant::now();
        let result = run(agent).await;
        crate::metrics::time("twinops_triage_run_seconds", &[], started.elapsed());
        let outcome = result.as_ref().map_or("error", |r| r.outcome.as_str());
        let mode = if use_model { TriageMode::Agent } else { TriageMode::Rules };
        crate::metrics::count("twinops_triage_runs_total", &[("mode", mode.as_str()), ("outcome", outcome)], 1.0);
        match result {
            Ok(r) if r.outcome != Outcome::Failed => Ok(r),
            Ok(r) => Err(format!("run {} failed", r.run_id)),
            Err(e) => Err(format!("{e:#}")),
        }
    }

    /// Queues the job again, or gives it up after [`MAX_ATTEMPTS`]. A job cut short
    /// because this node stopped acting is queued again as it was: the attempt was not
    /// its fault, and the node that acts now (or this one, later) takes it.
    async fn fail(&self, job: &Job, error: String) -> Result<(), StoreError> {
        let (id, w) = (job.id, self.writer.clone());
        if !self.acting() {
            tracing::info!(stage = "triage", job = job.id, reason = %error, "triage job put back: this node no longer acts");
            return w
                .call_async(move |c| {
                    c.execute("UPDATE triage_jobs SET state = 'queued', attempts = attempts - 1 WHERE id = ?1", [id])?;
                    Ok(())
                })
                .await;
        }
        tracing::warn!(stage = "triage", job = job.id, error = %error, "triage job failed");
        w.call_async(move |c| {
                c.execute(
                    "UPDATE triage_jobs SET state = CASE WHEN attempts >= ?2 THEN 'failed' ELSE 'queued' END, last_error = ?3 WHERE id = ?1",
                    params![id, MAX_ATTEMPTS, error],
                )?;
                Ok(())
            })
        .await
    }

    /// Stores the group's note, from one run, in one transaction: the lead's (the
    /// group's first), and for each other occurrence a record covered by it, so that
    /// every occurrence has its note and the note goes out once. An occurrence that
    /// already has a note (a job redone after a crash) keeps it; nothing is doubled.
    async fn store(&self, group: &[i64], report: RunReport) -> Result<Vec<PublishedNote>, StoreError> {
        let body = match &report.note {
            Some(note) => serde_json::to_value(note).unwrap_or(Value::Null),
            None => json!({"text": report.answer}),
        };
        let mut flags = report.flags.clone();
        if report.outcome != Outcome::Final {
            flags.push(report.outcome.as_str().to_string());
        }
        if group.len() > 1 {
            flags.push("grouped".to_string());
        }
        let (ids, run_id) = (group.to_vec(), report.run_id);
        let (body_text, flags_text) = (body.to_string(), serde_json::to_string(&flags).unwrap_or_default());
        let now = Timestamp::now();
        let w = self.writer.clone();
        // (the lead's new note and asset, if it was stored now; the alarms it covers)
        type Stored = (Option<(i64, i64, String)>, Vec<i64>);
        let (lead, covers): Stored = w
            .call_async(move |c| {
                let Some((&lead, others)) = ids.split_first() else { return Ok((None, Vec::new())) };
                let mut insert = c.prepare_cached(
                    "INSERT INTO notes (kind, alarm_id, run_id, body, flags, created_at, covered_by)
                     VALUES ('triage', ?1, ?2, ?3, ?4, ?5, ?6) ON CONFLICT (alarm_id) WHERE kind = 'triage' DO NOTHING",
                )?;
                let inserted = insert.execute(params![lead, run_id, body_text, flags_text, now.unix(), None::<i64>])?;
                let lead_note: i64 = c
                    .prepare_cached("SELECT id FROM notes WHERE kind = 'triage' AND alarm_id = ?1")?
                    .query_row([lead], |r| r.get(0))?;
                let mut covers = Vec::new();
                for &alarm_id in others {
                    if insert.execute(params![alarm_id, run_id, body_text, flags_text, now.unix(), lead_note])? == 1 {
                        covers.push(alarm_id);
                    }
                }
                let asset: String =
                    c.prepare_cached("SELECT asset_id FROM alarms WHERE id = ?1")?.query_row([lead], |r| r.get(0))?;
                Ok::<_, StoreError>(((inserted == 1).then_some((lead_note, lead, asset)), covers))
            })
            .await?;
        Ok(lead
            .map(|(note_id, alarm_id, asset_id)| PublishedNote {
                note_id,
                alarm_id,
                asset_id,
                run_id,
                outcome: report.outcome,
                provider: report.provider.clone(),
                flags,
                body,
                created_at: now,
                covers,
                episode_id: None,
                revision: 1,
            })
            .into_iter()
            .collect())
    }
}

/// How far behind triage is, for the HMI's banner: occurrences waiting for a note and
/// how long the oldest has waited, and occurrences whose job was given up lately (they
/// have no note: `twinops triage ALARM_ID` writes one).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct Backlog {
    pub waiting: i64,
    pub oldest_wait_s: i64,
    pub failed_last_hour: i64,
}

/// Triage jobs waiting for a worker.
pub fn queued(conn: &rusqlite::Connection) -> rusqlite::Result<i64> {
    conn.query_row("SELECT count(*) FROM triage_jobs WHERE state = 'queued'", [], |r| r.get(0))
}

pub fn backlog(conn: &rusqlite::Connection, now: Timestamp) -> rusqlite::Result<Backlog> {
    conn.prepare_cached(
        "SELECT count(*) FILTER (WHERE j.state IN ('queued', 'running')),
                coalesce(?1 - min(j.enqueued_at) FILTER (WHERE j.state IN ('queued', 'running')), 0),
                count(*) FILTER (WHERE j.state = 'failed' AND j.started_at >= ?1 - 3600)
         FROM alarms a JOIN triage_jobs j ON j.id = a.triage_job
         WHERE j.state IN ('queued', 'running', 'failed')
           AND NOT EXISTS (SELECT 1 FROM notes n WHERE n.kind = 'triage' AND n.alarm_id = a.id)",
    )?
    .query_row([now.unix()], |r| {
        Ok(Backlog { waiting: r.get(0)?, oldest_wait_s: r.get(1)?, failed_last_hour: r.get(2)? })
    })
}

/// Published triage notes after `after` (a note id), oldest first, at most 1,000: what
/// a consumer that fell behind the broadcast channel missed. A grouped alarm's record,
/// covered by its lead's note, was not published, and is not here either.
pub fn notes_after(conn: &rusqlite::Connection, after: i64) -> Result<Vec<PublishedNote>, StoreError> {
    let mut stmt = conn.prepare_cached(
        "SELECT n.id, n.alarm_id, a.asset_id, n.run_id, r.outcome, r.model, n.flags, n.body, n.created_at,
                (SELECT json_group_array(c.alarm_id) FROM notes c WHERE c.covered_by = n.id), n.episode_id, n.revision
         FROM notes n JOIN alarms a ON a.id = n.alarm_id JOIN agent_runs r ON r.id = n.run_id
         WHERE n.kind = 'triage' AND n.covered_by IS NULL AND n.id > ?1 ORDER BY n.id LIMIT 1000",
    )?;
    let rows = stmt.query_map([after], |r| {
        let outcome: Option<String> = r.get(4)?;
        Ok(PublishedNote {
            note_id: r.get(0)?,
            alarm_id: r.get(1)?,
            asset_id: r.get(2)?,
            run_id: r.get(3)?,
            outcome: outcome.as_deref().and_then(Outcome::parse).unwrap_or(Outcome::Failed),
            provider: r.get(5)?,
            flags: serde_json::from_str(&r.get::<_, String>(6)?).unwrap_or_default(),
            body: serde_json::from_str(&r.get::<_, String>(7)?).unwrap_or(Value::Null),
            created_at: Timestamp::from_unix(r.get(8)?),
            covers: serde_json::from_str(&r.get::<_, String>(9)?).unwrap_or_default(),
            episode_id: r.get(10)?,
            revision: r.get(11)?,
        })
    })?;
    Ok(rows.collect::<Result<_, _>>()?)
}
