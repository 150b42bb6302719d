//! Work orders and alarm changes of a pair through its log, on a real broker.

use super::*;

/// Work orders of a pair, on a real broker: proposed on one node through the log (the
/// same intent again is the same order), on both twins linked to each one's own alarm
/// id; approved on the other node, and the second approval is a 409 there too;
/// published, so dispatched on both; expired in order with everything else. Then its
/// alarm changes.
async fn approvals_reach_both(url: Option<String>) {
    use twinops::approvals::pair::{KIND, WorkOrderOp};
    use twinops::approvals::{Approvals, Proposer};
    use twinops::cluster::log::DecisionLog;
    use twinops::domain::{AssetId, Timestamp, WorkAction, WorkOrderDraft, WorkPriority};
    let mqtt = MqttConfig { url: broker(url), ..Default::default() };
    let (name, now) = (format!("wo{}", common::free_port()), Timestamp::now());
    let plants = [common::Plant::new(), common::Plant::new()];
    // The occurrence is on both, under different local ids.
    common::scada_event(&plants[1].store, "ev-first", ("PUMP-007", None, "OTHER"), "low", "raised", now);
    for p in &plants {
        common::scada_event(&p.store, "ev-wo", ("PUMP-007", Some("PUMP-007.VIB-DE"), "WO-TEST"), "high", "raised", now);
    }
    let alarm = |p: &common::Plant| p.count("SELECT id FROM alarms WHERE event_id = 'ev-wo'");
    assert_ne!(alarm(&plants[0]), alarm(&plants[1]));
    let (_stop, stop_rx) = watch::channel(false);
    let logs: Vec<Arc<DecisionLog>> = ["a", "b"]
        .iter()
        .zip(&plants)
        .map(|(node, p)| {
            let cfg = ClusterConfig {
                name: name.clone(),
                node: node.to_string(),
                peer_hmi: String::new(),
                lease_ms: LEASE_MS,
                renew_ms: 200,
                peer_token_file: None,
            };
            let (log, rx, _task) = DecisionLog::start(&cfg, &mqtt, stop_rx.clone()).unwrap();
            let queue = twinops::alarms::QueuePolicy::default();
            tokio::spawn(twinops::decisions::run(p.store.clone(), queue, Arc::clone(&log), rx));
            log
        })
        .collect();
    until("both logs up", Duration::from_secs(10), || logs.iter().all(|l| l.up())).await;

    let approvals = Approvals::of_pair(plants[0].store.writer().clone(), Arc::clone(&logs[0]));
    let draft = WorkOrderDraft::new(
        AssetId::parse("PUMP-007").unwrap(),
        Some(alarm(&plants[0])),
        WorkAction::VibrationAnalysis,
        WorkPriority::Urgent,
        "Vibration analysis on PUMP-007",
        "Drive-end vibration rose from 2.1 to 7.4 mm/s in two hours; the ARP asks for an analysis.",
        Vec::new(),
    )
    .unwrap();
    let propose = |draft: WorkOrderDraft| {
        let approvals = approvals.clone();
        tokio::task::spawn_blocking(move || approvals.propose(draft, Proposer::Run(5), now))
    };
    let first = propose(draft.clone()).await.unwrap().unwrap();
    assert!(first.created && first.idempotency_key == "event:ev-wo/PUMP-007/vibration_analysis", "{first:?}");
    let again = propose(draft).await.unwrap().unwrap();
    assert!(!again.created && again.work_order_id == first.work_order_id, "{again:?}");
    let key = first.idempotency_key.clone();
    let row = |p: &common::Plant| {
        let db = rusqlite::Connection::open(p.db_path()).unwrap();
        db.query_row(
            "SELECT status, alarm_id, run_id, decided_by FROM work_orders WHERE idempotency_key = ?1",
            [&key],
            |r| {
                Ok((
                    r.get::<_, String>(0)?,
                    r.get::<_, Option<i64>>(1)?,
                    r.get::<_, Option<i64>>(2)?,
                    r.get::<_, Option<String>>(3)?,
                ))
            },
        )
        .ok()
    };
    let on_both = |status: &str| plants.iter().all(|p| row(p).is_some_and(|r| r.0 == status));
    assert!(common::eventually(Duration::from_secs(10), || on_both("pending_approval")).await);
    assert_eq!(row(&plants[0]).unwrap().1, Some(alarm(&plants[0])));
    assert_eq!(row(&plants[1]).unwrap().1, Some(alarm(&plants[1])), "linked to b's own alarm id");
    assert_eq!((row(&plants[0]).unwrap().2, row(&plants[1]).unwrap().2), (Some(5), None), "the run is a's");

    let decide = |log: &Arc<DecisionLog>| {
        let op = WorkOrderOp::Decide { key: key.clone(), approve: true, reason: "crew available".into() };
        let (log, args) = (Arc::clone(log), serde_json::to_value(op).unwrap());
        async move { log.submit(KIND, args, "sup").await.unwrap() }
    };
    assert_eq!(decide(&logs[1]).await.0, 200);
    let (status, body) = decide(&logs[0]).await;
    assert_eq!(status, 409, "the second approval, on the other node: {body}");
    assert!(common::eventually(Duration::from_secs(10), || on_both("approved")).await);
    assert!(plants.iter().all(|p| row(p).unwrap().3.as_deref() == Some("sup")));

    let op = WorkOrderOp::Published { key: key.clone(), status: "approved".into() };
    assert_eq!(logs[0].submit(KIND, serde_json::to_value(op).unwrap(), "twinops").await.unwrap().0, 200);
    assert!(common::eventually(Duration::from_secs(10), || on_both("dispatched")).await);

    // An order for an occurrence that has not reached node b yet waits there, and is
    // linked to b's own alarm once it comes.
    common::scada_event(&plants[0].store, "ev-late-wo", ("PUMP-007", None, "WO-LATE"), "high", "raised", now);
    let late_alarm = plants[0].count("SELECT id FROM alarms WHERE event_id = 'ev-late-wo'");
    let late = WorkOrderDraft::new(
        AssetId::parse("PUMP-007").unwrap(),
        Some(late_alarm),
        WorkAction::Lubricate,
        WorkPriority::Normal,
        "Lubricate PUMP-007 bearings",
        "Bearing temperature creeping up 2 degC a day since the last greasing round.",
        Vec::new(),
    )
    .unwrap();
    assert!(propose(late).await.unwrap().unwrap().created);
    let waiting = "SELECT count(*) FROM decisions WHERE status = 202";
    assert!(common::eventually(Duration::from_secs(10), || plants[1].count(waiting) == 1).await);
    let linked = "SELECT count(*) FROM work_orders w JOIN alarms a ON a.id = w.alarm_id
                  WHERE w.idempotency_key = 'event:ev-late-wo/PUMP-007/lubricate' AND a.event_id = 'ev-late-wo'";
    assert_eq!(plants[1].count(linked), 0, "not on b before its alarm");
    common::scada_event(&plants[1].store, "ev-late-wo", ("PUMP-007", None, "WO-LATE"), "high", "raised", now);
    assert!(common::eventually(Duration::from_secs(10), || plants[1].count(linked) == 1).await, "linked on b");
    assert_eq!(plants[1].count(waiting), 0);

    // A proposal three days old expires on both, whichever node asks.
    let stale = WorkOrderDraft::new(
        AssetId::parse("PUMP-007").unwrap(),
        None,
        WorkAction::Inspect,
        WorkPriority::Low,
        "Inspect PUMP-007 coupling guard",
        "Guard rattles at start-up according to the round sheet; look at it at the next visit.",
        Vec::new(),
    )
    .unwrap();
    let (a, long_ago) = (approvals.clone(), now.plus_secs(-4 * 86_400));
    let old = tokio::task::spawn_blocking(move || a.propose(stale, Proposer::User("op".into()), long_ago))
        .await
        .unwrap()
        .unwrap();
    let on_b = format!("SELECT count(*) FROM work_orders WHERE idempotency_key = '{}'", old.idempotency_key);
    assert!(common::eventually(Duration::from_secs(10), || plants[1].count(&on_b) == 1).await);
    let b = Approvals::of_pair(plants[1].store.writer().clone(), Arc::clone(&logs[1]));
    assert_eq!(b.expire_due(now).await.unwrap().len(), 1);
    let expired = |p: &common::Plant| {
        p.count(&format!(
            "SELECT count(*) FROM work_orders WHERE idempotency_key = '{}' AND status = 'expired'",
            old.idempotency_key
        ))
    };
    assert!(common::eventually(Duration::from_secs(10), || plants.iter().all(|p| expired(p) == 1)).await);
    assert!(b.expire_due(now).await.unwrap().is_empty(), "nothing left to expire");
    alarm_changes_reach_both(&plants, &logs, &approvals).await;
}

