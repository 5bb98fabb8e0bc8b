//! The `remember` model tool (namespace `powercontext`).
//!
//! The model supplies only `text` and an allowed `kind`. Who is saving comes
//! from the host's principal, checked with the same owner rules as recall;
//! the Scope and the token come from the settings snapshot. Any other
//! argument (`user_id`, `scope_id`, `token`, …) is refused with a tool
//! error, never applied. The handler calls the backend's `remember`, so the
//! tool and every other surface share one implementation and one snapshot.
//!
//! Results are model-safe JSON: the outcome, the server's citation when
//! there is one, and a sentence for the user. No token, no owner id.

use crate::backend::PowerContextBackend;
use crate::settings::{reject_yaml_binding, SettingsLoader};
use memgate_core::tool::{call_remember, remember_spec};
pub use memgate_core::tool::{parse_remember_arguments as parse_arguments, ToolResult, ToolSpec};
use memgate_core::{BackendContext, Caller, Result};
use serde_json::{Map, Value};
use std::sync::Arc;

pub const TOOL_NAMESPACE: &str = "powercontext";
pub use memgate_core::tool::{DEFAULT_KIND, REMEMBER_TOOL as TOOL_NAME};

/// The explicit-save tool over a PowerContext backend.
#[derive(Clone, Debug)]
pub struct RememberTool {
    backend: Arc<PowerContextBackend>,
}

impl RememberTool {
    /// The tool over an existing backend (the recommended wiring: one
    /// backend, one snapshot, one connection pool).
    pub fn new(backend: Arc<PowerContextBackend>) -> Self {
        Self { backend }
    }

    /// The tool built on its own from the plugin's `config` map, which must
    /// be `{}` like `backend_config`. It loads the same snapshot as a backend
    /// built from the same context ([`SettingsLoader::process`]). No network I/O.
    pub fn from_plugin_config(config: &Map<String, Value>, ctx: &BackendContext) -> Result<Self> {
        reject_yaml_binding("config", config)?;
        let settings = SettingsLoader::process().load(ctx)?;
        Ok(Self::new(Arc::new(PowerContextBackend::from_settings(
            settings,
        )?)))
    }

    pub fn backend(&self) -> &Arc<PowerContextBackend> {
        &self.backend
    }

    /// The tool's name, description and argument schema (memgate's generic
    /// `remember` tool, in the `powercontext` namespace).
    pub fn spec() -> ToolSpec {
        remember_spec(TOOL_NAMESPACE, "the user's PowerContext memory")
    }

    /// Handles one call: `principal` is the host's resolved caller, never
    /// the model's arguments.
    pub async fn call(&self, principal: &Caller, arguments: &Value) -> ToolResult {
        call_remember(self.backend.as_ref(), principal, arguments).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use memgate_core::remember::CONVENTIONAL_KINDS;
    use serde_json::json;

    #[test]
    fn the_spec_is_core_remember_in_the_powercontext_namespace() {
        let spec = RememberTool::spec();
        assert_eq!(spec.qualified_name("."), "powercontext.remember");
        assert!(spec.description.contains("the user's PowerContext memory"));
        assert_eq!(
            spec.input_schema["properties"]["kind"]["enum"],
            json!(CONVENTIONAL_KINDS)
        );
    }

    #[test]
    fn arguments_are_text_and_an_allowed_kind_only() {
        let r = parse_arguments(&json!({"text": "  cafe\u{301} "})).unwrap();
        assert_eq!((r.kind.as_str(), r.text.as_str()), ("fact", "caf\u{e9}"));
        let r = parse_arguments(&json!({"text": "x", "kind": "preference"})).unwrap();
        assert_eq!(r.kind, "preference");
        for (args, field) in [
            (json!({"text": "x", "user_id": "bob"}), "user_id"),
            (json!({"text": "x", "scope_id": "other"}), "scope_id"),
            (json!({"text": "x", "token": "t"}), "token"),
            (json!({"text": "x", "kind": "hermes-memory"}), "kind"),
            (json!({"text": "x", "kind": 3}), "kind"),
            (json!({"kind": "fact"}), "text"),
            (json!({"text": 1}), "text"),
            (json!({"text": " \n "}), "text"),
            (json!(["x"]), "arguments"),
        ] {
            let e = parse_arguments(&args).unwrap_err();
            assert!(
                e.to_string().starts_with(&format!("invalid {field}")),
                "{args}: {e}"
            );
        }
        let too_long = "日".repeat(2731);
        assert!(parse_arguments(&json!({"text": too_long}))
            .unwrap_err()
            .to_string()
            .contains("8192 UTF-8 bytes"));
    }
}
