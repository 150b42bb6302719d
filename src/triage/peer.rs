//! A redundant pair's notes. Only the acting node triages; the other hears each note it
//! publishes on the notes topic and keeps it as its own occurrence's note, so that on
//! takeover it triages exactly the occurrences that have none (and none twice), and its
//! HMI shows what the operators were told.
//!
//! Local ids differ between the nodes; the occurrences' event ids (the SCADA's) do not,
//! so a note on the wire names its lead occurrence and those it covers by event id
//! ([`wire`]). A note heard before this node has ingested its lead waits in
//! `peer_notes` and is taken in by [`adopt_pending`] once it has.

use rusqlite::{Connection, OptionalExtension, params};
use serde::Deserialize;
use serde_json::{Value, json};

use super::PublishedNote;
use crate::domain::Timestamp;

/// How long a note of the other node waits for its occurrence before it is dropped
/// (this node never saw that event: it was away longer than the broker kept it).
pub const PENDING_SECS: i64 = 86_400;

/// A note as published on MQTT: the stored note, with the event ids of its lead and of
/// the occurrences it covers, and the node that wrote it when it is one of a pair.
pub fn wire(conn: &Connection, note: &PublishedNote, node: Option<&str>) -> rusqlite::Result<Value> {
    let event_of = |id: i64| -> rusqlite::Result<Option<String>> {
        conn.prepare_cached("SELECT event_id FROM alarms WHERE id = ?1")?.query_row([id], |r| r.get(0)).optional()
    };
    let mut body = serde_json::to_value(note).unwrap_or(Value::Null);
    let covers: Vec<String> =
        note.covers.iter().map(|&id| event_of(id)).filter_map(Result::transpose).collect::<rusqlite::Result<_>>()?;
    body["event_id"] = json!(event_of(note.alarm_id)?);
    body["covers_event_ids"] = json!(covers);
    if let Some(node) = node {
        body["node"] = json!(node);
    }
    Ok(body)
}

/// What this node keeps of a note the other published.
#[derive(Debug, Deserialize)]
struct Heard {
    node: String,
    event_id: String,
    #[serde(default)]
    covers_event_ids: Vec<String>,
    episode_id: Option<i64>,
    body: Value,
    #[serde(default)]
    flags: Vec<String>,
    /// RFC 3339, as [`PublishedNote`] serializes it.
    created_at: String,
    #[serde(default = "first")]
    revision: i64,
}

fn first() -> i64 {
    1
}

/// A note of the other node's, as heard on the notes topic ([`read`]).
pub struct PeerNote {
    heard: Heard,
    value: Value,
}

/// A note heard on the notes topic, read: `None` for its own notes (`node` = `me`) and
/// notes of no pair, which are not the other node's; a payload that is not a note is
/// an error, said once by the caller. Read before the writer is asked for anything:
/// the acting node hears each of its own notes come back.
pub fn read(payload: &[u8], me: &str) -> Result<Option<PeerNote>, String> {
    let value: Value = serde_json::from_slice(payload).map_err(|e| format!("not JSON: {e}"))?;
    if value.get("node").and_then(Value::as_str).is_none_or(|n| n == me) {
        return Ok(None);
    }
    let heard = serde_json::from_value(value.clone()).map_err(|e| format!("not a triage note: {e}"))?;
    Ok(Some(PeerNote { heard, value }))
}

/// Keeps a note of the other node's until its occurrence is here; a later revision
/// replaces an earlier one.
pub fn keep(conn: &Connection, note: &PeerNote, now: Timestamp) -> rusqlite::Result<()> {
    let Heard { event_id, node, revision, .. } = &note.heard;
    conn.prepare_cached(
        "INSERT INTO peer_notes (event_id, node, revision, note, heard_at) VALUES (?1, ?2, ?3, ?4, ?5)
         ON CONFLICT (event_id) DO UPDATE SET node = excluded.node, revision = excluded.revision,
             note = excluded.note, heard_at = excluded.heard_at
         WHERE excluded.revision >= peer_notes.revision",
    )?
    .execute(params![event_id, node, revision, note.value.to_string(), now.unix()])?;
    Ok(())
}

/// [`read`] and [`keep`] on one connection; whether it was the other node's note.
pub fn hear(conn: &Connection, payload: &[u8], me: &str, now: Timestamp) -> Result<bool, String> {
    let Some(note) = read(payload, me)? else { return Ok(false) };
    keep(conn, &note, now).map_err(|e| e.to_string())?;
    Ok(true)
}

