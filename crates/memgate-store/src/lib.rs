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
//! - [`LocalConfig`]: the `backend_config` keys and their rules.
//!
//! Recall reads exactly the caller's scope: (user, agent) with a missing
//! agent meaning the user's default peer; no other peer's memories are
//! mixed in. What recall computes without I/O (terms, fusion, the
//! re-ordering, the block, salience) is `memgate-recall`'s, shared with
//! `postgres`; benchmarks and the LoCoMo evaluation are `memgate-lab`'s.
//!
//! Modules, one job each: [`config`], [`schema`] (file recognition and
//! migrations), `db` (the connections: the writer lock, pooled readers,
//! checkpoints), `error` (SQLite errors as the contract's), [`scope`] (a
//! scope's row), [`index`] (the FTS5 recall index), [`facts`] (explicit
//! memories), [`forget`] (erasure and retention), [`capture`], [`ranking`]
//! (lexical candidates over FTS5), `bm25` (FTS5's BM25 with given document
//! frequencies, for MaxScore), [`first_turn`] (the block without a
//! query), [`vectors`] and [`hybrid`] (dense retrieval fused with the
//! lexical ranking), [`recall`] (the injected block and search),
//! [`transfer`] (export/import), [`store`] (every method of
//! [`MemoryStore`]), [`backend`].
//!
//! The imports point one way: `backend` uses the store; the store takes a
//! connection from `db` and hands it to the module of each concern; those
//! modules work on the connection (and the state passed to them) and never
//! import the store.

pub mod backend;
mod bm25;
pub mod capture;
pub mod config;
mod db;
pub mod distill;
mod error;
pub mod facts;
pub mod first_turn;
pub mod forget;
pub mod handoff;
pub mod hybrid;
pub mod index;
mod lengths;
mod quantized;
pub mod ranking;
pub mod recall;
pub mod schema;
pub mod scope;
pub mod store;
mod threads;
pub mod transfer;
pub mod vectors;

pub use backend::LocalBackend;
pub use capture::Streamed;
pub use config::{LocalConfig, ResolvedConfig};
pub use memgate_recall::{Origin, Ranked, ScopeKey};
pub use store::MemoryStore;
