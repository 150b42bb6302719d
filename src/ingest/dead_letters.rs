//! Dead letters: what ingest refused, kept with its payload and a reason from one
//! vocabulary ([`DeadLetterReason`], a CHECK constraint in the table), logged without a
//! line for each of a flood, listed, and replayed.
//!
//! Once the cause of a dead letter is fixed (the sensor added to the twin, the storage
//! fault cleared), an operator replays it: the stored payload goes through the same
//! [`apply_batch`] as live traffic, with its original reception time, and counts only if
//! none of it is refused again. Otherwise nothing changes and the operator hears the
//! reason now.

use rusqlite::{Connection, OptionalExtension, params};

use super::{DEAD_LETTER_BYTES, IngestPolicy, Rejected};
use super::{Message, MessageEffect, apply_batch};
use crate::domain::{DeadLetterReason, Timestamp};
use crate::store::{self, StoreError, Writer};

/// A dead letter as listed (the payload itself only by size).
#[derive(Debug, Clone, PartialEq)]
pub struct DeadLetter {
    pub id: i64,
    pub received_at: Timestamp,
    pub topic: String,
    pub reason: DeadLetterReason,
    pub detail: String,
    pub bytes: usize,
    pub replayed_at: Option<Timestamp>,
    /// How often this content was refused (a retained message, redelivered), and when last.
    pub times_seen: i64,
    pub last_seen_at: Timestamp,
}

/// Dead letters received (or received again) since a time and not replayed: how many, by reason (most
/// first). The HMI's banner says so, because what they carried is missing from the twin.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize)]
pub struct Refused {
    pub total: i64,
    pub by_reason: Vec<ReasonCount>,
}

#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct ReasonCount {
    pub reason: DeadLetterReason,
    pub count: i64,
}

pub fn refused_since(db: &Connection, since: Timestamp) -> rusqlite::Result<Refused> {
    let mut stmt = db.prepare_cached(
        "SELECT reason, count(*) FROM dead_letters WHERE last_seen_at >= ?1 AND replayed_at IS NULL
         GROUP BY reason ORDER BY count(*) DESC, reason",
    )?;
    let by_reason: Vec<ReasonCount> = stmt
        .query_map([since.unix()], |r| Ok(ReasonCount { reason: r.get(0)?, count: r.get(1)? }))?
        .collect::<Result<_, _>>()?;
    Ok(Refused { total: by_reason.iter().map(|r| r.count).sum(), by_reason })
}

/// Dead letters, oldest first: those not yet replayed (or all), of one reason or any.
pub fn list(
    db: &Connection,
    reason: Option<DeadLetterReason>,
    include_replayed: bool,
    limit: u32,
) -> rusqlite::Result<Vec<DeadLetter>> {
    let mut stmt = db.prepare_cached(
        "SELECT id, received_at, topic, reason, detail, length(payload), replayed_at, times_seen, last_seen_at
         FROM dead_letters
         WHERE (?1 IS NULL OR reason = ?1) AND (?2 OR replayed_at IS NULL)
         ORDER BY id LIMIT ?3",
    )?;
    let rows = stmt.query_map(params![reason, include_replayed, limit], |r| {
        Ok(DeadLetter {
            id: r.get(0)?,
            received_at: Timestamp::from_unix(r.get(1)?),
            topic: r.get(2)?,
            reason: r.get(3)?,
            detail: r.get(4)?,
            bytes: r.get::<_, i64>(5)? as usize,
            replayed_at: r.get::<_, Option<i64>>(6)?.map(Timestamp::from_unix),
            times_seen: r.get(7)?,
            last_seen_at: Timestamp::from_unix(r.get(8)?),
        })
    })?;
    rows.collect()
}

/// What replaying one dead letter did.
#[derive(Debug, Clone, PartialEq)]
pub enum Replay {
    /// Applied and marked replayed.
    Applied(MessageEffect),
    /// Refused again (the first reason given); nothing changed.
    Refused {
        reason: DeadLetterReason,
        detail: String,
    },
    AlreadyReplayed(Timestamp),
    NotFound,
}

