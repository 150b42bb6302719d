//! The plant as a site describes it: `twinops plant import` and `plant export`.
//!
//! A site's files (a TOML in the shape of `seed/plant.toml`, CSV tag exports and asset
//! registers, in any combination) are read into one [`PlantModel`], checked as a whole
//! (every error with its file, line and column), compared with the twin into a
//! [`ChangeSet`] (added; changed, field by field; retired), and applied in one
//! transaction with an `audit_log` entry. Nothing is written when anything is wrong.
//!
//! Architecture Invariant: an asset or sensor is never deleted here. Missing from a
//! full import, it is retired (`retired_at`): its history stays, it leaves the lists,
//! and ingest refuses its new events as `retired`.

mod apply;
mod csv;
mod export;
mod model;
mod toml;

use std::path::{Path, PathBuf};

pub use apply::{Change, ChangeSet, Mode, diff, import, import_within};
pub use export::export;
pub use model::{
    ASSET_FIELDS, AssetRow, CONNECTION_FIELDS, Origin, PlantModel, SENSOR_FIELDS, SensorRow, Site, StationRow,
    connection_word,
};

/// What is wrong with the files, each problem at its place. Displayed as one line per
/// problem, then what to do.
#[derive(Debug, thiserror::Error)]
#[error("{}\nnothing was imported: fix the files and run the import again", .0.iter().map(ToString::to_string).collect::<Vec<_>>().join("\n"))]
pub struct ImportError(pub Vec<Problem>);

/// One problem in one file: `tags.csv:14:6 (HiHi): ...`.
#[derive(Debug, Clone, PartialEq)]
pub struct Problem {
    pub at: Origin,
    /// 1-based column, 0 when the problem is the whole row or file.
    pub column: usize,
    /// The column's header, when there is one.
    pub field: Option<String>,
    pub message: String,
}

impl std::fmt::Display for Problem {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}:{}", self.at.file, self.at.line)?;
        if self.column > 0 {
            write!(f, ":{}", self.column)?;
        }
        if let Some(field) = &self.field {
            write!(f, " ({field})")?;
        }
        write!(f, ": {}", self.message)
    }
}

/// A site's plant files as text, by name (`site.toml`, `tags.csv`): what a redundant
/// pair's decision log carries of an import, so that both nodes read and import the
/// same.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct SiteFiles(pub Vec<(String, String)>);

impl SiteFiles {
    /// Reads the files as UTF-8 text (a byte-order mark dropped).
    pub fn read(files: &[PathBuf]) -> Result<SiteFiles, ImportError> {
        let mut texts = Vec::new();
        let mut problems = Vec::new();
        for path in files {
            let name = display_name(path);
            let bytes = match std::fs::read(path) {
                Ok(b) => b,
                Err(e) => {
                    problems.push(Problem::file(&name, format!("cannot read the file: {e}")));
                    continue;
                }
            };
            let Ok(text) = String::from_utf8(bytes) else {
                problems
                    .push(Problem::file(&name, "the file is not UTF-8 text: save it as UTF-8 (with or without BOM)"));
                continue;
            };
            texts.push((name, text.strip_prefix('\u{feff}').map(str::to_string).unwrap_or(text)));
        }
        if problems.is_empty() { Ok(SiteFiles(texts)) } else { Err(ImportError(problems)) }
    }

    /// The files as one model: `.toml` as a plant file, `.csv` (or `.txt`) as an asset
    /// register or a tag export, told apart by their headers.
    pub fn model(&self) -> Result<PlantModel, ImportError> {
        let mut model = PlantModel::default();
        let mut problems = Vec::new();
        for (name, text) in &self.0 {
            let extension = Path::new(name).extension().and_then(|e| e.to_str()).map(str::to_ascii_lowercase);
            let read = match extension.as_deref() {
                Some("toml") => toml::read(name, text, &mut model),
                Some("csv" | "txt") => csv::read(name, text, &mut model),
                _ => Err(vec![Problem::file(name, "not a plant file: give .toml or .csv files")]),
            };
            if let Err(p) = read {
                problems.extend(p);
            }
        }
        if problems.is_empty() { Ok(model) } else { Err(ImportError(problems)) }
    }

