//! The file's connections: one writer behind a mutex and a pool of readers,
//! and the write-ahead log's checkpoints.
//!
//! Writers in this process queue on the mutex instead of meeting
//! `SQLITE_BUSY`; every write is one `BEGIN IMMEDIATE` transaction,
//! committed (WAL, `synchronous=FULL`) before the call returns. Readers use
//! their own pooled connections and never wait for the writer. Other
//! processes on the same file are handled by the busy timeout.
//!
//! This module knows connections and transactions only; what is read or
//! written is the concern modules' (they work on the connection handed to
//! them), and [`crate::MemoryStore`] is what puts the two together.

use crate::error::db_error;
use crate::index::IndexWrites;
use crate::lengths::DocLengths;
use crate::schema;
use memgate_core::{MemoryError, Result};
use rusqlite::{Connection, Transaction, TransactionBehavior};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

/// Idle reader connections kept for reuse: as many as can be busy at once
/// (the async backend runs at most this much SQLite work at a time).
pub(crate) const MAX_IDLE_READERS: usize = 8;

/// The connections to one database file.
pub(crate) struct Db {
    path: PathBuf,
    busy_timeout: Duration,
    writer: Mutex<Option<Connection>>,
    readers: Mutex<Vec<Connection>>,
    closed: AtomicBool,
    /// Turns' index lengths, shared by every connection's ranking.
    lengths: Arc<DocLengths>,
}

fn truncate_wal(conn: &Connection) -> Result<()> {
    conn.execute_batch("PRAGMA wal_checkpoint(TRUNCATE)")
        .map_err(db_error)
}

