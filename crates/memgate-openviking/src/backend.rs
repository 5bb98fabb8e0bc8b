//! `OpenVikingBackend`: the memory contract over one OpenViking USER key.

use crate::capture::{
    capture_session, load_session_cursor, CaptureOutcome, CaptureTarget, Transcript,
};
use crate::client::OpenVikingClient;
use crate::config::OpenVikingConfig;
use crate::cursor::TranscriptCursor;
use crate::delivery::deliver_session;
use crate::injection::format_injection;
use crate::lifecycle::{Lifecycle, Operation};
use crate::locks::{SessionGuard, SessionLocks};
use crate::outbox::{blocking, now_ms, Outbox, OutboxFigures};
use crate::pystr;
use crate::retrieval::{retrieve, RetrievalRequest, RetrievedMemory};
use crate::scope::{canonical_peer_id, check_owner, session_id, UriStyle};
use async_trait::async_trait;
use memgate_core::capture::{captureable, is_captureable};
use memgate_core::intake::{
    CaptureStart, CursorCapture, CursorFuture, CursorOutcome, Intake, WholeCapture,
};
use memgate_core::signature::SequenceHasher;
use memgate_core::{
    BackendContext, Caller, Capabilities, CaptureReport, CaptureRequest, Citation, Diagnostic,
    Figure, KeepHiddenHook, KnownHead, MemoryBackend, MemoryError, MemoryMode, Message, Recall,
    RecallRequest, RecalledItem, Redactor, Result, SearchHit, SearchQuery, StartupPolicy,
    WarmStatus,
};
use serde_json::{Map, Value};
use std::borrow::Cow;
use std::fmt;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

/// How often the background task looks for due outbox entries, and how
/// many sessions it serves per look (each one attempt, oldest entry first).
const DELIVERY_TICK: Duration = Duration::from_millis(500);
const SESSIONS_PER_TICK: usize = 64;

/// Why `mode: tool` is refused: model-driven memory belongs to OpenViking's
/// own MCP server.
pub const MIDDLEWARE_ONLY: &str = "The OpenViking automatic-memory backend supports memory.mode='middleware' only; use OpenViking MCP for explicit model tools";

/// What the health check reports.
const UNHEALTHY: &str = "OpenViking health check returned an unhealthy response";

/// The OpenViking backend (`manager_class: openviking`).
///
/// One instance serves one host user (`owner_user_id`) with one OpenViking
/// USER API key; each agent is a peer inside that user and each thread a
/// session. Recall, capture and search are supported; fact management,
/// import/export and `remember` answer `Unsupported`.
#[derive(Clone)]
pub struct OpenVikingBackend {
    inner: Arc<Inner>,
}

struct Inner {
    config: Arc<OpenVikingConfig>,
    lifecycle: Arc<Lifecycle>,
    locks: Arc<SessionLocks>,
    keep_hidden: Option<KeepHiddenHook>,
    redactor: Arc<Redactor>,
    uri_style: Mutex<UriStyle>,
    server_version: Mutex<Option<String>>,
    /// The healthy `/health` body of the last warm, taken by the next
    /// diagnose: `doctor` warms, then diagnoses, and asks the server once.
    warm_health: Mutex<Option<Value>>,
    /// Why every operation is refused: the start-up check found the key
    /// acting as another user than `owner_user_id`. Set once by `warm`; only
    /// a restart with a fixed configuration clears it.
    foreign_key: Mutex<Option<String>>,
    outbox: Option<Arc<Outbox>>,
    delivering: AtomicBool,
}

impl fmt::Debug for OpenVikingBackend {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("OpenVikingBackend")
            .field("config", &self.inner.config)
            .field("uri_style", &self.uri_style())
            .field("closed", &self.inner.lifecycle.is_closed())
            .finish_non_exhaustive()
    }
}

/// A capture begun while its session was free
/// ([`OpenVikingBackend::try_begin_capture`]): the session's lock held and
/// its cursor read. A surface that still has to read the transcript (the
/// Python extension, from LangChain objects) reads it against the cursor's
/// prefix: the head the cursor holds is signed in place and handed over as
/// a [`KnownHead`], only the messages after it are converted. The lock
/// keeps the cursor the head was read against the one the capture plans
/// with. Surfaces get it through the contract
/// ([`MemoryBackend::begin_capture`], as a [`CursorCapture`]).
pub struct BegunCapture {
    backend: OpenVikingBackend,
    op: Operation,
    guard: SessionGuard,
    target: CaptureTarget,
    loaded: TranscriptCursor,
}

