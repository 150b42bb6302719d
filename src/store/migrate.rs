//! Schema migrations keyed on `PRAGMA user_version`. Append-only: a shipped entry is
//! never edited or reordered; a database newer than the list is refused.

use std::path::Path;

use rusqlite::{Connection, OptionalExtension, TransactionBehavior};

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
    // 8: the twin is any site's (issue 16). Kinds are the site's words, not a fixed
    // list; ids are unique and found in any case; an asset may sit under a parent (a
    // skid holds pumps); assets and sensors missing from a full plant import are
    // retired, never deleted; a sensor's alarms come from SCADA or from its limits,
    // after an on-delay, with a priority per limit. A rebuild (SQLite cannot drop a
    // CHECK), so `migrate` runs it with foreign keys off and checks them before commit.
    "CREATE TABLE assets_v8 (
         id                  TEXT PRIMARY KEY,
         station_id          TEXT NOT NULL REFERENCES stations(id),
         kind                TEXT NOT NULL CHECK (length(kind) BETWEEN 1 AND 64),
         name                TEXT NOT NULL,
         status              TEXT NOT NULL CHECK (status IN
                               ('running', 'standby', 'stopped', 'maintenance', 'fault', 'out_of_service')),
         criticality         TEXT NOT NULL CHECK (criticality IN ('A', 'B', 'C')),
         manufacturer        TEXT NOT NULL,
         model               TEXT NOT NULL,
         machine_class       TEXT,
         rated_power_kw      REAL,
         installed_on        TEXT NOT NULL,
         last_maintenance_on TEXT,
         drives              TEXT REFERENCES assets(id),
         parent_id           TEXT REFERENCES assets(id),
         retired_at          INTEGER
     ) STRICT;
     INSERT INTO assets_v8 (id, station_id, kind, name, status, criticality, manufacturer, model, machine_class,
                            rated_power_kw, installed_on, last_maintenance_on, drives)
         SELECT id, station_id, kind, name, status, criticality, manufacturer, model, machine_class,
                rated_power_kw, installed_on, last_maintenance_on, drives FROM assets;
     DROP TABLE assets;
     ALTER TABLE assets_v8 RENAME TO assets;
     CREATE INDEX assets_station ON assets(station_id);
     CREATE INDEX assets_kind ON assets(kind);
     CREATE INDEX assets_status ON assets(status);
     CREATE UNIQUE INDEX assets_id_nocase ON assets(id COLLATE NOCASE);
     CREATE TABLE sensors_v8 (
         key          INTEGER PRIMARY KEY,
         id           TEXT NOT NULL UNIQUE,
         asset_id     TEXT NOT NULL REFERENCES assets(id),
         kind         TEXT NOT NULL CHECK (length(kind) BETWEEN 1 AND 64),
         description  TEXT NOT NULL,
         unit         TEXT NOT NULL,
         limit_ll     REAL,
         limit_l      REAL,
         limit_h      REAL,
         limit_hh     REAL,
         deadband     REAL NOT NULL DEFAULT 0,
         alarm_prefix TEXT,
         alarm_source TEXT NOT NULL DEFAULT 'scada' CHECK (alarm_source IN ('scada', 'limits')),
         on_delay_s   INTEGER NOT NULL DEFAULT 0 CHECK (on_delay_s >= 0),
         priority_ll  TEXT CHECK (priority_ll IN ('low', 'medium', 'high', 'critical')),
         priority_l   TEXT CHECK (priority_l IN ('low', 'medium', 'high', 'critical')),
         priority_h   TEXT CHECK (priority_h IN ('low', 'medium', 'high', 'critical')),
         priority_hh  TEXT CHECK (priority_hh IN ('low', 'medium', 'high', 'critical')),
         retired_at   INTEGER
     ) STRICT;
     INSERT INTO sensors_v8 (key, id, asset_id, kind, description, unit, limit_ll, limit_l, limit_h, limit_hh,
                             deadband, alarm_prefix)
         SELECT key, id, asset_id, kind, description, unit, limit_ll, limit_l, limit_h, limit_hh,
                deadband, alarm_prefix FROM sensors;
     DROP TABLE sensors;
     ALTER TABLE sensors_v8 RENAME TO sensors;
     CREATE INDEX sensors_asset ON sensors(asset_id);
     CREATE UNIQUE INDEX sensors_id_nocase ON sensors(id COLLATE NOCASE);",
    // 9: alarms from telemetry. Each limit of a sensor whose alarms come from its
    // readings (alarm_source 'limits') keeps its state here, written with the reading
    // that moved it, so a restart resumes the point where it was.
    "CREATE TABLE limit_points (
         sensor_key   INTEGER NOT NULL REFERENCES sensors(key),
         level        TEXT NOT NULL CHECK (level IN ('ll', 'l', 'h', 'hh')),
         beyond_since INTEGER,                 -- first reading past the set point, while not yet raised
         active       INTEGER NOT NULL DEFAULT 0,
         last_ts      INTEGER NOT NULL,        -- the latest reading evaluated; older ones are not
         PRIMARY KEY (sensor_key, level)
     ) STRICT, WITHOUT ROWID;",
    // 10: the lists count and page the assets in service; at a large utility's 18,000
    // assets a scan per call for `retired_at IS NULL` was most of list_assets' time.
    "CREATE INDEX assets_in_service ON assets(id) WHERE retired_at IS NULL;
     CREATE INDEX assets_kind_in_service ON assets(kind) WHERE retired_at IS NULL;",
    // 11: a large utility's lists and summary without a scan of its 18,000 assets:
    // counts by status kept by triggers; kind and station lists in id order from their
    // index; text search through a trigram index of ids and names (any substring of 3
    // characters or more, in any case) of the assets in service. The text index holds
    // its own copy of id and name, not rowids of `assets`, which VACUUM may renumber. The summary's pass over
    // the active alarms and its look at their assets read covering indexes; an asset's
    // details find what drives it, and the plant tree its children, by index.
    "CREATE TABLE asset_status_counts (
         status TEXT PRIMARY KEY,
         n      INTEGER NOT NULL
     ) STRICT, WITHOUT ROWID;
     INSERT INTO asset_status_counts SELECT status, count(*) FROM assets WHERE retired_at IS NULL GROUP BY status;
     CREATE TRIGGER assets_counted_insert AFTER INSERT ON assets WHEN NEW.retired_at IS NULL BEGIN
         INSERT INTO asset_status_counts (status, n) VALUES (NEW.status, 1) ON CONFLICT (status) DO UPDATE SET n = n + 1;
     END;
     CREATE TRIGGER assets_counted_delete AFTER DELETE ON assets WHEN OLD.retired_at IS NULL BEGIN
         UPDATE asset_status_counts SET n = n - 1 WHERE status = OLD.status;
     END;
     CREATE TRIGGER assets_counted_update AFTER UPDATE OF status, retired_at ON assets
     WHEN OLD.status IS NOT NEW.status OR (OLD.retired_at IS NULL) IS NOT (NEW.retired_at IS NULL) BEGIN
         UPDATE asset_status_counts SET n = n - 1 WHERE status = OLD.status AND OLD.retired_at IS NULL;
         INSERT INTO asset_status_counts (status, n) SELECT NEW.status, 1 WHERE NEW.retired_at IS NULL
             ON CONFLICT (status) DO UPDATE SET n = n + 1;
     END;
     DROP INDEX assets_kind_in_service;
     CREATE INDEX assets_kind_in_service ON assets(kind, id) WHERE retired_at IS NULL;
     CREATE INDEX assets_station_in_service ON assets(station_id, id) WHERE retired_at IS NULL;
     CREATE INDEX alarms_active_asset ON alarms(asset_id, severity, state) WHERE cleared_at IS NULL;
     CREATE INDEX assets_attention ON assets(id, status, criticality, last_maintenance_on) WHERE retired_at IS NULL;
     CREATE INDEX assets_drives ON assets(drives) WHERE drives IS NOT NULL;
     CREATE INDEX assets_parent ON assets(parent_id) WHERE parent_id IS NOT NULL;
     CREATE VIRTUAL TABLE assets_text USING fts5(id, name, tokenize = 'trigram');
     INSERT INTO assets_text (id, name) SELECT id, name FROM assets WHERE retired_at IS NULL;
     CREATE TRIGGER assets_text_insert AFTER INSERT ON assets WHEN NEW.retired_at IS NULL BEGIN
         INSERT INTO assets_text (id, name) VALUES (NEW.id, NEW.name);
     END;
     CREATE TRIGGER assets_text_delete AFTER DELETE ON assets WHEN OLD.retired_at IS NULL BEGIN
         DELETE FROM assets_text WHERE id = OLD.id;
     END;
     CREATE TRIGGER assets_text_update AFTER UPDATE OF id, name, retired_at ON assets
     WHEN OLD.id IS NOT NEW.id OR OLD.name IS NOT NEW.name OR (OLD.retired_at IS NULL) IS NOT (NEW.retired_at IS NULL) BEGIN
         DELETE FROM assets_text WHERE id = OLD.id AND OLD.retired_at IS NULL;
         INSERT INTO assets_text (id, name) SELECT NEW.id, NEW.name WHERE NEW.retired_at IS NULL;
     END;",
    // 12: Sparkplug B sessions, kept with the readings they resolve so that a restart
    // resumes them (src/sparkplug/host.rs); a sensor's readings go stale when its edge
    // node or device dies, until it is born again.
    "CREATE TABLE sparkplug_nodes (
         group_id    TEXT NOT NULL,
         edge_node   TEXT NOT NULL,
         bd_seq      INTEGER,                 -- the birth's, which its death must carry
         seq         INTEGER NOT NULL,        -- the last seen, 0-255
         online      INTEGER NOT NULL,
         changed_at  INTEGER NOT NULL,
         PRIMARY KEY (group_id, edge_node)
     ) STRICT, WITHOUT ROWID;
     CREATE TABLE sparkplug_devices (
         group_id    TEXT NOT NULL,
         edge_node   TEXT NOT NULL,
         device      TEXT NOT NULL,           -- '' for the edge node's own metrics
         asset_id    TEXT,
         online      INTEGER NOT NULL,
         changed_at  INTEGER NOT NULL,
         PRIMARY KEY (group_id, edge_node, device)
     ) STRICT, WITHOUT ROWID;
     CREATE TABLE sparkplug_metrics (
         group_id    TEXT NOT NULL,
         edge_node   TEXT NOT NULL,
         device      TEXT NOT NULL,
         name        TEXT NOT NULL,
         alias       INTEGER,
         datatype    INTEGER NOT NULL,
         sensor_id   TEXT,                    -- none: housekeeping, or a type not stored
         PRIMARY KEY (group_id, edge_node, device, name)
     ) STRICT, WITHOUT ROWID;
     ALTER TABLE sensors ADD COLUMN stale_since INTEGER;",
    // 13: readings keep milliseconds, as Sparkplug B and fast historians stamp them: two
    // values of one sensor within a second are two readings. `ts` was unix seconds;
    // it is now unix milliseconds (the rollups' `hour` stays in seconds).
    "CREATE TABLE readings_ms (
         sensor_key  INTEGER NOT NULL,
         ts          INTEGER NOT NULL,        -- unix milliseconds
         value       REAL NOT NULL,
         PRIMARY KEY (sensor_key, ts)
     ) STRICT, WITHOUT ROWID;
     INSERT INTO readings_ms (sensor_key, ts, value) SELECT sensor_key, ts * 1000, value FROM readings ORDER BY sensor_key, ts;
     DROP TABLE readings;
     ALTER TABLE readings_ms RENAME TO readings;",
    // 14: each asset's active alarms summed (count, severity weight 1/3/9/27,
    // unacknowledged), kept by triggers from the alarm rows alone, so the summary's
    // ranking reads one row per asset in alarm instead of grouping the alarms.
    "CREATE TABLE active_alarm_stats (
         asset_id  TEXT PRIMARY KEY,
         n         INTEGER NOT NULL,
         weight    INTEGER NOT NULL,
         unacked   INTEGER NOT NULL
     ) STRICT, WITHOUT ROWID;
     INSERT INTO active_alarm_stats
         SELECT asset_id, count(*),
                sum(CASE severity WHEN 'critical' THEN 27 WHEN 'high' THEN 9 WHEN 'medium' THEN 3 ELSE 1 END),
                sum(state = 'unacknowledged')
         FROM alarms WHERE cleared_at IS NULL GROUP BY asset_id;
     CREATE TRIGGER alarms_stats_insert AFTER INSERT ON alarms WHEN NEW.cleared_at IS NULL BEGIN
         INSERT INTO active_alarm_stats (asset_id, n, weight, unacked)
         VALUES (NEW.asset_id, 1, CASE NEW.severity WHEN 'critical' THEN 27 WHEN 'high' THEN 9 WHEN 'medium' THEN 3 ELSE 1 END,
                 NEW.state = 'unacknowledged')
         ON CONFLICT (asset_id) DO UPDATE SET n = n + excluded.n, weight = weight + excluded.weight,
             unacked = unacked + excluded.unacked;
     END;
     CREATE TRIGGER alarms_stats_update AFTER UPDATE OF asset_id, severity, state, cleared_at ON alarms BEGIN
         UPDATE active_alarm_stats SET n = n - 1,
             weight = weight - CASE OLD.severity WHEN 'critical' THEN 27 WHEN 'high' THEN 9 WHEN 'medium' THEN 3 ELSE 1 END,
             unacked = unacked - (OLD.state = 'unacknowledged')
         WHERE asset_id = OLD.asset_id AND OLD.cleared_at IS NULL;
         INSERT INTO active_alarm_stats (asset_id, n, weight, unacked)
         SELECT NEW.asset_id, 1, CASE NEW.severity WHEN 'critical' THEN 27 WHEN 'high' THEN 9 WHEN 'medium' THEN 3 ELSE 1 END,
                NEW.state = 'unacknowledged'
         WHERE NEW.cleared_at IS NULL
         ON CONFLICT (asset_id) DO UPDATE SET n = n + excluded.n, weight = weight + excluded.weight,
             unacked = unacked + excluded.unacked;
         DELETE FROM active_alarm_stats WHERE asset_id = OLD.asset_id AND n = 0;
     END;
     CREATE TRIGGER alarms_stats_delete AFTER DELETE ON alarms WHEN OLD.cleared_at IS NULL BEGIN
         UPDATE active_alarm_stats SET n = n - 1,
             weight = weight - CASE OLD.severity WHEN 'critical' THEN 27 WHEN 'high' THEN 9 WHEN 'medium' THEN 3 ELSE 1 END,
             unacked = unacked - (OLD.state = 'unacknowledged')
         WHERE asset_id = OLD.asset_id;
         DELETE FROM active_alarm_stats WHERE asset_id = OLD.asset_id AND n = 0;
     END;",
    // 15: a sensor's measuring range (a tag export's EU Low and EU High, Sparkplug's
    // engLow and engHigh).
    "ALTER TABLE sensors ADD COLUMN range_low REAL;
     ALTER TABLE sensors ADD COLUMN range_high REAL;",
    // 16: a dead letter is one row per content (topic, payload and reason, by SHA-256),
    // its repeats counted on it: a retained bad message, resent by the broker at every
    // subscribe, stays one row. A SCADA alarm event keeps its bytes as received, so that
    // a repeat of its event id is compared field by field (and stripped text is kept),
    // and the journal its source time's milliseconds (`at` stays in seconds).
    "ALTER TABLE dead_letters ADD COLUMN content_hash BLOB;
     ALTER TABLE dead_letters ADD COLUMN times_seen INTEGER NOT NULL DEFAULT 1;
     ALTER TABLE dead_letters ADD COLUMN last_seen_at INTEGER NOT NULL DEFAULT 0;
     UPDATE dead_letters SET last_seen_at = received_at;
     CREATE UNIQUE INDEX dead_letters_content ON dead_letters(content_hash) WHERE content_hash IS NOT NULL;
     CREATE INDEX dead_letters_last_seen ON dead_letters(last_seen_at);
     ALTER TABLE alarm_events ADD COLUMN raw BLOB;
     ALTER TABLE alarm_events ADD COLUMN millis INTEGER NOT NULL DEFAULT 0;",
    // 17: failed logins in the database (they were in the daemon's memory), so that an
    // admin sees and lifts the locks they cause (`accounts::lockout`).
    "CREATE TABLE login_failures (
         id      INTEGER PRIMARY KEY,
         at      INTEGER NOT NULL,
         name    TEXT NOT NULL,                       -- the name tried
         address TEXT NOT NULL                        -- the client's, past trusted proxies
     ) STRICT;
     CREATE INDEX login_failures_name ON login_failures(name, at);
     CREATE INDEX login_failures_address ON login_failures(address, at);",
    // 18: a chunk's embedding (`rag/embed.rs`, optional): unit-length little-endian f32,
    // from the model named; gone with its chunk.
    "CREATE TABLE chunk_vectors (
         chunk_id INTEGER PRIMARY KEY REFERENCES chunks(id) ON DELETE CASCADE,
         model    TEXT NOT NULL,
         vector   BLOB NOT NULL
     ) STRICT;",
    // 19: the alarm system's performance figures (`alarms::kpi`) read the journal in time
    // order, the service events (shelving, out of service) before a window to know each
    // point's state at its start, and the occurrences still standing at its end.
    "CREATE INDEX alarm_events_at ON alarm_events(at, millis);
     CREATE INDEX alarm_events_service ON alarm_events(at)
         WHERE kind IN ('shelved', 'unshelved', 'out_of_service', 'returned_to_service');
     CREATE INDEX alarms_cleared ON alarms(cleared_at) WHERE cleared_at IS NOT NULL;",
    // 20: the master alarm database (`alarms::points`): each alarm point's rationalization
    // as the site's sheet gives it (`plant import`), and every change to it, by whom and
    // why (an import, or an approved alarm change), so a point's settings have a history.
    "CREATE TABLE alarm_points (
         id                 INTEGER PRIMARY KEY,
         asset_id           TEXT NOT NULL REFERENCES assets(id),
         code               TEXT NOT NULL COLLATE NOCASE,  -- PRESS-SUC-LO, as alarms carry it
         sensor_id          TEXT REFERENCES sensors(id),
         priority           TEXT CHECK (priority IN ('low', 'medium', 'high', 'critical')),
         class              TEXT NOT NULL DEFAULT '',      -- safety, environmental, process, ...
         causes             TEXT NOT NULL DEFAULT '',
         consequence        TEXT NOT NULL DEFAULT '',      -- of no action
         response           TEXT NOT NULL DEFAULT '',      -- the operator's corrective action
         respond_within_min REAL,                          -- allowable response time, minutes
         set_point          REAL,
         deadband           REAL,
         on_delay_s         INTEGER,
         off_delay_s        INTEGER,
         rationalized_by    TEXT NOT NULL DEFAULT '',
         rationalized_on    TEXT NOT NULL DEFAULT '',      -- YYYY-MM-DD
         retired_at         INTEGER
     ) STRICT;
     -- One entry per point: an entry without a sensor covers the code on every sensor of
     -- its asset (and SCADA alarms that name none).
     CREATE UNIQUE INDEX alarm_points_point ON alarm_points(asset_id, coalesce(sensor_id, ''), code);
     CREATE TABLE alarm_point_changes (
         id       INTEGER PRIMARY KEY,
         point_id INTEGER NOT NULL REFERENCES alarm_points(id),
         at       INTEGER NOT NULL,
         actor    TEXT NOT NULL,
         source   TEXT NOT NULL CHECK (source IN ('import', 'approval')),
         field    TEXT NOT NULL,                          -- 'point' when added or retired
         old      TEXT NOT NULL,
         new      TEXT NOT NULL,
         reason   TEXT NOT NULL DEFAULT ''
     ) STRICT;
     CREATE INDEX alarm_point_changes_point ON alarm_point_changes(point_id, at);",
    // 21: alarm changes proposed (by the agent or a person) and decided by a supervisor,
    // as work orders are (`approvals::alarm_changes`): one pending per point, with the
    // replay that is its evidence; an approved change to a point twinops evaluates
    // (`applies = 'twin'`) changes the sensor, one to a SCADA point is a record for the
    // SCADA engineer.
    "CREATE TABLE alarm_changes (
         id              INTEGER PRIMARY KEY,
         sensor_id       TEXT NOT NULL REFERENCES sensors(id),
         asset_id        TEXT NOT NULL REFERENCES assets(id),
         code            TEXT NOT NULL,
         level           TEXT NOT NULL CHECK (level IN ('ll', 'l', 'h', 'hh')),
         current         TEXT NOT NULL,                  -- JSON settings in force when proposed
         proposed        TEXT NOT NULL,                  -- JSON settings proposed
         reason          TEXT NOT NULL,
         evidence        TEXT NOT NULL,                  -- JSON: the replay's comparison
         applies         TEXT NOT NULL CHECK (applies IN ('twin', 'scada')),
         status          TEXT NOT NULL CHECK (status IN ('pending_approval', 'approved', 'rejected', 'expired')),
         proposed_by     TEXT NOT NULL,
         run_id          INTEGER,
         proposed_at     INTEGER NOT NULL,
         expires_at      INTEGER NOT NULL,
         decided_by      TEXT,
         decided_at      INTEGER,
         decision_reason TEXT
     ) STRICT;
     CREATE UNIQUE INDEX alarm_changes_pending ON alarm_changes(sensor_id, level) WHERE status = 'pending_approval';
     CREATE INDEX alarm_changes_status ON alarm_changes(status, proposed_at);",
    // 22: occurrences that reach twinops long after they were raised (a gateway replaying
    // its buffer after an outage) share one backfill job per backfill, with one summary
    // note, instead of a triage each (`alarms::enqueue_triage`, `triage::backfill`).
    "ALTER TABLE triage_jobs ADD COLUMN backfill INTEGER NOT NULL DEFAULT 0 CHECK (backfill IN (0, 1));",
    // 23: the alarm figures' cache, per closed hour (`alarms::kpi_cache`): derived from
    // the journal alone, so it starts empty and housekeeping fills it. A point's names are
    // in each row: a week's figures read them in one range scan, not a lookup a point.
    "CREATE TABLE alarm_kpi_hours (
         hour       INTEGER PRIMARY KEY,
         definition TEXT NOT NULL
     ) STRICT;
     CREATE TABLE alarm_kpi_periods (
         period     INTEGER PRIMARY KEY,
         low        INTEGER NOT NULL,
         medium     INTEGER NOT NULL,
         high       INTEGER NOT NULL,
         critical   INTEGER NOT NULL,
         suppressed INTEGER NOT NULL
     ) STRICT;
     CREATE TABLE alarm_kpi_point_hours (
         hour             INTEGER NOT NULL,
         asset_id         TEXT NOT NULL,
         sensor_id        TEXT NOT NULL,
         code             TEXT NOT NULL,
         activations      INTEGER NOT NULL,
         fleeting         INTEGER NOT NULL,
         chatter_episodes INTEGER NOT NULL,
         PRIMARY KEY (hour, asset_id, sensor_id, code)
     ) STRICT, WITHOUT ROWID;",
    // 24: a dead letter's reason is one of `DeadLetterReason`'s. Every row is kept; one
    // with a reason outside the vocabulary (none was ever written) would become
    // `invalid`, its old reason first in its detail.
    "CREATE TABLE dead_letters_v24 (
         id           INTEGER PRIMARY KEY,
         received_at  INTEGER NOT NULL,
         topic        TEXT NOT NULL,
         payload      BLOB NOT NULL,
         reason       TEXT NOT NULL CHECK (reason IN ('malformed', 'oversized', 'invalid', 'unknown_asset', 'unknown_sensor', 'unmatched_clear', 'conflict', 'retired', 'unsupported', 'failed', 'not_born', 'unknown_alias')),
         detail       TEXT NOT NULL,
         replayed_at  INTEGER,
         replayed_by  TEXT,
         content_hash BLOB,
         times_seen   INTEGER NOT NULL DEFAULT 1,
         last_seen_at INTEGER NOT NULL DEFAULT 0
     ) STRICT;
     INSERT INTO dead_letters_v24
         SELECT id, received_at, topic, payload,
                CASE WHEN reason IN ('malformed', 'oversized', 'invalid', 'unknown_asset', 'unknown_sensor', 'unmatched_clear', 'conflict', 'retired', 'unsupported', 'failed', 'not_born', 'unknown_alias') THEN reason ELSE 'invalid' END,
                CASE WHEN reason IN ('malformed', 'oversized', 'invalid', 'unknown_asset', 'unknown_sensor', 'unmatched_clear', 'conflict', 'retired', 'unsupported', 'failed', 'not_born', 'unknown_alias') THEN detail ELSE reason || ': ' || detail END,
                replayed_at, replayed_by, content_hash, times_seen, last_seen_at
         FROM dead_letters;
     DROP TABLE dead_letters;
     ALTER TABLE dead_letters_v24 RENAME TO dead_letters;
     CREATE INDEX dead_letters_received ON dead_letters(received_at);
     CREATE UNIQUE INDEX dead_letters_content ON dead_letters(content_hash) WHERE content_hash IS NOT NULL;
     CREATE INDEX dead_letters_last_seen ON dead_letters(last_seen_at);",
    // 25: the summary's attention ranking reads assets through this index; with
    // `retired_at` in it (the partial index's own condition) the index covers the read
    // and no row is looked up per asset in alarm (get_system_summary at 1,000 active
    // alarms: p50 1.80 -> 1.59 ms, p99 2.16 -> 1.78 ms; docs/src/performance.md, bench tools).
    "DROP INDEX IF EXISTS assets_attention;
     CREATE INDEX assets_attention ON assets(id, status, criticality, last_maintenance_on, retired_at)
         WHERE retired_at IS NULL;",
    // 26: the figures' cache names a point by an id of its own dictionary, not by its
    // three names in every row: a week of a large utility reads 28,000 rows and lists a
    // few dozen points (get_alarm_kpis over 7 days at scale 1000: p50 46 -> 6.6 ms, p99 69 -> 10.9 ms). The
    // cache is derived from the journal; it is emptied and housekeeping fills it again.
    "DROP TABLE alarm_kpi_point_hours;
     DELETE FROM alarm_kpi_hours;
     DELETE FROM alarm_kpi_periods;
     CREATE TABLE alarm_kpi_points (
         id        INTEGER PRIMARY KEY,
         asset_id  TEXT NOT NULL,
         sensor_id TEXT NOT NULL,
         code      TEXT NOT NULL,
         UNIQUE (asset_id, sensor_id, code)
     ) STRICT;
     CREATE TABLE alarm_kpi_point_hours (
         hour             INTEGER NOT NULL,
         point            INTEGER NOT NULL REFERENCES alarm_kpi_points(id),
         activations      INTEGER NOT NULL,
         fleeting         INTEGER NOT NULL,
         chatter_episodes INTEGER NOT NULL,
         PRIMARY KEY (hour, point)
     ) STRICT, WITHOUT ROWID;",
    // 27: users from the site's directory (`accounts::directory`) beside local ones:
    // where a user comes from, their entry's DN, and where each session came from.
    // A directory user's password is the directory's: their password_hash is empty.
    "ALTER TABLE users ADD COLUMN source TEXT NOT NULL DEFAULT 'local' CHECK (source IN ('local', 'directory'));
     ALTER TABLE users ADD COLUMN directory_dn TEXT;
     ALTER TABLE sessions ADD COLUMN source TEXT NOT NULL DEFAULT 'local' CHECK (source IN ('local', 'directory'));",
    // 28: OPC UA (`opcua`). A sensor's node, by namespace URI (`nsu=...;s=...`); and
    // each Alarms & Conditions condition the server reported, with the twin's alarm
    // point it is active on, so that a condition moving from High to HighHigh, or
    // returning, clears the point it was on; with its last event's id, which an
    // acknowledgement passed on to the server names (`opcua.acknowledge`), and each
    // such acknowledgement's result.
    "ALTER TABLE sensors ADD COLUMN opcua_node TEXT;
     CREATE INDEX sensors_opcua_node ON sensors (opcua_node) WHERE opcua_node IS NOT NULL;
     CREATE TABLE opcua_conditions (
         condition  TEXT PRIMARY KEY,
         asset_id   TEXT NOT NULL,
         sensor_id  TEXT,
         code       TEXT NOT NULL,
         active     INTEGER NOT NULL,
         changed_at INTEGER NOT NULL,
         event_id   TEXT
     ) STRICT;
     CREATE TABLE opcua_acks (
         alarm_event_id INTEGER PRIMARY KEY REFERENCES alarm_events(id),
         at             INTEGER NOT NULL,
         result         TEXT NOT NULL
     ) STRICT;",
    // 29: an asset's OPC UA object, by namespace URI: a condition whose SourceNode is
    // the equipment object (Kepware, Ignition, asyncua report limit alarms so) lands on
    // the asset whose object it is.
    "ALTER TABLE assets ADD COLUMN opcua_node TEXT;
     CREATE INDEX assets_opcua_node ON assets (opcua_node) WHERE opcua_node IS NOT NULL;",
    // 30: one run's note covers the alarms grouped with its lead: theirs is a record
    // pointing at the lead's (published once), not a second copy sent out.
    "ALTER TABLE notes ADD COLUMN covered_by INTEGER REFERENCES notes(id);
     CREATE INDEX notes_covered_by ON notes (covered_by) WHERE covered_by IS NOT NULL;",
    // 31: how the plant's assets act on each other (plant files' connections), cause
    // first, for the episodes' initiator; retired, not deleted, like the plant's rows.
    "CREATE TABLE asset_connections (
         from_asset TEXT NOT NULL REFERENCES assets(id),
         kind       TEXT NOT NULL CHECK (kind IN ('feeds', 'powers', 'supplies_air', 'controls')),
         to_asset   TEXT NOT NULL REFERENCES assets(id),
         retired_at INTEGER,
         PRIMARY KEY (from_asset, kind, to_asset)
     ) STRICT, WITHOUT ROWID;
     CREATE INDEX asset_connections_to ON asset_connections (to_asset);",
    // 32: alarm episodes (`episodes`): the activations that belong together, kept as
    // they arrive, each member linked; times in ms; the ranking of the initiator's
    // candidates with their evidence as JSON; each episode's points at their first
    // activation (what a new activation is tied against: a flood's repeats are not read). And the consequential pairs housekeeping
    // learns from the journal, which the grouping and the ranking read.
    "CREATE TABLE episodes (
         id              INTEGER PRIMARY KEY,
         opened_ms       INTEGER NOT NULL,
         last_ms         INTEGER NOT NULL,
         closed_at       INTEGER,
         points          INTEGER NOT NULL,
         activations     INTEGER NOT NULL,
         initiator_alarm INTEGER REFERENCES alarms(id),
         ranking         TEXT NOT NULL
     ) STRICT;
     CREATE INDEX episodes_open ON episodes (last_ms) WHERE closed_at IS NULL;
     CREATE TABLE episode_points (
         episode_id  INTEGER NOT NULL REFERENCES episodes(id),
         asset_id    TEXT NOT NULL,
         sensor_id   TEXT,
         code        TEXT NOT NULL,
         first_alarm INTEGER NOT NULL REFERENCES alarms(id),
         first_ms    INTEGER NOT NULL
     ) STRICT;
     CREATE UNIQUE INDEX episode_points_point ON episode_points (episode_id, asset_id, coalesce(sensor_id, ''), code);
     ALTER TABLE alarms ADD COLUMN episode_id INTEGER REFERENCES episodes(id);
     CREATE INDEX alarms_episode ON alarms (episode_id) WHERE episode_id IS NOT NULL;
     CREATE TABLE alarm_pairs (
         first_asset       TEXT NOT NULL,
         first_sensor      TEXT,
         first_code        TEXT NOT NULL,
         then_asset        TEXT NOT NULL,
         then_sensor       TEXT,
         then_code         TEXT NOT NULL,
         support           INTEGER NOT NULL,
         first_activations INTEGER NOT NULL,
         confidence        REAL NOT NULL,
         lift              REAL NOT NULL,
         lag_median_s      REAL NOT NULL,
         lag_p90_s         REAL NOT NULL,
         mined_ms          INTEGER NOT NULL
     ) STRICT;",
    // 33: one note per episode: a triage note that carries its episode, revised in
    // place as the episode grows (revision, when, at how many points); its members'
    // records point at it through covered_by. And each episode point's activations.
    "ALTER TABLE notes ADD COLUMN episode_id INTEGER REFERENCES episodes(id);
     ALTER TABLE notes ADD COLUMN revision INTEGER NOT NULL DEFAULT 1;
     ALTER TABLE notes ADD COLUMN revised_at INTEGER;
     ALTER TABLE notes ADD COLUMN episode_points INTEGER;
     CREATE UNIQUE INDEX notes_one_per_episode ON notes (episode_id) WHERE episode_id IS NOT NULL;
     -- When twinops recognised the episode (wall clock, ms): how soon its note followed.
     ALTER TABLE episodes ADD COLUMN noticed_ms INTEGER;
     -- A point's activations in its episode, for the timeline, counted as they join.
     ALTER TABLE episode_points ADD COLUMN activations INTEGER NOT NULL DEFAULT 1;
     UPDATE episode_points SET activations = (SELECT count(*) FROM alarms a WHERE a.episode_id = episode_points.episode_id
         AND a.asset_id = episode_points.asset_id AND a.sensor_id IS episode_points.sensor_id AND a.code = episode_points.code);",
    // 34: designed suppression (ISA-18.2, state-based): an alarm change may suppress one
    // point while another is active, proposed from a learned pair and approved like any
    // change (`approvals::alarm_changes`), until a supervisor lifts it. An occurrence
    // raised while one holds is `suppressed` (recorded, not annunciated, not triaged)
    // and carries the change that suppressed it; if still active when its leader
    // returns to normal it is annunciated (`unsuppressed`). Three rebuilds for their
    // CHECKs, run with foreign keys off as 8's was.
    "CREATE TABLE alarm_changes_v34 (
         id              INTEGER PRIMARY KEY,
         kind            TEXT NOT NULL DEFAULT 'settings' CHECK (kind IN ('settings', 'suppression')),
         sensor_id       TEXT REFERENCES sensors(id),
         asset_id        TEXT NOT NULL REFERENCES assets(id),
         code            TEXT NOT NULL,
         level           TEXT CHECK (level IN ('ll', 'l', 'h', 'hh')),
         -- A suppression's leader: the point whose activity suppresses this one.
         while_asset_id  TEXT REFERENCES assets(id),
         while_sensor_id TEXT REFERENCES sensors(id),
         while_code      TEXT,
         current         TEXT NOT NULL,                  -- JSON settings in force when proposed
         proposed        TEXT NOT NULL,                  -- JSON settings (or suppression) proposed
         reason          TEXT NOT NULL,
         evidence        TEXT NOT NULL,                  -- JSON: the replay's comparison, or the pair's figures
         applies         TEXT NOT NULL CHECK (applies IN ('twin', 'scada')),
         status          TEXT NOT NULL CHECK (status IN ('pending_approval', 'approved', 'rejected', 'expired', 'lifted')),
         proposed_by     TEXT NOT NULL,
         run_id          INTEGER,
         proposed_at     INTEGER NOT NULL,
         expires_at      INTEGER NOT NULL,
         decided_by      TEXT,
         decided_at      INTEGER,
         decision_reason TEXT,
         lifted_by       TEXT,
         lifted_at       INTEGER,
         lift_reason     TEXT,
         CHECK (CASE kind WHEN 'settings' THEN sensor_id IS NOT NULL AND level IS NOT NULL AND while_code IS NULL
                          ELSE level IS NULL AND while_asset_id IS NOT NULL AND while_code IS NOT NULL END),
         CHECK ((status = 'lifted') = (lifted_at IS NOT NULL))
     ) STRICT;
     INSERT INTO alarm_changes_v34 (id, sensor_id, asset_id, code, level, current, proposed, reason, evidence, applies,
                                    status, proposed_by, run_id, proposed_at, expires_at, decided_by, decided_at,
                                    decision_reason)
         SELECT id, sensor_id, asset_id, code, level, current, proposed, reason, evidence, applies, status, proposed_by,
                run_id, proposed_at, expires_at, decided_by, decided_at, decision_reason FROM alarm_changes;
     DROP TABLE alarm_changes;
     ALTER TABLE alarm_changes_v34 RENAME TO alarm_changes;
     CREATE UNIQUE INDEX alarm_changes_pending ON alarm_changes(sensor_id, level) WHERE status = 'pending_approval';
     CREATE INDEX alarm_changes_status ON alarm_changes(status, proposed_at);
     -- Read on every new occurrence: is its point suppressed by design, and by which leader?
     CREATE INDEX alarm_changes_suppressing ON alarm_changes(asset_id, code)
         WHERE kind = 'suppression' AND status = 'approved';
     -- Read when an occurrence returns to normal: does it lead a suppression?
     CREATE INDEX alarm_changes_leading ON alarm_changes(while_asset_id, while_code)
         WHERE kind = 'suppression' AND status = 'approved';
     CREATE TABLE alarms_v34 (
         id              INTEGER PRIMARY KEY,
         event_id        TEXT NOT NULL UNIQUE,
         asset_id        TEXT NOT NULL REFERENCES assets(id),
         sensor_id       TEXT REFERENCES sensors(id),
         code            TEXT NOT NULL,
         severity        TEXT NOT NULL CHECK (severity IN ('low', 'medium', 'high', 'critical')),
         state           TEXT NOT NULL CHECK (state IN
                           ('unacknowledged', 'acknowledged', 'rtn_unacknowledged', 'cleared',
                            'shelved', 'out_of_service', 'suppressed')),
         message         TEXT NOT NULL,
         value           REAL,
         threshold       REAL,
         raised_at       INTEGER NOT NULL,
         last_raised_at  INTEGER NOT NULL,
         reraise_count   INTEGER NOT NULL DEFAULT 0,
         acked_at        INTEGER,
         acked_by        TEXT,
         cleared_at      INTEGER,
         shelved_until   INTEGER,
         triage_job      INTEGER REFERENCES triage_jobs(id),
         episode_id      INTEGER REFERENCES episodes(id),
         -- The designed suppression it was raised under (kept once it is annunciated).
         suppressed_by   INTEGER REFERENCES alarm_changes(id)
     ) STRICT;
     INSERT INTO alarms_v34 (id, event_id, asset_id, sensor_id, code, severity, state, message, value, threshold,
                             raised_at, last_raised_at, reraise_count, acked_at, acked_by, cleared_at, shelved_until,
                             triage_job, episode_id)
         SELECT id, event_id, asset_id, sensor_id, code, severity, state, message, value, threshold, raised_at,
                last_raised_at, reraise_count, acked_at, acked_by, cleared_at, shelved_until, triage_job, episode_id
         FROM alarms;
     DROP TABLE alarms;
     ALTER TABLE alarms_v34 RENAME TO alarms;
     CREATE INDEX alarms_asset ON alarms(asset_id, raised_at);
     CREATE INDEX alarms_raised ON alarms(raised_at);
     CREATE INDEX alarms_state ON alarms(state);
     CREATE INDEX alarms_active ON alarms(raised_at) WHERE cleared_at IS NULL;
     CREATE UNIQUE INDEX alarms_open_point ON alarms(asset_id, coalesce(sensor_id, ''), code) WHERE cleared_at IS NULL;
     CREATE INDEX alarms_triage_job ON alarms(triage_job) WHERE triage_job IS NOT NULL;
     CREATE INDEX alarms_active_asset ON alarms(asset_id, severity, state) WHERE cleared_at IS NULL;
     CREATE INDEX alarms_cleared ON alarms(cleared_at) WHERE cleared_at IS NOT NULL;
     CREATE INDEX alarms_episode ON alarms (episode_id) WHERE episode_id IS NOT NULL;
     CREATE INDEX alarms_suppressed_by ON alarms (suppressed_by) WHERE suppressed_by IS NOT NULL;
     CREATE TRIGGER alarms_stats_insert AFTER INSERT ON alarms WHEN NEW.cleared_at IS NULL BEGIN
         INSERT INTO active_alarm_stats (asset_id, n, weight, unacked)
         VALUES (NEW.asset_id, 1, CASE NEW.severity WHEN 'critical' THEN 27 WHEN 'high' THEN 9 WHEN 'medium' THEN 3 ELSE 1 END,
                 NEW.state = 'unacknowledged')
         ON CONFLICT (asset_id) DO UPDATE SET n = n + excluded.n, weight = weight + excluded.weight,
             unacked = unacked + excluded.unacked;
     END;
     CREATE TRIGGER alarms_stats_update AFTER UPDATE OF asset_id, severity, state, cleared_at ON alarms BEGIN
         UPDATE active_alarm_stats SET n = n - 1,
             weight = weight - CASE OLD.severity WHEN 'critical' THEN 27 WHEN 'high' THEN 9 WHEN 'medium' THEN 3 ELSE 1 END,
             unacked = unacked - (OLD.state = 'unacknowledged')
         WHERE asset_id = OLD.asset_id AND OLD.cleared_at IS NULL;
         INSERT INTO active_alarm_stats (asset_id, n, weight, unacked)
         SELECT NEW.asset_id, 1, CASE NEW.severity WHEN 'critical' THEN 27 WHEN 'high' THEN 9 WHEN 'medium' THEN 3 ELSE 1 END,
                NEW.state = 'unacknowledged'
         WHERE NEW.cleared_at IS NULL
         ON CONFLICT (asset_id) DO UPDATE SET n = n + excluded.n, weight = weight + excluded.weight,
             unacked = unacked + excluded.unacked;
         DELETE FROM active_alarm_stats WHERE asset_id = OLD.asset_id AND n = 0;
     END;
     CREATE TRIGGER alarms_stats_delete AFTER DELETE ON alarms WHEN OLD.cleared_at IS NULL BEGIN
         UPDATE active_alarm_stats SET n = n - 1,
             weight = weight - CASE OLD.severity WHEN 'critical' THEN 27 WHEN 'high' THEN 9 WHEN 'medium' THEN 3 ELSE 1 END,
             unacked = unacked - (OLD.state = 'unacknowledged')
         WHERE asset_id = OLD.asset_id;
         DELETE FROM active_alarm_stats WHERE asset_id = OLD.asset_id AND n = 0;
     END;
     CREATE TABLE alarm_events_v34 (
         id          INTEGER PRIMARY KEY,
         alarm_id    INTEGER NOT NULL REFERENCES alarms(id),
         event_id    TEXT UNIQUE,
         kind        TEXT NOT NULL CHECK (kind IN
                       ('raised', 'reraised', 'cleared', 'acknowledged', 'shelved', 'unshelved',
                        'out_of_service', 'returned_to_service', 'suppressed', 'unsuppressed')),
         at          INTEGER NOT NULL,
         actor       TEXT NOT NULL,
         detail      TEXT,
         raw         BLOB,
         millis      INTEGER NOT NULL DEFAULT 0
     ) STRICT;
     INSERT INTO alarm_events_v34 (id, alarm_id, event_id, kind, at, actor, detail, raw, millis)
         SELECT id, alarm_id, event_id, kind, at, actor, detail, raw, millis FROM alarm_events;
     DROP TABLE alarm_events;
     ALTER TABLE alarm_events_v34 RENAME TO alarm_events;
     CREATE INDEX alarm_events_alarm ON alarm_events(alarm_id, at);
     CREATE INDEX alarm_events_at ON alarm_events(at, millis);
     CREATE INDEX alarm_events_service ON alarm_events(at)
         WHERE kind IN ('shelved', 'unshelved', 'out_of_service', 'returned_to_service');
     CREATE TRIGGER alarm_events_append_only_update BEFORE UPDATE ON alarm_events
     BEGIN SELECT RAISE(ABORT, 'alarm_events is an append-only journal'); END;
     CREATE TRIGGER alarm_events_append_only_delete BEFORE DELETE ON alarm_events
     BEGIN SELECT RAISE(ABORT, 'alarm_events is an append-only journal'); END;",
    // 35: a redundant pair. The notes the other node published, heard on the notes
    // topic and keyed by their lead occurrence's event id, wait here until this node
    // has that occurrence, and are then kept as its note, marked with the node that
    // wrote it (its run is in that node's journal, not this one's).
    "CREATE TABLE peer_notes (
         event_id   TEXT PRIMARY KEY,
         node       TEXT NOT NULL,
         revision   INTEGER NOT NULL,
         note       TEXT NOT NULL,
         heard_at   INTEGER NOT NULL
     ) STRICT;
     ALTER TABLE notes ADD COLUMN from_node TEXT;",
    // 36: a redundant pair's decisions, as applied here from the pair's log: each once
    // (a redelivery answers as the first time), with who made it where and when.
    "CREATE TABLE decisions (
         id          TEXT PRIMARY KEY,
         node        TEXT NOT NULL,
         kind        TEXT NOT NULL,
         args        TEXT NOT NULL,
         actor       TEXT NOT NULL,
         at          INTEGER NOT NULL,
         applied_at  INTEGER NOT NULL,
         status      INTEGER NOT NULL,
         body        TEXT NOT NULL
     ) STRICT;",
    // 37: the decisions waiting here for an occurrence that has not arrived yet (202),
    // looked at every second.
    "CREATE INDEX decisions_waiting ON decisions (kind) WHERE status = 202;",
    // 38: an alarm change proposed through a redundant pair's decision log is named on
    // both nodes by that decision's id (local ids differ).
    "ALTER TABLE alarm_changes ADD COLUMN uid TEXT;
     CREATE UNIQUE INDEX alarm_changes_uid ON alarm_changes (uid);",
    // 39: applied decisions older than a month are pruned; how many were, so that a
    // node's progress (decisions applied) still counts them.
    "CREATE TABLE decisions_pruned (
         id INTEGER PRIMARY KEY CHECK (id = 1),
         n  INTEGER NOT NULL
     ) STRICT;
     CREATE INDEX decisions_applied_at ON decisions (applied_at);",
    // 40: an alarm change made on a node alone is named as one made through a pair's
    // log is (`alarm_changes.uid`), from its id and time, which a copy of the twin
    // keeps: a pair formed from this node and a copy of it decides it through its log.
    "UPDATE alarm_changes SET uid = 'local-' || id || '-' || proposed_at WHERE uid IS NULL;",
];

