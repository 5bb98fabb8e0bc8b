//! Cursors and signatures the cursor's tests share.

use super::{BatchMark, InFlight, Rollback, TranscriptCursor};
use memgate_core::signature::SequenceHasher;

pub(super) fn sigs(prefix: &str, n: usize) -> Vec<String> {
    (0..n)
        .map(|i| memgate_core::signature::sha256_hex(format!("{prefix}{i}").as_bytes()))
        .collect()
}

pub(super) const FINGERPRINT: &str = "0123456789abcdef0123456789abcdef";

/// A cursor whose prefix is `prefix`, with a prefix head.
pub(super) fn headed(prefix: &[String]) -> TranscriptCursor {
    let mut running = SequenceHasher::default();
    running.absorb(prefix);
    TranscriptCursor::default()
        .advanced(Some(prefix), prefix, 512, false)
        .with_prefix_head(FINGERPRINT.into(), &running)
}

/// A write from `base` (its window capped at `max_seen`) of `added`
/// signatures in one batch: the outcome with its intent, and the
/// rollback.
pub(super) fn optimistic(
    base: &TranscriptCursor,
    transcript: &[String],
    max_seen: usize,
) -> (TranscriptCursor, Rollback) {
    let start = base.submitted_prefix_count.unwrap_or(0) as usize;
    let added = &transcript[start..];
    let mut running = SequenceHasher::default();
    running.absorb(transcript);
    let mut outcome = base
        .advanced(Some(transcript), added, max_seen, false)
        .with_prefix_head("f".repeat(32), &running);
    let base_total = base.server_total.unwrap_or(0);
    outcome.server_total = Some(base_total + added.len() as u64);
    let rollback = Rollback::between(base, &outcome, added.len());
    outcome.in_flight = Some(InFlight {
        base_total,
        written_ms: 1_700_000_000_000,
        start: Some(start as u64),
        signatures: added.to_vec(),
        batches: vec![BatchMark {
            inputs: added.len() as u64,
            payloads: added.len() as u64,
            prefix_digest: Some(running.digest()),
        }],
    });
    (outcome, rollback)
}