impl BegunCapture {
    /// The prefix the cursor holds: how many captured messages, and their
    /// sequence digest.
    pub fn known_prefix(&self) -> Option<(usize, &str)> {
        let count = usize::try_from(self.loaded.submitted_prefix_count?).ok()?;
        Some((count, self.loaded.submitted_prefix_digest.as_deref()?))
    }

    /// The fingerprint the cursor recorded for its prefix and the prefix's
    /// running digest, when it recorded one: a surface that finds the same
    /// fingerprint on the transcript's head hands it over recognised
    /// ([`KnownHead::recognised`]), without signing it.
    pub fn prefix_head(&self) -> Option<(&str, SequenceHasher)> {
        let head = self.loaded.prefix_head.as_ref()?;
        Some((head.fingerprint.as_str(), head.running()))
    }

    /// The capture filter for one message (hidden messages go to the host's
    /// keep-hook), for a surface building the head.
    pub fn keeps(&self, message: &Message) -> bool {
        is_captureable(message, self.backend.inner.keep_hidden.as_ref())
    }

    /// Captures `head` followed by `rest` (every message after the head, not
    /// yet filtered). `Ok(None)`: nothing was sent because a message of the
    /// head must be sent after all (the head did not match the cursor, or an
    /// interrupted capture moved it); capture the whole transcript instead.
    /// The messages after the head are given up: their strings move into
    /// the payloads sent.
    pub async fn capture(
        self,
        head: KnownHead,
        rest: Vec<Message>,
    ) -> Result<Option<CaptureReport>> {
        let backend = self.backend;
        backend.start_delivery();
        let read = rest.len();
        let keep = backend.inner.keep_hidden.as_ref();
        let captured: Vec<_> = rest
            .into_iter()
            .filter(|m| is_captureable(m, keep))
            .map(Cow::Owned)
            .collect();
        let filtered = head.filtered() + read - captured.len();
        let transcript = Transcript::with_head(head, captured);
        let outcome =
            capture_session(self.op, self.guard, self.target, self.loaded, transcript).await?;
        backend.capture_report(outcome, filtered)
    }
}

/// The contract's face of a begun capture: a head the cursor does not hold
/// after all asks for the whole transcript, which the same backend then
/// captures the usual way ([`MemoryBackend::capture`]).
struct AgainstCursor {
    begun: BegunCapture,
    start: CaptureStart,
}

impl CursorCapture for AgainstCursor {
    fn known_prefix(&self) -> Option<(usize, &str)> {
        self.begun.known_prefix()
    }

    fn prefix_head(&self) -> Option<(&str, SequenceHasher)> {
        self.begun.prefix_head()
    }

    fn keeps(&self, message: &Message) -> bool {
        self.begun.keeps(message)
    }

    fn capture(self: Box<Self>, head: KnownHead, rest: Vec<Message>) -> CursorFuture {
        let Self { begun, start } = *self;
        Box::pin(async move {
            let backend = begun.backend.clone();
            Ok(match begun.capture(head, rest).await? {
                Some(report) => CursorOutcome::Captured(report),
                None => CursorOutcome::NeedsWhole(WholeCapture::of(Arc::new(backend), start)),
            })
        })
    }
}

impl OpenVikingBackend {
    /// Builds the backend from `memory.backend_config`. Refuses any mode but
    /// `middleware` before reading the configuration. Makes no network call
    /// (`warm` does the health check).
    pub fn from_backend_config(config: &Map<String, Value>, ctx: &BackendContext) -> Result<Self> {
        if ctx.mode != MemoryMode::Middleware {
            return Err(MemoryError::Config(MIDDLEWARE_ONLY.to_owned()));
        }
        let config = OpenVikingConfig::from_backend_config(config, ctx)?;
        Self::build(config, ctx.keep_hidden.clone(), Arc::clone(&ctx.redactor))
    }

    /// Builds the backend from a validated configuration (default redaction).
    pub fn new(config: OpenVikingConfig, keep_hidden: Option<KeepHiddenHook>) -> Result<Self> {
        Self::build(config, keep_hidden, Redactor::shared_default())
    }

