//! [`MemoryStore`]: the synchronous store the async backend wraps (and that
//! language bindings can call directly).
//!
//! One writer connection sits behind a mutex, so writers in this process
//! queue instead of meeting `SQLITE_BUSY`; every write is one `BEGIN
//! IMMEDIATE` transaction, committed (WAL, `synchronous=FULL`) before the call
//! returns. Readers use their own pooled connections and never wait for the
//! writer. Other processes on the same file are handled by the busy timeout.

use crate::config::LocalConfig;
use crate::first_turn::BlockCache;
use crate::index::IndexWrites;
use crate::ranking::TermCounts;
use crate::schema::{self, db_error};
use crate::vectors::Vectorizer;
use memgate_core::{KeepHiddenHook, MemoryError, Redactor, Result};
use memgate_embed::Embedder;
use rusqlite::{Connection, Transaction, TransactionBehavior};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

/// Idle reader connections kept for reuse: as many as can be busy at once.
const MAX_IDLE_READERS: usize = crate::backend::MAX_CONCURRENT_WORK;

/// The embedded memory store over one SQLite file.
pub struct MemoryStore {
    path: PathBuf,
    pub(crate) config: LocalConfig,
    pub(crate) keep_hidden: Option<KeepHiddenHook>,
    /// Applied to turn and memory text after signatures are computed.
    pub(crate) redactor: Arc<Redactor>,
    /// Query terms' postings counts already read (see [`TermCounts`]).
    pub(crate) common_terms: TermCounts,
    /// First-turn blocks of scopes not written to since they were built.
    pub(crate) first_turn_blocks: BlockCache,
    /// The embedder of hybrid recall, if one is configured.
    pub(crate) vectorizer: Option<Vectorizer>,
    writer: Mutex<Option<Connection>>,
    readers: Mutex<Vec<Connection>>,
    closed: AtomicBool,
}

impl std::fmt::Debug for MemoryStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MemoryStore")
            .field("path", &self.path)
            .field("config", &self.config)
            .field("closed", &self.closed.load(Ordering::Relaxed))
            .finish_non_exhaustive()
    }
}

fn truncate_wal(conn: &Connection) -> Result<()> {
    conn.execute_batch("PRAGMA wal_checkpoint(TRUNCATE)")
        .map_err(db_error)
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // A panic inside a closure rolled its transaction back when it unwound;
    // the connection itself is still sound.
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl MemoryStore {
    /// Opens (or creates) the database file at `path` with `config`.
    pub fn open(path: impl AsRef<Path>, config: LocalConfig) -> Result<Self> {
        let path = path.as_ref().to_path_buf();
        let writer = schema::open_writer(&path, config.busy_timeout)?;
        Ok(Self {
            path,
            config,
            keep_hidden: None,
            redactor: Redactor::shared_default(),
            common_terms: TermCounts::default(),
            first_turn_blocks: BlockCache::default(),
            vectorizer: None,
            writer: Mutex::new(Some(writer)),
            readers: Mutex::new(Vec::new()),
            closed: AtomicBool::new(false),
        })
    }

    /// Sets the host's keep-hook for hidden messages (captured only when it
    /// says so).
    pub fn with_keep_hidden(mut self, hook: Option<KeepHiddenHook>) -> Self {
        self.keep_hidden = hook;
        self
    }

    /// Sets the redactor applied before anything is stored (the default
    /// has every built-in rule on).
    pub fn with_redactor(mut self, redactor: Arc<Redactor>) -> Self {
        self.redactor = redactor;
        self
    }

    /// Turns on hybrid recall with `embedder` (see [`crate::vectors`]).
    pub fn with_embedder(mut self, embedder: Arc<dyn Embedder>) -> Self {
        self.vectorizer = Some(Vectorizer::new(embedder));
        self
    }

    /// The model the configured embedder makes vectors of (`None`: recall
    /// is lexical).
    pub fn embedder_model(&self) -> Option<&str> {
        self.vectorizer.as_ref().map(|v| v.embedder.model())
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    pub fn config(&self) -> &LocalConfig {
        &self.config
    }

    fn check_open(&self) -> Result<()> {
        if self.closed.load(Ordering::Acquire) {
            Err(MemoryError::Closed("local".to_owned()))
        } else {
            Ok(())
        }
    }

    /// Runs `work` in one immediate write transaction, then its index
    /// writes, committed before returning; an error rolls everything back.
    pub(crate) fn write<T>(
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
    pub(crate) fn read<T>(&self, work: impl FnOnce(&Connection) -> Result<T>) -> Result<T> {
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
        schema::configure(&conn, self.config.busy_timeout).map_err(db_error)?;
        conn.execute_batch("PRAGMA query_only = ON")
            .map_err(db_error)?;
        Ok(conn)
    }

    /// Page cache hits and misses of a reader connection since the last call
    /// (the counters are reset): how much of a recall the cache answers.
    pub fn page_cache_counts(&self) -> Result<(u64, u64)> {
        use rusqlite::ffi;
        self.read(|conn| {
            let read = |op| {
                let (mut current, mut highest) = (0, 0);
                // SAFETY: the handle is live for the borrow of `conn`; the out
                // pointers are valid for the call.
                unsafe { ffi::sqlite3_db_status(conn.handle(), op, &mut current, &mut highest, 1) };
                current.max(0) as u64
            };
            Ok((
                read(ffi::SQLITE_DBSTATUS_CACHE_HIT),
                read(ffi::SQLITE_DBSTATUS_CACHE_MISS),
            ))
        })
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

    /// The schema version of the open file.
    pub fn schema_version(&self) -> Result<u32> {
        self.read(schema::schema_version)
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
    pub(crate) fn truncate_wal_fully(&self) -> Result<()> {
        self.check_open()?;
        let guard = lock(&self.writer);
        let conn = guard
            .as_ref()
            .ok_or_else(|| MemoryError::Closed("local".to_owned()))?;
        let deadline = std::time::Instant::now() + self.config.busy_timeout;
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
