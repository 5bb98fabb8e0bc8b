//! Export and import of one scope's memory (`memgate.export.v1`).
//!
//! An export holds every memory (retired ones too, with their state) and
//! every captured turn with its message signature. Import merges: a memory
//! with the same kind, text and state, or a turn with the same thread and
//! signature, is already present and is not added again, so importing the
//! same export twice adds nothing. Everything is validated before anything
//! is written, and the whole import is one transaction: bad data is an error
//! naming the entry and the rule, and leaves stored memory as it was.
//!
//! Secrets in imported texts are redacted like captured ones.
//!
//! Imported memories start a fresh history (version 1) in this store; the
//! speaker and date context of turns is not part of the v1 format.

use crate::capture::{insert_turn, next_seq};
use crate::error::db_error;
use crate::facts::{self, list_in_scope, state_name};
use crate::index::IndexWrites;
use crate::scope::ScopeRow;
use memgate_core::facts::{check_confidence, ChangedBy, ExportedTurn, FactOrigin, NewFact};
use memgate_core::{
    FactState, Holdings, ImportReport, MemoryError, MemoryExport, Redactor, RememberRequest,
    Result, StoredScope,
};
use memgate_recall::salience::SpeakerNames;
use memgate_recall::scope::ScopeKey;
use memgate_recall::turns::{check_export_format, timestamp_or_now, validate_turn, NewTurn};
use rusqlite::{params, Connection, OptionalExtension};
use std::collections::HashMap;

struct ImportedFact {
    request: RememberRequest,
    state: FactState,
    origin: FactOrigin,
    confidence: f64,
    created_at: String,
    updated_at: String,
}

/// Prefixes the field of a validation error with the entry it came from.
fn at(entry: String) -> impl Fn(MemoryError) -> MemoryError {
    move |e| match e {
        MemoryError::InvalidInput { field, rule } => {
            MemoryError::invalid(format!("{entry}.{field}"), rule)
        }
        other => other,
    }
}

fn find_same(conn: &Connection, scope: i64, fact: &ImportedFact) -> Result<Option<i64>> {
    conn.prepare_cached(
        "SELECT id FROM memories WHERE scope_id = ?1 AND kind = ?2 AND text = ?3 AND state = ?4",
    )
    .and_then(|mut s| {
        s.query_row(
            params![
                scope,
                fact.request.kind,
                fact.request.text,
                state_name(fact.state)
            ],
            |r| r.get(0),
        )
        .optional()
    })
    .map_err(db_error)
}

/// An export checked and redacted, ready to merge: nothing is written
/// until all of it passed.
pub(crate) struct Import {
    facts: Vec<ImportedFact>,
    turns: Vec<(String, NewTurn)>,
}

/// The (user, agent) scopes of the file, by user then agent; the default
/// agent's empty peer reads as `None`.
pub(crate) fn stored_scopes(conn: &Connection, limit: usize) -> Result<Vec<StoredScope>> {
    let limit = i64::try_from(limit).unwrap_or(i64::MAX);
    let mut statement = conn
        .prepare_cached("SELECT user_id, peer FROM scopes ORDER BY user_id, peer LIMIT ?1")
        .map_err(db_error)?;
    let rows = statement
        .query_map(params![limit], |row| {
            let peer: String = row.get(1)?;
            Ok(StoredScope {
                user: row.get(0)?,
                agent: (!peer.is_empty()).then_some(peer),
            })
        })
        .map_err(db_error)?;
    rows.collect::<rusqlite::Result<Vec<_>>>().map_err(db_error)
}

/// Everything `key`'s scope holds, in storage order.
pub(crate) fn export(conn: &Connection, key: &ScopeKey) -> Result<MemoryExport> {
    let Some(scope) = key.find(conn)? else {
        return Ok(MemoryExport::new(Vec::new(), Vec::new()));
    };
    let facts = list_in_scope(conn, scope, true)?;
    let turns = conn
        .prepare_cached(
            "SELECT thread, role, text, signature, captured_at
             FROM turns WHERE scope_id = ?1 ORDER BY id",
        )
        .and_then(|mut s| {
            s.query_map([scope], |r| {
                Ok(ExportedTurn {
                    thread: r.get(0)?,
                    role: r.get(1)?,
                    text: r.get(2)?,
                    signature: r.get(3)?,
                    captured_at: r.get(4)?,
                })
            })?
            .collect()
        })
        .map_err(db_error)?;
    Ok(MemoryExport::new(facts, turns))
}

