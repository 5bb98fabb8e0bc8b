//! The outbox's part in a capture (when the operator turned it on): a
//! capture the server did not take is acknowledged once its payloads are
//! queued, and new messages queue behind a session's undelivered ones, so
//! nothing overtakes them.

use super::disk::save;
use super::{
    advance_by_intent, prepare, write_failure, CaptureOutcome, CapturePlan, Session, Whole,
    QUEUE_BLOCKED, QUEUE_REFUSED,
};
use crate::cursor::{SaveMode, TranscriptCursor};
use crate::outbox::{blocking, Outbox};
use memgate_core::{MemoryError, Result};
use serde_json::Value;
use std::sync::Arc;

/// A failed write handed to the outbox: queued (fsynced) first, then the
/// cursor moves past it (to `next`). A crash in between leaves the cursor's
/// intent, which the entry names (`intent_ms`), so the next capture neither
/// resends nor loses it.
pub(super) struct TakeOver<'a> {
    pub outbox: &'a Arc<Outbox>,
    pub payloads: Vec<Value>,
    pub base_total: u64,
    pub intent_ms: u64,
    /// The cursor once the queued messages count as delivered.
    pub next: TranscriptCursor,
    /// Why the server did not take them (logged; the capture succeeds).
    pub failure: MemoryError,
    /// The capture's report: messages sent (queued counts as sent) and
    /// known before.
    pub sent: usize,
    pub already_known: usize,
}

impl TakeOver<'_> {
    pub(super) async fn run(self, session: &Session) -> Result<CaptureOutcome> {
        let Self {
            outbox,
            payloads,
            base_total,
            intent_ms,
            mut next,
            failure,
            sent,
            already_known,
        } = self;
        let sid = session.sid();
        let (stream, peer) = (sid.to_owned(), session.target.peer.clone());
        let count = payloads.len();
        let queued = blocking(outbox, move |o| {
            o.enqueue(&stream, &peer, &payloads, Some(base_total), Some(intent_ms))
        })
        .await;
        if let Err(refused) = queued {
            return Ok(CaptureOutcome::failed(
                already_known,
                write_failure(QUEUE_REFUSED, sid, format!("{failure}; {refused}")),
            ));
        }
        tracing::warn!(session = sid, messages = count, cause = %failure, "OpenViking write failed; the capture is queued in the outbox");
        next.server_total = None;
        next.in_flight = None;
        save(session.path.clone(), next, SaveMode::Durable, sid).await?;
        Ok(CaptureOutcome {
            sent,
            already_known,
            failure: None,
            needs_whole: false,
        })
    }
}

/// The session still has undelivered entries: new messages queue behind
/// them, in order, without a request. A cursor intent the outbox took over
/// counts as delivered; one it does not know stops the capture (nothing
/// sent, cursor kept) until the queue drains.
pub(super) async fn queue_behind(
    session: &Session,
    outbox: &Arc<Outbox>,
    signatures: Vec<String>,
    whole: &mut Whole<'_>,
) -> Result<CaptureOutcome> {
    let sid = session.sid();
    let loaded = &session.loaded;
    let mut cursor = loaded.clone();
    if let Some(intent) = &loaded.in_flight {
        let owned = sid.to_owned();
        let queued = blocking(outbox, move |o| o.session_entries(&owned)).await?;
        if !queued
            .iter()
            .any(|e| e.intent_ms == Some(intent.written_ms))
        {
            return Ok(CaptureOutcome::failed(
                0,
                write_failure(QUEUE_BLOCKED, sid, "the queue did not drain"),
            ));
        }
        cursor = advance_by_intent(
            loaded,
            intent,
            intent.batches.len(),
            None,
            session.max_seen(),
        )
        .with_commit_pending(false);
    }
    let plan = CapturePlan::new(&cursor, signatures);
    let Some(prepared) = prepare(&plan, whole, &session.target) else {
        return session.needs_whole(cursor).await;
    };
    queue_plan(session, outbox, &cursor, &plan, prepared.values(0)).await
}

/// Queues `payloads` (the plan's pending messages) without a request and
/// moves the cursor past them; a refusal leaves the cursor as it was.
pub(super) async fn queue_plan(
    session: &Session,
    outbox: &Arc<Outbox>,
    cursor: &TranscriptCursor,
    plan: &CapturePlan,
    payloads: Vec<Value>,
) -> Result<CaptureOutcome> {
    let sid = session.sid();
    let pending_len = plan.pending.len();
    let already_known = plan.signatures.len() - pending_len;
    if !payloads.is_empty() {
        let (stream, peer) = (sid.to_owned(), session.target.peer.clone());
        let queued = blocking(outbox, move |o| {
            o.enqueue(&stream, &peer, &payloads, None, None)
        })
        .await;
        if let Err(refused) = queued {
            session.save_if_moved(cursor.clone()).await?;
            return Ok(CaptureOutcome::failed(already_known, refused));
        }
    }
    let mut next = plan.completed(cursor, session.max_seen());
    next.server_total = None;
    next.in_flight = None;
    session.save_if_moved(next).await?;
    Ok(CaptureOutcome {
        sent: pending_len,
        already_known,
        failure: None,
        needs_whole: false,
    })
}
