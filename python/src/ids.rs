//! The host contract's identities and hashes, exposed so Python can check
//! them against the spec's test vectors on LangChain objects: message
//! signatures, sequence digests, OpenViking session and peer ids (the
//! assembly's [`memgate_assembly::identities`]); and the one figure the
//! capture-cost harness reads besides its clocks, the cursor's fsyncs.

use crate::{convert, errors};
use memgate_assembly::identities::openviking;
use pyo3::prelude::*;

/// SHA-256 hex of a message's canonical payload (DeerFlow's `_message_signature`),
/// read in place the way a capture signs the head its cursor holds.
#[pyfunction]
pub fn message_signature(message: &Bound<'_, PyAny>) -> PyResult<String> {
    convert::signature(message)
}

/// The same signature through a converted `Message` (the way a capture
/// signs the messages it sends): the parity tests hold both forms to
/// DeerFlow's.
#[pyfunction]
pub fn converted_message_signature(message: &Bound<'_, PyAny>) -> PyResult<String> {
    Ok(memgate_core::signature::message_signature(
        &convert::message(message)?,
    ))
}

/// The canonical JSON a signature hashes.
#[pyfunction]
pub fn signature_payload(message: &Bound<'_, PyAny>) -> PyResult<String> {
    Ok(memgate_core::signature::signature_payload(
        &convert::message(message)?,
    ))
}

/// SHA-256 over length-prefixed signatures (the cursor's prefix digest).
#[pyfunction]
pub fn sequence_digest(signatures: Vec<String>) -> String {
    memgate_core::signature::sequence_digest(&signatures)
}

/// The OpenViking session id of one thread of one peer of the owner.
#[pyfunction]
pub fn openviking_session_id(owner_user_id: &str, peer_id: &str, thread_id: &str) -> String {
    openviking::session_id(owner_user_id, peer_id, thread_id)
}

/// The OpenViking peer of an agent (`None` = the default agent).
#[pyfunction]
#[pyo3(signature = (agent_name, default_peer_id="deerflow"))]
pub fn openviking_peer_id(agent_name: Option<&str>, default_peer_id: &str) -> PyResult<String> {
    openviking::canonical_peer_id(agent_name, default_peer_id).map_err(errors::to_py)
}

/// fsyncs made by OpenViking cursor saves in this process so far: the
/// capture-cost harness (`python/bench/capture_cost.py`) counts them per
/// capture, so a change that adds one shows in its table.
#[pyfunction]
pub fn cursor_fsyncs() -> u64 {
    openviking::cursor_fsync_count()
}
