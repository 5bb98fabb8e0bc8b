//! Capture: each transcript message goes to its session once
//! (`deerflow-memory-contract` §5.6, §5.10).
//!
//! Under the session's lock:
//! 1. read the hash-only cursor (unreadable: refuse, whatever the policy);
//! 2. sign every captured message;
//! 3. if a commit is pending from an earlier capture, retry it first; if that
//!    fails, stop here (nothing new is sent, the cursor is kept);
//! 4. decide what is new: the messages after the matched prefix, or, when
//!    the prefix cannot be matched (compaction, edits), every message whose
//!    signature the window does not hold;
//! 5. record the new messages and commit; move the cursor by exactly what the
//!    server confirmed, including a commit left pending.
//!
//! Step 5 runs in its own task: once messages are on their way, a caller
//! that stops waiting (a host timeout) does not stop the cursor from being
//! saved, so confirmed messages are never sent twice because of it.

use crate::config::OpenVikingConfig;
use crate::lifecycle::Operation;
use crate::locks::SessionGuard;
use crate::payload::{redact_payload, to_payload};
use crate::recorder::{self, Prepared, RecordError};
use memgate_core::cursor::{load_cursor, save_cursor, CursorError, TranscriptCursor};
use memgate_core::signature::message_signature;
use memgate_core::{MemoryError, Message, Redactor, Result};
use std::collections::HashSet;
use std::fmt::Display;
use std::path::PathBuf;
use std::sync::Arc;

const PENDING_COMMIT_FAILED: &str =
    "OpenViking pending commit retry failed; preserving capture cursor";
const PARTIALLY_RECORDED: &str =
    "OpenViking partially recorded a conversation; confirmed progress was preserved";
const RECORDING_FAILED: &str =
    "OpenViking conversation recording failed; capture cursor was not advanced";

/// What is new in a transcript, given the cursor.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CapturePlan {
    /// Signatures of every captured message, in order.
    pub signatures: Vec<String>,
    /// The matched prefix length when the transcript only grew; `None` in the
    /// set-difference fallback.
    pub start: Option<usize>,
    /// Indices of the messages to send, in transcript order.
    pub pending: Vec<usize>,
}

impl CapturePlan {
    pub fn new(cursor: &TranscriptCursor, signatures: Vec<String>) -> Self {
        let start = cursor.matching_prefix_count(&signatures);
        let pending = match start {
            Some(start) => (start..signatures.len()).collect(),
            None => {
                let submitted: HashSet<&str> = cursor
                    .submitted_signatures
                    .iter()
                    .map(String::as_str)
                    .collect();
                (0..signatures.len())
                    .filter(|&i| !submitted.contains(signatures[i].as_str()))
                    .collect()
            }
        };
        Self {
            signatures,
            start,
            pending,
        }
    }

    fn pending_signatures(&self, count: usize) -> Vec<&str> {
        self.pending[..count]
            .iter()
            .map(|&i| self.signatures[i].as_str())
            .collect()
    }

    /// The cursor once every pending message is confirmed (or there was
    /// none): the prefix is the whole transcript.
    pub fn completed(&self, cursor: &TranscriptCursor, max_seen: usize) -> TranscriptCursor {
        let all: Vec<&str> = self.signatures.iter().map(String::as_str).collect();
        cursor.advanced(
            Some(&all),
            &self.pending_signatures(self.pending.len()),
            max_seen,
            false,
        )
    }

    /// The cursor once the first `consumed` pending messages are confirmed:
    /// the prefix moves only when the transcript was append-only.
    pub fn partially(
        &self,
        cursor: &TranscriptCursor,
        consumed: usize,
        commit_pending: bool,
        max_seen: usize,
    ) -> TranscriptCursor {
        let prefix: Option<Vec<&str>> = self.start.map(|start| {
            self.signatures[..start + consumed]
                .iter()
                .map(String::as_str)
                .collect()
        });
        cursor.advanced(
            prefix.as_deref(),
            &self.pending_signatures(consumed),
            max_seen,
            commit_pending,
        )
    }
}

