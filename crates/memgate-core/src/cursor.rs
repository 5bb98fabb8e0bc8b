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

use crate::signature::{sequence_digest, PrefixState, SequenceHasher};
use serde_json::value::RawValue;
use serde_json::{Map, Value};
use std::collections::hash_map::RandomState;
use std::collections::BTreeMap;
use std::fmt;
use std::fs;
use std::hash::{BuildHasher, Hasher};
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

/// The only schema version this code reads and writes.
pub const CURSOR_SCHEMA_VERSION: u64 = 1;

const KEYS: [&str; 9] = [
    "schema_version",
    "submitted_signatures",
    "commit_pending",
    "submitted_prefix_count",
    "submitted_prefix_digest",
    "memgate_server_total",
    "memgate_in_flight",
    "memgate_prefix_head",
    "memgate_confirmed",
];

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

/// What a capture needs to check a transcript's head against the recorded
/// prefix without signing it: the [`HeadFingerprint`] of the prefix's
/// messages and the [`SequenceHasher`] state its digest came from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PrefixHead {
    pub fingerprint: String,
    pub state: PrefixState,
}

impl PrefixHead {
    /// The recorded prefix's running digest, to extend over what follows.
    pub fn running(&self) -> SequenceHasher {
        SequenceHasher::resume(&self.state).expect("checked when the cursor was read or made")
    }

    fn from_value(
        value: &Value,
        prefix_count: Option<u64>,
        digest: Option<&str>,
    ) -> Result<Self, CursorError> {
        const F: &str = "memgate_prefix_head";
        let Value::Object(obj) = value else {
            return Err(invalid(F, "must be an object or null"));
        };
        if let Some(k) = obj.keys().find(|k| {
            ![
                "fingerprint",
                "sha256_state",
                "sha256_bytes",
                "sha256_block",
            ]
            .contains(&k.as_str())
        }) {
            return Err(invalid(&format!("{F}.{k}"), "is not a known field"));
        }
        let text = |key: &str| match obj.get(key) {
            Some(Value::String(s)) => Ok(s.clone()),
            _ => Err(invalid(&format!("{F}.{key}"), "must be a string")),
        };
        let fingerprint = text("fingerprint")?;
        if !is_lower_hex(&fingerprint, 32) {
            return Err(invalid(
                &format!("{F}.fingerprint"),
                "must be 32 lowercase hex digits",
            ));
        }
        let (Some(absorbed), Some(digest)) = (prefix_count, digest) else {
            return Err(invalid(
                F,
                "needs submitted_prefix_count and submitted_prefix_digest",
            ));
        };
        let state = PrefixState {
            absorbed,
            bytes: count(obj.get("sha256_bytes"), &format!("{F}.sha256_bytes"))?
                .ok_or_else(|| invalid(&format!("{F}.sha256_bytes"), "is required"))?,
            state: text("sha256_state")?,
            block: text("sha256_block")?,
        };
        match SequenceHasher::resume(&state) {
            Some(running) if running.digest() == digest => Ok(Self { fingerprint, state }),
            _ => Err(invalid(F, "does not lead to submitted_prefix_digest")),
        }
    }

    fn push_json(&self, out: &mut String) {
        out.push_str("{\"fingerprint\": ");
        push_json_string(out, &self.fingerprint);
        out.push_str(", \"sha256_state\": ");
        push_json_string(out, &self.state.state);
        out.push_str(", \"sha256_bytes\": ");
        out.push_str(&self.state.bytes.to_string());
        out.push_str(", \"sha256_block\": ");
        push_json_string(out, &self.state.block);
        out.push('}');
    }
}

/// The durable intent of one write: which messages, in which batches, and
/// the server's cumulative count before the first batch. Reconciliation
/// compares that count with the server's to tell how many batches arrived.
///
/// In the file its signatures are one string of 64 hex digits each (read
/// as one string, not one per signature; an array, as written before, is
/// read too), and an optimistic intent leaves out the ones the window
/// already ends with (`window_tail`: how many).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct InFlight {
    /// The server's cumulative message count before the first batch.
    pub base_total: u64,
    /// When the intent was saved (Unix milliseconds): a request the dead
    /// process sent may still be in the server's hands for a moment, so
    /// reconciliation waits until the write has had time to settle.
    pub written_ms: u64,
    /// The matched prefix length the write continues (append-only), or
    /// `None` in the set-difference fallback.
    pub start: Option<u64>,
    /// Signatures of the input messages the write covers, in order.
    pub signatures: Vec<String>,
    /// One mark per batch, in sending order.
    pub batches: Vec<BatchMark>,
}

/// What is confirmed once one batch (and every batch before it) arrived.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BatchMark {
    /// Input messages covered, counted from the start of the write.
    pub inputs: u64,
    /// Messages sent to the server, counted from the start of the write.
    pub payloads: u64,
    /// Digest of the transcript prefix handled after this batch, when the
    /// write is append-only.
    pub prefix_digest: Option<String>,
}

/// How an optimistically saved cursor ([`save_optimistic`]) goes back to the
/// state its write started from, and the token that confirms the write.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Rollback {
    /// 32 lowercase hex digits; `memgate_confirmed` holds them once the
    /// write succeeded.
    pub token: String,
    /// Length of the window before the write.
    pub window_len: u64,
    /// The entries the write pushed out of the window, oldest first: the
    /// window before it is these, then the head of the window after it.
    pub evicted: Vec<String>,
    /// The prefix before the write, and its head.
    pub prefix_count: Option<u64>,
    pub prefix_digest: Option<String>,
    pub prefix_head: Option<PrefixHead>,
    pub commit_pending: bool,
}

impl Rollback {
    /// The rollback from `outcome` to `base`, whose write added `added`
    /// signatures to the window (as [`TranscriptCursor::advanced_to`] does),
    /// with a fresh token.
    pub fn between(base: &TranscriptCursor, outcome: &TranscriptCursor, added: usize) -> Self {
        let before = base.submitted_signatures.len();
        let pushed_out = (before + added)
            .saturating_sub(outcome.submitted_signatures.len())
            .min(before);
        // 128 random bits: two values of one randomly keyed hasher (its
        // inputs are only there to make two different values).
        let random = RandomState::new();
        let token = format!("{:016x}{:016x}", random.hash_one(0u8), random.hash_one(1u8));
        Self {
            token,
            window_len: before as u64,
            evicted: base.submitted_signatures[..pushed_out].to_vec(),
            prefix_count: base.submitted_prefix_count,
            prefix_digest: base.submitted_prefix_digest.clone(),
            prefix_head: base.prefix_head.clone(),
            commit_pending: base.commit_pending,
        }
    }

