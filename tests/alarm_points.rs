//! The master alarm database, loaded from a rationalization sheet as an alarm management
//! tool exports it (`tests/fixtures/lakeside/alarm_rationalization.csv`: its own headers,
//! `;` with decimal commas, BOM, CRLF), for a plant we did not write: imported, exported
//! and imported again, changed with a history, refused whole when wrong, and quoted by
//! the triage note.

use std::path::{Path, PathBuf};

use tempfile::TempDir;

use twinops::agent::Agent;
use twinops::alarms::points;
use twinops::config::AgentLimits;
use twinops::domain::Timestamp;
use twinops::plant::{self, Mode};
use twinops::store::Store;

fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/lakeside").join(name)
}

fn lakeside() -> Vec<PathBuf> {
    ["site.toml", "assets.csv", "tags.csv"].map(fixture).to_vec()
}

fn with_sheet() -> Vec<PathBuf> {
    let mut files = lakeside();
    files.push(fixture("alarm_rationalization.csv"));
    files
}

struct Twin {
    dir: TempDir,
    store: Store,
}

impl Twin {
    fn empty() -> Twin {
        let dir = TempDir::new().unwrap();
        let store = Store::open(&dir.path().join("twin.db")).unwrap();
        Twin { dir, store }
    }

    fn import(&self, files: &[PathBuf], mode: Mode) -> Result<plant::ChangeSet, plant::ImportError> {
        plant::import_files(self.store.writer(), files, mode, false, "engineer.li")
    }

    fn count(&self, sql: &str) -> i64 {
        self.store.read().unwrap().query_row(sql, [], |r| r.get(0)).unwrap()
    }

    fn entry(&self, asset: &str, sensor: Option<&str>, code: &str) -> Option<points::Rationalization> {
        points::of(&self.store.read().unwrap(), asset, sensor, code).unwrap()
    }

    /// `n` bursts past VT-10010's HI, one reading a second over the last two hours: 20 s
    /// at 4.0, then 4.6, 4.6, 4.4, 4.4, 4.6, 4.6 mm/s, then 20 s at 4.0.
    fn bursts(&self, n: usize) {
        let start = (Timestamp::now().unix() - 7_200) * 1000;
        let cycle = [[4.0; 20].as_slice(), &[4.6, 4.6, 4.4, 4.4, 4.6, 4.6], &[4.0; 20]].concat();
        let rows: Vec<(i64, f64)> =
            (0..n).flat_map(|_| cycle.iter().copied()).enumerate().map(|(i, v)| (start + i as i64 * 1000, v)).collect();
        self.store
            .writer()
            .call(move |c| {
                let key: i64 = c.query_row("SELECT key FROM sensors WHERE id = 'VT-10010'", [], |r| r.get(0))?;
                for (ts, v) in rows {
                    c.execute(
                        "INSERT INTO readings (sensor_key, ts, value) VALUES (?1, ?2, ?3)",
                        rusqlite::params![key, ts, v],
                    )?;
                }
                Ok::<_, twinops::store::StoreError>(())
            })
            .unwrap();
    }

    /// A sheet written beside the twin, from the fixture's header and the given rows.
    fn sheet(&self, name: &str, rows: &[&str]) -> PathBuf {
        let fixture = std::fs::read_to_string(fixture("alarm_rationalization.csv")).unwrap();
        let header = fixture.lines().next().unwrap();
        let path = self.dir.path().join(name);
        std::fs::write(&path, format!("{header}\r\n{}\r\n", rows.join("\r\n"))).unwrap();
        path
    }
}