    fn build(
        config: OpenVikingConfig,
        keep_hidden: Option<KeepHiddenHook>,
        redactor: Arc<Redactor>,
    ) -> Result<Self> {
        let client = OpenVikingClient::new(&config.base_url, &config.api_key, config.timeout)
            .map_err(|why| MemoryError::Config(format!("{why} (set {})", config.api_key_env)))?;
        let outbox = match config.outbox {
            Some(limits) => Some(Arc::new(Outbox::open(&config.outbox_path(), limits)?)),
            None => None,
        };
        Ok(Self {
            inner: Arc::new(Inner {
                config: Arc::new(config),
                lifecycle: Lifecycle::new(client),
                locks: Arc::new(SessionLocks::default()),
                keep_hidden,
                redactor,
                uri_style: Mutex::new(UriStyle::Home),
                server_version: Mutex::new(None),
                warm_health: Mutex::new(None),
                foreign_key: Mutex::new(None),
                outbox,
                delivering: AtomicBool::new(false),
            }),
        })
    }

    pub fn config(&self) -> &OpenVikingConfig {
        &self.inner.config
    }

    /// The peer a caller's agent maps to, after the owner check (the
    /// caller's, and the key's as the start-up check found it).
    pub fn peer_id(&self, caller: &Caller) -> Result<String> {
        self.inner.check_key_owner()?;
        check_owner(&self.inner.config.owner_user_id, caller)?;
        canonical_peer_id(caller.agent.as_deref(), &self.inner.config.default_peer_id)
    }

    /// The OpenViking session of a caller's thread, after the owner check.
    pub fn session_id(&self, caller: &Caller) -> Result<String> {
        let peer = self.peer_id(caller)?;
        let thread = caller.require_thread()?;
        Ok(session_id(&self.inner.config.owner_user_id, &peer, thread))
    }

    /// How memory roots are spelled (chosen from the server version at warm).
    pub fn uri_style(&self) -> UriStyle {
        *self
            .inner
            .uri_style
            .lock()
            .unwrap_or_else(|p| p.into_inner())
    }

