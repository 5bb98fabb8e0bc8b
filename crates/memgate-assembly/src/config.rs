//! `config.yaml`: the `memory:` section shaped like the host's, plus the
//! `server:` section of `memgate serve`.
//!
//! Loading order: `--config FILE`, else `$MEMGATE_CONFIG`, else
//! `./config.yaml` when present, else defaults (the `local` backend). Unknown
//! keys anywhere are errors naming the key path; there is no silent fallback
//! to another backend. `backend_config` is private to the backend and is
//! validated by it, after the storage root has been injected.

use crate::deadline::Deadlines;
use memgate_core::redaction::{redactor_from_config, Redactor};
use memgate_core::{MemoryError, MemoryMode, Result};
use serde::Deserialize;
use serde_json::{Map, Value};
use std::fmt;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// The backends memgate knows, by `manager_class` name.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum ManagerClass {
    #[default]
    Local,
    OpenViking,
    PowerContext,
    Noop,
    /// The local store's contract on PostgreSQL, for replicas sharing memory.
    Postgres,
}

impl ManagerClass {
    pub const ALL: [ManagerClass; 5] = [
        ManagerClass::Local,
        ManagerClass::OpenViking,
        ManagerClass::PowerContext,
        ManagerClass::Noop,
        ManagerClass::Postgres,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Self::Local => "local",
            Self::OpenViking => "openviking",
            Self::PowerContext => "powercontext",
            Self::Noop => "noop",
            Self::Postgres => "postgres",
        }
    }

    pub fn parse(name: &str) -> std::result::Result<Self, String> {
        Self::ALL
            .into_iter()
            .find(|c| c.as_str() == name)
            .ok_or_else(|| {
                let names: Vec<&str> = Self::ALL.iter().map(|c| c.as_str()).collect();
                format!(
                    "unknown manager_class `{name}`; valid names are {} \
                     (memgate never falls back silently to another backend)",
                    names.join(", ")
                )
            })
    }
}

impl fmt::Display for ManagerClass {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl<'de> Deserialize<'de> for ManagerClass {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
        let name = String::deserialize(d)?;
        ManagerClass::parse(&name).map_err(serde::de::Error::custom)
    }
}

/// The `memory:` section.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct MemoryConfig {
    /// Gate for capture and recall injection (explicit operations still work).
    pub enabled: bool,
    /// Gate for recall injection only.
    pub injection_enabled: bool,
    /// Budget for draining in-flight work at shutdown, 1–300 seconds.
    pub shutdown_flush_timeout_seconds: f64,
    pub manager_class: ManagerClass,
    pub mode: MemoryMode,
    /// Private to the backend; `storage_path` is injected before it sees it.
    pub backend_config: Map<String, Value>,
    /// memgate's addition: one total deadline per operation, on every surface.
    pub deadlines: Deadlines,
    /// memgate's addition: how user secrets are redacted before anything is
    /// stored, indexed or sent, for every backend (`enabled`, `disable`,
    /// `patterns`; see [`memgate_core::redaction`]). Unset: every built-in
    /// rule on. A backend's own `backend_config.redaction` overrides it.
    pub redaction: Option<Value>,
    /// memgate's addition: facts distilled from captured turns by a model,
    /// off the write path (see [`memgate_distill::settings`]). Unset: off.
    pub distill: Option<Value>,
}

impl Default for MemoryConfig {
    fn default() -> Self {
        Self {
            enabled: true,
            injection_enabled: true,
            shutdown_flush_timeout_seconds: 30.0,
            manager_class: ManagerClass::Local,
            mode: MemoryMode::Middleware,
            backend_config: Map::new(),
            deadlines: Deadlines::default(),
            redaction: None,
            distill: None,
        }
    }
}