#[test]
fn a_sites_rationalization_sheet_imports_with_its_own_headers() {
    let t = Twin::empty();
    let changes = t.import(&with_sheet(), Mode::Full).unwrap();
    assert!(changes.summary().ends_with("alarm points: 5 added"), "{}", changes.summary());
    let hihi = t.entry("RWP-101A", Some("VT-10010"), "vibration-hihi").expect("codes are found in any case");
    assert_eq!(
        (hihi.priority.as_deref(), hihi.respond_within_min, hihi.set_point, hihi.deadband),
        (Some("high"), Some(5.0), Some(7.1), Some(0.3)),
        "decimal commas read as decimals"
    );
    assert!(hihi.response.starts_with("Stop RWP-101A now"), "{}", hihi.response);
    assert_eq!((hihi.on_delay_s, hihi.off_delay_s), (Some(3), Some(5)));
    let lolo = t.entry("RWP-101A", Some("LIT-1201"), "LEVEL-LOLO").unwrap();
    assert_eq!(
        (lolo.priority.as_deref(), lolo.respond_within_min),
        (Some("critical"), Some(3.0)),
        "Emergency, < 3 min"
    );
    assert_eq!(lolo.rationalized_by, "A. Kowalski; J. Murray");
    let dp = t.entry("FLT-401", Some("PDIT-4112"), "DIFFERENTIAL-PRESSURE-HI").unwrap();
    assert_eq!(dp.respond_within_min, Some(10.0), "a range of response times is taken at its upper end");
    assert_eq!(t.entry("RWP-101B", Some("VT-10021"), "VIBRATION-HI"), None, "pump B is not rationalized");
    assert_eq!(t.entry("RWP-101A", Some("VT-10010"), "VIBRATION-LO"), None);
    let added = t.count(
        "SELECT count(*) FROM alarm_point_changes WHERE field = 'point' AND new = 'added' AND actor = 'engineer.li' AND source = 'import'",
    );
    assert_eq!(added, 5, "each entry's history starts with its import");

    // Exported, it reads back as it was, into the same twin and a new one.
    let out = TempDir::new().unwrap();
    let files = plant::export(&t.store.read().unwrap(), out.path()).unwrap();
    assert!(files.iter().any(|f| f.ends_with("alarm_points.csv")));
    let again = t.import(&files, Mode::Full).unwrap();
    assert!(again.is_empty(), "the export is the twin: {again}");
    let second = Twin::empty();
    second.import(&files, Mode::Full).unwrap();
    assert_eq!(second.entry("RWP-101A", Some("VT-10010"), "VIBRATION-HIHI").map(|e| e.response), Some(hihi.response));

    // A full import of assets and tags alone leaves the master alarm database as it is.
    assert!(t.import(&lakeside(), Mode::Full).unwrap().is_empty());
    assert_eq!(t.count("SELECT count(*) FROM alarm_points WHERE retired_at IS NULL"), 5);
}

#[test]
fn a_changed_entry_keeps_its_history_and_a_dropped_one_is_retired() {
    let t = Twin::empty();
    t.import(&with_sheet(), Mode::Full).unwrap();
    let fixture = std::fs::read_to_string(fixture("alarm_rationalization.csv")).unwrap();
    let rows: Vec<&str> = fixture.lines().skip(1).collect();
    let changed = rows[1].replace(";5;7,1;", ";10;7,1;");
    assert_ne!(changed, rows[1]);
    let sheet = t.sheet("revised.csv", &[rows[0], &changed, rows[2], rows[3]]);
    let mut files = lakeside();
    files.push(sheet);
    let changes = t.import(&files, Mode::Full).unwrap();
    let shown = changes.to_string();
    assert!(
        shown.contains("~ alarm point RWP-101A VT-10010 VIBRATION-HIHI: respond_within_min \"5\" -> \"10\""),
        "{shown}"
    );
    assert!(shown.contains("- alarm point FLT-401 PDIT-4112 DIFFERENTIAL-PRESSURE-HI (retired"), "{shown}");
    let entry = t.entry("RWP-101A", Some("VT-10010"), "VIBRATION-HIHI").unwrap();
    let history = points::history(&t.store.read().unwrap(), entry.id, 10).unwrap();
    let fields: Vec<(&str, &str, &str)> =
        history.iter().map(|c| (c.field.as_str(), c.old.as_str(), c.new.as_str())).collect();
    assert_eq!(fields, [("respond_within_min", "5", "10"), ("point", "", "added")]);
    assert_eq!(t.entry("FLT-401", Some("PDIT-4112"), "DIFFERENTIAL-PRESSURE-HI"), None, "retired, out of use");
    assert_eq!(t.count("SELECT count(*) FROM alarm_points"), 5, "kept, with its history");

    // A partial import changes what it names and retires nothing.
    let partial = t.sheet("one.csv", &[&rows[0].replace("Medium", "High")]);
    let changes = t.import(&[partial], Mode::Partial).unwrap();
    assert_eq!(changes.summary(), "alarm points: 1 changed");
    assert_eq!(t.count("SELECT count(*) FROM alarm_points WHERE retired_at IS NULL"), 4);
}

