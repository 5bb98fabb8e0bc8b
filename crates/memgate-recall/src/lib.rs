//! # memgate-recall — recall as pure functions, for the stores memgate owns
//!
//! `local` (SQLite) and `postgres` read rows their own way and then compute
//! everything else alike with this crate, so they keep, rank and show the
//! same things. Nothing here touches a file, a socket or a clock beyond
//! `now` for a missing timestamp.
//!
//! - [`terms`]: how text and queries become index terms;
//! - [`ranked`]: a ranked entry, the candidate pool, neighbour smoothing;
//! - [`maxscore`]: exact top-k BM25 that walks only the rare terms' postings;
//! - [`fusion`]: the lexical and dense lists combined;
//! - [`rerank`]: the re-ordering recall applies to the fused pool;
//! - [`block`]: the injected block, within its character budget;
//! - [`first_turn`]: the block without a query (what a new conversation
//!   starts with), its pick and layout;
//! - [`salience`]: what a turn says that should outlive its conversation
//!   (the first-turn block's excerpts);
//! - [`vectors`]: the vector key, the embedded text of a turn, counters;
//! - [`turns`]: what a message keeps as a turn, what an import may hold;
//! - [`citation`], [`scope`]: how entries and scopes are named;
//! - [`settings`]: the recall keys of `backend_config`.

pub mod block;
pub mod citation;
pub mod first_turn;
pub mod fusion;
pub mod maxscore;
pub mod ranked;
pub mod rerank;
pub mod salience;
pub mod scope;
pub mod settings;
pub mod terms;
pub mod turns;
pub mod vectors;

#[cfg(test)]
mod test_support;

pub use ranked::{Origin, Ranked};
pub use rerank::Rerank;
pub use scope::ScopeKey;
pub use settings::RecallSettings;
