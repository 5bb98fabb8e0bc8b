//! [`LocalBackend`]: the `local` memory backend, the async face of
//! [`MemoryStore`].
//!
//! SQLite calls block, so every operation runs on tokio's blocking pool
//! (`spawn_blocking`) and the caller's executor threads never wait on disk.
//! An operation counts as in flight until its blocking work has finished,
//! even if the caller stopped waiting, so `shutdown` can drain it before
//! checkpointing and closing the file. At most [`MAX_CONCURRENT_WORK`]
//! operations touch SQLite at once; the rest wait their turn without a
//! thread.
//!
//! With `max_turn_age_days` set, a background thread runs the retention
//! sweep ([`MemoryStore::sweep_expired_turns`]) once at start and then every
//! [`RETENTION_SWEEP_INTERVAL`]; it stops at shutdown or when the last clone
//! of the backend is dropped.

use crate::capture::Streamed;
use crate::config::{LocalConfig, ResolvedConfig};
use crate::handoff::HandoffDesk;
use crate::store::MemoryStore;
use crate::vectors::ModelState;
use async_trait::async_trait;
use memgate_core::distill::{
    Applied, DistillJob, DistillQueue, Operation, ParkedJob, QueueDepth, QueueFigures,
};
use memgate_core::handoff::MILESTONE_KIND;
use memgate_core::intake::{CaptureStart, Intake, StreamedCapture};
use memgate_core::work::WorkTracker;
use memgate_core::{
    Acknowledgement, BackendContext, Caller, Capabilities, CaptureReport, CaptureRequest,
    CommitOutcome, Continuation, Diagnostic, Fact, FactPatch, ForgetReport, ForgetTarget, Handoff,
    HandoffContent, ImportReport, MemoryBackend, MemoryError, MemoryExport, Recall, RecallRequest,
    RememberOutcome, RememberRequest, Result, SearchHit, SearchQuery, StoredScope, WarmStatus,
};
use memgate_core::{PageRequest, ThreadList, ThreadTurns};
use serde_json::{Map, Value};
use std::path::Path;
use std::sync::mpsc::{Receiver, RecvTimeoutError, Sender};
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, SystemTime};
use tokio::sync::Semaphore;

/// SQLite work running at once on the blocking pool: each holds a thread
/// and a reader connection (with its page cache), so 200 concurrent recalls queue
/// here instead of opening 200 of each. Reads are short; the writer is one
/// connection anyway. As many as the store keeps idle readers, so each
/// finds one pooled.
pub const MAX_CONCURRENT_WORK: usize = crate::db::MAX_IDLE_READERS;

pub use memgate_core::forget::RETENTION_SWEEP_INTERVAL;

/// Stops the retention thread when dropped (or at shutdown).
struct Retention(Mutex<Option<Sender<()>>>);

impl Retention {
    /// Sweeps `store` now and then every `interval`, holding it only weakly.
    fn start(store: &Arc<MemoryStore>, interval: Duration) -> Self {
        let (stop, stopped) = std::sync::mpsc::channel::<()>();
        let store: Weak<MemoryStore> = Arc::downgrade(store);
        let spawned = std::thread::Builder::new()
            .name("memgate-retention".to_owned())
            .spawn(move || loop {
                let Some(store) = store.upgrade() else { return };
                match store.sweep_expired_turns(SystemTime::now()) {
                    Ok(_) => {}
                    Err(MemoryError::Closed(_)) => return,
                    Err(e) => tracing::warn!(error = %e, "local store retention sweep failed"),
                }
                drop(store);
                match stopped.recv_timeout(interval) {
                    Err(RecvTimeoutError::Timeout) => continue,
                    _ => return,
                }
            });
        if let Err(e) = spawned {
            tracing::warn!(error = %e, "local store retention sweep could not start");
        }
        Self(Mutex::new(Some(stop)))
    }

    fn stop(&self) {
        self.0.lock().unwrap_or_else(|p| p.into_inner()).take();
    }
}

