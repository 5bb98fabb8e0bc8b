//! Distillation on PostgreSQL: the queue (`distill_jobs`, `distill_usage`,
//! schema migration 5) and the one transaction that applies a model's
//! operations — `local`'s rules, checked by the same functions
//! ([`check_proposal`], [`check_supersedable`]).
//!
//! A capture queues its new turns in its own transaction, under the
//! thread's capture lock ([`PostgresBackend::queue_new_turns`]): they join
//! the thread's queued job while it has room (`UPDATE … WHERE state =
//! 'queued'`, so a job a worker closed meanwhile is never joined), else
//! start new jobs. A worker takes a thread's oldest job with a lease
//! (`claimed_by`, `claimed_until`, migration 7; `SKIP LOCKED`), so
//! replicas sharing the queue call the model once per job; a lease that
//! ran out (its worker was killed) lets another take the job. Taking jobs
//! is one statement (the claim, and the turns it reads), and so is ending
//! a job the model gave no operations: an idle worker polls, and most
//! turns change no fact.
//! [`DistillQueue::apply`] locks the job's row first (`FOR UPDATE`, or the
//! ending `UPDATE` itself): of two workers that ran the same job after a
//! lease ran out, the second finds it done and writes nothing.

use crate::backend::{PostgresBackend, Scope};
use crate::facts::{fact_from_row, FACT_COLUMNS};
use async_trait::async_trait;
use deadpool_postgres::GenericClient;
use memgate_core::distill::{
    check_proposal, check_supersedable, Applied, CheckedProposal, DistillJob, DistillQueue,
    JobTurn, Operation, ParkedJob, QueueDepth, QueueFigures, QueueLimits, SupersedeTarget,
};
use memgate_core::facts::{ChangedBy, FactOrigin, NewFact};
use memgate_core::time::now_rfc3339;
use memgate_core::{Fact, FactState, MemoryError, Result};
use memgate_recall::block::MAX_SEARCH_TOP_K;
use memgate_recall::citation::{parse_memory_citation, turn_citation};
use memgate_recall::ranked::{Among, Origin, Ranked};
use memgate_recall::scope::ScopeKey;
use std::collections::HashMap;
use tokio_postgres::types::ToSql;

/// A job's lease when the handle was opened without `memory.distill`'s
/// limits (`memgate distill` on a store opened for it always has them).
const DEFAULT_LEASE: std::time::Duration = std::time::Duration::from_secs(180);

/// A handle's name in `distill_jobs.claimed_by`: the process and a
/// per-process sequence, so two handles (even in one process) never share
/// a lease.
pub(crate) fn new_claimer() -> String {
    static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let started = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    format!("{}:{started}:{n}", std::process::id())
}

/// What [`PostgresBackend::queue_new_turns`] did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Queued {
    Joined,
    NewJob,
    /// The queue was full: the turns wait for a backfill.
    Skipped,
}

