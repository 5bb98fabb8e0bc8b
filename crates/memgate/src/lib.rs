//! # memgate — long-term memory for AI agent hosts
//!
//! This crate ties the workspace together: it loads `config.yaml`
//! ([`config`]), builds the configured backend ([`factory`]) and provides
//! the `memgate` command (CLI, `serve`, `doctor`, `bench`, `eval`).
//!
//! The memory contract lives in `memgate-core`; the backends in
//! `memgate-store` (`local`, the default), `memgate-openviking` and
//! `memgate-powercontext`; the HTTP surface in `memgate-server`.

pub mod config;
pub mod factory;
pub mod migrate;

pub use config::{Config, ConfigSource, ManagerClass, MemoryConfig, ServerConfig};
pub use factory::{open_backend, BackendSetup};