/// Rows the background indexer embeds per step.
const INDEXER_BATCH: usize = 32;
/// Pause when caught up (new turns wait at most this long for a vector).
const INDEXER_IDLE: Duration = Duration::from_millis(500);
/// Pause after an embedder failure.
const INDEXER_BACKOFF: Duration = Duration::from_secs(5);

/// The bounded background indexer: one thread, one batch at a time, idle
/// when caught up, backing off after failures; it ends when the store is
/// closed or dropped.
fn spawn_indexer(store: Weak<MemoryStore>) {
    let run = move || loop {
        let pause = {
            let Some(store) = store.upgrade() else { return };
            if store.is_closed() {
                return;
            }
            match store.index_vectors(INDEXER_BATCH) {
                Ok(0) => INDEXER_IDLE,
                Ok(_) => Duration::ZERO,
                Err(MemoryError::Closed(_)) => return,
                Err(e) => {
                    tracing::warn!(error = %e, "vector indexer step failed; retrying later");
                    INDEXER_BACKOFF
                }
            }
        };
        std::thread::sleep(pause);
    };
    if let Err(e) = std::thread::Builder::new()
        .name("memgate-vector-indexer".into())
        .spawn(run)
    {
        tracing::warn!(error = %e, "cannot start the vector indexer; recall stays lexical");
    }
}

/// The embedded default backend (`manager_class: local`).
#[derive(Clone)]
pub struct LocalBackend {
    store: Arc<MemoryStore>,
    work: Arc<WorkTracker>,
    slots: Arc<Semaphore>,
    retention: Option<Arc<Retention>>,
    handoffs: Arc<HandoffDesk>,
}

impl std::fmt::Debug for LocalBackend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LocalBackend")
            .field("store", &self.store)
            .finish_non_exhaustive()
    }
}

impl LocalBackend {
    /// Builds the backend from `memory.backend_config` and the host context
    /// (storage root, keep-hook). Opens (creating or migrating) the file.
    pub fn from_backend_config(config: &Map<String, Value>, ctx: &BackendContext) -> Result<Self> {
        let ResolvedConfig {
            database_path,
            settings,
            redactor,
        } = LocalConfig::from_backend_config(config, ctx)?;
        let embedder = settings.embedder.as_ref().map(|e| e.build()).transpose()?;
        let mut store = MemoryStore::open(&database_path, settings)?
            .with_keep_hidden(ctx.keep_hidden.clone())
            .with_redactor(redactor);
        if let Some(embedder) = embedder {
            store = store.with_embedder(embedder);
        }
        Ok(Self::from_store(store))
    }

    /// Opens the database file at `path` directly (tests, benchmarks).
    pub fn open(path: impl AsRef<Path>, config: LocalConfig) -> Result<Self> {
        Ok(Self::from_store(MemoryStore::open(path, config)?))
    }

    /// Wraps a store; starts the retention sweep when it has a maximum
    /// turn age, and the vector indexer when it has an embedder.
    pub fn from_store(store: MemoryStore) -> Self {
        let store = Arc::new(store);
        if store.model_state().is_ok_and(|m| m != ModelState::Off) {
            spawn_indexer(Arc::downgrade(&store));
        }
        let retention = store
            .config()
            .max_turn_age
            .map(|_| Arc::new(Retention::start(&store, RETENTION_SWEEP_INTERVAL)));
        let handoffs = Arc::new(HandoffDesk::new(store.config().handoff_lifetime));
        Self {
            store,
            work: WorkTracker::new(),
            slots: Arc::new(Semaphore::new(MAX_CONCURRENT_WORK)),
            retention,
            handoffs,
        }
    }

    /// Holds handoffs for `lifetime` instead of the configured one (tests).
    pub fn with_handoff_lifetime(mut self, lifetime: Duration) -> Self {
        self.handoffs = Arc::new(HandoffDesk::new(lifetime));
        self
    }

    /// The synchronous store underneath.
    pub fn store(&self) -> &Arc<MemoryStore> {
        &self.store
    }

