//! A real site's plant, loaded from the files it has: `tests/fixtures/lakeside` is a
//! water treatment works that shares nothing with the demo plant (ISA-5.1 tags, kinds
//! the demo lacks, units such as mg/L, NTU and pH), as a CMMS register and a SCADA tag
//! export write them (UTF-8 with BOM, CRLF).

use std::path::{Path, PathBuf};

use serde_json::{Value, json};
use std::sync::Arc;
use tempfile::TempDir;

use twinops::agent::openai::{OpenAi, ToolMode};
use twinops::agent::{Agent, Model};
use twinops::approvals::Proposer;
use twinops::config::AgentLimits;
use twinops::domain::Timestamp;
use twinops::plant::{self, Change, Mode};
use twinops::rag::DocIndex;
use twinops::scripted::{Reply, ScriptedServer};
use twinops::store::Store;
use twinops::tools;

fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/lakeside").join(name)
}

fn lakeside() -> Vec<PathBuf> {
    ["site.toml", "assets.csv", "tags.csv"].map(fixture).to_vec()
}

struct Twin {
    _dir: TempDir,
    store: Store,
}

impl Twin {
    fn empty() -> Twin {
        let dir = TempDir::new().unwrap();
        let store = Store::open(&dir.path().join("twin.db")).unwrap();
        Twin { _dir: dir, store }
    }

    fn import(&self, files: &[PathBuf], mode: Mode) -> Result<plant::ChangeSet, plant::ImportError> {
        plant::import_files(self.store.writer(), files, mode, false, "engineer.li")
    }

    fn count(&self, sql: &str) -> i64 {
        self.store.read().unwrap().query_row(sql, [], |r| r.get(0)).unwrap()
    }

    fn tool(&self, name: &str, args: Value) -> (bool, String) {
        let docs = DocIndex::new();
        let out = tools::with_context(&self.store, &docs, Timestamp::now(), Proposer::Run(1), |ctx| {
            tools::call(ctx, name, args)
        })
        .unwrap();
        (out.is_error, out.content)
    }

    fn ok(&self, name: &str, args: Value) -> Value {
        let (error, content) = self.tool(name, args.clone());
        assert!(!error, "{name}({args}): {content}");
        serde_json::from_str(&content).unwrap()
    }

    fn send(&self, events: Value) -> twinops::ingest::MessageEffect {
        twinops::ingest::apply(
            self.store.writer(),
            "scada/lakeside",
            events.to_string().as_bytes(),
            Timestamp::now(),
            Default::default(),
        )
        .unwrap()
    }
}

