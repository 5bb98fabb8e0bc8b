//! `memory.distill`: whether captured turns are distilled into facts, and
//! by which OpenAI-compatible chat endpoint, within which limits.
//!
//! Keys: `enabled` (false), `base_url` and `model` (required when enabled),
//! `api_key_env` (the *name* of the environment variable holding the key;
//! the key itself is never written in the file, logged or shown),
//! `timeout_ms` (60000, 100–600000: one model call in total),
//! `concurrency` (1, 1–8 jobs at once), `max_job_tokens` (8000,
//! 500–200000: a job's prompt estimate and its answer), `max_daily_tokens`
//! (1000000, 1000–1000000000: tokens the endpoint reported per UTC day),
//! `max_turns_per_job` (32, 1–256), `max_queued_jobs` (10000, 1–1000000),
//! `related_facts` (20, 0–100: current facts shown to the model),
//! `max_attempts` (5, 1–20: failed calls before a job is parked),
//! `structured_output` (true: `response_format` with a JSON schema).
//!
//! A worker's hold on a job (its lease, [`job_lease`]) follows from
//! `timeout_ms`: replicas sharing a PostgreSQL queue call the model once
//! per job unless a worker dies holding it.

use memgate_core::distill::QueueLimits;
use memgate_core::setup::EnvSource;
use memgate_core::{MemoryError, Result, Secret};
use serde_json::{Map, Value};
use std::ops::RangeInclusive;
use std::time::Duration;

/// How long a worker holds a job: its first call and one repair round at
/// most `timeout` each, plus ten seconds for reading and applying. A job
/// whose worker died waits this long for another.
pub fn job_lease(timeout: Duration) -> Duration {
    timeout * 2 + Duration::from_secs(10)
}

const KEYS: &[&str] = &[
    "enabled",
    "base_url",
    "model",
    "api_key_env",
    "timeout_ms",
    "concurrency",
    "max_job_tokens",
    "max_daily_tokens",
    "max_turns_per_job",
    "max_queued_jobs",
    "related_facts",
    "max_attempts",
    "structured_output",
];

/// Validated `memory.distill` (see the module doc).
#[derive(Clone, Debug, PartialEq)]
pub struct DistillSettings {
    pub enabled: bool,
    pub base_url: String,
    pub model: String,
    pub api_key_env: Option<String>,
    pub timeout: Duration,
    pub concurrency: usize,
    pub max_job_tokens: u64,
    pub max_daily_tokens: u64,
    pub queue: QueueLimits,
    pub related_facts: usize,
    pub max_attempts: u32,
    pub structured_output: bool,
}

impl Default for DistillSettings {
    fn default() -> Self {
        Self {
            enabled: false,
            base_url: String::new(),
            model: String::new(),
            api_key_env: None,
            timeout: Duration::from_secs(60),
            concurrency: 1,
            max_job_tokens: 8_000,
            max_daily_tokens: 1_000_000,
            queue: QueueLimits {
                max_turns_per_job: 32,
                max_queued_jobs: 10_000,
                lease: job_lease(Duration::from_secs(60)),
            },
            related_facts: 20,
            max_attempts: 5,
            structured_output: true,
        }
    }
}

fn field(key: &str) -> String {
    format!("memory.distill.{key}")
}

fn integer(
    map: &Map<String, Value>,
    key: &str,
    default: u64,
    range: RangeInclusive<u64>,
) -> Result<u64> {
    match map.get(key) {
        None | Some(Value::Null) => Ok(default),
        Some(v) => v.as_u64().filter(|n| range.contains(n)).ok_or_else(|| {
            MemoryError::Config(format!(
                "{} must be an integer between {} and {}",
                field(key),
                range.start(),
                range.end()
            ))
        }),
    }
}

fn boolean(map: &Map<String, Value>, key: &str, default: bool) -> Result<bool> {
    match map.get(key) {
        None | Some(Value::Null) => Ok(default),
        Some(Value::Bool(b)) => Ok(*b),
        Some(_) => Err(MemoryError::Config(format!(
            "{} must be true or false",
            field(key)
        ))),
    }
}

fn text(map: &Map<String, Value>, key: &str) -> Result<Option<String>> {
    match map.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) if !s.trim().is_empty() => Ok(Some(s.trim().to_owned())),
        Some(_) => Err(MemoryError::Config(format!(
            "{} must be a non-empty string",
            field(key)
        ))),
    }
}

