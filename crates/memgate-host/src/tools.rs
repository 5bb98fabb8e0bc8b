//! Model tools dispatched with the host's principal.
//!
//! A [`ToolContext`] carries who the host says is calling (the user id as
//! the host resolved it, the agent, the thread). It is the only source of
//! identity: the `remember` tool takes `text` and `kind` from the model and
//! refuses any other argument (`user_id`, `scope_id`, …) before the backend
//! is called. A host without an authenticated user gets the visible
//! `default` fallback, passed through as-is, so an owner-bound backend
//! refuses it instead of treating it as its owner.
//!
//! The `remember` handler itself is `memgate_core::tool`; this module
//! decides which tools to offer and routes calls to it.

use memgate_core::tool::{
    call_remember, error_result, remember_spec, ToolResult, ToolSpec, REMEMBER_TOOL,
};
use memgate_core::{Caller, Citation, MemoryBackend, MemoryError, RememberOutcome, UserId};
use serde_json::Value;
use std::fmt;
use std::sync::Arc;

/// The tool namespace memgate offers its tools under.
pub const TOOL_NAMESPACE: &str = "memgate";

/// The host's principal for one tool call.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ToolContext {
    principal: Caller,
}

impl ToolContext {
    /// The caller the host resolved (user, agent, thread).
    pub fn new(principal: Caller) -> Self {
        Self { principal }
    }

    /// From the host's raw values: an absent or empty user id becomes the
    /// visible `default` fallback (never an owner).
    pub fn from_host(user: Option<&str>, agent: Option<&str>, thread: Option<&str>) -> Self {
        Self::new(Caller {
            user: UserId::from_host(user),
            agent: agent.map(str::to_owned),
            thread: thread.map(str::to_owned),
        })
    }

    pub fn principal(&self) -> &Caller {
        &self.principal
    }

    pub fn thread(&self) -> Option<&str> {
        self.principal.thread.as_deref()
    }
}

/// The memory tools a host offers its model.
#[derive(Clone)]
pub struct HostTools {
    backend: Arc<dyn MemoryBackend>,
    enabled: bool,
    store: String,
}

impl HostTools {
    /// `enabled` is the host's switch for the tool (see
    /// [`crate::HostSettings::remember_tool`]).
    pub fn new(backend: Arc<dyn MemoryBackend>, enabled: bool) -> Self {
        let store = format!(
            "the user's long-term memory (memgate, {} backend)",
            backend.name()
        );
        Self {
            backend,
            enabled,
            store,
        }
    }

    /// The tools to offer: `remember` when the switch is on and the backend
    /// can remember; nothing otherwise.
    pub fn specs(&self) -> Vec<ToolSpec> {
        if self.offers_remember() {
            vec![remember_spec(TOOL_NAMESPACE, &self.store)]
        } else {
            Vec::new()
        }
    }

    fn offers_remember(&self) -> bool {
        self.enabled && self.backend.capabilities().remember
    }

    /// Whether `name` is one of the offered tools; hosts qualify names with
    /// `.` or `_` (`memgate.remember`, `memgate_remember`) or not at all.
    pub fn handles(&self, name: &str) -> bool {
        self.offers_remember() && is_remember(name)
    }

    /// Runs a tool call with arguments as a JSON value; `None` when the name
    /// is not one of the offered tools (the host answers it).
    pub async fn dispatch(
        &self,
        context: &ToolContext,
        name: &str,
        arguments: &Value,
    ) -> Option<ToolResult> {
        if !self.handles(name) {
            return None;
        }
        Some(call_remember(&*self.backend, &context.principal, arguments).await)
    }

    /// Like [`Self::dispatch`], with the arguments as the JSON text models
    /// send (OpenAI `function.arguments`); text that is not JSON is a tool
    /// error, and the backend is not called.
    pub async fn dispatch_json(
        &self,
        context: &ToolContext,
        name: &str,
        arguments: &str,
    ) -> Option<ToolResult> {
        if !self.handles(name) {
            return None;
        }
        let parsed = if arguments.trim().is_empty() {
            Ok(Value::Object(Default::default()))
        } else {
            serde_json::from_str(arguments)
        };
        match parsed {
            Ok(value) => self.dispatch(context, name, &value).await,
            Err(e) => Some(error_result(&MemoryError::invalid(
                "arguments",
                format!("must be a JSON object ({e})"),
            ))),
        }
    }
}

