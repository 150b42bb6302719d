//! `bench readings`: a historian export's import beside the raw insert rate, and the
//! import of a large plant.

use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::time::Instant;

use super::peak_rss_kib;
use crate::store::Store;
use crate::support::Rng;

#[derive(clap::Args)]
pub struct ReadingsBenchArgs {
    /// Rows in the long-format historian export (time, tag, value, quality).
    #[arg(long, default_value_t = 10_000_000)]
    rows: u64,
    /// Folder for the generated file and the two databases (removed at the end).
    #[arg(long, default_value = "data/bench-readings")]
    dir: PathBuf,
    /// The plant the tags belong to: files for `plant import`.
    #[arg(long, default_values = ["tests/fixtures/lakeside/site.toml", "tests/fixtures/lakeside/assets.csv", "tests/fixtures/lakeside/tags.csv"])]
    plant: Vec<PathBuf>,
}

/// `readings import` of a long-format export beside the raw insert rate of the same
/// rows into the same table shape, in the same run: what parsing, lookups and rollups
/// cost. Memory is the process's peak resident set before and after the import.
pub fn readings(args: &ReadingsBenchArgs) -> anyhow::Result<()> {
    std::fs::create_dir_all(&args.dir)?;
    let csv = args.dir.join("historian.csv");
    let (import_db, raw_db) = (args.dir.join("import.db"), args.dir.join("raw.db"));
    for db in [&import_db, &raw_db] {
        for suffix in ["", "-wal", "-shm"] {
            let _ = std::fs::remove_file(format!("{}{suffix}", db.display()));
        }
    }
    let store = Store::open(&import_db)?;
    crate::plant::import_files(store.writer(), &args.plant, crate::plant::Mode::Full, false, "bench")?;
    let tags: Vec<(String, i64)> = {
        let db = store.read()?;
        let mut stmt = db.prepare("SELECT id, key FROM sensors ORDER BY key")?;
        stmt.query_map([], |r| Ok((r.get(0)?, r.get(1)?)))?.collect::<Result<_, _>>()?
    };
    let size = write_export(&csv, &tags, args.rows)?;
    println!("historian export: {} rows over {} tags, {:.0} MB", args.rows, tags.len(), size as f64 / 1e6);

    let rss_before = peak_rss_kib();
    let summary = crate::ingest::history::import(store.writer(), &*store.read()?, &csv, None)?;
    let rss_after = peak_rss_kib();
    let import_rate = summary.stored as f64 / summary.seconds;
    drop(store);
    let keys: Vec<i64> = tags.iter().map(|(_, k)| *k).collect();
    let raw_rate = raw_insert_rate(&raw_db, &keys, args.rows)?;

    print!("{summary}");
    println!("readings import: {import_rate:.0} rows/s (stored, with hourly rollups)");
    println!("raw insert, same rows and table, no parsing or rollups: {raw_rate:.0} rows/s");
    println!("import / raw insert: {:.0}%", 100.0 * import_rate / raw_rate);
    println!(
        "peak resident memory: {:.0} MiB before the import, {:.0} MiB after ({} MB file)",
        rss_before as f64 / 1024.0,
        rss_after as f64 / 1024.0,
        size / 1_000_000
    );
    plant_import_time(&args.dir)?;
    let _ = std::fs::remove_dir_all(&args.dir);
    Ok(())
}

/// From a fixed start, one row a second per tag, round-robin.
const START: i64 = 1_764_504_000;

/// Writes a historian's long-format export of `rows` rows over `tags`; returns its size.
fn write_export(csv: &Path, tags: &[(String, i64)], rows: u64) -> anyhow::Result<u64> {
    let mut out = std::io::BufWriter::with_capacity(1 << 20, std::fs::File::create(csv)?);
    writeln!(out, "Timestamp,TagName,Value,Quality")?;
    let mut rng = Rng::from_label("bench-readings");
    for i in 0..rows {
        let (tag, _) = &tags[(i % tags.len() as u64) as usize];
        let ts = START + (i / tags.len() as u64) as i64;
        writeln!(out, "{ts}000,{tag},{:.3},Good", 50.0 + 10.0 * rng.gauss())?;
    }
    out.flush()?;
    drop(out);
    Ok(std::fs::metadata(csv)?.len())
}

