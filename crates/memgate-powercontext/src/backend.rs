//! The `powercontext` backend: one owner, one Scope, recall and explicit
//! remember; passive capture is a deliberate no-op; management lives in
//! PowerContext itself.

use crate::diagnostic::Problem;
use crate::generation::{self, ServerGeneration, ServerInfo};
use crate::notes::{MANAGEMENT_POINTER, NO_QUERY_WARNING};
use crate::owner;
use crate::recall::recall_query;
use crate::settings::{reject_yaml_binding, Settings, SettingsLoader};
use crate::source_outbox::SourceOutbox;
use crate::sources::{self, SourceCapture};
use crate::transport::Transport;
use async_trait::async_trait;
use memgate_core::handoff::DEFAULT_HANDOFF_LIFETIME;
use memgate_core::{
    Acknowledgement, BackendContext, Caller, Capabilities, CaptureReport, CaptureRequest,
    CommitOutcome, Continuation, Diagnostic, Figure, Handoff, HandoffContent, KeepHiddenHook,
    MemoryBackend, MemoryError, Recall, RecallRequest, Redactor, RememberOutcome, RememberRequest,
    Result, WarmStatus,
};
use serde_json::{Map, Value};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::OnceCell;

/// The `manager_class` this backend answers to.
pub const MANAGER_CLASS: &str = "powercontext";

/// Remote memory in one PowerContext Scope, bound to one host user.
pub struct PowerContextBackend {
    pub(crate) settings: Arc<Settings>,
    pub(crate) transport: Arc<Transport>,
    server: OnceCell<ServerInfo>,
    /// Opt-in Source capture on its durable outbox; `None`: passive capture
    /// is the explicit no-op.
    sources: Option<Arc<SourceOutbox>>,
    keep_hidden: Option<KeepHiddenHook>,
    /// Applied to remembered text before it is sent.
    pub(crate) redactor: Arc<Redactor>,
    /// The name used in Unsupported errors: says where management happens.
    unsupported_name: String,
    /// Set once the first recall without a host query has been reported.
    no_query_reported: AtomicBool,
    /// Handoff drafts and the server's prepared handoffs ([`crate::handoff`]).
    pub(crate) handoffs: crate::handoff::Desk,
}

impl PowerContextBackend {
    /// The factory seam: `backend_config` must be `{}` apart from the
    /// host-supplied `storage_path` and the opt-in `source_capture`; the
    /// binding comes from the `POWERCONTEXT_DEERFLOW_*` variables read
    /// through `ctx.var`, once per environment source (see
    /// [`SettingsLoader::process`]). No network I/O.
    pub fn from_backend_config(config: &Map<String, Value>, ctx: &BackendContext) -> Result<Self> {
        let mut binding = config.clone();
        let capture = SourceCapture::from_config(binding.remove(sources::CONFIG_KEY).as_ref())?;
        reject_yaml_binding("backend_config", &binding)?;
        let mut backend = Self::from_settings(SettingsLoader::process().load(ctx)?)?;
        backend.redactor = Arc::clone(&ctx.redactor);
        backend.keep_hidden = ctx.keep_hidden.clone();
        if capture.enabled {
            let deadline = backend.settings.remember_timeout();
            backend.sources = Some(Arc::new(SourceOutbox::open(
                capture,
                &ctx.storage_path,
                Arc::clone(&backend.transport),
                deadline,
            )?));
        }
        Ok(backend)
    }

    /// The Source capture outbox, when `source_capture.enabled`.
    pub fn source_outbox(&self) -> Option<&Arc<SourceOutbox>> {
        self.sources.as_ref()
    }

    /// A backend over an existing snapshot. No network I/O.
    pub fn from_settings(settings: Arc<Settings>) -> Result<Self> {
        Ok(Self {
            transport: Arc::new(Transport::new(&settings)?),
            settings,
            server: OnceCell::new(),
            sources: None,
            keep_hidden: None,
            redactor: Redactor::shared_default(),
            unsupported_name: format!("{MANAGER_CLASS} ({MANAGEMENT_POINTER})"),
            no_query_reported: AtomicBool::new(false),
            handoffs: crate::handoff::Desk::new(DEFAULT_HANDOFF_LIFETIME),
        })
    }

    /// Holds handoff drafts for `lifetime` instead of the default (tests).
    pub fn with_handoff_lifetime(mut self, lifetime: Duration) -> Self {
        self.handoffs = crate::handoff::Desk::new(lifetime);
        self
    }

    /// The shared settings snapshot.
    pub fn settings(&self) -> &Arc<Settings> {
        &self.settings
    }

