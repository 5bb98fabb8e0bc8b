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

    /// The kind filter follows the rule of a stored kind
    /// ([`crate::fields::check_kind`]): a filter no memory can match is
    /// refused, not searched for.
    pub fn check(&self) -> crate::Result<()> {
        match &self.kind {
            Some(kind) => crate::fields::check_kind("kind", kind),
            None => Ok(()),
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

/// A fact as a store writes its first version: both stores take it, so a
/// save and an import insert alike.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct NewFact<'a> {
    pub kind: &'a str,
    pub text: &'a str,
    pub state: FactState,
    /// RFC 3339 UTC timestamps (an import keeps the exported ones).
    pub created_at: &'a str,
    pub updated_at: &'a str,
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

/// The history rules every backend that keeps explicit memories applies in
/// the same way, so `local` and `postgres` cannot drift: what a revision
/// may change, how a version advances, and the conflicts it names.
pub mod history {
    use super::{Fact, FactPatch, FactState};
    use crate::redaction::redact_remember;
    use crate::time::now_rfc3339;
    use crate::{MemoryError, RememberRequest, Result};
    use memgate_redact::Redactor;

    /// A patch must change something.
    pub fn check_patch(patch: &FactPatch) -> Result<()> {
        if patch.kind.is_none() && patch.text.is_none() {
            return Err(MemoryError::invalid("patch", "must set `kind` or `text`"));
        }
        Ok(())
    }

    /// The entry `patch` turns `current` into, or `None` when the result
    /// equals it. The new text is redacted like an explicit save; a text
    /// that *is* a secret is refused, retired memories cannot be revised.
    pub fn revision(
        current: &Fact,
        patch: &FactPatch,
        redactor: &Redactor,
    ) -> Result<Option<RememberRequest>> {
        if current.state == FactState::Retired {
            return Err(MemoryError::Conflict(format!(
                "{} is retired; retired memories cannot be revised",
                current.id
            )));
        }
        let revised = RememberRequest::new(
            patch.kind.as_deref().unwrap_or(&current.kind),
            patch.text.as_deref().unwrap_or(&current.text),
        )?;
        let revised = redact_remember(redactor, &revised).map_err(|_| {
            MemoryError::invalid("text", "is a secret; memory does not keep secrets")
        })?;
        let unchanged = revised.kind == current.kind && revised.text == current.text;
        Ok((!unchanged).then_some(revised))
    }

    /// The conflict of a revision that would equal another active entry.
    pub fn duplicate_of(current: &Fact, other: &str) -> MemoryError {
        MemoryError::Conflict(format!(
            "the revision of {} would duplicate active memory {other}",
            current.id
        ))
    }

    /// The next version of `current` with `revised`'s kind and text.
    pub fn revised(current: Fact, revised: RememberRequest) -> Fact {
        Fact {
            kind: revised.kind,
            text: revised.text,
            version: current.version + 1,
            updated_at: now_rfc3339(),
            ..current
        }
    }

    /// The next version of `current`, retired; `None` when it already is.
    pub fn retired(current: &Fact) -> Option<Fact> {
        (current.state != FactState::Retired).then(|| Fact {
            state: FactState::Retired,
            version: current.version + 1,
            updated_at: now_rfc3339(),
            ..current.clone()
        })
    }
}