#[test]
fn a_bad_sheet_is_refused_whole_at_its_line_and_column() {
    let t = Twin::empty();
    let fixture = std::fs::read_to_string(fixture("alarm_rationalization.csv")).unwrap();
    let good: Vec<&str> = fixture.lines().skip(1).collect();
    // Each row's fields first, every problem at once...
    let sheet = t.sheet(
        "bad.csv",
        &[
            &good[0].replace(";Medium;", ";2;"),
            &good[1].replace(";5;7,1;", ";soon;7,1;"),
            &good[0].replace("2025-09-17", "17/09/2025").replace("VIBRATION-HI", "VIBRATION-LO"),
        ],
    );
    let mut files = lakeside();
    files.push(sheet);
    let err = t.import(&files, Mode::Full).unwrap_err().to_string();
    for expected in [
        "bad.csv:2:4 (Priority): '2' is not a priority: write low, medium, high or critical",
        "bad.csv:3:9 (Allowable Response Time (min)): 'soon' is not a response time",
        "bad.csv:4:15 (Rationalisation Date): '17/09/2025' is not a date: write it as YYYY-MM-DD",
        "nothing was imported",
    ] {
        assert!(err.contains(expected), "missing «{expected}» in:\n{err}");
    }
    // ...then what the rows name, against the import and the twin.
    let sheet = t.sheet(
        "refs.csv",
        &[&good[2].replacen("RWP-101A", "RWP-199", 1), &good[3].replace("AIT-4113", "VT-10010"), good[4], good[4]],
    );
    let mut files = lakeside();
    files.push(sheet);
    let err = t.import(&files, Mode::Full).unwrap_err().to_string();
    for expected in [
        "refs.csv:2:1 (Equipment): unknown asset 'RWP-199'",
        "refs.csv:3:3 (Tag): tag 'VT-10010' is on RWP-101A, not on FLT-401",
        "refs.csv:5:2 (Alarm): alarm point FLT-401 PDIT-4112 DIFFERENTIAL-PRESSURE-HI is given twice (first at",
    ] {
        assert!(err.contains(expected), "missing «{expected}» in:\n{err}");
    }
    assert_eq!(t.count("SELECT count(*) FROM assets") + t.count("SELECT count(*) FROM alarm_points"), 0);

    let headless = t.dir.path().join("headless.csv");
    std::fs::write(&headless, "Equipment;Corrective Action\nRWP-101A;Stop it\n").unwrap();
    let err = t.import(&[headless], Mode::Partial).unwrap_err().to_string();
    assert!(err.contains("headless.csv:1: no column for code in this rationalization sheet"), "{err}");
}

/// A sheet keyed by its tag alone (no asset column: alarm databases export the tag and
/// the alarm, not the equipment) puts each alarm on its tag's asset, from the import's
/// tag files or the twin; a tag neither has is refused at its line and column, and a
/// sheet with neither column says which headers would do.
#[test]
fn a_sheet_keyed_by_tag_alone_takes_each_tags_asset() {
    let t = Twin::empty();
    let fixture = std::fs::read_to_string(fixture("alarm_rationalization.csv")).unwrap();
    let by_tag: Vec<&str> = fixture.lines().map(|l| l.split_once(';').unwrap().1).collect();
    assert!(by_tag[0].starts_with("Alarm;Tag;"), "{}", by_tag[0]);
    let sheet = t.dir.path().join("by-tag.csv");
    std::fs::write(&sheet, by_tag.join("\r\n")).unwrap();
    let mut files = lakeside();
    files.push(sheet.clone());
    let changes = t.import(&files, Mode::Full).unwrap();
    assert!(changes.summary().ends_with("alarm points: 5 added"), "{}", changes.summary());
    let hihi = t.entry("RWP-101A", Some("VT-10010"), "VIBRATION-HIHI").expect("on VT-10010's asset");
    assert!(hihi.response.starts_with("Stop RWP-101A now"), "{}", hihi.response);
    assert!(t.entry("FLT-401", Some("PDIT-4112"), "DIFFERENTIAL-PRESSURE-HI").is_some());
    // Alone, against the twin's tags (in any case): the same points, nothing changed.
    let lower = t.dir.path().join("by-tag-lower.csv");
    std::fs::write(&lower, by_tag.join("\r\n").replace(";VT-10010;", ";vt-10010;")).unwrap();
    assert!(t.import(&[lower], Mode::Partial).unwrap().is_empty());

    let unknown = t.dir.path().join("unknown.csv");
    std::fs::write(
        &unknown,
        "Alarm;Tag;Priority;Corrective Action\r\nLEVEL-HI;LIT-9999;High;Call the duty engineer\r\n",
    )
    .unwrap();
    let err = t.import(&[unknown], Mode::Partial).unwrap_err().to_string();
    assert!(err.contains("unknown.csv:2:2 (Tag): unknown tag 'LIT-9999'"), "{err}");
    let neither = t.dir.path().join("neither.csv");
    std::fs::write(&neither, "Alarm;Priority;Corrective Action\r\nLEVEL-HI;High;Call the duty engineer\r\n").unwrap();
    let err = t.import(&[neither], Mode::Partial).unwrap_err().to_string();
    assert!(err.contains("neither.csv:1: no column for the asset or the tag") && err.contains("'tag'"), "{err}");
    assert_eq!(t.count("SELECT count(*) FROM alarm_points"), 5, "nothing written by the refused imports");
}

