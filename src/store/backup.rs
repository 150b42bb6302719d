//! Online backup: a consistent copy of the twin, taken while the daemon runs.
//!
//! Copying the database file with `cp` while it is open is not a backup: the last
//! commits live in `-wal` until a checkpoint, and a copy taken mid-checkpoint is torn.
//! `VACUUM INTO` copies one read transaction's snapshot into a new, compact file. In
//! WAL mode the writer is not blocked meanwhile; it only keeps its log until the copy
//! ends. The copy is written beside its destination, checked, synced and then renamed,
//! so the destination is either a whole, checked backup or absent.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{Context, ensure};
use rusqlite::{Connection, OpenFlags};

/// What a backup wrote.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Backup {
    pub bytes: u64,
    pub schema_version: i64,
    pub elapsed: Duration,
}

/// Copies the database at `from` to `to`, which must not exist.
pub fn backup(from: &Path, to: &Path) -> anyhow::Result<Backup> {
    let started = Instant::now();
    ensure!(!to.exists(), "{} exists; a backup never overwrites one: choose a new file name", to.display());
    ensure!(from.exists(), "no database at {} (--db or --data-dir picks another)", from.display());
    let partial = partial_path(to);
    ensure!(
        !partial.exists(),
        "{} exists: another backup to this name is running, or one was interrupted (remove it if none runs)",
        partial.display()
    );
    let written = copy(from, &partial).and_then(|()| check(&partial));
    let schema_version = match written {
        Ok(version) => version,
        Err(e) => {
            let _ = std::fs::remove_file(&partial);
            return Err(e);
        }
    };
    std::fs::File::open(&partial).and_then(|f| f.sync_all()).context("syncing the backup to disk")?;
    std::fs::rename(&partial, to).with_context(|| format!("naming the backup {}", to.display()))?;
    if let Some(dir) = to.parent().filter(|d| !d.as_os_str().is_empty()) {
        // The rename is durable once the directory is.
        std::fs::File::open(dir).and_then(|d| d.sync_all()).context("syncing the backup's folder")?;
    }
    let bytes = std::fs::metadata(to)?.len();
    Ok(Backup { bytes, schema_version, elapsed: started.elapsed() })
}

/// `twinops-2026-12-01.db` is written as `twinops-2026-12-01.db.partial` first.
fn partial_path(to: &Path) -> PathBuf {
    let mut name = to.file_name().unwrap_or_default().to_os_string();
    name.push(".partial");
    to.with_file_name(name)
}

fn copy(from: &Path, to: &Path) -> anyhow::Result<()> {
    let target = to.to_str().context("the backup's path must be UTF-8")?;
    // Read-only, and not `query_only` as the daemon's read handles are: SQLite refuses
    // VACUUM INTO under query_only although it writes only the new file.
    let conn = Connection::open_with_flags(from, OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX)
        .with_context(|| format!("opening {}", from.display()))?;
    conn.busy_timeout(Duration::from_secs(10))?;
    conn.execute("VACUUM INTO ?1", [target]).with_context(|| format!("copying {} to {}", from.display(), target))?;
    Ok(())
}

/// The copy's integrity check and schema version.
pub fn check(copy: &Path) -> anyhow::Result<i64> {
    let conn = Connection::open_with_flags(copy, OpenFlags::SQLITE_OPEN_READ_ONLY)?;
    let verdict: String = conn.query_row("PRAGMA integrity_check", [], |r| r.get(0))?;
    ensure!(verdict == "ok", "the copy failed its integrity check ({verdict}); the database may be damaged");
    Ok(conn.pragma_query_value(None, "user_version", |r| r.get(0))?)
}
