//! Every tool against the seeded demo plant: a correct call, its error paths (with the
//! hint each message must give), hostile strings, paging edges and truncation.

mod common;

use common::Plant;
use serde_json::{Value, json};
use twinops::tools::{self, MAX_RESULT_CHARS};

// ------------------------------------------------------------------------------------
// Definitions
// ------------------------------------------------------------------------------------

/// Every schema is derived, closed to unknown fields, and bounded where it pages.
#[test]
fn tool_schemas_are_strict_and_bounded() {
    let names: Vec<_> = tools::all().iter().map(|t| t.name).collect();
    assert_eq!(
        names,
        [
            "get_system_summary",
            "list_assets",
            "get_asset_details",
            "list_alarms",
            "get_sensor_history",
            "search_docs",
            "read_doc",
            "get_shift_handover",
            "get_alarm_kpis",
            "get_episode",
            "find_similar_episodes",
            "get_alarm_correlations",
            "propose_work_order",
            "propose_alarm_change"
        ]
    );
    for t in tools::all() {
        assert_eq!(t.schema["type"], "object", "{}", t.name);
        assert_eq!(t.schema["additionalProperties"], false, "{} must reject unknown fields", t.name);
        assert!(t.description.len() > 150, "{} needs a description that says what comes back", t.name);
    }
    let limit = &tools::find("list_assets").unwrap().schema["properties"]["limit"];
    assert_eq!((limit["minimum"].as_i64(), limit["maximum"].as_i64()), (Some(1), Some(50)));
    let propose = &tools::find("propose_work_order").unwrap().schema;
    assert!(propose["required"].as_array().unwrap().contains(&json!("action")));
    assert!(propose["properties"]["action"]["enum"].as_array().unwrap().contains(&json!("replace_bearing")));
    assert_eq!(tools::find("propose_work_order").unwrap().access, twinops::domain::Access::Propose);
    let level = &tools::find("propose_alarm_change").unwrap().schema["properties"]["level"];
    assert!(level.to_string().contains("\"hh\""), "{level}");
    let proposers = ["propose_work_order", "propose_alarm_change"];
    for t in tools::all() {
        let expected =
            if proposers.contains(&t.name) { twinops::domain::Access::Propose } else { twinops::domain::Access::Read };
        assert_eq!(t.access, expected, "{}", t.name);
    }
}

/// A tool that does not exist is an error result naming the ones that do.
#[test]
fn unknown_tool_lists_the_real_ones() {
    let p = Plant::new();
    let msg = p.err("delete_asset", json!({}));
    assert!(msg.contains("no tool named 'delete_asset'") && msg.contains("get_asset_details"), "{msg}");
}

/// Wrong types, unknown fields, and non-object arguments are explained.
#[test]
fn malformed_arguments_are_explained() {
    let p = Plant::new();
    let msg = p.err("get_asset_details", json!({"asset_id": 7}));
    assert!(msg.starts_with("Invalid arguments for get_asset_details") && msg.contains("invalid type"), "{msg}");
    let msg = p.err("get_asset_details", json!({"asset_id": "PUMP-007", "verbose": true}));
    assert!(msg.contains("unknown field `verbose`"), "{msg}");
    let msg = p.err("get_asset_details", json!({}));
    assert!(msg.contains("missing field `asset_id`"), "{msg}");
    let msg = p.err("list_assets", json!(["PUMP-007"]));
    assert!(msg.contains("must be a JSON object, got an array"), "{msg}");
    let msg = p.err("list_assets", json!({"kind": "pump"}));
    assert!(msg.contains("centrifugal_pump"), "an enum error lists the accepted values: {msg}");
}

// ------------------------------------------------------------------------------------
// get_system_summary
// ------------------------------------------------------------------------------------

/// The summary counts the plant and puts the developing bearing fault first.
#[test]
fn system_summary_points_at_the_worst_asset() {
    let p = Plant::new();
    let s = p.ok("get_system_summary", json!({}));
    assert_eq!(s["assets"]["total"], 18);
    assert_eq!(s["assets"]["by_status"]["standby"], 4);
    let active = p.count("SELECT count(*) FROM alarms WHERE cleared_at IS NULL");
    assert_eq!(s["active_alarms"]["total"], active);
    let first = &s["needs_attention"][0];
    assert_eq!(first["asset_id"], "PUMP-007", "{s:#}");
    assert!(first["reason"].as_str().unwrap().contains("VIB-HI"), "{first}");
    assert!(s["next"].as_str().unwrap().contains("get_asset_details"));
    assert!(p.err("get_system_summary", json!({"x": 1})).contains("unknown field"));
}

// ------------------------------------------------------------------------------------
// list_assets
// ------------------------------------------------------------------------------------

