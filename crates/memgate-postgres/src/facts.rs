//! Explicit memories on PostgreSQL: remember, list, get, revise, retire,
//! history — the same rules and citations (`mem_<id>`) as `local`.
//!
//! `remember` is one `INSERT … ON CONFLICT DO NOTHING` against the unique
//! index of active (scope, kind, text) copies: of any number of replicas
//! remembering the same text at once, exactly one stores it and every other
//! is told `AlreadyPresent` with the same citation. Revise and retire lock
//! the row (`FOR UPDATE`), so concurrent changes serialise and each version
//! is recorded once in `memory_history`.

use crate::backend::{PostgresBackend, Scope, SCOPE_ID};
use crate::terms::search_vector;
use deadpool_postgres::GenericClient;
use memgate_core::facts::{history, ChangedBy, FactOrigin, NewFact, EXPLICIT_CONFIDENCE};
use memgate_core::time::now_rfc3339;
use memgate_core::{
    Caller, Citation, Fact, FactPatch, FactState, MemoryError, RememberOutcome, RememberRequest,
    Result,
};
use memgate_recall::citation::{
    memory_citation as citation, parse_memory_citation as parse_citation,
};
use tokio_postgres::Row;

/// One version of a memory as its history records it.
#[derive(Clone, Copy)]
struct Version<'a> {
    version: u32,
    kind: &'a str,
    text: &'a str,
    state: FactState,
    confidence: f64,
    changed_by: ChangedBy,
}

pub(crate) const FACT_COLUMNS: &str = "id, kind, text, state, version, created_at, updated_at, \
     origin, confidence, thread, said_at, valid_to, superseded_by, \
     (SELECT string_agg(turn_id::text, ',' ORDER BY turn_id) FROM memory_sources s \
      WHERE s.memory_id = memories.id), \
     (SELECT changed_by FROM memory_history h WHERE h.memory_id = memories.id \
      ORDER BY h.version DESC LIMIT 1)";

pub(crate) fn state_name(state: FactState) -> &'static str {
    match state {
        FactState::Active => "active",
        FactState::Retired => "retired",
    }
}

pub(crate) fn fact_from_row(r: &Row) -> Fact {
    Fact {
        id: citation(r.get(0)),
        kind: r.get(1),
        text: r.get(2),
        state: if r.get::<_, &str>(3) == "retired" {
            FactState::Retired
        } else {
            FactState::Active
        },
        version: r.get::<_, i32>(4) as u32,
        created_at: r.get(5),
        updated_at: r.get(6),
        origin: FactOrigin::from_name(r.get(7)),
        confidence: r.get(8),
        thread: r.get(9),
        said_at: r.get(10),
        valid_to: r.get(11),
        superseded_by: r.get::<_, Option<i64>>(12).map(citation),
        sources: r
            .get::<_, Option<&str>>(13)
            .unwrap_or_default()
            .split(',')
            .filter_map(|n| n.parse().ok())
            .map(memgate_recall::citation::turn_citation)
            .collect(),
        changed_by: ChangedBy::from_name(r.get::<_, Option<&str>>(14).unwrap_or_default()),
    }
}

fn not_found(id: &str) -> MemoryError {
    match parse_citation(id) {
        Some(n) => MemoryError::NotFound(format!("memory {} in this scope", citation(n))),
        None => MemoryError::NotFound("memory id (expected `mem_<number>`)".to_owned()),
    }
}

/// Writes statements of this module share.
impl PostgresBackend {
    /// The scope's id, created on first write (concurrent creators agree:
    /// the loser of the unique race reads the winner's row).
    pub(crate) async fn ensure_scope(&self, c: &impl GenericClient, scope: &Scope) -> Result<i64> {
        let find = &SCOPE_ID[1..SCOPE_ID.len() - 1];
        if let Some(r) = self.row_opt(c, find, &[&scope.user, &scope.peer]).await? {
            return Ok(r.get(0));
        }
        let inserted = self
            .row_opt(
                c,
                "INSERT INTO scopes (user_id, peer) VALUES ($1, $2)
                 ON CONFLICT (user_id, peer) DO NOTHING RETURNING id",
                &[&scope.user, &scope.peer],
            )
            .await?;
        match inserted {
            Some(r) => Ok(r.get(0)),
            None => Ok(self.row(c, find, &[&scope.user, &scope.peer]).await?.get(0)),
        }
    }

