//! Stable content hashes of messages.
//!
//! A message signature is the SHA-256 of a canonical JSON object built from
//! the message's id, role, content, tool calls, tool call id, tool name and
//! tool status (DeerFlow's `_message_signature`, byte for byte). Editing the
//! text, the id or a tool result yields a new signature; message text itself
//! is never stored, only this hash. The sequence digest hashes an ordered
//! list of signatures (the transcript prefix a cursor has handled).

use crate::canonical_json::{write_json_string, write_python_json, write_python_json_array};
use crate::message::{truthy, Content, Message, ToolCall};
use serde_json::Value;
use sha2::{Digest, Sha256};
use std::cell::RefCell;

/// Lowercase hex of a byte string.
pub fn hex(bytes: &[u8]) -> String {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    // Sized once: every signature and digest goes through here.
    let mut out = String::with_capacity(bytes.len() * 2);
    for b in bytes {
        out.push(char::from(DIGITS[(b >> 4) as usize]));
        out.push(char::from(DIGITS[(b & 0xf) as usize]));
    }
    out
}

/// Lowercase hex SHA-256 of `bytes`.
pub fn sha256_hex(bytes: &[u8]) -> String {
    hex(&Sha256::digest(bytes))
}

/// What a signature reads from a message, borrowed from wherever the
/// message lives: a core [`Message`] ([`Message::signature_fields`]), or a
/// host's message object read in place (the Python surface signs the head
/// of a transcript its cursor already holds without building `Message`s).
/// Every form goes through the one writer below, so their signatures are
/// equal by construction.
#[derive(Clone, Copy, Debug)]
pub struct SignatureFields<'a> {
    pub id: Option<&'a str>,
    pub role: &'a str,
    pub content: ContentRef<'a>,
    pub tool_calls: &'a [ToolCall],
    /// `additional_kwargs.tool_calls`, signed when `tool_calls` is empty.
    pub legacy_tool_calls: Option<&'a Value>,
    pub tool_call_id: Option<&'a str>,
    pub tool_name: Option<&'a str>,
    pub tool_status: Option<&'a str>,
}

/// Message content as a signature reads it.
#[derive(Clone, Copy, Debug)]
pub enum ContentRef<'a> {
    Text(&'a str),
    Blocks(&'a [Value]),
}

impl Message {
    /// The fields this message's signature covers.
    pub fn signature_fields(&self) -> SignatureFields<'_> {
        SignatureFields {
            id: self.id.as_deref(),
            role: self.role.as_str(),
            content: match &self.content {
                Content::Text(s) => ContentRef::Text(s),
                Content::Blocks(blocks) => ContentRef::Blocks(blocks),
            },
            tool_calls: &self.tool_calls,
            legacy_tool_calls: self.additional_kwargs.get("tool_calls"),
            tool_call_id: self.tool_call_id.as_deref(),
            tool_name: self.name.as_deref(),
            tool_status: self.status.as_deref(),
        }
    }
}

/// The canonical JSON a signature hashes (exposed for tests and tooling):
/// `{"content","id","role","tool_call_id","tool_calls","tool_name","tool_status"}`
/// with sorted keys, compact separators and non-ASCII kept; empty strings
/// read as `null`; tool calls fall back to `additional_kwargs.tool_calls`.
pub fn signature_payload(message: &Message) -> String {
    let mut out = String::new();
    write_payload(&mut out, &message.signature_fields());
    out
}

thread_local! {
    /// Captures sign whole transcripts; one reused buffer per thread keeps
    /// that free of per-message allocations.
    static BUFFER: RefCell<String> = RefCell::new(String::with_capacity(1024));
}

/// The message's signature: lowercase hex SHA-256 of its canonical payload.
pub fn message_signature(message: &Message) -> String {
    signature_of(&message.signature_fields())
}

/// The signature of a message given as its [`SignatureFields`].
pub fn signature_of(fields: &SignatureFields<'_>) -> String {
    BUFFER.with(|buffer| {
        let mut out = buffer.borrow_mut();
        out.clear();
        write_payload(&mut out, fields);
        let digest = sha256_hex(out.as_bytes());
        if out.capacity() > 64 * 1024 {
            *out = String::with_capacity(1024);
        }
        digest
    })
}