/// Imported from its own files, the second site is a first-class twin: a dry run writes
/// nothing, the import is one audited change, a second import changes nothing, events
/// on its tags are stored (ids in any case), every tool answers on it, and the agent's
/// note on one of its alarms speaks of it alone.
#[tokio::test(flavor = "multi_thread")]
async fn a_second_site_imports_from_its_own_files() {
    let t = Twin::empty();
    let dry = plant::import_files(t.store.writer(), &lakeside(), Mode::Full, true, "engineer.li").unwrap();
    assert_eq!(dry.summary(), "sites: 1 added; stations: 7 added; assets: 42 added; sensors: 206 added");
    assert_eq!(t.count("SELECT count(*) FROM assets"), 0, "a dry run writes nothing");

    assert_eq!(t.import(&lakeside(), Mode::Full).unwrap(), dry, "the dry run said what the import did");
    assert_eq!((t.count("SELECT count(*) FROM assets"), t.count("SELECT count(*) FROM sensors")), (42, 206));
    let again = t.import(&lakeside(), Mode::Full).unwrap();
    assert!(again.is_empty(), "importing the same files again changes nothing: {again}");
    assert_eq!(t.count("SELECT count(*) FROM audit_log WHERE action = 'plant_import' AND actor = 'engineer.li'"), 1);
    assert_eq!(t.count("SELECT count(*) FROM sensors WHERE limit_l IS NULL AND limit_h IS NULL AND limit_ll IS NULL AND limit_hh IS NULL"), 74, "tags without limits");
    assert_eq!(
        t.count("SELECT count(*) FROM sensors WHERE id = 'FIT-10010' AND range_low = 0 AND range_high = 1200"),
        1,
        "Min EU, Max EU"
    );

    let effect = t.send(json!({"events": [
        {"type": "reading", "sensor_id": "ait-5102", "time": Timestamp::now().to_rfc3339(), "value": 0.85},
        {"type": "reading", "sensor_id": "VT-6115", "time": Timestamp::now().to_rfc3339(), "value": 5.2},
        {"type": "alarm", "event_id": "lw-1", "asset_id": "hlp-601a", "sensor_id": "VT-6115", "code": "VT-HI",
         "severity": "high", "state": "raised", "value": 5.2, "threshold": 4.5, "time": Timestamp::now().to_rfc3339(),
         "message": "HLP-601A DE bearing vibration high"},
    ]}));
    assert_eq!((effect.readings, effect.alarms.len(), effect.dead_letters), (2, 1, 0));

    let details = t.ok("get_asset_details", json!({"asset_id": "uv-502"}));
    assert_eq!(
        (details["asset"]["id"].as_str(), details["asset"]["kind"].as_str()),
        (Some("UV-502"), Some("uv_reactor"))
    );
    let (error, msg) = t.tool("get_asset_details", json!({"asset_id": "UV-520"}));
    assert!(error && msg.contains("Closest asset ids: UV-502"), "{msg}");
    let (error, msg) = t.tool("get_sensor_history", json!({"sensor_id": "AIT-5120"}));
    assert!(error && msg.contains("Did you mean AIT-5102"), "{msg}");
    let uv = t.ok("list_assets", json!({"kind": "UV_Reactor"}));
    assert_eq!(uv["total"], 3);
    let (error, msg) = t.tool("list_assets", json!({"kind": "centrifugal_pump"}));
    assert!(error && msg.contains("blower (2)") && msg.contains("dosing_pump (6)"), "{msg}");
    let history = t.ok("get_sensor_history", json!({"sensor_id": "AIT-5102", "hours": 1}));
    assert_eq!(history["sensor"]["unit"], "mg/L");
    for (name, args) in [
        ("list_alarms", json!({"asset_id": "HLP-601A"})),
        ("get_system_summary", json!({})),
        ("list_assets", json!({"station_id": "power"})),
    ] {
        let (error, content) = t.tool(name, args.clone());
        assert!(!error, "{name}({args}): {content}");
    }

    let alarm = t.count("SELECT id FROM alarms WHERE event_id = 'lw-1'");
    let agent = Agent::new(t.store.clone(), Vec::new(), AgentLimits::default());
    let report = agent.triage(alarm).await.unwrap();
    let note = serde_json::to_string(&report.note.expect("the rules model's note")).unwrap();
    assert!(note.contains("HLP-601A") && note.contains("VT-6115") && note.contains("5.2"), "{note}");
    for demo in ["PUMP-", "STN-", "Riverside", "MTR-"] {
        assert!(!note.contains(demo), "the note speaks of the demo plant ({demo}): {note}");
    }
    let chat = agent.ask("How is hlp-601a? And UV-599?", "kaur", None).await.unwrap().answer.unwrap();
    assert!(chat.contains("- HLP-601A (") && chat.contains("Not in the twin: UV-599"), "{chat}");

    // What a model is shown: the tools and the prompt with this site's ids as examples.
    let server = ScriptedServer::start(vec![Reply::text("HLP-601A is running.")]).await;
    let model: Arc<dyn Model> = Arc::new(OpenAi::new(&server.openai_url(), "m", None, ToolMode::Native, false));
    Agent::new(t.store.clone(), vec![model], AgentLimits::default()).ask("HLP-601A?", "kaur", None).await.unwrap();
    let shown = server.requests()[0].to_string();
    assert!(!shown.contains("PUMP-") && !shown.contains("STN-"), "the demo plant's ids in what the model is shown");
    assert!(shown.contains("e.g. FIT-10010") && shown.contains("e.g. RWP-101A"), "the site's own ids as examples");
}

/// Exported, the plant reads back as it was: into a new twin, and into the same one
/// with no change.
#[test]
fn export_round_trips() {
    let t = Twin::empty();
    t.import(&lakeside(), Mode::Full).unwrap();
    let out = TempDir::new().unwrap();
    let files = plant::export(&t.store.read().unwrap(), out.path()).unwrap();
    assert!(t.import(&files, Mode::Full).unwrap().is_empty(), "the export is the twin");
    let second = Twin::empty();
    second.import(&files, Mode::Full).unwrap();
    let again = TempDir::new().unwrap();
    let files2 = plant::export(&second.store.read().unwrap(), again.path()).unwrap();
    for (a, b) in files.iter().zip(&files2) {
        assert_eq!(std::fs::read_to_string(a).unwrap(), std::fs::read_to_string(b).unwrap(), "{}", a.display());
    }
}

