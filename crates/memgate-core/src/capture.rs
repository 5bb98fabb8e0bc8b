//! Capture: handing finished conversation turns to memory.
//!
//! Hosts capture twice: after a completed turn (the full transcript
//! snapshot) and before compaction (only the head about to be removed).
//! Captures are idempotent: a backend remembers what it has already taken
//! (by message signature), so replaying the same or a longer snapshot adds
//! only what is new.
//!
//! Hidden messages (the date reminder, the injected `X__memory` message,
//! other framework messages) are never captured unless the host's
//! keep-hook says so, so memory never feeds on itself.

use crate::identity::Caller;
use crate::message::Message;
use crate::signature::{HeadFingerprint, SequenceHasher, SignatureFields};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use std::sync::Arc;

/// Why the host is capturing.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "snake_case")]
pub enum CaptureKind {
    /// The full transcript snapshot at the end of a completed turn.
    #[default]
    AfterTurn,
    /// The head of the transcript that compaction is about to remove.
    BeforeCompaction,
}

/// A capture request: whose conversation, which thread, which messages.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(deny_unknown_fields)]
pub struct CaptureRequest {
    pub caller: Caller,
    pub messages: Vec<Message>,
    #[serde(default)]
    pub kind: CaptureKind,
    /// The host's trace id, for logs only.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub trace_id: Option<String>,
}

/// What a capture did.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct CaptureReport {
    /// Messages newly stored (or sent to the server).
    pub stored: usize,
    /// Messages skipped because they were captured before.
    pub already_known: usize,
    /// Messages the capture filter left out (hidden, injected, system…).
    pub filtered: usize,
    /// Newly stored messages whose text memory keeps only the start of
    /// (absent when none was cut): a host must not believe all of a long
    /// message is recallable.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub cut: Vec<CaptureCut>,
}

/// One message a capture stored only the start of: which one and how much.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct CaptureCut {
    /// The message's position in the request's `messages` (from 0).
    pub index: usize,
    /// The message's own id, when it has one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message_id: Option<String>,
    /// UTF-8 bytes of the message's text (trimmed, secrets replaced).
    pub text_bytes: usize,
    /// UTF-8 bytes memory kept: the limit, or less to end on a character.
    pub kept_bytes: usize,
}

/// The head of a transcript that a backend's cursor already holds, handed
/// over without building (and dropping) a [`Message`] for each of its
/// messages: a surface that read the cursor's prefix first converts only
/// the messages after it. Either signed ([`push`](Self::push): each
/// captured message's signature, the running digest absorbing them as
/// they come, so the two cannot disagree) or recognised
/// ([`recognised`](Self::recognised): its fingerprint equals the one the
/// cursor recorded for its prefix, so no signature was computed; the
/// running digest is the cursor's own). Both carry the head's
/// [`HeadFingerprint`], which the next cursor records.
#[derive(Clone, Debug, Default)]
pub struct KnownHead {
    signatures: Vec<String>,
    /// Leading captured messages known by fingerprint only.
    unsigned: usize,
    running: SequenceHasher,
    fingerprint: HeadFingerprint,
    filtered: usize,
}

impl KnownHead {
    pub fn with_capacity(count: usize) -> Self {
        Self {
            signatures: Vec::with_capacity(count),
            ..Self::default()
        }
    }

    /// A head recognised by its fingerprint: `running` is the recorded
    /// prefix's digest state (its length is the head's), `fingerprint` the
    /// head's, `filtered` the head's messages the filter left out.
    pub fn recognised(
        running: SequenceHasher,
        fingerprint: HeadFingerprint,
        filtered: usize,
    ) -> Self {
        Self {
            signatures: Vec::new(),
            unsigned: running.absorbed(),
            running,
            fingerprint,
            filtered,
        }
    }

    /// The next captured message's signature and fields.
    pub fn push(&mut self, signature: String, fields: &SignatureFields<'_>) {
        debug_assert_eq!(self.unsigned, 0, "a recognised head is not signed further");
        self.running.absorb(std::slice::from_ref(&signature));
        self.fingerprint.absorb(fields);
        self.signatures.push(signature);
    }

    /// A message of the head that the capture filter left out.
    pub fn skip(&mut self) {
        self.filtered += 1;
    }

