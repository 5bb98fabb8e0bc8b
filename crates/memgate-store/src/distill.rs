//! The distillation queue in the file (`distill_jobs`, `distill_usage`) and
//! the one transaction that applies a model's operations.
//!
//! A capture that stores new turns of a thread queues them in the same
//! transaction ([`queue_new_turns`]): they join the thread's queued job
//! while it has room, else start a new one, so a thread's jobs are in turn
//! order and the queue is bounded ([`QueueLimits`]). [`apply`] validates
//! every operation against the job and the scope, writes them, and marks
//! the job done, all in the transaction it is handed: an error rolls
//! everything back, and a job already done writes nothing again.

use crate::error::db_error;
use crate::facts::{self, find_active, state_name};
use crate::index::IndexWrites;
use memgate_core::distill::{
    check_proposal, check_supersedable, Applied, CheckedProposal, DistillJob, JobTurn, Operation,
    ParkedJob, QueueDepth, QueueFigures, QueueLimits, SupersedeTarget,
};
use memgate_core::facts::{ChangedBy, FactOrigin, NewFact};
use memgate_core::time::now_rfc3339;
use memgate_core::{FactState, MemoryError, Redactor, Result};
use memgate_recall::citation::{parse_memory_citation, turn_citation};
use memgate_recall::scope::ScopeKey;
use rusqlite::{params, Connection, OptionalExtension};

/// Highest turn id in the file (0 when empty): turns stored after this
/// read are the capture's new ones.
pub(crate) fn last_turn_id(conn: &Connection) -> Result<i64> {
    conn.prepare_cached("SELECT coalesce(max(id), 0) FROM turns")
        .and_then(|mut s| s.query_row([], |r| r.get(0)))
        .map_err(db_error)
}

/// What [`queue_new_turns`] did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Queued {
    Nothing,
    Joined,
    NewJob,
    /// The queue was full: the turns wait for a backfill.
    Skipped,
}

/// Queues `thread`'s turns with ids above `after` as distillation work.
pub(crate) fn queue_new_turns(
    tx: &Connection,
    scope: i64,
    thread: &str,
    after: i64,
    limits: QueueLimits,
) -> Result<Queued> {
    let (count, first, last): (i64, Option<i64>, Option<i64>) = tx
        .prepare_cached(
            "SELECT count(*), min(id), max(id) FROM turns
             WHERE scope_id = ?1 AND thread = ?2 AND id > ?3",
        )
        .and_then(|mut s| {
            s.query_row(params![scope, thread, after], |r| {
                Ok((r.get(0)?, r.get(1)?, r.get(2)?))
            })
        })
        .map_err(db_error)?;
    let (Some(first), Some(last)) = (first, last) else {
        return Ok(Queued::Nothing);
    };
    let now = now_rfc3339();
    let open: Option<(i64, i64)> = tx
        .prepare_cached(
            "SELECT j.id, (SELECT count(*) FROM turns t WHERE t.scope_id = j.scope_id
                           AND t.thread = j.thread AND t.id BETWEEN j.first_turn AND j.last_turn)
             FROM distill_jobs j WHERE j.scope_id = ?1 AND j.thread = ?2 AND j.state = 'queued'
             ORDER BY j.id DESC LIMIT 1",
        )
        .and_then(|mut s| {
            s.query_row(params![scope, thread], |r| Ok((r.get(0)?, r.get(1)?)))
                .optional()
        })
        .map_err(db_error)?;
    if let Some((job, held)) = open {
        if (held + count) as usize <= limits.max_turns_per_job {
            tx.prepare_cached(
                "UPDATE distill_jobs SET last_turn = ?2, updated_at = ?3 WHERE id = ?1",
            )
            .and_then(|mut s| s.execute(params![job, last, now]))
            .map_err(db_error)?;
            return Ok(Queued::Joined);
        }
    }
    let queued: i64 = tx
        .prepare_cached("SELECT count(*) FROM distill_jobs WHERE state = 'queued'")
        .and_then(|mut s| s.query_row([], |r| r.get(0)))
        .map_err(db_error)?;
    if queued as usize >= limits.max_queued_jobs {
        return Ok(Queued::Skipped);
    }
    // A capture longer than a job holds becomes several jobs, in order.
    let ids: Vec<i64> = tx
        .prepare_cached(
            "SELECT id FROM turns WHERE scope_id = ?1 AND thread = ?2 AND id > ?3 ORDER BY id",
        )
        .and_then(|mut s| {
            s.query_map(params![scope, thread, after], |r| r.get(0))?
                .collect()
        })
        .map_err(db_error)?;
    debug_assert_eq!(ids.first(), Some(&first));
    for chunk in ids.chunks(limits.max_turns_per_job.max(1)) {
        tx.prepare_cached(
            "INSERT INTO distill_jobs (scope_id, thread, first_turn, last_turn, state,
                                       created_at, updated_at)
             VALUES (?1, ?2, ?3, ?4, 'queued', ?5, ?5)",
        )
        .and_then(|mut s| {
            s.execute(params![
                scope,
                thread,
                chunk[0],
                chunk[chunk.len() - 1],
                now
            ])
        })
        .map_err(db_error)?;
    }
    Ok(Queued::NewJob)
}

