//! `Backend`: one memgate backend (`local`, `openviking`, `powercontext`)
//! behind the Python memory managers.
//!
//! Every method converts its Python arguments while attached to the
//! interpreter, then detaches (releases the GIL) for the backend's I/O on the
//! shared Tokio runtime. The host's keep-hook is a Python callable the
//! backend calls from Rust, re-attaching only for that call.

use crate::capture_result::CaptureResult;
use crate::convert;
use crate::errors;
use crate::runtime::{attached, runtime};
use memgate_assembly::{AssembledBackend, BackendSetup, Deadlines, ManagerClass, MemoryConfig};
use memgate_core::intake::{
    on_callers_thread, CaptureFuture, CaptureStart, CursorCapture, CursorOutcome, Intake,
};
use memgate_core::setup::{process_env, EnvSource};
use memgate_core::tool::call_remember;
use memgate_core::{
    Acknowledgement, Caller, CaptureKind, CaptureReport, FactPatch, ForgetTarget, HandoffContent,
    Holdings, KeepHiddenHook, KnownHead, MemoryBackend, MemoryError, MemoryMode, Message,
    RecallRequest, RememberRequest, SearchQuery, UserId, WarmStatus,
};
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::{PyList, PyTuple};
use serde_json::{Map, Value};
use std::collections::HashMap;
use std::sync::{Arc, OnceLock, RwLock};
use std::time::{Duration, Instant};

/// Where backends read environment variables (the PowerContext binding, the
/// OpenViking key). One process-wide source by default, so a manager and the
/// `remember` tool built in one process share one PowerContext settings
/// snapshot; tests pass their own.
#[pyclass(frozen, module = "memgate._native")]
pub struct Environment {
    source: EnvSource,
}

/// The process environment, one `Arc` for the life of the process.
fn process_source() -> EnvSource {
    static PROCESS: OnceLock<EnvSource> = OnceLock::new();
    PROCESS.get_or_init(process_env).clone()
}

#[pymethods]
impl Environment {
    /// The process environment (the same source every time).
    #[staticmethod]
    fn process() -> Self {
        Self {
            source: process_source(),
        }
    }

    /// A fixed set of variables, read instead of the process environment.
    #[staticmethod]
    fn from_mapping(vars: HashMap<String, String>) -> Self {
        Self {
            source: Arc::new(move |name| vars.get(name).cloned()),
        }
    }
}

/// The host's keep-hook, settable after construction (`from_config` hands it
/// over once the manager exists). Empty: hidden messages are not kept.
#[derive(Default)]
struct KeepHook(RwLock<Option<Py<PyAny>>>);

impl KeepHook {
    /// Calls the hook with the message's `additional_kwargs` as a dict.
    /// A hook that raises keeps nothing and is reported as unraisable.
    fn keeps(&self, kwargs: &Map<String, Value>) -> bool {
        let hook = self.0.read().unwrap_or_else(|p| p.into_inner());
        let Some(hook) = hook.as_ref() else {
            return false;
        };
        attached(|py| {
            let hook = hook.bind(py);
            let verdict = convert::to_py(py, &Value::Object(kwargs.clone()))
                .and_then(|arg| hook.call1((arg,)))
                .and_then(|result| result.is_truthy());
            verdict.unwrap_or_else(|err| {
                err.write_unraisable(py, Some(hook));
                false
            })
        })
        .unwrap_or(false)
    }
}

/// One memgate backend, shared by the manager's sync and async methods.
/// Built by the assembly's one factory, so Python calls pass the same gates,
/// deadlines and drain as every other surface, the capture fast paths
/// included (`MemoryBackend::begin_capture`); background captures hold a
/// ticket of the assembly's in-flight work, which `shutdown` drains.
#[pyclass(frozen, module = "memgate._native")]
pub struct Backend {
    inner: Arc<AssembledBackend>,
    keep_hook: Arc<KeepHook>,
    /// Reports background capture failures to Python (`(code, message)`).
    on_background_error: Option<Py<PyAny>>,
}