/// How a site's assets act on each other, from its own connection list (its headers,
/// the effect named first on some rows: "fed by", "air from"): imported, stored cause
/// first, exported as `connections.csv` and read back unchanged; a full import without
/// them leaves them, one that drops one retires it.
#[test]
fn a_sites_process_connections_import_and_round_trip() {
    let t = Twin::empty();
    let mut files = lakeside();
    files.push(fixture("process_connections.csv"));
    let changes = t.import(&files, Mode::Full).unwrap();
    assert!(changes.summary().ends_with("connections: 16 added"), "{}", changes.summary());
    let stored =
        |sql: &str| t.count(&format!("SELECT count(*) FROM asset_connections WHERE retired_at IS NULL AND {sql}"));
    assert_eq!(stored("from_asset = 'MIX-301' AND kind = 'feeds' AND to_asset = 'CLF-301'"), 1, "fed by, turned round");
    assert_eq!(stored("from_asset = 'BLR-452' AND kind = 'supplies_air' AND to_asset = 'FLT-402'"), 1);
    assert_eq!(stored("from_asset = 'ATS-901' AND kind = 'powers'"), 2);
    let out = TempDir::new().unwrap();
    let exported = plant::export(&t.store.read().unwrap(), out.path()).unwrap();
    let csv = std::fs::read_to_string(out.path().join("connections.csv")).unwrap();
    assert!(csv.starts_with("from,kind,to\n") && csv.contains("MIX-301,feeds,CLF-301\n"), "{csv}");
    assert!(t.import(&exported, Mode::Full).unwrap().is_empty(), "the export is the twin");
    assert!(t.import(&lakeside(), Mode::Full).unwrap().is_empty(), "no connection file: they stay");
    let fewer = out.path().join("fewer.csv");
    std::fs::write(&fewer, csv.lines().filter(|l| !l.contains("GEN-901")).collect::<Vec<_>>().join("\n")).unwrap();
    let mut files = lakeside();
    files.push(fewer);
    let changes = t.import(&files, Mode::Full).unwrap();
    assert_eq!(changes.summary(), "connections: 1 retired", "{changes}");
    assert_eq!(stored("from_asset = 'GEN-901'"), 0);
    let second = Twin::empty();
    second.import(&exported, Mode::Full).unwrap();
    assert_eq!(second.count("SELECT count(*) FROM asset_connections"), 16);
}

/// A bad connection list is refused whole, each problem at its line and column, and
/// nothing is written.
#[test]
fn bad_connections_are_refused_at_their_line_and_column() {
    let t = Twin::empty();
    t.import(&lakeside(), Mode::Full).unwrap();
    let dir = TempDir::new().unwrap();
    let file = |name: &str, rows: &str| {
        let path = dir.path().join(name);
        std::fs::write(&path, format!("From;Connection;To\n{rows}")).unwrap();
        path
    };
    // Each row's fields first, every problem at once...
    let bad = file("links.csv", "SCR-101;feeds;RWP-101A\nSCR-102;pumps into;RWP-101B\nRWP-101C;feeds;rwp-101c\n");
    let err = t.import(&[bad], Mode::Partial).unwrap_err().to_string();
    for expected in [
        "links.csv:3:2 (Connection): 'pumps into' is not a connection: write feeds, powers, supplies_air or controls",
        "links.csv:4:3 (To): RWP-101C is connected to itself",
        "nothing was imported",
    ] {
        assert!(err.contains(expected), "missing «{expected}» in:\n{err}");
    }
    // ...then what the rows name, against the import and the twin.
    let refs = file("refs.csv", "SCR-101;feeds;RWP-101A\nSCR-199;feeds;RWP-101A\nscr-101;Feeds;RWP-101A\n");
    let err = t.import(&[refs], Mode::Partial).unwrap_err().to_string();
    for expected in [
        "refs.csv:3:1 (From): unknown asset 'SCR-199'",
        "refs.csv:4:1 (From): scr-101 feeds RWP-101A is given twice (first at",
    ] {
        assert!(err.contains(expected), "missing «{expected}» in:\n{err}");
    }
    assert_eq!(t.count("SELECT count(*) FROM asset_connections"), 0);
    let toml = dir.path().join("plant.toml");
    std::fs::write(&toml, "[[connections]]\nfrom = \"SCR-101\"\nkind = \"feeds\"\n").unwrap();
    let err = t.import(&[toml], Mode::Partial).unwrap_err().to_string();
    assert!(err.contains("plant.toml:1") && err.contains("the asset it acts on is required"), "{err}");
}

