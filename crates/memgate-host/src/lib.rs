//! # memgate-host — memory for an agent host's turn loop
//!
//! The host side of the memory contract, as a host like DeerFlow wires it,
//! for Rust agent loops. No model client and no server: the host keeps its
//! own loop and transcript and calls three surfaces over any
//! [`memgate_core::MemoryBackend`]:
//!
//! - [`injection`]: before each model call, [`RecallInjector::prepare_turn`]
//!   recalls once per thread, on the first turn, under a deadline, and puts
//!   the result in a hidden user-role `<memory>` message next to a date
//!   reminder (the id swap of [`reminder`]); later turns see frozen memory
//!   and only a date update after midnight;
//! - [`capture`]: [`CaptureHooks::after_turn`] (the full snapshot) and
//!   [`CaptureHooks::before_compaction`] (only the head being removed),
//!   both off the caller's task, with a handle to await;
//! - [`tools`]: the `remember` tool, offered when the backend can remember
//!   and dispatched with the host's [`ToolContext`] principal, never with
//!   identity from model arguments.
//!
//! [`MemoryHost`] bundles them with one assembled backend (from
//! `memgate_assembly::open_backend`, so gates, deadlines and the drain are
//! the service's) and one [`HostSettings`]
//! (`enabled`, `injection_enabled`, the tool switch, the recall deadline).
//! [`clock`] supplies the reminder date; tests use [`ManualClock`].
//!
//! Recall and capture run as tasks on a tokio runtime (the hooks can be
//! given one explicitly with [`CaptureHooks::with_runtime`]).
//!
//! ```no_run
//! # async fn turn(backend: std::sync::Arc<memgate_assembly::AssembledBackend>) {
//! use memgate_core::{Caller, Message};
//! use memgate_host::{HostSettings, MemoryHost, ToolContext};
//!
//! let host = MemoryHost::new(backend, HostSettings::default());
//! let caller = Caller::new("alice").with_thread("thread-1");
//! let mut transcript = vec![Message::human("Add a refund calculation.")];
//! let outcome = host.injector().prepare_turn(&caller, &mut transcript).await;
//! // ... call the model with `transcript` and `host.tools().specs()`;
//! // route its tool calls through `host.tools().dispatch(&ToolContext::new(caller.clone()), …)`.
//! let capture = host.capture().after_turn(&caller, &transcript);
//! # let _ = (outcome, capture);
//! # }
//! ```
//!
//! See `examples/agent_loop.rs` for a complete loop.

pub mod capture;
pub mod clock;
pub mod host;
pub mod injection;
pub mod reminder;
pub mod settings;
pub mod tools;

pub use capture::{CaptureHandle, CaptureHooks, CaptureOutcome, CaptureSkip};
pub use clock::{CalendarDate, Clock, ManualClock, SystemClock};
pub use host::MemoryHost;
pub use injection::{InjectionOutcome, MemoryStatus, RecallInjector, SkipReason};
pub use reminder::{new_message_id, IdSwap};
pub use settings::HostSettings;
pub use tools::{HostTools, SaveReport, ToolContext, TOOL_NAMESPACE};
