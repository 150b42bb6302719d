-- twinops: the plant twin.
--
-- This file is migration 1, the baseline data model. It is applied once, in one
-- transaction, by `store::migrate`, which then sets PRAGMA user_version = 1.
-- Never edit it after it has shipped: later changes are appended as new migrations
-- in src/store/migrate.rs.
--
-- Conventions: times are INTEGER unix seconds (UTC); ids that people and models type
-- are TEXT in their canonical form (`PUMP-007`, `PUMP-007.VIB-DE`); enumerations are
-- TEXT guarded by CHECK constraints that mirror the enums in src/domain/.

-- ---------------------------------------------------------------------------------
-- The plant
-- ---------------------------------------------------------------------------------

CREATE TABLE sites (
    id          TEXT PRIMARY KEY,
    name        TEXT NOT NULL,
    timezone    TEXT NOT NULL
) STRICT;

CREATE TABLE stations (
    id          TEXT PRIMARY KEY,
    site_id     TEXT NOT NULL REFERENCES sites(id),
    name        TEXT NOT NULL
) STRICT;

CREATE TABLE assets (
    id                  TEXT PRIMARY KEY,            -- PUMP-007
    station_id          TEXT NOT NULL REFERENCES stations(id),
    kind                TEXT NOT NULL CHECK (kind IN
                          ('centrifugal_pump', 'motor', 'valve', 'reservoir')),
    name                TEXT NOT NULL,
    status              TEXT NOT NULL CHECK (status IN
                          ('running', 'standby', 'stopped', 'maintenance', 'fault', 'out_of_service')),
    criticality         TEXT NOT NULL CHECK (criticality IN ('A', 'B', 'C')),
    manufacturer        TEXT NOT NULL,
    model               TEXT NOT NULL,
    machine_class       TEXT,                        -- ISO 10816-3 group, for vibration zones
    rated_power_kw      REAL,
    installed_on        TEXT NOT NULL,               -- YYYY-MM-DD
    last_maintenance_on TEXT,                        -- YYYY-MM-DD
    drives              TEXT REFERENCES assets(id)   -- a motor's pump
) STRICT;
CREATE INDEX assets_station ON assets(station_id);
CREATE INDEX assets_kind ON assets(kind);
CREATE INDEX assets_status ON assets(status);

-- `key` is the compact integer the readings table is keyed on; `id` is what people type.
CREATE TABLE sensors (
    key         INTEGER PRIMARY KEY,
    id          TEXT NOT NULL UNIQUE,                -- PUMP-007.VIB-DE
    asset_id    TEXT NOT NULL REFERENCES assets(id),
    kind        TEXT NOT NULL CHECK (kind IN
                  ('vibration', 'bearing_temperature', 'flow', 'discharge_pressure',
                   'suction_pressure', 'motor_current', 'winding_temperature',
                   'valve_position', 'level')),
    description TEXT NOT NULL,
    unit        TEXT NOT NULL,
    limit_ll    REAL,
    limit_l     REAL,
    limit_h     REAL,
    limit_hh    REAL,
    deadband    REAL NOT NULL DEFAULT 0,
    alarm_prefix TEXT                                -- alarm codes are PREFIX-HI, PREFIX-HIHI, ...
) STRICT;
CREATE INDEX sensors_asset ON sensors(asset_id);

CREATE TABLE readings (
    sensor_key  INTEGER NOT NULL,
    ts          INTEGER NOT NULL,
    value       REAL NOT NULL,
    PRIMARY KEY (sensor_key, ts)
) STRICT, WITHOUT ROWID;

