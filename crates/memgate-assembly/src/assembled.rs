//! The one wrapper every surface talks to: gates, one total deadline per
//! operation, tracked in-flight work with a bounded drain, and metrics.
//!
//! A plain wrapper rather than a stack of layers: every operation goes
//! through [`AssembledBackend::run`], so the order of the concerns is written
//! down once (admit → deadline → observe) instead of once per decorator and
//! per method. A capture begun before its transcript is read
//! ([`MemoryBackend::begin_capture`]) is wrapped the same way, so there is
//! no handle on the backend inside for a surface to call around it.

use crate::deadline::{Deadlines, Operation};
use crate::metrics::Metrics;
use async_trait::async_trait;
use memgate_core::intake::{
    CaptureStart, CursorCapture, CursorFuture, CursorOutcome, Intake, WholeCapture,
};
use memgate_core::signature::SequenceHasher;
use memgate_core::work::{DrainReport, Ticket, WorkTracker};
use memgate_core::{
    Acknowledgement, Caller, Capabilities, CaptureReport, CaptureRequest, CommitOutcome,
    Continuation, Diagnostic, Fact, FactPatch, FailurePolicy, Figure, ForgetReport, ForgetTarget,
    Handoff, HandoffContent, ImportReport, KnownHead, MemoryBackend, MemoryError, MemoryExport,
    Message, Recall, RecallRequest, RememberOutcome, RememberRequest, Result, SearchHit,
    SearchQuery, StoredScope, WarmStatus,
};
use memgate_core::{PageRequest, ThreadList, ThreadTurns};
use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The host-level gates of the `memory:` section.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Gates {
    /// `memory.enabled`: capture and recall injection happen at all
    /// (explicit operations such as `remember` still work).
    pub enabled: bool,
    /// `memory.injection_enabled`: recall happens.
    pub injection_enabled: bool,
}

impl Default for Gates {
    fn default() -> Self {
        Self {
            enabled: true,
            injection_enabled: true,
        }
    }
}

impl Gates {
    pub fn recalls(&self) -> bool {
        self.enabled && self.injection_enabled
    }

    pub fn captures(&self) -> bool {
        self.enabled
    }
}

/// The least time a backend's own shutdown is given, whatever is left of
/// the budget: enough to close an idle store, never a wait for running work
/// (each backend bounds that by the time it is given).
const RELEASE_GRACE: Duration = Duration::from_millis(250);

/// A backend as every surface sees it.
pub struct AssembledBackend {
    inner: Arc<dyn MemoryBackend>,
    gates: Gates,
    deadlines: Deadlines,
    policy: FailurePolicy,
    work: Arc<WorkTracker>,
    /// Set once a drain released the backend: a later drain (`close()`
    /// after `shutdown_flush`) has nothing left to wait for.
    released: std::sync::atomic::AtomicBool,
    metrics: Arc<Metrics>,
    /// The distillation worker over the backend (`memory.distill`), stopped
    /// first by a drain; a job it cuts short stays queued.
    distiller: std::sync::Mutex<Option<memgate_distill::Worker>>,
}

impl std::fmt::Debug for AssembledBackend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AssembledBackend")
            .field("backend", &self.inner.name())
            .field("gates", &self.gates)
            .field("deadlines", &self.deadlines)
            .field("running", &self.work.running())
            .finish()
    }
}

impl AssembledBackend {
    pub fn new(inner: Arc<dyn MemoryBackend>, gates: Gates, deadlines: Deadlines) -> Self {
        let policy = inner.failure_policy();
        Self {
            inner,
            gates,
            deadlines,
            policy,
            work: WorkTracker::new(),
            released: std::sync::atomic::AtomicBool::new(false),
            metrics: Arc::new(Metrics::default()),
            distiller: std::sync::Mutex::new(None),
        }
    }

    /// Runs `distiller` in the background for as long as this backend (see
    /// [`Self::drain`]), yielding to the operations this backend serves.
    pub fn with_distiller(self, distiller: memgate_distill::Distiller) -> Result<Self> {
        let distiller = distiller.yielding_to(Arc::clone(&self.work), memgate_distill::MAX_YIELD);
        let worker = memgate_distill::Worker::start(Arc::new(distiller))?;
        *self.distiller.lock().unwrap_or_else(|p| p.into_inner()) = Some(worker);
        Ok(self)
    }

