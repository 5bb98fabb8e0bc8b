//! What both stores keep of a message as a turn, and what they accept as an
//! imported one: the same rules in `local` and `postgres`, so both keep,
//! refuse and lay out the same things.

use memgate_core::budget::prefix_bytes;
use memgate_core::facts::{ExportedTurn, MemoryExport, EXPORT_FORMAT};
use memgate_core::signature::message_signature;
use memgate_core::time::{looks_like_rfc3339, now_rfc3339};
use memgate_core::{CaptureCut, MemoryError, Message, Redactor, Result, Role, RoleKind};
use serde_json::Value;

/// Memory keeps the first 64 KiB of a message (the signature still covers
/// all of it); a pasted log does not need to be recalled in full.
pub const MAX_TURN_TEXT_BYTES: usize = 64 * 1024;
/// Longest speaker name and timestamp kept as context.
const MAX_CONTEXT_CHARS: usize = 128;
/// The message metadata key that carries when a turn was said.
pub const TIMESTAMP_KEY: &str = "timestamp";

/// A turn ready to insert.
#[derive(Clone, Debug, PartialEq)]
pub struct NewTurn {
    pub signature: String,
    pub message_id: Option<String>,
    pub role: &'static str,
    pub speaker: Option<String>,
    pub occurred_at: Option<String>,
    pub text: String,
    pub captured_at: String,
    /// Set when `text` is only the start of the message's.
    pub cut: Option<CaptureCut>,
}

fn bounded_context(value: Option<&str>) -> Option<String> {
    let v = value?.trim();
    (!v.is_empty()).then(|| v.chars().take(MAX_CONTEXT_CHARS).collect())
}

/// The storable form of a message that survived the host's hidden filter,
/// or `None` when memory should not keep it. The signature covers the
/// original message; the stored text has its secrets replaced.
/// `index` is the message's position in its capture request, which a cut
/// reports. (Shared with the postgres backend: both stores keep the same
/// turns.)
pub fn storable(
    message: &Message,
    index: usize,
    captured_at: &str,
    redactor: &Redactor,
) -> Option<NewTurn> {
    let role = match message.role.kind() {
        RoleKind::Human => "human",
        RoleKind::Ai if message.tool_calls.is_empty() => "ai",
        _ => return None,
    };
    if message.is_injected_memory() || message.is_summary() {
        return None;
    }
    let text = message.text();
    // Redact before cutting, so a cut never leaves half a secret unmatched.
    let redacted = redactor.redact(text.trim());
    let text = prefix_bytes(&redacted.text, MAX_TURN_TEXT_BYTES);
    if text.is_empty() {
        return None;
    }
    let message_id = message.id.clone().filter(|id| !id.is_empty());
    let cut = (text.len() < redacted.text.len()).then(|| CaptureCut {
        index,
        message_id: message_id.clone(),
        text_bytes: redacted.text.len(),
        kept_bytes: text.len(),
    });
    Some(NewTurn {
        signature: message_signature(message),
        message_id,
        role,
        speaker: bounded_context(message.name.as_deref()),
        occurred_at: bounded_context(
            message
                .additional_kwargs
                .get(TIMESTAMP_KEY)
                .and_then(Value::as_str),
        ),
        text: text.to_owned(),
        captured_at: captured_at.to_owned(),
        cut,
    })
}

/// An export document's `format` must be the one this memgate writes.
pub fn check_export_format(data: &MemoryExport) -> Result<()> {
    if data.format == EXPORT_FORMAT {
        Ok(())
    } else {
        Err(MemoryError::invalid(
            "format",
            format!("must be `{EXPORT_FORMAT}`"),
        ))
    }
}

/// An RFC 3339 timestamp from an export, or now when it is missing or malformed.
pub fn timestamp_or_now(value: Option<&str>) -> String {
    match value {
        Some(t) if looks_like_rfc3339(t) => t.to_owned(),
        _ => now_rfc3339(),
    }
}

fn is_signature(s: &str) -> bool {
    s.len() == 64 && s.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
}

