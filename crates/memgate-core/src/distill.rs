//! The distillation queue's contract: what a store that distils (`local`)
//! offers the background worker (`memgate-distill`), so the worker names no
//! backend and the store knows no model.
//!
//! A capture with distillation on commits, in its own transaction, a job
//! naming the thread's new turns. The worker takes jobs in order per
//! thread, asks a model for [`Operation`]s, and hands them back to
//! [`DistillQueue::apply`], which applies all of a job's operations in one
//! transaction (and marks the job done in it) or none; a job that cannot be
//! applied is parked with its reason, never dropped.

use crate::facts::{check_confidence, Fact, FactOrigin};
use crate::redaction::redact_remember;
use crate::{Caller, MemoryError, Redactor, RememberRequest, Result};
use async_trait::async_trait;
use serde::{Deserialize, Serialize};

/// How a store queues jobs, from `memory.distill` (the factory hands it
/// over in [`crate::BackendContext::distill`]; `None`: no jobs are queued).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct QueueLimits {
    /// A thread's new turns join its queued job up to this many turns.
    pub max_turns_per_job: usize,
    /// Beyond this many queued jobs new turns are not queued (counted;
    /// `memgate distill` picks them up later).
    pub max_queued_jobs: usize,
    /// How long a worker holds a job it took before another worker (a
    /// replica sharing the store) may take it: longer than a job's calls
    /// can last, so one model call is made per job while its worker lives.
    pub lease: std::time::Duration,
}

/// One turn a job asks the model about (stored redacted).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct JobTurn {
    /// The turn's citation (`turn_<n>`): what an operation cites.
    pub id: String,
    /// `human` or `ai`.
    pub role: String,
    pub speaker: Option<String>,
    /// When it was said (the host's time, else the capture's).
    pub said_at: String,
    pub text: String,
}

/// A queued job: the new turns of one thread.
#[derive(Clone, Debug, PartialEq)]
pub struct DistillJob {
    pub id: i64,
    /// The scope's owner and peer, and the thread the turns belong to.
    pub caller: Caller,
    pub turns: Vec<JobTurn>,
    /// Failed attempts so far (a transient failure is retried).
    pub attempts: u32,
    /// The last turn id the job covered when it was read: turns captured
    /// since join it and stay queued after it is applied.
    pub through: i64,
}

/// Most characters of a job's turns the search for its related facts
/// takes as its query.
pub const RELATED_QUERY_CHARS: usize = 1_000;

impl DistillJob {
    /// The query that finds the facts this job may change: its turns'
    /// text, joined, at most [`RELATED_QUERY_CHARS`] characters.
    pub fn related_query(&self) -> String {
        let joined: Vec<&str> = self.turns.iter().map(|t| t.text.as_str()).collect();
        joined.join(" ").chars().take(RELATED_QUERY_CHARS).collect()
    }

    pub fn thread(&self) -> &str {
        self.caller.thread.as_deref().unwrap_or_default()
    }

    pub fn cites(&self, turn: &str) -> bool {
        self.turns.iter().any(|t| t.id == turn)
    }
}

/// A fact the model proposes, with the turns it rests on.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ProposedFact {
    pub kind: String,
    pub text: String,
    pub confidence: f64,
    /// Turn citations of the job (at least one).
    pub sources: Vec<String>,
}

/// What the model may do; it never deletes.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum Operation {
    Add(ProposedFact),
    /// Closes current fact `fact` (`valid_to`, `superseded_by`) and adds
    /// its replacement; the old version stays in history.
    Supersede {
        fact: String,
        by: ProposedFact,
    },
}

/// A proposal as a store writes it: checked like an explicit save
/// (normalised, bounded, redacted: a text that is a secret is refused), its
/// confidence in 0..1, every source a turn of the job.
#[derive(Clone, Debug, PartialEq)]
pub struct CheckedProposal {
    pub request: RememberRequest,
    pub confidence: f64,
    /// The cited turns' row ids, sorted, without repeats.
    pub sources: Vec<i64>,
    /// When the latest cited turn was said.
    pub said_at: String,
}

/// Checks operation `i`'s proposal against its job; errors name
/// `operations[i].<field>`. Both stores apply proposals through this, so
/// one answer is accepted or refused alike on either.
pub fn check_proposal(
    i: usize,
    proposal: &ProposedFact,
    job: &DistillJob,
    redactor: &Redactor,
) -> Result<CheckedProposal> {
    let at = |field: &str| format!("operations[{i}].{field}");
    let request = RememberRequest::new(&proposal.kind, &proposal.text).map_err(|e| match e {
        MemoryError::InvalidInput { field, rule } => MemoryError::invalid(at(&field), rule),
        other => other,
    })?;
    let request = redact_remember(redactor, &request).map_err(|_| {
        MemoryError::invalid(at("text"), "is a secret; memory does not keep secrets")
    })?;
    let confidence = check_confidence(&at("confidence"), proposal.confidence)?;
    if proposal.sources.is_empty() {
        return Err(MemoryError::invalid(
            at("sources"),
            "must cite at least one turn of the job",
        ));
    }
    let mut sources = Vec::new();
    let mut said_at = String::new();
    for source in &proposal.sources {
        let turn = job.turns.iter().find(|t| &t.id == source).ok_or_else(|| {
            MemoryError::invalid(
                at("sources"),
                format!("`{source}` is not a turn of this job"),
            )
        })?;
        sources.push(
            source
                .strip_prefix("turn_")
                .and_then(|n| n.parse().ok())
                .unwrap_or_default(),
        );
        if turn.said_at > said_at {
            said_at.clone_from(&turn.said_at);
        }
    }
    sources.sort_unstable();
    sources.dedup();
    Ok(CheckedProposal {
        request,
        confidence,
        sources,
        said_at,
    })
}