    /// Stops the distillation worker within `budget` (off the runtime: it
    /// joins a thread).
    async fn stop_distiller(&self, budget: Duration) {
        let worker = self
            .distiller
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .take();
        if let Some(mut worker) = worker {
            let stopped = tokio::task::spawn_blocking(move || worker.stop(budget)).await;
            if !matches!(stopped, Ok(true)) {
                tracing::warn!(
                    "the distillation worker did not stop within the budget; its job stays queued"
                );
            }
        }
    }

    /// Default gates and deadlines (tests, examples, embedders that have no
    /// `memory:` section).
    pub fn with_defaults(inner: Arc<dyn MemoryBackend>) -> Arc<Self> {
        Arc::new(Self::new(inner, Gates::default(), Deadlines::default()))
    }

    /// Shares a metrics registry (the service's `/metrics`).
    pub fn with_metrics(mut self, metrics: Arc<Metrics>) -> Self {
        self.metrics = metrics;
        self
    }

    pub fn gates(&self) -> Gates {
        self.gates
    }

    pub fn deadlines(&self) -> &Deadlines {
        &self.deadlines
    }

    pub fn metrics(&self) -> &Arc<Metrics> {
        &self.metrics
    }

    pub fn work(&self) -> &Arc<WorkTracker> {
        &self.work
    }

    /// A ticket for work that starts later (a background capture): taken
    /// before the task is spawned, so a drain that begins right after the
    /// spawn still waits for it.
    pub fn admit(&self) -> Result<Ticket> {
        self.work
            .admit()
            .ok_or_else(|| MemoryError::Closed(self.inner.name().to_owned()))
    }

    /// Runs one operation: admitted, bounded by its total deadline, observed.
    async fn run<T>(
        &self,
        operation: Operation,
        call: impl Future<Output = Result<T>>,
    ) -> Result<T> {
        let ticket = self.admit()?;
        self.run_admitted(ticket, operation, call).await
    }

    /// [`Self::run`] for work whose ticket was taken earlier.
    async fn run_admitted<T>(
        &self,
        ticket: Ticket,
        operation: Operation,
        call: impl Future<Output = Result<T>>,
    ) -> Result<T> {
        let started = Instant::now();
        let limit = self.deadlines.of(operation);
        let result = match tokio::time::timeout(limit, call).await {
            Ok(result) => result,
            Err(_) => Err(MemoryError::DeadlineExceeded(format!(
                "{operation} did not finish within its total deadline of {}",
                seconds(limit)
            ))),
        };
        drop(ticket);
        let outcome = match &result {
            Ok(_) => "ok",
            Err(err) => err.code(),
        };
        self.metrics
            .observe(operation.as_str(), outcome, started.elapsed());
        if let Err(err) = &result {
            if !err.is_caller_error() {
                tracing::warn!(operation = operation.as_str(), code = err.code(), error = %err, "memory operation failed");
            }
        }
        result
    }

    /// A capture under the capture deadline with a ticket taken earlier:
    /// observed, and softened by the write policy when it runs out of time.
    async fn capture_admitted(
        &self,
        ticket: Ticket,
        capture: impl Future<Output = Result<CaptureReport>>,
    ) -> Result<CaptureReport> {
        let result = self.run_admitted(ticket, Operation::Capture, capture).await;
        self.soften_write_deadline(result)
    }

    /// What a capture answers with `memory.enabled` off: nothing stored,
    /// everything (`messages`) left out, no backend call.
    fn capture_disabled(&self, messages: usize) -> CaptureReport {
        self.metrics
            .observe(Operation::Capture.as_str(), "disabled", Duration::ZERO);
        CaptureReport {
            filtered: messages,
            ..CaptureReport::default()
        }
    }

    /// A whole capture (the backend's, or its fallback after a cursor
    /// read) that runs under `ticket`.
    fn whole_admitted(self: Arc<Self>, ticket: Ticket, whole: WholeCapture) -> WholeCapture {
        WholeCapture::new(move |messages| {
            Box::pin(async move { self.capture_admitted(ticket, whole.capture(messages)).await })
        })
    }

    /// The write policy applied to a capture that ran out of time, exactly as
    /// a backend applies it to its own failures.
    fn soften_write_deadline(&self, result: Result<CaptureReport>) -> Result<CaptureReport> {
        match result {
            Err(err @ MemoryError::DeadlineExceeded(_)) => {
                self.policy
                    .write
                    .apply(Err(err), CaptureReport::default(), "capture")
            }
            other => other,
        }
    }