/// Signatures of the captured messages (streamed; equal to core's).
pub fn sign_all(captured: &[&Message]) -> Vec<String> {
    captured.iter().map(|m| message_signature(m)).collect()
}

/// Where one capture writes.
pub struct CaptureTarget {
    pub config: Arc<OpenVikingConfig>,
    pub peer: String,
    pub session_id: String,
    /// Applied to each payload after the cursor's signatures are taken.
    pub redactor: Arc<Redactor>,
}

/// What one capture did; `failure` is a write failure the write policy
/// decides about (fatal errors are returned as `Err` instead).
#[derive(Debug)]
pub struct CaptureOutcome {
    pub sent: usize,
    pub already_known: usize,
    pub failure: Option<MemoryError>,
}

fn write_failure(message: &str, session_id: &str, cause: impl Display) -> MemoryError {
    MemoryError::Backend(format!("{message} (session={session_id}): {cause}"))
}

fn corruption(err: CursorError, session_id: &str) -> MemoryError {
    MemoryError::Corruption(match err {
        CursorError::Unreadable(_) => format!(
            "OpenViking capture cursor is unreadable; refusing unsafe replay (session={session_id})"
        ),
        CursorError::Invalid(_) => format!(
            "OpenViking capture cursor is invalid; refusing unsafe replay (session={session_id})"
        ),
    })
}

async fn load(path: PathBuf, session_id: &str) -> Result<TranscriptCursor> {
    let loaded = tokio::task::spawn_blocking(move || load_cursor(&path))
        .await
        .map_err(|e| MemoryError::Backend(format!("OpenViking cursor read task failed: {e}")))?;
    loaded.map_err(|e| {
        tracing::error!(error = %e, session = session_id, "OpenViking capture cursor cannot be trusted");
        corruption(e, session_id)
    })
}

/// Saves durably. A failed save is never softened by the write policy.
async fn save(path: PathBuf, cursor: TranscriptCursor, session_id: &str) -> Result<()> {
    let saved = tokio::task::spawn_blocking(move || save_cursor(&path, &cursor))
        .await
        .map_err(|e| MemoryError::Backend(format!("OpenViking cursor write task failed: {e}")))?;
    saved.map_err(|e| {
        MemoryError::Backend(format!(
            "OpenViking capture cursor could not be saved (session={session_id}): {e}"
        ))
    })
}

