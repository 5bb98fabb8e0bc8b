//! The error family every backend returns, mirroring the host contract:
//! `MemoryManagerError` (backend failure), `MemoryConflictError`,
//! `MemoryCorruptionError`, an owner-binding refusal, `ValueError` for bad
//! input and `NotImplementedError` for unsupported operations.
//!
//! Messages never carry secrets or user text; they name the field and the rule.

use serde::{Deserialize, Serialize};
use std::fmt;

pub type Result<T, E = MemoryError> = std::result::Result<T, E>;

#[derive(Debug, thiserror::Error)]
pub enum MemoryError {
    /// Bad input from the caller (config, body, transcript, tool arguments).
    #[error("invalid {field}: {rule}")]
    InvalidInput { field: String, rule: String },

    /// A configuration value broke a rule; the message names the key and the
    /// rule (and never the value of a secret).
    #[error("{0}")]
    Config(String),

    /// The caller is not allowed to use this backend (owner binding, the
    /// `default` fallback user). Raised before any network or disk access.
    #[error("{0}")]
    RejectedIdentity(String),

    /// An optimistic-concurrency race was lost (HTTP 409).
    #[error("conflict: {0}")]
    Conflict(String),

    /// Persisted memory is unreadable; nothing was replayed or overwritten.
    #[error("{0}")]
    Corruption(String),

    /// A named entry does not exist in the caller's scope.
    #[error("not found: {0}")]
    NotFound(String),

    /// The backend does not implement this operation (HTTP 501). Never
    /// replaced by a look-alike empty result.
    #[error("{operation} not supported by {backend}")]
    Unsupported { operation: String, backend: String },

    /// The operation did not finish within its total deadline.
    #[error("deadline exceeded: {0}")]
    DeadlineExceeded(String),

    /// The backend was shut down and accepts no new work.
    #[error("memory backend {0} is shut down")]
    Closed(String),

    /// Anything else that went wrong inside or behind the backend.
    #[error("{0}")]
    Backend(String),
}

impl MemoryError {
    pub fn invalid(field: impl Into<String>, rule: impl Into<String>) -> Self {
        Self::InvalidInput {
            field: field.into(),
            rule: rule.into(),
        }
    }

    pub fn unsupported(operation: impl Into<String>, backend: impl Into<String>) -> Self {
        Self::Unsupported {
            operation: operation.into(),
            backend: backend.into(),
        }
    }

    pub fn backend(message: impl fmt::Display) -> Self {
        Self::Backend(message.to_string())
    }

    /// A stable, machine-readable code for HTTP bodies, MCP results and logs.
    pub fn code(&self) -> &'static str {
        match self {
            Self::InvalidInput { .. } => "invalid_input",
            Self::Config(_) => "invalid_config",
            Self::RejectedIdentity(_) => "rejected_identity",
            Self::Conflict(_) => "conflict",
            Self::Corruption(_) => "corruption",
            Self::NotFound(_) => "not_found",
            Self::Unsupported { .. } => "unsupported",
            Self::DeadlineExceeded(_) => "deadline_exceeded",
            Self::Closed(_) => "closed",
            Self::Backend(_) => "backend_failure",
        }
    }

    /// True when the caller's input was at fault (CLI exit 2, HTTP 4xx).
    pub fn is_caller_error(&self) -> bool {
        matches!(
            self,
            Self::InvalidInput { .. }
                | Self::Config(_)
                | Self::RejectedIdentity(_)
                | Self::NotFound(_)
        )
    }
}

/// An error as it crosses a process boundary (the HTTP API, and so the CLI's
/// `--url`): the stable code, the rendered message, and the variant's own
/// fields, so the far side rebuilds exactly the same error instead of
/// parsing text.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct WireError {
    /// Stable machine-readable code (`invalid_input`, `unsupported`, …).
    pub code: String,
    /// The error as a person reads it.
    pub message: String,
    /// `invalid_input`: the field that broke a rule.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub field: Option<String>,
    /// `invalid_input`: the rule it broke.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rule: Option<String>,
    /// `unsupported`: the operation.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub operation: Option<String>,
    /// `unsupported`: the backend that lacks it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub backend: Option<String>,
    /// Every other variant: its text without the prefix `message` adds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub detail: Option<String>,
}

impl WireError {
    /// An error of the transport itself (not a memory error): its code and
    /// message only.
    pub fn new(code: impl Into<String>, message: impl Into<String>) -> Self {
        Self {
            code: code.into(),
            message: message.into(),
            field: None,
            rule: None,
            operation: None,
            backend: None,
            detail: None,
        }
    }
}