    /// Closes the door, waits up to `budget` for running work, then lets the
    /// backend release its resources within what is left of the budget.
    /// Every backend bounds its own wait by the time it is given; the guard
    /// around it allows at least [`RELEASE_GRACE`], so an idle backend's
    /// release (closing a file on a blocking thread) is not cut at its first
    /// poll when the budget is zero or spent (`close()`). Idempotent: after
    /// a drain that released the backend, another one answers drained.
    pub async fn drain(&self, budget: Duration) -> DrainReport {
        use std::sync::atomic::Ordering;
        let deadline = Instant::now() + budget;
        self.stop_distiller(budget.min(Duration::from_secs(2)))
            .await;
        let abandoned = self.work.close_and_wait(budget).await;
        if abandoned == 0 && self.released.load(Ordering::Acquire) {
            return DrainReport {
                abandoned,
                backend_drained: true,
            };
        }
        let left = deadline.saturating_duration_since(Instant::now());
        let backend_drained =
            tokio::time::timeout(left.max(RELEASE_GRACE), self.inner.shutdown(left))
                .await
                .unwrap_or_default();
        if abandoned == 0 && backend_drained {
            self.released.store(true, Ordering::Release);
        }
        let report = DrainReport {
            abandoned,
            backend_drained,
        };
        if !report.drained() {
            tracing::warn!(backend = self.inner.name(), "{}", report.describe());
        }
        report
    }
}

/// A capture read against a backend's cursor, run under the ticket its
/// begin took.
struct Admitted {
    capture: Box<dyn CursorCapture>,
    backend: Arc<AssembledBackend>,
    ticket: Ticket,
}

impl CursorCapture for Admitted {
    fn known_prefix(&self) -> Option<(usize, &str)> {
        self.capture.known_prefix()
    }

    fn prefix_head(&self) -> Option<(&str, SequenceHasher)> {
        self.capture.prefix_head()
    }

    fn keeps(&self, message: &Message) -> bool {
        self.capture.keeps(message)
    }

    fn capture(self: Box<Self>, head: KnownHead, rest: Vec<Message>) -> CursorFuture {
        let Self {
            capture,
            backend,
            ticket,
        } = *self;
        Box::pin(async move {
            let captured = backend
                .run_admitted(ticket, Operation::Capture, capture.capture(head, rest))
                .await;
            match captured {
                Ok(CursorOutcome::Captured(report)) => Ok(CursorOutcome::Captured(report)),
                Ok(CursorOutcome::NeedsWhole(whole)) => {
                    let ticket = backend.admit()?;
                    Ok(CursorOutcome::NeedsWhole(
                        backend.whole_admitted(ticket, whole),
                    ))
                }
                Err(err) => backend
                    .soften_write_deadline(Err(err))
                    .map(CursorOutcome::Captured),
            }
        })
    }
}

fn seconds(d: Duration) -> String {
    format!("{:.3} s", d.as_secs_f64())
}

#[async_trait]
impl MemoryBackend for AssembledBackend {
    fn name(&self) -> &str {
        self.inner.name()
    }

    fn capabilities(&self) -> Capabilities {
        self.inner.capabilities()
    }

    fn failure_policy(&self) -> FailurePolicy {
        self.policy
    }

    async fn recall(&self, request: &RecallRequest) -> Result<Recall> {
        if !self.gates.recalls() {
            self.metrics
                .observe(Operation::Recall.as_str(), "disabled", Duration::ZERO);
            return Ok(Recall::empty());
        }
        // The read policy decides every failure, not only the deadline this
        // wrapper imposes: `local` and `postgres` leave their own failures
        // (a database that is down) to it, and a backend that applied it
        // already returns only what the policy does not soften.
        let recalled = self
            .run(Operation::Recall, self.inner.recall(request))
            .await;
        self.policy.read.apply(recalled, Recall::empty(), "recall")
    }

    async fn capture(&self, request: &CaptureRequest) -> Result<CaptureReport> {
        let ticket = self.admit()?;
        if !self.gates.captures() {
            return Ok(self.capture_disabled(request.messages.len()));
        }
        self.capture_admitted(ticket, self.inner.capture(request))
            .await
    }

