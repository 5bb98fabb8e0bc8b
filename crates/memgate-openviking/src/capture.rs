//! Capture: each transcript message goes to its session once
//! (`deerflow-memory-contract` §5.6, §5.10), also when the process dies
//! mid-write.
//!
//! Under the session's lock:
//! 1. read the hash-only cursor (not exactly valid: refuse, whatever the
//!    policy, with no request sent);
//! 2. if it holds the intent of an interrupted write, ask the server how
//!    many messages the session holds and move the cursor by exactly the
//!    batches that arrived ([`reconcile`]), before anything is sent;
//! 3. sign every captured message; if a commit is pending from an earlier
//!    capture, retry it first; if that fails, stop here (nothing new is
//!    sent, the cursor is kept);
//! 4. decide what is new: the messages after the matched prefix, or, when
//!    the prefix cannot be matched (compaction, edits), every message whose
//!    signature the window does not hold;
//! 5. save the intent durably, optimistically: the cursor as it will be once
//!    every batch and the commit succeed, with the intent and the way back
//!    (`crate::cursor::save_optimistic`, the fsyncs of one durable
//!    save); record the new messages and commit, then confirm the outcome in
//!    place (a few bytes, not fsynced: lost in a power cut, the intent is
//!    reconciled). A partial failure saves the cursor it leaves instead.
//!    Nothing new: no write at all unless the cursor itself changes.
//!
//! Step 5's requests and confirmation run in their own task: once messages
//! are on their way, a caller that stops waiting (a host timeout) does not
//! stop the outcome from being recorded, so confirmed messages are never
//! sent twice because of it. The intent is saved on a waiting caller's own
//! thread ([`on_callers_thread`]).
//!
//! Reconciliation relies on OpenViking 0.5's `total_message_count`, which
//! counts every message the session ever received, committed or not (pinned
//! in `tests/real_openviking.rs`).

use crate::client::{OpenVikingClient, WireError};
use crate::config::OpenVikingConfig;
use crate::delivery::{blocking, deliver_session};
use crate::lifecycle::Operation;
use crate::locks::SessionGuard;
use crate::outbox::Outbox;
use crate::payload::{payload_of, payload_peer, redact_payload};
use crate::recorder::{self, Prepared, RecordError};
use crate::cursor::{
    load_cursor, save_cursor_with, save_optimistic, BatchMark, CursorError, InFlight, Rollback,
    SaveMode, TranscriptCursor,
};
use memgate_core::signature::{message_signature, signature_of, HeadFingerprint, SequenceHasher};
use memgate_core::{KnownHead, MemoryError, Message, Redactor, Result};
use serde_json::Value;
use std::borrow::Cow;
use std::collections::HashSet;
use std::fmt::Display;
use std::future::Future;
use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

const PENDING_COMMIT_FAILED: &str =
    "OpenViking pending commit retry failed; preserving capture cursor";
const PARTIALLY_RECORDED: &str =
    "OpenViking partially recorded a conversation; confirmed progress was preserved";
const RECORDING_FAILED: &str =
    "OpenViking conversation recording failed; capture cursor was not advanced";
const RECONCILE_FAILED: &str =
    "OpenViking could not be asked what an interrupted capture delivered; nothing was sent";
const QUEUE_BLOCKED: &str =
    "OpenViking outbox holds undelivered captures of this session and an interrupted capture it does not cover; nothing was sent";
const QUEUE_REFUSED: &str = "OpenViking write failed and the outbox refused it";
const COUNT_FAILED: &str =
    "OpenViking could not be asked how many messages the session holds; nothing was sent";

/// What is new in a transcript, given the cursor.
#[derive(Clone, Debug)]
pub struct CapturePlan {
    /// Signatures of every captured message, in order.
    pub signatures: Vec<String>,
    /// The matched prefix length when the transcript only grew; `None` in the
    /// set-difference fallback.
    pub start: Option<usize>,
    /// Indices of the messages to send, in transcript order.
    pub pending: Vec<usize>,
    /// The running digest at the matched prefix (`start`): batch
    /// boundaries and the whole transcript are digested from there.
    prefix: Option<SequenceHasher>,
    /// The running digest of the whole transcript, once computed (the
    /// intent's last batch and the completed cursor name the same prefix,
    /// and the cursor keeps its state): one pass over the signatures.
    whole: OnceLock<SequenceHasher>,
    /// The whole transcript's [`HeadFingerprint`], which the completed
    /// cursor records for its prefix; `None`: not known here.
    fingerprint: Option<String>,
}