/// Queues every turn of every thread not yet covered by a job (the
/// backfill): per thread, the turns after its newest job. Returns how many
/// threads got work.
pub(crate) fn queue_backfill(tx: &Connection, limits: QueueLimits) -> Result<usize> {
    let threads: Vec<(i64, String, i64)> = tx
        .prepare(
            "SELECT t.scope_id, t.thread,
                    coalesce((SELECT max(j.last_turn) FROM distill_jobs j
                              WHERE j.scope_id = t.scope_id AND j.thread = t.thread), 0)
             FROM turns t GROUP BY t.scope_id, t.thread",
        )
        .and_then(|mut s| {
            s.query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))?
                .collect()
        })
        .map_err(db_error)?;
    let mut queued = 0;
    let unbounded = QueueLimits {
        max_queued_jobs: usize::MAX,
        ..limits
    };
    for (scope, thread, after) in threads {
        if queue_new_turns(tx, scope, &thread, after, unbounded)? != Queued::Nothing {
            queued += 1;
        }
    }
    Ok(queued)
}

type JobRow = (i64, i64, String, i64, i64, u32, String, String);

/// Up to `limit` queued jobs, oldest first, one per thread, none of the
/// threads of `running`, with their turns.
pub(crate) fn next_jobs(
    conn: &Connection,
    limit: usize,
    running: &[i64],
) -> Result<Vec<DistillJob>> {
    let busy: Vec<(i64, String)> = running
        .iter()
        .filter_map(|id| {
            conn.prepare_cached("SELECT scope_id, thread FROM distill_jobs WHERE id = ?1")
                .and_then(|mut s| s.query_row([id], |r| Ok((r.get(0)?, r.get(1)?))).optional())
                .ok()
                .flatten()
        })
        .collect();
    let rows: Vec<JobRow> = conn
        .prepare_cached(
            "SELECT j.id, j.scope_id, j.thread, j.first_turn, j.last_turn, j.attempts,
                    s.user_id, s.peer
             FROM distill_jobs j JOIN scopes s ON s.id = j.scope_id
             WHERE j.state = 'queued' ORDER BY j.id LIMIT 256",
        )
        .and_then(|mut s| {
            s.query_map([], |r| {
                Ok((
                    r.get(0)?,
                    r.get(1)?,
                    r.get(2)?,
                    r.get(3)?,
                    r.get(4)?,
                    r.get(5)?,
                    r.get(6)?,
                    r.get(7)?,
                ))
            })?
            .collect()
        })
        .map_err(db_error)?;
    let mut seen: Vec<(i64, String)> = busy;
    let mut jobs = Vec::new();
    for (id, scope, thread, first, last, attempts, user, peer) in rows {
        if jobs.len() >= limit {
            break;
        }
        let place = (scope, thread);
        if seen.contains(&place) {
            continue;
        }
        let turns = job_turns(conn, scope, &place.1, first, last)?;
        let caller = ScopeKey { user, peer }
            .caller()
            .with_thread(place.1.as_str());
        seen.push(place);
        jobs.push(DistillJob {
            id,
            caller,
            turns,
            attempts,
            through: last,
        });
    }
    Ok(jobs)
}

