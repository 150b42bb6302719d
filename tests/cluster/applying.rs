//! How a node applies what the pair's log brings, on its store alone: notes of the
//! other node, decisions waiting for their occurrence or for an upgrade, pruning, a
//! change made alone decided on a copy, returned occurrences by event id.

use super::*;

/// A note of the other node waits until its lead occurrence is here, and is kept
/// waiting until every occurrence it covers is too (one that came later must not be
/// triaged again); this node's own notes, coming back on the topic, are ignored; a
/// later revision replaces an earlier one.
#[test]
fn a_note_of_the_other_node_waits_for_every_occurrence_it_covers() {
    use twinops::triage::peer;
    let p = common::Plant::new();
    let now = twinops::domain::Timestamp::now();
    let (lead, covered) = (("PUMP-007", Some("PUMP-007.VIB-DE"), "PAIR-LEAD"), ("PUMP-007", None, "PAIR-COVERED"));
    let note = |node: &str, revision: i64, summary: &str| {
        json!({"node": node, "event_id": "ev-lead", "covers_event_ids": ["ev-covered"], "episode_id": null,
               "body": {"summary": summary}, "flags": [], "created_at": now.to_rfc3339(), "revision": revision,
               "note_id": 9, "alarm_id": 9, "asset_id": "PUMP-007"})
        .to_string()
    };
    let db = rusqlite::Connection::open(p.db_path()).unwrap();
    let noted = |event: &str| {
        p.count(&format!(
            "SELECT count(*) FROM notes n JOIN alarms a ON a.id = n.alarm_id WHERE a.event_id = '{event}' AND n.from_node = 'a'"
        ))
    };
    assert_eq!(peer::hear(&db, note("b", 1, "mine").as_bytes(), "b", now), Ok(false), "its own note");
    assert!(peer::hear(&db, b"{not json", "b", now).unwrap_err().contains("not JSON"));
    assert_eq!(peer::hear(&db, note("a", 1, "first").as_bytes(), "b", now), Ok(true));
    assert_eq!(peer::adopt_pending(&db, now).unwrap(), 0, "its occurrence has not come");
    common::scada_event(&p.store, "ev-lead", lead, "high", "raised", now);
    assert_eq!(peer::adopt_pending(&db, now).unwrap(), 0, "kept: what it covers has not come");
    assert_eq!((noted("ev-lead"), noted("ev-covered")), (1, 0));
    common::scada_event(&p.store, "ev-covered", covered, "high", "raised", now);
    assert_eq!(peer::adopt_pending(&db, now).unwrap(), 1);
    assert_eq!((noted("ev-lead"), noted("ev-covered")), (1, 1));
    assert_eq!(p.count("SELECT count(*) FROM peer_notes"), 0);
    // A revision replaces the note's text in place; an older one does not.
    peer::hear(&db, note("a", 2, "second").as_bytes(), "b", now).unwrap();
    peer::adopt_pending(&db, now).unwrap();
    peer::hear(&db, note("a", 1, "stale").as_bytes(), "b", now).unwrap();
    peer::adopt_pending(&db, now).unwrap();
    let lead_note = "SELECT n.body FROM notes n JOIN alarms a ON a.id = n.alarm_id WHERE a.event_id = 'ev-lead'";
    assert!(p.text(lead_note).contains("second"), "{}", p.text(lead_note));
}