impl CapturePlan {
    pub fn new(cursor: &TranscriptCursor, signatures: Vec<String>) -> Self {
        let prefix = cursor.matching_prefix(&signatures);
        Self::matched(cursor, signatures, prefix)
    }

    /// [`new`](Self::new) with the cursor's matched prefix already known
    /// (`cursor.matching_prefix(&signatures)`, computed once per capture).
    fn matched(
        cursor: &TranscriptCursor,
        signatures: Vec<String>,
        prefix: Option<SequenceHasher>,
    ) -> Self {
        let start = prefix.as_ref().map(SequenceHasher::absorbed);
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
            prefix,
            whole: OnceLock::new(),
            fingerprint: None,
        }
    }

    /// The plan with the whole transcript's fingerprint, for the cursor.
    fn with_fingerprint(mut self, fingerprint: &HeadFingerprint) -> Self {
        self.fingerprint = Some(fingerprint.value());
        self
    }

    /// The running digest of the first `end` signatures (`end` ≥ `start`).
    fn running_to(&self, end: usize) -> SequenceHasher {
        let mut running = self.prefix.clone().unwrap_or_default();
        running.absorb(&self.signatures[running.absorbed()..end]);
        running
    }

    fn whole(&self) -> &SequenceHasher {
        self.whole
            .get_or_init(|| self.running_to(self.signatures.len()))
    }

    fn pending_signatures(&self, count: usize) -> Vec<&str> {
        self.pending[..count]
            .iter()
            .map(|&i| self.signatures[i].as_str())
            .collect()
    }

    /// The cursor once every pending message is confirmed (or there was
    /// none): the prefix is the whole transcript.
    /// With the transcript's fingerprint known, the cursor records it.
    pub fn completed(&self, cursor: &TranscriptCursor, max_seen: usize) -> TranscriptCursor {
        let whole = (self.signatures.len() as u64, self.whole().digest());
        let next = cursor.advanced_to(
            Some(whole),
            &self.pending_signatures(self.pending.len()),
            max_seen,
            false,
        );
        match &self.fingerprint {
            Some(fingerprint) => next.with_prefix_head(fingerprint.clone(), self.whole()),
            None => next,
        }
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
        // Extended from the matched prefix: the signatures before it may
        // not be here (a recognised head).
        let prefix = self.start.map(|start| {
            let running = self.running_to(start + consumed);
            (running.absorbed() as u64, running.digest())
        });
        cursor.advanced_to(
            prefix,
            &self.pending_signatures(consumed),
            max_seen,
            commit_pending,
        )
    }

    /// The durable intent of sending `prepared` (converted from the pending
    /// messages) when the session held `base_total` messages: one mark per
    /// batch of at most [`MAX_BATCH_MESSAGES`](recorder::MAX_BATCH_MESSAGES), as the recorder sends them.
    pub fn intent(&self, base_total: u64, prepared: &Prepared) -> InFlight {
        let ends: Vec<(usize, usize)> = prepared
            .batches(0)
            .scan(0, |payloads, batch| {
                *payloads += batch.len;
                Some((batch.input_end, *payloads))
            })
            .collect();
        // Every boundary's prefix digest, extending one running digest.
        let digests: Vec<Option<String>> = match self.start {
            Some(start) => {
                let mut running = self.running_to(start);
                ends.iter()
                    .map(|&(inputs, _)| {
                        running.absorb(&self.signatures[running.absorbed()..start + inputs]);
                        let digest = running.digest();
                        if running.absorbed() == self.signatures.len() {
                            let _ = self.whole.set(running.clone());
                        }
                        Some(digest)
                    })
                    .collect()
            }
            None => vec![None; ends.len()],
        };
        let batches = ends
            .into_iter()
            .zip(digests)
            .map(|((inputs, payloads), prefix_digest)| BatchMark {
                inputs: inputs as u64,
                payloads: payloads as u64,
                prefix_digest,
            })
            .collect();
        InFlight {
            base_total,
            written_ms: now_ms(),
            start: self.start.map(|s| s as u64),
            signatures: self
                .pending_signatures(self.pending.len())
                .into_iter()
                .map(str::to_owned)
                .collect(),
            batches,
        }
    }
}

/// Signatures of the captured messages (streamed; equal to core's).
pub fn sign_all(captured: &[&Message]) -> Vec<String> {
    captured.iter().map(|m| message_signature(m)).collect()
}

