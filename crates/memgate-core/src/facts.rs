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

/// Where a fact came from: said explicitly (remember, the API, an import)
/// or distilled from captured turns by a model. A distilled fact never
/// overrides an explicit one.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "snake_case")]
pub enum FactOrigin {
    #[default]
    Explicit,
    Distilled,
}

impl FactOrigin {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Explicit => "explicit",
            Self::Distilled => "distilled",
        }
    }

    /// The stored name back; anything unknown reads as explicit (the
    /// stores' CHECK constraints admit only the two names).
    pub fn from_name(name: &str) -> Self {
        if name == "distilled" {
            Self::Distilled
        } else {
            Self::Explicit
        }
    }
}

/// Who wrote a version of a fact: the user through the contract's
/// remember/revise/retire, the API's bulk path (an import), or the
/// distillation model.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "snake_case")]
pub enum ChangedBy {
    #[default]
    User,
    Api,
    Model,
}

impl ChangedBy {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::User => "user",
            Self::Api => "api",
            Self::Model => "model",
        }
    }

    pub fn from_name(name: &str) -> Self {
        match name {
            "api" => Self::Api,
            "model" => Self::Model,
            _ => Self::User,
        }
    }
}

/// The confidence of a fact saved without one: the user said it.
pub const EXPLICIT_CONFIDENCE: f64 = 1.0;

fn default_confidence() -> f64 {
    EXPLICIT_CONFIDENCE
}

/// A confidence must be a finite number in 0..=1; the error names `field`.
pub fn check_confidence(field: &str, value: f64) -> crate::Result<f64> {
    if value.is_finite() && (0.0..=1.0).contains(&value) {
        Ok(value)
    } else {
        Err(crate::MemoryError::invalid(
            field,
            format!("must be a number between 0 and 1 (got {value})"),
        ))
    }
}

/// An explicit memory ("fact") as stored. `id` is its stable citation.
///
/// Provenance and time (all defaulted, so older exports still read):
/// `origin`, the turns it rests on (`sources`, turn citations, and their
/// `thread`), when it was said (`said_at`, the source turn's time), when it
/// stopped being true (`valid_to`) and the fact that replaced it
/// (`superseded_by`; a superseded fact is retired and kept with its
/// history). `changed_by` says who wrote this version.
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
    #[serde(default)]
    pub origin: FactOrigin,
    /// 0..1; an explicit fact saved without one has 1.
    #[serde(default = "default_confidence")]
    pub confidence: f64,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub sources: Vec<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub thread: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub said_at: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub valid_to: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub superseded_by: Option<String>,
    #[serde(default)]
    pub changed_by: ChangedBy,
}

impl Fact {
    /// True while the fact holds: active and never superseded.
    pub fn is_current(&self) -> bool {
        self.state == FactState::Active && self.superseded_by.is_none()
    }
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
    pub origin: FactOrigin,
    pub confidence: f64,
    pub thread: Option<&'a str>,
    pub said_at: Option<&'a str>,
    pub changed_by: ChangedBy,
}

impl<'a> NewFact<'a> {
    /// An explicit, active fact written now by `by`.
    pub fn explicit(
        kind: &'a str,
        text: &'a str,
        confidence: f64,
        now: &'a str,
        by: ChangedBy,
    ) -> Self {
        Self {
            kind,
            text,
            state: FactState::Active,
            created_at: now,
            updated_at: now,
            origin: FactOrigin::Explicit,
            confidence,
            thread: None,
            said_at: None,
            changed_by: by,
        }
    }
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
    /// 0..1; a patch of confidence alone is a revision too.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub confidence: Option<f64>,
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
    use super::{check_confidence, ChangedBy, Fact, FactPatch, FactState};
    use crate::redaction::redact_remember;
    use crate::time::now_rfc3339;
    use crate::{MemoryError, RememberRequest, Result};
    use memgate_redact::Redactor;

    /// A patch must change something, and a confidence must be in 0..1.
    pub fn check_patch(patch: &FactPatch) -> Result<()> {
        if patch.kind.is_none() && patch.text.is_none() && patch.confidence.is_none() {
            return Err(MemoryError::invalid(
                "patch",
                "must set `kind`, `text` or `confidence`",
            ));
        }
        if let Some(c) = patch.confidence {
            check_confidence("confidence", c)?;
        }
        Ok(())
    }

    /// A fact's next kind, text and confidence.
    #[derive(Clone, Debug, PartialEq)]
    pub struct Revision {
        pub kind: String,
        pub text: String,
        pub confidence: f64,
    }

    impl Revision {
        /// True when only the confidence moves (no duplicate to check).
        pub fn keeps_text_of(&self, current: &Fact) -> bool {
            self.kind == current.kind && self.text == current.text
        }
    }

    /// The entry `patch` turns `current` into, or `None` when the result
    /// equals it. The new text is redacted like an explicit save; a text
    /// that *is* a secret is refused, retired memories cannot be revised.
    pub fn revision(
        current: &Fact,
        patch: &FactPatch,
        redactor: &Redactor,
    ) -> Result<Option<Revision>> {
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
        let confidence = match patch.confidence {
            Some(c) => check_confidence("confidence", c)?,
            None => current.confidence,
        };
        let next = Revision {
            kind: revised.kind,
            text: revised.text,
            confidence,
        };
        let unchanged = next.keeps_text_of(current) && next.confidence == current.confidence;
        Ok((!unchanged).then_some(next))
    }

    /// The conflict of a revision that would equal another active entry.
    pub fn duplicate_of(current: &Fact, other: &str) -> MemoryError {
        MemoryError::Conflict(format!(
            "the revision of {} would duplicate active memory {other}",
            current.id
        ))
    }

    /// The next version of `current` with `revised`'s kind, text and
    /// confidence, written by the user.
    pub fn revised(current: Fact, revised: Revision) -> Fact {
        Fact {
            kind: revised.kind,
            text: revised.text,
            confidence: revised.confidence,
            version: current.version + 1,
            updated_at: now_rfc3339(),
            changed_by: ChangedBy::User,
            ..current
        }
    }

    /// The next version of `current`, retired; `None` when it already is.
    pub fn retired(current: &Fact) -> Option<Fact> {
        (current.state != FactState::Retired).then(|| Fact {
            state: FactState::Retired,
            version: current.version + 1,
            updated_at: now_rfc3339(),
            changed_by: ChangedBy::User,
            ..current.clone()
        })
    }
}
