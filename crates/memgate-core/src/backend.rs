//! The backend trait every memory store implements.
//!
//! Required: `recall` and `capture`. Everything else is optional; the
//! default bodies answer [`MemoryError::Unsupported`] (HTTP 501), never a
//! look-alike empty result. A capture's fast paths are operations too
//! ([`MemoryBackend::begin_capture`], [`crate::intake`]), so a surface
//! that uses one goes through the same wrapper as every other call. [`Capabilities`] lets surfaces hide what a
//! backend cannot do (an MCP tool that is not listed, a 501 route).

use crate::capture::{CaptureReport, CaptureRequest};
use crate::facts::{Fact, FactPatch, ImportReport, MemoryExport, SearchHit, SearchQuery};
use crate::forget::{ForgetReport, ForgetTarget};
use crate::handoff::{Acknowledgement, CommitOutcome, Continuation, Handoff, HandoffContent};
use crate::identity::Caller;
use crate::intake::{CaptureStart, Intake};
use crate::recall::{Recall, RecallRequest};
use crate::remember::{RememberOutcome, RememberRequest};
use crate::threads::{PageRequest, ThreadList, ThreadTurns};
use crate::{FailurePolicy, MemoryError, Result};
use async_trait::async_trait;
use serde::{Deserialize, Serialize};
use std::sync::Arc;
use std::time::Duration;

/// What a backend can do, for surfaces that list operations.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct Capabilities {
    /// Recall returns stored memory.
    pub recall: bool,
    /// Passive capture stores turns (false for PowerContext: an explicit no-op).
    pub capture: bool,
    pub remember: bool,
    pub search: bool,
    /// List, get, revise and retire explicit memories.
    pub facts: bool,
    pub import_export: bool,
}

/// A (user, agent) scope a store holds memory under: who the memory
/// browser can show without being told a name.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct StoredScope {
    pub user: String,
    /// `None`: the default agent.
    pub agent: Option<String>,
}

/// What one scope holds, counted by the store instead of read whole (the
/// host's memory page shows it on every visit).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct Holdings {
    /// Captured turns.
    pub turns: u64,
    /// Threads with at least one captured turn.
    pub threads: u64,
    /// RFC 3339, the newest turn's capture.
    pub last_captured_at: Option<String>,
    /// RFC 3339, the newest change of anything held: a capture, or a
    /// fact's save, revision or retirement.
    pub last_changed_at: Option<String>,
}

impl Holdings {
    /// Counted from an export, for a backend without its own count.
    pub fn of_export(export: &crate::MemoryExport) -> Self {
        let threads: std::collections::HashSet<&str> =
            export.turns.iter().map(|t| t.thread.as_str()).collect();
        let last_captured_at = export
            .turns
            .iter()
            .filter_map(|t| t.captured_at.clone())
            .max();
        let last_fact_change = export.facts.iter().map(|f| f.updated_at.clone()).max();
        let count = |n: usize| i64::try_from(n).unwrap_or(i64::MAX);
        Self::counted(
            count(export.turns.len()),
            count(threads.len()),
            last_captured_at,
            last_fact_change,
        )
    }

    /// From a store's counts; the last change is the later of the newest
    /// capture and the newest fact change.
    pub fn counted(
        turns: i64,
        threads: i64,
        last_captured_at: Option<String>,
        last_fact_change: Option<String>,
    ) -> Self {
        let last_changed_at = last_captured_at.clone().max(last_fact_change);
        Self {
            turns: u64::try_from(turns).unwrap_or(0),
            threads: u64::try_from(threads).unwrap_or(0),
            last_captured_at,
            last_changed_at,
        }
    }
}

/// The result of a start-up health check.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(tag = "status", rename_all = "snake_case")]
pub enum WarmStatus {
    /// The backend is reachable and ready.
    Ready,
    /// The check failed and the start-up policy is `warn`: running degraded.
    Degraded { reason: String },
    /// Nothing to check (embedded or no-op backends).
    NothingToWarm,
}

/// One line `memgate doctor` prints about a backend's own state beyond its
/// health check (the identity a key acts as, server and schema versions,
/// pool state). Never carries a secret.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Diagnostic {
    /// Short label of what was checked (`identity`, `schema`, `pool`).
    pub check: String,
    /// False when the operator should act on it; `doctor` then exits 1.
    pub healthy: bool,
    pub detail: String,
}

impl Diagnostic {
    pub fn ok(check: impl Into<String>, detail: impl Into<String>) -> Self {
        Self {
            check: check.into(),
            healthy: true,
            detail: detail.into(),
        }
    }

    pub fn problem(check: impl Into<String>, detail: impl Into<String>) -> Self {
        Self {
            check: check.into(),
            healthy: false,
            detail: detail.into(),
        }
    }
}

/// Whether a [`Figure`] only grows (since start) or goes up and down.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FigureKind {
    Counter,
    Gauge,
}

