//! What the host hands a backend at construction, besides its private
//! `backend_config` map: the memory mode, the storage root, the keep-hook for
//! hidden messages, the secret redactor and a view of the process environment (so tests can
//! supply variables without touching the real environment).

use crate::capture::KeepHiddenHook;
use crate::redaction::Redactor;
use serde::{Deserialize, Serialize};
use std::ops::RangeInclusive;
use std::path::PathBuf;
use std::sync::Arc;

/// `memory.mode`: automatic memory (`middleware`) or model-driven tools.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "snake_case")]
pub enum MemoryMode {
    #[default]
    Middleware,
    Tool,
}

impl MemoryMode {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Middleware => "middleware",
            Self::Tool => "tool",
        }
    }
}

/// Reads one environment variable by name.
pub type EnvSource = Arc<dyn Fn(&str) -> Option<String> + Send + Sync>;

/// The process environment.
pub fn process_env() -> EnvSource {
    Arc::new(|name| std::env::var(name).ok())
}

/// Everything a backend receives from the host at construction.
#[derive(Clone)]
pub struct BackendContext {
    pub mode: MemoryMode,
    /// Absolute storage root (`storage_path`): `$MEMGATE_HOME`, else `./.memgate`,
    /// unless `backend_config.storage_path` says otherwise.
    pub storage_path: PathBuf,
    /// The host's keep-hook for hidden messages, if it has one.
    pub keep_hidden: Option<KeepHiddenHook>,
    /// Replaces secrets in message text after signatures are computed and
    /// before anything is stored or sent: every built-in rule unless the
    /// host configured otherwise (`memory.redaction`).
    pub redactor: Arc<Redactor>,
    pub env: EnvSource,
    /// `memory.distill` is on: a store that distils queues jobs with these
    /// limits; one that cannot refuses the setting.
    pub distill: Option<crate::distill::QueueLimits>,
}

impl BackendContext {
    pub fn new(storage_path: impl Into<PathBuf>) -> Self {
        Self {
            mode: MemoryMode::Middleware,
            storage_path: storage_path.into(),
            keep_hidden: None,
            redactor: Redactor::shared_default(),
            env: process_env(),
            distill: None,
        }
    }

    pub fn with_distill(mut self, limits: Option<crate::distill::QueueLimits>) -> Self {
        self.distill = limits;
        self
    }

    pub fn with_mode(mut self, mode: MemoryMode) -> Self {
        self.mode = mode;
        self
    }

    pub fn with_env(mut self, env: EnvSource) -> Self {
        self.env = env;
        self
    }

    pub fn with_keep_hidden(mut self, hook: KeepHiddenHook) -> Self {
        self.keep_hidden = Some(hook);
        self
    }

    pub fn with_redactor(mut self, redactor: Arc<Redactor>) -> Self {
        self.redactor = redactor;
        self
    }

    pub fn var(&self, name: &str) -> Option<String> {
        (self.env)(name)
    }
}

impl std::fmt::Debug for BackendContext {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BackendContext")
            .field("mode", &self.mode)
            .field("storage_path", &self.storage_path)
            .field("keep_hidden", &self.keep_hidden.is_some())
            .field("redaction", &self.redactor.is_enabled())
            .finish_non_exhaustive()
    }
}

/// An integer setting `backend_config.<key>` within `range`; booleans,
/// floats and strings are refused, and the error names the key and the rule,
/// never the value.
pub fn integer_setting(
    value: &serde_json::Value,
    key: &str,
    range: RangeInclusive<u64>,
) -> crate::Result<u64> {
    let rule = || {
        crate::MemoryError::Config(format!(
            "backend_config.{key} must be an integer between {} and {}",
            range.start(),
            range.end()
        ))
    };
    let n = value.as_u64().ok_or_else(rule)?;
    if range.contains(&n) {
        Ok(n)
    } else {
        Err(rule())
    }
}