    fn from_value(value: &Value) -> Result<Self, CursorError> {
        const F: &str = "memgate_in_flight.rollback";
        let Value::Object(obj) = value else {
            return Err(invalid(F, "must be an object"));
        };
        const FIELDS: [&str; 7] = [
            "token",
            "window_len",
            "evicted",
            "prefix_count",
            "prefix_digest",
            "prefix_head",
            "commit_pending",
        ];
        if let Some(k) = obj.keys().find(|k| !FIELDS.contains(&k.as_str())) {
            return Err(invalid(&format!("{F}.{k}"), "is not a known field"));
        }
        if let Some(k) = FIELDS.iter().find(|k| !obj.contains_key(**k)) {
            return Err(invalid(&format!("{F}.{k}"), "is required"));
        }
        let token = match obj.get("token") {
            Some(Value::String(t)) if is_lower_hex(t, 32) => t.clone(),
            _ => {
                return Err(invalid(
                    &format!("{F}.token"),
                    "must be 32 lowercase hex digits",
                ))
            }
        };
        let window_len = count(obj.get("window_len"), &format!("{F}.window_len"))?
            .ok_or_else(|| invalid(&format!("{F}.window_len"), "must be a non-negative integer"))?;
        let evicted = digest_list(&obj["evicted"], &format!("{F}.evicted"))?;
        let prefix_count = count(obj.get("prefix_count"), &format!("{F}.prefix_count"))?;
        let prefix_digest = digest(obj.get("prefix_digest"), &format!("{F}.prefix_digest"))?;
        if prefix_count.is_some() != prefix_digest.is_some() {
            return Err(invalid(
                &format!("{F}.prefix_count"),
                "and prefix_digest must both be set or both be null",
            ));
        }
        let prefix_head = match &obj["prefix_head"] {
            Value::Null => None,
            v => Some(
                PrefixHead::from_value(v, prefix_count, prefix_digest.as_deref()).map_err(
                    |_| {
                        invalid(
                            &format!("{F}.prefix_head"),
                            "must be null or the head of prefix_count and prefix_digest",
                        )
                    },
                )?,
            ),
        };
        let Some(Value::Bool(commit_pending)) = obj.get("commit_pending") else {
            return Err(invalid(
                &format!("{F}.commit_pending"),
                "must be true or false",
            ));
        };
        if evicted.len() as u64 > window_len {
            return Err(invalid(
                &format!("{F}.evicted"),
                "must not be longer than window_len",
            ));
        }
        Ok(Self {
            token,
            window_len,
            evicted,
            prefix_count,
            prefix_digest,
            prefix_head,
            commit_pending: *commit_pending,
        })
    }

    fn push_json(&self, out: &mut String) {
        out.push_str("{\"token\": ");
        push_json_string(out, &self.token);
        out.push_str(", \"window_len\": ");
        out.push_str(&self.window_len.to_string());
        out.push_str(", \"evicted\": [");
        for (i, sig) in self.evicted.iter().enumerate() {
            if i > 0 {
                out.push_str(", ");
            }
            push_json_string(out, sig);
        }
        out.push_str("], \"prefix_count\": ");
        push_count(out, self.prefix_count);
        out.push_str(", \"prefix_digest\": ");
        push_digest(out, self.prefix_digest.as_deref());
        out.push_str(", \"prefix_head\": ");
        match &self.prefix_head {
            Some(head) => head.push_json(out),
            None => out.push_str("null"),
        }
        out.push_str(", \"commit_pending\": ");
        out.push_str(if self.commit_pending { "true" } else { "false" });
        out.push('}');
    }
}

/// The `memgate_confirmed` slot before its write is confirmed.
const UNCONFIRMED: &str = "                                ";

/// Why a cursor file cannot be trusted. Either way the caller must refuse to
/// capture rather than guess what was already sent.
#[derive(Debug)]
pub enum CursorError {
    /// The file exists but cannot be read or is not JSON.
    Unreadable(String),
    /// The file is JSON but not exactly a cursor.
    Invalid(String),
}

impl fmt::Display for CursorError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CursorError::Unreadable(why) => write!(f, "cursor is unreadable: {why}"),
            CursorError::Invalid(why) => write!(f, "cursor is invalid: {why}"),
        }
    }
}

impl std::error::Error for CursorError {}

fn invalid(field: &str, rule: &str) -> CursorError {
    CursorError::Invalid(format!("{field} {rule}"))
}

/// `digits` lowercase hex digits.
fn is_lower_hex(s: &str, digits: usize) -> bool {
    s.len() == digits && s.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
}

/// A signature or digest: 64 lowercase hex digits.
fn is_digest(s: &str) -> bool {
    is_lower_hex(s, 64)
}

fn digest_list(value: &Value, field: &str) -> Result<Vec<String>, CursorError> {
    let Value::Array(items) = value else {
        return Err(invalid(field, "must be an array"));
    };
    items
        .iter()
        .map(|v| match v.as_str() {
            Some(s) if is_digest(s) => Ok(s.to_owned()),
            _ => Err(invalid(
                field,
                "must hold only 64-hex-digit signature strings",
            )),
        })
        .collect()
}

/// An intent's signatures: one string of 64 hex digits each (as written),
/// or an array of them (as written before); how many, and, when `keep`,
/// the signatures.
fn signature_run(value: &Value, keep: bool) -> Result<(usize, Vec<String>), CursorError> {
    const F: &str = "memgate_in_flight.signatures";
    match value {
        Value::String(run) if run.len() % 64 == 0 && is_lower_hex(run, run.len()) => {
            let signatures = if keep {
                // ASCII, checked above: every 64-byte step is a char boundary.
                (0..run.len() / 64)
                    .map(|i| run[i * 64..(i + 1) * 64].to_owned())
                    .collect()
            } else {
                Vec::new()
            };
            Ok((run.len() / 64, signatures))
        }
        Value::String(_) => Err(invalid(F, "must be 64 lowercase hex digits per signature")),
        other => {
            let signatures = digest_list(other, F)?;
            Ok((signatures.len(), signatures))
        }
    }
}

fn count(value: Option<&Value>, field: &str) -> Result<Option<u64>, CursorError> {
    match value {
        None | Some(Value::Null) => Ok(None),
        Some(v) => v
            .as_u64()
            .map(Some)
            .ok_or_else(|| invalid(field, "must be a non-negative integer or null")),
    }
}

fn digest(value: Option<&Value>, field: &str) -> Result<Option<String>, CursorError> {
    match value {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) if is_digest(s) => Ok(Some(s.clone())),
        Some(_) => Err(invalid(field, "must be a 64-hex-digit digest or null")),
    }
}

