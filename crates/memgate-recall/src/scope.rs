//! The (user, peer) scope every read and write carries.
//!
//! The peer is the caller's agent name; a caller without an agent (or with
//! an empty one) uses the default peer, stored as the empty string so that an
//! agent literally named `default` stays a scope of its own. Reads are exact:
//! recall, search, facts and export see only the caller's own scope, never
//! another peer's memories, not even the same user's default peer. This keeps
//! isolation a single rule, enforced in storage (every row carries its scope
//! id) and in the recall index (every term carries its scope tag).

use memgate_core::Caller;

/// A caller's scope: the user and the peer (agent) its memories belong to.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct ScopeKey {
    pub user: String,
    /// The agent name; empty for the default peer.
    pub peer: String,
}

impl ScopeKey {
    /// The scope a caller reads and writes.
    pub fn of(caller: &Caller) -> Self {
        Self {
            user: caller.user.as_str().to_owned(),
            peer: caller.agent.clone().unwrap_or_default(),
        }
    }

    /// The caller this scope belongs to (the default peer has no agent).
    pub fn caller(&self) -> Caller {
        let caller = Caller::new(self.user.as_str());
        if self.peer.is_empty() {
            caller
        } else {
            caller.with_agent(self.peer.as_str())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn agent_default_is_not_the_default_peer() {
        let none = ScopeKey::of(&Caller::new("u"));
        let empty = ScopeKey::of(&Caller::new("u").with_agent(""));
        let named = ScopeKey::of(&Caller::new("u").with_agent("default"));
        assert_eq!(none, empty);
        assert_ne!(none, named);
        assert_eq!(none.peer, "");
    }
}