fn job_turns(
    conn: &Connection,
    scope: i64,
    thread: &str,
    first: i64,
    last: i64,
) -> Result<Vec<JobTurn>> {
    conn.prepare_cached(
        "SELECT id, role, speaker, coalesce(occurred_at, captured_at), text FROM turns
         WHERE scope_id = ?1 AND thread = ?2 AND id BETWEEN ?3 AND ?4 ORDER BY seq",
    )
    .and_then(|mut s| {
        s.query_map(params![scope, thread, first, last], |r| {
            Ok(JobTurn {
                id: turn_citation(r.get(0)?),
                role: r.get(1)?,
                speaker: r.get(2)?,
                said_at: r.get(3)?,
                text: r.get(4)?,
            })
        })?
        .collect()
    })
    .map_err(db_error)
}

/// Inserts a distilled fact resting on `checked.sources`, or finds the
/// identical current one (then nothing is written). True when inserted.
fn add_fact(
    tx: &Connection,
    index: &mut IndexWrites,
    scope: i64,
    job: &DistillJob,
    checked: &CheckedProposal,
) -> Result<(i64, bool)> {
    if let Some(id) = find_active(tx, scope, &checked.request.kind, &checked.request.text)? {
        return Ok((id, false));
    }
    let now = now_rfc3339();
    let id = facts::insert(
        tx,
        index,
        scope,
        &NewFact {
            kind: &checked.request.kind,
            text: &checked.request.text,
            state: FactState::Active,
            created_at: &now,
            updated_at: &now,
            origin: FactOrigin::Distilled,
            confidence: checked.confidence,
            thread: Some(job.thread()),
            said_at: Some(&checked.said_at),
            changed_by: ChangedBy::Model,
        },
    )?;
    let mut source = tx
        .prepare_cached("INSERT INTO memory_sources (memory_id, turn_id) VALUES (?1, ?2)")
        .map_err(db_error)?;
    for turn in &checked.sources {
        source.execute(params![id, turn]).map_err(db_error)?;
    }
    tx.prepare_cached("UPDATE memories SET job_id = ?2 WHERE id = ?1")
        .and_then(|mut s| s.execute(params![id, job.id]))
        .map_err(db_error)?;
    Ok((id, true))
}

/// Closes current fact `old` as replaced by `new` from `valid_to` on: a new
/// retired version, written by the model, that names its successor.
fn close(
    tx: &Connection,
    index: &mut IndexWrites,
    old: i64,
    new: i64,
    valid_to: &str,
) -> Result<()> {
    let version: u32 = tx
        .prepare_cached("SELECT version FROM memories WHERE id = ?1")
        .and_then(|mut s| s.query_row([old], |r| r.get(0)))
        .map_err(db_error)?;
    let now = now_rfc3339();
    tx.prepare_cached(
        "UPDATE memories SET state = ?2, version = ?3, updated_at = ?4, valid_to = ?5,
                             superseded_by = ?6
         WHERE id = ?1",
    )
    .and_then(|mut s| {
        s.execute(params![
            old,
            state_name(FactState::Retired),
            version + 1,
            now,
            valid_to,
            new
        ])
    })
    .map_err(db_error)?;
    tx.prepare_cached(
        "INSERT INTO memory_history
             (memory_id, version, kind, text, state, recorded_at, confidence, changed_by)
         SELECT id, version, kind, text, state, ?2, confidence, 'model'
         FROM memories WHERE id = ?1",
    )
    .and_then(|mut s| s.execute(params![old, now]))
    .map_err(db_error)?;
    index.remove_memory(old);
    Ok(())
}

/// The current, distilled fact a supersede names, or why it cannot be
/// superseded.
fn supersedable(tx: &Connection, scope: i64, i: usize, fact: &str) -> Result<i64> {
    let id = parse_memory_citation(fact).ok_or_else(|| {
        MemoryError::invalid(
            format!("operations[{i}].fact"),
            format!("`{fact}` is not a fact id (`mem_<n>`)"),
        )
    })?;
    let row: Option<(String, String, Option<i64>)> = tx
        .prepare_cached(
            "SELECT state, origin, superseded_by FROM memories WHERE id = ?1 AND scope_id = ?2",
        )
        .and_then(|mut s| {
            s.query_row(params![id, scope], |r| {
                Ok((r.get(0)?, r.get(1)?, r.get(2)?))
            })
            .optional()
        })
        .map_err(db_error)?;
    let target = row.map(|(state, origin, superseded)| SupersedeTarget {
        active: state == "active",
        origin: FactOrigin::from_name(&origin),
        superseded: superseded.is_some(),
    });
    check_supersedable(i, fact, target)?;
    Ok(id)
}

