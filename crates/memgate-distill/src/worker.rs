//! The background worker: takes queued jobs (in order per thread, at most
//! `concurrency` at once), asks the model, validates, applies or parks.
//!
//! Every outcome of a job is one of: applied (all its operations in one
//! transaction), parked with its reason (an answer that cannot be used
//! after one repair round, operations the store refuses, a refused request,
//! a job too large for its token budget, or a transient failure
//! `max_attempts` times), retried later with back-off (429, 5xx, a
//! timeout, a transport failure), or left queued (the daily budget is
//! spent, or the worker was stopped mid-job: nothing of it was applied).
//! A job is never dropped.

use crate::answer::read_answer;
use crate::client::{estimate_messages, CallError, ChatClient, ChatMessage, Completion};
use crate::prompt;
use crate::settings::DistillSettings;
use memgate_core::distill::{Applied, DistillJob, DistillQueue, Operation};
use memgate_core::time::now_rfc3339;
use memgate_core::work::WorkTracker;
use memgate_core::{Fact, Figure, MemoryError, Result};
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::sync::watch;
use tokio::task::JoinSet;

/// The least room a job's answer gets within `max_job_tokens`.
const MIN_ANSWER_TOKENS: u64 = 256;
/// Longest back-off between attempts of one job.
const MAX_BACKOFF: Duration = Duration::from_secs(300);
/// How often an idle worker looks for new jobs.
const POLL: Duration = Duration::from_millis(500);
/// How often the serving worker re-reads the queue's figures (counts over
/// the job table: not on every poll).
const FIGURES_EVERY: Duration = Duration::from_secs(5);
/// The pause in requests a serving worker waits for before it works the
/// store (see [`Distiller::yielding_to`]).
const QUIET: Duration = Duration::from_millis(20);
/// The longest a serving worker waits for that pause before each step that
/// works the store: under steady load distillation falls behind, never stops.
pub const MAX_YIELD: Duration = Duration::from_secs(1);

/// How one job ended this time.
#[derive(Clone, Debug, PartialEq)]
pub enum JobEnd {
    Applied(Applied),
    Parked(String),
    /// Failed transiently; queued again after a back-off.
    Retry(String),
    /// The daily token budget is spent; the job stays queued.
    OverBudget,
}

/// The worker's own figures since it started (the queue's are read from
/// the store).
#[derive(Debug, Default)]
pub struct DistillStats {
    pub applied: AtomicU64,
    pub parked: AtomicU64,
    pub retried: AtomicU64,
    pub calls: AtomicU64,
    pub prompt_tokens: AtomicU64,
    pub completion_tokens: AtomicU64,
    pub facts_added: AtomicU64,
    pub facts_superseded: AtomicU64,
    /// Sum and count of finished jobs' latencies (queue read to outcome).
    pub latency_ms_total: AtomicU64,
    pub jobs_timed: AtomicU64,
    /// The queue as last read: queued and parked jobs.
    pub queued: AtomicU64,
    pub parked_now: AtomicU64,
}

impl DistillStats {
    /// `/metrics` and `doctor` figures (names from code, no user text).
    pub fn figures(&self) -> Vec<Figure> {
        let get = |a: &AtomicU64| a.load(Ordering::Relaxed);
        let timed = get(&self.jobs_timed);
        vec![
            Figure::gauge(
                "memgate_distill_queue_depth",
                "distillation jobs queued",
                get(&self.queued),
            ),
            Figure::gauge(
                "memgate_distill_parked_jobs",
                "distillation jobs parked with a reason",
                get(&self.parked_now),
            ),
            Figure::counter(
                "memgate_distill_jobs_applied_total",
                "distillation jobs applied",
                get(&self.applied),
            ),
            Figure::counter(
                "memgate_distill_jobs_parked_total",
                "distillation jobs parked",
                get(&self.parked),
            ),
            Figure::counter(
                "memgate_distill_jobs_retried_total",
                "distillation attempts that failed transiently",
                get(&self.retried),
            ),
            Figure::counter(
                "memgate_distill_model_calls_total",
                "distillation endpoint calls",
                get(&self.calls),
            ),
            Figure::counter(
                "memgate_distill_prompt_tokens_total",
                "prompt tokens the endpoint reported",
                get(&self.prompt_tokens),
            ),
            Figure::counter(
                "memgate_distill_completion_tokens_total",
                "completion tokens the endpoint reported",
                get(&self.completion_tokens),
            ),
            Figure::counter(
                "memgate_distill_facts_added_total",
                "distilled facts added",
                get(&self.facts_added),
            ),
            Figure::counter(
                "memgate_distill_facts_superseded_total",
                "facts closed by a distilled successor",
                get(&self.facts_superseded),
            ),
            Figure::gauge(
                "memgate_distill_job_latency_ms_mean",
                "mean time from taking a job to its outcome",
                get(&self.latency_ms_total).checked_div(timed).unwrap_or(0),
            ),
        ]
    }
}

