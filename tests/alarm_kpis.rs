//! The alarm system's performance figures (ISA-18.2 Table 7, EEMUA 191) on a journal
//! whose answers are known by construction: a flood, a chattering and fleeting point, a
//! stale alarm, a point out of service, a shelved alarm, repeats and acknowledgements
//! that must not count, and a known priority mix. The events go in through ingest and
//! the operator actions through `alarms`, as on a site; every figure is checked.

use std::path::Path;

mod common;

use serde_json::{Value, json};
use tempfile::TempDir;

use twinops::alarms::{self, kpi};
use twinops::domain::{Timestamp, parse_time};
use twinops::plant::{self, Mode};
use twinops::store::Store;

struct Journal {
    _dir: TempDir,
    store: Store,
    n: usize,
}

fn at(t: &str) -> Timestamp {
    parse_time(&format!("2026-06-01T{t}Z")).unwrap()
}

impl Journal {
    fn new() -> Journal {
        let dir = TempDir::new().unwrap();
        let store = Store::open(&dir.path().join("kpi.db")).unwrap();
        let fixtures = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/lakeside");
        let files = ["site.toml", "assets.csv", "tags.csv"].map(|f| fixtures.join(f)).to_vec();
        plant::import_files(store.writer(), &files, Mode::Full, false, "engineer.li").unwrap();
        Journal { _dir: dir, store, n: 0 }
    }

    /// One SCADA alarm event through ingest.
    fn event(&mut self, point: (&str, &str, &str), severity: &str, state: &str, time: Timestamp) {
        self.n += 1;
        let (asset, sensor, code) = point;
        common::scada_event(
            &self.store,
            &format!("kpi-{}", self.n),
            (asset, Some(sensor), code),
            severity,
            state,
            time,
        );
    }

    fn pulse(&mut self, point: (&str, &str, &str), severity: &str, raised: Timestamp, secs: i64) {
        self.event(point, severity, "raised", raised);
        self.event(point, severity, "cleared", raised.plus_secs(secs));
    }

    fn open_alarm(&self, point: (&str, &str, &str)) -> i64 {
        self.store
            .read()
            .unwrap()
            .query_row(
                "SELECT max(id) FROM alarms WHERE asset_id = ?1 AND sensor_id = ?2 AND code = ?3",
                [point.0, point.1, point.2],
                |r| r.get(0),
            )
            .unwrap()
    }
}

const F: [(&str, &str, &str); 4] = [
    ("BLR-451", "PIT-4511", "PIT-HI"),
    ("BLR-451", "TIT-4512", "TIT-HI"),
    ("BLR-451", "VT-4513", "VT-HI"),
    ("BLR-451", "FIT-4514", "FIT-LO"),
];
const CHATTER: (&str, &str, &str) = ("BLR-452", "PIT-4521", "PIT-HI");
const HIGH: (&str, &str, &str) = ("BLR-452", "TIT-4522", "TIT-HIHI");
const CRITICAL: (&str, &str, &str) = ("BLR-452", "VT-4523", "VT-HIHI");
const OOS: (&str, &str, &str) = ("HLP-601A", "VT-6115", "VT-HI");
const STALE: (&str, &str, &str) = ("RWP-101A", "FIT-10010", "FIT-LO");