/// One number a backend reports about its own state (queue depth,
/// deliveries), shown by `/metrics` and `doctor`. Name and help are chosen
/// by the backend's code, never built from user text, so nothing from a
/// message or a secret can reach them.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Figure {
    /// Prometheus metric name (`memgate_outbox_depth`).
    pub name: String,
    pub kind: FigureKind,
    pub help: String,
    pub value: u64,
}

impl Figure {
    pub fn gauge(name: impl Into<String>, help: impl Into<String>, value: u64) -> Self {
        Self {
            name: name.into(),
            kind: FigureKind::Gauge,
            help: help.into(),
            value,
        }
    }

    pub fn counter(name: impl Into<String>, help: impl Into<String>, value: u64) -> Self {
        Self {
            name: name.into(),
            kind: FigureKind::Counter,
            help: help.into(),
            value,
        }
    }

    /// The Prometheus text exposition of this one figure.
    pub fn prometheus(&self) -> String {
        let kind = match self.kind {
            FigureKind::Counter => "counter",
            FigureKind::Gauge => "gauge",
        };
        format!(
            "# HELP {name} {help}\n# TYPE {name} {kind}\n{name} {value}\n",
            name = self.name,
            help = self.help,
            value = self.value
        )
    }
}

#[async_trait]
pub trait MemoryBackend: Send + Sync + 'static {
    /// The backend's `manager_class` name (`local`, `openviking`, …).
    fn name(&self) -> &str;

    fn capabilities(&self) -> Capabilities;

    /// How this backend's configuration treats failed reads and writes
    /// (OpenViking's `failure_policy`; recall fails open elsewhere).
    fn failure_policy(&self) -> FailurePolicy {
        FailurePolicy::default()
    }

    /// A bounded, ready-to-inject block for the caller; empty when there is
    /// nothing, when the caller may not read, or (fail-open) on failure.
    async fn recall(&self, request: &RecallRequest) -> Result<Recall>;

    /// Takes a transcript snapshot or a compaction head; idempotent.
    async fn capture(&self, request: &CaptureRequest) -> Result<CaptureReport>;

    /// Begins a capture whose transcript the surface has yet to read (from
    /// its own representation), and says how to hand it over
    /// ([`Intake`]). Called on the caller's thread before any message is
    /// read; takes only what must come before the reading (OpenViking: the
    /// session's lock, if it is free, and its cursor). The outcome of the
    /// capture is the one [`capture`](Self::capture) of the same transcript
    /// gives: same messages stored or sent, same report.
    ///
    /// The default has no fast path: the transcript is read whole and
    /// captured by [`capture`](Self::capture) ([`Intake::whole`]).
    fn begin_capture(self: Arc<Self>, start: CaptureStart) -> Result<Intake> {
        Ok(Intake::whole(self, start))
    }

    /// Stores one explicit memory and reports the exact outcome.
    async fn remember(
        &self,
        caller: &Caller,
        request: &RememberRequest,
    ) -> Result<RememberOutcome> {
        let _ = (caller, request);
        Err(self.unsupported("remember"))
    }

    async fn search(&self, caller: &Caller, query: &SearchQuery) -> Result<Vec<SearchHit>> {
        let _ = (caller, query);
        Err(self.unsupported("search"))
    }

    async fn list_facts(&self, caller: &Caller, include_retired: bool) -> Result<Vec<Fact>> {
        let _ = (caller, include_retired);
        Err(self.unsupported("list_facts"))
    }

    async fn get_fact(&self, caller: &Caller, id: &str) -> Result<Fact> {
        let _ = (caller, id);
        Err(self.unsupported("get_fact"))
    }

    /// Revises a fact, keeping its history; returns the new version.
    async fn revise_fact(&self, caller: &Caller, id: &str, patch: &FactPatch) -> Result<Fact> {
        let _ = (caller, id, patch);
        Err(self.unsupported("revise_fact"))
    }

    /// Retires a fact: no longer recalled, but not erased.
    async fn retire_fact(&self, caller: &Caller, id: &str) -> Result<Fact> {
        let _ = (caller, id);
        Err(self.unsupported("retire_fact"))
    }

    async fn export(&self, caller: &Caller) -> Result<MemoryExport> {
        let _ = caller;
        Err(self.unsupported("export"))
    }

    /// Merges an export into the caller's scope; never duplicates.
    async fn import(&self, caller: &Caller, data: &MemoryExport) -> Result<ImportReport> {
        let _ = (caller, data);
        Err(self.unsupported("import"))
    }

    /// Erases `target` in the caller's scope (rows, history, index and any
    /// recoverable copy the backend owns). Remote backends leave erasure to
    /// their server and answer `Unsupported`.
    async fn forget(&self, caller: &Caller, target: &ForgetTarget) -> Result<ForgetReport> {
        let _ = (caller, target);
        Err(self.unsupported("forget"))
    }

    /// The (user, agent) scopes the store holds, ordered by user then agent,
    /// at most `limit`. Backends whose memory lives on a server answer
    /// `Unsupported`: listing every user is the server's business.
    async fn stored_scopes(&self, limit: usize) -> Result<Vec<StoredScope>> {
        let _ = limit;
        Err(self.unsupported("stored_scopes"))
    }

    /// Every recorded version of one of the caller's facts, oldest first,
    /// each saying when and by whom it changed.
    async fn fact_history(&self, caller: &Caller, id: &str) -> Result<Vec<Fact>> {
        let _ = (caller, id);
        Err(self.unsupported("fact_history"))
    }

    /// One page of the caller's captured threads (by name), with counts and
    /// times: the browser's thread list without reading every turn.
    async fn list_threads(&self, caller: &Caller, page: PageRequest) -> Result<ThreadList> {
        let _ = (caller, page);
        Err(self.unsupported("list_threads"))
    }

    /// One page of a captured thread's turns, in conversation order. A
    /// thread with no turns is an empty page, not an error.
    async fn read_thread(
        &self,
        caller: &Caller,
        thread: &str,
        page: PageRequest,
    ) -> Result<ThreadTurns> {
        let _ = (caller, thread, page);
        Err(self.unsupported("read_thread"))
    }

    /// What the caller's scope holds, counted without reading it all.
    /// Optional: a caller may fall back to counting an export.
    async fn holdings(&self, caller: &Caller) -> Result<Holdings> {
        let _ = caller;
        Err(self.unsupported("holdings"))
    }

    /// Prepares a handoff draft of the caller's running task. Held
    /// temporarily by the backend; never memory by itself.
    async fn prepare_handoff(&self, caller: &Caller, content: &HandoffContent) -> Result<Handoff> {
        let _ = (caller, content);
        Err(self.unsupported("handoff_prepare"))
    }

    /// One of the caller's own handoffs (another owner's is not found).
    async fn get_handoff(&self, caller: &Caller, id: &str) -> Result<Handoff> {
        let _ = (caller, id);
        Err(self.unsupported("handoff_get"))
    }

    /// Replaces a draft's content; only a draft can be corrected.
    async fn correct_handoff(
        &self,
        caller: &Caller,
        id: &str,
        content: &HandoffContent,
    ) -> Result<Handoff> {
        let _ = (caller, id, content);
        Err(self.unsupported("handoff_correct"))
    }

    /// Turns a draft into the prepared handoff a receiver continues from.
    async fn finalize_handoff(&self, caller: &Caller, id: &str) -> Result<Handoff> {
        let _ = (caller, id);
        Err(self.unsupported("handoff_finalize"))
    }

    /// What a receiving task (the caller's thread) continues from: the
    /// prepared handoff and its untrusted first-turn block.
    async fn continue_handoff(&self, caller: &Caller, id: &str) -> Result<Continuation> {
        let _ = (caller, id);
        Err(self.unsupported("handoff_continue"))
    }

    /// Records the receiver's answer to a prepared handoff.
    async fn acknowledge_handoff(
        &self,
        caller: &Caller,
        id: &str,
        acknowledgement: &Acknowledgement,
    ) -> Result<Handoff> {
        let _ = (caller, id, acknowledgement);
        Err(self.unsupported("handoff_acknowledge"))
    }

    /// Stores the handoff as a durable milestone memory; only on an
    /// explicit request, and never retried blindly.
    async fn commit_handoff(&self, caller: &Caller, id: &str) -> Result<CommitOutcome> {
        let _ = (caller, id);
        Err(self.unsupported("handoff_commit"))
    }

    /// Start-up health check, under the backend's start-up policy.
    async fn warm(&self) -> Result<WarmStatus> {
        Ok(WarmStatus::NothingToWarm)
    }

    /// What `memgate doctor` shows about this backend beyond [`warm`]
    /// (nothing by default).
    ///
    /// [`warm`]: MemoryBackend::warm
    async fn diagnose(&self) -> Vec<Diagnostic> {
        Vec::new()
    }

    /// The backend's own figures for `/metrics` and `doctor` (an outbox's
    /// depth and deliveries); none by default. Cheap and local: no request
    /// to a server.
    fn figures(&self) -> Vec<Figure> {
        Vec::new()
    }

    /// Gives back memory held only to be fast under load (the caches of
    /// idle connections); called when a busy spell has ended. Nothing by
    /// default. Cheap and local, never a request to a server.
    fn release_idle_memory(&self) {}

    /// Stops accepting new work, waits for in-flight work up to `timeout`,
    /// then releases resources. True when everything drained in time.
    async fn shutdown(&self, timeout: Duration) -> bool {
        let _ = timeout;
        true
    }

    /// The error for an operation this backend does not implement.
    fn unsupported(&self, operation: &str) -> MemoryError {
        MemoryError::unsupported(operation, self.name())
    }
}