/// The schema version this build writes.
pub const SCHEMA_VERSION: i64 = MIGRATIONS.len() as i64;

/// Applies every migration the database has not seen, all in one transaction.
///
/// A table rebuild (create, copy, drop, rename) must run with foreign keys off, and
/// that pragma is ignored inside a transaction: so they are off around it, checked
/// with `foreign_key_check` before the commit, and restored as they were.
pub fn migrate(conn: &mut Connection, path: &Path) -> Result<(), StoreError> {
    let enforced: bool = conn.pragma_query_value(None, "foreign_keys", |row| row.get(0))?;
    conn.pragma_update(None, "foreign_keys", false)?;
    let result = migrate_in_one_transaction(conn, path);
    conn.pragma_update(None, "foreign_keys", enforced)?;
    result
}

fn migrate_in_one_transaction(conn: &mut Connection, path: &Path) -> Result<(), StoreError> {
    let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
    let found: i64 = tx.pragma_query_value(None, "user_version", |row| row.get(0))?;
    if found > SCHEMA_VERSION {
        return Err(StoreError::TooNew { path: path.display().to_string(), found, supported: SCHEMA_VERSION });
    }
    if found == SCHEMA_VERSION {
        // Nothing to do; the check below reads every reference (2 s on a year's journal).
        return Ok(());
    }
    for sql in &MIGRATIONS[found as usize..] {
        tx.execute_batch(sql)?;
    }
    let broken: Option<String> = tx
        .query_row(
            "SELECT \"table\" || ' row ' || rowid || ' -> ' || parent FROM pragma_foreign_key_check LIMIT 1",
            [],
            |r| r.get(0),
        )
        .optional()?;
    if let Some(broken) = broken {
        return Err(StoreError::Migration(format!("a reference no longer resolves after migrating: {broken}")));
    }
    tx.pragma_update(None, "user_version", SCHEMA_VERSION)?;
    tx.commit()?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A database of the release before the open twin (schema 7) holding today's demo
    /// plant upgrades with every row of every table kept, its references whole, and the
    /// tools answer on it as on a database made new.
    #[test]
    fn a_database_of_the_previous_release_upgrades_with_every_row() {
        use crate::domain::parse_time;
        let dir = tempfile::TempDir::new().unwrap();
        let (new_path, old_path) = (dir.path().join("new.db"), dir.path().join("old.db"));
        let store = crate::store::Store::open(&new_path).unwrap();
        let seed_dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("seed");
        let end = parse_time("2026-11-30T12:00:00Z").unwrap();
        crate::seed::seed(&store, &crate::seed::SeedOptions { dir: seed_dir, scale: 1, end, days: 1 }).unwrap();
        drop(store);

        let old = Connection::open(&old_path).unwrap();
        for sql in &MIGRATIONS[..7] {
            old.execute_batch(sql).unwrap();
        }
        old.pragma_update(None, "user_version", 7).unwrap();
        old.execute("ATTACH ?1 AS cur", [new_path.to_str().unwrap()]).unwrap();
        let tables = table_columns(&old, "main");
        for (table, columns) in &tables {
            let cols = columns.join(", ");
            // The release before kept readings to the second.
            let from = if table == "readings" { "sensor_key, ts / 1000, value".to_string() } else { cols.clone() };
            old.execute_batch(&format!("INSERT OR REPLACE INTO main.{table} ({cols}) SELECT {from} FROM cur.{table}"))
                .unwrap();
        }
        // Its triggers journalled the work orders as they were copied: keep the original journal.
        old.execute_batch("DELETE FROM main.work_order_changes; INSERT INTO main.work_order_changes SELECT * FROM cur.work_order_changes; DETACH cur").unwrap();
        drop(old);

        let upgraded = crate::store::Store::open(&old_path).unwrap();
        drop(upgraded);
        let check = Connection::open(&old_path).unwrap();
        assert_eq!(check.pragma_query_value(None, "user_version", |r| r.get::<_, i64>(0)).unwrap(), SCHEMA_VERSION);
        check.execute("ATTACH ?1 AS cur", [new_path.to_str().unwrap()]).unwrap();
        let mut rows = 0;
        for (table, columns) in &tables {
            let cols = columns.join(", ");
            let count = |sql: String| check.query_row(&sql, [], |r| r.get::<_, i64>(0)).unwrap();
            let differ = count(format!(
                "SELECT count(*) FROM (SELECT {cols} FROM main.{table} EXCEPT SELECT {cols} FROM cur.{table})"
            )) + count(format!(
                "SELECT count(*) FROM (SELECT {cols} FROM cur.{table} EXCEPT SELECT {cols} FROM main.{table})"
            ));
            assert_eq!(differ, 0, "{table} differs after the upgrade");
            assert_eq!(
                count(format!("SELECT count(*) FROM main.{table}")),
                count(format!("SELECT count(*) FROM cur.{table}")),
                "{table}"
            );
            rows += count(format!("SELECT count(*) FROM main.{table}"));
        }
        assert!(rows > 80_000, "the copy held the plant: {rows} rows");
        let broken: i64 = check.query_row("SELECT count(*) FROM pragma_foreign_key_check", [], |r| r.get(0)).unwrap();
        assert_eq!(broken, 0);
        // The release before had no master alarm database: the site imports its sheet
        // after the upgrade, as the demo's seed did.
        check
            .execute_batch(
                "INSERT INTO main.alarm_points SELECT * FROM cur.alarm_points;
                 INSERT INTO main.alarm_point_changes SELECT * FROM cur.alarm_point_changes; DETACH cur",
            )
            .unwrap();
        drop(check);

        let (before, after) = (tool_answers(&new_path, end), tool_answers(&old_path, end));
        assert!(!before[0].contains("No asset"), "{}", before[0]);
        assert_eq!(before, after, "the tools answer the same on the upgraded database");
    }

    /// What five read tools answer on the database at `path`, as of `end`.
    fn tool_answers(path: &Path, end: crate::domain::Timestamp) -> [String; 5] {
        let store = crate::store::Store::open(path).unwrap();
        let docs = crate::rag::DocIndex::new();
        [
            ("get_asset_details", serde_json::json!({"asset_id": "pump-007"})),
            ("list_alarms", serde_json::json!({"last_hours": 24})),
            ("get_sensor_history", serde_json::json!({"sensor_id": "PUMP-004.PRESS-SUC", "hours": 24})),
            ("list_assets", serde_json::json!({"kind": "motor"})),
            ("get_system_summary", serde_json::json!({})),
        ]
        .map(|(name, args)| {
            let caller = crate::approvals::Proposer::Run(1);
            crate::tools::with_context(&store, &docs, end, caller, |ctx| crate::tools::call(ctx, name, args).content)
                .unwrap()
        })
    }

    /// Each table of a schema with its columns, in creation order.
    fn table_columns(conn: &Connection, schema: &str) -> Vec<(String, Vec<String>)> {
        let mut stmt = conn
            .prepare(&format!("SELECT name FROM {schema}.sqlite_schema WHERE type = 'table' AND name NOT LIKE 'sqlite_%' ORDER BY rowid"))
            .unwrap();
        let tables: Vec<String> = stmt.query_map([], |r| r.get(0)).unwrap().map(Result::unwrap).collect();
        tables
            .into_iter()
            .map(|t| {
                let mut stmt = conn.prepare("SELECT name FROM pragma_table_info(?1, ?2)").unwrap();
                let cols = stmt.query_map([&t, schema], |r| r.get(0)).unwrap().map(Result::unwrap).collect();
                (t, cols)
            })
            .collect()
    }

    /// Migration 24 keeps every dead letter, takes every reason of `DeadLetterReason`, and
    /// refuses any other; a row with a reason from outside the vocabulary keeps it in its
    /// detail.
    #[test]
    fn dead_letter_reasons_are_the_vocabulary_and_every_row_is_kept() {
        use crate::domain::DeadLetterReason;
        let mut conn = Connection::open_in_memory().unwrap();
        for sql in &MIGRATIONS[..23] {
            conn.execute_batch(sql).unwrap();
        }
        conn.pragma_update(None, "user_version", 23).unwrap();
        let insert = "INSERT INTO dead_letters (received_at, last_seen_at, topic, payload, reason, detail)
                      VALUES (1000, 1000, 'scada/alarms', x'7b7d', ?1, 'why')";
        for reason in DeadLetterReason::ALL.iter().map(|r| r.as_str()).chain(["from_elsewhere"]) {
            conn.execute(insert, [reason]).unwrap();
        }
        migrate(&mut conn, Path::new(":memory:")).unwrap();
        let rows: Vec<(String, String)> = conn
            .prepare("SELECT reason, detail FROM dead_letters ORDER BY id")
            .unwrap()
            .query_map([], |r| Ok((r.get(0)?, r.get(1)?)))
            .unwrap()
            .map(Result::unwrap)
            .collect();
        assert_eq!(rows.len(), DeadLetterReason::ALL.len() + 1);
        assert_eq!(rows.last().unwrap(), &("invalid".to_string(), "from_elsewhere: why".to_string()));
        for reason in DeadLetterReason::ALL {
            conn.execute(insert, [reason.as_str()]).unwrap();
        }
        let refused = conn.execute(insert, ["from_elsewhere"]).unwrap_err().to_string();
        assert!(refused.contains("CHECK constraint failed"), "{refused}");
    }

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
