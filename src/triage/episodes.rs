//! An alarm episode's one note: written with its first members' triage, revised in
//! place as the flood grows, and copied to every member without a note of its own.

use std::sync::Arc;

use rusqlite::{OptionalExtension, params};
use serde_json::{Value, json};

use super::{PublishedNote, Triage};
use crate::agent::{Outcome, RunReport};
use crate::domain::{Timestamp, TriageMode};
use crate::store::StoreError;

/// An episode note's next revision, in place: ?1 the note, ?2 body, ?3 flags, ?4 run,
/// ?5 when, ?6 the episode's points it was written for.
const REVISE: &str = "UPDATE notes SET body = ?2, flags = ?3, run_id = ?4, revision = revision + 1,
         revised_at = ?5, episode_points = ?6, from_node = NULL WHERE id = ?1";

/// The member of episode ?1 a first note hangs on: the initiator if it has no note (it
/// came in this flood), else the first to annunciate of those without one.
const LEAD: &str = "SELECT a.id FROM alarms a WHERE a.episode_id = ?1
       AND NOT EXISTS (SELECT 1 FROM notes n WHERE n.kind = 'triage' AND n.alarm_id = a.id)
     ORDER BY a.id = (SELECT initiator_alarm FROM episodes WHERE id = ?1) DESC, a.raised_at, a.id
     LIMIT 1";

/// An episode's first note: ?1 the member it hangs on, ?2 run, ?3 body, ?4 flags,
/// ?5 when, ?6 the episode, ?7 its points.
const FIRST: &str = "INSERT INTO notes (kind, alarm_id, run_id, body, flags, created_at, episode_id, episode_points)
     VALUES ('triage', ?1, ?2, ?3, ?4, ?5, ?6, ?7)";

/// Note ?1 as written: its alarm, that alarm's asset, its revision and when it was made.
const WRITTEN: &str = "SELECT n.alarm_id, a.asset_id, n.revision, n.created_at
     FROM notes n JOIN alarms a ON a.id = n.alarm_id WHERE n.id = ?1";

