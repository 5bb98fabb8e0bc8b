//! The shared backend conformance suite (`memgate-conformance`) on `local`:
//! each behaviour gets a fresh database file; another handle is a second
//! store on the same file (what a second process would open).

use memgate_conformance::{BoxFuture, Storage, Subject};
use memgate_core::MemoryBackend;
use memgate_store::{LocalBackend, LocalConfig};
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
}

memgate_conformance::conformance_tests!(Local::default());
