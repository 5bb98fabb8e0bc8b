//! Helpers shared by the integration tests: a store in a fresh temporary
//! directory, callers, capture requests and a seeded generator.
#![allow(dead_code)]

use memgate_core::{Caller, CaptureKind, CaptureRequest, Message, RecallRequest};
use memgate_store::{LocalConfig, MemoryStore};
use std::path::PathBuf;
use tempfile::TempDir;

/// A store in its own temporary directory (kept alive with it).
pub struct TestStore {
    pub dir: TempDir,
    pub store: MemoryStore,
}

impl TestStore {
    pub fn new() -> Self {
        Self::with_config(LocalConfig::default())
    }

    pub fn with_config(config: LocalConfig) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let store = MemoryStore::open(dir.path().join("memgate.sqlite3"), config).unwrap();
        Self { dir, store }
    }

    pub fn path(&self) -> PathBuf {
        self.dir.path().join("memgate.sqlite3")
    }

    /// Closes and reopens the same file (what a restart does).
    pub fn reopen(self) -> Self {
        self.store.close().unwrap();
        let store = MemoryStore::open(self.path(), self.store.config().clone()).unwrap();
        Self {
            dir: self.dir,
            store,
        }
    }
}

pub fn alice() -> Caller {
    Caller::new("alice")
}

pub fn capture(caller: &Caller, thread: &str, messages: Vec<Message>) -> CaptureRequest {
    CaptureRequest {
        caller: caller.clone().with_thread(thread),
        messages,
        kind: CaptureKind::AfterTurn,
        trace_id: None,
    }
}

pub fn recall_of(caller: &Caller, query: Option<&str>) -> RecallRequest {
    RecallRequest {
        caller: caller.clone(),
        query: query.map(str::to_owned),
    }
}

/// Citations in a recall, in order.
pub fn cited(recall: &memgate_core::Recall) -> Vec<String> {
    recall
        .items
        .iter()
        .map(|i| i.citation.clone().unwrap().0)
        .collect()
}

/// A seeded generator, so randomized tests are reproducible.
pub use memgate_testsupport::SplitMix as Rng;

pub fn pick<'a, T>(rng: &mut Rng, items: &'a [T]) -> &'a T {
    &items[rng.below(items.len())]
}

/// The database files that exist next to `db` (main file, WAL, shared memory).
pub fn database_files(db: &std::path::Path) -> Vec<PathBuf> {
    ["", "-wal", "-shm"]
        .iter()
        .map(|suffix| PathBuf::from(format!("{}{suffix}", db.display())))
        .filter(|p| p.exists())
        .collect()
}

/// The files of `db` whose bytes contain `needle` as written or in lower
/// case (the recall index stores folded terms).
pub fn files_containing(db: &std::path::Path, needle: &str) -> Vec<String> {
    files_containing_any(
        db,
        &[
            needle.as_bytes().to_vec(),
            needle.to_lowercase().into_bytes(),
        ],
    )
}

/// The files of `db` whose bytes contain one of `forms`.
pub fn files_containing_any(db: &std::path::Path, forms: &[Vec<u8>]) -> Vec<String> {
    database_files(db)
        .into_iter()
        .filter(|p| {
            let bytes = std::fs::read(p).unwrap();
            forms
                .iter()
                .any(|f| bytes.windows(f.len()).any(|w| w == f.as_slice()))
        })
        .map(|p| p.file_name().unwrap().to_string_lossy().into_owned())
        .collect()
}
