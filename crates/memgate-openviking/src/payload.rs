//! Transcript messages as OpenViking session messages, converted the way the
//! official LangChain adapter converts them (`openviking-api` §8.2), so the
//! server's extraction sees the same conversation either way.
//!
//! - system messages and compaction summaries (`lc_source: summarization`)
//!   are not recorded;
//! - a human message is a `user` text part (even when empty);
//! - an AI message is an `assistant` message with its text (if any) and one
//!   `tool` part per tool call (`tool_status: pending`); an AI message with
//!   no text and no tool calls is not recorded;
//! - a tool result is an `assistant` `tool` part with the output and
//!   `tool_status` `error` or `completed`;
//! - anything else is recorded only when it has text.
//!
//! Every payload carries the peer id, so extraction writes peer memory.
//! Before a payload goes on the wire, [`redact_payload`] replaces secrets in
//! its parts (text, tool ids, names, inputs and outputs) with typed
//! placeholders.

use memgate_core::canonical_json::write_json_string;
use memgate_core::message::truthy;
use memgate_core::redaction::redact_json_strings;
use memgate_core::{Content, Message, Redactor, RoleKind, ToolCall};
use serde_json::{json, Map, Value};
use std::borrow::Cow;
use std::sync::Arc;

/// The adapter's text of a message: a string as is; for blocks, the
/// non-empty strings, `text` blocks and string `content` fields joined by
/// newlines (images and other blocks are dropped).
pub fn adapter_text(content: &Content) -> String {
    match content {
        Content::Text(s) => s.clone(),
        Content::Blocks(blocks) => blocks_text(blocks),
    }
}

/// [`adapter_text`] of content the caller gives up: a string is moved.
fn adapter_text_of(content: Content) -> String {
    match content {
        Content::Text(s) => s,
        Content::Blocks(blocks) => blocks_text(&blocks),
    }
}

fn blocks_text(blocks: &[Value]) -> String {
    let parts: Vec<&str> = blocks
        .iter()
        .filter_map(|block| match block {
            Value::String(s) => Some(s.as_str()),
            Value::Object(o) => {
                let is_text = o.get("type").and_then(Value::as_str) == Some("text");
                match (is_text, o.get("text"), o.get("content")) {
                    (true, Some(Value::String(t)), _) => Some(t.as_str()),
                    (_, _, Some(Value::String(c))) => Some(c.as_str()),
                    _ => None,
                }
            }
            _ => None,
        })
        .filter(|s| !s.is_empty())
        .collect();
    parts.join("\n")
}

/// One OpenViking session message as it goes on the wire. Typed instead of
/// a `serde_json::Value` tree (no map per message and part to build, walk
/// and drop), and written by [`WireMessage::write_wire`] with the eight-bytes
/// at a time escape scan signing uses: a capture's bodies hold every message's
/// text, and escaping them byte by byte was a visible share of its CPU.
#[derive(Clone, Debug, PartialEq)]
pub struct SessionMessage {
    pub parts: Vec<Part>,
    /// The peer whose memory extraction writes (`None` when blank): one
    /// string shared by every payload of a capture ([`payload_peer`]).
    pub peer_id: Option<Arc<str>>,
    /// `user` or `assistant`.
    pub role: &'static str,
}

/// One part of a session message.
#[derive(Clone, Debug, PartialEq)]
pub enum Part {
    /// `{"text", "type": "text"}`.
    Text { text: String },
    /// An AI message's tool call: `tool_status` `pending`.
    ToolCall {
        tool_id: String,
        tool_name: String,
        tool_input: Value,
    },
    /// A tool result: `tool_status` `error` or `completed`.
    ToolResult {
        tool_id: String,
        tool_name: String,
        tool_output: String,
        failed: bool,
    },
}

/// A message as a batch body holds it: compact JSON with sorted keys, the
/// bytes `serde_json` writes for the same message as a `Value` (so a queued
/// copy in the outbox goes out exactly as a direct send would).
pub trait WireMessage {
    /// Appends the message's JSON to `body`.
    fn write_wire(&self, body: &mut String);
}

impl WireMessage for SessionMessage {
    fn write_wire(&self, body: &mut String) {
        body.push_str("{\"parts\":[");
        for (i, part) in self.parts.iter().enumerate() {
            if i > 0 {
                body.push(',');
            }
            part.write_wire(body);
        }
        body.push(']');
        if let Some(peer) = &self.peer_id {
            body.push_str(",\"peer_id\":");
            write_json_string(body, peer);
        }
        body.push_str(",\"role\":");
        write_json_string(body, self.role);
        body.push('}');
    }
}

