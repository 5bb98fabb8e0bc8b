//! `memory.backend_config` for `manager_class: openviking`.
//!
//! Every key, default, range, check order and message follows the operator
//! document (the seed's parameter table) and `deerflow-memory-contract` §5.1,
//! so a configuration that DeerFlow accepts is accepted here and one it
//! rejects is rejected with the same words. Parsing reads each known key,
//! then refuses leftovers (typos are never ignored), then validates in the
//! documented order; the first failure wins.
//!
//! Where Python's `int()`/`float()`/`str()` would raise their own error (a
//! `null` timeout, a list as a URL), memgate answers a `Config` error that
//! names the key and the expected type. Booleans are not accepted as numbers
//! and `null` reads as an empty string for string keys (never as `"None"`).
//!
//! The USER API key itself is not a config key: it is read from the
//! environment variable that `api_key_env` names, and never appears in
//! `Debug` output or in an error.

use crate::outbox::{Outbox, OutboxLimits};
use crate::pystr;
use memgate_core::{BackendContext, MemoryError, ReadPolicy, Result, StartupPolicy, WritePolicy};
use serde_json::{Map, Value};
use std::path::{Path, PathBuf};
use std::time::Duration;

pub const DEFAULT_BASE_URL: &str = "http://127.0.0.1:1933";
pub const DEFAULT_API_KEY_ENV: &str = "OPENVIKING_API_KEY";
pub const DEFAULT_PEER_ID: &str = "deerflow";
pub const DEFAULT_TIMEOUT_SECONDS: f64 = 30.0;
pub const DEFAULT_TOP_K: usize = 8;
pub const DEFAULT_MAX_INJECTION_CHARS: usize = 12_000;
pub const DEFAULT_MAX_SEEN_MESSAGE_IDS: usize = 512;
/// Outbox bounds (memgate's addition): entries, and age of the oldest.
const DEFAULT_OUTBOX_MAX_ENTRIES: usize = 10_000;
const DEFAULT_OUTBOX_MAX_AGE_SECONDS: usize = 7 * 24 * 3600;
/// The host contract's fixed recall query.
pub const DEFAULT_INJECTION_QUERY: &str = "user profile preferences important entities events ongoing goals constraints and prior decisions";

/// Hosts on which plain HTTP is allowed without `allow_insecure_http`.
const PLAIN_HTTP_HOSTS: [&str; 3] = ["127.0.0.1", "localhost", "openviking"];

/// Legacy trusted-mode keys (an account and user asserted by headers).
const TRUSTED_MODE_KEYS: [&str; 2] = ["auth_mode", "account"];

/// Keys of the superseded custom HTTP client.
const CUSTOM_HTTP_CLIENT_KEYS: [&str; 7] = [
    "connect_timeout_seconds",
    "max_connections",
    "max_keepalive_connections",
    "max_retries",
    "pool_timeout_seconds",
    "read_timeout_seconds",
    "write_timeout_seconds",
];

/// Which text of a retrieved memory is injected.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ContentMode {
    /// The full leaf content for level-2 hits, the summary otherwise.
    Auto,
    /// The one-line abstract (L0), else the overview.
    Abstract,
    /// The overview (L1), else the abstract.
    Overview,
    /// The full content of every hit, read with one request each.
    Read,
}

impl ContentMode {
    fn parse(s: &str) -> Option<Self> {
        match s {
            "auto" => Some(Self::Auto),
            "abstract" => Some(Self::Abstract),
            "overview" => Some(Self::Overview),
            "read" => Some(Self::Read),
            _ => None,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Self::Auto => "auto",
            Self::Abstract => "abstract",
            Self::Overview => "overview",
            Self::Read => "read",
        }
    }
}

/// The USER API key (one [`Secret`]: its `Debug` never shows it).
pub type ApiKey = memgate_core::Secret;

/// `backend_config.retrieval`.
#[derive(Clone, Debug, PartialEq)]
pub struct RetrievalConfig {
    /// The server's `limit`, 1–100.
    pub top_k: usize,
    /// Sent to the server as `score_threshold` when set (0–1).
    pub score_threshold: Option<f64>,
    /// Upper bound of the injected block, in characters (256–100000).
    pub max_injection_chars: usize,
    pub content_mode: ContentMode,
    /// The fixed recall query.
    pub injection_query: String,
}

