//! `bench episodes`: alarm episodes at a large utility's scale, each figure beside a
//! plain baseline measured in the same run: mining the consequential pairs over a
//! year's journal (beside one plain read of the same rows, and its memory at a quarter
//! of the year and at the whole), matching an episode against 1,000 past ones (beside
//! reading their members), and the upkeep per new activation in a flood (beside that
//! activation's own insert).

use std::path::PathBuf;
use std::time::{Duration, Instant};

use rusqlite::{Connection, params};

use super::alarms::{END, Journal, with_journal};
use super::{Percentiles, ms};
use crate::episodes::pairs::PairRules;
use crate::episodes::{Context, EpisodeRules, upkeep};
use crate::seed::copy_asset_id;
use crate::store::{Store, StoreError};
use crate::support::Rng;

#[derive(clap::Args)]
pub struct EpisodesBenchArgs {
    /// Database to use; a plant and its journal are generated if it holds none.
    #[arg(long, default_value = "data/bench-episodes.db")]
    bench_db: PathBuf,
    #[command(flatten)]
    journal: Journal,
    /// Past episodes each query is matched against.
    #[arg(long, default_value_t = 1_000)]
    past: usize,
    /// Episodes matched against the ones before them.
    #[arg(long, default_value_t = 100)]
    queries: usize,
    /// Activations in the flood whose upkeep is timed, over 10 minutes.
    #[arg(long, default_value_t = 2_000)]
    flood: usize,
}

/// An upset on one copy of the demo plant, as its connections carry it: raw water pump 1
/// trips, the north header's pressure falls, then the east and south boosters' suction
/// (seconds after the trip).
const CHAIN: [(&str, &str, i64); 4] = [
    ("PUMP-001", "PUMP-TRIP", 0),
    ("VLV-001", "PRESS-LO", 20),
    ("PUMP-004", "SUCTION-LO", 80),
    ("PUMP-006", "SUCTION-LO", 150),
];

pub fn episodes(args: &EpisodesBenchArgs) -> anyhow::Result<()> {
    let store = with_journal(&args.bench_db, &args.journal)?;
    // An earlier run's episodes go (its activations stay: the journal is append-only),
    // so each run keeps and matches the same number; this run's upsets come after them.
    let after = store.writer().call(|c| -> Result<i64, StoreError> {
        c.execute_batch(
            "UPDATE alarms SET episode_id = NULL WHERE episode_id IS NOT NULL;
             DELETE FROM episode_points; DELETE FROM episodes; DELETE FROM alarm_pairs;",
        )?;
        Ok(c.query_row("SELECT max(at) FROM alarm_events", [], |r| r.get::<_, i64>(0))?.max(END))
    })?;
    let (assets, events): (i64, i64) = store.read()?.query_row(
        "SELECT (SELECT count(*) FROM assets), (SELECT count(*) FROM alarm_events WHERE kind = 'raised')",
        [],
        |r| Ok((r.get(0)?, r.get(1)?)),
    )?;
    let days = args.journal.days;
    println!("twinops bench episodes: {assets} assets, {events} annunciated activations over {days} days");
    mining(&store, days)?;
    matching(&store, args, after)?;
    flood(&store, args, after)
}

/// The journal's rows as the miner reads them, once, doing nothing with them.
fn plain_read(c: &Connection, days: i64) -> rusqlite::Result<usize> {
    let mut stmt = c.prepare(upkeep::MINED)?;
    let mut rows = stmt.query([END - days * 86_400, END])?;
    let mut n = 0;
    while let Some(r) = rows.next()? {
        let (_, _, _, _): (String, Option<String>, String, i64) = (r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?);
        n += 1;
    }
    Ok(n)
}

