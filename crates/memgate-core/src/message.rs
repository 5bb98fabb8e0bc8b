//! Transcript messages as hosts send them.
//!
//! The shape follows LangChain's `BaseMessage` (what DeerFlow passes to memory
//! backends): `type` (or `role` for plain dicts), `id`, `content` as a string
//! or a list of blocks, `tool_calls`, `tool_call_id`, `name`, `status` and
//! `additional_kwargs` with the host's flags. Parsing is tolerant: unknown
//! fields are ignored, `null` reads as absent, a non-object
//! `additional_kwargs` reads as empty. The role keeps the spelling the host
//! used, because message signatures hash it verbatim.

use crate::{MemoryError, Result};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use std::borrow::Cow;
use std::fmt;

/// The role of a message, spelled as the host spelled it (`human`, `user`,
/// `ai`, `assistant`, `AIMessageChunk`, `tool`, `system`, …).
#[derive(Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(transparent)]
pub struct Role(Cow<'static, str>);

/// What a role means, whatever its spelling.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum RoleKind {
    Human,
    Ai,
    Tool,
    System,
    Other,
}

/// The spellings hosts send on nearly every message: a role read with one
/// of these holds it without an allocation.
const COMMON_SPELLINGS: &[&str] = &["human", "ai", "tool", "system", "user", "assistant"];

impl Role {
    pub fn new(spelling: impl Into<String>) -> Self {
        Self(Cow::Owned(spelling.into()))
    }

    /// The role spelled `spelling`, read from a host: a common spelling is
    /// held without copying it (a transcript converts one per message).
    pub fn spelled(spelling: &str) -> Self {
        match COMMON_SPELLINGS.iter().find(|common| **common == spelling) {
            Some(common) => Self(Cow::Borrowed(common)),
            None => Self::new(spelling),
        }
    }
    pub fn human() -> Self {
        Self::spelled("human")
    }
    pub fn ai() -> Self {
        Self::spelled("ai")
    }
    pub fn tool() -> Self {
        Self::spelled("tool")
    }
    pub fn system() -> Self {
        Self::spelled("system")
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }

    pub fn kind(&self) -> RoleKind {
        match self.as_str() {
            "human" | "user" | "HumanMessageChunk" => RoleKind::Human,
            "ai" | "assistant" | "AIMessageChunk" => RoleKind::Ai,
            "tool" | "function" | "ToolMessageChunk" => RoleKind::Tool,
            "system" | "developer" | "SystemMessageChunk" => RoleKind::System,
            _ => RoleKind::Other,
        }
    }
}

impl fmt::Debug for Role {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Role({:?})", self.0)
    }
}

/// Message content: a plain string or a list of content blocks (strings or
/// objects such as `{"type":"text","text":…}` or image blocks), kept verbatim.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(untagged)]
pub enum Content {
    Text(String),
    Blocks(Vec<Value>),
}

impl Default for Content {
    fn default() -> Self {
        Content::Text(String::new())
    }
}

impl From<&str> for Content {
    fn from(s: &str) -> Self {
        Content::Text(s.to_owned())
    }
}

impl From<String> for Content {
    fn from(s: String) -> Self {
        Content::Text(s)
    }
}

impl Content {
    /// The readable text: the string itself, or the text of string blocks and
    /// `text` blocks joined by newlines. Non-text blocks (images, files) are
    /// left out.
    pub fn text(&self) -> String {
        match self {
            Content::Text(s) => s.clone(),
            Content::Blocks(blocks) => {
                let parts: Vec<&str> = blocks
                    .iter()
                    .filter_map(|b| match b {
                        Value::String(s) => Some(s.as_str()),
                        Value::Object(o) => match o.get("type").and_then(Value::as_str) {
                            Some("text") | None => o.get("text").and_then(Value::as_str),
                            _ => None,
                        },
                        _ => None,
                    })
                    .collect();
                parts.join("\n")
            }
        }
    }

    pub fn to_value(&self) -> Value {
        match self {
            Content::Text(s) => Value::String(s.clone()),
            Content::Blocks(b) => Value::Array(b.clone()),
        }
    }
}

/// A tool call on an AI message, in LangChain's `{name, args, id, type}` form.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct ToolCall {
    pub name: String,
    #[serde(default = "empty_object")]
    pub args: Value,
    #[serde(default)]
    pub id: Option<String>,
    #[serde(rename = "type", default = "tool_call_type")]
    pub call_type: String,
}

fn empty_object() -> Value {
    Value::Object(Map::new())
}

fn tool_call_type() -> String {
    "tool_call".to_owned()
}

impl ToolCall {
    pub fn new(name: impl Into<String>, args: Value, id: Option<String>) -> Self {
        Self {
            name: name.into(),
            args,
            id,
            call_type: tool_call_type(),
        }
    }
}