/// Replays dead letter `id` as `by` (journalled in the audit log), in one transaction.
pub fn replay(writer: &Writer, id: i64, by: &str, policy: IngestPolicy) -> Result<Replay, StoreError> {
    let by = by.to_string();
    writer.call(move |conn| {
        // topic, payload, received_at, reason, replayed_at
        type Stored = (String, Vec<u8>, i64, DeadLetterReason, Option<i64>);
        let found: Option<Stored> = conn
            .prepare_cached("SELECT topic, payload, received_at, reason, replayed_at FROM dead_letters WHERE id = ?1")?
            .query_row([id], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?, r.get(4)?)))
            .optional()?;
        let Some((topic, payload, received, reason, replayed)) = found else {
            return Ok(Replay::NotFound);
        };
        if let Some(at) = replayed {
            return Ok(Replay::AlreadyReplayed(Timestamp::from_unix(at)));
        }
        // OPC UA's records of a node it could not subscribe (`{"node": ...}`) are no
        // event: the fix is the sensor's node, subscribed again at the next connect.
        if topic.starts_with("opcua/")
            && serde_json::from_slice::<serde_json::Value>(&payload).is_ok_and(|v| v.get("node").is_some())
        {
            let detail = "a record of an OPC UA node twinops could not subscribe, not an event to replay: correct the \
                          sensor's opcua_node (or its type) and import the plant again; the next connect subscribes it"
                .to_string();
            return Ok(Replay::Refused { reason, detail });
        }
        let message = Message::parse(topic.clone(), payload);
        let outcome = store::savepoint(conn, "replay", |conn| {
            let effect = apply_batch(conn, [&message], Timestamp::from_unix(received), policy)?.remove(0);
            if let Some((reason, detail)) = effect.first_refusal.clone() {
                return Err(Undo::Refused { reason, detail });
            }
            conn.prepare_cached("UPDATE dead_letters SET replayed_at = ?2, replayed_by = ?3 WHERE id = ?1")?
                .execute(params![id, Timestamp::now().unix(), by])?;
            let detail = format!("dead letter {id} ({reason}) on {topic}");
            crate::accounts::audit_in(conn, &by, "dead_letter_replayed", &detail, None)?;
            Ok(effect)
        });
        match outcome {
            Ok(effect) => Ok(Replay::Applied(effect)),
            Err(Undo::Refused { reason, detail }) => Ok(Replay::Refused { reason, detail }),
            Err(Undo::Store(e)) => Err(e),
        }
    })
}

/// Why a replay's savepoint is rolled back.
enum Undo {
    Refused { reason: DeadLetterReason, detail: String },
    Store(StoreError),
}

impl From<StoreError> for Undo {
    fn from(e: StoreError) -> Undo {
        Undo::Store(e)
    }
}

impl From<rusqlite::Error> for Undo {
    fn from(e: rusqlite::Error) -> Undo {
        Undo::Store(e.into())
    }
}

/// Refusals logged at most once per reason and topic every [`RefusalLog::EVERY`], with
/// how many there were: the journal tells what `dead_letters` holds without a line
/// for each of a flood.
static REFUSALS: std::sync::Mutex<RefusalLog> = std::sync::Mutex::new(RefusalLog { counts: Vec::new(), last: None });

struct RefusalLog {
    /// (reason, topic, count since the last line, an example detail)
    counts: Vec<(DeadLetterReason, String, u64, String)>,
    last: Option<std::time::Instant>,
}

impl RefusalLog {
    const EVERY: std::time::Duration = std::time::Duration::from_secs(10);

    /// Counts a refusal; returns the lines due now (all counts, then cleared), the
    /// first refusal at once and then at most one round every `EVERY`.
    fn note(
        &mut self,
        reason: DeadLetterReason,
        topic: &str,
        detail: &str,
        now: std::time::Instant,
    ) -> Vec<(DeadLetterReason, String, u64, String)> {
        match self.counts.iter_mut().find(|(r, t, ..)| *r == reason && t == topic) {
            Some(entry) => entry.2 += 1,
            None => self.counts.push((reason, topic.to_string(), 1, detail.chars().take(200).collect())),
        }
        if self.last.is_some_and(|last| now.duration_since(last) < Self::EVERY) {
            return Vec::new();
        }
        self.last = Some(now);
        std::mem::take(&mut self.counts)
    }
}

