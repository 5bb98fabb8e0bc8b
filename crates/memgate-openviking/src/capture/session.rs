//! One capture of one session, phase by phase, in the order the module
//! documentation gives and for the reasons it gives: match the head
//! against the cursor, deliver what the outbox holds, reconcile an
//! interrupted write, retry a pending commit, plan what is new, learn the
//! server's count, save the intent, then send and settle in a task of its
//! own. A phase that ends the capture answers its outcome instead of the
//! value the next phase needs ([`Flow`]).

use super::disk::{on_disk, save};
use super::queue::{queue_behind, queue_plan, TakeOver};
use super::{
    advance_by_intent, loaded_prefix, prepare, same_prefix_decision, write_failure, CaptureOutcome,
    CapturePlan, CaptureTarget, Session, Transcript, COUNT_FAILED, PARTIALLY_RECORDED,
    PENDING_COMMIT_FAILED, RECONCILE_FAILED, RECORDING_FAILED,
};
use crate::client::OpenVikingClient;
use crate::cursor::{
    save_optimistic, Confirmation, InFlight, Rollback, SaveMode, TranscriptCursor,
};
use crate::delivery::deliver_session;
use crate::lifecycle::Operation;
use crate::locks::SessionGuard;
use crate::outbox::{blocking, Outbox};
use crate::recorder::{self, Prepared, RecordError};
use crate::session_count::{settled_total, Unsettled};
use memgate_core::signature::SequenceHasher;
use memgate_core::{MemoryError, Result};
use std::ops::ControlFlow;
use std::sync::Arc;

/// A phase's answer: the capture goes on with a value, or ends with its
/// outcome.
type Flow<T> = ControlFlow<CaptureOutcome, T>;

/// The value of a phase that lets the capture go on; the capture's
/// outcome otherwise.
macro_rules! proceed {
    ($phase:expr) => {
        match $phase {
            ControlFlow::Continue(value) => value,
            ControlFlow::Break(outcome) => return Ok(outcome),
        }
    };
}

/// Runs one capture of `transcript` while `guard` holds the session's lock
/// and `loaded` is the cursor read under it.
pub async fn capture_session(
    operation: Operation,
    guard: SessionGuard,
    target: CaptureTarget,
    loaded: TranscriptCursor,
    mut transcript: Transcript<'_>,
) -> Result<CaptureOutcome> {
    let session = Session::new(target, loaded);
    let matched = proceed!(match_head(&session, &transcript).await?);
    let client = operation.client();
    let mut cursor = session.loaded.clone();
    match deliver_queued(&session, client).await? {
        Queued::Nothing => {}
        // The cursor's count predates the delivery.
        Queued::Delivered => cursor.server_total = None,
        Queued::Waiting(outbox) => {
            // Queuing behind plans on every signature, which a head known
            // by its fingerprint alone does not have.
            if transcript.unsigned > 0 {
                return session.needs_whole(session.loaded.clone()).await;
            }
            let signatures = std::mem::take(&mut transcript.signatures);
            return queue_behind(&session, &outbox, signatures, &mut transcript.whole).await;
        }
    }
    let cursor = proceed!(reconcile_intent(&session, client, cursor).await?);
    let mut cursor = proceed!(retry_commit(&session, client, cursor).await?);
    let (plan, prepared) = proceed!(plan_new(&session, &cursor, matched, &mut transcript).await?);
    let base_total =
        proceed!(count_before_sending(&session, client, &cursor, &plan, &prepared).await?);
    cursor.server_total = Some(base_total);
    let (confirmation, intent) =
        save_intent(&session, &cursor, &plan, &prepared, base_total).await?;
    let sending = Sending {
        operation,
        guard,
        session,
        cursor,
        plan,
        prepared,
        intent,
        confirmation,
        base_total,
    };
    // A task of its own: once messages are on their way, a caller that
    // stops waiting does not stop the outcome from being recorded.
    tokio::spawn(sending.run())
        .await
        .map_err(|e| MemoryError::Backend(format!("OpenViking capture task failed: {e}")))?
}

