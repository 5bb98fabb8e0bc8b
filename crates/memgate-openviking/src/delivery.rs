//! Delivering the outbox: a session's queued entries go to its OpenViking
//! session oldest first, each exactly once, while the caller holds the
//! session's lock (a later capture of the session, or the background task).
//!
//! An entry's first attempt records the server's count durably before
//! sending; any later attempt reads the settled count first and sends only
//! the batches that did not arrive (the rule capture uses for its cursor
//! intent), then commits.

use crate::client::OpenVikingClient;
use crate::outbox::{blocking, payloads, Entry, Outbox};
use crate::recorder::{self, Prepared, MAX_BATCH_MESSAGES};
use crate::session_count::{server_total, settled_total, Unsettled};
use memgate_core::{MemoryError, Result};
use std::sync::Arc;

/// Why one attempt did not deliver an entry.
enum Attempt {
    /// The server could not take it now; retried after a backoff.
    Retry(String),
    /// The server's count fits no batch boundary: refuse to guess.
    Contradiction(String),
}

/// Delivers the session's queued entries in order; stops at the first one
/// that fails (later entries wait behind it). True when the session's queue
/// is empty afterwards.
pub async fn deliver_session(
    client: &OpenVikingClient,
    outbox: &Arc<Outbox>,
    session_id: &str,
) -> Result<bool> {
    let sid = session_id.to_owned();
    let entries = blocking(outbox, move |o| o.session_entries(&sid)).await?;
    for entry in entries {
        let id = entry.id;
        match deliver_entry(client, outbox, &entry).await {
            Ok(()) => {
                blocking(outbox, move |o| o.delivered(id)).await?;
                tracing::info!(
                    session = session_id,
                    messages = payloads(&entry).len(),
                    "OpenViking outbox entry delivered"
                );
            }
            Err(Attempt::Retry(cause)) => {
                blocking(outbox, move |o| o.failed(id)).await?;
                tracing::warn!(session = session_id, %cause, "OpenViking outbox delivery failed; retrying later");
                return Ok(false);
            }
            Err(Attempt::Contradiction(why)) => {
                tracing::error!(session = session_id, %why, "OpenViking outbox entry cannot be reconciled");
                return Err(MemoryError::Corruption(format!(
                    "OpenViking outbox entry {id} cannot be reconciled ({why}); it stays queued (session={session_id})"
                )));
            }
        }
    }
    Ok(true)
}

/// Payloads of `entry` already on the server, from the count since its base.
fn landed_payloads(entry: &Entry, base: u64, total: u64) -> std::result::Result<usize, String> {
    let len = payloads(entry).len();
    match total.checked_sub(base).map(|n| n as usize) {
        Some(n) if n == len || (n % MAX_BATCH_MESSAGES == 0 && n < len) => Ok(n),
        _ => Err(format!(
            "the session holds {total} messages; the queued entry expected {base} plus whole batches of its {len}"
        )),
    }
}

async fn deliver_entry(
    client: &OpenVikingClient,
    outbox: &Arc<Outbox>,
    entry: &Entry,
) -> std::result::Result<(), Attempt> {
    let (peer, sid) = (entry.tag.as_str(), entry.stream.as_str());
    let skip = match entry.mark {
        Some(base) => {
            let since = entry.attempt_ms.unwrap_or(0);
            match settled_total(client, peer, sid, since).await {
                Ok(total) => landed_payloads(entry, base, total).map_err(Attempt::Contradiction)?,
                Err(Unsettled::Unreachable(why)) => return Err(Attempt::Retry(why)),
                Err(Unsettled::Contradiction(why)) => return Err(Attempt::Contradiction(why)),
            }
        }
        None => {
            let base = match server_total(client, peer, sid).await {
                Ok(Ok(total)) => total,
                Ok(Err(why)) => return Err(Attempt::Contradiction(why)),
                Err(e) => return Err(Attempt::Retry(e.to_string())),
            };
            let id = entry.id;
            blocking(outbox, move |o| o.mark_attempt(id, base))
                .await
                .map_err(|e| Attempt::Retry(e.to_string()))?;
            0
        }
    };
    for batch in Prepared::from_values(&payloads(entry)[skip..]).batches(0) {
        client
            .add_messages(peer, sid, batch.wire)
            .await
            .map_err(|e| Attempt::Retry(e.to_string()))?;
    }
    if skip < payloads(entry).len() {
        client
            .commit(peer, sid)
            .await
            .map_err(|e| Attempt::Retry(e.to_string()))?;
    } else {
        // Everything had arrived; commit only if the server still holds
        // uncommitted tokens.
        recorder::flush(client, peer, sid)
            .await
            .map_err(|e| Attempt::Retry(e.to_string()))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn entry(len: usize) -> Entry {
        Entry {
            id: 1,
            stream: "s".into(),
            tag: "p".into(),
            body: json!(vec![json!({"role": "user", "content": "x"}); len]),
            mark: Some(10),
            attempt_ms: None,
            intent_ms: None,
            attempts: 0,
            enqueued_ms: 0,
        }
    }

    #[test]
    fn only_whole_batches_or_everything_can_have_landed() {
        assert_eq!(landed_payloads(&entry(3), 10, 10), Ok(0));
        assert_eq!(landed_payloads(&entry(3), 10, 13), Ok(3));
        assert_eq!(landed_payloads(&entry(250), 10, 110), Ok(100));
        assert_eq!(landed_payloads(&entry(250), 10, 260), Ok(250));
        assert!(landed_payloads(&entry(3), 10, 12).is_err());
        assert!(landed_payloads(&entry(3), 10, 9).is_err());
        assert!(landed_payloads(&entry(250), 10, 160).is_err());
    }
}