/// The triage note quotes the point's documented response and consequence, and says so
/// when a point has none.
#[tokio::test(flavor = "multi_thread")]
async fn the_note_quotes_the_documented_response_or_says_there_is_none() {
    let t = Twin::empty();
    t.import(&with_sheet(), Mode::Full).unwrap();
    let now = Timestamp::now().to_rfc3339();
    let alarm = |id: &str, asset: &str, sensor: &str, code: &str| {
        serde_json::json!({"type": "alarm", "event_id": id, "asset_id": asset, "sensor_id": sensor, "code": code,
            "severity": "high", "state": "raised", "value": 7.4, "threshold": 7.1, "time": now,
            "message": format!("{asset} vibration high-high")})
    };
    let events = serde_json::json!({"events": [
        alarm("r-1", "RWP-101A", "VT-10010", "VIBRATION-HIHI"),
        alarm("r-2", "RWP-101B", "VT-10021", "VIBRATION-HIHI"),
    ]});
    let effect = twinops::ingest::apply(
        t.store.writer(),
        "scada/lakeside",
        events.to_string().as_bytes(),
        Timestamp::now(),
        Default::default(),
    )
    .unwrap();
    assert_eq!(effect.alarms.len(), 2);
    let agent = Agent::new(t.store.clone(), Vec::new(), AgentLimits::default());
    let id = |event: &str| t.count(&format!("SELECT id FROM alarms WHERE event_id = '{event}'"));

    let report = agent.triage(id("r-1")).await.unwrap();
    assert!(report.flags.is_empty(), "{:?}", report.flags);
    let note = report.note.expect("a note");
    assert!(note.summary.contains("Consequence of no action (master alarm database, rationalized by A. Kowalski on 2025-09-17): Catastrophic bearing failure"), "{}", note.summary);
    assert_eq!(note.recommended_actions[0], "Stop RWP-101A now and start RWP-101B");
    assert!(note.recommended_actions.contains(&"Time to respond: 5 min".to_string()), "{:?}", note.recommended_actions);
    assert_eq!(note.likely_causes[0], "Bearing failure");
    assert!(note.evidence.iter().any(|e| e.claim.contains("master alarm database") && e.source == "get_asset_details"));

    let report = agent.triage(id("r-2")).await.unwrap();
    let note = report.note.expect("a note");
    assert!(note.summary.contains("This alarm point is not rationalized"), "{}", note.summary);
    assert!(!note.summary.contains("Consequence of no action"), "{}", note.summary);
}

