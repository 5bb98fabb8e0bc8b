//! Failure policies shared by backends, with the seeds' spellings.
//!
//! - read: `fail_open` (log, recall nothing) or `raise` (propagate);
//! - write: `log_and_drop` (log, the finished answer is not failed) or `raise`;
//! - startup: `fail_fast` (an unhealthy backend at start-up is an error) or
//!   `warn` (log and run degraded).
//!
//! Identity refusals and bad input are never softened by a policy.

use crate::{MemoryError, Result};
use serde::{Deserialize, Serialize};

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "snake_case")]
pub enum ReadPolicy {
    #[default]
    FailOpen,
    Raise,
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "snake_case")]
pub enum WritePolicy {
    #[default]
    LogAndDrop,
    Raise,
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "snake_case")]
pub enum StartupPolicy {
    #[default]
    FailFast,
    Warn,
}

/// A backend's read, write and start-up policies together, as its
/// configuration says. The assembly applies them to its own total deadline,
/// so a recall (or a start-up check) that runs out of time is treated like
/// any other failed one.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FailurePolicy {
    pub read: ReadPolicy,
    pub write: WritePolicy,
    pub startup: StartupPolicy,
}

impl Default for FailurePolicy {
    /// Recall fails open (a host turn never fails for memory); writes raise,
    /// so nothing looks stored when it was not; an unhealthy start fails.
    fn default() -> Self {
        Self {
            read: ReadPolicy::FailOpen,
            write: WritePolicy::Raise,
            startup: StartupPolicy::FailFast,
        }
    }
}

/// Errors a policy may soften: failures of the backend itself, not of the
/// caller's identity or input, and not corruption (which must fail closed).
fn is_softenable(err: &MemoryError) -> bool {
    matches!(
        err,
        MemoryError::Backend(_) | MemoryError::DeadlineExceeded(_) | MemoryError::Conflict(_)
    )
}

impl ReadPolicy {
    /// Applies the policy to a failed read: `fail_open` logs and returns
    /// `fallback`; `raise` (or a non-softenable error) propagates.
    pub fn apply<T>(self, result: Result<T>, fallback: T, what: &str) -> Result<T> {
        match result {
            Err(err) if self == ReadPolicy::FailOpen && is_softenable(&err) => {
                tracing::warn!(error = %err, "{what} failed; continuing without memory (read policy fail_open)");
                Ok(fallback)
            }
            other => other,
        }
    }
}

impl WritePolicy {
    /// Applies the policy to a failed write: `log_and_drop` logs at error level
    /// and returns `fallback`; `raise` (or a non-softenable error) propagates.
    pub fn apply<T>(self, result: Result<T>, fallback: T, what: &str) -> Result<T> {
        match result {
            Err(err) if self == WritePolicy::LogAndDrop && is_softenable(&err) => {
                tracing::error!(error = %err, "{what} failed; dropped (write policy log_and_drop)");
                Ok(fallback)
            }
            other => other,
        }
    }
}

impl ReadPolicy {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::FailOpen => "fail_open",
            Self::Raise => "raise",
        }
    }
}

impl WritePolicy {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::LogAndDrop => "log_and_drop",
            Self::Raise => "raise",
        }
    }
}

impl StartupPolicy {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::FailFast => "fail_fast",
            Self::Warn => "warn",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fail_open_softens_backend_failures_only() {
        let soft = ReadPolicy::FailOpen.apply(Err(MemoryError::backend("down")), 7, "recall");
        assert_eq!(soft.unwrap(), 7);
        let identity = ReadPolicy::FailOpen.apply::<i32>(
            Err(MemoryError::RejectedIdentity("no".into())),
            7,
            "recall",
        );
        assert!(matches!(identity, Err(MemoryError::RejectedIdentity(_))));
        let corrupt =
            ReadPolicy::FailOpen.apply::<i32>(Err(MemoryError::Corruption("x".into())), 7, "r");
        assert!(corrupt.is_err());
    }

    #[test]
    fn raise_propagates() {
        assert!(ReadPolicy::Raise
            .apply::<i32>(Err(MemoryError::backend("down")), 0, "recall")
            .is_err());
        assert!(WritePolicy::Raise
            .apply::<()>(Err(MemoryError::backend("down")), (), "capture")
            .is_err());
        assert!(WritePolicy::LogAndDrop
            .apply::<()>(Err(MemoryError::backend("down")), (), "capture")
            .is_ok());
    }

    #[test]
    fn policies_use_the_seed_spellings() {
        let p: ReadPolicy = serde_json::from_str("\"fail_open\"").unwrap();
        assert_eq!(p, ReadPolicy::FailOpen);
        let w: WritePolicy = serde_json::from_str("\"log_and_drop\"").unwrap();
        assert_eq!(w.as_str(), "log_and_drop");
        let s: StartupPolicy = serde_json::from_str("\"warn\"").unwrap();
        assert_eq!(s.as_str(), "warn");
    }
}
