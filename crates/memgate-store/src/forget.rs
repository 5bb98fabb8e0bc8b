//! Erasure: `forget` a memory with its history, a thread, a whole
//! (user, agent) scope or every scope of a user, and the retention sweep that erases captured turns
//! older than `max_turn_age_days`.
//!
//! Erased means unrecoverable from the files once the call returns:
//! - rows leave `memories`, `memory_history`, `memory_sources`, `turns`,
//!   `vectors`, `distill_jobs` (and `scopes` for a whole scope, so the user
//!   id itself is gone);
//! - erasure follows provenance: a thread (or an expired turn) takes the
//!   distilled facts resting only on its turns with it, and a fact takes
//!   the earlier facts it superseded (its past versions);
//! - the recall index drops their entries and is then merged into a single
//!   segment (a contentless index only marks deletions until segments merge,
//!   so the terms would otherwise stay in the file);
//! - the writer runs with `secure_delete`, so freed cells and pages are
//!   overwritten with zeros rather than left in free space;
//! - the write-ahead log, which still holds the old page images, is
//!   checkpointed into the file and truncated to zero bytes.
//!
//! The cost is a rewrite of the recall index per erasure: erasure is rare,
//! and a cheaper erasure that leaves copies behind would not be one.
//!
//! This module erases rows inside the transaction it is handed;
//! [`crate::MemoryStore::forget`] and the sweep then drop the in-memory
//! vector copies and empty the write-ahead log.

use crate::error::db_error;
use crate::index::IndexWrites;
use crate::scope::ScopeRow;
use crate::vectors::erase_vectors;
use memgate_core::{ForgetReport, ForgetTarget, MemoryError, Result};
use memgate_recall::scope::ScopeKey;
use rusqlite::{params, Connection, OptionalExtension};

pub use memgate_core::forget::{SWEEP_BATCH, SWEEP_MAX_BATCHES};

fn ids(conn: &Connection, sql: &str, args: impl rusqlite::Params) -> Result<Vec<i64>> {
    conn.prepare_cached(sql)
        .and_then(|mut s| s.query_map(args, |r| r.get(0))?.collect())
        .map_err(db_error)
}

/// Erases memory `id` (any state) and its history; its index entry when active.
fn erase_memory(conn: &Connection, index: &mut IndexWrites, id: i64) -> Result<usize> {
    let active: Option<bool> = conn
        .prepare_cached("SELECT state = 'active' FROM memories WHERE id = ?1")
        .and_then(|mut s| s.query_row([id], |r| r.get(0)).optional())
        .map_err(db_error)?;
    let versions = conn
        .prepare_cached("DELETE FROM memory_history WHERE memory_id = ?1")
        .and_then(|mut s| s.execute([id]))
        .map_err(db_error)?;
    conn.prepare_cached("DELETE FROM memory_sources WHERE memory_id = ?1")
        .and_then(|mut s| s.execute([id]))
        .map_err(db_error)?;
    // A fact it superseded no longer names it.
    conn.prepare_cached("UPDATE memories SET superseded_by = NULL WHERE superseded_by = ?1")
        .and_then(|mut s| s.execute([id]))
        .map_err(db_error)?;
    conn.prepare_cached("DELETE FROM memories WHERE id = ?1")
        .and_then(|mut s| s.execute([id]))
        .map_err(db_error)?;
    erase_vectors(conn, &[-id])?;
    if active == Some(true) {
        index.remove_memory(id);
    }
    Ok(versions)
}

/// Erases memory `id` and the earlier facts it superseded (directly or
/// through others): they are its past versions. Returns (facts, versions).
fn erase_fact_with_predecessors(
    conn: &Connection,
    index: &mut IndexWrites,
    id: i64,
) -> Result<(usize, usize)> {
    let mut chain = vec![id];
    let mut next = 0;
    while next < chain.len() {
        let older = ids(
            conn,
            "SELECT id FROM memories WHERE superseded_by = ?1",
            [chain[next]],
        )?;
        for o in older {
            if !chain.contains(&o) {
                chain.push(o);
            }
        }
        next += 1;
    }
    let mut versions = 0;
    for &fact in &chain {
        versions += erase_memory(conn, index, fact)?;
    }
    Ok((chain.len(), versions))
}

/// Erases the distilled facts resting only on `turns` (about to be
/// erased), with their history; facts that also rest on other turns lose
/// these sources and stay. Returns (facts, versions).
fn erase_facts_resting_on(
    conn: &Connection,
    index: &mut IndexWrites,
    turns: &[i64],
) -> Result<(usize, usize)> {
    let mut facts = Vec::new();
    for &turn in turns {
        for fact in ids(
            conn,
            "SELECT memory_id FROM memory_sources WHERE turn_id = ?1",
            [turn],
        )? {
            if !facts.contains(&fact) {
                facts.push(fact);
            }
        }
    }
    let mut erased = (0, 0);
    for fact in facts {
        let mut drop_source = conn
            .prepare_cached("DELETE FROM memory_sources WHERE memory_id = ?1 AND turn_id = ?2")
            .map_err(db_error)?;
        for &turn in turns {
            drop_source.execute(params![fact, turn]).map_err(db_error)?;
        }
        let others: i64 = conn
            .prepare_cached("SELECT count(*) FROM memory_sources WHERE memory_id = ?1")
            .and_then(|mut s| s.query_row([fact], |r| r.get(0)))
            .map_err(db_error)?;
        let distilled: bool = conn
            .prepare_cached("SELECT origin = 'distilled' FROM memories WHERE id = ?1")
            .and_then(|mut s| s.query_row([fact], |r| r.get(0)).optional())
            .map_err(db_error)?
            .unwrap_or(false);
        if others == 0 && distilled {
            erased.0 += 1;
            erased.1 += erase_memory(conn, index, fact)?;
        }
    }
    Ok(erased)
}