/// The captured messages of one transcript (already filtered), in order:
/// their signatures, their fingerprint, and the messages themselves from
/// the end of the known head on. A surface that read the cursor first
/// hands over the head the cursor holds as signatures only, or recognised
/// by its fingerprint with no signatures at all ([`KnownHead`]); a plan
/// that must send one of those messages after all, or (a recognised head)
/// must look at their signatures (the cursor moved since), cannot be
/// carried out, and the capture answers that it needs the whole transcript
/// (`CaptureOutcome::needs_whole`).
pub struct Transcript<'a> {
    /// One per captured message; the first `unsigned` are empty and never
    /// read (a recognised head).
    signatures: Vec<String>,
    unsigned: usize,
    fingerprint: HeadFingerprint,
    whole: Whole<'a>,
    /// The head's running digest, from the surface that read it.
    head: Option<SequenceHasher>,
}

/// The captured messages a transcript holds whole: those from `from` on,
/// borrowed from the caller or given up by it (their strings then move
/// into the payloads, [`prepare`]).
struct Whole<'a> {
    from: usize,
    messages: Vec<Option<Cow<'a, Message>>>,
}

impl<'a> Whole<'a> {
    fn holds(&self, index: usize) -> bool {
        index
            .checked_sub(self.from)
            .is_some_and(|k| matches!(self.messages.get(k), Some(Some(_))))
    }

    /// The message at `index`, taken out (each is prepared once).
    fn take(&mut self, index: usize) -> Option<Cow<'a, Message>> {
        self.messages.get_mut(index.checked_sub(self.from)?)?.take()
    }
}

impl<'a> Transcript<'a> {
    /// Every captured message whole.
    pub fn whole(captured: Vec<&'a Message>) -> Self {
        let captured = captured.into_iter().map(Cow::Borrowed).collect();
        Self::with_head(KnownHead::default(), captured)
    }

    /// A known head, then the captured messages after it.
    pub fn with_head(head: KnownHead, rest: Vec<Cow<'a, Message>>) -> Self {
        let from = head.len();
        let known = !head.is_empty();
        let (unsigned, signed, running, mut fingerprint) = head.into_parts();
        let mut signatures = Vec::with_capacity(from + rest.len());
        signatures.resize(unsigned, String::new());
        signatures.extend(signed);
        for m in &rest {
            let fields = m.signature_fields();
            signatures.push(signature_of(&fields));
            fingerprint.absorb(&fields);
        }
        Self {
            signatures,
            unsigned,
            fingerprint,
            whole: Whole {
                from,
                messages: rest.into_iter().map(Some).collect(),
            },
            head: known.then_some(running),
        }
    }

    /// Captured messages, head included.
    pub fn len(&self) -> usize {
        self.signatures.len()
    }

    pub fn is_empty(&self) -> bool {
        self.signatures.is_empty()
    }
}

/// The cursor's matched prefix for the transcript: the surface's running
/// digest of the head when the head is exactly the cursor's prefix (no
/// second hashing of it), else computed from the signatures; `Err` when
/// that would need signatures a recognised head does not have.
fn loaded_prefix(
    cursor: &TranscriptCursor,
    transcript: &Transcript<'_>,
    head: Option<SequenceHasher>,
) -> std::result::Result<Option<SequenceHasher>, Unsigned> {
    if let (Some(head), Some(count), Some(digest)) = (
        head,
        cursor.submitted_prefix_count,
        &cursor.submitted_prefix_digest,
    ) {
        if head.absorbed() as u64 == count && head.digest() == *digest {
            return Ok(Some(head));
        }
    }
    if transcript.unsigned > 0 {
        return Err(Unsigned);
    }
    Ok(cursor.matching_prefix(&transcript.signatures))
}

/// A decision needed the signatures of a recognised head.
struct Unsigned;

/// True when `a` and `b` match `signatures` the same way: the same
/// recorded prefix, and one that fits the transcript, so its digest alone
/// decides ([`TranscriptCursor::matching_prefix`] step 1).
fn same_prefix_decision(a: &TranscriptCursor, b: &TranscriptCursor, signatures: &[String]) -> bool {
    a.submitted_prefix_count == b.submitted_prefix_count
        && a.submitted_prefix_digest == b.submitted_prefix_digest
        && a.submitted_prefix_count
            .and_then(|c| usize::try_from(c).ok())
            .is_some_and(|c| c <= signatures.len())
}