    /// The server version `/health` reported at the last successful warm.
    pub fn server_version(&self) -> Option<String> {
        self.inner
            .server_version
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// True once shutdown has released the HTTP client.
    pub fn resources_closed(&self) -> bool {
        self.inner.lifecycle.resources_closed()
    }

    /// Session ids with a live capture lock (none when idle).
    pub fn live_session_locks(&self) -> usize {
        self.inner.locks.len()
    }

    /// The outbox figures (`/metrics`, `doctor`); `None` when it is off.
    pub fn outbox_figures(&self) -> Option<Result<OutboxFigures>> {
        self.inner.outbox.as_ref().map(|o| o.figures())
    }

    /// Starts the background delivery once, inside a Tokio runtime (the
    /// first capture or warm). It holds no reference that keeps the
    /// backend alive and ends once shutdown begins.
    fn start_delivery(&self) {
        if self.inner.outbox.is_none() || self.inner.delivering.swap(true, Ordering::SeqCst) {
            return;
        }
        match tokio::runtime::Handle::try_current() {
            Ok(handle) => {
                handle.spawn(deliver_in_background(Arc::downgrade(&self.inner)));
            }
            Err(_) => self.inner.delivering.store(false, Ordering::SeqCst),
        }
    }

    /// The peer and session a capture of the caller's thread writes to,
    /// after the owner check; a capture needs a thread.
    fn capture_scope(&self, caller: &Caller) -> Result<(String, String)> {
        let thread = caller
            .thread
            .as_deref()
            .filter(|t| !t.is_empty())
            .ok_or_else(|| {
                MemoryError::invalid("thread_id", "OpenViking memory write requires thread_id")
            })?;
        let peer = self.peer_id(caller)?;
        let sid = session_id(&self.inner.config.owner_user_id, &peer, thread);
        Ok((peer, sid))
    }

    fn capture_target(&self, peer: String, session_id: String) -> CaptureTarget {
        CaptureTarget {
            config: self.inner.config.clone(),
            peer,
            session_id,
            redactor: Arc::clone(&self.inner.redactor),
            outbox: self.inner.outbox.clone(),
        }
    }

    /// A capture's report, with server failures put through
    /// `failure_policy.write`; `None` when it needs the whole transcript.
    fn capture_report(
        &self,
        outcome: CaptureOutcome,
        filtered: usize,
    ) -> Result<Option<CaptureReport>> {
        if outcome.needs_whole {
            return Ok(None);
        }
        let report = CaptureReport {
            stored: outcome.sent,
            already_known: outcome.already_known,
            filtered,
            cut: Vec::new(),
        };
        match outcome.failure {
            None => Ok(Some(report)),
            Some(err) => self
                .inner
                .config
                .write_policy
                .apply(Err(err), report, "OpenViking capture")
                .map(Some),
        }
    }

    /// Begins a capture of the caller's thread if that can be done at once:
    /// the session's lock taken, its cursor read. `None` when the session
    /// is busy, the backend is shut down, or the caller, thread or cursor
    /// is refused; [`capture`](MemoryBackend::capture) then waits for the
    /// lock or answers the error.
    pub fn try_begin_capture(&self, caller: &Caller) -> Option<BegunCapture> {
        let op = self.inner.lifecycle.begin()?;
        let (peer, sid) = self.capture_scope(caller).ok()?;
        let guard = self.inner.locks.try_lock(&sid)?;
        let target = self.capture_target(peer, sid);
        let loaded = load_session_cursor(&target).ok()?;
        Some(BegunCapture {
            backend: self.clone(),
            op,
            guard,
            target,
            loaded,
        })
    }

    fn target_uris(&self, peer: &str) -> [String; 2] {
        self.uri_style().memory_target_uris(peer)
    }

    async fn recall_memories(
        &self,
        client: &OpenVikingClient,
        peer: &str,
        session: Option<&str>,
        host_query: Option<&str>,
    ) -> Result<Vec<RetrievedMemory>> {
        let config = &self.inner.config;
        let uris = self.target_uris(peer);
        let query = host_query
            .map(pystr::strip)
            .filter(|q| !q.is_empty())
            .unwrap_or(&config.retrieval.injection_query);
        let request = RetrievalRequest {
            query,
            target_uris: &uris,
            session_id: session,
            limit: config.retrieval.top_k,
            score_threshold: config.retrieval.score_threshold,
            memory_type: None,
        };
        retrieve(
            client,
            peer,
            &request,
            config.retrieval.content_mode,
            config.retrieval.max_injection_chars,
        )
        .await
        .map_err(|e| e.into_memory_error())
    }
}

impl Inner {
    /// Refuses every operation once the start-up check found the key acting
    /// as another user: nothing is read from or written to that account.
    fn check_key_owner(&self) -> Result<()> {
        match self
            .foreign_key
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .as_ref()
        {
            Some(reason) => Err(MemoryError::RejectedIdentity(reason.clone())),
            None => Ok(()),
        }
    }
}

/// The background half of delivery: every tick, one attempt for each
/// session whose oldest entry is due, under that session's lock. Each pass
/// is an operation, so shutdown waits for it within its budget; what is
/// left stays queued.
async fn deliver_in_background(inner: Weak<Inner>) {
    loop {
        tokio::time::sleep(DELIVERY_TICK).await;
        let Some(inner) = inner.upgrade() else { return };
        let Some(outbox) = inner.outbox.clone() else {
            return;
        };
        if inner.lifecycle.is_closed() {
            return;
        }
        if inner.check_key_owner().is_err() {
            continue;
        }
        let due = match blocking(&outbox, |o| o.due_sessions(now_ms())).await {
            Ok(due) => due,
            Err(e) => {
                tracing::error!(error = %e, "OpenViking outbox could not be read");
                continue;
            }
        };
        for sid in due.into_iter().take(SESSIONS_PER_TICK) {
            let Some(op) = inner.lifecycle.begin() else {
                return;
            };
            let _guard = inner.locks.lock(&sid).await;
            if let Err(e) = deliver_session(op.client(), &outbox, &sid).await {
                tracing::error!(error = %e, session = sid, "OpenViking outbox delivery stopped");
            }
        }
    }
}

#[async_trait]
impl MemoryBackend for OpenVikingBackend {
    fn name(&self) -> &str {
        "openviking"
    }

    fn capabilities(&self) -> Capabilities {
        Capabilities {
            recall: true,
            capture: true,
            search: true,
            ..Capabilities::default()
        }
    }

