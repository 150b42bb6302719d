//! `bench tools`: each tool's latency on a scaled plant, as a model calls it.

use std::path::PathBuf;
use std::time::Instant;

use anyhow::Context;
use serde_json::{Value, json};

use super::{Percentiles, ms};
use crate::approvals::Proposer;
use crate::domain::Timestamp;
use crate::rag::{DocIndex, SourceDoc, index_docs};
use crate::seed::{self, SeedOptions, copy_asset_id};
use crate::store::Store;
use crate::support::Rng;
use crate::tools::{self, ToolContext};

#[derive(clap::Args)]
pub struct ToolsBenchArgs {
    /// Copies of the demo plant (100 = about 1,800 assets, 6,000 sensors, 60 million readings).
    #[arg(long, default_value_t = 100)]
    scale: u32,
    /// Database to use; seeded at --scale if it holds no plant yet, reused otherwise.
    #[arg(long, default_value = "data/bench-tools.db")]
    bench_db: PathBuf,
    /// Folder holding plant.toml and docs/.
    #[arg(long, default_value = "seed")]
    from: PathBuf,
    /// Calls per tool.
    #[arg(long, default_value_t = 1000)]
    iterations: usize,
    /// Days of readings to seed (a large utility's scale, --scale 1000, with --days 1).
    #[arg(long, default_value_t = 7)]
    days: u32,
    /// Documentation chunks to search over; synthetic work reports make up the difference.
    #[arg(long, default_value_t = 10_000)]
    chunks: usize,
}

pub fn tools(args: &ToolsBenchArgs) -> anyhow::Result<()> {
    let store = Store::open(&args.bench_db).with_context(|| format!("opening {}", args.bench_db.display()))?;
    let end = seeded_end(&store, args)?;
    let have: i64 = store.read()?.query_row("SELECT count(*) FROM chunks", [], |r| r.get(0))?;
    if (have as usize) < args.chunks {
        index_docs(&store, synthetic_reports(args.chunks - have as usize), Timestamp::now())?;
    }
    // The readings as stored (their hourly rollups' counts), whatever --days seeded them.
    let (assets, sensors, chunks, readings): (i64, i64, i64, i64) = store.read()?.query_row(
        "SELECT (SELECT count(*) FROM assets), (SELECT count(*) FROM sensors), (SELECT count(*) FROM chunks),
                (SELECT coalesce(sum(n), 0) FROM readings_hourly)",
        [],
        |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?)),
    )?;
    println!(
        "twinops bench tools: {assets} assets, {sensors} sensors, {readings} readings, {chunks} doc chunks; \
         {} calls per tool; latency of ToolDef::call (query + JSON rendering), ms",
        args.iterations
    );
    println!("{:<22} {:>8} {:>8} {:>8} {:>8}", "tool", "p50", "p99", "max", "mean");
    let docs = DocIndex::new();
    let started = Instant::now();
    docs.search(&*store.read()?, "warm up", 1)?;
    println!(
        "{:<22} {:>8}  (search index built from {chunks} chunks, once per change)",
        "search index build",
        ms(started.elapsed())
    );
    let copies = (assets / 18).max(1) as u32;
    let caller = Proposer::User("bench".into());
    tools::with_context(&store, &docs, end, caller, |ctx| {
        for (label, arg_sets) in &read_cases(args.iterations, copies) {
            time_reads(ctx, label, arg_sets, args.iterations)?;
        }
        time_proposals(ctx, args.iterations.min(200), copies)
    })?
}

/// The time of the seeded plant's last reading; seeds the database at `--scale` first
/// if it holds no plant.
fn seeded_end(store: &Store, args: &ToolsBenchArgs) -> anyhow::Result<Timestamp> {
    let end: i64 =
        store
            .read()?
            .query_row("SELECT coalesce(max(ts), 0) / 1000 FROM readings WHERE sensor_key = 1", [], |r| r.get(0))?;
    if end != 0 {
        return Ok(Timestamp::from_unix(end));
    }
    let started = Instant::now();
    let end = Timestamp::now().floor_minute();
    eprintln!("seeding {} at scale {} (once; later runs reuse it)...", args.bench_db.display(), args.scale);
    let r = seed::seed(store, &SeedOptions { dir: args.from.clone(), scale: args.scale, end, days: args.days })?;
    eprintln!(
        "seeded {} assets, {} sensors, {} readings, {} alarms in {:.0} s",
        r.assets,
        r.sensors,
        r.readings,
        r.alarms,
        started.elapsed().as_secs_f64()
    );
    Ok(end)
}

