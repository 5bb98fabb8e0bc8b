//! Explicit memories ("facts"): remember, list, get, revise, retire, history.
//!
//! A memory's citation is `mem_<id>` and never changes. Every change (the
//! first version, each revision, the retirement) is appended to
//! `memory_history`, so retiring never erases: a retired memory leaves the
//! recall index but stays listable with `include_retired` (erasure is
//! [`crate::forget`]'s job). At most
//! one *active* copy of a (kind, text) pair exists per scope (a unique index
//! enforces it), which is what makes `remember` answer `AlreadyPresent`.

use crate::error::db_error;
use crate::index::IndexWrites;
use crate::scope::ScopeRow;
use memgate_core::facts::{history, ChangedBy, FactOrigin, NewFact, EXPLICIT_CONFIDENCE};
use memgate_core::time::now_rfc3339;
use memgate_core::{
    Citation, Fact, FactPatch, FactState, MemoryError, Redactor, RememberOutcome, RememberRequest,
    Result,
};
use memgate_recall::citation::{memory_citation, parse_memory_citation, turn_citation};
use memgate_recall::ranked::{Origin, Ranked};
use memgate_recall::scope::ScopeKey;
use rusqlite::{params, Connection, OptionalExtension, Row};
use std::collections::HashMap;

fn not_found(id: &str) -> MemoryError {
    match parse_memory_citation(id) {
        Some(n) => MemoryError::NotFound(format!("memory {} in this scope", memory_citation(n))),
        None => MemoryError::NotFound("memory id (expected `mem_<number>`)".to_owned()),
    }
}

pub(crate) fn state_name(state: FactState) -> &'static str {
    match state {
        FactState::Active => "active",
        FactState::Retired => "retired",
    }
}

const FACT_COLUMNS: &str = "id, kind, text, state, version, created_at, updated_at, origin, \
     confidence, thread, said_at, valid_to, superseded_by, \
     (SELECT group_concat(turn_id) FROM memory_sources WHERE memory_id = memories.id), \
     (SELECT changed_by FROM memory_history h WHERE h.memory_id = memories.id \
      ORDER BY h.version DESC LIMIT 1)";

fn fact_from_row(r: &Row<'_>) -> rusqlite::Result<Fact> {
    let state: String = r.get(3)?;
    let origin: String = r.get(7)?;
    let sources: Option<String> = r.get(13)?;
    let changed_by: Option<String> = r.get(14)?;
    let mut sources: Vec<i64> = sources
        .unwrap_or_default()
        .split(',')
        .filter_map(|n| n.parse().ok())
        .collect();
    sources.sort_unstable();
    Ok(Fact {
        id: memory_citation(r.get(0)?),
        kind: r.get(1)?,
        text: r.get(2)?,
        state: if state == "retired" {
            FactState::Retired
        } else {
            FactState::Active
        },
        version: r.get(4)?,
        created_at: r.get(5)?,
        updated_at: r.get(6)?,
        origin: FactOrigin::from_name(&origin),
        confidence: r.get(8)?,
        thread: r.get(9)?,
        said_at: r.get(10)?,
        valid_to: r.get(11)?,
        superseded_by: r.get::<_, Option<i64>>(12)?.map(memory_citation),
        sources: sources.into_iter().map(turn_citation).collect(),
        changed_by: ChangedBy::from_name(changed_by.as_deref().unwrap_or_default()),
    })
}

/// Loads memory `id` of `scope`, or `None` (another scope's id is `None` too).
pub(crate) fn load_in_scope(conn: &Connection, scope: i64, id: i64) -> Result<Option<Fact>> {
    conn.prepare_cached(&format!(
        "SELECT {FACT_COLUMNS} FROM memories WHERE id = ?1 AND scope_id = ?2"
    ))
    .and_then(|mut s| s.query_row(params![id, scope], fact_from_row).optional())
    .map_err(db_error)
}

/// The scope's `limit` newest current distilled facts, newest first: the
/// facts a distillation job may supersede, shown beside those its words
/// found so a change that does not name the old value still reaches it.
pub(crate) fn newest_distilled(conn: &Connection, scope: i64, limit: usize) -> Result<Vec<Fact>> {
    conn.prepare_cached(&format!(
        "SELECT {FACT_COLUMNS} FROM memories
         WHERE scope_id = ?1 AND state = 'active' AND superseded_by IS NULL
           AND origin = 'distilled'
         ORDER BY id DESC LIMIT ?2"
    ))
    .and_then(|mut s| {
        s.query_map(params![scope, limit as i64], fact_from_row)?
            .collect()
    })
    .map_err(db_error)
}