    /// The backend's way of taking a transcript still being read, wrapped
    /// like every capture: the ticket taken now (before any message is
    /// read, so a drain that starts meanwhile waits for the capture), the
    /// gate (off: read whole and answered without the backend), then the
    /// backend's capture under the capture deadline, observed and softened
    /// as [`capture`](MemoryBackend::capture) is. A capture read against a
    /// cursor that needs the whole transcript after all takes a ticket of
    /// its own for that second capture.
    fn begin_capture(self: Arc<Self>, start: CaptureStart) -> Result<Intake> {
        let ticket = self.admit()?;
        if !self.gates.captures() {
            return Ok(Intake::Whole(WholeCapture::new(move |messages| {
                let report = self.capture_disabled(messages.len());
                drop(ticket);
                Box::pin(std::future::ready(Ok(report)))
            })));
        }
        Ok(match Arc::clone(&self.inner).begin_capture(start)? {
            Intake::Whole(whole) => Intake::Whole(self.whole_admitted(ticket, whole)),
            Intake::Streamed(streamed) => Intake::Streamed(streamed.map(move |capture| {
                Box::pin(async move { self.capture_admitted(ticket, capture).await })
            })),
            Intake::AgainstCursor(capture) => Intake::AgainstCursor(Box::new(Admitted {
                capture,
                backend: self,
                ticket,
            })),
        })
    }

    async fn remember(
        &self,
        caller: &Caller,
        request: &RememberRequest,
    ) -> Result<RememberOutcome> {
        match self
            .run(Operation::Remember, self.inner.remember(caller, request))
            .await
        {
            // The request may have reached the store: say so, never retry.
            Err(MemoryError::DeadlineExceeded(reason)) => Ok(RememberOutcome::Unknown { reason }),
            other => other,
        }
    }

    async fn search(&self, caller: &Caller, query: &SearchQuery) -> Result<Vec<SearchHit>> {
        query.check()?;
        self.run(Operation::Search, self.inner.search(caller, query))
            .await
    }

    async fn list_facts(&self, caller: &Caller, include_retired: bool) -> Result<Vec<Fact>> {
        self.run(
            Operation::ListFacts,
            self.inner.list_facts(caller, include_retired),
        )
        .await
    }

    async fn get_fact(&self, caller: &Caller, id: &str) -> Result<Fact> {
        self.run(Operation::GetFact, self.inner.get_fact(caller, id))
            .await
    }

    async fn revise_fact(&self, caller: &Caller, id: &str, patch: &FactPatch) -> Result<Fact> {
        self.run(
            Operation::ReviseFact,
            self.inner.revise_fact(caller, id, patch),
        )
        .await
    }

    async fn retire_fact(&self, caller: &Caller, id: &str) -> Result<Fact> {
        self.run(Operation::RetireFact, self.inner.retire_fact(caller, id))
            .await
    }

    async fn export(&self, caller: &Caller) -> Result<MemoryExport> {
        self.run(Operation::Export, self.inner.export(caller)).await
    }

    async fn import(&self, caller: &Caller, data: &MemoryExport) -> Result<ImportReport> {
        self.run(Operation::Import, self.inner.import(caller, data))
            .await
    }

    async fn forget(&self, caller: &Caller, target: &ForgetTarget) -> Result<ForgetReport> {
        self.run(Operation::Forget, self.inner.forget(caller, target))
            .await
    }

    async fn stored_scopes(&self, limit: usize) -> Result<Vec<StoredScope>> {
        self.run(Operation::Scopes, self.inner.stored_scopes(limit))
            .await
    }

    async fn fact_history(&self, caller: &Caller, id: &str) -> Result<Vec<Fact>> {
        self.run(Operation::FactHistory, self.inner.fact_history(caller, id))
            .await
    }

    async fn list_threads(&self, caller: &Caller, page: PageRequest) -> Result<ThreadList> {
        self.run(
            Operation::ListThreads,
            self.inner.list_threads(caller, page),
        )
        .await
    }

    async fn read_thread(
        &self,
        caller: &Caller,
        thread: &str,
        page: PageRequest,
    ) -> Result<ThreadTurns> {
        self.run(
            Operation::ReadThread,
            self.inner.read_thread(caller, thread, page),
        )
        .await
    }