/// What [`Distiller::run_until_idle`] did.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct RunReport {
    pub applied: usize,
    pub parked: usize,
    pub retried: usize,
    pub facts_added: usize,
    pub facts_superseded: usize,
    /// Stopped because the day's token budget is spent.
    pub over_budget: bool,
}

/// Runs jobs of one queue against one endpoint.
pub struct Distiller {
    queue: Arc<dyn DistillQueue>,
    client: ChatClient,
    settings: DistillSettings,
    stats: Arc<DistillStats>,
    backoff: Duration,
    not_before: Mutex<HashMap<i64, Instant>>,
    /// The requests this worker yields to, and its longest wait for them.
    yields_to: Option<(Arc<WorkTracker>, Duration)>,
}

fn today() -> String {
    now_rfc3339()[..10].to_owned()
}

impl Distiller {
    pub fn new(
        queue: Arc<dyn DistillQueue>,
        client: ChatClient,
        settings: DistillSettings,
    ) -> Self {
        Self {
            queue,
            client,
            settings,
            stats: Arc::new(DistillStats::default()),
            backoff: Duration::from_secs(2),
            not_before: Mutex::new(HashMap::new()),
            yields_to: None,
        }
    }

    /// Starts each step that works the store (taking jobs, finding the
    /// related facts, applying) only once the operations `requests` counts
    /// have paused for [`QUIET`], or after waiting `at_most`: on a shared
    /// machine the worker's queries, and the database serving them, would
    /// otherwise land beside the requests being served and lengthen their
    /// tails. The model call itself is not held back (it waits on the
    /// endpoint, not on this machine's store).
    pub fn yielding_to(mut self, requests: Arc<WorkTracker>, at_most: Duration) -> Self {
        self.yields_to = Some((requests, at_most));
        self
    }

    async fn yield_to_requests(&self) {
        if let Some((requests, at_most)) = &self.yields_to {
            requests.wait_quiet(QUIET, *at_most).await;
        }
    }

    /// The first back-off after a transient failure (doubled per attempt).
    pub fn with_backoff(mut self, backoff: Duration) -> Self {
        self.backoff = backoff;
        self
    }

    pub fn stats(&self) -> &Arc<DistillStats> {
        &self.stats
    }

    fn waiting(&self, job: i64) -> Option<Instant> {
        let map = self.not_before.lock().unwrap_or_else(|p| p.into_inner());
        map.get(&job).copied().filter(|t| *t > Instant::now())
    }

    /// One call, its usage recorded (the endpoint's figures).
    async fn call(
        &self,
        messages: &[ChatMessage],
        max_tokens: u64,
    ) -> std::result::Result<Completion, CallError> {
        self.stats.calls.fetch_add(1, Ordering::Relaxed);
        let completion = self.client.complete(messages, max_tokens).await?;
        self.stats
            .prompt_tokens
            .fetch_add(completion.prompt_tokens, Ordering::Relaxed);
        self.stats
            .completion_tokens
            .fetch_add(completion.completion_tokens, Ordering::Relaxed);
        if let Err(e) = self
            .queue
            .record_usage(
                &today(),
                completion.prompt_tokens,
                completion.completion_tokens,
            )
            .await
        {
            tracing::warn!(error = %e, "distillation: cannot record token usage");
        }
        Ok(completion)
    }

