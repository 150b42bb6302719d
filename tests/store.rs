//! The store's guarantees: read handles cannot write, migrations are idempotent and
//! refuse a newer database, a failed write job leaves nothing behind, documents
//! re-index only when they change, and the seed is deterministic and self-consistent.

mod common;

use common::Plant;
use rusqlite::ErrorCode;
use serde_json::json;
use twinops::domain::Timestamp;
use twinops::rag::{DocIndex, index_dir};
use twinops::seed::{SeedOptions, seed};
use twinops::store::{SCHEMA_VERSION, Store, StoreError};

/// The connection every tool gets is read-only twice over: by open flags and by
/// `query_only`. SQLite itself refuses the write.
#[test]
fn a_write_through_a_tool_handle_fails() {
    let p = Plant::new();
    let db = p.store.read().unwrap();
    let query_only: i64 = db.query_row("PRAGMA query_only", [], |r| r.get(0)).unwrap();
    assert_eq!(query_only, 1);
    for sql in [
        "INSERT INTO work_orders (idempotency_key, asset_id, action, priority, title, justification, status, proposed_by, proposed_at)
         VALUES ('k', 'PUMP-007', 'inspect', 'low', 't', 'j', 'approved', 'model', 0)",
        "UPDATE work_orders SET status = 'approved'",
        "DELETE FROM alarms",
        "CREATE TABLE evil (x)",
    ] {
        let err = db.execute(sql, []).expect_err(sql);
        assert_eq!(err.sqlite_error_code(), Some(ErrorCode::ReadOnly), "{sql}: {err}");
    }
    // Even with query_only switched off, the open flags still refuse.
    db.execute_batch("PRAGMA query_only = OFF").unwrap();
    let err = db.execute("DELETE FROM alarms", []).unwrap_err();
    assert_eq!(err.sqlite_error_code(), Some(ErrorCode::ReadOnly), "{err}");
    assert!(p.count("SELECT count(*) FROM alarms") > 0);
}

#[test]
fn migrations_are_idempotent_and_a_newer_database_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("m.db");
    drop(Store::open(&path).unwrap());
    let store = Store::open(&path).unwrap();
    let (version, tables): (i64, i64) = store
        .read()
        .unwrap()
        .query_row("SELECT (SELECT user_version FROM pragma_user_version), (SELECT count(*) FROM sqlite_schema WHERE type = 'table')", [], |r| {
            Ok((r.get(0)?, r.get(1)?))
        })
        .unwrap();
    assert_eq!(version, SCHEMA_VERSION);
    assert!(tables > 15, "{tables} tables");
    drop(store);

    let raw = rusqlite::Connection::open(&path).unwrap();
    raw.pragma_update(None, "user_version", SCHEMA_VERSION + 1).unwrap();
    drop(raw);
    let err = Store::open(&path).err().expect("a newer database is refused");
    assert!(matches!(err, StoreError::TooNew { .. }), "{err}");
    let msg = err.to_string();
    assert!(
        msg.contains(&format!("schema version {}", SCHEMA_VERSION + 1))
            && msg.contains("newer than this twinops understands"),
        "{msg}"
    );
}

/// A job that fails is rolled back to its savepoint; the writer carries on.
#[test]
fn a_failed_write_job_leaves_nothing_behind() {
    let p = Plant::new();
    let result: Result<(), StoreError> = p.store.writer().call(|c| {
        c.execute("INSERT INTO sites (id, name, timezone) VALUES ('X', 'x', 'UTC')", [])?;
        c.execute("INSERT INTO sites (id, name, timezone) VALUES ('X', 'again', 'UTC')", [])?;
        Ok(())
    });
    assert!(result.is_err());
    assert_eq!(p.count("SELECT count(*) FROM sites WHERE id = 'X'"), 0);
    p.write("INSERT INTO sites (id, name, timezone) VALUES ('Y', 'y', 'UTC')");
    assert_eq!(p.count("SELECT count(*) FROM sites WHERE id = 'Y'"), 1);
    // The alarm journal is append-only, whoever writes.
    let err =
        p.store.writer().call(|c| c.execute("DELETE FROM alarm_events", []).map_err(StoreError::from)).unwrap_err();
    assert!(err.to_string().contains("append-only"), "{err}");
}