/// The journal of 2026-06-01 (and the days before, for the stale alarm).
fn journal() -> Journal {
    let mut j = Journal::new();
    // Stale: raised 36 h before the window ends and never cleared; another cleared
    // inside the window is not stale.
    j.event(STALE, "high", "raised", parse_time("2026-05-31T12:00:00Z").unwrap());
    j.event(("RWP-101A", "FIT-10010", "FIT-HI"), "low", "raised", parse_time("2026-05-31T06:00:00Z").unwrap());
    j.event(("RWP-101A", "FIT-10010", "FIT-HI"), "low", "cleared", at("06:00:00"));
    // A flood: 12 activations in 01:00-01:10, 8 in 01:10-01:20, 3 in 01:20-01:30 (ends it).
    for k in 0..12 {
        j.pulse(F[k % 4], "low", at("01:00:00").plus_secs(50 * k as i64), 20);
    }
    for k in 0..8 {
        j.pulse(F[k % 4], "low", at("01:10:00").plus_secs(70 * k as i64), 20);
    }
    for k in 0..3 {
        j.pulse(F[k % 4], "low", at("01:20:00").plus_secs(150 * k as i64), 20);
    }
    // Chattering and fleeting: 4 activations in 45 s, each back to normal in 5 s.
    for k in 0..4 {
        j.pulse(CHATTER, "medium", at("03:00:00").plus_secs(15 * k), 5);
    }
    // Out of service: raised 04:00 (counted), taken out 05:00, cleared, raised again at
    // 06:00 while out (suppressed), returned at 07:00: 120 minutes out of service.
    j.event(OOS, "medium", "raised", at("04:00:00"));
    let oos = j.open_alarm(OOS);
    alarms::remove_from_service(j.store.writer(), oos, "kaur", "permit 77", at("05:00:00")).unwrap();
    j.event(OOS, "medium", "cleared", at("05:30:00"));
    j.pulse(OOS, "medium", at("06:00:00"), 600);
    let latest = j.open_alarm(OOS);
    alarms::return_to_service(j.store.writer(), latest, "kaur", at("07:00:00"), Default::default()).unwrap();
    // A repeat while active and an acknowledgement are not activations.
    j.event(HIGH, "high", "raised", at("10:00:00"));
    j.event(HIGH, "high", "raised", at("10:00:30"));
    let high = j.open_alarm(HIGH);
    alarms::acknowledge(j.store.writer(), high, "kaur", at("10:00:40")).unwrap();
    j.event(HIGH, "high", "cleared", at("10:01:00"));
    j.pulse(HIGH, "high", at("12:00:00"), 60);
    // Shelved for 3 minutes, then unshelved by hand.
    j.event(CRITICAL, "critical", "raised", at("14:00:00"));
    let critical = j.open_alarm(CRITICAL);
    alarms::shelve(j.store.writer(), critical, "kaur", 1800, "crew on site", at("14:01:00")).unwrap();
    alarms::unshelve(j.store.writer(), critical, "kaur", at("14:04:00")).unwrap();
    j.event(CRITICAL, "critical", "cleared", at("14:05:00"));
    j
}

fn point(p: (&str, &str, &str)) -> (String, String, String) {
    (p.0.to_string(), p.1.to_string(), p.2.to_string())
}

fn points(list: &Value) -> Vec<(String, String, String)> {
    list.as_array()
        .unwrap()
        .iter()
        .map(|v| {
            let s = |k: &str| v[k].as_str().unwrap_or_default().to_string();
            (s("asset_id"), s("sensor_id"), s("code"))
        })
        .collect()
}

/// Every figure of the day, against what the journal was built to hold.
#[test]
fn the_figures_of_a_known_journal() {
    let j = journal();
    let db = j.store.read().unwrap();
    let k =
        kpi::compute(&db, at("00:00:00"), at("00:00:00").plus_secs(86_400), kpi::KpiSettings::default(), None).unwrap();
    let v = k.to_json();
    // 23 flood activations, 4 chattering, 1 before out of service, 2 high, 1 critical.
    assert_eq!(v["annunciated"], 31, "{v:#}");
    assert_eq!(v["suppressed"], 1, "the raise while out of service");
    assert_eq!(v["window"]["periods_10min"], 144);
    assert_eq!(v["rate_per_day"], 31.0);
    assert_eq!(v["rate_per_hour"], 1.29);
    assert_eq!(v["rate_per_10min"], 0.22);
    assert_eq!(v["rate_verdict"], "very likely acceptable");
    assert_eq!((v["peak_10min"].as_i64(), v["peak_10min_at"].as_str()), (Some(12), Some("2026-06-01T01:00:00Z")));
    assert_eq!(v["pct_periods_over_10"], 0.7, "1 period of 144");
    assert_eq!(v["pct_time_in_flood"], 1.4, "2 periods of 144");
    let floods = v["floods"].as_array().unwrap();
    assert_eq!(floods.len(), 1, "{floods:?}");
    let flood = &floods[0];
    assert_eq!(
        (flood["start"].as_str(), flood["end"].as_str()),
        (Some("2026-06-01T01:00:00Z"), Some("2026-06-01T01:20:00Z"))
    );
    assert_eq!((flood["activations"].as_i64(), flood["peak_10min"].as_i64()), (Some(20), Some(12)));
    assert_eq!(points(&flood["top"]), [point(F[3]), point(F[0]), point(F[1])], "5 each, ties by code");
    assert!(flood["top"].as_array().unwrap().iter().all(|t| t["activations"] == 5));

    assert_eq!(v["top10_share_pct"], 100.0, "8 points in all");
    let bad = &v["bad_actors"];
    assert_eq!(
        points(bad),
        [F[0], F[1], F[2], F[3], CHATTER, HIGH, OOS, CRITICAL].map(point),
        "most activations first, ties by code"
    );
    let counts: Vec<i64> = bad.as_array().unwrap().iter().map(|b| b["activations"].as_i64().unwrap()).collect();
    assert_eq!(counts, [6, 6, 6, 5, 4, 2, 1, 1], "{bad}");
    assert_eq!(bad[0]["share_pct"], 19.4, "6 of 31");

    assert_eq!(points(&v["chattering"]), [point(CHATTER)]);
    assert_eq!(
        (v["chattering"][0]["activations"].as_i64(), v["chattering"][0]["chatter_episodes"].as_i64()),
        (Some(4), Some(1))
    );
    assert_eq!(points(&v["fleeting"]), [point(CHATTER)]);
    assert_eq!(v["fleeting_activations"], 4);

    let stale = v["stale"].as_array().unwrap();
    assert_eq!(stale.len(), 1, "{stale:?}");
    assert_eq!(
        (stale[0]["code"].as_str(), stale[0]["active_since"].as_str()),
        (Some("FIT-LO"), Some("2026-05-31T12:00:00Z"))
    );
    assert_eq!(stale[0]["active_hours"], 36.0);

    assert_eq!(v["priority"], json!({"low": 23, "medium": 5, "high": 2, "critical": 1}));
    assert_eq!(v["priority_pct"], json!({"low": 74.2, "medium": 16.1, "high": 6.5, "critical": 3.2}));

    assert_eq!(points(&v["shelved"]), [point(CRITICAL)]);
    assert_eq!(
        (v["shelved"][0]["shelved_minutes"].as_f64(), v["shelved"][0]["shelved_at_end"].as_bool()),
        (Some(3.0), Some(false))
    );
    assert_eq!(points(&v["out_of_service"]), [point(OOS)]);
    assert_eq!(v["out_of_service"][0]["out_of_service_minutes"], 120.0);
    assert_eq!(v["out_of_service"][0]["out_of_service_at_end"], false);

    let per = v["per_10min"].as_array().unwrap();
    assert_eq!((per.len(), per[6].as_i64(), per[7].as_i64(), per[8].as_i64()), (144, Some(12), Some(8), Some(3)));
    assert!(v["definitions"]["chattering"].as_str().unwrap().contains("3 or more activations within 60 s"));
}