impl MemoryConfig {
    /// The redactor `memory.redaction` describes (the default rules when it
    /// is unset). Errors name `memory.redaction.<key>` and the rule, never a
    /// pattern's text.
    pub fn redactor(&self) -> Result<Arc<Redactor>> {
        match &self.redaction {
            None | Some(Value::Null) => Ok(Redactor::shared_default()),
            Some(v) => Ok(Arc::new(redactor_from_config(v, "memory.redaction")?)),
        }
    }
}

impl MemoryConfig {
    /// `memory.distill`, validated (errors name `memory.distill.<key>`).
    pub fn distill_settings(&self) -> Result<memgate_distill::DistillSettings> {
        memgate_distill::DistillSettings::parse(self.distill.as_ref())
    }
}

/// Default address of `memgate serve`.
pub const DEFAULT_ADDR: &str = "127.0.0.1:8765";
/// Default environment variable holding the server's bearer token.
pub const DEFAULT_TOKEN_ENV: &str = "MEMGATE_TOKEN";

/// The `server:` section.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ServerConfig {
    /// `HOST:PORT`; `--addr` overrides it.
    pub addr: String,
    /// Name of the environment variable holding the bearer token. Binding a
    /// non-loopback address requires the token.
    pub bearer_token_env: String,
    /// Request body limit in bytes, 1 KiB – 64 MiB.
    pub max_body_bytes: usize,
    /// Serve the memory browser at `/ui` (on by default); `false` makes
    /// `GET /ui` answer 404.
    pub ui: bool,
    /// The URL users reach this server at, when a proxy sits in front
    /// (e.g. `https://memory.example.com`). memgate serves plain HTTP; an
    /// `https://` URL says a proxy terminates TLS, so the memory browser's
    /// session cookie is marked `Secure`. Configured rather than read from
    /// `X-Forwarded-Proto`, which any client can send.
    pub public_url: Option<String>,
}

impl ServerConfig {
    /// Users reach the server over TLS (`public_url` is `https://`).
    pub fn public_https(&self) -> bool {
        self.public_url
            .as_deref()
            .is_some_and(|u| u.starts_with("https://"))
    }
}

impl Default for ServerConfig {
    fn default() -> Self {
        Self {
            addr: DEFAULT_ADDR.to_owned(),
            bearer_token_env: DEFAULT_TOKEN_ENV.to_owned(),
            max_body_bytes: 4 * 1024 * 1024,
            ui: true,
            public_url: None,
        }
    }
}

/// The `mcp:` section: who the MCP surfaces act for.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct McpConfig {
    /// Serve `/mcp` (streamable HTTP) on `memgate serve`.
    pub enabled: bool,
    /// The principal every MCP tool call runs as (the bound owner). Unset:
    /// `--user` / `$MEMGATE_USER`, else the host fallback `default`. Never
    /// taken from tool arguments.
    pub user: Option<String>,
    /// The agent (peer) within that user's memory; unset = the default agent.
    pub agent: Option<String>,
    /// Offer the `forget` (erasure) tool on `memgate mcp` and `/mcp`. Off by
    /// default: erasing memory is the operator's act, never a model's own
    /// initiative; turn it on only for an MCP client a person drives.
    pub forget_tool: bool,
    /// Offer the handoff tools (prepare, show, correct, finalize, continue,
    /// acknowledge, commit) on `memgate mcp` and `/mcp`. Off by default:
    /// handing a task over is the operator's choice, as for `forget`.
    pub handoff_tools: bool,
}

impl Default for McpConfig {
    fn default() -> Self {
        Self {
            enabled: true,
            user: None,
            agent: None,
            forget_tool: false,
            handoff_tools: false,
        }
    }
}

/// The whole file.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Config {
    pub memory: MemoryConfig,
    pub server: ServerConfig,
    pub mcp: McpConfig,
}

/// Where the configuration came from, for `doctor` and error messages.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ConfigSource {
    File(PathBuf),
    Defaults,
}