impl PostgresBackend {
    /// Queues `new` (this capture's turn ids of `thread`, ascending) as
    /// distillation work, inside the capture's transaction.
    pub(crate) async fn queue_new_turns(
        &self,
        c: &impl GenericClient,
        scope_id: i64,
        thread: &str,
        new: &[i64],
        limits: QueueLimits,
    ) -> Result<Queued> {
        let (Some(&first), Some(&last)) = (new.first(), new.last()) else {
            return Ok(Queued::Joined);
        };
        let now = now_rfc3339();
        let open = self
            .row_opt(
                c,
                "SELECT j.id, (SELECT count(*) FROM turns t WHERE t.scope_id = j.scope_id
                               AND t.thread = j.thread AND t.id BETWEEN j.first_turn AND j.last_turn)
                 FROM distill_jobs j WHERE j.scope_id = $1 AND j.thread = $2 AND j.state = 'queued'
                 ORDER BY j.id DESC LIMIT 1",
                &[&scope_id, &thread],
            )
            .await?;
        if let Some(open) = open {
            let (job, held): (i64, i64) = (open.get(0), open.get(1));
            if held as usize + new.len() <= limits.max_turns_per_job {
                let joined = self
                    .exec(
                        c,
                        "UPDATE distill_jobs SET last_turn = $2, updated_at = $3
                         WHERE id = $1 AND state = 'queued'",
                        &[&job, &last, &now],
                    )
                    .await?;
                if joined == 1 {
                    return Ok(Queued::Joined);
                }
            }
        }
        let queued: i64 = self
            .row(
                c,
                "SELECT count(*) FROM distill_jobs WHERE state = 'queued'",
                &[],
            )
            .await?
            .get(0);
        if queued as usize >= limits.max_queued_jobs {
            return Ok(Queued::Skipped);
        }
        debug_assert!(first <= last);
        // A capture longer than a job holds becomes several jobs, in order.
        for chunk in new.chunks(limits.max_turns_per_job.max(1)) {
            self.exec(
                c,
                "INSERT INTO distill_jobs (scope_id, thread, first_turn, last_turn, state,
                                           created_at, updated_at)
                 VALUES ($1, $2, $3, $4, 'queued', $5, $5)",
                &[&scope_id, &thread, &chunk[0], &chunk[chunk.len() - 1], &now],
            )
            .await?;
        }
        Ok(Queued::NewJob)
    }

    /// Queues every turn no job covers yet (threads captured before
    /// distillation was turned on): per thread, the turns after its newest
    /// job. Returns how many threads got work.
    async fn backfill(&self) -> Result<usize> {
        let limits = self.distill.ok_or_else(|| {
            MemoryError::Config("memory.distill.enabled is false: nothing distils".to_owned())
        })?;
        let unbounded = QueueLimits {
            max_queued_jobs: usize::MAX,
            ..limits
        };
        let mut client = self.client().await?;
        let tx = client.transaction().await.map_err(|e| self.err(e))?;
        let threads = self
            .rows(
                &tx,
                "SELECT t.scope_id, t.thread,
                        coalesce((SELECT max(j.last_turn) FROM distill_jobs j
                                  WHERE j.scope_id = t.scope_id AND j.thread = t.thread), 0)
                 FROM turns t GROUP BY t.scope_id, t.thread ORDER BY 1, 2",
                &[],
            )
            .await?;
        let mut queued = 0;
        for row in &threads {
            let (scope_id, thread, after): (i64, String, i64) =
                (row.get(0), row.get(1), row.get(2));
            self.lock_thread(&tx, scope_id, &thread).await?;
            let new: Vec<i64> = self
                .rows(
                    &tx,
                    "SELECT id FROM turns WHERE scope_id = $1 AND thread = $2 AND id > $3
                     ORDER BY id",
                    &[&scope_id, &thread, &after],
                )
                .await?
                .iter()
                .map(|r| r.get(0))
                .collect();
            if !new.is_empty() {
                self.queue_new_turns(&tx, scope_id, &thread, &new, unbounded)
                    .await?;
                queued += 1;
            }
        }
        tx.commit().await.map_err(|e| self.err(e))?;
        Ok(queued)
    }

    /// Inserts a distilled fact resting on `checked.sources`, or finds the
    /// identical current one (then nothing is written). True when inserted.
    async fn add_distilled(
        &self,
        c: &impl GenericClient,
        scope_id: i64,
        job: &DistillJob,
        checked: &CheckedProposal,
    ) -> Result<(i64, bool)> {
        let (kind, text) = (&checked.request.kind, &checked.request.text);
        if let Some(id) = self.find_active(c, scope_id, kind, text).await? {
            return Ok((id, false));
        }
        let now = now_rfc3339();
        let fact = NewFact {
            kind,
            text,
            state: FactState::Active,
            created_at: &now,
            updated_at: &now,
            origin: FactOrigin::Distilled,
            confidence: checked.confidence,
            thread: Some(job.thread()),
            said_at: Some(&checked.said_at),
            changed_by: ChangedBy::Model,
        };
        let Some(id) = self.insert_fact(c, scope_id, &fact).await? else {
            // An identical copy was committed meanwhile (another writer).
            let id = self.find_active(c, scope_id, kind, text).await?;
            return id.map(|id| (id, false)).ok_or_else(|| {
                MemoryError::Conflict("an identical fact changed while it was added".to_owned())
            });
        };
        self.exec(
            c,
            "INSERT INTO memory_sources (memory_id, turn_id) SELECT $1, unnest($2::bigint[])",
            &[&id, &checked.sources],
        )
        .await?;
        Ok((id, true))
    }

    /// The current, distilled fact a supersede names (its row locked), or
    /// why it cannot be superseded.
    async fn supersedable(
        &self,
        c: &impl GenericClient,
        scope_id: i64,
        i: usize,
        fact: &str,
    ) -> Result<i64> {
        let id = parse_memory_citation(fact).ok_or_else(|| {
            MemoryError::invalid(
                format!("operations[{i}].fact"),
                format!("`{fact}` is not a fact id (`mem_<n>`)"),
            )
        })?;
        let row = self
            .row_opt(
                c,
                "SELECT state, origin, superseded_by FROM memories
                 WHERE id = $1 AND scope_id = $2 FOR UPDATE",
                &[&id, &scope_id],
            )
            .await?;
        let target = row.map(|r| SupersedeTarget {
            active: r.get::<_, &str>(0) == "active",
            origin: FactOrigin::from_name(r.get(1)),
            superseded: r.get::<_, Option<i64>>(2).is_some(),
        });
        check_supersedable(i, fact, target)?;
        Ok(id)
    }

    /// Closes current fact `old` as replaced by `new` from `valid_to` on: a
    /// new retired version, written by the model, that names its successor.
    async fn close(
        &self,
        c: &impl GenericClient,
        old: i64,
        new: i64,
        valid_to: &str,
    ) -> Result<()> {
        let now = now_rfc3339();
        self.exec(
            c,
            "UPDATE memories SET state = 'retired', version = version + 1, updated_at = $2,
                                 valid_to = $3, superseded_by = $4
             WHERE id = $1",
            &[&old, &now, &valid_to, &new],
        )
        .await?;
        self.exec(
            c,
            "INSERT INTO memory_history
                 (memory_id, version, kind, text, state, recorded_at, confidence, changed_by)
             SELECT id, version, kind, text, state, $2, confidence, 'model'
             FROM memories WHERE id = $1",
            &[&old, &now],
        )
        .await?;
        Ok(())
    }

    /// Erases the distilled facts resting only on the turns of `thread`
    /// (about to be erased), with their history; facts that also rest on
    /// other turns lose these sources and stay. Returns (facts, versions).
    pub(crate) async fn erase_facts_resting_on_thread(
        &self,
        c: &impl GenericClient,
        scope_id: i64,
        thread: &str,
    ) -> Result<(usize, usize)> {
        let touched: Vec<i64> = self
            .rows(
                c,
                "DELETE FROM memory_sources s USING turns t
                 WHERE s.turn_id = t.id AND t.scope_id = $1 AND t.thread = $2
                 RETURNING s.memory_id",
                &[&scope_id, &thread],
            )
            .await?
            .iter()
            .map(|r| r.get(0))
            .collect();
        crate::forget::erase_bare_distilled(c, &self.config, &touched).await
    }

    /// The source turns of each distilled fact in `ranked`, by memory id,
    /// in one statement (explicit memories rest on none and are absent).
    pub(crate) async fn fact_sources(
        &self,
        c: &impl GenericClient,
        ranked: &[Ranked],
    ) -> Result<HashMap<i64, Vec<i64>>> {
        let facts: Vec<i64> = ranked
            .iter()
            .filter(|r| r.origin == Origin::Memory)
            .filter_map(|r| parse_memory_citation(&r.citation))
            .collect();
        if facts.is_empty() {
            return Ok(HashMap::new());
        }
        Ok(self
            .rows(
                c,
                "SELECT memory_id, array_agg(turn_id ORDER BY turn_id) FROM memory_sources
                 WHERE memory_id = ANY($1) GROUP BY memory_id",
                &[&facts],
            )
            .await?
            .iter()
            .map(|r| (r.get(0), r.get(1)))
            .collect())
    }

    /// Ends `job` as read: done, or, when turns joined it while it ran,
    /// queued again from the first turn it did not cover. Only while it is
    /// not done and still starts within what was read; 0 rows otherwise
    /// (a replay).
    async fn finish_job(&self, c: &impl GenericClient, job: &DistillJob) -> Result<u64> {
        self.exec(
            c,
            "UPDATE distill_jobs SET
                 state = CASE WHEN last_turn > $2 THEN state ELSE 'done' END,
                 first_turn = CASE WHEN last_turn > $2 THEN $2 + 1 ELSE first_turn END,
                 attempts = CASE WHEN last_turn > $2 THEN 0 ELSE attempts END,
                 reason = CASE WHEN last_turn > $2 THEN reason END,
                 updated_at = $3, claimed_by = NULL, claimed_until = NULL
             WHERE id = $1 AND state <> 'done' AND first_turn <= $2",
            &[&job.id, &job.through, &now_rfc3339()],
        )
        .await
    }
}

