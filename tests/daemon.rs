//! The daemon's core without the transport: messages in (as the MQTT loop hands them
//! over), the alarm lifecycle, dead letters, and the durable triage queue producing one
//! note per occurrence.

mod common;

use std::sync::Arc;

use common::Plant;
use serde_json::json;
use twinops::agent::Agent;
use twinops::alarms::{self, Applied};
use twinops::config::AgentLimits;
use twinops::domain::{AlarmState, Timestamp};
use twinops::ingest;
use twinops::triage::Triage;

fn at(min: i64) -> Timestamp {
    common::end().plus_secs(60 * min)
}

fn alarm(event_id: &str, state: &str, min: i64) -> serde_json::Value {
    json!({
        "type": "alarm", "event_id": event_id, "asset_id": "PUMP-001", "sensor_id": "PUMP-001.BRG-TEMP-DE",
        "code": "BRG-TEMP-HI", "severity": "medium", "state": state, "value": 81.2, "threshold": 80.0,
        "time": at(min).to_rfc3339(), "message": "DE bearing temperature high"
    })
}

/// Ingests one message as received a day after the seeded plant's end, so that no event
/// here is stamped ahead of its receipt.
fn send(p: &Plant, payload: &serde_json::Value) -> ingest::MessageEffect {
    ingest::apply(p.store.writer(), "scada/alarms", payload.to_string().as_bytes(), at(24 * 60), live()).unwrap()
}

/// The policy for events that stand for live ones though received later: none is
/// backfill.
fn live() -> ingest::IngestPolicy {
    let mut policy = ingest::IngestPolicy::default();
    policy.queue.backfill_after_secs = i64::MAX;
    policy
}

/// A new activation is an occurrence with a triage job; a redelivery changes nothing;
/// a repeat while active counts on the occurrence; a clear returns it to normal; a new
/// activation after the clear is a new occurrence.
#[test]
fn occurrences_repeats_duplicates_and_clears() {
    let p = Plant::new();
    let jobs_before = p.count("SELECT count(*) FROM triage_jobs");
    let first = send(&p, &alarm("e1", "raised", 1));
    let Applied::Raised { alarm_id, .. } = first.alarms[0] else { panic!("{first:?}") };
    assert_eq!(p.count("SELECT count(*) FROM triage_jobs") - jobs_before, 1, "enqueued with the occurrence");
    assert_eq!(send(&p, &alarm("e1", "raised", 1)).alarms, [Applied::Duplicate]);
    assert_eq!(send(&p, &alarm("e2", "raised", 2)).alarms, [Applied::Reraised { alarm_id }]);
    assert_eq!(p.count(&format!("SELECT reraise_count FROM alarms WHERE id = {alarm_id}")), 1);
    assert_eq!(p.count("SELECT count(*) FROM triage_jobs") - jobs_before, 1, "a repeat is not triaged again");
    assert_eq!(send(&p, &alarm("e3", "cleared", 3)).alarms, [Applied::Cleared { alarm_id }]);
    let state: AlarmState =
        p.store.read().unwrap().query_row("SELECT state FROM alarms WHERE id = ?1", [alarm_id], |r| r.get(0)).unwrap();
    assert_eq!(state, AlarmState::RtnUnacknowledged);
    let again = send(&p, &alarm("e4", "raised", 4));
    assert!(matches!(again.alarms[0], Applied::Raised { alarm_id: new, .. } if new != alarm_id));
    let journal = p.count(&format!("SELECT count(*) FROM alarm_events WHERE alarm_id = {alarm_id}"));
    assert_eq!(journal, 3, "raised, reraised, cleared");
    common::assert_alarm_stats_agree(&p);
}

/// Bad input goes to dead letters with its reason; good events in the same batch are
/// kept; nothing is lost and nothing crashes.
#[test]
fn bad_input_is_dead_lettered_and_good_input_kept() {
    let p = Plant::new();
    let before = p.count(
        "SELECT count(*) FROM readings_hourly WHERE sensor_key = (SELECT key FROM sensors WHERE id = 'PUMP-001.FLOW')",
    );
    let batch = json!({"events": [
        {"type": "reading", "sensor_id": "PUMP-001.FLOW", "time": at(5).to_rfc3339(), "value": 401.5},
        {"type": "reading", "sensor_id": "PUMP-001.NOPE", "time": at(5).to_rfc3339(), "value": 1.0},
        {"type": "alarm", "event_id": "x1", "asset_id": "PUMP-999", "code": "VIB-HI", "severity": "high", "state": "raised", "time": at(5).to_rfc3339()},
        {"type": "alarm", "event_id": "x2", "asset_id": "PUMP-001", "code": "VIB-HI", "severity": "high", "state": "cleared", "time": at(5).to_rfc3339()},
        {"type": "alarm", "event_id": "x3", "asset_id": "PUMP-001", "code": "VIB HI", "severity": "high", "state": "raised", "time": at(5).to_rfc3339()},
        {"type": "alarm", "event_id": "x4", "asset_id": "PUMP-001", "code": "VIB-HI", "severity": "urgent", "state": "raised", "time": at(5).to_rfc3339()},
        {"type": "alarm", "event_id": "x5", "asset_id": "PUMP-001", "sensor_id": "PUMP-004.FLOW", "code": "FLOW-LO", "severity": "low", "state": "raised", "time": at(5).to_rfc3339()},
        {"type": "reading", "sensor_id": "pump-001.flow", "time": at(6).to_rfc3339(), "value": 402.5},
    ]});
    let effect = send(&p, &batch);
    assert_eq!((effect.readings, effect.dead_letters), (2, 6), "ids are found in any case");
    let reasons: Vec<String> = {
        let db = p.store.read().unwrap();
        let mut stmt = db.prepare("SELECT reason FROM dead_letters ORDER BY id").unwrap();
        stmt.query_map([], |r| r.get(0)).unwrap().collect::<Result<_, _>>().unwrap()
    };
    assert_eq!(reasons, ["invalid", "malformed", "unknown_sensor", "unknown_asset", "unmatched_clear", "invalid"]);
    let other = p.text("SELECT detail FROM dead_letters WHERE payload LIKE '%x5%'");
    assert!(other.contains("sensor_id PUMP-004.FLOW belongs to PUMP-004, not PUMP-001"), "{other}");
    let detail = p.text("SELECT detail FROM dead_letters WHERE reason = 'malformed'");
    assert!(detail.contains("urgent"), "{detail}");
    let kept = p.text("SELECT CAST(payload AS TEXT) FROM dead_letters WHERE reason = 'unknown_sensor'");
    assert_eq!(kept, batch["events"][1].to_string(), "a refused event is kept as it was sent, alone");
    assert!(p.count("SELECT count(*) FROM readings_hourly WHERE sensor_key = (SELECT key FROM sensors WHERE id = 'PUMP-001.FLOW')") >= before);

    for (payload, reason) in [(&b"{not json"[..], "malformed"), (&vec![b'['; 300_000][..], "oversized")] {
        let count = || p.count(&format!("SELECT count(*) FROM dead_letters WHERE reason = '{reason}'"));
        let before = count();
        let e = ingest::apply(p.store.writer(), "scada/alarms", payload, at(6), Default::default()).unwrap();
        assert_eq!(e.dead_letters, 1);
        assert_eq!(count(), before + 1, "{reason}");
    }
    let stored = p.count("SELECT length(payload) FROM dead_letters WHERE reason = 'oversized'");
    assert_eq!(stored, 300_000, "the whole message is kept for inspection");
    // Of a message over 1 MiB, the first MiB.
    let huge = vec![b'x'; 3 * ingest::DEAD_LETTER_BYTES];
    assert_eq!(
        ingest::apply(p.store.writer(), "scada/alarms", &huge, at(7), Default::default()).unwrap().dead_letters,
        1
    );
    let kept = p.count("SELECT length(payload) FROM dead_letters ORDER BY id DESC LIMIT 1");
    let detail = p.text("SELECT detail FROM dead_letters ORDER BY id DESC LIMIT 1");
    assert_eq!(kept as usize, ingest::DEAD_LETTER_BYTES);
    assert!(
        detail.starts_with("3145728 bytes; the limit is 262144") && detail.ends_with("(its first 1048576 bytes kept)"),
        "{detail}"
    );
    // A duplicate reading changes nothing.
    let dup =
        send(&p, &json!({"type": "reading", "sensor_id": "PUMP-001.FLOW", "time": at(5).to_rfc3339(), "value": 401.5}));
    assert_eq!((dup.readings, dup.duplicate_readings, dup.dead_letters), (0, 1, 0));
}

/// A fault in storing one event (here a trigger that refuses one reading) costs that
/// event alone: it becomes a `failed` dead letter with the error, and the other events
/// of its message and the other messages of its batch are kept.
#[test]
fn a_fault_storing_one_event_spares_the_rest_of_the_batch() {
    let p = Plant::new();
    p.write(
        "CREATE TRIGGER refuse_one BEFORE INSERT ON readings WHEN NEW.value = -12.5
         BEGIN SELECT RAISE(ABORT, 'injected storage fault'); END;",
    );
    let reading = |min: i64, value: f64| json!({"type": "reading", "sensor_id": "PUMP-001.FLOW", "time": at(min).to_rfc3339(), "value": value});
    let messages = [
        json!([reading(10, 401.0)]),
        json!([reading(11, 402.0), reading(12, -12.5), reading(13, 403.0)]),
        json!([alarm("f1", "raised", 14), reading(15, 404.0)]),
    ]
    .map(|m| ingest::Message::parse("scada/plant".into(), m.to_string().into_bytes()));
    let effects =
        p.store.writer().call(move |conn| ingest::apply_batch(conn, &messages, at(16), Default::default())).unwrap();
    let summary: Vec<_> = effects.iter().map(|e| (e.readings, e.alarms.len(), e.dead_letters)).collect();
    assert_eq!(summary, [(1, 0, 0), (2, 0, 1), (1, 1, 0)]);
    let stored = p.count(&format!(
        "SELECT count(*) FROM readings WHERE sensor_key = (SELECT key FROM sensors WHERE id = 'PUMP-001.FLOW') AND ts >= {}",
        at(10).unix() * 1000
    ));
    assert_eq!(stored, 4, "every reading but the refused one");
    assert_eq!(p.count("SELECT count(*) FROM alarm_events WHERE event_id = 'f1'"), 1);
    let payload = p.text("SELECT CAST(payload AS TEXT) FROM dead_letters WHERE reason = 'failed'");
    let detail = p.text("SELECT detail FROM dead_letters WHERE reason = 'failed'");
    assert!(payload.contains("-12.5"), "the refused event is kept: {payload}");
    assert!(detail.contains("injected storage fault"), "{detail}");
    // The rollups hold the stored readings only.
    let hourly_n = p.count(&format!(
        "SELECT coalesce(sum(n), 0) FROM readings_hourly WHERE sensor_key = (SELECT key FROM sensors WHERE id = 'PUMP-001.FLOW') AND hour >= {}",
        at(10).unix().div_euclid(3600) * 3600
    ));
    let raw_n = p.count(&format!(
        "SELECT count(*) FROM readings WHERE sensor_key = (SELECT key FROM sensors WHERE id = 'PUMP-001.FLOW') AND ts >= {}",
        at(10).unix().div_euclid(3600) * 3600 * 1000
    ));
    assert_eq!(hourly_n, raw_n, "rollups agree with the raw readings");
}

