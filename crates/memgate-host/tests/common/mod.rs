//! Test doubles for the host surfaces.
//!
//! [`FakeBackend`] is an in-process fake for what a real store will not do
//! on demand (answer slowly, fail, block until released); [`Spy`] wraps a
//! real backend and records what reached it.

#![allow(dead_code)]

use async_trait::async_trait;
use memgate_core::{
    Caller, Capabilities, CaptureReport, CaptureRequest, MemoryBackend, MemoryError, Recall,
    RecallRequest, RememberOutcome, RememberRequest, Result,
};
use memgate_host::{CalendarDate, ManualClock};
use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::Semaphore;

/// Every call a backend received, in order.
#[derive(Clone, Debug)]
pub enum Call {
    Recall(RecallRequest),
    Capture(CaptureRequest),
    Remember(Caller, RememberRequest),
}

#[derive(Default)]
pub struct CallLog(Mutex<Vec<Call>>);

impl CallLog {
    pub fn push(&self, call: Call) {
        self.0.lock().unwrap().push(call);
    }
    pub fn all(&self) -> Vec<Call> {
        self.0.lock().unwrap().clone()
    }
    pub fn recalls(&self) -> Vec<RecallRequest> {
        self.all()
            .into_iter()
            .filter_map(|c| match c {
                Call::Recall(r) => Some(r),
                _ => None,
            })
            .collect()
    }
    pub fn captures(&self) -> Vec<CaptureRequest> {
        self.all()
            .into_iter()
            .filter_map(|c| match c {
                Call::Capture(r) => Some(r),
                _ => None,
            })
            .collect()
    }
    pub fn remembers(&self) -> Vec<(Caller, RememberRequest)> {
        self.all()
            .into_iter()
            .filter_map(|c| match c {
                Call::Remember(c, r) => Some((c, r)),
                _ => None,
            })
            .collect()
    }
}

/// What the fake answers to one recall.
pub enum RecallAnswer {
    Text(&'static str),
    /// Answers after this long (longer than the host deadline in tests).
    Slow(Duration, &'static str),
    Fail(MemoryError),
}

/// A fake backend with scripted recall answers (then `default_recall`),
/// captures that can be held until released, and a capture error switch.
pub struct FakeBackend {
    pub calls: CallLog,
    answers: Mutex<VecDeque<RecallAnswer>>,
    default_recall: &'static str,
    capture_gate: Option<Arc<Semaphore>>,
    capture_error: Mutex<Option<MemoryError>>,
}

impl FakeBackend {
    pub fn new(default_recall: &'static str) -> Self {
        Self {
            calls: CallLog::default(),
            answers: Mutex::new(VecDeque::new()),
            default_recall,
            capture_gate: None,
            capture_error: Mutex::new(None),
        }
    }

    pub fn then(self, answer: RecallAnswer) -> Self {
        self.answers.lock().unwrap().push_back(answer);
        self
    }

    /// Captures wait for a permit on `gate` before answering.
    pub fn holding_captures(mut self, gate: Arc<Semaphore>) -> Self {
        self.capture_gate = Some(gate);
        self
    }

    pub fn failing_captures(self, err: MemoryError) -> Self {
        *self.capture_error.lock().unwrap() = Some(err);
        self
    }
}

#[async_trait]
impl MemoryBackend for FakeBackend {
    fn name(&self) -> &str {
        "fake"
    }

    fn capabilities(&self) -> Capabilities {
        Capabilities {
            recall: true,
            capture: true,
            remember: true,
            ..Capabilities::default()
        }
    }

    async fn recall(&self, request: &RecallRequest) -> Result<Recall> {
        self.calls.push(Call::Recall(request.clone()));
        let answer = self.answers.lock().unwrap().pop_front();
        let text = match answer {
            None => self.default_recall,
            Some(RecallAnswer::Text(t)) => t,
            Some(RecallAnswer::Slow(wait, t)) => {
                tokio::time::sleep(wait).await;
                t
            }
            Some(RecallAnswer::Fail(e)) => return Err(e),
        };
        Ok(Recall {
            text: text.to_owned(),
            items: Vec::new(),
        })
    }

    async fn capture(&self, request: &CaptureRequest) -> Result<CaptureReport> {
        self.calls.push(Call::Capture(request.clone()));
        if let Some(gate) = &self.capture_gate {
            let _permit = gate.acquire().await.expect("gate open");
        }
        if let Some(err) = self.capture_error.lock().unwrap().take() {
            return Err(err);
        }
        Ok(CaptureReport {
            stored: request.messages.len(),
            ..CaptureReport::default()
        })
    }

    async fn remember(
        &self,
        caller: &Caller,
        request: &RememberRequest,
    ) -> Result<RememberOutcome> {
        self.calls
            .push(Call::Remember(caller.clone(), request.clone()));
        Ok(RememberOutcome::Stored {
            citation: memgate_core::Citation::new("mem_fake"),
        })
    }
}

/// A real backend with every call recorded before it is forwarded.
pub struct Spy<B> {
    pub inner: B,
    pub calls: CallLog,
}

impl<B> Spy<B> {
    pub fn new(inner: B) -> Self {
        Self {
            inner,
            calls: CallLog::default(),
        }
    }
}

#[async_trait]
impl<B: MemoryBackend> MemoryBackend for Spy<B> {
    fn name(&self) -> &str {
        self.inner.name()
    }
    fn capabilities(&self) -> Capabilities {
        self.inner.capabilities()
    }
    async fn recall(&self, request: &RecallRequest) -> Result<Recall> {
        self.calls.push(Call::Recall(request.clone()));
        self.inner.recall(request).await
    }
    async fn capture(&self, request: &CaptureRequest) -> Result<CaptureReport> {
        self.calls.push(Call::Capture(request.clone()));
        self.inner.capture(request).await
    }
    async fn remember(
        &self,
        caller: &Caller,
        request: &RememberRequest,
    ) -> Result<RememberOutcome> {
        self.calls
            .push(Call::Remember(caller.clone(), request.clone()));
        self.inner.remember(caller, request).await
    }
}

/// 2026-10-09, a Friday.
pub fn friday() -> CalendarDate {
    CalendarDate::new(2026, 10, 9).unwrap()
}

pub fn clock() -> Arc<ManualClock> {
    Arc::new(ManualClock::new(friday()))
}

/// A local store in a fresh directory (kept alive by the returned guard).
pub fn local_backend() -> (memgate_store::LocalBackend, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    let ctx = memgate_core::BackendContext::new(dir.path());
    let backend =
        memgate_store::LocalBackend::from_backend_config(&serde_json::Map::new(), &ctx).unwrap();
    (backend, dir)
}