impl Part {
    fn write_wire(&self, body: &mut String) {
        match self {
            Part::Text { text } => {
                body.push_str("{\"text\":");
                write_json_string(body, text);
                body.push_str(",\"type\":\"text\"}");
            }
            Part::ToolCall {
                tool_id,
                tool_name,
                tool_input,
            } => {
                body.push_str("{\"tool_id\":");
                write_json_string(body, tool_id);
                body.push_str(",\"tool_input\":");
                push_value(body, tool_input);
                body.push_str(",\"tool_name\":");
                write_json_string(body, tool_name);
                body.push_str(",\"tool_status\":\"pending\",\"type\":\"tool\"}");
            }
            Part::ToolResult {
                tool_id,
                tool_name,
                tool_output,
                failed,
            } => {
                body.push_str("{\"tool_id\":");
                write_json_string(body, tool_id);
                body.push_str(",\"tool_name\":");
                write_json_string(body, tool_name);
                body.push_str(",\"tool_output\":");
                write_json_string(body, tool_output);
                body.push_str(if *failed {
                    ",\"tool_status\":\"error\",\"type\":\"tool\"}"
                } else {
                    ",\"tool_status\":\"completed\",\"type\":\"tool\"}"
                });
            }
        }
    }
}

/// A queued payload (the outbox's form) is written as `serde_json` writes it.
impl WireMessage for Value {
    fn write_wire(&self, body: &mut String) {
        push_value(body, self);
    }
}

/// Appends `value` as compact JSON. Through `serde_json`'s byte writer, not
/// `Value`'s `Display`: the same bytes, but `Display` writes them through the
/// `fmt::Write` adapter a piece at a time, 2.3–2.9× slower for a tool call's
/// arguments (`memgate-lab`'s `examples/value_writer.rs`).
fn push_value(body: &mut String, value: &Value) {
    // A `Value` always serializes: its map keys are strings.
    body.push_str(&serde_json::to_string(value).expect("a JSON value serializes"));
}

/// Tests compare payloads as JSON values; a capture writes them straight
/// into its buffer (`recorder::Prepared`).
#[cfg(test)]
impl SessionMessage {
    /// The message as a JSON value (the form the outbox queues).
    pub fn to_value(&self) -> Value {
        let mut text = String::new();
        self.write_wire(&mut text);
        serde_json::from_str(&text).unwrap_or(Value::Null)
    }
}

/// The peer id a capture's payloads carry: trimmed, `None` when blank.
pub fn payload_peer(peer_id: &str) -> Option<Arc<str>> {
    let peer = peer_id.trim();
    (!peer.is_empty()).then(|| Arc::from(peer))
}

/// The OpenViking payload of one message, or `None` when it is not recorded.
pub fn to_payload(message: &Message, peer_id: &str) -> Option<SessionMessage> {
    payload_of(Cow::Borrowed(message), payload_peer(peer_id).as_ref())
}

/// [`to_payload`] with the capture's shared peer. An owned message is given
/// up: the strings the payload carries move into it instead of being copied
/// (a first capture converts every message of the transcript).
pub fn payload_of(message: Cow<'_, Message>, peer: Option<&Arc<str>>) -> Option<SessionMessage> {
    let m: &Message = &message;
    if m.additional_kwargs.get("lc_source").and_then(Value::as_str) == Some("summarization") {
        return None;
    }
    let kind = m.role.kind();
    let named = |name: &str| m.role.as_str() == name;
    let (function, human) = (named("function"), named("human"));
    let legacy_calls = m.additional_kwargs.get("tool_calls").is_some_and(truthy);
    let failed = m.status.as_deref() == Some("error");
    let Carried {
        text,
        tool_calls,
        tool_call_id,
        name,
    } = Carried::from(message);
    let (role, parts) = match kind {
        RoleKind::System => return None,
        RoleKind::Human => ("user", vec![Part::Text { text }]),
        RoleKind::Ai => {
            if text.is_empty() && tool_calls.is_empty() && !legacy_calls {
                return None;
            }
            let mut parts = Vec::with_capacity(1 + tool_calls.len());
            if !text.is_empty() {
                parts.push(Part::Text { text });
            }
            for call in tool_calls {
                let tool_input = match call.args {
                    Value::Object(o) => Value::Object(o),
                    Value::Null => Value::Object(Map::new()),
                    other => json!({ "value": other }),
                };
                parts.push(Part::ToolCall {
                    tool_id: call.id.unwrap_or_default(),
                    tool_name: call.name,
                    tool_input,
                });
            }
            if parts.is_empty() {
                parts.push(Part::Text {
                    text: String::new(),
                });
            }
            ("assistant", parts)
        }
        RoleKind::Tool if !function => {
            let part = Part::ToolResult {
                tool_id: tool_call_id.unwrap_or_default(),
                tool_name: name.unwrap_or_default(),
                tool_output: text,
                failed,
            };
            ("assistant", vec![part])
        }
        RoleKind::Tool | RoleKind::Other => {
            if text.is_empty() {
                return None;
            }
            let role = if human { "user" } else { "assistant" };
            (role, vec![Part::Text { text }])
        }
    };
    Some(SessionMessage {
        parts,
        peer_id: peer.cloned(),
        role,
    })
}