    /// The files' names, as the audit log says where an import came from.
    pub fn names(&self) -> String {
        self.0.iter().map(|(n, _)| n.as_str()).collect::<Vec<_>>().join(", ")
    }

    /// Imports the files inside the caller's transaction, as `actor`'s ([`import_within`]).
    pub fn import_within(
        &self,
        c: &rusqlite::Connection,
        mode: Mode,
        actor: &str,
    ) -> Result<Result<ChangeSet, ImportError>, crate::store::StoreError> {
        match self.model() {
            Ok(model) => import_within(c, &model, mode, actor, &self.names()),
            Err(e) => Ok(Err(e)),
        }
    }
}

/// Reads the files into one model ([`SiteFiles`]).
pub fn read(files: &[PathBuf]) -> Result<PlantModel, ImportError> {
    SiteFiles::read(files)?.model()
}

/// Reads the files and imports them: the one call behind `twinops plant import`.
pub fn import_files(
    writer: &crate::store::Writer,
    files: &[PathBuf],
    mode: Mode,
    dry_run: bool,
    actor: &str,
) -> Result<ChangeSet, ImportError> {
    let files = SiteFiles::read(files)?;
    import(writer, files.model()?, mode, dry_run, actor, &files.names())
}

/// The plant as the HMI shows it: the site, its stations, and each station's assets in
/// service (retired ones left out) with their kind, status, active alarms and parent.
/// The site: (id, name, IANA time zone), once a plant is loaded.
pub fn site(db: &rusqlite::Connection) -> rusqlite::Result<Option<(String, String, String)>> {
    use rusqlite::OptionalExtension;
    db.query_row("SELECT id, name, timezone FROM sites LIMIT 1", [], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))
        .optional()
}

pub fn tree(db: &rusqlite::Connection) -> rusqlite::Result<serde_json::Value> {
    use rusqlite::OptionalExtension;
    use serde_json::json;
    let site = db
        .query_row("SELECT json_object('id', id, 'name', name, 'timezone', timezone) FROM sites LIMIT 1", [], |r| {
            r.get::<_, String>(0)
        })
        .optional()?
        .and_then(|s| serde_json::from_str::<serde_json::Value>(&s).ok());
    let mut stmt = db.prepare_cached(
        "SELECT st.id, st.name, json_group_array(json_object('id', a.id, 'name', a.name, 'kind', a.kind,
                'status', a.status, 'criticality', a.criticality, 'parent', coalesce(a.parent_id, a.drives),
                'active_alarms', (SELECT count(*) FROM alarms al WHERE al.asset_id = a.id AND al.cleared_at IS NULL)))
                FILTER (WHERE a.id IS NOT NULL)
         FROM stations st LEFT JOIN (SELECT * FROM assets WHERE retired_at IS NULL ORDER BY id) a ON a.station_id = st.id
         GROUP BY st.id ORDER BY st.id",
    )?;
    let stations = stmt
        .query_map([], |r| {
            let assets: String = r.get(2)?;
            Ok(json!({"id": r.get::<_, String>(0)?, "name": r.get::<_, String>(1)?,
                      "assets": serde_json::from_str::<serde_json::Value>(&assets).unwrap_or_else(|_| json!([]))}))
        })?
        .collect::<rusqlite::Result<Vec<_>>>()?;
    Ok(json!({"site": site, "stations": stations}))
}

/// The name a problem is reported under: the path as given.
fn display_name(path: &Path) -> String {
    path.display().to_string()
}

impl Problem {
    fn file(file: &str, message: impl Into<String>) -> Problem {
        Problem { at: Origin { file: file.to_string(), line: 1 }, column: 0, field: None, message: message.into() }
    }
}