impl Triage {
    /// The episode's one note: written with its first members' triage, revised when
    /// the episode has grown by a point and the last revision is [`REVISE_AFTER_SECS`]
    /// old (`triage.episode_revise_secs`), and in every case every member still without a
    /// note linked to it. The inner error is a failed run (the job is tried again).
    pub(super) async fn note_episode(
        &self,
        episode: i64,
        mode: TriageMode,
    ) -> Result<Result<Vec<PublishedNote>, String>, StoreError> {
        let lock = {
            let mut locks = self.episodes.lock().expect("episode locks");
            locks.retain(|_, l| Arc::strong_count(l) > 1);
            Arc::clone(locks.entry(episode).or_default())
        };
        let _one_at_a_time = lock.lock().await;
        let w = self.writer.clone();
        let (note, points): (Option<(i64, i64, i64)>, i64) = w
            .call_async(move |c| {
                let note = c
                    .prepare_cached(
                        "SELECT id, coalesce(episode_points, 0), coalesce(revised_at, created_at) FROM notes
                         WHERE episode_id = ?1",
                    )?
                    .query_row([episode], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))
                    .optional()?;
                let points = c
                    .prepare_cached("SELECT points FROM episodes WHERE id = ?1")?
                    .query_row([episode], |r| r.get(0))?;
                Ok::<_, StoreError>((note, points))
            })
            .await?;
        let due = match note {
            None => true,
            Some((_, written_at, at)) => points > written_at && Timestamp::now().unix() - at >= self.revise_after_secs,
        };
        if !due {
            let note_id = note.map(|n| n.0).expect("a note when not due");
            self.link_members(episode, note_id).await?;
            return Ok(Ok(Vec::new()));
        }
        let report = match self.run_with(mode, |agent| agent.triage_episode(episode)).await {
            Ok(report) if !self.acting() => {
                return Ok(Err(format!(
                    "episode {episode}: run {} ended after this node stopped acting",
                    report.run_id
                )));
            }
            Ok(report) => report,
            Err(e) => return Ok(Err(format!("episode {episode}: {e}"))),
        };
        tracing::info!(
            stage = "triage",
            episode,
            points,
            run = report.run_id,
            outcome = report.outcome.as_str(),
            "episode note"
        );
        let note = self.store_episode(episode, points, note.map(|n| n.0), report).await?;
        let _ = self.notes.send(note.clone());
        Ok(Ok(vec![note]))
    }

    /// Writes the episode's note (or its next revision, in place) and links every member
    /// still without a note to it, in one transaction.
    async fn store_episode(
        &self,
        episode: i64,
        points: i64,
        existing: Option<i64>,
        report: RunReport,
    ) -> Result<PublishedNote, StoreError> {
        let body = match &report.note {
            Some(note) => serde_json::to_value(note).unwrap_or(Value::Null),
            None => json!({"text": report.answer}),
        };
        let mut flags = report.flags.clone();
        if report.outcome != Outcome::Final {
            flags.push(report.outcome.as_str().to_string());
        }
        flags.push("episode".to_string());
        let (body_text, flags_text) = (body.to_string(), serde_json::to_string(&flags).unwrap_or_default());
        let (now, run_id, w) = (Timestamp::now(), report.run_id, self.writer.clone());
        let ((note_id, alarm_id, asset_id, revision, created), covers) = w
            .call_async(move |c| {
                let note_id = match existing {
                    Some(id) => {
                        let revised = params![id, body_text, flags_text, run_id, now.unix(), points];
                        c.prepare_cached(REVISE)?.execute(revised)?;
                        id
                    }
                    None => {
                        let lead: i64 = c.prepare_cached(LEAD)?.query_row([episode], |r| r.get(0))?;
                        let first = params![lead, run_id, body_text, flags_text, now.unix(), episode, points];
                        c.prepare_cached(FIRST)?.execute(first)?;
                        c.last_insert_rowid()
                    }
                };
                link(c, episode, note_id)?;
                let row: (i64, i64, String, i64, i64) = c
                    .prepare_cached(WRITTEN)?
                    .query_row([note_id], |r| Ok((note_id, r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?)))?;
                // What it covers, read in the transaction that linked them.
                let covers = c
                    .prepare_cached("SELECT alarm_id FROM notes WHERE covered_by = ?1 ORDER BY alarm_id")?
                    .query_map([note_id], |r| r.get(0))?
                    .collect::<rusqlite::Result<Vec<i64>>>()?;
                Ok::<_, StoreError>((row, covers))
            })
            .await?;
        Ok(PublishedNote {
            note_id,
            alarm_id,
            asset_id,
            run_id,
            outcome: report.outcome,
            provider: report.provider.clone(),
            flags,
            body,
            created_at: Timestamp::from_unix(created),
            covers,
            episode_id: Some(episode),
            revision,
        })
    }

    /// Links the episode's members still without a note to its note.
    async fn link_members(&self, episode: i64, note_id: i64) -> Result<(), StoreError> {
        let w = self.writer.clone();
        w.call_async(move |c| Ok::<_, StoreError>(link(c, episode, note_id).map(drop)?)).await
    }

    /// With no job waiting: revises one episode note that has fallen behind its
    /// episode (a flood that kept growing after its last revision, or closed since).
    pub(super) async fn revise_stale(&self) -> Result<Option<Vec<PublishedNote>>, StoreError> {
        let stale: Option<i64> = self
            .agent
            .store()
            .read()?
            .prepare_cached(
                "SELECT n.episode_id FROM notes n JOIN episodes p ON p.id = n.episode_id
                 WHERE p.points > coalesce(n.episode_points, 0) AND coalesce(n.revised_at, n.created_at) <= ?1
                 ORDER BY coalesce(n.revised_at, n.created_at) LIMIT 1",
            )?
            .query_row([Timestamp::now().unix() - self.revise_after_secs], |r| r.get(0))
            .optional()?;
        let Some(episode) = stale else { return Ok(None) };
        match self.note_episode(episode, TriageMode::Agent).await? {
            Ok(notes) => Ok(Some(notes)),
            Err(e) => {
                tracing::warn!(stage = "triage", episode, error = %e, "episode note revision failed; kept the last one");
                Ok(None)
            }
        }
    }
}

/// Records, for each member of `episode` still without a note, that the episode's note
/// `note_id` covers it (its body a copy, its flags `episode`).
pub(super) fn link(c: &rusqlite::Connection, episode: i64, note_id: i64) -> rusqlite::Result<usize> {
    c.prepare_cached(
        "INSERT INTO notes (kind, alarm_id, run_id, body, flags, created_at, covered_by)
         SELECT 'triage', a.id, l.run_id, l.body, l.flags, ?3, l.id
         FROM alarms a JOIN notes l ON l.id = ?2
         WHERE a.episode_id = ?1 AND NOT EXISTS (SELECT 1 FROM notes n WHERE n.kind = 'triage' AND n.alarm_id = a.id)",
    )?
    .execute(params![episode, note_id, Timestamp::now().unix()])
}
