//! Reading captured conversations back a thread at a time: the memory
//! browser's "what was said", without reading a scope's whole export.

use serde::{Deserialize, Serialize};

/// Most threads or turns one page read returns.
pub const MAX_PAGE: usize = 1000;

/// One captured thread of a scope.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct ThreadSummary {
    pub thread: String,
    /// Captured turns in the thread.
    pub turns: u64,
    /// RFC 3339 UTC capture times of its first and latest turn.
    pub first_captured_at: String,
    pub last_captured_at: String,
}

/// One page of a scope's threads, ordered by thread name.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct ThreadList {
    pub threads: Vec<ThreadSummary>,
    /// Threads in the scope, on every page.
    pub total: u64,
}

/// One captured turn, redacted as stored.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct ThreadTurn {
    /// The citation facts use for this turn (`sources`).
    pub citation: String,
    pub role: String,
    pub text: String,
    pub captured_at: String,
}

/// One page of a thread's turns, in conversation order.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct ThreadTurns {
    pub turns: Vec<ThreadTurn>,
    /// Turns in the thread, on every page.
    pub total: u64,
}

/// A page of a list: skip `offset` entries, return at most `limit`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PageRequest {
    pub offset: usize,
    pub limit: usize,
}

impl PageRequest {
    /// Checks `limit` against [`MAX_PAGE`], naming the field and the rule.
    pub fn new(offset: usize, limit: usize) -> crate::Result<Self> {
        if limit == 0 || limit > MAX_PAGE {
            return Err(crate::MemoryError::invalid(
                "limit",
                format!("must be 1..={MAX_PAGE} (got {limit})"),
            ));
        }
        Ok(Self { offset, limit })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_page_limit_outside_its_bounds_names_the_field() {
        for bad in [0, MAX_PAGE + 1] {
            let err = PageRequest::new(0, bad).unwrap_err().to_string();
            assert!(err.contains("limit") && err.contains("1..=1000"), "{err}");
        }
        assert_eq!(PageRequest::new(5, 100).unwrap().offset, 5);
    }
}
