//! Erasure: what a `forget` removes and what it reports.
//!
//! Unlike retiring a fact (kept with its history), forgetting erases: the
//! rows, their history, their index entries and, where the backend owns the
//! file, every recoverable copy. A backend whose memory lives on a server
//! answers `Unsupported` (erasure is the server's job there), never a
//! look-alike success.

use crate::setup::integer_setting;
use crate::time::format_unix_millis;
use serde::{Deserialize, Serialize};
use std::ops::RangeInclusive;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// What to erase, always inside the caller's user (and, but for `User`,
/// the caller's agent).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(tag = "target", rename_all = "snake_case")]
pub enum ForgetTarget {
    /// One explicit memory with every recorded version.
    Fact { id: String },
    /// Every captured turn of the caller's thread.
    Thread,
    /// Everything stored for the caller's (user, agent) scope.
    Scope,
    /// Everything stored for the caller's user, under every agent (a
    /// deletion request; the host's `clear_memory` without an agent).
    User,
}

impl ForgetTarget {
    pub fn as_str(&self) -> &'static str {
        match self {
            Self::Fact { .. } => "fact",
            Self::Thread => "thread",
            Self::Scope => "scope",
            Self::User => "user",
        }
    }
}

/// What a forget erased. Zero counts are a valid answer (nothing was there).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct ForgetReport {
    /// Explicit memories erased.
    pub facts: usize,
    /// Recorded versions of those memories erased.
    pub versions: usize,
    /// Captured turns erased.
    pub turns: usize,
}

/// `backend_config.max_turn_age_days` of the stores memgate owns (`local`,
/// `postgres`): captured turns older than this many days are erased by a
/// background retention sweep, with the distilled facts resting only on
/// them. One rule and one wording for both stores.
pub const MAX_TURN_AGE_DAYS: RangeInclusive<u64> = 1..=36_500;
/// How often the retention sweep runs when a maximum turn age is set.
pub const RETENTION_SWEEP_INTERVAL: Duration = Duration::from_secs(600);
/// Turns one retention transaction erases at most, so a sweep never holds
/// its locks for long.
pub const SWEEP_BATCH: usize = 500;
/// Batches one sweep runs at most; the rest waits for the next sweep.
pub const SWEEP_MAX_BATCHES: usize = 20;

const DAY: Duration = Duration::from_secs(86_400);

/// `max_turn_age_days` of `backend_config`: `None` when absent (turns are
/// kept until forgotten); anything but an integer in [`MAX_TURN_AGE_DAYS`]
/// is an error naming the key and the rule.
pub fn max_turn_age(
    config: &serde_json::Map<String, serde_json::Value>,
) -> crate::Result<Option<Duration>> {
    config
        .get("max_turn_age_days")
        .map(|v| {
            integer_setting(v, "max_turn_age_days", MAX_TURN_AGE_DAYS).map(|days| DAY * days as u32)
        })
        .transpose()
}

/// `captured_at` values before this are older than `age` at `now` (RFC 3339
/// UTC strings of one format compare in time order).
pub fn retention_cutoff(now: SystemTime, age: Duration) -> String {
    let now = now.duration_since(UNIX_EPOCH).unwrap_or_default();
    format_unix_millis(now.saturating_sub(age).as_millis() as i64)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn the_cutoff_is_the_age_before_now() {
        let now = UNIX_EPOCH + Duration::from_secs(86_400 * 31);
        assert_eq!(
            retention_cutoff(now, Duration::from_secs(86_400 * 30)),
            "1970-01-02T00:00:00.000Z"
        );
        assert_eq!(
            retention_cutoff(UNIX_EPOCH, Duration::from_secs(5)),
            "1970-01-01T00:00:00.000Z"
        );
    }

    #[test]
    fn the_maximum_turn_age_is_days_within_its_rule_or_absent() {
        let read = |v: serde_json::Value| max_turn_age(v.as_object().unwrap());
        assert_eq!(read(json!({})).unwrap(), None);
        assert_eq!(
            read(json!({"max_turn_age_days": 30})).unwrap(),
            Some(DAY * 30)
        );
        for bad in [
            json!(0),
            json!(36_501),
            json!(1.5),
            json!("30"),
            json!(null),
        ] {
            let e = read(json!({ "max_turn_age_days": bad })).unwrap_err();
            assert_eq!(
                e.to_string(),
                "backend_config.max_turn_age_days must be an integer between 1 and 36500"
            );
        }
    }
}
