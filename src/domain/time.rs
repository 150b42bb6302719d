//! Time in the twin is unix seconds, UTC. Models and people see RFC 3339.

use chrono::{DateTime, SecondsFormat, Utc};
use serde::{Serialize, Serializer};

/// A length of time for people, in its largest whole unit: `90 s`, `5 min`, `3 h`, `2 days`.
pub fn approx_duration(secs: i64) -> String {
    match secs.abs() {
        s if s >= 2 * 86_400 => format!("{} days", secs / 86_400),
        s if s >= 2 * 3_600 => format!("{} h", secs / 3_600),
        s if s >= 2 * 60 => format!("{} min", secs / 60),
        _ => format!("{secs} s"),
    }
}

/// A point in time, whole seconds since the unix epoch (UTC). Serializes as RFC 3339.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Timestamp(i64);

impl Timestamp {
    pub fn from_unix(secs: i64) -> Self {
        Timestamp(secs)
    }

    pub fn now() -> Self {
        Timestamp(Utc::now().timestamp())
    }

    pub fn unix(self) -> i64 {
        self.0
    }

    pub fn plus_secs(self, secs: i64) -> Self {
        Timestamp(self.0 + secs)
    }

    /// Floors to the start of the minute, the readings' resolution.
    pub fn floor_minute(self) -> Self {
        Timestamp(self.0.div_euclid(60) * 60)
    }

    pub fn to_rfc3339(self) -> String {
        DateTime::<Utc>::from_timestamp(self.0, 0)
            .map(|t| t.to_rfc3339_opts(SecondsFormat::Secs, true))
            .unwrap_or_else(|| self.0.to_string())
    }

    /// RFC 3339 with milliseconds, for a time kept to the millisecond (a reading's).
    pub fn rfc3339_ms(at_ms: i64) -> String {
        DateTime::<Utc>::from_timestamp_millis(at_ms)
            .map(|t| t.to_rfc3339_opts(SecondsFormat::Millis, true))
            .unwrap_or_else(|| format!("{at_ms} ms"))
    }

    pub fn date(self) -> String {
        DateTime::<Utc>::from_timestamp(self.0, 0).map(|t| t.format("%Y-%m-%d").to_string()).unwrap_or_default()
    }
}

impl Serialize for Timestamp {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.to_rfc3339())
    }
}

/// Parses RFC 3339 (`2026-11-30T08:00:00Z`) or a bare date (`2026-11-30`, midnight UTC).
/// A time as [`parse_time`] reads it, with its milliseconds (0-999) kept.
pub fn parse_time_ms(s: &str) -> Result<(Timestamp, u16), String> {
    match DateTime::parse_from_rfc3339(s.trim()) {
        Ok(t) => Ok((Timestamp(t.timestamp()), t.timestamp_subsec_millis().min(999) as u16)),
        Err(_) => parse_time(s).map(|t| (t, 0)),
    }
}

pub fn parse_time(s: &str) -> Result<Timestamp, String> {
    let s = s.trim();
    if let Ok(t) = DateTime::parse_from_rfc3339(s) {
        return Ok(Timestamp(t.timestamp()));
    }
    if let Ok(d) = chrono::NaiveDate::parse_from_str(s, "%Y-%m-%d") {
        return Ok(Timestamp(d.and_hms_opt(0, 0, 0).expect("midnight exists").and_utc().timestamp()));
    }
    Err(format!("'{s}' is not a time: use RFC 3339 in UTC, e.g. 2026-11-30T08:00:00Z"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_read_in_their_largest_whole_unit() {
        let cases =
            [(45, "45 s"), (119, "119 s"), (300, "5 min"), (7_199, "119 min"), (7_200, "2 h"), (200_000, "2 days")];
        for (secs, text) in cases {
            assert_eq!(approx_duration(secs), text);
        }
        assert_eq!(approx_duration(-600), "-10 min");
    }

    #[test]
    fn parses_rfc3339_and_dates() {
        let t = parse_time("2026-11-30T08:00:00Z").unwrap();
        assert_eq!(t.to_rfc3339(), "2026-11-30T08:00:00Z");
        assert_eq!(parse_time("2026-11-30").unwrap().to_rfc3339(), "2026-11-30T00:00:00Z");
        assert_eq!(parse_time("2026-11-30T09:00:00+01:00").unwrap(), t);
        assert!(parse_time("yesterday").unwrap_err().contains("RFC 3339"));
        assert_eq!(Timestamp::from_unix(119).floor_minute().unix(), 60);
    }
}