    /// The detected server, if detection has run and succeeded.
    pub fn server_info(&self) -> Option<&ServerInfo> {
        self.server.get()
    }

    /// The server generation, detecting it on first use (see [`generation`]).
    pub(crate) async fn server(&self) -> Result<&ServerInfo, Problem> {
        self.server
            .get_or_try_init(|| generation::detect(&self.transport))
            .await
    }

    /// The query a recall sends: the host's when it passes one (missing or
    /// blank → nothing, the RFC's rule); when it passes none, the operator's
    /// `POWERCONTEXT_DEERFLOW_PROFILE_QUERY` if set. The first recall that
    /// finds neither is reported once, so a host that never forwards a query
    /// is a visible decision instead of a silently dead feature.
    fn query_for_recall<'a>(&'a self, host_query: Option<&'a str>) -> Option<&'a str> {
        if host_query.is_some() {
            return recall_query(host_query);
        }
        if let Some(profile) = self.settings.profile_query() {
            return recall_query(Some(profile));
        }
        if !self.no_query_reported.swap(true, Ordering::Relaxed) {
            tracing::warn!(target: "memgate_powercontext", "{NO_QUERY_WARNING}");
        }
        None
    }

    fn ensure_open(&self) -> Result<()> {
        if self.transport.is_closed() {
            Err(MemoryError::Closed(MANAGER_CLASS.into()))
        } else {
            Ok(())
        }
    }

    /// `warm()` without the trait: detection, and on 1.4.x a read of the
    /// configured Scope, within the recall deadline.
    async fn check_health(&self) -> Result<ServerInfo, Problem> {
        let deadline = tokio::time::Instant::now() + self.settings.recall_timeout();
        tokio::time::timeout_at(deadline, async {
            let info = self.server().await?.clone();
            if info.generation == ServerGeneration::Current {
                let path = format!("/v1/scopes/{}", path_segment(self.settings.scope_id()));
                let reply = self.transport.get(&path, 64 * 1024).await?;
                match reply.status {
                    200 => {}
                    404 => return Err(Problem::ScopeNotFound),
                    _ => return Err(reply.problem()),
                }
            }
            Ok(info)
        })
        .await
        .unwrap_or(Err(Problem::Timeout))
    }
}