/// Filters combine, and pages carry total and next_offset to the last row.
#[test]
fn list_assets_filters_and_pages() {
    let p = Plant::new();
    let all = p.ok("list_assets", json!({"kind": "centrifugal_pump"}));
    assert_eq!(all["total"], 7);
    assert_eq!(all["next_offset"], Value::Null);
    let ids: Vec<&str> = all["assets"].as_array().unwrap().iter().map(|a| a["id"].as_str().unwrap()).collect();
    assert_eq!(ids, ["PUMP-001", "PUMP-002", "PUMP-003", "PUMP-004", "PUMP-005", "PUMP-006", "PUMP-007"]);

    let page = p.ok("list_assets", json!({"kind": "centrifugal_pump", "limit": 3}));
    assert_eq!((page["assets"].as_array().unwrap().len(), page["next_offset"].as_i64()), (3, Some(3)));
    let last = p.ok("list_assets", json!({"kind": "centrifugal_pump", "limit": 3, "offset": 6}));
    assert_eq!(last["assets"].as_array().unwrap().len(), 1);
    assert_eq!(last["next_offset"], Value::Null);
    let past = p.ok("list_assets", json!({"kind": "centrifugal_pump", "offset": 7}));
    assert!(past["assets"].as_array().unwrap().is_empty());
    let exact = p.ok("list_assets", json!({"kind": "centrifugal_pump", "limit": 7}));
    assert_eq!(exact["next_offset"], Value::Null, "a full last page has no next page");
    assert!(p.ok("list_assets", json!({"offset": 100}))["hint"].as_str().unwrap().contains("past the last row"));

    let south = p.ok("list_assets", json!({"station_id": "stn-s", "status": "running", "kind": "motor"}));
    assert_eq!(south["total"], 2);
    let text = p.ok("list_assets", json!({"text": "BOOSTER"}));
    assert!(
        text["assets"].as_array().unwrap().iter().all(|a| a["name"]
            .as_str()
            .unwrap()
            .to_lowercase()
            .contains("booster"))
    );
    assert_eq!(p.ok("list_assets", json!({"text": "pump-007"}))["total"], 1);
}

#[test]
fn list_assets_bounds_and_unknown_station() {
    let p = Plant::new();
    for limit in [0, 51, -1] {
        let msg = p.err("list_assets", json!({"limit": limit}));
        assert!(msg.contains("limit must be between 1 and 50"), "{msg}");
    }
    assert!(p.err("list_assets", json!({"offset": -5})).contains("offset must be between 0"));
    let msg = p.err("list_assets", json!({"station_id": "STN-X"}));
    assert!(msg.contains("No station STN-X") && msg.contains("STN-S (South Booster Station)"), "{msg}");
    assert!(p.err("list_assets", json!({"text": "  "})).contains("must not be empty"));
}

/// `%` and `_` match themselves, quotes and SQL are plain text: no extra rows, no SQL
/// error text reaches the model.
#[test]
fn list_assets_is_safe_against_injection_and_wildcards() {
    let p = Plant::new();
    for text in ["%", "_", "\\", "%%", "PUMP_00", "' OR 1=1 --", "\" OR \"\"=\"", "'); DROP TABLE assets; --"] {
        let r = p.ok("list_assets", json!({"text": text}));
        assert_eq!(r["total"], 0, "text {text:?} matched rows: {r}");
    }
    let msg = p.err("list_assets", json!({"station_id": "STN-S' OR '1'='1"}));
    assert!(msg.starts_with("No station") && !msg.to_lowercase().contains("syntax"), "{msg}");
    assert_eq!(p.count("SELECT count(*) FROM assets"), 18, "nothing was dropped");
}

// ------------------------------------------------------------------------------------
// get_asset_details
// ------------------------------------------------------------------------------------

/// PUMP-007's drive end is in alarm and zone C, up over the last day, with its alarm,
/// its motor and its maintenance history in the same answer.
#[test]
fn asset_details_show_the_developing_bearing_fault() {
    let p = Plant::new();
    let d = p.ok("get_asset_details", json!({"asset_id": "pump-007"}));
    assert_eq!(d["asset"]["id"], "PUMP-007");
    assert_eq!(d["asset"]["driven_by"], "MTR-007");
    assert_eq!(d["asset"]["criticality"], "A");
    let sensors = d["sensors"].as_array().unwrap();
    assert_eq!(sensors.len(), 6);
    let de = sensors.iter().find(|s| s["id"] == "PUMP-007.VIB-DE").unwrap();
    assert_eq!(de["unit"], "mm/s");
    assert_eq!(de["band"], "high");
    assert!(de["latest"]["value"].as_f64().unwrap() > 4.5);
    assert!(de["change_24h"].as_f64().unwrap() > 0.5, "{de}");
    assert!(de["iso_10816_zone"].as_str().unwrap().starts_with("C "), "{de}");
    assert_eq!(de["limits"]["h"], 4.5);
    let alarms = d["active_alarms"].as_array().unwrap();
    assert!(alarms.iter().any(|a| a["code"] == "VIB-HI" && a["sensor_id"] == "PUMP-007.VIB-DE"), "{alarms:?}");
    assert!(d["recent_maintenance"][0]["summary"].as_str().unwrap().contains("vibration route"));
    let motor = p.ok("get_asset_details", json!({"asset_id": "MTR-007"}));
    assert_eq!(motor["asset"]["drives"], "PUMP-007");
}