/// `alarms replay` over readings whose answer is known by construction: 100 bursts past
/// VT-10010's HI (4.5 mm/s, deadband 0.3), each 4.6, 4.4, 4.6 for two seconds apiece.
/// With the tag's deadband (or the sheet's 5-second off-delay) each burst is one
/// activation; without both, two; with a 3-second on-delay, none.
#[test]
fn replay_compares_the_current_and_proposed_settings_over_stored_readings() {
    let t = Twin::empty();
    t.import(&with_sheet(), Mode::Full).unwrap();
    t.bursts(100);
    let replay = |args: &[&str]| {
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_twinops"))
            .arg("--db")
            .arg(t.store.path())
            .args(["alarms", "replay"])
            .args(args)
            .output()
            .unwrap();
        (
            out.status.success(),
            String::from_utf8_lossy(&out.stdout).to_string(),
            String::from_utf8_lossy(&out.stderr).to_string(),
        )
    };
    let json = |args: &[&str]| -> serde_json::Value {
        let (ok, out, err) = replay(&[args, &["--days", "1", "--format", "json"]].concat());
        assert!(ok, "{err}");
        serde_json::from_str(&out).unwrap()
    };
    // The sheet's off-delay (5 s) holds the alarm through the 2-second dip: the same
    // 100 activations. Without deadband and off-delay, each dip clears it.
    let c = json(&["vt-10010:VIBRATION-HI", "--deadband", "0"]);
    assert_eq!(c["current"]["settings"]["off_delay_s"], 5, "the off-delay comes from the master alarm database");
    assert_eq!(c["proposed"]["activations"], 100);
    let c = json(&["vt-10010:VIBRATION-HI", "--deadband", "0", "--off-delay", "0"]);
    assert_eq!(c["readings"], 4_600);
    assert_eq!((c["current"]["activations"].as_i64(), c["proposed"]["activations"].as_i64()), (Some(100), Some(200)));
    assert_eq!(c["current"]["settings"]["deadband"], 0.3, "the tag's own deadband is the current one");
    assert_eq!((c["episodes"].as_i64(), c["suppressed"].as_i64(), c["added"].as_i64()), (Some(100), Some(0), Some(0)));
    assert_eq!(c["delay_median_s"], 0.0, "both raise at the burst's first reading");
    let c = json(&["VT-10010:h", "--on-delay", "3"]);
    assert_eq!((c["proposed"]["activations"].as_i64(), c["suppressed"].as_i64()), (Some(0), Some(100)));
    let (ok, text, _) = replay(&["VT-10010:h", "--set-point", "4.3", "--days", "1"]);
    assert!(ok && text.contains("Replay of VT-10010 high (VIBRATION-HI on RWP-101A): 4600 readings"), "{text}");
    let (ok, _, err) = replay(&["VT-10010:hh", "--deadband=-1"]);
    assert!(!ok && err.contains("the deadband 0 or more"), "{err}");
    // Written with a space, as people do: a value for the same check, not an option `-0`.
    let (ok, _, err) = replay(&["VT-10010:hh", "--deadband", "-0.5"]);
    assert!(!ok && err.contains("the deadband 0 or more (got 7.1 and -0.5)"), "{err}");
    // A window with no readings says so, and no time in alarm is 0, not -0.
    let (ok, text, _) = replay(&["VT-10021:h", "--set-point", "4.3"]);
    assert!(ok && text.contains("(VIBRATION-HI on RWP-101B): no readings in the window"), "{text}");
    let empty = json(&["VT-10021:h"]);
    assert_eq!(empty["current"]["active_s"].to_string(), "0.0", "{empty}");
    let (ok, _, err) = replay(&["VT-10010:lo"]);
    assert!(!ok && err.contains("VT-10010 has no low set point"), "{err}");
    let (ok, _, err) = replay(&["VT-10010"]);
    assert!(!ok && err.contains("names no level: write SENSOR:LEVEL"), "{err}");
}