fn is_remember(name: &str) -> bool {
    name == REMEMBER_TOOL
        || [".", "_"]
            .iter()
            .any(|sep| name == format!("{TOOL_NAMESPACE}{sep}{REMEMBER_TOOL}"))
}

/// What a `remember` call did, read back from its tool result: for a host
/// to show the user the store's answer.
#[derive(Clone, Debug, PartialEq)]
pub enum SaveReport {
    Stored(Citation),
    AlreadyPresent(Option<Citation>),
    /// May have been stored; not retried.
    Unknown(String),
    /// Nothing was stored (rejected, refused, bad arguments).
    Failed(String),
}

impl SaveReport {
    pub fn from_result(result: &ToolResult) -> Self {
        if let Ok(outcome) = serde_json::from_value::<RememberOutcome>(result.content.clone()) {
            return match outcome {
                RememberOutcome::Stored { citation } => Self::Stored(citation),
                RememberOutcome::AlreadyPresent { citation, .. } => Self::AlreadyPresent(citation),
                RememberOutcome::Unknown { reason } => Self::Unknown(reason),
                RememberOutcome::Failed { reason } => Self::Failed(reason),
            };
        }
        let message = result.content["error"]["message"]
            .as_str()
            .or_else(|| result.content["message"].as_str())
            .unwrap_or("the tool gave no reason");
        Self::Failed(message.to_owned())
    }
}

/// `stored (mem_1)`, `already present`, `unknown (…)`, `failed (…)`.
impl fmt::Display for SaveReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Stored(c) => write!(f, "stored ({c})"),
            Self::AlreadyPresent(Some(c)) => write!(f, "already present ({c})"),
            Self::AlreadyPresent(None) => f.write_str("already present"),
            Self::Unknown(reason) => write!(f, "unknown ({reason}); not retried"),
            Self::Failed(reason) => write!(f, "failed ({reason})"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use memgate_core::tool::outcome_result;

    #[test]
    fn qualified_names_are_recognised() {
        for name in ["remember", "memgate.remember", "memgate_remember"] {
            assert!(is_remember(name), "{name}");
        }
        for name in ["remember2", "other.remember", "memgate-remember", ""] {
            assert!(!is_remember(name), "{name}");
        }
    }

    #[test]
    fn save_reports_read_back_every_outcome() {
        let cases = [
            (
                RememberOutcome::Stored {
                    citation: Citation::new("mem_1"),
                },
                "stored (mem_1)",
            ),
            (
                RememberOutcome::AlreadyPresent {
                    citation: None,
                    revision: Some(2),
                },
                "already present",
            ),
            (
                RememberOutcome::Unknown {
                    reason: "answer lost".into(),
                },
                "unknown (answer lost); not retried",
            ),
            (
                RememberOutcome::Failed {
                    reason: "rejected".into(),
                },
                "failed (rejected)",
            ),
        ];
        for (outcome, line) in cases {
            assert_eq!(
                SaveReport::from_result(&outcome_result(&outcome)).to_string(),
                line
            );
        }
        let refused = error_result(&MemoryError::RejectedIdentity("caller refused".into()));
        assert_eq!(
            SaveReport::from_result(&refused).to_string(),
            "failed (caller refused)"
        );
    }

    #[test]
    fn from_host_keeps_the_default_fallback_visible() {
        let ctx = ToolContext::from_host(None, None, Some("t1"));
        assert!(ctx.principal().user.is_default_fallback());
        assert_eq!(ctx.thread(), Some("t1"));
        let ctx = ToolContext::from_host(Some(""), Some("coder"), None);
        assert!(ctx.principal().user.is_default_fallback());
        assert_eq!(ctx.principal().agent.as_deref(), Some("coder"));
    }
}