    async fn holdings(&self, caller: &Caller) -> Result<memgate_core::Holdings> {
        self.run(Operation::Holdings, self.inner.holdings(caller))
            .await
    }

    async fn prepare_handoff(&self, caller: &Caller, content: &HandoffContent) -> Result<Handoff> {
        self.run(
            Operation::HandoffPrepare,
            self.inner.prepare_handoff(caller, content),
        )
        .await
    }

    async fn get_handoff(&self, caller: &Caller, id: &str) -> Result<Handoff> {
        self.run(Operation::HandoffGet, self.inner.get_handoff(caller, id))
            .await
    }

    async fn correct_handoff(
        &self,
        caller: &Caller,
        id: &str,
        content: &HandoffContent,
    ) -> Result<Handoff> {
        self.run(
            Operation::HandoffCorrect,
            self.inner.correct_handoff(caller, id, content),
        )
        .await
    }

    async fn finalize_handoff(&self, caller: &Caller, id: &str) -> Result<Handoff> {
        self.run(
            Operation::HandoffFinalize,
            self.inner.finalize_handoff(caller, id),
        )
        .await
    }

    async fn continue_handoff(&self, caller: &Caller, id: &str) -> Result<Continuation> {
        self.run(
            Operation::HandoffContinue,
            self.inner.continue_handoff(caller, id),
        )
        .await
    }

    async fn acknowledge_handoff(
        &self,
        caller: &Caller,
        id: &str,
        acknowledgement: &Acknowledgement,
    ) -> Result<Handoff> {
        self.run(
            Operation::HandoffAcknowledge,
            self.inner.acknowledge_handoff(caller, id, acknowledgement),
        )
        .await
    }

    async fn commit_handoff(&self, caller: &Caller, id: &str) -> Result<CommitOutcome> {
        match self
            .run(
                Operation::HandoffCommit,
                self.inner.commit_handoff(caller, id),
            )
            .await
        {
            // The milestone may have reached the store: say so, never retry.
            Err(MemoryError::DeadlineExceeded(reason)) => Ok(CommitOutcome::Unknown { reason }),
            other => other,
        }
    }

    async fn warm(&self) -> Result<WarmStatus> {
        match self.run(Operation::Warm, self.inner.warm()).await {
            Err(MemoryError::DeadlineExceeded(reason))
                if self.policy.startup == memgate_core::StartupPolicy::Warn =>
            {
                Ok(WarmStatus::Degraded { reason })
            }
            other => other,
        }
    }

    /// The backend's own diagnostics within the `other` deadline; one that
    /// does not answer in time is itself a problem line.
    async fn diagnose(&self) -> Vec<Diagnostic> {
        let diagnostics = async { Ok(self.inner.diagnose().await) };
        self.run(Operation::Diagnose, diagnostics)
            .await
            .unwrap_or_else(|e| vec![Diagnostic::problem("diagnose", e.to_string())])
    }

    fn figures(&self) -> Vec<Figure> {
        let mut figures = self.inner.figures();
        if let Some(worker) = &*self.distiller.lock().unwrap_or_else(|p| p.into_inner()) {
            figures.extend(worker.stats().figures());
        }
        figures
    }

    fn release_idle_memory(&self) {
        self.inner.release_idle_memory();
    }

