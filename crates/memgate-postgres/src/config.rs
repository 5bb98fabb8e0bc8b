//! The `postgres` backend's settings (`memory.backend_config` in `config.yaml`).
//!
//! | key | default | rule |
//! |---|---|---|
//! | `dsn` | — | a libpq connection string (`postgres://…` or `key=value`); exactly one of `dsn` / `dsn_env` |
//! | `dsn_env` | — | the name of the environment variable holding the DSN (keeps the password out of the file) |
//! | `schema` | `memgate` | the PostgreSQL schema memgate owns: `[a-z_][a-z0-9_]*`, at most 63 characters |
//! | `pool_size` | 8 | integer 1–64: connections this process keeps |
//! | `statement_timeout_ms` | 5000 | integer 100–600000: enforced by the server on every statement |
//! | `connect_timeout_ms` | 5000 | integer 100–60000: connecting, and waiting for a free pooled connection |
//! | `tls_ca_file` | — | PEM file of extra roots to trust (else the public web roots) |
//! | `max_injection_chars`, `injection_query`, `recall_top_k`, `standing_memories` | as `local` | the same rules as `local` (one validator) |
//! | `replica_dsn` | — | a hot standby of the same database (streaming replication) that recall and search read from; same rules as `dsn`; exactly one of `replica_dsn` / `replica_dsn_env`, or neither |
//! | `replica_dsn_env` | — | the name of the environment variable holding the replica's DSN |
//! | `replica_max_lag_ms` | 5000 | integer 100–600000: a replica further behind than this is dropped from reads until it catches up |
//! | `replica_wait_ms` | 500 | integer 0–10000: after a write (through any process), how long that scope's reads wait for the replica to replay it before they go to the primary |
//! | `embedder` | none | as `local`: turns on hybrid recall, with vectors in pgvector (the server must have the `vector` extension) |
//! | `vector_index` | `hnsw` | `hnsw` (an approximate index per model, built in the background; [`crate::hnsw`]) or `exact` (every recall scans the scope's vectors) |
//! | `hnsw_ef_search` | 50 | integer 10–1000: the HNSW search's candidate list; larger is closer to exact and slower |
//! | `hnsw_min_items` | 20000 | integer 0–100000000: a scope holding fewer items is searched exactly, a larger one through the index |
//! | `max_turn_age_days` | none (kept until forgotten) | as `local`: integer 1–36500; captured turns older than this are erased by a background sweep, with the distilled facts resting only on them ([`crate::retention`]) |
//!
//! TLS: a host that is not loopback (`localhost`, `127.0.0.0/8`, `::1`, a
//! Unix socket) must be reached with `sslmode=require`; anything else is a
//! [`MemoryError::Config`], so a password never crosses a network in clear.
//! The DSN's password is never echoed: errors name the key and the rule, and
//! `Debug` shows `dsn: <redacted>`.

use memgate_core::handoff::{DEFAULT_HANDOFF_LIFETIME, HANDOFF_LIFETIME_SECS};
use memgate_core::{BackendContext, MemoryError, Result};
use memgate_embed::EmbedderSettings;
use memgate_recall::settings::{RecallSettings, RECALL_KEYS};
use serde_json::{Map, Value};
use std::fmt;
use std::net::IpAddr;
use std::ops::RangeInclusive;
use std::path::PathBuf;
use std::time::Duration;
use tokio_postgres::config::{Host, SslMode};