/// One transcript message.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(try_from = "RawMessage")]
pub struct Message {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub id: Option<String>,
    #[serde(rename = "type")]
    pub role: Role,
    pub content: Content,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub tool_calls: Vec<ToolCall>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tool_call_id: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub status: Option<String>,
    #[serde(skip_serializing_if = "Map::is_empty")]
    pub additional_kwargs: Map<String, Value>,
}

/// The lenient wire form: either `type` or `role`, `tool_id`/`tool_name`/
/// `tool_status` aliases, and `null` anywhere an optional value may be.
#[derive(Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
// The HTTP API refuses unknown message fields (`refuse_unknown_message_fields`);
// the in-process path tolerates them, so only the schema says so.
#[cfg_attr(feature = "schema", schemars(deny_unknown_fields))]
struct RawMessage {
    #[serde(default)]
    id: Option<Value>,
    #[serde(default, rename = "type")]
    kind: Option<String>,
    #[serde(default)]
    role: Option<String>,
    #[serde(default)]
    content: Option<Content>,
    #[serde(default)]
    tool_calls: Option<Vec<ToolCall>>,
    #[serde(default)]
    tool_call_id: Option<String>,
    #[serde(default)]
    tool_id: Option<String>,
    #[serde(default)]
    name: Option<String>,
    #[serde(default)]
    tool_name: Option<String>,
    #[serde(default)]
    status: Option<String>,
    #[serde(default)]
    tool_status: Option<String>,
    #[serde(default)]
    additional_kwargs: Option<Value>,
}

impl TryFrom<RawMessage> for Message {
    type Error = String;

    fn try_from(raw: RawMessage) -> std::result::Result<Self, String> {
        let role = raw
            .kind
            .filter(|s| !s.is_empty())
            .or(raw.role.filter(|s| !s.is_empty()))
            .ok_or_else(|| "message needs a non-empty `type` or `role`".to_owned())?;
        let id = match raw.id {
            None | Some(Value::Null) => None,
            Some(Value::String(s)) => Some(s),
            Some(Value::Number(n)) => Some(n.to_string()),
            Some(_) => return Err("message `id` must be a string".to_owned()),
        };
        let additional_kwargs = match raw.additional_kwargs {
            Some(Value::Object(map)) => map,
            _ => Map::new(),
        };
        Ok(Message {
            id,
            role: Role(Cow::Owned(role)),
            content: raw.content.unwrap_or_default(),
            tool_calls: raw.tool_calls.unwrap_or_default(),
            tool_call_id: raw.tool_call_id.or(raw.tool_id),
            name: raw.name.or(raw.tool_name),
            status: raw.status.or(raw.tool_status),
            additional_kwargs,
        })
    }
}

/// The fields a message may carry on memgate's own wire (the names
/// [`RawMessage`] reads, aliases included). The in-process path takes a
/// host's message objects as they are, framework fields and all; memgate's
/// HTTP API is strict instead ([`refuse_unknown_message_fields`]), so a
/// misspelt field is an error rather than silently dropped text.
pub const MESSAGE_FIELDS: &[&str] = &[
    "id",
    "type",
    "role",
    "content",
    "tool_calls",
    "tool_call_id",
    "tool_id",
    "name",
    "tool_name",
    "status",
    "tool_status",
    "additional_kwargs",
];

/// Refuses the first field of `messages` (a JSON list of message objects)
/// that [`MESSAGE_FIELDS`] does not name, as `messages[i].field`.
/// Host-specific data belongs in `additional_kwargs`.
pub fn refuse_unknown_message_fields(messages: &[Value]) -> crate::Result<()> {
    for (i, message) in messages.iter().enumerate() {
        let Some(fields) = message.as_object() else {
            continue; // the shape itself is the deserializer's error
        };
        if let Some(unknown) = fields
            .keys()
            .find(|k| !MESSAGE_FIELDS.contains(&k.as_str()))
        {
            return Err(crate::MemoryError::invalid(
                format!("messages[{i}].{unknown}"),
                format!(
                    "unknown message field; a message has {} (put host data in additional_kwargs)",
                    MESSAGE_FIELDS.join(", ")
                ),
            ));
        }
    }
    Ok(())
}

/// Python-style truthiness of a JSON value (how the host reads its flags).
pub fn truthy(v: &Value) -> bool {
    match v {
        Value::Null => false,
        Value::Bool(b) => *b,
        Value::Number(n) => n.as_f64().is_some_and(|f| f != 0.0),
        Value::String(s) => !s.is_empty(),
        Value::Array(a) => !a.is_empty(),
        Value::Object(o) => !o.is_empty(),
    }
}

/// Id suffix of the hidden message that carries injected memory.
pub const MEMORY_ID_SUFFIX: &str = "__memory";
/// Id suffix of the user's message re-issued after an injection.
pub const USER_ID_SUFFIX: &str = "__user";