/// What the scope holds, counted by SQLite: the export's figures without
/// reading a single text.
pub(crate) fn holdings(conn: &Connection, key: &ScopeKey) -> Result<Holdings> {
    let Some(scope) = key.find(conn)? else {
        return Ok(Holdings::default());
    };
    let (turns, threads, last_captured_at) = conn
        .prepare_cached(
            "SELECT count(*), count(DISTINCT thread), max(captured_at) FROM turns WHERE scope_id = ?1",
        )
        .and_then(|mut s| {
            s.query_row([scope], |r| {
                Ok((r.get::<_, i64>(0)?, r.get::<_, i64>(1)?, r.get::<_, Option<String>>(2)?))
            })
        })
        .map_err(db_error)?;
    let last_fact: Option<String> = conn
        .prepare_cached("SELECT max(updated_at) FROM memories WHERE scope_id = ?1")
        .and_then(|mut s| s.query_row([scope], |r| r.get(0)))
        .map_err(db_error)?;
    Ok(Holdings::counted(
        turns,
        threads,
        last_captured_at,
        last_fact,
    ))
}

/// Validates every entry of `data` and redacts its texts with `redactor`;
/// the first bad entry is the error.
pub(crate) fn validate(data: &MemoryExport, redactor: &Redactor) -> Result<Import> {
    check_export_format(data)?;
    let facts = data
        .facts
        .iter()
        .enumerate()
        .map(|(i, f)| {
            let redacted = redactor.redact(&f.text);
            Ok(ImportedFact {
                request: RememberRequest::new(&f.kind, &redacted.text)
                    .map_err(at(format!("facts[{i}]")))?,
                state: f.state,
                origin: f.origin,
                confidence: check_confidence(&format!("facts[{i}].confidence"), f.confidence)?,
                created_at: timestamp_or_now(Some(&f.created_at)),
                updated_at: timestamp_or_now(Some(&f.updated_at)),
            })
        })
        .collect::<Result<Vec<_>>>()?;
    let turns = data
        .turns
        .iter()
        .enumerate()
        .map(|(i, t)| {
            let (thread, mut turn) = validate_turn(i, t)?;
            if let std::borrow::Cow::Owned(text) = redactor.redact(&turn.text).text {
                turn.text = text;
            }
            Ok((thread, turn))
        })
        .collect::<Result<Vec<_>>>()?;
    Ok(Import { facts, turns })
}

/// Merges a validated export into `key`'s scope (made when missing).
pub(crate) fn import(
    tx: &Connection,
    index: &mut IndexWrites,
    key: &ScopeKey,
    data: &Import,
) -> Result<ImportReport> {
    let scope = key.ensure(tx)?;
    let mut report = ImportReport::default();
    for fact in &data.facts {
        if find_same(tx, scope, fact)?.is_some() {
            report.facts_already_present += 1;
        } else {
            facts::insert(
                tx,
                index,
                scope,
                &NewFact {
                    kind: &fact.request.kind,
                    text: &fact.request.text,
                    state: fact.state,
                    created_at: &fact.created_at,
                    updated_at: &fact.updated_at,
                    origin: fact.origin,
                    confidence: fact.confidence,
                    thread: None,
                    said_at: None,
                    changed_by: ChangedBy::Api,
                },
            )?;
            report.facts_imported += 1;
        }
    }
    let mut seqs: HashMap<&str, i64> = HashMap::new();
    let mut names = SpeakerNames::default();
    for (thread, turn) in &data.turns {
        let seq = match seqs.get(thread.as_str()) {
            Some(s) => *s,
            None => next_seq(tx, scope, thread)?,
        };
        let inserted = insert_turn(tx, index, &mut names, scope, thread, seq, turn)?;
        seqs.insert(thread, if inserted { seq + 1 } else { seq });
        if inserted {
            report.turns_imported += 1;
        } else {
            report.turns_already_present += 1;
        }
    }
    Ok(report)
}
