//! The single writer. One thread owns the only writable connection and runs jobs sent
//! to it; jobs that queue up while one commits are committed together (group commit),
//! each inside its own savepoint so one failing job does not undo the others. A job's
//! caller hears back only after the transaction holding its work has committed.

use std::path::Path;
use std::sync::{Arc, Mutex, mpsc};
use std::thread;

use rusqlite::Connection;

use super::StoreError;

/// Most jobs committed in one transaction.
const MAX_BATCH: usize = 256;
/// Jobs that may wait for the writer before senders block (back-pressure).
const QUEUE_CAPACITY: usize = 1024;

type Deliver = Box<dyn FnOnce(Option<StoreError>) + Send>;

/// A unit of work for the writer: `run` does it and returns how to tell the caller once
/// the commit is known; `abort` tells the caller it never ran.
struct Job {
    run: Box<dyn FnOnce(&Connection) -> Deliver + Send>,
    abort: Box<dyn FnOnce(StoreError) + Send>,
}

impl Job {
    /// Runs `f` inside a savepoint; `then` gets its result once the commit is known (a
    /// failed commit turns success into that error), or the reason it never ran.
    fn new<T, E, F, D>(f: F, then: D) -> Job
    where
        T: Send + 'static,
        E: From<StoreError> + Send + 'static,
        F: FnOnce(&Connection) -> Result<T, E> + Send + 'static,
        D: FnOnce(Result<T, E>) + Send + 'static,
    {
        // Exactly one of `run` and `abort` is ever called; the slot hands `then` to it.
        let slot = Arc::new(Mutex::new(Some(then)));
        let abort_slot = Arc::clone(&slot);
        let reply = move |slot: &Mutex<Option<D>>, r: Result<T, E>| {
            if let Some(then) = slot.lock().expect("reply lock").take() {
                then(r);
            }
        };
        let abort = Box::new(move |err: StoreError| reply(&abort_slot, Err(E::from(err))));
        let run = Box::new(move |conn: &Connection| -> Deliver {
            let outcome = savepoint(conn, "job", f);
            Box::new(move |commit_error| {
                reply(
                    &slot,
                    match (outcome, commit_error) {
                        (Ok(_), Some(err)) => Err(E::from(err)),
                        (outcome, _) => outcome,
                    },
                )
            })
        });
        Job { run, abort }
    }
}

/// Handle to the writer thread. Cheap to clone; the thread stops when the last clone
/// is dropped.
#[derive(Clone)]
pub struct Writer {
    tx: mpsc::SyncSender<Job>,
}

pub(super) fn open_write_connection(path: &Path) -> Result<Connection, StoreError> {
    let conn =
        Connection::open(path).map_err(|source| StoreError::Open { path: path.display().to_string(), source })?;
    // Pragmas for the writer, in one place:
    // - WAL: readers never block the writer, and the writer never blocks readers;
    // - synchronous FULL: a commit is on disk before we acknowledge an MQTT message
    //   (NORMAL could lose the last commits on power loss); group commit pays for it;
    // - foreign_keys: the schema's REFERENCES are enforced;
    // - busy_timeout: another process (the CLI) may hold the lock for a moment;
    // - cache_size: 64 MiB (negative = KiB); temp_store: sorts stay in memory.
    conn.execute_batch(
        "PRAGMA journal_mode = WAL;
         PRAGMA synchronous = FULL;
         PRAGMA foreign_keys = ON;
         PRAGMA busy_timeout = 5000;
         PRAGMA cache_size = -65536;
         PRAGMA temp_store = MEMORY;",
    )?;
    conn.set_prepared_statement_cache_capacity(super::read::STATEMENT_CACHE);
    super::add_functions(&conn)?;
    Ok(conn)
}

impl Writer {
    pub(super) fn spawn(conn: Connection) -> Writer {
        let (tx, rx) = mpsc::sync_channel::<Job>(QUEUE_CAPACITY);
        thread::Builder::new()
            .name("twinops-writer".into())
            .spawn(move || run(conn, rx))
            .expect("spawn the writer thread");
        Writer { tx }
    }

    /// Runs `f` on the write connection inside a savepoint and returns its result once
    /// the enclosing transaction has committed. Blocks the calling thread; async code
    /// calls it from `spawn_blocking`.
    pub fn call<T, E, F>(&self, f: F) -> Result<T, E>
    where
        T: Send + 'static,
        E: From<StoreError> + Send + 'static,
        F: FnOnce(&Connection) -> Result<T, E> + Send + 'static,
    {
        let (reply_tx, reply_rx) = mpsc::sync_channel::<Result<T, E>>(1);
        let job = Job::new(f, move |r| drop(reply_tx.send(r)));
        self.tx.send(job).map_err(|_| E::from(StoreError::WriterGone))?;
        reply_rx.recv().map_err(|_| E::from(StoreError::WriterGone))?
    }
}

