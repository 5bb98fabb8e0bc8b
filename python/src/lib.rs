//! # memgate._native — the Rust side of memgate's Python package
//!
//! A small extension: [`backend::Backend`] wraps one memgate backend
//! (`local`, `openviking`, `powercontext`) for the DeerFlow memory managers
//! in `memgate.deerflow`, which are plain Python. [`convert`] reads
//! LangChain messages; [`ids`] exposes the host contract's signatures and
//! OpenViking ids (and the cursor's fsync count the capture-cost harness
//! reads); [`confidence`] is the one 0..1 meaning of a search hit; [`pylog`] forwards Rust log events to `logging`. Backends come
//! from `memgate_assembly` only: no backend crate is named here. The
//! boundary benchmark's pure-Rust side lives outside the wheel
//! (`crates/memgate-lab/examples/boundary_baseline.rs`).

mod backend;
mod capture_result;
mod confidence;
mod convert;
mod errors;
mod ids;
mod pylog;
mod runtime;

use pyo3::prelude::*;

// No `#[global_allocator]`: a library loaded into someone else's interpreter
// uses the host process's allocator. A replacement (mimalloc) crashed in its
// per-thread set-up once memgate was first used on a thread that then exited
// (tests/test_threads.py).

#[pymodule]
fn _native(m: &Bound<'_, PyModule>) -> PyResult<()> {
    pylog::install();
    m.add("NativeError", m.py().get_type::<errors::NativeError>())?;
    m.add_class::<backend::Backend>()?;
    m.add_class::<backend::Environment>()?;
    m.add_class::<capture_result::CaptureResult>()?;
    m.add_function(wrap_pyfunction!(backend::remember_tool_spec, m)?)?;
    m.add_function(wrap_pyfunction!(ids::message_signature, m)?)?;
    m.add_function(wrap_pyfunction!(ids::converted_message_signature, m)?)?;
    m.add_function(wrap_pyfunction!(ids::signature_payload, m)?)?;
    m.add_function(wrap_pyfunction!(ids::sequence_digest, m)?)?;
    m.add_function(wrap_pyfunction!(ids::openviking_session_id, m)?)?;
    m.add_function(wrap_pyfunction!(ids::openviking_peer_id, m)?)?;
    m.add_function(wrap_pyfunction!(ids::cursor_fsyncs, m)?)?;
    m.add_function(wrap_pyfunction!(confidence::search_confidence, m)?)?;
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    Ok(())
}