/// A dead letter replayed once its cause is fixed: while the sensor is unknown the
/// replay is refused again and changes nothing; once the sensor is in the twin it is
/// applied with its original reception time, marked replayed, and journalled with who
/// did it; a second replay does nothing.
#[test]
fn a_dead_letter_replays_once_its_cause_is_fixed() {
    use ingest::dead_letters::{self as replay, Replay};
    use twinops::domain::DeadLetterReason;
    let p = Plant::new();
    let reading = json!({"type": "reading", "sensor_id": "PUMP-001.FLOW2", "time": at(20).to_rfc3339(), "value": 12.0});
    assert_eq!(send(&p, &reading).dead_letters, 1);
    let pending = |all| replay::list(&p.store.read().unwrap(), Some(DeadLetterReason::UnknownSensor), all, 10).unwrap();
    let id = pending(false)[0].id;

    let again = replay::replay(p.store.writer(), id, "operator.kaur", Default::default()).unwrap();
    assert!(
        matches!(&again, Replay::Refused { reason, detail } if *reason == DeadLetterReason::UnknownSensor && detail.contains("PUMP-001.FLOW2")),
        "{again:?}"
    );
    assert_eq!(p.count("SELECT count(*) FROM dead_letters"), 1, "a refused replay adds nothing");
    assert_eq!(pending(false).len(), 1, "and leaves the dead letter pending");

    p.write(
        "INSERT INTO sensors (id, asset_id, kind, description, unit) VALUES ('PUMP-001.FLOW2', 'PUMP-001', 'flow', 'second flow meter', 'm3/h')",
    );
    let done = replay::replay(p.store.writer(), id, "operator.kaur", Default::default()).unwrap();
    assert!(matches!(&done, Replay::Applied(e) if e.readings == 1 && e.dead_letters == 0), "{done:?}");
    let stored =
        "SELECT count(*) FROM readings WHERE sensor_key = (SELECT key FROM sensors WHERE id = 'PUMP-001.FLOW2')";
    assert_eq!(p.count(stored), 1);
    assert!(pending(false).is_empty(), "no longer pending");
    assert!(pending(true)[0].replayed_at.is_some());
    let journalled = "SELECT count(*) FROM audit_log WHERE action = 'dead_letter_replayed' AND actor = 'operator.kaur'";
    assert_eq!(p.count(journalled), 1);

    let twice = replay::replay(p.store.writer(), id, "operator.kaur", Default::default()).unwrap();
    assert!(matches!(twice, Replay::AlreadyReplayed(_)), "{twice:?}");
    assert_eq!(p.count(stored), 1);
    assert_eq!(replay::replay(p.store.writer(), id + 1000, "x", Default::default()).unwrap(), Replay::NotFound);
}

/// An event stamped further ahead of its receipt than the policy allows (a gateway
/// clock running fast, local time sent as UTC) is dead-lettered with what to check,
/// and changes nothing; within the allowance, or with no limit, it is stored.
#[test]
fn events_stamped_ahead_of_their_receipt_are_refused() {
    let p = Plant::new();
    let received = at(0);
    let apply = |payload: serde_json::Value, policy: ingest::IngestPolicy| {
        ingest::apply(p.store.writer(), "scada/telemetry", payload.to_string().as_bytes(), received, policy).unwrap()
    };
    let reading = |secs: i64, value: f64| json!({"type": "reading", "sensor_id": "PUMP-001.FLOW", "time": received.plus_secs(secs).to_rfc3339(), "value": value});
    assert_eq!(apply(reading(240, 401.0), Default::default()).readings, 1, "4 minutes ahead is within the default 5");
    let refused = apply(reading(360, 402.0), Default::default());
    assert_eq!((refused.readings, refused.dead_letters), (0, 1));

    let local_time = json!({"type": "alarm", "event_id": "tz1", "asset_id": "PUMP-001", "sensor_id": "PUMP-001.FLOW",
        "code": "FLOW-HI", "severity": "high", "state": "raised", "time": received.plus_secs(2 * 3600).to_rfc3339()});
    let effect = apply(local_time.clone(), Default::default());
    assert_eq!((effect.alarms.len(), effect.dead_letters), (0, 1));
    assert_eq!(p.count("SELECT count(*) FROM alarms WHERE event_id = 'tz1'"), 0);
    let details = p.text("SELECT group_concat(detail, ' | ') FROM dead_letters WHERE reason = 'invalid'");
    let expected = format!(
        "time: {} is 6 min ahead of its receipt at {} (at most 300 s is accepted): check the sender's clock, and that it sends UTC",
        received.plus_secs(360).to_rfc3339(),
        received.to_rfc3339()
    );
    assert!(details.contains(&expected), "{details}");
    assert!(details.contains("is 2 h ahead of its receipt"), "{details}");

    let unlimited = ingest::IngestPolicy { max_ahead_s: None, ..Default::default() };
    assert_eq!(apply(local_time, unlimited).alarms.len(), 1, "no limit: stored");
}

/// Events stamped long before their receipt are stored (a backfill after an outage is
/// late by design) unless the site sets a limit; a reset controller clock (before 2001)
/// is refused whatever the policy, with what to fix.
#[test]
fn late_events_are_refused_only_by_the_sites_choice_or_a_reset_clock() {
    let p = Plant::new();
    let received = at(0);
    let apply = |payload: serde_json::Value, policy: ingest::IngestPolicy| {
        ingest::apply(p.store.writer(), "scada/telemetry", payload.to_string().as_bytes(), received, policy).unwrap()
    };
    let reading = |secs_before: i64, value: f64| json!({"type": "reading", "sensor_id": "PUMP-001.FLOW", "time": received.plus_secs(-secs_before).to_rfc3339(), "value": value});
    assert_eq!(apply(reading(30 * 86_400, 401.0), Default::default()).readings, 1, "30 days late, no limit: stored");

    let week = ingest::IngestPolicy { max_behind_s: Some(7 * 86_400), ..Default::default() };
    assert_eq!(apply(reading(86_407, 402.0), week.clone()).readings, 1, "a day late is within a week");
    let refused = apply(reading(31 * 86_400, 403.0), week);
    assert_eq!((refused.readings, refused.dead_letters), (0, 1));
    let detail = p.text("SELECT detail FROM dead_letters WHERE reason = 'invalid' ORDER BY id DESC LIMIT 1");
    let expected = format!(
        "time: {} is 31 days behind its receipt at {} (at most 604800 s is accepted, mqtt.max_time_behind_s)",
        received.plus_secs(-31 * 86_400).to_rfc3339(),
        received.to_rfc3339()
    );
    assert!(detail.starts_with(&expected) && detail.contains("raise the limit and replay"), "{detail}");

    let reset = json!({"type": "alarm", "event_id": "rtc1", "asset_id": "PUMP-001", "sensor_id": "PUMP-001.FLOW",
        "code": "FLOW-HI", "severity": "high", "state": "raised", "time": "1970-01-01T00:00:07Z"});
    let unlimited = ingest::IngestPolicy { max_ahead_s: None, max_behind_s: None, ..Default::default() };
    let effect = apply(reset, unlimited.clone());
    assert_eq!((effect.alarms.len(), effect.dead_letters), (0, 1));
    assert_eq!(p.count("SELECT count(*) FROM alarms WHERE event_id = 'rtc1'"), 0);
    let detail = p.text("SELECT detail FROM dead_letters WHERE reason = 'invalid' ORDER BY id DESC LIMIT 1");
    assert!(
        detail.starts_with("time: 1970-01-01T00:00:07Z is before 2001") && detail.contains("clock was reset"),
        "{detail}"
    );
}

/// Ack and shelve through the library, every transition journalled with who and when.
#[test]
fn acknowledge_and_shelve() {
    let p = Plant::new();
    let Applied::Raised { alarm_id, .. } = send(&p, &alarm("a1", "raised", 1)).alarms[0] else { panic!() };
    let w = p.store.writer();
    assert_eq!(alarms::acknowledge(w, alarm_id, "operator.kaur", at(2)).unwrap(), AlarmState::Acknowledged);
    let again = alarms::acknowledge(w, alarm_id, "operator.kaur", at(2)).unwrap_err().to_string();
    assert!(again.contains("is acknowledged; only unacknowledged alarms can be acknowledged"), "{again}");
    assert!(
        alarms::shelve(w, alarm_id, "operator.kaur", 3600, " ", at(3)).unwrap_err().to_string().contains("say why")
    );
    assert!(alarms::shelve(w, alarm_id, "operator.kaur", 3 * 86_400, "work", at(3)).is_err());
    assert_eq!(
        alarms::shelve(w, alarm_id, "operator.kaur", 3600, "permit 4471 on PUMP-001", at(3)).unwrap(),
        AlarmState::Shelved
    );
    assert_eq!(alarms::unshelve_expired(w, at(30)).unwrap(), 0);
    assert_eq!(alarms::unshelve_expired(w, at(64)).unwrap(), 1);
    let state: AlarmState =
        p.store.read().unwrap().query_row("SELECT state FROM alarms WHERE id = ?1", [alarm_id], |r| r.get(0)).unwrap();
    assert_eq!(state, AlarmState::Acknowledged, "back to its state before shelving");
    // Unshelved by hand before its time.
    alarms::shelve(w, alarm_id, "operator.kaur", 3600, "permit 4472", at(70)).unwrap();
    assert_eq!(alarms::unshelve(w, alarm_id, "operator.kaur", at(80)).unwrap(), AlarmState::Acknowledged);
    let again = alarms::unshelve(w, alarm_id, "operator.kaur", at(81)).unwrap_err().to_string();
    assert!(again.contains("is acknowledged; only shelved alarms can be unshelved"), "{again}");
    let actors =
        p.count(&format!("SELECT count(*) FROM alarm_events WHERE alarm_id = {alarm_id} AND actor = 'operator.kaur'"));
    assert_eq!(actors, 4, "acknowledged, shelved, shelved and unshelved, by the operator");
    assert!(alarms::acknowledge(w, 999_999, "x", at(1)).unwrap_err().to_string().contains("no alarm 999999"));
    common::assert_alarm_stats_agree(&p);
}