#[async_trait]
impl DistillQueue for PostgresBackend {
    async fn next_jobs(&self, limit: usize, running: &[i64]) -> Result<Vec<DistillJob>> {
        let client = self.client().await?;
        let lease = self.distill.map_or(DEFAULT_LEASE, |l| l.lease);
        // One statement (one round trip; an idle worker runs it every
        // poll): each thread's oldest queued job only (a thread runs in
        // order, on whichever replica holds it), not held by another live
        // worker, rows another worker is taking right now skipped, not
        // waited for; a job this handle holds stays its own (a job backing
        // off is taken again by the same worker). The claim commits with
        // the statement, and the job's turns are read with it.
        let rows = self
            .rows(
                &client,
                "WITH heads AS (
                     SELECT DISTINCT ON (scope_id, thread) id FROM distill_jobs
                     WHERE state = 'queued' ORDER BY scope_id, thread, id),
                 picked AS (
                     SELECT j.id FROM distill_jobs j
                     WHERE j.id IN (SELECT id FROM heads) AND j.state = 'queued'
                       AND NOT (j.id = ANY($1))
                       AND (j.claimed_until IS NULL OR j.claimed_until < now()
                            OR j.claimed_by = $2)
                     ORDER BY j.id LIMIT $3
                     FOR UPDATE SKIP LOCKED),
                 claimed AS (
                     UPDATE distill_jobs j SET claimed_by = $2,
                            claimed_until = now() + make_interval(secs => $4)
                     FROM picked WHERE j.id = picked.id
                     RETURNING j.id, j.scope_id, j.thread, j.first_turn, j.last_turn, j.attempts)
                 SELECT c.id, c.scope_id, c.thread, c.last_turn, c.attempts, s.user_id, s.peer,
                        t.id, t.role, t.speaker, coalesce(t.occurred_at, t.captured_at), t.text
                 FROM claimed c JOIN scopes s ON s.id = c.scope_id
                 LEFT JOIN turns t ON t.scope_id = c.scope_id AND t.thread = c.thread
                                  AND t.id BETWEEN c.first_turn AND c.last_turn
                 ORDER BY c.id, t.seq",
                &[
                    &running,
                    &self.claimer,
                    &(limit as i64),
                    &lease.as_secs_f64(),
                ],
            )
            .await?;
        let mut jobs: Vec<DistillJob> = Vec::new();
        for r in &rows {
            let id: i64 = r.get(0);
            if jobs.last().is_none_or(|j| j.id != id) {
                let thread: String = r.get(2);
                let caller = ScopeKey {
                    user: r.get(5),
                    peer: r.get(6),
                }
                .caller()
                .with_thread(thread.as_str());
                jobs.push(DistillJob {
                    id,
                    caller,
                    turns: Vec::new(),
                    attempts: r.get::<_, i32>(4) as u32,
                    through: r.get(3),
                });
            }
            let Some(turn) = r.get::<_, Option<i64>>(7) else {
                continue;
            };
            let job = jobs.last_mut().expect("pushed above");
            // The claim sees the job's row as last committed (with the
            // turns a capture joined a moment ago); the turns are read in
            // the statement's snapshot, which may not hold those yet. The
            // job covers the turns read: the rest stays queued.
            job.through = if job.turns.is_empty() {
                turn
            } else {
                job.through.max(turn)
            };
            job.turns.push(JobTurn {
                id: turn_citation(turn),
                role: r.get(8),
                speaker: r.get(9),
                said_at: r.get(10),
                text: r.get(11),
            });
        }
        Ok(jobs)
    }

    /// The facts the store's recall finds with the job's turns as the query
    /// (hybrid with an embedder, else by words), and the scope's newest
    /// current distilled facts (as on `local`).
    async fn related_facts(&self, job: &DistillJob, limit: usize) -> Result<Vec<Fact>> {
        let query = job.related_query();
        if query.trim().is_empty() || limit == 0 {
            return Ok(Vec::new());
        }
        let top_k = memgate_recall::ranked::candidate_pool(limit).clamp(1, MAX_SEARCH_TOP_K);
        // Among memories only: the scope's turns say the job's words too
        // (its own turns first of all) and would fill the pool.
        let ids: Vec<i64> = self
            .every_match(&job.caller, &query, top_k, Among::Memories(None))
            .await?
            .iter()
            .filter(|r| r.origin == Origin::Memory)
            .filter_map(|r| parse_memory_citation(&r.citation))
            .take(limit)
            .collect();
        let scope = Scope::of(&job.caller);
        let client = self.client().await?;
        let current = "scope_id = (SELECT id FROM scopes WHERE user_id = $2 AND peer = $3)
             AND state = 'active' AND superseded_by IS NULL";
        let by_rank =
            format!("SELECT {FACT_COLUMNS} FROM memories WHERE id = ANY($1) AND {current}");
        let newest = format!(
            "SELECT {FACT_COLUMNS} FROM memories WHERE {current} AND origin = 'distilled'
             ORDER BY id DESC LIMIT $1"
        );
        // Both on one connection at once: pipelined, one round trip.
        let limit_param = limit as i64;
        let by_rank_params: [&(dyn ToSql + Sync); 3] = [&ids, &scope.user, &scope.peer];
        let newest_params: [&(dyn ToSql + Sync); 3] = [&limit_param, &scope.user, &scope.peer];
        let (by_rank, newest) = tokio::try_join!(
            self.rows(&client, &by_rank, &by_rank_params),
            self.rows(&client, &newest, &newest_params),
        )?;
        let mut ranked: Vec<Fact> = by_rank.iter().map(fact_from_row).collect();
        // In the ranking's order.
        ranked.sort_by_key(|f| {
            parse_memory_citation(&f.id).and_then(|n| ids.iter().position(|i| *i == n))
        });
        let newest: Vec<Fact> = newest.iter().map(fact_from_row).collect();
        Ok(memgate_core::distill::with_newest_distilled(
            ranked,
            newest,
            limit,
            self.vectors.is_some(),
        ))
    }

    async fn apply(&self, job: &DistillJob, operations: &[Operation]) -> Result<Applied> {
        let mut client = self.client().await?;
        let mut applied = Applied::default();
        if operations.is_empty() {
            // Nothing to write but the job's end: one statement.
            applied.replayed = self.finish_job(&client, job).await? == 0;
            return Ok(applied);
        }
        let tx = client.transaction().await.map_err(|e| self.err(e))?;
        let row = self
            .row_opt(
                &tx,
                "SELECT scope_id, state, first_turn FROM distill_jobs WHERE id = $1 FOR UPDATE",
                &[&job.id],
            )
            .await?;
        // Done, gone, or moved past what was read (applied, then joined by
        // newer turns): a replay.
        let Some(row) =
            row.filter(|r| r.get::<_, &str>(1) != "done" && r.get::<_, i64>(2) <= job.through)
        else {
            applied.replayed = true;
            return Ok(applied);
        };
        let scope_id: i64 = row.get(0);
        for (i, operation) in operations.iter().enumerate() {
            match operation {
                Operation::Add(proposal) => {
                    let checked = check_proposal(i, proposal, job, &self.redactor)?;
                    if self.add_distilled(&tx, scope_id, job, &checked).await?.1 {
                        applied.added += 1;
                    } else {
                        applied.already_present += 1;
                    }
                }
                Operation::Supersede { fact, by } => {
                    let old = self.supersedable(&tx, scope_id, i, fact).await?;
                    let checked = check_proposal(i, by, job, &self.redactor)?;
                    let (new, inserted) = self.add_distilled(&tx, scope_id, job, &checked).await?;
                    if new == old {
                        applied.already_present += 1;
                        continue;
                    }
                    self.close(&tx, old, new, &checked.said_at).await?;
                    applied.superseded += 1;
                    if inserted {
                        applied.added += 1;
                    }
                }
            }
        }
        self.finish_job(&tx, job).await?;
        tx.commit().await.map_err(|e| self.err(e))?;
        Ok(applied)
    }

    async fn park(&self, job: i64, reason: &str) -> Result<()> {
        let client = self.client().await?;
        self.exec(
            &client,
            "UPDATE distill_jobs SET state = 'parked', reason = $2, attempts = attempts + 1,
                                     updated_at = $3, claimed_by = NULL, claimed_until = NULL
             WHERE id = $1 AND state = 'queued'",
            &[&job, &reason, &now_rfc3339()],
        )
        .await?;
        Ok(())
    }

    async fn attempt_failed(&self, job: i64, reason: &str) -> Result<()> {
        let client = self.client().await?;
        self.exec(
            &client,
            "UPDATE distill_jobs SET attempts = attempts + 1, reason = $2, updated_at = $3
             WHERE id = $1 AND state = 'queued'",
            &[&job, &reason, &now_rfc3339()],
        )
        .await?;
        Ok(())
    }

    async fn record_usage(&self, day: &str, prompt: u64, completion: u64) -> Result<()> {
        let client = self.client().await?;
        self.exec(
            &client,
            "INSERT INTO distill_usage AS u (day, calls, prompt_tokens, completion_tokens)
             VALUES ($1, 1, $2, $3)
             ON CONFLICT (day) DO UPDATE SET calls = u.calls + 1,
                 prompt_tokens = u.prompt_tokens + excluded.prompt_tokens,
                 completion_tokens = u.completion_tokens + excluded.completion_tokens",
            &[&day, &(prompt as i64), &(completion as i64)],
        )
        .await?;
        Ok(())
    }

    async fn tokens_used(&self, day: &str) -> Result<u64> {
        let client = self.client().await?;
        let n: i64 = self
            .row(
                &client,
                "SELECT coalesce(sum(prompt_tokens + completion_tokens), 0)::bigint
                 FROM distill_usage WHERE day = $1",
                &[&day],
            )
            .await?
            .get(0);
        Ok(n.max(0) as u64)
    }

    async fn parked_jobs(&self) -> Result<Vec<ParkedJob>> {
        let client = self.client().await?;
        Ok(self
            .rows(
                &client,
                "SELECT j.id, j.thread, (SELECT count(*) FROM turns t WHERE t.scope_id = j.scope_id
                        AND t.thread = j.thread AND t.id BETWEEN j.first_turn AND j.last_turn),
                        j.attempts, coalesce(j.reason, ''), j.updated_at
                 FROM distill_jobs j WHERE j.state = 'parked' ORDER BY j.id",
                &[],
            )
            .await?
            .iter()
            .map(|r| ParkedJob {
                id: r.get(0),
                thread: r.get(1),
                turns: r.get::<_, i64>(2) as usize,
                attempts: r.get::<_, i32>(3) as u32,
                reason: r.get(4),
                parked_at: r.get(5),
            })
            .collect())
    }

    async fn retry_parked(&self, job: Option<i64>) -> Result<usize> {
        let client = self.client().await?;
        let n = self
            .exec(
                &client,
                "UPDATE distill_jobs SET state = 'queued', attempts = 0, updated_at = $2,
                                         claimed_by = NULL, claimed_until = NULL
                 WHERE state = 'parked' AND ($1::bigint IS NULL OR id = $1)",
                &[&job, &now_rfc3339()],
            )
            .await?;
        Ok(n as usize)
    }

    async fn queue_figures(&self, day: &str) -> Result<QueueFigures> {
        let client = self.client().await?;
        let r = self
            .row(
                &client,
                "SELECT count(*) FILTER (WHERE state = 'queued'),
                        count(*) FILTER (WHERE state = 'parked'),
                        count(*) FILTER (WHERE state = 'done'),
                        (SELECT coalesce(sum(prompt_tokens + completion_tokens), 0)::bigint
                         FROM distill_usage WHERE day = $1)
                 FROM distill_jobs",
                &[&day],
            )
            .await?;
        let count = |i: usize| r.get::<_, i64>(i).max(0) as u64;
        Ok(QueueFigures {
            queued: count(0),
            parked: count(1),
            done: count(2),
            tokens_today: count(3),
        })
    }

    async fn queue_depth(&self) -> Result<QueueDepth> {
        let client = self.client().await?;
        let r = self
            .row(
                &client,
                "SELECT count(*) FILTER (WHERE state = 'queued'),
                        count(*) FILTER (WHERE state = 'parked')
                 FROM distill_jobs WHERE state IN ('queued', 'parked')",
                &[],
            )
            .await?;
        Ok(QueueDepth {
            queued: r.get::<_, i64>(0) as u64,
            parked: r.get::<_, i64>(1) as u64,
        })
    }

    async fn queue_backfill(&self) -> Result<usize> {
        self.backfill().await
    }
}