-- Hourly rollups of `readings`, written in the same transaction as the readings they
-- summarise (src/store/readings.rs), so long windows read 168 rows instead of 10,080.
-- Sums are exact; `sum_t*` are over the sample's offset into the hour, in hours, so a
-- trend over any window can be fitted from them exactly. `n_ll`..`n_hh` count samples
-- beyond each limit in force when the sample was written.
CREATE TABLE readings_hourly (
    sensor_key  INTEGER NOT NULL,
    hour        INTEGER NOT NULL,                    -- unix seconds, a multiple of 3600
    n           INTEGER NOT NULL,
    sum         REAL NOT NULL,
    sum_sq      REAL NOT NULL,
    min         REAL NOT NULL,
    max         REAL NOT NULL,
    sum_t       REAL NOT NULL,
    sum_tt      REAL NOT NULL,
    sum_tv      REAL NOT NULL,
    n_ll        INTEGER NOT NULL,
    n_l         INTEGER NOT NULL,
    n_h         INTEGER NOT NULL,
    n_hh        INTEGER NOT NULL,
    PRIMARY KEY (sensor_key, hour)
) STRICT, WITHOUT ROWID;

CREATE TABLE maintenance_records (
    id            INTEGER PRIMARY KEY,
    asset_id      TEXT NOT NULL REFERENCES assets(id),
    performed_on  TEXT NOT NULL,                    -- YYYY-MM-DD
    kind          TEXT NOT NULL,                    -- preventive, corrective, inspection
    summary       TEXT NOT NULL,
    technician    TEXT NOT NULL
) STRICT;
CREATE INDEX maintenance_asset ON maintenance_records(asset_id, performed_on);

-- ---------------------------------------------------------------------------------
-- Alarms (ISA-18.2). One row per occurrence: a new activation after the condition
-- cleared is a new row; a repeat while active bumps `reraise_count`.
-- ---------------------------------------------------------------------------------

CREATE TABLE alarms (
    id              INTEGER PRIMARY KEY,
    event_id        TEXT NOT NULL UNIQUE,            -- the source event that raised it
    asset_id        TEXT NOT NULL REFERENCES assets(id),
    sensor_id       TEXT REFERENCES sensors(id),
    code            TEXT NOT NULL,                   -- VIB-HI
    severity        TEXT NOT NULL CHECK (severity IN ('low', 'medium', 'high', 'critical')),
    state           TEXT NOT NULL CHECK (state IN
                      ('unacknowledged', 'acknowledged', 'rtn_unacknowledged', 'cleared',
                       'shelved', 'out_of_service')),
    message         TEXT NOT NULL,                   -- untrusted text from the source
    value           REAL,
    threshold       REAL,
    raised_at       INTEGER NOT NULL,
    last_raised_at  INTEGER NOT NULL,
    reraise_count   INTEGER NOT NULL DEFAULT 0,
    acked_at        INTEGER,
    acked_by        TEXT,
    cleared_at      INTEGER,                         -- condition returned to normal
    shelved_until   INTEGER
) STRICT;
CREATE INDEX alarms_asset ON alarms(asset_id, raised_at);
CREATE INDEX alarms_raised ON alarms(raised_at);
CREATE INDEX alarms_state ON alarms(state);
-- Active alarms are read on every summary and alarm list: a small index of their own,
-- in the order lists show them.
CREATE INDEX alarms_active ON alarms(raised_at) WHERE cleared_at IS NULL;
-- At most one open occurrence per alarm point.
CREATE UNIQUE INDEX alarms_open_point
    ON alarms(asset_id, coalesce(sensor_id, ''), code) WHERE cleared_at IS NULL;

CREATE TABLE alarm_events (
    id          INTEGER PRIMARY KEY,
    alarm_id    INTEGER NOT NULL REFERENCES alarms(id),
    event_id    TEXT UNIQUE,                         -- source event, NULL for operator actions
    kind        TEXT NOT NULL CHECK (kind IN
                  ('raised', 'reraised', 'cleared', 'acknowledged', 'shelved', 'unshelved',
                   'out_of_service', 'returned_to_service')),
    at          INTEGER NOT NULL,
    actor       TEXT NOT NULL,                       -- 'scada' or a user name
    detail      TEXT
) STRICT;
CREATE INDEX alarm_events_alarm ON alarm_events(alarm_id, at);
CREATE TRIGGER alarm_events_append_only_update BEFORE UPDATE ON alarm_events
BEGIN SELECT RAISE(ABORT, 'alarm_events is an append-only journal'); END;
CREATE TRIGGER alarm_events_append_only_delete BEFORE DELETE ON alarm_events
BEGIN SELECT RAISE(ABORT, 'alarm_events is an append-only journal'); END;