/// Out of service (ISA-18.2): a point taken out of service keeps recording its alarms
/// but neither annunciates nor triages them, across occurrences, until it is returned;
/// then an occurrence still active annunciates again and is triaged, and one that
/// cleared meanwhile is cleared. Every step is journalled with who.
#[test]
fn a_point_out_of_service_records_but_does_not_triage_until_returned() {
    let p = Plant::new();
    p.write("DELETE FROM triage_jobs");
    let w = p.store.writer();
    let Applied::Raised { alarm_id: first, .. } = send(&p, &alarm("o1", "raised", 1)).alarms[0] else { panic!() };
    let no_reason = alarms::remove_from_service(w, first, "supervisor.ng", "  ", at(2)).unwrap_err().to_string();
    assert!(no_reason.contains("say why"), "{no_reason}");
    let returned = alarms::return_to_service(w, first, "supervisor.ng", at(2), Default::default());
    assert!(returned.unwrap_err().to_string().contains("only alarms out of service can be returned"));
    assert_eq!(
        alarms::remove_from_service(w, first, "supervisor.ng", "permit 4471: RTD replaced", at(2)).unwrap(),
        AlarmState::OutOfService
    );
    let twice = alarms::remove_from_service(w, first, "supervisor.ng", "again", at(2)).unwrap_err().to_string();
    assert!(twice.contains("is out_of_service; return it to service first"), "{twice}");

    // Cleared and raised again while out of service: a new occurrence, not triaged.
    assert!(matches!(send(&p, &alarm("o2", "cleared", 3)).alarms[0], Applied::Cleared { .. }));
    let Applied::OutOfService { alarm_id: second } = send(&p, &alarm("o3", "raised", 4)).alarms[0] else { panic!() };
    assert!(
        matches!(send(&p, &alarm("o4", "raised", 5)).alarms[0], Applied::Reraised { alarm_id } if alarm_id == second)
    );
    let state = |id: i64| p.text(&format!("SELECT state FROM alarms WHERE id = {id}"));
    assert_eq!((state(first).as_str(), state(second).as_str()), ("out_of_service", "out_of_service"));
    assert_eq!(p.count(&format!("SELECT count(*) FROM alarms WHERE id = {second} AND triage_job IS NULL")), 1);
    assert_eq!(p.count("SELECT count(*) FROM triage_jobs"), 1, "only the first occurrence, raised in service");
    let older = alarms::remove_from_service(w, first, "supervisor.ng", "x", at(5)).unwrap_err().to_string();
    assert!(older.contains("is out_of_service"), "{older}");
    assert_eq!(
        alarms::flood_state(&p.store.read().unwrap(), at(6), false).unwrap().alarms_last_10_min,
        0,
        "points out of service do not count towards a flood"
    );

    assert_eq!(
        alarms::return_to_service(w, second, "supervisor.ng", at(6), Default::default()).unwrap(),
        AlarmState::Unacknowledged
    );
    assert_eq!((state(first).as_str(), state(second).as_str()), ("cleared", "unacknowledged"));
    assert_eq!(
        p.count(&format!("SELECT count(*) FROM alarms WHERE id = {second} AND triage_job IS NOT NULL")),
        1,
        "triaged now"
    );
    let journal = p.text(&format!(
        "SELECT group_concat(kind || ' by ' || actor, ', ') FROM (SELECT kind, actor FROM alarm_events WHERE alarm_id IN ({first}, {second}) AND actor != 'scada' ORDER BY id)"
    ));
    assert_eq!(
        journal,
        "out_of_service by supervisor.ng, returned_to_service by supervisor.ng, returned_to_service by supervisor.ng"
    );
    assert!(matches!(send(&p, &alarm("o5", "raised", 7)).alarms[0], Applied::Reraised { .. }), "in service again");
    common::assert_alarm_stats_agree(&p);
}

/// Flood: above 10 alarms in 10 minutes starts it, below 5 ends it. Chattering: three
/// activations of one point within 60 seconds.
#[test]
fn flood_and_chattering() {
    let p = Plant::new();
    let db = || p.store.read().unwrap();
    let now = at(100);
    assert!(!alarms::flood_state(&db(), now, false).unwrap().flood);
    let codes = ["VIB-HI", "FLOW-LO", "PRESS-DIS-LO", "MTR-CURRENT-HI", "BRG-TEMP-HI", "PRESS-SUC-LO"];
    for (i, asset) in ["PUMP-001", "PUMP-002"].iter().enumerate() {
        for (j, code) in codes.iter().enumerate() {
            let ev = json!({"type": "alarm", "event_id": format!("f{i}{j}"), "asset_id": asset, "code": code, "severity": "high",
                            "state": "raised", "time": at(95 + j as i64 % 4).to_rfc3339()});
            send(&p, &ev);
        }
    }
    let f = alarms::flood_state(&db(), now, false).unwrap();
    assert_eq!((f.alarms_last_10_min, f.flood), (12, true));
    assert!(alarms::flood_state(&db(), at(104), true).unwrap().flood, "hysteresis: stays in flood until below 5");
    assert!(!alarms::flood_state(&db(), at(120), true).unwrap().flood);

    let Applied::Raised { alarm_id, .. } = send(&p, &alarm("c1", "raised", 200)).alarms[0] else { panic!() };
    send(&p, &alarm("c2", "raised", 200));
    assert!(!alarms::is_chattering(&db(), alarm_id, at(200).plus_secs(10)).unwrap());
    send(&p, &alarm("c3", "raised", 200));
    assert!(alarms::is_chattering(&db(), alarm_id, at(200).plus_secs(10)).unwrap());
    common::assert_alarm_stats_agree(&p);
}

fn rules_agent(p: &Plant) -> Arc<Agent> {
    let end = common::end();
    Arc::new(Agent::new(p.store.clone(), vec![], AgentLimits::default()).with_clock(move || end))
}

/// Jobs run by severity then age, each storing exactly one note; a job interrupted by
/// a crash is queued again at start-up and still yields one note.
#[tokio::test(flavor = "multi_thread")]
async fn the_triage_queue_yields_one_note_per_occurrence() {
    let p = Plant::new();
    p.write("DELETE FROM triage_jobs");
    let medium = send(&p, &alarm("t1", "raised", 1));
    let critical = send(
        &p,
        &json!({"type": "alarm", "event_id": "t2", "asset_id": "PUMP-004", "sensor_id": "PUMP-004.PRESS-SUC",
        "code": "PRESS-SUC-LOLO", "severity": "critical", "state": "raised", "value": 0.25, "threshold": 0.3,
        "time": at(2).to_rfc3339(), "message": "suction low-low"}),
    );
    let (Applied::Raised { alarm_id: m, .. }, Applied::Raised { alarm_id: c, .. }) =
        (&medium.alarms[0], &critical.alarms[0])
    else {
        panic!()
    };
    let triage = Triage::new(rules_agent(&p), rules_agent(&p), 10);
    let mut notes = triage.subscribe();
    let first = triage.run_next().await.unwrap().unwrap().remove(0);
    assert_eq!(first.alarm_id, *c, "critical before medium, though raised later");
    assert_eq!(notes.recv().await.unwrap().note_id, first.note_id);
    assert!(first.body["summary"].as_str().unwrap().contains("PUMP-004.PRESS-SUC"), "{}", first.body);

    // A crash while the next job runs: it is left `running`.
    p.write("UPDATE triage_jobs SET state = 'running' WHERE state = 'queued'");
    assert!(triage.run_next().await.unwrap().is_none(), "a running job is not taken twice");
    assert_eq!(triage.requeue_interrupted().await.unwrap(), 1);
    assert_eq!(triage.drain().await.unwrap(), 1);
    assert_eq!(p.count(&format!("SELECT count(*) FROM notes WHERE kind = 'triage' AND alarm_id = {m}")), 1);
    assert_eq!(p.count("SELECT count(*) FROM triage_jobs WHERE state = 'done'"), 2);
    assert_eq!(p.count("SELECT count(*) FROM notes WHERE kind = 'triage'"), 2);
}

/// Of a pair, a node that acts takes no triage job until the other node's notes
/// waiting for it on the broker have been heard: it would note again what the other
/// already did.
#[tokio::test(flavor = "multi_thread")]
async fn a_paired_node_triages_only_once_the_other_nodes_notes_are_heard() {
    let p = Plant::new();
    p.write("DELETE FROM triage_jobs");
    send(&p, &alarm("h1", "raised", 1));
    let triage = Arc::new(Triage::new(rules_agent(&p), rules_agent(&p), 10).paired());
    let (stop, stop_rx) = tokio::sync::watch::channel(false);
    let wake = Arc::new(tokio::sync::Notify::new());
    let workers = tokio::spawn(Arc::clone(&triage).run_workers(1, Arc::clone(&wake), stop_rx));
    let notes = "SELECT count(*) FROM notes WHERE kind = 'triage'";
    tokio::time::sleep(std::time::Duration::from_millis(1500)).await;
    assert_eq!(p.count(notes), 0, "acting, but the other node's notes are not heard yet");
    triage.peer_notes_heard(true);
    assert!(common::eventually(std::time::Duration::from_secs(10), || p.count(notes) == 1).await, "heard: triaged");
    stop.send(true).unwrap();
    workers.await.unwrap();
}

