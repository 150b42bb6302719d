//! Identifiers people and models type. Each parses once, into its canonical form.

use std::fmt;

use rusqlite::types::{ToSql, ToSqlOutput};
use serde::Serialize;

/// Why a string is not the id it was meant to be. The messages are read by models and
/// operators, so each names the expected format.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum IdError {
    #[error("'{given}' is not an asset id: {ID_FORMAT}")]
    BadAsset { given: String },
    #[error("'{given}' is not a sensor id: {ID_FORMAT}")]
    BadSensor { given: String },
    #[error(
        "'{given}' is not a citation key: citation keys look like arp-vibration.md#2 (document path, '#', chunk number) or blower-om.pdf#p3 (a PDF's page)"
    )]
    BadCitation { given: String },
}

/// What an asset or sensor id may be, as the error messages say it.
pub const ID_FORMAT: &str = "ids are the site's own, 1 to 64 characters of letters, digits and - _ . / : \
    (starting with a letter or digit), such as P-101A, FIT-1001, PS01/P1/VIB_DE or PUMP-007.VIB-DE";

/// `text` written as an id: characters ids do not allow become `_` (a Sparkplug metric
/// `Inputs/Pump Speed` is `Inputs/Pump_Speed`, an OPC UA browse name `Tank Level`
/// is `Tank_Level`).
pub fn as_id(text: &str) -> String {
    text.chars()
        .map(|c| if c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.' | '/' | ':') { c } else { '_' })
        .collect()
}

/// The longest id, in characters.
pub const MAX_ID_CHARS: usize = 64;

/// Whether `s` is an id as sites write them: ISA-5.1 tags (`FIT-1001`), SCADA paths
/// (`PS01/P1/VIB_DE`), OPC-style names (`NPS1:P1.Speed`). ASCII only, so that finding
/// ids case-insensitively (SQLite's NOCASE) is exact.
fn is_id(s: &str) -> bool {
    (1..=MAX_ID_CHARS).contains(&s.len())
        && s.bytes().next().is_some_and(|b| b.is_ascii_alphanumeric())
        && s.bytes().all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b'/' | b':'))
}

/// An asset id as the site writes it (`P-101A`, `NPS1_P1`, `PUMP-007`): stored as
/// given, found case-insensitively (the store's NOCASE indexes), see [`ID_FORMAT`].
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(transparent)]
pub struct AssetId(String);