/// Stores a refusal with its payload (the first [`DEAD_LETTER_BYTES`] of a larger one).
/// The same content (topic, whole payload, reason) refused again, as a retained message
/// is at every subscribe, counts on its first row (`times_seen`, `last_seen_at`) and is
/// open again if it had been replayed: what it carries is missing again.
pub fn write(conn: &Connection, topic: &str, payload: &[u8], r: &Rejected, at: Timestamp) -> rusqlite::Result<()> {
    crate::metrics::count("twinops_ingest_dead_letters_total", &[("reason", r.reason.as_str())], 1.0);
    let due = REFUSALS.lock().expect("refusal log lock").note(r.reason, topic, &r.detail, std::time::Instant::now());
    for (reason, topic, count, example) in due {
        tracing::warn!(stage = "ingest", reason = reason.as_str(), topic, count, example = %example,
            "refused messages kept as dead letters (`twinops dead-letters list`)");
    }
    let (kept, detail) = match payload.get(..DEAD_LETTER_BYTES) {
        Some(head) if head.len() < payload.len() => {
            (head, format!("{} (its first {DEAD_LETTER_BYTES} bytes kept)", r.detail))
        }
        _ => (payload, r.detail.clone()),
    };
    let hash = content_hash(topic, payload, r.reason);
    conn.prepare_cached(
        "INSERT INTO dead_letters (received_at, last_seen_at, topic, payload, reason, detail, content_hash)
         VALUES (?1, ?1, ?2, ?3, ?4, ?5, ?6)
         ON CONFLICT (content_hash) WHERE content_hash IS NOT NULL DO UPDATE SET
             times_seen = times_seen + 1, last_seen_at = max(last_seen_at, excluded.last_seen_at),
             detail = excluded.detail, replayed_at = NULL, replayed_by = NULL",
    )?
    .execute(params![at.unix(), topic, kept, r.reason, detail, &hash[..]])?;
    Ok(())
}

/// What identifies a dead letter: SHA-256 over its topic, its whole payload and the
/// reason, each length-prefixed so that no two triples hash the same bytes.
fn content_hash(topic: &str, payload: &[u8], reason: DeadLetterReason) -> [u8; 32] {
    use sha2::{Digest, Sha256};
    let mut h = Sha256::new();
    for part in [topic.as_bytes(), payload, reason.as_str().as_bytes()] {
        h.update((part.len() as u64).to_le_bytes());
        h.update(part);
    }
    h.finalize().into()
}

#[cfg(test)]
mod tests {
    use super::*;
    use DeadLetterReason::{Malformed, UnknownSensor};
    use std::time::{Duration, Instant};

    /// A flood of refusals is one line per reason and topic every 10 s, with its count.
    #[test]
    fn refusals_are_logged_once_per_interval_with_their_counts() {
        let mut log = RefusalLog { counts: Vec::new(), last: None };
        let t0 = Instant::now();
        let first = log.note(Malformed, "scada/x", "not JSON", t0);
        assert_eq!(first, [(Malformed, "scada/x".to_string(), 1, "not JSON".to_string())], "the first at once");
        for i in 0..1000 {
            assert!(log.note(Malformed, "scada/x", "not JSON", t0 + Duration::from_millis(i)).is_empty());
        }
        assert!(log.note(UnknownSensor, "scada/y", "no sensor X", t0 + Duration::from_secs(5)).is_empty());
        let later = log.note(Malformed, "scada/x", "not JSON", t0 + Duration::from_secs(11));
        let counts: Vec<(DeadLetterReason, u64)> = later.iter().map(|(r, _, n, _)| (*r, *n)).collect();
        assert_eq!(counts, [(Malformed, 1001), (UnknownSensor, 1)]);
    }
}