/// The head: the cursor's matched prefix for the transcript, decided before
/// any request, since a cursor that contradicts itself must fail closed
/// with nothing sent. A head known by its fingerprint alone ends the
/// capture when the decision needs its signatures (the whole transcript
/// is captured instead).
async fn match_head(
    session: &Session,
    transcript: &Transcript<'_>,
) -> Result<Flow<Option<SequenceHasher>>> {
    let loaded = &session.loaded;
    let Ok(matched) = loaded_prefix(loaded, transcript, transcript.head.clone()) else {
        return Ok(Flow::Break(session.needs_whole(loaded.clone()).await?));
    };
    // A contradiction needs a prefix digest that does not match.
    if matched.is_none() && loaded.contradicts(&transcript.signatures) {
        let sid = session.sid();
        tracing::error!(
            session = sid,
            "OpenViking capture cursor contradicts itself"
        );
        return Err(MemoryError::Corruption(format!(
            "OpenViking capture cursor is invalid (its prefix digest contradicts its window); refusing unsafe replay (session={sid})"
        )));
    }
    Ok(Flow::Continue(matched))
}

/// What the outbox held for the session.
enum Queued {
    Nothing,
    /// Everything queued was delivered just now.
    Delivered,
    /// Entries are still waiting: new messages queue behind them.
    Waiting(Arc<Outbox>),
}

/// The outbox: the session's queued captures go first, so nothing new
/// overtakes them.
async fn deliver_queued(session: &Session, client: &OpenVikingClient) -> Result<Queued> {
    let Some(outbox) = session.target.outbox.clone() else {
        return Ok(Queued::Nothing);
    };
    let sid = session.sid().to_owned();
    let queued = blocking(&outbox, move |o| o.session_entries(&sid)).await?;
    if queued.is_empty() {
        return Ok(Queued::Nothing);
    }
    if deliver_session(client, &outbox, session.sid()).await? {
        Ok(Queued::Delivered)
    } else {
        Ok(Queued::Waiting(outbox))
    }
}

/// An interrupted write (the cursor's intent) is settled against the
/// server's count before anything is sent, so nothing is sent twice and
/// nothing is lost. The cursor it answers is built from the one read.
async fn reconcile_intent(
    session: &Session,
    client: &OpenVikingClient,
    cursor: TranscriptCursor,
) -> Result<Flow<TranscriptCursor>> {
    let Some(intent) = &session.loaded.in_flight else {
        return Ok(Flow::Continue(cursor));
    };
    let sid = session.sid();
    match reconcile(client, session, intent).await {
        Ok(next) => Ok(Flow::Continue(next)),
        Err(Unsettled::Unreachable(cause)) => Ok(Flow::Break(CaptureOutcome::failed(
            0,
            write_failure(RECONCILE_FAILED, sid, cause),
        ))),
        Err(Unsettled::Contradiction(why)) => {
            tracing::error!(session = sid, %why, "OpenViking interrupted capture cannot be reconciled");
            Err(MemoryError::Corruption(format!(
                "OpenViking interrupted capture cannot be reconciled ({why}); refusing unsafe replay (session={sid})"
            )))
        }
    }
}

/// Moves the cursor read past the batches of its intent that the server
/// holds once the count has settled: batches arrive whole and in order, so
/// the count since `base_total` names exactly one batch boundary.
/// Everything delivered leaves the commit pending (the commit step retries
/// it only when the server still has uncommitted tokens).
async fn reconcile(
    client: &OpenVikingClient,
    session: &Session,
    intent: &InFlight,
) -> std::result::Result<TranscriptCursor, Unsettled> {
    let sid = session.sid();
    let total = settled_total(client, &session.target.peer, sid, intent.written_ms).await?;
    let landed = total.checked_sub(intent.base_total);
    let confirmed = match landed {
        Some(0) => Some(0),
        Some(n) => intent
            .batches
            .iter()
            .position(|b| b.payloads == n)
            .map(|i| i + 1),
        None => None,
    };
    let Some(confirmed) = confirmed else {
        return Err(Unsettled::Contradiction(format!(
            "the session holds {total} messages; the interrupted capture expected {} to {}",
            intent.base_total,
            intent.base_total + intent.payloads()
        )));
    };
    tracing::info!(
        session = sid,
        batches = confirmed,
        of = intent.batches.len(),
        "OpenViking interrupted capture reconciled against the server's count"
    );
    Ok(advance_by_intent(
        &session.loaded,
        intent,
        confirmed,
        Some(total),
        session.max_seen(),
    ))
}

/// A commit left pending by an earlier capture is retried before anything
/// new is sent, so the server extracts what it already holds; if it fails,
/// nothing new is sent and the cursor keeps what this capture learnt.
async fn retry_commit(
    session: &Session,
    client: &OpenVikingClient,
    cursor: TranscriptCursor,
) -> Result<Flow<TranscriptCursor>> {
    if !cursor.commit_pending {
        return Ok(Flow::Continue(cursor));
    }
    let sid = session.sid();
    match recorder::flush(client, &session.target.peer, sid).await {
        Err(cause) => {
            session.save_if_moved(cursor).await?;
            Ok(Flow::Break(CaptureOutcome::failed(
                0,
                write_failure(PENDING_COMMIT_FAILED, sid, cause),
            )))
        }
        Ok(committed) => {
            tracing::info!(
                session = sid,
                committed,
                "OpenViking pending commit retried"
            );
            Ok(Flow::Continue(cursor.with_commit_pending(false)))
        }
    }
}

