//! Remember: one explicit, user-requested memory, and its exact outcome.
//!
//! Text is normalized the way PowerContext does it (Unicode NFC, then trim)
//! and must be 1 to 8192 UTF-8 bytes afterwards; a kind is 1 to 128
//! characters. Control characters follow [`crate::fields`]. The outcome is reported as the backend saw it and is never
//! retried blindly: `Unknown` means the write may have committed.

use crate::{fields, MemoryError, Result};
use serde::{Deserialize, Serialize};
use std::fmt;
use unicode_normalization::UnicodeNormalization;

/// Upper bound of a memory text, in UTF-8 bytes after normalization.
pub const MAX_MEMORY_TEXT_BYTES: usize = 8192;
pub use crate::fields::MAX_KIND_CHARS;
/// The conventional kinds that PowerContext's skills and plugins use.
pub const CONVENTIONAL_KINDS: &[&str] = &[
    "fact",
    "preference",
    "decision",
    "constraint",
    "current-state",
    "task-outcome",
    "next-step",
];

/// Unicode NFC, then leading and trailing whitespace removed.
pub fn normalize_text(raw: &str) -> String {
    let nfc: String = raw.nfc().collect();
    nfc.trim().to_owned()
}

/// A validated, normalized request to remember one thing.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct RememberRequest {
    pub kind: String,
    pub text: String,
    /// 0..1 (the stores keep it; unset is [`crate::facts::EXPLICIT_CONFIDENCE`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub confidence: Option<f64>,
}

impl RememberRequest {
    /// Normalizes and validates; errors name the field and the rule.
    pub fn new(kind: &str, text: &str) -> Result<Self> {
        let kind = normalize_text(kind);
        fields::check_kind("kind", &kind)?;
        let text = normalize_text(text);
        if let Some(rule) = fields::text_defect(&text) {
            return Err(MemoryError::invalid("text", rule));
        }
        if text.is_empty() {
            return Err(MemoryError::invalid(
                "text",
                "must not be empty after NFC normalization and trimming",
            ));
        }
        if text.len() > MAX_MEMORY_TEXT_BYTES {
            return Err(MemoryError::invalid(
                "text",
                format!(
                    "must be at most {MAX_MEMORY_TEXT_BYTES} UTF-8 bytes after normalization (got {})",
                    text.len()
                ),
            ));
        }
        Ok(Self {
            kind,
            text,
            confidence: None,
        })
    }

    /// The same request with a confidence, checked to be in 0..1.
    pub fn with_confidence(mut self, confidence: Option<f64>) -> Result<Self> {
        self.confidence = confidence
            .map(|c| crate::facts::check_confidence("confidence", c))
            .transpose()?;
        Ok(self)
    }
}

impl<'de> Deserialize<'de> for RememberRequest {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
        #[derive(Deserialize)]
        #[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
        #[serde(deny_unknown_fields)]
        struct Raw {
            #[serde(default = "default_kind")]
            kind: String,
            text: String,
            #[serde(default)]
            confidence: Option<f64>,
        }
        let raw = Raw::deserialize(d)?;
        RememberRequest::new(&raw.kind, &raw.text)
            .and_then(|r| r.with_confidence(raw.confidence))
            .map_err(serde::de::Error::custom)
    }
}

fn default_kind() -> String {
    "fact".to_owned()
}

/// A stable reference to a stored memory, in the backend's own notation
/// (`mem_…` for the local store, the server's citation for PowerContext).
#[derive(Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(transparent)]
pub struct Citation(pub String);

impl Citation {
    pub fn new(s: impl Into<String>) -> Self {
        Self(s.into())
    }
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for Citation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Citation({})", self.0)
    }
}