    fn failure_policy(&self) -> memgate_core::FailurePolicy {
        memgate_core::FailurePolicy {
            read: self.inner.config.read_policy,
            write: self.inner.config.write_policy,
            startup: self.inner.config.startup_policy,
        }
    }

    /// Recalls with the host's query when it passes a non-blank one (a
    /// query-aware host's per-turn recall), else with the configured
    /// `injection_query`, the host contract's fixed query. With a thread
    /// the search is bound to that thread's session, otherwise it is a
    /// session-less find. Identity errors always propagate; backend failures
    /// follow `failure_policy.read`.
    async fn recall(&self, request: &RecallRequest) -> Result<Recall> {
        let Some(op) = self.inner.lifecycle.begin() else {
            return Ok(Recall::empty());
        };
        let caller = &request.caller;
        let peer = self.peer_id(caller)?;
        let session = caller
            .thread
            .as_deref()
            .filter(|t| !t.is_empty())
            .map(|t| session_id(&self.inner.config.owner_user_id, &peer, t));
        let fetched = self
            .recall_memories(
                op.client(),
                &peer,
                session.as_deref(),
                request.query.as_deref(),
            )
            .await;
        let memories = self.inner.config.read_policy.apply(
            fetched,
            Vec::new(),
            "OpenViking context retrieval",
        )?;
        let injection =
            format_injection(&memories, self.inner.config.retrieval.max_injection_chars);
        let items = injection
            .lines
            .into_iter()
            .map(|line| {
                let memory = &memories[line.source];
                RecalledItem {
                    citation: memory.uri.clone().map(Citation::new),
                    kind: line.category,
                    text: line.text,
                    score: memory.score,
                }
            })
            .collect();
        Ok(Recall {
            text: injection.text,
            items,
        })
    }

    /// Read against the session's cursor when the session is free (its
    /// lock taken and its cursor read now, see [`BegunCapture`]); otherwise
    /// (busy, shut down, a refused caller or cursor) whole, and
    /// [`capture`](MemoryBackend::capture) waits for the lock or answers
    /// the error.
    fn begin_capture(self: Arc<Self>, start: CaptureStart) -> Result<Intake> {
        Ok(match self.try_begin_capture(&start.caller) {
            Some(begun) => Intake::AgainstCursor(Box::new(AgainstCursor { begun, start })),
            None => Intake::whole(self, start),
        })
    }

    /// Sends what is new in the transcript to the thread's session and
    /// commits. Identity and input errors, an unreadable cursor and a failed
    /// cursor save always propagate; server failures follow
    /// `failure_policy.write`.
    async fn capture(&self, request: &CaptureRequest) -> Result<CaptureReport> {
        let Some(op) = self.inner.lifecycle.begin() else {
            tracing::warn!("OpenViking write ignored after backend shutdown");
            return Ok(CaptureReport::default());
        };
        let (peer, sid) = self.capture_scope(&request.caller)?;
        let captured = captureable(&request.messages, self.inner.keep_hidden.as_ref());
        let filtered = request.messages.len() - captured.len();
        self.start_delivery();
        let guard = self.inner.locks.lock(&sid).await;
        let target = self.capture_target(peer, sid);
        let loaded = load_session_cursor(&target)?;
        let transcript = Transcript::whole(captured);
        let outcome = capture_session(op, guard, target, loaded, transcript).await?;
        self.capture_report(outcome, filtered)?.ok_or_else(|| {
            MemoryError::Backend("OpenViking capture of a whole transcript lacked a message".into())
        })
    }

