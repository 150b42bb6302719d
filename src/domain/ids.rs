//! Identifiers people and models type. Each parses once, into its canonical form.

use std::fmt;

use rusqlite::types::{ToSql, ToSqlOutput};
use serde::Serialize;

/// Why a string is not the id it was meant to be. The messages are read by models and
/// operators, so each names the expected format and, where it can, the right id.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum IdError {
    #[error("'{given}' is not an asset id: asset ids look like PUMP-007 (letters, a dash, 3 to 5 digits)")]
    BadAsset { given: String },
    #[error("'{given}' is a sensor id, not an asset id; its asset is {asset}")]
    SensorNotAsset { given: String, asset: AssetId },
    #[error("'{given}' is not a sensor id: sensor ids look like PUMP-007.VIB-DE (asset id, a dot, the tag)")]
    BadSensor { given: String },
    #[error("'{given}' is an asset id, not a sensor id; sensor ids look like {given}.VIB-DE")]
    AssetNotSensor { given: AssetId },
    #[error(
        "'{given}' is not a citation key: citation keys look like arp-vibration.md#2 (document path, '#', chunk number)"
    )]
    BadCitation { given: String },
}

/// An asset id such as `PUMP-007`: 2-8 capital letters, a dash, 3-5 digits.
/// Parsing trims and upper-cases, so `pump-007` is accepted as `PUMP-007`.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(transparent)]
pub struct AssetId(String);

impl AssetId {
    pub fn parse(s: &str) -> Result<Self, IdError> {
        let canonical = s.trim().to_ascii_uppercase();
        if let Some((asset, _tag)) = canonical.split_once('.')
            && let Ok(asset) = AssetId::parse(asset)
        {
            return Err(IdError::SensorNotAsset { given: s.trim().to_string(), asset });
        }
        if is_asset_id(&canonical) {
            Ok(AssetId(canonical))
        } else {
            Err(IdError::BadAsset { given: s.trim().to_string() })
        }
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// The letters before the dash: `PUMP` for `PUMP-007`.
    pub fn prefix(&self) -> &str {
        self.0.split_once('-').map_or(&self.0, |(p, _)| p)
    }
}

fn is_asset_id(s: &str) -> bool {
    let Some((letters, digits)) = s.split_once('-') else { return false };
    (2..=8).contains(&letters.len())
        && letters.bytes().all(|b| b.is_ascii_uppercase())
        && (3..=5).contains(&digits.len())
        && digits.bytes().all(|b| b.is_ascii_digit())
}

/// A sensor id such as `PUMP-007.VIB-DE`: its asset id, a dot, and a tag of capital
/// letters and digits in dash-separated parts.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(transparent)]
pub struct SensorId(String);

impl SensorId {
    pub fn parse(s: &str) -> Result<Self, IdError> {
        let canonical = s.trim().to_ascii_uppercase();
        let Some((asset, tag)) = canonical.split_once('.') else {
            return Err(match AssetId::parse(&canonical) {
                Ok(asset) => IdError::AssetNotSensor { given: asset },
                Err(_) => IdError::BadSensor { given: s.trim().to_string() },
            });
        };
        let tag_ok = !tag.is_empty()
            && tag
                .split('-')
                .all(|part| !part.is_empty() && part.bytes().all(|b| b.is_ascii_uppercase() || b.is_ascii_digit()));
        if is_asset_id(asset) && tag_ok {
            Ok(SensorId(canonical))
        } else {
            Err(IdError::BadSensor { given: s.trim().to_string() })
        }
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }

    pub fn asset(&self) -> AssetId {
        AssetId(self.0.split_once('.').expect("validated at parse").0.to_string())
    }

    pub fn tag(&self) -> &str {
        self.0.split_once('.').expect("validated at parse").1
    }
}

/// A stable reference to one documentation chunk: `<document path>#<chunk number>`,
/// for example `arp-vibration.md#2`.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize)]
#[serde(transparent)]
pub struct Citation(String);

impl Citation {
    pub fn new(path: &str, seq: u32) -> Self {
        Citation(format!("{path}#{seq}"))
    }

    pub fn parse(s: &str) -> Result<Self, IdError> {
        let s = s.trim();
        let bad = || IdError::BadCitation { given: s.to_string() };
        let (path, seq) = s.rsplit_once('#').ok_or_else(bad)?;
        let seq: u32 = seq.parse().map_err(|_| bad())?;
        let path_ok =
            !path.is_empty() && !path.starts_with('/') && !path.split('/').any(|part| part.is_empty() || part == "..");
        if path_ok { Ok(Citation::new(path, seq)) } else { Err(bad()) }
    }

    pub fn path(&self) -> &str {
        self.0.rsplit_once('#').expect("validated at construction").0
    }

    pub fn seq(&self) -> u32 {
        self.0.rsplit_once('#').expect("validated at construction").1.parse().expect("validated")
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

    #[test]
    fn asset_ids_are_canonicalised_and_checked() {
        assert_eq!(AssetId::parse(" pump-007 ").unwrap().as_str(), "PUMP-007");
        assert_eq!(AssetId::parse("PUMP-007").unwrap().prefix(), "PUMP");
        for bad in ["", "PUMP", "PUMP-7", "P-007", "PUMP-007x", "PUMP_007", "'; DROP TABLE assets;--"] {
            assert!(matches!(AssetId::parse(bad), Err(IdError::BadAsset { .. })), "{bad}");
        }
        let err = AssetId::parse("PUMP-007.VIB-DE").unwrap_err();
        assert_eq!(
            err,
            IdError::SensorNotAsset { given: "PUMP-007.VIB-DE".into(), asset: AssetId::parse("PUMP-007").unwrap() }
        );
    }

    #[test]
    fn sensor_ids_name_their_asset() {
        let id = SensorId::parse("pump-007.vib-de").unwrap();
        assert_eq!(id.as_str(), "PUMP-007.VIB-DE");
        assert_eq!(id.asset().as_str(), "PUMP-007");
        assert_eq!(id.tag(), "VIB-DE");
        assert!(matches!(SensorId::parse("PUMP-007"), Err(IdError::AssetNotSensor { .. })));
        for bad in ["PUMP-007.", "PUMP-007.VIB--DE", "PUMP-7.VIB", "X.Y", "PUMP-007.VIB DE"] {
            assert!(matches!(SensorId::parse(bad), Err(IdError::BadSensor { .. })), "{bad}");
        }
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