    async fn within_daily_budget(&self, estimate: u64) -> Result<bool> {
        let used = self.queue.tokens_used(&today()).await?;
        Ok(used + estimate <= self.settings.max_daily_tokens)
    }

    async fn park(&self, job: &DistillJob, reason: String) -> Result<JobEnd> {
        self.queue.park(job.id, &reason).await?;
        self.stats.parked.fetch_add(1, Ordering::Relaxed);
        tracing::warn!(
            job = job.id,
            "distillation job parked (`memgate distill --parked` lists why)"
        );
        Ok(JobEnd::Parked(reason))
    }

    async fn retry_or_park(&self, job: &DistillJob, reason: String) -> Result<JobEnd> {
        let attempts = job.attempts + 1;
        if attempts >= self.settings.max_attempts {
            return self
                .park(job, format!("gave up after {attempts} attempts: {reason}"))
                .await;
        }
        self.queue.attempt_failed(job.id, &reason).await?;
        self.stats.retried.fetch_add(1, Ordering::Relaxed);
        let delay = self
            .backoff
            .saturating_mul(1 << job.attempts.min(16))
            .min(MAX_BACKOFF);
        self.not_before
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(job.id, Instant::now() + delay);
        Ok(JobEnd::Retry(reason))
    }

    /// The prompt within the job's budget: related facts dropped (least
    /// related first) until it fits; `None` when the turns alone do not.
    fn bounded_prompt(
        &self,
        job: &DistillJob,
        mut facts: Vec<Fact>,
    ) -> Option<(Vec<ChatMessage>, Vec<Fact>, u64)> {
        let limit = self
            .settings
            .max_job_tokens
            .saturating_sub(MIN_ANSWER_TOKENS);
        loop {
            let messages = prompt::messages(job, &facts);
            let estimate = estimate_messages(&messages);
            if estimate <= limit {
                return Some((messages, facts, estimate));
            }
            facts.pop()?;
        }
    }

    /// Asks for `job`'s operations: one call, and one repair round when the
    /// answer cannot be read.
    async fn operations(
        &self,
        job: &DistillJob,
        facts: Vec<Fact>,
    ) -> Result<std::result::Result<Vec<Operation>, JobEnd>> {
        let Some((messages, shown, estimate)) = self.bounded_prompt(job, facts) else {
            let reason = format!(
                "the job's turns alone exceed memory.distill.max_job_tokens ({})",
                self.settings.max_job_tokens
            );
            return Ok(Err(self.park(job, reason).await?));
        };
        if !self.within_daily_budget(estimate).await? {
            return Ok(Err(JobEnd::OverBudget));
        }
        let room = self.settings.max_job_tokens - estimate;
        let first = match self.call(&messages, room).await {
            Ok(c) => c,
            Err(CallError::Transient(r)) => return Ok(Err(self.retry_or_park(job, r).await?)),
            Err(CallError::Refused(r)) => return Ok(Err(self.park(job, r).await?)),
        };
        let defect = match read_answer(&first.content, job, &shown) {
            Ok(ops) => return Ok(Ok(ops)),
            Err(defect) => defect,
        };
        let repair = prompt::repair(messages, &first.content, &defect);
        let estimate = estimate_messages(&repair);
        if estimate + MIN_ANSWER_TOKENS > self.settings.max_job_tokens {
            let reason = format!("the answer cannot be used ({defect}) and a repair round would exceed memory.distill.max_job_tokens");
            return Ok(Err(self.park(job, reason).await?));
        }
        if !self.within_daily_budget(estimate).await? {
            return Ok(Err(JobEnd::OverBudget));
        }
        let second = match self
            .call(&repair, self.settings.max_job_tokens - estimate)
            .await
        {
            Ok(c) => c,
            Err(CallError::Transient(r)) => return Ok(Err(self.retry_or_park(job, r).await?)),
            Err(CallError::Refused(r)) => return Ok(Err(self.park(job, r).await?)),
        };
        match read_answer(&second.content, job, &shown) {
            Ok(ops) => Ok(Ok(ops)),
            Err(again) => {
                let reason = format!(
                    "the answer cannot be used ({defect}), nor after one repair round ({again})"
                );
                Ok(Err(self.park(job, reason).await?))
            }
        }
    }

