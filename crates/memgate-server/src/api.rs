//! Request and response bodies of the HTTP API. Requests reject unknown
//! fields (a misspelled key is an error, not silently ignored); the memory
//! types themselves come from `memgate-core`.

use memgate_core::facts::MemoryExport;
use memgate_core::{
    Acknowledgement, Caller, Capabilities, FactPatch, HandoffContent, Result, SearchHit,
};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// `POST /v1/remember`.
#[derive(Clone, Debug, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RememberBody {
    /// Required on every operation: whose memory this is.
    pub caller: Caller,
    /// Memory kind, 1–128 characters after NFC normalization and trimming,
    /// no control characters (default `fact`).
    #[serde(default = "default_kind")]
    #[schemars(
        length(min = 1, max = 128),
        regex(pattern = r"^[^\x00-\x1f\x7f-\x9f]*$")
    )]
    pub kind: String,
    /// 1–8192 UTF-8 bytes after NFC normalization and trimming; no control
    /// characters other than tab, line feed and carriage return.
    #[schemars(
        length(min = 1),
        regex(pattern = r"^[^\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f]*$")
    )]
    pub text: String,
    /// 0–1 (omitted: 1, the user said it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub confidence: Option<f64>,
}

fn default_kind() -> String {
    "fact".to_owned()
}

/// `POST /v1/search`.
#[derive(Clone, Debug, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SearchBody {
    /// Required on every operation: whose memory this is.
    pub caller: Caller,
    #[schemars(length(min = 1))]
    pub query: String,
    /// 1–100 (default 5).
    #[serde(default = "default_top_k")]
    pub top_k: usize,
    /// Only entries of this kind/category; applied before the `top_k` cut.
    /// The rule of a stored kind: 1–128 characters, no control characters.
    #[serde(default)]
    #[schemars(
        length(min = 1, max = 128),
        regex(pattern = r"^[^\x00-\x1f\x7f-\x9f]*$")
    )]
    pub kind: Option<String>,
}

fn default_top_k() -> usize {
    5
}

/// Upper bound of `top_k`.
pub const MAX_TOP_K: usize = 100;

/// `POST /v1/search` result.
#[derive(Clone, Debug, Serialize, Deserialize, JsonSchema)]
pub struct SearchResults {
    pub results: Vec<SearchHit>,
    pub count: usize,
}

/// `POST /v1/facts/list`.
#[derive(Clone, Debug, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ListFactsBody {
    /// Required on every operation: whose memory this is.
    pub caller: Caller,
    /// Include retired entries (kept with their history).
    #[serde(default)]
    pub include_retired: bool,
}

/// `POST /v1/facts/list` result.
#[derive(Clone, Debug, Serialize, Deserialize, JsonSchema)]
pub struct FactList {
    pub facts: Vec<memgate_core::Fact>,
}

/// `POST /v1/facts/get` and `POST /v1/facts/retire`.
#[derive(Clone, Debug, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct FactIdBody {
    /// Required on every operation: whose memory this is.
    pub caller: Caller,
    #[schemars(length(min = 1))]
    pub id: String,
}

/// `POST /v1/facts/revise`.
#[derive(Clone, Debug, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ReviseBody {
    /// Required on every operation: whose memory this is.
    pub caller: Caller,
    #[schemars(length(min = 1))]
    pub id: String,
    /// New kind; omitted = unchanged.
    #[serde(default)]
    pub kind: Option<String>,
    /// New text; omitted = unchanged.
    #[serde(default)]
    pub text: Option<String>,
    /// New confidence, 0–1; omitted = unchanged.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub confidence: Option<f64>,
}

impl ReviseBody {
    pub fn patch(&self) -> FactPatch {
        FactPatch {
            kind: self.kind.clone(),
            text: self.text.clone(),
            confidence: self.confidence,
        }
    }
}

/// `POST /v1/export`.
#[derive(Clone, Debug, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ExportBody {
    /// Required on every operation: whose memory this is.
    pub caller: Caller,
}

/// `POST /v1/forget/thread` (the caller's thread), `POST /v1/forget/scope`
/// (the caller's user and agent) and `POST /v1/forget/user` (every agent).
#[derive(Clone, Debug, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ForgetBody {
    #[serde(default)]
    pub caller: Caller,
}

