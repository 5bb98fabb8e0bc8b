//! Source capture on the durable outbox (`memgate-outbox`): every Source
//! write is queued (fsynced) before the capture is acknowledged, then
//! delivered in order per thread, at once and in the background, with
//! backoff after a failure.
//!
//! Exactly once per Source id: the ledger remembers every id the server
//! answered (with the body's digest), so a later capture never sends it
//! again; a write whose answer was lost is sent again under the same id and
//! body, which the server answers with the same position (idempotent).
//!
//! Server answers:
//! - 2xx: accepted (recorded with its journal position);
//! - 409 `source_conflict`: the id holds other content; changed evidence
//!   needs a new identity, so memgate records the conflict, counts it
//!   (`memgate_source_outbox_conflicts_total`), logs the Source id and
//!   never resends it;
//! - another 400/413/422: the server will never take this body (too long, a
//!   reserved payload): recorded and counted like a conflict, logged;
//! - anything else (down, deadline, 5xx, 401/403/404/429): retried later.

use crate::sources::{self, Namespace, SourceCapture, SourcePlan};
use crate::transport::Transport;
use memgate_core::{CaptureReport, Figure, Result};
use memgate_outbox::{now_ms, Entry, Limits, Queue, QueueFigures, QueueSpec, Recorded};
use serde_json::Value;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Weak};
use std::time::Duration;

/// Names in errors, config and metrics. "deliveries" are Sources the
/// server accepted, never Memory.
pub const SPEC: QueueSpec = QueueSpec {
    name: "PowerContext source outbox",
    config_key: "source_capture",
    metric_prefix: "memgate_source_outbox",
    entries: "Source writes",
    stream: "thread",
    ledger: true,
};

const PATH: &str = "/v1/sources/content";
/// A 202 body is small; anything larger is not PowerContext answering.
const REPLY_CAP: usize = 64 * 1024;
/// Background attempt interval, and streams per tick.
const TICK: Duration = Duration::from_millis(500);
const STREAMS_PER_TICK: usize = 64;

/// The queue, what it sends with, and the installation namespace.
pub struct SourceOutbox {
    queue: Arc<Queue>,
    transport: Arc<Transport>,
    deadline: Duration,
    installation: String,
    pub(crate) config: SourceCapture,
    delivering: AtomicBool,
    /// One delivery pass at a time (a capture's kick, the background tick),
    /// so no entry is sent by two passes at once.
    one_pass: tokio::sync::Mutex<()>,
    /// One capture's check-and-queue at a time, so two concurrent captures
    /// of a thread never queue the same Source twice.
    queueing: Arc<std::sync::Mutex<()>>,
}

/// What became of one capture's Source writes.
#[derive(Default)]
struct Handed {
    queued: usize,
    known: usize,
    changed: usize,
}

impl SourceOutbox {
    pub(crate) fn open(
        config: SourceCapture,
        storage_path: &std::path::Path,
        transport: Arc<Transport>,
        deadline: Duration,
    ) -> Result<Self> {
        let installation = sources::installation_id(&config, storage_path)?;
        let limits = Limits {
            max_entries: config.max_entries,
            max_age: config.max_age,
        };
        let queue = Queue::open(
            &SourceCapture::outbox_path(storage_path),
            SPEC,
            limits,
            sources::check_body,
        )?;
        Ok(Self {
            queue: Arc::new(queue),
            transport,
            deadline,
            installation,
            config,
            delivering: AtomicBool::new(false),
            one_pass: tokio::sync::Mutex::new(()),
            queueing: Arc::new(std::sync::Mutex::new(())),
        })
    }

    pub fn installation(&self) -> &str {
        &self.installation
    }

    pub fn path(&self) -> &std::path::Path {
        self.queue.path()
    }

    /// What the ledger holds for a Source id (its digest and position).
    pub fn recorded(&self, source_id: &str) -> Result<Option<Recorded>> {
        self.queue.recorded(source_id)
    }

    pub fn figures(&self) -> Result<QueueFigures> {
        self.queue.figures()
    }

    pub fn metric_figures(&self) -> Vec<Figure> {
        self.queue
            .figures()
            .map(|f| f.figures(&SPEC))
            .unwrap_or_default()
    }

    /// Queues what is new in `plan` (durably, before it returns), then
    /// delivers what is due. The report's `stored` counts messages handed
    /// to PowerContext as Sources (queued or accepted), not Memory.
    pub(crate) async fn capture(
        self: &Arc<Self>,
        namespace: &Namespace,
        plan: SourcePlan,
    ) -> Result<CaptureReport> {
        let left_out = plan.left_out.len();
        let stream = namespace.stream();
        let queueing = Arc::clone(&self.queueing);
        let handed = self
            .blocking(move |q| {
                let _one = queueing.lock().unwrap_or_else(|p| p.into_inner());
                queue_new(q, &stream, &plan)
            })
            .await?;
        self.start_background();
        // Acknowledged once queued. A delivery pass starts now and the
        // capture waits for it up to one write deadline, so a short-lived
        // process (`memgate capture`) delivers before it exits; the pass
        // runs on its own task, and what it leaves the background retries.
        let this = Arc::clone(self);
        let pass = tokio::spawn(async move { this.deliver_due().await });
        let _ = tokio::time::timeout(self.deadline, pass).await;
        Ok(CaptureReport {
            stored: handed.queued,
            already_known: handed.known,
            filtered: left_out + handed.changed,
            cut: Vec::new(),
        })
    }

