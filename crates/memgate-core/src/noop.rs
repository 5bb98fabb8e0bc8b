//! The `noop` backend: stores nothing, recalls nothing.
//!
//! Reads answer empty (there is nothing), writes that would claim to store
//! something (`remember`, `import`, fact revisions) are Unsupported, so no
//! caller is told a memory was saved when it was not.

use crate::backend::{Capabilities, MemoryBackend};
use crate::capture::{CaptureReport, CaptureRequest};
use crate::facts::{Fact, MemoryExport, SearchHit, SearchQuery};
use crate::identity::Caller;
use crate::recall::{Recall, RecallRequest};
use crate::Result;
use async_trait::async_trait;

#[derive(Clone, Copy, Debug, Default)]
pub struct NoopBackend;

#[async_trait]
impl MemoryBackend for NoopBackend {
    fn name(&self) -> &str {
        "noop"
    }

    fn capabilities(&self) -> Capabilities {
        Capabilities {
            search: true,
            ..Capabilities::default()
        }
    }

    async fn recall(&self, _request: &RecallRequest) -> Result<Recall> {
        Ok(Recall::empty())
    }

    async fn capture(&self, request: &CaptureRequest) -> Result<CaptureReport> {
        request.caller.require_thread()?;
        // Nothing is kept: every message is left out.
        Ok(CaptureReport {
            filtered: request.messages.len(),
            ..CaptureReport::default()
        })
    }

    async fn search(&self, _caller: &Caller, _query: &SearchQuery) -> Result<Vec<SearchHit>> {
        Ok(Vec::new())
    }

    async fn list_facts(&self, _caller: &Caller, _include_retired: bool) -> Result<Vec<Fact>> {
        Ok(Vec::new())
    }

    async fn export(&self, _caller: &Caller) -> Result<MemoryExport> {
        Ok(MemoryExport::new(Vec::new(), Vec::new()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::message::Message;
    use crate::remember::RememberRequest;

    #[test]
    fn noop_stores_nothing_and_refuses_to_claim_a_save() {
        let caller = Caller::new("u").with_thread("t");
        let report = block_on(Box::pin(NoopBackend.capture(&CaptureRequest {
            caller: caller.clone(),
            messages: vec![Message::human("hi")],
            kind: Default::default(),
            trace_id: None,
        })))
        .unwrap();
        assert_eq!((report.stored, report.filtered), (0, 1));
        let remember = RememberRequest::new("fact", "x").unwrap();
        let err = block_on(Box::pin(NoopBackend.remember(&caller, &remember))).unwrap_err();
        assert_eq!(err.to_string(), "remember not supported by noop");
    }

    /// Polls a future that never waits (the noop backend has no I/O).
    fn block_on<T>(
        mut fut: std::pin::Pin<Box<dyn std::future::Future<Output = T> + Send + '_>>,
    ) -> T {
        use std::task::{Context, Poll, Waker};
        let mut cx = Context::from_waker(Waker::noop());
        match fut.as_mut().poll(&mut cx) {
            Poll::Ready(v) => v,
            Poll::Pending => panic!("noop backend future was not immediately ready"),
        }
    }
}