/// The agent proposes a deadband for a chattering point; the tool replays 30 days as
/// evidence and parks it; a supervisor's approval applies it to the sensor and the
/// master alarm database (a management of change with its history); a change to a
/// SCADA point is a record for the SCADA engineer and changes nothing.
#[test]
fn an_alarm_change_is_proposed_with_its_replay_and_applied_only_when_approved() {
    use twinops::approvals::{Proposer, alarm_changes};
    use twinops::domain::AlarmChangeStatus;
    let t = Twin::empty();
    t.import(&with_sheet(), Mode::Full).unwrap();
    t.bursts(50);
    let docs = twinops::rag::DocIndex::new();
    let call = |args: serde_json::Value| {
        twinops::tools::with_context(&t.store, &docs, Timestamp::now(), Proposer::Run(7), |ctx| {
            twinops::tools::call(ctx, "propose_alarm_change", args)
        })
        .unwrap()
    };
    let reason = "VIBRATION-HI chattered 50 times in two hours; a 3 s on-delay keeps real excursions";
    let out = call(serde_json::json!({"sensor_id": "vt-10010", "level": "h", "on_delay_s": 3, "reason": reason}));
    assert!(!out.is_error, "{}", out.content);
    let v: serde_json::Value = serde_json::from_str(&out.content).unwrap();
    assert_eq!(
        (v["status"].as_str(), v["applies"].as_str(), v["created"].as_bool()),
        (Some("pending_approval"), Some("twin"), Some(true))
    );
    assert_eq!(
        (v["evidence"]["current"]["activations"].as_i64(), v["evidence"]["proposed"]["activations"].as_i64()),
        (Some(50), Some(0))
    );
    assert!(v["message"].as_str().unwrap().contains("nothing has changed"));
    let id = v["alarm_change_id"].as_i64().unwrap();
    assert_eq!(t.count("SELECT on_delay_s FROM sensors WHERE id = 'VT-10010'"), 0, "proposing changes nothing");
    let again = call(serde_json::json!({"sensor_id": "VT-10010", "level": "h", "deadband": 0.5, "reason": reason}));
    let again: serde_json::Value = serde_json::from_str(&again.content).unwrap();
    assert_eq!(
        (again["alarm_change_id"].as_i64(), again["created"].as_bool()),
        (Some(id), Some(false)),
        "one pending per point"
    );
    for (args, expected) in [
        (serde_json::json!({"sensor_id": "VT-10010", "level": "h", "reason": reason}), "give at least one new value"),
        (
            serde_json::json!({"sensor_id": "VT-10010", "level": "l", "deadband": 0.1, "reason": reason}),
            "no low set point",
        ),
        (serde_json::json!({"sensor_id": "VT-10010", "level": "h", "deadband": 0.1, "reason": "short"}), "reason"),
        (serde_json::json!({"sensor_id": "VT-99999", "level": "h", "deadband": 0.1, "reason": reason}), "VT-"),
    ] {
        let out = call(args.clone());
        assert!(out.is_error && out.content.contains(expected), "{args}: {}", out.content);
    }

    // Approved: the sensor and the point's entry change, with history and audit.
    let w = t.store.writer();
    assert!(matches!(
        alarm_changes::decide(w, id, "supervisor.ng", true, " ", Timestamp::now()),
        Err(twinops::approvals::DecisionError::NoReason)
    ));
    let status = alarm_changes::decide(
        w,
        id,
        "supervisor.ng",
        true,
        "MOC-2291: agreed with the alarm engineer",
        Timestamp::now(),
    )
    .unwrap();
    assert_eq!(status, AlarmChangeStatus::Approved);
    assert_eq!(t.count("SELECT on_delay_s FROM sensors WHERE id = 'VT-10010'"), 3);
    let entry = t.entry("RWP-101A", Some("VT-10010"), "VIBRATION-HI").unwrap();
    assert_eq!(entry.on_delay_s, Some(3));
    let history = points::history(&t.store.read().unwrap(), entry.id, 5).unwrap();
    assert_eq!(
        (history[0].field.as_str(), history[0].old.as_str(), history[0].new.as_str(), history[0].source.as_str()),
        ("on_delay_s", "10", "3", "approval")
    );
    assert_eq!(history[0].reason, "MOC-2291: agreed with the alarm engineer");
    assert_eq!(
        t.count("SELECT count(*) FROM audit_log WHERE action = 'alarm_change_approved' AND actor = 'supervisor.ng'"),
        1
    );
    assert!(matches!(
        alarm_changes::decide(w, id, "supervisor.ng", false, "again", Timestamp::now()),
        Err(twinops::approvals::DecisionError::NotPending { .. })
    ));

    // A SCADA point: approved, recorded, nothing in the twin changes.
    let out = call(
        serde_json::json!({"sensor_id": "PIT-10010", "level": "h", "set_point": 6.8, "reason": "discharge pressure HI stands for days at 6.6 bar on the new impeller"}),
    );
    let v: serde_json::Value = serde_json::from_str(&out.content).unwrap();
    assert_eq!(v["applies"], "scada", "{v}");
    let scada = v["alarm_change_id"].as_i64().unwrap();
    alarm_changes::decide(w, scada, "supervisor.ng", true, "for the SCADA engineer", Timestamp::now()).unwrap();
    assert_eq!(
        t.count("SELECT count(*) FROM sensors WHERE id = 'PIT-10010' AND limit_h = 6.5"),
        1,
        "the SCADA makes it, not twinops"
    );
    let listed = alarm_changes::list(&t.store.read().unwrap(), Some(AlarmChangeStatus::Approved)).unwrap();
    assert_eq!(listed.len(), 2);
    assert_eq!(listed[0]["applies"], "scada");
    assert_eq!(listed[1]["evidence"]["proposed"]["activations"], 0);
}
