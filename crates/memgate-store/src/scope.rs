//! Where a (user, peer) scope ([`ScopeKey`]) lives in the SQLite file: its
//! row id, found or made, its write generation, and the list of scopes.

use crate::error::db_error;
use memgate_core::Result;
use memgate_recall::scope::ScopeKey;
use rusqlite::{params, Connection, OptionalExtension};

/// A scope key's row in the `scopes` table.
pub trait ScopeRow {
    /// The scope's row id, if the scope holds anything.
    fn find(&self, conn: &Connection) -> Result<Option<i64>>;
    /// The scope's row id, made when missing.
    fn ensure(&self, conn: &Connection) -> Result<i64>;
}

impl ScopeRow for ScopeKey {
    fn find(&self, conn: &Connection) -> Result<Option<i64>> {
        conn.prepare_cached("SELECT id FROM scopes WHERE user_id = ?1 AND peer = ?2")
            .and_then(|mut s| {
                s.query_row(params![self.user, self.peer], |r| r.get(0))
                    .optional()
            })
            .map_err(db_error)
    }

    /// The scope's row id, created on first write.
    fn ensure(&self, conn: &Connection) -> Result<i64> {
        if let Some(id) = self.find(conn)? {
            return Ok(id);
        }
        conn.prepare_cached("INSERT INTO scopes (user_id, peer) VALUES (?1, ?2)")
            .and_then(|mut s| s.execute(params![self.user, self.peer]))
            .map_err(db_error)?;
        Ok(conn.last_insert_rowid())
    }
}

/// The write generation of `scope` in the reader's snapshot: it moves in
/// the transaction of every write to the scope's turns or memories (kept by
/// triggers, see [`crate::schema`]'s write-generation migration), so what was
/// computed from an earlier snapshot of the scope still holds while it is
/// unchanged.
pub fn write_generation(conn: &Connection, scope: i64) -> Result<i64> {
    conn.prepare_cached("SELECT generation FROM scopes WHERE id = ?1")
        .and_then(|mut s| s.query_row([scope], |r| r.get(0)))
        .map_err(db_error)
}

/// Every scope that ever stored something, in creation order (what
/// `memgate migrate` walks).
pub(crate) fn all_scopes(conn: &Connection) -> Result<Vec<ScopeKey>> {
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
}
