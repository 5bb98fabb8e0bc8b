//! One validated settings snapshot, shared by recall and the remember tool.
//!
//! The binding (endpoint, credential, owner, Scope, budget, deadlines) comes
//! only from the fixed `POWERCONTEXT_DEERFLOW_*` environment variables, read
//! through the host's [`BackendContext::var`] view, validated once, and frozen
//! in an [`Arc<Settings>`]. YAML maps carry no binding: a second copy of it
//! could drift from the first, so any key there other than the host-supplied
//! `storage_path` is refused. Rotating the token or moving the Scope means
//! changing the environment and restarting the process.
//!
//! Errors name the variable and the rule, never the value.

use memgate_core::identity::owner_id_defect;
use memgate_core::{BackendContext, MemoryError, Result};
use reqwest::Url;
use serde_json::{Map, Value};
use std::fmt;
use std::net::IpAddr;
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

/// Base URL of the PowerContext server (`https://…`; plain `http://` only to loopback).
pub const ENV_BASE_URL: &str = "POWERCONTEXT_DEERFLOW_BASE_URL";
/// The one host user id this deployment is bound to.
pub const ENV_OWNER_USER_ID: &str = "POWERCONTEXT_DEERFLOW_OWNER_USER_ID";
/// The existing, authorized PowerContext Scope.
pub const ENV_SCOPE_ID: &str = "POWERCONTEXT_DEERFLOW_SCOPE_ID";
/// Recall budget in UTF-8 bytes of prepared content (512–32768, default 8000).
pub const ENV_MAX_BYTES: &str = "POWERCONTEXT_DEERFLOW_MAX_BYTES";
/// Total recall deadline in seconds (default 2.0).
pub const ENV_RECALL_TIMEOUT_SECONDS: &str = "POWERCONTEXT_DEERFLOW_RECALL_TIMEOUT_SECONDS";
/// Total remember deadline in seconds (default 5.0, below the host's 30 s tool limit).
pub const ENV_REMEMBER_TIMEOUT_SECONDS: &str = "POWERCONTEXT_DEERFLOW_REMEMBER_TIMEOUT_SECONDS";
/// The server's static bearer token (supply it through a secret mechanism).
pub const ENV_TOKEN: &str = "POWERCONTEXT_DEERFLOW_TOKEN";
/// memgate's opt-in addition to the RFC's variables: a fixed query recalled
/// with when the host passes none (hosts such as DeerFlow f1f4af99, whose
/// automatic caller forwards no query). Unset, such a recall returns nothing,
/// as the RFC says.
pub const ENV_PROFILE_QUERY: &str = "POWERCONTEXT_DEERFLOW_PROFILE_QUERY";

/// Every variable the snapshot reads, in documentation order.
pub const ENV_VARS: [&str; 8] = [
    ENV_BASE_URL,
    ENV_OWNER_USER_ID,
    ENV_SCOPE_ID,
    ENV_MAX_BYTES,
    ENV_RECALL_TIMEOUT_SECONDS,
    ENV_REMEMBER_TIMEOUT_SECONDS,
    ENV_TOKEN,
    ENV_PROFILE_QUERY,
];

pub const DEFAULT_MAX_BYTES: u32 = 8000;
/// The API's `max_bytes` range for `POST /v1/context/prepare`.
pub const MAX_BYTES_RANGE: std::ops::RangeInclusive<u32> = 512..=32768;
pub const DEFAULT_RECALL_TIMEOUT: Duration = Duration::from_secs(2);
pub const DEFAULT_REMEMBER_TIMEOUT: Duration = Duration::from_secs(5);
/// The host's tool-call limit; both deadlines must stay below it.
pub const HOST_TOOL_LIMIT: Duration = Duration::from_secs(30);
/// Longest Scope id the API accepts, in characters.
const MAX_SCOPE_ID_CHARS: usize = 256;
/// Longest profile query, in characters: the host's own queries are at most
/// 1000 characters of the latest user input (RFC §4).
pub const MAX_PROFILE_QUERY_CHARS: usize = 1000;

