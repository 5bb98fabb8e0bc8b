//! # memgate-store — the embedded default backend `local`
//!
//! Long-term memory in one SQLite file (`<storage_path>/local/memgate.sqlite3`,
//! WAL, bundled SQLite) with an FTS5 recall index. Every row and every index
//! term carries its (user, peer) scope; nothing crosses scopes.
//!
//! - [`MemoryStore`]: the synchronous store (one writer connection behind a
//!   mutex, pooled readers, durable commits, versioned migrations);
//! - [`LocalBackend`]: the async [`memgate_core::MemoryBackend`] over it,
//!   running SQLite work on tokio's blocking pool;
//! - [`LocalConfig`]: the `backend_config` keys and their rules;
//! - [`mod@bench`]: `memgate bench` (recall latency, capture throughput, RSS);
//! - [`forget_bench`]: what erasure costs at each level, and captures meanwhile;
//! - [`locomo`]: `memgate eval locomo` (recall quality on LoCoMo).
//!
//! Recall reads exactly the caller's scope: (user, agent) with a missing
//! agent meaning the user's default peer; no other peer's memories are
//! mixed in. Commands for the figures (release build):
//! `cargo run --release -p memgate-store --example bench` and
//! `cargo run --release -p memgate-store --example locomo -- FILE [--json]`.
//!
//! Modules, one job each: [`config`], [`schema`] (file recognition and
//! migrations), [`scope`], [`terms`] (folding and safe MATCH expressions),
//! [`index`], [`facts`] (explicit memories), [`forget`] (erasure and
//! retention), [`capture`], [`ranking`],
//! [`salience`] (what a turn says that should last), [`first_turn`] (the
//! block without a query), [`vectors`] and [`hybrid`] (dense retrieval fused
//! with the lexical ranking; the arithmetic in [`fusion`], shared with `postgres`), [`recall`] (the injected block and search), [`transfer`]
//! (export/import), [`backend`].

pub mod backend;
pub mod bench;
pub mod capture;
pub mod config;
pub mod facts;
pub mod first_turn;
pub mod forget;
pub mod forget_bench;
pub mod fusion;
pub mod hybrid;
pub mod index;
pub mod locomo;
mod quantized;
pub mod ranking;
pub mod recall;
pub mod salience;
pub mod schema;
pub mod scope;
pub mod store;
pub mod terms;
pub mod transfer;
pub mod vectors;

pub use backend::LocalBackend;
pub use capture::Streamed;
pub use config::{LocalConfig, ResolvedConfig, DEFAULT_INJECTION_QUERY};
pub use ranking::{Origin, Ranked};
pub use store::MemoryStore;
