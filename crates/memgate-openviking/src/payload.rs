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
//! its parts (text, tool inputs and outputs) with typed placeholders.

use memgate_core::message::truthy;
use memgate_core::redaction::redact_json_strings;
use memgate_core::{Content, Message, Redactor, RoleKind};
use serde_json::{json, Map, Value};

/// The adapter's text of a message: a string as is; for blocks, the
/// non-empty strings, `text` blocks and string `content` fields joined by
/// newlines (images and other blocks are dropped).
pub fn adapter_text(content: &Content) -> String {
    match content {
        Content::Text(s) => s.clone(),
        Content::Blocks(blocks) => {
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
    }
}

fn text_part(text: String) -> Value {
    json!({"type": "text", "text": text})
}

/// The OpenViking payload of one message, or `None` when it is not recorded.
pub fn to_payload(message: &Message, peer_id: &str) -> Option<Value> {
    if message
        .additional_kwargs
        .get("lc_source")
        .and_then(Value::as_str)
        == Some("summarization")
    {
        return None;
    }
    let text = adapter_text(&message.content);
    let (role, parts) = match message.role.kind() {
        RoleKind::System => return None,
        RoleKind::Human => ("user", vec![text_part(text)]),
        RoleKind::Ai => {
            let legacy_calls = message
                .additional_kwargs
                .get("tool_calls")
                .is_some_and(truthy);
            if text.is_empty() && message.tool_calls.is_empty() && !legacy_calls {
                return None;
            }
            let mut parts = Vec::with_capacity(1 + message.tool_calls.len());
            if !text.is_empty() {
                parts.push(text_part(text));
            }
            for call in &message.tool_calls {
                let input = match &call.args {
                    Value::Object(o) => Value::Object(o.clone()),
                    Value::Null => Value::Object(Map::new()),
                    other => json!({ "value": other }),
                };
                parts.push(json!({
                    "type": "tool",
                    "tool_id": call.id.clone().unwrap_or_default(),
                    "tool_name": call.name,
                    "tool_input": input,
                    "tool_status": "pending",
                }));
            }
            if parts.is_empty() {
                parts.push(text_part(String::new()));
            }
            ("assistant", parts)
        }
        RoleKind::Tool if message.role.as_str() != "function" => {
            let status = if message.status.as_deref() == Some("error") {
                "error"
            } else {
                "completed"
            };
            let part = json!({
                "type": "tool",
                "tool_id": message.tool_call_id.clone().unwrap_or_default(),
                "tool_name": message.name.clone().unwrap_or_default(),
                "tool_output": text,
                "tool_status": status,
            });
            ("assistant", vec![part])
        }
        RoleKind::Tool | RoleKind::Other => {
            if text.is_empty() {
                return None;
            }
            let role = if message.role.as_str() == "human" {
                "user"
            } else {
                "assistant"
            };
            (role, vec![text_part(text)])
        }
    };
    let mut payload = json!({ "role": role, "parts": parts });
    if !peer_id.trim().is_empty() {
        payload["peer_id"] = Value::String(peer_id.trim().to_owned());
    }
    Some(payload)
}

/// Replaces secrets in every string of the payload's parts; the message
/// signature (computed earlier, over the host's message) is unaffected.
pub fn redact_payload(payload: &mut Value, redactor: &Redactor) {
    if let Some(parts) = payload.get_mut("parts") {
        redact_json_strings(redactor, parts);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use memgate_core::{Role, ToolCall};

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
        assert!(!p.to_string().contains(key), "{p}");
        assert_eq!(p["parts"][0]["text"], "pushing with [redacted:token]");
        assert_eq!(p["parts"][1]["tool_input"]["token"], "[redacted:token]");
        assert_eq!(p["peer_id"], "p");
    }

    #[test]
    fn conversion_follows_the_official_adapter() {
        let human = to_payload(&Message::human("I prefer tea."), "research").unwrap();
        assert_eq!(
            human,
            json!({"role": "user", "parts": [{"type": "text", "text": "I prefer tea."}], "peer_id": "research"})
        );
        let empty_human = to_payload(&Message::human(""), "p").unwrap();
        assert_eq!(empty_human["parts"], json!([{"type": "text", "text": ""}]));

        let call = Message::ai("").with_tool_calls(vec![
            ToolCall::new("search", json!({"q": "x"}), Some("c1".into())),
            ToolCall::new("calc", json!(3), None),
            ToolCall::new("noop", Value::Null, Some("c3".into())),
        ]);
        let p = to_payload(&call, "p").unwrap();
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
            to_payload(&failed, "p").unwrap()["parts"],
            json!([{"type": "tool", "tool_id": "c1", "tool_name": "search", "tool_output": "boom", "tool_status": "error"}])
        );
        assert_eq!(
            to_payload(&Message::tool("ok", "c2"), "p").unwrap()["parts"][0]["tool_status"],
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
        let other = to_payload(&Message::new(Role::new("chat"), "hi"), "p").unwrap();
        assert_eq!(other["role"], "assistant");
        // A legacy tool call in additional_kwargs makes an empty AI message recordable.
        let legacy = Message::ai("").with_flag("tool_calls", json!([{"id": "c"}]));
        assert_eq!(
            to_payload(&legacy, "p").unwrap()["parts"],
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
        assert_eq!(to_payload(&m, "p").unwrap()["parts"][0]["text"], "a\nb\nc");
    }
}
