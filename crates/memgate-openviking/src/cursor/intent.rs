//! What a cursor records beside its window and prefix: the intent of a
//! write whose outcome is not recorded yet ([`InFlight`], one
//! [`BatchMark`] per batch), the way back from an optimistic save
//! ([`Rollback`]) and the recorded prefix's head ([`PrefixHead`]); each
//! with its form in the file.

use super::fields::{
    count, digest, digest_list, invalid, is_lower_hex, push_count, push_digest, push_json_string,
    signature_run,
};
use super::{CursorError, TranscriptCursor};
use memgate_core::signature::{PrefixState, SequenceHasher};
use serde_json::Value;
use std::collections::hash_map::RandomState;
use std::hash::BuildHasher;

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

    pub(super) fn from_value(
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

    pub(super) fn push_json(&self, out: &mut String) {
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

    pub(super) fn from_value(value: &Value) -> Result<Self, CursorError> {
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

    pub(super) fn push_json(&self, out: &mut String) {
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

impl InFlight {
    /// The intent, and its rollback when the cursor around it was saved
    /// optimistically.
    /// With `keep_signatures` false (an intent that is confirmed and only
    /// checked) its signatures are checked but not kept. `window`: the
    /// file's window, whose last `window_tail` entries an optimistic intent's
    /// signatures end with (written once, in the window).
    pub(super) fn from_value(
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
    pub(super) fn push_json(
        &self,
        out: &mut String,
        rollback: Option<&Rollback>,
        window: &[String],
    ) {
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

#[cfg(test)]
mod tests {
    use super::super::testing::{headed, sigs, FINGERPRINT};
    use super::super::CursorError;
    use super::*;
    use memgate_core::signature::sequence_digest;
    use serde_json::{json, Map};

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
}