/// A validated OpenViking backend configuration.
#[derive(Clone, Debug)]
pub struct OpenVikingConfig {
    /// Absolute http(s) URL without trailing slashes.
    pub base_url: String,
    /// Root of the local cursor files (`{storage_path}/openviking/sessions/`).
    pub storage_path: PathBuf,
    /// The host user the USER key belongs to.
    pub owner_user_id: String,
    /// Name of the environment variable holding the USER key.
    pub api_key_env: String,
    pub api_key: ApiKey,
    /// Peer of the host's default agent.
    pub default_peer_id: String,
    /// Total deadline of one HTTP request.
    pub timeout: Duration,
    pub retrieval: RetrievalConfig,
    pub startup_policy: StartupPolicy,
    pub read_policy: ReadPolicy,
    pub write_policy: WritePolicy,
    pub allow_insecure_http: bool,
    /// Size of the cursor's signature window (16–10000).
    pub max_seen_message_ids: usize,
    /// memgate's durable outbox for failed writes; `None` (the default)
    /// keeps the seed's behaviour.
    pub outbox: Option<OutboxLimits>,
}

fn config_err(message: impl Into<String>) -> MemoryError {
    MemoryError::Config(message.into())
}

/// The keys of one mapping, removed as they are read, so that what is left
/// at the end is exactly the unknown keys.
struct Keys {
    prefix: &'static str,
    map: Map<String, Value>,
}

impl Keys {
    fn take(&mut self, key: &str) -> Option<Value> {
        self.map.remove(key)
    }

    fn name(&self, key: &str) -> String {
        format!("{}{key}", self.prefix)
    }

    /// A string key; `null` reads as empty, numbers as their decimal form.
    fn string(&mut self, key: &str, default: &str) -> Result<String> {
        match self.take(key) {
            None => Ok(default.to_owned()),
            Some(Value::Null) => Ok(String::new()),
            Some(Value::String(s)) => Ok(s),
            Some(Value::Number(n)) => Ok(n.to_string()),
            Some(_) => Err(config_err(format!(
                "OpenViking {} must be a string",
                self.name(key)
            ))),
        }
    }

    /// An integer key, converted as Python's `int()` converts (floats are
    /// truncated, numeric strings parsed); out-of-range magnitudes saturate
    /// so that the range check names them.
    fn integer(&mut self, key: &str, default: usize) -> Result<i64> {
        let name = self.name(key);
        let err = || config_err(format!("OpenViking {name} must be an integer"));
        match self.take(key) {
            None => Ok(default as i64),
            Some(Value::Number(n)) => {
                if let Some(i) = n.as_i64() {
                    Ok(i)
                } else if n.as_u64().is_some() {
                    Ok(i64::MAX)
                } else {
                    match n.as_f64() {
                        Some(f) if f.is_finite() => Ok(f.trunc() as i64),
                        _ => Err(err()),
                    }
                }
            }
            Some(Value::String(s)) => {
                let digits: String = pystr::strip(&s).chars().filter(|c| *c != '_').collect();
                match digits.parse::<i128>() {
                    Ok(i) => Ok(i.clamp(i64::MIN as i128, i64::MAX as i128) as i64),
                    Err(_) => Err(err()),
                }
            }
            Some(_) => Err(err()),
        }
    }

    /// A float key, converted as Python's `float()` converts.
    fn float(&mut self, key: &str, default: Option<f64>, nullable: bool) -> Result<Option<f64>> {
        let name = self.name(key);
        let err = || config_err(format!("OpenViking {name} must be a number"));
        match self.take(key) {
            None => Ok(default),
            Some(Value::Null) if nullable => Ok(None),
            Some(Value::Number(n)) => n.as_f64().map(Some).ok_or_else(err),
            Some(Value::String(s)) => pystr::strip(&s).parse::<f64>().map(Some).map_err(|_| err()),
            Some(_) => Err(err()),
        }
    }

    /// `allow_insecure_http`: a real boolean, or `true/1/yes/on` and
    /// `false/0/no/off` as strings (any case, surrounding space ignored).
    fn boolean(&mut self, key: &str) -> Result<bool> {
        let name = self.name(key);
        let err = || config_err(format!("OpenViking {name} must be a boolean"));
        match self.take(key) {
            None => Ok(false),
            Some(Value::Bool(b)) => Ok(b),
            Some(Value::String(s)) => match pystr::strip(&s).to_lowercase().as_str() {
                "true" | "1" | "yes" | "on" => Ok(true),
                "false" | "0" | "no" | "off" => Ok(false),
                _ => Err(err()),
            },
            Some(_) => Err(err()),
        }
    }