    /// Captures a transcript that arrives one message at a time (see
    /// [`MemoryStore::capture_streamed`]): a host converting messages from
    /// another representation sends each as it is ready, and the store works
    /// in parallel instead of after the whole conversion.
    pub async fn capture_streamed(
        &self,
        caller: Caller,
        trace_id: Option<String>,
        items: Receiver<Streamed>,
    ) -> Result<CaptureReport> {
        caller.require_thread()?;
        self.run(move |s| s.capture_streamed(&caller, trace_id.as_deref(), items))
            .await
    }

    /// Runs `work` against the store on the blocking pool.
    async fn run<T, F>(&self, work: F) -> Result<T>
    where
        T: Send + 'static,
        F: FnOnce(&MemoryStore) -> Result<T> + Send + 'static,
    {
        let ticket = self
            .work
            .admit()
            .ok_or_else(|| MemoryError::Closed("local".to_owned()))?;
        let slot = Arc::clone(&self.slots)
            .acquire_owned()
            .await
            .map_err(|_| MemoryError::Closed("local".to_owned()))?;
        let store = Arc::clone(&self.store);
        tokio::task::spawn_blocking(move || {
            let _held = (ticket, slot);
            work(&store)
        })
        .await
        .map_err(|e| MemoryError::backend(format!("local store task failed: {e}")))?
    }
}

#[async_trait]
impl MemoryBackend for LocalBackend {
    fn name(&self) -> &str {
        "local"
    }

    fn capabilities(&self) -> Capabilities {
        Capabilities {
            recall: true,
            capture: true,
            remember: true,
            search: true,
            facts: true,
            import_export: true,
        }
    }

    async fn recall(&self, request: &RecallRequest) -> Result<Recall> {
        let request = request.clone();
        self.run(move |s| s.recall(&request)).await
    }

    async fn capture(&self, request: &CaptureRequest) -> Result<CaptureReport> {
        request.caller.require_thread()?;
        let request = request.clone();
        self.run(move |s| s.capture(&request)).await
    }

    /// Streamed: each batch is stored while the surface reads the next
    /// ([`LocalBackend::capture_streamed`]).
    fn begin_capture(self: Arc<Self>, start: CaptureStart) -> Result<Intake> {
        Ok(Intake::Streamed(StreamedCapture::new(move |items| {
            Box::pin(async move {
                self.capture_streamed(start.caller, start.trace_id, items)
                    .await
            })
        })))
    }

    async fn remember(
        &self,
        caller: &Caller,
        request: &RememberRequest,
    ) -> Result<RememberOutcome> {
        let (caller, request) = (caller.clone(), request.clone());
        self.run(move |s| s.remember(&caller, &request)).await
    }

    async fn search(&self, caller: &Caller, query: &SearchQuery) -> Result<Vec<SearchHit>> {
        let (caller, query) = (caller.clone(), query.clone());
        self.run(move |s| s.search(&caller, &query)).await
    }

    async fn list_facts(&self, caller: &Caller, include_retired: bool) -> Result<Vec<Fact>> {
        let caller = caller.clone();
        self.run(move |s| s.list_facts(&caller, include_retired))
            .await
    }

    async fn get_fact(&self, caller: &Caller, id: &str) -> Result<Fact> {
        let (caller, id) = (caller.clone(), id.to_owned());
        self.run(move |s| s.get_fact(&caller, &id)).await
    }

    async fn revise_fact(&self, caller: &Caller, id: &str, patch: &FactPatch) -> Result<Fact> {
        let (caller, id, patch) = (caller.clone(), id.to_owned(), patch.clone());
        self.run(move |s| s.revise_fact(&caller, &id, &patch)).await
    }

    async fn retire_fact(&self, caller: &Caller, id: &str) -> Result<Fact> {
        let (caller, id) = (caller.clone(), id.to_owned());
        self.run(move |s| s.retire_fact(&caller, &id)).await
    }

    async fn export(&self, caller: &Caller) -> Result<MemoryExport> {
        let caller = caller.clone();
        self.run(move |s| s.export(&caller)).await
    }