/// A stored fact as a supersede sees it.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct SupersedeTarget {
    pub active: bool,
    pub origin: FactOrigin,
    /// It names a successor already.
    pub superseded: bool,
}

/// Why operation `i` may not supersede `named`, stored as `target` (`None`:
/// not in the scope): only a current, distilled fact is superseded by a
/// model.
pub fn check_supersedable(i: usize, named: &str, target: Option<SupersedeTarget>) -> Result<()> {
    let field = format!("operations[{i}].fact");
    match target {
        None => Err(MemoryError::invalid(
            field,
            format!("`{named}` is not a fact of this scope"),
        )),
        Some(t) if !t.active || t.superseded => Err(MemoryError::invalid(
            field,
            format!("`{named}` is no longer current"),
        )),
        Some(t) if t.origin != FactOrigin::Distilled => Err(MemoryError::invalid(
            field,
            format!("`{named}` is explicit; a distilled fact never overrides an explicit one"),
        )),
        Some(_) => Ok(()),
    }
}

/// The facts a job is shown, `limit` in all: `ranked` (what the store's
/// recall found with the job's turns as the query, most related first) and
/// `newest` (the scope's newest current distilled facts, newest first).
///
/// Recall by words finds no fact for a turn that changes it without naming
/// the old value ("we moved to Porto" against "lives in Lisbon"), and in a
/// large store its words always find *some* facts, so when the ranking is
/// by words alone (`by_meaning` false) half the room is kept for the newest
/// distilled facts: the ones such a turn most likely changes, and the only
/// ones a job may supersede. A hybrid ranking (an embedder) finds by
/// meaning and gets the whole room; either side's unused room goes to the
/// other. The ranking's share comes first, so the newest are dropped
/// first when the prompt must shrink.
pub fn with_newest_distilled(
    ranked: Vec<Fact>,
    newest: Vec<Fact>,
    limit: usize,
    by_meaning: bool,
) -> Vec<Fact> {
    let reserved = if by_meaning { 0 } else { limit / 2 };
    let mut shown: Vec<Fact> = Vec::with_capacity(limit);
    let take = |shown: &mut Vec<Fact>, facts: &[Fact], up_to: usize| {
        for fact in facts {
            if shown.len() >= up_to {
                break;
            }
            if !shown.iter().any(|f| f.id == fact.id) {
                shown.push(fact.clone());
            }
        }
    };
    take(&mut shown, &ranked, limit - reserved);
    take(&mut shown, &newest, limit);
    take(&mut shown, &ranked, limit);
    shown
}

/// What applying a job did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Applied {
    pub added: usize,
    pub superseded: usize,
    /// Proposals equal to a current fact (nothing written).
    pub already_present: usize,
    /// True when the job had been applied before (a replay): nothing written.
    pub replayed: bool,
}

/// A parked job, as `doctor` and the CLI list it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ParkedJob {
    pub id: i64,
    pub thread: String,
    pub turns: usize,
    pub attempts: u32,
    pub reason: String,
    pub parked_at: String,
}

/// The queue's figures (no user text).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct QueueFigures {
    pub queued: u64,
    pub parked: u64,
    pub done: u64,
    /// Tokens the endpoint reported today (UTC day).
    pub tokens_today: u64,
}

/// Jobs waiting: queued, and parked with a reason.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct QueueDepth {
    pub queued: u64,
    pub parked: u64,
}

/// The `distill` line of `doctor` for `queue`: the queue, parked jobs (a
/// problem: each waits for an operator), tokens used today.
pub async fn doctor_line(queue: &dyn DistillQueue) -> crate::Diagnostic {
    let day = crate::time::now_rfc3339()[..10].to_owned();
    match queue.queue_figures(&day).await {
        Ok(f) => {
            let detail = format!(
                "{} queued, {} parked, {} done; {} tokens today",
                f.queued, f.parked, f.done, f.tokens_today
            );
            if f.parked > 0 {
                crate::Diagnostic::problem(
                    "distill",
                    format!("{detail} (`memgate distill --parked` lists why)"),
                )
            } else {
                crate::Diagnostic::ok("distill", detail)
            }
        }
        Err(e) => crate::Diagnostic::problem("distill", format!("cannot read the queue: {e}")),
    }
}

