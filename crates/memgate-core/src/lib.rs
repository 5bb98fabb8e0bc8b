//! # memgate-core — the memory contract
//!
//! Every memgate backend (the embedded `local` store, OpenViking, PowerContext,
//! `noop`) implements one trait, [`MemoryBackend`], over the types defined here.
//! Surfaces (CLI, HTTP, MCP, host middleware) only ever talk to that trait.
//!
//! The crate is deliberately light: no HTTP, no SQLite, no async runtime. It
//! holds what every backend and surface must agree on:
//!
//! - [`identity`]: the caller (user, agent, thread) as the host resolved it,
//!   with the host's `default` fallback kept observable;
//! - [`message`]: the transcript messages hosts send, faithful to LangChain's
//!   shape and tolerant of unknown fields;
//! - [`signature`]: stable content hashes of messages, sequence digests
//!   and head fingerprints (the local store's de-duplication, and what a
//!   surface reading a transcript against a backend's cursor hands over:
//!   [`KnownHead`]);
//! - [`capture`], [`recall`], [`remember`], [`facts`], [`forget`]: request
//!   and result types of each operation;
//! - [`handoff`]: a running task handed to another thread, agent or model
//! - [`handoff_desk`]: handoffs held in memory for a bounded lifetime, per owner
//!   (draft, prepared, acknowledged, committed on request);
//! - [`redaction`]: secrets replaced by typed placeholders before anything
//!   is stored or sent (rules in `memgate-redact`);
//! - [`backend`]: the trait itself and its capability flags;
//! - [`distill`]: the distillation queue a store offers its background
//!   worker (jobs, the model's operations, parking);
//! - [`intake`]: a capture begun before its transcript is read (the
//!   local store's streamed capture, OpenViking's capture read against its
//!   cursor), part of the trait so no surface needs a side door;
//! - [`error`]: the error family that mirrors the host contract;
//! - [`policy`]: read, write and start-up failure policies;
//! - [`budget`]: character and UTF-8 byte budgets that never cut a character;
//! - [`setup`]: what the host hands a backend at construction;
//! - [`tool`]: the explicit-save `remember` model tool for any backend;
//! - [`noop`]: the backend that stores nothing;
//! - [`work`]: in-flight work and its bounded drain.

pub mod backend;
pub mod budget;
pub mod canonical_json;
pub mod capture;
pub mod distill;
pub mod error;
pub mod facts;
pub mod fields;
pub mod forget;
pub mod handoff;
pub mod handoff_desk;
pub mod identity;
pub mod intake;
pub mod message;
pub mod noop;
pub mod policy;
pub mod recall;
pub mod redaction;
pub mod remember;
pub mod secret;
pub mod setup;
pub mod signature;
pub mod threads;
pub mod time;
pub mod tool;
pub mod work;

pub use backend::{
    Capabilities, Diagnostic, Figure, FigureKind, Holdings, MemoryBackend, StoredScope, WarmStatus,
};
pub use capture::{
    CaptureCut, CaptureKind, CaptureReport, CaptureRequest, KeepHiddenHook, KnownHead,
};
pub use error::{MemoryError, Result, WireError};
pub use facts::{
    ChangedBy, Fact, FactOrigin, FactPatch, FactState, ImportReport, MemoryExport, SearchHit,
    SearchQuery,
};
pub use forget::{ForgetReport, ForgetTarget};
pub use handoff::{
    Acknowledgement, CommitOutcome, Continuation, Handoff, HandoffContent, HandoffStage,
};
pub use identity::{Caller, UserId, DEFAULT_USER_ID};
pub use intake::{CaptureStart, CursorCapture, CursorOutcome, Intake};
pub use message::{Content, Message, Role, RoleKind, ToolCall};
pub use policy::{FailurePolicy, ReadPolicy, StartupPolicy, WritePolicy};
pub use recall::{Recall, RecallRequest, RecalledItem};
pub use redaction::Redactor;
pub use remember::{Citation, RememberOutcome, RememberRequest};
pub use secret::Secret;
pub use setup::{BackendContext, MemoryMode};
pub use threads::{PageRequest, ThreadList, ThreadSummary, ThreadTurn, ThreadTurns};