/// A handoff's content as sent: checked by the handler, so a broken rule is
/// answered with the field's own name (`content.objective`), not `body`.
#[derive(Clone, Debug, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct HandoffContentBody {
    /// 1–4096 UTF-8 bytes after NFC normalization and trimming.
    pub objective: String,
    /// Verified progress, at most 32 items.
    #[serde(default)]
    pub progress: Vec<String>,
    /// At most 32 items.
    #[serde(default)]
    pub blockers: Vec<String>,
    /// 1–4096 UTF-8 bytes.
    pub next_action: String,
    /// At most 32 items.
    #[serde(default)]
    pub evidence: Vec<String>,
}

impl HandoffContentBody {
    pub fn content(&self) -> Result<HandoffContent> {
        HandoffContent::new(
            &self.objective,
            &self.progress,
            &self.blockers,
            &self.next_action,
            &self.evidence,
        )
    }
}

impl From<&HandoffContent> for HandoffContentBody {
    fn from(c: &HandoffContent) -> Self {
        Self {
            objective: c.objective.clone(),
            progress: c.progress.clone(),
            blockers: c.blockers.clone(),
            next_action: c.next_action.clone(),
            evidence: c.evidence.clone(),
        }
    }
}

/// An acknowledgement as sent, checked by the handler (field `message`).
#[derive(Clone, Debug, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct AcknowledgementBody {
    /// `accepted`, `needs_clarification` or `declined`.
    pub decision: String,
    /// Required unless accepted.
    #[serde(default)]
    pub message: Option<String>,
}

impl AcknowledgementBody {
    pub fn acknowledgement(&self) -> Result<Acknowledgement> {
        Acknowledgement::new(&self.decision, self.message.as_deref())
    }
}

impl From<&Acknowledgement> for AcknowledgementBody {
    fn from(a: &Acknowledgement) -> Self {
        let (decision, message) = match a {
            Acknowledgement::Accepted => ("accepted", None),
            Acknowledgement::NeedsClarification { message } => {
                ("needs_clarification", Some(message.clone()))
            }
            Acknowledgement::Declined { message } => ("declined", Some(message.clone())),
        };
        Self {
            decision: decision.to_owned(),
            message,
        }
    }
}

/// `POST /v1/handoff/prepare`: a new draft of the caller's running task.
#[derive(Clone, Debug, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct HandoffPrepareBody {
    /// Required on every operation: whose task this is.
    pub caller: Caller,
    pub content: HandoffContentBody,
}

/// `POST /v1/handoff/{get,finalize,continue,commit}`.
#[derive(Clone, Debug, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct HandoffIdBody {
    /// Required on every operation: whose handoff this is.
    pub caller: Caller,
    #[schemars(length(min = 1))]
    pub id: String,
}

/// `POST /v1/handoff/correct`: replaces a draft's content.
#[derive(Clone, Debug, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct HandoffCorrectBody {
    /// Required on every operation: whose handoff this is.
    pub caller: Caller,
    #[schemars(length(min = 1))]
    pub id: String,
    pub content: HandoffContentBody,
}

/// `POST /v1/handoff/acknowledge`: the receiver's answer.
#[derive(Clone, Debug, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct HandoffAcknowledgeBody {
    /// Required on every operation: whose handoff this is.
    pub caller: Caller,
    #[schemars(length(min = 1))]
    pub id: String,
    pub acknowledgement: AcknowledgementBody,
}

/// `POST /v1/import`.
#[derive(Clone, Debug, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ImportBody {
    /// Required on every operation: whose memory this is.
    pub caller: Caller,
    pub data: MemoryExport,
}

/// `GET /health`.
#[derive(Clone, Debug, Serialize, Deserialize, JsonSchema)]
pub struct Health {
    pub status: String,
    pub version: String,
    pub backend: String,
    pub capabilities: Capabilities,
    pub memory_enabled: bool,
    pub injection_enabled: bool,
}

/// Every error body: `{"error":{"code","message", …the variant's fields}}`,
/// so a client rebuilds the same error (see `memgate_core::WireError`).
#[derive(Clone, Debug, Serialize, Deserialize, JsonSchema)]
pub struct ErrorBody {
    pub error: memgate_core::WireError,
}
