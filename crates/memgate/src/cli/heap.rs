//! Giving memory back after a burst of requests. The allocator (jemalloc,
//! see `main.rs`) returns the pages a burst freed on its own; what a busy
//! spell leaves in use is the page caches of the store's idle connections,
//! one filled per pooled reader. Once the requests of a busy spell have all
//! ended, `memgate serve` has the backend release them.

use memgate_assembly::WorkTracker;
use memgate_core::MemoryBackend;
use std::sync::Arc;
use std::time::Duration;

/// How often the server looks for the end of a busy spell.
const IDLE_CHECK: Duration = Duration::from_secs(2);

/// Releases the backend's idle memory each time the requests of a busy
/// spell have all ended, until the returned task is aborted.
pub fn release_after_bursts(
    requests: Arc<WorkTracker>,
    backend: Arc<dyn MemoryBackend>,
) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        let mut busy = false;
        loop {
            tokio::time::sleep(IDLE_CHECK).await;
            if requests.running() > 0 {
                busy = true;
            } else if std::mem::take(&mut busy) {
                let backend = Arc::clone(&backend);
                // Connection locks are synchronous; keep them off the runtime.
                let _ = tokio::task::spawn_blocking(move || backend.release_idle_memory()).await;
            }
        }
    })
}