/// Takes in every waiting note whose lead occurrence this node has: as that
/// occurrence's note (an episode's note in place of the episode's, revised in place),
/// with the occurrences it covers linked to it. Notes whose occurrence has not come
/// for [`PENDING_SECS`] are dropped. Returns how many were taken in.
pub fn adopt_pending(conn: &Connection, now: Timestamp) -> rusqlite::Result<usize> {
    conn.prepare_cached("DELETE FROM peer_notes WHERE heard_at < ?1")?.execute([now.unix() - PENDING_SECS])?;
    let ready: Vec<(String, String, i64)> = conn
        .prepare_cached(
            "SELECT p.event_id, p.note, a.id FROM peer_notes p JOIN alarms a ON a.event_id = p.event_id
             ORDER BY p.heard_at, p.event_id",
        )?
        .query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))?
        .collect::<rusqlite::Result<_>>()?;
    let mut complete = 0;
    for (event_id, note, lead) in &ready {
        // Written by `hear` from a value that parsed. Kept (and taken in again, which
        // changes nothing twice) until every occurrence it covers is here too: one that
        // came later must not be triaged again.
        let done = match serde_json::from_str::<Heard>(note) {
            Ok(heard) => adopt(conn, &heard, *lead, now)?,
            Err(_) => true,
        };
        if done {
            conn.prepare_cached("DELETE FROM peer_notes WHERE event_id = ?1")?.execute([event_id])?;
            complete += 1;
        }
    }
    Ok(complete)
}

/// Keeps `heard` as `lead`'s note and links what it covers; whether every occurrence
/// it covers is here.
fn adopt(conn: &Connection, heard: &Heard, lead: i64, now: Timestamp) -> rusqlite::Result<bool> {
    let (body, flags) = (heard.body.to_string(), serde_json::to_string(&heard.flags).unwrap_or_default());
    let episode: Option<i64> = match heard.episode_id {
        Some(_) => {
            conn.prepare_cached("SELECT episode_id FROM alarms WHERE id = ?1")?.query_row([lead], |r| r.get(0))?
        }
        None => None,
    };
    // The note this node already keeps for it: the lead's own, or its episode's.
    let existing: Option<(i64, i64)> = conn
        .prepare_cached(
            "SELECT id, revision FROM notes WHERE kind = 'triage' AND covered_by IS NULL
               AND (alarm_id = ?1 OR (?2 IS NOT NULL AND episode_id = ?2))
             ORDER BY alarm_id = ?1 DESC LIMIT 1",
        )?
        .query_row(params![lead, episode], |r| Ok((r.get(0)?, r.get(1)?)))
        .optional()?;
    let points: Option<i64> = match episode {
        Some(e) => conn.prepare_cached("SELECT points FROM episodes WHERE id = ?1")?.query_row([e], |r| r.get(0))?,
        None => None,
    };
    let note_id = match existing {
        Some((id, revision)) => {
            if heard.revision > revision {
                conn.prepare_cached(
                    "UPDATE notes SET body = ?2, flags = ?3, revision = ?4, revised_at = ?5, episode_points = ?6,
                         from_node = ?7 WHERE id = ?1",
                )?
                .execute(params![id, body, flags, heard.revision, now.unix(), points, heard.node])?;
            }
            id
        }
        None => {
            let created = crate::domain::parse_time(&heard.created_at).unwrap_or(now);
            // A lead covered here by a note of this node's (it acted before): that
            // record gives way to the note the operators were sent.
            conn.prepare_cached(
                "DELETE FROM notes WHERE kind = 'triage' AND alarm_id = ?1 AND covered_by IS NOT NULL",
            )?
            .execute([lead])?;
            conn.prepare_cached(
                "INSERT INTO notes (kind, alarm_id, run_id, body, flags, created_at, episode_id, episode_points,
                                    revision, from_node)
                 VALUES ('triage', ?1, NULL, ?2, ?3, ?4, ?5, ?6, ?7, ?8)",
            )?
            .execute(params![
                lead,
                body,
                flags,
                created.unix(),
                episode,
                points,
                heard.revision,
                heard.node
            ])?;
            conn.last_insert_rowid()
        }
    };
    let mut cover = conn.prepare_cached(
        "INSERT INTO notes (kind, alarm_id, run_id, body, flags, created_at, covered_by, from_node)
         SELECT 'triage', a.id, NULL, ?2, ?3, ?4, ?5, ?6 FROM alarms a WHERE a.event_id = ?1
         ON CONFLICT (alarm_id) WHERE kind = 'triage' DO NOTHING",
    )?;
    let mut here = conn.prepare_cached("SELECT count(*) FROM alarms WHERE event_id = ?1")?;
    let mut all_here = true;
    for event_id in &heard.covers_event_ids {
        cover.execute(params![event_id, body, flags, now.unix(), note_id, heard.node])?;
        all_here &= here.query_row([event_id], |r| r.get::<_, i64>(0))? > 0;
    }
    if let Some(episode) = episode {
        super::episodes::link(conn, episode, note_id)?;
    }
    Ok(all_here)
}
