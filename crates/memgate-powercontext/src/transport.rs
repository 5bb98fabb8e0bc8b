//! The HTTP transport: one pooled client, bounded concurrency, capped
//! response bodies.
//!
//! Deadlines are not set here: each operation wraps its whole exchange
//! (waiting for a slot, connecting, headers and every body chunk) in one
//! `tokio::time::timeout_at`, so a slow-drip body cannot outlive the
//! operation's total deadline. This layer only reports what went wrong, in
//! content-free [`Problem`] terms, and tells "never sent" ([`Problem::Connect`],
//! [`Problem::Closed`]) from "may have been sent".
//!
//! Redirects are refused (the token must not travel elsewhere) and ambient
//! proxy variables are ignored: the environment is read only through the
//! settings snapshot.

use crate::diagnostic::Problem;
use crate::settings::Settings;
use memgate_core::{MemoryError, Result};
use reqwest::header::{HeaderMap, HeaderValue, ACCEPT, AUTHORIZATION};
use serde_json::Value;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::Semaphore;

/// Requests in flight at once; further callers wait for a slot (inside their
/// own deadline).
pub const MAX_IN_FLIGHT: usize = 16;
/// Idle keep-alive connections kept per host.
const MAX_IDLE_PER_HOST: usize = 8;

/// A complete HTTP response: status and the whole (capped) body.
#[derive(Debug)]
pub(crate) struct Reply {
    pub status: u16,
    pub body: Vec<u8>,
}

impl Reply {
    pub fn is_success(&self) -> bool {
        (200..300).contains(&self.status)
    }

    /// The problem a non-success reply stands for.
    pub fn problem(&self) -> Problem {
        Problem::from_status(self.status, &self.body)
    }
}

pub(crate) struct Transport {
    client: reqwest::Client,
    /// The base URL without its trailing `/`; paths start with `/`.
    base: String,
    in_flight: Arc<Semaphore>,
    closed: AtomicBool,
}

impl Transport {
    /// Builds the client; no network I/O happens here.
    pub fn new(settings: &Settings) -> Result<Self> {
        let mut bearer = HeaderValue::from_str(&format!("Bearer {}", settings.token().expose()))
            .map_err(|_| {
                MemoryError::Config(format!(
                    "{} is not usable as a bearer token",
                    crate::settings::ENV_TOKEN
                ))
            })?;
        bearer.set_sensitive(true);
        let mut headers = HeaderMap::new();
        headers.insert(AUTHORIZATION, bearer);
        headers.insert(ACCEPT, HeaderValue::from_static("application/json"));
        // A connect that takes longer than the shorter deadline is reported as
        // a connect failure (nothing sent), not as an ambiguous timeout.
        let connect_timeout = settings.recall_timeout().min(settings.remember_timeout());
        let client = reqwest::Client::builder()
            .default_headers(headers)
            .user_agent(concat!("memgate-powercontext/", env!("CARGO_PKG_VERSION")))
            .redirect(reqwest::redirect::Policy::none())
            .no_proxy()
            .connect_timeout(connect_timeout)
            .pool_max_idle_per_host(MAX_IDLE_PER_HOST)
            .pool_idle_timeout(Duration::from_secs(60))
            .tcp_nodelay(true)
            .build()
            .map_err(|_| MemoryError::backend("the PowerContext HTTP client could not be built"))?;
        Ok(Self {
            client,
            base: settings
                .base_url()
                .as_str()
                .trim_end_matches('/')
                .to_owned(),
            in_flight: Arc::new(Semaphore::new(MAX_IN_FLIGHT)),
            closed: AtomicBool::new(false),
        })
    }

    /// The absolute URL of an API path.
    pub fn url(&self, path: &str) -> String {
        format!("{}{path}", self.base)
    }

    pub async fn post(&self, path: &str, body: &Value, cap: usize) -> Result<Reply, Problem> {
        self.exchange(self.client.post(self.url(path)).json(body), cap)
            .await
    }

    pub async fn get(&self, path: &str, cap: usize) -> Result<Reply, Problem> {
        self.exchange(self.client.get(self.url(path)), cap).await
    }

    async fn exchange(
        &self,
        request: reqwest::RequestBuilder,
        cap: usize,
    ) -> Result<Reply, Problem> {
        if self.is_closed() {
            return Err(Problem::Closed);
        }
        let _slot = self
            .in_flight
            .acquire()
            .await
            .map_err(|_| Problem::Closed)?;
        if self.is_closed() {
            return Err(Problem::Closed);
        }
        let mut response = request.send().await.map_err(|e| {
            if e.is_connect() {
                Problem::Connect
            } else if e.is_timeout() {
                Problem::Timeout
            } else {
                Problem::Transport
            }
        })?;
        if response.content_length().is_some_and(|n| n > cap as u64) {
            return Err(Problem::Oversized);
        }
        let status = response.status().as_u16();
        let mut body = Vec::new();
        while let Some(chunk) = response.chunk().await.map_err(|_| Problem::Transport)? {
            if body.len() + chunk.len() > cap {
                return Err(Problem::Oversized);
            }
            body.extend_from_slice(&chunk);
        }
        Ok(Reply { status, body })
    }

    pub fn is_closed(&self) -> bool {
        self.closed.load(Ordering::SeqCst)
    }

    /// Stops new requests, then waits up to `timeout` for those in flight.
    /// True when all finished in time.
    pub async fn shutdown(&self, timeout: Duration) -> bool {
        self.closed.store(true, Ordering::SeqCst);
        let drained =
            tokio::time::timeout(timeout, self.in_flight.acquire_many(MAX_IN_FLIGHT as u32)).await;
        self.in_flight.close();
        matches!(drained, Ok(Ok(_)))
    }
}

impl std::fmt::Debug for Transport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Transport")
            .field("base", &self.base)
            .field("closed", &self.is_closed())
            .finish_non_exhaustive()
    }
}