    async fn shutdown(&self, timeout: Duration) -> bool {
        self.drain(timeout).await.drained()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use memgate_core::intake::{Streamed, StreamedCapture};
    use memgate_core::Caller;
    use std::sync::atomic::{AtomicUsize, Ordering};

    /// A backend that counts what reaches it: whole captures, and (when
    /// `streams`) streamed ones, which wait for their transcript's end.
    #[derive(Default)]
    struct Counting {
        captures: AtomicUsize,
        streams: bool,
    }

    #[async_trait]
    impl MemoryBackend for Counting {
        fn name(&self) -> &str {
            "counting"
        }

        fn capabilities(&self) -> Capabilities {
            Capabilities::default()
        }

        async fn recall(&self, _: &RecallRequest) -> Result<Recall> {
            Ok(Recall::empty())
        }

        async fn capture(&self, request: &CaptureRequest) -> Result<CaptureReport> {
            self.captures.fetch_add(1, Ordering::SeqCst);
            Ok(CaptureReport {
                stored: request.messages.len(),
                ..CaptureReport::default()
            })
        }

        fn begin_capture(self: Arc<Self>, start: CaptureStart) -> Result<Intake> {
            if !self.streams {
                return Ok(Intake::whole(self, start));
            }
            Ok(Intake::Streamed(StreamedCapture::new(move |items| {
                Box::pin(async move {
                    self.captures.fetch_add(1, Ordering::SeqCst);
                    let mut stored = 0;
                    loop {
                        match tokio::task::block_in_place(|| items.recv()) {
                            Ok(Streamed::Messages(batch)) => stored += batch.len(),
                            Ok(Streamed::End) => break,
                            Ok(Streamed::Failed(e)) => return Err(e),
                            Err(_) => return Err(MemoryError::backend("hung up")),
                        }
                    }
                    Ok(CaptureReport {
                        stored,
                        ..CaptureReport::default()
                    })
                })
            })))
        }
    }

    fn start() -> CaptureStart {
        CaptureStart {
            caller: Caller::new("u").with_thread("t"),
            kind: Default::default(),
            trace_id: None,
        }
    }

    fn assembled(backend: Arc<Counting>, enabled: bool) -> Arc<AssembledBackend> {
        let gates = Gates {
            enabled,
            ..Gates::default()
        };
        Arc::new(AssembledBackend::new(backend, gates, Deadlines::default()))
    }

    #[tokio::test]
    async fn a_begun_capture_is_gated_and_holds_its_ticket_until_it_ends() {
        let backend = Arc::new(Counting::default());
        let off = assembled(Arc::clone(&backend), false);
        let Intake::Whole(whole) = Arc::clone(&off).begin_capture(start()).unwrap() else {
            panic!("a closed gate reads the transcript whole");
        };
        let report = whole.capture(vec![Message::human("a")]).await.unwrap();
        assert_eq!((report.stored, report.filtered), (0, 1));
        assert_eq!(
            backend.captures.load(Ordering::SeqCst),
            0,
            "no backend call"
        );

        let on = assembled(Arc::clone(&backend), true);
        let Intake::Whole(whole) = Arc::clone(&on).begin_capture(start()).unwrap() else {
            panic!("no fast path: whole");
        };
        assert_eq!(
            on.work().running(),
            1,
            "admitted before any message is read"
        );
        let report = whole.capture(vec![Message::human("a")]).await.unwrap();
        assert_eq!(report.stored, 1);
        assert_eq!(on.work().running(), 0);
        on.drain(Duration::from_secs(1)).await;
        assert!(matches!(
            on.begin_capture(start()),
            Err(MemoryError::Closed(_))
        ));
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_streamed_capture_runs_under_the_assemblys_ticket() {
        let backend = Arc::new(Counting {
            streams: true,
            ..Counting::default()
        });
        let on = assembled(Arc::clone(&backend), true);
        let Intake::Streamed(streamed) = Arc::clone(&on).begin_capture(start()).unwrap() else {
            panic!("the backend streams");
        };
        let (feed, capture) = streamed.into_parts();
        let task = tokio::spawn(capture);
        feed.send(vec![Message::human("a"), Message::human("b")]);
        assert_eq!(on.work().running(), 1);
        feed.end(Ok(()));
        assert_eq!(task.await.unwrap().unwrap().stored, 2);
        assert_eq!(on.work().running(), 0);
        assert_eq!(backend.captures.load(Ordering::SeqCst), 1);
    }

    /// `close()` drains with a zero budget: an idle local store (whose
    /// release closes its file on a blocking thread) is released and said
    /// to be, every time, also right after a drain that already released it.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_zero_budget_drain_of_an_idle_store_releases_it_every_time() {
        for round in 0..20 {
            let dir = tempfile::tempdir().unwrap();
            let local = memgate_store::LocalBackend::from_backend_config(
                &serde_json::Map::new(),
                &memgate_core::BackendContext::new(dir.path()),
            )
            .unwrap();
            let backend = AssembledBackend::with_defaults(Arc::new(local));
            if round % 2 == 1 {
                let flushed = backend.drain(Duration::from_secs(5)).await;
                assert!(flushed.drained(), "round {round}: {flushed:?}");
            }
            let closed = backend.drain(Duration::ZERO).await;
            assert_eq!(
                closed.describe(),
                "all work drained",
                "round {round}: {closed:?}"
            );
        }
    }
}

#[cfg(test)]
mod handoff_tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};

    /// A fake backend whose commit never answers (a lost answer a real
    /// store cannot be made to produce on demand); counts the attempts.
    #[derive(Default)]
    struct FakeLostCommit {
        commits: AtomicUsize,
    }

    #[async_trait]
    impl MemoryBackend for FakeLostCommit {
        fn name(&self) -> &str {
            "fake-lost-commit"
        }

        fn capabilities(&self) -> Capabilities {
            Capabilities::default()
        }

        async fn recall(&self, _: &RecallRequest) -> Result<Recall> {
            Ok(Recall::empty())
        }

        async fn capture(&self, _: &CaptureRequest) -> Result<CaptureReport> {
            Ok(CaptureReport::default())
        }

        async fn commit_handoff(&self, _: &Caller, _: &str) -> Result<CommitOutcome> {
            self.commits.fetch_add(1, Ordering::SeqCst);
            std::future::pending().await
        }
    }

    #[tokio::test]
    async fn a_lost_commit_answer_is_unknown_and_not_retried() {
        let fake = Arc::new(FakeLostCommit::default());
        let assembled = AssembledBackend::new(
            fake.clone(),
            Gates::default(),
            Deadlines::uniform(Duration::from_millis(60)),
        );
        let outcome = assembled
            .commit_handoff(&Caller::new("alice"), "hof_1")
            .await
            .unwrap();
        assert!(
            matches!(outcome, CommitOutcome::Unknown { .. }),
            "{outcome:?}"
        );
        assert!(outcome.describe().contains("not retried"));
        assert_eq!(fake.commits.load(Ordering::SeqCst), 1);
        assert!(assembled
            .metrics()
            .render()
            .contains("operation=\"handoff_commit\",outcome=\"deadline_exceeded\""));
    }

    #[tokio::test]
    async fn a_backend_without_handoffs_answers_unsupported() {
        let assembled = AssembledBackend::with_defaults(Arc::new(FakeLostCommit::default()));
        let err = assembled
            .finalize_handoff(&Caller::new("alice"), "hof_1")
            .await
            .unwrap_err();
        assert_eq!(err.code(), "unsupported");
        assert_eq!(
            err.to_string(),
            "handoff_finalize not supported by fake-lost-commit"
        );
    }
}

