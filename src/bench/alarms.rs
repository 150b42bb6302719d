//! `bench alarms`: the alarm performance figures over a year of a large utility's alarm
//! journal, and the agent's KPI tool over a week, each beside a plain SQL query over the
//! same rows in the same run.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::Context;
use rusqlite::params;

use super::{Percentiles, ms, peak_rss_kib};
use crate::alarms::{kpi, kpi_cache};
use crate::approvals::Proposer;
use crate::domain::Timestamp;
use crate::rag::DocIndex;
use crate::seed::{self, SeedOptions};
use crate::store::{Store, StoreError};
use crate::support::Rng;

#[derive(clap::Args)]
pub struct AlarmsBenchArgs {
    /// Database to use; a plant and its journal are generated if it holds none.
    #[arg(long, default_value = "data/bench-alarms.db")]
    bench_db: PathBuf,
    #[command(flatten)]
    journal: Journal,
    /// Calls of the KPI tool over the journal's last 7 days.
    #[arg(long, default_value_t = 200)]
    iterations: usize,
    /// Days of 1 Hz readings of one sensor for `alarms replay` (30 days: 2.6 million).
    #[arg(long, default_value_t = 30)]
    replay_days: u32,
}

/// The plant and the year of its alarm journal the alarm benchmarks generate.
#[derive(clap::Args)]
pub struct Journal {
    /// Folder holding plant.toml and docs/.
    #[arg(long, default_value = "seed")]
    from: PathBuf,
    /// Copies of the demo plant (1000 = a large utility: 18,000 assets, 60,000 sensors).
    #[arg(long, default_value_t = 1000)]
    pub scale: u32,
    /// Annunciated activations in the journal.
    #[arg(long, default_value_t = 2_000_000)]
    activations: u64,
    /// Days the journal spans, ending at a fixed time.
    #[arg(long, default_value_t = 365)]
    pub days: u32,
}

/// The journal ends here (a fixed time, so runs compare).
pub(super) const END: i64 = 1_796_040_000;

pub fn alarms(args: &AlarmsBenchArgs) -> anyhow::Result<()> {
    let store = with_journal(&args.bench_db, &args.journal)?;
    let (points, events): (i64, i64) = store.read()?.query_row(
        "SELECT (SELECT count(*) FROM sensors), (SELECT count(*) FROM alarm_events)",
        [],
        |r| Ok((r.get(0)?, r.get(1)?)),
    )?;
    let to = Timestamp::from_unix(END);
    let days = args.journal.days;
    let from = to.plus_secs(-(days as i64) * 86_400);
    println!("twinops bench alarms: {points} sensors, {events} journal events over {days} days");

    year(&store, from, to, days)?;
    week(&store, to, args.iterations)?;
    replay(&store, args.replay_days)
}