/// The demo plant goes in through the same import as a site's files: audited as the
/// seed's, and its export, imported again, changes nothing.
#[test]
fn the_demo_plant_is_seeded_through_the_import() {
    let t = Twin::empty();
    let end = twinops::domain::parse_time("2026-11-30T12:00:00Z").unwrap();
    let seed_dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("seed");
    let report =
        twinops::seed::seed(&t.store, &twinops::seed::SeedOptions { dir: seed_dir, scale: 2, end, days: 1 }).unwrap();
    assert_eq!(t.count("SELECT count(*) FROM audit_log WHERE action = 'plant_import' AND actor = 'seed'"), 1);
    assert_eq!(t.count("SELECT count(*) FROM assets") as usize, report.assets);
    assert_eq!(
        t.count("SELECT count(*) FROM sensors WHERE key IN (SELECT DISTINCT sensor_key FROM readings)") as usize,
        report.sensors
    );
    assert_eq!(
        t.count("SELECT count(*) FROM assets WHERE id = 'PUMP-107' AND drives IS NULL"),
        1,
        "copies are renumbered"
    );
    assert_eq!(t.count("SELECT count(*) FROM assets WHERE id = 'MTR-107' AND drives = 'PUMP-107'"), 1);
    assert_eq!(
        t.count("SELECT count(*) FROM asset_connections WHERE from_asset = 'VLV-102' AND kind = 'feeds' AND to_asset = 'PUMP-107'"),
        1,
        "each copy has its own connections"
    );
    assert_eq!(t.count("SELECT count(*) FROM asset_connections"), 24);
    let out = TempDir::new().unwrap();
    let files = plant::export(&t.store.read().unwrap(), out.path()).unwrap();
    let again = t.import(&files, Mode::Full).unwrap();
    assert!(again.is_empty(), "the export is the seeded twin: {again}");
}

/// Each kind of bad input is named at its file, line and column, says what to do, and
/// nothing is written.
#[test]
fn bad_files_are_refused_at_their_line_and_column_and_nothing_is_written() {
    let dir = TempDir::new().unwrap();
    let write = |name: &str, text: &str| {
        let path = dir.path().join(name);
        std::fs::write(&path, text).unwrap();
        path
    };
    let site = write(
        "site.toml",
        "[site]\nid = \"X\"\nname = \"X works\"\ntimezone = \"UTC\"\n\n[[stations]]\nid = \"A1\"\nname = \"Area 1\"\n",
    );
    let assets = write("assets.csv", "Asset ID,Equipment Type,Area\nP-101A,Pump,A1\nB-1,Blower,A1\n");
    let cases: &[(&str, &str, &str)] = &[
        ("no-asset-column.csv", "Tag Name,Eng Units\nFIT-1,m3/h\n", "no-asset-column.csv:1: no column for asset"),
        (
            "duplicate.csv",
            "Tag,Asset,Units\nFIT-1,P-101A,m3/h\nfit-1,B-1,m3/h\n",
            "duplicate.csv:3:1 (Tag): duplicate tag fit-1 (first at",
        ),
        (
            "order.csv",
            "Tag,Asset,Units,Lo,Hi\nPIT-1,P-101A,bar,5,3\n",
            "order.csv:2:5 (Hi): limits out of order: l 5 is above h 3",
        ),
        ("nan.csv", "Tag,Asset,Units,HiHi\nPIT-1,P-101A,bar,high\n", "nan.csv:2:4 (HiHi): 'high' is not a number"),
        ("short.csv", "Tag,Asset,Units,Hi\nPIT-1,P-101A\n", "short.csv:2: the row has 2 fields, the header 4"),
        (
            "charset.csv",
            "Tag,Asset,Units\nFIT 1001,P-101A,m3/h\n",
            "charset.csv:2:1 (Tag): 'FIT 1001' is not a sensor id",
        ),
        ("asset.csv", "Tag,Asset,Units\nFIT-1,P-999,m3/h\n", "asset.csv:2:2 (Asset): unknown asset 'P-999'"),
    ];
    let t = Twin::empty();
    for (name, text, expected) in cases {
        let err = t.import(&[site.clone(), assets.clone(), write(name, text)], Mode::Full).unwrap_err().to_string();
        assert!(err.contains(expected), "{name}: expected {expected:?} in:\n{err}");
        assert!(err.ends_with("nothing was imported: fix the files and run the import again"), "{err}");
        assert_eq!(t.count("SELECT count(*) FROM assets") + t.count("SELECT count(*) FROM sites"), 0, "{name}");
    }
    let stations = write("stations.csv", "Asset ID,Equipment Type,Area\nP-1,Pump,NOPE\n");
    let err = t.import(&[site.clone(), stations], Mode::Full).unwrap_err().to_string();
    assert!(err.contains("stations.csv:2:3 (Area): unknown station 'NOPE': stations are A1"), "{err}");

    // A European export: `;`, decimal commas, BOM, CRLF, quoted separators.
    let euro = write(
        "euro.csv",
        "\u{feff}Tag;Asset;Eng Units;Lo;Hi;Description\r\nPIT-1;P-101A;bar;1,5;6,25;\"Druck; Pumpe A\"\r\n",
    );
    t.import(&[site, assets, euro], Mode::Full).unwrap();
    let limits: (f64, f64, String) = t
        .store
        .read()
        .unwrap()
        .query_row("SELECT limit_l, limit_h, description FROM sensors WHERE id = 'PIT-1'", [], |r| {
            Ok((r.get(0)?, r.get(1)?, r.get(2)?))
        })
        .unwrap();
    assert_eq!(limits, (1.5, 6.25, "Druck; Pumpe A".to_string()));
}