/// Writes the payload straight into `out`, keys in sorted order; only
/// nested values (content blocks, tool call arguments, legacy tool calls)
/// go through the general canonical encoder.
fn write_payload(out: &mut String, m: &SignatureFields<'_>) {
    out.push_str("{\"content\":");
    match m.content {
        ContentRef::Text(s) => write_json_string(out, s),
        ContentRef::Blocks(blocks) => write_python_json_array(out, blocks),
    }
    out.push_str(",\"id\":");
    write_optional(out, m.id);
    out.push_str(",\"role\":");
    write_json_string(out, m.role);
    out.push_str(",\"tool_call_id\":");
    write_optional(out, m.tool_call_id);
    out.push_str(",\"tool_calls\":");
    if !m.tool_calls.is_empty() {
        out.push('[');
        for (i, call) in m.tool_calls.iter().enumerate() {
            if i > 0 {
                out.push(',');
            }
            // A tool call is {name, args, id, type}; sorted: args, id, name, type.
            out.push_str("{\"args\":");
            write_python_json(out, &call.args);
            out.push_str(",\"id\":");
            match &call.id {
                Some(id) => write_json_string(out, id),
                None => out.push_str("null"),
            }
            out.push_str(",\"name\":");
            write_json_string(out, &call.name);
            out.push_str(",\"type\":");
            write_json_string(out, &call.call_type);
            out.push('}');
        }
        out.push(']');
    } else {
        match m.legacy_tool_calls {
            Some(v) if truthy(v) => write_python_json(out, v),
            _ => out.push_str("[]"),
        }
    }
    out.push_str(",\"tool_name\":");
    write_optional(out, m.tool_name);
    out.push_str(",\"tool_status\":");
    write_optional(out, m.tool_status);
    out.push('}');
}

/// A non-empty string, or `null` (absent and empty read the same).
fn write_optional(out: &mut String, v: Option<&str>) {
    match v {
        Some(s) if !s.is_empty() => write_json_string(out, s),
        _ => out.push_str("null"),
    }
}

/// SHA-256 over each signature's UTF-8 length (8-byte big-endian) followed
/// by its bytes, in order; lowercase hex.
pub fn sequence_digest<S: AsRef<str>>(signatures: &[S]) -> String {
    let mut hasher = SequenceHasher::default();
    hasher.absorb(signatures);
    hasher.digest()
}

/// A running [`sequence_digest`]: signatures are absorbed in order and the
/// digest of what was absorbed so far can be read at any point. A capture
/// keeps the state at its matched prefix, so the digests of the batch
/// boundaries and of the whole transcript cost only the signatures after it.
#[derive(Clone, Debug, Default)]
pub struct SequenceHasher {
    hasher: Sha256,
    absorbed: usize,
}

impl SequenceHasher {
    /// Absorbs the next signatures of the list.
    pub fn absorb<S: AsRef<str>>(&mut self, signatures: &[S]) {
        for sig in signatures {
            let bytes = sig.as_ref().as_bytes();
            self.hasher.update((bytes.len() as u64).to_be_bytes());
            self.hasher.update(bytes);
        }
        self.absorbed += signatures.len();
    }

    /// How many signatures were absorbed (the prefix length).
    pub fn absorbed(&self) -> usize {
        self.absorbed
    }

