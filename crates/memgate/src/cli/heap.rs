//! Giving memory back after a burst of requests: glibc's allocator keeps
//! what a burst freed in per-thread arenas, so a server that served 200
//! clients once would hold that peak for good. `memgate serve` caps the
//! arenas and, once the requests of a busy spell have all ended, trims
//! them back to the operating system.

use memgate_assembly::WorkTracker;
use std::sync::Arc;
use std::time::Duration;

/// How often the server looks for the end of a busy spell.
const IDLE_CHECK: Duration = Duration::from_secs(2);
/// Arenas glibc may keep: enough that the runtime's threads rarely wait
/// on each other's lock, few enough that freed memory is not spread thin.
#[cfg(all(target_os = "linux", target_env = "gnu"))]
const ARENA_MAX: libc::c_int = 4;

/// Caps the allocator's arenas; call before the runtime's threads start
/// allocating (arenas already made stay).
pub fn cap_arenas() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: mallopt only sets an allocator parameter.
    unsafe {
        libc::mallopt(libc::M_ARENA_MAX, ARENA_MAX);
    }
}

/// Trims the heap each time the requests of a busy spell have all ended,
/// until the returned task is aborted.
pub fn trim_after_bursts(requests: Arc<WorkTracker>) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        let mut busy = false;
        loop {
            tokio::time::sleep(IDLE_CHECK).await;
            if requests.running() > 0 {
                busy = true;
            } else if std::mem::take(&mut busy) {
                trim();
            }
        }
    })
}

fn trim() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: malloc_trim only returns free heap pages to the system.
    unsafe {
        libc::malloc_trim(0);
    }
}