/// Alarms raised on an asset while its job waits join that job: one run, led by the
/// most severe, and one note published, naming the others it covers; the lesser alarm's
/// note is a record covered by it (the same text, linked to the lead's note), not a
/// second copy sent out, and a redone job publishes nothing again.
#[tokio::test(flavor = "multi_thread")]
async fn alarms_waiting_on_one_asset_share_a_run_and_each_note_names_them_all() {
    let p = Plant::new();
    p.write("DELETE FROM triage_jobs");
    let raise = |event_id: &str, code: &str, severity: &str, min: i64| {
        let effect = send(
            &p,
            &json!({"type": "alarm", "event_id": event_id, "asset_id": "PUMP-004", "sensor_id": "PUMP-004.PRESS-SUC",
            "code": code, "severity": severity, "state": "raised", "value": 0.25, "threshold": 0.3,
            "time": at(min).to_rfc3339(), "message": "suction pressure low"}),
        );
        let Applied::Raised { alarm_id, .. } = effect.alarms[0] else { panic!("{effect:?}") };
        alarm_id
    };
    let low = raise("g1", "PRESS-SUC-LO", "medium", 1);
    let low_low = raise("g2", "PRESS-SUC-LOLO", "critical", 2);
    assert_eq!(p.count("SELECT count(*) FROM triage_jobs"), 1, "the second alarm joined the waiting job");

    let triage = Triage::new(rules_agent(&p), rules_agent(&p), 10);
    let notes = triage.run_next().await.unwrap().unwrap();
    assert_eq!(notes.iter().map(|n| n.alarm_id).collect::<Vec<_>>(), [low_low], "one note, the critical alarm's");
    let note = &notes[0];
    assert_eq!(note.covers, [low], "it says which alarms it covers");
    assert!(note.flags.contains(&"grouped".to_string()), "{:?}", note.flags);
    let summary = note.body["summary"].as_str().unwrap();
    assert!(summary.starts_with("PRESS-SUC-LOLO on PUMP-004"), "{summary}");
    assert!(
        summary.contains(&format!("also covers 1 more alarm on the asset, raised while this one waited for triage: PRESS-SUC-LO (alarm {low}, medium).")),
        "{summary}"
    );
    assert!(!note.flags.contains(&"ungrounded".to_string()), "the named ids are in the task: {:?}", note.flags);
    // Every occurrence has its note; the lesser one's links to the lead's.
    let covered = format!(
        "SELECT count(*) FROM notes WHERE kind = 'triage' AND alarm_id = {low} AND covered_by = {} AND run_id = {}",
        note.note_id, note.run_id
    );
    assert_eq!(p.count(&covered), 1);
    let detail = twinops::alarms::list::one(&p.store.read().unwrap(), low).unwrap().unwrap();
    assert_eq!(detail["note"]["covered_by"], json!({"note_id": note.note_id, "alarm_id": low_low}));
    // What a consumer that fell behind catches up on: the one published note.
    let missed = twinops::triage::notes_after(&p.store.read().unwrap(), 0).unwrap();
    let ours: Vec<(i64, Vec<i64>)> =
        missed.iter().filter(|n| n.run_id == note.run_id).map(|n| (n.alarm_id, n.covers.clone())).collect();
    assert_eq!(ours, [(low_low, vec![low])]);
}

/// A note goes to the webhook as a Slack-compatible body, retried after a server
/// error; a client error is not retried.
#[tokio::test(flavor = "multi_thread")]
async fn notes_reach_the_webhook_with_retries() {
    use std::sync::Mutex;
    use std::time::Duration;
    use twinops::agent::reliability::RetryPolicy;
    use twinops::config::Secret;

    let received: Arc<Mutex<Vec<serde_json::Value>>> = Arc::default();
    let statuses = Arc::new(Mutex::new(vec![503u16, 200, 400]));
    let app = {
        let (received, statuses) = (Arc::clone(&received), Arc::clone(&statuses));
        axum::Router::new().route(
            "/hook",
            axum::routing::post(move |body: axum::Json<serde_json::Value>| {
                let (received, statuses) = (Arc::clone(&received), Arc::clone(&statuses));
                async move {
                    received.lock().unwrap().push(body.0);
                    axum::http::StatusCode::from_u16(statuses.lock().unwrap().remove(0)).unwrap()
                }
            }),
        )
    };
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = Secret::new(format!("http://{}/hook", listener.local_addr().unwrap()));
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });

    let note = twinops::triage::PublishedNote {
        note_id: 7,
        alarm_id: 46,
        asset_id: "PUMP-007".into(),
        run_id: 3,
        outcome: twinops::agent::Outcome::Final,
        provider: Some("rules".into()),
        flags: vec![],
        created_at: common::end(),
        body: json!({"summary": "VIB-HI on PUMP-007: 6.256 mm/s.", "urgency": "urgent"}),
        covers: vec![],
        episode_id: None,
        revision: 1,
    };
    let policy = RetryPolicy { max_retries: 2, base: Duration::from_millis(10), cap: Duration::from_millis(50) };
    let client = twinops::agent::http::Http::new().client().clone();
    assert_eq!(twinops::notify::post(&client, &url, &note, policy).await, Ok(2), "retried once after the 503");
    let text = received.lock().unwrap()[0]["text"].as_str().unwrap().to_string();
    assert!(
        text.contains("*PUMP-007* alarm 46: urgency urgent")
            && text.contains("VIB-HI on PUMP-007: 6.256 mm/s.")
            && text.contains("AI advisory"),
        "{text}"
    );
    let err = twinops::notify::post(&client, &url, &note, policy).await.unwrap_err();
    assert!(err.contains("HTTP 400"), "{err}");
    assert_eq!(received.lock().unwrap().len(), 3, "a 400 is not retried");

    // Model output that echoes hostile alarm text reaches the channel as text: no
    // mention, no disguised link.
    let hostile = twinops::triage::PublishedNote {
        body: json!({"summary": "<!channel> open <https://evil.example|the manual> & act", "urgency": "urgent"}),
        ..note
    };
    let body = twinops::notify::webhook_body(&hostile);
    let text = body["text"].as_str().unwrap();
    assert!(text.contains("&lt;!channel&gt; open &lt;https://evil.example|the manual&gt; &amp; act"), "{text}");
    assert!(!text.contains("<!") && !text.contains("<http"), "{text}");
}

/// The model is kept for alarms that need judgement: during a flood, medium alarms
/// get a rules note while high ones still get the model; a chattering point's repeat
/// occurrences get rules notes.
#[test]
fn floods_and_chattering_route_triage_to_the_rules_model() {
    let p = Plant::new();
    let mode = |alarm: i64| -> String {
        p.store
            .read()
            .unwrap()
            .query_row(
                "SELECT mode FROM triage_jobs WHERE id = (SELECT triage_job FROM alarms WHERE id = ?1)",
                [alarm],
                |r| r.get(0),
            )
            .unwrap()
    };
    let raise = |id: String, asset: &str, code: &str, severity: &str, min: i64| -> i64 {
        let ev = json!({"type": "alarm", "event_id": id, "asset_id": asset, "code": code, "severity": severity,
                        "state": "raised", "time": at(min).to_rfc3339()});
        match send(&p, &ev).alarms[0] {
            Applied::Raised { alarm_id, .. } => alarm_id,
            ref other => panic!("{other:?}"),
        }
    };
    let assets = ["PUMP-001", "PUMP-002", "PUMP-003", "PUMP-005", "PUMP-006", "MTR-001"];
    let mut ids = Vec::new();
    for (i, asset) in assets.iter().enumerate() {
        for code in ["FLOW-LO", "PRESS-DIS-LO"] {
            ids.push(raise(format!("fl{i}{code}"), asset, code, "medium", 300 + i as i64));
        }
    }
    assert_eq!(mode(ids[0]), "agent", "before the flood");
    assert_eq!(mode(*ids.last().unwrap()), "rules", "the 12th alarm in 10 minutes is in a flood");
    let high = raise("fl-high".into(), "PUMP-004", "PRESS-SUC-LOLO", "high", 306);
    assert_eq!(mode(high), "agent", "high alarms keep the model in a flood");

    let point = |i: usize, state: &str| {
        json!({"type": "alarm", "event_id": format!("ch{i}"), "asset_id": "VLV-001", "code": "VLV-POS-DEV", "severity": "medium",
               "state": state, "time": at(600).plus_secs(i as i64 * 5).to_rfc3339()})
    };
    let mut occurrences = Vec::new();
    for i in 0..5 {
        // Workers took the earlier jobs (a waiting job would take the new occurrence in).
        p.write("UPDATE triage_jobs SET state = 'done' WHERE state = 'queued'");
        let effect = send(&p, &point(i, if i % 2 == 0 { "raised" } else { "cleared" }));
        if let Applied::Raised { alarm_id, .. } = effect.alarms[0] {
            occurrences.push(alarm_id);
        }
    }
    assert_eq!(occurrences.len(), 3);
    assert_eq!(mode(occurrences[0]), "agent");
    assert_eq!(mode(occurrences[2]), "rules", "the third activation within 60 s is chatter");
}

fn draft(asset: &str, title: &str) -> twinops::domain::WorkOrderDraft {
    use twinops::domain::{AssetId, WorkAction, WorkPriority};
    twinops::domain::WorkOrderDraft::new(
        AssetId::parse(asset).unwrap(),
        None,
        WorkAction::Inspect,
        WorkPriority::Normal,
        title,
        "Vibration on the drive end is above the zone B limit and rising.",
        vec![],
    )
    .unwrap()
}