    /// A find over the user's and the peer's memory. A blank query answers
    /// nothing at once (no identity check, no request). `query.kind` filters
    /// on the memory type (`tags: ["memory_type=<kind>"]`) before `top_k`.
    async fn search(&self, caller: &Caller, query: &SearchQuery) -> Result<Vec<SearchHit>> {
        let text = pystr::strip(&query.query);
        if text.is_empty() {
            return Ok(Vec::new());
        }
        let Some(op) = self.inner.lifecycle.begin() else {
            return Ok(Vec::new());
        };
        let peer = self.peer_id(caller)?;
        let config = &self.inner.config;
        let uris = self.target_uris(&peer);
        let request = RetrievalRequest {
            query: text,
            target_uris: &uris,
            session_id: None,
            limit: query.top_k.clamp(1, 100),
            score_threshold: config.retrieval.score_threshold,
            memory_type: query.kind.as_deref().filter(|k| !k.is_empty()),
        };
        let fetched = retrieve(
            op.client(),
            &peer,
            &request,
            config.retrieval.content_mode,
            config.retrieval.max_injection_chars,
        )
        .await
        .map_err(|e| e.into_memory_error());
        let memories = config
            .read_policy
            .apply(fetched, Vec::new(), "OpenViking memory search")?;
        Ok(memories
            .into_iter()
            .map(|m| {
                let id = m.uri.unwrap_or_default();
                SearchHit {
                    source: (!id.is_empty()).then(|| id.clone()),
                    id,
                    content: m.text,
                    category: m.category.unwrap_or_else(|| "memory".to_owned()),
                    score: m.score,
                }
            })
            .collect())
    }

    /// `GET /health`. Healthy: `Ready`, and the server version picks the
    /// memory URI form. Unhealthy or unreachable: `fail_fast` answers an
    /// error, `warn` answers `Degraded`.
    async fn warm(&self) -> Result<WarmStatus> {
        self.start_delivery();
        let Some(op) = self.inner.lifecycle.begin() else {
            return Ok(WarmStatus::Degraded {
                reason: "OpenViking backend is shut down".to_owned(),
            });
        };
        let cause = match op.client().health().await {
            Ok(body) if body.get("status").and_then(Value::as_str) == Some("ok") => {
                let version = body
                    .get("version")
                    .and_then(Value::as_str)
                    .map(str::to_owned);
                let style = UriStyle::for_server_version(version.as_deref());
                *self
                    .inner
                    .uri_style
                    .lock()
                    .unwrap_or_else(|p| p.into_inner()) = style;
                tracing::info!(
                    version = version.as_deref().unwrap_or("unknown"),
                    uri_style = ?style,
                    "OpenViking is healthy"
                );
                *self
                    .inner
                    .server_version
                    .lock()
                    .unwrap_or_else(|p| p.into_inner()) = version;
                let foreign = foreign_key(&body, &self.inner.config.owner_user_id);
                *self
                    .inner
                    .warm_health
                    .lock()
                    .unwrap_or_else(|p| p.into_inner()) = Some(body);
                let Some(reason) = foreign else {
                    return Ok(WarmStatus::Ready);
                };
                *self
                    .inner
                    .foreign_key
                    .lock()
                    .unwrap_or_else(|p| p.into_inner()) = Some(reason.clone());
                return match self.inner.config.startup_policy {
                    StartupPolicy::FailFast => {
                        tracing::error!("{reason}");
                        Err(MemoryError::RejectedIdentity(reason))
                    }
                    StartupPolicy::Warn => {
                        tracing::error!("{reason} (startup_policy warn: running, refusing)");
                        Ok(WarmStatus::Degraded { reason })
                    }
                };
            }
            Ok(body) => format!(
                "status {}",
                body.get("status")
                    .map(Value::to_string)
                    .unwrap_or_else(|| "missing".into())
            ),
            Err(e) => e.to_string(),
        };
        match self.inner.config.startup_policy {
            StartupPolicy::FailFast => {
                tracing::error!(cause = %cause, "{UNHEALTHY}");
                Err(MemoryError::Backend(UNHEALTHY.to_owned()))
            }
            StartupPolicy::Warn => {
                tracing::warn!(cause = %cause, "{UNHEALTHY}; running degraded (startup_policy warn)");
                Ok(WarmStatus::Degraded {
                    reason: format!("{UNHEALTHY}: {cause}"),
                })
            }
        }
    }

    /// The identity the configured key acts as, as `/health` reports it
    /// for a valid USER key (`account_id`, `user_id`, `role`). In api_key
    /// mode the server stores memory under the key's own user, so a key of
    /// another user than `owner_user_id` is a problem the operator must see.
    /// The outbox figures when it is on (none when off; an unreadable
    /// queue shows in `doctor`'s `outbox` line instead).
    fn figures(&self) -> Vec<Figure> {
        match self.outbox_figures() {
            Some(Ok(figures)) => figures.figures(&crate::outbox::SPEC),
            _ => Vec::new(),
        }
    }