/// What a full import leaves out is retired, never deleted: its history stays, it
/// leaves the lists, its new events are refused as `retired`; a partial import adds
/// only; imported again, it returns.
#[test]
fn a_full_import_retires_what_it_leaves_out() {
    let t = Twin::empty();
    t.import(&lakeside(), Mode::Full).unwrap();
    let now = Timestamp::now();
    t.send(json!({"type": "reading", "sensor_id": "YS-9021", "time": now.plus_secs(-60).to_rfc3339(), "value": 0.0}));

    let dir = TempDir::new().unwrap();
    let without = |name: &str, drop: &str| {
        let text = std::fs::read_to_string(fixture(name)).unwrap();
        let kept: Vec<&str> = text.split("\r\n").filter(|l| !l.starts_with(drop)).collect();
        let path = dir.path().join(name);
        std::fs::write(&path, kept.join("\r\n")).unwrap();
        path
    };
    let files = vec![fixture("site.toml"), without("assets.csv", "ATS-901,"), without("tags.csv", "YS-9021,")];
    let err = t.import(&files, Mode::Full).unwrap_err().to_string();
    assert!(err.contains("unknown asset 'ATS-901': it is in the twin but not in this full import"), "{err}");
    let files = vec![fixture("site.toml"), without("assets.csv", "ATS-901,"), {
        let text = std::fs::read_to_string(dir.path().join("tags.csv")).unwrap();
        let kept: Vec<&str> = text.split("\r\n").filter(|l| !l.contains(",ATS-901,")).collect();
        std::fs::write(dir.path().join("tags.csv"), kept.join("\r\n")).unwrap();
        dir.path().join("tags.csv")
    }];
    let changes = t.import(&files, Mode::Full).unwrap();
    assert_eq!(
        changes.changes,
        [
            Change::Retired { what: "asset", id: "ATS-901".into() },
            Change::Retired { what: "sensor", id: "EI-9022".into() },
            Change::Retired { what: "sensor", id: "EQI-9023".into() },
            Change::Retired { what: "sensor", id: "YS-9021".into() },
        ]
    );
    assert_eq!(
        t.count("SELECT count(*) FROM readings r JOIN sensors s ON s.key = r.sensor_key WHERE s.id = 'YS-9021'"),
        1,
        "history stays"
    );
    assert_eq!(t.ok("list_assets", json!({"text": "ATS"}))["total"], 0, "out of the lists");
    let effect = t.send(json!({"type": "reading", "sensor_id": "YS-9021", "time": now.to_rfc3339(), "value": 1.0}));
    assert_eq!((effect.readings, effect.dead_letters), (0, 1));
    let reason: String =
        t.store.read().unwrap().query_row("SELECT reason FROM dead_letters", [], |r| r.get(0)).unwrap();
    assert_eq!(reason, "retired");

    let one = dir.path().join("one.csv");
    std::fs::write(&one, "Tag,Equipment,Units,Hi\nAIT-7001,TK-510,mg/L,4\n").unwrap();
    let partial = t.import(&[one], Mode::Partial).unwrap();
    assert_eq!(
        partial.changes,
        [Change::Added { what: "sensor", id: "AIT-7001".into() }],
        "a partial import retires nothing"
    );
    let back = t.import(&lakeside(), Mode::Full).unwrap();
    assert!(back.changes.contains(&Change::Returned { what: "asset", id: "ATS-901".into() }), "{back}");
    assert!(back.changes.contains(&Change::Retired { what: "sensor", id: "AIT-7001".into() }), "{back}");
}

