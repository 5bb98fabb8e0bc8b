//! Recall: the bounded, cited block of memory a host injects at the start of
//! a conversation (the host contract's `get_context`).

use crate::identity::Caller;
use crate::remember::Citation;
use serde::{Deserialize, Serialize};

/// A recall request. `query` is the latest user input where the host has one;
/// backends that recall with a fixed query (OpenViking's `injection_query`,
/// the local store without a query) use their configured query instead.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(deny_unknown_fields)]
pub struct RecallRequest {
    pub caller: Caller,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub query: Option<String>,
}

/// One recalled item, as it appears in the block.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct RecalledItem {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub citation: Option<Citation>,
    /// The memory kind or category (`fact`, `preference`, `turn`, …).
    pub kind: String,
    pub text: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub score: Option<f64>,
}

/// The recall result: `text` is ready to inject (unwrapped; the host adds
/// `<memory>` framing) and already within the backend's budget. `items` lists
/// what the block contains, for display and diagnostics. An empty recall has
/// empty text.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct Recall {
    pub text: String,
    #[serde(default)]
    pub items: Vec<RecalledItem>,
}

impl Recall {
    pub fn empty() -> Self {
        Self::default()
    }

    /// Blank text counts as nothing recalled (the host skips injection).
    pub fn is_empty(&self) -> bool {
        self.text.trim().is_empty()
    }
}