/// Arguments for each read tool, spread over the plant's copies the way a model's
/// questions would be.
fn read_cases(n: usize, copies: u32) -> Vec<(&'static str, Vec<Value>)> {
    let mut rng = Rng::from_label("bench");
    let mut pick_asset =
        |base: &[&str]| copy_asset_id(base[rng.below(base.len() as u64) as usize], rng.below(copies as u64) as u32);
    let pumps = ["PUMP-001", "PUMP-004", "PUMP-007", "MTR-007", "VLV-002", "RES-001"];
    let tags = ["VIB-DE", "BRG-TEMP-DE", "PRESS-SUC", "FLOW"];
    let mut history = |hours: u32, points: Option<u32>| -> Vec<Value> {
        (0..n)
            .map(|i| {
                let asset = pick_asset(&["PUMP-001", "PUMP-004", "PUMP-007"]);
                let mut args = json!({"sensor_id": format!("{asset}.{}", tags[i % tags.len()]), "hours": hours});
                if let Some(p) = points {
                    args["points"] = json!(p);
                }
                args
            })
            .collect()
    };
    let history_24h = history(24, None);
    let history_7d = history(168, Some(48));
    let list_assets = (0..n)
        .map(|i| match i % 3 {
            0 => json!({"kind": "centrifugal_pump", "offset": (i * 7) % 500}),
            1 => json!({"station_id": "STN-S", "status": "running"}),
            _ => json!({"text": "booster", "limit": 50}),
        })
        .collect();
    let details = (0..n).map(|_| json!({"asset_id": pick_asset(&pumps)})).collect();
    let alarms = (0..n)
        .map(|i| match i % 3 {
            0 => json!({"asset_id": pick_asset(&pumps), "last_hours": 168}),
            1 => json!({"state": "active", "min_severity": "medium"}),
            _ => json!({"last_hours": 24, "limit": 50}),
        })
        .collect();
    vec![
        ("get_system_summary", vec![json!({})]),
        ("list_assets", list_assets),
        ("get_asset_details", details),
        ("list_alarms", alarms),
        ("get_sensor_history", history_24h),
        ("get_sensor_history 7d", history_7d),
        ("search_docs", QUERIES.iter().map(|q| json!({"query": q})).collect()),
        ("read_doc", (0..n).map(|i| json!({"citation": format!("arp-vibration.md#{}", i % 3)})).collect()),
    ]
}

/// Times `n` calls of the tool `label` names, cycling through `arg_sets`.
fn time_reads(ctx: &ToolContext, label: &str, arg_sets: &[Value], n: usize) -> anyhow::Result<()> {
    let name = label.split_whitespace().next().expect("label");
    let tool = tools::find(name).expect("benchmarked tools exist");
    // One untimed pass over the argument sets first: the figures are for a warm
    // daemon, not for the first touch of each page of a 2 GB file.
    for args in arg_sets {
        tool.call(ctx, args.clone());
    }
    let mut samples = Vec::with_capacity(n);
    for i in 0..n {
        let args = arg_sets[i % arg_sets.len()].clone();
        let started = Instant::now();
        let out = tool.call(ctx, args);
        samples.push(started.elapsed());
        anyhow::ensure!(!out.is_error, "{label} failed during the benchmark: {}", out.content);
    }
    let p = Percentiles::of(samples);
    println!("{:<22} {:>8} {:>8} {:>8} {:>8}", label, ms(p.p50), ms(p.p99), ms(p.max), ms(p.mean));
    Ok(())
}

/// Proposals write: each is a durable commit (synchronous=FULL), so they are timed
/// apart from the reads, on fewer calls.
fn time_proposals(ctx: &ToolContext, n: usize, copies: u32) -> anyhow::Result<()> {
    let tool = tools::find("propose_work_order").expect("exists");
    let mut samples = Vec::new();
    let run_tag = Timestamp::now().unix();
    for i in 0..n {
        let args = json!({
            "asset_id": copy_asset_id("PUMP-007", (i as u32) % copies),
            "action": "vibration_analysis", "priority": "normal",
            "title": format!("Bench proposal {run_tag}-{i}"),
            "justification": "Benchmark proposal: drive-end vibration trending up over the week.",
        });
        let started = Instant::now();
        let out = tool.call(ctx, args);
        samples.push(started.elapsed());
        anyhow::ensure!(!out.is_error, "propose_work_order failed: {}", out.content);
    }
    let p = Percentiles::of(samples);
    println!(
        "{:<22} {:>8} {:>8} {:>8} {:>8}  (write + fsync; repeats are idempotent)",
        "propose_work_order",
        ms(p.p50),
        ms(p.p99),
        ms(p.max),
        ms(p.mean)
    );
    Ok(())
}

