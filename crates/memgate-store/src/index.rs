//! Writes to the recall index: one row per active memory and per captured
//! turn, kept in step with the tables inside the same transaction.
//!
//! Index writes are collected in [`IndexWrites`] and applied at the end of
//! the transaction, after every table write. The order matters for speed:
//! FTS5 flushes its in-memory batch to a new on-disk segment whenever a
//! later statement in the transaction opens a savepoint, so interleaving
//! table and index writes would create one tiny segment per row (measured:
//! about 2.5× slower captures, and more segments for every query to visit).

use crate::error::db_error;
use memgate_core::Result;
use memgate_recall::terms::{index_text, scope_tag};
use rusqlite::{params, Connection};

/// The index rowid of a memory (memories use the negative rowid space).
pub fn memory_rowid(memory_id: i64) -> i64 {
    -memory_id
}

enum Op {
    Add {
        rowid: i64,
        body: String,
        context: String,
    },
    Remove {
        rowid: i64,
    },
    /// Merges every segment into one, dropping deleted entries for good.
    Optimize,
}

/// Index writes of one transaction, applied in order by [`Self::apply`].
#[derive(Default)]
pub struct IndexWrites(Vec<Op>);

impl IndexWrites {
    fn add(&mut self, rowid: i64, scope_id: i64, body: &str, context: &str) {
        let tag = scope_tag(scope_id);
        self.0.push(Op::Add {
            rowid,
            body: index_text(&tag, body),
            context: index_text(&tag, context),
        });
    }

    /// Indexes an active memory: its text, with its kind as context.
    pub fn add_memory(&mut self, scope_id: i64, id: i64, kind: &str, text: &str) {
        self.add(memory_rowid(id), scope_id, text, kind);
    }

    /// Removes a memory from the index (retired or about to be re-indexed).
    pub fn remove_memory(&mut self, id: i64) {
        self.0.push(Op::Remove {
            rowid: memory_rowid(id),
        });
    }

    /// Removes a captured turn from the index.
    pub fn remove_turn(&mut self, id: i64) {
        self.0.push(Op::Remove { rowid: id });
    }

    /// Rewrites the index so removed entries leave no trace in its segments
    /// (a contentless index only marks deletions until segments merge).
    /// Costs a pass over the whole index: erasure only.
    pub fn purge_removed(&mut self) {
        self.0.push(Op::Optimize);
    }

    /// Indexes a captured turn: its text, with speaker and date as context.
    pub fn add_turn(
        &mut self,
        scope_id: i64,
        id: i64,
        text: &str,
        speaker: Option<&str>,
        occurred_at: Option<&str>,
    ) {
        let context = format!(
            "{} {}",
            speaker.unwrap_or_default(),
            occurred_at.unwrap_or_default()
        );
        self.add(id, scope_id, text, &context);
    }

    /// Whether an id of a turn these writes remove may be given to another
    /// turn. SQLite gives a new turn the largest id in the table plus one,
    /// so an id below a remaining turn's never comes back while that turn
    /// stays, and the removal that takes the last turn above it is counted
    /// itself: a retention sweep (the oldest turns) or a forgotten older
    /// thread keeps every remembered length. Writes that also add turns
    /// are counted whenever they remove one.
    fn turn_ids_may_return(&self, conn: &Connection) -> Result<bool> {
        let removed = self.0.iter().filter_map(|op| match op {
            Op::Remove { rowid } if *rowid > 0 => Some(*rowid),
            _ => None,
        });
        let Some(highest) = removed.max() else {
            return Ok(false);
        };
        if self
            .0
            .iter()
            .any(|op| matches!(op, Op::Add { rowid, .. } if *rowid > 0))
        {
            return Ok(true);
        }
        let remaining: Option<i64> = conn
            .prepare_cached("SELECT max(id) FROM turns")
            .and_then(|mut s| s.query_row([], |r| r.get(0)))
            .map_err(db_error)?;
        Ok(remaining.is_none_or(|top| highest > top))
    }

    /// Writes everything collected, in order. A removal of a turn whose id
    /// may come back is counted in `index_removals` in the same
    /// transaction, so lengths remembered from before it are not used
    /// after it ([`crate::lengths`]).
    pub fn apply(self, conn: &Connection) -> Result<()> {
        if self.turn_ids_may_return(conn)? {
            conn.prepare_cached("UPDATE index_removals SET n = n + 1 WHERE id = 1")
                .and_then(|mut s| s.execute([]))
                .map_err(db_error)?;
        }
        let mut insert = conn
            .prepare_cached("INSERT INTO recall_index (rowid, body, context) VALUES (?1, ?2, ?3)")
            .map_err(db_error)?;
        let mut delete = conn
            .prepare_cached("DELETE FROM recall_index WHERE rowid = ?1")
            .map_err(db_error)?;
        for op in self.0 {
            match op {
                Op::Add {
                    rowid,
                    body,
                    context,
                } => insert.execute(params![rowid, body, context]),
                Op::Remove { rowid } => delete.execute([rowid]),
                Op::Optimize => conn.execute(
                    "INSERT INTO recall_index (recall_index) VALUES ('optimize')",
                    [],
                ),
            }
            .map_err(db_error)?;
        }
        Ok(())
    }
}