/// The figures over the journal's `days` three ways, beside a plain SQL count.
fn year(store: &Store, from: Timestamp, to: Timestamp, days: u32) -> anyhow::Result<()> {
    // The year's figures three ways: passing over the journal (the cache emptied
    // first), caching its hours (once; housekeeping adds each hour as it closes), and
    // from the cache; beside a plain SQL count over the same rows.
    store.writer().call(|c| -> Result<(), StoreError> {
        c.execute_batch(
            "DELETE FROM alarm_kpi_hours; DELETE FROM alarm_kpi_periods; DELETE FROM alarm_kpi_point_hours;",
        )?;
        Ok(())
    })?;
    let db = store.read()?;
    let rss_before = peak_rss_kib();
    let started = Instant::now();
    let journal = kpi::compute(&db, from, to, kpi::KpiSettings::default(), None)?.to_json();
    let journal_time = started.elapsed();
    let started = Instant::now();
    let hours = kpi_cache::refresh(store.writer(), to.plus_secs(3600))?;
    let cache_time = started.elapsed();
    let started = Instant::now();
    let figures = kpi::compute(&db, from, to, kpi::KpiSettings::default(), None)?.to_json();
    let kpi_time = started.elapsed();
    let rss_after = peak_rss_kib();
    anyhow::ensure!(figures == journal, "the cached figures differ from the journal's");
    let started = Instant::now();
    let plain = plain_per_period(&db, from, to)?;
    let plain_time = started.elapsed();
    let ratio = |t: Duration| t.as_secs_f64() / plain_time.as_secs_f64().max(1e-9);
    println!(
        "alarms kpi over {} days ({} annunciated activations, {} floods, {} chattering points): \
         {} ms from the cache, {} ms passing over the journal; plain SQL count per 10-minute period over \
         the same rows: {} ms ({plain} activations); ratios {:.2}x and {:.1}x",
        days,
        figures["annunciated"],
        figures["floods"].as_array().map_or(0, Vec::len),
        figures["chattering"].as_array().map_or(0, Vec::len),
        ms(kpi_time),
        ms(journal_time),
        ms(plain_time),
        ratio(kpi_time),
        ratio(journal_time),
    );
    println!(
        "the cache of {hours} hours built in {} ms (once; housekeeping adds each hour as it closes)",
        ms(cache_time)
    );
    println!(
        "peak resident memory: {:.0} MiB before, {:.0} MiB after the year's figures",
        rss_before as f64 / 1024.0,
        rss_after as f64 / 1024.0
    );
    Ok(())
}

/// The agent's KPI tool over the last 7 days, `iterations` times, beside a plain SQL count.
fn week(store: &Store, to: Timestamp, iterations: usize) -> anyhow::Result<()> {
    let week = to.plus_secs(-7 * 86_400);
    let docs = DocIndex::new();
    let (tool, sql) = crate::tools::with_context(store, &docs, to, Proposer::User("bench".into()), |ctx| {
        let mut tool = Vec::with_capacity(iterations);
        let mut sql = Vec::with_capacity(iterations);
        for _ in 0..iterations {
            let started = Instant::now();
            let out = crate::tools::call(ctx, "get_alarm_kpis", serde_json::json!({}));
            tool.push(started.elapsed());
            anyhow::ensure!(!out.is_error, "get_alarm_kpis failed: {}", out.content);
            let started = Instant::now();
            plain_per_period(ctx.db, week, to)?;
            sql.push(started.elapsed());
        }
        Ok::<(Vec<Duration>, Vec<Duration>), anyhow::Error>((tool, sql))
    })??;
    let (tool, sql) = (Percentiles::of(tool), Percentiles::of(sql));
    println!(
        "get_alarm_kpis over 7 days: p50 {} ms, p99 {} ms; plain SQL over the same rows: p50 {} ms, p99 {} ms ({} calls)",
        ms(tool.p50),
        ms(tool.p99),
        ms(sql.p50),
        ms(sql.p99),
        tool.n
    );
    Ok(())
}

/// The sensor whose readings `alarms replay` runs through, and its high set point.
const REPLAY_SENSOR: &str = "PUMP-007.VIB-DE";

