//! Operator-facing notes, printed by `memgate doctor` and quoted in the
//! README, so the differences from a default memory are never a surprise.

/// Where memories are inspected, corrected and retired instead.
pub const MANAGEMENT_POINTER: &str =
    "inspect, correct or retire memories with PowerContext's own API or UI";

/// Passive capture does nothing with this backend.
pub const PASSIVE_CAPTURE_NOTE: &str = "powercontext: passive capture is an explicit no-op \
     by default. Finished turns and compaction heads are NOT sent to PowerContext and existing \
     chats are not uploaded; memory is saved only when the user explicitly asks and the model \
     calls the `powercontext.remember` tool. The operator can opt in to Source capture \
     (`backend_config.source_capture.enabled`); the `capture` line says which is in effect.";

/// Management operations are not offered here.
pub const MANAGEMENT_NOTE: &str = "powercontext: search, fact list/get/revise/retire and \
     import/export are unsupported in memgate (HTTP 501); inspect, correct or retire memories \
     with PowerContext's own API (/v1/memory/*, on 1.4.x also /v1/atomic-memory/*) or its UI. \
     A retirement affects future recalls only.";

/// Settings are a per-process snapshot.
pub const ROTATION_NOTE: &str = "powercontext: POWERCONTEXT_DEERFLOW_* settings are read once \
     per process; rotating the token or changing the owner or Scope requires updating the \
     environment and restarting memgate (no hot reload; YAML overrides are refused).";

/// Recall needs a query; some hosts never pass one.
pub const NO_QUERY_NOTE: &str = "powercontext: recall sends the host's query (its latest user \
     input); a recall without a query returns nothing and sends no request. Hosts whose \
     automatic caller passes no query (DeerFlow f1f4af99: `_get_memory_context` calls \
     get_context(user_id, agent_name) only) therefore never recall, only `remember` works. To \
     recall there, opt in with POWERCONTEXT_DEERFLOW_PROFILE_QUERY=<fixed profile query>: every \
     recall without a host query then asks for that text instead (the same memories each turn, \
     not ones matched to the conversation). A host that passes a query is unaffected.";

/// Logged once per backend, at the first recall that had no query to send.
pub const NO_QUERY_WARNING: &str = "powercontext recall: the host passed no query, so nothing \
     was recalled and no request was sent (shown once). If this host never forwards the latest \
     user input as the query (DeerFlow f1f4af99 does not), recall stays empty for every \
     conversation; set POWERCONTEXT_DEERFLOW_PROFILE_QUERY to recall with a fixed profile \
     query instead, or leave it unset to keep memory write-only (`remember`).";

/// Every note, in the order `memgate doctor` prints them.
pub const fn doctor_notes() -> [&'static str; 4] {
    [
        PASSIVE_CAPTURE_NOTE,
        NO_QUERY_NOTE,
        MANAGEMENT_NOTE,
        ROTATION_NOTE,
    ]
}