    /// Inserts a memory (version 1) and its first history row unless an
    /// identical active copy exists; `None` then.
    pub(crate) async fn insert_fact(
        &self,
        c: &impl GenericClient,
        scope_id: i64,
        fact: &NewFact<'_>,
    ) -> Result<Option<i64>> {
        let sql = format!(
            "INSERT INTO memories (scope_id, kind, text, state, version, created_at, updated_at, search,
                                   origin, confidence, thread, said_at)
             VALUES ($1, $2, $3, $4, 1, $5, $6, {}, $9, $10, $11, $12)
             ON CONFLICT (scope_id, kind, md5(text)) WHERE state = 'active' DO NOTHING
             RETURNING id",
            search_vector("$7", "$8")
        );
        let (body, context) = (crate::terms::fold(fact.text), crate::terms::fold(fact.kind));
        let row = self
            .row_opt(
                c,
                &sql,
                &[
                    &scope_id,
                    &fact.kind,
                    &fact.text,
                    &state_name(fact.state),
                    &fact.created_at,
                    &fact.updated_at,
                    &body,
                    &context,
                    &fact.origin.as_str(),
                    &fact.confidence,
                    &fact.thread,
                    &fact.said_at,
                ],
            )
            .await?;
        let Some(row) = row else {
            return Ok(None);
        };
        let id: i64 = row.get(0);
        let first = Version {
            version: 1,
            kind: fact.kind,
            text: fact.text,
            state: fact.state,
            confidence: fact.confidence,
            changed_by: fact.changed_by,
        };
        self.record_history(c, id, &first, &now_rfc3339()).await?;
        Ok(Some(id))
    }

    /// Records `version` of memory `id` in its history, as of `at`.
    async fn record_history(
        &self,
        c: &impl GenericClient,
        id: i64,
        version: &Version<'_>,
        at: &str,
    ) -> Result<()> {
        let Version {
            version,
            kind,
            text,
            state,
            confidence,
            changed_by,
        } = *version;
        self.exec(
            c,
            "INSERT INTO memory_history
                 (memory_id, version, kind, text, state, recorded_at, confidence, changed_by)
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8)",
            &[
                &id,
                &(version as i32),
                &kind,
                &text,
                &state_name(state),
                &at,
                &confidence,
                &changed_by.as_str(),
            ],
        )
        .await?;
        Ok(())
    }

    /// The active memory of `scope_id` with exactly this kind and text.
    pub(crate) async fn find_active(
        &self,
        c: &impl GenericClient,
        scope_id: i64,
        kind: &str,
        text: &str,
    ) -> Result<Option<i64>> {
        let row = self
            .row_opt(
                c,
                "SELECT id FROM memories WHERE scope_id = $1 AND kind = $2 AND md5(text) = md5($3)
                 AND text = $3 AND state = 'active'",
                &[&scope_id, &kind, &text],
            )
            .await?;
        Ok(row.map(|r| r.get(0)))
    }

    /// Stores one explicit memory, or reports the identical active one.
    pub(crate) async fn remember_fact(
        &self,
        caller: &Caller,
        request: &RememberRequest,
    ) -> Result<RememberOutcome> {
        let request = RememberRequest::new(&request.kind, &request.text)?
            .with_confidence(request.confidence)?;
        let request = match memgate_core::redaction::redact_remember(&self.redactor, &request) {
            Ok(redacted) => redacted,
            Err(refused) => return Ok(refused),
        };
        let scope = Scope::of(caller);
        let mut client = self.client().await?;
        // A retire between the refused insert and the read can empty the
        // read; the next round then stores. Bounded: never retried blindly.
        for _ in 0..3 {
            let tx = client.transaction().await.map_err(|e| self.err(e))?;
            let scope_id = self.ensure_scope(&tx, &scope).await?;
            let now = now_rfc3339();
            let stored = self
                .insert_fact(
                    &tx,
                    scope_id,
                    &NewFact::explicit(
                        &request.kind,
                        &request.text,
                        request.confidence.unwrap_or(EXPLICIT_CONFIDENCE),
                        &now,
                        ChangedBy::User,
                    ),
                )
                .await?;
            let outcome = match stored {
                Some(id) => Some(RememberOutcome::Stored {
                    citation: Citation::new(citation(id)),
                }),
                None => self
                    .find_active(&tx, scope_id, &request.kind, &request.text)
                    .await?
                    .map(|id| RememberOutcome::AlreadyPresent {
                        citation: Some(Citation::new(citation(id))),
                        revision: None,
                    }),
            };
            tx.commit().await.map_err(|e| self.err(e))?;
            if let Some(outcome) = outcome {
                return Ok(outcome);
            }
        }
        Err(MemoryError::Conflict(
            "remember raced with concurrent changes of the same memory three times".to_owned(),
        ))
    }

    /// The caller's memories, oldest first; retired ones only on request.
    pub(crate) async fn facts_of(
        &self,
        caller: &Caller,
        include_retired: bool,
    ) -> Result<Vec<Fact>> {
        let scope = Scope::of(caller);
        let filter = if include_retired {
            ""
        } else {
            "AND state = 'active'"
        };
        let client = self.client().await?;
        let rows = self.rows(
&client,
&format!(
                    "SELECT {FACT_COLUMNS} FROM memories WHERE scope_id = {SCOPE_ID} {filter} ORDER BY id"
                ),
                &[&scope.user, &scope.peer],
).await?;
        Ok(rows.iter().map(fact_from_row).collect())
    }

    pub(crate) async fn fact(&self, caller: &Caller, id: &str) -> Result<Fact> {
        let row = parse_citation(id).ok_or_else(|| not_found(id))?;
        let scope = Scope::of(caller);
        let client = self.client().await?;
        self.load_fact(&client, &scope, row, false)
            .await?
            .ok_or_else(|| not_found(id))
    }

    async fn load_fact(
        &self,
        c: &impl GenericClient,
        scope: &Scope,
        id: i64,
        for_update: bool,
    ) -> Result<Option<Fact>> {
        let lock = if for_update { "FOR UPDATE" } else { "" };
        let sql = format!(
            "SELECT {FACT_COLUMNS} FROM memories WHERE id = $3 AND scope_id = {SCOPE_ID} {lock}"
        );
        let row = self
            .row_opt(c, &sql, &[&scope.user, &scope.peer, &id])
            .await?;
        Ok(row.as_ref().map(fact_from_row))
    }

    /// Every recorded version of a memory, oldest first.
    pub async fn fact_history(&self, caller: &Caller, id: &str) -> Result<Vec<Fact>> {
        let current = self.fact(caller, id).await?;
        let row = parse_citation(id).ok_or_else(|| not_found(id))?;
        let client = self.client().await?;
        let rows = self
            .rows(
                &client,
                "SELECT kind, text, state, version, recorded_at, confidence, changed_by
                 FROM memory_history WHERE memory_id = $1 ORDER BY version",
                &[&row],
            )
            .await?;
        Ok(rows
            .iter()
            .map(|r| {
                let version = r.get::<_, i32>(3) as u32;
                let latest = version == current.version;
                Fact {
                    kind: r.get(0),
                    text: r.get(1),
                    state: if r.get::<_, &str>(2) == "retired" {
                        FactState::Retired
                    } else {
                        FactState::Active
                    },
                    version,
                    updated_at: r.get(4),
                    confidence: r.get(5),
                    changed_by: ChangedBy::from_name(r.get(6)),
                    valid_to: current.valid_to.clone().filter(|_| latest),
                    superseded_by: current.superseded_by.clone().filter(|_| latest),
                    ..current.clone()
                }
            })
            .collect())
    }

    /// Writes `next` as the new current version of memory `id`.
    async fn update_fact(&self, c: &impl GenericClient, id: i64, next: &Fact) -> Result<()> {
        let sql = format!(
            "UPDATE memories SET kind = $2, text = $3, state = $4, version = $5, updated_at = $6,
                 search = {}, confidence = $9
             WHERE id = $1",
            search_vector("$7", "$8")
        );
        self.exec(
            c,
            &sql,
            &[
                &id,
                &next.kind,
                &next.text,
                &state_name(next.state),
                &(next.version as i32),
                &next.updated_at,
                &crate::terms::fold(&next.text),
                &crate::terms::fold(&next.kind),
                &next.confidence,
            ],
        )
        .await?;
        let version = Version {
            version: next.version,
            kind: &next.kind,
            text: &next.text,
            state: next.state,
            confidence: next.confidence,
            changed_by: next.changed_by,
        };
        self.record_history(c, id, &version, &next.updated_at).await
    }

    /// Revises kind and/or text, keeping the old version in the history.
    pub(crate) async fn revise(
        &self,
        caller: &Caller,
        id: &str,
        patch: &FactPatch,
    ) -> Result<Fact> {
        history::check_patch(patch)?;
        let row = parse_citation(id).ok_or_else(|| not_found(id))?;
        let scope = Scope::of(caller);
        let mut client = self.client().await?;
        let tx = client.transaction().await.map_err(|e| self.err(e))?;
        let current = self
            .load_fact(&tx, &scope, row, true)
            .await?
            .ok_or_else(|| not_found(id))?;
        let Some(revised) = history::revision(&current, patch, &self.redactor)? else {
            return Ok(current);
        };
        let scope_id: i64 = self
            .row(&tx, "SELECT scope_id FROM memories WHERE id = $1", &[&row])
            .await?
            .get(0);
        if !revised.keeps_text_of(&current) {
            if let Some(other) = self
                .find_active(&tx, scope_id, &revised.kind, &revised.text)
                .await?
            {
                return Err(history::duplicate_of(&current, &citation(other)));
            }
        }
        let next = history::revised(current, revised);
        self.update_fact(&tx, row, &next).await?;
        tx.commit().await.map_err(|e| self.err(e))?;
        Ok(next)
    }

    /// Retires a memory: no longer recalled or searched, never erased.
    pub(crate) async fn retire(&self, caller: &Caller, id: &str) -> Result<Fact> {
        let row = parse_citation(id).ok_or_else(|| not_found(id))?;
        let scope = Scope::of(caller);
        let mut client = self.client().await?;
        let tx = client.transaction().await.map_err(|e| self.err(e))?;
        let current = self
            .load_fact(&tx, &scope, row, true)
            .await?
            .ok_or_else(|| not_found(id))?;
        let Some(next) = history::retired(&current) else {
            return Ok(current);
        };
        self.update_fact(&tx, row, &next).await?;
        tx.commit().await.map_err(|e| self.err(e))?;
        Ok(next)
    }
}