const POOL_SIZE: RangeInclusive<u64> = 1..=64;
const STATEMENT_TIMEOUT_MS: RangeInclusive<u64> = 100..=600_000;
const CONNECT_TIMEOUT_MS: RangeInclusive<u64> = 100..=60_000;
const HNSW_EF_SEARCH: RangeInclusive<u64> = 10..=1_000;
const HNSW_MIN_ITEMS: RangeInclusive<u64> = 0..=100_000_000;
/// `hnsw_ef_search` unless set: the nearest-items statement asks the index
/// for hybrid recall's dense pool (50 at the default `recall_top_k`), which
/// one graph search of this size then yields; a search's cost follows it
/// (`docs/design/hnsw.md`).
pub const DEFAULT_EF_SEARCH: u64 = 50;
/// `hnsw_min_items` unless set: below it, comparing the query with each of
/// a scope's vectors costs less than the graph search (an exact scan of
/// 10,000 384-dimension vectors ranks in 2.5–5.2 ms; a search of the index
/// at a million items took 8.8–9.0 ms p50, `docs/design/hnsw.md`).
pub const DEFAULT_HNSW_MIN_ITEMS: u64 = 20_000;
const REPLICA_MAX_LAG_MS: RangeInclusive<u64> = 100..=600_000;
const REPLICA_WAIT_MS: RangeInclusive<u64> = 0..=10_000;
/// Hybrid recall's embedder: `local`'s key and rules.
const EMBEDDER_KEY: &str = "embedder";
const OWN_KEYS: &[&str] = &[
    "dsn",
    "dsn_env",
    "schema",
    "pool_size",
    "statement_timeout_ms",
    "connect_timeout_ms",
    "tls_ca_file",
    "handoff_lifetime_secs",
    "vector_index",
    "hnsw_ef_search",
    "hnsw_min_items",
    "replica_dsn",
    "replica_dsn_env",
    "replica_max_lag_ms",
    "replica_wait_ms",
    "max_turn_age_days",
    // Injected by the factory for every backend; unused here.
    "storage_path",
];

/// Validated settings of the postgres backend.
#[derive(Clone)]
pub struct PostgresConfig {
    /// The parsed connection settings (their `Debug` redacts the password).
    pub connection: tokio_postgres::Config,
    /// The password in the DSN, kept only to scrub it from error texts.
    pub(crate) password: Option<memgate_core::Secret>,
    pub schema: String,
    pub pool_size: usize,
    pub statement_timeout: Duration,
    pub connect_timeout: Duration,
    /// True when the connection must use TLS (`sslmode=require`).
    pub tls: bool,
    pub tls_ca_file: Option<PathBuf>,
    /// How long a handoff is held before it is gone (`handoff_lifetime_secs`).
    pub handoff_lifetime: Duration,
    /// Recall settings, with `local`'s defaults and rules.
    pub recall: RecallSettings,
    /// The embedder of hybrid recall; `None` keeps recall lexical.
    pub embedder: Option<EmbedderSettings>,
    /// How the dense side of hybrid recall finds its nearest items.
    pub vector_index: VectorIndex,
    /// The streaming replica that recall and search read from, if any.
    pub replica: Option<ReplicaConfig>,
    /// Captured turns older than this are erased by the retention sweep
    /// ([`crate::retention`]); `None` keeps them until they are forgotten.
    pub max_turn_age: Option<Duration>,
}

/// How hybrid recall's nearest items are found on PostgreSQL.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum VectorIndex {
    /// An HNSW index per model and dimension ([`crate::hnsw`]), searched
    /// with this `ef_search` for scopes of at least `min_items` items; the
    /// exact scan answers smaller scopes, and every scope while it builds.
    Hnsw { ef_search: u64, min_items: u64 },
    /// Every recall compares the query with each of the scope's vectors.
    Exact,
}

impl Default for VectorIndex {
    fn default() -> Self {
        Self::Hnsw {
            ef_search: DEFAULT_EF_SEARCH,
            min_items: DEFAULT_HNSW_MIN_ITEMS,
        }
    }
}

/// A read replica's settings (`replica_*` keys): its connection settings
/// (pool size and timeouts as the primary's) and the two bounds of
/// [`crate::replica`].
#[derive(Clone, Debug)]
pub struct ReplicaConfig {
    pub connection: Box<PostgresConfig>,
    /// Further behind than this, the replica is dropped from reads.
    pub max_lag: Duration,
    /// How long a scope's read waits for the replica to replay its last write.
    pub wait: Duration,
}