/// Checks exported turn `i` and turns it into a storable turn of its thread
/// (shared with the postgres backend, so both refuse the same data).
pub fn validate_turn(i: usize, t: &ExportedTurn) -> Result<(String, NewTurn)> {
    let field = |name: &str| format!("turns[{i}].{name}");
    if t.thread.is_empty() {
        return Err(MemoryError::invalid(field("thread"), "must not be empty"));
    }
    let role = match Role::new(t.role.as_str()).kind() {
        RoleKind::Human => "human",
        RoleKind::Ai => "ai",
        _ => {
            return Err(MemoryError::invalid(
                field("role"),
                "must be a human or AI role (memory stores no other turns)",
            ))
        }
    };
    let text = t.text.trim();
    if text.is_empty() {
        return Err(MemoryError::invalid(field("text"), "must not be blank"));
    }
    if text.len() > MAX_TURN_TEXT_BYTES {
        return Err(MemoryError::invalid(
            field("text"),
            format!("must be at most {MAX_TURN_TEXT_BYTES} UTF-8 bytes"),
        ));
    }
    if !is_signature(&t.signature) {
        return Err(MemoryError::invalid(
            field("signature"),
            "must be 64 lowercase hex digits (a SHA-256 message signature)",
        ));
    }
    Ok((
        t.thread.clone(),
        NewTurn {
            signature: t.signature.clone(),
            message_id: None,
            role,
            speaker: None,
            occurred_at: None,
            text: text.to_owned(),
            captured_at: timestamp_or_now(t.captured_at.as_deref()),
            cut: None,
        },
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use memgate_core::ToolCall;
    use serde_json::json;

    fn keeps(m: &Message) -> bool {
        storable(m, 0, "t", &Redactor::default()).is_some()
    }

    #[test]
    fn human_and_ai_answers_are_kept() {
        assert!(keeps(&Message::human("I use Vim")));
        assert!(keeps(&Message::ai("Noted.")));
        assert!(keeps(&Message::new(memgate_core::Role::new("user"), "hi")));
    }

    #[test]
    fn plumbing_system_summaries_and_injections_are_not() {
        let call = Message::ai("Let me look.").with_tool_calls(vec![ToolCall::new(
            "search",
            json!({}),
            Some("c1".into()),
        )]);
        assert!(!keeps(&call));
        assert!(!keeps(&Message::tool("result", "c1")));
        assert!(!keeps(&Message::system("be nice")));
        assert!(!keeps(&Message::ai("short story").with_name("summary")));
        assert!(!keeps(
            &Message::human("x").with_flag("lc_source", "summarization")
        ));
        let injected = Message::human("<memory>old</memory>")
            .with_id("m__memory")
            .with_flag("dynamic_context_reminder", true);
        assert!(!keeps(&injected));
        assert!(!keeps(&Message::human("   ")));
        assert!(!keeps(&Message::new(
            memgate_core::Role::new("critic"),
            "x"
        )));
    }

    #[test]
    fn speaker_and_timestamp_become_context() {
        let m = Message::human("I went hiking")
            .with_name("Caroline")
            .with_flag(TIMESTAMP_KEY, "1:56 pm on 8 May, 2023");
        let t = storable(&m, 0, "now", &Redactor::default()).unwrap();
        assert_eq!(t.speaker.as_deref(), Some("Caroline"));
        assert_eq!(t.occurred_at.as_deref(), Some("1:56 pm on 8 May, 2023"));
        let odd = Message::human("x").with_flag(TIMESTAMP_KEY, 17);
        assert_eq!(
            storable(&odd, 0, "now", &Redactor::default())
                .unwrap()
                .occurred_at,
            None
        );
    }

    #[test]
    fn secrets_are_redacted_but_the_signature_covers_the_original() {
        let key = "ghp_0123456789abcdefghijABCDEFGHIJ012345";
        let m = Message::human(format!("push with {key} please"));
        let t = storable(&m, 0, "now", &Redactor::default()).unwrap();
        assert_eq!(t.text, "push with [redacted:token] please");
        assert_eq!(t.signature, message_signature(&m));
        let off = storable(&m, 0, "now", &Redactor::disabled()).unwrap();
        assert!(off.text.contains(key));
    }

    #[test]
    fn huge_texts_are_cut_on_a_character_boundary_and_the_cut_is_reported() {
        let mut m = Message::human("日".repeat(MAX_TURN_TEXT_BYTES));
        m.id = Some("m-7".to_owned());
        let t = storable(&m, 7, "now", &Redactor::default()).unwrap();
        assert!(t.text.len() <= MAX_TURN_TEXT_BYTES);
        assert!(t.text.chars().all(|c| c == '日'));
        let cut = t.cut.expect("a cut text reports its cut");
        assert_eq!(cut.index, 7);
        assert_eq!(cut.message_id.as_deref(), Some("m-7"));
        assert_eq!(cut.text_bytes, 3 * MAX_TURN_TEXT_BYTES);
        assert_eq!(cut.kept_bytes, t.text.len());
    }

    #[test]
    fn a_text_at_the_limit_is_kept_whole_and_reports_no_cut() {
        let m = Message::human("a".repeat(MAX_TURN_TEXT_BYTES));
        let t = storable(&m, 0, "now", &Redactor::default()).unwrap();
        assert_eq!(t.text.len(), MAX_TURN_TEXT_BYTES);
        assert_eq!(t.cut, None);
    }

    #[test]
    fn signatures_must_be_lowercase_sha256_hex() {
        assert!(is_signature(&"a".repeat(64)));
        assert!(!is_signature(&"A".repeat(64)));
        assert!(!is_signature(&"a".repeat(63)));
        assert!(!is_signature(&"g".repeat(64)));
    }

    #[test]
    fn turn_errors_name_the_entry() {
        let t = ExportedTurn {
            thread: "t".into(),
            role: "system".into(),
            text: "x".into(),
            signature: "a".repeat(64),
            captured_at: None,
        };
        let e = validate_turn(3, &t).err().unwrap();
        assert!(e.to_string().starts_with("invalid turns[3].role"), "{e}");
    }
}