-- ---------------------------------------------------------------------------------
-- Work orders. Only src/approvals/ writes this table.
-- ---------------------------------------------------------------------------------

CREATE TABLE work_orders (
    id              INTEGER PRIMARY KEY,
    idempotency_key TEXT NOT NULL UNIQUE,            -- names the intent, not the attempt
    asset_id        TEXT NOT NULL REFERENCES assets(id),
    alarm_id        INTEGER REFERENCES alarms(id),
    action          TEXT NOT NULL,
    priority        TEXT NOT NULL CHECK (priority IN ('emergency', 'urgent', 'normal', 'low')),
    title           TEXT NOT NULL,
    justification   TEXT NOT NULL,
    evidence        TEXT NOT NULL DEFAULT '[]',      -- JSON array of citation keys
    status          TEXT NOT NULL CHECK (status IN
                      ('pending_approval', 'approved', 'rejected', 'expired', 'dispatched')),
    proposed_by     TEXT NOT NULL,                   -- 'agent:run/<id>' or a user name
    run_id          INTEGER,
    proposed_at     INTEGER NOT NULL,
    expires_at      INTEGER,
    decided_by      TEXT,
    decided_at      INTEGER,
    decision_reason TEXT,
    dispatched_at   INTEGER
) STRICT;
CREATE INDEX work_orders_asset ON work_orders(asset_id, status);
CREATE INDEX work_orders_status ON work_orders(status, proposed_at);

-- ---------------------------------------------------------------------------------
-- Triage and the agent's audit trail
-- ---------------------------------------------------------------------------------

CREATE TABLE triage_jobs (
    id           INTEGER PRIMARY KEY,
    alarm_id     INTEGER NOT NULL UNIQUE REFERENCES alarms(id),
    state        TEXT NOT NULL CHECK (state IN ('queued', 'running', 'done', 'failed')),
    priority     INTEGER NOT NULL,                   -- lower runs first
    mode         TEXT NOT NULL DEFAULT 'agent' CHECK (mode IN ('agent', 'rules')),
    enqueued_at  INTEGER NOT NULL,
    started_at   INTEGER,
    finished_at  INTEGER,
    attempts     INTEGER NOT NULL DEFAULT 0,
    last_error   TEXT
) STRICT;
CREATE INDEX triage_jobs_next ON triage_jobs(priority, enqueued_at) WHERE state = 'queued';

CREATE TABLE agent_runs (
    id           INTEGER PRIMARY KEY,
    profile      TEXT NOT NULL,                      -- triage, chat, handover
    trigger      TEXT NOT NULL,                      -- 'alarm:<id>', 'user:<name>', 'schedule'
    alarm_id     INTEGER REFERENCES alarms(id),
    outcome      TEXT CHECK (outcome IN ('final', 'budget_exceeded', 'degraded', 'failed')),
    model        TEXT,
    started_at   INTEGER NOT NULL,
    finished_at  INTEGER,
    tokens_in    INTEGER NOT NULL DEFAULT 0,
    tokens_out   INTEGER NOT NULL DEFAULT 0,
    error        TEXT
) STRICT;
CREATE INDEX agent_runs_alarm ON agent_runs(alarm_id);