impl fmt::Debug for PostgresConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let hosts: Vec<String> = self.connection.get_hosts().iter().map(host_name).collect();
        f.debug_struct("PostgresConfig")
            .field("dsn", &"<redacted>")
            .field("hosts", &hosts)
            .field("schema", &self.schema)
            .field("pool_size", &self.pool_size)
            .field("statement_timeout", &self.statement_timeout)
            .field("connect_timeout", &self.connect_timeout)
            .field("tls", &self.tls)
            .field("handoff_lifetime", &self.handoff_lifetime)
            .field("recall", &self.recall)
            .field("vector_index", &self.vector_index)
            .field("embedder", &self.embedder)
            .field("replica", &self.replica)
            .field("max_turn_age", &self.max_turn_age)
            .finish()
    }
}

fn host_name(host: &Host) -> String {
    match host {
        Host::Tcp(h) => h.clone(),
        Host::Unix(p) => p.display().to_string(),
    }
}

/// True for hosts whose traffic never leaves the machine.
fn is_loopback(host: &Host) -> bool {
    match host {
        Host::Unix(_) => true,
        Host::Tcp(h) => {
            let bare = h.trim_start_matches('[').trim_end_matches(']');
            bare.eq_ignore_ascii_case("localhost")
                || bare.parse::<IpAddr>().is_ok_and(|ip| ip.is_loopback())
        }
    }
}

fn config_error(rule: impl fmt::Display) -> MemoryError {
    MemoryError::Config(rule.to_string())
}

/// An integer setting within `range`.
fn integer_in(config: &Map<String, Value>, key: &str, range: RangeInclusive<u64>) -> Result<u64> {
    let default = *range.start();
    let Some(value) = config.get(key) else {
        return Ok(default);
    };
    value.as_u64().filter(|n| range.contains(n)).ok_or_else(|| {
        config_error(format!(
            "backend_config.{key} must be an integer between {} and {}",
            range.start(),
            range.end()
        ))
    })
}

fn string_setting<'a>(config: &'a Map<String, Value>, key: &str) -> Result<Option<&'a str>> {
    match config.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) if !s.trim().is_empty() => Ok(Some(s.trim())),
        Some(_) => Err(config_error(format!(
            "backend_config.{key} must be a non-empty string"
        ))),
    }
}

fn valid_schema_name(name: &str) -> bool {
    let mut chars = name.chars();
    name.len() <= 63
        && chars
            .next()
            .is_some_and(|c| c.is_ascii_lowercase() || c == '_')
        && chars.all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_')
        && !name.starts_with("pg_")
}

impl PostgresConfig {
    /// Reads and validates `backend_config`; `dsn_env` is looked up in the
    /// host context's environment.
    pub fn from_backend_config(config: &Map<String, Value>, ctx: &BackendContext) -> Result<Self> {
        if let Some(unknown) = config.keys().find(|k| {
            !OWN_KEYS.contains(&k.as_str())
                && !RECALL_KEYS.contains(&k.as_str())
                && k.as_str() != EMBEDDER_KEY
        }) {
            let mut known: Vec<&str> = OWN_KEYS[..OWN_KEYS.len() - 1].to_vec();
            known.extend(RECALL_KEYS);
            known.push(EMBEDDER_KEY);
            return Err(config_error(format!(
                "backend_config.{unknown} is not a setting of the postgres backend (known: {})",
                known.join(", ")
            )));
        }
        let dsn = dsn_setting(config, ctx, "dsn")?.ok_or_else(|| {
            config_error("backend_config.dsn (or dsn_env) is required by the postgres backend")
        })?;
        let mut settings = Self::from_dsn(&dsn, config, RecallSettings::read(config)?)?;
        if let Some(v) = config.get(EMBEDDER_KEY).filter(|v| !v.is_null()) {
            settings.embedder = Some(EmbedderSettings::parse(v)?);
        }
        settings.replica = ReplicaConfig::read(config, ctx)?;
        settings.max_turn_age = memgate_core::forget::max_turn_age(config)?;
        Ok(settings)
    }

