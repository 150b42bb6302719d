//! The alarm performance figures as a report, for a terminal or as Markdown, from the
//! same JSON the API and the agent's tool return: every figure beside its target and
//! every definition in force written out below the tables.

use serde_json::Value;

/// How the report is written.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Format {
    Text,
    Json,
    Md,
}

/// One table: a title, its header and rows.
struct Table {
    title: String,
    header: Vec<&'static str>,
    rows: Vec<Vec<String>>,
}

fn s(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        Value::Null => "-".into(),
        other => other.to_string(),
    }
}

fn point(v: &Value) -> Vec<String> {
    vec![s(&v["asset_id"]), s(&v["sensor_id"]), s(&v["code"])]
}

fn tables(k: &Value) -> Vec<Table> {
    let mut tables = vec![
        Table {
            title: "Figures".into(),
            header: vec!["figure", "value", "target (ISA-18.2 Table 7)"],
            rows: figures(k),
        },
        Table {
            title: "Floods".into(),
            header: vec!["start", "end", "activations", "peak/10 min", "top contributors"],
            rows: rows(k, "floods", &|f| {
                let top: Vec<String> = f["top"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .map(|t| format!("{} {} ({})", s(&t["asset_id"]), s(&t["code"]), s(&t["activations"])))
                    .collect();
                let end = if f["ongoing"] == true { format!("{} (ongoing)", s(&f["end"])) } else { s(&f["end"]) };
                vec![s(&f["start"]), end, s(&f["activations"]), s(&f["peak_10min"]), top.join(", ")]
            }),
        },
    ];
    tables.extend(point_tables(k));
    tables.push(Table {
        title: "Consequential pairs (candidates for designed suppression)".into(),
        header: vec!["first", "then", "support", "confidence %", "lift", "lag median / p90 s"],
        rows: rows(k, "consequential_pairs", &|p| {
            let point = |x: &Value| format!("{} {}", s(&x["asset_id"]), s(&x["code"]));
            let pct = p["confidence"].as_f64().map_or(String::new(), |c| format!("{:.0}", c * 100.0));
            vec![
                point(&p["first"]),
                point(&p["then"]),
                format!("{} of {}", s(&p["support"]), s(&p["first_activations"])),
                pct,
                p["lift"].as_f64().map_or(String::new(), |l| format!("{l:.1}")),
                format!("{} / {}", s(&p["lag_median_s"]), s(&p["lag_p90_s"])),
            ]
        }),
    });
    tables
}

/// One row per item of the list `key`.
fn rows(k: &Value, key: &str, f: &dyn Fn(&Value) -> Vec<String>) -> Vec<Vec<String>> {
    k[key].as_array().map(|l| l.iter().map(f).collect()).unwrap_or_default()
}

/// Each figure beside its target.
fn figures(k: &Value) -> Vec<Vec<String>> {
    let target = |key: &str| s(&k["targets"][key]);
    vec![
        vec!["annunciated activations".into(), s(&k["annunciated"]), String::new()],
        vec!["suppressed (out of service, shelved)".into(), s(&k["suppressed"]), String::new()],
        vec!["average per day".into(), s(&k["rate_per_day"]), target("rate_per_day")],
        vec!["average per hour".into(), s(&k["rate_per_hour"]), target("rate_per_hour")],
        vec![
            "average per 10 minutes".into(),
            format!("{} ({})", s(&k["rate_per_10min"]), s(&k["rate_verdict"])),
            target("rate_per_10min"),
        ],
        vec![
            "peak in one 10-minute period".into(),
            format!("{} at {}", s(&k["peak_10min"]), s(&k["peak_10min_at"])),
            target("peak_10min"),
        ],
        vec!["% of 10-minute periods over 10".into(), s(&k["pct_periods_over_10"]), target("pct_periods_over_10")],
        vec!["% of time in flood".into(), s(&k["pct_time_in_flood"]), target("pct_time_in_flood")],
        vec!["top 10 points' share %".into(), s(&k["top10_share_pct"]), target("top10_share_pct")],
        vec![
            "chattering points".into(),
            k["chattering"].as_array().map_or(0, Vec::len).to_string(),
            target("chattering"),
        ],
        vec!["fleeting activations".into(), s(&k["fleeting_activations"]), target("fleeting")],
        vec!["stale alarms at the end".into(), k["stale"].as_array().map_or(0, Vec::len).to_string(), target("stale")],
        vec![
            "priority % low / medium / high / critical".into(),
            ["low", "medium", "high", "critical"].map(|p| s(&k["priority_pct"][p])).join(" / "),
            target("priority_pct"),
        ],
    ]
}

/// The lists of points: bad actors, chattering, fleeting, stale, shelved, out of service.
fn point_tables(k: &Value) -> Vec<Table> {
    vec![
        Table {
            title: "Most frequent points (bad actors)".into(),
            header: vec!["asset", "sensor", "code", "activations", "share %"],
            rows: rows(k, "bad_actors", &|b| [point(b), vec![s(&b["activations"]), s(&b["share_pct"])]].concat()),
        },
        Table {
            title: "Chattering points".into(),
            header: vec!["asset", "sensor", "code", "activations", "episodes"],
            rows: rows(k, "chattering", &|c| {
                [point(c), vec![s(&c["activations"]), s(&c["chatter_episodes"])]].concat()
            }),
        },
        Table {
            title: "Fleeting activations".into(),
            header: vec!["asset", "sensor", "code", "fleeting", "activations"],
            rows: rows(k, "fleeting", &|c| [point(c), vec![s(&c["fleeting"]), s(&c["activations"])]].concat()),
        },
        Table {
            title: "Stale alarms".into(),
            header: vec!["alarm", "asset", "sensor", "code", "severity", "active since", "hours"],
            rows: rows(k, "stale", &|a| {
                vec![
                    s(&a["alarm_id"]),
                    s(&a["asset_id"]),
                    s(&a["sensor_id"]),
                    s(&a["code"]),
                    s(&a["severity"]),
                    s(&a["active_since"]),
                    s(&a["active_hours"]),
                ]
            }),
        },
        Table {
            title: "Shelved".into(),
            header: vec!["asset", "sensor", "code", "minutes", "shelved at the end"],
            rows: rows(k, "shelved", &|a| [point(a), vec![s(&a["shelved_minutes"]), s(&a["shelved_at_end"])]].concat()),
        },
        Table {
            title: "Out of service".into(),
            header: vec!["asset", "sensor", "code", "minutes", "out at the end"],
            rows: rows(k, "out_of_service", &|a| {
                [point(a), vec![s(&a["out_of_service_minutes"]), s(&a["out_of_service_at_end"])]].concat()
            }),
        },
    ]
}

fn title(k: &Value) -> String {
    format!(
        "Alarm performance from {} to {} ({} h, {} ten-minute periods)",
        s(&k["window"]["from"]),
        s(&k["window"]["to"]),
        s(&k["window"]["hours"]),
        s(&k["window"]["periods_10min"])
    )
}

fn definitions(k: &Value) -> Vec<(String, String)> {
    k["definitions"].as_object().map(|m| m.iter().map(|(k, v)| (k.clone(), s(v))).collect()).unwrap_or_default()
}

/// The report in `format`.
pub fn render(k: &Value, format: Format) -> String {
    match format {
        Format::Json => serde_json::to_string_pretty(k).unwrap_or_default(),
        Format::Md => markdown(k),
        Format::Text => text(k),
    }
}

fn text(k: &Value) -> String {
    let mut out = format!("{}\n", title(k));
    for t in tables(k) {
        out.push_str(&format!("\n{}\n", t.title));
        if t.rows.is_empty() {
            out.push_str("  none\n");
            continue;
        }
        let widths: Vec<usize> = (0..t.header.len())
            .map(|i| t.rows.iter().map(|r| r[i].chars().count()).chain([t.header[i].len()]).max().unwrap_or(0))
            .collect();
        let line = |cells: Vec<&str>| {
            let padded: Vec<String> = cells.iter().zip(&widths).map(|(c, w)| format!("{c:<w$}")).collect();
            format!("  {}\n", padded.join("  ").trim_end())
        };
        out.push_str(&line(t.header.clone()));
        for r in &t.rows {
            out.push_str(&line(r.iter().map(String::as_str).collect()));
        }
    }
    out.push_str("\nDefinitions\n");
    for (name, meaning) in definitions(k) {
        out.push_str(&format!("  {name}: {meaning}\n"));
    }
    out
}

fn markdown(k: &Value) -> String {
    let cell = |c: &str| c.replace('|', "\\|");
    let mut out = format!("# {}\n", title(k));
    for t in tables(k) {
        out.push_str(&format!("\n## {}\n\n", t.title));
        if t.rows.is_empty() {
            out.push_str("None.\n");
            continue;
        }
        out.push_str(&format!("| {} |\n|{}\n", t.header.join(" | "), "---|".repeat(t.header.len())));
        for r in &t.rows {
            out.push_str(&format!("| {} |\n", r.iter().map(|c| cell(c)).collect::<Vec<_>>().join(" | ")));
        }
    }
    out.push_str("\n## Definitions\n\n");
    for (name, meaning) in definitions(k) {
        out.push_str(&format!("- **{name}**: {meaning}\n"));
    }
    out
}
