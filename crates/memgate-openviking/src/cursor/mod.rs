//! The hash-only transcript cursor.
//!
//! Hosts hand a backend the *whole* transcript after every turn (and the head
//! about to be compacted away before compaction). A backend that forwards
//! turns to a server must send each message once, so it remembers what it has
//! already submitted, per conversation, in a small JSON file that holds only
//! message signatures and counters — never message text:
//!
//! ```json
//! {
//!   "schema_version": 1,
//!   "submitted_signatures": ["…64 hex…", …],
//!   "commit_pending": false,
//!   "submitted_prefix_count": 12,
//!   "submitted_prefix_digest": "…64 hex…",
//!   "memgate_server_total": 12,
//!   "memgate_in_flight": null,
//!   "memgate_prefix_head": {"fingerprint": "…32 hex…", "sha256_state": "…64 hex…",
//!                           "sha256_bytes": 864, "sha256_block": "…hex…"}
//! }
//! ```
//!
//! (`memgate_confirmed` follows them while a write is in flight; see below.)
//!
//! - `submitted_signatures` is a sliding window of the last N confirmed
//!   signatures, oldest first (N = the backend's `max_seen_message_ids`);
//! - `submitted_prefix_count` / `submitted_prefix_digest` describe the
//!   transcript prefix known to be fully handled ([`sequence_digest`]);
//! - `commit_pending` says messages were written but their commit did not
//!   complete, so the next capture retries the commit first.
//!
//! The first five keys are DeerFlow's OpenViking cursor
//! (`deerflow-memory-contract` §5.8–5.9), so its files are read as they are.
//! The `memgate_` keys are memgate's additions; the first two are for crash
//! safety:
//!
//! - `memgate_server_total`: the server's cumulative message count for the
//!   session after the last confirmed write (unknown: absent or null);
//! - `memgate_in_flight`: the intent of a write that was started but whose
//!   outcome is not recorded yet ([`InFlight`]). It is saved durably before
//!   the first request, so a process killed at any moment leaves enough on
//!   disk to ask the server what actually arrived instead of sending again.
//!
//! The third is for cost ([`PrefixHead`]): the recorded prefix's fast
//! fingerprint and its running digest's state, so the next capture of a
//! grown transcript checks its head without signing it and extends the
//! prefix digest from there. A cursor without it (DeerFlow's own, or one
//! whose prefix just moved) takes the signing path once and gains it.
//!
//! Unlike the original, a save is durable before it returns: temp file,
//! fsync, rename, fsync of the directory. A cursor that is not exactly valid
//! fails closed ([`CursorError`]): replaying an unknown prefix would copy a
//! private conversation again.
//!
//! A write's intent is saved *optimistically* ([`save_optimistic`]): the
//! DeerFlow keys already hold the cursor as it will be once every batch and
//! the commit succeed (so DeerFlow's own manager reads the outcome), the
//! intent carries a [`Rollback`] to the state the write started from, and a
//! last key, `memgate_confirmed`, is a fixed-width slot of 32 spaces. When
//! the write succeeds the slot is overwritten in place with the rollback's
//! token ([`Confirmation::confirm`]): no second file, no fsync. A file whose
//! slot holds the token reads as the outcome; any other slot (not written
//! yet, or lost or torn in a power cut: spaces and hex digits mixed) reads
//! as the state before the write with its intent, which the next capture
//! reconciles against the server. Either reading is safe; only the token
//! skips the question.
//!
//! The module's parts: [`intent`]'s write intent, rollback and prefix head
//! (each with its own form in the file), [`format`]'s reading and writing of
//! the whole file body, [`file`]'s durable saves and the confirmation slot;
//! matching a transcript against the cursor and advancing it are here.

mod fields;
mod file;
mod format;
mod intent;
#[cfg(test)]
mod testing;

pub use file::{
    fsync_count, load_cursor, save_cursor, save_cursor_with, save_optimistic, temp_path_for,
    Confirmation, SaveMode,
};
pub use intent::{BatchMark, InFlight, PrefixHead, Rollback};

use memgate_core::signature::{sequence_digest, SequenceHasher};
use std::fmt;