/// What a payload carries of a message: moved out of an owned one, copied
/// from a borrowed one.
struct Carried {
    text: String,
    tool_calls: Vec<ToolCall>,
    tool_call_id: Option<String>,
    name: Option<String>,
}

impl Carried {
    fn from(message: Cow<'_, Message>) -> Self {
        match message {
            Cow::Owned(m) => Self {
                text: adapter_text_of(m.content),
                tool_calls: m.tool_calls,
                tool_call_id: m.tool_call_id,
                name: m.name,
            },
            Cow::Borrowed(m) => Self {
                text: adapter_text(&m.content),
                tool_calls: m.tool_calls.clone(),
                tool_call_id: m.tool_call_id.clone(),
                name: m.name.clone(),
            },
        }
    }
}

/// Replaces secrets in every string a part carries from the host (text,
/// tool ids and names, tool inputs and outputs); the fixed `type`,
/// `tool_status` and `role` words are memgate's own and are not scanned.
/// The message signature (computed earlier, over the host's message) is
/// unaffected.
pub fn redact_payload(payload: &mut SessionMessage, redactor: &Redactor) {
    for part in &mut payload.parts {
        match part {
            Part::Text { text } => redact_string(redactor, text),
            Part::ToolCall {
                tool_id,
                tool_name,
                tool_input,
            } => {
                redact_string(redactor, tool_id);
                redact_string(redactor, tool_name);
                redact_json_strings(redactor, tool_input);
            }
            Part::ToolResult {
                tool_id,
                tool_name,
                tool_output,
                ..
            } => {
                redact_string(redactor, tool_id);
                redact_string(redactor, tool_name);
                redact_string(redactor, tool_output);
            }
        }
    }
}

