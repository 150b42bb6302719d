//! Dead letters back in. Once the cause of a dead letter is fixed (the sensor added to
//! the twin, the storage fault cleared), an operator replays it: the stored payload goes
//! through the same [`apply_batch`] as live traffic, with its original reception time,
//! and counts only if none of it is refused again. Otherwise nothing changes and the
//! operator hears the reason now.

use rusqlite::{Connection, OptionalExtension, params};

use super::IngestPolicy;
use super::{Message, MessageEffect, apply_batch};
use crate::domain::Timestamp;
use crate::store::{self, StoreError, Writer};

/// A dead letter as listed (the payload itself only by size).
#[derive(Debug, Clone, PartialEq)]
pub struct DeadLetter {
    pub id: i64,
    pub received_at: Timestamp,
    pub topic: String,
    pub reason: String,
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
    pub reason: String,
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
    reason: Option<&str>,
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
        reason: String,
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
        type Stored = (String, Vec<u8>, i64, String, Option<i64>);
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
        let message = Message::parse(topic.clone(), payload);
        let outcome = store::savepoint(conn, "replay", |conn| {
            let effect = apply_batch(conn, [&message], Timestamp::from_unix(received), policy)?.remove(0);
            if let Some((reason, detail)) = effect.first_refusal.clone() {
                return Err(Undo::Refused { reason: reason.to_string(), detail });
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
    Refused { reason: String, detail: String },
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