    /// Parses the DSN and the connection keys of `config`.
    fn from_dsn(dsn: &str, config: &Map<String, Value>, recall: RecallSettings) -> Result<Self> {
        // The parser's message could quote the string back; never show it.
        let connection: tokio_postgres::Config = dsn.parse().map_err(|_| {
            config_error(
                "backend_config.dsn is not a valid PostgreSQL connection string \
                 (expected postgres://user:password@host:port/database or key=value pairs)",
            )
        })?;
        let password = connection
            .get_password()
            .map(|p| memgate_core::Secret::new(String::from_utf8_lossy(p)));
        if connection.get_hosts().is_empty() {
            return Err(config_error(
                "backend_config.dsn must name a host (host=… or postgres://…@host/…)",
            ));
        }
        if connection.get_dbname().is_none() {
            return Err(config_error(
                "backend_config.dsn must name a database (dbname=… or postgres://…/database)",
            ));
        }
        let tls = connection.get_ssl_mode() == SslMode::Require;
        if let Some(remote) = connection.get_hosts().iter().find(|h| !is_loopback(h)) {
            if !tls {
                return Err(config_error(format!(
                    "backend_config.dsn: host {} is not loopback, so TLS is required \
                     (add sslmode=require)",
                    host_name(remote)
                )));
            }
        }
        let schema = string_setting(config, "schema")?.unwrap_or("memgate");
        if !valid_schema_name(schema) {
            return Err(config_error(
                "backend_config.schema must be 1-63 characters of a-z, 0-9 and _, \
                 starting with a letter or _ (and not pg_)",
            ));
        }
        let pool_size = match config.get("pool_size") {
            None => 8,
            Some(_) => integer_in(config, "pool_size", POOL_SIZE)? as usize,
        };
        let statement_timeout = match config.get("statement_timeout_ms") {
            None => Duration::from_millis(5_000),
            Some(_) => Duration::from_millis(integer_in(
                config,
                "statement_timeout_ms",
                STATEMENT_TIMEOUT_MS,
            )?),
        };
        let connect_timeout = match config.get("connect_timeout_ms") {
            None => Duration::from_millis(5_000),
            Some(_) => Duration::from_millis(integer_in(
                config,
                "connect_timeout_ms",
                CONNECT_TIMEOUT_MS,
            )?),
        };
        let tls_ca_file = string_setting(config, "tls_ca_file")?.map(PathBuf::from);
        let handoff_lifetime = match config.get("handoff_lifetime_secs") {
            None => DEFAULT_HANDOFF_LIFETIME,
            Some(_) => Duration::from_secs(integer_in(
                config,
                "handoff_lifetime_secs",
                HANDOFF_LIFETIME_SECS,
            )?),
        };
        let vector_index = match string_setting(config, "vector_index")? {
            None | Some("hnsw") => VectorIndex::Hnsw {
                ef_search: match config.get("hnsw_ef_search") {
                    None => DEFAULT_EF_SEARCH,
                    Some(_) => integer_in(config, "hnsw_ef_search", HNSW_EF_SEARCH)?,
                },
                min_items: match config.get("hnsw_min_items") {
                    None => DEFAULT_HNSW_MIN_ITEMS,
                    Some(_) => integer_in(config, "hnsw_min_items", HNSW_MIN_ITEMS)?,
                },
            },
            Some("exact") => {
                if let Some(key) = ["hnsw_ef_search", "hnsw_min_items"]
                    .into_iter()
                    .find(|k| config.contains_key(*k))
                {
                    return Err(config_error(format!(
                        "backend_config.{key} applies only with vector_index: hnsw"
                    )));
                }
                VectorIndex::Exact
            }
            Some(_) => {
                return Err(config_error(
                    "backend_config.vector_index must be hnsw or exact",
                ))
            }
        };
        Ok(Self {
            connection,
            password,
            schema: schema.to_owned(),
            pool_size,
            statement_timeout,
            connect_timeout,
            tls,
            tls_ca_file,
            handoff_lifetime,
            recall,
            embedder: None,
            vector_index,
            replica: None,
            max_turn_age: None,
        })
    }

