//! `twinops readings import`: a historian's export as backfill.
//!
//! Long format (time, tag, value[, quality]) or wide (time, then one column per tag),
//! told apart by the header. Times are RFC 3339, or epoch seconds or milliseconds
//! (told apart by size). The file streams: a parser thread reads and parses batches
//! while the writer commits the one before, so memory stays flat whatever the size.
//! Readings and their rollups go in through `store::Rollups`, the one writer of both;
//! a row already stored is counted, not written again, so an interrupted import run
//! again changes nothing it had stored; another value at a stored time is refused as a
//! `conflict`, the stored one kept. Historical readings never raise live alarms:
//! limit alarms are evaluated by live ingest only.

use std::collections::HashMap;
use std::io::{BufReader, IsTerminal, Read};
use std::path::Path;
use std::sync::mpsc;
use std::time::Instant;

use anyhow::Context;

use crate::store::{Limits, Rollups, Stored, Writer};

/// Rows per transaction.
const BATCH: usize = 50_000;
/// Line numbers kept per refusal reason, for the summary.
const FIRST_LINES: usize = 5;

/// What an import did.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Summary {
    pub rows: u64,
    pub stored: u64,
    pub already_present: u64,
    /// Refused rows by reason, with the first line numbers of each.
    pub refused: Vec<(&'static str, u64, Vec<u64>)>,
    pub seconds: f64,
}

impl std::fmt::Display for Summary {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        writeln!(
            f,
            "{} rows read in {:.1} s: {} stored, {} already present",
            self.rows, self.seconds, self.stored, self.already_present
        )?;
        for (reason, n, lines) in &self.refused {
            let lines: Vec<String> = lines.iter().map(u64::to_string).collect();
            writeln!(f, "refused, {reason}: {n} (first at line {})", lines.join(", "))?;
        }
        Ok(())
    }
}

/// Counts a refused row under its reason, keeping the first line numbers.
fn tally(refused: &mut HashMap<&'static str, (u64, Vec<u64>)>, reason: &'static str, line: u64) {
    let (n, lines) = refused.entry(reason).or_default();
    *n += 1;
    if lines.len() < FIRST_LINES {
        lines.push(line);
    }
}