#[test]
fn asset_details_errors_name_the_next_move() {
    let p = Plant::new();
    let msg = p.err("get_asset_details", json!({"asset_id": "PUMP-070"}));
    assert!(
        msg.contains("No asset with id PUMP-070. Closest asset ids: PUMP-007,") && msg.contains("list_assets"),
        "{msg}"
    );
    let msg = p.err("get_asset_details", json!({"asset_id": "PUMP-007.VIB-DE"}));
    assert!(msg.contains("is a sensor id, not an asset id") && msg.contains("its asset is PUMP-007"), "{msg}");
    assert!(msg.contains("asset_id=\"PUMP-007\"") && msg.contains("get_sensor_history"), "{msg}");
    let msg = p.err("get_asset_details", json!({"asset_id": "pump seven"}));
    assert!(msg.contains("is not an asset id: ids are the site's own") && msg.contains("list_assets"), "{msg}");
    let msg = p.err("get_asset_details", json!({"asset_id": "PUMP-007' OR '1'='1"}));
    assert!(msg.contains("not an asset id") && !msg.to_lowercase().contains("sql"), "{msg}");
}

// ------------------------------------------------------------------------------------
// list_alarms
// ------------------------------------------------------------------------------------

#[test]
fn list_alarms_filters_by_asset_state_severity_and_time() {
    let p = Plant::new();
    let all = p.ok("list_alarms", json!({"asset_id": "PUMP-007", "limit": 50}));
    let total = p.count("SELECT count(*) FROM alarms WHERE asset_id = 'PUMP-007'");
    assert!(total >= 3, "the bearing fault raises VIB-HI repeatedly");
    assert_eq!(all["total"], total);
    let rows = all["alarms"].as_array().unwrap();
    assert!(rows.windows(2).all(|w| w[0]["raised_at"].as_str() >= w[1]["raised_at"].as_str()), "newest first");
    assert!(rows.iter().all(|a| a["asset_id"] == "PUMP-007"));

    let active = p.ok("list_alarms", json!({"state": "active"}));
    assert!(active["alarms"].as_array().unwrap().iter().all(|a| a["cleared_at"].is_null()));
    assert_eq!(active["total"], p.count("SELECT count(*) FROM alarms WHERE cleared_at IS NULL"));

    let none = p.ok("list_alarms", json!({"min_severity": "critical"}));
    assert_eq!(none["total"], 0);
    assert!(none["hint"].as_str().unwrap().contains("Widen"));
    let medium = p.ok("list_alarms", json!({"min_severity": "medium", "limit": 1}));
    assert_eq!(medium["total"], p.count("SELECT count(*) FROM alarms WHERE severity IN ('medium','high','critical')"));

    let recent = p.ok("list_alarms", json!({"last_hours": 6}));
    let since = common::end().unix() - 6 * 3600;
    assert_eq!(recent["total"], p.count(&format!("SELECT count(*) FROM alarms WHERE raised_at >= {since}")));
    let window = p.ok("list_alarms", json!({"since": "2026-11-23T00:00:00Z", "until": "2026-11-24T00:00:00Z"}));
    assert!(
        window["alarms"].as_array().unwrap().iter().all(|a| a["raised_at"].as_str().unwrap().starts_with("2026-11-23"))
    );
}

#[test]
fn list_alarms_errors() {
    let p = Plant::new();
    assert!(
        p.err("list_alarms", json!({"since": "yesterday"})).contains("since: 'yesterday' is not a time: use RFC 3339")
    );
    assert!(p.err("list_alarms", json!({"last_hours": 5, "since": "2026-11-29T00:00:00Z"})).contains("not both"));
    assert!(p.err("list_alarms", json!({"last_hours": 0})).contains("last_hours must be between 1 and 720"));
    assert!(
        p.err("list_alarms", json!({"since": "2026-11-29T00:00:00Z", "until": "2026-11-28T00:00:00Z"}))
            .contains("window is empty")
    );
    assert!(p.err("list_alarms", json!({"state": "open"})).contains("rtn_unacknowledged"));
    assert!(p.err("list_alarms", json!({"asset_id": "PUMP-999"})).contains("No asset with id PUMP-999"));
}

