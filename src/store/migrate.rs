//! Schema migrations keyed on `PRAGMA user_version`. Append-only: a shipped entry is
//! never edited or reordered; a database newer than the list is refused.

use std::path::Path;

use rusqlite::{Connection, TransactionBehavior};

use super::StoreError;

const MIGRATIONS: &[&str] = &[
    // 1: the baseline data model.
    include_str!("../../schema.sql"),
    // 2: a triage job covers a group of occurrences (one asset's alarms, or the overflow).
    "ALTER TABLE alarms ADD COLUMN triage_job INTEGER REFERENCES triage_jobs(id);
     CREATE INDEX alarms_triage_job ON alarms(triage_job) WHERE triage_job IS NOT NULL;
     ALTER TABLE triage_jobs ADD COLUMN asset_id TEXT;
     CREATE INDEX triage_jobs_queued_asset ON triage_jobs(asset_id) WHERE state = 'queued';
     UPDATE alarms SET triage_job = (SELECT id FROM triage_jobs j WHERE j.alarm_id = alarms.id);
     UPDATE triage_jobs SET asset_id = (SELECT asset_id FROM alarms a WHERE a.id = triage_jobs.alarm_id);",
    // 3: the HMI: API tokens, the security audit log, chat history.
    "CREATE TABLE api_tokens (
         id          INTEGER PRIMARY KEY,
         token_hash  TEXT NOT NULL UNIQUE,             -- SHA-256 of the token
         label       TEXT NOT NULL,
         user_id     INTEGER NOT NULL REFERENCES users(id) ON DELETE CASCADE,
         created_at  INTEGER NOT NULL,
         last_used_at INTEGER,
         revoked     INTEGER NOT NULL DEFAULT 0
     ) STRICT;
     CREATE TABLE audit_log (
         id      INTEGER PRIMARY KEY,
         at      INTEGER NOT NULL,
         actor   TEXT NOT NULL,                       -- a user name, or the name tried
         action  TEXT NOT NULL,                       -- login, login_failed, logout, user_added, ...
         detail  TEXT NOT NULL DEFAULT '',
         address TEXT
     ) STRICT;
     CREATE INDEX audit_log_at ON audit_log(at);
     CREATE TRIGGER audit_log_no_update BEFORE UPDATE ON audit_log BEGIN SELECT raise(ABORT, 'audit_log is append-only'); END;
     CREATE TRIGGER audit_log_no_delete BEFORE DELETE ON audit_log BEGIN SELECT raise(ABORT, 'audit_log is append-only'); END;
     CREATE TABLE chat_messages (
         id         INTEGER PRIMARY KEY,
         user_id    INTEGER NOT NULL REFERENCES users(id) ON DELETE CASCADE,
         role       TEXT NOT NULL CHECK (role IN ('operator', 'agent')),
         text       TEXT NOT NULL,
         run_id     INTEGER REFERENCES agent_runs(id),
         created_at INTEGER NOT NULL
     ) STRICT;
     CREATE INDEX chat_messages_user ON chat_messages(user_id, id);
     -- The status last published on twinops/work_orders/{asset} (decisions out).
     ALTER TABLE work_orders ADD COLUMN published TEXT;",
    // 4: dead letters replayed once their cause was fixed (`twinops dead-letters replay`).
    "ALTER TABLE dead_letters ADD COLUMN replayed_at INTEGER;
     ALTER TABLE dead_letters ADD COLUMN replayed_by TEXT;",
    // 5: work-order changes as a journal, which the HMI's event feed reads by id as it
    // reads alarm_events and notes (a time window missed a late dispatch). Triggers, so
    // that no writer of work_orders can forget it.
    "CREATE TABLE work_order_changes (
         id            INTEGER PRIMARY KEY,
         work_order_id INTEGER NOT NULL REFERENCES work_orders(id) ON DELETE CASCADE,
         status        TEXT NOT NULL
     ) STRICT;
     CREATE TRIGGER work_order_proposed AFTER INSERT ON work_orders
     BEGIN INSERT INTO work_order_changes (work_order_id, status) VALUES (NEW.id, NEW.status); END;
     CREATE TRIGGER work_order_status_changed AFTER UPDATE OF status ON work_orders WHEN NEW.status IS NOT OLD.status
     BEGIN INSERT INTO work_order_changes (work_order_id, status) VALUES (NEW.id, NEW.status); END;",
    // 6: shift handovers go out (MQTT, webhook) once each, through the daemon's outbox,
    // whoever wrote them. Those written before this version are not sent now, hours late.
    // Triage jobs by state, for the HMI's banner.
    "ALTER TABLE notes ADD COLUMN published_at INTEGER;
     UPDATE notes SET published_at = created_at WHERE kind = 'handover';
     CREATE INDEX notes_handover_unpublished ON notes(id) WHERE kind = 'handover' AND published_at IS NULL;
     -- The latest handovers, among many more triage notes.
     CREATE INDEX notes_kind ON notes(kind, id);
     -- The HMI's banner reads the jobs not done (waiting, running, given up) every 15 s.
     CREATE INDEX triage_jobs_state ON triage_jobs(state, started_at);",
    // 7: a run's flags (partial, ungrounded, set_aside:..., usage estimated) beside its
    // outcome, so `runs show` and the trace tell them, not only the note.
    "ALTER TABLE agent_runs ADD COLUMN flags TEXT NOT NULL DEFAULT '[]';",
];

/// The schema version this build writes.
pub const SCHEMA_VERSION: i64 = MIGRATIONS.len() as i64;

/// Applies every migration the database has not seen, all in one transaction.
pub fn migrate(conn: &mut Connection, path: &Path) -> Result<(), StoreError> {
    let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
    let found: i64 = tx.pragma_query_value(None, "user_version", |row| row.get(0))?;
    if found > SCHEMA_VERSION {
        return Err(StoreError::TooNew { path: path.display().to_string(), found, supported: SCHEMA_VERSION });
    }
    for sql in &MIGRATIONS[found as usize..] {
        tx.execute_batch(sql)?;
    }
    tx.pragma_update(None, "user_version", SCHEMA_VERSION)?;
    tx.commit()?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Handovers written before version 6 are taken as sent: upgrading must not publish
    /// hours-old handovers as if new. Those written after go out.
    #[test]
    fn handovers_from_before_the_outbox_are_not_sent_late() {
        let mut conn = Connection::open_in_memory().unwrap();
        for sql in &MIGRATIONS[..5] {
            conn.execute_batch(sql).unwrap();
        }
        conn.pragma_update(None, "user_version", 5).unwrap();
        conn.execute("INSERT INTO notes (kind, body, created_at) VALUES ('handover', '{}', 1000)", []).unwrap();
        migrate(&mut conn, Path::new(":memory:")).unwrap();
        conn.execute("INSERT INTO notes (kind, body, created_at) VALUES ('handover', '{}', 2000)", []).unwrap();
        let sent: Vec<Option<i64>> = conn
            .prepare("SELECT published_at FROM notes ORDER BY id")
            .unwrap()
            .query_map([], |r| r.get(0))
            .unwrap()
            .collect::<Result<_, _>>()
            .unwrap();
        assert_eq!(sent, [Some(1000), None]);
    }
}
