//! The shared backend conformance suite (`memgate-conformance`) on `local`:
//! each behaviour gets a fresh database file; another handle is a second
//! store on the same file (what a second process would open).

use memgate_conformance::{BoxFuture, HybridHandle, Storage, Subject, VectorIndex, VectorProgress};
use memgate_core::MemoryBackend;
use memgate_embed::Embedder;
use memgate_store::{LocalBackend, LocalConfig, MemoryStore};
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

/// Holds every directory it handed out until the test ends.
#[derive(Default)]
struct Local {
    dirs: Mutex<Vec<tempfile::TempDir>>,
}

impl Subject for Local {
    fn fresh(&self) -> BoxFuture<'_, Storage> {
        Box::pin(async {
            let dir = tempfile::tempdir().unwrap();
            let path = dir.path().join("memgate.sqlite3");
            self.dirs.lock().unwrap().push(dir);
            let open = move || -> Arc<dyn MemoryBackend> {
                Arc::new(LocalBackend::open(&path, LocalConfig::default()).unwrap())
            };
            let backend = open();
            let open = Arc::new(open);
            Storage {
                backend,
                reopen: Arc::new(move || {
                    let open = Arc::clone(&open);
                    Box::pin(async move { open() }) as BoxFuture<'static, _>
                }),
            }
        })
    }

    fn hybrid(&self, embedder: Arc<dyn Embedder>) -> BoxFuture<'_, HybridHandle> {
        Box::pin(async {
            let dir = tempfile::tempdir().unwrap();
            let path = dir.path().join("memgate.sqlite3");
            self.dirs.lock().unwrap().push(dir);
            hybrid_on(path, embedder)
        })
    }
}

/// A store on `path` with hybrid recall (its background indexer runs).
fn hybrid_on(path: PathBuf, embedder: Arc<dyn Embedder>) -> HybridHandle {
    let store = MemoryStore::open(&path, LocalConfig::default())
        .unwrap()
        .with_embedder(embedder);
    let backend = LocalBackend::from_store(store);
    let vectors = Arc::new(LocalVectors(Arc::clone(backend.store())));
    HybridHandle {
        backend: Arc::new(backend),
        vectors,
        reopen: Arc::new(move |embedder| {
            let path = path.clone();
            Box::pin(async move { hybrid_on(path, embedder) }) as BoxFuture<'static, _>
        }),
    }
}

/// The store's own vector steps, on the blocking pool.
struct LocalVectors(Arc<MemoryStore>);

impl LocalVectors {
    fn run<T: Send + 'static>(
        &self,
        work: impl FnOnce(&MemoryStore) -> memgate_core::Result<T> + Send + 'static,
    ) -> BoxFuture<'_, memgate_core::Result<T>> {
        let store = Arc::clone(&self.0);
        Box::pin(async move {
            tokio::task::spawn_blocking(move || work(&store))
                .await
                .unwrap()
        })
    }
}

impl VectorIndex for LocalVectors {
    fn index_all(&self) -> BoxFuture<'_, memgate_core::Result<usize>> {
        self.run(|s| s.index_all_vectors(32))
    }

    fn reembed(&self) -> BoxFuture<'_, memgate_core::Result<usize>> {
        self.run(|s| s.reembed())
    }

    fn progress(&self) -> BoxFuture<'_, memgate_core::Result<VectorProgress>> {
        self.run(|s| {
            let p = s.vector_progress()?;
            Ok(VectorProgress {
                embedded: p.embedded,
                total: p.total,
                model_mismatch: p.model_mismatch,
            })
        })
    }
}

memgate_conformance::conformance_tests!(Local::default());