#[cfg(test)]
mod read_policy_tests {
    use super::*;
    use memgate_core::ReadPolicy;

    /// A fake store whose recall fails with `error` (a database going away
    /// mid-call is what the real stores give; this makes it deterministic).
    struct FakeFailingRecall {
        error: fn() -> MemoryError,
        read: ReadPolicy,
    }

    #[async_trait]
    impl MemoryBackend for FakeFailingRecall {
        fn name(&self) -> &str {
            "fake-failing-recall"
        }

        fn capabilities(&self) -> Capabilities {
            Capabilities::default()
        }

        fn failure_policy(&self) -> FailurePolicy {
            FailurePolicy {
                read: self.read,
                ..FailurePolicy::default()
            }
        }

        async fn recall(&self, _: &RecallRequest) -> Result<Recall> {
            Err((self.error)())
        }

        async fn capture(&self, _: &CaptureRequest) -> Result<CaptureReport> {
            Ok(CaptureReport::default())
        }
    }

    async fn recall(error: fn() -> MemoryError, read: ReadPolicy) -> Result<Recall> {
        AssembledBackend::with_defaults(Arc::new(FakeFailingRecall { error, read }))
            .recall(&RecallRequest {
                caller: memgate_core::Caller::new("alice"),
                query: Some("harbour".into()),
            })
            .await
    }

    #[tokio::test]
    async fn a_store_failure_is_an_empty_recall_under_fail_open_and_an_error_under_raise() {
        let down = || MemoryError::backend("postgres: connection refused");
        let empty = recall(down, ReadPolicy::FailOpen).await.unwrap();
        assert!(empty.items.is_empty() && empty.text.is_empty(), "{empty:?}");
        let raised = recall(down, ReadPolicy::Raise).await.unwrap_err();
        assert_eq!(raised.code(), "backend_failure");
        // Refusals are never softened into an empty answer.
        let refused = || MemoryError::RejectedIdentity("user default is refused".into());
        let err = recall(refused, ReadPolicy::FailOpen).await.unwrap_err();
        assert_eq!(err.code(), "rejected_identity");
    }
}