CREATE TABLE agent_steps (
    run_id       INTEGER NOT NULL REFERENCES agent_runs(id),
    seq          INTEGER NOT NULL,
    kind         TEXT NOT NULL CHECK (kind IN ('model_call', 'tool_call', 'guardrail')),
    name         TEXT NOT NULL,                      -- provider, tool or guardrail name
    arguments    TEXT,
    result       TEXT,
    is_error     INTEGER NOT NULL DEFAULT 0,
    latency_us   INTEGER NOT NULL DEFAULT 0,
    tokens_in    INTEGER,
    tokens_out   INTEGER,
    at           INTEGER NOT NULL,
    PRIMARY KEY (run_id, seq)
) STRICT, WITHOUT ROWID;

CREATE TABLE notes (
    id           INTEGER PRIMARY KEY,
    kind         TEXT NOT NULL CHECK (kind IN ('triage', 'handover', 'chat')),
    alarm_id     INTEGER REFERENCES alarms(id),
    run_id       INTEGER REFERENCES agent_runs(id),
    body         TEXT NOT NULL,                      -- JSON, validated against the note schema
    flags        TEXT NOT NULL DEFAULT '[]',         -- JSON array, e.g. ["ungrounded"]
    created_at   INTEGER NOT NULL
) STRICT;
CREATE UNIQUE INDEX notes_one_per_alarm ON notes(alarm_id) WHERE kind = 'triage';

-- ---------------------------------------------------------------------------------
-- Documentation (RAG)
-- ---------------------------------------------------------------------------------

CREATE TABLE documents (
    id          INTEGER PRIMARY KEY,
    path        TEXT NOT NULL UNIQUE,                -- relative to the indexed folder
    title       TEXT NOT NULL,
    sha256      TEXT NOT NULL,
    indexed_at  INTEGER NOT NULL
) STRICT;

-- A chunk's citation key is `<documents.path>#<seq>`. AUTOINCREMENT: ids are never
-- reused, so a cached search index can tell a replaced chunk from the one before it.
CREATE TABLE chunks (
    id          INTEGER PRIMARY KEY AUTOINCREMENT,
    document_id INTEGER NOT NULL REFERENCES documents(id) ON DELETE CASCADE,
    seq         INTEGER NOT NULL,
    section     TEXT NOT NULL,                       -- heading path below the title, '' for the preamble
    body        TEXT NOT NULL,
    UNIQUE (document_id, seq)
) STRICT;

-- The search index is built in memory from `chunks` (see src/rag/bm25.rs); this
-- counter, bumped in the transaction that changes chunks, tells every process when
-- its copy is stale.
CREATE TABLE rag_generation (
    id          INTEGER PRIMARY KEY CHECK (id = 1),
    generation  INTEGER NOT NULL
) STRICT;
INSERT INTO rag_generation (id, generation) VALUES (1, 0);

-- ---------------------------------------------------------------------------------
-- People and ingest
-- ---------------------------------------------------------------------------------

CREATE TABLE users (
    id            INTEGER PRIMARY KEY,
    name          TEXT NOT NULL UNIQUE,
    password_hash TEXT NOT NULL,                     -- argon2id PHC string
    role          TEXT NOT NULL CHECK (role IN ('viewer', 'operator', 'supervisor', 'admin')),
    created_at    INTEGER NOT NULL,
    disabled      INTEGER NOT NULL DEFAULT 0
) STRICT;

CREATE TABLE sessions (
    token_hash    TEXT PRIMARY KEY,                  -- SHA-256 of the cookie value
    user_id       INTEGER NOT NULL REFERENCES users(id) ON DELETE CASCADE,
    created_at    INTEGER NOT NULL,
    last_seen_at  INTEGER NOT NULL,
    expires_at    INTEGER NOT NULL
) STRICT;
CREATE INDEX sessions_user ON sessions(user_id);

CREATE TABLE dead_letters (
    id           INTEGER PRIMARY KEY,
    received_at  INTEGER NOT NULL,
    topic        TEXT NOT NULL,
    payload      BLOB NOT NULL,
    reason       TEXT NOT NULL,                      -- malformed, oversized, unknown_asset, ...
    detail       TEXT NOT NULL
) STRICT;
CREATE INDEX dead_letters_received ON dead_letters(received_at);