/// Questions the way a model asks them.
const QUERIES: &[&str] = &[
    "What is the alarm response procedure for VIB-HI on a centrifugal pump?",
    "bearing temperature rising together with vibration on the drive end",
    "how to clean a blocked suction strainer on a booster pump",
    "symptoms of cavitation: low suction pressure and unsteady discharge pressure",
    "lockout tagout steps before replacing pump bearings",
    "who should I call out of hours for a motor winding temperature alarm",
    "reservoir level falling quickly, could it be a burst main?",
    "ISO 10816-3 zone boundaries for medium machines on flexible supports",
    "motor current high but flow is normal, what could cause it",
    "how much grease for the drive end bearing and how often",
    "valve position does not follow the setpoint, actuator torque trip",
    "previous repairs of mechanical seal leakage on the south booster pumps",
    "PRESS-SUC-LO suction pressure low time to respond",
    "what does zone C mean for long term operation of a pump",
    "steps to return a pump to service after bearing replacement and alignment",
    "discharge pressure high with the reservoir inlet valve closed",
];

/// Synthetic work reports, one chunk each, written like a technician's notes, so the
/// search runs over a realistic vocabulary at realistic size.
fn synthetic_reports(count: usize) -> Vec<SourceDoc> {
    const FINDINGS: &[&str] = &[
        "Drive-end bearing outer race shows spalling; grease darkened and dry.",
        "Suction strainer partly blocked with leaves and silt; differential pressure high.",
        "Coupling elements worn; misalignment of 0.12 mm measured at the spacer.",
        "Mechanical seal weeping at the gland; faces scored.",
        "Impeller vanes pitted near the eye, consistent with cavitation.",
        "Motor terminal box damp; insulation resistance low on phase W.",
        "Valve actuator torque switch tripping at 70% open; debris on the disc.",
        "Vibration spectrum shows running-speed peak, imbalance suspected.",
        "Non-return valve flap sticking partly open; reverse flow on stop.",
        "Level transmitter reading 0.08 m high against dip tape.",
    ];
    const ACTIONS: &[&str] = &[
        "Replaced both bearings, realigned the coupling and recorded baseline vibration.",
        "Cleaned the strainer and checked suction valve fully open; pump returned to duty.",
        "Replaced coupling elements and realigned to 0.03 mm.",
        "Fitted new mechanical seal; ran for 30 minutes without leakage.",
        "Recommended impeller replacement at next outage; reduced duty flow meanwhile.",
        "Dried terminal box, resealed gland plate, retested at 1 kV.",
        "Cleared debris, stroked valve 0-100-0%, recalibrated position feedback.",
        "Balanced impeller in workshop; vibration reduced from 5.1 to 1.8 mm/s.",
        "Serviced non-return valve hinge pin and seat.",
        "Recalibrated transmitter zero and span; verified alarms at LO and HI.",
    ];
    const CREWS: &[&str] = &["R. Okafor", "M. Lindqvist", "A. Brennan", "J. Achterberg", "contractor crew"];
    let mut rng = Rng::from_label("synthetic-reports");
    (0..count)
        .map(|i| {
            let asset = copy_asset_id(["PUMP-001", "PUMP-004", "PUMP-007", "MTR-004", "VLV-001", "RES-001"][i % 6], (i / 6 % 100) as u32);
            let finding = FINDINGS[rng.below(FINDINGS.len() as u64) as usize];
            let action = ACTIONS[rng.below(ACTIONS.len() as u64) as usize];
            let crew = CREWS[rng.below(CREWS.len() as u64) as usize];
            let hours = 2 + rng.below(14);
            SourceDoc::markdown(
                format!("bench/work-reports/wr-{i:05}.md"),
                format!(
                    "# Work report WR-{i:05}: {asset}\n\n## Findings and actions\n\nAsset {asset}, attended by {crew}, {hours} hours on site. \
                     Reported by the control room after alarms and operator rounds. {finding} {action} \
                     Follow-up inspection recommended at the next quarterly vibration route.\n"
                ),
            )
        })
        .collect()
}