fn caller(user: Option<&str>, agent: Option<&str>, thread: Option<&str>) -> Caller {
    Caller {
        user: UserId::from_host(user),
        agent: agent.map(str::to_owned),
        thread: thread.map(str::to_owned),
    }
}

fn parse_mode(mode: &str) -> PyResult<MemoryMode> {
    match mode {
        "middleware" => Ok(MemoryMode::Middleware),
        "tool" => Ok(MemoryMode::Tool),
        _ => Err(PyValueError::new_err(format!(
            "memory.mode must be 'middleware' or 'tool' (got {mode:?})"
        ))),
    }
}

fn parse_kind(kind: &str) -> PyResult<CaptureKind> {
    match kind {
        "after_turn" => Ok(CaptureKind::AfterTurn),
        "before_compaction" => Ok(CaptureKind::BeforeCompaction),
        _ => Err(PyValueError::new_err(format!(
            "capture kind must be 'after_turn' or 'before_compaction' (got {kind:?})"
        ))),
    }
}

/// Seconds as a duration (NaN and negatives mean no time at all).
fn seconds(timeout: f64) -> Duration {
    Duration::try_from_secs_f64(timeout.max(0.0)).unwrap_or(Duration::ZERO)
}

/// A `memory.distill` error as the host's config spells the key:
/// `backend_config.distill.<key>`.
fn in_backend_config(error: MemoryError) -> MemoryError {
    match error {
        MemoryError::Config(message) => {
            MemoryError::Config(message.replace("memory.distill", "backend_config.distill"))
        }
        other => other,
    }
}

/// A capture running on the runtime.
type Capturing = tokio::task::JoinHandle<memgate_core::Result<CaptureReport>>;

/// How a started capture ended (a task that panicked is a backend failure).
async fn outcome(task: Capturing) -> memgate_core::Result<CaptureReport> {
    task.await
        .map_err(|e| MemoryError::backend(format!("capture task failed: {e}")))?
}

/// A capture's messages once read from Python.
enum Read {
    /// Read (whole, or against the backend's cursor), admitted, not
    /// started yet.
    Ready(CaptureFuture),
    /// A streamed capture, already running on the runtime.
    Streamed(Capturing),
}

/// A capture read against the backend's cursor: if the cursor moved under
/// the head (an interrupted capture reconciled to a prefix this transcript
/// does not have), the head's messages are read whole after all and
/// captured the usual way.
async fn against_cursor(
    capture: Box<dyn CursorCapture>,
    head: KnownHead,
    rest: Vec<Message>,
    transcript: Py<PyAny>,
) -> memgate_core::Result<CaptureReport> {
    let whole = match capture.capture(head, rest).await? {
        CursorOutcome::Captured(report) => return Ok(report),
        CursorOutcome::NeedsWhole(whole) => whole,
    };
    let messages = attached(|py| {
        convert::messages(transcript.bind(py))
            .map_err(|e| MemoryError::invalid("messages", e.value(py).to_string()))
    })
    .unwrap_or_else(|| Err(MemoryError::Closed("the Python interpreter".into())))?;
    whole.capture(messages).await
}

/// Reads a transcript for a capture begun against the backend's cursor:
/// when it is a list or tuple and the cursor holds a prefix, the head is
/// recognised by the cursor's fingerprint of it (or, failing that, signed
/// in place) and only the rest converted; otherwise (no prefix, a one-pass
/// iterable, a transcript that does not start with the prefix) every
/// message is converted.
fn read_against_cursor(
    capture: &dyn CursorCapture,
    messages: &Bound<'_, PyAny>,
) -> PyResult<(KnownHead, Vec<Message>)> {
    let rereadable = messages.is_instance_of::<PyList>() || messages.is_instance_of::<PyTuple>();
    let keeps = |m: &Message| capture.keeps(m);
    if let Some((fingerprint, running)) = capture.prefix_head().filter(|_| rereadable) {
        if let Some(read) = convert::read_recognised(messages, fingerprint, running, keeps)? {
            return Ok(read);
        }
    }
    if let Some((count, digest)) = capture.known_prefix().filter(|&(count, _)| count > 0) {
        if rereadable {
            if let Some(read) = convert::read_against_prefix(messages, count, digest, keeps)? {
                return Ok(read);
            }
        }
    }
    Ok((KnownHead::default(), convert::messages(messages)?))
}