/// A decision about an occurrence that has not arrived on this node waits, recorded,
/// and is applied when the occurrence does, in the log's order; a later decision about
/// the same occurrence waits behind it; a redelivery is not applied twice.
#[test]
fn a_decision_waits_for_its_occurrence_and_keeps_the_logs_order() {
    use twinops::cluster::log::Decision;
    use twinops::decisions::{self, AlarmAction};
    let p = common::Plant::new();
    let (queue, now) = (twinops::alarms::QueuePolicy::default(), twinops::domain::Timestamp::now());
    let decision = |id: &str, action: &AlarmAction, at: i64| Decision {
        id: id.into(),
        node: "a".into(),
        kind: decisions::ALARM.into(),
        args: decisions::alarm_args("ev-late", action),
        actor: "opa".into(),
        at,
    };
    let shelve = AlarmAction::Shelve { secs: 600, reason: "crew on site".into() };
    let (ack, shelf) =
        (decision("d-ack", &AlarmAction::Acknowledge, now.unix() - 5), decision("d-shelve", &shelve, now.unix() - 3));
    for d in [&ack, &shelf] {
        let outcome = decisions::apply(&p.store, queue, "b", d).unwrap();
        assert_eq!(outcome.0, 202, "{outcome:?}");
        assert!(outcome.1["waiting"].as_str().unwrap().contains("ev-late"), "{outcome:?}");
        decisions::record(p.store.writer(), d, &outcome).unwrap();
    }
    assert_eq!(decisions::apply_waiting(&p.store, queue, "b").unwrap(), 0, "the occurrence has not come");
    common::scada_event(&p.store, "ev-late", ("PUMP-007", Some("PUMP-007.VIB-DE"), "LATE-1"), "high", "raised", now);
    let state = "SELECT state FROM alarms WHERE event_id = 'ev-late'";
    assert_eq!(p.text(state), "unacknowledged");
    // Here now, but two decisions about it wait: a third goes behind them.
    let unshelve = decision("d-unshelve", &AlarmAction::Unshelve, now.unix() - 1);
    let outcome = decisions::apply(&p.store, queue, "b", &unshelve).unwrap();
    assert_eq!(outcome.0, 202, "behind the waiting ones: {outcome:?}");
    decisions::record(p.store.writer(), &unshelve, &outcome).unwrap();
    assert_eq!(decisions::apply_waiting(&p.store, queue, "b").unwrap(), 3);
    assert_eq!(decisions::apply_waiting(&p.store, queue, "b").unwrap(), 0, "each once");
    assert_eq!(p.text(state), "acknowledged", "acknowledged, shelved, unshelved: in the log's order");
    assert_eq!(p.count("SELECT count(*) FROM alarm_events WHERE kind = 'unshelved' AND actor = 'opa'"), 1);
    assert_eq!(
        p.count(&format!("SELECT count(*) FROM alarms WHERE event_id = 'ev-late' AND acked_at = {}", now.unix() - 5)),
        1,
        "journalled at the time it was made"
    );
    assert_eq!(p.count("SELECT count(*) FROM decisions WHERE status = 200"), 3);
    let again = decisions::apply(&p.store, queue, "b", &ack).unwrap();
    assert_eq!(again.0, 200, "a redelivery answers as the decision went: {again:?}");
}

/// A node upgraded first may make a decision of a kind the other's version does not
/// know: the other keeps it, waiting, instead of refusing and losing it, and applies it
/// once upgraded (its record as the old version left it, read by this version).
#[test]
fn a_decision_of_a_later_version_waits_for_the_upgrade() {
    use twinops::cluster::log::Decision;
    use twinops::decisions;
    let p = common::Plant::new();
    let queue = twinops::alarms::QueuePolicy::default();
    let later = Decision::new("a", "shift_roster", json!({"crew": "B"}), "sup");
    let outcome = decisions::apply(&p.store, queue, "b", &later).unwrap();
    assert_eq!((outcome.0, &outcome.1["unknown_kind"]), (202, &json!(true)), "{outcome:?}");
    assert!(outcome.1["waiting"].as_str().unwrap().contains("upgraded"), "{outcome:?}");
    decisions::record(p.store.writer(), &later, &outcome).unwrap();
    assert_eq!(decisions::apply_waiting(&p.store, queue, "b").unwrap(), 0, "still unknown: it waits");

    // What an older version recorded of a decision this one knows: a new user.
    let op = twinops::accounts::AccountOp::add_user("op.later", twinops::domain::Role::Viewer, "a long password here")
        .unwrap();
    let user = Decision::new("a", twinops::accounts::changes::KIND, serde_json::to_value(op).unwrap(), "adm");
    let old = (202, json!({"waiting": "a decision of kind 'account' ...", "unknown_kind": true}));
    decisions::record(p.store.writer(), &user, &old).unwrap();
    assert_eq!(decisions::apply_waiting(&p.store, queue, "b").unwrap(), 1, "known now: applied");
    assert_eq!(p.count("SELECT count(*) FROM users WHERE name = 'op.later'"), 1);
    assert_eq!(p.count(&format!("SELECT status FROM decisions WHERE id = '{}'", user.id)), 200);
    assert_eq!(decisions::apply_waiting(&p.store, queue, "b").unwrap(), 0, "once");
}

/// Applied decisions older than `KEEP_DAYS` are pruned, a waiting one is kept however
/// old, and the node's progress still counts what was pruned (the other node compares
/// it with its own).
#[test]
fn old_applied_decisions_are_pruned_and_still_counted() {
    use twinops::cluster::log::Decision;
    use twinops::decisions;
    let p = common::Plant::new();
    let now = twinops::domain::Timestamp::now();
    let made = |kind: &str, status: u16| {
        let d = Decision::new("a", kind, json!({"event_id": "E-404"}), "op");
        decisions::record(p.store.writer(), &d, &(status, json!({}))).unwrap();
        d.id
    };
    let old: Vec<String> = (0..1500).map(|_| made("alarm", 200)).collect();
    let (recent, waiting) = (made("alarm", 409), made("alarm", 202));
    let age = format!("UPDATE decisions SET applied_at = {} WHERE id <> '{recent}'", now.unix() - 31 * 86_400);
    p.store.writer().call(move |c| Ok::<_, twinops::store::StoreError>(c.execute(&age, [])?)).unwrap();
    let before = decisions::progress(&p.store).unwrap();
    assert_eq!(before.decisions, 1501);

    assert_eq!(decisions::prune(p.store.writer(), now).unwrap(), old.len(), "in batches, all of them");
    let left = p.text("SELECT group_concat(id, ' ') FROM (SELECT id FROM decisions ORDER BY rowid)");
    assert_eq!(left, format!("{recent} {waiting}"), "the recent and the waiting are kept");
    assert_eq!(decisions::progress(&p.store).unwrap(), before, "progress counts the pruned");
    assert_eq!(decisions::prune(p.store.writer(), now).unwrap(), 0, "nothing more");
    assert_eq!(decisions::progress(&p.store).unwrap(), before);
}

