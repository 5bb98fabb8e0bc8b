//! # memgate-powercontext — the PowerContext backend and the `remember` tool
//!
//! `manager_class: powercontext` binds one authenticated host user to one
//! existing PowerContext Scope:
//!
//! - **recall** asks `POST /v1/context/prepare` for bounded, cited context
//!   for the user's latest input and returns it unchanged, or nothing (fail
//!   open, within a total deadline);
//! - **remember** (also the `powercontext.remember` model tool) saves one
//!   explicitly requested memory and reports the exact outcome — stored,
//!   already present, failed, or unknown — without ever retrying the write;
//! - **capture** is an explicit no-op (see [`notes::PASSIVE_CAPTURE_NOTE`])
//!   unless `backend_config.source_capture.enabled` turns on Source capture
//!   on a durable outbox ([`sources`], [`source_outbox`]);
//! - **handoff** (prepare, inspect, correct, finalize, continue,
//!   acknowledge, commit on request): the draft held client-side, each
//!   later step through PowerContext's own work/handoff routes ([`handoff`]);
//! - search, fact management and import/export are Unsupported: they belong
//!   to PowerContext's own API and UI.
//!
//! The binding comes only from the `POWERCONTEXT_DEERFLOW_*` environment
//! variables ([`settings`]), validated once into a snapshot that the backend
//! and the tool share. Both PowerContext generations are served: 0.0.2 and
//! 1.4.x ([`generation`]).

pub mod backend;
mod diagnostic;
pub mod generation;
pub mod handoff;
pub mod notes;
mod owner;
mod prepared;
pub mod recall;
mod remember;
pub mod settings;
pub mod source_outbox;
pub mod sources;
pub mod tool;
mod transport;

pub use backend::{PowerContextBackend, MANAGER_CLASS};
pub use generation::{ServerGeneration, ServerInfo};
pub use notes::{
    doctor_notes, MANAGEMENT_NOTE, NO_QUERY_NOTE, NO_QUERY_WARNING, PASSIVE_CAPTURE_NOTE,
    ROTATION_NOTE,
};
pub use settings::{Settings, SettingsLoader};
pub use tool::{RememberTool, ToolResult, ToolSpec};