impl Message {
    pub fn new(role: Role, content: impl Into<Content>) -> Self {
        Message {
            id: None,
            role,
            content: content.into(),
            tool_calls: Vec::new(),
            tool_call_id: None,
            name: None,
            status: None,
            additional_kwargs: Map::new(),
        }
    }

    pub fn human(content: impl Into<Content>) -> Self {
        Self::new(Role::human(), content)
    }

    pub fn ai(content: impl Into<Content>) -> Self {
        Self::new(Role::ai(), content)
    }

    pub fn system(content: impl Into<Content>) -> Self {
        Self::new(Role::system(), content)
    }

    /// A tool result; LangChain's `ToolMessage.status` defaults to `success`.
    pub fn tool(content: impl Into<Content>, tool_call_id: impl Into<String>) -> Self {
        let mut m = Self::new(Role::tool(), content);
        m.tool_call_id = Some(tool_call_id.into());
        m.status = Some("success".to_owned());
        m
    }

    pub fn with_id(mut self, id: impl Into<String>) -> Self {
        self.id = Some(id.into());
        self
    }

    pub fn with_name(mut self, name: impl Into<String>) -> Self {
        self.name = Some(name.into());
        self
    }

    pub fn with_flag(mut self, key: &str, value: impl Into<Value>) -> Self {
        self.additional_kwargs.insert(key.to_owned(), value.into());
        self
    }

    pub fn with_tool_calls(mut self, calls: Vec<ToolCall>) -> Self {
        self.tool_calls = calls;
        self
    }

    fn flag(&self, key: &str) -> bool {
        self.additional_kwargs.get(key).is_some_and(truthy)
    }

    /// `additional_kwargs.hide_from_ui` is set: the host hides it from the user
    /// (date reminders, injected memory, framework messages).
    pub fn is_hidden(&self) -> bool {
        self.flag("hide_from_ui")
    }

    /// The host's dynamic-context reminder flag (date reminders and the
    /// injected memory message carry it).
    pub fn is_dynamic_context_reminder(&self) -> bool {
        self.flag("dynamic_context_reminder")
    }

    /// The hidden user-role message that carries injected memory
    /// (`X__memory`). Capturing it would make memory feed on itself.
    pub fn is_injected_memory(&self) -> bool {
        self.id
            .as_deref()
            .is_some_and(|id| id.ends_with(MEMORY_ID_SUFFIX))
            && (self.is_dynamic_context_reminder() || self.is_hidden())
    }

    /// A summary produced by compaction (`name == "summary"` or LangChain's
    /// `lc_source == "summarization"`).
    pub fn is_summary(&self) -> bool {
        self.name.as_deref() == Some("summary")
            || self
                .additional_kwargs
                .get("lc_source")
                .and_then(Value::as_str)
                == Some("summarization")
    }

    /// The readable text of the content.
    pub fn text(&self) -> String {
        self.content.text()
    }
}

/// Parses a transcript: a JSON array of messages, an object with a
/// `messages` array, or JSON Lines (one message per line). Errors name the
/// message index (or line) and the rule that was broken.
pub fn parse_transcript(bytes: &[u8]) -> Result<Vec<Message>> {
    let text = std::str::from_utf8(bytes).map_err(|e| {
        MemoryError::invalid(
            "transcript",
            format!("must be UTF-8 (invalid byte at offset {})", e.valid_up_to()),
        )
    })?;
    let trimmed = text.trim_start_matches('\u{feff}').trim();
    if trimmed.is_empty() {
        return Err(MemoryError::invalid("transcript", "is empty"));
    }
    if trimmed.starts_with('[') || trimmed.starts_with('{') && !looks_like_jsonl(trimmed) {
        let value: Value = serde_json::from_str(trimmed)
            .map_err(|e| MemoryError::invalid("transcript", format!("is not valid JSON: {e}")))?;
        let list = match value {
            Value::Array(list) => list,
            Value::Object(mut obj) => match obj.remove("messages") {
                Some(Value::Array(list)) => list,
                _ => {
                    return Err(MemoryError::invalid(
                        "transcript",
                        "a JSON object must carry a `messages` array",
                    ))
                }
            },
            _ => unreachable!("starts with [ or {{"),
        };
        return list
            .into_iter()
            .enumerate()
            .map(|(i, v)| {
                serde_json::from_value(v)
                    .map_err(|e| MemoryError::invalid(format!("messages[{i}]"), e.to_string()))
            })
            .collect();
    }
    trimmed
        .lines()
        .enumerate()
        .filter(|(_, line)| !line.trim().is_empty())
        .map(|(n, line)| {
            serde_json::from_str(line)
                .map_err(|e| MemoryError::invalid(format!("line {}", n + 1), e.to_string()))
        })
        .collect()
}

