//! The durable outbox for OpenViking capture (memgate's addition, opt-in):
//! a capture whose write failed is acknowledged once its payloads are
//! queued, and delivered later, in order per session. The queue itself
//! (SQLite, fsync, `0600`, bounds, backoff, figures) is `memgate-outbox`;
//! this module fixes what an entry is here: one session's redacted message
//! payloads, a non-empty JSON list, and the peer they are sent as.
//!
//! Exactly once: before an entry is sent, the session's server count is
//! recorded in it (`base_total`); a later attempt (after a crash or a lost
//! answer) first reads the server's count and sends only the batches that
//! did not arrive, as capture reconciles its cursor intent.
//!
//! Full policy: **refuse** (see `memgate-outbox`): the capture falls back to
//! the write policy (`log_and_drop` drops it, counted in `dropped`).

use memgate_core::{MemoryError, Result};
use memgate_outbox::{BodyCheck, Queue, QueueSpec};
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::sync::Arc;

pub use memgate_outbox::{backoff, now_ms, Limits as OutboxLimits, QueueFigures as OutboxFigures};

/// Names in errors, config and metrics (`memgate_outbox_*`, as before the
/// queue moved to its own crate).
pub const SPEC: QueueSpec = QueueSpec {
    name: "OpenViking outbox",
    config_key: "outbox",
    metric_prefix: "memgate_outbox",
    entries: "captures",
    stream: "session",
    ledger: false,
};

/// One queued capture of one session: `stream` is the session id, `tag`
/// the peer, `mark` the session's server count recorded before the first
/// attempt (`base_total`), `body` the payload list.
pub use memgate_outbox::Entry;

/// The redacted payloads of an entry, in sending order.
pub fn payloads(entry: &Entry) -> &[Value] {
    // `PAYLOADS` admitted only lists.
    entry.body.as_array().map_or(&[], Vec::as_slice)
}

/// An entry's body: the message payloads, a non-empty list of objects.
const PAYLOADS: BodyCheck = |body| match body {
    Value::Array(items) if !items.is_empty() && items.iter().all(Value::is_object) => Ok(()),
    _ => Err("payloads must be a non-empty JSON list of message objects".into()),
};

/// The OpenViking capture queue.
pub struct Outbox(Queue);

impl Outbox {
    /// The outbox file under a storage root.
    pub fn path_under(storage_path: &Path) -> PathBuf {
        storage_path.join("openviking").join("outbox.sqlite3")
    }

    /// Opens (or creates) the queue; a file that cannot be trusted is
    /// refused and kept.
    pub fn open(path: &Path, limits: OutboxLimits) -> Result<Self> {
        Queue::open(path, SPEC, limits, PAYLOADS).map(Self)
    }

    pub fn path(&self) -> &Path {
        self.0.path()
    }

    /// Queues `payloads` behind the session's earlier entries. Refused when
    /// the queue is full; the refusal is counted.
    pub fn enqueue(
        &self,
        session_id: &str,
        peer: &str,
        payloads: &[Value],
        base_total: Option<u64>,
        intent_ms: Option<u64>,
    ) -> Result<i64> {
        let body = Value::Array(payloads.to_vec());
        self.0
            .enqueue(session_id, peer, &body, base_total, intent_ms)
    }

    /// The session's entries, oldest first.
    pub fn session_entries(&self, session_id: &str) -> Result<Vec<Entry>> {
        self.0.stream_entries(session_id)
    }

    /// Sessions whose oldest entry is due for an attempt at `now`.
    pub fn due_sessions(&self, now: u64) -> Result<Vec<String>> {
        self.0.due_streams(now)
    }

    /// Records, durably and before anything is sent, the server count the
    /// attempt starts from.
    pub fn mark_attempt(&self, id: i64, base_total: u64) -> Result<()> {
        self.0.mark_attempt(id, base_total)
    }

