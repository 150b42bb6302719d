//! The Grafana dashboards in `dashboards/` are importable as they are (JSON with a
//! Prometheus data source variable that every panel uses), and every metric their
//! queries name is one the daemon exports.

use std::collections::BTreeSet;
use std::path::Path;

use serde_json::Value;
use twinops::metrics::{Gauges, render};

fn exprs(v: &Value, out: &mut Vec<String>) {
    match v {
        Value::Object(m) => {
            for (k, v) in m {
                match (k.as_str(), v) {
                    ("expr", Value::String(e)) => out.push(e.clone()),
                    _ => exprs(v, out),
                }
            }
        }
        Value::Array(a) => a.iter().for_each(|v| exprs(v, out)),
        _ => {}
    }
}

/// Metric names in a PromQL expression: identifiers that start with `twinops_`.
fn metric_names(expr: &str) -> BTreeSet<String> {
    let mut names = BTreeSet::new();
    let bytes = expr.as_bytes();
    let mut i = 0;
    while let Some(at) = expr[i..].find("twinops_") {
        let start = i + at;
        let mut end = start;
        while end < bytes.len() && (bytes[end].is_ascii_alphanumeric() || bytes[end] == b'_') {
            end += 1;
        }
        names.insert(expr[start..end].to_string());
        i = end;
    }
    names
}

#[test]
fn every_dashboard_query_uses_exported_metrics() {
    // What /metrics prints: the same function, every declared metric with its TYPE.
    let exported = render(&Gauges(Vec::new()));
    let has = |name: &str| exported.contains(&format!("# TYPE {name} "));
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("dashboards");
    let mut checked = 0;
    for entry in std::fs::read_dir(&dir).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_none_or(|e| e != "json") {
            continue;
        }
        let d: Value = serde_json::from_str(&std::fs::read_to_string(&path).unwrap())
            .unwrap_or_else(|e| panic!("{}: not JSON: {e}", path.display()));
        let file = path.display().to_string();
        assert!(d["uid"].is_string() && d["title"].is_string() && d["schemaVersion"].is_number(), "{file}");
        let vars = d["templating"]["list"].as_array().unwrap();
        assert!(
            vars.iter().any(|v| v["type"] == "datasource" && v["query"] == "prometheus" && v["name"] == "datasource"),
            "{file}"
        );
        let panels = d["panels"].as_array().unwrap();
        assert!(!panels.is_empty(), "{file}");
        for p in panels {
            assert_eq!(p["datasource"]["uid"], "${datasource}", "{file}: {}", p["title"]);
            let mut es = Vec::new();
            exprs(p, &mut es);
            assert!(!es.is_empty(), "{file}: panel {} has no query", p["title"]);
            for e in es {
                let names = metric_names(&e);
                assert!(!names.is_empty(), "{file}: {e} names no twinops metric");
                for n in names {
                    let base = ["_bucket", "_sum", "_count"].iter().find_map(|s| n.strip_suffix(s)).filter(|b| has(b));
                    assert!(
                        has(&n) || base.is_some(),
                        "{file}: panel {} uses {n}, which the daemon does not export",
                        p["title"]
                    );
                    checked += 1;
                }
            }
        }
    }
    assert!(checked >= 30, "{checked} metric uses checked");
}

#[test]
fn the_name_scanner_finds_histogram_parts() {
    let names = metric_names(
        "histogram_quantile(0.95, sum by (le) (rate(twinops_triage_run_seconds_bucket[15m]))) / twinops_x",
    );
    assert_eq!(names.into_iter().collect::<Vec<_>>(), ["twinops_triage_run_seconds_bucket", "twinops_x"]);
}