/// One parsed row: sensor key, unix milliseconds, value, line; or why it is refused.
enum Row {
    Reading(i64, i64, f64, u64),
    Refused(&'static str, u64),
}

/// Imports `path` through `writer`; `db` gives the twin's sensors and site. Local
/// times are read in `timezone` (an IANA name), else in the site's.
pub fn import(
    writer: &Writer,
    db: &rusqlite::Connection,
    path: &Path,
    timezone_name: Option<&str>,
) -> anyhow::Result<Summary> {
    let (sensors, limits_of) = sensors(db)?;
    let limits_of = std::sync::Arc::new(limits_of);
    let file = std::fs::File::open(path).with_context(|| format!("opening {}", path.display()))?;
    let size = file.metadata().map(|m| m.len()).unwrap_or(0);
    let started = Instant::now();
    let (tx, rx) = mpsc::sync_channel::<Vec<Row>>(2);
    let name = path.display().to_string();
    let crlf = crlf(path)?;
    let clock = Clock::new(timezone(db, timezone_name)?);
    let parser =
        std::thread::spawn(move || parse(BufReader::with_capacity(1 << 20, file), (&name, crlf), &sensors, clock, tx));
    let mut summary = Summary::default();
    let mut refused: HashMap<&'static str, (u64, Vec<u64>)> = HashMap::new();
    let progress = Progress::new(size);
    for batch in rx {
        let mut readings: Vec<(i64, i64, f64, u64)> = Vec::with_capacity(batch.len());
        for row in batch {
            summary.rows += 1;
            match row {
                Row::Reading(key, ts, v, line) => readings.push((key, ts, v, line)),
                Row::Refused(reason, line) => tally(&mut refused, reason, line),
            }
        }
        let limits_of = std::sync::Arc::clone(&limits_of);
        let (new, repeats, conflicts) = writer.call(move |conn| {
            let mut rollups = Rollups::default();
            let (mut new, mut repeats, mut conflicts) = (0u64, 0u64, Vec::new());
            for (key, ts, v, line) in readings.iter().copied() {
                let limits = limits_of.get(&key).copied().unwrap_or_default();
                match rollups.insert(conn, key, &limits, ts, v)? {
                    Stored::New => new += 1,
                    Stored::Duplicate => repeats += 1,
                    Stored::Conflict(_) => conflicts.push(line),
                }
            }
            rollups.flush(conn)?;
            Ok::<_, crate::store::StoreError>((new, repeats, conflicts))
        })?;
        summary.stored += new;
        summary.already_present += repeats;
        // Another value at a stored millisecond: the stored one is kept.
        for line in conflicts {
            tally(&mut refused, "conflict", line);
        }
        progress.show(summary.rows, started);
    }
    parser.join().map_err(|_| anyhow::anyhow!("the parser thread failed"))??;
    progress.done();
    let mut refused: Vec<(&'static str, u64, Vec<u64>)> = refused.into_iter().map(|(r, (n, l))| (r, n, l)).collect();
    refused.sort_by(|a, b| a.0.cmp(b.0));
    summary.refused = refused;
    summary.seconds = started.elapsed().as_secs_f64();
    Ok(summary)
}

/// The zone local times are read in: the one named, else the site's.
fn timezone(db: &rusqlite::Connection, named: Option<&str>) -> anyhow::Result<Option<chrono_tz::Tz>> {
    use rusqlite::OptionalExtension;
    let site: Option<String> = db.query_row("SELECT timezone FROM sites LIMIT 1", [], |r| r.get(0)).optional()?;
    let Some(name) = named.map(str::to_string).or(site) else { return Ok(None) };
    name.parse::<chrono_tz::Tz>().map(Some).map_err(|_| {
        anyhow::anyhow!("'{name}' is not a time zone: give an IANA name such as Europe/London or America/Chicago")
    })
}

/// Whether the file's lines end in CRLF (its first line says).
fn crlf(path: &Path) -> std::io::Result<bool> {
    let mut head = Vec::with_capacity(64 * 1024);
    std::fs::File::open(path)?.take(64 * 1024).read_to_end(&mut head)?;
    Ok(head.iter().position(|&b| b == b'\n').is_some_and(|i| i > 0 && head[i - 1] == b'\r'))
}

/// The twin's sensors: keys by lower-case id (for the parser), limits by key (for the
/// rollups). Retired ones too: their history is theirs.
#[allow(clippy::type_complexity)]
fn sensors(db: &rusqlite::Connection) -> rusqlite::Result<(HashMap<String, i64>, HashMap<i64, Limits>)> {
    let mut stmt = db.prepare("SELECT lower(id), key, limit_ll, limit_l, limit_h, limit_hh FROM sensors")?;
    let (mut keys, mut limits) = (HashMap::new(), HashMap::new());
    for row in stmt.query_map([], |r| {
        Ok((r.get::<_, String>(0)?, r.get::<_, i64>(1)?, [r.get(2)?, r.get(3)?, r.get(4)?, r.get(5)?]))
    })? {
        let (id, key, l) = row?;
        keys.insert(id, key);
        limits.insert(key, l);
    }
    Ok((keys, limits))
}

/// Which column holds what, from the header.
enum Shape {
    /// time, tag, value, quality columns.
    Long { time: usize, tag: usize, value: usize, quality: Option<usize> },
    /// time column, then (column, sensor key or None when the tag is unknown).
    Wide { time: usize, tags: Vec<(usize, Option<i64>)> },
}

fn fold(h: &str) -> String {
    h.trim().to_lowercase().replace(['_', '-', '.'], " ")
}

fn shape(headers: &csv::StringRecord, sensors: &HashMap<String, i64>) -> anyhow::Result<Shape> {
    let find = |names: &[&str]| headers.iter().position(|h| names.contains(&fold(h).as_str()));
    let time = find(&["time", "timestamp", "ts", "datetime", "date time", "t stamp", "time stamp"])
        .context("no time column: name it time, timestamp or datetime (the first row is the header)")?;
    let tag = find(&["tag", "tagname", "tag name", "name", "point", "sensor", "sensor id"]);
    let value = find(&["value", "val", "v"]);
    if let (Some(tag), Some(value)) = (tag, value) {
        return Ok(Shape::Long { time, tag, value, quality: find(&["quality", "q", "status", "opc quality"]) });
    }
    let tags = (0..headers.len())
        .filter(|&i| i != time)
        .map(|i| (i, sensors.get(&headers[i].trim().to_lowercase()).copied()))
        .collect();
    Ok(Shape::Wide { time, tags })
}

fn parse(
    input: impl Read,
    (name, crlf): (&str, bool),
    sensors: &HashMap<String, i64>,
    mut clock: Clock,
    tx: mpsc::SyncSender<Vec<Row>>,
) -> anyhow::Result<()> {
    let mut reader = csv::ReaderBuilder::new().flexible(true).from_reader(input);
    let headers = reader.headers().with_context(|| format!("{name}: reading the header"))?.clone();
    let headers = csv::StringRecord::from(headers.iter().map(|h| h.trim_start_matches('\u{feff}')).collect::<Vec<_>>());
    let shape = shape(&headers, sensors).with_context(|| format!("{name}:1"))?;
    let mut batch = Vec::with_capacity(BATCH);
    let mut record = csv::StringRecord::new();
    while reader.read_record(&mut record).with_context(|| format!("{name}: unreadable row"))? {
        // The csv crate counts a CRLF file's lines one short.
        let line = record.position().map_or(0, |p| p.line()) + u64::from(crlf);
        match &shape {
            Shape::Long { time, tag, value, quality } => {
                batch.push(long_row(&record, line, sensors, &mut clock, [*time, *tag, *value], *quality))
            }
            Shape::Wide { time, tags } => match clock.read(record.get(*time).unwrap_or_default()) {
                Err(reason) => batch.push(Row::Refused(reason, line)),
                Ok(ts) => {
                    for &(col, key) in tags {
                        let cell = record.get(col).unwrap_or_default().trim();
                        if cell.is_empty() {
                            continue;
                        }
                        batch.push(match (key, cell.parse::<f64>()) {
                            (None, _) => Row::Refused("unknown_tag", line),
                            (Some(key), Ok(v)) if v.is_finite() => Row::Reading(key, ts, v, line),
                            (Some(_), _) => Row::Refused("bad_value", line),
                        });
                    }
                }
            },
        }
        if batch.len() >= BATCH && tx.send(std::mem::replace(&mut batch, Vec::with_capacity(BATCH))).is_err() {
            return Ok(());
        }
    }
    if !batch.is_empty() {
        let _ = tx.send(batch);
    }
    Ok(())
}

/// One row of a long file; `[time, tag, value]` are its columns.
fn long_row(
    record: &csv::StringRecord,
    line: u64,
    sensors: &HashMap<String, i64>,
    clock: &mut Clock,
    [time, tag, value]: [usize; 3],
    quality: Option<usize>,
) -> Row {
    if let Some(q) = quality.and_then(|q| record.get(q))
        && !good_quality(q)
    {
        return Row::Refused("bad_quality", line);
    }
    let Some(key) = record.get(tag).and_then(|t| sensors.get(&t.trim().to_lowercase())) else {
        return Row::Refused("unknown_tag", line);
    };
    let ts = match clock.read(record.get(time).unwrap_or_default()) {
        Ok(ts) => ts,
        Err(reason) => return Row::Refused(reason, line),
    };
    match record.get(value).map(|v| v.trim().parse::<f64>()) {
        Some(Ok(v)) if v.is_finite() => Row::Reading(*key, ts, v, line),
        _ => Row::Refused("bad_value", line),
    }
}

/// Good quality as historians write it: empty, `good`, `G`, `ok`, or OPC's 192 (0xC0).
fn good_quality(q: &str) -> bool {
    matches!(q.trim().to_ascii_lowercase().as_str(), "" | "good" | "g" | "ok" | "192" | "0xc0")
}

/// RFC 3339, or epoch seconds (fractions allowed) or milliseconds (13 digits and more).
/// Unix milliseconds, as readings are keyed.
pub fn parse_time(text: &str) -> Option<i64> {
    let t = text.trim();
    if let Ok(n) = t.parse::<i64>() {
        return Some(if n.abs() >= 100_000_000_000 { n } else { n * 1000 });
    }
    if let Ok(f) = t.parse::<f64>() {
        return f.is_finite().then_some((f * 1000.0).floor() as i64);
    }
    crate::domain::parse_time_ms(t).ok().map(|(ts, ms)| ts.unix() * 1000 + i64::from(ms))
}

/// Reads a file's times: absolute ones as [`parse_time`] does, local ones (no offset,
/// `2026-03-29 02:30:00` as many historians export) in the site's time zone. In the
/// hour a DST change repeats, the earlier instant is taken unless the file has already
/// passed it (exports run forwards); a local time the change skips does not exist.
pub struct Clock {
    tz: Option<chrono_tz::Tz>,
    last: i64,
}

impl Clock {
    pub fn new(tz: Option<chrono_tz::Tz>) -> Clock {
        Clock { tz, last: i64::MIN }
    }

    pub fn read(&mut self, text: &str) -> Result<i64, &'static str> {
        use chrono::{LocalResult, NaiveDateTime, TimeZone};
        let t = text.trim();
        let ts = match parse_time(t) {
            Some(ts) => ts,
            None => {
                let formats =
                    ["%Y-%m-%d %H:%M:%S%.f", "%Y-%m-%dT%H:%M:%S%.f", "%Y-%m-%d %H:%M", "%Y/%m/%d %H:%M:%S%.f"];
                let naive = formats.iter().find_map(|f| NaiveDateTime::parse_from_str(t, f).ok()).ok_or("bad_time")?;
                let tz = self.tz.ok_or("local_time_without_timezone")?;
                match tz.from_local_datetime(&naive) {
                    LocalResult::Single(d) => d.timestamp_millis(),
                    LocalResult::Ambiguous(early, late) if early.timestamp_millis() < self.last => {
                        late.timestamp_millis()
                    }
                    LocalResult::Ambiguous(early, _) => early.timestamp_millis(),
                    LocalResult::None => return Err("local_time_skipped_by_dst"),
                }
            }
        };
        self.last = self.last.max(ts);
        Ok(ts)
    }
}

/// A progress line on a terminal, rewritten in place; plain lines now and then
/// otherwise (a log keeps them).
struct Progress {
    tty: bool,
    size: u64,
    last: std::cell::Cell<Option<Instant>>,
}

impl Progress {
    fn new(size: u64) -> Progress {
        Progress { tty: std::io::stderr().is_terminal(), size, last: std::cell::Cell::new(None) }
    }

