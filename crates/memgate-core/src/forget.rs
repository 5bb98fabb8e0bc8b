//! Erasure: what a `forget` removes and what it reports.
//!
//! Unlike retiring a fact (kept with its history), forgetting erases: the
//! rows, their history, their index entries and, where the backend owns the
//! file, every recoverable copy. A backend whose memory lives on a server
//! answers `Unsupported` (erasure is the server's job there), never a
//! look-alike success.

use serde::{Deserialize, Serialize};

/// What to erase, always inside the caller's user (and, but for `User`,
/// the caller's agent).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(tag = "target", rename_all = "snake_case")]
pub enum ForgetTarget {
    /// One explicit memory with every recorded version.
    Fact { id: String },
    /// Every captured turn of the caller's thread.
    Thread,
    /// Everything stored for the caller's (user, agent) scope.
    Scope,
    /// Everything stored for the caller's user, under every agent (a
    /// deletion request; the host's `clear_memory` without an agent).
    User,
}

impl ForgetTarget {
    pub fn as_str(&self) -> &'static str {
        match self {
            Self::Fact { .. } => "fact",
            Self::Thread => "thread",
            Self::Scope => "scope",
            Self::User => "user",
        }
    }
}

/// What a forget erased. Zero counts are a valid answer (nothing was there).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct ForgetReport {
    /// Explicit memories erased.
    pub facts: usize,
    /// Recorded versions of those memories erased.
    pub versions: usize,
    /// Captured turns erased.
    pub turns: usize,
}
