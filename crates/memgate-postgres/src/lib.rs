//! # memgate-postgres — the `postgres` backend
//!
//! The `local` store's contract on PostgreSQL, so that any number of
//! stateless `memgate serve` replicas (or Gateway processes) share one
//! memory. Same behaviour as `local`, by construction where possible: the
//! term folding, storable-turn rules, import validation, recall block,
//! first-turn block and neighbour smoothing are `memgate-recall`'s, the
//! functions `local` uses too; the shared conformance suite
//! (`memgate-conformance`) runs against both.
//!
//! What PostgreSQL does here: unique constraints with `ON CONFLICT` make
//! capture and remember idempotent across replicas; full text is its own
//! text search (`tsvector`, GIN with `btree_gin`, BM25 computed from each
//! walked row's `tsvector`: [`plan`]); migrations run
//! under an advisory lock; the server enforces the statement timeout.
//!
//! Dense vectors (hybrid recall) are opt-in: with an embedder configured,
//! [`vectors`] keeps them in pgvector and recall fuses them with the full
//! text exactly as `local` does (`memgate_recall::fusion`).
//!
//! Modules, one job each: [`config`], [`pool`] (connections and error
//! mapping), [`schema`] (recognition and migrations), [`terms`], [`facts`],
//! [`capture`], [`plan`] (which query terms are worth scoring), [`recall`],
//! [`first_turn`] (the block without a query), [`excerpts`] (each turn's
//! excerpt for it, kept at capture and computed again when its rules change),
//! [`vectors`] (pgvector: storage, indexer, nearest items), [`hnsw`] (the
//! approximate index per model, built in the background),
//! [`replica`] (reads from a streaming replica, read-your-writes),
//! [`transfer`], [`forget`] (erasure), [`retention`] (the sweep of turns
//! past `max_turn_age_days`), [`distill`] (the distillation
//! queue and the transaction that applies a job), [`handoff`] (handoffs in
//! flight), [`backend`].

pub mod backend;
pub mod capture;
pub mod config;
pub mod distill;
pub mod excerpts;
pub mod facts;
pub mod first_turn;
pub mod forget;
pub mod handoff;
pub mod hnsw;
pub mod plan;
pub mod pool;
pub mod recall;
pub mod replica;
pub mod retention;
pub mod schema;
pub mod terms;
mod threads;
pub mod transfer;
pub mod vectors;

pub use backend::{DoctorInfo, PoolState, PostgresBackend};
pub use config::{PostgresConfig, ReplicaConfig, VectorIndex};
pub use replica::ReplicaState;
pub use schema::SCHEMA_VERSION;