/// The bearer token (one [`memgate_core::Secret`]: its `Debug` is redacted
/// and it has no `Display`, so it cannot slip into a log line or an error).
pub type BearerToken = memgate_core::Secret;

/// The immutable binding of this process to one PowerContext Scope.
#[derive(Clone)]
pub struct Settings {
    base_url: Url,
    owner_user_id: String,
    scope_id: String,
    max_bytes: u32,
    recall_timeout: Duration,
    remember_timeout: Duration,
    token: BearerToken,
    profile_query: Option<String>,
}

impl Settings {
    /// Reads and validates every variable through `var`. All problems are
    /// reported together, each naming its variable and rule.
    pub fn from_env(var: impl Fn(&str) -> Option<String>) -> Result<Self> {
        let get = |name: &str| var(name).filter(|v| !v.is_empty());
        let mut problems = Vec::new();

        let base_url = match get(ENV_BASE_URL) {
            None => missing(&mut problems, ENV_BASE_URL),
            Some(raw) => match parse_base_url(&raw) {
                Ok(url) => Some(url),
                Err(rule) => {
                    problems.push(format!("{ENV_BASE_URL} {rule}"));
                    None
                }
            },
        };
        let owner_user_id = match get(ENV_OWNER_USER_ID) {
            None => missing(&mut problems, ENV_OWNER_USER_ID),
            Some(raw) => match owner_id_defect(&raw) {
                Some(defect) => {
                    problems.push(format!(
                        "{ENV_OWNER_USER_ID} {defect}; bind the persisted id of an authenticated user"
                    ));
                    None
                }
                None => Some(raw),
            },
        };
        let scope_id = match get(ENV_SCOPE_ID) {
            None => missing(&mut problems, ENV_SCOPE_ID),
            Some(raw) => match scope_id_defect(&raw) {
                Some(rule) => {
                    problems.push(format!("{ENV_SCOPE_ID} {rule}"));
                    None
                }
                None => Some(raw),
            },
        };
        let max_bytes = match get(ENV_MAX_BYTES) {
            None => Some(DEFAULT_MAX_BYTES),
            Some(raw) => match raw.trim().parse::<u32>() {
                Ok(n) if MAX_BYTES_RANGE.contains(&n) => Some(n),
                _ => {
                    problems.push(format!(
                        "{ENV_MAX_BYTES} must be an integer from {} to {}",
                        MAX_BYTES_RANGE.start(),
                        MAX_BYTES_RANGE.end()
                    ));
                    None
                }
            },
        };
        let recall_timeout = deadline(
            &mut problems,
            ENV_RECALL_TIMEOUT_SECONDS,
            get(ENV_RECALL_TIMEOUT_SECONDS),
            DEFAULT_RECALL_TIMEOUT,
        );
        let remember_timeout = deadline(
            &mut problems,
            ENV_REMEMBER_TIMEOUT_SECONDS,
            get(ENV_REMEMBER_TIMEOUT_SECONDS),
            DEFAULT_REMEMBER_TIMEOUT,
        );
        let token = match get(ENV_TOKEN) {
            None => missing(&mut problems, ENV_TOKEN),
            Some(raw) if raw.bytes().all(|b| b.is_ascii_graphic()) => Some(BearerToken::new(raw)),
            Some(_) => {
                problems.push(format!(
                    "{ENV_TOKEN} must be printable ASCII without spaces (it is sent as a bearer token)"
                ));
                None
            }
        };

        let profile_query = match get(ENV_PROFILE_QUERY) {
            None => None,
            Some(raw) => match profile_query_defect(&raw) {
                Some(rule) => {
                    problems.push(format!("{ENV_PROFILE_QUERY} {rule}"));
                    None
                }
                None => Some(raw),
            },
        };

        match (
            base_url,
            owner_user_id,
            scope_id,
            max_bytes,
            recall_timeout,
            remember_timeout,
            token,
        ) {
            (Some(b), Some(o), Some(s), Some(m), Some(rt), Some(wt), Some(t))
                if problems.is_empty() =>
            {
                Ok(Self {
                    base_url: b,
                    owner_user_id: o,
                    scope_id: s,
                    max_bytes: m,
                    recall_timeout: rt,
                    remember_timeout: wt,
                    token: t,
                    profile_query,
                })
            }
            _ => Err(MemoryError::Config(format!(
                "powercontext settings are unusable: {}",
                problems.join("; ")
            ))),
        }
    }