/// The only schema version this code reads and writes.
pub const CURSOR_SCHEMA_VERSION: u64 = 1;

/// What a cursor file records about one conversation.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TranscriptCursor {
    /// False for "no cursor yet": a missing file.
    pub recorded: bool,
    /// The last confirmed signatures, oldest first.
    pub submitted_signatures: Vec<String>,
    /// Messages were written but their commit did not complete.
    pub commit_pending: bool,
    /// Length of the transcript prefix known to be fully handled.
    pub submitted_prefix_count: Option<u64>,
    /// [`sequence_digest`] of that prefix.
    pub submitted_prefix_digest: Option<String>,
    /// The server's cumulative message count after the last confirmed write.
    pub server_total: Option<u64>,
    /// A write whose outcome is not recorded yet.
    pub in_flight: Option<InFlight>,
    /// The recorded prefix's fingerprint and digest state; always the
    /// prefix's own (checked on load, dropped when the prefix moves).
    pub prefix_head: Option<PrefixHead>,
}

/// Why a cursor file cannot be trusted. Either way the caller must refuse to
/// capture rather than guess what was already sent.
#[derive(Debug)]
pub enum CursorError {
    /// The file exists but cannot be read from disk; the I/O error stays the
    /// source (it names no path).
    Io(std::io::Error),
    /// The file was read but is not JSON.
    Unreadable(String),
    /// The file is JSON but not exactly a cursor.
    Invalid(String),
}

impl fmt::Display for CursorError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CursorError::Io(e) => write!(f, "cursor is unreadable: {}", e.kind()),
            CursorError::Unreadable(why) => write!(f, "cursor is unreadable: {why}"),
            CursorError::Invalid(why) => write!(f, "cursor is invalid: {why}"),
        }
    }
}

impl std::error::Error for CursorError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            CursorError::Io(e) => Some(e),
            CursorError::Unreadable(_) | CursorError::Invalid(_) => None,
        }
    }
}

impl TranscriptCursor {
    /// How much of `signatures` (the current transcript) was already
    /// submitted, or `None` when that cannot be told from the prefix, which
    /// sends the caller to the set-difference fallback.
    ///
    /// 1. A recorded prefix that fits the transcript decides alone: its
    ///    length when the digest matches, else `None`.
    /// 2. Otherwise (the transcript shrank through compaction, or there is no
    ///    prefix) the window is searched as one contiguous run, right-most
    ///    offset first; a match ends at the returned count.
    /// 3. No cursor yet: 0. Anything else: `None`.
    pub fn matching_prefix_count<S: AsRef<str>>(&self, signatures: &[S]) -> Option<usize> {
        self.matching_prefix(signatures)
            .map(|prefix| prefix.absorbed())
    }

    /// [`matching_prefix_count`](Self::matching_prefix_count) as the running
    /// digest of the matched prefix (its length is
    /// [`absorbed`](SequenceHasher::absorbed)), to extend over what follows.
    pub fn matching_prefix<S: AsRef<str>>(&self, signatures: &[S]) -> Option<SequenceHasher> {
        let mut running = SequenceHasher::default();
        if let (Some(count), Some(digest)) =
            (self.submitted_prefix_count, &self.submitted_prefix_digest)
        {
            if let Ok(count) = usize::try_from(count) {
                if count <= signatures.len() {
                    running.absorb(&signatures[..count]);
                    return (running.digest() == *digest).then_some(running);
                }
            }
        }
        let count = self
            .window_match(signatures)
            .or(if self.recorded { None } else { Some(0) })?;
        running.absorb(&signatures[..count]);
        Some(running)
    }

    /// Where the window, as one contiguous run, ends in `signatures`
    /// (right-most occurrence), if anywhere.
    fn window_match<S: AsRef<str>>(&self, signatures: &[S]) -> Option<usize> {
        let window = &self.submitted_signatures;
        if window.is_empty() || window.len() > signatures.len() {
            return None;
        }
        let w = window.len();
        (0..=signatures.len() - w).rev().find_map(|start| {
            signatures[start..start + w]
                .iter()
                .zip(window)
                .all(|(a, b)| a.as_ref() == b.as_str())
                .then_some(start + w)
        })
    }