/// Mining over a quarter of the journal and over the whole, each with the growth of
/// the resident set it caused; beside a plain read of the whole.
fn mining(store: &Store, days: u32) -> anyhow::Result<()> {
    let (days, quarter) = (i64::from(days) + 1, (i64::from(days) + 3) / 4);
    let started = Instant::now();
    let rows = store.writer().call(move |c| Ok::<_, StoreError>(plain_read(c, days)?))?;
    let plain = started.elapsed();
    let mut runs = Vec::new();
    for span in [quarter, days] {
        let rss = resident_kib();
        reset_peak();
        let started = Instant::now();
        let pairs = store
            .writer()
            .call(move |c| Ok::<_, StoreError>(upkeep::refresh_pairs(c, END * 1000, span, PairRules::default())?))?;
        runs.push((span, started.elapsed(), pairs, peak_kib().saturating_sub(rss)));
    }
    // The whole year after the quarter: memory that grew with the journal would show
    // as the year's growth beyond what the quarter's run already holds.
    for (span, took, pairs, grew) in &runs {
        println!(
            "pair mining over {span} days: {:.2} s, {pairs} pairs, resident memory +{:.1} MiB beyond the run before",
            took.as_secs_f64(),
            *grew as f64 / 1024.0
        );
    }
    let whole = runs.last().map_or(Duration::ZERO, |r| r.1);
    println!(
        "plain read of the same {rows} rows: {:.2} s; mining takes {:.1}x that (two passes, a row at a time)",
        plain.as_secs_f64(),
        whole.as_secs_f64() / plain.as_secs_f64().max(1e-9)
    );
    Ok(())
}

/// One activation: its alarm row (cleared: a point may come again at once) and its
/// journal entry; returns the alarm's id.
fn raise(c: &Connection, tag: &str, asset: &str, code: &str, at_ms: i64) -> rusqlite::Result<i64> {
    c.prepare_cached(
        "INSERT INTO alarms (event_id, asset_id, code, severity, state, message, raised_at, last_raised_at, cleared_at)
         VALUES (?1, ?2, ?3, 'high', 'cleared', '', ?4, ?4, ?4)",
    )?
    .execute(params![tag, asset, code, at_ms / 1000])?;
    let id = c.last_insert_rowid();
    c.prepare_cached(
        "INSERT INTO alarm_events (alarm_id, event_id, kind, at, millis, actor, detail)
         VALUES (?1, ?2, 'raised', ?3, ?4, 'scada', '')",
    )?
    .execute(params![id, tag, at_ms / 1000, at_ms % 1000])?;
    Ok(id)
}

/// `past + queries` upsets an hour apart after the journal, each on a copy of the plant,
/// kept as episodes as they come; then each of the last `queries` matched against the
/// 1,000 before it, beside a plain read of those episodes' members.
fn matching(store: &Store, args: &EpisodesBenchArgs, after: i64) -> anyhow::Result<()> {
    let (total, scale) = (args.past + args.queries, args.journal.scale);
    let made = store.writer().call(move |c| -> Result<usize, StoreError> {
        let (plant, learned) = upkeep::context(c)?;
        let cx = Context { plant: &plant, learned: &learned };
        let mut rng = Rng::from_label("bench-episodes-past");
        let kept = |c: &Connection| c.query_row("SELECT count(*) FROM episodes", [], |r| r.get::<_, i64>(0));
        // Until `total` are kept: an upset that lost two of its consequences is no episode.
        for e in 0.. {
            if e % 100 == 0 && kept(c)? as usize >= total {
                break;
            }
            let start_ms = (after + 3_600 * (e as i64 + 1)) * 1000;
            let copy = (e as u32 * 7) % scale;
            for (i, (asset, code, secs)) in CHAIN.iter().enumerate() {
                // A consequence now and then missing, the timing never quite the same.
                if i > 0 && rng.uniform() < 0.1 {
                    continue;
                }
                let at = start_ms + secs * 1000 + (rng.uniform() * 5_000.0) as i64;
                let id = raise(c, &format!("ep-{start_ms}-{i}"), &copy_asset_id(asset, copy), code, at)?;
                upkeep::upkeep(c, id, at, EpisodeRules::default(), &cx)?;
            }
        }
        Ok(kept(c)? as usize)
    })?;
    let db = store.read()?;
    let ids: Vec<i64> = db
        .prepare("SELECT id FROM episodes ORDER BY id DESC LIMIT ?1")?
        .query_map([args.queries as i64], |r| r.get(0))?
        .collect::<Result<_, _>>()?;
    let (mut matched, mut read) = (Vec::new(), Vec::new());
    let mut plain = db.prepare(
        "SELECT a.asset_id, a.sensor_id, a.code, a.raised_at FROM alarms a
         WHERE a.episode_id IN (SELECT id FROM episodes WHERE id < ?1 ORDER BY id DESC LIMIT 1000)",
    )?;
    let mut found_same = 0;
    for &id in &ids {
        let started = Instant::now();
        let best = upkeep::similar_to(&db, id, 3)?;
        matched.push(started.elapsed());
        found_same += usize::from(best.first().is_some_and(|b| b.1 > 0.6));
        let started = Instant::now();
        let rows = plain
            .query_map([id], |r| {
                Ok((
                    r.get::<_, String>(0)?,
                    r.get::<_, Option<String>>(1)?,
                    r.get::<_, String>(2)?,
                    r.get::<_, i64>(3)?,
                ))
            })?
            .count();
        read.push(started.elapsed());
        anyhow::ensure!(rows > 0, "episode {id} has no past episodes to match");
    }
    let (m, r) = (Percentiles::of(matched), Percentiles::of(read));
    println!(
        "matching an episode against the (up to 1,000) before it ({made} episodes kept): p50 {} ms, p99 {} ms \
         ({found_same} of {} found one of the same upset above 0.6); plain read of their members: p50 {} ms, p99 {} ms; \
         p99 ratio {:.1}x",
        ms(m.p50),
        ms(m.p99),
        m.n,
        ms(r.p50),
        ms(r.p99),
        m.p99.as_secs_f64() / r.p99.as_secs_f64().max(1e-9)
    );
    Ok(())
}