/// An alarm change proposed on a node alone is named from its id and time, so on a pair
/// made of that node and a copy of its twin (`twinops backup`), a decision through the
/// log finds it on both and applies it alike.
#[test]
fn an_alarm_change_made_alone_is_decided_through_the_log_on_a_copy() {
    use twinops::approvals::alarm_changes;
    use twinops::approvals::pair::{AlarmChangeOp, CHANGE_KIND};
    use twinops::cluster::log::Decision;
    use twinops::decisions;
    let a = common::Plant::new();
    a.write("UPDATE sensors SET alarm_source = 'limits' WHERE id = 'PUMP-007.VIB-DE'");
    let parked = vib_hh_change(twinops::domain::Timestamp::now().unix());
    let proposal = a.store.writer().call(move |c| alarm_changes::park(c, &parked, None)).unwrap();
    let uid = a.text("SELECT uid FROM alarm_changes");
    assert_eq!(uid, format!("local-{}-{}", proposal.alarm_change_id, a.count("SELECT proposed_at FROM alarm_changes")));

    let dir = tempfile::tempdir().unwrap();
    twinops::store::backup(&a.db_path(), &dir.path().join("b.db")).unwrap();
    let b = twinops::store::Store::open(&dir.path().join("b.db")).unwrap();
    let decide = AlarmChangeOp::Decide { uid, approve: true, reason: "replay agreed".into() };
    let d = Decision::new("b", CHANGE_KIND, serde_json::to_value(decide).unwrap(), "sup");
    let queue = twinops::alarms::QueuePolicy::default();
    for (store, here) in [(&a.store, "a"), (&b, "b")] {
        let (status, body) = decisions::apply(store, queue, here, &d).unwrap();
        assert_eq!(status, 200, "on {here}: {body}");
        let hh: f64 = store
            .read()
            .unwrap()
            .query_row("SELECT limit_hh FROM sensors WHERE id = 'PUMP-007.VIB-DE'", [], |r| r.get(0))
            .unwrap();
        assert_eq!(hh, 7.6, "the set point changed on {here}");
    }
}

/// A point's returned occurrences acknowledged at once, through the log: those the
/// deciding node named (by event id) are acknowledged here, one this node lacks is
/// left out, and the same again is a 409.
#[test]
fn a_points_returned_occurrences_are_acknowledged_by_event_id() {
    use twinops::cluster::log::Decision;
    use twinops::decisions;
    let p = common::Plant::new();
    let point = "asset_id = 'PUMP-004' AND code = 'PRESS-SUC-LO' AND state = 'rtn_unacknowledged'";
    let name = format!("UPDATE alarms SET event_id = 'ret-' || id WHERE {point} AND event_id IS NULL");
    p.store.writer().call(move |c| -> Result<usize, twinops::store::StoreError> { Ok(c.execute(&name, [])?) }).unwrap();
    let mut events: Vec<String> = {
        let db = p.store.read().unwrap();
        let mut stmt = db.prepare(&format!("SELECT event_id FROM alarms WHERE {point} ORDER BY id")).unwrap();
        stmt.query_map([], |r| r.get(0)).unwrap().map(Result::unwrap).collect()
    };
    let waiting = events.len();
    assert!(waiting > 1, "the seeded plant has repeats: {waiting}");
    events.push("ret-not-here".into());
    let (queue, now) = (twinops::alarms::QueuePolicy::default(), twinops::domain::Timestamp::now());
    let decision = |id: &str| Decision {
        id: id.into(),
        node: "a".into(),
        kind: decisions::RETURNED.into(),
        args: decisions::returned_args(&events[0], &events),
        actor: "opa".into(),
        at: now.unix(),
    };
    let (status, body) = decisions::apply(&p.store, queue, "b", &decision("d-ret-1")).unwrap();
    assert_eq!((status, body["acknowledged"].as_array().map(Vec::len)), (200, Some(waiting)), "{body}");
    assert_eq!(p.count(&format!("SELECT count(*) FROM alarms WHERE {point}")), 0);
    let (status, body) = decisions::apply(&p.store, queue, "b", &decision("d-ret-2")).unwrap();
    assert_eq!(status, 409, "{body}");
}