/// Erases turns by id, with their index entries.
fn erase_turns(conn: &Connection, index: &mut IndexWrites, turns: &[i64]) -> Result<()> {
    let mut delete = conn
        .prepare_cached("DELETE FROM turns WHERE id = ?1")
        .map_err(db_error)?;
    for &id in turns {
        delete.execute([id]).map_err(db_error)?;
        index.remove_turn(id);
    }
    erase_vectors(conn, turns)
}

/// Erases a whole scope: its memories with history, its turns, its row.
fn erase_scope(conn: &Connection, index: &mut IndexWrites, scope: i64) -> Result<ForgetReport> {
    let mut report = ForgetReport::default();
    conn.prepare_cached("DELETE FROM distill_jobs WHERE scope_id = ?1")
        .and_then(|mut s| s.execute([scope]))
        .map_err(db_error)?;
    for id in ids(conn, "SELECT id FROM memories WHERE scope_id = ?1", [scope])? {
        report.versions += erase_memory(conn, index, id)?;
        report.facts += 1;
    }
    let turns = ids(conn, "SELECT id FROM turns WHERE scope_id = ?1", [scope])?;
    erase_turns(conn, index, &turns)?;
    report.turns = turns.len();
    conn.prepare_cached("DELETE FROM scopes WHERE id = ?1")
        .and_then(|mut s| s.execute([scope]))
        .map_err(db_error)?;
    Ok(report)
}

/// Erases `target` (not [`ForgetTarget::User`]: [`erase_user`]) in `key`'s
/// scope; `fact` and `thread` are what the target names
/// ([`named_by`](memgate_recall::citation::named_by)). Forgetting what is
/// not there erases nothing and says so with zero counts; a fact id of
/// another scope is not found.
pub(crate) fn erase_target(
    tx: &Connection,
    index: &mut IndexWrites,
    key: &ScopeKey,
    target: &ForgetTarget,
    fact: Option<i64>,
    thread: Option<&str>,
) -> Result<ForgetReport> {
    let mut report = ForgetReport::default();
    let Some(scope) = key.find(tx)? else {
        return match fact {
            Some(n) => Err(MemoryError::NotFound(format!(
                "memory mem_{n} in this scope"
            ))),
            None => Ok(report),
        };
    };
    match target {
        ForgetTarget::Fact { .. } => {
            let n = fact.unwrap_or_default();
            let mine: Option<i64> = tx
                .prepare_cached("SELECT id FROM memories WHERE id = ?1 AND scope_id = ?2")
                .and_then(|mut s| s.query_row(params![n, scope], |r| r.get(0)).optional())
                .map_err(db_error)?;
            if mine.is_none() {
                return Err(MemoryError::NotFound(format!(
                    "memory mem_{n} in this scope"
                )));
            }
            (report.facts, report.versions) = erase_fact_with_predecessors(tx, index, n)?;
        }
        ForgetTarget::Thread => {
            let turns = ids(
                tx,
                "SELECT id FROM turns WHERE scope_id = ?1 AND thread = ?2",
                params![scope, thread.unwrap_or_default()],
            )?;
            (report.facts, report.versions) = erase_facts_resting_on(tx, index, &turns)?;
            erase_turns(tx, index, &turns)?;
            report.turns = turns.len();
            tx.prepare_cached("DELETE FROM distill_jobs WHERE scope_id = ?1 AND thread = ?2")
                .and_then(|mut s| s.execute(params![scope, thread.unwrap_or_default()]))
                .map_err(db_error)?;
        }
        ForgetTarget::Scope | ForgetTarget::User => {
            report = erase_scope(tx, index, scope)?;
        }
    }
    if report != ForgetReport::default() || matches!(target, ForgetTarget::Scope) {
        index.purge_removed();
    }
    Ok(report)
}

/// Erases every scope of `user`, whatever the agent.
pub(crate) fn erase_user(
    tx: &Connection,
    index: &mut IndexWrites,
    user: &str,
) -> Result<ForgetReport> {
    let mut report = ForgetReport::default();
    for scope in ids(tx, "SELECT id FROM scopes WHERE user_id = ?1", [user])? {
        let erased = erase_scope(tx, index, scope)?;
        report.facts += erased.facts;
        report.versions += erased.versions;
        report.turns += erased.turns;
    }
    index.purge_removed();
    Ok(report)
}

/// One batch of a retention sweep: erases at most [`SWEEP_BATCH`] turns
/// captured before `before`, oldest first; returns how many.
pub(crate) fn erase_expired_batch(
    tx: &Connection,
    index: &mut IndexWrites,
    before: &str,
) -> Result<usize> {
    let turns = ids(
        tx,
        "SELECT id FROM turns WHERE captured_at < ?1 ORDER BY id LIMIT ?2",
        params![before, SWEEP_BATCH as i64],
    )?;
    erase_facts_resting_on(tx, index, &turns)?;
    erase_turns(tx, index, &turns)?;
    if !turns.is_empty() {
        index.purge_removed();
    }
    Ok(turns.len())
}