/// The store side of distillation (see the module doc).
#[async_trait]
pub trait DistillQueue: Send + Sync {
    /// Up to `limit` queued jobs, oldest first, at most one per thread and
    /// none of the threads of the jobs in `running` (so a thread's jobs run
    /// in order).
    async fn next_jobs(&self, limit: usize, running: &[i64]) -> Result<Vec<DistillJob>>;

    /// At most `limit` current facts of the job's scope most related to its
    /// turns, found by the store's own recall (never the whole store).
    async fn related_facts(&self, job: &DistillJob, limit: usize) -> Result<Vec<Fact>>;

    /// Applies `operations` in one transaction and marks the job done in
    /// it, or changes nothing; a job already done applies nothing again.
    /// Operations that cannot be applied are `MemoryError::Invalid`/
    /// `Conflict`/`NotFound`, naming the operation.
    async fn apply(&self, job: &DistillJob, operations: &[Operation]) -> Result<Applied>;

    /// Parks the job with `reason` (listed, counted, retryable).
    async fn park(&self, job: i64, reason: &str) -> Result<()>;

    /// Counts a failed attempt, leaving the job queued.
    async fn attempt_failed(&self, job: i64, reason: &str) -> Result<()>;

    /// Adds an endpoint call's token usage to `day`'s (UTC `YYYY-MM-DD`).
    async fn record_usage(&self, day: &str, prompt: u64, completion: u64) -> Result<()>;

    /// Tokens used on `day`.
    async fn tokens_used(&self, day: &str) -> Result<u64>;

    async fn parked_jobs(&self) -> Result<Vec<ParkedJob>>;

    /// Queues parked jobs again (all, or the one named); how many.
    async fn retry_parked(&self, job: Option<i64>) -> Result<usize>;

    /// Every figure of the queue (`doctor`): counting the done jobs reads
    /// the whole history.
    async fn queue_figures(&self, day: &str) -> Result<QueueFigures>;

    /// The jobs still waiting, in one read that does not grow with the done
    /// history: what the serving worker re-reads for `/metrics`.
    async fn queue_depth(&self) -> Result<QueueDepth>;

    /// Queues every captured turn no job covers yet (threads captured
    /// before distillation was turned on); how many threads got work.
    async fn queue_backfill(&self) -> Result<usize>;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_jobs_related_query_joins_its_turns_within_the_bound() {
        let turn = |text: &str| JobTurn {
            id: "turn_1".into(),
            role: "human".into(),
            speaker: None,
            said_at: "2026-12-05T00:00:00Z".into(),
            text: text.into(),
        };
        let mut job = DistillJob {
            id: 1,
            caller: crate::Caller::new("dana").with_thread("t"),
            turns: vec![turn("We moved"), turn("to Porto.")],
            attempts: 0,
            through: 2,
        };
        assert_eq!(job.related_query(), "We moved to Porto.");
        job.turns = vec![turn(&"é".repeat(RELATED_QUERY_CHARS)), turn("Porto")];
        let query = job.related_query();
        assert_eq!(query.chars().count(), RELATED_QUERY_CHARS);
        assert!(!query.contains("Porto"));
    }

    fn fact(id: &str) -> Fact {
        serde_json::from_value(serde_json::json!({
            "id": id, "kind": "fact", "text": id, "state": "active", "version": 1,
            "created_at": "2026-01-01T00:00:00Z", "updated_at": "2026-01-01T00:00:00Z",
        }))
        .unwrap()
    }

    fn ids(facts: &[Fact]) -> Vec<&str> {
        facts.iter().map(|f| f.id.as_str()).collect()
    }

    #[test]
    fn related_facts_keep_room_for_the_newest_distilled_unless_ranked_by_meaning() {
        let ranked = vec![fact("mem_3"), fact("mem_1"), fact("mem_2")];
        let newest = vec![fact("mem_9"), fact("mem_3"), fact("mem_8"), fact("mem_7")];
        // By words: half the room for the newest distilled facts.
        let shown = with_newest_distilled(ranked.clone(), newest.clone(), 4, false);
        assert_eq!(ids(&shown), ["mem_3", "mem_1", "mem_9", "mem_8"]);
        // By meaning: the ranking first, the newest only in unused room.
        let shown = with_newest_distilled(ranked.clone(), newest.clone(), 4, true);
        assert_eq!(ids(&shown), ["mem_3", "mem_1", "mem_2", "mem_9"]);
        // Unused room on one side goes to the other.
        let shown = with_newest_distilled(Vec::new(), newest.clone(), 2, false);
        assert_eq!(ids(&shown), ["mem_9", "mem_3"]);
        let shown = with_newest_distilled(ranked, vec![fact("mem_9")], 4, false);
        assert_eq!(ids(&shown), ["mem_3", "mem_1", "mem_9", "mem_2"]);
        assert!(with_newest_distilled(Vec::new(), newest, 0, false).is_empty());
    }
}