    async fn import(&self, caller: &Caller, data: &MemoryExport) -> Result<ImportReport> {
        let (caller, data) = (caller.clone(), data.clone());
        self.run(move |s| s.import(&caller, &data)).await
    }

    async fn forget(&self, caller: &Caller, target: &ForgetTarget) -> Result<ForgetReport> {
        if *target == ForgetTarget::User {
            // Handoffs in flight carry the user's task too.
            self.handoffs.forget_user(caller.user.as_str());
        }
        let (caller, target) = (caller.clone(), target.clone());
        self.run(move |s| s.forget(&caller, &target)).await
    }

    async fn stored_scopes(&self, limit: usize) -> Result<Vec<StoredScope>> {
        self.run(move |s| s.stored_scopes(limit)).await
    }

    async fn fact_history(&self, caller: &Caller, id: &str) -> Result<Vec<Fact>> {
        let (caller, id) = (caller.clone(), id.to_owned());
        self.run(move |s| s.fact_history(&caller, &id)).await
    }

    async fn list_threads(&self, caller: &Caller, page: PageRequest) -> Result<ThreadList> {
        let caller = caller.clone();
        self.run(move |s| s.list_threads(&caller, page)).await
    }

    async fn read_thread(
        &self,
        caller: &Caller,
        thread: &str,
        page: PageRequest,
    ) -> Result<ThreadTurns> {
        let (caller, thread) = (caller.clone(), thread.to_owned());
        self.run(move |s| s.read_thread(&caller, &thread, page))
            .await
    }

    async fn holdings(&self, caller: &Caller) -> Result<memgate_core::Holdings> {
        let caller = caller.clone();
        self.run(move |s| s.holdings(&caller)).await
    }

    /// The vector indexer's progress (`vectors` line), so an operator sees
    /// how much of the file hybrid recall covers and a pending model change.
    async fn diagnose(&self) -> Vec<Diagnostic> {
        let line = match self.run(|s| s.vector_progress()).await {
            Ok(progress) => progress.diagnostic(),
            Err(e) => Diagnostic::problem("vectors", format!("cannot read the progress: {e}")),
        };
        let mut lines = vec![line];
        if self.store.config().distill.is_some() {
            lines.push(memgate_core::distill::doctor_line(self).await);
        }
        lines
    }

    /// Ready after SQLite's quick integrity check; corruption is an error.
    async fn prepare_handoff(&self, caller: &Caller, content: &HandoffContent) -> Result<Handoff> {
        let content = content.redacted(self.store.redactor())?;
        self.handoffs.prepare(caller, content)
    }

    async fn get_handoff(&self, caller: &Caller, id: &str) -> Result<Handoff> {
        self.handoffs.get(caller, id)
    }

    async fn correct_handoff(
        &self,
        caller: &Caller,
        id: &str,
        content: &HandoffContent,
    ) -> Result<Handoff> {
        let content = content.redacted(self.store.redactor())?;
        self.handoffs.correct(caller, id, content)
    }

    async fn finalize_handoff(&self, caller: &Caller, id: &str) -> Result<Handoff> {
        self.handoffs.finalize(caller, id)
    }

    async fn continue_handoff(&self, caller: &Caller, id: &str) -> Result<Continuation> {
        self.handoffs.continue_from(caller, id)
    }

    async fn acknowledge_handoff(
        &self,
        caller: &Caller,
        id: &str,
        acknowledgement: &Acknowledgement,
    ) -> Result<Handoff> {
        self.handoffs.acknowledge(caller, id, acknowledgement)
    }