    /// Runs one job to its outcome for now. An error is the store's (the
    /// job stays queued).
    pub async fn run_job(&self, job: DistillJob) -> Result<JobEnd> {
        let started = Instant::now();
        let end = self.run_job_timed(&job).await;
        self.stats
            .latency_ms_total
            .fetch_add(started.elapsed().as_millis() as u64, Ordering::Relaxed);
        self.stats.jobs_timed.fetch_add(1, Ordering::Relaxed);
        end
    }

    async fn run_job_timed(&self, job: &DistillJob) -> Result<JobEnd> {
        let operations = if job.turns.is_empty() {
            Vec::new()
        } else {
            self.yield_to_requests().await;
            let facts = self
                .queue
                .related_facts(job, self.settings.related_facts)
                .await?;
            match self.operations(job, facts).await? {
                Ok(ops) => ops,
                Err(end) => return Ok(end),
            }
        };
        self.yield_to_requests().await;
        match self.queue.apply(job, &operations).await {
            Ok(applied) => {
                self.stats.applied.fetch_add(1, Ordering::Relaxed);
                self.stats
                    .facts_added
                    .fetch_add(applied.added as u64, Ordering::Relaxed);
                self.stats
                    .facts_superseded
                    .fetch_add(applied.superseded as u64, Ordering::Relaxed);
                Ok(JobEnd::Applied(applied))
            }
            Err(
                e @ (MemoryError::InvalidInput { .. }
                | MemoryError::Conflict(_)
                | MemoryError::NotFound(_)),
            ) => {
                self.park(job, format!("the answer cannot be applied: {e}"))
                    .await
            }
            Err(e) => Err(e),
        }
    }

    async fn refresh_queue_figures(&self) {
        if let Ok(f) = self.queue.queue_depth().await {
            self.stats.queued.store(f.queued, Ordering::Relaxed);
            self.stats.parked_now.store(f.parked, Ordering::Relaxed);
        }
    }

    /// Jobs that may run now, at most `limit`, none of `running`'s threads.
    async fn ready_jobs(&self, limit: usize, running: &[i64]) -> Result<Vec<DistillJob>> {
        let jobs = self.queue.next_jobs(limit, running).await?;
        Ok(jobs
            .into_iter()
            .filter(|j| self.waiting(j.id).is_none())
            .collect())
    }

    /// Runs queued jobs until none is left to run now (those backing off
    /// are waited for), the day's budget is spent, or the store fails.
    pub async fn run_until_idle(self: &Arc<Self>) -> Result<RunReport> {
        let mut report = RunReport::default();
        loop {
            let jobs = self.ready_jobs(self.settings.concurrency, &[]).await?;
            if jobs.is_empty() {
                let next = {
                    let map = self.not_before.lock().unwrap_or_else(|p| p.into_inner());
                    map.values().copied().filter(|t| *t > Instant::now()).min()
                };
                match next {
                    Some(at) if !self.queue.next_jobs(1, &[]).await?.is_empty() => {
                        tokio::time::sleep_until(at.into()).await;
                        continue;
                    }
                    _ => break,
                }
            }
            let mut set = JoinSet::new();
            for job in jobs {
                let this = Arc::clone(self);
                set.spawn(async move { this.run_job(job).await });
            }
            while let Some(end) = set.join_next().await {
                let end = end.map_err(|e| {
                    MemoryError::backend(format!("distillation task failed: {e}"))
                })??;
                match end {
                    JobEnd::Applied(a) => {
                        report.applied += 1;
                        report.facts_added += a.added;
                        report.facts_superseded += a.superseded;
                    }
                    JobEnd::Parked(_) => report.parked += 1,
                    JobEnd::Retry(_) => report.retried += 1,
                    JobEnd::OverBudget => report.over_budget = true,
                }
            }
            if report.over_budget {
                break;
            }
        }
        self.refresh_queue_figures().await;
        Ok(report)
    }