/// Runs one capture of `captured` (already filtered) while `guard` holds
/// the session's lock.
pub async fn capture_session(
    operation: Operation,
    guard: SessionGuard,
    target: CaptureTarget,
    captured: &[&Message],
) -> Result<CaptureOutcome> {
    let sid = target.session_id.as_str();
    let max_seen = target.config.max_seen_message_ids;
    let path = target.config.cursor_path(sid);
    let mut cursor = load(path.clone(), sid).await?;
    let signatures = sign_all(captured);

    if cursor.commit_pending {
        match recorder::flush(operation.client(), &target.peer, sid).await {
            Err(cause) => {
                return Ok(CaptureOutcome {
                    sent: 0,
                    already_known: 0,
                    failure: Some(write_failure(PENDING_COMMIT_FAILED, sid, cause)),
                })
            }
            Ok(committed) => {
                tracing::info!(
                    session = sid,
                    committed,
                    "OpenViking pending commit retried"
                );
                cursor = cursor.with_commit_pending(false);
                save(path.clone(), cursor.clone(), sid).await?;
            }
        }
    }

    let plan = CapturePlan::new(&cursor, signatures);
    let pending_len = plan.pending.len();
    let already_known = captured.len() - pending_len;
    if pending_len == 0 {
        save(path, plan.completed(&cursor, max_seen), sid).await?;
        return Ok(CaptureOutcome {
            sent: 0,
            already_known,
            failure: None,
        });
    }
    let prepared: Vec<Prepared> = plan
        .pending
        .iter()
        .enumerate()
        .filter_map(|(k, &i)| {
            to_payload(captured[i], &target.peer).map(|mut payload| {
                redact_payload(&mut payload, &target.redactor);
                Prepared {
                    payload,
                    input_end: k + 1,
                }
            })
        })
        .collect();

    let task = tokio::spawn(async move {
        // The lock and the operation both live until the cursor is saved:
        // no other capture of this session reads a stale cursor, and
        // shutdown waits for the save.
        let _lock = guard;
        let sid = target.session_id.as_str();
        let recorded =
            recorder::record(operation.client(), &target.peer, sid, prepared, pending_len).await;
        match recorded {
            Ok(_) => {
                save(path, plan.completed(&cursor, max_seen), sid).await?;
                Ok(CaptureOutcome {
                    sent: pending_len,
                    already_known,
                    failure: None,
                })
            }
            Err(RecordError::NothingConfirmed(cause)) => Ok(CaptureOutcome {
                sent: 0,
                already_known,
                failure: Some(write_failure(RECORDING_FAILED, sid, cause)),
            }),
            Err(RecordError::Partial {
                input_messages_consumed,
                commit_pending,
                cause,
                ..
            }) => {
                let consumed = input_messages_consumed.min(pending_len);
                if consumed > 0 || commit_pending {
                    let next = plan.partially(&cursor, consumed, commit_pending, max_seen);
                    save(path, next, sid).await?;
                }
                Ok(CaptureOutcome {
                    sent: consumed,
                    already_known,
                    failure: Some(write_failure(PARTIALLY_RECORDED, sid, cause)),
                })
            }
        }
    });
    task.await
        .map_err(|e| MemoryError::Backend(format!("OpenViking capture task failed: {e}")))?
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sigs(names: &[&str]) -> Vec<String> {
        names.iter().map(|s| format!("{s:0>64}")).collect()
    }

    #[test]
    fn append_only_plans_send_the_suffix() {
        let first = sigs(&["h1", "a1"]);
        let cursor = TranscriptCursor::default();
        let plan = CapturePlan::new(&cursor, first.clone());
        assert_eq!((plan.start, plan.pending.clone()), (Some(0), vec![0, 1]));
        let cursor = plan.completed(&cursor, 512);
        let again = CapturePlan::new(&cursor, first.clone());
        assert!(again.pending.is_empty());
        let grown = CapturePlan::new(&cursor, sigs(&["h1", "a1", "h2"]));
        assert_eq!((grown.start, grown.pending), (Some(2), vec![2]));
    }

    #[test]
    fn partial_progress_moves_the_prefix_only_when_append_only() {
        let all = sigs(&["h1", "a1", "h2"]);
        let plan = CapturePlan::new(&TranscriptCursor::default(), all.clone());
        let after = plan.partially(&TranscriptCursor::default(), 2, false, 512);
        assert_eq!(after.submitted_prefix_count, Some(2));
        assert_eq!(after.submitted_signatures, all[..2].to_vec());
        assert!(!after.commit_pending);
        assert_eq!(CapturePlan::new(&after, all.clone()).pending, vec![2]);

        // Fallback: the prefix fields are kept as they were.
        let old = TranscriptCursor::default().advanced(Some(&all[..3]), &all[..1], 512, false);
        let edited = sigs(&["h1x", "a1", "h2", "h3"]);
        let plan = CapturePlan::new(&old, edited.clone());
        assert_eq!(plan.start, None);
        assert_eq!(plan.pending, vec![0, 1, 2, 3]);
        let after = plan.partially(&old, 1, false, 512);
        assert_eq!(after.submitted_prefix_count, old.submitted_prefix_count);
        assert_eq!(after.submitted_prefix_digest, old.submitted_prefix_digest);
        assert_eq!(after.submitted_signatures.last().unwrap(), &edited[0]);
    }
}