/// Re-indexing an unchanged file does nothing; a changed file replaces its chunks,
/// and the search index notices without a restart.
#[test]
fn reindexing_skips_unchanged_files_and_replaces_changed_ones() {
    let p = Plant::new();
    let docs = tempfile::tempdir().unwrap();
    std::fs::create_dir(docs.path().join("sub")).unwrap();
    std::fs::write(docs.path().join("a.md"), "# Alpha\n\n## Strainer\nClean the zorblax strainer weekly.\n").unwrap();
    std::fs::write(docs.path().join("sub/b.md"), "# Beta\n\nNothing here.\n").unwrap();
    let now = Timestamp::now();
    let first = index_dir(&p.store, docs.path(), now).unwrap();
    assert_eq!((first.added, first.updated, first.unchanged), (2, 0, 0));
    let index = DocIndex::new();
    let db = p.store.read().unwrap();
    let hits = index.search(&db, "zorblax", 5).unwrap();
    assert_eq!(hits[0].citation.as_str(), "a.md#0");
    assert_eq!(hits[0].heading, "Alpha > Strainer");

    let generation = || p.count("SELECT generation FROM rag_generation");
    let before = generation();
    let again = index_dir(&p.store, docs.path(), now).unwrap();
    assert_eq!((again.added, again.updated, again.unchanged, again.chunks_written), (0, 0, 2, 0));
    assert_eq!(generation(), before, "nothing changed, nothing to rebuild");

    std::fs::write(docs.path().join("a.md"), "# Alpha\n\n## Strainer\nClean the quuxite strainer daily.\n").unwrap();
    let changed = index_dir(&p.store, docs.path(), now).unwrap();
    assert_eq!((changed.added, changed.updated, changed.unchanged), (0, 1, 1));
    assert_eq!(
        p.count("SELECT count(*) FROM chunks c JOIN documents d ON d.id = c.document_id WHERE d.path = 'a.md'"),
        1
    );
    assert!(index.search(&db, "zorblax", 5).unwrap().iter().all(|h| h.citation.as_str() != "a.md#0"));
    assert_eq!(index.search(&db, "quuxite", 5).unwrap()[0].citation.as_str(), "a.md#0");
    assert_eq!(p.ok("read_doc", json!({"citation": "sub/b.md#0"}))["text"], "Nothing here.");
}

/// The same plant file and end time give the same plant, to the last reading.
#[test]
fn seeding_is_deterministic_and_refuses_a_used_database() {
    let fingerprint = |store: &Store| -> (i64, f64, i64, String) {
        store
            .read()
            .unwrap()
            .query_row(
                "SELECT (SELECT count(*) FROM readings), (SELECT sum(value * (sensor_key % 7 + 1)) FROM readings),
                    (SELECT count(*) FROM alarms), (SELECT group_concat(event_id || state, ',') FROM alarms)",
                [],
                |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?)),
            )
            .unwrap()
    };
    let opts = SeedOptions { dir: common::seed_dir(), scale: 1, end: common::end(), days: 2 };
    let a_dir = tempfile::tempdir().unwrap();
    let a = Store::open(&a_dir.path().join("a.db")).unwrap();
    seed(&a, &opts).unwrap();
    let b_dir = tempfile::tempdir().unwrap();
    let b = Store::open(&b_dir.path().join("b.db")).unwrap();
    seed(&b, &opts).unwrap();
    assert_eq!(fingerprint(&a), fingerprint(&b));
    let err = seed(&a, &opts).unwrap_err().to_string();
    assert!(err.contains("already holds a plant (18 assets)"), "{err}");
}

/// The seeded alarm history is what the readings imply: every alarm's value is the
/// reading at the time it was raised, beyond its set point.
#[test]
fn seeded_alarms_match_the_readings() {
    let p = Plant::new();
    let bad = p.count(
        "SELECT count(*) FROM alarms a JOIN sensors s ON s.id = a.sensor_id
         LEFT JOIN readings r ON r.sensor_key = s.key AND r.ts = a.raised_at * 1000
         WHERE r.value IS NOT a.value
            OR (a.code LIKE '%-HI' OR a.code LIKE '%-HIHI') AND NOT a.value > a.threshold
            OR (a.code LIKE '%-LO' OR a.code LIKE '%-LOLO') AND NOT a.value < a.threshold",
    );
    assert_eq!(bad, 0);
    assert!(p.count("SELECT count(*) FROM alarms WHERE asset_id = 'PUMP-007' AND code = 'VIB-HI'") >= 3);
    assert!(p.count("SELECT count(*) FROM alarms WHERE asset_id = 'PUMP-004' AND code LIKE 'PRESS-SUC-%'") >= 1);
    let journal_gaps = p.count("SELECT count(*) FROM alarms a WHERE NOT EXISTS (SELECT 1 FROM alarm_events e WHERE e.alarm_id = a.id AND e.kind = 'raised')");
    assert_eq!(journal_gaps, 0, "every occurrence has its raise in the journal");
    // Last-maintenance dates are derived from the maintenance records.
    assert_eq!(p.count("SELECT count(*) FROM assets a WHERE last_maintenance_on IS NOT (SELECT max(performed_on) FROM maintenance_records m WHERE m.asset_id = a.id)"), 0);
    common::assert_alarm_stats_agree(&p);
}
