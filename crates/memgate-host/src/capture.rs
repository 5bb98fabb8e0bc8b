//! Capture hooks: after a completed turn and before compaction (spec §3).
//!
//! - [`CaptureHooks::after_turn`] hands the backend the full transcript
//!   snapshot ([`CaptureKind::AfterTurn`]); the backend keeps only what is
//!   new and leaves hidden and injected messages out.
//! - [`CaptureHooks::before_compaction`] hands it only the head that
//!   compaction is about to remove ([`CaptureKind::BeforeCompaction`]).
//!
//! Both start the capture as a task on the tokio runtime and return at once
//! with a [`CaptureHandle`], so a slow backend never stalls the caller's
//! task; the host may await the handle (before shutting down, or to show
//! the outcome). Backends apply their own write policy (`log_and_drop`
//! turns failures into an empty report); whatever error remains is logged
//! here and surfaced through the handle. A compaction capture's failure is
//! only logged: it never fails compaction.
//!
//! Nothing is sent when memory is disabled, when there is no thread id, or
//! when there are no messages.

use crate::settings::HostSettings;
use memgate_core::{
    Caller, CaptureKind, CaptureReport, CaptureRequest, MemoryBackend, MemoryError, Message,
};
use std::sync::Arc;
use tokio::runtime::Handle;
use tokio::task::JoinHandle;

/// Why a capture was not sent.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CaptureSkip {
    /// `enabled` is off.
    Disabled,
    /// The caller has no thread id.
    NoThread,
    /// There was nothing to capture.
    NoMessages,
}

/// How a capture ended.
#[derive(Debug)]
pub enum CaptureOutcome {
    Captured(CaptureReport),
    Skipped(CaptureSkip),
    Failed(MemoryError),
}

/// A capture that may still be running.
#[derive(Debug)]
pub struct CaptureHandle(State);

#[derive(Debug)]
enum State {
    Done(CaptureOutcome),
    Running(JoinHandle<Result<CaptureReport, MemoryError>>),
}

impl CaptureHandle {
    /// True once the outcome is known (waiting will not block).
    pub fn is_finished(&self) -> bool {
        match &self.0 {
            State::Done(_) => true,
            State::Running(task) => task.is_finished(),
        }
    }

    /// Why nothing was sent, if nothing was.
    pub fn skipped(&self) -> Option<CaptureSkip> {
        match &self.0 {
            State::Done(CaptureOutcome::Skipped(why)) => Some(*why),
            _ => None,
        }
    }

    /// Waits for the capture to end.
    pub async fn wait(self) -> CaptureOutcome {
        match self.0 {
            State::Done(outcome) => outcome,
            State::Running(task) => match task.await {
                Ok(Ok(report)) => CaptureOutcome::Captured(report),
                Ok(Err(err)) => CaptureOutcome::Failed(err),
                Err(join) => CaptureOutcome::Failed(MemoryError::backend(format!(
                    "capture task ended abnormally: {join}"
                ))),
            },
        }
    }
}

/// The host's two capture points.
#[derive(Clone)]
pub struct CaptureHooks {
    backend: Arc<dyn MemoryBackend>,
    settings: HostSettings,
    runtime: Option<Handle>,
}

impl CaptureHooks {
    /// Captures run on the runtime current at each call.
    pub fn new(backend: Arc<dyn MemoryBackend>, settings: HostSettings) -> Self {
        Self {
            backend,
            settings,
            runtime: None,
        }
    }

    /// Captures run on `runtime`, so hooks may also be called from threads
    /// outside any runtime (a synchronous compaction step).
    pub fn with_runtime(mut self, runtime: Handle) -> Self {
        self.runtime = Some(runtime);
        self
    }

    /// Captures the full transcript snapshot of a completed turn.
    pub fn after_turn(&self, caller: &Caller, transcript: &[Message]) -> CaptureHandle {
        self.spawn(caller, transcript.to_vec(), CaptureKind::AfterTurn)
    }

    /// Captures the head compaction is about to remove (only that head).
    /// Never fails compaction: errors are logged and left in the handle.
    pub fn before_compaction(&self, caller: &Caller, head: Vec<Message>) -> CaptureHandle {
        self.spawn(caller, head, CaptureKind::BeforeCompaction)
    }

    fn spawn(&self, caller: &Caller, messages: Vec<Message>, kind: CaptureKind) -> CaptureHandle {
        let skip = if !self.settings.enabled {
            Some(CaptureSkip::Disabled)
        } else if caller.thread.as_deref().is_none_or(str::is_empty) {
            Some(CaptureSkip::NoThread)
        } else if messages.is_empty() {
            Some(CaptureSkip::NoMessages)
        } else {
            None
        };
        if let Some(why) = skip {
            tracing::debug!(?why, ?kind, "capture skipped");
            return CaptureHandle(State::Done(CaptureOutcome::Skipped(why)));
        }
        let runtime = match self
            .runtime
            .clone()
            .map(Ok)
            .unwrap_or_else(Handle::try_current)
        {
            Ok(runtime) => runtime,
            Err(_) => {
                let err = MemoryError::backend("capture needs a tokio runtime (none is running)");
                tracing::error!(error = %err, ?kind, "capture not started");
                return CaptureHandle(State::Done(CaptureOutcome::Failed(err)));
            }
        };
        let backend = Arc::clone(&self.backend);
        let request = CaptureRequest {
            caller: caller.clone(),
            messages,
            kind,
            trace_id: None,
        };
        CaptureHandle(State::Running(runtime.spawn(async move {
            let result = backend.capture(&request).await;
            if let Err(err) = &result {
                match kind {
                    CaptureKind::AfterTurn => {
                        tracing::error!(error = %err, code = err.code(), "capture after turn failed")
                    }
                    CaptureKind::BeforeCompaction => tracing::warn!(
                        error = %err, code = err.code(),
                        "capture before compaction failed; compaction continues"
                    ),
                }
            }
            result
        })))
    }
}