/// A site that publishes values only: the limits it gave us are watched. A tag with
/// `alarm_source = limits` raises and clears alarms from its readings through the
/// whole lifecycle (occurrence, triage note), a redelivered reading raises nothing
/// twice, a late one raises nothing, and after a restart the point resumes its state.
#[tokio::test(flavor = "multi_thread")]
async fn a_telemetry_only_feed_raises_and_clears_alarms_from_the_limits() {
    let dir = TempDir::new().unwrap();
    let path = dir.path().join("twin.db");
    let t = Twin { _dir: TempDir::new().unwrap(), store: Store::open(&path).unwrap() };
    t.import(&lakeside(), Mode::Full).unwrap();
    let base = Timestamp::now().plus_secs(-600);
    let reading = |t: &Twin, min: i64, value: f64| {
        t.send(json!({"type": "reading", "sensor_id": "AIT-5102", "time": base.plus_secs(60 * min).to_rfc3339(), "value": value}))
    };
    let codes = |t: &Twin| -> Vec<(String, String, bool)> {
        let db = t.store.read().unwrap();
        let mut stmt = db.prepare("SELECT code, severity, cleared_at IS NULL FROM alarms ORDER BY id").unwrap();
        stmt.query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?))).unwrap().map(Result::unwrap).collect()
    };
    assert!(reading(&t, 0, 1.0).alarms.is_empty(), "1.0 mg/L is within the limits");
    assert_eq!(reading(&t, 1, 0.45).alarms.len(), 1, "below l 0.5: raised");
    assert_eq!(codes(&t), [("CHLORINE-RESIDUAL-LO".to_string(), "medium".to_string(), true)]);
    let again = reading(&t, 1, 0.45);
    assert_eq!((again.readings, again.alarms.len()), (0, 0), "a redelivered reading changes nothing");

    // A restart: a new store on the same file resumes the point as it was.
    drop(t);
    let t = Twin { _dir: dir, store: Store::open(&path).unwrap() };
    assert!(reading(&t, 2, 0.48).alarms.is_empty(), "still low: the same occurrence, no new one");
    assert_eq!(reading(&t, 3, 0.15).alarms.len(), 1, "below ll 0.2");
    assert!(reading(&t, 2, 5.0).alarms.is_empty(), "a late reading raises nothing");
    assert_eq!(reading(&t, 4, 0.6).alarms.len(), 2, "back past both deadbands: both clear");
    assert_eq!(
        codes(&t),
        [
            ("CHLORINE-RESIDUAL-LO".to_string(), "medium".to_string(), false),
            ("CHLORINE-RESIDUAL-LOLO".to_string(), "critical".to_string(), false),
        ],
        "LOLO on a criticality-A asset is critical"
    );
    let jobs = t.count("SELECT count(*) FROM triage_jobs");
    assert!(jobs >= 1, "each occurrence is queued for triage like a SCADA alarm");

    let lolo = t.count("SELECT id FROM alarms WHERE code = 'CHLORINE-RESIDUAL-LOLO'");
    let report = Agent::new(t.store.clone(), Vec::new(), AgentLimits::default()).triage(lolo).await.unwrap();
    let note = serde_json::to_string(&report.note.unwrap()).unwrap();
    assert!(note.contains("TK-510") && note.contains("AIT-5102") && note.contains("mg/L"), "{note}");
    assert!(!note.contains("PUMP-"), "{note}");
}

/// Events that reach an empty twin are kept, with what to do; once the plant is
/// imported, replaying them brings them in.
#[test]
fn events_before_the_import_are_replayed_after_it() {
    let t = Twin::empty();
    let now = Timestamp::now();
    let effect = t.send(json!({"events": [
        {"type": "reading", "sensor_id": "FIT-5023", "time": now.to_rfc3339(), "value": 1180.0},
        {"type": "alarm", "event_id": "early-1", "asset_id": "UV-502", "sensor_id": "AIT-5021", "code": "UV-LO",
         "severity": "high", "state": "raised", "value": 55.0, "threshold": 60.0, "time": now.to_rfc3339()},
    ]}));
    assert_eq!(effect.dead_letters, 2);
    let detail: String = t
        .store
        .read()
        .unwrap()
        .query_row("SELECT detail FROM dead_letters ORDER BY id LIMIT 1", [], |r| r.get(0))
        .unwrap();
    assert!(detail.contains("the twin has no plant yet: load it with `twinops plant import`"), "{detail}");

    t.import(&lakeside(), Mode::Full).unwrap();
    let db = t.store.read().unwrap();
    let pending = twinops::ingest::dead_letters::list(&db, None, false, 10).unwrap();
    drop(db);
    assert_eq!(pending.len(), 2);
    for d in pending {
        let r =
            twinops::ingest::dead_letters::replay(t.store.writer(), d.id, "engineer.li", Default::default()).unwrap();
        assert!(matches!(r, twinops::ingest::dead_letters::Replay::Applied(_)), "{r:?}");
    }
    assert_eq!(t.count("SELECT count(*) FROM alarms WHERE event_id = 'early-1' AND asset_id = 'UV-502'"), 1);
    assert_eq!(
        t.count("SELECT count(*) FROM readings r JOIN sensors s ON s.key = r.sensor_key WHERE s.id = 'FIT-5023'"),
        1
    );
}

