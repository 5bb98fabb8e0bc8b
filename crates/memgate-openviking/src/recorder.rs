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
use crate::payload::WireMessage;
use serde_json::Value;

/// The server's per-batch message limit.
pub const MAX_BATCH_MESSAGES: usize = 100;

/// A capture's converted messages as its batch bodies hold them: each
/// message's wire JSON back to back in one buffer, comma-separated, so a
/// batch is one slice of it. One buffer instead of a payload per message: a
/// first capture converts every message of the transcript, and building,
/// then dropping, a thousand payload trees (on another thread, long after
/// they left the cache) was a visible share of its CPU.
#[derive(Debug, Default)]
pub struct Prepared {
    wire: String,
    marks: Vec<Mark>,
}

/// Where one message's JSON ends in the buffer, and the input position just
/// past the message it came from.
#[derive(Clone, Copy, Debug)]
struct Mark {
    end: usize,
    input_end: usize,
}

/// Up to [`MAX_BATCH_MESSAGES`] consecutive prepared messages.
pub struct Batch<'a> {
    /// Their JSON, comma-separated (a batch body's `messages` list inside
    /// its brackets).
    pub wire: &'a str,
    pub len: usize,
    /// The input position just past the batch's last message.
    pub input_end: usize,
}

impl Prepared {
    /// Room for `messages` messages of a typical size.
    pub fn with_capacity(messages: usize) -> Self {
        Self {
            wire: String::with_capacity(256 * messages),
            marks: Vec::with_capacity(messages),
        }
    }

    /// The queued payloads (the outbox's form), each the input just past it
    /// being its own position.
    pub fn from_values(values: &[Value]) -> Self {
        let mut prepared = Self::with_capacity(values.len());
        for (i, value) in values.iter().enumerate() {
            prepared.push(value, i + 1);
        }
        prepared
    }

    /// Appends `message`, converted from the input messages before
    /// `input_end`.
    pub fn push(&mut self, message: &impl WireMessage, input_end: usize) {
        if !self.marks.is_empty() {
            self.wire.push(',');
        }
        message.write_wire(&mut self.wire);
        self.marks.push(Mark {
            end: self.wire.len(),
            input_end,
        });
    }

    pub fn len(&self) -> usize {
        self.marks.len()
    }

    pub fn is_empty(&self) -> bool {
        self.marks.is_empty()
    }

    /// Where message `i`'s JSON starts (after the comma before it).
    fn start(&self, i: usize) -> usize {
        i.checked_sub(1)
            .map_or(0, |before| self.marks[before].end + 1)
    }

    /// The messages from `from` on, in batches of at most
    /// [`MAX_BATCH_MESSAGES`], as the recorder sends them.
    pub fn batches(&self, from: usize) -> impl Iterator<Item = Batch<'_>> {
        (from..self.len())
            .step_by(MAX_BATCH_MESSAGES)
            .map(move |first| {
                let last = (first + MAX_BATCH_MESSAGES).min(self.len()) - 1;
                Batch {
                    wire: &self.wire[self.start(first)..self.marks[last].end],
                    len: last + 1 - first,
                    input_end: self.marks[last].input_end,
                }
            })
    }

    /// The messages from `from` on as JSON values: what the outbox queues,
    /// exactly what is (or would have been) sent.
    pub fn values(&self, from: usize) -> Vec<Value> {
        (from..self.len())
            .map(|i| {
                serde_json::from_str(&self.wire[self.start(i)..self.marks[i].end])
                    .expect("a prepared message is JSON memgate wrote")
            })
            .collect()
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

impl std::fmt::Display for RecordError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            RecordError::NothingConfirmed(_) => f.write_str("no batch was confirmed"),
            RecordError::Partial {
                stage,
                input_messages_consumed,
                ..
            } => write!(
                f,
                "the recording stopped at {stage:?} after {input_messages_consumed} messages were confirmed"
            ),
        }
    }
}