impl MemoryError {
    /// The wire form; [`MemoryError::from_wire`] turns it back.
    pub fn to_wire(&self) -> WireError {
        let mut wire = WireError::new(self.code(), self.to_string());
        match self {
            Self::InvalidInput { field, rule } => {
                wire.field = Some(field.clone());
                wire.rule = Some(rule.clone());
            }
            Self::Unsupported { operation, backend } => {
                wire.operation = Some(operation.clone());
                wire.backend = Some(backend.clone());
            }
            Self::Config(d)
            | Self::RejectedIdentity(d)
            | Self::Conflict(d)
            | Self::Corruption(d)
            | Self::NotFound(d)
            | Self::DeadlineExceeded(d)
            | Self::Closed(d)
            | Self::Backend(d) => wire.detail = Some(d.clone()),
        }
        wire
    }

    /// Rebuilds the error a peer sent. A code this version does not know, or
    /// a body missing the variant's fields, becomes a backend failure that
    /// keeps the peer's message.
    pub fn from_wire(wire: WireError) -> Self {
        let detail = wire.detail.clone();
        let rebuilt = match (wire.code.as_str(), detail) {
            ("invalid_input", _) => match (wire.field.clone(), wire.rule.clone()) {
                (Some(field), Some(rule)) => Some(Self::InvalidInput { field, rule }),
                _ => None,
            },
            ("unsupported", _) => match (wire.operation.clone(), wire.backend.clone()) {
                (Some(operation), Some(backend)) => Some(Self::Unsupported { operation, backend }),
                _ => None,
            },
            ("invalid_config", Some(d)) => Some(Self::Config(d)),
            ("rejected_identity", Some(d)) => Some(Self::RejectedIdentity(d)),
            ("conflict", Some(d)) => Some(Self::Conflict(d)),
            ("corruption", Some(d)) => Some(Self::Corruption(d)),
            ("not_found", Some(d)) => Some(Self::NotFound(d)),
            ("deadline_exceeded", Some(d)) => Some(Self::DeadlineExceeded(d)),
            ("closed", Some(d)) => Some(Self::Closed(d)),
            ("backend_failure", Some(d)) => Some(Self::Backend(d)),
            _ => None,
        };
        rebuilt.unwrap_or(Self::Backend(wire.message))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// One of every variant, with text that would double up if a message
    /// were fed back into a constructor.
    fn every_variant() -> Vec<MemoryError> {
        vec![
            MemoryError::invalid("caller.user", "must not contain NUL"),
            MemoryError::Config("memory.mode: unknown".into()),
            MemoryError::RejectedIdentity("powercontext refused the caller".into()),
            MemoryError::Conflict("conflict: revision 3".into()),
            MemoryError::Corruption("cursor unreadable".into()),
            MemoryError::NotFound("mem_3".into()),
            MemoryError::unsupported("import", "openviking"),
            MemoryError::DeadlineExceeded("recall did not finish".into()),
            MemoryError::Closed("local".into()),
            MemoryError::backend("not supported by the moon"),
        ]
    }

    #[test]
    fn every_variant_round_trips_exactly_through_its_wire_form() {
        let variants = every_variant();
        let codes: std::collections::BTreeSet<&str> = variants.iter().map(|e| e.code()).collect();
        assert_eq!(codes.len(), variants.len(), "one test case per variant");
        for original in variants {
            let json = serde_json::to_string(&original.to_wire()).unwrap();
            let back = MemoryError::from_wire(serde_json::from_str(&json).unwrap());
            assert_eq!(back.to_string(), original.to_string(), "{json}");
            assert_eq!(back.code(), original.code());
            assert_eq!(format!("{back:?}"), format!("{original:?}"));
        }
    }

    #[test]
    fn unknown_or_incomplete_wire_errors_keep_the_peer_message() {
        let e = MemoryError::from_wire(WireError::new("teapot", "I am a teapot"));
        assert!(matches!(&e, MemoryError::Backend(m) if m == "I am a teapot"));
        let e = MemoryError::from_wire(WireError::new("invalid_input", "invalid x: y"));
        assert!(matches!(&e, MemoryError::Backend(m) if m == "invalid x: y"));
    }

    #[test]
    fn unsupported_reads_like_the_host_contract() {
        let e = MemoryError::unsupported("import_memory", "OpenVikingBackend");
        assert_eq!(
            e.to_string(),
            "import_memory not supported by OpenVikingBackend"
        );
        assert_eq!(e.code(), "unsupported");
    }

    #[test]
    fn invalid_input_names_field_and_rule() {
        let e = MemoryError::invalid("text", "must not be empty after trimming");
        assert_eq!(
            e.to_string(),
            "invalid text: must not be empty after trimming"
        );
        assert!(e.is_caller_error());
        assert!(!MemoryError::backend("x").is_caller_error());
    }
}