impl InFlight {
    /// The intent, and its rollback when the cursor around it was saved
    /// optimistically.
    /// With `keep_signatures` false (an intent that is confirmed and only
    /// checked) its signatures are checked but not kept. `window`: the
    /// file's window, whose last `window_tail` entries an optimistic intent's
    /// signatures end with (written once, in the window).
    fn from_value(
        value: &Value,
        keep_signatures: bool,
        window: &[String],
    ) -> Result<(Self, Option<Rollback>), CursorError> {
        const F: &str = "memgate_in_flight";
        let Value::Object(obj) = value else {
            return Err(invalid(F, "must be an object or null"));
        };
        if let Some(k) = obj.keys().find(|k| {
            ![
                "base_total",
                "written_ms",
                "start",
                "signatures",
                "batches",
                "rollback",
                "window_tail",
            ]
            .contains(&k.as_str())
        }) {
            return Err(invalid(&format!("{F}.{k}"), "is not a known field"));
        }
        let base_total = count(obj.get("base_total"), "memgate_in_flight.base_total")?
            .ok_or_else(|| invalid("memgate_in_flight.base_total", "is required"))?;
        let written_ms = count(obj.get("written_ms"), "memgate_in_flight.written_ms")?
            .ok_or_else(|| invalid("memgate_in_flight.written_ms", "is required"))?;
        let start = count(obj.get("start"), "memgate_in_flight.start")?;
        let (listed, mut signatures) = signature_run(
            obj.get("signatures").unwrap_or(&Value::Null),
            keep_signatures,
        )?;
        let tail = count(obj.get("window_tail"), "memgate_in_flight.window_tail")?.unwrap_or(0);
        let tail = usize::try_from(tail).unwrap_or(usize::MAX);
        if tail > 0 && (!obj.contains_key("rollback") || tail > window.len()) {
            return Err(invalid(
                "memgate_in_flight.window_tail",
                "needs a rollback and must not exceed the window",
            ));
        }
        if keep_signatures {
            signatures.extend_from_slice(&window[window.len() - tail..]);
        }
        let covered = listed + tail;
        let Some(Value::Array(marks)) = obj.get("batches") else {
            return Err(invalid("memgate_in_flight.batches", "must be an array"));
        };
        let mut batches = Vec::with_capacity(marks.len());
        let (mut inputs, mut payloads) = (0, 0);
        for mark in marks {
            const B: &str = "memgate_in_flight.batches[]";
            let Value::Object(m) = mark else {
                return Err(invalid(B, "must hold objects"));
            };
            let next = BatchMark {
                inputs: count(m.get("inputs"), B)?.ok_or_else(|| invalid(B, "needs inputs"))?,
                payloads: count(m.get("payloads"), B)?
                    .ok_or_else(|| invalid(B, "needs payloads"))?,
                prefix_digest: digest(m.get("prefix_digest"), B)?,
            };
            if m.len() != 3
                || next.inputs <= inputs
                || next.payloads <= payloads
                || next.inputs > covered as u64
                || next.prefix_digest.is_some() != start.is_some()
            {
                return Err(invalid(B, "must grow strictly within the signatures"));
            }
            (inputs, payloads) = (next.inputs, next.payloads);
            batches.push(next);
        }
        if batches.is_empty() {
            return Err(invalid("memgate_in_flight.batches", "must not be empty"));
        }
        let rollback = match obj.get("rollback") {
            None => None,
            Some(v) => Some(Rollback::from_value(v)?),
        };
        let intent = Self {
            base_total,
            written_ms,
            start,
            signatures,
            batches,
        };
        Ok((intent, rollback))
    }

    /// `window`: with a rollback, the window written beside the intent; the
    /// signatures it ends with are not written twice.
    fn push_json(&self, out: &mut String, rollback: Option<&Rollback>, window: &[String]) {
        // The window after a write ends with the write's signatures (as many
        // as it holds).
        let most = self.signatures.len().min(window.len());
        let tail = match rollback {
            Some(_)
                if self.signatures[self.signatures.len() - most..]
                    == window[window.len() - most..] =>
            {
                most
            }
            _ => 0,
        };
        out.push_str("{\"base_total\": ");
        out.push_str(&self.base_total.to_string());
        out.push_str(", \"written_ms\": ");
        out.push_str(&self.written_ms.to_string());
        out.push_str(", \"start\": ");
        push_count(out, self.start);
        // One string of 64 hex digits per signature: read as one string.
        out.push_str(", \"signatures\": \"");
        for sig in &self.signatures[..self.signatures.len() - tail] {
            out.push_str(sig);
        }
        out.push('"');
        if tail > 0 {
            out.push_str(", \"window_tail\": ");
            out.push_str(&tail.to_string());
        }
        out.push_str(", \"batches\": [");
        for (i, b) in self.batches.iter().enumerate() {
            if i > 0 {
                out.push_str(", ");
            }
            out.push_str(&format!(
                "{{\"inputs\": {}, \"payloads\": {}, \"prefix_digest\": ",
                b.inputs, b.payloads
            ));
            push_digest(out, b.prefix_digest.as_deref());
            out.push('}');
        }
        out.push(']');
        if let Some(rollback) = rollback {
            out.push_str(", \"rollback\": ");
            rollback.push_json(out);
        }
        out.push('}');
    }

    /// Messages the whole write sends.
    pub fn payloads(&self) -> u64 {
        self.batches.last().map_or(0, |b| b.payloads)
    }

    /// The intent left once the first `confirmed` batches are on the server.
    pub fn after(&self, confirmed: usize) -> Option<Self> {
        let done = confirmed.checked_sub(1).map(|i| &self.batches[i]);
        let (inputs, payloads) = done.map_or((0, 0), |b| (b.inputs, b.payloads));
        let rest: Vec<BatchMark> = self.batches[confirmed..]
            .iter()
            .map(|b| BatchMark {
                inputs: b.inputs - inputs,
                payloads: b.payloads - payloads,
                prefix_digest: b.prefix_digest.clone(),
            })
            .collect();
        (!rest.is_empty()).then(|| Self {
            base_total: self.base_total + payloads,
            written_ms: self.written_ms,
            start: self.start.map(|s| s + inputs),
            signatures: self.signatures[inputs as usize..].to_vec(),
            batches: rest,
        })
    }
}

impl TranscriptCursor {
    /// Parses a cursor file's bytes. Anything that is not exactly a cursor
    /// is refused: unknown keys, a wrong schema version, window entries that
    /// are not signatures, counts that are not non-negative integers, a
    /// digest without its count (or the reverse), `{}`.
    pub fn from_json(bytes: &[u8]) -> Result<Self, CursorError> {
        match Self::from_json_borrowing(bytes) {
            Some(cursor) => Ok(cursor),
            None => Self::from_json_value(bytes),
        }
    }

    /// The full reading, through one `Value`: the answer (and the error)
    /// for everything the borrowing reading passes on.
    fn from_json_value(bytes: &[u8]) -> Result<Self, CursorError> {
        let value: Value = serde_json::from_slice(bytes)
            .map_err(|e| CursorError::Unreadable(format!("not JSON ({e})")))?;
        let Value::Object(obj) = value else {
            return Err(CursorError::Invalid("not a JSON object".into()));
        };
        Self::from_object(&obj, None)
    }

    /// [`from_json`](Self::from_json) of a valid cursor without a `Value`
    /// per window signature (a capture reads its cursor every time, and the
    /// window's hundreds of strings were most of it): the top-level fields
    /// are taken as raw text, the window as borrowed strings, every other
    /// field checked by [`from_object`](Self::from_object) as always.
    /// `None` for anything that is not a valid cursor (or holds escapes),
    /// which the full reading then answers, with its error.
    fn from_json_borrowing(bytes: &[u8]) -> Option<Self> {
        let fields: BTreeMap<&str, &RawValue> = serde_json::from_slice(bytes).ok()?;
        let window: Vec<&str> =
            serde_json::from_str(fields.get("submitted_signatures")?.get()).ok()?;
        if !window.iter().all(|s| is_digest(s)) {
            return None;
        }
        let mut obj = Map::new();
        for (key, raw) in fields {
            let value = match key {
                // Checked above; `from_object` is given it.
                "submitted_signatures" => Value::Array(Vec::new()),
                _ => serde_json::from_str(raw.get()).ok()?,
            };
            obj.insert(key.to_owned(), value);
        }
        let window = window.into_iter().map(str::to_owned).collect();
        Self::from_object(&obj, Some(window)).ok()
    }