/// Percent-encodes a Scope id for use as one path segment.
fn path_segment(raw: &str) -> String {
    let mut out = String::with_capacity(raw.len());
    for b in raw.bytes() {
        if b.is_ascii_alphanumeric() || b"-._~".contains(&b) {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

impl std::fmt::Debug for PowerContextBackend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PowerContextBackend")
            .field("settings", &self.settings)
            .field("server", &self.server.get())
            .field("transport", &self.transport)
            .finish()
    }
}

/// Logs a failed exchange by category only: no content, no query, no token.
pub(crate) fn warn_problem(operation: &'static str, problem: &Problem) {
    tracing::warn!(
        target: "memgate_powercontext",
        operation,
        category = problem.category(),
        "powercontext {operation} failed: {problem}"
    );
}

#[async_trait]
impl MemoryBackend for PowerContextBackend {
    fn name(&self) -> &str {
        MANAGER_CLASS
    }

    fn capabilities(&self) -> Capabilities {
        Capabilities {
            recall: true,
            capture: false,
            remember: true,
            search: false,
            facts: false,
            import_export: false,
        }
    }

    /// Refuses every caller but the owner (no request), recalls nothing for a
    /// blank query or, unless a profile query is set, a missing one (no
    /// request), and otherwise returns the server's prepared content
    /// unchanged, or nothing on any failure (fail open).
    async fn recall(&self, request: &RecallRequest) -> Result<Recall> {
        owner::admit(&self.settings, &request.caller.user)?;
        self.ensure_open()?;
        let Some(query) = self.query_for_recall(request.query.as_deref()) else {
            return Ok(Recall::empty());
        };
        match self.prepare(query).await {
            // The prepared context is one opaque block, listed as one item
            // so `recall --json` shows what was injected.
            Ok(Some(text)) => Ok(Recall {
                items: vec![memgate_core::RecalledItem {
                    citation: None,
                    kind: "prepared_context".to_owned(),
                    text: text.clone(),
                    score: None,
                }],
                text,
            }),
            Ok(None) => Ok(Recall::empty()),
            Err(problem) => {
                warn_problem("recall", &problem);
                Ok(Recall::empty())
            }
        }
    }

    /// Refuses every caller but the owner, as recall and remember do (no
    /// request). Then, without `source_capture.enabled`, an explicit no-op:
    /// nothing is sent, nothing stored (see
    /// [`crate::notes::PASSIVE_CAPTURE_NOTE`]). With it, the owner's new
    /// messages are queued durably as Sources and delivered
    /// ([`crate::sources`]); `stored` then counts messages handed to
    /// PowerContext as Sources, which is not Memory creation.
    async fn capture(&self, request: &CaptureRequest) -> Result<CaptureReport> {
        owner::admit(&self.settings, &request.caller.user)?;
        let nothing = CaptureReport {
            stored: 0,
            already_known: 0,
            filtered: request.messages.len(),
            cut: Vec::new(),
        };
        let Some(outbox) = &self.sources else {
            return Ok(nothing);
        };
        self.ensure_open()?;
        let Some(namespace) =
            sources::namespace_for(&self.settings, outbox.installation(), &request.caller)?
        else {
            return Ok(nothing);
        };
        let plan = sources::plan(
            &request.messages,
            &namespace,
            self.settings.scope_id(),
            &outbox.config,
            self.keep_hidden.as_ref(),
            &self.redactor,
        );
        outbox.capture(&namespace, plan).await
    }

    async fn remember(
        &self,
        caller: &Caller,
        request: &RememberRequest,
    ) -> Result<RememberOutcome> {
        owner::admit(&self.settings, &caller.user)?;
        self.ensure_open()?;
        Ok(self.remember_once(request).await)
    }

    /// The draft is held here; each later step is one call to PowerContext's
    /// own routes ([`crate::handoff`]).
    async fn prepare_handoff(&self, caller: &Caller, content: &HandoffContent) -> Result<Handoff> {
        self.handoff_prepare(caller, content)
    }

    async fn get_handoff(&self, caller: &Caller, id: &str) -> Result<Handoff> {
        self.handoff_get(caller, id)
    }

    async fn correct_handoff(
        &self,
        caller: &Caller,
        id: &str,
        content: &HandoffContent,
    ) -> Result<Handoff> {
        self.handoff_correct(caller, id, content)
    }

    async fn finalize_handoff(&self, caller: &Caller, id: &str) -> Result<Handoff> {
        self.handoff_finalize(caller, id).await
    }

    async fn continue_handoff(&self, caller: &Caller, id: &str) -> Result<Continuation> {
        self.handoff_continue(caller, id).await
    }

    async fn acknowledge_handoff(
        &self,
        caller: &Caller,
        id: &str,
        acknowledgement: &Acknowledgement,
    ) -> Result<Handoff> {
        self.handoff_acknowledge(caller, id, acknowledgement).await
    }

    async fn commit_handoff(&self, caller: &Caller, id: &str) -> Result<CommitOutcome> {
        self.handoff_commit(caller, id).await
    }

    /// Detects the server generation, proves the token and, on 1.4.x, that
    /// the configured Scope exists.
    async fn warm(&self) -> Result<WarmStatus> {
        if let Some(outbox) = &self.sources {
            outbox.warm();
        }
        match self.check_health().await {
            Ok(_) => Ok(WarmStatus::Ready),
            Err(problem) => {
                warn_problem("warm", &problem);
                Err(MemoryError::backend(format!(
                    "powercontext start-up check failed ({}): {problem}",
                    problem.category()
                )))
            }
        }
    }

    /// Says whether passive capture is the no-op or Source capture, and
    /// the state of its queue.
    async fn diagnose(&self) -> Vec<Diagnostic> {
        let line = match &self.sources {
            None => Diagnostic::ok(
                "capture",
                "source capture off: passive capture is a no-op (nothing is sent)",
            ),
            Some(outbox) => match outbox.figures() {
                Ok(f) => Diagnostic::ok(
                    "capture",
                    format!(
                        "source capture on: finished messages become PowerContext Sources \
                         (not Memory) via {}: {}",
                        outbox.path().display(),
                        f.summary(&crate::source_outbox::SPEC)
                    ),
                ),
                Err(e) => Diagnostic::problem("capture", e.to_string()),
            },
        };
        vec![line]
    }

    fn figures(&self) -> Vec<Figure> {
        self.sources
            .as_ref()
            .map(|o| o.metric_figures())
            .unwrap_or_default()
    }

    /// Also ends the background Source delivery (at its next tick); what
    /// is queued stays on disk for the next start.
    async fn shutdown(&self, timeout: Duration) -> bool {
        self.transport.shutdown(timeout).await
    }

    fn unsupported(&self, operation: &str) -> MemoryError {
        MemoryError::unsupported(operation, &self.unsupported_name)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scope_ids_are_encoded_as_one_segment() {
        assert_eq!(path_segment("scp_0vbb"), "scp_0vbb");
        assert_eq!(path_segment("a/b c:é"), "a%2Fb%20c%3A%C3%A9");
    }
}