/// A result too long for the model is cut to whole items, with the paging fixed and a
/// marker that says what was cut and how to narrow.
#[test]
fn long_results_are_truncated_with_a_marker() {
    let p = Plant::new();
    p.write(
        "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 60)
         INSERT INTO alarms (event_id, asset_id, sensor_id, code, severity, state, message, raised_at, last_raised_at, cleared_at)
         SELECT 'long-' || i, 'PUMP-001', 'PUMP-001.FLOW', 'FLOW-LO', 'medium', 'cleared',
                'flow low ' || printf('%.*c', 1000, 'x'), 1764000000 + i, 1764000000 + i, 1764000100 + i FROM n",
    );
    let out = p.call("list_alarms", json!({"asset_id": "PUMP-001", "limit": 50}));
    assert!(!out.is_error);
    assert!(out.content.len() <= MAX_RESULT_CHARS, "{} characters", out.content.len());
    let r: Value = serde_json::from_str(&out.content).expect("still valid JSON");
    let kept = r["alarms"].as_array().unwrap().len() as i64;
    assert!(kept > 0 && kept < 50, "kept {kept}");
    assert_eq!(r["next_offset"], kept, "paging resumes at the first item cut");
    let note = r["truncated"].as_str().unwrap();
    assert!(
        note.contains(&format!("{} item(s) of 'alarms' omitted", 50 - kept)) && note.contains("Narrow with asset_id"),
        "{note}"
    );
}

// ------------------------------------------------------------------------------------
// get_sensor_history
// ------------------------------------------------------------------------------------

#[test]
fn sensor_history_summarises_the_trend() {
    let p = Plant::new();
    let h = p.ok("get_sensor_history", json!({"sensor_id": "PUMP-007.VIB-DE", "hours": 168, "points": 14}));
    assert_eq!(h["sensor"]["unit"], "mm/s");
    assert_eq!(h["samples"], 7 * 24 * 60);
    let stats = &h["stats"];
    assert!(stats["trend"]["per_day"].as_f64().unwrap() > 0.3, "{stats}");
    assert!(stats["max"].as_f64().unwrap() > 4.5 && stats["first"].as_f64().unwrap() < 3.0, "{stats}");
    assert!(h["minutes_beyond_limits"]["h"].as_i64().unwrap() > 60);
    let rows = h["series"]["rows"].as_array().unwrap();
    assert_eq!(rows.len(), 14, "one row per bucket, never the raw points");
    let means: Vec<f64> = rows.iter().map(|r| r[1].as_f64().unwrap()).collect();
    assert!(means.last().unwrap() > &(means[0] * 2.0), "{means:?}");

    let day = p.ok("get_sensor_history", json!({"sensor_id": "pump-004.press-suc"}));
    assert_eq!(day["samples"], 24 * 60);
    assert_eq!(day["series"]["rows"].as_array().unwrap().len(), 24);
    assert!(day["stats"]["std_dev"].as_f64().unwrap() > 0.03, "cavitation makes suction unsteady");

    let old = p.ok("get_sensor_history", json!({"sensor_id": "PUMP-007.VIB-DE", "until": "2026-01-01T00:00:00Z"}));
    assert_eq!(old["samples"], 0);
    assert!(old["hint"].as_str().unwrap().contains("latest reading is at 2026-11-30T12:00:00Z"));
}

#[test]
fn sensor_history_errors_name_the_sensors() {
    let p = Plant::new();
    let msg = p.err("get_sensor_history", json!({"sensor_id": "PUMP-007"}));
    assert!(msg.contains("is an asset id, not a sensor id") && msg.contains("PUMP-007.VIB-DE"), "{msg}");
    let msg = p.err("get_sensor_history", json!({"sensor_id": "PUMP-007.VIB-D"}));
    assert!(msg.contains("No sensor PUMP-007.VIB-D") && msg.contains("Did you mean PUMP-007.VIB-DE"), "{msg}");
    let msg = p.err("get_sensor_history", json!({"sensor_id": "PUMP-099.VIB-DE"}));
    assert!(msg.contains("there is no asset PUMP-099 either") && msg.contains("list_assets"), "{msg}");
    assert!(
        p.err("get_sensor_history", json!({"sensor_id": "PUMP-007.VIB-DE", "hours": 169}))
            .contains("hours must be between 1 and 168")
    );
    assert!(
        p.err("get_sensor_history", json!({"sensor_id": "PUMP-007.VIB-DE", "points": 1000}))
            .contains("points must be between 4 and 96")
    );
    assert!(
        p.err("get_sensor_history", json!({"sensor_id": "x'; --"}))
            .contains("is not a sensor id: ids are the site's own")
    );
}

