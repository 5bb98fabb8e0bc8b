//! Capture: each transcript message goes to its session once
//! (`deerflow-memory-contract` §5.6, §5.10), also when the process dies
//! mid-write.
//!
//! Under the session's lock:
//! 1. read the hash-only cursor (not exactly valid: refuse, whatever the
//!    policy, with no request sent);
//! 2. if it holds the intent of an interrupted write, ask the server how
//!    many messages the session holds and move the cursor by exactly the
//!    batches that arrived, before anything is sent;
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
//! thread ([`memgate_core::intake::on_callers_thread`]).
//!
//! Here: what is new ([`CapturePlan`]), the transcript as a surface hands
//! it over ([`Transcript`]) and what a capture answers; the phases of one
//! capture are [`capture_session`]'s module, the outbox's part its own
//! (`queue`), and reading and saving the cursor file `disk`'s.
//!
//! Reconciliation relies on OpenViking 0.5's `total_message_count`, which
//! counts every message the session ever received, committed or not (pinned
//! in `tests/real_openviking.rs`).

mod disk;
mod queue;
mod session;

pub use session::capture_session;

use crate::config::OpenVikingConfig;
use crate::cursor::{BatchMark, InFlight, SaveMode, TranscriptCursor};
use crate::outbox::{now_ms, Outbox};
use crate::payload::{payload_of, payload_peer, redact_payload};
use crate::recorder::Prepared;
use disk::{load, save};
use memgate_core::signature::{message_signature, signature_of, HeadFingerprint, SequenceHasher};
use memgate_core::{KnownHead, MemoryError, Message, Redactor, Result};
use std::borrow::Cow;
use std::collections::HashSet;
use std::fmt::Display;
use std::path::PathBuf;
use std::sync::{Arc, OnceLock};

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

    /// Captured messages that are not pending: sent before (or, in the
    /// set-difference fallback, in the window).
    fn already_known(&self) -> usize {
        self.signatures.len() - self.pending.len()
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

/// What every phase of one capture reads: where it writes, and the cursor
/// read under the session's lock (the base every decision starts from).
struct Session {
    target: CaptureTarget,
    path: PathBuf,
    loaded: TranscriptCursor,
}

impl Session {
    fn new(target: CaptureTarget, loaded: TranscriptCursor) -> Self {
        let path = target.config.cursor_path(&target.session_id);
        Self {
            target,
            path,
            loaded,
        }
    }

    fn sid(&self) -> &str {
        &self.target.session_id
    }

    fn max_seen(&self) -> usize {
        self.target.config.max_seen_message_ids
    }

    /// Saves `cursor` durably when it differs from the one read.
    async fn save_if_moved(&self, cursor: TranscriptCursor) -> Result<()> {
        if cursor != self.loaded {
            save(self.path.clone(), cursor, SaveMode::Durable, self.sid()).await?;
        }
        Ok(())
    }

    /// A plan that would send a message held only as its signature: nothing
    /// is sent; the cursor keeps what this capture learnt (a reconciled
    /// intent, a retried commit) and the caller captures the whole
    /// transcript.
    async fn needs_whole(&self, cursor: TranscriptCursor) -> Result<CaptureOutcome> {
        self.save_if_moved(cursor).await?;
        Ok(CaptureOutcome::needs_whole())
    }
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