impl AssetId {
    pub fn parse(s: &str) -> Result<Self, IdError> {
        let s = s.trim();
        if is_id(s) { Ok(AssetId(s.to_string())) } else { Err(IdError::BadAsset { given: clipped(s) }) }
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

/// A sensor id: the site's own tag name (SCADA tags are usually unique across a site
/// already: `FIT-1001`, `PS01/P1/VIB_DE`), or the asset id and a tag joined by a dot
/// where they are not (the demo plant's `PUMP-007.VIB-DE`). Which asset a sensor
/// belongs to is the twin's to say (`sensors.asset_id`), not the id's spelling.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(transparent)]
pub struct SensorId(String);

impl SensorId {
    pub fn parse(s: &str) -> Result<Self, IdError> {
        let s = s.trim();
        if is_id(s) { Ok(SensorId(s.to_string())) } else { Err(IdError::BadSensor { given: clipped(s) }) }
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

/// A kind as sites write it (`Blower`, `UV Reactor`, `dosing-pump`), as the twin keeps
/// it: lower case, words joined by `_`. Imports store kinds so, and lookups ask so.
pub fn kind_name(text: &str) -> String {
    text.split(|c: char| c.is_whitespace() || c == '-' || c == '_')
        .filter(|w| !w.is_empty())
        .map(str::to_lowercase)
        .collect::<Vec<_>>()
        .join("_")
}

/// What an error quotes of a bad id: a model once sent 1.5 MB as one.
fn clipped(s: &str) -> String {
    if s.chars().count() <= 80 { s.to_string() } else { format!("{}...", s.chars().take(80).collect::<String>()) }
}

/// A stable reference to one documentation chunk: `<document path>#<chunk number>`,
/// for example `arp-vibration.md#2`; in a paged document (a PDF) the chunk is a page,
/// named `#p<page>`: `blower-om.pdf#p3`.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize)]
#[serde(transparent)]
pub struct Citation(String);

impl Citation {
    pub fn new(path: &str, seq: u32) -> Self {
        if Citation::paged(path) { Citation(format!("{path}#p{seq}")) } else { Citation(format!("{path}#{seq}")) }
    }

    /// Whether the document's chunks are its pages (a PDF).
    pub fn paged(path: &str) -> bool {
        path.rsplit_once('.').is_some_and(|(_, ext)| ext.eq_ignore_ascii_case("pdf"))
    }

    pub fn parse(s: &str) -> Result<Self, IdError> {
        let s = s.trim();
        let bad = || IdError::BadCitation { given: s.to_string() };
        let (path, seq) = s.rsplit_once('#').ok_or_else(bad)?;
        let seq: u32 = seq.strip_prefix('p').unwrap_or(seq).parse().map_err(|_| bad())?;
        let path_ok =
            !path.is_empty() && !path.starts_with('/') && !path.split('/').any(|part| part.is_empty() || part == "..");
        if path_ok { Ok(Citation::new(path, seq)) } else { Err(bad()) }
    }

    pub fn path(&self) -> &str {
        self.0.rsplit_once('#').expect("validated at construction").0
    }

    /// The chunk number, or the page of a paged document.
    pub fn seq(&self) -> u32 {
        let seq = self.0.rsplit_once('#').expect("validated at construction").1;
        seq.strip_prefix('p').unwrap_or(seq).parse().expect("validated")
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

macro_rules! text_id_impls {
    ($($t:ty),*) => {$(
        impl fmt::Display for $t {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(&self.0)
            }
        }
        impl AsRef<str> for $t {
            fn as_ref(&self) -> &str {
                &self.0
            }
        }
        impl ToSql for $t {
            fn to_sql(&self) -> rusqlite::Result<ToSqlOutput<'_>> {
                Ok(ToSqlOutput::from(self.0.as_str()))
            }
        }
    )*};
}
text_id_impls!(AssetId, SensorId, Citation);

#[cfg(test)]
mod tests {
    use super::*;

    /// Ids as real sites write them are taken as given; the edges of the charset and the
    /// length are refused with the format in the message.
    #[test]
    fn ids_are_the_sites_own() {
        for good in
            ["P-101A", "FIT-1001", "NPS1_P1", "PS01/P1/VIB_DE", "LS_Wet_Well_2", "NPS1:P1.Speed", "7", "PUMP-007"]
        {
            assert_eq!(AssetId::parse(good).unwrap().as_str(), good);
            assert_eq!(SensorId::parse(&format!(" {good} ")).unwrap().as_str(), good, "trimmed, case kept");
        }
        let longest = "A".repeat(MAX_ID_CHARS);
        assert!(AssetId::parse(&longest).is_ok());
        for bad in ["", " ", "-P1", "_x", "/PS01", "P 101", "P-101\u{e9}", "P;1", "P'1", "P%1", "a\tb"] {
            assert!(matches!(AssetId::parse(bad), Err(IdError::BadAsset { .. })), "{bad:?}");
            assert!(matches!(SensorId::parse(bad), Err(IdError::BadSensor { .. })), "{bad:?}");
        }
        let err = AssetId::parse(&"A".repeat(MAX_ID_CHARS + 1)).unwrap_err().to_string();
        assert!(err.contains("1 to 64 characters") && err.len() < 400, "{err}");
    }

    #[test]
    fn citations_round_trip_and_refuse_paths_that_escape() {
        let c = Citation::parse("alarm/arp-vibration.md#12").unwrap();
        assert_eq!((c.path(), c.seq()), ("alarm/arp-vibration.md", 12));
        for bad in ["arp.md", "arp.md#x", "#1", "/etc/passwd#0", "../x.md#0", "a//b.md#1"] {
            assert!(Citation::parse(bad).is_err(), "{bad}");
        }
    }
}