    /// The cursor `obj` describes; `window`: its `submitted_signatures`,
    /// already read and checked (else read from `obj`). An optimistic file
    /// reads as its outcome when confirmed, else as the state before its
    /// write, with the intent.
    fn from_object(
        obj: &Map<String, Value>,
        window: Option<Vec<String>>,
    ) -> Result<Self, CursorError> {
        if let Some(k) = obj.keys().find(|k| !KEYS.contains(&k.as_str())) {
            return Err(invalid(k, "is not a cursor field"));
        }
        match obj.get("schema_version") {
            Some(Value::Number(n)) if n.as_u64() == Some(CURSOR_SCHEMA_VERSION) => {}
            None => return Err(invalid("schema_version", "is required")),
            Some(other) => {
                return Err(CursorError::Invalid(format!(
                    "schema_version {other} is not {CURSOR_SCHEMA_VERSION}"
                )))
            }
        }
        let submitted_signatures = match (window, obj.get("submitted_signatures")) {
            (_, None) => return Err(invalid("submitted_signatures", "is required")),
            (Some(window), Some(_)) => window,
            (None, Some(v)) => digest_list(v, "submitted_signatures")?,
        };
        let commit_pending = match obj.get("commit_pending") {
            Some(Value::Bool(b)) => *b,
            _ => return Err(invalid("commit_pending", "must be true or false")),
        };
        for key in ["submitted_prefix_count", "submitted_prefix_digest"] {
            if !obj.contains_key(key) {
                return Err(invalid(key, "is required (null when unknown)"));
            }
        }
        let submitted_prefix_count =
            count(obj.get("submitted_prefix_count"), "submitted_prefix_count")?;
        let submitted_prefix_digest = digest(
            obj.get("submitted_prefix_digest"),
            "submitted_prefix_digest",
        )?;
        if submitted_prefix_count.is_some() != submitted_prefix_digest.is_some() {
            return Err(invalid(
                "submitted_prefix_count",
                "and submitted_prefix_digest must both be set or both be null",
            ));
        }
        let slot = match obj.get("memgate_confirmed") {
            None | Some(Value::Null) => None,
            Some(Value::String(s))
                if s.len() == UNCONFIRMED.len()
                    && s.bytes()
                        .all(|b| matches!(b, b' ' | b'0'..=b'9' | b'a'..=b'f')) =>
            {
                Some(s.as_str())
            }
            Some(_) => {
                return Err(invalid(
                    "memgate_confirmed",
                    "must be 32 characters, each a space or a lowercase hex digit",
                ))
            }
        };
        // A confirmed intent is only checked: the cursor is its outcome.
        let confirmed = slot.is_some_and(|slot| {
            obj.get("memgate_in_flight")
                .and_then(|i| i.get("rollback"))
                .and_then(|r| r.get("token"))
                .and_then(Value::as_str)
                == Some(slot)
        });
        let (in_flight, rollback) = match obj.get("memgate_in_flight") {
            None | Some(Value::Null) => (None, None),
            Some(v) => {
                let (intent, rollback) =
                    InFlight::from_value(v, !confirmed, &submitted_signatures)?;
                (Some(intent), rollback)
            }
        };
        if slot.is_some() != rollback.is_some() {
            return Err(invalid(
                "memgate_confirmed",
                "and memgate_in_flight.rollback must both be present or both be absent",
            ));
        }
        let prefix_head = match obj.get("memgate_prefix_head") {
            None | Some(Value::Null) => None,
            Some(v) => Some(PrefixHead::from_value(
                v,
                submitted_prefix_count,
                submitted_prefix_digest.as_deref(),
            )?),
        };
        let cursor = Self {
            recorded: true,
            submitted_signatures,
            commit_pending,
            submitted_prefix_count,
            submitted_prefix_digest,
            server_total: count(obj.get("memgate_server_total"), "memgate_server_total")?,
            in_flight,
            prefix_head,
        };
        match (rollback, slot) {
            (Some(rollback), Some(slot)) => cursor.settled(rollback, slot),
            _ => Ok(cursor),
        }
    }

    /// An optimistic file's cursor: the outcome it holds when `slot` is the
    /// rollback's token, else the state before the write, with its intent.
    fn settled(mut self, rollback: Rollback, slot: &str) -> Result<Self, CursorError> {
        let window_len = usize::try_from(rollback.window_len).unwrap_or(usize::MAX);
        let kept = window_len - rollback.evicted.len();
        if kept > self.submitted_signatures.len() {
            return Err(invalid(
                "memgate_in_flight.rollback.window_len",
                "must not exceed the evicted entries and the window",
            ));
        }
        if slot == rollback.token {
            self.in_flight = None;
            return Ok(self);
        }
        let mut window = rollback.evicted;
        window.extend(self.submitted_signatures.drain(..kept));
        let intent = self.in_flight.take();
        Ok(Self {
            recorded: true,
            submitted_signatures: window,
            commit_pending: rollback.commit_pending,
            submitted_prefix_count: rollback.prefix_count,
            submitted_prefix_digest: rollback.prefix_digest,
            server_total: intent.as_ref().map(|i| i.base_total),
            in_flight: intent,
            prefix_head: rollback.prefix_head,
        })
    }

    /// The file body: two-space indented JSON with the keys in schema order.
    pub fn to_json(&self) -> String {
        self.to_json_with(None).0
    }

    /// [`to_json`](Self::to_json) with the intent's `rollback` and the
    /// unconfirmed `memgate_confirmed` slot when given (an optimistic save),
    /// and the slot's byte offset in the body.
    fn to_json_with(&self, rollback: Option<&Rollback>) -> (String, Option<usize>) {
        let in_flight = self.in_flight.as_ref().map_or(0, |i| {
            160 + i.signatures.len() * 68
                + i.batches.len() * 120
                + rollback.map_or(0, |r| 300 + r.evicted.len() * 68)
        });
        let mut out = String::with_capacity(260 + self.submitted_signatures.len() * 72 + in_flight);
        out.push_str("{\n  \"schema_version\": 1,\n  \"submitted_signatures\": ");
        if self.submitted_signatures.is_empty() {
            out.push_str("[]");
        } else {
            out.push('[');
            for (i, sig) in self.submitted_signatures.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                out.push_str("\n    ");
                push_json_string(&mut out, sig);
            }
            out.push_str("\n  ]");
        }
        out.push_str(",\n  \"commit_pending\": ");
        out.push_str(if self.commit_pending { "true" } else { "false" });
        out.push_str(",\n  \"submitted_prefix_count\": ");
        push_count(&mut out, self.submitted_prefix_count);
        out.push_str(",\n  \"submitted_prefix_digest\": ");
        push_digest(&mut out, self.submitted_prefix_digest.as_deref());
        out.push_str(",\n  \"memgate_server_total\": ");
        push_count(&mut out, self.server_total);
        out.push_str(",\n  \"memgate_in_flight\": ");
        match &self.in_flight {
            Some(intent) => intent.push_json(&mut out, rollback, &self.submitted_signatures),
            None => out.push_str("null"),
        }
        out.push_str(",\n  \"memgate_prefix_head\": ");
        match &self.prefix_head {
            Some(head) => head.push_json(&mut out),
            None => out.push_str("null"),
        }
        let slot = rollback.filter(|_| self.in_flight.is_some()).map(|_| {
            out.push_str(",\n  \"memgate_confirmed\": \"");
            let offset = out.len();
            out.push_str(UNCONFIRMED);
            out.push('"');
            offset
        });
        out.push_str("\n}");
        (out, slot)
    }

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

fn push_count(out: &mut String, n: Option<u64>) {
    match n {
        Some(n) => out.push_str(&n.to_string()),
        None => out.push_str("null"),
    }
}

fn push_digest(out: &mut String, d: Option<&str>) {
    match d {
        Some(d) => push_json_string(out, d),
        None => out.push_str("null"),
    }
}