/// A historian's export fills the twin's history: long and wide files, RFC 3339 and
/// epoch milliseconds; bad quality, unknown tags and unreadable cells are skipped and
/// counted with their first lines; run again it stores nothing twice; past values
/// beyond a limit raise no live alarm.
#[test]
fn a_historians_export_backfills_readings() {
    let t = Twin::empty();
    t.import(&lakeside(), Mode::Full).unwrap();
    let dir = TempDir::new().unwrap();
    let long = dir.path().join("historian.csv");
    std::fs::write(
        &long,
        "\u{feff}Timestamp,TagName,Value,Quality\r\n\
         2026-11-30T10:00:00Z,AIT-5102,0.95,Good\r\n\
         2026-11-30T10:01:00Z,ait-5102,0.10,192\r\n\
         1796032920000,AIT-5102,0.97,Good\r\n\
         2026-11-30T10:03:00Z,AIT-5102,0.99,Bad\r\n\
         2026-11-30T10:04:00Z,AIT-9999,1.0,Good\r\n\
         yesterday,AIT-5102,1.0,Good\r\n\
         2026-11-30T10:05:00Z,AIT-5102,n/a,Good\r\n",
    )
    .unwrap();
    let db = t.store.read().unwrap();
    let first = twinops::ingest::history::import(t.store.writer(), &db, &long, None).unwrap();
    assert_eq!((first.rows, first.stored, first.already_present), (7, 3, 0));
    let refused: Vec<(&str, u64, Vec<u64>)> = first.refused.clone();
    assert_eq!(
        refused,
        [("bad_quality", 1, vec![5]), ("bad_time", 1, vec![7]), ("bad_value", 1, vec![8]), ("unknown_tag", 1, vec![6])]
    );
    let again = twinops::ingest::history::import(t.store.writer(), &db, &long, None).unwrap();
    assert_eq!((again.stored, again.already_present), (0, 3), "run again, nothing stored twice");
    assert_eq!(t.count("SELECT count(*) FROM alarms"), 0, "0.10 mg/L in the past raises no live alarm");
    let hourly =
        t.count("SELECT n FROM readings_hourly h JOIN sensors s ON s.key = h.sensor_key WHERE s.id = 'AIT-5102'");
    assert_eq!(hourly, 3, "rollups written with the readings");

    let wide = dir.path().join("wide.csv");
    std::fs::write(&wide, "time,AIT-5102,FIT-5023,NOPE-1\n1796036400,1.1,1000,5\n1796036460,,1010,\n").unwrap();
    let w = twinops::ingest::history::import(t.store.writer(), &db, &wide, None).unwrap();
    assert_eq!((w.rows, w.stored), (4, 3), "{w}");
    assert_eq!(w.refused, [("unknown_tag", 1, vec![2])]);
    assert!(w.to_string().contains("refused, unknown_tag: 1 (first at line 2)"), "{w}");

    // Another value at a stored time is refused as a conflict; the stored one stays.
    let other = dir.path().join("other.csv");
    std::fs::write(
        &other,
        "Timestamp,TagName,Value
2026-11-30T10:00:00Z,AIT-5102,0.95
2026-11-30T10:01:00Z,AIT-5102,0.5
",
    )
    .unwrap();
    let o = twinops::ingest::history::import(t.store.writer(), &db, &other, None).unwrap();
    assert_eq!((o.stored, o.already_present, o.refused.clone()), (0, 1, vec![("conflict", 1, vec![3])]), "{o}");
    let kept = t.count("SELECT count(*) FROM readings r JOIN sensors s ON s.key = r.sensor_key WHERE s.id = 'AIT-5102' AND r.value = 0.1");
    assert_eq!(kept, 1);
}