/// Alarm changes of a pair: a settings change and a suppression proposed through the
/// log are on both twins under one uid; the settings change approved on one node
/// changes the sensor on both, and a second approval is a 409; the suppression
/// approved, then lifted, on the other node.
async fn alarm_changes_reach_both(
    plants: &[common::Plant],
    logs: &[Arc<twinops::cluster::log::DecisionLog>],
    approvals: &twinops::approvals::Approvals,
) {
    use twinops::alarms::definitions::Point;
    use twinops::approvals::Proposer;
    use twinops::approvals::pair::{AlarmChangeOp, CHANGE_KIND};
    let now = twinops::domain::Timestamp::now();
    // A point twinops raises from its readings: an approved change is made to the twin.
    for p in plants {
        let sql = "UPDATE sensors SET alarm_source = 'limits' WHERE id = 'PUMP-007.VIB-DE'";
        p.store
            .writer()
            .call(move |c| -> Result<usize, twinops::store::StoreError> { Ok(c.execute(sql, [])?) })
            .unwrap();
    }
    let parked = vib_hh_change(now.unix());
    let submit = |i: usize, op: AlarmChangeOp| {
        let (log, args) = (Arc::clone(&logs[i]), serde_json::to_value(op).unwrap());
        async move { log.submit(CHANGE_KIND, args, "sup").await.unwrap() }
    };
    let (status, proposal) = submit(0, AlarmChangeOp::Propose(Box::new(parked))).await;
    assert_eq!(status, 200, "{proposal}");
    let uid_of = |p: &common::Plant, sensor: &str| {
        let sql = format!("SELECT coalesce(max(uid), '') FROM alarm_changes WHERE sensor_id = '{sensor}'");
        p.text(&sql)
    };
    let settled = || plants.iter().all(|p| !uid_of(p, "PUMP-007.VIB-DE").is_empty());
    assert!(common::eventually(Duration::from_secs(10), settled).await);
    let uid = uid_of(&plants[0], "PUMP-007.VIB-DE");
    assert_eq!(uid, uid_of(&plants[1], "PUMP-007.VIB-DE"), "one name on both nodes");
    let decide = AlarmChangeOp::Decide { uid: uid.clone(), approve: true, reason: "replay agreed".into() };
    assert_eq!(submit(1, decide.clone()).await.0, 200);
    assert_eq!(submit(0, decide).await.0, 409, "the second approval, on the other node");
    let hh = "SELECT limit_hh FROM sensors WHERE id = 'PUMP-007.VIB-DE'";
    let applied = || plants.iter().all(|p| p.text(&format!("SELECT CAST(({hh}) AS TEXT)")) == "7.6");
    assert!(common::eventually(Duration::from_secs(10), applied).await, "the set point changed on both twins");

    // A suppression, proposed by the agent's way (Approvals of the pair), lifted on the other node.
    let point = |asset: &str, sensor: &str, code: &str| Point {
        asset_id: asset.into(),
        sensor_id: Some(sensor.into()),
        code: code.into(),
    };
    let (leader, follower) =
        (point("PUMP-007", "PUMP-007.VIB-DE", "VIB-HH"), point("PUMP-007", "PUMP-007.VIB-NDE", "VIB-HH"));
    let a = approvals.clone();
    let proposed = tokio::task::spawn_blocking(move || {
        a.propose_suppression(
            &leader,
            &follower,
            "NDE follows DE within 20 s in 96% of 41 floods",
            &json!({"support": 41}),
            Proposer::Run(8),
            now,
        )
    })
    .await
    .unwrap()
    .unwrap();
    assert!(proposed.created, "{proposed:?}");
    let settled = || plants.iter().all(|p| !uid_of(p, "PUMP-007.VIB-NDE").is_empty());
    assert!(common::eventually(Duration::from_secs(10), settled).await);
    let uid = uid_of(&plants[1], "PUMP-007.VIB-NDE");
    let approve = AlarmChangeOp::Decide { uid: uid.clone(), approve: true, reason: "agreed".into() };
    assert_eq!(submit(0, approve).await.0, 200);
    let (status, body) = submit(1, AlarmChangeOp::Lift { uid, reason: "bearing replaced".into() }).await;
    assert_eq!(status, 200, "{body}");
    let lifted = "SELECT count(*) FROM alarm_changes WHERE sensor_id = 'PUMP-007.VIB-NDE' AND status = 'lifted' AND lifted_by = 'sup'";
    assert!(common::eventually(Duration::from_secs(10), || plants.iter().all(|p| p.count(lifted) == 1)).await);
}

#[tokio::test(flavor = "multi_thread")]
async fn embedded_broker_approvals_reach_both_nodes() {
    approvals_reach_both(None).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn mosquitto_approvals_reach_both_nodes() {
    let Some(url) = common::external("TWINOPS_TEST_MQTT_URL", "a Mosquitto broker") else { return };
    approvals_reach_both(Some(url)).await;
}