/// A window that starts inside the out-of-service spell knows the point was out at its
/// start; one that ends inside the flood reports it as ongoing; the definitions follow
/// the settings.
#[test]
fn windows_cut_through_states_and_settings_change_definitions() {
    let j = journal();
    let db = j.store.read().unwrap();
    let k = kpi::compute(&db, at("05:30:00"), at("08:00:00"), kpi::KpiSettings::default(), None).unwrap().to_json();
    assert_eq!((k["annunciated"].as_i64(), k["suppressed"].as_i64()), (Some(0), Some(1)), "{k:#}");
    assert_eq!(k["out_of_service"][0]["out_of_service_minutes"], 90.0, "from the window's start to the return");

    let k = kpi::compute(&db, at("01:00:00"), at("01:15:00"), kpi::KpiSettings::default(), None).unwrap().to_json();
    let flood = &k["floods"][0];
    assert_eq!((flood["ongoing"].as_bool(), flood["end"].as_str()), (Some(true), Some("2026-06-01T01:15:00Z")));
    assert_eq!(k["pct_time_in_flood"], 100.0, "both periods of the window are in flood");

    let loose = kpi::KpiSettings { chatter_activations: 5, ..Default::default() };
    let k = kpi::compute(&db, at("00:00:00"), at("23:59:00"), loose, None).unwrap().to_json();
    assert_eq!(k["chattering"], json!([]), "4 activations are not 5");
    assert!(k["definitions"]["chattering"].as_str().unwrap().contains("5 or more"));
    assert!(kpi::KpiSettings { flood_end: 12, ..Default::default() }.validate().is_err());
}