    /// Settings for a DSN with every other key at its default (tests, tools).
    pub fn for_dsn(dsn: &str) -> Result<Self> {
        Self::from_dsn(dsn, &Map::new(), RecallSettings::default())
    }

    /// The same settings with another schema, on the replica too (tests give
    /// each run its own).
    pub fn with_schema(mut self, schema: &str) -> Result<Self> {
        if !valid_schema_name(schema) {
            return Err(config_error(
                "schema name breaks the rule of backend_config.schema",
            ));
        }
        schema.clone_into(&mut self.schema);
        if let Some(r) = &mut self.replica {
            schema.clone_into(&mut r.connection.schema);
        }
        Ok(self)
    }

    /// The same settings with another way of finding nearest vectors.
    pub fn with_vector_index(mut self, index: VectorIndex) -> Self {
        self.vector_index = index;
        self
    }

    /// Replaces `text`'s copies of the password with `[redacted]` (errors
    /// from the driver or the server must never carry it).
    pub fn redact(&self, text: &str) -> String {
        let text = match &self.password {
            Some(p) => p.scrub(text),
            None => text.to_owned(),
        };
        match &self.replica {
            Some(r) => r.connection.redact(&text),
            None => text,
        }
    }
}

/// The DSN of `key` (or of `{key}_env`'s variable); `None` when neither is set.
fn dsn_setting(
    config: &Map<String, Value>,
    ctx: &BackendContext,
    key: &str,
) -> Result<Option<String>> {
    let env_key = format!("{key}_env");
    match (string_setting(config, key)?, string_setting(config, &env_key)?) {
        (Some(dsn), None) => Ok(Some(dsn.to_owned())),
        (None, Some(var)) => ctx
            .var(var)
            .filter(|v| !v.trim().is_empty())
            .map(Some)
            .ok_or_else(|| {
                config_error(format!(
                    "backend_config.{env_key} names the environment variable {var}, which is unset or empty"
                ))
            }),
        (Some(_), Some(_)) => Err(config_error(format!(
            "backend_config: set exactly one of {key} and {env_key}, not both"
        ))),
        (None, None) => Ok(None),
    }
}