impl fmt::Display for Citation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// What happened to a remember request, exactly as the backend knows it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(tag = "outcome", rename_all = "snake_case")]
pub enum RememberOutcome {
    /// A new entry was stored; the citation comes from the store.
    Stored { citation: Citation },
    /// An identical active entry exists; nothing new was stored. The citation
    /// is present only when the store returned one (never invented).
    AlreadyPresent {
        #[serde(default, skip_serializing_if = "Option::is_none")]
        citation: Option<Citation>,
        /// The store's memory revision after the no-op, when it reports one.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        revision: Option<u64>,
    },
    /// The request may have committed but its answer was lost (or the
    /// deadline passed after sending). Do not retry blindly.
    Unknown { reason: String },
    /// The store rejected the request; nothing was stored.
    Failed { reason: String },
}

impl RememberOutcome {
    /// A short sentence for the user or the model.
    pub fn describe(&self) -> String {
        match self {
            Self::Stored { citation } => format!("Saved to memory ({citation})."),
            Self::AlreadyPresent {
                citation: Some(c), ..
            } => format!("Already in memory ({c}); nothing new was added."),
            Self::AlreadyPresent { citation: None, .. } => {
                "Already in memory; nothing new was added.".to_owned()
            }
            Self::Unknown { reason } => format!(
                "The save outcome is unknown ({reason}): it may or may not have been stored. \
                 It was not retried; check memory before saving again."
            ),
            Self::Failed { reason } => format!("Not saved: {reason}."),
        }
    }

    /// True for outcomes that left the memory saved (new or existing).
    pub fn is_saved(&self) -> bool {
        matches!(self, Self::Stored { .. } | Self::AlreadyPresent { .. })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn text_is_nfc_normalized_and_trimmed() {
        let r = RememberRequest::new(" fact ", "  cafe\u{301}  ").unwrap();
        assert_eq!(r.kind, "fact");
        assert_eq!(r.text, "caf\u{e9}");
    }

    #[test]
    fn byte_limit_is_measured_after_normalization() {
        let padded = format!("  {}  ", "a".repeat(8192));
        assert_eq!(
            RememberRequest::new("fact", &padded).unwrap().text.len(),
            8192
        );
        let e = RememberRequest::new("fact", &"a".repeat(8193)).unwrap_err();
        assert!(e.to_string().contains("8192 UTF-8 bytes"), "{e}");
        // 2731 CJK characters are 8193 bytes.
        assert!(RememberRequest::new("fact", &"日".repeat(2731)).is_err());
        assert!(RememberRequest::new("fact", &"日".repeat(2730)).is_ok());
    }

    #[test]
    fn blank_text_and_bad_kinds_are_named() {
        assert!(RememberRequest::new("fact", " \n ")
            .unwrap_err()
            .to_string()
            .starts_with("invalid text"));
        assert!(RememberRequest::new("  ", "x")
            .unwrap_err()
            .to_string()
            .starts_with("invalid kind"));
        assert!(RememberRequest::new(&"k".repeat(129), "x").is_err());
        assert!(RememberRequest::new(&"k".repeat(128), "x").is_ok());
    }

    #[test]
    fn deserializing_validates_and_rejects_unknown_fields() {
        let r: RememberRequest = serde_json::from_str(r#"{"text":" x "}"#).unwrap();
        assert_eq!((r.kind.as_str(), r.text.as_str()), ("fact", "x"));
        assert!(serde_json::from_str::<RememberRequest>(r#"{"text":""}"#).is_err());
        assert!(serde_json::from_str::<RememberRequest>(r#"{"text":"x","user_id":"u"}"#).is_err());
    }

    #[test]
    fn outcomes_serialize_with_a_tag() {
        let o = RememberOutcome::AlreadyPresent {
            citation: None,
            revision: Some(3),
        };
        assert_eq!(
            serde_json::to_string(&o).unwrap(),
            r#"{"outcome":"already_present","revision":3}"#
        );
        assert!(o.is_saved());
        assert!(!RememberOutcome::Unknown { reason: "x".into() }.is_saved());
        assert!(RememberOutcome::Unknown {
            reason: "timeout".into()
        }
        .describe()
        .contains("unknown"));
    }
}