/// A flood after the past episodes: `flood` activations over 10 minutes on 50 copies of
/// the plant at once (a district-wide power dip), each point's alarm raised several
/// times. Each activation's insert and its episode upkeep, timed apart.
fn flood(store: &Store, args: &EpisodesBenchArgs, after: i64) -> anyhow::Result<()> {
    let (n, scale) = (args.flood, args.journal.scale);
    let (insert, upkept, episodes) = store.writer().call(move |c| -> Result<_, StoreError> {
        let (plant, learned) = upkeep::context(c)?;
        let cx = Context { plant: &plant, learned: &learned };
        let mut rng = Rng::from_label("bench-episodes-flood");
        let start_ms =
            (c.query_row("SELECT max(at) FROM alarm_events", [], |r| r.get::<_, i64>(0))?.max(after) + 7_200) * 1000;
        let (mut insert, mut upkept) = (Vec::with_capacity(n), Vec::with_capacity(n));
        for i in 0..n {
            let copy = (rng.next_u64() % 50) as u32 * (scale / 50).max(1) % scale;
            let (asset, code, _) = CHAIN[(rng.next_u64() % 4) as usize];
            let code = format!("{code}-{}", rng.next_u64() % 5);
            let at = start_ms + (i as i64 * 600_000) / n as i64;
            let started = Instant::now();
            let id = raise(c, &format!("ep-flood-{start_ms}-{i}"), &copy_asset_id(asset, copy), &code, at)?;
            insert.push(started.elapsed());
            let started = Instant::now();
            upkeep::upkeep(c, id, at, EpisodeRules::default(), &cx)?;
            upkept.push(started.elapsed());
        }
        let episodes: i64 =
            c.query_row("SELECT count(*) FROM episodes WHERE opened_ms >= ?1", [start_ms], |r| r.get(0))?;
        Ok((insert, upkept, episodes))
    })?;
    let (i, u) = (Percentiles::of(insert), Percentiles::of(upkept));
    println!(
        "episode upkeep per activation in a flood of {n} over 10 minutes on 50 stations ({episodes} episodes): p50 {} ms, \
         p99 {} ms, max {} ms; the activation's own insert: p50 {} ms, p99 {} ms; p99 ratio {:.1}x",
        ms(u.p50),
        ms(u.p99),
        ms(u.max),
        ms(i.p50),
        ms(i.p99),
        u.p99.as_secs_f64() / i.p99.as_secs_f64().max(1e-9)
    );
    Ok(())
}

/// The process's resident set now (VmRSS), in KiB.
fn resident_kib() -> u64 {
    status_kib("VmRSS:")
}

/// The process's peak resident set since the last [`reset_peak`] (VmHWM), in KiB.
fn peak_kib() -> u64 {
    status_kib("VmHWM:")
}

fn status_kib(field: &str) -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| s.lines().find(|l| l.starts_with(field)).and_then(|l| l.split_whitespace().nth(1)?.parse().ok()))
        .unwrap_or(0)
}

/// Starts the peak resident set again from the current one (Linux: clear_refs 5).
fn reset_peak() {
    let _ = std::fs::write("/proc/self/clear_refs", "5");
}
