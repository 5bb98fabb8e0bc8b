//! The one Tokio runtime every backend of the process runs on.
//!
//! Created on first use (after import, so a server that forks its workers
//! before building the memory manager gives each worker its own). Sync
//! methods `block_on` it from the calling Python thread with the GIL
//! released; background captures are spawned on it.

use std::sync::OnceLock;
use tokio::runtime::{Builder, Runtime};

pub fn runtime() -> &'static Runtime {
    static RUNTIME: OnceLock<Runtime> = OnceLock::new();
    RUNTIME.get_or_init(|| {
        Builder::new_multi_thread()
            .worker_threads(2)
            .thread_name("memgate-runtime")
            .enable_all()
            .build()
            .expect("memgate: cannot start the Tokio runtime")
    })
}