/// Where one capture writes.
pub struct CaptureTarget {
    pub config: Arc<OpenVikingConfig>,
    pub peer: String,
    pub session_id: String,
    /// Applied to each payload after the cursor's signatures are taken.
    pub redactor: Arc<Redactor>,
    /// The durable outbox, when the operator turned it on.
    pub outbox: Option<Arc<Outbox>>,
}

/// What one capture did; `failure` is a write failure the write policy
/// decides about (fatal errors are returned as `Err` instead).
#[derive(Debug)]
pub struct CaptureOutcome {
    pub sent: usize,
    pub already_known: usize,
    pub failure: Option<MemoryError>,
    /// Nothing was sent because a message the surface gave as its signature
    /// only must be sent after all: capture the whole transcript instead.
    /// Never set for a [`Transcript::whole`].
    pub needs_whole: bool,
}

impl CaptureOutcome {
    fn failed(already_known: usize, failure: MemoryError) -> Self {
        Self {
            sent: 0,
            already_known,
            failure: Some(failure),
            needs_whole: false,
        }
    }

    fn needs_whole() -> Self {
        Self {
            sent: 0,
            already_known: 0,
            failure: None,
            needs_whole: true,
        }
    }
}

fn write_failure(message: &str, session_id: &str, cause: impl Display) -> MemoryError {
    MemoryError::Backend(format!("{message} (session={session_id}): {cause}"))
}

fn corruption(err: CursorError, session_id: &str) -> MemoryError {
    MemoryError::Corruption(match err {
        CursorError::Unreadable(_) => format!(
            "OpenViking capture cursor is unreadable; refusing unsafe replay (session={session_id})"
        ),
        CursorError::Invalid(why) => format!(
            "OpenViking capture cursor is invalid ({why}); refusing unsafe replay (session={session_id})"
        ),
    })
}

/// Reads the cursor on the capture's own thread: a cursor is one small file
/// (tens of KiB, in the page cache after the first capture), cheaper to read
/// than the two thread hand-offs of a blocking task. Saves, which fsync, do
/// go to the blocking pool.
fn load(path: &Path, session_id: &str) -> Result<TranscriptCursor> {
    load_cursor(path).map_err(|e| {
        tracing::error!(error = %e, session = session_id, "OpenViking capture cursor cannot be trusted");
        corruption(e, session_id)
    })
}

tokio::task_local! {
    /// Set while a capture is polled by its caller's own thread, which waits
    /// for it anyway and may block (the Python extension's sync capture:
    /// `block_on` on the calling thread). Saves then write there instead of
    /// crossing to the blocking pool and back. A task spawned from the
    /// capture (the record-and-confirm step) runs on a runtime worker and does
    /// not inherit it.
    static ON_CALLERS_THREAD: ();
}

/// Runs `capture` as polled by its caller's own thread, which may block:
/// only for a future given to `block_on` outside the runtime's workers.
pub async fn on_callers_thread<F: Future>(capture: F) -> F::Output {
    ON_CALLERS_THREAD.scope((), capture).await
}

/// Whether the capture being polled runs on its caller's own thread.
fn polled_by_its_caller() -> bool {
    ON_CALLERS_THREAD.try_with(|_| ()).is_ok()
}

/// Saves the cursor. A failed save is never softened by the write policy.
async fn save(
    path: PathBuf,
    cursor: TranscriptCursor,
    mode: SaveMode,
    session_id: &str,
) -> Result<()> {
    on_disk(session_id, move || save_cursor_with(&path, &cursor, mode)).await
}

/// Runs a cursor write on the caller's own thread when it polls the
/// capture, else on the blocking pool; a failure names the session.
async fn on_disk<T: Send + 'static>(
    session_id: &str,
    write: impl FnOnce() -> std::io::Result<T> + Send + 'static,
) -> Result<T> {
    let written = if polled_by_its_caller() {
        write()
    } else {
        tokio::task::spawn_blocking(write).await.map_err(|e| {
            MemoryError::Backend(format!("OpenViking cursor write task failed: {e}"))
        })?
    };
    written.map_err(|e| {
        MemoryError::Backend(format!(
            "OpenViking capture cursor could not be saved (session={session_id}): {e}"
        ))
    })
}