/// What is new, converted and redacted: the plan and its payloads. The
/// head's match is reused while the cursor's prefix is the one it was made
/// against; otherwise the transcript is matched again, which a head known
/// by its fingerprint alone cannot be (the whole transcript is captured
/// instead). Nothing to send ends the capture, writing the cursor only if
/// it moved.
async fn plan_new(
    session: &Session,
    cursor: &TranscriptCursor,
    matched: Option<SequenceHasher>,
    transcript: &mut Transcript<'_>,
) -> Result<Flow<(CapturePlan, Prepared)>> {
    let loaded = &session.loaded;
    let prefix = if same_prefix_decision(cursor, loaded, &transcript.signatures) {
        matched
    } else if transcript.unsigned > 0 {
        return Ok(Flow::Break(session.needs_whole(cursor.clone()).await?));
    } else {
        cursor.matching_prefix(&transcript.signatures)
    };
    let signatures = std::mem::take(&mut transcript.signatures);
    let plan =
        CapturePlan::matched(cursor, signatures, prefix).with_fingerprint(&transcript.fingerprint);
    let Some(prepared) = prepare(&plan, &mut transcript.whole, &session.target) else {
        return Ok(Flow::Break(session.needs_whole(cursor.clone()).await?));
    };
    if prepared.is_empty() {
        // Nothing to send (nothing new, or only messages that are never
        // recorded): write only if the cursor itself moved.
        session
            .save_if_moved(plan.completed(cursor, session.max_seen()))
            .await?;
        return Ok(Flow::Break(CaptureOutcome {
            sent: 0,
            already_known: plan.already_known(),
            failure: None,
            needs_whole: false,
        }));
    }
    Ok(Flow::Continue((plan, prepared)))
}

/// The session's count before sending, which the intent records so an
/// interruption can be reconciled: the cursor's when it knows it, else the
/// server's. A server that cannot be asked before anything was sent hands
/// the capture whole to the outbox when it is on (its first attempt reads
/// the count).
async fn count_before_sending(
    session: &Session,
    client: &OpenVikingClient,
    cursor: &TranscriptCursor,
    plan: &CapturePlan,
    prepared: &Prepared,
) -> Result<Flow<u64>> {
    if let Some(total) = cursor.server_total {
        return Ok(Flow::Continue(total));
    }
    let sid = session.sid();
    let failed = |cause: String| {
        Flow::Break(CaptureOutcome::failed(
            plan.already_known(),
            write_failure(COUNT_FAILED, sid, cause),
        ))
    };
    Ok(
        match crate::session_count::server_total(client, &session.target.peer, sid).await {
            Ok(Ok(total)) => Flow::Continue(total),
            Ok(Err(why)) => failed(why),
            Err(cause) => match &session.target.outbox {
                Some(outbox) => Flow::Break(
                    queue_plan(session, outbox, cursor, plan, prepared.values(0)).await?,
                ),
                None => failed(cause.to_string()),
            },
        },
    )
}

/// The intent, saved durably before the first request, optimistically:
/// the cursor as it will be once everything arrives, with the intent and
/// the way back to `cursor`, so success only confirms it in place.
async fn save_intent(
    session: &Session,
    cursor: &TranscriptCursor,
    plan: &CapturePlan,
    prepared: &Prepared,
    base_total: u64,
) -> Result<(Confirmation, InFlight)> {
    let intent = plan.intent(base_total, prepared);
    let mut outcome = plan.completed(cursor, session.max_seen());
    outcome.server_total = Some(base_total + intent.payloads());
    let rollback = Rollback::between(cursor, &outcome, intent.signatures.len());
    outcome.in_flight = Some(intent);
    let path = session.path.clone();
    let (confirmation, intent) = on_disk(session.sid(), move || {
        let confirmation = save_optimistic(&path, &outcome, &rollback)?;
        Ok((confirmation, outcome.in_flight))
    })
    .await?;
    Ok((
        confirmation,
        intent.unwrap_or_else(|| unreachable!("set just above")),
    ))
}