/// A large plant's lists: text found through the trigram index in any case (and a
/// text too short for it by scanning), the count stopping at 1,000 with a way on, and
/// the summary counting only the assets in service.
#[test]
fn a_large_plants_lists_find_text_and_stop_counting() {
    let t = Twin::empty();
    let dir = TempDir::new().unwrap();
    let mut csv = String::from("Asset ID,Description,Equipment Type,Area,Status\n");
    for i in 1..=1200 {
        let name = if i % 400 == 0 { format!("Aeration \"blower\" {i}") } else { format!("Aeration blower {i}") };
        csv += &format!(
            "AB-{i:04},{},Blower,AER,{}\n",
            name.replace('"', "\"\""),
            if i % 2 == 0 { "Operating" } else { "Standby" }
        );
    }
    std::fs::write(dir.path().join("assets.csv"), csv).unwrap();
    std::fs::write(
        dir.path().join("site.toml"),
        "[site]\nid = \"BIG\"\nname = \"Big works\"\ntimezone = \"UTC\"\n[[stations]]\nid = \"AER\"\nname = \"Aeration\"\n",
    )
    .unwrap();
    let files = ["site.toml", "assets.csv"].map(|f| dir.path().join(f)).to_vec();
    t.import(&files, Mode::Full).unwrap();

    let all = t.ok("list_assets", json!({"text": "BLOWER"}));
    assert_eq!(all["total"], 1000, "{all}");
    assert_eq!(all["total_is_lower_bound"], true);
    assert_eq!(all["next_offset"], 20);
    assert_eq!(all["assets"][0]["id"], "AB-0001", "in id order");
    let deep = t.ok("list_assets", json!({"text": "blower", "offset": 1180, "limit": 50}));
    assert_eq!(deep["assets"].as_array().unwrap().len(), 20, "the last page is reached: {deep}");
    let few = t.ok("list_assets", json!({"text": "blower 11", "limit": 50}));
    assert_eq!(few["total"], 111, "11, 110-119, 1100-1199: {few}");
    assert!(few.get("total_is_lower_bound").is_none());
    assert_eq!(few["assets"][0]["id"], "AB-0011");
    let running = t.ok("list_assets", json!({"text": "blower 11", "status": "running", "limit": 50}));
    assert_eq!(running["total"], 55, "text and a filter together: {running}");
    let quoted = t.ok("list_assets", json!({"text": "\"blower\""}));
    assert_eq!(quoted["total"], 3, "a quote is text like any other: {quoted}");
    let short = t.ok("list_assets", json!({"text": "b-"}));
    assert_eq!(short["total"], 1000, "two characters are scanned for: {short}");
    let by_id = t.ok("list_assets", json!({"text": "ab-120"}));
    assert_eq!(by_id["total"], 1, "{by_id}");

    let summary = t.ok("get_system_summary", json!({}));
    assert_eq!(summary["assets"]["total"], 1200);
    assert_eq!(summary["assets"]["by_status"]["running"], 600);
    // Retired by a full import that leaves them out, they leave the counts.
    let mut kept = std::fs::read_to_string(&files[1]).unwrap();
    kept = kept.lines().take(1001).collect::<Vec<_>>().join("\n");
    std::fs::write(&files[1], kept).unwrap();
    t.import(&files, Mode::Full).unwrap();
    let summary = t.ok("get_system_summary", json!({}));
    assert_eq!(summary["assets"]["total"], 1000, "{summary}");
    assert_eq!(summary["assets"]["by_status"]["standby"], 500);
    let gone = t.ok("list_assets", json!({"text": "blower 1100"}));
    assert_eq!(gone["total"], 0, "a retired asset is not listed: {gone}");
}

/// A trend is stated over the span its readings cover, never stretched beyond it
/// (issue 28): a blower's discharge pressure rising 36 mbar in 45 s, then a HIHI
/// alarm, reads "rose 36 mbar over the last 45 s", not a rate per day.
#[tokio::test(flavor = "multi_thread")]
async fn a_trend_from_45_seconds_is_not_stretched_to_a_day() {
    let t = Twin::empty();
    t.import(&lakeside(), Mode::Full).unwrap();
    let start = Timestamp::now().unix() - 50;
    let at = |i: i64| Timestamp::from_unix(start + 5 * i).to_rfc3339();
    let readings: Vec<Value> = (0..10)
        .map(|i| json!({"type": "reading", "sensor_id": "PIT-4511", "time": at(i), "value": 770.0 + 4.0 * i as f64}))
        .collect();
    assert_eq!(t.send(json!({ "events": readings })).readings, 10);
    let history = t.ok("get_sensor_history", json!({"sensor_id": "PIT-4511", "hours": 24}));
    let trend = &history["stats"]["trend"];
    assert_eq!((trend["span_s"].as_i64(), trend["change"].as_f64()), (Some(45), Some(36.0)), "{trend}");
    assert!(trend.get("per_day").is_none() && trend.get("per_hour").is_none(), "no rate beyond 45 s: {trend}");

    t.send(json!({"events": [{"type": "alarm", "event_id": "blr-1", "asset_id": "BLR-451", "sensor_id": "PIT-4511",
        "code": "PIT-HIHI", "severity": "high", "state": "raised", "value": 806.0, "threshold": 800.0, "time": at(9),
        "message": "Blower 1 discharge pressure high high"}]}));
    let alarm = t.count("SELECT id FROM alarms WHERE event_id = 'blr-1'");
    let report = Agent::new(t.store.clone(), Vec::new(), AgentLimits::default()).triage(alarm).await.unwrap();
    assert!(report.flags.is_empty(), "the rules model's note passes every check: {:?}", report.flags);
    let note = serde_json::to_string(&report.note.unwrap()).unwrap();
    assert!(note.contains("rose 36 mbar over the last 45 s (10 readings)"), "{note}");
    assert!(!note.contains("per day") && !note.contains("per hour"), "{note}");

    // Two readings are no trend, and the note says so instead of a rate.
    t.send(json!({"events": [
        {"type": "reading", "sensor_id": "PIT-4521", "time": at(0), "value": 500.0},
        {"type": "reading", "sensor_id": "PIT-4521", "time": at(9), "value": 520.0},
    ]}));
    let few = t.ok("get_sensor_history", json!({"sensor_id": "PIT-4521"}));
    let said = few["stats"]["trend"]["note"].as_str().unwrap_or_default();
    assert!(said.starts_with("no trend: 2 readings over 45 s"), "{few}");
}