    /// One attempt for every due thread, oldest entry first; a thread stops
    /// at its first entry that must be retried.
    pub(crate) async fn deliver_due(&self) {
        let _one_pass = self.one_pass.lock().await;
        let streams = match self.blocking(|q| q.due_streams(now_ms())).await {
            Ok(streams) => streams,
            Err(e) => {
                tracing::error!(target: "memgate_powercontext", "source outbox: {e}");
                return;
            }
        };
        for stream in streams.into_iter().take(STREAMS_PER_TICK) {
            if self.transport.is_closed() {
                return;
            }
            let owned = stream.clone();
            let entries = match self.blocking(move |q| q.stream_entries(&owned)).await {
                Ok(entries) => entries,
                Err(e) => {
                    tracing::error!(target: "memgate_powercontext", "source outbox: {e}");
                    continue;
                }
            };
            for entry in entries {
                if !self.deliver(entry).await {
                    break;
                }
            }
        }
    }

    /// Sends one entry; true when it left the queue (accepted or refused
    /// for good), false when it waits for a retry.
    async fn deliver(&self, entry: Entry) -> bool {
        let answer = tokio::time::timeout(
            self.deadline,
            self.transport.post(PATH, &entry.body, REPLY_CAP),
        )
        .await;
        let source_id = entry.tag.clone();
        let digest = sources::body_digest(&entry.body);
        let settled = match answer {
            Ok(Ok(reply)) if (200..300).contains(&reply.status) => Some(Recorded {
                digest,
                position: position(&reply.body),
                conflict: false,
            }),
            Ok(Ok(reply)) if matches!(reply.status, 400 | 409 | 413 | 422) => {
                let code = error_code(&reply.body);
                tracing::warn!(
                    target: "memgate_powercontext",
                    source_id = source_id.as_str(),
                    status = reply.status,
                    code = code.as_str(),
                    "PowerContext refused a Source write for good; recorded, not resent"
                );
                Some(Recorded {
                    digest,
                    position: None,
                    conflict: true,
                })
            }
            Ok(Ok(reply)) => {
                tracing::warn!(target: "memgate_powercontext", status = reply.status,
                    "Source write not taken; retried later");
                None
            }
            Ok(Err(problem)) => {
                tracing::warn!(target: "memgate_powercontext", category = problem.category(),
                    "Source write failed; retried later");
                None
            }
            Err(_) => {
                tracing::warn!(target: "memgate_powercontext",
                    "Source write hit its deadline; retried later under the same id");
                None
            }
        };
        let id = entry.id;
        let left_queue = settled.is_some();
        let outcome = match settled {
            Some(recorded) => {
                self.blocking(move |q| q.settle(id, &source_id, &recorded))
                    .await
            }
            None => self.blocking(move |q| q.failed(id)).await,
        };
        match outcome {
            Ok(()) => left_queue,
            Err(e) => {
                tracing::error!(target: "memgate_powercontext", "source outbox: {e}");
                false
            }
        }
    }

    /// Runs a queue operation (short, fsynced SQLite statements) on a
    /// blocking thread, off the async workers.
    async fn blocking<T: Send + 'static>(
        &self,
        call: impl FnOnce(&Queue) -> Result<T> + Send + 'static,
    ) -> Result<T> {
        let queue = Arc::clone(&self.queue);
        tokio::task::spawn_blocking(move || call(&queue))
            .await
            .map_err(|e| memgate_core::MemoryError::backend(format!("source outbox: {e}")))?
    }

    /// Starts the background delivery once, inside a Tokio runtime. It
    /// holds only a `Weak` and ends with the backend or its shutdown.
    fn start_background(self: &Arc<Self>) {
        if self.delivering.swap(true, Ordering::SeqCst) {
            return;
        }
        if let Ok(handle) = tokio::runtime::Handle::try_current() {
            handle.spawn(deliver_in_background(Arc::downgrade(self)));
        } else {
            self.delivering.store(false, Ordering::SeqCst);
        }
    }

    pub(crate) fn warm(self: &Arc<Self>) {
        self.start_background();
    }
}

/// Queues the writes of `plan` the ledger and the queue do not hold yet.
fn queue_new(queue: &Queue, stream: &str, plan: &SourcePlan) -> Result<Handed> {
    let mut handed = Handed::default();
    for write in &plan.writes {
        match queue.recorded(&write.source_id)? {
            Some(r) if r.digest == write.digest => handed.known += 1,
            Some(_) => {
                // Changed evidence under an id the server already holds
                // would be a 409: it is not sent (a new message id is a
                // new Source).
                queue.count_conflict();
                tracing::warn!(
                    target: "memgate_powercontext",
                    source_id = write.source_id.as_str(),
                    "a captured message changed after it was sent as a Source; \
                     not sent again (changed evidence needs a new message id)"
                );
                handed.changed += 1;
            }
            None if queue.is_queued(stream, &write.source_id)? => handed.known += 1,
            None => {
                queue.enqueue(stream, &write.source_id, &write.body, None, None)?;
                handed.queued += 1;
            }
        }
    }
    Ok(handed)
}

async fn deliver_in_background(outbox: Weak<SourceOutbox>) {
    loop {
        tokio::time::sleep(TICK).await;
        let Some(outbox) = outbox.upgrade() else {
            return;
        };
        if outbox.transport.is_closed() {
            return;
        }
        outbox.deliver_due().await;
    }
}

fn position(body: &[u8]) -> Option<u64> {
    serde_json::from_slice::<Value>(body)
        .ok()?
        .get("position")?
        .as_u64()
}

fn error_code(body: &[u8]) -> String {
    serde_json::from_slice::<Value>(body)
        .ok()
        .and_then(|v| v["error"]["code"].as_str().map(str::to_owned))
        .unwrap_or_default()
}