    /// A nested mapping (`retrieval`, `failure_policy`); `null` is empty.
    fn mapping(&mut self, key: &str, prefix: &'static str) -> Result<Keys> {
        match self.take(key) {
            None | Some(Value::Null) => Ok(Keys {
                prefix,
                map: Map::new(),
            }),
            Some(Value::Object(map)) => Ok(Keys { prefix, map }),
            Some(_) => Err(config_err(format!("OpenViking {key} must be a mapping"))),
        }
    }

    fn leftovers(self) -> impl Iterator<Item = String> {
        let prefix = self.prefix;
        self.map
            .into_iter()
            .map(move |(k, _)| format!("{prefix}{k}"))
    }
}

/// Why a base URL is refused, if it is: the first two validation rules.
pub fn base_url_defect(base_url: &str, allow_insecure_http: bool) -> Option<&'static str> {
    const NOT_ABSOLUTE: &str = "OpenViking base_url must be an absolute http(s) URL";
    let Some((scheme, rest)) = base_url.split_once("://") else {
        return Some(NOT_ABSOLUTE);
    };
    let scheme = scheme.to_ascii_lowercase();
    if !(scheme == "http" || scheme == "https")
        || rest.is_empty()
        || rest.starts_with(['/', '?', '#'])
    {
        return Some(NOT_ABSOLUTE);
    }
    let Ok(url) = reqwest::Url::parse(base_url) else {
        return Some(NOT_ABSOLUTE);
    };
    let Some(host) = url.host_str().filter(|h| !h.is_empty()) else {
        return Some(NOT_ABSOLUTE);
    };
    // The HTTP client would send `user:password@` as Basic auth next to the
    // API key; credentials belong in api_key_env, never in the URL.
    if !url.username().is_empty() || url.password().is_some() {
        return Some(
            "OpenViking base_url must not carry credentials (user:password@); put the USER key in the variable api_key_env names",
        );
    }
    if scheme == "http"
        && !allow_insecure_http
        && !PLAIN_HTTP_HOSTS.contains(&host.to_ascii_lowercase().as_str())
    {
        return Some(
            "OpenViking plain HTTP is allowed only for localhost/openviking; set allow_insecure_http=true only for a trusted internal network",
        );
    }
    None
}

/// A peer id the server and the host contract both accept as is:
/// `^[a-z0-9][a-z0-9_-]{0,63}$`.
pub fn is_safe_peer_id(s: &str) -> bool {
    let bytes = s.as_bytes();
    !bytes.is_empty()
        && bytes.len() <= 64
        && matches!(bytes[0], b'a'..=b'z' | b'0'..=b'9')
        && bytes[1..]
            .iter()
            .all(|b| matches!(b, b'a'..=b'z' | b'0'..=b'9' | b'_' | b'-'))
}

/// The prefix of generated peer ids; configured peers may not use it.
pub const GENERATED_PEER_PREFIX: &str = "df-agent-";