/// `alarms replay` of one sensor's 1 Hz readings over `days`, beside a plain SQL pass
/// over the same rows (count, and readings past the set point).
fn replay(store: &Store, days: u32) -> anyhow::Result<()> {
    use crate::alarms::limits::Level;
    use crate::alarms::replay::{self, Settings};
    let key: i64 = store.read()?.query_row("SELECT key FROM sensors WHERE id = ?1", [REPLAY_SENSOR], |r| r.get(0))?;
    let from_ms = (END - days as i64 * 86_400) * 1000;
    let have: i64 = store.read()?.query_row(
        "SELECT count(*) FROM readings WHERE sensor_key = ?1 AND ts >= ?2",
        params![key, from_ms],
        |r| r.get(0),
    )?;
    if have < days as i64 * 86_400 {
        let started = Instant::now();
        store.writer().call(move |c| -> Result<(), StoreError> {
            let mut rng = Rng::from_label("bench replay");
            let mut insert =
                c.prepare_cached("INSERT OR REPLACE INTO readings (sensor_key, ts, value) VALUES (?1, ?2, ?3)")?;
            // Vibration around 4.2 mm/s with slow swells and noise: it crosses 4.5 often.
            for s in 0..days as i64 * 86_400 {
                let swell = 0.35 * ((s as f64) / 5_400.0).sin();
                insert.execute(params![key, from_ms + s * 1000, 4.2 + swell + 0.04 * rng.gauss()])?;
            }
            Ok(())
        })?;
        println!(
            "{} readings of {REPLAY_SENSOR} generated in {:.1} s",
            days as i64 * 86_400,
            started.elapsed().as_secs_f64()
        );
    }
    let db = store.read()?;
    let current = Settings { set_point: 4.5, deadband: 0.0, on_delay_s: 0, off_delay_s: 0 };
    let proposed = Settings { set_point: 4.5, deadband: 0.1, on_delay_s: 10, off_delay_s: 5 };
    let from = Timestamp::from_unix(from_ms / 1000);
    let started = Instant::now();
    let c = replay::replay_sensor(&db, key, from, Level::High, current, proposed)?;
    let replay_time = started.elapsed();
    let started = Instant::now();
    let (n, past): (i64, i64) = db.query_row(
        "SELECT count(*), coalesce(sum(value > 4.5), 0) FROM readings WHERE sensor_key = ?1 AND ts >= ?2",
        params![key, from_ms],
        |r| Ok((r.get(0)?, r.get(1)?)),
    )?;
    let plain_time = started.elapsed();
    println!(
        "alarms replay of {REPLAY_SENSOR} over {days} days: {} ms for {} readings ({} activations now, {} proposed); \
         plain SQL over the same rows: {} ms ({n} readings, {past} past the set point); ratio {:.1}x",
        ms(replay_time),
        c.readings,
        c.current.activations,
        c.proposed.activations,
        ms(plain_time),
        replay_time.as_secs_f64() / plain_time.as_secs_f64().max(1e-9)
    );
    Ok(())
}

/// The baseline: activations per 10-minute period, one grouped query.
fn plain_per_period(db: &rusqlite::Connection, from: Timestamp, to: Timestamp) -> rusqlite::Result<i64> {
    let mut stmt = db.prepare_cached(
        "SELECT sum(n) FROM (SELECT count(*) AS n FROM alarm_events
         WHERE at >= ?1 AND at < ?2 AND kind = 'raised' GROUP BY (at * 1000 + millis) / 600000)",
    )?;
    stmt.query_row(params![from.unix(), to.unix()], |r| Ok(r.get::<_, Option<i64>>(0)?.unwrap_or(0)))
}

/// A plant at `--scale` (no readings) and a journal shaped like a large site's: a few
/// bad actors and chattering points take a large share, the rest spread thin; most
/// alarms stand minutes, some return within seconds; half are acknowledged. Written
/// straight into the journal's tables (as ingest writes them, without triage jobs),
/// 2,000 occurrences a job: the writer runs each job in a savepoint, whose statement
/// journal SQLite walks at every statement's end, so a larger job grows quadratically.
/// The benchmark's database, with its plant and journal generated the first time.
pub(super) fn with_journal(path: &std::path::Path, journal: &Journal) -> anyhow::Result<Store> {
    let store = Store::open(path).with_context(|| format!("opening {}", path.display()))?;
    let have: i64 = store.read()?.query_row("SELECT count(*) FROM alarm_events", [], |r| r.get(0))?;
    if have == 0 {
        let started = Instant::now();
        generate(&store, journal)?;
        println!("journal generated in {:.1} s", started.elapsed().as_secs_f64());
    }
    Ok(store)
}