/// The active memory with exactly this kind and text, if any.
pub(crate) fn find_active(
    conn: &Connection,
    scope: i64,
    kind: &str,
    text: &str,
) -> Result<Option<i64>> {
    conn.prepare_cached(
        "SELECT id FROM memories WHERE scope_id = ?1 AND kind = ?2 AND text = ?3 AND state = 'active'",
    )
    .and_then(|mut s| s.query_row(params![scope, kind, text], |r| r.get(0)).optional())
    .map_err(db_error)
}

fn record_history(conn: &Connection, id: i64, fact: &Fact, at: &str) -> Result<()> {
    conn.prepare_cached(
        "INSERT INTO memory_history
             (memory_id, version, kind, text, state, recorded_at, confidence, changed_by)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)",
    )
    .and_then(|mut s| {
        s.execute(params![
            id,
            fact.version,
            fact.kind,
            fact.text,
            state_name(fact.state),
            at,
            fact.confidence,
            fact.changed_by.as_str(),
        ])
    })
    .map_err(db_error)?;
    Ok(())
}

/// Inserts a new memory (version 1) with its history row, indexing it when
/// active. Returns its row id.
pub(crate) fn insert(
    conn: &Connection,
    index: &mut IndexWrites,
    scope: i64,
    fact: &NewFact<'_>,
) -> Result<i64> {
    conn.prepare_cached(
        "INSERT INTO memories (scope_id, kind, text, state, version, created_at, updated_at,
                               origin, confidence, thread, said_at)
         VALUES (?1, ?2, ?3, ?4, 1, ?5, ?6, ?7, ?8, ?9, ?10)",
    )
    .and_then(|mut s| {
        s.execute(params![
            scope,
            fact.kind,
            fact.text,
            state_name(fact.state),
            fact.created_at,
            fact.updated_at,
            fact.origin.as_str(),
            fact.confidence,
            fact.thread,
            fact.said_at,
        ])
    })
    .map_err(db_error)?;
    let id = conn.last_insert_rowid();
    let first = Fact {
        id: memory_citation(id),
        kind: fact.kind.to_owned(),
        text: fact.text.to_owned(),
        state: fact.state,
        version: 1,
        created_at: fact.created_at.to_owned(),
        updated_at: fact.updated_at.to_owned(),
        origin: fact.origin,
        confidence: fact.confidence,
        sources: Vec::new(),
        thread: fact.thread.map(str::to_owned),
        said_at: fact.said_at.map(str::to_owned),
        valid_to: None,
        superseded_by: None,
        changed_by: fact.changed_by,
    };
    record_history(conn, id, &first, &now_rfc3339())?;
    if fact.state == FactState::Active {
        index.add_memory(scope, id, fact.kind, fact.text);
    }
    Ok(id)
}

/// Writes `fact` as the new current version of memory `id`.
pub(crate) fn update(conn: &Connection, id: i64, fact: &Fact) -> Result<()> {
    conn.prepare_cached(
        "UPDATE memories SET kind = ?2, text = ?3, state = ?4, version = ?5, updated_at = ?6,
                             confidence = ?7
         WHERE id = ?1",
    )
    .and_then(|mut s| {
        s.execute(params![
            id,
            fact.kind,
            fact.text,
            state_name(fact.state),
            fact.version,
            fact.updated_at,
            fact.confidence,
        ])
    })
    .map_err(db_error)?;
    record_history(conn, id, fact, &fact.updated_at)
}

/// A memory named by its citation (`mem_<n>`): the citation as the caller
/// wrote it (what a not-found error names) and the row it points at.
#[derive(Clone, Copy)]
pub(crate) struct MemoryId<'a> {
    cited: &'a str,
    row: i64,
}

impl<'a> MemoryId<'a> {
    /// Parses `id`; anything but `mem_<number>` is not found.
    pub fn parse(id: &'a str) -> Result<Self> {
        let row = parse_memory_citation(id).ok_or_else(|| not_found(id))?;
        Ok(Self { cited: id, row })
    }

    fn not_found(self) -> MemoryError {
        not_found(self.cited)
    }
}

