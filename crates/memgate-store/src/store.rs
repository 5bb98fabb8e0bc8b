//! [`MemoryStore`]: the synchronous store the async backend wraps (and that
//! language bindings can call directly). Its connections (one writer behind
//! a mutex, pooled readers, durable commits) are [`crate::db`]'s.

use crate::config::LocalConfig;
use crate::db::Db;
use crate::first_turn::BlockCache;
use crate::index::IndexWrites;
use crate::ranking::TermCounts;
use crate::schema;
use crate::vectors::Vectorizer;
use memgate_core::{KeepHiddenHook, Redactor, Result};
use memgate_embed::Embedder;
use rusqlite::{Connection, Transaction};
use std::path::Path;
use std::sync::Arc;

/// The embedded memory store over one SQLite file.
pub struct MemoryStore {
    db: Db,
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
}

impl std::fmt::Debug for MemoryStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MemoryStore")
            .field("path", &self.db.path())
            .field("config", &self.config)
            .field("closed", &self.db.is_closed())
            .finish_non_exhaustive()
    }
}

impl MemoryStore {
    /// Opens (or creates) the database file at `path` with `config`.
    pub fn open(path: impl AsRef<Path>, config: LocalConfig) -> Result<Self> {
        let db = Db::open(path.as_ref().to_path_buf(), config.busy_timeout)?;
        Ok(Self {
            db,
            config,
            keep_hidden: None,
            redactor: Redactor::shared_default(),
            common_terms: TermCounts::default(),
            first_turn_blocks: BlockCache::default(),
            vectorizer: None,
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
        self.db.path()
    }

    pub fn config(&self) -> &LocalConfig {
        &self.config
    }

    /// Runs `work` in one immediate write transaction, then its index
    /// writes, committed before returning; an error rolls everything back.
    pub(crate) fn write<T>(
        &self,
        work: impl FnOnce(&Transaction<'_>, &mut IndexWrites) -> Result<T>,
    ) -> Result<T> {
        self.db.write(work)
    }

    /// Runs `work` on a reader connection (one consistent snapshot).
    pub(crate) fn read<T>(&self, work: impl FnOnce(&Connection) -> Result<T>) -> Result<T> {
        self.db.read(work)
    }

    /// Page cache hits and misses of a reader connection since the last call
    /// (the counters are reset): how much of a recall the cache answers.
    pub fn page_cache_counts(&self) -> Result<(u64, u64)> {
        self.db.page_cache_counts()
    }

    /// Runs SQLite's quick integrity check (on a connection of its own);
    /// corruption is an error.
    pub fn check_integrity(&self) -> Result<()> {
        self.db.check_integrity()
    }

    /// The schema version of the open file.
    pub fn schema_version(&self) -> Result<u32> {
        self.read(schema::schema_version)
    }

    /// Copies the write-ahead log into the database file and truncates it
    /// (SQLite also does this on its own every few thousand pages).
    pub fn checkpoint(&self) -> Result<()> {
        self.db.checkpoint()
    }

    /// Copies the WAL into the database file and truncates it to zero bytes
    /// (see [`Db::truncate_wal_fully`]): after an erasure no copy may stay
    /// behind in the log.
    pub(crate) fn truncate_wal_fully(&self) -> Result<()> {
        self.db.truncate_wal_fully()
    }

    /// Stops accepting work, checkpoints the WAL into the main file and
    /// closes every connection. Later calls answer `Closed`. Idempotent.
    pub fn close(&self) -> Result<()> {
        self.db.close()
    }

    pub fn is_closed(&self) -> bool {
        self.db.is_closed()
    }
}
