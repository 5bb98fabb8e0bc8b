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
use sha2::digest::generic_array::GenericArray;
use sha2::{Digest, Sha256};
use std::cell::RefCell;
use xxhash_rust::xxh3::Xxh3Default;

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

/// A fast fingerprint of a run of messages: XXH3-128 over every field a
/// signature covers, as raw values with tags and lengths (no canonical
/// JSON for plain strings, no SHA-256, no hex per message). A cursor keeps
/// the fingerprint of its prefix beside DeerFlow's signatures, so the next
/// capture of a grown transcript checks its head with this and computes
/// signatures only for what follows it.
///
/// Two runs with equal fields have equal fingerprints; any difference in a
/// signed field changes it (the encoding is injective), so a head that
/// matches is a head whose signatures match. It is not a cryptographic
/// hash: a crafted collision could at most hide an edit of the head from
/// capture (the edit is not sent); it cannot make anything be sent twice.
/// The encoding is stricter than the signature's (an empty string and a
/// missing field differ), which only sends such a head down the signing
/// path.
#[derive(Clone, Default)]
pub struct HeadFingerprint {
    hasher: Xxh3Default,
    /// One message's encoding, staged so the hasher sees one update each.
    staged: Vec<u8>,
    /// Canonical JSON of nested values (content blocks, tool arguments).
    json: String,
}

impl std::fmt::Debug for HeadFingerprint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "HeadFingerprint({})", self.value())
    }
}

impl HeadFingerprint {
    /// Absorbs the next message.
    pub fn absorb(&mut self, m: &SignatureFields<'_>) {
        self.staged.clear();
        self.optional(b'i', m.id);
        self.text(b'r', m.role);
        match m.content {
            ContentRef::Text(s) => self.text(b'c', s),
            ContentRef::Blocks(blocks) => {
                self.json.clear();
                write_python_json_array(&mut self.json, blocks);
                self.staged_json(b'b');
            }
        }
        self.staged.push(b'k');
        self.staged
            .extend_from_slice(&(m.tool_calls.len() as u64).to_le_bytes());
        for call in m.tool_calls {
            self.json.clear();
            write_python_json(&mut self.json, &call.args);
            self.staged_json(b'a');
            self.optional(b'd', call.id.as_deref());
            self.text(b'n', &call.name);
            self.text(b't', &call.call_type);
        }
        match m.legacy_tool_calls {
            Some(v) if m.tool_calls.is_empty() && truthy(v) => {
                self.json.clear();
                write_python_json(&mut self.json, v);
                self.staged_json(b'l');
            }
            _ => self.staged.push(b'L'),
        }
        self.optional(b'o', m.tool_call_id);
        self.optional(b'm', m.tool_name);
        self.optional(b's', m.tool_status);
        self.hasher.update(&self.staged);
    }

    fn text(&mut self, tag: u8, value: &str) {
        self.staged.push(tag);
        self.staged
            .extend_from_slice(&(value.len() as u64).to_le_bytes());
        self.staged.extend_from_slice(value.as_bytes());
    }

    fn optional(&mut self, tag: u8, value: Option<&str>) {
        match value {
            Some(v) => self.text(tag, v),
            None => self.staged.push(tag.to_ascii_uppercase()),
        }
    }

    fn staged_json(&mut self, tag: u8) {
        let json = std::mem::take(&mut self.json);
        self.text(tag, &json);
        self.json = json;
    }