    /// The [`sequence_digest`] of the absorbed prefix.
    pub fn digest(&self) -> String {
        hex(&self.hasher.clone().finalize())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::message::ToolCall;

    fn h1() -> Message {
        Message::human("Remember Vim.").with_id("h1")
    }
    fn a1() -> Message {
        Message::ai("I will remember.").with_id("a1")
    }

    // Test vectors from the behavioural spec (deerflow-memory-contract §5.7).
    #[test]
    fn reference_serialization_and_signatures() {
        assert_eq!(
            signature_payload(&h1()),
            r#"{"content":"Remember Vim.","id":"h1","role":"human","tool_call_id":null,"tool_calls":[],"tool_name":null,"tool_status":null}"#
        );
        assert_eq!(
            message_signature(&h1()),
            "9bc605b3f5585428ef012494676db93783edbc3e060cf551458c4b0cdc1faf04"
        );
        assert_eq!(
            message_signature(&a1()),
            "67f8fb34a81615a2765f9a18e8c91cff8007a86f1d150533e4019f561f1eb6be"
        );
        let tool = Message::tool("result", "call-1")
            .with_id("t1")
            .with_name("search");
        assert_eq!(
            message_signature(&tool),
            "f0188a450edff1b5624535df9e0fc3c3650d12e22dad59fb5762e056f80711ef"
        );
        let call = Message::ai("")
            .with_id("a-tool")
            .with_tool_calls(vec![ToolCall::new(
                "search",
                serde_json::json!({"query": "OpenViking"}),
                Some("call-1".into()),
            )]);
        assert_eq!(
            message_signature(&call),
            "86c3960889a0b750d98e4c1e633f5a676fcde8711bb901d2687ea074743c0bdb"
        );
    }

    #[test]
    fn reference_sequence_digests() {
        let none: [&str; 0] = [];
        assert_eq!(
            sequence_digest(&none),
            "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
        );
        let s1 = message_signature(&h1());
        let s2 = message_signature(&a1());
        assert_eq!(
            sequence_digest(std::slice::from_ref(&s1)),
            "36b2b06bad8da12b0f003d91c42a80b11631865cb1d81ac70e1e6e58ba7e9b17"
        );
        assert_eq!(
            sequence_digest(&[s1, s2]),
            "17ebe6291916c89416d50310d03ea3cf673e1dee68e9e78bed53cbe834d04b4b"
        );
    }

    #[test]
    fn a_running_digest_is_the_digest_of_each_prefix() {
        let sigs: Vec<String> = (0..7).map(|i| format!("{i:064x}")).collect();
        let mut running = SequenceHasher::default();
        assert_eq!(running.digest(), sequence_digest::<&str>(&[]));
        for (from, to) in [(0, 1), (1, 1), (1, 4), (4, 7)] {
            running.absorb(&sigs[from..to]);
            assert_eq!(running.absorbed(), to);
            assert_eq!(running.digest(), sequence_digest(&sigs[..to]));
        }
    }

    #[test]
    fn edits_change_the_signature() {
        let base = message_signature(&h1());
        assert_ne!(
            base,
            message_signature(&Message::human("Remember Vi.").with_id("h1"))
        );
        assert_ne!(
            base,
            message_signature(&Message::human("Remember Vim.").with_id("h2"))
        );
        let mut failed = Message::tool("result", "call-1").with_id("t1");
        let ok = message_signature(&failed);
        failed.status = Some("error".into());
        assert_ne!(ok, message_signature(&failed));
    }

    /// The payload built the slow, obvious way: a JSON object through the
    /// general canonical encoder.
    fn reference_payload(message: &Message) -> String {
        use crate::canonical_json::to_python_json;
        use serde_json::{json, Map};
        let non_empty = |v: Option<&str>| match v {
            Some(s) if !s.is_empty() => Value::String(s.to_owned()),
            _ => Value::Null,
        };
        let tool_calls = if !message.tool_calls.is_empty() {
            serde_json::to_value(&message.tool_calls).unwrap()
        } else {
            match message.additional_kwargs.get("tool_calls") {
                Some(v) if truthy(v) => v.clone(),
                _ => json!([]),
            }
        };
        let mut payload = Map::new();
        payload.insert("id".into(), non_empty(message.id.as_deref()));
        payload.insert("role".into(), json!(message.role.as_str()));
        payload.insert("content".into(), message.content.to_value());
        payload.insert("tool_calls".into(), tool_calls);
        payload.insert(
            "tool_call_id".into(),
            non_empty(message.tool_call_id.as_deref()),
        );
        payload.insert("tool_name".into(), non_empty(message.name.as_deref()));
        payload.insert("tool_status".into(), non_empty(message.status.as_deref()));
        to_python_json(&Value::Object(payload))
    }

    #[test]
    fn streamed_payload_matches_the_reference_for_every_shape() {
        use crate::message::Role;
        use serde_json::json;
        let mut tricky = Message::tool(
            "a\"b\\c\nd\re\tf\u{8}g\u{c}h\u{1}i\u{1f}j\u{7f}é日😀\u{2028}",
            "c\u{0}1",
        );
        tricky.status = Some("error".into());
        let messages = vec![
            Message::human("").with_id(""),
            Message::human("plain"),
            Message::ai("x").with_id("a").with_name(""),
            tricky,
            Message::new(Role::new("AIMessageChunk"), "chunk").with_id("c"),
            Message::human(Content::Blocks(vec![
                json!({"type": "text", "text": "t"}),
                json!("s"),
                json!({"type": "image_url", "image_url": {"url": "u", "detail": "auto"}}),
            ])),
            Message::ai("").with_tool_calls(vec![
                ToolCall::new(
                    "f",
                    json!({"b": [1, 2.5, 1e16, null], "a": {"z": true}}),
                    None,
                ),
                ToolCall::new("g\"", json!("scalar"), Some("id\n".into())),
            ]),
            Message::ai("").with_flag(
                "tool_calls",
                json!([{"id": "c", "function": {"name": "f"}}]),
            ),
            Message::ai("").with_flag("tool_calls", json!([])),
            Message::system("s").with_flag("hide_from_ui", true),
            h1(),
            a1(),
        ];
        for m in &messages {
            assert_eq!(signature_payload(m), reference_payload(m), "{m:?}");
            assert_eq!(
                message_signature(m),
                sha256_hex(reference_payload(m).as_bytes())
            );
        }
        // The reused buffer does not leak between messages.
        let long = Message::human("x".repeat(100_000));
        assert_eq!(
            message_signature(&long),
            sha256_hex(reference_payload(&long).as_bytes())
        );
        assert_eq!(
            message_signature(&h1()),
            sha256_hex(reference_payload(&h1()).as_bytes())
        );
    }

    #[test]
    fn legacy_tool_calls_in_additional_kwargs_count() {
        let legacy = Message::ai("").with_id("x").with_flag(
            "tool_calls",
            serde_json::json!([{"id": "c", "function": {"name": "f"}}]),
        );
        assert!(signature_payload(&legacy)
            .contains(r#""tool_calls":[{"function":{"name":"f"},"id":"c"}]"#));
    }
}
