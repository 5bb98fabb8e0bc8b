//! Erasure on PostgreSQL: `forget` a memory with its history, a thread, a
//! whole (user, agent) scope or every scope of a user — `local`'s levels,
//! reports and errors. Erasure follows provenance as on `local`: a thread
//! takes the distilled facts resting only on its turns (and its queued
//! distillation jobs) with it, and a fact takes the earlier facts it
//! superseded.
//!
//! Each forget is one transaction of `DELETE`s; the scope's row goes too for
//! a scope or a user, so the user id itself is gone. What is guaranteed once
//! the call returns: no statement of any replica that starts afterwards can
//! read the erased rows (recall, search, facts, export, SQL by hand), and the
//! rows are not restored by anything memgate does. What is not: the bytes
//! of the deleted row versions stay in the table and index pages (the GIN
//! indexes hold the text's terms) until `VACUUM` — autovacuum, or an
//! operator's `VACUUM` — prunes them and later writes overwrite the freed
//! space; the write-ahead log, its archive, streaming replicas' logs and base
//! backups keep them until they are rotated out. memgate does not run
//! `VACUUM` (it cannot run inside a transaction and rewrites whole tables);
//! an operator who must reclaim the space at once runs
//! `VACUUM (memories, memory_history, turns, scopes)` in memgate's schema.
//!
//! Concurrency: the scope's row is locked `FOR UPDATE` first, so a forget
//! waits for captures and remembers already writing to that scope and later
//! ones wait for the forget; a write that was waiting when its scope was
//! erased fails (a foreign-key error, nothing stored) and succeeds when
//! retried, creating the scope anew. A thread's forget also takes the
//! thread's capture lock, so it never interleaves with a capture of it.

use crate::backend::{PostgresBackend, Scope};
use crate::config::PostgresConfig;
use crate::pool::query;
use deadpool_postgres::GenericClient;
use memgate_core::{Caller, ForgetReport, ForgetTarget, MemoryError, Result};

impl PostgresBackend {
    /// Erases `target` in the caller's scope (see the module doc for what
    /// that guarantees). Nothing there is zero counts; a fact id of another
    /// scope is not found.
    pub(crate) async fn forget_target(
        &self,
        caller: &Caller,
        target: &ForgetTarget,
    ) -> Result<ForgetReport> {
        let (fact, thread) = memgate_recall::citation::named_by(caller, target)?;
        let scope = Scope::of(caller);
        let mut client = self.client().await?;
        let tx = client.transaction().await.map_err(|e| self.err(e))?;
        let mut report = ForgetReport::default();
        if *target == ForgetTarget::User {
            let scopes = self
                .rows(
                    &tx,
                    "SELECT id FROM scopes WHERE user_id = $1 ORDER BY id FOR UPDATE",
                    &[&scope.user],
                )
                .await?;
            for row in &scopes {
                let erased = self.erase_scope(&tx, row.get(0)).await?;
                report.facts += erased.facts;
                report.versions += erased.versions;
                report.turns += erased.turns;
            }
            // Handoffs in flight carry the user's task too.
            self.exec(
                &tx,
                "DELETE FROM handoffs WHERE user_id = $1",
                &[&scope.user],
            )
            .await?;
        } else {
            let found = self
                .row_opt(
                    &tx,
                    "SELECT id FROM scopes WHERE user_id = $1 AND peer = $2 FOR UPDATE",
                    &[&scope.user, &scope.peer],
                )
                .await?;
            match (found.map(|r| r.get::<_, i64>(0)), target) {
                (None, ForgetTarget::Fact { .. }) => return Err(not_found(fact)),
                (None, _) => {}
                (Some(scope_id), ForgetTarget::Fact { .. }) => {
                    report = self.erase_fact(&tx, scope_id, fact).await?;
                }
                (Some(scope_id), ForgetTarget::Thread) => {
                    let thread = thread.as_deref().unwrap_or_default();
                    self.lock_thread(&tx, scope_id, thread).await?;
                    (report.facts, report.versions) = self
                        .erase_facts_resting_on_thread(&tx, scope_id, thread)
                        .await?;
                    self.exec(
                        &tx,
                        "DELETE FROM distill_jobs WHERE scope_id = $1 AND thread = $2",
                        &[&scope_id, &thread],
                    )
                    .await?;
                    report.turns = self
                        .exec(
                            &tx,
                            "DELETE FROM turns WHERE scope_id = $1 AND thread = $2",
                            &[&scope_id, &thread],
                        )
                        .await? as usize;
                }
                (Some(scope_id), _) => report = self.erase_scope(&tx, scope_id).await?,
            }
        }
        tx.commit().await.map_err(|e| self.err(e))?;
        tracing::info!(
            target_kind = target.as_str(),
            facts = report.facts,
            versions = report.versions,
            turns = report.turns,
            "postgres forget"
        );
        Ok(report)
    }

