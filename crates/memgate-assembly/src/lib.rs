//! # memgate-assembly — the one place a backend is built and wrapped
//!
//! Every surface (the HTTP service, MCP over stdio and `/mcp`, the CLI with
//! or without `--url`, `memgate-host` and the Python extension) gets its
//! backend from here, so each of them has the same behaviour at the seams:
//!
//! - [`config`]: `config.yaml` (the `memory:` section shaped like the host's,
//!   plus `server:` and `mcp:`), strict about unknown keys;
//! - [`factory`]: the one factory naming every backend;
//! - [`identities`]: the backend ids a host computes too (OpenViking's
//!   session and peer ids), for surfaces that show them;
//! - [`assembled`]: the wrapper every call goes through — the
//!   `enabled`/`injection_enabled` gates, one total deadline per operation
//!   ([`deadline`]), in-flight work with a bounded drain
//!   ([`memgate_core::work`]) and metrics ([`metrics`]).
//!
//! The crate carries no HTTP server, CLI or MCP code, so the Python wheel can
//! depend on it.

pub mod assembled;
pub mod config;
pub mod deadline;
pub mod factory;
pub mod identities;
pub mod metrics;

pub use assembled::{AssembledBackend, Gates};
pub use config::{Config, ConfigSource, ManagerClass, McpConfig, MemoryConfig, ServerConfig};
pub use deadline::{Deadlines, Operation};
pub use factory::{assemble, open_backend, BackendSetup};
pub use memgate_core::work::{DrainReport, Ticket, WorkTracker};
pub use metrics::Metrics;