/// Applies a job's operations and marks it done, in `tx` (see the module
/// doc). A job that is done, or gone (its thread forgotten), writes nothing.
pub(crate) fn apply(
    tx: &Connection,
    index: &mut IndexWrites,
    job: &DistillJob,
    operations: &[Operation],
    redactor: &Redactor,
) -> Result<Applied> {
    let row: Option<(i64, String, i64, i64)> = tx
        .prepare_cached(
            "SELECT scope_id, state, first_turn, last_turn FROM distill_jobs WHERE id = ?1",
        )
        .and_then(|mut s| {
            s.query_row([job.id], |r| {
                Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?))
            })
            .optional()
        })
        .map_err(db_error)?;
    let mut applied = Applied::default();
    // Done, gone, or moved past what was read (applied, then joined by
    // newer turns): a replay.
    let Some((scope, _, _, last_turn)) =
        row.filter(|(_, state, first, _)| state != "done" && *first <= job.through)
    else {
        applied.replayed = true;
        return Ok(applied);
    };
    for (i, operation) in operations.iter().enumerate() {
        match operation {
            Operation::Add(proposal) => {
                let checked = check_proposal(i, proposal, job, redactor)?;
                if add_fact(tx, index, scope, job, &checked)?.1 {
                    applied.added += 1;
                } else {
                    applied.already_present += 1;
                }
            }
            Operation::Supersede { fact, by } => {
                let old = supersedable(tx, scope, i, fact)?;
                let checked = check_proposal(i, by, job, redactor)?;
                let (new, inserted) = add_fact(tx, index, scope, job, &checked)?;
                if new == old {
                    applied.already_present += 1;
                    continue;
                }
                close(tx, index, old, new, &checked.said_at)?;
                applied.superseded += 1;
                if inserted {
                    applied.added += 1;
                }
            }
        }
    }
    let now = now_rfc3339();
    if last_turn > job.through {
        // Turns joined the job while it ran: they stay queued.
        tx.prepare_cached(
            "UPDATE distill_jobs SET first_turn = ?2, attempts = 0, updated_at = ?3 WHERE id = ?1",
        )
        .and_then(|mut s| s.execute(params![job.id, job.through + 1, now]))
        .map_err(db_error)?;
    } else {
        tx.prepare_cached(
            "UPDATE distill_jobs SET state = 'done', reason = NULL, updated_at = ?2 WHERE id = ?1",
        )
        .and_then(|mut s| s.execute(params![job.id, now]))
        .map_err(db_error)?;
    }
    Ok(applied)
}

/// Parks `job` with `reason` (a queued job only; a done one stays done).
pub(crate) fn park(tx: &Connection, job: i64, reason: &str) -> Result<()> {
    tx.prepare_cached(
        "UPDATE distill_jobs SET state = 'parked', reason = ?2, attempts = attempts + 1,
                                 updated_at = ?3
         WHERE id = ?1 AND state = 'queued'",
    )
    .and_then(|mut s| s.execute(params![job, reason, now_rfc3339()]))
    .map_err(db_error)?;
    Ok(())
}

/// Counts a failed attempt of a queued job, keeping its last reason.
pub(crate) fn attempt_failed(tx: &Connection, job: i64, reason: &str) -> Result<()> {
    tx.prepare_cached(
        "UPDATE distill_jobs SET attempts = attempts + 1, reason = ?2, updated_at = ?3
         WHERE id = ?1 AND state = 'queued'",
    )
    .and_then(|mut s| s.execute(params![job, reason, now_rfc3339()]))
    .map_err(db_error)?;
    Ok(())
}

