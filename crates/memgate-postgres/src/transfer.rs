//! Export and import of one scope (`memgate.export.v1`), with `local`'s
//! rules: an export holds every memory (retired ones too) and every turn
//! with its signature; import validates everything first
//! ([`memgate_recall::turns::validate_turn`]), then merges in one
//! transaction. A memory with the same kind, text and state, or a turn with
//! the same thread and signature, is already present and not added again, so
//! an import can be re-run (and raced) without duplicating anything.

use crate::backend::{PostgresBackend, Scope, SCOPE_ID};
use crate::facts::{fact_from_row, state_name, FACT_COLUMNS};
use memgate_core::facts::{ExportedTurn, NewFact};
use memgate_core::{
    Caller, FactState, Holdings, ImportReport, MemoryError, MemoryExport, RememberRequest, Result,
    StoredScope,
};
use memgate_recall::turns::NewTurn;
use memgate_recall::turns::{check_export_format, timestamp_or_now, validate_turn};

/// Prefixes the field of a validation error with the entry it came from.
fn at(entry: String) -> impl Fn(MemoryError) -> MemoryError {
    move |e| match e {
        MemoryError::InvalidInput { field, rule } => {
            MemoryError::invalid(format!("{entry}.{field}"), rule)
        }
        other => other,
    }
}

impl PostgresBackend {
    /// The (user, agent) scopes of the schema, by user then agent; the
    /// default agent's empty peer reads as `None`.
    pub(crate) async fn list_scopes(&self, limit: usize) -> Result<Vec<StoredScope>> {
        let client = self.client().await?;
        let limit = i64::try_from(limit).unwrap_or(i64::MAX);
        let rows = self
            .rows(
                &client,
                "SELECT user_id, peer FROM scopes ORDER BY user_id, peer LIMIT $1",
                &[&limit],
            )
            .await?;
        Ok(rows
            .iter()
            .map(|row| {
                let peer: String = row.get(1);
                StoredScope {
                    user: row.get(0),
                    agent: (!peer.is_empty()).then_some(peer),
                }
            })
            .collect())
    }

    /// Everything the caller's scope holds, in storage order.
    /// What the caller's scope holds, counted by the database (one
    /// statement, so one snapshot) instead of exported.
    pub(crate) async fn count_holdings(&self, caller: &Caller) -> Result<Holdings> {
        let scope = Scope::of(caller);
        let client = self.client().await?;
        let row = self
            .row(
                &client,
                &format!(
                    "SELECT (SELECT count(*) FROM turns WHERE scope_id = {SCOPE_ID}),
                            (SELECT count(DISTINCT thread) FROM turns WHERE scope_id = {SCOPE_ID}),
                            (SELECT max(captured_at) FROM turns WHERE scope_id = {SCOPE_ID}),
                            (SELECT max(updated_at) FROM memories WHERE scope_id = {SCOPE_ID})"
                ),
                &[&scope.user, &scope.peer],
            )
            .await?;
        Ok(Holdings::counted(
            row.get(0),
            row.get(1),
            row.get(2),
            row.get(3),
        ))
    }

    pub(crate) async fn export_scope(&self, caller: &Caller) -> Result<MemoryExport> {
        let scope = Scope::of(caller);
        let mut client = self.client().await?;
        // One snapshot for facts and turns.
        let tx = client
            .build_transaction()
            .isolation_level(tokio_postgres::IsolationLevel::RepeatableRead)
            .read_only(true)
            .start()
            .await
            .map_err(|e| self.err(e))?;
        let facts = self
            .rows(
                &tx,
                &format!(
                    "SELECT {FACT_COLUMNS} FROM memories WHERE scope_id = {SCOPE_ID} ORDER BY id"
                ),
                &[&scope.user, &scope.peer],
            )
            .await?;
        let turns = self
            .rows(
                &tx,
                &format!(
                    "SELECT thread, role, text, signature, captured_at FROM turns
                     WHERE scope_id = {SCOPE_ID} ORDER BY id"
                ),
                &[&scope.user, &scope.peer],
            )
            .await?;
        tx.commit().await.map_err(|e| self.err(e))?;
        Ok(MemoryExport::new(
            facts.iter().map(fact_from_row).collect(),
            turns
                .iter()
                .map(|r| ExportedTurn {
                    thread: r.get(0),
                    role: r.get(1),
                    text: r.get(2),
                    signature: r.get(3),
                    captured_at: r.get(4),
                })
                .collect(),
        ))
    }