    /// True when the cursor contradicts itself on this transcript: its
    /// window sits exactly at the end of the recorded prefix, yet the prefix
    /// digest does not match. No edit produces that (an edit inside the
    /// window breaks the window too); a damaged digest does, and trusting it
    /// would send the fallback's whole difference again.
    pub fn contradicts<S: AsRef<str>>(&self, signatures: &[S]) -> bool {
        let (Some(count), Some(digest)) =
            (self.submitted_prefix_count, &self.submitted_prefix_digest)
        else {
            return false;
        };
        let Ok(count) = usize::try_from(count) else {
            return false;
        };
        count <= signatures.len()
            && self.window_match(&signatures[..count]) == Some(count)
            && sequence_digest(&signatures[..count]) != *digest
    }

    /// The cursor after a capture confirmed `newly_submitted`: the window
    /// grows by them and keeps its last `max_seen` entries; with
    /// `Some(prefix)` the prefix fields describe `prefix`, with `None` they are
    /// kept as they were (even when null).
    pub fn advanced<S: AsRef<str>>(
        &self,
        prefix: Option<&[S]>,
        newly_submitted: &[S],
        max_seen: usize,
        commit_pending: bool,
    ) -> Self {
        let prefix = prefix.map(|p| (p.len() as u64, sequence_digest(p)));
        self.advanced_to(prefix, newly_submitted, max_seen, commit_pending)
    }

    /// [`advanced`](Self::advanced) with the new prefix given as its count
    /// and digest. The server total and intent are kept; callers set them.
    /// A new prefix drops the prefix head (it described the old one); the
    /// caller that knows the new one sets it ([`with_prefix_head`](Self::with_prefix_head)).
    pub fn advanced_to<S: AsRef<str>>(
        &self,
        prefix: Option<(u64, String)>,
        newly_submitted: &[S],
        max_seen: usize,
        commit_pending: bool,
    ) -> Self {
        let total = self.submitted_signatures.len() + newly_submitted.len();
        let skip = total.saturating_sub(max_seen);
        let window: Vec<String> = self
            .submitted_signatures
            .iter()
            .map(String::as_str)
            .chain(newly_submitted.iter().map(AsRef::as_ref))
            .skip(skip)
            .map(str::to_owned)
            .collect();
        let (count, digest, prefix_head) = match prefix {
            Some((count, digest)) => (Some(count), Some(digest), None),
            None => (
                self.submitted_prefix_count,
                self.submitted_prefix_digest.clone(),
                self.prefix_head.clone(),
            ),
        };
        Self {
            recorded: true,
            submitted_signatures: window,
            commit_pending,
            submitted_prefix_count: count,
            submitted_prefix_digest: digest,
            server_total: self.server_total,
            in_flight: self.in_flight.clone(),
            prefix_head,
        }
    }

    /// The same cursor with the prefix head of its recorded prefix: the
    /// fingerprint of the prefix's messages and the running digest that
    /// reached `submitted_prefix_digest`. A head that does not describe
    /// this prefix is not kept (debug builds stop on it: a caller bug).
    pub fn with_prefix_head(mut self, fingerprint: String, running: &SequenceHasher) -> Self {
        let describes = self.submitted_prefix_count == Some(running.absorbed() as u64)
            && self.submitted_prefix_digest.as_deref() == Some(running.digest().as_str());
        debug_assert!(describes, "a prefix head for another prefix");
        self.prefix_head = describes.then(|| PrefixHead {
            fingerprint,
            state: running.state(),
        });
        self
    }

