//! What a surface offers its host about one backend besides the contract:
//! the ids the host computes on its own side and must agree on, and the
//! cursor's fsync count the capture-cost harness reads. Offered here, by
//! the one crate that names every backend, so a surface (the Python
//! extension) depends on no backend crate.

/// OpenViking: the session id of one thread of one peer of the owner, the
/// peer an agent maps to (DeerFlow's ids, checked against the spec's test
/// vectors by the Python package), and the fsyncs cursor saves made in
/// this process (`python/bench/capture_cost.py` counts them per capture).
pub mod openviking {
    pub use memgate_openviking::cursor::fsync_count as cursor_fsync_count;
    pub use memgate_openviking::scope::{canonical_peer_id, session_id};
}
