//! Writing a conversation into its OpenViking session: ordered batches of at
//! most 100 messages, then one commit (the official recorder with the
//! `always` commit policy, `openviking-api` §8.3), and the retry of a commit
//! that failed earlier.
//!
//! Progress is reported in input messages, so the caller can advance its
//! cursor by exactly what the server confirmed: messages that are not
//! recorded (system, empty AI) still count as consumed when they lie inside
//! a confirmed batch.

use crate::client::{OpenVikingClient, WireError};
use crate::payload::{SessionMessage, WireMessage};
use serde_json::Value;

/// The server's per-batch message limit.
pub const MAX_BATCH_MESSAGES: usize = 100;

/// One converted message and the input position just past it.
pub struct Prepared {
    pub payload: SessionMessage,
    /// Index of the input message it came from, plus one.
    pub input_end: usize,
}

/// On the wire a prepared message is its payload, so batches are written
/// straight from the prepared list (no copy of the payloads).
impl WireMessage for Prepared {
    fn write_wire(&self, body: &mut String) {
        self.payload.write_wire(body);
    }
}

/// Which step failed after progress was confirmed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Stage {
    Batch,
    Commit,
}

/// A recording that did not complete.
#[derive(Debug)]
pub enum RecordError {
    /// Nothing was confirmed: the first batch failed.
    NothingConfirmed(WireError),
    /// A later batch, or the commit, failed.
    Partial {
        stage: Stage,
        /// Input messages whose payloads the server confirmed.
        input_messages_consumed: usize,
        /// Everything was written but the commit did not complete.
        commit_pending: bool,
        cause: WireError,
    },
}

/// Sends `prepared` (converted from `input_len` input messages) to the
/// session in order, then commits. No payloads: no request at all.
pub async fn record(
    client: &OpenVikingClient,
    peer: &str,
    session_id: &str,
    prepared: &[Prepared],
    input_len: usize,
) -> Result<usize, RecordError> {
    if prepared.is_empty() {
        return Ok(0);
    }
    let mut confirmed = 0;
    for (i, batch) in prepared.chunks(MAX_BATCH_MESSAGES).enumerate() {
        match client.add_messages(peer, session_id, batch).await {
            Ok(_) => confirmed = batch[batch.len() - 1].input_end,
            Err(cause) if i == 0 => return Err(RecordError::NothingConfirmed(cause)),
            Err(cause) => {
                return Err(RecordError::Partial {
                    stage: Stage::Batch,
                    input_messages_consumed: confirmed,
                    commit_pending: false,
                    cause,
                })
            }
        }
    }
    match client.commit(peer, session_id).await {
        Ok(_) => Ok(prepared.len()),
        Err(cause) => Err(RecordError::Partial {
            stage: Stage::Commit,
            input_messages_consumed: input_len,
            commit_pending: true,
            cause,
        }),
    }
}

/// Retries a commit that failed after its messages were written: reads the
/// session and commits only when it still has uncommitted tokens. A session
/// the server no longer knows has nothing to commit.
pub async fn flush(
    client: &OpenVikingClient,
    peer: &str,
    session_id: &str,
) -> Result<bool, WireError> {
    let session = match client.get_session(peer, session_id).await {
        Ok(session) => session,
        Err(e) if e.is_not_found() => return Ok(false),
        Err(e) => return Err(e),
    };
    let pending_tokens = session
        .get("pending_tokens")
        .and_then(Value::as_f64)
        .unwrap_or(0.0);
    if pending_tokens <= 0.0 {
        return Ok(false);
    }
    client.commit(peer, session_id).await?;
    Ok(true)
}