    /// The server's base URL (no credentials, query or fragment).
    pub fn base_url(&self) -> &Url {
        &self.base_url
    }
    /// The only host user id admitted.
    pub fn owner_user_id(&self) -> &str {
        &self.owner_user_id
    }
    pub fn scope_id(&self) -> &str {
        &self.scope_id
    }
    pub fn max_bytes(&self) -> u32 {
        self.max_bytes
    }
    pub fn recall_timeout(&self) -> Duration {
        self.recall_timeout
    }
    pub fn remember_timeout(&self) -> Duration {
        self.remember_timeout
    }
    pub fn token(&self) -> &BearerToken {
        &self.token
    }
    /// The operator's fixed query for recalls the host sends without one
    /// (`None`: such recalls return nothing, the RFC's behaviour).
    pub fn profile_query(&self) -> Option<&str> {
        self.profile_query.as_deref()
    }
}

impl fmt::Debug for Settings {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Settings")
            .field("base_url", &self.base_url.as_str())
            .field("owner_user_id", &self.owner_user_id)
            .field("scope_id", &self.scope_id)
            .field("max_bytes", &self.max_bytes)
            .field("recall_timeout", &self.recall_timeout)
            .field("remember_timeout", &self.remember_timeout)
            .field("token", &self.token)
            .field(
                "profile_query",
                &self.profile_query.as_ref().map(|q| q.chars().count()),
            )
            .finish()
    }
}

fn missing<T>(problems: &mut Vec<String>, name: &str) -> Option<T> {
    problems.push(format!("{name} is required"));
    None
}

fn deadline(
    problems: &mut Vec<String>,
    name: &str,
    raw: Option<String>,
    default: Duration,
) -> Option<Duration> {
    let Some(raw) = raw else {
        return Some(default);
    };
    match raw.trim().parse::<f64>() {
        Ok(secs) if secs.is_finite() && secs > 0.0 && secs < HOST_TOOL_LIMIT.as_secs_f64() => {
            Some(Duration::from_secs_f64(secs))
        }
        _ => {
            problems.push(format!(
                "{name} must be a finite number of seconds greater than 0 and below {}",
                HOST_TOOL_LIMIT.as_secs()
            ));
            None
        }
    }
}

fn profile_query_defect(raw: &str) -> Option<String> {
    if raw.trim().is_empty() {
        Some("is blank; unset it to recall nothing when the host passes no query".into())
    } else if raw.chars().count() > MAX_PROFILE_QUERY_CHARS {
        Some(format!(
            "must be at most {MAX_PROFILE_QUERY_CHARS} characters (as long as a host's own query may be)"
        ))
    } else {
        None
    }
}

fn scope_id_defect(raw: &str) -> Option<String> {
    if raw.trim().is_empty() {
        Some("is blank".into())
    } else if raw.trim() != raw {
        Some("has leading or trailing whitespace".into())
    } else if raw.chars().count() > MAX_SCOPE_ID_CHARS {
        Some(format!(
            "must be at most {MAX_SCOPE_ID_CHARS} characters (the API's limit)"
        ))
    } else {
        None
    }
}