    fn show(&self, rows: u64, started: Instant) {
        let every = if self.tty { 0.25 } else { 10.0 };
        if self.last.get().is_some_and(|t| t.elapsed().as_secs_f64() < every) {
            return;
        }
        self.last.set(Some(Instant::now()));
        let rate = rows as f64 / started.elapsed().as_secs_f64().max(1e-3);
        let size = if self.size > 0 { format!(" of a {:.0} MB file", self.size as f64 / 1e6) } else { String::new() };
        if self.tty {
            eprint!("\r{rows} rows{size}, {rate:.0} rows/s   ");
        } else {
            eprintln!("{rows} rows{size}, {rate:.0} rows/s");
        }
    }

    fn done(&self) {
        if self.tty && self.last.get().is_some() {
            eprintln!();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn times_in_the_forms_historians_write() {
        assert_eq!(parse_time("2026-11-30T12:00:00Z"), Some(1_796_040_000_000));
        assert_eq!(parse_time("2026-11-30T13:00:00.250+01:00"), Some(1_796_040_000_250));
        assert_eq!(parse_time("1796040000"), Some(1_796_040_000_000));
        assert_eq!(parse_time("1796040000123"), Some(1_796_040_000_123), "milliseconds");
        assert_eq!(parse_time("1796040000.5"), Some(1_796_040_000_500));
        assert_eq!(parse_time("yesterday"), None);
        assert!(good_quality("Good") && good_quality("192") && !good_quality("Bad") && !good_quality("0"));
    }

    /// Local times in a zone with DST: the repeated hour in autumn is read forwards,
    /// the skipped hour in spring does not exist, and without a zone a local time is
    /// refused with what it needs.
    #[test]
    fn local_times_across_dst_changes() {
        let mut c = Clock::new(Some(chrono_tz::Europe::London));
        // 2026-10-25: 01:00-02:00 BST, then 01:00-02:00 GMT again.
        let first = c.read("2026-10-25 01:30:00").unwrap();
        assert_eq!(first, parse_time("2026-10-25T00:30:00Z").unwrap(), "the first 01:30 is BST");
        assert_eq!(c.read("2026-10-25 01:45:00").unwrap(), parse_time("2026-10-25T00:45:00Z").unwrap());
        let later = c.read("2026-10-25 01:15:00").unwrap();
        assert_eq!(later, parse_time("2026-10-25T01:15:00Z").unwrap(), "past the first 01:45, 01:15 is GMT");
        assert_eq!(c.read("2026-03-29 01:30:00"), Err("local_time_skipped_by_dst"));
        assert_eq!(c.read("2026-07-01T12:00:00").unwrap(), parse_time("2026-07-01T11:00:00Z").unwrap());
        assert_eq!(Clock::new(None).read("2026-07-01 12:00:00"), Err("local_time_without_timezone"));
        assert_eq!(Clock::new(None).read("2026-07-01T12:00:00Z").unwrap(), parse_time("2026-07-01T12:00:00Z").unwrap());
    }
}