    async fn diagnose(&self) -> Vec<Diagnostic> {
        let Some(op) = self.inner.lifecycle.begin() else {
            return vec![Diagnostic::problem(
                "identity",
                "OpenViking backend is shut down",
            )];
        };
        let warmed = self
            .inner
            .warm_health
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .take();
        let body = match warmed {
            Some(body) => body,
            None => match op.client().health().await {
                Ok(body) => body,
                Err(e) => return vec![Diagnostic::problem("identity", e.to_string())],
            },
        };
        let outbox = match self.outbox_figures() {
            None => Diagnostic::ok(
                "outbox",
                "outbox off (a failed capture follows failure_policy.write)",
            ),
            Some(Ok(figures)) => Diagnostic::ok(
                "outbox",
                format!("outbox on: {}", figures.summary(&crate::outbox::SPEC)),
            ),
            Some(Err(e)) => Diagnostic::problem("outbox", e.to_string()),
        };
        vec![
            key_identity(&body, &self.inner.config.owner_user_id),
            outbox,
        ]
    }

    /// Stops new work, waits for running operations up to `timeout`, then
    /// closes the HTTP client. False if operations were still running; the
    /// last of them closes the client. Server-side extraction continues on
    /// the server either way.
    /// With the outbox on, the background delivery stops with the other
    /// operations; what is still queued stays queued (logged).
    async fn shutdown(&self, timeout: Duration) -> bool {
        let drained = self.inner.lifecycle.shutdown(timeout).await;
        if let Some(Ok(figures)) = self.outbox_figures() {
            if figures.depth > 0 {
                tracing::warn!(
                    queued = figures.depth,
                    oldest_age_ms = figures.oldest_age_ms,
                    "OpenViking outbox entries stay queued for the next start"
                );
            }
        }
        drained
    }
}

/// Why every operation must be refused, when `/health` says the key acts
/// as another user than `owner_user_id` (the server would store this
/// owner's memory in that user's account). `None` when it is the owner's
/// key, or when the body names no user (`doctor` flags that).
fn foreign_key(health: &Value, owner_user_id: &str) -> Option<String> {
    let user = health.get("user_id").and_then(Value::as_str)?;
    if user == owner_user_id {
        return None;
    }
    let account = health
        .get("account_id")
        .and_then(Value::as_str)
        .unwrap_or("unknown");
    Some(format!(
        "OpenViking USER API key acts as user {} in account {}, but owner_user_id is {}: \
         every operation is refused so nothing is read from or written to {}'s account; \
         configure {}'s own USER key and restart",
        pystr::repr(user),
        pystr::repr(account),
        pystr::repr(owner_user_id),
        pystr::repr(user),
        pystr::repr(owner_user_id),
    ))
}

/// The `identity` line of `doctor` from a `/health` body.
fn key_identity(health: &Value, owner_user_id: &str) -> Diagnostic {
    let field = |name: &str| health.get(name).and_then(Value::as_str);
    match (field("user_id"), field("account_id")) {
        (Some(user), Some(account)) => {
            let role = field("role").unwrap_or("unknown");
            let acts_as = format!("the key acts as user {user} in account {account} (role {role})");
            if user == owner_user_id {
                Diagnostic::ok("identity", acts_as)
            } else {
                Diagnostic::problem(
                    "identity",
                    format!(
                        "{acts_as}, but owner_user_id is {owner_user_id}: the server stores this \
                         memory under {user}; use {owner_user_id}'s own USER key"
                    ),
                )
            }
        }
        _ => Diagnostic::problem(
            "identity",
            "/health did not name the key's user (is the key a valid USER key of this server?)",
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn the_identity_line_names_the_keys_user_and_flags_another_owner() {
        let health =
            json!({"status": "ok", "account_id": "acme", "user_id": "alice", "role": "user"});
        let line = key_identity(&health, "alice");
        assert!(line.healthy);
        assert_eq!(
            line.detail,
            "the key acts as user alice in account acme (role user)"
        );
        let line = key_identity(&health, "bob");
        assert!(!line.healthy);
        assert!(
            line.detail.contains("owner_user_id is bob"),
            "{}",
            line.detail
        );
        let line = key_identity(&json!({"status": "ok"}), "alice");
        assert!(!line.healthy);
        assert!(line.detail.contains("did not name the key's user"));
    }
}