/// Housekeeping expires proposals nobody decided on, unshelves alarms whose shelf
/// time is over, and re-indexes documents that changed; retention deletes old raw
/// readings in batches and keeps the hourly rollups.
#[tokio::test(flavor = "multi_thread")]
async fn housekeeping_and_retention() {
    use twinops::approvals::{Approvals, DEFAULT_TTL_SECS, Proposer};
    use twinops::schedule::housekeeping;

    let p = Plant::new();
    let approvals = Approvals::new(p.store.writer().clone());
    let now = common::end();
    let stale = approvals
        .propose(
            draft("PUMP-003", "Inspect PUMP-003"),
            Proposer::User("kaur".into()),
            now.plus_secs(-DEFAULT_TTL_SECS - 60),
        )
        .unwrap();
    let fresh = approvals.propose(draft("PUMP-005", "Inspect PUMP-005"), Proposer::User("kaur".into()), now).unwrap();
    let Applied::Raised { alarm_id, .. } = send(&p, &alarm("s1", "raised", -30)).alarms[0] else { panic!() };
    alarms::shelve(p.store.writer(), alarm_id, "operator.kaur", 600, "permit 12 on PUMP-001", now.plus_secs(-1200))
        .unwrap();

    let docs = tempfile::TempDir::new().unwrap();
    for entry in std::fs::read_dir(common::seed_dir().join("docs")).unwrap() {
        let entry = entry.unwrap();
        std::fs::copy(entry.path(), docs.path().join(entry.file_name())).unwrap();
    }
    let h = housekeeping(
        &p.store,
        &Approvals::new(p.store.writer().clone()),
        Some(docs.path().to_path_buf()),
        &p.docs,
        now,
    )
    .await
    .unwrap();
    assert_eq!(h.expired_work_orders, [stale.work_order_id]);
    assert_eq!((h.unshelved, h.docs_changed), (1, 0), "same files as the seed indexed: nothing to do");
    // The alarm figures of every hour from the journal's first event to the last closed.
    let first = p.count("SELECT min(at) FROM alarm_events");
    assert_eq!(h.alarm_hours_cached as i64, (now.unix() - 70).div_euclid(3600) - first.div_euclid(3600), "{h:?}");
    let status = |id: i64| p.count(&format!("SELECT status = 'pending_approval' FROM work_orders WHERE id = {id}"));
    assert_eq!((status(stale.work_order_id), status(fresh.work_order_id)), (0, 1));
    let state: AlarmState =
        p.store.read().unwrap().query_row("SELECT state FROM alarms WHERE id = ?1", [alarm_id], |r| r.get(0)).unwrap();
    assert_eq!(state, AlarmState::Unacknowledged);

    let path = docs.path().join("arp-vibration.md");
    let text = std::fs::read_to_string(&path).unwrap();
    std::fs::write(&path, format!("{text}\n\n## Addendum\n\nQuarantine procedure zebracorn applies from December.\n"))
        .unwrap();
    let h = housekeeping(
        &p.store,
        &Approvals::new(p.store.writer().clone()),
        Some(docs.path().to_path_buf()),
        &p.docs,
        now.plus_secs(60),
    )
    .await
    .unwrap();
    assert_eq!(h, twinops::schedule::Housekeeping { docs_changed: 1, ..Default::default() });
    let hits = p.docs.search(&p.store.read().unwrap(), "zebracorn", 3).unwrap();
    assert!(hits[0].citation.to_string().starts_with("arp-vibration.md#"), "the change is searchable");

    let before = now.plus_secs(-3 * 86_400);
    let old = format!("SELECT count(*) FROM readings WHERE ts < {}", before.unix() * 1000);
    let (old_rows, rollups) = (p.count(&old), p.count("SELECT count(*) FROM readings_hourly"));
    assert!(old_rows > 300_000, "{old_rows}");
    let deleted = twinops::store::prune_readings(p.store.writer(), before, 5_000).await.unwrap();
    assert_eq!((deleted as i64, p.count(&old)), (old_rows, 0));
    assert_eq!(p.count("SELECT count(*) FROM readings_hourly"), rollups, "rollups kept");
    assert!(p.count("SELECT count(*) FROM readings") > 0, "recent readings kept");
}

/// The backlog the HMI's banner reads: occurrences waiting for a note (the oldest's
/// wait), and those given up in the last hour; occurrences with a note, and failures
/// older than an hour, do not count.
#[test]
fn the_triage_backlog_counts_what_waits_and_what_was_given_up() {
    let p = Plant::new();
    let now = Timestamp::now();
    let idle = twinops::triage::backlog(&p.store.read().unwrap(), now).unwrap();
    assert_eq!(idle, twinops::triage::Backlog::default(), "the seeded plant has nothing waiting");
    let alarms: Vec<i64> = {
        let db = p.store.read().unwrap();
        let mut stmt = db.prepare("SELECT id FROM alarms ORDER BY id LIMIT 5").unwrap();
        stmt.query_map([], |r| r.get(0)).unwrap().collect::<Result<_, _>>().unwrap()
    };
    let jobs = [
        (alarms[0], "queued", 600, None),
        (alarms[1], "running", 120, Some(60)),
        (alarms[2], "failed", 900, Some(100)),
        (alarms[3], "failed", 9000, Some(7200)),
        (alarms[4], "queued", 3600, None),
    ];
    let noted = alarms[4];
    p.store
        .writer()
        .call(move |c| {
            for (alarm, state, waited, started) in jobs {
                c.execute(
                    "INSERT INTO triage_jobs (alarm_id, state, priority, enqueued_at, started_at) VALUES (?1, ?2, 1, ?3, ?4)",
                    rusqlite::params![alarm, state, now.unix() - waited, started.map(|s: i64| now.unix() - s)],
                )?;
                c.execute("UPDATE alarms SET triage_job = ?2 WHERE id = ?1", [alarm, c.last_insert_rowid()])?;
            }
            // A job redone after a crash: its occurrence already has its note.
            c.execute(
                "INSERT INTO notes (kind, alarm_id, body, created_at) VALUES ('triage', ?1, '{}', ?2)",
                [noted, now.unix()],
            )?;
            Ok::<_, twinops::store::StoreError>(())
        })
        .unwrap();
    let backlog = twinops::triage::backlog(&p.store.read().unwrap(), now).unwrap();
    assert_eq!(backlog, twinops::triage::Backlog { waiting: 2, oldest_wait_s: 600, failed_last_hour: 1 });
}

/// The shift handover is an agent run stored as a `handover` note, with who asked.
#[tokio::test(flavor = "multi_thread")]
async fn the_shift_handover_is_a_stored_note() {
    let p = Plant::new();
    let agent = rules_agent(&p);
    let h = agent.write_handover("schedule:handover").await.unwrap();
    assert!(h.text.starts_with("Shift handover:") && h.text.contains("PUMP-007"), "{}", h.text);
    let db = p.store.read().unwrap();
    let stored = twinops::handover::recent(&db, 5).unwrap();
    assert_eq!(stored.len(), 1);
    assert_eq!((stored[0].note_id, &stored[0].text, stored[0].run_id), (h.note_id, &h.text, h.run_id));
    assert_eq!(stored[0].provider.as_deref(), Some("rules"));
    let run = h.run_id.unwrap();
    let trigger = format!(
        "SELECT count(*) FROM agent_runs WHERE id = {run} AND profile = 'handover' AND trigger = 'schedule:handover'"
    );
    assert_eq!(p.count(&trigger), 1);
    let tools =
        p.count(&format!("SELECT count(*) FROM agent_steps WHERE run_id = {run} AND name = 'propose_work_order'"));
    assert_eq!(tools, 0);
}