/// Messages per hand-off to a streamed capture: few enough that the
/// backend starts early, enough that waking it is not the cost.
const STREAM_BATCH: usize = 32;

impl Backend {
    /// Reads `messages` and starts their capture on the runtime. A streamed
    /// capture (the local store) stores each batch of messages while the
    /// next ones are still being read: reading LangChain objects needs the
    /// GIL and costs about as much as the store's work, so the two overlap
    /// instead of adding up. Other backends get the transcript once it is
    /// read. A message that cannot be read fails this call and stores
    /// nothing.
    fn start_capture(
        &self,
        who: Caller,
        kind: CaptureKind,
        messages: &Bound<'_, PyAny>,
        trace_id: Option<String>,
    ) -> PyResult<Capturing> {
        Ok(match self.read_capture(who, kind, messages, trace_id)? {
            Read::Ready(capture) => runtime().spawn(capture),
            Read::Streamed(task) => task,
        })
    }

    /// Begins a capture through the contract (the assembly admits it and
    /// applies the gate there) and reads its messages the way the backend
    /// asks: whole, against its cursor, or streamed into a capture already
    /// running.
    fn read_capture(
        &self,
        who: Caller,
        kind: CaptureKind,
        messages: &Bound<'_, PyAny>,
        trace_id: Option<String>,
    ) -> PyResult<Read> {
        let start = CaptureStart {
            caller: who,
            kind,
            trace_id,
        };
        let intake = Arc::clone(&self.inner)
            .begin_capture(start)
            .map_err(errors::to_py)?;
        match intake {
            Intake::Whole(whole) => Ok(Read::Ready(whole.capture(convert::messages(messages)?))),
            Intake::AgainstCursor(capture) => {
                let (head, rest) = read_against_cursor(capture.as_ref(), messages)?;
                let transcript = messages.clone().unbind();
                Ok(Read::Ready(Box::pin(against_cursor(
                    capture, head, rest, transcript,
                ))))
            }
            Intake::Streamed(streamed) => {
                let (feed, capture) = streamed.into_parts();
                // Started before the first message is read, so the backend
                // works while the rest is read.
                let task = runtime().spawn(capture);
                let mut batch = Vec::with_capacity(STREAM_BATCH);
                let read = convert::for_each_message(messages, |m| {
                    batch.push(m);
                    if batch.len() == STREAM_BATCH {
                        feed.send(std::mem::replace(
                            &mut batch,
                            Vec::with_capacity(STREAM_BATCH),
                        ));
                    }
                });
                feed.send(batch);
                feed.end(match &read {
                    Ok(()) => Ok(()),
                    Err(_) => Err(MemoryError::invalid("messages", "could not be read")),
                });
                read.map(|()| Read::Streamed(task))
            }
        }
    }

    /// Runs a backend future with the GIL released; its result as Python
    /// values (dicts, lists, strings).
    fn answer<'py, T: serde::Serialize + Send>(
        &self,
        py: Python<'py>,
        fut: impl std::future::Future<Output = memgate_core::Result<T>> + Send,
    ) -> PyResult<Bound<'py, PyAny>> {
        let value = self.run(py, fut)?;
        convert::serialize_to_py(py, &value)
    }

    /// Runs a backend future with the GIL released.
    fn run<T: Send>(
        &self,
        py: Python<'_>,
        fut: impl std::future::Future<Output = memgate_core::Result<T>> + Send,
    ) -> PyResult<T> {
        py.detach(|| runtime().block_on(fut)).map_err(errors::to_py)
    }
}