    /// The fingerprint of what was absorbed: 32 lowercase hex digits.
    pub fn value(&self) -> String {
        hex(&self.hasher.digest128().to_be_bytes())
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
///
/// The SHA-256 is kept as its raw state ([`sha2::compress256`] over whole
/// blocks, the partial block buffered) so that state can be written down
/// ([`PrefixState`]) and resumed by a later capture: a cursor that holds it
/// lets the next capture extend the prefix digest without the signatures of
/// the messages before it.
#[derive(Clone, Debug)]
pub struct SequenceHasher {
    state: [u32; 8],
    block: [u8; 64],
    /// Bytes of `block` in use (always < 64).
    buffered: usize,
    /// Bytes hashed so far, `block` included.
    bytes: u64,
    absorbed: usize,
}

/// SHA-256's initial state (FIPS 180-4 §5.3.3).
const SHA256_INITIAL: [u32; 8] = [
    0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a, 0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19,
];

impl Default for SequenceHasher {
    fn default() -> Self {
        Self {
            state: SHA256_INITIAL,
            block: [0; 64],
            buffered: 0,
            bytes: 0,
            absorbed: 0,
        }
    }
}

fn compress(state: &mut [u32; 8], blocks: &[u8]) {
    for block in blocks.chunks_exact(64) {
        sha2::compress256(state, std::slice::from_ref(GenericArray::from_slice(block)));
    }
}

impl SequenceHasher {
    /// Absorbs the next signatures of the list.
    pub fn absorb<S: AsRef<str>>(&mut self, signatures: &[S]) {
        for sig in signatures {
            let bytes = sig.as_ref().as_bytes();
            self.update(&(bytes.len() as u64).to_be_bytes());
            self.update(bytes);
        }
        self.absorbed += signatures.len();
    }

    fn update(&mut self, mut data: &[u8]) {
        self.bytes += data.len() as u64;
        if self.buffered > 0 {
            let take = (64 - self.buffered).min(data.len());
            self.block[self.buffered..self.buffered + take].copy_from_slice(&data[..take]);
            self.buffered += take;
            data = &data[take..];
            if self.buffered < 64 {
                return;
            }
            compress(&mut self.state, &self.block);
            self.buffered = 0;
        }
        let whole = data.len() / 64 * 64;
        compress(&mut self.state, &data[..whole]);
        let rest = &data[whole..];
        self.block[..rest.len()].copy_from_slice(rest);
        self.buffered = rest.len();
    }

    /// How many signatures were absorbed (the prefix length).
    pub fn absorbed(&self) -> usize {
        self.absorbed
    }

    /// The [`sequence_digest`] of the absorbed prefix.
    pub fn digest(&self) -> String {
        // FIPS 180-4 §5.1.1: 0x80, zeros, the message length in bits.
        let mut state = self.state;
        let mut last = [0u8; 128];
        last[..self.buffered].copy_from_slice(&self.block[..self.buffered]);
        last[self.buffered] = 0x80;
        let len = if self.buffered + 9 <= 64 { 64 } else { 128 };
        last[len - 8..len].copy_from_slice(&(self.bytes * 8).to_be_bytes());
        compress(&mut state, &last[..len]);
        let mut out = [0u8; 32];
        for (chunk, word) in out.chunks_exact_mut(4).zip(state) {
            chunk.copy_from_slice(&word.to_be_bytes());
        }
        hex(&out)
    }

    /// The state to write down and [`resume`](Self::resume) from.
    pub fn state(&self) -> PrefixState {
        let mut words = [0u8; 32];
        for (chunk, word) in words.chunks_exact_mut(4).zip(self.state) {
            chunk.copy_from_slice(&word.to_be_bytes());
        }
        PrefixState {
            absorbed: self.absorbed as u64,
            bytes: self.bytes,
            state: hex(&words),
            block: hex(&self.block[..self.buffered]),
        }
    }

    /// The hasher a [`PrefixState`] describes, or `None` when it does not
    /// describe one (wrong lengths, not hex).
    pub fn resume(saved: &PrefixState) -> Option<Self> {
        let words = unhex(&saved.state)?;
        let block = unhex(&saved.block)?;
        if words.len() != 32 || block.len() as u64 != saved.bytes % 64 {
            return None;
        }
        let mut state = [0u32; 8];
        for (word, chunk) in state.iter_mut().zip(words.chunks_exact(4)) {
            *word = u32::from_be_bytes(chunk.try_into().ok()?);
        }
        let mut hasher = Self {
            state,
            bytes: saved.bytes,
            buffered: block.len(),
            absorbed: usize::try_from(saved.absorbed).ok()?,
            ..Self::default()
        };
        hasher.block[..block.len()].copy_from_slice(&block);
        Some(hasher)
    }
}

/// A [`SequenceHasher`] written down: the signatures absorbed, the bytes
/// hashed, SHA-256's state after the whole blocks (64 hex digits) and the
/// partial block (hex). It reveals no more than the digest it leads to.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PrefixState {
    pub absorbed: u64,
    pub bytes: u64,
    pub state: String,
    pub block: String,
}

/// Lowercase hex back to bytes; `None` for anything else.
fn unhex(text: &str) -> Option<Vec<u8>> {
    let digit = |b: u8| match b {
        b'0'..=b'9' => Some(b - b'0'),
        b'a'..=b'f' => Some(b - b'a' + 10),
        _ => None,
    };
    let bytes = text.as_bytes();
    if !bytes.len().is_multiple_of(2) {
        return None;
    }
    bytes
        .chunks_exact(2)
        .map(|pair| Some(digit(pair[0])? << 4 | digit(pair[1])?))
        .collect()
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
    fn a_written_down_prefix_state_resumes_to_the_same_digests() {
        // Signatures of every length around the 64-byte block, so the saved
        // partial block takes every size.
        let sigs: Vec<String> = (0..70).map(|i| "s".repeat(i % 67)).collect();
        for split in [0, 1, 2, 7, 8, 9, 33, 64, 69, 70] {
            let mut first = SequenceHasher::default();
            first.absorb(&sigs[..split]);
            let saved = first.state();
            assert_eq!(saved.absorbed, split as u64);
            let mut resumed = SequenceHasher::resume(&saved).expect("a state it wrote");
            assert_eq!(resumed.digest(), sequence_digest(&sigs[..split]));
            resumed.absorb(&sigs[split..]);
            assert_eq!(resumed.absorbed(), sigs.len());
            assert_eq!(resumed.digest(), sequence_digest(&sigs));
        }
        // The raw state agrees with the reference SHA-256 on the same bytes.
        let mut bytes = Vec::new();
        for sig in &sigs {
            bytes.extend_from_slice(&(sig.len() as u64).to_be_bytes());
            bytes.extend_from_slice(sig.as_bytes());
        }
        assert_eq!(sequence_digest(&sigs), sha256_hex(&bytes));
    }

    #[test]
    fn a_state_that_describes_no_hasher_is_refused() {
        let mut running = SequenceHasher::default();
        running.absorb(&["abc"]);
        let good = running.state();
        let bad = [
            PrefixState {
                block: format!("{}00", good.block),
                ..good.clone()
            },
            PrefixState {
                state: good.state[..62].to_owned(),
                ..good.clone()
            },
            PrefixState {
                state: good.state.to_uppercase(),
                ..good.clone()
            },
            PrefixState {
                bytes: good.bytes + 1,
                ..good.clone()
            },
        ];
        for state in bad {
            assert!(SequenceHasher::resume(&state).is_none(), "{state:?}");
        }
    }

    fn fingerprint(messages: &[Message]) -> String {
        let mut fp = HeadFingerprint::default();
        for m in messages {
            fp.absorb(&m.signature_fields());
        }
        fp.value()
    }

    #[test]
    fn a_fingerprint_changes_with_every_signed_field() {
        let call = |args: serde_json::Value, id: &str| {
            Message::ai("")
                .with_id("a")
                .with_tool_calls(vec![ToolCall::new("search", args, Some(id.into()))])
        };
        let base = vec![h1(), a1(), call(serde_json::json!({"q": 1}), "c1")];
        let same = fingerprint(&base);
        assert_eq!(same.len(), 32);
        assert_eq!(fingerprint(&base.clone()), same);
        let mut failed = Message::tool("r", "c1").with_id("t1");
        failed.status = Some("error".into());
        let variants: Vec<Vec<Message>> = vec![
            vec![
                Message::human("Remember Vi.").with_id("h1"),
                a1(),
                base[2].clone(),
            ],
            vec![
                Message::human("Remember Vim.").with_id("h2"),
                a1(),
                base[2].clone(),
            ],
            vec![
                Message::ai("Remember Vim.").with_id("h1"),
                a1(),
                base[2].clone(),
            ],
            vec![h1(), a1(), call(serde_json::json!({"q": 2}), "c1")],
            vec![h1(), a1(), call(serde_json::json!({"q": 1}), "c2")],
            vec![a1(), h1(), base[2].clone()],
            vec![h1(), a1()],
            vec![
                h1(),
                a1(),
                base[2].clone(),
                Message::tool("r", "c1").with_id("t1"),
            ],
            vec![h1(), a1(), base[2].clone(), failed],
            vec![
                h1(),
                a1(),
                base[2].clone(),
                Message::tool("r", "c9").with_id("t1"),
            ],
            // A boundary moved between two fields is a different encoding.
            vec![Message::human("ab").with_id("c"), a1(), base[2].clone()],
            vec![Message::human("a").with_id("bc"), a1(), base[2].clone()],
        ];
        let mut seen = std::collections::HashSet::from([same]);
        for v in &variants {
            assert!(seen.insert(fingerprint(v)), "a collision for {v:?}");
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
