//! The session's message count on the server, the one fact a capture's
//! reconciliation and the outbox's delivery both decide by: OpenViking
//! 0.5's `total_message_count` counts every message the session ever
//! received, committed or not (pinned in `tests/real_openviking.rs`), so
//! the count since a write's base names how many of its batches arrived.
//! Both read it here, once an interrupted write has had time to settle.

use crate::client::{OpenVikingClient, WireError};
use crate::outbox::now_ms;
use serde_json::Value;
use std::time::Duration;

/// The session's cumulative message count; a session the server does not
/// know holds none.
pub async fn server_total(
    client: &OpenVikingClient,
    peer: &str,
    session_id: &str,
) -> std::result::Result<std::result::Result<u64, String>, WireError> {
    match client.get_session(peer, session_id).await {
        Ok(session) => Ok(session
            .get("total_message_count")
            .and_then(Value::as_u64)
            .ok_or_else(|| "the session has no total_message_count".to_owned())),
        Err(e) if e.is_not_found() => Ok(Ok(0)),
        Err(e) => Err(e),
    }
}

/// How long after its intent a dead process's write may still be in the
/// server's hands. Observed on OpenViking 0.5.2: a batch whose client was
/// killed is still applied after the client is gone, and a session read
/// meanwhile shows the old count (or a 400 while the session is rewritten).
const SETTLE: Duration = Duration::from_millis(2_000);
/// Reads of the count during settling, and the gap between them.
const SETTLE_READS: usize = 10;
const READ_GAP: Duration = Duration::from_millis(300);

/// The session's count once the interrupted write has settled: at least
/// [`SETTLE`] after its intent, and the same in two reads in a row.
pub async fn settled_total(
    client: &OpenVikingClient,
    peer: &str,
    session_id: &str,
    written_ms: u64,
) -> std::result::Result<u64, Unsettled> {
    let age = Duration::from_millis(now_ms().saturating_sub(written_ms));
    if let Some(wait) = SETTLE.checked_sub(age) {
        tokio::time::sleep(wait).await;
    }
    let mut last: Option<u64> = None;
    let mut why = String::from("the count did not settle");
    for read in 0..SETTLE_READS {
        if read > 0 {
            tokio::time::sleep(READ_GAP).await;
        }
        match server_total(client, peer, session_id).await {
            Ok(Ok(total)) if last == Some(total) => return Ok(total),
            Ok(Ok(total)) => last = Some(total),
            Ok(Err(reason)) => return Err(Unsettled::Contradiction(reason)),
            Err(e) => {
                last = None;
                why = e.to_string();
            }
        }
    }
    Err(Unsettled::Unreachable(why))
}

/// Why an interrupted write cannot be settled now.
pub enum Unsettled {
    /// The server could not be asked; try again on the next capture.
    Unreachable(String),
    /// The server's count fits no batch boundary of the intent.
    Contradiction(String),
}