impl fmt::Display for ConfigSource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::File(p) => write!(f, "{}", p.display()),
            Self::Defaults => f.write_str("built-in defaults (no config file)"),
        }
    }
}

impl Config {
    /// Parses and validates YAML text; `origin` names the file in errors.
    pub fn from_yaml(text: &str, origin: &str) -> Result<Self> {
        if text.trim().is_empty() {
            return Ok(Self::default());
        }
        // Syntax first (the YAML parser reports line and column), then the shape,
        // through JSON values so every error names its full key path once.
        let yaml: yaml_serde::Value = yaml_serde::from_str(text)
            .map_err(|e| MemoryError::Config(format!("{origin}: invalid YAML: {e}")))?;
        if yaml.is_null() {
            return Ok(Self::default());
        }
        let json = serde_json::to_value(&yaml).map_err(|e| {
            MemoryError::Config(format!(
                "{origin}: unsupported YAML (keys must be strings): {e}"
            ))
        })?;
        let config: Config = serde_path_to_error::deserialize(json).map_err(|e| {
            let path = e.path().to_string();
            let inner = e.into_inner();
            if path == "." || path.is_empty() {
                MemoryError::Config(format!("{origin}: {inner}"))
            } else {
                MemoryError::Config(format!("{origin}: {path}: {inner}"))
            }
        })?;
        config
            .validate()
            .map_err(|e| MemoryError::Config(format!("{origin}: {e}")))?;
        Ok(config)
    }

    /// Reads and validates a file.
    pub fn from_file(path: &Path) -> Result<Self> {
        let bytes = std::fs::read(path).map_err(|e| {
            MemoryError::Config(format!("cannot read config file {}: {e}", path.display()))
        })?;
        let text = String::from_utf8(bytes).map_err(|_| {
            MemoryError::Config(format!("{}: config file must be UTF-8", path.display()))
        })?;
        Self::from_yaml(&text, &path.display().to_string())
    }

    /// Resolves the config file (`explicit`, else `$MEMGATE_CONFIG`, else
    /// `./config.yaml` when present) and loads it, or the defaults.
    pub fn discover(
        explicit: Option<&Path>,
        env_config: Option<&str>,
    ) -> Result<(Self, ConfigSource)> {
        let chosen = match (explicit, env_config) {
            (Some(p), _) => Some(p.to_path_buf()),
            (None, Some(p)) if !p.is_empty() => Some(PathBuf::from(p)),
            _ => {
                let local = PathBuf::from("config.yaml");
                local.is_file().then_some(local)
            }
        };
        match chosen {
            Some(path) => Ok((Self::from_file(&path)?, ConfigSource::File(path))),
            None => Ok((Self::default(), ConfigSource::Defaults)),
        }
    }

    fn validate(&self) -> std::result::Result<(), String> {
        self.memory
            .deadlines
            .validate()
            .map_err(|e| e.to_string())?;
        // Built once here so a bad pattern stops start-up, not a capture.
        self.memory.redactor().map_err(|e| match e {
            MemoryError::Config(message) => message,
            other => other.to_string(),
        })?;
        self.memory.distill_settings().map_err(|e| match e {
            MemoryError::Config(message) => message,
            other => other.to_string(),
        })?;
        let t = self.memory.shutdown_flush_timeout_seconds;
        if !(t.is_finite() && (1.0..=300.0).contains(&t)) {
            return Err(format!(
                "memory.shutdown_flush_timeout_seconds must be between 1 and 300 (got {t})"
            ));
        }
        self.server.addr.parse::<SocketAddr>().map_err(|_| {
            format!(
                "server.addr must be HOST:PORT with an IP address, e.g. {DEFAULT_ADDR} (got {:?})",
                self.server.addr
            )
        })?;
        if self.server.bearer_token_env.trim().is_empty() {
            return Err("server.bearer_token_env must not be empty".to_owned());
        }
        if let Some(url) = &self.server.public_url {
            let host = url
                .strip_prefix("https://")
                .or_else(|| url.strip_prefix("http://"));
            if host.is_none_or(|h| h.is_empty() || h.chars().any(char::is_whitespace)) {
                return Err(format!(
                    "server.public_url must be an http:// or https:// URL, e.g. https://memory.example.com (got {url:?})"
                ));
            }
        }
        let body = self.server.max_body_bytes;
        if !(1024..=64 * 1024 * 1024).contains(&body) {
            return Err(format!(
                "server.max_body_bytes must be between 1024 and 67108864 (got {body})"
            ));
        }
        Ok(())
    }
}