    /// The entry is on the server: remove it.
    pub fn delivered(&self, id: i64) -> Result<()> {
        self.0.delivered(id)
    }

    /// An attempt failed: the entry stays, retried after a backoff.
    pub fn failed(&self, id: i64) -> Result<()> {
        self.0.failed(id)
    }

    pub fn figures(&self) -> Result<OutboxFigures> {
        self.0.figures()
    }
}

/// Runs one outbox call off the async threads (each one fsyncs).
pub async fn blocking<T: Send + 'static>(
    outbox: &Arc<Outbox>,
    call: impl FnOnce(&Outbox) -> Result<T> + Send + 'static,
) -> Result<T> {
    let outbox = Arc::clone(outbox);
    tokio::task::spawn_blocking(move || call(&outbox))
        .await
        .map_err(|e| MemoryError::Backend(format!("OpenViking outbox task failed: {e}")))?
}

#[cfg(test)]
mod tests {
    //! What this module adds to the queue (bounds, backoff and corruption
    //! are `memgate-outbox`'s tests): payload lists, the names in errors and
    //! metrics, and the body rule.
    use super::*;
    use memgate_core::{Figure, MemoryError};
    use serde_json::json;
    use std::time::Duration;

    fn msg(text: &str) -> Value {
        json!({"role": "user", "content": text})
    }

    #[test]
    fn payload_lists_survive_reopen_in_order_per_session() {
        let dir = tempfile::tempdir().unwrap();
        let path = Outbox::path_under(dir.path());
        let limits = OutboxLimits {
            max_entries: 2,
            max_age: Duration::from_secs(3600),
        };
        {
            let outbox = Outbox::open(&path, limits).unwrap();
            outbox.enqueue("s1", "p", &[msg("a")], None, None).unwrap();
            outbox
                .enqueue("s1", "p", &[msg("b"), msg("c")], Some(4), Some(7))
                .unwrap();
            let err = outbox
                .enqueue("s2", "p", &[msg("x")], None, None)
                .unwrap_err();
            assert!(
                err.to_string().contains("OpenViking outbox is full"),
                "{err}"
            );
            assert!(err.to_string().contains("outbox.max_entries (2)"), "{err}");
            assert!(err.to_string().contains("session=s2"), "{err}");
        }
        let outbox = Outbox::open(&path, limits).unwrap();
        let s1 = outbox.session_entries("s1").unwrap();
        assert_eq!(payloads(&s1[0]), [msg("a")]);
        assert_eq!(payloads(&s1[1]), [msg("b"), msg("c")]);
        assert_eq!((s1[1].mark, s1[1].intent_ms), (Some(4), Some(7)));
        let text: String = outbox
            .figures()
            .unwrap()
            .figures(&SPEC)
            .iter()
            .map(Figure::prometheus)
            .collect();
        assert!(text.contains("memgate_outbox_depth 2\n"), "{text}");
        // Counters are since start: the refusal was counted by the first process.
        assert!(text.contains("memgate_outbox_dropped_total 0\n"), "{text}");
        assert!(!text.contains("conflicts"), "{text}");
    }

    #[test]
    fn a_row_that_is_not_a_payload_list_fails_closed() {
        let dir = tempfile::tempdir().unwrap();
        let path = Outbox::path_under(dir.path());
        let limits = OutboxLimits {
            max_entries: 10,
            max_age: Duration::from_secs(3600),
        };
        drop(Outbox::open(&path, limits).unwrap());
        rusqlite::Connection::open(&path)
            .unwrap()
            .execute(
                "INSERT INTO entries (session_id, peer, payloads, enqueued_ms) VALUES ('s','p','{}',1)",
                [],
            )
            .unwrap();
        let err = Outbox::open(&path, limits).err().unwrap();
        assert!(matches!(err, MemoryError::Corruption(_)), "{err}");
        assert!(err.to_string().contains("payloads must be"), "{err}");
        assert!(err.to_string().contains("OpenViking outbox"), "{err}");
    }
}
