//! The recall keys both stores read from `backend_config` with the same
//! defaults and rules:
//!
//! | key | default | rule |
//! |---|---|---|
//! | `max_injection_chars` | 12000 | integer 256–100000 (characters) |
//! | `injection_query` | none | non-empty string (trimmed): when set, a recall without a query ranks with it instead of building the first-turn block |
//! | `recall_top_k` | 10 | integer 1–100 |
//! | `standing_memories` | 20 | integer 0–100: newest explicit memories every recall carries (after the matches of a query; first in the first-turn block), matched or not |

use memgate_core::setup::integer_setting;
use memgate_core::{MemoryError, Result};
use serde::Serialize;
use serde_json::{Map, Value};
use std::ops::RangeInclusive;

/// The seeds' profile query: what `injection_query` was before the
/// first-turn block existed (set it to rank a query-less recall with it).
pub const DEFAULT_INJECTION_QUERY: &str =
    "user profile preferences important entities events ongoing goals constraints and prior decisions";

/// The keys [`RecallSettings::read`] takes.
pub const RECALL_KEYS: &[&str] = &[
    "max_injection_chars",
    "injection_query",
    "recall_top_k",
    "standing_memories",
];

const MAX_INJECTION_CHARS: RangeInclusive<u64> = 256..=100_000;
const RECALL_TOP_K: RangeInclusive<u64> = 1..=100;
const STANDING_MEMORIES: RangeInclusive<u64> = 0..=100;

/// How a store lays out recall.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct RecallSettings {
    /// Upper bound of a recall block, in characters (256–100000).
    pub max_injection_chars: usize,
    /// The query recall ranks with when the caller gives none (or a blank
    /// one); `None` (the default) builds the first-turn block instead.
    pub injection_query: Option<String>,
    /// How many ranked items recall considers before the character budget.
    pub recall_top_k: usize,
    /// How many of the newest explicit memories recall carries after the
    /// ranked items, matched or not: the user asked for them to be kept, and
    /// a request rarely repeats their words ("add a refund calculation"
    /// versus "money amounts are integer cents").
    pub standing_memories: usize,
}

impl Default for RecallSettings {
    fn default() -> Self {
        Self {
            max_injection_chars: 12_000,
            injection_query: None,
            recall_top_k: 10,
            standing_memories: 20,
        }
    }
}

impl RecallSettings {
    /// The [`RECALL_KEYS`] of `config` over the defaults (other keys are the
    /// caller's to check); a value outside its rule is a
    /// [`MemoryError::Config`] naming `backend_config.<key>`.
    pub fn read(config: &Map<String, Value>) -> Result<Self> {
        let mut settings = Self::default();
        if let Some(v) = config.get("max_injection_chars") {
            settings.max_injection_chars =
                integer_setting(v, "max_injection_chars", MAX_INJECTION_CHARS)? as usize;
        }
        if let Some(v) = config.get("recall_top_k") {
            settings.recall_top_k = integer_setting(v, "recall_top_k", RECALL_TOP_K)? as usize;
        }
        if let Some(v) = config.get("standing_memories") {
            settings.standing_memories =
                integer_setting(v, "standing_memories", STANDING_MEMORIES)? as usize;
        }
        if let Some(v) = config.get("injection_query") {
            settings.injection_query = match v.as_str().map(str::trim) {
                Some(q) if !q.is_empty() => Some(q.to_owned()),
                _ => {
                    return Err(MemoryError::Config(
                        "backend_config.injection_query must be a non-empty string".to_owned(),
                    ))
                }
            };
        }
        Ok(settings)
    }
}