/// One of a connection's `sqlite3_db_status` counters, reset after reading
/// when `reset` (counters that count; gauges ignore it).
fn db_status(conn: &Connection, op: std::os::raw::c_int, reset: bool) -> u64 {
    let (mut current, mut highest) = (0, 0);
    // SAFETY: the handle is live for the borrow of `conn`; the out pointers
    // are valid for the call.
    unsafe {
        rusqlite::ffi::sqlite3_db_status(
            conn.handle(),
            op,
            &mut current,
            &mut highest,
            i32::from(reset),
        )
    };
    current.max(0) as u64
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // A panic inside a closure rolled its transaction back when it unwound;
    // the connection itself is still sound.
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl Db {
    /// Opens (or creates) the file at `path`: its writer connection now
    /// (recognising the file and migrating it), readers when first needed.
    pub fn open(path: PathBuf, busy_timeout: Duration) -> Result<Self> {
        let lengths = Arc::new(DocLengths::default());
        let writer = schema::open_writer(&path, busy_timeout, &lengths)?;
        Ok(Self {
            path,
            busy_timeout,
            writer: Mutex::new(Some(writer)),
            readers: Mutex::new(Vec::new()),
            closed: AtomicBool::new(false),
            lengths,
        })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    fn check_open(&self) -> Result<()> {
        if self.is_closed() {
            Err(MemoryError::Closed("local".to_owned()))
        } else {
            Ok(())
        }
    }

    /// Runs `work` in one immediate write transaction, then its index
    /// writes, committed before returning; an error rolls everything back.
    pub fn write<T>(
        &self,
        work: impl FnOnce(&Transaction<'_>, &mut IndexWrites) -> Result<T>,
    ) -> Result<T> {
        self.check_open()?;
        let mut guard = lock(&self.writer);
        let conn = guard
            .as_mut()
            .ok_or_else(|| MemoryError::Closed("local".to_owned()))?;
        let tx = conn
            .transaction_with_behavior(TransactionBehavior::Immediate)
            .map_err(db_error)?;
        let mut index = IndexWrites::default();
        let value = work(&tx, &mut index)?;
        index.apply(&tx)?;
        tx.commit().map_err(db_error)?;
        Ok(value)
    }

    /// Runs `work` on a reader connection (one consistent snapshot).
    pub fn read<T>(&self, work: impl FnOnce(&Connection) -> Result<T>) -> Result<T> {
        self.check_open()?;
        let pooled = lock(&self.readers).pop();
        let mut conn = match pooled {
            Some(c) => c,
            None => self.open_reader()?,
        };
        let tx = conn.transaction().map_err(db_error)?;
        let result = work(&tx);
        drop(tx); // read-only: rolling back just ends the snapshot
        if !self.closed.load(Ordering::Acquire) {
            let mut pool = lock(&self.readers);
            if pool.len() < MAX_IDLE_READERS {
                pool.push(conn);
            }
        }
        result
    }

    fn open_reader(&self) -> Result<Connection> {
        let conn = Connection::open(&self.path).map_err(db_error)?;
        schema::configure(&conn, self.busy_timeout, &self.lengths).map_err(db_error)?;
        conn.execute_batch("PRAGMA query_only = ON")
            .map_err(db_error)?;
        Ok(conn)
    }

    /// Frees the page caches of the connections nobody is using, once a
    /// busy spell has ended: each connection's cache (up to `cache_size`)
    /// fills under load and would otherwise stay filled while idle, one per
    /// pooled reader. A writer busy with background work keeps its cache.
    pub fn release_idle_memory(&self) {
        let shrink = |conn: &Connection| {
            // Only unused cache pages go; a failure leaves the cache as it was.
            let _ = conn.execute_batch("PRAGMA shrink_memory");
        };
        for conn in lock(&self.readers).iter() {
            shrink(conn);
        }
        if let Ok(writer) = self.writer.try_lock() {
            if let Some(conn) = writer.as_ref() {
                shrink(conn);
            }
        }
    }

    /// Page cache hits and misses of a reader connection since the last call
    /// (the counters are reset).
    pub fn page_cache_counts(&self) -> Result<(u64, u64)> {
        use rusqlite::ffi;
        self.read(|conn| {
            Ok((
                db_status(conn, ffi::SQLITE_DBSTATUS_CACHE_HIT, true),
                db_status(conn, ffi::SQLITE_DBSTATUS_CACHE_MISS, true),
            ))
        })
    }

    /// The idle pooled readers and the bytes their page caches hold.
    #[cfg(test)]
    pub fn idle_cache_bytes(&self) -> (usize, u64) {
        let pool = lock(&self.readers);
        let bytes = pool
            .iter()
            .map(|c| db_status(c, rusqlite::ffi::SQLITE_DBSTATUS_CACHE_USED, false))
            .sum();
        (pool.len(), bytes)
    }

    /// Runs SQLite's quick integrity check; corruption is an error.
    ///
    /// On a connection of its own: a pooled reader that last read before a
    /// `forget` rewrote the recall index was seen to report "fts5:
    /// corruption found" for a file a new connection finds ok.
    pub fn check_integrity(&self) -> Result<()> {
        let conn = self.open_reader()?;
        let verdict: String = conn
            .query_row("PRAGMA quick_check", [], |r| r.get(0))
            .map_err(db_error)?;
        if verdict == "ok" {
            Ok(())
        } else {
            Err(MemoryError::Corruption(format!(
                "local memory database failed its integrity check: {verdict}"
            )))
        }
    }

    /// Copies the write-ahead log into the database file and truncates it
    /// (SQLite also does this on its own every few thousand pages).
    pub fn checkpoint(&self) -> Result<()> {
        self.check_open()?;
        let guard = lock(&self.writer);
        let conn = guard
            .as_ref()
            .ok_or_else(|| MemoryError::Closed("local".to_owned()))?;
        truncate_wal(conn)
    }

    /// Copies the WAL into the database file and truncates it to zero bytes,
    /// waiting (up to the busy timeout) for readers that still hold old
    /// frames: after an erasure no copy may stay behind in the log.
    pub fn truncate_wal_fully(&self) -> Result<()> {
        self.check_open()?;
        let guard = lock(&self.writer);
        let conn = guard
            .as_ref()
            .ok_or_else(|| MemoryError::Closed("local".to_owned()))?;
        let deadline = std::time::Instant::now() + self.busy_timeout;
        loop {
            let busy: i64 = conn
                .query_row("PRAGMA wal_checkpoint(TRUNCATE)", [], |r| r.get(0))
                .map_err(db_error)?;
            if busy == 0 {
                return Ok(());
            }
            if std::time::Instant::now() >= deadline {
                return Err(MemoryError::backend(
                    "the erasure is committed, but readers kept the write-ahead log from being \
                     truncated; it is truncated at the next checkpoint",
                ));
            }
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
    }

    /// Stops accepting work, checkpoints the WAL into the main file and
    /// closes every connection. Later calls answer `Closed`. Idempotent.
    pub fn close(&self) -> Result<()> {
        self.closed.store(true, Ordering::Release);
        lock(&self.readers).clear();
        let Some(conn) = lock(&self.writer).take() else {
            return Ok(());
        };
        truncate_wal(&conn)?;
        conn.close().map_err(|(_, e)| db_error(e))
    }

    pub fn is_closed(&self) -> bool {
        self.closed.load(Ordering::Acquire)
    }
}
