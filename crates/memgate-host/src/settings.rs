//! The host's memory switches, named as in the host's `memory` config.

use memgate_core::{MemoryError, Result};
use std::time::Duration;

/// The host's deadline for first-turn recall (the host's 5-second budget).
pub const DEFAULT_RECALL_DEADLINE: Duration = Duration::from_secs(5);

/// Upper bound of the recall deadline: a turn must not wait minutes for memory.
pub const MAX_RECALL_DEADLINE: Duration = Duration::from_secs(300);

/// Which host memory surfaces are on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct HostSettings {
    /// `memory.enabled`: off means no recall and no capture call at all
    /// (the date reminder is still injected, as the host does).
    pub enabled: bool,
    /// `memory.injection_enabled`: off means no recall call; capture goes on.
    pub injection_enabled: bool,
    /// Offer the `remember` tool (when the backend can remember). A separate
    /// switch from `enabled`, as in the RFC: recall and the explicit-save
    /// tool are configured independently.
    pub remember_tool: bool,
    /// Total time first-turn recall may take before the turn goes on without
    /// it (and retries on the next turn).
    pub recall_deadline: Duration,
}

impl Default for HostSettings {
    fn default() -> Self {
        Self {
            enabled: true,
            injection_enabled: true,
            remember_tool: true,
            recall_deadline: DEFAULT_RECALL_DEADLINE,
        }
    }
}

impl HostSettings {
    /// Sets the recall deadline from seconds (a CLI or config value); the
    /// error names the field and the rule.
    pub fn with_recall_deadline_secs(mut self, seconds: f64) -> Result<Self> {
        let max = MAX_RECALL_DEADLINE.as_secs_f64();
        if !seconds.is_finite() || seconds <= 0.0 || seconds > max {
            return Err(MemoryError::invalid(
                "recall_deadline",
                format!("must be a number of seconds greater than 0 and at most {max}"),
            ));
        }
        self.recall_deadline = Duration::from_secs_f64(seconds);
        Ok(self)
    }

    /// Whether a first turn asks the backend for memory.
    pub fn recalls(&self) -> bool {
        self.enabled && self.injection_enabled
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn recall_deadline_is_validated_with_field_and_rule() {
        let ok = HostSettings::default()
            .with_recall_deadline_secs(0.25)
            .unwrap();
        assert_eq!(ok.recall_deadline, Duration::from_millis(250));
        for bad in [0.0, -1.0, f64::NAN, f64::INFINITY, 301.0] {
            let e = HostSettings::default()
                .with_recall_deadline_secs(bad)
                .unwrap_err()
                .to_string();
            assert!(e.starts_with("invalid recall_deadline: must be"), "{e}");
        }
    }

    #[test]
    fn either_switch_turns_recall_off() {
        let on = HostSettings::default();
        assert!(on.recalls());
        let no_injection = HostSettings {
            injection_enabled: false,
            ..on
        };
        assert!(!no_injection.recalls());
        let disabled = HostSettings {
            enabled: false,
            ..on
        };
        assert!(!disabled.recalls());
    }
}