impl DistillSettings {
    /// Reads and validates `memory.distill` (unset: off). Errors name
    /// `memory.distill.<key>` and the rule, never a value.
    pub fn parse(value: Option<&Value>) -> Result<Self> {
        let map = match value {
            None | Some(Value::Null) => return Ok(Self::default()),
            Some(Value::Object(map)) => map,
            Some(_) => {
                return Err(MemoryError::Config(
                    "memory.distill must be a mapping".to_owned(),
                ))
            }
        };
        if let Some(unknown) = map.keys().find(|k| !KEYS.contains(&k.as_str())) {
            return Err(MemoryError::Config(format!(
                "{} is not a distill setting (known: {})",
                field(unknown),
                KEYS.join(", ")
            )));
        }
        let defaults = Self::default();
        let enabled = boolean(map, "enabled", false)?;
        let base_url = text(map, "base_url")?.unwrap_or_default();
        let model = text(map, "model")?.unwrap_or_default();
        if enabled {
            if !(base_url.starts_with("http://") || base_url.starts_with("https://")) {
                return Err(MemoryError::Config(format!(
                    "{} must be set and start with http:// or https:// when distillation is enabled",
                    field("base_url")
                )));
            }
            if base_url.contains('@') {
                return Err(MemoryError::Config(format!(
                    "{} must not carry credentials (`user:password@`); use api_key_env",
                    field("base_url")
                )));
            }
            if model.is_empty() {
                return Err(MemoryError::Config(format!(
                    "{} must be set when distillation is enabled",
                    field("model")
                )));
            }
        }
        let api_key_env = text(map, "api_key_env")?;
        if let Some(name) = &api_key_env {
            if !name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') {
                return Err(MemoryError::Config(format!(
                    "{} must be the name of an environment variable (letters, digits, `_`), \
                     not the key itself",
                    field("api_key_env")
                )));
            }
        }
        let timeout = Duration::from_millis(integer(map, "timeout_ms", 60_000, 100..=600_000)?);
        Ok(Self {
            enabled,
            base_url,
            model,
            api_key_env,
            timeout,
            concurrency: integer(map, "concurrency", 1, 1..=8)? as usize,
            max_job_tokens: integer(
                map,
                "max_job_tokens",
                defaults.max_job_tokens,
                500..=200_000,
            )?,
            max_daily_tokens: integer(
                map,
                "max_daily_tokens",
                defaults.max_daily_tokens,
                1_000..=1_000_000_000,
            )?,
            queue: QueueLimits {
                max_turns_per_job: integer(map, "max_turns_per_job", 32, 1..=256)? as usize,
                max_queued_jobs: integer(map, "max_queued_jobs", 10_000, 1..=1_000_000)? as usize,
                lease: job_lease(timeout),
            },
            related_facts: integer(map, "related_facts", 20, 0..=100)? as usize,
            max_attempts: integer(map, "max_attempts", 5, 1..=20)? as u32,
            structured_output: boolean(map, "structured_output", true)?,
        })
    }

    /// The queue limits a store takes when distillation is on.
    pub fn queue_limits(&self) -> Option<QueueLimits> {
        self.enabled.then_some(self.queue)
    }

    /// The endpoint's key from the variable `api_key_env` names; a named
    /// variable that is unset or blank is an error naming the key, not
    /// the value.
    pub fn api_key(&self, env: &EnvSource) -> Result<Option<Secret>> {
        let Some(name) = &self.api_key_env else {
            return Ok(None);
        };
        Secret::from_setting(env(name)).map(Some).ok_or_else(|| {
            MemoryError::Config(format!(
                "{}: the environment variable {name} is unset or blank",
                field("api_key_env")
            ))
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;
    use std::sync::Arc;

    fn parse(v: Value) -> Result<DistillSettings> {
        DistillSettings::parse(Some(&v))
    }

    #[test]
    fn unset_is_off_and_on_needs_an_endpoint_and_a_model() {
        assert!(!DistillSettings::parse(None).unwrap().enabled);
        assert_eq!(DistillSettings::parse(None).unwrap().queue_limits(), None);
        let err = parse(json!({"enabled": true, "model": "m"})).unwrap_err();
        assert!(err.to_string().contains("memory.distill.base_url"), "{err}");
        let err = parse(json!({"enabled": true, "base_url": "http://h/v1"})).unwrap_err();
        assert!(err.to_string().contains("memory.distill.model"), "{err}");
        let on = parse(json!({"enabled": true, "base_url": "http://h/v1", "model": "m"})).unwrap();
        assert_eq!(on.queue_limits().unwrap().max_turns_per_job, 32);
    }

    #[test]
    fn every_bad_value_is_named_by_its_key() {
        let base = json!({"enabled": true, "base_url": "http://h/v1", "model": "m"});
        for (key, value) in [
            ("timeout_ms", json!(5)),
            ("concurrency", json!(0)),
            ("max_job_tokens", json!("lots")),
            ("max_daily_tokens", json!(-1)),
            ("max_turns_per_job", json!(1000)),
            ("related_facts", json!(101)),
            ("max_attempts", json!(0)),
            ("structured_output", json!("yes")),
            ("api_key_env", json!("sk-live key")),
            ("colour", json!(1)),
        ] {
            let mut v = base.clone();
            v[key] = value;
            let err = parse(v).unwrap_err().to_string();
            assert!(
                err.contains(&format!("memory.distill.{key}")),
                "{key}: {err}"
            );
        }
        let err = parse(json!({"enabled": true, "base_url": "http://u:p@h/v1", "model": "m"}))
            .unwrap_err()
            .to_string();
        assert!(err.contains("base_url") && !err.contains("u:p"), "{err}");
    }

    #[test]
    fn the_key_comes_from_the_named_variable_and_an_unset_one_is_named_not_shown() {
        let s = parse(
            json!({"enabled": true, "base_url": "http://h/v1", "model": "m",
                             "api_key_env": "DISTILL_KEY"}),
        )
        .unwrap();
        let set: EnvSource = Arc::new(|k| (k == "DISTILL_KEY").then(|| "sk-test-123".to_owned()));
        assert_eq!(s.api_key(&set).unwrap().unwrap().expose(), "sk-test-123");
        let unset: EnvSource = Arc::new(|_| None);
        let err = s.api_key(&unset).unwrap_err().to_string();
        assert!(
            err.contains("DISTILL_KEY") && err.contains("api_key_env"),
            "{err}"
        );
    }
}