// ------------------------------------------------------------------------------------
// search_docs and read_doc
// ------------------------------------------------------------------------------------

/// The alarm code of the developing fault finds its own response procedure first.
#[test]
fn search_docs_finds_the_response_procedure_first() {
    let p = Plant::new();
    for (query, expected) in [
        ("VIB-HI", "VIB-HI: bearing vibration high"),
        ("PRESS-SUC-LO", "PRESS-SUC-LO: suction pressure low"),
        ("LEVEL-LO", "LEVEL-LO: reservoir level low"),
        ("What should I do about a VIB-HI alarm on PUMP-007?", "VIB-HI: bearing vibration high"),
        ("symptoms of cavitation on a booster pump", "Symptoms on the SCADA trends"),
    ] {
        let r = p.ok("search_docs", json!({"query": query}));
        let first = &r["results"][0];
        assert!(first["heading"].as_str().unwrap().ends_with(expected), "{query}: {r:#}");
        assert!(first["citation"].as_str().unwrap().contains(".md#"));
    }
    let r = p.ok("search_docs", json!({"query": "pump", "limit": 3}));
    assert_eq!(r["results"].as_array().unwrap().len(), 3);
    let none = p.ok("search_docs", json!({"query": "zeppelin"}));
    assert!(none["results"].as_array().unwrap().is_empty() && none["hint"].as_str().unwrap().contains("alarm code"));
}

#[test]
fn search_docs_treats_query_syntax_as_text() {
    let p = Plant::new();
    assert!(p.err("search_docs", json!({"query": "the of and ?"})).contains("no words to search for"));
    for q in ["\"unbalanced", "pump* NEAR(bearing", "') OR 1=1 --", "body:vibration"] {
        let out = p.call("search_docs", json!({"query": q}));
        assert!(!out.is_error, "{q}: {}", out.content);
    }
    assert!(p.err("search_docs", json!({"query": "x".repeat(501)})).contains("at most 500 characters"));
    assert!(p.err("search_docs", json!({"query": "pump", "limit": 11})).contains("limit must be between 1 and 10"));
}

#[test]
fn read_doc_returns_a_chunk_and_its_neighbours() {
    let p = Plant::new();
    let d = p.ok("read_doc", json!({"citation": "arp-vibration.md#1"}));
    assert!(d["heading"].as_str().unwrap().ends_with("VIB-HI: bearing vibration high"));
    assert!(d["text"].as_str().unwrap().contains("Time to respond:** within 8 hours"));
    assert_eq!((d["previous"].as_str(), d["next"].as_str()), (Some("arp-vibration.md#0"), Some("arp-vibration.md#2")));
    assert_eq!(p.ok("read_doc", json!({"citation": "arp-vibration.md#0"}))["previous"], Value::Null);

    let msg = p.err("read_doc", json!({"citation": "arp-vibration.md#40"}));
    assert!(msg.contains("arp-vibration.md has chunks #0 to #2"), "{msg}");
    let msg = p.err("read_doc", json!({"citation": "arp-vibraton.md#1"}));
    assert!(msg.contains("No document arp-vibraton.md") && msg.contains("arp-vibration.md"), "{msg}");
    let msg = p.err("read_doc", json!({"citation": "../../etc/passwd#0"}));
    assert!(msg.contains("not a citation key") && msg.contains("search_docs"), "{msg}");
}

// ------------------------------------------------------------------------------------
// propose_work_order
// ------------------------------------------------------------------------------------

