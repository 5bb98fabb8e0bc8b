//! Search, fact management and import/export types. These operations are
//! optional: a backend that lacks one answers `MemoryError::Unsupported`.

use serde::{Deserialize, Serialize};

/// A search over the caller's memory. `kind` filters before the `top_k` cut.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(deny_unknown_fields)]
pub struct SearchQuery {
    pub query: String,
    #[serde(default = "default_top_k")]
    pub top_k: usize,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kind: Option<String>,
}

fn default_top_k() -> usize {
    5
}

impl SearchQuery {
    pub fn new(query: impl Into<String>) -> Self {
        Self {
            query: query.into(),
            top_k: default_top_k(),
            kind: None,
        }
    }
}

/// One search result, in the host contract's shape (`id`, `content`,
/// `category`, `confidence`/`score`, `source`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct SearchHit {
    pub id: String,
    pub content: String,
    pub category: String,
    #[serde(default)]
    pub score: Option<f64>,
    #[serde(default)]
    pub source: Option<String>,
}

/// Lifecycle of an explicit memory: retired entries are not recalled but
/// are kept with their history.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "snake_case")]
pub enum FactState {
    Active,
    Retired,
}

/// An explicit memory ("fact") as stored. `id` is its stable citation.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct Fact {
    pub id: String,
    pub kind: String,
    pub text: String,
    pub state: FactState,
    /// 1 for a new entry, +1 for each revision.
    pub version: u32,
    /// RFC 3339 UTC timestamps.
    pub created_at: String,
    pub updated_at: String,
}

/// A revision of a fact; omitted fields are left unchanged.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(deny_unknown_fields)]
pub struct FactPatch {
    #[serde(default)]
    pub kind: Option<String>,
    #[serde(default)]
    pub text: Option<String>,
}

/// A captured turn in an export.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct ExportedTurn {
    pub thread: String,
    pub role: String,
    pub text: String,
    /// The message signature that makes re-import idempotent.
    pub signature: String,
    #[serde(default)]
    pub captured_at: Option<String>,
}

/// The portable form of one scope's memory (`format: memgate.export.v1`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(deny_unknown_fields)]
pub struct MemoryExport {
    pub format: String,
    #[serde(default)]
    pub facts: Vec<Fact>,
    #[serde(default)]
    pub turns: Vec<ExportedTurn>,
}

/// The export format identifier.
pub const EXPORT_FORMAT: &str = "memgate.export.v1";

impl MemoryExport {
    pub fn new(facts: Vec<Fact>, turns: Vec<ExportedTurn>) -> Self {
        Self {
            format: EXPORT_FORMAT.to_owned(),
            facts,
            turns,
        }
    }
}

/// What an import merged in.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct ImportReport {
    pub facts_imported: usize,
    pub facts_already_present: usize,
    pub turns_imported: usize,
    pub turns_already_present: usize,
}
