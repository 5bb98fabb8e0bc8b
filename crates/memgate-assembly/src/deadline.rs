//! One total deadline per memory operation, whatever the backend does inside
//! it (retries, a read per hit, a commit): the caller gets an answer in time.
//!
//! Backends keep their own per-request timeouts; this is the outer bound the
//! surfaces promise. Values come from `memory.deadlines` (memgate's addition
//! to the host's `memory:` section).

use memgate_core::{MemoryError, Result};
use serde::Deserialize;
use std::fmt;
use std::time::Duration;

/// The operations of the memory contract, as named in metrics and errors.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Operation {
    Recall,
    Capture,
    Remember,
    Search,
    ListFacts,
    GetFact,
    ReviseFact,
    RetireFact,
    Export,
    Import,
    Forget,
    /// The scopes a store holds (the memory browser's "who").
    Scopes,
    /// Every version of one fact.
    FactHistory,
    /// A page of a scope's threads.
    ListThreads,
    /// A page of one thread's turns.
    ReadThread,
    /// What one scope holds, counted (the host's memory page).
    Holdings,
    Warm,
    /// `memgate doctor`'s look at the backend's own state.
    Diagnose,
    HandoffPrepare,
    HandoffGet,
    HandoffCorrect,
    HandoffFinalize,
    HandoffContinue,
    HandoffAcknowledge,
    /// Stores a milestone memory: bounded like `remember`.
    HandoffCommit,
}

impl Operation {
    /// The stable name used as the `operation` label in `/metrics`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Recall => "recall",
            Self::Capture => "capture",
            Self::Remember => "remember",
            Self::Search => "search",
            Self::ListFacts => "facts_list",
            Self::GetFact => "facts_get",
            Self::ReviseFact => "facts_revise",
            Self::RetireFact => "facts_retire",
            Self::Export => "export",
            Self::Import => "import",
            Self::Forget => "forget",
            Self::Scopes => "stored_scopes",
            Self::FactHistory => "facts_history",
            Self::ListThreads => "threads_list",
            Self::ReadThread => "threads_read",
            Self::Holdings => "holdings",
            Self::Warm => "warm",
            Self::Diagnose => "diagnose",
            Self::HandoffPrepare => "handoff_prepare",
            Self::HandoffGet => "handoff_get",
            Self::HandoffCorrect => "handoff_correct",
            Self::HandoffFinalize => "handoff_finalize",
            Self::HandoffContinue => "handoff_continue",
            Self::HandoffAcknowledge => "handoff_acknowledge",
            Self::HandoffCommit => "handoff_commit",
        }
    }
}

impl fmt::Display for Operation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Bounds of every deadline, in seconds.
const MIN_SECONDS: f64 = 0.05;
const MAX_SECONDS: f64 = 600.0;

/// `memory.deadlines`: total seconds per operation.
#[derive(Clone, Copy, Debug, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Deadlines {
    /// Recall, within the host's first-turn budget (5 s by default).
    pub recall_seconds: f64,
    /// Capture of one snapshot (sending, committing, the cursor).
    pub capture_seconds: f64,
    /// An explicit save, below the host's 30-second tool limit.
    pub remember_seconds: f64,
    /// Search, facts, export/import and the start-up check.
    pub other_seconds: f64,
}

impl Default for Deadlines {
    fn default() -> Self {
        Self {
            recall_seconds: 5.0,
            capture_seconds: 120.0,
            remember_seconds: 25.0,
            other_seconds: 30.0,
        }
    }
}

impl Deadlines {
    /// Checks every value; the error names the key and the rule.
    pub fn validate(&self) -> Result<()> {
        for (key, value) in [
            ("recall_seconds", self.recall_seconds),
            ("capture_seconds", self.capture_seconds),
            ("remember_seconds", self.remember_seconds),
            ("other_seconds", self.other_seconds),
        ] {
            if !(value.is_finite() && (MIN_SECONDS..=MAX_SECONDS).contains(&value)) {
                return Err(MemoryError::Config(format!(
                    "memory.deadlines.{key} must be between {MIN_SECONDS} and {MAX_SECONDS} seconds (got {value})"
                )));
            }
        }
        Ok(())
    }

    /// The total deadline of one operation.
    pub fn of(&self, operation: Operation) -> Duration {
        let seconds = match operation {
            Operation::Recall => self.recall_seconds,
            Operation::Capture => self.capture_seconds,
            Operation::Remember | Operation::HandoffCommit => self.remember_seconds,
            _ => self.other_seconds,
        };
        Duration::from_secs_f64(seconds)
    }

    /// The same deadline for every operation (tests, benchmarks).
    pub fn uniform(limit: Duration) -> Self {
        let s = limit.as_secs_f64();
        Self {
            recall_seconds: s,
            capture_seconds: s,
            remember_seconds: s,
            other_seconds: s,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_are_valid_and_bad_values_name_their_key() {
        Deadlines::default().validate().unwrap();
        let bad = Deadlines {
            capture_seconds: 0.0,
            ..Default::default()
        };
        let e = bad.validate().unwrap_err().to_string();
        assert!(
            e.contains("memory.deadlines.capture_seconds must be between"),
            "{e}"
        );
        let bad = Deadlines {
            recall_seconds: f64::NAN,
            ..Default::default()
        };
        assert!(bad.validate().is_err());
        assert_eq!(
            Deadlines::default().of(Operation::Recall),
            Duration::from_secs(5)
        );
        assert_eq!(
            Deadlines::default().of(Operation::Export),
            Duration::from_secs(30)
        );
    }
}
