//! Timed work (tokio-cron-scheduler, UTC): housekeeping every minute (expire stale
//! proposals, unshelve alarms, re-index changed documents), the shift handover
//! ([`crate::handover`]) and readings retention. Each job logs what it did; a failed
//! run is logged and the next one tries again.

use std::path::PathBuf;
use std::sync::Arc;

use serde::Deserialize;
use tokio_cron_scheduler::{Job, JobScheduler};

use crate::agent::Agent;
use crate::alarms;
use crate::approvals::Approvals;
use crate::domain::Timestamp;
use crate::rag::DocIndex;
use crate::store::{Store, StoreError, prune_readings};

/// The `[schedule]` part. Cron expressions have six fields, seconds first, in UTC.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ScheduleConfig {
    /// Expire stale proposals, unshelve alarms whose shelf time is over, re-index
    /// changed documents.
    pub housekeeping: String,
    /// The shift handover note (an agent run), at each shift change.
    pub handover: String,
    /// Readings retention.
    pub retention: String,
    /// Raw readings older than this are deleted (hourly rollups stay); 0 keeps all.
    pub readings_retention_days: u32,
    /// Markdown documents re-indexed at housekeeping when they change; none if unset
    /// (`serve --demo` uses the seed's docs/).
    pub docs_dir: Option<PathBuf>,
}

impl Default for ScheduleConfig {
    fn default() -> Self {
        ScheduleConfig {
            housekeeping: "0 * * * * *".into(),
            handover: "0 0 6,14,22 * * *".into(),
            retention: "0 17 * * * *".into(),
            readings_retention_days: 90,
            docs_dir: None,
        }
    }
}

impl ScheduleConfig {
    /// Each cron expression parses.
    pub fn validate(&self) -> anyhow::Result<()> {
        use anyhow::Context;
        for (key, expr) in
            [("housekeeping", &self.housekeeping), ("handover", &self.handover), ("retention", &self.retention)]
        {
            check_cron(expr).with_context(|| format!("schedule.{key}"))?;
        }
        Ok(())
    }
}

/// Readings deleted per transaction by retention.
const RETENTION_BATCH: usize = 5_000;

/// Checks a cron expression (six fields, seconds first).
pub fn check_cron(expr: &str) -> anyhow::Result<()> {
    anyhow::ensure!(
        expr.split_whitespace().count() == 6,
        "'{expr}' needs six fields, seconds first: \"0 0 6,14,22 * * *\" is 06:00, 14:00 and 22:00 UTC"
    );
    Job::new_async(expr, |_, _| Box::pin(async {}))
        .map_err(|e| anyhow::anyhow!("'{expr}' is not a cron expression: {e}"))?;
    Ok(())
}

/// What one housekeeping pass did.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Housekeeping {
    pub expired_work_orders: Vec<i64>,
    pub expired_alarm_changes: Vec<i64>,
    pub unshelved: usize,
    /// Closed hours added to the alarm figures' cache.
    pub alarm_hours_cached: usize,
    pub docs_changed: usize,
    /// Chunks given an embedding (with `[embeddings]` set).
    pub docs_embedded: usize,
    /// Consequential pairs learned again from the journal (the episodes read them).
    pub alarm_pairs: usize,
}