/// Stores one explicit memory (already validated and redacted) in `key`'s
/// scope, or reports the identical active one.
pub(crate) fn remember(
    tx: &Connection,
    index: &mut IndexWrites,
    key: &ScopeKey,
    request: &RememberRequest,
) -> Result<RememberOutcome> {
    let scope = key.ensure(tx)?;
    if let Some(id) = find_active(tx, scope, &request.kind, &request.text)? {
        return Ok(RememberOutcome::AlreadyPresent {
            citation: Some(Citation::new(memory_citation(id))),
            revision: None,
        });
    }
    let now = now_rfc3339();
    let id = insert(
        tx,
        index,
        scope,
        &NewFact::explicit(
            &request.kind,
            &request.text,
            request.confidence.unwrap_or(EXPLICIT_CONFIDENCE),
            &now,
            ChangedBy::User,
        ),
    )?;
    Ok(RememberOutcome::Stored {
        citation: Citation::new(memory_citation(id)),
    })
}

/// `key`'s memories, oldest first; retired ones only on request.
pub(crate) fn list(conn: &Connection, key: &ScopeKey, include_retired: bool) -> Result<Vec<Fact>> {
    let Some(scope) = key.find(conn)? else {
        return Ok(Vec::new());
    };
    list_in_scope(conn, scope, include_retired)
}

/// Memory `id` of `key`'s scope.
pub(crate) fn get(conn: &Connection, key: &ScopeKey, id: MemoryId<'_>) -> Result<Fact> {
    let scope = key.find(conn)?.ok_or_else(|| id.not_found())?;
    load_in_scope(conn, scope, id.row)?.ok_or_else(|| id.not_found())
}

/// Every recorded version of memory `id` (whose current version is
/// `current`), oldest first, each dated from the memory's creation and
/// carrying its provenance; only the current version carries when it
/// stopped being true.
pub(crate) fn history_of(conn: &Connection, id: MemoryId<'_>, current: &Fact) -> Result<Vec<Fact>> {
    conn.prepare_cached(
        "SELECT kind, text, state, version, recorded_at, confidence, changed_by
         FROM memory_history WHERE memory_id = ?1 ORDER BY version",
    )
    .and_then(|mut s| {
        s.query_map([id.row], |r| {
            let state: String = r.get(2)?;
            let changed_by: String = r.get(6)?;
            let version: u32 = r.get(3)?;
            let latest = version == current.version;
            Ok(Fact {
                kind: r.get(0)?,
                text: r.get(1)?,
                state: if state == "retired" {
                    FactState::Retired
                } else {
                    FactState::Active
                },
                version,
                updated_at: r.get(4)?,
                confidence: r.get(5)?,
                changed_by: ChangedBy::from_name(&changed_by),
                valid_to: current.valid_to.clone().filter(|_| latest),
                superseded_by: current.superseded_by.clone().filter(|_| latest),
                ..current.clone()
            })
        })?
        .collect()
    })
    .map_err(db_error)
}

/// Revises memory `id` of `key`'s scope as `patch` says (redacted with
/// `redactor`); the old version stays in the history. Retired memories
/// cannot be revised; a revision that would duplicate another active
/// memory is a conflict.
pub(crate) fn revise(
    tx: &Connection,
    index: &mut IndexWrites,
    key: &ScopeKey,
    id: MemoryId<'_>,
    patch: &FactPatch,
    redactor: &Redactor,
) -> Result<Fact> {
    let scope = key.find(tx)?.ok_or_else(|| id.not_found())?;
    let current = load_in_scope(tx, scope, id.row)?.ok_or_else(|| id.not_found())?;
    let Some(revised) = history::revision(&current, patch, redactor)? else {
        return Ok(current);
    };
    if !revised.keeps_text_of(&current) {
        if let Some(other) = find_active(tx, scope, &revised.kind, &revised.text)? {
            return Err(history::duplicate_of(&current, &memory_citation(other)));
        }
    }
    let next = history::revised(current, revised);
    update(tx, id.row, &next)?;
    index.remove_memory(id.row);
    index.add_memory(scope, id.row, &next.kind, &next.text);
    Ok(next)
}

/// Retires memory `id` of `key`'s scope: no longer recalled or searched,
/// never erased. Retiring a retired memory changes nothing.
pub(crate) fn retire(
    tx: &Connection,
    index: &mut IndexWrites,
    key: &ScopeKey,
    id: MemoryId<'_>,
) -> Result<Fact> {
    let scope = key.find(tx)?.ok_or_else(|| id.not_found())?;
    let current = load_in_scope(tx, scope, id.row)?.ok_or_else(|| id.not_found())?;
    let Some(next) = history::retired(&current) else {
        return Ok(current);
    };
    update(tx, id.row, &next)?;
    index.remove_memory(id.row);
    Ok(next)
}

