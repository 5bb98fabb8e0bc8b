//! The error family every backend returns, mirroring the host contract:
//! `MemoryManagerError` (backend failure), `MemoryConflictError`,
//! `MemoryCorruptionError`, an owner-binding refusal, `ValueError` for bad
//! input and `NotImplementedError` for unsupported operations.
//!
//! Messages never carry secrets or user text; they name the field and the rule.

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

#[cfg(test)]
mod tests {
    use super::*;

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