    /// The same cursor with `commit_pending` set as given.
    pub fn with_commit_pending(&self, commit_pending: bool) -> Self {
        Self {
            recorded: true,
            commit_pending,
            ..self.clone()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::testing::{headed, sigs, FINGERPRINT};
    use super::*;

    #[test]
    fn no_cursor_matches_nothing_yet() {
        let c = TranscriptCursor::default();
        assert_eq!(c.matching_prefix_count(&sigs("h", 3)), Some(0));
    }

    #[test]
    fn recorded_prefix_decides_alone() {
        let all = sigs("h", 5);
        let c = TranscriptCursor::default().advanced(Some(&all[..3]), &all[..3], 512, false);
        assert_eq!(c.matching_prefix_count(&all), Some(3));
        // An edited message inside the prefix: no match and no window search.
        let mut edited = all.clone();
        edited[1] = "x".repeat(64);
        assert_eq!(c.matching_prefix_count(&edited), None);
    }

    #[test]
    fn window_is_searched_right_most_first_after_compaction() {
        let all = sigs("h", 20);
        // A prefix longer than the transcript falls through to the window.
        let c = TranscriptCursor::default().advanced(Some(&all[..]), &all[..], 4, false);
        assert_eq!(c.submitted_signatures, all[16..].to_vec());
        let mut compacted = all[14..].to_vec();
        compacted.extend(sigs("new", 1));
        assert!(c.submitted_prefix_count.unwrap() as usize > compacted.len());
        assert_eq!(c.matching_prefix_count(&compacted), Some(6));
        // Repeated runs: the right-most occurrence wins.
        let w = vec!["a".to_owned(), "b".to_owned()];
        let c = TranscriptCursor {
            recorded: true,
            submitted_signatures: w,
            ..Default::default()
        };
        let t: Vec<String> = ["a", "b", "c", "a", "b", "d"]
            .iter()
            .map(|s| s.to_string())
            .collect();
        assert_eq!(c.matching_prefix_count(&t), Some(5));
        let none: Vec<String> = ["c", "d"].iter().map(|s| s.to_string()).collect();
        assert_eq!(c.matching_prefix_count(&none), None);
    }

    #[test]
    fn window_keeps_the_last_max_seen() {
        let all = sigs("h", 40);
        let c = TranscriptCursor::default().advanced(Some(&all[..]), &all[..], 16, false);
        assert_eq!(c.submitted_signatures, all[24..].to_vec());
        let more = sigs("m", 3);
        let c2 = c.advanced(None, &more, 16, true);
        assert_eq!(c2.submitted_signatures.len(), 16);
        assert_eq!(c2.submitted_signatures[13..], more[..]);
        assert_eq!(c2.submitted_prefix_count, Some(40));
        assert_eq!(c2.submitted_prefix_digest, c.submitted_prefix_digest);
        assert!(c2.commit_pending);
    }

    #[test]
    fn a_prefix_head_round_trips_and_is_dropped_when_the_prefix_moves() {
        let all = sigs("h", 5);
        let c = headed(&all[..3]);
        let head = c.prefix_head.clone().expect("set");
        assert_eq!(head.fingerprint, FINGERPRINT);
        assert_eq!(Some(head.running().digest()), c.submitted_prefix_digest);
        assert_eq!(head.running().absorbed(), 3);
        assert_eq!(
            TranscriptCursor::from_json(c.to_json().as_bytes()).unwrap(),
            c
        );
        // The window grows under the same prefix (a commit pending): kept.
        let same_prefix = c.advanced(None, &all[3..4], 512, true);
        assert_eq!(same_prefix.prefix_head, c.prefix_head);
        // The prefix moves: the head described the old one, so it goes.
        assert!(c
            .advanced(Some(&all[..4]), &all[3..4], 512, false)
            .prefix_head
            .is_none());
        assert!(c
            .advanced_to(
                Some((3, c.submitted_prefix_digest.clone().unwrap())),
                &all[..0],
                512,
                false
            )
            .prefix_head
            .is_none());
    }

    #[test]
    fn a_damaged_digest_under_an_intact_window_is_a_contradiction() {
        let all = sigs("h", 5);
        let good = TranscriptCursor::default().advanced(Some(&all[..3]), &all[..3], 512, false);
        assert!(!good.contradicts(&all));
        let damaged = TranscriptCursor {
            submitted_prefix_digest: Some(sigs("other", 1).remove(0)),
            ..good.clone()
        };
        assert!(damaged.contradicts(&all));
        // A real edit inside the window breaks the window too: no contradiction.
        let mut edited = all.clone();
        edited[1] = sigs("edit", 1).remove(0);
        assert!(!good.contradicts(&edited));
    }
}