impl OpenVikingConfig {
    /// Parses and validates `backend_config`; the key is read through
    /// `ctx.var(api_key_env)`. Errors are `MemoryError::Config` with the
    /// documented message.
    pub fn from_backend_config(config: &Map<String, Value>, ctx: &BackendContext) -> Result<Self> {
        let mut top = Keys {
            prefix: "",
            map: config.clone(),
        };

        // Pre-checks, in the documented order.
        if TRUSTED_MODE_KEYS.iter().any(|k| top.map.contains_key(*k)) {
            return Err(config_err(
                "OpenViking trusted mode is no longer supported by this backend; use a USER API key and configure owner_user_id",
            ));
        }
        let mut client_keys: Vec<&str> = CUSTOM_HTTP_CLIENT_KEYS
            .iter()
            .copied()
            .filter(|k| top.map.contains_key(*k))
            .collect();
        if !client_keys.is_empty() {
            client_keys.sort_unstable();
            return Err(config_err(format!(
                "OpenViking custom HTTP client fields are no longer supported: {}",
                client_keys.join(", ")
            )));
        }
        let mut retrieval = top.mapping("retrieval", "retrieval.")?;
        let mut failure = top.mapping("failure_policy", "failure_policy.")?;
        let mut outbox = top.mapping("outbox", "outbox.")?;
        let api_key_env = pystr::strip(&top.string("api_key_env", DEFAULT_API_KEY_ENV)?).to_owned();
        if api_key_env.is_empty() {
            return Err(config_err("OpenViking api_key_env must not be empty"));
        }

        // Fields.
        let base_url = top
            .string("base_url", DEFAULT_BASE_URL)?
            .trim_end_matches('/')
            .to_owned();
        let storage_path = top.string("storage_path", "")?;
        let owner_user_id = pystr::strip(&top.string("owner_user_id", "")?).to_owned();
        let api_key = ctx
            .var(&api_key_env)
            .map(|v| pystr::strip(&v).to_owned())
            .unwrap_or_default();
        let default_peer_id =
            pystr::strip(&top.string("default_peer_id", DEFAULT_PEER_ID)?).to_owned();
        let timeout_seconds = top
            .float("timeout_seconds", Some(DEFAULT_TIMEOUT_SECONDS), false)?
            .unwrap_or(DEFAULT_TIMEOUT_SECONDS);
        let top_k = retrieval.integer("top_k", DEFAULT_TOP_K)?;
        let score_threshold = retrieval.float("score_threshold", None, true)?;
        let max_injection_chars =
            retrieval.integer("max_injection_chars", DEFAULT_MAX_INJECTION_CHARS)?;
        let content_mode = retrieval.string("content_mode", "overview")?.to_lowercase();
        let injection_query =
            pystr::strip(&retrieval.string("injection_query", DEFAULT_INJECTION_QUERY)?).to_owned();
        let startup_policy = top.string("startup_policy", "fail_fast")?.to_lowercase();
        let read_policy = failure.string("read", "fail_open")?.to_lowercase();
        let write_policy = failure.string("write", "log_and_drop")?.to_lowercase();
        let allow_insecure_http = top.boolean("allow_insecure_http")?;
        let max_seen = top.integer("max_seen_message_ids", DEFAULT_MAX_SEEN_MESSAGE_IDS)?;
        let outbox_enabled = outbox.boolean("enabled")?;
        let outbox_entries = outbox.integer("max_entries", DEFAULT_OUTBOX_MAX_ENTRIES)?;
        let outbox_age = outbox.integer("max_age_seconds", DEFAULT_OUTBOX_MAX_AGE_SECONDS)?;

        let mut unknown: Vec<String> = top
            .leftovers()
            .chain(retrieval.leftovers())
            .chain(failure.leftovers())
            .chain(outbox.leftovers())
            .collect();
        if !unknown.is_empty() {
            unknown.sort();
            return Err(config_err(format!(
                "Unknown OpenViking backend_config fields: {}",
                unknown.join(", ")
            )));
        }

        // Validation, in the documented order.
        if let Some(defect) = base_url_defect(&base_url, allow_insecure_http) {
            return Err(config_err(defect));
        }
        if owner_user_id.is_empty() {
            return Err(config_err("OpenViking owner_user_id must not be empty"));
        }
        if api_key.is_empty() {
            return Err(config_err(format!(
                "OpenViking USER API key is missing; set {api_key_env}"
            )));
        }
        if !is_safe_peer_id(&default_peer_id) {
            return Err(config_err(
                "OpenViking default_peer_id must start with a lowercase letter or digit and contain at most 64 lowercase letters, digits, '_' or '-'",
            ));
        }
        if default_peer_id.starts_with(GENERATED_PEER_PREFIX) {
            return Err(config_err(
                "OpenViking default_peer_id must not start with the reserved prefix 'df-agent-'",
            ));
        }
        if !(timeout_seconds.is_finite() && timeout_seconds > 0.0) {
            return Err(config_err(
                "OpenViking timeout_seconds must be a finite value > 0",
            ));
        }
        let timeout = Duration::try_from_secs_f64(timeout_seconds)
            .map_err(|_| config_err("OpenViking timeout_seconds must be a finite value > 0"))?;
        if !(1..=100).contains(&top_k) {
            return Err(config_err(
                "OpenViking retrieval.top_k must be between 1 and 100",
            ));
        }
        if let Some(t) = score_threshold {
            if !(t.is_finite() && (0.0..=1.0).contains(&t)) {
                return Err(config_err(
                    "OpenViking retrieval.score_threshold must be a finite value between 0 and 1",
                ));
            }
        }
        if !(256..=100_000).contains(&max_injection_chars) {
            return Err(config_err(
                "OpenViking retrieval.max_injection_chars must be between 256 and 100000",
            ));
        }
        let Some(content_mode) = ContentMode::parse(&content_mode) else {
            return Err(config_err(
                "OpenViking retrieval.content_mode must be auto, abstract, overview, or read",
            ));
        };
        if injection_query.is_empty() {
            return Err(config_err(
                "OpenViking retrieval.injection_query must not be empty",
            ));
        }
        let startup_policy = match startup_policy.as_str() {
            "fail_fast" => StartupPolicy::FailFast,
            "warn" => StartupPolicy::Warn,
            _ => {
                return Err(config_err(
                    "OpenViking startup_policy must be 'fail_fast' or 'warn'",
                ))
            }
        };
        let read_policy = match read_policy.as_str() {
            "fail_open" => ReadPolicy::FailOpen,
            "raise" => ReadPolicy::Raise,
            _ => {
                return Err(config_err(
                    "OpenViking failure_policy.read must be 'fail_open' or 'raise'",
                ))
            }
        };
        let write_policy = match write_policy.as_str() {
            "log_and_drop" => WritePolicy::LogAndDrop,
            "raise" => WritePolicy::Raise,
            _ => {
                return Err(config_err(
                    "OpenViking failure_policy.write must be 'log_and_drop' or 'raise'",
                ))
            }
        };
        if !(16..=10_000).contains(&max_seen) {
            return Err(config_err(
                "OpenViking max_seen_message_ids must be between 16 and 10000",
            ));
        }

        if !(1..=1_000_000).contains(&outbox_entries) {
            return Err(config_err(
                "OpenViking outbox.max_entries must be between 1 and 1000000",
            ));
        }
        if !(60..=31_536_000).contains(&outbox_age) {
            return Err(config_err(
                "OpenViking outbox.max_age_seconds must be between 60 and 31536000",
            ));
        }
        let outbox = outbox_enabled.then(|| OutboxLimits {
            max_entries: outbox_entries as u64,
            max_age: Duration::from_secs(outbox_age as u64),
        });

        Ok(Self {
            base_url,
            storage_path: resolve_storage_path(&storage_path, &ctx.storage_path),
            owner_user_id,
            api_key_env,
            api_key: ApiKey::new(api_key),
            default_peer_id,
            timeout,
            retrieval: RetrievalConfig {
                top_k: top_k as usize,
                score_threshold,
                max_injection_chars: max_injection_chars as usize,
                content_mode,
                injection_query,
            },
            startup_policy,
            read_policy,
            write_policy,
            allow_insecure_http,
            max_seen_message_ids: max_seen as usize,
            outbox,
        })
    }