/// The session's cumulative message count; a session the server does not
/// know holds none.
pub(crate) async fn server_total(
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

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

/// The session's count once the interrupted write has settled: at least
/// [`SETTLE`] after its intent, and the same in two reads in a row.
pub(crate) async fn settled_total(
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
pub(crate) enum Unsettled {
    /// The server could not be asked; try again on the next capture.
    Unreachable(String),
    /// The server's count fits no batch boundary of the intent.
    Contradiction(String),
}

/// Moves `cursor` past the batches of its intent that the server holds
/// once the count has settled:
/// batches arrive whole and in order, so the count since `base_total` names
/// exactly one batch boundary. Everything delivered leaves the commit
/// pending (the commit step retries it only when the server still has
/// uncommitted tokens).
async fn reconcile(
    client: &OpenVikingClient,
    peer: &str,
    session_id: &str,
    cursor: &TranscriptCursor,
    intent: &InFlight,
    max_seen: usize,
) -> std::result::Result<TranscriptCursor, Unsettled> {
    let total = settled_total(client, peer, session_id, intent.written_ms).await?;
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
        session = session_id,
        batches = confirmed,
        of = intent.batches.len(),
        "OpenViking interrupted capture reconciled against the server's count"
    );
    Ok(advance_by_intent(
        cursor,
        intent,
        confirmed,
        Some(total),
        max_seen,
    ))
}

/// The cursor once the first `confirmed` batches of its intent count as
/// delivered (on the server, or taken over by the outbox): all of them
/// leave the commit pending.
fn advance_by_intent(
    cursor: &TranscriptCursor,
    intent: &InFlight,
    confirmed: usize,
    total: Option<u64>,
    max_seen: usize,
) -> TranscriptCursor {
    let (inputs, prefix) = match confirmed.checked_sub(1).map(|i| &intent.batches[i]) {
        None => (0, None),
        Some(mark) => (
            mark.inputs as usize,
            intent
                .start
                .zip(mark.prefix_digest.clone())
                .map(|(start, digest)| (start + mark.inputs, digest)),
        ),
    };
    let delivered_all = confirmed == intent.batches.len();
    let mut next = cursor.advanced_to(
        prefix,
        &intent.signatures[..inputs],
        max_seen,
        cursor.commit_pending || delivered_all,
    );
    next.server_total = total;
    next.in_flight = None;
    next
}

/// Reads the cursor of `target`'s session (the caller holds its lock).
pub fn load_session_cursor(target: &CaptureTarget) -> Result<TranscriptCursor> {
    let sid = target.session_id.as_str();
    load(&target.config.cursor_path(sid), sid)
}

/// Runs one capture of `transcript` while `guard` holds the session's lock
/// and `loaded` is the cursor read under it.
pub async fn capture_session(
    operation: Operation,
    guard: SessionGuard,
    target: CaptureTarget,
    loaded: TranscriptCursor,
    transcript: Transcript<'_>,
) -> Result<CaptureOutcome> {
    let sid = target.session_id.as_str();
    let max_seen = target.config.max_seen_message_ids;
    let path = target.config.cursor_path(sid);
    let head = transcript.head.clone();
    let Ok(matched) = loaded_prefix(&loaded, &transcript, head) else {
        return needs_whole(path, &loaded, loaded.clone(), sid).await;
    };
    let Transcript {
        signatures,
        unsigned,
        fingerprint,
        mut whole,
        ..
    } = transcript;
    // A contradiction needs a prefix digest that does not match.
    if matched.is_none() && loaded.contradicts(&signatures) {
        tracing::error!(
            session = sid,
            "OpenViking capture cursor contradicts itself"
        );
        return Err(MemoryError::Corruption(format!(
            "OpenViking capture cursor is invalid (its prefix digest contradicts its window); refusing unsafe replay (session={sid})"
        )));
    }
    let mut cursor = loaded.clone();
    let client = operation.client();

    // The session's queued captures go first: nothing new overtakes them.
    if let Some(outbox) = target.outbox.clone() {
        let owned = sid.to_owned();
        let queued = blocking(&outbox, move |o| o.session_entries(&owned)).await?;
        if !queued.is_empty() {
            if !deliver_session(client, &outbox, sid).await? {
                if unsigned > 0 {
                    return needs_whole(path, &loaded, loaded.clone(), sid).await;
                }
                return queue_behind(&target, &outbox, path, &loaded, signatures, &mut whole).await;
            }
            // The cursor's count predates the delivery.
            cursor.server_total = None;
        }
    }

    if let Some(intent) = &loaded.in_flight {
        match reconcile(client, &target.peer, sid, &loaded, intent, max_seen).await {
            Ok(next) => cursor = next,
            Err(Unsettled::Unreachable(cause)) => {
                return Ok(CaptureOutcome::failed(
                    0,
                    write_failure(RECONCILE_FAILED, sid, cause),
                ))
            }
            Err(Unsettled::Contradiction(why)) => {
                tracing::error!(session = sid, %why, "OpenViking interrupted capture cannot be reconciled");
                return Err(MemoryError::Corruption(format!(
                    "OpenViking interrupted capture cannot be reconciled ({why}); refusing unsafe replay (session={sid})"
                )));
            }
        }
    }

    if cursor.commit_pending {
        match recorder::flush(client, &target.peer, sid).await {
            Err(cause) => {
                if cursor != loaded {
                    save(path, cursor, SaveMode::Durable, sid).await?;
                }
                return Ok(CaptureOutcome::failed(
                    0,
                    write_failure(PENDING_COMMIT_FAILED, sid, cause),
                ));
            }
            Ok(committed) => {
                tracing::info!(
                    session = sid,
                    committed,
                    "OpenViking pending commit retried"
                );
                cursor = cursor.with_commit_pending(false);
            }
        }
    }

    let prefix = if same_prefix_decision(&cursor, &loaded, &signatures) {
        matched
    } else if unsigned > 0 {
        return needs_whole(path, &loaded, cursor, sid).await;
    } else {
        cursor.matching_prefix(&signatures)
    };
    let plan = CapturePlan::matched(&cursor, signatures, prefix).with_fingerprint(&fingerprint);
    let pending_len = plan.pending.len();
    let already_known = plan.signatures.len() - pending_len;
    let Some(prepared) = prepare(&plan, &mut whole, &target) else {
        return needs_whole(path, &loaded, cursor, sid).await;
    };
    if prepared.is_empty() {
        // Nothing to send (nothing new, or only messages that are never
        // recorded): write only if the cursor itself moved.
        let next = plan.completed(&cursor, max_seen);
        if next != loaded {
            save(path, next, SaveMode::Durable, sid).await?;
        }
        return Ok(CaptureOutcome {
            sent: 0,
            already_known,
            failure: None,
            needs_whole: false,
        });
    }

    let base_total = match cursor.server_total {
        Some(total) => total,
        None => match server_total(client, &target.peer, sid).await {
            Ok(Ok(total)) => total,
            Ok(Err(why)) => {
                return Ok(CaptureOutcome::failed(
                    already_known,
                    write_failure(COUNT_FAILED, sid, why),
                ))
            }
            // Unreachable before anything was sent: the outbox takes the
            // capture whole (its first attempt reads the count).
            Err(cause) => match &target.outbox {
                Some(outbox) => {
                    let payloads = prepared.values(0);
                    return queue_plan(&target, outbox, path, &loaded, &cursor, &plan, payloads)
                        .await;
                }
                None => {
                    return Ok(CaptureOutcome::failed(
                        already_known,
                        write_failure(COUNT_FAILED, sid, cause),
                    ))
                }
            },
        },
    };
    cursor.server_total = Some(base_total);
    // Saved optimistically: the cursor as it will be once everything
    // arrives, with the intent and the way back to `cursor`. Success then
    // only confirms it in place.
    let intent = plan.intent(base_total, &prepared);
    let mut outcome = plan.completed(&cursor, max_seen);
    outcome.server_total = Some(base_total + intent.payloads());
    let rollback = Rollback::between(&cursor, &outcome, intent.signatures.len());
    outcome.in_flight = Some(intent);
    let (confirmation, intent) = on_disk(sid, {
        let path = path.clone();
        move || {
            let confirmation = save_optimistic(&path, &outcome, &rollback)?;
            Ok((confirmation, outcome.in_flight))
        }
    })
    .await?;
    let intent = intent.unwrap_or_else(|| unreachable!("set just above"));

    let task = tokio::spawn(async move {
        // The lock and the operation both live until the cursor is saved:
        // no other capture of this session reads a stale cursor, and
        // shutdown waits for the save.
        let lock = guard;
        let sid = target.session_id.as_str();
        let recorded = recorder::record(
            operation.client(),
            &target.peer,
            sid,
            &prepared,
            pending_len,
        )
        .await;
        let settled = |mut next: TranscriptCursor, batches: usize| {
            let done = batches
                .checked_sub(1)
                .map_or(0, |i| intent.batches[i].payloads);
            next.server_total = Some(base_total + done);
            next.in_flight = intent.after(batches);
            next
        };
        match recorded {
            Ok(_) => {
                // Not confirmed (an I/O error): the intent stays, and the
                // next capture asks the server, which holds everything.
                if let Err(e) = confirmation.confirm() {
                    tracing::warn!(session = sid, error = %e, "OpenViking capture cursor could not be confirmed; the next capture reconciles it");
                }
                drop((lock, operation));
                Ok(CaptureOutcome {
                    sent: pending_len,
                    already_known,
                    failure: None,
                    needs_whole: false,
                })
            }
            // The batch may have arrived with its answer lost: the intent
            // stays, and the next capture asks the server.
            Err(RecordError::NothingConfirmed(cause)) => {
                let failure = write_failure(RECORDING_FAILED, sid, cause);
                match &target.outbox {
                    Some(outbox) => {
                        let queued = TakeOver {
                            outbox,
                            payloads: prepared.values(0),
                            base_total,
                            intent_ms: intent.written_ms,
                        };
                        let next = plan.completed(&cursor, max_seen);
                        queued
                            .run(&target, path, next, failure, pending_len, already_known)
                            .await
                    }
                    _ => Ok(CaptureOutcome::failed(already_known, failure)),
                }
            }
            Err(RecordError::Partial {
                input_messages_consumed,
                commit_pending,
                cause,
                ..
            }) => {
                let consumed = input_messages_consumed.min(pending_len);
                let batches = if commit_pending {
                    intent.batches.len()
                } else {
                    intent
                        .batches
                        .iter()
                        .position(|b| b.inputs as usize == consumed)
                        .map_or(0, |i| i + 1)
                };
                let failure = write_failure(PARTIALLY_RECORDED, sid, cause);
                if let (Some(outbox), false) = (&target.outbox, commit_pending) {
                    let done = batches
                        .checked_sub(1)
                        .map_or(0, |i| intent.batches[i].payloads as usize);
                    let queued = TakeOver {
                        outbox,
                        payloads: prepared.values(done),
                        base_total: base_total + done as u64,
                        intent_ms: intent.written_ms,
                    };
                    let next = plan.completed(&cursor, max_seen);
                    return queued
                        .run(&target, path, next, failure, pending_len, already_known)
                        .await;
                }
                let next = settled(
                    plan.partially(&cursor, consumed, commit_pending, max_seen),
                    batches,
                );
                save(path, next, SaveMode::CoveredByIntent, sid).await?;
                Ok(CaptureOutcome {
                    sent: consumed,
                    already_known,
                    failure: Some(failure),
                    needs_whole: false,
                })
            }
        }
    });
    task.await
        .map_err(|e| MemoryError::Backend(format!("OpenViking capture task failed: {e}")))?
}

/// The payloads of the pending messages, converted and redacted: what is
/// sent, and what the outbox queues. Each payload is written out as JSON
/// and dropped at once, while it is still in the cache. `None` when a
/// pending message is not held whole (its signature was all the surface
/// gave).
fn prepare(plan: &CapturePlan, whole: &mut Whole<'_>, target: &CaptureTarget) -> Option<Prepared> {
    if !plan.pending.iter().all(|&i| whole.holds(i)) {
        return None;
    }
    let peer = payload_peer(&target.peer);
    let mut prepared = Prepared::with_capacity(plan.pending.len());
    for (k, &i) in plan.pending.iter().enumerate() {
        if let Some(mut payload) = payload_of(whole.take(i)?, peer.as_ref()) {
            redact_payload(&mut payload, &target.redactor);
            prepared.push(&payload, k + 1);
        }
    }
    Some(prepared)
}

/// A plan that would send a message held only as its signature: nothing
/// is sent; the cursor keeps what this capture learnt (a reconciled
/// intent, a retried commit) and the caller captures the whole transcript.
async fn needs_whole(
    path: PathBuf,
    loaded: &TranscriptCursor,
    cursor: TranscriptCursor,
    sid: &str,
) -> Result<CaptureOutcome> {
    if cursor != *loaded {
        save(path, cursor, SaveMode::Durable, sid).await?;
    }
    Ok(CaptureOutcome::needs_whole())
}

/// A failed write handed to the outbox: queued (fsynced) first, then the
/// cursor moves past it. A crash in between leaves the cursor's intent,
/// which the entry names (`intent_ms`), so the next capture neither resends
/// nor loses it.
struct TakeOver<'a> {
    outbox: &'a Arc<Outbox>,
    payloads: Vec<Value>,
    base_total: u64,
    intent_ms: u64,
}