/// The figures from the hourly cache are the figures from the journal, for windows that
/// cut hours anywhere; a late event (a gateway's backfill) drops the hours it changes;
/// and the cache is what the figures read once it holds an hour.
#[test]
fn the_hourly_cache_gives_the_journals_figures_and_follows_late_events() {
    let mut j = journal();
    let windows = [
        (at("00:00:00"), at("00:00:00").plus_secs(86_400)),
        (at("05:30:00"), at("08:00:00")),
        (at("01:00:00"), at("01:15:00")),
        (at("00:17:23"), at("14:02:11")),
        (parse_time("2026-05-31T00:00:00Z").unwrap(), parse_time("2026-06-02T00:00:00Z").unwrap()),
    ];
    let figures = |j: &Journal| -> Vec<Value> {
        let db = j.store.read().unwrap();
        windows
            .iter()
            .map(|(f, t)| kpi::compute(&db, *f, *t, kpi::KpiSettings::default(), None).unwrap().to_json())
            .collect()
    };
    let from_journal = figures(&j);
    let now = parse_time("2026-06-03T00:00:00Z").unwrap();
    let hours = alarms::kpi_cache::refresh(j.store.writer(), now).unwrap();
    // From 2026-05-31T06:00 (the first event) through 2026-06-02T22:00: the hour of 23:00
    // is cached once its fleeting limit and a minute have passed, at 00:01:10.
    assert_eq!(hours, 18 + 24 + 23);
    assert_eq!(alarms::kpi_cache::refresh(j.store.writer(), now).unwrap(), 0, "nothing new to cache");
    for (cached, journal) in figures(&j).iter().zip(&from_journal) {
        assert_eq!(cached, journal);
    }

    // A late activation of the chattering point, within its episode, and back in 2 s.
    j.pulse(CHATTER, "medium", at("03:00:50"), 2);
    let after = figures(&j);
    assert_eq!(after[0]["chattering"][0]["activations"], 5, "the late activation counts: {}", after[0]["chattering"]);
    assert_eq!(after[0]["chattering"][0]["chatter_episodes"], 1, "within the same episode");
    assert_eq!(after[0]["fleeting_activations"], 5);
    assert_eq!(alarms::kpi_cache::refresh(j.store.writer(), now).unwrap(), 1, "the hour 03:00 again");
    assert_eq!(figures(&j), after);
    j.store
        .writer()
        .call(|c| -> Result<(), twinops::store::StoreError> {
            c.execute_batch(
                "DELETE FROM alarm_kpi_hours; DELETE FROM alarm_kpi_periods; DELETE FROM alarm_kpi_point_hours;",
            )?;
            Ok(())
        })
        .unwrap();
    assert_eq!(figures(&j), after, "the same from the journal alone");

    // Once cached, an hour's figures are read from the cache, not the journal.
    alarms::kpi_cache::refresh(j.store.writer(), now).unwrap();
    j.store
        .writer()
        .call(|c| -> Result<(), twinops::store::StoreError> {
            c.execute(
                "UPDATE alarm_kpi_point_hours SET activations = activations + 100 WHERE hour = ?1",
                [at("03:00:00").unix() / 3600],
            )?;
            Ok(())
        })
        .unwrap();
    assert_eq!(figures(&j)[0]["chattering"][0]["activations"], 105);
}

/// The agent's tool asks for lists cut to 10 rows: a cut list is the first rows of the
/// whole one (most activations first, ties by point), with its length in `*_total`,
/// from the journal and from the cache alike.
#[test]
fn cut_lists_are_the_first_rows_of_the_whole_ones() {
    let mut j = Journal::new();
    // Three points chattering and fleeting: 6, 4 and 4 activations 10 s apart, each
    // back in 2 s; a tie between the last two, which the point's code breaks.
    let chatterers = [(CHATTER, 6), (("BLR-452", "VT-4523", "VT-HI"), 4), (("BLR-452", "TIT-4522", "TIT-HI"), 4)];
    for (n, (p, times)) in chatterers.iter().enumerate() {
        for k in 0..*times {
            j.pulse(*p, "low", at("03:00:00").plus_secs(600 * n as i64 + 10 * k), 2);
        }
    }
    let (from, to) = (at("00:00:00"), at("00:00:00").plus_secs(86_400));
    let both = |j: &Journal| {
        let db = j.store.read().unwrap();
        let whole = kpi::compute(&db, from, to, kpi::KpiSettings::default(), None).unwrap().to_json();
        let cut = kpi::compute(&db, from, to, kpi::KpiSettings::default(), Some(2)).unwrap().to_json();
        (whole, cut)
    };
    let (whole, cut) = both(&j);
    assert_eq!(
        points(&whole["chattering"]),
        vec![point(CHATTER), point(("BLR-452", "TIT-4522", "TIT-HI")), point(("BLR-452", "VT-4523", "VT-HI"))],
        "most first, then by code: {whole:#}"
    );
    assert!(whole.get("chattering_total").is_none() && whole.get("fleeting_total").is_none());
    for key in ["chattering", "fleeting"] {
        assert_eq!(cut[key].as_array().unwrap()[..], whole[key].as_array().unwrap()[..2], "{key}");
        assert_eq!(cut[format!("{key}_total")], 3, "{key}");
    }
    assert_eq!(cut["bad_actors"], whole["bad_actors"], "the ten most frequent are never cut below ten");

    let now = parse_time("2026-06-03T00:00:00Z").unwrap();
    assert!(alarms::kpi_cache::refresh(j.store.writer(), now).unwrap() > 0);
    assert_eq!(both(&j), (whole, cut), "the same from the cache");
}