/// The send and what settles it, owned by the task that runs them. The
/// lock and the operation live until the cursor is saved: no other capture
/// of this session reads a stale cursor, and shutdown waits for the save.
struct Sending {
    operation: Operation,
    guard: SessionGuard,
    session: Session,
    /// The cursor the write starts from (the intent's base).
    cursor: TranscriptCursor,
    plan: CapturePlan,
    prepared: Prepared,
    intent: InFlight,
    confirmation: Confirmation,
    base_total: u64,
}

impl Sending {
    /// Records the new messages and commits, then settles the cursor by
    /// what the recorder confirmed.
    async fn run(self) -> Result<CaptureOutcome> {
        let recorded = recorder::record(
            self.operation.client(),
            &self.session.target.peer,
            self.session.sid(),
            &self.prepared,
            self.plan.pending.len(),
        )
        .await;
        match recorded {
            Ok(_) => Ok(self.confirmed()),
            Err(RecordError::NothingConfirmed(cause)) => self.nothing_confirmed(cause).await,
            Err(RecordError::Partial {
                input_messages_consumed,
                commit_pending,
                cause,
                ..
            }) => {
                self.partially(input_messages_consumed, commit_pending, cause)
                    .await
            }
        }
    }

    /// Everything arrived: the saved outcome is confirmed in place. Not
    /// confirmed (an I/O error), the intent stays, and the next capture
    /// asks the server, which holds everything.
    fn confirmed(self) -> CaptureOutcome {
        if let Err(e) = self.confirmation.confirm() {
            tracing::warn!(session = self.session.sid(), error = %e, "OpenViking capture cursor could not be confirmed; the next capture reconciles it");
        }
        drop((self.guard, self.operation));
        CaptureOutcome {
            sent: self.plan.pending.len(),
            already_known: self.plan.already_known(),
            failure: None,
            needs_whole: false,
        }
    }

    /// No batch is known to have arrived (it may have, with its answer
    /// lost): the intent stays and the next capture asks the server, or the
    /// outbox takes the whole write over.
    async fn nothing_confirmed(self, cause: impl std::fmt::Display) -> Result<CaptureOutcome> {
        let failure = write_failure(RECORDING_FAILED, self.session.sid(), cause);
        let already_known = self.plan.already_known();
        let Some(outbox) = &self.session.target.outbox else {
            return Ok(CaptureOutcome::failed(already_known, failure));
        };
        TakeOver {
            outbox,
            payloads: self.prepared.values(0),
            base_total: self.base_total,
            intent_ms: self.intent.written_ms,
            next: self.plan.completed(&self.cursor, self.session.max_seen()),
            failure,
            sent: self.plan.pending.len(),
            already_known,
        }
        .run(&self.session)
        .await
    }

    /// Some batches arrived: the cursor moves past them (the intent keeps
    /// the rest), or the outbox takes the rest over; a pending commit
    /// leaves every batch delivered.
    async fn partially(
        self,
        consumed: usize,
        commit_pending: bool,
        cause: impl std::fmt::Display,
    ) -> Result<CaptureOutcome> {
        let pending_len = self.plan.pending.len();
        let already_known = self.plan.already_known();
        let max_seen = self.session.max_seen();
        let consumed = consumed.min(pending_len);
        let intent = &self.intent;
        let batches = if commit_pending {
            intent.batches.len()
        } else {
            intent
                .batches
                .iter()
                .position(|b| b.inputs as usize == consumed)
                .map_or(0, |i| i + 1)
        };
        let failure = write_failure(PARTIALLY_RECORDED, self.session.sid(), cause);
        let done = batches
            .checked_sub(1)
            .map_or(0, |i| intent.batches[i].payloads);
        if let (Some(outbox), false) = (&self.session.target.outbox, commit_pending) {
            return TakeOver {
                outbox,
                payloads: self.prepared.values(done as usize),
                base_total: self.base_total + done,
                intent_ms: intent.written_ms,
                next: self.plan.completed(&self.cursor, max_seen),
                failure,
                sent: pending_len,
                already_known,
            }
            .run(&self.session)
            .await;
        }
        let mut next = self
            .plan
            .partially(&self.cursor, consumed, commit_pending, max_seen);
        next.server_total = Some(self.base_total + done);
        next.in_flight = intent.after(batches);
        save(
            self.session.path.clone(),
            next,
            SaveMode::CoveredByIntent,
            self.session.sid(),
        )
        .await?;
        Ok(CaptureOutcome {
            sent: consumed,
            already_known,
            failure: Some(failure),
            needs_whole: false,
        })
    }
}
