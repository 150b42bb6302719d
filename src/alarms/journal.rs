//! The alarm journal as CSV, the input every alarm-analysis tool takes: one row per
//! journal event, in time order, to the millisecond, streamed (memory does not grow
//! with the window).

use std::io::Write;

use rusqlite::{Connection, params};

use crate::domain::Timestamp;

/// The header, in the order of the columns. `episode_id`: the alarm episode the
/// occurrence belongs to (empty when it came alone), so a flood's rows sort together.
pub const COLUMNS: [&str; 11] = [
    "time",
    "asset_id",
    "sensor_id",
    "code",
    "severity",
    "event",
    "actor",
    "alarm_id",
    "event_id",
    "detail",
    "episode_id",
];

/// The journal's kinds as the export names them (the words alarm-analysis tools use).
fn event_name(kind: &str) -> &str {
    match kind {
        "acknowledged" => "acked",
        "returned_to_service" => "in_service",
        other => other,
    }
}

/// A cell a spreadsheet would read as a formula (`=`, `+`, `-`, `@`) is written with a
/// leading `'`: alarm text comes from outside.
fn defused(text: String) -> String {
    if text.starts_with(['=', '+', '-', '@', '\t', '\r']) { format!("'{text}") } else { text }
}

/// Writes the journal events of [from, to) to `out` as CSV; returns how many rows.
pub fn export(conn: &Connection, from: Timestamp, to: Timestamp, out: impl Write) -> anyhow::Result<u64> {
    let mut csv = csv::Writer::from_writer(out);
    csv.write_record(COLUMNS)?;
    let mut stmt = conn.prepare_cached(
        "SELECT strftime('%Y-%m-%dT%H:%M:%S', e.at, 'unixepoch') || printf('.%03dZ', e.millis),
                a.asset_id, coalesce(a.sensor_id, ''), a.code, a.severity, e.kind, e.actor, e.alarm_id,
                coalesce(e.event_id, ''), coalesce(e.detail, ''), coalesce(CAST(a.episode_id AS TEXT), '')
         FROM alarm_events e JOIN alarms a ON a.id = e.alarm_id
         WHERE e.at >= ?1 AND e.at < ?2
         ORDER BY e.at, e.millis, e.id",
    )?;
    let mut rows = stmt.query(params![from.unix(), to.unix()])?;
    let mut n = 0;
    while let Some(r) = rows.next()? {
        let text = |i: usize| -> rusqlite::Result<String> { r.get(i) };
        let alarm_id: i64 = r.get(7)?;
        let kind = text(5)?;
        csv.write_record([
            text(0)?,
            text(1)?,
            text(2)?,
            text(3)?,
            text(4)?,
            event_name(&kind).to_string(),
            defused(text(6)?),
            alarm_id.to_string(),
            defused(text(8)?),
            defused(text(9)?),
            text(10)?,
        ])?;
        n += 1;
    }
    csv.flush()?;
    Ok(n)
}
