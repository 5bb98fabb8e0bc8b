//! The one Tokio runtime every backend of the process runs on, and the one
//! way its threads call into Python.
//!
//! Created on first use (after import, so a server that forks its workers
//! before building the memory manager gives each worker its own). Sync
//! methods `block_on` it from the calling Python thread with the GIL
//! released; background captures are spawned on it.
//!
//! One worker: the work on it is I/O (requests, their answers) and the
//! capture steps spawned to outlive a caller, while sync calls do their own
//! CPU work on the calling thread. A second worker cost a first capture of
//! 1,000 messages 9-15% more CPU (measured through `testkit/capture-cost`):
//! every answer the I/O driver hands to a task woke the parked sibling to
//! look for work. With one worker nothing may block it, so Rust code on a
//! runtime thread reaches Python only through [`attached`].

use pyo3::Python;
use std::sync::OnceLock;
use tokio::runtime::{Builder, Handle, Runtime, RuntimeFlavor};

pub fn runtime() -> &'static Runtime {
    static RUNTIME: OnceLock<Runtime> = OnceLock::new();
    RUNTIME.get_or_init(|| {
        Builder::new_multi_thread()
            .worker_threads(1)
            .thread_name("memgate-runtime")
            .enable_all()
            .build()
            .expect("memgate: cannot start the Tokio runtime")
    })
}

/// Runs `f` attached to the interpreter (`None` once it is finalizing).
/// Waiting for the GIL is a blocking section (`block_in_place`): called on
/// the runtime's worker, the worker's other tasks move to another thread
/// meanwhile, so a Python thread that holds the GIL never stalls memgate's
/// I/O; anywhere else it simply runs (a current-thread runtime, such as the
/// distillation worker's, has no other thread to hand work to, and
/// `block_in_place` would panic there).
pub fn attached<R>(f: impl for<'py> FnOnce(Python<'py>) -> R) -> Option<R> {
    match Handle::try_current() {
        Ok(handle) if handle.runtime_flavor() == RuntimeFlavor::MultiThread => {
            tokio::task::block_in_place(|| Python::try_attach(f))
        }
        _ => Python::try_attach(f),
    }
}