#[pymethods]
impl Backend {
    /// Builds the named backend from its `backend_config` (the host's dict,
    /// with `storage_path` already resolved), the memory mode and the
    /// storage root. No network I/O (`warm` checks health).
    /// `enabled`, `injection_enabled` and `deadlines` (a dict shaped like
    /// `memory.deadlines`) are the assembly's gates and total deadlines;
    /// DeerFlow gates on its own config, so its managers keep the defaults.
    #[staticmethod]
    #[pyo3(signature = (manager_class, backend_config, mode, storage_path, environment=None, on_background_error=None, enabled=true, injection_enabled=true, deadlines=None))]
    #[allow(clippy::too_many_arguments)] // keyword arguments from Python, one each
    fn open(
        py: Python<'_>,
        manager_class: &str,
        backend_config: &Bound<'_, PyAny>,
        mode: &str,
        storage_path: &str,
        environment: Option<&Environment>,
        on_background_error: Option<Py<PyAny>>,
        enabled: bool,
        injection_enabled: bool,
        deadlines: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Self> {
        let mut config = match convert::to_json(backend_config)? {
            Value::Object(map) => map,
            Value::Null => Map::new(),
            _ => return Err(PyValueError::new_err("backend_config must be a mapping")),
        };
        // The host has one `backend_config` per manager: memgate's
        // `memory.distill` rides in it, and the worker runs while the
        // manager is open.
        let distill = config.remove("distill");
        let keep_hook = Arc::new(KeepHook::default());
        let hook = Arc::clone(&keep_hook);
        let keep_hidden: KeepHiddenHook = Arc::new(move |kwargs| hook.keeps(kwargs));
        let deadlines = match deadlines {
            None => Deadlines::default(),
            Some(d) => serde_json::from_value(convert::to_json(d)?)
                .map_err(|e| PyValueError::new_err(format!("deadlines: {e}")))?,
        };
        let memory = MemoryConfig {
            manager_class: ManagerClass::parse(manager_class)
                .map_err(|e| errors::to_py(MemoryError::Config(e)))?,
            mode: parse_mode(mode)?,
            backend_config: config,
            enabled,
            injection_enabled,
            deadlines,
            distill,
            ..MemoryConfig::default()
        };
        let setup = BackendSetup::new(
            storage_path,
            environment.map_or_else(process_source, |e| e.source.clone()),
        )
        .with_keep_hidden(keep_hidden)
        .running_distiller();
        let inner = py
            .detach(|| {
                let _entered = runtime().enter();
                memgate_assembly::open_backend(&memory, &setup)
            })
            .map_err(|e| errors::to_py(in_backend_config(e)))?;
        Ok(Self {
            inner,
            keep_hook,
            on_background_error,
        })
    }

    /// Sets (or clears, with `None`) the host's `should_keep_hidden_message`.
    fn set_keep_hidden(&self, hook: Option<Py<PyAny>>) {
        *self.keep_hook.0.write().unwrap_or_else(|p| p.into_inner()) = hook;
    }

    #[getter]
    fn name(&self) -> String {
        self.inner.name().to_owned()
    }

    /// What the backend can do, as a dict of flags.
    fn capabilities<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        convert::serialize_to_py(py, &self.inner.capabilities())
    }

    /// The block to inject for the caller: unwrapped text, empty for nothing.
    #[pyo3(signature = (user, agent=None, thread=None, query=None))]
    fn recall(
        &self,
        py: Python<'_>,
        user: Option<&str>,
        agent: Option<&str>,
        thread: Option<&str>,
        query: Option<&str>,
    ) -> PyResult<String> {
        let request = RecallRequest {
            caller: caller(user, agent, thread),
            query: query.map(str::to_owned),
        };
        let backend = &self.inner;
        Ok(self.run(py, backend.recall(&request))?.text)
    }

