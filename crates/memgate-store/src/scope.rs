//! The (user, peer) scope every read and write carries.
//!
//! The peer is the caller's agent name; a caller without an agent (or with
//! an empty one) uses the default peer, stored as the empty string so that an
//! agent literally named `default` stays a scope of its own. Reads are exact:
//! recall, search, facts and export see only the caller's own scope, never
//! another peer's memories, not even the same user's default peer. This keeps
//! isolation a single rule, enforced in storage (every row carries its scope
//! id) and in the recall index (every term carries its scope tag).

use crate::schema::db_error;
use memgate_core::{Caller, Result};
use rusqlite::{params, Connection, OptionalExtension};

/// The scope key of a caller.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct ScopeKey {
    pub user: String,
    /// The agent name; empty for the default peer.
    pub peer: String,
}

impl ScopeKey {
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

    /// The scope's row id, if anything was ever stored for it.
    pub fn find(&self, conn: &Connection) -> Result<Option<i64>> {
        conn.prepare_cached("SELECT id FROM scopes WHERE user_id = ?1 AND peer = ?2")
            .and_then(|mut s| {
                s.query_row(params![self.user, self.peer], |r| r.get(0))
                    .optional()
            })
            .map_err(db_error)
    }

    /// The scope's row id, created on first write.
    pub fn ensure(&self, conn: &Connection) -> Result<i64> {
        if let Some(id) = self.find(conn)? {
            return Ok(id);
        }
        conn.prepare_cached("INSERT INTO scopes (user_id, peer) VALUES (?1, ?2)")
            .and_then(|mut s| s.execute(params![self.user, self.peer]))
            .map_err(db_error)?;
        Ok(conn.last_insert_rowid())
    }
}

impl crate::store::MemoryStore {
    /// Every scope that ever stored something, in creation order (what
    /// `memgate migrate` walks).
    pub fn scopes(&self) -> Result<Vec<ScopeKey>> {
        self.read(|conn| {
            conn.prepare_cached("SELECT user_id, peer FROM scopes ORDER BY id")
                .and_then(|mut s| {
                    s.query_map([], |r| {
                        Ok(ScopeKey {
                            user: r.get(0)?,
                            peer: r.get(1)?,
                        })
                    })?
                    .collect()
                })
                .map_err(db_error)
        })
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