/// The latest handover or an earlier one, as written, with who asked; none yet, or
/// asking further back than there are, says what to do instead.
#[test]
fn shift_handover_reads_the_latest_or_an_earlier_one() {
    let p = Plant::new();
    let none = p.err("get_shift_handover", json!({}));
    assert!(none.contains("No shift handover has been written yet") && none.contains("get_system_summary"), "{none}");
    p.write(
        "INSERT INTO agent_runs (id, profile, trigger, started_at) VALUES (901, 'handover', 'schedule:handover', 1796000000);
         INSERT INTO notes (kind, run_id, body, flags, created_at)
             VALUES ('handover', 901, '{\"text\":\"Night: PUMP-007 vibration rising; watch it.\"}', '[]', 1796000000);
         INSERT INTO notes (kind, run_id, body, flags, created_at)
             VALUES ('handover', NULL, '{\"text\":\"Day: PUMP-004 suction low at 0.41 bar.\"}', '[\"ungrounded\"]', 1796028800);",
    );
    let latest = p.ok("get_shift_handover", json!({}));
    assert_eq!(latest["text"], "Day: PUMP-004 suction low at 0.41 bar.");
    assert_eq!(
        (latest["flags"].clone(), latest["written_at"].as_str()),
        (json!(["ungrounded"]), Some("2026-11-30T08:53:20Z"))
    );
    let earlier = p.ok("get_shift_handover", json!({"back": 1}));
    assert_eq!(
        (earlier["text"].as_str(), earlier["written_by"].as_str()),
        (Some("Night: PUMP-007 vibration rising; watch it."), Some("schedule:handover"))
    );
    let beyond = p.err("get_shift_handover", json!({"back": 2}));
    assert!(beyond.contains("There are only 2 handovers: back must be at most 1"), "{beyond}");
    let range = p.err("get_shift_handover", json!({"back": 10}));
    assert!(range.contains("back must be between 0 and 9, got 10"), "{range}");
}

fn proposal(alarm_id: i64) -> Value {
    json!({
        "asset_id": "PUMP-007", "alarm_id": alarm_id, "action": "replace_bearing", "priority": "urgent",
        "title": "Replace PUMP-007 drive-end bearing",
        "justification": "VIB-DE at 6.3 mm/s (zone C), rising 1.5 mm/s in 24 h; bearing temperature following.",
        "evidence": ["arp-vibration.md#1"],
    })
}

/// A proposal is parked as pending_approval; the same intent again changes nothing.
#[test]
fn proposals_are_pending_and_idempotent() {
    let p = Plant::new();
    let alarm = p.count("SELECT id FROM alarms WHERE asset_id = 'PUMP-007' AND cleared_at IS NULL");
    let first = p.ok("propose_work_order", proposal(alarm));
    assert_eq!((first["status"].as_str(), first["created"].as_bool()), (Some("pending_approval"), Some(true)));
    assert!(first["message"].as_str().unwrap().contains("A supervisor must approve it"));
    let mut reworded = proposal(alarm);
    reworded["title"] = json!("Bearing change on south booster pump 2");
    let second = p.ok("propose_work_order", reworded);
    assert_eq!(second["work_order_id"], first["work_order_id"]);
    assert_eq!(second["created"], false);
    assert_eq!(p.count("SELECT count(*) FROM work_orders"), 1);
    assert_eq!(
        p.count("SELECT count(*) FROM work_orders WHERE status = 'pending_approval' AND proposed_by = 'agent:run/1'"),
        1
    );

    // Once decided, the same intent reports the decision instead of re-proposing.
    p.write("UPDATE work_orders SET status = 'rejected', decided_by = 'sup.ng', decision_reason = 'spares due Friday'");
    let again = p.ok("propose_work_order", proposal(alarm));
    let msg = again["message"].as_str().unwrap();
    assert!(msg.contains("was rejected by sup.ng") && msg.contains("spares due Friday"), "{msg}");
    assert_eq!(p.count("SELECT count(*) FROM work_orders"), 1);
}

#[test]
fn proposals_are_checked_before_anything_is_written() {
    let p = Plant::new();
    let other = p.count("SELECT id FROM alarms WHERE asset_id = 'PUMP-004' LIMIT 1");
    let msg = p.err("propose_work_order", proposal(other));
    assert!(msg.contains(&format!("Alarm {other} is on PUMP-004, not PUMP-007")), "{msg}");
    assert!(p.err("propose_work_order", proposal(999_999)).contains("No alarm with alarm_id 999999"));
    let mut bad = proposal(1);
    bad["evidence"] = json!(["arp-vibration.md#99"]);
    bad["alarm_id"] = Value::Null;
    assert!(p.err("propose_work_order", bad.clone()).contains("do not exist: arp-vibration.md#99"));
    bad["evidence"] = json!([]);
    bad["title"] = json!("Fix");
    assert!(p.err("propose_work_order", bad.clone()).contains("title must be 5 to 120 characters"));
    bad["title"] = json!("Replace bearing");
    bad["action"] = json!("approve");
    assert!(p.err("propose_work_order", bad).contains("replace_bearing"), "the accepted actions are listed");
    assert_eq!(p.count("SELECT count(*) FROM work_orders"), 0);
}