/// Parses the base URL: `https`, or `http` to a loopback host only; no
/// credentials in the URL (the token has its own variable), no query or
/// fragment. Returns the rule that was broken.
fn parse_base_url(raw: &str) -> std::result::Result<Url, &'static str> {
    let url = Url::parse(raw.trim()).map_err(|_| "must be an absolute http(s) URL")?;
    if !url.username().is_empty() || url.password().is_some() {
        return Err("must not carry credentials; supply the token in POWERCONTEXT_DEERFLOW_TOKEN");
    }
    if url.query().is_some() || url.fragment().is_some() {
        return Err("must not have a query or fragment");
    }
    match url.scheme() {
        "https" if url.host_str().is_some() => Ok(url),
        "http" if is_loopback(&url) => Ok(url),
        "http" => Err("must use https unless the host is loopback (localhost, 127.0.0.0/8, [::1])"),
        _ => Err("must be an absolute http(s) URL"),
    }
}

fn is_loopback(url: &Url) -> bool {
    let Some(host) = url.host_str() else {
        return false;
    };
    host.eq_ignore_ascii_case("localhost")
        || host
            .trim_start_matches('[')
            .trim_end_matches(']')
            .parse::<IpAddr>()
            .is_ok_and(|ip| ip.is_loopback())
}

/// Rejects every key of a YAML private map (`backend_config`, the tool's
/// plugin `config`) except the host-supplied `storage_path`. Binding and
/// transport keys are not applied: they come only from the environment.
pub fn reject_yaml_binding(section: &str, config: &Map<String, Value>) -> Result<()> {
    let mut refused: Vec<&str> = config
        .keys()
        .map(String::as_str)
        .filter(|k| *k != "storage_path")
        .collect();
    if config.get("storage_path").is_some_and(|v| !v.is_string()) {
        return Err(MemoryError::Config(format!(
            "{section}.storage_path must be a string path"
        )));
    }
    if refused.is_empty() {
        return Ok(());
    }
    refused.sort_unstable();
    let keys: Vec<String> = refused.iter().map(|k| format!("{section}.{k}")).collect();
    Err(MemoryError::Config(format!(
        "{} not accepted by the powercontext backend: {section} must be {{}}; the binding \
         (base URL, token, owner, Scope, budget, deadlines) comes only from the \
         POWERCONTEXT_DEERFLOW_* environment variables",
        if keys.len() == 1 {
            format!("{} is", keys[0])
        } else {
            format!("{} are", keys.join(", "))
        }
    )))
}

/// The shared snapshot loader: one validated [`Settings`] per environment
/// source, so the backend and the remember tool built from the same
/// [`BackendContext`] hold the very same `Arc`, and neither re-reads the
/// environment later. Keyed by the identity of the context's environment
/// source: tests that inject their own environment get their own snapshot,
/// and entries whose source was dropped are pruned.
pub struct SettingsLoader {
    snapshots: Mutex<Vec<Snapshot>>,
}

type EnvFn = dyn Fn(&str) -> Option<String> + Send + Sync;

struct Snapshot {
    source: Weak<EnvFn>,
    /// Failures are kept as their message, so both consumers fail the same way.
    settings: std::result::Result<Arc<Settings>, String>,
}

impl SettingsLoader {
    pub const fn new() -> Self {
        Self {
            snapshots: Mutex::new(Vec::new()),
        }
    }

    /// The process-wide loader used by [`crate::PowerContextBackend::from_backend_config`]
    /// and [`crate::RememberTool::from_plugin_config`].
    pub fn process() -> &'static SettingsLoader {
        static PROCESS: SettingsLoader = SettingsLoader::new();
        &PROCESS
    }

    /// The snapshot for `ctx`'s environment source, read and validated on
    /// first use. Thread-safe: concurrent first calls read the environment once.
    pub fn load(&self, ctx: &BackendContext) -> Result<Arc<Settings>> {
        let mut snapshots = self
            .snapshots
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        snapshots.retain(|s| s.source.strong_count() > 0);
        let key = Arc::as_ptr(&ctx.env) as *const ();
        let found = snapshots
            .iter()
            .find(|s| Weak::as_ptr(&s.source) as *const () == key);
        let settings = match found {
            Some(s) => s.settings.clone(),
            None => {
                let settings = Settings::from_env(|name| ctx.var(name))
                    .map(Arc::new)
                    .map_err(|e| e.to_string());
                snapshots.push(Snapshot {
                    source: Arc::downgrade(&ctx.env),
                    settings: settings.clone(),
                });
                settings
            }
        };
        settings.map_err(MemoryError::Config)
    }
}

