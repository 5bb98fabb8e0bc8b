//! Operator-facing notes, printed by `memgate doctor` and quoted in the
//! README, so the differences from a default memory are never a surprise.

/// Where memories are inspected, corrected and retired instead.
pub const MANAGEMENT_POINTER: &str =
    "inspect, correct or retire memories with PowerContext's own API or UI";

/// Passive capture does nothing with this backend.
pub const PASSIVE_CAPTURE_NOTE: &str = "powercontext: passive capture is an explicit no-op. \
     Finished turns and compaction heads are NOT sent to PowerContext and existing chats are \
     not uploaded; memory is saved only when the user explicitly asks and the model calls the \
     `powercontext.remember` tool.";

/// Management operations are not offered here.
pub const MANAGEMENT_NOTE: &str = "powercontext: search, fact list/get/revise/retire and \
     import/export are unsupported in memgate (HTTP 501); inspect, correct or retire memories \
     with PowerContext's own API (/v1/memory/*, on 1.4.x also /v1/atomic-memory/*) or its UI. \
     A retirement affects future recalls only.";

/// Settings are a per-process snapshot.
pub const ROTATION_NOTE: &str = "powercontext: POWERCONTEXT_DEERFLOW_* settings are read once \
     per process; rotating the token or changing the owner or Scope requires updating the \
     environment and restarting memgate (no hot reload; YAML overrides are refused).";

/// Every note, in the order `memgate doctor` prints them.
pub const fn doctor_notes() -> [&'static str; 3] {
    [PASSIVE_CAPTURE_NOTE, MANAGEMENT_NOTE, ROTATION_NOTE]
}