impl ReplicaConfig {
    /// The `replica_*` keys; their bounds without a replica DSN are an error
    /// (a replica the operator meant to set must not be silently absent).
    fn read(config: &Map<String, Value>, ctx: &BackendContext) -> Result<Option<Self>> {
        let Some(dsn) = dsn_setting(config, ctx, "replica_dsn")? else {
            if let Some(key) = ["replica_max_lag_ms", "replica_wait_ms"]
                .into_iter()
                .find(|k| config.contains_key(*k))
            {
                return Err(config_error(format!(
                    "backend_config.{key} needs backend_config.replica_dsn (or replica_dsn_env)"
                )));
            }
            return Ok(None);
        };
        let connection = PostgresConfig::from_dsn(&dsn, config, RecallSettings::default())
            .map_err(|e| {
                config_error(
                    e.to_string()
                        .replace("backend_config.dsn", "backend_config.replica_dsn"),
                )
            })?;
        let bound = |key: &str, range: RangeInclusive<u64>, default: u64| -> Result<Duration> {
            Ok(Duration::from_millis(match config.get(key) {
                None => default,
                Some(_) => integer_in(config, key, range)?,
            }))
        };
        Ok(Some(Self {
            connection: Box::new(connection),
            max_lag: bound("replica_max_lag_ms", REPLICA_MAX_LAG_MS, 5_000)?,
            wait: bound("replica_wait_ms", REPLICA_WAIT_MS, 500)?,
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;
    use std::collections::HashMap;
    use std::sync::Arc;

    fn parse(v: Value) -> Result<PostgresConfig> {
        let env: HashMap<String, String> = [(
            "PG_DSN".to_owned(),
            "postgres://u:s3cret@127.0.0.1:5432/db".to_owned(),
        )]
        .into();
        let ctx =
            BackendContext::new("/srv").with_env(Arc::new(move |k: &str| env.get(k).cloned()));
        PostgresConfig::from_backend_config(v.as_object().unwrap(), &ctx)
    }

    #[test]
    fn defaults_and_dsn_env() {
        let c = parse(json!({"dsn_env": "PG_DSN", "storage_path": "/x"})).unwrap();
        assert_eq!(c.schema, "memgate");
        assert_eq!(c.pool_size, 8);
        assert_eq!(c.statement_timeout, Duration::from_secs(5));
        assert!(!c.tls);
        assert_eq!(c.recall, RecallSettings::default());
    }

    #[test]
    fn the_maximum_turn_age_is_local_s_setting_with_local_s_wording() {
        let c = parse(json!({"dsn_env": "PG_DSN"})).unwrap();
        assert_eq!(c.max_turn_age, None);
        let c = parse(json!({"dsn_env": "PG_DSN", "max_turn_age_days": 30})).unwrap();
        assert_eq!(c.max_turn_age, Some(Duration::from_secs(86_400 * 30)));
        for bad in [json!(0), json!(36_501), json!("30")] {
            let e = parse(json!({"dsn_env": "PG_DSN", "max_turn_age_days": bad})).unwrap_err();
            assert_eq!(
                e.to_string(),
                "backend_config.max_turn_age_days must be an integer between 1 and 36500"
            );
        }
    }

    #[test]
    fn the_password_never_shows() {
        let c = parse(json!({"dsn": "postgres://u:s3cret@localhost/db", "pool_size": 3})).unwrap();
        let shown = format!("{c:?}");
        assert!(!shown.contains("s3cret"), "{shown}");
        assert_eq!(c.redact("auth s3cret failed"), "auth [redacted] failed");
        let e = parse(json!({"dsn": "postgres://u:s3cret@db.example.com:notaport/db"}))
            .err()
            .unwrap();
        assert!(!e.to_string().contains("s3cret"), "{e}");
        assert!(e.to_string().contains("backend_config.dsn"), "{e}");
    }

    #[test]
    fn remote_hosts_need_tls() {
        let e = parse(json!({"dsn": "postgres://u:s3cret@db.example.com/db"}))
            .err()
            .unwrap();
        assert!(e.to_string().contains("sslmode=require"), "{e}");
        assert!(!e.to_string().contains("s3cret"));
        let c =
            parse(json!({"dsn": "postgres://u:s3cret@db.example.com/db?sslmode=require"})).unwrap();
        assert!(c.tls);
        for local in ["localhost", "127.0.0.2", "[::1]"] {
            parse(json!({ "dsn": format!("postgres://u@{local}/db") })).unwrap();
        }
    }

    #[test]
    fn replica_settings_are_validated() {
        let c = parse(
            json!({"dsn_env": "PG_DSN", "replica_dsn": "postgres://u:r3plica@127.0.0.1:5433/db"}),
        )
        .unwrap();
        let r = c.replica.as_ref().unwrap();
        assert_eq!(
            (r.max_lag, r.wait),
            (Duration::from_secs(5), Duration::from_millis(500))
        );
        assert_eq!(c.redact("r3plica and s3cret"), "[redacted] and [redacted]");
        assert!(!format!("{c:?}").contains("r3plica"));
        assert!(parse(json!({"dsn_env": "PG_DSN"}))
            .unwrap()
            .replica
            .is_none());
        let e = parse(
            json!({"dsn_env": "PG_DSN", "replica_dsn": "postgres://u:r3plica@db.example.com/db"}),
        )
        .err()
        .unwrap();
        assert!(e.to_string().contains("backend_config.replica_dsn"), "{e}");
        assert!(
            e.to_string().contains("sslmode=require") && !e.to_string().contains("r3plica"),
            "{e}"
        );
        let e = parse(json!({"dsn_env": "PG_DSN", "replica_wait_ms": 10}))
            .err()
            .unwrap();
        assert_eq!(
            e.to_string(),
            "backend_config.replica_wait_ms needs backend_config.replica_dsn (or replica_dsn_env)"
        );
        let e = parse(
            json!({"dsn_env": "PG_DSN", "replica_dsn_env": "PG_DSN", "replica_max_lag_ms": 50}),
        )
        .err()
        .unwrap();
        assert_eq!(
            e.to_string(),
            "backend_config.replica_max_lag_ms must be an integer between 100 and 600000"
        );
        let e = parse(json!({"dsn_env": "PG_DSN", "replica_dsn_env": "NOPE"}))
            .err()
            .unwrap();
        assert!(
            e.to_string().contains("backend_config.replica_dsn_env"),
            "{e}"
        );
    }

    #[test]
    fn rules_are_named() {
        let e = parse(json!({"dsn_env": "PG_DSN", "pool_size": 0}))
            .err()
            .unwrap();
        assert_eq!(
            e.to_string(),
            "backend_config.pool_size must be an integer between 1 and 64"
        );
        let e = parse(json!({"dsn_env": "PG_DSN", "recall_top_k": 0}))
            .err()
            .unwrap();
        assert!(e.to_string().contains("backend_config.recall_top_k"), "{e}");
        let e = parse(json!({"dsn_env": "PG_DSN", "schema": "Bad-Name"}))
            .err()
            .unwrap();
        assert!(e.to_string().contains("backend_config.schema"), "{e}");
        let e = parse(json!({"dsn_env": "NOPE"})).err().unwrap();
        assert!(e.to_string().contains("NOPE"), "{e}");
        let e = parse(json!({})).err().unwrap();
        assert!(e.to_string().contains("backend_config.dsn"), "{e}");
        let e = parse(json!({"dsn_env": "PG_DSN", "busy_timeout_ms": 5}))
            .err()
            .unwrap();
        assert!(
            e.to_string()
                .contains("not a setting of the postgres backend"),
            "{e}"
        );
    }

    #[test]
    fn vector_index_settings_are_checked_and_named() {
        let c = parse(json!({"dsn_env": "PG_DSN"})).unwrap();
        assert_eq!(
            c.vector_index,
            VectorIndex::Hnsw {
                ef_search: 50,
                min_items: 20_000
            }
        );
        let c = parse(json!({"dsn_env": "PG_DSN", "hnsw_ef_search": 200, "hnsw_min_items": 0}))
            .unwrap();
        assert_eq!(
            c.vector_index,
            VectorIndex::Hnsw {
                ef_search: 200,
                min_items: 0
            }
        );
        let c = parse(json!({"dsn_env": "PG_DSN", "vector_index": "exact"})).unwrap();
        assert_eq!(c.vector_index, VectorIndex::Exact);
        for (bad, named) in [
            (
                json!({"vector_index": "ivfflat"}),
                "backend_config.vector_index must be hnsw or exact",
            ),
            (
                json!({"hnsw_ef_search": 5}),
                "backend_config.hnsw_ef_search must be an integer between 10 and 1000",
            ),
            (
                json!({"hnsw_ef_search": "100"}),
                "backend_config.hnsw_ef_search must be an integer between 10 and 1000",
            ),
            (
                json!({"vector_index": "exact", "hnsw_ef_search": 100}),
                "backend_config.hnsw_ef_search applies only with vector_index: hnsw",
            ),
            (
                json!({"hnsw_min_items": -1}),
                "backend_config.hnsw_min_items must be an integer between 0 and 100000000",
            ),
            (
                json!({"vector_index": "exact", "hnsw_min_items": 100}),
                "backend_config.hnsw_min_items applies only with vector_index: hnsw",
            ),
        ] {
            let mut config = bad.as_object().unwrap().clone();
            config.insert("dsn_env".into(), json!("PG_DSN"));
            let e = parse(Value::Object(config)).err().unwrap();
            assert_eq!(e.to_string(), named);
        }
    }
}