/// JSON Lines: more than one line, and the first line is a complete object.
fn looks_like_jsonl(text: &str) -> bool {
    let mut lines = text.lines().filter(|l| !l.trim().is_empty());
    match (lines.next(), lines.next()) {
        (Some(first), Some(_)) => serde_json::from_str::<Value>(first).is_ok(),
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_role_spelled_by_a_host_is_the_role_of_that_spelling() {
        for spelling in [
            "human",
            "ai",
            "tool",
            "system",
            "user",
            "assistant",
            "function",
            "AIMessageChunk",
            "critic",
            "",
        ] {
            let spelled = Role::spelled(spelling);
            assert_eq!(spelled, Role::new(spelling));
            assert_eq!(spelled.as_str(), spelling);
            assert_eq!(spelled.kind(), Role::new(spelling).kind());
            assert_eq!(serde_json::to_value(&spelled).unwrap(), json!(spelling));
        }
    }

    #[test]
    fn parses_langchain_and_dict_shapes() {
        let m: Message = serde_json::from_value(json!({
            "type": "ai", "id": "a1", "content": "",
            "tool_calls": [{"name": "search", "args": {"q": 1}, "id": "c1"}],
            "unknown_field": 42
        }))
        .unwrap();
        assert_eq!(m.role.kind(), RoleKind::Ai);
        assert_eq!(m.tool_calls[0].call_type, "tool_call");

        let d: Message = serde_json::from_value(json!({
            "role": "user", "content": [{"type": "text", "text": "hi"}, "there",
                                       {"type": "image_url", "image_url": "x"}],
            "additional_kwargs": "not a map", "tool_calls": null
        }))
        .unwrap();
        assert_eq!(d.role.as_str(), "user");
        assert_eq!(d.role.kind(), RoleKind::Human);
        assert_eq!(d.text(), "hi\nthere");
        assert!(d.additional_kwargs.is_empty());
        assert!(d.tool_calls.is_empty());
    }

    #[test]
    fn tool_aliases_are_accepted() {
        let t: Message = serde_json::from_value(json!({
            "role": "tool", "content": "r", "tool_id": "c1", "tool_name": "s", "tool_status": "error"
        }))
        .unwrap();
        assert_eq!(t.tool_call_id.as_deref(), Some("c1"));
        assert_eq!(t.name.as_deref(), Some("s"));
        assert_eq!(t.status.as_deref(), Some("error"));
    }

    #[test]
    fn missing_role_is_an_error() {
        let err = serde_json::from_value::<Message>(json!({"content": "x"})).unwrap_err();
        assert!(err.to_string().contains("`type` or `role`"));
    }

    #[test]
    fn host_flags_are_observable() {
        let mem = Message::human("<memory>\nx\n</memory>")
            .with_id("m1__memory")
            .with_flag("hide_from_ui", true)
            .with_flag("dynamic_context_reminder", true);
        assert!(mem.is_hidden() && mem.is_injected_memory());
        let user = Message::human("hi").with_id("m1__user");
        assert!(!user.is_hidden() && !user.is_injected_memory());
        assert!(Message::human("s").with_name("summary").is_summary());
    }

    #[test]
    fn round_trips_through_json() {
        let m = Message::tool("ok", "c1").with_id("t1").with_name("search");
        let back: Message = serde_json::from_str(&serde_json::to_string(&m).unwrap()).unwrap();
        assert_eq!(m, back);
    }

    #[test]
    fn transcript_forms() {
        let arr = br#"[{"type":"human","content":"a"},{"type":"ai","content":"b"}]"#;
        assert_eq!(parse_transcript(arr).unwrap().len(), 2);
        let obj = br#"{"messages":[{"role":"user","content":"a"}]}"#;
        assert_eq!(parse_transcript(obj).unwrap().len(), 1);
        let jsonl = b"{\"role\":\"user\",\"content\":\"a\"}\n\n{\"role\":\"assistant\",\"content\":\"b\"}\n";
        assert_eq!(parse_transcript(jsonl).unwrap().len(), 2);
    }

    #[test]
    fn transcript_errors_name_the_place() {
        let e = parse_transcript(br#"[{"type":"human","content":"a"},{"content":"b"}]"#)
            .unwrap_err()
            .to_string();
        assert!(e.contains("messages[1]"), "{e}");
        let e = parse_transcript(b"{\"role\":\"user\"}\n{oops\n")
            .unwrap_err()
            .to_string();
        assert!(e.contains("line 2"), "{e}");
        let e = parse_transcript(&[0xff, 0xfe]).unwrap_err().to_string();
        assert!(e.contains("UTF-8"), "{e}");
        assert!(parse_transcript(b"   ").is_err());
        assert!(parse_transcript(br#"{"foo":1}"#)
            .unwrap_err()
            .to_string()
            .contains("messages"));
    }
}
