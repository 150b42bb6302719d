//! The SQLite twin: migrations, the one write connection, and read-only handles.
//!
//! Architecture Invariant: exactly one connection in the process can write, and it
//! lives on the writer thread ([`Writer`]). Everything else, the agent's tools above
//! all, reads through [`Readers`], whose connections SQLite itself refuses to write.

mod backup;
mod filter;
mod migrate;
mod read;
mod readings;
mod write;

use std::path::{Path, PathBuf};

pub use backup::{Backup, backup, check as check_copy};
pub use filter::Filter;
pub use migrate::{SCHEMA_VERSION, migrate};
pub use read::{ReadConn, Readers};
pub use readings::{Limits, Rollups, Stored, Summary, beyond_limits, insert_readings, prune_readings, trend};
pub use write::{Writer, savepoint};

#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error(transparent)]
    Sqlite(#[from] rusqlite::Error),
    #[error(
        "database {path} has schema version {found}, newer than this twinops understands ({supported}); \
         run the twinops release that wrote it, or restore a backup"
    )]
    TooNew { path: String, found: i64, supported: i64 },
    #[error("the write transaction could not commit, nothing of it was saved: {0}")]
    Commit(String),
    #[error("the database writer thread has stopped; restart twinops")]
    WriterGone,
    #[error("cannot open database {path}: {source}")]
    Open { path: String, source: rusqlite::Error },
    #[error("the schema migration was rolled back, the database is as it was: {0}")]
    Migration(String),
}

/// The twin's database: one writer, many readers, same file.
#[derive(Clone)]
pub struct Store {
    path: PathBuf,
    writer: Writer,
    readers: Readers,
}

impl Store {
    /// Opens (creating if needed) the database at `path`, applies pending migrations,
    /// and starts the writer thread.
    pub fn open(path: &Path) -> Result<Store, StoreError> {
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            std::fs::create_dir_all(dir).map_err(|e| StoreError::Open {
                path: path.display().to_string(),
                source: rusqlite::Error::ToSqlConversionFailure(Box::new(e)),
            })?;
        }
        let mut conn = write::open_write_connection(path)?;
        migrate(&mut conn, path)?;
        Ok(Store { path: path.to_path_buf(), writer: Writer::spawn(conn), readers: Readers::new(path) })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    pub fn writer(&self) -> &Writer {
        &self.writer
    }

    pub fn readers(&self) -> &Readers {
        &self.readers
    }

    /// A read-only handle; see [`Readers::get`].
    pub fn read(&self) -> Result<ReadConn, StoreError> {
        self.readers.get()
    }
}

/// Escapes `%`, `_` and the escape character itself for `LIKE ... ESCAPE '\'`, so
/// user text matches literally.
/// The folder a database file lies in, where the daemon keeps its other state (the
/// OPC UA certificates): `.` for a bare file name.
pub fn data_dir_of(db: &std::path::Path) -> std::path::PathBuf {
    db.parent().filter(|p| !p.as_os_str().is_empty()).map_or_else(|| ".".into(), std::path::Path::to_path_buf)
}

pub fn like_pattern_contains(text: &str) -> String {
    let mut out = String::with_capacity(text.len() + 2);
    out.push('%');
    for c in text.chars() {
        if matches!(c, '%' | '_' | '\\') {
            out.push('\\');
        }
        out.push(c);
    }
    out.push('%');
    out
}

/// SQL functions of ours, on every connection: `shown(x)`, a measured value as shown
/// ([`crate::domain::shown`]), for queries that build JSON in SQL; NULL stays NULL.
fn add_functions(conn: &rusqlite::Connection) -> rusqlite::Result<()> {
    use rusqlite::functions::FunctionFlags;
    let flags = FunctionFlags::SQLITE_UTF8 | FunctionFlags::SQLITE_DETERMINISTIC | FunctionFlags::SQLITE_INNOCUOUS;
    conn.create_scalar_function("shown", 1, flags, |ctx| Ok(ctx.get::<Option<f64>>(0)?.map(crate::domain::shown)))?;
    // Unix seconds as JSON carries every time: RFC 3339, as `Timestamp` serializes.
    conn.create_scalar_function("rfc3339", 1, flags, |ctx| {
        Ok(ctx.get::<Option<i64>>(0)?.map(|t| crate::domain::Timestamp::from_unix(t).to_rfc3339()))
    })
}

/// Rows of one JSON text column (SQLite's `json_object`), parsed.
pub fn json_rows(
    stmt: &mut rusqlite::CachedStatement<'_>,
    params: impl rusqlite::Params,
) -> rusqlite::Result<Vec<serde_json::Value>> {
    let rows = stmt.query_map(params, |r| r.get::<_, String>(0))?;
    rows.map(|r| r.map(|t| serde_json::from_str(&t).unwrap_or(serde_json::Value::Null))).collect()
}