    /// Captured messages so far.
    pub fn len(&self) -> usize {
        self.unsigned + self.signatures.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Messages the filter left out of the head.
    pub fn filtered(&self) -> usize {
        self.filtered
    }

    /// The sequence digest of the head's signatures.
    pub fn digest(&self) -> String {
        self.running.digest()
    }

    /// The running digest (its length is [`len`](Self::len)).
    pub fn running(&self) -> &SequenceHasher {
        &self.running
    }

    /// The parts a capture plans with: how many leading messages have no
    /// signature here (a recognised head), the signatures of the others in
    /// transcript order, the running digest and the fingerprint.
    pub fn into_parts(self) -> (usize, Vec<String>, SequenceHasher, HeadFingerprint) {
        (
            self.unsigned,
            self.signatures,
            self.running,
            self.fingerprint,
        )
    }
}

/// The host's hook deciding whether a hidden message should be captured
/// anyway; it receives the message's `additional_kwargs`.
pub type KeepHiddenHook = Arc<dyn Fn(&Map<String, Value>) -> bool + Send + Sync>;

/// The host's default keep-hook: keep a hidden message only when it carries a
/// valid clarification answer (`additional_kwargs.human_input_response` with
/// `version == 1`, `kind == "human_input_response"`, non-blank `source`,
/// `request_id` and `value`, and `response_kind` `text`, or `option` with a
/// non-blank `option_id`).
pub fn host_default_keep_hidden(kwargs: &Map<String, Value>) -> bool {
    let Some(Value::Object(r)) = kwargs.get("human_input_response") else {
        return false;
    };
    let non_blank = |k: &str| {
        r.get(k)
            .and_then(Value::as_str)
            .is_some_and(|s| !s.trim().is_empty())
    };
    let version_ok = r.get("version").and_then(Value::as_i64) == Some(1)
        && !matches!(r.get("version"), Some(Value::Bool(_)));
    let kind_ok = r.get("kind").and_then(Value::as_str) == Some("human_input_response");
    let response_ok = match r.get("response_kind").and_then(Value::as_str) {
        Some("text") => true,
        Some("option") => non_blank("option_id"),
        _ => false,
    };
    version_ok
        && kind_ok
        && non_blank("source")
        && non_blank("request_id")
        && non_blank("value")
        && response_ok
}

/// The host contract's capture filter: every message is kept in order except
/// hidden ones (`hide_from_ui`), which are kept only when `keep` says so.
pub fn captureable<'a>(messages: &'a [Message], keep: Option<&KeepHiddenHook>) -> Vec<&'a Message> {
    messages
        .iter()
        .filter(|m| is_captureable(m, keep))
        .collect()
}

/// [`captureable`] for one message.
pub fn is_captureable(message: &Message, keep: Option<&KeepHiddenHook>) -> bool {
    !message.is_hidden() || keep.is_some_and(|hook| hook(&message.additional_kwargs))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn answer() -> Value {
        json!({"version": 1, "kind": "human_input_response", "source": "ui",
               "request_id": "r1", "value": "yes", "response_kind": "text"})
    }

    #[test]
    fn default_hook_accepts_only_valid_clarification_answers() {
        let mut kw = Map::new();
        kw.insert("human_input_response".into(), answer());
        assert!(host_default_keep_hidden(&kw));

        let mut option = answer();
        option["response_kind"] = json!("option");
        kw.insert("human_input_response".into(), option.clone());
        assert!(!host_default_keep_hidden(&kw), "option needs option_id");
        option["option_id"] = json!("o1");
        kw.insert("human_input_response".into(), option);
        assert!(host_default_keep_hidden(&kw));

        for (key, bad) in [
            ("version", json!(2)),
            ("kind", json!("x")),
            ("value", json!("  ")),
        ] {
            let mut a = answer();
            a[key] = bad;
            kw.insert("human_input_response".into(), a);
            assert!(!host_default_keep_hidden(&kw), "{key}");
        }
        assert!(!host_default_keep_hidden(&Map::new()));
    }

    #[test]
    fn a_known_head_digests_and_fingerprints_what_was_pushed() {
        use crate::signature::{message_signature, sequence_digest};
        let messages: Vec<Message> = ["a", "b", "c"].iter().map(|t| Message::human(*t)).collect();
        let sigs: Vec<String> = messages.iter().map(message_signature).collect();
        let mut head = KnownHead::with_capacity(3);
        assert_eq!(head.digest(), sequence_digest::<&str>(&[]));
        let mut fingerprint = HeadFingerprint::default();
        for (sig, m) in sigs.iter().zip(&messages) {
            head.push(sig.clone(), &m.signature_fields());
            fingerprint.absorb(&m.signature_fields());
        }
        head.skip();
        assert_eq!((head.len(), head.filtered()), (3, 1));
        assert_eq!(head.digest(), sequence_digest(&sigs));
        assert_eq!(head.running().absorbed(), 3);
        let (unsigned, signatures, running, fp) = head.clone().into_parts();
        assert_eq!((unsigned, signatures), (0, sigs.clone()));
        assert_eq!(fp.value(), fingerprint.value());

        // Recognised by its fingerprint: the same length, digest and
        // fingerprint, and no signatures.
        let recognised = KnownHead::recognised(running, fp, 1);
        assert_eq!((recognised.len(), recognised.filtered()), (3, 1));
        assert_eq!(recognised.digest(), head.digest());
        let (unsigned, signatures, _, fp) = recognised.into_parts();
        assert_eq!((unsigned, signatures.len()), (3, 0));
        assert_eq!(fp.value(), fingerprint.value());
    }

    #[test]
    fn hidden_messages_are_dropped_unless_kept() {
        let msgs = vec![
            Message::system("<system-reminder>").with_flag("hide_from_ui", true),
            Message::human("<memory>")
                .with_id("x__memory")
                .with_flag("hide_from_ui", true),
            Message::human("hi").with_id("x__user"),
            Message::human("yes")
                .with_flag("hide_from_ui", true)
                .with_flag("human_input_response", answer()),
            Message::ai("hello"),
        ];
        let plain: Vec<_> = captureable(&msgs, None).iter().map(|m| m.text()).collect();
        assert_eq!(plain, ["hi", "hello"]);
        let hook: KeepHiddenHook = Arc::new(host_default_keep_hidden);
        let kept: Vec<_> = captureable(&msgs, Some(&hook))
            .iter()
            .map(|m| m.text())
            .collect();
        assert_eq!(kept, ["hi", "yes", "hello"]);
    }
}