impl Default for SettingsLoader {
    fn default() -> Self {
        Self::new()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    pub(crate) fn env(pairs: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
        let map: HashMap<String, String> = pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        move |name| map.get(name).cloned()
    }

    const SECRET: &str = "s3cr3t-token-value";

    fn base() -> Vec<(&'static str, &'static str)> {
        vec![
            (ENV_BASE_URL, "http://127.0.0.1:8000"),
            (ENV_OWNER_USER_ID, "alice"),
            (ENV_SCOPE_ID, "scp_0vbbw94ec67mzhrkkhgmeb5z6g"),
            (ENV_TOKEN, SECRET),
        ]
    }

    fn with(overrides: &[(&'static str, &'static str)]) -> Result<Settings> {
        let mut pairs = base();
        for (k, v) in overrides {
            pairs.retain(|(name, _)| name != k);
            pairs.push((k, v));
        }
        Settings::from_env(env(&pairs))
    }

    fn err(overrides: &[(&'static str, &'static str)]) -> String {
        let e = with(overrides).unwrap_err();
        assert!(matches!(e, MemoryError::Config(_)), "{e:?}");
        let msg = e.to_string();
        assert!(!msg.contains(SECRET), "{msg}");
        msg
    }

    #[test]
    fn defaults_apply_when_optional_variables_are_absent() {
        let s = with(&[]).unwrap();
        assert_eq!(s.max_bytes(), 8000);
        assert_eq!(s.recall_timeout(), Duration::from_secs(2));
        assert_eq!(s.remember_timeout(), Duration::from_secs(5));
        assert_eq!(s.owner_user_id(), "alice");
        assert_eq!(s.token().expose(), SECRET);
    }

    #[test]
    fn every_missing_required_variable_is_named() {
        let e = Settings::from_env(env(&[])).unwrap_err().to_string();
        for name in [ENV_BASE_URL, ENV_OWNER_USER_ID, ENV_SCOPE_ID, ENV_TOKEN] {
            assert!(e.contains(&format!("{name} is required")), "{e}");
        }
        // An empty value is as good as absent.
        assert!(err(&[(ENV_TOKEN, "")]).contains("POWERCONTEXT_DEERFLOW_TOKEN is required"));
    }

    #[test]
    fn owner_must_be_an_authenticated_user() {
        for bad in ["default", " alice", "alice ", "   "] {
            let e = err(&[(ENV_OWNER_USER_ID, bad)]);
            assert!(e.contains(ENV_OWNER_USER_ID), "{e}");
        }
        assert!(err(&[(ENV_OWNER_USER_ID, "default")]).contains("fallback"));
    }

    #[test]
    fn profile_query_is_opt_in_and_checked() {
        assert_eq!(with(&[]).unwrap().profile_query(), None);
        let s = with(&[(ENV_PROFILE_QUERY, "user profile preferences goals")]).unwrap();
        assert_eq!(s.profile_query(), Some("user profile preferences goals"));
        let blank = err(&[(ENV_PROFILE_QUERY, "  \t ")]);
        assert!(
            blank.contains("POWERCONTEXT_DEERFLOW_PROFILE_QUERY is blank"),
            "{blank}"
        );
        let long: &'static str = "x".repeat(MAX_PROFILE_QUERY_CHARS + 1).leak();
        let e = err(&[(ENV_PROFILE_QUERY, long)]);
        assert!(
            e.contains("POWERCONTEXT_DEERFLOW_PROFILE_QUERY must be at most 1000 characters"),
            "{e}"
        );
        assert!(!e.contains(long), "value echoed: {e}");
    }

    #[test]
    fn max_bytes_must_be_in_the_api_range() {
        assert_eq!(with(&[(ENV_MAX_BYTES, "512")]).unwrap().max_bytes(), 512);
        assert_eq!(
            with(&[(ENV_MAX_BYTES, "32768")]).unwrap().max_bytes(),
            32768
        );
        for bad in ["511", "32769", "8k", "-1", "8000.0"] {
            let e = err(&[(ENV_MAX_BYTES, bad)]);
            assert!(
                e.contains("POWERCONTEXT_DEERFLOW_MAX_BYTES must be an integer from 512 to 32768"),
                "{e}"
            );
            assert!(!e.contains(bad), "value echoed: {e}");
        }
    }

    #[test]
    fn deadlines_must_be_positive_finite_and_below_the_tool_limit() {
        let s = with(&[
            (ENV_RECALL_TIMEOUT_SECONDS, "0.25"),
            (ENV_REMEMBER_TIMEOUT_SECONDS, "29.5"),
        ])
        .unwrap();
        assert_eq!(s.recall_timeout(), Duration::from_millis(250));
        assert_eq!(s.remember_timeout(), Duration::from_millis(29_500));
        for bad in ["0", "-1", "NaN", "inf", "30", "abc"] {
            assert!(err(&[(ENV_REMEMBER_TIMEOUT_SECONDS, bad)])
                .contains("POWERCONTEXT_DEERFLOW_REMEMBER_TIMEOUT_SECONDS must be"));
            assert!(err(&[(ENV_RECALL_TIMEOUT_SECONDS, bad)])
                .contains("POWERCONTEXT_DEERFLOW_RECALL_TIMEOUT_SECONDS must be"));
        }
    }

    #[test]
    fn plain_http_is_allowed_only_to_loopback() {
        for ok in [
            "http://localhost:8000",
            "http://127.0.0.1:1",
            "http://127.9.9.9",
            "http://[::1]:8000/",
            "https://powercontext.example.com",
            "https://10.0.0.5/pc/",
        ] {
            assert!(with(&[(ENV_BASE_URL, ok)]).is_ok(), "{ok}");
        }
        for (bad, rule) in [
            (
                "http://powercontext.example.com",
                "https unless the host is loopback",
            ),
            ("http://10.0.0.5:8000", "https unless the host is loopback"),
            (
                "http://localhost.evil.com",
                "https unless the host is loopback",
            ),
            ("ftp://localhost", "absolute http(s) URL"),
            ("localhost:8000", "absolute http(s) URL"),
            ("https://u:pw@example.com", "must not carry credentials"),
            ("https://example.com/?token=x", "query or fragment"),
        ] {
            let e = err(&[(ENV_BASE_URL, bad)]);
            assert!(e.contains(ENV_BASE_URL) && e.contains(rule), "{bad}: {e}");
            assert!(!e.contains("pw@"), "{e}");
        }
    }

    #[test]
    fn scope_id_follows_the_api_rules() {
        assert!(with(&[(ENV_SCOPE_ID, "project:demo")]).is_ok());
        assert!(err(&[(ENV_SCOPE_ID, " scp_x")]).contains("whitespace"));
        let long: &'static str = Box::leak("s".repeat(257).into_boxed_str());
        assert!(err(&[(ENV_SCOPE_ID, long)]).contains("at most 256"));
    }

    #[test]
    fn token_never_appears_in_debug_or_errors() {
        let s = with(&[]).unwrap();
        let dbg = format!("{s:?}");
        assert!(!dbg.contains(SECRET), "{dbg}");
        assert!(dbg.contains("<redacted>"));
        let e = err(&[(ENV_TOKEN, "has space"), (ENV_MAX_BYTES, "1")]);
        assert!(
            e.contains("POWERCONTEXT_DEERFLOW_TOKEN must be printable ASCII"),
            "{e}"
        );
        assert!(!e.contains("has space"), "{e}");
    }

    #[test]
    fn yaml_maps_accept_only_the_host_storage_path() {
        let mut m = Map::new();
        assert!(reject_yaml_binding("backend_config", &m).is_ok());
        m.insert(
            "storage_path".into(),
            Value::String("/var/lib/memgate".into()),
        );
        assert!(reject_yaml_binding("backend_config", &m).is_ok());
        m.insert("token".into(), Value::String(SECRET.into()));
        m.insert("base_url".into(), Value::String("https://x".into()));
        let e = reject_yaml_binding("backend_config", &m).unwrap_err();
        let msg = e.to_string();
        assert!(matches!(e, MemoryError::Config(_)));
        assert!(
            msg.starts_with("backend_config.base_url, backend_config.token are not accepted"),
            "{msg}"
        );
        assert!(!msg.contains(SECRET), "{msg}");
        let mut bad_path = Map::new();
        bad_path.insert("storage_path".into(), Value::Bool(true));
        assert!(reject_yaml_binding("backend_config", &bad_path)
            .unwrap_err()
            .to_string()
            .contains("storage_path must be a string"));
    }

    fn ctx(pairs: &[(&str, &str)]) -> BackendContext {
        BackendContext::new("/tmp/memgate-test").with_env(Arc::new(env(pairs)))
    }

    #[test]
    fn one_context_yields_one_shared_snapshot_read_once() {
        let loader = SettingsLoader::new();
        let reads = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let counted = {
            let reads = reads.clone();
            let inner = env(&base());
            move |name: &str| {
                reads.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                inner(name)
            }
        };
        let c = BackendContext::new("/tmp/x").with_env(Arc::new(counted));
        let a = loader.load(&c).unwrap();
        let b = loader.load(&c.clone()).unwrap();
        assert!(
            Arc::ptr_eq(&a, &b),
            "backend and tool must share one snapshot"
        );
        assert_eq!(
            reads.load(std::sync::atomic::Ordering::SeqCst),
            ENV_VARS.len()
        );
    }

    #[test]
    fn concurrent_first_loads_read_the_environment_once() {
        let loader = Arc::new(SettingsLoader::new());
        let reads = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let counted = {
            let reads = reads.clone();
            let inner = env(&base());
            move |name: &str| {
                reads.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                std::thread::yield_now();
                inner(name)
            }
        };
        let c = BackendContext::new("/tmp/x").with_env(Arc::new(counted));
        let handles: Vec<_> = (0..8)
            .map(|_| {
                let (loader, c) = (loader.clone(), c.clone());
                std::thread::spawn(move || loader.load(&c).unwrap())
            })
            .collect();
        let snapshots: Vec<_> = handles.into_iter().map(|h| h.join().unwrap()).collect();
        assert!(snapshots.iter().all(|s| Arc::ptr_eq(s, &snapshots[0])));
        assert_eq!(
            reads.load(std::sync::atomic::Ordering::SeqCst),
            ENV_VARS.len()
        );
    }

    #[test]
    fn separate_environments_do_not_leak_into_each_other() {
        let loader = SettingsLoader::new();
        let mut other = base();
        other.retain(|(k, _)| *k != ENV_OWNER_USER_ID);
        other.push((ENV_OWNER_USER_ID, "bob"));
        let a = loader.load(&ctx(&base())).unwrap();
        let b = loader.load(&ctx(&other)).unwrap();
        assert_eq!((a.owner_user_id(), b.owner_user_id()), ("alice", "bob"));
        let broken = ctx(&[]);
        let e1 = loader.load(&broken).unwrap_err().to_string();
        let e2 = loader.load(&broken).unwrap_err().to_string();
        assert_eq!(e1, e2, "both consumers fail the same way");
        // Dropped sources are pruned.
        drop(broken);
        let _ = loader.load(&ctx(&base()));
        assert!(loader.snapshots.lock().unwrap().len() <= 1);
    }
}
