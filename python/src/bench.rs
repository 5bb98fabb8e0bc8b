//! The pure-Rust side of the boundary benchmark (`python/bench/boundary.py`):
//! the same recall and capture calls the Python managers make, on the same
//! backend and transcript, timed inside Rust with no Python in the loop.

use crate::backend::Backend;
use crate::runtime::runtime;
use crate::{convert, errors};
use memgate_core::{Caller, CaptureKind, CaptureRequest, MemoryBackend, RecallRequest, UserId};
use pyo3::prelude::*;
use std::time::Instant;

/// Times `iterations` recalls and captures of `messages` (converted once,
/// before timing; each capture gets its own copy of the request). Returns per-call seconds: `(recall, capture)`.
#[pyfunction]
#[pyo3(signature = (backend, messages, thread, iterations, user=None, agent=None, query=None))]
#[allow(clippy::too_many_arguments)]
pub fn rust_baseline(
    py: Python<'_>,
    backend: &Backend,
    messages: &Bound<'_, PyAny>,
    thread: &str,
    iterations: usize,
    user: Option<&str>,
    agent: Option<&str>,
    query: Option<&str>,
) -> PyResult<(Vec<f64>, Vec<f64>)> {
    let caller = Caller {
        user: UserId::from_host(user),
        agent: agent.map(str::to_owned),
        thread: Some(thread.to_owned()),
    };
    let capture = CaptureRequest {
        caller: caller.clone(),
        messages: convert::messages(messages)?,
        kind: CaptureKind::AfterTurn,
        trace_id: None,
    };
    let recall = RecallRequest {
        caller,
        query: query.map(str::to_owned),
    };
    let inner = backend.inner();
    py.detach(|| {
        let rt = runtime();
        let mut recall_times = Vec::with_capacity(iterations);
        let mut capture_times = Vec::with_capacity(iterations);
        for _ in 0..iterations {
            let start = Instant::now();
            rt.block_on(inner.recall(&recall))?;
            recall_times.push(start.elapsed().as_secs_f64());
            // A Rust host builds a new request each turn: a fresh copy,
            // made before the timer starts and dropped before it stops.
            let request = capture.clone();
            let start = Instant::now();
            rt.block_on(inner.capture(&request))?;
            drop(request);
            capture_times.push(start.elapsed().as_secs_f64());
        }
        Ok((recall_times, capture_times))
    })
    .map_err(errors::to_py)
}

/// fsyncs made by cursor saves in this process so far: the capture-cost
/// harness (`python/bench/capture_cost.py`) counts them per capture.
#[pyfunction]
pub fn cursor_fsyncs() -> u64 {
    memgate_openviking::cursor::fsync_count()
}