/// All memories of one scope, oldest first.
pub(crate) fn list_in_scope(
    conn: &Connection,
    scope: i64,
    include_retired: bool,
) -> Result<Vec<Fact>> {
    let filter = if include_retired {
        ""
    } else {
        "AND state = 'active'"
    };
    conn.prepare_cached(&format!(
        "SELECT {FACT_COLUMNS} FROM memories WHERE scope_id = ?1 {filter} ORDER BY id"
    ))
    .and_then(|mut s| s.query_map([scope], fact_from_row)?.collect())
    .map_err(db_error)
}

/// The `limit` newest active memories of a scope, newest first.
/// The profile the first-turn block leads with: the newest `explicit`
/// current explicit facts, then at most [`MAX_PROFILE_FACTS`] current
/// distilled ones, taken round-robin over their threads (every thread's
/// newest, then every thread's second newest, ...) so the read is bounded
/// and still spans the history. Superseded and retired versions are never
/// read.
pub(crate) fn current_profile(conn: &Connection, scope: i64, explicit: usize) -> Result<Vec<Fact>> {
    let current =
        "scope_id = ?1 AND state = 'active' AND superseded_by IS NULL AND valid_to IS NULL";
    let read = |sql: String| {
        conn.prepare_cached(&sql)
            .and_then(|mut s| {
                s.query_map(params![scope], fact_from_row)?
                    .collect::<rusqlite::Result<Vec<Fact>>>()
            })
            .map_err(db_error)
    };
    let mut facts = read(format!(
        "SELECT {FACT_COLUMNS} FROM memories WHERE {current} AND origin = 'explicit'
         ORDER BY id DESC LIMIT {explicit}"
    ))?;
    facts.extend(read(format!(
        "SELECT {FACT_COLUMNS} FROM memories WHERE id IN (
             SELECT id FROM (
                 SELECT id, row_number() OVER (PARTITION BY thread ORDER BY id DESC) AS round
                 FROM memories WHERE {current} AND origin = 'distilled') AS ranked
             ORDER BY round, id DESC LIMIT {MAX_PROFILE_FACTS})"
    ))?);
    Ok(facts)
}

/// Most distilled facts a profile reads: more than half a block holds.
pub const MAX_PROFILE_FACTS: usize = 200;

pub(crate) fn newest_active(conn: &Connection, scope: i64, limit: usize) -> Result<Vec<Fact>> {
    conn.prepare_cached(&format!(
        "SELECT {FACT_COLUMNS} FROM memories WHERE scope_id = ?1 AND state = 'active'
         ORDER BY id DESC LIMIT {limit}"
    ))
    // The limit is in the SQL text: bound, it made SQLite re-prepare the
    // statement on every recall (the planner looks at it).
    .and_then(|mut s| s.query_map(params![scope], fact_from_row)?.collect())
    .map_err(db_error)
}

/// The source turns of each distilled fact in `ranked`, by memory id
/// (explicit memories rest on none and are absent).
pub(crate) fn fact_sources(conn: &Connection, ranked: &[Ranked]) -> Result<HashMap<i64, Vec<i64>>> {
    let mut sources = HashMap::new();
    for id in ranked
        .iter()
        .filter(|r| r.origin == Origin::Memory)
        .filter_map(|r| parse_memory_citation(&r.citation))
    {
        let turns: Vec<i64> = conn
            .prepare_cached(
                "SELECT turn_id FROM memory_sources WHERE memory_id = ?1 ORDER BY turn_id",
            )
            .and_then(|mut s| s.query_map([id], |r| r.get(0))?.collect())
            .map_err(db_error)?;
        if !turns.is_empty() {
            sources.insert(id, turns);
        }
    }
    Ok(sources)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn citations_round_trip_and_reject_lookalikes() {
        assert_eq!(parse_memory_citation(&memory_citation(42)), Some(42));
        for bad in [
            "mem_",
            "mem_-1",
            "mem_1a",
            "turn_1",
            "42",
            "mem_99999999999999999999",
        ] {
            assert_eq!(parse_memory_citation(bad), None, "{bad}");
        }
    }
}