/// A JSON string; signatures (hex) are copied as they are. The check has
/// no early exit, so it runs vectorized (cursors hold thousands of them).
fn push_json_string(out: &mut String, s: &str) {
    let plain = s.bytes().fold(true, |plain, b| {
        plain & (b >= 0x20) & (b != b'"') & (b != b'\\')
    });
    if plain {
        out.push('"');
        out.push_str(s);
        out.push('"');
    } else {
        out.push_str(&Value::String(s.to_owned()).to_string());
    }
}

/// Reads the cursor at `path`; a missing file is "no cursor yet".
pub fn load_cursor(path: &Path) -> Result<TranscriptCursor, CursorError> {
    match fs::read(path) {
        Ok(bytes) => TranscriptCursor::from_json(&bytes),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(TranscriptCursor::default()),
        Err(e) => Err(CursorError::Unreadable(e.kind().to_string())),
    }
}

static TEMP_SEQUENCE: AtomicU64 = AtomicU64::new(0);
static FSYNCS: AtomicU64 = AtomicU64::new(0);

/// fsync calls made by cursor saves in this process (for tests and the
/// capture bench).
pub fn fsync_count() -> u64 {
    FSYNCS.load(Ordering::Relaxed)
}

/// The temp file a save writes first:
/// `<dir>/<stem>.<pid>.<sequence>.<random>.tmp` (the `.json` suffix
/// replaced, not appended to). The random part keeps a later process that
/// got the same pid (pid 1 in a restarted container) off the temp files an
/// earlier, killed one left behind.
pub fn temp_path_for(path: &Path) -> PathBuf {
    let stem = path
        .file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_else(|| "cursor".to_owned());
    let seq = TEMP_SEQUENCE.fetch_add(1, Ordering::Relaxed);
    let mut hasher = RandomState::new().build_hasher();
    hasher.write_u64(seq);
    let random = hasher.finish();
    path.with_file_name(format!(
        "{stem}.{}.{seq}.{random:016x}.tmp",
        std::process::id()
    ))
}

/// How much of a save must be on disk before it returns.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SaveMode {
    /// Body and rename both durable: an intent, or a state nothing else
    /// on disk describes.
    Durable,
    /// Body durable, rename left to the file system: the outcome of a write
    /// whose intent is already durable. Losing the rename in a power cut
    /// leaves the intent, which the next capture reconciles.
    CoveredByIntent,
}

/// Writes `cursor` to `path` durably: parent directories created, body
/// written to a temp file and fsynced, renamed over the target, and the
/// directory fsynced so the rename itself survives a crash. The temp file is
/// removed if anything fails; the previous cursor is then left untouched.
pub fn save_cursor(path: &Path, cursor: &TranscriptCursor) -> io::Result<()> {
    save_cursor_with(path, cursor, SaveMode::Durable)
}

/// [`save_cursor`] with the durability of the rename chosen by `mode`.
pub fn save_cursor_with(path: &Path, cursor: &TranscriptCursor, mode: SaveMode) -> io::Result<()> {
    save_body(path, cursor.to_json().as_bytes(), mode).map(drop)
}

/// A write saved by [`save_optimistic`], not confirmed yet.
#[derive(Debug)]
pub struct Confirmation {
    /// The saved file (open from before its rename, so a later save of the
    /// same path is never written into).
    file: fs::File,
    offset: u64,
    token: String,
}

impl Confirmation {
    /// Records that the write succeeded: the token goes into the slot, in
    /// place. Not fsynced: lost in a power cut, the file reads as before
    /// the write with its intent, which the next capture reconciles.
    pub fn confirm(self) -> io::Result<()> {
        write_at(&self.file, self.token.as_bytes(), self.offset)
    }
}

/// Saves `outcome` (the cursor once its write succeeds, with that write as
/// its intent) durably, as [`save_cursor`] does, with `rollback` to the
/// state the write started from and the unconfirmed slot; see the module
/// documentation.
pub fn save_optimistic(
    path: &Path,
    outcome: &TranscriptCursor,
    rollback: &Rollback,
) -> io::Result<Confirmation> {
    let (body, offset) = outcome.to_json_with(Some(rollback));
    let Some(offset) = offset else {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "an optimistic cursor needs its intent",
        ));
    };
    let file = save_body(path, body.as_bytes(), SaveMode::Durable)?;
    Ok(Confirmation {
        file,
        offset: offset as u64,
        token: rollback.token.clone(),
    })
}

#[cfg(unix)]
fn write_at(file: &fs::File, bytes: &[u8], offset: u64) -> io::Result<()> {
    std::os::unix::fs::FileExt::write_all_at(file, bytes, offset)
}

#[cfg(not(unix))]
fn write_at(mut file: &fs::File, bytes: &[u8], offset: u64) -> io::Result<()> {
    use std::io::{Seek, SeekFrom};
    file.seek(SeekFrom::Start(offset))?;
    file.write_all(bytes)
}

/// Writes `body` to `path` through a temp file (see [`save_cursor`]) and
/// returns the file, still open.
fn save_body(path: &Path, body: &[u8], mode: SaveMode) -> io::Result<fs::File> {
    let dir = path
        .parent()
        .filter(|d| !d.as_os_str().is_empty())
        .unwrap_or_else(|| Path::new("."));
    fs::create_dir_all(dir)?;
    let mut attempts = 0;
    let result = loop {
        let temp = temp_path_for(path);
        let result = write_and_rename(&temp, path, body);
        match result {
            // A leftover with this very name (not ours: never removed).
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {
                if attempts == 8 {
                    break Err(e);
                }
                attempts += 1;
            }
            Err(e) => {
                if let Err(e) = fs::remove_file(&temp) {
                    if e.kind() != io::ErrorKind::NotFound {
                        tracing::debug!(error = %e, "could not remove cursor temp file");
                    }
                }
                break Err(e);
            }
            Ok(file) => break Ok(file),
        }
    };
    let file = result?;
    if mode == SaveMode::Durable {
        sync_dir(dir)?;
    }
    Ok(file)
}

fn write_and_rename(temp: &Path, target: &Path, body: &[u8]) -> io::Result<fs::File> {
    let mut file = fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(temp)?;
    file.write_all(body)?;
    file.sync_all()?;
    FSYNCS.fetch_add(1, Ordering::Relaxed);
    fs::rename(temp, target)?;
    Ok(file)
}

#[cfg(unix)]
fn sync_dir(dir: &Path) -> io::Result<()> {
    fs::File::open(dir)?.sync_all()?;
    FSYNCS.fetch_add(1, Ordering::Relaxed);
    Ok(())
}

