//! Read-only connections. SQLite enforces the "read" here twice: the file is opened
//! with `SQLITE_OPEN_READ_ONLY`, and `PRAGMA query_only` refuses writes even to temp
//! tables. The agent's tools only ever get one of these.

use std::ops::Deref;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use rusqlite::{Connection, OpenFlags};

use super::StoreError;

/// How many idle read connections are kept for reuse; more may be open at once.
const MAX_IDLE: usize = 8;
/// Prepared statements kept per connection.
pub(super) const STATEMENT_CACHE: usize = 128;

/// A small pool of read-only connections. Cheap to clone.
#[derive(Clone)]
pub struct Readers {
    inner: Arc<Inner>,
}

struct Inner {
    path: PathBuf,
    // A std mutex: it guards a Vec push/pop and is never held across an await.
    idle: Mutex<Vec<Connection>>,
}

impl Readers {
    pub(super) fn new(path: &Path) -> Readers {
        Readers { inner: Arc::new(Inner { path: path.to_path_buf(), idle: Mutex::new(Vec::new()) }) }
    }

    /// Takes an idle connection or opens a new one. It goes back to the pool on drop.
    pub fn get(&self) -> Result<ReadConn, StoreError> {
        let reused = self.inner.idle.lock().expect("reader pool poisoned").pop();
        let conn = match reused {
            Some(conn) => conn,
            None => open_read_connection(&self.inner.path)?,
        };
        Ok(ReadConn { conn: Some(conn), pool: Arc::clone(&self.inner) })
    }
}

fn open_read_connection(path: &Path) -> Result<Connection, StoreError> {
    let flags = OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX;
    let conn = Connection::open_with_flags(path, flags)
        .map_err(|source| StoreError::Open { path: path.display().to_string(), source })?;
    // Pragmas for readers:
    // - query_only: a second lock on writing, should the open flags ever change;
    // - busy_timeout: wait out a checkpoint instead of failing at once;
    // - cache_size: 16 MiB of page cache per connection (negative = KiB);
    // - mmap_size: map up to 256 MiB, so scans of `readings` skip a copy.
    conn.execute_batch(
        "PRAGMA query_only = ON;
         PRAGMA busy_timeout = 5000;
         PRAGMA cache_size = -16384;
         PRAGMA mmap_size = 268435456;",
    )?;
    // The tools use a few dozen distinct statements; the default cache of 16 would
    // evict and re-parse them on every run.
    conn.set_prepared_statement_cache_capacity(STATEMENT_CACHE);
    super::add_functions(&conn)?;
    Ok(conn)
}

/// A read-only connection on loan from [`Readers`].
pub struct ReadConn {
    conn: Option<Connection>,
    pool: Arc<Inner>,
}

impl Deref for ReadConn {
    type Target = Connection;
    fn deref(&self) -> &Connection {
        self.conn.as_ref().expect("present until drop")
    }
}

impl Drop for ReadConn {
    fn drop(&mut self) {
        let Some(conn) = self.conn.take() else { return };
        let mut idle = self.pool.idle.lock().expect("reader pool poisoned");
        if idle.len() < MAX_IDLE {
            idle.push(conn);
        }
    }
}