    /// Captures a transcript snapshot (`after_turn`) or a compaction head
    /// (`before_compaction`); returns a `CaptureResult`: `(stored,
    /// already_known, filtered)` and the messages memory kept only part of.
    #[pyo3(signature = (thread, messages, user=None, agent=None, kind="after_turn", trace_id=None))]
    fn capture(
        &self,
        thread: &str,
        messages: &Bound<'_, PyAny>,
        user: Option<&str>,
        agent: Option<&str>,
        kind: &str,
        trace_id: Option<String>,
    ) -> PyResult<CaptureResult> {
        let py = messages.py();
        let who = caller(user, agent, Some(thread));
        let report = match self.read_capture(who, parse_kind(kind)?, messages, trace_id)? {
            // Run on this (detached) thread: a capture with nothing to send
            // then never leaves it, and one that sends hands off only its
            // requests and their confirmation, not its start, its answer
            // or the intent saved before them (`on_callers_thread`).
            Read::Ready(capture) => py.detach(|| runtime().block_on(on_callers_thread(capture))),
            Read::Streamed(task) => py.detach(|| runtime().block_on(outcome(task))),
        };
        Ok(CaptureResult::new(&report.map_err(errors::to_py)?))
    }

    /// Like `capture`, for a caller on an event loop: returns once the
    /// messages are read, and calls `done(code, message, report)` from
    /// another thread when the capture ends (`code` None on success, the
    /// report a `CaptureResult` or None).
    /// `shutdown` waits for it.
    #[pyo3(signature = (thread, messages, done, user=None, agent=None, kind="after_turn", trace_id=None))]
    #[allow(clippy::too_many_arguments)] // the host contract's arguments, one each
    fn capture_then(
        &self,
        thread: &str,
        messages: &Bound<'_, PyAny>,
        done: Py<PyAny>,
        user: Option<&str>,
        agent: Option<&str>,
        kind: &str,
        trace_id: Option<String>,
    ) -> PyResult<()> {
        let who = caller(user, agent, Some(thread));
        let task = self.start_capture(who, parse_kind(kind)?, messages, trace_id)?;
        // Held until `done` has run, so `shutdown` waits for the answer too.
        let answering = self.inner.admit().map_err(errors::to_py)?;
        runtime().spawn(async move {
            let ended = outcome(task).await;
            attached(|py| {
                let args = match &ended {
                    Ok(report) => (None, None, Some(CaptureResult::new(report))),
                    Err(err) => (Some(err.code()), Some(err.to_string()), None),
                };
                if let Err(e) = done.bind(py).call1(args) {
                    e.write_unraisable(py, Some(done.bind(py)));
                }
            });
            drop(answering);
        });
        Ok(())
    }

    /// Like `capture`, but returns once the messages are read: the capture
    /// runs on the runtime, failures go to `on_background_error`, and
    /// `shutdown` drains it.
    #[pyo3(signature = (thread, messages, user=None, agent=None, kind="after_turn"))]
    fn capture_in_background(
        &self,
        thread: &str,
        messages: &Bound<'_, PyAny>,
        user: Option<&str>,
        agent: Option<&str>,
        kind: &str,
    ) -> PyResult<()> {
        let who = caller(user, agent, Some(thread));
        let task = self.start_capture(who, parse_kind(kind)?, messages, None)?;
        let report_to = self
            .on_background_error
            .as_ref()
            .map(|f| f.clone_ref(messages.py()));
        let reporting = self.inner.admit().map_err(errors::to_py)?;
        runtime().spawn(async move {
            if let Err(err) = outcome(task).await {
                let (code, message) = (err.code(), err.to_string());
                // The reporter decides how loud a failure is (a refused
                // caller may be expected on every turn); without one, log.
                match report_to {
                    Some(report_to) => {
                        attached(|py| {
                            if let Err(e) = report_to.bind(py).call1((code, message)) {
                                e.write_unraisable(py, Some(report_to.bind(py)));
                            }
                        });
                    }
                    None => tracing::error!(code, "background capture failed: {message}"),
                }
            }
            drop(reporting);
        });
        Ok(())
    }

    /// Waits up to `timeout` seconds for background captures (and any other
    /// running operation); true when none runs.
    fn wait_background(&self, py: Python<'_>, timeout: f64) -> bool {
        let deadline = Instant::now() + seconds(timeout);
        let work = Arc::clone(self.inner.work());
        py.detach(|| runtime().block_on(work.wait_idle(deadline)) == 0)
    }