impl TakeOver<'_> {
    async fn run(
        self,
        target: &CaptureTarget,
        path: PathBuf,
        mut next: TranscriptCursor,
        failure: MemoryError,
        pending_len: usize,
        already_known: usize,
    ) -> Result<CaptureOutcome> {
        let sid = target.session_id.as_str();
        let (session, peer) = (sid.to_owned(), target.peer.clone());
        let (payloads, base, intent_ms) = (self.payloads, self.base_total, self.intent_ms);
        let count = payloads.len();
        let queued = blocking(self.outbox, move |o| {
            o.enqueue(&session, &peer, &payloads, Some(base), Some(intent_ms))
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
        save(path, next, SaveMode::Durable, sid).await?;
        Ok(CaptureOutcome {
            sent: pending_len,
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
async fn queue_behind(
    target: &CaptureTarget,
    outbox: &Arc<Outbox>,
    path: PathBuf,
    loaded: &TranscriptCursor,
    signatures: Vec<String>,
    whole: &mut Whole<'_>,
) -> Result<CaptureOutcome> {
    let sid = target.session_id.as_str();
    let max_seen = target.config.max_seen_message_ids;
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
        cursor = advance_by_intent(loaded, intent, intent.batches.len(), None, max_seen)
            .with_commit_pending(false);
    }
    let plan = CapturePlan::new(&cursor, signatures);
    let Some(prepared) = prepare(&plan, whole, target) else {
        return needs_whole(path, loaded, cursor, sid).await;
    };
    queue_plan(
        target,
        outbox,
        path,
        loaded,
        &cursor,
        &plan,
        prepared.values(0),
    )
    .await
}

/// Queues `payloads` (the plan's pending messages) without a request and
/// moves the cursor past them; a refusal leaves the cursor as it was.
async fn queue_plan(
    target: &CaptureTarget,
    outbox: &Arc<Outbox>,
    path: PathBuf,
    loaded: &TranscriptCursor,
    cursor: &TranscriptCursor,
    plan: &CapturePlan,
    payloads: Vec<Value>,
) -> Result<CaptureOutcome> {
    let sid = target.session_id.as_str();
    let max_seen = target.config.max_seen_message_ids;
    let pending_len = plan.pending.len();
    let already_known = plan.signatures.len() - pending_len;
    if !payloads.is_empty() {
        let (session, peer) = (sid.to_owned(), target.peer.clone());
        let queued = blocking(outbox, move |o| {
            o.enqueue(&session, &peer, &payloads, None, None)
        })
        .await;
        if let Err(refused) = queued {
            if cursor != loaded {
                save(path, cursor.clone(), SaveMode::Durable, sid).await?;
            }
            return Ok(CaptureOutcome::failed(already_known, refused));
        }
    }
    let mut next = plan.completed(cursor, max_seen);
    next.server_total = None;
    next.in_flight = None;
    if next != *loaded {
        save(path, next, SaveMode::Durable, sid).await?;
    }
    Ok(CaptureOutcome {
        sent: pending_len,
        already_known,
        failure: None,
        needs_whole: false,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use memgate_core::signature::sequence_digest;

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

    #[test]
    fn intent_and_outcome_digest_the_same_prefixes_as_the_cursor() {
        let names: Vec<String> = (0..260).map(|i| format!("m{i}")).collect();
        let all = sigs(&names.iter().map(String::as_str).collect::<Vec<_>>());
        let cursor = TranscriptCursor::default().advanced(Some(&all[..30]), &all[..30], 512, false);
        let plan = CapturePlan::new(&cursor, all.clone());
        assert_eq!(plan.start, Some(30));
        // Every pending message but one (index 40) is recorded.
        let payload = crate::payload::to_payload(&Message::human("x"), "p").unwrap();
        let mut prepared = Prepared::default();
        for k in (0..plan.pending.len()).filter(|&k| k != 10) {
            prepared.push(&payload, k + 1);
        }
        let intent = plan.intent(7, &prepared);
        let marks: Vec<(u64, u64, Option<String>)> = intent
            .batches
            .iter()
            .map(|b| (b.inputs, b.payloads, b.prefix_digest.clone()))
            .collect();
        let expected: Vec<(u64, u64, Option<String>)> = [(101, 100), (201, 200), (230, 229)]
            .into_iter()
            .map(|(inputs, payloads)| {
                let digest = sequence_digest(&all[..30 + inputs as usize]);
                (inputs, payloads, Some(digest))
            })
            .collect();
        assert_eq!(marks, expected);
        let done = plan.completed(&cursor, 512);
        assert_eq!(done.submitted_prefix_count, Some(260));
        assert_eq!(done.submitted_prefix_digest, Some(sequence_digest(&all)));
    }
}