/// The same rows, already in memory, inserted into the same table shape in 50,000-row
/// transactions with one prepared statement: no parsing, no lookups, no rollups.
fn raw_insert_rate(raw_db: &Path, keys: &[i64], rows: u64) -> anyhow::Result<f64> {
    let raw = rusqlite::Connection::open(raw_db)?;
    raw.execute_batch(
        "PRAGMA journal_mode = WAL; PRAGMA synchronous = FULL;
         CREATE TABLE readings (sensor_key INTEGER NOT NULL, ts INTEGER NOT NULL, value REAL NOT NULL,
                                PRIMARY KEY (sensor_key, ts)) STRICT, WITHOUT ROWID;",
    )?;
    let mut rng = Rng::from_label("bench-readings");
    let rows: Vec<(i64, i64, f64)> = (0..rows)
        .map(|i| {
            let ts = (START + (i / keys.len() as u64) as i64) * 1000;
            (keys[(i % keys.len() as u64) as usize], ts, 50.0 + 10.0 * rng.gauss())
        })
        .collect();
    let started = Instant::now();
    for chunk in rows.chunks(50_000) {
        let tx = raw.unchecked_transaction()?;
        let mut stmt = tx.prepare_cached("INSERT INTO readings (sensor_key, ts, value) VALUES (?1, ?2, ?3)")?;
        for (k, ts, v) in chunk {
            stmt.execute(rusqlite::params![k, ts, v])?;
        }
        drop(stmt);
        tx.commit()?;
    }
    Ok(rows.len() as f64 / started.elapsed().as_secs_f64())
}

/// `plant import` of a 5,000-tag plant (1,000 assets on 10 stations, 5 tags each) into
/// an empty twin, then the same files again (no changes).
fn plant_import_time(dir: &Path) -> anyhow::Result<()> {
    use std::fmt::Write;
    let mut site = String::from("[site]\nid = \"BIG\"\nname = \"A large works\"\ntimezone = \"UTC\"\n");
    let mut assets = String::from("Asset ID,Equipment Type,Area,Description\n");
    let mut tags = String::from("Tag Name,Equipment,Eng Units,Lo,Hi,HiHi,Description\n");
    for s in 0..10 {
        write!(site, "\n[[stations]]\nid = \"A{s:02}\"\nname = \"Area {s}\"\n")?;
    }
    for a in 0..1000 {
        writeln!(assets, "P-{a:04},Pump,A{:02},Pump {a}", a % 10)?;
        for (t, unit) in ["FIT", "PIT", "TIT", "VT", "JI"].iter().zip(["m3/h", "bar", "degC", "mm/s", "kW"]) {
            writeln!(tags, "{t}-{a:04},P-{a:04},{unit},1,80,95,{t} of pump {a}")?;
        }
    }
    let files: Vec<PathBuf> = [("big.toml", site), ("big-assets.csv", assets), ("big-tags.csv", tags)]
        .into_iter()
        .map(|(name, text)| {
            let path = dir.join(name);
            std::fs::write(&path, text).map(|()| path)
        })
        .collect::<Result<_, _>>()?;
    let db = dir.join("big.db");
    let store = Store::open(&db)?;
    let started = Instant::now();
    let first = crate::plant::import_files(store.writer(), &files, crate::plant::Mode::Full, false, "bench")?;
    let took = started.elapsed();
    let started = Instant::now();
    let again = crate::plant::import_files(store.writer(), &files, crate::plant::Mode::Full, false, "bench")?;
    println!(
        "plant import of 1,000 assets and 5,000 tags: {:.0} ms ({}); the same files again: {:.0} ms ({})",
        took.as_secs_f64() * 1000.0,
        first.summary(),
        started.elapsed().as_secs_f64() * 1000.0,
        again.summary()
    );
    Ok(())
}