    /// Search results as dicts `{id, content, category, score, source}`.
    #[pyo3(signature = (query, top_k=5, user=None, agent=None, kind=None))]
    fn search<'py>(
        &self,
        py: Python<'py>,
        query: &str,
        top_k: usize,
        user: Option<&str>,
        agent: Option<&str>,
        kind: Option<&str>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let who = caller(user, agent, None);
        let search = SearchQuery {
            query: query.to_owned(),
            top_k,
            kind: kind.map(str::to_owned),
        };
        self.answer(py, self.inner.search(&who, &search))
    }

    /// Saves one explicit memory (a "fact"): the outcome as a dict
    /// `{outcome: stored | already_present | unknown | failed, citation?, reason?}`.
    /// `confidence` (0–1) is stored with it (unset: 1).
    #[pyo3(signature = (kind, text, user=None, agent=None, confidence=None))]
    fn remember<'py>(
        &self,
        py: Python<'py>,
        kind: &str,
        text: &str,
        user: Option<&str>,
        agent: Option<&str>,
        confidence: Option<f64>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let request = RememberRequest::new(kind, text)
            .and_then(|r| r.with_confidence(confidence))
            .map_err(errors::to_py)?;
        let who = caller(user, agent, None);
        self.answer(py, self.inner.remember(&who, &request))
    }

    /// The caller's explicit memories, oldest first, as dicts
    /// `{id, kind, text, state, version, created_at, updated_at, origin,
    /// confidence, changed_by}` (+ `sources`, `thread`, `said_at`,
    /// `valid_to`, `superseded_by` when known).
    #[pyo3(signature = (user=None, agent=None, include_retired=false))]
    fn list_facts<'py>(
        &self,
        py: Python<'py>,
        user: Option<&str>,
        agent: Option<&str>,
        include_retired: bool,
    ) -> PyResult<Bound<'py, PyAny>> {
        let who = caller(user, agent, None);
        self.answer(py, self.inner.list_facts(&who, include_retired))
    }

    /// Prepares a handoff draft of the caller's running task (`thread` is
    /// where it comes from); returns the handoff as a dict.
    #[pyo3(signature = (objective, next_action, progress=Vec::new(), blockers=Vec::new(), evidence=Vec::new(), user=None, agent=None, thread=None))]
    #[allow(clippy::too_many_arguments)] // the handoff's fields and the caller, one each
    fn handoff_prepare<'py>(
        &self,
        py: Python<'py>,
        objective: &str,
        next_action: &str,
        progress: Vec<String>,
        blockers: Vec<String>,
        evidence: Vec<String>,
        user: Option<&str>,
        agent: Option<&str>,
        thread: Option<&str>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let content = HandoffContent::new(objective, &progress, &blockers, next_action, &evidence)
            .map_err(errors::to_py)?;
        let who = caller(user, agent, thread);
        self.answer(py, self.inner.prepare_handoff(&who, &content))
    }

    /// Replaces a draft's content (only a draft can be corrected).
    #[pyo3(signature = (id, objective, next_action, progress=Vec::new(), blockers=Vec::new(), evidence=Vec::new(), user=None, agent=None, thread=None))]
    #[allow(clippy::too_many_arguments)] // the handoff's fields and the caller, one each
    fn handoff_correct<'py>(
        &self,
        py: Python<'py>,
        id: &str,
        objective: &str,
        next_action: &str,
        progress: Vec<String>,
        blockers: Vec<String>,
        evidence: Vec<String>,
        user: Option<&str>,
        agent: Option<&str>,
        thread: Option<&str>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let content = HandoffContent::new(objective, &progress, &blockers, next_action, &evidence)
            .map_err(errors::to_py)?;
        let who = caller(user, agent, thread);
        self.answer(py, self.inner.correct_handoff(&who, id, &content))
    }

    /// The caller's own handoff (another owner's is `not_found`).
    #[pyo3(signature = (id, user=None, agent=None, thread=None))]
    fn handoff_get<'py>(
        &self,
        py: Python<'py>,
        id: &str,
        user: Option<&str>,
        agent: Option<&str>,
        thread: Option<&str>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let who = caller(user, agent, thread);
        self.answer(py, self.inner.get_handoff(&who, id))
    }

    /// Turns a draft into the prepared handoff a receiver continues from.
    #[pyo3(signature = (id, user=None, agent=None, thread=None))]
    fn handoff_finalize<'py>(
        &self,
        py: Python<'py>,
        id: &str,
        user: Option<&str>,
        agent: Option<&str>,
        thread: Option<&str>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let who = caller(user, agent, thread);
        self.answer(py, self.inner.finalize_handoff(&who, id))
    }

    /// What the receiving thread continues from: `{handoff, block}`, the
    /// block being untrusted history to show as such.
    #[pyo3(signature = (id, user=None, agent=None, thread=None))]
    fn handoff_continue<'py>(
        &self,
        py: Python<'py>,
        id: &str,
        user: Option<&str>,
        agent: Option<&str>,
        thread: Option<&str>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let who = caller(user, agent, thread);
        self.answer(py, self.inner.continue_handoff(&who, id))
    }

    /// Records the receiver's answer: `accepted`, or `needs_clarification`
    /// / `declined` with a message.
    #[pyo3(signature = (id, decision, message=None, user=None, agent=None, thread=None))]
    #[allow(clippy::too_many_arguments)] // the answer and the caller, one each
    fn handoff_acknowledge<'py>(
        &self,
        py: Python<'py>,
        id: &str,
        decision: &str,
        message: Option<&str>,
        user: Option<&str>,
        agent: Option<&str>,
        thread: Option<&str>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let answer = Acknowledgement::new(decision, message).map_err(errors::to_py)?;
        let who = caller(user, agent, thread);
        self.answer(py, self.inner.acknowledge_handoff(&who, id, &answer))
    }

    /// Stores the handoff as a milestone memory: only on explicit request.
    #[pyo3(signature = (id, user=None, agent=None, thread=None))]
    fn handoff_commit<'py>(
        &self,
        py: Python<'py>,
        id: &str,
        user: Option<&str>,
        agent: Option<&str>,
        thread: Option<&str>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let who = caller(user, agent, thread);
        self.answer(py, self.inner.commit_handoff(&who, id))
    }

    /// One explicit memory by id (retired ones too); `not_found` otherwise.
    #[pyo3(signature = (id, user=None, agent=None))]
    fn get_fact<'py>(
        &self,
        py: Python<'py>,
        id: &str,
        user: Option<&str>,
        agent: Option<&str>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let who = caller(user, agent, None);
        self.answer(py, self.inner.get_fact(&who, id))
    }

    /// Revises an explicit memory's kind, text and/or confidence (history
    /// is kept; a confidence alone is a revision too).
    #[pyo3(signature = (id, user=None, agent=None, kind=None, text=None, confidence=None))]
    #[allow(clippy::too_many_arguments)] // keyword arguments from Python, one each
    fn revise_fact<'py>(
        &self,
        py: Python<'py>,
        id: &str,
        user: Option<&str>,
        agent: Option<&str>,
        kind: Option<String>,
        text: Option<String>,
        confidence: Option<f64>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let who = caller(user, agent, None);
        let patch = FactPatch {
            kind,
            text,
            confidence,
        };
        self.answer(py, self.inner.revise_fact(&who, id, &patch))
    }

    /// Retires an explicit memory: no longer recalled, never erased.
    #[pyo3(signature = (id, user=None, agent=None))]
    fn retire_fact<'py>(
        &self,
        py: Python<'py>,
        id: &str,
        user: Option<&str>,
        agent: Option<&str>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let who = caller(user, agent, None);
        self.answer(py, self.inner.retire_fact(&who, id))
    }

    /// Erases for good (the local store; others answer unsupported):
    /// `target` is `fact` (with `id`), `thread`, `scope` or `user`.
    #[pyo3(signature = (target, id=None, user=None, agent=None, thread=None))]
    fn forget<'py>(
        &self,
        py: Python<'py>,
        target: &str,
        id: Option<&str>,
        user: Option<&str>,
        agent: Option<&str>,
        thread: Option<&str>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let target = match (target, id) {
            ("fact", Some(id)) => ForgetTarget::Fact { id: id.to_owned() },
            ("thread", _) => ForgetTarget::Thread,
            ("scope", _) => ForgetTarget::Scope,
            ("user", _) => ForgetTarget::User,
            _ => {
                return Err(PyValueError::new_err(
                    "target must be fact (with an id), thread, scope or user",
                ))
            }
        };
        let who = caller(user, agent, thread);
        self.answer(py, self.inner.forget(&who, &target))
    }

    /// One `remember` tool call: the model's arguments (only `text` and
    /// `kind`), the host's principal. Returns `(is_error, content)`.
    #[pyo3(signature = (arguments, user=None, agent=None, thread=None))]
    fn call_remember_tool<'py>(
        &self,
        py: Python<'py>,
        arguments: &Bound<'py, PyAny>,
        user: Option<&str>,
        agent: Option<&str>,
        thread: Option<&str>,
    ) -> PyResult<(bool, Bound<'py, PyAny>)> {
        let args = convert::to_json(arguments)?;
        let principal = caller(user, agent, thread);
        let backend = &self.inner;
        let result =
            py.detach(|| runtime().block_on(call_remember(backend.as_ref(), &principal, &args)));
        Ok((result.is_error, convert::to_py(py, &result.content)?))
    }

    /// What `memgate doctor` prints about this backend beyond its health
    /// check, as `(check, healthy, detail)` (PowerContext: the `capture`
    /// line, Source capture on or off).
    fn diagnose(&self, py: Python<'_>) -> Vec<(String, bool, String)> {
        let backend = &self.inner;
        py.detach(|| runtime().block_on(backend.diagnose()))
            .into_iter()
            .map(|d| (d.check, d.healthy, d.detail))
            .collect()
    }

    /// What the caller's scope holds besides its active facts, for the
    /// host's memory document: `{turns, threads, last_captured_at,
    /// last_changed_at}` (the last two RFC 3339 or `None`). A retired
    /// fact's retirement counts as a change, so the time never moves
    /// backwards when a fact is deleted.
    #[pyo3(signature = (user=None, agent=None))]
    fn holdings<'py>(
        &self,
        py: Python<'py>,
        user: Option<&str>,
        agent: Option<&str>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let who = caller(user, agent, None);
        // The store counts when it can; a backend without the count (a
        // server's memory) is counted from its export.
        let counted = py.detach(|| runtime().block_on(self.inner.holdings(&who)));
        let holdings = match counted {
            Err(memgate_core::MemoryError::Unsupported { .. }) => {
                Holdings::of_export(&self.run(py, self.inner.export(&who))?)
            }
            other => other.map_err(errors::to_py)?,
        };
        convert::serialize_to_py(py, &holdings)
    }

    /// Start-up health: `("ready", None)`, `("degraded", reason)` or
    /// `("nothing", None)`; a `fail_fast` failure raises.
    fn warm(&self, py: Python<'_>) -> PyResult<(&'static str, Option<String>)> {
        let backend = &self.inner;
        Ok(match self.run(py, backend.warm())? {
            WarmStatus::Ready => ("ready", None),
            WarmStatus::Degraded { reason } => ("degraded", Some(reason)),
            WarmStatus::NothingToWarm => ("nothing", None),
        })
    }

    /// Stops new work, drains background captures and in-flight work within
    /// `timeout` seconds in total, then releases resources. False when work
    /// was still running at the deadline (the last of it releases them).
    fn shutdown(&self, py: Python<'_>, timeout: f64) -> bool {
        let backend = &self.inner;
        py.detach(|| {
            runtime()
                .block_on(backend.drain(seconds(timeout)))
                .drained()
        })
    }

    fn __repr__(&self) -> String {
        format!("<memgate backend {}>", self.inner.name())
    }
}

/// The remember tool's spec (`{namespace, name, description, input_schema}`).
#[pyfunction]
pub fn remember_tool_spec<'py>(
    py: Python<'py>,
    namespace: &str,
    store: &str,
) -> PyResult<Bound<'py, PyAny>> {
    convert::serialize_to_py(py, &memgate_core::tool::remember_spec(namespace, store))
}