/// The `scale` plant and a journal of `activations` spread over `days` ending at [`END`]:
/// bad actors, frequent points and the rest, as a large utility's year.
fn generate(store: &Store, journal: &Journal) -> anyhow::Result<()> {
    let Journal { from, scale, activations, days } = journal;
    let (scale, activations, days) = (*scale, *activations, *days);
    seed::seed(store, &SeedOptions { dir: from.clone(), scale, end: Timestamp::from_unix(END), days: 0 })?;
    let points: Vec<(String, String, String)> = store
        .read()?
        .prepare("SELECT asset_id, id, kind FROM sensors ORDER BY key")?
        .query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))?
        .collect::<Result<_, _>>()?;
    anyhow::ensure!(!points.is_empty(), "the plant has no sensors");
    let start = END - days as i64 * 86_400;
    let step = (days as f64 * 86_400.0) / activations as f64;
    let mut done = 0u64;
    while done < activations {
        let batch = (activations - done).min(2_000);
        let points = points.clone();
        store.writer().call(move |c| -> Result<(), StoreError> {
            let mut rng = Rng::from_label(&format!("bench-alarms-{done}"));
            for i in done..done + batch {
                write_activation(c, &mut rng, &points, i, (start, step))?;
            }
            Ok(())
        })?;
        done += batch;
    }
    Ok(())
}

/// Occurrence `i` of the generated journal: its alarm row and its raised, acknowledged
/// (half of them) and cleared events.
fn write_activation(
    c: &rusqlite::Connection,
    rng: &mut Rng,
    points: &[(String, String, String)],
    i: u64,
    (start, step): (i64, f64),
) -> rusqlite::Result<()> {
    let mut alarm = c.prepare_cached(
        "INSERT INTO alarms (event_id, asset_id, sensor_id, code, severity, state, message, raised_at,
                             last_raised_at, cleared_at, acked_at, acked_by)
         VALUES (?1, ?2, ?3, ?4, ?5, 'cleared', '', ?6, ?6, ?7, ?8, ?9)",
    )?;
    let mut event = c.prepare_cached(
        "INSERT INTO alarm_events (alarm_id, event_id, kind, at, millis, actor, detail)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, '')",
    )?;
    let r = rng.uniform();
    // 30% from 10 bad actors, 20% from 200 frequent points, the rest anywhere.
    let p = if r < 0.3 {
        (rng.next_u64() % 10) as usize
    } else if r < 0.5 {
        10 + (rng.next_u64() % 200) as usize
    } else {
        (rng.next_u64() % points.len() as u64) as usize
    } % points.len();
    let (asset, sensor, kind) = &points[p];
    let code = format!("{}-{}", kind.to_uppercase().replace('_', "-"), ["HI", "LO", "HIHI"][p % 3]);
    let severity = match p % 20 {
        0 => "high",
        1..=3 => "medium",
        _ => "low",
    };
    let raised_ms = (start as f64 * 1000.0 + i as f64 * step * 1000.0) as i64;
    // Bad actors come and go within a minute (a tenth within seconds: fleeting);
    // frequent points stand minutes, the rest up to an hour.
    let longest = match p {
        0..10 => 60_000.0,
        10..210 => 300_000.0,
        _ => 3_600_000.0,
    };
    let held_ms = if rng.uniform() < 0.1 { 2_000 } else { 1_000 + (rng.uniform() * longest) as i64 };
    let cleared_ms = raised_ms + held_ms;
    let acked = rng.uniform() < 0.5;
    let id = format!("b{i}");
    alarm.execute(params![
        id,
        asset,
        sensor,
        code,
        severity,
        raised_ms / 1000,
        cleared_ms / 1000,
        acked.then_some(raised_ms / 1000 + 1),
        acked.then_some("operator")
    ])?;
    let alarm_id = c.last_insert_rowid();
    let mut journal = |kind: &str, at_ms: i64, event_id: Option<String>, actor: &str| {
        event.execute(params![alarm_id, event_id, kind, at_ms / 1000, at_ms % 1000, actor])
    };
    journal("raised", raised_ms, Some(id.clone()), "scada")?;
    if acked {
        journal("acknowledged", raised_ms + 1_000, None, "operator")?;
    }
    journal("cleared", cleared_ms, Some(format!("{id}c")), "scada")?;

    Ok(())
}
