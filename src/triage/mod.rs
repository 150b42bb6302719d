//! Durable triage: a job per new alarm occurrence, enqueued in the transaction that
//! created the occurrence (see `alarms`); workers take jobs by severity, then age; each
//! finished job stores exactly one note, in the same transaction that marks it done.
//!
//! A job running when the process died is found `running` at start-up and queued
//! again; the proposal idempotency key keeps its work order single.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rusqlite::{OptionalExtension, params};
use serde::Serialize;
use serde_json::{Value, json};
use tokio::sync::broadcast;

use crate::agent::{Agent, Outcome, RunReport};
use crate::domain::Timestamp;
use crate::store::{StoreError, Writer};

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
}

struct Job {
    id: i64,
    alarm_id: i64,
    mode: String,
}

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
        }
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
                Ok(c.prepare_cached(
                    "UPDATE triage_jobs SET state = 'running', started_at = ?1, attempts = attempts + 1
                     WHERE id = (SELECT id FROM triage_jobs WHERE state = 'queued' ORDER BY priority, enqueued_at, id LIMIT 1)
                     RETURNING id, alarm_id, mode",
                )?
                .query_row([Timestamp::now().unix()], |r| Ok(Job { id: r.get(0)?, alarm_id: r.get(1)?, mode: r.get(2)? }))
                .optional()?)
            })
        .await
    }

    /// Takes the next job and triages it. `None` when the queue is empty.
    pub async fn run_next(&self) -> Result<Option<PublishedNote>, StoreError> {
        let Some(job) = self.claim().await? else { return Ok(None) };
        let use_model = job.mode == "agent" && self.budget.lock().expect("budget lock").take();
        let agent = if use_model { &self.agent } else { &self.rules };
        let report = match agent.triage(job.alarm_id).await {
            Ok(r) if r.outcome != Outcome::Failed => r,
            Ok(r) => return self.fail(&job, format!("run {} failed", r.run_id)).await.map(|_| None),
            Err(e) => return self.fail(&job, format!("{e:#}")).await.map(|_| None),
        };
        let note = self.store(&job, report).await?;
        if let Some(n) = &note {
            let _ = self.notes.send(n.clone());
        }
        Ok(note)
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
            workers.spawn(async move {
                while !*stop.borrow() {
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

    async fn fail(&self, job: &Job, error: String) -> Result<(), StoreError> {
        tracing::warn!(stage = "triage", job = job.id, alarm = job.alarm_id, error = %error, "triage job failed");
        let (id, w) = (job.id, self.writer.clone());
        w.call_async(move |c| {
                c.execute(
                    "UPDATE triage_jobs SET state = CASE WHEN attempts >= ?2 THEN 'failed' ELSE 'queued' END, last_error = ?3 WHERE id = ?1",
                    params![id, MAX_ATTEMPTS, error],
                )?;
                Ok(())
            })
        .await
    }

    /// Stores the note and finishes the job in one transaction. A note that already
    /// exists for the occurrence (a job redone after a crash) is kept, not doubled.
    async fn store(&self, job: &Job, report: RunReport) -> Result<Option<PublishedNote>, StoreError> {
        let body = match &report.note {
            Some(note) => serde_json::to_value(note).unwrap_or(Value::Null),
            None => json!({"text": report.answer}),
        };
        let mut flags = report.flags.clone();
        if report.outcome != Outcome::Final {
            flags.push(report.outcome.as_str().to_string());
        }
        let (job_id, alarm_id, run_id) = (job.id, job.alarm_id, report.run_id);
        let (body_text, flags_text) = (body.to_string(), serde_json::to_string(&flags).unwrap_or_default());
        let now = Timestamp::now();
        let w = self.writer.clone();
        let stored: Option<(i64, String)> = w.call_async(move |c| {
                let inserted = c.prepare_cached(
                    "INSERT INTO notes (kind, alarm_id, run_id, body, flags, created_at) VALUES ('triage', ?1, ?2, ?3, ?4, ?5)
                     ON CONFLICT (alarm_id) WHERE kind = 'triage' DO NOTHING",
                )?
                .execute(params![alarm_id, run_id, body_text, flags_text, now.unix()])?;
                c.prepare_cached("UPDATE triage_jobs SET state = 'done', finished_at = ?2, last_error = NULL WHERE id = ?1")?
                    .execute(params![job_id, now.unix()])?;
                if inserted == 0 {
                    return Ok(None);
                }
                let note_id = c.last_insert_rowid();
                let asset: String = c.prepare_cached("SELECT asset_id FROM alarms WHERE id = ?1")?.query_row([alarm_id], |r| r.get(0))?;
                Ok::<_, StoreError>(Some((note_id, asset)))
            })
        .await?;
        Ok(stored.map(|(note_id, asset_id)| PublishedNote {
            note_id,
            alarm_id,
            asset_id,
            run_id,
            outcome: report.outcome,
            provider: report.provider,
            flags,
            body,
            created_at: now,
        }))
    }
}