/// The server call that failed stays the source, so a caller that logs the
/// chain sees it, whatever the recording's own summary says.
impl std::error::Error for RecordError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            RecordError::NothingConfirmed(cause) | RecordError::Partial { cause, .. } => {
                Some(cause)
            }
        }
    }
}

/// Sends `prepared` (converted from `input_len` input messages) to the
/// session in order, then commits. No payloads: no request at all.
pub async fn record(
    client: &OpenVikingClient,
    peer: &str,
    session_id: &str,
    prepared: &Prepared,
    input_len: usize,
) -> Result<usize, RecordError> {
    if prepared.is_empty() {
        return Ok(0);
    }
    let mut confirmed = 0;
    for (i, batch) in prepared.batches(0).enumerate() {
        match client.add_messages(peer, session_id, batch.wire).await {
            Ok(_) => confirmed = batch.input_end,
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::payload::to_payload;
    use memgate_core::Message;
    use serde_json::json;

    #[test]
    fn a_failed_recording_keeps_the_failed_call_as_its_source() {
        let cause = || WireError::Deadline {
            call: "add_message",
            after: std::time::Duration::from_secs(1),
        };
        for err in [
            RecordError::NothingConfirmed(cause()),
            RecordError::Partial {
                stage: Stage::Commit,
                input_messages_consumed: 3,
                commit_pending: true,
                cause: cause(),
            },
        ] {
            let source = std::error::Error::source(&err).expect("the failed call");
            assert!(source.downcast_ref::<WireError>().is_some(), "{err}");
        }
    }

    /// 250 messages from 375 inputs, every third input not recorded (input
    /// ends 1, 2, 4, 5, …).
    fn prepared() -> (Prepared, Vec<Value>) {
        let mut prepared = Prepared::default();
        let mut sent = Vec::new();
        for k in (0..375).filter(|k| k % 3 != 2) {
            let payload = to_payload(&Message::human(format!("m{k} \"quoted\"")), "p").unwrap();
            sent.push(payload.to_value());
            prepared.push(&payload, k + 1);
        }
        (prepared, sent)
    }

    #[test]
    fn batches_are_slices_of_at_most_the_server_limit_in_order() {
        let (prepared, sent) = prepared();
        assert_eq!(prepared.len(), 250);
        let batches: Vec<Batch<'_>> = prepared.batches(0).collect();
        let lens: Vec<usize> = batches.iter().map(|b| b.len).collect();
        assert_eq!(lens, [100, 100, 50]);
        // The input just past each batch's last message.
        let ends: Vec<usize> = batches.iter().map(|b| b.input_end).collect();
        assert_eq!(ends, [149, 299, 374]);
        for (i, batch) in batches.iter().enumerate() {
            let list: Value = serde_json::from_str(&format!("[{}]", batch.wire)).unwrap();
            assert_eq!(
                list,
                Value::Array(sent[i * 100..i * 100 + batch.len].to_vec())
            );
        }
    }

    #[test]
    fn a_tail_starts_at_its_own_message() {
        let (prepared, sent) = prepared();
        let tail: Vec<Batch<'_>> = prepared.batches(130).collect();
        assert_eq!(tail.iter().map(|b| b.len).collect::<Vec<_>>(), [100, 20]);
        let first: Value = serde_json::from_str(&format!("[{}]", tail[0].wire)).unwrap();
        assert_eq!(first[0], sent[130]);
        assert_eq!(prepared.values(130), sent[130..]);
        assert_eq!(prepared.values(0), sent);
        assert!(prepared.batches(250).next().is_none());
        assert!(prepared.values(250).is_empty());
    }

    #[test]
    fn queued_values_go_out_as_they_were_queued() {
        let queued = vec![
            json!({"role": "user", "parts": [{"type": "text", "text": "a\nb"}]}),
            json!({"z": [1, 2.5, null, true]}),
        ];
        let prepared = Prepared::from_values(&queued);
        let batch = prepared.batches(0).next().unwrap();
        assert_eq!((batch.len, batch.input_end), (2, 2));
        assert_eq!(batch.wire, format!("{},{}", queued[0], queued[1]));
        assert!(Prepared::default().batches(0).next().is_none());
    }
}