#[cfg(not(unix))]
fn sync_dir(_dir: &Path) -> io::Result<()> {
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn sigs(prefix: &str, n: usize) -> Vec<String> {
        (0..n)
            .map(|i| crate::signature::sha256_hex(format!("{prefix}{i}").as_bytes()))
            .collect()
    }

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
    fn file_body_has_schema_key_order() {
        let all = sigs("h", 2);
        let c = TranscriptCursor::default().advanced(Some(&all[..]), &all[..], 512, false);
        let body = c.to_json();
        let keys = [
            "schema_version",
            "submitted_signatures",
            "commit_pending",
            "submitted_prefix_count",
            "submitted_prefix_digest",
        ];
        let positions: Vec<usize> = keys.iter().map(|k| body.find(k).unwrap()).collect();
        assert!(positions.windows(2).all(|w| w[0] < w[1]), "{body}");
        assert!(
            body.starts_with("{\n  \"schema_version\": 1,\n  \"submitted_signatures\": [\n    \"")
        );
        let back = TranscriptCursor::from_json(body.as_bytes()).unwrap();
        assert_eq!(back, c);
        let empty = TranscriptCursor::default().to_json();
        assert!(empty.contains("\"submitted_signatures\": []"));
        assert!(empty.contains("\"submitted_prefix_count\": null"));
    }

    /// A valid file body with `key` replaced by `value` (or removed).
    fn body_with(key: &str, value: Option<Value>) -> Vec<u8> {
        let all = sigs("h", 3);
        let c = TranscriptCursor::default().advanced(Some(&all[..]), &all[..], 512, false);
        let mut obj: Map<String, Value> = serde_json::from_str(&c.to_json()).unwrap();
        match value {
            Some(v) => obj.insert(key.to_owned(), v),
            None => obj.remove(key),
        };
        serde_json::to_vec(&obj).unwrap()
    }

    #[test]
    fn unreadable_and_invalid_files_are_told_apart() {
        assert!(matches!(
            TranscriptCursor::from_json(b"not-json"),
            Err(CursorError::Unreadable(_))
        ));
        assert!(matches!(
            TranscriptCursor::from_json(b"[1,2]"),
            Err(CursorError::Invalid(_))
        ));
    }

    #[test]
    fn every_inexact_cursor_is_refused() {
        let h = sigs("x", 1).remove(0);
        let cases: Vec<(&str, Vec<u8>)> = vec![
            ("empty object", b"{}".to_vec()),
            ("schema 2", body_with("schema_version", Some(2.into()))),
            (
                "schema string",
                body_with("schema_version", Some("1".into())),
            ),
            ("no schema", body_with("schema_version", None)),
            ("no window", body_with("submitted_signatures", None)),
            (
                "window not a list",
                body_with("submitted_signatures", Some("a".into())),
            ),
            (
                "non-string signatures",
                body_with("submitted_signatures", Some(serde_json::json!([1, null]))),
            ),
            (
                "short signature",
                body_with("submitted_signatures", Some(serde_json::json!(["abc"]))),
            ),
            (
                "upper-case signature",
                body_with("submitted_signatures", Some(h.to_uppercase().into())),
            ),
            (
                "commit_pending 1",
                body_with("commit_pending", Some(1.into())),
            ),
            ("commit_pending missing", body_with("commit_pending", None)),
            (
                "negative count",
                body_with("submitted_prefix_count", Some((-1).into())),
            ),
            (
                "float count",
                body_with("submitted_prefix_count", Some(1.5.into())),
            ),
            ("count missing", body_with("submitted_prefix_count", None)),
            (
                "count without digest",
                body_with("submitted_prefix_digest", Some(Value::Null)),
            ),
            (
                "digest not hex",
                body_with("submitted_prefix_digest", Some("zz".into())),
            ),
            (
                "digest a number",
                body_with("submitted_prefix_digest", Some(7.into())),
            ),
            ("unknown key", body_with("extra", Some(true.into()))),
            (
                "server total text",
                body_with("memgate_server_total", Some("3".into())),
            ),
            (
                "intent not an object",
                body_with("memgate_in_flight", Some(3.into())),
            ),
            (
                "intent without batches",
                body_with(
                    "memgate_in_flight",
                    Some(
                        serde_json::json!({"base_total": 0, "written_ms": 1, "start": null, "signatures": [h], "batches": []}),
                    ),
                ),
            ),
            (
                "intent past its signatures",
                body_with(
                    "memgate_in_flight",
                    Some(
                        serde_json::json!({"base_total": 0, "written_ms": 1, "start": null, "signatures": [h],
                        "batches": [{"inputs": 2, "payloads": 2, "prefix_digest": null}]}),
                    ),
                ),
            ),
        ];
        for (name, body) in cases {
            let got = TranscriptCursor::from_json(&body);
            assert!(
                matches!(got, Err(CursorError::Invalid(_))),
                "{name}: {got:?}"
            );
        }
        // The valid body itself, and a DeerFlow body without memgate's keys.
        assert!(TranscriptCursor::from_json(&body_with("memgate_in_flight", None)).is_ok());
        let deerflow = body_with("memgate_server_total", None);
        let c = TranscriptCursor::from_json(&deerflow).unwrap();
        assert!(c.recorded && c.server_total.is_none() && c.in_flight.is_none());
    }

    const FINGERPRINT: &str = "0123456789abcdef0123456789abcdef";

    /// A cursor whose prefix is `prefix`, with a prefix head.
    fn headed(prefix: &[String]) -> TranscriptCursor {
        let mut running = SequenceHasher::default();
        running.absorb(prefix);
        TranscriptCursor::default()
            .advanced(Some(prefix), prefix, 512, false)
            .with_prefix_head(FINGERPRINT.into(), &running)
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
    fn the_borrowing_reading_agrees_with_the_full_one() {
        let all = sigs("b", 40);
        let plain = TranscriptCursor::default().advanced(Some(&all[..30]), &all[..30], 16, false);
        let mut intent = headed(&all[..30]);
        intent.server_total = Some(30);
        intent.in_flight = Some(InFlight {
            base_total: 30,
            written_ms: 1_700_000_000_000,
            start: Some(30),
            signatures: all[30..].to_vec(),
            batches: vec![BatchMark {
                inputs: 10,
                payloads: 10,
                prefix_digest: Some(sequence_digest(&all)),
            }],
        });
        let valid = [plain.to_json(), headed(&all).to_json(), intent.to_json()];
        for body in &valid {
            let read = TranscriptCursor::from_json_borrowing(body.as_bytes());
            assert!(read.is_some(), "a cursor memgate wrote is read borrowing");
            assert_eq!(
                read,
                TranscriptCursor::from_json_value(body.as_bytes()).ok()
            );
        }
        // Valid, but with an escape in a window signature: left to the full
        // reading, which accepts it.
        let first = &plain.submitted_signatures[0];
        let escaped = plain.to_json().replacen(
            first,
            &format!("\\u00{:x}{}", first.as_bytes()[0], &first[1..]),
            1,
        );
        assert!(TranscriptCursor::from_json_borrowing(escaped.as_bytes()).is_none());
        assert_eq!(
            TranscriptCursor::from_json(escaped.as_bytes()).unwrap(),
            plain_read(&plain)
        );
        // Whatever the full reading refuses, the borrowing one never accepts.
        let body: Map<String, Value> = serde_json::from_str(&plain.to_json()).unwrap();
        let mut refused: Vec<Vec<u8>> = vec![b"{}".to_vec(), b"[]".to_vec(), b"".to_vec()];
        for key in KEYS {
            for value in [
                Value::Null,
                1.into(),
                (-1).into(),
                "x".into(),
                Value::Bool(true),
                serde_json::json!([first]),
                serde_json::json!(["abc"]),
                serde_json::json!([first.to_uppercase()]),
                serde_json::json!({}),
            ] {
                let mut changed = body.clone();
                changed.insert(key.to_owned(), value);
                refused.push(serde_json::to_vec(&changed).unwrap());
            }
            let mut missing = body.clone();
            missing.remove(key);
            refused.push(serde_json::to_vec(&missing).unwrap());
        }
        let mut extra = body.clone();
        extra.insert("extra".into(), 1.into());
        refused.push(serde_json::to_vec(&extra).unwrap());
        let duplicated = plain.to_json().replacen(
            "\"commit_pending\": false",
            "\"commit_pending\": false, \"commit_pending\": 2",
            1,
        );
        refused.push(duplicated.into_bytes());
        let mut checked = 0;
        for bytes in &refused {
            if TranscriptCursor::from_json_value(bytes).is_err() {
                checked += 1;
                assert_eq!(
                    TranscriptCursor::from_json_borrowing(bytes),
                    None,
                    "{}",
                    String::from_utf8_lossy(bytes)
                );
            }
        }
        assert!(checked > 30, "only {checked} refused bodies");
    }

    fn plain_read(c: &TranscriptCursor) -> TranscriptCursor {
        TranscriptCursor::from_json_value(c.to_json().as_bytes()).unwrap()
    }

    #[test]
    fn every_inexact_prefix_head_is_refused() {
        let all = sigs("h", 3);
        let c = headed(&all);
        let body: Map<String, Value> = serde_json::from_str(&c.to_json()).unwrap();
        let head = body["memgate_prefix_head"].clone();
        let mut other = SequenceHasher::default();
        other.absorb(&all[..2]);
        let other = other.state();
        let changed = |key: &str, value: Option<Value>| {
            let mut head = head.clone();
            let obj = head.as_object_mut().unwrap();
            match value {
                Some(v) => obj.insert(key.to_owned(), v),
                None => obj.remove(key),
            };
            head
        };
        let cases: Vec<(&str, Value)> = vec![
            ("not an object", Value::from("x")),
            ("unknown field", changed("extra", Some(1.into()))),
            ("fingerprint missing", changed("fingerprint", None)),
            (
                "fingerprint short",
                changed("fingerprint", Some("abc".into())),
            ),
            (
                "fingerprint upper-case",
                changed("fingerprint", Some(FINGERPRINT.to_uppercase().into())),
            ),
            (
                "state of another prefix",
                changed("sha256_state", Some(other.state.into())),
            ),
            (
                "state not hex",
                changed("sha256_state", Some("z".repeat(64).into())),
            ),
            (
                "bytes off",
                changed(
                    "sha256_bytes",
                    Some((c.prefix_head.as_ref().unwrap().state.bytes + 64).into()),
                ),
            ),
            ("bytes text", changed("sha256_bytes", Some("3".into()))),
            (
                "block of another length",
                changed("sha256_block", Some("00".into())),
            ),
            ("block missing", changed("sha256_block", None)),
        ];
        for (name, value) in cases {
            let mut obj = body.clone();
            obj.insert("memgate_prefix_head".into(), value);
            let got = TranscriptCursor::from_json(&serde_json::to_vec(&obj).unwrap());
            assert!(
                matches!(got, Err(CursorError::Invalid(_))),
                "{name}: {got:?}"
            );
        }
        // A head without a prefix describes nothing.
        let mut obj = body.clone();
        obj.insert("submitted_prefix_count".into(), Value::Null);
        obj.insert("submitted_prefix_digest".into(), Value::Null);
        let got = TranscriptCursor::from_json(&serde_json::to_vec(&obj).unwrap());
        assert!(matches!(got, Err(CursorError::Invalid(_))), "{got:?}");
        // Null and absent read as no head.
        for value in [Some(Value::Null), None] {
            let mut obj = body.clone();
            match value {
                Some(v) => obj.insert("memgate_prefix_head".into(), v),
                None => obj.remove("memgate_prefix_head"),
            };
            let c = TranscriptCursor::from_json(&serde_json::to_vec(&obj).unwrap()).unwrap();
            assert!(c.prefix_head.is_none());
        }
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

    #[test]
    fn intent_round_trips_and_rebases_after_confirmed_batches() {
        let all = sigs("h", 5);
        let intent = InFlight {
            base_total: 7,
            written_ms: 1_700_000_000_000,
            start: Some(1),
            signatures: all[1..].to_vec(),
            batches: vec![
                BatchMark {
                    inputs: 2,
                    payloads: 2,
                    prefix_digest: Some(sequence_digest(&all[..3])),
                },
                BatchMark {
                    inputs: 4,
                    payloads: 3,
                    prefix_digest: Some(sequence_digest(&all[..5])),
                },
            ],
        };
        let c = TranscriptCursor {
            server_total: Some(7),
            in_flight: Some(intent.clone()),
            ..TranscriptCursor::default().advanced(Some(&all[..1]), &all[..1], 512, false)
        };
        assert_eq!(
            TranscriptCursor::from_json(c.to_json().as_bytes()).unwrap(),
            c
        );
        // Written as one run of hex digits; the array form written before
        // reads the same, and a run that is not whole signatures is refused.
        let mut v: Value = serde_json::from_str(&c.to_json()).unwrap();
        assert_eq!(
            v["memgate_in_flight"]["signatures"],
            json!(all[1..].concat())
        );
        v["memgate_in_flight"]["signatures"] = json!(all[1..].to_vec());
        assert_eq!(
            TranscriptCursor::from_json(v.to_string().as_bytes()).unwrap(),
            c
        );
        for run in [
            all[1..].concat()[1..].to_owned(),
            all[1..].concat().to_uppercase(),
        ] {
            v["memgate_in_flight"]["signatures"] = json!(run);
            assert!(matches!(
                TranscriptCursor::from_json(v.to_string().as_bytes()),
                Err(CursorError::Invalid(m)) if m.contains("memgate_in_flight.signatures")
            ));
        }
        assert_eq!(intent.payloads(), 3);
        let rest = intent.after(1).unwrap();
        assert_eq!((rest.base_total, rest.start), (9, Some(3)));
        assert_eq!(rest.signatures, all[3..].to_vec());
        assert_eq!((rest.batches[0].inputs, rest.batches[0].payloads), (2, 1));
        assert!(intent.after(2).is_none());
        assert_eq!(intent.after(0).unwrap(), intent);
    }

    /// A write from `base` (its window capped at `max_seen`) of `added`
    /// signatures in one batch: the outcome with its intent, and the
    /// rollback.
    fn optimistic(
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

    #[test]
    fn an_optimistic_save_reads_as_its_base_until_confirmed_then_as_its_outcome() {
        let all = sigs("o", 40);
        // (window cap, base prefix, transcript): room left, a window that
        // pushes two out, a write longer than the whole window.
        for (max_seen, before, after) in [(512, 3, 7), (16, 16, 18), (16, 4, 30)] {
            let mut base = headed(&all[..before]);
            base = base.advanced(Some(&all[..before]), &[] as &[String], max_seen, false);
            let mut running = SequenceHasher::default();
            running.absorb(&all[..before]);
            base = base.with_prefix_head(FINGERPRINT.into(), &running);
            base.server_total = Some(before as u64);
            let (outcome, rollback) = optimistic(&base, &all[..after], max_seen);
            let dir = tempfile::tempdir().unwrap();
            let path = dir.path().join("s.json");
            // (Its fsyncs are counted exactly by the openviking crate's
            // `capture_fsyncs`, alone in its process.)
            let confirmation = save_optimistic(&path, &outcome, &rollback).unwrap();

            // DeerFlow's keys already hold the outcome.
            let file: Value = serde_json::from_slice(&fs::read(&path).unwrap()).unwrap();
            let expected: Value = serde_json::from_str(&outcome.to_json()).unwrap();
            for key in &KEYS[..5] {
                assert_eq!(file[key], expected[key], "{key}");
            }
            // Unconfirmed: the base, exactly, with the intent.
            let with_intent = TranscriptCursor {
                in_flight: outcome.in_flight.clone(),
                ..base.clone()
            };
            assert_eq!(
                load_cursor(&path).unwrap(),
                with_intent,
                "{max_seen}/{before}/{after}"
            );

            confirmation.confirm().unwrap();
            let confirmed = TranscriptCursor {
                in_flight: None,
                ..outcome.clone()
            };
            assert_eq!(load_cursor(&path).unwrap(), confirmed);
            assert_eq!(fs::read_dir(dir.path()).unwrap().count(), 1, "one file");
        }
    }

    #[test]
    fn a_confirmation_slot_that_is_not_the_token_reads_as_the_base_and_a_malformed_one_is_refused()
    {
        let all = sigs("t", 6);
        let mut base = headed(&all[..2]);
        base.server_total = Some(2);
        let (outcome, rollback) = optimistic(&base, &all, 512);
        let (body, offset) = outcome.to_json_with(Some(&rollback));
        let offset = offset.unwrap();
        let with_slot = |slot: &str| {
            let mut b = body.clone();
            b.replace_range(offset..offset + 32, slot);
            b
        };
        let read = |b: &str| TranscriptCursor::from_json(b.as_bytes());
        let token = rollback.token.clone();
        let torn = format!("{}{}", &token[..10], &UNCONFIRMED[10..]);
        let other = "0".repeat(32);
        for slot in [UNCONFIRMED, torn.as_str(), other.as_str()] {
            let c = read(&with_slot(slot)).unwrap();
            assert_eq!(c.submitted_prefix_count, Some(2), "{slot:?}");
            assert!(c.in_flight.is_some() && c.prefix_head == base.prefix_head);
        }
        assert!(read(&with_slot(&token)).unwrap().in_flight.is_none());

        let refused = |b: String, why: &str| match read(&b) {
            Err(CursorError::Invalid(m)) => assert!(m.contains(why), "{m}"),
            other => panic!("{why}: {other:?}"),
        };
        refused(with_slot(&token.to_uppercase()), "memgate_confirmed");
        refused(
            with_slot(&format!("{}x", &token[..31])),
            "memgate_confirmed",
        );
        let mut v: Value = serde_json::from_str(&body).unwrap();
        v.as_object_mut().unwrap().remove("memgate_confirmed");
        refused(v.to_string(), "both be present");
        let mut v: Value = serde_json::from_str(&body).unwrap();
        let intent = v["memgate_in_flight"].as_object_mut().unwrap();
        intent.remove("rollback");
        refused(v.to_string(), "window_tail needs a rollback");
        v["memgate_in_flight"]
            .as_object_mut()
            .unwrap()
            .remove("window_tail");
        v["memgate_in_flight"]["signatures"] = json!(all[2..].concat());
        refused(v.to_string(), "both be present");
        let mut v: Value = serde_json::from_str(&body).unwrap();
        v["memgate_in_flight"]["window_tail"] = json!(7);
        refused(v.to_string(), "window_tail");
        for (field, value, why) in [
            ("window_len", json!(9), "window_len"),
            ("window_len", json!(-1), "window_len"),
            ("evicted", json!(vec!["a".repeat(64); 3]), "evicted"),
            ("evicted", json!(["A".repeat(64)]), "evicted"),
            ("token", json!("12"), "token"),
            ("prefix_count", Value::Null, "prefix_count"),
            ("prefix_head", json!({}), "prefix_head"),
            ("commit_pending", json!(0), "commit_pending"),
            ("surprise", json!(1), "surprise"),
        ] {
            let mut v: Value = serde_json::from_str(&body).unwrap();
            v["memgate_in_flight"]["rollback"][field] = value;
            refused(v.to_string(), why);
        }
    }

    #[test]
    fn a_stale_temp_file_never_blocks_a_save() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("df_s.json");
        // Leftovers of a killed process that had our pid, for the next
        // sequence numbers, under the old naming and the new one.
        let pid = std::process::id();
        let next = TEMP_SEQUENCE.load(Ordering::Relaxed);
        for seq in next..next + 4 {
            fs::write(dir.path().join(format!("df_s.{pid}.{seq}.tmp")), b"{").unwrap();
        }
        let c = TranscriptCursor::default().advanced(
            Some(&sigs("h", 1)[..]),
            &sigs("h", 1)[..],
            512,
            false,
        );
        save_cursor(&path, &c).unwrap();
        assert_eq!(load_cursor(&path).unwrap(), c);
        // Two temp names are never the same, even for one sequence number.
        assert_ne!(temp_path_for(&path), temp_path_for(&path));
        let stale = dir.path().join(format!("df_s.{pid}.{next}.tmp"));
        assert!(stale.exists(), "a leftover is not ours to remove");
    }

    #[test]
    fn durable_saves_fsync_twice_and_covered_saves_once() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("df_f.json");
        let c = TranscriptCursor::default().advanced(
            Some(&sigs("h", 1)[..]),
            &sigs("h", 1)[..],
            512,
            false,
        );
        let before = fsync_count();
        save_cursor(&path, &c).unwrap();
        let durable = fsync_count() - before;
        save_cursor_with(&path, &c, SaveMode::CoveredByIntent).unwrap();
        let covered = fsync_count() - before - durable;
        // Other tests save in parallel; they can only add.
        assert!(durable >= 2 && covered >= 1, "{durable} {covered}");
        assert_eq!(load_cursor(&path).unwrap(), c);
    }

    #[test]
    fn save_is_atomic_and_leaves_no_temp_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("a/b/df_x.json");
        assert_eq!(load_cursor(&path).unwrap(), TranscriptCursor::default());
        let all = sigs("h", 3);
        let c = TranscriptCursor::default().advanced(Some(&all[..]), &all[..], 512, false);
        save_cursor(&path, &c).unwrap();
        assert_eq!(load_cursor(&path).unwrap(), c);
        let names: Vec<_> = fs::read_dir(path.parent().unwrap())
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        assert_eq!(names, ["df_x.json"]);
        let temp = temp_path_for(&path);
        let name = temp.file_name().unwrap().to_str().unwrap().to_owned();
        let parts: Vec<&str> = name.split('.').collect();
        assert_eq!(parts[0], "df_x");
        assert_eq!(parts[1], std::process::id().to_string());
        assert!(parts[2].chars().all(|c| c.is_ascii_digit()));
        assert!(parts[3].len() == 16 && parts[3].chars().all(|c| c.is_ascii_hexdigit()));
        assert_eq!(parts[4], "tmp");
    }

    #[cfg(unix)]
    #[test]
    fn failed_save_removes_its_temp_file_and_keeps_the_old_cursor() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("df_y.json");
        let all = sigs("h", 2);
        let old = TranscriptCursor::default().advanced(Some(&all[..1]), &all[..1], 512, false);
        save_cursor(&path, &old).unwrap();
        // Make the rename fail: the target becomes a non-empty directory.
        let blocked = dir.path().join("df_z.json");
        fs::create_dir(&blocked).unwrap();
        fs::write(blocked.join("keep"), b"x").unwrap();
        assert!(save_cursor(&blocked, &old).is_err());
        let leftovers: Vec<_> = fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .filter(|n| n.ends_with(".tmp"))
            .collect();
        assert!(leftovers.is_empty(), "{leftovers:?}");
        assert_eq!(load_cursor(&path).unwrap(), old);
    }
}