fn redact_string(redactor: &Redactor, text: &mut String) {
    let redaction = redactor.redact(text);
    if !redaction.is_clean() {
        *text = redaction.text.into_owned();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use memgate_core::Role;

    #[test]
    fn secrets_in_text_and_tool_parts_are_redacted() {
        let key = "ghp_0123456789abcdefghijABCDEFGHIJ012345";
        let call = Message::ai(format!("pushing with {key}")).with_tool_calls(vec![ToolCall::new(
            "git",
            json!({"token": key}),
            Some("c1".into()),
        )]);
        let mut p = to_payload(&call, "p").unwrap();
        redact_payload(&mut p, &Redactor::default());
        let p = p.to_value();
        assert!(!p.to_string().contains(key), "{p}");
        assert_eq!(p["parts"][0]["text"], "pushing with [redacted:token]");
        assert_eq!(p["parts"][1]["tool_input"]["token"], "[redacted:token]");
        assert_eq!(p["peer_id"], "p");
    }

    #[test]
    fn conversion_follows_the_official_adapter() {
        let human = to_payload(&Message::human("I prefer tea."), "research")
            .unwrap()
            .to_value();
        assert_eq!(
            human,
            json!({"role": "user", "parts": [{"type": "text", "text": "I prefer tea."}], "peer_id": "research"})
        );
        let empty_human = to_payload(&Message::human(""), "p").unwrap().to_value();
        assert_eq!(empty_human["parts"], json!([{"type": "text", "text": ""}]));

        let call = Message::ai("").with_tool_calls(vec![
            ToolCall::new("search", json!({"q": "x"}), Some("c1".into())),
            ToolCall::new("calc", json!(3), None),
            ToolCall::new("noop", Value::Null, Some("c3".into())),
        ]);
        let p = to_payload(&call, "p").unwrap().to_value();
        assert_eq!(p["role"], "assistant");
        assert_eq!(
            p["parts"],
            json!([
                {"type": "tool", "tool_id": "c1", "tool_name": "search", "tool_input": {"q": "x"}, "tool_status": "pending"},
                {"type": "tool", "tool_id": "", "tool_name": "calc", "tool_input": {"value": 3}, "tool_status": "pending"},
                {"type": "tool", "tool_id": "c3", "tool_name": "noop", "tool_input": {}, "tool_status": "pending"}
            ])
        );
        let mut failed = Message::tool("boom", "c1").with_name("search");
        failed.status = Some("error".into());
        assert_eq!(
            to_payload(&failed, "p").unwrap().to_value()["parts"],
            json!([{"type": "tool", "tool_id": "c1", "tool_name": "search", "tool_output": "boom", "tool_status": "error"}])
        );
        assert_eq!(
            to_payload(&Message::tool("ok", "c2"), "p")
                .unwrap()
                .to_value()["parts"][0]["tool_status"],
            "completed"
        );
    }

    #[test]
    fn unrecorded_messages() {
        assert!(to_payload(&Message::system("rules"), "p").is_none());
        assert!(to_payload(&Message::ai(""), "p").is_none());
        let summary = Message::human("summary").with_flag("lc_source", "summarization");
        assert!(to_payload(&summary, "p").is_none());
        let other_empty = Message::new(Role::new("chat"), "");
        assert!(to_payload(&other_empty, "p").is_none());
        let other = to_payload(&Message::new(Role::new("chat"), "hi"), "p")
            .unwrap()
            .to_value();
        assert_eq!(other["role"], "assistant");
        // A legacy tool call in additional_kwargs makes an empty AI message recordable.
        let legacy = Message::ai("").with_flag("tool_calls", json!([{"id": "c"}]));
        assert_eq!(
            to_payload(&legacy, "p").unwrap().to_value()["parts"],
            json!([{"type": "text", "text": ""}])
        );
    }

    #[test]
    fn block_text_is_joined_and_images_dropped() {
        let content = Content::Blocks(vec![
            json!({"type": "text", "text": "a"}),
            json!("b"),
            json!({"type": "image_url", "image_url": {"url": "x"}}),
            json!({"content": "c"}),
            json!({"type": "text", "text": ""}),
        ]);
        assert_eq!(adapter_text(&content), "a\nb\nc");
        let m = Message::human(content);
        assert_eq!(
            to_payload(&m, "p").unwrap().to_value()["parts"][0]["text"],
            "a\nb\nc"
        );
    }

    #[test]
    fn the_wire_form_is_the_value_forms_bytes() {
        // Sorted keys, as a `Value` (and so the outbox's queued copy) writes them.
        let mut failed = Message::tool("boom", "c9").with_name("search");
        failed.status = Some("error".into());
        let messages = [
            Message::human("I prefer tea."),
            Message::ai("looking").with_tool_calls(vec![ToolCall::new(
                "search",
                json!({"q": "x", "a": [1, "two"]}),
                Some("c1".into()),
            )]),
            Message::tool("found", "c1").with_name("search"),
            failed,
        ];
        for m in &messages {
            let typed = to_payload(m, " research ").unwrap();
            let value = typed.to_value();
            assert_eq!(wire(&typed), value.to_string());
            assert_eq!(value["peer_id"], "research");
        }
        let no_peer = to_payload(&Message::human("x"), "  ").unwrap();
        assert_eq!(
            wire(&no_peer),
            r#"{"parts":[{"text":"x","type":"text"}],"role":"user"}"#
        );
    }

    fn wire(message: &SessionMessage) -> String {
        let mut body = String::new();
        message.write_wire(&mut body);
        body
    }

    #[test]
    fn the_wire_form_escapes_strings_as_serde_json_does() {
        // Every byte serde_json escapes, quotes and backslashes, text beyond
        // ASCII, and runs long enough for the eight-byte scan, in every
        // string field of every part kind.
        let mut samples: Vec<String> = (0u8..0x20).map(|b| format!("a{}b", b as char)).collect();
        samples.extend(
            [
                "plain",
                "",
                "say \"hi\"",
                "C:\\path\\x",
                "caf\u{e9} \u{1f600} \u{7f}",
                "a long run of plain text before\nthe line break and \"a quote\" at the end\\",
            ]
            .map(String::from),
        );
        for s in &samples {
            let message = SessionMessage {
                parts: vec![
                    Part::Text { text: s.clone() },
                    Part::ToolCall {
                        tool_id: s.clone(),
                        tool_name: s.clone(),
                        tool_input: json!({ "q": s, "n": [1, 2.5, null, true] }),
                    },
                    Part::ToolResult {
                        tool_id: s.clone(),
                        tool_name: s.clone(),
                        tool_output: s.clone(),
                        failed: s.len() % 2 == 0,
                    },
                ],
                peer_id: Some(Arc::from(s.as_str())),
                role: "assistant",
            };
            let written = wire(&message);
            let parsed: Value = serde_json::from_str(&written).unwrap();
            assert_eq!(parsed["parts"][0]["text"], json!(s));
            assert_eq!(parsed["parts"][2]["tool_output"], json!(s));
            assert_eq!(serde_json::to_string(&parsed).unwrap(), written, "{s:?}");
        }
    }

    #[test]
    fn a_message_given_up_makes_the_payload_a_borrowed_one_makes() {
        let mut failed = Message::tool("boom", "c9").with_name("search");
        failed.status = Some("error".into());
        let mut summary = Message::ai("earlier turns");
        summary
            .additional_kwargs
            .insert("lc_source".into(), json!("summarization"));
        let blocks = Message::new(
            Role::new("human"),
            Content::Blocks(vec![json!("a"), json!({"type": "text", "text": "b"})]),
        );
        let messages = [
            Message::human("I prefer tea."),
            Message::ai("").with_tool_calls(vec![
                ToolCall::new("search", json!({"q": "x"}), Some("c1".into())),
                ToolCall::new("calc", json!(3), None),
                ToolCall::new("noop", Value::Null, Some("c3".into())),
            ]),
            Message::tool("found", "c1").with_name("search"),
            Message::new(Role::new("function"), "f"),
            Message::new(Role::new("chat"), "hi"),
            Message::system("rules"),
            Message::ai(""),
            failed,
            summary,
            blocks,
        ];
        let peer = payload_peer(" research ");
        for m in &messages {
            let borrowed = payload_of(Cow::Borrowed(m), peer.as_ref());
            assert_eq!(
                payload_of(Cow::Owned(m.clone()), peer.as_ref()),
                borrowed,
                "{m:?}"
            );
            assert_eq!(to_payload(m, " research "), borrowed, "{m:?}");
        }
        assert_eq!(payload_peer("  "), None);
    }

    #[test]
    fn host_strings_are_redacted_and_fixed_words_are_not() {
        // A custom rule that would match memgate's own words if they were scanned.
        let settings = memgate_core::redaction::RedactionSettings {
            custom_rules: vec![memgate_core::redaction::CustomRule {
                name: "word".into(),
                pattern: "(?:text|tool|pending|completed|assistant|secretword)".into(),
            }],
            ..Default::default()
        };
        let redactor = Redactor::new(&settings).unwrap();
        let call = Message::ai("a secretword").with_tool_calls(vec![ToolCall::new(
            "secretword",
            json!({"k": ["secretword"]}),
            Some("secretword-id".into()),
        )]);
        let mut p = to_payload(&call, "p").unwrap();
        redact_payload(&mut p, &redactor);
        let p = p.to_value();
        assert!(!p.to_string().contains("secretword"), "{p}");
        assert_eq!(p["role"], "assistant");
        assert_eq!(p["parts"][0]["type"], "text");
        assert_eq!(p["parts"][1]["type"], "tool");
        assert_eq!(p["parts"][1]["tool_status"], "pending");
        let mut result = to_payload(
            &Message::tool("secretword", "secretword-id").with_name("secretword"),
            "p",
        )
        .unwrap();
        redact_payload(&mut result, &redactor);
        let result = result.to_value();
        assert!(!result.to_string().contains("secretword"), "{result}");
        assert_eq!(result["parts"][0]["tool_status"], "completed");
    }
}