/// A handover, whoever writes it, goes out once: on MQTT `twinops/handover` and to the
/// webhook, through the daemon's outbox; a restarted daemon does not send it again.
#[tokio::test(flavor = "multi_thread")]
async fn a_handover_goes_out_once_on_mqtt_and_to_the_webhook() {
    use std::sync::Mutex;
    use std::time::Duration;
    use twinops::app::{Daemon, ServeOptions};

    let p = Plant::new();
    let hooked: Arc<Mutex<Vec<serde_json::Value>>> = Arc::default();
    let app = {
        let hooked = Arc::clone(&hooked);
        axum::Router::new().route(
            "/hook",
            axum::routing::post(move |body: axum::Json<serde_json::Value>| {
                let hooked = Arc::clone(&hooked);
                async move { hooked.lock().unwrap().push(body.0) }
            }),
        )
    };
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let hook = format!("http://{}/hook", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    let config = |label: &str| {
        let mut config = common::test_config(label);
        config.notify.webhook_url = Some(twinops::config::Secret::new(hook.clone()));
        config.schedule.handover = "0 0 0 1 1 *".into(); // not during the test
        ServeOptions { config, db: p.db_path(), demo: false, seed_dir: common::seed_dir() }
    };
    let daemon = Daemon::start_on(p.store.clone(), config("handover")).await.unwrap();
    let port: u16 = daemon.mqtt_url.rsplit(':').next().unwrap().parse().unwrap();
    let (sub, mut events) = rumqttc::AsyncClient::new(rumqttc::MqttOptions::new("handover-sub", "127.0.0.1", port), 10);
    sub.subscribe(twinops::handover::TOPIC, rumqttc::QoS::AtLeastOnce).await.unwrap();
    let published = tokio::spawn(async move {
        loop {
            if let Ok(rumqttc::Event::Incoming(rumqttc::Packet::Publish(m))) = events.poll().await {
                return (m.topic.clone(), serde_json::from_slice::<serde_json::Value>(&m.payload).unwrap());
            }
        }
    });
    tokio::time::sleep(Duration::from_millis(300)).await;

    // Written as `twinops handover` or the HMI would: only stored; the outbox sends it.
    let h = rules_agent(&p).write_handover("user:kaur").await.unwrap();
    let (topic, body) = tokio::time::timeout(Duration::from_secs(10), published).await.unwrap().unwrap();
    assert_eq!(topic, "twinops/handover");
    assert_eq!((body["note_id"].as_i64(), body["kind"].as_str()), (Some(h.note_id), Some("handover")));
    assert_eq!((body["text"].as_str(), body["run_id"].as_i64()), (Some(h.text.as_str()), h.run_id));
    let sent = format!("SELECT count(*) FROM notes WHERE id = {} AND published_at IS NOT NULL", h.note_id);
    for _ in 0..50 {
        if p.count(&sent) == 1 && !hooked.lock().unwrap().is_empty() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(p.count(&sent), 1, "marked once sent");
    let text = hooked.lock().unwrap()[0]["text"].as_str().unwrap().to_string();
    assert!(
        text.starts_with("*Shift handover*")
            && text.contains(&twinops::notify::slack_text(&h.text))
            && text.contains("AI advisory"),
        "{text}"
    );
    daemon.shutdown().await;

    let again = Daemon::start_on(p.store.clone(), config("handover-again")).await.unwrap();
    tokio::time::sleep(Duration::from_millis(2500)).await;
    again.shutdown().await;
    assert_eq!(hooked.lock().unwrap().len(), 1, "sent once, not again after a restart");
}

/// The daemon runs housekeeping on its schedule.
#[tokio::test(flavor = "multi_thread")]
async fn the_daemon_runs_its_schedules() {
    use twinops::app::{Daemon, ServeOptions};
    use twinops::approvals::{Approvals, DEFAULT_TTL_SECS, Proposer};

    let p = Plant::new();
    let stale = Approvals::new(p.store.writer().clone())
        .propose(
            draft("PUMP-003", "Inspect PUMP-003"),
            Proposer::User("kaur".into()),
            Timestamp::now().plus_secs(-DEFAULT_TTL_SECS - 5),
        )
        .unwrap();
    let mut config = common::test_config("sched");
    config.schedule.housekeeping = "* * * * * *".into();
    let opts = ServeOptions { config, db: p.db_path(), demo: false, seed_dir: common::seed_dir() };
    let daemon = Daemon::start_on(p.store.clone(), opts).await.unwrap();
    let expired = format!("SELECT count(*) FROM work_orders WHERE id = {} AND status = 'expired'", stale.work_order_id);
    let mut done = false;
    for _ in 0..50 {
        if p.count(&expired) == 1 {
            done = true;
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    daemon.shutdown().await;
    assert!(done, "housekeeping ran within 5 s");
}

/// Finite but absurd values are refused with the value in the detail, so the rollups'
/// sums stay finite; text that would display other than it reads (bidirectional
/// overrides, zero-width characters) is dropped from alarm messages at ingest.
#[test]
fn absurd_values_are_refused_and_deceiving_text_is_neutralised() {
    let p = Plant::new();
    let effect = send(
        &p,
        &json!({"events": [
            {"type": "reading", "sensor_id": "PUMP-001.FLOW", "time": at(5).to_rfc3339(), "value": 1e308},
            {"type": "reading", "sensor_id": "PUMP-001.FLOW", "time": at(6).to_rfc3339(), "value": -1.8e307},
            {"type": "reading", "sensor_id": "PUMP-001.FLOW", "time": at(7).to_rfc3339(), "value": 402.0},
            {"type": "alarm", "event_id": "bidi-1", "asset_id": "PUMP-001", "code": "FLOW-LO", "severity": "low",
             "state": "raised", "time": at(7).to_rfc3339(), "message": "Flow low \u{202E}kcab llac\u{202C} ok\u{200B}ay \u{2066}x\u{2069}"},
        ]}),
    );
    assert_eq!((effect.readings, effect.dead_letters, effect.alarms.len()), (1, 2, 1));
    let detail = p.text("SELECT detail FROM dead_letters ORDER BY id LIMIT 1");
    assert!(detail.contains("value 1e308 is beyond ±1e12"), "{detail}");
    let max = p.text("SELECT CAST(max(max) AS TEXT) FROM readings_hourly WHERE sensor_key = (SELECT key FROM sensors WHERE id = 'PUMP-001.FLOW')");
    assert!(!max.contains("e+"), "no absurd value reached the rollups: {max}");
    let message = p.text("SELECT message FROM alarms WHERE event_id = 'bidi-1'");
    assert_eq!(message, "Flow low kcab llac okay x");
    let raw = p.text("SELECT CAST(raw AS TEXT) FROM alarm_events WHERE event_id = 'bidi-1'");
    assert!(raw.contains("\u{202E}kcab") && raw.contains("ok\u{200B}ay"), "the journal keeps the event as sent: {raw}");
}

/// A reading's time keeps its milliseconds: two readings of a sensor 5 ms apart are two
/// readings, and the same millisecond and value again is a redelivery.
#[test]
fn readings_keep_their_milliseconds() {
    let p = Plant::new();
    let at = |ms: u32| format!("2026-11-30T13:00:00.{ms:03}Z");
    let reading =
        |ms: u32, value: f64| json!({"type": "reading", "sensor_id": "PUMP-001.FLOW", "time": at(ms), "value": value});
    let batch = json!([reading(5, 401.0), reading(10, 402.0), reading(10, 402.0)]);
    let received = twinops::domain::parse_time("2026-11-30T13:00:01Z").unwrap();
    let e =
        ingest::apply(p.store.writer(), "scada/telemetry", batch.to_string().as_bytes(), received, Default::default())
            .unwrap();
    assert_eq!((e.readings, e.duplicate_readings, e.dead_letters), (2, 1, 0), "{e:?}");
    assert_eq!(p.count("SELECT count(*) FROM readings WHERE ts IN (1796043600005, 1796043600010)"), 2);
    let latest =
        p.ok("get_sensor_history", json!({"sensor_id": "PUMP-001.FLOW", "hours": 1, "until": "2026-11-30T13:00:05Z"}));
    assert_eq!((latest["samples"].clone(), latest["stats"]["last"].clone()), (json!(2), json!(402.0)), "{latest}");
}

/// Two readings of one sensor 500 ms apart are both kept, the spike included; another
/// value at a stored millisecond is a `conflict` dead letter naming both values, and
/// the stored one stays.
#[test]
fn another_value_at_a_stored_millisecond_is_a_conflict() {
    let p = Plant::new();
    let reading =
        |time: &str, value: f64| json!({"type": "reading", "sensor_id": "PUMP-001.FLOW", "time": time, "value": value});
    let received = twinops::domain::parse_time("2026-11-30T13:00:01Z").unwrap();
    let apply = |m: serde_json::Value| {
        ingest::apply(p.store.writer(), "scada/telemetry", m.to_string().as_bytes(), received, Default::default())
            .unwrap()
    };
    let e = apply(json!([reading("2026-11-30T13:00:00.100Z", 3.3), reading("2026-11-30T13:00:00.600Z", 9.9)]));
    assert_eq!((e.readings, e.dead_letters), (2, 0));
    let e = apply(reading("2026-11-30T13:00:00.600Z", 7.5));
    assert_eq!((e.readings, e.duplicate_readings, e.dead_letters), (0, 0, 1));
    let (reason, detail) = (p.text("SELECT reason FROM dead_letters"), p.text("SELECT detail FROM dead_letters"));
    assert_eq!(reason, "conflict");
    assert!(
        detail.contains("already has the value 9.9 at 2026-11-30T13:00:00.600Z") && detail.contains("says 7.5"),
        "{detail}"
    );
    assert_eq!(
        p.count("SELECT count(*) FROM readings WHERE ts = 1796043600600 AND value = 9.9"),
        1,
        "the first is kept"
    );
    let history =
        p.ok("get_sensor_history", json!({"sensor_id": "PUMP-001.FLOW", "hours": 1, "until": "2026-11-30T13:00:01Z"}));
    assert_eq!((history["samples"].clone(), history["stats"]["max"].clone()), (json!(2), json!(9.9)), "{history}");
}

/// The same event id with other content is a `conflict` dead letter that names the
/// fields that differ; the first stays. An exact repeat is a harmless duplicate, and a
/// repeat whose ids differ only in case is the same event.
#[test]
fn a_reused_event_id_with_other_content_is_a_conflict() {
    let p = Plant::new();
    assert!(matches!(send(&p, &alarm("gw-1", "raised", 1)).alarms[..], [Applied::Raised { .. }]));
    let same = send(&p, &alarm("gw-1", "raised", 1));
    assert_eq!((same.alarms.clone(), same.dead_letters), (vec![Applied::Duplicate], 0));
    let mut lower = alarm("gw-1", "raised", 1);
    lower["asset_id"] = json!("pump-001");
    assert_eq!(send(&p, &lower).dead_letters, 0, "ids compare without case");

    // A gateway restarted and counts from 1 again: another point, another severity.
    let mut reused = alarm("gw-1", "raised", 9);
    reused["severity"] = json!("critical");
    reused["message"] = json!("DE bearing temperature high-high");
    let e = send(&p, &reused);
    assert_eq!((e.alarms.len(), e.dead_letters), (0, 1), "{e:?}");
    let detail = p.text("SELECT detail FROM dead_letters WHERE reason = 'conflict'");
    assert!(detail.contains("event_id gw-1") && detail.contains("differs in: time, message, severity"), "{detail}");
    assert_eq!(p.text("SELECT severity FROM alarms WHERE event_id = 'gw-1'"), "medium", "the first is kept");

    // An event journalled before its bytes were kept (or one of ours) is compared on
    // what the journal holds.
    p.write(
        "DROP TRIGGER alarm_events_append_only_update;
         UPDATE alarm_events SET raw = NULL WHERE event_id = 'gw-1';",
    );
    let mut cleared = alarm("gw-1", "cleared", 1);
    cleared["value"] = json!(12.0);
    let e = send(&p, &cleared);
    assert_eq!(e.dead_letters, 1);
    let detail = p.text("SELECT detail FROM dead_letters WHERE reason = 'conflict' ORDER BY id DESC LIMIT 1");
    assert!(detail.contains("differs in: state)"), "value is not in the journal, state is: {detail}");
    assert_eq!(send(&p, &alarm("gw-1", "raised", 1)).dead_letters, 0, "the same as journalled");
}

/// A refused message delivered again (a retained message at every subscribe) counts on
/// its one dead letter; another topic or payload is a row of its own, and a repeat of
/// a replayed dead letter opens it again.
#[test]
fn a_refused_message_delivered_again_is_one_dead_letter_counted() {
    let p = Plant::new();
    for (i, topic) in ["scada/x", "scada/x", "scada/x", "scada/y"].into_iter().enumerate() {
        let e = ingest::apply(p.store.writer(), topic, b"garbage", at(10 + i as i64), Default::default()).unwrap();
        assert_eq!(e.dead_letters, 1, "each refusal is counted in its effect");
    }
    ingest::apply(p.store.writer(), "scada/x", b"garbage!", at(20), Default::default()).unwrap();
    let rows = |sql: &str| p.count(sql);
    assert_eq!(rows("SELECT count(*) FROM dead_letters"), 3);
    assert_eq!(
        rows("SELECT times_seen FROM dead_letters WHERE topic = 'scada/x' AND payload = CAST('garbage' AS BLOB)"),
        3
    );
    assert_eq!(
        rows("SELECT last_seen_at - received_at FROM dead_letters WHERE topic = 'scada/x' AND times_seen = 3"),
        120,
        "first and last receipt"
    );
    let listed = twinops::ingest::dead_letters::list(
        &p.store.read().unwrap(),
        Some(twinops::domain::DeadLetterReason::Malformed),
        false,
        10,
    )
    .unwrap();
    assert_eq!(listed.iter().map(|d| d.times_seen).collect::<Vec<_>>(), [3, 1, 1]);

    // Replayed once its sensor exists, then refused again: open again, not a new row.
    let unknown = json!({"type": "reading", "sensor_id": "PUMP-001.NEW", "time": at(30).to_rfc3339(), "value": 1.0});
    send(&p, &unknown);
    p.write(
        "INSERT INTO sensors (id, asset_id, kind, description, unit) VALUES ('PUMP-001.NEW', 'PUMP-001', 'flow', 'New flow meter', 'm3/h')",
    );
    let id = p.count("SELECT id FROM dead_letters WHERE reason = 'unknown_sensor'");
    let replayed = ingest::dead_letters::replay(p.store.writer(), id, "kaur", Default::default()).unwrap();
    assert!(matches!(replayed, ingest::dead_letters::Replay::Applied(_)), "{replayed:?}");
    p.write("DELETE FROM readings WHERE sensor_key = (SELECT key FROM sensors WHERE id = 'PUMP-001.NEW'); DELETE FROM sensors WHERE id = 'PUMP-001.NEW';");
    send(&p, &unknown);
    assert_eq!(rows("SELECT count(*) FROM dead_letters WHERE reason = 'unknown_sensor'"), 1);
    assert_eq!(rows("SELECT times_seen FROM dead_letters WHERE reason = 'unknown_sensor' AND replayed_at IS NULL"), 2);
}

/// Figures are shown to four significant figures wherever tools and notes quote them
/// (`2.026`, not the float artefact `2.0260000000000002`); what is stored is unchanged.
#[tokio::test(flavor = "multi_thread")]
async fn figures_are_shown_rounded_and_stored_exact() {
    let p = Plant::new();
    p.write("DELETE FROM triage_jobs");
    let raw = 2.0260000000000002_f64;
    // Half a minute before the plant's "now", between the seeded minutes.
    let time = "2026-11-30T11:59:30Z";
    p.write("DELETE FROM readings WHERE sensor_key = (SELECT key FROM sensors WHERE id = 'PUMP-001.VIB-DE') AND ts > 1796039880000");
    send(
        &p,
        &json!([
            {"type": "reading", "sensor_id": "PUMP-001.VIB-DE", "time": time, "value": raw},
            {"type": "alarm", "event_id": "fig-1", "asset_id": "PUMP-001", "sensor_id": "PUMP-001.VIB-DE", "code": "VIB-HI",
             "severity": "medium", "state": "raised", "value": 4.82345678, "threshold": 4.500000000000001, "time": time},
        ]),
    );
    let stored = p.text("SELECT CAST(value AS TEXT) FROM readings WHERE ts = 1796039970000");
    assert_eq!(stored.parse::<f64>().unwrap(), raw, "stored exact");

    let details = p.ok("get_asset_details", json!({"asset_id": "PUMP-001"}));
    let sensor = details["sensors"].as_array().unwrap().iter().find(|s| s["id"] == "PUMP-001.VIB-DE").unwrap();
    assert_eq!(sensor["latest"]["value"], json!(2.026), "{sensor}");
    let alarms = p.ok("list_alarms", json!({"asset_id": "PUMP-001", "state": "unacknowledged"}));
    let listed = alarms["alarms"].as_array().unwrap().iter().find(|a| a["code"] == "VIB-HI").unwrap();
    assert_eq!((listed["value"].clone(), listed["threshold"].clone()), (json!(4.823), json!(4.5)), "{listed}");

    let triage = Triage::new(rules_agent(&p), rules_agent(&p), 10);
    let note = triage.run_next().await.unwrap().unwrap().remove(0);
    let text = note.body.to_string();
    assert!(text.contains("reads 2.026 "), "{text}");
    assert!(!text.contains("2.0260000000000002") && !text.contains("4.82345678"), "{text}");
}

/// An alarm event's time keeps its milliseconds in the journal (its sequence within a
/// second), and a repeat of its id at another millisecond is a conflict.
#[test]
fn alarm_events_keep_their_milliseconds() {
    let p = Plant::new();
    let event = |id: &str, state: &str, time: &str| {
        let mut e = alarm(id, state, 0);
        e["time"] = json!(time);
        e
    };
    send(
        &p,
        &json!([
            event("ms-1", "raised", "2026-11-30T12:00:00.100Z"),
            event("ms-2", "cleared", "2026-11-30T12:00:00.600Z")
        ]),
    );
    let journal = p.text(
        "SELECT group_concat(event_id || '@' || (at * 1000 + millis), ' ') FROM
         (SELECT event_id, at, millis FROM alarm_events WHERE event_id LIKE 'ms-%' ORDER BY id)",
    );
    assert_eq!(journal, "ms-1@1796040000100 ms-2@1796040000600");
    assert_eq!(send(&p, &event("ms-1", "raised", "2026-11-30T12:00:00.100Z")).dead_letters, 0, "an exact repeat");
    assert_eq!(send(&p, &event("ms-1", "raised", "2026-11-30T12:00:00.700Z")).dead_letters, 1);
    let detail = p.text("SELECT detail FROM dead_letters WHERE reason = 'conflict'");
    assert!(detail.contains("differs in: time)"), "{detail}");
}

/// Backfill is not news: a gateway replaying its buffer delivers occurrences raised
/// hours ago, most cleared since. They are journalled like any other, share one job and
/// get one summary note (the same note for each, from one run), while an alarm raised
/// a minute ago is triaged on its own.
#[tokio::test(flavor = "multi_thread")]
async fn a_replayed_buffer_gets_one_summary_note_and_live_alarms_their_own() {
    let p = Plant::new();
    p.write("DELETE FROM triage_jobs");
    let received = at(24 * 60);
    let deliver = |events: Vec<serde_json::Value>| {
        let payload = json!({"events": events}).to_string();
        ingest::apply(p.store.writer(), "scada/alarms", payload.as_bytes(), received, Default::default()).unwrap()
    };
    let codes = ["BRG-TEMP-HI", "VIB-HI", "PRESS-SUC-LO", "FLOW-LO"];
    let mut buffered = Vec::new();
    for i in 0..12i64 {
        let (asset, code) = (format!("PUMP-00{}", 1 + i % 4), codes[(i % 4) as usize]);
        let raised = json!({"type": "alarm", "event_id": format!("buf-{i}"), "asset_id": asset, "code": code,
            "severity": if i == 11 { "high" } else { "medium" }, "state": "raised", "time": at(60 * i).to_rfc3339()});
        buffered.push(raised.clone());
        if i < 9 {
            let mut cleared = raised;
            cleared["event_id"] = json!(format!("buf-{i}-clear"));
            cleared["state"] = json!("cleared");
            cleared["time"] = json!(at(60 * i + 5).to_rfc3339());
            buffered.push(cleared);
        }
    }
    let effect = deliver(buffered);
    assert_eq!(effect.dead_letters, 0, "{:?}", effect.first_refusal);
    let live = deliver(vec![json!({"type": "alarm", "event_id": "live-1", "asset_id": "PUMP-006", "code": "VIB-HI",
        "severity": "medium", "state": "raised", "time": at(24 * 60 - 1).to_rfc3339()})]);
    let Applied::Raised { alarm_id: live_id, .. } = live.alarms[0] else { panic!("{live:?}") };
    assert_eq!(p.count("SELECT count(*) FROM triage_jobs WHERE backfill = 1"), 1, "one job for the backfill");
    assert_eq!(
        p.count("SELECT count(*) FROM alarms WHERE triage_job = (SELECT id FROM triage_jobs WHERE backfill = 1)"),
        12
    );
    assert_eq!(
        p.count("SELECT count(*) FROM alarm_events WHERE kind = 'raised' AND alarm_id IN (SELECT id FROM alarms WHERE event_id LIKE 'buf-%')"),
        12,
        "each occurrence is journalled, so the alarm figures count it"
    );

    let triage = Triage::new(rules_agent(&p), rules_agent(&p), 10);
    assert_eq!(triage.drain().await.unwrap(), 2, "the live alarm's job, then the backfill's");
    let live_flags = p.text(&format!("SELECT flags FROM notes WHERE alarm_id = {live_id}"));
    assert!(!live_flags.contains("backfill"), "{live_flags}");
    assert_eq!(
        p.count("SELECT count(DISTINCT run_id) FROM notes WHERE alarm_id IN (SELECT id FROM alarms WHERE event_id LIKE 'buf-%')"),
        1,
        "one summary for the backfill"
    );
    assert_eq!(p.count("SELECT count(*) FROM notes WHERE alarm_id IN (SELECT id FROM alarms WHERE event_id LIKE 'buf-%') AND flags LIKE '%backfill%'"), 12);
    let body: serde_json::Value = serde_json::from_str(
        &p.text("SELECT body FROM notes n JOIN alarms a ON a.id = n.alarm_id WHERE a.event_id = 'buf-0'"),
    )
    .unwrap();
    let summary = body["summary"].as_str().unwrap();
    assert!(
        summary.starts_with(&format!(
            "Backfill: 12 alarm occurrence(s) raised between {} and {}",
            at(0).to_rfc3339(),
            at(660).to_rfc3339()
        )),
        "{summary}"
    );
    assert!(summary.contains("9 cleared since; 3 still active."), "{summary}");
    assert_eq!(body["urgency"], "urgent", "a high alarm is still active");
    assert!(body["recommended_actions"][0].as_str().unwrap().starts_with("Review FLOW-LO on PUMP-004 (high"), "{body}");
}

/// Occurrences on one asset are grouped by when they were raised, not by when they
/// reached the queue: raised ten hours apart, they are two events with a note each.
#[tokio::test(flavor = "multi_thread")]
async fn occurrences_raised_hours_apart_are_not_grouped() {
    let p = Plant::new();
    p.write("DELETE FROM triage_jobs");
    send(&p, &alarm("early", "raised", 0));
    let mut later = alarm("later", "raised", 600);
    later["code"] = json!("BRG-TEMP-HIHI");
    send(&p, &later);
    assert_eq!(p.count("SELECT count(*) FROM triage_jobs"), 1, "one job for the asset");
    let triage = Triage::new(rules_agent(&p), rules_agent(&p), 10);
    let notes = triage.run_next().await.unwrap().unwrap();
    assert_eq!(notes.len(), 2);
    assert_ne!(notes[0].run_id, notes[1].run_id, "a run each");
    assert!(notes.iter().all(|n| !n.flags.contains(&"grouped".to_string())), "{notes:?}");
}

/// One note per episode, on an upset sent through ingest twice, an hour apart (raw
/// water pump 1 trips; the north header's pressure falls 20 s later, the east
/// booster's suction 80 s in, the south booster's at 150 s), the second time with its
/// last point late. Each episode gets one note, written by the rules model from the
/// episode tools: it names the trip as the initiator with its evidence, the
/// consequences, and (the second time) the first episode it resembles; every member's
/// record links to it. The late point revises the note in place (same id, revision 2,
/// the point counted and covered) instead of a note of its own.
#[tokio::test(flavor = "multi_thread")]
async fn a_flood_gets_one_note_per_episode_revised_as_it_grows() {
    let p = Plant::new();
    p.write("DELETE FROM triage_jobs");
    let upset = [
        ("PUMP-001", "PUMP-TRIP", 0),
        ("VLV-001", "PRESS-LO", 20),
        ("PUMP-004", "SUCTION-LO", 80),
        ("PUMP-006", "SUCTION-LO", 150),
    ];
    let raise = |round: i64, i: usize| {
        let (asset, code, secs) = upset[i];
        let event = json!({"type": "alarm", "event_id": format!("e{round}-{i}"), "asset_id": asset, "code": code,
                           "severity": "high", "state": "raised", "time": at(60 * round + 30).plus_secs(secs).to_rfc3339(),
                           "message": code});
        let effect = send(&p, &event);
        let Applied::Raised { alarm_id, .. } = effect.alarms[0] else { panic!("{effect:?}") };
        alarm_id
    };
    let triage = Triage::new(rules_agent(&p), rules_agent(&p), 10).with_episode_revisions_every(0);
    let mut published = triage.subscribe();
    let first: Vec<i64> = (0..4).map(|i| raise(0, i)).collect();
    triage.drain().await.unwrap();
    let e1 = p.count(&format!("SELECT episode_id FROM alarms WHERE id = {}", first[0]));
    let note1 = published.try_recv().unwrap();
    assert!(published.try_recv().is_err(), "one note for the episode's four alarms on four assets");
    assert_eq!((note1.episode_id, note1.revision), (Some(e1), 1));
    let summary = note1.body["summary"].as_str().unwrap();
    assert!(
        summary.starts_with(&format!("Alarm episode {e1}: 4 alarm points, 4 activations since "))
            && summary
                .contains(&format!("Likely initiator: PUMP-001 PUMP-TRIP (alarm {}): first to annunciate", first[0])),
        "{summary}"
    );
    assert!(
        summary.contains("Following from it: VLV-001 PRESS-LO, PUMP-004 SUCTION-LO, PUMP-006 SUCTION-LO."),
        "{summary}"
    );
    assert!(summary.contains("No past episode resembles it."), "{summary}");
    assert!(!note1.flags.iter().any(|f| f == "ungrounded" || f.starts_with("set_aside")), "{:?}", note1.flags);
    let actions = note1.body["recommended_actions"].to_string();
    assert!(actions.contains("Deal with PUMP-001 PUMP-TRIP first"), "{actions}");
    let linked = |note: i64| {
        p.count(&format!(
            "SELECT count(*) FROM alarms a JOIN notes n ON n.alarm_id = a.id AND n.kind = 'triage'
             WHERE a.episode_id = (SELECT episode_id FROM notes WHERE id = {note}) AND (n.id = {note} OR n.covered_by = {note})"
        ))
    };
    assert_eq!(linked(note1.note_id), 4, "every member links to the episode's note");
    assert_eq!(note1.covers.len(), 3);
    for (i, (asset, code, _)) in upset.iter().enumerate() {
        send(
            &p,
            &json!({"type": "alarm", "event_id": format!("c{i}"), "asset_id": asset, "code": code, "severity": "high",
                    "state": "cleared", "time": at(45).to_rfc3339(), "message": code}),
        );
    }

    // The same upset an hour on, its last point late: one note, then its revision.
    let second: Vec<i64> = (0..3).map(|i| raise(1, i)).collect();
    triage.drain().await.unwrap();
    let e2 = p.count(&format!("SELECT episode_id FROM alarms WHERE id = {}", second[0]));
    assert_ne!(e1, e2);
    let note2 = published.try_recv().unwrap();
    assert!(published.try_recv().is_err());
    let summary = note2.body["summary"].as_str().unwrap();
    assert!(summary.contains(&format!("Alarm episode {e2}: 3 alarm points")), "{summary}");
    assert!(
        summary.contains(&format!("It resembles episode {e1} of "))
            && summary.contains(&format!("read its note (note {}) for what was found then", note1.note_id)),
        "{summary}"
    );
    let late = raise(1, 3);
    assert_eq!(p.count(&format!("SELECT episode_id FROM alarms WHERE id = {late}")), e2);
    triage.drain().await.unwrap();
    let revised = published.try_recv().unwrap();
    assert_eq!((revised.note_id, revised.episode_id, revised.revision), (note2.note_id, Some(e2), 2));
    assert!(revised.covers.contains(&late), "{:?}", revised.covers);
    assert!(revised.body["summary"].as_str().unwrap().contains(&format!("Alarm episode {e2}: 4 alarm points")));
    assert_eq!(p.count(&format!("SELECT count(*) FROM notes WHERE episode_id = {e2}")), 1, "revised in place");
    assert_eq!(linked(note2.note_id), 4);
    // A member's page shows the episode's note as it stands, and the episode.
    let detail = twinops::alarms::list::one(&p.store.read().unwrap(), second[1]).unwrap().unwrap();
    assert_eq!(detail["note"]["body"]["summary"], revised.body["summary"]);
    assert_eq!(detail["episode"]["note_id"], note2.note_id);
    // What a language model is given for it: the initiator's triage, the episode tools
    // in place of the plant-wide ones, and what the note must say.
    let task = rules_agent(&p).episode_task(e2).unwrap();
    assert_eq!((task.trigger.as_str(), task.facts.alarm_id), (format!("episode:{e2}").as_str(), Some(second[0])));
    let offered = &task.profile.tools;
    assert!(offered.iter().any(|t| t == "get_episode") && offered.iter().any(|t| t == "find_similar_episodes"));
    assert!(!offered.iter().any(|t| t == "list_assets" || t == "system_summary"), "{offered:?}");
    assert!(
        task.user_message.contains(&format!("ranked initiator of alarm episode {e2}: 4 alarm points"))
            && task.user_message.contains(&format!("find_similar_episodes with episode_id {e2}")),
        "{}",
        task.user_message
    );
    // Nothing more to revise: the idle worker finds no stale note.
    assert!(triage.run_next().await.unwrap().is_none());
}

/// An upset known by construction, through ingest on the demo plant and its
/// connections: raw water pump 1 trips, the north header's pressure falls 20 s later,
/// the east booster's suction 60 s after that, the south booster's at 150 s; a pump-1
/// alarm five minutes on is another matter. One episode of four points is kept as the
/// activations arrive, opened at the third, its members linked to it, pump 1's trip its
/// initiator with the evidence that ranks it; `twinops episodes list` and `show` say so.
#[test]
fn an_upset_is_kept_as_one_episode_led_by_its_initiator() {
    let p = Plant::new();
    let t0 = at(30);
    let raise = |id: &str, asset: &str, code: &str, secs: i64| {
        let event = json!({"type": "alarm", "event_id": id, "asset_id": asset, "code": code, "severity": "high",
                           "state": "raised", "time": t0.plus_secs(secs).to_rfc3339(), "message": code});
        let effect = send(&p, &event);
        let Applied::Raised { alarm_id, .. } = effect.alarms[0] else { panic!("{effect:?}") };
        alarm_id
    };
    let trip = raise("u1", "PUMP-001", "PUMP-TRIP", 0);
    let header = raise("u2", "VLV-001", "PRESS-LO", 20);
    assert_eq!(p.count("SELECT count(*) FROM episodes"), 0, "two points are no episode");
    let east = raise("u3", "PUMP-004", "PRESS-SUC-LO", 80);
    let south = raise("u4", "PUMP-006", "PRESS-SUC-LO", 150);
    let later = raise("u5", "PUMP-001", "VIB-HI", 450);
    let episode = p.count("SELECT id FROM episodes");
    let members =
        p.text("SELECT group_concat(id, ',') FROM (SELECT id FROM alarms WHERE episode_id IS NOT NULL ORDER BY id)");
    assert_eq!(members, format!("{trip},{header},{east},{south}"), "the later alarm is not a member");
    assert_eq!(
        p.count(&format!(
            "SELECT count(*) FROM episodes WHERE id = {episode} AND points = 4 AND initiator_alarm = {trip}"
        )),
        1
    );
    assert_eq!(p.count(&format!("SELECT count(*) FROM alarms WHERE id = {later} AND episode_id IS NULL")), 1);
    let out = |args: &[&str]| {
        let o = std::process::Command::new(env!("CARGO_BIN_EXE_twinops"))
            .arg("--db")
            .arg(p.db_path())
            .args(args)
            .output()
            .unwrap();
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        String::from_utf8_lossy(&o.stdout).to_string()
    };
    let listed = out(&["episodes", "list"]);
    assert!(
        listed.contains("4 points")
            && listed.contains(&format!("initiator: PUMP-001 PUMP-TRIP (alarm {trip})  no note yet")),
        "{listed}"
    );
    // The journal export says each member's episode, and no episode for the later alarm.
    let (from, to) = (t0.plus_secs(-60).to_rfc3339(), t0.plus_secs(600).to_rfc3339());
    let journal = out(&["alarms", "export", "--from", &from, "--to", &to, "-"]);
    let episode_of = |alarm: i64| -> String {
        let row = journal.lines().find(|l| l.contains(",raised,") && l.split(',').nth(7) == Some(&alarm.to_string()));
        row.unwrap_or_else(|| panic!("no raise of alarm {alarm} in\n{journal}")).rsplit(',').next().unwrap().to_string()
    };
    assert_eq!(
        [episode_of(trip), episode_of(south), episode_of(later)],
        [episode.to_string(), episode.to_string(), String::new()]
    );
    let shown: serde_json::Value = serde_json::from_str(&out(&["episodes", "show", &episode.to_string()])).unwrap();
    let timeline: Vec<(&str, f64, i64)> = shown["timeline"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| (t["asset_id"].as_str().unwrap(), t["offset_s"].as_f64().unwrap(), t["activations"].as_i64().unwrap()))
        .collect();
    assert_eq!(timeline, [("PUMP-001", 0.0, 1), ("VLV-001", 20.0, 1), ("PUMP-004", 80.0, 1), ("PUMP-006", 150.0, 1)]);
    let best = &shown["ranking"][0];
    assert_eq!((best["point"]["asset_id"].as_str(), best["alarm_id"].as_i64()), (Some("PUMP-001"), Some(trip)));
    let evidence = best["evidence"].to_string();
    assert!(
        evidence.contains("first to annunciate") && evidence.contains("3 of the 3 other points came after it"),
        "{evidence}"
    );
}