/// Long windows read hourly rollups plus the raw readings at the ragged ends; the
/// result must equal what the raw readings alone give.
#[test]
fn sensor_history_from_rollups_matches_the_raw_readings() {
    let p = Plant::new();
    for (sensor, until, hours) in [
        ("PUMP-007.VIB-DE", "2026-11-30T11:30:30Z", 30),
        ("PUMP-004.PRESS-SUC", "2026-11-30T12:00:00Z", 168),
        ("PUMP-004.PRESS-SUC", "2026-11-29T07:59:59Z", 2),
    ] {
        let h = p.ok("get_sensor_history", json!({"sensor_id": sensor, "until": until, "hours": hours}));
        let to = twinops::domain::parse_time(until).unwrap().unix();
        let from = to - hours * 3600;
        let db = p.store.read().unwrap();
        let (n, min, max, mean, beyond_l): (i64, f64, f64, f64, i64) = db
            .query_row(
                "SELECT count(*), min(value), max(value), avg(value),
                        sum(value < coalesce(s.limit_l, -1e300))
                 FROM readings r JOIN sensors s ON s.key = r.sensor_key
                 WHERE s.id = ?1 AND ts > ?2 AND ts <= ?3",
                rusqlite::params![sensor, from * 1000, to * 1000],
                |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?, r.get(4)?)),
            )
            .unwrap();
        let stats = &h["stats"];
        assert_eq!(h["samples"], n, "{sensor} {until} {hours}h");
        assert_eq!(stats["min"].as_f64().unwrap(), (min * 10_000.0).round() / 10_000.0);
        assert_eq!(stats["max"].as_f64().unwrap(), (max * 10_000.0).round() / 10_000.0);
        assert!((stats["mean"].as_f64().unwrap() - mean).abs() < 1e-3, "{stats} vs {mean}");
        assert_eq!(h["minutes_beyond_limits"]["l"], beyond_l, "1-minute samples: one minute each");
        let min_at = twinops::domain::parse_time(stats["min_at"].as_str().unwrap()).unwrap().unix();
        let at_min: f64 = db
            .query_row(
                "SELECT value FROM readings r JOIN sensors s ON s.key = r.sensor_key WHERE s.id = ?1 AND ts = ?2",
                rusqlite::params![sensor, min_at * 1000],
                |r| r.get(0),
            )
            .unwrap();
        assert_eq!(at_min, min, "min_at points at the minimum sample");
    }
}

/// "What are our worst alarms this week?": the seeded week's alarm figures, with their
/// definitions and targets, lists cut for the model; a bad window says what to send.
#[test]
fn alarm_kpis_answer_for_the_week() {
    let p = Plant::new();
    let week = p.ok("get_alarm_kpis", json!({}));
    let journal = p.count(
        "SELECT count(*) FROM alarm_events WHERE kind = 'raised' AND at >= strftime('%s', '2026-11-23T12:00:00')",
    );
    assert_eq!(week["annunciated"].as_i64(), Some(journal), "{week:#}");
    assert_eq!(week["window"]["from"], "2026-11-23T12:00:00Z");
    let top = &week["bad_actors"][0];
    assert!(top["asset_id"].is_string() && top["activations"].as_i64().unwrap() >= 1, "{top}");
    assert!(
        week["definitions"]["annunciated"]
            .as_str()
            .unwrap()
            .contains("not shelved, not out of service and not suppressed by design")
    );
    assert!(week.get("per_10min").is_none(), "the chart's series is not for the model");
    let err = p.err("get_alarm_kpis", json!({"from": "2026-11-30", "to": "2026-11-01"}));
    assert!(err.contains("from (2026-11-30T00:00:00Z) must be before to"), "{err}");
    let err = p.err("get_alarm_kpis", json!({"from": "last tuesday"}));
    assert!(err.contains("from: 'last tuesday' is not a time: use RFC 3339"), "{err}");
}

