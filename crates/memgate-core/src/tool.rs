//! The explicit-save model tool, `remember`, for any backend that can
//! remember.
//!
//! The model supplies only `text` and an allowed `kind`; who is saving comes
//! from the host's principal (the [`Caller`] the host resolved), never from
//! the arguments. Any other argument (`user_id`, `scope_id`, `token`, …) is
//! refused with a tool error, never applied. Results are model-safe JSON:
//! the outcome, the store's citation when there is one, and a sentence for
//! the user. An unknown outcome is not an error (it may have been saved)
//! and says not to retry.

use crate::backend::MemoryBackend;
use crate::identity::Caller;
use crate::remember::{
    RememberOutcome, RememberRequest, CONVENTIONAL_KINDS, MAX_MEMORY_TEXT_BYTES,
};
use crate::{MemoryError, Result};
use serde::Serialize;
use serde_json::{json, Value};

/// The tool's logical name; hosts qualify it with a namespace.
pub const REMEMBER_TOOL: &str = "remember";
/// The kind used when the model gives none.
pub const DEFAULT_KIND: &str = "fact";

/// What a host needs to offer a tool to a model.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct ToolSpec {
    pub namespace: String,
    pub name: String,
    pub description: String,
    /// JSON Schema of the arguments object.
    pub input_schema: Value,
}

impl ToolSpec {
    /// `namespace.name`, or `namespace_name` where a host forbids dots.
    pub fn qualified_name(&self, separator: &str) -> String {
        format!("{}{separator}{}", self.namespace, self.name)
    }
}

/// A tool call's answer for the model. `is_error` marks calls that did not
/// save: bad arguments, a refused caller, a rejected save.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct ToolResult {
    pub is_error: bool,
    pub content: Value,
}

/// The `remember` tool's spec; `store` names where memory lives ("the
/// user's PowerContext memory", "memgate memory").
pub fn remember_spec(namespace: &str, store: &str) -> ToolSpec {
    let description = format!(
        "Save one durable piece of information to {store}, so that it is recalled in future \
conversations. Call this ONLY when the user explicitly asks you to remember or save something; \
do not save on your own initiative. NEVER save secrets: no passwords, API keys, tokens, private \
keys, credentials or other confidential values. Save one short, self-contained statement per \
call in `text` (at most {MAX_MEMORY_TEXT_BYTES} UTF-8 bytes), and choose `kind` ({}; default \
{DEFAULT_KIND}). Report the result to the user exactly as returned: `stored` gives the new \
memory's citation; `already_present` means nothing new was added; `unknown` means it may or may \
not have been saved and must not be retried automatically; `failed` means nothing was saved.",
        CONVENTIONAL_KINDS.join(", ")
    );
    ToolSpec {
        namespace: namespace.to_owned(),
        name: REMEMBER_TOOL.to_owned(),
        description,
        input_schema: json!({
            "type": "object",
            "properties": {
                "text": {
                    "type": "string",
                    "minLength": 1,
                    "description": format!(
                        "The information to save, as one self-contained statement \
                         (at most {MAX_MEMORY_TEXT_BYTES} UTF-8 bytes after trimming). Never a secret."
                    ),
                },
                "kind": {
                    "type": "string",
                    "enum": CONVENTIONAL_KINDS,
                    "default": DEFAULT_KIND,
                    "description": "What sort of memory this is.",
                },
            },
            "required": ["text"],
            "additionalProperties": false,
        }),
    }
}