/// Expires stale proposals, unshelves alarms whose time is over, caches the alarm
/// figures of the hours that closed (`alarms::kpi_cache`), re-indexes the
/// documents under `docs` that changed (unchanged files are skipped by SHA-256), and,
/// when `index` has an embedder, embeds the chunks that have no vector yet (an
/// embeddings server that is down is logged and tried again next time).
pub async fn housekeeping(
    store: &Store,
    approvals: &Approvals,
    docs: Option<PathBuf>,
    index: &DocIndex,
    now: Timestamp,
) -> anyhow::Result<Housekeeping> {
    let expired_work_orders = approvals.expire_due(now).await?;
    let expired_alarm_changes = approvals.expire_changes_due(now).await?;
    let (s, w, index) = (store.clone(), store.writer().clone(), index.clone());
    let (unshelved, alarm_hours_cached, docs_changed, docs_embedded, alarm_pairs) =
        tokio::task::spawn_blocking(move || -> anyhow::Result<_> {
        let unshelved = alarms::unshelve_expired(&w, now)?;
        let hours = alarms::kpi_cache::refresh(&w, now)?;
        let ms = now.unix() * 1000;
        let pairs = w.call(move |c| {
            Ok::<_, StoreError>(crate::episodes::upkeep::refresh_pairs(
                c,
                ms,
                90,
                crate::episodes::pairs::PairRules::default(),
            )?)
        })?;
        let changed = match docs {
            Some(dir) => {
                let r = crate::rag::index_dir(&s, &dir, now)?;
                r.added + r.updated
            }
            None => 0,
        };
        let embedded = match index.embedder().map(|e| crate::rag::embed_chunks(&s, e)) {
            Some(Ok(r)) => r.embedded,
            Some(Err(e)) => {
                tracing::warn!(stage = "schedule", error = %format!("{e:#}"), "embedding the documents failed; BM25 still answers");
                0
            }
            None => 0,
        };
        Ok((unshelved, hours, changed, embedded, pairs))
    })
    .await??;
    Ok(Housekeeping {
        expired_work_orders,
        expired_alarm_changes,
        unshelved,
        alarm_hours_cached,
        docs_changed,
        docs_embedded,
        alarm_pairs,
    })
}

/// Starts the scheduler with the three jobs. Shut it down with [`JobScheduler::shutdown`].
/// `acting`: of a redundant pair, only the acting node writes the handover (a model
/// run, a note out); both keep their own twin tidy.
pub async fn start(
    cfg: &ScheduleConfig,
    store: Store,
    agent: Arc<Agent>,
    acting: tokio::sync::watch::Receiver<bool>,
) -> anyhow::Result<JobScheduler> {
    let sched = JobScheduler::new().await?;

    let (s, docs, index, approvals) =
        (store.clone(), cfg.docs_dir.clone(), agent.docs().clone(), agent.approvals().clone());
    sched
        .add(Job::new_async(cfg.housekeeping.as_str(), move |_, _| {
            let (s, docs, index, approvals) = (s.clone(), docs.clone(), index.clone(), approvals.clone());
            Box::pin(async move {
                match housekeeping(&s, &approvals, docs, &index, Timestamp::now()).await {
                    Ok(h) if h == Housekeeping::default() => {}
                    Ok(h) => tracing::info!(
                        stage = "schedule",
                        expired_work_orders = ?h.expired_work_orders,
                        expired_alarm_changes = ?h.expired_alarm_changes,
                        unshelved = h.unshelved,
                        alarm_hours_cached = h.alarm_hours_cached,
                        docs_changed = h.docs_changed,
                        docs_embedded = h.docs_embedded,
                        "housekeeping"
                    ),
                    Err(e) => tracing::warn!(stage = "schedule", error = %format!("{e:#}"), "housekeeping failed"),
                }
            })
        })?)
        .await?;

    sched
        .add(Job::new_async(cfg.handover.as_str(), move |_, _| {
            let (agent, acting) = (Arc::clone(&agent), *acting.borrow());
            Box::pin(async move {
                if !acting {
                    tracing::info!(stage = "schedule", "shift handover left to the acting node of the pair");
                    return;
                }
                match agent.write_handover("schedule:handover").await {
                    Ok(h) => tracing::info!(stage = "schedule", note = h.note_id, "shift handover written"),
                    Err(e) => tracing::warn!(stage = "schedule", error = %format!("{e:#}"), "shift handover failed"),
                }
            })
        })?)
        .await?;

    let days = cfg.readings_retention_days;
    if days > 0 {
        let w = store.writer().clone();
        sched
            .add(Job::new_async(cfg.retention.as_str(), move |_, _| {
                let w = w.clone();
                Box::pin(async move {
                    let before = Timestamp::now().plus_secs(-86_400 * i64::from(days));
                    match prune_readings(&w, before, RETENTION_BATCH).await {
                        Ok(0) => {}
                        Ok(n) => tracing::info!(stage = "schedule", deleted = n, days, "readings retention"),
                        Err(e) => tracing::warn!(stage = "schedule", error = %e, "readings retention failed"),
                    }
                })
            })?)
            .await?;
    }
    sched.start().await?;
    Ok(sched)
}