/// The runtime home: `$MEMGATE_HOME`, else `./.memgate`, made absolute.
pub fn runtime_home(memgate_home: Option<&str>, cwd: &Path) -> PathBuf {
    match memgate_home {
        Some(h) if !h.is_empty() => absolutize(Path::new(h), cwd),
        _ => cwd.join(".memgate"),
    }
}

fn absolutize(p: &Path, base: &Path) -> PathBuf {
    if p.is_absolute() {
        p.to_path_buf()
    } else {
        base.join(p)
    }
}

/// The storage root a backend gets, injected into `backend_config` the way
/// the host does: an empty or missing `storage_path` becomes the runtime
/// home; a relative one is resolved against it.
pub fn resolve_storage_path(backend_config: &Map<String, Value>, home: &Path) -> Result<PathBuf> {
    match backend_config.get("storage_path") {
        None | Some(Value::Null) => Ok(home.to_path_buf()),
        Some(Value::String(s)) if s.trim().is_empty() => Ok(home.to_path_buf()),
        Some(Value::String(s)) => Ok(absolutize(Path::new(s), home)),
        Some(_) => Err(MemoryError::Config(
            "memory.backend_config.storage_path must be a string path".to_owned(),
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn err(yaml: &str) -> String {
        Config::from_yaml(yaml, "config.yaml")
            .unwrap_err()
            .to_string()
    }

    #[test]
    fn empty_and_missing_sections_mean_defaults() {
        for yaml in ["", "memory: {}", "server: {}\n", "# nothing\n"] {
            let c = Config::from_yaml(yaml, "t").unwrap();
            assert_eq!(c.memory.manager_class, ManagerClass::Local);
            assert!(c.memory.enabled && c.memory.injection_enabled);
            assert_eq!(c.memory.shutdown_flush_timeout_seconds, 30.0);
            assert_eq!(c.memory.mode, MemoryMode::Middleware);
            assert_eq!(c.server.addr, DEFAULT_ADDR);
        }
    }

    #[test]
    fn the_seed_example_parses() {
        let yaml = "memory:\n  enabled: true\n  injection_enabled: true\n  shutdown_flush_timeout_seconds: 30\n  manager_class: openviking\n  mode: middleware\n  backend_config:\n    base_url: http://127.0.0.1:1933\n    retrieval:\n      top_k: 8\n";
        let c = Config::from_yaml(yaml, "t").unwrap();
        assert_eq!(c.memory.manager_class, ManagerClass::OpenViking);
        assert_eq!(c.memory.backend_config["retrieval"]["top_k"], 8);
    }

    #[test]
    fn unknown_keys_name_their_path() {
        let e = err("memory:\n  enabld: true\n");
        assert!(
            e.contains("memory") && e.contains("unknown field `enabld`"),
            "{e}"
        );
        let e = err("memroy: {}\n");
        assert!(e.contains("unknown field `memroy`"), "{e}");
        let e = err("server:\n  port: 1\n");
        assert!(
            e.contains("server") && e.contains("unknown field `port`"),
            "{e}"
        );
    }

    #[test]
    fn unknown_manager_class_lists_the_valid_names() {
        let e = err("memory:\n  manager_class: deermem\n");
        assert!(e.contains("memory.manager_class"), "{e}");
        assert!(e.contains("local, openviking, powercontext, noop"), "{e}");
        assert!(e.contains("never falls back"), "{e}");
    }

    #[test]
    fn the_memory_browser_is_on_unless_turned_off() {
        assert!(Config::from_yaml("", "t").unwrap().server.ui);
        assert!(
            !Config::from_yaml("server:\n  ui: false\n", "t")
                .unwrap()
                .server
                .ui
        );
        assert!(err("server:\n  ui: maybe\n").contains("server.ui"));
        let behind_tls =
            Config::from_yaml("server:\n  public_url: https://memory.example.com\n", "t");
        assert!(behind_tls.unwrap().server.public_https());
        let plain = Config::from_yaml("server:\n  public_url: http://10.0.0.5:8765\n", "t");
        assert!(!plain.unwrap().server.public_https());
        assert!(!Config::from_yaml("", "t").unwrap().server.public_https());
        assert!(err("server:\n  public_url: memory.example.com\n").contains("server.public_url"));
    }

    #[test]
    fn ranges_and_types_are_checked() {
        assert!(
            err("memory:\n  shutdown_flush_timeout_seconds: 0.5\n").contains("between 1 and 300")
        );
        assert!(
            err("memory:\n  shutdown_flush_timeout_seconds: 301\n").contains("between 1 and 300")
        );
        assert!(Config::from_yaml("memory:\n  shutdown_flush_timeout_seconds: 300\n", "t").is_ok());
        let e = err("memory:\n  mode: tools\n");
        assert!(e.contains("memory.mode") && e.contains("tools"), "{e}");
        let e = err("memory:\n  enabled: maybe\n");
        assert!(e.contains("memory.enabled"), "{e}");
        assert!(err("server:\n  addr: localhost\n").contains("server.addr"));
        assert!(err("server:\n  max_body_bytes: 10\n").contains("server.max_body_bytes"));
    }

    #[test]
    fn messages_show_each_path_once() {
        for (yaml, path) in [
            (
                "memory:\n  manager_class: deermem\n",
                "memory.manager_class: ",
            ),
            ("memory:\n  backend_config: []\n", "memory.backend_config: "),
            (
                "server:\n  bearer_token_env: [1]\n",
                "server.bearer_token_env: ",
            ),
        ] {
            let e = err(yaml);
            assert_eq!(e.matches(path).count(), 1, "{e}");
        }
    }

    #[test]
    fn memory_redaction_is_on_by_default_and_configurable() {
        let c = Config::from_yaml("", "t").unwrap();
        let r = c.memory.redactor().unwrap();
        assert!(r.is_enabled() && r.rule_ids().any(|id| id == "jwt"));
        let yaml = "memory:\n  redaction:\n    disable: [jwt]\n    patterns:\n      employee_id: 'EMP-[0-9]{6}'\n";
        let r = Config::from_yaml(yaml, "t")
            .unwrap()
            .memory
            .redactor()
            .unwrap();
        assert!(!r.rule_ids().any(|id| id == "jwt"));
        assert_eq!(
            r.redact("badge EMP-123456").text,
            "badge [redacted:employee_id]"
        );
        let off = Config::from_yaml("memory:\n  redaction:\n    enabled: false\n", "t").unwrap();
        assert!(!off.memory.redactor().unwrap().is_enabled());
    }

    #[test]
    fn bad_redaction_settings_stop_startup_naming_the_field_not_the_pattern() {
        // The pattern holds something an operator may not want in a log.
        let e = err("memory:\n  redaction:\n    patterns:\n      vault: '(hunter2-Zq81'\n");
        assert!(
            e.starts_with("config.yaml: memory.redaction.patterns.vault"),
            "{e}"
        );
        assert!(e.contains("regular expression"), "{e}");
        assert!(!e.contains("hunter2"), "{e}");
        let e = err("memory:\n  redaction:\n    disable: [jwt, nope]\n");
        assert!(
            e.contains("memory.redaction.disable[1]") && e.contains("not a built-in rule"),
            "{e}"
        );
        let e = err("memory:\n  redaction:\n    enable: true\n");
        assert!(
            e.contains("memory.redaction.enable is not a redaction setting"),
            "{e}"
        );
        let e = err("memory:\n  redaction:\n    patterns:\n      Bad-Name: x\n");
        assert!(
            e.contains("memory.redaction.patterns") && e.contains("a-z"),
            "{e}"
        );
    }

    #[test]
    fn distillation_is_off_by_default_and_bad_settings_stop_startup_naming_the_key() {
        let c = Config::from_yaml("memory: {}\n", "t").unwrap();
        assert!(!c.memory.distill_settings().unwrap().enabled);
        let e = err("memory:\n  distill:\n    enabled: true\n    model: m\n");
        assert!(e.starts_with("config.yaml: memory.distill.base_url"), "{e}");
        let e = err(
            "memory:\n  distill:\n    enabled: true\n    base_url: http://h/v1\n    \
                     model: m\n    api_key_env: sk-live-abc 123\n",
        );
        assert!(
            e.contains("memory.distill.api_key_env") && !e.contains("sk-live"),
            "{e}"
        );
        let e = err("memory:\n  distill:\n    budget: 3\n");
        assert!(
            e.contains("memory.distill.budget is not a distill setting"),
            "{e}"
        );
        let on = Config::from_yaml(
            "memory:\n  distill:\n    enabled: true\n    base_url: http://h/v1\n    model: m\n",
            "t",
        )
        .unwrap();
        assert!(on.memory.distill_settings().unwrap().enabled);
    }

    #[test]
    fn invalid_yaml_is_reported_with_its_origin() {
        let e = err("memory: [unclosed\n");
        assert!(e.starts_with("config.yaml:"), "{e}");
    }

    #[test]
    fn storage_path_follows_the_host_rules() {
        let home = Path::new("/srv/mg");
        let mut bc = Map::new();
        assert_eq!(resolve_storage_path(&bc, home).unwrap(), home);
        bc.insert("storage_path".into(), Value::String("".into()));
        assert_eq!(resolve_storage_path(&bc, home).unwrap(), home);
        bc.insert("storage_path".into(), Value::String("data".into()));
        assert_eq!(resolve_storage_path(&bc, home).unwrap(), home.join("data"));
        bc.insert("storage_path".into(), Value::String("/abs".into()));
        assert_eq!(resolve_storage_path(&bc, home).unwrap(), Path::new("/abs"));
        bc.insert("storage_path".into(), Value::from(3));
        assert!(resolve_storage_path(&bc, home).is_err());
        let cwd = Path::new("/work");
        assert_eq!(runtime_home(None, cwd), Path::new("/work/.memgate"));
        assert_eq!(runtime_home(Some("h"), cwd), Path::new("/work/h"));
        assert_eq!(runtime_home(Some("/h"), cwd), Path::new("/h"));
    }

    #[test]
    fn discovery_prefers_the_explicit_file() {
        let dir = tempfile::tempdir().unwrap();
        let a = dir.path().join("a.yaml");
        std::fs::write(&a, "memory:\n  manager_class: noop\n").unwrap();
        let (c, src) = Config::discover(Some(&a), Some("/nonexistent.yaml")).unwrap();
        assert_eq!(c.memory.manager_class, ManagerClass::Noop);
        assert_eq!(src, ConfigSource::File(a.clone()));
        let e = Config::discover(None, Some("/nonexistent/memgate.yaml")).unwrap_err();
        assert!(e.to_string().contains("cannot read config file"), "{e}");
        std::fs::write(&a, [0xffu8, 0xfe]).unwrap();
        assert!(Config::from_file(&a)
            .unwrap_err()
            .to_string()
            .contains("UTF-8"));
    }
}
