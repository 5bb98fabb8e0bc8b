//! Operation accounting and shutdown (`deerflow-memory-contract` §5.11).
//!
//! Every recall, search, capture and health check is an operation: it starts
//! only while the backend is open and holds the HTTP client until it ends.
//! `shutdown(timeout)` closes the door to new operations, waits for the
//! running ones within the budget and then releases the client. When the
//! budget runs out it answers `false` and leaves the release to the last
//! running operation, so a blocked write is never cut off mid-request.

use crate::client::OpenVikingClient;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::Notify;

#[derive(Debug, Default)]
struct State {
    closed: bool,
    active: usize,
    resources_closed: bool,
}

/// The open/closed state and the client it guards.
#[derive(Debug)]
pub struct Lifecycle {
    state: Mutex<State>,
    client: Mutex<Option<OpenVikingClient>>,
    idle: Notify,
}

/// A running operation; dropping it (also by cancellation) ends it.
#[derive(Debug)]
pub struct Operation {
    lifecycle: Arc<Lifecycle>,
    client: OpenVikingClient,
}

impl Operation {
    pub fn client(&self) -> &OpenVikingClient {
        &self.client
    }
}

impl Drop for Operation {
    fn drop(&mut self) {
        self.lifecycle.end();
    }
}

impl Lifecycle {
    pub fn new(client: OpenVikingClient) -> Arc<Self> {
        Arc::new(Self {
            state: Mutex::new(State::default()),
            client: Mutex::new(Some(client)),
            idle: Notify::new(),
        })
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Starts an operation, or `None` once the backend is closed.
    pub fn begin(self: &Arc<Self>) -> Option<Operation> {
        let mut state = self.state();
        if state.closed {
            return None;
        }
        let client = self
            .client
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()?;
        state.active += 1;
        Some(Operation {
            lifecycle: self.clone(),
            client,
        })
    }

    fn end(&self) {
        let mut state = self.state();
        state.active = state.active.saturating_sub(1);
        if state.active == 0 {
            if state.closed {
                self.close_resources(&mut state);
            }
            self.idle.notify_waiters();
        }
    }

    fn close_resources(&self, state: &mut State) {
        if !state.resources_closed {
            state.resources_closed = true;
            // Dropping the last handle closes the connection pool.
            self.client.lock().unwrap_or_else(|p| p.into_inner()).take();
            tracing::debug!("OpenViking client closed");
        }
    }

    /// Stops new work, waits up to `timeout` for running operations, then
    /// closes the client. False when operations were still running at the
    /// deadline (the last of them closes the client). Idempotent.
    pub async fn shutdown(&self, timeout: Duration) -> bool {
        let deadline = tokio::time::Instant::now() + timeout;
        self.state().closed = true;
        loop {
            let notified = self.idle.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            {
                let mut state = self.state();
                if state.active == 0 {
                    self.close_resources(&mut state);
                    return true;
                }
            }
            if tokio::time::timeout_at(deadline, notified).await.is_err() {
                return false;
            }
        }
    }

    pub fn is_closed(&self) -> bool {
        self.state().closed
    }

    /// True once the HTTP client has been released.
    pub fn resources_closed(&self) -> bool {
        self.state().resources_closed
    }

    pub fn active_operations(&self) -> usize {
        self.state().active
    }
}
