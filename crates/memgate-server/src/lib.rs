//! # memgate-server — the HTTP surface
//!
//! A JSON API over any [`memgate_core::MemoryBackend`]: recall, capture,
//! remember, search, facts, export/import, plus `GET /health`,
//! `GET /metrics` (Prometheus; operation names, outcomes and latencies only,
//! never user text or secrets) and `GET /openapi.json` (generated from the
//! route table and the contract types' JSON Schemas).
//!
//! Every operation is a `POST` whose JSON body carries the caller
//! (`{"caller":{"user":…,"agent":…,"thread":…}}`), so identity never travels
//! in URLs or access logs. Errors are `{"error":{"code","message"}}`;
//! unsupported operations are 501. A bearer token, when configured, guards
//! everything but `/health`; without one the server only binds loopback.
//!
//! [`mcp`] is the MCP surface (rmcp): `/mcp` here, and stdio for
//! `memgate mcp`. [`client::HttpBackend`] is the HTTP API seen from the
//! other side: a `MemoryBackend` that talks to a running `memgate serve`.
//! [`ui`] is the memory browser at `/ui`: server-rendered pages over the
//! same assembled backend.

pub mod api;
pub mod auth;
pub mod client;
pub mod error;
pub mod mcp;
pub mod mcp_handoff;
pub mod open_requests;
pub mod openapi;
pub mod routes;
pub mod ui;

pub use routes::{router, ServerState, DEFAULT_BODY_READ_TIMEOUT};