    /// One milestone memory in the caller's scope; a second commit of the
    /// same handoff answers the milestone already stored.
    async fn commit_handoff(&self, caller: &Caller, id: &str) -> Result<CommitOutcome> {
        let content = match self.handoffs.to_commit(caller, id)? {
            Ok(content) => content,
            Err(citation) => return Ok(CommitOutcome::Stored { citation }),
        };
        let request = match RememberRequest::new(MILESTONE_KIND, &content.milestone_text()) {
            Ok(request) => request,
            Err(e) => {
                return Ok(CommitOutcome::Failed {
                    reason: e.to_string(),
                })
            }
        };
        let (who, remembered) = (caller.clone(), request);
        let outcome = self.run(move |s| s.remember(&who, &remembered)).await?;
        let outcome = CommitOutcome::of_milestone(outcome);
        if let CommitOutcome::Stored { citation } = &outcome {
            self.handoffs.committed(caller, id, citation.clone());
        }
        Ok(outcome)
    }

    async fn warm(&self) -> Result<WarmStatus> {
        self.run(|s| s.check_integrity()).await?;
        Ok(WarmStatus::Ready)
    }

    fn release_idle_memory(&self) {
        self.store.release_idle_memory();
    }

    /// Refuses new work, waits up to `timeout` for in-flight work, then
    /// checkpoints the WAL and closes. False when work was still running at
    /// the deadline; the file is then closed when the backend is dropped.
    async fn shutdown(&self, timeout: Duration) -> bool {
        if let Some(retention) = &self.retention {
            retention.stop();
        }
        if self.work.close_and_wait(timeout).await > 0 {
            tracing::warn!("local store shutdown: in-flight work did not finish in time");
            return false;
        }
        let store = Arc::clone(&self.store);
        match tokio::task::spawn_blocking(move || store.close()).await {
            Ok(Ok(())) => true,
            Ok(Err(e)) => {
                tracing::warn!(error = %e, "local store shutdown: closing failed");
                false
            }
            Err(e) => {
                tracing::warn!(error = %e, "local store shutdown: close task failed");
                false
            }
        }
    }
}

/// The distillation queue, on the blocking pool like every other operation
/// (so a shutdown's drain waits for an apply in flight, and a closed store
/// refuses the worker).
#[async_trait]
impl DistillQueue for LocalBackend {
    async fn next_jobs(&self, limit: usize, running: &[i64]) -> Result<Vec<DistillJob>> {
        let running = running.to_vec();
        self.run(move |s| s.next_distill_jobs(limit, &running))
            .await
    }

    async fn related_facts(&self, job: &DistillJob, limit: usize) -> Result<Vec<Fact>> {
        let job = job.clone();
        self.run(move |s| s.related_facts(&job, limit)).await
    }

    async fn apply(&self, job: &DistillJob, operations: &[Operation]) -> Result<Applied> {
        let (job, operations) = (job.clone(), operations.to_vec());
        self.run(move |s| s.apply_distilled(&job, &operations))
            .await
    }

    async fn park(&self, job: i64, reason: &str) -> Result<()> {
        let reason = reason.to_owned();
        self.run(move |s| s.park_job(job, &reason)).await
    }

    async fn attempt_failed(&self, job: i64, reason: &str) -> Result<()> {
        let reason = reason.to_owned();
        self.run(move |s| s.job_attempt_failed(job, &reason)).await
    }

    async fn record_usage(&self, day: &str, prompt: u64, completion: u64) -> Result<()> {
        let day = day.to_owned();
        self.run(move |s| s.record_distill_usage(&day, prompt, completion))
            .await
    }

    async fn tokens_used(&self, day: &str) -> Result<u64> {
        let day = day.to_owned();
        self.run(move |s| s.distill_tokens_used(&day)).await
    }

    async fn parked_jobs(&self) -> Result<Vec<ParkedJob>> {
        self.run(|s| s.parked_jobs()).await
    }

    async fn retry_parked(&self, job: Option<i64>) -> Result<usize> {
        self.run(move |s| s.retry_parked(job)).await
    }

    async fn queue_figures(&self, day: &str) -> Result<QueueFigures> {
        let day = day.to_owned();
        self.run(move |s| s.distill_figures(&day)).await
    }

    async fn queue_depth(&self) -> Result<QueueDepth> {
        self.run(|s| s.distill_depth()).await
    }

    async fn queue_backfill(&self) -> Result<usize> {
        self.run(|s| s.queue_backfill()).await
    }
}