pub(crate) fn record_usage(tx: &Connection, day: &str, prompt: u64, completion: u64) -> Result<()> {
    tx.prepare_cached(
        "INSERT INTO distill_usage (day, calls, prompt_tokens, completion_tokens)
         VALUES (?1, 1, ?2, ?3)
         ON CONFLICT (day) DO UPDATE SET calls = calls + 1,
             prompt_tokens = prompt_tokens + ?2, completion_tokens = completion_tokens + ?3",
    )
    .and_then(|mut s| s.execute(params![day, prompt as i64, completion as i64]))
    .map_err(db_error)?;
    Ok(())
}

pub(crate) fn tokens_used(conn: &Connection, day: &str) -> Result<u64> {
    conn.prepare_cached(
        "SELECT coalesce(sum(prompt_tokens + completion_tokens), 0) FROM distill_usage
         WHERE day = ?1",
    )
    .and_then(|mut s| s.query_row([day], |r| r.get::<_, i64>(0)))
    .map(|n| n.max(0) as u64)
    .map_err(db_error)
}

pub(crate) fn parked_jobs(conn: &Connection) -> Result<Vec<ParkedJob>> {
    conn.prepare_cached(
        "SELECT j.id, j.thread, (SELECT count(*) FROM turns t WHERE t.scope_id = j.scope_id
                AND t.thread = j.thread AND t.id BETWEEN j.first_turn AND j.last_turn),
                j.attempts, coalesce(j.reason, ''), j.updated_at
         FROM distill_jobs j WHERE j.state = 'parked' ORDER BY j.id",
    )
    .and_then(|mut s| {
        s.query_map([], |r| {
            Ok(ParkedJob {
                id: r.get(0)?,
                thread: r.get(1)?,
                turns: r.get::<_, i64>(2)? as usize,
                attempts: r.get(3)?,
                reason: r.get(4)?,
                parked_at: r.get(5)?,
            })
        })?
        .collect()
    })
    .map_err(db_error)
}

pub(crate) fn retry_parked(tx: &Connection, job: Option<i64>) -> Result<usize> {
    let sql = "UPDATE distill_jobs SET state = 'queued', attempts = 0, updated_at = ?2
               WHERE state = 'parked' AND (?1 IS NULL OR id = ?1)";
    tx.prepare_cached(sql)
        .and_then(|mut s| s.execute(params![job, now_rfc3339()]))
        .map_err(db_error)
}

pub(crate) fn figures(conn: &Connection, day: &str) -> Result<QueueFigures> {
    let QueueDepth { queued, parked } = depth(conn)?;
    let done = conn
        .prepare_cached("SELECT count(*) FROM distill_jobs WHERE state = 'done'")
        .and_then(|mut s| s.query_row([], |r| r.get::<_, i64>(0)))
        .map_err(db_error)?;
    Ok(QueueFigures {
        queued,
        parked,
        done: done as u64,
        tokens_today: tokens_used(conn, day)?,
    })
}

/// Queued and parked jobs, read through `distill_jobs_by_state` alone.
pub(crate) fn depth(conn: &Connection) -> Result<QueueDepth> {
    conn.prepare_cached(
        "SELECT count(*) FILTER (WHERE state = 'queued'), count(*) FILTER (WHERE state = 'parked')
         FROM distill_jobs WHERE state IN ('queued', 'parked')",
    )
    .and_then(|mut s| {
        s.query_row([], |r| {
            Ok(QueueDepth {
                queued: r.get::<_, i64>(0)? as u64,
                parked: r.get::<_, i64>(1)? as u64,
            })
        })
    })
    .map_err(db_error)
}

/// The scope's current facts named by `ids` (the ranking's), in that
/// order, with its newest current distilled facts, `limit` in all
/// ([`memgate_core::distill::with_newest_distilled`]; `by_meaning`: the
/// ranking was hybrid).
pub(crate) fn related_facts(
    conn: &Connection,
    scope: i64,
    ids: &[i64],
    limit: usize,
    by_meaning: bool,
) -> Result<Vec<memgate_core::Fact>> {
    let mut ranked = Vec::new();
    for &id in ids {
        if let Some(fact) = facts::load_in_scope(conn, scope, id)? {
            if fact.is_current() {
                ranked.push(fact);
            }
        }
    }
    let newest = facts::newest_distilled(conn, scope, limit)?;
    Ok(memgate_core::distill::with_newest_distilled(
        ranked, newest, limit, by_meaning,
    ))
}
