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

use crate::capture::{insert_turn, next_seq, NewTurn, MAX_TURN_TEXT_BYTES};
use crate::facts::{self, list_in_scope, state_name};
use crate::salience::SpeakerNames;
use crate::schema::db_error;
use crate::scope::ScopeKey;
use crate::store::MemoryStore;
use memgate_core::facts::{ExportedTurn, EXPORT_FORMAT};
use memgate_core::time::{looks_like_rfc3339, now_rfc3339};
use memgate_core::{
    Caller, FactState, ImportReport, MemoryError, MemoryExport, RememberRequest, Result, Role,
    RoleKind,
};
use rusqlite::{params, Connection, OptionalExtension};
use std::collections::HashMap;

struct ImportedFact {
    request: RememberRequest,
    state: FactState,
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

/// An RFC 3339 timestamp from an export, or now when it is missing or malformed.
pub fn timestamp_or_now(value: Option<&str>) -> String {
    match value {
        Some(t) if looks_like_rfc3339(t) => t.to_owned(),
        _ => now_rfc3339(),
    }
}

fn is_signature(s: &str) -> bool {
    s.len() == 64 && s.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
}

/// Checks exported turn `i` and turns it into a storable turn of its thread
/// (shared with the postgres backend, so both refuse the same data).
pub fn validate_turn(i: usize, t: &ExportedTurn) -> Result<(String, NewTurn)> {
    let field = |name: &str| format!("turns[{i}].{name}");
    if t.thread.is_empty() {
        return Err(MemoryError::invalid(field("thread"), "must not be empty"));
    }
    let role = match Role::new(t.role.as_str()).kind() {
        RoleKind::Human => "human",
        RoleKind::Ai => "ai",
        _ => {
            return Err(MemoryError::invalid(
                field("role"),
                "must be a human or AI role (memory stores no other turns)",
            ))
        }
    };
    let text = t.text.trim();
    if text.is_empty() {
        return Err(MemoryError::invalid(field("text"), "must not be blank"));
    }
    if text.len() > MAX_TURN_TEXT_BYTES {
        return Err(MemoryError::invalid(
            field("text"),
            format!("must be at most {MAX_TURN_TEXT_BYTES} UTF-8 bytes"),
        ));
    }
    if !is_signature(&t.signature) {
        return Err(MemoryError::invalid(
            field("signature"),
            "must be 64 lowercase hex digits (a SHA-256 message signature)",
        ));
    }
    Ok((
        t.thread.clone(),
        NewTurn {
            signature: t.signature.clone(),
            message_id: None,
            role,
            speaker: None,
            occurred_at: None,
            text: text.to_owned(),
            captured_at: timestamp_or_now(t.captured_at.as_deref()),
        },
    ))
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

impl MemoryStore {
    /// Everything the caller's scope holds, in storage order.
    pub fn export(&self, caller: &Caller) -> Result<MemoryExport> {
        let key = ScopeKey::of(caller);
        self.read(|conn| {
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
        })
    }

    /// Merges an export into the caller's scope in one transaction.
    pub fn import(&self, caller: &Caller, data: &MemoryExport) -> Result<ImportReport> {
        if data.format != EXPORT_FORMAT {
            return Err(MemoryError::invalid(
                "format",
                format!("must be `{EXPORT_FORMAT}`"),
            ));
        }
        let facts = data
            .facts
            .iter()
            .enumerate()
            .map(|(i, f)| {
                let redacted = self.redactor.redact(&f.text);
                Ok(ImportedFact {
                    request: RememberRequest::new(&f.kind, &redacted.text)
                        .map_err(at(format!("facts[{i}]")))?,
                    state: f.state,
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
                if let std::borrow::Cow::Owned(text) = self.redactor.redact(&turn.text).text {
                    turn.text = text;
                }
                Ok((thread, turn))
            })
            .collect::<Result<Vec<_>>>()?;
        let key = ScopeKey::of(caller);
        self.write(|tx, index| {
            let scope = key.ensure(tx)?;
            let mut report = ImportReport::default();
            for fact in &facts {
                if find_same(tx, scope, fact)?.is_some() {
                    report.facts_already_present += 1;
                } else {
                    facts::insert(
                        tx,
                        index,
                        scope,
                        &fact.request.kind,
                        &fact.request.text,
                        fact.state,
                        &fact.created_at,
                        &fact.updated_at,
                    )?;
                    report.facts_imported += 1;
                }
            }
            let mut seqs: HashMap<&str, i64> = HashMap::new();
            let mut names = SpeakerNames::default();
            for (thread, turn) in &turns {
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
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn signatures_must_be_lowercase_sha256_hex() {
        assert!(is_signature(&"a".repeat(64)));
        assert!(!is_signature(&"A".repeat(64)));
        assert!(!is_signature(&"a".repeat(63)));
        assert!(!is_signature(&"g".repeat(64)));
    }

    #[test]
    fn turn_errors_name_the_entry() {
        let t = ExportedTurn {
            thread: "t".into(),
            role: "system".into(),
            text: "x".into(),
            signature: "a".repeat(64),
            captured_at: None,
        };
        let e = validate_turn(3, &t).err().unwrap();
        assert!(e.to_string().starts_with("invalid turns[3].role"), "{e}");
    }
}