/// The episode tools on one upset sent through ingest three times, an hour apart (raw
/// water pump 1 trips; the north header's pressure falls 20 s later, the east booster's
/// suction 80 s in, the south booster's at 150 s): `get_episode` by a member's alarm id
/// names the trip first with its evidence; `find_similar_episodes` finds the two earlier
/// ones for the third; once the pairs are mined, `get_alarm_correlations` says what
/// follows the trip. Ids that name nothing are refused with the next move.
#[test]
fn the_episode_tools_name_the_initiator_and_the_floods_like_it() {
    let p = Plant::new();
    let mut policy = twinops::ingest::IngestPolicy::default();
    policy.queue.backfill_after_secs = i64::MAX;
    let upset = [
        ("PUMP-001", "PUMP-TRIP", 0),
        ("VLV-001", "PRESS-LO", 20),
        ("PUMP-004", "SUCTION-LO", 80),
        ("PUMP-006", "SUCTION-LO", 150),
    ];
    let mut trips = Vec::new();
    for round in 0..3i64 {
        let t0 = common::end().plus_secs(3_600 * (round + 1));
        for (i, (asset, code, secs)) in upset.iter().enumerate() {
            let event = json!({"type": "alarm", "event_id": format!("e{round}-{i}"), "asset_id": asset, "code": code,
                               "severity": "high", "state": "raised", "time": t0.plus_secs(*secs).to_rfc3339(), "message": code});
            let effect = twinops::ingest::apply(
                p.store.writer(),
                "scada/alarms",
                event.to_string().as_bytes(),
                t0.plus_secs(*secs),
                policy.clone(),
            )
            .unwrap();
            let twinops::alarms::Applied::Raised { alarm_id, .. } = effect.alarms[0] else { panic!("{effect:?}") };
            if i == 0 {
                trips.push(alarm_id);
            }
        }
        // Each returns to normal before the next round.
        for (i, (asset, code, _)) in upset.iter().enumerate() {
            let event = json!({"type": "alarm", "event_id": format!("c{round}-{i}"), "asset_id": asset, "code": code,
                               "severity": "high", "state": "cleared", "time": t0.plus_secs(900).to_rfc3339(), "message": code});
            let at = t0.plus_secs(900);
            twinops::ingest::apply(p.store.writer(), "scada/alarms", event.to_string().as_bytes(), at, policy.clone())
                .unwrap();
        }
    }
    let episode = p.ok("get_episode", json!({"alarm_id": trips[2]}));
    assert_eq!(episode["points"], 4);
    let best = &episode["ranking"][0];
    assert_eq!((best["point"]["asset_id"].as_str(), best["alarm_id"].as_i64()), (Some("PUMP-001"), Some(trips[2])));
    assert!(best["evidence"].to_string().contains("first to annunciate"), "{best}");
    let id = episode["id"].as_i64().unwrap();
    let similar = p.ok("find_similar_episodes", json!({"episode_id": id}));
    let found: Vec<(i64, f64)> = similar["similar"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| (s["initiator"]["alarm_id"].as_i64().unwrap(), s["similarity"].as_f64().unwrap()))
        .collect();
    assert_eq!(found.iter().map(|f| f.0).collect::<Vec<_>>(), [trips[1], trips[0]], "the more recent first: {similar}");
    assert!(found.iter().all(|f| f.1 > 0.99), "the same upset, the same timing: {similar}");

    let none = p.ok("get_alarm_correlations", json!({"asset_id": "pump-001"}));
    assert_eq!((none["pairs_learned"].as_i64(), none["follows_it"].as_array().map(Vec::len)), (Some(0), Some(0)));
    let now = common::end().plus_secs(4 * 3_600).unix() * 1000;
    p.store
        .writer()
        .call(move |c| {
            Ok::<_, twinops::store::StoreError>(twinops::episodes::upkeep::refresh_pairs(
                c,
                now,
                90,
                twinops::episodes::pairs::PairRules::default(),
            )?)
        })
        .unwrap();
    let learned = p.ok("get_alarm_correlations", json!({"asset_id": "PUMP-001", "code": "pump-trip"}));
    let follows: Vec<&str> =
        learned["follows_it"].as_array().unwrap().iter().map(|x| x["then"]["asset_id"].as_str().unwrap()).collect();
    assert!(follows.contains(&"VLV-001") && follows.contains(&"PUMP-004"), "{learned}");
    assert_eq!(learned["follows_it"][0]["support"], 3);
    // Alarm performance shows them as candidates for designed suppression, defined.
    let (from, to) = (common::end(), common::end().plus_secs(4 * 3_600));
    let figures =
        twinops::episodes::upkeep::alarm_performance(&p.store.read().unwrap(), from, to, Default::default()).unwrap();
    let pairs = figures["consequential_pairs"].as_array().unwrap();
    assert!(
        pairs
            .iter()
            .any(|x| x["first"]["asset_id"] == "PUMP-001" && x["then"]["asset_id"] == "VLV-001" && x["support"] == 3),
        "{pairs:?}"
    );
    assert!(figures["definitions"]["consequential_pairs"].as_str().unwrap().contains("designed suppression"));
    let text = twinops::alarms::kpi_report::render(&figures, twinops::alarms::kpi_report::Format::Text);
    assert!(
        text.contains("Consequential pairs (candidates for designed suppression)") && text.contains("3 of 3"),
        "{text}"
    );

    assert!(p.err("get_episode", json!({})).contains("give episode_id or alarm_id"));
    assert!(p.err("get_episode", json!({"episode_id": 999_999})).contains("No episode 999999"));
    assert!(
        p.err("find_similar_episodes", json!({"alarm_id": 1, "limit": 9})).contains("limit must be between 1 and 5")
    );
    assert!(p.err("get_alarm_correlations", json!({"asset_id": "NOPE-1"})).contains("list_assets"));
}