    /// Where the outbox lives (used only when it is on).
    pub fn outbox_path(&self) -> PathBuf {
        Outbox::path_under(&self.storage_path)
    }

    /// Where the cursor of one session lives.
    pub fn cursor_path(&self, session_id: &str) -> PathBuf {
        self.storage_path
            .join("openviking")
            .join("sessions")
            .join(format!("{session_id}.json"))
    }
}

/// `storage_path` as the host contract resolves it: empty means the host's
/// storage root, a relative path is taken relative to that root.
fn resolve_storage_path(configured: &str, host_root: &Path) -> PathBuf {
    if configured.is_empty() {
        host_root.to_path_buf()
    } else {
        let p = Path::new(configured);
        if p.is_absolute() {
            p.to_path_buf()
        } else {
            host_root.join(p)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;
    use std::sync::Arc;

    const KEY: &str = "user-key-secret-123";

    fn ctx_with_key(key: Option<&'static str>) -> BackendContext {
        BackendContext::new("/srv/memgate").with_env(Arc::new(move |name| {
            (name == "OPENVIKING_API_KEY" || name == "OTHER_KEY")
                .then(|| key.map(str::to_owned))
                .flatten()
        }))
    }

    /// The base config of the original test suite (§7.1).
    fn base() -> Map<String, Value> {
        json!({
            "base_url": "http://openviking:1933",
            "storage_path": "/tmp/ov",
            "owner_user_id": "alice",
            "startup_policy": "warn",
            "retrieval": {"top_k": 4, "max_injection_chars": 1000,
                          "injection_query": "profile preferences and prior decisions"}
        })
        .as_object()
        .unwrap()
        .clone()
    }

    fn parse(map: &Map<String, Value>) -> Result<OpenVikingConfig> {
        OpenVikingConfig::from_backend_config(map, &ctx_with_key(Some(KEY)))
    }

    fn with(mut map: Map<String, Value>, key: &str, value: Value) -> Map<String, Value> {
        map.insert(key.to_owned(), value);
        map
    }

    fn with_retrieval(map: Map<String, Value>, key: &str, value: Value) -> Map<String, Value> {
        let mut r = map["retrieval"].as_object().unwrap().clone();
        r.insert(key.to_owned(), value);
        with(map, "retrieval", Value::Object(r))
    }

    fn message(map: &Map<String, Value>) -> String {
        match parse(map) {
            Err(MemoryError::Config(m)) => m,
            other => panic!("expected a config error, got {other:?}"),
        }
    }

    #[test]
    fn defaults_parse_and_the_key_is_never_printed() {
        let c = parse(&base()).unwrap();
        assert_eq!(c.owner_user_id, "alice");
        assert_eq!(c.retrieval.content_mode, ContentMode::Overview);
        assert_eq!(
            c.retrieval.injection_query,
            "profile preferences and prior decisions"
        );
        assert_eq!(c.retrieval.top_k, 4);
        assert_eq!(c.retrieval.score_threshold, None);
        assert_eq!(c.api_key_env, "OPENVIKING_API_KEY");
        assert_eq!(c.api_key.expose(), KEY);
        assert_eq!(c.default_peer_id, "deerflow");
        assert_eq!(c.timeout, Duration::from_secs(30));
        assert_eq!(c.startup_policy, StartupPolicy::Warn);
        assert_eq!(c.read_policy, ReadPolicy::FailOpen);
        assert_eq!(c.write_policy, WritePolicy::LogAndDrop);
        assert_eq!(c.max_seen_message_ids, 512);
        assert!(!c.allow_insecure_http);
        let debug = format!("{c:?}");
        assert!(!debug.contains(KEY), "{debug}");
        assert!(debug.contains("Secret(<redacted>)"), "{debug}");

        let minimal = json!({"owner_user_id": "default"});
        let c = parse(minimal.as_object().unwrap()).unwrap();
        assert_eq!(c.base_url, DEFAULT_BASE_URL);
        assert_eq!(c.retrieval.top_k, 8);
        assert_eq!(c.retrieval.max_injection_chars, 12_000);
        assert_eq!(c.retrieval.injection_query, DEFAULT_INJECTION_QUERY);
        assert_eq!(c.startup_policy, StartupPolicy::FailFast);
        assert_eq!(c.storage_path, PathBuf::from("/srv/memgate"));
        assert_eq!(
            c.cursor_path("df_x"),
            PathBuf::from("/srv/memgate/openviking/sessions/df_x.json")
        );
    }

    #[test]
    fn missing_key_fails_and_names_the_variable() {
        let err = OpenVikingConfig::from_backend_config(&base(), &ctx_with_key(None)).unwrap_err();
        assert_eq!(
            err.to_string(),
            "OpenViking USER API key is missing; set OPENVIKING_API_KEY"
        );
        let blank = OpenVikingConfig::from_backend_config(&base(), &ctx_with_key(Some("  \n")))
            .unwrap_err();
        assert!(blank.to_string().contains("USER API key is missing"));
        let other = with(base(), "api_key_env", json!(" OTHER_KEY "));
        assert_eq!(parse(&other).unwrap().api_key_env, "OTHER_KEY");
        assert_eq!(
            message(&with(base(), "api_key_env", json!("  "))),
            "OpenViking api_key_env must not be empty"
        );
    }

    #[test]
    fn legacy_and_unknown_fields_are_refused() {
        for key in ["auth_mode", "account"] {
            assert_eq!(
                message(&with(base(), key, json!("trusted"))),
                "OpenViking trusted mode is no longer supported by this backend; use a USER API key and configure owner_user_id"
            );
        }
        let m = with(
            with(base(), "max_retries", json!(3)),
            "max_connections",
            json!(4),
        );
        assert_eq!(
            message(&m),
            "OpenViking custom HTTP client fields are no longer supported: max_connections, max_retries"
        );
        let m = with(base(), "colour", json!(1));
        let m = with_retrieval(m, "topk", json!(3));
        let m = with(m, "failure_policy", json!({"read": "raise", "retry": 2}));
        assert_eq!(
            message(&m),
            "Unknown OpenViking backend_config fields: colour, failure_policy.retry, retrieval.topk"
        );
        assert_eq!(
            message(&with(base(), "retrieval", json!([1]))),
            "OpenViking retrieval must be a mapping"
        );
        assert_eq!(
            message(&with(base(), "failure_policy", json!("raise"))),
            "OpenViking failure_policy must be a mapping"
        );
        assert!(parse(&with(base(), "failure_policy", Value::Null)).is_ok());
    }

    #[test]
    fn one_vector_per_validation_message_in_order() {
        let cases: Vec<(Map<String, Value>, &str)> = vec![
            (with(base(), "base_url", json!("openviking:1933")), "OpenViking base_url must be an absolute http(s) URL"),
            (with(base(), "base_url", json!("ftp://openviking")), "OpenViking base_url must be an absolute http(s) URL"),
            (with(base(), "base_url", json!("http:///path")), "OpenViking base_url must be an absolute http(s) URL"),
            (with(base(), "base_url", json!("http://10.0.0.5:1933")), "OpenViking plain HTTP is allowed only for localhost/openviking; set allow_insecure_http=true only for a trusted internal network"),
            (with(base(), "owner_user_id", json!("  ")), "OpenViking owner_user_id must not be empty"),
            (with(base(), "default_peer_id", json!("Research")), "OpenViking default_peer_id must start with a lowercase letter or digit and contain at most 64 lowercase letters, digits, '_' or '-'"),
            (with(base(), "default_peer_id", json!("a".repeat(65))), "OpenViking default_peer_id must start with a lowercase letter or digit and contain at most 64 lowercase letters, digits, '_' or '-'"),
            (with(base(), "default_peer_id", json!("df-agent-default")), "OpenViking default_peer_id must not start with the reserved prefix 'df-agent-'"),
            (with(base(), "timeout_seconds", json!(0)), "OpenViking timeout_seconds must be a finite value > 0"),
            (with(base(), "timeout_seconds", json!("inf")), "OpenViking timeout_seconds must be a finite value > 0"),
            (with(base(), "timeout_seconds", json!("nan")), "OpenViking timeout_seconds must be a finite value > 0"),
            (with_retrieval(base(), "top_k", json!(0)), "OpenViking retrieval.top_k must be between 1 and 100"),
            (with_retrieval(base(), "top_k", json!(101)), "OpenViking retrieval.top_k must be between 1 and 100"),
            (with_retrieval(base(), "score_threshold", json!(1.5)), "OpenViking retrieval.score_threshold must be a finite value between 0 and 1"),
            (with_retrieval(base(), "score_threshold", json!("-inf")), "OpenViking retrieval.score_threshold must be a finite value between 0 and 1"),
            (with_retrieval(base(), "max_injection_chars", json!(255)), "OpenViking retrieval.max_injection_chars must be between 256 and 100000"),
            (with_retrieval(base(), "max_injection_chars", json!(100_001)), "OpenViking retrieval.max_injection_chars must be between 256 and 100000"),
            (with_retrieval(base(), "content_mode", json!("full")), "OpenViking retrieval.content_mode must be auto, abstract, overview, or read"),
            (with_retrieval(base(), "injection_query", json!(" \t")), "OpenViking retrieval.injection_query must not be empty"),
            (with(base(), "startup_policy", json!("tolerate")), "OpenViking startup_policy must be 'fail_fast' or 'warn'"),
            (with(base(), "failure_policy", json!({"read": "fail_closed"})), "OpenViking failure_policy.read must be 'fail_open' or 'raise'"),
            (with(base(), "failure_policy", json!({"write": "drop"})), "OpenViking failure_policy.write must be 'log_and_drop' or 'raise'"),
            (with(base(), "max_seen_message_ids", json!(15)), "OpenViking max_seen_message_ids must be between 16 and 10000"),
            (with(base(), "max_seen_message_ids", json!(10_001)), "OpenViking max_seen_message_ids must be between 16 and 10000"),
        ];
        for (map, expected) in cases {
            assert_eq!(message(&map), expected, "{map:?}");
        }
        // The first failure wins: a bad URL is reported before a bad owner
        // and a bad top_k.
        let m = with(
            with(base(), "base_url", json!("nope")),
            "owner_user_id",
            json!(""),
        );
        let m = with_retrieval(m, "top_k", json!(0));
        assert_eq!(
            message(&m),
            "OpenViking base_url must be an absolute http(s) URL"
        );
        // A missing key is reported after the owner, before the peer.
        let m = with(
            with(base(), "owner_user_id", json!("")),
            "default_peer_id",
            json!("X"),
        );
        assert_eq!(message(&m), "OpenViking owner_user_id must not be empty");
        let no_key = OpenVikingConfig::from_backend_config(
            &with(base(), "default_peer_id", json!("X")),
            &ctx_with_key(None),
        )
        .unwrap_err();
        assert!(no_key.to_string().contains("USER API key is missing"));
    }

    #[test]
    fn base_url_rules() {
        assert!(base_url_defect("https://any-host.example", false).is_none());
        assert!(base_url_defect("HTTPS://Any-Host.example/prefix", false).is_none());
        assert!(base_url_defect("http://LOCALHOST:1933", false).is_none());
        assert!(base_url_defect("http://127.0.0.1:1933", false).is_none());
        assert!(base_url_defect("http://openviking:1933", false).is_none());
        assert!(
            base_url_defect("http://[::1]:1933", false).is_some(),
            "::1 is not listed"
        );
        assert!(base_url_defect("http://10.0.0.5", false).is_some());
        assert!(base_url_defect("http://10.0.0.5", true).is_none());
        assert!(base_url_defect("http://host.docker.internal:1933", true).is_none());
        let c = parse(&with(base(), "base_url", json!("http://127.0.0.1:1933///"))).unwrap();
        assert_eq!(c.base_url, "http://127.0.0.1:1933");
        for with_credentials in [
            "https://u:pw@openviking.example",
            "https://u@openviking.example",
            "http://:pw@localhost:1933",
        ] {
            let defect = base_url_defect(with_credentials, false).unwrap();
            assert!(defect.contains("must not carry credentials"), "{defect}");
            assert!(!defect.contains("pw"), "{defect}");
        }
    }

    #[test]
    fn allow_insecure_http_accepts_booleans_and_their_string_forms() {
        let remote = with(base(), "base_url", json!("http://10.0.0.5:1933"));
        for yes in [
            json!(true),
            json!("true"),
            json!(" YES "),
            json!("1"),
            json!("on"),
        ] {
            let c = parse(&with(remote.clone(), "allow_insecure_http", yes.clone())).unwrap();
            assert!(c.allow_insecure_http, "{yes}");
        }
        for no in [
            json!(false),
            json!("false"),
            json!("No"),
            json!("0"),
            json!("off"),
        ] {
            assert!(
                message(&with(remote.clone(), "allow_insecure_http", no)).contains("plain HTTP")
            );
        }
        for bad in [json!(1), json!("maybe"), Value::Null, json!([true])] {
            assert_eq!(
                message(&with(base(), "allow_insecure_http", bad)),
                "OpenViking allow_insecure_http must be a boolean"
            );
        }
    }

    #[test]
    fn numbers_convert_like_python_and_wrong_types_name_the_key() {
        let c = parse(&with_retrieval(base(), "top_k", json!("12"))).unwrap();
        assert_eq!(c.retrieval.top_k, 12);
        let c = parse(&with_retrieval(base(), "top_k", json!(7.9))).unwrap();
        assert_eq!(c.retrieval.top_k, 7, "int() truncates");
        let c = parse(&with(base(), "timeout_seconds", json!("2.5"))).unwrap();
        assert_eq!(c.timeout, Duration::from_millis(2500));
        let c = parse(&with_retrieval(base(), "score_threshold", json!(0.25))).unwrap();
        assert_eq!(c.retrieval.score_threshold, Some(0.25));
        let c = parse(&with_retrieval(base(), "content_mode", json!("READ"))).unwrap();
        assert_eq!(c.retrieval.content_mode, ContentMode::Read);
        assert_eq!(
            message(&with(base(), "timeout_seconds", Value::Null)),
            "OpenViking timeout_seconds must be a number"
        );
        assert_eq!(
            message(&with_retrieval(base(), "top_k", json!("eight"))),
            "OpenViking retrieval.top_k must be an integer"
        );
        assert_eq!(
            message(&with_retrieval(base(), "top_k", json!(true))),
            "OpenViking retrieval.top_k must be an integer"
        );
        assert_eq!(
            message(&with(base(), "base_url", json!(["http://x"]))),
            "OpenViking base_url must be a string"
        );
        // A numeric owner id (unquoted YAML) is read as its text.
        let c = parse(&with(base(), "owner_user_id", json!(42))).unwrap();
        assert_eq!(c.owner_user_id, "42");
        // Huge values saturate and fail the range check, not the type check.
        assert!(message(&with_retrieval(base(), "top_k", json!(u64::MAX)))
            .contains("between 1 and 100"));
    }

    #[test]
    fn relative_storage_path_is_under_the_host_root() {
        let c = parse(&with(base(), "storage_path", json!("state"))).unwrap();
        assert_eq!(c.storage_path, PathBuf::from("/srv/memgate/state"));
        let c = parse(&with(base(), "storage_path", json!("/abs"))).unwrap();
        assert_eq!(c.storage_path, PathBuf::from("/abs"));
    }
}