    /// The background loop: until `stop` says so.
    async fn serve(self: Arc<Self>, mut stop: watch::Receiver<bool>) {
        let mut running: JoinSet<(i64, Result<JobEnd>)> = JoinSet::new();
        let mut ids: Vec<i64> = Vec::new();
        let mut pause_until: Option<Instant> = None;
        let mut figures_at: Option<Instant> = None;
        loop {
            if *stop.borrow() {
                break;
            }
            if figures_at.is_none_or(|t| t.elapsed() >= FIGURES_EVERY) {
                self.refresh_queue_figures().await;
                figures_at = Some(Instant::now());
            }
            let free = self.settings.concurrency.saturating_sub(ids.len());
            if free > 0 && pause_until.is_none_or(|t| t <= Instant::now()) {
                pause_until = None;
                tokio::select! {
                    _ = self.yield_to_requests() => {}
                    _ = stop.changed() => break,
                }
                match self.ready_jobs(free, &ids).await {
                    Ok(jobs) => {
                        for job in jobs {
                            ids.push(job.id);
                            let this = Arc::clone(&self);
                            running.spawn(async move { (job.id, this.run_job(job).await) });
                        }
                    }
                    Err(MemoryError::Closed(_)) => break,
                    Err(e) => tracing::warn!(error = %e, "distillation: cannot read the queue"),
                }
            }
            tokio::select! {
                Some(done) = running.join_next(), if !running.is_empty() => {
                    if let Ok((id, end)) = done {
                        ids.retain(|i| *i != id);
                        match end {
                            Ok(JobEnd::OverBudget) => {
                                pause_until = Some(Instant::now() + Duration::from_secs(60));
                            }
                            Ok(_) => {}
                            Err(MemoryError::Closed(_)) => break,
                            Err(e) => tracing::warn!(job = id, error = %e, "distillation job failed in the store; it stays queued"),
                        }
                    }
                }
                _ = tokio::time::sleep(POLL) => {}
                _ = stop.changed() => break,
            }
        }
        // Jobs cut short here stay queued, unless a job's transaction had
        // already committed: then it is applied but not counted in `stats`.
        running.abort_all();
    }
}

/// The worker on a thread of its own (its own runtime, so any surface can
/// start it, the Python extension included); stopped on drop.
pub struct Worker {
    distiller: Arc<Distiller>,
    stop: watch::Sender<bool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl std::fmt::Debug for Worker {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Worker").finish_non_exhaustive()
    }
}

impl Worker {
    pub fn start(distiller: Arc<Distiller>) -> Result<Self> {
        let (stop, watch) = watch::channel(false);
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(|e| {
                MemoryError::backend(format!("cannot start the distillation runtime: {e}"))
            })?;
        let serving = Arc::clone(&distiller);
        let thread = std::thread::Builder::new()
            .name("memgate-distill".to_owned())
            .spawn(move || runtime.block_on(serving.serve(watch)))
            .map_err(|e| {
                MemoryError::backend(format!("cannot start the distillation worker: {e}"))
            })?;
        Ok(Self {
            distiller,
            stop,
            thread: Some(thread),
        })
    }

    pub fn stats(&self) -> &Arc<DistillStats> {
        self.distiller.stats()
    }

    /// Stops taking jobs and waits up to `timeout` for the thread; a job
    /// cut short stays queued. False when the thread was still running.
    pub fn stop(&mut self, timeout: Duration) -> bool {
        let _ = self.stop.send(true);
        let Some(thread) = self.thread.take() else {
            return true;
        };
        let deadline = Instant::now() + timeout;
        while !thread.is_finished() {
            if Instant::now() >= deadline {
                return false;
            }
            std::thread::sleep(Duration::from_millis(5));
        }
        thread.join().is_ok()
    }
}

impl Drop for Worker {
    fn drop(&mut self) {
        self.stop(Duration::ZERO);
    }
}