impl Writer {
    /// [`Writer::call`] for async code.
    pub async fn call_async<T, E, F>(&self, f: F) -> Result<T, E>
    where
        T: Send + 'static,
        E: From<StoreError> + Send + 'static,
        F: FnOnce(&Connection) -> Result<T, E> + Send + 'static,
    {
        self.submit(f).await.unwrap_or_else(|_| Err(E::from(StoreError::WriterGone)))
    }

    /// Queues `f` for the writer and returns at once; the receiver yields its result
    /// once committed. Jobs run and commit in the order they were submitted, which is
    /// what lets ingest parse the next batch while the last one commits and still
    /// acknowledge in arrival order.
    pub fn submit<T, E, F>(&self, f: F) -> tokio::sync::oneshot::Receiver<Result<T, E>>
    where
        T: Send + 'static,
        E: From<StoreError> + Send + 'static,
        F: FnOnce(&Connection) -> Result<T, E> + Send + 'static,
    {
        let (reply_tx, reply_rx) = tokio::sync::oneshot::channel::<Result<T, E>>();
        // The caller may have gone away; nothing to do then.
        self.submit_then(f, move |r| drop(reply_tx.send(r)));
        reply_rx
    }

    /// [`Writer::submit`] with a callback instead of a receiver: `then` gets the result
    /// on the writer thread, right after the commit (or at once if the job never ran).
    /// For callers on a hot path, where one more task wake-up per commit shows.
    pub fn submit_then<T, E, F, D>(&self, f: F, then: D)
    where
        T: Send + 'static,
        E: From<StoreError> + Send + 'static,
        F: FnOnce(&Connection) -> Result<T, E> + Send + 'static,
        D: FnOnce(Result<T, E>) + Send + 'static,
    {
        match self.tx.try_send(Job::new(f, then)) {
            Ok(()) => {}
            // Back-pressure: wait for room off the async threads.
            Err(mpsc::TrySendError::Full(job)) => {
                let tx = self.tx.clone();
                tokio::task::spawn_blocking(move || {
                    if let Err(mpsc::SendError(job)) = tx.send(job) {
                        (job.abort)(StoreError::WriterGone);
                    }
                });
            }
            Err(mpsc::TrySendError::Disconnected(job)) => (job.abort)(StoreError::WriterGone),
        }
    }
}

/// Runs `f` inside a savepoint named `name`: kept if `f` succeeds, rolled back (and
/// the enclosing transaction kept) if it fails. Savepoints nest; the writer wraps
/// every job in one named `job`.
pub fn savepoint<T, E, F>(conn: &Connection, name: &str, f: F) -> Result<T, E>
where
    E: From<StoreError>,
    F: FnOnce(&Connection) -> Result<T, E>,
{
    let sql = |verb: &str| exec(conn, &format!("{verb} {name}")).map_err(|e| E::from(StoreError::Sqlite(e)));
    sql("SAVEPOINT")?;
    match f(conn) {
        Ok(value) => {
            sql("RELEASE")?;
            Ok(value)
        }
        Err(err) => {
            sql("ROLLBACK TO")?;
            sql("RELEASE")?;
            Err(err)
        }
    }
}

/// Runs a transaction-control statement through the statement cache: they run on every
/// job, and parsing them each time showed in profiles.
fn exec(conn: &Connection, sql: &str) -> rusqlite::Result<()> {
    conn.prepare_cached(sql)?.execute([]).map(|_| ())
}

fn run(conn: Connection, rx: mpsc::Receiver<Job>) {
    while let Ok(first) = rx.recv() {
        let busy = std::time::Instant::now();
        if let Err(err) = exec(&conn, "BEGIN IMMEDIATE") {
            tracing::error!(stage = "store", error = %err, "cannot begin a write transaction");
            (first.abort)(StoreError::Sqlite(err));
            continue;
        }
        let mut delivers = vec![(first.run)(&conn)];
        while delivers.len() < MAX_BATCH {
            match rx.try_recv() {
                Ok(job) => delivers.push((job.run)(&conn)),
                Err(_) => break,
            }
        }
        let commit = exec(&conn, "COMMIT");
        if let Err(err) = &commit {
            tracing::error!(stage = "store", error = %err, jobs = delivers.len(), "commit failed");
            let _ = exec(&conn, "ROLLBACK");
        }
        crate::metrics::count("twinops_store_writer_busy_seconds_total", &[], busy.elapsed().as_secs_f64());
        for deliver in delivers {
            deliver(commit.as_ref().err().map(|e| StoreError::Commit(e.to_string())));
        }
    }
}