/// Validates the model's arguments: an object with `text` and an optional
/// conventional `kind`; nothing else.
pub fn parse_remember_arguments(arguments: &Value) -> Result<RememberRequest> {
    let Value::Object(args) = arguments else {
        return Err(MemoryError::invalid("arguments", "must be a JSON object"));
    };
    if let Some(unknown) = args.keys().find(|k| *k != "text" && *k != "kind") {
        return Err(MemoryError::invalid(
            unknown,
            "is not an argument of remember (only text and kind); identity and scope come from the host",
        ));
    }
    let text = match args.get("text") {
        Some(Value::String(text)) => text,
        Some(_) => return Err(MemoryError::invalid("text", "must be a string")),
        None => return Err(MemoryError::invalid("text", "is required")),
    };
    let kind = match args.get("kind") {
        None | Some(Value::Null) => DEFAULT_KIND,
        Some(Value::String(kind)) if CONVENTIONAL_KINDS.contains(&kind.as_str()) => kind,
        Some(_) => {
            return Err(MemoryError::invalid(
                "kind",
                format!("must be one of {}", CONVENTIONAL_KINDS.join(", ")),
            ))
        }
    };
    RememberRequest::new(kind, text)
}

/// The tool's answer for an outcome.
pub fn outcome_result(outcome: &RememberOutcome) -> ToolResult {
    let mut content =
        serde_json::to_value(outcome).unwrap_or_else(|_| json!({"outcome": "unknown"}));
    content["message"] = Value::String(outcome.describe());
    ToolResult {
        is_error: matches!(outcome, RememberOutcome::Failed { .. }),
        content,
    }
}

/// The tool's answer for an error (nothing was saved).
pub fn error_result(err: &MemoryError) -> ToolResult {
    ToolResult {
        is_error: true,
        content: json!({
            "outcome": "error",
            "error": {"code": err.code(), "message": err.to_string()},
            "message": format!("Not saved: {err}."),
        }),
    }
}

/// Handles one `remember` call: `principal` is the host's resolved caller.
pub async fn call_remember(
    backend: &dyn MemoryBackend,
    principal: &Caller,
    arguments: &Value,
) -> ToolResult {
    let request = match parse_remember_arguments(arguments) {
        Ok(request) => request,
        Err(e) => return error_result(&e),
    };
    match backend.remember(principal, &request).await {
        Ok(outcome) => outcome_result(&outcome),
        Err(e) => error_result(&e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spec_forbids_secrets_and_unrequested_saves() {
        let spec = remember_spec("memgate", "memgate memory");
        assert_eq!(spec.qualified_name("."), "memgate.remember");
        assert!(spec.description.contains("NEVER save secrets"));
        assert!(spec
            .description
            .contains("ONLY when the user explicitly asks"));
        assert_eq!(spec.input_schema["additionalProperties"], false);
        assert_eq!(spec.input_schema["required"], json!(["text"]));
    }

    #[test]
    fn identity_arguments_are_refused_not_applied() {
        for bad in [
            json!({"text": "x", "user_id": "mallory"}),
            json!({"text": "x", "scope_id": "s"}),
            json!({"text": "x", "token": "t"}),
        ] {
            let e = parse_remember_arguments(&bad).unwrap_err().to_string();
            assert!(e.contains("identity and scope come from the host"), "{e}");
        }
        assert!(parse_remember_arguments(&json!("text")).is_err());
        assert!(parse_remember_arguments(&json!({"text": 3})).is_err());
        assert!(parse_remember_arguments(&json!({"text": "x", "kind": "secret"})).is_err());
        let ok = parse_remember_arguments(&json!({"text": " x ", "kind": "preference"})).unwrap();
        assert_eq!((ok.kind.as_str(), ok.text.as_str()), ("preference", "x"));
    }

    #[test]
    fn outcomes_render_for_the_model() {
        let unknown = outcome_result(&RememberOutcome::Unknown {
            reason: "deadline passed after sending".into(),
        });
        assert!(!unknown.is_error);
        assert_eq!(unknown.content["outcome"], "unknown");
        assert!(unknown.content["message"]
            .as_str()
            .unwrap()
            .contains("not retried"));
        let failed = outcome_result(&RememberOutcome::Failed {
            reason: "rejected".into(),
        });
        assert!(failed.is_error);
        let refused = error_result(&MemoryError::RejectedIdentity("refused".into()));
        assert!(refused.is_error);
        assert_eq!(refused.content["error"]["code"], "rejected_identity");
    }
}