    /// Memory `n` (any state) of `scope_id` with every recorded version,
    /// and the earlier facts it superseded (directly or through others):
    /// they are its past versions.
    async fn erase_fact(
        &self,
        c: &impl GenericClient,
        scope_id: i64,
        n: Option<i64>,
    ) -> Result<ForgetReport> {
        let id = n.unwrap_or_default();
        let chain: Vec<i64> = self
            .rows(
                c,
                "WITH RECURSIVE chain(id) AS (
                     SELECT id FROM memories WHERE id = $1 AND scope_id = $2
                     UNION SELECT m.id FROM memories m JOIN chain ON m.superseded_by = chain.id
                 )
                 SELECT m.id FROM memories m JOIN chain USING (id) ORDER BY m.id FOR UPDATE OF m",
                &[&id, &scope_id],
            )
            .await?
            .iter()
            .map(|r| r.get(0))
            .collect();
        if chain.is_empty() {
            return Err(not_found(n));
        }
        let (facts, versions) = erase_memories(c, &self.config, &chain).await?;
        Ok(ForgetReport {
            facts,
            versions,
            turns: 0,
        })
    }

    /// Everything of `scope_id`: memories with history, turns, the scope row.
    async fn erase_scope(&self, c: &impl GenericClient, scope_id: i64) -> Result<ForgetReport> {
        self.exec(
            c,
            "DELETE FROM distill_jobs WHERE scope_id = $1",
            &[&scope_id],
        )
        .await?;
        let versions = self
            .exec(
                c,
                "DELETE FROM memory_history WHERE memory_id IN
                     (SELECT id FROM memories WHERE scope_id = $1)",
                &[&scope_id],
            )
            .await?;
        let facts = self
            .exec(c, "DELETE FROM memories WHERE scope_id = $1", &[&scope_id])
            .await?;
        let turns = self
            .exec(c, "DELETE FROM turns WHERE scope_id = $1", &[&scope_id])
            .await?;
        self.exec(c, "DELETE FROM scopes WHERE id = $1", &[&scope_id])
            .await?;
        Ok(ForgetReport {
            facts: facts as usize,
            versions: versions as usize,
            turns: turns as usize,
        })
    }
}

fn not_found(n: Option<i64>) -> MemoryError {
    MemoryError::NotFound(format!(
        "memory mem_{} in this scope",
        n.unwrap_or_default()
    ))
}

/// Erases memories `ids` (any state) with their history; facts they
/// superseded no longer name them. Returns (facts, versions).
pub(crate) async fn erase_memories(
    c: &impl GenericClient,
    config: &PostgresConfig,
    ids: &[i64],
) -> Result<(usize, usize)> {
    if ids.is_empty() {
        return Ok((0, 0));
    }
    let versions = query(
        c,
        config,
        "WITH gone AS (DELETE FROM memory_history WHERE memory_id = ANY($1) RETURNING 1)
         SELECT count(*) FROM gone",
        &[&ids],
    )
    .await?[0]
        .get::<_, i64>(0);
    query(
        c,
        config,
        "UPDATE memories SET superseded_by = NULL WHERE superseded_by = ANY($1)",
        &[&ids],
    )
    .await?;
    let facts = query(
        c,
        config,
        "WITH gone AS (DELETE FROM memories WHERE id = ANY($1) RETURNING 1)
         SELECT count(*) FROM gone",
        &[&ids],
    )
    .await?[0]
        .get::<_, i64>(0);
    Ok((facts as usize, versions as usize))
}

/// Erases the distilled facts among `touched` (facts that just lost
/// sources) that rest on no turn any more, with their history; explicit
/// facts and facts with sources left stay. Returns (facts, versions).
pub(crate) async fn erase_bare_distilled(
    c: &impl GenericClient,
    config: &PostgresConfig,
    touched: &[i64],
) -> Result<(usize, usize)> {
    if touched.is_empty() {
        return Ok((0, 0));
    }
    let bare: Vec<i64> = query(
        c,
        config,
        "SELECT m.id FROM memories m WHERE m.id = ANY($1) AND m.origin = 'distilled'
         AND NOT EXISTS (SELECT 1 FROM memory_sources s WHERE s.memory_id = m.id)",
        &[&touched],
    )
    .await?
    .iter()
    .map(|r| r.get(0))
    .collect();
    erase_memories(c, config, &bare).await
}