    /// Merges an export into the caller's scope in one transaction.
    pub(crate) async fn import_scope(
        &self,
        caller: &Caller,
        data: &MemoryExport,
    ) -> Result<ImportReport> {
        check_export_format(data)?;
        let facts = data
            .facts
            .iter()
            .enumerate()
            .map(|(i, f)| {
                Ok((
                    RememberRequest::new(&f.kind, &f.text)
                        .map_err(at(format!("facts[{i}]")))?
                        .with_confidence(Some(f.confidence))
                        .map_err(at(format!("facts[{i}]")))?,
                    f.state,
                    timestamp_or_now(Some(&f.created_at)),
                    timestamp_or_now(Some(&f.updated_at)),
                    f.origin,
                ))
            })
            .collect::<Result<Vec<_>>>()?;
        // Turns grouped by thread, each thread's in export order.
        let mut threads: Vec<(String, Vec<NewTurn>)> = Vec::new();
        for (i, t) in data.turns.iter().enumerate() {
            let (thread, turn) = validate_turn(i, t)?;
            match threads.iter_mut().find(|(name, _)| *name == thread) {
                Some((_, list)) => list.push(turn),
                None => threads.push((thread, vec![turn])),
            }
        }
        let scope = Scope::of(caller);
        let mut client = self.client().await?;
        let tx = client.transaction().await.map_err(|e| self.err(e))?;
        let scope_id = self.ensure_scope(&tx, &scope).await?;
        let mut report = ImportReport::default();
        for (request, state, created_at, updated_at, origin) in &facts {
            let present = match state {
                // Active copies are unique in storage: the insert decides.
                FactState::Active => false,
                FactState::Retired => self
                    .row_opt(
                        &tx,
                        "SELECT 1 FROM memories WHERE scope_id = $1 AND kind = $2
                         AND text = $3 AND state = $4",
                        &[&scope_id, &request.kind, &request.text, &state_name(*state)],
                    )
                    .await?
                    .is_some(),
            };
            let inserted = !present
                && self
                    .insert_fact(
                        &tx,
                        scope_id,
                        &NewFact {
                            kind: &request.kind,
                            text: &request.text,
                            state: *state,
                            created_at,
                            updated_at,
                            origin: *origin,
                            confidence: request
                                .confidence
                                .unwrap_or(memgate_core::facts::EXPLICIT_CONFIDENCE),
                            thread: None,
                            said_at: None,
                            changed_by: memgate_core::ChangedBy::Api,
                        },
                    )
                    .await?
                    .is_some();
            if inserted {
                report.facts_imported += 1;
            } else {
                report.facts_already_present += 1;
            }
        }
        for (thread, turns) in &threads {
            let stored = self.store_turns(&tx, scope_id, thread, turns).await?;
            report.turns_imported += stored.ids.len();
            report.turns_already_present += stored.already_known;
        }
        tx.commit().await.map_err(|e| self.err(e))?;
        if report.facts_imported + report.turns_imported >= ANALYZE_AFTER_IMPORTED {
            // A bulk import can grow a table many times over; until
            // autovacuum's analyse (up to a minute later) the planner would
            // plan recalls for the old size (33 ms instead of 0.2 ms per
            // memories statement at 1M items). The data is committed: a
            // failed analyse only delays better plans.
            if let Err(e) = client.batch_execute("ANALYZE memories, turns").await {
                tracing::warn!(error = %self.err(e), "ANALYZE after import failed");
            }
        }
        Ok(report)
    }
}

/// Rows an import must add before it refreshes the planner's statistics.
const ANALYZE_AFTER_IMPORTED: usize = 1_000;
